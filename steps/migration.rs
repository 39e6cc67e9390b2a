//! Steps of the migration from v1.0.0 (SPEC §13: MIG-1..3) and of TOP-5.
//!
//! The stage is a vhost seeded with the v1.0.0 state of `fixtures/legacy/` (`src/legacy.rs`); the
//! gateways are told a worker's v1 pane id at registration (`legacyPaneId`). Everything is judged
//! from outside: legacy queues by passive declare (live counts, not the management API's sampled
//! ones), the main's view by its own MCP drains, the gateway's health by its process, `/readyz` and
//! log. Long queues plus a kill after the first moved messages are observed make the crash window
//! of MIG-3 deterministic without any test hook in the gateway.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::gateway::post_registration;
use fleet_conformance::herdr::AgentStatus;
use fleet_conformance::legacy::{
    LegacyBroker, LegacyQueue, LegacyState, QueueState, legacy_queue_name, v2_inbox_arguments,
};
use fleet_conformance::probe::{Crafted, Published};
use fleet_conformance::timing::{scaled, wait_for};
use serde_json::{Value, json};

use crate::world::FleetWorld;

/// The legacy queue of `pane` as seeded in this scenario: a generated one, else the fixture's.
fn seeded_queue(w: &FleetWorld, pane: &str) -> anyhow::Result<LegacyQueue> {
    if let Some(n) = w.notes.legacy_generated.get(pane) {
        return Ok(LegacyQueue::generated(pane, *n));
    }
    Ok(LegacyState::v1_0_0()?.queue(pane)?.clone())
}

async fn legacy_broker(w: &mut FleetWorld) -> anyhow::Result<LegacyBroker> {
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    Ok(LegacyBroker::connect(&suite.broker.amqp_url(&vhost)).await?)
}

async fn queue_state(w: &mut FleetWorld, pane: &str) -> anyhow::Result<Option<QueueState>> {
    let lb = legacy_broker(w).await?;
    let s = lb.queue_state(&legacy_queue_name(pane)).await;
    lb.close().await;
    Ok(s?)
}

/// Notes the arguments the broker recorded for the seeded queue `queue` (what its plain v1
/// declare looks like on this broker: none on RabbitMQ 3.10, `x-queue-type: classic` on 4.x),
/// before any gateway could touch it. Waits until the management API lists it.
async fn note_seeded_arguments(w: &mut FleetWorld, queue: String) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let (m, vh, q) = (suite.broker.management(), vhost.as_str(), queue.as_str());
    let info = wait_for(
        &format!("the management API to list the seeded {queue}"),
        Duration::from_secs(10),
        || async move {
            match m.queue(vh, q).await {
                Ok(Some(info)) => Ok(Some(info)),
                Ok(None) => Err("not listed yet".to_string()),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await?;
    if !info.arguments.is_empty() && !w.notes.legacy_arguments.values().any(|a| a == &info.arguments) {
        println!(
            "this broker ({}) records the probe's plain declare of {queue} with the arguments {:?}",
            suite.broker.version(),
            info.arguments
        );
    }
    w.notes.legacy_arguments.insert(queue, info.arguments);
    Ok(())
}

#[given("a broker holding the v1.0.0 state of fixtures/legacy")]
async fn broker_with_legacy_state(w: &mut FleetWorld) -> anyhow::Result<()> {
    let state = LegacyState::v1_0_0()?;
    let lb = legacy_broker(w).await?;
    let r = lb.seed_all(&state).await;
    lb.close().await;
    r?;
    for q in &state.queues {
        note_seeded_arguments(w, q.name()).await?;
    }
    Ok(())
}

#[given(expr = "the broker also holds a v1.0.0 legacy queue of pane {string} with {int} replies")]
#[when(expr = "the broker also holds a v1.0.0 legacy queue of pane {string} with {int} replies")]
async fn broker_with_generated_queue(w: &mut FleetWorld, pane: String, n: usize) -> anyhow::Result<()> {
    let q = LegacyQueue::generated(&pane, n);
    let lb = legacy_broker(w).await?;
    let r = lb.seed(&q).await;
    lb.close().await;
    r?;
    w.notes.legacy_generated.insert(pane.clone(), n);
    note_seeded_arguments(w, q.name()).await
}

#[given(expr = "the gateways know the v1 panes {string}")]
async fn gateways_know_panes(w: &mut FleetWorld, panes: String) {
    w.gateway_env.insert("FLEET_LEGACY_PANES".into(), panes);
}

#[given(expr = "gateways started from now on cap inboxes at {int} messages")]
async fn inbox_cap(w: &mut FleetWorld, n: u32) {
    w.gateway_env.insert("FLEET_INBOX_MAX_LENGTH".into(), n.to_string());
}

/// The JSON body of a worker registration that claims a v1 pane.
fn claim_body(pane: &str, parent_gid: &str, legacy_pane: &str, gid: Option<&str>) -> Value {
    let mut body = json!({
        "role": "worker",
        "pane": pane,
        "groups": [],
        "parent": parent_gid,
        "legacyPaneId": legacy_pane,
    });
    if let Some(g) = gid {
        body["gid"] = json!(g);
    }
    body
}

#[given(
    regex = r#"^host "([^"]+)" (?:runs a gateway with|also runs) a worker "([^"]+)" whose parent is "([^"]+)" and who was v1 pane "([^"]+)"$"#
)]
#[when(
    regex = r#"^host "([^"]+)" (?:runs a gateway with|also runs) a worker "([^"]+)" whose parent is "([^"]+)" and who was v1 pane "([^"]+)"$"#
)]
async fn worker_with_claim(
    w: &mut FleetWorld,
    host: String,
    name: String,
    parent: String,
    legacy_pane: String,
) -> anyhow::Result<()> {
    w.start_host(&host).await?;
    let parent_gid = w.gid(&parent)?;
    let h = w.host(&host)?;
    let pane = h.herdr.add_agent_pane("claude", AgentStatus::Idle);
    let body = claim_body(&pane, &parent_gid, &legacy_pane, None);
    let v = post_registration(h.gateway.base_url(), h.gateway.admin_token.clone(), body).await?;
    let (gid, token) = match (v["gid"].as_str(), v["token"].as_str()) {
        (Some(g), Some(t)) => (g.to_string(), t.to_string()),
        _ => bail!("registration answered {v}, expected gid and token"),
    };
    w.adopt_entity(&name, &host, &gid, &token, &pane);
    Ok(())
}

