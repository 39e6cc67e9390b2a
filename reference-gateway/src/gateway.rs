//! The gateway's shared state and its life cycle: connect, declare, consume, reconnect, stop.
//!
//! One `Gateway` lives per process. Each spec area adds its behaviour in its own module as
//! `impl Gateway` blocks (forward path, pull path, presence, …); this file owns the connection
//! and the per-entity inbox consumers. A lost connection is repaired by reconnecting with backoff
//! and re-attaching everything (CON-3); held deliveries die with it and the broker redelivers them.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::options::{BasicQosOptions, BasicRejectOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::{RwLock, watch};
use tracing::{Instrument as _, error, info, info_span, warn};

use crate::config::{Config, QueueType};
use crate::envelope::Envelope;
use crate::forward::PendingSends;
use crate::herdr::Herdr;
use crate::metrics::Metrics;
use crate::presence::Roster;
use crate::publish::Publisher;
use crate::pull::PullState;
use crate::registry::{Entity, Registry};
use crate::topology;
use crate::verify::{Rejection, SeenSet};

mod stall;
mod stop;

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
    pub roster_sync: crate::presence::RosterSync,
    pub conversations: crate::conversation::Conversations,
    pub metrics: Arc<Metrics>,
    conn: RwLock<Option<Arc<Connection>>>,
    /// CLU-1: the index in `FLEET_AMQP_URL`'s list of the node the next connection tries first
    /// (the current connection's node while connected; moved on to the next after a loss).
    node: AtomicUsize,
    /// Extra connections that carry inbox channels once the main one is full (see
    /// [`Gateway::inbox_channel`]); they live and die with the main connection.
    inbox_links: Mutex<Vec<Arc<Connection>>>,
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
    /// Set first by a graceful stop (SIGTERM): pending injects fail as `stopped` at once.
    pub(crate) stopping: watch::Sender<bool>,
    /// Injects between their ack and their reported outcome; a graceful stop waits for them.
    pub(crate) inflight_injects: std::sync::atomic::AtomicUsize,
    /// A heartbeat's agent-status refresh is running (one at a time).
    pub(crate) refreshing_statuses: AtomicBool,
    /// The connection is being left for stalled confirms (`stall.rs`): its teardown waits less.
    stalled: AtomicBool,
    /// Orders every `down` after the heartbeats already on their way (no `up` follows a `down`).
    pub(crate) departures: crate::departures::Departures,
}

/// Deliveries in flight on the roster and control consumers (one handled at a time).
pub(crate) const CONSUME_PREFETCH: u16 = 256;

