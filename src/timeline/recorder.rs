//! The scenario-wide wire recorder: every publish and every dead letter of a scenario's vhost,
//! with its time since the scenario began, for the scenario's sequence chart.
//!
//! Why it is built this way: it runs in every scenario, so it must neither change a verdict nor
//! cost much. A queue bound to `bridge.msg` with `#` would make every unroutable SEND routable
//! (PUB-2's `no_route` would never come), so the fleet's own exchanges are not tapped: RabbitMQ's
//! firehose (`amq.rabbitmq.trace`, switched on for the vhost only while the scenario runs) copies
//! every publish — routed or not, with the queues it reached — without touching routing. Dead
//! letters are copied from the `bridge.dlx` fanout (never published `mandatory`: a second queue
//! there changes nothing a gateway sees). One exclusive, auto-delete queue named
//! [`HIDDEN_QUEUE_PREFIX`]`<uuid>` takes both, on one connection named [`HIDDEN_CONNECTION_NAME`];
//! the management client leaves that queue, its consumer and that connection out of what it
//! lists, so no step that counts the vhost's queues, consumers or connections sees them. A broker
//! without the firehose (LavinMQ) gets the dead letters only, and the chart says so.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, Connection, ConnectionProperties};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::kept::Kept;

use crate::broker::Broker;
use crate::broker::management::{HIDDEN_CONNECTION_NAME, HIDDEN_QUEUE_PREFIX, Management};
use crate::probe::value_str;

/// The topic exchange RabbitMQ's firehose copies each publish to, key `publish.<exchange>`.
pub const TRACE_EXCHANGE: &str = "amq.rabbitmq.trace";
/// The dead-letter exchange of SPEC §1.
const DLX: &str = "bridge.dlx";
/// The envelope headers kept (SPEC §2), when they are strings.
const HEADERS: [&str; 10] = [
    "v", "kind", "msgId", "traceId", "from", "to", "host", "turnId", "spawnId", "corrId",
];

/// Where a recorded message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A publish, as the firehose copied it.
    Publish,
    /// A dead letter, as `bridge.dlx` copied it.
    DeadLetter,
}

/// One message the recorder saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireEvent {
    pub at_ms: u64,
    pub source: Source,
    /// The exchange it was published to (for a dead letter: `bridge.dlx`).
    pub exchange: String,
    pub routing_key: String,
    /// The broker's name of the publishing connection (firehose only).
    pub connection: Option<String>,
    /// The queues the publish reached (firehose only).
    pub routed: Option<Vec<String>>,
    /// The envelope's string headers among [`HEADERS`].
    pub headers: BTreeMap<String, String>,
    /// A dead letter's first `x-death`: (reason, queue).
    pub death: Option<(String, String)>,
    /// A PRESENCE body's `state/agentStatus`.
    pub presence: Option<String>,
    /// A FAILED body's `reason` (and `typed` when true: SPEC [C-23]) — the field a wrong outcome
    /// shows in (`busy` where `stopped` was due).
    pub reason: Option<String>,
}

impl WireEvent {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// What a recorder hands over at the scenario's end.
#[derive(Debug, Default)]
pub struct Recording {
    pub events: Vec<WireEvent>,
    /// Connection name → host, for the connections each gateway opened when it started.
    pub gateway_connections: BTreeMap<String, String>,
    pub notes: Vec<String>,
}

#[derive(Default)]
struct Shared {
    /// The first and the last events (`kept.rs`): a seeded backlog cannot push the failure's
    /// own messages out.
    events: Mutex<Kept<WireEvent>>,
    notes: Mutex<Vec<String>>,
    stopping: AtomicBool,
    /// Wakes the recording task: bind `bridge.dlx` now (a gateway declared it), or stop.
    wake: Notify,
}

impl Shared {
    fn note(&self, note: String) {
        if let Ok(mut n) = self.notes.lock()
            && !n.contains(&note)
        {
            n.push(note);
        }
    }
}

/// One scenario's recorder: made with its world, attached to the scenario's vhost before its
/// first gateway starts, stopped at the scenario's end.
pub struct Recorder {
    started: Instant,
    started_unix_ms: u64,
    shared: Arc<Shared>,
    /// The AMQP URL recorded and the task recording it.
    task: Option<(String, JoinHandle<()>)>,
    /// Where the firehose was switched on, to switch it off.
    tracing: Option<(Management, String)>,
    gateway_connections: BTreeMap<String, String>,
    /// The vhost's connections before the gateway now starting.
    before: Option<BTreeSet<String>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// A recorder whose clock starts now (the scenario's start).
    pub fn new() -> Recorder {
        Recorder {
            started: Instant::now(),
            started_unix_ms: crate::envelope::now_ms(),
            shared: Arc::default(),
            task: None,
            tracing: None,
            gateway_connections: BTreeMap::new(),
            before: None,
        }
    }

