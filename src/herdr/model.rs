//! The fake herdr's model: workspaces, tabs and panes with their agents, and what was recorded.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use super::agent::{AgentStatus, InputReaction, is_recognised_agent};
use super::fault::Fault;
use super::keys::Key;
use super::process::{Command, Job, Proc, SHELL_PATH, parse_command_line, program_name, script_argv};
use super::protocol::{HERDR_BIN_PATH, REVISION, VIEWPORT_ROWS};
use super::record::{Call, CreatedBy, CreatedPane, InputOutcome, InputRecord};
use super::wire::{CreateParams, PaneWire, ProcessInfoWire, ProcessWire, Scroll, TabWire, WireError, WorkspaceWire};

/// The model: workspaces, tabs, panes, and what was recorded.
#[derive(Default)]
pub(super) struct State {
    pub(super) next_workspace: u64,
    pub(super) workspaces: Vec<Workspace>,
    pub(super) tabs: Vec<Tab>,
    pub(super) panes: Vec<Pane>,
    pub(super) calls: Vec<Call>,
    /// Set by [`super::FakeHerdr::forget_calls`]: requests are answered but not kept.
    pub(super) forget_calls: bool,
    pub(super) created: Vec<CreatedPane>,
    pub(super) closed_inputs: BTreeMap<String, Vec<InputRecord>>,
    pub(super) faults: HashSet<Fault>,
    /// The last process id handed out (shells and the jobs started in panes).
    pub(super) last_pid: u32,
    /// herdr's `state_change_seq`: one server-wide count of agent state changes (reports,
    /// releases, exits); each agent record carries the count of its last change.
    pub(super) state_changes: u64,
    /// The focused workspace: the first one created (or one created with `focus: true`); when it
    /// closes, the first workspace left.
    pub(super) focused_workspace: Option<String>,
    /// How long a recognised agent that never reports stays `unknown` (`detect.rs`); `None`:
    /// [`DETECT_IDLE_AFTER`](super::protocol::DETECT_IDLE_AFTER).
    pub(super) detect_after: Option<Duration>,
}

/// The first process id the fake hands out: pids look real but never collide with the suite's.
const FIRST_PID: u32 = 40_000;

pub(super) struct Workspace {
    pub(super) id: String,
    pub(super) label: String,
    pub(super) next_tab: u64,
    pub(super) next_pane: u64,
    /// The active tab: the first one, until a tab is created with `focus: true` or it closes.
    pub(super) active_tab: Option<String>,
}

pub(super) struct Tab {
    pub(super) id: String,
    pub(super) workspace_id: String,
    /// herdr's tab number: the workspace's tab counter when it was made, kept when tabs before it
    /// close (real herdr v0.8.2: `w1:t9` is number 9 with 7 tabs left; 2026-12-06).
    pub(super) number: u64,
    pub(super) label: String,
}

pub(super) struct Pane {
    pub(super) id: String,
    pub(super) terminal_id: String,
    pub(super) workspace_id: String,
    pub(super) tab_id: String,
    pub(super) cwd: String,
    pub(super) agent: Option<String>,
    pub(super) status: AgentStatus,
    /// [`State::state_changes`] at this pane's last agent state change.
    pub(super) state_change_seq: u64,
    /// The agent reported work (or `blocked`, `unknown`) nobody has seen: its next `idle` shows
    /// `done` unless the pane is focused.
    pub(super) unseen_work: bool,
    /// The pid of the pane's shell.
    pub(super) shell_pid: u32,
    /// Jobs started from the prompt, the last one in front; empty: the shell at its prompt.
    pub(super) jobs: Vec<Job>,
    pub(super) reaction: InputReaction,
    /// Next status a flapping read reports: `working` when true, else `idle`.
    pub(super) flap_working: bool,
    /// [`InputReaction::WorksBriefly`]: reads left before the agent is `idle` again.
    pub(super) finish_after_reads: Option<u32>,
    pub(super) inputs: Vec<InputRecord>,
    /// When herdr shows this pane's recognised agent `idle` if it has not reported by then
    /// (`detect.rs`); cleared by any report, release or exit.
    pub(super) detect_idle_at: Option<Instant>,
    /// Whether a timer for [`Pane::detect_idle_at`] was started.
    pub(super) detection_armed: bool,
}

