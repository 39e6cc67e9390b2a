//! The conformance suite: the `fleet-conformance` binary (docs/RUNNER.md).
//!
//! One binary, two roles. Run by a person, it is the runner's command line
//! (`fleet_conformance::conformance::cli`: `run`, `list`); `run` starts this same binary again as
//! the suite run itself (`fleet-conformance __suite [cucumber options]`, also what
//! `cargo test --features e2e --test e2e` execs), which is the rest of this file and the step
//! modules. The binary carries `features/` and `fixtures/` (`conformance::embedded`), so it needs
//! no checkout beside it.
//!
//! For each broker in `FLEET_E2E_BROKERS` (default `rabbitmq`, a container) the suite run starts
//! the broker, runs every feature against real gateway processes, stops the broker, and prints which
//! requirements passed. A broker that was asked for and cannot start fails the run — it is never
//! skipped. Reports go to `target/fleet-e2e/<broker>/` (or `$FLEET_E2E_OUT/<broker>/`): cucumber
//! JSON, JUnit XML, `broker.json` (label and version) and `logs/<feature>-<line>.log`, the gateway
//! logs of each failed scenario — what `fleet-conformance run` reads back.
//!
//! Whatever `--tags` or `--name` selects, `@soak` runs only with `FLEET_E2E_SOAK=1` and `@cap-…`
//! only for a declared capability (`FLEET_E2E_CAPABILITIES`, see
//! `fleet_conformance::conformance::selection`): cucumber's own `--tags` would replace the filter
//! that says so, so the runner takes the selection out of cucumber's options and applies it itself.
//!
//! SIGINT (Ctrl-C) and SIGTERM stop every gateway, broker process and broker container the run
//! started, then exit with 130 / 143; so does a panic that unwinds out of the runner. A run first
//! removes what earlier runs that died without cleaning up left behind (`fleet_conformance::cleanup`).

mod agent_gone;
mod ask;
mod broadcast;
mod broker_restart;
mod broker_side;
mod cluster;
mod envelope;
mod faults;
mod foreground;
mod forward;
mod hosts;
mod mcp_clients;
mod membership;
mod migration;
mod not_sent;
mod operations;
mod presence;
mod pull;
mod queues;
mod republish;
mod security;
mod soak;
mod spawn;
mod world;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use cucumber::tag::Ext as _;
use cucumber::{World as _, WriterExt as _, writer};
use fleet_conformance::broker::{Broker, BrokerSpec, ProviderKind};
use fleet_conformance::cleanup;
use fleet_conformance::conformance::registry::{self, Registry};
use fleet_conformance::conformance::selection::RunPolicy;
use futures_util::FutureExt as _;

use world::{CURRENT, FleetWorld, Suite, current_suite};

/// Scenario slots beyond `FLEET_E2E_CONCURRENCY` for `@broker-restart` scenarios waiting for
/// their broker (they wait without load; see `world::Suite::restart_suite`).
const RESTART_WAITING: usize = 8;

/// Scenarios sharing the broker at once when `FLEET_E2E_CONCURRENCY` is unset: four per core, at
/// most eight. A scenario spends most of its time waiting on gateways' own timers (heartbeats,
/// the inject bound, absence windows), not on the CPU: on 2 cores, 8 at once kept the suite and
/// its gateways at ~0.9 of a core and took the full run from 8.6 to 5.3 min, all passing.
fn default_concurrency() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (4 * cores).min(8)
}

/// The checkout this binary was built from (the reference gateway's sources, `target/`).
fn workspace_root() -> PathBuf {
    fleet_conformance::conformance::checkout()
}

/// The directory holding `features/` and `fixtures/`: the checkout under `cargo test`, else the
/// files this binary carries.
fn suite_root() -> PathBuf {
    fleet_conformance::conformance::suite_root()
}

