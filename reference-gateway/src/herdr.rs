//! The herdr client: the subset of herdr's socket API the gateway uses (see HERDR.md).
//!
//! herdr speaks newline-delimited JSON, one request per connection. Every call here is bounded by a
//! timeout, because a herdr that accepts and never answers must cost the gateway a FAILED report,
//! not a wedged inject task.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

/// An agent's status as herdr reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentStatus {
    Idle,
    Working,
    Blocked,
    Done,
    Unknown,
}

impl AgentStatus {
    fn parse(s: &str) -> AgentStatus {
        match s {
            "idle" => AgentStatus::Idle,
            "working" => AgentStatus::Working,
            "blocked" => AgentStatus::Blocked,
            "done" => AgentStatus::Done,
            _ => AgentStatus::Unknown,
        }
    }

    /// FWD-2: text is written only while the agent is `idle` or `done`.
    pub fn injectable(self) -> bool {
        matches!(self, AgentStatus::Idle | AgentStatus::Done)
    }
}

/// A failed herdr call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HerdrError {
    /// herdr answered with an error object (`pane_not_found`, `timeout`, …).
    #[error("herdr error {code}: {message}")]
    Api { code: String, message: String },
    #[error("herdr unreachable at {path}: {reason}")]
    Unreachable { path: String, reason: String },
    #[error("herdr did not answer {method} within {0:?}", .timeout)]
    Timeout { method: String, timeout: Duration },
    #[error("herdr sent an unreadable answer to {method}: {reason}")]
    Protocol { method: String, reason: String },
}

