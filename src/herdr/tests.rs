//! Wire-level tests of the fake herdr: every test speaks raw newline-delimited JSON over the
//! unix socket, as a gateway would.

use super::*;
use crate::timing::{scaled, wait_for};
use rstest::rstest;
use serde_json::json;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Upper bound for anything that should happen "at once".
fn deadline() -> Duration {
    scaled(Duration::from_secs(5))
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Scratch(std::env::temp_dir().join(format!("fh-{}", &id[..12])))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn fake() -> (FakeHerdr, Scratch) {
    let dir = Scratch::new();
    let herdr = FakeHerdr::start(&dir.0).await.expect("fake herdr starts");
    (herdr, dir)
}

/// Connects, writes `line` plus a newline, reads one line (empty string on EOF).
async fn raw_on(path: &Path, line: &str) -> String {
    let mut stream = UnixStream::connect(path).await.expect("connect");
    stream.write_all(format!("{line}\n").as_bytes()).await.expect("write");
    read_answer(stream).await
}

async fn read_answer(stream: UnixStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    tokio::time::timeout(deadline(), reader.read_line(&mut answer))
        .await
        .expect("answer before the deadline")
        .expect("read");
    answer
}

async fn raw(h: &FakeHerdr, line: &str) -> Value {
    let answer = raw_on(h.socket_path(), line).await;
    assert!(answer.ends_with('\n'), "one newline-terminated line, got {answer:?}");
    serde_json::from_str(&answer).expect("answer is JSON")
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One request with a fresh id; checks the answer carries it back.
async fn rpc(h: &FakeHerdr, method: &str, params: Value) -> Value {
    let id = format!("r{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let line = json!({"id": id, "method": method, "params": params}).to_string();
    let answer = raw(h, &line).await;
    assert_eq!(answer["id"], id, "{answer}");
    answer
}

fn code(answer: &Value) -> &str {
    answer["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

fn result_type(answer: &Value) -> &str {
    answer["result"]["type"]
        .as_str()
        .unwrap_or_else(|| panic!("not a success: {answer}"))
}

async fn send(h: &FakeHerdr, pane: &str, text: &str) -> Value {
    rpc(
        h,
        "pane.send_input",
        json!({"pane_id": pane, "text": text, "keys": ["enter"]}),
    )
    .await
}

async fn status_on_wire(h: &FakeHerdr, pane: &str) -> String {
    let answer = rpc(h, "pane.get", json!({"pane_id": pane})).await;
    answer["result"]["pane"]["agent_status"]
        .as_str()
        .expect("agent_status")
        .to_string()
}

fn wait_params(pane: &str, timeout_ms: u64) -> Value {
    json!({"target": pane, "until": ["idle", "done"], "timeout_ms": timeout_ms})
}

#[tokio::test]
async fn ping_answers_pong_on_a_private_socket() {
    let (h, _dir) = fake().await;
    let mode = std::fs::metadata(h.socket_path()).expect("socket").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(h.socket_path().ends_with("herdr.sock"));
    let answer = raw(&h, r#"{"id":"1","method":"ping","params":{}}"#).await;
    assert_eq!(
        answer,
        json!({"id":"1","result":{"type":"pong","version":"0.8.2","protocol":20,
            "capabilities":{"live_handoff":true,"detached_server_daemon":true}}})
    );
    let calls = h.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!((calls[0].method.as_str(), calls[0].id.as_str()), ("ping", "1"));
    assert_eq!(calls[0].params, json!({}));
    assert_eq!(calls[0].response.as_ref(), Some(&answer));
    assert_eq!(calls[0].result_type(), Some("pong"));
}

#[tokio::test]
async fn unparseable_json_is_answered_exactly_as_herdr_does() {
    let (h, _dir) = fake().await;
    let answer = raw_on(h.socket_path(), "this is not json").await;
    assert_eq!(
        answer,
        "{\"id\":\"\",\"error\":{\"code\":\"invalid_request\",\"message\":\"invalid request: expected ident at line 1 column 2\"}}\n"
    );
    let calls = h.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].method, "");
    assert_eq!(calls[0].line, "this is not json");
    assert_eq!(calls[0].error_code(), Some("invalid_request"));
}

#[rstest]
#[case::unknown_method(
    r#"{"id":"7","method":"pane.teleport","params":{}}"#,
    "unknown variant `pane.teleport`"
)]
#[case::no_id(r#"{"method":"ping","params":{}}"#, "missing field `id`")]
#[case::no_method(r#"{"id":"7","params":{}}"#, "missing field `method`")]
#[case::not_an_object(r#"[1,2]"#, "invalid request")]
#[tokio::test]
async fn malformed_requests_get_invalid_request_without_an_id(#[case] line: &str, #[case] says: &str) {
    let (h, _dir) = fake().await;
    let answer = raw(&h, line).await;
    assert_eq!(answer["id"], "");
    assert_eq!(code(&answer), "invalid_request");
    let message = answer["error"]["message"].as_str().expect("message");
    assert!(
        message.starts_with("invalid request: ") && message.contains(says),
        "{message}"
    );
}

#[rstest]
#[case::pane_get_without_pane("pane.get", json!({}))]
#[case::send_input_without_pane("pane.send_input", json!({"text": "hi", "keys": ["enter"]}))]
#[case::close_with_number("pane.close", json!({"pane_id": 3}))]
#[case::wait_with_bad_status("agent.wait", json!({"target": "w1:p1", "until": ["asleep"], "timeout_ms": 5}))]
#[case::env_not_strings("workspace.create", json!({"focus": false, "env": {"A": 1}}))]
#[tokio::test]
async fn bad_params_get_invalid_request_without_the_request_id(#[case] method: &str, #[case] params: Value) {
    // Real herdr v0.8.2 deserializes the whole request at once: never `invalid_params`.
    let (h, _dir) = fake().await;
    h.add_agent_pane("claude", AgentStatus::Idle);
    let line = json!({"id": "r-bad", "method": method, "params": params}).to_string();
    let answer = raw(&h, &line).await;
    assert_eq!(code(&answer), "invalid_request", "{answer}");
    assert_eq!(answer["id"], "", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("at line 1 column"), "{message}");
}

#[tokio::test]
async fn a_request_without_params_is_refused() {
    let (h, _dir) = fake().await;
    let answer = raw(&h, r#"{"id":"7","method":"ping"}"#).await;
    assert_eq!(code(&answer), "invalid_request", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("missing field `params`"), "{message}");
}

#[tokio::test]
async fn an_unknown_key_name_is_refused_and_nothing_is_typed() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let answer = rpc(
        &h,
        "pane.send_input",
        json!({"pane_id": pane, "text": "hi", "keys": ["submit"]}),
    )
    .await;
    assert_eq!(code(&answer), "invalid_key", "{answer}");
    assert!(h.inputs(&pane).is_empty());
}

#[tokio::test]
async fn text_with_a_newline_is_submitted_without_the_enter_key() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let answer = rpc(
        &h,
        "pane.send_input",
        json!({"pane_id": pane, "text": "do it\n", "keys": []}),
    )
    .await;
    assert!(answer.get("result").is_some(), "{answer}");
    assert_eq!(h.status(&pane), Some(AgentStatus::Working));
}

#[tokio::test]
async fn an_empty_until_waits_for_idle_done_or_blocked() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Blocked);
    let answer = rpc(&h, "agent.wait", json!({"target": pane, "until": [], "timeout_ms": 50})).await;
    assert!(answer.get("result").is_some(), "{answer}");
}

