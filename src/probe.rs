//! The wire probe: a raw AMQP client the suite uses to look at and poke the broker directly.
//!
//! It checks what a gateway declared and how (an exclusive consumer really refuses a second one),
//! publishes crafted messages — any exchange, routing key, headers of any AMQP type (also wrong
//! ones), body and properties — and taps exchanges with queues of its own to see what crosses the
//! wire: dead letters (a queue bound to the `bridge.dlx` fanout gets a copy of every dead letter,
//! without competing with whoever consumes `bridge.dlq`) and the messages gateways publish. Queue
//! counters come from the management API (`broker`); this module is the AMQP side.
//!
//! It also plays a host: [`Probe::announce`] publishes a signed PRESENCE for a fake entity on the
//! probe's host, so the probe's crafted messages pass the "`from` lives on `host`" check and only
//! the one defect a scenario planted is left for the gateway to find.

use std::time::Duration;

use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueBindOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::envelope::{Envelope, now_ms};
use crate::keys::HostKey;

mod captured;
mod error;
mod tap;
pub use captured::{Captured, value_str};
pub use error::ProbeError;
pub use tap::Tap;

/// One message exactly as the probe will publish it. Nothing is checked or filled in.
#[derive(Debug, Clone)]
pub struct Crafted {
    pub exchange: String,
    pub routing_key: String,
    /// AMQP headers, any types. Never put a short string here: RabbitMQ closes the connection.
    pub headers: FieldTable,
    pub body: Vec<u8>,
    /// Properties; `headers` above replace any headers set here.
    pub properties: BasicProperties,
    pub mandatory: bool,
}

impl Crafted {
    /// A message carrying `env` as long-string headers, with the properties an honest gateway
    /// sets (message_id = msgId, persistent, a content type by kind), published `mandatory`.
    pub fn from_envelope(exchange: &str, routing_key: &str, env: &Envelope, body: &[u8]) -> Self {
        let json = !matches!(env.kind(), "SEND" | "REPLY" | "ASK" | "ANSWER" | "BROADCAST");
        let properties = BasicProperties::default()
            .with_message_id(env.msg_id().into())
            .with_content_type(
                if json {
                    "application/json"
                } else {
                    "text/plain; charset=utf-8"
                }
                .into(),
            )
            .with_delivery_mode(2);
        Crafted {
            exchange: exchange.to_string(),
            routing_key: routing_key.to_string(),
            headers: env.to_field_table(),
            body: body.to_vec(),
            properties,
            mandatory: true,
        }
    }

    /// Replaces (or adds) one header with a value of any AMQP type.
    pub fn set_header(&mut self, name: &str, value: AMQPValue) -> &mut Crafted {
        self.headers.insert(name.into(), value);
        self
    }

    pub fn remove_header(&mut self, name: &str) -> &mut Crafted {
        let mut map = self.headers.inner().clone();
        map.remove(name);
        self.headers = FieldTable::from(map);
        self
    }
}

/// What the broker said about a probe publish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// Confirmed and routed to at least one queue (or not `mandatory`).
    Routed,
    /// Confirmed, but returned unroutable (`mandatory` only).
    Unroutable,
}

/// An AMQP connection into one scenario's vhost.
pub struct Probe {
    conn: Connection,
    publish_ch: Channel,
}

impl Probe {
    pub async fn connect(amqp_url: &str) -> Result<Probe, ProbeError> {
        let conn = Connection::connect(amqp_url, ConnectionProperties::default())
            .await
            .map_err(|e| ProbeError::Connect {
                url: redact(amqp_url),
                reason: e.to_string(),
            })?;
        let publish_ch = conn.create_channel().await?;
        publish_ch.confirm_select(ConfirmSelectOptions::default()).await?;
        Ok(Probe { conn, publish_ch })
    }

