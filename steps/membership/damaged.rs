//! Credential files as they go wrong (SPEC [C-27]): a CA line damaged in a way that still looks
//! like a line of a taken type, and a file that is briefly empty while rewritten in place.
//!
//! [C-27] 1: a trust-file line of a key type the gateway takes whose key does not parse makes the
//! file broken (MEM-1: not applied, the last good content kept, an ERROR naming file and line);
//! only a well-formed line of a type the gateway does not take is skipped ([C-21] 10). The damage
//! played here is a paste cut at a multiple of 4 base64 characters: what is left still decodes,
//! and its blob still begins with the type's name, so only parsing the key shows it is cut — a
//! gateway that took such a line for "a type it does not take" would drop that CA's hosts.
//!
//! [C-27] 2: a trust, peers or revocation file that turns empty where it held entries is applied
//! only once it has stayed so for 1 s, within MEM-1's 2 s all the same. Played both ways: emptied
//! in place (truncated, as an editor or `>` does) and written back 300 ms later — the rosters are
//! watched over a window that starts at the truncation, so a gateway that applied the empty file
//! is seen dropping hosts while it is empty; and emptied and left so — applied within 2 s.
//!
//! [C-27] 3: a rotation refused only because the new certificate is not valid yet is applied,
//! with no file change and no SIGHUP, when its `valid after` comes (− `FLEET_CLOCK_SKEW_MS`), as
//! "at once" reads ([C-26]): the first message signed with the new key is stamped by the gateway
//! within [`AT_ONCE`] of that instant — and not before it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::credentials::ca::Validity;
use fleet_conformance::credentials::krl::Revoke;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::Probe;
use fleet_conformance::reaction::{AT_ONCE, Bound, Stamped};
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, scaled};
use serde_json::Value;

use crate::world::FleetWorld;

use super::files::{Kind, rewrite_all};
use super::lifecycle::{TTL, gateway_presence_message, probe_host_key};
use super::revocation::skew;
use super::rosters::{gid_of, roster};
use super::rotation::{adopt, install, since_rotation, wire};
use super::{OBSERVE, by_deadline, changed_now, issue, quoted, trust_file, two_seconds_after};

/// How long an emptied file stays empty before it is written back: a rewrite in place as the
/// issue that brought [C-27] 2 measured it, well under the 1 s hold.
const EMPTY_FOR: Duration = Duration::from_millis(300);

/// The CA's public key line with its base64 shortened by `cut` characters (comment kept).
fn cut_line(line: &str, cut: usize) -> anyhow::Result<String> {
    let mut words = line.split_whitespace();
    let (alg, b64) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    ensure!(
        b64.len() > cut + 16,
        "the CA line {line:?} is too short to cut by {cut}"
    );
    let comment: Vec<&str> = words.collect();
    Ok(format!("{alg} {} {}", &b64[..b64.len() - cut], comment.join(" "))
        .trim_end()
        .to_string())
}

/// [C-27] 1: every running gateway's trust file is rewritten as it is, except the line of `ca`,
/// whose base64 loses its last 4 characters.
#[when(regex = r#"^in every trust file the line of the CA "([^"]+)" loses its last 4 base64 characters$"#)]
async fn cut_ca_line(w: &mut FleetWorld, ca: String) -> anyhow::Result<()> {
    let whole = w.membership.ca(&ca)?.public_line().trim().to_string();
    let cut = cut_line(&whole, 4)?;
    rewrite_all(w, Kind::Trust, |w, _| {
        let good = trust_file(w, None)?.ok_or_else(|| anyhow!("the gateways read no trust file"))?;
        ensure!(
            good.lines().any(|l| l.trim() == whole),
            "no trust file lists the CA {ca:?}: {good}"
        );
        let lines: Vec<&str> = good
            .lines()
            .map(|l| if l.trim() == whole { cut.as_str() } else { l })
            .collect();
        Ok(lines.join("\n") + "\n")
    })
}

