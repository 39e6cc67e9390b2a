//! A node SIGKILLed under a level's load and started again (CLU-5): kill → every quorum queue
//! led by a live node, and every gateway `/readyz` 200; leaders per node before, after the kill
//! and once the node is back; then whether a rebalance is needed, measured by asking for one.
//!
//! Why a module: with thousands of Raft groups, recovery is per queue (an election each), so its
//! time grows with the queues; this is the figure an operator sizes a node loss by.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::cluster_scale::broker_view::{BrokerView, QueueView, leaders};
use crate::cluster_scale::settings::{Leaders, NodeKill, Rebalance, balanced};
use crate::rig::hosts::Fleet;
use fleet_conformance::broker::Broker;
use fleet_conformance::mcp::McpHandle;

/// How often the gateways' readiness is looked at.
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// How often the queues' leaders are looked at: a look at ten thousand queues is work for the
/// broker that is recovering, and the management API's view of them lags up to a quorum tick.
pub(crate) const QUEUE_POLL: Duration = Duration::from_secs(1);

/// Whether every gateway of `hosts` answers `/readyz` 200; else the first that does not.
pub(crate) async fn all_ready(fleet: &Fleet, hosts: &[String]) -> Result<(), String> {
    for h in hosts {
        let gw = &fleet.host(h).map_err(|e| e.to_string())?.gateway;
        match gw.get("/readyz").await {
            Ok((200, _)) => {}
            Ok((s, _)) => return Err(format!("{h}: /readyz {s}")),
            Err(_) => return Err(format!("{h}: no answer")),
        }
    }
    Ok(())
}

/// The node leading the most queues (the kill that hurts most).
pub(crate) fn busiest(l: &Leaders) -> usize {
    l.per_node
        .iter()
        .enumerate()
        .max_by_key(|(i, n)| (**n, *i))
        .map_or(0, |(i, _)| i)
}

/// Polls until `done(queues)` holds, from `since`, within `wait`: the time it first held.
async fn until_queues(
    view: &BrokerView,
    vhost: &str,
    since: Instant,
    wait: Duration,
    done: impl Fn(&[QueueView]) -> bool,
) -> Option<f64> {
    loop {
        let look = since.elapsed();
        if let Ok(q) = view.quorum_queues(vhost).await
            && done(&q)
        {
            return Some(look.as_secs_f64() * 1e3);
        }
        if since.elapsed() > wait {
            return None;
        }
        tokio::time::sleep(QUEUE_POLL).await;
    }
}

/// One look at the quorum queues, looked at again until `wait` while the management API fails:
/// with a node just killed or just back, every node's API can fail a look for a while (seen on
/// the container cluster at 1,000 inboxes), which is no reason to end the level.
async fn look_until(view: &BrokerView, vhost: &str, wait: Duration) -> anyhow::Result<Vec<QueueView>> {
    let since = Instant::now();
    loop {
        match view.quorum_queues(vhost).await {
            Ok(q) => return Ok(q),
            Err(e) if since.elapsed() > wait => {
                return Err(e.context(format!("the quorum queues could not be read for {wait:?}")));
            }
            Err(_) => tokio::time::sleep(QUEUE_POLL).await,
        }
    }
}

