//! A fake herdr: the terminal multiplexer a gateway under test drives, served on a unix socket.
//!
//! Why it exists: a Fleet gateway spawns, feeds, watches and stops AI agents through herdr's
//! socket API (`docs/HERDR.md`). A real herdr needs real agents and real terminals, and it
//! cannot be told to misbehave on cue. This fake speaks the same wire subset byte for byte
//! (newline-delimited JSON, one request per connection, herdr 0.8.2 / protocol 20), keeps a
//! small model of workspaces, tabs and panes, records every call it receives, and can be switched
//! into the failures herdr users actually hit ([`Fault`]): input answered `ok` but never
//! submitted, a status stuck on `working` or flapping, a call that never answers, a server that
//! is down. Tests drive the agents' statuses ([`FakeHerdr::set_status`]) and read back what the
//! gateway did ([`FakeHerdr::calls`], [`FakeHerdr::inputs`], [`FakeHerdr::created_panes`]).
//!
//! Wire behaviour, as herdr's server does it:
//! - the client connects and writes one line (at most [`MAX_LINE_BYTES`] before the newline);
//!   the server answers one line and closes. A second line on the same connection is never read.
//!   A connection that closes before its newline, sends an over-long line, invalid UTF-8 or a
//!   blank line is closed without an answer.
//! - unparseable JSON, a request without a string `id`/`method`, or an unknown method is answered
//!   `{"id":"","error":{"code":"invalid_request","message":"invalid request: …"}}` (herdr parses
//!   the whole request as one tagged enum, so the id is lost too).
//! - a request without `params` (or with `null`), and params that do not fit the method (a
//!   missing field, a wrong type, an `until` that names no status), are answered like any other
//!   request that does not parse: id `""`, code `invalid_request`, a message ending "at line 1
//!   column N" — real herdr v0.8.2 deserializes the whole request at once and never answered
//!   `invalid_params` when measured. `agent.wait` with `until: []` waits for idle, done or blocked.
//! - an unknown name in `pane.send_input` `keys` is refused with `invalid_key`; text holding a
//!   newline is submitted line by line, as a program reading lines sees it, enter key or not.
//!
//! Model choices (documented here because tests depend on them):
//! - ids are `wN`, `wN:tM`, `wN:pK`, counted per workspace and never reused. Closing a tab's
//!   last pane removes the tab; removing a workspace's last tab removes the workspace, after which
//!   `tab.create` fails with `workspace_not_found` again.
//! - statuses are reported as set: all panes are unfocused and `done` is whatever the test sets.
//! - a pane becomes an agent pane through [`FakeHerdr::add_agent_pane`],
//!   [`FakeHerdr::make_agent`], or [`FakeHerdr::set_status`] with a status other than `unknown`
//!   on a shell pane; in that last case the agent is named after the command last submitted into
//!   the pane (`claude --x` → `claude`, as herdr detects the foreground process), or `agent`.
//!   `set_status(.., Unknown)` means the agent left: the pane is a plain shell again.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

mod model;
mod server;
#[cfg(test)]
mod tests;
mod wire;

use model::*;
use server::*;
use wire::*;

/// The herdr version the fake claims in `pong`.
pub const HERDR_VERSION: &str = "0.8.2";
/// The socket protocol version the fake claims in `pong`.
pub const PROTOCOL_VERSION: u32 = 20;
/// Key names `pane.send_input` accepts (an unknown one is `invalid_key`, as in herdr).
pub const KEY_NAMES: &[&str] = &[
    "enter",
    "return",
    "tab",
    "backtab",
    "escape",
    "esc",
    "backspace",
    "delete",
    "space",
    "up",
    "down",
    "left",
    "right",
    "home",
    "end",
    "pageup",
    "pagedown",
    "insert",
    "ctrl-c",
    "ctrl-d",
    "ctrl-u",
    "ctrl-l",
    "c-c",
    "c-d",
    "c-u",
    "c-l",
];
/// Longest request line accepted, not counting its newline (herdr: 1 MiB).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// File name of the socket inside the directory given to [`FakeHerdr::start`].
pub const SOCKET_FILE_NAME: &str = "herdr.sock";
/// Value of `HERDR_BIN_PATH` in the env of panes the fake creates.
pub const HERDR_BIN_PATH: &str = "/usr/local/bin/herdr";
/// How long a connection may stay silent before its request line arrives (herdr: 5 s).
const INITIAL_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH_BYTES: usize = 107;
/// Where sockets go whose natural path is too long: short whatever `TMPDIR` says.
const SHORT_SOCKET_ROOT: &str = "/tmp";

