//! `--fleet`: presence measured on a fleet of simulated hosts with two real gateways among them.
//!
//! Why: [`crate::fleet::presence_model`] prices presence for fleets of 10 to 1,000 hosts from one
//! gateway's per-message costs; this section puts N hosts on the broker at once and measures what
//! the model predicts. The N−2 simulated hosts live in this process: each has its own ed25519 key
//! (pinned in the peers file the real gateways read, so they trust it), its own exclusive
//! `roster.<host>` queue bound to `roster.#` on `bridge.roster` like a gateway's (TOP-3,
//! dead-lettered to `bridge.dlx`), E entities, and a heartbeat every H — per-entity (PRS-1: one
//! signed PRESENCE per entity plus `_gateway`) or batched (PRB-1: one `_gateway` PRESENCE listing
//! every entity, declaring `presence-batch`). Each verifies what it receives as a gateway would:
//! the suite's own envelope code ([`fleet_conformance::envelope`], not the gateway's) reads the
//! headers and builds the signing input, the signature is checked under the sender's pinned key,
//! `to` must be the routing key and the routing key the sender's `roster.<host>.<from>`, and the
//! JSON body is parsed. They share a few AMQP connections, one channel per host.
//!
//! Two real reference gateways (the [`crate::rig::hosts::Fleet`] helper) each hold E registered
//! entities among them, batching on (the default, `batched` form) or `FLEET_PRESENCE_BATCH=off`
//! (`per-entity` form; the simulated hosts then declare no `presence-batch` either, so PRB-4 would
//! keep a batching gateway per-entity too).
//!
//! Per run (form, H, N) after one settling round: over a window, the messages the simulated hosts
//! received and verified (counted here; broker deliveries/s = that × N/(N−2), the real gateways'
//! two roster queues receiving the same stream as every simulated one — their backlog at the end,
//! from the management API, says whether they did), the broker's, the real gateways' and this
//! process's CPU (`/proc/<pid>/stat`), the real gateways' RSS, then the time for one more
//! simulated host to be listed (its `_gateway` entry) in both real gateways' `GET /v1/roster`.
//! With certificates ([`crate::fleet::trust`]) no key is pinned: every host carries its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use futures_util::StreamExt as _;
use lapin::options::BasicPublishOptions;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde_json::Value;

use crate::fleet::presence_model::Model;
use crate::fleet::sim_hosts::{Beat, Counters, Peers, SimHost, listed, listing_wait_ms, round};
use crate::fleet::sim_result::{FleetResult, FleetRun, FleetSettings, Form, Measured, Predicted, REAL, Trust};
use crate::fleet::trust::{self as fleet_trust, Credentials};
use crate::rig::hosts::Fleet;
use crate::rig::stats::{CpuProbe, process_memory};
use fleet_conformance::broker::Broker;
use fleet_conformance::envelope::Envelope;
use fleet_conformance::herdr::InputReaction;
use fleet_conformance::keys::HostKey;

/// The simulated host started after the window, timed until both real gateways list it.
const NEWCOMER: &str = "sim-new";

fn pct(spent: &crate::rig::stats::CpuSpent, name: &str) -> Option<f64> {
    spent.seconds.get(name).map(|c| 100.0 * c / spent.wall_s.max(1e-9))
}

fn rss_mib(pid: Option<u32>) -> Option<f64> {
    process_memory(pid?).map(|(rss, _, _)| rss as f64 / 1024.0)
}

/// Where the runs happen: the broker, its vhost, the gateway to start, the work directory.
pub struct On<'a> {
    pub broker: &'a Broker,
    pub vhost: &'a str,
    /// One URL per broker node (one on a single node): the simulated hosts' connections are
    /// spread over them round-robin, as a fleet's gateways would be.
    pub node_urls: &'a [String],
    /// Extra environment of the real gateways, by host (on a cluster: `FLEET_AMQP_URL` with
    /// every node, `FLEET_QUEUE_TYPE=quorum`, SPEC §16).
    pub real_env: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub gateway_cmd: &'a str,
    pub work: &'a std::path::Path,
}

