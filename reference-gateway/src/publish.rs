//! Publishing (SPEC §4): a dedicated confirm-mode channel, `mandatory` routing, signed envelopes.
//!
//! Every message this gateway sends goes through [`Publisher::publish`]: it fills the envelope,
//! signs it, and waits for the broker's confirm. A `basic.return` arrives before the confirm and is
//! attached to it, so "confirmed but returned" becomes a fast `NoRoute` (PUB-2); a nack or a lost
//! channel fails the publish (PUB-3).
//!
//! Two rules of SPEC §15 live here, because every publish passes through:
//! - **[C-19]** after a (re)connect, nothing but presence goes out from an entity until its `up`
//!   was confirmed on the new connection ([`Announced`]): a receiver that lost the entity's
//!   presence meanwhile can judge the message (SIG-2 (2)) instead of dead-lettering it.
//! - **[C-18]** a message whose confirm was lost with its connection is republished — the same
//!   envelope, `msgId` and signature — once the gateway is connected again, within the publish's
//!   bound; every kind but SEND and BROADCAST (the forward path is at-most-once, and a receiver
//!   that restarted in between has forgotten the `msgId`) and PRESENCE (repeated every H anyway).
//! - **A nack on a queue's first publish of the channel** is tried again, for the same kinds and
//!   within the same bound: RabbitMQ 3.10 registers a channel as a quorum queue's enqueuer on
//!   its first publish there, and while the queue has no reachable leader (its leader's node just
//!   killed, a new one not elected yet) it nacks that publish without sending it on
//!   (`rabbit_fifo_client`: "safe to reject … we never attempted to send it"). A gateway that
//!   lost its connection with the node and republishes on a fresh channel met exactly that: its
//!   replies and INJECTED notices were nacked, never delivered (issue 44). A nack of a queue this
//!   channel has already had a confirm from (an inbox over its `x-max-length`, CLU-4) still fails
//!   at once.
//! - **Not sent is said** (CONTRACT §3, a [C-16] companion): a publish that was never handed to
//!   the broker — no connection, or a channel lapin already knew closed, so not one byte of it was
//!   written — is [`PublishError::NotConnected`], a *definite* failure the tools answer
//!   `not_connected`. Until the bound, such a publish waits for the reconnect and goes out then,
//!   whatever its kind (SEND included: nothing of it left the gateway, so it cannot be a second
//!   copy). Only a publish that was written and whose confirm was lost is *unknown* ([C-16]).

use std::sync::Arc;

use std::collections::HashSet;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Connection};
use tokio::sync::{RwLock, watch};

use crate::envelope::{Envelope, Kind, VERSION, new_uuid, now_ms};
use crate::metrics::{Metrics, Stage};
use crate::signing::Signer;

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("no_route: the broker could not route the message to any queue")]
    NoRoute,
    /// PUB-3; CLU-4: a quorum inbox over its `x-max-length` refuses a publish this way.
    #[error("the broker nacked the message (refused it: the recipient's inbox may be full)")]
    Nacked,
    /// Definite: nothing of the message was handed to the broker (no connection, or a channel
    /// already closed, until the bound): it is never delivered (CONTRACT §3 `not_connected`).
    #[error("not connected to the broker: the message was not sent")]
    NotConnected,
    #[error("no confirm from the broker within {0:?} (the message may still have been routed)")]
    ConfirmTimeout(std::time::Duration),
    /// An earlier attempt was handed to the broker and lost its confirm with the connection; no
    /// republish went through within the bound ([C-18]). Unknown, never [`Self::NotConnected`]:
    /// the first copy may have been routed (measured by the soak: such replies were delivered).
    #[error(
        "the connection was lost before the broker confirmed the message and none came back within the bound (the message may still have been routed)"
    )]
    Unconfirmed,
    #[error("broker error: {0}")]
    Amqp(#[from] lapin::Error),
    /// Definite, like [`Self::NotConnected`]: the gateway's own credential would be rejected by
    /// every receiver ([C-21] 9), so nothing was sent. `reason` is the check's name (`revoked`,
    /// `cert_expired`, `certificate`), the tools' failure reason.
    #[error("not sent: {detail}")]
    Refused { reason: &'static str, detail: String },
}

/// Why the gateway refuses to publish right now ([C-21] 9): set by the membership watcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub detail: String,
}

