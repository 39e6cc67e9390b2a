//! The client's deadlines and dead-session rules against a hand-written MCP server that can be
//! told to answer, never answer, cut a response stream, or forget every session (HTTP 404) —
//! the failures a real gateway shows only under a broker cut or a restart.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use super::*;

/// What the fake does with the next `tools/call` (a `tools/list` is always answered).
#[derive(Debug, Clone, Copy)]
enum Act {
    /// Answers at once.
    Answer,
    /// Reads the request and never answers (the connection stays open).
    Hang,
    /// Opens an SSE response and closes it without any event: the result is lost.
    Cut,
    /// Forgets every session first, so the request is refused with 404.
    Forget,
}

#[derive(Default)]
struct State {
    /// What the server saw, in order: `initialize <authorization>`, `<method> <tool> <session>`.
    log: Mutex<Vec<String>>,
    sessions: Mutex<HashSet<String>>,
    next_session: AtomicU32,
    script: Mutex<VecDeque<Act>>,
    /// The tools `tools/list` names; every tool of SPEC §15 unless a test says otherwise.
    listed: Mutex<Vec<String>>,
}

/// The ten tools of SPEC §15's table.
use super::listing::TOOLS as ALL_TOOLS;

impl State {
    fn log(&self) -> Vec<String> {
        self.log.lock().map(|l| l.clone()).unwrap_or_default()
    }
}

/// A fake MCP server (streamable HTTP, JSON responses, no standalone SSE stream).
struct Fake {
    url: String,
    state: std::sync::Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Fake {
    async fn start(script: &[Act]) -> Fake {
        Fake::listing(script, &ALL_TOOLS).await
    }

    /// A fake whose `tools/list` names only `tools`.
    async fn listing(script: &[Act], tools: &[&str]) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let state = std::sync::Arc::new(State::default());
        if let Ok(mut s) = state.script.lock() {
            s.extend(script.iter().copied());
        }
        if let Ok(mut l) = state.listed.lock() {
            *l = tools.iter().map(|t| t.to_string()).collect();
        }
        let st = state.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((sock, _)) = listener.accept().await {
                conns.spawn(serve_conn(sock, st.clone()));
            }
        });
        Fake {
            url: format!("http://{addr}/mcp"),
            state,
            task,
        }
    }

    fn calls_of(&self, tool: &str) -> usize {
        let needle = format!("tools/call {tool} ");
        self.state.log().iter().filter(|l| l.starts_with(&needle)).count()
    }
}

struct Request {
    method: String,
    headers: HashMap<String, String>,
    body: Vec<u8>,
}

