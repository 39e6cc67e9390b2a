//! A fake herdr: the terminal multiplexer a gateway under test drives, served on a unix socket.
//!
//! Why it exists: a Fleet gateway spawns, feeds, watches and stops AI agents through herdr's
//! socket API (`/work/shared/HERDR.md`). A real herdr needs real agents and real terminals, and it
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

use std::collections::{BTreeMap, HashSet};
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[cfg(test)]
mod tests;

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
    /// reads report `working`, and reads after that report `idle` again — an agent that completes
    /// each brief, without a timer in the fake.
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

/// State shared by the handles, the accept loop and the connections.
struct Shared {
    state: Mutex<State>,
    /// Bumped on every change an `agent.wait` may care about.
    changed: watch::Sender<u64>,
    /// Bumped when the server goes down; open connections drop.
    down: watch::Sender<u64>,
    socket_path: PathBuf,
    /// The short directory holding the socket when `<dir>/herdr.sock` was too long (see
    /// [`socket_path_for`]); removed at shutdown.
    short_dir: Option<ShortDir>,
    default_cwd: String,
    runtime: tokio::runtime::Handle,
    accept: Mutex<Option<JoinHandle<()>>>,
    stopped: AtomicBool,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fault(&self, fault: Fault) -> bool {
        self.state().faults.contains(&fault)
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn accept_slot(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.accept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Binds the socket and starts accepting, unless already up or stopped.
    fn go_up(self: &Arc<Self>) -> Result<(), HerdrError> {
        let mut slot = self.accept_slot();
        if self.stopped.load(Ordering::SeqCst) {
            return Err(HerdrError::Stopped);
        }
        if slot.is_some() {
            return Ok(());
        }
        let path = &self.socket_path;
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(HerdrError::Prepare {
                    path: path.clone(),
                    source: e,
                });
            }
            _ => {}
        }
        let listener = {
            let _entered = self.runtime.enter();
            UnixListener::bind(path).map_err(|source| HerdrError::Bind {
                path: path.clone(),
                source,
            })?
        };
        if let Err(source) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
            drop(listener);
            let _ = std::fs::remove_file(path);
            return Err(HerdrError::Permissions {
                path: path.clone(),
                source,
            });
        }
        *slot = Some(self.runtime.spawn(accept_loop(Arc::clone(self), listener)));
        Ok(())
    }

    /// Stops accepting, removes the socket file and drops open connections.
    fn go_down(&self) -> Option<JoinHandle<()>> {
        let accept = self.accept_slot().take();
        if let Some(task) = &accept {
            task.abort();
        }
        if let Err(e) = std::fs::remove_file(&self.socket_path)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.socket_path.display(), error = %e, "cannot remove socket");
        }
        self.down.send_modify(|n| *n = n.wrapping_add(1));
        accept
    }

    fn shutdown(&self) -> Option<JoinHandle<()>> {
        {
            let _slot = self.accept_slot();
            if self.stopped.swap(true, Ordering::SeqCst) {
                return None;
            }
        }
        let accept = self.go_down();
        if let Some(short) = &self.short_dir {
            let _ = std::fs::remove_dir_all(&short.path);
        }
        accept
    }

    /// Records an arriving request; the arrival time is taken under the lock so that the
    /// record's order and its times agree. Returns the record's index and the arrival time.
    fn record_call(&self, head: CallHead, line: &str) -> (usize, Instant) {
        let mut state = self.state();
        let received_at = Instant::now();
        state.calls.push(Call {
            id: head.id,
            method: head.method,
            params: head.params,
            line: line.to_string(),
            response: None,
            received_at,
            answered_at: None,
        });
        (state.calls.len() - 1, received_at)
    }

    fn record_response(&self, index: usize, response: Value) {
        if let Some(call) = self.state().calls.get_mut(index) {
            call.response = Some(response);
            call.answered_at = Some(Instant::now());
        }
    }

    fn dispatch(&self, request: Request, received_at: Instant) -> Outcome {
        let Request { id, method, params } = request;
        let result = match method.as_str() {
            "ping" => Ok(ResultBody::Pong {
                version: HERDR_VERSION,
                protocol: PROTOCOL_VERSION,
                capabilities: Capabilities {
                    live_handoff: true,
                    detached_server_daemon: true,
                },
            }),
            "workspace.create" => parse_params(params).and_then(|p| self.workspace_create(p)),
            "tab.create" => parse_params(params).and_then(|p| self.tab_create(p)),
            "pane.send_input" => parse_params(params).and_then(|p| self.send_input(p, received_at)),
            "pane.get" => parse_params(params).and_then(|p: PaneTarget| self.pane_get(&p.pane_id)),
            "pane.close" => parse_params(params).and_then(|p: PaneTarget| self.pane_close(&p.pane_id)),
            "agent.get" => parse_params(params)
                .and_then(|p: AgentTarget| self.probe_agent(&p.target).map(|agent| ResultBody::AgentInfo { agent })),
            "agent.wait" => match parse_params::<AgentWaitParams>(params) {
                Ok(mut p) => {
                    if p.until.is_empty() {
                        // herdr's default for an empty list.
                        p.until = vec![AgentStatus::Idle, AgentStatus::Done, AgentStatus::Blocked];
                    }
                    let deadline = p
                        .timeout_ms
                        .map(|ms| tokio::time::Instant::from_std(received_at) + Duration::from_millis(ms));
                    return Outcome::Wait(WaitSpec {
                        id,
                        target: p.target,
                        until: p.until,
                        deadline,
                        timeout_ms: p.timeout_ms,
                    });
                }
                Err(e) => Err(e),
            },
            other => Err(WireError::new("invalid_request", unknown_method_message(other))),
        };
        Outcome::Reply(Box::new(match result {
            Ok(body) => Envelope::ok(id, body),
            // A request that did not parse has no id for herdr (see the module doc).
            Err(e) if e.code == "invalid_request" => Envelope::error(String::new(), e),
            Err(e) => Envelope::error(id, e),
        }))
    }

    fn workspace_create(&self, p: CreateParams) -> Result<ResultBody, WireError> {
        validate_env(&p.env)?;
        self.refuse_create()?;
        let cwd = p.cwd.clone().unwrap_or_else(|| self.default_cwd.clone());
        let mut state = self.state();
        let ws = state.create_workspace(p.label.clone());
        let (tab_id, pane_id) = state.create_tab(&ws, None, cwd.clone());
        state.record_created(
            &self.socket_path,
            CreatedBy::WorkspaceCreate,
            &p,
            &ws,
            &tab_id,
            &pane_id,
            cwd,
        );
        let body = ResultBody::WorkspaceCreated {
            workspace: state.workspace_wire(&ws),
            tab: state.tab_wire(&tab_id),
            root_pane: state.pane_wire(&pane_id).ok_or_else(internal_error)?,
        };
        drop(state);
        self.bump();
        Ok(body)
    }

    fn tab_create(&self, p: CreateParams) -> Result<ResultBody, WireError> {
        self.refuse_create()?;
        let mut state = self.state();
        let ws = match &p.workspace_id {
            Some(id) => state.workspaces.iter().find(|w| &w.id == id).map(|w| w.id.clone()),
            None => state.workspaces.first().map(|w| w.id.clone()),
        };
        let Some(ws) = ws else {
            let message = match &p.workspace_id {
                Some(id) => format!("workspace {id} not found"),
                None => "no workspace to create the tab in".to_string(),
            };
            return Err(WireError::new("workspace_not_found", message));
        };
        validate_env(&p.env)?;
        let cwd = p.cwd.clone().unwrap_or_else(|| self.default_cwd.clone());
        let (tab_id, pane_id) = state.create_tab(&ws, p.label.clone(), cwd.clone());
        state.record_created(&self.socket_path, CreatedBy::TabCreate, &p, &ws, &tab_id, &pane_id, cwd);
        let body = ResultBody::TabCreated {
            tab: state.tab_wire(&tab_id),
            root_pane: state.pane_wire(&pane_id).ok_or_else(internal_error)?,
        };
        drop(state);
        self.bump();
        Ok(body)
    }

    fn send_input(&self, p: SendInputParams, received_at: Instant) -> Result<ResultBody, WireError> {
        let mut state = self.state();
        let swallow = state.faults.contains(&Fault::SwallowInput);
        let fail = state.faults.contains(&Fault::SendInputFails);
        let pane = state.pane_mut(&p.pane_id).ok_or_else(|| pane_not_found(&p.pane_id))?;
        if fail {
            return Err(WireError::new(
                "pane_send_failed",
                format!("failed to send input to pane {}", p.pane_id),
            ));
        }
        if let Some(k) = p
            .keys
            .iter()
            .find(|k| !KEY_NAMES.contains(&k.to_ascii_lowercase().as_str()))
        {
            return Err(WireError::new("invalid_key", format!("unsupported key {k:?}")));
        }
        // A newline in the text submits too: a program that reads lines sees each line.
        let enter = p.keys.iter().any(|k| k.eq_ignore_ascii_case("enter")) || p.text.contains(['\n', '\r']);
        let ready_agent = pane.agent.is_some() && pane.status.is_ready();
        let outcome = if !enter {
            InputOutcome::Typed
        } else if swallow || (ready_agent && pane.reaction == InputReaction::StayIdle) {
            InputOutcome::Swallowed
        } else {
            InputOutcome::Submitted
        };
        let starts_working = outcome == InputOutcome::Submitted && ready_agent;
        if starts_working {
            pane.status = AgentStatus::Working;
            pane.revision += 1;
            if pane.reaction == InputReaction::WorksBriefly {
                // Two reads of `working` (the gateway's submit check, a heartbeat's status read),
                // then `idle`.
                pane.finish_after_reads = Some(2);
            }
        }
        pane.inputs.push(InputRecord {
            text: p.text,
            keys: p.keys,
            outcome,
            received_at,
        });
        drop(state);
        if starts_working {
            self.bump();
        }
        Ok(ResultBody::Ok {})
    }

    /// [`Fault::CreateFails`]: the answer herdr gives when it cannot open a terminal.
    fn refuse_create(&self) -> Result<(), WireError> {
        if self.state().faults.contains(&Fault::CreateFails) {
            return Err(WireError::new("internal_error", "failed to spawn the pane's terminal"));
        }
        Ok(())
    }

    fn pane_get(&self, pane_id: &str) -> Result<ResultBody, WireError> {
        let mut state = self.state();
        let pane = state.pane_wire(pane_id).ok_or_else(|| pane_not_found(pane_id))?;
        Ok(ResultBody::PaneInfo { pane })
    }

    fn pane_close(&self, pane_id: &str) -> Result<ResultBody, WireError> {
        if !self.state().remove_pane(pane_id) {
            return Err(pane_not_found(pane_id));
        }
        self.bump();
        Ok(ResultBody::Ok {})
    }

    /// One read of an agent, as `agent.get` answers it.
    fn probe_agent(&self, target: &str) -> Result<AgentWire, WireError> {
        let mut state = self.state();
        let faults = state.faults.clone();
        let agent_not_found = || WireError::new("agent_not_found", format!("agent target {target} not found"));
        let pane = state.pane_mut(target).ok_or_else(agent_not_found)?;
        let agent = pane.agent.clone().ok_or_else(agent_not_found)?;
        let agent_status = pane.reported_status(&faults);
        Ok(AgentWire {
            pane_id: pane.id.clone(),
            terminal_id: pane.terminal_id.clone(),
            workspace_id: pane.workspace_id.clone(),
            tab_id: pane.tab_id.clone(),
            agent,
            agent_status,
            focused: false,
            cwd: pane.cwd.clone(),
            revision: pane.revision,
        })
    }

    /// `agent.wait`: answers as soon as the status is in `until`, re-checking on every change.
    async fn wait_agent(&self, spec: WaitSpec) -> Envelope {
        let mut changes = self.changed.subscribe();
        loop {
            changes.borrow_and_update();
            match self.probe_agent(&spec.target) {
                Err(e) => return Envelope::error(spec.id, e),
                Ok(agent) if spec.until.contains(&agent.agent_status) => {
                    return Envelope::ok(spec.id, ResultBody::AgentInfo { agent });
                }
                Ok(_) => {}
            }
            let timed_out = async {
                match spec.deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = changes.changed() => {
                    if changed.is_err() {
                        return Envelope::error(spec.id, internal_error());
                    }
                }
                () = timed_out => {
                    let until: Vec<&str> = spec.until.iter().map(|s| s.as_str()).collect();
                    let message = format!(
                        "timed out after {} ms waiting for agent {} to be {}",
                        spec.timeout_ms.unwrap_or_default(),
                        spec.target,
                        until.join("|"),
                    );
                    return Envelope::error(spec.id, WireError::new("timeout", message));
                }
            }
        }
    }
}