/// A socket directory of our own under [`SHORT_SOCKET_ROOT`], in the cleanup registry (and
/// marked for later sweeps) so an interrupted run does not leave it behind.
struct ShortDir {
    path: PathBuf,
    _cleanup: crate::cleanup::Registration,
}

/// Where the socket of a fake serving `dir` goes: `<dir>/herdr.sock`, unless that path is longer
/// than a `sockaddr_un` takes (a long `TMPDIR`); then `/tmp/fleet-sock-<random>/herdr.sock`, a
/// fresh 0700 directory removed at shutdown. The gateway learns the path from
/// [`FakeHerdr::socket_path`] either way.
fn socket_path_for(dir: &Path) -> Result<(PathBuf, Option<ShortDir>), HerdrError> {
    let natural = dir.join(SOCKET_FILE_NAME);
    if natural.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
        return Ok((natural, None));
    }
    let short = Path::new(SHORT_SOCKET_ROOT).join(format!(
        "fleet-sock-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    let socket_path = short.join(SOCKET_FILE_NAME);
    let len = socket_path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(HerdrError::PathTooLong {
            path: natural,
            len,
            max: MAX_SOCKET_PATH_BYTES,
        });
    }
    let too_long = |source: io::Error| HerdrError::NoShortDir {
        path: natural.clone(),
        len: natural.as_os_str().len(),
        max: MAX_SOCKET_PATH_BYTES,
        short: short.clone(),
        source,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&short)
        .map_err(too_long)?;
    let cleanup = crate::cleanup::register(crate::cleanup::Action::RemoveDir(short.clone()));
    if let Err(e) = crate::cleanup::Marker::mine().removing_dir().write(&short, "herdr") {
        let _ = std::fs::remove_dir_all(&short);
        return Err(too_long(e));
    }
    tracing::debug!(natural = %natural.display(), socket = %socket_path.display(), "socket path too long: using a short dir");
    Ok((
        socket_path,
        Some(ShortDir {
            path: short,
            _cleanup: cleanup,
        }),
    ))
}
/// The methods the fake serves; anything else is an unknown variant to herdr.
const METHODS: &[&str] = &[
    "ping",
    "workspace.create",
    "tab.create",
    "pane.send_input",
    "pane.get",
    "pane.close",
    "agent.get",
    "agent.wait",
];

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

/// A misbehaviour switch; see [`FakeHerdr::set_fault`]. Several may be on at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `pane.send_input` answers `ok` but nothing is submitted: the status stays put and the text
    /// is recorded as swallowed ([`FakeHerdr::swallowed`]), not in [`FakeHerdr::inputs`].
    SwallowInput,
    /// Every agent pane reports `working`, whatever its status is (shell panes stay `unknown`).
    StuckWorking,
    /// Every read of an agent pane's status (`pane.get`, `agent.get`, each `agent.wait` check)
    /// alternates `idle`, `working`, `idle`, … starting with `idle` when the fault is switched on.
    /// `StuckWorking` wins over it.
    Flapping,
    /// Connections are accepted and the request line read (and recorded, with no response), but
    /// never answered; the connection stays open until the client closes it or the server stops.
    Hang,
    /// The server is down: the listener is closed and the socket file removed, so connecting
    /// fails; connections in flight are dropped. Switching it off binds the socket again.
    Refuse,
    /// `pane.send_input` on an existing pane fails with error `pane_send_failed`.
    SendInputFails,
    /// `workspace.create` and `tab.create` fail with `internal_error`: no pane can be opened
    /// (a launcher error, SPN-3's `spawn_failed`).
    CreateFails,
}

/// What became of one accepted `pane.send_input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputOutcome {
    /// Typed and submitted (the keys held `enter`).
    Submitted,
    /// Answered `ok` but not submitted ([`Fault::SwallowInput`] or [`InputReaction::StayIdle`]).
    Swallowed,
    /// Typed without `enter`: left in the prompt, not submitted.
    Typed,
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

