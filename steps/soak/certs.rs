//! The soak's gateways on certificates (SPEC §18), for the `rotate` and `revoke-restore` strikes.
//!
//! Why a file of its own: those strikes need a fleet whose trust is certificates, not the peers
//! file — otherwise a revoked certificate changes nothing (the peers file still pins the key) and
//! a rotated key is unknown to every receiver. When the nemesis cycle holds either strike and the
//! gateway under test declares `membership`, the Background's step here makes a fleet CA with the
//! real `ssh-keygen` and gives every soak host, before its gateway starts:
//!
//! - `FLEET_HOST_CERT_FILE`: its own host certificate over its signing key (`-h`, principal = the
//!   host, key id `<host>-<serial>`, a fresh serial);
//! - `FLEET_TRUST_CA_FILE`: the fleet CA's public key line;
//! - `FLEET_REVOKED_FILE`: a KRL specification, empty at first (a comment only);
//! - `FLEET_PEERS_FILE`: a peers file of its own, `[peers]` alone — no soak host is in any peers
//!   file, so a host's certificate is the only thing that admits its key anywhere (this replaces
//!   the suite's usual peers file through the host's environment).
//!
//! The files live in each host's directory and are replaced the way CONTRACT §12 says (written
//! beside, renamed over). [`SoakFleet`] keeps what the strikes change: each host's key and
//! certificate, the revocation list (it only grows: a restore keeps the old revocation) and the
//! serials handed out.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use cucumber::given;
use fleet_conformance::credentials::ca::{Ca, CertKind, CertRequest, Certificate, Validity};
use fleet_conformance::credentials::krl::{RevocationList, Revoke};
use fleet_conformance::credentials::openssh::write_public_key;
use fleet_conformance::credentials::peers::PeersFile;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::keys::HostKey;

use crate::world::{FleetWorld, Suite};

use super::config::SoakConfig;
use super::nodes::cluster_profile;

/// The files in each host's directory (named apart from the membership scenarios' own).
const TRUST_FILE: &str = "soak-trust-cas.pub";
const REVOKED_FILE: &str = "soak-revoked.krl";
const CERT_FILE: &str = "soak-host-cert.pub";
const PEERS_FILE: &str = "soak-peers.toml";

/// How long the soak's certificates are valid (from 5 minutes ago): longer than any soak.
const VALID_FOR: Duration = Duration::from_secs(24 * 3600);

/// One host on certificates.
#[derive(Clone)]
pub(super) struct CertHost {
    /// The key its gateway signs with now (a rotation replaces it).
    pub(super) key: HostKey,
    /// Its certificate now (a rotation or a restore replaces it).
    pub(super) cert: Certificate,
    /// Every certificate it has held, oldest first.
    pub(super) history: Vec<Certificate>,
}

/// The soak's fleet on certificates.
pub(super) struct SoakFleet {
    ca: Ca,
    /// The scenario's directory (the hosts' directories are under it).
    dir: PathBuf,
    pub(super) hosts: BTreeMap<String, CertHost>,
    /// What every revocation list revokes, in order (only grows).
    pub(super) revoked: RevocationList,
    serial: u64,
}

impl SoakFleet {
    fn host_dir(&self, host: &str) -> PathBuf {
        self.dir.join(host)
    }

    /// `host`'s certificate file.
    pub(super) fn cert_path(&self, host: &str) -> PathBuf {
        self.host_dir(host).join(CERT_FILE)
    }

    fn revoked_path(&self, host: &str) -> PathBuf {
        self.host_dir(host).join(REVOKED_FILE)
    }

    /// Whether the revocation list revokes `cert` by its serial or key id (the only forms the soak
    /// writes; `key:` and `hash:` lines would revoke a key under every certificate).
    pub(super) fn is_revoked(&self, cert: &Certificate) -> bool {
        self.revoked.entries.iter().any(|e| match e {
            Revoke::Serial(n) => *n == cert.serial,
            Revoke::SerialRange(a, b) => (*a..=*b).contains(&cert.serial),
            Revoke::Id(id) => *id == cert.key_id,
            Revoke::Key(_) | Revoke::Hash(_) => false,
        })
    }

    /// `host`'s certificates that are neither its current one nor revoked: after a rotation the
    /// older keys stay valid until their certificates expire (MEM-3), so revoking the current
    /// certificate leaves the host a valid key.
    pub(super) fn other_valid(&self, host: &str) -> Vec<&Certificate> {
        self.hosts.get(host).map_or_else(Vec::new, |h| {
            h.history
                .iter()
                .filter(|c| c.serial != h.cert.serial && !self.is_revoked(c))
                .collect()
        })
    }

    pub(super) fn host(&self, host: &str) -> anyhow::Result<&CertHost> {
        self.hosts
            .get(host)
            .ok_or_else(|| anyhow!("host {host:?} is not on certificates in this soak"))
    }

