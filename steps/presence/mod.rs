//! Steps of presence (SPEC §8): the union roster as each gateway reports it.
//!
//! [`batch`] holds the host-batched presence checks (SPEC §17) that judge remote rosters and a
//! per-entity peer played by the probe; the probe-as-batching-host steps are `envelope::batch`.

mod batch;

use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::probe::Captured;
use fleet_conformance::timing::{hold_for, wait_for};
use serde_json::Value;

use crate::world::FleetWorld;

/// (host, gid) pairs a gateway's `GET /v1/roster` lists, plus the gateway entries' profiles.
async fn roster_of(w: &FleetWorld, host: &str) -> anyhow::Result<Vec<Value>> {
    let (status, v) = w.host(host)?.gateway.get("/v1/roster").await?;
    ensure!(status == 200, "GET /v1/roster on {host} answered {status}: {v}");
    Ok(fleet_conformance::contract::roster_entries("GET /v1/roster", &v)?)
}

fn lists(entries: &[Value], gid: &str, host: &str) -> bool {
    entries.iter().any(|e| e["gid"] == gid && e["host"] == host)
}

/// Parses `"w1" on "b"` pairs out of a step's text.
fn pairs(text: &str) -> Vec<(String, String)> {
    let quoted: Vec<&str> = text.split('"').skip(1).step_by(2).collect();
    quoted
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

/// n heartbeats as handed to the gateways (H is already stretched, CONTRACT §7) plus 0.5 s for
/// the steps' own delivery and looks, as the *nominal* duration [`wait_for`] and [`hold_for`]
/// stretch: only the 0.5 s is stretched, H not a second time.
fn heartbeats(w: &FleetWorld, n: u32) -> Duration {
    (w.heartbeat() * n).div_f64(fleet_conformance::timing::time_scale()) + Duration::from_millis(500)
}

#[then(regex = r#"^within (\d+) heartbeats? the rosters of (.+) all list (.+)$"#)]
async fn rosters_converge(w: &mut FleetWorld, n: u32, hosts: String, wanted: String) -> anyhow::Result<()> {
    let hosts: Vec<String> = hosts.split('"').skip(1).step_by(2).map(str::to_string).collect();
    let mut want: Vec<(String, String)> = Vec::new();
    for (name, host) in pairs(&wanted) {
        want.push((w.gid(&name)?, host));
    }
    for h in &hosts {
        want.push(("_gateway".into(), h.clone()));
    }
    let started = std::time::Instant::now();
    for h in &hosts {
        let w2: &FleetWorld = w;
        wait_for(&format!("the roster of {h} to converge"), heartbeats(w, n), || {
            let want = want.clone();
            let h = h.clone();
            async move {
                let entries = roster_of(w2, &h).await.map_err(|e| e.to_string())?;
                let missing: Vec<_> = want.iter().filter(|(g, host)| !lists(&entries, g, host)).collect();
                if missing.is_empty() {
                    Ok(Some(()))
                } else {
                    Err(format!("missing {missing:?}"))
                }
            }
        })
        .await?;
    }
    eprintln!("roster converged on {} hosts in {:.0?}", hosts.len(), started.elapsed());
    Ok(())
}

#[given(expr = "the roster of {string} lists {string} on {string}")]
#[then(expr = "the roster of {string} lists {string} on {string}")]
async fn roster_lists(w: &mut FleetWorld, at: String, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let w2: &FleetWorld = w;
    wait_for(&format!("{name} in the roster of {at}"), heartbeats(w, 2), || {
        let (gid, at, host) = (gid.clone(), at.clone(), host.clone());
        async move {
            let entries = roster_of(w2, &at).await.map_err(|e| e.to_string())?;
            if lists(&entries, &gid, &host) {
                Ok(Some(()))
            } else {
                Err(format!("{entries:?}"))
            }
        }
    })
    .await?;
    Ok(())
}

#[then(regex = r#"^within (\d+) heartbeats? the roster of "([^"]+)" no longer lists "([^"]+)"$"#)]
async fn roster_drops(w: &mut FleetWorld, n: u32, at: String, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let w2: &FleetWorld = w;
    wait_for(&format!("{name} to leave the roster of {at}"), heartbeats(w, n), || {
        let (gid, at) = (gid.clone(), at.clone());
        async move {
            let entries = roster_of(w2, &at).await.map_err(|e| e.to_string())?;
            if entries.iter().any(|e| e["gid"] == gid.as_str()) {
                Err("still listed".into())
            } else {
                Ok(Some(()))
            }
        }
    })
    .await?;
    Ok(())
}

/// Whether a captured presence renews `gid`: its own `up`, or a batch (PRB-1) listing it.
pub(crate) fn renews(m: &Captured, gid: &str) -> bool {
    let Ok(body) = serde_json::from_slice::<Value>(&m.body) else {
        return false;
    };
    if m.routing_key.ends_with(&format!(".{gid}")) {
        return body["state"] == "up";
    }
    m.routing_key.ends_with("._gateway")
        && body["entities"]
            .as_array()
            .is_some_and(|l| l.iter().any(|e| e["gid"] == gid && e["state"] != "down"))
}

/// The `state` of a captured presence of `gid` (routing key `roster.<host>.<gid>`), if it is one.
fn presence_state(m: &Captured, gid: &str) -> Option<String> {
    if !m.routing_key.ends_with(&format!(".{gid}")) {
        return None;
    }
    let body: Value = serde_json::from_slice(&m.body).ok()?;
    body["state"].as_str().map(str::to_string)
}

/// PRS-2 with SPN-5 (contract §4): once a stopped entity's `down` is on the wire, its host
/// publishes no `up` of it — every gateway would list it again for a whole ttl. Judged on the
/// probe's `bridge.roster` tap (one queue: the broker's order of one publisher's messages) over
/// a window, and the `down` must have been seen by its end.
#[then(regex = r#"^over (\d+) heartbeats? the probe sees no heartbeat of "([^"]+)" after its down$"#)]
async fn no_up_after_down(w: &mut FleetWorld, n: u32, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let roster = w.wire.roster_tap()?;
    let states = || {
        let (roster, gid) = (roster.clone(), gid.clone());
        async move {
            let all = roster.fetch().await.map_err(|e| e.to_string())?;
            Ok::<Vec<String>, String>(all.iter().filter_map(|m| presence_state(m, &gid)).collect())
        }
    };
    hold_for(
        &format!("no heartbeat of {name} after its down"),
        heartbeats(w, n),
        || {
            let states = states();
            async move {
                let states = states.await?;
                match states.iter().position(|s| s == "down") {
                    Some(i) if states[i..].iter().any(|s| s == "up") => {
                        Err(format!("its presence in wire order: {states:?}"))
                    }
                    _ => Ok(()),
                }
            }
        },
    )
    .await?;
    let states = states().await.map_err(|e| anyhow!(e))?;
    ensure!(
        states.iter().any(|s| s == "down"),
        "the probe saw no down of {name}; its presence in wire order: {states:?}"
    );
    Ok(())
}

#[then(
    regex = r#"^within (\d+) heartbeats? the roster of "([^"]+)" lists the gateway of "([^"]+)" with profiles "([^"]*)"$"#
)]
async fn gateway_profiles(
    w: &mut FleetWorld,
    n: u32,
    at: String,
    host: String,
    profiles: String,
) -> anyhow::Result<()> {
    let mut want: Vec<String> = profiles
        .split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect();
    want.sort();
    let w2: &FleetWorld = w;
    wait_for(
        &format!("the gateway of {host} in the roster of {at}"),
        heartbeats(w, n),
        || {
            let (at, host, want) = (at.clone(), host.clone(), want.clone());
            async move {
                let entries = roster_of(w2, &at).await.map_err(|e| e.to_string())?;
                let Some(e) = entries
                    .iter()
                    .find(|e| e["gid"] == "_gateway" && e["host"] == host.as_str())
                else {
                    return Err(format!("no _gateway entry for {host}: {entries:?}"));
                };
                let mut got: Vec<String> = e["profiles"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|p| p.as_str().map(str::to_string))
                    .collect();
                got.sort();
                if e["role"] == "gateway" && got == want {
                    Ok(Some(()))
                } else {
                    Err(format!("entry {e}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[when(expr = "host {string} tries to register a worker with the gid of {string}")]
async fn register_clone(w: &mut FleetWorld, host: String, original: String) -> anyhow::Result<()> {
    let gid = w.gid(&original)?;
    let clone = format!("{original}-clone");
    let r = w
        .add_entity_with_gid(&host, &clone, "worker", None, vec![], Some(&gid))
        .await;
    w.notes.registration = Some((host, gid, r.map_err(|e| format!("{e:#}"))));
    Ok(())
}

/// CON-2: the registration fails (a non-2xx answer: docs/CONTRACT.md, local API) and the
/// gateway logs the refusal at ERROR, naming the gid or its inbox (CONTRACT §5). The wording
/// around the name is the gateway's.
#[then(expr = "the registration is refused and logged at ERROR")]
async fn registration_refused(w: &mut FleetWorld) -> anyhow::Result<()> {
    let (host, gid, outcome) = w
        .notes
        .registration
        .clone()
        .ok_or_else(|| anyhow!("no second registration was tried"))?;
    let Err(answer) = outcome else {
        bail!("the second registration, on {host}, was accepted");
    };
    let gw = &w.host(&host)?.gateway;
    let (answer, names) = (&answer, &vec![gid]);
    wait_for(
        &format!("the gateway on {host} to log the refused consume at ERROR naming {names:?} (CON-2)"),
        Duration::from_secs(5),
        || async move {
            if fleet_conformance::contract::con2_refusal(&gw.log(), names).is_some() {
                Ok(Some(()))
            } else {
                Err(format!(
                    "no ERROR line naming {names:?}; the refusal answered: {answer}"
                ))
            }
        },
    )
    .await?;
    Ok(())
}

#[then(expr = "the inbox of {string} is gone")]
async fn inbox_gone(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let q = fleet_conformance::names::inbox(&w.gid(&name)?);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    wait_for(&format!("{q} to be deleted"), Duration::from_secs(5), || {
        let (suite, vhost, q) = (suite.clone(), vhost.clone(), q.clone());
        async move {
            match suite.broker.management().queue(&vhost, &q).await {
                Ok(None) => Ok(Some(())),
                Ok(Some(_)) => Err("queue still exists".into()),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    Ok(())
}

#[then(expr = "herdr on {string} shows the pane of {string} closed")]
async fn pane_closed(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let h = w.host(&host)?;
    wait_for(&format!("pane {pane} closed"), Duration::from_secs(5), || {
        let exists = h.herdr.pane_exists(&pane);
        async move {
            if exists {
                Err("pane still open".into())
            } else {
                Ok(Some(()))
            }
        }
    })
    .await?;
    Ok(())
}

#[when(expr = "host {string} claims the gid of {string} in a signed heartbeat")]
async fn probe_claims(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let key = w
        .keys
        .get(&host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host}"))?;
    let probe = w.probe().await?;
    probe.announce(&key, &gid, "worker", Duration::from_secs(60)).await?;
    // A marker claim on the same channel right after (the probe publishes on one channel): once
    // a roster lists it, the claim above (routed earlier into the same roster queue) has been
    // judged too.
    let marker = uuid::Uuid::new_v4().to_string();
    probe.announce(&key, &marker, "worker", Duration::from_secs(60)).await?;
    w.notes.claim = Some((marker, host));
    Ok(())
}

#[then(expr = "the roster of {string} has judged that claim")]
async fn claim_judged(w: &mut FleetWorld, at: String) -> anyhow::Result<()> {
    let (gid, host) = w.notes.claim.clone().ok_or_else(|| anyhow!("no claim was made"))?;
    let w2: &FleetWorld = w;
    wait_for("the marker claim in the roster", heartbeats(w, 2), || {
        let (gid, host, at) = (gid.clone(), host.clone(), at.clone());
        async move {
            let entries = roster_of(w2, &at).await.map_err(|e| e.to_string())?;
            if lists(&entries, &gid, &host) {
                Ok(Some(()))
            } else {
                Err("marker not listed yet".into())
            }
        }
    })
    .await?;
    Ok(())
}

#[then(expr = "the roster of {string} still lists {string} on {string} only")]
async fn still_lists_only(w: &mut FleetWorld, at: String, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let entries = roster_of(w, &at).await?;
    let claims: Vec<&Value> = entries.iter().filter(|e| e["gid"] == gid.as_str()).collect();
    ensure!(
        claims.len() == 1 && claims[0]["host"] == host.as_str(),
        "claims of {name}: {claims:?}"
    );
    Ok(())
}

#[when(expr = "{int} heartbeats of other hosts' entities queue up in every roster")]
async fn presence_flood(w: &mut FleetWorld, n: usize) -> anyhow::Result<()> {
    // Host "e" is trusted by every gateway and runs none: its entities are ordinary, valid
    // presence that each gateway must apply, one by one, before what was queued after them.
    let key = w.keys.get("e").cloned().ok_or_else(|| anyhow!("no key for host e"))?;
    let confirmed = w
        .probe()
        .await?
        .flood_presence(&key, n, Duration::from_secs(600))
        .await?;
    ensure!(
        confirmed == n,
        "only {confirmed} of {n} heartbeats were confirmed by the broker"
    );
    Ok(())
}

#[when(expr = "the presence of {string} outlives its TTL while the gateway on {string} is frozen")]
async fn outlives_ttl(w: &mut FleetWorld, name: String, frozen: String) -> anyhow::Result<()> {
    // The frozen gateway last applied a heartbeat of `name` before it was frozen; its entry
    // expires 3 heartbeats (ttlMs) later. Four heartbeats of `name` seen on the wire after this
    // step began prove more than three intervals passed, whatever the machine's speed.
    //
    // A heartbeat of `name` is its own PRESENCE or, from a gateway that batches (SPEC §17), its
    // host's `_gateway` heartbeat listing it: both renew its entry.
    w.host(&frozen)?;
    let e = w.entity(&name)?;
    let gid = w.gid(&name)?;
    let keys = vec![
        format!("roster.{}.{gid}", e.host),
        format!("roster.{}._gateway", e.host),
    ];
    // The tap's queue (exclusive to the scenario's probe) lives until cleanup closes the probe;
    // what is judged next is `roster.<host>`, which it does not touch.
    let tap = w.probe().await?.tap_keys("bridge.roster", &keys).await?;
    let key = &keys[0];
    wait_for(
        &format!("4 heartbeats of {name} on {key} or in batches"),
        heartbeats(w, 6),
        || {
            let (tap, gid) = (&tap, &gid);
            async move {
                // `fetch` returns everything captured so far.
                let all = tap.fetch().await.map_err(|e| e.to_string())?;
                let n = all.iter().filter(|m| renews(m, gid)).count();
                if n >= 4 {
                    Ok(Some(()))
                } else {
                    Err(format!("{n} heartbeat(s) so far"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then(expr = "the gateway on {string} has worked through its roster backlog")]
async fn roster_backlog_done(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    // `roster.<host>` (SPEC §1) holds what the gateway has not applied yet; live heartbeats keep
    // a few in flight, so "worked through" is "down to a handful". The deadline is long: a
    // loaded machine applies a large backlog slowly, and that is not what is judged here.
    let queue = format!("roster.{host}");
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    wait_for(&format!("{queue} worked through"), Duration::from_secs(120), || {
        let (suite, vhost, queue) = (suite.clone(), vhost.clone(), queue.clone());
        async move {
            match suite.broker.management().queue(&vhost, &queue).await {
                Ok(Some(q)) if q.messages_ready + q.messages_unacknowledged <= 10 => Ok(Some(())),
                Ok(Some(q)) => Err(format!(
                    "{} ready, {} unacknowledged",
                    q.messages_ready, q.messages_unacknowledged
                )),
                Ok(None) => Err(format!("no queue {queue}")),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    Ok(())
}