#[tokio::test]
async fn a_fresh_server_has_no_workspace_until_one_is_created() {
    let (h, _dir) = fake().await;
    let env = json!({"FLEET_GID": "x"});
    let answer = rpc(
        &h,
        "tab.create",
        json!({"label": "fleet-t1", "cwd": "/tmp", "focus": false, "env": env}),
    )
    .await;
    assert_eq!(code(&answer), "workspace_not_found");
    assert!(h.created_panes().is_empty());

    let answer = rpc(
        &h,
        "workspace.create",
        json!({"focus": false, "label": "fleet", "env": {}}),
    )
    .await;
    assert_eq!(result_type(&answer), "workspace_created");
    let result = &answer["result"];
    assert_eq!(result["workspace"]["workspace_id"], "w1");
    assert_eq!(result["workspace"]["label"], "fleet");
    assert_eq!(result["tab"]["tab_id"], "w1:t1");
    assert_eq!(result["root_pane"]["pane_id"], "w1:p1");
    assert_eq!(result["root_pane"]["agent_status"], "unknown");

    let answer = rpc(
        &h,
        "tab.create",
        json!({"label": "fleet-t1", "cwd": "/tmp", "focus": false, "env": env}),
    )
    .await;
    assert_eq!(result_type(&answer), "tab_created");
    let result = &answer["result"];
    assert_eq!(
        result["tab"],
        json!({"tab_id":"w1:t2","workspace_id":"w1","number":2,"label":"fleet-t1","focused":false,
            "pane_count":1,"agent_status":"unknown"})
    );
    let pane = &result["root_pane"];
    let terminal = pane["terminal_id"].as_str().expect("terminal_id");
    assert!(
        terminal.starts_with("term_") && terminal.len() == 19 && terminal[5..].chars().all(|c| c.is_ascii_hexdigit()),
        "{terminal}"
    );
    assert_eq!(
        pane,
        &json!({"pane_id":"w1:p2","terminal_id":terminal,"workspace_id":"w1","tab_id":"w1:t2","focused":false,
            "cwd":"/tmp","foreground_cwd":"/tmp","agent_status":"unknown",
            "scroll":{"offset_from_bottom":0,"max_offset_from_bottom":0,"viewport_rows":39},"revision":0})
    );

    let created = h.created_panes();
    assert_eq!(created.len(), 2);
    assert_eq!(created[0].created_by, CreatedBy::WorkspaceCreate);
    let tab = &created[1];
    assert_eq!(
        (tab.pane_id.as_str(), tab.tab_id.as_str(), tab.workspace_id.as_str()),
        ("w1:p2", "w1:t2", "w1")
    );
    assert_eq!(
        (tab.created_by, tab.label.as_deref(), tab.cwd.as_str(), tab.focus),
        (CreatedBy::TabCreate, Some("fleet-t1"), "/tmp", false)
    );
    assert_eq!(
        tab.caller_env,
        BTreeMap::from([("FLEET_GID".to_string(), "x".to_string())])
    );
    assert_eq!(tab.env.get("FLEET_GID").map(String::as_str), Some("x"));
    assert_eq!(tab.env.get("HERDR_ENV").map(String::as_str), Some("1"));
    assert_eq!(tab.env.get("HERDR_PANE_ID").map(String::as_str), Some("w1:p2"));
    assert_eq!(tab.env.get("HERDR_TAB_ID").map(String::as_str), Some("w1:t2"));
    assert_eq!(tab.env.get("HERDR_WORKSPACE_ID").map(String::as_str), Some("w1"));
    assert_eq!(
        tab.env.get("HERDR_SOCKET_PATH").map(String::as_str),
        h.socket_path().to_str()
    );
    assert_eq!(tab.env.get("HERDR_BIN_PATH").map(String::as_str), Some(HERDR_BIN_PATH));
}

