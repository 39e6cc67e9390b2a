//! `--scale` as text: one column for the idle cluster and one per level measured — memory,
//! processes and disk per node and per queue, declare time, latency, the node kill, the full
//! restart — then why the run stopped, and what the measured levels extrapolate to (labelled).
//!
//! Why a module: the section's lines print [`crate::cluster_scale::settings`]'s types and nothing
//! else; the extrapolation is arithmetic on measured levels, kept beside the lines that show it.

use crate::cluster_scale::settings::{AtRest, ClusterScaleResult, Latencies, Leaders, Level, balanced};

const MIB: f64 = 1048576.0;

fn ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.0}"))
}

fn leaders(l: &Leaders) -> String {
    let per: Vec<String> = l.per_node.iter().map(|n| n.to_string()).collect();
    if l.none > 0 {
        format!("{} (+{} none)", per.join("/"), l.none)
    } else {
        per.join("/")
    }
}

fn per_node(rest: &AtRest, f: impl Fn(&crate::cluster_scale::settings::NodeFigures) -> String) -> String {
    rest.nodes.iter().map(f).collect::<Vec<_>>().join(" / ")
}

fn lat(l: Option<&Latencies>) -> (String, String) {
    match l {
        Some(l) if l.send_injected.n > 0 => (
            format!("{:.2}", l.send_injected.p50_ms),
            format!("{:.2}", l.reply.p50_ms),
        ),
        _ => ("-".into(), "-".into()),
    }
}

/// A straight line through the two largest measured levels, evaluated at `x` (`None` with fewer
/// than two levels, equal entity counts, or a line that falls under zero there).
pub fn extrapolate(levels: &[Level], x: f64, y: impl Fn(&Level) -> Option<f64>) -> Option<f64> {
    let mut pts: Vec<(f64, f64)> = levels.iter().filter_map(|l| Some((l.entities as f64, y(l)?))).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let &[.., (x1, y1), (x2, y2)] = pts.as_slice() else {
        return None;
    };
    if (x2 - x1).abs() < f64::EPSILON {
        return None;
    }
    // A line through two noisy points can fall under zero: no figure then.
    Some(y1 + (y2 - y1) * (x - x1) / (x2 - x1)).filter(|y| *y >= 0.0)
}

