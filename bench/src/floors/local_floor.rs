//! The floor of a gateway's two local protocols: serving one MCP call over HTTP (side a) and
//! making herdr's four one-shot requests of an inject (side b), each timed with a minimal
//! implementation on this machine, in the same run.
//!
//! Why: the profile charges a share of gateway a's CPU per brief to "HTTP + MCP" and of gateway
//! b's to "herdr client". Whether that is the gateway's own fat or what the protocols cost anyone
//! cannot be read from the profile: SPEC §15 makes every gateway serve MCP over HTTP, and
//! herdr (HERDR.md) answers one request per connection, so every inject pays four connects,
//! four writes, four reads and four closes whatever the gateway is written in. This module
//! measures both with the least code that still does the job:
//!
//! - **MCP over HTTP**: a bare `hyper` HTTP/1.1 server (no router, no middleware, no MCP
//!   session) on its own thread and single-threaded runtime, answering `tools/call` requests shaped
//!   like the bench's `bridge_send` (bearer token, JSON-RPC body with the brief) with a JSON
//!   result, to `pairs` kept-alive clients at once. Its thread's CPU clock ÷ calls served.
//! - **herdr**: a client on its own thread and single-threaded runtime making an inject's four
//!   requests ([`herdr_client`]: `agent.wait` and `pane.process_info`, which SPEC [C-20] makes
//!   every gateway ask before typing; `pane.send_input`; the submit check's `agent.get`; each
//!   connect, one line out, one line in, close) against the suite's fake herdr, `pairs` injects
//!   at once. Its thread's CPU clock ÷ injects; the fake's own work runs on other threads and is
//!   not counted, as in the gateway.
//!
//! Both figures are lower bounds: a real MCP server also keeps sessions and may answer in SSE,
//! a real gateway also bounds each herdr call with a timeout. Nothing is judged here.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context as _, anyhow};
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use crate::floors::herdr_client;
use crate::rig::stats::thread_cpu;

/// The token the minimal server expects (any fixed string: it is compared, as a gateway must).
const TOKEN: &str = "floor-token";

/// CPU ms one minimal HTTP server spends per `tools/call`, with `clients` kept-alive clients
/// sending `calls` calls in all, each carrying a `size`-byte brief.
pub async fn mcp_ms(size: usize, clients: usize, calls: usize) -> anyhow::Result<f64> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding the minimal MCP server")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let served = Arc::new(AtomicUsize::new(0));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let count = served.clone();
    let server = std::thread::spawn(move || -> anyhow::Result<f64> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let start = thread_cpu();
        rt.block_on(serve(listener, count, stop_rx))?;
        Ok(thread_cpu().saturating_sub(start).as_secs_f64() * 1e3)
    });
    let result = drive_mcp(addr, size, clients.max(1), calls.max(1)).await;
    let _ = stop_tx.send(());
    let spent = server
        .join()
        .map_err(|_| anyhow!("the minimal MCP server panicked"))??;
    result?;
    let n = served.load(Ordering::Relaxed);
    (n > 0)
        .then(|| spent / n as f64)
        .ok_or_else(|| anyhow!("the minimal MCP server served no call"))
}

/// The minimal server: accept, serve each connection with hyper's HTTP/1.1, until told to stop.
async fn serve(
    listener: std::net::TcpListener,
    served: Arc<AtomicUsize>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    loop {
        let (stream, _) = tokio::select! {
            a = listener.accept() => a?,
            _ = &mut stop => return Ok(()),
        };
        stream.set_nodelay(true)?;
        let served = served.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| answer(req, served.clone()));
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

/// One `tools/call`: check the bearer token, parse the JSON-RPC request, answer its id.
async fn answer(req: Request<Incoming>, served: Arc<AtomicUsize>) -> Result<Response<Full<Bytes>>, Infallible> {
    let authorised = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| t == TOKEN);
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        Ok(r)
    };
    if !authorised {
        return reply(StatusCode::UNAUTHORIZED, b"{}".to_vec());
    }
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(StatusCode::BAD_REQUEST, b"{}".to_vec()),
    };
    let call: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(_) => return reply(StatusCode::BAD_REQUEST, b"{}".to_vec()),
    };
    let outcome = json!({"msgId": uuid::Uuid::new_v4().to_string(), "status": "injected"});
    let result = json!({
        "jsonrpc": "2.0",
        "id": call.get("id").cloned().unwrap_or(Value::Null),
        "result": {
            "content": [{"type": "text", "text": outcome.to_string()}],
            "structuredContent": outcome,
            "isError": false,
        },
    });
    served.fetch_add(1, Ordering::Relaxed);
    reply(StatusCode::OK, serde_json::to_vec(&result).unwrap_or_default())
}

