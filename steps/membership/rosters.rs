//! What each gateway's roster (`GET /v1/roster`) lists after a membership change: a host let in
//! is listed, a host without a valid key left is listed nowhere — neither its entities nor its
//! `_gateway` entry (CONTRACT §12) — within 2 s of the change (of the expiry).

use std::time::Duration;

use cucumber::then;
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, scaled};
use serde_json::Value;

use crate::world::FleetWorld;

use super::{OBSERVE, Until, by_deadline, quoted, two_seconds_after};

/// The entries of `at`'s roster.
pub(super) async fn roster(w: &FleetWorld, at: &str) -> Result<Vec<Value>, String> {
    let gw = &w.host(at).map_err(|e| e.to_string())?.gateway;
    let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("GET /v1/roster on {at} answered {status}: {v}"));
    }
    fleet_conformance::contract::roster_entries("GET /v1/roster", &v).map_err(|e| e.to_string())
}

/// The gid a step names: an entity of the scenario, or a fake one the probe announced.
pub(super) fn gid_of(w: &FleetWorld, name: &str) -> anyhow::Result<String> {
    if let Ok(g) = w.gid(name) {
        return Ok(g);
    }
    w.membership
        .fakes
        .get(name)
        .map(|(_, g)| g.clone())
        .ok_or_else(|| anyhow::anyhow!("no entity {name:?} in this scenario"))
}

/// The hosts a step names: quoted ones, or every running gateway ("every roster").
fn rosters_named(w: &FleetWorld, text: &str) -> Vec<String> {
    let named = quoted(text);
    if named.is_empty() {
        w.hosts.keys().cloned().collect()
    } else {
        named
    }
}

/// Waits until each of `at` lists (or no longer lists anything of host `of` when `gid` is
/// `None`) by `until` (SPEC's number judged as written after a change, CONTRACT §7).
async fn converge(w: &FleetWorld, at: &[String], gid: Option<&str>, of: &str, until: Until) -> anyhow::Result<()> {
    for h in at {
        let what = match gid {
            Some(g) => format!("the roster of {h} to list {g} on {of}"),
            None => format!("the roster of {h} to list nothing of host {of}"),
        };
        by_deadline(&what, until.clone(), || async move {
            let entries = roster(w, h).await?;
            let of_host: Vec<&Value> = entries.iter().filter(|e| e["host"] == of).collect();
            let done = match gid {
                Some(g) => of_host.iter().any(|e| e["gid"] == g),
                None => of_host.is_empty(),
            };
            if done {
                Ok(Some(()))
            } else {
                Err(format!("entries of {of}: {of_host:?}"))
            }
        })
        .await?;
    }
    Ok(())
}

/// MEM-1 / MEM-4 / CONTRACT §12: a host without a valid key left is dropped from the rosters.
#[then(regex = r#"^within 2 seconds (?:the rosters? of (.+)|every roster) lists? nothing of host "([^"]+)"$"#)]
async fn nothing_of(w: &mut FleetWorld, at: String, of: String) -> anyhow::Result<()> {
    let at = rosters_named(w, &at);
    converge(w, &at, None, &of, two_seconds_after(w, Duration::ZERO)?).await
}

/// MEM-1: a host added to the peers files is a known peer within 2 s; its entities show up with
/// their next heartbeat: judged against 2 s as written plus H as handed to the gateways.
#[then(regex = r#"^within 2 seconds and a heartbeat the rosters of (.+) list "([^"]+)" on "([^"]+)"$"#)]
async fn listed_after_change(w: &mut FleetWorld, at: String, name: String, of: String) -> anyhow::Result<()> {
    let at = rosters_named(w, &at);
    let gid = gid_of(w, &name)?;
    let deadline = two_seconds_after(w, Duration::ZERO)? + w.heartbeat();
    converge(w, &at, Some(&gid), &of, deadline).await
}

/// MEM-5: within 2H of the joining gateway's readiness, every roster lists its entity.
#[then(regex = r#"^within 2 heartbeats of its start the rosters of (.+) all list "([^"]+)" on "([^"]+)"$"#)]
async fn listed_after_join(w: &mut FleetWorld, at: String, name: String, of: String) -> anyhow::Result<()> {
    let at = rosters_named(w, &at);
    let gid = gid_of(w, &name)?;
    let joined = w
        .membership
        .joined
        .ok_or_else(|| anyhow::anyhow!("no host joined in this scenario"))?;
    let deadline = joined + w.heartbeat() * 2 + scaled(OBSERVE);
    converge(w, &at, Some(&gid), &of, deadline.into()).await
}

/// A host never let in: over a window no roster lists anything of it.
#[then(expr = "over a window no roster lists anything of host {string}")]
async fn never_listed(w: &mut FleetWorld, of: String) -> anyhow::Result<()> {
    let at = rosters_named(w, "");
    let (at, of, w) = (&at, &of, &*w);
    hold_for(
        &format!("no roster lists anything of {of}"),
        ABSENCE_WINDOW,
        || async move {
            for h in at {
                let entries = roster(w, h).await?;
                let listed: Vec<&Value> = entries.iter().filter(|e| e["host"] == of.as_str()).collect();
                if !listed.is_empty() {
                    return Err(format!("the roster of {h} lists {listed:?}"));
                }
            }
            Ok(())
        },
    )
    .await?;
    Ok(())
}
