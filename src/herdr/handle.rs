//! The handle tests hold: [`FakeHerdr::start`] binds the socket and serves; the methods drive the
//! agents (panes, statuses, reactions, faults) and read back what the gateway did (calls, inputs,
//! created panes); the server stops with [`FakeHerdr::stop`] or the last clone.

use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::agent::{AgentStatus, InputReaction};
use super::error::HerdrError;
use super::fault::Fault;
use super::model::{Ctx, Exited, Pane, State, agent_name_for};
use super::process::{Job, Proc};
use super::record::{Call, CreatedPane, InputOutcome, InputRecord};
use super::server::Shared;
use super::socket_path::socket_path_for;

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

    /// Adds an agent pane (an agent already running in front of the pane's shell, `argv
    /// [agent]`) in a new tab of the first workspace. Without a workspace, one is created first
    /// as `workspace.create` makes it: its root pane (a plain shell, the focused pane) stays, so
    /// the agent's pane is never the focused one. Returns its pane id `wN:pK`.
    pub fn add_agent_pane(&self, agent: &str, status: AgentStatus) -> String {
        self.add_pane(Some(agent), status)
    }

    /// Adds a plain shell pane (no agent, `agent_status: "unknown"`) like
    /// [`FakeHerdr::add_agent_pane`] does. Returns its pane id.
    pub fn add_shell_pane(&self) -> String {
        self.add_pane(None, AgentStatus::Unknown)
    }

    fn add_pane(&self, agent: Option<&str>, status: AgentStatus) -> String {
        let home = self.shared.default_cwd.clone();
        let mut state = self.shared.state();
        let ws = match state.workspaces.first() {
            Some(ws) => ws.id.clone(),
            None => {
                let ws = state.create_workspace(None, &home, &home, false);
                state.create_tab(&ws, None, home.clone(), false);
                ws
            }
        };
        let (_, pane_id) = state.create_tab(&ws, None, home, false);
        if let Some(agent) = agent {
            state.with_pane(&pane_id, |pane, ctx| {
                pane.jobs.push(Job {
                    procs: vec![Proc::new(ctx.next_pid(), &[agent.to_string()])],
                    exec: false,
                    agent: true,
                    ignores_input: false,
                });
                pane.agent = Some(agent.to_string());
                pane.set_shown(status, ctx);
            });
        }
        drop(state);
        self.shared.bump();
        pane_id
    }

    /// Makes `pane_id` an agent pane running `agent` in `status` (e.g. after the gateway typed
    /// the agent's command into a pane it created): the program in front becomes the agent, or
    /// the agent starts in front if a shell has the terminal. Ignored, with a warning, for an
    /// unknown pane.
    pub fn make_agent(&self, pane_id: &str, agent: &str, status: AgentStatus) {
        self.update_pane(pane_id, |pane, ctx| {
            if pane.shell_in_front(ctx.faults) {
                pane.start(&[agent.to_string()], false, ctx);
            }
            if let Some(job) = pane.jobs.last_mut() {
                job.agent = true;
            }
            pane.agent = Some(agent.to_string());
            pane.set_shown(status, ctx);
        });
    }

    /// The agent in a pane reports `status` (herdr's `pane.report_agent`) and `agent.wait` callers
    /// wake. On a shell pane a status other than `unknown` makes it an agent pane, named after the
    /// program in front (else the command last run in it, else `agent`); `unknown` on a shell
    /// pane changes nothing. As in herdr, `idle` after `working`, `blocked` or `unknown` shows
    /// `done` unless the pane is focused, and an agent that reports `unknown` stays an agent
    /// (`agent.wait` waits on it); [`FakeHerdr::release_agent`] makes the pane a shell again.
    /// Ignored, with a warning, for an unknown pane.
    pub fn set_status(&self, pane_id: &str, status: AgentStatus) {
        self.update_pane(pane_id, |pane, ctx| {
            if pane.agent.is_none() {
                if status == AgentStatus::Unknown {
                    return;
                }
                pane.agent = Some(agent_name_for(pane, ctx.faults));
                pane.unseen_work = false;
                if let Some(job) = pane.jobs.last_mut().filter(|j| !j.is_prompt()) {
                    job.agent = true;
                }
            }
            pane.report(status, ctx);
        });
    }

    /// The agent leaves the pane (herdr's `pane.release_agent`): a plain shell pane again,
    /// `unknown`, and `agent.*` answers `agent_not_found` at once. Ignored, with a warning, for
    /// an unknown pane.
    pub fn release_agent(&self, pane_id: &str) {
        self.update_pane(pane_id, |pane, ctx| pane.release(ctx));
    }

    /// A program started from the pane's prompt takes the terminal, in a process group of its
    /// own, as if its command line had been typed: `["sleep","1000"]`; `["bash"]` is a nested
    /// interactive shell (a prompt again: what is typed next is run by it); `["bash","script.sh"]`
    /// a script (its leader, named `bash`, with the script in `argv`); `["exec", …]` replaces
    /// the shell in front (the pane's process *is* the program: `shell_pid ==
    /// foreground_process_group_id`). A program herdr recognises by name
    /// ([`RECOGNISED_AGENTS`](super::RECOGNISED_AGENTS)) becomes the pane's agent, `unknown` until
    /// it reports. Ignored, with a warning, for an unknown pane.
    pub fn run_program(&self, pane_id: &str, argv: &[&str]) {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        self.update_pane(pane_id, |pane, ctx| match argv.split_first() {
            Some((first, rest)) if first == "exec" => pane.start(rest, true, ctx),
            _ => pane.start(&argv, false, ctx),
        });
    }

    /// Like [`FakeHerdr::run_program`] for a job of several processes: the first `argv` is the
    /// group's leader (`["bash","script.sh"]`), the others what it runs (`["sleep","1000"]`); all
    /// are listed by `pane.process_info`. Ignored, with a warning, for an unknown pane.
    pub fn run_job(&self, pane_id: &str, group: &[&[&str]]) {
        let group: Vec<Vec<String>> = group
            .iter()
            .map(|argv| argv.iter().map(|a| a.to_string()).collect())
            .collect();
        self.update_pane(pane_id, |pane, ctx| {
            let Some((leader, rest)) = group.split_first() else {
                return;
            };
            pane.start(leader, false, ctx);
            for argv in rest {
                let pid = ctx.next_pid();
                if let Some(job) = pane.jobs.last_mut() {
                    job.procs.push(Proc::new(pid, argv));
                }
            }
        });
    }

    /// A shell script run directly from the prompt (`<dir>/claude 40`, its first line
    /// `#!/bin/bash`), with `children` it runs in its group: real herdr v0.8.2 (2026-12-06) lists
    /// the leader by the script's name with the interpreter's `argv` (`name: "claude"`, `argv:
    /// ["/bin/bash", "<dir>/claude", "40"]`) and, by that name, takes it for a recognised agent.
    /// Ignored, with a warning, for an unknown pane.
    pub fn run_script(&self, pane_id: &str, script: &str, args: &[&str], children: &[&[&str]]) {
        let argv: Vec<String> = std::iter::once(script)
            .chain(args.iter().copied())
            .map(str::to_string)
            .collect();
        let children: Vec<Vec<String>> = children
            .iter()
            .map(|c| c.iter().map(|a| a.to_string()).collect())
            .collect();
        self.update_pane(pane_id, |pane, ctx| {
            pane.start(&argv, false, ctx);
            let pids: Vec<u32> = children.iter().map(|_| ctx.next_pid()).collect();
            if let Some(job) = pane.jobs.last_mut() {
                if let Some(leader) = job.procs.first_mut() {
                    leader.argv = std::iter::once(super::process::SHELL_PATH.to_string())
                        .chain(argv.iter().cloned())
                        .collect();
                }
                for (pid, c) in pids.into_iter().zip(&children) {
                    job.procs.push(Proc::new(pid, c));
                }
            }
        });
    }

    /// [`FakeHerdr::run_job`] for a job that never reads its terminal, such as `bash sleeper.sh`
    /// running `sleep 1000`: herdr's status stays what it was, and lines submitted meanwhile wait
    /// in the terminal's input queue ([`InputOutcome::Unread`]) until the job ends
    /// ([`FakeHerdr::exit_program`]) and the shell at its prompt runs them
    /// ([`InputOutcome::RanInShell`]), as real herdr v0.8.2 showed; ctrl+c or ctrl+z flushes them
    /// ([`InputOutcome::Flushed`]). Ignored, with a warning, for an unknown pane.
    pub fn run_job_ignoring_input(&self, pane_id: &str, group: &[&[&str]]) {
        self.run_job(pane_id, group);
        self.update_pane(pane_id, |pane, _| {
            if let Some(job) = pane.jobs.last_mut() {
                job.ignores_input = true;
            }
        });
    }

    /// The job in front runs another program in its group, as a script runs its next command
    /// (`bash sleeper.sh` running `sleep 25`): `pane.process_info` lists it after the leader.
    /// Ignored, with a warning, for an unknown pane.
    pub fn job_runs(&self, pane_id: &str, argv: &[&str]) {
        let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
        self.update_pane(pane_id, |pane, ctx| {
            let pid = ctx.next_pid();
            if let Some(job) = pane.jobs.last_mut() {
                job.procs.push(Proc::new(pid, &argv));
            }
        });
    }

    /// The program in front, not otherwise reading its terminal, reads the oldest line waiting
    /// there ([`InputOutcome::Submitted`]); the rest keep waiting. Ignored, with a warning, for an
    /// unknown pane.
    pub fn read_one_line(&self, pane_id: &str) {
        self.update_pane(pane_id, |pane, _| {
            if let Some(line) = pane.inputs.iter_mut().find(|r| r.outcome == InputOutcome::Unread) {
                line.outcome = InputOutcome::Submitted;
            }
        });
    }

    /// The agent in front stops reading its terminal, herdr's status unchanged (real herdr v0.8.2,
    /// 2026-12-06: a program named `claude` that ignores its input, shown `idle`): what is
    /// submitted now waits in the terminal's input queue ([`InputOutcome::Unread`]) and is run by
    /// the shell once the program ends ([`FakeHerdr::exit_program`]). Ignored, with a warning, for
    /// an unknown pane.
    pub fn stop_reading(&self, pane_id: &str) {
        self.update_pane(pane_id, |pane, _| {
            if let Some(job) = pane.jobs.last_mut() {
                job.ignores_input = true;
            }
        });
    }

    /// The program in front reads its terminal again: the lines waiting there reach it
    /// ([`InputOutcome::Submitted`]). Ignored, with a warning, for an unknown pane.
    pub fn read_again(&self, pane_id: &str) {
        self.update_pane(pane_id, |pane, ctx| {
            if let Some(job) = pane.jobs.last_mut() {
                job.ignores_input = false;
            }
            pane.read_queued_input(ctx);
        });
    }

    /// How long a program herdr recognises as an agent (`claude`), that never reports, stays
    /// `unknown` before herdr shows it `idle` ([`DETECT_IDLE_AFTER`](super::DETECT_IDLE_AFTER) by
    /// default, as measured); for a test that plays time faster. Applies to programs started
    /// from now on.
    pub fn set_detection_delay(&self, after: std::time::Duration) {
        self.shared.state().detect_after = Some(after);
    }

    /// The program in front reports `status` as agent `agent`, as `pane.report_agent {source:
    /// "custom:<agent>", agent, state}` does: the program in front becomes the pane's agent (an
    /// agent herdr does not recognise by name keeps its last status when it exits). Ignored, with
    /// a warning, for an unknown pane.
    pub fn report_agent(&self, pane_id: &str, agent: &str, status: AgentStatus) {
        self.update_pane(pane_id, |pane, ctx| {
            if pane.agent.is_none() {
                pane.unseen_work = false;
            }
            pane.agent = Some(agent.to_string());
            for job in &mut pane.jobs {
                job.agent = false;
            }
            if let Some(job) = pane.jobs.last_mut().filter(|j| !j.is_prompt()) {
                job.agent = true;
            }
            pane.report(status, ctx);
        });
    }

    /// The program in front exits; what was under it (a nested shell, the agent, the pane's
    /// shell) has the terminal again. The agent in front exiting is [`FakeHerdr::agent_exits`];
    /// an `exec`'d program exiting ends the pane's process: the pane closes. Ignored, with a
    /// warning, for an unknown pane.
    pub fn exit_program(&self, pane_id: &str) {
        let exited = self.update_pane(pane_id, |pane, ctx| pane.exit_front(ctx));
        if exited == Some(Exited::PaneProcess) {
            self.close_pane(pane_id);
        }
    }

    /// The pane's agent process exits without releasing the pane (a crash, a kill); the shell under
    /// it has the terminal, and text typed now is run by that shell ([`InputOutcome::RanInShell`]).
    /// An agent herdr recognises by name ([`RECOGNISED_AGENTS`](super::RECOGNISED_AGENTS), e.g.
    /// `claude`) turns the pane `unknown` at once (real herdr v0.8.2: within 2 s) and `agent.*`
    /// answers `agent_not_found`; any other keeps showing its last status and name
    /// ([`Fault::AgentGone`] for one pane, for good). Ignored, with a warning, for an unknown pane.
    pub fn agent_exits(&self, pane_id: &str) {
        let exited = self.update_pane(pane_id, |pane, ctx| pane.agent_exits(ctx));
        if exited == Some(Exited::PaneProcess) {
            self.close_pane(pane_id);
        }
    }

    fn update_pane<R>(&self, pane_id: &str, change: impl FnOnce(&mut Pane, &mut Ctx<'_>) -> R) -> Option<R> {
        let mut state = self.shared.state();
        let result = state.with_pane(pane_id, change);
        drop(state);
        Shared::arm_detections(&self.shared);
        match result {
            Some(_) => self.shared.bump(),
            None => tracing::warn!(pane_id, "fake herdr: no such pane; change ignored"),
        }
        result
    }

    /// A pane's true status (what herdr derived from the agent's last report, or what a test
    /// set), ignoring faults; `None` when the pane does not exist (never did, or closed).
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

    /// From now on requests are answered but not kept in [`FakeHerdr::calls`]: for a benchmark
    /// that runs thousands of agents for an hour, whose gateways read every agent's status every
    /// few seconds (kept, those reads grew the benchmark by gigabytes). Inputs
    /// ([`FakeHerdr::inputs`]) and created panes are still kept. Scenarios never call this.
    pub fn forget_calls(&self) {
        let mut state = self.shared.state();
        state.forget_calls = true;
        state.calls = Vec::new();
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

    /// Texts a shell at its prompt ran as command lines: typed into a plain shell pane (an
    /// agent's launch command), into a nested shell, or after the pane's agent died
    /// ([`FakeHerdr::agent_exits`], [`Fault::AgentGone`]), in order.
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

    /// Sets what the agent program in `pane_id` does when it reads a submitted line while it is
    /// idle/done (default [`InputReaction::StartWorking`]: it reports `working`). Ignored, with a
    /// warning, for an unknown pane.
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
