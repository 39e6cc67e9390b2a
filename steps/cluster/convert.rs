//! The conversion of a single-node fleet's classic inbox to a quorum inbox (SPEC §16 CLU-7): the
//! seeded classic inbox, the quorum gateway that meets it, the conversion command run, killed and
//! run again, and what the main drains afterwards.
//!
//! Split out of the cluster steps (by what they drive) to keep each file short; the kills at the
//! conversion's later points are in [`super::convert_interrupted`].

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::envelope::{Envelope, new_uuid};
use fleet_conformance::legacy::{LegacyBroker, v2_inbox_arguments};
use fleet_conformance::names::inbox;
use fleet_conformance::probe::Crafted;
use fleet_conformance::timing::{hold_for, scaled};
use lapin::options::QueueDeclareOptions;
use serde_json::Value;

use super::{Seeded, url_list};
use crate::world::FleetWorld;

#[given(
    regex = r#"^the broker holds a classic inbox of a main "([^"]+)" with (\d+) replies from "([^"]+)", signed by host "([^"]+)"$"#
)]
async fn seed_classic_inbox(
    w: &mut FleetWorld,
    name: String,
    n: usize,
    from: String,
    host: String,
) -> anyhow::Result<()> {
    let gid = new_uuid();
    let from_gid = w.gid(&from)?;
    let key = w
        .keys
        .get(&host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host:?}"))?;
    let queue = inbox(&gid);
    let vhost = w.vhost().await?;
    let url = w.suite()?.broker.amqp_url(&vhost);
    // As a single-node fleet's gateway left it: classic, durable, the §1 arguments.
    let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.queue_declare(
        queue.as_str().into(),
        QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        },
        v2_inbox_arguments(),
    )
    .await
    .with_context(|| format!("declaring the classic inbox {queue}"))?;
    let _ = conn.close(200, "seeded".into()).await;
    let probe = w.probe().await?;
    let mut ids = Vec::with_capacity(n);
    for i in 1..=n {
        let body = format!("classic {i} of {n}").into_bytes();
        let env = Envelope::new("REPLY", &from_gid, &gid, &host).signed_by(&key, &body);
        ids.push(env.msg_id().to_string());
        let mut msg = Crafted::from_envelope("", &queue, &env, &body);
        msg.properties = msg.properties.with_delivery_mode(2);
        probe
            .publish(&msg)
            .await
            .with_context(|| format!("publishing reply {i}"))?;
    }
    w.cluster.seeded = Some(Seeded { name, gid, from, ids });
    Ok(())
}

#[when(regex = r#"^host "([^"]+)" runs a gateway and registers the main "([^"]+)" on it$"#)]
async fn register_on_classic(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let gid = match &w.cluster.seeded {
        Some(s) if s.name == name => s.gid.clone(),
        _ => bail!("no seeded inbox for {name:?}"),
    };
    w.start_host(&host).await?;
    let h = w.host(&host)?;
    let pane = h
        .herdr
        .add_agent_pane("claude-main", fleet_conformance::herdr::AgentStatus::Idle);
    match h.gateway.register("main", &pane, &[], None, Some(&gid)).await {
        Ok((gid, token)) => {
            w.adopt_entity(&name, &host, &gid, &token, &pane);
        }
        Err(e) => {
            // How a gateway reports the entity it cannot serve is its own (CLU-7 asks: not
            // ready, conversion named); the registration is made again once the inbox is quorum.
            println!("reference behaviour (not judged): registering {name} on {host} answered: {e}");
            w.cluster.pending_registration = Some((host, name, pane));
        }
    }
    Ok(())
}

