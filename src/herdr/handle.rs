//! The handle tests hold: [`FakeHerdr::start`] binds the socket and serves; the methods drive the
//! agents (panes, statuses, reactions, faults) and read back what the gateway did (calls, inputs,
//! created panes); the server stops with [`FakeHerdr::stop`] or the last clone.

use super::*;

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

    /// The agent in a pane reports `status` (herdr's `pane.report_agent`) and `agent.wait` callers
    /// wake. On a shell pane a status other than `unknown` makes it an agent pane (named after the
    /// command last submitted into it, else `agent`); `unknown` on a shell pane changes nothing.
    /// As in herdr, `idle` after `working` shows `done`, and an agent that reports `unknown`
    /// stays an agent (`agent.wait` waits on it); [`FakeHerdr::release_agent`] makes the pane a
    /// shell again. Ignored, with a warning, for an unknown pane.
    pub fn set_status(&self, pane_id: &str, status: AgentStatus) {
        self.update_pane(pane_id, |pane, inputs| {
            if pane.agent.is_none() {
                if status == AgentStatus::Unknown {
                    return;
                }
                pane.agent = Some(agent_name_from_inputs(inputs));
            }
            pane.report(status);
        });
    }

    /// The agent leaves the pane (herdr's `pane.release_agent`): a plain shell pane again,
    /// `unknown`, and `agent.*` answers `agent_not_found` at once. Ignored, with a warning, for
    /// an unknown pane.
    pub fn release_agent(&self, pane_id: &str) {
        self.update_pane(pane_id, |pane, _| {
            pane.agent = None;
            pane.status = AgentStatus::Unknown;
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

    /// Texts the bare shell ran as commands: submitted while the pane's agent was dead
    /// ([`Fault::AgentGone`]), in order.
    pub fn ran_in_shell(&self, pane_id: &str) -> Vec<String> {
        self.inputs_with(pane_id, |r| r.outcome == InputOutcome::RanInShell)
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
