//! Gateway footprint by number of local entities: memory and CPU at rest.
//!
//! One gateway (host `s`) gets a main, then workers (parent: that main) registered through
//! `POST /v1/entities` until it holds 1, 100, 1000 … entities (`--entities`, up to 10,000 and
//! beyond). Each entity is an inbox queue with its bindings, an exclusive consumer on its own
//! channel, and a heartbeat every interval H (plus a herdr status read per heartbeat). After each
//! level the gateway settles for one heartbeat, then its CPU (`/proc/<pid>/stat`) is sampled over
//! a fixed window, and its RSS (`VmRSS`) read at the end. A tap queue on `bridge.roster` times each
//! heartbeat round: from the first to the last presence of one burst (one per entity plus the
//! gateway's own).
//!
//! A gateway that refuses a registration on the way to a level (a broker's channel limit, say)
//! ends the run there: the levels reached are kept and the refusal is reported, so the figures of
//! a level that could not be reached show as not measured instead of failing the whole bench.
//!
//! Last, the gateway holding the largest level is restarted (SIGTERM, the same configuration) and
//! its start-to-ready timed ([`crate::fleet::restart`]).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use futures_util::StreamExt as _;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};

use crate::rig::hosts::{Fleet, Member};
use crate::rig::stats::{CpuProbe, process_fds, process_memory};
use fleet_conformance::herdr::InputReaction;

/// Settings of the scale run.
#[derive(Debug, Clone)]
pub struct ScaleSettings {
    pub levels: Vec<usize>,
    pub window: Duration,
    pub settle: Duration,
    /// Registrations in flight at once.
    pub concurrency: usize,
    /// H, the heartbeat interval the gateway was started with (`FLEET_HEARTBEAT_MS`).
    pub heartbeat_ms: u64,
    /// Stops and starts timed once the levels are measured (`--restarts`).
    pub restarts: usize,
}

/// What the scale run measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScaleResult {
    /// H, the heartbeat interval the measured gateway ran with.
    pub heartbeat_ms: u64,
    /// One point per level reached.
    pub points: Vec<ScalePoint>,
    /// The level the gateway did not let the run reach, if any.
    pub refused: Option<Refused>,
    /// The gateway restarted holding the largest level's entities (absent from reports written
    /// before issue 46).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart: Option<crate::fleet::restart::Restart>,
    /// The restarts after the first (`--restarts N`), in order: a stop's bound judged over several.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_restarts: Vec<crate::fleet::restart::Restart>,
}

/// A registration the gateway refused on the way to a level.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Refused {
    pub level: usize,
    /// Entities registered when the first refusal came back.
    pub reached: usize,
    pub error: String,
}

impl ScaleResult {
    /// The point with the most entities.
    pub fn largest(&self) -> Option<&ScalePoint> {
        self.points.iter().max_by_key(|p| p.entities)
    }
}

/// The gateway at one entity count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ScalePoint {
    pub entities: usize,
    /// Wall time of the registrations that brought it to this level.
    pub register_s: f64,
    pub register_per_s: f64,
    pub rss_kib: u64,
    pub peak_rss_kib: u64,
    pub threads: u64,
    pub fds: usize,
    /// Gateway CPU over the window, in % of one core.
    pub gateway_cpu_pct: f64,
    /// Broker CPU over the same window, in % of one core (process provider only).
    pub broker_cpu_pct: Option<f64>,
    pub window_s: f64,
    /// Heartbeat rounds seen on `bridge.roster` during the window, and how long one round of
    /// presence publishes (one per entity plus the gateway's) took from its first to its last
    /// message. When rounds run into each other (no pause between them), one "round" holds more
    /// than a round's presences and lasts about as long as the window allows.
    pub heartbeat_rounds: usize,
    pub heartbeat_round_ms: f64,
    pub presences_per_round: f64,
}

/// Arrival times of `roster.s.*` presences, from a tap queue of our own.
struct RosterTap {
    conn: Connection,
    arrivals: Arc<Mutex<Vec<Instant>>>,
}