/// The gateway command: `FLEET_GATEWAY_CMD`, or the reference gateway built right now (only
/// where the checkout this binary was built from is still there).
fn gateway_command() -> anyhow::Result<String> {
    if let Ok(cmd) = std::env::var("FLEET_GATEWAY_CMD")
        && !cmd.trim().is_empty()
    {
        return Ok(cmd);
    }
    anyhow::ensure!(
        workspace_root().join("reference-gateway").join("Cargo.toml").is_file(),
        "no gateway to test: pass --gateway-cmd (or set FLEET_GATEWAY_CMD) to the command that starts your \
         gateway; the reference gateway is built only inside a checkout of the suite"
    );
    eprintln!("building the reference gateway (set FLEET_GATEWAY_CMD to test another gateway)…");
    let mut build = fleet_conformance::conformance::shell_cargo();
    build.args(["build", "-p", "fleet-gateway", "--bin", "fleet-gateway"]);
    let status = build.status()?;
    anyhow::ensure!(status.success(), "building fleet-gateway failed");
    // This binary lives in <target>/<profile>/ (a test binary in <target>/<profile>/deps/), the
    // gateway in <target>/<profile>/.
    let exe = std::env::current_exe()?;
    let bin = exe
        .ancestors()
        .skip(1)
        .take(2)
        .map(|d| d.join("fleet-gateway"))
        .find(|b| b.is_file())
        .ok_or_else(|| anyhow::anyhow!("fleet-gateway was built but is not beside {}", exe.display()))?;
    Ok(bin.display().to_string())
}

