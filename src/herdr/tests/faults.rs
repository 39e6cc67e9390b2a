//! Tests of the fake herdr's fault switches ([`Fault`]).

use super::*;

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

#[tokio::test]
async fn fault_no_process_info_answers_as_herdr_does_for_a_method_it_does_not_know() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_fault(Fault::NoProcessInfo, true);
    let line = json!({"id": "q1", "method": "pane.process_info", "params": {"pane_id": pane}});
    let answer = raw(&h, &line.to_string()).await;
    assert_eq!(code(&answer), "invalid_request", "{answer}");
    assert_eq!(answer["id"], "", "an unknown method has no id to herdr: {answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(
        message.starts_with("invalid request: unknown variant `pane.process_info`, expected one of `ping`, "),
        "{message}"
    );
    let list = message.split_once("expected one of").map_or("", |(_, l)| l);
    assert!(
        !list.contains("`pane.process_info`"),
        "the list leaves it out: {message}"
    );
    assert!(message.contains(" at line 1 column "), "{message}");
    // The rest of herdr answers as before.
    assert_eq!(
        result_type(&rpc(&h, "pane.get", json!({"pane_id": pane})).await),
        "pane_info"
    );
    h.set_fault(Fault::NoProcessInfo, false);
    let answer = rpc(&h, "pane.process_info", json!({"pane_id": pane})).await;
    assert_eq!(result_type(&answer), "pane_process_info", "{answer}");
}
