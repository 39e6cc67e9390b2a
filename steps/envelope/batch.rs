//! Host-batched presence (SPEC §17, capability `presence-batch`) and [C-17] (unknown JSON body
//! fields are ignored by every gateway).
//!
//! The probe plays a batching host: it publishes signed `_gateway` heartbeats of host "probe"
//! that list fake entities (PRB-1's wire form), and the suite judges what every gateway's roster
//! (`GET /v1/roster`) makes of them (PRB-2). What a gateway under test sends is judged on the
//! probe's `bridge.roster` tap (PRB-1, PRB-4), in the broker's order of that gateway's messages.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use fleet_conformance::envelope::{Envelope, new_uuid};
use fleet_conformance::probe::{Captured, Crafted, presence_message};
use fleet_conformance::timing::{hold_for, wait_for};
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::{FAKE_TTL, key, poll_until, tap};

/// Nominal deadline of "within n heartbeats" (the suite's H plus slack for one roster round).
fn heartbeats(w: &FleetWorld, n: u32) -> Duration {
    w.heartbeat() * n + Duration::from_millis(500)
}

/// Quoted names out of a step's text.
fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

/// The gid a batch lists for `name`: a scenario entity's own gid (to make a conflicting claim),
/// or a fake entity of host "probe" (made on first use).
fn batch_gid(w: &mut FleetWorld, name: &str) -> String {
    if let Ok(gid) = w.gid(name) {
        return gid;
    }
    w.wire.fakes.entry(name.to_string()).or_insert_with(new_uuid).clone()
}

/// The probe's signed `_gateway` heartbeat for host "probe": a PRB-1 batch listing `gids`.
async fn publish_batch(w: &mut FleetWorld, gids: &[String]) -> anyhow::Result<Envelope> {
    let ttl_ms = FAKE_TTL.as_millis() as u64;
    let entities: Vec<Value> = gids
        .iter()
        .map(|g| json!({"gid": g, "state": "up", "role": "worker", "groups": [], "agentStatus": "idle"}))
        .collect();
    let body = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl_ms,
        "profiles": [], "capabilities": ["presence-batch"], "entities": entities,
    })
    .to_string()
    .into_bytes();
    let (msg, env) = presence_message(&key(w, "probe")?, "_gateway", &body, ttl_ms);
    w.probe().await?.publish(&msg).await?;
    w.wire.batches.push(env.msg_id().to_string());
    Ok(env)
}

#[when(regex = r#"^the probe publishes a batch of host "probe" listing (.+)$"#)]
async fn probe_batch(w: &mut FleetWorld, names: String) -> anyhow::Result<()> {
    let gids: Vec<String> = quoted(&names).iter().map(|n| batch_gid(w, n)).collect();
    publish_batch(w, &gids).await?;
    Ok(())
}

/// Each running gateway's roster: whether it lists `gid` on `host`.
async fn listed_everywhere(w: &FleetWorld, gid: &str, host: &str, listed: bool) -> Result<Option<()>, String> {
    for (name, h) in &w.hosts {
        let (status, v) = h.gateway.get("/v1/roster").await.map_err(|e| e.to_string())?;
        let entries = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
            .map_err(|e| format!("{name}: status {status}: {e}"))?;
        let has = entries
            .iter()
            .any(|e| e["gid"] == json!(gid) && e["host"] == json!(host));
        if has != listed {
            return Err(format!("the roster of {name}: {v}"));
        }
    }
    Ok(Some(()))
}

#[then(regex = r#"^within (\d+) heartbeats? every roster (lists|no longer lists) (.+) on host "([^"]+)"$"#)]
async fn every_roster(w: &mut FleetWorld, n: u32, how: String, names: String, host: String) -> anyhow::Result<()> {
    let listed = how == "lists";
    for name in quoted(&names) {
        let gid = batch_gid(w, &name);
        let w2: &FleetWorld = w;
        wait_for(
            &format!("every roster to {how} {name} on {host}"),
            heartbeats(w, n),
            || {
                let (gid, host) = (gid.clone(), host.clone());
                async move { listed_everywhere(w2, &gid, &host, listed).await }
            },
        )
        .await?;
    }
    Ok(())
}

