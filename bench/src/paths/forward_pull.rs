//! The two message paths through gateways, timed at the MCP client like an agent sees them.
//!
//! Pairs: main *i* on host `a`, worker *i* on host `b` (parent main *i*; its fake pane takes a
//! brief and turns idle again two status reads later, so it can take brief after brief).
//!
//! - **forward** (SPEC §5): `bridge_send(to=worker, wait_reply=false)` returns once INJECTED came
//!   back: main → gateway a → broker → gateway b → herdr inject + submit check → INJECTED → a.
//!   Warm-up, throughput with every pair sending at once, and latency with one sender, one brief
//!   at a time, are three calls, so the caller can read the gateways' stage metrics around each.
//! - **pull** (SPEC §6): the worker's `bridge_reply` → broker → gateway a holds it → the main
//!   drains it: `bridge_wait` until something is held, then `bridge_poll` (batches of up to 100)
//!   for the rest, so a main never spins on empty polls. Throughput with every pair at once; the
//!   latency is reply call → drained, under that load; plus one flow at a time through an open
//!   `bridge_wait` (the path without any polling interval).

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::rig::hosts::{Fleet, Member};
use crate::rig::stats::{CpuProbe, CpuSpent, Latency};
use fleet_conformance::herdr::InputReaction;
use fleet_conformance::mcp::{McpClient, McpHandle};

/// The host of the mains (the senders' gateway, "gateway a").
pub const SENDER_HOST: &str = "a";
/// The host of the workers (the gateway that injects, "gateway b").
pub const WORKER_HOST: &str = "b";

/// Settings of the path runs.
#[derive(Debug, Clone)]
pub struct PathSettings {
    pub size: usize,
    pub pairs: usize,
    pub briefs: usize,
    pub replies: usize,
    pub latency_samples: usize,
    pub warmup: usize,
}

/// One main/worker pair with its MCP sessions.
pub struct Pair {
    pub main: Member,
    pub worker: Member,
    /// The main's MCP session (the cluster-scale run drains kept replies through it).
    pub main_mcp: McpClient,
    /// The worker's MCP session.
    pub worker_mcp: McpClient,
}

/// Registers `n` pairs (mains on [`SENDER_HOST`], workers on [`WORKER_HOST`]) and opens their MCP
/// sessions.
pub async fn pairs(fleet: &Fleet, n: usize) -> anyhow::Result<Vec<Pair>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let main = fleet
            .add(SENDER_HOST, "main", None, InputReaction::StartWorking)
            .await?;
        let worker = fleet
            .add(WORKER_HOST, "worker", Some(&main.gid), InputReaction::WorksBriefly)
            .await?;
        let main_mcp = fleet.mcp(&main).await?;
        let worker_mcp = fleet.mcp(&worker).await?;
        out.push(Pair {
            main,
            worker,
            main_mcp,
            worker_mcp,
        });
    }
    Ok(out)
}

/// What the forward path measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardResult {
    pub briefs: usize,
    pub senders: usize,
    pub seconds: f64,
    pub briefs_per_s: f64,
    /// Physical messages per second (SEND + INJECTED per brief).
    pub msgs_per_s: f64,
    pub failures: usize,
    pub first_failure: Option<String>,
    /// SEND→INJECTED at the MCP client, one sender, one brief at a time.
    pub latency: Latency,
    /// SEND→INJECTED while every sender sends.
    pub loaded_latency: Latency,
    pub cpu: CpuSpent,
    pub cpu_ms_per_brief: std::collections::BTreeMap<String, f64>,
}

/// What the pull path measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullResult {
    pub replies: usize,
    pub workers: usize,
    pub seconds: f64,
    pub replies_per_s: f64,
    pub lost: usize,
    /// Reply call → drained (`bridge_wait` + `bridge_poll`), under full load.
    pub loaded_latency: Latency,
    /// `bridge_reply` call time (publish + confirm) under full load.
    pub reply_call: Latency,
    /// Reply call → an open `bridge_wait` returns it, one flow at a time.
    pub latency: Latency,
    /// MCP calls the mains made to drain (`bridge_wait` + `bridge_poll`).
    pub drain_calls: usize,
    pub cpu: CpuSpent,
    pub cpu_ms_per_reply: std::collections::BTreeMap<String, f64>,
}

