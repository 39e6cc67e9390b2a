//! Steps of the envelope-security catalogue (SPEC §2–3): the wire probe crafts hostile messages
//! and the suite checks that every gateway rejects them the SIG-5 way — dead-lettered with
//! `x-death` reason `rejected`, the failed check logged, nothing injected, held or reported as
//! FAILED, and the gateway still serving — and that what gateways publish is complete and signed.
//!
//! The probe holds the trusted host "probe"'s key (pinned in every gateway's peers file) and an
//! untrusted key ("mallory"). It announces fake entities on host "probe" with signed presence, so
//! a crafted message carries exactly the one defect its catalogue row names. Messages are built
//! with the suite's own envelope code (`fleet_conformance::envelope`), never the gateway's.
//!
//! The probe's part of the world ([`WireState`]) is in `state.rs`, what every step here looks up
//! in this file; the steps themselves, by what they check:
//! - [`stage`] — the body limit, the probe's taps and keys, fake entities announced on "probe";
//! - [`craft`] — the hostile message each catalogue row names, for an inbox, the roster or a
//!   control queue;
//! - [`catalogue`] — publishing a row and the SIG-5 checks on what became of it;
//! - [`published`] — what gateways publish: complete, in long strings, signed (ENV-1, SIG-1, ENV-3);
//! - [`copies`] — copies of a message racing its drain (RPL-1, FWD-6);
//! - [`batch`] — host-batched presence (SPEC §17) and unknown body fields ([C-17]);
//! - [`grace`] — the [C-7] grace for a sender whose presence is late (SIG-2);
//! - [`late_ask`] — an ASK past its `expiresAt`, dropped by the gateway (ASK-3, [C-13]);
//! - [`worker_broadcast`] — a worker's own BROADCAST, which its gateway must drop (BRD-2).

mod batch;
mod catalogue;
mod copies;
mod craft;
mod grace;
mod late_ask;
mod published;
mod stage;
mod state;
mod worker_broadcast;

use std::time::Duration;

use anyhow::anyhow;
use fleet_conformance::keys::HostKey;
use fleet_conformance::names::inbox;
use fleet_conformance::timing::wait_for;
use serde_json::{Value, json};

use crate::world::FleetWorld;

pub use state::WireState;
use state::{Hostile, tap};

/// How long a fake entity's presence lives: the whole scenario.
const FAKE_TTL: Duration = Duration::from_secs(600);

fn fake_gid(w: &FleetWorld, name: &str) -> anyhow::Result<String> {
    w.wire
        .fakes
        .get(name)
        .cloned()
        .ok_or_else(|| anyhow!("no fake entity {name:?} announced by the probe"))
}

fn key(w: &FleetWorld, host: &str) -> anyhow::Result<HostKey> {
    if host == "mallory" {
        return w.wire.mallory.clone().ok_or_else(|| anyhow!("no untrusted key"));
    }
    w.keys
        .get(host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host:?}"))
}

/// A target of the catalogue: an entity's inbox, every gateway's roster queue, or one host's
/// control queue (SPAWN and STOP, SPEC §9).
enum Target {
    Inbox { name: String, gid: String, host: String },
    Roster,
    Control { host: String },
}

fn target(w: &FleetWorld, name: &str) -> anyhow::Result<Target> {
    if name == "the roster" {
        return Ok(Target::Roster);
    }
    if let Some(host) = name.strip_prefix("the control queue of ") {
        w.host(host)?;
        return Ok(Target::Control { host: host.to_string() });
    }
    let e = w.entity(name)?;
    Ok(Target::Inbox {
        name: name.to_string(),
        gid: e.gid.clone(),
        host: e.host.clone(),
    })
}

impl Target {
    /// (host, queue) pairs whose gateway must reject the message.
    fn rejecting(&self, w: &FleetWorld) -> Vec<(String, String)> {
        match self {
            Target::Inbox { gid, host, .. } => vec![(host.clone(), inbox(gid))],
            Target::Roster => w.hosts.keys().map(|h| (h.clone(), format!("roster.{h}"))).collect(),
            Target::Control { host } => vec![(host.clone(), format!("control.{host}"))],
        }
    }
}

/// Waits until every running gateway's roster (`GET /v1/roster`) lists `gid` on `host`.
async fn until_listed(w: &FleetWorld, gid: &str, host: &str) -> anyhow::Result<()> {
    for (name, h) in &w.hosts {
        let gw = &h.gateway;
        wait_for(
            &format!("the roster of {name} to list {gid} on {host}"),
            Duration::from_secs(10),
            || async move {
                let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
                let listed = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
                    .map_err(|e| format!("status {status}: {e}"))?
                    .iter()
                    .any(|e| e["gid"] == json!(gid) && e["host"] == json!(host));
                if listed {
                    Ok(Some(()))
                } else {
                    Err(format!("/v1/roster answered {status}: {v}"))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Polls the main until a drained message matches; returns it. Drained messages are recorded.
async fn poll_until(w: &mut FleetWorld, main: &str, pred: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    let handle = w.mcp(main).await?.handle();
    let drained = std::sync::Mutex::new(Vec::new());
    let found = wait_for(&format!("{main} to drain the message"), Duration::from_secs(10), || {
        let handle = handle.clone();
        let drained = &drained;
        let pred = &pred;
        async move {
            let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
            let msgs: Vec<Value> = fleet_conformance::contract::poll_messages(&v).map_err(|e| e.to_string())?;
            let hit = msgs.iter().find(|m| pred(m)).cloned();
            if let Ok(mut d) = drained.lock() {
                d.extend(msgs);
            }
            match hit {
                Some(m) => Ok(Some(m)),
                None => Err("not drained yet".to_string()),
            }
        }
    })
    .await;
    w.wire.drained.extend(drained.into_inner().unwrap_or_default());
    Ok(found?)
}

fn count_id(drained: &[Value], id: &str) -> usize {
    drained.iter().filter(|m| m["msgId"] == json!(id)).count()
}

fn last_hostile(w: &FleetWorld) -> anyhow::Result<&Hostile> {
    w.wire
        .hostile
        .as_ref()
        .ok_or_else(|| anyhow!("the probe has published no hostile message"))
}
