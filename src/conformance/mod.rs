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
//! - [`chart`] — a scenario's message sequence chart (inline SVG) for that page
//! - [`cli`] — the `fleet-conformance` command line (`run`, `list`)
//! - [`embedded`] — the suite's files carried inside the binary, unpacked to a cache

pub mod attribution;
pub mod catalogue;
pub mod chart;
pub mod cli;
pub mod embedded;
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
use std::sync::OnceLock;

/// Names the directory holding `features/`, `fixtures/` and `docs/` instead of the files the
/// binary carries (a checkout being edited: `cargo test --features e2e` sets it to the checkout).
pub const HOME_VAR: &str = "FLEET_CONFORMANCE_HOME";

/// The directory holding `features/`, `fixtures/` and `docs/`: `FLEET_CONFORMANCE_HOME`, else the
/// files this binary carries, unpacked to the cache ([`embedded`]); the library's own unit tests
/// read the checkout they were built from.
pub fn suite_root() -> PathBuf {
    if let Some(dir) = std::env::var_os(HOME_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if cfg!(test) {
        return checkout();
    }
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| match embedded::unpack() {
        Ok(dir) => dir,
        Err(e) => {
            let fallback = checkout();
            eprintln!(
                "fleet-conformance: {e}; reading the suite from {} instead",
                fallback.display()
            );
            fallback
        }
    })
    .clone()
}

/// The checkout this crate was built from (it may be gone: an installed binary's build tree).
pub fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo`, run in the checkout this crate was built from, with a shell's environment: `cargo
/// test` gives its processes CARGO_MANIFEST_DIR, CARGO_PKG_* … and (for a package with a build
/// script) OUT_DIR; build scripts (ring's) fingerprint those, so passing them on made every nested
/// build and the next shell `cargo build` rebuild ring → rustls → lapin in turn.
pub fn shell_cargo() -> std::process::Command {
    let mut c = std::process::Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_MANIFEST_")
            || k.starts_with("CARGO_PKG_")
            || matches!(
                &*k,
                "CARGO_CRATE_NAME" | "CARGO_PRIMARY_PACKAGE" | "CARGO_TARGET_TMPDIR" | "OUT_DIR"
            )
        {
            c.env_remove(&*k);
        }
    }
    c.current_dir(checkout());
    c
}
