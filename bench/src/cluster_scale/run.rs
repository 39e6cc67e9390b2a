//! `--scale`'s driver: starts the cluster, the latency pair's two gateways, reads the idle
//! cluster, then runs the levels in order until the last or until the machine cannot hold the
//! next — a refusal, memory low or predicted short, a declare rate collapsed, a level's time
//! budget, a cluster that did not come back — keeping every level measured. After each level the
//! result so far is written beside the report (`cluster-scale.partial.json`), so a run cut short
//! keeps its figures.
//!
//! Why a module: when to go on is the run's question; what a level does is
//! [`crate::cluster_scale::level`]'s.

use std::path::Path;

use anyhow::{Context as _, bail};

use crate::cluster_scale::broker_view::{BrokerView, available_mib};
use crate::cluster_scale::gateways::Gateways;
use crate::cluster_scale::latency;
use crate::cluster_scale::level::{self, On};
use crate::cluster_scale::settings::{ClusterScaleResult, ScaleClusterSettings, Stopped};
use crate::paths::forward_pull::{self as paths, SENDER_HOST, WORKER_HOST};
use crate::rig::BrokerInfo;
use fleet_conformance::broker::{Broker, BrokerSpec, LargeFleet};

/// Runs the section on its own cluster (started and stopped here); `partial` is where the result
/// so far is written after each level.
pub async fn run(
    s: &ScaleClusterSettings,
    gateway_cmd: &str,
    work: &Path,
    keep: bool,
    partial: &Path,
) -> anyhow::Result<ClusterScaleResult> {
    if s.rabbitmq_sampling {
        // Figures that size a real cluster: the broker's own statistics intervals, the tick asked
        // for, and a restart deadline a node recovering thousands of queues can meet.
        fleet_conformance::broker::run_as_large_fleet(LargeFleet {
            quorum_tick_ms: s.quorum_tick_ms,
            restart_boot: s.restart_boot,
            ..LargeFleet::default()
        })
        .map_err(|e| anyhow::anyhow!(e))?;
    }
    let spec = BrokerSpec::parse(&s.broker)?;
    eprintln!("fleet-bench: scale: starting broker {} …", spec.label());
    let broker = Broker::start(&spec)
        .await
        .with_context(|| format!("starting broker {}", spec.label()))?;
    if !broker.is_cluster() {
        let _ = broker.stop().await;
        bail!(
            "--scale-broker {} is a single node: name a cluster (process:rabbitmq-cluster, container:rabbitmq-cluster)",
            s.broker
        );
    }
    // The vhost is the broker's alone: the whole-cluster restart needs it so.
    let vhost = broker.create_exclusive_vhost().await?;
    let dir = work.join("scale");
    let mut gateways = Gateways::new(&broker, &vhost, &dir, gateway_cmd, s);
    let outcome = levels(&broker, &vhost, &mut gateways, s, partial).await;
    gateways.fleet.shutdown().await;
    if let Err(e) = broker.ensure_whole().await {
        eprintln!("fleet-bench: scale: the cluster is not whole at the end: {e}");
    }
    let _ = broker.delete_vhost(&vhost).await;
    let label = broker.spec().label();
    if let Err(e) = broker.stop().await {
        eprintln!("fleet-bench: scale: could not stop the broker {label}: {e}");
    }
    if outcome.is_ok() && !keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("fleet-bench: scale: gateway logs kept in {}", dir.display());
    }
    outcome
}

/// How the nodes sample, in words.
fn sampling(s: &ScaleClusterSettings) -> String {
    if s.rabbitmq_sampling {
        format!(
            "RabbitMQ's defaults: queue statistics every 5 s, default retention; quorum tick {} ms{} (the \
             management API's leaders lag up to one tick)",
            s.quorum_tick_ms,
            if s.quorum_tick_ms == 5_000 {
                ", the default"
            } else {
                ", not the default 5000"
            }
        )
    } else {
        "the suite's: quorum tick 1 s, queue statistics 0.5 s, 1 s samples kept 605 s".to_string()
    }
}

/// Writes `r` to `partial` (a failure to write is said, not fatal).
fn write_partial(partial: &Path, r: &ClusterScaleResult) {
    let written = serde_json::to_vec_pretty(r)
        .map_err(anyhow::Error::from)
        .and_then(|bytes| {
            if let Some(d) = partial.parent() {
                std::fs::create_dir_all(d)?;
            }
            std::fs::write(partial, bytes)?;
            Ok(())
        });
    if let Err(e) = written {
        eprintln!("fleet-bench: scale: could not write {}: {e:#}", partial.display());
    }
}

