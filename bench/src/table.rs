//! The report as text: the table `fleet-bench` prints, one small function per section.
//!
//! Why a module: the JSON is for machines and the gate; this is what a person reads after a run.
//! Every line comes from the typed [`Report`], so a figure that was not measured prints as `-`
//! (or "not measured" in the goal column) instead of a made-up zero.

use std::collections::BTreeMap;

use super::decomposition::Decomposition;
use super::gate;
use super::goals::{
    GOAL_CPU_MS_PER_BRIEF, GOAL_FORWARD_P50_DELTA_MS, GOAL_FORWARD_TO_ENVELOPE_ECHO, GOAL_MIGRATION_REPLIES_PER_S,
    GOAL_PULL_TO_ENVELOPE_ECHO, GOAL_RSS_ENTITIES, GOAL_RSS_MIB, Goal, Goals, verdict,
};
use super::migration::MigrationResult;
use super::presence::PresenceResult;
use super::presence_model;
use super::raw::RawResult;
use super::report::{ForwardSection, PullSection, Ratios, Report};
use super::scale::ScaleResult;
use super::stages;
use super::stats::{CpuSpent, Latency};

/// The lines printed so far.
#[derive(Default)]
struct Table(Vec<String>);

impl Table {
    /// One figure: its name, value, ratio to raw, goal (or note).
    fn row(&mut self, name: &str, value: impl AsRef<str>, vs: impl AsRef<str>, goal: impl AsRef<str>) {
        let (value, vs, goal) = (value.as_ref(), vs.as_ref(), goal.as_ref());
        self.0.push(format!("{name:<40} {value:>22} {vs:>14} {goal:>14}"));
    }

    fn line(&mut self, line: String) {
        self.0.push(line);
    }

    fn lines(&mut self, lines: Vec<String>) {
        self.0.extend(lines);
    }
}

