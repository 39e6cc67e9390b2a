//! An agent as herdr reports it: its status (`agent_status` on the wire) and what the fake makes it
//! do when input is submitted while it is ready.

use super::*;

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

/// What an agent pane does when input is submitted to it while it is `idle` or `done`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InputReaction {
    /// Starts on the task: the status turns `working` (what a real agent does).
    #[default]
    StartWorking,
    /// Answers `ok` but nothing is submitted: the status stays put and the text is recorded as
    /// swallowed (herdr users see this on a fresh pane's first input, or text merged into a draft).
    StayIdle,
    /// Starts on the task and finishes it quickly: the status turns `working`, the next two status
    /// reads (`pane.get`, `agent.get`) report `working`, and reads after that report `idle` again;
    /// an `agent.wait` finds the brief finished at once — an agent that completes each brief by the
    /// time anyone waits for it, without a timer in the fake.
    WorksBriefly,
}
