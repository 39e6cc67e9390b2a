//! The soak on a cluster (SPEC §16, CLU-5, CLU-6): the links between gateways and the nodes, and
//! the node strikes of the nemesis — a node killed and started again, the main's inbox leader
//! killed and started again, a node cut off and healed.
//!
//! **The links.** On one node the gateways reach the broker through one cuttable link (a TCP
//! proxy, `fleet_conformance::proxy`). On a cluster a gateway must be given every node (CLU-1)
//! or a node strike would take its only node, so there is one link per node and each gateway's
//! `FLEET_AMQP_URL` lists every node through its link, rotated per host as the cluster steps do
//! (CONTRACT §11: hosts `a`, `b`, `c` start on different nodes). A link is transparent to the
//! cluster: a node killed closes its connections through its link (its proxy then accepts and
//! drops at once, which a gateway sees as the node refusing), a node cut off goes silent through
//! it. So the `cut` strike keeps its meaning on a cluster — every connection between gateways and
//! broker cut at once, every link, a blip of the network as the gateways see it — beside the node
//! strikes, which take one node away from the broker's side. (Dropping the links on a cluster
//! would have lost the `cut` strike, the only one that breaks every gateway's connection without
//! touching the broker.)
//!
//! **The node strikes** (only with gateways that run the cluster profile, `Suite::quorum`, on a
//! provider that can strike nodes, in a scenario that has the cluster to itself): each one first
//! makes sure the cluster is whole, picks its node, takes it away, keeps it away for a period
//! while operations flow on the other two nodes, brings it back and waits until the cluster is
//! whole again — so at most one node of three is ever away (a quorum needs two), and a strike's
//! unknowns are put down to it for as long as the node was away ([`super::history::blame`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cucumber::given;
use fleet_conformance::names::inbox;
use fleet_conformance::proxy::Proxy;

use crate::world::{FleetWorld, Suite};

use super::nemesis::{Rng, Strike};

/// Whether the soak strikes nodes here: a cluster whose gateways run the cluster profile (every
/// node's URL, quorum queues).
pub(super) fn cluster_profile(suite: &Suite) -> bool {
    suite.broker.is_cluster() && suite.quorum
}

/// Why `strike` (a node strike) cannot happen on this run's broker, if it cannot (said in the
/// summary's `nemesis.off`). Whether the scenario has the cluster to itself is the caller's.
pub(super) fn node_strike_off(suite: &Suite, strike: Strike) -> Option<String> {
    let spec = suite.broker.spec();
    if !suite.broker.is_cluster() {
        return Some(format!("{} is a single node, not a cluster", spec.label()));
    }
    if !suite.quorum {
        return Some(
            "the gateway under test does not declare `cluster`: it is given the first node's URL only, with \
             classic queues (CONTRACT §11), so a node strike would take its only node"
                .into(),
        );
    }
    match strike {
        Strike::Partition => suite.broker.cannot_partition().map(str::to_string),
        _ => spec.cannot_lose_node().map(str::to_string),
    }
}

#[given(
    regex = r#"^gateways on "([^"]+)", "([^"]+)" and "([^"]+)" reach the broker through links the suite can cut, one per broker node$"#
)]
async fn links(w: &mut FleetWorld, a: String, b: String, c: String) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let broker = &suite.broker;
    if !cluster_profile(&suite) {
        // One node, or gateways given the first node only: one link to it (the world routes
        // every gateway's URL through `w.link`).
        w.link = Some(Proxy::start(broker.endpoint().amqp_addr()).await?);
        return Ok(());
    }
    let vhost = w.vhost().await?;
    let n = broker.node_count();
    let mut links = Vec::with_capacity(n);
    for node in 0..n {
        links.push(Proxy::start(broker.node_endpoint(node).amqp_addr()).await?);
    }
    for host in [a, b, c] {
        let offset = crate::cluster::host_offset(&host);
        let urls: Vec<String> = (0..n)
            .map(|k| {
                let node = (k + offset) % n;
                broker.node_amqp_url(node, &vhost).replace(
                    &broker.node_endpoint(node).amqp_addr(),
                    &links[node].listen().to_string(),
                )
            })
            .collect();
        w.host_env
            .entry(host)
            .or_default()
            .insert("FLEET_AMQP_URL".into(), urls.join(","));
    }
    w.soak.links = links;
    Ok(())
}

