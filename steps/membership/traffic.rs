//! Briefs and replies flowing while a membership file changes, and what became of them.
//!
//! Why: MEM-1 ("nothing in flight is lost, or acted on twice, across a reload") and MEM-3 ("a
//! rotation while briefs and replies flow loses, rejects and duplicates nothing") are judged on
//! real traffic: a main sends a worker one brief after another (each must be injected once and
//! answered `injected`), the worker replies to each (each reply drained by the main once), the
//! main drains as it goes, and no message of either host is dead-lettered. Where a host loses its
//! key (MEM-4) the judgement is narrower: nothing duplicated, and nothing the host published after
//! its key stopped verifying reached the main.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::mcp::McpHandle;
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, scaled, wait_for};
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::world::FleetWorld;

use super::state::{Round, Traffic};
use super::{TWO_SECONDS, last_change};
use fleet_conformance::reaction::MARGIN;

/// The pace of the traffic: one round (a brief and a reply) at most this often.
const PACE: Duration = Duration::from_millis(100);

#[when(expr = "{string} sends briefs to {string}, which replies to each, in the background")]
async fn start(w: &mut FleetWorld, main: String, worker: String) -> anyhow::Result<()> {
    let to = w.gid(&worker)?;
    let lead: McpHandle = w.mcp(&main).await?.handle();
    let replier: McpHandle = w.mcp(&worker).await?.handle();
    let rounds = Arc::new(AtomicUsize::new(0));
    let (stop, mut stopped) = watch::channel(false);
    let tag: String = uuid::Uuid::new_v4().simple().to_string().chars().take(8).collect();
    let task = {
        let (lead, rounds) = (lead.clone(), rounds.clone());
        tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0.. {
                if *stopped.borrow() {
                    break;
                }
                let brief = format!("membership brief #{i} {tag}");
                let sent = lead
                    .call("bridge_send", json!({"to": to, "text": brief, "wait_reply": false}))
                    .await
                    .map_err(|e| e.to_string());
                let replied = replier
                    .call("bridge_reply", json!({"text": format!("membership reply #{i} {tag}")}))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|v| v["msgId"].as_str().map(str::to_string).ok_or_else(|| v.to_string()));
                out.push(Round { brief, sent, replied });
                rounds.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    _ = tokio::time::sleep(PACE) => {}
                    _ = stopped.changed() => {}
                }
            }
            out
        })
    };
    // The main drains as it goes, as a real main does (RPL-5: a main that never drains stops
    // hearing of its own sends).
    let drained = Arc::new(Mutex::new(Vec::new()));
    let (drain_stop, mut drain_stopped) = watch::channel(false);
    let drainer = {
        let drained = drained.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(v) = lead.call("bridge_poll", json!({"max": 200})).await
                    && let Ok(msgs) = fleet_conformance::contract::poll_messages(&v)
                    && let Ok(mut d) = drained.lock()
                {
                    d.extend(msgs);
                }
                if *drain_stopped.borrow() {
                    break;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(150)) => {}
                    _ = drain_stopped.changed() => {}
                }
            }
        })
    };
    w.membership.traffic = Some(Traffic {
        main,
        worker,
        rounds,
        stop,
        task: Some(task),
        done: None,
        drained,
        drain_stop,
        drainer: Some(drainer),
    });
    // The traffic flows before anything changes.
    wait_rounds(w, 2).await
}

fn traffic(w: &FleetWorld) -> anyhow::Result<&Traffic> {
    w.membership
        .traffic
        .as_ref()
        .ok_or_else(|| anyhow!("no traffic runs in this scenario"))
}

