//! A real MCP client (rmcp over streamable HTTP) acting as one entity.
//!
//! Each entity the suite drives talks to its gateway exactly as an agent would: through `/mcp`,
//! with its bearer token. Tool results come back as the tool's structured JSON.
//!
//! **Every call has a deadline** ([`Deadlines`]): a gateway that never answers — a `bridge_send`
//! stuck after a broker link cut, a session the gateway dropped while a call was open — fails the
//! step with the tool, its (abbreviated) arguments and how long the suite waited, instead of
//! hanging the run. rmcp's own calls have no timeout at all.
//!
//! **A dead session is reopened the way a real client would**: a new `initialize` with the same
//! bearer token, at most once per call. Whether the call is then retried depends on what the
//! suite knows about it:
//! - a call the gateway refused with HTTP 404 (it no longer knows the session) never reached a
//!   tool — the session is looked up before any tool runs — so it is retried on the new session;
//! - a call whose answer was lost (the response stream or connection closed, the session's service
//!   ended) may have reached the gateway: only read-only calls (`bridge_roster`, `tools/list`) are
//!   retried; any other fails the step saying the session died mid-call, since repeating a send,
//!   spawn, answer or drain would change what the scenario checks.
//!
//! rmcp's transport would re-initialize on a 404 by itself (and replay the refused POST); that is
//! switched off so that this module alone decides, and says, what happened to each call.
//!
//! **It calls only what it was listed**, as Claude Code and the official SDKs do (SPEC [C-22]):
//! each session asks `tools/list` once, right after `initialize`, and a call of a tool that
//! listing did not hold fails without reaching the gateway, naming [C-22]. So every scenario
//! drives each tool through a client that would have offered it to a model.
//! [`McpClient::call_unlisted`] is the one way around that, for judging a refusal.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{Peer, RunningService, ServiceError};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{StreamableHttpClientTransportConfig, StreamableHttpError};
use rmcp::{RoleClient, ServiceExt as _};
use serde_json::Value;
use tokio::time::Instant;

use crate::timing::scaled;

/// An MCP failure: transport, protocol, a tool-level error, a missed deadline or a dead session.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("cannot connect MCP client to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("MCP call {tool} failed: {reason}")]
    Call { tool: String, reason: String },
    #[error("tool {tool} returned an error: {content}")]
    Tool { tool: String, content: String },
    /// The gateway did not answer in time; the call may or may not have taken effect.
    #[error(
        "MCP call {tool} {args} got no answer within {waited} (deadline {deadline}: {basis}); \
         it may or may not have reached the gateway"
    )]
    Deadline {
        tool: String,
        args: String,
        waited: Secs,
        deadline: Secs,
        basis: String,
    },
    /// The session died while the call was open and the call was not (or could not be) retried.
    #[error("the MCP session died mid-call: {tool} {args} after {after}: {reason}; {aftermath}")]
    SessionDied {
        tool: String,
        args: String,
        after: Secs,
        reason: String,
        aftermath: String,
    },
    #[error("the MCP client for {url} was closed by its owner; {tool} was not sent")]
    Closed { url: String, tool: String },
    /// The session's `tools/list` did not hold the tool, so a real MCP client would never call it.
    #[error(
        "tool {tool} is not in this session's tools/list [{listed}], so an MCP client never offers \
         it to its model (SPEC [C-22]: every tool the caller's role may call MUST be listed); not sent"
    )]
    Unlisted { tool: String, listed: String },
    /// The tool answered outside the contract's schema (`fixtures/schemas/`).
    #[error(transparent)]
    Contract(#[from] crate::schemas::SchemaViolation),
}

/// A duration shown in seconds with one decimal (error messages stay readable).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Secs(pub Duration);

impl std::fmt::Display for Secs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.1} s", self.0.as_secs_f64())
    }
}

