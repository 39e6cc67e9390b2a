//! An agent as herdr reports it: its status (`agent_status` on the wire) and what the fake makes it
//! do when input is submitted while it is ready.

use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An agent's status as herdr reports it in `agent_status` (snake_case on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentStatus {
    /// Waiting for input, looked at.
    Idle,
    /// Busy on a task.
    Working,
    /// Waiting for the user (a permission prompt, a question).
    Blocked,
    /// Finished and not yet looked at (herdr derives it from idle + unfocused).
    Done,
    /// No agent detected: a plain shell pane.
    Unknown,
}

impl AgentStatus {
    /// The wire spelling: `idle`, `working`, `blocked`, `done`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Idle => "idle",
            AgentStatus::Working => "working",
            AgentStatus::Blocked => "blocked",
            AgentStatus::Done => "done",
            AgentStatus::Unknown => "unknown",
        }
    }

    /// Whether an agent in this status takes new input as a new task (`idle` or `done`).
    pub fn is_ready(self) -> bool {
        matches!(self, AgentStatus::Idle | AgentStatus::Done)
    }
}

impl std::fmt::Display for AgentStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A string that is not one of herdr's agent statuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown agent status {0:?} (expected idle, working, blocked, done or unknown)")]
pub struct ParseAgentStatusError(pub String);

impl FromStr for AgentStatus {
    type Err = ParseAgentStatusError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "idle" => Ok(AgentStatus::Idle),
            "working" => Ok(AgentStatus::Working),
            "blocked" => Ok(AgentStatus::Blocked),
            "done" => Ok(AgentStatus::Done),
            "unknown" => Ok(AgentStatus::Unknown),
            other => Err(ParseAgentStatusError(other.to_string())),
        }
    }
}

/// Agent names herdr v0.8.2 recognises by the foreground process's name. Only `claude` was
/// measured (`fixtures/herdr-0.8.2/agent-exit-detection.jsonl`: a copy of `sleep` named `claude`
/// is shown as agent `claude`, and its exit turns the pane `unknown`); the others are the coding
/// agents herdr documents integrations for, chosen here, not measured. A name is compared whole
/// (`claude-main` is not `claude`).
pub const RECOGNISED_AGENTS: &[&str] = &["claude", "codex", "gemini", "opencode", "amp", "cursor-agent", "droid"];

/// Whether herdr recognises a process of this name as an agent ([`RECOGNISED_AGENTS`]).
pub fn is_recognised_agent(name: &str) -> bool {
    RECOGNISED_AGENTS.contains(&name)
}

/// What the agent program in a pane does when it reads a submitted line while it is `idle` or
/// `done`. Typing never changes herdr's status by itself: only the agent's own report does
/// (`pane.report_agent`), as real herdr v0.8.2 showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputReaction {
    /// Reads the line and reports `working` at once — what the recorded stand-in agent
    /// (`fake-agent.py`) and a real agent's hooks do. It never reports `idle` by itself: tests
    /// drive that ([`FakeHerdr::set_status`](super::FakeHerdr::set_status)).
    #[default]
    StartWorking,
    /// Answers `ok` but nothing is submitted: the status stays put and the text is recorded as
    /// swallowed (herdr users see this on a fresh pane's first input, or text merged into a draft).
    StayIdle,
    /// Reports `working` on reading the line and finishes quickly: the next two status reads
    /// (`pane.get`, `agent.get`) report `working`, and reads after that report `idle` again
    /// (`done` in an unfocused pane); an `agent.wait` finds the brief finished at once — an agent
    /// that completes each brief by the time anyone waits for it, without a timer in the fake.
    WorksBriefly,
    /// Reads the line (it is recorded as submitted) but never reports: herdr keeps showing
    /// `idle`/`done`, so a gateway's submit check (FWD-7) must end `not_submitted`.
    NeverReports,
}
