//! MEM-2: the probe plays hosts that present credentials in their `_gateway` presence — a valid
//! certificate from a trusted CA (let in), or a hostile one: another CA's, a user certificate, a
//! principal that is another host, a window not yet open or already closed, a certificate over
//! another key than the one that signed the presence, a truncated or garbage line. The probe
//! holds each played host's key and signs its presence and messages with it, so a hostile row
//! carries exactly the one defect it names. What became of a hostile presence and of the brief
//! sent after it is judged by the envelope catalogue's steps (dead-lettered, the check logged,
//! never acted on) and by the rosters ([`super::rosters`]).

use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use base64::Engine as _;
use cucumber::{then, when};
use fleet_conformance::credentials::ca::{CertKind, Validity, critical_options, describe, signature_algorithm};
use fleet_conformance::envelope::{Envelope, new_uuid};
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::{Crafted, presence_message};
use fleet_conformance::timing::wait_for;
use serde_json::json;

use crate::world::FleetWorld;

use super::files::make_ca;
use super::{an_hour, ca_dir, issue, sign};

/// How long what the probe announces lives: the whole scenario.
pub(super) const TTL: Duration = Duration::from_secs(600);

/// The key of a host the probe plays, made on first use.
pub(super) fn played_key(w: &mut FleetWorld, host: &str) -> anyhow::Result<HostKey> {
    anyhow::ensure!(
        !w.hosts.contains_key(host) && !w.keys.contains_key(host),
        "the probe plays only hosts of its own, not {host:?}"
    );
    Ok(w.membership
        .played
        .entry(host.to_string())
        .or_insert_with(|| HostKey::generate(host))
        .clone())
}

/// The quoted CA name in a credential's text.
fn ca_named(text: &str) -> anyhow::Result<String> {
    text.split('"')
        .nth(1)
        .map(str::to_string)
        .ok_or_else(|| anyhow!("no CA named in {text:?}"))
}

/// The `cert` line a credential's text names, for host `host` holding `key`, and whether it is
/// hostile.
fn credential(w: &mut FleetWorld, host: &str, key: &HostKey, text: &str) -> anyhow::Result<(String, bool)> {
    let me = [host.to_string()];
    if text == "a certificate from a CA no gateway trusts" {
        let rogue = "rogue";
        make_ca(w, rogue)?;
        anyhow::ensure!(
            !w.membership.trusted.iter().flatten().any(|n| n == rogue),
            "the gateways trust the rogue CA"
        );
        return Ok((issue(w, rogue, key, host, an_hour())?.line, true));
    }
    if text == "a garbage certificate" {
        let junk: Vec<u8> = (0..120u8).map(|i| i.wrapping_mul(37).wrapping_add(11)).collect();
        let b64 = base64::engine::general_purpose::STANDARD.encode(junk);
        return Ok((format!("ssh-ed25519-cert-v01@openssh.com {b64} {host}"), true));
    }
    if let Some(rest) = text.strip_prefix("a truncated certificate from ") {
        let line = issue(w, &ca_named(rest)?, key, host, an_hour())?.line;
        let mut parts = line.split_whitespace();
        let (kind, blob) = (parts.next().unwrap_or_default(), parts.next().unwrap_or_default());
        return Ok((format!("{kind} {}", &blob[..blob.len() / 2]), true));
    }
    // [C-21] 10 and 11: an RSA CA's SHA-1 signature, critical options (below).
    if let Some(line) = defective_certificate(w, host, key, text) {
        return Ok((line?, true));
    }
    let ca = ca_named(text)?;
    let serial = w.membership.next_serial();
    let line = if text.starts_with("a valid certificate from ") {
        let cert = issue(w, &ca, key, host, an_hour())?;
        let line = cert.line.clone();
        w.membership.certs.insert(host.to_string(), cert);
        return Ok((line, false));
    } else if text.starts_with("a user certificate from ") {
        sign(w, &ca, key, CertKind::User, &me, an_hour(), serial)?.line
    } else if let Some(other) = text.strip_suffix('"').and_then(|t| t.rsplit_once(" naming host \"")) {
        sign(w, &ca, key, CertKind::Host, &[other.1.to_string()], an_hour(), serial)?.line
    } else if text.ends_with(" naming no host") {
        // CONTRACT §12: no principals at all (ssh-keygen without -n).
        sign(w, &ca, key, CertKind::Host, &[], an_hour(), serial)?.line
    } else if text.ends_with(" not yet valid") {
        let later = Validity::later(Duration::from_secs(3600), Duration::from_secs(3600));
        sign(w, &ca, key, CertKind::Host, &me, later, serial)?.line
    } else if text.ends_with(" that has expired") {
        let past = Validity::past(Duration::from_secs(3600), Duration::from_secs(3600));
        sign(w, &ca, key, CertKind::Host, &me, past, serial)?.line
    } else if text.ends_with(" over another key") {
        let other = HostKey::generate(host);
        sign(w, &ca, &other, CertKind::Host, &me, an_hour(), serial)?.line
    } else {
        bail!("no credential {text:?}")
    };
    Ok((line, true))
}