impl Gateway {
    /// Builds the gateway from its configuration: reads the keys and the registry.
    pub fn new(cfg: Config) -> anyhow::Result<Arc<Gateway>> {
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
            conn: RwLock::new(None),
            node: AtomicUsize::new(0),
            inbox_links: Mutex::new(Vec::new()),
            service_channels: Mutex::new(Vec::new()),
            ready: AtomicBool::new(false),
            local: EntityStates::default(),
            shutdown_tx,
            setup_error: Mutex::new(None),
            roster_since: Mutex::new(None),
            stopping: watch::channel(false).0,
            inflight_injects: std::sync::atomic::AtomicUsize::new(0),
            refreshing_statuses: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
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

    /// Runs until shutdown: connect, set up, serve, and reconnect with backoff after a loss.
    pub async fn run(self: &Arc<Self>) {
        let mut shutdown = self.shutdown_signal();
        let mut backoff = Duration::from_millis(200);
        loop {
            if *shutdown.borrow() {
                return;
            }
            match self.connect_and_setup().await {
                Ok(conn) => {
                    backoff = Duration::from_millis(200);
                    if let Ok(mut m) = self.setup_error.lock() {
                        *m = None;
                    }
                    self.ready.store(true, Ordering::SeqCst);
                    info!(host = %self.cfg.host_id, "gateway ready");
                    let lost = self.wait_for_loss(&conn, &mut shutdown).await;
                    self.ready.store(false, Ordering::SeqCst);
                    self.teardown_connection().await;
                    if !lost {
                        return;
                    }
                    self.metrics.reconnects.inc();
                    let lost_node = self.cfg.broker.node_masked(self.node.load(Ordering::SeqCst));
                    // CLU-1: the next connection tries the next node of the list first.
                    self.next_node();
                    warn!(node = %lost_node, "broker connection lost; reconnecting");
                }
                Err(e) => {
                    let why = format!("{e:#}");
                    error!(error = %why, retry_in = ?backoff, "cannot set up the broker connection");
                    if let Ok(mut m) = self.setup_error.lock() {
                        *m = Some(why);
                    }
                    self.teardown_connection().await;
                    self.next_node();
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = shutdown.changed() => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(10));
        }
    }

    /// CLU-1: moves the first node to try on to the next one of the list (a lost or refusing node
    /// is not tried first again; with one URL this changes nothing).
    fn next_node(&self) {
        let n = self.cfg.broker.nodes().max(1);
        let _ = self
            .node
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |i| Some((i + 1) % n));
    }

    /// Opens one broker connection named `name` (the broker's management UI shows it) to node
    /// `node` of the list, bounded by the connect timeout.
    async fn open_connection(&self, name: String, node: usize) -> anyhow::Result<Arc<Connection>> {
        let props = ConnectionProperties::default().with_connection_name(name.into());
        let broker = &self.cfg.broker;
        let shown = broker.node_masked(node);
        let url = broker.url_effective(node);
        let connecting = crate::tls::connect(&url, broker.tls_ca.as_ref(), props);
        match tokio::time::timeout(broker.connect_timeout(), connecting).await {
            Ok(Ok(conn)) => Ok(Arc::new(conn)),
            Ok(Err(e)) => Err(e.context(format!("connecting to {shown} (FLEET_AMQP_URL)"))),
            Err(_) => Err(anyhow::anyhow!(
                "connecting to {shown} (FLEET_AMQP_URL): no answer within {:?}",
                broker.connect_timeout()
            )),
        }
    }

    /// CLU-1: the main connection, to the first node of the list that answers, starting with
    /// the one `node` names (after a loss: the node after the lost one). Each node is tried once
    /// per round; the caller's backoff paces the rounds (CON-3).
    async fn connect_main(&self) -> anyhow::Result<Arc<Connection>> {
        let n = self.cfg.broker.nodes().max(1);
        let start = self.node.load(Ordering::SeqCst) % n;
        let mut failures = Vec::new();
        for k in 0..n {
            let i = (start + k) % n;
            match self
                .open_connection(format!("fleet-gateway {}", self.cfg.host_id), i)
                .await
            {
                Ok(conn) => {
                    self.node.store(i, Ordering::SeqCst);
                    info!(node = %self.cfg.broker.node_masked(i), index = i + 1, of = n, "connected to the broker");
                    return Ok(conn);
                }
                Err(e) => {
                    if n > 1 {
                        warn!(node = %self.cfg.broker.node_masked(i), error = %format!("{e:#}"), "broker node unreachable; trying the next one of FLEET_AMQP_URL");
                    }
                    failures.push(format!("{e:#}"));
                }
            }
        }
        if n == 1 {
            return Err(anyhow::anyhow!(failures.join("; ")));
        }
        Err(anyhow::anyhow!(
            "no node of FLEET_AMQP_URL answered: {}",
            failures.join("; ")
        ))
    }

    async fn connect_and_setup(self: &Arc<Self>) -> anyhow::Result<Arc<Connection>> {
        use anyhow::Context as _;
        let conn = self.connect_main().await?;
        let url = self.cfg.broker.url_effective(self.node.load(Ordering::SeqCst));
        let args = self.cfg.queue_args();
        let quorum = args.queue_type == QueueType::Quorum;
        let ch = conn.create_channel().await.context("opening the setup channel")?;
        if let Err(e) = topology::declare_core(&ch, &args).await {
            let hint = if quorum && topology::amqp_code(&e) == Some(406) {
                format!(
                    " ({} is probably a classic queue from before FLEET_QUEUE_TYPE=quorum: convert it with scripts/convert-inboxes {})",
                    topology::DLQ,
                    topology::DLQ
                )
            } else {
                String::new()
            };
            return Err(anyhow::Error::new(e).context(format!("declaring the core topology (TOP-1){hint}")));
        }
        if topology::declare_delay(&url, self.cfg.broker.tls_ca.as_ref(), self.cfg.broker.connect_timeout()).await {
            info!("bridge.delay declared");
        } else {
            info!("the broker has no x-delayed-message exchange type; carrying on without bridge.delay");
        }
        self.publisher
            .attach(&conn)
            .await
            .context("opening the confirm-mode publish channel (PUB-1)")?;
        *self.conn.write().await = Some(conn.clone());
        let host = &self.cfg.host_id;
        self.start_roster(&conn)
            .await
            .map_err(|e| topology::host_queue_refusal(e, &topology::roster_queue(host), host, "roster queue"))?;
        // MEM-5: the host (and its certificate) is known before any of its entities.
        self.announce_host().await;
        if let Err(e) = self.start_control(&conn).await {
            let control = topology::control_queue(host);
            let refused = e.downcast_ref::<lapin::Error>().and_then(topology::amqp_code) == Some(406);
            if quorum && refused {
                return Err(e.context(format!(
                    "declaring and consuming the control queue {control} (TOP-3) ({control} is probably a classic queue from before FLEET_QUEUE_TYPE=quorum: convert it with scripts/convert-inboxes {control})"
                )));
            }
            return Err(topology::host_queue_refusal(e, &control, host, "control queue"));
        }
        self.start_dead_letters(&conn)
            .await
            .context("consuming bridge.dlq (CAP-4)")?;
        // MIG-2/3: legacy queues move before any inbox is consumed.
        self.migrate_on_boot().await;
        for e in self.entities() {
            self.attach_entity(&e).await;
        }
        self.spawn_heartbeats(conn.clone());
        self.spawn_maintenance(conn.clone());
        Ok(conn)
    }

    /// A fresh channel on the current connection.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        let conn = self
            .conn
            .read()
            .await
            .clone()
            .ok_or_else(|| anyhow::anyhow!("not connected to the broker"))?;
        Ok(conn.create_channel().await?)
    }

