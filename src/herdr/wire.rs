//! The fake herdr's wire codec: the request and answer shapes of herdr 0.8.2's socket API
//! (newline-delimited JSON), and how a line that does not parse is answered.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::agent::AgentStatus;
use super::protocol::{HERDR_METHODS, METHODS};

/// A parsed request line.
pub(super) struct Request {
    pub(super) id: String,
    pub(super) method: String,
    pub(super) params: Value,
    /// Where herdr reports an error in the params: the end of the request object.
    pub(super) column: usize,
}

/// `ping`'s params: an object (its members are ignored).
#[derive(Deserialize)]
pub(super) struct PingParams {}

/// What is recorded of a request line, however much of it parsed.
pub(super) struct CallHead {
    pub(super) id: String,
    pub(super) method: String,
    pub(super) params: Value,
}

#[derive(Deserialize)]
pub(super) struct CreateParams {
    #[serde(default)]
    pub(super) workspace_id: Option<String>,
    #[serde(default)]
    pub(super) cwd: Option<String>,
    #[serde(default)]
    pub(super) focus: bool,
    #[serde(default)]
    pub(super) label: Option<String>,
    #[serde(default)]
    pub(super) env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
pub(super) struct PaneTarget {
    pub(super) pane_id: String,
}

/// `pane.read`'s params (outside HERDR.md's subset; real herdr v0.8.2 was asked with `source:
/// "visible"` only).
#[derive(Deserialize)]
pub(super) struct PaneReadParams {
    pub(super) pane_id: String,
    #[serde(default = "visible")]
    pub(super) source: String,
}

fn visible() -> String {
    "visible".to_string()
}

/// `tab.list`'s params: every tab, or a workspace's (real herdr v0.8.2 was asked with `{}` only).
#[derive(Deserialize)]
pub(super) struct TabListParams {
    #[serde(default)]
    pub(super) workspace_id: Option<String>,
}

/// `pane.process_info`'s params: without `pane_id` herdr answers for the focused pane.
#[derive(Deserialize)]
pub(super) struct OptionalPaneTarget {
    #[serde(default)]
    pub(super) pane_id: Option<String>,
}

/// `pane.report_agent`: an agent (or a hook on its behalf) reports its state.
#[derive(Deserialize)]
pub(super) struct ReportAgentParams {
    pub(super) pane_id: String,
    #[allow(dead_code)]
    pub(super) source: String,
    pub(super) agent: String,
    pub(super) state: AgentStatus,
}

/// `pane.release_agent`: the agent leaves the pane.
#[derive(Deserialize)]
pub(super) struct ReleaseAgentParams {
    pub(super) pane_id: String,
    #[allow(dead_code)]
    pub(super) source: String,
    #[allow(dead_code)]
    pub(super) agent: String,
}

#[derive(Deserialize)]
pub(super) struct AgentTarget {
    pub(super) target: String,
}

#[derive(Deserialize)]
pub(super) struct SendInputParams {
    pub(super) pane_id: String,
    #[serde(default)]
    pub(super) text: String,
    #[serde(default)]
    pub(super) keys: Vec<String>,
}

#[derive(Deserialize)]
pub(super) struct AgentWaitParams {
    pub(super) target: String,
    /// Absent or empty: herdr waits for idle, done or blocked.
    #[serde(default)]
    pub(super) until: Vec<AgentStatus>,
    #[serde(default)]
    pub(super) timeout_ms: Option<u64>,
}

pub(super) struct WaitSpec {
    pub(super) id: String,
    pub(super) target: String,
    pub(super) until: Vec<AgentStatus>,
    pub(super) deadline: Option<tokio::time::Instant>,
}

pub(super) enum Outcome {
    Reply(Box<Envelope>),
    Wait(WaitSpec),
}

/// An error answer's `error` member.
#[derive(Debug, Serialize)]
pub(super) struct WireError {
    pub(super) code: &'static str,
    pub(super) message: String,
}

impl WireError {
    pub(super) fn new(code: &'static str, message: impl Into<String>) -> Self {
        WireError {
            code,
            message: message.into(),
        }
    }
}

pub(super) fn pane_not_found(pane_id: &str) -> WireError {
    WireError::new("pane_not_found", format!("pane {pane_id} not found"))
}

pub(super) fn internal_error() -> WireError {
    WireError::new("internal_error", "fake herdr lost track of its state")
}

pub(super) fn invalid_request(detail: impl std::fmt::Display) -> Envelope {
    Envelope::error(
        String::new(),
        WireError::new("invalid_request", format!("invalid request: {detail}")),
    )
}

pub(super) fn unknown_method_message(method: &str) -> String {
    unknown_method_message_without(method, "")
}

/// [`unknown_method_message`] of a herdr that lacks `missing` (an older herdr,
/// [`Fault::NoProcessInfo`]): its list of methods leaves it out.
pub(super) fn unknown_method_message_without(method: &str, missing: &str) -> String {
    let expected: Vec<String> = HERDR_METHODS
        .iter()
        .filter(|m| **m != missing)
        .map(|m| format!("`{m}`"))
        .collect();
    format!(
        "invalid request: unknown variant `{method}`, expected one of {}",
        expected.join(", ")
    )
}

/// The params of a method, as herdr reads them: its error messages and the column at the end of
/// the request (herdr reads the method's params after the whole object).
pub(super) fn parse_params<T: DeserializeOwned>(params: Value, column: usize) -> Result<T, WireError> {
    serde_json::from_value(params).map_err(|e| {
        WireError::new(
            "invalid_request",
            format!("invalid request: {e} at line 1 column {column}"),
        )
    })
}

/// The request's `id`, read as herdr reads it (directly, so an error names its own position); the
/// other members are kept for the method and its params.
#[derive(Deserialize)]
struct Head {
    id: String,
    #[serde(flatten)]
    rest: serde_json::Map<String, Value>,
}

/// Parses a request line the way herdr does; an unparseable request yields its error answer.
pub(super) fn parse_request(line: &str) -> (CallHead, Result<Request, Envelope>) {
    let mut head = CallHead {
        id: String::new(),
        method: String::new(),
        params: Value::Null,
    };
    // What was recorded of the call, however much of it parses.
    if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(line) {
        if let Some(Value::String(id)) = object.get("id") {
            head.id = id.clone();
        }
        if let Some(Value::String(method)) = object.get("method") {
            head.method = method.clone();
        }
        head.params = object.get("params").cloned().unwrap_or(Value::Null);
    }
    let parsed = match serde_json::from_str::<Head>(line) {
        Ok(parsed) => parsed,
        Err(e) => return (head, Err(invalid_request(e))),
    };
    let column = line.chars().count();
    let at_end = |what: String| invalid_request(format!("{what} at line 1 column {column}"));
    let Head { id, mut rest } = parsed;
    let method = match rest.remove("method") {
        None => return (head, Err(at_end("missing field `method`".to_string()))),
        Some(Value::String(m)) if METHODS.contains(&m.as_str()) => m,
        Some(Value::String(m)) if HERDR_METHODS.contains(&m.as_str()) => {
            let message = format!("invalid request: method `{m}` is not served by the suite's fake herdr");
            return (
                head,
                Err(Envelope::error(
                    String::new(),
                    WireError::new("invalid_request", message),
                )),
            );
        }
        Some(Value::String(m)) => {
            let message = format!("{} at line 1 column {column}", unknown_method_message(&m));
            return (
                head,
                Err(Envelope::error(
                    String::new(),
                    WireError::new("invalid_request", message),
                )),
            );
        }
        Some(other) => {
            let message = format!("invalid type: {}, expected a method name", unexpected(&other));
            return (head, Err(at_end(message)));
        }
    };
    let Some(params) = rest.remove("params") else {
        return (head, Err(at_end("missing field `params`".to_string())));
    };
    (
        head,
        Ok(Request {
            id,
            method,
            params,
            column,
        }),
    )
}

/// How serde names a JSON value in an "invalid type" message.
fn unexpected(value: &Value) -> String {
    match value {
        Value::Null => "null".to_string(),
        Value::Bool(b) => format!("boolean `{b}`"),
        Value::Number(n) if n.is_f64() => format!("floating point `{n}`"),
        Value::Number(n) => format!("integer `{n}`"),
        Value::String(s) => format!("string {s:?}"),
        Value::Array(_) => "sequence".to_string(),
        Value::Object(_) => "map".to_string(),
    }
}

/// A response line: `{"id":…,"result":{…}}` or `{"id":…,"error":{…}}`.
#[derive(Serialize)]
pub(super) struct Envelope {
    pub(super) id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<ResultBody>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<WireError>,
}

impl Envelope {
    pub(super) fn ok(id: String, body: ResultBody) -> Self {
        Envelope {
            id,
            result: Some(body),
            error: None,
        }
    }