/// A hostile row of the probe's credentials ([C-21] 10, 11): a host certificate for `host` over
/// `key` from the named CA (a variant signing with SHA-1 `ssh-rsa`, or carrying critical
/// options), checked with `ssh-keygen -L` to carry exactly that defect. `None`: not such a row.
fn defective_certificate(w: &mut FleetWorld, host: &str, key: &HostKey, text: &str) -> Option<anyhow::Result<String>> {
    const SHA1: &str = ", its RSA CA signature SHA-1 ssh-rsa";
    const OPTIONS: &str = " carrying critical options";
    let rest = text.strip_prefix("a certificate from \"")?;
    let (ca, defect) = if let Some(ca) = rest.strip_suffix(&format!("\"{SHA1}")) {
        (ca, SHA1)
    } else if let Some(ca) = rest.strip_suffix(&format!("\"{OPTIONS}")) {
        (ca, OPTIONS)
    } else {
        return None;
    };
    let made = (|| {
        let cert = issue(w, ca, key, host, an_hour())?;
        let said = describe(&ca_dir(w).join("described"), &cert.line)?;
        if defect == SHA1 {
            ensure!(
                signature_algorithm(&said).as_deref() == Some("ssh-rsa"),
                "the CA {ca:?} does not sign with SHA-1 ssh-rsa: ssh-keygen -L says\n{said}"
            );
        } else {
            ensure!(
                !critical_options(&said).is_empty(),
                "the CA {ca:?} puts no critical option in its certificates: ssh-keygen -L says\n{said}"
            );
        }
        Ok(cert.line)
    })();
    Some(made)
}

#[when(regex = r#"^the probe, as host "([^"]+)", presents (.+) in its _gateway presence$"#)]
async fn presents(w: &mut FleetWorld, host: String, text: String) -> anyhow::Result<()> {
    let key = played_key(w, &host)?;
    let (cert, hostile) = credential(w, &host, &key, &text)?;
    let ttl_ms = TTL.as_millis() as u64;
    let body = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl_ms,
        "profiles": [], "cert": cert,
    })
    .to_string();
    let (msg, env) = presence_message(&key, "_gateway", body.as_bytes(), ttl_ms);
    w.probe().await?.publish(&msg).await?;
    if hostile {
        w.wire.record_hostile(env.msg_id(), &body);
    }
    Ok(())
}

#[when(expr = "the probe, as host {string}, announces {string}")]
async fn announces(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let key = played_key(w, &host)?;
    let gid = new_uuid();
    w.probe().await?.announce(&key, &gid, "worker", TTL).await?;
    w.wire.name_fake(&name, &gid);
    w.membership.fakes.insert(name, (host, gid));
    Ok(())
}

/// A SEND from the played entity `from` to `to`, signed with its host's key.
async fn brief(w: &mut FleetWorld, host: &str, from: &str, to: &str) -> anyhow::Result<(Envelope, String, String)> {
    let key = played_key(w, host)?;
    let (on, gid) = w
        .membership
        .fakes
        .get(from)
        .cloned()
        .ok_or_else(|| anyhow!("the probe announced no {from:?}"))?;
    anyhow::ensure!(on == host, "{from} lives on {on}, not {host}");
    let to_gid = w.gid(to)?;
    let text = format!("a brief from {from} on {host} {}", new_uuid());
    let env = Envelope::new("SEND", &gid, &to_gid, host).signed_by(&key, text.as_bytes());
    w.probe()
        .await?
        .publish(&Crafted::from_envelope("bridge.msg", &to_gid, &env, text.as_bytes()))
        .await?;
    Ok((env, text, to_gid))
}

#[when(expr = "the probe, as host {string}, sends {string} a brief from {string}")]
async fn sends_hostile(w: &mut FleetWorld, host: String, to: String, from: String) -> anyhow::Result<()> {
    let (env, text, _) = brief(w, &host, &from, &to).await?;
    w.wire.record_hostile(env.msg_id(), &text);
    Ok(())
}

#[then(expr = "the probe, as host {string}, gets a brief from {string} injected into {string}")]
async fn brief_injected(w: &mut FleetWorld, host: String, from: String, to: String) -> anyhow::Result<()> {
    let (_, text, _) = brief(w, &host, &from, &to).await?;
    w.wire.record_valid_text(&text);
    let e = w.entity(&to)?;
    let herdr = &w.host(&e.host)?.herdr;
    let (pane, text) = (&e.pane, &text);
    wait_for(
        &format!("the brief from {from} injected into {to}"),
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
