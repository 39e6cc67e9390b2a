//! A gateway's own credential, as [C-21] settled it (CONTRACT §12, "Credential lifecycle"):
//! checked as its peers would check it, at every rotation and at start ([C-21] 12), and, once
//! revoked or expired, refusing to publish ([C-21] 9, a SHOULD: capability
//! `own-credential-refusal`; CONTRACT §3's `revoked` / `cert_expired` failure is definite, and
//! that is judged whatever the gateway declares).
//!
//! A certificate "the fleet would reject" is one every receiver would reject: from a CA no trust
//! file lists, revoked by the revocation lists, not yet valid, expired, or naming another host. A
//! certificate over another key than the key file's is MEM-3's older case ([`super::rotation`]).

use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::credentials::ca::{CertKind, Certificate, Validity};
use fleet_conformance::credentials::krl::{RevocationList, Revoke};
use fleet_conformance::credentials::write_replace;
use fleet_conformance::gateway::GatewayProcess;
use fleet_conformance::keys::HostKey;
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, time_scale, wait_for};
use serde_json::{Value, json};

use crate::world::{FleetWorld, Host};

use super::files::{cert_path, make_ca};
use super::rotation::{install, wire};
use super::{CertPlan, an_hour, changed_now, error_naming, issue, last_change, quoted, sign};

/// Every gateway reads a revocation list that revokes `serial` from the start: a certificate
/// issued with it is revoked on arrival.
#[given(regex = r#"^every gateway reads a revocation list revoking serial (\d+)$"#)]
async fn reads_revoking(w: &mut FleetWorld, serial: u64) {
    w.membership.revoked = Some(RevocationList {
        entries: vec![Revoke::Serial(serial)],
    });
}

/// The certificate a step names that every receiver of the fleet would reject, over `key`, for
/// `host` (the row's text: `one from a CA no gateway trusts`, `one from "fleet" with serial 900`
/// — a serial the revocation lists revoke —, `one from "fleet" not yet valid`, `one from "fleet"
/// that has expired`, `one from "fleet" naming host "a" only`).
fn rejectable(w: &mut FleetWorld, host: &str, key: &HostKey, text: &str) -> anyhow::Result<Certificate> {
    let me = [host.to_string()];
    if text == "one from a CA no gateway trusts" {
        let rogue = "rogue";
        make_ca(w, rogue)?;
        ensure!(
            !w.membership.trusted.iter().flatten().any(|n| n == rogue),
            "the gateways trust the rogue CA"
        );
        return issue(w, rogue, key, host, an_hour());
    }
    let names = quoted(text);
    let ca = names
        .first()
        .cloned()
        .ok_or_else(|| anyhow!("no CA named in {text:?}"))?;
    ensure!(
        w.membership.trusted.iter().flatten().any(|n| *n == ca),
        "the gateways do not trust {ca:?}: the row would not name what it says"
    );
    let cert = if let Some(serial) = text.split("with serial ").nth(1) {
        let serial: u64 = serial.trim().parse().map_err(|e| anyhow!("serial in {text:?}: {e}"))?;
        let revoked = w
            .membership
            .revoked
            .as_ref()
            .is_some_and(|l| l.entries.contains(&Revoke::Serial(serial)));
        ensure!(revoked, "no revocation list revokes serial {serial}");
        sign(w, &ca, key, CertKind::Host, &me, an_hour(), serial)?
    } else if text.ends_with(" not yet valid") {
        let later = Validity::later(Duration::from_secs(3600), Duration::from_secs(3600));
        let serial = w.membership.next_serial();
        sign(w, &ca, key, CertKind::Host, &me, later, serial)?
    } else if text.ends_with(" that has expired") {
        let past = Validity::past(Duration::from_secs(3600), Duration::from_secs(3600));
        let serial = w.membership.next_serial();
        sign(w, &ca, key, CertKind::Host, &me, past, serial)?
    } else if text.ends_with(" only") && names.len() == 2 {
        ensure!(names[1] != host, "{host} is the host named");
        let serial = w.membership.next_serial();
        sign(w, &ca, key, CertKind::Host, &[names[1].clone()], an_hour(), serial)?
    } else {
        bail!("no certificate the fleet would reject called {text:?}")
    };
    Ok(cert)
}