/// The model: workspaces, tabs, panes, and what was recorded.
#[derive(Default)]
struct State {
    next_workspace: u64,
    workspaces: Vec<Workspace>,
    tabs: Vec<Tab>,
    panes: Vec<Pane>,
    calls: Vec<Call>,
    created: Vec<CreatedPane>,
    closed_inputs: BTreeMap<String, Vec<InputRecord>>,
    faults: HashSet<Fault>,
}

struct Workspace {
    id: String,
    label: Option<String>,
    next_tab: u64,
    next_pane: u64,
}

struct Tab {
    id: String,
    workspace_id: String,
    label: Option<String>,
}

struct Pane {
    id: String,
    terminal_id: String,
    workspace_id: String,
    tab_id: String,
    cwd: String,
    agent: Option<String>,
    status: AgentStatus,
    revision: u64,
    reaction: InputReaction,
    /// Next status a flapping read reports: `working` when true, else `idle`.
    flap_working: bool,
    /// [`InputReaction::WorksBriefly`]: reads left before the agent is `idle` again.
    finish_after_reads: Option<u32>,
    inputs: Vec<InputRecord>,
}

impl Pane {
    /// The status a wire read reports, faults applied (a flapping read flips the next one).
    fn reported_status(&mut self, faults: &HashSet<Fault>) -> AgentStatus {
        if self.agent.is_none() {
            return AgentStatus::Unknown;
        }
        if let Some(left) = self.finish_after_reads {
            if left == 0 {
                self.status = AgentStatus::Idle;
                self.finish_after_reads = None;
                self.revision += 1;
            } else {
                self.finish_after_reads = Some(left - 1);
            }
        }
        if faults.contains(&Fault::StuckWorking) {
            return AgentStatus::Working;
        }
        if faults.contains(&Fault::Flapping) {
            let status = if self.flap_working {
                AgentStatus::Working
            } else {
                AgentStatus::Idle
            };
            self.flap_working = !self.flap_working;
            return status;
        }
        self.status
    }

