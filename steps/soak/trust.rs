//! The nemesis' strikes on trust (SPEC §18, gateways on certificates: [`super::certs`]): a key
//! rotated mid-traffic, and a certificate revoked then replaced.
//!
//! **`rotate`** (MEM-3): the struck host gets a new key and a new certificate over it from the
//! fleet CA; the suite replaces its key file, then its certificate file, then sends SIGHUP
//! (CONTRACT §12), and waits for its `_gateway` presence carrying the new certificate and signed
//! with the new key on `bridge.roster`, through a tap of a probe connection made for the strike
//! and closed after it (the `close` strike must never pick the probe's connection). Receivers keep
//! the old key while its certificate is valid, so nothing in flight may be lost or rejected: the
//! history check judges that like any other strike.
//!
//! **`revoke-restore`** (MEM-4): the struck host's certificate is revoked in every revocation list
//! — by serial or by key id, in turn — and the suite waits until it took effect as CONTRACT §12
//! says (within 2 s: the host's `/readyz` 503, and every other roster listing nothing of it when
//! that was its only valid certificate: after a rotation its older keys stay valid until their
//! certificates expire, MEM-3, so the host keeps a valid key, and only what it signs now is
//! rejected). It stays
//! revoked for a period while operations flow: what the host signs is rejected (`revoked`), so a
//! reply it sends is acknowledged by its gateway and then dead-lettered by the main's, and a brief
//! to or from it ends `inject_timeout` (its INJECTED, or the SEND itself, rejected). Then a new
//! certificate with a new serial over the same key is installed (renamed over, SIGHUP) — the old
//! revocation stays in the lists — and the suite waits until the host is ready and every roster
//! lists its entities again. The history check counts what the host could not complete as failed
//! or unknown, never lost ([`super::revoked`]).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use fleet_conformance::credentials::krl::Revoke;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::envelope::Envelope;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::{Captured, Probe};
use fleet_conformance::timing::{WaitTimeout, wait_for};
use serde_json::Value;

use crate::world::FleetWorld;

use super::nemesis::{Rng, Strike};

/// SPEC §18's "within 2 s", plus one observation round (nominal).
const TWO_SECONDS: Duration = Duration::from_millis(2300);

/// The gateways' heartbeat as the world sets it, nominal (steps/world.rs scales it).
const HEARTBEAT: Duration = Duration::from_secs(1);

/// How long a struck host may take to be ready before a strike, or to publish its new presence:
/// a strike may follow a cut, a close or a broker restart, and a gateway reconnects with a backoff
/// of up to 10 s (CON-3), nominal.
const RECONNECT: Duration = Duration::from_secs(12);

/// One trust strike on one of `hosts` (seeded): `(target, done, detail)` for the nemesis' record.
/// `hold`: how long a revoked certificate stays revoked.
pub(super) async fn strike_trust(
    w: &mut FleetWorld,
    strike: Strike,
    rng: &mut Rng,
    hold: Duration,
) -> (String, bool, String) {
    let hosts: Vec<String> = w
        .soak
        .fleet
        .as_ref()
        .map(|f| f.hosts.keys().cloned().collect())
        .unwrap_or_default();
    if hosts.is_empty() {
        return ("-".into(), false, "no host runs on certificates".into());
    }
    let host = hosts[rng.below(hosts.len())].clone();
    let result = match strike {
        Strike::Rotate => rotate(w, &host).await,
        _ => {
            // Serial and key id in turn: both are per-certificate forms (a `key:` or `hash:` line
            // would revoke the key under every certificate, the new one too).
            let earlier = w
                .soak
                .events
                .iter()
                .filter(|e| e.strike == Strike::RevokeRestore)
                .count();
            revoke_restore(w, &host, earlier % 2 == 1, hold).await
        }
    };
    match result {
        Ok((done, detail)) => (host, done, detail),
        Err(e) => (host, false, format!("{e:#}")),
    }
}

/// Replaces `host`'s key file (when `key` is given), then its certificate file, then sends SIGHUP.
fn install(w: &FleetWorld, host: &str, key: Option<&HostKey>, cert_line: &str) -> anyhow::Result<()> {
    let gw = &w.host(host)?.gateway;
    if let Some(key) = key {
        write_replace(&gw.spec.key_file(), &format!("{}\n", key.seed_base64()), 0o600)?;
    }
    let fleet = w
        .soak
        .fleet
        .as_ref()
        .ok_or_else(|| anyhow!("the soak's hosts are not on certificates"))?;
    write_replace(&fleet.cert_path(host), &format!("{cert_line}\n"), 0o644)?;
    gw.signal(libc::SIGHUP)
        .with_context(|| format!("SIGHUP to the gateway on {host}"))
}

