//! One reader of cucumber's JSON report: each scenario of a run, with its tags and how it ended.
//!
//! Why: the e2e runner's per-requirement summary (`crate::report`) and the conformance verdict
//! (`super::verdict`) both read the report; with one typed reader they cannot disagree on what
//! "passed" means (every step passed, a background's steps counted with its scenario;
//! a skipped step without a failure is *incomplete*, never a pass).

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

/// How one scenario ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Passed,
    Failed,
    /// Steps were skipped without a failure (an undefined step): not a pass either.
    Incomplete,
}

/// One scenario of one broker's cucumber JSON report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScenarioResult {
    pub name: String,
    /// `features/x.feature`
    pub file: String,
    pub line: usize,
    #[serde(skip)]
    pub tags: Vec<String>,
    pub outcome: Outcome,
    /// The failing step and its error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The gateways' log excerpt saved for this scenario, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<String>,
}

impl ScenarioResult {
    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }
}

/// Name of the file a failed scenario's gateway logs are saved to, in `<broker dir>/logs/`.
pub fn log_file_name(feature_file: &str, line: usize) -> String {
    let base = Path::new(feature_file)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_else(|| feature_file.to_string());
    format!("{base}-{line}.log")
}

/// A feature file as the suite names it, `features/…`, wherever the run read it from (a checkout,
/// or the cache the binary unpacks its files to): cucumber writes the path it was given.
fn suite_relative(uri: &str) -> String {
    match uri.rfind("features/") {
        Some(at) if at == 0 || uri[..at].ends_with('/') => uri[at..].to_string(),
        _ => uri.to_string(),
    }
}

