//! Operators' CAs and files (SPEC §18 as [C-21] 10 and 11 settle it; CONTRACT §12, "Operators'
//! CAs and files"): what operators bring to a fleet besides the suite's own ed25519 CA.
//!
//! - CAs of every key type OpenSSH signs host certificates with — ed25519, ECDSA (nistp256, 384,
//!   521), RSA — in one trust file; an RSA CA's certificates signed `rsa-sha2-256` or
//!   `rsa-sha2-512` verify, a SHA-1 `ssh-rsa` signature does not ([C-21] 10). The suite names a
//!   CA's way of signing as a *variant* ([`Ca::variant`]): the same key under another name, whose
//!   `ssh-keygen -s` gets extra arguments (`-t rsa-sha2-256`, `-O force-command=…`).
//! - A trust-file line of a type no gateway takes (`ssh-dss`, from `ssh-keygen -t dsa`): skipped
//!   with a WARN naming the file and the line, the rest applied ([C-21] 10).
//! - A host certificate carrying critical options is refused ([C-21] 11): presented by a host
//!   the probe plays (`defective_certificate` in `hostile.rs`, a row of the hostile outline), or a
//!   gateway's own (never ready, an ERROR naming its certificate file, [C-21] 12).
//! - A CA pasted in known_hosts or authorized_keys form: a line that does not parse (MEM-1).
//!
//! The files' habits (ConfigMap mounts, delete and write, a BOM) and the KRL's hand-written and
//! binary forms ([C-21] 5, 13) are in [`files`].

#[path = "operators_files.rs"]
mod files;

use std::time::Duration;

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::contract::{LogLevel, log_line_at, names_file_line};
use fleet_conformance::credentials::ca::{Ca, CaKeyType, describe, signature_algorithm};
use fleet_conformance::envelope::new_uuid;
use fleet_conformance::gateway::GatewayProcess;
use fleet_conformance::probe::presence_message;
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for};
use serde_json::json;

use crate::world::{FleetWorld, Host};

use super::files::{Kind, rewrite_all};
use super::hostile::{TTL, played_key};
use super::{an_hour, by_deadline, ca_dir, changed_now, issue, quoted, trust_file, two_seconds_after};

/// The step's CA name must be new: a CA is made once per scenario.
fn add_ca(w: &mut FleetWorld, ca: Ca) -> anyhow::Result<()> {
    ensure!(
        !w.membership.cas.contains_key(&ca.name),
        "the CA {:?} exists already in this scenario",
        ca.name
    );
    w.membership.cas.insert(ca.name.clone(), ca);
    Ok(())
}

/// [C-21] 10: a CA of any key type, made by `ssh-keygen -t <type> [-b <bits>]`.
#[given(regex = r#"^a fleet CA "([^"]+)" made by ssh-keygen -t (ed25519|ecdsa|rsa|dsa)(?: -b (\d+))?$"#)]
async fn typed_ca(w: &mut FleetWorld, name: String, t: String, bits: String) -> anyhow::Result<()> {
    let bits = if bits.is_empty() { None } else { Some(bits.parse()?) };
    let key_type = CaKeyType::parse(&t, bits).ok_or_else(|| anyhow!("no CA key type -t {t} -b {bits:?}"))?;
    let ca = Ca::create_typed(&ca_dir(w), &name, key_type)?;
    add_ca(w, ca)
}

/// A CA's way of signing: `variant` is the CA `of`, every `ssh-keygen -s` of it given `args` too.
#[given(regex = r#"^"([^"]+)" is the CA "([^"]+)" signing with "([^"]+)"$"#)]
async fn ca_variant(w: &mut FleetWorld, variant: String, of: String, args: String) -> anyhow::Result<()> {
    let extra: Vec<&str> = args.split_whitespace().collect();
    let ca = w.membership.ca(&of)?.variant(&variant, &extra);
    add_ca(w, ca)
}

/// The suite's own check of its fixture: the certificate a host holds is signed the way the row
/// says, in ssh-keygen's words (`ssh-keygen -L`: "Signing CA: … (using <algorithm>)").
#[given(regex = r#"^ssh-keygen says the certificate of "([^"]+)" is signed with ([a-z0-9@.-]+)$"#)]
async fn signed_with(w: &mut FleetWorld, host: String, alg: String) -> anyhow::Result<()> {
    let line = w.membership.cert(&host)?.line.clone();
    let said = describe(&ca_dir(w).join("described"), &line)?;
    ensure!(
        signature_algorithm(&said).as_deref() == Some(alg.as_str()),
        "the certificate of {host} is not signed with {alg}: ssh-keygen -L says\n{said}"
    );
    Ok(())
}