/// How long the suite gives each MCP call.
///
/// Waits a call asks the gateway for (`timeout_s`) are taken at face value — the gateway's timer
/// runs on the same clock — and everything the suite guesses (margins, outcome allowances) is
/// stretched by `FLEET_E2E_TIME_SCALE` in [`Deadlines::scaled`].
#[derive(Debug, Clone, PartialEq)]
pub struct Deadlines {
    /// A call with nothing to wait for (poll, roster, reply, broadcast, answer, tools/list).
    pub quick: Duration,
    /// What a gateway may spend on a call's outcome besides any `timeout_s`: the inject bound of
    /// a send (≤ 30 s in every scenario), the presence wait of a spawn or stop (same bound).
    pub outcome: Duration,
    /// Added to every argument-derived wait: HTTP travel and scheduling on a loaded machine.
    pub margin: Duration,
    /// Connecting: HTTP plus the `initialize` handshake.
    pub connect: Duration,
    /// A blocking call sent without `timeout_s` waits for the gateway's own default, which the
    /// suite cannot know: the reference gateway's longest (600 s for `bridge_send`).
    pub unspecified_wait: Duration,
}

impl Deadlines {
    /// The suite's nominal deadlines, stretched by the time-scale knob.
    pub fn scaled() -> Deadlines {
        Deadlines {
            quick: scaled(Duration::from_secs(30)),
            outcome: scaled(Duration::from_secs(60)),
            margin: scaled(Duration::from_secs(15)),
            connect: scaled(Duration::from_secs(20)),
            unspecified_wait: Duration::from_secs(600),
        }
    }

    /// The deadline of one call of `tool` with `args`, and how it was derived (for the error).
    pub fn for_call(&self, tool: &str, args: &Value) -> (Duration, String) {
        let asked = || -> Option<Duration> {
            let s = args.get("timeout_s")?.as_f64()?;
            (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s.min(86_400.0)))
        };
        let wait = |what: &str| match asked() {
            Some(d) => (d, format!("{what} {:.1} s", d.as_secs_f64())),
            None => (
                self.unspecified_wait,
                format!("no timeout_s, gateway default ≤ {}", Secs(self.unspecified_wait)),
            ),
        };
        let plus_margin =
            |(d, why): (Duration, String)| (d + self.margin, format!("{why} + margin {}", Secs(self.margin)));
        match tool {
            "bridge_send" => {
                let waits_reply = args.get("wait_reply").and_then(Value::as_bool).unwrap_or(true);
                let (reply, why) = if waits_reply {
                    wait("reply wait timeout_s")
                } else {
                    (Duration::ZERO, "no reply wait".to_string())
                };
                plus_margin((
                    reply + self.outcome,
                    format!("{why} + inject outcome {}", Secs(self.outcome)),
                ))
            }
            "bridge_wait" | "bridge_ask" => plus_margin(wait("timeout_s")),
            "bridge_spawn" | "bridge_stop" => {
                plus_margin((self.outcome, format!("presence outcome {}", Secs(self.outcome))))
            }
            _ => (self.quick, format!("quick call {}", Secs(self.quick))),
        }
    }
}

/// Calls that change nothing at the gateway: repeating one after a lost answer is harmless.
fn retry_safe(tool: &str) -> bool {
    matches!(tool, "bridge_roster" | "tools/list")
}

/// One tool as the session's `tools/list` offered it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    pub name: String,
    /// Its `inputSchema`, as sent.
    pub input_schema: Value,
}

/// One entity's MCP session. Dropping it closes the session (and fails its handles' calls).
pub struct McpClient {
    session: Arc<Session>,
}

/// A cheap handle for calls from other tasks (a blocking `bridge_send` runs in the background).
/// It shares its client's session, including a session the client reopened.
#[derive(Clone)]
pub struct McpHandle {
    session: Arc<Session>,
}

/// The session behind a client and its handles.
struct Session {
    url: String,
    token: String,
    deadlines: Deadlines,
    slot: Mutex<Slot>,
    /// Serializes reopening, so concurrent calls that saw the same death reopen once.
    reopening: tokio::sync::Mutex<()>,
}