async fn run_on(
    spec: &BrokerSpec,
    gateway_cmd: &str,
    out_root: &Path,
    policy: &RunPolicy,
    args: &[std::ffi::OsString],
) -> anyhow::Result<bool> {
    let label = spec.label();
    eprintln!("== starting broker {label} ==");
    let started = std::time::Instant::now();
    let broker = Broker::start(spec)
        .await
        .map_err(|e| anyhow::anyhow!("broker {label} was asked for and could not start: {e}"))?;
    eprintln!(
        "== broker {label} ({}) ready in {:.1?} ==",
        broker.version(),
        started.elapsed()
    );
    let out_dir = out_root.join(label.replace(':', "-"));
    std::fs::create_dir_all(&out_dir)?;
    let meta = serde_json::json!({"label": label, "kind": spec.kind.to_string(), "version": broker.version()});
    std::fs::write(out_dir.join("broker.json"), meta.to_string())?;
    let logs_dir = out_dir.join("logs");
    let _ = std::fs::remove_dir_all(&logs_dir);
    let work_dir = std::env::temp_dir().join(format!("fleet-e2e-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&work_dir)?;
    let concurrency = std::env::var("FLEET_E2E_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(default_concurrency);
    let quorum = broker.is_cluster() && policy.capabilities.declared.iter().any(|c| c == "cluster");
    let mut suite = Suite::new(broker, gateway_cmd.to_string(), work_dir.clone(), concurrency);
    suite.quorum = quorum;
    suite.membership = policy.capabilities.declared.iter().any(|c| c == "membership");
    suite.confirm_stall = policy.capabilities.declared.iter().any(|c| c == "confirm-stall");
    let suite = Arc::new(suite);
    if let Ok(mut g) = CURRENT.write() {
        *g = Some(suite.clone());
    }
    let json = std::fs::File::create(out_dir.join("cucumber.json"))?;
    let junit = std::fs::File::create(out_dir.join("junit.xml"))?;
    let runner = FleetWorld::cucumber()
        // `concurrency` scenarios share the broker (the slots taken below), and the @broker-restart
        // ones take their own broker one at a time; room for those waiting their turn.
        .max_concurrent_scenarios(concurrency + RESTART_WAITING)
        .before(|feature, rule, scenario, world| {
            let restarts = feature
                .tags
                .iter()
                .chain(rule.iter().flat_map(|r| &r.tags))
                .chain(&scenario.tags)
                .any(|t| t.trim_start_matches('@') == fleet_conformance::broker::RESTART_TAG);
            let strikes = feature
                .tags
                .iter()
                .chain(rule.iter().flat_map(|r| &r.tags))
                .chain(&scenario.tags)
                .any(|t| cluster::NODE_FAULT_TAGS.contains(&t.trim_start_matches('@')));
            world.cluster.exclusive = strikes;
            async move {
                if !restarts && let Some(s) = &world.suite {
                    world.slot = s.slots.clone().acquire_owned().await.ok();
                }
                // The sequence chart's clock starts with the scenario's first step, not its wait.
                world.recorder = Default::default();
            }
            .boxed_local()
        })
        .fail_on_skipped()
        .with_writer(
            writer::Basic::raw(std::io::stdout(), writer::Coloring::Never, 0)
                .summarized()
                .tee::<FleetWorld, _>(writer::Json::for_tee(json))
                .tee::<FleetWorld, _>(writer::JUnit::for_tee(junit, 0))
                .normalized(),
        )
        .after(move |feature, _rule, scenario, ev, world| {
            use cucumber::event::ScenarioFinished;
            use fleet_conformance::timeline;
            let passed = matches!(ev, ScenarioFinished::StepPassed);
            let feature_file = feature
                .path
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let log_file = logs_dir.join(fleet_conformance::conformance::verdict::log_file_name(
                &feature_file,
                scenario.position.line,
            ));
            // The scenario's sequence chart: for a failure, or for all with FLEET_E2E_CHARTS=all.
            let timeline_file = logs_dir.join(timeline::file_name(&feature_file, scenario.position.line));
            let chart = !passed || timeline::charts_all();
            let failure = match ev {
                ScenarioFinished::StepFailed(_, _, e) => Some(e.to_string()),
                ScenarioFinished::StepSkipped => Some("a step was skipped (no step definition matched it)".into()),
                ScenarioFinished::BeforeHookFailed(_) => Some("the before-hook failed".into()),
                ScenarioFinished::StepPassed => None,
            };
            let (name, line) = (scenario.name.clone(), scenario.position.line);
            let feature_name = Path::new(&feature_file)
                .file_name()
                .map(|f| format!("features/{}", f.to_string_lossy()))
                .unwrap_or_default();
            async move {
                if let Some(w) = world {
                    let ended_at = w.recorder.at_ms(std::time::Instant::now());
                    let recording = w.recorder.stop().await;
                    if chart {
                        let parts = timeline::scenario::Parts {
                            scenario: name,
                            feature: feature_name,
                            line,
                            passed,
                            failure: failure.map(|e| (e, ended_at)),
                            hosts: w
                                .hosts
                                .iter()
                                .map(|(h, x)| (h.clone(), &x.herdr, x.gateway.log()))
                                .collect(),
                            entities: w
                                .entities
                                .iter()
                                .map(|(n, e)| timeline::build::Entity {
                                    name: n.clone(),
                                    host: e.host.clone(),
                                    gid: e.gid.clone(),
                                    pane: e.pane.clone(),
                                })
                                .collect(),
                        };
                        let t = timeline::scenario::assemble(&w.recorder, recording, parts);
                        // Best effort, as the log excerpt: the run goes on without it.
                        let _ = std::fs::create_dir_all(timeline_file.parent().unwrap_or(Path::new(".")))
                            .and_then(|()| std::fs::write(&timeline_file, serde_json::to_vec(&t).unwrap_or_default()));
                    }
                    if !passed {
                        let mut excerpt = String::new();
                        for (host, h) in &w.hosts {
                            let part = format!(
                                "--- gateway {host} log ({}) ---\n{}\n",
                                h.gateway.log_path().display(),
                                h.gateway.log_tail(60)
                            );
                            eprint!("{part}");
                            excerpt.push_str(&part);
                        }
                        // Kept for the conformance report (best effort: the run goes on without it).
                        let _ = std::fs::create_dir_all(log_file.parent().unwrap_or(Path::new(".")))
                            .and_then(|()| std::fs::write(&log_file, excerpt));
                    }
                    w.cleanup(passed).await;
                }
            }
            .boxed_local()
        });
    // cucumber would evaluate `--tags` / `--name` *instead of* the filter below: take them out of
    // its options and apply them here, together with the run policy.
    // clap prints --help, or names a bad option and exits 2, as cucumber's own parsing would.
    let mut cli = <cucumber::cli::Opts<_, _, _, cucumber::cli::Empty> as clap::Parser>::parse_from(args);
    let (tags, name) = (cli.tags_filter.take(), cli.re_filter.take());
    let policy = policy.clone();
    // Scenarios this broker cannot run (a restart on the url provider): left out, said so below.
    let broker_spec = *spec;
    let left_out = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let left_out_by_filter = left_out.clone();
    let result =
        runner
            .with_cli(cli)
            .filter_run(suite_root().join("features"), move |feature, rule, scenario| {
                let all_tags = feature
                    .tags
                    .iter()
                    .chain(rule.iter().flat_map(|r| &r.tags))
                    .chain(&scenario.tags);
                let selected = match (&name, &tags) {
                    (Some(re), _) => re.is_match(&scenario.name),
                    (None, Some(expr)) => expr.eval(all_tags.clone()),
                    (None, None) => true,
                };
                let admitted = selected && policy.admits(all_tags.clone().map(String::as_str));
                let why_not = broker_spec.cannot_run(all_tags.clone().map(String::as_str)).or_else(|| {
                (quorum && all_tags.clone().any(|t| t.trim_start_matches('@') == cluster::CLASSIC_INBOX_TAG)).then(|| {
                    format!(
                        "it judges a classic inbox's form (@{}), and on a cluster the gateway runs quorum inboxes \
                         (SPEC §16 CLU-4 changes that observable; cluster.feature judges the quorum form)",
                        cluster::CLASSIC_INBOX_TAG
                    )
                })
            });
                match why_not {
                    Some(why) if admitted => {
                        if let Ok(mut l) = left_out_by_filter.lock() {
                            l.insert(
                                (feature.name.clone(), scenario.position.line),
                                fleet_conformance::conformance::verdict::LeftOut {
                                    name: scenario.name.clone(),
                                    file: feature
                                        .path
                                        .as_deref()
                                        .map(|p| p.strip_prefix(suite_root()).unwrap_or(p).display().to_string()),
                                    line: scenario.position.line,
                                    tags: all_tags.cloned().collect(),
                                    reason: why,
                                },
                            );
                        }
                        false
                    }
                    _ => admitted,
                }
            })
            .await;
    let left_out: Vec<_> = left_out
        .lock()
        .map(|l| l.values().cloned().collect())
        .unwrap_or_default();
    for l in &left_out {
        let at = match &l.file {
            Some(f) => format!("{f}:{}", l.line),
            None => format!("line {}", l.line),
        };
        println!("NOT TESTED on {label}: \"{}\" ({at}): {}", l.name, l.reason);
    }
    // For the verdict: the requirements of these scenarios say why they were not tested here.
    std::fs::write(
        out_dir.join(fleet_conformance::conformance::verdict::LEFT_OUT_FILE),
        serde_json::to_vec_pretty(&left_out)?,
    )?;
    use cucumber::writer::Stats as _;
    let failed = result.execution_has_failed() || result.skipped_steps() > 0;
    if let Ok(mut g) = CURRENT.write() {
        *g = None;
    }
    let report: serde_json::Value = std::fs::read(out_dir.join("cucumber.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    println!(
        "{}",
        fleet_conformance::report::render(&label, &fleet_conformance::report::tally(&report))
    );
    let suite = Arc::try_unwrap(suite).map_err(|_| anyhow::anyhow!("scenarios still hold the broker"))?;
    for problem in suite.stop().await {
        eprintln!("warning: {problem}");
    }
    if !failed {
        let _ = std::fs::remove_dir_all(&work_dir);
    } else {
        eprintln!("scenario files kept in {}", work_dir.display());
    }
    Ok(!failed)
}

/// Runs the cleanup registry when `main` ends, also by a panic unwinding out of the runner.
/// (A panic *hook* would not do: cucumber catches a step's panic as that step's failure, and the
/// other scenarios' gateways must live on.)
struct CleanupOnExit;

impl Drop for CleanupOnExit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("the runner panicked: stopping every gateway and broker it started");
        }
        cleanup::run_all();
    }
}

/// Waits for SIGINT or SIGTERM, then stops everything the run started and exits 130 / 143
/// without waiting for the scenarios in flight. The handlers are installed before this returns,
/// so no signal falls back to the default action (which would leave gateways and brokers).
fn exit_on_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        let (name, code) = tokio::select! {
            _ = int.recv() => ("SIGINT", 130),
            _ = term.recv() => ("SIGTERM", 143),
        };
        eprintln!("\n== {name}: stopping every gateway and broker this run started ==");
        cleanup::run_all();
        if let Some(s) = current_suite() {
            eprintln!("scenario files kept in {}", s.work_dir.display());
        }
        eprintln!("== stopped; exiting with {code} ==");
        std::process::exit(code);
    });
    Ok(())
}

