//! MCP (SPEC §15): the tools entities use, served over streamable HTTP at `/mcp`.
//!
//! Identity comes from the connection, never from an argument: every request carries the entity's
//! bearer token, which the HTTP layer checks (401 otherwise) and each tool call maps back to the
//! local entity. Tools that block (`bridge_send` with `wait_reply`, `bridge_wait`, `bridge_ask`)
//! are the waiters of the pull path.

use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::envelope::{Kind, is_uuid, new_uuid};
use crate::forward::SendOutcome;
use crate::gateway::Gateway;
use crate::metrics::{Metrics, Stage};
use crate::publish::{Outgoing, PublishError};
use crate::pull::Want;
use crate::registry::Entity;
use crate::topology::MSG_EXCHANGE;

mod tools;

/// The MCP server of one gateway; cheap to clone per session.
#[derive(Clone)]
pub struct Mcp {
    gw: Arc<Gateway>,
}

impl Mcp {
    pub fn new(gw: Arc<Gateway>) -> Mcp {
        Mcp { gw }
    }
}

/// The bearer token of an HTTP request's `Authorization` header.
pub fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(str::trim)
}

#[derive(Deserialize)]
struct SendArgs {
    to: String,
    text: String,
    #[serde(default = "yes")]
    wait_reply: bool,
    #[serde(default)]
    timeout_s: Option<f64>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
struct WaitArgs {
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    timeout_s: Option<f64>,
}

#[derive(Deserialize)]
struct PollArgs {
    #[serde(default)]
    from: Option<String>,
    #[serde(default)]
    max: Option<usize>,
}

#[derive(Deserialize)]
struct ReplyArgs {
    text: String,
}

#[derive(Deserialize)]
struct BroadcastArgs {
    group: String,
    text: String,
}

#[derive(Deserialize)]
struct SpawnArgs {
    host: String,
    profile: String,
    brief: String,
    #[serde(default)]
    groups: Vec<String>,
}

#[derive(Deserialize)]
struct StopArgs {
    gid: String,
}

#[derive(Deserialize)]
struct AskArgs {
    question: String,
    #[serde(default)]
    timeout_s: Option<f64>,
}

#[derive(Deserialize)]
struct AnswerArgs {
    turn_id: String,
    text: String,
}

fn valid_group(g: &str) -> bool {
    let b = g.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

fn args<T: serde::de::DeserializeOwned>(req: &CallToolRequestParams) -> Result<T, ErrorData> {
    let v = Value::Object(req.arguments.clone().unwrap_or_default());
    serde_json::from_value(v).map_err(|e| ErrorData::invalid_params(format!("{}: {e}", req.name), None))
}

fn secs(v: Option<f64>, default: f64) -> Result<Duration, ErrorData> {
    let s = v.unwrap_or(default);
    if !(s.is_finite() && (0.0..=86_400.0).contains(&s)) {
        return Err(ErrorData::invalid_params("timeout_s must be between 0 and 86400", None));
    }
    Ok(Duration::from_secs_f64(s))
}

fn ok(v: Value) -> Result<CallToolResponse, ErrorData> {
    Ok(CallToolResult::structured(v).into())
}

impl Mcp {
    fn caller(&self, ctx: &RequestContext<RoleServer>) -> Result<Entity, ErrorData> {
        let parts = ctx
            .extensions
            .get::<axum::http::request::Parts>()
            .ok_or_else(|| ErrorData::invalid_request("no HTTP request context", None))?;
        let token = bearer(&parts.headers).ok_or_else(|| ErrorData::invalid_request("missing bearer token", None))?;
        self.gw
            .entity_by_token(token)
            .ok_or_else(|| ErrorData::invalid_request("unknown bearer token", None))
    }

    async fn send(&self, me: Entity, a: SendArgs) -> Result<CallToolResponse, ErrorData> {
        if !is_uuid(&a.to) {
            return Err(ErrorData::invalid_params(
                "to must be a gid (lowercase hyphenated UUID)",
                None,
            ));
        }
        let reply_wait = secs(a.timeout_s, 600.0)?;
        let gw = &self.gw;
        let msg_id = new_uuid();
        let outcome_rx = gw.pending.open(&msg_id);
        // Registered before the publish so a fast REPLY cannot slip past the waiter.
        let ticket = a
            .wait_reply
            .then(|| gw.pull.register(&me.gid, Want::ReplyFrom { from: a.to.clone() }));
        let mut out = Outgoing::new(
            Kind::Send,
            MSG_EXCHANGE,
            a.to.clone(),
            me.gid.clone(),
            a.text.into_bytes(),
        );
        out.msg_id = Some(msg_id.clone());
        let published = gw.publisher.publish(out).await;
        let finish = |status: &str, extra: Value| {
            let mut v = json!({"msgId": msg_id, "status": status});
            if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
                o.extend(e.clone());
            }
            v
        };
        let cancel = |t: Option<crate::pull::WaitTicket>| {
            if let Some(t) = t
                && let Some(h) = gw.pull.cancel(t)
            {
                gw.pull.put_back(&me.gid, h);
            }
        };
        match published {
            Ok(env) => {
                tracing::debug!(traceId = %env.trace_id, msgId = %env.msg_id, to = %env.to, "SEND published")
            }
            Err(e) => {
                gw.pending.close(&msg_id);
                cancel(ticket);
                return match e {
                    PublishError::NoRoute => ok(finish("no_route", json!({"reason": "no_route"}))),
                    // No confirm within the inject bound: FWD-5's outcome (the SEND may still
                    // have been routed, [C-16]: unknown, not "not delivered").
                    PublishError::ConfirmTimeout(_) => {
                        ok(finish("inject_timeout", json!({"reason": "inject_timeout"})))
                    }
                    other => ok(finish("failed", failure(&other))),
                };
            }
        }
        let waiting = std::time::Instant::now();
        let outcome = tokio::time::timeout(gw.cfg.inject_timeout, outcome_rx).await;
        gw.metrics.observe(Stage::AwaitInjected, waiting.elapsed());
        gw.pending.close(&msg_id);
        match outcome {
            Ok(Ok(SendOutcome::Injected)) => {}
            Ok(Ok(SendOutcome::Failed(b))) => {
                cancel(ticket);
                let mut failed = json!({"reason": b.reason.as_str(), "detail": b.detail});
                if let Some(typed) = b.typed {
                    failed["typed"] = json!(typed); // [C-23]
                }
                return ok(finish("failed", failed));
            }
            Ok(Err(_)) | Err(_) => {
                cancel(ticket);
                return ok(finish("inject_timeout", json!({"reason": "inject_timeout"})));
            }
        }
        let Some(mut t) = ticket else {
            return ok(finish("injected", json!({})));
        };
        match tokio::time::timeout(reply_wait, &mut t.rx).await {
            Ok(Ok(held)) => {
                let d = gw.drain(held).await;
                let key = if d.kind == Kind::Ask { "question" } else { "reply" };
                ok(finish("injected", json!({ key: d })))
            }
            _ => {
                cancel(Some(t));
                ok(finish("injected", json!({"replyTimeout": true})))
            }
        }
    }

    async fn wait(&self, me: Entity, a: WaitArgs) -> Result<CallToolResponse, ErrorData> {
        let timeout = secs(a.timeout_s, 60.0)?;
        let gw = &self.gw;
        match gw.pull.wait(&me.gid, Want::Any { from: a.from }) {
            Ok(held) => ok(json!({"message": gw.drain(held).await})),
            Err(mut t) => match tokio::time::timeout(timeout, &mut t.rx).await {
                Ok(Ok(held)) => ok(json!({"message": gw.drain(held).await})),
                _ => match gw.pull.cancel(t) {
                    Some(held) => ok(json!({"message": gw.drain(held).await})),
                    None => ok(json!({"timeout": true})),
                },
            },
        }
    }

    async fn poll(&self, me: Entity, a: PollArgs) -> Result<CallToolResponse, ErrorData> {
        let gw = &self.gw;
        let taken = gw
            .pull
            .take(&me.gid, &Want::Any { from: a.from }, a.max.unwrap_or(100).max(1));
        let mut out = Vec::with_capacity(taken.len());
        for h in taken {
            out.push(gw.drain(h).await);
        }
        Metrics::gauge(
            &gw.metrics.held_messages,
            &[("gid", &me.gid)],
            gw.pull.held_count(&me.gid) as i64,
        );
        ok(json!({"messages": out}))
    }

    async fn reply(&self, me: Entity, a: ReplyArgs) -> Result<CallToolResponse, ErrorData> {
        let gw = &self.gw;
        let parent = me
            .parent
            .clone()
            .ok_or_else(|| ErrorData::invalid_request("this worker has no parent", None))?;
        let mut out = Outgoing::new(Kind::Reply, MSG_EXCHANGE, parent, me.gid.clone(), a.text.into_bytes());
        out.trace_id = gw.local.last_trace(&me.gid);
        match gw.publisher.publish(out).await {
            Ok(env) => ok(json!({"msgId": env.msg_id, "status": "sent"})),
            Err(PublishError::NoRoute) => ok(json!({"status": "no_route", "reason": "no_route"})),
            Err(e) => ok(failed_json(&e)),
        }
    }
}

impl Mcp {
    async fn broadcast(&self, me: Entity, a: BroadcastArgs) -> Result<CallToolResponse, ErrorData> {
        if !valid_group(&a.group) {
            return Err(ErrorData::invalid_params(
                "group must be `all` or match [a-z0-9][a-z0-9_-]{0,62}",
                None,
            ));
        }
        let key = crate::topology::broadcast_key(&a.group);
        // BRD-1: once, without `mandatory` (an empty group is legal silence).
        let out = Outgoing::new(Kind::Broadcast, MSG_EXCHANGE, key, me.gid.clone(), a.text.into_bytes());
        match self.gw.publisher.publish(out).await {
            Ok(env) => ok(json!({"msgId": env.msg_id})),
            Err(e) => ok(failed_json(&e)),
        }
    }