#[tokio::test]
async fn herdr_env_wins_over_the_callers() {
    let (h, _dir) = fake().await;
    h.add_shell_pane();
    let env = json!({"HERDR_PANE_ID": "forged", "HERDR_ENV": "0", "FLEET_MCP_TOKEN": "t"});
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": env})).await;
    let pane_id = answer["result"]["root_pane"]["pane_id"]
        .as_str()
        .expect("pane_id")
        .to_string();
    let created = h.created_panes();
    assert_eq!(created[0].env["HERDR_PANE_ID"], pane_id);
    assert_eq!(created[0].env["HERDR_ENV"], "1");
    assert_eq!(created[0].env["FLEET_MCP_TOKEN"], "t");
    assert_eq!(created[0].caller_env["HERDR_PANE_ID"], "forged");
    assert_eq!(
        created[0].cwd,
        _dir.0.display().to_string(),
        "cwd defaults to the fake's directory"
    );
}

#[rstest]
#[case::empty("")]
#[case::equals("A=B")]
#[case::nul("A\u{0}B")]
#[tokio::test]
async fn bad_env_keys_get_invalid_env(#[case] key: &str) {
    let (h, _dir) = fake().await;
    let answer = rpc(&h, "workspace.create", json!({"focus": false, "env": {key: "v"}})).await;
    assert_eq!(code(&answer), "invalid_env");
    h.add_shell_pane();
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {"OK": "1", key: "v"}})).await;
    assert_eq!(code(&answer), "invalid_env");
    assert!(h.created_panes().is_empty());
    assert_eq!(h.pane_ids().len(), 1, "no pane was created");
}

#[tokio::test]
async fn added_panes_imply_workspace_w1_and_ids_are_never_reused() {
    let (h, _dir) = fake().await;
    let main = h.add_agent_pane("claude", AgentStatus::Idle);
    assert_eq!(main, "w1:p1");
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {}})).await;
    assert_eq!(answer["result"]["root_pane"]["pane_id"], "w1:p2");
    assert_eq!(answer["result"]["tab"]["tab_id"], "w1:t2");
    assert_eq!(
        rpc(&h, "pane.close", json!({"pane_id": "w1:p2"})).await["result"],
        json!({"type": "ok"})
    );
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {}})).await;
    assert_eq!(answer["result"]["root_pane"]["pane_id"], "w1:p3");
    assert_eq!(answer["result"]["tab"]["tab_id"], "w1:t3");
    assert_eq!(h.add_shell_pane(), "w1:p4");
    assert_eq!(h.pane_ids(), vec!["w1:p1", "w1:p3", "w1:p4"]);
}

#[tokio::test]
async fn closing_every_pane_removes_the_workspace() {
    let (h, _dir) = fake().await;
    let only = h.add_shell_pane();
    h.close_pane(&only);
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {}})).await;
    assert_eq!(code(&answer), "workspace_not_found");
    let answer = rpc(&h, "workspace.create", json!({"focus": false, "env": {}})).await;
    assert_eq!(answer["result"]["workspace"]["workspace_id"], "w2");
    assert_eq!(answer["result"]["root_pane"]["pane_id"], "w2:p1");
}

#[tokio::test]
async fn pane_get_describes_agent_and_shell_panes() {
    let (h, _dir) = fake().await;
    let agent = h.add_agent_pane("claude", AgentStatus::Done);
    let shell = h.add_shell_pane();
    let answer = rpc(&h, "pane.get", json!({"pane_id": agent})).await;
    assert_eq!(result_type(&answer), "pane_info");
    let pane = &answer["result"]["pane"];
    assert_eq!(
        (pane["agent"].as_str(), pane["agent_status"].as_str()),
        (Some("claude"), Some("done"))
    );
    assert_eq!(
        (pane["tab_id"].as_str(), pane["focused"].as_bool()),
        (Some("w1:t1"), Some(false))
    );
    let answer = rpc(&h, "pane.get", json!({"pane_id": shell})).await;
    let pane = &answer["result"]["pane"];
    assert!(pane.get("agent").is_none(), "{pane}");
    assert_eq!(pane["agent_status"], "unknown");
    let answer = rpc(&h, "agent.get", json!({"target": agent})).await;
    assert_eq!(result_type(&answer), "agent_info");
    assert_eq!(answer["result"]["agent"]["agent"], "claude");
    let answer = rpc(&h, "agent.get", json!({"target": shell})).await;
    assert_eq!(
        answer["error"],
        json!({"code": "agent_not_found", "message": format!("agent target {shell} not found")})
    );
}