    /// The status for aggregates (tab, workspace): faults applied, no flap consumed.
    fn shown_status(&self, faults: &HashSet<Fault>) -> AgentStatus {
        match (&self.agent, faults.contains(&Fault::StuckWorking)) {
            (None, _) => AgentStatus::Unknown,
            (Some(_), true) => AgentStatus::Working,
            (Some(_), false) => self.status,
        }
    }
}

impl State {
    fn pane(&self, id: &str) -> Option<&Pane> {
        self.panes.iter().find(|p| p.id == id)
    }

    fn pane_mut(&mut self, id: &str) -> Option<&mut Pane> {
        self.panes.iter_mut().find(|p| p.id == id)
    }

    fn create_workspace(&mut self, label: Option<String>) -> String {
        self.next_workspace += 1;
        let id = format!("w{}", self.next_workspace);
        self.workspaces.push(Workspace {
            id: id.clone(),
            label,
            next_tab: 0,
            next_pane: 0,
        });
        id
    }

    /// A new tab in workspace `ws` with one shell pane; returns (tab id, pane id).
    fn create_tab(&mut self, ws: &str, label: Option<String>, cwd: String) -> (String, String) {
        let (tab_id, pane_id) = match self.workspaces.iter_mut().find(|w| w.id == ws) {
            Some(w) => {
                w.next_tab += 1;
                w.next_pane += 1;
                (format!("{ws}:t{}", w.next_tab), format!("{ws}:p{}", w.next_pane))
            }
            // Callers pass an existing workspace; keep ids well-formed regardless.
            None => (format!("{ws}:t0"), format!("{ws}:p0")),
        };
        self.tabs.push(Tab {
            id: tab_id.clone(),
            workspace_id: ws.to_string(),
            label,
        });
        let hex = uuid::Uuid::new_v4().simple().to_string();
        self.panes.push(Pane {
            id: pane_id.clone(),
            terminal_id: format!("term_{}", &hex[..14]),
            workspace_id: ws.to_string(),
            tab_id: tab_id.clone(),
            cwd,
            agent: None,
            status: AgentStatus::Unknown,
            revision: 0,
            reaction: InputReaction::default(),
            flap_working: false,
            finish_after_reads: None,
            inputs: Vec::new(),
        });
        (tab_id, pane_id)
    }

