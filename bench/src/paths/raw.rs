//! The raw broker baseline every gateway figure is divided by.
//!
//! Plain lapin against the same broker, vhost, message size and settings as the gateways use:
//! persistent messages, `mandatory`, publisher confirms, a durable queue, a manual-ack consumer
//! under a prefetch. Two figures:
//!
//! - **throughput**: one publisher with up to `outstanding` confirms in flight → one consumer
//!   (prefetch `prefetch`); msgs/s and the publish→consume latency under that load;
//! - **round trip**, unloaded, one message at a time: publish (confirm awaited) → consumer acks
//!   and publishes an echo (confirm awaited) → the origin consumes the echo. That is exactly the
//!   broker work of one brief (SEND, then INJECTED back), so it is the floor SEND→INJECTED is
//!   compared with. Origin and echoer use separate connections, like two gateways;
//! - **echo throughput**: the same round trip in as many concurrent flows as the forward path has
//!   senders — the forward path's shape without gateways, so the gap between the two is what the
//!   gateways (and MCP, and herdr) add, apart from what request/response costs the broker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::rig::stats::{CpuProbe, CpuSpent, Latency};

/// Settings of the raw run.
#[derive(Debug, Clone)]
pub struct RawSettings {
    pub size: usize,
    pub messages: usize,
    pub warmup: usize,
    pub outstanding: usize,
    pub prefetch: u16,
    pub rtt_samples: usize,
    /// Concurrent flows and total round trips of the echo run (set to the forward path's pairs
    /// and briefs).
    pub echo_flows: usize,
    pub echo_rounds: usize,
}

/// What the raw run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawResult {
    pub messages: usize,
    pub seconds: f64,
    pub msgs_per_s: f64,
    /// publish → consume under full load (dominated by queueing behind `outstanding` messages).
    pub loaded_latency: Latency,
    /// Unloaded publish → consume, one message at a time.
    pub one_way: Latency,
    /// Unloaded publish → echo consumed, both confirms awaited: the broker work of one brief.
    pub round_trip: Latency,
    pub cpu: CpuSpent,
    pub cpu_ms_per_msg: std::collections::BTreeMap<String, f64>,
    /// Request/response at the forward path's concurrency, without gateways.
    pub echo: EchoResult,
    /// The same through a topic exchange with envelope-sized headers (the gateway's wire format).
    pub echo_envelope: EchoResult,
}

/// `flows` concurrent publish → echo → consume round trips: the forward path's shape (two
/// confirmed persistent messages per round trip, a handful in flight) without gateways.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EchoResult {
    pub flows: usize,
    pub round_trips: usize,
    pub round_trips_per_s: f64,
    pub latency: Latency,
    /// One flow, one round trip at a time.
    pub single_round_trip: Latency,
    pub cpu: CpuSpent,
    pub cpu_ms_per_round_trip: std::collections::BTreeMap<String, f64>,
}

fn props() -> BasicProperties {
    BasicProperties::default()
        .with_delivery_mode(2)
        .with_content_type("text/plain; charset=utf-8".into())
}

async fn connect(url: &str) -> anyhow::Result<Connection> {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .context("raw baseline: connecting to the broker")
}

async fn confirm_channel(conn: &Connection) -> anyhow::Result<Channel> {
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    Ok(ch)
}

/// The type of every queue a raw run declares: classic (SPEC §1) or quorum, as gateways in the
/// cluster profile declare their inboxes (SPEC §16, `FLEET_QUEUE_TYPE=quorum`), so a quorum
/// gateway is compared with a broker doing the same replicated work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueueKind {
    #[default]
    Classic,
    Quorum,
}

impl QueueKind {
    /// The value a gateway's `FLEET_QUEUE_TYPE` takes for this kind.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueKind::Classic => "classic",
            QueueKind::Quorum => "quorum",
        }
    }

    fn arguments(self) -> FieldTable {
        let mut t = FieldTable::default();
        if self == QueueKind::Quorum {
            t.insert("x-queue-type".into(), AMQPValue::LongString(LongString::from("quorum")));
        }
        t
    }
}

async fn durable_queue(ch: &Channel, name: &str, kind: QueueKind) -> anyhow::Result<()> {
    let opts = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name.into(), opts, kind.arguments())
        .await
        .with_context(|| format!("declaring the {} queue {name}", kind.as_str()))?;
    Ok(())
}

/// Nanoseconds since `base`, written into the first 8 bytes of a body.
fn stamp(body: &mut [u8], base: Instant) {
    let ns = base.elapsed().as_nanos() as u64;
    body[..8].copy_from_slice(&ns.to_le_bytes());
}

fn age(body: &[u8], base: Instant) -> Option<Duration> {
    let ns = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
    Some(base.elapsed().saturating_sub(Duration::from_nanos(ns)))
}