    pub(super) fn error(id: String, error: WireError) -> Self {
        Envelope {
            id,
            result: None,
            error: Some(error),
        }
    }

    /// The line to send (without newline) and its value for the call record.
    pub(super) fn encode(&self) -> (String, Value) {
        match (serde_json::to_string(self), serde_json::to_value(self)) {
            (Ok(line), Ok(value)) => (line, value),
            _ => {
                let line = r#"{"id":"","error":{"code":"internal_error","message":"failed to encode response"}}"#;
                (line.to_string(), serde_json::from_str(line).unwrap_or(Value::Null))
            }
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum ResultBody {
    Pong {
        version: &'static str,
        protocol: u32,
        capabilities: Capabilities,
    },
    WorkspaceCreated {
        workspace: WorkspaceWire,
        tab: TabWire,
        root_pane: PaneWire,
    },
    TabCreated {
        tab: TabWire,
        root_pane: PaneWire,
    },
    Ok {},
    PaneInfo {
        pane: PaneWire,
    },
    AgentInfo {
        agent: AgentWire,
    },
    PaneProcessInfo {
        process_info: ProcessInfoWire,
    },
    TabList {
        tabs: Vec<TabWire>,
    },
    PaneRead {
        read: PaneReadWire,
    },
}

/// `pane.read`'s answer, as real herdr v0.8.2 gives it (2026-12-06). The fake has no screen: its
/// `text` is the lines typed into the terminal, one per line (a terminal echoes them), not what
/// programs printed.
#[derive(Serialize)]
pub(super) struct PaneReadWire {
    pub(super) pane_id: String,
    pub(super) workspace_id: String,
    pub(super) tab_id: String,
    pub(super) source: String,
    pub(super) format: &'static str,
    pub(super) text: String,
    pub(super) revision: u64,
    pub(super) truncated: bool,
}

/// `pane.process_info`'s answer (newer herdr; not in HERDR.md's subset): which process group has
/// the pane's terminal. `foreground_process_group_id == shell_pid` means the bare shell does:
/// no agent runs, whatever status herdr still shows.
#[derive(Serialize)]
pub(super) struct ProcessInfoWire {
    pub(super) pane_id: String,
    pub(super) shell_pid: u32,
    pub(super) foreground_process_group_id: u32,
    pub(super) foreground_processes: Vec<ProcessWire>,
}

/// One process of the foreground job.
#[derive(Serialize)]
pub(super) struct ProcessWire {
    pub(super) pid: u32,
    pub(super) name: String,
    pub(super) argv: Vec<String>,
    pub(super) cmdline: String,
    pub(super) cwd: String,
}

#[derive(Serialize)]
pub(super) struct Capabilities {
    pub(super) live_handoff: bool,
    pub(super) detached_server_daemon: bool,
}

#[derive(Serialize)]
pub(super) struct PaneWire {
    pub(super) pane_id: String,
    pub(super) terminal_id: String,
    pub(super) workspace_id: String,
    pub(super) tab_id: String,
    pub(super) focused: bool,
    pub(super) cwd: String,
    pub(super) foreground_cwd: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) agent: Option<String>,
    pub(super) agent_status: AgentStatus,
    pub(super) scroll: Scroll,
    pub(super) revision: u64,
}

#[derive(Serialize)]
pub(super) struct Scroll {
    pub(super) offset_from_bottom: u32,
    pub(super) max_offset_from_bottom: u32,
    pub(super) viewport_rows: u32,
}

#[derive(Serialize)]
pub(super) struct TabWire {
    pub(super) tab_id: String,
    pub(super) workspace_id: String,
    pub(super) number: usize,
    pub(super) label: String,
    pub(super) focused: bool,
    pub(super) pane_count: usize,
    pub(super) agent_status: AgentStatus,
}

#[derive(Serialize)]
pub(super) struct WorkspaceWire {
    pub(super) workspace_id: String,
    pub(super) number: usize,
    pub(super) label: String,
    pub(super) focused: bool,
    pub(super) pane_count: usize,
    pub(super) tab_count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) active_tab_id: Option<String>,
    pub(super) agent_status: AgentStatus,
}

#[derive(Serialize)]
pub(super) struct AgentWire {
    pub(super) terminal_id: String,
    pub(super) agent: String,
    pub(super) agent_status: AgentStatus,
    pub(super) workspace_id: String,
    pub(super) tab_id: String,
    pub(super) pane_id: String,
    pub(super) focused: bool,
    pub(super) state_change_seq: u64,
    pub(super) cwd: String,
    pub(super) foreground_cwd: String,
    pub(super) revision: u64,
}
