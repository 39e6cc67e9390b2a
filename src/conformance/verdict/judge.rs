//! Judging: every requirement of the registry on every broker's run, against the catalogue (what
//! could have run), the run's `--tags` selection, the declared capabilities, the baseline and
//! `--strict` — the cells, the problems that fail the run, stale and unconfirmed baseline entries.

use std::collections::BTreeSet;

use super::super::catalogue::Scenario;
use super::super::registry::{Level, Registry};
use super::super::selection::REFERENCE_TAG;
use super::super::tagexpr::TagExpr;
use super::{
    Baseline, BrokerRun, Capabilities, Cell, Judgement, LeftOutScenario, Outcome, Row, ScenarioResult, Verdict,
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
        let mut cells = Vec::new();
        for run in &runs {
            let results: Vec<&ScenarioResult> = run.scenarios.iter().filter(|s| s.has_tag(&req.id)).collect();
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
                Verdict::NotTested => in_scope && counts_level,
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
                known_failure,
                counts,
                failing,
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
    let passed = problems.is_empty();
    Judgement {
        brokers: runs,
        requirements: rows,
        stale_baseline: stale,
        unconfirmed_baseline: unconfirmed,
        problems,
        partial,
        left_out,
        passed,
    }
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
            out.push(LeftOutScenario {
                broker: Some(run.label.clone()),
                name: l.name.clone(),
                file: None,
                line: l.line,
                requirements: requirements(&mut l.tags.iter().map(String::as_str)),
                reason: l.reason.clone(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{KnownFailure, LeftOut};
    use super::*;
    use rstest::rstest;

    #[test]
    fn a_requirement_left_out_on_a_broker_says_why_it_was_not_tested() {
        let reg = crate::conformance::registry::test_registry();
        let c = caps(&[]);
        let results: Vec<ScenarioResult> = everything_but(&[], &[])
            .into_iter()
            .filter(|s| s.name != "exchanges")
            .collect();
        let mut r = run(results);
        r.left_out.push(LeftOut {
            name: "exchanges".into(),
            line: 1,
            tags: vec!["@TOP-1".into(), "@broker-tls".into()],
            reason: "it needs the broker's amqps listener (@broker-tls), and none was given".into(),
        });
        let base = Baseline::default();
        let j = judge(&reg, &catalogue(), vec![r], plain(&c, &base));
        let top = cell(&j, "TOP-1");
        assert_eq!(top.verdict, Verdict::NotTested, "left out is never a pass");
        assert!(top.counts, "a MUST left out still fails the run");
        assert!(
            top.reason
                .as_deref()
                .is_some_and(|why| why.contains("left out") && why.contains("amqps")),
            "{top:?}"
        );
        assert!(!j.passed);
    }

    #[test]
    fn the_judgement_lists_every_scenario_left_out_with_why() {
        let reg = crate::conformance::registry::test_registry();
        let c = caps(&[]);
        let mut r = run(everything_but(&[], &[]));
        // "ack first" left out on this broker; FWD-1 still passes through "crash window".
        r.scenarios.retain(|s| s.name != "ack first");
        r.left_out.push(LeftOut {
            name: "ack first".into(),
            line: 7,
            tags: vec!["@FWD-1".into(), "@smoke".into(), "@broker-restart".into()],
            reason: "the url provider cannot restart the broker".into(),
        });
        let base = Baseline::default();
        let j = judge(&reg, &catalogue(), vec![r], plain(&c, &base));
        assert_eq!(cell(&j, "FWD-1").verdict, Verdict::Pass, "the other scenario passed");
        let names: Vec<(&str, Option<&str>)> = j
            .left_out
            .iter()
            .map(|l| (l.name.as_str(), l.broker.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("not submitted", None),
                ("remote stop", None),
                ("ack first", Some("container:rabbitmq"))
            ],
            "capabilities not declared (every broker), then the broker's own"
        );
        let stop = &j.left_out[1];
        assert_eq!(stop.requirements, ["SPN-5"]);
        assert!(stop.reason.contains("capability stop"), "{stop:?}");
        let ack = &j.left_out[2];
        assert_eq!(ack.requirements, ["FWD-1"], "only requirement tags");
        assert!(ack.reason.contains("cannot restart"), "{ack:?}");
        assert!(j.passed, "{:?}", j.problems);
    }

    #[test]
    fn scenarios_not_selected_by_tags_are_not_listed_as_left_out() {
        let results: Vec<_> = everything_but(&[], &[])
            .into_iter()
            .filter(|r| r.tags.iter().any(|t| t == "smoke"))
            .collect();
        let j = judge_with(results, &[], &Baseline::default(), false, Some("@smoke"));
        assert!(j.left_out.is_empty(), "{:?}", j.left_out);
        let all = judge_with(
            everything_but(&[], &["stop"]),
            &["stop"],
            &Baseline::default(),
            false,
            None,
        );
        assert_eq!(all.left_out.len(), 1, "a declared capability runs: {:?}", all.left_out);
    }

    #[test]
    fn reference_scenarios_are_left_out_for_another_gateway_only() {
        let reg = crate::conformance::registry::test_registry();
        let mut cat = catalogue();
        cat.push(sc("metrics", &["reference"]));
        let c = Capabilities::all(&reg);
        let base = Baseline::default();
        let opts = |reference_gateway| Options {
            selection: None,
            capabilities: &c,
            baseline: &base,
            strict: false,
            reference_gateway,
        };
        let other = judge(&reg, &cat, vec![run(Vec::new())], opts(false));
        let left: Vec<&str> = other.left_out.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(left, ["metrics"]);
        assert!(
            other.left_out[0].reason.contains("@reference"),
            "{:?}",
            other.left_out[0]
        );
        let reference = judge(&reg, &cat, vec![run(Vec::new())], opts(true));
        assert!(reference.left_out.is_empty(), "{:?}", reference.left_out);
    }

    /// Judging the reference gateway with no selection, not strict.
    fn plain<'a>(c: &'a Capabilities, base: &'a Baseline) -> Options<'a> {
        Options {
            selection: None,
            capabilities: c,
            baseline: base,
            strict: false,
            reference_gateway: true,
        }
    }

    fn sc(name: &str, tags: &[&str]) -> Scenario {
        Scenario {
            file: "features/x.feature".into(),
            feature: "x".into(),
            name: name.into(),
            line: 1,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            rows: 0,
        }
    }

    /// The catalogue: FWD-1 twice (once smoke), FWD-7 only behind submit-confirm, SPN-5 only
    /// behind stop, TOP-1 once (smoke).
    fn catalogue() -> Vec<Scenario> {
        vec![
            sc("ack first", &["FWD-1", "smoke"]),
            sc("crash window", &["FWD-1", "crash"]),
            sc("not submitted", &["FWD-7", "cap-submit-confirm"]),
            sc("remote stop", &["SPN-5", "cap-stop"]),
            sc("exchanges", &["TOP-1", "smoke"]),
        ]
    }

    fn res(name: &str, tags: &[&str], outcome: Outcome) -> ScenarioResult {
        ScenarioResult {
            name: name.into(),
            file: "features/x.feature".into(),
            line: 1,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            outcome,
            error: (outcome != Outcome::Passed).then(|| "Then it breaks\nboom".into()),
            log: None,
        }
    }

    fn run(results: Vec<ScenarioResult>) -> BrokerRun {
        BrokerRun {
            label: "container:rabbitmq".into(),
            kind: "rabbitmq".into(),
            version: Some("3.10.8".into()),
            error: None,
            scenarios: results,
            left_out: Vec::new(),
        }
    }

    fn caps(names: &[&str]) -> Capabilities {
        Capabilities {
            declared: names.iter().map(|n| n.to_string()).collect(),
        }
    }

    fn baseline(entries: &[(&str, Option<&str>)]) -> Baseline {
        Baseline {
            known: entries
                .iter()
                .map(|(r, b)| KnownFailure {
                    requirement: r.to_string(),
                    broker: b.map(str::to_string),
                    reason: None,
                })
                .collect(),
        }
    }

    fn cell<'a>(j: &'a Judgement, id: &str) -> &'a Cell {
        &j.requirements.iter().find(|r| r.id == id).expect("row").cells[0]
    }

    /// Every scenario of the catalogue, passing, except those named in `failing`.
    fn everything_but(failing: &[&str], caps_declared: &[&str]) -> Vec<ScenarioResult> {
        let c = caps(caps_declared);
        let excluded = c.excluded_tags(&crate::conformance::registry::test_registry());
        catalogue()
            .into_iter()
            .filter(|s| !s.tags.iter().any(|t| excluded.contains(t)))
            .map(|s| {
                let tags: Vec<&str> = s.tags.iter().map(String::as_str).collect();
                let o = if failing.contains(&s.name.as_str()) {
                    Outcome::Failed
                } else {
                    Outcome::Passed
                };
                res(&s.name, &tags, o)
            })
            .collect()
    }

    fn judge_with(
        results: Vec<ScenarioResult>,
        declared: &[&str],
        base: &Baseline,
        strict: bool,
        tags: Option<&str>,
    ) -> Judgement {
        let reg = crate::conformance::registry::test_registry();
        let c = caps(declared);
        let sel = tags.map(|t| TagExpr::parse(t).expect("tags"));
        judge(
            &reg,
            &catalogue(),
            vec![run(results)],
            Options {
                selection: sel.as_ref(),
                capabilities: &c,
                baseline: base,
                strict,
                reference_gateway: true,
            },
        )
    }

    #[test]
    fn a_clean_run_with_no_capabilities_passes_and_skips_the_optional_parts() {
        let j = judge_with(everything_but(&[], &[]), &[], &Baseline::default(), false, None);
        assert!(j.passed, "{:?}", j.problems);
        assert_eq!(cell(&j, "FWD-1").verdict, Verdict::Pass);
        assert_eq!(cell(&j, "FWD-1").passed, 2);
        let stop = cell(&j, "SPN-5");
        assert_eq!(
            stop.verdict,
            Verdict::Skip,
            "a MUST whose only scenario needs an undeclared capability"
        );
        assert!(stop.reason.as_deref().is_some_and(|r| r.contains("stop")), "{stop:?}");
        assert_eq!(cell(&j, "FWD-7").verdict, Verdict::Skip);
        assert!(!j.partial);
    }

    #[rstest]
    #[case::must_failure(&["ack first"], &[], false)]
    #[case::declared_should_lenient(&["not submitted"], &["submit-confirm"], false)]
    #[case::declared_should_strict(&["not submitted"], &["submit-confirm"], true)]
    #[case::declared_may(&["remote stop"], &["stop"], false)]
    fn declared_capabilities_and_musts_fail_the_run(
        #[case] failing: &[&str],
        #[case] declared: &[&str],
        #[case] strict: bool,
    ) {
        let j = judge_with(
            everything_but(failing, declared),
            declared,
            &Baseline::default(),
            strict,
            None,
        );
        assert!(
            !j.passed,
            "a failure of a MUST or of a declared capability fails the run"
        );
        assert!(!j.problems.is_empty());
    }

    #[test]
    fn a_should_failure_outside_a_declared_capability_fails_only_under_strict() {
        // FWD-7 failing through a scenario not gated by a capability.
        let mut results = everything_but(&[], &[]);
        results.push(res("loose", &["FWD-7"], Outcome::Failed));
        let lenient = judge_with(results.clone(), &[], &Baseline::default(), false, None);
        assert!(lenient.passed, "{:?}", lenient.problems);
        assert_eq!(cell(&lenient, "FWD-7").verdict, Verdict::Fail);
        assert!(!cell(&lenient, "FWD-7").counts);
        let strict = judge_with(results, &[], &Baseline::default(), true, None);
        assert!(!strict.passed);
        assert!(
            strict.problems[0].starts_with("FWD-7 (SHOULD) fails"),
            "{:?}",
            strict.problems
        );
    }

    #[test]
    fn a_must_not_tested_fails_the_run() {
        let results: Vec<_> = everything_but(&[], &[])
            .into_iter()
            .filter(|r| r.name != "exchanges")
            .collect();
        let j = judge_with(results, &[], &Baseline::default(), false, None);
        assert!(!j.passed);
        assert_eq!(cell(&j, "TOP-1").verdict, Verdict::NotTested);
        assert!(
            j.problems.iter().any(|p| p.starts_with("TOP-1 (MUST) not tested")),
            "{:?}",
            j.problems
        );
    }

    #[test]
    fn a_partial_run_judges_only_what_it_selected() {
        let results: Vec<_> = everything_but(&[], &[])
            .into_iter()
            .filter(|r| r.tags.iter().any(|t| t == "smoke"))
            .collect();
        let j = judge_with(results, &[], &Baseline::default(), false, Some("@smoke"));
        assert!(j.passed, "{:?}", j.problems);
        assert!(j.partial);
        let spn = cell(&j, "SPN-5");
        assert_eq!(spn.verdict, Verdict::NotTested);
        assert_eq!(spn.reason.as_deref(), Some("not selected by --tags"));
        assert!(!spn.counts);
    }

    #[rstest]
    #[case::any_broker(None)]
    #[case::by_kind(Some("rabbitmq"))]
    #[case::by_label(Some("container:rabbitmq"))]
    fn a_listed_failure_does_not_fail_the_run(#[case] broker: Option<&str>) {
        let j = judge_with(
            everything_but(&["crash window"], &[]),
            &[],
            &baseline(&[("FWD-1", broker)]),
            false,
            None,
        );
        assert!(j.passed, "{:?}", j.problems);
        let c = cell(&j, "FWD-1");
        assert_eq!(c.verdict, Verdict::Fail);
        assert!(c.known_failure.is_some() && !c.counts);
    }

    #[test]
    fn a_listed_failure_on_another_broker_does_not_cover_this_one() {
        let j = judge_with(
            everything_but(&["crash window"], &[]),
            &[],
            &baseline(&[("FWD-1", Some("lavinmq"))]),
            false,
            None,
        );
        assert!(!j.passed);
        assert!(
            j.unconfirmed_baseline[0].contains("no such broker"),
            "{:?}",
            j.unconfirmed_baseline
        );
    }

    #[test]
    fn a_listed_failure_that_passes_is_a_stale_baseline() {
        let j = judge_with(
            everything_but(&[], &[]),
            &[],
            &baseline(&[("FWD-1", None)]),
            false,
            None,
        );
        assert!(!j.passed);
        assert_eq!(j.stale_baseline.len(), 1);
        assert!(j.problems[0].starts_with("stale baseline: FWD-1"), "{:?}", j.problems);
    }

    #[test]
    fn a_listed_failure_that_was_skipped_is_unconfirmed_not_stale() {
        let j = judge_with(
            everything_but(&[], &[]),
            &[],
            &baseline(&[("SPN-5", None)]),
            false,
            None,
        );
        assert!(j.passed, "{:?}", j.problems);
        assert_eq!(j.unconfirmed_baseline, ["SPN-5 on container:rabbitmq: skip"]);
    }

    #[test]
    fn a_broker_that_did_not_run_leaves_its_musts_not_tested() {
        let reg = crate::conformance::registry::test_registry();
        let mut r = run(Vec::new());
        r.error = Some("could not start".into());
        let j = judge(
            &reg,
            &catalogue(),
            vec![r],
            Options {
                selection: None,
                capabilities: &Capabilities::default(),
                baseline: &Baseline::default(),
                strict: false,
                reference_gateway: true,
            },
        );
        assert!(!j.passed);
        assert!(cell(&j, "FWD-1").counts);
        assert_eq!(
            j.problems,
            ["container:rabbitmq: could not start"],
            "one problem per broker"
        );
    }
}
