//! Steps of the pull path (SPEC §6): replies held for a main, drains, waiters.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use serde_json::{Value, json};

use crate::world::FleetWorld;

#[when(expr = "{string} replies {string}")]
async fn replies(w: &mut FleetWorld, worker: String, text: String) -> anyhow::Result<()> {
    let v = w
        .mcp(&worker)
        .await?
        .call("bridge_reply", json!({"text": text}))
        .await?;
    ensure!(v["msgId"].is_string(), "bridge_reply returned {v}, expected a msgId");
    Ok(())
}

/// A `bridge_reply` left running in the background (label `reply`), for steps that act on the
/// link while its publish waits for the confirm.
#[when(expr = "{string} starts replying {string}")]
async fn starts_replying(w: &mut FleetWorld, worker: String, text: String) -> anyhow::Result<()> {
    w.call_in_background("reply", &worker, "bridge_reply", json!({"text": text}))
        .await
}

#[then(expr = "the reply has not returned yet")]
async fn reply_open(w: &mut FleetWorld) -> anyhow::Result<()> {
    let call = w.calls.get("reply").ok_or_else(|| anyhow!("no reply was started"))?;
    ensure!(
        !call.is_finished(),
        "bridge_reply already returned although its confirm cannot have arrived"
    );
    Ok(())
}

#[then(expr = "the reply returns its msgId within {int} seconds")]
async fn reply_returns(w: &mut FleetWorld, secs: u64) -> anyhow::Result<()> {
    let v = w.call_result("reply", Duration::from_secs(secs)).await?;
    ensure!(
        v["msgId"].is_string(),
        "bridge_reply returned {v}, expected its msgId (SPEC [C-18])"
    );
    Ok(())
}

#[then(expr = "message {int} has the msgId the reply returned")]
async fn message_has_reply_id(w: &mut FleetWorld, i: usize) -> anyhow::Result<()> {
    let reply = w
        .results
        .get("reply")
        .ok_or_else(|| anyhow!("the reply has not returned"))?;
    let m = w
        .drained
        .get(i.saturating_sub(1))
        .ok_or_else(|| anyhow!("no message {i} was drained"))?;
    ensure!(
        m["msgId"] == reply["msgId"],
        "message {i} has msgId {}, the reply returned {}",
        m["msgId"],
        reply["msgId"]
    );
    Ok(())
}

#[when(expr = "{string} sends {int} replies")]
async fn sends_replies(w: &mut FleetWorld, worker: String, n: usize) -> anyhow::Result<()> {
    for i in 1..=n {
        replies(w, worker.clone(), format!("reply {i} of {n}")).await?;
    }
    Ok(())
}

#[when(regex = r#"^"([^"]+)" polls (?:messages from "([^"]+)"|all messages)$"#)]
async fn polls(w: &mut FleetWorld, main: String, from: String) -> anyhow::Result<()> {
    let mut args = json!({});
    if !from.is_empty() {
        args["from"] = json!(w.gid(&from)?);
    }
    w.drained = poll_once(w, &main, &args).await?;
    w.last_poll = Some((main, args));
    Ok(())
}

async fn poll_once(w: &mut FleetWorld, main: &str, args: &Value) -> anyhow::Result<Vec<Value>> {
    let v = w.mcp(main).await?.call("bridge_poll", args.clone()).await?;
    Ok(fleet_conformance::contract::poll_messages(&v)?)
}

/// "gets exactly N": a message the broker shows as delivered may still be under the gateway's
/// verification (SIG-2's grace) and not yet held, so the step polls again, with the same
/// arguments, until N have been drained or the deadline passes. "gets no message" is judged over
/// a window of further polls. Either way, one drain more than N fails.
#[then(regex = r#"^"([^"]+)" gets (no message|exactly (\d+) messages?)$"#)]
async fn gets_n(w: &mut FleetWorld, _main: String, _what: String, n: String) -> anyhow::Result<()> {
    let n: usize = if n.is_empty() { 0 } else { n.parse()? };
    let (main, args) = w
        .last_poll
        .clone()
        .ok_or_else(|| anyhow!("no bridge_poll step came before"))?;
    let window = if n == 0 {
        fleet_conformance::timing::ABSENCE_WINDOW
    } else {
        std::time::Duration::from_secs(10)
    };
    let end = tokio::time::Instant::now() + fleet_conformance::timing::scaled(window);
    while w.drained.len() < n.max(1) && tokio::time::Instant::now() < end {
        // The pace of the re-polls; the deadline is what is judged.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let more = poll_once(w, &main, &args).await?;
        w.drained.extend(more);
    }
    ensure!(
        w.drained.len() == n,
        "expected {n} drained message(s), got {}: {:?}",
        w.drained.len(),
        w.drained
    );
    Ok(())
}

fn check_message(w: &FleetWorld, m: &Value, kind: &str, from: &str, text: &str) -> anyhow::Result<()> {
    let from_gid = w.gid(from)?;
    ensure!(m["kind"] == json!(kind), "message {m} is not a {kind}");
    ensure!(
        m["from"] == json!(from_gid),
        "message {m} is not from {from} ({from_gid})"
    );
    ensure!(m["text"] == json!(text), "message {m} does not read {text:?}");
    ensure!(
        m["msgId"].is_string() && m["traceId"].is_string(),
        "message {m} lacks msgId/traceId"
    );
    Ok(())
}

#[then(regex = r#"^message (\d+) is a ([A-Z_]+) from "([^"]+)" with text "([^"]*)"$"#)]
async fn message_is(w: &mut FleetWorld, i: usize, kind: String, from: String, text: String) -> anyhow::Result<()> {
    let m = w
        .drained
        .get(i.saturating_sub(1))
        .cloned()
        .ok_or_else(|| anyhow!("no message {i} in {:?}", w.drained))?;
    check_message(w, &m, &kind, &from, &text)
}

#[given(expr = "{string} is waiting for a message")]
#[when(expr = "{string} is waiting for a message")]
async fn is_waiting(w: &mut FleetWorld, main: String) -> anyhow::Result<()> {
    w.call_in_background("wait", &main, "bridge_wait", json!({"timeout_s": 60}))
        .await?;
    // The wait is open once the gateway holds it, which the suite cannot see: an ASK sent while
    // the call is still in flight may rightly get `no_waiter`, so the ask step asks again then
    // (CONTRACT §3, "An open waiter"; steps/ask.rs).
    Ok(())
}

#[then(regex = r#"^the wait returns an? ([A-Z_]+) from "([^"]+)" with text "([^"]*)" within (\d+) seconds$"#)]
async fn wait_returns(w: &mut FleetWorld, kind: String, from: String, text: String, secs: u64) -> anyhow::Result<()> {
    let v = w.call_result("wait", Duration::from_secs(secs)).await?;
    let m = fleet_conformance::contract::waited_message(&v)?;
    check_message(w, &m, &kind, &from, &text)?;
    if kind == "ASK" {
        w.notes.questions.push(m);
    }
    Ok(())
}
