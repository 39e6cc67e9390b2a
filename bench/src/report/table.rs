//! The report as text: the table `fleet-bench` prints, one small function per section.
//!
//! Why a module: the JSON is for machines and the gate; this is what a person reads after a run.
//! Every line comes from the typed [`Report`], so a figure that was not measured prints as `-`
//! (or "not measured" in the goal column) instead of a made-up zero.

use std::collections::BTreeMap;

use crate::fleet::presence::PresenceResult;
use crate::fleet::presence_model;
use crate::fleet::scale::ScaleResult;
use crate::migration::MigrationResult;
use crate::paths::decomposition::Decomposition;
use crate::paths::raw::RawResult;
use crate::paths::stages;
use crate::report::document::Report;
use crate::report::gate;
use crate::report::goals::{
    GOAL_CPU_TO_SIDE_FLOOR, GOAL_FORWARD_P50_OVER_FLOOR_MS, GOAL_FORWARD_TO_CEILING, GOAL_MIGRATION_REPLIES_PER_S,
    GOAL_PULL_TO_CEILING, Goal, Goals, verdict,
};
use crate::report::sections::{ForwardSection, PullSection, Ratios};
use crate::rig::stats::{CpuSpent, Latency};

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
            for l in crate::floors::floor::lines(floor, &fw.result.cpu_ms_per_brief) {
                t.line(l);
            }
            if let Some(l) = crate::floors::floor::ceiling_line(floor) {
                t.line(l);
            }
        }
        decomposition_rows(&mut t, r.forward_p50_decomposition.as_ref());
    }
    if let Some(p) = &s.pull {
        pull_rows(&mut t, p, &r.ratios, &r.goals);
        if let Some(floor) = &s.cpu_floor {
            t.lines(crate::floors::floor::pull_lines(floor, &p.result));
        }
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
        t.lines(crate::fleet::table::lines(f));
    }
    if let Some(c) = &s.cluster {
        t.lines(crate::cluster::table::lines(c));
    }
    if let Some(c) = &s.cluster_scale {
        t.lines(crate::cluster_scale::table::lines(c));
    }
    t.lines(crate::report::goals_table::lines(r));
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
            &format!("≥{GOAL_FORWARD_TO_CEILING}×ceil"),
            g.forward_to_ceiling.as_ref(),
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
    let (a, b) = (g.cpu_to_floor_gateway_a.as_ref(), g.cpu_to_floor_gateway_b.as_ref());
    t.row(
        "  gateway CPU ms per brief, a / b",
        format!(
            "{} / {}",
            cpu("gateway_a").unwrap_or_else(|| "-".into()),
            cpu("gateway_b").unwrap_or_else(|| "-".into())
        ),
        "",
        format!("≤{GOAL_CPU_TO_SIDE_FLOOR}×floor {}/{}", verdict(a), verdict(b)),
    );
    t.row(
        "forward SEND→INJECTED (1 sender) ms",
        lat(&f.latency),
        format!("+{} ms", opt(rt.forward_p50_minus_raw_round_trip_ms)),
        goal_cell(
            &format!("≤floor+{GOAL_FORWARD_P50_OVER_FLOOR_MS}"),
            g.forward_p50_ms.as_ref(),
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
        t.lines(crate::paths::profile::lines(
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
        goal_cell(&format!("≥{GOAL_PULL_TO_CEILING}×ceil"), g.pull_to_ceiling.as_ref()),
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
    use crate::report::sections::{ForwardStages, Sections};

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

    #[test]
    fn the_path_rows_carry_the_floor_relative_goals_and_the_pull_floor() {
        let mut sections = path_sections(Some(1.0), Some(1.0));
        if let Some(p) = sections.pull.as_mut() {
            p.result.cpu_ms_per_reply =
                BTreeMap::from([("gateway_a".to_string(), 0.3), ("gateway_b".to_string(), 0.2)]);
        }
        let r = report(sections);
        let text = table(&r);
        assert!(
            text.contains("≥0.85×ceil met") && text.contains("≥0.85×ceil MISSED"),
            "forward 0.9, pull 0.7 under 1.0× ceilings: {text}"
        );
        assert!(text.contains("≤1.5×floor met/MISSED"), "{text}");
        // 1,600 replies, 10 drain calls: 0.12 + 0.08 + 0.05 × (1 + 0.00625) ≈ 0.250 ms.
        assert!(
            text.contains("pull floor per reply, both gateways") && text.contains("= 0.250 ms"),
            "{text}"
        );
        assert!(
            text.contains("pull ceiling: with both gateways at their pull floor"),
            "{text}"
        );
        assert!(text.contains("goals (issues 16, 36, 46)"), "{text}");
        assert!(
            text.contains("forward SEND→INJECTED (1 sender) ms") && text.contains("≤floor+1 met"),
            "p50 2.9 ms against a 2.5 ms floor: {text}"
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
                refused: Some(crate::fleet::scale::Refused {
                    level: 10_000,
                    reached: 2_040,
                    error: "channel limit".into(),
                }),
                restart: None,
                more_restarts: Vec::new(),
            }),
            ..Sections::default()
        });
        assert!(table(&r).contains("refused a registration on the way to 10000 entities, at 2040"));
    }
}
