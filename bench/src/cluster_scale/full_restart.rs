//! The whole cluster stopped and started again under a level's load: `kept` persistent REPLYs
//! confirmed into the latency pair's main inbox first (the worker's `bridge_reply` answered), then
//! every node stopped and started on its data ([`Broker::halt`], [`Broker::resume`]), timed until
//! every gateway is ready and every quorum queue has a leader, and the REPLYs drained after.
//!
//! Why a module: a full restart (a power cut, an upgrade gone wrong) recovers every Raft group at
//! once; its time, and that nothing confirmed is lost, are the other half of sizing a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use serde_json::{Value, json};

use crate::cluster_scale::broker_view::BrokerView;
use crate::cluster_scale::node_kill::{POLL, QUEUE_POLL, all_ready};
use crate::cluster_scale::settings::FullRestart;
use crate::paths::forward_pull::Pair;
use crate::rig::hosts::Fleet;
use fleet_conformance::broker::Broker;

/// Sends `kept` REPLYs from the pair's worker (each confirmed before the next), restarts the
/// cluster and times it, then drains them through the pair's main. `tag` makes this level's
/// texts its own.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    broker: &Broker,
    view: &BrokerView,
    vhost: &str,
    fleet: &Fleet,
    hosts: &[String],
    pair: &Pair,
    kept: usize,
    tag: &str,
    wait: Duration,
) -> anyhow::Result<FullRestart> {
    let worker = pair.worker_mcp.handle();
    let mut r = FullRestart::default();
    for i in 0..kept {
        let v = worker
            .call("bridge_reply", json!({"text": format!("{tag} kept {i}")}))
            .await
            .with_context(|| format!("kept REPLY {i} before the restart"))?;
        if v.get("msgId").and_then(Value::as_str).is_none() {
            return Err(anyhow!("kept REPLY {i} was not confirmed: {v}"));
        }
        r.kept += 1;
    }
    eprintln!("fleet-bench: scale: {kept} REPLYs held; stopping every node …");
    let t = Instant::now();
    broker.halt(vhost).await.context("stopping every node")?;
    r.halt_ms = t.elapsed().as_secs_f64() * 1e3;
    let since = Instant::now();
    // The gateways and the queues are looked at while the nodes start, not only once the whole
    // cluster answers: a gateway on the first node back may be ready long before the last node.
    let resumed = AtomicBool::new(false);
    let failed = AtomicBool::new(false);
    let watching = async {
        let mut leaders_ms = None;
        let mut gateways_ms = None;
        let mut next_queue_look = Instant::now();
        while leaders_ms.is_none() || gateways_ms.is_none() {
            let look = since.elapsed().as_secs_f64() * 1e3;
            if gateways_ms.is_none() && all_ready(fleet, hosts).await.is_ok() {
                gateways_ms = Some(look);
            }
            if leaders_ms.is_none() && Instant::now() >= next_queue_look {
                next_queue_look = Instant::now() + QUEUE_POLL;
                if let Ok(q) = view.quorum_queues(vhost).await
                    && !q.is_empty()
                    && q.iter().all(|x| x.led(None))
                {
                    leaders_ms = Some(look);
                }
            }
            // The nodes' own boot deadline bounds the wait until they answer; `wait` counts after.
            if failed.load(Ordering::SeqCst) || (resumed.load(Ordering::SeqCst) && since.elapsed() > wait) {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        (leaders_ms, gateways_ms)
    };
    let resuming = async {
        let r = broker.resume(vhost).await;
        failed.store(r.is_err(), Ordering::SeqCst);
        resumed.store(true, Ordering::SeqCst);
        r.map(|()| since.elapsed().as_secs_f64() * 1e3)
    };
    // The watch ends once both are seen, `wait` after the nodes answered, or at once when they
    // did not come back.
    let (back, (leaders_ms, gateways_ms)) = tokio::join!(resuming, watching);
    match back {
        Ok(ms) => r.broker_back_ms = Some(ms),
        Err(e) => {
            // The provider's error carries the nodes' log tails: the first line says what happened.
            let text = format!("{e:#}");
            let first = text.lines().next().unwrap_or_default();
            r.not_recovered = Some(format!("the cluster did not come back: {first}"));
            return Ok(r);
        }
    }
    r.leaders_ms = leaders_ms;
    r.gateways_ms = gateways_ms;
    let inbox = fleet_conformance::names::inbox(&pair.main.gid);
    let (drained, duplicates) = drain(pair, tag, kept, wait, || async {
        // Quiet, but the main's inbox still holds messages: not over yet (held back, or queued
        // behind one that is); the broker's count says.
        view.depth(vhost, &inbox)
            .await
            .is_ok_and(|(ready, unacked, _)| ready + unacked > 0)
    })
    .await?;
    r.drained = drained;
    r.duplicates = duplicates;
    if drained < kept {
        // Lost, or rejected on arrival? A REPLY a gateway rejected lies in bridge.dlq.
        match view.dead_lettered(vhost, &format!("{tag} kept "), kept).await {
            Ok(ids) => {
                r.dead_lettered = Some(ids.len());
                // Why: the receiving (main's) gateway logged each rejection with its msgId.
                let log = fleet
                    .hosts
                    .get(&pair.main.host)
                    .map(|h| h.gateway.log())
                    .unwrap_or_default();
                r.dead_lettered_why = rejection_checks(&log, &ids);
            }
            Err(e) => eprintln!("fleet-bench: scale: cannot look into bridge.dlq: {e:#}"),
        }
        // Still in the main's inbox (held back, or not delivered)? The broker's count says.
        match view.depth(vhost, &inbox).await {
            Ok((ready, unacked, consumers)) => {
                eprintln!(
                    "fleet-bench: scale: {} of {kept} kept REPLYs not drained; the main's inbox {inbox} holds {ready} ready, {unacked} unacknowledged, {consumers} consumer(s)",
                    kept - drained
                );
                r.inbox_left = Some((ready, unacked));
            }
            Err(e) => eprintln!("fleet-bench: scale: cannot look at the main's inbox: {e:#}"),
        }
    }
    if gateways_ms.is_none() || leaders_ms.is_none() {
        r.not_recovered = Some(format!(
            "within {} s: gateways {}, leaders {}",
            wait.as_secs(),
            if gateways_ms.is_some() { "ready" } else { "NOT ready" },
            if leaders_ms.is_some() {
                "elected"
            } else {
                "NOT all elected"
            }
        ));
    }
    Ok(r)
}

/// Drains the pair's main until `kept` distinct kept REPLYs of `tag` came, `wait` passed, or 30 s
/// brought nothing new while `inbox_busy` says the main's inbox holds nothing more: (distinct,
/// copies seen again).
async fn drain<F, Fut>(
    pair: &Pair,
    tag: &str,
    kept: usize,
    wait: Duration,
    inbox_busy: F,
) -> anyhow::Result<(usize, usize)>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let main = pair.main_mcp.handle();
    let prefix = format!("{tag} kept ");
    let mut seen = BTreeSet::new();
    let mut duplicates = 0;
    let deadline = Instant::now() + wait;
    // Nothing new for this long: the rest is not coming.
    let quiet = Duration::from_secs(30);
    let mut progress = Instant::now();
    while seen.len() < kept && Instant::now() < deadline {
        if progress.elapsed() >= quiet && !inbox_busy().await {
            break;
        }
        let v = main
            .call("bridge_wait", json!({"timeout_s": 5}))
            .await
            .context("bridge_wait after the restart")?;
        let mut messages: Vec<Value> = v.get("message").cloned().into_iter().collect();
        let polled = main
            .call("bridge_poll", json!({"max": 100}))
            .await
            .context("bridge_poll after the restart")?;
        messages.extend(polled["messages"].as_array().cloned().unwrap_or_default());
        for m in messages {
            if let Some(text) = m["text"].as_str().filter(|t| t.starts_with(&prefix)) {
                if seen.insert(text.to_string()) {
                    progress = Instant::now();
                } else {
                    duplicates += 1;
                }
            }
        }
    }
    Ok((seen.len(), duplicates))
}

/// Counts `ids` by the check a gateway's log names for each: the value of `check=` on a line
/// that names the `msgId` and says the message was rejected (the reference gateway's SIG-5 line,
/// text or JSON format); `not in the log` when no such line names it.
pub(crate) fn rejection_checks(log: &str, ids: &[String]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for id in ids {
        let check = (!id.is_empty())
            .then(|| {
                log.lines()
                    .filter(|l| l.contains(id.as_str()) && l.contains("rejected"))
                    .find_map(check_of)
            })
            .flatten()
            .unwrap_or_else(|| "not in the log".to_string());
        *out.entry(check).or_insert(0) += 1;
    }
    out
}

/// The `check` field of one log line: `check=x`, `check="x"` or `"check":"x"`.
fn check_of(line: &str) -> Option<String> {
    let at = line
        .find("\"check\":")
        .map(|i| i + "\"check\":".len())
        .or_else(|| line.find("check=").map(|i| i + "check=".len()))?;
    let rest = line[at..].trim_start_matches('"');
    let end = rest
        .find(|c: char| c == '"' || c == ',' || c.is_whitespace())
        .unwrap_or(rest.len());
    (end > 0).then(|| rest[..end].to_string())
}
