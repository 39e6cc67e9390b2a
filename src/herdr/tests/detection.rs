//! herdr's own detection of a recognised agent that never reports (`detect.rs`), and ctrl+c
//! ending the agent in front — both as real herdr v0.8.2 showed on 2026-12-06.

use super::*;

/// Cases n1/n2: a program named `claude` that never reports is `unknown`, then `idle` after the
/// detection delay; an `agent.wait` already open wakes then, and the change is counted.
#[tokio::test]
async fn a_recognised_agent_that_never_reports_turns_idle_after_the_detection_delay() {
    let (h, _dir) = fake().await;
    let after = Duration::from_millis(400);
    h.set_detection_delay(after);
    let pane = h.add_shell_pane();
    let started = Instant::now();
    send(&h, &pane, "claude").await;
    assert_eq!(h.agent(&pane).as_deref(), Some("claude"), "recognised by name at once");
    assert_eq!(status_on_wire(&h, &pane).await, "unknown", "not yet detected");
    let seq = |answer: &Value| answer["result"]["agent"]["state_change_seq"].as_u64();
    let before = seq(&rpc(&h, "agent.get", json!({"target": pane})).await).expect("an agent");
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 60_000)).await;
    let waited = started.elapsed();
    assert_eq!(answer["result"]["agent"]["agent_status"], "idle", "{answer}");
    assert!(waited >= after, "detected after {waited:?}, before the delay {after:?}");
    assert!(
        waited < after + deadline(),
        "the wait woke at the detection: {waited:?}"
    );
    assert!(seq(&answer).expect("a seq") > before, "a state change: {answer}");
    assert_eq!(status_on_wire(&h, &pane).await, "idle");
}

/// The default delay is what was measured (3.75–4.09 s on real herdr v0.8.2).
#[test]
fn the_default_detection_delay_is_the_measured_one() {
    assert_eq!(DETECT_IDLE_AFTER, Duration::from_secs(4));
}

/// An agent that reports before the delay is what it reports: the detection does not override it.
#[tokio::test]
async fn a_report_before_the_delay_disarms_the_detection() {
    let (h, _dir) = fake().await;
    let after = Duration::from_millis(200);
    h.set_detection_delay(after);
    let pane = h.add_shell_pane();
    send(&h, &pane, "claude").await;
    h.set_status(&pane, AgentStatus::Working);
    // Past the delay: an agent.wait for idle times out, the status stays `working`.
    let answer = rpc(&h, "agent.wait", wait_params(&pane, 3 * after.as_millis() as u64)).await;
    assert_eq!(code(&answer), "timeout", "{answer}");
    assert_eq!(status_on_wire(&h, &pane).await, "working");
}

/// Cases c2 and c6: ctrl+c ends the agent in front. An agent herdr knows only from its reports
/// keeps its last status and the shell has the terminal (what is typed next runs there); a
/// recognised one is forgotten (`unknown`, `agent_not_found`).
#[rstest]
#[case::reporting("python3", "done")]
#[case::recognised("claude", "unknown")]
#[tokio::test]
async fn ctrl_c_ends_the_agent_in_front(#[case] program: &str, #[case] shown: &str) {
    let (h, _dir) = fake().await;
    let pane = h.add_shell_pane();
    h.run_program(&pane, &[program, "agent"]);
    h.report_agent(
        &pane,
        if program == "claude" { "claude" } else { "probeagent" },
        AgentStatus::Working,
    );
    h.report_agent(
        &pane,
        if program == "claude" { "claude" } else { "probeagent" },
        AgentStatus::Idle,
    );
    let ctrl_c = json!({"pane_id": pane, "text": "", "keys": ["ctrl+c"]});
    assert_eq!(result_type(&rpc(&h, "pane.send_input", ctrl_c).await), "ok");
    let (shell, group, name) = foreground(&h, &pane).await;
    assert_eq!((group, name.as_str()), (shell, "bash"), "the shell has the terminal");
    assert_eq!(status_on_wire(&h, &pane).await, shown);
    send(&h, &pane, "echo typed after").await;
    assert_eq!(h.ran_in_shell(&pane), vec!["echo typed after"]);
}
