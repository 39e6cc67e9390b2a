//! Tests of what runs in a pane's terminal (`pane.process_info`): the shell, programs started
//! from its prompt, nested shells, scripts, `exec`, an agent that exits.

use super::*;

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

/// `pane.process_info`'s processes as (pid, name, argv), and the two pids.
async fn processes(h: &FakeHerdr, pane: &str) -> (u64, u64, Vec<(u64, String, Vec<String>)>) {
    let answer = rpc(h, "pane.process_info", json!({"pane_id": pane})).await;
    let info = &answer["result"]["process_info"];
    let procs = info["foreground_processes"]
        .as_array()
        .expect("foreground_processes")
        .iter()
        .map(|p| {
            assert!(p.get("argv0").is_none(), "real herdr sends no argv0: {p}");
            assert_eq!(
                p["cmdline"],
                p["argv"].as_array().map_or(String::new(), |a| {
                    a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" ")
                })
            );
            let argv = p["argv"]
                .as_array()
                .expect("argv")
                .iter()
                .filter_map(|a| a.as_str().map(str::to_string))
                .collect();
            (
                p["pid"].as_u64().unwrap_or_default(),
                p["name"].as_str().unwrap_or_default().to_string(),
                argv,
            )
        })
        .collect();
    (
        info["shell_pid"].as_u64().unwrap_or_default(),
        info["foreground_process_group_id"].as_u64().unwrap_or_default(),
        procs,
    )
}

fn names(procs: &[(u64, String, Vec<String>)]) -> Vec<(&str, Vec<&str>)> {
    procs
        .iter()
        .map(|(_, n, a)| (n.as_str(), a.iter().map(String::as_str).collect()))
        .collect()
}

#[tokio::test]
async fn programs_typed_at_the_prompt_take_the_terminal_as_in_real_herdr() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    let (shell, group, procs) = processes(&h, &pane).await;
    assert_eq!((group, names(&procs)), (shell, vec![("bash", vec![SHELL_PATH])]));
    send(&h, &pane, "sleep 1000").await;
    let (shell, group, procs) = processes(&h, &pane).await;
    assert_ne!(group, shell);
    assert_eq!(names(&procs), vec![("sleep", vec!["sleep", "1000"])]);
    assert_eq!(procs[0].0, group, "the leader's pid is the group's");
    rpc(&h, "pane.send_input", json!({"pane_id": pane, "keys": ["ctrl+c"]})).await;
    let (shell, group, _) = processes(&h, &pane).await;
    assert_eq!(group, shell, "ctrl+c ends it: the shell is back");

    send(&h, &pane, "exec sleep 1000").await;
    let (shell, group, procs) = processes(&h, &pane).await;
    assert_eq!((group, names(&procs)), (shell, vec![("sleep", vec!["sleep", "1000"])]));
    h.exit_program(&pane);
    assert!(!h.pane_exists(&pane), "the pane's own process ended: the pane closes");
}

#[tokio::test]
async fn a_nested_shell_and_a_script_are_groups_of_their_own() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    h.run_program(&pane, &["bash"]);
    let (shell, group, procs) = processes(&h, &pane).await;
    assert_ne!(group, shell);
    assert_eq!(names(&procs), vec![("bash", vec!["bash"])]);
    send(&h, &pane, "echo hi").await;
    assert_eq!(
        h.ran_in_shell(&pane),
        vec!["echo hi"],
        "the nested shell runs what is typed"
    );
    h.run_job(&pane, &[&["bash", "script.sh"], &["sleep", "1000"]]);
    let (_, group, procs) = processes(&h, &pane).await;
    assert_eq!(
        names(&procs),
        vec![("bash", vec!["bash", "script.sh"]), ("sleep", vec!["sleep", "1000"])]
    );
    assert_eq!(procs[0].0, group);
    send(&h, &pane, "an answer for the script").await;
    assert_eq!(h.inputs(&pane), vec!["an answer for the script"], "the script reads it");
    h.exit_program(&pane);
    assert_eq!(names(&processes(&h, &pane).await.2), vec![("bash", vec!["bash"])]);
    h.exit_program(&pane);
    let (shell, group, _) = processes(&h, &pane).await;
    assert_eq!(group, shell);
}

#[tokio::test]
async fn without_a_pane_id_process_info_answers_for_the_focused_pane() {
    let (h, _dir) = fake().await;
    let answer = rpc(&h, "pane.process_info", json!({})).await;
    assert_eq!(
        answer["error"],
        json!({"code": "pane_not_found", "message": "pane not found"})
    );
    h.add_agent_pane("claude", AgentStatus::Idle);
    let answer = rpc(&h, "pane.process_info", json!({})).await;
    assert_eq!(answer["result"]["process_info"]["pane_id"], "w1:p1", "{answer}");
}

#[rstest]
#[case::recognised("claude", "unknown")]
#[case::not_recognised("claude-main", "done")]
#[tokio::test]
async fn an_agent_that_exits_leaves_its_pane_to_the_shell(#[case] agent: &str, #[case] shown: &str) {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane(agent, AgentStatus::Working);
    h.set_status(&pane, AgentStatus::Idle);
    h.agent_exits(&pane);
    let (shell, group, _) = foreground(&h, &pane).await;
    assert_eq!(group, shell, "the shell has the terminal");
    assert_eq!(status_on_wire(&h, &pane).await, shown);
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await;
    if shown == "unknown" {
        assert_eq!(code(&answer), "agent_not_found", "herdr forgot the agent");
    } else {
        assert_eq!(answer["result"]["agent"]["agent_status"], "done", "{answer}");
    }
    send(&h, &pane, "the brief").await;
    assert_eq!(h.ran_in_shell(&pane), vec!["the brief"]);
    assert!(h.inputs(&pane).is_empty());
}

