//! The machine-readable and terminal reports of a conformance run: `conformance.json`, a JUnit
//! XML with one test case per requirement × broker (for CI), and the text summary the runner
//! prints. The HTML page is in [`super::html`].

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::verdict::{Judgement, Verdict};

/// What was run, for the record.
#[derive(Debug, Clone, Serialize)]
pub struct RunInfo {
    /// `fleet-conformance <version>`
    pub suite: String,
    /// The suite's git commit, when it can be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suite_commit: Option<String>,
    pub gateway_command: String,
    /// What `<gateway> --version` printed, when it printed something.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway_version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<String>,
    /// The tag expression cucumber was given (tags plus undeclared capabilities left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cucumber_tags: Option<String>,
    pub capabilities: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline: Option<String>,
    pub strict: bool,
    pub time_scale: f64,
    pub started_at: String,
    pub finished_at: String,
    pub duration_s: f64,
}

/// `conformance.json`: the run, the brokers, every requirement with its cells, the verdict (with
/// the known failures and the baseline's reasons) and the scenarios left out with why.
#[derive(Serialize)]
struct Document<'a> {
    run: &'a RunInfo,
    verdict: Summary<'a>,
    brokers: &'a [super::verdict::BrokerRun],
    requirements: &'a [super::verdict::Row],
    /// Scenarios left out of the run (NOT TESTED), with why.
    left_out: &'a [super::verdict::LeftOutScenario],
}

#[derive(Serialize)]
struct Summary<'a> {
    /// PASS, FAIL or INCOMPLETE.
    verdict: super::verdict::RunVerdict,
    passed: bool,
    partial: bool,
    counts: std::collections::BTreeMap<&'static str, usize>,
    problems: &'a [String],
    stale_baseline: &'a [String],
    unconfirmed_baseline: &'a [String],
    /// Failures the baseline covers, with its reasons.
    known_failures: Vec<super::verdict::KnownFailureSeen>,
    /// Requirements the run had to judge and these brokers could not (INCOMPLETE), with what
    /// would judge them.
    incomplete: &'a [super::verdict::Unjudged],
    /// Failures of checks under review (CONTRACT §10): reported, not counted.
    under_review: &'a [super::verdict::ReviewedFailure],
    /// Scenarios that failed on the gateway process itself, one line per broker and kind.
    gateway: Vec<super::verdict::GatewayFailures>,
}

const VERDICTS: [Verdict; 4] = [Verdict::Pass, Verdict::Fail, Verdict::Skip, Verdict::NotTested];

/// The `conformance.json` document (pretty, fields in a reading order: run, verdict, brokers,
/// requirements).
pub fn json(run: &RunInfo, j: &Judgement) -> Result<String, serde_json::Error> {
    let doc = Document {
        run,
        verdict: Summary {
            verdict: j.verdict,
            passed: j.passed,
            partial: j.partial,
            counts: VERDICTS.iter().map(|v| (v.as_str(), j.count(*v))).collect(),
            problems: &j.problems,
            stale_baseline: &j.stale_baseline,
            unconfirmed_baseline: &j.unconfirmed_baseline,
            known_failures: j.known_failures(),
            incomplete: &j.unjudged,
            under_review: &j.under_review,
            gateway: j.gateway_failures(),
        },
        brokers: &j.brokers,
        requirements: &j.requirements,
        left_out: &j.left_out,
    };
    serde_json::to_string_pretty(&doc)
}

