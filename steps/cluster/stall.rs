//! Steps of the confirm-stall scenario (capability `confirm-stall`, CONTRACT §11): a node cut off
//! from the other nodes only, its clients' links kept, and a gateway that moves off it before the
//! cluster notices.
//!
//! Such a node takes publishes and confirms none of them (a quorum inbox needs a majority; the
//! other nodes' queues are out of its reach) until the cluster notices the cut (`net_ticktime`)
//! and `pause_minority` pauses it. So a reply confirmed soon after the cut was published through
//! another node: the gateway moved. What is judged is how soon after the cut the reply, issued
//! right after it, came back confirmed: within the gateway's stall bound (`FLEET_CONFIRM_STALL_MS`,
//! set by the scenario) plus a scaled margin. The management API cannot say sooner where the
//! gateway's connection is: until the cluster notices, it waits on the cut-off node.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use fleet_conformance::timing::scaled;

use super::{node_of_host, send_replies};
use crate::world::FleetWorld;

/// The gateway's stall bound when the scenario does not set it (the reference's default).
const DEFAULT_STALL_MS: u64 = 4_000;

#[given(expr = "the gateways' confirm stall bound is {int} seconds")]
async fn stall_bound(w: &mut FleetWorld, secs: u64) {
    w.gateway_env
        .insert("FLEET_CONFIRM_STALL_MS".into(), (secs * 1000).to_string());
}

fn stall_bound_of(w: &FleetWorld) -> Duration {
    let ms = w
        .gateway_env
        .get("FLEET_CONFIRM_STALL_MS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_STALL_MS);
    Duration::from_millis(ms)
}

#[when(
    regex = r#"^the node the gateway on "([^"]+)" is connected to is cut off from the other nodes only, its clients' links kept$"#
)]
async fn isolate(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let node = node_of_host(w, &host).await?;
    w.suite()?.broker.isolate_node(node).await?;
    let at = Instant::now();
    w.cluster.partitioned = Some(node);
    w.cluster.struck = Some((node, at));
    println!("node {node} (holding the gateway on {host}) cut off from the other nodes; its clients' links kept");
    Ok(())
}

#[when(regex = r#"^"([^"]+)" sends a reply "([^"]+)" in the background$"#)]
async fn one_reply(w: &mut FleetWorld, worker: String, text: String) -> anyhow::Result<()> {
    send_replies(w, worker, vec![text]).await
}

/// CLU-1 with `confirm-stall` (CONTRACT §11): once the other nodes see the cut-off node down (the
/// management API answers again), the broker's `connected_at` of the host's first connection on
/// another node is within the stall bound plus `margin` (scaled) of the cut.
#[then(
    regex = r#"^the gateway on "([^"]+)" was connected to another node within the confirm stall bound and (\d+) seconds of the cut$"#
)]
async fn moved_soon(w: &mut FleetWorld, host: String, margin: u64) -> anyhow::Result<()> {
    let (node, cut) = w.cluster.struck.ok_or_else(|| anyhow!("no node was cut off"))?;
    let cut_ms = u64::try_from(
        SystemTime::now()
            .checked_sub(cut.elapsed())
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .unwrap_or_default()
            .as_millis(),
    )?;
    let bound = stall_bound_of(w);
    let limit = bound + scaled(Duration::from_secs(margin));
    let (user, _) = w
        .broker_logins
        .get(&host)
        .cloned()
        .ok_or_else(|| anyhow!("host {host:?} has no login of its own (see the Background)"))?;
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let mut elsewhere = Vec::new();
    for c in suite.broker.management().connections(&vhost).await? {
        if c.user == user && suite.broker.node_index(&c.node).await != Some(node) {
            elsewhere.push(c);
        }
    }
    let first = elsewhere
        .iter()
        .filter_map(|c| c.connected_at.map(|at| (at, c)))
        .min_by_key(|(at, _)| *at)
        .ok_or_else(|| {
            anyhow!(
                "CLU-1: the broker lists no connection of the gateway on {host} with a connected_at on a node other than \
                 node {node}, which was cut off: {elsewhere:?}"
            )
        })?;
    let after = Duration::from_millis(first.0.saturating_sub(cut_ms));
    println!(
        "the gateway on {host} connected to {} {after:.1?} after node {node} was cut off (limit {limit:.1?})",
        first.1.node
    );
    ensure!(
        after <= limit,
        "CLU-1 (confirm-stall): the gateway on {host} connected to another node ({}) only {after:.1?} after node {node} \
         was cut off from the other nodes; a gateway whose confirms stall past FLEET_CONFIRM_STALL_MS ({bound:?}) while \
         another node answers must have moved within {limit:.1?} (the bound + {margin} s scaled)",
        first.1.node
    );
    Ok(())
}

/// The reply issued while the node was stalled came back confirmed (a kind [C-18] republishes),
/// within the inject bound.
#[then(regex = r#"^the reply of "([^"]+)" ends confirmed within the inject bound$"#)]
async fn reply_confirmed(w: &mut FleetWorld, worker: String) -> anyhow::Result<()> {
    let (_, cut) = w.cluster.struck.ok_or_else(|| anyhow!("no node was cut off"))?;
    let run = w
        .cluster
        .replies
        .as_mut()
        .ok_or_else(|| anyhow!("no reply was sent in the background"))?;
    ensure!(
        run.worker == worker,
        "the replies in the background are {}'s",
        run.worker
    );
    if let Some(task) = run.task.take() {
        task.await.map_err(|e| anyhow!("the background reply's task: {e}"))?;
    }
    let outcome = run
        .outcomes()
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("the reply of {worker} did not end"))?;
    match &outcome.result {
        Ok(id) => println!(
            "the reply {id} came back confirmed after {:.1?} ({:.1?} after the cut)",
            outcome.took,
            cut.elapsed()
        ),
        Err(why) => anyhow::bail!(
            "PUB-3/[C-18]: the reply of {worker}, issued while its gateway's node was cut off, did not come back \
             confirmed within the inject bound ({why}, after {:.1?}): the gateway must move and republish it",
            outcome.took
        ),
    }
    Ok(())
}

#[when("the other nodes see the cut-off node down")]
async fn cut_seen(w: &mut FleetWorld) -> anyhow::Result<()> {
    let node = w.cluster.partitioned.ok_or_else(|| anyhow!("no node is cut off"))?;
    w.suite()?.broker.wait_cut_seen(node).await?;
    if let Some((_, cut)) = w.cluster.struck {
        println!(
            "the other nodes saw node {node} down {:.1?} after the cut",
            cut.elapsed()
        );
    }
    Ok(())
}
