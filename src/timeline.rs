//! One scenario as a message sequence chart's data: what the wire, the fake herdr and the failing
//! step said, each at its time since the scenario began.
//!
//! Why it exists: a failed scenario's error and gateway log say *that* something went wrong, but
//! the order of what crossed the wire — which brief went where, which INJECTED never came back,
//! which message was dead-lettered, what was typed into which pane, and where the failing step
//! stood among all that — is what a reader reconstructs by hand from four places. The suite
//! already sees all of it; this module keeps it per scenario as `logs/<feature>-<line>.timeline.json`
//! beside the log excerpt (written by the suite run for failed scenarios, for all with
//! `FLEET_E2E_CHARTS=all`), and `conformance::chart` draws it into `conformance.html`.
//!
//! The parts: this file is the model (what the JSON holds) and the gateway-log reading;
//! [`recorder`] taps the scenario's vhost (RabbitMQ's firehose and the dead-letter exchange,
//! invisible to the steps); [`build`] turns what was recorded into lanes and arrows; [`scenario`]
//! puts a finished scenario's parts together.

use serde::{Deserialize, Serialize};

pub mod build;
pub mod kept;
pub mod recorder;
pub mod scenario;

/// Which scenarios get a timeline: `failures` (the default) or `all`.
pub const CHARTS_VAR: &str = "FLEET_E2E_CHARTS";

/// Whether `FLEET_E2E_CHARTS=all` asks for the timelines of passed scenarios too.
pub fn charts_all() -> bool {
    std::env::var(CHARTS_VAR).is_ok_and(|v| v.trim().eq_ignore_ascii_case("all"))
}

/// Name of a scenario's timeline file in `<broker dir>/logs/`, beside its log excerpt
/// (`forward_path.feature-12.timeline.json`).
pub fn file_name(feature_file: &str, line: usize) -> String {
    let base = std::path::Path::new(feature_file)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| feature_file.to_string());
    format!("{base}-{line}.timeline.json")
}

/// One scenario's timeline: what the JSON file holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub scenario: String,
    /// `features/x.feature`
    pub feature: String,
    pub line: usize,
    pub passed: bool,
    /// Unix ms when the scenario began (its world was made): every `at_ms` counts from here.
    pub started_unix_ms: u64,
    /// How long the scenario ran until its end was recorded.
    pub duration_ms: u64,
    /// The lifelines, left to right.
    pub lanes: Vec<Lane>,
    /// Everything that happened, in time order.
    pub events: Vec<Event>,
    /// The failing step, for a failed scenario.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Per host, the gateway's log lines around the failure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<HostLog>,
    /// What the chart cannot show and why (no firehose on this broker, events dropped, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// A lifeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lane {
    /// What events name in `from` / `to`: `probe`, `broker`, `gw:<host>`, `pane:<host>:<pane>`.
    pub id: String,
    pub label: String,
    pub kind: LaneKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneKind {
    Probe,
    Broker,
    Gateway,
    Pane,
}

/// One thing that happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub at_ms: u64,
    pub kind: EventKind,
    /// Lane ids.
    pub from: String,
    pub to: String,
    /// What the arrow says (`SEND main→w1`).
    pub label: String,
    /// The first 8 characters of the msgId, when the event is an envelope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub msg_id: Option<String>,
    /// More, shown on hover (exchange, routing key, traceId, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// An envelope the broker routed.
    Envelope,
    /// A PRESENCE that repeats its sender's last one (a heartbeat): a dot, not an arrow.
    Heartbeat,
    /// A publish the broker routed to no queue.
    Unroutable,
    /// A dead letter (copied from `bridge.dlx`).
    DeadLetter,
    /// A `pane.send_input` the fake herdr accepted.
    Inject,
    /// A `pane.send_input` the fake herdr refused (nothing typed).
    InjectRefused,
}

/// The failing step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// When the step failed.
    pub at_ms: u64,
    /// The step's error.
    pub error: String,
}

/// One gateway's log lines around the failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostLog {
    pub host: String,
    /// What the lines are: `±10 s of the failure`, or `the last 40 lines (no timestamps)`.
    pub window: String,
    pub lines: Vec<LogLine>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// Since the scenario began, when the line carries a timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_ms: Option<u64>,
    pub text: String,
}

/// How far either side of the failure log lines are kept.
pub const LOG_WINDOW_MS: u64 = 10_000;
/// Most lines kept per host.
pub const LOG_LINES_MAX: usize = 200;