/// The runner's command line, or the suite run when the first argument is `__suite`.
fn main() -> std::process::ExitCode {
    let mut args = std::env::args_os();
    let program = args.next();
    if args
        .next()
        .is_some_and(|a| a == fleet_conformance::conformance::cli::SUITE_ARG)
    {
        return suite_main(program.into_iter().chain(args).collect());
    }
    fleet_conformance::conformance::cli::main()
}

/// The suite run: every broker of `FLEET_E2E_BROKERS`, every selected scenario. `args` are the
/// program name and cucumber's options.
fn suite_main(args: Vec<std::ffi::OsString>) -> std::process::ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    fleet_conformance::logs::init();
    // Dropped before the runtime, whose own drop may wait for blocking tasks.
    let _cleanup = CleanupOnExit;
    let outcome = rt.block_on(async {
        exit_on_signal()?;
        let brokers = std::env::var("FLEET_E2E_BROKERS").unwrap_or_else(|_| "rabbitmq".into());
        let specs =
            BrokerSpec::parse_list(&brokers).map_err(|e| anyhow::anyhow!("FLEET_E2E_BROKERS={brokers:?}: {e}"))?;
        let registry = Registry::load(&registry::default_path())?;
        let policy = RunPolicy::from_env(&registry)?;
        eprintln!("{}", policy.describe());
        match std::env::var("FLEET_E2E_TIME_SCALE") {
            Ok(v) => eprintln!(
                "deadlines ×{:.2} (FLEET_E2E_TIME_SCALE={v})",
                fleet_conformance::timing::time_scale()
            ),
            Err(_) => eprintln!(
                "deadlines ×{:.2} (calibrated from this machine's speed now; FLEET_E2E_TIME_SCALE overrides)",
                fleet_conformance::timing::time_scale()
            ),
        }
        let swept = cleanup::sweep(specs.iter().any(|s| s.provider == ProviderKind::Container));
        if !swept.is_empty() {
            eprintln!("removed leftovers of earlier runs that died without cleaning up: {swept}");
        }
        let cmd = gateway_command()?;
        let out_root = match std::env::var_os("FLEET_E2E_OUT") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => workspace_root().join("target").join("fleet-e2e"),
        };
        let mut all_ok = true;
        for spec in &specs {
            all_ok &= run_on(spec, &cmd, &out_root, &policy, &args).await?;
        }
        anyhow::Ok(all_ok)
    });
    match outcome {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
