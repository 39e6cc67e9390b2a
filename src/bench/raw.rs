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
//!   compared with. Origin and echoer use separate connections, like two gateways.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde::Serialize;
use tokio::sync::mpsc;

use super::stats::{CpuProbe, CpuSpent, Latency};

/// Settings of the raw run.
#[derive(Debug, Clone)]
pub struct RawSettings {
    pub size: usize,
    pub messages: usize,
    pub warmup: usize,
    pub outstanding: usize,
    pub prefetch: u16,
    pub rtt_samples: usize,
}

/// What the raw run measured.
#[derive(Debug, Clone, Serialize)]
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

async fn durable_queue(ch: &Channel, name: &str) -> anyhow::Result<()> {
    let opts = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name.into(), opts, FieldTable::default()).await?;
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

async fn publish(ch: &Channel, queue: &str, body: &[u8]) -> anyhow::Result<lapin::PublisherConfirm> {
    let opts = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    Ok(ch.basic_publish("".into(), queue.into(), opts, body, props()).await?)
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
        let c = publish(&pch, queue, &body).await?;
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

/// Unloaded one-way and round-trip latencies, `samples` messages one at a time.
async fn round_trips(
    url: &str,
    q_out: &str,
    q_back: &str,
    s: &RawSettings,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let base = Instant::now();
    let origin = connect(url).await?;
    let echoer = connect(url).await?;
    let o_pub = confirm_channel(&origin).await?;
    let o_con = origin.create_channel().await?;
    o_con.basic_qos(s.prefetch, BasicQosOptions::default()).await?;
    let mut back = o_con
        .basic_consume(
            q_back.into(),
            "bench-back".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let e_pub = confirm_channel(&echoer).await?;
    let e_con = echoer.create_channel().await?;
    e_con.basic_qos(s.prefetch, BasicQosOptions::default()).await?;
    let mut inbound = e_con
        .basic_consume(
            q_out.into(),
            "bench-echo".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let one_way = Arc::new(std::sync::Mutex::new(Vec::with_capacity(s.rtt_samples)));
    let ow = Arc::clone(&one_way);
    let q_back_owned = q_back.to_string();
    let size = s.size.max(8);
    let echo = tokio::spawn(async move {
        let reply = vec![b'y'; size];
        while let Some(Ok(d)) = inbound.next().await {
            if let (Some(a), Ok(mut v)) = (age(&d.data, base), ow.lock()) {
                v.push(a);
            }
            d.acker.ack(BasicAckOptions::default()).await?;
            let c = publish(&e_pub, &q_back_owned, &reply).await?;
            await_confirm(c).await?;
        }
        Ok::<_, anyhow::Error>(())
    });
    let mut rtt = Vec::with_capacity(s.rtt_samples);
    let mut body = vec![b'x'; size];
    for _ in 0..s.rtt_samples {
        let t0 = Instant::now();
        stamp(&mut body, base);
        let c = publish(&o_pub, q_out, &body).await?;
        let confirmed = await_confirm(c);
        let echoed = async {
            match tokio::time::timeout(Duration::from_secs(10), back.next()).await {
                Ok(Some(Ok(d))) => Ok(d.acker.ack(BasicAckOptions::default()).await?),
                Ok(_) => Err(anyhow!("raw echo consumer ended")),
                Err(_) => Err(anyhow!("no raw echo within 10 s")),
            }
        };
        let (a, b) = tokio::join!(confirmed, echoed);
        a?;
        b?;
        rtt.push(t0.elapsed());
    }
    echo.abort();
    let _ = origin.close(200, "done".into()).await;
    let _ = echoer.close(200, "done".into()).await;
    let ow = one_way.lock().map(|v| v.clone()).unwrap_or_default();
    Ok((ow, rtt))
}

/// Runs the raw baseline in `amqp_url`'s vhost (its queues are deleted afterwards).
pub async fn run(amqp_url: &str, s: &RawSettings, cpu: &CpuProbe) -> anyhow::Result<RawResult> {
    let admin = connect(amqp_url).await?;
    let ch = admin.create_channel().await?;
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let (q_main, q_out, q_back) = (
        format!("bench.raw.{tag}"),
        format!("bench.out.{tag}"),
        format!("bench.back.{tag}"),
    );
    for q in [&q_main, &q_out, &q_back] {
        durable_queue(&ch, q).await?;
    }
    let base = Instant::now();
    if s.warmup > 0 {
        pipeline(amqp_url, &q_main, s.warmup, s, base)
            .await
            .context("raw warm-up")?;
    }
    let before = cpu.snapshot();
    let (wall, lat) = pipeline(amqp_url, &q_main, s.messages, s, base).await?;
    let spent = before.until(&cpu.snapshot());
    let (one_way, rtt) = round_trips(amqp_url, &q_out, &q_back, s).await?;
    for q in [&q_main, &q_out, &q_back] {
        let _ = ch.queue_delete(q.as_str().into(), QueueDeleteOptions::default()).await;
    }
    let _ = admin.close(200, "done".into()).await;
    Ok(RawResult {
        messages: s.messages,
        seconds: wall.as_secs_f64(),
        msgs_per_s: s.messages as f64 / wall.as_secs_f64().max(1e-9),
        loaded_latency: Latency::of(&lat),
        one_way: Latency::of(&one_way),
        round_trip: Latency::of(&rtt),
        cpu_ms_per_msg: spent.per_unit_ms(s.messages),
        cpu: spent,
    })
}