/// One message to publish. Unset fields get their SPEC defaults.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub kind: Kind,
    pub exchange: &'static str,
    /// Routing key; also the `to` header (SIG-2 step 3 / BRD-1).
    pub to: String,
    pub from: String,
    pub trace_id: Option<String>,
    pub msg_id: Option<String>,
    pub turn_id: Option<String>,
    pub spawn_id: Option<String>,
    pub corr_id: Option<String>,
    /// Absolute expiry (Unix ms); default `ts` + the inbox TTL ([C-9]).
    pub expires_at: Option<u64>,
    pub body: Vec<u8>,
    /// PUB-2: every kind but BROADCAST is published `mandatory`.
    pub mandatory: bool,
    /// MEM-3: sign with this key instead of the publisher's (a rotation's first presence).
    pub signer: Option<Arc<Signer>>,
}

impl Outgoing {
    pub fn new(
        kind: Kind,
        exchange: &'static str,
        to: impl Into<String>,
        from: impl Into<String>,
        body: Vec<u8>,
    ) -> Outgoing {
        Outgoing {
            kind,
            exchange,
            to: to.into(),
            from: from.into(),
            trace_id: None,
            msg_id: None,
            turn_id: None,
            spawn_id: None,
            corr_id: None,
            expires_at: None,
            body,
            mandatory: kind != Kind::Broadcast,
            signer: None,
        }
    }
}

/// A message handed to the channel whose confirm is still to come.
pub struct Sent {
    pub env: Envelope,
    confirm: lapin::PublisherConfirm,
    /// A presence `up`: once confirmed, its entity may publish on this connection ([C-19]).
    announces: bool,
    /// Counts in the age of the oldest unconfirmed publish until dropped (the stall detector).
    waiting: crate::unconfirmed::Waiting,
}

/// An envelope built and signed once, with what its publish needs: a [C-18] republish sends
/// exactly this again (same `msgId`, `ts` and signature).
struct Prepared {
    env: Envelope,
    body: Vec<u8>,
    exchange: &'static str,
    mandatory: bool,
    announces: bool,
}

/// [C-19]: the entities (gids, `_gateway`) whose presence `up` was confirmed on the current
/// publishing channel. Emptied when the channel is replaced (a reconnect); a waiter learns of every
/// change through `changes`.
#[derive(Default)]
struct Announced {
    gids: std::sync::Mutex<HashSet<String>>,
}

impl Announced {
    fn contains(&self, gid: &str) -> bool {
        self.gids.lock().map(|g| g.contains(gid)).unwrap_or(true)
    }

    fn insert(&self, gid: &str) -> bool {
        self.gids.lock().map(|mut g| g.insert(gid.to_string())).unwrap_or(false)
    }

    fn clear(&self) {
        if let Ok(mut g) = self.gids.lock() {
            g.clear();
        }
    }
}

/// Whether `body` is a presence `up` ([C-19]).
fn is_up(kind: Kind, body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct State<'a> {
        #[serde(borrow)]
        state: Option<&'a str>,
    }
    kind == Kind::Presence && serde_json::from_slice::<State>(body).is_ok_and(|s| s.state == Some("up"))
}

impl PublishError {
    /// The publish may have been lost with its connection (PUB-3, [C-16]): a [C-18] republish
    /// applies. A nack, a return or the whole bound spent are answers, not losses.
    fn lost(&self) -> bool {
        matches!(self, PublishError::NotConnected | PublishError::Amqp(_))
    }