/// [C-21] 12: a rotation to a new key and a certificate over it that every receiver would reject
/// (the files replaced, then SIGHUP, as MEM-3's rotations are).
#[when(regex = r#"^"([^"]+)" rotates to a new key and a certificate the fleet would reject: (.+)$"#)]
async fn rotates_to_rejectable(w: &mut FleetWorld, host: String, text: String) -> anyhow::Result<()> {
    let tap = wire(w).await?;
    let mark = tap.fetch().await?.len();
    let new = HostKey::generate(&host);
    let cert = rejectable(w, &host, &new, &text)?;
    install(w, &host, &new, Some(&cert.line))?;
    w.membership.rotation = Some((mark, true));
    Ok(())
}

/// [C-21] 12: a gateway started with a certificate over its own key that every receiver would
/// reject (in no peers file: the certificate is all it has). "Its start" is the change later steps
/// count from.
#[when(
    regex = r#"^host "([^"]+)", in no peers file, starts a gateway holding a certificate the fleet would reject: (.+)$"#
)]
async fn starts_with_rejectable(w: &mut FleetWorld, host: String, text: String) -> anyhow::Result<()> {
    ensure!(!w.hosts.contains_key(&host), "host {host:?} already runs");
    let ca = w
        .membership
        .trusted
        .iter()
        .flatten()
        .next()
        .cloned()
        .ok_or_else(|| anyhow!("the gateways trust no CA"))?;
    w.membership.unlisted.insert(host.clone());
    // A certificate plan gives the gateway its FLEET_HOST_CERT_FILE; its content is then replaced
    // by the rejectable certificate before the process starts.
    w.membership.cert_plans.insert(
        host.clone(),
        CertPlan {
            ca,
            validity: an_hour(),
        },
    );
    let (spec, herdr) = w.host_spec(&host).await?;
    let cert = rejectable(w, &host, &spec.key, &text)?;
    write_replace(&cert_path(w, &host), &format!("{}\n", cert.line), 0o644)?;
    w.membership.certs.insert(host.clone(), cert);
    let gateway = GatewayProcess::start_unready(spec)?;
    changed_now(w);
    w.hosts.insert(host, Host { gateway, herdr });
    Ok(())
}

/// CONTRACT §12: one line at ERROR holding the certificate file's path (as given in
/// `FLEET_HOST_CERT_FILE`), within the start bound.
#[then(
    regex = r#"^within (\d+) seconds of its start the gateway on "([^"]+)" logs an ERROR naming its certificate file$"#
)]
async fn start_error(w: &mut FleetWorld, secs: u64, host: String) -> anyhow::Result<()> {
    let path = cert_path(w, &host).display().to_string();
    let deadline = last_change(w)?.at + fleet_conformance::timing::scaled(Duration::from_secs(secs));
    error_naming(w, &host, &path, deadline).await
}

