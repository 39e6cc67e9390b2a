//! Steps of the confirm-stall scenario (capability `confirm-stall`, CONTRACT §11): a node cut off
//! from the other nodes only, its clients' links kept, and a gateway that moves off it before the
//! cluster notices.
//!
//! Such a node takes publishes and confirms none of them (a quorum inbox needs a majority; the
//! other nodes' queues are out of its reach) until the cluster notices the cut (`net_ticktime`)
//! and `pause_minority` pauses it. The gateway judged reaches each node through a relay of the
//! suite's (a TCP proxy per node, [`fleet_conformance::proxy::Proxy`]), so the suite sees from the
//! cut on when it holds a connection to another node: the management API cannot say (until the
//! cluster notices, it waits on the cut-off node), and the broker's own list loses a connection the
//! gateway had to give up meanwhile. A connection counts once it has lived [`HELD`]: a short probe
//! is not a move.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use fleet_conformance::broker::url::percent_encode;
use fleet_conformance::proxy::Proxy;
use fleet_conformance::timing::scaled;

use super::{host_offset, node_of_host, send_replies};
use crate::world::FleetWorld;

/// How long a connection through another node's relay must live to count as a move (a probe
/// connection opens and closes at once).
const HELD: Duration = Duration::from_secs(1);

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

/// `host`'s gateway gets every node's URL (its own login, the host's rotation) with each node's
/// address replaced by a relay of the suite's to it.
#[given(regex = r#"^host "([^"]+)" reaches every node of the cluster through a relay of the suite's$"#)]
async fn through_relays(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let vhost = w.vhost().await?;
    let (user, password) = crate::security::provision_login(w, &host).await?;
    let suite = w.suite()?;
    let n = suite.broker.node_count();
    let (mut urls, mut relays) = (Vec::new(), Vec::new());
    for k in 0..n {
        let i = (k + host_offset(&host)) % n;
        let relay = Proxy::start(suite.broker.node_endpoint(i).amqp_addr()).await?;
        urls.push(format!(
            "amqp://{}:{}@{}/{}",
            percent_encode(&user),
            percent_encode(&password),
            relay.listen(),
            percent_encode(&vhost)
        ));
        relays.push((i, Arc::new(relay)));
    }
    w.host_env
        .entry(host.clone())
        .or_default()
        .insert("FLEET_AMQP_URL".into(), urls.join(","));
    w.cluster.relays = relays;
    w.cluster.relayed = Some(host);
    Ok(())
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
    w.cluster.moved = Some(watch_relays(&w.cluster.relays, node, at));
    println!("node {node} (holding the gateway on {host}) cut off from the other nodes; its clients' links kept");
    Ok(())
}

#[when(regex = r#"^"([^"]+)" sends a reply "([^"]+)" in the background$"#)]
async fn one_reply(w: &mut FleetWorld, worker: String, text: String) -> anyhow::Result<()> {
    send_replies(w, worker, vec![text]).await
}

/// CLU-1 with `confirm-stall` (CONTRACT §11): from the cut on, a connection through the relay of
/// another node lived [`HELD`], and it was opened within the stall bound plus `margin` (scaled).
#[then(
    regex = r#"^the gateway on "([^"]+)" holds a connection to another node within the confirm stall bound and (\d+) seconds of the cut$"#
)]
async fn moved_soon(w: &mut FleetWorld, host: String, margin: u64) -> anyhow::Result<()> {
    let (node, cut) = w.cluster.struck.ok_or_else(|| anyhow!("no node was cut off"))?;
    ensure!(
        w.cluster.relayed.as_deref() == Some(host.as_str()),
        "the gateway on {host} does not reach the nodes through the suite's relays (see the scenario's Given)"
    );
    let moved = w
        .cluster
        .moved
        .clone()
        .ok_or_else(|| anyhow!("nobody watches the relays since the cut"))?;
    let bound = stall_bound_of(w);
    let limit = bound + scaled(Duration::from_secs(margin));
    let give_up = cut + limit + HELD + scaled(Duration::from_millis(500));
    let seen = loop {
        let seen = moved.lock().map(|m| *m).unwrap_or_default();
        if seen.is_some() || Instant::now() >= give_up {
            break seen;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let live: Vec<(usize, usize)> = w.cluster.relays.iter().map(|(i, r)| (*i, r.live())).collect();
    match seen {
        Some((to, after)) => {
            println!(
                "the gateway on {host} opened a lasting connection to node {to} {after:.1?} after node {node} was cut off (limit {limit:.1?})"
            );
            ensure!(
                after <= limit,
                "CLU-1 (confirm-stall): the gateway on {host} held a connection to another node (node {to}) only from \
                 {after:.1?} after node {node} was cut off from the other nodes; a gateway whose confirms stall past \
                 FLEET_CONFIRM_STALL_MS ({bound:?}) while another node answers must have moved within {limit:.1?} \
                 (the bound + {margin} s scaled)"
            );
        }
        None => anyhow::bail!(
            "CLU-1 (confirm-stall): {:.1?} after node {node} was cut off from the other nodes, the gateway on {host} \
             held no lasting connection to another node (live connections per node's relay now: {live:?}); a gateway \
             whose confirms stall past FLEET_CONFIRM_STALL_MS ({bound:?}) while another node answers must have moved \
             within {limit:.1?} (the bound + {margin} s scaled)",
            cut.elapsed()
        ),
    }
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

/// From `cut` on, watches the relays of every node but `cut_off`: the first connection through one
/// that lives [`HELD`] is a move, noted as (node, when it opened, from the cut).
fn watch_relays(relays: &[(usize, Arc<Proxy>)], cut_off: usize, cut: Instant) -> super::Moved {
    let moved = Arc::new(Mutex::new(None));
    let others: Vec<(usize, Arc<Proxy>)> = relays.iter().filter(|(i, _)| *i != cut_off).cloned().collect();
    let (seen, give_up) = (moved.clone(), scaled(Duration::from_secs(120)));
    tokio::spawn(async move {
        let mut since: BTreeMap<usize, Instant> = BTreeMap::new();
        while cut.elapsed() < give_up {
            for (i, relay) in &others {
                if relay.live() == 0 {
                    since.remove(i);
                    continue;
                }
                let opened = *since.entry(*i).or_insert_with(Instant::now);
                if opened.elapsed() >= HELD {
                    if let Ok(mut m) = seen.lock() {
                        *m = Some((*i, opened.saturating_duration_since(cut)));
                    }
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    moved
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
