//! The soak's fleet on certificates: each host's key and certificates, the revocation list and
//! the serials handed out, and where their files go.
//!
//! Exists apart from `certs.rs` (the step that puts the soak's hosts on certificates) because the
//! soak's state holds it (`history.rs`) and the `rotate` and `revoke-restore` strikes change it
//! (`trust.rs`): kept with the step, the state would import the steps, which import the world,
//! which holds the state.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use fleet_conformance::credentials::ca::{Ca, CertKind, CertRequest, Certificate, Validity};
use fleet_conformance::credentials::krl::{RevocationList, Revoke};
use fleet_conformance::credentials::openssh::write_public_key;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::keys::HostKey;

/// The files in each host's directory (named apart from the membership scenarios' own).
pub(super) const TRUST_FILE: &str = "soak-trust-cas.pub";
pub(super) const REVOKED_FILE: &str = "soak-revoked.krl";
pub(super) const CERT_FILE: &str = "soak-host-cert.pub";
pub(super) const PEERS_FILE: &str = "soak-peers.toml";

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
    pub(super) ca: Ca,
    /// The scenario's directory (the hosts' directories are under it).
    dir: PathBuf,
    pub(super) hosts: BTreeMap<String, CertHost>,
    /// What every revocation list revokes, in order (only grows).
    pub(super) revoked: RevocationList,
    serial: u64,
}

impl SoakFleet {
    /// A fleet of no host yet, on `ca`, whose hosts' directories are under `dir`.
    pub(super) fn new(ca: Ca, dir: PathBuf) -> SoakFleet {
        SoakFleet {
            ca,
            dir,
            hosts: BTreeMap::new(),
            revoked: RevocationList::default(),
            serial: 0,
        }
    }

    /// `host`'s directory (its gateway's own).
    pub(super) fn host_dir(&self, host: &str) -> PathBuf {
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
