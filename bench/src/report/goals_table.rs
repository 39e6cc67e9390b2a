//! The goals block of the table: one line per goal, with its figure, value, bound and verdict.
//!
//! Why a module: [`crate::report::goals`] judges and [`crate::report::table`] prints the whole report; the goals
//! block grew with the floor-relative path goals (issue 36), whose lines also show what they are
//! relative to (a side's floor in ms, a path's ceiling), so it lives here, apart from the
//! sections' rows. The fleet's goal lines are `fleet_rows` (below).

use crate::fleet::restart::Restart;
use crate::fleet::sim_result::Form;
use crate::report::document::Report;
use crate::report::goals::{
    GOAL_CPU_TO_SIDE_FLOOR, GOAL_FLEET_CERTS_CPU_RATIO, GOAL_FLEET_ENTITIES, GOAL_FLEET_GATEWAY_CPU_PCT,
    GOAL_FLEET_HEARTBEAT_MS, GOAL_FLEET_HOSTS, GOAL_FORWARD_P50_OVER_FLOOR_MS, GOAL_FORWARD_TO_CEILING,
    GOAL_MIGRATION_REPLIES_PER_S, GOAL_PULL_TO_CEILING, GOAL_RSS_ENTITIES, GOAL_RSS_MIB, Goal, verdict,
};

/// One row of the goals block, in its columns.
fn row(name: &str, value: Option<String>, goal: &str, verdict: &str, note: &str) -> String {
    let value = value.unwrap_or_else(|| "-".into());
    format!("  {name:<57} {value:>14} {goal:>12}  {verdict}{note}")
}

/// A goal's value as a ratio, `1.23×`.
fn ratio(g: Option<&Goal>) -> Option<String> {
    g.map(|x| format!("{:.2}×", x.value))
}

/// The goals block: its header, the paths' goals, the footprint's, the migration's, the fleet's
/// and the cluster's.
pub fn lines(r: &Report) -> Vec<String> {
    let mut out = vec![format!(
        "goals (issues 16, 36, 46) {:<34} {:>14} {:>12}  verdict",
        "", "value", "goal"
    )];
    out.extend(path_rows(r));
    out.extend(footprint_rows(r));
    out.extend(fleet_rows(r));
    out.extend(cluster_rows(r));
    out
}

/// The forward and pull goals: each gateway's CPU against its side's floor, each path's
/// throughput against its ceiling, the 1-sender latency against the raw round trip.
fn path_rows(r: &Report) -> Vec<String> {
    let (g, s) = (&r.goals, &r.sections);
    let floor = s.cpu_floor.as_ref();
    // The pairs the paths ran with, or would have.
    let pairs = s.forward.as_ref().map_or(r.settings.paths.pairs, |f| f.result.senders);
    let workers = s.pull.as_ref().map_or(r.settings.paths.pairs, |p| p.result.workers);
    let mut out = Vec::new();
    let sides = [
        (
            "a (sender side)",
            "gateway_a",
            g.cpu_to_floor_gateway_a.as_ref(),
            floor.and_then(|f| f.side_a_ms()),
        ),
        (
            "b (worker side)",
            "gateway_b",
            g.cpu_to_floor_gateway_b.as_ref(),
            floor.and_then(|f| f.side_b_ms()),
        ),
    ];
    for (side, process, goal, side_floor) in sides {
        let spent = s.forward.as_ref().and_then(|f| f.result.cpu_ms_per_brief.get(process));
        let note = match (spent, side_floor) {
            (Some(ms), Some(fl)) => format!(" ({ms:.3} ms; floor {fl:.3} ms)"),
            (Some(ms), None) => format!(" ({ms:.3} ms; no floor: run the raw section)"),
            _ => String::new(),
        };
        out.push(row(
            &format!("gateway {side} CPU per brief ÷ its side's floor"),
            ratio(goal),
            &format!("≤ {GOAL_CPU_TO_SIDE_FLOOR}×"),
            verdict(goal),
            &note,
        ));
    }
    let ceiling_note = |figure: Option<f64>, ceiling: Option<f64>| match (figure, ceiling) {
        (Some(x), Some(c)) => format!(" ({x:.2}× the envelope echo; ceiling {c:.2}×)"),
        (Some(x), None) => format!(" ({x:.2}× the envelope echo; no ceiling)"),
        _ => String::new(),
    };
    let fwd = g.forward_to_ceiling.as_ref();
    out.push(row(
        &format!("forward briefs/s ({pairs} senders) ÷ envelope echo ÷ ceiling"),
        ratio(fwd),
        &format!("≥ {GOAL_FORWARD_TO_CEILING}×"),
        verdict(fwd),
        &ceiling_note(
            r.ratios.forward_briefs_to_raw_envelope_echo,
            floor.and_then(|f| f.throughput_ceiling),
        ),
    ));
    let pull = g.pull_to_ceiling.as_ref();
    out.push(row(
        &format!("pull replies/s ({workers} workers) ÷ envelope echo ÷ ceiling"),
        ratio(pull),
        &format!("≥ {GOAL_PULL_TO_CEILING}×"),
        verdict(pull),
        &ceiling_note(
            r.ratios.pull_replies_to_raw_envelope_echo,
            floor.and_then(|f| f.pull_ceiling),
        ),
    ));
    let p50 = g.forward_p50_ms.as_ref();
    out.push(row(
        "SEND→INJECTED p50 (1 sender) against its floor + 1 ms",
        p50.map(|x| format!("{:.2} ms", x.value)),
        &p50.map_or_else(
            || format!("≤ floor+{GOAL_FORWARD_P50_OVER_FLOOR_MS}"),
            |x| format!("≤ {:.2} ms", x.goal),
        ),
        verdict(p50),
        &p50_floor_note(r),
    ));
    out
}

