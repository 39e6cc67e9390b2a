//! What the cluster steps keep between steps of a scenario ([`ClusterState`]): the node struck
//! and when, what each host held before, the relays, the replies sent in the background, the
//! probe's own consumer, the seeded inbox.
//!
//! Exists as a leaf below the world, which holds it ([`crate::world::FleetWorld::cluster`]) and
//! ends what runs in it at cleanup: kept with the cluster steps, the world would import the steps
//! that import the world.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the cluster steps keep between steps of one scenario.
#[derive(Default)]
pub struct ClusterState {
    /// Set by the runner for a scenario tagged [`NODE_FAULT_TAGS`](super::NODE_FAULT_TAGS): its
    /// vhost is made exclusive and the cluster is made whole again at cleanup.
    pub exclusive: bool,
    /// The node killed or cut off last, and when.
    pub struck: Option<(usize, Instant)>,
    /// Per host, when it was first ready again on a live node after the strike (watched from the
    /// strike on, `watch_ready_again`).
    pub ready_again: BTreeMap<String, Arc<Mutex<Option<Duration>>>>,
    /// Per host, how many connections the broker listed under its login just before the strike.
    pub held_before: BTreeMap<String, usize>,
    /// The node cut off and not healed yet.
    pub partitioned: Option<usize>,
    /// When the background replies were started (`stall.rs` counts from the cut to their end).
    pub replies_started: Option<Instant>,
    /// The host whose gateway reaches each node through a relay of the suite's, and the relays by
    /// node (`stall.rs`).
    pub relayed: Option<String>,
    pub relays: Vec<(usize, Arc<fleet_conformance::proxy::Proxy>)>,
    /// From the cut on: the first lasting connection through another node's relay (`stall.rs`).
    pub moved: Option<Moved>,
    /// The replies sent in the background.
    pub replies: Option<ReplyRun>,
    /// Deliveries handed to the probe's own consumer of an inbox (CLU-3), with the consumer task.
    pub standby: Option<Standby>,
    /// The classic inbox the conversion scenario seeded: its entity's name, gid and the msgIds
    /// in the order they were published.
    pub seeded: Option<Seeded>,
    /// A registration the gateway refused while the inbox was classic: (host, name, pane), made
    /// again once the inbox is quorum.
    pub pending_registration: Option<(String, String, String)>,
    /// The endpoint with another CA's certificate a host was given among its nodes (CLU-1 over
    /// TLS, `tls.rs`).
    pub rogue: Option<fleet_conformance::tls::RogueEndpoint>,
}

/// The first lasting connection through another node's relay since the cut: (node, when it opened
/// from the cut) (`stall.rs`).
pub type Moved = Arc<Mutex<Option<(usize, Duration)>>>;

/// The probe's own consumer of an inbox (CLU-3): what it was handed, its task, its connection.
pub type Standby = (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>, lapin::Connection);

/// A classic inbox seeded for the conversion (CLU-7).
pub struct Seeded {
    pub name: String,
    pub gid: String,
    pub from: String,
    pub ids: Vec<String>,
}

/// Replies a worker sends one after another in the background while a node goes.
pub struct ReplyRun {
    pub worker: String,
    pub texts: Vec<String>,
    pub outcomes: Arc<Mutex<Vec<ReplyOutcome>>>,
    pub task: Option<tokio::task::JoinHandle<()>>,
}

/// How one `bridge_reply` ended.
#[derive(Debug, Clone)]
pub struct ReplyOutcome {
    pub text: String,
    /// The msgId it returned (the broker confirmed it), or why it failed.
    pub result: Result<String, String>,
    pub took: Duration,
    /// It had not returned when its bound (the inject bound, scaled, plus a second) passed.
    pub hung: bool,
}

impl ReplyRun {
    pub(super) fn outcomes(&self) -> Vec<ReplyOutcome> {
        self.outcomes.lock().map(|o| o.clone()).unwrap_or_default()
    }
}
