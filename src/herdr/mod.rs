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
//! - key names in `pane.send_input` `keys` are parsed as herdr parses them (`keys.rs`: `ctrl+c`,
//!   `Enter`, `c-c`, single characters; hyphen names such as `ctrl-u` and `home`/`end` are
//!   refused); one bad key refuses the request with `invalid_key` and nothing is typed. Text
//!   holding a newline is submitted line by line, as a program reading lines sees it, enter key
//!   or not.
//! - `revision` is always 0 ([`REVISION`]), as real herdr v0.8.2 kept it.
//! - an agent that worked and then reports `idle` shows `done` (herdr derives it for an unfocused
//!   pane); the first idle report shows `idle`. An agent that reports `unknown` stays an agent:
//!   `agent.wait` on it waits until its timeout; only a plain shell pane answers
//!   `agent_not_found` at once.
//! - env values holding NUL are `invalid_env`; a `cwd` that is not a directory falls back to the
//!   server's `$HOME` (the fake's directory).
//! - `pane.process_info {pane_id}` (newer herdr, outside HERDR.md's subset) tells which process
//!   has the terminal: the agent, or the bare shell (`foreground_process_group_id ==
//!   shell_pid`) in a shell pane or after the agent died ([`Fault::AgentGone`]).
//!
//! Model choices (documented here because tests depend on them):
//! - ids are `wN`, `wN:tM`, `wN:pK`, counted per workspace and never reused. Closing a tab's
//!   last pane removes the tab; removing a workspace's last tab removes the workspace, after which
//!   `tab.create` fails with `workspace_not_found` again.
//! - statuses are reported as set, except that `idle` after `working` is `done`: all panes are
//!   unfocused, so a finished agent is never "seen".
//! - a pane becomes an agent pane through [`FakeHerdr::add_agent_pane`],
//!   [`FakeHerdr::make_agent`], or [`FakeHerdr::set_status`] with a status other than `unknown`
//!   on a shell pane; in that last case the agent is named after the command last submitted into
//!   the pane (`claude --x` → `claude`, as herdr detects the foreground process), or `agent`.
//!   [`FakeHerdr::release_agent`] means the agent left: the pane is a plain shell again.
//!
//! The parts, one file each: the handle tests hold ([`FakeHerdr`], `handle.rs`), what it records
//! (`record.rs`), agents' statuses and reactions (`agent.rs`), the fault switches (`fault.rs`),
//! its errors (`error.rs`), where the socket goes (`socket_path.rs`), the model (`model.rs`), the
//! wire codec (`wire.rs`) and the socket server (`server.rs`). This file keeps the protocol's
//! constants.

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

mod agent;
mod error;
mod fault;
mod handle;
mod keys;
mod model;
mod process;
mod record;
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
use model::*;
use process::*;
pub use process::{SHELL_PATH, SHELLS};
pub use record::{Call, CreatedBy, CreatedPane, InputOutcome, InputRecord};
use server::*;
use socket_path::*;
use wire::*;

/// The herdr version the fake claims in `pong`.
pub const HERDR_VERSION: &str = "0.8.2";
/// The socket protocol version the fake claims in `pong`.
pub const PROTOCOL_VERSION: u32 = 20;
/// The `revision` every pane and agent record carries: real herdr v0.8.2 kept it at 0 through
/// status changes and typed output, so a client that watches it for progress never sees any.
pub const REVISION: u64 = 0;
/// The name of the shell the fake's panes run (`pane.process_info` when no agent is in front).
pub const SHELL_NAME: &str = "bash";
/// `scroll.viewport_rows` of a pane (real herdr v0.8.2: 39; 40 in `workspace.create`'s answer,
/// before the tab bar is drawn).
pub const VIEWPORT_ROWS: u32 = 39;
/// Longest request line accepted, not counting its newline (herdr: 1 MiB).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;
/// File name of the socket inside the directory given to [`FakeHerdr::start`].
pub const SOCKET_FILE_NAME: &str = "herdr.sock";
/// Value of `HERDR_BIN_PATH` in the env of panes the fake creates.
pub const HERDR_BIN_PATH: &str = "/usr/local/bin/herdr";
/// How long a connection may stay silent before its request line arrives (herdr: 5 s).
const INITIAL_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
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
    "pane.process_info",
    "pane.report_agent",
    "pane.release_agent",
];