/// What the latency goal's floor is made of, or why there is none.
fn p50_floor_note(r: &Report) -> String {
    if let Some(f) = &r.goals.forward_p50_floor {
        return format!(
            " (floor {:.2} ms = raw round trip p50 {:.2} + herdr sequence p50 {:.2}; {:+.2} ms over it)",
            f.floor_ms,
            f.raw_round_trip_p50_ms,
            f.herdr_sequence_p50_ms,
            r.sections
                .forward
                .as_ref()
                .map_or(f64::NAN, |fw| fw.result.latency.p50_ms - f.floor_ms)
        );
    }
    let measured = r.sections.latency_floor.as_ref();
    match (r.ratios.raw_round_trip_p50_ms_used, measured) {
        (_, Some(l)) if l.herdr_sequence.is_none() => format!(
            " (no floor: herdr sequence not measured: {})",
            l.not_measured.as_deref().unwrap_or("-")
        ),
        (None, _) if r.sections.forward.is_some() => " (no floor: run the raw section)".into(),
        _ => String::new(),
    }
}

/// RSS at 10,000 entities (or its labelled extrapolation), the heartbeat round, the migration.
fn footprint_rows(r: &Report) -> Vec<String> {
    let (g, s) = (&r.goals, &r.sections);
    let ms = |x: Option<&Goal>, digits: usize| x.map(|x| format!("{:.digits$} ms", x.value));
    let rss = g.rss_mib_at_10000_entities.as_ref();
    let extrapolated = g
        .rss_mib_at_10000_extrapolated
        .as_ref()
        .map(|x| {
            format!(
                " (extrapolated, linear from {} and {} entities: {:.0} MiB)",
                x.from_entities[0], x.from_entities[1], x.rss_mib
            )
        })
        .unwrap_or_default();
    let hb = g.heartbeat_round_ms.as_ref();
    let scale = s.scale.as_ref();
    let at = match (scale, scale.and_then(|s| s.largest())) {
        (Some(s), Some(p)) => format!("{} entities (H = {} ms)", p.entities, s.heartbeat_ms),
        _ => "the largest entity count".into(),
    };
    let mig = g.migration_replies_per_s.as_ref();
    let mut out = vec![row(
        &format!("RSS of one gateway with {GOAL_RSS_ENTITIES} entities"),
        rss.map(|x| format!("{:.1} MiB", x.value)),
        &format!("≤ {GOAL_RSS_MIB} MiB"),
        verdict(rss),
        &extrapolated,
    )];
    if let Some(s) = scale
        && let Some(x) = s.restart.as_ref()
    {
        out.push(restart_row(x));
        let all: Vec<&Restart> = std::iter::once(x).chain(&s.more_restarts).collect();
        out.extend(stop_rows(&all));
    }
    out.extend([
        row(
            &format!("heartbeat round at {at}"),
            ms(hb, 1),
            &hb.map(|x| format!("≤ {:.0} ms", x.goal))
                .unwrap_or_else(|| "≤ H/5".into()),
            verdict(hb),
            "",
        ),
        row(
            "migration move (registration → legacy queue gone)",
            mig.map(|x| format!("{:.0}/s", x.value)),
            &format!("≥ {GOAL_MIGRATION_REPLIES_PER_S}/s"),
            verdict(mig),
            "",
        ),
    ]);
    out
}