/// The section as text.
pub fn lines(r: &ClusterScaleResult) -> Vec<String> {
    let mut out = vec![format!(
        "cluster at full size (issue 47): {} · {} nodes · {} inboxes, {} main(s) and ≤ {} entities per gateway, {} \
         registrations in flight · H = {} ms, AMQP heartbeat {} s",
        r.broker.spec,
        r.nodes,
        r.queue_type.as_str(),
        r.mains_per_gateway.max(1),
        r.per_gateway,
        r.concurrency,
        r.heartbeat_ms,
        r.amqp_heartbeat_s
    )];
    out.push(format!(
        "  {} · disk: {} · memory: management API mem_used and the node's own breakdown · sampling: {}",
        r.broker.version, r.disk_source, r.sampling
    ));
    let w = 22;
    let mut row = |name: &str, cells: Vec<String>| {
        let cells: String = cells.iter().map(|c| format!(" {c:>w$}")).collect();
        out.push(format!("  {name:<40}{cells}"));
    };
    let rests: Vec<&AtRest> = std::iter::once(&r.idle)
        .chain(r.levels.iter().map(|l| &l.at_rest))
        .collect();
    let levels: Vec<Option<&Level>> = std::iter::once(None).chain(r.levels.iter().map(Some)).collect();
    let cells = |f: &dyn Fn(&AtRest, Option<&Level>) -> String| -> Vec<String> {
        rests.iter().zip(&levels).map(|(a, l)| f(a, *l)).collect()
    };
    row(
        "",
        cells(&|a, l| match l {
            None => "idle".into(),
            Some(_) => format!("{} entities", a.entities),
        }),
    );
    row(
        "gateways (entity) · inbox-type queues",
        cells(&|a, l| format!("{} · {}", l.map_or(0, |l| l.gateways), a.quorum_queues)),
    );
    row(
        "declare ms per inbox (inboxes/s)",
        cells(&|_, l| match l {
            Some(l) => format!("{:.1} ({:.0}/s)", l.declare_ms_per_inbox, l.declare_per_s),
            None => "-".into(),
        }),
    );
    row(
        "broker memory per node, MiB",
        cells(&|a, _| per_node(a, |n| format!("{:.0}", n.mem_used as f64 / MIB))),
    );
    row(
        "  memory watermark per node, MiB",
        cells(&|a, _| {
            per_node(a, |n| {
                format!("{:.0}{}", n.mem_limit as f64 / MIB, if n.mem_alarm { "!" } else { "" })
            })
        }),
    );
    row(
        "  node RSS, MiB",
        cells(&|a, _| {
            per_node(a, |n| {
                n.rss_kib.map_or("-".into(), |k| format!("{:.0}", k as f64 / 1024.0))
            })
        }),
    );
    for (label, cat) in [
        ("  quorum_queue_procs (all nodes), MiB", "quorum_queue_procs"),
        ("  quorum_ets (all nodes), MiB", "quorum_ets"),
        ("  binary (all nodes), MiB", "binary"),
        ("  other_proc (all nodes), MiB", "other_proc"),
        ("  mgmt_db + metrics (all nodes), MiB", "mgmt_db"),
        ("  allocated_unused (all nodes), MiB", "allocated_unused"),
    ] {
        row(
            label,
            cells(&|a, _| {
                let mut b = a.category(cat);
                if cat == "mgmt_db" {
                    b += a.category("metrics");
                }
                format!("{:.0}", b as f64 / MIB)
            }),
        );
    }
    row(
        "memory per quorum queue added, KiB",
        cells(&|_, l| match l {
            Some(l) => format!(
                "{:.0} ({:.0}/node)",
                l.per_queue.mem_bytes / 1024.0,
                l.per_queue.mem_bytes_per_node / 1024.0
            ),
            None => "-".into(),
        }),
    );
    row(
        "Erlang processes per node",
        cells(&|a, _| per_node(a, |n| n.proc_used.to_string())),
    );
    row(
        "  per quorum queue added (all nodes)",
        cells(&|_, l| match l {
            Some(l) => format!("{:.1}", l.per_queue.procs),
            None => "-".into(),
        }),
    );
    row(
        "data dir per node, MiB",
        cells(&|a, _| {
            per_node(a, |n| {
                n.disk_bytes.map_or("-".into(), |b| format!("{:.0}", b as f64 / MIB))
            })
        }),
    );
    row(
        "  disk per quorum queue added, KiB",
        cells(&|_, l| {
            l.and_then(|l| l.per_queue.disk_bytes)
                .map_or("-".into(), |b| format!("{:.1}", b / 1024.0))
        }),
    );
    row(
        "CPU at rest: brokers · gateways, % core",
        cells(&|a, _| match &a.cpu {
            Some(c) => format!(
                "{} · {:.0}",
                c.broker_pct.map_or("-".into(), |b| format!("{b:.0}")),
                c.gateways_pct
            ),
            None => "-".into(),
        }),
    );
    row(
        "  machine busy, % of all cores",
        cells(&|a, _| a.cpu.as_ref().map_or("-".into(), |c| format!("{:.0}", c.machine_pct))),
    );
    row(
        "machine memory available, MiB",
        cells(&|a, _| a.machine_available_mib.map_or("-".into(), |m| m.to_string())),
    );
    let idle_lat = lat(r.idle_latency.as_ref());
    let lats: Vec<(String, String)> = std::iter::once(idle_lat)
        .chain(r.levels.iter().map(|l| lat(l.latency.as_ref())))
        .collect();
    row("SEND→INJECTED p50, ms", lats.iter().map(|l| l.0.clone()).collect());
    row(
        "REPLY → bridge_wait p50, ms",
        lats.iter().map(|l| l.1.clone()).collect(),
    );
    let kill = |f: &dyn Fn(&crate::cluster_scale::settings::NodeKill) -> String| -> Vec<String> {
        levels
            .iter()
            .map(|l| l.and_then(|l| l.kill.as_ref()).map_or("-".into(), f))
            .collect()
    };
    row(
        "node kill: node · leaders before",
        kill(&|k| format!("{} · {}", k.node, leaders(&k.leaders_before))),
    );
    row(
        "  kill seen by the others, ms",
        kill(&|k| format!("{:.0}", k.kill_seen_ms)),
    );
    row("  every queue led again, ms", kill(&|k| ms(k.leaders_ms)));
    row("  every gateway ready again, ms", kill(&|k| ms(k.gateways_ms)));
    row("  leaders after the kill", kill(&|k| leaders(&k.leaders_after_kill)));
    row("  node back in the cluster, ms", kill(&|k| ms(k.node_back_ms)));
    row("  every member online again, ms", kill(&|k| ms(k.members_back_ms)));
    if r.queue_type.has_classic() {
        row(
            "  classic inboxes down (home node dead)",
            kill(&|k| k.inboxes_down.map_or("-".into(), |n| n.to_string())),
        );
        row("  start → every inbox available, ms", kill(&|k| ms(k.inboxes_back_ms)));
        row(
            "  start → every gateway ready, ms",
            kill(&|k| ms(k.gateways_after_return_ms)),
        );
    }
    row("  leaders once it is back", kill(&|k| leaders(&k.leaders_after_return)));
    row(
        "  rebalance needed (unbalanced once back)",
        kill(&|k| if balanced(&k.leaders_after_return) { "no" } else { "yes" }.to_string()),
    );
    row(
        "  rebalance → balanced, ms",
        kill(&|k| k.rebalance.as_ref().map_or("not run".into(), |b| ms(b.balanced_ms))),
    );
    row(
        "  leaders after the rebalance",
        kill(&|k| k.rebalance.as_ref().map_or("-".into(), |b| leaders(&b.leaders_after))),
    );
    let restart = |f: &dyn Fn(&crate::cluster_scale::settings::FullRestart) -> String| -> Vec<String> {
        levels
            .iter()
            .map(|l| l.and_then(|l| l.restart.as_ref()).map_or("-".into(), f))
            .collect()
    };
    row(
        "full restart: stop every node, ms",
        restart(&|x| format!("{:.0}", x.halt_ms)),
    );
    row("  start → cluster answers, ms", restart(&|x| ms(x.broker_back_ms)));
    row("  start → every queue led, ms", restart(&|x| ms(x.leaders_ms)));
    row(
        "  start → gateways ready (1st look), ms",
        restart(&|x| ms(x.gateways_ms)),
    );
    row(
        "  kept REPLYs: confirmed → drained (dup)",
        restart(&|x| match x.dead_lettered {
            Some(d) => {
                let why: Vec<String> = x.dead_lettered_why.iter().map(|(c, n)| format!("{n} {c}")).collect();
                let left = x
                    .inbox_left
                    .map(|(r, u)| format!("; inbox {r} ready, {u} unacked"))
                    .unwrap_or_default();
                format!(
                    "{} → {} ({}; {d} in bridge.dlq: {}{left})",
                    x.kept,
                    x.drained,
                    x.duplicates,
                    why.join(", ")
                )
            }
            None => format!("{} → {} ({})", x.kept, x.drained, x.duplicates),
        }),
    );
    row(
        "level wall time, s",
        cells(&|_, l| l.map_or("-".into(), |l| format!("{:.0}", l.level_s))),
    );
    for l in &r.levels {
        let notes: Vec<String> = [
            l.kill
                .as_ref()
                .and_then(|k| k.not_recovered.clone())
                .map(|n| format!("node kill: {n}")),
            l.kill
                .as_ref()
                .and_then(|k| k.down_send.clone())
                .map(|n| format!("node kill: a brief to an entity whose classic inbox was down: {n}")),
            l.kill
                .as_ref()
                .and_then(|k| k.rebalance.as_ref())
                .and_then(|b| b.note.clone())
                .map(|n| format!("rebalance: {n}")),
            l.restart
                .as_ref()
                .and_then(|x| x.not_recovered.clone())
                .map(|n| format!("full restart: {n}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        for n in notes {
            out.push(format!("  ! level {}: {n}", l.entities));
        }
    }
    match &r.stopped {
        Some(s) => {
            out.push(format!(
                "  stopped before level {} at {} entities: {}",
                s.level, s.reached, s.why
            ));
            if let Some(a) = &s.at_reached {
                out.push(format!(
                    "  where it stopped ({} entities, {} queues of the inbox type): broker memory {:.0} MiB (all nodes), \
                     CPU at rest: brokers {} · gateways {}, % of one core",
                    a.entities,
                    a.quorum_queues,
                    a.mem_used() as f64 / MIB,
                    a.cpu.as_ref().and_then(|c| c.broker_pct).map_or("-".into(), |b| format!("{b:.0}")),
                    a.cpu.as_ref().map_or("-".into(), |c| format!("{:.0}", c.gateways_pct)),
                ));
            }
        }
        None => out.push(format!("  every level asked for was measured ({:?})", r.requested)),
    }
    if let Some(top) = r.levels.iter().max_by_key(|l| l.entities) {
        let per_k = |x: Option<f64>| ms(x.map(|x| 1_000.0 * x / top.entities.max(1) as f64));
        let kill_ready = top.kill.as_ref().and_then(|k| Some(k.gateways_ms?.max(k.leaders_ms?)));
        out.push(format!(
            "  per 1,000 entities at {} (measured ÷ entities): broker memory {:.0} MiB over the idle cluster, node kill \
             → every queue led and gateway ready {} ms, full restart → gateways ready {} ms",
            top.entities,
            top.per_queue.mem_bytes * top.per_queue.queues as f64 / top.entities.max(1) as f64 * 1_000.0 / MIB,
            per_k(kill_ready),
            per_k(top.restart.as_ref().and_then(|x| x.gateways_ms)),
        ));
    }
    if r.levels.len() >= 2 {
        let mem = |l: &Level| Some(l.at_rest.mem_used() as f64 / MIB);
        let kill = |l: &Level| {
            let k = l.kill.as_ref()?;
            Some(k.gateways_ms?.max(k.leaders_ms?))
        };
        let full = |l: &Level| l.restart.as_ref()?.gateways_ms;
        for x in [10_000.0, 20_000.0] {
            if r.levels.iter().any(|l| l.entities as f64 >= x) {
                continue;
            }
            out.push(format!(
                "  extrapolated (NOT measured; a line through the two largest levels) to {x:.0} entities: broker memory \
                 ≈ {} MiB (all nodes), node kill → ready ≈ {} ms, full restart → gateways ready ≈ {} ms",
                extrapolate(&r.levels, x, mem).map_or("-".into(), |v| format!("{v:.0}")),
                ms(extrapolate(&r.levels, x, kill)),
                ms(extrapolate(&r.levels, x, full)),
            ));
        }
    }
    out
}