/// Escapes text for XML content and attributes, dropping characters XML 1.0 cannot carry.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one test suite per broker, one test case per requirement. A failing or not-tested
/// cell that counts against the run is a `<failure>`; skip, not selected and known failures (with
/// the baseline's reason) are `<skipped>`. Each scenario left out on that broker is one more
/// `<skipped>` test case (class `<broker>.left-out`) with why, so a CI page shows it even where
/// its requirement passed through other scenarios.
pub fn junit(j: &Judgement) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"fleet-conformance\">\n");
    for (i, b) in j.brokers.iter().enumerate() {
        let cells: Vec<_> = j
            .requirements
            .iter()
            .filter_map(|r| Some((r, r.cells.get(i)?)))
            .collect();
        let left_out: Vec<_> = j
            .left_out
            .iter()
            .filter(|l| l.broker.as_ref().is_none_or(|name| *name == b.label))
            .collect();
        let failures = cells.iter().filter(|(_, c)| c.counts).count();
        let reviewed = j.under_review.iter().filter(|r| r.broker == b.label).count();
        let skipped = cells
            .iter()
            .filter(|(_, c)| !c.counts && c.verdict != Verdict::Pass)
            .count()
            + left_out.len()
            + reviewed;
        let _ = writeln!(
            s,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\" skipped=\"{skipped}\">",
            xml_escape(&format!("conformance on {}", b.label)),
            cells.len() + left_out.len() + reviewed
        );
        for (r, c) in cells {
            let _ = write!(
                s,
                "    <testcase classname=\"{}\" name=\"{}\"",
                xml_escape(&format!("{}.{}", b.label, r.level)),
                xml_escape(&format!("{} {}", r.id, r.text))
            );
            let detail = || {
                let mut d = String::new();
                if let Some(reason) = &c.reason {
                    d.push_str(reason);
                    d.push('\n');
                }
                for f in &c.failing {
                    let _ = writeln!(d, "{}:{} {}", f.file, f.line, f.name);
                    if let Some(e) = &f.error {
                        let _ = writeln!(d, "{e}");
                    }
                }
                d
            };
            if c.counts {
                let _ = writeln!(
                    s,
                    ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                    xml_escape(&format!("{} {}", r.id, c.verdict.as_str())),
                    xml_escape(&detail())
                );
            } else if c.verdict != Verdict::Pass {
                let why = c
                    .known_failure
                    .as_ref()
                    .map(|k| format!("known failure (baseline): {k}"))
                    .or_else(|| c.reason.clone())
                    .unwrap_or_else(|| c.verdict.as_str().to_string());
                let _ = writeln!(
                    s,
                    ">\n      <skipped message=\"{}\"/>\n    </testcase>",
                    xml_escape(&why)
                );
            } else {
                s.push_str("/>\n");
            }
        }
        for l in left_out {
            let _ = writeln!(
                s,
                "    <testcase classname=\"{}\" name=\"{}\">\n      <skipped message=\"{}\"/>\n    </testcase>",
                xml_escape(&format!("{}.left-out", b.label)),
                xml_escape(&format!("{} ({}; {})", l.name, l.location(), l.requirements.join(", "))),
                xml_escape(&format!("NOT TESTED, left out {}: {}", l.scope(), l.reason))
            );
        }
        for r in j.under_review.iter().filter(|r| r.broker == b.label) {
            let _ = writeln!(
                s,
                "    <testcase classname=\"{}\" name=\"{}\">\n      <skipped message=\"{}\"/>\n    </testcase>",
                xml_escape(&format!("{}.under-review", b.label)),
                xml_escape(&format!("{} ({}; {})", r.name, r.location, r.requirements.join(", "))),
                xml_escape(&format!(
                    "UNDER REVIEW, failed and not counted (CONTRACT §10): {}\n{}",
                    r.under_review,
                    r.error.as_deref().unwrap_or_default()
                ))
            );
        }
        s.push_str("  </testsuite>\n");
    }
    s.push_str("</testsuites>\n");
    s
}