/// What a change to one pane may need besides the pane: the faults, the server-wide counters,
/// and whether the pane is the focused one.
pub(super) struct Ctx<'a> {
    pub(super) faults: &'a HashSet<Fault>,
    pub(super) seq: &'a mut u64,
    pub(super) last_pid: &'a mut u32,
    pub(super) focused: bool,
    pub(super) detect_after: Duration,
}

impl Ctx<'_> {
    pub(super) fn next_pid(&mut self) -> u32 {
        *self.last_pid = (*self.last_pid).max(FIRST_PID) + 1;
        *self.last_pid
    }
}

/// What became of a job that exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exited {
    /// Nothing was running but the pane's shell.
    Nothing,
    /// A job exited; what was under it has the terminal again.
    Job,
    /// The pane's own process exited (an `exec`'d program, or the shell itself): the pane closes.
    PaneProcess,
}

impl Pane {
    /// [`InputReaction::WorksBriefly`]: a brief still being worked on is finished now (`agent.wait`
    /// calls this: the agent completes each brief by the time anyone waits for it).
    pub(super) fn finish_brief(&mut self, ctx: &mut Ctx<'_>) {
        if self.finish_after_reads.take().is_some() {
            self.report(AgentStatus::Idle, ctx);
        }
    }

    /// The agent reports `status` (`pane.report_agent`). herdr derives `done` from it, measured
    /// on v0.8.2: `idle` after a report of `working`, `blocked` or `unknown` (or while `done`)
    /// shows `done` in an unfocused pane — work nobody has seen; in the focused pane, and for an
    /// agent's first report, it shows `idle`.
    pub(super) fn report(&mut self, status: AgentStatus, ctx: &mut Ctx<'_>) {
        self.detect_idle_at = None;
        let before = self.status;
        self.status = match status {
            AgentStatus::Idle if self.unseen_work && !ctx.focused => AgentStatus::Done,
            status => status,
        };
        self.unseen_work = match self.status {
            AgentStatus::Working | AgentStatus::Blocked | AgentStatus::Unknown | AgentStatus::Done => true,
            AgentStatus::Idle => false,
        };
        if self.status != before {
            self.changed(ctx);
        }
    }

    /// Sets what herdr shows for the agent without deriving anything (a test's or a detection's
    /// word): a `done`, `working` or `blocked` agent has work nobody has seen.
    pub(super) fn set_shown(&mut self, status: AgentStatus, ctx: &mut Ctx<'_>) {
        self.detect_idle_at = None;
        let before = self.status;
        self.status = status;
        self.unseen_work = matches!(status, AgentStatus::Working | AgentStatus::Blocked | AgentStatus::Done);
        if self.status != before {
            self.changed(ctx);
        }
    }

    /// Counts an agent state change (`state_change_seq`). Real herdr v0.8.2 counts only changes
    /// of what it shows: a report of the status already shown (`working` again, `idle` while
    /// `done`) leaves the count (`2026-12-04/probe-real.jsonl`: idle, working, working, idle → 1,
    /// 2, 2, 3); callers check that the status moved.
    pub(super) fn changed(&mut self, ctx: &mut Ctx<'_>) {
        *ctx.seq += 1;
        self.state_change_seq = *ctx.seq;
    }

    /// The job in front, faults applied: with [`Fault::AgentGone`] agent processes are dead.
    pub(super) fn front(&self, faults: &HashSet<Fault>) -> Option<&Job> {
        let gone = faults.contains(&Fault::AgentGone);
        self.jobs.iter().rev().find(|j| !(gone && j.agent))
    }

    /// Whether a shell at its prompt has the terminal: the pane's own, or a nested interactive one.
    pub(super) fn shell_in_front(&self, faults: &HashSet<Fault>) -> bool {
        self.front(faults).is_none_or(Job::is_prompt)
    }

    /// Whether the pane's agent process runs in front: an agent pane whose agent program has the
    /// terminal. Otherwise what is typed goes to a shell or to another program.
    pub(super) fn agent_in_front(&self, faults: &HashSet<Fault>) -> bool {
        self.agent.is_some() && self.front(faults).is_some_and(|j| j.agent)
    }

