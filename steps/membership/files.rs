//! The files of SPEC §18 as the operator keeps them: CAs made by `ssh-keygen`, the trust file,
//! the revocation list and the peers file — set up before gateways start, changed for every
//! running gateway mid-run (MEM-1: applied within 2 s, without a restart), and broken on purpose
//! (not applied; an ERROR naming the file and the line; the last good content still holds).

use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::contract::{LogLevel, log_line_at, names_file_line};
use fleet_conformance::credentials::ca::{Ca, Validity};
use fleet_conformance::credentials::krl::Revoke;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::gateway::GatewayProcess;
use fleet_conformance::keys::HostKey;
use fleet_conformance::timing::scaled;

use crate::world::{FleetWorld, Host};

use super::{
    CERT_FILE, CertPlan, REVOKED_FILE, TRUST_FILE, an_hour, by_deadline, ca_dir, changed_now, host_dir, peers_file,
    quoted, trust_file, two_seconds_after,
};

/// The three files MEM-1 re-reads, as a step names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Peers,
    Trust,
    Revoked,
}

impl Kind {
    pub(super) fn parse(s: &str) -> anyhow::Result<Kind> {
        Ok(match s {
            "peers file" => Kind::Peers,
            "trust file" => Kind::Trust,
            "revocation list" => Kind::Revoked,
            other => bail!("no membership file {other:?} (peers file, trust file, revocation list)"),
        })
    }

    /// The file's path for `host`, as its variable gives it (a ConfigMap mount aside:
    /// `operators_files.rs` points the variables elsewhere).
    pub(super) fn path(self, w: &FleetWorld, host: &str) -> std::path::PathBuf {
        let dir = host_dir(w, host);
        match self {
            Kind::Peers => dir.join("peers.toml"),
            Kind::Trust => dir.join(TRUST_FILE),
            Kind::Revoked => dir.join(REVOKED_FILE),
        }
    }
}

pub(super) fn make_ca(w: &mut FleetWorld, name: &str) -> anyhow::Result<()> {
    if !w.membership.cas.contains_key(name) {
        let ca = Ca::create(&ca_dir(w), name)?;
        w.membership.cas.insert(name.to_string(), ca);
    }
    Ok(())
}

#[given(expr = "a fleet CA {string} made by ssh-keygen")]
async fn fleet_ca(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    make_ca(w, &name)
}

#[given(regex = r#"^every gateway trusts the CAs? (.+)$"#)]
async fn trusts(w: &mut FleetWorld, names: String) -> anyhow::Result<()> {
    let names = quoted(&names);
    for n in &names {
        make_ca(w, n)?;
    }
    w.membership.trusted = Some(names);
    Ok(())
}

#[given("every gateway reads a revocation list")]
async fn reads_revocations(w: &mut FleetWorld) {
    w.membership.revoked = Some(Default::default());
}

#[given(regex = r#"^the gateways allow a clock skew of (\d+) seconds?$"#)]
async fn clock_skew(w: &mut FleetWorld, secs: u64) {
    let skew = scaled(Duration::from_secs(secs));
    w.gateway_env
        .insert("FLEET_CLOCK_SKEW_MS".into(), skew.as_millis().to_string());
}

/// Hosts given a certificate when their gateway starts, and listed in no peers file: their key is
/// theirs only through the certificate (MEM-2).
#[given(
    regex = r#"^hosts? (.+) holds? (?:a certificate|certificates) from "([^"]+)"(?: valid for (\d+) more seconds,)? and (?:is|are) in no peers file$"#
)]
async fn certified(w: &mut FleetWorld, hosts: String, ca: String, secs: String) -> anyhow::Result<()> {
    make_ca(w, &ca)?;
    let validity = match secs.parse::<u64>() {
        Ok(s) => Validity::around_now(Duration::from_secs(300), scaled(Duration::from_secs(s))),
        Err(_) => an_hour(),
    };
    for h in quoted(&hosts) {
        ensure!(
            !w.hosts.contains_key(&h),
            "host {h:?} already runs: its certificate comes at its start"
        );
        w.membership.unlisted.insert(h.clone());
        w.membership.cert_plans.insert(
            h,
            CertPlan {
                ca: ca.clone(),
                validity,
            },
        );
    }
    Ok(())
}

#[given(expr = "host {string}, in no peers file, runs a gateway with a main {string}")]
async fn unlisted_main(w: &mut FleetWorld, host: String, main: String) -> anyhow::Result<()> {
    w.membership.unlisted.insert(host.clone());
    w.add_entity(&host, &main, "main", None, vec![]).await
}

/// Rewrites `kind` for every running gateway with `text_for(host)`, then notes the change.
pub(super) fn rewrite_all(
    w: &mut FleetWorld,
    kind: Kind,
    text_for: impl Fn(&FleetWorld, &str) -> anyhow::Result<String>,
) -> anyhow::Result<()> {
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    ensure!(!hosts.is_empty(), "no gateway runs: nothing to change");
    for h in &hosts {
        let text = text_for(w, h)?;
        write_replace(&kind.path(w, h), &text, 0o644)?;
    }
    changed_now(w);
    Ok(())
}