    /// Waits until `gid` is (or is no longer) live on `host`, or a FAILED about `msg_id` arrives.
    async fn await_presence(
        &self,
        mut outcome: tokio::sync::oneshot::Receiver<SendOutcome>,
        msg_id: &str,
        gid: &str,
        host: &str,
        present: bool,
    ) -> Result<(), (String, String)> {
        let gw = &self.gw;
        let deadline = tokio::time::Instant::now() + gw.cfg.inject_timeout;
        let result = loop {
            if gw.roster.lives_on(gid, host) == present {
                break Ok(());
            }
            match outcome.try_recv() {
                Ok(SendOutcome::Failed(b)) => break Err((b.reason.as_str().to_string(), b.detail)),
                Ok(SendOutcome::Injected) if present => break Ok(()),
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                break Err((
                    "timeout".into(),
                    format!(
                        "{gid} did not {} on {host} in time",
                        if present { "appear" } else { "leave" }
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        gw.pending.close(msg_id);
        result
    }

    async fn spawn(&self, me: Entity, a: SpawnArgs) -> Result<CallToolResponse, ErrorData> {
        if !crate::config::valid_host_id(&a.host) {
            return Err(ErrorData::invalid_params("host must be a host id", None));
        }
        if let Some(g) = a.groups.iter().find(|g| !valid_group(g) || *g == "all") {
            return Err(ErrorData::invalid_params(format!("invalid group {g:?}"), None));
        }
        let gw = &self.gw;
        let gid = new_uuid();
        let msg_id = new_uuid();
        let body = crate::spawn::SpawnBody {
            profile: a.profile,
            brief: a.brief,
            groups: a.groups,
            parent: Some(me.gid.clone()),
        };
        let mut out = Outgoing::new(
            Kind::Spawn,
            crate::topology::CONTROL_EXCHANGE,
            a.host.clone(),
            me.gid.clone(),
            serde_json::to_vec(&body).unwrap_or_default(),
        );
        out.msg_id = Some(msg_id.clone());
        out.spawn_id = Some(gid.clone());
        // Registered before the publish so a fast FAILED is not missed.
        let outcome = gw.pending.open(&msg_id);
        match gw.publisher.publish(out).await {
            Err(PublishError::NoRoute) => {
                gw.pending.close(&msg_id);
                return ok(json!({"gid": gid, "status": "failed", "reason": "no_route"}));
            }
            Err(e) => {
                gw.pending.close(&msg_id);
                return ok(with_gid(&gid, failed_json(&e)));
            }
            Ok(_) => {}
        }
        match self.await_presence(outcome, &msg_id, &gid, &a.host, true).await {
            Ok(()) => ok(json!({"gid": gid, "status": "present"})),
            Err((reason, detail)) => ok(json!({"gid": gid, "status": "failed", "reason": reason, "detail": detail})),
        }
    }

    async fn stop(&self, me: Entity, a: StopArgs) -> Result<CallToolResponse, ErrorData> {
        let gw = &self.gw;
        if gw.entity(&a.gid).is_some() {
            return match gw.stop_entity(&a.gid).await {
                Ok(_) => ok(json!({"status": "stopped"})),
                Err(e) => ok(json!({"status": "failed", "reason": "stopped", "detail": e.to_string()})),
            };
        }
        let Some(host) = gw.roster.host_of(&a.gid) else {
            return ok(json!({"status": "failed", "reason": "no_such_entity"}));
        };
        let msg_id = new_uuid();
        let body = serde_json::to_vec(&json!({"gid": a.gid})).unwrap_or_default();
        let mut out = Outgoing::new(
            Kind::Stop,
            crate::topology::CONTROL_EXCHANGE,
            host.clone(),
            me.gid.clone(),
            body,
        );
        out.msg_id = Some(msg_id.clone());
        let outcome = gw.pending.open(&msg_id);
        match gw.publisher.publish(out).await {
            Err(PublishError::NoRoute) => {
                gw.pending.close(&msg_id);
                return ok(json!({"status": "failed", "reason": "no_route"}));
            }
            Err(e) => {
                gw.pending.close(&msg_id);
                return ok(failed_json(&e));
            }
            Ok(_) => {}
        }
        match self.await_presence(outcome, &msg_id, &a.gid, &host, false).await {
            Ok(()) => ok(json!({"status": "stopped"})),
            Err((reason, detail)) => ok(json!({"status": "failed", "reason": reason, "detail": detail})),
        }
    }

    async fn ask(&self, me: Entity, a: AskArgs) -> Result<CallToolResponse, ErrorData> {
        use crate::conversation::AskOutcome;
        let timeout = secs(a.timeout_s, 300.0)?;
        match self.gw.ask(&me, &a.question, timeout).await {
            AskOutcome::Answered(text) => ok(json!({"status": "answered", "answer": text})),
            AskOutcome::NoWaiter => ok(json!({"status": "no_waiter"})),
            AskOutcome::Expired => ok(json!({"status": "expired"})),
            AskOutcome::NoRoute => ok(json!({"status": "no_route"})),
            AskOutcome::Failed(detail) => ok(json!({"status": "failed", "detail": detail})),
            AskOutcome::NotPublished(e) => ok(failed_json(&e)),
        }
    }

    async fn answer(&self, me: Entity, a: AnswerArgs) -> Result<CallToolResponse, ErrorData> {
        use crate::conversation::AnswerOutcome;
        match self.gw.answer(&me, &a.turn_id, &a.text).await {
            AnswerOutcome::Sent => ok(json!({"status": "sent"})),
            AnswerOutcome::Abandoned => ok(json!({"status": "abandoned"})),
            AnswerOutcome::Expired => ok(json!({"status": "expired"})),
            AnswerOutcome::Unknown => Err(ErrorData::invalid_params(
                format!("no open question with turn_id {}", a.turn_id),
                None,
            )),
            AnswerOutcome::Failed(detail) => ok(json!({"status": "failed", "detail": detail})),
        }
    }
}

impl ServerHandler for Mcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(rmcp::model::Implementation::new(
                "fleet-gateway",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions("Fleet cross-host messaging: bridge_* tools.")
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        // [C-22]: a caller is listed every tool its role may call, and only those.
        let me = self.caller(&context)?;
        Ok(ListToolsResult {
            tools: tools::listed_for(me.role),
            ..Default::default()
        })
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let me = self.caller(&context)?;
        match tools::may_call(me.role, &request.name) {
            Some(true) => {}
            // [C-22]: a tool the caller is not listed is refused as a tool error (`isError`).
            Some(false) => {
                return Ok(CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
                    "{} is not available to a {}",
                    request.name,
                    me.role.as_str()
                ))])
                .into());
            }
            None => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {}", request.name),
                    None,
                ));
            }
        }
        match request.name.as_ref() {
            "bridge_send" => self.send(me, args(&request)?).await,
            "bridge_wait" => self.wait(me, args(&request)?).await,
            "bridge_poll" => self.poll(me, args(&request)?).await,
            "bridge_reply" => self.reply(me, args(&request)?).await,
            "bridge_roster" => ok(json!({"entries": self.gw.roster.snapshot()})),
            "bridge_broadcast" => self.broadcast(me, args(&request)?).await,
            "bridge_spawn" => self.spawn(me, args(&request)?).await,
            "bridge_stop" => self.stop(me, args(&request)?).await,
            "bridge_ask" => self.ask(me, args(&request)?).await,
            "bridge_answer" => self.answer(me, args(&request)?).await,
            other => Err(ErrorData::invalid_params(format!("unknown tool {other}"), None)),
        }
    }
}

/// The reason and detail of a publish that failed (CONTRACT §3): `not_connected` when nothing of
/// the message was handed to the broker (definite: it is never delivered), `revoked` /
/// `cert_expired` / `certificate` when the gateway refused to send with a credential every
/// receiver would reject ([C-21] 9, definite too), else `publish` — the broker may have routed it
/// ([C-16]: unknown).
fn failure(e: &PublishError) -> Value {
    let reason = match e {
        PublishError::NotConnected => "not_connected",
        PublishError::Refused { reason, .. } => reason,
        _ => "publish",
    };
    json!({"reason": reason, "detail": e.to_string()})
}

/// `{status: failed, reason, detail}` for a publish that failed ([`failure`]).
fn failed_json(e: &PublishError) -> Value {
    let mut v = failure(e);
    if let Some(o) = v.as_object_mut() {
        o.insert("status".into(), json!("failed"));
    }
    v
}

/// `v` with the spawned entity's `gid` first among its fields' meaning (bridge_spawn's result).
fn with_gid(gid: &str, mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.insert("gid".into(), json!(gid));
    }
    v
}
