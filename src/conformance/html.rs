//! The one static HTML page of a conformance run: requirements down, brokers across, one colour
//! per verdict; clicking a cell opens the failing scenarios, their errors and the gateways' log
//! excerpts beneath its row, each failed scenario with its message sequence chart (`chart`).
//! Everything is inline (no external assets), so the page can be attached to a CI run or mailed
//! as is.

use std::fmt::Write as _;
use std::path::Path;

use super::chart;
use super::reports::{RunInfo, xml_escape as esc};
use super::verdict::{Cell, Judgement, Outcome, Verdict};

/// Most lines of a log excerpt shown per scenario.
const LOG_LINES: usize = 120;

const STYLE: &str = r#"
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px;color:#1b1b1b;background:#fafafa}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:22px 0 6px}
.meta{color:#555;margin:2px 0}
.meta code{background:#eee;padding:1px 4px;border-radius:3px}
.banner{margin:14px 0;padding:10px 14px;border-radius:6px;font-weight:600;font-size:16px}
.banner.pass{background:#c8e6c9;color:#1b5e20}.banner.fail{background:#ffcdd2;color:#b71c1c}
.banner.incomplete{background:#fff3cd;color:#664d03}
.banner ul{font-weight:400;font-size:13px;margin:6px 0 0;padding-left:20px}
.partial{background:#fff3cd;color:#664d03;padding:6px 10px;border-radius:4px;margin:8px 0}
.legend span{display:inline-block;padding:2px 8px;margin:0 6px 6px 0;border-radius:3px;font-size:12px}
table{border-collapse:collapse;width:100%;background:#fff}
th,td{border:1px solid #ddd;padding:4px 8px;vertical-align:top;text-align:left}
th{background:#37474f;color:#fff;position:sticky;top:0}
tr.section td{background:#eceff1;font-weight:600;color:#37474f}
td.id{font-family:ui-monospace,Menlo,Consolas,monospace;white-space:nowrap}
td.level{font-size:12px;white-space:nowrap}
td.text{color:#333;font-size:13px}
td.v{text-align:center;font-weight:600;white-space:nowrap;min-width:120px}
td.v.click{cursor:pointer;text-decoration:underline dotted}
.pass{background:#c8e6c9;color:#1b5e20}.fail{background:#ef9a9a;color:#7f0000}
.known{background:#ffe0b2;color:#8a4b00}.skip{background:#e0e0e0;color:#424242}
.nt{background:repeating-linear-gradient(45deg,#fff59d,#fff59d 6px,#fff9c4 6px,#fff9c4 12px);color:#5d4a00}
.ns{background:#f5f5f5;color:#9e9e9e;font-weight:400}
tr.detail{display:none}tr.detail.open{display:table-row}
tr.detail td{background:#fff8e1}
.scn{margin:6px 0 12px}.scn b{font-family:ui-monospace,Menlo,Consolas,monospace}
pre{background:#263238;color:#eceff1;padding:8px;border-radius:4px;max-height:340px;overflow:auto;white-space:pre-wrap;word-break:break-all;font-size:12px;margin:4px 0}
pre.err{background:#4e1f1f}
"#;

// Clicking a cell toggles its detail row; `conformance.html#FWD-1` opens FWD-1's details. An
// opened chart scrolls to its failing step.
const SCRIPT: &str = r#"
function toFailure(root){
  root.querySelectorAll('.msc-wrap[data-fail-y]').forEach(function(w){
    w.scrollTop=Math.max(0,Number(w.dataset.failY)-w.clientHeight*0.75);
  });
}
document.querySelectorAll('td.click').forEach(function(td){
  td.addEventListener('click',function(){
    var row=document.getElementById(td.dataset.detail);
    if(row){row.classList.toggle('open');toFailure(row);}
  });
});
var req=decodeURIComponent(location.hash.slice(1));
document.querySelectorAll('tr.detail').forEach(function(row){
  if(req && row.dataset.req===req){row.classList.add('open');toFailure(row);}
});
document.querySelectorAll('details.msc-passed').forEach(function(d){
  d.addEventListener('toggle',function(){toFailure(d);});
});
"#;

fn class_and_label(selected: bool, c: &Cell) -> (&'static str, &'static str) {
    match c.verdict {
        Verdict::NotTested if !selected => ("ns", "not selected"),
        Verdict::Pass => ("pass", "pass"),
        Verdict::Fail if c.known_failure.is_some() => ("known", "known failure"),
        Verdict::Fail if c.counts => ("fail", "FAIL"),
        Verdict::Fail => ("fail", "fail (not counted)"),
        Verdict::Skip => ("skip", "skip"),
        Verdict::NotTested if c.counts => ("nt", "NOT TESTED"),
        Verdict::NotTested if c.needs.as_deref() == Some(super::verdict::NEEDS_REVIEW) => ("ns", "under review"),
        Verdict::NotTested if c.needs.is_some() => ("ns", "needs another broker"),
        Verdict::NotTested => ("ns", "not tested (not counted)"),
    }
}

fn log_excerpt(out_dir: &Path, rel: &str) -> Option<String> {
    let text = std::fs::read_to_string(out_dir.join(rel)).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let from = lines.len().saturating_sub(LOG_LINES);
    let mut s = String::new();
    if from > 0 {
        let _ = writeln!(s, "… ({from} earlier lines in {rel})");
    }
    s.push_str(&lines[from..].join("\n"));
    Some(s)
}

/// The sequence chart of `file:line` on `broker`, if the run wrote its timeline.
fn chart_of(out_dir: &Path, broker: &str, file: &str, line: usize, uid: &str) -> Option<String> {
    let t = chart::read(out_dir, &chart::rel_path(broker, file, line))?;
    Some(chart::render(&t, uid))
}

fn detail(out_dir: &Path, broker: &str, id: &str, c: &Cell, did: &str) -> String {
    let mut s = format!("<div><b>{}</b>", esc(broker));
    if let Some(k) = &c.known_failure {
        let _ = write!(s, " — known failure (baseline): {}", esc(k));
    }
    if let Some(r) = &c.reason {
        let _ = write!(s, " — {}", esc(r));
    }
    s.push_str("</div>");
    for (k, f) in c.failing.iter().enumerate() {
        let _ = write!(
            s,
            "<div class=\"scn\">Scenario <b>{}</b> <span class=\"meta\">({}:{})</span>",
            esc(&f.name),
            esc(&f.file),
            f.line
        );
        if let Some(e) = &f.error {
            let _ = write!(s, "<pre class=\"err\">{}</pre>", esc(e));
            if !f.tags.is_empty() {
                let _ = write!(
                    s,
                    "<div class=\"meta attribution\">{}</div>",
                    esc(&super::attribution::sentence(id, &f.tags, e))
                );
            }
        }
        if let Some(c) = chart_of(out_dir, broker, &f.file, f.line, &format!("{did}-{k}")) {
            s.push_str(&c);
        }
        match f.log.as_deref().and_then(|rel| log_excerpt(out_dir, rel)) {
            Some(log) => {
                let _ = write!(s, "<div>Gateway log excerpt:</div><pre>{}</pre>", esc(&log));
            }
            None => s.push_str("<div class=\"meta\">no gateway log was saved for this scenario</div>"),
        }
        s.push_str("</div>");
    }
    s
}

/// The failures the baseline covers, each with the baseline's reason (also in its cell's detail).
fn known_failures(j: &Judgement) -> String {
    let known = j.known_failures();
    if known.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "<h2 id=\"known-failures\">Known failures (baseline)</h2>\
         <table><thead><tr><th>Requirement</th><th>Broker</th><th>The baseline's reason</th></tr></thead><tbody>",
    );
    for k in &known {
        let _ = write!(
            s,
            "<tr><td class=\"id\"><a href=\"#{id}\">{id}</a></td><td>{}</td><td class=\"text\">{}</td></tr>",
            esc(&k.broker),
            esc(&k.reason),
            id = esc(&k.requirement)
        );
    }
    s.push_str("</tbody></table>");
    s
}

/// The scenarios left out of the run (NOT TESTED), with where and why.
fn left_out(j: &Judgement) -> String {
    if j.left_out.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "<h2 id=\"left-out\">Not tested: {} scenario(s) left out of this run</h2>\
         <table><thead><tr><th>Where</th><th>Scenario</th><th>Requirements</th><th>Why</th></tr></thead><tbody>",
        j.left_out.len()
    );
    for l in &j.left_out {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{} <span class=\"meta\">({})</span></td><td class=\"id\">{}</td><td class=\"text\">{}</td></tr>",
            esc(&l.scope()),
            esc(&l.name),
            esc(&l.location()),
            esc(&l.requirements.join(", ")),
            esc(&l.reason)
        );
    }
    s.push_str("</tbody></table>");
    s
}

/// The failures of checks under review (CONTRACT §10): reported, not counted.
fn under_review(j: &Judgement) -> String {
    if j.under_review.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "<h2 id=\"under-review\">Under review: {} failure(s) not counted (CONTRACT §10)</h2>\
         <table><thead><tr><th>Broker</th><th>Scenario</th><th>Requirements</th><th>Check under review</th><th>Failed at</th></tr></thead><tbody>",
        j.under_review.len()
    );
    for r in &j.under_review {
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{} <span class=\"meta\">({})</span></td><td class=\"id\">{}</td><td class=\"text\">{}</td><td class=\"text\">{}</td></tr>",
            esc(&r.broker),
            esc(&r.name),
            esc(&r.location),
            esc(&r.requirements.join(", ")),
            esc(&r.under_review),
            esc(r.error.as_deref().and_then(|e| e.lines().next()).unwrap_or_default())
        );
    }
    s.push_str("</tbody></table>");
    s
}

/// The charts of passed scenarios (a run with `--charts all`), one collapsed entry each.
fn passed_charts(j: &Judgement, out_dir: &Path) -> String {
    let mut s = String::new();
    let mut n = 0;
    for (bi, b) in j.brokers.iter().enumerate() {
        for (si, r) in b.scenarios.iter().enumerate() {
            if r.outcome != Outcome::Passed {
                continue;
            }
            let Some(c) = chart_of(out_dir, &b.label, &r.file, r.line, &format!("p{bi}-{si}")) else {
                continue;
            };
            n += 1;
            let _ = write!(
                s,
                "<details class=\"msc-passed\"><summary>{} — {} <span class=\"meta\">({}:{})</span></summary>{c}</details>",
                esc(&b.label),
                esc(&r.name),
                esc(&r.file),
                r.line
            );
        }
    }
    if n == 0 {
        return s;
    }
    format!("<h2 id=\"charts\">Sequence charts of {n} passed scenario(s) (--charts all)</h2>{s}")
}

/// Renders the page; log excerpts are read from `out_dir` (the paths in the judgement are
/// relative to it).
pub fn render(run: &RunInfo, j: &Judgement, out_dir: &Path) -> String {
    let mut s = String::from("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    let _ = write!(
        s,
        "<title>Fleet conformance — {}</title><style>{STYLE}{}</style>\
         <noscript><style>tr.detail{{display:table-row}}</style></noscript></head><body>",
        j.verdict.as_str(),
        chart::STYLE
    );
    s.push_str("<h1>Fleet gateway conformance</h1>");
    let _ = write!(
        s,
        "<div class=\"meta\">Gateway: <code>{}</code>",
        esc(&run.gateway_command)
    );
    if let Some(v) = &run.gateway_version {
        let _ = write!(s, " ({})", esc(v));
    }
    s.push_str("</div>");
    let brokers: Vec<String> = j
        .brokers
        .iter()
        .map(|b| {
            format!(
                "{} ({}){}",
                esc(&b.label),
                esc(b.version.as_deref().unwrap_or("version unknown")),
                b.error
                    .as_ref()
                    .map(|e| format!(" — error: {}", esc(e)))
                    .unwrap_or_default()
            )
        })
        .collect();
    let _ = write!(s, "<div class=\"meta\">Brokers: {}</div>", brokers.join(", "));
    let _ = write!(
        s,
        "<div class=\"meta\">Run {} → {} ({:.0} s) · {} · tags: <code>{}</code> · capabilities: <code>{}</code>{}{}</div>",
        esc(&run.started_at),
        esc(&run.finished_at),
        run.duration_s,
        esc(&run.suite),
        esc(run.tags.as_deref().unwrap_or("(all)")),
        esc(&if run.capabilities.is_empty() {
            "(none)".to_string()
        } else {
            run.capabilities.join(", ")
        }),
        if run.strict { " · strict" } else { "" },
        run.baseline
            .as_ref()
            .map(|b| format!(" · baseline <code>{}</code>", esc(b)))
            .unwrap_or_default()
    );
    let counts: Vec<String> = [Verdict::Pass, Verdict::Fail, Verdict::Skip, Verdict::NotTested]
        .iter()
        .map(|v| format!("{} {}", j.count(*v), v.as_str()))
        .collect();
    if j.passed {
        let _ = write!(s, "<div class=\"banner pass\">PASS — {}</div>", counts.join(" · "));
    } else if j.verdict == super::verdict::RunVerdict::Incomplete {
        let _ = write!(
            s,
            "<div class=\"banner incomplete\">INCOMPLETE — nothing failed; {} requirement(s) could not be judged on \
             these brokers · {}<ul>",
            j.unjudged.len(),
            counts.join(" · ")
        );
        for line in super::verdict::incomplete_lines(&j.unjudged) {
            let _ = write!(s, "<li>{}</li>", esc(&line));
        }
        s.push_str("</ul></div>");
    } else {
        let _ = write!(
            s,
            "<div class=\"banner fail\">FAIL — {} problem(s) · {}<ul>",
            j.problems.len(),
            counts.join(" · ")
        );
        for p in &j.problems {
            let _ = write!(s, "<li>{}</li>", esc(p));
        }
        s.push_str("</ul></div>");
        if !j.unjudged.is_empty() {
            s.push_str("<div class=\"partial\">Besides, not judged on these brokers:<ul>");
            for line in super::verdict::incomplete_lines(&j.unjudged) {
                let _ = write!(s, "<li>{}</li>", esc(&line));
            }
            s.push_str("</ul></div>");
        }
    }
    for g in j.gateway_failures() {
        let _ = write!(
            s,
            "<div class=\"banner fail\">Gateway not usable: {}</div>",
            esc(&g.line)
        );
    }
    if !j.under_review.is_empty() {
        let _ = write!(
            s,
            "<div class=\"partial\">{} failure(s) of checks under review (CONTRACT §10) were not counted: \
             <a href=\"#under-review\">the list below</a>.</div>",
            j.under_review.len()
        );
    }
    if j.partial {
        s.push_str(
            "<div class=\"partial\">Partial run: the tag expression left requirements out (grey cells). \
             This is not a conformance verdict for the whole spec.</div>",
        );
    }
    for u in &j.unconfirmed_baseline {
        let _ = write!(s, "<div class=\"meta\">Baseline entry not confirmed: {}</div>", esc(u));
    }
    if !j.left_out.is_empty() {
        let _ = write!(
            s,
            "<div class=\"partial\">{} scenario(s) were left out of this run and not tested: \
             <a href=\"#left-out\">the list below says which and why</a>.</div>",
            j.left_out.len()
        );
    }
    s.push_str(
        "<div class=\"legend\"><span class=\"pass\">pass</span><span class=\"fail\">FAIL</span>\
         <span class=\"known\">known failure (baseline)</span><span class=\"skip\">skip (capability not declared)</span>\
         <span class=\"nt\">NOT TESTED (counts as a failure)</span><span class=\"ns\">not selected</span>\
         <span>click a cell for its scenarios and gateway logs</span></div>",
    );
    s.push_str("<table><thead><tr><th>Requirement</th><th>Level</th><th>Text</th>");
    for b in &j.brokers {
        let _ = write!(s, "<th>{}</th>", esc(&b.label));
    }
    s.push_str("</tr></thead><tbody>");
    let cols = 3 + j.brokers.len();
    let mut section = "";
    for (ri, r) in j.requirements.iter().enumerate() {
        if r.section != section {
            section = &r.section;
            let _ = write!(
                s,
                "<tr class=\"section\"><td colspan=\"{cols}\">§{}</td></tr>",
                esc(section)
            );
        }
        let _ = write!(
            s,
            "<tr id=\"{id}\"><td class=\"id\">{id}</td><td class=\"level\">{}</td><td class=\"text\">{}</td>",
            r.level,
            esc(&r.text),
            id = esc(&r.id)
        );
        let mut details = String::new();
        for (ci, c) in r.cells.iter().enumerate() {
            let (class, label) = class_and_label(r.selected, c);
            let counts = if c.passed + c.failed > 0 {
                format!(" <small>({}/{})</small>", c.passed, c.passed + c.failed)
            } else {
                String::new()
            };
            let title = match (&c.known_failure, &c.reason) {
                (Some(k), _) => format!("known failure (baseline): {k}"),
                (None, Some(r)) => r.clone(),
                (None, None) => String::new(),
            };
            if c.failing.is_empty() && c.reason.is_none() {
                let _ = write!(s, "<td class=\"v {class}\">{label}{counts}</td>");
            } else {
                let did = format!("d{ri}-{ci}");
                let _ = write!(
                    s,
                    "<td class=\"v {class} click\" data-detail=\"{did}\" title=\"{}\">{label}{counts}</td>",
                    esc(&title)
                );
                let _ = write!(
                    details,
                    "<tr class=\"detail\" id=\"{did}\" data-req=\"{}\"><td colspan=\"{cols}\">{}</td></tr>",
                    esc(&r.id),
                    detail(
                        out_dir,
                        &j.brokers.get(ci).map(|b| b.label.clone()).unwrap_or_default(),
                        &r.id,
                        c,
                        &did
                    )
                );
            }
        }
        s.push_str("</tr>");
        s.push_str(&details);
    }
    s.push_str("</tbody></table>");
    s.push_str(&known_failures(j));
    s.push_str(&left_out(j));
    s.push_str(&under_review(j));
    s.push_str(&passed_charts(j, out_dir));
    let _ = writeln!(s, "<script>{SCRIPT}</script></body></html>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::registry::Level;
    use crate::conformance::reports;
    use crate::conformance::verdict::{BrokerRun, LeftOutScenario, Outcome, Row, ScenarioResult};

    fn sample() -> (RunInfo, Judgement) {
        let failing = ScenarioResult {
            name: "a <hostile> brief".into(),
            file: "features/forward_path.feature".into(),
            line: 12,
            tags: vec!["FWD-1".into()],
            outcome: Outcome::Failed,
            error: Some("Then it lands\nassertion failed".into()),
            log: Some("container-rabbitmq/logs/forward_path.feature-12.log".into()),
        };
        let cell = |verdict, counts, failing: Vec<ScenarioResult>, reason: Option<&str>| Cell {
            broker: "container:rabbitmq".into(),
            verdict,
            passed: 0,
            failed: failing.len(),
            reason: reason.map(str::to_string),
            needs: None,
            known_failure: None,
            counts,
            failing,
        };
        let row = |id: &str, level, cells| Row {
            id: id.into(),
            level,
            section: "5. Forward path".into(),
            text: format!("text of {id}"),
            selected: true,
            cells,
        };
        let j = Judgement {
            brokers: vec![BrokerRun {
                label: "container:rabbitmq".into(),
                kind: "rabbitmq".into(),
                version: Some("RabbitMQ 3.10.8".into()),
                error: None,
                scenarios: Vec::new(),
                left_out: Vec::new(),
            }],
            requirements: vec![
                row(
                    "FWD-1",
                    Level::Must,
                    vec![cell(Verdict::Fail, true, vec![failing], None)],
                ),
                row("FWD-2", Level::Must, vec![cell(Verdict::Pass, false, vec![], None)]),
                row("SEC-2", Level::Must, {
                    let mut known = cell(
                        Verdict::Fail,
                        false,
                        vec![ScenarioResult {
                            name: "a login cannot publish presence for another host".into(),
                            file: "features/security.feature".into(),
                            line: 30,
                            tags: vec!["SEC-2".into()],
                            outcome: Outcome::Failed,
                            error: Some("Then the publish is refused".into()),
                            log: None,
                        }],
                        None,
                    );
                    known.known_failure = Some("LavinMQ has no topic permissions".into());
                    vec![known]
                }),
                row(
                    "FWD-7",
                    Level::Should,
                    vec![cell(
                        Verdict::Skip,
                        false,
                        vec![],
                        Some("needs capability submit-confirm"),
                    )],
                ),
            ],
            stale_baseline: Vec::new(),
            unconfirmed_baseline: Vec::new(),
            problems: vec!["FWD-1 (MUST) fails on container:rabbitmq: \"a <hostile> brief\"".into()],
            partial: false,
            left_out: vec![LeftOutScenario {
                broker: Some("container:rabbitmq".into()),
                name: "gateways reconnect after a <broker> restart".into(),
                file: Some("features/broker_restart.feature".into()),
                line: 40,
                requirements: vec!["CON-3".into()],
                reason: "the url provider cannot restart the broker".into(),
            }],
            unjudged: Vec::new(),
            under_review: vec![crate::conformance::verdict::ReviewedFailure {
                broker: "container:rabbitmq".into(),
                name: "the agent has exited".into(),
                location: "features/herdr_faults.feature:33".into(),
                requirements: vec!["FWD-2".into(), "FWD-4".into()],
                error: Some("Then herdr records no inject\n1 inject".into()),
                under_review: "@herdr-agent-gone — not in SPEC yet".into(),
            }],
            verdict: crate::conformance::verdict::RunVerdict::Fail,
            passed: false,
        };
        let info = RunInfo {
            suite: "fleet-conformance 0.1.0".into(),
            suite_commit: None,
            gateway_command: "their-gateway --flag".into(),
            gateway_version: None,
            tags: None,
            cucumber_tags: None,
            capabilities: Vec::new(),
            baseline: None,
            strict: false,
            time_scale: 1.0,
            started_at: "2026-01-01T00:00:00Z".into(),
            finished_at: "2026-01-01T00:02:00Z".into(),
            duration_s: 120.0,
        };
        (info, j)
    }

    #[test]
    fn the_page_shows_the_matrix_the_failure_and_its_log_inline() {
        let dir = std::env::temp_dir().join(format!("fleet-html-{}", uuid::Uuid::new_v4().simple()));
        let logs = dir.join("container-rabbitmq").join("logs");
        std::fs::create_dir_all(&logs).expect("temp dir");
        std::fs::write(logs.join("forward_path.feature-12.log"), "gateway b: inject <failed>\n").expect("log");
        let (info, j) = sample();
        let page = render(&info, &j, &dir);
        let _ = std::fs::remove_dir_all(&dir);
        assert!(page.starts_with("<!DOCTYPE html>"));
        assert!(page.contains("FAIL — 1 problem(s)"));
        assert!(page.contains("<td class=\"v fail click\""), "a clickable failing cell");
        assert!(page.contains("a &lt;hostile&gt; brief"), "names are escaped");
        assert!(
            page.contains("gateway b: inject &lt;failed&gt;"),
            "the log excerpt is inline"
        );
        assert!(page.contains("needs capability submit-confirm"));
        assert!(
            page.contains("gateways reconnect after a &lt;broker&gt; restart")
                && page.contains("the url provider cannot restart the broker")
                && page.contains("1 scenario(s) were left out"),
            "the left-out scenario is listed with why"
        );
        assert!(
            page.contains("(features/broker_restart.feature:40)"),
            "a left-out scenario names its feature file"
        );
        assert!(
            page.contains("1 failure(s) of checks under review")
                && page.contains("@herdr-agent-gone — not in SPEC yet")
                && page.contains("Then herdr records no inject"),
            "the failure under review is listed, not counted"
        );
        assert!(
            page.contains("<td class=\"text\">LavinMQ has no topic permissions</td>"),
            "the known failure's baseline reason is listed"
        );
        assert!(page.contains("title=\"known failure (baseline): LavinMQ has no topic permissions\""));
        assert!(
            !page.contains("<link") && !page.contains("src=\"http"),
            "no external assets"
        );
    }

    #[test]
    fn junit_fails_what_counts_and_skips_the_rest() {
        let (_, j) = sample();
        let x = reports::junit(&j);
        assert!(
            x.contains("tests=\"6\" failures=\"1\" errors=\"0\" skipped=\"4\""),
            "{x}"
        );
        assert!(x.contains("<failure message=\"FWD-1 fail\">"));
        assert!(x.contains("<skipped message=\"needs capability submit-confirm\"/>"));
        assert!(x.contains("<skipped message=\"known failure (baseline): LavinMQ has no topic permissions\"/>"));
        assert!(
            x.contains(
                "<testcase classname=\"container:rabbitmq.left-out\" name=\"gateways reconnect after a &lt;broker&gt; \
                 restart (features/broker_restart.feature:40; CON-3)\">\n      <skipped message=\"NOT TESTED, left out on container:rabbitmq: \
                 the url provider cannot restart the broker\"/>"
            ),
            "{x}"
        );
    }

    #[test]
    fn conformance_json_carries_the_run_and_every_cell() {
        let (info, j) = sample();
        let v: serde_json::Value = serde_json::from_str(&reports::json(&info, &j).expect("json")).expect("parses");
        assert_eq!(v["run"]["gateway_command"], "their-gateway --flag");
        assert_eq!(v["verdict"]["passed"], false);
        assert_eq!(v["verdict"]["counts"]["fail"], 2, "FWD-1 and the known failure");
        assert_eq!(v["brokers"][0]["version"], "RabbitMQ 3.10.8");
        assert_eq!(v["requirements"][0]["cells"][0]["verdict"], "fail");
        assert_eq!(v["requirements"][0]["cells"][0]["failing"][0]["line"], 12);
        assert_eq!(v["requirements"][3]["cells"][0]["verdict"], "skip");
        assert_eq!(v["left_out"][0]["broker"], "container:rabbitmq");
        assert_eq!(v["left_out"][0]["reason"], "the url provider cannot restart the broker");
        assert_eq!(v["left_out"][0]["requirements"][0], "CON-3");
        assert_eq!(v["left_out"][0]["file"], "features/broker_restart.feature");
        assert_eq!(v["verdict"]["verdict"], "FAIL");
        assert_eq!(
            v["verdict"]["under_review"][0]["location"],
            "features/herdr_faults.feature:33"
        );
        assert_eq!(v["verdict"]["known_failures"][0]["requirement"], "SEC-2");
        assert_eq!(
            v["verdict"]["known_failures"][0]["reason"],
            "LavinMQ has no topic permissions"
        );
    }

    #[test]
    fn the_terminal_lists_the_left_out_scenarios_and_the_known_failures_reasons() {
        let (info, j) = sample();
        let t = reports::text(&info, &j);
        assert!(t.contains("FAIL (known)"), "{t}");
        assert!(
            t.contains("known failure on container:rabbitmq (baseline reason below)"),
            "{t}"
        );
        assert!(
            t.contains("  - SEC-2 on container:rabbitmq: LavinMQ has no topic permissions\n"),
            "{t}"
        );
        assert!(
            t.contains(
                "NOT TESTED — 1 scenario(s) left out of this run:\n  - on container:rabbitmq: \
                 \"gateways reconnect after a <broker> restart\" (features/broker_restart.feature:40; CON-3): the url \
                 provider cannot restart the broker\n"
            ),
            "{t}"
        );
        let verdict_at = t.find("VERDICT:").expect("a verdict");
        assert!(
            t.find("NOT TESTED —").is_some_and(|i| i < verdict_at),
            "listed before the verdict"
        );
    }

    #[test]
    fn an_incomplete_run_says_what_could_not_be_judged_and_on_which_broker_it_would_be() {
        let (info, mut j) = sample();
        j.problems.clear();
        j.under_review.clear();
        j.requirements.retain(|r| r.id == "FWD-2");
        j.unjudged = vec![
            crate::conformance::verdict::Unjudged {
                requirement: "CLU-2".into(),
                level: Level::Must,
                capability: Some("cluster".into()),
                needs: vec!["a cluster broker (process:rabbitmq-cluster, …)".into()],
            },
            crate::conformance::verdict::Unjudged {
                requirement: "CLU-6".into(),
                level: Level::Must,
                capability: Some("cluster".into()),
                needs: vec!["container:rabbitmq-cluster".into()],
            },
        ];
        j.verdict = crate::conformance::verdict::RunVerdict::Incomplete;
        let t = reports::text(&info, &j);
        assert!(
            t.contains(
                "VERDICT: INCOMPLETE — nothing failed; 2 requirement(s) could not be judged on these brokers:\n  \
                 INCOMPLETE: capability cluster: CLU-2 needs a cluster broker (process:rabbitmq-cluster, …)\n  \
                 INCOMPLETE: capability cluster: CLU-6 needs container:rabbitmq-cluster\n"
            ),
            "{t}"
        );
        let page = render(&info, &j, &std::env::temp_dir());
        assert!(page.contains("<title>Fleet conformance — INCOMPLETE</title>"));
        assert!(page.contains("<div class=\"banner incomplete\">INCOMPLETE — nothing failed"));
        assert!(page.contains("<li>capability cluster: CLU-6 needs container:rabbitmq-cluster</li>"));
        let v: serde_json::Value = serde_json::from_str(&reports::json(&info, &j).expect("json")).expect("parses");
        assert_eq!(v["verdict"]["verdict"], "INCOMPLETE");
        assert_eq!(v["verdict"]["incomplete"][1]["requirement"], "CLU-6");
        assert_eq!(v["verdict"]["incomplete"][1]["capability"], "cluster");
    }
}