fn rewrite_peers(w: &mut FleetWorld) -> anyhow::Result<()> {
    rewrite_all(w, Kind::Peers, |w, _| Ok(peers_file(w).render()))
}

#[when(expr = "{string} is added to every peers file")]
async fn added(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    w.membership.unlisted.remove(&host);
    w.membership.added.insert(host);
    rewrite_peers(w)
}

#[when(expr = "{string} is removed from every peers file")]
async fn removed(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    w.membership.added.remove(&host);
    w.membership.unlisted.insert(host);
    rewrite_peers(w)
}

/// MEM-1's rotation without a CA, first step: the host's entry lists its key and a new one.
#[when(expr = "every peers file lists a second key for {string}")]
async fn second_key(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let old = super::current_key(w, &host)?;
    let new = HostKey::generate(&host);
    w.membership
        .peer_keys
        .insert(host.clone(), vec![old.public_base64(), new.public_base64()]);
    w.membership.next_key.insert(host, new);
    rewrite_peers(w)
}

/// MEM-1: a key a peers entry lists is a key of that host within 2 s — a presence the probe signs
/// with it, for an entity of its own on that host, is listed by every other gateway.
#[then(expr = "within 2 seconds every other gateway takes the second key of {string} as the key of host {string}")]
async fn takes_second_key(w: &mut FleetWorld, host: String, of: String) -> anyhow::Result<()> {
    anyhow::ensure!(host == of, "a key of {host} is not a key of {of}");
    let key = w
        .membership
        .next_key
        .get(&host)
        .cloned()
        .ok_or_else(|| anyhow!("no peers entry lists a second key for {host}"))?;
    // The probe heartbeats the entity as a host does (a presence that arrived before the file was
    // applied is rightly rejected); every gateway must list it by the deadline.
    let gid = fleet_conformance::envelope::new_uuid();
    let probe = w.probe().await?;
    let deadline = two_seconds_after(w, Duration::ZERO)?;
    // Every other gateway: what a gateway makes of a stranger's claim on its own host is not
    // this check's business.
    let hosts: Vec<&GatewayProcess> = w
        .hosts
        .iter()
        .filter(|(h, _)| **h != host)
        .map(|(_, h)| &h.gateway)
        .collect();
    let sent = std::sync::Mutex::new(Vec::new());
    let (gid, host, key, probe, hosts, sent_ref) = (&gid, &host, &key, &probe, &hosts, &sent);
    let listed = by_deadline(
        &format!("every roster to list the probe's entity {gid} on {host}, signed with the second key"),
        deadline,
        || async move {
            let env = probe
                .announce(key, gid, "worker", Duration::from_secs(600))
                .await
                .map_err(|e| e.to_string())?;
            if let Ok(mut s) = sent_ref.lock() {
                s.push(env.msg_id().to_string());
            }
            for gw in hosts {
                let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
                let entries = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
                    .map_err(|e| format!("status {status}: {e}"))?;
                if !fleet_conformance::contract::roster_lists(&entries, gid, host) {
                    return Err(format!("not listed yet by {}: {v}", gw.spec.host));
                }
            }
            Ok(Some(()))
        },
    )
    .await;
    w.membership.probe_sent.extend(sent.into_inner().unwrap_or_default());
    listed?;
    Ok(())
}

/// MEM-1's rotation without a CA, last step: the old key leaves the entry.
#[when(expr = "every peers file lists only the second key for {string}")]
async fn only_second_key(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let key = super::current_key(w, &host)?;
    let history = w.membership.key_history.get(&host).map_or(0, Vec::len);
    ensure!(history >= 2, "{host} has not switched to a second key");
    w.membership.peer_keys.insert(host, vec![key.public_base64()]);
    rewrite_peers(w)
}

#[when(expr = "the CA {string} is removed from every trust file")]
async fn ca_removed(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let trusted = w
        .membership
        .trusted
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no trust file"))?;
    ensure!(trusted.contains(&name), "no trust file lists {name:?}");
    trusted.retain(|n| *n != name);
    rewrite_all(w, Kind::Trust, |w, _| {
        trust_file(w, None)?.ok_or_else(|| anyhow!("no trust file"))
    })
}

/// Rewrites every gateway's revocation list with `entry` added.
pub(super) fn revoke(w: &mut FleetWorld, entry: Revoke) -> anyhow::Result<()> {
    w.membership
        .revoked
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no revocation list"))?
        .entries
        .push(entry);
    rewrite_all(w, Kind::Revoked, |w, _| {
        Ok(w.membership.revoked.clone().unwrap_or_default().render())
    })
}