    /// A program started from the prompt takes the terminal (`exec` replaces the shell in
    /// front). A program herdr recognises by name ([`is_recognised_agent`]) becomes the pane's
    /// agent at once, `unknown` until it (or a test) reports, as herdr detects it.
    pub(super) fn start(&mut self, argv: &[String], exec: bool, ctx: &mut Ctx<'_>) {
        if argv.is_empty() {
            return;
        }
        let under_pid = self.front(ctx.faults).map_or(self.shell_pid, Job::pgid);
        let mut leader = Proc::new(if exec { under_pid } else { ctx.next_pid() }, argv);
        if let Some(script) = script_argv(argv) {
            // A script runs under its interpreter, listed by the script's name.
            leader.argv = script;
        }
        let mut job = Job {
            procs: vec![leader],
            exec,
            agent: false,
            ignores_input: false,
        };
        let name = job.name().to_string();
        if exec && !self.jobs.is_empty() {
            // The nested shell in front is replaced by the program.
            self.jobs.pop();
        }
        if is_recognised_agent(&name) && self.agent.is_none() {
            job.agent = true;
            self.agent = Some(name);
            // A new agent to herdr, shown `unknown`: not a change of what herdr shows, so not
            // counted (real herdr v0.8.2, 2026-12-06: the first count is its detection, `idle`).
            self.status = AgentStatus::Unknown;
            self.unseen_work = false;
            // herdr shows it `idle` after a while unless it reports first (`detect.rs`).
            self.detect_idle_at = Some(Instant::now() + ctx.detect_after);
            self.detection_armed = false;
        }
        self.jobs.push(job);
    }

    /// The job in front exits and what was under it has the terminal again. The pane's agent
    /// exiting is [`Pane::agent_exits`].
    pub(super) fn exit_front(&mut self, ctx: &mut Ctx<'_>) -> Exited {
        match self.jobs.last() {
            None => Exited::PaneProcess,
            Some(job) if job.agent => {
                let exited = self.agent_exits(ctx);
                if exited == Exited::Job {
                    self.read_queued_input(ctx);
                }
                exited
            }
            Some(job) if job.exec && self.jobs.len() == 1 => Exited::PaneProcess,
            Some(_) => {
                self.jobs.pop();
                self.read_queued_input(ctx);
                Exited::Job
            }
        }
    }

    /// Lines waiting in the terminal's input queue ([`InputOutcome::Unread`]) reach what holds
    /// the terminal now: a shell at its prompt runs them ([`InputOutcome::RanInShell`]), the
    /// agent or another program reads them ([`InputOutcome::Submitted`]); a program that never
    /// reads leaves them waiting.
    pub(super) fn read_queued_input(&mut self, ctx: &mut Ctx<'_>) {
        for i in 0..self.inputs.len() {
            if self.inputs[i].outcome != InputOutcome::Unread {
                continue;
            }
            if self.shell_in_front(ctx.faults) {
                let text = self.inputs[i].text.clone();
                self.run_in_shell(&text, ctx);
                self.inputs[i].outcome = InputOutcome::RanInShell;
            } else if self.front(ctx.faults).is_some_and(|j| !j.ignores_input) {
                self.inputs[i].outcome = InputOutcome::Submitted;
            }
        }
    }

    /// ctrl+c and ctrl+z flush the terminal's input queue (a tty's `ISIG` default).
    fn flush_queued_input(&mut self) {
        for r in &mut self.inputs {
            if r.outcome == InputOutcome::Unread {
                r.outcome = InputOutcome::Flushed;
            }
        }
    }

    /// The agent's process exits without releasing the pane; what was under it (the shell) has
    /// the terminal. herdr drops an agent it recognises by name to `unknown` (measured: within
    /// 2 s; the fake at once) and forgets it (`agent.*` answers `agent_not_found`); an agent it
    /// does not recognise keeps its last status.
    pub(super) fn agent_exits(&mut self, ctx: &mut Ctx<'_>) -> Exited {
        let Some(index) = self.jobs.iter().rposition(|j| j.agent) else {
            return Exited::Nothing;
        };
        let job = self.jobs.remove(index);
        let recognised = is_recognised_agent(job.name()) || self.agent.as_deref().is_some_and(is_recognised_agent);
        if recognised && self.agent.is_some() {
            self.forget_agent(ctx);
        }
        if job.exec && index == 0 {
            return Exited::PaneProcess;
        }
        Exited::Job
    }

