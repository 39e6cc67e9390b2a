//! The judge's unit tests: cells, problems, baselines, left-outs, INCOMPLETE and under review.

use super::super::outcome::RunVerdict;
use super::super::{KnownFailure, LeftOut};
use super::*;
use rstest::rstest;

#[test]
fn a_requirement_left_out_on_a_broker_says_why_it_was_not_tested() {
    let reg = crate::conformance::registry::test_registry();
    let c = caps(&[]);
    let mut r = run_without_exchanges();
    r.left_out.push(LeftOut {
        name: "exchanges".into(),
        file: None,
        line: 1,
        tags: vec!["@TOP-1".into(), "@broker-tls".into()],
        reason: "it needs the broker's amqps listener (@broker-tls), and none was given".into(),
    });
    let base = Baseline::default();
    let j = judge(&reg, &catalogue(), vec![r], plain(&c, &base));
    let top = cell(&j, "TOP-1");
    assert_eq!(top.verdict, Verdict::NotTested, "left out is never a pass");
    assert!(!top.counts, "the broker's limit is no failure of the gateway");
    assert!(
        top.reason
            .as_deref()
            .is_some_and(|why| why.contains("left out") && why.contains("amqps")),
        "{top:?}"
    );
    assert!(
        top.needs.as_deref().is_some_and(|n| n.contains("TLS listener")),
        "{top:?}"
    );
    assert!(!j.passed, "nor a pass");
    assert_eq!(j.verdict, RunVerdict::Incomplete);
    assert!(j.problems.is_empty(), "{:?}", j.problems);
    assert_eq!(j.unjudged.len(), 1);
    assert_eq!(j.unjudged[0].requirement, "TOP-1");
    assert_eq!(
        j.left_out[0].file.as_deref(),
        Some("features/x.feature"),
        "found in the catalogue"
    );
}