    pub fn started(&self) -> Instant {
        self.started
    }

    pub fn started_unix_ms(&self) -> u64 {
        self.started_unix_ms
    }

    /// Milliseconds from the scenario's start to `t`.
    pub fn at_ms(&self, t: Instant) -> u64 {
        millis(t.saturating_duration_since(self.started))
    }

    /// Before a gateway starts in `vhost`: records it from now on (connecting the first time, or
    /// again when the scenario moved to another broker or vhost), and notes the connections the
    /// vhost has, so the gateway's own are known once it is up ([`Recorder::after_gateway`]).
    /// Best effort: a recorder that cannot start leaves a note for the chart, never an error.
    pub async fn before_gateway(&mut self, broker: &Broker, vhost: &str) {
        let url = broker.amqp_url(vhost);
        let m = broker.management();
        if self.task.as_ref().is_none_or(|(at, _)| *at != url) {
            self.tracing_off().await;
            self.finish_task().await;
            let bound = crate::timing::scaled(Duration::from_secs(5));
            let first = tokio::time::timeout(bound, Session::open(&url, m, vhost, &self.shared)).await;
            let first = match first {
                Ok(Ok(s)) => Some(s),
                Ok(Err(e)) => {
                    self.shared.note(format!("the wire recorder could not start: {e}"));
                    None
                }
                Err(_) => {
                    self.shared
                        .note(format!("the wire recorder could not start within {bound:?}"));
                    None
                }
            };
            // Switched off at the end also when the first try failed: a later one may switch it on.
            if first.as_ref().is_none_or(|s| s.firehose) {
                self.tracing = Some((m.clone(), vhost.to_string()));
            }
            let (shared, started, m, vhost2, url2) = (
                self.shared.clone(),
                self.started,
                m.clone(),
                vhost.to_string(),
                url.clone(),
            );
            let task = tokio::spawn(async move { record(first, &url2, &m, &vhost2, started, &shared).await });
            self.task = Some((url, task));
        }
        self.before = m
            .connections(vhost)
            .await
            .ok()
            .map(|c| c.into_iter().map(|c| c.name).collect());
    }

    /// After `host`'s gateway is up: the connections it opened are its own, and the topology it
    /// declared (`bridge.dlx`) can be tapped.
    pub async fn after_gateway(&mut self, broker: &Broker, vhost: &str, host: &str) {
        self.shared.wake.notify_one();
        let Some(before) = self.before.take() else {
            return;
        };
        if let Ok(now) = broker.management().connections(vhost).await {
            for c in now {
                if !before.contains(&c.name) && !self.gateway_connections.contains_key(&c.name) {
                    self.gateway_connections.insert(c.name, host.to_string());
                }
            }
        }
    }

    /// Stops recording (the firehose off, the connection closed) and hands over what was seen.
    /// Call it before the vhost is deleted.
    pub async fn stop(&mut self) -> Recording {
        self.tracing_off().await;
        self.finish_task().await;
        let mut notes = self.shared.notes.lock().map(|n| n.clone()).unwrap_or_default();
        let (mut events, note) = self
            .shared
            .events
            .lock()
            .map(|e| (e.to_vec(), e.note()))
            .unwrap_or_default();
        notes.extend(note);
        events.sort_by_key(|e| e.at_ms);
        Recording {
            events,
            gateway_connections: self.gateway_connections.clone(),
            notes,
        }
    }

