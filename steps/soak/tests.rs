//! Unit tests of the soak's pure parts: the classification of what a caller saw
//! ([`super::history`]), the history checker ([`super::check`]) and the summary's rates and
//! per-nemesis failures ([`super::summary`]). Run by `cargo test --features e2e --test
//! steps-unit` (the e2e target's code built with the test harness; no broker, no gateway).

use std::time::Duration;

use serde_json::{Value, json};

use super::check::{Arrivals, check, unknown_by_nemesis};
use super::history::{Drain, NO_SESSION, Op, Seen, SoakState, classify_reply, classify_send};
use super::nemesis::{Event, Strike};
use super::summary::{UnknownRates, failed_by_nemesis, failed_line};

const BOUND: Duration = Duration::from_secs(6);
const AFTER: Duration = Duration::from_secs(10);

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn op(tool: &'static str, text: &str, seen: Seen, outcome: &str, span: (u64, u64)) -> Op {
    Op {
        tool,
        text: text.into(),
        seen,
        outcome: outcome.into(),
        span: (secs(span.0), secs(span.1)),
        msg_id: None,
        from_host: "a".into(),
        to_host: "b".into(),
    }
}

fn event(strike: Strike, at: u64, took: u64) -> Event {
    Event {
        at: secs(at),
        strike,
        target: "b".into(),
        took: secs(took),
        done: true,
        detail: String::new(),
    }
}

fn drain(text: &str) -> Drain {
    Drain {
        kind: "REPLY".into(),
        text: text.into(),
        life: 0,
    }
}

/// A history with one ok brief and one ok reply, both arrived (so it proves something), plus
/// `extra` operations.
fn history(extra: Vec<Op>) -> (SoakState, Arrivals) {
    let mut s = SoakState {
        ops: vec![
            op("bridge_send", "brief ok", Seen::Ok, "injected", (1, 2)),
            op("bridge_reply", "reply ok", Seen::Ok, "sent", (1, 2)),
        ],
        ..Default::default()
    };
    s.ops.extend(extra);
    s.drains.push(drain("reply ok"));
    let mut arrivals = Arrivals::default();
    arrivals.injects.insert("brief ok".into(), (1, 1));
    (s, arrivals)
}

fn failed_delivered(s: &SoakState, arrivals: &Arrivals) -> (usize, Value) {
    let v = check(s, arrivals, BOUND, AFTER);
    (v.violations, v.summary["failedButDelivered"].clone())
}

#[test]
fn not_connected_is_a_definite_failure_and_publish_stays_unknown() {
    let send = |reason: &str| classify_send(&Ok(json!({"status": "failed", "reason": reason})));
    assert_eq!(send("not_connected"), (Seen::Failed, "failed/not_connected".into()));
    assert_eq!(send("publish").0, Seen::Unknown);
    assert_eq!(send("inject_timeout").0, Seen::Unknown);
    let reply = |reason: &str| classify_reply(&Ok(json!({"status": "failed", "reason": reason, "error": "x"})));
    assert_eq!(reply("not_connected"), (Seen::Failed, "failed/not_connected".into()));
    assert_eq!(reply("publish").0, Seen::Unknown);
    assert_eq!(reply("revoked").0, Seen::Failed);
}

#[test]
fn a_not_connected_reply_drained_by_the_main_is_failed_but_delivered() {
    let failed = op("bridge_reply", "reply nc", Seen::Failed, "failed/not_connected", (3, 3));
    let (mut s, arrivals) = history(vec![failed]);
    assert_eq!(failed_delivered(&s, &arrivals).0, 0, "not drained: no violation");
    s.drains.push(drain("reply nc"));
    let (violations, fbd) = failed_delivered(&s, &arrivals);
    assert_eq!(violations, 1);
    assert_eq!(fbd["count"], 1);
    assert_eq!(fbd["replies"], json!(["reply nc"]));
    let v = check(&s, &arrivals, BOUND, AFTER);
    assert_eq!(v.summary["verdict"], "fail");
    assert!(v.line.contains("failed-but-delivered 1"), "{}", v.line);
}

#[test]
fn a_not_connected_brief_injected_at_all_is_failed_but_delivered() {
    let failed = op("bridge_send", "brief nc", Seen::Failed, "failed/not_connected", (3, 3));
    let (s, mut arrivals) = history(vec![failed]);
    assert_eq!(failed_delivered(&s, &arrivals).0, 0, "never injected: no violation");
    // Typed into the pane, never submitted: it left the main's gateway after all.
    arrivals.injects.insert("brief nc".into(), (1, 0));
    let (violations, fbd) = failed_delivered(&s, &arrivals);
    assert_eq!(violations, 1);
    assert_eq!(fbd["briefs"], json!(["brief nc"]));
    arrivals.injects.insert("brief nc".into(), (1, 1));
    assert_eq!(failed_delivered(&s, &arrivals).0, 1);
}

