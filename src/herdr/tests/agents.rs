//! Tests of agents in the fake herdr: statuses as herdr derives them (`done`), reactions to
//! submitted input, `agent.get` / `agent.wait`, `pane.report_agent` / `pane.release_agent`.

use super::*;

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
    let command = "FOO=1 /usr/local/bin/claude --mcp-config x.json";
    send(&h, &pane, command).await;
    assert_eq!(h.ran_in_shell(&pane), vec![command], "the pane's shell ran it");
    assert!(h.inputs(&pane).is_empty(), "no agent read it");
    // herdr recognises `claude` by its process name: an agent at once, `unknown` until it reports.
    assert_eq!(h.agent(&pane).as_deref(), Some("claude"));
    assert_eq!(h.status(&pane), Some(AgentStatus::Unknown));
    let (shell_pid, group, name) = foreground(&h, &pane).await;
    assert!(group != shell_pid && name == "claude", "{shell_pid} {group} {name}");
    h.set_status(&pane, AgentStatus::Idle);
    let answer = rpc(&h, "pane.get", json!({"pane_id": pane})).await;
    assert_eq!(answer["result"]["pane"]["agent"], "claude");
    assert_eq!(answer["result"]["pane"]["agent_status"], "idle", "its first report");
    assert_eq!(answer["result"]["pane"]["revision"], 0, "revision stays 0, as in herdr");
    h.release_agent(&pane);
    assert_eq!(h.agent(&pane), None);

    // A program herdr does not recognise is no agent until it reports; then it is named after it.
    let other = h.add_shell_pane();
    send(&h, &other, "python3 agent.py").await;
    assert_eq!(h.status(&other), Some(AgentStatus::Unknown));
    assert_eq!(
        code(&rpc(&h, "agent.wait", wait_params(&other, 60_000)).await),
        "agent_not_found"
    );
    h.set_status(&other, AgentStatus::Idle);
    assert_eq!(h.agent(&other).as_deref(), Some("python3"));
    let third = h.add_shell_pane();
    h.make_agent(&third, "codex", AgentStatus::Blocked);
    assert_eq!(status_on_wire(&h, &third).await, "blocked");
    assert_eq!(h.agent(&third).as_deref(), Some("codex"));
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
    assert_eq!(
        answer["result"]["agent"]["agent_status"], "done",
        "blocked -> idle, unseen"
    );
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
    // Only a report moves the status: this agent has no process in front, the shell runs it.
    send(&h, &shell, "the first brief").await;
    assert_eq!(status_on_wire(&h, &shell).await, "idle", "typing changes no status");
    assert_eq!(h.ran_in_shell(&shell), vec!["the first brief"]);
    h.set_status(&shell, AgentStatus::Working);
    h.set_status(&shell, AgentStatus::Idle);
    assert_eq!(status_on_wire(&h, &shell).await, "done", "working -> idle shows done");
    assert_eq!(h.status(&shell), Some(AgentStatus::Done));

    let blocked = h.add_agent_pane("codex", AgentStatus::Blocked);
    h.set_status(&blocked, AgentStatus::Idle);
    assert_eq!(status_on_wire(&h, &blocked).await, "done", "blocked -> idle shows done");
    h.set_status(&blocked, AgentStatus::Unknown);
    h.set_status(&blocked, AgentStatus::Idle);
    assert_eq!(status_on_wire(&h, &blocked).await, "done", "unknown -> idle shows done");

    // The focused pane (the workspace's root pane in its active tab) is seen: idle, not done.
    let focused = "w1:p1";
    h.set_status(focused, AgentStatus::Idle);
    h.set_status(focused, AgentStatus::Working);
    h.set_status(focused, AgentStatus::Idle);
    let answer = rpc(&h, "pane.get", json!({"pane_id": focused})).await;
    assert_eq!(
        (
            answer["result"]["pane"]["focused"].as_bool(),
            answer["result"]["pane"]["agent_status"].as_str()
        ),
        (Some(true), Some("idle"))
    );
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
async fn an_agent_reports_and_releases_over_the_wire_as_in_real_herdr() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    let report = |state: &str| json!({"pane_id": pane, "source": "custom:probe", "agent": "probe", "state": state});
    assert_eq!(result_type(&rpc(&h, "pane.report_agent", report("idle")).await), "ok");
    let answer = rpc(&h, "agent.get", json!({"target": pane})).await;
    let agent = &answer["result"]["agent"];
    assert_eq!(
        (agent["agent"].as_str(), agent["agent_status"].as_str()),
        (Some("probe"), Some("idle"))
    );
    let first = agent["state_change_seq"].as_u64().expect("state_change_seq");
    rpc(&h, "pane.report_agent", report("working")).await;
    rpc(&h, "pane.report_agent", report("idle")).await;
    let answer = rpc(&h, "agent.get", json!({"target": pane})).await;
    assert_eq!(answer["result"]["agent"]["agent_status"], "done");
    assert_eq!(answer["result"]["agent"]["state_change_seq"].as_u64(), Some(first + 2));
    // Real herdr counts only what it shows changing: `idle` while `done` and `working` twice do not.
    rpc(&h, "pane.report_agent", report("idle")).await;
    let answer = rpc(&h, "agent.get", json!({"target": pane})).await;
    assert_eq!(answer["result"]["agent"]["state_change_seq"].as_u64(), Some(first + 2));
    rpc(&h, "pane.report_agent", report("working")).await;
    rpc(&h, "pane.report_agent", report("working")).await;
    let answer = rpc(&h, "agent.get", json!({"target": pane})).await;
    assert_eq!(answer["result"]["agent"]["state_change_seq"].as_u64(), Some(first + 3));
    let line = json!({"id": "bad", "method": "pane.report_agent", "params": report("finished")});
    let bad = raw(&h, &line.to_string()).await;
    assert_eq!(code(&bad), "invalid_request", "{bad}");
    let missing = json!({"pane_id": "w1:p99", "source": "custom:probe", "agent": "probe", "state": "idle"});
    assert_eq!(code(&rpc(&h, "pane.report_agent", missing).await), "pane_not_found");
    let release = json!({"pane_id": pane, "source": "custom:probe", "agent": "probe"});
    assert_eq!(result_type(&rpc(&h, "pane.release_agent", release).await), "ok");
    assert_eq!(
        code(&rpc(&h, "agent.get", json!({"target": pane})).await),
        "agent_not_found"
    );
}
