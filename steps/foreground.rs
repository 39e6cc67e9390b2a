//! Steps of the proposed foreground-identity rule (`foreground.feature`, capability
//! `foreground-identity`, docs/CONTRACT.md §4 "Foreground identity") and of [C-20]'s older-herdr
//! fallback (`herdr_faults.feature`, "An older herdr").
//!
//! Why a file of its own: these steps run agents that report their own status (a name herdr does
//! not recognise, so their status outlives them), programs that never read the terminal (the
//! measured `bash sleeper.sh` case: typed text waits and the shell runs it later), agents restarted
//! in the same pane, and a herdr without `pane.process_info` — none of which the other herdr steps
//! set up.

use std::time::{Duration, Instant};

use anyhow::{Context, ensure};
use cucumber::{given, then, when};
use fleet_conformance::herdr::{AgentStatus, Fault, InputOutcome};
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, wait_for};

use crate::world::FleetWorld;

/// The name the stand-in agent reports under (`pane.report_agent`, `custom:probeagent`): not one
/// herdr recognises, so herdr keeps its last status when it exits.
const REPORTING_AGENT: &str = "probeagent";

/// The host and pane of an entity.
fn pane_of(w: &FleetWorld, name: &str) -> anyhow::Result<(String, String)> {
    let e = w.entity(name)?;
    Ok((e.host.clone(), e.pane.clone()))
}

/// Registers a worker in a pane prepared by `prepare` (a shell pane on `host`'s herdr).
async fn worker_in(
    w: &mut FleetWorld,
    host: &str,
    name: &str,
    parent: &str,
    prepare: impl FnOnce(&fleet_conformance::herdr::FakeHerdr, &str),
) -> anyhow::Result<()> {
    w.start_host(host).await?;
    let parent_gid = w.gid(parent)?;
    let h = w.host(host)?;
    let pane = h.herdr.add_shell_pane();
    prepare(&h.herdr, &pane);
    let (gid, token) = h
        .gateway
        .register("worker", &pane, &[], Some(&parent_gid), None)
        .await
        .with_context(|| format!("registering {name}"))?;
    w.adopt_entity(name, host, &gid, &token, &pane);
    Ok(())
}

/// A worker whose agent (`python3 agent.py`) reports its own status as `probeagent`, `idle`.
#[given(
    regex = r#"^host "([^"]+)" runs a gateway with a worker "([^"]+)" whose parent is "([^"]+)", its agent reporting its own status$"#
)]
async fn reporting_worker(w: &mut FleetWorld, host: String, name: String, parent: String) -> anyhow::Result<()> {
    worker_in(w, &host, &name, &parent, |herdr, pane| {
        herdr.run_program(pane, &["python3", "agent.py"]);
        herdr.report_agent(pane, REPORTING_AGENT, AgentStatus::Idle);
    })
    .await
}

/// A worker whose agent runs under a script: the group's leader `bash run-agent.sh`, the agent
/// `python3 agent.py` in the same group, reporting its own status.
#[given(
    regex = r#"^host "([^"]+)" runs a gateway with a worker "([^"]+)" whose parent is "([^"]+)", its agent run by a script$"#
)]
async fn scripted_worker(w: &mut FleetWorld, host: String, name: String, parent: String) -> anyhow::Result<()> {
    worker_in(w, &host, &name, &parent, |herdr, pane| {
        herdr.run_job(pane, &[&["bash", "run-agent.sh"], &["python3", "agent.py"]]);
        herdr.report_agent(pane, REPORTING_AGENT, AgentStatus::Idle);
    })
    .await
}

/// Whether a recorded answer shows the agent ready (`idle` or `done`), wherever the status sits.
fn shows_ready(response: &serde_json::Value) -> bool {
    let result = &response["result"];
    let status = result["pane"]["agent_status"]
        .as_str()
        .or_else(|| result["agent"]["agent_status"].as_str());
    matches!(status, Some("idle" | "done"))
}

