//! A scenario's message sequence chart: its timeline (`crate::timeline`) drawn as inline SVG for
//! `conformance.html`, with the gateways' log lines around the failure one click away.
//!
//! Why it exists: beside a failed scenario's error, the order of what crossed the wire is what a
//! reader needs to see where a gateway went wrong (the brief that went out, the INJECTED that never
//! came back, the dead letter, the text typed into a shell). Drawn here, with no script library
//! and no external asset, so the page stays one file that can be mailed or attached to a CI run.
//!
//! Layout: one lifeline per lane (probe, broker, each gateway, each pane typed into), time flows
//! down, one row per event (rows are evenly spaced, the time since the scenario began is written
//! at the left of each), so no two labels share a row. Repeated PRESENCE (heartbeats) are dots on
//! their sender's lifeline, not rows. The failing step is a red line across every lane.

use std::fmt::Write as _;
use std::path::Path;

use super::reports::xml_escape as esc;
use crate::timeline::{Event, EventKind, LaneKind, Timeline};

/// Width of one lane.
const LANE_W: f64 = 190.0;
/// The time column at the left.
const LEFT: f64 = 74.0;
/// Height of the lane headers.
const TOP: f64 = 52.0;
/// Height of one row.
const ROW_H: f64 = 24.0;
/// Most rows drawn: a longer scenario shows the rows nearest its failure (or its last rows).
pub const MAX_ROWS: usize = 1_000;
/// Approximate width of one character of a label (11 px sans-serif).
const CHAR_W: f64 = 6.3;
/// Longest label drawn (the full one is the arrow's tooltip).
const LABEL_MAX: usize = 72;

