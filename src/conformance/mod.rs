//! The conformance runner's library: judging *another team's* gateway against the spec.
//!
//! `fleet-conformance run` (src/bin/fleet-conformance.rs) runs the cucumber suite against a gateway
//! command on one or more brokers; this module turns what came back into a verdict per requirement
//! and broker, and writes the reports. It reads, never runs:
//!
//! - [`registry`] — `fixtures/requirements.toml`: every requirement id, its level, its section
//! - [`catalogue`] — the scenarios of `features/` and their tags, without running them
//! - [`results`] — the one reader of cucumber's JSON report: each scenario and how it ended
//! - [`review`] — the checks CONTRACT §10 lists as under review: reported, never counted
//! - [`tagexpr`] — cucumber tag expressions, to know what a `--tags` run selected
//! - [`inputs`] — the capabilities a gateway declares and the known-failures baseline (TOML)
//! - [`selection`] — what a run leaves out whatever `--tags` says (`@soak`, undeclared `@cap-…`)
//! - [`verdict`] — pass / fail / skip / not-tested per requirement × broker, capabilities,
//!   the known-failures baseline, and the exit decision
//! - [`reports`] — `conformance.json`, the requirement JUnit XML, the text summary
//! - [`html`] — the one static HTML page of the matrix

pub mod catalogue;
pub mod html;
pub mod inputs;
pub mod registry;
pub mod reports;
pub mod results;
pub mod review;
pub mod selection;
pub mod tagexpr;
pub mod verdict;

use std::path::PathBuf;

/// The checkout holding `features/`, `fixtures/` and `docs/`: `FLEET_CONFORMANCE_HOME`, else the
/// directory this crate was built from.
pub fn suite_root() -> PathBuf {
    match std::env::var_os("FLEET_CONFORMANCE_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")),
    }
}
