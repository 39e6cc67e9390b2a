//! Steps of spawn and stop (SPEC §9): a main launches a worker on another host.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::herdr::AgentStatus;
use fleet_conformance::timing::wait_for;
use serde_json::json;

use crate::world::FleetWorld;

#[when(regex = r#"^"([^"]+)" spawns an? "([^"]+)" worker "([^"]+)" on "([^"]+)" with brief "([^"]*)"$"#)]
async fn spawns(
    w: &mut FleetWorld,
    main: String,
    profile: String,
    name: String,
    host: String,
    brief: String,
) -> anyhow::Result<()> {
    let args = json!({"host": host, "profile": profile, "brief": brief, "groups": []});
    w.notes.spawn_args.insert(
        name.clone(),
        crate::world::SpawnArgs {
            main: main.clone(),
            host: host.clone(),
            profile: profile.clone(),
            brief: brief.clone(),
        },
    );
    w.call_in_background(&format!("spawn:{name}"), &main, "bridge_spawn", args)
        .await
}

#[when(regex = r#"^the spawn of "([^"]+)" returns "([a-z_]+)"(?: with reason "([a-z_]+)")? within (\d+) seconds$"#)]
#[then(regex = r#"^the spawn of "([^"]+)" returns "([a-z_]+)"(?: with reason "([a-z_]+)")? within (\d+) seconds$"#)]
async fn spawn_returns(
    w: &mut FleetWorld,
    name: String,
    status: String,
    reason: String,
    secs: u64,
) -> anyhow::Result<()> {
    let v = w
        .call_result(&format!("spawn:{name}"), Duration::from_secs(secs))
        .await?;
    ensure!(
        v["status"] == json!(status),
        "bridge_spawn returned {v}, expected {status:?}"
    );
    if !reason.is_empty() {
        ensure!(
            v["reason"] == json!(reason),
            "bridge_spawn returned {v}, expected reason {reason:?}"
        );
    }
    Ok(())
}

#[when(
    regex = r#"^herdr on "([^"]+)" shows one new pane for "([^"]+)" with the FLEET_\* env and the command "([^"]*)"$"#
)]
#[then(
    regex = r#"^herdr on "([^"]+)" shows one new pane for "([^"]+)" with the FLEET_\* env and the command "([^"]*)"$"#
)]
async fn new_pane(w: &mut FleetWorld, host: String, name: String, command: String) -> anyhow::Result<()> {
    let v = w
        .results
        .get(&format!("spawn:{name}"))
        .cloned()
        .ok_or_else(|| anyhow!("the spawn of {name} has not returned"))?;
    let gid = v["gid"].as_str().ok_or_else(|| anyhow!("no gid in {v}"))?.to_string();
    adopt_pane(w, &host, &name, &gid, &command)
}

/// SPN-4 on herdr: exactly one pane was created for `gid`, with the FLEET_* env pointing at its
/// gateway and the profile's command as its first input; it becomes entity `name`.
fn adopt_pane(w: &mut FleetWorld, host: &str, name: &str, gid: &str, command: &str) -> anyhow::Result<()> {
    let h = w.host(host)?;
    let panes: Vec<_> = h
        .herdr
        .created_panes()
        .into_iter()
        .filter(|p| p.env.get("FLEET_GID").map(String::as_str) == Some(gid))
        .collect();
    ensure!(
        panes.len() == 1,
        "expected one pane with FLEET_GID={gid}, herdr created {}",
        panes.len()
    );
    let p = &panes[0];
    let url = p.env.get("FLEET_MCP_URL").cloned().unwrap_or_default();
    ensure!(
        url == h.gateway.mcp_url(),
        "FLEET_MCP_URL is {url:?}, the gateway serves {}",
        h.gateway.mcp_url()
    );
    let token = p
        .env
        .get("FLEET_MCP_TOKEN")
        .cloned()
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow!("no FLEET_MCP_TOKEN"))?;
    // The pane's shell runs the command the gateway typed (the fake records it as run in the
    // shell: no agent read it).
    let inputs = h.herdr.ran_in_shell(&p.pane_id);
    ensure!(
        inputs.first().map(String::as_str) == Some(command),
        "the pane's shell first ran {inputs:?}, expected the command {command:?}"
    );
    let pane = p.pane_id.clone();
    w.adopt_entity(name, host, gid, &token, &pane);
    Ok(())
}

