//! `--cluster`'s settings and findings: each side's figures, the cluster's cost over each single
//! node, the kills timed and the bound they are judged against.
//!
//! Why a module: the runs ([`crate::cluster::runs`], [`crate::cluster::kill`]) fill these types,
//! the lines ([`crate::cluster::table`]), the report and the goals read them; here, below all of
//! them, none of those imports another to reach them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::paths::forward_pull::{self as paths, ForwardResult, PullResult};
use crate::paths::raw::{EchoResult, QueueKind};
use crate::rig::BrokerInfo;

/// What `--cluster` runs.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The cluster (`process:rabbitmq-cluster` unless told).
    pub cluster_broker: String,
    /// The single node the cluster is compared with (the run's `--broker`).
    pub single_broker: String,
    /// The queue types the single node runs with, one run each, in this order.
    pub single_kinds: Vec<QueueKind>,
    /// Node kills timed for kill-to-ready (0: none).
    pub kills: usize,
    /// `FLEET_AMQP_HEARTBEAT_S` every gateway of the section gets (the bound's second term).
    pub amqp_heartbeat_s: u64,
}

/// The hosts of the section: mains on `a`, workers on `b` ([`paths::pairs`]).
pub(crate) const HOSTS: [&str; 2] = [paths::SENDER_HOST, paths::WORKER_HOST];

/// One broker and queue type, measured: the raw envelope echo around the two paths.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Side {
    /// `single node, classic`, `single node, quorum`, `3-node cluster, quorum`.
    pub label: String,
    pub broker: BrokerInfo,
    pub nodes: usize,
    pub queue_type: QueueKind,
    /// The raw envelope echo before the paths, and after them.
    pub echo: EchoResult,
    pub echo_after: EchoResult,
    pub forward: ForwardResult,
    pub pull: PullResult,
    pub figures: SideFigures,
}

/// What the ratios take from one side: the echo as the mean of its two runs, the paths as measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideFigures {
    pub echo_round_trips_per_s: f64,
    /// One flow, one round trip at a time, p50 (mean of the two runs).
    pub echo_p50_ms: f64,
    pub forward_briefs_per_s: f64,
    /// SEND→INJECTED, one sender, p50.
    pub forward_p50_ms: f64,
    pub pull_replies_per_s: f64,
    /// Reply → an open `bridge_wait`, one flow, p50.
    pub pull_p50_ms: f64,
    /// The gateway's share: forward briefs/s ÷ echo round trips/s, pull likewise.
    pub forward_to_echo: f64,
    pub pull_to_echo: f64,
    /// CPU of every broker node per brief, reply and echo round trip, ms (throughput runs).
    pub broker_cpu_ms_per_brief: Option<f64>,
    pub broker_cpu_ms_per_reply: Option<f64>,
    pub broker_cpu_ms_per_echo: Option<f64>,
}

/// One side's figures over another's (`of` ÷ `over`): rates below 1 and latencies above 1 are
/// what the `of` side costs more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub of: String,
    pub over: String,
    pub echo_rate: f64,
    pub forward_rate: f64,
    pub pull_rate: f64,
    pub echo_p50: f64,
    pub forward_p50: f64,
    pub pull_p50: f64,
}

/// One node kill.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kill {
    /// The host whose node was killed, and that node (from 0).
    pub host: String,
    pub node: usize,
    /// The hosts that had connections on it (the others only had to stay ready).
    pub hosts_on_node: Vec<String>,
    /// Kill → every gateway ready on live nodes; `None` when that did not happen in time.
    pub ready_ms: Option<f64>,
    /// Kill → each gateway first seen ready on live nodes.
    pub per_host_ms: BTreeMap<String, f64>,
    /// Where each gateway's connections were when all were ready.
    pub nodes_after: BTreeMap<String, Vec<usize>>,
    /// How long the broker took to show the kill (`kill_node`), and to be whole again after
    /// `start_node` + `ensure_whole`.
    pub kill_seen_ms: f64,
    pub restart_ms: f64,
    /// Why it was not ready, when it was not.
    pub not_ready: Option<String>,
    /// Each gateway's states from the kill on, e.g. `/readyz 200 on [1]` (still on the killed
    /// node) → `/readyz 503 no connection` → `ready on [2]`: where a slow kill's time went.
    #[serde(default)]
    pub phases: BTreeMap<String, Vec<Phase>>,
}

/// Every kill, and the CLU-5(c) bound they are judged against.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KillToReady {
    pub heartbeat_ms: u64,
    pub amqp_heartbeat_s: u64,
    /// 2H + 2 AMQP heartbeats.
    pub bound_ms: f64,
    /// How long one kill was waited for before it counted as not ready.
    pub wait_ms: f64,
    pub kills: Vec<Kill>,
    /// Over the kills that became ready.
    pub median_ms: Option<f64>,
    /// Over every kill: a kill never ready counts as the wait.
    pub worst_ms: Option<f64>,
}