/// PRB-2 with PRS-3: a refused entry is logged `presence_conflict` (WARN or above), naming the
/// batch's msgId, and the batch itself is not dead-lettered (the rest of it applied).
#[then("every gateway logged the last batch's conflicting entry as presence_conflict, and dead-lettered no batch")]
async fn conflict_logged(w: &mut FleetWorld) -> anyhow::Result<()> {
    let id = w
        .wire
        .batches
        .last()
        .cloned()
        .ok_or_else(|| anyhow!("the probe published no batch"))?;
    for (name, h) in &w.hosts {
        let gw = &h.gateway;
        let id = &id;
        wait_for(
            &format!("the gateway on {name} to log presence_conflict for batch {id}"),
            Duration::from_secs(5),
            || async move {
                let hit = gw.log().lines().any(|l| {
                    l.contains("presence_conflict")
                        && l.contains(id.as_str())
                        && ["WARN", "ERROR", "warn", "error"].iter().any(|lvl| l.contains(lvl))
                });
                if hit {
                    Ok(Some(()))
                } else {
                    Err("no such line yet".to_string())
                }
            },
        )
        .await?;
    }
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    let dead: Vec<Captured> = dlx
        .fetch()
        .await?
        .into_iter()
        .filter(|c| c.message_id().is_some_and(|m| w.wire.batches.contains(&m)))
        .collect();
    ensure!(dead.is_empty(), "a batch was dead-lettered: {dead:?}");
    Ok(())
}

fn body_of(m: &Captured) -> Value {
    serde_json::from_slice(&m.body).unwrap_or(Value::Null)
}

/// A per-entity `up` of `gid` from `host` (routing key `roster.<host>.<gid>`).
fn own_up(m: &Captured, host: &str, gid: &str) -> bool {
    m.routing_key == format!("roster.{host}.{gid}") && body_of(m)["state"] == "up"
}

/// A `_gateway` heartbeat of `host`.
fn gateway_beat(m: &Captured, host: &str) -> bool {
    m.routing_key == format!("roster.{host}._gateway") && body_of(m)["state"] == "up"
}

/// PRB-1 on the wire: `host`'s `_gateway` heartbeat declares `presence-batch` and lists `name`
/// with its role and agent status. Returns the position on the tap just after that batch.
async fn batch_listing(w: &FleetWorld, host: &str, name: &str, status: &str, role: &str) -> anyhow::Result<usize> {
    let gid = w.gid(name)?;
    let roster = w.wire.roster_tap()?;
    let (gid, role) = (&gid, &role);
    let at = wait_for(
        &format!("a batch of {host} listing {name} as {status}"),
        heartbeats(w, 3),
        || {
            let roster = roster.clone();
            async move {
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                let hit = all.iter().rposition(|m| {
                    let b = body_of(m);
                    gateway_beat(m, host)
                        && b["capabilities"]
                            .as_array()
                            .is_some_and(|c| c.contains(&json!("presence-batch")))
                        && b["entities"].as_array().is_some_and(|l| {
                            l.iter().any(|e| {
                                e["gid"] == json!(gid)
                                    && e["state"] == "up"
                                    && e["role"] == json!(role)
                                    && e["agentStatus"] == json!(status)
                            })
                        })
                });
                match hit {
                    Some(i) => Ok(Some(i + 1)),
                    None => Err(format!("{} presence message(s) captured", all.len())),
                }
            }
        },
    )
    .await?;
    Ok(at)
}

#[then(
    regex = r#"^the probe sees a batch of host "([^"]+)" that declares presence-batch and lists "([^"]+)" as an? (idle|working) (worker|main|orchestrator)$"#
)]
async fn sees_batch(
    w: &mut FleetWorld,
    host: String,
    name: String,
    status: String,
    role: String,
) -> anyhow::Result<()> {
    let at = batch_listing(w, &host, &name, &status, &role).await?;
    w.wire.batch_mark = Some(at);
    Ok(())
}

