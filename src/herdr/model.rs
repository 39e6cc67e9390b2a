//! The fake herdr's model: workspaces, tabs and panes with their agents, and what was recorded.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use super::*;

/// The model: workspaces, tabs, panes, and what was recorded.
#[derive(Default)]
pub(super) struct State {
    pub(super) next_workspace: u64,
    pub(super) workspaces: Vec<Workspace>,
    pub(super) tabs: Vec<Tab>,
    pub(super) panes: Vec<Pane>,
    pub(super) calls: Vec<Call>,
    pub(super) created: Vec<CreatedPane>,
    pub(super) closed_inputs: BTreeMap<String, Vec<InputRecord>>,
    pub(super) faults: HashSet<Fault>,
    /// The last process id handed out (a pane's shell gets the next, its agent the one after).
    pub(super) last_pid: u32,
}

/// The first process id the fake hands out: pids look real but never collide with the suite's.
const FIRST_PID: u32 = 40_000;

pub(super) struct Workspace {
    pub(super) id: String,
    pub(super) label: Option<String>,
    pub(super) next_tab: u64,
    pub(super) next_pane: u64,
}

pub(super) struct Tab {
    pub(super) id: String,
    pub(super) workspace_id: String,
    pub(super) label: Option<String>,
}

pub(super) struct Pane {
    pub(super) id: String,
    pub(super) terminal_id: String,
    pub(super) workspace_id: String,
    pub(super) tab_id: String,
    pub(super) cwd: String,
    pub(super) agent: Option<String>,
    pub(super) status: AgentStatus,
    /// The pid of the pane's shell; the agent it runs, if any, is `shell_pid + 1`.
    pub(super) shell_pid: u32,
    pub(super) reaction: InputReaction,
    /// Next status a flapping read reports: `working` when true, else `idle`.
    pub(super) flap_working: bool,
    /// [`InputReaction::WorksBriefly`]: reads left before the agent is `idle` again.
    pub(super) finish_after_reads: Option<u32>,
    pub(super) inputs: Vec<InputRecord>,
}

impl Pane {
    /// [`InputReaction::WorksBriefly`]: a brief still being worked on is finished now (`agent.wait`
    /// calls this: the agent completes each brief by the time anyone waits for it).
    pub(super) fn finish_brief(&mut self) {
        if self.finish_after_reads.take().is_some() {
            self.report(AgentStatus::Idle);
        }
    }

    /// The agent reports `status`, as `pane.report_agent` does. herdr derives `done` from it: an
    /// agent that was `working` and reports `idle` shows `done` (nobody focuses the fake's panes,
    /// so it is never "seen"); an idle report after anything else shows `idle`.
    pub(super) fn report(&mut self, status: AgentStatus) {
        self.status = match (self.status, status) {
            (AgentStatus::Working, AgentStatus::Idle) => AgentStatus::Done,
            (_, status) => status,
        };
    }

    /// Whether an agent process runs in the foreground: an agent pane whose agent did not die
    /// ([`Fault::AgentGone`]). Otherwise the shell has the terminal and runs what is typed.
    pub(super) fn agent_alive(&self, faults: &HashSet<Fault>) -> bool {
        self.agent.is_some() && !faults.contains(&Fault::AgentGone)
    }

    /// The status a wire read reports, faults applied (a flapping read flips the next one).
    pub(super) fn reported_status(&mut self, faults: &HashSet<Fault>) -> AgentStatus {
        if self.agent.is_none() {
            return AgentStatus::Unknown;
        }
        if let Some(left) = self.finish_after_reads {
            if left == 0 {
                self.finish_after_reads = None;
                self.report(AgentStatus::Idle);
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

    pub(super) fn create_workspace(&mut self, label: Option<String>) -> String {
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
    pub(super) fn create_tab(&mut self, ws: &str, label: Option<String>, cwd: String) -> (String, String) {
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
        let shell_pid = self.last_pid.max(FIRST_PID) + 1;
        self.last_pid = shell_pid + 1;
        self.panes.push(Pane {
            id: pane_id.clone(),
            terminal_id: format!("term_{}", &hex[..14]),
            workspace_id: ws.to_string(),
            tab_id: tab_id.clone(),
            cwd,
            agent: None,
            status: AgentStatus::Unknown,
            shell_pid,
            reaction: InputReaction::default(),
            flap_working: false,
            finish_after_reads: None,
            inputs: Vec::new(),
        });
        (tab_id, pane_id)
    }

    /// Removes a pane, then its tab if empty, then its workspace if empty. False if no such pane.
    pub(super) fn remove_pane(&mut self, id: &str) -> bool {
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
            revision: REVISION,
        })
    }

    pub(super) fn tab_wire(&self, id: &str) -> TabWire {
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

    pub(super) fn workspace_wire(&self, id: &str) -> WorkspaceWire {
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

/// The agent's name as herdr would detect it from the command last submitted into the pane.
pub(super) fn agent_name_from_inputs(inputs: &[InputRecord]) -> String {
    inputs
        .iter()
        .rev()
        .filter(|r| r.outcome == InputOutcome::Submitted)
        .find_map(|r| r.text.split_whitespace().find(|word| !word.contains('=')))
        .map(|program| program.rsplit('/').next().unwrap_or(program).to_string())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "agent".to_string())
}

/// herdr's check of a caller's env: keys non-empty without `=` or NUL, values without NUL.
pub(super) fn validate_env(env: &BTreeMap<String, String>) -> Result<(), WireError> {
    if let Some(key) = env.keys().find(|k| k.is_empty() || k.contains('=') || k.contains('\0')) {
        return Err(WireError::new(
            "invalid_env",
            format!("invalid env key {key:?}: keys must be non-empty and hold no '=' or NUL"),
        ));
    }
    if let Some(key) = env.iter().find(|(_, v)| v.contains('\0')).map(|(k, _)| k) {
        return Err(WireError::new(
            "invalid_env",
            format!("invalid env value for {key:?}: values must hold no NUL"),
        ));
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

/// What `pane.process_info` reports for a pane: the agent in the foreground while one runs,
/// else the bare shell (a plain shell pane, or an agent that died without a release).
pub(super) fn process_info(pane: &Pane, faults: &HashSet<Fault>) -> ProcessInfoWire {
    let cwd = pane.cwd.clone();
    let (pid, name, argv) = match (&pane.agent, pane.agent_alive(faults)) {
        (Some(agent), true) => (pane.shell_pid + 1, agent.clone(), vec![agent.clone()]),
        _ => (pane.shell_pid, SHELL_NAME.to_string(), vec![SHELL_NAME.to_string()]),
    };
    ProcessInfoWire {
        pane_id: pane.id.clone(),
        shell_pid: pane.shell_pid,
        foreground_process_group_id: pid,
        foreground_processes: vec![ProcessWire {
            pid,
            argv0: name.clone(),
            cmdline: argv.join(" "),
            name,
            argv,
            cwd,
        }],
    }
}
