//! The single-sender SEND→INJECTED p50, split into what the broker, herdr and the envelope checks
//! account for, and the rest.
//!
//! Why: the goal is on the p50 over its floor (issue 46: ≤ the raw round trip + a bare herdr
//! sequence + 1 ms, [`crate::floors::latency_floor`]), and a bare "+2.3 ms" does not say where to
//! look. The gateways' own stage means over the 1-sender run (scraped
//! around that run alone, [`crate::paths::stages`]) name three parts of it:
//!
//! - the **raw unloaded round trip** p50: the broker's work for a SEND and its INJECTED;
//! - **herdr**: gateway b's `inject` stage (the gate wait, the input and the submit check are
//!   herdr calls);
//! - **verify**: the envelope checks, a's (the INJECTED) plus b's (the SEND);
//!
//! and the rest = p50 − round trip − inject − verify a − verify b: the HTTP/MCP call, scheduling
//! and every other piece of gateway work. Publishing (a's `publish`: sign, publish, confirm; b's
//! `report`) is shown beside it but not subtracted: the broker's confirm overlaps it by an amount
//! no metric shows. Stage figures are means, the total a p50; the split is a guide, not an
//! identity. A gateway without the metric gives no split (and no failure).

use serde::{Deserialize, Serialize};

use crate::paths::forward_pull::{SENDER_HOST, WORKER_HOST};
use crate::paths::stages::Breakdown;

/// The p50 of the 1-sender forward run, split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decomposition {
    /// SEND→INJECTED p50, one sender, one brief at a time.
    pub p50_ms: f64,
    /// The raw unloaded round trip p50 (the mean of the raw runs).
    pub raw_round_trip_p50_ms: f64,
    /// Gateway b's `inject` mean: herdr calls.
    pub herdr_inject_mean_ms: f64,
    /// `verify` means: a's of the INJECTED, b's of the SEND.
    pub verify_a_mean_ms: f64,
    pub verify_b_mean_ms: f64,
    /// p50 − raw round trip − inject − verify a − verify b: HTTP/MCP, scheduling, other work.
    pub rest_ms: f64,
    /// Shown, not subtracted: a's `publish` (sign, publish, confirm), b's `report` (publishing
    /// the INJECTED), a's `await_injected` (the `bridge_send` waiting for it).
    pub publish_a_mean_ms: Option<f64>,
    pub report_b_mean_ms: Option<f64>,
    pub await_injected_a_mean_ms: Option<f64>,
}

fn mean(b: &Breakdown, host: &str, stage: &str) -> Option<f64> {
    b.get(host)?.get(stage).map(|t| t.mean_ms)
}

/// Splits `p50_ms` with the 1-sender run's `stages`; `None` when a stage it needs (b's `inject`,
/// a's and b's `verify`) was not measured.
pub fn decompose(p50_ms: f64, raw_round_trip_p50_ms: f64, stages: &Breakdown) -> Option<Decomposition> {
    let herdr = mean(stages, WORKER_HOST, "inject")?;
    let verify_a = mean(stages, SENDER_HOST, "verify")?;
    let verify_b = mean(stages, WORKER_HOST, "verify")?;
    Some(Decomposition {
        p50_ms,
        raw_round_trip_p50_ms,
        herdr_inject_mean_ms: herdr,
        verify_a_mean_ms: verify_a,
        verify_b_mean_ms: verify_b,
        rest_ms: p50_ms - raw_round_trip_p50_ms - herdr - verify_a - verify_b,
        publish_a_mean_ms: mean(stages, SENDER_HOST, "publish"),
        report_b_mean_ms: mean(stages, WORKER_HOST, "report"),
        await_injected_a_mean_ms: mean(stages, SENDER_HOST, "await_injected"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::paths::stages::StageTime;

    fn stages(of: &[(&str, &str, f64)]) -> Breakdown {
        let mut b = Breakdown::new();
        for &(host, stage, mean_ms) in of {
            b.entry(host.to_string())
                .or_default()
                .insert(stage.to_string(), StageTime { count: 100, mean_ms });
        }
        b
    }

    #[test]
    fn the_rest_is_the_p50_less_the_round_trip_herdr_and_both_verifies() {
        let b = stages(&[
            ("a", "publish", 0.7),
            ("a", "verify", 0.05),
            ("a", "await_injected", 2.5),
            ("b", "verify", 0.15),
            ("b", "inject", 0.8),
            ("b", "report", 0.6),
        ]);
        let d = decompose(3.5, 1.2, &b).expect("every stage there");
        assert!((d.rest_ms - 1.3).abs() < 1e-9, "{d:?}");
        assert_eq!(d.herdr_inject_mean_ms, 0.8);
        assert_eq!((d.publish_a_mean_ms, d.report_b_mean_ms), (Some(0.7), Some(0.6)));
        assert_eq!(d.await_injected_a_mean_ms, Some(2.5));
    }

    #[test]
    fn without_the_metric_there_is_no_split() {
        assert_eq!(decompose(3.5, 1.2, &Breakdown::new()), None);
        // b exports it, a does not: no verify of the INJECTED, no split.
        let b = stages(&[("b", "verify", 0.1), ("b", "inject", 0.8)]);
        assert_eq!(decompose(3.5, 1.2, &b), None);
        // Only the stages shown beside it missing: still a split.
        let b = stages(&[("a", "verify", 0.1), ("b", "verify", 0.1), ("b", "inject", 0.8)]);
        assert_eq!(decompose(3.5, 1.2, &b).and_then(|d| d.publish_a_mean_ms), None);
        assert!(decompose(3.5, 1.2, &b).is_some());
    }
}
