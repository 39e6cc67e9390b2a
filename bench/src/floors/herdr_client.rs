//! A bare herdr client making an inject's requests, and a fake herdr set up like the forward
//! run's worker side: what both herdr floors (CPU per inject, latency of one inject) time.
//!
//! Why a module: the CPU floor ([`crate::floors::local_floor`]) and the latency floor
//! ([`crate::floors::latency_floor`]) must time the *same* sequence against the *same* fake, or
//! the two floors would describe two different injects. herdr (HERDR.md) answers one request per
//! connection, so each request is: connect, one JSON line out, one line in, close. An inject is:
//!
//! 1. the gate (FWD-2, `agent.wait` until idle or done) and [C-20]'s look at the terminal
//!    (`pane.process_info`), asked together as the reference gateway asks them;
//! 2. the input (`pane.send_input` with the text and the Enter key);
//! 3. the submit check (FWD-7): `agent.get`, which shows the agent `working` on the brief.
//!
//! The fake's worker pane is an agent herdr recognises (`claude`, as [`crate::rig::hosts`]
//! registers workers) that reports `working` on reading the input and finishes quickly
//! ([`InputReaction::WorksBriefly`], as the forward run's workers): the next `agent.wait` finds it
//! idle again, so injects follow each other as in the forward run's 1-sender latency run.
//!
//! Anything a gateway asks herdr beyond these (more reads for the proposed foreground identity,
//! docs/CONTRACT.md; a follower off the path) is its own choice and not in the floors.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use fleet_conformance::herdr::{AgentStatus, FakeHerdr, InputReaction};
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The agent name the forward run's workers show in herdr ([`crate::rig::hosts::Fleet::add`]).
const WORKER_AGENT: &str = "claude";

/// A fake herdr in `dir` with `panes` idle worker panes reacting to input as the forward run's.
pub async fn start_fake(dir: &Path, panes: usize) -> anyhow::Result<(FakeHerdr, Vec<String>)> {
    let herdr = FakeHerdr::start(dir).await.context("starting the floor's fake herdr")?;
    let ids = (0..panes.max(1))
        .map(|_| {
            let p = herdr.add_agent_pane(WORKER_AGENT, AgentStatus::Idle);
            herdr.set_on_input(&p, InputReaction::WorksBriefly);
            p
        })
        .collect();
    Ok((herdr, ids))
}

/// Stops the fake and removes its directory.
pub async fn stop_fake(herdr: FakeHerdr, dir: &Path) {
    herdr.stop().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// One inject into `pane` through herdr at `socket`: gate and look together, input, submit check.
pub async fn inject(socket: &Path, pane: &str, text: &str) -> anyhow::Result<()> {
    let wait = json!({"target": pane, "until": ["idle", "done"], "timeout_ms": 5000});
    let (_, front) = tokio::try_join!(
        one_shot::<IgnoredAny>(socket, "agent.wait", wait),
        one_shot::<ProcessInfoGot>(socket, "pane.process_info", json!({"pane_id": pane})),
    )?;
    anyhow::ensure!(
        front.process_info.foreground_process_group_id != front.process_info.shell_pid,
        "the floor's fake pane shows its shell in front"
    );
    let input = json!({"pane_id": pane, "text": text, "keys": ["enter"]});
    one_shot::<IgnoredAny>(socket, "pane.send_input", input).await?;
    let got = one_shot::<AgentGot>(socket, "agent.get", json!({"target": pane})).await?;
    anyhow::ensure!(
        got.agent.agent_status == "working",
        "the floor's fake agent did not take the input (it shows {})",
        got.agent.agent_status
    );
    Ok(())
}

/// A work directory of its own for one floor's fake herdr.
pub fn work_dir(under: &Path, what: &str) -> PathBuf {
    under.join(format!("{what}-{}", uuid::Uuid::new_v4().simple()))
}

/// What [C-20]'s decision reads of `pane.process_info` (the least: who has the terminal).
#[derive(Deserialize)]
struct ProcessInfoGot {
    process_info: Front,
}

#[derive(Deserialize)]
struct Front {
    shell_pid: u64,
    foreground_process_group_id: u64,
}

/// What FWD-7's check reads of `agent.get`: the agent's status.
#[derive(Deserialize)]
struct AgentGot {
    agent: AgentStatusGot,
}

#[derive(Deserialize)]
struct AgentStatusGot {
    agent_status: String,
}

#[derive(Deserialize)]
struct Answer<R> {
    result: Option<R>,
    error: Option<IgnoredAny>,
}

/// One request on its own connection: connect, one line out, read to the close, parse.
async fn one_shot<R: serde::de::DeserializeOwned>(socket: &Path, method: &str, params: Value) -> anyhow::Result<R> {
    let mut s = tokio::net::UnixStream::connect(socket).await?;
    let mut line = serde_json::to_vec(&json!({"id": "f", "method": method, "params": params}))?;
    line.push(b'\n');
    s.write_all(&line).await?;
    let mut answer = Vec::with_capacity(1024);
    s.read_to_end(&mut answer).await?;
    let a: Answer<R> = serde_json::from_slice(&answer)?;
    match (a.error, a.result) {
        (None, Some(r)) => Ok(r),
        _ => Err(anyhow!("herdr refused {method}: {}", String::from_utf8_lossy(&answer))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn injects_follow_each_other_into_one_pane() {
        let dir = work_dir(&std::env::temp_dir(), "fleet-herdr-client");
        let (herdr, panes) = start_fake(&dir, 1).await.expect("the fake starts");
        let socket = herdr.socket_path().to_path_buf();
        for i in 0..3 {
            inject(&socket, &panes[0], &format!("brief {i}"))
                .await
                .expect("each inject finds the agent idle again and sees it take the input");
        }
        assert_eq!(herdr.inputs(&panes[0]).len(), 3);
        stop_fake(herdr, &dir).await;
    }
}
