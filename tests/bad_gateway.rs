//! `cargo test --features e2e --test bad_gateway`: the runner against gateways that cannot be used
//! (issue 45) — a command not found, one not executable, one that exits at once, one that never
//! opens its port, one that answers garbage (not HTTP; HTML where JSON is due) and one that dies
//! after it said ready. Each run is the real `fleet-conformance run` on a local rabbitmq-server
//! (`process:rabbitmq`) with one smoke scenario, and must end within its bound (never a hang),
//! with its own exit status, and say which in one line: in the scenario's error, in the terminal
//! summary, in `conformance.json` and in `conformance.html`.

#![cfg(feature = "e2e")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

/// One scenario: one host, one gateway start, then a send.
const TAGS: &str = "@smoke and @PUB-2";

/// A bad gateway and what the run must say about it.
struct Case {
    name: &'static str,
    /// The `--gateway-cmd`; `{dir}` is this case's directory, `{bogus}` the bogus gateway script.
    command: &'static str,
    /// Extra runner arguments.
    args: &'static [&'static str],
    exit: i32,
    /// The kind in the scenario's line (`gateway a unusable [kind]: …`); `None`: no scenario ran.
    kind: Option<&'static str>,
    /// The summary's line, `PORT` for the listen port.
    line: &'static str,
    /// The run ends within this.
    bound: Duration,
}

const CASES: &[Case] = &[
    Case {
        name: "not-found",
        command: "/nonexistent/fleet-gateway --flag",
        args: &[],
        exit: 2,
        kind: None,
        line: "before the suite started (nothing was run): gateway command not found: /nonexistent/fleet-gateway (sh: \
               exit 127)",
        bound: Duration::from_secs(30),
    },
    Case {
        name: "not-executable",
        command: "{dir}/gateway.sh",
        args: &[],
        exit: 2,
        kind: None,
        line: "before the suite started (nothing was run): gateway command not executable: {dir}/gateway.sh (sh: exit \
               126: Permission denied)",
        bound: Duration::from_secs(30),
    },
    Case {
        name: "exits-at-once",
        command: "sh -c 'echo \"bogus: no config, giving up\" >&2'",
        args: &[],
        exit: 1,
        kind: Some("exited"),
        line: "the only scenario on process:rabbitmq: gateway exited at once with status 0 before /readyz answered \
               (last output line: bogus: no config, giving up)",
        bound: Duration::from_secs(150),
    },
    Case {
        name: "never-ready",
        command: "sleep 600",
        // The readiness bound (30 s nominal) at half: 15 s.
        args: &["--time-scale", "0.5"],
        exit: 1,
        kind: Some("never-ready"),
        line: "the only scenario on process:rabbitmq: gateway never answered /readyz on 127.0.0.1:PORT within 15 s (30 \
               s × time scale 0.5): nothing listened there (still running)",
        bound: Duration::from_secs(150),
    },
    Case {
        name: "not-http",
        command: "python3 {bogus} garbage",
        args: &[],
        exit: 1,
        kind: Some("garbage"),
        line: "the only scenario on process:rabbitmq: gateway answered /readyz with garbage: \\x00\\x01GARBAGE, not \
               HTTP\\r\\n\\xff",
        bound: Duration::from_secs(150),
    },
    Case {
        name: "html-for-json",
        command: "python3 {bogus} nonsense",
        args: &[],
        exit: 1,
        kind: Some("garbage"),
        line: "the only scenario on process:rabbitmq: gateway answered POST /v1/entities with garbage (200 OK, not JSON): \
               <html>not a fleet gateway</html>",
        bound: Duration::from_secs(150),
    },
    Case {
        name: "dies-after-ready",
        command: "python3 {bogus} dies",
        args: &[],
        exit: 1,
        kind: Some("died"),
        line: "the only scenario on process:rabbitmq: gateway exited with status 3 after /readyz answered; POST \
               /v1/entities found nobody (last output line: bogus: ready answered, exiting)",
        bound: Duration::from_secs(150),
    },
];

fn checkout() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fill(template: &str, dir: &Path) -> String {
    let bogus = checkout().join("tests/bad_gateway/bogus.py");
    template
        .replace("{dir}", &dir.display().to_string())
        .replace("{bogus}", &bogus.display().to_string())
}

