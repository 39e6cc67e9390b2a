//! The herdr client: the subset of herdr's socket API the gateway uses (see HERDR.md).
//!
//! herdr speaks newline-delimited JSON, one request per connection. Every call here is bounded by a
//! timeout, because a herdr that accepts and never answers must cost the gateway a FAILED report,
//! not a wedged inject task.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// An agent's status as herdr reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentStatus {
    Idle,
    Working,
    Blocked,
    Done,
    Unknown,
}

impl AgentStatus {
    fn parse(s: &str) -> AgentStatus {
        match s {
            "idle" => AgentStatus::Idle,
            "working" => AgentStatus::Working,
            "blocked" => AgentStatus::Blocked,
            "done" => AgentStatus::Done,
            _ => AgentStatus::Unknown,
        }
    }

    /// FWD-2: text is written only while the agent is `idle` or `done`.
    pub fn injectable(self) -> bool {
        matches!(self, AgentStatus::Idle | AgentStatus::Done)
    }
}

/// A failed herdr call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HerdrError {
    /// herdr answered with an error object (`pane_not_found`, `timeout`, …).
    #[error("herdr error {code}: {message}")]
    Api { code: String, message: String },
    #[error("herdr unreachable at {path}: {reason}")]
    Unreachable { path: String, reason: String },
    #[error("herdr did not answer {method} within {0:?}", .timeout)]
    Timeout { method: String, timeout: Duration },
    #[error("herdr sent an unreadable answer to {method}: {reason}")]
    Protocol { method: String, reason: String },
}

impl HerdrError {
    pub fn code(&self) -> Option<&str> {
        match self {
            HerdrError::Api { code, .. } => Some(code),
            _ => None,
        }
    }
}

/// A client for one herdr socket.
pub struct Herdr {
    path: PathBuf,
    next_id: AtomicU64,
    call_timeout: Duration,
}

impl Herdr {
    pub fn new(path: PathBuf) -> Herdr {
        Herdr {
            path,
            next_id: AtomicU64::new(1),
            call_timeout: Duration::from_secs(5),
        }
    }

    /// One request, one answer, one connection.
    async fn call(&self, method: &str, params: Value, extra: Duration) -> Result<Value, HerdrError> {
        let id = format!("g{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let timeout = self.call_timeout + extra;
        let fut = async {
            let mut stream = UnixStream::connect(&self.path)
                .await
                .map_err(|e| HerdrError::Unreachable {
                    path: self.path.display().to_string(),
                    reason: e.to_string(),
                })?;
            let mut line = serde_json::to_vec(&json!({"id": id, "method": method, "params": params})).map_err(|e| {
                HerdrError::Protocol {
                    method: method.into(),
                    reason: e.to_string(),
                }
            })?;
            line.push(b'\n');
            let io_err = |e: std::io::Error| HerdrError::Unreachable {
                path: self.path.display().to_string(),
                reason: e.to_string(),
            };
            stream.write_all(&line).await.map_err(io_err)?;
            let mut reader = BufReader::new(stream);
            let mut answer = String::new();
            reader.read_line(&mut answer).await.map_err(io_err)?;
            let v: Value = serde_json::from_str(answer.trim()).map_err(|e| HerdrError::Protocol {
                method: method.into(),
                reason: format!("{e}: {answer:?}"),
            })?;
            if let Some(err) = v.get("error") {
                return Err(HerdrError::Api {
                    code: err.get("code").and_then(Value::as_str).unwrap_or("unknown").to_string(),
                    message: err.get("message").and_then(Value::as_str).unwrap_or("").to_string(),
                });
            }
            v.get("result").cloned().ok_or_else(|| HerdrError::Protocol {
                method: method.into(),
                reason: "neither result nor error".into(),
            })
        };
        tokio::time::timeout(timeout, fut)
            .await
            .map_err(|_| HerdrError::Timeout {
                method: method.into(),
                timeout,
            })?
    }

    pub async fn ping(&self) -> Result<(), HerdrError> {
        self.call("ping", json!({}), Duration::ZERO).await.map(|_| ())
    }

    /// `pane.get` → the pane's agent status.
    pub async fn status(&self, pane: &str) -> Result<AgentStatus, HerdrError> {
        let r = self.call("pane.get", json!({"pane_id": pane}), Duration::ZERO).await?;
        let s = r
            .pointer("/pane/agent_status")
            .and_then(Value::as_str)
            .ok_or_else(|| HerdrError::Protocol {
                method: "pane.get".into(),
                reason: "no agent_status".into(),
            })?;
        Ok(AgentStatus::parse(s))
    }

    /// `agent.wait` until the agent is idle or done, for at most `timeout`.
    pub async fn wait_idle(&self, pane: &str, timeout: Duration) -> Result<(), HerdrError> {
        let params = json!({"target": pane, "until": ["idle", "done"], "timeout_ms": timeout.as_millis() as u64});
        self.call("agent.wait", params, timeout).await.map(|_| ())
    }

    /// `pane.send_input` with Enter: types `text` into the pane and submits it.
    pub async fn send_input(&self, pane: &str, text: &str) -> Result<(), HerdrError> {
        let params = json!({"pane_id": pane, "text": text, "keys": ["enter"]});
        self.call("pane.send_input", params, Duration::ZERO).await.map(|_| ())
    }

    pub async fn close(&self, pane: &str) -> Result<(), HerdrError> {
        self.call("pane.close", json!({"pane_id": pane}), Duration::ZERO)
            .await
            .map(|_| ())
    }

    /// `tab.create` (after `workspace.create` when herdr has no workspace yet) → the new pane id.
    pub async fn create_pane(&self, label: &str, env: &BTreeMap<String, String>) -> Result<String, HerdrError> {
        let params = json!({"label": label, "focus": false, "env": env});
        let r = match self.call("tab.create", params.clone(), Duration::ZERO).await {
            Err(e) if e.code() == Some("workspace_not_found") => {
                let ws = json!({"focus": false, "label": "fleet", "env": {}});
                self.call("workspace.create", ws, Duration::ZERO).await?;
                self.call("tab.create", params, Duration::ZERO).await?
            }
            other => other?,
        };
        r.pointer("/root_pane/pane_id")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| HerdrError::Protocol {
                method: "tab.create".into(),
                reason: "no root_pane.pane_id".into(),
            })
    }
}