    /// A channel for an entity's inbox consumer, and which connection carries it (0 = main).
    ///
    /// One channel per inbox (TOP-2: a refused exclusive consume closes only its own channel),
    /// but a connection carries at most the `channel_max` the broker negotiated (RabbitMQ: 2,047).
    /// Inbox channels fill the main connection up to [`MAIN_CHANNELS_KEPT`] below that limit (the
    /// rest is for the publisher, the roster, control and DLQ consumers and short-lived setup
    /// channels), then extra connections, each filled until the broker's limit, opened as needed
    /// (`fleet-gateway <host> inboxes #n`). A gateway with fewer entities than that never opens one.
    async fn inbox_channel(&self) -> anyhow::Result<(Channel, usize)> {
        use anyhow::Context as _;
        let main = self
            .conn
            .read()
            .await
            .clone()
            .ok_or_else(|| anyhow::anyhow!("not connected to the broker"))?;
        let limit = match usize::from(main.configuration().channel_max()) {
            0 => usize::from(u16::MAX),
            n => n,
        };
        if self.local.inboxes_on(0) + MAIN_CHANNELS_KEPT < limit {
            return Ok((main.create_channel().await?, 0));
        }
        let links: Vec<Arc<Connection>> = self.inbox_links.lock().map(|l| l.clone()).unwrap_or_default();
        for (i, link) in links.iter().enumerate() {
            match link.create_channel().await {
                Ok(ch) => return Ok((ch, i + 1)),
                Err(e) if matches!(e.kind(), lapin::ErrorKind::ChannelsLimitReached) => continue,
                Err(e) => return Err(e).with_context(|| format!("opening a channel on inbox connection #{}", i + 1)),
            }
        }
        let n = links.len() + 1;
        let link = self
            .open_connection(
                format!("fleet-gateway {} inboxes #{n}", self.cfg.host_id),
                self.node.load(Ordering::SeqCst),
            )
            .await
            .with_context(|| {
                format!("opening inbox connection #{n} (the main one carries {limit} channels at most)")
            })?;
        info!(connection = n, "main connection full of inbox channels; opened another");
        let ch = link.create_channel().await?;
        let index = match self.inbox_links.lock() {
            Ok(mut l) => {
                l.push(link);
                l.len()
            }
            Err(_) => n,
        };
        Ok((ch, index))
    }

    pub fn set_health(&self, gid: &str, h: EntityHealth) {
        self.local.set_health(gid, h);
    }