/// Truncates `kind` of every running gateway in place; returns each path and what it held.
fn empty_all(w: &mut FleetWorld, kind: Kind) -> anyhow::Result<Vec<(std::path::PathBuf, Vec<u8>)>> {
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    ensure!(!hosts.is_empty(), "no gateway runs: nothing to empty");
    let mut held = Vec::new();
    for h in &hosts {
        let path = kind.path(w, h);
        let was = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        ensure!(!was.is_empty(), "the file {} is empty already", path.display());
        held.push((path, was));
    }
    for (path, _) in &held {
        // In place: the same inode, cut to nothing (what `>` and many editors do first).
        std::fs::write(path, b"").with_context(|| format!("emptying {}", path.display()))?;
    }
    changed_now(w);
    Ok(held)
}

/// [C-27] 2: every running gateway's file is emptied in place and written back as it was
/// [`EMPTY_FOR`] later, in the background (the next step watches meanwhile).
#[when(
    regex = r#"^every gateway's (peers file|trust file|revocation list) is emptied in place and written back as it was 300 ms later$"#
)]
async fn emptied_briefly(w: &mut FleetWorld, kind: String) -> anyhow::Result<()> {
    let held = empty_all(w, Kind::parse(&kind)?)?;
    w.membership.rewrite = Some(tokio::spawn(async move {
        tokio::time::sleep(EMPTY_FOR).await;
        for (path, was) in held {
            std::fs::write(&path, was).with_context(|| format!("writing {} back", path.display()))?;
        }
        Ok(())
    }));
    Ok(())
}

/// [C-27] 2: emptied in place (comments gone too) and left so: the change later steps count from.
#[when(regex = r#"^every gateway's (peers file|trust file|revocation list) is emptied in place and left so$"#)]
async fn emptied_for_good(w: &mut FleetWorld, kind: String) -> anyhow::Result<()> {
    empty_all(w, Kind::parse(&kind)?)?;
    Ok(())
}

/// Over a window from now (started while the file is still empty): every named roster lists
/// every named entity at every look; then the background write-back must have worked.
#[then(regex = r#"^over a window the rosters of (.+) keep listing (.+)$"#)]
async fn keep_listing(w: &mut FleetWorld, at: String, listed: String) -> anyhow::Result<()> {
    let at = quoted(&at);
    let names = quoted(&listed);
    ensure!(
        !at.is_empty() && !names.is_empty() && names.len().is_multiple_of(2),
        "name the rosters, then pairs of entity and host: {listed:?}"
    );
    let mut wanted = Vec::new();
    for pair in names.chunks(2) {
        wanted.push((gid_of(w, &pair[0])?, pair[1].clone(), pair[0].clone()));
    }
    let (at, wanted, world) = (&at, &wanted, &*w);
    let held = hold_for(
        "every roster keeps listing the entities",
        ABSENCE_WINDOW,
        || async move {
            for h in at {
                let entries = roster(world, h).await?;
                for (gid, host, name) in wanted {
                    if !entries
                        .iter()
                        .any(|e| e["gid"] == gid.as_str() && e["host"] == host.as_str())
                    {
                        let of: Vec<&Value> = entries.iter().filter(|e| e["host"] == host.as_str()).collect();
                        return Err(format!(
                            "the roster of {h} lost {name} on {host}; it lists of {host}: {of:?}"
                        ));
                    }
                }
            }
            Ok(())
        },
    )
    .await;
    if let Some(rewrite) = w.membership.rewrite.take() {
        rewrite.await.map_err(|e| anyhow!("the write-back task: {e}"))??;
    }
    held?;
    Ok(())
}