/// MEM-2 after a trust-file change: the probe, as host `host` with a certificate from `ca`,
/// presents it and announces `name` again at every look until every roster lists `name` — by
/// 2 s after the change (a presence that came before the CA was applied is rightly rejected; the
/// next look presents again).
#[then(
    regex = r#"^within 2 seconds every roster lists "([^"]+)" of host "([^"]+)", which the probe announces with a certificate from "([^"]+)"$"#
)]
async fn let_in_after_change(w: &mut FleetWorld, name: String, host: String, ca: String) -> anyhow::Result<()> {
    let key = played_key(w, &host)?;
    let cert = issue(w, &ca, &key, &host, an_hour())?;
    w.membership.certs.insert(host.clone(), cert.clone());
    let gid = new_uuid();
    w.wire.name_fake(&name, &gid);
    w.membership.fakes.insert(name.clone(), (host.clone(), gid.clone()));
    let probe = w.probe().await?;
    let deadline = two_seconds_after(w, Duration::ZERO)?;
    let ttl_ms = TTL.as_millis() as u64;
    let body = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl_ms,
        "profiles": [], "cert": cert.line,
    })
    .to_string();
    let gateways: Vec<&GatewayProcess> = w.hosts.values().map(|h| &h.gateway).collect();
    let (gid, host, key, probe, gateways, body) = (&gid, &host, &key, &probe, &gateways, &body);
    by_deadline(
        &format!("every roster to list {name} ({gid}) of host {host}, certified by {ca}"),
        deadline,
        || async move {
            let (msg, _) = presence_message(key, "_gateway", body.as_bytes(), ttl_ms);
            probe.publish(&msg).await.map_err(|e| e.to_string())?;
            probe
                .announce(key, gid, "worker", TTL)
                .await
                .map_err(|e| e.to_string())?;
            for gw in gateways {
                let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
                let entries = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
                    .map_err(|e| format!("status {status}: {e}"))?;
                if !fleet_conformance::contract::roster_lists(&entries, gid, host) {
                    return Err(format!("not listed yet by {}", gw.spec.host));
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    Ok(())
}

/// Every trust file lists these CAs too, after those it listed (in the order named).
#[when(regex = r#"^the CAs? (.+) (?:is|are) added to every trust file$"#)]
async fn cas_added(w: &mut FleetWorld, names: String) -> anyhow::Result<()> {
    let names = quoted(&names);
    for n in &names {
        w.membership.ca(n)?;
    }
    w.membership
        .trusted
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no trust file"))?
        .extend(names);
    rewrite_all(w, Kind::Trust, |w, _| {
        trust_file(w, None)?.ok_or_else(|| anyhow!("no trust file"))
    })
}

/// The hosts a step names (quoted), or every running gateway.
fn hosts_named(w: &FleetWorld, text: &str) -> Vec<String> {
    let named = quoted(text);
    if named.is_empty() {
        w.hosts.keys().cloned().collect()
    } else {
        named
    }
}

/// The trust file's path as `host`'s gateway was given it (`FLEET_TRUST_CA_FILE`).
fn trust_path_of(w: &FleetWorld, host: &str) -> anyhow::Result<String> {
    w.host(host)?
        .gateway
        .spec
        .extra_env
        .get("FLEET_TRUST_CA_FILE")
        .cloned()
        .ok_or_else(|| anyhow!("the gateway on {host} reads no trust file"))
}

/// Whether `log` holds a line at `level` naming `path` and its line `n` (CONTRACT §12).
fn names_line(log: &str, level: LogLevel, path: &str, n: usize) -> bool {
    log.lines()
        .any(|l| log_line_at(l, level) && l.contains(path) && names_file_line(l, path, n))
}

/// [C-21] 10 / CONTRACT §12: a line of a type the gateway does not take is skipped with a WARN
/// holding the file's path and `line <N>` (or `<path>:<N>`) — within 2 s of the change, or, for
/// a gateway that started with it, by the time the step looks (it is ready: it has read the file).
#[then(
    regex = r#"^(within 2 seconds )?the gateways? on (.+) (?:logs?|logged) a WARN naming (?:its|their) trust file and line (\d+)$"#
)]
async fn warn_names_line(w: &mut FleetWorld, after_change: String, hosts: String, line: usize) -> anyhow::Result<()> {
    let deadline = if after_change.is_empty() {
        // Logged at start, before the step: no reaction to time, only the step's own wait.
        super::Until::At(tokio::time::Instant::now() + fleet_conformance::timing::scaled(super::TWO_SECONDS))
    } else {
        two_seconds_after(w, Duration::ZERO)?
    };
    for h in hosts_named(w, &hosts) {
        let path = trust_path_of(w, &h)?;
        let gw = &w.host(&h)?.gateway;
        let path = &path;
        by_deadline(
            &format!("a WARN of {h} naming {path} and line {line}"),
            deadline.clone(),
            || async move {
                let log = gw.log();
                if names_line(&log, LogLevel::Warn, path, line) {
                    Ok(Some(()))
                } else {
                    let warns: Vec<&str> = log.lines().filter(|l| log_line_at(l, LogLevel::Warn)).collect();
                    Err(format!("WARN lines: {warns:?}"))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// [C-21] 10: a line skipped is not a file refused — over a window, no gateway logs an ERROR
/// holding its trust file's path (since its start).
#[then("over a window no gateway logs an ERROR naming its trust file")]
async fn no_error_for_trust(w: &mut FleetWorld) -> anyhow::Result<()> {
    let mut watched = Vec::new();
    for (h, host) in &w.hosts {
        watched.push((h.clone(), trust_path_of(w, h)?, &host.gateway));
    }
    let watched = &watched;
    hold_for("no ERROR naming a trust file", ABSENCE_WINDOW, || async move {
        for (h, path, gw) in watched {
            let log = gw.log();
            if let Some(l) = log
                .lines()
                .find(|l| log_line_at(l, LogLevel::Error) && l.contains(path.as_str()))
            {
                return Err(format!("the gateway on {h} logged: {l}"));
            }
        }
        Ok(())
    })
    .await?;
    Ok(())
}

/// MEM-1 / CONTRACT §12: a CA pasted in the form another OpenSSH file keeps it in — known_hosts'
/// `@cert-authority <hosts> <key>`, authorized_keys' `cert-authority <key>` — is a line that
/// does not parse. Every trust file becomes: a comment, that line (line 2), then the CAs it
/// listed — so a gateway that applied what comes before the bad line would lose its CAs.
#[when(
    regex = r#"^every trust file is replaced by one whose line 2 is the CA "([^"]+)" in (known_hosts|authorized_keys) form, followed by the CAs it listed$"#
)]
async fn pasted_form(w: &mut FleetWorld, ca: String, form: String) -> anyhow::Result<()> {
    let key = w.membership.ca(&ca)?.public_line().to_string();
    let pasted = match form.as_str() {
        "known_hosts" => format!("@cert-authority * {key}"),
        "authorized_keys" => format!("cert-authority {key}"),
        other => bail!("no form {other:?}"),
    };
    rewrite_all(w, Kind::Trust, |w, _| {
        let good = trust_file(w, None)?.ok_or_else(|| anyhow!("the gateways read no trust file"))?;
        let mut lines: Vec<&str> = good.lines().collect();
        ensure!(lines.first().is_some_and(|l| l.starts_with('#')), "{good}");
        lines.insert(1, &pasted);
        Ok(lines.join("\n") + "\n")
    })
}

/// Starts `host`'s gateway with the scenario's files, not waiting for it to be ready; "its
/// start" is the change later steps count from (`membership_lifecycle.feature`'s steps judge a
/// gateway started with a certificate the fleet would reject: an ERROR naming its certificate
/// file within the start bound, `/readyz` 503 and never 200, still running — [C-21] 12).
#[when(expr = "host {string} starts its gateway, not waited for")]
async fn starts_unready(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    ensure!(!w.hosts.contains_key(&host), "host {host:?} already runs");
    let (spec, herdr) = w.host_spec(&host).await?;
    let gateway = GatewayProcess::start_unready(spec)?;
    changed_now(w);
    w.hosts.insert(host, Host { gateway, herdr });
    Ok(())
}