    /// TOP-2: declares an entity's inbox and consumes it with an exclusive, prefetch-bounded,
    /// manual-ack consumer on its own channel (so a refusal closes only that channel); in quorum
    /// mode (CLU-3) after checking that no conversion is unfinished and nobody holds it.
    ///
    /// A refusal is logged at ERROR naming the gid and the queue, and the entity is reported not
    /// ready (`/readyz` 503) until a retry succeeds (`spawn_maintenance`). The same refusal
    /// repeated by the retries is logged at ERROR again only once a minute (DEBUG in between).
    pub async fn attach_entity(self: &Arc<Self>, e: &Entity) -> Attached {
        match self.try_attach_entity(e).await {
            Ok(()) => {
                self.set_health(&e.gid, EntityHealth::Ready);
                Attached::Ready
            }
            Err(err) => {
                let msg = format!("{err:#}");
                let lasting = err.downcast_ref::<InboxRefusal>().is_some_and(InboxRefusal::is_lasting);
                let pause = if lasting { LASTING_RETRY } else { Duration::ZERO };
                if self.local.refused(&e.gid, &msg, pause, REFUSAL_REMINDER) {
                    error!(gid = %e.gid, error = %msg, "cannot consume the inbox; entity not ready");
                } else {
                    tracing::debug!(gid = %e.gid, error = %msg, "inbox still refused; entity not ready");
                }
                Attached::Refused { why: msg, lasting }
            }
        }
    }

    async fn try_attach_entity(self: &Arc<Self>, e: &Entity) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let args = self.cfg.queue_args();
        let queue = topology::inbox_queue(&e.gid);
        if args.queue_type == QueueType::Quorum && self.conversion_unfinished(&queue).await? {
            return Err(InboxRefusal::Converting { queue }.into());
        }
        let (ch, link) = self.inbox_channel().await?;
        ch.basic_qos(self.cfg.prefetch, BasicQosOptions::default())
            .await
            .context("basic.qos")?;
        if let Err(err) = topology::declare_inbox(&ch, &args, &e.gid, &e.groups).await {
            if topology::amqp_code(&err) == Some(406) {
                // TOP-5 / CLU-7: the 406 closed the channel; the gateway stays up and serves the
                // other entities.
                return Err(InboxRefusal::Mismatch {
                    queue,
                    queue_type: args.queue_type,
                    broker: err.to_string(),
                }
                .into());
            }
            return Err(anyhow::Error::new(err).context(format!("declaring {queue}")));
        }
        let what = if args.queue_type == QueueType::Quorum {
            // CLU-3: CON-2 by passive declare, right before the consume. A consumer that slips
            // in between is a standby the broker delivers nothing to while this one lives.
            match topology::peek(&ch, &queue)
                .await
                .with_context(|| format!("passive declare of {queue} (CLU-3)"))?
            {
                Some((_, consumers)) if consumers > 0 => {
                    let _ = ch.close(200, "inbox held by another gateway".into()).await;
                    return Err(InboxRefusal::Held { queue, consumers }.into());
                }
                Some(_) => format!("consuming {queue} (CLU-3: single active consumer)"),
                None => anyhow::bail!("{queue} vanished right after its declaration"),
            }
        } else {
            format!("consuming {queue} exclusively (CON-2)")
        };
        let mut consumer = ch
            .basic_consume(
                queue.as_str().into(),
                e.gid.as_str().into(),
                topology::inbox_consumer(args.queue_type),
                FieldTable::default(),
            )
            .await
            .context(what)?;
        self.local.set_inbox(&e.gid, ch, link);
        let gw = Arc::clone(self);
        let gid = e.gid.clone();
        tokio::spawn(async move {
            while let Some(item) = consumer.next().await {
                match item {
                    // Boxed: the handling future is large, and an idle consumer task would
                    // otherwise hold its full size for the entity's whole life.
                    Ok(d) => Box::pin(gw.on_inbox_delivery(&gid, d)).await,
                    Err(err) => {
                        warn!(%gid, error = %err, "inbox consumer ended");
                        break;
                    }
                }
            }
        });
        Ok(())
    }

    /// CLU-7: whether `<queue>.converting` exists, i.e. a conversion of `queue` started and has
    /// not finished (or was interrupted): its messages are not all back in the inbox, so the
    /// inbox is not consumed yet. The look is a passive declare, answered by a 404 (logged by
    /// lapin at ERROR, dropped as probe noise) almost always.
    async fn conversion_unfinished(&self, queue: &str) -> anyhow::Result<bool> {
        use anyhow::Context as _;
        let temp = topology::converting_queue(queue);
        let _quiet = topology::ProbeRunning::start();
        let ch = self.channel().await?;
        let found = topology::peek(&ch, &temp)
            .await
            .with_context(|| format!("passive declare of {temp} (CLU-7)"))?;
        if found.is_some() {
            let _ = ch.close(200, "probe done".into()).await;
        }
        Ok(found.is_some())
    }

    /// Consumes `queue` on `ch` (manual ack, at most `prefetch` unacked) and hands every delivery
    /// to `handle`, one at a time, for the life of the channel: the shape of the roster, control
    /// and DLQ consumers.
    pub async fn consume_each<F, Fut>(
        self: &Arc<Self>,
        ch: Channel,
        queue: &str,
        tag: &str,
        prefetch: u16,
        handle: F,
    ) -> lapin::Result<()>
    where
        F: Fn(Arc<Gateway>, lapin::message::Delivery) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        // Bounded like the inboxes: without a prefetch the broker pushed a backlog it could not
        // yet handle (a 10,000-entity heartbeat round comes back to its own roster queue) into
        // this process's memory; with one, the backlog waits in the queue.
        ch.basic_qos(prefetch, BasicQosOptions::default()).await?;
        let mut consumer = ch
            .basic_consume(queue.into(), tag.into(), Default::default(), FieldTable::default())
            .await?;
        if let Ok(mut kept) = self.service_channels.lock() {
            kept.push(ch.clone());
        }
        let gw = Arc::clone(self);
        tokio::spawn(async move {
            let _keep = ch;
            while let Some(Ok(d)) = consumer.next().await {
                handle(Arc::clone(&gw), d).await;
            }
        });
        Ok(())
    }

    /// Stops consuming an entity's inbox (its channel closes; unacked deliveries return).
    pub async fn detach_entity(&self, gid: &str) {
        if let Some(ch) = self.local.detach(gid) {
            let _ = ch.close(200, "entity stopped".into()).await;
        }
    }

    /// SIG-5: rejects a delivery to the DLX, logs the failed check at WARN, counts it.
    pub async fn reject(&self, acker: &lapin::Acker, msg_id: &str, why: &Rejection) {
        warn!(msgId = %msg_id, check = why.reason(), error = %why, "message rejected to bridge.dlx");
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

/// Channels the main connection keeps free of inbox consumers, below the broker's `channel_max`.
pub const MAIN_CHANNELS_KEPT: usize = 64;

/// How often an inbox refused for a lasting reason (CLU-7: other arguments, a conversion under
/// way) is tried again; a held inbox (CON-2) is tried every maintenance tick, for CON-1's
/// takeover.
const LASTING_RETRY: Duration = Duration::from_secs(5);

/// The same refusal of an entity is logged at ERROR again after this long (DEBUG in between).
const REFUSAL_REMINDER: Duration = Duration::from_secs(60);

/// What [`Gateway::attach_entity`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attached {
    /// The inbox is consumed.
    Ready,
    /// Refused (the entity is not ready; retried in the background). `lasting`: until an operator
    /// acts ([`InboxRefusal::is_lasting`]).
    Refused { why: String, lasting: bool },
}