/// Kills the busiest node, times recovery, starts it again, times its return, and (`rebalance`)
/// times a rebalance. `names` are the nodes' names by index; `hosts` every gateway.
///
/// `classic`: the inboxes are classic queues, whose home node's death nothing else takes over:
/// the kill is watched for that window only (how many inboxes are down, whether the gateways are
/// ready), and after the node's start, until every inbox and every gateway is back. No rebalance.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    broker: &Broker,
    view: &BrokerView,
    vhost: &str,
    names: &[String],
    fleet: &Fleet,
    hosts: &[String],
    wait: Duration,
    rebalance: bool,
    classic: Option<Duration>,
    sender: &McpHandle,
) -> anyhow::Result<NodeKill> {
    let wait_after_kill = classic.map_or(wait, |w| w.min(wait));
    let before = view.quorum_queues(vhost).await?;
    let leaders_before = leaders(&before, names, None);
    let node = busiest(&leaders_before);
    let dead = names.get(node).cloned().unwrap_or_default();
    let mut k = NodeKill {
        node,
        leaders_before,
        ..NodeKill::default()
    };
    eprintln!("fleet-bench: scale: killing node {node} ({dead}) …");
    let since = Instant::now();
    let seen = Arc::new(AtomicBool::new(false));
    let killing = {
        let seen = Arc::clone(&seen);
        async move {
            let r = broker.kill_node(node).await;
            seen.store(true, Ordering::SeqCst);
            r.map(|()| since.elapsed())
        }
    };
    // Only looks taken once the kill has landed count: a look from before it sees every queue
    // led and would time the recovery as 0 ms (seen on the container cluster).
    let leaders_back = async {
        while !seen.load(Ordering::SeqCst) {
            tokio::time::sleep(POLL).await;
        }
        until_queues(view, vhost, since, wait_after_kill, |q| {
            !q.is_empty() && q.iter().all(|x| x.led(Some(dead.as_str())))
        })
        .await
    };
    let gateways_back = async {
        while !seen.load(Ordering::SeqCst) {
            tokio::time::sleep(POLL).await;
        }
        until_ready(fleet, hosts, since, wait_after_kill).await
    };
    let (killed, leaders_ms, gateways_ms) = tokio::join!(killing, leaders_back, gateways_back);
    k.kill_seen_ms = killed.with_context(|| format!("killing node {node}"))?.as_secs_f64() * 1e3;
    k.leaders_ms = leaders_ms;
    k.gateways_ms = gateways_ms;
    let mut missing = Vec::new();
    if leaders_ms.is_none() && classic.is_none() {
        missing.push("not every quorum queue had a leader on a live node");
    }
    if gateways_ms.is_none() && classic.is_none() {
        missing.push("not every gateway was ready");
    }
    let after_kill = look_until(view, vhost, wait).await?;
    if classic.is_some() {
        let down: Vec<&QueueView> = after_kill.iter().filter(|q| !q.led(Some(dead.as_str()))).collect();
        k.inboxes_down = Some(down.len());
        let gid = down
            .iter()
            .find_map(|q| q.name.strip_prefix("agent.")?.strip_suffix(".inbox.v2"));
        if let Some(gid) = gid {
            k.down_send = Some(send_to_down(sender, gid).await);
        }
    }
    k.leaders_after_kill = leaders(&after_kill, names, Some(dead.as_str()));
    let start = Instant::now();
    if let Err(e) = broker.start_node(node).await {
        // What the kill measured is kept; the level ends here (the cluster is not whole).
        let text = format!("{e:#}");
        missing.push("the node did not come back");
        k.not_recovered = Some(format!(
            "{} — starting node {node} again: {}",
            missing.join("; "),
            text.lines().next().unwrap_or_default()
        ));
        return Ok(k);
    }
    k.node_back_ms = Some(start.elapsed().as_secs_f64() * 1e3);
    if classic.is_some() {
        let (inboxes, gateways) = tokio::join!(
            until_queues(view, vhost, start, wait, |q| !q.is_empty()
                && q.iter().all(|x| x.led(None))),
            until_ready(fleet, hosts, start, wait)
        );
        k.inboxes_back_ms = inboxes;
        k.gateways_after_return_ms = gateways;
        if inboxes.is_none() {
            missing.push("not every classic inbox was available after its node came back");
        }
        if gateways.is_none() {
            missing.push("not every gateway was ready after the node came back");
        }
        k.leaders_after_return = leaders(&look_until(view, vhost, wait).await?, names, None);
        if !missing.is_empty() {
            k.not_recovered = Some(format!("{} within {} s", missing.join("; "), wait.as_secs()));
        }
        return Ok(k);
    }
    // A management API that lists no members cannot say when they are back: not waited for.
    if before.iter().any(|q| !q.members.is_empty()) {
        k.members_back_ms = until_queues(view, vhost, start, wait, |q| {
            !q.is_empty() && q.iter().all(QueueView::whole)
        })
        .await;
        if k.members_back_ms.is_none() {
            missing.push("not every quorum queue listed every member online after the node came back");
        }
    } else {
        missing.push("the management API lists no quorum queue members: their return was not timed");
    }
    k.leaders_after_return = leaders(&look_until(view, vhost, wait).await?, names, None);
    if rebalance {
        // A rebalance that does not balance within two minutes is reported as such.
        let patience = (wait / 2).min(Duration::from_secs(120));
        k.rebalance = Some(rebalanced(view, vhost, names, patience).await);
    }
    if !missing.is_empty() {
        k.not_recovered = Some(format!("{} within {} s", missing.join("; "), wait.as_secs()));
    }
    Ok(k)
}

/// One brief to `gid`, whose inbox is down: the sender's answer and how long it took.
async fn send_to_down(sender: &McpHandle, gid: &str) -> String {
    let t0 = Instant::now();
    let answer = sender
        .call(
            "bridge_send",
            serde_json::json!({"to": gid, "text": "scale: a brief to an inbox whose node is down", "wait_reply": false}),
        )
        .await;
    let took = t0.elapsed().as_secs_f64() * 1e3;
    match answer {
        Ok(v) => format!("{v} after {took:.0} ms"),
        Err(e) => format!("the call failed after {took:.0} ms: {e:#}"),
    }
}

/// Polls until every gateway of `hosts` is ready, from `since`, within `wait`: the time it first was.
async fn until_ready(fleet: &Fleet, hosts: &[String], since: Instant, wait: Duration) -> Option<f64> {
    loop {
        let look = since.elapsed();
        if all_ready(fleet, hosts).await.is_ok() {
            return Some(look.as_secs_f64() * 1e3);
        }
        if since.elapsed() > wait {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `POST /api/rebalance/queues`, then the time until the leaders are [`balanced`].
async fn rebalanced(view: &BrokerView, vhost: &str, names: &[String], wait: Duration) -> Rebalance {
    let since = Instant::now();
    if let Err(e) = view.rebalance().await {
        return Rebalance {
            note: Some(format!("{e:#}")),
            ..Rebalance::default()
        };
    }
    let balanced_ms = until_queues(view, vhost, since, wait, |q| balanced(&leaders(q, names, None))).await;
    let leaders_after = match view.quorum_queues(vhost).await {
        Ok(q) => leaders(&q, names, None),
        Err(_) => Leaders::default(),
    };
    Rebalance {
        note: balanced_ms
            .is_none()
            .then(|| format!("not balanced within {} s", wait.as_secs())),
        balanced_ms,
        leaders_after,
    }
}