/// Cucumber's JSON report, as far as the suite reads it (the cucumber-json format: features with
/// their elements — backgrounds and scenarios — and each step's result). Missing fields read as
/// empty: a report cut short by a crash still yields what it holds.
mod wire {
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub struct Feature {
        pub uri: String,
        pub tags: Vec<Tag>,
        pub elements: Vec<Element>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub struct Tag {
        pub name: String,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub struct Element {
        #[serde(rename = "type")]
        pub kind: String,
        pub name: String,
        pub line: usize,
        pub tags: Vec<Tag>,
        pub steps: Vec<Step>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub struct Step {
        pub keyword: String,
        pub name: String,
        pub result: Option<StepResult>,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(default)]
    pub struct StepResult {
        pub status: String,
        pub error_message: Option<String>,
    }
}

fn tag_names(tags: &[wire::Tag]) -> Vec<String> {
    tags.iter()
        .map(|t| t.name.trim_start_matches('@').to_string())
        .collect()
}

const MAX_ERROR: usize = 4000;

fn status(s: &wire::Step) -> &str {
    s.result.as_ref().map_or("skipped", |r| r.status.as_str())
}

/// The background element that belongs to the scenario element at `at`: cucumber's JSON writer
/// gives it the scenario's name and line, and writes it *after* the scenario when the scenario's
/// element was made first (a before-hook) — so a failed background step must be found by name
/// and line, or its error is lost. Else (a report without those), the background element right
/// before it.
fn background_of(elements: &[wire::Element], at: usize) -> Option<&wire::Element> {
    let el = &elements[at];
    let is_background = |b: &&wire::Element| b.kind == "background";
    // A report without names and lines (older writers, hand-made ones) pairs by position only.
    let named = |b: &wire::Element, s: &wire::Element| b.line > 0 && b.name == s.name && b.line == s.line;
    elements
        .iter()
        .filter(is_background)
        .find(|b| named(b, el))
        .or_else(|| {
            let before = elements[..at].last().filter(is_background)?;
            let paired = elements.iter().any(|s| s.kind != "background" && named(before, s));
            (!paired).then_some(before)
        })
}

/// The scenarios of a cucumber JSON report, each with its background's steps before its own.
/// A report that is not a list of features yields no scenarios.
pub fn scenario_results(report: &Value) -> Vec<ScenarioResult> {
    let features: Vec<wire::Feature> = serde_json::from_value(report.clone()).unwrap_or_default();
    let mut out = Vec::new();
    for feature in &features {
        let feature_tags = tag_names(&feature.tags);
        for (at, el) in feature.elements.iter().enumerate() {
            if el.kind == "background" {
                continue;
            }
            let mut all: Vec<&wire::Step> = background_of(&feature.elements, at)
                .map(|b| b.steps.iter().collect())
                .unwrap_or_default();
            all.extend(&el.steps);
            let failed = all.iter().find(|s| status(s) == "failed");
            let outcome = if failed.is_some() {
                Outcome::Failed
            } else if all.is_empty() || all.iter().any(|s| status(s) != "passed") {
                Outcome::Incomplete
            } else {
                Outcome::Passed
            };
            let error = match (failed, outcome) {
                (Some(s), _) => {
                    let msg = s
                        .result
                        .as_ref()
                        .and_then(|r| r.error_message.as_deref())
                        .unwrap_or_default();
                    let mut e = format!("{}{}\n{msg}", s.keyword, s.name);
                    if e.len() > MAX_ERROR {
                        let cut = (0..=MAX_ERROR).rev().find(|i| e.is_char_boundary(*i)).unwrap_or(0);
                        e.truncate(cut);
                        e.push_str("\n…");
                    }
                    Some(e)
                }
                (None, Outcome::Incomplete) => {
                    Some("steps were skipped: an undefined step, or the scenario did not run to its end".into())
                }
                _ => None,
            };
            let mut tags = tag_names(&el.tags);
            tags.extend(feature_tags.iter().cloned());
            tags.sort();
            tags.dedup();
            out.push(ScenarioResult {
                name: el.name.clone(),
                file: suite_relative(&feature.uri),
                line: el.line,
                tags,
                outcome,
                error,
                log: None,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cucumber_json_folds_into_scenario_results() {
        let report = json!([{
            "uri": "features/forward_path.feature",
            "tags": [{"name": "forward-path"}],
            "elements": [
                {"type": "background", "steps": [{"keyword": "Given ", "name": "a broker", "result": {"status": "passed"}}]},
                {"type": "scenario", "name": "ok", "line": 9, "tags": [{"name": "FWD-1"}],
                 "steps": [{"result": {"status": "passed"}}]},
                {"type": "background", "steps": [{"keyword": "Given ", "name": "a broker", "result": {"status": "failed", "error_message": "no docker"}}]},
                {"type": "scenario", "name": "bg failed", "line": 20, "tags": [{"name": "FWD-2"}],
                 "steps": [{"result": {"status": "skipped"}}]},
                {"type": "scenario", "name": "undefined", "line": 30, "tags": [],
                 "steps": [{"result": {"status": "skipped"}}]}
            ]
        }]);
        let r = scenario_results(&report);
        assert_eq!(r.len(), 3);
        assert_eq!((r[0].outcome, r[0].line), (Outcome::Passed, 9));
        assert_eq!(r[0].tags, ["FWD-1", "forward-path"]);
        assert_eq!(r[1].outcome, Outcome::Failed);
        assert_eq!(r[1].error.as_deref(), Some("Given a broker\nno docker"));
        assert_eq!(r[2].outcome, Outcome::Incomplete);
        assert_eq!(log_file_name(&r[1].file, r[1].line), "forward_path.feature-20.log");
    }

    /// As cucumber writes it when a before-hook made the scenario's element first: the
    /// background's element, named as its scenario, after it.
    #[test]
    fn a_failed_background_written_after_its_scenario_is_that_scenario_s_failure() {
        let report = json!([{
            "uri": "features/publish.feature",
            "elements": [
                {"type": "scenario", "name": "first", "line": 9, "tags": [{"name": "PUB-2"}], "steps": []},
                {"type": "background", "name": "first", "line": 9,
                 "steps": [{"keyword": "Given ", "name": "a gateway", "result": {"status": "failed", "error_message": "gateway a unusable"}}]},
                {"type": "scenario", "name": "second", "line": 20, "tags": [],
                 "steps": [{"keyword": "Then ", "name": "x", "result": {"status": "passed"}}]},
                {"type": "background", "name": "second", "line": 20,
                 "steps": [{"keyword": "Given ", "name": "a gateway", "result": {"status": "passed"}}]}
            ]
        }]);
        let r = scenario_results(&report);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].outcome, Outcome::Failed);
        assert_eq!(r[0].error.as_deref(), Some("Given a gateway\ngateway a unusable"));
        assert_eq!(r[1].outcome, Outcome::Passed, "not the first one's background");
    }

    #[test]
    fn a_report_that_is_not_a_list_of_features_has_no_scenarios() {
        assert!(scenario_results(&json!({"not": "a report"})).is_empty());
        assert!(scenario_results(&Value::Null).is_empty());
    }
}
