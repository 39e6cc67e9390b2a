//! What this gateway trusts right now, and why: `GET /v1/trust` (admin token) and, through it,
//! `fleet-gateway trust show`.
//!
//! An operator's question is "why is host c out?" (or "why is it still in?"). The answer is per
//! host and per key: where the key came from (the peers file, or a certificate seen in the host's
//! `_gateway` presence: its serial, key id, CA and validity), its state now (valid, or the check
//! it fails: revoked and by which entry, expired, not yet valid, untrusted), and the roster
//! consequence (listed while one key is valid; dropped once none is, MEM-1/MEM-4). The gateway's
//! own credential is judged the same way ([C-21] 12). Reference behaviour, not judged by the
//! suite: the shape is documented in the README.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cert::{CertInfo, key_fingerprint as fingerprint, utc};
use super::krl::Krl;
use super::status::KeptOut;
use crate::envelope::now_ms;
use crate::gateway::Gateway;

/// The whole report.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TrustReport {
    pub host: String,
    pub own: OwnReport,
    pub files: FilesReport,
    /// Every host this gateway holds a key for (valid or not), or lists in its roster.
    pub hosts: Vec<HostReport>,
}

/// This gateway's own credential.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnReport {
    pub key: String,
    pub certificate: Option<CertReport>,
    /// `valid`, or the check a peer would fail it by (`revoked`, `cert_expired`, `certificate`).
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// A key and certificate on disk the gateway refused to rotate to: it signs with the pair
    /// above until they are replaced or (refused only for not being valid yet) become valid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused_rotation: Option<RefusedReport>,
}

/// A refused rotation (MEM-3, [C-21] 12, [C-27] 3).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RefusedReport {
    /// The variable naming the file refused (`FLEET_HOST_CERT_FILE`, `FLEET_SIGNING_KEY_FILE`).
    pub file: String,
    pub why: String,
    pub since: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at: Option<String>,
}

/// A trust file whose content on disk is not in force, and why.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeptOutReport {
    pub file: String,
    pub path: String,
    /// `broken` (the last good content stays, [C-27] 1) or `emptied` (held back, [C-27] 2).
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    pub since: String,
}

/// The last credential rejection of a host's presence.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RejectedReport {
    pub check: String,
    pub why: String,
    pub last: String,
    pub count: u64,
}

/// The files in force.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilesReport {
    pub peers_file: String,
    pub trust_ca_file: Option<String>,
    pub revoked_file: Option<String>,
    pub peers: usize,
    pub cas: usize,
    pub revocations: usize,
    /// Files whose content on disk is not the one in force.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept_out: Vec<KeptOutReport>,
}

/// One host: its keys and whether the roster lists it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HostReport {
    pub host: String,
    /// Whether any of its keys is valid now (its messages and presences verify).
    pub trusted: bool,
    /// Its live entries in this gateway's roster.
    pub roster_entries: usize,
    /// In words: why it is listed, or why not.
    pub consequence: String,
    pub keys: Vec<KeyReport>,
    /// Its presences' last rejection for their credential (CA, principal, certificate type,
    /// critical options, revoked, expired), if any since the gateway started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<RejectedReport>,
}

/// One key of a host.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyReport {
    /// SHA-256 fingerprint, as `ssh-keygen -l` prints it.
    pub key: String,
    /// `peers file`, `certificate` or `own key`.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertReport>,
    /// `valid`, `revoked`, `cert_expired` or `certificate`.
    pub state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// What a certificate says, as an operator reads it with `ssh-keygen -L`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CertReport {
    pub serial: u64,
    pub key_id: String,
    pub ca: String,
    pub principals: Vec<String>,
    pub valid_after: String,
    pub valid_before: String,
}

impl CertReport {
    fn of(c: &CertInfo) -> CertReport {
        CertReport {
            serial: c.serial,
            key_id: c.key_id.clone(),
            ca: c.ca_fingerprint.to_string(),
            principals: c.principals.clone(),
            valid_after: utc(c.valid_after),
            valid_before: utc(c.valid_before),
        }
    }
}

