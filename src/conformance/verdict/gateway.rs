//! Scenarios that failed on the gateway process itself — its command not found or not
//! executable, an exit before it was ready, never ready, garbage for an answer, dead after it was
//! ready — grouped into one line per broker and kind for the summary (issue 45): "all 12
//! scenarios on process:rabbitmq: gateway command not found: /opt/gw (sh: exit 127)" instead of
//! twelve alike blocks. Each scenario keeps its own line in its error; this reads it back
//! ([`crate::gateway::failure::find`]). A run the runner's pre-flight stopped has no scenario:
//! its brokers' error carries the line, and it reads "before the suite started".

use serde::Serialize;

use super::{BrokerRun, Outcome};
use crate::gateway::failure::{self, Unusable};

/// Scenarios of one broker that failed alike on the gateway process (or the pre-flight's line).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayFailures {
    /// The broker's label; `None`: before the suite started (the runner's pre-flight).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    /// `command-not-found`, `not-executable`, `exited`, `never-ready`, `garbage`, `died`.
    pub kind: String,
    /// The reason, its listen address masked (the most common one among them).
    pub reason: String,
    /// How many scenarios failed so.
    pub scenarios: usize,
    /// How many scenarios reported on that broker.
    pub of: usize,
    /// How many of them said it with other details (another status, another last line).
    pub other_details: usize,
    /// The summary's line.
    pub line: String,
}

/// What [`BrokerRun::error`] says when the runner's pre-flight found the gateway command cannot
/// be run (nothing ran): the failure's own line, which [`gateway_failures`] reads back.
pub fn not_run_error(u: &Unusable) -> String {
    format!("not run: {u}")
}

/// Marks every broker as not run because of the pre-flight's `u`: [`not_run_error`].
pub fn preflight_failed(runs: &mut [BrokerRun], u: &Unusable) {
    for r in runs {
        r.error = Some(not_run_error(u));
        r.scenarios.clear();
    }
}