/// What an operator meant to write, with a line that does not parse at `line` (1-based). Each
/// file is made so that applying the lines before the bad one would do harm that the scenario
/// sees: the peers file loses the hosts after it, the trust file its CAs after it, and the
/// revocation list revokes every certified host's key id before it.
fn broken(w: &FleetWorld, kind: Kind, line: usize) -> anyhow::Result<String> {
    let insert = |text: String, bad: &str| {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        lines.insert(line.clamp(1, lines.len() + 1) - 1, bad.to_string());
        lines.join("\n") + "\n"
    };
    Ok(match kind {
        Kind::Peers => peers_file(w).render_broken_at(line),
        Kind::Trust => trust_file(w, Some(line))?.ok_or_else(|| anyhow!("the gateways read no trust file"))?,
        Kind::Revoked => {
            let mut list = w
                .membership
                .revoked
                .clone()
                .ok_or_else(|| anyhow!("the gateways read no revocation list"))?;
            for c in w.membership.certs.values() {
                list.entries.push(Revoke::Id(c.key_id.clone()));
            }
            insert(list.render(), "serial: banana")
        }
    })
}

#[when(
    regex = r#"^the (peers file|trust file|revocation list) of "([^"]+)" is replaced by one whose line (\d+) does not parse$"#
)]
async fn replaced_broken(w: &mut FleetWorld, kind: String, host: String, line: usize) -> anyhow::Result<()> {
    let kind = Kind::parse(&kind)?;
    w.host(&host)?;
    let text = broken(w, kind, line)?;
    write_replace(&kind.path(w, &host), &text, 0o644)?;
    changed_now(w);
    Ok(())
}

/// CONTRACT §12: one line at ERROR holding the file's path (as given in the environment) and the
/// number of its first bad line.
#[then(
    regex = r#"^within 2 seconds the gateway on "([^"]+)" logs an ERROR naming its (peers file|trust file|revocation list) and line (\d+)$"#
)]
async fn error_names_line(w: &mut FleetWorld, host: String, kind: String, line: usize) -> anyhow::Result<()> {
    let path = Kind::parse(&kind)?.path(w, &host).display().to_string();
    let gw = &w.host(&host)?.gateway;
    let deadline = two_seconds_after(w, Duration::ZERO)?;
    let path = &path;
    by_deadline(
        &format!("an ERROR of {host} naming {path} and line {line}"),
        deadline,
        || async move {
            let log = gw.log();
            if log
                .lines()
                .any(|l| log_line_at(l, LogLevel::Error) && l.contains(path.as_str()) && names_file_line(l, path, line))
            {
                Ok(Some(()))
            } else {
                let errors: Vec<&str> = log.lines().filter(|l| log_line_at(l, LogLevel::Error)).collect();
                Err(format!("ERROR lines: {errors:?}"))
            }
        },
    )
    .await?;
    Ok(())
}

#[when(expr = "host {string} starts a gateway whose trust file's line {int} does not parse")]
async fn starts_broken(w: &mut FleetWorld, host: String, line: usize) -> anyhow::Result<()> {
    w.membership.broken_at_start.insert(host.clone(), line);
    let (spec, herdr) = w.host_spec(&host).await?;
    let gateway = GatewayProcess::start_unready(spec)?;
    w.hosts.insert(host, Host { gateway, herdr });
    Ok(())
}

/// MEM-1 / CONTRACT §12: started with a broken file, a gateway exits non-zero within the start
/// bound, and its output names the file (or its variable) and the line.
#[then(
    regex = r#"^the gateway on "([^"]+)" exits non-zero within (\d+) seconds, its output naming its trust file and line (\d+)$"#
)]
async fn exits_naming(w: &mut FleetWorld, host: String, secs: u64, line: usize) -> anyhow::Result<()> {
    let path = Kind::Trust.path(w, &host).display().to_string();
    let gw = &mut w.host_mut(&host)?.gateway;
    let status = fleet_conformance::timing::wait_for(
        &format!("the gateway on {host} to exit"),
        Duration::from_secs(secs),
        || {
            let status = gw.try_exit();
            async move { Ok::<_, String>(status) }
        },
    )
    .await?;
    let log = gw.log();
    ensure!(
        !status.success(),
        "the gateway on {host} exited with {status} although its trust file is broken\n{log}"
    );
    let named = log
        .lines()
        .any(|l| (l.contains(path.as_str()) || l.contains("FLEET_TRUST_CA_FILE")) && names_file_line(l, &path, line));
    ensure!(
        named,
        "the output of the gateway on {host} names no line holding its trust file ({path} or FLEET_TRUST_CA_FILE) and line {line}:\n{log}"
    );
    Ok(())
}

/// The certificate file's path of `host`.
pub(super) fn cert_path(w: &FleetWorld, host: &str) -> std::path::PathBuf {
    host_dir(w, host).join(CERT_FILE)
}