impl HerdrError {
    pub fn code(&self) -> Option<&str> {
        match self {
            HerdrError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A client for one herdr socket.
pub struct Herdr {
    path: PathBuf,
    next_id: AtomicU64,
    call_timeout: Duration,
    /// Set once herdr refused `pane.process_info` as an unknown method: it is not asked again.
    no_process_info: AtomicBool,
    /// Foreground identity (CONTRACT "Foreground identity", proposed [C-20] clarification): per
    /// worker (gid and pane), the terminal's foreground group last seen acting as its agent and
    /// the agent record's `state_change_seq` then.
    identities: Mutex<HashMap<String, Identity>>,
}

/// Who was last seen acting as a worker's agent: the foreground process group that held the
/// pane's terminal then, and herdr's `state_change_seq` of the pane's agent record then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    pub group: u32,
    pub seq: u64,
}

/// herdr's maximum line (HERDR.md): an answer that grows past it without a newline is refused.
const MAX_LINE: usize = 1 << 20;

/// One request line: `{"id", "method", "params"}` (real herdr refuses a request without `params`).
#[derive(Serialize)]
struct Request<'a, P> {
    id: &'a str,
    method: &'a str,
    params: P,
}

/// One answer line, parsed only as far as the caller's `R` needs (unknown fields are skipped, not
/// built into a JSON tree: an answer carries a whole `PaneInfo`, the gateway reads one field).
#[derive(Deserialize)]
struct Answer<R> {
    result: Option<R>,
    error: Option<ApiError>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

/// `pane.get` → `pane_info{pane}`: the one field the gate reads.
#[derive(Deserialize)]
struct PaneInfo {
    pane: PaneStatus,
}

#[derive(Deserialize)]
struct PaneStatus {
    agent_status: Option<String>,
}

/// `pane.process_info` → `pane_process_info{process_info}`: the pids and the foreground group's
/// processes that [C-20]'s check reads.
#[derive(Deserialize)]
struct ProcessInfoAnswer {
    process_info: ProcessInfo,
}

/// `agent.get` and `agent.wait` → `agent_info{agent}`: the agent record's status and
/// `state_change_seq`. A herdr that answers a wait without the record still opened the gate.
#[derive(Deserialize)]
struct AgentInfo {
    #[serde(default)]
    agent: AgentRecord,
}

#[derive(Deserialize, Default)]
struct AgentRecord {
    agent_status: Option<String>,
    state_change_seq: Option<u64>,
}

/// A pane's agent record as `agent.get` shows it: its status and herdr's `state_change_seq`
/// (which moves on every change of that agent's state, so a client sees that idle → working →
/// idle happened between two reads, HERDR.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentState {
    pub status: AgentStatus,
    pub seq: Option<u64>,
}

impl From<AgentInfo> for AgentState {
    fn from(a: AgentInfo) -> Self {
        AgentState {
            status: a
                .agent
                .agent_status
                .as_deref()
                .map_or(AgentStatus::Unknown, AgentStatus::parse),
            seq: a.agent.state_change_seq,
        }
    }
}

#[derive(Deserialize)]
struct ProcessInfo {
    shell_pid: Option<u32>,
    foreground_process_group_id: Option<u32>,
    #[serde(default)]
    foreground_processes: Vec<ProcessEntry>,
}

#[derive(Deserialize)]
struct ProcessEntry {
    pid: u32,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    argv: Option<Vec<String>>,
}

/// Programs that are shells ([C-20], README "design notes"): the POSIX family and its relatives
/// (`sh`, `ash`, `dash`, `bash`, `ksh` and its forks, `yash`, `posh`, `zsh`), the C shells, and
/// the interactive shells of other families a user may set as their login shell. A name here
/// *and* an argv that names no script is a shell at its prompt.
const SHELLS: &[&str] = &[
    "sh",
    "ash",
    "dash",
    "bash",
    "rbash",
    "ksh",
    "ksh93",
    "mksh",
    "oksh",
    "pdksh",
    "yash",
    "posh",
    "zsh",
    "csh",
    "tcsh",
    "fish",
    "nu",
    "elvish",
    "xonsh",
    "pwsh",
    "ion",
    "rc",
    "es",
    "osh",
    "oils-for-unix",
    "murex",
];

/// A process name as a shell would show in `ps`: a login shell's name may carry a leading `-`, and
/// an `argv[0]` may be a path.
fn base_name(name: &str) -> &str {
    let name = name.rsplit('/').next().unwrap_or(name);
    name.trim_start_matches('-')
}

fn is_shell_name(name: &str) -> bool {
    SHELLS.contains(&base_name(name))
}

/// Options of the listed shells that take the next word as their value (so that word is no script):
/// bash's `--rcfile`/`--init-file`, `-o`/`+o` and `-O`/`+O`, zsh's `-o`, fish's `-C`/`--init-command`
/// (run *before* the prompt), nu's `--config`/`--env-config`.
const OPTIONS_WITH_A_VALUE: &[&str] = &[
    "--rcfile",
    "--init-file",
    "-o",
    "+o",
    "-O",
    "+O",
    "-C",
    "--init-command",
    "--config",
    "--env-config",
];

/// Whether a shell's `argv` (`argv[0]` first) names no script and no command, i.e. the shell reads
/// its commands from the terminal: `["bash"]`, `["-bash"]`, `["bash","-i"]`, `["/bin/zsh","-l"]`
/// are interactive; `["bash","script.sh"]`, `["sh","-c","…"]`, `["bash","--","x"]` are not. An
/// empty or missing argv names nothing.
fn argv_names_no_script(argv: &[String]) -> bool {
    let mut args = argv.iter().skip(1);
    while let Some(a) = args.next() {
        let a = a.as_str();
        if a == "-" || a == "-s" {
            continue; // commands from stdin: the terminal
        }
        if a == "--" || !(a.starts_with('-') || a.starts_with('+')) {
            return false; // a script (or what follows `--`)
        }
        if a == "--command" || (!a.starts_with("--") && a[1..].contains('c')) {
            return false; // `-c CMD`, `-lc CMD`, `-ic CMD`: a command, not a prompt
        }
        if OPTIONS_WITH_A_VALUE.contains(&a) {
            args.next();
        }
    }
    true
}

impl ProcessEntry {
    /// A shell reading commands from the terminal: a shell's name and an argv with no script.
    fn is_interactive_shell(&self) -> bool {
        let named_shell = match (&self.name, &self.argv) {
            (Some(name), _) => is_shell_name(name),
            (None, Some(argv)) => argv.first().is_some_and(|a0| is_shell_name(a0)),
            (None, None) => false,
        };
        named_shell && self.argv.as_deref().is_none_or(argv_names_no_script)
    }
}

impl ProcessInfo {
    /// [C-20]: who holds the pane's terminal. The foreground group's leader (the process whose pid
    /// is the group id) decides; when herdr does not list it (a leader that exited before its
    /// group), any listed member that is an interactive shell makes the group a shell's.
    ///
    /// - group = `shell_pid`: the pane's own process. A shell with no script is [`Foreground::Shell`];
    ///   one not named like a shell (a profile that `exec`s its agent) is a program; no process
    ///   listed, the pids decide (a shell).
    /// - group ≠ `shell_pid`: an interactive shell started from the prompt (`bash`, `zsh -l`) is
    ///   [`Foreground::NestedShell`]; anything else (the agent, `bash script.sh`, `sh -c …`) is a
    ///   program.
    ///
    /// Only the leader is read when it is listed because an agent's own helpers (a persistent
    /// `bash` it runs its tools in) may share its group without holding the terminal.
    fn foreground(&self) -> Foreground {
        let (Some(shell), Some(group)) = (self.shell_pid, self.foreground_process_group_id) else {
            return Foreground::Unknown;
        };
        let leader = self.foreground_processes.iter().find(|p| p.pid == group);
        let shell_in_front = match leader {
            Some(p) => p.is_interactive_shell(),
            None if shell == group => true,
            None => self.foreground_processes.iter().any(ProcessEntry::is_interactive_shell),
        };
        match (shell_in_front, shell == group) {
            (false, _) => Foreground::Program,
            (true, true) => Foreground::Shell,
            (true, false) => Foreground::NestedShell,
        }
    }
}

/// Who has a pane's terminal and its foreground process group (`None` when herdr cannot tell).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Front {
    pub kind: Foreground,
    pub group: Option<u32>,
}