/// The current rmcp service. `generation` counts reopens, so a caller can tell whether the
/// session it saw die was already replaced.
struct Slot {
    service: Option<RunningService<RoleClient, ()>>,
    /// What `tools/list` offered the current service's session.
    listed: Arc<Vec<ListedTool>>,
    generation: u64,
    closed: bool,
}

/// How a failed call's session ended, as far as the client can tell.
enum Fate {
    /// The gateway answered 404: it does not know the session, and no tool ran.
    Refused,
    /// The answer was lost after the request went out: it may have reached the gateway.
    Lost { reason: String, service_gone: bool },
    /// Anything else: an ordinary failure, reported as is.
    Failed(String),
}

impl McpClient {
    /// Connects to `url` (…/mcp) with the entity's bearer token and completes the MCP handshake,
    /// with the suite's scaled deadlines.
    pub async fn connect(url: &str, token: &str) -> Result<McpClient, McpError> {
        McpClient::connect_with(url, token, Deadlines::scaled()).await
    }

    /// [`McpClient::connect`] with explicit deadlines.
    pub async fn connect_with(url: &str, token: &str, deadlines: Deadlines) -> Result<McpClient, McpError> {
        let (service, listed) = open(url, token, deadlines.connect).await?;
        Ok(McpClient {
            session: Arc::new(Session {
                url: url.to_string(),
                token: token.to_string(),
                deadlines,
                slot: Mutex::new(Slot {
                    service: Some(service),
                    listed: Arc::new(listed),
                    generation: 0,
                    closed: false,
                }),
                reopening: tokio::sync::Mutex::new(()),
            }),
        })
    }

    pub fn handle(&self) -> McpHandle {
        McpHandle {
            session: self.session.clone(),
        }
    }

    /// Names of the tools the server lists.
    pub async fn tool_names(&self) -> Result<Vec<String>, McpError> {
        let args = Value::Object(Default::default());
        let (budget, basis) = self.session.deadlines.for_call("tools/list", &args);
        let tools = self
            .session
            .run("tools/list", &args, budget, basis, |peer| async move {
                peer.list_all_tools().await
            })
            .await?;
        Ok(tools.into_iter().map(|t| t.name.to_string()).collect())
    }

    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, McpError> {
        self.handle().call(tool, args).await
    }

    /// What the current session's `tools/list` offered (asked once per session).
    pub fn listed(&self) -> Arc<Vec<ListedTool>> {
        self.session.slot().listed.clone()
    }

    /// Calls `tool` by name whether or not it was listed, and returns its result undecoded:
    /// for judging that a tool the caller may not call is refused ([C-22]). No schema check.
    pub async fn call_unlisted(&self, tool: &str, args: Value) -> Result<CallToolResult, McpError> {
        let (budget, basis) = self.session.deadlines.for_call(tool, &args);
        let arguments = args.as_object().cloned().unwrap_or_default();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        self.session
            .run(tool, &args, budget, basis, |peer| {
                let params = params.clone();
                async move { peer.call_tool(params).await }
            })
            .await
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        let service = {
            let mut slot = self.session.slot();
            slot.closed = true;
            slot.service.take()
        };
        // Dropping the running service cancels it: open calls on it end at once.
        drop(service);
    }
}

impl McpHandle {
    /// Calls `tool` with `args` (a JSON object) and returns its structured result, within the
    /// call's deadline ([`Deadlines::for_call`]).
    pub async fn call(&self, tool: &str, args: Value) -> Result<Value, McpError> {
        let listed = self.session.slot().listed.clone();
        if !listed.iter().any(|t| t.name == tool) {
            return Err(McpError::Unlisted {
                tool: tool.to_string(),
                listed: listed.iter().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", "),
            });
        }
        let (budget, basis) = self.session.deadlines.for_call(tool, &args);
        let arguments = args.as_object().cloned().unwrap_or_default();
        let params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let result = self
            .session
            .run(tool, &args, budget, basis, |peer| {
                let params = params.clone();
                async move { peer.call_tool(params).await }
            })
            .await?;
        let v = decode(tool, result)?;
        // Every answer read is inside the published contract, or the call fails naming the field.
        let shape = format!("{tool}.result");
        if crate::schemas::has_shape(&shape) {
            crate::schemas::check(tool, &shape, &v)?;
        }
        Ok(v)
    }
}

