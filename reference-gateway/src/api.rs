//! The local HTTP surface (SPEC §15): the admin API, health, metrics, and the MCP endpoint.
//!
//! Everything listens on one loopback address. `/v1/…` takes the admin bearer token; `/mcp` takes
//! an entity's token (checked here so a bad token is a plain 401, before any MCP handshake);
//! `/healthz`, `/readyz` and `/metrics` are open, as probes and scrapers expect.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use crate::entities::{EntityError, RegisterRequest};
use crate::gateway::{EntityHealth, Gateway};
use crate::mcp::{Mcp, bearer};
use crate::metrics::Metrics;

/// Builds the router of one gateway.
pub fn router(gw: Arc<Gateway>) -> Router {
    let mcp_gw = gw.clone();
    // No SSE priming event before each answer (issue 46): the reference keeps no event store, so
    // a client could not resume a stream by its event id anyway; without it a tool call's answer
    // is one event, and the session layer caches nothing to replay.
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.sse_retry = None;
    let mcp = StreamableHttpService::new(
        move || Ok(Mcp::new(mcp_gw.clone())),
        Arc::new(sessions),
        StreamableHttpServerConfig::default().with_sse_retry(None),
    );
    let admin = Router::new()
        .route("/v1/entities", get(list_entities).post(register))
        .route("/v1/entities/{gid}", axum::routing::delete(stop))
        .route("/v1/roster", get(roster))
        .route("/v1/trust", get(trust))
        .route_layer(middleware::from_fn_with_state(gw.clone(), admin_auth));
    let mcp_routes = Router::new()
        .nest_service("/mcp", mcp)
        .layer(middleware::from_fn(session_end))
        .layer(middleware::from_fn_with_state(gw.clone(), entity_auth));
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .merge(admin)
        .merge(mcp_routes)
        .with_state(gw)
}

async fn admin_auth(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    match bearer(req.headers()) {
        Some(t) if crate::registry::constant_time_eq(t.as_bytes(), gw.cfg.admin_token.as_bytes()) => {
            next.run(req).await
        }
        _ => (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "admin bearer token required"})),
        )
            .into_response(),
    }
}

async fn entity_auth(State(gw): State<Arc<Gateway>>, req: Request, next: Next) -> Response {
    match bearer(req.headers()).and_then(|t| gw.entity_by_token(t)) {
        Some(_) => next.run(req).await,
        None => (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "entity bearer token required"})),
        )
            .into_response(),
    }
}

/// [C-22]: a session ended with `DELETE /mcp` is answered 204, what the official SDKs expect
/// (rmcp closes the session and answers 202, which the Python SDK logs as a failed termination).
async fn session_end(req: Request, next: Next) -> Response {
    let delete = req.method() == axum::http::Method::DELETE;
    let res = next.run(req).await;
    if delete && res.status() == StatusCode::ACCEPTED {
        return StatusCode::NO_CONTENT.into_response();
    }
    res
}

fn error_response(e: EntityError) -> Response {
    let status = match e {
        EntityError::Invalid(_) => StatusCode::BAD_REQUEST,
        EntityError::Exists(_) => StatusCode::CONFLICT,
        EntityError::NotFound(_) => StatusCode::NOT_FOUND,
        EntityError::Broker(_) | EntityError::Registry(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(json!({"error": e.to_string()}))).into_response()
}

async fn register(State(gw): State<Arc<Gateway>>, body: axum::body::Bytes) -> Response {
    let req: RegisterRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error_response(EntityError::Invalid(e.to_string())),
    };
    match gw.register(req, None).await {
        Ok(e) => match gw.local.health_of(&e.gid) {
            // Registered, but its inbox cannot be consumed yet (CLU-7): accepted, not ready.
            Some(EntityHealth::Failed(why)) => (
                StatusCode::ACCEPTED,
                Json(json!({"gid": e.gid, "token": e.token, "ready": false, "error": why})),
            )
                .into_response(),
            _ => (StatusCode::CREATED, Json(json!({"gid": e.gid, "token": e.token}))).into_response(),
        },
        Err(e) => error_response(e),
    }
}

async fn stop(State(gw): State<Arc<Gateway>>, Path(gid): Path<String>) -> Response {
    match gw.stop_entity(&gid).await {
        Ok(_) => (StatusCode::OK, Json(json!({"status": "stopped"}))).into_response(),
        Err(e) => error_response(e),
    }
}

async fn list_entities(State(gw): State<Arc<Gateway>>) -> Response {
    let list: Vec<_> = gw
        .entities()
        .into_iter()
        .map(|e| json!({"gid": e.gid, "role": e.role, "pane": e.pane, "groups": e.groups, "parent": e.parent}))
        .collect();
    Json(json!({"entities": list})).into_response()
}

/// What this gateway trusts now, and why (SPEC §18; reference behaviour, README).
async fn trust(State(gw): State<Arc<Gateway>>) -> Response {
    Json(gw.trust_report()).into_response()
}

async fn roster(State(gw): State<Arc<Gateway>>) -> Response {
    Json(json!({"entries": gw.roster.snapshot()})).into_response()
}

async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    let (ready, health) = gw.readiness();
    let entities: serde_json::Map<String, serde_json::Value> = health
        .into_iter()
        .map(|(gid, h)| {
            let v = match h {
                EntityHealth::Ready => json!("ready"),
                EntityHealth::Failed(why) => json!({"failed": why}),
            };
            (gid, v)
        })
        .collect();
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let connected = gw.is_connected();
    let error = gw.setup_error.lock().ok().and_then(|e| e.clone());
    let certificate = gw.membership.unready();
    // Not ready: why, in one line an operator reads without knowing the fields.
    let why = (!ready).then(|| {
        let mut why: Vec<String> = Vec::new();
        if !connected {
            why.push(match &error {
                Some(e) => format!("not connected to the broker: {e}"),
                None => "not connected to the broker".to_string(),
            });
        }
        if let Some(c) = &certificate {
            why.push(format!("own credential: {c}"));
        }
        for (gid, v) in &entities {
            if let Some(f) = v.get("failed").and_then(|f| f.as_str()) {
                why.push(format!("entity {gid}: {f}"));
            }
        }
        if why.is_empty() {
            why.push("starting".to_string());
        }
        why.join("; ")
    });
    (
        code,
        Json(json!({
            "ready": ready,
            "why": why,
            "connected": connected,
            "entities": entities,
            "error": error,
            "certificate": certificate,
        })),
    )
        .into_response()
}

async fn metrics(State(gw): State<Arc<Gateway>>) -> Response {
    // Gauges read at scrape time: the roster's size and each main's held backlog (RPL-5).
    let roster_size = gw.roster.snapshot().len() as i64;
    gw.metrics.roster_entries.set(roster_size);
    for e in gw.entities() {
        if e.role != crate::registry::Role::Worker {
            let held = gw.pull.held_count(&e.gid) as i64;
            Metrics::gauge(&gw.metrics.held_messages, &[("gid", &e.gid)], held);
        }
    }
    (
        [(axum::http::header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)],
        gw.metrics.render(),
    )
        .into_response()
}