/// Why the next level should not be tried, predicted from the measured per-queue memory: the
/// queues it adds would take the machine under `min_free_mib`.
pub(crate) fn predicted_short(r: &ClusterScaleResult, next: usize, min_free_mib: u64) -> Option<String> {
    let last = r.levels.last()?;
    let per_entity = last.per_queue.mem_bytes * last.per_queue.queues as f64 / last.entities.max(1) as f64;
    let more = next.saturating_sub(last.entities) as f64 * per_entity / 1048576.0;
    let free = last.at_rest.machine_available_mib? as f64;
    (free - more < min_free_mib as f64).then(|| {
        format!(
            "predicted from the measured {:.0} KiB of broker memory per entity: {next} entities need ≈ {more:.0} MiB \
             more, {free:.0} MiB available, floor {min_free_mib} MiB",
            per_entity / 1024.0
        )
    })
}

async fn levels(
    broker: &Broker,
    vhost: &str,
    gateways: &mut Gateways,
    s: &ScaleClusterSettings,
    partial: &Path,
) -> anyhow::Result<ClusterScaleResult> {
    let view = BrokerView::of(broker, s.queue_type)?;
    let names = view.names().await.context("the nodes' names")?;
    let on = On {
        broker,
        view: &view,
        vhost,
        names: &names,
    };
    gateways.start(SENDER_HOST).await?;
    gateways.start(WORKER_HOST).await?;
    let pair = paths::pairs(&gateways.fleet, 1)
        .await?
        .into_iter()
        .next()
        .context("no latency pair")?;
    let idle = level::at_rest(&on, gateways, 0, level::rest_window(s)).await?;
    eprintln!(
        "fleet-bench: scale: idle cluster: {} inbox-type queues, {:.1} MiB broker memory; latency …",
        idle.quorum_queues,
        idle.mem_used() as f64 / 1048576.0
    );
    let idle_latency = Some(latency::measure(&pair, s.latency_samples).await?);
    let mut r = ClusterScaleResult {
        broker: BrokerInfo {
            spec: broker.spec().label(),
            version: broker.version().to_string(),
        },
        nodes: broker.node_count(),
        requested: s.levels.clone(),
        per_gateway: s.per_gateway,
        concurrency: s.concurrency,
        heartbeat_ms: s.heartbeat_ms,
        amqp_heartbeat_s: s.amqp_heartbeat_s,
        disk_source: view.disk_source().to_string(),
        sampling: sampling(s),
        queue_type: s.queue_type,
        mains_per_gateway: s.mains_per_gateway,
        idle,
        idle_latency,
        levels: Vec::new(),
        stopped: None,
    };
    write_partial(partial, &r);
    for &level in &s.levels {
        let alarm = r.levels.last().and_then(|l| {
            l.at_rest
                .nodes
                .iter()
                .find(|n| n.mem_alarm)
                .map(|n| format!("node {} raised its memory alarm", n.name))
        });
        let low = available_mib().filter(|&f| f < s.min_free_mib).map(|f| {
            format!(
                "the machine's available memory is {f} MiB (floor {} MiB)",
                s.min_free_mib
            )
        });
        if let Some(why) = alarm.or(low).or_else(|| predicted_short(&r, level, s.min_free_mib)) {
            eprintln!("fleet-bench: scale: not trying level {level}: {why}");
            r.stopped = Some(Stopped {
                level,
                reached: gateways.entities(),
                why,
                at_reached: None,
            });
            break;
        }
        match level::run(&on, gateways, &pair, &r.idle, level, s).await {
            Ok(l) => {
                let lost = l
                    .restart
                    .as_ref()
                    .filter(|x| x.broker_back_ms.is_none())
                    .and_then(|x| x.not_recovered.clone())
                    .or_else(|| {
                        l.kill
                            .as_ref()
                            .filter(|k| k.node_back_ms.is_none())
                            .and_then(|k| k.not_recovered.clone())
                    });
                r.levels.push(l);
                write_partial(partial, &r);
                if let Some(why) = lost {
                    let next = s.levels.iter().copied().find(|&x| x > level).unwrap_or(level);
                    r.stopped = Some(Stopped {
                        level: next,
                        reached: gateways.entities(),
                        why,
                        at_reached: None,
                    });
                    break;
                }
            }
            Err(short) => {
                eprintln!("fleet-bench: scale: level {level} stopped: {}", short.why);
                let measured = r.levels.last().map_or(0, |l| l.entities);
                // What the machine held where it stopped, when that is more than the last level.
                let at_reached = if gateways.entities() > measured {
                    match level::at_rest(&on, gateways, gateways.entities(), level::rest_window(s)).await {
                        Ok(rest) => Some(rest),
                        Err(e) => {
                            eprintln!(
                                "fleet-bench: scale: the cluster at {} entities could not be read: {e:#}",
                                gateways.entities()
                            );
                            None
                        }
                    }
                } else {
                    None
                };
                r.stopped = Some(Stopped {
                    level,
                    reached: short.reached,
                    why: short.why,
                    at_reached,
                });
                write_partial(partial, &r);
                break;
            }
        }
    }
    Ok(r)
}
