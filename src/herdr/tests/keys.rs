//! Tests of key names in `pane.send_input`, parsed as real herdr v0.8.2 parses them.

use super::*;

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
#[case::control("control+c")]
#[case::hyper("hyper+c")]
#[case::key_first("c+ctrl")]
#[case::spaced("ctrl + c")]
#[case::f0("f0")]
#[case::f255("f255")]
#[case::f01("f01")]
#[case::double_quote("double-quote")]
#[case::plus_char("+")]
#[case::ctrl_minus("ctrl+-")]
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
#[case::tmux_upper_key("C-C")]
#[case::tmux_mixed("c-C")]
#[case::f256("f256")]
#[case::lone_modifier("ctrl+shift")]
#[case::empty_part("ctrl++")]
#[case::two_keys("ctrl+ab")]
#[case::kp_enter("kp_enter")]
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