/// The gateway failures of the run, grouped: the pre-flight's first, then per broker and kind in
/// the order they first appear.
pub fn gateway_failures(brokers: &[BrokerRun]) -> Vec<GatewayFailures> {
    let mut out: Vec<GatewayFailures> = Vec::new();
    for u in brokers
        .iter()
        .filter_map(|b| b.error.as_deref().and_then(failure::find))
    {
        let reason = u.normalized_reason();
        if out.iter().any(|g| g.reason == reason) {
            continue;
        }
        out.push(GatewayFailures {
            broker: None,
            kind: u.kind.to_string(),
            line: format!("before the suite started (nothing was run): {reason}"),
            reason,
            scenarios: 0,
            of: 0,
            other_details: 0,
        });
    }
    for b in brokers {
        let of = b.scenarios.len();
        // (kind, [(reason, count)]) in the order of first appearance.
        let mut groups: Vec<(failure::Kind, Vec<(String, usize)>)> = Vec::new();
        for u in b
            .scenarios
            .iter()
            .filter(|s| s.outcome == Outcome::Failed)
            .filter_map(|s| s.error.as_deref().and_then(failure::find))
        {
            let reason = u.normalized_reason();
            let at = match groups.iter().position(|(k, _)| *k == u.kind) {
                Some(at) => at,
                None => {
                    groups.push((u.kind, Vec::new()));
                    groups.len() - 1
                }
            };
            let reasons = &mut groups[at].1;
            match reasons.iter_mut().find(|(r, _)| *r == reason) {
                Some((_, n)) => *n += 1,
                None => reasons.push((reason, 1)),
            }
        }
        for (kind, reasons) in groups {
            let scenarios: usize = reasons.iter().map(|(_, n)| n).sum();
            let mut common = &reasons[0];
            for r in &reasons {
                if r.1 > common.1 {
                    common = r;
                }
            }
            let other_details = scenarios - common.1;
            let who = if scenarios == of && of == 1 {
                format!("the only scenario on {}", b.label)
            } else if scenarios == of {
                format!("all {of} scenarios on {}", b.label)
            } else {
                format!("{scenarios} of {of} scenarios on {}", b.label)
            };
            let others = if other_details > 0 {
                format!(" ({other_details} of them with other details: see each scenario)")
            } else {
                String::new()
            };
            out.push(GatewayFailures {
                broker: Some(b.label.clone()),
                kind: kind.to_string(),
                line: format!("{who}: {}{others}", common.0),
                reason: common.0.clone(),
                scenarios,
                of,
                other_details,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::verdict::ScenarioResult;
    use crate::gateway::failure::Kind;

    fn scenario(line: usize, outcome: Outcome, error: Option<String>) -> ScenarioResult {
        ScenarioResult {
            name: format!("s{line}"),
            file: "features/x.feature".into(),
            line,
            tags: vec![],
            outcome,
            error,
            log: None,
        }
    }

    fn broker(scenarios: Vec<ScenarioResult>) -> BrokerRun {
        BrokerRun {
            label: "process:rabbitmq".into(),
            kind: "rabbitmq".into(),
            version: None,
            error: None,
            scenarios,
            left_out: vec![],
        }
    }

    fn failed_on(host: &str, kind: Kind, reason: &str) -> Option<String> {
        Some(format!(
            "Given host \"{host}\" runs a gateway\nStep panicked. Captured output: {}\n--- last log lines ---\nx",
            Unusable::new(host, kind, reason)
        ))
    }

    #[test]
    fn alike_failures_are_one_line_per_broker_and_kind() {
        let never = |port: u16| {
            failed_on(
                "a",
                Kind::NeverReady,
                &format!("gateway never answered /readyz on 127.0.0.1:{port} within 30 s: nothing listened there"),
            )
        };
        let run = broker(vec![
            scenario(1, Outcome::Failed, never(20001)),
            scenario(2, Outcome::Failed, never(20002)),
            scenario(3, Outcome::Failed, never(20003)),
        ]);
        let g = gateway_failures(&[run]);
        assert_eq!(g.len(), 1);
        assert_eq!(
            g[0].line,
            "all 3 scenarios on process:rabbitmq: gateway never answered /readyz on 127.0.0.1:PORT within 30 s: \
             nothing listened there"
        );
        assert_eq!(
            (g[0].kind.as_str(), g[0].scenarios, g[0].other_details),
            ("never-ready", 3, 0)
        );
    }

    #[test]
    fn other_failures_and_passes_are_counted_but_not_grouped() {
        let exited = |last: &str| {
            failed_on(
                "b",
                Kind::Exited,
                &format!("gateway exited with status 1 before /readyz answered (last output line: {last})"),
            )
        };
        let run = broker(vec![
            scenario(1, Outcome::Passed, None),
            scenario(2, Outcome::Failed, Some("Then x\nexpected 1, got 2".into())),
            scenario(3, Outcome::Failed, exited("boom at 10:01")),
            scenario(4, Outcome::Failed, exited("boom at 10:02")),
            scenario(5, Outcome::Failed, exited("boom at 10:02")),
        ]);
        let g = gateway_failures(&[run]);
        assert_eq!(g.len(), 1);
        assert_eq!(
            g[0].line,
            "3 of 5 scenarios on process:rabbitmq: gateway exited with status 1 before /readyz answered (last output \
             line: boom at 10:02) (1 of them with other details: see each scenario)"
        );
        assert!(gateway_failures(&[broker(vec![scenario(1, Outcome::Passed, None)])]).is_empty());
    }

    #[test]
    fn the_preflight_s_line_reads_before_the_suite_started() {
        let u = Unusable::new(
            "preflight",
            Kind::CommandNotFound,
            "gateway command not found: /nonexistent/gw (sh: exit 127)",
        );
        let mut runs = vec![broker(vec![]), broker(vec![])];
        runs[1].label = "process:lavinmq".into();
        preflight_failed(&mut runs, &u);
        let g = gateway_failures(&runs);
        assert_eq!(g.len(), 1, "one line for every broker: {g:?}");
        assert_eq!(g[0].broker, None);
        assert_eq!(
            g[0].line,
            "before the suite started (nothing was run): gateway command not found: /nonexistent/gw (sh: exit 127)"
        );
    }
}
