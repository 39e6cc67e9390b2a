//! `fleet-fake-herdr`: the suite's fake herdr (`src/herdr/`) as a process of its own.
//!
//! Exists for staging smoke tests (`scripts/compose-smoke`), where a gateway runs in a container
//! and needs a herdr socket but no real agents: this serves the same faithful fake the suite uses,
//! with agent panes made at start, and prints what happens so a script can follow it:
//!
//! ```text
//! fleet-fake-herdr --dir DIR [--agent NAME=AGENT[:STATUS]]...
//!   pane NAME PANE_ID          one line per --agent, once the socket DIR/herdr.sock listens
//!   input PANE_ID TEXT         one line per input submitted to a pane (newlines as \n)
//! ```
//!
//! Agents start `idle` unless a status is given; each agent program reports `working` when it
//! reads a submitted line (herdr itself never moves the status on input, the agent's report does).
//! Runs until SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use fleet_conformance::herdr::{AgentStatus, FakeHerdr};

/// The suite's fake herdr as a process: a herdr socket (HERDR.md's subset) with agent panes.
#[derive(Debug, clap::Parser)]
#[command(name = "fleet-fake-herdr", version)]
struct Cli {
    /// Directory of the socket (DIR/herdr.sock).
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
    /// An agent pane made at start: NAME=AGENT[:STATUS] (STATUS idle, working, blocked, done;
    /// default idle). Repeat for more.
    #[arg(long = "agent", value_name = "NAME=AGENT[:STATUS]", value_parser = parse_agent)]
    agents: Vec<Agent>,
}

#[derive(Debug, Clone)]
struct Agent {
    name: String,
    agent: String,
    status: AgentStatus,
}

fn parse_agent(spec: &str) -> Result<Agent, String> {
    let (name, rest) = spec
        .split_once('=')
        .ok_or(format!("{spec:?} is not NAME=AGENT[:STATUS]"))?;
    let (agent, status) = match rest.split_once(':') {
        Some((a, s)) => (a, s.parse().map_err(|_| format!("unknown agent status {s:?}"))?),
        None => (rest, AgentStatus::Idle),
    };
    Ok(Agent {
        name: name.to_string(),
        agent: agent.to_string(),
        status,
    })
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

async fn serve(dir: PathBuf, agents: Vec<Agent>) -> Result<(), String> {
    let herdr = FakeHerdr::start(&dir).await.map_err(|e| e.to_string())?;
    let mut panes = BTreeMap::new();
    for a in &agents {
        let id = herdr.add_agent_pane(&a.agent, a.status);
        say(&format!("pane {} {id}", a.name));
        panes.insert(id, 0usize);
    }
    say(&format!("listening {}", herdr.socket_path().display()));
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tick.tick() => {
                for (pane, seen) in panes.iter_mut() {
                    let inputs = herdr.inputs(pane);
                    for text in inputs.iter().skip(*seen) {
                        say(&format!("input {pane} {}", text.replace('\n', "\\n")));
                    }
                    *seen = inputs.len();
                }
            }
        }
    }
    herdr.stop().await;
    Ok(())
}

fn main() -> std::process::ExitCode {
    fleet_conformance::logs::init();
    let Cli { dir, agents } = <Cli as clap::Parser>::parse();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("fleet-fake-herdr: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match rt.block_on(serve(dir, agents)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-fake-herdr: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