/// A plain key's state under `krl`.
fn plain_key(key: &ed25519_dalek::VerifyingKey, source: &'static str, krl: &Krl) -> KeyReport {
    let revoked = krl.revokes_ed25519(key);
    KeyReport {
        key: fingerprint(key),
        source: source.to_string(),
        certificate: None,
        state: if revoked.is_some() { "revoked" } else { "valid" }.to_string(),
        why: revoked.map(|fp| {
            let line = krl.key_line(&fp).map(|n| format!(" (line {n})")).unwrap_or_default();
            format!("the key {fp} is revoked by FLEET_REVOKED_FILE{line}")
        }),
    }
}

impl Gateway {
    /// The trust report of this moment.
    pub fn trust_report(&self) -> TrustReport {
        let now = now_ms();
        let m = &self.membership;
        let trust = &m.trust;
        let files = trust.files();
        let id = m.own.identity();
        let own_problem = m.own_problem();
        let own = OwnReport {
            key: fingerprint(&id.signer.verifying_key()),
            certificate: id.cert.as_deref().map(CertReport::of),
            state: own_problem.as_ref().map_or("valid", |p| p.check).to_string(),
            why: own_problem.map(|p| p.why),
            refused_rotation: m.decisions.refused_rotation().map(|r| RefusedReport {
                file: r.file.var().to_string(),
                why: r.error,
                since: utc_ms(r.since_ms),
                retry_at: r.retry_at_ms.map(utc_ms),
            }),
        };
        let mut hosts: BTreeMap<String, Vec<KeyReport>> = BTreeMap::new();
        for host in files.peers.hosts() {
            let keys = hosts.entry(host.to_string()).or_default();
            for k in files.peers.keys(host) {
                keys.push(plain_key(k, "peers file", &files.krl));
            }
        }
        for k in trust.own_keys().iter() {
            let mut r = plain_key(k, "own key", &files.krl);
            r.state = "valid".to_string(); // a gateway always verifies what it signed itself
            r.why = None;
            hosts.entry(self.cfg.host_id.clone()).or_default().push(r);
        }
        for (host, learned) in trust.learned() {
            let keys = hosts.entry(host).or_default();
            for l in learned.iter() {
                let status = trust.status_of(l, now);
                keys.push(KeyReport {
                    key: l.cert.key_fingerprint.to_string(),
                    source: "certificate".to_string(),
                    certificate: Some(CertReport::of(&l.cert)),
                    state: status.as_ref().map_or_else(|p| p.check(), |()| "valid").to_string(),
                    why: status.err().map(|p| p.to_string()),
                });
            }
        }
        let mut listed: BTreeMap<String, usize> = BTreeMap::new();
        for e in self.roster.snapshot() {
            *listed.entry(e.host).or_default() += 1;
        }
        let mut rejected = m.decisions.rejected_hosts();
        for host in listed.keys().chain(rejected.keys()) {
            hosts.entry(host.clone()).or_default();
        }
        let hosts = hosts
            .into_iter()
            .map(|(host, keys)| {
                let trusted = keys.iter().any(|k| k.state == "valid");
                let roster_entries = listed.get(&host).copied().unwrap_or(0);
                let rejected = rejected.remove(&host).map(|r| RejectedReport {
                    check: r.check.to_string(),
                    why: r.why,
                    last: utc_ms(r.last_ms),
                    count: r.count,
                });
                let consequence = match (trusted, roster_entries, &rejected) {
                    (true, 0, _) => "a valid key: its presences are taken (none listed now)".to_string(),
                    (true, n, _) => format!("a valid key: listed ({n} entries)"),
                    (false, 0, Some(r)) => format!("not listed: its presences are rejected ({})", r.check),
                    (false, 0, None) => "no valid key: not listed, its messages are rejected".to_string(),
                    (false, n, _) => {
                        format!("no valid key: its {n} entries are being dropped (within 2 s of the change)")
                    }
                };
                HostReport {
                    host,
                    trusted,
                    roster_entries,
                    consequence,
                    keys,
                    rejected,
                }
            })
            .collect();
        let path = |p: &Option<std::path::PathBuf>| p.as_ref().map(|p| p.display().to_string());
        TrustReport {
            host: self.cfg.host_id.clone(),
            own,
            files: FilesReport {
                peers_file: self.cfg.peers_file.display().to_string(),
                trust_ca_file: path(&self.cfg.trust_ca_file),
                revoked_file: path(&self.cfg.revoked_file),
                peers: files.peers.hosts().count(),
                cas: files.cas.len(),
                revocations: files.krl.len(),
                kept_out: m
                    .decisions
                    .files()
                    .into_iter()
                    .map(|k| {
                        let (state, why) = match k.why {
                            // The error names the file and its path already: said once, above it.
                            KeptOut::Broken { error } => {
                                let named = format!("{} {}: ", k.file.var(), k.path);
                                (
                                    "broken",
                                    Some(error.strip_prefix(&named).map_or(error.clone(), str::to_string)),
                                )
                            }
                            KeptOut::Emptied => ("emptied", None),
                        };
                        KeptOutReport {
                            file: k.file.var().to_string(),
                            path: k.path,
                            state: state.to_string(),
                            why,
                            since: utc_ms(k.since_ms),
                        }
                    })
                    .collect(),
            },
            hosts,
        }
    }
}

