//! A migration interrupted by the restart (MIG-3): the broker goes down once part of a v1 pane's
//! replies have moved, and the legacy queue is read the moment the broker answers again, before
//! the gateways can resume the move.

use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{then, when};
use fleet_conformance::legacy::{LegacyBroker, legacy_queue_name};
use fleet_conformance::timing::{scaled, wait_for};

use crate::world::FleetWorld;

use super::outage::{come_back, go_down};
use super::vhost_of;

#[when(expr = "the broker restarts once {int} of the {int} replies of v1 pane {string} have moved")]
async fn restart_mid_move(w: &mut FleetWorld, k: u32, total: u32, pane: String) -> anyhow::Result<()> {
    ensure!(total > k + 1, "seed more than {} replies for this step", k + 1);
    let suite = w.suite()?;
    let url = suite.broker.amqp_url(&vhost_of(w)?);
    let queue = legacy_queue_name(&pane);
    let lb = LegacyBroker::connect(&url).await?;
    let (lbr, queue_ref) = (&lb, queue.as_str());
    // Ready messages exclude those the gateway holds unacked: "moved" counts them too, which is
    // fine for "the move is under way".
    let seen = wait_for(
        &format!("{k} replies of {queue} to move"),
        Duration::from_secs(30),
        || async move {
            match lbr.queue_state(queue_ref).await {
                Ok(Some(s)) if total.saturating_sub(s.messages) >= k => Ok(Some(Ok(s))),
                Ok(Some(s)) => Err(format!("{} moved so far", total.saturating_sub(s.messages))),
                Ok(None) => Ok(Some(Err(()))),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    lb.close().await;
    match seen? {
        Ok(_) => {}
        Err(()) => bail!("{queue} was gone before the restart: the whole move finished first; seed more replies"),
    }
    // The gateways are frozen (SIGSTOP) from just before the broker goes down until the suite
    // has looked, so the move is cut where it stands and the look comes before any gateway can
    // resume it: stopping a cluster takes seconds, node by node, and a gateway on a node still up
    // moved the rest in that time. Thawed, each finds its connection dead (CON-3) and the
    // messages it held unacked back on the queue.
    let frozen = freeze_gateways(w, libc::SIGSTOP)?;
    if let Err(e) = go_down(w).await {
        freeze_gateways(w, libc::SIGCONT)?;
        return Err(e);
    }
    // What the broker kept, read the moment it answers again: the look starts while the broker
    // is still down and retries until it connects. (Read after `come_back`, which waits for
    // every gateway's readiness, a fast gateway had already finished the move.)
    let look = {
        let (url, queue) = (url.clone(), queue.clone());
        tokio::spawn(async move {
            wait_for(
                &format!("{queue} readable again after the restart"),
                Duration::from_secs(120),
                move || {
                    let (url, queue) = (url.clone(), queue.clone());
                    async move {
                        let lb = tokio::time::timeout(scaled(Duration::from_secs(5)), LegacyBroker::connect(&url))
                            .await
                            .map_err(|_| "connect: no answer".to_string())?
                            .map_err(|e| e.to_string())?;
                        let s = lb.queue_state(&queue).await;
                        // As with the probe (see `world::close_probe`): what was read is complete.
                        let _ = tokio::time::timeout(scaled(Duration::from_secs(5)), lb.close()).await;
                        s.map(Some).map_err(|e| e.to_string())
                    }
                },
            )
            .await
        })
    };
    let back = come_back(w).await;
    let looked = look.await;
    freeze_gateways(w, libc::SIGCONT)?;
    ensure!(frozen > 0, "no gateway was running to freeze");
    back?;
    let s = looked.map_err(|e| anyhow!("the look at {pane}'s legacy queue: {e}"))??;
    w.notes.restart.legacy_back = Some((pane, s.map(|s| s.messages)));
    Ok(())
}

/// Sends `signal` (SIGSTOP or SIGCONT) to every running gateway; returns how many.
fn freeze_gateways(w: &mut FleetWorld, signal: i32) -> anyhow::Result<usize> {
    let mut n = 0;
    for (host, h) in &w.hosts {
        h.gateway
            .signal(signal)
            .with_context(|| format!("signal {signal} to the gateway on {host}"))?;
        n += 1;
    }
    Ok(n)
}

#[then(expr = "the legacy queue of v1 pane {string} still held replies when the broker was back")]
async fn legacy_held_when_back(w: &mut FleetWorld, pane: String) -> anyhow::Result<()> {
    let (moved, held) = w
        .notes
        .restart
        .legacy_back
        .clone()
        .ok_or_else(|| anyhow!("the broker was not restarted in the middle of a move"))?;
    ensure!(moved == pane, "the restart was in the move of {moved}");
    ensure!(
        held.unwrap_or(0) > 0,
        "{} held no reply when the broker was back ({}): the restart interrupted nothing (the move had \
         finished, or resumed before the suite could look)",
        legacy_queue_name(&pane),
        held.map_or("the queue was gone".to_string(), |n| format!("{n} ready"))
    );
    Ok(())
}