    /// Text submitted into the pane (`enter`, or a newline in the text) reaches what is in front:
    /// a shell at its prompt runs it as a command line ([`InputOutcome::RanInShell`]); the
    /// pane's agent reads it and reacts ([`InputReaction`]: only its own report changes the
    /// status); any other program reads it.
    pub(super) fn submit(&mut self, text: &str, ctx: &mut Ctx<'_>) -> InputOutcome {
        if ctx.faults.contains(&Fault::SwallowInput) {
            return InputOutcome::Swallowed;
        }
        if self.shell_in_front(ctx.faults) {
            self.run_in_shell(text, ctx);
            return InputOutcome::RanInShell;
        }
        if self.front(ctx.faults).is_some_and(|j| j.ignores_input) {
            return InputOutcome::Unread;
        }
        if !self.agent_in_front(ctx.faults) || !self.status.is_ready() {
            return InputOutcome::Submitted;
        }
        match self.reaction {
            InputReaction::StayIdle => return InputOutcome::Swallowed,
            InputReaction::NeverReports => {}
            InputReaction::StartWorking => self.report(AgentStatus::Working, ctx),
            InputReaction::WorksBriefly => {
                self.report(AgentStatus::Working, ctx);
                // Two reads of `working` (the gateway's submit check, a heartbeat's status read),
                // then `idle`.
                self.finish_after_reads = Some(2);
            }
        }
        InputOutcome::Submitted
    }

    /// The shell at the prompt runs each line until a program takes the terminal.
    fn run_in_shell(&mut self, text: &str, ctx: &mut Ctx<'_>) {
        for line in text.split(['\n', '\r']) {
            if !self.shell_in_front(ctx.faults) {
                break;
            }
            match parse_command_line(line) {
                Command::Finishes => {}
                // A nested shell ends; the pane's own shell exiting is not modelled.
                Command::Exit => {
                    if self.jobs.last().is_some_and(|j| j.is_prompt() && !j.exec) {
                        self.jobs.pop();
                    }
                }
                Command::Run(argv) => self.start(&argv, false, ctx),
                Command::Exec(argv) => self.start(&argv, true, ctx),
            }
        }
    }

    /// A control key reaches the job in front: ctrl+c ends a program, the agent included (real
    /// herdr v0.8.2, 2026-12-06: the stand-in agent and a `claude` ended at ctrl+c; herdr then
    /// shows a recognised agent `unknown`, another keeps its last status), not a shell at its
    /// prompt; ctrl+z stops a program other than the agent (the shell has the terminal again);
    /// ctrl+d (end of input) ends a program that reads its terminal — a nested shell at its
    /// prompt, `cat`, `python3 -q` (2026-12-06, cases n3/n6) — not the agent. Both ctrl+c and ctrl+z flush the input queue.
    pub(super) fn press(&mut self, key: &Key, ctx: &mut Ctx<'_>) {
        if key.modifiers != ["ctrl"] {
            return;
        }
        let Some(front) = self.front(ctx.faults) else {
            return;
        };
        let agent = front.agent;
        let ends = match key.key.as_str() {
            "c" => !front.is_prompt() && !front.exec,
            "z" => !agent && !front.is_prompt() && !front.exec,
            // End of input: a program reading its terminal (a nested shell, `cat`, a REPL) ends.
            "d" => !agent && !front.ignores_input && !front.exec,
            _ => false,
        };
        if matches!(key.key.as_str(), "c" | "z") {
            self.flush_queued_input();
        }
        if !ends {
            return;
        }
        if agent {
            self.agent_exits(ctx);
        } else if self.jobs.last().is_some_and(|j| !j.agent) {
            self.jobs.pop();
        }
    }

    /// The agent leaves the pane (`pane.release_agent`): a plain shell pane to herdr again,
    /// `unknown`; its process, if any, keeps running.
    pub(super) fn release(&mut self, ctx: &mut Ctx<'_>) {
        for job in &mut self.jobs {
            job.agent = false;
        }
        self.forget_agent(ctx);
    }

    /// herdr forgets the pane's agent: `unknown`, no `agent`, `agent.*` answers
    /// `agent_not_found`.
    fn forget_agent(&mut self, ctx: &mut Ctx<'_>) {
        self.detect_idle_at = None;
        self.agent = None;
        self.status = AgentStatus::Unknown;
        self.unseen_work = false;
        self.finish_after_reads = None;
        self.changed(ctx);
    }

