//! Gateway footprint by number of local entities: memory and CPU at rest.
//!
//! One gateway (host `s`) gets a main, then workers (parent: that main) registered through
//! `POST /v1/entities` until it holds 1, 100, 1000 … entities. Each entity is an inbox queue with
//! its bindings, an exclusive consumer on its own channel, and a heartbeat every interval (plus a
//! herdr status read per heartbeat). After each level the gateway settles for one heartbeat, then
//! its CPU (`/proc/<pid>/stat`) is sampled over a fixed window, and its RSS read at the end.

use std::time::{Duration, Instant};

use anyhow::anyhow;
use futures_util::StreamExt as _;
use serde::Serialize;

use super::fleet::{Fleet, Member};
use super::stats::{CpuProbe, process_fds, process_memory};
use crate::herdr::InputReaction;

/// Settings of the scale run.
#[derive(Debug, Clone)]
pub struct ScaleSettings {
    pub levels: Vec<usize>,
    pub window: Duration,
    pub settle: Duration,
    /// Registrations in flight at once.
    pub concurrency: usize,
}

/// The gateway at one entity count.
#[derive(Debug, Clone, Serialize)]
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
}

/// Grows host `s` through `levels` and measures each.
pub async fn run(fleet: &Fleet, s: &ScaleSettings, broker_pid: Option<u32>) -> anyhow::Result<Vec<ScalePoint>> {
    let host = fleet.host("s")?;
    let pid = host.gateway.pid().ok_or_else(|| anyhow!("gateway s has no pid"))?;
    let mut members: Vec<Member> = Vec::new();
    let mut points = Vec::new();
    for &level in &s.levels {
        let started = Instant::now();
        let before = members.len();
        if members.is_empty() && level > 0 {
            members.push(fleet.add("s", "main", None, InputReaction::StartWorking).await?);
        }
        let parent = members
            .first()
            .map(|m| m.gid.clone())
            .ok_or_else(|| anyhow!("no main"))?;
        let missing = level.saturating_sub(members.len());
        let added: Vec<anyhow::Result<Member>> = futures_util::stream::iter(0..missing)
            .map(|_| fleet.add("s", "worker", Some(&parent), InputReaction::WorksBriefly))
            .buffer_unordered(s.concurrency.max(1))
            .collect()
            .await;
        for m in added {
            members.push(m?);
        }
        let register_s = started.elapsed().as_secs_f64();
        tokio::time::sleep(s.settle).await;
        let probe = CpuProbe::default()
            .with("gateway", Some(pid))
            .with("broker", broker_pid);
        let a = probe.snapshot();
        tokio::time::sleep(s.window).await;
        let spent = a.until(&probe.snapshot());
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
        });
    }
    Ok(points)
}