/// PRB-2 (renewal by batches alone) with PRB-4 (no per-entity heartbeat while every gateway
/// batches): over more than a ttl (3H) the entity stays listed elsewhere, and from the batch
/// seen last on, its host publishes no presence of it of its own.
#[then(
    regex = r#"^over (\d+) heartbeats the roster of "([^"]+)" keeps listing "([^"]+)" on "([^"]+)", and the probe sees no heartbeat of it of its own$"#
)]
async fn kept_by_batches(w: &mut FleetWorld, n: u32, at: String, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let mark = w.wire.batch_mark.ok_or_else(|| anyhow!("no batch was seen yet"))?;
    let roster = w.wire.roster_tap()?;
    let gw = &w.host(&at)?.gateway;
    let (gid, host) = (&gid, &host);
    hold_for(
        &format!("{name} listed by {at} on batches alone"),
        heartbeats(w, n),
        || {
            let roster = roster.clone();
            async move {
                let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
                let entries = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
                    .map_err(|e| format!("status {status}: {e}"))?;
                if !entries
                    .iter()
                    .any(|e| e["gid"] == json!(gid) && e["host"] == json!(host))
                {
                    return Err(format!("no longer listed: {v}"));
                }
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                match all.iter().skip(mark).find(|m| own_up(m, host, gid)) {
                    Some(m) => Err(format!("a heartbeat of its own: {}", m.routing_key)),
                    None => Ok(()),
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// PRB-3: a per-entity PRESENCE of `name` from `host` (not a batch entry) with that state or
/// agent status.
#[then(
    regex = r#"^within (\d+) heartbeats? the probe sees host "([^"]+)" announce "([^"]+)" (up|down|as idle|as working) on its own$"#
)]
async fn announced_alone(w: &mut FleetWorld, n: u32, host: String, name: String, what: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let roster = w.wire.roster_tap()?;
    let key = format!("roster.{host}.{gid}");
    let (key, what) = (&key, &what);
    wait_for(
        &format!("{host} to announce {name} {what} on its own"),
        heartbeats(w, n),
        || {
            let roster = roster.clone();
            async move {
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                let hit = all.iter().any(|m| {
                    let b = body_of(m);
                    m.routing_key == *key
                        && match what.strip_prefix("as ") {
                            Some(status) => b["state"] == "up" && b["agentStatus"] == json!(status),
                            None => b["state"] == json!(what),
                        }
                });
                if hit {
                    Ok(Some(()))
                } else {
                    Err(format!("{} presence message(s) captured", all.len()))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[given(expr = "host {string} runs a gateway with presence batching off")]
async fn old_gateway(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    w.host_env
        .entry(host.clone())
        .or_default()
        .insert("FLEET_PRESENCE_BATCH".into(), "off".into());
    w.start_host(&host).await
}

/// PRB-4: with an old gateway's `_gateway` on the wire, `host` heartbeats `name` on its own too.
#[then(
    regex = r#"^within (\d+) heartbeats the probe sees host "([^"]+)" heartbeat "([^"]+)" on its own twice after the old gateway "([^"]+)" appeared$"#
)]
async fn resumes(w: &mut FleetWorld, n: u32, host: String, name: String, old: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let roster = w.wire.roster_tap()?;
    let (gid, host, old) = (&gid, &host, &old);
    wait_for(
        &format!("{host} to heartbeat {name} on its own"),
        heartbeats(w, n),
        || {
            let roster = roster.clone();
            async move {
                let all = roster.fetch().await.map_err(|e| e.to_string())?;
                let Some(since) = all.iter().position(|m| gateway_beat(m, old)) else {
                    return Err(format!("no _gateway heartbeat of {old} yet"));
                };
                let ups = all.iter().skip(since).filter(|m| own_up(m, host, gid)).count();
                if ups >= 2 {
                    Ok(Some(()))
                } else {
                    Err(format!("{ups} since {old} appeared"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then(regex = r#"^within (\d+) heartbeats the roster of "([^"]+)" no longer lists the gateway of "([^"]+)"$"#)]
async fn gateway_gone(w: &mut FleetWorld, n: u32, at: String, old: String) -> anyhow::Result<()> {
    let gw = &w.host(&at)?.gateway;
    let old = &old;
    wait_for(
        &format!("the gateway of {old} to leave the roster of {at}"),
        heartbeats(w, n),
        || async move {
            let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
            let entries = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
                .map_err(|e| format!("status {status}: {e}"))?;
            if entries
                .iter()
                .any(|e| e["gid"] == "_gateway" && e["host"] == json!(old))
            {
                Err("still listed".to_string())
            } else {
                Ok(Some(()))
            }
        },
    )
    .await?;
    // From the next `_gateway` heartbeat of any batching host on, rounds began after the expiry.
    let roster = w.wire.roster_tap()?;
    let now = roster.fetch().await?.len();
    w.wire.batch_mark = Some(now);
    Ok(())
}

/// PRB-4: once no old gateway is live, `host` sends no per-entity heartbeat of `name`. The window
/// starts after `host`'s first `_gateway` heartbeat since the old one left its roster: that
/// heartbeat's round began after it, and a round's per-entity heartbeats follow its batch.
#[then(regex = r#"^over (\d+) heartbeats the probe sees no heartbeat of "([^"]+)" of its own from host "([^"]+)"$"#)]
async fn stops(w: &mut FleetWorld, n: u32, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let mark = w.wire.batch_mark.ok_or_else(|| anyhow!("no mark on the tap"))?;
    let roster = w.wire.roster_tap()?;
    let (gid, host) = (&gid, &host);
    let start = wait_for(&format!("a _gateway heartbeat of {host}"), heartbeats(w, 2), || {
        let roster = roster.clone();
        async move {
            let all = roster.fetch().await.map_err(|e| e.to_string())?;
            match all.iter().skip(mark).position(|m| gateway_beat(m, host)) {
                Some(i) => Ok(Some(mark + i + 1)),
                None => Err("none yet".to_string()),
            }
        }
    })
    .await?;
    hold_for(&format!("no heartbeat of {name} of its own"), heartbeats(w, n), || {
        let roster = roster.clone();
        async move {
            let all = roster.fetch().await.map_err(|e| e.to_string())?;
            match all.iter().skip(start).find(|m| own_up(m, host, gid)) {
                Some(m) => Err(format!("a heartbeat of its own on {}", m.routing_key)),
                None => Ok(()),
            }
        }
    })
    .await?;
    Ok(())
}

// ---- [C-17]: unknown JSON body fields are ignored, by every gateway ----

#[when(expr = "the probe announces {string} on host {string} with a body field no gateway knows")]
async fn announces_unknown_field(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = new_uuid();
    let ttl_ms = FAKE_TTL.as_millis() as u64;
    let body = json!({
        "state": "up", "role": "worker", "groups": [], "agentStatus": "idle", "ttlMs": ttl_ms,
        "futureField": {"nested": [1, 2, 3]}, "capabilities": ["no-such-capability"],
    })
    .to_string()
    .into_bytes();
    let (msg, env) = presence_message(&key(w, &host)?, &gid, &body, ttl_ms);
    w.probe().await?.publish(&msg).await?;
    w.wire.batches.push(env.msg_id().to_string());
    w.wire.fakes.insert(name, gid);
    Ok(())
}

/// A FAILED notice (a JSON body, SPEC §2.2) from a fake entity of host "probe" to a main, its body
/// carrying a field no gateway knows: the main's gateway must hold it for the main like any.
#[when(expr = "{string} on the probe host sends {string} a FAILED whose body has a field no gateway knows")]
async fn failed_unknown_field(w: &mut FleetWorld, from: String, main: String) -> anyhow::Result<()> {
    let to = w.gid(&main)?;
    let from_gid = w
        .wire
        .fakes
        .get(&from)
        .cloned()
        .ok_or_else(|| anyhow!("no fake {from}"))?;
    let body = json!({"reason": "busy", "detail": "c17", "futureField": true})
        .to_string()
        .into_bytes();
    // A notice names the message it is about (corrId, ENV-1); no send of the main is open for
    // it, so the gateway holds it for the main to drain.
    let mut env = Envelope::new("FAILED", &from_gid, &to, "probe");
    env.set("corrId", &new_uuid());
    let env = env.signed_by(&key(w, "probe")?, &body);
    w.probe()
        .await?
        .publish(&Crafted::from_envelope("bridge.msg", &to, &env, &body))
        .await?;
    w.wire.last_valid = Some(env);
    Ok(())
}

#[then(expr = "{string} drains that FAILED, which was never dead-lettered")]
async fn drains_failed(w: &mut FleetWorld, main: String) -> anyhow::Result<()> {
    let env = w
        .wire
        .last_valid
        .clone()
        .ok_or_else(|| anyhow!("no message was sent"))?;
    let id = env.msg_id().to_string();
    poll_until(w, &main, |m| m["msgId"] == json!(id)).await?;
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    let dead: Vec<Captured> = dlx
        .fetch()
        .await?
        .into_iter()
        .filter(|c| c.message_id().is_some_and(|m| m == id || w.wire.batches.contains(&m)))
        .collect();
    ensure!(dead.is_empty(), "dead-lettered: {dead:?}");
    Ok(())
}