/// Runs every (H, form, N) of `s` on `on`, each beside `model` (the scale run's, when it ran).
pub async fn run(on: &On<'_>, s: &FleetSettings, model: Option<&Model>) -> anyhow::Result<FleetResult> {
    let mut runs = Vec::new();
    for &h in &s.heartbeats_ms {
        for &form in &s.forms {
            'sizes: for &n in &s.hosts {
                for turn in 0..s.repeats.max(1) {
                    for trust in Trust::interleaved(&s.trusts, turn) {
                        match measure(on, s, model, (form, h, n, trust, turn)).await? {
                            Some(r) => runs.push(r),
                            None => break 'sizes,
                        }
                        // Each run's line as it ends, so a run cut short still leaves its figures.
                        let so_far = FleetResult {
                            entities: s.entities,
                            verifying_hosts: s.verifying_hosts,
                            window_s: s.window.as_secs_f64(),
                            deliveries_counted_as: String::new(),
                            runs: runs.last().cloned().into_iter().collect(),
                        };
                        for l in crate::fleet::table::lines(&so_far).iter().skip(2) {
                            eprintln!("fleet-bench: {l}");
                        }
                    }
                }
            }
        }
    }
    Ok(FleetResult {
        entities: s.entities,
        verifying_hosts: s.verifying_hosts,
        window_s: s.window.as_secs_f64(),
        deliveries_counted_as: "messages the N−2 simulated hosts received in the window × N/(N−2), over the window \
                                (the real gateways' roster queues get the same stream; their backlog says whether \
                                they kept up)"
            .into(),
        runs,
    })
}

/// One run of (form, H, N, trust, turn), judged; `None` when it did not finish (larger fleets of
/// that form are then skipped).
async fn measure(
    on: &On<'_>,
    s: &FleetSettings,
    model: Option<&Model>,
    (form, h, n, trust, turn): (Form, u64, usize, Trust, usize),
) -> anyhow::Result<Option<FleetRun>> {
    eprintln!(
        "fleet-bench: fleet: {n} hosts × {} entities, H = {h} ms, {}, trust {} (round {}) …",
        s.entities,
        form.label(),
        trust.label(),
        turn + 1
    );
    let dir = on
        .work
        .join(format!("fleet-{}-{}-{h}-{n}-{turn}", form.label(), trust.label()));
    // A broker that enters a memory alarm while the hosts start stops reading their
    // connections: such a run never ends on its own, and a larger N only sooner.
    let certs = if trust == Trust::Certs { 60_000 } else { 0 };
    let limit = Duration::from_millis(listing_wait_ms(h) as u64 + 5 * h + 200_000 + certs) + s.window;
    let Ok(m) = tokio::time::timeout(limit, one(on, dir, s, (form, h, n, trust))).await else {
        eprintln!(
            "fleet-bench: fleet: {n} hosts {} did not finish within {} s (the broker stopped \
             answering: a memory alarm?); larger fleets of this form are skipped",
            form.label(),
            limit.as_secs()
        );
        return Ok(None);
    };
    let p = Predicted::of(form, n, s.entities, h, model);
    let mut r = FleetRun::judge(form, h, n, s.entities, m?, p);
    r.trust = trust;
    eprintln!(
        "fleet-bench: fleet: {:.0} deliveries/s (model {:.0}), {:.0} verified/s per host (model {:.0}), \
         gateways {:?}/{:?} % CPU, listed in {:?} ms{}",
        r.measured.deliveries_per_s,
        r.model.deliveries_per_s,
        r.measured.verified_per_host_per_s,
        r.model.per_gateway_msgs_per_s,
        r.measured.gateway_a_cpu_pct.map(|x| (x * 10.0).round() / 10.0),
        r.measured.gateway_b_cpu_pct.map(|x| (x * 10.0).round() / 10.0),
        r.measured.new_host_listed_ms.map(|x| x.round()),
        if r.keeps_up { "" } else { " — does not keep up" }
    );
    Ok(Some(r))
}

