//! The catalogue steps: the probe publishes a row's hostile message, then the SIG-5 checks on what
//! became of it — dead-lettered with `x-death` reason `rejected`, the failed check logged, a valid
//! message right after it still accepted, nothing hostile injected or held, no FAILED published,
//! no pane opened or closed, and every gateway still ready and listing its entities.

use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use cucumber::{then, when};
use fleet_conformance::envelope::new_uuid;
use fleet_conformance::names::inbox;
use fleet_conformance::probe::{Captured, Crafted};
use fleet_conformance::timing::wait_for;
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::craft::{craft_for_control, craft_for_inbox, craft_for_roster, valid_send};
use super::{FAKE_TTL, Hostile, Target, count_id, key, last_hostile, poll_until, tap, target, until_listed};

#[when(expr = "the probe publishes {string} to {string}")]
async fn publishes_hostile(w: &mut FleetWorld, row: String, to: String) -> anyhow::Result<()> {
    let planned = match target(w, &to)? {
        Target::Inbox { gid, .. } => craft_for_inbox(w, &row, &gid).await?,
        Target::Roster => craft_for_roster(w, &row).await?,
        Target::Control { host } => craft_for_control(w, &row, &host)?,
    };
    let p = w.probe().await?;
    p.publish(&planned.msg)
        .await
        .with_context(|| format!("publishing {row:?}"))?;
    w.wire.hostile_texts.push(planned.text);
    w.wire.hostile_ids.push(planned.marker.clone());
    w.wire.hostile = Some(Hostile { marker: planned.marker });
    Ok(())
}

#[then(expr = "the gateway of {string} dead-letters it with x-death reason {string}")]
async fn dead_lettered(w: &mut FleetWorld, to: String, reason: String) -> anyhow::Result<()> {
    let marker = last_hostile(w)?.marker.clone();
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    for (host, queue) in target(w, &to)?.rejecting(w) {
        let m = dlx
            .wait_for(
                &format!("a dead letter of {marker} from {queue} (gateway {host})"),
                Duration::from_secs(10),
                |c: &Captured| {
                    c.message_id().as_deref() == Some(marker.as_str())
                        && c.death_queue().as_deref() == Some(queue.as_str())
                },
            )
            .await?;
        ensure!(
            m.death_reason().as_deref() == Some(reason.as_str()),
            "the dead letter from {queue} has x-death reason {:?}, expected {reason:?}",
            m.death_reason()
        );
    }
    Ok(())
}

