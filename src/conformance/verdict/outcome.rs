//! The run's verdict: PASS, FAIL or INCOMPLETE, and what an INCOMPLETE one could not judge.
//!
//! Exists because "not tested" has two causes a verdict must not mix: the gateway's run never
//! reported a result (a FAIL: nothing may pass unseen), or the brokers of the run cannot run the
//! scenarios at all — a gateway that declares `cluster` run on one node, `@node-partition` on a
//! provider that cannot cut a node off, `@broker-tls` without a TLS listener. The second is no
//! failure of the gateway, and no pass either: INCOMPLETE, with its own exit code, naming each
//! requirement, the capability it belongs to and the broker that would judge it.

use serde::Serialize;

use super::super::registry::Level;
use crate::broker::{CLUSTER_TAG, NODE_LOSS_TAG, NODE_PARTITION_TAG, RESTART_TAG, TLS_TAG};

/// The whole run's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum RunVerdict {
    /// Every requirement the run had to judge was judged, and none failed.
    #[serde(rename = "PASS")]
    Pass,
    /// A requirement failed (or was not tested for a reason that is the run's, not the brokers'),
    /// or a baseline entry is stale.
    #[serde(rename = "FAIL")]
    Fail,
    /// Nothing failed, but some requirement the run had to judge could not be judged on these
    /// brokers (see [`Unjudged`]).
    #[serde(rename = "INCOMPLETE")]
    Incomplete,
}

impl RunVerdict {
    pub fn as_str(self) -> &'static str {
        match self {
            RunVerdict::Pass => "PASS",
            RunVerdict::Fail => "FAIL",
            RunVerdict::Incomplete => "INCOMPLETE",
        }
    }

    /// `fleet-conformance run`'s exit status for it (2 and 130/143 are the run's own).
    pub fn exit_code(self) -> u8 {
        match self {
            RunVerdict::Pass => 0,
            RunVerdict::Fail => 1,
            RunVerdict::Incomplete => 3,
        }
    }
}

/// A requirement the run had to judge — a MUST, a SHOULD under `--strict`, or one of a declared
/// capability — that no broker of the run judged, because every selected scenario of it was left
/// out by the brokers (or failed only a check under review).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unjudged {
    pub requirement: String,
    pub level: Level,
    /// The declared capability it belongs to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability: Option<String>,
    /// What would judge it: the broker (or the settled review) each left-out part needs.
    pub needs: Vec<String>,
}

/// What a broker must be to run a scenario left out for these tags (without `@`), most specific
/// first; `None` when no tag says (the left-out's own reason then stands).
pub fn broker_needed(tags: &[String]) -> Option<&'static str> {
    let has = |t: &str| tags.iter().any(|x| x.trim_start_matches('@') == t);
    if has(NODE_PARTITION_TAG) {
        Some("container:rabbitmq-cluster (only the container provider can cut a node off)")
    } else if has(NODE_LOSS_TAG) {
        Some(
            "a cluster the suite starts (process:rabbitmq-cluster or container:rabbitmq-cluster) to kill and start its nodes",
        )
    } else if has(CLUSTER_TAG) {
        Some("a cluster broker (process:rabbitmq-cluster, container:rabbitmq-cluster or url:rabbitmq-cluster)")
    } else if has(RESTART_TAG) {
        Some("a broker the suite starts (process: or container:) to restart it")
    } else if has(TLS_TAG) {
        Some(
            "a broker with a TLS listener (process:, container:, or url: with FLEET_BROKER_AMQPS_URL and FLEET_BROKER_CA_FILE)",
        )
    } else if has(CLASSIC_INBOX_TAG) {
        Some("a single-node broker (the gateway then runs classic inboxes)")
    } else {
        None
    }
}

/// Tag of the scenarios that judge a classic inbox's form (left out on a cluster broker).
const CLASSIC_INBOX_TAG: &str = "classic-inbox";

/// What an under-review failure leaves unjudged needs (see `super::super::review`).
pub const NEEDS_REVIEW: &str = "the review of its check (CONTRACT §10) to be settled";

/// The unjudged requirements in lines, grouped by capability and need, in their order:
/// `capability cluster: CLU-2, CLU-3 need a cluster broker (…)`.
pub fn incomplete_lines(unjudged: &[Unjudged]) -> Vec<String> {
    let mut groups: Vec<(Option<&str>, &[String], Vec<&str>)> = Vec::new();
    for u in unjudged {
        let key = (u.capability.as_deref(), u.needs.as_slice());
        match groups.iter_mut().find(|(c, n, _)| (*c, *n) == key) {
            Some(g) => g.2.push(&u.requirement),
            None => groups.push((key.0, key.1, vec![&u.requirement])),
        }
    }
    groups
        .into_iter()
        .map(|(cap, needs, ids)| {
            let verb = if ids.len() == 1 { "needs" } else { "need" };
            let who = match cap {
                Some(c) => format!("capability {c}: {}", ids.join(", ")),
                None => ids.join(", "),
            };
            format!("{who} {verb} {}", needs.join("; and "))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(t: &[&str]) -> Vec<String> {
        t.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_most_specific_need_is_named() {
        let partition = broker_needed(&tags(&["cluster", "broker-cluster", "node-partition", "CLU-6"]));
        assert!(
            partition.is_some_and(|n| n.starts_with("container:rabbitmq-cluster")),
            "{partition:?}"
        );
        let cluster = broker_needed(&tags(&["@broker-cluster", "@CLU-2"]));
        assert!(
            cluster.is_some_and(|n| n.starts_with("a cluster broker")),
            "{cluster:?}"
        );
        assert!(broker_needed(&tags(&["broker-tls"])).is_some_and(|n| n.contains("TLS")));
        assert!(broker_needed(&tags(&["broker-restart"])).is_some_and(|n| n.contains("restart")));
        assert!(broker_needed(&tags(&["classic-inbox"])).is_some_and(|n| n.contains("single-node")));
        assert_eq!(broker_needed(&tags(&["FWD-1", "smoke"])), None);
    }

    #[test]
    fn unjudged_requirements_are_grouped_by_capability_and_need() {
        let u = |id: &str, cap: Option<&str>, need: &str| Unjudged {
            requirement: id.into(),
            level: Level::Must,
            capability: cap.map(str::to_string),
            needs: vec![need.to_string()],
        };
        let lines = incomplete_lines(&[
            u("CLU-2", Some("cluster"), "a cluster broker"),
            u("CLU-3", Some("cluster"), "a cluster broker"),
            u("CLU-6", Some("cluster"), "container:rabbitmq-cluster"),
            u("SEC-1", None, "a TLS listener"),
        ]);
        assert_eq!(
            lines,
            [
                "capability cluster: CLU-2, CLU-3 need a cluster broker",
                "capability cluster: CLU-6 needs container:rabbitmq-cluster",
                "SEC-1 needs a TLS listener",
            ]
        );
    }

    #[test]
    fn each_verdict_has_its_own_exit_code() {
        let codes: Vec<u8> = [RunVerdict::Pass, RunVerdict::Fail, RunVerdict::Incomplete]
            .iter()
            .map(|v| v.exit_code())
            .collect();
        assert_eq!(
            codes,
            [0, 1, 3],
            "2 is a run that could not be made, 130/143 an interrupted one"
        );
    }
}