fn padded(prefix: String, size: usize) -> String {
    let mut s = prefix;
    while s.len() < size {
        s.push('x');
    }
    s
}

/// One brief; Ok(latency) when it came back `injected`, Err(status) otherwise.
async fn send(h: &McpHandle, to: &str, text: &str) -> anyhow::Result<Result<Duration, String>> {
    let t0 = Instant::now();
    let v = h
        .call("bridge_send", json!({"to": to, "text": text, "wait_reply": false}))
        .await?;
    let took = t0.elapsed();
    Ok(match v["status"].as_str() {
        Some("injected") => Ok(took),
        _ => Err(v.to_string()),
    })
}

/// Warm-up of the forward path: `warmup` briefs per pair, each of which must be injected.
pub async fn forward_warmup(pairs: &[Pair], s: &PathSettings) -> anyhow::Result<()> {
    for p in pairs {
        for i in 0..s.warmup {
            let text = padded(format!("warm-up {i} "), s.size);
            if let Err(status) = send(&p.main_mcp.handle(), &p.worker.gid, &text).await? {
                return Err(anyhow!("forward warm-up brief not injected: {status}"));
            }
        }
    }
    Ok(())
}

/// The forward path's throughput run: every pair sending at once.
#[derive(Debug, Clone)]
pub struct ForwardThroughput {
    senders: usize,
    wall: Duration,
    /// SEND→INJECTED of each brief that came back injected.
    latencies: Vec<Duration>,
    failures: Vec<String>,
    cpu: CpuSpent,
}

/// Throughput: every pair sends its share of `briefs`, one brief at a time each.
pub async fn forward_throughput(pairs: &[Pair], s: &PathSettings, cpu: &CpuProbe) -> anyhow::Result<ForwardThroughput> {
    if pairs.is_empty() {
        return Err(anyhow!("no pairs"));
    }
    let per = s.briefs.div_ceil(pairs.len());
    let before = cpu.snapshot();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        let h = p.main_mcp.handle();
        let to = p.worker.gid.clone();
        let size = s.size;
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(per);
            let mut failed: Vec<String> = Vec::new();
            for k in 0..per {
                let text = padded(format!("brief {i}/{k} "), size);
                match send(&h, &to, &text).await {
                    Ok(Ok(d)) => lat.push(d),
                    Ok(Err(status)) => failed.push(status),
                    Err(e) => failed.push(e.to_string()),
                }
            }
            (lat, failed)
        }));
    }
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    for t in tasks {
        let (l, f) = t.await.context("a forward sender panicked")?;
        latencies.extend(l);
        failures.extend(f);
    }
    let wall = started.elapsed();
    Ok(ForwardThroughput {
        senders: pairs.len(),
        wall,
        latencies,
        failures,
        cpu: before.until(&cpu.snapshot()),
    })
}

/// The forward path's latency run: one sender, one brief at a time.
#[derive(Debug, Clone)]
pub struct ForwardSingle {
    latencies: Vec<Duration>,
    failures: Vec<String>,
}

/// Latency: the first pair's main sends `latency_samples` briefs, each after the last came back.
pub async fn forward_single(pairs: &[Pair], s: &PathSettings) -> anyhow::Result<ForwardSingle> {
    let first = pairs.first().ok_or_else(|| anyhow!("no pairs"))?;
    let h = first.main_mcp.handle();
    let mut latencies = Vec::with_capacity(s.latency_samples);
    let mut failures = Vec::new();
    for k in 0..s.latency_samples {
        let text = padded(format!("latency {k} "), s.size);
        match send(&h, &first.worker.gid, &text).await? {
            Ok(d) => latencies.push(d),
            Err(status) => failures.push(status),
        }
    }
    Ok(ForwardSingle { latencies, failures })
}