/// The lines of `log` within [`LOG_WINDOW_MS`] of `at_ms` (since `started_unix_ms`), read by
/// their leading RFC 3339 timestamp (`2026-01-02T03:04:05.678Z …`, ANSI colours allowed); a line
/// without one belongs to the line before it. A log with no timestamps at all gives its last
/// lines (the failure is where the log ends: the gateways are stopped right after it).
pub fn log_near(host: &str, log: &str, started_unix_ms: u64, at_ms: u64) -> HostLog {
    let mut stamped = Vec::new();
    let mut any = false;
    let mut last: Option<u64> = None;
    for line in log.lines() {
        let text = strip_ansi(line);
        if let Some(unix) = leading_timestamp_ms(&text) {
            any = true;
            last = Some(unix.saturating_sub(started_unix_ms));
            // A line from before the scenario (a log appended to) reads as its start.
        }
        stamped.push(LogLine { at_ms: last, text });
    }
    if !any {
        let from = stamped.len().saturating_sub(40);
        return HostLog {
            host: host.to_string(),
            window: format!(
                "the last {} lines (the log carries no timestamps)",
                stamped.len() - from
            ),
            lines: stamped.split_off(from),
        };
    }
    let (lo, hi) = (at_ms.saturating_sub(LOG_WINDOW_MS), at_ms + LOG_WINDOW_MS);
    let mut lines: Vec<LogLine> = stamped
        .into_iter()
        .filter(|l| l.at_ms.is_some_and(|t| (lo..=hi).contains(&t)))
        .collect();
    let cut = lines.len().saturating_sub(LOG_LINES_MAX);
    let lines = lines.split_off(cut);
    HostLog {
        host: host.to_string(),
        window: format!(
            "±{} s of the failure{}",
            LOG_WINDOW_MS / 1000,
            if cut > 0 {
                format!(", its last {LOG_LINES_MAX} lines")
            } else {
                String::new()
            }
        ),
        lines,
    }
}

/// `line` without ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The Unix ms of an RFC 3339 UTC timestamp among a line's first 40 characters
/// (`2026-01-02T03:04:05.678901Z`; a `+hh:mm` offset is honoured).
pub fn leading_timestamp_ms(line: &str) -> Option<u64> {
    let head: String = line.chars().take(40).collect();
    let b = head.as_bytes();
    let start = (0..b.len().saturating_sub(19)).find(|&i| {
        b[i].is_ascii_digit() && b.get(i + 4) == Some(&b'-') && b.get(i + 10).is_some_and(|c| *c == b'T' || *c == b' ')
    })?;
    let s = &head[start..];
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|x| x.parse::<i64>().ok());
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if s.as_bytes().get(13) != Some(&b':') || s.as_bytes().get(16) != Some(&b':') {
        return None;
    }
    let rest = &s[19..];
    let mut ms = 0i64;
    let mut tail = rest;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits: String = frac.chars().take_while(char::is_ascii_digit).collect();
        let first3: String = digits.chars().chain("000".chars()).take(3).collect();
        ms = first3.parse().ok()?;
        tail = &frac[digits.len()..];
    }
    let offset_min = match tail.chars().next() {
        Some('+') | Some('-') if tail.len() >= 6 => {
            let sign = if tail.starts_with('-') { -1 } else { 1 };
            let oh: i64 = tail.get(1..3)?.parse().ok()?;
            let om: i64 = tail.get(4..6)?.parse().ok()?;
            sign * (oh * 60 + om)
        }
        _ => 0,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_min * 60;
    u64::try_from(secs * 1000 + ms).ok()
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_read_with_fractions_offsets_and_colours() {
        assert_eq!(leading_timestamp_ms("1970-01-01T00:00:01.5Z x"), Some(1500));
        assert_eq!(
            leading_timestamp_ms("2026-01-02T03:04:05.678901Z  INFO fleet: up"),
            Some(1_767_323_045_678)
        );
        assert_eq!(leading_timestamp_ms("1970-01-01T01:00:00+01:00 x"), Some(0));
        assert_eq!(leading_timestamp_ms("no time here"), None);
        let coloured = strip_ansi("\u{1b}[2m2026-01-02T03:04:05.000Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m up");
        assert_eq!(coloured, "2026-01-02T03:04:05.000Z  INFO up");
    }

    #[test]
    fn the_log_near_a_failure_keeps_its_window_and_continuation_lines() {
        let start = 1_767_323_045_000;
        let log = "2026-01-02T03:04:05.000Z INFO start\n\
                   2026-01-02T03:04:30.000Z WARN rejected m1\n  caused by: bad sig\n\
                   2026-01-02T03:04:50.000Z INFO later\n";
        let near = log_near("a", log, start, 26_000);
        let texts: Vec<&str> = near.lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            ["2026-01-02T03:04:30.000Z WARN rejected m1", "  caused by: bad sig"]
        );
        assert_eq!(near.lines[1].at_ms, Some(25_000));
        let plain = log_near("b", "one\ntwo\n", start, 1_000);
        assert_eq!(plain.lines.len(), 2);
        assert!(plain.window.contains("no timestamps"), "{}", plain.window);
    }

    #[test]
    fn the_file_sits_beside_the_log_excerpt() {
        assert_eq!(
            file_name("features/forward_path.feature", 12),
            "forward_path.feature-12.timeline.json"
        );
    }
}
