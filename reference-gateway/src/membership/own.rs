//! This gateway's own identity: its signing key and, optionally, its host certificate
//! (`FLEET_SIGNING_KEY_FILE`, `FLEET_HOST_CERT_FILE`; MEM-2, MEM-3, MEM-4).
//!
//! At start a certificate that is not a host certificate for this host over the signing key
//! refuses the start, naming the file: a gateway that carried it would be rejected by every
//! receiver. An expired or revoked own certificate does not refuse the start (the operator may be
//! about to renew it): the gateway reports not ready (`/readyz` 503) while it lasts, and WARNs
//! once a day from 7 days before its expiry, with the seconds left as a metric.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ssh_key::HashAlg;

use super::cert::{CertInfo, Window, utc};
use super::files::{self, FileError, TrustFile, meaningful_lines};
use super::krl::Krl;
use crate::signing::{KeyError, Signer};

/// Why the own key or certificate cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error(transparent)]
    Key(#[from] KeyError),
    #[error(transparent)]
    Cert(#[from] FileError),
}

/// A key and the certificate over it (if the gateway has one).
#[derive(Debug, Clone)]
pub struct OwnIdentity {
    pub signer: Arc<Signer>,
    pub cert: Option<Arc<CertInfo>>,
}

impl OwnIdentity {
    /// Reads the key file and the certificate file, and checks that they belong together.
    pub fn load(host: &str, key_file: &Path, cert_file: Option<&Path>) -> Result<OwnIdentity, IdentityError> {
        let signer = Arc::new(Signer::from_file(key_file)?);
        let cert = match cert_file {
            None => None,
            Some(path) => Some(Arc::new(read_cert(host, &signer, path)?)),
        };
        Ok(OwnIdentity { signer, cert })
    }

    /// Same key and same certificate as `other`.
    pub fn same_as(&self, other: &OwnIdentity) -> bool {
        self.signer.verifying_key() == other.signer.verifying_key()
            && self.cert.as_ref().map(|c| &c.text) == other.cert.as_ref().map(|c| &c.text)
    }
}

/// Reads `path` as this host's certificate over `signer`'s key.
fn read_cert(host: &str, signer: &Signer, path: &Path) -> Result<CertInfo, FileError> {
    let text = files::read(TrustFile::HostCert, path)?;
    let (line, cert_line) = meaningful_lines(&text).next().unwrap_or((1, ""));
    let bad = |reason: String| FileError::at(TrustFile::HostCert, path, files::LineError::new(line, reason));
    let cert = CertInfo::parse(cert_line).map_err(|p| bad(p.to_string()))?;
    if !cert.host {
        return Err(bad(
            "a user certificate; the gateway needs a host certificate (ssh-keygen -s CA -h …)".into(),
        ));
    }
    if !cert.principals.iter().any(|p| p == host) {
        return Err(bad(format!(
            "this host {host:?} is not among its principals {:?}",
            cert.principals
        )));
    }
    if cert.key != signer.verifying_key() {
        let ours = ssh_key::public::KeyData::Ed25519(signer.verifying_key().into()).fingerprint(HashAlg::Sha256);
        return Err(bad(format!(
            "it certifies the key {}, not this gateway's signing key {ours} (FLEET_SIGNING_KEY_FILE)",
            cert.key_fingerprint
        )));
    }
    Ok(cert)
}

/// The own identity of the running gateway, replaced by a rotation (MEM-3).
pub struct Own {
    host: String,
    pub key_file: PathBuf,
    pub cert_file: Option<PathBuf>,
    current: RwLock<Arc<OwnIdentity>>,
    /// When the "expires within 7 days" WARN was last logged.
    warned: Mutex<Option<Instant>>,
}

/// From how long before its expiry the own certificate is WARNed about (MEM-4).
pub const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 86_400);

/// How often that WARN repeats.
const WARN_EVERY: Duration = Duration::from_secs(86_400);

impl Own {
    pub fn new(host: &str, key_file: PathBuf, cert_file: Option<PathBuf>, id: OwnIdentity) -> Own {
        Own {
            host: host.to_string(),
            key_file,
            cert_file,
            current: RwLock::new(Arc::new(id)),
            warned: Mutex::new(None),
        }
    }

