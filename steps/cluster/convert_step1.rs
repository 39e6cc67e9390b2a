//! The conversion (CLU-7) killed in its first step exactly between a moved message's publisher
//! confirm and the ack of its original: the moment that leaves the same message in the classic
//! inbox and in the conversion's own queue, which a rerun must not move a second time.
//!
//! Exists because the other kills of the first step ([`super::convert`]: "once messages have left
//! the inbox") land wherever the timing puts them, so a rerun that ignores the copies a kill left
//! passed whenever the kill fell between batches. Here the moment is made, not waited for, and
//! without any hook in the conversion: it reaches the broker through a relay of the suite's
//! ([`fleet_conformance::proxy::Proxy::hold_after_confirms`]) that reads the broker's frames, and
//! once the broker's publisher confirms cover a given number of publishes, drops every byte the
//! conversion sends from then on. A conversion that acks an original only once its copy is
//! confirmed (SPEC's at-least-once) has by then a confirmed copy whose original's ack cannot reach
//! the broker; the suite kills it there with SIGKILL and checks, once the broker has handed the
//! unacked originals back, that the inbox (still classic) and the conversion's own queues together
//! hold more messages than were seeded.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::when;
use fleet_conformance::broker::url::percent_encode;
use fleet_conformance::legacy::LegacyBroker;
use fleet_conformance::proxy::Proxy;
use fleet_conformance::timing::wait_for;
use serde_json::json;

use super::convert_interrupted::{ready, ready_sum, seeded};
use crate::world::FleetWorld;

#[when(
    regex = r#"^the conversion of the inbox of "([^"]+)" is killed with SIGKILL in its first step, once the broker has confirmed (\d+) of its copies and before their originals' acks reach it$"#
)]
async fn killed_between_confirm_and_ack(w: &mut FleetWorld, name: String, confirmed: u64) -> anyhow::Result<()> {
    let (_, ids) = seeded(w, &name)?;
    let n = u64::try_from(ids.len())?;
    ensure!(
        confirmed > 0 && confirmed < n,
        "the kill is aimed after {confirmed} of {n} copies: pick fewer than were seeded"
    );
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let m = suite.broker.management().clone();
    let ep = suite.broker.node_endpoint(0);
    let watch = LegacyBroker::connect(&suite.broker.amqp_url(&vhost)).await?;
    let before: BTreeSet<String> = m.queues(&vhost).await?.into_iter().map(|q| q.name).collect();
    let relay = Proxy::start(ep.amqp_addr()).await?;
    relay.hold_after_confirms(confirmed);
    // One URL, the relay's to the first node, under the administrator login (CONTRACT §11).
    let url = format!(
        "amqp://{}:{}@{}/{}",
        percent_encode(&ep.user),
        percent_encode(&ep.password),
        relay.listen(),
        percent_encode(&vhost)
    );
    let (mut cmd, queue) = super::convert::conversion(w, &name).await?;
    let mut child = cmd
        .env("FLEET_AMQP_URL", url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("starting the conversion")?;
    let pgid = child.id().ok_or_else(|| anyhow!("the conversion exited at once"))? as i32;
    let relay_ref = &relay;
    let held = wait_for(
        "the broker's confirms of the conversion's copies",
        Duration::from_secs(60),
        || async move {
            if relay_ref.holding() {
                Ok(Some(()))
            } else {
                Err(format!(
                    "{} connection(s) through the relay, the hold not fired",
                    relay_ref.live()
                ))
            }
        },
    );
    tokio::select! {
        r = held => r.map_err(|e| anyhow!("the broker confirmed fewer than {confirmed} publishes of the conversion of {queue}: {e}"))?,
        status = child.wait() => {
            let status = status.context("waiting for the conversion")?;
            let out = child.wait_with_output().await?;
            bail!(
                "the conversion ended ({status}) before the broker had confirmed {confirmed} of its publishes; it could not be stopped between a confirm and its ack: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // SAFETY: kill(2) on the conversion's own process group, made by `process_group(0)`.
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
    let _ = child.wait().await;
    let held_bytes = relay.held_bytes();
    // The broker hands the killed connection's unacked originals back once it sees it close.
    let watch_ref = &watch;
    let (queue_ref, vhost_ref, m_ref, before_ref) = (&queue, &vhost, &m, &before);
    let (i, o, own) = wait_for("the killed conversion's originals back", Duration::from_secs(10), || async move {
        if relay_ref.live() > 0 {
            return Err("the killed conversion's connection is still open".to_string());
        }
        let own: Vec<String> = m_ref
            .queues(vhost_ref)
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|q| q.durable && !q.exclusive && !q.auto_delete && !before_ref.contains(&q.name))
            .map(|q| q.name)
            .collect();
        let i = ready(watch_ref, queue_ref)
            .await
            .map_err(|e| e.to_string())?
            .map(u64::from);
        let o = ready_sum(watch_ref, &own).await.map_err(|e| e.to_string())?;
        match i {
            Some(i) if i + o > n => Ok(Some((i, o, own))),
            Some(i) => Err(format!("{queue_ref}: {i}, its own queues {own:?}: {o}")),
            None => Err(format!("{queue_ref} is gone: the kill came after the first step")),
        }
    })
    .await
    .map_err(|e| {
        anyhow!(
            "after a kill between the broker's confirm of copy {confirmed} and its original's ack, no message was both in {queue} and in the conversion's own queues (did it ack originals before their copies were confirmed?): {e}"
        )
    })?;
    let q = m
        .queue(&vhost, &queue)
        .await?
        .ok_or_else(|| anyhow!("{queue} does not exist after the kill"))?;
    ensure!(
        q.arguments.get("x-queue-type") != Some(&json!("quorum")),
        "the kill was meant for the conversion's first step, but {queue} is quorum already"
    );
    println!(
        "the conversion was killed in its first step after {confirmed} confirms ({held_bytes} bytes of its held): {i} in {queue}, {o} in {own:?}, {n} seeded"
    );
    watch.close().await;
    Ok(())
}
