//! What the judge reads of one broker's run: its label, kind and version, why it produced no
//! report (if so), its scenarios' results, and the scenarios it left out with why.

use serde::{Deserialize, Serialize};

use super::ScenarioResult;

/// A scenario the runner left out on one broker because that broker cannot run it (a restart on
/// the url provider, TLS where no listener was given): written by the suite to
/// `<broker dir>/left-out.json`, so its requirements' cells say why they were not tested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    pub name: String,
    /// `features/x.feature` (absent in files of older suites: the judge then looks it up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub line: usize,
    pub tags: Vec<String>,
    pub reason: String,
}

/// The file of [`LeftOut`] entries in a broker's report directory.
pub const LEFT_OUT_FILE: &str = "left-out.json";

/// What one broker's run produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BrokerRun {
    /// `container:rabbitmq`
    pub label: String,
    /// `rabbitmq`
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Why the broker produced no (or no complete) report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(skip)]
    pub scenarios: Vec<ScenarioResult>,
    /// Scenarios this broker could not run, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
}