async fn read_request(sock: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Request> {
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let method = lines.next()?.split(' ').next()?.to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
    let body_start = head_end + 4;
    while buf.len() < body_start + len {
        let mut chunk = [0u8; 4096];
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[body_start..body_start + len].to_vec();
    buf.drain(..body_start + len);
    Some(Request { method, headers, body })
}

fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out.into_bytes()
}

async fn serve_conn(mut sock: TcpStream, state: std::sync::Arc<State>) {
    let mut buf = Vec::new();
    while let Some(req) = read_request(&mut sock, &mut buf).await {
        let out = match req.method.as_str() {
            // No standalone stream, no session deletion: both optional for a server.
            "GET" | "DELETE" => response("405 Method Not Allowed", &[], ""),
            _ => match handle_post(&req, &state) {
                Reply::Bytes(b) => b,
                Reply::Hang => std::future::pending().await,
                Reply::Cut => {
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
                    let _ = sock.write_all(head.as_bytes()).await;
                    let _ = sock.shutdown().await;
                    return;
                }
            },
        };
        if sock.write_all(&out).await.is_err() {
            return;
        }
    }
}

enum Reply {
    Bytes(Vec<u8>),
    Hang,
    Cut,
}

fn handle_post(req: &Request, state: &State) -> Reply {
    let msg: Value = serde_json::from_slice(&req.body).unwrap_or_default();
    let method = msg["method"].as_str().unwrap_or_default().to_string();
    let id = msg["id"].clone();
    let session = req.headers.get("mcp-session-id").cloned();
    let log = |line: String| {
        if let Ok(mut l) = state.log.lock() {
            l.push(line);
        }
    };
    if method == "initialize" {
        let sid = format!("s{}", state.next_session.fetch_add(1, Ordering::SeqCst) + 1);
        if let Ok(mut s) = state.sessions.lock() {
            s.insert(sid.clone());
        }
        log(format!(
            "initialize {}",
            req.headers.get("authorization").cloned().unwrap_or_default()
        ));
        let result = json!({"jsonrpc": "2.0", "id": id, "result": {
            "protocolVersion": msg["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake", "version": "0"}}});
        return Reply::Bytes(response(
            "200 OK",
            &[("content-type", "application/json"), ("mcp-session-id", &sid)],
            &result.to_string(),
        ));
    }
    if msg.get("id").is_none() {
        return Reply::Bytes(response("202 Accepted", &[], ""));
    }
    let act = if method == "tools/call" {
        state
            .script
            .lock()
            .ok()
            .and_then(|mut s| s.pop_front())
            .unwrap_or(Act::Answer)
    } else {
        Act::Answer
    };
    if let Act::Forget = act
        && let Ok(mut s) = state.sessions.lock()
    {
        s.clear();
    }
    let sid = session.unwrap_or_default();
    let known = state.sessions.lock().map(|s| s.contains(&sid)).unwrap_or(false);
    let tool = msg["params"]["name"].as_str().unwrap_or("-").to_string();
    if !known {
        log(format!("404 {method} {tool} {sid}"));
        return Reply::Bytes(response("404 Not Found", &[], ""));
    }
    log(format!("{method} {tool} {sid}"));
    match act {
        Act::Hang => return Reply::Hang,
        Act::Cut => return Reply::Cut,
        Act::Answer | Act::Forget => {}
    }
    let result = if method == "tools/list" {
        let names = state.listed.lock().map(|l| l.clone()).unwrap_or_default();
        let tools: Vec<Value> = names
            .iter()
            .map(|n| json!({"name": n, "inputSchema": {"type": "object"}}))
            .collect();
        json!({ "tools": tools })
    } else {
        // The echo is also a valid answer of every tool the tests call (the client checks each
        // answer against the contract's schema): a poll's messages, a roster's entries, a wait's
        // timeout, a send's status.
        let out = json!({"tool": tool, "args": msg["params"]["arguments"], "messages": [], "entries": [],
            "timeout": true, "status": "injected", "msgId": "3f2a0c1e-9d4b-4c1a-8f00-1234567890ab"});
        json!({"content": [{"type": "text", "text": out.to_string()}], "structuredContent": out, "isError": false})
    };
    let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
    Reply::Bytes(response(
        "200 OK",
        &[("content-type", "application/json")],
        &body.to_string(),
    ))
}

/// Short deadlines, so the failures show up in well under a second.
fn short() -> Deadlines {
    Deadlines {
        quick: Duration::from_millis(400),
        outcome: Duration::from_millis(300),
        margin: Duration::from_millis(200),
        connect: Duration::from_millis(1500),
        unspecified_wait: Duration::from_secs(600),
    }
}

async fn client(fake: &Fake) -> McpClient {
    McpClient::connect_with(&fake.url, "tok-1", short())
        .await
        .expect("connect to the fake")
}

#[tokio::test]
async fn an_answered_call_returns_the_structured_result() {
    let fake = Fake::start(&[]).await;
    let c = client(&fake).await;
    let v = c.call("bridge_poll", json!({"max": 3})).await.expect("answered");
    assert_eq!((&v["tool"], &v["args"]), (&json!("bridge_poll"), &json!({"max": 3})));
    assert_eq!(
        c.tool_names().await.expect("listed"),
        ALL_TOOLS.map(String::from).to_vec()
    );
    let listed: Vec<String> = c.listed().iter().map(|t| t.name.clone()).collect();
    assert_eq!(
        listed,
        ALL_TOOLS.map(String::from).to_vec(),
        "asked once, at initialize"
    );
}

#[tokio::test]
async fn a_tool_the_session_was_not_listed_is_never_sent() {
    let fake = Fake::listing(&[], &["bridge_roster"]).await;
    let c = client(&fake).await;
    let err = c.call("bridge_poll", json!({})).await.expect_err("not listed");
    let msg = err.to_string();
    assert!(matches!(err, McpError::Unlisted { .. }), "{msg}");
    assert!(msg.contains("[C-22]") && msg.contains("bridge_roster"), "{msg}");
    assert_eq!(fake.calls_of("bridge_poll"), 0, "{:?}", fake.state.log());
    // Called by name on purpose, it goes out.
    let raw = c.call_unlisted("bridge_poll", json!({})).await.expect("sent by name");
    assert_eq!(raw.is_error, Some(false));
    assert_eq!(fake.calls_of("bridge_poll"), 1, "{:?}", fake.state.log());
    c.call("bridge_roster", json!({})).await.expect("listed");
}

#[tokio::test]
async fn a_call_the_gateway_never_answers_fails_at_its_deadline_saying_what_it_waited_for() {
    let fake = Fake::start(&[Act::Hang]).await;
    let c = client(&fake).await;
    let t0 = Instant::now();
    let err = c
        .call(
            "bridge_poll",
            json!({"from": "3f2a0c1e-9d4b-4c1a-8f00-1234567890ab", "max": 200}),
        )
        .await
        .expect_err("must time out");
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "{took:?}"
    );
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(matches!(err, McpError::Deadline { .. }), "{msg}");
    for part in [
        "bridge_poll",
        "3f2a0c1e-9d4b-4c1a-8f00-1234567890ab",
        "no answer within 0.4 s",
        "quick call",
    ] {
        assert!(msg.contains(part), "{part:?} missing in: {msg}");
    }
}