#[tokio::test]
async fn closed_panes_are_not_found() {
    let (h, _dir) = fake().await;
    let main = h.add_agent_pane("claude", AgentStatus::Idle);
    let worker = h.add_shell_pane();
    assert_eq!(worker, "w1:p2");
    assert_eq!(
        result_type(&rpc(&h, "pane.close", json!({"pane_id": worker})).await),
        "ok"
    );
    assert!(!h.pane_exists(&worker));
    let answer = rpc(&h, "pane.get", json!({"pane_id": worker})).await;
    assert_eq!(
        answer["error"],
        json!({"code": "pane_not_found", "message": "pane w1:p2 not found"})
    );
    assert_eq!(
        code(&rpc(&h, "pane.close", json!({"pane_id": worker})).await),
        "pane_not_found"
    );
    assert_eq!(code(&send(&h, &worker, "hi").await), "pane_not_found");

    h.close_pane(&main);
    assert_eq!(h.status(&main), None);
    assert_eq!(
        code(&rpc(&h, "pane.get", json!({"pane_id": main})).await),
        "pane_not_found"
    );
    assert_eq!(
        code(&rpc(&h, "agent.wait", wait_params(&main, 60_000)).await),
        "agent_not_found"
    );
}

#[tokio::test]
async fn submitted_input_starts_an_idle_agent() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let answer = send(&h, &pane, "hello from beta").await;
    assert_eq!(answer["result"], json!({"type": "ok"}));
    assert_eq!(h.inputs(&pane), vec!["hello from beta"]);
    assert_eq!(h.status(&pane), Some(AgentStatus::Working));
    assert_eq!(status_on_wire(&h, &pane).await, "working");

    // Input while working is typed in all the same (queued by the agent) and changes nothing.
    send(&h, &pane, "second").await;
    assert_eq!(h.inputs(&pane), vec!["hello from beta", "second"]);
    assert_eq!(h.status(&pane), Some(AgentStatus::Working));

    h.set_status(&pane, AgentStatus::Done);
    send(&h, &pane, "third").await;
    assert_eq!(h.status(&pane), Some(AgentStatus::Working));
}

#[tokio::test]
async fn input_without_enter_is_typed_not_submitted() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("codex", AgentStatus::Idle);
    let answer = rpc(&h, "pane.send_input", json!({"pane_id": pane, "text": "draft"})).await;
    assert_eq!(result_type(&answer), "ok");
    assert!(h.inputs(&pane).is_empty());
    assert_eq!(h.status(&pane), Some(AgentStatus::Idle));
    let log = h.input_log(&pane);
    assert_eq!(log.len(), 1);
    assert_eq!((log[0].text.as_str(), log[0].outcome), ("draft", InputOutcome::Typed));
}

#[tokio::test]
async fn stay_idle_reaction_swallows_input() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_on_input(&pane, InputReaction::StayIdle);
    assert_eq!(result_type(&send(&h, &pane, "lost").await), "ok");
    assert_eq!(h.status(&pane), Some(AgentStatus::Idle));
    assert!(h.inputs(&pane).is_empty());
    assert_eq!(h.swallowed(&pane), vec!["lost"]);
    h.set_on_input(&pane, InputReaction::StartWorking);
    send(&h, &pane, "kept").await;
    assert_eq!(h.inputs(&pane), vec!["kept"]);
    assert_eq!(h.status(&pane), Some(AgentStatus::Working));
}

#[tokio::test]
async fn a_launched_shell_pane_becomes_the_agent_it_was_told_to_run() {
    let (h, _dir) = fake().await;
    h.add_shell_pane();
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {"FLEET_GID": "g"}})).await;
    let pane = answer["result"]["root_pane"]["pane_id"]
        .as_str()
        .expect("pane_id")
        .to_string();
    send(&h, &pane, "FOO=1 /usr/local/bin/claude --mcp-config x.json").await;
    assert_eq!(h.inputs(&pane).len(), 1);
    assert_eq!(
        h.status(&pane),
        Some(AgentStatus::Unknown),
        "a shell does not turn into an agent by itself"
    );
    assert_eq!(
        code(&rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await),
        "agent_not_found"
    );
    h.set_status(&pane, AgentStatus::Idle);
    assert_eq!(h.agent(&pane).as_deref(), Some("claude"));
    let answer = rpc(&h, "pane.get", json!({"pane_id": pane})).await;
    assert_eq!(answer["result"]["pane"]["agent"], "claude");
    assert_eq!(answer["result"]["pane"]["revision"], 0, "revision stays 0, as in herdr");
    h.release_agent(&pane);
    assert_eq!(h.agent(&pane), None);
    let other = h.add_shell_pane();
    h.make_agent(&other, "codex", AgentStatus::Blocked);
    assert_eq!(status_on_wire(&h, &other).await, "blocked");
    assert_eq!(h.agent(&other).as_deref(), Some("codex"));
}

#[tokio::test]
async fn agent_wait_answers_at_once_when_already_there() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Done);
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await;
    assert_eq!(result_type(&answer), "agent_info");
    let agent = &answer["result"]["agent"];
    assert_eq!(
        (agent["pane_id"].as_str(), agent["agent_status"].as_str()),
        (Some(pane.as_str()), Some("done"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_wait_wakes_when_the_status_changes() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Working);
    let waiter = {
        let h = h.clone();
        let pane = pane.clone();
        tokio::spawn(async move { rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await })
    };
    let probe = h.clone();
    wait_for("agent.wait to arrive", Duration::from_secs(5), || {
        let arrived = !probe.calls_of("agent.wait").is_empty();
        async move { Ok(arrived.then_some(())) }
    })
    .await
    .expect("the wait arrives");
    h.set_status(&pane, AgentStatus::Blocked);
    h.set_status(&pane, AgentStatus::Idle);
    let answer = tokio::time::timeout(deadline(), waiter)
        .await
        .expect("woken long before its timeout")
        .expect("task");
    assert_eq!(answer["result"]["agent"]["agent_status"], "idle");
    let call = &h.calls_of("agent.wait")[0];
    assert_eq!(call.result_type(), Some("agent_info"));
    assert!(call.answered_at.is_some());
}

#[tokio::test]
async fn agent_wait_times_out() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Working);
    let started = Instant::now();
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 150)).await;
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(code(&answer), "timeout");
}