/// Runs the runner for `case` in `dir`; its output and how long it took.
fn run(case: &Case, dir: &Path) -> (Output, Duration) {
    std::fs::create_dir_all(dir).expect("a directory for the case");
    // Not executable: no x bit.
    std::fs::write(dir.join("gateway.sh"), "#!/bin/sh\nexit 0\n").expect("a script");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_fleet-conformance"))
        .args(["run", "--brokers", "process:rabbitmq", "--tags", TAGS, "--out"])
        .arg(dir.join("out"))
        .arg("--gateway-cmd")
        .arg(fill(case.command, dir))
        .args(case.args)
        .env("FLEET_CONFORMANCE_HOME", checkout())
        .env_remove("FLEET_GATEWAY_CMD")
        .env_remove("FLEET_E2E_BIN")
        .env_remove("FLEET_E2E_BROKERS")
        .env_remove("FLEET_E2E_CAPABILITIES")
        .output()
        .expect("the runner starts");
    (output, started.elapsed())
}

/// `line` with the listen port of `text` masked as `PORT`, when `text` holds one.
fn unmask(line: &str, text: &str) -> String {
    let Some(at) = line.find("127.0.0.1:PORT") else {
        return line.to_string();
    };
    let prefix = &line[..at];
    let port = text
        .find(prefix)
        .map(|i| &text[i + prefix.len() + "127.0.0.1:".len()..])
        .map(|rest| rest.chars().take_while(char::is_ascii_digit).collect::<String>())
        .unwrap_or_default();
    line.replacen("127.0.0.1:PORT", &format!("127.0.0.1:{port}"), 1)
}

/// Every failing scenario's error in `conformance.json`.
fn scenario_errors(report: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for r in report["requirements"].as_array().into_iter().flatten() {
        for c in r["cells"].as_array().into_iter().flatten() {
            for f in c["failing"].as_array().into_iter().flatten() {
                out.push(f["error"].as_str().unwrap_or_default().to_string());
            }
        }
    }
    out
}

fn check(case: &Case, dir: &Path) -> Result<Duration, String> {
    let (output, took) = run(case, dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let said = || format!("--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}");
    let line = fill(case.line, dir);
    if took > case.bound {
        return Err(format!("took {took:?}, more than {:?}\n{}", case.bound, said()));
    }
    if output.status.code() != Some(case.exit) {
        return Err(format!(
            "exit {:?}, not {}\n{}",
            output.status.code(),
            case.exit,
            said()
        ));
    }
    if !stdout.contains("GATEWAY NOT USABLE") || !stdout.contains(&format!("  - {line}\n")) {
        return Err(format!("the terminal summary does not say {line:?}\n{}", said()));
    }
    let out = dir.join("out");
    let json = std::fs::read(out.join("conformance.json")).map_err(|e| format!("conformance.json: {e}"))?;
    let report: Value = serde_json::from_slice(&json).map_err(|e| format!("conformance.json: {e}"))?;
    let lines: Vec<&str> = report["verdict"]["gateway"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g["line"].as_str())
        .collect();
    if lines != [line.as_str()] {
        return Err(format!(
            "conformance.json's verdict.gateway is {lines:?}, not [{line:?}]"
        ));
    }
    let html = std::fs::read_to_string(out.join("conformance.html")).map_err(|e| format!("conformance.html: {e}"))?;
    let shown = line
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;");
    if !html.contains(&format!("Gateway not usable: {shown}")) {
        return Err(format!("conformance.html does not say {shown:?}"));
    }
    if let Some(kind) = case.kind {
        // Each scenario's own error holds the line, its real port in it.
        let errors = scenario_errors(&report);
        let reason = line.split_once(": ").map(|(_, r)| r).unwrap_or_default();
        let wanted = format!("gateway a unusable [{kind}]: {}", unmask(reason, &errors.join("\n")));
        if errors.is_empty() || !errors.iter().all(|e| e.contains(&wanted)) {
            return Err(format!("the scenarios' errors do not say {wanted:?}: {errors:#?}"));
        }
    }
    if stdout.contains("panicked at") || stderr.contains("panicked at") {
        return Err(format!("a Rust panic\n{}", said()));
    }
    Ok(took)
}

#[test]
fn each_bad_gateway_is_named_in_one_line_within_its_bound() {
    let root: PathBuf = std::env::temp_dir().join(format!("fleet-bad-gateway-{}", std::process::id()));
    let mut failures = Vec::new();
    for case in CASES {
        let dir = root.join(case.name);
        match check(case, &dir) {
            Ok(took) => eprintln!("{}: as expected in {took:.1?}", case.name),
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    if failures.is_empty() {
        let _ = std::fs::remove_dir_all(&root);
    }
    assert!(
        failures.is_empty(),
        "{} of {} case(s) failed (files kept in {}):\n\n{}",
        failures.len(),
        CASES.len(),
        root.display(),
        failures.join("\n\n")
    );
}
