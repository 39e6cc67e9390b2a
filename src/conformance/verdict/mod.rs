//! The verdict: what a run says about each requirement on each broker, and whether the gateway
//! passes.
//!
//! Each requirement × broker cell is `pass` (its scenarios ran and passed), `fail` (one failed),
//! `skip` (its only scenarios need a capability the gateway did not declare) or `not-tested` (no
//! scenario ran — which is *not* a pass). The run FAILs on a MUST that fails or was not tested, on
//! a declared capability that fails, and on a stale baseline entry (a listed known failure that
//! now passes); a SHOULD counts only under `--strict`. A requirement the brokers of the run cannot
//! judge at all (its scenarios left out by every broker: a cluster scenario on one node, TLS
//! without a listener) fails nothing: the run is INCOMPLETE when nothing failed, naming what
//! would judge it (`outcome.rs`). A failure a check under review covers (CONTRACT §10) is
//! reported, never counted. A `--tags` run that leaves requirements out is *partial*: those rows
//! say so and do not count, and the summary says no conformance claim can be made from it.
//!
//! Here: what a verdict is — a [`Verdict`] per [`Cell`], a [`Row`] per requirement, the whole
//! [`Judgement`]. Beside it: what the judge reads of each broker's run (`broker_run.rs`), the
//! judging itself ([`judge`], `judge.rs`), the run's verdict (`outcome.rs`) and the scenarios
//! that failed on the gateway process itself, grouped for the summary (`gateway.rs`).

mod broker_run;
mod gateway;
mod judge;
mod outcome;

use serde::Serialize;

use super::registry::Level;

pub use super::inputs::{Baseline, Capabilities, InputError, KnownFailure};
pub use super::results::{Outcome, ScenarioResult, log_file_name, scenario_results};
pub use broker_run::{BrokerRun, LEFT_OUT_FILE, LeftOut};
pub use gateway::{GatewayFailures, not_run_error, preflight_failed};
pub use judge::{Options, judge};
pub use outcome::{NEEDS_REVIEW, RunVerdict, Unjudged, broker_needed, incomplete_lines};

pub use super::review::ReviewedFailure;

/// A requirement's state on one broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    #[serde(rename = "pass")]
    Pass,
    #[serde(rename = "fail")]
    Fail,
    #[serde(rename = "skip")]
    Skip,
    #[serde(rename = "not-tested")]
    NotTested,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Skip => "skip",
            Verdict::NotTested => "not-tested",
        }
    }
}

/// One requirement × broker cell.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cell {
    pub broker: String,
    pub verdict: Verdict,
    pub passed: usize,
    pub failed: usize,
    /// Why a cell is skip or not-tested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A not-tested cell the brokers of the run could not judge: what would (never counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub needs: Option<String>,
    /// A baseline entry covers this failure (its reason, or "listed").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub known_failure: Option<String>,
    /// This cell fails the run.
    pub counts: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<ScenarioResult>,
}

/// A scenario the run left out (NOT TESTED), with why: on one broker, which cannot run it (a
/// restart on the `url:` provider, TLS where no listener was given), or on every broker (a
/// capability the gateway did not declare). Listed in every report form: a requirement whose
/// other scenarios passed shows `pass` and would otherwise hide that part of it went unchecked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOutScenario {
    /// The broker's label; `None`: left out on every broker.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    pub name: String,
    /// `features/x.feature`, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub line: usize,
    /// The requirements it checks.
    pub requirements: Vec<String>,
    pub reason: String,
}

impl LeftOutScenario {
    /// Where it was left out: `on url:lavinmq` or `on every broker`.
    pub fn scope(&self) -> String {
        match &self.broker {
            Some(b) => format!("on {b}"),
            None => "on every broker".into(),
        }
    }

    /// `features/x.feature:12`, or `line 12` when the file is not known.
    pub fn location(&self) -> String {
        match &self.file {
            Some(f) => format!("{f}:{}", self.line),
            None => format!("line {}", self.line),
        }
    }
}

/// A failure the baseline lists, with the baseline's reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownFailureSeen {
    pub requirement: String,
    pub broker: String,
    pub reason: String,
}

/// One requirement across the brokers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Row {
    pub id: String,
    pub level: Level,
    pub section: String,
    pub text: String,
    /// At least one of its scenarios is selected by the run's tag expression (always, without one).
    pub selected: bool,
    pub cells: Vec<Cell>,
}

/// The whole judgement of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Judgement {
    pub brokers: Vec<BrokerRun>,
    pub requirements: Vec<Row>,
    /// Baseline entries that no longer fail: they fail the run until removed.
    pub stale_baseline: Vec<String>,
    /// Baseline entries this run could not confirm (not run, skipped, not tested).
    pub unconfirmed_baseline: Vec<String>,
    /// Everything that fails the run, one line each.
    pub problems: Vec<String>,
    /// Some requirements were left out by `--tags`: no conformance claim can be made.
    pub partial: bool,
    /// Scenarios left out of the run (NOT TESTED), with why.
    pub left_out: Vec<LeftOutScenario>,
    /// Requirements the run had to judge and these brokers could not: INCOMPLETE.
    pub unjudged: Vec<Unjudged>,
    /// Failures a check under review covers (CONTRACT §10): reported, not counted.
    pub under_review: Vec<ReviewedFailure>,
    /// PASS, FAIL or INCOMPLETE.
    pub verdict: RunVerdict,
    /// The verdict is PASS.
    pub passed: bool,
}

impl Judgement {
    /// How many cells have each verdict.
    pub fn count(&self, v: Verdict) -> usize {
        self.requirements
            .iter()
            .flat_map(|r| &r.cells)
            .filter(|c| c.verdict == v)
            .count()
    }

    /// Every failing cell the baseline covers, with the baseline's reason, in row order.
    pub fn known_failures(&self) -> Vec<KnownFailureSeen> {
        self.requirements
            .iter()
            .flat_map(|r| {
                r.cells.iter().filter_map(|c| {
                    Some(KnownFailureSeen {
                        requirement: r.id.clone(),
                        broker: c.broker.clone(),
                        reason: c.known_failure.clone()?,
                    })
                })
            })
            .collect()
    }

    /// The scenarios that failed on the gateway process itself (not found, not executable,
    /// exited, never ready, garbage, died), one line per broker and kind; the pre-flight's line
    /// when the run stopped before the suite.
    pub fn gateway_failures(&self) -> Vec<GatewayFailures> {
        gateway::gateway_failures(&self.brokers)
    }

    /// True when the run fails: a requirement failed (not merely unjudged).
    pub fn failed(&self) -> bool {
        self.verdict == RunVerdict::Fail
    }
}