/// A tool result as the tool's JSON: its structured content, or its text parsed as JSON.
fn decode(tool: &str, result: CallToolResult) -> Result<Value, McpError> {
    let text = || {
        result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join("\n")
    };
    if result.is_error == Some(true) {
        return Err(McpError::Tool {
            tool: tool.to_string(),
            content: text(),
        });
    }
    tool_value(result.structured_content.clone(), &text()).map_err(|content| McpError::Tool {
        tool: tool.to_string(),
        content,
    })
}

/// CONTRACT §3: a tool result's value as any MCP client gets it — its structured content (an
/// object whose only field is `result` read as that value), else its text content parsed as
/// JSON. Shared by the suite's client and the official SDKs' reports, so both judge the same
/// value. The error says why the text is not a value.
pub fn tool_value(structured: Option<Value>, text: &str) -> Result<Value, String> {
    match structured {
        Some(v) if !v.is_null() => Ok(unwrap_result(v)),
        _ => serde_json::from_str(text).map_err(|e| format!("result is not JSON ({e}): {text}")),
    }
}

/// CONTRACT §3: MCP's structured content must be an object, so a tool whose SPEC result is a list
/// (`bridge_poll`, `bridge_roster`) or a bare value is wrapped by some MCP libraries as
/// `{"result": …}` (Python's FastMCP does). An object whose only field is `result` is read as
/// that value; no SPEC result is such an object.
fn unwrap_result(v: Value) -> Value {
    match v {
        Value::Object(mut o) if o.len() == 1 && o.contains_key("result") => o.remove("result").unwrap_or(Value::Null),
        v => v,
    }
}

/// The HTTP client of one session: connections are kept alive and reused, as an agent's MCP
/// client does (Node's fetch, which Claude Code's SDK uses, pools by default), and requests are
/// written without Nagle's delay.
///
/// rmcp's default client turns pooling off (one TCP connection per call), against a stall that
/// appears only when a response stream is dropped unread; its transport drains a call's stream
/// after the answer, so the connection comes back clean. A connection per call would charge
/// every call a TCP handshake and a new HTTP connection in the gateway — a cost real agents do not
/// make it pay, which the bench would then report as the gateway's.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// Opens a new MCP session: HTTP transport with the bearer token, `initialize`, then `tools/list`
/// (all pages) — what the session may call.
async fn open(
    url: &str,
    token: &str,
    within: Duration,
) -> Result<(RunningService<RoleClient, ()>, Vec<ListedTool>), McpError> {
    let deadline = Instant::now() + within;
    let service = initialize(url, token, within).await?;
    let failed = |reason: String| McpError::Connect {
        url: url.to_string(),
        reason,
    };
    let tools = match tokio::time::timeout_at(deadline, service.peer().list_all_tools()).await {
        Ok(Ok(tools)) => tools,
        Ok(Err(e)) => return Err(failed(format!("tools/list after initialize failed: {e}"))),
        Err(_) => {
            return Err(failed(format!(
                "no answer to initialize and tools/list within {}",
                Secs(within)
            )));
        }
    };
    let listed = tools
        .into_iter()
        .map(|t| ListedTool {
            name: t.name.to_string(),
            input_schema: Value::Object((*t.input_schema).clone()),
        })
        .collect();
    Ok((service, listed))
}

