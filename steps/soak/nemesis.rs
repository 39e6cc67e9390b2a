//! The nemesis: what it can strike ([`Strike`]), its reproducible random picks ([`Rng`]), the
//! clock the operations are paced by ([`NemesisClock`]), and the record of each strike
//! ([`Event`]).

use std::time::{Duration, Instant};

/// One thing the nemesis does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Strike {
    /// SIGKILL a worker's gateway and start it again (same state dir, same port).
    Kill,
    /// SIGSTOP a worker's gateway for half a period, then SIGCONT.
    Pause,
    /// Cut every connection through the suite's link to the broker.
    Cut,
    /// Close one random connection of the scenario's vhost from the broker side (management API).
    Close,
    /// Restart the broker on its data (process and container providers; on a cluster every node,
    /// together).
    BrokerRestart,
    /// Cluster only: SIGKILL one node (one that holds a gateway connection, else any; seeded),
    /// keep it down for a period while operations flow on the other two, start it again and wait
    /// until the cluster is whole (never two nodes down: a quorum needs 2 of 3).
    NodeKill,
    /// Cluster only: the same with the node leading the main's inbox (its quorum queue's leader).
    LeaderKill,
    /// Cluster on the container provider only: cut one node off the others' network (seeded, as
    /// `NodeKill` picks), keep it cut off for a period, heal it and wait until the cluster is whole.
    Partition,
    /// Gateways on certificates only (SPEC §18, capability `membership`): one host (seeded, the
    /// main's included) rotates its key mid-traffic — a new key and a new certificate from the
    /// fleet CA, the key file then the certificate file replaced by rename, then SIGHUP (MEM-3,
    /// CONTRACT §12) — and its `_gateway` presence with the new certificate, signed with the new
    /// key, is awaited on the wire ([`super::trust`]).
    Rotate,
    /// Gateways on certificates only: one host's certificate (seeded, the main's included) is
    /// revoked in every revocation list (by serial or by key id, in turn), kept revoked for a
    /// period while operations flow (its messages are rejected `revoked`, MEM-4), then a new
    /// certificate with a new serial over the same key is installed (rename, SIGHUP); the old
    /// revocation stays ([`super::trust`]).
    RevokeRestore,
    /// A whole site restarting ([C-25], issue 58): every gateway SIGKILLed and the broker (every
    /// node of a cluster) stopped, together; then the broker and each gateway come back in a
    /// seeded random order, each at its own offset within [`SITE_SPREAD`] (the broker's nodes
    /// together, as the providers start them), and every gateway is waited for to be ready.
    SiteRestart,
}

/// How far apart the parts of a site come back after [`Strike::SiteRestart`] (nominal, stretched
/// by the time knob): "back in a random order over up to 60 s".
pub(super) const SITE_SPREAD: Duration = Duration::from_secs(60);

impl Strike {
    pub(super) const ALL: [Strike; 11] = [
        Strike::Kill,
        Strike::Pause,
        Strike::Cut,
        Strike::Close,
        Strike::BrokerRestart,
        Strike::NodeKill,
        Strike::LeaderKill,
        Strike::Partition,
        Strike::Rotate,
        Strike::RevokeRestore,
        Strike::SiteRestart,
    ];

    /// The names `FLEET_SOAK_NEMESIS` takes, for its error message.
    pub(super) const NAMES: &'static str = "kill, pause, cut, close, restart, node-kill, leader-kill, partition, rotate, revoke-restore, site (and default)";

    /// Whether it strikes one node of a cluster.
    pub(super) fn is_node(self) -> bool {
        matches!(self, Strike::NodeKill | Strike::LeaderKill | Strike::Partition)
    }

    /// Whether it stops the broker (the scenario must have it to itself).
    pub(super) fn restarts_broker(self) -> bool {
        matches!(self, Strike::BrokerRestart | Strike::SiteRestart)
    }

    /// Whether it needs gateways on certificates (SPEC §18).
    pub(super) fn is_trust(self) -> bool {
        matches!(self, Strike::Rotate | Strike::RevokeRestore)
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Strike::Kill => "gateway_kill_restart",
            Strike::Pause => "gateway_stop_cont",
            Strike::Cut => "link_cut",
            Strike::Close => "connection_close",
            Strike::BrokerRestart => "broker_restart",
            Strike::NodeKill => "node_kill_restart",
            Strike::LeaderKill => "leader_kill_restart",
            Strike::Partition => "node_partition_heal",
            Strike::Rotate => "key_rotation",
            Strike::RevokeRestore => "cert_revoke_restore",
            Strike::SiteRestart => "site_restart",
        }
    }

    pub(super) fn parse(s: &str) -> Option<Strike> {
        match s.trim() {
            "kill" => Some(Strike::Kill),
            "pause" | "stop" => Some(Strike::Pause),
            "cut" => Some(Strike::Cut),
            "close" => Some(Strike::Close),
            "restart" | "broker" => Some(Strike::BrokerRestart),
            "node-kill" | "node_kill" | "node" => Some(Strike::NodeKill),
            "leader-kill" | "leader_kill" | "leader" => Some(Strike::LeaderKill),
            "partition" => Some(Strike::Partition),
            "rotate" | "rotation" => Some(Strike::Rotate),
            "revoke-restore" | "revoke_restore" | "revoke" => Some(Strike::RevokeRestore),
            "site" | "site-restart" | "site_restart" => Some(Strike::SiteRestart),
            _ => None,
        }
    }
}

/// A tiny xorshift generator: the suite has no `rand`, and the picks only need to be spread and
/// reproducible from the printed seed.
pub(super) struct Rng(u64);

impl Rng {
    /// The seed goes through splitmix64 first: xorshift's first outputs from small, close seeds
    /// are close too, and `seed | 1` alone made an even seed and the odd one after it the same run.
    pub(super) fn new(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub(super) fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        if n == 0 { 0 } else { (x % n as u64) as usize }
    }
}

/// How far the nemesis is, in strikes: the strikes begun, plus how far the current one and the
/// period after it have got (time since it began over its length so far plus a period, at most
/// just under one). Continuous and even in time, strikes included: operations paced by it go
/// out during strikes (a frozen gateway, a broker restarting) as much as between them.
pub(super) struct NemesisClock {
    every: Duration,
    /// Strikes begun, when the last one began (or the run), how long it took once it ended.
    state: std::sync::Mutex<(usize, Instant, Option<Duration>)>,
}

impl NemesisClock {
    pub(super) fn new(every: Duration) -> NemesisClock {
        NemesisClock {
            every,
            state: std::sync::Mutex::new((0, Instant::now(), Some(Duration::ZERO))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Instant, Option<Duration>)> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(super) fn progress(&self) -> f64 {
        let (begun, began, took) = *self.lock();
        let t = began.elapsed();
        let slot = took.unwrap_or(t) + self.every;
        begun as f64 + (t.as_secs_f64() / slot.as_secs_f64().max(0.001)).min(0.999)
    }

    pub(super) fn begin(&self) {
        let mut state = self.lock();
        *state = (state.0 + 1, Instant::now(), None);
    }

    pub(super) fn end(&self) {
        let mut state = self.lock();
        state.2 = Some(state.1.elapsed());
    }
}

/// One strike of the nemesis.
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub(super) at: Duration,
    pub(super) strike: Strike,
    pub(super) target: String,
    pub(super) took: Duration,
    /// Whether it did what it meant to (a strike that found nothing to hit, or could not hit it,
    /// is recorded all the same).
    pub(super) done: bool,
    pub(super) detail: String,
}