    /// Tries to consume `queue` (exclusively or not) on a fresh channel. `Ok(())` means the broker
    /// accepted the consumer (it is cancelled again at once); `Err(text)` carries the broker's
    /// refusal, e.g. `ACCESS_REFUSED`.
    pub async fn try_consume(&self, queue: &str, exclusive: bool) -> Result<Result<(), String>, ProbeError> {
        let ch = self.conn.create_channel().await?;
        let opts = BasicConsumeOptions {
            exclusive,
            ..BasicConsumeOptions::default()
        };
        let tag = format!("probe-{}", uuid::Uuid::new_v4().simple());
        match ch
            .basic_consume(queue.into(), tag.as_str().into(), opts, FieldTable::default())
            .await
        {
            Ok(_consumer) => {
                let _ = ch
                    .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
                    .await;
                let _ = ch.close(200, "probe done".into()).await;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    /// Publishes `msg` exactly as crafted, on a confirm-mode channel, and waits for the confirm.
    pub async fn publish(&self, msg: &Crafted) -> Result<Published, ProbeError> {
        let props = msg.properties.clone().with_headers(msg.headers.clone());
        let confirm = self
            .publish_ch
            .basic_publish(
                msg.exchange.as_str().into(),
                msg.routing_key.as_str().into(),
                BasicPublishOptions {
                    mandatory: msg.mandatory,
                    ..BasicPublishOptions::default()
                },
                &msg.body,
                props,
            )
            .await?
            .await?;
        if confirm.is_nack() {
            return Err(ProbeError::Nacked {
                exchange: msg.exchange.clone(),
                routing_key: msg.routing_key.clone(),
            });
        }
        Ok(if confirm.take_message().is_some() {
            Published::Unroutable
        } else {
            Published::Routed
        })
    }

    /// One broker round trip, measured now: an empty message published on the confirm channel
    /// to the default exchange under a name no queue has, until its confirm. What a reaction that
    /// waited for a delivery takes off as the broker's part (CONTRACT §7).
    pub async fn round_trip(&self) -> Result<Duration, ProbeError> {
        let started = std::time::Instant::now();
        self.publish_ch
            .basic_publish(
                "".into(),
                "fleet.probe.round-trip".into(),
                BasicPublishOptions::default(),
                b"",
                BasicProperties::default(),
            )
            .await?
            .await?;
        Ok(started.elapsed())
    }

    /// Publishes a signed PRESENCE (`up`) for the fake entity `gid` on `key`'s host, on
    /// `bridge.roster` with key `roster.<host>.<gid>`, valid for `ttl`. Returns its envelope.
    pub async fn announce(&self, key: &HostKey, gid: &str, role: &str, ttl: Duration) -> Result<Envelope, ProbeError> {
        let ttl_ms = ttl.as_millis() as u64;
        let body = serde_json::json!({
            "state": "up", "role": role, "groups": [], "agentStatus": "idle", "ttlMs": ttl_ms,
        })
        .to_string()
        .into_bytes();
        let (msg, env) = presence_message(key, gid, &body, ttl_ms);
        self.publish(&msg).await?;
        Ok(env)
    }

    /// Publishes a signed `_gateway` PRESENCE (`up`) of `key`'s host, as a gateway of SPEC §8 sends
    /// with every heartbeat (no `presence-batch`: its entities keep their own presence). A gateway
    /// judges a `from` as not living on a host ([C-25]) only once that host's `_gateway` presence
    /// arrived after its own (re)connect; a host the probe plays must send one, as a real one does.
    pub async fn announce_gateway(&self, key: &HostKey, ttl: Duration) -> Result<Envelope, ProbeError> {
        let ttl_ms = ttl.as_millis() as u64;
        let body = serde_json::json!({
            "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl_ms,
            "profiles": [],
        })
        .to_string()
        .into_bytes();
        let (msg, env) = presence_message(key, "_gateway", &body, ttl_ms);
        self.publish(&msg).await?;
        Ok(env)
    }

    /// Publishes `n` signed PRESENCE (`up`) messages for `n` fresh fake entities on `key`'s host,
    /// pipelined (all sent, then every confirm awaited): a backlog of ordinary presence for every
    /// roster queue, as a large fleet makes. Returns how many were confirmed.
    pub async fn flood_presence(&self, key: &HostKey, n: usize, ttl: Duration) -> Result<usize, ProbeError> {
        let ttl_ms = ttl.as_millis() as u64;
        let body = serde_json::json!({
            "state": "up", "role": "worker", "groups": [], "agentStatus": "idle", "ttlMs": ttl_ms,
        })
        .to_string()
        .into_bytes();
        let mut confirms = Vec::with_capacity(n);
        for _ in 0..n {
            let gid = uuid::Uuid::new_v4().to_string();
            let (msg, _) = presence_message(key, &gid, &body, ttl_ms);
            let props = msg.properties.clone().with_headers(msg.headers.clone());
            let confirm = self
                .publish_ch
                .basic_publish(
                    msg.exchange.as_str().into(),
                    msg.routing_key.as_str().into(),
                    BasicPublishOptions::default(),
                    &msg.body,
                    props,
                )
                .await?;
            confirms.push(confirm);
        }
        let mut confirmed = 0;
        for c in confirms {
            if !c.await?.is_nack() {
                confirmed += 1;
            }
        }
        Ok(confirmed)
    }

    /// A queue of the probe's own (server-named, exclusive: gone with the probe) bound to
    /// `exchange` with `routing_key`. Everything routed there from now on is copied into it.
    pub async fn tap(&self, exchange: &str, routing_key: &str) -> Result<Tap, ProbeError> {
        let ch = self.conn.create_channel().await?;
        let q = ch
            .queue_declare(
                "".into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await?;
        let queue = q.name().as_str().to_string();
        ch.queue_bind(
            queue.as_str().into(),
            exchange.into(),
            routing_key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
        Ok(Tap::new(ch, queue))
    }

    /// A named, durable tap queue bound to each `(exchange, routing key)` of `bindings`: unlike
    /// [`Probe::tap`] it is not tied to this connection, and it lives through a broker restart
    /// (with the persistent messages it holds), so it copies what gateways publish right across
    /// the restart. [`Probe::reattach`] reads it from a later connection. Gone with the vhost.
    pub async fn durable_tap(&self, queue: &str, bindings: &[(&str, &str)]) -> Result<Tap, ProbeError> {
        let ch = self.conn.create_channel().await?;
        ch.queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await?;
        for (exchange, routing_key) in bindings {
            ch.queue_bind(
                queue.into(),
                (*exchange).into(),
                (*routing_key).into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await?;
        }
        Ok(Tap::new(ch, queue.to_string()))
    }

    /// A tap on an existing queue (a [`Probe::durable_tap`] made earlier, on any connection).
    pub async fn reattach(&self, queue: &str) -> Result<Tap, ProbeError> {
        let ch = self.conn.create_channel().await?;
        Ok(Tap::new(ch, queue.to_string()))
    }

    /// A tap on `bridge.dlx`: a copy of every dead letter of the vhost, with its `x-death`.
    /// A tap on a direct exchange (`bridge.control`): one queue bound with each key.
    pub async fn tap_keys(&self, exchange: &str, keys: &[String]) -> Result<Tap, ProbeError> {
        let (first, rest) = keys.split_first().map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
        let tap = self.tap(exchange, first).await?;
        for k in rest {
            tap.channel()
                .queue_bind(
                    tap.queue().into(),
                    exchange.into(),
                    k.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await?;
        }
        Ok(tap)
    }

    pub async fn watch_dead_letters(&self) -> Result<Tap, ProbeError> {
        self.tap("bridge.dlx", "").await
    }

    /// Binds an existing queue (e.g. a gateway's inbox) to `exchange` with `routing_key` —
    /// what a rogue broker login could do.
    pub async fn bind(&self, queue: &str, exchange: &str, routing_key: &str) -> Result<(), ProbeError> {
        let ch = self.conn.create_channel().await?;
        ch.queue_bind(
            queue.into(),
            exchange.into(),
            routing_key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
        let _ = ch.close(200, "probe done".into()).await;
        Ok(())
    }

    /// Whether the connection is still open: a broker restart or a connection-level error ends it
    /// (and every tap on it), and the suite's scenario probe is then connected again.
    pub fn is_connected(&self) -> bool {
        self.conn.status().connected()
    }

    pub async fn close(self) {
        let _ = self.conn.close(200, "probe done".into()).await;
    }
}

/// A signed PRESENCE for `gid` on `key`'s host with `body`, expiring `ttl_ms` from now.
pub fn presence_message(key: &HostKey, gid: &str, body: &[u8], ttl_ms: u64) -> (Crafted, Envelope) {
    let routing_key = format!("roster.{}.{gid}", key.host);
    let mut env = Envelope::new("PRESENCE", gid, &routing_key, &key.host);
    let ts: u64 = env.value("ts").parse().unwrap_or_else(|_| now_ms());
    env.set("expiresAt", &(ts + ttl_ms).to_string());
    let env = env.signed_by(key, body);
    (Crafted::from_envelope("bridge.roster", &routing_key, &env, body), env)
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}