/// The agent finishes its brief (reports `idle`; herdr shows `done`), and the worker's gateway
/// has seen it back (a status read answered `idle`/`done`) and then read who holds the terminal
/// (a `pane.process_info` answered after that) — the proposed rule's (i).
#[when(regex = r#"^"([^"]+)" comes back to done and its gateway has looked at its terminal since$"#)]
async fn back_and_looked_at(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = w.host(&host)?.herdr.clone();
    let reported = Instant::now();
    herdr.set_status(&pane, AgentStatus::Idle);
    wait_for(
        &format!("the gateway to see {name} back at done and then look at its terminal"),
        Duration::from_secs(10),
        || {
            let calls = herdr.calls();
            let pane = pane.clone();
            async move {
                let on_pane = |c: &&fleet_conformance::herdr::Call| {
                    c.params["pane_id"] == pane.as_str() || c.params["target"] == pane.as_str()
                };
                let seen = calls.iter().filter(on_pane).find_map(|c| {
                    let at = c.answered_at.filter(|at| *at > reported)?;
                    let status_read = matches!(c.method.as_str(), "pane.get" | "agent.get" | "agent.wait");
                    (status_read && c.response.as_ref().is_some_and(shows_ready)).then_some(at)
                });
                let Some(seen) = seen else { return Ok(None) };
                let looked = calls
                    .iter()
                    .filter(on_pane)
                    .any(|c| c.method == "pane.process_info" && c.received_at >= seen && c.response.is_some());
                Ok(looked.then_some(()))
            }
        },
    )
    .await?;
    Ok(())
}

/// The agent's process exits without releasing the pane; herdr (not recognising it by name) keeps
/// its last status and name; the shell has the terminal.
#[when(regex = r#"^the agent of "([^"]+)" exits, herdr keeping its status$"#)]
async fn agent_exits_status_kept(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    let before = herdr.status(&pane);
    herdr.agent_exits(&pane);
    ensure!(
        herdr.status(&pane) == before && herdr.agent(&pane).is_some(),
        "herdr no longer shows the agent of {name} as before ({before:?}): the scenario needs one herdr does not recognise"
    );
    Ok(())
}

/// `bash sleeper.sh` started at the prompt: the script and its `sleep 1000` take the terminal and
/// never read it; herdr's status is unchanged.
#[when(regex = r#"^a script that never reads its terminal is started in the pane of "([^"]+)"$"#)]
async fn sleeper(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    w.host(&host)?
        .herdr
        .run_job_ignoring_input(&pane, &[&["bash", "sleeper.sh"], &["sleep", "1000"]]);
    Ok(())
}

#[when(regex = r#"^the script in the pane of "([^"]+)" ends$"#)]
async fn sleeper_ends(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    w.host(&host)?.herdr.exit_program(&pane);
    Ok(())
}

/// The worker's agent (one herdr recognises, `claude`) exits — herdr shows `unknown` — and is
/// started again in the same pane (a new process group), herdr showing it `idle` once it reports.
#[when(regex = r#"^the agent of "([^"]+)" exits and is started again in its pane, reporting idle$"#)]
async fn restarted(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    let agent = herdr.agent(&pane).context("the worker's pane shows no agent")?;
    herdr.agent_exits(&pane);
    ensure!(
        herdr.status(&pane) == Some(AgentStatus::Unknown),
        "herdr still shows {agent:?} after its exit: the scenario needs an agent herdr recognises"
    );
    herdr.run_program(&pane, &[agent.as_str()]);
    herdr.set_status(&pane, AgentStatus::Idle);
    Ok(())
}

/// Over the absence window: nothing reached the pane after its first brief.
#[then(regex = r#"^herdr on "([^"]+)" records nothing typed into "([^"]+)" after its first brief$"#)]
async fn nothing_more_typed(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let count = 1;
    let pane = w.entity(&name)?.pane.clone();
    let herdr = w.host(&host)?.herdr.clone();
    hold_for(&format!("nothing more typed into {name}"), ABSENCE_WINDOW, || {
        let log = herdr.input_log(&pane);
        async move {
            if log.len() <= count {
                Ok(())
            } else {
                Err(format!("herdr received {:?}", &log[count..]))
            }
        }
    })
    .await?;
    Ok(())
}