/// Why the fake could not start or change state.
#[derive(Debug, thiserror::Error)]
pub enum HerdrError {
    /// [`FakeHerdr::start`] was called outside a tokio runtime.
    #[error("the fake herdr needs a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
    /// The socket path does not fit in a `sockaddr_un`.
    #[error("socket path {path} is {len} bytes; unix sockets take at most {max}")]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The socket path is too long and no short directory could be made for it instead.
    #[error(
        "socket path {path} is {len} bytes (unix sockets take at most {max}) and no short directory \
         {short} could be made instead: {source}; use a shorter TMPDIR"
    )]
    NoShortDir {
        /// The natural path, under the directory given.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
        /// The short directory tried.
        short: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another server answers on the socket path.
    #[error("another server is already listening on {0}")]
    InUse(PathBuf),
    /// The directory or a stale file at the socket path could not be handled.
    #[error("cannot prepare socket path {path}: {source}")]
    Prepare {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Binding the socket failed.
    #[error("cannot bind {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Setting the socket's mode to 0600 failed.
    #[error("cannot set mode 0600 on {path}: {source}")]
    Permissions {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The server was stopped; it cannot be brought back up.
    #[error("the fake herdr was stopped")]
    Stopped,
}

/// A running fake herdr. Cheap to clone; the server stops with [`FakeHerdr::stop`] or when the
/// last clone is dropped (the socket file is removed either way).
#[derive(Clone)]
pub struct FakeHerdr {
    shared: Arc<Shared>,
    _guard: Arc<Guard>,
}

impl std::fmt::Debug for FakeHerdr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeHerdr")
            .field("socket_path", &self.shared.socket_path)
            .finish()
    }
}