/// Waits until the traffic has made `n` rounds in all.
async fn wait_rounds(w: &FleetWorld, n: usize) -> anyhow::Result<()> {
    let t = traffic(w)?;
    wait_for(
        &format!("{n} rounds of briefs and replies"),
        Duration::from_secs(30),
        || {
            let done = t.rounds();
            async move {
                if done >= n {
                    Ok(Some(()))
                } else {
                    Err(format!("{done} rounds"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// Stops the loop, waiting for the round in flight for at most the inject bound and a margin;
/// a round that does not end by then is aborted (and counts as unfinished).
async fn stop(w: &mut FleetWorld) -> anyhow::Result<()> {
    let bound = scaled(w.inject_bound() + Duration::from_secs(5));
    let t = w
        .membership
        .traffic
        .as_mut()
        .ok_or_else(|| anyhow!("no traffic runs in this scenario"))?;
    let _ = t.stop.send(true);
    if let Some(mut task) = t.task.take() {
        match tokio::time::timeout(bound, &mut task).await {
            Ok(rounds) => t.done = Some(rounds?),
            Err(_) => {
                task.abort();
                t.done = Some(Vec::new());
                anyhow::bail!("the traffic's round in flight did not end within {bound:?}");
            }
        }
    }
    Ok(())
}

#[when("the traffic stops")]
async fn stops(w: &mut FleetWorld) -> anyhow::Result<()> {
    stop(w).await
}

/// The traffic goes on across the last change for `n` more rounds, then stops.
#[when(regex = r#"^the traffic has made (\d+) more round trips and stops$"#)]
async fn more_rounds_then_stop(w: &mut FleetWorld, n: usize) -> anyhow::Result<()> {
    let from = last_change(w)?.rounds.max(traffic(w)?.rounds());
    wait_rounds(w, from + n).await?;
    stop(w).await
}

/// The msgId of each message the main drained, with how often.
fn drained_ids(t: &Traffic) -> BTreeMap<String, usize> {
    let mut ids = BTreeMap::new();
    for m in t.drained.lock().map(|d| d.clone()).unwrap_or_default() {
        if let Some(id) = m["msgId"].as_str() {
            *ids.entry(id.to_string()).or_default() += 1;
        }
    }
    ids
}

/// Dead letters of messages the given hosts' gateways published (not what the probe signed in
/// their name).
async fn dead_letters_of(w: &FleetWorld, hosts: &[String]) -> anyhow::Result<Vec<String>> {
    let dlx = w.wire.dlx_tap()?;
    Ok(dlx
        .fetch()
        .await?
        .iter()
        .filter(|c| c.header_str("host").is_some_and(|h| hosts.contains(&h)))
        .filter(|c| !c.message_id().is_some_and(|id| w.membership.probe_sent.contains(&id)))
        .map(|c| {
            format!(
                "{} {} from host {:?} (dead-lettered from {:?})",
                c.header_str("kind").unwrap_or_default(),
                c.message_id().unwrap_or_default(),
                c.header_str("host"),
                c.death_queue()
            )
        })
        .collect())
}

/// How often the worker's pane was handed each brief.
fn injects(w: &FleetWorld, t: &Traffic) -> anyhow::Result<BTreeMap<String, usize>> {
    let e = w.entity(&t.worker)?;
    let mut n = BTreeMap::new();
    for text in w.host(&e.host)?.herdr.inputs(&e.pane) {
        *n.entry(text).or_default() += 1;
    }
    Ok(n)
}

#[then("the traffic lost nothing, and nothing was rejected or duplicated")]
async fn nothing_lost(w: &mut FleetWorld) -> anyhow::Result<()> {
    let t = traffic(w)?;
    let rounds = t.done.clone().ok_or_else(|| anyhow!("the traffic has not stopped"))?;
    ensure!(rounds.len() >= 3, "only {} rounds of traffic ran", rounds.len());
    for r in &rounds {
        match &r.sent {
            Ok(v) if v["status"] == "injected" => {}
            other => anyhow::bail!(
                "the brief {:?} was not injected: bridge_send answered {other:?}",
                r.brief
            ),
        }
        if let Err(e) = &r.replied {
            anyhow::bail!("a reply after {:?} failed: {e}", r.brief);
        }
    }
    let seen = injects(w, t)?;
    for r in &rounds {
        let n = seen.get(&r.brief).copied().unwrap_or(0);
        ensure!(n == 1, "the brief {:?} was handed to the worker {n} times", r.brief);
    }
    // Every reply drained by the main, once.
    let replies: Vec<String> = rounds.iter().filter_map(|r| r.replied.clone().ok()).collect();
    let replies = &replies;
    wait_for(
        &format!("{} to drain every reply", t.main),
        Duration::from_secs(10),
        || {
            let ids = drained_ids(t);
            async move {
                let missing = replies.iter().filter(|id| !ids.contains_key(*id)).count();
                if missing == 0 {
                    Ok(Some(()))
                } else {
                    Err(format!("{missing} of {} replies not drained yet", replies.len()))
                }
            }
        },
    )
    .await?;
    let ids = drained_ids(t);
    let twice: Vec<_> = ids.iter().filter(|(_, n)| **n > 1).collect();
    ensure!(twice.is_empty(), "{} drained these more than once: {twice:?}", t.main);
    let failed: Vec<Value> = t
        .drained
        .lock()
        .map(|d| d.iter().filter(|m| m["kind"] == "FAILED").cloned().collect())
        .unwrap_or_default();
    ensure!(failed.is_empty(), "{} was handed FAILED notices: {failed:?}", t.main);
    // Nothing either host published was rejected, over a window.
    let hosts = vec![w.entity(&t.main)?.host.clone(), w.entity(&t.worker)?.host.clone()];
    let (hosts, w2) = (&hosts, &*w);
    hold_for(
        "no message of the traffic's hosts dead-lettered",
        ABSENCE_WINDOW,
        || async move {
            match dead_letters_of(w2, hosts).await {
                Ok(d) if d.is_empty() => Ok(()),
                Ok(d) => Err(format!("dead-lettered: {d:?}")),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await?;
    finish(w).await;
    Ok(())
}

/// MEM-4: the host of `worker` lost its key at the last change. Nothing was duplicated, and the
/// main got nothing that host published more than 2 s after the change.
#[then(
    regex = r#"^the traffic duplicated nothing, and "([^"]+)" got nothing "([^"]+)" published more than 2 seconds after the change$"#
)]
async fn nothing_after(w: &mut FleetWorld, main: String, host: String) -> anyhow::Result<()> {
    // As written, not stretched (CONTRACT §7): a message's `ts` is stamped before any receiver
    // takes it, so one taken with a later `ts` was taken more than 2 s (and the margin) after the
    // change, however slow the machine.
    let cutoff = last_change(w)?.unix_ms + (TWO_SECONDS + MARGIN).as_millis() as u64;
    let t = traffic(w)?;
    ensure!(t.main == main, "the traffic's main is {}, not {main}", t.main);
    let seen = injects(w, t)?;
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    ensure!(
        twice.is_empty(),
        "briefs handed to the worker more than once: {twice:?}"
    );
    let msgs = w.wire.msgs_tap()?;
    let (host, main) = (&host, &main);
    hold_for(
        &format!("{main} drains nothing {host} published after the cutoff"),
        ABSENCE_WINDOW,
        || {
            let msgs = msgs.clone();
            async move {
                let ids = drained_ids(t);
                if let Some((id, _)) = ids.iter().find(|(_, n)| **n > 1) {
                    return Err(format!("{main} drained {id} more than once"));
                }
                let late: Vec<String> = msgs
                    .fetch()
                    .await
                    .map_err(|e| e.to_string())?
                    .iter()
                    .filter_map(|c| Envelope::from_field_table(&c.headers()).ok())
                    .filter(|e| e.value("host") == host.as_str())
                    .filter(|e| e.value("ts").parse::<u64>().is_ok_and(|ts| ts > cutoff))
                    .filter(|e| ids.contains_key(e.msg_id()))
                    .map(|e| format!("{} {} ts {}", e.kind(), e.msg_id(), e.value("ts")))
                    .collect();
                if late.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "{main} drained what {host} published after its key stopped verifying: {late:?}"
                    ))
                }
            }
        },
    )
    .await?;
    finish(w).await;
    Ok(())
}

/// The drainer stops with the judgement, and is waited for: it ends once the poll it has in
/// flight returns, so a message the scenario publishes afterwards (a valid message it then
/// drains itself) can never be taken by the traffic's drainer.
async fn finish(w: &mut FleetWorld) {
    if let Some(t) = w.membership.traffic.as_mut() {
        let _ = t.drain_stop.send(true);
        if let Some(drainer) = t.drainer.take() {
            let bound = fleet_conformance::timing::scaled(Duration::from_secs(30));
            if tokio::time::timeout(bound, drainer).await.is_err() {
                tracing::warn!("the traffic's drainer did not end within {bound:?} of its stop");
            }
        }
    }
}

/// MEM-3: the message the probe signed with a host's old key after its rotation verifies: the
/// main drains it (through the traffic's drains), once.
#[then(expr = "{string} drains the message signed with the old key, once")]
async fn drains_in_flight(w: &mut FleetWorld, main: String) -> anyhow::Result<()> {
    let id = w
        .membership
        .in_flight
        .clone()
        .ok_or_else(|| anyhow!("the probe signed nothing with an old key"))?;
    let t = traffic(w)?;
    ensure!(t.main == main, "the traffic's main is {}, not {main}", t.main);
    let id = &id;
    wait_for(
        &format!("{main} to drain {id}, signed with the old key"),
        Duration::from_secs(10),
        || {
            let n = drained_ids(t).get(id).copied().unwrap_or(0);
            async move {
                if n > 0 {
                    Ok(Some(n))
                } else {
                    Err("not drained".to_string())
                }
            }
        },
    )
    .await?;
    hold_for(&format!("{main} drains {id} once"), ABSENCE_WINDOW, || {
        let n = drained_ids(t).get(id).copied().unwrap_or(0);
        async move {
            if n == 1 {
                Ok(())
            } else {
                Err(format!("drained {n} times"))
            }
        }
    })
    .await?;
    Ok(())
}