#[tokio::test]
async fn a_blocking_call_gets_its_own_timeout_plus_the_margin() {
    let fake = Fake::start(&[Act::Hang]).await;
    let c = client(&fake).await;
    let t0 = Instant::now();
    let err = c
        .call("bridge_wait", json!({"timeout_s": 0.5}))
        .await
        .expect_err("must time out");
    let took = t0.elapsed();
    // 0.5 s asked for + 0.2 s margin: not the 0.4 s of a quick call.
    assert!(
        took >= Duration::from_millis(700) && took < Duration::from_secs(3),
        "{took:?}"
    );
    assert!(err.to_string().contains("timeout_s 0.5 s + margin 0.2 s"), "{err}");
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_fails_the_connect_at_its_deadline() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    let t0 = Instant::now();
    let err = McpClient::connect_with(&format!("http://{addr}/mcp"), "tok", short())
        .await
        .err()
        .expect("must fail");
    let took = t0.elapsed();
    holder.abort();
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(
        err.to_string().contains("no answer to initialize within 1.5 s"),
        "{err}"
    );
}

#[tokio::test]
async fn a_send_whose_answer_is_lost_is_not_retried() {
    let fake = Fake::start(&[Act::Cut]).await;
    let c = client(&fake).await;
    let err = c
        .call("bridge_send", json!({"to": "w", "text": "brief", "wait_reply": false}))
        .await
        .expect_err("the answer was lost");
    let msg = err.to_string();
    eprintln!("{msg}");
    assert!(matches!(err, McpError::SessionDied { .. }), "{msg}");
    assert!(msg.contains("died mid-call") && msg.contains("not retried"), "{msg}");
    assert_eq!(fake.calls_of("bridge_send"), 1, "{:?}", fake.state.log());
    // The session itself is fine: the next call goes through.
    c.call("bridge_poll", json!({})).await.expect("next call");
}

#[tokio::test]
async fn a_read_only_call_whose_answer_is_lost_is_retried_once() {
    let fake = Fake::start(&[Act::Cut]).await;
    let c = client(&fake).await;
    let v = c.call("bridge_roster", json!({})).await.expect("retried");
    assert_eq!(v["tool"], "bridge_roster");
    assert_eq!(fake.calls_of("bridge_roster"), 2, "{:?}", fake.state.log());
}

#[tokio::test]
async fn a_read_only_call_lost_twice_fails() {
    let fake = Fake::start(&[Act::Cut, Act::Cut]).await;
    let c = client(&fake).await;
    let err = c.call("bridge_roster", json!({})).await.expect_err("lost twice");
    eprintln!("{err}");
    assert!(err.to_string().contains("already retried once"), "{err}");
}

#[tokio::test]
async fn a_session_the_gateway_forgot_is_reopened_with_the_same_token_and_the_refused_call_goes_again() {
    let fake = Fake::start(&[Act::Forget]).await;
    let c = client(&fake).await;
    let handle = c.handle();
    let v = handle
        .call("bridge_send", json!({"to": "w", "text": "brief", "wait_reply": false}))
        .await
        .expect("sent on the reopened session");
    assert_eq!(v["tool"], "bridge_send");
    let log = fake.state.log();
    let inits: Vec<_> = log.iter().filter(|l| l.starts_with("initialize")).collect();
    assert_eq!(inits, ["initialize Bearer tok-1", "initialize Bearer tok-1"], "{log:?}");
    // Refused once (404, no tool ran), run once on the new session.
    assert!(log.contains(&"404 tools/call bridge_send s1".to_string()), "{log:?}");
    assert_eq!(fake.calls_of("bridge_send"), 1, "{log:?}");
    // The client and its handles share the new session.
    c.call("bridge_poll", json!({}))
        .await
        .expect("client uses the new session");
    assert!(fake.state.log().contains(&"tools/call bridge_poll s2".to_string()));
}