impl Front {
    /// [C-20]: a shell at its prompt holds the terminal: nothing may be typed.
    pub fn is_shell(self) -> bool {
        self.kind.is_shell()
    }

    /// Words for a log line or a FAILED detail.
    pub fn describe(self) -> &'static str {
        self.kind.describe()
    }

    pub const UNKNOWN: Front = Front {
        kind: Foreground::Unknown,
        group: None,
    };
}

/// Who has a pane's terminal, as `pane.process_info` tells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreground {
    /// A program other than a shell at its prompt (the agent, while it runs; a script).
    Program,
    /// The pane's own shell: no agent runs, whatever status herdr still shows. Text typed now is
    /// run as a shell command.
    Shell,
    /// An interactive shell started in the pane (`bash` typed at the prompt, an agent that left
    /// one behind): as much a shell at its prompt as the pane's own.
    NestedShell,
    /// herdr cannot tell (a herdr without `pane.process_info`, or an answer without the pids).
    Unknown,
}

impl Foreground {
    /// [C-20]: a shell at its prompt holds the terminal: nothing may be typed.
    pub fn is_shell(self) -> bool {
        matches!(self, Foreground::Shell | Foreground::NestedShell)
    }

    /// Words for a log line or a FAILED detail.
    pub fn describe(self) -> &'static str {
        match self {
            Foreground::Program => "a program has the terminal",
            Foreground::Shell => "the pane's own shell has the terminal",
            Foreground::NestedShell => "an interactive shell started in the pane has the terminal",
            Foreground::Unknown => "herdr cannot tell who has the terminal",
        }
    }
}

/// `tab.create` → `tab_created{tab, root_pane}`: the new pane's id.
#[derive(Deserialize)]
struct TabCreated {
    root_pane: RootPane,
}

