//! A whole site comes back ([C-25], features/site_restart.feature): the broker and the hosts
//! restart together and return in any order, so a receiver may be back long before a sender's
//! host. A host not heard from since the receiver's own (re)connect is no evidence against its
//! entities: what it sent (confirmed REPLYs kept in a main's inbox) is held, not rejected, until
//! that host is heard from, or until `FLEET_UNKNOWN_HOST_HOLD_S` after the (re)connect — then
//! [C-7] applies and the REPLYs are rejected (SIG-2 (2)).
//!
//! What is dead-lettered is seen through a durable tap of `bridge.dlx` (it lives through the
//! restart, with what it holds), looked at every 100 ms while a step watches, each copy stamped
//! with the suite's clock at the look that found it.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then};
use fleet_conformance::probe::{Captured, Tap};
use fleet_conformance::timing::scaled;
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::{quoted, vhost_of};

/// The pace of the looks at the dead-letter copy.
const LOOK_EVERY: Duration = Duration::from_millis(100);

#[given(expr = "the gateways' unknown-host hold is {int} seconds")]
async fn unknown_host_hold(w: &mut FleetWorld, secs: u64) {
    // A hold is stretched like every tunable a scenario hands a gateway (CONTRACT §7): a longer
    // hold is stricter for the scenario where the sender returns, and the variant where it never
    // does judges the gateway against the hold as handed.
    let hold = scaled(Duration::from_secs(secs));
    let whole = hold.as_secs() + u64::from(hold.subsec_nanos() > 0);
    w.gateway_env
        .insert("FLEET_UNKNOWN_HOST_HOLD_S".into(), whole.to_string());
    w.notes.restart.hold = Some(Duration::from_secs(whole));
}

#[given(regex = r#"^"([^"]+)" replies (.+), each confirmed$"#)]
async fn replies_confirmed(w: &mut FleetWorld, worker: String, texts: String) -> anyhow::Result<()> {
    for text in quoted(&texts) {
        // SPEC [C-18]: bridge_reply returns once the broker confirmed the REPLY.
        let v = w
            .mcp(&worker)
            .await?
            .call("bridge_reply", json!({"text": text}))
            .await?;
        let id = v["msgId"]
            .as_str()
            .ok_or_else(|| anyhow!("bridge_reply returned {v}, expected its msgId (SPEC [C-18])"))?;
        w.notes.restart.kept.push((text, id.to_string()));
    }
    Ok(())
}

#[given("the probe keeps a durable copy of what is dead-lettered")]
async fn durable_dead_copy(w: &mut FleetWorld) -> anyhow::Result<()> {
    vhost_of(w)?;
    let queue = format!("probe.dead-copy.{}", uuid::Uuid::new_v4().simple());
    // bridge.dlx is a fanout exchange (SPEC §1): every dead letter of the vhost reaches the copy.
    w.probe().await?.durable_tap(&queue, &[("bridge.dlx", "")]).await?;
    w.notes.restart.dead_copy = Some((queue, Vec::new()));
    Ok(())
}

/// The msgId of a dead-lettered copy: the envelope's, else the AMQP `message_id`.
fn msg_id(c: &Captured) -> Option<String> {
    serde_json::from_slice::<Value>(&c.body)
        .ok()
        .and_then(|v| v["msgId"].as_str().map(str::to_string))
        .or_else(|| c.message_id())
}

/// The looks of one step at the dead-letter copy, through one channel (not one per look).
struct Looks {
    tap: Tap,
    /// How many of the tap's captures are already in the notes.
    taken: usize,
}

impl Looks {
    async fn open(w: &mut FleetWorld) -> anyhow::Result<Looks> {
        let queue = w
            .notes
            .restart
            .dead_copy
            .as_ref()
            .map(|(q, _)| q.clone())
            .ok_or_else(|| {
                anyhow!("no dead-letter copy: add \"the probe keeps a durable copy of what is dead-lettered\"")
            })?;
        let tap = w.probe().await?.reattach(&queue).await?;
        Ok(Looks { tap, taken: 0 })
    }

    /// One look: what arrived since the last look, stamped with the end of this look, added to
    /// the notes. Returns when this look started.
    async fn look(&mut self, w: &mut FleetWorld) -> anyhow::Result<Instant> {
        let started = Instant::now();
        let bound = scaled(Duration::from_secs(10));
        let all = tokio::time::timeout(bound, self.tap.fetch()).await.map_err(|_| {
            anyhow!(
                "a look at the dead-letter copy {} did not finish within {bound:?}",
                self.tap.queue()
            )
        })??;
        let at = Instant::now();
        let (taken, now) = (self.taken, all.len());
        if let Some((_, seen)) = w.notes.restart.dead_copy.as_mut() {
            seen.extend(all.into_iter().skip(taken).map(|c| (at, c)));
        }
        self.taken = now;
        Ok(started)
    }
}

/// The kept replies' copies among the dead letters: (text, stamp, copy).
fn kept_dead(w: &FleetWorld) -> Vec<(String, Instant, Captured)> {
    let Some((_, seen)) = &w.notes.restart.dead_copy else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (at, c) in seen {
        let id = msg_id(c);
        for (text, kept) in &w.notes.restart.kept {
            if id.as_deref() == Some(kept.as_str()) {
                out.push((text.clone(), *at, c.clone()));
            }
        }
    }
    out
}

