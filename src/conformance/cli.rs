//! The `fleet-conformance` command line: judge any Fleet gateway against the spec, requirement by
//! requirement.
//!
//! Exists so another team can point the suite at *their* gateway and get a verdict they can act
//! on (like h2spec or Autobahn|Testsuite for their protocols): it runs the cucumber suite (the
//! `e2e` test target) with their gateway command on the brokers asked for, then judges every
//! requirement of `fixtures/requirements.toml` on every broker and writes the reports.
//!
//! ```text
//! fleet-conformance run [--gateway-cmd CMD] [--brokers LIST] [--tags EXPR] [--time-scale F]
//!                       [--capabilities FILE] [--baseline FILE] [--out DIR] [--strict]
//!                       [--gateway-version TEXT] [--no-run] [-- CUCUMBER-ARGS...]
//! fleet-conformance list [--tags EXPR] [--capabilities FILE]
//! ```
//!
//! Exit status: 0 PASS, 1 FAIL (a MUST failed or was not tested, a declared capability failed, a
//! stale baseline entry, or a SHOULD under `--strict`), 2 the run itself could not be made (bad
//! arguments, a broker that would not start, no report, a gateway command `sh` cannot run — the
//! pre-flight, [`crate::gateway::preflight`]), 3 INCOMPLETE (nothing failed, but a
//! requirement the run had to judge could not be judged on these brokers: `cluster` declared and
//! run on one node, a partition without the container provider, TLS without a listener), 130 /
//! 143 interrupted by SIGINT / SIGTERM (passed on to the suite run, which stops its gateways and
//! brokers before it exits).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Instant, SystemTime};

use crate::broker::BrokerSpec;
use crate::conformance::catalogue::{self, Scenario};
use crate::conformance::registry::{self, Registry};
use crate::conformance::reports::{self, RunInfo};
use crate::conformance::selection;
use crate::conformance::tagexpr::TagExpr;
use crate::conformance::verdict::{self, Baseline, BrokerRun, Capabilities, Options};
use crate::conformance::{html, suite_root};
use anyhow::{Context as _, anyhow};

/// Where the reports go without `--out`: a directory of the current one.
pub const DEFAULT_OUT: &str = "fleet-conformance-report";

/// The hidden first argument that makes `fleet-conformance` the suite run itself (cucumber's
/// options follow); `run` starts it so, and the `e2e` test target execs the binary with it.
pub const SUITE_ARG: &str = "__suite";

/// Judge any Fleet gateway against the spec, requirement by requirement.
///
/// Exit status: 0 PASS, 1 FAIL, 2 the run could not be made, 3 INCOMPLETE (could not be judged
/// on these brokers), 130/143 interrupted.
#[derive(Debug, clap::Parser)]
#[command(name = "fleet-conformance", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Run the suite against a gateway on the brokers asked for, and judge every requirement.
    Run(Box<RunArgs>),
    /// Requirements, capabilities and the scenarios that check them, without running anything.
    List {
        /// Cucumber tag expression selecting scenarios.
        #[arg(long, short = 't', value_name = "EXPR")]
        tags: Option<String>,
        /// Optional parts the gateway implements: capabilities = ["stop", …].
        #[arg(long, value_name = "FILE")]
        capabilities: Option<PathBuf>,
    },
}

#[derive(Debug, Default, clap::Args)]
struct RunArgs {
    /// The gateway under test, run through `sh -c` with the SPEC §15 environment (default, only
    /// inside a checkout of the suite: the reference gateway, built on the fly).
    #[arg(long, value_name = "CMD")]
    gateway_cmd: Option<String>,
    /// Recorded in the reports.
    #[arg(long, value_name = "TEXT")]
    gateway_version: Option<String>,
    /// [container:|process:|url:]rabbitmq|lavinmq, comma separated (default:
    /// $FLEET_E2E_BROKERS, else rabbitmq).
    #[arg(long, value_name = "LIST")]
    brokers: Option<String>,
    /// Cucumber tag expression selecting scenarios (e.g. '@smoke', '@FWD-1 or @FWD-2'); a run
    /// that leaves requirements out is partial.
    #[arg(long, short = 't', value_name = "EXPR")]
    tags: Option<String>,
    /// Stretch every deadline by F (slow machines, debug builds).
    #[arg(long, value_name = "F", value_parser = positive_number)]
    time_scale: Option<f64>,
    /// Optional parts the gateway implements: capabilities = ["stop", …].
    #[arg(long, value_name = "FILE")]
    capabilities: Option<PathBuf>,
    /// Known failures: [[known-failure]] requirement = "FWD-7" (broker = …).
    #[arg(long, value_name = "FILE")]
    baseline: Option<PathBuf>,
    /// Reports go here (default: ./fleet-conformance-report).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// SHOULD failures fail the run too.
    #[arg(long)]
    strict: bool,
    /// Judge the reports already in --out again, without running.
    #[arg(long)]
    no_run: bool,
    /// Which scenarios get a message sequence chart in conformance.html: failures (default) or
    /// all (passed ones too).
    #[arg(long, value_name = "WHICH", value_parser = ["failures", "all"])]
    charts: Option<String>,
    /// Passed to cucumber (after `--`).
    #[arg(last = true, value_name = "CUCUMBER-ARGS")]
    cucumber: Vec<String>,
}