    /// Removes a pane, then its tab if empty, then its workspace if empty. False if no such pane.
    fn remove_pane(&mut self, id: &str) -> bool {
        let Some(index) = self.panes.iter().position(|p| p.id == id) else {
            return false;
        };
        let pane = self.panes.remove(index);
        if !self.panes.iter().any(|p| p.tab_id == pane.tab_id) {
            self.tabs.retain(|t| t.id != pane.tab_id);
            if !self.tabs.iter().any(|t| t.workspace_id == pane.workspace_id) {
                self.workspaces.retain(|w| w.id != pane.workspace_id);
            }
        }
        self.closed_inputs.insert(pane.id, pane.inputs);
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn record_created(
        &mut self,
        socket_path: &Path,
        created_by: CreatedBy,
        p: &CreateParams,
        ws: &str,
        tab_id: &str,
        pane_id: &str,
        cwd: String,
    ) {
        let mut env = p.env.clone();
        for (key, value) in [
            ("HERDR_ENV", "1".to_string()),
            ("HERDR_PANE_ID", pane_id.to_string()),
            ("HERDR_TAB_ID", tab_id.to_string()),
            ("HERDR_WORKSPACE_ID", ws.to_string()),
            ("HERDR_SOCKET_PATH", socket_path.display().to_string()),
            ("HERDR_BIN_PATH", HERDR_BIN_PATH.to_string()),
        ] {
            env.insert(key.to_string(), value);
        }
        self.created.push(CreatedPane {
            pane_id: pane_id.to_string(),
            tab_id: tab_id.to_string(),
            workspace_id: ws.to_string(),
            created_by,
            label: p.label.clone(),
            cwd,
            focus: p.focus,
            caller_env: p.env.clone(),
            env,
        });
    }

    fn pane_wire(&mut self, id: &str) -> Option<PaneWire> {
        let faults = self.faults.clone();
        let pane = self.pane_mut(id)?;
        Some(PaneWire {
            pane_id: pane.id.clone(),
            terminal_id: pane.terminal_id.clone(),
            workspace_id: pane.workspace_id.clone(),
            tab_id: pane.tab_id.clone(),
            focused: false,
            cwd: pane.cwd.clone(),
            foreground_cwd: pane.cwd.clone(),
            agent: pane.agent.clone(),
            agent_status: pane.reported_status(&faults),
            scroll: Scroll {
                offset_from_bottom: 0,
                max_offset_from_bottom: 0,
                viewport_rows: 39,
            },
            revision: pane.revision,
        })
    }

    fn tab_wire(&self, id: &str) -> TabWire {
        let tab = self.tabs.iter().find(|t| t.id == id);
        let workspace_id = tab.map(|t| t.workspace_id.clone()).unwrap_or_default();
        let number = self
            .tabs
            .iter()
            .filter(|t| t.workspace_id == workspace_id)
            .position(|t| t.id == id)
            .map_or(0, |i| i + 1);
        let statuses: Vec<AgentStatus> = self
            .panes
            .iter()
            .filter(|p| p.tab_id == id)
            .map(|p| p.shown_status(&self.faults))
            .collect();
        TabWire {
            tab_id: id.to_string(),
            workspace_id,
            number,
            label: tab.and_then(|t| t.label.clone()),
            focused: false,
            pane_count: statuses.len(),
            agent_status: aggregate(&statuses),
        }
    }

    fn workspace_wire(&self, id: &str) -> WorkspaceWire {
        let ws = self.workspaces.iter().find(|w| w.id == id);
        let number = self.workspaces.iter().position(|w| w.id == id).map_or(0, |i| i + 1);
        let tabs: Vec<&Tab> = self.tabs.iter().filter(|t| t.workspace_id == id).collect();
        let statuses: Vec<AgentStatus> = self
            .panes
            .iter()
            .filter(|p| p.workspace_id == id)
            .map(|p| p.shown_status(&self.faults))
            .collect();
        WorkspaceWire {
            workspace_id: id.to_string(),
            number,
            label: ws.and_then(|w| w.label.clone()),
            focused: false,
            pane_count: statuses.len(),
            tab_count: tabs.len(),
            active_tab_id: tabs.first().map(|t| t.id.clone()),
            agent_status: aggregate(&statuses),
        }
    }
}

/// The status a tab or workspace shows for its panes: the most urgent one.
fn aggregate(statuses: &[AgentStatus]) -> AgentStatus {
    [
        AgentStatus::Blocked,
        AgentStatus::Working,
        AgentStatus::Done,
        AgentStatus::Idle,
    ]
    .into_iter()
    .find(|s| statuses.contains(s))
    .unwrap_or(AgentStatus::Unknown)
}

/// The agent's name as herdr would detect it from the command last submitted into the pane.
fn agent_name_from_inputs(inputs: &[InputRecord]) -> String {
    inputs
        .iter()
        .rev()
        .filter(|r| r.outcome == InputOutcome::Submitted)
        .find_map(|r| r.text.split_whitespace().find(|word| !word.contains('=')))
        .map(|program| program.rsplit('/').next().unwrap_or(program).to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "agent".to_string())
}

fn validate_env(env: &BTreeMap<String, String>) -> Result<(), WireError> {
    match env.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
        Some(key) => Err(WireError::new(
            "invalid_env",
            format!("invalid env key {key:?}: keys must be non-empty and hold no '=' or NUL"),
        )),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------------------------
// Wire types.

/// A parsed request line.
struct Request {
    id: String,
    method: String,
    params: Value,
}

/// What is recorded of a request line, however much of it parsed.
struct CallHead {
    id: String,
    method: String,
    params: Value,
}

#[derive(Deserialize)]
struct CreateParams {
    #[serde(default)]
    workspace_id: Option<String>,
    #[serde(default)]
    cwd: Option<String>,
    #[serde(default)]
    focus: bool,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct PaneTarget {
    pane_id: String,
}

#[derive(Deserialize)]
struct AgentTarget {
    target: String,
}

#[derive(Deserialize)]
struct SendInputParams {
    pane_id: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    keys: Vec<String>,
}

#[derive(Deserialize)]
struct AgentWaitParams {
    target: String,
    until: Vec<AgentStatus>,
    #[serde(default)]
    timeout_ms: Option<u64>,
}

struct WaitSpec {
    id: String,
    target: String,
    until: Vec<AgentStatus>,
    deadline: Option<tokio::time::Instant>,
    timeout_ms: Option<u64>,
}

enum Outcome {
    Reply(Box<Envelope>),
    Wait(WaitSpec),
}

/// An error answer's `error` member.
#[derive(Debug, Serialize)]
struct WireError {
    code: &'static str,
    message: String,
}

impl WireError {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        WireError {
            code,
            message: message.into(),
        }
    }
}

fn pane_not_found(pane_id: &str) -> WireError {
    WireError::new("pane_not_found", format!("pane {pane_id} not found"))
}

fn internal_error() -> WireError {
    WireError::new("internal_error", "fake herdr lost track of its state")
}

fn invalid_request(detail: impl std::fmt::Display) -> Envelope {
    Envelope::error(
        String::new(),
        WireError::new("invalid_request", format!("invalid request: {detail}")),
    )
}

fn unknown_method_message(method: &str) -> String {
    let expected: Vec<String> = METHODS.iter().map(|m| format!("`{m}`")).collect();
    format!(
        "invalid request: unknown variant `{method}`, expected one of {}",
        expected.join(", ")
    )
}

fn parse_params<T: DeserializeOwned>(params: Value) -> Result<T, WireError> {
    let column = params.to_string().len();
    serde_json::from_value(params).map_err(|e| {
        WireError::new(
            "invalid_request",
            format!("invalid request: {e} at line 1 column {column}"),
        )
    })
}

/// Parses a request line the way herdr does; an unparseable request yields its error answer.
fn parse_request(line: &str) -> (CallHead, Result<Request, Envelope>) {
    let mut head = CallHead {
        id: String::new(),
        method: String::new(),
        params: Value::Null,
    };
    let value: Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(e) => return (head, Err(invalid_request(e))),
    };
    let Value::Object(mut object) = value else {
        return (head, Err(invalid_request("expected a JSON object")));
    };
    let params = match object.remove("params") {
        None | Some(Value::Null) => return (head, Err(invalid_request("missing field `params`"))),
        Some(p) => p,
    };
    head.params = params.clone();
    let id = object.remove("id");
    let method = object.remove("method");
    if let Some(Value::String(id)) = &id {
        head.id = id.clone();
    }
    if let Some(Value::String(method)) = &method {
        head.method = method.clone();
    }
    let id = match id {
        Some(Value::String(id)) => id,
        None => return (head, Err(invalid_request("missing field `id`"))),
        Some(other) => {
            return (
                head,
                Err(invalid_request(format!("invalid type: {other}, expected a string id"))),
            );
        }
    };
    let method = match method {
        Some(Value::String(m)) if METHODS.contains(&m.as_str()) => m,
        Some(Value::String(m)) => {
            let envelope = Envelope::error(
                String::new(),
                WireError::new("invalid_request", unknown_method_message(&m)),
            );
            return (head, Err(envelope));
        }
        None => return (head, Err(invalid_request("missing field `method`"))),
        Some(other) => {
            return (
                head,
                Err(invalid_request(format!(
                    "invalid type: {other}, expected a method name"
                ))),
            );
        }
    };
    (head, Ok(Request { id, method, params }))
}

/// A response line: `{"id":…,"result":{…}}` or `{"id":…,"error":{…}}`.
#[derive(Serialize)]
struct Envelope {
    id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<ResultBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<WireError>,
}

impl Envelope {
    fn ok(id: String, body: ResultBody) -> Self {
        Envelope {
            id,
            result: Some(body),
            error: None,
        }
    }

