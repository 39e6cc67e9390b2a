//! MEM-3: a gateway re-keys without a flag day. The suite replaces its key file, then its
//! certificate file, then sends SIGHUP (CONTRACT §12: a gateway that reacts to either signal meets
//! the same end state). The new certificate's `_gateway` presence, signed with the new key, must
//! be confirmed before the new key signs anything else — judged on one probe tap bound to both
//! `bridge.roster` and `bridge.msg`, in the broker's order. A certificate over another key than
//! the new one is refused: an ERROR naming the certificate file, the old pair kept.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::credentials::write_replace;
use fleet_conformance::envelope::Envelope;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::{Captured, Tap};
use fleet_conformance::reaction::{Bound, Stamped};
use fleet_conformance::timing::{time_scale, wait_for};
use serde_json::Value;

use crate::world::FleetWorld;

use super::files::cert_path;
use super::{TWO_SECONDS, an_hour, changed_now, current_key, error_naming, issue, last_change, two_seconds_after};

/// The probe's tap of `bridge.roster` and `bridge.msg` in one queue, made on first use (before the
/// first rotation): one queue keeps the broker's order across both exchanges.
pub(super) async fn wire(w: &mut FleetWorld) -> anyhow::Result<Arc<Tap>> {
    if let Some(t) = &w.membership.wire {
        return Ok(t.clone());
    }
    let p = w.probe().await?;
    let tap = p.tap("bridge.roster", "roster.#").await?;
    p.bind(tap.queue(), "bridge.msg", "#").await?;
    let tap = Arc::new(tap);
    w.membership.wire = Some(tap.clone());
    Ok(tap)
}

/// The end state of a rotation, reached as CONTRACT §12 says: the key file replaced, then the
/// certificate file (if any), then SIGHUP.
pub(super) fn install(w: &mut FleetWorld, host: &str, key: &HostKey, cert_line: Option<&str>) -> anyhow::Result<()> {
    let key_file = w.host(host)?.gateway.spec.key_file();
    write_replace(&key_file, &format!("{}\n", key.seed_base64()), 0o600)?;
    if let Some(line) = cert_line {
        write_replace(&cert_path(w, host), &format!("{line}\n"), 0o644)?;
    }
    w.host(host)?
        .gateway
        .signal(libc::SIGHUP)
        .map_err(|e| anyhow!("SIGHUP to the gateway on {host}: {e}"))?;
    changed_now(w);
    Ok(())
}

/// From now on `host` holds `key` (a restart keeps it, the probe signs with it).
pub(super) fn adopt(w: &mut FleetWorld, host: &str, key: HostKey) {
    w.membership
        .key_history
        .entry(host.to_string())
        .or_default()
        .push(key.clone());
    w.keys.insert(host.to_string(), key);
}

#[when(regex = r#"^"([^"]+)" rotates to a new key and a (?:new )?certificate from "([^"]+)"( over another key)?$"#)]
async fn rotates(w: &mut FleetWorld, host: String, ca: String, other: String) -> anyhow::Result<()> {
    let refused = !other.is_empty();
    let tap = wire(w).await?;
    let mark = tap.fetch().await?.len();
    let new = HostKey::generate(&host);
    let certified = if refused { HostKey::generate(&host) } else { new.clone() };
    let cert = issue(w, &ca, &certified, &host, an_hour())?;
    install(w, &host, &new, Some(&cert.line))?;
    if !refused {
        adopt(w, &host, new);
        w.membership.certs.insert(host, cert);
    }
    w.membership.rotation = Some((mark, refused));
    Ok(())
}

/// MEM-1's rotation without a CA: the key a peers entry already lists beside the old one.
#[when(expr = "the gateway on {string} switches to its second key")]
async fn switches(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let tap = wire(w).await?;
    let mark = tap.fetch().await?.len();
    let key = w
        .membership
        .next_key
        .remove(&host)
        .ok_or_else(|| anyhow!("no peers entry lists a second key for {host}"))?;
    install(w, &host, &key, None)?;
    adopt(w, &host, key);
    w.membership.rotation = Some((mark, false));
    Ok(())
}

/// What `host` published since the last rotation began, in the broker's order, each with whether
/// it verifies under `key`.
pub(super) async fn since_rotation(
    w: &FleetWorld,
    host: &str,
    key: &HostKey,
) -> anyhow::Result<Vec<(Captured, Envelope, bool)>> {
    let (mark, _) = w
        .membership
        .rotation
        .ok_or_else(|| anyhow!("no rotation in this scenario"))?;
    let tap = w
        .membership
        .wire
        .clone()
        .ok_or_else(|| anyhow!("the probe has no tap of the wire"))?;
    let pk = key.public_base64();
    Ok(tap
        .fetch()
        .await?
        .into_iter()
        .skip(mark)
        .filter_map(|c| {
            let env = Envelope::from_field_table(&c.headers()).ok()?;
            (env.value("host") == host).then(|| {
                let ok = env.verify(&pk, &c.body).is_ok();
                (c, env, ok)
            })
        })
        .collect())
}