/// How a raw message travels.
#[derive(Debug, Clone)]
enum Wire {
    /// The default exchange straight to the queue, no headers: the cheapest the broker offers.
    Plain,
    /// Like a gateway's: a durable topic exchange (named here) and the envelope's 13 long-string
    /// headers, so the broker does the same routing and header work per message.
    Envelope(String),
}

/// Headers shaped like a SEND's envelope (SPEC §2), values of realistic length.
fn envelope_headers() -> FieldTable {
    let uuid = || uuid::Uuid::new_v4().to_string();
    let mut t = FieldTable::default();
    let ts = fleet_conformance::envelope::now_ms().to_string();
    let sig = "A".repeat(86) + "==";
    for (k, v) in [
        ("v", "1".to_string()),
        ("kind", "SEND".into()),
        ("msgId", uuid()),
        ("traceId", uuid()),
        ("from", uuid()),
        ("to", uuid()),
        ("host", "a".into()),
        ("corrId", uuid()),
        ("ts", ts.clone()),
        ("expiresAt", ts),
        ("sig", sig),
        ("turnId", String::new()),
        ("spawnId", String::new()),
    ] {
        t.insert(k.into(), AMQPValue::LongString(LongString::from(v)));
    }
    t
}

async fn publish(ch: &Channel, wire: &Wire, queue: &str, body: &[u8]) -> anyhow::Result<lapin::PublisherConfirm> {
    let opts = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let (exchange, props) = match wire {
        Wire::Plain => ("", props()),
        Wire::Envelope(x) => (
            x.as_str(),
            props()
                .with_message_id(uuid::Uuid::new_v4().to_string().as_str().into())
                .with_headers(envelope_headers()),
        ),
    };
    Ok(ch
        .basic_publish(exchange.into(), queue.into(), opts, body, props)
        .await?)
}

async fn await_confirm(c: lapin::PublisherConfirm) -> anyhow::Result<()> {
    let conf = c.await?;
    if conf.is_nack() {
        bail!("the broker nacked a raw publish");
    }
    if conf.take_message().is_some() {
        bail!("a raw publish was returned unroutable");
    }
    Ok(())
}

/// Pipelined publisher → consumer: `n` messages, `outstanding` confirms in flight. Returns the
/// wall time from the first publish to the last consume and the per-message latencies.
async fn pipeline(
    url: &str,
    queue: &str,
    n: usize,
    s: &RawSettings,
    base: Instant,
) -> anyhow::Result<(Duration, Vec<Duration>)> {
    let pub_conn = connect(url).await?;
    let con_conn = connect(url).await?;
    let pch = confirm_channel(&pub_conn).await?;
    let cch = con_conn.create_channel().await?;
    cch.basic_qos(s.prefetch, BasicQosOptions::default()).await?;
    let mut consumer = cch
        .basic_consume(
            queue.into(),
            "bench-raw".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let consumed = tokio::spawn(async move {
        let mut lat = Vec::with_capacity(n);
        while lat.len() < n {
            let d = match consumer.next().await {
                Some(Ok(d)) => d,
                Some(Err(e)) => return Err(anyhow!("raw consumer: {e}")),
                None => return Err(anyhow!("raw consumer ended early")),
            };
            if let Some(a) = age(&d.data, base) {
                lat.push(a);
            }
            d.acker.ack(BasicAckOptions::default()).await?;
        }
        Ok::<_, anyhow::Error>((Instant::now(), lat))
    });
    let (tx, mut rx) = mpsc::channel(s.outstanding.max(1));
    let confirmer = tokio::spawn(async move {
        while let Some(c) = rx.recv().await {
            await_confirm(c).await?;
        }
        Ok::<_, anyhow::Error>(())
    });
    let mut body = vec![b'x'; s.size.max(8)];
    let started = Instant::now();
    for _ in 0..n {
        stamp(&mut body, base);
        let c = publish(&pch, &Wire::Plain, queue, &body).await?;
        if tx.send(c).await.is_err() {
            break;
        }
    }
    drop(tx);
    confirmer.await??;
    let (done, lat) = tokio::time::timeout(Duration::from_secs(120), consumed)
        .await
        .map_err(|_| anyhow!("raw consumer did not get all {n} messages within 120 s"))???;
    let _ = pub_conn.close(200, "done".into()).await;
    let _ = con_conn.close(200, "done".into()).await;
    Ok((done.duration_since(started), lat))
}

/// Where an echo runs: the origin's and the echoer's broker URLs (two nodes of a cluster, like
/// two gateways; the same URL on a single node) and the type of its queues.
#[derive(Debug, Clone, Copy)]
pub struct EchoAt<'a> {
    pub origin_url: &'a str,
    pub echoer_url: &'a str,
    pub kind: QueueKind,
}