impl ForwardSingle {
    /// SEND→INJECTED of the briefs that came back injected.
    pub fn latency(&self) -> Latency {
        Latency::of(&self.latencies)
    }

    /// Briefs that did not come back injected.
    pub fn failures(&self) -> usize {
        self.failures.len()
    }
}

impl ForwardResult {
    /// The forward path's figures from its throughput and latency runs.
    pub fn of(t: ForwardThroughput, single: ForwardSingle) -> ForwardResult {
        let done = t.latencies.len();
        let secs = t.wall.as_secs_f64().max(1e-9);
        let failures: Vec<String> = t.failures.into_iter().chain(single.failures).collect();
        ForwardResult {
            briefs: done,
            senders: t.senders,
            seconds: t.wall.as_secs_f64(),
            briefs_per_s: done as f64 / secs,
            msgs_per_s: 2.0 * done as f64 / secs,
            failures: failures.len(),
            first_failure: failures.into_iter().next(),
            latency: Latency::of(&single.latencies),
            loaded_latency: Latency::of(&t.latencies),
            cpu_ms_per_brief: t.cpu.per_unit_ms(done),
            cpu: t.cpu,
        }
    }
}

/// Parses the `<nanos> ` prefix of a pull-path text.
fn sent_at(text: &str) -> Option<u64> {
    text.split(' ').next()?.parse().ok()
}

/// Drains `expect` replies for one main: `bridge_wait` blocks until the first message is there
/// (no busy polling), then `bridge_poll` (up to 100) takes whatever else is held. Returns
/// per-message latencies and the number of MCP calls made.
async fn drain(
    h: McpHandle,
    expect: usize,
    base: Instant,
    deadline: Instant,
) -> anyhow::Result<(Vec<Duration>, usize)> {
    let mut lat = Vec::with_capacity(expect);
    let mut calls = 0;
    let take = |msgs: &[Value], lat: &mut Vec<Duration>| {
        let now = base.elapsed();
        for m in msgs {
            if m["kind"].as_str() != Some("REPLY") {
                continue;
            }
            if let Some(ns) = m["text"].as_str().and_then(sent_at) {
                lat.push(now.saturating_sub(Duration::from_nanos(ns)));
            }
        }
    };
    while lat.len() < expect {
        if Instant::now() > deadline {
            return Err(anyhow!(
                "drained only {} of {expect} replies before the deadline",
                lat.len()
            ));
        }
        let v = h.call("bridge_wait", json!({"timeout_s": 5})).await?;
        calls += 1;
        if let Some(m) = v.get("message") {
            take(std::slice::from_ref(m), &mut lat);
        }
        if lat.len() < expect {
            let v = h.call("bridge_poll", json!({"max": 100})).await?;
            calls += 1;
            take(
                v["messages"].as_array().map(Vec::as_slice).unwrap_or_default(),
                &mut lat,
            );
        }
    }
    Ok((lat, calls))
}