    /// A host certificate from the fleet CA over `key` for `host`, with the next serial.
    pub(super) fn issue(&mut self, host: &str, key: &HostKey) -> anyhow::Result<Certificate> {
        self.serial += 1;
        let serial = self.serial;
        let keys = self.dir.join("soak-ca").join("keys");
        std::fs::create_dir_all(&keys).with_context(|| format!("creating {}", keys.display()))?;
        let pub_path = keys.join(format!("{host}-{serial}.pub"));
        write_public_key(key, &pub_path)?;
        Ok(self.ca.sign(&CertRequest {
            public_key: &pub_path,
            kind: CertKind::Host,
            key_id: &format!("{host}-{serial}"),
            principals: &[host.to_string()],
            validity: Validity::around_now(Duration::from_secs(300), VALID_FOR),
            serial,
        })?)
    }

    /// Notes that `host` now holds `key` and `cert` (its files are the caller's).
    pub(super) fn adopt(&mut self, host: &str, key: HostKey, cert: Certificate) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.key = key;
            h.history.push(cert.clone());
            h.cert = cert;
        }
    }

    /// Adds `entry` to the revocation list and replaces every host's file with it (CONTRACT §12:
    /// beside, then renamed over).
    pub(super) fn revoke(&mut self, entry: Revoke) -> anyhow::Result<()> {
        self.revoked.entries.push(entry);
        let text = self.revoked.render();
        for host in self.hosts.keys() {
            write_replace(&self.revoked_path(host), &text, 0o644)?;
        }
        Ok(())
    }
}

/// Why the soak's gateways cannot run on certificates here, if they cannot (said in the summary's
/// `nemesis.off` for `rotate` and `revoke-restore`).
pub(super) fn trust_strikes_off(suite: &Suite) -> Option<String> {
    (!suite.membership).then(|| {
        "the gateway under test does not declare `membership` (SPEC §18): its gateways run on the peers file, \
         which a certificate's rotation or revocation does not change"
            .to_string()
    })
}

/// Whether this soak runs its gateways on certificates: the cycle strikes them and the gateway
/// declares `membership`.
fn on_certificates(suite: &Suite, config: &SoakConfig) -> bool {
    config.cycle.iter().any(|s| s.is_trust()) && trust_strikes_off(suite).is_none()
}

#[given(
    regex = r#"^hosts "([^"]+)", "([^"]+)" and "([^"]+)" run on certificates from a fleet CA when the nemesis rotates keys or revokes certificates$"#
)]
async fn on_certs(w: &mut FleetWorld, a: String, b: String, c: String) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let config = match w.soak.config.clone() {
        Some(c) => c,
        None => SoakConfig::from_env(cluster_profile(&suite))?,
    };
    if !on_certificates(&suite, &config) {
        // The gateways keep the peers file; the strikes are off and the summary says why.
        return Ok(());
    }
    let hosts = [a, b, c];
    for h in &hosts {
        anyhow::ensure!(
            !w.hosts.contains_key(h),
            "host {h:?} already runs: its certificate must come with its start"
        );
    }
    let ca = Ca::create(&w.dir.join("soak-ca"), "soak")?;
    let mut fleet = SoakFleet {
        ca,
        dir: w.dir.clone(),
        hosts: BTreeMap::new(),
        revoked: RevocationList::default(),
        serial: 0,
    };
    let trust = format!("# the soak's fleet CA (SPEC MEM-2)\n{}\n", fleet.ca.public_line());
    for h in &hosts {
        // The key `host_spec` will give the gateway (minted now if the world has none yet).
        let key = w.keys.entry(h.clone()).or_insert_with(|| HostKey::generate(h)).clone();
        let cert = fleet.issue(h, &key)?;
        let dir = fleet.host_dir(h);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let files = [
            ("FLEET_TRUST_CA_FILE", TRUST_FILE, trust.clone()),
            ("FLEET_REVOKED_FILE", REVOKED_FILE, fleet.revoked.render()),
            ("FLEET_HOST_CERT_FILE", CERT_FILE, format!("{}\n", cert.line)),
            ("FLEET_PEERS_FILE", PEERS_FILE, PeersFile::default().render()),
        ];
        let env = w.host_env.entry(h.clone()).or_default();
        for (var, name, text) in files {
            let path = dir.join(name);
            write_replace(&path, &text, 0o644)?;
            env.insert(var.into(), path.display().to_string());
        }
        fleet.hosts.insert(
            h.clone(),
            CertHost {
                key,
                cert: cert.clone(),
                history: vec![cert],
            },
        );
    }
    println!(
        "soak: hosts {hosts:?} run on certificates from a fleet CA (trust file, revocation list, host certificate; \
         peers file `[peers]` alone)"
    );
    w.soak.fleet = Some(fleet);
    Ok(())
}
