//! The fake's misbehaviour switches: the failures herdr users actually hit, turned on and off by
//! tests ([`FakeHerdr::set_fault`](super::FakeHerdr::set_fault)).

/// A misbehaviour switch; see [`FakeHerdr::set_fault`](super::FakeHerdr::set_fault). Several may
/// be on at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `pane.send_input` answers `ok` but nothing is submitted: the status stays put and the text
    /// is recorded as swallowed ([`FakeHerdr::swallowed`](super::FakeHerdr::swallowed)), not in
    /// [`FakeHerdr::inputs`](super::FakeHerdr::inputs).
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
    /// The agent process in every agent pane died without `pane.release_agent`, and herdr keeps
    /// showing its last status (`done`, `idle`, …) and agent name — what real herdr v0.8.2 does
    /// for an agent it does not recognise by name, whatever its name here. `pane.process_info`
    /// shows what was under the agent (the bare shell), and text submitted into the pane is run by
    /// that shell as a command (recorded as
    /// [`InputOutcome::RanInShell`](super::InputOutcome::RanInShell); the status does not move).
    /// Switched off, the agents are alive again. For one pane, and for good, use
    /// [`FakeHerdr::agent_exits`](super::FakeHerdr::agent_exits).
    AgentGone,
    /// An older herdr, one without `pane.process_info`: the method is refused as herdr refuses any
    /// method it does not know — `id: ""`, code `invalid_request`, "invalid request: unknown
    /// variant `pane.process_info`, expected one of … at line 1 column N" (real herdr v0.8.2's
    /// answer to an unknown method, `fixtures/herdr-0.8.2`, the "unknown method" row), the list
    /// without `pane.process_info`. SPEC [C-20]: such a herdr leaves the status gate alone to decide.
    NoProcessInfo,
}
