//! Steps that set the stage: the broker, hosts with gateways, entities, agent status, signals.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use cucumber::{given, then, when};
use fleet_conformance::herdr::AgentStatus;

use crate::world::FleetWorld;

#[given("a broker")]
async fn a_broker(w: &mut FleetWorld) -> anyhow::Result<()> {
    w.vhost().await.map(|_| ())
}

/// The inject bound is nominal like every deadline: a scenario's steps run inside it (a brief is
/// sent, the broker is read, an absence is watched, then the worker turns idle), so on a slow
/// machine it stretches with the time knob, or the gateway's bound would fire between two steps.
#[given(expr = "the gateways' inject bound is {int} seconds")]
async fn inject_bound(w: &mut FleetWorld, secs: u64) {
    let bound = fleet_conformance::timing::scaled(std::time::Duration::from_secs(secs));
    w.gateway_env
        .insert("FLEET_INJECT_TIMEOUT_MS".into(), bound.as_millis().to_string());
}

#[given(expr = "host {string} runs a gateway")]
async fn host_runs_gateway(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    w.start_host(&host).await
}

#[given(regex = r#"^host "([^"]+)" (?:runs a gateway with|also runs) an? (main|orchestrator) "([^"]+)"$"#)]
async fn host_with_main(w: &mut FleetWorld, host: String, role: String, name: String) -> anyhow::Result<()> {
    w.add_entity(&host, &name, &role, None, vec![]).await
}

#[given(
    regex = r#"^host "([^"]+)" (?:runs a gateway with|also runs) a worker "([^"]+)" whose parent is "([^"]+)"(?: in groups? "([^"]+)")?$"#
)]
async fn host_with_worker(
    w: &mut FleetWorld,
    host: String,
    name: String,
    parent: String,
    groups: String,
) -> anyhow::Result<()> {
    let groups: Vec<String> = groups
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect();
    w.add_entity(&host, &name, "worker", Some(&parent), groups).await
}

#[given(expr = "host {string} runs a gateway with profiles {string}")]
async fn host_with_profiles(w: &mut FleetWorld, host: String, profiles: String) -> anyhow::Result<()> {
    w.host_env
        .entry(host.clone())
        .or_default()
        .insert("FLEET_PROFILES".into(), profiles);
    w.start_host(&host).await
}

#[given(regex = r#"^gateways nudge after (\d+) ms$"#)]
async fn nudge_after(w: &mut FleetWorld, ms: u64) {
    w.gateway_env.insert("FLEET_NUDGE_INITIAL_MS".into(), ms.to_string());
}

#[given(regex = r#"^((?:"[^"]+"(?:, | and )?)+) are (idle|working)$"#)]
async fn all_are(w: &mut FleetWorld, names: String, word: String) -> anyhow::Result<()> {
    let names: Vec<&str> = names.split('"').skip(1).step_by(2).collect();
    for name in names {
        let e = w.entity(name)?;
        let (host, pane) = (e.host.clone(), e.pane.clone());
        w.host(&host)?.herdr.set_status(&pane, status(&word)?);
    }
    Ok(())
}

#[when(expr = "{string} is stopped through the local API of {string}")]
async fn stopped_locally(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    Ok(w.host(&host)?.gateway.stop_entity(&gid).await?)
}

fn status(word: &str) -> anyhow::Result<AgentStatus> {
    word.parse().map_err(|_| anyhow!("unknown agent status {word:?}"))
}

#[given(regex = r#"^"([^"]+)" is (idle|working|blocked|done)$"#)]
#[when(regex = r#"^"([^"]+)" becomes (idle|working|blocked|done)$"#)]
async fn agent_is(w: &mut FleetWorld, name: String, word: String) -> anyhow::Result<()> {
    let e = w.entity(&name)?;
    let (host, pane) = (e.host.clone(), e.pane.clone());
    w.host(&host)?.herdr.set_status(&pane, status(&word)?);
    Ok(())
}

/// What herdr shows for an agent now (faults aside): e.g. `done` after it worked and went idle.
#[then(regex = r#"^herdr on "([^"]+)" shows "([^"]+)" as (idle|working|blocked|done|unknown)$"#)]
async fn herdr_shows(w: &mut FleetWorld, host: String, name: String, word: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let shown = w.host(&host)?.herdr.status(&pane);
    let want = status(&word)?;
    anyhow::ensure!(shown == Some(want), "herdr shows {name} as {shown:?}, expected {want}");
    Ok(())
}

#[when(regex = r#"^the gateway on "([^"]+)" is (killed with SIGKILL|frozen with SIGSTOP|thawed with SIGCONT)$"#)]
async fn signal_gateway(w: &mut FleetWorld, host: String, how: String) -> anyhow::Result<()> {
    let h = w.host_mut(&host)?;
    match how.as_str() {
        "killed with SIGKILL" => h.gateway.kill().await,
        "frozen with SIGSTOP" => h.gateway.signal(libc::SIGSTOP).context("SIGSTOP")?,
        "thawed with SIGCONT" => h.gateway.signal(libc::SIGCONT).context("SIGCONT")?,
        other => bail!("unknown signal step {other}"),
    }
    Ok(())
}

#[when(expr = "the gateway on {string} is restarted")]
async fn restart_gateway(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let h = w.host_mut(&host)?;
    h.gateway.kill().await;
    h.gateway.launch().await?;
    let log = h.gateway.log_since_start();
    forget_sessions(w, &host);
    w.judge_start(&host, &log)
}

/// MCP sessions die with a gateway's process: the entities of `host` reconnect on next use.
fn forget_sessions(w: &mut FleetWorld, host: &str) {
    for e in w.entities.values_mut().filter(|e| e.host == host) {
        e.mcp = None;
    }
}

/// A restart judged by what follows (a refusal), not by readiness.
#[when(expr = "the gateway on {string} starts again, not waited for")]
async fn relaunch_unready(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let h = w.host_mut(&host)?;
    h.gateway.kill().await;
    h.gateway.launch_unready()?;
    forget_sessions(w, &host);
    Ok(())
}

#[then(expr = "the gateway on {string} is ready within {int} seconds")]
async fn gateway_ready(w: &mut FleetWorld, host: String, secs: u64) -> anyhow::Result<()> {
    Ok(w.host_mut(&host)?.gateway.wait_ready(Duration::from_secs(secs)).await?)
}
