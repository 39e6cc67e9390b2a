//! A fake herdr: the terminal multiplexer a gateway under test drives, served on a unix socket.
//!
//! Why it exists: a Fleet gateway spawns, feeds, watches and stops AI agents through herdr's
//! socket API (`docs/HERDR.md`). A real herdr needs real agents and real terminals, and it
//! cannot be told to misbehave on cue. This fake speaks the same wire subset (newline-delimited
//! JSON, one request per connection, herdr 0.8.2 / protocol 20), keeps a small model of
//! workspaces, tabs, panes, the processes in their terminals and the agents herdr sees, records
//! every call it receives, and can be switched into the failures herdr users actually hit
//! ([`Fault`]). It is checked against a recorded real herdr v0.8.2 session, answer by answer and
//! field by field (`replay_tests.rs`), and against a whole recorded session of a real fleet's host
//! (`replay_session_tests.rs`, `fixtures/herdr-0.8.2/`); what still differs is listed there
//! and in docs/HERDR.md with the reason it cannot hide a gateway bug.
//!
//! The model, as real herdr v0.8.2 behaved when measured:
//! - **Terminals** (`process.rs`). Each pane runs a shell (`argv ["/bin/bash"]`). Text submitted
//!   while a shell at its prompt has the terminal (the pane's own, or a nested interactive one) is
//!   run by it as a command line ([`InputOutcome::RanInShell`]): a program (`sleep 1000`) then takes
//!   the terminal in a group of its own, `exec` replaces the shell, builtins (`echo`) finish at
//!   once; a path to a `#!` script runs under its interpreter; ctrl+c ends a program (the agent
//!   too), ctrl+z stops one, ctrl+d ends one that reads its terminal (a nested shell, `cat`).
//!   `pane.process_info` lists every process of the group in front with its `argv`; without
//!   `pane_id` it answers for the focused pane. Tests start programs with
//!   [`FakeHerdr::run_program`] / [`FakeHerdr::run_job`] and end them with
//!   [`FakeHerdr::exit_program`].
//! - **Agents** (`agent.rs`, `model.rs`). What herdr shows (`agent`, `agent_status`) changes only
//!   when the agent reports (`pane.report_agent`, or a test's [`FakeHerdr::set_status`]) — never
//!   because something was typed. The agent program in a pane reads a submitted line and reacts as
//!   its [`InputReaction`] says: by default it reports `working` at once (as the recorded stand-in
//!   agent and a real agent's hooks do); [`InputReaction::NeverReports`] reads and never reports.
//!   herdr derives `done`: `idle` after `working`, `blocked` or `unknown` shows `done` in an
//!   unfocused pane; the focused pane (the root pane of the focused workspace's active tab) and an
//!   agent's first report show `idle`. A program herdr recognises by name
//!   ([`RECOGNISED_AGENTS`], e.g. `claude`) is an agent from its start (`unknown` until it
//!   reports, `idle` after [`DETECT_IDLE_AFTER`] if it never does, `detect.rs`); when it exits ([`FakeHerdr::agent_exits`]) the pane turns `unknown` at once (real:
//!   within 2 s) and `agent.*` answers `agent_not_found`. Any other agent that exits leaves its
//!   last status and name behind while its shell has the terminal — the shell hazard
//!   ([`Fault::AgentGone`] for every pane at once). `pane.release_agent` makes the pane a plain
//!   shell pane to herdr. `state_change_seq` is one server-wide count of agent state changes; each
//!   agent record carries the count of its last change. Only a change of what herdr shows counts
//!   (a second `working`, an `idle` while `done` do not), as measured on real herdr.
//! - **Layout** (`model.rs`). Ids are `wN`, `wN:tM`, `wN:pK`, counted per workspace and never
//!   reused. The first workspace is the focused one and its first tab the active one (a
//!   `focus: true` create moves them); closing a tab's last pane removes the tab, removing a
//!   workspace's last tab removes the workspace, after which `tab.create` fails with
//!   `workspace_not_found` ("no active workspace") again. An unlabelled tab is labelled with its
//!   number, an unlabelled workspace after its directory (`~` for the fake's directory, its
//!   `$HOME`). [`FakeHerdr::add_agent_pane`] / [`FakeHerdr::add_shell_pane`] add a pane in a new
//!   tab; without a workspace they create one first, whose root pane stays (the focused pane), so
//!   a pane they add is never focused.
//!
//! Wire behaviour, as herdr's server does it (`wire.rs`, `server.rs`):
//! - the client connects and writes one line (at most [`MAX_LINE_BYTES`] before the newline);
//!   the server answers one line and closes. A second line on the same connection is never read
//!   (the close then resets the client's connection). A connection that closes before its
//!   newline, sends an over-long line, invalid UTF-8 or a blank line is closed without an answer.
//! - a request that does not parse is answered `{"id":"","error":{"code":"invalid_request",
//!   "message":"invalid request: … at line 1 column N"}}` with herdr's own wording: unparseable
//!   JSON, an `id` that is not a string (its column), a missing `id`, `method` or `params`, an
//!   unknown method (the message lists herdr's methods), and params that do not fit the method
//!   (their column is the end of the request, as herdr reads them last). A herdr method the fake
//!   does not serve is refused the same way, saying so. `agent.wait` with `until: []` or without
//!   `until` waits for idle, done or blocked; its timeout is `timed out waiting for agent status`.
//! - key names in `pane.send_input` `keys` are parsed as herdr parses them (`keys.rs`); one bad key
//!   refuses the request with `invalid_key` (`unsupported key NAME`) and nothing is typed. Text
//!   holding a newline is submitted line by line, enter key or not.
//! - `revision` is always 0 ([`REVISION`]), as real herdr v0.8.2 kept it.
//! - env keys that are empty or hold `=` or NUL, and values holding NUL, are `invalid_env`; a
//!   `cwd` that is not a directory falls back to the server's `$HOME` (the fake's directory).
//!
//! The parts, one file each: the handle tests hold ([`FakeHerdr`], `handle.rs`), what it records
//! (`record.rs`), agents' statuses and reactions (`agent.rs`), the fault switches (`fault.rs`),
//! its errors (`error.rs`), where the socket goes (`socket_path.rs`), the model (`model.rs`), the
//! terminals' processes (`process.rs`), the wire codec (`wire.rs`) and the socket server
//! (`server.rs`), and the protocol's constants (`protocol.rs`). This file only declares them and
//! re-exports the public ones.

mod agent;
mod detect;
mod error;
mod fault;
mod handle;
mod keys;
mod model;
mod process;
mod protocol;
mod record;
#[cfg(test)]
mod replay_session_tests;
#[cfg(test)]
mod replay_tests;
mod server;
mod socket_path;
#[cfg(test)]
mod tests;
mod wire;

pub use agent::{AgentStatus, InputReaction, ParseAgentStatusError, RECOGNISED_AGENTS, is_recognised_agent};
pub use error::HerdrError;
pub use fault::Fault;
pub use handle::FakeHerdr;
pub use keys::{InvalidKey, Key, NAMED_KEYS, parse_key, parse_keys};
pub use process::{SHELL_PATH, SHELLS};
pub use protocol::{
    DETECT_IDLE_AFTER, HERDR_BIN_PATH, HERDR_VERSION, MAX_LINE_BYTES, PROTOCOL_VERSION, REVISION, SHELL_NAME,
    SOCKET_FILE_NAME, VIEWPORT_ROWS,
};
pub use record::{Call, CreatedBy, CreatedPane, InputOutcome, InputRecord};