impl FakeHerdr {
    /// Binds `<dir>/herdr.sock` (mode 0600; `dir` is created if missing, a stale socket file
    /// replaced) and serves until dropped or stopped. Must be called inside a tokio runtime.
    /// When that path is too long for a unix socket (a long `TMPDIR`), the socket goes to a short
    /// directory of its own under `/tmp` instead: read the path from [`FakeHerdr::socket_path`].
    pub async fn start(dir: &Path) -> Result<FakeHerdr, HerdrError> {
        let runtime = tokio::runtime::Handle::try_current()?;
        std::fs::create_dir_all(dir).map_err(|source| HerdrError::Prepare {
            path: dir.to_path_buf(),
            source,
        })?;
        let (socket_path, short_dir) = socket_path_for(dir)?;
        match std::fs::symlink_metadata(&socket_path) {
            Ok(meta) if meta.file_type().is_socket() => {
                if std::os::unix::net::UnixStream::connect(&socket_path).is_ok() {
                    return Err(HerdrError::InUse(socket_path));
                }
                std::fs::remove_file(&socket_path).map_err(|source| HerdrError::Prepare {
                    path: socket_path.clone(),
                    source,
                })?;
            }
            Ok(_) => {
                return Err(HerdrError::Prepare {
                    path: socket_path,
                    source: io::Error::new(io::ErrorKind::AlreadyExists, "a non-socket file is in the way"),
                });
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(HerdrError::Prepare {
                    path: socket_path,
                    source,
                });
            }
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
            down: watch::Sender::new(0),
            default_cwd: dir.display().to_string(),
            socket_path,
            short_dir,
            runtime,
            accept: Mutex::new(None),
            stopped: AtomicBool::new(false),
        });
        shared.go_up()?;
        tracing::debug!(path = %shared.socket_path.display(), "fake herdr listening");
        Ok(FakeHerdr {
            _guard: Arc::new(Guard(Arc::clone(&shared))),
            shared,
        })
    }

    /// The socket's path (`<dir>/herdr.sock`, or the short one, see [`FakeHerdr::start`]), for
    /// `FLEET_HERDR_SOCKET` / `HERDR_SOCKET_PATH`.
    pub fn socket_path(&self) -> &Path {
        &self.shared.socket_path
    }

    /// Adds an agent pane (an agent already running) in a new tab of the first workspace,
    /// creating workspace `wN` first if none exists. Returns its pane id `wN:pK`.
    pub fn add_agent_pane(&self, agent: &str, status: AgentStatus) -> String {
        self.add_pane(Some(agent), status)
    }

    /// Adds a plain shell pane (no agent, `agent_status: "unknown"`) like
    /// [`FakeHerdr::add_agent_pane`] does. Returns its pane id.
    pub fn add_shell_pane(&self) -> String {
        self.add_pane(None, AgentStatus::Unknown)
    }

    fn add_pane(&self, agent: Option<&str>, status: AgentStatus) -> String {
        let mut state = self.shared.state();
        let ws = match state.workspaces.first() {
            Some(ws) => ws.id.clone(),
            None => state.create_workspace(None),
        };
        let (_, pane_id) = state.create_tab(&ws, None, self.shared.default_cwd.clone());
        if let Some(pane) = state.pane_mut(&pane_id) {
            pane.agent = agent.map(str::to_string);
            pane.status = status;
        }
        drop(state);
        self.shared.bump();
        pane_id
    }

    /// Makes `pane_id` an agent pane running `agent` in `status` (e.g. after the gateway typed
    /// the agent's command into a pane it created). Ignored, with a warning, for an unknown pane.
    pub fn make_agent(&self, pane_id: &str, agent: &str, status: AgentStatus) {
        self.update_pane(pane_id, |pane, _| {
            pane.agent = Some(agent.to_string());
            pane.status = status;
        });
    }

    /// Sets a pane's status and wakes `agent.wait` callers. On a shell pane a status other than
    /// `unknown` makes it an agent pane (named after the command last submitted into it, else
    /// `agent`); `Unknown` makes any pane a shell pane again. Ignored, with a warning, for an
    /// unknown pane.
    pub fn set_status(&self, pane_id: &str, status: AgentStatus) {
        self.update_pane(pane_id, |pane, inputs| {
            if status == AgentStatus::Unknown {
                pane.agent = None;
            } else if pane.agent.is_none() {
                pane.agent = Some(agent_name_from_inputs(inputs));
            }
            pane.status = status;
        });
    }

    fn update_pane(&self, pane_id: &str, change: impl FnOnce(&mut Pane, &[InputRecord])) {
        let mut state = self.shared.state();
        let State { panes, .. } = &mut *state;
        match panes.iter_mut().find(|p| p.id == pane_id) {
            Some(pane) => {
                let inputs = std::mem::take(&mut pane.inputs);
                change(pane, &inputs);
                pane.inputs = inputs;
                pane.revision += 1;
            }
            None => {
                tracing::warn!(pane_id, "fake herdr: no such pane; change ignored");
                return;
            }
        }
        drop(state);
        self.shared.bump();
    }

    /// A pane's true status (what was set or what input caused), ignoring faults; `None` when the
    /// pane does not exist (never did, or closed).
    pub fn status(&self, pane_id: &str) -> Option<AgentStatus> {
        self.shared.state().pane(pane_id).map(|p| p.status)
    }

    /// The agent running in a pane, if it is an agent pane.
    pub fn agent(&self, pane_id: &str) -> Option<String> {
        self.shared.state().pane(pane_id).and_then(|p| p.agent.clone())
    }

    /// Closes a pane under the gateway's feet: later calls on it get `pane_not_found`
    /// (`agent_not_found` for `agent.*`, including an `agent.wait` in progress).
    pub fn close_pane(&self, pane_id: &str) {
        let closed = self.shared.state().remove_pane(pane_id);
        if closed {
            self.shared.bump();
        } else {
            tracing::warn!(pane_id, "fake herdr: no such pane to close");
        }
    }

    /// Whether the pane exists (created and not closed).
    pub fn pane_exists(&self, pane_id: &str) -> bool {
        self.shared.state().pane(pane_id).is_some()
    }

    /// Ids of the existing panes, in creation order.
    pub fn pane_ids(&self) -> Vec<String> {
        self.shared.state().panes.iter().map(|p| p.id.clone()).collect()
    }

    /// Every request received, in arrival order, with the response sent (if any yet).
    pub fn calls(&self) -> Vec<Call> {
        self.shared.state().calls.clone()
    }

    /// The calls of one method, in arrival order.
    pub fn calls_of(&self, method: &str) -> Vec<Call> {
        self.shared
            .state()
            .calls
            .iter()
            .filter(|c| c.method == method)
            .cloned()
            .collect()
    }

    /// Texts of `pane.send_input` calls submitted into the pane (answered `ok` with `enter` and
    /// neither swallowed nor failed), in order. Kept after the pane closes.
    pub fn inputs(&self, pane_id: &str) -> Vec<String> {
        self.inputs_with(pane_id, |r| r.outcome == InputOutcome::Submitted)
    }

    /// Texts of `pane.send_input` calls answered `ok` but swallowed (not submitted), in order.
    pub fn swallowed(&self, pane_id: &str) -> Vec<String> {
        self.inputs_with(pane_id, |r| r.outcome == InputOutcome::Swallowed)
    }

    fn inputs_with(&self, pane_id: &str, keep: impl Fn(&InputRecord) -> bool) -> Vec<String> {
        self.input_log(pane_id)
            .into_iter()
            .filter(|r| keep(r))
            .map(|r| r.text)
            .collect()
    }

    /// Every `pane.send_input` answered `ok` for the pane, whatever became of it, in order.
    pub fn input_log(&self, pane_id: &str) -> Vec<InputRecord> {
        let state = self.shared.state();
        match state.pane(pane_id) {
            Some(p) => p.inputs.clone(),
            None => state.closed_inputs.get(pane_id).cloned().unwrap_or_default(),
        }
    }

    /// Panes created by `workspace.create` / `tab.create`, in order, with their env, label and cwd.
    pub fn created_panes(&self) -> Vec<CreatedPane> {
        self.shared.state().created.clone()
    }

    /// Switches a fault on or off. Bringing the server back up after [`Fault::Refuse`] binds the
    /// socket again; should that fail, the error is logged (use [`FakeHerdr::try_set_fault`] to
    /// see it).
    pub fn set_fault(&self, fault: Fault, on: bool) {
        if let Err(e) = self.try_set_fault(fault, on) {
            tracing::error!(?fault, on, error = %e, "fake herdr: cannot switch fault");
        }
    }

    /// [`FakeHerdr::set_fault`], reporting a failure to bind the socket again.
    pub fn try_set_fault(&self, fault: Fault, on: bool) -> Result<(), HerdrError> {
        {
            let mut state = self.shared.state();
            if on {
                let fresh = state.faults.insert(fault);
                if fresh && fault == Fault::Flapping {
                    for pane in &mut state.panes {
                        pane.flap_working = false;
                    }
                }
            } else {
                state.faults.remove(&fault);
            }
        }
        self.shared.bump();
        match (fault, on) {
            (Fault::Refuse, true) => {
                self.shared.go_down();
                Ok(())
            }
            (Fault::Refuse, false) => self.shared.go_up(),
            _ => Ok(()),
        }
    }

    /// Whether a fault is on.
    pub fn fault(&self, fault: Fault) -> bool {
        self.shared.fault(fault)
    }

    /// Sets what the agent in `pane_id` does when input is submitted while it is idle/done
    /// (default [`InputReaction::StartWorking`]). Ignored, with a warning, for an unknown pane.
    pub fn set_on_input(&self, pane_id: &str, reaction: InputReaction) {
        let mut state = self.shared.state();
        match state.pane_mut(pane_id) {
            Some(pane) => pane.reaction = reaction,
            None => tracing::warn!(pane_id, "fake herdr: no such pane; reaction ignored"),
        }
    }

    /// Stops serving: closes the listener, drops open connections, removes the socket file.
    pub async fn stop(self) {
        if let Some(accept) = self.shared.shutdown() {
            // The task was aborted; awaiting it makes sure the listener is closed on return.
            let _ = accept.await;
        }
    }
}

