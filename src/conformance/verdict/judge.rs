//! Judging: every requirement of the registry on every broker's run, against the catalogue (what
//! could have run), the run's `--tags` selection, the declared capabilities, the baseline and
//! `--strict` — the cells, the problems that fail the run, stale and unconfirmed baseline entries.

use std::collections::BTreeSet;

use super::super::catalogue::Scenario;
use super::super::registry::{Level, Registry};
use super::super::selection::REFERENCE_TAG;
use super::super::tagexpr::TagExpr;
use super::outcome::{NEEDS_REVIEW, RunVerdict, Unjudged, broker_needed};
use super::{
    Baseline, BrokerRun, Capabilities, Cell, Judgement, LeftOutScenario, Outcome, ReviewedFailure, Row, ScenarioResult,
    Verdict,
};

/// How to judge.
#[derive(Debug, Clone, Copy)]
pub struct Options<'a> {
    pub selection: Option<&'a TagExpr>,
    pub capabilities: &'a Capabilities,
    pub baseline: &'a Baseline,
    pub strict: bool,
    /// The gateway under test is the reference: `@reference` scenarios ran. Otherwise they are
    /// listed as left out (they read the reference's own surface, CONTRACT §9).
    pub reference_gateway: bool,
}

/// Judges the runs of every broker against the registry.
pub fn judge(registry: &Registry, catalogue: &[Scenario], runs: Vec<BrokerRun>, opts: Options<'_>) -> Judgement {
    let excluded = opts.capabilities.excluded_tags(registry);
    let declared_tags: Vec<&str> = registry
        .capabilities
        .iter()
        .filter(|c| opts.capabilities.declared.contains(&c.name))
        .map(|c| c.tag.as_str())
        .collect();
    let mut problems = Vec::new();
    let mut rows = Vec::new();
    let mut partial = false;
    let mut unjudged = Vec::new();
    // CONTRACT §10: a failure a check under review covers is the suite's: left out of the cells.
    let reviewed = |s: &ScenarioResult| s.outcome != Outcome::Passed && registry.under_review_of(s).is_some();
    for req in &registry.requirements {
        let all: Vec<&Scenario> = catalogue.iter().filter(|s| s.has_tag(&req.id)).collect();
        let selected: Vec<&Scenario> = all
            .iter()
            .copied()
            .filter(|s| opts.selection.is_none_or(|e| e.matches(&s.tags)))
            .collect();
        let gated: BTreeSet<&str> = selected
            .iter()
            .flat_map(|s| s.tags.iter().filter(|t| excluded.contains(t)).map(String::as_str))
            .collect();
        let runnable = selected
            .iter()
            .filter(|s| !s.tags.iter().any(|t| excluded.contains(t)))
            .count();
        let in_scope = opts.selection.is_none() || !selected.is_empty();
        partial |= !in_scope;
        let counts_level = req.level == Level::Must || (opts.strict && req.level == Level::Should);
        let capability = registry
            .capabilities
            .iter()
            .find(|c| c.requirements.contains(&req.id) && opts.capabilities.declared.contains(&c.name))
            .map(|c| c.name.clone());
        let mut cells = Vec::new();
        for run in &runs {
            let tagged = || run.scenarios.iter().filter(|s| s.has_tag(&req.id));
            let results: Vec<&ScenarioResult> = tagged().filter(|s| !reviewed(s)).collect();
            let under_review = tagged().filter(|s| reviewed(s)).count();
            let mut needs = None;
            let failing: Vec<ScenarioResult> = results
                .iter()
                .filter(|s| s.outcome != Outcome::Passed)
                .map(|s| (*s).clone())
                .collect();
            let passed = results.iter().filter(|s| s.outcome == Outcome::Passed).count();
            let (verdict, reason) = if req.level == Level::Statement {
                (
                    Verdict::Skip,
                    Some("a statement of the trust model, not a testable requirement (SPEC [C-11])".to_string()),
                )
            } else if !failing.is_empty() {
                (Verdict::Fail, None)
            } else if passed > 0 {
                (Verdict::Pass, None)
            } else if under_review > 0 && in_scope {
                needs = Some(NEEDS_REVIEW.to_string());
                (
                    Verdict::NotTested,
                    Some(format!(
                        "its only result here is {under_review} failure(s) of a check under review (CONTRACT §10): \
                         reported, not counted"
                    )),
                )
            } else if runnable == 0 && !gated.is_empty() {
                let caps: Vec<String> = gated
                    .iter()
                    .map(|t| {
                        registry
                            .capability_by_tag(t)
                            .map_or_else(|| t.to_string(), |c| c.name.clone())
                    })
                    .collect();
                (
                    Verdict::Skip,
                    Some(format!("needs capability {} (not declared)", caps.join(", "))),
                )
            } else if let (true, Some(pending)) = (all.is_empty(), &req.pending) {
                // Optional and not yet judged by any scenario (fixtures/requirements.toml says why).
                (Verdict::Skip, Some(format!("no scenario judges it yet: {pending}")))
            } else {
                let why = if all.is_empty() {
                    "no scenario checks it".to_string()
                } else if !in_scope {
                    "not selected by --tags".to_string()
                } else if run.error.is_some() {
                    "this broker produced no result (see its error)".to_string()
                } else if let Some(l) = run
                    .left_out
                    .iter()
                    .find(|l| l.tags.iter().any(|t| t.trim_start_matches('@') == req.id))
                {
                    // The brokers' limit, not the gateway's failure: what would judge it. Each
                    // left-out scenario judges the requirement on its own, so any one of the
                    // brokers they need would do: "A (for "s1") or B (for "s2", "s3")".
                    let mut wanted: Vec<(&str, Vec<&str>)> = Vec::new();
                    for l in run
                        .left_out
                        .iter()
                        .filter(|l| l.tags.iter().any(|t| t.trim_start_matches('@') == req.id))
                    {
                        let need = broker_needed(&l.tags).unwrap_or(l.reason.as_str());
                        match wanted.iter_mut().find(|(n, _)| *n == need) {
                            Some((_, names)) => names.push(l.name.as_str()),
                            None => wanted.push((need, vec![l.name.as_str()])),
                        }
                    }
                    needs = Some(if wanted.len() == 1 {
                        wanted.iter().map(|(n, _)| n.to_string()).collect()
                    } else {
                        wanted
                            .iter()
                            .map(|(n, names)| {
                                let names: Vec<String> = names.iter().map(|s| format!("\"{s}\"")).collect();
                                format!("{n} (for {})", names.join(", "))
                            })
                            .collect::<Vec<_>>()
                            .join("; or ")
                    });
                    format!("left out on this broker: \"{}\" — {}", l.name, l.reason)
                } else {
                    format!("{runnable} selected scenario(s) never reported a result")
                };
                (Verdict::NotTested, Some(why))
            };
            let known = opts.baseline.known.iter().find(|k| k.covers(&req.id, run));
            let known_failure = match (verdict, known) {
                (Verdict::Fail, Some(k)) => Some(k.reason.clone().unwrap_or_else(|| "listed in the baseline".into())),
                _ => None,
            };
            let capability_failed = failing
                .iter()
                .any(|s| s.tags.iter().any(|t| declared_tags.contains(&t.as_str())));
            let counts = match verdict {
                Verdict::Fail => known_failure.is_none() && (counts_level || capability_failed),
                Verdict::NotTested => in_scope && counts_level && needs.is_none(),
                Verdict::Pass | Verdict::Skip => false,
            };
            // A broker without a report is one problem (below), not one per requirement.
            if counts && !(verdict == Verdict::NotTested && run.error.is_some()) {
                problems.push(match verdict {
                    Verdict::Fail => format!(
                        "{} ({}) fails on {}: {}",
                        req.id,
                        if capability_failed && !counts_level {
                            format!("{}, declared capability", req.level)
                        } else {
                            req.level.to_string()
                        },
                        run.label,
                        failing
                            .iter()
                            .map(|s| format!("\"{}\"", s.name))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    _ => format!(
                        "{} ({}) not tested on {}: {}",
                        req.id,
                        req.level,
                        run.label,
                        reason.as_deref().unwrap_or_default()
                    ),
                });
            }
            cells.push(Cell {
                broker: run.label.clone(),
                verdict,
                passed,
                failed: failing.len(),
                reason,
                needs,
                known_failure,
                counts,
                failing,
            });
        }
        // INCOMPLETE: a requirement the run had to judge that no broker of the run could.
        let judged = cells.iter().any(|c| matches!(c.verdict, Verdict::Pass | Verdict::Fail));
        if in_scope && (counts_level || capability.is_some()) && !judged && cells.iter().any(|c| c.needs.is_some()) {
            let mut needs: Vec<String> = Vec::new();
            for n in cells.iter().filter_map(|c| c.needs.as_ref()) {
                if !needs.contains(n) {
                    needs.push(n.clone());
                }
            }
            unjudged.push(Unjudged {
                requirement: req.id.clone(),
                level: req.level,
                capability: capability.clone(),
                needs,
            });
        }
        rows.push(Row {
            id: req.id.clone(),
            level: req.level,
            section: req.section.clone(),
            text: req.text.clone(),
            selected: in_scope,
            cells,
        });
    }
    for run in &runs {
        if let Some(e) = &run.error {
            problems.push(format!("{}: {e}", run.label));
        }
    }
    let mut stale = Vec::new();
    let mut unconfirmed = Vec::new();
    for k in &opts.baseline.known {
        let label = format!("{} on {}", k.requirement, k.broker.as_deref().unwrap_or("every broker"));
        let matching: Vec<(&BrokerRun, Verdict)> = runs
            .iter()
            .enumerate()
            .filter(|(_, r)| k.covers(&k.requirement, r))
            .filter_map(|(i, r)| {
                let row = rows.iter().find(|row| row.id == k.requirement)?;
                Some((r, row.cells.get(i)?.verdict))
            })
            .collect();
        if matching.is_empty() {
            unconfirmed.push(format!("{label}: no such broker in this run"));
        }
        for (run, v) in matching {
            match v {
                Verdict::Pass => {
                    let msg = format!(
                        "stale baseline: {} is listed as failing on {} but passes there — remove the entry",
                        k.requirement, run.label
                    );
                    problems.push(msg.clone());
                    stale.push(msg);
                }
                Verdict::Fail => {}
                other => unconfirmed.push(format!("{} on {}: {}", k.requirement, run.label, other.as_str())),
            }
        }
    }
    let left_out = left_out_scenarios(registry, catalogue, &runs, &opts, &excluded);
    let under_review = reviewed_failures(registry, &runs);
    let verdict = if !problems.is_empty() {
        RunVerdict::Fail
    } else if !unjudged.is_empty() {
        RunVerdict::Incomplete
    } else {
        RunVerdict::Pass
    };
    Judgement {
        brokers: runs,
        requirements: rows,
        stale_baseline: stale,
        unconfirmed_baseline: unconfirmed,
        problems,
        partial,
        left_out,
        unjudged,
        under_review,
        verdict,
        passed: verdict == RunVerdict::Pass,
    }
}

/// Every failure a check under review covers, per broker (CONTRACT §10): reported, not counted.
fn reviewed_failures(registry: &Registry, runs: &[BrokerRun]) -> Vec<ReviewedFailure> {
    let mut out = Vec::new();
    for run in runs {
        for s in run.scenarios.iter().filter(|s| s.outcome != Outcome::Passed) {
            let Some(entry) = registry.under_review_of(s) else {
                continue;
            };
            out.push(ReviewedFailure {
                broker: run.label.clone(),
                name: s.name.clone(),
                location: format!("{}:{}", s.file, s.line),
                requirements: s.tags.iter().filter(|t| registry.get(t).is_some()).cloned().collect(),
                error: s.error.clone(),
                under_review: format!("{} — {}", entry.key(), entry.reason),
            });
        }
    }
    out
}

/// The scenarios the run left out, with why: first those of undeclared capabilities (on every
/// broker; only those the run's `--tags` selected), then each broker's own.
fn left_out_scenarios(
    registry: &Registry,
    catalogue: &[Scenario],
    runs: &[BrokerRun],
    opts: &Options<'_>,
    excluded: &[String],
) -> Vec<LeftOutScenario> {
    let requirements = |tags: &mut dyn Iterator<Item = &str>| -> Vec<String> {
        tags.map(|t| t.trim_start_matches('@'))
            .filter(|t| registry.requirements.iter().any(|r| r.id == *t))
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    for s in catalogue {
        if !opts.selection.is_none_or(|e| e.matches(&s.tags)) {
            continue;
        }
        let gated: Vec<String> = s
            .tags
            .iter()
            .filter(|t| excluded.contains(t))
            .map(|t| {
                registry
                    .capability_by_tag(t)
                    .map_or_else(|| t.clone(), |c| c.name.clone())
            })
            .collect();
        let reference_only = !opts.reference_gateway && s.tags.iter().any(|t| t == REFERENCE_TAG);
        if gated.is_empty() && !reference_only {
            continue;
        }
        out.push(LeftOutScenario {
            broker: None,
            name: s.name.clone(),
            file: Some(s.file.clone()),
            line: s.line,
            requirements: requirements(&mut s.tags.iter().map(String::as_str)),
            reason: if gated.is_empty() {
                "reads the reference gateway's own surface (@reference): never judges another gateway".to_string()
            } else {
                format!("needs capability {} (not declared)", gated.join(", "))
            },
        });
    }
    for run in runs {
        for l in &run.left_out {
            // A left-out file of an older suite names no feature file: the catalogue knows it.
            let file = l.file.clone().or_else(|| {
                catalogue
                    .iter()
                    .find(|s| s.name == l.name && s.line == l.line)
                    .or_else(|| catalogue.iter().find(|s| s.name == l.name))
                    .map(|s| s.file.clone())
            });
            out.push(LeftOutScenario {
                broker: Some(run.label.clone()),
                name: l.name.clone(),
                file,
                line: l.line,
                requirements: requirements(&mut l.tags.iter().map(String::as_str)),
                reason: l.reason.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
