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
use crate::cluster_scale::settings::{AtRest, Level, PerQueue, RestCpu, ScaleClusterSettings};
use crate::cluster_scale::{full_restart, latency, node_kill};
use crate::paths::forward_pull::Pair;
use crate::rig::stats::{self, CpuProbe};
use fleet_conformance::broker::Broker;

/// What a level needs from the run: the broker, its reader, the vhost, the nodes' names.
pub(crate) struct On<'a> {
    pub broker: &'a Broker,
    pub view: &'a BrokerView,
    pub vhost: &'a str,
    pub names: &'a [String],
}

/// The cluster at rest holding `entities`: CPU over `window` first, then every node's figures
/// and the quorum queues listed.
pub(crate) async fn at_rest(
    on: &On<'_>,
    gateways: &Gateways,
    entities: usize,
    window: Duration,
) -> anyhow::Result<AtRest> {
    let cpu = rest_cpu(gateways, window).await;
    let queues = on.view.quorum_queues(on.vhost).await?;
    let nodes = on.view.nodes(on.broker).await.context("reading the nodes")?;
    Ok(AtRest {
        entities,
        quorum_queues: queues.len(),
        nodes,
        machine_available_mib: available_mib(),
        cpu: Some(cpu),
    })
}

/// The brokers' (process provider) and the gateways' CPU over `window`, nothing but presence
/// flowing.
async fn rest_cpu(gateways: &Gateways, window: Duration) -> RestCpu {
    let mut probe = stats::with_brokers(CpuProbe::default());
    for h in gateways.hosts() {
        let pid = gateways.fleet.hosts.get(&h).and_then(|x| x.gateway.pid());
        probe = probe.with(&format!("gateway-{h}"), pid);
    }
    let before = probe.snapshot();
    tokio::time::sleep(window).await;
    let spent = before.until(&probe.snapshot());
    let pct = |seconds: f64| 100.0 * seconds / spent.wall_s.max(1e-9);
    let gateways_s: f64 = spent
        .seconds
        .iter()
        .filter(|(k, _)| k.starts_with("gateway-"))
        .map(|(_, v)| *v)
        .sum();
    RestCpu {
        window_s: spent.wall_s,
        broker_pct: stats::broker_seconds(&spent).map(pct),
        gateways_pct: pct(gateways_s),
        machine_pct: 100.0 * spent.machine_busy(),
    }
}

/// The window CPU at rest is measured over: a heartbeat, at least 10 s.
pub(crate) fn rest_window(s: &ScaleClusterSettings) -> Duration {
    Duration::from_millis(s.heartbeat_ms.max(10_000))
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
            anyhow::bail!(
                "the management API listed {n} inbox-type queues, {at_least} expected, after {} s",
                wait.as_secs()
            );
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
    let gw: &Gateways = gateways;
    let measured = async {
        // Every inbox listed, then CPU at rest over a window before the figures are read.
        listed(on, gw.entities(), s.recovery_wait).await?;
        let rest = at_rest(on, gw, gw.entities(), rest_window(s)).await?;
        let per_queue = PerQueue::of(idle, &rest);
        eprintln!(
            "fleet-bench: scale: level {level}: {} inbox-type queues, {:.1} MiB broker memory ({:.0} KiB per queue added)",
            rest.quorum_queues,
            rest.mem_used() as f64 / 1048576.0,
            per_queue.mem_bytes / 1024.0
        );
        let lat = latency::measure(pair, s.latency_samples)
            .await
            .context("the latency pair")?;
        let hosts = gw.hosts();
        let kill = node_kill::run(
            on.broker,
            on.view,
            on.vhost,
            on.names,
            &gw.fleet,
            &hosts,
            s.recovery_wait,
            s.rebalance && !s.queue_type.has_classic(),
            classic_window(s),
            &pair.main_mcp.handle(),
        )
        .await
        .context("the node kill")?;
        eprintln!(
            "fleet-bench: scale: level {level}: node kill → leaders {} ms, gateways {} ms",
            kill.leaders_ms.map_or("-".into(), |x| format!("{x:.0}")),
            kill.gateways_ms.map_or("-".into(), |x| format!("{x:.0}"))
        );
        if kill.node_back_ms.is_none() {
            // The killed node did not come back: no whole-cluster restart on a broken cluster.
            return anyhow::Ok((rest, per_queue, lat, kill, None));
        }
        let tag = format!("L{level}");
        let restart = full_restart::run(
            on.broker,
            on.view,
            on.vhost,
            &gw.fleet,
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
        anyhow::Ok((rest, per_queue, lat, kill, Some(restart)))
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
        restart,
        level_s: started.elapsed().as_secs_f64(),
    })
}

/// Classic inboxes: how long the node kill is watched before the node is started again — twice
/// CLU-5(c)'s bound (2H plus two AMQP heartbeats), long enough to see what comes back without the
/// node and what does not. `None` for quorum inboxes (watched until they recover).
fn classic_window(s: &ScaleClusterSettings) -> Option<Duration> {
    s.queue_type
        .has_classic()
        .then(|| 2 * (2 * Duration::from_millis(s.heartbeat_ms) + 2 * Duration::from_secs(s.amqp_heartbeat_s)))
}