/// A host the probe plays heartbeats: its `_gateway` presence carrying `cert` and the presence of
/// `gid`, every 100 ms, until aborted.
async fn heartbeat(probe: Arc<Probe>, key: HostKey, cert: String, gid: String) -> anyhow::Result<()> {
    loop {
        probe.publish(&gateway_presence_message(&key, &cert)).await?;
        probe.announce(&key, &gid, "worker", TTL).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// [C-27] 2 for the revocation list: over a window from now (the list still empty), the probe
/// heartbeats the `_gateway` presence of a host it plays — carrying the certificate the lists
/// revoke — and the presence of `name` every 100 ms, and no named roster may list anything of
/// that host at any look. A gateway that applied the empty list takes the host in at its next
/// heartbeat, until the list is back; the looks (every 75 ms) fall in that span.
#[then(
    regex = r#"^over a window the rosters of (.+) list nothing of host "([^"]+)" while the probe, as that host, heartbeats "([^"]+)" every 100 ms$"#
)]
async fn revoked_stays_out(w: &mut FleetWorld, at: String, host: String, name: String) -> anyhow::Result<()> {
    let at = quoted(&at);
    ensure!(!at.is_empty(), "name the rosters: {at:?}");
    let key = probe_host_key(w, &host)?;
    let cert = w.membership.cert(&host)?.line.clone();
    let gid = match w.membership.fakes.get(&name) {
        Some((on, gid)) if *on == host => gid.clone(),
        _ => return Err(anyhow!("{name} is no entity the probe announced on {host}")),
    };
    let probe = w.probe().await?;
    let beats = tokio::spawn(heartbeat(probe, key, cert, gid));
    let (at, host_ref, world) = (&at, &host, &*w);
    let held = hold_for(
        "the revoked host stays out of every roster",
        ABSENCE_WINDOW,
        || async move {
            for h in at {
                let of: Vec<Value> = roster(world, h)
                    .await?
                    .into_iter()
                    .filter(|e| e["host"] == host_ref.as_str())
                    .collect();
                if !of.is_empty() {
                    return Err(format!(
                        "the roster of {h} lists of the revoked host {host_ref}: {of:?}"
                    ));
                }
            }
            Ok(())
        },
    )
    .await;
    let beat_failed = beats.is_finished();
    beats.abort();
    if beat_failed && let Ok(Err(e)) = beats.await {
        return Err(e.context(format!("the probe's heartbeats as {host}")));
    }
    if let Some(rewrite) = w.membership.rewrite.take() {
        rewrite.await.map_err(|e| anyhow!("the write-back task: {e}"))??;
    }
    held?;
    Ok(())
}

/// [C-27] 3: `host` rotates (files replaced, SIGHUP) to a new key and a certificate from `ca`
/// whose `valid after` is `secs` from now: refused now (the step's seconds must exceed the skew),
/// kept pending until it becomes valid.
#[when(
    regex = r#"^"([^"]+)" rotates to a new key and a certificate from "([^"]+)" valid from (\d+) seconds from now$"#
)]
async fn rotates_early(w: &mut FleetWorld, host: String, ca: String, secs: u64) -> anyhow::Result<()> {
    ensure!(
        Duration::from_secs(secs) > skew(w) + Duration::from_secs(1),
        "{secs} s is within the clock skew the gateways allow ({:?}): the certificate would be valid now",
        skew(w)
    );
    let tap = wire(w).await?;
    let mark = tap.fetch().await?.len();
    let new = HostKey::generate(&host);
    let now = Validity::around_now(Duration::ZERO, Duration::from_secs(3600));
    let later = Validity {
        from: now.from + secs,
        to: now.to,
    };
    let cert = issue(w, &ca, &new, &host, later)?;
    install(w, &host, &new, Some(&cert.line))?;
    w.membership.rotation = Some((mark, true));
    w.membership.pending.insert(host, (new, cert));
    Ok(())
}

