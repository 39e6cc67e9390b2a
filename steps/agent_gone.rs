//! Steps of SPEC [C-20] (`agent_gone.feature`): who holds a pane's terminal when its agent is gone
//! or something else runs in front, as the fake herdr serves it through `pane.process_info`
//! (docs/CONTRACT.md, "Agent gone"), and the outcomes a sender may see then.
//!
//! Why a file of its own: these steps change what runs in a pane (a nested shell, a script, an
//! agent's exit), which the forward and pull steps never do; the absence checks ("nothing typed",
//! "no nudge") are the shared ones.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::herdr::AgentStatus;
use fleet_conformance::reaction::{Bound, Stamped};
use serde_json::json;

use crate::world::FleetWorld;

/// The host and pane of an entity.
fn pane_of(w: &FleetWorld, name: &str) -> anyhow::Result<(String, String)> {
    let e = w.entity(name)?;
    Ok((e.host.clone(), e.pane.clone()))
}

/// An interactive `bash` started in the pane takes its terminal (e.g. an agent that handed the
/// terminal to a shell, or a user who typed `bash`): herdr's status stays what it was.
#[given(expr = "an interactive shell started in the pane of {string} holds its terminal")]
async fn nested_shell(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    let before = herdr.status(&pane);
    herdr.run_program(&pane, &["bash"]);
    ensure!(
        herdr.status(&pane) == before && herdr.agent(&pane).is_some(),
        "herdr no longer shows the agent of {name} as before ({before:?}): the scenario needs its status kept"
    );
    Ok(())
}

/// The worker's agent (named `claude`, which herdr recognises) exits without releasing the pane:
/// herdr shows `unknown` and no agent, the pane's shell has the terminal.
#[given(expr = "the agent of {string} has exited, herdr showing the pane's status as unknown")]
async fn recognised_agent_exits(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    herdr.agent_exits(&pane);
    ensure!(
        herdr.status(&pane) == Some(AgentStatus::Unknown) && herdr.agent(&pane).is_none(),
        "herdr still shows an agent in the pane of {name}: the scenario needs one herdr recognises"
    );
    Ok(())
}

/// A script run by `bash` (its leader named `bash`, the script in its argv, plus what it runs)
/// has the terminal; herdr still shows the pane's agent status.
/// A script run by bash takes the worker's terminal and reports as its agent (`working`, then
/// `idle`): herdr's count moves, so [C-23] takes it for the agent too, and what is judged is
/// [C-20]'s part — a script is a program, not a shell at its prompt.
#[given(expr = "a script run by bash holds the terminal of {string}, reporting as its agent")]
async fn script_in_front(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    let agent = herdr.agent(&pane).unwrap_or_else(|| "claude".to_string());
    herdr.run_job(&pane, &[&["bash", "run-agent.sh"], &["sleep", "1000"]]);
    herdr.report_agent(&pane, &agent, AgentStatus::Working);
    herdr.report_agent(&pane, &agent, AgentStatus::Idle);
    Ok(())
}

/// [C-20] leaves the gate open for a program that is not a shell at its prompt, so the brief is
/// typed (FWD-2); whether that program then acts on it decides between INJECTED and FWD-7's
/// `not_submitted`. Both are allowed; `stopped` (no agent gone) and `busy` (the gate was open)
/// are not.
#[then(regex = r#"^the send returns "injected", or "failed" with reason "not_submitted", within the inject bound$"#)]
async fn injected_or_not_submitted(w: &mut FleetWorld) -> anyhow::Result<()> {
    let bound = w.inject_bound() + std::time::Duration::from_secs(3);
    let v = w.call_result("send", bound).await?;
    ensure!(
        v["status"] == json!("injected") || (v["status"] == json!("failed") && v["reason"] == json!("not_submitted")),
        "send returned {v}, expected \"injected\" or \"failed\" with reason \"not_submitted\""
    );
    Ok(())
}

/// [C-20]'s "at once", judged as a number (CONTRACT §7): the send's outcome is waited for as any
/// outcome is (stretched: the suite's observation), and the worker gateway's reaction is read from
/// the gateways' own stamps on the wire — the FAILED's `ts` less its brief's `ts`, less one broker
/// round trip measured now (the brief's delivery) — against [C-26]'s "at once" (`Bound::at_once`: 1 s + the margin, stretched ≤ 2.5 s),
/// never stretched. Needs "the probe watches the wire" before the send.
#[then(regex = r#"^the send returns "failed" with reason "([a-z_]+)" at once$"#)]
async fn failed_at_once(w: &mut FleetWorld, reason: String) -> anyhow::Result<()> {
    let v = w.call_result("send", Duration::from_secs(5)).await?;
    ensure!(
        v["status"] == json!("failed") && v["reason"] == json!(reason),
        "send returned {v}, expected status \"failed\" with reason {reason:?}"
    );
    let tap = w.wire.msgs_tap()?;
    let envelope = |c: &fleet_conformance::probe::Captured| Envelope::from_field_table(&c.headers()).ok();
    let failed = tap
        .wait_for("the FAILED on the wire", Duration::from_secs(5), |c| {
            envelope(c).is_some_and(|e| e.kind() == "FAILED")
        })
        .await?;
    let failed = envelope(&failed).ok_or_else(|| anyhow!("the FAILED's envelope does not parse"))?;
    let corr = failed.value("corrId").to_string();
    let brief = tap
        .fetch()
        .await?
        .iter()
        .filter_map(envelope)
        .find(|e| e.msg_id() == corr)
        .ok_or_else(|| anyhow!("the probe saw no brief with msgId {corr} (the FAILED's corrId)"))?;
    let transit = w.probe().await?.round_trip().await?;
    Stamped {
        from_ms: brief.ts_ms().map_err(|e| anyhow!(e))?,
        to_ms: failed.ts_ms().map_err(|e| anyhow!(e))?,
        transit,
    }
    .judge(
        &format!("the FAILED {reason} for brief {corr}"),
        &Bound::at_once("[C-20] / [C-26]: FAILED stopped at once"),
    )?;
    Ok(())
}