#[then(
    regex = r#"^the gateway on "([^"]+)" stays alive and not ready over a window, and logs at ERROR naming the inbox of "([^"]+)"$"#
)]
async fn alive_not_ready(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let gid = match &w.cluster.seeded {
        Some(s) if s.name == name => s.gid.clone(),
        _ => w.gid(&name)?,
    };
    let gw = &w.host(&host)?.gateway;
    let entity = name.clone();
    // A crash loop shows as an exit (the suite never restarts it) or as /readyz flapping to 200.
    hold_for(
        &format!("CLU-7: the gateway on {host} alive and not ready"),
        w.heartbeat() * 3,
        || {
            let name = entity.clone();
            async move {
                if gw.pid().is_none() {
                    return Err("the gateway exited".to_string());
                }
                match gw.get("/readyz").await {
                    Ok((200, body)) => Err(format!("/readyz answered 200 while {name}'s inbox is classic: {body}")),
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!("the local API stopped answering: {e}")),
                }
            }
        },
    )
    .await?;
    let log = gw.log();
    let names = [gid.clone(), inbox(&gid)];
    let line = fleet_conformance::contract::con2_refusal(&log, &names).ok_or_else(|| {
        anyhow!("CLU-7: the gateway on {host} logged no ERROR line naming {gid} or its inbox (CONTRACT §11)")
    })?;
    println!("reference behaviour (not judged): the gateway on {host} said: {line}");
    Ok(())
}

/// The conversion command (CONTRACT §11): `FLEET_CONVERT_CMD`, else the repository's
/// `scripts/convert-inboxes`, run with the queue names as arguments and `FLEET_AMQP_URL` set to
/// every node's URL for the scenario's vhost.
pub(super) async fn conversion(w: &mut FleetWorld, name: &str) -> anyhow::Result<(tokio::process::Command, String)> {
    let gid = match &w.cluster.seeded {
        Some(s) if s.name == name => s.gid.clone(),
        _ => w.gid(name)?,
    };
    let queue = inbox(&gid);
    let vhost = w.vhost().await?;
    let urls = url_list(&w.suite()?.broker, &vhost, None, 0);
    let cmd = std::env::var("FLEET_CONVERT_CMD")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .unwrap_or_else(|| {
            crate::suite_root()
                .join("scripts")
                .join("convert-inboxes")
                .display()
                .to_string()
        });
    let mut c = tokio::process::Command::new("sh");
    c.arg("-c")
        .arg(format!("exec {cmd} \"$@\""))
        .arg("sh")
        .arg(&queue)
        .env("FLEET_AMQP_URL", urls)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .process_group(0);
    if fleet_conformance::conformance::selection::reference_under_test() {
        // The reference's converter is the gateway binary the run built.
        c.env("FLEET_GATEWAY_BIN", &w.suite()?.gateway_cmd);
    }
    Ok((c, queue))
}

