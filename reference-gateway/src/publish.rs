//! Publishing (SPEC §4): a dedicated confirm-mode channel, `mandatory` routing, signed envelopes.
//!
//! Every message this gateway sends goes through [`Publisher::publish`]: it fills the envelope,
//! signs it, and waits for the broker's confirm. A `basic.return` arrives before the confirm and is
//! attached to it, so "confirmed but returned" becomes a fast `NoRoute` (PUB-2); a nack or a lost
//! channel fails the publish (PUB-3).

use std::sync::Arc;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Connection};
use tokio::sync::RwLock;

use crate::envelope::{Envelope, Kind, VERSION, new_uuid, now_ms};
use crate::metrics::{Metrics, Stage};
use crate::signing::Signer;

/// Why a publish failed.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("no_route: the broker could not route the message to any queue")]
    NoRoute,
    #[error("the broker nacked the message")]
    Nacked,
    #[error("not connected to the broker")]
    NotConnected,
    #[error("no confirm from the broker within {0:?} (the message may still have been routed)")]
    ConfirmTimeout(std::time::Duration),
    #[error("broker error: {0}")]
    Amqp(#[from] lapin::Error),
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
        }
    }
}

/// A message handed to the channel whose confirm is still to come.
pub struct Sent {
    pub env: Envelope,
    confirm: lapin::PublisherConfirm,
}

/// The confirm-mode publishing channel (PUB-1), replaced on every reconnect.
pub struct Publisher {
    host: String,
    signer: Arc<Signer>,
    default_ttl_ms: u64,
    channel: RwLock<Option<Channel>>,
    /// The longest a publish waits for its confirm (PUB-3: a confirm that never comes — a
    /// connection dead but not yet detected — fails the publish instead of hanging its caller).
    confirm_timeout: std::time::Duration,
    /// `fleet_published_total{kind}` / `fleet_publish_failed_total{kind,reason}` go here.
    metrics: Arc<crate::metrics::Metrics>,
}

impl Publisher {
    pub fn new(host: String, signer: Arc<Signer>, default_ttl_ms: u64) -> Publisher {
        Publisher {
            host,
            signer,
            default_ttl_ms,
            channel: RwLock::new(None),
            confirm_timeout: std::time::Duration::from_secs(30),
            metrics: Arc::default(),
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

    /// Opens a fresh confirm-mode channel on `conn` and makes it the publishing channel.
    pub async fn attach(&self, conn: &Connection) -> lapin::Result<()> {
        let ch = conn.create_channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
        *self.channel.write().await = Some(ch);
        Ok(())
    }

    pub async fn detach(&self) {
        *self.channel.write().await = None;
    }

    /// Builds, signs and publishes `out`; returns the envelope as sent once the broker confirmed
    /// it and routed it (for `mandatory` messages).
    pub async fn publish(&self, out: Outgoing) -> Result<Envelope, PublishError> {
        let started = std::time::Instant::now();
        let sent = self.send(out).await?;
        let confirmed = self.confirmed(sent).await;
        if confirmed.is_ok() {
            self.metrics.observe(Stage::Publish, started.elapsed());
        }
        confirmed
    }

    /// Publishes every message of `outs` in order, then waits for their confirms: one round trip
    /// for the batch instead of one per message (the migration's move). Results are in order.
    ///
    /// The whole batch shares one confirm bound: a connection lost mid-batch fails every
    /// unconfirmed message within one bound, not one bound per message (a batch of 100 would
    /// otherwise hold its caller, and the migration lock, for 100 bounds).
    pub async fn publish_batch(&self, outs: Vec<Outgoing>) -> Vec<Result<Envelope, PublishError>> {
        let deadline = tokio::time::Instant::now() + self.confirm_timeout;
        let mut sent = Vec::with_capacity(outs.len());
        for out in outs {
            let s = match tokio::time::timeout_at(deadline, self.send(out)).await {
                Ok(s) => s,
                Err(_) => Err(PublishError::ConfirmTimeout(self.confirm_timeout)),
            };
            sent.push(s);
        }
        let mut results = Vec::with_capacity(sent.len());
        for s in sent {
            results.push(match s {
                Ok(s) => match tokio::time::timeout_at(deadline, self.confirmed(s)).await {
                    Ok(r) => r,
                    Err(_) => Err(PublishError::ConfirmTimeout(self.confirm_timeout)),
                },
                Err(e) => Err(e),
            });
        }
        results
    }

    /// Builds, signs and hands `out` to the channel; the confirm is awaited by [`Self::confirmed`].
    pub async fn send(&self, out: Outgoing) -> Result<Sent, PublishError> {
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
        self.signer.sign(&mut env, &out.body);
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
            let left = env.expires_at.saturating_sub(ts).max(1);
            props = props.with_expiration(left.to_string().as_str().into());
        }
        let ch = self.channel.read().await.clone().ok_or(PublishError::NotConnected)?;
        let opts = BasicPublishOptions {
            mandatory: out.mandatory,
            ..BasicPublishOptions::default()
        };
        let handed = ch.basic_publish(out.exchange.into(), env.to.as_str().into(), opts, &out.body, props);
        let confirm = self.bounded(env.kind, handed).await?;
        Ok(Sent { env, confirm })
    }

    /// Waits (bounded) for the confirm of a sent message: nacked, returned (`mandatory` and
    /// unroutable) or lost with the connection, it fails (PUB-2, PUB-3).
    pub async fn confirmed(&self, sent: Sent) -> Result<Envelope, PublishError> {
        let Sent { env, confirm } = sent;
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
        Ok(env)
    }

    /// Awaits one broker step of a publish within the confirm bound, counting a failure.
    async fn bounded<T>(
        &self,
        kind: Kind,
        step: impl std::future::Future<Output = lapin::Result<T>>,
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
