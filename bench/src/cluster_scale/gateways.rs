//! The level's gateways: real reference gateways on every node's URL with quorum inboxes
//! (SPEC §16), the latency pair's two (`a`, `b`) and the entity gateways (`g1`, `g2`, …), each
//! holding at most `per_gateway` entities; and the registrations that grow them to a level,
//! watched for the machine's limits.
//!
//! Why a module: how entities are spread and when registering must stop (a refusal, memory low,
//! the declare rate collapsing, the level's time budget) is one question, apart from what a level
//! measures once it got there.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::time::Instant;

use anyhow::Context as _;
use futures_util::StreamExt as _;

use crate::cluster::runs::url_list;
use crate::cluster_scale::broker_view::available_mib;
use crate::cluster_scale::settings::{InboxType, ScaleClusterSettings};
use crate::paths::forward_pull::{SENDER_HOST, WORKER_HOST};
use crate::rig::hosts::Fleet;
use fleet_conformance::broker::Broker;
use fleet_conformance::herdr::InputReaction;

/// Registrations per window of the declare rate (and between two looks at the machine).
const WINDOW: usize = 250;

/// The run's gateways and how many entities each entity gateway holds.
pub(crate) struct Gateways {
    pub fleet: Fleet,
    /// Entities per entity gateway (`g1`…), the main included.
    counts: BTreeMap<String, usize>,
    /// Each entity gateway's main (the workers' parent).
    mains: BTreeMap<String, String>,
    /// Every gateway's `FLEET_AMQP_URL`, rotated so they start on different nodes.
    urls: BTreeMap<String, String>,
    per_gateway: usize,
    /// The first window's declare rate: what a collapse is measured against.
    pub first_rate: Option<f64>,
}

/// Why growing stopped short of the level.
#[derive(Debug)]
pub(crate) struct Short {
    pub reached: usize,
    pub why: String,
}

/// `g<k>`, the k-th entity gateway (from 1).
fn entity_host(k: usize) -> String {
    format!("g{k}")
}

/// How `level` entities are spread: `per_gateway` on each gateway in turn, the rest on the last.
pub(crate) fn spread(level: usize, per_gateway: usize) -> Vec<usize> {
    let per = per_gateway.max(1);
    (0..level.div_ceil(per)).map(|k| per.min(level - k * per)).collect()
}

impl Gateways {
    /// The fleet of the run in `dir`: hosts named for the largest level, nothing started.
    pub(crate) fn new(
        broker: &Broker,
        vhost: &str,
        dir: &Path,
        gateway_cmd: &str,
        s: &ScaleClusterSettings,
    ) -> Gateways {
        let most = s.levels.iter().copied().max().unwrap_or(0);
        let entity_hosts = most.div_ceil(s.per_gateway.max(1));
        let names: Vec<String> = [SENDER_HOST.to_string(), WORKER_HOST.to_string()]
            .into_iter()
            .chain((1..=entity_hosts).map(entity_host))
            .collect();
        let urls: BTreeMap<String, String> = names
            .iter()
            .enumerate()
            .map(|(i, h)| (h.clone(), url_list(broker, vhost, None, i)))
            .collect();
        let tunables = BTreeMap::from([
            ("FLEET_HEARTBEAT_MS".to_string(), s.heartbeat_ms.to_string()),
            ("FLEET_AMQP_HEARTBEAT_S".to_string(), s.amqp_heartbeat_s.to_string()),
        ]);
        let mut tunables = tunables;
        match s.queue_type {
            InboxType::Mixed => {
                // Proposal P1 (docs/CLUSTER-SIZING.md): the reference gateway's own, not-SPEC knob.
                tunables.insert("FLEET_QUEUE_TYPE".into(), "quorum".into());
                tunables.insert("FLEET_WORKER_QUEUE_TYPE".into(), "classic".into());
            }
            t => {
                tunables.insert("FLEET_QUEUE_TYPE".into(), t.as_str().into());
            }
        }
        let first = urls.get(SENDER_HOST).cloned().unwrap_or_default();
        Gateways {
            fleet: Fleet::new(dir.to_path_buf(), first, gateway_cmd.to_string(), tunables, &names),
            counts: BTreeMap::new(),
            mains: BTreeMap::new(),
            urls,
            per_gateway: s.per_gateway.max(1),
            first_rate: None,
        }
    }

    /// Starts `host` on its own URL list (waits for its `/readyz`).
    pub(crate) async fn start(&mut self, host: &str) -> anyhow::Result<()> {
        let env = BTreeMap::from([(
            "FLEET_AMQP_URL".to_string(),
            self.urls.get(host).cloned().unwrap_or_default(),
        )]);
        self.fleet
            .start_host(host, &env)
            .await
            .with_context(|| format!("starting the gateway {host} on the cluster"))
    }

    /// Entities on the entity gateways.
    pub(crate) fn entities(&self) -> usize {
        self.counts.values().sum()
    }

    /// Entity gateways running.
    pub(crate) fn entity_gateways(&self) -> usize {
        self.counts.len()
    }

    /// Every running gateway's host name.
    pub(crate) fn hosts(&self) -> Vec<String> {
        self.fleet.hosts.keys().cloned().collect()
    }

