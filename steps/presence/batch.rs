//! Host-batched presence (SPEC §17) as other hosts see it, where `envelope::batch` (the probe as a
//! batching host) does not reach:
//! - an entity's `groups` in its host's batch entry (PRB-1) and in other hosts' rosters, kept
//!   across more than a ttl of renewals by batches alone (PRB-2);
//! - PRB-4 on the wire alone: the probe plays a per-entity gateway (a `_gateway` heartbeat that
//!   does not declare `presence-batch`), a batching gateway heartbeats each entity on its own while
//!   that peer is live, and sends no such heartbeat once the peer has been silent for 3H
//!   (docs/CONTRACT.md §13 gives the window).
//!
//! The wire is judged on the probe's `bridge.roster` tap, in the broker's order of each gateway's
//! messages; rosters through `GET /v1/roster`.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::probe::{Captured, presence_message};
use fleet_conformance::timing::{hold_for, scaled, wait_for};
use serde_json::{Value, json};

use super::{heartbeats, roster_of};
use crate::world::FleetWorld;

/// How late a gateway may see a message the probe published, before its own clock counts (the
/// broker's delivery; stretched by the time knob).
const DELIVERY_SLACK: Duration = Duration::from_millis(500);

/// Quoted names out of a step's text.
fn quoted(text: &str) -> BTreeSet<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

fn body_of(m: &Captured) -> Value {
    serde_json::from_slice(&m.body).unwrap_or(Value::Null)
}

/// A `_gateway` heartbeat of `host`.
fn gateway_beat(m: &Captured, host: &str) -> bool {
    m.routing_key == format!("roster.{host}._gateway") && body_of(m)["state"] == "up"
}

/// A per-entity `up` of `gid` from `host` (routing key `roster.<host>.<gid>`).
fn own_up(m: &Captured, host: &str, gid: &str) -> bool {
    m.routing_key == format!("roster.{host}.{gid}") && body_of(m)["state"] == "up"
}

/// The groups an entry (a batch entry or a roster entry) gives, as a set; `None` without a list.
fn groups_of(e: &Value) -> Option<BTreeSet<String>> {
    e["groups"]
        .as_array()
        .map(|a| a.iter().filter_map(|g| g.as_str().map(str::to_string)).collect())
}

// ---- PRB-1 / PRB-2: groups in batch entries and in rosters built from them ----

/// PRB-1: a `_gateway` heartbeat of `host` declaring `presence-batch` whose entry for `name`
/// lists exactly those groups.
#[then(
    regex = r#"^the probe sees a batch of host "([^"]+)" that declares presence-batch and lists "([^"]+)" in groups (.+)$"#
)]
async fn batch_lists_groups(w: &mut FleetWorld, host: String, name: String, groups: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let want = quoted(&groups);
    let roster = w.wire.roster_tap()?;
    let (gid, host, want) = (&gid, &host, &want);
    wait_for(
        &format!("a batch of {host} listing {name} in groups {want:?}"),
        heartbeats(w, 3),
        || {
            let roster = roster.clone();
            async move {
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                let mut last = None;
                for m in all.iter().filter(|m| gateway_beat(m, host)) {
                    let b = body_of(m);
                    let declares = b["capabilities"]
                        .as_array()
                        .is_some_and(|c| c.contains(&json!("presence-batch")));
                    let entry = b["entities"]
                        .as_array()
                        .and_then(|l| l.iter().find(|e| e["gid"] == json!(gid)).cloned());
                    if let Some(entry) = entry {
                        if declares && groups_of(&entry).as_ref() == Some(want) {
                            return Ok(Some(()));
                        }
                        last = Some(entry);
                    }
                }
                Err(match last {
                    Some(e) => format!("the last batch entry of it: {e}"),
                    None => format!("no batch of {host} lists it ({} presence message(s))", all.len()),
                })
            }
        },
    )
    .await?;
    Ok(())
}