/// What `--cluster` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterResult {
    pub heartbeat_ms: u64,
    pub amqp_heartbeat_s: u64,
    /// The single-node sides, then the cluster.
    pub sides: Vec<Side>,
    /// The cluster over each single-node side; single quorum over single classic when both ran.
    pub costs: Vec<Cost>,
    pub kill_to_ready: Option<KillToReady>,
}

impl ClusterResult {
    /// The cluster's side (the last one).
    pub fn cluster(&self) -> Option<&Side> {
        self.sides.last().filter(|s| s.nodes > 1)
    }
}

/// Whole-broker CPU ms per unit: the sum of every `broker*` process of a probe's figures.
fn broker_ms(per: &BTreeMap<String, f64>) -> Option<f64> {
    let parts: Vec<f64> = per
        .iter()
        .filter(|(k, _)| k.starts_with("broker"))
        .map(|(_, v)| *v)
        .collect();
    (!parts.is_empty()).then(|| parts.iter().sum())
}

fn div(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

impl SideFigures {
    pub(crate) fn of(echo: &EchoResult, after: &EchoResult, f: &ForwardResult, p: &PullResult) -> SideFigures {
        let echo_rate = (echo.round_trips_per_s + after.round_trips_per_s) / 2.0;
        SideFigures {
            echo_round_trips_per_s: echo_rate,
            echo_p50_ms: (echo.single_round_trip.p50_ms + after.single_round_trip.p50_ms) / 2.0,
            forward_briefs_per_s: f.briefs_per_s,
            forward_p50_ms: f.latency.p50_ms,
            pull_replies_per_s: p.replies_per_s,
            pull_p50_ms: p.latency.p50_ms,
            forward_to_echo: div(f.briefs_per_s, echo_rate),
            pull_to_echo: div(p.replies_per_s, echo_rate),
            broker_cpu_ms_per_brief: broker_ms(&f.cpu_ms_per_brief),
            broker_cpu_ms_per_reply: broker_ms(&p.cpu_ms_per_reply),
            broker_cpu_ms_per_echo: match (
                broker_ms(&echo.cpu_ms_per_round_trip),
                broker_ms(&after.cpu_ms_per_round_trip),
            ) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                (a, b) => a.or(b),
            },
        }
    }
}

impl Cost {
    /// `of` ÷ `over`, figure by figure.
    pub fn of(of: &Side, over: &Side) -> Cost {
        let (a, b) = (&of.figures, &over.figures);
        Cost {
            of: of.label.clone(),
            over: over.label.clone(),
            echo_rate: div(a.echo_round_trips_per_s, b.echo_round_trips_per_s),
            forward_rate: div(a.forward_briefs_per_s, b.forward_briefs_per_s),
            pull_rate: div(a.pull_replies_per_s, b.pull_replies_per_s),
            echo_p50: div(a.echo_p50_ms, b.echo_p50_ms),
            forward_p50: div(a.forward_p50_ms, b.forward_p50_ms),
            pull_p50: div(a.pull_p50_ms, b.pull_p50_ms),
        }
    }
}

/// The costs to print: the cluster over each single-node side, then single quorum over single
/// classic (the queue type alone) when both ran.
pub fn costs(sides: &[Side]) -> Vec<Cost> {
    let mut out = Vec::new();
    let Some((cluster, singles)) = sides.split_last() else {
        return out;
    };
    if cluster.nodes > 1 {
        out.extend(singles.iter().map(|s| Cost::of(cluster, s)));
    }
    let kind = |k: QueueKind| singles.iter().find(|s| s.queue_type == k);
    if let (Some(q), Some(c)) = (kind(QueueKind::Quorum), kind(QueueKind::Classic)) {
        out.push(Cost::of(q, c));
    }
    out
}

/// The CLU-5(c) bound: 2H plus two AMQP heartbeats, ms.
pub fn bound_ms(heartbeat_ms: u64, amqp_heartbeat_s: u64) -> f64 {
    (2 * heartbeat_ms + 2_000 * amqp_heartbeat_s) as f64
}

/// Median (upper of the middle two) and worst of the kills; a kill never ready counts as the wait.
pub(crate) fn summary(kills: &[Kill], wait_ms: f64) -> (Option<f64>, Option<f64>) {
    let mut ready: Vec<f64> = kills.iter().filter_map(|k| k.ready_ms).collect();
    ready.sort_by(f64::total_cmp);
    let median = (!ready.is_empty()).then(|| ready[ready.len() / 2]);
    let worst = kills
        .iter()
        .map(|k| k.ready_ms.unwrap_or(wait_ms))
        .max_by(f64::total_cmp);
    (median, worst)
}

/// A gateway's state from some time after the kill on (ms), as `look` ([`crate::cluster::kill`]) saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub at_ms: f64,
    pub state: String,
}