/// `fleet-gateway trust show`: asks the running gateway on `listen` for its report (admin
/// `token`) and returns it printed ([`render`]), or as the JSON it answered when `json`.
pub fn show(listen: std::net::SocketAddr, token: &str, json: bool) -> anyhow::Result<String> {
    use anyhow::Context as _;
    use std::io::{Read as _, Write as _};
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let timeout = std::time::Duration::from_secs(5);
    let mut s = std::net::TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to the gateway on {addr} (FLEET_LISTEN): is it running?"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(
        s,
        "GET /v1/trust HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        anyhow::bail!("GET /v1/trust on {addr}: {status}: {body}");
    }
    if json {
        return Ok(format!("{body}\n"));
    }
    let report: TrustReport = serde_json::from_str(body).context("the gateway's /v1/trust answer")?;
    Ok(render(&report))
}

/// The report as `trust show` prints it: one block per host, one line per key.
pub fn render(r: &TrustReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "gateway {}: own key {} — {}{}",
        r.host,
        r.own.key,
        r.own.state,
        r.own.why.as_deref().map(|w| format!(" ({w})")).unwrap_or_default()
    );
    if let Some(c) = &r.own.certificate {
        let _ = writeln!(out, "  own certificate: {}", cert_words(c));
    }
    if let Some(x) = &r.own.refused_rotation {
        let _ = writeln!(
            out,
            "  refused rotation (since {}): the pair on disk is not taken: {}",
            x.since, x.why
        );
    }
    let _ = writeln!(
        out,
        "files: peers {} ({} hosts); CAs {} ({}); revocations {} ({} entries)",
        r.files.peers_file,
        r.files.peers,
        r.files.trust_ca_file.as_deref().unwrap_or("unset"),
        r.files.cas,
        r.files.revoked_file.as_deref().unwrap_or("unset"),
        r.files.revocations
    );
    for k in &r.files.kept_out {
        let what = match (k.state.as_str(), &k.why) {
            ("emptied", _) => "emptied: held back, the content before stays in force unless it stays empty".to_string(),
            (_, Some(why)) => format!("not applied, the last good content stays in force: {why}"),
            (state, None) => state.to_string(),
        };
        let _ = writeln!(out, "  {} {} (since {}): {what}", k.file, k.path, k.since);
    }
    for h in &r.hosts {
        let _ = writeln!(out, "\nhost {}: {}", h.host, h.consequence);
        if let Some(x) = &h.rejected {
            let _ = writeln!(
                out,
                "  presences rejected ({}, {} since start, last {}): {}",
                x.check, x.count, x.last, x.why
            );
        }
        for k in &h.keys {
            let from = match &k.certificate {
                Some(c) => format!("certificate {}", cert_words(c)),
                None => k.source.to_string(),
            };
            let why = k.why.as_deref().map(|w| format!(": {w}")).unwrap_or_default();
            let _ = writeln!(out, "  {}  {from}  → {}{why}", k.key, k.state);
        }
    }
    out
}

/// A Unix-ms instant as the report's other times read (UTC, to the second).
fn utc_ms(ms: u64) -> String {
    utc(ms / 1000)
}