    pub fn identity(&self) -> Arc<OwnIdentity> {
        Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// The certificate line every `_gateway` PRESENCE carries (MEM-2).
    pub fn cert_text(&self) -> Option<String> {
        self.identity().cert.as_ref().map(|c| c.text.clone())
    }

    pub fn set(&self, id: OwnIdentity) {
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(id);
        *self.warned.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }

    /// Loads the key and certificate files again (a rotation's candidate).
    pub fn reload(&self) -> Result<OwnIdentity, IdentityError> {
        OwnIdentity::load(&self.host, &self.key_file, self.cert_file.as_deref())
    }

    /// MEM-4: why the gateway is not ready on account of its own certificate (expired, or revoked
    /// by `krl`), judged without skew: other gateways may still accept it for the skew, but it is
    /// the operator's to renew now.
    pub fn unready(&self, krl: &Krl, now_ms: u64) -> Option<String> {
        let id = self.identity();
        if let Some(fp) = krl.revokes_ed25519(&id.signer.verifying_key()) {
            return Some(format!(
                "own signing key {fp} (FLEET_SIGNING_KEY_FILE) is revoked by FLEET_REVOKED_FILE"
            ));
        }
        let cert = id.cert.as_ref()?;
        if let Some(why) = krl.revokes(cert.names()) {
            return Some(format!(
                "own certificate (FLEET_HOST_CERT_FILE) is revoked by FLEET_REVOKED_FILE ({why})"
            ));
        }
        (cert.window(now_ms, 0) == Window::Expired).then(|| {
            format!(
                "own certificate (FLEET_HOST_CERT_FILE) expired at {}",
                utc(cert.valid_before)
            )
        })
    }

    /// Seconds the own certificate has left (None: no certificate, or valid forever).
    pub fn seconds_left(&self, now_ms: u64) -> Option<i64> {
        let id = self.identity();
        let cert = id.cert.as_ref()?;
        (cert.valid_before != u64::MAX).then(|| {
            let left = i128::from(cert.valid_before) * 1000 - i128::from(now_ms);
            i64::try_from(left / 1000).unwrap_or(i64::MAX)
        })
    }

    /// MEM-4: the WARN of a certificate that expires within 7 days, at most once a day. Returns
    /// the text to log when it is due.
    pub fn expiry_warning_due(&self, now_ms: u64) -> Option<String> {
        let left = self.seconds_left(now_ms)?;
        if left < 0 || left as u64 > EXPIRY_WARNING.as_secs() {
            return None;
        }
        let mut warned = self.warned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if warned.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return None;
        }
        *warned = Some(Instant::now());
        let until = self
            .identity()
            .cert
            .as_ref()
            .map(|c| utc(c.valid_before))
            .unwrap_or_default();
        Some(format!(
            "own certificate (FLEET_HOST_CERT_FILE) expires at {until}, in {}h: renew it (ssh-keygen -s CA -h …) and replace the file",
            left / 3600
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::fixture;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fleet-own-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    fn write(d: &Path, name: &str, text: &str) -> PathBuf {
        let p = d.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    #[test]
    fn the_own_certificate_must_certify_the_key_for_this_host() {
        let d = dir("load");
        let key = write(&d, "a.key", &fixture("a.key"));
        let ok = write(&d, "ok", &fixture("a-cert.pub"));
        let id = OwnIdentity::load("a", &key, Some(&ok)).expect("a's pair");
        assert_eq!(id.cert.as_ref().map(|c| c.serial), Some(11));
        let refused = |cert: &str, host: &str| {
            let p = write(&d, "c", &fixture(cert));
            OwnIdentity::load(host, &key, Some(&p))
                .map(|_| ())
                .map_err(|e| e.to_string())
        };
        let e = refused("a-rotated-cert.pub", "a").expect_err("another key");
        assert!(e.contains("FLEET_HOST_CERT_FILE") && e.contains("line 1"), "{e}");
        assert!(e.contains("not this gateway's signing key"), "{e}");
        assert!(refused("a-user-cert.pub", "a").is_err());
        assert!(refused("a-cert.pub", "b").is_err(), "principal");
        assert!(refused("a.pub", "a").is_err(), "not a certificate");
        assert!(
            refused("a-expired-cert.pub", "a").is_ok(),
            "expired: started, not ready"
        );
        let none = OwnIdentity::load("a", &key, None).expect("no certificate");
        assert!(none.cert.is_none());
        assert!(!none.same_as(&id));
        assert!(id.same_as(&id.clone()));
    }

    #[test]
    fn expired_or_revoked_is_not_ready_and_expiry_is_warned_once() {
        let d = dir("ready");
        let key = write(&d, "a.key", &fixture("a.key"));
        let cert = write(&d, "a.cert", &fixture("a-cert.pub"));
        let id = OwnIdentity::load("a", &key, Some(&cert)).expect("pair");
        let own = Own::new("a", key.clone(), Some(cert), id.clone());
        let now = crate::envelope::now_ms();
        assert_eq!(own.unready(&Krl::default(), now), None);
        assert!(own.unready(&Krl::parse("serial: 11").expect("krl"), now).is_some());
        assert_eq!(own.seconds_left(now), None, "forever");
        let mut short = id.clone();
        let mut c = (**id.cert.as_ref().expect("cert")).clone();
        c.valid_before = now / 1000 + 3 * 86_400;
        short.cert = Some(Arc::new(c));
        own.set(short);
        assert!(own.seconds_left(now).is_some_and(|s| s > 2 * 86_400));
        assert!(own.expiry_warning_due(now).is_some());
        assert!(own.expiry_warning_due(now).is_none(), "once a day");
        assert!(own.unready(&Krl::default(), now + 4 * 86_400_000).is_some());
    }
}