#[tokio::test]
async fn an_agent_that_never_reports_leaves_the_status_where_it_was() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    h.set_on_input(&pane, InputReaction::NeverReports);
    send(&h, &pane, "read but ignored").await;
    assert_eq!(
        h.inputs(&pane),
        vec!["read but ignored"],
        "submitted: the agent read it"
    );
    assert_eq!(status_on_wire(&h, &pane).await, "idle", "no report, no change");
}

/// Real herdr v0.8.2 (`2026-12-04/e2e-replay-b.jsonl`, the `bash sleeper.sh` pane): an agent that
/// reports its own status exits (its status stays), a script that never reads its terminal takes
/// it; a brief typed then waits in the terminal, and the shell runs it once the script ends.
#[tokio::test]
async fn a_line_typed_to_a_program_that_never_reads_waits_and_the_shell_runs_it_when_it_ends() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    h.run_program(&pane, &["python3", "agent.py"]);
    h.report_agent(&pane, "probeagent", AgentStatus::Idle);
    let seq = |h: FakeHerdr, pane: String| async move {
        rpc(&h, "agent.get", json!({"target": pane})).await["result"]["agent"]["state_change_seq"]
            .as_u64()
            .expect("a state_change_seq")
    };
    let before = seq(h.clone(), pane.clone()).await;
    h.agent_exits(&pane);
    h.run_job_ignoring_input(&pane, &[&["bash", "sleeper.sh"], &["sleep", "1000"]]);
    assert_eq!(
        status_on_wire(&h, &pane).await,
        "idle",
        "the exited agent's status stays"
    );
    assert_eq!(seq(h.clone(), pane.clone()).await, before, "nothing changed to herdr");
    let (_, _, procs) = processes(&h, &pane).await;
    assert_eq!(
        names(&procs),
        vec![("bash", vec!["bash", "sleeper.sh"]), ("sleep", vec!["sleep", "1000"])]
    );
    send(&h, &pane, "echo brief").await;
    assert_eq!(h.input_log(&pane)[0].outcome, InputOutcome::Unread);
    assert!(h.inputs(&pane).is_empty() && h.ran_in_shell(&pane).is_empty());
    h.exit_program(&pane);
    assert_eq!(
        h.ran_in_shell(&pane),
        vec!["echo brief"],
        "the shell ran the waiting line"
    );
    // ctrl+c flushes what waits instead.
    h.run_job_ignoring_input(&pane, &[&["bash", "sleeper.sh"], &["sleep", "1000"]]);
    send(&h, &pane, "echo second").await;
    let ctrl_c = json!({"pane_id": pane, "text": "", "keys": ["ctrl+c"]});
    rpc(&h, "pane.send_input", ctrl_c).await;
    let log = h.input_log(&pane);
    assert_eq!(log[1].outcome, InputOutcome::Flushed, "{log:?}");
    assert_eq!(h.ran_in_shell(&pane), vec!["echo brief"]);
}

/// A restarted agent in the same pane: a program herdr recognises exits (`unknown`, a change)
/// and starts again (a change); an agent that reports its status itself and restarts reporting
/// the status herdr already shows changes nothing (real herdr counts only changes).
#[tokio::test]
async fn a_restarted_agent_moves_state_change_seq_only_when_what_herdr_shows_changes() {
    let (h, _dir) = fake().await;
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let seq = |h: FakeHerdr, pane: String| async move {
        rpc(&h, "agent.get", json!({"target": pane})).await["result"]["agent"]["state_change_seq"].as_u64()
    };
    let first = seq(h.clone(), pane.clone()).await.expect("an agent");
    h.agent_exits(&pane);
    assert_eq!(seq(h.clone(), pane.clone()).await, None, "herdr forgot the agent");
    h.run_program(&pane, &["claude"]);
    h.set_status(&pane, AgentStatus::Idle);
    let again = seq(h.clone(), pane.clone()).await.expect("the new agent");
    assert!(again > first, "{first} → {again}");
    let custom = h.add_shell_pane();
    h.run_program(&custom, &["python3", "agent.py"]);
    h.report_agent(&custom, "probeagent", AgentStatus::Idle);
    let shown = seq(h.clone(), custom.clone()).await.expect("the agent");
    h.agent_exits(&custom);
    h.run_program(&custom, &["python3", "agent.py"]);
    h.report_agent(&custom, "probeagent", AgentStatus::Idle);
    assert_eq!(seq(h.clone(), custom.clone()).await, Some(shown));
}

/// Real herdr v0.8.2 (2026-12-06, case n1): a bash script named `claude` run directly is listed
/// by the script's name with bash's `argv`, its `sleep` in the same group, and is agent `claude`.
#[tokio::test]
async fn a_script_named_claude_is_listed_as_real_herdr_lists_it_and_is_agent_claude() {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    h.run_script(&pane, "/opt/bin/claude", &["40"], &[&["sleep", "40"]]);
    let answer = rpc(&h, "pane.process_info", json!({"pane_id": pane})).await;
    let info = &answer["result"]["process_info"];
    let procs = info["foreground_processes"].as_array().cloned().unwrap_or_default();
    assert_eq!(procs.len(), 2, "{answer}");
    assert_eq!(procs[0]["name"], "claude");
    assert_eq!(procs[0]["argv"], json!(["/bin/bash", "/opt/bin/claude", "40"]));
    assert_eq!(procs[1]["argv"], json!(["sleep", "40"]));
    assert_ne!(info["foreground_process_group_id"], info["shell_pid"]);
    assert_eq!(h.agent(&pane).as_deref(), Some("claude"));
}