fn cert_words(c: &CertReport) -> String {
    format!(
        "serial {}, key id {:?}, CA {}, valid {} to {}",
        c.serial, c.key_id, c.ca, c.valid_after, c.valid_before
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{fixture, seed_signer};

    #[test]
    fn the_report_says_which_key_is_revoked_and_what_follows() {
        let d = std::env::temp_dir().join(format!("fleet-trust-report-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let file = |name: &str, text: &str| {
            let p = d.join(name);
            std::fs::write(&p, text).expect("write");
            p.display().to_string()
        };
        let (b, c) = (seed_signer("b"), seed_signer("c"));
        let peers = format!(
            "[peers]\nb = \"{}\"\nc = \"{}\"\n",
            b.public_base64(),
            c.public_base64()
        );
        let env: std::collections::BTreeMap<String, String> = [
            ("FLEET_HOST_ID", "a".to_string()),
            ("FLEET_AMQP_URL", "amqp://127.0.0.1:1/fleet".into()),
            ("FLEET_SIGNING_KEY_FILE", file("a.key", &fixture("a.key"))),
            ("FLEET_HOST_CERT_FILE", file("a-cert.pub", &fixture("a-cert.pub"))),
            ("FLEET_PEERS_FILE", file("peers.toml", &peers)),
            ("FLEET_TRUST_CA_FILE", file("ca.txt", &fixture("trust-ca.txt"))),
            (
                "FLEET_REVOKED_FILE",
                file("krl.txt", &format!("key: {}", fixture("c.pub"))),
            ),
            ("FLEET_HERDR_SOCKET", d.join("herdr.sock").display().to_string()),
            ("FLEET_LISTEN", "127.0.0.1:0".into()),
            ("FLEET_ADMIN_TOKEN", "admin-token-123".into()),
            ("FLEET_STATE_DIR", d.join("state").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let cfg = crate::config::Config::from_sources(env, None).expect("config");
        let gw = Gateway::new(cfg, crate::areas::SpecAreas::all()).expect("gateway");
        let r = gw.trust_report();
        assert_eq!(r.own.state, "valid");
        assert_eq!(r.own.certificate.as_ref().map(|c| c.serial), Some(11));
        let host = |h: &str| r.hosts.iter().find(|x| x.host == h).expect("host reported");
        assert!(host("b").trusted);
        assert!(!host("c").trusted);
        assert_eq!(host("c").keys[0].state, "revoked");
        assert!(
            host("c").consequence.contains("not listed"),
            "{}",
            host("c").consequence
        );
        let text = render(&r);
        assert!(text.contains("host c: no valid key"), "{text}");
        assert!(text.contains("peers file  → revoked: the key SHA256:"), "{text}");
        assert!(
            text.contains("FLEET_REVOKED_FILE (line 1)"),
            "the line is named: {text}"
        );
        let back: TrustReport = serde_json::from_str(&serde_json::to_string(&r).expect("json")).expect("reads back");
        assert_eq!(render(&back), text);

        // What was refused is shown too: a file kept out, a rotation, a host's presences.
        let d = &gw.membership.decisions;
        let ca = file("ca.txt", &fixture("trust-ca.txt"));
        d.file(
            crate::membership::files::TrustFile::TrustCa,
            Some((
                ca.clone(),
                KeptOut::Broken {
                    error: format!("FLEET_TRUST_CA_FILE {ca}: line 3: cut"),
                },
            )),
            1_000_000,
        );
        d.rotation(Some(crate::membership::status::RefusedRotation {
            file: crate::membership::files::TrustFile::HostCert,
            error: "not valid yet".into(),
            since_ms: 1_000_000,
            retry_at_ms: Some(2_000_000),
        }));
        d.rejected("e", "certificate", "CA not trusted".into(), 1_000_000);
        let text = render(&gw.trust_report());
        assert!(text.contains(&format!("FLEET_TRUST_CA_FILE {ca} (since 1970-01-01T00:16:40Z): not applied, the last good content stays in force: line 3: cut")), "{text}");
        assert!(
            text.contains(
                "refused rotation (since 1970-01-01T00:16:40Z): the pair on disk is not taken: not valid yet"
            ),
            "{text}"
        );
        assert!(
            text.contains("host e: not listed: its presences are rejected (certificate)"),
            "{text}"
        );
        assert!(
            text.contains("presences rejected (certificate, 1 since start, last 1970-01-01T00:16:40Z): CA not trusted"),
            "{text}"
        );
    }
}
