//! The broker connection's life (CON-3, CLU-1): connect to the first node of `FLEET_AMQP_URL`
//! that answers, declare the core topology, let the areas set up theirs ([`super::Areas`]),
//! attach the inboxes, then wait for a loss and start again with backoff on the next node.
//!
//! Apart from the inbox consumers ([`super::inboxes`]) because this is the one connection's
//! sequence, while those are one consumer per entity, attached and re-attached on their own. The
//! side connection of the short-lived channels ([`super::side`]) is opened, replaced and closed
//! here too, with the main one.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::options::BasicRejectOptions;
use lapin::{Connection, ConnectionProperties};
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::{EntityHealth, Gateway, side};
use crate::config::QueueType;
use crate::topology;

impl Gateway {
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
    pub(super) async fn open_connection(&self, name: String, node: usize) -> anyhow::Result<Arc<Connection>> {
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
        if !self.cfg.delay_exchange {
            info!("bridge.delay not asked for (FLEET_DELAY_EXCHANGE=off)");
        } else if topology::declare_delay(&url, self.cfg.broker.tls_ca.as_ref(), self.cfg.broker.connect_timeout())
            .await
        {
            info!("bridge.delay declared");
        } else {
            info!(
                "the broker has no x-delayed-message exchange type; carrying on without bridge.delay \
                 (the broker logs that refusal as an error; FLEET_DELAY_EXCHANGE=off asks no more)"
            );
        }
        self.publisher
            .attach(&conn)
            .await
            .context("opening the confirm-mode publish channel (PUB-1)")?;
        *self.conn.write().await = Some(conn.clone());
        // Opened now, with the main one, so the gateway's connections are the same after every
        // setup (CLU-5(c) counts them); replaced later as its channel ids run out (`side.rs`).
        // Not a condition of the setup: without it the lookups use the main connection, and the
        // maintenance tick tries again (`side_link` says at WARN why it could not be opened).
        let _ = self.side_link().await;
        self.areas.connected(self, &conn).await?;
        for e in self.entities() {
            self.attach_entity(&e).await;
        }
        self.areas.inboxes_attached(self, conn.clone());
        self.spawn_maintenance(conn.clone());
        Ok(conn)
    }

    /// The current main connection (an error while there is none).
    pub(super) async fn current_connection(&self) -> anyhow::Result<Arc<Connection>> {
        self.conn
            .read()
            .await
            .clone()
            .ok_or_else(|| anyhow::anyhow!("not connected to the broker"))
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
                // A side connection lost alone (its node is the main one's, so this is rare) is
                // opened again here, not at the next lookup: the gateway's connections stay whole.
                if conn.status().connected() && !gw.side_cooling_down() {
                    let _ = gw.side_link().await;
                }
                for gid in gw.local.failed_due(std::time::Instant::now()) {
                    if let Some(e) = gw.entity(&gid) {
                        // A retry's refusal is expected (lapin's ERROR about the closed channel
                        // is noise); the gateway's own line says what happened.
                        let quiet = topology::ProbeRunning::start();
                        gw.attach_entity(&e).await;
                        drop(quiet);
                        if gw.local.health_of(&gid) == Some(EntityHealth::Ready) {
                            info!(%gid, "inbox consumer attached after an earlier refusal");
                            gw.areas.reattached(&gw, &e).await;
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

impl Gateway {
    /// A fresh short-lived channel for a lookup, a declaration or a delete: on the side
    /// connection, never on the main one (`side.rs` says why). An error while not connected.
    ///
    /// Never waits on a side connection being opened (another lookup is opening it, or the last
    /// attempt failed: the maintenance tick tries again): the channel is then opened on the main
    /// connection, so a broker that takes no new connection slows no lookup down
    /// (`SideChannel::on_main`).
    pub async fn channel(&self) -> anyhow::Result<side::SideChannel> {
        let link = match self.side.try_lock() {
            Ok(side) => match side.as_ref().filter(|l| l.usable()) {
                Some(link) => Some(Arc::clone(link)),
                // Failing to open: the maintenance tick tries again (every [`SIDE_RETRY`]), never
                // a lookup, which would wait out the connect timeout.
                None if self.side_failing() => None,
                None => {
                    drop(side);
                    self.side_link().await.ok()
                }
            },
            // Another lookup is opening it.
            Err(_) => None,
        };
        match link {
            Some(link) => link.channel().await,
            None => {
                let main = self.current_connection().await?;
                Ok(side::SideChannel::on_main(main.create_channel().await?))
            }
        }
    }

    /// Whether the last attempt to open a side connection failed.
    fn side_failing(&self) -> bool {
        self.side_failed.lock().map(|at| at.is_some()).unwrap_or(false)
    }

    /// Whether a side connection failed to open less than [`SIDE_RETRY`] ago.
    fn side_cooling_down(&self) -> bool {
        self.side_failed
            .lock()
            .map(|at| at.is_some_and(|t| t.elapsed() < SIDE_RETRY))
            .unwrap_or(false)
    }

    /// The side connection to hand out the next channel: the current one while it is usable,
    /// else a new one to the main connection's node (the old one closes with its last channel).
    pub(super) async fn side_link(&self) -> anyhow::Result<Arc<side::SideLink>> {
        use anyhow::Context as _;
        let mut side = self.side.lock().await;
        if let Some(link) = side.as_ref()
            && link.usable()
        {
            return Ok(Arc::clone(link));
        }
        if !self.conn.read().await.as_ref().is_some_and(|c| c.status().connected()) {
            anyhow::bail!("not connected to the broker");
        }
        let number = self.side_count.fetch_add(1, Ordering::SeqCst) + 1;
        let conn = self
            .open_connection(
                format!("fleet-gateway {} side", self.cfg.host_id),
                self.node.load(Ordering::SeqCst),
            )
            .await
            .with_context(|| format!("opening side connection #{number}"));
        if let Ok(mut at) = self.side_failed.lock() {
            match &conn {
                // Said at WARN when it starts failing, then at DEBUG every retry (every 5 s).
                Err(e) if at.is_none() => {
                    warn!(error = %format!("{e:#}"), "cannot open the side connection; lookups use the main connection meanwhile");
                }
                Err(e) => tracing::debug!(error = %format!("{e:#}"), "side connection still cannot be opened"),
                Ok(_) if at.is_some() => info!(number, "side connection opened after earlier failures"),
                Ok(_) => {}
            }
            *at = conn.is_err().then(std::time::Instant::now);
        }
        let link = Arc::new(side::SideLink::new(conn?, number));
        if let Some(old) = side.replace(Arc::clone(&link)) {
            info!(
                number,
                replaced = old.number(),
                "side connection opened (the previous one had used its channel ids or was lost)"
            );
        }
        Ok(link)
    }

    /// Closes the side connection with the main one (a stop, a loss, a failed setup).
    pub(super) async fn close_side(&self, bound: std::time::Duration) {
        let link = self.side.lock().await.take();
        if let Some(link) = link {
            let _ = tokio::time::timeout(bound, link.close()).await;
        }
    }
}

/// How often the maintenance tick tries again to open a side connection that failed to open
/// (lookups use the main connection meanwhile).
const SIDE_RETRY: Duration = Duration::from_secs(5);