fn body(c: &Captured) -> Value {
    serde_json::from_slice(&c.body).unwrap_or(Value::Null)
}

/// MEM-3: a new key and a new certificate over it, installed as CONTRACT §12 says; done once the
/// host's `_gateway` presence carries the new certificate, signed with the new key.
async fn rotate(w: &mut FleetWorld, host: &str) -> anyhow::Result<(bool, String)> {
    let vhost = w.vhost().await?;
    let url = w.suite()?.broker.amqp_url(&vhost);
    let probe = Probe::connect(&url).await?;
    let tap = probe.tap("bridge.roster", &format!("roster.{host}._gateway")).await;
    let key = HostKey::generate(host);
    let fleet = w
        .soak
        .fleet
        .as_mut()
        .ok_or_else(|| anyhow!("the soak's hosts are not on certificates"))?;
    let old_serial = fleet.host(host)?.cert.serial;
    let cert = fleet.issue(host, &key)?;
    let installed = install(w, host, Some(&key), &cert.line);
    let t0 = Instant::now();
    if let Some(f) = w.soak.fleet.as_mut() {
        // Whatever the signal did, the files now hold the new pair: a restart starts on it.
        f.adopt(host, key.clone(), cert.clone());
    }
    let outcome = match (installed, tap) {
        (Err(e), _) => Err(format!("installing: {e:#}")),
        (Ok(()), Err(e)) => Err(format!("installed; no tap of its presence to see it: {e}")),
        (Ok(()), Ok(tap)) => {
            let pk = key.public_base64();
            let line = cert.line.clone();
            tap.wait_for(
                &format!("the _gateway presence of {host} with its new certificate, signed with its new key"),
                RECONNECT + TWO_SECONDS + HEARTBEAT * 2,
                |c| {
                    body(c)["cert"].as_str().map(str::trim) == Some(line.as_str())
                        && Envelope::from_field_table(&c.headers()).is_ok_and(|e| e.verify(&pk, &c.body).is_ok())
                },
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
    };
    probe.close().await;
    let what = format!(
        "new key and certificate (serial {old_serial} → {}), SIGHUP",
        cert.serial
    );
    Ok(match outcome {
        Ok(()) => (
            true,
            format!(
                "{what}; _gateway presence with the new certificate under the new key seen in {:.1?}",
                t0.elapsed()
            ),
        ),
        Err(e) => (false, format!("{what}; {e}")),
    })
}

/// `host`'s `/readyz` status.
async fn readyz(w: &FleetWorld, host: &str) -> Result<u16, String> {
    let (status, _) = w
        .host(host)
        .map_err(|e| e.to_string())?
        .gateway
        .get("/readyz")
        .await
        .map_err(|e| e.to_string())?;
    Ok(status)
}

async fn until_readyz(w: &FleetWorld, host: &str, want: u16, nominal: Duration) -> Result<(), WaitTimeout> {
    wait_for(&format!("/readyz {want} on {host}"), nominal, || async move {
        match readyz(w, host).await? {
            s if s == want => Ok(Some(())),
            s => Err(format!("/readyz {s}")),
        }
    })
    .await
}

/// The gids `at`'s roster lists on host `of`.
async fn listed_on(w: &FleetWorld, at: &str, of: &str) -> Result<BTreeSet<String>, String> {
    let (status, v) = w
        .host(at)
        .map_err(|e| e.to_string())?
        .gateway
        .get("/v1/roster")
        .await
        .map_err(|e| e.to_string())?;
    if status != 200 {
        return Err(format!("GET /v1/roster on {at} answered {status}"));
    }
    let entries = fleet_conformance::contract::roster_entries("GET /v1/roster", &v).map_err(|e| e.to_string())?;
    Ok(entries
        .iter()
        .filter(|e| e["host"] == of)
        .filter_map(|e| e["gid"].as_str().map(str::to_string))
        .collect())
}

/// Waits until every other gateway's roster lists nothing of `host` (`gids` empty) or lists
/// each of `gids` on it.
async fn until_rosters(
    w: &FleetWorld,
    host: &str,
    gids: &BTreeSet<String>,
    nominal: Duration,
) -> Result<(), WaitTimeout> {
    let others: Vec<&String> = w.hosts.keys().filter(|h| *h != host).collect();
    wait_for(
        &if gids.is_empty() {
            format!("every other roster to list nothing of {host}")
        } else {
            format!("every other roster to list {host}'s entities {gids:?}")
        },
        nominal,
        || async {
            for at in &others {
                let listed = listed_on(w, at, host).await?;
                let done = if gids.is_empty() {
                    listed.is_empty()
                } else {
                    gids.is_subset(&listed)
                };
                if !done {
                    return Err(format!("{at} lists {listed:?} on {host}"));
                }
            }
            Ok(Some(()))
        },
    )
    .await
}

/// MEM-4 then MEM-2: `host`'s certificate revoked (by serial, or by key id when `by_id`), held
/// revoked for `hold`, then a new certificate (new serial, same key) installed.
async fn revoke_restore(w: &mut FleetWorld, host: &str, by_id: bool, hold: Duration) -> anyhow::Result<(bool, String)> {
    let mut notes = Vec::new();
    let mut done = true;
    // From a ready host (a strike before may have it still reconnecting): its 503 below is then
    // the revocation's.
    let t = Instant::now();
    if let Err(e) = until_readyz(w, host, 200, RECONNECT).await {
        done = false;
        notes.push(format!("not ready before the revocation: {e}"));
    } else if t.elapsed() > Duration::from_millis(500) {
        notes.push(format!("ready after {:.1?}", t.elapsed()));
    }
    let gids: BTreeSet<String> = w
        .entities
        .values()
        .filter(|e| e.host == host)
        .map(|e| e.gid.clone())
        .collect();
    let fleet = w
        .soak
        .fleet
        .as_mut()
        .ok_or_else(|| anyhow!("the soak's hosts are not on certificates"))?;
    let old = fleet.host(host)?.cert.clone();
    let key = fleet.host(host)?.key.clone();
    let entry = if by_id {
        Revoke::Id(old.key_id.clone())
    } else {
        Revoke::Serial(old.serial)
    };
    let line = entry.line();
    fleet.revoke(entry)?;
    let t0 = Instant::now();
    let still_valid: Vec<u64> = fleet.other_valid(host).iter().map(|c| c.serial).collect();
    // CONTRACT §12: within 2 s the host is not ready, and — when it has no valid key left — no
    // other roster lists it.
    match until_readyz(w, host, 503, TWO_SECONDS).await {
        Ok(()) => notes.push(format!("revoked ({line}): /readyz 503 in {:.1?}", t0.elapsed())),
        Err(e) => {
            done = false;
            notes.push(format!("revoked ({line}): {e}"));
        }
    }
    if still_valid.is_empty() {
        match until_rosters(w, host, &BTreeSet::new(), TWO_SECONDS).await {
            Ok(()) => notes.push(format!("dropped by every other roster in {:.1?}", t0.elapsed())),
            Err(e) => {
                done = false;
                notes.push(e.to_string());
            }
        }
    } else {
        // Its older keys are still valid (MEM-3 keeps them until their certificates expire):
        // what it signs now is rejected, but it keeps a valid key, so no roster drops it at
        // once (its entries age out unless restored first).
        notes.push(format!(
            "its earlier certificates {still_valid:?} (older keys) stay valid: not dropped from the rosters at once"
        ));
    }
    // Operations flow meanwhile; the host cannot complete its own.
    let left = hold.saturating_sub(t0.elapsed());
    tokio::time::sleep(left).await;
    let fleet = w
        .soak
        .fleet
        .as_mut()
        .ok_or_else(|| anyhow!("the soak's hosts are not on certificates"))?;
    let cert = fleet.issue(host, &key)?;
    let installed = install(w, host, None, &cert.line);
    let t1 = Instant::now();
    if let Some(f) = w.soak.fleet.as_mut() {
        f.adopt(host, key, cert.clone());
    }
    if let Err(e) = installed {
        return Ok((false, format!("{}; restoring: {e:#}", notes.join("; "))));
    }
    // Ready again, and listed again with its entities' next heartbeat.
    let back = RECONNECT + TWO_SECONDS + HEARTBEAT * 2;
    let ready = until_readyz(w, host, 200, back).await;
    let listed = until_rosters(w, host, &gids, back).await;
    match (ready, listed) {
        (Ok(()), Ok(())) => notes.push(format!(
            "new certificate (serial {}) installed, SIGHUP: ready and listed everywhere again in {:.1?} (revoked for {:.1?})",
            cert.serial,
            t1.elapsed(),
            t1 - t0
        )),
        (ready, listed) => {
            done = false;
            notes.push(format!(
                "new certificate (serial {}) installed, SIGHUP: ready: {}; listed: {}",
                cert.serial,
                ready.map_or_else(|e| e.to_string(), |()| "yes".into()),
                listed.map_or_else(|e| e.to_string(), |()| "yes".into())
            ));
        }
    }
    Ok((done, notes.join("; ")))
}
