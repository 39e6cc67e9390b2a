//! The history checker: what arrived ([`Arrivals`]: herdr's input log of each worker pane) and
//! the verdict on a history, a pure function of the two — lost, duplicated, unexpected and
//! failed-but-delivered operations, and the JSON summary (its rates and per-nemesis tallies in
//! [`super::summary`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fleet_conformance::herdr::InputOutcome;
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::history::{Op, Seen, SoakState, blame};
use super::nemesis::{Event, Strike};
use super::summary::{UnknownRates, capped, failed_by_nemesis, failed_line};

/// What arrived: injects per brief text on the workers' panes, with how many were submitted.
#[derive(Default)]
pub(super) struct Arrivals {
    /// Text → (input records, submitted records).
    pub(super) injects: BTreeMap<String, (usize, usize)>,
}

impl Arrivals {
    pub(super) fn read(w: &FleetWorld, workers: &[&String]) -> anyhow::Result<Arrivals> {
        let mut injects: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for name in workers {
            let e = w.entity(name)?;
            for rec in w.host(&e.host)?.herdr.input_log(&e.pane) {
                let slot = injects.entry(rec.text).or_default();
                slot.0 += 1;
                if rec.outcome == InputOutcome::Submitted {
                    slot.1 += 1;
                }
            }
        }
        Ok(Arrivals { injects })
    }

    pub(super) fn total(&self) -> usize {
        self.injects.values().map(|(n, _)| n).sum()
    }
}

/// The checker's findings: a pure function of the history and what arrived.
pub(super) struct Verdict {
    pub(super) summary: Value,
    pub(super) violations: usize,
    pub(super) line: String,
}

/// The reference gateway's reconnect backoff cap (CON-3): how long after a broker is back a
/// gateway may still be reconnecting.
const RECONNECT_BACKOFF_CAP: Duration = Duration::from_secs(10);

/// The *unknown* operations put down to the nemesis kind that caused them ([`blame`]), per tool,
/// with a note where they are inherent: a broker away for longer than the caller's bound leaves
/// every operation in flight then unknown whatever a gateway does ([C-16]; [C-18]'s republish
/// only helps within the bound). A strike's effects are counted for `after` past its end (the
/// gateways' reconnect, backoff included). Issue 28's goal: near 0 for `connection_close` and
/// `link_cut` ([C-18]).
pub(super) fn unknown_by_nemesis(s: &SoakState, bound: Duration, after: Duration) -> Value {
    let mut by_kind: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut ops = Vec::new();
    let secs = |d: Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
    for op in s.ops.iter().filter(|o| o.seen == Seen::Unknown) {
        let blamed = blame(&s.events, op.span, after);
        let kind = blamed.map_or("none", |e| e.strike.name());
        *by_kind.entry(kind).or_default().entry(op.tool).or_default() += 1;
        ops.push(json!({
            "tool": op.tool,
            "text": op.text,
            "outcome": op.outcome,
            "startS": secs(op.span.0),
            "endS": secs(op.span.1),
            "blamedOn": blamed.map(|e| json!({"kind": kind, "atS": secs(e.at), "target": e.target})),
        }));
    }
    let mut out = serde_json::Map::new();
    for strike in Strike::ALL {
        let evs: Vec<&Event> = s.events.iter().filter(|e| e.strike == strike).collect();
        if evs.is_empty() {
            continue;
        }
        let counts = by_kind.remove(strike.name()).unwrap_or_default();
        let longest = evs.iter().map(|e| e.took).max().unwrap_or_default();
        let (inherent, note) = match strike {
            // The reference's reconnect backoff doubles up to 10 s: a broker away for T is back
            // for a gateway up to 10 s later.
            Strike::BrokerRestart if longest + RECONNECT_BACKOFF_CAP > bound => (
                true,
                format!(
                    "the broker was away up to {:.0} s; with the gateways' reconnect backoff (up to {} s) that is past the callers' bound ({:.0} s): an operation in flight then ends unknown whatever the gateway does ([C-16]; [C-18] only helps within the bound)",
                    longest.as_secs_f64(),
                    RECONNECT_BACKOFF_CAP.as_secs(),
                    bound.as_secs_f64()
                ),
            ),
            // Every gateway and the broker away together for up to a minute: everything in flight
            // then outlives the callers' bound.
            Strike::SiteRestart => (
                true,
                format!(
                    "the whole site was down and came back over up to {:.0} s: an operation in flight then outlives the callers' bound ({:.0} s) and ends unknown whatever the gateways do ([C-16])",
                    longest.as_secs_f64(),
                    bound.as_secs_f64()
                ),
            ),
            Strike::NodeKill | Strike::LeaderKill | Strike::Partition
                if !counts.is_empty() && counts.keys().all(|t| *t == "bridge_send") =>
            (
                true,
                "briefs in flight when a node went: a SEND whose confirm was lost with the node is never republished ([C-18] forbids it), and an INJECTED lost with it ends inject_timeout (FWD-5, CLU-5(b))".to_string(),
            ),
            Strike::RevokeRestore if !counts.is_empty() => (
                true,
                "operations of a host whose certificate was revoked (MEM-4): what it signs is rejected `revoked` everywhere with no FAILED (SIG-6), so a brief to it ends inject_timeout (its INJECTED rejected) and a brief from it too (the SEND rejected; counted failed where the worker's gateway logged it, see rejectedAsRevoked)".to_string(),
            ),
            // MEM-3: a rotation loses, rejects and duplicates nothing; an unknown here is the
            // gateway's to explain (never inherent).
            Strike::Rotate => (false, String::new()),
            Strike::Kill | Strike::Pause if !counts.is_empty() && counts.keys().all(|t| *t == "bridge_send") => (
                true,
                "briefs to a worker whose gateway is dead or frozen end inject_timeout (FWD-5): unknown by design of the at-most-once forward path".to_string(),
            ),
            _ if !counts.is_empty() && counts.keys().all(|t| *t == "bridge_send") => (
                true,
                "SENDs whose confirm was lost with the broker: never republished ([C-18] forbids it for SEND)".to_string(),
            ),
            _ => (false, String::new()),
        };
        out.insert(
            strike.name().into(),
            json!({
                "strikes": evs.len(),
                "unknown": counts.values().sum::<usize>(),
                "byTool": counts,
                "inherent": inherent,
                "note": note,
            }),
        );
    }
    let none = by_kind.remove("none").unwrap_or_default();
    out.insert(
        "none".into(),
        json!({"unknown": none.values().sum::<usize>(), "byTool": none, "note": "no strike began before the call ended and ended less than the reconnect allowance before it began"}),
    );
    json!({
        "reconnectAllowanceS": (after.as_secs_f64() * 10.0).round() / 10.0,
        "byKind": out,
        "ops": capped(&ops),
    })
}