/// No text typed into the pane was ever run by a shell as a command, nor waits to be.
#[then(regex = r#"^herdr on "([^"]+)" records nothing run as a command in "([^"]+)"$"#)]
async fn nothing_ran(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let log = w.host(&host)?.herdr.input_log(&pane);
    let ran: Vec<_> = log
        .iter()
        .filter(|r| matches!(r.outcome, InputOutcome::RanInShell | InputOutcome::Unread))
        .map(|r| (r.text.clone(), r.outcome))
        .collect();
    ensure!(ran.is_empty(), "typed text reached (or waits for) a shell: {ran:?}");
    Ok(())
}

/// An older herdr: `pane.process_info` is an unknown method to it.
#[given(regex = r#"^herdr on "([^"]+)" is an older herdr, without pane.process_info$"#)]
async fn older_herdr(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    w.host(&host)?.herdr.set_fault(Fault::NoProcessInfo, true);
    Ok(())
}

/// At least one nudge (any text typed into a main's pane, CONTRACT §4) within the bound.
#[then(regex = r#"^herdr on "([^"]+)" records a nudge into "([^"]+)" within (\d+) seconds$"#)]
async fn a_nudge(w: &mut FleetWorld, host: String, name: String, secs: u64) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let herdr = w.host(&host)?.herdr.clone();
    wait_for(&format!("a nudge into {name}"), Duration::from_secs(secs), || {
        let typed = !herdr.input_log(&pane).is_empty();
        async move { Ok(typed.then_some(())) }
    })
    .await?;
    Ok(())
}

/// [C-23]'s last rule: the agent in front stops reading its terminal, herdr still showing it
/// ready (real herdr v0.8.2: a program named `claude` that ignores its input, `idle`).
#[when(regex = r#"^the agent of "([^"]+)" stops reading its terminal, still shown ready$"#)]
async fn stops_reading(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    herdr.stop_reading(&pane);
    ensure!(
        herdr
            .status(&pane)
            .is_some_and(|s| matches!(s, AgentStatus::Idle | AgentStatus::Done)),
        "herdr shows {name} {:?}, not ready: the scenario needs it shown idle or done",
        herdr.status(&pane)
    );
    Ok(())
}

/// The agent reads its terminal again (the line left there reaches it) and is seen acting:
/// it reports `working`, then `idle` — herdr's `state_change_seq` moves.
#[when(regex = r#"^the agent of "([^"]+)" reads its terminal again and reports working, then idle$"#)]
async fn reads_again(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (host, pane) = pane_of(w, &name)?;
    let herdr = &w.host(&host)?.herdr;
    herdr.read_again(&pane);
    herdr.report_agent(&pane, REPORTING_AGENT, AgentStatus::Working);
    herdr.report_agent(&pane, REPORTING_AGENT, AgentStatus::Idle);
    Ok(())
}

/// SPEC [C-23]: the FAILED `not_submitted` of a brief that was typed and left unread says so —
/// `"typed": true` in its body, on the wire (the probe watches it). Needs "the probe watches the
/// wire" before the send.
#[then(regex = r#"^the FAILED "not_submitted" on the wire says the brief was typed$"#)]
async fn failed_says_typed(w: &mut FleetWorld) -> anyhow::Result<()> {
    use fleet_conformance::envelope::Envelope;
    let tap = w.wire.msgs_tap()?;
    let failed = tap
        .wait_for("a FAILED not_submitted on the wire", Duration::from_secs(5), |c| {
            let failed = Envelope::from_field_table(&c.headers()).is_ok_and(|e| e.kind() == "FAILED");
            let body: serde_json::Value = serde_json::from_slice(&c.body).unwrap_or_default();
            failed && body["reason"] == "not_submitted"
        })
        .await?;
    let body: serde_json::Value = serde_json::from_slice(&failed.body).unwrap_or_default();
    ensure!(
        body["typed"] == serde_json::json!(true),
        "the FAILED not_submitted's body is {body}: [C-23] wants \"typed\": true for a brief typed and left unread"
    );
    Ok(())
}