/// HTTP transport with the bearer token, then `initialize`.
async fn initialize(url: &str, token: &str, within: Duration) -> Result<RunningService<RoleClient, ()>, McpError> {
    let config = StreamableHttpClientTransportConfig::with_uri(url.to_string())
        .auth_header(token.to_string())
        // Session expiry is handled in `Session::run`, which knows whether a call may be repeated.
        .reinit_on_expired_session(false);
    let transport = StreamableHttpClientTransport::with_client(http_client(), config);
    match tokio::time::timeout(within, ().serve(transport)).await {
        Ok(Ok(service)) => Ok(service),
        Ok(Err(e)) => Err(McpError::Connect {
            url: url.to_string(),
            reason: e.to_string(),
        }),
        Err(_) => Err(McpError::Connect {
            url: url.to_string(),
            reason: format!("no answer to initialize within {}", Secs(within)),
        }),
    }
}

impl Session {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        // The slot holds no invariant a panicking holder could break half-way.
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The live service's peer and generation; `None` when it is gone (closed or dead).
    fn current(&self, tool: &str) -> Result<Option<(Peer<RoleClient>, u64)>, McpError> {
        let slot = self.slot();
        if slot.closed {
            return Err(McpError::Closed {
                url: self.url.clone(),
                tool: tool.to_string(),
            });
        }
        Ok(slot
            .service
            .as_ref()
            .map(|s| s.peer().clone())
            .filter(|p| !p.is_transport_closed())
            .map(|p| (p, slot.generation)))
    }

    /// Replaces the session of generation `seen` by a new one (new `initialize`, same token),
    /// unless another call already did; returns the now current peer and generation.
    async fn reopen(&self, tool: &str, seen: Option<u64>) -> Result<(Peer<RoleClient>, u64), McpError> {
        let _one_at_a_time = self.reopening.lock().await;
        let (stale, generation) = {
            let slot = self.slot();
            (seen.is_some_and(|g| g != slot.generation), slot.generation)
        };
        if stale && let Some(current) = self.current(tool)? {
            return Ok(current);
        }
        let (service, listed) = open(&self.url, &self.token, self.deadlines.connect).await?;
        let peer = service.peer().clone();
        let old = {
            let mut slot = self.slot();
            if slot.closed {
                return Err(McpError::Closed {
                    url: self.url.clone(),
                    tool: tool.to_string(),
                });
            }
            slot.generation = generation + 1;
            slot.listed = Arc::new(listed);
            slot.service.replace(service)
        };
        drop(old);
        Ok((peer, generation + 1))
    }

    /// Runs one request under `budget` (covering any reopen and retry), applying the module's
    /// reopen-and-retry rules.
    async fn run<T, F, Fut>(
        &self,
        tool: &str,
        args: &Value,
        budget: Duration,
        basis: String,
        op: F,
    ) -> Result<T, McpError>
    where
        F: Fn(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        let start = Instant::now();
        let deadline = start + budget;
        let timed_out = || McpError::Deadline {
            tool: tool.to_string(),
            args: abbreviate(args),
            waited: Secs(start.elapsed()),
            deadline: Secs(budget),
            basis: basis.clone(),
        };
        let died = |reason: &str, aftermath: String| McpError::SessionDied {
            tool: tool.to_string(),
            args: abbreviate(args),
            after: Secs(start.elapsed()),
            reason: reason.to_string(),
            aftermath,
        };
        let mut reopened = false;
        let mut retried = false;
        // A session found dead before sending (an earlier call's reopen failed) is reopened now;
        // nothing was sent on it, so this is not a retry.
        let (mut peer, mut generation) = match self.current(tool)? {
            Some(current) => current,
            None => {
                reopened = true;
                tokio::time::timeout_at(deadline, self.reopen(tool, None))
                    .await
                    .map_err(|_| timed_out())??
            }
        };
        loop {
            let err = match tokio::time::timeout_at(deadline, op(peer.clone())).await {
                Err(_) => return Err(timed_out()),
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
            };
            let (reason, reopen_needed) = match fate(&err, &peer) {
                Fate::Failed(reason) => {
                    return Err(McpError::Call {
                        tool: tool.to_string(),
                        reason,
                    });
                }
                // Nothing reached a tool: going again on a new session repeats nothing.
                Fate::Refused => (
                    "the gateway no longer knows the session (HTTP 404), so the call did not reach it".to_string(),
                    true,
                ),
                Fate::Lost { reason, service_gone } => {
                    if !retry_safe(tool) {
                        let mut aftermath = String::new();
                        if service_gone && !reopened {
                            // Later calls of this entity get a working session.
                            aftermath =
                                match tokio::time::timeout_at(deadline, self.reopen(tool, Some(generation))).await {
                                    Ok(Ok(_)) => "the session was reopened (new initialize, same token); ".into(),
                                    Ok(Err(e)) => format!("reopening it failed ({e}); "),
                                    Err(_) => "reopening it ran out of time; ".into(),
                                };
                        }
                        aftermath.push_str(&format!("not retried: {tool} may have reached the gateway"));
                        return Err(died(&reason, aftermath));
                    }
                    if retried {
                        return Err(died(&reason, "it was already retried once".into()));
                    }
                    retried = true;
                    (reason, service_gone)
                }
            };
            if reopen_needed {
                if reopened {
                    return Err(died(
                        &reason,
                        "the session was already reopened once for this call".into(),
                    ));
                }
                reopened = true;
                match tokio::time::timeout_at(deadline, self.reopen(tool, Some(generation))).await {
                    Err(_) => return Err(timed_out()),
                    Ok(Err(e)) => return Err(died(&reason, format!("reopening it failed: {e}"))),
                    Ok(Ok(current)) => (peer, generation) = current,
                }
            }
        }
    }
}