/// Each left-out scenario could judge the requirement alone: the need reads "A (for …) or B
/// (for …)", never "A and B" (one TLS node judges SEC-1's own scenarios).
#[test]
fn a_requirement_left_out_twice_needs_either_broker() {
    let reg = crate::conformance::registry::test_registry();
    let c = caps(&[]);
    let mut r = run_without_exchanges();
    for (name, tag, reason) in [
        (
            "exchanges",
            "@broker-tls",
            "it needs the broker's amqps listener (@broker-tls)",
        ),
        (
            "exchanges on a cluster",
            "@broker-cluster",
            "it needs a cluster broker (@broker-cluster)",
        ),
    ] {
        r.left_out.push(LeftOut {
            name: name.into(),
            file: None,
            line: 1,
            tags: vec!["@TOP-1".into(), tag.into()],
            reason: reason.into(),
        });
    }
    let base = Baseline::default();
    let j = judge(&reg, &catalogue(), vec![r], plain(&c, &base));
    let needs = cell(&j, "TOP-1").needs.clone().unwrap_or_default();
    assert!(
        needs.contains("TLS listener") && needs.contains("(for \"exchanges\")"),
        "{needs}"
    );
    assert!(
        needs.contains("; or a cluster broker") && needs.contains("(for \"exchanges on a cluster\")"),
        "{needs}"
    );
    assert!(!needs.contains("; and "), "either broker judges it: {needs}");
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
        file: Some("features/forward_path.feature".into()),
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
    assert_eq!(
        ack.location(),
        "features/forward_path.feature:7",
        "the feature file, not only the line"
    );
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

/// A run of every scenario but "exchanges" (TOP-1's), which a test then leaves out.
fn run_without_exchanges() -> BrokerRun {
    run(everything_but(&[], &[])
        .into_iter()
        .filter(|s| s.name != "exchanges")
        .collect())
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

/// A registry with the capability `cluster` (CLU-2 MUST, CLU-6 MUST), FWD-2 and checks under
/// review, for the INCOMPLETE and review tests.
fn cluster_registry() -> crate::conformance::registry::Registry {
    crate::conformance::registry::Registry::parse(
        "test",
        r#"
[[capability]]
name = "cluster"
tag = "cap-cluster"
level = "MAY"
requirements = ["CLU-2", "CLU-6"]
text = "cluster"

[[under-review]]
tag = "herdr-agent-gone"
reason = "not in SPEC yet"

[[under-review]]
step = "logged no PRECONDITION_FAILED"
reason = "read from the gateway's log"

[[requirement]]
id = "FWD-2"
level = "MUST"
section = "5"
text = "inject"

[[requirement]]
id = "CLU-2"
level = "MUST"
section = "16"
text = "quorum"

[[requirement]]
id = "CLU-6"
level = "MUST"
section = "16"
text = "partitions"
"#,
    )
    .expect("cluster test registry")
}

fn cluster_catalogue() -> Vec<Scenario> {
    let mut quorum = sc("quorum inboxes", &["CLU-2", "cap-cluster", "broker-cluster"]);
    quorum.file = "features/cluster.feature".into();
    quorum.line = 21;
    let mut cut = sc(
        "a node cut off",
        &["CLU-6", "cap-cluster", "broker-cluster", "node-partition"],
    );
    cut.file = "features/cluster.feature".into();
    cut.line = 90;
    vec![
        sc("injects", &["FWD-2"]),
        sc("agent gone", &["FWD-2", "herdr-agent-gone"]),
        quorum,
        cut,
    ]
}

/// What a single-node broker leaves out of the cluster scenarios (as the suite writes it).
fn cluster_left_out(label: &str) -> Vec<LeftOut> {
    cluster_catalogue()
        .into_iter()
        .filter(|s| s.has_tag("broker-cluster"))
        .map(|s| LeftOut {
            name: s.name.clone(),
            file: Some(s.file.clone()),
            line: s.line,
            tags: s.tags.iter().map(|t| format!("@{t}")).collect(),
            reason: format!("it needs a cluster broker (@broker-cluster), and {label} is a single node"),
        })
        .collect()
}

fn judge_cluster(runs: Vec<BrokerRun>, declared: &[&str]) -> Judgement {
    let c = caps(declared);
    let base = Baseline::default();
    judge(&cluster_registry(), &cluster_catalogue(), runs, plain(&c, &base))
}

#[test]
fn a_gateway_declaring_cluster_run_on_one_node_is_incomplete_not_failed() {
    let mut r = run(vec![res("injects", &["FWD-2"], Outcome::Passed)]);
    r.label = "process:rabbitmq".into();
    r.left_out = cluster_left_out("process:rabbitmq");
    let j = judge_cluster(vec![r], &["cluster"]);
    assert_eq!(j.verdict, RunVerdict::Incomplete, "{:?}", j.problems);
    assert!(j.problems.is_empty(), "no requirement failed: {:?}", j.problems);
    assert!(!j.passed);
    assert_eq!(j.verdict.exit_code(), 3);
    for id in ["CLU-2", "CLU-6"] {
        let c = cell(&j, id);
        assert_eq!(c.verdict, Verdict::NotTested);
        assert!(!c.counts, "{id}: {c:?}");
    }
    let needs: Vec<(&str, Option<&str>, &str)> = j
        .unjudged
        .iter()
        .map(|u| (u.requirement.as_str(), u.capability.as_deref(), u.needs[0].as_str()))
        .collect();
    assert_eq!(needs.len(), 2);
    assert_eq!((needs[0].0, needs[0].1), ("CLU-2", Some("cluster")));
    assert!(needs[0].2.starts_with("a cluster broker"), "{needs:?}");
    assert_eq!(needs[1].0, "CLU-6");
    assert!(
        needs[1].2.starts_with("container:rabbitmq-cluster"),
        "a partition needs the container provider: {needs:?}"
    );
    let lines = super::super::incomplete_lines(&j.unjudged);
    assert!(
        lines[0].starts_with("capability cluster: CLU-2 needs a cluster broker"),
        "{lines:?}"
    );
    assert!(
        j.left_out
            .iter()
            .all(|l| l.location().starts_with("features/cluster.feature:")),
        "{:?}",
        j.left_out
    );
}

#[test]
fn a_requirement_judged_on_another_broker_of_the_run_is_not_incomplete() {
    let mut single = run(vec![res("injects", &["FWD-2"], Outcome::Passed)]);
    single.label = "process:rabbitmq".into();
    single.left_out = cluster_left_out("process:rabbitmq");
    let mut cluster = run(vec![
        res("injects", &["FWD-2"], Outcome::Passed),
        res(
            "quorum inboxes",
            &["CLU-2", "cap-cluster", "broker-cluster"],
            Outcome::Passed,
        ),
        res(
            "a node cut off",
            &["CLU-6", "cap-cluster", "broker-cluster", "node-partition"],
            Outcome::Passed,
        ),
    ]);
    cluster.label = "container:rabbitmq-cluster".into();
    let j = judge_cluster(vec![single, cluster], &["cluster"]);
    assert_eq!(j.verdict, RunVerdict::Pass, "{:?} {:?}", j.problems, j.unjudged);
    assert_eq!(
        j.requirements.iter().find(|r| r.id == "CLU-2").expect("row").cells[0].verdict,
        Verdict::NotTested
    );
}

#[test]
fn a_failure_beside_an_unjudged_requirement_is_a_fail() {
    let mut r = run(vec![res("injects", &["FWD-2"], Outcome::Failed)]);
    r.left_out = cluster_left_out("container:rabbitmq");
    let j = judge_cluster(vec![r], &["cluster"]);
    assert_eq!(j.verdict, RunVerdict::Fail);
    assert_eq!(j.verdict.exit_code(), 1);
    assert_eq!(j.unjudged.len(), 2, "still said");
}

#[test]
fn a_failure_under_review_is_reported_never_counted() {
    let mut r = run(vec![
        res("injects", &["FWD-2"], Outcome::Passed),
        res("agent gone", &["FWD-2", "herdr-agent-gone"], Outcome::Failed),
    ]);
    r.left_out = cluster_left_out("container:rabbitmq");
    let j = judge_cluster(vec![r], &[]);
    assert_eq!(j.verdict, RunVerdict::Pass, "{:?}", j.problems);
    let fwd = cell(&j, "FWD-2");
    assert_eq!((fwd.verdict, fwd.passed, fwd.failed), (Verdict::Pass, 1, 0));
    assert_eq!(j.under_review.len(), 1);
    assert_eq!(j.under_review[0].name, "agent gone");
    assert_eq!(j.under_review[0].requirements, ["FWD-2"]);
    assert!(
        j.under_review[0].under_review.starts_with("@herdr-agent-gone"),
        "{:?}",
        j.under_review
    );
}

#[test]
fn a_failure_at_another_step_of_a_scenario_with_a_check_under_review_counts() {
    let mut precondition = res("injects", &["FWD-2"], Outcome::Failed);
    precondition.error =
        Some("And the gateway on \"a\" started once, is ready, and logged no PRECONDITION_FAILED\nboom".into());
    let j = judge_cluster(vec![run(vec![precondition.clone()])], &[]);
    assert_eq!(
        j.verdict,
        RunVerdict::Incomplete,
        "its only result is under review: {:?}",
        j.problems
    );
    assert_eq!(j.unjudged[0].requirement, "FWD-2");
    assert!(j.unjudged[0].needs[0].contains("CONTRACT §10"), "{:?}", j.unjudged);
    let mut other = precondition;
    other.error = Some("Then herdr on \"b\" records exactly 1 inject\nboom".into());
    let j = judge_cluster(vec![run(vec![other])], &[]);
    assert_eq!(j.verdict, RunVerdict::Fail);
    assert!(j.under_review.is_empty());
}
