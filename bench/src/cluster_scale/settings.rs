//! `--scale`'s settings and findings: what a run is told, and what each level measured (the
//! broker at rest, a node killed, the whole cluster restarted, a brief and a reply through it).
//!
//! Why a module: the level run and its parts fill these types, the table prints them and the
//! report holds them; here, below all of them, none of those imports another to reach them.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::rig::BrokerInfo;
use crate::rig::stats::Latency;

/// What `--scale` runs.
#[derive(Debug, Clone)]
pub struct ScaleClusterSettings {
    /// The cluster (`process:rabbitmq-cluster` unless told).
    pub broker: String,
    /// Registered entities (quorum inboxes) per level, ascending.
    pub levels: Vec<usize>,
    /// At most this many entities on one gateway: a level of N entities runs on ⌈N ÷ this⌉
    /// gateways, so no single gateway is the limit.
    pub per_gateway: usize,
    /// Registrations in flight at once, over all gateways.
    pub concurrency: usize,
    /// Persistent REPLYs confirmed before the whole-cluster restart and drained after it.
    pub kept: usize,
    /// Briefs and replies timed one at a time, per level (and on the idle cluster).
    pub latency_samples: usize,
    /// A level still registering after this long is stopped there.
    pub level_budget: Duration,
    /// A level is stopped when the machine's available memory falls below this (MiB).
    pub min_free_mib: u64,
    /// A level is stopped when the declare rate (a rolling window) falls below this fraction of
    /// the run's first window: the broker no longer keeps up.
    pub collapse: f64,
    /// How long a node kill or the whole-cluster restart may take to recover before it counts as
    /// not recovered.
    pub recovery_wait: Duration,
    /// Measure `POST /api/rebalance/queues` after the killed node is back.
    pub rebalance: bool,
    /// H, every gateway's `FLEET_HEARTBEAT_MS`.
    pub heartbeat_ms: u64,
    /// Every gateway's `FLEET_AMQP_HEARTBEAT_S`.
    pub amqp_heartbeat_s: u64,
    /// The nodes sample at RabbitMQ's defaults (quorum tick and statistics every 5 s, default
    /// retention) rather than the suite's fast sampling.
    pub rabbitmq_sampling: bool,
    /// The nodes' `quorum_tick_interval`, ms, with RabbitMQ's sampling (its default: 5,000).
    pub quorum_tick_ms: u32,
    /// How long a restarted node may take to answer (a whole-cluster restart recovers a member of
    /// every queue before a node answers).
    pub restart_boot: Duration,
    /// The inboxes' queue type: SPEC §16's `quorum`, or `classic` to measure what a fleet would
    /// save (and lose) with classic inboxes on the same cluster.
    pub queue_type: InboxType,
    /// Mains per entity gateway (the rest are workers, each gateway's first main their parent).
    pub mains_per_gateway: usize,
}

/// What every entity gateway's `FLEET_QUEUE_TYPE` says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InboxType {
    #[default]
    Quorum,
    Classic,
    /// Proposal P1: mains' inboxes (and the host queues) quorum, workers' classic — the
    /// reference gateway's `FLEET_WORKER_QUEUE_TYPE`, which is not SPEC.
    Mixed,
}

impl InboxType {
    /// The `FLEET_QUEUE_TYPE` value (and the management API's queue `type`); `mixed` for both.
    pub fn as_str(self) -> &'static str {
        match self {
            InboxType::Quorum => "quorum",
            InboxType::Classic => "classic",
            InboxType::Mixed => "mixed",
        }
    }

    /// Whether a queue the management API lists with `type` is one of the run's inboxes' kind.
    pub fn lists(self, queue_type: &str) -> bool {
        match self {
            InboxType::Mixed => queue_type == "quorum" || queue_type == "classic",
            t => queue_type == t.as_str(),
        }
    }

    /// Whether some inboxes are classic: nothing takes a dead node's classic queues over.
    pub fn has_classic(self) -> bool {
        self != InboxType::Quorum
    }

    /// `quorum`, `classic` or `mixed`.
    pub fn parse(s: &str) -> Result<InboxType, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "quorum" => Ok(InboxType::Quorum),
            "classic" => Ok(InboxType::Classic),
            "mixed" => Ok(InboxType::Mixed),
            other => Err(format!("--scale-queue-type {other}: expected quorum, classic or mixed")),
        }
    }
}

/// What `--scale` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterScaleResult {
    pub broker: BrokerInfo,
    pub nodes: usize,
    /// The levels asked for.
    pub requested: Vec<usize>,
    pub per_gateway: usize,
    pub concurrency: usize,
    pub heartbeat_ms: u64,
    pub amqp_heartbeat_s: u64,
    /// Where the disk figures come from (the nodes' data dirs, and how they were read).
    pub disk_source: String,
    /// How the nodes sampled (RabbitMQ's defaults, or the suite's fast sampling).
    #[serde(default)]
    pub sampling: String,
    /// The inboxes' queue type.
    #[serde(default)]
    pub queue_type: InboxType,
    /// Mains per entity gateway (the rest workers).
    #[serde(default)]
    pub mains_per_gateway: usize,
    /// The cluster with only the latency pair's two gateways on it (no level yet).
    pub idle: AtRest,
    /// A brief and a reply through the idle cluster.
    pub idle_latency: Option<Latencies>,
    /// One per level measured.
    pub levels: Vec<Level>,
    /// Why the run stopped before its last level, if it did.
    pub stopped: Option<Stopped>,
}