/// A throwaway tap: a server-named exclusive queue bound to `exchange` with `key`, consumed
/// without acks as `tag` — what the bench reads the wire through.
pub(crate) async fn tap(ch: &lapin::Channel, exchange: &str, key: &str, tag: &str) -> lapin::Result<lapin::Consumer> {
    let opts = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..QueueDeclareOptions::default()
    };
    let q = ch.queue_declare("".into(), opts, FieldTable::default()).await?;
    ch.queue_bind(
        q.name().clone(),
        exchange.into(),
        key.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let consume = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    ch.basic_consume(q.name().clone(), tag.into(), consume, FieldTable::default())
        .await
}

impl RosterTap {
    async fn start(amqp_url: &str) -> anyhow::Result<RosterTap> {
        let conn = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
        let ch = conn.create_channel().await?;
        let mut consumer = tap(&ch, "bridge.roster", "roster.s.#", "bench-roster-tap").await?;
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&arrivals);
        tokio::spawn(async move {
            let _keep = ch;
            while let Some(Ok(_)) = consumer.next().await {
                if let Ok(mut v) = sink.lock() {
                    v.push(Instant::now());
                }
            }
        });
        Ok(RosterTap { conn, arrivals })
    }

    /// Takes the arrivals so far.
    fn take(&self) -> Vec<Instant> {
        self.arrivals
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// Splits arrivals into rounds (a gap longer than `gap` starts a new one) and returns (complete
/// rounds, mean round duration ms, mean presences per round). The first and last rounds may be
/// cut by the window and are left out when there are more than two.
fn rounds(arrivals: &[Instant], gap: Duration) -> (usize, f64, f64) {
    let mut bursts: Vec<(Instant, Instant, usize)> = Vec::new();
    for &t in arrivals {
        match bursts.last_mut() {
            Some((_, last, n)) if t.duration_since(*last) < gap => {
                *last = t;
                *n += 1;
            }
            _ => bursts.push((t, t, 1)),
        }
    }
    let inner: &[(Instant, Instant, usize)] = if bursts.len() > 2 {
        &bursts[1..bursts.len() - 1]
    } else {
        &bursts
    };
    if inner.is_empty() {
        return (0, 0.0, 0.0);
    }
    let ms: f64 = inner
        .iter()
        .map(|(a, b, _)| b.duration_since(*a).as_secs_f64() * 1e3)
        .sum::<f64>()
        / inner.len() as f64;
    let per = inner.iter().map(|(_, _, n)| *n as f64).sum::<f64>() / inner.len() as f64;
    (inner.len(), ms, per)
}

/// Gaps between presences of one round are milliseconds; between rounds, H minus a round.
fn round_gap(heartbeat_ms: u64) -> Duration {
    Duration::from_millis((heartbeat_ms / 5).clamp(50, 1_000))
}

/// Registers workers of `parent` on host `s` until `members` holds `level`; the first refusal
/// ends it (registrations still in flight are dropped) and is returned.
async fn grow(fleet: &Fleet, members: &mut Vec<Member>, level: usize, s: &ScaleSettings) -> Option<String> {
    if members.is_empty() && level > 0 {
        match fleet.add("s", "main", None, InputReaction::StartWorking).await {
            Ok(m) => members.push(m),
            Err(e) => return Some(format!("{e:#}")),
        }
    }
    let parent = members.first()?.gid.clone();
    let missing = level.saturating_sub(members.len());
    let started = Instant::now();
    let mut added = futures_util::stream::iter(0..missing)
        .map(|_| fleet.add("s", "worker", Some(&parent), InputReaction::WorksBriefly))
        .buffer_unordered(s.concurrency.max(1));
    let mut done = 0;
    while let Some(m) = added.next().await {
        match m {
            Ok(m) => members.push(m),
            Err(e) => return Some(format!("{e:#}")),
        }
        done += 1;
        if done % 1_000 == 0 && done < missing {
            eprintln!(
                "fleet-bench: scale: {} of {level} entities ({:.0} registrations/s)",
                members.len(),
                done as f64 / started.elapsed().as_secs_f64().max(1e-9)
            );
        }
    }
    None
}

/// Grows host `s` through `levels` and measures each, until the gateway refuses a registration;
/// then restarts it holding what it reached and times that.
pub async fn run(
    fleet: &mut Fleet,
    amqp_url: &str,
    s: &ScaleSettings,
    broker_pid: Option<u32>,
) -> anyhow::Result<ScaleResult> {
    let tap = RosterTap::start(amqp_url).await?;
    let pid = fleet
        .host("s")?
        .gateway
        .pid()
        .ok_or_else(|| anyhow!("gateway s has no pid"))?;
    let mut members: Vec<Member> = Vec::new();
    let mut points = Vec::new();
    let mut refused = None;
    for &level in &s.levels {
        let started = Instant::now();
        let before = members.len();
        if let Some(error) = grow(fleet, &mut members, level, s).await {
            eprintln!(
                "fleet-bench: scale: the gateway refused entity {} of {level}: {error}",
                members.len() + 1
            );
            refused = Some(Refused {
                level,
                reached: members.len(),
                error,
            });
            break;
        }
        let register_s = started.elapsed().as_secs_f64();
        tokio::time::sleep(s.settle).await;
        let probe = CpuProbe::default()
            .with("gateway", Some(pid))
            .with("broker", broker_pid);
        tap.take();
        let a = probe.snapshot();
        tokio::time::sleep(s.window).await;
        let spent = a.until(&probe.snapshot());
        let (heartbeat_rounds, heartbeat_round_ms, presences_per_round) =
            rounds(&tap.take(), round_gap(s.heartbeat_ms));
        let (rss, hwm, threads) = process_memory(pid).ok_or_else(|| anyhow!("gateway s is gone"))?;
        let pct = |name: &str| spent.seconds.get(name).map(|c| 100.0 * c / spent.wall_s.max(1e-9));
        points.push(ScalePoint {
            entities: members.len(),
            register_s,
            register_per_s: (members.len() - before) as f64 / register_s.max(1e-9),
            rss_kib: rss,
            peak_rss_kib: hwm,
            threads,
            fds: process_fds(pid).unwrap_or(0),
            gateway_cpu_pct: pct("gateway").unwrap_or(0.0),
            broker_cpu_pct: pct("broker"),
            window_s: spent.wall_s,
            heartbeat_rounds,
            heartbeat_round_ms,
            presences_per_round,
        });
    }
    let _ = tap.conn.close(200, "done".into()).await;
    let mut restarts = Vec::new();
    for i in 0..if members.is_empty() { 0 } else { s.restarts.max(1) } {
        eprintln!(
            "fleet-bench: scale: restarting the gateway holding {} entities ({} of {}) …",
            members.len(),
            i + 1,
            s.restarts.max(1)
        );
        let r = crate::fleet::restart::run(fleet, "s", &members, s.concurrency).await;
        eprintln!(
            "fleet-bench: scale: SIGTERM → exit {:.2} s, start → ready {}",
            r.stop_ms / 1e3,
            r.start_to_ready_ms
                .map_or("-".into(), |ms| format!("{:.1} s", ms / 1e3))
        );
        let failed = r.not_ready.is_some();
        restarts.push(r);
        if failed {
            break;
        }
    }
    let mut restarts = restarts.into_iter();
    Ok(ScaleResult {
        heartbeat_ms: s.heartbeat_ms,
        points,
        refused,
        restart: restarts.next(),
        more_restarts: restarts.collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_split_at_gaps_and_the_cut_ends_are_left_out() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Four bursts of three presences, 10 ms apart, every 5 s.
        let arrivals: Vec<Instant> = (0..4)
            .flat_map(|r| (0..3).map(move |i| at(5_000 * r + 10 * i)))
            .collect();
        let (n, ms, per) = rounds(&arrivals, round_gap(5_000));
        assert_eq!(n, 2, "the first and the last burst may be cut by the window");
        assert!((ms - 20.0).abs() < 1e-6 && (per - 3.0).abs() < 1e-9, "{ms} {per}");
        assert_eq!(rounds(&[], round_gap(5_000)), (0, 0.0, 0.0));
        assert_eq!(round_gap(5_000), Duration::from_secs(1));
    }

    #[test]
    fn a_scale_result_from_before_the_restart_reads() {
        let old = serde_json::json!({"heartbeat_ms": 5000, "points": [], "refused": null});
        let r: ScaleResult = serde_json::from_value(old).expect("an old report's scale section reads");
        assert!(r.restart.is_none() && r.points.is_empty());
    }
}