fn texts(dead: &[(String, Instant, Captured)]) -> Vec<String> {
    dead.iter()
        .map(|(t, _, c)| format!("{t:?} (x-death from {:?})", c.death_queue()))
        .collect()
}

#[then(expr = "no kept reply is dead-lettered while {int} heartbeats pass")]
async fn none_dead_over(w: &mut FleetWorld, beats: u32) -> anyhow::Result<()> {
    let end = Instant::now() + w.heartbeat() * beats;
    let mut looks = Looks::open(w).await?;
    loop {
        looks.look(w).await?;
        let dead = kept_dead(w);
        ensure!(
            dead.is_empty(),
            "kept replies were dead-lettered while their host had not been heard from since the receiver's \
             reconnect ([C-25]: held until it is, at most FLEET_UNKNOWN_HOST_HOLD_S): {:?}",
            texts(&dead)
        );
        if Instant::now() >= end {
            return Ok(());
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

#[then("no kept reply was dead-lettered at all")]
async fn none_dead_at_all(w: &mut FleetWorld) -> anyhow::Result<()> {
    Looks::open(w).await?.look(w).await?;
    let dead = kept_dead(w);
    ensure!(
        dead.is_empty(),
        "kept replies were dead-lettered although they were drained: {:?}",
        texts(&dead)
    );
    Ok(())
}

#[then(
    regex = r#"^each kept reply is dead-lettered from the inbox of "([^"]+)" once, not before the hold has passed since the broker was started again, within (\d+) seconds after it$"#
)]
async fn dead_after_hold(w: &mut FleetWorld, main: String, secs: u64) -> anyhow::Result<()> {
    let hold = w
        .notes
        .restart
        .hold
        .ok_or_else(|| anyhow!("no hold was set: add \"the gateways' unknown-host hold is … seconds\""))?;
    let resuming = w
        .notes
        .restart
        .resuming_at
        .ok_or_else(|| anyhow!("the broker was not started again in this scenario"))?;
    // The gateway's hold counts from its own reconnect, which comes after the broker was started
    // again: a rejection before `earliest` is certainly early.
    let earliest = resuming + hold;
    let latest = earliest + scaled(Duration::from_secs(secs));
    let inbox = format!("agent.{}.inbox.v2", w.gid(&main)?);
    let wanted = w.notes.restart.kept.len();
    ensure!(wanted > 0, "no kept replies: add \"… replies …, each confirmed\"");
    let mut looks = Looks::open(w).await?;
    let first = looks.look(w).await?;
    if first >= earliest && kept_dead(w).len() >= wanted {
        bail!(
            "the first look at the dead letters began {:.1?} after the hold had passed and found every kept reply \
             there already: whether they were rejected before the hold cannot be told (a slower step before this one)",
            first - earliest
        );
    }
    while kept_dead(w).len() < wanted && Instant::now() < latest {
        tokio::time::sleep(LOOK_EVERY).await;
        looks.look(w).await?;
    }
    // A window more: a second copy of either would show up now.
    let window_end = Instant::now() + w.heartbeat() * 3;
    while Instant::now() < window_end {
        tokio::time::sleep(LOOK_EVERY).await;
        looks.look(w).await?;
    }
    let dead = kept_dead(w);
    for (text, _) in w.notes.restart.kept.clone() {
        let copies: Vec<&(String, Instant, Captured)> = dead.iter().filter(|(t, _, _)| *t == text).collect();
        ensure!(
            copies.len() == 1,
            "kept reply {text:?} was dead-lettered {} times within {secs} s after the hold (expected once: \
             its host never came back, so after FLEET_UNKNOWN_HOST_HOLD_S [C-7] applies and it is rejected): {:?}",
            copies.len(),
            texts(&dead)
        );
        let (_, at, c) = copies[0];
        ensure!(
            *at >= earliest,
            "kept reply {text:?} was dead-lettered {:.1?} before the hold of {hold:?} had passed since the broker \
             was started again ([C-25]: a host not heard from since the reconnect is held up to \
             FLEET_UNKNOWN_HOST_HOLD_S)",
            earliest - *at
        );
        ensure!(
            c.death_queue().as_deref() == Some(inbox.as_str()) && c.death_reason().as_deref() == Some("rejected"),
            "kept reply {text:?} was dead-lettered from {:?} ({:?}), expected rejected from {inbox}",
            c.death_queue(),
            c.death_reason()
        );
        eprintln!(
            "kept reply {text:?} dead-lettered by {:.1?} after the broker was started again (hold {hold:?})",
            *at - resuming
        );
    }
    Ok(())
}

#[then(expr = "the gateway on {string} logged each kept reply's rejection naming the check {string}")]
async fn logged_each(w: &mut FleetWorld, host: String, check: String) -> anyhow::Result<()> {
    let log = w.host(&host)?.gateway.log();
    for (text, id) in &w.notes.restart.kept {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(id.as_str())).collect();
        ensure!(
            lines.iter().any(|l| l.contains(check.as_str())
                && fleet_conformance::contract::log_line_at(l, fleet_conformance::contract::LogLevel::Warn)),
            "gateway {host} logged no WARN/ERROR line naming {id} ({text:?}) and the check {check:?} \
             (CONTRACT §5); lines naming it: {lines:?}"
        );
    }
    Ok(())
}
