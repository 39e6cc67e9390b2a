//! `cargo test --features e2e --test e2e [-- cucumber options]`: the conformance suite on this
//! checkout.
//!
//! The suite lives in the `fleet-conformance` binary (`steps/`, so an installed binary carries
//! it); this target only execs that binary as the suite run (`__suite`), reading `features/` and
//! `fixtures/` from this checkout rather than the copy the binary carries — so the step
//! definitions are compiled once, for the binary, and an edited feature file needs no rebuild.

use std::os::unix::process::CommandExt as _;
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let bin = env!("CARGO_BIN_EXE_fleet-conformance");
    let err = Command::new(bin)
        .arg(fleet_conformance::conformance::cli::SUITE_ARG)
        .args(std::env::args_os().skip(1))
        .env(fleet_conformance::conformance::HOME_VAR, env!("CARGO_MANIFEST_DIR"))
        .exec();
    eprintln!("cannot run the suite binary {bin}: {err}");
    ExitCode::FAILURE
}
