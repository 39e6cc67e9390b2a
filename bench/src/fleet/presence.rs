//! Presence convergence (SPEC §8) after a gateway start, at the heartbeat gateways run with.
//!
//! For each trial a fresh host `cN` is spawned while host `a` runs; from the spawn we time
//! (1) `cN`'s `/readyz`, (2) `a`'s `GET /v1/roster` listing `cN`'s `_gateway` entry — the new host
//! becoming visible — and (3) `cN`'s own roster listing `a`'s `_gateway` — the new host's view
//! converging, which has to wait for `a`'s next heartbeat (each trial starts at a random phase of
//! it, so over trials (3) averages about H/2 and never exceeds H).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::anyhow;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::rig::hosts::Fleet;

/// One start of a fresh gateway.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Trial {
    pub host: String,
    pub ready_ms: f64,
    /// Spawn → `a` lists the new host's `_gateway`.
    pub visible_at_peer_ms: f64,
    /// Spawn → the new host lists `a`'s `_gateway`.
    pub peer_visible_at_new_ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PresenceResult {
    pub heartbeat_ms: u64,
    pub trials: Vec<Trial>,
    pub visible_at_peer_ms_mean: f64,
    pub peer_visible_at_new_ms_mean: f64,
    pub ready_ms_mean: f64,
}

fn lists(roster: &Value, host: &str, gid: &str) -> bool {
    roster["entries"]
        .as_array()
        .is_some_and(|es| es.iter().any(|e| e["host"] == host && e["gid"] == gid))
}

fn mean(v: impl Iterator<Item = f64>) -> f64 {
    let v: Vec<f64> = v.collect();
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Runs one trial per name in `hosts` (each started, timed, then killed).
pub async fn run(
    fleet: &mut Fleet,
    hosts: &[String],
    env: &BTreeMap<String, String>,
    heartbeat_ms: u64,
) -> anyhow::Result<PresenceResult> {
    let mut trials = Vec::new();
    for h in hosts {
        // Start at a random phase of the peers' heartbeat, so the new host's wait for the next
        // one is sampled fairly (back-to-back trials would all start right after a heartbeat).
        let phase = (uuid::Uuid::new_v4().as_u128() % u128::from(heartbeat_ms.max(1))) as u64;
        tokio::time::sleep(Duration::from_millis(phase)).await;
        let t0 = Instant::now();
        fleet.spawn_host(h, env).await?;
        let (mut ready, mut visible, mut peer) = (None, None, None);
        let deadline = t0 + Duration::from_millis(6 * heartbeat_ms + 30_000);
        while visible.is_none() || peer.is_none() || ready.is_none() {
            if Instant::now() > deadline {
                fleet.stop_host(h).await;
                return Err(anyhow!(
                    "presence of {h} did not converge (ready {ready:?}, visible at a {visible:?}, a visible at {h} {peer:?})"
                ));
            }
            let ms = || t0.elapsed().as_secs_f64() * 1e3;
            let new = &fleet.host(h)?.gateway;
            if ready.is_none()
                && let Ok((200, _)) = new.get("/readyz").await
            {
                ready = Some(ms());
            }
            if visible.is_none()
                && let Ok((200, r)) = fleet.host("a")?.gateway.get("/v1/roster").await
                && lists(&r, h, "_gateway")
            {
                visible = Some(ms());
            }
            if peer.is_none()
                && ready.is_some()
                && let Ok((200, r)) = new.get("/v1/roster").await
                && lists(&r, "a", "_gateway")
            {
                peer = Some(ms());
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        fleet.stop_host(h).await;
        trials.push(Trial {
            host: h.clone(),
            ready_ms: ready.unwrap_or_default(),
            visible_at_peer_ms: visible.unwrap_or_default(),
            peer_visible_at_new_ms: peer.unwrap_or_default(),
        });
    }
    Ok(PresenceResult {
        heartbeat_ms,
        visible_at_peer_ms_mean: mean(trials.iter().map(|t| t.visible_at_peer_ms)),
        peer_visible_at_new_ms_mean: mean(trials.iter().map(|t| t.peer_visible_at_new_ms)),
        ready_ms_mean: mean(trials.iter().map(|t| t.ready_ms)),
        trials,
    })
}