#[derive(Deserialize)]
struct RootPane {
    pane_id: String,
}

impl Herdr {
    pub fn new(path: PathBuf) -> Herdr {
        Herdr {
            path,
            next_id: AtomicU64::new(1),
            call_timeout: Duration::from_secs(5),
            no_process_info: AtomicBool::new(false),
            identities: Mutex::new(HashMap::new()),
        }
    }

    /// The identity last bound for `key` (a worker's gid and pane), if any.
    pub fn identity(&self, key: &str) -> Option<Identity> {
        self.identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .copied()
    }

    /// Binds (or refreshes) the identity for `key`.
    pub fn bind_identity(&self, key: &str, identity: Identity) {
        self.identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.to_string(), identity);
    }

    /// Binds `identity` for `key` unless the binding already holds that group at the same or a
    /// later count: the foreground follower reads after the fact, and a later brief's look may
    /// have bound a newer count meanwhile (herdr's count only grows), which must not go back.
    pub fn advance_identity(&self, key: &str, identity: Identity) -> bool {
        let mut map = self
            .identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match map.get(key) {
            Some(bound) if bound.group == identity.group && bound.seq >= identity.seq => false,
            _ => {
                map.insert(key.to_string(), identity);
                true
            }
        }
    }

    /// Forgets the identity for `key` (herdr no longer shows an agent there).
    pub fn forget_identity(&self, key: &str) {
        self.identities
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    /// `agent.get` → the pane's agent record's `state_change_seq`; `None` when herdr shows no
    /// agent there (`agent_not_found`) or the record carries no count.
    pub async fn agent_seq(&self, pane: &str) -> Result<Option<u64>, HerdrError> {
        Ok(self.agent_state(pane).await?.and_then(|a| a.seq))
    }

    /// `agent.get` → the pane's agent record (status and count); `None` when herdr shows no agent
    /// there (`agent_not_found`).
    pub async fn agent_state(&self, pane: &str) -> Result<Option<AgentState>, HerdrError> {
        match self
            .call::<AgentInfo>("agent.get", json!({"target": pane}), Duration::ZERO)
            .await
        {
            Ok(a) => Ok(Some(a.into())),
            Err(e) if e.code() == Some("agent_not_found") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// One request, one answer, one connection.
    async fn call<R: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
        extra: Duration,
    ) -> Result<R, HerdrError> {
        let id = format!("g{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let timeout = self.call_timeout + extra;
        let protocol = |reason: String| HerdrError::Protocol {
            method: method.into(),
            reason,
        };
        let io_err = |e: std::io::Error| HerdrError::Unreachable {
            path: self.path.display().to_string(),
            reason: e.to_string(),
        };
        let fut = async {
            let mut stream = UnixStream::connect(&self.path).await.map_err(io_err)?;
            let mut line = serde_json::to_vec(&Request {
                id: &id,
                method,
                params,
            })
            .map_err(|e| protocol(e.to_string()))?;
            line.push(b'\n');
            stream.write_all(&line).await.map_err(io_err)?;
            let answer = read_line(&mut stream).await.map_err(io_err)?;
            let answer = answer.ok_or_else(|| protocol(format!("no answer line within {MAX_LINE} bytes")))?;
            let a: Answer<R> = serde_json::from_slice(&answer)
                .map_err(|e| protocol(format!("{e}: {:?}", String::from_utf8_lossy(&answer))))?;
            match (a.error, a.result) {
                (Some(err), _) => Err(HerdrError::Api {
                    code: err.code.unwrap_or_else(|| "unknown".into()),
                    message: err.message.unwrap_or_default(),
                }),
                (None, Some(r)) => Ok(r),
                (None, None) => Err(protocol("neither result nor error".into())),
            }
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| HerdrError::Timeout {
                method: method.into(),
                timeout,
            })?
    }

    pub async fn ping(&self) -> Result<(), HerdrError> {
        self.call::<IgnoredAny>("ping", json!({}), Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `pane.get` → the pane's agent status.
    pub async fn status(&self, pane: &str) -> Result<AgentStatus, HerdrError> {
        let r: PaneInfo = self.call("pane.get", json!({"pane_id": pane}), Duration::ZERO).await?;
        let s = r.pane.agent_status.ok_or_else(|| HerdrError::Protocol {
            method: "pane.get".into(),
            reason: "no agent_status".into(),
        })?;
        Ok(AgentStatus::parse(&s))
    }

    /// `agent.wait` until the agent is idle or done, for at most `timeout` → the agent record
    /// herdr answered with: its `state_change_seq` is the count at the moment the gate opened,
    /// which spares the inject and the foreground follower an `agent.get` of their own.
    pub async fn wait_idle(&self, pane: &str, timeout: Duration) -> Result<AgentState, HerdrError> {
        let params = json!({"target": pane, "until": ["idle", "done"], "timeout_ms": timeout.as_millis() as u64});
        self.call::<AgentInfo>("agent.wait", params, timeout)
            .await
            .map(AgentState::from)
    }

    /// `pane.process_info` → who has the pane's terminal. herdr keeps showing an agent's last
    /// status after its process died, so only this tells a live agent from a bare shell. A herdr
    /// that does not know the method (it answers `invalid_request`) is [`Foreground::Unknown`],
    /// now and for every later call, without asking again.
    pub async fn foreground(&self, pane: &str) -> Result<Front, HerdrError> {
        if self.no_process_info.load(Ordering::Relaxed) {
            return Ok(Front::UNKNOWN);
        }
        let answer = self.call::<ProcessInfoAnswer>("pane.process_info", json!({"pane_id": pane}), Duration::ZERO);
        let info = match answer.await {
            Ok(a) => a.process_info,
            Err(e) if e.code() == Some("invalid_request") => {
                self.no_process_info.store(true, Ordering::Relaxed);
                return Ok(Front::UNKNOWN);
            }
            Err(e) => return Err(e),
        };
        let kind = info.foreground();
        let group = match kind {
            Foreground::Unknown => None,
            _ => info.foreground_process_group_id,
        };
        Ok(Front { kind, group })
    }

    /// `pane.send_input` with Enter: types `text` into the pane and submits it.
    pub async fn send_input(&self, pane: &str, text: &str) -> Result<(), HerdrError> {
        let params = json!({"pane_id": pane, "text": text, "keys": ["enter"]});
        self.call::<IgnoredAny>("pane.send_input", params, Duration::ZERO)
            .await
            .map(|_| ())
    }

    pub async fn close(&self, pane: &str) -> Result<(), HerdrError> {
        self.call::<IgnoredAny>("pane.close", json!({"pane_id": pane}), Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `tab.create` (after `workspace.create` when herdr has no workspace yet) → the new pane id.
    pub async fn create_pane(&self, label: &str, env: &BTreeMap<String, String>) -> Result<String, HerdrError> {
        let params = json!({"label": label, "focus": false, "env": env});
        let r: TabCreated = match self.call("tab.create", &params, Duration::ZERO).await {
            Err(e) if e.code() == Some("workspace_not_found") => {
                let ws = json!({"focus": false, "label": "fleet", "env": {}});
                self.call::<IgnoredAny>("workspace.create", ws, Duration::ZERO).await?;
                self.call("tab.create", &params, Duration::ZERO).await?
            }
            other => other?,
        };
        Ok(r.root_pane.pane_id)
    }
}

/// Reads up to the first newline (or EOF): herdr writes one line and closes. `None` when no
/// newline came within [`MAX_LINE`] bytes and the connection stayed open.
async fn read_line(stream: &mut UnixStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let from = buf.len();
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(Some(buf)); // EOF: the line is whatever came
        }
        if let Some(i) = buf[from..].iter().position(|&b| b == b'\n') {
            buf.truncate(from + i);
            return Ok(Some(buf));
        }
        if buf.len() > MAX_LINE {
            return Ok(None);
        }
        if buf.capacity() == buf.len() {
            buf.reserve(buf.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_answer_ends_at_its_newline_even_while_the_connection_stays_open() {
        let (mut a, mut b) = UnixStream::pair().expect("a socket pair");
        b.write_all(b"{\"id\":\"g1\",\"result\":{\"type\":\"ok\"}}\n")
            .await
            .expect("write");
        let line = read_line(&mut a).await.expect("read").expect("a line");
        assert_eq!(line, b"{\"id\":\"g1\",\"result\":{\"type\":\"ok\"}}");
        drop(b);
    }

    #[tokio::test]
    async fn an_answer_cut_by_the_close_is_what_came() {
        let (mut a, mut b) = UnixStream::pair().expect("a socket pair");
        b.write_all(b"{\"id\":").await.expect("write");
        drop(b);
        assert_eq!(read_line(&mut a).await.expect("read").expect("bytes"), b"{\"id\":");
    }

    #[tokio::test]
    async fn a_line_longer_than_herdr_allows_is_refused() {
        let (mut a, mut b) = UnixStream::pair().expect("a socket pair");
        let writer = tokio::spawn(async move {
            let chunk = vec![b'x'; 64 * 1024];
            for _ in 0..(MAX_LINE / chunk.len() + 2) {
                if b.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            b
        });
        assert!(read_line(&mut a).await.expect("read").is_none());
        drop(a);
        let _ = writer.await;
    }

    fn foreground_of(answer: &str) -> Foreground {
        let a: Answer<ProcessInfoAnswer> = serde_json::from_str(answer).expect("a pane_process_info answer");
        a.result.map_or(Foreground::Unknown, |r| r.process_info.foreground())
    }

    /// Real herdr v0.8.2's answers to `pane.process_info`, verbatim, each with who holds the
    /// terminal: the recording `fixtures/herdr-0.8.2/process_info.jsonl` (a shell at its prompt,
    /// `sleep 1000` in front, after ctrl+c, a stand-in agent alive and killed, and the `extra:`
    /// rows `exec sleep`, a nested interactive `bash`, `bash script.sh`, a ctrl+z'd job) and the
    /// same day's `e2e-known-agent-dead.jsonl` (an agent herdr recognises by name, alive).
    const RECORDED: &str = include_str!("testdata/process_info-herdr-0.8.2.jsonl");

    #[test]
    fn the_recorded_answers_of_real_herdr_are_classified_as_measured() {
        let mut n = 0;
        for line in RECORDED.lines() {
            let row: serde_json::Value = serde_json::from_str(line).expect("a recorded row");
            let (step, expect) = (
                row["step"].as_str().expect("step"),
                row["expect"].as_str().expect("expect"),
            );
            let want = match expect {
                "shell" => Foreground::Shell,
                "nested_shell" => Foreground::NestedShell,
                "program" => Foreground::Program,
                other => panic!("unknown expectation {other}"),
            };
            let answer = row["answer"].as_str().expect("answer");
            assert_eq!(foreground_of(answer), want, "{step}: {answer}");
            n += 1;
        }
        assert_eq!(n, 10, "every recorded row was read");
    }

    fn info(group: u32, procs: &str) -> String {
        format!(
            r#"{{"id":"g3","result":{{"type":"pane_process_info","process_info":{{"pane_id":"w1:p1",
            "shell_pid":100,"foreground_process_group_id":{group},"foreground_processes":[{procs}]}}}}}}"#
        )
    }

    fn proc_(pid: u32, name: &str, argv: &[&str]) -> String {
        format!(r#"{{"pid":{pid},"name":"{name}","argv":{}}}"#, serde_json::json!(argv))
    }

    #[test]
    fn a_shell_is_at_its_prompt_only_when_its_argv_names_no_script() {
        let nested = |name: &str, argv: &[&str]| foreground_of(&info(200, &proc_(200, name, argv)));
        for argv in [
            &["bash"][..],
            &["-bash"],
            &["bash", "-i"],
            &["/bin/zsh", "-l"],
            &["bash", "--login", "-i"],
            &["bash", "--rcfile", "my.rc"],
            &["bash", "-o", "vi"],
            &["sh", "-"],
            &["fish"],
        ] {
            assert_eq!(nested(base_name(argv[0]), argv), Foreground::NestedShell, "{argv:?}");
        }
        for argv in [
            &["bash", "script.sh"][..],
            &["sh", "-c", "exec claude"],
            &["bash", "-lc", "claude"],
            &["zsh", "-i", "-c", "make"],
            &["bash", "--", "script.sh"],
            &["bash", "--rcfile", "my.rc", "script.sh"],
            &["bash", "--command", "ls"],
        ] {
            assert_eq!(nested(argv[0], argv), Foreground::Program, "{argv:?}");
        }
        assert_eq!(nested("python3", &["python3", "agent.py"]), Foreground::Program);
        assert_eq!(nested("claude", &["claude"]), Foreground::Program);
    }

    #[test]
    fn the_pane_s_own_process_is_a_shell_unless_it_was_replaced_by_a_program() {
        assert_eq!(
            foreground_of(&info(100, &proc_(100, "bash", &["/bin/bash"]))),
            Foreground::Shell
        );
        assert_eq!(
            foreground_of(&info(100, &proc_(100, "-zsh", &["-zsh"]))),
            Foreground::Shell
        );
        // The fake herdr's shape before it listed real argv: a name and `argv0`, no argv.
        let old_fake = r#"{"pid":100,"name":"bash","argv0":"bash"}"#;
        assert_eq!(foreground_of(&info(100, old_fake)), Foreground::Shell);
        // A profile that `exec`s its agent: the agent is the pane's own process.
        assert_eq!(
            foreground_of(&info(100, &proc_(100, "claude", &["claude"]))),
            Foreground::Program
        );
        // No process listed: the pids decide.
        assert_eq!(foreground_of(&info(100, "")), Foreground::Shell);
        let no_pids = r#"{"id":"g4","result":{"type":"pane_process_info","process_info":{"pane_id":"w1:p1"}}}"#;
        assert_eq!(foreground_of(no_pids), Foreground::Unknown);
    }

    #[test]
    fn the_group_leader_decides_over_a_shell_the_agent_runs_beside_it() {
        let agent_with_helper = format!(
            "{},{}",
            proc_(200, "node", &["node", "cli.js"]),
            proc_(201, "bash", &["bash"])
        );
        assert_eq!(foreground_of(&info(200, &agent_with_helper)), Foreground::Program);
        // The leader is gone and an interactive shell is left in the group.
        assert_eq!(
            foreground_of(&info(200, &proc_(201, "bash", &["bash"]))),
            Foreground::NestedShell
        );
        assert_eq!(
            foreground_of(&info(200, &proc_(201, "sleep", &["sleep", "9"]))),
            Foreground::Program
        );
    }

    #[test]
    fn an_answer_is_read_only_as_far_as_the_caller_needs() {
        let pane: Answer<PaneInfo> = serde_json::from_str(
            r#"{"id":"g2","result":{"type":"pane_info","pane":{"pane_id":"w1:p2","agent_status":"working","scroll":{"offset_from_bottom":0}}}}"#,
        )
        .expect("a pane_info answer");
        let status = pane.result.and_then(|r| r.pane.agent_status);
        assert_eq!(status.as_deref(), Some("working"));
        let err: Answer<IgnoredAny> =
            serde_json::from_str(r#"{"id":"","error":{"code":"invalid_request","message":"bad"}}"#).expect("an error");
        assert!(err.result.is_none());
        assert_eq!(err.error.and_then(|e| e.code).as_deref(), Some("invalid_request"));
    }
}