#[then(regex = r#"^within 2 heartbeats the probe sees host "([^"]+)" sign a REPLY and an INJECTED with its new key$"#)]
async fn signs_with_new_key(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let key = current_key(w, &host)?;
    // The scenario's own bound, not SPEC's (the traffic's round trips decide when a REPLY and an
    // INJECTED come): 2 heartbeats and 2 s, nominal, stretched once by `wait_for` — the heartbeat
    // the gateway was handed is already stretched, so it is taken back to nominal first.
    let bound = w.heartbeat().div_f64(time_scale()) * 2 + TWO_SECONDS;
    let (w2, host2, key2) = (&*w, &host, &key);
    wait_for(
        &format!("{host} to sign a REPLY and an INJECTED with its new key"),
        bound,
        || async move {
            let seen = since_rotation(w2, host2, key2).await.map_err(|e| e.to_string())?;
            let kinds: Vec<&str> = seen.iter().filter(|(_, _, ok)| *ok).map(|(_, e, _)| e.kind()).collect();
            if kinds.contains(&"REPLY") && kinds.contains(&"INJECTED") {
                Ok(Some(()))
            } else {
                Err(format!(
                    "{} message(s) of {host2} since the rotation; under the new key: {kinds:?}",
                    seen.len()
                ))
            }
        },
    )
    .await?;
    Ok(())
}

/// MEM-3 ([C-19]'s order): the first message signed with the new key is the `_gateway` presence
/// carrying the new certificate.
#[then(
    expr = "the first message {string} signed with its new key is its _gateway presence carrying the new certificate"
)]
async fn presence_first(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let key = current_key(w, &host)?;
    let line = w.membership.cert(&host)?.line.clone();
    let seen = since_rotation(w, &host, &key).await?;
    let (c, env, _) = seen
        .iter()
        .find(|(_, _, ok)| *ok)
        .ok_or_else(|| anyhow!("{host} signed nothing with its new key"))?;
    let body: Value = serde_json::from_slice(&c.body).unwrap_or(Value::Null);
    ensure!(
        env.kind() == "PRESENCE" && c.routing_key == format!("roster.{host}._gateway"),
        "the first message {host} signed with its new key is a {} on {} ({}), not its _gateway presence",
        env.kind(),
        c.routing_key,
        env.msg_id()
    );
    ensure!(
        body["cert"].as_str().map(str::trim) == Some(line.as_str()),
        "the first _gateway presence {host} signed with its new key carries cert {:?}, not the new certificate {line:?}",
        body["cert"]
    );
    Ok(())
}

/// MEM-3 "on SIGHUP" with [C-21] 4's "at once on SIGHUP", judged as a number (CONTRACT §7): the
/// first message the new key signs (the `_gateway` presence carrying the new certificate, [C-19]'s
/// order) is stamped by the gateway within [C-26]'s "at once" (`Bound::at_once`) of the SIGHUP (the
/// suite's clock right after sending it) — the gateway's own stamp, nothing of the observation.
#[then(expr = "{string} applied its rotation at once after the SIGHUP")]
async fn applied_at_once(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let key = current_key(w, &host)?;
    let seen = since_rotation(w, &host, &key).await?;
    let (_, env, _) = seen
        .iter()
        .find(|(_, _, ok)| *ok)
        .ok_or_else(|| anyhow!("{host} signed nothing with its new key"))?;
    let ts = env.ts_ms().map_err(|e| anyhow!(e))?;
    Stamped {
        from_ms: last_change(w)?.unix_ms,
        to_ms: ts,
        transit: Duration::ZERO,
    }
    .judge(
        &format!("the first message {host} signed with its new key ({})", env.kind()),
        &Bound::at_once("MEM-3 / [C-21] 4 / [C-26]: at once on SIGHUP"),
    )?;
    Ok(())
}

/// MEM-3 / CONTRACT §12: a refused rotation is one line at ERROR holding the certificate file's path.
#[then(expr = "within 2 seconds the gateway on {string} logs an ERROR naming its certificate file")]
async fn refusal_logged(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let path = cert_path(w, &host).display().to_string();
    let deadline = two_seconds_after(w, Duration::ZERO)?;
    error_naming(w, &host, &path, deadline).await
}

/// MEM-3: after a refused rotation the old pair is kept: everything the host publishes still
/// verifies under the old key (and it did publish: replies flowed).
#[then(expr = "every message {string} published since the refused rotation is signed with its old key")]
async fn old_pair_kept(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    ensure!(
        w.membership.rotation.is_some_and(|(_, refused)| refused),
        "no refused rotation in this scenario"
    );
    let key = current_key(w, &host)?;
    let seen = since_rotation(w, &host, &key).await?;
    let other: Vec<String> = seen
        .iter()
        .filter(|(_, _, ok)| !ok)
        .map(|(c, e, _)| format!("{} {} on {}", e.kind(), e.msg_id(), c.routing_key))
        .collect();
    ensure!(
        other.is_empty(),
        "{host} signed with another key than its old one after the refused rotation: {other:?}"
    );
    let replies = seen.iter().filter(|(_, e, _)| e.kind() == "REPLY").count();
    ensure!(replies > 0, "{host} published no REPLY since the refused rotation");
    Ok(())
}
