//! SPEC §18 as [C-21] settled it, for other hosts' credentials (CONTRACT §12, "Credential
//! lifecycle"): a renewal over the same key replaces the certificate a receiver holds for that key
//! ([C-21] 8), what `serial:`, `id:` and a CA's `key:` line reach ([C-21] 6), an entity's presence
//! that arrives before its host's key ([C-21] 7), and a `_gateway` presence under a key already
//! held ([C-21] 2). A gateway's own credential ([C-21] 9, 12) is in [`super::lifecycle_own`].
//!
//! The probe plays hosts as in [`super::hostile`] — hosts of its own, whose key is theirs only
//! through the certificate they carry — and also a host every peers file lists with the key the
//! suite minted for it and whose gateway does not run ("d"): a certificate over a pinned key,
//! revoked by serial or id, must leave the key valid ([C-21] 6).

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::credentials::ca::{CertKind, Validity};
use fleet_conformance::credentials::krl::Revoke;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::envelope::{Envelope, new_uuid};
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::{Captured, Crafted, presence_message};
use fleet_conformance::reaction::{Bound, react_within};
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, scaled, time_scale, wait_for};
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::files::{cert_path, revoke};
use super::rosters::roster;
use super::{OBSERVE, TWO_SECONDS, an_hour, changed_now, current_key, issue, last_change, peers_file, sign};

/// How long what the probe announces lives: the whole scenario.
pub(super) const TTL: Duration = Duration::from_secs(600);

/// The key the probe signs with as `host`: a host of its own (made on first use, as
/// [`super::hostile`] makes them), or a host every peers file lists with the key the suite minted
/// for it, whose gateway does not run.
pub(super) fn probe_host_key(w: &mut FleetWorld, host: &str) -> anyhow::Result<HostKey> {
    if let Some(k) = w.membership.played.get(host) {
        return Ok(k.clone());
    }
    ensure!(
        !w.hosts.contains_key(host),
        "host {host:?} runs a gateway: the probe plays only hosts without one"
    );
    if let Some(k) = w.keys.get(host) {
        ensure!(
            peers_file(w).entries.contains_key(host),
            "the suite minted a key for {host:?}, but no peers file lists it"
        );
        return Ok(k.clone());
    }
    let k = HostKey::generate(host);
    w.membership.played.insert(host.to_string(), k.clone());
    Ok(k)
}

/// Publishes `key`'s host's `_gateway` PRESENCE carrying `cert`, as a gateway heartbeats it.
async fn gateway_presence(w: &mut FleetWorld, key: &HostKey, cert: &str) -> anyhow::Result<()> {
    w.probe().await?.publish(&gateway_presence_message(key, cert)).await?;
    Ok(())
}

/// `key`'s host's `_gateway` PRESENCE carrying `cert`, ready to publish.
pub(super) fn gateway_presence_message(key: &HostKey, cert: &str) -> Crafted {
    let ttl_ms = TTL.as_millis() as u64;
    let body = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl_ms,
        "profiles": [], "cert": cert,
    })
    .to_string();
    presence_message(key, "_gateway", body.as_bytes(), ttl_ms).0
}

/// A host certificate from `ca` over the key of a host the probe plays, carried in its `_gateway`
/// presence (with the serial a step names, else the next one).
#[when(
    regex = r#"^the probe, as host "([^"]+)", carries a certificate from "([^"]+)"(?: with serial (\d+))? in its _gateway presence$"#
)]
async fn carries(w: &mut FleetWorld, host: String, ca: String, serial: String) -> anyhow::Result<()> {
    let key = probe_host_key(w, &host)?;
    let cert = match serial.parse::<u64>() {
        Ok(n) => sign(w, &ca, &key, CertKind::Host, std::slice::from_ref(&host), an_hour(), n)?,
        Err(_) => issue(w, &ca, &key, &host, an_hour())?,
    };
    gateway_presence(w, &key, &cert.line).await?;
    w.membership.certs.insert(host, cert);
    Ok(())
}

