//! Copies racing a drain (RPL-1, FWD-6): the probe publishes each valid message twice in a row
//! while the main drains, and every message must be drained exactly once.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{then, when};
use fleet_conformance::envelope::new_uuid;
use fleet_conformance::probe::Crafted;
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::count_id;
use super::craft::valid_send;

/// Sends `n` valid SENDs from fake entity `from` to the main `main`, publishing each one twice in
/// a row (the same bytes: msgId, signature, everything), while a task keeps `main` draining with
/// `bridge_wait`. A copy then reaches the gateway while its original is held, handed to the
/// waiter, or half-way through its drain (the ack in flight): every window in which a gateway
/// that records the msgId too late drains it a second time. The drains are kept for the check.
#[when(
    expr = "{string} on the probe host sends {int} messages to {string}, each published twice in a row, while it drains"
)]
async fn sends_twice_while_draining(w: &mut FleetWorld, from: String, n: usize, main: String) -> anyhow::Result<()> {
    let gid = w.gid(&main)?;
    let handle = w.mcp(&main).await?.handle();
    let probe = w.probe().await?;
    let ids = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drainer = {
        let (ids, stop) = (ids.clone(), stop.clone());
        tokio::spawn(async move {
            let mut got: Vec<Value> = Vec::new();
            loop {
                let done = {
                    let ids = ids.lock().map_err(|_| anyhow!("poisoned"))?;
                    ids.len() == n && ids.iter().all(|id| count_id(&got, id) >= 1)
                };
                if done || stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return anyhow::Ok(got);
                }
                let v = handle.call("bridge_wait", json!({"timeout_s": 1})).await?;
                if let fleet_conformance::contract::Waited::Message(m) = fleet_conformance::contract::waited(&v)? {
                    got.push(m);
                }
            }
        })
    };
    let mut sent = Vec::with_capacity(n);
    for i in 0..n {
        let text = format!("copy race {i} {}", new_uuid());
        let (env, body) = valid_send(w, &from, &gid, &text)?;
        let msg = Crafted::from_envelope("bridge.msg", &gid, &env, &body);
        ids.lock()
            .map_err(|_| anyhow!("poisoned"))?
            .insert(env.msg_id().to_string());
        probe.publish(&msg).await?;
        probe.publish(&msg).await?;
        w.wire.valid_texts.push(text);
        sent.push(env.msg_id().to_string());
        w.wire.replayed.push(env.msg_id().to_string());
    }
    let deadline = fleet_conformance::timing::scaled(Duration::from_secs(30));
    let got = match tokio::time::timeout(deadline, drainer).await {
        Ok(joined) => joined.context("the draining task panicked")??,
        Err(_) => {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            bail!("{main} did not drain all {n} messages within {deadline:?}")
        }
    };
    w.wire.drained.extend(got);
    w.wire.copies = sent;
    Ok(())
}

#[then(expr = "{string} drained each of those messages exactly once")]
async fn drained_each_once(w: &mut FleetWorld, main: String) -> anyhow::Result<()> {
    // A late second copy is still drainable for a while: poll over a window and keep what comes.
    let handle = w.mcp(&main).await?.handle();
    let late = std::sync::Mutex::new(Vec::<Value>::new());
    let copies = w.wire.copies.clone();
    ensure!(!copies.is_empty(), "no messages were sent twice in this scenario");
    fleet_conformance::timing::hold_for(
        "no second drain of a message sent twice",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (handle, late, copies) = (handle.clone(), &late, &copies);
            async move {
                let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
                let msgs = fleet_conformance::contract::poll_messages(&v).map_err(|e| e.to_string())?;
                let again: Vec<&Value> = msgs
                    .iter()
                    .filter(|m| copies.iter().any(|id| m["msgId"] == json!(id)))
                    .collect();
                let seen = format!("drained again: {again:?}");
                let hit = !again.is_empty();
                if let Ok(mut l) = late.lock() {
                    l.extend(msgs);
                }
                if hit { Err(seen) } else { Ok(()) }
            }
        },
    )
    .await?;
    let late = late.into_inner().unwrap_or_default();
    w.wire.drained.extend(late);
    let twice: Vec<(String, usize)> = copies
        .iter()
        .map(|id| (id.clone(), count_id(&w.wire.drained, id)))
        .filter(|(_, c)| *c != 1)
        .collect();
    ensure!(
        twice.is_empty(),
        "{} of {} messages sent twice were not drained exactly once (msgId, drains): {twice:?}",
        twice.len(),
        copies.len()
    );
    Ok(())
}