/// Classifies a failed request by what the client can know about its fate.
fn fate(err: &ServiceError, peer: &Peer<RoleClient>) -> Fate {
    let service_gone = peer.is_transport_closed();
    let lost = |reason: String| Fate::Lost { reason, service_gone };
    match err {
        // The response stream ended before the result (rmcp marks that as a closed transport),
        // or the session's service itself ended.
        ServiceError::TransportClosed => lost(if service_gone {
            "the session's transport closed".to_string()
        } else {
            "the response stream closed before the call's result".to_string()
        }),
        ServiceError::TransportSend(e) => match e.error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::SessionExpired) => Fate::Refused,
            // Nothing listens: the request never left (a gateway being restarted).
            Some(StreamableHttpError::Client(c)) if c.is_connect() => {
                Fate::Failed(format!("cannot reach the gateway: {e}"))
            }
            Some(
                StreamableHttpError::Client(_)
                | StreamableHttpError::Io(_)
                | StreamableHttpError::Sse(_)
                | StreamableHttpError::UnexpectedEndOfStream
                | StreamableHttpError::TransportChannelClosed,
            ) => lost(format!("the connection broke: {e}")),
            _ if service_gone => lost(format!("the session's transport closed: {e}")),
            _ => Fate::Failed(e.to_string()),
        },
        _ if service_gone => lost(format!("the session's transport closed: {err}")),
        _ => Fate::Failed(err.to_string()),
    }
}

/// The arguments of a call, short enough for an error line: long strings and arrays are cut,
/// gids (36 characters) stay whole.
pub fn abbreviate(args: &Value) -> String {
    const STRING: usize = 40;
    const ITEMS: usize = 4;
    const TOTAL: usize = 240;
    fn cut(s: &str, max: usize) -> String {
        if s.chars().count() <= max {
            return s.to_string();
        }
        let head: String = s.chars().take(max).collect();
        format!("{head}…")
    }
    fn shorten(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(cut(s, STRING)),
            Value::Array(items) => {
                let mut out: Vec<Value> = items.iter().take(ITEMS).map(shorten).collect();
                if items.len() > ITEMS {
                    out.push(Value::String(format!("… {} more", items.len() - ITEMS)));
                }
                Value::Array(out)
            }
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), shorten(v))).collect()),
            other => other.clone(),
        }
    }
    cut(&shorten(args).to_string(), TOTAL)
}

pub mod listing;

#[cfg(test)]
mod tests;