/// The next heartbeat of a host the probe plays: its `_gateway` presence with the certificate it
/// carries.
#[when(expr = "the probe, as host {string}, heartbeats its _gateway presence")]
async fn heartbeats(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let key = probe_host_key(w, &host)?;
    let line = w.membership.cert(&host)?.line.clone();
    gateway_presence(w, &key, &line).await
}

/// An entity's presence (`up`) on a host the probe plays — whether or not that host showed its key
/// yet ([C-21] 7).
#[when(expr = "the probe, as host {string}, publishes the presence of {string}")]
async fn entity_presence(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let key = probe_host_key(w, &host)?;
    let gid = match w.membership.fakes.get(&name) {
        Some((on, gid)) => {
            ensure!(*on == host, "{name} lives on {on}, not {host}");
            gid.clone()
        }
        None => new_uuid(),
    };
    w.probe().await?.announce(&key, &gid, "worker", TTL).await?;
    w.wire.name_fake(&name, &gid);
    w.membership.fakes.insert(name, (host, gid));
    Ok(())
}

/// A valid brief from an entity the probe announced, signed with its host's key: injected.
#[then(expr = "a brief from {string}, signed by the probe as host {string}, is injected into {string}")]
async fn brief_injected(w: &mut FleetWorld, from: String, host: String, to: String) -> anyhow::Result<()> {
    let key = probe_host_key(w, &host)?;
    let (on, gid) = w
        .membership
        .fakes
        .get(&from)
        .cloned()
        .ok_or_else(|| anyhow!("the probe announced no {from:?}"))?;
    ensure!(on == host, "{from} lives on {on}, not {host}");
    let to_gid = w.gid(&to)?;
    let text = format!("a brief from {from} on {host} {}", new_uuid());
    let env = Envelope::new("SEND", &gid, &to_gid, &host).signed_by(&key, text.as_bytes());
    w.probe()
        .await?
        .publish(&Crafted::from_envelope("bridge.msg", &to_gid, &env, text.as_bytes()))
        .await?;
    w.wire.record_valid_text(&text);
    let e = w.entity(&to)?;
    let herdr = &w.host(&e.host)?.herdr;
    let (pane, text) = (&e.pane, &text);
    wait_for(
        &format!("the brief from {from} on {host} injected into {to}"),
        Duration::from_secs(10),
        || {
            let inputs = herdr.inputs(pane);
            async move {
                if inputs.contains(text) {
                    Ok(Some(()))
                } else {
                    Err(format!("inputs: {inputs:?}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// [C-21] 8: a certificate renewed over the same key (a new serial, a shorter window: the latest
/// certificate, not the longest, is the one that counts), the file replaced, then SIGHUP.
#[when(expr = "{string} renews its certificate from {string} over the same key")]
async fn renews(w: &mut FleetWorld, host: String, ca: String) -> anyhow::Result<()> {
    w.host(&host)?;
    let key = current_key(w, &host)?;
    let first = w.membership.cert(&host)?.clone();
    let shorter = Validity::around_now(Duration::from_secs(300), Duration::from_secs(1800));
    ensure!(
        shorter.to < first.validity.to,
        "the renewal is not shorter than {first:?}"
    );
    let cert = issue(w, &ca, &key, &host, shorter)?;
    write_replace(&cert_path(w, &host), &format!("{}\n", cert.line), 0o644)?;
    w.host(&host)?
        .gateway
        .signal(libc::SIGHUP)
        .map_err(|e| anyhow!("SIGHUP to the gateway on {host}: {e}"))?;
    changed_now(w);
    w.membership.certs.insert(host, cert);
    Ok(())
}

fn body(c: &Captured) -> Value {
    serde_json::from_slice(&c.body).unwrap_or(Value::Null)
}

/// MEM-2 / MEM-3: after a renewal the host's `_gateway` presence carries the renewed certificate,
/// signed with its key.
#[then(
    expr = "within 2 heartbeats the probe sees host {string} carry its renewed certificate in its _gateway presence"
)]
async fn carries_renewed(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let line = w.membership.cert(&host)?.line.clone();
    let key = current_key(w, &host)?.public_base64();
    let tap = w.wire.roster_tap()?;
    let routing = format!("roster.{host}._gateway");
    let (line, key, routing) = (&line, &key, &routing);
    // 2H of the heartbeat as handed to the gateway (already stretched, CONTRACT §7), from the
    // renewal, the observation through the tap measured and taken off.
    let bound = Bound::with_tunable(
        "MEM-3 / scenario: within 2 heartbeats",
        Duration::ZERO,
        w.heartbeat() * 2,
    );
    react_within(
        &format!("a _gateway presence of {host} carrying its renewed certificate"),
        last_change(w)?.at,
        &bound,
        Duration::ZERO,
        || {
            let tap = tap.clone();
            async move {
                let all = tap.fetch().await.map_err(|e| e.to_string())?;
                let carried: Vec<String> = all
                    .iter()
                    .filter(|c| c.routing_key == *routing && body(c)["state"] == "up")
                    .filter(|c| Envelope::from_field_table(&c.headers()).is_ok_and(|e| e.verify(key, &c.body).is_ok()))
                    .map(|c| body(c)["cert"].as_str().unwrap_or_default().trim().to_string())
                    .collect();
                if carried.iter().any(|c| c == line) {
                    Ok(Some(()))
                } else {
                    Err(format!(
                        "{} signed _gateway presence(s), none carrying it",
                        carried.len()
                    ))
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// Every running gateway has applied its roster queue up to now ([C-10]'s order: a roster
/// consumer applies what was queued before): a presence of host "probe" published now is listed
/// by every gateway. What the probe saw on the wire before is in every roster queue before it.
#[then("every gateway has applied what its roster queue held before now")]
async fn caught_up(w: &mut FleetWorld) -> anyhow::Result<()> {
    let key = w
        .keys
        .get("probe")
        .cloned()
        .ok_or_else(|| anyhow!("no key for host probe"))?;
    ensure!(
        peers_file(w).entries.contains_key("probe"),
        "no peers file lists host probe"
    );
    let gid = new_uuid();
    w.probe().await?.announce(&key, &gid, "worker", TTL).await?;
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    for h in &hosts {
        let (w2, gid) = (&*w, &gid);
        wait_for(
            &format!("the roster of {h} to list the probe's marker {gid}"),
            Duration::from_secs(10),
            || async move {
                let entries = roster(w2, h).await?;
                if entries.iter().any(|e| e["gid"] == gid.as_str() && e["host"] == "probe") {
                    Ok(Some(()))
                } else {
                    Err(format!("{} entries, not the marker", entries.len()))
                }
            },
        )
        .await?;
    }
    Ok(())
}

#[when(regex = r#"^serial (\d+) is revoked in every revocation list$"#)]
async fn serial_revoked(w: &mut FleetWorld, serial: u64) -> anyhow::Result<()> {
    revoke(w, Revoke::Serial(serial))
}

/// [C-21] 6: a `key:` line naming a CA's public key (its `.pub` line, as ssh-keygen wrote it).
#[when(expr = "the public key of the CA {string} is revoked in every revocation list")]
async fn ca_key_revoked(w: &mut FleetWorld, ca: String) -> anyhow::Result<()> {
    let line = w.membership.ca(&ca)?.public_line().to_string();
    revoke(w, Revoke::Key(line))
}

#[when(expr = "{string} registers on {string} as a worker whose parent is {string}")]
async fn registers(w: &mut FleetWorld, name: String, host: String, parent: String) -> anyhow::Result<()> {
    w.host(&host)?;
    w.add_entity(&host, &name, "worker", Some(&parent), vec![]).await
}

/// Whether every running gateway's roster lists `gid` on `host`.
async fn listed_by_all(w: &FleetWorld, gid: &str, host: &str) -> Result<bool, String> {
    for h in w.hosts.keys() {
        let entries = roster(w, h).await?;
        if !entries.iter().any(|e| e["gid"] == gid && e["host"] == host) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether no running gateway's roster lists `gid` on `host`.
async fn listed_by_none(w: &FleetWorld, gid: &str, host: &str) -> Result<Option<String>, String> {
    for h in w.hosts.keys() {
        let entries = roster(w, h).await?;
        if entries.iter().any(|e| e["gid"] == gid && e["host"] == host) {
            return Ok(Some(h.clone()));
        }
    }
    Ok(None)
}

/// A host that keeps a valid key keeps its entries: judged from the change until past the 2 s
/// a gateway has to apply it (and a sweep after it), and over a window beyond.
#[then(
    regex = r#"^every roster keeps listing "([^"]+)" on host "([^"]+)" for 2 seconds after the change and a window beyond$"#
)]
async fn keeps_listing_past_change(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    // A hold: the longer, the stricter, so the whole span is stretched like every window.
    let until = last_change(w)?.at + scaled(TWO_SECONDS + OBSERVE + ABSENCE_WINDOW);
    let window = until.saturating_duration_since(tokio::time::Instant::now());
    keeps_listing(w, &name, &host, window.div_f64(time_scale())).await
}

#[then(regex = r#"^every roster still lists "([^"]+)" on host "([^"]+)" over a window$"#)]
async fn still_lists(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    keeps_listing(w, &name, &host, ABSENCE_WINDOW).await
}

async fn keeps_listing(w: &FleetWorld, name: &str, host: &str, nominal: Duration) -> anyhow::Result<()> {
    let gid = super::rosters::gid_of(w, name)?;
    let gid = &gid;
    hold_for(
        &format!("every roster listing {name} on {host}"),
        nominal,
        || async move {
            match listed_by_all(w, gid, host).await? {
                true => Ok(()),
                false => Err(format!("a roster no longer lists {name} ({gid}) on {host}")),
            }
        },
    )
    .await?;
    Ok(())
}

/// [C-21] 7: a presence held for a host that showed no key, then dropped: never listed.
#[then(regex = r#"^over a window no roster lists "([^"]+)" on host "([^"]+)"$"#)]
async fn never_lists(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = super::rosters::gid_of(w, &name)?;
    let (w, gid, host, name) = (&*w, &gid, &host, &name);
    hold_for(
        &format!("no roster listing {name} on {host}"),
        ABSENCE_WINDOW,
        || async move {
            match listed_by_none(w, gid, host).await? {
                None => Ok(()),
                Some(at) => Err(format!("the roster of {at} lists {name} ({gid}) on {host}")),
            }
        },
    )
    .await?;
    Ok(())
}

/// No dead letter, over `n` heartbeats of the gateways' own interval: of any message of `host`
/// (SIG-5: a rejected message is dead-lettered, so none is), or of any PRESENCE at all ([C-21] 7:
/// a presence a gateway cannot verify yet is held, then verified or dropped — never rejected).
#[then(regex = r#"^over (\d+) heartbeats no gateway dead-letters (?:anything of host "([^"]+)"|(a PRESENCE))$"#)]
async fn no_dead_letters(w: &mut FleetWorld, n: u32, host: String, presence: String) -> anyhow::Result<()> {
    let dlx = w.wire.dlx_tap()?;
    let window = (w.heartbeat() * n).div_f64(time_scale()).max(ABSENCE_WINDOW);
    let what = if presence.is_empty() {
        format!("no dead letter of host {host}")
    } else {
        "no dead-lettered PRESENCE".to_string()
    };
    let (host, presence) = (&host, !presence.is_empty());
    hold_for(&what, window, || {
        let dlx = dlx.clone();
        async move {
            let dead: Vec<String> = dlx
                .fetch()
                .await
                .map_err(|e| e.to_string())?
                .iter()
                .filter(|c| {
                    if presence {
                        c.header_str("kind").as_deref() == Some("PRESENCE")
                    } else {
                        c.header_str("host").as_deref() == Some(host.as_str())
                    }
                })
                .map(|c| {
                    format!(
                        "{} {} of host {:?} on {} (dead-lettered from {:?})",
                        c.header_str("kind").unwrap_or_default(),
                        c.message_id().unwrap_or_default(),
                        c.header_str("host"),
                        c.routing_key,
                        c.death_queue()
                    )
                })
                .collect();
            if dead.is_empty() {
                Ok(())
            } else {
                Err(format!("dead-lettered: {dead:?}"))
            }
        }
    })
    .await?;
    Ok(())
}