#[test]
fn other_definite_failures_are_judged_as_before() {
    // `not_submitted`: typed and never submitted is what the reason says — no violation.
    let typed = op("bridge_send", "brief ns", Seen::Failed, "failed/not_submitted", (3, 3));
    // `busy`, injected and submitted after all: a violation.
    let busy = op("bridge_send", "brief busy", Seen::Failed, "failed/busy", (3, 3));
    // A reply for which no call was made, drained anyway: a violation.
    let no_call = op("bridge_reply", "reply none", Seen::Failed, NO_SESSION, (3, 3));
    let (mut s, mut arrivals) = history(vec![typed, busy, no_call]);
    arrivals.injects.insert("brief ns".into(), (1, 0));
    assert_eq!(failed_delivered(&s, &arrivals).0, 0);
    arrivals.injects.insert("brief busy".into(), (1, 1));
    s.drains.push(drain("reply none"));
    let (violations, fbd) = failed_delivered(&s, &arrivals);
    assert_eq!(violations, 2);
    assert_eq!(fbd["briefs"], json!(["brief busy"]));
    assert_eq!(fbd["replies"], json!(["reply none"]));
}

#[test]
fn a_failed_operations_reason() {
    let r = |outcome: &str| {
        op("bridge_send", "t", Seen::Failed, outcome, (0, 0))
            .reason()
            .to_string()
    };
    assert_eq!(r("failed/not_connected"), "not_connected");
    assert_eq!(r("no_route"), "no_route");
    assert_eq!(r(NO_SESSION), NO_SESSION);
    assert_eq!(r("injected→rejected_revoked"), "rejected_revoked");
    assert_eq!(r("failed/inject_timeout→rejected_revoked"), "rejected_revoked");
}

#[test]
fn unknown_rates_with_and_without_the_inherent_ones() {
    let by = json!({"byKind": {
        "broker_restart": {"unknown": 3, "inherent": true},
        "link_cut": {"unknown": 1, "inherent": false},
        "none": {"unknown": 0},
    }});
    let mut ops: Vec<Op> = (0..196)
        .map(|i| op("bridge_send", &format!("b{i}"), Seen::Ok, "injected", (0, 0)))
        .collect();
    for i in 0..4 {
        ops.push(op(
            "bridge_reply",
            &format!("u{i}"),
            Seen::Unknown,
            "failed/publish",
            (0, 0),
        ));
    }
    let r = UnknownRates::of(&ops, &by);
    assert_eq!(
        r,
        UnknownRates {
            operations: 200,
            unknown: 4,
            inherent: 3,
            inherent_kinds: vec!["broker_restart".into()],
        }
    );
    assert_eq!(r.rate_json(), json!({"unknown": 4, "operations": 200, "percent": 2.0}));
    assert_eq!(
        r.excluding_inherent_json(),
        json!({"unknown": 1, "inherent": 3, "inherentKinds": ["broker_restart"], "operations": 200, "percent": 0.5})
    );
    assert_eq!(
        r.line(),
        "unknown 2 % (4 of 200), 0.5 % without the inherent (1; inherent 3: broker_restart)"
    );
    let empty = UnknownRates::of(&[], &json!({}));
    assert_eq!(empty.rate_json()["percent"], 0.0);
    assert_eq!(empty.excluding_inherent(), 0);
}

#[test]
fn unknown_rates_read_the_inherent_kinds_the_checker_marks() {
    // A broker away 30 s (past the 6 s bound): the unknown blamed on it is inherent; a publish
    // lost to a link cut is not.
    let s = SoakState {
        events: vec![event(Strike::BrokerRestart, 10, 30), event(Strike::Cut, 100, 1)],
        ops: vec![
            op("bridge_reply", "r1", Seen::Unknown, "failed/publish", (15, 16)),
            op("bridge_reply", "r2", Seen::Unknown, "failed/publish", (100, 101)),
            op("bridge_reply", "r3", Seen::Ok, "sent", (200, 201)),
        ],
        ..Default::default()
    };
    let by = unknown_by_nemesis(&s, BOUND, AFTER);
    let r = UnknownRates::of(&s.ops, &by);
    assert_eq!((r.operations, r.unknown, r.inherent), (3, 2, 1));
    assert_eq!(r.inherent_kinds, vec!["broker_restart".to_string()]);
}