/// The pull path: throughput with every pair, then one flow at a time through `bridge_wait`.
pub async fn pull(pairs: &[Pair], s: &PathSettings, cpu: &CpuProbe) -> anyhow::Result<PullResult> {
    let first = pairs.first().ok_or_else(|| anyhow!("no pairs"))?;
    let base = Instant::now();
    // Warm-up: one round per pair, drained.
    for p in pairs {
        for _ in 0..s.warmup {
            let text = padded(format!("{} warm ", base.elapsed().as_nanos()), s.size);
            p.worker_mcp.call("bridge_reply", json!({"text": text})).await?;
        }
        drain(
            p.main_mcp.handle(),
            s.warmup,
            base,
            Instant::now() + Duration::from_secs(30),
        )
        .await
        .context("pull warm-up")?;
    }
    let per = s.replies.div_ceil(pairs.len().max(1));
    let deadline = Instant::now() + Duration::from_secs(300);
    let before = cpu.snapshot();
    let started = Instant::now();
    let mut drains = Vec::new();
    let mut repliers = Vec::new();
    for (i, p) in pairs.iter().enumerate() {
        drains.push(tokio::spawn(drain(p.main_mcp.handle(), per, base, deadline)));
        let h = p.worker_mcp.handle();
        let size = s.size;
        repliers.push(tokio::spawn(async move {
            let mut calls = Vec::with_capacity(per);
            for k in 0..per {
                let text = padded(format!("{} reply {i}/{k} ", base.elapsed().as_nanos()), size);
                let t0 = Instant::now();
                h.call("bridge_reply", json!({"text": text})).await?;
                calls.push(t0.elapsed());
            }
            Ok::<_, anyhow::Error>(calls)
        }));
    }
    let mut reply_call = Vec::new();
    for r in repliers {
        reply_call.extend(r.await.context("a replier panicked")??);
    }
    let mut lat = Vec::new();
    let mut polls = 0;
    let mut lost = 0;
    for d in drains {
        match d.await.context("a drainer panicked")? {
            Ok((l, p)) => {
                lat.extend(l);
                polls += p;
            }
            Err(e) => {
                eprintln!("pull: {e}");
                lost += 1;
            }
        }
    }
    let wall = started.elapsed();
    let spent = before.until(&cpu.snapshot());
    let done = lat.len();
    // One flow at a time: an open bridge_wait takes the reply the moment it arrives.
    let main = first.main_mcp.handle();
    let worker = first.worker_mcp.handle();
    let mut single = Vec::with_capacity(s.latency_samples);
    for k in 0..s.latency_samples {
        let m = main.clone();
        let from = first.worker.gid.clone();
        let waiter = tokio::spawn(async move { m.call("bridge_wait", json!({"from": from, "timeout_s": 10})).await });
        tokio::time::sleep(Duration::from_millis(3)).await;
        let text = padded(format!("{} single {k} ", base.elapsed().as_nanos()), s.size);
        let t0 = Instant::now();
        worker.call("bridge_reply", json!({"text": text})).await?;
        let v: Value = waiter.await.context("bridge_wait task")??;
        if v.get("message").is_none() {
            return Err(anyhow!("bridge_wait returned no message: {v}"));
        }
        single.push(t0.elapsed());
    }
    Ok(PullResult {
        replies: done,
        workers: pairs.len(),
        seconds: wall.as_secs_f64(),
        replies_per_s: done as f64 / wall.as_secs_f64().max(1e-9),
        lost,
        loaded_latency: Latency::of(&lat),
        reply_call: Latency::of(&reply_call),
        latency: Latency::of(&single),
        drain_calls: polls,
        cpu_ms_per_reply: spent.per_unit_ms(done),
        cpu: spent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forward_figures_take_rates_from_the_throughput_run_and_latency_from_the_single() {
        let ms = Duration::from_millis;
        let t = ForwardThroughput {
            senders: 8,
            wall: Duration::from_secs(2),
            latencies: vec![ms(10); 1_000],
            failures: vec!["busy".into()],
            cpu: CpuSpent {
                wall_s: 2.0,
                seconds: [("gateway_a".to_string(), 0.2)].into(),
                machine_s: 1.0,
                capacity_s: 4.0,
            },
        };
        let single = ForwardSingle {
            latencies: vec![ms(3), ms(4), ms(5)],
            failures: vec!["inject_timeout".into()],
        };
        let r = ForwardResult::of(t, single);
        assert_eq!((r.briefs, r.briefs_per_s, r.msgs_per_s), (1_000, 500.0, 1_000.0));
        assert_eq!((r.latency.n, r.latency.p50_ms), (3, 4.0));
        assert_eq!(r.loaded_latency.p50_ms, 10.0);
        assert_eq!((r.failures, r.first_failure.as_deref()), (2, Some("busy")));
        assert!(
            (r.cpu_ms_per_brief["gateway_a"] - 0.2).abs() < 1e-9,
            "{:?}",
            r.cpu_ms_per_brief
        );
    }
}