/// One line of unknowns per kind for the terminal.
pub(super) fn unknown_line(v: &Value) -> String {
    let parts: Vec<String> = v["byKind"]
        .as_object()
        .map(|o| {
            o.iter()
                .map(|(k, x)| {
                    format!(
                        "{k} {}{}",
                        x["unknown"],
                        if x["inherent"] == json!(true) {
                            " (inherent)"
                        } else {
                            ""
                        }
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!("unknown by nemesis kind: {}", parts.join(", "))
}

/// The verdict on `s` given what arrived. `bound` is the callers' bound and `after` the reconnect
/// allowance, for the summary's per-nemesis parts ([`unknown_by_nemesis`]).
pub(super) fn check(s: &SoakState, arrivals: &Arrivals, bound: Duration, after: Duration) -> Verdict {
    // Drains of REPLY messages: text → life → times; other kinds (late INJECTED/FAILED notices)
    // are counted apart.
    let mut drained: BTreeMap<&str, BTreeMap<u32, usize>> = BTreeMap::new();
    let mut notices: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &s.drains {
        if d.kind == "REPLY" {
            *drained.entry(&d.text).or_default().entry(d.life).or_default() += 1;
        } else {
            *notices.entry(&d.kind).or_default() += 1;
        }
    }
    let arrived = |op: &Op| -> bool {
        match op.tool {
            "bridge_send" => arrivals.injects.contains_key(&op.text),
            _ => drained.contains_key(op.text.as_str()),
        }
    };
    // Operations by kind and class, outcomes counted.
    let mut by_tool: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut outcomes: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut unknown_arrived: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for op in &s.ops {
        let t = by_tool.entry(op.tool).or_default();
        *t.entry("total").or_default() += 1;
        *t.entry(op.seen.as_str()).or_default() += 1;
        *outcomes.entry(op.tool).or_default().entry(&op.outcome).or_default() += 1;
        if op.seen == Seen::Unknown {
            let u = unknown_arrived.entry(op.tool).or_default();
            if arrived(op) {
                u.0 += 1;
            } else {
                u.1 += 1;
            }
        }
    }
    let class = |c: Seen| s.ops.iter().filter(|o| o.seen == c).count();
    // Lost: ok, never arrived.
    let lost: Vec<&Op> = s.ops.iter().filter(|o| o.seen == Seen::Ok && !arrived(o)).collect();
    // Failed but delivered, whatever the reason: a brief injected and submitted (typed at all,
    // where it never left the main's gateway), a reply drained.
    let failed_delivered: Vec<&Op> = s
        .ops
        .iter()
        .filter(|o| o.seen == Seen::Failed)
        .filter(|o| match o.tool {
            "bridge_send" => arrivals
                .injects
                .get(&o.text)
                .is_some_and(|(n, sub)| *sub > 0 || (o.never_left() && *n > 0)),
            _ => drained.contains_key(o.text.as_str()),
        })
        .collect();
    // Duplicated: a brief typed into a pane twice (any class); a reply drained twice in one life.
    let dup_injects: Vec<Value> = arrivals
        .injects
        .iter()
        .filter(|(_, (n, _))| *n > 1)
        .map(|(t, (n, sub))| json!({"text": t, "injects": n, "submitted": sub}))
        .collect();
    let mut dup_drains = Vec::new();
    let mut across_lives = Vec::new();
    for (text, lives) in &drained {
        for (life, times) in lives {
            if *times > 1 {
                dup_drains.push(json!({"text": text, "gatewayLife": life, "drains": times}));
            }
        }
        if lives.len() > 1 {
            across_lives.push(json!({"text": text, "lives": lives.len()}));
        }
    }
    // Unexpected: arrived, sent by no operation.
    let sent: BTreeSet<&str> = s.ops.iter().map(|o| o.text.as_str()).collect();
    let unexpected_injects: Vec<&String> = arrivals.injects.keys().filter(|t| !sent.contains(t.as_str())).collect();
    let unexpected_drains: Vec<&&str> = drained.keys().filter(|t| !sent.contains(**t)).collect();
    let mut nemesis_by_kind: BTreeMap<&str, Value> = BTreeMap::new();
    for strike in Strike::ALL {
        let evs: Vec<&Event> = s.events.iter().filter(|e| e.strike == strike).collect();
        if evs.is_empty() && s.off.contains_key(strike.name()) {
            continue;
        }
        nemesis_by_kind.insert(
            strike.name(),
            json!({
                "count": evs.len(),
                "missed": evs.iter().filter(|e| !e.done).count(),
                "atS": evs.iter().map(|e| (e.at.as_secs_f64() * 10.0).round() / 10.0).collect::<Vec<_>>(),
                "tookS": evs.iter().map(|e| (e.took.as_secs_f64() * 10.0).round() / 10.0).collect::<Vec<_>>(),
            }),
        );
    }
    let events: Vec<Value> = s
        .events
        .iter()
        .map(|e| {
            json!({
                "atS": (e.at.as_secs_f64() * 10.0).round() / 10.0,
                "kind": e.strike.name(),
                "target": e.target,
                "tookS": (e.took.as_secs_f64() * 10.0).round() / 10.0,
                "done": e.done,
                "detail": e.detail,
            })
        })
        .collect();
    let texts = |ops: &[&Op], tool: &str| -> Vec<String> {
        ops.iter().filter(|o| o.tool == tool).map(|o| o.text.clone()).collect()
    };
    let violations = lost.len()
        + failed_delivered.len()
        + dup_injects.len()
        + dup_drains.len()
        + unexpected_injects.len()
        + unexpected_drains.len();
    let ok_briefs = s
        .ops
        .iter()
        .filter(|o| o.tool == "bridge_send" && o.seen == Seen::Ok)
        .count();
    let ok_replies = s
        .ops
        .iter()
        .filter(|o| o.tool == "bridge_reply" && o.seen == Seen::Ok)
        .count();
    let proves_something = ok_briefs > 0 && ok_replies > 0;
    let pass = violations == 0 && proves_something;
    let mut by_tool_json = serde_json::Map::new();
    for (tool, counts) in &by_tool {
        let (arr, not) = unknown_arrived.get(tool).copied().unwrap_or_default();
        by_tool_json.insert(
            tool.to_string(),
            json!({
                "total": counts.get("total").copied().unwrap_or(0),
                "ok": counts.get("ok").copied().unwrap_or(0),
                "failed": counts.get("failed").copied().unwrap_or(0),
                "unknown": counts.get("unknown").copied().unwrap_or(0),
                "unknownArrived": arr,
                "unknownNotArrived": not,
                "outcomes": outcomes.get(tool),
            }),
        );
    }
    by_tool_json.insert(
        "bridge_poll".into(),
        json!({"total": s.polls_ok + s.polls_unknown, "ok": s.polls_ok, "unknown": s.polls_unknown}),
    );
    let config = s.config.as_ref();
    let unknown_by = unknown_by_nemesis(s, bound, after);
    let rates = UnknownRates::of(&s.ops, &unknown_by);
    let failed_by = failed_by_nemesis(&s.ops, &s.events, after);
    let summary = json!({
        "verdict": if pass { "pass" } else { "fail" },
        "violations": violations,
        "startedAtUnixMs": s.started_unix_ms as u64,
        "durationS": (s.ran_for.as_secs_f64() * 10.0).round() / 10.0,
        "config": {
            "briefsPerWorker": s.briefs_per_worker,
            "repliesPerWorker": s.replies_per_worker,
            "nemesisEveryMs": s.every.as_millis() as u64,
            "opsSpreadOverStrikes": s.spread,
            "nemesisCycle": config.map(|c| c.cycle.iter().map(|s| s.name()).collect::<Vec<_>>()),
            "seed": config.map(|c| c.seed),
            "timeScale": fleet_conformance::timing::time_scale(),
        },
        "operations": by_tool_json,
        "ok": class(Seen::Ok),
        "failed": class(Seen::Failed),
        "unknown": class(Seen::Unknown),
        "unknownRate": rates.rate_json(),
        "unknownRateExcludingInherent": rates.excluding_inherent_json(),
        "unknownByNemesis": unknown_by,
        "failedByNemesis": failed_by,
        "lost": {
            "count": lost.len(),
            "briefs": capped(&texts(&lost, "bridge_send")),
            "replies": capped(&texts(&lost, "bridge_reply")),
        },
        "duplicated": {
            "count": dup_injects.len() + dup_drains.len(),
            "injects": capped(&dup_injects),
            "drainsWithinOneGatewayLife": capped(&dup_drains),
        },
        "unexpected": {
            "count": unexpected_injects.len() + unexpected_drains.len(),
            "injects": capped(&unexpected_injects),
            "drains": capped(&unexpected_drains),
        },
        "failedButDelivered": {
            "count": failed_delivered.len(),
            "briefs": capped(&texts(&failed_delivered, "bridge_send")),
            "replies": capped(&texts(&failed_delivered, "bridge_reply")),
        },
        "redeliveredAcrossGatewayLives": capped(&across_lives),
        "arrived": {
            "injectRecords": arrivals.total(),
            "distinctBriefsInjected": arrivals.injects.len(),
            "replyDrains": drained.values().flat_map(|l| l.values()).sum::<usize>(),
            "distinctRepliesDrained": drained.len(),
            "otherDrainedKinds": notices,
        },
        "nemesis": {
            "strikes": s.events.len(),
            "byKind": nemesis_by_kind,
            "off": s.off,
            "events": events,
        },
        "provesSomething": proves_something,
    });
    let line = format!(
        "soak history: {} — ops {} (ok {} / failed {} / unknown {}; briefs ok {ok_briefs}, replies ok {ok_replies}); \
         lost {}, duplicated {}, unexpected {}, failed-but-delivered {}; {}; {}; nemesis {} strikes {:?}; {:.0} s",
        if pass { "PASS" } else { "FAIL" },
        s.ops.len(),
        class(Seen::Ok),
        class(Seen::Failed),
        class(Seen::Unknown),
        lost.len(),
        dup_injects.len() + dup_drains.len(),
        unexpected_injects.len() + unexpected_drains.len(),
        failed_delivered.len(),
        rates.line(),
        failed_line(&summary["failedByNemesis"]),
        s.events.len(),
        nemesis_by_kind
            .iter()
            .map(|(k, v)| format!("{k}×{}", v["count"]))
            .collect::<Vec<_>>(),
        s.ran_for.as_secs_f64(),
    );
    Verdict {
        summary,
        violations,
        line,
    }
}