fn positive_number(v: &str) -> Result<f64, String> {
    let f: f64 = v.parse().map_err(|_| format!("{v:?} is not a number"))?;
    if f.is_finite() && f > 0.0 {
        Ok(f)
    } else {
        Err(format!("must be a positive number, not {v}"))
    }
}

/// The registry and the scenario catalogue of this checkout. Scenarios the suite never runs by
/// default (`@soak`, only with `FLEET_E2E_SOAK=1`, see `conformance::selection`) are left out.
fn load_suite() -> anyhow::Result<(Registry, Vec<Scenario>)> {
    let reg = Registry::load(&registry::default_path())?;
    let mut cat = catalogue::load_dir(&suite_root().join("features"))?;
    if selection::soak_requested() {
        return Ok((reg, cat));
    }
    cat.retain(|s| !s.has_tag(selection::SOAK_TAG));
    Ok((reg, cat))
}

fn load_capabilities(path: Option<&Path>, reg: &Registry) -> anyhow::Result<Capabilities> {
    Ok(match path {
        Some(p) => Capabilities::load(p, reg)?,
        None => Capabilities::default(),
    })
}

/// The tag expression cucumber gets: the user's selection, minus undeclared capabilities.
fn cucumber_tags(selection: Option<&str>, excluded: &[String]) -> Option<String> {
    let mut parts: Vec<String> = selection.map(|s| format!("({s})")).into_iter().collect();
    parts.extend(excluded.iter().map(|t| format!("not @{t}")));
    (!parts.is_empty()).then(|| parts.join(" and "))
}