#[then(expr = "the gateway of {string} logs the rejection naming the check {string}")]
async fn logs_check(w: &mut FleetWorld, to: String, check: String) -> anyhow::Result<()> {
    let marker = last_hostile(w)?.marker.clone();
    // "a or b": the message fails several checks whose order SPEC leaves open (SIG-2 orders its
    // own three; SIG-4's ownership and ENV-2's kind checks have no place in that order), so any
    // of them may be the one named (docs/CONTRACT.md, "Rejection log line").
    let names: Vec<String> = check.split(" or ").map(|c| c.trim().to_string()).collect();
    for (host, _) in target(w, &to)?.rejecting(w) {
        let gw = &w.host(&host)?.gateway;
        let marker = marker.as_str();
        let names = &names;
        wait_for(
            &format!("gateway {host} to log the rejection of {marker} naming {check:?}"),
            Duration::from_secs(5),
            || async move {
                let log = gw.log();
                let lines: Vec<&str> = log.lines().filter(|l| l.contains(marker)).collect();
                if lines.iter().any(|l| {
                    names.iter().any(|c| l.contains(c.as_str()))
                        && fleet_conformance::contract::log_line_at(l, fleet_conformance::contract::LogLevel::Warn)
                }) {
                    Ok(Some(()))
                } else {
                    Err(format!("lines naming {marker}: {lines:?}"))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Sends a valid message from fake entity `from` to `to` and waits until it is acted on: injected
/// into a worker, drained from a main, or (for the roster) a fresh presence listed everywhere.
/// Queues are FIFO with one consumer, so this also proves the hostile message before it was
/// handled and did not wedge the consumer.
async fn valid_accepted(w: &mut FleetWorld, from: &str, to: &str) -> anyhow::Result<()> {
    match target(w, to)? {
        Target::Roster => {
            let gid = new_uuid();
            let k = key(w, "probe")?;
            w.probe().await?.announce(&k, &gid, "worker", FAKE_TTL).await?;
            until_listed(w, &gid, "probe").await
        }
        Target::Control { host } => {
            bail!("no valid-message check for the control queue of {host}: a valid SPAWN would launch an agent")
        }
        Target::Inbox { name, gid, host } => {
            let text = format!("valid message {}", new_uuid());
            let (env, body) = valid_send(w, from, &gid, &text)?;
            w.probe()
                .await?
                .publish(&Crafted::from_envelope("bridge.msg", &gid, &env, &body))
                .await?;
            w.wire.valid_texts.push(text.clone());
            w.wire.last_valid = Some(env.clone());
            let e = w.entity(&name)?;
            let worker = w.host(&e.host)?.herdr.agent(&e.pane).is_some_and(|a| a == "claude");
            if worker {
                let pane = e.pane.clone();
                let herdr = &w.host(&host)?.herdr;
                wait_for(
                    &format!("the valid message injected into {name}"),
                    Duration::from_secs(10),
                    || {
                        let inputs = herdr.inputs(&pane);
                        let text = text.clone();
                        async move {
                            if inputs.contains(&text) {
                                Ok(Some(()))
                            } else {
                                Err(format!("inputs: {inputs:?}"))
                            }
                        }
                    },
                )
                .await?;
                Ok(())
            } else {
                let id = env.msg_id().to_string();
                poll_until(w, &name, |m| m["msgId"] == json!(id)).await.map(|_| ())
            }
        }
    }
}

#[then(expr = "a valid message from {string} to {string} is still accepted")]
async fn still_accepted(w: &mut FleetWorld, from: String, to: String) -> anyhow::Result<()> {
    valid_accepted(w, &from, &to).await
}

#[when(expr = "{string} on the probe host sends a valid message to {string}")]
async fn sends_valid(w: &mut FleetWorld, from: String, to: String) -> anyhow::Result<()> {
    valid_accepted(w, &from, &to).await
}

#[then(expr = "nothing hostile was injected into {string} or held for {string}")]
async fn nothing_hostile(w: &mut FleetWorld, worker: String, main: String) -> anyhow::Result<()> {
    // The worker's pane: every text herdr was handed (submitted or not) is a valid one.
    let e = w.entity(&worker)?;
    let log = w.host(&e.host)?.herdr.input_log(&e.pane);
    for r in &log {
        ensure!(
            w.wire.valid_texts.contains(&r.text),
            "herdr was handed {:?} for {worker}: not a valid message of this scenario",
            r.text
        );
        ensure!(
            log.iter().filter(|x| x.text == r.text).count() == 1,
            "herdr was handed {:?} for {worker} more than once",
            r.text
        );
    }
    // The main: nothing hostile was drained so far, nothing is held now, the inbox is empty.
    let handle = w.mcp(&main).await?.handle();
    let v = handle.call("bridge_poll", json!({})).await?;
    let now: Vec<Value> = fleet_conformance::contract::poll_messages(&v)?;
    w.wire.drained.extend(now.clone());
    for id in &w.wire.hostile_ids {
        // A replayed message was legitimately drained once, as the original.
        let allowed = usize::from(w.wire.replayed.contains(id));
        let n = count_id(&w.wire.drained, id);
        ensure!(
            n <= allowed,
            "{main} was handed hostile message {id} {n} time(s): {:?}",
            w.wire.drained
        );
    }
    for m in &w.wire.drained {
        let text = m["text"].as_str().unwrap_or_default();
        ensure!(
            !w.wire.hostile_texts.iter().any(|h| h == text) || w.wire.replayed.iter().any(|r| m["msgId"] == json!(r)),
            "{main} was handed a hostile message: {m}"
        );
    }
    ensure!(
        now.is_empty(),
        "{main} still had messages held after the valid one: {now:?}"
    );
    let gid = w.gid(&main)?;
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let q = inbox(&gid);
    let (suite, vhost, q) = (&suite, &vhost, &q);
    wait_for(&format!("{q} to be empty"), Duration::from_secs(10), || async move {
        match suite.broker.management().queue(vhost, q).await {
            Ok(Some(i)) if i.messages_ready == 0 && i.messages_unacknowledged == 0 => Ok(Some(())),
            Ok(Some(i)) => Err(format!(
                "ready {} unacked {}",
                i.messages_ready, i.messages_unacknowledged
            )),
            Ok(None) => Err(format!("{q} does not exist")),
            Err(e) => Err(e.to_string()),
        }
    })
    .await?;
    Ok(())
}

#[then("no gateway published FAILED")]
async fn no_failed(w: &mut FleetWorld) -> anyhow::Result<()> {
    // Watched over a window: a FAILED could still be on its way at any one instant (SIG-6).
    let t = tap(&w.wire.msgs, "bridge.msg")?;
    let gateways: Vec<&String> = w.hosts.keys().collect();
    let hostile = &w.wire.hostile_ids;
    fleet_conformance::timing::hold_for(
        "no FAILED from a gateway",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (gateways, t) = (&gateways, &t);
            async move {
                let msgs = t.fetch().await.map_err(|e| e.to_string())?;
                let failed: Vec<String> = msgs
                    .iter()
                    .filter(|m| m.header_str("kind").as_deref() == Some("FAILED"))
                    .filter(|m| m.header_str("host").is_some_and(|h| gateways.iter().any(|g| **g == h)))
                    // The probe's own forgeries claim a gateway's host too: they are not the gateway's.
                    .filter(|m| !m.message_id().is_some_and(|id| hostile.contains(&id)))
                    .map(|m| {
                        format!(
                            "FAILED from host {:?} to {}: {}",
                            m.header_str("host"),
                            m.routing_key,
                            String::from_utf8_lossy(&m.body)
                        )
                    })
                    .collect();
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(format!("a gateway published FAILED: {failed:?}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then("every gateway is still ready")]
async fn still_ready(w: &mut FleetWorld) -> anyhow::Result<()> {
    for (name, h) in &w.hosts {
        let (status, v) = h.gateway.get("/readyz").await?;
        ensure!(status == 200, "gateway {name} /readyz answered {status}: {v}");
    }
    Ok(())
}

#[then(expr = "herdr on {string} opened no pane and closed none")]
async fn panes_untouched(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let herdr = &w.host(&host)?.herdr;
    let panes: Vec<(String, String)> = w
        .entities
        .iter()
        .filter(|(_, e)| e.host == host)
        .map(|(n, e)| (n.clone(), e.pane.clone()))
        .collect();
    let before = herdr.created_panes().len();
    fleet_conformance::timing::hold_for(
        &format!("no pane opened or closed on {host}"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let now = herdr.created_panes().len();
            let closed: Vec<&String> = panes
                .iter()
                .filter(|(_, p)| !herdr.pane_exists(p))
                .map(|(n, _)| n)
                .collect();
            async move {
                if now != before {
                    Err(format!("{} pane(s) opened", now - before))
                } else if !closed.is_empty() {
                    Err(format!("the pane(s) of {closed:?} closed"))
                } else {
                    Ok(())
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then(expr = "the roster of every gateway still lists {string} on host {string}")]
async fn still_lists(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    until_listed(w, &gid, &host).await
}