/// A figure: no decimals from 100 up, two below.
fn num(x: f64) -> String {
    if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// A figure that may not have been measured.
fn opt(x: Option<f64>) -> String {
    x.map(num).unwrap_or_else(|| "-".into())
}

/// A ratio, `1.23×`.
fn times(x: Option<f64>) -> String {
    format!("{}×", opt(x))
}

/// `p50 / p99 / max`, or `-` for an empty series.
fn lat(l: &Latency) -> String {
    if l.n == 0 {
        return "-".into();
    }
    format!("{} / {} / {}", num(l.p50_ms), num(l.p99_ms), num(l.max_ms))
}

/// A goal cell: the bound, then met / MISSED / not measured.
fn goal_cell(bound: &str, g: Option<&Goal>) -> String {
    format!("{bound} {}", verdict(g))
}

/// The human-readable table of a report.
pub fn table(r: &Report) -> String {
    let mut t = Table::default();
    header(&mut t, r);
    let s = &r.sections;
    if let Some(raw) = &s.raw {
        raw_rows(&mut t, raw, s.raw_after.as_ref());
    }
    if let Some(fw) = &s.forward {
        forward_rows(&mut t, fw, &r.ratios, &r.goals);
        if let Some(floor) = &s.cpu_floor {
            for l in crate::floor::lines(floor, &fw.result.cpu_ms_per_brief) {
                t.line(l);
            }
            if let Some(l) = crate::floor::ceiling_line(floor) {
                t.line(l);
            }
        }
        decomposition_rows(&mut t, r.forward_p50_decomposition.as_ref());
    }
    if let Some(p) = &s.pull {
        pull_rows(&mut t, p, &r.ratios, &r.goals);
    }
    if let Some(p) = &s.presence {
        presence_rows(&mut t, p);
    }
    if let Some(m) = &s.migration {
        migration_rows(&mut t, m, r.goals.migration_replies_per_s.as_ref());
    }
    if let Some(scale) = &s.scale {
        scale_rows(&mut t, scale);
    }
    if let Some(m) = &s.presence_model {
        t.lines(presence_model::lines(m));
    }
    if let Some(f) = &s.fleet {
        t.lines(crate::fleet_table::lines(f));
    }
    if let Some(c) = &s.cluster {
        t.lines(crate::cluster::lines(c));
    }
    goal_rows(&mut t, r);
    if let Some(g) = &r.gate {
        t.lines(gate::lines(g));
    }
    cpu_rows(&mut t, r);
    t.0.join("\n")
}

fn load(l: Option<[f64; 3]>) -> String {
    l.map(|l| format!("{:.2}", l[0])).unwrap_or_else(|| "?".into())
}

fn header(t: &mut Table, r: &Report) {
    t.line(format!(
        "fleet-bench · broker {} ({}) · {} B messages, persistent, confirms, mandatory · load {} → {} on {} cores",
        r.broker.spec,
        r.broker.version,
        r.settings.message_bytes,
        load(r.machine.load_before),
        load(r.machine.load_after),
        r.machine.cores,
    ));
    t.line(format!(
        "{:<40} {:>22} {:>14} {:>14}",
        "figure", "value", "vs raw", "goal"
    ));
}

fn raw_rows(t: &mut Table, raw: &RawResult, after: Option<&RawResult>) {
    let again = |figure: fn(&RawResult) -> f64| {
        after
            .map(|a| format!(" (after: {})", num(figure(a))))
            .unwrap_or_default()
    };
    t.row("raw msgs/s", num(raw.msgs_per_s), "1", again(|r| r.msgs_per_s));
    t.row(
        "raw latency under load p50/p99/max ms",
        lat(&raw.loaded_latency),
        "",
        "",
    );
    t.row("raw one-way (unloaded) ms", lat(&raw.one_way), "", "");
    t.row("raw round trip (unloaded) ms", lat(&raw.round_trip), "1", "");
    t.row(
        &format!("raw echo round trips/s ({} flows)", raw.echo.flows),
        num(raw.echo.round_trips_per_s),
        "",
        again(|r| r.echo.round_trips_per_s),
    );
    t.row("raw echo round trip under load ms", lat(&raw.echo.latency), "", "");
    let e = &raw.echo_envelope;
    t.row(
        "  same, topic exchange + envelope headers",
        num(e.round_trips_per_s),
        "",
        format!(
            "1 flow p50 {} ms{}",
            num(e.single_round_trip.p50_ms),
            again(|r| r.echo_envelope.round_trips_per_s)
        ),
    );
}

fn forward_rows(t: &mut Table, fw: &ForwardSection, rt: &Ratios, g: &Goals) {
    let f = &fw.result;
    t.row(
        &format!("forward briefs/s ({} senders)", f.senders),
        num(f.briefs_per_s),
        times(rt.forward_briefs_to_raw),
        "",
    );
    t.row(
        "  ÷ raw envelope echo round trips/s",
        "",
        times(rt.forward_briefs_to_raw_envelope_echo),
        goal_cell(
            &format!("≥{GOAL_FORWARD_TO_ENVELOPE_ECHO}×"),
            g.forward_to_envelope_echo.as_ref(),
        ),
    );
    t.row(
        "  ÷ raw plain echo round trips/s",
        "",
        times(rt.forward_briefs_to_raw_echo),
        "",
    );
    t.row(
        "  (physical msgs/s, 2 per brief)",
        num(f.msgs_per_s),
        times(rt.forward_msgs_to_raw),
        "",
    );
    let cpu = |side: &str| f.cpu_ms_per_brief.get(side).map(|ms| format!("{ms:.3}"));
    let (a, b) = (
        g.cpu_ms_per_brief_gateway_a.as_ref(),
        g.cpu_ms_per_brief_gateway_b.as_ref(),
    );
    t.row(
        "  gateway CPU ms per brief, a / b",
        format!(
            "{} / {}",
            cpu("gateway_a").unwrap_or_else(|| "-".into()),
            cpu("gateway_b").unwrap_or_else(|| "-".into())
        ),
        "",
        format!("≤{GOAL_CPU_MS_PER_BRIEF} {}/{}", verdict(a), verdict(b)),
    );
    t.row(
        "forward SEND→INJECTED (1 sender) ms",
        lat(&f.latency),
        format!("+{} ms", opt(rt.forward_p50_minus_raw_round_trip_ms)),
        goal_cell(
            &format!("≤+{GOAL_FORWARD_P50_DELTA_MS} ms"),
            g.forward_p50_minus_raw_round_trip_ms.as_ref(),
        ),
    );
    t.row("forward SEND→INJECTED under load ms", lat(&f.loaded_latency), "", "");
    if f.failures > 0 {
        t.line(format!(
            "  forward failures: {} (first: {})",
            f.failures,
            f.first_failure.as_deref().unwrap_or("-")
        ));
    }
    t.lines(stages::lines(
        &format!("forward, throughput run ({} senders)", f.senders),
        &fw.stages.throughput,
    ));
    t.lines(stages::lines(
        "forward, latency run (1 sender)",
        &fw.stages.single_sender,
    ));
    if let Some(p) = &fw.profile {
        let per: std::collections::BTreeMap<String, f64> = p
            .keys()
            .filter_map(|h| Some((h.clone(), *f.cpu_ms_per_brief.get(&format!("gateway_{h}"))?)))
            .collect();
        t.lines(crate::profile::lines(
            &format!("forward, throughput run ({} senders)", f.senders),
            p,
            &per,
        ));
    }
}

/// The 1-sender p50 split: one line of parts, one of the stages shown beside it.
fn decomposition_rows(t: &mut Table, d: Option<&Decomposition>) {
    let Some(d) = d else {
        t.line(
            "forward p50 decomposition: none (no fleet_stage_seconds inject/verify for the 1-sender run, or no raw \
             round trip)"
                .into(),
        );
        return;
    };
    t.line(format!(
        "forward p50 decomposition (1 sender; stage figures are means): p50 {:.2} ms = raw round trip p50 {:.2} \
         (mean of the raw runs) + herdr (b inject) {:.2} + verify a {:.3} + verify b {:.3} + HTTP/MCP, scheduling and other gateway work {:.2}",
        d.p50_ms, d.raw_round_trip_p50_ms, d.herdr_inject_mean_ms, d.verify_a_mean_ms, d.verify_b_mean_ms, d.rest_ms
    ));
    let ms = |x: Option<f64>| x.map(|x| format!("{x:.2} ms")).unwrap_or_else(|| "-".into());
    t.line(format!(
        "  beside it, not subtracted (the broker's confirm overlaps them): publish/sign a {} · report b {} · \
         await_injected a {} (means)",
        ms(d.publish_a_mean_ms),
        ms(d.report_b_mean_ms),
        ms(d.await_injected_a_mean_ms)
    ));
}

fn pull_rows(t: &mut Table, p: &PullSection, rt: &Ratios, g: &Goals) {
    let r = &p.result;
    t.row(
        &format!("pull replies/s ({} workers)", r.workers),
        num(r.replies_per_s),
        times(rt.pull_replies_to_raw),
        "",
    );
    t.row(
        "  ÷ raw envelope echo round trips/s",
        "",
        times(rt.pull_replies_to_raw_envelope_echo),
        goal_cell(
            &format!("≥{GOAL_PULL_TO_ENVELOPE_ECHO}×"),
            g.pull_to_envelope_echo.as_ref(),
        ),
    );
    t.row(
        "  ÷ raw plain echo round trips/s",
        "",
        times(rt.pull_replies_to_raw_echo),
        "",
    );
    t.row("pull reply→drained under load ms", lat(&r.loaded_latency), "", "");
    t.row("pull bridge_reply call under load ms", lat(&r.reply_call), "", "");
    t.row(
        "pull reply→bridge_wait (1 flow) ms",
        lat(&r.latency),
        format!("+{} ms", opt(rt.pull_p50_minus_raw_round_trip_ms)),
        "",
    );
    if r.lost > 0 {
        t.line(format!("  pull: {} drainers gave up before every reply came", r.lost));
    }
    t.lines(stages::lines("pull", &p.stages));
}

fn presence_rows(t: &mut Table, p: &PresenceResult) {
    t.row("presence: new gateway /readyz ms (mean)", num(p.ready_ms_mean), "", "");
    t.row(
        "presence: new host listed at peer ms",
        num(p.visible_at_peer_ms_mean),
        "",
        format!("H={} ms", p.heartbeat_ms),
    );
    t.row(
        "presence: peer listed at new host ms",
        num(p.peer_visible_at_new_ms_mean),
        "",
        "",
    );
}

/// The migration section's rows: its raw baselines, the move, its check.
fn migration_rows(t: &mut Table, m: &MigrationResult, goal: Option<&Goal>) {
    t.row(
        &format!("migration raw publish msgs/s ({})", m.replies),
        num(m.raw_publish_msgs_per_s_used),
        "1",
        format!("(runs: {}, {})", num(m.raw_publish.msgs_per_s), num(m.seed.msgs_per_s)),
    );
    t.row(
        &format!("migration raw get+publish+ack/s (×{})", m.raw_move_batch),
        num(m.raw_move.msgs_per_s),
        "",
        "",
    );
    t.row(
        "migration replies/s (register → gone)",
        num(m.replies_per_s),
        times(Some(m.ratio_to_raw_publish)),
        goal_cell(&format!("≥{GOAL_MIGRATION_REPLIES_PER_S}/s"), goal),
    );
    t.row(
        "  move alone, vs the raw get+publish+ack",
        num(m.move_replies_per_s),
        times(Some(m.move_ratio_to_raw_move)),
        format!("start +{} ms", num(m.start_delay_ms)),
    );
    t.row(
        "  registration call ms (plain worker)",
        format!("{} ({})", num(m.register_call_ms), num(m.plain_register_ms)),
        "",
        "",
    );
    let v = &m.verified;
    if v.ok {
        t.row(
            "  main's inbox after the move",
            format!("{}/{} ok", v.found, v.expected),
            "",
            "in order",
        );
    } else {
        t.line(format!(
            "!!! MIGRATION LOST OR DAMAGED REPLIES: main's inbox holds {} of {}; missing {}, duplicated {}, \
             unexpected {}, malformed {}, in order {}; first problem: {}",
            v.found,
            v.expected,
            v.missing,
            v.duplicates,
            v.unexpected,
            v.malformed,
            v.in_order,
            v.first_problem.as_deref().unwrap_or("-")
        ));
    }
}

fn scale_rows(t: &mut Table, scale: &ScaleResult) {
    t.line(format!(
        "{:<12} {:>10} {:>10} {:>8} {:>6} {:>10} {:>10} {:>12} {:>16}",
        "entities", "RSS MiB", "peak MiB", "threads", "fds", "gw CPU %", "broker %", "register/s", "heartbeat round"
    ));
    for p in &scale.points {
        t.line(format!(
            "{:<12} {:>10.1} {:>10.1} {:>8} {:>6} {:>10.1} {:>10} {:>12.1} {:>16}",
            p.entities,
            p.rss_kib as f64 / 1024.0,
            p.peak_rss_kib as f64 / 1024.0,
            p.threads,
            p.fds,
            p.gateway_cpu_pct,
            opt(p.broker_cpu_pct),
            p.register_per_s,
            format!(
                "{} ms / {:.0} msgs{}",
                num(p.heartbeat_round_ms),
                p.presences_per_round,
                // More than one round's presences (entities + `_gateway`) in one burst: rounds
                // ran into each other with no pause between them, so a round took about H or more.
                if p.presences_per_round > 1.1 * (p.entities as f64 + 1.0) {
                    " (rounds ran together: ≥ H)"
                } else {
                    ""
                }
            ),
        ));
    }
    t.line(format!("  (H = {} ms for the scale run's gateway)", scale.heartbeat_ms));
    if let Some(r) = &scale.refused {
        t.line(format!(
            "!!! scale: the gateway refused a registration on the way to {} entities, at {}: {}",
            r.level, r.reached, r.error
        ));
    }
}

/// Goals of issue 16, one line each: figure, value, goal, verdict.
fn goal_rows(t: &mut Table, r: &Report) {
    let g = &r.goals;
    let s = &r.sections;
    t.line(format!(
        "goals (issue 16) {:<43} {:>14} {:>12}  verdict",
        "", "value", "goal"
    ));
    let mut line = |name: String, value: Option<String>, goal: String, verdict: &str, note: String| {
        let value = value.unwrap_or_else(|| "-".into());
        t.line(format!("  {name:<57} {value:>14} {goal:>12}  {verdict}{note}"));
    };
    // The pairs the paths ran with, or would have.
    let pairs = s.forward.as_ref().map_or(r.settings.paths.pairs, |f| f.result.senders);
    let workers = s.pull.as_ref().map_or(r.settings.paths.pairs, |p| p.result.workers);
    let ratio = |x: Option<&Goal>| x.map(|x| format!("{:.2}×", x.value));
    let ms = |x: Option<&Goal>, digits: usize| x.map(|x| format!("{:.digits$} ms", x.value));
    line(
        format!("forward briefs/s ({pairs} senders) ÷ raw envelope echo"),
        ratio(g.forward_to_envelope_echo.as_ref()),
        format!("≥ {GOAL_FORWARD_TO_ENVELOPE_ECHO}×"),
        verdict(g.forward_to_envelope_echo.as_ref()),
        String::new(),
    );
    line(
        format!("pull replies/s ({workers} workers) ÷ raw envelope echo"),
        ratio(g.pull_to_envelope_echo.as_ref()),
        format!("≥ {GOAL_PULL_TO_ENVELOPE_ECHO}×"),
        verdict(g.pull_to_envelope_echo.as_ref()),
        String::new(),
    );
    for (side, goal) in [
        ("a (sender side)", g.cpu_ms_per_brief_gateway_a.as_ref()),
        ("b (worker side)", g.cpu_ms_per_brief_gateway_b.as_ref()),
    ] {
        line(
            format!("gateway {side} CPU per brief"),
            ms(goal, 3),
            format!("≤ {GOAL_CPU_MS_PER_BRIEF} ms"),
            verdict(goal),
            String::new(),
        );
    }
    let p50 = g.forward_p50_minus_raw_round_trip_ms.as_ref();
    line(
        "SEND→INJECTED p50 (1 sender) − raw unloaded round trip p50".into(),
        p50.map(|x| format!("{:+.2} ms", x.value)),
        format!("≤ +{GOAL_FORWARD_P50_DELTA_MS} ms"),
        verdict(p50),
        String::new(),
    );
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
    line(
        format!("RSS of one gateway with {GOAL_RSS_ENTITIES} entities"),
        rss.map(|x| format!("{:.1} MiB", x.value)),
        format!("≤ {GOAL_RSS_MIB} MiB"),
        verdict(rss),
        extrapolated,
    );
    let hb = g.heartbeat_round_ms.as_ref();
    let scale = s.scale.as_ref();
    let at = match (scale, scale.and_then(|s| s.largest())) {
        (Some(s), Some(p)) => format!("{} entities (H = {} ms)", p.entities, s.heartbeat_ms),
        _ => "the largest entity count".into(),
    };
    line(
        format!("heartbeat round at {at}"),
        ms(hb, 1),
        hb.map(|x| format!("≤ {:.0} ms", x.goal))
            .unwrap_or_else(|| "≤ H/5".into()),
        verdict(hb),
        String::new(),
    );
    let mig = g.migration_replies_per_s.as_ref();
    line(
        "migration move (registration → legacy queue gone)".into(),
        mig.map(|x| format!("{:.0}/s", x.value)),
        format!("≥ {GOAL_MIGRATION_REPLIES_PER_S}/s"),
        verdict(mig),
        String::new(),
    );
    t.lines(crate::fleet_table::goal_rows(r));
    cluster_goal_rows(t, r);
}

/// The cluster section's goal line and its replication ratios (not goals: the price is the
/// broker's, printed to be read beside the gateway's share on each side).
fn cluster_goal_rows(t: &mut Table, r: &Report) {
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
    let value = g.map_or_else(|| "-".into(), |x| format!("{:.0} ms", x.value));
    let goal = g.map_or_else(|| "≤ 2H + 2 hb".into(), |x| format!("≤ {:.0} ms", x.goal));
    let median = k
        .and_then(|k| k.median_ms)
        .map(|m| format!(" (median {m:.0} ms)"))
        .unwrap_or_default();
    t.line(format!("  {name:<57} {value:>14} {goal:>12}  {}{median}", verdict(g)));
    let Some(c) = &r.sections.cluster else {
        return;
    };
    for cost in c
        .costs
        .iter()
        .filter(|x| c.cluster().is_some_and(|cl| cl.label == x.of))
    {
        t.line(format!(
            "  (not a goal) replication: {} ÷ {}: forward {:.2}× · pull {:.2}× · raw echo {:.2}× (rates)",
            cost.of, cost.over, cost.forward_rate, cost.pull_rate, cost.echo_rate
        ));
    }
    for side in &c.sides {
        t.line(format!(
            "  (not a goal) gateway share on {}: forward {:.2}× · pull {:.2}× its raw envelope echo",
            side.label, side.figures.forward_to_echo, side.figures.pull_to_echo
        ));
    }
}

/// `label  bench 0.12 · broker 0.30 · …`, or `None` when nothing was measured.
fn cpu_line(label: &str, per: Option<&BTreeMap<String, f64>>, cpu: Option<&CpuSpent>) -> Option<String> {
    let per = per?;
    let parts: Vec<String> = per.iter().map(|(k, x)| format!("{k} {}", num(*x))).collect();
    let busy = match cpu {
        Some(c) if c.capacity_s > 0.0 => format!(" · cores busy {:.0} %", 100.0 * c.machine_busy()),
        _ => String::new(),
    };
    Some(format!("  {label:<28} {}{busy}", parts.join(" · ")))
}

fn cpu_rows(t: &mut Table, r: &Report) {
    let s = &r.sections;
    t.line("CPU ms per message (by process; other = rest of the machine, also other users):".into());
    let raw = s.raw.as_ref();
    let rows = [
        ("raw (per msg)", raw.map(|x| (&x.cpu_ms_per_msg, &x.cpu))),
        (
            "raw echo (per round trip)",
            raw.map(|x| (&x.echo.cpu_ms_per_round_trip, &x.echo.cpu)),
        ),
        (
            "raw envelope echo (per r.t.)",
            raw.map(|x| (&x.echo_envelope.cpu_ms_per_round_trip, &x.echo_envelope.cpu)),
        ),
        (
            "forward (per brief)",
            s.forward.as_ref().map(|f| (&f.result.cpu_ms_per_brief, &f.result.cpu)),
        ),
        (
            "pull (per reply)",
            s.pull.as_ref().map(|p| (&p.result.cpu_ms_per_reply, &p.result.cpu)),
        ),
        (
            "migration (per reply)",
            s.migration.as_ref().map(|m| (&m.cpu_ms_per_reply, &m.cpu)),
        ),
    ];
    for (label, figures) in rows {
        if let Some(l) = cpu_line(label, figures.map(|f| f.0), figures.map(|f| f.1)) {
            t.line(l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;
    use crate::report::ForwardStages;
    use crate::report::Sections;

    #[test]
    fn every_section_that_ran_is_printed() {
        let r = report(Sections {
            raw: Some(raw(10_000.0, 2.0, 5_000.0, 4_000.0)),
            forward: Some(ForwardSection {
                result: forward(4_500.0, 4.5, &[("gateway_a", 0.1)]),
                stages: ForwardStages::default(),
                profile: None,
            }),
            ..Sections::default()
        });
        let text = table(&r);
        assert!(
            text.contains("forward briefs/s") && text.contains("raw msgs/s"),
            "{text}"
        );
        assert!(text.contains("gateway_a 0.10"), "{text}");
        assert!(
            text.contains("forward p50 decomposition: none"),
            "no metric, no split: {text}"
        );
        assert!(!text.contains("pull reply→drained"), "{text}");
    }

    #[test]
    fn a_migration_that_lost_replies_is_printed_loudly() {
        let ok = report(Sections {
            migration: Some(migration(1_200.0, true)),
            ..Sections::default()
        });
        assert!(table(&ok).contains("10/10 ok"));
        assert!(table(&ok).contains("≥1000/s met"));
        let lost = report(Sections {
            migration: Some(migration(1_200.0, false)),
            ..Sections::default()
        });
        assert!(table(&lost).contains("MIGRATION LOST"));
    }

    /// The goals block's line for `figure`.
    fn goal_line<'a>(text: &'a str, figure: &str) -> &'a str {
        text.lines()
            .find(|l| l.starts_with("  ") && l.contains(figure))
            .unwrap_or_else(|| panic!("no goal line for {figure}:\n{text}"))
    }

    #[test]
    fn every_goal_has_a_line_measured_or_not() {
        let r = report(Sections {
            raw: Some(raw(20_000.0, 2.0, 8_000.0, 5_000.0)),
            forward: Some(ForwardSection {
                result: forward(4_500.0, 2.9, &[("gateway_a", 0.1), ("gateway_b", 0.2)]),
                stages: ForwardStages::default(),
                profile: None,
            }),
            scale: Some(ScaleResult {
                heartbeat_ms: 5_000,
                points: vec![scale_point(100, 20 * 1024, 5.0), scale_point(1_000, 38 * 1024, 1_500.0)],
                refused: None,
            }),
            ..Sections::default()
        });
        let text = table(&r);
        assert!(
            goal_line(&text, "forward briefs/s (8 senders)").ends_with("met"),
            "{text}"
        );
        assert!(goal_line(&text, "pull replies/s").ends_with("not measured"), "{text}");
        assert!(goal_line(&text, "gateway a (sender side)").ends_with("met"), "{text}");
        assert!(
            goal_line(&text, "gateway b (worker side)").ends_with("MISSED"),
            "{text}"
        );
        assert!(goal_line(&text, "SEND→INJECTED p50").contains("+0.90 ms"), "{text}");
        let rss = goal_line(&text, "RSS of one gateway with 10000 entities");
        assert!(
            rss.contains("not measured (extrapolated, linear from 100 and 1000 entities: 218 MiB)"),
            "{rss}"
        );
        let hb = goal_line(&text, "heartbeat round at 1000 entities (H = 5000 ms)");
        assert!(hb.contains("≤ 1000 ms") && hb.ends_with("MISSED"), "{hb}");
        assert!(goal_line(&text, "migration move").ends_with("not measured"), "{text}");
        assert!(
            text.contains("≥0.8× met") && text.contains("≤0.15 met/MISSED"),
            "{text}"
        );
    }

    #[test]
    fn the_decomposition_is_one_line_of_means() {
        let d = Decomposition {
            p50_ms: 3.5,
            raw_round_trip_p50_ms: 1.2,
            herdr_inject_mean_ms: 0.8,
            verify_a_mean_ms: 0.05,
            verify_b_mean_ms: 0.15,
            rest_ms: 1.3,
            publish_a_mean_ms: Some(0.7),
            report_b_mean_ms: None,
            await_injected_a_mean_ms: Some(2.5),
        };
        let mut t = Table::default();
        decomposition_rows(&mut t, Some(&d));
        let text = t.0.join("\n");
        assert!(
            text.contains(
                "p50 3.50 ms = raw round trip p50 1.20 (mean of the raw runs) + herdr (b inject) 0.80 + verify a 0.050"
            ) && text.contains("HTTP/MCP, scheduling and other gateway work 1.30")
                && text.contains("stage figures are means")
                && text.contains("report b -"),
            "{text}"
        );
    }

    #[test]
    fn a_refused_level_is_printed() {
        let r = report(Sections {
            scale: Some(ScaleResult {
                heartbeat_ms: 5_000,
                points: vec![scale_point(1, 19 * 1024, 1.0)],
                refused: Some(crate::scale::Refused {
                    level: 10_000,
                    reached: 2_040,
                    error: "channel limit".into(),
                }),
            }),
            ..Sections::default()
        });
        assert!(table(&r).contains("refused a registration on the way to 10000 entities, at 2040"));
    }
}