    /// Registers entities until `level` (starting entity gateways as needed), `concurrency` at
    /// once, interleaved over the gateways. Stops short (`Err`) on a refusal, the machine's
    /// available memory under `min_free_mib`, a declare rate collapsed under `collapse` × the
    /// first window's, or the level's time budget spent (counted from `level_started`).
    pub(crate) async fn grow(
        &mut self,
        level: usize,
        s: &ScaleClusterSettings,
        level_started: Instant,
    ) -> Result<(), Short> {
        let targets = spread(level, self.per_gateway);
        for k in 1..=targets.len() {
            let host = entity_host(k);
            if !self.counts.contains_key(&host) {
                self.start(&host).await.map_err(|e| Short {
                    reached: self.entities(),
                    why: format!("{e:#}"),
                })?;
                let main = self
                    .fleet
                    .add(&host, "main", None, InputReaction::StartWorking)
                    .await
                    .map_err(|e| Short {
                        reached: self.entities(),
                        why: format!("registering {host}'s main: {e:#}"),
                    })?;
                self.mains.insert(host.clone(), main.gid);
                self.counts.insert(host, 1);
            }
        }
        // The registrations still missing, interleaved over the gateways.
        let mut queues: Vec<(String, usize)> = targets
            .iter()
            .enumerate()
            .map(|(k, &t)| {
                let host = entity_host(k + 1);
                let have = self.counts.get(&host).copied().unwrap_or(0);
                (host, t.saturating_sub(have))
            })
            .collect();
        let mut jobs = Vec::new();
        // Every `every`-th registration is a main (besides each gateway's first): the fleet's
        // ratio of mains to workers, which decides how many quorum inboxes a mixed run has.
        let every = (self.per_gateway / s.mains_per_gateway.max(1)).max(1);
        while queues.iter().any(|(_, n)| *n > 0) {
            for (host, n) in queues.iter_mut().filter(|(_, n)| *n > 0) {
                jobs.push((host.clone(), s.mains_per_gateway > 1 && jobs.len() % every == every - 1));
                *n -= 1;
            }
        }
        let total = jobs.len();
        let fleet = &self.fleet;
        let mains = &self.mains;
        let mut added = futures_util::stream::iter(jobs)
            .map(|(host, main)| async move {
                let r = if main {
                    fleet.add(&host, "main", None, InputReaction::StartWorking).await
                } else {
                    let parent = mains.get(&host).cloned();
                    fleet
                        .add(&host, "worker", parent.as_deref(), InputReaction::WorksBriefly)
                        .await
                };
                (host, r)
            })
            .buffer_unordered(s.concurrency.max(1));
        let mut done = 0usize;
        let mut times: VecDeque<Instant> = VecDeque::with_capacity(WINDOW + 1);
        let started = Instant::now();
        let mut counts = self.counts.clone();
        let mut first_rate = self.first_rate;
        let short = |counts: &BTreeMap<String, usize>, why: String| Short {
            reached: counts.values().sum(),
            why,
        };
        let mut outcome = Ok(());
        while let Some((host, r)) = added.next().await {
            if let Err(e) = r {
                outcome = Err(short(
                    &counts,
                    format!("a gateway refused a registration on {host}: {e:#}"),
                ));
                break;
            }
            *counts.entry(host).or_insert(0) += 1;
            done += 1;
            let now = Instant::now();
            times.push_back(now);
            if times.len() > WINDOW {
                times.pop_front();
            }
            if !done.is_multiple_of(WINDOW) {
                continue;
            }
            let rate = match times.front() {
                Some(t0) if times.len() > 1 => {
                    (times.len() - 1) as f64 / now.duration_since(*t0).as_secs_f64().max(1e-9)
                }
                _ => 0.0,
            };
            let reference = *first_rate.get_or_insert(rate);
            eprintln!(
                "fleet-bench: scale: {} of {level} entities ({rate:.0} registrations/s now, {:.0} since the level began)",
                counts.values().sum::<usize>(),
                done as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
            if let Some(free) = available_mib()
                && free < s.min_free_mib
            {
                outcome = Err(short(
                    &counts,
                    format!(
                        "the machine's available memory fell to {free} MiB (floor {} MiB)",
                        s.min_free_mib
                    ),
                ));
                break;
            }
            if rate < s.collapse * reference {
                outcome = Err(short(
                    &counts,
                    format!(
                        "the declare rate collapsed: {rate:.1}/s over the last {WINDOW} registrations, under {:.0} % of \
                         the first window's {reference:.1}/s",
                        100.0 * s.collapse
                    ),
                ));
                break;
            }
            if level_started.elapsed() > s.level_budget {
                outcome = Err(short(
                    &counts,
                    format!(
                        "the level's time budget ({} s) was spent registering ({done} of {total} done)",
                        s.level_budget.as_secs()
                    ),
                ));
                break;
            }
        }
        drop(added);
        if first_rate.is_none() && done > 1 {
            first_rate = Some(done as f64 / started.elapsed().as_secs_f64().max(1e-9));
        }
        self.counts = counts;
        self.first_rate = first_rate;
        outcome
    }
}
