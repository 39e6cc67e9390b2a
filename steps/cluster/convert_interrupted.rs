//! The conversion (CLU-7) killed in its second step, and what the inbox holds once it has run
//! again: SPEC's "idempotent" judged where a kill can break it.
//!
//! Exists because killing the conversion "once messages have left the inbox" ([`super::convert`])
//! always lands in its first step. These steps kill it later, read only from the broker (CONTRACT
//! §11), without any hook in the conversion:
//!
//! - the conversion's own queues are the durable queues of the vhost that were not there before
//!   it started (whatever it names them);
//! - its second step is under way once the inbox is gone, or its own queues hold fewer messages
//!   than they did (they are being emptied back into the inbox); the inbox is then checked quorum;
//! - a kill "that leaves messages both in the inbox and in its own queue" is seen afterwards: the
//!   inbox and its own queues together hold more messages than were seeded (a copy was routed
//!   back while its original was still held, unacknowledged, by the killed conversion). The suite
//!   aims the kill at such a moment — messages taken out of its own queue that are not in the
//!   inbox yet, and its own queue not shrinking any further (taking is done, putting back is
//!   under way) — and kills again after each rerun's start until one kill left copies, within a
//!   bounded number of attempts.
//!
//! Counts are read with passive declares (exact, at once), not from the management API's
//! statistics (refreshed every few hundred milliseconds).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{then, when};
use fleet_conformance::legacy::LegacyBroker;
use fleet_conformance::names::inbox;
use fleet_conformance::timing::{scaled, wait_for};
use futures_util::StreamExt as _;
use lapin::options::{BasicConsumeOptions, BasicQosOptions};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::json;

use crate::world::FleetWorld;

/// How many times the conversion is started and killed before the suite gives up aiming at a
/// moment that leaves copies in two places.
const ATTEMPTS: usize = 12;

/// Where in its second step the conversion is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Point {
    /// The inbox quorum and holding part of the messages, the rest in the conversion's queue.
    Split,
    /// Some messages both in the inbox and (to come back on the kill) in the conversion's queue.
    Copies,
}

/// The seeded inbox's gid and msgIds, for `name`.
pub(super) fn seeded(w: &FleetWorld, name: &str) -> anyhow::Result<(String, Vec<String>)> {
    match &w.cluster.seeded {
        Some(s) if s.name == name => Ok((s.gid.clone(), s.ids.clone())),
        _ => bail!("no seeded inbox for {name:?}"),
    }
}

/// Ready messages of `queue` by a passive declare; 0 for a queue that does not exist.
pub(super) async fn ready(watch: &LegacyBroker, queue: &str) -> anyhow::Result<Option<u32>> {
    Ok(watch.queue_state(queue).await?.map(|s| s.messages))
}

/// The summed ready messages of `queues`.
pub(super) async fn ready_sum(watch: &LegacyBroker, queues: &[String]) -> anyhow::Result<u64> {
    let mut sum = 0u64;
    for q in queues {
        sum += u64::from(ready(watch, q).await?.unwrap_or(0));
    }
    Ok(sum)
}