/// What an echo run measured.
struct Echoed {
    one_way: Vec<Duration>,
    round_trip: Vec<Duration>,
    wall: Duration,
    cpu: CpuSpent,
}

/// Request/response without a gateway: `flows` concurrent flows, each doing `rounds` sequential
/// round trips: publish to `out.<i>` (confirm awaited) → the echoer acks and publishes to
/// `back.<i>` (confirm awaited) → the origin consumes it. Shaped like the forward path: the echoer
/// has one consumer channel per queue and one shared confirm channel (like a gateway's inboxes
/// and publisher), and handles each delivery in its own task (like an inject).
async fn echo(
    at: &EchoAt<'_>,
    wire: &Wire,
    tag: &str,
    flows: usize,
    rounds: usize,
    s: &RawSettings,
    cpu: &CpuProbe,
) -> anyhow::Result<Echoed> {
    let base = Instant::now();
    let size = s.size.max(8);
    let origin = connect(at.origin_url).await?;
    let echoer = connect(at.echoer_url).await?;
    let o_pub = confirm_channel(&origin).await?;
    let e_pub = confirm_channel(&echoer).await?;
    let admin = origin.create_channel().await?;
    // Each side declares the queues it consumes, as a gateway declares its inboxes: on a cluster
    // a quorum queue's leader is then on the node of the side that consumes it.
    let e_admin = echoer.create_channel().await?;
    if let Wire::Envelope(x) = wire {
        let opts = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        admin
            .exchange_declare(x.as_str().into(), ExchangeKind::Topic, opts, FieldTable::default())
            .await?;
    }
    let one_way = Arc::new(std::sync::Mutex::new(Vec::with_capacity(flows * rounds)));
    let mut backs = Vec::with_capacity(flows);
    let mut echo_tasks = Vec::with_capacity(flows);
    for i in 0..flows {
        let (q_out, q_back) = (format!("bench.out.{tag}.{i}"), format!("bench.back.{tag}.{i}"));
        durable_queue(&e_admin, &q_out, at.kind).await?;
        durable_queue(&admin, &q_back, at.kind).await?;
        if let Wire::Envelope(x) = wire {
            for q in [&q_out, &q_back] {
                admin
                    .queue_bind(
                        q.as_str().into(),
                        x.as_str().into(),
                        q.as_str().into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await?;
            }
        }
        let o_con = origin.create_channel().await?;
        o_con.basic_qos(s.prefetch, BasicQosOptions::default()).await?;
        let back = o_con
            .basic_consume(
                q_back.as_str().into(),
                "bench-back".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        backs.push((q_out, o_con, back));
        let e_con = echoer.create_channel().await?;
        e_con.basic_qos(s.prefetch, BasicQosOptions::default()).await?;
        let mut inbound = e_con
            .basic_consume(
                format!("bench.out.{tag}.{i}").as_str().into(),
                "bench-echo".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let ow = Arc::clone(&one_way);
        let e_pub = e_pub.clone();
        let e_wire = wire.clone();
        echo_tasks.push(tokio::spawn(async move {
            let _keep = e_con;
            while let Some(Ok(d)) = inbound.next().await {
                if let (Some(a), Ok(mut v)) = (age(&d.data, base), ow.lock()) {
                    v.push(a);
                }
                d.acker.ack(BasicAckOptions::default()).await?;
                let e_pub = e_pub.clone();
                let q_back = q_back.clone();
                let e_wire = e_wire.clone();
                tokio::spawn(async move {
                    let reply = vec![b'y'; size];
                    if let Ok(c) = publish(&e_pub, &e_wire, &q_back, &reply).await {
                        let _ = await_confirm(c).await;
                    }
                });
            }
            Ok::<_, anyhow::Error>(())
        }));
    }
    let before = cpu.snapshot();
    let started = Instant::now();
    let mut flows_done = Vec::with_capacity(flows);
    for (q_out, o_con, mut back) in backs {
        let o_pub = o_pub.clone();
        let o_wire = wire.clone();
        flows_done.push(tokio::spawn(async move {
            let _keep = o_con;
            let mut rtt = Vec::with_capacity(rounds);
            let mut body = vec![b'x'; size];
            for _ in 0..rounds {
                let t0 = Instant::now();
                stamp(&mut body, base);
                let c = publish(&o_pub, &o_wire, &q_out, &body).await?;
                let echoed = async {
                    match tokio::time::timeout(Duration::from_secs(10), back.next()).await {
                        Ok(Some(Ok(d))) => Ok(d.acker.ack(BasicAckOptions::default()).await?),
                        Ok(_) => Err(anyhow!("raw echo consumer ended")),
                        Err(_) => Err(anyhow!("no raw echo within 10 s")),
                    }
                };
                let (a, b) = tokio::join!(await_confirm(c), echoed);
                a?;
                b?;
                rtt.push(t0.elapsed());
            }
            Ok::<_, anyhow::Error>(rtt)
        }));
    }
    let mut round_trip = Vec::with_capacity(flows * rounds);
    for f in flows_done {
        round_trip.extend(f.await.context("an echo flow panicked")??);
    }
    let wall = started.elapsed();
    let spent = before.until(&cpu.snapshot());
    for t in echo_tasks {
        t.abort();
    }
    for i in 0..flows {
        for q in [format!("bench.out.{tag}.{i}"), format!("bench.back.{tag}.{i}")] {
            let _ = admin
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
    }
    if let Wire::Envelope(x) = wire {
        let _ = admin
            .exchange_delete(x.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
    let _ = origin.close(200, "done".into()).await;
    let _ = echoer.close(200, "done".into()).await;
    let one_way = one_way.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(Echoed {
        one_way,
        round_trip,
        wall,
        cpu: spent,
    })
}

/// Runs the raw baseline in `amqp_url`'s vhost (its queues are deleted afterwards).
pub async fn run(amqp_url: &str, s: &RawSettings, cpu: &CpuProbe) -> anyhow::Result<RawResult> {
    let admin = connect(amqp_url).await?;
    let ch = admin.create_channel().await?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let q_main = format!("bench.raw.{tag}");
    durable_queue(&ch, &q_main, QueueKind::Classic).await?;
    let base = Instant::now();
    if s.warmup > 0 {
        pipeline(amqp_url, &q_main, s.warmup, s, base)
            .await
            .context("raw warm-up")?;
    }
    let before = cpu.snapshot();
    let (wall, lat) = pipeline(amqp_url, &q_main, s.messages, s, base).await?;
    let spent = before.until(&cpu.snapshot());
    let _ = ch
        .queue_delete(q_main.as_str().into(), QueueDeleteOptions::default())
        .await;
    let plain = Wire::Plain;
    let enveloped = Wire::Envelope(format!("bench.topic.{tag}"));
    let at = EchoAt {
        origin_url: amqp_url,
        echoer_url: amqp_url,
        kind: QueueKind::Classic,
    };
    let single = echo(&at, &plain, &format!("{tag}.1"), 1, s.rtt_samples, s, cpu).await?;
    let flows = s.echo_flows.max(1);
    let rounds = s.echo_rounds.div_ceil(flows);
    let many = echo(&at, &plain, &format!("{tag}.n"), flows, rounds, s, cpu).await?;
    let env_single = echo(&at, &enveloped, &format!("{tag}.e1"), 1, s.rtt_samples, s, cpu).await?;
    let env_many = echo(&at, &enveloped, &format!("{tag}.en"), flows, rounds, s, cpu).await?;
    let _ = admin.close(200, "done".into()).await;
    Ok(RawResult {
        messages: s.messages,
        seconds: wall.as_secs_f64(),
        msgs_per_s: s.messages as f64 / wall.as_secs_f64().max(1e-9),
        loaded_latency: Latency::of(&lat),
        one_way: Latency::of(&single.one_way),
        round_trip: Latency::of(&single.round_trip),
        cpu_ms_per_msg: spent.per_unit_ms(s.messages),
        cpu: spent,
        echo: EchoResult::of(flows, many, &single),
        echo_envelope: EchoResult::of(flows, env_many, &env_single),
    })
}

/// The envelope echo alone (one flow for the unloaded round trip, then `echo_flows` flows for the
/// throughput) where `at` says: the raw floor of a gateway path on that broker and queue type.
pub async fn envelope_echo(at: &EchoAt<'_>, s: &RawSettings, cpu: &CpuProbe) -> anyhow::Result<EchoResult> {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let enveloped = Wire::Envelope(format!("bench.topic.{tag}"));
    let single = echo(at, &enveloped, &format!("{tag}.e1"), 1, s.rtt_samples, s, cpu)
        .await
        .context("raw envelope echo, one flow")?;
    let flows = s.echo_flows.max(1);
    let rounds = s.echo_rounds.div_ceil(flows);
    let many = echo(at, &enveloped, &format!("{tag}.en"), flows, rounds, s, cpu)
        .await
        .with_context(|| format!("raw envelope echo, {flows} flows"))?;
    Ok(EchoResult::of(flows, many, &single))
}

impl EchoResult {
    fn of(flows: usize, many: Echoed, single: &Echoed) -> EchoResult {
        let trips = many.round_trip.len();
        EchoResult {
            flows,
            round_trips: trips,
            round_trips_per_s: trips as f64 / many.wall.as_secs_f64().max(1e-9),
            latency: Latency::of(&many.round_trip),
            single_round_trip: Latency::of(&single.round_trip),
            cpu_ms_per_round_trip: many.cpu.per_unit_ms(trips),
            cpu: many.cpu,
        }
    }
}
