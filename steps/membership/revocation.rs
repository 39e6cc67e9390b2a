//! MEM-4: revocation and expiry. A certificate revoked by any form of the KRL specification
//! (`serial:`, `id:`, `key:`, `hash:`), or past its validity, stops verifying within 2 s of the
//! file change or of the expiry: what is signed with it is rejected (`revoked`, `cert_expired`),
//! its host leaves every roster, and a gateway whose own certificate it is reports not ready.
//! The probe signs with the host's key itself (the suite minted it), so "its messages" are there
//! to judge whatever the host's own gateway still sends.

use std::time::{Duration, SystemTime};

use anyhow::{anyhow, bail};
use cucumber::{then, when};
use fleet_conformance::credentials::krl::Revoke;
use fleet_conformance::credentials::openssh::{fingerprint, host_key_line, write_public_key};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::probe::Crafted;
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, time_scale, wait_for};

use crate::world::FleetWorld;

use super::rosters::{gid_of, roster};
use super::{Changed, by_deadline, ca_dir, current_key, two_seconds_after};

#[when(
    regex = r#"^the certificate of "([^"]+)" is revoked by (its serial|its key id|its public key|its key's SHA256 fingerprint) in every revocation list$"#
)]
async fn revoked_by(w: &mut FleetWorld, host: String, how: String) -> anyhow::Result<()> {
    let cert = w.membership.cert(&host)?.clone();
    let key = current_key(w, &host)?;
    let entry = match how.as_str() {
        "its serial" => Revoke::Serial(cert.serial),
        "its key id" => Revoke::Id(cert.key_id),
        "its public key" => Revoke::Key(host_key_line(&key)),
        "its key's SHA256 fingerprint" => {
            let dir = ca_dir(w).join("keys");
            std::fs::create_dir_all(&dir)?;
            let path = dir.join(format!("{host}-fingerprint-{}.pub", uuid::Uuid::new_v4().simple()));
            write_public_key(&key, &path)?;
            Revoke::Hash(fingerprint(&path)?)
        }
        other => bail!("no revocation by {other:?}"),
    };
    super::files::revoke(w, entry)
}

/// The skew gateways allow (`FLEET_CLOCK_SKEW_MS`, SPEC default 30 s).
pub(super) fn skew(w: &FleetWorld) -> Duration {
    let ms = w
        .gateway_env
        .get("FLEET_CLOCK_SKEW_MS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(30_000);
    Duration::from_millis(ms)
}

/// `t` as a tokio instant (a past `t` is now).
fn instant_of(t: SystemTime) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => now + ahead,
        Err(_) => now,
    }
}

/// The certificate expires: past `valid before` and the skew every gateway allows (MEM-2's "valid
/// now (± FLEET_CLOCK_SKEW_MS)"). "Within 2 s" counts from there.
#[when(expr = "the certificate of {string} expires")]
async fn expires(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let ends = w.membership.cert(&host)?.validity.ends_at() + skew(w);
    let rounds = w.membership.traffic.as_ref().map_or(0, |t| t.rounds());
    w.membership.changed = Some(Changed {
        at: instant_of(ends),
        unix_ms: ends
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
        rounds,
    });
    Ok(())
}

/// Until a second before `valid before`, the certified host stays listed: its certificate is
/// valid, and a gateway that dropped it early would be wrong too.
#[then(
    regex = r#"^until its certificate is about to expire the roster of "([^"]+)" keeps listing "([^"]+)" on "([^"]+)"$"#
)]
async fn listed_until(w: &mut FleetWorld, at: String, name: String, on: String) -> anyhow::Result<()> {
    let gid = gid_of(w, &name)?;
    let until = instant_of(w.membership.cert(&on)?.validity.ends_at()) - Duration::from_secs(1);
    let (gid, at, on, w) = (&gid, &at, &on, &*w);
    let listed = || async move {
        let entries = roster(w, at).await?;
        if entries
            .iter()
            .any(|e| e["gid"] == gid.as_str() && e["host"] == on.as_str())
        {
            Ok(())
        } else {
            Err(format!("not listed: {entries:?}"))
        }
    };
    wait_for(&format!("{name} listed by {at}"), w.heartbeat() * 2, || async {
        listed().await.map(Some)
    })
    .await?;
    let window = until.saturating_duration_since(tokio::time::Instant::now());
    anyhow::ensure!(
        window > Duration::from_secs(1),
        "the certificate of {on} is about to expire already: the scenario's start took too long"
    );
    hold_for(
        &format!("{name} listed by {at} while the certificate of {on} is valid"),
        window.div_f64(time_scale()),
        listed,
    )
    .await?;
    Ok(())
}

/// MEM-4 / CONTRACT §12: a gateway whose own certificate is revoked or expired answers `/readyz`
/// 503 within 2 s, and keeps doing so.
#[then(regex = r#"^within 2 seconds the gateway on "([^"]+)" answers /readyz 503, and still does over a window$"#)]
async fn not_ready(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let gw = &w.host(&host)?.gateway;
    let deadline = two_seconds_after(w, Duration::ZERO)?;
    let status = || async move {
        let (status, v) = gw.get("/readyz").await.map_err(|e| e.to_string())?;
        if status == 503 {
            Ok(())
        } else {
            Err(format!("/readyz answered {status}: {v}"))
        }
    };
    by_deadline(
        &format!("the gateway on {host} to answer /readyz 503"),
        deadline,
        || async { status().await.map(Some) },
    )
    .await?;
    hold_for(&format!("the gateway on {host} not ready"), ABSENCE_WINDOW, status).await?;
    Ok(())
}

/// The probe signs a message with `host`'s key itself (the suite minted it): with its current key,
/// a message "signed with" that key or its certificate whatever the host's own gateway still
/// sends — judged like a row of the envelope catalogue (dead-lettered, the check logged, never
/// acted on); with the key it held before its last rotation, a message "still in flight" that
/// must verify (MEM-3: receivers keep every valid key until its certificate expires).
#[when(
    regex = r#"^the probe publishes a (SEND|REPLY) from "([^"]+)" to "([^"]+)" signed with the (old )?key of "([^"]+)"$"#
)]
async fn signed_with_key_of(
    w: &mut FleetWorld,
    kind: String,
    from: String,
    to: String,
    old: String,
    host: String,
) -> anyhow::Result<()> {
    let from_gid = gid_of(w, &from)?;
    let to_gid = w.gid(&to)?;
    let key = if old.is_empty() {
        current_key(w, &host)?
    } else {
        let history = w.membership.key_history.get(&host).cloned().unwrap_or_default();
        history
            .len()
            .checked_sub(2)
            .and_then(|i| history.get(i).cloned())
            .ok_or_else(|| anyhow!("{host} has not rotated: it has no old key"))?
    };
    let text = format!("signed with the key of {host} {}", uuid::Uuid::new_v4().simple());
    let body = text.as_bytes().to_vec();
    let env = Envelope::new(&kind, &from_gid, &to_gid, &host).signed_by(&key, &body);
    w.probe()
        .await?
        .publish(&Crafted::from_envelope("bridge.msg", &to_gid, &env, &body))
        .await
        .map_err(|e| anyhow!("publishing the {kind} signed by {host}: {e}"))?;
    if old.is_empty() {
        w.wire.record_hostile(env.msg_id(), &text);
        w.membership.probe_sent.insert(env.msg_id().to_string());
    } else {
        w.membership.in_flight = Some(env.msg_id().to_string());
    }
    Ok(())
}
