//! The soak summary's rates and tallies beside the verdict (issue 35): the unknown rate over all
//! operations, with and without the unknowns [`super::check::unknown_by_nemesis`] marks inherent
//! (a broker away past the callers' bound, …) — [`UnknownRates`] — and the definite failures put
//! down to the nemesis kind that caused them, per tool and per reason ([`failed_by_nemesis`]).
//! Neither judges anything: they measure how often a caller is left unable to tell, and how often
//! it is told "not sent" instead. Pure functions of the history.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use super::history::{Op, Seen, blame};
use super::nemesis::{Event, Strike};

/// At most this many items of each list go into the JSON (the counts are always whole).
const LIST_MAX: usize = 100;

pub(super) fn capped<T: serde::Serialize>(items: &[T]) -> Value {
    json!(items.iter().take(LIST_MAX).collect::<Vec<_>>())
}

/// The unknown operations among all operations (briefs and replies; the main's polls are counted
/// apart), and how many of them are inherent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct UnknownRates {
    pub(super) operations: usize,
    pub(super) unknown: usize,
    /// The unknowns blamed on a nemesis kind whose entry in `unknownByNemesis` says `inherent`.
    pub(super) inherent: usize,
    /// Those kinds.
    pub(super) inherent_kinds: Vec<String>,
}

/// A share of `operations` in percent, to two decimals (0 of 0 is 0 %).
fn percent(n: usize, operations: usize) -> f64 {
    if operations == 0 {
        return 0.0;
    }
    (n as f64 * 10_000.0 / operations as f64).round() / 100.0
}

impl UnknownRates {
    /// Counts the unknown operations of `ops` and reads which of them are inherent off
    /// `unknown_by_nemesis` (the value [`super::check::unknown_by_nemesis`] made of the same ops).
    pub(super) fn of(ops: &[Op], unknown_by_nemesis: &Value) -> UnknownRates {
        let mut inherent = 0;
        let mut inherent_kinds = Vec::new();
        if let Some(kinds) = unknown_by_nemesis["byKind"].as_object() {
            for (kind, v) in kinds {
                if v["inherent"] == json!(true) {
                    inherent += v["unknown"].as_u64().unwrap_or(0) as usize;
                    inherent_kinds.push(kind.clone());
                }
            }
        }
        let unknown = ops.iter().filter(|o| o.seen == Seen::Unknown).count();
        UnknownRates {
            operations: ops.len(),
            unknown,
            inherent: inherent.min(unknown),
            inherent_kinds,
        }
    }

    /// The unknowns that are not inherent: what the gateways could have answered definitely.
    pub(super) fn excluding_inherent(&self) -> usize {
        self.unknown - self.inherent
    }

    /// `unknownRate`: every unknown over every operation.
    pub(super) fn rate_json(&self) -> Value {
        json!({
            "unknown": self.unknown,
            "operations": self.operations,
            "percent": percent(self.unknown, self.operations),
        })
    }

    /// `unknownRateExcludingInherent`: the unknowns that are not inherent, still over every
    /// operation (so the two rates differ by exactly the inherent share).
    pub(super) fn excluding_inherent_json(&self) -> Value {
        json!({
            "unknown": self.excluding_inherent(),
            "inherent": self.inherent,
            "inherentKinds": self.inherent_kinds,
            "operations": self.operations,
            "percent": percent(self.excluding_inherent(), self.operations),
        })
    }

    /// For the one-line summary.
    pub(super) fn line(&self) -> String {
        format!(
            "unknown {} % ({} of {}), {} % without the inherent ({}; inherent {}{})",
            percent(self.unknown, self.operations),
            self.unknown,
            self.operations,
            percent(self.excluding_inherent(), self.operations),
            self.excluding_inherent(),
            self.inherent,
            if self.inherent_kinds.is_empty() {
                String::new()
            } else {
                format!(": {}", self.inherent_kinds.join(", "))
            },
        )
    }
}

