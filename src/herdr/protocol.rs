//! The protocol's constants: what the fake claims to be (herdr 0.8.2, protocol 20), the fixed
//! values its answers carry, the limits of its wire, and the methods herdr knows and the fake
//! serves.
//!
//! Exists as a leaf of its own so that the handle, the model, the wire codec and the server
//! share these without importing each other or the module root (`mod.rs` only declares the
//! parts and re-exports what tests use).

use std::time::Duration;

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
/// File name of the socket inside the directory given to [`FakeHerdr::start`](super::FakeHerdr::start).
pub const SOCKET_FILE_NAME: &str = "herdr.sock";
/// Value of `HERDR_BIN_PATH` in the env of panes the fake creates.
pub const HERDR_BIN_PATH: &str = "/usr/local/bin/herdr";
/// How long a connection may stay silent before its request line arrives (herdr: 5 s).
pub(super) const INITIAL_REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Every method real herdr v0.8.2 knows, in the order its "unknown variant" message lists them.
pub(super) const HERDR_METHODS: &[&str] = &[
    "ping",
    "server.stop",
    "server.live_handoff",
    "server.reload_config",
    "server.agent_manifests",
    "server.reload_agent_manifests",
    "notification.show",
    "client.window_title.set",
    "client.window_title.clear",
    "session.snapshot",
    "workspace.create",
    "workspace.list",
    "workspace.get",
    "workspace.focus",
    "workspace.rename",
    "workspace.move",
    "workspace.move_block",
    "workspace.report_metadata",
    "workspace.close",
    "worktree.list",
    "worktree.create",
    "worktree.open",
    "worktree.remove",
    "tab.create",
    "tab.list",
    "tab.get",
    "tab.focus",
    "tab.rename",
    "tab.move",
    "tab.close",
    "agent.list",
    "agent.get",
    "agent.read",
    "agent.explain",
    "agent.send_keys",
    "agent.rename",
    "agent.view.set",
    "agent.view.clear",
    "agent.focus",
    "agent.start",
    "agent.prompt",
    "agent.wait",
    "pane.split",
    "pane.swap",
    "pane.move",
    "pane.zoom",
    "pane.layout",
    "pane.process_info",
    "layout.export",
    "layout.apply",
    "layout.set_split_ratio",
    "pane.neighbor",
    "pane.edges",
    "pane.focus_direction",
    "pane.resize",
    "pane.list",
    "pane.current",
    "pane.get",
    "pane.focus",
    "pane.input.set",
    "pane.rename",
    "pane.send_text",
    "pane.send_keys",
    "pane.send_input",
    "pane.read",
    "pane.graphics.set",
    "pane.graphics.clear",
    "pane.graphics.info",
    "pane.graphics.stream",
    "pane.report_agent",
    "pane.report_agent_session",
    "pane.report_metadata",
    "pane.clear_agent_authority",
    "pane.release_agent",
    "pane.close",
    "popup.close",
    "events.subscribe",
    "events.wait",
    "pane.wait_for_output",
    "integration.install",
    "integration.uninstall",
    "plugin.link",
    "plugin.list",
    "plugin.unlink",
    "plugin.enable",
    "plugin.disable",
    "plugin.action.list",
    "plugin.action.invoke",
    "plugin.log.list",
    "plugin.pane.open",
    "plugin.pane.focus",
    "plugin.pane.close",
];
/// The methods the fake serves (a subset of [`HERDR_METHODS`]); a real herdr method outside it is
/// refused as not served, anything else is an unknown variant to herdr.
pub(super) const METHODS: &[&str] = &[
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
    "tab.list",
    "pane.read",
];

/// How long a program herdr recognises as an agent, that never reports, stays `unknown` before
/// herdr shows it `idle` (measured on real herdr v0.8.2, 2026-12-06: 3.75–4.09 s; `detect.rs`).
pub const DETECT_IDLE_AFTER: std::time::Duration = std::time::Duration::from_secs(4);