/// [C-21] 12 with MEM-4: started with a certificate the fleet would reject, the gateway answers
/// `/readyz` 503 — never 200, over `n` heartbeats of its own interval (more than [C-14]'s two
/// heartbeats of an incomplete roster) — and has not exited.
#[then(
    regex = r#"^the gateway on "([^"]+)" answers /readyz 503, never 200, over (\d+) heartbeats, and is still running$"#
)]
async fn never_ready(w: &mut FleetWorld, host: String, n: u32) -> anyhow::Result<()> {
    let window = (w.heartbeat() * n).div_f64(time_scale()).max(ABSENCE_WINDOW);
    let gw = &w.host(&host)?.gateway;
    let readyz = || async move {
        match gw.get("/readyz").await {
            Ok((503, _)) => Ok(()),
            Ok((s, v)) => Err(format!("/readyz answered {s}: {v}")),
            Err(e) => Err(format!("/readyz: {e}")),
        }
    };
    let first = wait_for(
        &format!("the gateway on {host} to answer /readyz"),
        Duration::from_secs(10),
        || async {
            match readyz().await {
                Ok(()) => Ok(Some(Ok(()))),
                Err(e) if e.starts_with("/readyz answered") => Ok(Some(Err(e))),
                Err(e) => Err(e),
            }
        },
    )
    .await;
    let held = match first {
        Ok(Ok(())) => hold_for(&format!("the gateway on {host} not ready"), window, readyz)
            .await
            .map_err(|e| e.to_string()),
        Ok(Err(e)) => Err(e),
        Err(e) => Err(e.to_string()),
    };
    let gw = &mut w.host_mut(&host)?.gateway;
    if let Some(status) = gw.try_exit() {
        bail!(
            "the gateway on {host} exited ({status}): [C-21] 12 wants it running, not ready\n{}",
            gw.log_tail(40)
        );
    }
    if let Err(e) = held {
        bail!("{e}\n{}", gw.log_tail(40));
    }
    Ok(())
}

/// Whether a tool's answer is the definite refusal CONTRACT §3 names `reason`.
fn refused(v: &Value, reason: &str) -> bool {
    v["status"] == json!("failed") && v["reason"] == json!(reason)
}

/// CONTRACT §3: a `failed` answer with reason `revoked` or `cert_expired` says the gateway refused
/// to publish: what it answered so about is never on the wire (the probe's tap of `bridge.msg`,
/// over a window), so never delivered. Judged whatever the gateway answers: an answer other than
/// that failure is not judged here.
#[then(
    regex = r#"^whatever "([^"]+)"'s send and "([^"]+)"'s reply answer, one that failed with reason "([a-z_]+)" was never on the wire$"#
)]
async fn refusal_definite(w: &mut FleetWorld, sender: String, replier: String, reason: String) -> anyhow::Result<()> {
    let bound = w.inject_bound() + Duration::from_secs(5);
    let mut definite: Vec<(&str, String, Option<String>)> = Vec::new();
    for (label, kind, who) in [("send", "SEND", &sender), ("reply", "REPLY", &replier)] {
        let gid = w.gid(who)?;
        match w.call_result(label, bound).await {
            Ok(v) if refused(&v, &reason) => {
                definite.push((kind, gid, v["msgId"].as_str().map(str::to_string)));
            }
            Ok(v) => eprintln!("note: {who}'s {label} answered {v}: not a `{reason}` refusal, not judged here"),
            Err(e) => eprintln!("note: {who}'s {label} did not answer a result ({e}): not judged here"),
        }
    }
    if definite.is_empty() {
        return Ok(());
    }
    let msgs = w.wire.msgs_tap()?;
    let (definite, reason) = (&definite, &reason);
    hold_for(
        &format!("nothing the gateway refused with `{reason}` on the wire"),
        ABSENCE_WINDOW,
        || {
            let msgs = msgs.clone();
            async move {
                let seen: Vec<String> = msgs
                    .fetch()
                    .await
                    .map_err(|e| e.to_string())?
                    .iter()
                    .filter(|c| {
                        definite.iter().any(|(kind, from, id)| {
                            (c.header_str("kind").as_deref() == Some(*kind)
                                && c.header_str("from").as_deref() == Some(from.as_str()))
                                || id.is_some() && c.message_id() == *id
                        })
                    })
                    .map(|c| {
                        format!(
                            "{} {} from {:?}",
                            c.header_str("kind").unwrap_or_default(),
                            c.message_id().unwrap_or_default(),
                            c.header_str("from")
                        )
                    })
                    .collect();
                if seen.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "answered failed/{reason} (CONTRACT §3: refused, never handed to the broker), yet on the wire: {seen:?}"
                    ))
                }
            }
        },
    )
    .await?;
    Ok(())
}