/// Cuts every connection through every link of the scenario (the one of a single node, or one per
/// node of a cluster); how many.
pub(super) fn cut_links(w: &FleetWorld) -> Option<usize> {
    let links: Vec<&Proxy> = w.link.iter().chain(&w.soak.links).collect();
    if links.is_empty() {
        return None;
    }
    Some(links.iter().map(|l| l.cut()).sum())
}

/// How many of the scenario's broker connections each node holds (by node index).
async fn connections_by_node(w: &mut FleetWorld) -> anyhow::Result<BTreeMap<usize, usize>> {
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let conns = suite.broker.management().connections(&vhost).await?;
    let mut by_node = BTreeMap::new();
    for c in &conns {
        if let Some(i) = suite.broker.node_index(&c.node).await {
            *by_node.entry(i).or_default() += 1;
        }
    }
    Ok(by_node)
}

/// One node strike: `(target, done, detail)` for the nemesis' record. Never leaves a node away
/// that it could bring back; a strike that could not bring its node back says so (and the next
/// node strike, or the end of the run, makes the cluster whole before anything else).
pub(super) async fn strike_node(
    w: &mut FleetWorld,
    strike: Strike,
    rng: &mut Rng,
    hold: Duration,
    main: &str,
) -> (String, bool, String) {
    let suite = match w.suite() {
        Ok(s) => s,
        Err(e) => return ("-".into(), false, format!("{e:#}")),
    };
    let broker = &suite.broker;
    // Never two nodes away: the last strike's node is back (or is brought back now).
    if let Err(e) = broker.ensure_whole().await {
        return (
            "cluster".into(),
            false,
            format!("the cluster is not whole before the strike ({e}); no node struck"),
        );
    }
    let (node, why) = match pick_node(w, strike, rng, main).await {
        Ok(picked) => picked,
        Err(e) => return ("-".into(), false, format!("picking the node: {e:#}")),
    };
    let target = format!("node {node}");
    let t0 = Instant::now();
    let away = match strike {
        Strike::Partition => broker.partition_node(node).await,
        _ => broker.kill_node(node).await,
    };
    let seen_away = t0.elapsed();
    if away.is_ok() {
        // The nemesis' pacing: operations flow on the other two nodes meanwhile.
        tokio::time::sleep(hold).await;
    }
    let t1 = Instant::now();
    let back = match strike {
        Strike::Partition => broker.heal_node(node).await,
        _ => broker.start_node(node).await,
    };
    let (verb, undo) = match strike {
        Strike::Partition => ("cut off", "healed"),
        _ => ("killed", "started again"),
    };
    match (away, back) {
        (Ok(()), Ok(())) => (
            target,
            true,
            format!(
                "{why}; {verb} (seen away in {seen_away:.1?}), away {:.1?}, {undo} and whole in {:.1?}",
                seen_away + hold,
                t1.elapsed()
            ),
        ),
        (away, back) => (
            target,
            false,
            format!(
                "{why}; {verb}: {}; {undo}: {}",
                away.map_or_else(|e| e.to_string(), |()| "ok".into()),
                back.map_or_else(|e| e.to_string(), |()| "ok".into())
            ),
        ),
    }
}

/// The node a strike takes: the leader of the main's inbox for [`Strike::LeaderKill`]; else one of
/// the nodes holding gateway connections (any node when none does), seeded. With why, for the
/// record.
async fn pick_node(w: &mut FleetWorld, strike: Strike, rng: &mut Rng, main: &str) -> anyhow::Result<(usize, String)> {
    let suite = w.suite()?;
    if strike == Strike::LeaderKill {
        let gid = w.gid(main)?;
        let vhost = w.vhost().await?;
        let queue = inbox(&gid);
        let leader = suite.broker.queue_leader(&vhost, &queue).await?;
        return Ok((leader, format!("leader of {main}'s inbox {queue}")));
    }
    let by_node = connections_by_node(w).await?;
    let holding: Vec<usize> = by_node.keys().copied().collect();
    if holding.is_empty() {
        let node = rng.below(suite.broker.node_count());
        return Ok((node, "no node holds a gateway connection: picked at random".into()));
    }
    let node = holding[rng.below(holding.len())];
    Ok((
        node,
        format!(
            "holds {} of the gateways' connections (by node: {by_node:?})",
            by_node.get(&node).copied().unwrap_or(0)
        ),
    ))
}