#[test]
fn definite_failures_per_nemesis_kind_tool_and_reason() {
    let events = vec![event(Strike::Cut, 10, 2), event(Strike::Kill, 50, 3)];
    let ops = vec![
        op("bridge_send", "b1", Seen::Failed, "failed/not_connected", (10, 11)),
        op("bridge_send", "b2", Seen::Failed, "failed/not_connected", (11, 11)),
        op("bridge_reply", "r1", Seen::Failed, "failed/not_connected", (20, 20)),
        op("bridge_send", "b3", Seen::Failed, "failed/busy", (300, 301)),
        // Neither counts: not failed.
        op("bridge_send", "b4", Seen::Unknown, "failed/publish", (10, 11)),
        op("bridge_send", "b5", Seen::Ok, "injected", (10, 11)),
    ];
    let v = failed_by_nemesis(&ops, &events, AFTER);
    assert_eq!(v["failed"], 4);
    assert_eq!(v["byTool"], json!({"bridge_send": 3, "bridge_reply": 1}));
    assert_eq!(v["byReason"], json!({"not_connected": 3, "busy": 1}));
    assert_eq!(
        v["byKind"]["link_cut"],
        json!({
            "strikes": 1,
            "failed": 3,
            "byTool": {"bridge_send": {"not_connected": 2}, "bridge_reply": {"not_connected": 1}},
            "byReason": {"not_connected": 3},
        })
    );
    assert_eq!(v["byKind"]["gateway_kill_restart"]["failed"], 0);
    assert_eq!(v["byKind"]["gateway_kill_restart"]["strikes"], 1);
    assert_eq!(v["byKind"]["none"]["byTool"], json!({"bridge_send": {"busy": 1}}));
    assert!(
        v["byKind"].get("broker_restart").is_none(),
        "kinds that never struck are left out"
    );
    assert_eq!(v["ops"].as_array().map(Vec::len), Some(4));
    assert_eq!(v["ops"][0]["blamedOn"]["kind"], "link_cut");
    assert_eq!(v["ops"][3]["blamedOn"], Value::Null);
    assert_eq!(
        failed_line(&v),
        "failed by nemesis kind: link_cut 3 (bridge_reply not_connected 1, bridge_send not_connected 2), none 1 (bridge_send busy 1)"
    );
    assert_eq!(
        failed_line(&failed_by_nemesis(&[], &events, AFTER)),
        "failed by nemesis kind: none"
    );
}

#[test]
fn the_summary_and_its_line_carry_the_rates_and_the_failures() {
    let failed = op(
        "bridge_send",
        "brief nc",
        Seen::Failed,
        "failed/not_connected",
        (10, 10),
    );
    let unknown = op("bridge_reply", "reply u", Seen::Unknown, "failed/publish", (10, 11));
    let (mut s, arrivals) = history(vec![failed, unknown]);
    s.events = vec![event(Strike::Cut, 10, 1)];
    let v = check(&s, &arrivals, BOUND, AFTER);
    assert_eq!(v.violations, 0);
    assert_eq!(
        v.summary["unknownRate"],
        json!({"unknown": 1, "operations": 4, "percent": 25.0})
    );
    assert_eq!(v.summary["unknownRateExcludingInherent"]["unknown"], 1);
    assert_eq!(v.summary["failedByNemesis"]["byKind"]["link_cut"]["failed"], 1);
    assert_eq!(v.summary["unknownByNemesis"]["byKind"]["link_cut"]["unknown"], 1);
    assert!(
        v.line
            .contains("unknown 25 % (1 of 4), 25 % without the inherent (1; inherent 0)"),
        "{}",
        v.line
    );
    assert!(
        v.line
            .contains("failed by nemesis kind: link_cut 1 (bridge_send not_connected 1)"),
        "{}",
        v.line
    );
}

#[test]
fn the_site_strike_is_named_parsed_in_the_cluster_cycle_and_stops_the_broker() {
    assert_eq!(Strike::parse("site"), Some(Strike::SiteRestart));
    assert_eq!(Strike::SiteRestart.name(), "site_restart");
    assert!(Strike::SiteRestart.restarts_broker() && Strike::BrokerRestart.restarts_broker());
    assert!(!Strike::Kill.restarts_broker());
    assert!(super::config::CLUSTER_CYCLE.contains(&Strike::SiteRestart));
    assert!(!super::config::DEFAULT_CYCLE.contains(&Strike::SiteRestart));
}

#[test]
fn unknowns_of_a_site_restart_are_inherent() {
    let s = SoakState {
        events: vec![event(Strike::SiteRestart, 10, 70)],
        ops: vec![op("bridge_reply", "r1", Seen::Unknown, "error", (12, 20))],
        ..Default::default()
    };
    let v = unknown_by_nemesis(&s, BOUND, AFTER);
    assert_eq!(v["byKind"]["site_restart"]["inherent"], json!(true), "{v}");
    assert_eq!(v["byKind"]["site_restart"]["unknown"], json!(1), "{v}");
}

/// Two seeds are two runs: adjacent seeds (an even one and the odd one after it once gave the same
/// run) pick differently from their first draws on.
#[test]
fn adjacent_seeds_pick_differently() {
    use super::nemesis::Rng;
    let draws = |seed| {
        let mut r = Rng::new(seed);
        (0..8).map(|_| r.below(1001)).collect::<Vec<_>>()
    };
    for seed in [0, 1, 2, 5801, 5802, 5803, 58] {
        assert_eq!(draws(seed), draws(seed), "reproducible");
        assert_ne!(draws(seed), draws(seed + 1), "{seed} and {}", seed + 1);
    }
}