/// The CSS the charts need (added to the page's style once).
pub const STYLE: &str = r#"
.msc-wrap{max-height:720px;overflow:auto;border:1px solid #cfd8dc;border-radius:4px;background:#fff;margin:6px 0}
svg.msc{display:block;font:11px system-ui,-apple-system,"Segoe UI",Roboto,sans-serif}
svg.msc text{paint-order:stroke;stroke:#fff;stroke-width:3px;stroke-linejoin:round}
svg.msc text.t{fill:#546e7a;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:10.5px}
svg.msc text.h{font-weight:600;stroke:none}
svg.msc .fail text{fill:#c62828;font-weight:700}
.msc-notes{color:#555;font-size:12px;margin:2px 0}
details.msc-logs pre{max-height:300px}
"#;

/// Where a scenario's timeline sits in the output directory, relative to it
/// (`container-rabbitmq/logs/forward_path.feature-12.timeline.json`).
pub fn rel_path(broker_label: &str, feature_file: &str, line: usize) -> String {
    format!(
        "{}/logs/{}",
        broker_label.replace(':', "-"),
        crate::timeline::file_name(feature_file, line)
    )
}

/// The timeline at `rel` under `out_dir`, if one was written and reads.
pub fn read(out_dir: &Path, rel: &str) -> Option<Timeline> {
    let bytes = std::fs::read(out_dir.join(rel)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Colour of an event's arrow.
fn colour(e: &Event) -> &'static str {
    match e.kind {
        EventKind::Unroutable => "#b71c1c",
        EventKind::DeadLetter => "#6a1b9a",
        EventKind::Inject => "#00695c",
        EventKind::InjectRefused => "#c62828",
        EventKind::Heartbeat => "#9e9e9e",
        EventKind::Envelope => match e.label.split(' ').next().unwrap_or("") {
            "SEND" | "BROADCAST" => "#1565c0",
            "INJECTED" => "#2e7d32",
            "FAILED" | "NO_WAITER" | "TOO_LATE" | "ABANDONED" => "#e65100",
            "REPLY" => "#00838f",
            "ASK" | "ANSWER" => "#4527a0",
            "SPAWN" | "STOP" => "#5d4037",
            "PRESENCE" => "#78909c",
            _ => "#37474f",
        },
    }
}

fn dashed(e: &Event) -> bool {
    matches!(
        e.kind,
        EventKind::Unroutable | EventKind::DeadLetter | EventKind::InjectRefused
    )
}

fn lane_fill(kind: LaneKind) -> (&'static str, &'static str) {
    match kind {
        LaneKind::Probe => ("#ede7f6", "#5e35b1"),
        LaneKind::Broker => ("#eceff1", "#546e7a"),
        LaneKind::Gateway => ("#e3f2fd", "#1565c0"),
        LaneKind::Pane => ("#e0f2f1", "#00695c"),
    }
}

fn secs(ms: u64) -> String {
    format!("+{:.3}s", ms as f64 / 1000.0)
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut c: String = s.chars().take(max.saturating_sub(1)).collect();
        c.push('…');
        c
    }
}

/// One row of the chart: an event, or the failing step.
enum Row<'a> {
    Event(&'a Event),
    Failure,
}

/// The rows drawn, in time order, and how many were left out before and after them.
fn rows(t: &Timeline) -> (Vec<(u64, Row<'_>)>, usize, usize) {
    let mut rows: Vec<(u64, Row<'_>)> = t
        .events
        .iter()
        .filter(|e| e.kind != EventKind::Heartbeat)
        .map(|e| (e.at_ms, Row::Event(e)))
        .collect();
    if let Some(f) = &t.failure {
        // After the events of its own millisecond: the step failed on what it saw.
        let at = rows.partition_point(|(ms, _)| *ms <= f.at_ms);
        rows.insert(at, (f.at_ms, Row::Failure));
    }
    if rows.len() <= MAX_ROWS {
        return (rows, 0, 0);
    }
    let focus = rows
        .iter()
        .position(|(_, r)| matches!(r, Row::Failure))
        .unwrap_or(rows.len() - 1);
    let end = (focus + MAX_ROWS / 6).clamp(MAX_ROWS, rows.len());
    let start = end - MAX_ROWS;
    let after = rows.len() - end;
    rows.truncate(end);
    let kept = rows.split_off(start);
    (kept, start, after)
}

/// The chart of `t` as HTML: the notes, the SVG (in a scrolling box) and the failure's log
/// lines in a `<details>`. `uid` makes its element ids unique on the page.
pub fn render(t: &Timeline, uid: &str) -> String {
    let mut s = String::new();
    let (rows, before, after) = rows(t);
    let lanes = &t.lanes;
    let lane_x = |id: &str| {
        lanes
            .iter()
            .position(|l| l.id == id)
            .map(|i| LEFT + LANE_W * i as f64 + LANE_W / 2.0)
    };
    let width = LEFT + LANE_W * lanes.len().max(1) as f64 + 16.0;
    let height = TOP + ROW_H * (rows.len() as f64 + 1.0) + 12.0;
    let heartbeats = t.events.iter().filter(|e| e.kind == EventKind::Heartbeat).count();
    let _ = write!(
        s,
        "<div class=\"msc-notes\">Sequence chart: time since the scenario began, downwards · {} event(s){}{}</div>",
        rows.len(),
        if heartbeats > 0 {
            format!(" · {heartbeats} heartbeat(s) (a PRESENCE repeating its sender's last) as grey dots")
        } else {
            String::new()
        },
        if t.failure.is_some() {
            " · the red line is the failing step"
        } else {
            ""
        }
    );
    for n in &t.notes {
        let _ = write!(s, "<div class=\"msc-notes\">Note: {}</div>", esc(n));
    }
    if before + after > 0 {
        let _ = write!(
            s,
            "<div class=\"msc-notes\">{before} earlier and {after} later event(s) are not drawn (at most {MAX_ROWS} rows, those nearest the failure).</div>"
        );
    }
    let fail_y = rows
        .iter()
        .position(|(_, r)| matches!(r, Row::Failure))
        .map(|i| TOP + ROW_H * (i as f64 + 1.0));
    let _ = write!(
        s,
        "<div class=\"msc-wrap\" id=\"msc-{uid}\"{}>\
         <svg class=\"msc\" xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
         viewBox=\"0 0 {width:.0} {height:.0}\" role=\"img\" aria-label=\"sequence chart of {}\">",
        fail_y.map(|y| format!(" data-fail-y=\"{y:.0}\"")).unwrap_or_default(),
        esc(&t.scenario)
    );
    // Lane headers and lifelines.
    for (i, l) in lanes.iter().enumerate() {
        let x = LEFT + LANE_W * i as f64;
        let (fill, stroke) = lane_fill(l.kind);
        let cx = x + LANE_W / 2.0;
        let _ = write!(
            s,
            "<line x1=\"{cx:.1}\" y1=\"{y0:.1}\" x2=\"{cx:.1}\" y2=\"{y1:.1}\" stroke=\"{stroke}\" stroke-opacity=\".45\" stroke-dasharray=\"4 4\"/>\
             <rect x=\"{:.1}\" y=\"8\" width=\"{:.1}\" height=\"32\" rx=\"5\" fill=\"{fill}\" stroke=\"{stroke}\"/>\
             <text class=\"h\" x=\"{cx:.1}\" y=\"28\" text-anchor=\"middle\" fill=\"{stroke}\">{}</text>",
            x + 8.0,
            LANE_W - 16.0,
            esc(&clip(&l.label, 28)),
            y0 = 40.0,
            y1 = height - 6.0,
        );
    }
    let _ = write!(s, "<text class=\"t\" x=\"6\" y=\"28\">time</text>");
    let mut prev_ms: Option<u64> = None;
    for (i, (ms, row)) in rows.iter().enumerate() {
        let y = TOP + ROW_H * (i as f64 + 1.0);
        if let Some(p) = prev_ms
            && ms.saturating_sub(p) >= 2_000
        {
            let gy = y - ROW_H + 6.0;
            let _ = write!(
                s,
                "<line x1=\"{LEFT}\" y1=\"{gy:.1}\" x2=\"{:.1}\" y2=\"{gy:.1}\" stroke=\"#b0bec5\" stroke-dasharray=\"1 5\"/>",
                width - 8.0
            );
        }
        prev_ms = Some(*ms);
        match row {
            Row::Failure => {
                let err = t.failure.as_ref().map(|f| f.error.as_str()).unwrap_or_default();
                let first = err.lines().find(|l| !l.trim().is_empty()).unwrap_or("the step failed");
                let _ = write!(
                    s,
                    "<g class=\"fail\"><title>{}</title>\
                     <line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#c62828\" stroke-width=\"2.5\"/>\
                     <text class=\"t\" x=\"6\" y=\"{:.1}\">{}</text>\
                     <text x=\"{:.1}\" y=\"{:.1}\">✗ failing step: {}</text></g>",
                    esc(err),
                    width - 8.0,
                    y + 4.0,
                    secs(*ms),
                    LEFT + 6.0,
                    y - 6.0,
                    esc(&clip(first, ((width - LEFT - 120.0) / CHAR_W).max(20.0) as usize))
                );
            }
            Row::Event(e) => arrow(&mut s, e, y, width, &lane_x),
        }
    }
    // Heartbeats: a dot on the sender's lifeline, between the rows around its time.
    for e in t.events.iter().filter(|e| e.kind == EventKind::Heartbeat) {
        let (Some(x), Some(first), Some(last)) = (lane_x(&e.from), rows.first(), rows.last()) else {
            continue;
        };
        if e.at_ms < first.0 || e.at_ms > last.0 {
            continue;
        }
        let i = rows.partition_point(|(ms, _)| *ms <= e.at_ms);
        let y = TOP + ROW_H * i as f64 + ROW_H / 2.0;
        let _ = write!(
            s,
            "<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2.6\" fill=\"#9e9e9e\"><title>{} {} — {}</title></circle>",
            secs(e.at_ms),
            esc(&e.label),
            esc(e.detail.as_deref().unwrap_or(""))
        );
    }
    s.push_str("</svg></div>");
    if !t.logs.is_empty() {
        let _ = write!(
            s,
            "<details class=\"msc-logs\"><summary>Gateway log lines around the failing step ({})</summary>",
            esc(&t.logs.first().map(|l| l.window.clone()).unwrap_or_default())
        );
        for l in &t.logs {
            let mut text = String::new();
            for line in &l.lines {
                let at = line.at_ms.map(secs).unwrap_or_default();
                let _ = writeln!(text, "{at:>10} {}", line.text);
            }
            if l.lines.is_empty() {
                text.push_str("(no lines in this window)");
            }
            let _ = write!(
                s,
                "<div>gateway {} — {}</div><pre>{}</pre>",
                esc(&l.host),
                esc(&l.window),
                esc(&text)
            );
        }
        s.push_str("</details>");
    }
    s
}

/// One event's arrow (or, from a lane to itself, a loop) with its label and time.
fn arrow(s: &mut String, e: &Event, y: f64, width: f64, lane_x: &dyn Fn(&str) -> Option<f64>) {
    let (Some(x1), Some(x2)) = (lane_x(&e.from), lane_x(&e.to)) else {
        return;
    };
    let c = colour(e);
    let dash = if dashed(e) { " stroke-dasharray=\"5 3\"" } else { "" };
    let label = match &e.msg_id {
        Some(m) => format!("{} #{m}", e.label),
        None => e.label.clone(),
    };
    let shown = clip(&label, LABEL_MAX);
    let tip = format!(
        "{} {}{}",
        secs(e.at_ms),
        label,
        e.detail.as_ref().map(|d| format!(" — {d}")).unwrap_or_default()
    );
    let _ = write!(
        s,
        "<g><title>{}</title><text class=\"t\" x=\"6\" y=\"{:.1}\">{}</text>",
        esc(&tip),
        y + 4.0,
        secs(e.at_ms)
    );
    let text_w = shown.chars().count() as f64 * CHAR_W;
    if (x1 - x2).abs() < 1.0 {
        // A loop on one lifeline: out to the right and back a little lower.
        let _ = write!(
            s,
            "<path d=\"M{x1:.1} {:.1} h22 v8 h-18\" fill=\"none\" stroke=\"{c}\" stroke-width=\"1.6\"{dash}/>\
             <path d=\"M{x1:.1} {:.1} l7 -3.5 v7 z\" fill=\"{c}\"/>",
            y - 6.0,
            y + 2.0
        );
        let tx = (x1 + 28.0).min(width - 8.0 - text_w).max(LEFT + 2.0);
        let _ = write!(
            s,
            "<text x=\"{tx:.1}\" y=\"{:.1}\" fill=\"{c}\">{}</text></g>",
            y - 1.0,
            esc(&shown)
        );
        return;
    }
    let dir = if x2 > x1 { 1.0 } else { -1.0 };
    let tip_x = x2 - dir * 1.0;
    let _ = write!(
        s,
        "<line x1=\"{x1:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"{c}\" stroke-width=\"1.6\"{dash}/>\
         <path d=\"M{tip_x:.1} {y:.1} l{:.1} -4 v8 z\" fill=\"{c}\"/>\
         <circle cx=\"{x1:.1}\" cy=\"{y:.1}\" r=\"2.2\" fill=\"{c}\"/>",
        x2 - dir * 8.0,
        -dir * 9.0
    );
    if e.kind == EventKind::Unroutable {
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{c}\" font-weight=\"700\" text-anchor=\"middle\">✕</text>",
            x2 - dir * 14.0,
            y + 4.0
        );
    }
    let mid = (x1 + x2) / 2.0;
    let tx = (mid - text_w / 2.0).clamp(LEFT + 2.0, (width - 8.0 - text_w).max(LEFT + 2.0));
    let _ = write!(
        s,
        "<text x=\"{tx:.1}\" y=\"{:.1}\" fill=\"{c}\">{}</text></g>",
        y - 5.0,
        esc(&shown)
    );
}

#[cfg(test)]
mod screenshot_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::{Failure, Lane};

    pub(crate) fn sample() -> Timeline {
        let lane = |id: &str, label: &str, kind| Lane {
            id: id.into(),
            label: label.into(),
            kind,
        };
        let ev = |at_ms, kind, from: &str, to: &str, label: &str| Event {
            at_ms,
            kind,
            from: from.into(),
            to: to.into(),
            label: label.into(),
            msg_id: Some("3f2a91c0".into()),
            detail: Some("bridge.msg · gid".into()),
        };
        Timeline {
            scenario: "a <brief> is injected".into(),
            feature: "features/forward_path.feature".into(),
            line: 12,
            passed: false,
            started_unix_ms: 1_767_323_045_000,
            duration_ms: 9_000,
            lanes: vec![
                lane("probe", "probe (suite)", LaneKind::Probe),
                lane("broker", "broker", LaneKind::Broker),
                lane("gw:a", "gateway a", LaneKind::Gateway),
                lane("gw:b", "gateway b", LaneKind::Gateway),
                lane("pane:b:w1:p2", "w1 @b (w1:p2)", LaneKind::Pane),
            ],
            events: vec![
                ev(400, EventKind::Envelope, "gw:a", "broker", "PRESENCE main up/idle"),
                ev(1_400, EventKind::Heartbeat, "gw:a", "broker", "PRESENCE main up/idle"),
                ev(2_100, EventKind::Envelope, "gw:a", "gw:b", "SEND main→w1"),
                ev(
                    2_150,
                    EventKind::Inject,
                    "gw:b",
                    "pane:b:w1:p2",
                    "inject \"do the thing\" +enter → Submitted",
                ),
                ev(
                    2_300,
                    EventKind::Unroutable,
                    "probe",
                    "broker",
                    "✕ SEND x→nobody no route",
                ),
                ev(2_600, EventKind::DeadLetter, "gw:b", "broker", "☠ SEND main (rejected)"),
                ev(5_000, EventKind::Envelope, "gw:b", "gw:a", "FAILED w1→main"),
            ],
            failure: Some(Failure {
                at_ms: 8_000,
                error: "Then the send of \"main\" returns \"injected\"\nit returned failed".into(),
            }),
            logs: vec![crate::timeline::HostLog {
                host: "b".into(),
                window: "±10 s of the failure".into(),
                lines: vec![crate::timeline::LogLine {
                    at_ms: Some(2_599),
                    text: "WARN rejected <bad sig>".into(),
                }],
            }],
            notes: vec![],
        }
    }

    #[test]
    fn every_event_is_drawn_in_time_order_with_the_failure_in_red() {
        let html = render(&sample(), "t1");
        assert!(html.contains("<svg class=\"msc\""), "{html}");
        for label in [
            "SEND main→w1 #3f2a91c0",
            "FAILED w1→main",
            "inject &quot;do the thing&quot;",
        ] {
            assert!(html.contains(label), "{label} in {html}");
        }
        let send = html.find("SEND main→w1").unwrap_or(usize::MAX);
        let failed = html.find("FAILED w1→main").unwrap_or(0);
        let fail = html.find("✗ failing step: Then the send").unwrap_or(0);
        assert!(send < failed && failed < fail, "rows in time order");
        assert!(html.contains("stroke=\"#c62828\" stroke-width=\"2.5\""), "the red line");
        assert!(html.contains("+8.000s"), "the failure's time");
        assert!(
            html.contains("<circle") && html.contains("heartbeat"),
            "the heartbeat dot"
        );
        assert!(
            html.contains("WARN rejected &lt;bad sig&gt;"),
            "log lines escaped in the details"
        );
        assert!(html.contains("data-fail-y="));
    }

    #[test]
    fn a_long_scenario_keeps_the_rows_nearest_its_failure() {
        let mut t = sample();
        let e = t.events[2].clone();
        t.events = (0..3_000)
            .map(|i| Event {
                at_ms: i * 10,
                ..e.clone()
            })
            .collect();
        t.failure = Some(Failure {
            at_ms: 15_000,
            error: "boom".into(),
        });
        let (rows, before, after) = rows(&t);
        assert_eq!(rows.len(), MAX_ROWS);
        assert_eq!(before + after + rows.len(), 3_001);
        assert!(rows.iter().any(|(_, r)| matches!(r, Row::Failure)));
        assert!(after > 0 && before > 0, "{before} {after}");
    }
}