#[when(expr = "the spawned agent {string} becomes idle")]
async fn spawned_idle(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let e = w.entity(&name)?;
    let (host, pane) = (e.host.clone(), e.pane.clone());
    w.host(&host)?.herdr.make_agent(&pane, "claude", AgentStatus::Idle);
    Ok(())
}

#[then(expr = "the spawned worker {string} answers MCP as itself")]
async fn spawned_mcp(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let v = w.mcp(&name).await?.call("bridge_roster", json!({})).await?;
    fleet_conformance::contract::roster_entries("bridge_roster", &v)?;
    Ok(())
}

#[then(regex = r#"^"([^"]+)" drains an? (INJECTED|FAILED) notice for the spawn of "([^"]+)" within (\d+) seconds$"#)]
async fn spawn_notice(w: &mut FleetWorld, main: String, kind: String, name: String, secs: u64) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let handle = w.mcp(&main).await?.handle();
    wait_for(
        &format!("an {kind} notice from {name}"),
        Duration::from_secs(secs),
        || {
            let (handle, gid, kind) = (handle.clone(), gid.clone(), kind.clone());
            async move {
                let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
                let hit = fleet_conformance::contract::poll_messages(&v)
                    .map_err(|e| e.to_string())?
                    .iter()
                    .any(|m| m["kind"] == kind.as_str() && m["from"] == gid.as_str());
                if hit { Ok(Some(())) } else { Err(format!("polled {v}")) }
            }
        },
    )
    .await?;
    Ok(())
}

#[when(expr = "{string} stops {string}")]
async fn stops(w: &mut FleetWorld, main: String, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let v = w.mcp(&main).await?.call("bridge_stop", json!({"gid": gid})).await?;
    ensure!(v["status"] == "stopped", "bridge_stop returned {v}");
    Ok(())
}