#[rstest]
#[case::shell_pane(false)]
#[case::no_such_pane(true)]
#[tokio::test]
async fn agent_wait_on_a_non_agent_fails_at_once(#[case] missing: bool) {
    let (h, _dir) = fake().await;
    let shell = h.add_shell_pane();
    let target = if missing { "w1:p9".to_string() } else { shell };
    let started = Instant::now();
    let answer = rpc(&h, "agent.wait", wait_params(&target, 60_000)).await;
    assert_eq!(
        answer["error"],
        json!({"code": "agent_not_found", "message": format!("agent target {target} not found")})
    );
    assert!(started.elapsed() < Duration::from_secs(5), "not after the timeout");
}

#[tokio::test]
async fn agent_wait_ends_when_its_pane_closes() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Working);
    let waiter = {
        let h = h.clone();
        let pane = pane.clone();
        tokio::spawn(async move { rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await })
    };
    let probe = h.clone();
    wait_for("agent.wait to arrive", Duration::from_secs(5), || {
        let arrived = !probe.calls_of("agent.wait").is_empty();
        async move { Ok(arrived.then_some(())) }
    })
    .await
    .expect("the wait arrives");
    h.close_pane(&pane);
    let answer = tokio::time::timeout(deadline(), waiter)
        .await
        .expect("answered")
        .expect("task");
    assert_eq!(code(&answer), "agent_not_found");
}

#[tokio::test]
async fn one_request_per_connection() {
    let (h, _dir) = fake().await;
    let mut stream = UnixStream::connect(h.socket_path()).await.expect("connect");
    let two = "{\"id\":\"a\",\"method\":\"ping\",\"params\":{}}\n{\"id\":\"b\",\"method\":\"ping\",\"params\":{}}\n";
    stream.write_all(two.as_bytes()).await.expect("write");
    let mut reader = BufReader::new(stream);
    let mut first = String::new();
    tokio::time::timeout(deadline(), reader.read_line(&mut first))
        .await
        .expect("answer")
        .expect("read");
    assert_eq!(serde_json::from_str::<Value>(&first).expect("json")["id"], "a");
    let mut rest = String::new();
    let after = tokio::time::timeout(deadline(), reader.read_line(&mut rest))
        .await
        .expect("closed");
    assert!(
        matches!(after, Ok(0) | Err(_)),
        "the connection is closed after one answer: {after:?} {rest:?}"
    );
    assert_eq!(h.calls().len(), 1, "the second line is never read");
}

#[tokio::test]
async fn a_line_without_newline_or_a_blank_line_gets_no_answer() {
    let (h, _dir) = fake().await;
    for payload in [&b"{\"id\":\"1\",\"method\":\"ping\",\"params\":{}}"[..], b"   \n"] {
        let mut stream = UnixStream::connect(h.socket_path()).await.expect("connect");
        stream.write_all(payload).await.expect("write");
        stream.shutdown().await.expect("half-close");
        assert_eq!(read_answer(stream).await, "", "closed without an answer");
    }
    assert!(h.calls().is_empty());
}

#[tokio::test]
async fn line_length_is_capped_at_one_mebibyte() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    // Just under the cap: answered.
    let prefix =
        format!("{{\"id\":\"big\",\"method\":\"pane.send_input\",\"params\":{{\"pane_id\":\"{pane}\",\"text\":\"");
    let suffix = "\",\"keys\":[\"enter\"]}}";
    let filler = "x".repeat(MAX_LINE_BYTES - prefix.len() - suffix.len());
    let line = format!("{prefix}{filler}{suffix}");
    assert_eq!(line.len(), MAX_LINE_BYTES);
    assert_eq!(result_type(&raw(&h, &line).await), "ok");
    assert_eq!(h.inputs(&pane)[0].len(), filler.len());

    // One byte over: closed without an answer (the write may fail once the server hangs up).
    let mut stream = UnixStream::connect(h.socket_path()).await.expect("connect");
    let over = format!("{line}x\n");
    let (read, mut write) = stream.split();
    let writing = async {
        let _ = write.write_all(over.as_bytes()).await;
    };
    let reading = async {
        let mut answer = String::new();
        let _ = BufReader::new(read).read_line(&mut answer).await;
        answer
    };
    let ((), answer) = tokio::time::timeout(deadline(), async { tokio::join!(writing, reading) })
        .await
        .expect("closed");
    assert_eq!(answer, "");
    assert_eq!(h.calls().len(), 1);
}

#[tokio::test]
async fn fault_swallow_input() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_fault(Fault::SwallowInput, true);
    assert!(h.fault(Fault::SwallowInput));
    assert_eq!(send(&h, &pane, "into the void").await["result"], json!({"type": "ok"}));
    assert_eq!(h.status(&pane), Some(AgentStatus::Idle));
    assert_eq!(status_on_wire(&h, &pane).await, "idle");
    assert!(h.inputs(&pane).is_empty());
    assert_eq!(h.swallowed(&pane), vec!["into the void"]);
    h.set_fault(Fault::SwallowInput, false);
    send(&h, &pane, "lands").await;
    assert_eq!(h.inputs(&pane), vec!["lands"]);
}