fn list(tags: Option<&str>, capabilities: Option<&Path>) -> anyhow::Result<ExitCode> {
    let (reg, cat) = load_suite()?;
    let caps = match capabilities {
        Some(p) => Capabilities::load(p, &reg)?,
        None => Capabilities::all(&reg),
    };
    let excluded = caps.excluded_tags(&reg);
    let sel = tags.map(TagExpr::parse).transpose()?;
    let chosen =
        |s: &Scenario| sel.as_ref().is_none_or(|e| e.matches(&s.tags)) && !s.tags.iter().any(|t| excluded.contains(t));
    println!("Capabilities (declare in a --capabilities file):");
    for c in &reg.capabilities {
        println!(
            "  {:<15} {:<6} @{:<20} {} [{}]",
            c.name,
            c.level.to_string(),
            c.tag,
            c.text,
            c.requirements.join(", ")
        );
    }
    let mut section = "";
    let (mut runs, mut entries) = (0, 0);
    for r in &reg.requirements {
        if r.section != section {
            section = &r.section;
            println!("\n§{section}");
        }
        println!("  {:<6} {:<6} {}", r.id, r.level.to_string(), r.text);
        if let Some(o) = &r.optional {
            println!("                optional: {o}");
        }
        let scenarios: Vec<&Scenario> = cat.iter().filter(|s| s.has_tag(&r.id)).collect();
        if scenarios.is_empty() {
            println!("                (no scenario)");
        }
        for s in scenarios {
            let mark = if chosen(s) { "*" } else { " " };
            let extra: Vec<String> = s
                .tags
                .iter()
                .filter(|t| !crate::report::is_requirement(t))
                .map(|t| format!("@{t}"))
                .collect();
            let rows = if s.rows > 0 {
                format!(" ×{}", s.rows)
            } else {
                String::new()
            };
            println!(
                "           {mark} {}:{} {}{rows} {}",
                s.file,
                s.line,
                s.name,
                extra.join(" ")
            );
        }
    }
    for s in cat.iter().filter(|s| chosen(s)) {
        entries += 1;
        runs += s.runs();
    }
    println!(
        "\n{} requirements, {} scenario entries ({} runs) in features/; * = selected{}: {entries} entries, {runs} runs",
        reg.requirements.len(),
        cat.len(),
        cat.iter().map(Scenario::runs).sum::<usize>(),
        tags.map(|t| format!(" by {t:?}")).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

/// The directory of one broker's reports under the out dir (as steps/main.rs names it).
fn broker_dir(out: &Path, spec: &BrokerSpec) -> PathBuf {
    out.join(spec.label().replace(':', "-"))
}

/// Runs the cucumber suite (the e2e test target) with the run's environment. The suite leaves out
/// undeclared capabilities itself (`FLEET_E2E_CAPABILITIES`), whatever the tags say; the tags
/// exclude them too, so the expression in the reports says what ran.
fn run_suite(
    a: &RunArgs,
    specs: &[BrokerSpec],
    out: &Path,
    tags: Option<&str>,
    caps: &Capabilities,
) -> anyhow::Result<bool> {
    // The suite is this same binary (`__suite`), unless FLEET_E2E_BIN names another suite build.
    let mut cmd = match std::env::var_os("FLEET_E2E_BIN") {
        Some(bin) if !bin.is_empty() => Command::new(bin),
        _ => {
            let me = std::env::current_exe().context("locating this binary to run the suite")?;
            let mut c = Command::new(me);
            c.arg(SUITE_ARG);
            c
        }
    };
    if let Some(t) = tags {
        cmd.args(["--tags", t]);
    }
    cmd.args(&a.cucumber);
    cmd.env(super::HOME_VAR, suite_root());
    let labels: Vec<String> = specs.iter().map(BrokerSpec::label).collect();
    cmd.env("FLEET_E2E_BROKERS", labels.join(","));
    cmd.env("FLEET_E2E_OUT", out);
    if let Some(g) = &a.gateway_cmd {
        cmd.env("FLEET_GATEWAY_CMD", g);
    }
    if let Some(f) = a.time_scale {
        cmd.env("FLEET_E2E_TIME_SCALE", f.to_string());
    }
    if let Some(c) = &a.charts {
        cmd.env(crate::timeline::CHARTS_VAR, c);
    }
    let declared: Vec<&str> = caps.declared.iter().map(String::as_str).collect();
    cmd.env(selection::CAPABILITIES_VAR, declared.join(","));
    // Its own process group: a signal reaches the whole run (cargo and the suite binary) only
    // through `supervise`, which then waits for the suite to stop what it started.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    eprintln!("fleet-conformance: running {cmd:?}");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    rt.block_on(supervise(cmd))
}

/// Kills the suite run's process group unless disarmed: a panic here must not leave the run.
struct GroupGuard(Option<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            crate::cleanup::kill_group(pgid, libc::SIGKILL);
        }
    }
}

/// Runs `cmd` to its end. On SIGINT or SIGTERM the signal goes to the run's whole process group
/// (cargo and the suite binary, which stops its gateways and brokers, then exits); once the
/// group is gone (SIGKILL after a deadline) this process exits 130 / 143.
async fn supervise(cmd: Command) -> anyhow::Result<bool> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let what = format!("{cmd:?}");
    let mut child = tokio::process::Command::from(cmd)
        .spawn()
        .with_context(|| format!("starting {what}"))?;
    let pgid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .ok_or_else(|| anyhow!("the suite run has no pid"))?;
    let mut guard = GroupGuard(Some(pgid));
    let (sig, name, code) = tokio::select! {
        status = child.wait() => {
            guard.0 = None;
            return Ok(status.with_context(|| format!("waiting for {what}"))?.success());
        }
        _ = int.recv() => (libc::SIGINT, "SIGINT", 130),
        _ = term.recv() => (libc::SIGTERM, "SIGTERM", 143),
    };
    eprintln!("fleet-conformance: {name}: stopping the suite run and what it started");
    crate::cleanup::kill_group(pgid, sig);
    let gone = crate::timing::wait_for(
        "the suite run to stop its gateways and brokers",
        std::time::Duration::from_secs(60),
        || {
            let reaped = matches!(child.try_wait(), Ok(Some(_)) | Err(_));
            let done = reaped && !crate::cleanup::kill_group(pgid, 0);
            async move { Ok(done.then_some(())) }
        },
    )
    .await;
    if let Err(e) = gone {
        eprintln!("fleet-conformance: {e}; killing it (the next run removes what it leaves)");
    }
    drop(guard);
    std::process::exit(code);
}

