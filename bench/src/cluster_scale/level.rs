//! One level of `--scale`: grow the entity gateways to N entities, let the cluster settle for one
//! heartbeat, read it at rest (memory, processes, disk per node; per queue over the idle
//! cluster), time a brief and a reply through it, kill a node, restart the whole cluster.
//!
//! Why a module: a level is the unit the run stops at; this file says what one level does, in
//! order, and [`crate::cluster_scale::run`] says when to go on to the next.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::cluster_scale::broker_view::{BrokerView, available_mib};
use crate::cluster_scale::gateways::{Gateways, Short};
use crate::cluster_scale::settings::{AtRest, Level, PerQueue, ScaleClusterSettings};
use crate::cluster_scale::{full_restart, latency, node_kill};
use crate::paths::forward_pull::Pair;
use fleet_conformance::broker::Broker;

/// What a level needs from the run: the broker, its reader, the vhost, the nodes' names.
pub(crate) struct On<'a> {
    pub broker: &'a Broker,
    pub view: &'a BrokerView,
    pub vhost: &'a str,
    pub names: &'a [String],
}

/// The cluster at rest holding `entities`: every node's figures and the quorum queues listed.
pub(crate) async fn at_rest(on: &On<'_>, entities: usize) -> anyhow::Result<AtRest> {
    let queues = on.view.quorum_queues(on.vhost).await?;
    let nodes = on.view.nodes(on.broker).await.context("reading the nodes")?;
    Ok(AtRest {
        entities,
        quorum_queues: queues.len(),
        nodes,
        machine_available_mib: available_mib(),
    })
}

/// Waits until the management API lists at least `at_least` quorum queues (statistics lag the
/// declarations), within `wait`.
async fn listed(on: &On<'_>, at_least: usize, wait: Duration) -> anyhow::Result<()> {
    let since = Instant::now();
    loop {
        let n = on.view.quorum_queues(on.vhost).await.map(|q| q.len()).unwrap_or(0);
        if n >= at_least {
            return Ok(());
        }
        if since.elapsed() > wait {
            anyhow::bail!("the management API listed {n} quorum queues, {at_least} expected, after {} s", wait.as_secs());
        }
        tokio::time::sleep(node_kill::POLL).await;
    }
}

/// Runs one level. `Err(Short)` when growing stopped before the level or measuring it failed,
/// with the reason: the run ends there and keeps the levels before.
pub(crate) async fn run(
    on: &On<'_>,
    gateways: &mut Gateways,
    pair: &Pair,
    idle: &AtRest,
    level: usize,
    s: &ScaleClusterSettings,
) -> Result<Level, Short> {
    let started = Instant::now();
    let before = gateways.entities();
    eprintln!("fleet-bench: scale: level {level} (from {before}) …");
    gateways.grow(level, s, started).await?;
    let register_s = started.elapsed().as_secs_f64();
    let registered = gateways.entities() - before;
    let measured = async {
        // Every inbox listed, then one heartbeat for the gateways' first presence rounds.
        listed(on, gateways.entities(), s.recovery_wait).await?;
        tokio::time::sleep(Duration::from_millis(s.heartbeat_ms)).await;
        let rest = at_rest(on, gateways.entities()).await?;
        let per_queue = PerQueue::of(idle, &rest);
        eprintln!(
            "fleet-bench: scale: level {level}: {} quorum queues, {:.1} MiB broker memory ({:.0} KiB per queue added)",
            rest.quorum_queues,
            rest.mem_used() as f64 / 1048576.0,
            per_queue.mem_bytes / 1024.0
        );
        let lat = latency::measure(pair, s.latency_samples).await.context("the latency pair")?;
        let hosts = gateways.hosts();
        let kill = node_kill::run(
            on.broker,
            on.view,
            on.vhost,
            on.names,
            &gateways.fleet,
            &hosts,
            s.recovery_wait,
            s.rebalance,
        )
        .await
        .context("the node kill")?;
        eprintln!(
            "fleet-bench: scale: level {level}: node kill → leaders {} ms, gateways {} ms",
            kill.leaders_ms.map_or("-".into(), |x| format!("{x:.0}")),
            kill.gateways_ms.map_or("-".into(), |x| format!("{x:.0}"))
        );
        let tag = format!("L{level}");
        let restart = full_restart::run(
            on.broker,
            on.view,
            on.vhost,
            &gateways.fleet,
            &hosts,
            pair,
            s.kept,
            &tag,
            s.recovery_wait,
        )
        .await
        .context("the whole-cluster restart")?;
        eprintln!(
            "fleet-bench: scale: level {level}: full restart → gateways {} ms, {} of {} kept REPLYs drained",
            restart.gateways_ms.map_or("-".into(), |x| format!("{x:.0}")),
            restart.drained,
            restart.kept
        );
        anyhow::Ok((rest, per_queue, lat, kill, restart))
    }
    .await;
    let (rest, per_queue, lat, kill, restart) = measured.map_err(|e| Short {
        reached: gateways.entities(),
        why: format!("measuring the level: {e:#}"),
    })?;
    Ok(Level {
        entities: gateways.entities(),
        gateways: gateways.entity_gateways(),
        registered,
        register_s,
        declare_ms_per_inbox: 1e3 * register_s / registered.max(1) as f64,
        declare_per_s: registered as f64 / register_s.max(1e-9),
        at_rest: rest,
        per_queue,
        latency: Some(lat),
        kill: Some(kill),
        restart: Some(restart),
        level_s: started.elapsed().as_secs_f64(),
    })
}