#[tokio::test]
async fn fault_stuck_working() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let shell = h.add_shell_pane();
    h.set_fault(Fault::StuckWorking, true);
    assert_eq!(status_on_wire(&h, &pane).await, "working");
    assert_eq!(status_on_wire(&h, &shell).await, "unknown");
    assert_eq!(h.status(&pane), Some(AgentStatus::Idle), "the truth is kept");
    assert_eq!(code(&rpc(&h, "agent.wait", wait_params(&pane, 50)).await), "timeout");

    // A wait in progress sees the fault lifted.
    let waiter = {
        let h = h.clone();
        let pane = pane.clone();
        tokio::spawn(async move { rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await })
    };
    let probe = h.clone();
    wait_for("the second agent.wait", Duration::from_secs(5), || {
        let arrived = probe.calls_of("agent.wait").len() == 2;
        async move { Ok(arrived.then_some(())) }
    })
    .await
    .expect("the wait arrives");
    h.set_fault(Fault::StuckWorking, false);
    let answer = tokio::time::timeout(deadline(), waiter)
        .await
        .expect("woken")
        .expect("task");
    assert_eq!(answer["result"]["agent"]["agent_status"], "idle");
}

#[tokio::test]
async fn fault_flapping() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_fault(Fault::Flapping, true);
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(status_on_wire(&h, &pane).await);
    }
    assert_eq!(seen, ["idle", "working", "idle", "working"]);
    h.set_fault(Fault::Flapping, false);
    assert_eq!(status_on_wire(&h, &pane).await, "idle");
}

#[tokio::test]
async fn fault_hang() {
    let (h, _dir) = fake().await;
    h.set_fault(Fault::Hang, true);
    let mut stream = UnixStream::connect(h.socket_path()).await.expect("accepted");
    stream
        .write_all(b"{\"id\":\"h\",\"method\":\"ping\",\"params\":{}}\n")
        .await
        .expect("write");
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    // A bounded look for an answer that must not come.
    let silent = tokio::time::timeout(Duration::from_millis(200), reader.read_line(&mut answer)).await;
    assert!(silent.is_err(), "no answer and no close while hung: {answer:?}");
    let calls = h.calls();
    assert_eq!(calls.len(), 1, "the hung call is recorded");
    assert_eq!((calls[0].method.as_str(), calls[0].response.as_ref()), ("ping", None));

    h.set_fault(Fault::Hang, false);
    assert_eq!(result_type(&rpc(&h, "ping", json!({})).await), "pong");
    assert_eq!(h.calls()[0].response, None, "the hung call stays unanswered");
}

#[tokio::test]
async fn fault_refuse() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Working);
    // A wait in flight when the server goes down is dropped with it.
    let mut waiting = UnixStream::connect(h.socket_path()).await.expect("connect");
    let line = json!({"id": "w", "method": "agent.wait", "params": wait_params(&pane, 60_000)}).to_string();
    waiting.write_all(format!("{line}\n").as_bytes()).await.expect("write");
    let probe = h.clone();
    wait_for("agent.wait to arrive", Duration::from_secs(5), || {
        let arrived = !probe.calls_of("agent.wait").is_empty();
        async move { Ok(arrived.then_some(())) }
    })
    .await
    .expect("the wait arrives");

    h.set_fault(Fault::Refuse, true);
    assert!(
        UnixStream::connect(h.socket_path()).await.is_err(),
        "connecting fails while down"
    );
    assert_eq!(read_answer(waiting).await, "", "the connection in flight is dropped");

    h.set_fault(Fault::Refuse, false);
    assert_eq!(result_type(&rpc(&h, "ping", json!({})).await), "pong");
    let mode = std::fs::metadata(h.socket_path()).expect("socket").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(h.pane_exists(&pane), "state survives the outage");
}

#[tokio::test]
async fn fault_send_input_fails() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_fault(Fault::SendInputFails, true);
    assert_eq!(code(&send(&h, &pane, "x").await), "pane_send_failed");
    assert!(h.input_log(&pane).is_empty());
    assert_eq!(h.status(&pane), Some(AgentStatus::Idle));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_at_once() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Working);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..64 {
        let h = h.clone();
        let pane = pane.clone();
        tasks.spawn(async move {
            match i % 3 {
                0 => result_type(&rpc(&h, "ping", json!({})).await).to_string(),
                1 => result_type(&rpc(&h, "pane.get", json!({"pane_id": pane})).await).to_string(),
                _ => result_type(&send(&h, &pane, &format!("msg {i}")).await).to_string(),
            }
        });
    }
    let mut answered = 0;
    while let Some(kind) = tokio::time::timeout(deadline(), tasks.join_next())
        .await
        .expect("all answer")
    {
        assert!(["pong", "pane_info", "ok"].contains(&kind.expect("task").as_str()));
        answered += 1;
    }
    assert_eq!(answered, 64);
    let calls = h.calls();
    assert_eq!(calls.len(), 64);
    assert!(calls.iter().all(|c| c.response.is_some()));
    assert!(
        calls.windows(2).all(|w| w[0].received_at <= w[1].received_at),
        "arrival order"
    );
    assert_eq!(h.inputs(&pane).len(), 21);
}