/// `clients` pooled clients, `calls` calls in all, as the bench's MCP sessions send them.
async fn drive_mcp(addr: std::net::SocketAddr, size: usize, clients: usize, calls: usize) -> anyhow::Result<()> {
    let url = format!("http://{addr}/mcp");
    let text = "x".repeat(size);
    let left = Arc::new(AtomicUsize::new(calls));
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..clients {
        let (url, text, left) = (url.clone(), text.clone(), left.clone());
        tasks.spawn(async move {
            let http = fleet_conformance::mcp::http_client();
            let mut id = 0u64;
            while left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok() {
                id += 1;
                let body = json!({
                    "jsonrpc": "2.0", "id": id, "method": "tools/call",
                    "params": {"name": "bridge_send", "arguments": {"to": format!("{c:08}-0000-4000-8000-000000000000"), "text": text}},
                });
                let r = http
                    .post(&url)
                    .bearer_auth(TOKEN)
                    .header("accept", "application/json, text/event-stream")
                    .json(&body)
                    .send()
                    .await
                    .context("calling the minimal MCP server")?;
                if !r.status().is_success() {
                    return Err(anyhow!("the minimal MCP server answered {}", r.status()));
                }
                r.bytes().await.context("reading the minimal MCP server's answer")?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("an MCP floor client")??;
    }
    Ok(())
}

/// CPU ms one minimal herdr client spends on an inject's requests, `injects` in all,
/// `parallel` at once, against a fake herdr in `dir` ([`herdr_client`]).
pub async fn herdr_ms(dir: PathBuf, parallel: usize, injects: usize) -> anyhow::Result<f64> {
    let (herdr, panes) = herdr_client::start_fake(&dir, parallel).await?;
    let socket = herdr.socket_path().to_path_buf();
    let injects = injects.max(1);
    let client = std::thread::spawn(move || -> anyhow::Result<f64> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let start = thread_cpu();
        rt.block_on(drive_herdr(socket, panes, injects))?;
        Ok(thread_cpu().saturating_sub(start).as_secs_f64() * 1e3)
    });
    let joined = tokio::task::spawn_blocking(move || client.join()).await;
    herdr_client::stop_fake(herdr, &dir).await;
    let spent = joined
        .context("waiting for the herdr floor client")?
        .map_err(|_| anyhow!("the herdr floor client panicked"))??;
    Ok(spent / injects as f64)
}

/// The injects, spread over the panes, each pane's in turn (as a gateway serialises per pane).
async fn drive_herdr(socket: PathBuf, panes: Vec<String>, injects: usize) -> anyhow::Result<()> {
    let left = Arc::new(AtomicUsize::new(injects));
    let mut tasks = tokio::task::JoinSet::new();
    for pane in panes {
        let (socket, left) = (socket.clone(), left.clone());
        tasks.spawn(async move {
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                herdr_client::inject(&socket, &pane, "brief").await?;
            }
            anyhow::Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.context("a herdr floor client")??;
    }
    Ok(())
}

/// Both local floors, or why one could not be measured (printed, never fatal to the run).
pub async fn measure(size: usize, parallel: usize, work: PathBuf) -> (Result<f64, String>, Result<f64, String>) {
    let mcp = mcp_ms(size, parallel, 4000).await.map_err(|e| format!("{e:#}"));
    let herdr = herdr_ms(work, parallel, 2000).await.map_err(|e| format!("{e:#}"));
    (mcp, herdr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_minimal_mcp_call_costs_something_and_not_much() {
        let ms = mcp_ms(1024, 2, 50).await.expect("the minimal server answers");
        assert!(ms > 0.0 && ms < 50.0, "{ms} ms");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_minimal_inject_makes_its_four_requests() {
        let dir = std::env::temp_dir().join(format!("fleet-floor-{}", uuid::Uuid::new_v4()));
        let ms = herdr_ms(dir, 2, 20).await.expect("the fake herdr answers");
        assert!(ms > 0.0 && ms < 50.0, "{ms} ms");
    }
}