/// Beside the RSS goal, a figure without a bound: the scale run's gateway restarted holding its
/// entities, process start → ready (plus any re-registration), with what it is made of.
fn restart_row(x: &Restart) -> String {
    let s = |ms: f64| format!("{:.2} s", ms / 1e3);
    let mut note = format!(" ({}", x.what());
    if x.re_registered > 0 {
        note += &format!(
            ": ready {} + {} registered again {}",
            x.start_to_ready_ms.map_or("-".into(), s),
            x.re_registered,
            x.re_register_ms.map_or("-".into(), s)
        );
    }
    note += &format!(
        "; /readyz looked at every {} ms; SIGTERM → exit {}{}",
        x.poll_ms,
        s(x.stop_ms),
        if x.exited_cleanly { "" } else { " (not a clean exit)" }
    );
    if let Some(kib) = x.rss_kib {
        note += &format!("; RSS once ready {:.1} MiB", kib as f64 / 1024.0);
    }
    if let Some(why) = &x.not_ready {
        note += &format!("; NOT ready: {why}");
    }
    note.push(')');
    row(
        &format!("start-to-ready holding {} entities (SIGTERM, restart)", x.entities),
        x.figure_ms().map(s),
        "no bound",
        "reported",
        &note,
    )
}

/// SIGTERM → exit within CONTRACT §1's 10 s grace, and the RSS once ready again, both holding
/// the scale run's largest level (issue 58: goals at 10,000 entities; below that, reported only).
/// Over several restarts (`--restarts N`) the worst of each is judged and every figure shown.
fn stop_rows(all: &[&Restart]) -> Vec<String> {
    let Some(first) = all.first() else {
        return Vec::new();
    };
    let worst_stop = all.iter().map(|r| r.stop_ms).fold(0.0, f64::max);
    let worst = Restart {
        stop_ms: worst_stop,
        exited_cleanly: all.iter().all(|r| r.exited_cleanly),
        rss_kib: all.iter().filter_map(|r| r.rss_kib).max(),
        ..(*first).clone()
    };
    let mut rows = stop_rows_of(&worst);
    if all.len() > 1 {
        let each = |f: &dyn Fn(&Restart) -> Option<String>| {
            all.iter()
                .map(|r| f(r).unwrap_or_else(|| "-".into()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let stops = each(&|r| Some(format!("{:.2}", r.stop_ms / 1e3)));
        let rss = each(&|r| r.rss_kib.map(|k| format!("{:.1}", k as f64 / 1024.0)));
        if let Some(r) = rows.first_mut() {
            r.push_str(&format!(" (worst of {}: {stops} s)", all.len()));
        }
        if let Some(r) = rows.get_mut(1) {
            r.push_str(&format!(" (worst of {}: {rss} MiB)", all.len()));
        }
    }
    rows
}

fn stop_rows_of(x: &Restart) -> Vec<String> {
    let judged = x.entities >= GOAL_RSS_ENTITIES;
    let judge = |met: bool| match (judged, met) {
        (false, _) => "reported",
        (true, true) => "met",
        (true, false) => "MISSED",
    };
    let below = if judged {
        String::new()
    } else {
        format!(" (goal judged at {GOAL_RSS_ENTITIES} entities)")
    };
    let clean = if x.exited_cleanly { "" } else { " (not a clean exit)" };
    let mut rows = vec![row(
        &format!("SIGTERM → exit holding {} entities", x.entities),
        Some(format!("{:.2} s", x.stop_ms / 1e3)),
        &format!("≤ {:.0} s", GOAL_STOP_MS / 1e3),
        judge(x.stop_ms <= GOAL_STOP_MS && x.exited_cleanly),
        &format!("{clean}{below}"),
    )];
    if let Some(kib) = x.rss_kib {
        let mib = kib as f64 / 1024.0;
        rows.push(row(
            &format!("RSS after a restart holding {} entities", x.entities),
            Some(format!("{mib:.1} MiB")),
            &format!("≤ {GOAL_RSS_MIB} MiB"),
            judge(mib <= GOAL_RSS_MIB),
            &below,
        ));
    }
    rows
}

/// CONTRACT §1: SIGTERM → exit within the 10 s grace.
const GOAL_STOP_MS: f64 = 10_000.0;

/// The cluster section's goal line and its replication ratios (not goals: the price is the
/// broker's, printed to be read beside the gateway's share on each side).
fn cluster_rows(r: &Report) -> Vec<String> {
    let g = r.goals.cluster_kill_to_ready_worst_ms.as_ref();
    let k = r.sections.cluster.as_ref().and_then(|c| c.kill_to_ready.as_ref());
    let name = match k {
        Some(k) => format!(
            "kill-to-ready worst of {} node kills (H {} ms, AMQP hb {} s)",
            k.kills.len(),
            k.heartbeat_ms,
            k.amqp_heartbeat_s
        ),
        None => "kill-to-ready worst over node kills (--cluster)".into(),
    };
    let goal = g.map_or_else(|| "≤ 2H + 2 hb".into(), |x| format!("≤ {:.0} ms", x.goal));
    let median = k
        .and_then(|k| k.median_ms)
        .map(|m| format!(" (median {m:.0} ms)"))
        .unwrap_or_default();
    let mut out = vec![row(
        &name,
        g.map(|x| format!("{:.0} ms", x.value)),
        &goal,
        verdict(g),
        &median,
    )];
    let Some(c) = &r.sections.cluster else {
        return out;
    };
    for cost in c
        .costs
        .iter()
        .filter(|x| c.cluster().is_some_and(|cl| cl.label == x.of))
    {
        out.push(format!(
            "  (not a goal) replication: {} ÷ {}: forward {:.2}× · pull {:.2}× · raw echo {:.2}× (rates)",
            cost.of, cost.over, cost.forward_rate, cost.pull_rate, cost.echo_rate
        ));
    }
    for side in &c.sides {
        out.push(format!(
            "  (not a goal) gateway share on {}: forward {:.2}× · pull {:.2}× its raw envelope echo",
            side.label, side.figures.forward_to_echo, side.figures.pull_to_echo
        ));
    }
    out
}

/// The fleet's rows of the goals block (issue 16, SPEC §18).
fn fleet_rows(r: &Report) -> Vec<String> {
    let (g, s) = (&r.goals, &r.sections);
    let ms = |x: Option<&Goal>| x.map(|x| format!("{:.0} ms", x.value));
    let size = format!("{GOAL_FLEET_HOSTS} hosts × {GOAL_FLEET_ENTITIES}, H = {GOAL_FLEET_HEARTBEAT_MS} ms");
    let cpu = g.fleet_batched_gateway_cpu_pct.as_ref();
    let listed = g.fleet_batched_new_host_listed_ms.as_ref();
    let ratio = g.fleet_certs_cpu_ratio.as_ref();
    let certs_cpu = g.fleet_certs_gateway_cpu_pct.as_ref();
    let rev = g.fleet_certs_revocation_to_reject_ms.as_ref();
    let mut out = vec![
        row(
            &format!("fleet {size}, batched: real gateway CPU"),
            cpu.map(|x| format!("{:.1} %", x.value)),
            &format!("≤ {GOAL_FLEET_GATEWAY_CPU_PCT} %"),
            verdict(cpu),
            "",
        ),
        row(
            "  same run: a new host listed by both real gateways",
            ms(listed),
            &listed.map_or_else(|| "≤ 2H".into(), |x| format!("≤ {:.0} ms", x.goal)),
            verdict(listed),
            "",
        ),
        row(
            "  with certificates (§18): gateway CPU ÷ peers-file run's",
            ratio.map(|x| format!("{:.2}×", x.value)),
            &format!("≤ {GOAL_FLEET_CERTS_CPU_RATIO}×"),
            verdict(ratio),
            "",
        ),
        row(
            "  with certificates (§18): real gateway CPU",
            certs_cpu.map(|x| format!("{:.1} %", x.value)),
            &format!("≤ {GOAL_FLEET_GATEWAY_CPU_PCT} %"),
            verdict(certs_cpu),
            "",
        ),
        row(
            "  revocation-list change → rejected on every real gateway",
            ms(rev),
            &rev.map_or_else(|| "≤ 2 s".into(), |x| format!("≤ {:.0} ms", x.goal)),
            verdict(rev),
            " (MEM-4)",
        ),
    ];
    let Some(f) = &s.fleet else {
        return out;
    };
    if let Some(r) = f.at(
        Form::PerEntity,
        GOAL_FLEET_HOSTS,
        GOAL_FLEET_ENTITIES,
        GOAL_FLEET_HEARTBEAT_MS,
    ) {
        let m = &r.measured;
        out.push(format!(
            "  (not a goal) per-entity at {size}: gateways {:.1}/{:.1} % CPU, broker {} % CPU, {:.0} deliveries/s, \
             new host listed in {}, {}",
            m.gateway_a_cpu_pct.unwrap_or(f64::NAN),
            m.gateway_b_cpu_pct.unwrap_or(f64::NAN),
            m.broker_cpu_pct.map_or("-".into(), |b| format!("{b:.0}")),
            m.deliveries_per_s,
            m.new_host_listed_ms.map_or("(never)".into(), |x| format!("{x:.0} ms")),
            if r.keeps_up { "keeps up" } else { "does NOT keep up" }
        ));
    }
    if let Some(n) = g.fleet_per_entity_largest_keeping_up {
        out.push(format!(
            "  (not a goal) largest per-entity fleet that kept up (E = {GOAL_FLEET_ENTITIES}, H = {GOAL_FLEET_HEARTBEAT_MS} ms): {}",
            if n == 0 { "none measured".to_string() } else { format!("{n} hosts") }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;
    use crate::fleet::scale::ScaleResult;
    use crate::report::sections::Sections;

    /// The goals block's line for `figure`.
    fn goal_line<'a>(lines: &'a [String], figure: &str) -> &'a str {
        lines
            .iter()
            .find(|l| l.starts_with("  ") && l.contains(figure))
            .unwrap_or_else(|| panic!("no goal line for {figure}:\n{}", lines.join("\n")))
    }

    /// Forward 0.9× and pull 0.7× the envelope echo; side floors 0.25 / 0.30 ms.
    fn paths(throughput_ceiling: Option<f64>, pull_ceiling: Option<f64>) -> Sections {
        path_sections(throughput_ceiling, pull_ceiling)
    }

    #[test]
    fn every_goal_has_a_line_measured_or_not() {
        let mut s = paths(Some(1.0), None);
        s.pull = None;
        s.scale = Some(ScaleResult {
            heartbeat_ms: 5_000,
            points: vec![scale_point(100, 20 * 1024, 5.0), scale_point(1_000, 38 * 1024, 1_500.0)],
            refused: None,
            restart: None,
            more_restarts: Vec::new(),
        });
        let l = lines(&report(s));
        let fwd = goal_line(&l, "forward briefs/s (8 senders) ÷ envelope echo ÷ ceiling");
        assert!(
            fwd.contains("0.90×")
                && fwd.contains("≥ 0.85×")
                && fwd.ends_with("met (0.90× the envelope echo; ceiling 1.00×)"),
            "{fwd}"
        );
        assert!(goal_line(&l, "pull replies/s").ends_with("not measured"), "{l:?}");
        let a = goal_line(&l, "gateway a (sender side) CPU per brief ÷ its side's floor");
        assert!(
            a.contains("1.20×") && a.contains("≤ 1.5×") && a.ends_with("met (0.300 ms; floor 0.250 ms)"),
            "{a}"
        );
        let b = goal_line(&l, "gateway b (worker side)");
        assert!(
            b.contains("2.00×") && b.ends_with("MISSED (0.600 ms; floor 0.300 ms)"),
            "{b}"
        );
        let p50 = goal_line(&l, "SEND→INJECTED p50 (1 sender) against its floor + 1 ms");
        assert!(
            p50.contains("2.90 ms")
                && p50.contains("≤ 3.50 ms")
                && p50.ends_with(
                    "met (floor 2.50 ms = raw round trip p50 2.00 + herdr sequence p50 0.50; +0.40 ms over it)"
                ),
            "{p50}"
        );
        let rss = goal_line(&l, "RSS of one gateway with 10000 entities");
        assert!(
            rss.contains("not measured (extrapolated, linear from 100 and 1000 entities: 218 MiB)"),
            "{rss}"
        );
        let hb = goal_line(&l, "heartbeat round at 1000 entities (H = 5000 ms)");
        assert!(hb.contains("≤ 1000 ms") && hb.ends_with("MISSED"), "{hb}");
        assert!(goal_line(&l, "migration move").ends_with("not measured"), "{l:?}");
        assert!(goal_line(&l, "kill-to-ready").ends_with("not measured"), "{l:?}");
    }

    #[test]
    fn the_latency_goal_says_why_it_has_no_floor() {
        let mut s = paths(Some(1.0), None);
        s.latency_floor = Some(crate::floors::latency_floor::LatencyFloor {
            herdr_sequence: None,
            not_measured: Some("starting the floor's fake herdr: no socket".into()),
        });
        let l = lines(&report(s));
        let p50 = goal_line(&l, "SEND→INJECTED p50");
        assert!(
            p50.contains("≤ floor+1")
                && p50.ends_with(
                    "not measured (no floor: herdr sequence not measured: starting the floor's fake herdr: no socket)"
                ),
            "{p50}"
        );
        let mut s = paths(Some(1.0), None);
        s.raw = None;
        let l = lines(&report(s));
        assert!(
            goal_line(&l, "SEND→INJECTED p50").ends_with("not measured (no floor: run the raw section)"),
            "{l:?}"
        );
    }

    #[test]
    fn the_restart_is_printed_beside_the_rss_goal_as_a_figure() {
        use crate::fleet::restart::Restart;
        let at = |restart: Restart| {
            let s = Sections {
                scale: Some(ScaleResult {
                    heartbeat_ms: 5_000,
                    points: vec![scale_point(10_001, 120 * 1024, 50.0)],
                    refused: None,
                    restart: Some(restart),
                    more_restarts: Vec::new(),
                }),
                ..Sections::default()
            };
            let l = lines(&report(s));
            let rss = l
                .iter()
                .position(|x| x.contains("RSS of one gateway"))
                .expect("RSS line");
            assert!(l[rss + 1].contains("start-to-ready"), "right below the RSS goal: {l:?}");
            l[rss + 1].clone()
        };
        let kept = Restart {
            entities: 10_001,
            stop_ms: 420.0,
            exited_cleanly: true,
            start_to_ready_ms: Some(3_250.0),
            poll_ms: 50,
            restored: 10_001,
            re_registered: 0,
            re_register_ms: None,
            rss_kib: Some(110 * 1024),
            not_ready: None,
        };
        let line = at(kept.clone());
        assert!(
            line.contains("start-to-ready holding 10001 entities (SIGTERM, restart)")
                && line.contains("3.25 s")
                && line.contains(
                    "no bound  reported (process start → /readyz 200, entities restored by the gateway; \
                                  /readyz looked at every 50 ms; SIGTERM → exit 0.42 s; RSS once ready 110.0 MiB)"
                ),
            "{line}"
        );
        let lost = Restart {
            restored: 0,
            re_registered: 10_001,
            re_register_ms: Some(60_000.0),
            exited_cleanly: false,
            ..kept.clone()
        };
        let line = at(lost);
        assert!(
            line.contains("63.25 s")
                && line.contains(
                    "every entity registered again through the API: ready 3.25 s + 10001 registered again 60.00 s"
                )
                && line.contains("(not a clean exit)"),
            "{line}"
        );
        let never = Restart {
            start_to_ready_ms: None,
            rss_kib: None,
            not_ready: Some("not ready within 300 s: /readyz answered 503".into()),
            ..kept
        };
        let line = at(never);
        assert!(
            line.contains(" - ") && line.ends_with("; NOT ready: not ready within 300 s: /readyz answered 503)"),
            "{line}"
        );
    }

    #[test]
    fn the_throughput_goals_print_their_ceiling_and_verdict() {
        // Forward 0.9 ÷ 1.25 = 0.72 (MISSED), pull 0.7 ÷ 0.75 = 0.93 (met).
        let l = lines(&report(paths(Some(1.25), Some(0.75))));
        let fwd = goal_line(&l, "forward briefs/s");
        assert!(
            fwd.contains("0.72×") && fwd.ends_with("MISSED (0.90× the envelope echo; ceiling 1.25×)"),
            "{fwd}"
        );
        let pull = goal_line(&l, "pull replies/s (8 workers) ÷ envelope echo ÷ ceiling");
        assert!(
            pull.contains("0.93×") && pull.ends_with("met (0.70× the envelope echo; ceiling 0.75×)"),
            "{pull}"
        );
        // No floor: the figures are printed, the goals not measured.
        let mut s = paths(None, None);
        s.cpu_floor = None;
        let l = lines(&report(s));
        assert!(
            goal_line(&l, "forward briefs/s").ends_with("not measured (0.90× the envelope echo; no ceiling)"),
            "{l:?}"
        );
        assert!(
            goal_line(&l, "gateway a").ends_with("not measured (0.300 ms; no floor: run the raw section)"),
            "{l:?}"
        );
    }

    #[test]
    fn the_stop_and_the_rss_after_a_restart_are_goals_at_10000_entities() {
        let x = Restart {
            entities: 10_000,
            stop_ms: 10_200.0,
            exited_cleanly: true,
            start_to_ready_ms: Some(3_250.0),
            poll_ms: 50,
            restored: 10_000,
            re_registered: 0,
            re_register_ms: None,
            rss_kib: Some(140 * 1024),
            not_ready: None,
        };
        let rows = super::stop_rows(&[&x]);
        assert!(
            rows[0].contains("SIGTERM → exit holding 10000 entities") && rows[0].contains("10.20 s"),
            "{rows:?}"
        );
        assert!(rows[0].trim_end().ends_with("MISSED"), "{rows:?}");
        assert!(
            rows[1].contains("140.0 MiB") && rows[1].trim_end().ends_with("met"),
            "{rows:?}"
        );
        let small = Restart {
            entities: 100,
            stop_ms: 300.0,
            ..x.clone()
        };
        let rows = super::stop_rows(&[&small]);
        assert!(rows[0].contains("reported (goal judged at 10000 entities)"), "{rows:?}");
        // Over several restarts the worst is judged, and every figure shown.
        let fast = Restart {
            stop_ms: 8_100.0,
            rss_kib: Some(138 * 1024),
            ..x.clone()
        };
        let rows = super::stop_rows(&[&fast, &x, &fast]);
        assert!(rows[0].contains("10.20 s") && rows[0].contains("MISSED"), "{rows:?}");
        assert!(rows[0].contains("worst of 3: 8.10, 10.20, 8.10 s"), "{rows:?}");
        assert!(
            rows[1].contains("140.0 MiB") && rows[1].contains("worst of 3: 138.0, 140.0, 138.0 MiB"),
            "{rows:?}"
        );
    }
}