/// Why an inbox is not consumed, in the words the ERROR line and `/readyz` carry: each names the
/// queue (CONTRACT §5) and, where the operator can act, what to do.
#[derive(Debug, thiserror::Error)]
pub enum InboxRefusal {
    /// CLU-3: the passive declare found a consumer: another gateway holds the inbox (CON-2).
    #[error(
        "{queue} already has {consumers} consumer(s): another gateway holds this inbox (CON-2, CLU-3); not consuming it"
    )]
    Held { queue: String, consumers: u32 },
    /// TOP-5 / CLU-7: the broker holds the inbox with other arguments (406).
    #[error("{}", mismatch_text(queue, *queue_type, broker))]
    Mismatch {
        queue: String,
        queue_type: QueueType,
        broker: String,
    },
    /// CLU-7: `<queue>.converting` exists.
    #[error(
        "{queue} is being converted to a quorum queue ({queue}.converting exists): the entity is not served until `scripts/convert-inboxes {queue}` has finished (run it again if it was interrupted)"
    )]
    Converting { queue: String },
}

impl InboxRefusal {
    /// Whether the refusal lasts until an operator acts (retried less often).
    pub fn is_lasting(&self) -> bool {
        !matches!(self, InboxRefusal::Held { .. })
    }
}

fn mismatch_text(queue: &str, queue_type: QueueType, broker: &str) -> String {
    match queue_type {
        QueueType::Quorum => format!(
            "{queue} exists with other arguments than FLEET_QUEUE_TYPE=quorum declares (a classic inbox from before the switch?): the entity is not served until the inbox is converted: run `scripts/convert-inboxes {queue}` (CLU-7; broker: {broker})"
        ),
        QueueType::Classic => format!(
            "{queue} exists with other arguments than this gateway declares (TOP-5: a quorum inbox while FLEET_QUEUE_TYPE=classic, or other FLEET_INBOX_* settings): the entity is not served (broker: {broker})"
        ),
    }
}