    /// Whether nothing of the message reached the wire: lapin refused the publish because it
    /// already knew its channel closed (its state check comes before any frame is queued), or
    /// there was no channel. A later attempt cannot make a second copy, whatever the kind.
    fn not_sent(&self) -> bool {
        match self {
            PublishError::NotConnected | PublishError::Refused { .. } => true,
            PublishError::Amqp(e) => matches!(e.kind(), lapin::ErrorKind::InvalidChannelState(_, "basic.publish")),
            _ => false,
        }
    }
}

impl Kind {
    /// [C-18]: the reference republishes every kind but the forward path's (SEND, BROADCAST: not
    /// allowed) and PRESENCE (allowed, but a heartbeat repeats itself every H anyway, and its
    /// publisher holds the departures lock: it must not wait out a reconnect).
    fn may_republish(self) -> bool {
        !matches!(self, Kind::Send | Kind::Broadcast | Kind::Presence)
    }
}

/// The confirm-mode publishing channel (PUB-1), replaced on every reconnect.
pub struct Publisher {
    host: String,
    /// Swapped by a rotation (MEM-3) once the new key's presence is confirmed.
    signer: std::sync::RwLock<Arc<Signer>>,
    default_ttl_ms: u64,
    channel: RwLock<Option<Channel>>,
    /// [C-19]: who may publish on the current channel.
    announced: Announced,
    /// The routing keys (queues) a publish of the current channel was confirmed to: a nack from
    /// any other is the enqueuer registration's (see the module doc) and is tried again.
    routed: std::sync::Mutex<HashSet<String>>,
    /// Bumped whenever the channel is replaced or an entity is announced: publishes waiting for
    /// either wake up and look again.
    changes: watch::Sender<u64>,
    /// The longest a publish waits for its confirm (PUB-3: a confirm that never comes — a
    /// connection dead but not yet detected — fails the publish instead of hanging its caller).
    confirm_timeout: std::time::Duration,
    /// `fleet_published_total{kind}` / `fleet_publish_failed_total{kind,reason}` go here.
    metrics: Arc<crate::metrics::Metrics>,
    /// The publishes handed over and not yet confirmed (the gateway's stall detector reads it).
    pub unconfirmed: crate::unconfirmed::Unconfirmed,
    /// [C-21] 9: set while the own credential would be rejected; the flag keeps the hot path to
    /// one atomic load.
    refusing: std::sync::atomic::AtomicBool,
    refusal: std::sync::RwLock<Option<Refusal>>,
}

impl Publisher {
    pub fn new(host: String, signer: Arc<Signer>, default_ttl_ms: u64) -> Publisher {
        Publisher {
            host,
            signer: std::sync::RwLock::new(signer),
            default_ttl_ms,
            channel: RwLock::new(None),
            announced: Announced::default(),
            routed: std::sync::Mutex::default(),
            changes: watch::Sender::new(0),
            confirm_timeout: std::time::Duration::from_secs(30),
            metrics: Arc::default(),
            unconfirmed: Default::default(),
            refusing: std::sync::atomic::AtomicBool::new(false),
            refusal: std::sync::RwLock::new(None),
        }
    }

    /// [C-21] 9: from now on every publish but PRESENCE fails with `refusal` (None: publish again).
    pub fn set_refusal(&self, refusal: Option<Refusal>) {
        let mut slot = self.refusal.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.refusing
            .store(refusal.is_some(), std::sync::atomic::Ordering::SeqCst);
        *slot = refusal;
    }