/// Stops the server when the last [`FakeHerdr`] clone goes away.
struct Guard(Arc<Shared>);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.shutdown();
    }
}

#[cfg(test)]
mod socket_path_tests {
    use super::*;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn a_dir_too_deep_for_a_unix_socket_gets_a_short_socket_dir_removed_at_stop() {
        let root = std::env::temp_dir().join(format!("fleet-herdr-long-{}", uuid::Uuid::new_v4().simple()));
        let dir = root.join("x".repeat(120));
        let herdr = FakeHerdr::start(&dir).await.expect("starts despite the long dir");
        let socket = herdr.socket_path().to_path_buf();
        assert!(
            socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES,
            "{}",
            socket.display()
        );
        assert!(socket.starts_with(SHORT_SOCKET_ROOT), "{}", socket.display());
        let short = socket.parent().expect("a dir").to_path_buf();
        let mut conn = tokio::net::UnixStream::connect(&socket).await.expect("connects");
        conn.write_all(b"{\"id\":\"1\",\"method\":\"ping\",\"params\":{}}\n")
            .await
            .expect("writes");
        let mut line = String::new();
        BufReader::new(conn).read_line(&mut line).await.expect("answers");
        assert!(line.contains("pong"), "{line}");
        herdr.stop().await;
        assert!(!short.exists(), "the short dir goes at stop");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_short_enough_dir_keeps_its_socket() {
        let dir = std::env::temp_dir().join(format!("fleet-herdr-short-{}", uuid::Uuid::new_v4().simple()));
        let herdr = FakeHerdr::start(&dir).await.expect("starts");
        assert_eq!(herdr.socket_path(), dir.join(SOCKET_FILE_NAME));
        herdr.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
