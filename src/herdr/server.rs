//! The fake herdr's socket server: the accept loop, one request per connection, and the shared
//! state every handle, connection and `agent.wait` works on (dispatching each call into the model).

use serde_json::Value;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::agent::AgentStatus;
use super::error::HerdrError;
use super::fault::Fault;
use super::keys::{Key, parse_keys};
use super::model::{State, pane_cwd, process_info, validate_env};
use super::protocol::{
    HERDR_VERSION, INITIAL_REQUEST_TIMEOUT, MAX_LINE_BYTES, PROTOCOL_VERSION, REVISION, VIEWPORT_ROWS,
};
use super::record::{Call, CreatedBy, InputOutcome, InputRecord};
use super::socket_path::ShortDir;
use super::wire::{
    AgentTarget, AgentWaitParams, AgentWire, CallHead, Capabilities, CreateParams, Envelope, OptionalPaneTarget,
    Outcome, PaneReadParams, PaneReadWire, PaneTarget, PingParams, ReleaseAgentParams, ReportAgentParams, Request,
    ResultBody, SendInputParams, TabListParams, WaitSpec, WireError, internal_error, pane_not_found, parse_params,
    parse_request, unknown_method_message, unknown_method_message_without,
};

/// State shared by the handles, the accept loop and the connections.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    /// Bumped on every change an `agent.wait` may care about.
    pub(super) changed: watch::Sender<u64>,
    /// Bumped when the server goes down; open connections drop.
    pub(super) down: watch::Sender<u64>,
    pub(super) socket_path: PathBuf,
    /// The short directory holding the socket when `<dir>/herdr.sock` was too long (see
    /// [`socket_path_for`]); removed at shutdown.
    pub(super) short_dir: Option<ShortDir>,
    pub(super) default_cwd: String,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) accept: Mutex<Option<JoinHandle<()>>>,
    pub(super) stopped: AtomicBool,
}