    fn error(id: String, error: WireError) -> Self {
        Envelope {
            id,
            result: None,
            error: Some(error),
        }
    }

    /// The line to send (without newline) and its value for the call record.
    fn encode(&self) -> (String, Value) {
        match (serde_json::to_string(self), serde_json::to_value(self)) {
            (Ok(line), Ok(value)) => (line, value),
            _ => {
                let line = r#"{"id":"","error":{"code":"internal_error","message":"failed to encode response"}}"#;
                (line.to_string(), serde_json::from_str(line).unwrap_or(Value::Null))
            }
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResultBody {
    Pong {
        version: &'static str,
        protocol: u32,
        capabilities: Capabilities,
    },
    WorkspaceCreated {
        workspace: WorkspaceWire,
        tab: TabWire,
        root_pane: PaneWire,
    },
    TabCreated {
        tab: TabWire,
        root_pane: PaneWire,
    },
    Ok {},
    PaneInfo {
        pane: PaneWire,
    },
    AgentInfo {
        agent: AgentWire,
    },
}

#[derive(Serialize)]
struct Capabilities {
    live_handoff: bool,
    detached_server_daemon: bool,
}

#[derive(Serialize)]
struct PaneWire {
    pane_id: String,
    terminal_id: String,
    workspace_id: String,
    tab_id: String,
    focused: bool,
    cwd: String,
    foreground_cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<String>,
    agent_status: AgentStatus,
    scroll: Scroll,
    revision: u64,
}

#[derive(Serialize)]
struct Scroll {
    offset_from_bottom: u32,
    max_offset_from_bottom: u32,
    viewport_rows: u32,
}

#[derive(Serialize)]
struct TabWire {
    tab_id: String,
    workspace_id: String,
    number: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    focused: bool,
    pane_count: usize,
    agent_status: AgentStatus,
}

#[derive(Serialize)]
struct WorkspaceWire {
    workspace_id: String,
    number: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    label: Option<String>,
    focused: bool,
    pane_count: usize,
    tab_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    active_tab_id: Option<String>,
    agent_status: AgentStatus,
}

#[derive(Serialize)]
struct AgentWire {
    pane_id: String,
    terminal_id: String,
    workspace_id: String,
    tab_id: String,
    agent: String,
    agent_status: AgentStatus,
    focused: bool,
    cwd: String,
    revision: u64,
}

// ---------------------------------------------------------------------------------------------
// Serving.

async fn accept_loop(shared: Arc<Shared>, listener: UnixListener) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let down = shared.down.subscribe();
                tokio::spawn(connection(Arc::clone(&shared), stream, down));
            }
            Err(e) => {
                // EMFILE and friends: back off a little instead of spinning.
                tracing::warn!(error = %e, "fake herdr: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// One connection, dropped at once if the server goes down meanwhile.
async fn connection(shared: Arc<Shared>, stream: UnixStream, mut down: watch::Receiver<u64>) {
    tokio::select! {
        () = serve(&shared, stream) => {}
        _ = down.changed() => tracing::debug!("fake herdr went down; connection dropped"),
    }
}

/// Reads one request line, answers it (or not, per the faults) and closes.
async fn serve(shared: &Shared, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let Some(line) = read_request_line(&mut reader).await else {
        return;
    };
    let line = line.trim();
    if line.is_empty() {
        return;
    }
    let (head, parsed) = parse_request(line);
    let (index, received_at) = shared.record_call(head, line);
    if shared.fault(Fault::Hang) {
        until_client_leaves(&mut reader).await;
        return;
    }
    let envelope = match parsed {
        Err(envelope) => envelope,
        Ok(request) => match shared.dispatch(request, received_at) {
            Outcome::Reply(envelope) => *envelope,
            Outcome::Wait(spec) => {
                tokio::select! {
                    envelope = shared.wait_agent(spec) => envelope,
                    () = until_client_leaves(&mut reader) => {
                        tracing::debug!("agent.wait abandoned by its client");
                        return;
                    }
                }
            }
        },
    };
    let (mut text, value) = envelope.encode();
    // Recorded before it is written, so a test that has read the answer sees it in `calls()`.
    shared.record_response(index, value);
    text.push('\n');
    if let Err(e) = write.write_all(text.as_bytes()).await {
        tracing::debug!(error = %e, "fake herdr: client left before the answer");
        return;
    }
    let _ = write.shutdown().await;
}

/// The first line of a connection, with its newline; `None` (close without answer) on EOF before
/// the newline, a line over [`MAX_LINE_BYTES`], invalid UTF-8, an I/O error or a silent client.
async fn read_request_line<R>(reader: &mut R) -> Option<String>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let mut buf = Vec::new();
    let limit = u64::try_from(MAX_LINE_BYTES).unwrap_or(u64::MAX).saturating_add(1);
    let mut limited = (&mut *reader).take(limit);
    let read = limited.read_until(b'\n', &mut buf);
    match tokio::time::timeout(INITIAL_REQUEST_TIMEOUT, read).await {
        Ok(Ok(_)) if buf.last() == Some(&b'\n') => String::from_utf8(buf).ok(),
        Ok(Ok(_)) => {
            if buf.len() > MAX_LINE_BYTES {
                tracing::debug!("fake herdr: request line too large; closing");
            }
            None
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "fake herdr: read failed");
            None
        }
        Err(_) => None,
    }
}

/// Resolves when the client closes its side (or the read fails); extra bytes are ignored.
async fn until_client_leaves<R: AsyncRead + Unpin>(reader: &mut R) {
    let mut sink = [0u8; 4096];
    loop {
        match reader.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod socket_path_tests {
    use super::*;

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