#[tokio::test]
async fn stop_and_drop_remove_the_socket() {
    let (h, _dir) = fake().await;
    let path = h.socket_path().to_path_buf();
    h.stop().await;
    assert!(!path.exists());
    assert!(UnixStream::connect(&path).await.is_err());

    let (h, _dir2) = fake().await;
    let path = h.socket_path().to_path_buf();
    let clone = h.clone();
    drop(h);
    assert!(path.exists(), "a clone keeps it serving");
    drop(clone);
    assert!(!path.exists());
}

#[tokio::test]
async fn start_refuses_a_live_socket_and_replaces_a_stale_one() {
    let dir = Scratch::new();
    let h = FakeHerdr::start(&dir.0).await.expect("first");
    assert!(matches!(FakeHerdr::start(&dir.0).await, Err(HerdrError::InUse(_))));
    drop(h);
    // Leave a stale socket file behind, as a crashed herdr does.
    let stale = std::os::unix::net::UnixListener::bind(dir.0.join(SOCKET_FILE_NAME)).expect("bind");
    drop(stale);
    let h = FakeHerdr::start(&dir.0).await.expect("replaces the stale socket");
    assert_eq!(result_type(&rpc(&h, "ping", json!({})).await), "pong");
}

#[test]
fn agent_status_parses_and_prints_its_wire_names() {
    for (text, status) in [
        ("idle", AgentStatus::Idle),
        ("working", AgentStatus::Working),
        ("blocked", AgentStatus::Blocked),
        ("done", AgentStatus::Done),
        ("unknown", AgentStatus::Unknown),
    ] {
        assert_eq!(text.parse::<AgentStatus>(), Ok(status));
        assert_eq!(status.to_string(), text);
        assert_eq!(serde_json::to_value(status).expect("json"), json!(text));
    }
    assert!("Idle".parse::<AgentStatus>().is_err());
}

#[rstest]
#[case::ctrl_plus("ctrl+c")]
#[case::ctrl_plus_upper("Ctrl+C")]
#[case::shift_tab("shift+tab")]
#[case::alt_b("alt+b")]
#[case::ctrl_shift("ctrl+shift+c")]
#[case::lower_char("a")]
#[case::upper_char("A")]
#[case::f1("f1")]
#[case::bs("bs")]
#[case::minus("minus")]
#[case::leading_space(" enter")]
#[case::enter("enter")]
#[case::enter_title("Enter")]
#[case::enter_upper("ENTER")]
#[case::return_("return")]
#[case::tmux_interrupt_upper("C-c")]
#[case::tmux_interrupt("c-c")]
#[case::escape("escape")]
#[case::esc("esc")]
#[case::tab("tab")]
#[case::space("space")]
fn herdr_accepts_these_key_names(#[case] name: &str) {
    assert!(parse_key(name).is_ok(), "{name:?} is accepted by herdr v0.8.2");
}

#[rstest]
#[case::ctrl_c("ctrl-c")]
#[case::ctrl_d("ctrl-d")]
#[case::ctrl_u("ctrl-u")]
#[case::ctrl_l("ctrl-l")]
#[case::c_d("c-d")]
#[case::c_u("c-u")]
#[case::c_l("c-l")]
#[case::home("home")]
#[case::end("end")]
#[case::delete("delete")]
#[case::backtab("backtab")]
#[case::pageup("pageup")]
#[case::insert("insert")]
#[case::pagedown("pagedown")]
#[case::unknown_modifier("hyper+c")]
#[case::blank(" ")]
fn herdr_refuses_these_key_names(#[case] name: &str) {
    assert_eq!(parse_key(name), Err(InvalidKey(name.to_string())));
}

#[rstest]
#[case::enter(" Enter", true)]
#[case::return_("RETURN", true)]
#[case::ctrl_enter("ctrl+enter", false)]
#[case::letter("e", false)]
fn only_a_bare_enter_submits(#[case] name: &str, #[case] submits: bool) {
    assert_eq!(parse_key(name).map(|k| k.is_enter()), Ok(submits));
}

#[tokio::test]
async fn one_hyphen_key_refuses_the_request_and_types_nothing() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let params = json!({"pane_id": pane, "text": "the brief", "keys": ["ctrl-u", "enter"]});
    let answer = rpc(&h, "pane.send_input", params).await;
    assert_eq!(code(&answer), "invalid_key", "{answer}");
    assert!(h.input_log(&pane).is_empty(), "nothing is typed");
    assert_eq!(h.status(&pane), Some(AgentStatus::Idle));
    let params = json!({"pane_id": pane, "text": "the brief", "keys": ["ctrl+u", " Enter"]});
    assert_eq!(result_type(&rpc(&h, "pane.send_input", params).await), "ok");
    assert_eq!(h.inputs(&pane), vec!["the brief"]);
}

#[tokio::test]
async fn an_agent_that_worked_and_went_idle_shows_done() {
    let (h, _dir) = fake().await;
    let shell = h.add_shell_pane();
    h.set_status(&shell, AgentStatus::Idle);
    assert_eq!(
        status_on_wire(&h, &shell).await,
        "idle",
        "the first idle report shows idle"
    );
    send(&h, &shell, "the first brief").await;
    assert_eq!(status_on_wire(&h, &shell).await, "working");
    h.set_status(&shell, AgentStatus::Idle);
    assert_eq!(status_on_wire(&h, &shell).await, "done", "working -> idle shows done");
    assert_eq!(h.status(&shell), Some(AgentStatus::Done));

    let blocked = h.add_agent_pane("codex", AgentStatus::Blocked);
    h.set_status(&blocked, AgentStatus::Idle);
    assert_eq!(status_on_wire(&h, &blocked).await, "idle", "blocked -> idle shows idle");
}

