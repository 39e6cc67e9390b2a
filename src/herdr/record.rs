//! What the fake records for tests to read back: every request with its response ([`Call`]), every
//! accepted `pane.send_input` with what became of it ([`InputRecord`]), and every pane created
//! over the wire with what its process was given ([`CreatedPane`]).

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::Value;

/// What became of one accepted `pane.send_input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputOutcome {
    /// Typed and submitted (the keys held `enter`) to a program in front: the pane's agent (what
    /// it did then is its [`InputReaction`](super::InputReaction)) or another program reading the
    /// terminal.
    Submitted,
    /// Answered `ok` but not submitted ([`Fault::SwallowInput`](super::Fault::SwallowInput) or
    /// [`InputReaction::StayIdle`](super::InputReaction::StayIdle)).
    Swallowed,
    /// Typed without `enter`: left in the prompt, not submitted.
    Typed,
    /// Submitted while a shell at its prompt had the terminal (a plain shell pane, a nested
    /// shell, or a pane whose agent had died: [`FakeHerdr::agent_exits`](super::FakeHerdr::agent_exits),
    /// [`Fault::AgentGone`](super::Fault::AgentGone)):
    /// the shell ran the text as a command line. Never an inject: no agent saw it. Also a line
    /// that waited [`InputOutcome::Unread`] and reached a shell at its prompt when the program
    /// in front ended — what real herdr v0.8.2 showed (`2026-12-04/e2e-replay-b.jsonl`, the
    /// `bash sleeper.sh` pane: `command not found` once `sleep` ended).
    RanInShell,
    /// Submitted while a program that never reads its terminal held it
    /// ([`FakeHerdr::run_job_ignoring_input`](super::FakeHerdr::run_job_ignoring_input)): the line
    /// waits in the terminal's input queue, for whatever reads the terminal next (the shell at its
    /// prompt once the program ends: then [`InputOutcome::RanInShell`]).
    Unread,
    /// A line that waited [`InputOutcome::Unread`] and was thrown away: ctrl+c or ctrl+z
    /// flushes the terminal's input queue.
    Flushed,
}

/// One accepted `pane.send_input`, as recorded for the pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRecord {
    /// The `text` param.
    pub text: String,
    /// The `keys` param.
    pub keys: Vec<String>,
    /// Whether it was submitted.
    pub outcome: InputOutcome,
    /// When the request line arrived.
    pub received_at: Instant,
}

/// One request received on the socket.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The request's `id` (`""` when it had none that parsed).
    pub id: String,
    /// The request's `method` (`""` when it had none that parsed).
    pub method: String,
    /// The request's `params` (`{}` when absent, `null` when the line was not a JSON object).
    pub params: Value,
    /// The request line as received, without its line ending.
    pub line: String,
    /// The response sent, or `None` while unanswered (hung, waiting, or abandoned by the client).
    pub response: Option<Value>,
    /// When the request line arrived.
    pub received_at: Instant,
    /// When the response was sent.
    pub answered_at: Option<Instant>,
}

impl Call {
    /// The `error.code` of the response, if it was an error.
    pub fn error_code(&self) -> Option<&str> {
        self.response.as_ref()?.get("error")?.get("code")?.as_str()
    }

    /// The `result.type` of the response, if it was a success.
    pub fn result_type(&self) -> Option<&str> {
        self.response.as_ref()?.get("result")?.get("type")?.as_str()
    }
}

/// Which request created a pane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreatedBy {
    /// The root pane of a `workspace.create`.
    WorkspaceCreate,
    /// The root pane of a `tab.create`.
    TabCreate,
}

/// A pane created over the wire, with what its process was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedPane {
    /// The new pane's id.
    pub pane_id: String,
    /// Its tab.
    pub tab_id: String,
    /// Its workspace.
    pub workspace_id: String,
    /// The request that created it.
    pub created_by: CreatedBy,
    /// The `label` param (the tab's or the workspace's label).
    pub label: Option<String>,
    /// The pane's working directory (the `cwd` param, else the fake's directory).
    pub cwd: String,
    /// The `focus` param.
    pub focus: bool,
    /// The `env` param as the caller sent it.
    pub caller_env: BTreeMap<String, String>,
    /// The env the pane's process got: the caller's plus herdr's `HERDR_*` variables, which win.
    pub env: BTreeMap<String, String>,
}
