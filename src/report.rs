//! The per-requirement summary: which SPEC requirement ids the run exercised, and how they fared.
//!
//! Scenarios are tagged with requirement ids (`@FWD-1`); cucumber's JSON report carries the tags
//! and each step's result. Folding one into the other tells a gateway's authors which requirements
//! they meet — the point of a conformance suite.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::conformance::results::{Outcome, scenario_results};

/// Tally of one requirement id on one broker.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
}

/// True for tags that name a requirement (`FWD-1`, `SIG-12`).
pub fn is_requirement(tag: &str) -> bool {
    let Some((prefix, num)) = tag.split_once('-') else {
        return false;
    };
    (2..=3).contains(&prefix.len())
        && prefix.bytes().all(|c| c.is_ascii_uppercase())
        && !num.is_empty()
        && num.bytes().all(|c| c.is_ascii_digit())
}

/// Folds a cucumber JSON report into requirement id → tally (read by
/// [`crate::conformance::results`], the reader the verdict uses too).
pub fn tally(report: &Value) -> BTreeMap<String, Tally> {
    let mut out: BTreeMap<String, Tally> = BTreeMap::new();
    for sc in scenario_results(report) {
        for id in sc.tags.iter().filter(|t| is_requirement(t)) {
            let t = out.entry(id.clone()).or_default();
            match sc.outcome {
                Outcome::Passed => t.passed += 1,
                Outcome::Failed => t.failed += 1,
                Outcome::Incomplete => t.skipped += 1,
            }
        }
    }
    out
}

/// A plain-text table of the tallies.
pub fn render(label: &str, t: &BTreeMap<String, Tally>) -> String {
    let mut s = format!("Requirements exercised on {label}:\n");
    for (id, x) in t {
        let verdict = if x.failed > 0 {
            "FAIL"
        } else if x.passed > 0 && x.skipped == 0 {
            "pass"
        } else {
            "skip"
        };
        s.push_str(&format!(
            "  {id:<8} {verdict}  ({} passed, {} failed, {} skipped)\n",
            x.passed, x.failed, x.skipped
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn folds_scenarios_into_requirement_tallies() {
        let report = json!([{
            "tags": [{"name": "@forward-path"}],
            "elements": [
                {"type": "scenario", "tags": [{"name": "@FWD-1"}, {"name": "@FWD-2"}],
                 "steps": [{"result": {"status": "passed"}}]},
                {"type": "scenario", "tags": [{"name": "@FWD-1"}],
                 "steps": [{"result": {"status": "passed"}}, {"result": {"status": "failed"}}]},
                {"type": "background", "steps": [{"result": {"status": "failed"}}]},
                {"type": "scenario", "tags": [{"name": "@FWD-3"}],
                 "steps": [{"result": {"status": "skipped"}}]}
            ]
        }]);
        let t = tally(&report);
        assert_eq!(
            t["FWD-1"],
            Tally {
                passed: 1,
                failed: 1,
                skipped: 0
            }
        );
        assert_eq!(
            t["FWD-2"],
            Tally {
                passed: 1,
                failed: 0,
                skipped: 0
            }
        );
        assert_eq!(
            t["FWD-3"],
            Tally {
                passed: 0,
                failed: 1,
                skipped: 0
            },
            "a failed background fails its scenario"
        );
        assert!(!t.contains_key("forward-path"));
        assert!(render("x", &t).contains("FWD-1    FAIL"));
    }

    #[test]
    fn requirement_tags_are_recognised() {
        assert!(is_requirement("FWD-1"));
        assert!(is_requirement("SIG-12"));
        assert!(!is_requirement("smoke"));
        assert!(!is_requirement("forward-path"));
        assert!(!is_requirement("FWD-"));
    }
}
