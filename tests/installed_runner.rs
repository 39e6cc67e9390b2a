//! The runner as someone judging their own gateway gets it: `cargo install`ed, run from an empty
//! directory, no checkout in sight (issue: "nobody should need our source tree to be judged by
//! it").
//!
//! Installs `fleet-conformance` into a temporary root (`cargo install --path`, debug profile,
//! sharing this checkout's target directory so nothing is compiled twice), then runs it from an
//! empty temporary directory with a fresh cache and home against the reference gateway on a local
//! `rabbitmq-server` process (the smoke set), and checks what a person would: exit 0, the reports
//! in the directory they ran it from, the suite's files unpacked to the cache it names — and
//! nothing read from this checkout (`FLEET_CONFORMANCE_HOME` is unset; the unpacked
//! `features/` is what ran).
//!
//! `cargo test --features e2e --test installed-runner`; `FLEET_INSTALLED_BROKERS` overrides the
//! broker (default `process:rabbitmq`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn checkout() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `cargo` in this checkout with a shell's environment (see the library's `shell_cargo`).
fn cargo() -> Command {
    fleet_conformance::conformance::shell_cargo()
}

/// This checkout's target directory (the test binary runs from `<target>/debug/deps/`).
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    exe.ancestors().nth(3).expect("<target>/debug/deps/<exe>").to_path_buf()
}

fn run_ok(mut c: Command, what: &str) {
    let status = c.status().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what} failed: {status}");
}

fn tree(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[test]
fn the_installed_runner_judges_a_gateway_from_an_empty_directory() {
    let scratch = std::env::temp_dir().join(format!("fleet-installed-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let (root, work, cache, home) = (
        scratch.join("root"),
        scratch.join("work"),
        scratch.join("cache"),
        scratch.join("home"),
    );
    for d in [&work, &home] {
        std::fs::create_dir_all(d).expect("scratch dirs");
    }
    let target = target_dir();

    let mut install = cargo();
    install
        .args([
            "install",
            "--path",
            ".",
            "--debug",
            "--locked",
            "--bin",
            "fleet-conformance",
            "--root",
        ])
        .arg(&root)
        .arg("--target-dir")
        .arg(&target);
    run_ok(install, "cargo install fleet-conformance");
    let mut gateway = cargo();
    gateway
        .args(["build", "-p", "fleet-gateway", "--bin", "fleet-gateway", "--target-dir"])
        .arg(&target);
    run_ok(gateway, "building the reference gateway");
    let gateway = target.join("debug").join("fleet-gateway");
    let runner = root.join("bin").join("fleet-conformance");
    assert!(runner.is_file(), "{} was not installed", runner.display());

    let brokers = std::env::var("FLEET_INSTALLED_BROKERS").unwrap_or_else(|_| "process:rabbitmq".into());
    let started = std::time::Instant::now();
    let out = Command::new(&runner)
        .args(["run", "--tags", "@smoke", "--brokers", &brokers, "--gateway-cmd"])
        .arg(&gateway)
        .current_dir(&work)
        .env_remove("FLEET_CONFORMANCE_HOME")
        .env_remove("FLEET_E2E_BIN")
        .env_remove("FLEET_E2E_OUT")
        .env("FLEET_CONFORMANCE_CACHE", &cache)
        .env("HOME", &home)
        .output()
        .expect("running the installed fleet-conformance");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("installed runner: {:?} in {:.0?}", out.status, started.elapsed());
    assert!(
        out.status.success(),
        "the installed runner did not pass the reference gateway: {}\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    assert!(stdout.contains("VERDICT: PASS"), "no PASS verdict:\n{stdout}");
    assert_eq!(
        tree(&work),
        ["fleet-conformance-report"],
        "the run left more than its report in its directory"
    );
    let report = work.join("fleet-conformance-report");
    for f in ["conformance.html", "conformance.json", "junit.xml"] {
        assert!(report.join(f).is_file(), "no {f} in {}", report.display());
    }
    let unpacked: Vec<PathBuf> = std::fs::read_dir(&cache)
        .expect("the cache the runner was told to use")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.join(".complete").is_file())
        .collect();
    assert_eq!(unpacked.len(), 1, "one unpacked suite in the cache, found {unpacked:?}");
    assert!(unpacked[0].join("features").is_dir() && unpacked[0].join("fixtures/requirements.toml").is_file());
    // The scenarios that ran are the unpacked ones: cucumber names their files.
    let json = std::fs::read_to_string(report.join("conformance.json")).expect("conformance.json");
    assert!(
        !json.contains(&*checkout().join("features").to_string_lossy()),
        "the run read this checkout's features/"
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