    /// The refusal in force for a message of `kind`, if any. PRESENCE still goes out: a rotation
    /// to a good pair announces itself with it, and heartbeats keep the host's state honest.
    fn refused(&self, kind: Kind) -> Result<(), PublishError> {
        if kind == Kind::Presence || !self.refusing.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(());
        }
        match &*self.refusal.read().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Some(r) => {
                self.failed(kind, r.reason);
                Err(PublishError::Refused {
                    reason: r.reason,
                    detail: r.detail.clone(),
                })
            }
            None => Ok(()),
        }
    }

    /// Counts publishes into `metrics` (the gateway's registry) instead of a private one.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Publisher {
        self.metrics = metrics;
        self
    }

    /// Bounds the wait for each confirm (the gateway passes its inject bound).
    pub fn with_confirm_timeout(mut self, t: std::time::Duration) -> Publisher {
        self.confirm_timeout = t;
        self
    }

    /// The key every publish is signed with.
    pub fn signer(&self) -> Arc<Signer> {
        Arc::clone(&self.signer.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// MEM-3: signs everything from now on with `signer` (after its presence was confirmed).
    pub fn set_signer(&self, signer: Arc<Signer>) {
        *self.signer.write().unwrap_or_else(std::sync::PoisonError::into_inner) = signer;
    }

    /// Opens a fresh confirm-mode channel on `conn` and makes it the publishing channel. Nobody
    /// is announced on it yet ([C-19]).
    pub async fn attach(&self, conn: &Connection) -> lapin::Result<()> {
        let ch = conn.create_channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
        let mut slot = self.channel.write().await;
        self.announced.clear();
        self.forget_routes();
        *slot = Some(ch);
        drop(slot);
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// [C-19]: whether `gid`'s `up` was confirmed on the current channel. A batching gateway
    /// (PRB-3) still sends an entity's per-entity `up` until it is: after a (re)connect every
    /// entity's messages wait for exactly that, and a batch does not count (PRB-3 keeps the
    /// per-entity delta).
    pub fn is_announced(&self, gid: &str) -> bool {
        self.announced.contains(gid)
    }

    /// Stops publishing on the current channel and hands it back, for the caller to close before
    /// its connection (a graceful stop closes every channel first).
    pub async fn detach(&self) -> Option<Channel> {
        let mut slot = self.channel.write().await;
        self.announced.clear();
        self.forget_routes();
        let ch = slot.take();
        drop(slot);
        self.changes.send_modify(|n| *n += 1);
        ch
    }

    /// Builds, signs and publishes `out`; returns the envelope as sent once the broker confirmed
    /// it and routed it (for `mandatory` messages). Bounded by the confirm bound in all: the wait
    /// for the sender's announcement ([C-19]), the publish, and a republish after a lost
    /// connection ([C-18], see the module doc).
    pub async fn publish(&self, out: Outgoing) -> Result<Envelope, PublishError> {
        let (kind, to, msg_id) = (out.kind, out.to.clone(), out.msg_id.clone());
        let started = std::time::Instant::now();
        let result = self.publish_bounded(out).await;
        if let Err(e) = &result
            && !matches!(e, PublishError::NoRoute | PublishError::Refused { .. })
        {
            // The caller answers `failed` (or FWD-5's `inject_timeout`): say why, once, here.
            tracing::warn!(kind = kind.as_str(), %to, msg_id = msg_id.as_deref().unwrap_or("-"), error = %e, took = ?started.elapsed(), "publish failed");
        }
        result
    }

    async fn publish_bounded(&self, out: Outgoing) -> Result<Envelope, PublishError> {
        self.refused(out.kind)?;
        let started = std::time::Instant::now();
        let deadline = tokio::time::Instant::now() + self.confirm_timeout;
        let (kind, from) = (out.kind, out.from.clone());
        let mut out = Some(out);
        let mut prepared: Option<Prepared> = None;
        let mut attempt = 0u32;
        // Whether an attempt may have reached the broker: from then on the publish can end
        // unknown, never "not sent" (CONTRACT §3).
        let mut handed = false;
        let mut nacks = 0u32;
        loop {
            let changes = self.changes.subscribe();
            let ch = match self.ready_for(kind, &from, deadline).await {
                Ok(ch) => ch,
                Err(e) => return Err(self.not_sent_in_time(kind, handed, e)),
            };
            // Stamped and signed once a channel is there: a publish that waited for the
            // reconnect carries the time it was sent, not the time it was asked for.
            let p = match (&mut prepared, out.take()) {
                (Some(p), _) => &*p,
                (slot, Some(out)) => &*slot.insert(self.prepare(out)),
                (None, None) => return Err(PublishError::NotConnected),
            };
            // Whether this channel has had a confirm from the message's queue yet (a nack then
            // is the enqueuer registration's, see the module doc).
            let first_to_queue = !self.has_routed(&p.env.to);
            let result = match tokio::time::timeout_at(deadline, self.hand_prepared(&ch, p)).await {
                Ok(Ok(sent)) => match tokio::time::timeout_at(deadline, self.confirmed(sent)).await {
                    Ok(r) => r,
                    Err(_) => Err(self.timed_out(kind)),
                },
                Ok(Err(e)) => {
                    let e = PublishError::from(e);
                    if !e.not_sent() {
                        self.failed(kind, "broker");
                    }
                    Err(e)
                }
                Err(_) => Err(self.timed_out(kind)),
            };
            match result {
                Ok(env) => {
                    if attempt > 0 {
                        tracing::info!(msg_id = %env.msg_id, kind = kind.as_str(), attempt, "published after a reconnect ([C-18] / not sent before)");
                    }
                    self.metrics.observe(Stage::Publish, started.elapsed());
                    crate::slow::publish_confirmed(&env.msg_id, kind.as_str(), started.elapsed());
                    return Ok(env);
                }
                // Nothing of it left the gateway: wait for the next channel, whatever the kind.
                Err(e) if e.not_sent() => {
                    tracing::debug!(msg_id = %p.env.msg_id, kind = kind.as_str(), error = %e, "channel closed before the publish; sending once reconnected");
                    if tokio::time::Instant::now() >= deadline {
                        return Err(self.not_sent_in_time(kind, handed, PublishError::NotConnected));
                    }
                    Self::next_change(changes, deadline).await;
                    attempt += 1;
                }
                // RabbitMQ refused the channel's first publish to a quorum queue without a
                // reachable leader: the same envelope again once one is elected, within the bound.
                Err(PublishError::Nacked)
                    if kind.may_republish() && first_to_queue && tokio::time::Instant::now() < deadline =>
                {
                    handed = true;
                    nacks += 1;
                    if nacks == 1 {
                        tracing::info!(msg_id = %p.env.msg_id, kind = kind.as_str(), to = %p.env.to, "first publish to the queue on this channel nacked (no leader reachable yet?); publishing again within the bound");
                    }
                    Self::nack_pause(nacks, deadline).await;
                    if tokio::time::Instant::now() >= deadline {
                        return Err(PublishError::Nacked);
                    }
                    attempt += 1;
                }
                Err(e) if kind.may_republish() && e.lost() && tokio::time::Instant::now() < deadline => {
                    handed = true;
                    tracing::info!(msg_id = %p.env.msg_id, kind = kind.as_str(), error = %e, "publish lost with its connection; republishing once reconnected ([C-18])");
                    // The channel that failed is replaced on the reconnect; until then wait.
                    Self::next_change(changes, deadline).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The failure of a publish that found no channel in time: "not sent" (definite) unless an
    /// earlier attempt was handed to the broker — then unknown ([`PublishError::Unconfirmed`]).
    fn not_sent_in_time(&self, kind: Kind, handed: bool, e: PublishError) -> PublishError {
        if handed {
            self.failed(kind, "unconfirmed");
            PublishError::Unconfirmed
        } else {
            self.failed(kind, "not_connected");
            e
        }
    }

    /// The publishing channel, once `from` may publish on it ([C-19]: anything but a presence
    /// waits for the sender's confirmed `up`). Without a channel every kind but PRESENCE waits
    /// for the reconnect until the deadline, then fails [`PublishError::NotConnected`] (nothing
    /// was sent). A presence fails at once: a heartbeat repeats itself, and its publisher holds
    /// the departures lock.
    async fn ready_for(&self, kind: Kind, from: &str, deadline: tokio::time::Instant) -> Result<Channel, PublishError> {
        loop {
            let changes = self.changes.subscribe();
            let ch = self.channel.read().await.clone();
            match ch {
                None if kind == Kind::Presence => return Err(PublishError::NotConnected),
                Some(ch) if kind == Kind::Presence || self.announced.contains(from) => return Ok(ch),
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(PublishError::NotConnected);
            }
            Self::next_change(changes, deadline).await;
        }
    }

    /// The pause before publishing a nacked message again: 100 ms doubling to 1 s (a quorum
    /// queue's new leader is elected within seconds), never past the deadline.
    async fn nack_pause(nacks: u32, deadline: tokio::time::Instant) {
        tokio::time::sleep_until((tokio::time::Instant::now() + nack_pause_len(nacks)).min(deadline)).await;
    }

    fn has_routed(&self, to: &str) -> bool {
        self.routed.lock().map(|r| r.contains(to)).unwrap_or(false)
    }

    fn forget_routes(&self) {
        if let Ok(mut r) = self.routed.lock() {
            r.clear();
        }
    }

    /// Waits for the next channel or announcement change, or the deadline.
    async fn next_change(mut changes: watch::Receiver<u64>, deadline: tokio::time::Instant) {
        let _ = tokio::time::timeout_at(deadline, changes.changed()).await;
    }

    fn timed_out(&self, kind: Kind) -> PublishError {
        self.failed(kind, "confirm_timeout");
        PublishError::ConfirmTimeout(self.confirm_timeout)
    }

    /// Publishes every message of `outs` in order, then waits for their confirms: one round trip
    /// for the batch instead of one per message (the migration's move, a heartbeat round).
    /// Results are in order.
    ///
    /// The messages are handed to the channel together, not one after another: lapin answers a
    /// publish once its I/O loop has written the frames, so handing them one by one cost one
    /// wake-up of that loop per message (~0.27 ms each in a 1,000-entity heartbeat round, and a
    /// 10,000-entity round no longer fitted in H). [`in_order`] keeps the batch's order on the
    /// wire.
    ///
    /// The whole batch shares one confirm bound: a connection lost mid-batch fails every
    /// unconfirmed message within one bound, not one bound per message (a batch of 100 would
    /// otherwise hold its caller, and the migration lock, for 100 bounds).
    pub async fn publish_batch(&self, outs: Vec<Outgoing>) -> Vec<Result<Envelope, PublishError>> {
        let deadline = tokio::time::Instant::now() + self.confirm_timeout;
        let Some(ch) = self.channel.read().await.clone() else {
            return outs.iter().map(|_| Err(PublishError::NotConnected)).collect();
        };
        let (n, kind) = (outs.len(), outs.first().map_or(Kind::Presence, |o| o.kind));
        let handing = outs.into_iter().map(|out| self.hand(&ch, out)).collect();
        let Ok(sent) = tokio::time::timeout_at(deadline, in_order(handing)).await else {
            self.failed(kind, "confirm_timeout");
            return (0..n)
                .map(|_| Err(PublishError::ConfirmTimeout(self.confirm_timeout)))
                .collect();
        };
        let mut results = Vec::with_capacity(sent.len());
        for s in sent {
            results.push(match s {
                Ok(s) => match tokio::time::timeout_at(deadline, self.confirmed(s)).await {
                    Ok(r) => r,
                    Err(_) => Err(PublishError::ConfirmTimeout(self.confirm_timeout)),
                },
                Err(e) => {
                    self.failed(kind, "broker");
                    Err(e.into())
                }
            });
        }
        results
    }

    /// Builds, signs and hands `out` to the channel; the confirm is awaited by [`Self::confirmed`].
    pub async fn send(&self, out: Outgoing) -> Result<Sent, PublishError> {
        self.refused(out.kind)?;
        let ch = self.channel.read().await.clone().ok_or(PublishError::NotConnected)?;
        let kind = out.kind;
        self.bounded(kind, self.hand(&ch, out)).await
    }

    /// Builds and signs `out` and hands it to `ch`. Everything up to lapin's queueing of the
    /// frames happens on the first poll (no await before it), which [`in_order`] relies on.
    async fn hand(&self, ch: &Channel, out: Outgoing) -> lapin::Result<Sent> {
        let p = self.prepare(out);
        self.hand_prepared(ch, &p).await
    }

    /// The envelope of `out`, stamped (`ts`, `expiresAt`, ids) and signed.
    fn prepare(&self, out: Outgoing) -> Prepared {
        let ts = now_ms();
        let mut env = Envelope {
            v: VERSION.to_string(),
            kind: out.kind,
            msg_id: out.msg_id.unwrap_or_else(new_uuid),
            trace_id: out.trace_id.unwrap_or_else(new_uuid),
            from: out.from,
            to: out.to,
            host: self.host.clone(),
            turn_id: out.turn_id,
            spawn_id: out.spawn_id,
            corr_id: out.corr_id,
            ts,
            expires_at: out.expires_at.unwrap_or(ts + self.default_ttl_ms),
            sig: String::new(),
        };
        out.signer.unwrap_or_else(|| self.signer()).sign(&mut env, &out.body);
        Prepared {
            announces: is_up(env.kind, &out.body),
            env,
            body: out.body,
            exchange: out.exchange,
            mandatory: out.mandatory,
        }
    }

    /// Hands a prepared envelope to `ch` (first poll only, as [`Self::hand`]).
    async fn hand_prepared(&self, ch: &Channel, p: &Prepared) -> lapin::Result<Sent> {
        let env = p.env.clone();
        let content_type = if env.kind.is_json() {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        let mut props = BasicProperties::default()
            .with_message_id(env.msg_id.as_str().into())
            .with_content_type(content_type.into())
            .with_delivery_mode(if env.kind.is_transient() { 1 } else { 2 })
            .with_headers(env.to_headers());
        if env.kind.is_transient() {
            // The time left now: a republished ASK or ANSWER does not outlive its expiresAt.
            let left = env.expires_at.saturating_sub(now_ms()).max(1);
            props = props.with_expiration(left.to_string().as_str().into());
        }
        let opts = BasicPublishOptions {
            mandatory: p.mandatory,
            ..BasicPublishOptions::default()
        };
        let waiting = self.unconfirmed.track();
        let confirm = ch
            .basic_publish(p.exchange.into(), env.to.as_str().into(), opts, &p.body, props)
            .await?;
        Ok(Sent {
            env,
            confirm,
            announces: p.announces,
            waiting,
        })
    }

    /// Waits (bounded) for the confirm of a sent message: nacked, returned (`mandatory` and
    /// unroutable) or lost with the connection, it fails (PUB-2, PUB-3).
    pub async fn confirmed(&self, sent: Sent) -> Result<Envelope, PublishError> {
        let Sent {
            env,
            confirm,
            announces,
            waiting: _waiting,
        } = sent;
        let confirm = self.bounded(env.kind, confirm).await?;
        if confirm.is_nack() {
            self.failed(env.kind, "nack");
            return Err(PublishError::Nacked);
        }
        if confirm.take_message().is_some() {
            self.failed(env.kind, "no_route");
            return Err(PublishError::NoRoute);
        }
        Metrics::count(&self.metrics.published, &[("kind", env.kind.as_str())]);
        if env.kind != Kind::Presence
            && let Ok(mut r) = self.routed.lock()
            && !r.contains(&env.to)
        {
            r.insert(env.to.clone());
        }
        if announces && self.announced.insert(&env.from) {
            self.changes.send_modify(|n| *n += 1);
        }
        Ok(env)
    }

    /// Awaits one broker step of a publish within the confirm bound, counting a failure.
    async fn bounded<T, E: Into<PublishError>>(
        &self,
        kind: Kind,
        step: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, PublishError> {
        match tokio::time::timeout(self.confirm_timeout, step).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => {
                self.failed(kind, "broker");
                Err(e.into())
            }
            Err(_) => {
                self.failed(kind, "confirm_timeout");
                Err(PublishError::ConfirmTimeout(self.confirm_timeout))
            }
        }
    }

    fn failed(&self, kind: Kind, reason: &str) {
        Metrics::count(
            &self.metrics.publish_failed,
            &[("kind", kind.as_str()), ("reason", reason)],
        );
    }
}

/// The pause after the `nacks`-th nack of one publish ([`Publisher::nack_pause`]).
fn nack_pause_len(nacks: u32) -> std::time::Duration {
    std::time::Duration::from_millis(100u64 << nacks.saturating_sub(1).min(4)).min(std::time::Duration::from_secs(1))
}

/// Runs `futs` to completion, polling each once in the order given before any is polled twice,
/// and returns their outputs in that order. A lapin publish queues its frames (and takes its
/// delivery tag) on its first poll, so a batch handed over this way reaches the wire in order,
/// while the batch waits for the I/O loop's writes together rather than one by one.
async fn in_order<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    use std::task::Poll;
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut first: Vec<Option<F::Output>> = Vec::with_capacity(futs.len());
    std::future::poll_fn(|cx| {
        for f in &mut futs {
            first.push(match f.as_mut().poll(cx) {
                Poll::Ready(v) => Some(v),
                Poll::Pending => None,
            });
        }
        Poll::Ready(())
    })
    .await;
    let mut pending = Vec::new();
    let mut rest = Vec::new();
    for (i, (f, done)) in futs.into_iter().zip(&first).enumerate() {
        if done.is_none() {
            pending.push(i);
            rest.push(f);
        }
    }
    for (i, v) in pending.into_iter().zip(futures_util::future::join_all(rest).await) {
        first[i] = Some(v);
    }
    // Every slot is filled: the first pass or `join_all` answered each future once.
    first.into_iter().flatten().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn a_rotation_signs_its_presence_with_the_new_key_then_everything() {
        use crate::signing::Keyring;
        let (old, new) = (
            Arc::new(Signer::from_seed([1; 32])),
            Arc::new(Signer::from_seed([2; 32])),
        );
        let p = Publisher::new("a".into(), old.clone(), 60_000);
        let verifies = |prepared: &Prepared, key: &Signer| {
            let mut ring = Keyring::default();
            ring.insert("a", key.verifying_key());
            ring.verify(&prepared.env, &prepared.body).is_ok()
        };
        let out = || {
            Outgoing::new(
                Kind::Presence,
                "bridge.roster",
                "roster.a._gateway",
                "_gateway",
                b"{}".to_vec(),
            )
        };
        assert!(verifies(&p.prepare(out()), &old));
        let mut first = out();
        first.signer = Some(new.clone());
        let first = p.prepare(first);
        assert!(verifies(&first, &new) && !verifies(&first, &old), "the override signs");
        assert!(verifies(&p.prepare(out()), &old), "the rest still with the old key");
        p.set_signer(new.clone());
        assert!(verifies(&p.prepare(out()), &new), "switched");
    }

    #[test]
    fn a_nacked_publish_is_tried_again_after_100_ms_doubling_to_1_s() {
        let ms = |n| nack_pause_len(n).as_millis();
        assert_eq!(
            [ms(1), ms(2), ms(3), ms(4), ms(5), ms(40)],
            [100, 200, 400, 800, 1000, 1000]
        );
    }

    #[tokio::test]
    async fn in_order_starts_every_future_in_order_and_answers_in_order() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let futs: Vec<_> = (0..40usize)
            .map(|i| {
                let started = Arc::clone(&started);
                async move {
                    started.lock().expect("lock").push(i);
                    // Later ones finish first; some finish on their first poll.
                    for _ in 0..(40 - i) % 7 {
                        tokio::task::yield_now().await;
                    }
                    i * 10
                }
            })
            .collect();
        let out = in_order(futs).await;
        assert_eq!(out, (0..40).map(|i| i * 10).collect::<Vec<_>>());
        assert_eq!(*started.lock().expect("lock"), (0..40).collect::<Vec<_>>());
    }
}
