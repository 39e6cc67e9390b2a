//! The hub: the gateway's shared state, and the connection it keeps for every spec area.
//!
//! One `Gateway` lives per process. This folder owns the broker connection's whole life —
//! connecting and node failover, declaring, reconnecting (`connection.rs`), the per-entity inbox
//! consumers (`inboxes.rs`), the stall detector (`stall.rs`) and the orderly stop (`stop.rs`) — and
//! holds the state the areas share. The spec areas (forward path, pull path, presence, …) extend
//! `Gateway` with `impl` blocks in their own modules; the hub imports none of them. It calls them
//! through [`Areas`] at the connection's moments (declared here, beside the `Gateway` it takes),
//! and the per-area state it holds lives in files of their own below both (`pull::held`,
//! `forward::pending`, `conversation::turns`, `presence::roster`, `presence::sync`). A lost
//! connection is repaired by reconnecting with backoff and re-attaching everything (CON-3); held
//! deliveries die with it and the broker redelivers them.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use lapin::message::Delivery;
use lapin::options::BasicRejectOptions;
use lapin::{Channel, Connection};
use tokio::sync::{RwLock, watch};
use tracing::{Instrument as _, info_span, warn};

use crate::config::Config;
use crate::conversation::turns::Conversations;
use crate::envelope::Envelope;
use crate::forward::pending::PendingSends;
use crate::herdr::Herdr;
use crate::metrics::Metrics;
use crate::presence::roster::Roster;
use crate::presence::sync::RosterSync;
use crate::publish::Publisher;
use crate::pull::held::PullState;
use crate::registry::{Entity, Registry};
use crate::verify::{Rejection, SeenSet};

mod connection;
mod inboxes;
mod side;
mod stall;
mod stop;

pub use inboxes::{Attached, InboxRefusal, MAIN_CHANNELS_KEPT};
pub use side::SideChannel;

pub use crate::entity_state::EntityHealth;
use crate::entity_state::EntityStates;

/// The gateway.
pub struct Gateway {
    pub cfg: Config,
    /// SPEC §18: the live trust state and this gateway's own key and certificate.
    pub membership: crate::membership::Membership,
    pub herdr: Herdr,
    pub publisher: Publisher,
    pub registry: Registry,
    pub pending: PendingSends,
    pub pull: PullState,
    pub seen: SeenSet,
    pub roster: Roster,
    /// How far the roster consumer has caught up ([C-10]).
    pub roster_sync: RosterSync,
    pub conversations: Conversations,
    pub metrics: Arc<Metrics>,
    /// The spec areas, as the hub calls them at the connection's moments.
    areas: Arc<dyn Areas>,
    conn: RwLock<Option<Arc<Connection>>>,
    /// CLU-1: the index in `FLEET_AMQP_URL`'s list of the node the next connection tries first
    /// (the current connection's node while connected; moved on to the next after a loss).
    node: AtomicUsize,
    /// Extra connections that carry inbox channels once the main one is full (see
    /// [`Gateway::inbox_channel`]); they live and die with the main connection.
    inbox_links: Mutex<Vec<Arc<Connection>>>,
    /// The side connection of the short-lived channels (`side.rs`), replaced before its channel
    /// ids run out; `side_count` numbers them.
    side: tokio::sync::Mutex<Option<Arc<side::SideLink>>>,
    side_count: AtomicUsize,
    /// When a side connection last failed to open (lookups use the main one for a while).
    side_failed: Mutex<Option<std::time::Instant>>,
    /// The roster, control and DLQ consumers' channels of the current connection: closed before
    /// it (see `stop.rs`).
    service_channels: Mutex<Vec<Channel>>,
    ready: AtomicBool,
    /// The running state of each local entity (consumer, health, inject lock, …).
    pub(crate) local: EntityStates,
    shutdown_tx: watch::Sender<bool>,
    /// Why the last broker setup failed, for `/readyz` (None once set up).
    pub setup_error: Mutex<Option<String>>,
    /// When the roster consumer of the current connection started (PRS-2 warm-up).
    pub(crate) roster_since: Mutex<Option<tokio::time::Instant>>,
    /// [C-25]: the hosts whose `_gateway` presence arrived since the current connection.
    pub(crate) hosts_heard: crate::hosts_heard::HostsHeard,
    /// Set first by a graceful stop (SIGTERM): pending injects fail as `stopped` at once.
    pub(crate) stopping: watch::Sender<bool>,
    /// Injects between their ack and their reported outcome; a graceful stop waits for them.
    pub(crate) inflight_injects: std::sync::atomic::AtomicUsize,
    /// A heartbeat's agent-status refresh is running (one at a time).
    pub(crate) refreshing_statuses: AtomicBool,
    /// The connection is being left for stalled confirms (`stall.rs`): its teardown waits less.
    stalled: AtomicBool,
    /// The stop's inbox closes were not all confirmed within their bound: the broker is behind
    /// on channel closes, and the teardown's own closes would queue behind them (`stop.rs`).
    closes_behind: AtomicBool,
    /// Orders every `down` after the heartbeats already on their way (no `up` follows a `down`).
    pub(crate) departures: crate::departures::Departures,
}