#[tokio::test]
async fn an_agent_that_finishes_each_brief_quickly_ends_done() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_on_input(&pane, InputReaction::WorksBriefly);
    send(&h, &pane, "quick one").await;
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await;
    assert_eq!(answer["result"]["agent"]["agent_status"], "done", "{answer}");
}

#[tokio::test]
async fn revision_stays_zero_through_status_changes_and_typed_output() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    send(&h, &pane, "work on it").await;
    h.set_status(&pane, AgentStatus::Idle);
    rpc(&h, "pane.send_input", json!({"pane_id": pane, "text": "draft"})).await;
    let answer = rpc(&h, "pane.get", json!({"pane_id": pane})).await;
    assert_eq!(answer["result"]["pane"]["revision"], 0, "{answer}");
    let answer = rpc(&h, "agent.get", json!({"target": pane})).await;
    assert_eq!(answer["result"]["agent"]["revision"], 0, "{answer}");
}

#[tokio::test]
async fn agent_wait_on_an_agent_reported_unknown_waits_for_its_timeout() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_status(&pane, AgentStatus::Unknown);
    assert_eq!(h.agent(&pane).as_deref(), Some("claude"), "still an agent");
    let started = Instant::now();
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 150)).await;
    assert_eq!(code(&answer), "timeout", "{answer}");
    assert!(
        started.elapsed() >= Duration::from_millis(150),
        "{:?}",
        started.elapsed()
    );
    h.release_agent(&pane);
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await;
    assert_eq!(code(&answer), "agent_not_found", "a released pane is a shell: at once");
}

#[tokio::test]
async fn agent_wait_without_until_waits_for_idle_done_or_blocked() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Blocked);
    let answer = rpc(&h, "agent.wait", json!({"target": pane, "timeout_ms": 50})).await;
    assert_eq!(result_type(&answer), "agent_info", "{answer}");
}

#[tokio::test]
async fn a_nul_in_an_env_value_is_invalid_env() {
    let (h, _dir) = fake().await;
    let answer = rpc(&h, "workspace.create", json!({"focus": false, "env": {"A": "x\u{0}y"}})).await;
    assert_eq!(code(&answer), "invalid_env", "{answer}");
    assert!(h.created_panes().is_empty());
}

#[tokio::test]
async fn a_cwd_that_does_not_exist_falls_back_to_home() {
    let (h, dir) = fake().await;
    let answer = rpc(
        &h,
        "workspace.create",
        json!({"focus": false, "cwd": "/no/such/dir/here", "env": {}}),
    )
    .await;
    let home = dir.0.display().to_string();
    assert_eq!(answer["result"]["root_pane"]["cwd"], json!(home), "{answer}");
    assert_eq!(h.created_panes()[0].cwd, home);
}

/// `pane.process_info` → (shell pid, foreground process group id, first foreground name).
async fn foreground(h: &FakeHerdr, pane: &str) -> (u64, u64, String) {
    let answer = rpc(h, "pane.process_info", json!({"pane_id": pane})).await;
    assert_eq!(result_type(&answer), "pane_process_info", "{answer}");
    let info = &answer["result"]["process_info"];
    assert_eq!(info["pane_id"], pane);
    (
        info["shell_pid"].as_u64().unwrap_or_default(),
        info["foreground_process_group_id"].as_u64().unwrap_or_default(),
        info["foreground_processes"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test]
async fn process_info_shows_the_agent_or_the_bare_shell_in_front() {
    let (h, _dir) = fake().await;
    let agent = h.add_agent_pane("claude", AgentStatus::Idle);
    let shell = h.add_shell_pane();
    let (shell_pid, group, name) = foreground(&h, &agent).await;
    assert!(group != shell_pid && name == "claude", "{shell_pid} {group} {name}");
    let (shell_pid, group, name) = foreground(&h, &shell).await;
    assert!(group == shell_pid && name == SHELL_NAME, "{shell_pid} {group} {name}");
    let answer = rpc(&h, "pane.process_info", json!({"pane_id": "w1:p99"})).await;
    assert_eq!(code(&answer), "pane_not_found");
}

#[tokio::test]
async fn fault_agent_gone_keeps_the_status_and_the_shell_runs_the_text() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    send(&h, &pane, "first").await;
    h.set_status(&pane, AgentStatus::Idle);
    h.set_fault(Fault::AgentGone, true);
    assert_eq!(status_on_wire(&h, &pane).await, "done", "the last status stays");
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await;
    assert_eq!(
        result_type(&answer),
        "agent_info",
        "herdr still sees an agent: {answer}"
    );
    let (shell_pid, group, name) = foreground(&h, &pane).await;
    assert!(group == shell_pid && name == SHELL_NAME, "{shell_pid} {group} {name}");
    assert_eq!(result_type(&send(&h, &pane, "echo pwned").await), "ok");
    assert_eq!(h.ran_in_shell(&pane), vec!["echo pwned"]);
    assert_eq!(h.inputs(&pane), vec!["first"], "no agent saw it");
    assert_eq!(h.status(&pane), Some(AgentStatus::Done), "the status does not move");
    h.set_fault(Fault::AgentGone, false);
    let (shell_pid, group, _) = foreground(&h, &pane).await;
    assert_ne!(group, shell_pid);
}