#[when(
    regex = r#"^the conversion of the inbox of "([^"]+)" is killed with SIGKILL once messages have left the inbox$"#
)]
async fn conversion_killed(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (mut cmd, queue) = conversion(w, &name).await?;
    let vhost = w.vhost().await?;
    let watch = LegacyBroker::connect(&w.suite()?.broker.amqp_url(&vhost)).await?;
    let before = watch
        .queue_state(&queue)
        .await?
        .ok_or_else(|| anyhow!("{queue} does not exist"))?
        .messages;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting the conversion")?;
    let pgid = child.id().ok_or_else(|| anyhow!("the conversion exited at once"))? as i32;
    let deadline = Instant::now() + scaled(Duration::from_secs(60));
    loop {
        let state = watch.queue_state(&queue).await?;
        let moved = match state {
            Some(s) => s.messages < before,
            None => true,
        };
        if moved {
            // SAFETY: kill(2) on the conversion's own process group, made by `process_group(0)`.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
            let _ = child.wait().await;
            println!("the conversion was killed with {state:?} left of {before} in {queue}");
            break;
        }
        if let Some(status) = child.try_wait()? {
            let out = child.wait_with_output().await?;
            bail!(
                "the conversion ended ({status}) before a message had left {queue}; it could not be killed halfway: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        ensure!(
            Instant::now() < deadline,
            "no message left {queue} within 60 s of the conversion's start"
        );
    }
    watch.close().await;
    Ok(())
}

#[when(regex = r#"^the conversion of the inbox of "([^"]+)" runs (?:again to the end|once more)$"#)]
async fn conversion_runs(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (mut cmd, queue) = conversion(w, &name).await?;
    let bound = scaled(Duration::from_secs(120));
    let out = tokio::time::timeout(bound, cmd.output())
        .await
        .map_err(|_| anyhow!("the conversion of {queue} did not end within {bound:?}"))?
        .context("running the conversion")?;
    ensure!(
        out.status.success(),
        "CLU-7: the conversion of {queue} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "the conversion of {queue} said: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(())
}

#[then(
    regex = r#"^"([^"]+)" drains the (\d+) replies from "([^"]+)" in the order sent, each exactly once, within (\d+) seconds$"#
)]
async fn drains_in_order(w: &mut FleetWorld, main: String, n: usize, from: String, secs: u64) -> anyhow::Result<()> {
    if let Some((host, name, pane)) = w.cluster.pending_registration.take() {
        let gid = w
            .cluster
            .seeded
            .as_ref()
            .map(|s| s.gid.clone())
            .ok_or_else(|| anyhow!("no seeded inbox"))?;
        let (gid, token) = w
            .host(&host)?
            .gateway
            .register("main", &pane, &[], None, Some(&gid))
            .await
            .with_context(|| format!("registering {name} on {host} once its inbox is quorum"))?;
        w.adopt_entity(&name, &host, &gid, &token, &pane);
    }
    let seeded = w.cluster.seeded.as_ref().ok_or_else(|| anyhow!("no seeded inbox"))?;
    ensure!(
        seeded.name == main && seeded.from == from,
        "the seeded inbox is {}'s from {}",
        seeded.name,
        seeded.from
    );
    let ids = seeded.ids.clone();
    ensure!(ids.len() == n, "{} replies were seeded, not {n}", ids.len());
    let enough = move |got: &[Value]| got.len() >= n;
    let mut got = crate::broker_restart::drain_until(w, &main, Some(&from), Duration::from_secs(secs), enough).await?;
    got.extend(crate::broker_restart::drain_until(w, &main, Some(&from), w.heartbeat() * 2, |_| false).await?);
    let drained: Vec<String> = got
        .iter()
        .map(|m| m["msgId"].as_str().unwrap_or_default().to_string())
        .collect();
    once_in_order(&ids, &drained, &format!("what {main} drained from {from}"))
}

/// CLU-7's verdict on what a conversion left: `got` (msgIds in the order read from `place`) holds
/// every one of `ids` exactly once, in the order they were published. One judgement for both
/// readings of it — the main's drain after a clean run, the inbox itself after an interrupted one.
pub(super) fn once_in_order(ids: &[String], got: &[String], place: &str) -> anyhow::Result<()> {
    let n = ids.len();
    let distinct: BTreeSet<&String> = got.iter().collect();
    ensure!(
        distinct.len() == got.len(),
        "CLU-7: {place} holds {} messages, {} distinct: the conversion doubled {}",
        got.len(),
        distinct.len(),
        got.len() - distinct.len()
    );
    let missing: Vec<&String> = ids.iter().filter(|id| !distinct.contains(id)).collect();
    ensure!(
        missing.is_empty(),
        "CLU-7: {} of {n} replies are not in {place}: lost in the conversion (first: {:?})",
        missing.len(),
        missing.first()
    );
    ensure!(
        got.len() == n,
        "CLU-7: {place} holds {} messages, {n} expected",
        got.len()
    );
    if let Some(i) = (0..n).find(|&i| got[i] != ids[i]) {
        bail!(
            "CLU-7: the conversion changed the order: message {} in {place} is the reply published as {}",
            i + 1,
            ids.iter().position(|id| *id == got[i]).map_or(0, |p| p + 1)
        );
    }
    Ok(())
}