    /// Switches the firehose off where it was switched on.
    async fn tracing_off(&mut self) {
        if let Some((m, vhost)) = self.tracing.take()
            && let Err(e) = m.set_tracing(&vhost, false).await
        {
            tracing::warn!(%vhost, "the wire recorder could not switch the firehose off: {e}");
        }
    }

    async fn finish_task(&mut self) {
        if let Some((_, mut task)) = self.task.take() {
            self.shared.stopping.store(true, Ordering::Relaxed);
            self.shared.wake.notify_one();
            let bound = crate::timing::scaled(Duration::from_secs(3));
            if tokio::time::timeout(bound, &mut task).await.is_err() {
                task.abort();
            }
            self.shared.stopping.store(false, Ordering::Relaxed);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if let Some((_, task)) = self.task.take() {
            task.abort();
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One connection of the recorder with its queue.
struct Session {
    conn: Connection,
    ch: Channel,
    queue: String,
    firehose: bool,
    dlx_bound: bool,
}

impl Session {
    /// Connects, declares the queue, binds it to the firehose (and switches the firehose on for
    /// the vhost) and to `bridge.dlx` if a gateway declared it already.
    async fn open(url: &str, m: &Management, vhost: &str, shared: &Shared) -> Result<Session, String> {
        let props = ConnectionProperties::default().with_connection_name(HIDDEN_CONNECTION_NAME.into());
        let conn = Connection::connect(url, props).await.map_err(|e| e.to_string())?;
        let ch = conn.create_channel().await.map_err(|e| e.to_string())?;
        let name = format!("{HIDDEN_QUEUE_PREFIX}{}", uuid::Uuid::new_v4().simple());
        let q = ch
            .queue_declare(
                name.as_str().into(),
                QueueDeclareOptions {
                    exclusive: true,
                    auto_delete: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        let queue = q.name().as_str().to_string();
        let firehose = bind(&conn, &queue, TRACE_EXCHANGE, "publish.#").await
            && match m.set_tracing(vhost, true).await {
                Ok(()) => true,
                Err(e) => {
                    shared.note(format!("the broker's firehose could not be switched on ({e})"));
                    false
                }
            };
        if !firehose {
            shared.note(
                "this broker has no firehose (amq.rabbitmq.trace): only dead letters and herdr's injects \
                 are drawn, not the envelopes"
                    .into(),
            );
        }
        let dlx_bound = bind(&conn, &queue, DLX, "").await;
        Ok(Session {
            conn,
            ch,
            queue,
            firehose,
            dlx_bound,
        })
    }
}

/// Binds `queue` on a channel of its own (a missing exchange closes the channel it is named on).
async fn bind(conn: &Connection, queue: &str, exchange: &str, key: &str) -> bool {
    let Ok(ch) = conn.create_channel().await else {
        return false;
    };
    let ok = ch
        .queue_bind(
            queue.into(),
            exchange.into(),
            key.into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
        .is_ok();
    if ok {
        let _ = ch.close(200, "bound".into()).await;
    }
    ok
}

/// The recording task: consumes the session's queue until stopped; a lost connection (a broker
/// restart, a killed node) is opened again every half second meanwhile.
async fn record(
    mut session: Option<Session>,
    url: &str,
    m: &Management,
    vhost: &str,
    started: Instant,
    shared: &Shared,
) {
    loop {
        if shared.stopping.load(Ordering::Relaxed) {
            if let Some(s) = session.take() {
                let _ = s.conn.close(200, "scenario over".into()).await;
            }
            return;
        }
        let Some(mut s) = session.take() else {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                _ = shared.wake.notified() => {}
            }
            if !shared.stopping.load(Ordering::Relaxed) {
                session = Session::open(url, m, vhost, shared).await.ok();
            }
            continue;
        };
        let consumer =
            s.ch.basic_consume(
                s.queue.as_str().into(),
                "fleet-timeline".into(),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await;
        let Ok(mut consumer) = consumer else {
            continue;
        };
        loop {
            tokio::select! {
                d = consumer.next() => match d {
                    Some(Ok(d)) => keep(shared, started, &d),
                    _ => {
                        let at = millis(started.elapsed());
                        if !shared.stopping.load(Ordering::Relaxed) {
                            shared.note(format!(
                                "the wire recorder lost its connection at {:.1} s (a broker restart?): \
                                 messages until it was back are missing",
                                at as f64 / 1000.0
                            ));
                        }
                        break;
                    }
                },
                _ = shared.wake.notified() => {
                    if shared.stopping.load(Ordering::Relaxed) {
                        session = Some(s);
                        break;
                    }
                    if !s.dlx_bound {
                        s.dlx_bound = bind(&s.conn, &s.queue, DLX, "").await;
                    }
                }
            }
        }
    }
}

/// Keeps one delivery as an event.
fn keep(shared: &Shared, started: Instant, d: &lapin::message::Delivery) {
    let at_ms = millis(started.elapsed());
    let Ok(mut events) = shared.events.lock() else {
        return;
    };
    let outer = d.properties.headers().clone().unwrap_or_default();
    let outer = outer.inner();
    let dead = d.exchange.as_str() == DLX;
    let (source, exchange, routing_key, headers, connection, routed) = if dead {
        (
            Source::DeadLetter,
            DLX.to_string(),
            d.routing_key.as_str().to_string(),
            outer.clone(),
            None,
            None,
        )
    } else {
        let exchange = outer.get("exchange_name").and_then(value_str).unwrap_or_default();
        // The firehose's own round trips and the recorder's are not the fleet's traffic.
        let key = match outer.get("routing_keys") {
            Some(AMQPValue::FieldArray(a)) => a.as_slice().first().and_then(value_str),
            _ => None,
        }
        .unwrap_or_default();
        let inner = match outer.get("properties") {
            Some(AMQPValue::FieldTable(p)) => match p.inner().get("headers") {
                Some(AMQPValue::FieldTable(h)) => h.inner().clone(),
                _ => Default::default(),
            },
            _ => Default::default(),
        };
        let routed = match outer.get("routed_queues") {
            Some(AMQPValue::FieldArray(a)) => Some(a.as_slice().iter().filter_map(value_str).collect()),
            _ => None,
        };
        let connection = outer.get("connection").and_then(value_str);
        (Source::Publish, exchange, key, inner, connection, routed)
    };
    if !dead && exchange.is_empty() && routing_key == "fleet.probe.round-trip" {
        return;
    }
    let headers: BTreeMap<String, String> = HEADERS
        .iter()
        .filter_map(|h| headers.get(*h).and_then(value_str).map(|v| (h.to_string(), v)))
        .collect();
    let death = if dead {
        match headers_death(d) {
            Some(t) => Some(t),
            None => Some((String::new(), String::new())),
        }
    } else {
        None
    };
    let presence = (headers.get("kind").map(String::as_str) == Some("PRESENCE"))
        .then(|| serde_json::from_slice::<serde_json::Value>(&d.data).ok())
        .flatten()
        .map(|b| {
            format!(
                "{}/{}",
                b["state"].as_str().unwrap_or("?"),
                b["agentStatus"].as_str().unwrap_or("?")
            )
        });
    let reason = (headers.get("kind").map(String::as_str) == Some("FAILED"))
        .then(|| serde_json::from_slice::<serde_json::Value>(&d.data).ok())
        .flatten()
        .map(|b| {
            let reason = b["reason"].as_str().unwrap_or("?").to_string();
            if b["typed"] == serde_json::Value::Bool(true) {
                format!("{reason}, typed")
            } else {
                reason
            }
        });
    events.push(WireEvent {
        at_ms,
        source,
        exchange,
        routing_key,
        connection,
        routed,
        headers,
        death,
        presence,
        reason,
    });
}

/// A dead letter's first `x-death` entry: (reason, queue).
fn headers_death(d: &lapin::message::Delivery) -> Option<(String, String)> {
    let h = d.properties.headers().clone()?;
    let AMQPValue::FieldArray(a) = h.inner().get("x-death")? else {
        return None;
    };
    let AMQPValue::FieldTable(t) = a.as_slice().first()? else {
        return None;
    };
    let get = |k: &str| t.inner().get(k).and_then(value_str).unwrap_or_default();
    Some((get("reason"), get("queue")))
}