/// The terminal summary: requirements down, brokers across, then the problems and the verdict.
pub fn text(run: &RunInfo, j: &Judgement) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Conformance of `{}`", run.gateway_command);
    for b in &j.brokers {
        let _ = writeln!(
            s,
            "  broker {} ({}){}",
            b.label,
            b.version.as_deref().unwrap_or("version unknown"),
            b.error.as_ref().map(|e| format!(" — ERROR: {e}")).unwrap_or_default()
        );
    }
    let _ = write!(s, "\n  {:<7} {:<7}", "req", "level");
    for b in &j.brokers {
        let _ = write!(s, " {:<22}", b.label);
    }
    s.push('\n');
    for r in &j.requirements {
        let _ = write!(s, "  {:<7} {:<7}", r.id, r.level.to_string());
        let mut notes = Vec::new();
        for c in &r.cells {
            if !r.selected {
                let _ = write!(s, " {:<22}", "-");
                continue;
            }
            let mark = match (c.verdict, c.known_failure.is_some(), c.counts) {
                (Verdict::Fail, true, _) => "FAIL (known)",
                (Verdict::Fail, _, true) => "FAIL",
                (Verdict::Fail, _, false) => "fail (not counted)",
                (Verdict::NotTested, _, true) => "NOT TESTED",
                (Verdict::NotTested, _, _) if c.needs.as_deref() == Some(super::verdict::NEEDS_REVIEW) => {
                    "under review"
                }
                (Verdict::NotTested, _, _) if c.needs.is_some() => "needs another broker",
                (v, _, _) => v.as_str(),
            };
            let _ = write!(s, " {mark:<22}");
            if c.known_failure.is_some() {
                let note = format!("known failure on {} (baseline reason below)", c.broker);
                if !notes.contains(&note) {
                    notes.push(note);
                }
            }
            if let Some(reason) = &c.reason
                && !notes.contains(reason)
            {
                notes.push(reason.clone());
            }
        }
        if !notes.is_empty() {
            let _ = write!(s, " {}", notes.join("; "));
        }
        s.push('\n');
    }
    let counts: Vec<String> = VERDICTS
        .iter()
        .map(|v| format!("{} {}", j.count(*v), v.as_str()))
        .collect();
    let _ = writeln!(s, "\n  cells: {}", counts.join(", "));
    for u in &j.unconfirmed_baseline {
        let _ = writeln!(s, "  baseline entry not confirmed: {u}");
    }
    let known = j.known_failures();
    if !known.is_empty() {
        let _ = writeln!(
            s,
            "\n  KNOWN FAILURES (the baseline's reasons; they do not fail the run):"
        );
        for k in &known {
            let _ = writeln!(s, "  - {} on {}: {}", k.requirement, k.broker, k.reason);
        }
    }
    if !j.left_out.is_empty() {
        let _ = writeln!(
            s,
            "\n  NOT TESTED — {} scenario(s) left out of this run:",
            j.left_out.len()
        );
        for l in &j.left_out {
            let _ = writeln!(
                s,
                "  - {}: \"{}\" ({}; {}): {}",
                l.scope(),
                l.name,
                l.location(),
                if l.requirements.is_empty() {
                    "no requirement".to_string()
                } else {
                    l.requirements.join(", ")
                },
                l.reason
            );
        }
    }
    if !j.under_review.is_empty() {
        let _ = writeln!(
            s,
            "\n  UNDER REVIEW — {} failure(s) of checks CONTRACT §10 lists as under review (reported, not counted; \
             please report them):",
            j.under_review.len()
        );
        for r in &j.under_review {
            let _ = writeln!(
                s,
                "  - on {}: \"{}\" ({}; {}): {}",
                r.broker,
                r.name,
                r.location,
                r.requirements.join(", "),
                r.under_review
            );
            if let Some(step) = r.error.as_deref().and_then(|e| e.lines().next()) {
                let _ = writeln!(s, "      failed at: {step}");
            }
        }
    }
    if !j.unjudged.is_empty() {
        let _ = writeln!(
            s,
            "\n  NOT JUDGED ON THESE BROKERS — {} requirement(s) the run had to judge (not a failure of the gateway):",
            j.unjudged.len()
        );
        for line in super::verdict::incomplete_lines(&j.unjudged) {
            let _ = writeln!(s, "  - {line}");
        }
    }
    if j.partial {
        let left_out = j.requirements.iter().filter(|r| !r.selected).count();
        let _ = writeln!(
            s,
            "  PARTIAL RUN: --tags left {left_out} requirement(s) out (marked -); this is no conformance verdict for \
             the whole spec"
        );
    }
    let gateway = j.gateway_failures();
    if !gateway.is_empty() {
        let _ = writeln!(
            s,
            "\n  GATEWAY NOT USABLE — scenarios that failed on the gateway process itself, whatever they check:"
        );
        for g in &gateway {
            let _ = writeln!(s, "  - {}", g.line);
        }
    }
    let partial = if j.partial { " (partial run)" } else { "" };
    match j.verdict {
        super::verdict::RunVerdict::Pass => {
            let _ = writeln!(s, "VERDICT: PASS{partial}");
        }
        super::verdict::RunVerdict::Incomplete => {
            let _ = writeln!(
                s,
                "VERDICT: INCOMPLETE{partial} — nothing failed; {} requirement(s) could not be judged on these brokers:",
                j.unjudged.len()
            );
            for line in super::verdict::incomplete_lines(&j.unjudged) {
                let _ = writeln!(s, "  INCOMPLETE: {line}");
            }
        }
        super::verdict::RunVerdict::Fail => {
            let _ = writeln!(s, "VERDICT: FAIL ({} problem(s))", j.problems.len());
            for p in &j.problems {
                let _ = writeln!(s, "  - {p}");
            }
        }
    }
    s
}

/// RFC 3339 UTC time of `t` (second precision).
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_utc_times() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_709_210_096)),
            "2024-02-29T12:34:56Z"
        );
    }

    #[test]
    fn escapes_xml() {
        assert_eq!(xml_escape("a<b & \"c\"\u{1b}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