/// What one broker's directory holds after the run.
fn read_broker(out: &Path, spec: &BrokerSpec) -> BrokerRun {
    let dir = broker_dir(out, spec);
    let meta: serde_json::Value = std::fs::read(dir.join("broker.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let mut run = BrokerRun {
        label: spec.label(),
        kind: spec.kind.to_string(),
        version: meta.get("version").and_then(|v| v.as_str()).map(str::to_string),
        error: None,
        scenarios: Vec::new(),
        left_out: std::fs::read(dir.join(verdict::LEFT_OUT_FILE))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default(),
    };
    let report = std::fs::read(dir.join("cucumber.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).map_err(|e| e.to_string()));
    match report {
        Ok(v) => {
            run.scenarios = verdict::scenario_results(&v);
            let dir_name = dir
                .file_name()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_default();
            for s in &mut run.scenarios {
                let name = verdict::log_file_name(&s.file, s.line);
                if dir.join("logs").join(&name).is_file() {
                    s.log = Some(format!("{dir_name}/logs/{name}"));
                }
            }
        }
        Err(e) => {
            run.error = Some(format!(
                "no cucumber report in {} ({e}); the broker did not start or the run stopped early — see the output above",
                dir.display()
            ))
        }
    }
    run
}

/// The suite's commit, for the record (read-only git).
fn suite_commit() -> Option<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(super::checkout())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn write(path: &Path, contents: &str) -> anyhow::Result<()> {
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))
}

fn run(a: &RunArgs) -> anyhow::Result<ExitCode> {
    let (reg, cat) = load_suite()?;
    let caps = load_capabilities(a.capabilities.as_deref(), &reg)?;
    let baseline = match &a.baseline {
        Some(p) => Baseline::load(p, &reg)?,
        None => Baseline::default(),
    };
    let selection = a.tags.as_deref().map(TagExpr::parse).transpose()?;
    let excluded = caps.excluded_tags(&reg);
    let tags = cucumber_tags(a.tags.as_deref(), &excluded);
    let brokers = a
        .brokers
        .clone()
        .or_else(|| std::env::var("FLEET_E2E_BROKERS").ok().filter(|b| !b.trim().is_empty()))
        .unwrap_or_else(|| "rabbitmq".into());
    let specs = BrokerSpec::parse_list(&brokers)?;
    let out = std::path::absolute(a.out.clone().unwrap_or_else(|| PathBuf::from(DEFAULT_OUT)))?;
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;

    let started_at = SystemTime::now();
    let clock = Instant::now();
    let mut unusable = None;
    if !a.no_run {
        for spec in &specs {
            let dir = broker_dir(&out, spec);
            for f in ["cucumber.json", "junit.xml", "broker.json", verdict::LEFT_OUT_FILE] {
                let _ = std::fs::remove_file(dir.join(f));
            }
            let _ = std::fs::remove_dir_all(dir.join("logs"));
        }
        // A command sh cannot run stops the run here, in one line (docs/RUNNER.md, exit status).
        unusable = crate::gateway::preflight::run(a.gateway_cmd.as_deref());
    }
    if !a.no_run && unusable.is_none() {
        let ok = run_suite(a, &specs, &out, tags.as_deref(), &caps)?;
        eprintln!(
            "fleet-conformance: the suite {} after {:.0?}; judging",
            if ok { "passed" } else { "reported failures" },
            clock.elapsed()
        );
    }
    let mut runs: Vec<BrokerRun> = specs.iter().map(|s| read_broker(&out, s)).collect();
    if let Some(u) = &unusable {
        verdict::preflight_failed(&mut runs, u);
    }
    let infra_error = runs.iter().any(|r| r.error.is_some());
    let j = verdict::judge(
        &reg,
        &cat,
        runs,
        Options {
            selection: selection.as_ref(),
            capabilities: &caps,
            baseline: &baseline,
            strict: a.strict,
            reference_gateway: a.gateway_cmd.is_none(),
        },
    );
    let finished_at = SystemTime::now();
    let info = RunInfo {
        suite: format!("fleet-conformance {}", env!("CARGO_PKG_VERSION")),
        suite_commit: suite_commit(),
        gateway_command: a
            .gateway_cmd
            .clone()
            .unwrap_or_else(|| "the reference gateway (fleet-gateway, built by the suite)".into()),
        gateway_version: a.gateway_version.clone(),
        tags: a.tags.clone(),
        cucumber_tags: tags,
        capabilities: caps.declared.iter().cloned().collect(),
        baseline: a.baseline.as_ref().map(|p| p.display().to_string()),
        strict: a.strict,
        time_scale: a.time_scale.unwrap_or(1.0),
        started_at: reports::rfc3339(started_at),
        finished_at: reports::rfc3339(finished_at),
        duration_s: clock.elapsed().as_secs_f64(),
    };
    let json = reports::json(&info, &j)?;
    write(&out.join("conformance.json"), &json)?;
    write(&out.join("junit.xml"), &reports::junit(&j))?;
    write(&out.join("conformance.html"), &html::render(&info, &j, &out))?;
    println!("{}", reports::text(&info, &j));
    println!(
        "reports: {0}/conformance.html, {0}/conformance.json, {0}/junit.xml, {0}/<broker>/cucumber.json and junit.xml",
        out.display()
    );
    Ok(if let Some(u) = &unusable {
        eprintln!("fleet-conformance: {}: the run could not be made", u.reason);
        ExitCode::from(2)
    } else if infra_error {
        eprintln!("fleet-conformance: a broker produced no report: the run could not be made");
        ExitCode::from(2)
    } else {
        ExitCode::from(j.verdict.exit_code())
    })
}

/// The runner's entry: parses the command line, runs or lists, and says how it ended.
pub fn main() -> ExitCode {
    crate::logs::init();
    // clap prints --help / --version and exits 0, or names a bad argument and exits 2.
    let cli = <Cli as clap::Parser>::parse();
    let outcome = match cli.cmd {
        Cmd::List { tags, capabilities } => list(tags.as_deref(), capabilities.as_deref()),
        Cmd::Run(a) => run(&a),
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fleet-conformance: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(s: &[&str]) -> Result<Cmd, clap::Error> {
        <Cli as clap::Parser>::try_parse_from(std::iter::once("fleet-conformance").chain(s.iter().copied()))
            .map(|c| c.cmd)
    }

    #[test]
    fn parses_a_run() {
        let Cmd::Run(a) = parse_args(&[
            "run",
            "--gateway-cmd",
            "./gw --flag",
            "--brokers",
            "rabbitmq,lavinmq",
            "--tags",
            "@smoke",
            "--time-scale",
            "2",
            "--strict",
            "--",
            "--fail-fast",
        ])
        .expect("parses") else {
            panic!("not a run");
        };
        assert_eq!(a.gateway_cmd.as_deref(), Some("./gw --flag"));
        assert_eq!(a.time_scale, Some(2.0));
        assert!(a.strict);
        assert_eq!(a.cucumber, ["--fail-fast"]);
    }

    #[test]
    fn refuses_bad_arguments() {
        assert!(parse_args(&["run", "--time-scale", "0"]).is_err());
        assert!(parse_args(&["run", "--tags"]).is_err());
        assert!(parse_args(&["run", "--frobnicate"]).is_err());
        assert!(parse_args(&["list", "--gateway-cmd", "x"]).is_err());
        assert!(parse_args(&["judge"]).is_err());
    }

    #[test]
    fn undeclared_capabilities_join_the_tag_expression() {
        let ex = vec!["cap-stop".to_string(), "cap-delay".to_string()];
        assert_eq!(
            cucumber_tags(Some("@smoke or @FWD-1"), &ex).as_deref(),
            Some("(@smoke or @FWD-1) and not @cap-stop and not @cap-delay")
        );
        assert_eq!(cucumber_tags(None, &[]), None);
        let e = TagExpr::parse(&cucumber_tags(Some("@smoke"), &ex).expect("some")).expect("parses");
        assert!(e.matches(&["smoke"]) && !e.matches(&["smoke", "cap-stop"]));
    }
}