/// One run: the real gateways with E entities each, N−2 simulated hosts, the window, the newcomer.
async fn one(
    on: &On<'_>,
    dir: std::path::PathBuf,
    s: &FleetSettings,
    (form, heartbeat_ms, hosts, trust): (Form, u64, usize, Trust),
) -> anyhow::Result<Measured> {
    let On {
        broker,
        vhost,
        node_urls,
        real_env,
        gateway_cmd,
        ..
    } = *on;
    let url_of = |i: usize| node_urls.get(i % node_urls.len().max(1)).cloned().unwrap_or_default();
    let sims = hosts.saturating_sub(REAL.len()).max(1);
    let names: Vec<String> = REAL
        .iter()
        .map(|s| s.to_string())
        .chain((0..sims).map(|i| format!("sim-{i}")))
        .chain([NEWCOMER.to_string()])
        .collect();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut env = BTreeMap::from([("FLEET_HEARTBEAT_MS".to_string(), heartbeat_ms.to_string())]);
    if form == Form::PerEntity {
        env.insert("FLEET_PRESENCE_BATCH".into(), "off".into());
    }
    let trust_dir = dir.join("trust");
    let mut fleet = Fleet::new(dir, url_of(0), gateway_cmd.to_string(), env, &names);
    // With certificates no host is in a peers file (`[peers]` alone), each has its certificate.
    let creds = match trust {
        Trust::Certs => {
            fleet.pin_only(&[]);
            let keys: Vec<HostKey> = names.iter().filter_map(|h| fleet.key(h).cloned()).collect();
            Some(tokio::task::spawn_blocking(move || Credentials::issue(&trust_dir, &keys)).await??)
        }
        Trust::Peers => None,
    };
    let mut sim_hosts = Vec::new();
    let mut conns = Vec::new();
    let outcome = async {
        for g in REAL {
            let mut env = real_env.get(g).cloned().unwrap_or_default();
            if let Some(c) = &creds {
                env.extend(c.gateway_env(g)?);
            }
            fleet.start_host(g, &env).await?;
        }
        let mut workers = Vec::new();
        for g in REAL {
            workers.push(register(&fleet, g, s.entities).await?);
        }
        let peers: Peers = Arc::new(
            names
                .iter()
                .filter_map(|h| {
                    let k = fleet.key(h)?;
                    let raw = B64.decode(k.public_base64()).ok()?;
                    let vk = VerifyingKey::from_bytes(&<[u8; 32]>::try_from(raw).ok()?).ok()?;
                    Some((h.clone(), vk))
                })
                .collect(),
        );
        for i in 0..s.connections.max(1) {
            conns.push(Connection::connect(&url_of(i), ConnectionProperties::default()).await?);
        }
        let counters = Arc::new(Counters::default());
        let beat = Beat {
            entities: s.entities,
            form,
            heartbeat_ms,
            peers: Arc::clone(&peers),
            counters: Arc::clone(&counters),
            certs: creds.as_ref().map(Credentials::certs),
        };
        for (i, h) in names.iter().skip(REAL.len()).take(sims).enumerate() {
            let key = fleet.key(h).ok_or_else(|| anyhow!("no key for {h}"))?.clone();
            let c = &conns[i % conns.len()];
            let verifying = s.verifying_hosts.is_none_or(|k| i < k);
            let host = SimHost::start(c, key, &beat, false, verifying).await?;
            sim_hosts.push(host);
        }
        // Rejections tapped before settling: connecting to a busy broker must not cut the window.
        let rejections = fleet_trust::Rejections::start(&url_of(0)).await.ok();
        // Every host heartbeats once (rosters fill), then the window.
        tokio::time::sleep(Duration::from_millis(heartbeat_ms + heartbeat_ms / 2)).await;
        let pid = |g: &str| fleet.host(g).ok().and_then(|h| h.gateway.pid());
        let probe = crate::rig::stats::with_brokers(CpuProbe::default())
            .with("gateway_a", pid(REAL[0]))
            .with("gateway_b", pid(REAL[1]))
            .with("bench", Some(std::process::id()));
        let rejected = || rejections.as_ref().map(fleet_trust::Rejections::total);
        let (r0, v0, p0, j0) = (
            counters.received.load(Ordering::Relaxed),
            counters.verified.load(Ordering::Relaxed),
            counters.published.load(Ordering::Relaxed),
            rejected(),
        );
        let a = probe.snapshot();
        tokio::time::sleep(s.window).await;
        let spent = a.until(&probe.snapshot());
        let received = counters.received.load(Ordering::Relaxed) - r0;
        let verified = counters.verified.load(Ordering::Relaxed) - v0;
        let published = counters.published.load(Ordering::Relaxed) - p0;
        let real_rejected = rejected().zip(j0).map(|(n, n0)| n - n0);
        if let Some(r) = rejections {
            r.stop().await;
        }
        let verifiers = s.verifying_hosts.map_or(sims, |k| k.clamp(1, sims));
        let wall = spent.wall_s.max(1e-9);
        let queues = tokio::time::timeout(Duration::from_secs(20), broker.management().queues(vhost))
            .await
            .ok()
            .and_then(Result::ok);
        let ready = |real: bool| {
            queues.as_ref().map(|qs| {
                qs.iter()
                    .filter(|q| {
                        let name = q.name.strip_prefix("roster.").unwrap_or("");
                        !name.is_empty() && REAL.contains(&name) == real
                    })
                    .map(|q| q.messages_ready)
                    .collect::<Vec<u64>>()
            })
        };
        let per_host = received as f64 / sims as f64 / wall;
        let mut m = Measured {
            window_s: wall,
            deliveries_per_s: per_host * hosts.max(sims) as f64,
            verified_per_host_per_s: verified as f64 / verifiers as f64 / wall,
            received_per_host_per_s: per_host,
            verify_failures: counters.failed.load(Ordering::Relaxed),
            sim_published_per_s: published as f64 / wall,
            broker_cpu_pct: crate::rig::stats::broker_seconds(&spent).map(|c| 100.0 * c / wall),
            gateway_a_cpu_pct: pct(&spent, "gateway_a"),
            gateway_b_cpu_pct: pct(&spent, "gateway_b"),
            bench_cpu_pct: pct(&spent, "bench"),
            machine_busy: spent.machine_busy(),
            gateway_a_rss_mib: rss_mib(pid(REAL[0])),
            gateway_b_rss_mib: rss_mib(pid(REAL[1])),
            real_backlog: ready(true).map(|v| v.iter().sum()),
            sim_backlog_max: ready(false).map(|v| v.into_iter().max().unwrap_or(0)),
            real_rejected,
            ..Measured::default()
        };
        // One more host: its first heartbeat at once; both real gateways polled.
        let key = fleet
            .key(NEWCOMER)
            .ok_or_else(|| anyhow!("no key for {NEWCOMER}"))?
            .clone();
        let t0 = Instant::now();
        // A new host has a connection of its own, not one shared with N/connections others.
        // Its channels are opened before it publishes: a broker in a memory alarm stops reading
        // a connection that published, and would never answer them.
        let setup = async {
            let own = Connection::connect(&url_of(sims), ConnectionProperties::default()).await?;
            let pch = own.create_channel().await?;
            let newcomer = SimHost::start(&own, key.clone(), &beat, true, true).await?;
            anyhow::Ok((own, pch, newcomer))
        };
        let Ok(started) = tokio::time::timeout(Duration::from_secs(15), setup).await else {
            eprintln!("fleet-bench: fleet: the broker did not let a new host start within 15 s (memory alarm?)");
            return anyhow::Ok(m);
        };
        let (own, pch, newcomer) = started?;
        let probe = match (newcomer.gids.first(), workers.first().cloned().flatten()) {
            (Some(from), Some(to)) => {
                let from = from.clone();
                let wait = Duration::from_millis(3 * heartbeat_ms + 35_000);
                Some(tokio::spawn(async move {
                    let sent = first_send(pch, &key, &from, &to, t0, wait);
                    tokio::time::timeout(wait + Duration::from_secs(5), sent)
                        .await
                        .unwrap_or_else(|_| Ok(("none".to_string(), None)))
                }))
            }
            _ => None,
        };
        sim_hosts.push(newcomer);
        conns.push(own);
        let deadline = t0 + Duration::from_millis(listing_wait_ms(heartbeat_ms) as u64);
        while (m.new_host_listed_a_ms.is_none() || m.new_host_listed_b_ms.is_none()) && Instant::now() < deadline {
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if m.new_host_listed_a_ms.is_none() && listed(&fleet, REAL[0], NEWCOMER).await {
                m.new_host_listed_a_ms = Some(ms);
            }
            if m.new_host_listed_b_ms.is_none() && listed(&fleet, REAL[1], NEWCOMER).await {
                m.new_host_listed_b_ms = Some(ms);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        m.new_host_listed_ms = match (m.new_host_listed_a_ms, m.new_host_listed_b_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        if let Some(p) = probe {
            match p.await {
                Ok(Ok((outcome, ms))) => {
                    m.new_entity_send_outcome = Some(outcome);
                    m.new_entity_send_ms = ms;
                }
                Ok(Err(e)) => eprintln!("fleet-bench: fleet: no [C-7] probe: {e:#}"),
                Err(e) => eprintln!("fleet-bench: fleet: no [C-7] probe: {e}"),
            }
        }
        // With certificates: one simulated host revoked, timed until rejected everywhere.
        if let (Some(c), Some(victim)) = (&creds, sim_hosts.first()) {
            // Its probe: one entity's PRESENCE (~0.5 KB), not its batch: 200 fan-outs of a 6 KB
            // batch 10 times a second would add to the broker's load what is being timed.
            let (key, gids) = (victim.key.clone(), victim.gids[..1].to_vec());
            let k = key.clone();
            let beat_once = move || round(&k, &gids, Form::PerEntity, heartbeat_ms, None)[..1].to_vec();
            let wait = Duration::from_millis(heartbeat_ms + 10_000);
            match fleet_trust::time_revocation(&fleet, c, &url_of(0), &key, beat_once, wait).await {
                Ok(r) => m.revocation = Some(r),
                Err(e) => eprintln!("fleet-bench: fleet: no revocation timed: {e:#}"),
            }
        }
        anyhow::Ok(m)
    }
    .await;
    for h in sim_hosts {
        h.stop().await;
    }
    for c in conns {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close(200, "done".into())).await;
    }
    fleet.shutdown().await;
    outcome
}

/// A main and E−1 workers (its children) on real gateway `g`; returns a worker's gid, if any.
async fn register(fleet: &Fleet, g: &str, entities: usize) -> anyhow::Result<Option<String>> {
    if entities == 0 {
        return Ok(None);
    }
    let main = fleet.add(g, "main", None, InputReaction::StartWorking).await?;
    let mut added = futures_util::stream::iter(1..entities)
        .map(|_| fleet.add(g, "worker", Some(&main.gid), InputReaction::WorksBriefly))
        .buffer_unordered(8);
    let mut worker = None;
    while let Some(m) = added.next().await {
        worker.get_or_insert(m?.gid);
    }
    Ok(worker)
}

/// [C-7]: a SEND from `from` (an entity of `key`'s host, whose presence may not have arrived
/// yet) to `to`; waits up to `wait` for the INJECTED or FAILED about it on a queue of our own
/// bound to `from` on `bridge.msg`. Returns the outcome and when it came, ms from `t0`.
async fn first_send(
    ch: Channel,
    key: &HostKey,
    from: &str,
    to: &str,
    t0: Instant,
    wait: Duration,
) -> anyhow::Result<(String, Option<f64>)> {
    let mut replies = crate::fleet::scale::tap(&ch, "bridge.msg", from, "c7").await?;
    let body = b"fleet-bench [C-7] probe".to_vec();
    let env = Envelope::new("SEND", from, to, &key.host).signed_by(key, &body);
    let props = BasicProperties::default()
        .with_message_id(env.msg_id().into())
        .with_content_type("text/plain; charset=utf-8".into())
        .with_delivery_mode(2)
        .with_headers(env.to_field_table());
    ch.basic_publish(
        "bridge.msg".into(),
        to.into(),
        BasicPublishOptions::default(),
        &body,
        props,
    )
    .await?;
    let deadline = tokio::time::Instant::now() + wait;
    let outcome = loop {
        match tokio::time::timeout_at(deadline, replies.next()).await {
            Ok(Some(Ok(d))) => {
                let Some(e) = d
                    .properties
                    .headers()
                    .as_ref()
                    .and_then(|t| Envelope::from_field_table(t).ok())
                else {
                    continue;
                };
                if e.value("corrId") != env.msg_id() {
                    continue;
                }
                let ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                match e.kind() {
                    "INJECTED" => break ("injected".to_string(), ms),
                    "FAILED" => {
                        let reason = serde_json::from_slice::<Value>(&d.data)
                            .ok()
                            .and_then(|v| v["reason"].as_str().map(str::to_string))
                            .unwrap_or_default();
                        break (format!("failed:{reason}"), ms);
                    }
                    _ => continue,
                }
            }
            _ => break ("none".to_string(), None),
        }
    };
    let _ = ch.close(200, "done".into()).await;
    Ok(outcome)
}