impl Gateway {
    /// Whether an extra inbox connection was lost (its consumers died with it).
    fn inbox_link_lost(&self) -> bool {
        self.inbox_links
            .lock()
            .map(|l| l.iter().any(|c| !c.status().connected()))
            .unwrap_or(false)
    }

    /// Waits until the connection (or an inbox connection) is lost (true) or shutdown is asked
    /// (false). Losing an inbox connection is losing the connection: everything is set up again;
    /// so is a node whose confirms stalled while another node answers (`stall.rs`).
    async fn wait_for_loss(&self, conn: &Connection, shutdown: &mut watch::Receiver<bool>) -> bool {
        tokio::select! {
            lost = wait_for_main_loss(conn, shutdown) => lost,
            () = async {
                let mut tick = tokio::time::interval(Duration::from_millis(500));
                while !self.inbox_link_lost() {
                    tick.tick().await;
                }
                warn!("an inbox connection was lost");
            } => true,
            () = self.wait_for_stall() => true,
        }
    }
}

/// Waits until the main connection is lost (true) or shutdown is asked (false).
async fn wait_for_main_loss(conn: &Connection, shutdown: &mut watch::Receiver<bool>) -> bool {
    let mut events = conn.events_listener();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            ev = events.next() => match ev {
                // lapin reports a *channel* error (a 404 on a passive declare, a 403 on an
                // exclusive consume, a 406 on a redeclare) on the connection's event stream too;
                // those close one channel and leave the connection up. Only a lost connection
                // is a loss: tearing everything down for a channel error would drop every held
                // delivery and every consumer.
                Some(lapin::Event::Error(e)) if conn.status().connected() => {
                    tracing::debug!(error = %e, "channel error; the connection stays up");
                }
                Some(lapin::Event::Error(e)) => { warn!(error = %e, "broker connection error"); return true; }
                Some(_) => {}
                None => return true,
            },
            _ = tick.tick() => if !conn.status().connected() { return true; },
            _ = shutdown.changed() => if *shutdown.borrow() { return false; },
        }
    }
}

impl Gateway {
    /// Background upkeep for the life of `conn`: the sweeper (CAP-3) and re-attaching entities
    /// whose consumer was refused (CON-1/CON-2: a stale exclusive consumer goes away once the
    /// broker drops its connection, and this gateway then takes the inbox over).
    pub fn spawn_maintenance(self: &Arc<Self>, conn: Arc<Connection>) {
        let gw = Arc::clone(self);
        tokio::spawn(async move {
            let period = gw.cfg.heartbeat.min(Duration::from_secs(1));
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while conn.status().connected() {
                tick.tick().await;
                gw.sweep().await;
                for gid in gw.local.failed_due(std::time::Instant::now()) {
                    if let Some(e) = gw.entity(&gid) {
                        // A retry's refusal is expected (lapin's ERROR about the closed channel
                        // is noise); the gateway's own line says what happened.
                        let quiet = topology::ProbeRunning::start();
                        gw.attach_entity(&e).await;
                        drop(quiet);
                        if gw.local.health_of(&gid) == Some(EntityHealth::Ready) {
                            info!(%gid, "inbox consumer attached after an earlier refusal");
                            let _ = gw.announce_entity(&e, "up").await;
                        }
                    }
                }
            }
        });
    }

    /// CAP-3: rejects held messages past their `expiresAt` to the DLX, so an abandoned backlog
    /// cannot wedge an inbox behind a full prefetch window ([C-6]).
    async fn sweep(&self) {
        for h in self.pull.take_expired(crate::envelope::now_ms()) {
            warn!(msgId = %h.env.msg_id, traceId = %h.env.trace_id, owner = %h.owner, "held message expired undrained; rejected to bridge.dlx");
            self.metrics.swept.inc();
            if let Err(e) = h.acker.reject(BasicRejectOptions { requeue: false }).await {
                warn!(error = %e, "sweeper reject failed");
            }
        }
    }
}