#[then(expr = "herdr on {string} created no pane")]
async fn no_pane(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let herdr = &w.host(&host)?.herdr;
    fleet_conformance::timing::hold_for(
        &format!("no pane created on {host}"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let n = herdr.created_panes().len();
            async move {
                if n == 0 {
                    Ok(())
                } else {
                    Err(format!("{n} pane(s) created"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[when(expr = "the SPAWN of {string} is delivered again with a fresh msgId")]
async fn spawn_again(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    use fleet_conformance::envelope::{Envelope, now_ms};
    let args = w
        .notes
        .spawn_args
        .get(&name)
        .cloned()
        .ok_or_else(|| anyhow!("no spawn of {name}"))?;
    let gid = w.gid(&name)?;
    let (main, host) = (args.main.clone(), args.host.clone());
    let main_host = w.entity(&main)?.host.clone();
    let key = w
        .keys
        .get(&main_host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for {main_host}"))?;
    let body = serde_json::to_vec(
        &json!({"profile": args.profile, "brief": args.brief, "groups": [], "parent": w.gid(&main)?}),
    )?;
    let mut env = Envelope::new("SPAWN", &w.gid(&main)?, &host, &main_host);
    env.set("spawnId", &gid)
        .set("expiresAt", &(now_ms() + 60_000).to_string());
    let env = env.signed_by(&key, &body);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let control = format!("control.{host}");
    let before = suite
        .broker
        .management()
        .queue(&vhost, &control)
        .await?
        .map(|q| q.acked_total)
        .unwrap_or(0);
    let msg = fleet_conformance::probe::Crafted::from_envelope("bridge.control", &host, &env, &body);
    w.probe().await?.publish(&msg).await?;
    // Acted on once its control queue shows one more ack (SPN-2 acks only after acting).
    wait_for("the duplicate SPAWN to be acked", Duration::from_secs(10), || {
        let (suite, vhost, control) = (suite.clone(), vhost.clone(), control.clone());
        async move {
            match suite.broker.management().queue(&vhost, &control).await {
                Ok(Some(q)) if q.acked_total > before && q.messages_ready == 0 && q.messages_unacknowledged == 0 => {
                    Ok(Some(()))
                }
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await?;
    Ok(())
}

#[then(expr = "herdr on {string} still shows exactly one pane for {string}")]
async fn one_pane(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let n = w
        .host(&host)?
        .herdr
        .created_panes()
        .into_iter()
        .filter(|p| p.env.get("FLEET_GID") == Some(&gid))
        .count();
    ensure!(n == 1, "herdr on {host} shows {n} panes for {name}");
    Ok(())
}

// ---- [C-17]: a SPAWN or STOP whose body has a field no gateway knows is honoured ----

/// A body field SPEC §2.2 gives no kind: [C-17] says every gateway ignores it.
fn unknown_fields() -> serde_json::Value {
    json!({"futureField": {"nested": [1, 2, 3]}, "x-priority": "high"})
}

/// Publishes `kind` (SPAWN or STOP) to `control.<host>` as `main`'s gateway would: signed with the
/// key of `main`'s host, `from` = `main`. Returns the envelope.
async fn send_control(
    w: &mut FleetWorld,
    kind: &str,
    main: &str,
    host: &str,
    body: &serde_json::Value,
    spawn_id: Option<&str>,
) -> anyhow::Result<fleet_conformance::envelope::Envelope> {
    use fleet_conformance::envelope::{Envelope, now_ms};
    let from = w.gid(main)?;
    let main_host = w.entity(main)?.host.clone();
    let key = w
        .keys
        .get(&main_host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for {main_host}"))?;
    let body = serde_json::to_vec(body)?;
    let mut env = Envelope::new(kind, &from, host, &main_host);
    env.set("expiresAt", &(now_ms() + 60_000).to_string());
    if let Some(id) = spawn_id {
        env.set("spawnId", id);
    }
    let env = env.signed_by(&key, &body);
    let msg = fleet_conformance::probe::Crafted::from_envelope("bridge.control", host, &env, &body);
    w.probe().await?.publish(&msg).await?;
    Ok(env)
}

#[when(
    regex = r#"^"([^"]+)" sends "([^"]+)" a signed SPAWN of an? "([^"]+)" worker "([^"]+)" with brief "([^"]*)" and body fields no gateway knows$"#
)]
async fn spawn_unknown_fields(
    w: &mut FleetWorld,
    main: String,
    host: String,
    profile: String,
    name: String,
    brief: String,
) -> anyhow::Result<()> {
    let spawn_id = fleet_conformance::envelope::new_uuid();
    let mut body = unknown_fields();
    body["profile"] = json!(profile);
    body["brief"] = json!(brief);
    body["groups"] = json!([]);
    body["parent"] = json!(w.gid(&main)?);
    send_control(w, "SPAWN", &main, &host, &body, Some(&spawn_id)).await?;
    w.notes.crafted_spawns.insert(name, spawn_id);
    Ok(())
}

/// SPN-4 for a SPAWN the probe published: its pane appears (the worker's gid is the `spawnId`).
#[then(
    regex = r#"^herdr on "([^"]+)" opens one pane for the SPAWN of "([^"]+)" with the FLEET_\* env and the command "([^"]*)"$"#
)]
async fn crafted_spawn_pane(w: &mut FleetWorld, host: String, name: String, command: String) -> anyhow::Result<()> {
    let gid = w
        .notes
        .crafted_spawns
        .get(&name)
        .cloned()
        .ok_or_else(|| anyhow!("no SPAWN of {name} was sent"))?;
    let herdr = &w.host(&host)?.herdr;
    let gid_ref = &gid;
    // Launched: the pane exists and the gateway has typed its first input (the command) into it — the pane's shell runs it;
    // `adopt_pane` then judges that input, as `new_pane` does after `bridge_spawn` returned.
    wait_for(
        &format!("a pane for the SPAWN of {name}, with its first input"),
        Duration::from_secs(10),
        || {
            let panes: Vec<_> = herdr
                .created_panes()
                .into_iter()
                .filter(|p| p.env.get("FLEET_GID") == Some(gid_ref))
                .collect();
            let typed = panes.iter().any(|p| !herdr.ran_in_shell(&p.pane_id).is_empty());
            let created = herdr.created_panes().len();
            async move {
                match (panes.len(), typed) {
                    (0, _) => Err(format!(
                        "herdr created {created} pane(s), none with FLEET_GID={gid_ref}"
                    )),
                    (_, false) => Err("its pane has no input yet".to_string()),
                    _ => Ok(Some(())),
                }
            }
        },
    )
    .await?;
    adopt_pane(w, &host, &name, &gid, &command)
}

#[when(regex = r#"^"([^"]+)" sends "([^"]+)" a signed STOP of "([^"]+)" with body fields no gateway knows$"#)]
async fn stop_unknown_fields(w: &mut FleetWorld, main: String, host: String, name: String) -> anyhow::Result<()> {
    let mut body = unknown_fields();
    body["gid"] = json!(w.gid(&name)?);
    send_control(w, "STOP", &main, &host, &body, None).await?;
    Ok(())
}