/// [C-27] 3 read with [C-26]: the pending rotation of `host` is taken when its certificate becomes
/// valid as MEM-2 counts it (`valid after` − skew), with no file change or signal: the first
/// message signed with the new key is stamped by the gateway no earlier than that instant and
/// within [`AT_ONCE`] of it.
#[then(
    regex = r#"^when that certificate becomes valid, "([^"]+)" takes it at once, with no file change and no SIGHUP$"#
)]
async fn taken_when_valid(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let (key, cert) = w
        .membership
        .pending
        .remove(&host)
        .ok_or_else(|| anyhow!("no rotation of {host} waits for its certificate"))?;
    let valid_ms = (cert.validity.from * 1000).saturating_sub(skew(w).as_millis() as u64);
    let now_ms = fleet_conformance::envelope::now_ms();
    let wait = Duration::from_millis(valid_ms.saturating_sub(now_ms)) + scaled(AT_ONCE + OBSERVE) * 3;
    let (world, key_ref, host_ref) = (&*w, &key, &host);
    let first = by_deadline(
        &format!("a message of {host} signed with its new key"),
        tokio::time::Instant::now() + wait,
        || async move {
            let seen = since_rotation(world, host_ref, key_ref)
                .await
                .map_err(|e| e.to_string())?;
            match seen.into_iter().find(|(_, _, ok)| *ok) {
                Some((_, env, _)) => Ok(Some(env)),
                None => Err("nothing signed with the new key yet".to_string()),
            }
        },
    )
    .await?;
    let ts = first.ts_ms().map_err(|e| anyhow!(e))?;
    ensure!(
        ts >= valid_ms,
        "{host} signed a {} with its new key at {ts}, {} ms before the certificate became valid ({valid_ms})",
        first.kind(),
        valid_ms - ts
    );
    Stamped {
        from_ms: valid_ms,
        to_ms: ts,
        transit: Duration::ZERO,
    }
    .judge(
        &format!("the first message {host} signed with its new key ({})", first.kind()),
        &Bound::at_once("[C-27] 3 / [C-26]: at once when the certificate becomes valid"),
    )?;
    adopt(w, &host, key);
    w.membership.certs.insert(host, cert);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::cut_line;

    #[test]
    fn a_cut_line_keeps_its_type_and_comment() {
        let line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx3nuQm4h1HyvUh4xvwQhG8N1o0hS8gWj5rGZ0T7V4e fleet CA";
        let cut = cut_line(line, 4).expect("cut");
        assert_eq!(
            cut,
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBx3nuQm4h1HyvUh4xvwQhG8N1o0hS8gWj5rGZ0T fleet CA"
        );
        assert!(cut_line("ssh-ed25519 AAAA", 4).is_err());
    }
}

/// CONTRACT §12: every gateway's revocation list rewritten with `serial` added and every line
/// ending in CR LF (a list saved by a Windows editor).
#[when(regex = r#"^serial (\d+) is revoked in every revocation list, written with CRLF line endings$"#)]
async fn serial_revoked_crlf(w: &mut FleetWorld, serial: u64) -> anyhow::Result<()> {
    w.membership
        .revoked
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no revocation list"))?
        .entries
        .push(Revoke::Serial(serial));
    rewrite_all(w, Kind::Revoked, |w, _| {
        let text = w.membership.revoked.clone().unwrap_or_default().render();
        ensure!(!text.contains('\r'), "the list already holds a CR");
        Ok(text.replace('\n', "\r\n"))
    })
}

/// CONTRACT §12: a CRLF revocation list is read as LF (the host revoked: in no roster within
/// MEM-4's 2 s) or refused as broken (MEM-1: an ERROR naming the list within 2 s) — each gateway
/// one or the other; never applied with the entry lost, nothing said.
#[then(
    regex = r#"^within 2 seconds each gateway either lists nothing of host "([^"]+)" or logs an ERROR naming its revocation list$"#
)]
async fn crlf_taken_or_refused(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    use fleet_conformance::contract::{LogLevel, log_line_at};
    let until = two_seconds_after(w, Duration::ZERO)?;
    let mut running: Vec<String> = w.hosts.keys().cloned().collect();
    running.sort();
    for h in &running {
        let path = Kind::Revoked.path(w, h).display().to_string();
        let (world, h_ref, host_ref, path_ref) = (&*w, h, &host, &path);
        let gw = &w.host(h)?.gateway;
        let how = by_deadline(
            &format!("{h} to drop host {host} or refuse its CRLF revocation list"),
            until.clone(),
            || async move {
                let of = roster(world, h_ref)
                    .await?
                    .into_iter()
                    .filter(|e| e["host"] == host_ref.as_str())
                    .count();
                if of == 0 {
                    return Ok(Some("read as LF: the host is out"));
                }
                if gw
                    .log()
                    .lines()
                    .any(|l| log_line_at(l, LogLevel::Error) && l.contains(path_ref.as_str()))
                {
                    return Ok(Some("refused: an ERROR names the list"));
                }
                Err(format!(
                    "the roster of {h_ref} still lists {of} entries of {host_ref}, and no ERROR names {path_ref}"
                ))
            },
        )
        .await?;
        tracing::info!(gateway = %h, "CRLF revocation list: {how}");
    }
    Ok(())
}
