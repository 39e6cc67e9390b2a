//! `--cluster` as text: each side's figures, the costs, and the kills beside their bound.
//!
//! Why a module: the section's lines grew with every side and kill figure; they print
//! [`crate::cluster::result`]'s types and nothing else, apart from the runs that fill them.

use std::collections::BTreeMap;

use crate::cluster::result::{ClusterResult, KillToReady, Phase};
use crate::rig::stats::Latency;

fn num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn opt_ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

fn lat(l: &Latency) -> String {
    if l.n == 0 {
        "-".into()
    } else {
        format!("{} / {}", num(l.p50_ms), num(l.p99_ms))
    }
}

/// The section as text: one column per side, then the costs, then the kills.
pub fn lines(r: &ClusterResult) -> Vec<String> {
    let mut out = vec![format!(
        "cluster profile (SPEC §16): replication's cost · H = {} ms, AMQP heartbeat {} s · gateways on every \
         node's URL; echo queues of the side's type",
        r.heartbeat_ms, r.amqp_heartbeat_s
    )];
    let w = 24;
    let mut row = |name: &str, cells: Vec<String>| {
        let cells: String = cells.iter().map(|c| format!(" {c:>w$}")).collect();
        out.push(format!("  {name:<38}{cells}"));
    };
    let sides = &r.sides;
    row("", sides.iter().map(|s| s.label.clone()).collect());
    row(
        "raw envelope echo round trips/s",
        sides
            .iter()
            .map(|s| {
                format!(
                    "{} ({}, {})",
                    num(s.figures.echo_round_trips_per_s),
                    num(s.echo.round_trips_per_s),
                    num(s.echo_after.round_trips_per_s)
                )
            })
            .collect(),
    );
    row(
        "  1 flow round trip p50 ms",
        sides.iter().map(|s| num(s.figures.echo_p50_ms)).collect(),
    );
    row(
        "forward briefs/s",
        sides.iter().map(|s| num(s.forward.briefs_per_s)).collect(),
    );
    row(
        "  ÷ raw envelope echo",
        sides
            .iter()
            .map(|s| format!("{}×", num(s.figures.forward_to_echo)))
            .collect(),
    );
    row(
        "  SEND→INJECTED 1 sender p50/p99 ms",
        sides.iter().map(|s| lat(&s.forward.latency)).collect(),
    );
    row(
        "  under load p50/p99 ms",
        sides.iter().map(|s| lat(&s.forward.loaded_latency)).collect(),
    );
    row(
        "pull replies/s",
        sides.iter().map(|s| num(s.pull.replies_per_s)).collect(),
    );
    row(
        "  ÷ raw envelope echo",
        sides
            .iter()
            .map(|s| format!("{}×", num(s.figures.pull_to_echo)))
            .collect(),
    );
    row(
        "  reply→bridge_wait 1 flow p50/p99 ms",
        sides.iter().map(|s| lat(&s.pull.latency)).collect(),
    );
    row(
        "broker CPU ms per echo / brief / reply",
        sides
            .iter()
            .map(|s| {
                let f = &s.figures;
                format!(
                    "{} / {} / {}",
                    opt_ms(f.broker_cpu_ms_per_echo),
                    opt_ms(f.broker_cpu_ms_per_brief),
                    opt_ms(f.broker_cpu_ms_per_reply)
                )
            })
            .collect(),
    );
    let fails: Vec<String> = sides
        .iter()
        .filter(|s| s.forward.failures > 0 || s.pull.lost > 0)
        .map(|s| {
            format!(
                "{}: {} forward failures (first: {}), {} pull drainers gave up",
                s.label,
                s.forward.failures,
                s.forward.first_failure.as_deref().unwrap_or("-"),
                s.pull.lost
            )
        })
        .collect();
    for f in fails {
        out.push(format!("  !!! {f}"));
    }
    for c in &r.costs {
        out.push(format!(
            "  {} ÷ {}: echo {}× · forward {}× · pull {}× (rates); 1-flow p50 echo {}× · forward {}× · pull {}×",
            c.of,
            c.over,
            num(c.echo_rate),
            num(c.forward_rate),
            num(c.pull_rate),
            num(c.echo_p50),
            num(c.forward_p50),
            num(c.pull_p50)
        ));
    }
    if let Some(k) = &r.kill_to_ready {
        out.extend(kill_lines(k));
    }
    out
}

fn kill_lines(k: &KillToReady) -> Vec<String> {
    let ms = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.0} ms"));
    let ready = k.kills.iter().filter(|x| x.ready_ms.is_some()).count();
    let mut out = vec![format!(
        "  kill-to-ready (CLU-5(c)), {} kills ({} ready in time): median {} · worst {} · bound 2H + 2 AMQP \
         heartbeats = {} ms",
        k.kills.len(),
        ready,
        ms(k.median_ms),
        ms(k.worst_ms),
        k.bound_ms
    )];
    let each: Vec<String> = k
        .kills
        .iter()
        .map(|x| {
            format!(
                "n{}({}){}",
                x.node,
                x.hosts_on_node.join("+"),
                x.ready_ms.map_or_else(|| " NOT READY".into(), |v| format!(" {v:.0}"))
            )
        })
        .collect();
    out.push(format!("    each (node(hosts on it) ms): {}", each.join(" · ")));
    let restarts: Vec<f64> = k.kills.iter().map(|x| x.restart_ms).collect();
    if !restarts.is_empty() {
        let mean = restarts.iter().sum::<f64>() / restarts.len() as f64;
        out.push(format!(
            "    node killed → others see it down: {} ms max; start_node + ensure_whole: {:.1} s mean",
            k.kills.iter().map(|x| x.kill_seen_ms).fold(0.0, f64::max).round(),
            mean / 1e3
        ));
    }
    let slowest = k
        .kills
        .iter()
        .filter(|x| x.ready_ms.is_some())
        .max_by(|a, b| a.ready_ms.unwrap_or(0.0).total_cmp(&b.ready_ms.unwrap_or(0.0)));
    if let Some(x) = slowest {
        out.push(format!(
            "    slowest, node {} ({:.0} ms), states from the kill (ms): {}",
            x.node,
            x.ready_ms.unwrap_or(f64::NAN),
            phases_text(&x.phases)
        ));
    }
    for x in k.kills.iter().filter(|x| x.not_ready.is_some()) {
        out.push(format!(
            "  !!! node {} killed: not ready within {:.0} ms: {}; states: {}",
            x.node,
            k.wait_ms,
            x.not_ready.as_deref().unwrap_or("-"),
            phases_text(&x.phases)
        ));
    }
    out
}

/// `a: /readyz 200 on [1] @0 → ready on [2] @803; b: …`
fn phases_text(phases: &BTreeMap<String, Vec<Phase>>) -> String {
    phases
        .iter()
        .map(|(host, ps)| {
            let steps: Vec<String> = ps.iter().map(|p| format!("{} @{:.0}", p.state, p.at_ms)).collect();
            format!("{host}: {}", steps.join(" → "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}