impl Shared {
    /// The model, with herdr's own detections due by now applied (`detect.rs`).
    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.detect(std::time::Instant::now());
        state
    }

    pub(super) fn fault(&self, fault: Fault) -> bool {
        self.state().faults.contains(&fault)
    }

    pub(super) fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub(super) fn accept_slot(&self) -> MutexGuard<'_, Option<JoinHandle<()>>> {
        self.accept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Binds the socket and starts accepting, unless already up or stopped.
    pub(super) fn go_up(self: &Arc<Self>) -> Result<(), HerdrError> {
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
    pub(super) fn go_down(&self) -> Option<JoinHandle<()>> {
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

    pub(super) fn shutdown(&self) -> Option<JoinHandle<()>> {
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
    pub(super) fn record_call(&self, head: CallHead, line: &str) -> (usize, Instant) {
        let mut state = self.state();
        let received_at = Instant::now();
        if state.forget_calls {
            // No record to answer into: `record_response` finds no call at this index.
            return (usize::MAX, received_at);
        }
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

    pub(super) fn record_response(&self, index: usize, response: Value) {
        if let Some(call) = self.state().calls.get_mut(index) {
            call.response = Some(response);
            call.answered_at = Some(Instant::now());
        }
    }

    pub(super) fn dispatch(&self, request: Request, received_at: Instant) -> Outcome {
        let Request {
            id,
            method,
            params,
            column,
        } = request;
        let result = match method.as_str() {
            "ping" => parse_params::<PingParams>(params, column).map(|_| ResultBody::Pong {
                version: HERDR_VERSION,
                protocol: PROTOCOL_VERSION,
                capabilities: Capabilities {
                    live_handoff: true,
                    detached_server_daemon: true,
                },
            }),
            "workspace.create" => parse_params(params, column).and_then(|p| self.workspace_create(p)),
            "tab.create" => parse_params(params, column).and_then(|p| self.tab_create(p)),
            "pane.send_input" => parse_params(params, column).and_then(|p| self.send_input(p, received_at)),
            "pane.get" => parse_params(params, column).and_then(|p: PaneTarget| self.pane_get(&p.pane_id)),
            "pane.close" => parse_params(params, column).and_then(|p: PaneTarget| self.pane_close(&p.pane_id)),
            "pane.process_info" if self.fault(Fault::NoProcessInfo) => Err(WireError::new(
                "invalid_request",
                format!(
                    "{} at line 1 column {column}",
                    unknown_method_message_without(&method, "pane.process_info")
                ),
            )),
            "pane.process_info" => parse_params(params, column)
                .and_then(|p: OptionalPaneTarget| self.pane_process_info(p.pane_id.as_deref())),
            "tab.list" => parse_params(params, column).map(|p: TabListParams| self.tab_list(p.workspace_id.as_deref())),
            "pane.read" => parse_params(params, column).and_then(|p| self.pane_read(p)),
            "pane.report_agent" => parse_params(params, column).and_then(|p| self.report_agent(p)),
            "pane.release_agent" => parse_params(params, column).and_then(|p| self.release_agent(p)),
            "agent.get" => parse_params(params, column)
                .and_then(|p: AgentTarget| self.probe_agent(&p.target).map(|agent| ResultBody::AgentInfo { agent })),
            "agent.wait" => match parse_params::<AgentWaitParams>(params, column) {
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

    pub(super) fn workspace_create(&self, p: CreateParams) -> Result<ResultBody, WireError> {
        validate_env(&p.env)?;
        self.refuse_create()?;
        let cwd = pane_cwd(p.cwd.as_deref(), &self.default_cwd);
        let mut state = self.state();
        let ws = state.create_workspace(p.label.clone(), &cwd, &self.default_cwd, p.focus);
        let (tab_id, pane_id) = state.create_tab(&ws, None, cwd.clone(), false);
        state.record_created(
            &self.socket_path,
            CreatedBy::WorkspaceCreate,
            &p,
            &ws,
            &tab_id,
            &pane_id,
            cwd,
        );
        let mut root_pane = state.pane_wire(&pane_id).ok_or_else(internal_error)?;
        // Real herdr answers before the new tab's bar is drawn: one row more than later reads.
        root_pane.scroll.viewport_rows = VIEWPORT_ROWS + 1;
        let body = ResultBody::WorkspaceCreated {
            workspace: state.workspace_wire(&ws),
            tab: state.tab_wire(&tab_id),
            root_pane,
        };
        drop(state);
        self.bump();
        Ok(body)
    }

    /// `tab.list` (outside HERDR.md's subset; served as real herdr v0.8.2 answers it): every tab
    /// of the workspace asked, or of all, in the order made.
    pub(super) fn tab_list(&self, workspace: Option<&str>) -> ResultBody {
        let state = self.state();
        let tabs = state
            .tabs
            .iter()
            .filter(|t| workspace.is_none_or(|w| t.workspace_id == w))
            .map(|t| state.tab_wire(&t.id))
            .collect();
        ResultBody::TabList { tabs }
    }

    pub(super) fn tab_create(&self, p: CreateParams) -> Result<ResultBody, WireError> {
        self.refuse_create()?;
        let mut state = self.state();
        let ws = match &p.workspace_id {
            Some(id) => state.workspaces.iter().find(|w| &w.id == id).map(|w| w.id.clone()),
            None => state.workspaces.first().map(|w| w.id.clone()),
        };
        let Some(ws) = ws else {
            let message = match &p.workspace_id {
                Some(id) => format!("workspace {id} not found"),
                None => "no active workspace".to_string(),
            };
            return Err(WireError::new("workspace_not_found", message));
        };
        validate_env(&p.env)?;
        let cwd = pane_cwd(p.cwd.as_deref(), &self.default_cwd);
        let (tab_id, pane_id) = state.create_tab(&ws, p.label.clone(), cwd.clone(), p.focus);
        state.record_created(&self.socket_path, CreatedBy::TabCreate, &p, &ws, &tab_id, &pane_id, cwd);
        let body = ResultBody::TabCreated {
            tab: state.tab_wire(&tab_id),
            root_pane: state.pane_wire(&pane_id).ok_or_else(internal_error)?,
        };
        drop(state);
        self.bump();
        Ok(body)
    }

    pub(super) fn send_input(&self, p: SendInputParams, received_at: Instant) -> Result<ResultBody, WireError> {
        let mut state = self.state();
        if state.pane(&p.pane_id).is_none() {
            return Err(pane_not_found(&p.pane_id));
        }
        if state.faults.contains(&Fault::SendInputFails) {
            return Err(WireError::new(
                "pane_send_failed",
                format!("failed to send input to pane {}", p.pane_id),
            ));
        }
        // One bad key refuses the whole request: nothing is typed.
        let keys = parse_keys(&p.keys).map_err(|e| WireError::new("invalid_key", e.to_string()))?;
        // A newline in the text submits too: a program that reads lines sees each line.
        let enter = keys.iter().any(Key::is_enter) || p.text.contains(['\n', '\r']);
        state.with_pane(&p.pane_id, |pane, ctx| {
            let outcome = if enter {
                pane.submit(&p.text, ctx)
            } else {
                InputOutcome::Typed
            };
            for key in &keys {
                pane.press(key, ctx);
            }
            pane.inputs.push(InputRecord {
                text: p.text,
                keys: p.keys,
                outcome,
                received_at,
            });
        });
        drop(state);
        self.bump();
        Ok(ResultBody::Ok {})
    }

    /// `pane.report_agent`: the agent in the pane reports its state; herdr names the pane's agent
    /// after the report and derives `done` ([`Pane::report`]).
    pub(super) fn report_agent(&self, p: ReportAgentParams) -> Result<ResultBody, WireError> {
        let mut state = self.state();
        state
            .with_pane(&p.pane_id, |pane, ctx| {
                if pane.agent.is_none() {
                    pane.unseen_work = false;
                }
                pane.agent = Some(p.agent.clone());
                if let Some(job) = pane.jobs.last_mut().filter(|j| !j.is_prompt()) {
                    job.agent = true;
                }
                pane.report(p.state, ctx);
            })
            .ok_or_else(|| pane_not_found(&p.pane_id))?;
        drop(state);
        self.bump();
        Ok(ResultBody::Ok {})
    }

    /// `pane.release_agent`: the agent leaves; the pane is a plain shell pane to herdr again.
    pub(super) fn release_agent(&self, p: ReleaseAgentParams) -> Result<ResultBody, WireError> {
        let mut state = self.state();
        state
            .with_pane(&p.pane_id, |pane, ctx| pane.release(ctx))
            .ok_or_else(|| pane_not_found(&p.pane_id))?;
        drop(state);
        self.bump();
        Ok(ResultBody::Ok {})
    }

    /// [`Fault::CreateFails`]: the answer herdr gives when it cannot open a terminal.
    pub(super) fn refuse_create(&self) -> Result<(), WireError> {
        if self.state().faults.contains(&Fault::CreateFails) {
            return Err(WireError::new("internal_error", "failed to spawn the pane's terminal"));
        }
        Ok(())
    }

    pub(super) fn pane_get(&self, pane_id: &str) -> Result<ResultBody, WireError> {
        let mut state = self.state();
        let pane = state.pane_wire(pane_id).ok_or_else(|| pane_not_found(pane_id))?;
        Ok(ResultBody::PaneInfo { pane })
    }

    /// `pane.read` (outside HERDR.md's subset; served as real herdr v0.8.2 answers it, the
    /// screen's text aside: see [`PaneReadWire`]).
    pub(super) fn pane_read(&self, p: PaneReadParams) -> Result<ResultBody, WireError> {
        let state = self.state();
        let pane = state.pane(&p.pane_id).ok_or_else(|| pane_not_found(&p.pane_id))?;
        let text: String = pane.inputs.iter().map(|r| format!("{}\n", r.text)).collect();
        Ok(ResultBody::PaneRead {
            read: PaneReadWire {
                pane_id: pane.id.clone(),
                workspace_id: pane.workspace_id.clone(),
                tab_id: pane.tab_id.clone(),
                source: p.source,
                format: "text",
                text,
                revision: REVISION,
                truncated: false,
            },
        })
    }

    /// `pane.process_info`: which processes have the pane's terminal (see [`process_info`]);
    /// without a pane, the focused one.
    pub(super) fn pane_process_info(&self, pane_id: Option<&str>) -> Result<ResultBody, WireError> {
        let state = self.state();
        let pane = match pane_id {
            Some(id) => state.pane(id),
            None => state.panes.iter().find(|p| state.is_focused(&p.id)),
        };
        let pane = pane.ok_or_else(|| WireError::new("pane_not_found", "pane not found"))?;
        Ok(ResultBody::PaneProcessInfo {
            process_info: process_info(pane, &state.faults),
        })
    }

    pub(super) fn pane_close(&self, pane_id: &str) -> Result<ResultBody, WireError> {
        if !self.state().remove_pane(pane_id) {
            return Err(pane_not_found(pane_id));
        }
        self.bump();
        Ok(ResultBody::Ok {})
    }

    /// One read of an agent, as `agent.get` answers it.
    pub(super) fn probe_agent(&self, target: &str) -> Result<AgentWire, WireError> {
        let agent_not_found = || WireError::new("agent_not_found", format!("agent target {target} not found"));
        self.state()
            .with_pane(target, |pane, ctx| {
                let agent = pane.agent.clone()?;
                let agent_status = pane.reported_status(ctx);
                Some(AgentWire {
                    terminal_id: pane.terminal_id.clone(),
                    agent,
                    agent_status,
                    workspace_id: pane.workspace_id.clone(),
                    tab_id: pane.tab_id.clone(),
                    pane_id: pane.id.clone(),
                    focused: ctx.focused,
                    state_change_seq: pane.state_change_seq,
                    cwd: pane.cwd.clone(),
                    foreground_cwd: pane.cwd.clone(),
                    revision: REVISION,
                })
            })
            .flatten()
            .ok_or_else(agent_not_found)
    }

    /// `agent.wait`: answers as soon as the status is in `until`, re-checking on every change.
    pub(super) async fn wait_agent(&self, spec: WaitSpec) -> Envelope {
        let mut changes = self.changed.subscribe();
        self.state().with_pane(&spec.target, |pane, ctx| pane.finish_brief(ctx));
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
                    return Envelope::error(spec.id, WireError::new("timeout", "timed out waiting for agent status"));
                }
            }
        }
    }
}

pub(super) async fn accept_loop(shared: Arc<Shared>, listener: UnixListener) {
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
pub(super) async fn connection(shared: Arc<Shared>, stream: UnixStream, mut down: watch::Receiver<u64>) {
    tokio::select! {
        () = serve(&shared, stream) => {}
        _ = down.changed() => tracing::debug!("fake herdr went down; connection dropped"),
    }
    Shared::arm_detections(&shared);
}

/// Reads one request line, answers it (or not, per the faults) and closes.
pub(super) async fn serve(shared: &Shared, stream: UnixStream) {
    let (mut reader, mut write) = stream.into_split();
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
/// A short line is read byte by byte so that nothing after its newline is taken from the socket:
/// a second line stays unread, and closing then resets the client's connection, as herdr's
/// server does.
pub(super) async fn read_request_line<R>(reader: &mut R) -> Option<String>
where
    R: AsyncRead + Unpin,
{
    /// Up to this length a line is read byte by byte; a longer one in chunks.
    const SHORT_LINE: usize = 64 * 1024;
    let read = async {
        let mut buf = Vec::new();
        let mut byte = [0u8; 1];
        while buf.len() < SHORT_LINE {
            if reader.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            buf.push(byte[0]);
            if byte[0] == b'\n' {
                return Some(buf);
            }
        }
        let mut chunk = vec![0u8; SHORT_LINE];
        loop {
            let n = reader.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            if let Some(end) = chunk[..n].iter().position(|b| *b == b'\n') {
                buf.extend_from_slice(&chunk[..=end]);
                return Some(buf);
            }
            buf.extend_from_slice(&chunk[..n]);
            if buf.len() > MAX_LINE_BYTES {
                tracing::debug!("fake herdr: request line too large; closing");
                return None;
            }
        }
    };
    match tokio::time::timeout(INITIAL_REQUEST_TIMEOUT, read).await {
        Ok(Some(buf)) if buf.len() <= MAX_LINE_BYTES + 1 => String::from_utf8(buf).ok(),
        Ok(Some(_)) => {
            tracing::debug!("fake herdr: request line too large; closing");
            None
        }
        Ok(None) | Err(_) => None,
    }
}

/// Resolves when the client closes its side (or the read fails); extra bytes are ignored.
pub(super) async fn until_client_leaves<R: AsyncRead + Unpin>(reader: &mut R) {
    let mut sink = [0u8; 4096];
    loop {
        match reader.read(&mut sink).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}
