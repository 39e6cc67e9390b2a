//! One brief and one reply through the cluster, one at a time: SEND→INJECTED at the MCP client
//! ([`crate::paths::forward_pull::forward_single`]) and `bridge_reply` → the main's open
//! `bridge_wait`, on the latency pair (main on `a`, worker on `b`).
//!
//! Why a module: the same figures on the idle cluster and at every level say what thousands of
//! quorum queues at rest cost a message that crosses them.

use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use serde_json::json;

use crate::cluster_scale::settings::Latencies;
use crate::paths::forward_pull::{self as paths, Pair, PathSettings};
use crate::rig::stats::Latency;

/// `samples` briefs (after a short warm-up), then `samples` replies, one at a time.
pub(crate) async fn measure(pair: &Pair, samples: usize) -> anyhow::Result<Latencies> {
    let s = PathSettings {
        size: 1024,
        pairs: 1,
        briefs: 0,
        replies: 0,
        latency_samples: samples,
        warmup: 3,
    };
    let pairs = std::slice::from_ref(pair);
    paths::forward_warmup(pairs, &s).await?;
    let single = paths::forward_single(pairs, &s).await?;
    let main = pair.main_mcp.handle();
    let worker = pair.worker_mcp.handle();
    let mut replies = Vec::with_capacity(samples);
    for k in 0..samples {
        let m = main.clone();
        let from = pair.worker.gid.clone();
        let waiter = tokio::spawn(async move { m.call("bridge_wait", json!({"from": from, "timeout_s": 30})).await });
        // The wait must be open before the reply is sent: give the call its first milliseconds.
        tokio::time::sleep(Duration::from_millis(3)).await;
        let t0 = Instant::now();
        worker
            .call("bridge_reply", json!({"text": format!("scale latency {k}")}))
            .await
            .context("bridge_reply")?;
        let v = waiter.await.context("the bridge_wait task")??;
        if v.get("message").is_none() {
            return Err(anyhow!("bridge_wait returned no message: {v}"));
        }
        replies.push(t0.elapsed());
    }
    Ok(Latencies {
        send_injected: single.latency(),
        reply: Latency::of(&replies),
        failures: single.failures(),
    })
}