/// Tool → reason → operations.
type ByToolReason<'a> = BTreeMap<&'a str, BTreeMap<&'a str, usize>>;

fn kind_json(counts: &ByToolReason<'_>) -> Value {
    let mut by_reason: BTreeMap<&str, usize> = BTreeMap::new();
    for reasons in counts.values() {
        for (reason, n) in reasons {
            *by_reason.entry(reason).or_default() += n;
        }
    }
    json!({
        "failed": by_reason.values().sum::<usize>(),
        "byTool": counts,
        "byReason": by_reason,
    })
}

/// The *failed* operations (definite: not delivered) put down to the nemesis kind under way when
/// they were called, as [`super::check::unknown_by_nemesis`] puts down the unknowns ([`blame`],
/// with the same reconnect allowance `after`): per kind, per tool and reason ([`Op::reason`]:
/// `not_connected`, `busy`, `no_route`, …), with the totals per tool and per reason. Every kind
/// that struck gets an entry (0 where nothing failed), `none` the failures near no strike.
pub(super) fn failed_by_nemesis(ops: &[Op], events: &[Event], after: Duration) -> Value {
    let secs = |d: Duration| (d.as_secs_f64() * 10.0).round() / 10.0;
    let mut by_kind: BTreeMap<&str, ByToolReason<'_>> = BTreeMap::new();
    let mut all: ByToolReason<'_> = BTreeMap::new();
    let mut listed = Vec::new();
    for op in ops.iter().filter(|o| o.seen == Seen::Failed) {
        let blamed = blame(events, op.span, after);
        let kind = blamed.map_or("none", |e| e.strike.name());
        *by_kind
            .entry(kind)
            .or_default()
            .entry(op.tool)
            .or_default()
            .entry(op.reason())
            .or_default() += 1;
        *all.entry(op.tool).or_default().entry(op.reason()).or_default() += 1;
        listed.push(json!({
            "tool": op.tool,
            "text": op.text,
            "reason": op.reason(),
            "outcome": op.outcome,
            "startS": secs(op.span.0),
            "endS": secs(op.span.1),
            "blamedOn": blamed.map(|e| json!({"kind": kind, "atS": secs(e.at), "target": e.target})),
        }));
    }
    let mut out = serde_json::Map::new();
    for strike in Strike::ALL {
        let strikes = events.iter().filter(|e| e.strike == strike).count();
        if strikes == 0 {
            continue;
        }
        let mut v = kind_json(&by_kind.remove(strike.name()).unwrap_or_default());
        v["strikes"] = json!(strikes);
        out.insert(strike.name().into(), v);
    }
    out.insert("none".into(), kind_json(&by_kind.remove("none").unwrap_or_default()));
    let totals = kind_json(&all);
    let per_tool: BTreeMap<&str, usize> = all.iter().map(|(t, r)| (*t, r.values().sum())).collect();
    json!({
        "failed": totals["failed"],
        "byTool": per_tool,
        "byReason": totals["byReason"],
        "byKind": out,
        "ops": capped(&listed),
    })
}

/// One line of definite failures per nemesis kind (those with any), for the terminal:
/// `failed by nemesis kind: link_cut 3 (bridge_send not_connected 2, bridge_reply not_connected 1)`.
pub(super) fn failed_line(v: &Value) -> String {
    let parts: Vec<String> = v["byKind"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, x)| x["failed"].as_u64().unwrap_or(0) > 0)
                .map(|(k, x)| {
                    let detail: Vec<String> = x["byTool"]
                        .as_object()
                        .map(|tools| {
                            tools
                                .iter()
                                .flat_map(|(tool, reasons)| {
                                    reasons
                                        .as_object()
                                        .map(|r| {
                                            r.iter()
                                                .map(|(reason, n)| format!("{tool} {reason} {n}"))
                                                .collect::<Vec<_>>()
                                        })
                                        .unwrap_or_default()
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    format!("{k} {} ({})", x["failed"], detail.join(", "))
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "failed by nemesis kind: {}",
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    )
}