#[tokio::test]
async fn a_dropped_client_fails_its_handles_calls_at_once() {
    let fake = Fake::start(&[]).await;
    let c = client(&fake).await;
    let handle = c.handle();
    drop(c);
    let err = handle.call("bridge_poll", json!({})).await.expect_err("closed");
    assert!(matches!(err, McpError::Closed { .. }), "{err}");
}

#[test]
fn deadlines_follow_the_calls_arguments() {
    let d = Deadlines {
        quick: Duration::from_secs(30),
        outcome: Duration::from_secs(60),
        margin: Duration::from_secs(15),
        connect: Duration::from_secs(20),
        unspecified_wait: Duration::from_secs(600),
    };
    let secs = |tool: &str, args: Value| d.for_call(tool, &args).0.as_secs();
    assert_eq!(secs("bridge_send", json!({"wait_reply": false})), 75);
    assert_eq!(secs("bridge_send", json!({"wait_reply": true, "timeout_s": 60})), 135);
    assert_eq!(
        secs("bridge_send", json!({"to": "x"})),
        675,
        "wait_reply defaults to true"
    );
    assert_eq!(secs("bridge_wait", json!({"timeout_s": 5})), 20);
    assert_eq!(secs("bridge_ask", json!({"question": "q", "timeout_s": 2})), 17);
    assert_eq!(secs("bridge_ask", json!({"timeout_s": "soon"})), 615);
    assert_eq!(secs("bridge_spawn", json!({})), 75);
    assert_eq!(secs("bridge_stop", json!({"gid": "g"})), 75);
    assert_eq!(secs("bridge_roster", json!({})), 30);
    assert_eq!(secs("bridge_poll", json!({"timeout_s": 999})), 30);
}

#[test]
fn arguments_are_abbreviated_but_gids_stay_whole() {
    let gid = "3f2a0c1e-9d4b-4c1a-8f00-1234567890ab";
    let s = abbreviate(&json!({"to": gid, "text": "x".repeat(500), "groups": [1, 2, 3, 4, 5, 6]}));
    assert!(s.contains(gid), "{s}");
    assert!(s.contains(&format!("{}…", "x".repeat(40))), "{s}");
    assert!(s.contains("… 2 more"), "{s}");
    assert!(s.chars().count() <= 241, "{s}");
}

#[tokio::test]
async fn an_answer_outside_the_contract_fails_the_call_naming_the_field() {
    let fake = Fake::start(&[]).await;
    let c = client(&fake).await;
    // The echo has no `gid`/`status` pair a spawn result needs: status "injected" is not one of
    // bridge_spawn's.
    let err = c
        .call("bridge_spawn", json!({"host": "b", "profile": "p", "brief": "x"}))
        .await
        .expect_err("outside");
    let text = err.to_string();
    assert!(matches!(err, McpError::Contract(_)), "{text}");
    assert!(
        text.contains("bridge_spawn.result") && text.contains("/status"),
        "{text}"
    );
}

#[test]
fn a_result_wrapper_around_a_list_is_read_as_the_list() {
    // FastMCP wraps a list result as {"result": [...]} in structured content (CONTRACT §3).
    let wrapped = CallToolResult::structured(json!({"result": [{"kind": "REPLY"}]}));
    assert_eq!(decode("bridge_poll", wrapped).ok(), Some(json!([{"kind": "REPLY"}])));
    // An object with more than `result` is a SPEC shape of its own and is left alone.
    let object = CallToolResult::structured(json!({"result": 1, "status": "sent"}));
    assert_eq!(
        decode("bridge_answer", object).ok(),
        Some(json!({"result": 1, "status": "sent"}))
    );
}

/// Issue 64 U1: the official SDK's report and the suite's client read a roster the same way, in
/// every shape CONTRACT §3 allows (structured `{"entries": …}`, structured `{"result": […]}`,
/// JSON text content), and a shape it does not allow still fails the roster's schema.
#[test]
fn every_roster_shape_the_contract_allows_is_read_and_checked_alike() {
    let entries = json!([{"gid": "g1", "host": "a"}]);
    let allowed = [
        (Some(json!({"entries": entries.clone()})), String::new()),
        (Some(json!({"result": entries.clone()})), String::new()),
        (None, entries.to_string()),
        (Some(serde_json::Value::Null), entries.to_string()),
    ];
    for (structured, text) in allowed {
        let v = tool_value(structured.clone(), &text).expect("a value");
        crate::schemas::check("bridge_roster", "bridge_roster.result", &v)
            .unwrap_or_else(|e| panic!("{structured:?} / {text}: {e}"));
    }
    let wrong = tool_value(Some(json!({"hosts": entries})), "").expect("a value");
    assert!(crate::schemas::check("bridge_roster", "bridge_roster.result", &wrong).is_err());
    assert!(tool_value(None, "not json").is_err());
}