/// The cluster at rest: what each node holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AtRest {
    /// Entities registered on the level's gateways (the latency pair's two not counted).
    pub entities: usize,
    /// Queues of the run's inbox type in its vhost (inboxes, every gateway's `control.<host>`,
    /// `bridge.dlq`). Named for SPEC §16's quorum inboxes; with `--scale-queue-type classic`, the
    /// classic ones.
    pub quorum_queues: usize,
    pub nodes: Vec<NodeFigures>,
    /// The machine's available memory (`/proc/meminfo` MemAvailable), MiB.
    pub machine_available_mib: Option<u64>,
    /// CPU over a window at rest (before the figures above were read).
    #[serde(default)]
    pub cpu: Option<RestCpu>,
}

/// CPU at rest, over a window: what the queues cost when nothing flows but presence.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RestCpu {
    pub window_s: f64,
    /// Every broker node together, % of one core (process provider; `None` for containers).
    pub broker_pct: Option<f64>,
    /// Every gateway together, % of one core.
    pub gateways_pct: f64,
    /// The whole machine busy, % of all its cores.
    pub machine_pct: f64,
}

/// One node as its management API describes it (`/api/nodes/<name>?memory=true`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeFigures {
    pub name: String,
    /// Node index (0-based, the provider's order).
    pub index: Option<usize>,
    pub mem_used: u64,
    pub mem_limit: u64,
    pub mem_alarm: bool,
    /// Erlang processes.
    pub proc_used: u64,
    pub proc_total: u64,
    /// The node's own memory breakdown, bytes per category (`quorum_queue_procs`, `quorum_ets`,
    /// `binary`, …).
    pub breakdown: BTreeMap<String, u64>,
    /// The node's data dir (`db_dir`), bytes on disk.
    pub disk_bytes: Option<u64>,
    /// The node's OS process RSS (process provider), KiB.
    pub rss_kib: Option<u64>,
}

/// A level's figures over the idle cluster's, per quorum queue added.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PerQueue {
    /// Quorum queues added since the idle cluster.
    pub queues: usize,
    /// Broker memory (every node's `mem_used` summed) per queue added, bytes: one queue is a
    /// member on each node.
    pub mem_bytes: f64,
    /// The same on one node (÷ nodes).
    pub mem_bytes_per_node: f64,
    /// The nodes' data dirs per queue added, bytes (summed over nodes).
    pub disk_bytes: Option<f64>,
    /// Erlang processes per queue added (summed over nodes).
    pub procs: f64,
}

/// A brief and a reply, one at a time.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Latencies {
    /// SEND→INJECTED at the MCP client.
    pub send_injected: Latency,
    /// `bridge_reply` → the main's open `bridge_wait` returns it.
    pub reply: Latency,
    /// Briefs that did not come back `injected`.
    pub failures: usize,
}

/// Leaders per node (by index), and queues listing no leader on a live node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leaders {
    pub per_node: Vec<usize>,
    pub none: usize,
}

/// One level: registered, measured at rest, a node killed, the cluster restarted.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Level {
    pub entities: usize,
    pub gateways: usize,
    /// Entities this level registered, and the wall time it took.
    pub registered: usize,
    pub register_s: f64,
    /// Registration wall time ÷ entities registered (with `concurrency` in flight), ms.
    pub declare_ms_per_inbox: f64,
    pub declare_per_s: f64,
    pub at_rest: AtRest,
    pub per_queue: PerQueue,
    pub latency: Option<Latencies>,
    pub kill: Option<NodeKill>,
    pub restart: Option<FullRestart>,
    /// The level's wall time, registrations to the end of its restart.
    pub level_s: f64,
}

/// A node SIGKILLed and started again (CLU-5).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct NodeKill {
    pub node: usize,
    pub leaders_before: Leaders,
    /// Kill → the others see the node down, ms.
    pub kill_seen_ms: f64,
    /// Kill → every quorum queue lists a leader on a live node, ms.
    pub leaders_ms: Option<f64>,
    /// Kill → every gateway answers `/readyz` 200 (looked at once the kill was seen), ms.
    pub gateways_ms: Option<f64>,
    pub leaders_after_kill: Leaders,
    /// Start → the node back in the cluster, ms.
    pub node_back_ms: Option<f64>,
    /// Start → every quorum queue lists every member online, ms.
    pub members_back_ms: Option<f64>,
    /// Leaders once the node is back, before any rebalance: whether one is needed.
    pub leaders_after_return: Leaders,
    /// Classic inboxes: those not available (home node dead) at the end of the kill's window.
    #[serde(default)]
    pub inboxes_down: Option<usize>,
    /// Classic inboxes: a brief sent (`bridge_send` from the latency pair's main) to an entity
    /// whose inbox went down with the node, during the kill: what the sender was told, and when.
    #[serde(default)]
    pub down_send: Option<String>,
    /// Classic inboxes: start → every inbox available again (its home node back), ms.
    #[serde(default)]
    pub inboxes_back_ms: Option<f64>,
    /// Start → every gateway answers `/readyz` 200 again (classic inboxes: those whose home node
    /// died come back only with it), ms.
    #[serde(default)]
    pub gateways_after_return_ms: Option<f64>,
    pub rebalance: Option<Rebalance>,
    /// What did not recover within the wait, if anything.
    pub not_recovered: Option<String>,
}

