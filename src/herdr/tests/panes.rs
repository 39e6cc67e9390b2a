//! Tests of the fake herdr's workspaces, tabs and panes: ids, env, cwd, focus, closing.

use super::*;

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
    assert_eq!(
        h.pane_ids().len(),
        2,
        "no pane was created but the workspace's and the shell's"
    );
}

#[tokio::test]
async fn added_panes_imply_workspace_w1_and_ids_are_never_reused() {
    let (h, _dir) = fake().await;
    let main = h.add_agent_pane("claude", AgentStatus::Idle);
    assert_eq!(main, "w1:p2", "w1:p1 is the new workspace's own root pane");
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {}})).await;
    assert_eq!(answer["result"]["root_pane"]["pane_id"], "w1:p3");
    assert_eq!(answer["result"]["tab"]["tab_id"], "w1:t3");
    assert_eq!(
        rpc(&h, "pane.close", json!({"pane_id": "w1:p3"})).await["result"],
        json!({"type": "ok"})
    );
    let answer = rpc(&h, "tab.create", json!({"focus": false, "env": {}})).await;
    assert_eq!(answer["result"]["root_pane"]["pane_id"], "w1:p4");
    assert_eq!(answer["result"]["tab"]["tab_id"], "w1:t4");
    assert_eq!(
        answer["result"]["tab"]["label"], "4",
        "an unlabelled tab shows its number, which a closed tab before it does not change (2026-12-06)"
    );
    assert_eq!(h.add_shell_pane(), "w1:p5");
    assert_eq!(h.pane_ids(), vec!["w1:p1", "w1:p2", "w1:p4", "w1:p5"]);
}

#[tokio::test]
async fn closing_every_pane_removes_the_workspace() {
    let (h, _dir) = fake().await;
    let only = h.add_shell_pane();
    h.close_pane(&only);
    h.close_pane("w1:p1");
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
        (Some("w1:t2"), Some(false))
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
    assert_eq!(worker, "w1:p3");
    assert_eq!(
        result_type(&rpc(&h, "pane.close", json!({"pane_id": worker})).await),
        "ok"
    );
    assert!(!h.pane_exists(&worker));
    let answer = rpc(&h, "pane.get", json!({"pane_id": worker})).await;
    assert_eq!(
        answer["error"],
        json!({"code": "pane_not_found", "message": "pane w1:p3 not found"})
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

#[tokio::test]
async fn a_server_told_to_forget_calls_still_answers_and_keeps_panes_and_inputs() {
    let (h, _dir) = fake().await;
    let answer = rpc(
        &h,
        "workspace.create",
        json!({"focus": false, "label": "fleet", "env": {}}),
    )
    .await;
    assert_eq!(result_type(&answer), "workspace_created");
    assert_eq!(h.calls().len(), 1, "calls are kept until told otherwise");

    h.forget_calls();
    assert!(h.calls().is_empty(), "the log kept so far is dropped");
    let pane = h.add_agent_pane("claude", AgentStatus::Idle);
    let answer = send(&h, &pane, "a brief").await;
    assert!(answer.get("result").is_some(), "answered as before: {answer}");
    assert_eq!(h.inputs(&pane), vec!["a brief".to_string()], "inputs are still kept");
    assert_eq!(h.created_panes().len(), 1, "created panes are still kept");
    assert!(h.calls().is_empty(), "nothing new was kept");
}

#[test]
fn ids_count_in_herdrs_public_alphabet() {
    use crate::herdr::model::public_number;
    let ids: Vec<String> = [1, 9, 10, 17, 31, 32, 33, 64, 65, 1056, 1057]
        .into_iter()
        .map(public_number)
        .collect();
    assert_eq!(ids, ["1", "9", "A", "H", "Z", "0", "11", "10", "21", "00", "111"]);
}

/// Real herdr v0.8.2 (2026-12-06): after `w1:t8` closed, the next tabs were `w1:t9` (number 9)
/// and `w1:tA` (number 10), their panes `w1:p9` and `w1:pA`: ids and numbers are counters, never
/// reused or renumbered.
#[tokio::test]
async fn tab_and_pane_ids_go_on_past_nine_in_herdrs_alphabet_and_numbers_stay() {
    let (h, _dir) = fake().await;
    rpc(&h, "workspace.create", json!({"focus": false, "label": "host-b"})).await;
    let mut made = Vec::new();
    for i in 0..9 {
        let a = rpc(&h, "tab.create", json!({"label": format!("t{i}"), "focus": false})).await;
        made.push((
            a["result"]["tab"]["tab_id"].as_str().unwrap_or_default().to_string(),
            a["result"]["root_pane"]["pane_id"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            a["result"]["tab"]["number"].as_u64().unwrap_or_default(),
        ));
    }
    assert_eq!(made[7], ("w1:t9".to_string(), "w1:p9".to_string(), 9));
    assert_eq!(made[8], ("w1:tA".to_string(), "w1:pA".to_string(), 10));
    rpc(&h, "pane.close", json!({"pane_id": "w1:p8"})).await;
    let a = rpc(&h, "tab.create", json!({"label": "after", "focus": false})).await;
    assert_eq!(a["result"]["tab"]["tab_id"], "w1:tB");
    assert_eq!(a["result"]["tab"]["number"], 11, "not renumbered after a close");
}