/// One area's answer to a moment: a boxed future, so the hub can hold the areas as a trait object.
pub type Step<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the areas do at the connection's moments, in the order the hub meets them.
pub trait Areas: Send + Sync {
    /// A connection is up, the core topology declared and the publisher attached; no inbox is
    /// consumed yet: the host's own queues and consumers, its announcement, the migration. An
    /// error fails the setup (the hub logs it, reports it on `/readyz` and tries again).
    fn connected<'a>(&'a self, gw: &'a Arc<Gateway>, conn: &'a Arc<Connection>) -> Step<'a, anyhow::Result<()>>;

    /// Every registered entity's inbox was attached (or refused) on `conn`.
    fn inboxes_attached(&self, gw: &Arc<Gateway>, conn: Arc<Connection>);

    /// A delivery from the inbox of the local entity `owner`.
    fn delivered<'a>(&'a self, gw: &'a Arc<Gateway>, owner: &'a str, d: Delivery) -> Step<'a, ()>;

    /// The inbox of `e`, refused before, is consumed now.
    fn reattached<'a>(&'a self, gw: &'a Gateway, e: &'a Entity) -> Step<'a, ()>;

    /// A graceful stop, once the inboxes are closed and the injects in flight have ended.
    fn stopping<'a>(&'a self, gw: &'a Gateway) -> Step<'a, ()>;
}

/// Deliveries in flight on the roster and control consumers (one handled at a time).
pub(crate) const CONSUME_PREFETCH: u16 = 256;

impl Gateway {
    /// Builds the gateway from its configuration (reads the keys and the registry) and the areas
    /// it serves (`crate::areas::SpecAreas`).
    pub fn new(cfg: Config, areas: Arc<dyn Areas>) -> anyhow::Result<Arc<Gateway>> {
        use anyhow::Context as _;
        // A gateway always trusts its own key (its own messages come back to it).
        let membership = crate::membership::Membership::load(&cfg)?;
        let signer = membership.own.identity().signer.clone();
        let registry =
            Registry::open(&cfg.state_dir).with_context(|| format!("FLEET_STATE_DIR {}", cfg.state_dir.display()))?;
        let metrics = Arc::new(Metrics::default());
        let publisher = Publisher::new(cfg.host_id.clone(), signer.clone(), cfg.inbox_ttl.as_millis() as u64)
            .with_metrics(metrics.clone())
            .with_confirm_timeout(cfg.inject_timeout);
        let (shutdown_tx, _) = watch::channel(false);
        Ok(Arc::new(Gateway {
            herdr: Herdr::new(cfg.herdr_socket.clone()),
            membership,
            publisher,
            registry,
            pending: PendingSends::default(),
            pull: PullState::default(),
            seen: SeenSet::new(1_000_000),
            roster: Roster::default(),
            roster_sync: Default::default(),
            conversations: Default::default(),
            metrics,
            areas,
            conn: RwLock::new(None),
            node: AtomicUsize::new(0),
            inbox_links: Mutex::new(Vec::new()),
            side: tokio::sync::Mutex::new(None),
            side_count: AtomicUsize::new(0),
            side_failed: Mutex::new(None),
            service_channels: Mutex::new(Vec::new()),
            ready: AtomicBool::new(false),
            local: EntityStates::default(),
            shutdown_tx,
            setup_error: Mutex::new(None),
            roster_since: Mutex::new(None),
            hosts_heard: Default::default(),
            stopping: watch::channel(false).0,
            inflight_injects: std::sync::atomic::AtomicUsize::new(0),
            refreshing_statuses: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            closes_behind: AtomicBool::new(false),
            departures: Default::default(),
            cfg,
        }))
    }

    /// `/readyz`: topology declared, connected, every entity's consumer attached, and the own
    /// certificate (if any) neither expired nor revoked (MEM-4).
    pub fn readiness(&self) -> (bool, Vec<(String, EntityHealth)>) {
        let health = self.local.health();
        let all_ok = health.iter().all(|(_, h)| *h == EntityHealth::Ready);
        let certified = self.membership.unready().is_none();
        (self.ready.load(Ordering::SeqCst) && all_ok && certified, health)
    }

    pub fn is_connected(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    pub fn entity(&self, gid: &str) -> Option<Entity> {
        self.registry.get(gid)
    }

    pub fn entity_by_token(&self, token: &str) -> Option<Entity> {
        self.registry.by_token(token)
    }

    pub fn entities(&self) -> Vec<Entity> {
        self.registry.all()
    }

    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown_tx.subscribe()
    }

    pub fn begin_shutdown(&self) {
        let _ = self.shutdown_tx.send(true);
    }

    pub fn set_health(&self, gid: &str, h: EntityHealth) {
        self.local.set_health(gid, h);
    }

    /// SIG-5: rejects a delivery to the DLX, logs the failed check at WARN, counts it. The line
    /// names the sending host (its envelope's `host`; empty when the envelope did not parse):
    /// [C-27] 4, an operator reads which host's credential failed.
    pub async fn reject(&self, acker: &lapin::Acker, msg_id: &str, host: &str, why: &Rejection) {
        warn!(msgId = %msg_id, host = %host, check = why.reason(), error = %why, "message rejected to bridge.dlx");
        Metrics::count(&self.metrics.rejected, &[("reason", why.reason())]);
        if let Err(e) = acker.reject(BasicRejectOptions { requeue: false }).await {
            warn!(msgId = %msg_id, error = %e, "reject failed");
        }
    }

    /// A tracing span carrying the envelope's ids, for every step of a flow.
    pub fn span(env: &Envelope) -> tracing::Span {
        info_span!("msg", traceId = %env.trace_id, msgId = %env.msg_id, kind = %env.kind)
    }

    /// Runs `fut` in the background within `env`'s span.
    pub fn spawn_in<F>(env: &Envelope, fut: F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        tokio::spawn(fut.instrument(Self::span(env)));
    }
}
