//! The checks still under review (CONTRACT §10), in a form the runner reads.
//!
//! Exists because CONTRACT §10 tells another team "a failure of these is the suite's, report it",
//! and a verdict that counted such a failure against their gateway would contradict it. Each
//! `[[under-review]]` entry of `fixtures/requirements.toml` names the check by a scenario tag
//! (every scenario carrying it) or by the text of a step (a scenario whose failed step holds it),
//! or both. A failure it covers is reported UNDER REVIEW and never counted; a pass counts as any
//! pass. The mechanism is generic: bringing a check under the contract is deleting its entry (a
//! unit test keeps every entry named in CONTRACT §10's text, so the two cannot drift apart).

use serde::{Deserialize, Serialize};

use super::results::ScenarioResult;

/// One check under review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnderReview {
    /// A scenario tag, without `@`: every scenario carrying it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Text a failed step holds (`logged no PRECONDITION_FAILED`): a scenario that failed there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Text the failure's message holds, for a step that judges more than the check under review
    /// (`met a 406`): a failure of its other parts still counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it is under review, in one line (CONTRACT §10 says more).
    pub reason: String,
}

impl UnderReview {
    /// Whether this entry covers the (failed) scenario `s`: it carries the tag, it failed at a
    /// step holding the text, with a message holding the error text (each condition only where
    /// the entry gives it).
    pub fn covers(&self, s: &ScenarioResult) -> bool {
        let tag = self.tag.as_deref().is_none_or(|t| s.has_tag(t));
        let step = self
            .step
            .as_deref()
            .is_none_or(|text| failed_step(s).is_some_and(|line| line.contains(text)));
        let message = failed_step(s)
            .and_then(|_| s.error.as_deref()?.split_once('\n'))
            .map(|(_, m)| m);
        let error = self
            .error
            .as_deref()
            .is_none_or(|text| message.is_some_and(|m| m.contains(text)));
        (self.tag.is_some() || self.step.is_some()) && tag && step && error
    }

    /// How CONTRACT §10 names it: `@tag`, the step's text, or both (and the error it reads).
    pub fn key(&self) -> String {
        let key = match (&self.tag, &self.step) {
            (Some(t), Some(step)) => format!("@{t}: \"{step}\""),
            (Some(t), None) => format!("@{t}"),
            (None, Some(step)) => format!("\"{step}\""),
            (None, None) => "(nothing)".into(),
        };
        match &self.error {
            Some(e) => format!("{key} failing with \"{e}\""),
            None => key,
        }
    }
}

/// The step a scenario failed at (the first line of its error, as `results` writes it).
pub fn failed_step(s: &ScenarioResult) -> Option<&str> {
    match s.outcome {
        super::results::Outcome::Failed => s.error.as_deref().and_then(|e| e.lines().next()),
        _ => None,
    }
}

/// A failure a check under review covers: reported, never counted against the gateway.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReviewedFailure {
    pub broker: String,
    pub name: String,
    /// `features/x.feature:12`
    pub location: String,
    pub requirements: Vec<String>,
    /// The failed step and its error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Which entry covers it and why it is under review.
    pub under_review: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conformance::results::Outcome;
    use crate::conformance::{catalogue, registry, suite_root};

    fn failed(tags: &[&str], step: &str) -> ScenarioResult {
        ScenarioResult {
            name: "s".into(),
            file: "features/x.feature".into(),
            line: 3,
            tags: tags.iter().map(|t| t.to_string()).collect(),
            outcome: Outcome::Failed,
            error: Some(format!("{step}\nboom")),
            log: None,
        }
    }

    #[test]
    fn an_entry_covers_by_tag_by_failed_step_or_by_both() {
        let by_tag = UnderReview {
            tag: Some("herdr-agent-gone".into()),
            step: None,
            error: None,
            reason: "r".into(),
        };
        assert!(by_tag.covers(&failed(&["FWD-2", "herdr-agent-gone"], "Then x")));
        assert!(!by_tag.covers(&failed(&["FWD-2"], "Then x")));
        let by_step = UnderReview {
            tag: None,
            step: Some("logged no PRECONDITION_FAILED".into()),
            error: None,
            reason: "r".into(),
        };
        let precondition = "And the gateway on \"a\" started once, is ready, and logged no PRECONDITION_FAILED";
        assert!(by_step.covers(&failed(&["MIG-2"], precondition)));
        assert!(
            !by_step.covers(&failed(&["MIG-2"], "Then the legacy queue is gone")),
            "another step of the same scenario failing is the gateway's failure"
        );
        let mut passed = failed(&["MIG-2"], precondition);
        passed.outcome = Outcome::Passed;
        assert!(!by_step.covers(&passed), "a step that passed covers nothing");
        let precise = UnderReview {
            error: Some("met a 406".into()),
            ..by_step.clone()
        };
        let mut met = failed(&["MIG-2"], precondition);
        met.error = Some(format!(
            "{precondition}\nthe gateway on a met a 406:\nERROR … PRECONDITION_FAILED"
        ));
        assert!(precise.covers(&met));
        assert!(
            !precise.covers(&failed(&["MIG-2"], precondition)),
            "the same step failing on its other part (started twice) counts"
        );
        let both = UnderReview {
            tag: Some("t".into()),
            ..by_step.clone()
        };
        assert!(!both.covers(&failed(&["MIG-2"], precondition)));
        assert!(both.covers(&failed(&["t"], precondition)));
        let nothing = UnderReview {
            tag: None,
            step: None,
            error: Some("x".into()),
            reason: "r".into(),
        };
        assert!(!nothing.covers(&failed(&["t"], "x")));
    }

    /// CONTRACT §10 and the registry's `[[under-review]]` entries cannot drift apart: every entry
    /// is named in §10's text and names something in `features/`. Bringing a check under the
    /// contract (deleting its §10 bullet) makes this fail until its entry goes too.
    #[test]
    fn every_entry_is_named_in_contract_section_10_and_in_the_features() {
        let reg = registry::Registry::load(&registry::default_path()).expect("the registry loads");
        let contract = std::fs::read_to_string(suite_root().join("docs").join("CONTRACT.md")).expect("CONTRACT.md");
        let start = contract.find("\n## 10.").expect("CONTRACT.md has a §10");
        let rest = &contract[start + 1..];
        let section = &rest[..rest.find("\n## ").unwrap_or(rest.len())];
        let scenarios = catalogue::load_dir(&suite_root().join("features")).expect("features/ parse");
        let mut features = String::new();
        for entry in std::fs::read_dir(suite_root().join("features")).expect("features/") {
            let path = entry.expect("entry").path();
            features.push_str(&std::fs::read_to_string(&path).unwrap_or_default());
        }
        for e in &reg.under_review {
            if let Some(t) = &e.tag {
                assert!(
                    section.contains(&format!("@{t}")),
                    "[[under-review]] tag {t} is not named in CONTRACT §10: delete the entry or name it there"
                );
                assert!(
                    scenarios.iter().any(|s| s.has_tag(t)),
                    "[[under-review]] tag {t}: no scenario carries it"
                );
            }
            if let Some(step) = &e.step {
                assert!(
                    section.contains(step.as_str()),
                    "[[under-review]] step {step:?} is not named in CONTRACT §10: delete the entry or name it there"
                );
                assert!(
                    features.contains(step.as_str()),
                    "[[under-review]] step {step:?}: no step holds it"
                );
            }
        }
    }
}