/// `POST /api/rebalance/queues` (what `rabbitmq-queues rebalance quorum` does), timed.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Rebalance {
    /// Request → every node leads its share (within the tolerance of [`balanced`]), ms.
    pub balanced_ms: Option<f64>,
    pub leaders_after: Leaders,
    pub note: Option<String>,
}

/// Every node stopped and started again, with messages held.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FullRestart {
    /// REPLYs confirmed (the worker's `bridge_reply` answered) before the restart.
    pub kept: usize,
    /// Stopping every node, ms.
    pub halt_ms: f64,
    /// Starting every node until the cluster answers (the provider's readiness), ms.
    pub broker_back_ms: Option<f64>,
    /// Start → every gateway answers `/readyz` 200, ms.
    pub gateways_ms: Option<f64>,
    /// Start → every quorum queue lists a leader, ms.
    pub leaders_ms: Option<f64>,
    /// Kept REPLYs the main drained after the restart (distinct), and copies seen twice.
    pub drained: usize,
    pub duplicates: usize,
    /// Of the kept REPLYs not drained, how many lie in `bridge.dlq` (a receiving gateway rejected
    /// them: its log says which check); `None` when none was missing or the look failed.
    #[serde(default)]
    pub dead_lettered: Option<usize>,
    /// The dead-lettered ones by the check the receiving gateway's log names for their `msgId`
    /// (`not in the log` when no rejection line names it).
    #[serde(default)]
    pub dead_lettered_why: BTreeMap<String, usize>,
    /// When some were not drained: the main's inbox then, (ready, unacknowledged) messages.
    #[serde(default)]
    pub inbox_left: Option<(u64, u64)>,
    pub not_recovered: Option<String>,
}

/// Why the run stopped before a level, and where.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stopped {
    /// The level that was not completed.
    pub level: usize,
    /// Entities registered when it stopped.
    pub reached: usize,
    pub why: String,
    /// The cluster at rest with the entities reached, when the level stopped while registering
    /// and the cluster still answered: what the machine held where it stopped.
    #[serde(default)]
    pub at_reached: Option<AtRest>,
}

/// Whether `leaders` is balanced: every node leads at least 80 % of its even share (less one).
pub fn balanced(leaders: &Leaders) -> bool {
    let n = leaders.per_node.len();
    if n == 0 {
        return false;
    }
    let total: usize = leaders.per_node.iter().sum();
    let floor = (0.8 * total as f64 / n as f64 - 1.0).max(0.0);
    leaders.none == 0 && leaders.per_node.iter().all(|&l| l as f64 >= floor)
}

impl AtRest {
    /// Every node's `mem_used` summed.
    pub fn mem_used(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_used).sum()
    }

    /// Every node's Erlang processes summed.
    pub fn procs(&self) -> u64 {
        self.nodes.iter().map(|n| n.proc_used).sum()
    }

    /// Every node's data dir summed (`None` when any is unknown).
    pub fn disk(&self) -> Option<u64> {
        self.nodes.iter().map(|n| n.disk_bytes).sum()
    }

    /// One memory category summed over the nodes.
    pub fn category(&self, name: &str) -> u64 {
        self.nodes.iter().filter_map(|n| n.breakdown.get(name)).sum()
    }
}

impl PerQueue {
    /// `level` over `idle`, per quorum queue added.
    pub fn of(idle: &AtRest, level: &AtRest) -> PerQueue {
        let queues = level.quorum_queues.saturating_sub(idle.quorum_queues);
        let q = queues.max(1) as f64;
        let delta = |a: u64, b: u64| b as f64 - a as f64;
        let nodes = level.nodes.len().max(1) as f64;
        if queues == 0 {
            return PerQueue::default();
        }
        let mem = delta(idle.mem_used(), level.mem_used()) / q;
        let disk = match (idle.disk(), level.disk()) {
            (Some(a), Some(b)) => Some(delta(a, b) / q),
            _ => None,
        };
        PerQueue {
            queues,
            mem_bytes: mem,
            mem_bytes_per_node: mem / nodes,
            disk_bytes: disk,
            procs: delta(idle.procs(), level.procs()) / q,
        }
    }
}
