//! `fleet-bench`: measures a gateway's message paths against the raw broker in one run (issue 9).
//!
//! Speed is not asserted in the conformance suite (it would make the suite flaky on a busy
//! machine); it is measured here, as ratios to a raw lapin baseline taken on the same broker in
//! the same run. Prints a table and writes JSON (`<target>/fleet-bench/bench.json`).
//! `scripts/bench` builds the release gateway and this binary and runs it; see
//! [`fleet_bench`] for what each figure means.

use std::path::PathBuf;

use fleet_bench as bench;

/// `<target>/release/fleet-gateway` and `<target>/fleet-bench/bench.json`, from where this binary
/// lives (`<target>/<profile>/fleet-bench`).
fn defaults() -> (String, PathBuf) {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("target/release/fleet-bench"));
    let profile_dir = exe.parent().map(PathBuf::from).unwrap_or_else(|| PathBuf::from("."));
    let target = profile_dir
        .parent()
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"));
    (
        profile_dir.join("fleet-gateway").display().to_string(),
        target.join("fleet-bench").join("bench.json"),
    )
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    fleet_conformance::logs::init();
    let (gateway, out) = defaults();
    // clap prints --help / --version and exits 0, or names a bad argument and exits 2.
    let opts = match <bench::cli::BenchCli as clap::Parser>::parse().options(gateway, out) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fleet-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if !opts.gate_reports.is_empty() {
        return match bench::gate_reports(&opts) {
            Ok(lines) => {
                println!("{}", lines.join("\n"));
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("fleet-bench: {e:#}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    // Ctrl-C or SIGTERM drops the run: its gateways (kill-on-drop), fake herdrs and the broker
    // (a process provider's node is killed on drop) go with it.
    let interrupted = async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        }
    };
    if let Some((a, rounds)) = opts.compare.clone() {
        let out = opts.out.with_file_name("compare.json");
        let opts = bench::Options {
            out: out.clone(),
            ..opts
        };
        return tokio::select! {
            r = bench::compare::compare(&opts, &a, rounds) => match r {
                Ok(c) => {
                    println!("{}", bench::compare::table(&c));
                    println!("JSON: {} (each run's report beside it)", out.display());
                    std::process::ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("fleet-bench: the comparison failed: {e:#}");
                    std::process::ExitCode::FAILURE
                }
            },
            () = interrupted => {
                eprintln!("fleet-bench: interrupted; gateways and broker stopped");
                std::process::ExitCode::from(130)
            }
        };
    }
    let result = tokio::select! {
        r = bench::run(&opts) => r,
        () = interrupted => {
            eprintln!("fleet-bench: interrupted; gateways and broker stopped");
            return std::process::ExitCode::from(130);
        }
    };
    match result {
        Ok(report) => {
            println!("{}", bench::table(&report));
            println!("JSON: {}", opts.out.display());
            if report.migration_lost() {
                // A move that loses replies is a failure whatever its speed.
                eprintln!("fleet-bench: the migration lost or damaged replies (see the table and the JSON)");
                return std::process::ExitCode::FAILURE;
            }
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("fleet-bench failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