#[when(
    expr = "host {string} starts registering a worker {string} whose parent is {string} and who was v1 pane {string}"
)]
async fn start_registering(
    w: &mut FleetWorld,
    host: String,
    name: String,
    parent: String,
    legacy_pane: String,
) -> anyhow::Result<()> {
    w.start_host(&host).await?;
    let parent_gid = w.gid(&parent)?;
    let gid = uuid::Uuid::new_v4().to_string();
    let h = w.host(&host)?;
    let pane = h.herdr.add_agent_pane("claude", AgentStatus::Idle);
    let body = claim_body(&pane, &parent_gid, &legacy_pane, Some(&gid));
    let task = tokio::spawn(post_registration(
        h.gateway.base_url(),
        h.gateway.admin_token.clone(),
        body,
    ));
    w.calls.insert(format!("register {name}"), task);
    // The token comes with the answer, which a killed gateway never sends; no step needs it.
    w.adopt_entity(&name, &host, &gid, "", &pane);
    Ok(())
}

#[when(expr = "the gateway on {string} is killed with SIGKILL once {int} replies of v1 pane {string} have moved")]
async fn kill_mid_move(w: &mut FleetWorld, host: String, k: u32, pane: String) -> anyhow::Result<()> {
    let total = seeded_queue(w, &pane)?.messages.len() as u32;
    ensure!(total > k + 1, "seed more than {} replies for this step", k + 1);
    let queue = legacy_queue_name(&pane);
    let lb = legacy_broker(w).await?;
    let lbr = &lb;
    let queue_ref = queue.as_str();
    // Ready messages exclude the one the gateway holds unacked, hence `k + 1`.
    let seen = wait_for(
        &format!("{k} replies of {queue} to move"),
        Duration::from_secs(30),
        || async move {
            match lbr.queue_state(queue_ref).await {
                Ok(Some(s)) if total - s.messages > k => Ok(Some(Ok(s))),
                Ok(Some(s)) => Err(format!("{} moved so far", total - s.messages)),
                Ok(None) => Ok(Some(Err(()))),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    lb.close().await;
    w.host_mut(&host)?.gateway.kill().await;
    match seen? {
        Ok(_) => Ok(()),
        Err(()) => Err(anyhow!(
            "{queue} was gone before the kill: the whole move finished first; seed more replies"
        )),
    }
}

/// MIG-3 says the move "completes before the gateway starts consuming the parent's v2 inbox".
/// From outside that order is visible on the broker: while the legacy queue still exists, the
/// parent's inbox has no consumer. This step arms a watch of both queues (by passive declare: live
/// counts, not the management API's sampled ones) once the inbox has no consumer (its gateway is
/// down); the watch runs while the next steps restart the gateway, and ends at the first sample
/// that shows the inbox consumed. Each sample reads the inbox first and the legacy queue after,
/// so a correct gateway (delete, then consume) can never be caught in between.
#[when(expr = "the inbox of {string} and the legacy queue of v1 pane {string} are watched")]
async fn watch_move_order(w: &mut FleetWorld, main: String, pane: String) -> anyhow::Result<()> {
    let inbox_q = fleet_conformance::names::inbox(&w.gid(&main)?);
    let legacy = legacy_queue_name(&pane);
    let lb = legacy_broker(w).await?;
    {
        let (lbr, q) = (&lb, inbox_q.as_str());
        wait_for(
            &format!("{q} to have no consumer (its gateway is down)"),
            Duration::from_secs(10),
            || async move {
                match lbr.queue_state(q).await {
                    Ok(Some(s)) if s.consumers == 0 => Ok(Some(())),
                    Ok(Some(s)) => Err(format!("{s:?}")),
                    Ok(None) => Err(format!("{q} does not exist")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
    }
    let deadline = tokio::time::Instant::now() + scaled(Duration::from_secs(60));
    let task = tokio::spawn(async move {
        let mut samples = 0u64;
        let verdict = loop {
            samples += 1;
            let consumed = lb.queue_state(&inbox_q).await?.is_some_and(|s| s.consumers > 0);
            let left = lb.queue_state(&legacy).await?;
            match (consumed, left) {
                (true, None) => break Ok(samples),
                (true, Some(s)) => {
                    break Err(anyhow!(
                        "MIG-3: {inbox_q} was consumed while {legacy} still existed ({} message(s) left, sample {samples})",
                        s.messages
                    ));
                }
                (false, _) if tokio::time::Instant::now() > deadline => {
                    break Err(anyhow!("{inbox_q} was not consumed again within 60 s (nominal)"));
                }
                // The pace of the samples; the verdict comes from what they show.
                (false, _) => tokio::time::sleep(Duration::from_millis(2)).await,
            }
        };
        lb.close().await;
        verdict
    });
    w.notes.move_watch = Some(task);
    Ok(())
}

#[then(expr = "the inbox of {string} was consumed only once the legacy queue of v1 pane {string} was gone")]
async fn consumed_after_move(w: &mut FleetWorld, main: String, pane: String) -> anyhow::Result<()> {
    let task = w
        .notes
        .move_watch
        .take()
        .ok_or_else(|| anyhow!("the inbox of {main} and the legacy queue of {pane} were not watched"))?;
    let samples = task.await.context("the watch task")??;
    println!("MIG-3: {samples} sample(s) until the inbox of {main} was consumed, with the legacy queue of {pane} gone");
    Ok(())
}

#[then(expr = "the legacy queue of v1 pane {string} still holds replies")]
async fn still_holds_replies(w: &mut FleetWorld, pane: String) -> anyhow::Result<()> {
    match queue_state(w, &pane).await? {
        Some(s) if s.messages > 0 => Ok(()),
        Some(s) => Err(anyhow!(
            "{} is empty: the kill came after the move",
            legacy_queue_name(&pane)
        ))
        .context(format!("{s:?}")),
        None => bail!("{} is gone: the kill came after the move", legacy_queue_name(&pane)),
    }
}

#[then(regex = r#"^the legacy queue of v1 pane "([^"]+)" is gone(?: within (\d+) seconds)?$"#)]
async fn legacy_gone(w: &mut FleetWorld, pane: String, secs: String) -> anyhow::Result<()> {
    let secs = secs.parse().unwrap_or(10);
    let queue = legacy_queue_name(&pane);
    let lb = legacy_broker(w).await?;
    let lbr = &lb;
    let queue_ref = queue.as_str();
    let r = wait_for(
        &format!("{queue} to be deleted"),
        Duration::from_secs(secs),
        || async move {
            match lbr.queue_state(queue_ref).await {
                Ok(None) => Ok(Some(())),
                Ok(Some(s)) => Err(format!("still there: {s:?}")),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    lb.close().await;
    Ok(r?)
}

/// Also: the queue was never deleted and declared anew with other arguments (a redeclare with
/// others is refused by the broker, TOP-5): its arguments are still those the broker recorded for
/// the probe's plain v1 declare when it was seeded (none on RabbitMQ 3.10; 4.x adds
/// `x-queue-type`).
#[then(expr = "the legacy queue of v1 pane {string} still holds {int} messages, no consumer and no arguments")]
async fn legacy_untouched(w: &mut FleetWorld, pane: String, n: u32) -> anyhow::Result<()> {
    let queue = legacy_queue_name(&pane);
    let s = queue_state(w, &pane).await?.ok_or_else(|| anyhow!("{queue} is gone"))?;
    ensure!(
        s == QueueState {
            messages: n,
            consumers: 0
        },
        "{queue}: {s:?}, expected {n} messages and no consumer"
    );
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let info = suite
        .broker
        .management()
        .queue(&vhost, &queue)
        .await?
        .ok_or_else(|| anyhow!("{queue} is unknown to the management API"))?;
    ensure!(info.durable, "{queue} is no longer durable");
    let seeded = w
        .notes
        .legacy_arguments
        .get(&queue)
        .ok_or_else(|| anyhow!("{queue}'s arguments were not noted when it was seeded"))?;
    ensure!(
        &info.arguments == seeded,
        "{queue} was redeclared with arguments: {:?} (when seeded, the broker recorded {:?})",
        info.arguments,
        seeded
    );
    Ok(())
}

#[given(regex = r#"^"([^"]+)" polls messages from "([^"]+)" until (\d+) (?:have|has) arrived within (\d+) seconds$"#)]
#[when(regex = r#"^"([^"]+)" polls messages from "([^"]+)" until (\d+) (?:have|has) arrived within (\d+) seconds$"#)]
async fn polls_until(w: &mut FleetWorld, main: String, from: String, n: usize, secs: u64) -> anyhow::Result<()> {
    let from_gid = w.gid(&from)?;
    let mcp = w.mcp(&main).await?.handle();
    let deadline = tokio::time::Instant::now() + scaled(Duration::from_secs(secs));
    let mut got: Vec<Value> = Vec::new();
    while got.len() < n {
        let v = mcp.call("bridge_poll", json!({"from": from_gid, "max": 100})).await?;
        let batch = fleet_conformance::contract::poll_messages(&v)?;
        if !batch.is_empty() {
            got.extend(batch);
            continue;
        }
        // Nothing held right now: block on the next one instead of polling in a loop.
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            let texts: Vec<&str> = got.iter().filter_map(|m| m["text"].as_str()).collect();
            let tail = texts.len().saturating_sub(3);
            bail!(
                "only {} of {n} messages from {from} arrived in time; first {:?}, last {:?}",
                got.len(),
                &texts[..texts.len().min(3)],
                &texts[tail..]
            );
        }
        let v = mcp
            .call(
                "bridge_wait",
                json!({"from": from_gid, "timeout_s": left.as_secs_f64().max(0.1)}),
            )
            .await?;
        if let fleet_conformance::contract::Waited::Message(m) = fleet_conformance::contract::waited(&v)? {
            got.push(m);
        }
    }
    w.drained = got;
    w.last_poll = Some((main, json!({"from": from_gid})));
    Ok(())
}

#[then(expr = "they are the replies of v1 pane {string} in order, each a REPLY from {string} with its UUIDv5 msgId")]
async fn replies_in_order(w: &mut FleetWorld, pane: String, from: String) -> anyhow::Result<()> {
    let q = seeded_queue(w, &pane)?;
    let from_gid = w.gid(&from)?;
    ensure!(
        w.drained.len() == q.messages.len(),
        "{} messages drained, {} expected",
        w.drained.len(),
        q.messages.len()
    );
    for (i, (got, want)) in w.drained.iter().zip(&q.messages).enumerate() {
        let expected_id = want.expected_msg_id();
        ensure!(
            got["kind"] == json!("REPLY") && got["from"] == json!(from_gid),
            "message {} is not a REPLY from {from}: {got}",
            i + 1
        );
        ensure!(
            got["text"] == json!(want.body),
            "message {} reads {}, expected {:?} (order or body changed)",
            i + 1,
            got["text"],
            want.body
        );
        ensure!(
            got["msgId"] == json!(expected_id),
            "message {} has msgId {}, expected UUIDv5 of {} = {expected_id}",
            i + 1,
            got["msgId"],
            want.message_id
        );
    }
    Ok(())
}

#[given(
    expr = "the inbox of {string} already holds the migrated copy of reply {int} of v1 pane {string} from {string}, signed by host {string}"
)]
#[when(
    expr = "the inbox of {string} already holds the migrated copy of reply {int} of v1 pane {string} from {string}, signed by host {string}"
)]
async fn migrated_copy(
    w: &mut FleetWorld,
    main: String,
    i: usize,
    pane: String,
    from: String,
    host: String,
) -> anyhow::Result<()> {
    let q = seeded_queue(w, &pane)?;
    let m = q
        .messages
        .get(i.saturating_sub(1))
        .ok_or_else(|| anyhow!("v1 pane {pane} has no reply {i}"))?;
    let (to, from_gid) = (w.gid(&main)?, w.gid(&from)?);
    let key = w
        .keys
        .get(&host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host}"))?;
    let id = m.expected_msg_id();
    let body = m.body.as_bytes();
    let env = Envelope::new("REPLY", &from_gid, &to, &host)
        .with("msgId", &id)
        .with("traceId", &id)
        .signed_by(&key, body);
    let r = w
        .probe()
        .await?
        .publish(&Crafted::from_envelope("bridge.msg", &to, &env, body))
        .await;
    match r? {
        Published::Routed => Ok(()),
        other => bail!("the copy was not routed to the inbox of {main}: {other:?}"),
    }
}

#[when(expr = "the probe redeclares the legacy queue of v1 pane {string} with the v2 inbox arguments")]
async fn redeclare_v2(w: &mut FleetWorld, pane: String) -> anyhow::Result<()> {
    let lb = legacy_broker(w).await?;
    let r = lb.redeclare_with(&legacy_queue_name(&pane), v2_inbox_arguments()).await;
    lb.close().await;
    w.notes.redeclare = Some(r?);
    Ok(())
}

#[then("the broker refuses it with 406 PRECONDITION_FAILED")]
async fn refused_406(w: &mut FleetWorld) -> anyhow::Result<()> {
    let answer = w
        .notes
        .redeclare
        .clone()
        .ok_or_else(|| anyhow!("nothing was redeclared"))?;
    ensure!(
        matches!(&answer, Err((406, text)) if text.contains("PRECONDITION_FAILED")),
        "the broker answered {answer:?}, expected 406 PRECONDITION_FAILED"
    );
    Ok(())
}

/// The part of a gateway log written since its last start.
fn since_last_start(log: &str) -> &str {
    log.rfind("===== start #").map_or(log, |i| &log[i..])
}

#[then(regex = r#"^the gateway on "([^"]+)" started (once|(\d+) times), is ready, and logged no PRECONDITION_FAILED$"#)]
async fn started_and_stayed_up(w: &mut FleetWorld, host: String, _how: String, times: String) -> anyhow::Result<()> {
    let expected: usize = times.parse().unwrap_or(1);
    let h = w.host_mut(&host)?;
    let log = h.gateway.log();
    let starts = log.matches("===== start #").count();
    ensure!(
        starts == expected,
        "the gateway on {host} was started {starts} times, expected {expected}: it crashed and was restarted?"
    );
    ensure!(
        h.gateway.signal(0).is_ok(),
        "the gateway on {host} is no longer running"
    );
    h.gateway.wait_ready(Duration::from_secs(10)).await?;
    let bad: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("PRECONDITION_FAILED") || l.contains("PRECONDITIONFAILED"))
        .collect();
    ensure!(bad.is_empty(), "the gateway on {host} met a 406:\n{}", bad.join("\n"));
    Ok(())
}

/// MIG-2 moves only the queues of local workers with a known paneId: any other legacy queue is
/// left as it is — judged on the broker over a window (messages, consumers, arguments), before
/// and after. Whether and how the gateway reports it is its own choice (the reference logs
/// "left alone"): shown, never judged (docs/CONTRACT.md).
#[then(
    expr = "the legacy queue of v1 pane {string} is left alone: {int} messages, no consumer and no arguments over a window"
)]
async fn left_alone(w: &mut FleetWorld, pane: String, n: u32) -> anyhow::Result<()> {
    legacy_untouched(w, pane.clone(), n).await?;
    let queue = legacy_queue_name(&pane);
    // Read by passive declare (exact), not from management counters (RabbitMQ's lag: a queue
    // seeded a moment ago may still show 0 there).
    let lb = legacy_broker(w).await?;
    let held = fleet_conformance::timing::hold_for(
        &format!("{queue} left alone"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (lb, queue) = (&lb, queue.as_str());
            async move {
                match lb.queue_state(queue).await {
                    Ok(Some(s)) if s.messages == n && s.consumers == 0 => Ok(()),
                    Ok(Some(s)) => Err(format!("{queue}: {s:?}")),
                    Ok(None) => Err(format!("{queue} is gone")),
                    Err(e) => Err(format!("a passive declare of {queue} failed: {e}")),
                }
            }
        },
    )
    .await;
    lb.close().await;
    held?;
    legacy_untouched(w, pane, n).await?;
    for host in w.hosts.keys().cloned().collect::<Vec<_>>() {
        let log = w.host(&host)?.gateway.log();
        if let Some(line) = since_last_start(&log).lines().find(|l| l.contains(&queue)) {
            println!("reference behaviour (not judged): the gateway on {host} said: {line}");
        }
    }
    Ok(())
}

/// The broker's names of the AMQP connections into this scenario's vhost right now.
async fn vhost_connections(w: &mut FleetWorld) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let conns = suite.broker.management().connections(&vhost).await?;
    Ok(conns.into_iter().map(|c| c.name).collect())
}

#[when("the broker connections into the scenario's vhost are noted")]
async fn note_connections(w: &mut FleetWorld) -> anyhow::Result<()> {
    // The management API lists a connection a moment after it opened (and drops a closed one a
    // moment later): note the set once two looks a second apart agree and it is not empty.
    w.vhost().await?;
    let w2: &FleetWorld = w;
    let suite = w2.suite()?;
    let vhost = w2.vhost.clone().unwrap_or_default();
    let last = std::sync::Mutex::new(std::collections::BTreeSet::<String>::new());
    let conns = wait_for(
        "a stable, non-empty list of connections",
        Duration::from_secs(10),
        || {
            let (suite, vhost, last) = (suite.clone(), vhost.clone(), &last);
            async move {
                // The pace of the look, not a wait for luck: the condition is "two looks agree".
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now: std::collections::BTreeSet<String> = suite
                    .broker
                    .management()
                    .connections(&vhost)
                    .await
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .map(|c| c.name)
                    .collect();
                let mut prev = last.lock().map_err(|e| e.to_string())?;
                if !now.is_empty() && now == *prev {
                    Ok(Some(now))
                } else {
                    let was = std::mem::replace(&mut *prev, now.clone());
                    Err(format!("listed {now:?}, a second before {was:?}"))
                }
            }
        },
    )
    .await?;
    w.notes.connections = Some(conns.into_iter().collect());
    Ok(())
}

#[then(expr = "every broker connection noted before stays open for {int} heartbeats")]
async fn connections_stay(w: &mut FleetWorld, beats: u32) -> anyhow::Result<()> {
    let noted = w
        .notes
        .connections
        .clone()
        .ok_or_else(|| anyhow!("no connections were noted"))?;
    // Absence of a reconnect, checked over a window: every noted connection is listed at every
    // look until the window ends.
    let window = fleet_conformance::timing::scaled(w.heartbeat() * beats);
    let end = tokio::time::Instant::now() + window;
    loop {
        let now = vhost_connections(w).await?;
        let gone: Vec<&String> = noted.difference(&now).collect();
        ensure!(
            gone.is_empty(),
            "connection(s) {gone:?} closed (a reconnect?); the broker now lists {now:?}"
        );
        if tokio::time::Instant::now() >= end {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
