//! `fleet-fake-herdr`: the suite's fake herdr (`src/herdr.rs`) as a process of its own.
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
//! Agents start `idle` unless a status is given, and turn `working` when input is submitted
//! (as a real agent does). Runs until SIGTERM or SIGINT.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use fleet_conformance::herdr::{AgentStatus, FakeHerdr};

fn usage() -> &'static str {
    "usage: fleet-fake-herdr --dir DIR [--agent NAME=AGENT[:STATUS]]..."
}

struct Agent {
    name: String,
    agent: String,
    status: AgentStatus,
}

fn parse_args() -> Result<(PathBuf, Vec<Agent>), String> {
    let mut dir = None;
    let mut agents = Vec::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--dir" => dir = Some(PathBuf::from(it.next().ok_or("--dir needs a directory")?)),
            "--agent" => {
                let spec = it.next().ok_or("--agent needs NAME=AGENT[:STATUS]")?;
                let (name, rest) = spec
                    .split_once('=')
                    .ok_or(format!("--agent {spec:?} is not NAME=AGENT"))?;
                let (agent, status) = match rest.split_once(':') {
                    Some((a, s)) => (a, s.parse().map_err(|_| format!("unknown agent status {s:?}"))?),
                    None => (rest, AgentStatus::Idle),
                };
                agents.push(Agent {
                    name: name.to_string(),
                    agent: agent.to_string(),
                    status,
                });
            }
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            other => return Err(format!("unexpected argument {other:?}\n{}", usage())),
        }
    }
    Ok((dir.ok_or(format!("--dir is required\n{}", usage()))?, agents))
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
    let (dir, agents) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet-fake-herdr: {e}");
            return std::process::ExitCode::from(2);
        }
    };
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