#[when(
    regex = r#"^the conversion of the inbox of "([^"]+)" is killed with SIGKILL in its second step, (the inbox already quorum and holding part of the messages|at a moment that leaves some messages both in the inbox and in the conversion's own queue)$"#
)]
async fn killed_in_step_two(w: &mut FleetWorld, name: String, point: String) -> anyhow::Result<()> {
    let point = if point.starts_with("the inbox") {
        Point::Split
    } else {
        Point::Copies
    };
    let (gid, ids) = seeded(w, &name)?;
    let n = u64::try_from(ids.len())?;
    let queue = inbox(&gid);
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let m = suite.broker.management().clone();
    let watch = LegacyBroker::connect(&suite.broker.amqp_url(&vhost)).await?;
    let before: BTreeSet<String> = m.queues(&vhost).await?.into_iter().map(|q| q.name).collect();
    let mut own: Vec<String> = Vec::new();
    let attempts = if point == Point::Copies { ATTEMPTS } else { 1 };
    let deadline = Instant::now() + scaled(Duration::from_secs(60 * attempts as u64));
    for attempt in 1..=attempts {
        let (mut cmd, _) = super::convert::conversion(w, &name).await?;
        let mut child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("starting the conversion")?;
        let pgid = child.id().ok_or_else(|| anyhow!("the conversion exited at once"))? as i32;
        // A rerun (attempt 2 on) starts in the second step: the last kill was checked to be there.
        let mut second = attempt > 1;
        let mut own_max = 0u64;
        let mut own_last: Option<u64> = None;
        loop {
            let in_inbox = ready(&watch, &queue).await?;
            if own.is_empty() && in_inbox.is_none_or(|c| u64::from(c) < n) {
                own = m
                    .queues(&vhost)
                    .await?
                    .into_iter()
                    .filter(|q| q.durable && !q.exclusive && !q.auto_delete && !before.contains(&q.name))
                    .map(|q| q.name)
                    .collect();
            }
            let in_own = ready_sum(&watch, &own).await?;
            if !second && !own.is_empty() && (in_inbox.is_none() || in_own < own_max) {
                second = true;
            }
            own_max = own_max.max(in_own);
            let in_inbox = u64::from(in_inbox.unwrap_or(0));
            let fire = second
                && in_inbox > 0
                && in_own > 0
                && match point {
                    Point::Split => true,
                    // Taken out of its queue, not in the inbox yet, and no longer taking.
                    Point::Copies => in_inbox + in_own < n && own_last == Some(in_own),
                };
            own_last = Some(in_own);
            if fire {
                // SAFETY: kill(2) on the conversion's own process group, made by `process_group(0)`.
                unsafe { libc::kill(-pgid, libc::SIGKILL) };
                let _ = child.wait().await;
                break;
            }
            if let Some(status) = child.try_wait()? {
                let out = child.wait_with_output().await?;
                bail!(
                    "the conversion ended ({status}) before it could be killed in its second step (attempt {attempt}; {queue}: {in_inbox}, its own queues {own:?}: {in_own}): {}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            ensure!(
                Instant::now() < deadline,
                "the conversion of {queue} was not seen in its second step in time (attempt {attempt}; inbox {in_inbox}, its own queues {own:?}: {in_own})"
            );
        }
        // Killed: the messages it held come back to its queue once the broker sees the close.
        let q = m
            .queue(&vhost, &queue)
            .await?
            .ok_or_else(|| anyhow!("{queue} does not exist after the kill"))?;
        ensure!(
            q.arguments.get("x-queue-type") == Some(&json!("quorum")),
            "the kill was meant for the conversion's second step, but {queue} is not quorum yet: {:?}",
            q.arguments
        );
        let watch_ref = &watch;
        let own_ref = &own;
        let queue_ref = &queue;
        let held = |more: bool| async move {
            let i = u64::from(
                ready(watch_ref, queue_ref)
                    .await
                    .map_err(|e| e.to_string())?
                    .unwrap_or(0),
            );
            let o = ready_sum(watch_ref, own_ref).await.map_err(|e| e.to_string())?;
            let enough = if more { i + o > n } else { i + o >= n };
            if enough {
                Ok(Some((i, o)))
            } else {
                Err(format!("inbox {i}, own queues {o}"))
            }
        };
        match point {
            Point::Split => {
                let (i, o) = wait_for("the killed conversion's messages back", Duration::from_secs(5), || held(false))
                    .await
                    .map_err(|e| anyhow!("after the kill, {queue} and the conversion's queues {own:?} hold fewer than the {n} seeded: {e}"))?;
                ensure!(
                    i > 0 && o > 0,
                    "the kill was meant to leave messages in both {queue} and {own:?}; they hold {i} and {o}"
                );
                println!("the conversion was killed in its second step: {i} in {queue}, {o} in {own:?}");
                break;
            }
            Point::Copies => match wait_for("copies in two places", Duration::from_secs(3), || held(true)).await {
                Ok((i, o)) => {
                    println!(
                        "the conversion was killed in its second step (attempt {attempt}) with copies in two places: {i} in {queue}, {o} in {own:?}, {n} seeded"
                    );
                    break;
                }
                Err(e) => {
                    ensure!(
                        attempt < attempts,
                        "{attempts} kills of the conversion in its second step left no message both in {queue} and in {own:?} (last: {e}); the suite could not reach the moment it judges"
                    );
                    println!("attempt {attempt}: the kill left no copies ({e}); the conversion runs again");
                }
            },
        }
    }
    watch.close().await;
    Ok(())
}

/// The id of a message in the inbox: its AMQP `message_id`, else its `msgId` header.
fn delivered_id(d: &lapin::message::Delivery) -> String {
    if let Some(id) = d.properties.message_id() {
        return id.as_str().to_string();
    }
    d.properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("msgId"))
        .and_then(|v| match v {
            AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
            AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
            _ => None,
        })
        .unwrap_or_default()
}

/// CLU-7 at the inbox, before any gateway consumes it: exactly the seeded messages, each once,
/// in the order published (CONTRACT §11). Read with a consumer of the suite's own (a quorum inbox
/// with a single active consumer refuses `basic.get`) and handed back by closing its channel.
#[then(regex = r#"^the inbox of "([^"]+)" holds the (\d+) replies from "([^"]+)" in the order sent, each once$"#)]
async fn inbox_holds(w: &mut FleetWorld, name: String, n: usize, from: String) -> anyhow::Result<()> {
    let (gid, ids) = seeded(w, &name)?;
    ensure!(
        w.cluster.seeded.as_ref().is_some_and(|s| s.from == from) && ids.len() == n,
        "{n} replies from {from} were not what was seeded"
    );
    let queue = inbox(&gid);
    let vhost = w.vhost().await?;
    let url = w.suite()?.broker.amqp_url(&vhost);
    let watch = LegacyBroker::connect(&url).await?;
    let state = watch
        .queue_state(&queue)
        .await?
        .ok_or_else(|| anyhow!("CLU-7: {queue} does not exist after the conversion"))?;
    watch.close().await;
    ensure!(
        state.consumers == 0,
        "{queue} has {} consumer(s); nothing should consume it yet",
        state.consumers
    );
    let held = usize::try_from(state.messages)?;
    let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.basic_qos(
        u16::try_from(held.max(1)).unwrap_or(u16::MAX),
        BasicQosOptions::default(),
    )
    .await?;
    let mut consumer = ch
        .basic_consume(
            queue.as_str().into(),
            "fleet-probe-reader".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming {queue} to read it"))?;
    let mut got: Vec<String> = Vec::with_capacity(held);
    let bound = scaled(Duration::from_secs(30));
    while got.len() < held {
        match tokio::time::timeout(bound, consumer.next()).await {
            Ok(Some(Ok(d))) => got.push(delivered_id(&d)),
            Ok(Some(Err(e))) => bail!("reading {queue}: {e}"),
            Ok(None) | Err(_) => bail!(
                "{queue} counted {held} messages but handed over {} within {bound:?}",
                got.len()
            ),
        }
    }
    // Closing the channel hands every message back, in order.
    let _ = ch.close(200, "read".into()).await;
    let _ = conn.close(200, "read".into()).await;
    super::convert::once_in_order(&ids, &got, &format!("{queue} after the conversion"))
}