/// The groups `at`'s roster gives `gid` on `host`: `Err` describes what it lists instead.
async fn roster_groups(w: &FleetWorld, at: &str, gid: &str, host: &str) -> Result<BTreeSet<String>, String> {
    let entries = roster_of(w, at).await.map_err(|e| e.to_string())?;
    let entry = entries
        .iter()
        .find(|e| e["gid"] == json!(gid) && e["host"] == json!(host))
        .ok_or_else(|| format!("not listed on {host}: {entries:?}"))?;
    groups_of(entry).ok_or_else(|| format!("an entry without a groups list: {entry}"))
}

#[then(regex = r#"^within (\d+) heartbeats? the roster of "([^"]+)" lists "([^"]+)" on "([^"]+)" in groups (.+)$"#)]
async fn roster_lists_groups(
    w: &mut FleetWorld,
    n: u32,
    at: String,
    name: String,
    host: String,
    groups: String,
) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let want = quoted(&groups);
    let w2: &FleetWorld = w;
    let (at, gid, host, want) = (&at, &gid, &host, &want);
    wait_for(
        &format!("the roster of {at} to list {name} on {host} in groups {want:?}"),
        heartbeats(w, n),
        || async move {
            let got = roster_groups(w2, at, gid, host).await?;
            if got == *want {
                Ok(Some(()))
            } else {
                Err(format!("groups {got:?}"))
            }
        },
    )
    .await?;
    Ok(())
}

/// PRB-2 across renewals: for more than a ttl (3H) every named roster keeps the entity with
/// exactly its groups — a renewal that dropped or emptied them would show within the window.
#[then(regex = r#"^over (\d+) heartbeats the rosters of (.+) keep listing "([^"]+)" on "([^"]+)" in groups (.+)$"#)]
async fn rosters_keep_groups(
    w: &mut FleetWorld,
    n: u32,
    ats: String,
    name: String,
    host: String,
    groups: String,
) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let want = quoted(&groups);
    let ats = quoted(&ats);
    let w2: &FleetWorld = w;
    let (gid, host, want, ats) = (&gid, &host, &want, &ats);
    hold_for(
        &format!("{name} listed on {host} in groups {want:?} by {ats:?}"),
        heartbeats(w, n),
        || async move {
            for at in ats {
                let got = roster_groups(w2, at, gid, host)
                    .await
                    .map_err(|e| format!("the roster of {at}: {e}"))?;
                if got != *want {
                    return Err(format!("the roster of {at} gives groups {got:?}"));
                }
            }
            Ok(())
        },
    )
    .await?;
    Ok(())
}

// ---- PRB-4: a per-entity peer played by the probe ----

/// The `_gateway` heartbeat of a gateway that does not batch (SPEC §2.2's body, no
/// `capabilities`), live for 3H.
fn old_gateway_body(w: &FleetWorld) -> (Vec<u8>, u64) {
    let ttl_ms = (w.heartbeat() * 3).as_millis() as u64;
    let body = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl_ms,
        "profiles": [],
    });
    (body.to_string().into_bytes(), ttl_ms)
}