    /// The status a wire read reports, faults applied (a flapping read flips the next one).
    pub(super) fn reported_status(&mut self, ctx: &mut Ctx<'_>) -> AgentStatus {
        if self.agent.is_none() {
            return AgentStatus::Unknown;
        }
        if let Some(left) = self.finish_after_reads {
            if left == 0 {
                self.finish_after_reads = None;
                self.report(AgentStatus::Idle, ctx);
            } else {
                self.finish_after_reads = Some(left - 1);
            }
        }
        if ctx.faults.contains(&Fault::StuckWorking) {
            return AgentStatus::Working;
        }
        if ctx.faults.contains(&Fault::Flapping) {
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
    pub(super) fn shown_status(&self, faults: &HashSet<Fault>) -> AgentStatus {
        match (&self.agent, faults.contains(&Fault::StuckWorking)) {
            (None, _) => AgentStatus::Unknown,
            (Some(_), true) => AgentStatus::Working,
            (Some(_), false) => self.status,
        }
    }
}

impl State {
    pub(super) fn pane(&self, id: &str) -> Option<&Pane> {
        self.panes.iter().find(|p| p.id == id)
    }

    pub(super) fn pane_mut(&mut self, id: &str) -> Option<&mut Pane> {
        self.panes.iter_mut().find(|p| p.id == id)
    }

    /// Runs `change` on a pane with what it may need ([`Ctx`]); `None` if no such pane.
    pub(super) fn with_pane<R>(&mut self, id: &str, change: impl FnOnce(&mut Pane, &mut Ctx<'_>) -> R) -> Option<R> {
        let focused = self.is_focused(id);
        let State {
            panes,
            faults,
            state_changes,
            last_pid,
            detect_after,
            ..
        } = self;
        let pane = panes.iter_mut().find(|p| p.id == id)?;
        let mut ctx = Ctx {
            faults,
            seq: state_changes,
            last_pid,
            focused,
            detect_after: detect_after.unwrap_or(super::protocol::DETECT_IDLE_AFTER),
        };
        Some(change(pane, &mut ctx))
    }

    /// Whether the pane is the focused one: the root pane of the focused workspace's active tab
    /// (the fake's tabs hold one pane each).
    pub(super) fn is_focused(&self, pane_id: &str) -> bool {
        self.pane(pane_id).is_some_and(|p| self.is_active_tab(&p.tab_id))
    }

    /// Whether the tab is the active tab of the focused workspace.
    pub(super) fn is_active_tab(&self, tab_id: &str) -> bool {
        self.focused_workspace
            .as_deref()
            .and_then(|ws| self.workspaces.iter().find(|w| w.id == ws))
            .is_some_and(|w| w.active_tab.as_deref() == Some(tab_id))
    }

    /// A new workspace (no tab yet). herdr labels it after its directory: `~` for `$HOME` (the
    /// fake's directory), else the directory's name. The first one (or one asked to) has focus.
    pub(super) fn create_workspace(&mut self, label: Option<String>, cwd: &str, home: &str, focus: bool) -> String {
        self.next_workspace += 1;
        let id = format!("w{}", public_number(self.next_workspace));
        let label = label.unwrap_or_else(|| {
            if cwd == home {
                "~".to_string()
            } else {
                Path::new(cwd)
                    .file_name()
                    .map_or_else(|| cwd.to_string(), |n| n.to_string_lossy().into_owned())
            }
        });
        self.workspaces.push(Workspace {
            id: id.clone(),
            label,
            next_tab: 0,
            next_pane: 0,
            active_tab: None,
        });
        if focus || self.focused_workspace.is_none() {
            self.focused_workspace = Some(id.clone());
        }
        id
    }

    /// A new tab in workspace `ws` with one shell pane; returns (tab id, pane id). herdr labels
    /// an unlabelled tab with its number. The workspace's first tab (or one asked to) is active.
    pub(super) fn create_tab(&mut self, ws: &str, label: Option<String>, cwd: String, focus: bool) -> (String, String) {
        let (tab_id, pane_id, number) = match self.workspaces.iter_mut().find(|w| w.id == ws) {
            Some(w) => {
                w.next_tab += 1;
                w.next_pane += 1;
                let tab_id = format!("{ws}:t{}", public_number(w.next_tab));
                if focus || w.active_tab.is_none() {
                    w.active_tab = Some(tab_id.clone());
                }
                (tab_id, format!("{ws}:p{}", public_number(w.next_pane)), w.next_tab)
            }
            // Callers pass an existing workspace; keep ids well-formed regardless.
            None => (format!("{ws}:t0"), format!("{ws}:p0"), 0),
        };
        if focus {
            self.focused_workspace = Some(ws.to_string());
        }
        self.tabs.push(Tab {
            id: tab_id.clone(),
            workspace_id: ws.to_string(),
            number,
            label: label.unwrap_or_else(|| number.to_string()),
        });
        let hex = uuid::Uuid::new_v4().simple().to_string();
        let shell_pid = self.last_pid.max(FIRST_PID) + 1;
        self.last_pid = shell_pid;
        self.panes.push(Pane {
            id: pane_id.clone(),
            terminal_id: format!("term_{}", &hex[..14]),
            workspace_id: ws.to_string(),
            tab_id: tab_id.clone(),
            cwd,
            agent: None,
            status: AgentStatus::Unknown,
            state_change_seq: 0,
            unseen_work: false,
            shell_pid,
            jobs: Vec::new(),
            reaction: InputReaction::default(),
            flap_working: false,
            finish_after_reads: None,
            inputs: Vec::new(),
            detect_idle_at: None,
            detection_armed: false,
        });
        (tab_id, pane_id)
    }

    /// Removes a pane, then its tab if empty, then its workspace if empty. False if no such pane.
    /// A closed active tab passes the focus to the workspace's first tab left; a closed focused
    /// workspace to the first workspace left.
    pub(super) fn remove_pane(&mut self, id: &str) -> bool {
        let Some(index) = self.panes.iter().position(|p| p.id == id) else {
            return false;
        };
        let pane = self.panes.remove(index);
        if !self.panes.iter().any(|p| p.tab_id == pane.tab_id) {
            self.tabs.retain(|t| t.id != pane.tab_id);
            let first_tab = self
                .tabs
                .iter()
                .find(|t| t.workspace_id == pane.workspace_id)
                .map(|t| t.id.clone());
            if let Some(w) = self.workspaces.iter_mut().find(|w| w.id == pane.workspace_id)
                && w.active_tab.as_deref() == Some(pane.tab_id.as_str())
            {
                w.active_tab = first_tab.clone();
            }
            if first_tab.is_none() {
                self.workspaces.retain(|w| w.id != pane.workspace_id);
                if self.focused_workspace.as_deref() == Some(pane.workspace_id.as_str()) {
                    self.focused_workspace = self.workspaces.first().map(|w| w.id.clone());
                }
            }
        }
        self.closed_inputs.insert(pane.id, pane.inputs);
        true
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn record_created(
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

    pub(super) fn pane_wire(&mut self, id: &str) -> Option<PaneWire> {
        self.with_pane(id, |pane, ctx| PaneWire {
            pane_id: pane.id.clone(),
            terminal_id: pane.terminal_id.clone(),
            workspace_id: pane.workspace_id.clone(),
            tab_id: pane.tab_id.clone(),
            focused: ctx.focused,
            cwd: pane.cwd.clone(),
            foreground_cwd: pane.cwd.clone(),
            agent: pane.agent.clone(),
            agent_status: pane.reported_status(ctx),
            scroll: Scroll {
                offset_from_bottom: 0,
                max_offset_from_bottom: 0,
                viewport_rows: VIEWPORT_ROWS,
            },
            revision: REVISION,
        })
    }

    pub(super) fn tab_wire(&self, id: &str) -> TabWire {
        let tab = self.tabs.iter().find(|t| t.id == id);
        let workspace_id = tab.map(|t| t.workspace_id.clone()).unwrap_or_default();
        let number = tab.map_or(0, |t| t.number as usize);
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
            label: tab.map(|t| t.label.clone()).unwrap_or_default(),
            focused: self.is_active_tab(id),
            pane_count: statuses.len(),
            agent_status: aggregate(&statuses),
        }
    }

    pub(super) fn workspace_wire(&self, id: &str) -> WorkspaceWire {
        let ws = self.workspaces.iter().find(|w| w.id == id);
        let number = self.workspaces.iter().position(|w| w.id == id).map_or(0, |i| i + 1);
        let tab_count = self.tabs.iter().filter(|t| t.workspace_id == id).count();
        let statuses: Vec<AgentStatus> = self
            .panes
            .iter()
            .filter(|p| p.workspace_id == id)
            .map(|p| p.shown_status(&self.faults))
            .collect();
        WorkspaceWire {
            workspace_id: id.to_string(),
            number,
            label: ws.map(|w| w.label.clone()).unwrap_or_default(),
            focused: self.focused_workspace.as_deref() == Some(id),
            pane_count: statuses.len(),
            tab_count,
            active_tab_id: ws.and_then(|w| w.active_tab.clone()),
            agent_status: aggregate(&statuses),
        }
    }
}

/// herdr's alphabet for the numbers in its ids (`w1:p9`, then `w1:pA` … `w1:pH`; no `I`, `L`, `O`,
/// `U`): real herdr v0.8.2, 2026-12-06. Beyond its 32 symbols the number is written in bijective
/// base 32 (each symbol worth its place, `0` the 32nd), an assumption no recording reaches.
const PUBLIC_DIGITS: &[u8; 32] = b"123456789ABCDEFGHJKMNPQRSTVWXYZ0";

/// `n` (from 1) as herdr writes it in an id.
pub(super) fn public_number(n: u64) -> String {
    let mut n = n;
    let mut out = Vec::new();
    while n > 0 {
        let d = (n - 1) % 32;
        out.push(PUBLIC_DIGITS[d as usize]);
        n = (n - 1) / 32;
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// The status a tab or workspace shows for its panes: the most urgent one.
pub(super) fn aggregate(statuses: &[AgentStatus]) -> AgentStatus {
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

/// The agent's name for a pane that reports a status with no agent known: the program in front
/// (herdr names an agent after its process), else the command last run in the pane, else `agent`.
pub(super) fn agent_name_for(pane: &Pane, faults: &HashSet<Fault>) -> String {
    if let Some(job) = pane.front(faults).filter(|j| !j.is_prompt()) {
        return job.name().to_string();
    }
    pane.inputs
        .iter()
        .rev()
        .filter(|r| matches!(r.outcome, InputOutcome::Submitted | InputOutcome::RanInShell))
        .find_map(|r| r.text.split_whitespace().find(|word| !word.contains('=')))
        .map(program_name)
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "agent".to_string())
}

/// herdr's check of a caller's env: keys non-empty without `=` or NUL, values without NUL (the
/// messages as real herdr v0.8.2 words them).
pub(super) fn validate_env(env: &BTreeMap<String, String>) -> Result<(), WireError> {
    for (key, value) in env {
        let problem = if key.is_empty() {
            Some("env key must not be empty".to_string())
        } else if key.contains('=') {
            Some(format!("env key {key} must not contain '='"))
        } else if key.contains('\0') {
            Some(format!("env key {key} must not contain NUL bytes"))
        } else if value.contains('\0') {
            Some(format!("env value for {key} must not contain NUL bytes"))
        } else {
            None
        };
        if let Some(message) = problem {
            return Err(WireError::new("invalid_env", message));
        }
    }
    Ok(())
}

/// The pane's working directory as herdr sets it: the `cwd` asked for when it is a directory,
/// else (absent, or a path that does not exist) the server's `$HOME`, silently.
pub(super) fn pane_cwd(asked: Option<&str>, home: &str) -> String {
    match asked {
        Some(dir) if Path::new(dir).is_dir() => dir.to_string(),
        _ => home.to_string(),
    }
}

/// What `pane.process_info` reports for a pane: every process of the job in front, or the pane's
/// shell at its prompt (`argv ["/bin/bash"]`) when nothing else runs or the agent died
/// ([`Fault::AgentGone`]).
pub(super) fn process_info(pane: &Pane, faults: &HashSet<Fault>) -> ProcessInfoWire {
    let shell = [Proc::new(pane.shell_pid, &[SHELL_PATH.to_string()])];
    let (group, procs) = match pane.front(faults) {
        Some(job) => (job.pgid(), job.procs.as_slice()),
        None => (pane.shell_pid, shell.as_slice()),
    };
    ProcessInfoWire {
        pane_id: pane.id.clone(),
        shell_pid: pane.shell_pid,
        foreground_process_group_id: group,
        foreground_processes: procs
            .iter()
            .map(|p| ProcessWire {
                pid: p.pid,
                name: p.name.clone(),
                argv: p.argv.clone(),
                cmdline: p.cmdline(),
                cwd: pane.cwd.clone(),
            })
            .collect(),
    }
}
