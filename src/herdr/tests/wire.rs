//! Wire-level tests of the fake herdr's codec and server: one request per connection, the
//! answers to requests that do not parse, line limits, many clients, start and stop.

use super::*;

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
    assert_eq!(h.input_log(&pane)[0].text.len(), filler.len());

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

/// `pane.read` and `tab.list` are served as real herdr v0.8.2 answers them (2026-12-06); a herdr
/// method outside the fake's set is refused as not served.
#[tokio::test]
async fn pane_read_and_tab_list_are_served_and_other_herdr_methods_are_refused() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    send(&h, &pane, "echo one").await;
    let answer = rpc(&h, "pane.read", json!({"pane_id": pane, "source": "visible"})).await;
    assert_eq!(result_type(&answer), "pane_read", "{answer}");
    let read = &answer["result"]["read"];
    assert_eq!(read["pane_id"], pane.as_str());
    assert_eq!(
        (read["format"].as_str(), read["revision"].as_u64()),
        (Some("text"), Some(0))
    );
    assert_eq!(read["text"], "echo one\n", "the typed line, echoed");
    let missing = rpc(&h, "pane.read", json!({"pane_id": "w9:p9", "source": "visible"})).await;
    assert_eq!(code(&missing), "pane_not_found");
    let tabs = rpc(&h, "tab.list", json!({})).await;
    assert_eq!(result_type(&tabs), "tab_list", "{tabs}");
    let refused = raw(&h, r#"{"id":"x","method":"tab.get","params":{}}"#).await;
    assert_eq!(code(&refused), "invalid_request");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not served"),
        "{refused}"
    );
}