/// PRB-4, first half: the probe heartbeats as a per-entity gateway of host "probe", one heartbeat
/// per `_gateway` heartbeat of `host` (so every H), until `host` has heartbeated `name` on its own
/// twice since the first; then it falls silent.
#[when(
    regex = r#"^the probe heartbeats as a per-entity gateway until host "([^"]+)" has heartbeated "([^"]+)" on its own twice, within (\d+) heartbeats$"#
)]
async fn plays_old_gateway(w: &mut FleetWorld, host: String, name: String, n: u32) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let key = w
        .keys
        .get("probe")
        .cloned()
        .ok_or_else(|| anyhow!("no key for host \"probe\""))?;
    let (body, ttl_ms) = old_gateway_body(w);
    let probe = w.probe().await?;
    let roster = w.wire.roster_tap()?;
    let since = roster.fetch().await?.len();
    let deadline = tokio::time::Instant::now() + scaled(heartbeats(w, n));
    let mut beats = 0;
    loop {
        let (msg, _) = presence_message(&key, "_gateway", &body, ttl_ms);
        probe.publish(&msg).await?;
        let last = tokio::time::Instant::now();
        beats += 1;
        // The pace of a gateway's heartbeat: the next one follows `host`'s next `_gateway` beat.
        let seen = roster.fetch().await?.len();
        let host_ref = &host;
        let all = wait_for(
            &format!("the next _gateway heartbeat of {host}"),
            heartbeats(w, 2),
            || {
                let roster = roster.clone();
                async move {
                    let all = roster.fetch().await.map_err(|e| e.to_string())?;
                    if all.iter().skip(seen).any(|m| gateway_beat(m, host_ref)) {
                        Ok(Some(all))
                    } else {
                        Err(format!("{} presence message(s) captured", all.len()))
                    }
                }
            },
        )
        .await?;
        let ups = all.iter().skip(since).filter(|m| own_up(m, &host, &gid)).count();
        if ups >= 2 {
            w.notes.old_gateway_silent_since = Some(last);
            return Ok(());
        }
        ensure!(
            tokio::time::Instant::now() < deadline,
            "with a per-entity gateway live ({beats} heartbeat(s) of it), {host} heartbeated {name} on its own \
             {ups} time(s), expected 2 (PRB-4)"
        );
    }
}

/// PRB-4, second half: once the per-entity gateway has been silent for `silent` heartbeats (its
/// entry lived 3H) plus the delivery slack, the window opens at `host`'s next `_gateway`
/// heartbeat (a round begun after the entry expired) and lasts `n` heartbeats, in which `host`
/// publishes no `up` of `name` of its own.
#[then(
    regex = r#"^once that gateway has been silent for (\d+) heartbeats, over (\d+) heartbeats the probe sees no heartbeat of "([^"]+)" of its own from host "([^"]+)"$"#
)]
async fn none_after_silence(w: &mut FleetWorld, silent: u32, n: u32, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let since = w
        .notes
        .old_gateway_silent_since
        .ok_or_else(|| anyhow!("the probe played no per-entity gateway"))?;
    let cutoff = since + w.heartbeat() * silent + scaled(DELIVERY_SLACK);
    let roster = w.wire.roster_tap()?;
    let (gid, host) = (&gid, &host);
    // The tap's length at the cutoff: messages captured later were published after it, or at most
    // a delivery before it.
    let at_cutoff = OnceLock::new();
    let at_cutoff = &at_cutoff;
    let start = wait_for(
        &format!("{host}'s first _gateway heartbeat {silent} heartbeats after the per-entity gateway's last"),
        w.heartbeat() * (silent + 2) + DELIVERY_SLACK * 2,
        || {
            let roster = roster.clone();
            async move {
                if tokio::time::Instant::now() < cutoff {
                    return Err("the per-entity gateway's entry may still be live".to_string());
                }
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                let mark = *at_cutoff.get_or_init(|| all.len());
                match all.iter().skip(mark).position(|m| gateway_beat(m, host)) {
                    Some(i) => Ok(Some(mark + i + 1)),
                    None => Err(format!("no _gateway heartbeat of {host} since the cutoff")),
                }
            }
        },
    )
    .await?;
    hold_for(
        &format!("no heartbeat of {name} of its own from {host} with no per-entity gateway live"),
        heartbeats(w, n),
        || {
            let roster = roster.clone();
            async move {
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                match all.iter().skip(start).find(|m| own_up(m, host, gid)) {
                    Some(m) => Err(format!("a heartbeat of its own on {} (PRB-4)", m.routing_key)),
                    None => Ok(()),
                }
            }
        },
    )
    .await?;
    Ok(())
}
