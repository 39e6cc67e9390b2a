//! This gateway's own identity: its signing key and, optionally, its host certificate
//! (`FLEET_SIGNING_KEY_FILE`, `FLEET_HOST_CERT_FILE`; MEM-2, MEM-3, MEM-4).
//!
//! A certificate file that cannot be read, or that certifies another key than the signing key,
//! refuses the start (and a rotation), naming the file: there is no pair to speak of. Every other
//! check is the one a peer makes ([C-21] 12, [`judge`]): against this gateway's own trust file,
//! revocation list and the validity window. A certificate that fails it — CA not trusted, revoked,
//! not yet valid, expired, a user certificate, the host not among its principals, critical
//! options — does not stop the start (the operator may be about to replace it): the gateway logs
//! an ERROR naming why, reports not ready (`/readyz` 503) and refuses to publish ([C-21] 9:
//! every receiver would reject what it sends) while it lasts. A rotation to such a certificate
//! is refused, the old pair kept. From 7 days before its expiry a WARN is logged once a day,
//! with the seconds left as a metric.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use ssh_key::HashAlg;

use super::ca::CaSet;
use super::cert::{CertInfo, CertProblem, Window, utc};
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
    pub fn load(key_file: &Path, cert_file: Option<&Path>) -> Result<OwnIdentity, IdentityError> {
        let signer = Arc::new(Signer::from_file(key_file)?);
        let cert = match cert_file {
            None => None,
            Some(path) => Some(Arc::new(read_cert(&signer, path)?)),
        };
        Ok(OwnIdentity { signer, cert })
    }

    /// Same key and same certificate as `other`.
    pub fn same_as(&self, other: &OwnIdentity) -> bool {
        self.signer.verifying_key() == other.signer.verifying_key()
            && self.cert.as_ref().map(|c| &c.text) == other.cert.as_ref().map(|c| &c.text)
    }
}

/// Reads `path` as a certificate over `signer`'s key (the pair); the peer's checks are [`judge`].
fn read_cert(signer: &Signer, path: &Path) -> Result<CertInfo, FileError> {
    let text = files::read(TrustFile::HostCert, path)?;
    let (line, cert_line) = meaningful_lines(&text).next().unwrap_or((1, ""));
    let bad = |reason: String| FileError::at(TrustFile::HostCert, path, files::LineError::new(line, reason));
    let cert = CertInfo::parse(cert_line).map_err(|p| bad(p.to_string()))?;
    if cert.key != signer.verifying_key() {
        let ours = ssh_key::public::KeyData::Ed25519(signer.verifying_key().into()).fingerprint(HashAlg::Sha256);
        return Err(bad(format!(
            "it certifies the key {}, not this gateway's signing key {ours} (FLEET_SIGNING_KEY_FILE)",
            cert.key_fingerprint
        )));
    }
    Ok(cert)
}

/// Why this gateway's own credential would be rejected by its peers: the check name of
/// [C-21] 3 (`revoked`, `cert_expired`, `certificate`) and the words an operator reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnProblem {
    pub check: &'static str,
    pub why: String,
}

impl std::fmt::Display for OwnProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.why, self.check)
    }
}

/// [C-21] 12: the checks a peer makes of `cert` for `host` — CA trusted (when this gateway reads
/// a trust file: `cas` is None without `FLEET_TRUST_CA_FILE`), a host certificate naming `host`,
/// no critical option, not revoked, inside its window. Not yet valid is judged with the skew
/// (peers accept it that early); expired at `valid before` on this clock, without it ([C-21] 1).
pub fn judge(
    cert: &CertInfo,
    host: &str,
    cas: Option<&CaSet>,
    krl: &Krl,
    now_ms: u64,
    skew_ms: u64,
) -> Result<(), CertProblem> {
    match cas {
        Some(cas) => cert.check_standing(host, cas, krl)?,
        None => {
            cert.check_host(host)?;
            if let Some(why) = krl.revokes(cert.names()) {
                return Err(CertProblem::Revoked(why));
            }
        }
    }
    if cert.window(now_ms, skew_ms) == Window::NotYet {
        return Err(CertProblem::NotYetValid(utc(cert.valid_after)));
    }
    if cert.window(now_ms, 0) == Window::Expired {
        return Err(CertProblem::Expired(utc(cert.valid_before)));
    }
    Ok(())
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

    pub fn host(&self) -> &str {
        &self.host
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
        OwnIdentity::load(&self.key_file, self.cert_file.as_deref())
    }

    /// MEM-4, [C-21] 12: why the gateway's own credential would be rejected by its peers now, if
    /// it would: its key revoked, or its certificate failing [`judge`] against `cas` (None: no
    /// trust file) and `krl`. The gateway is then not ready and refuses to publish.
    pub fn problem(&self, cas: Option<&CaSet>, krl: &Krl, now_ms: u64, skew_ms: u64) -> Option<OwnProblem> {
        let id = self.identity();
        if let Some(fp) = krl.revokes_ed25519(&id.signer.verifying_key()) {
            return Some(OwnProblem {
                check: "revoked",
                why: format!(
                    "own signing key {fp} (FLEET_SIGNING_KEY_FILE) is revoked by FLEET_REVOKED_FILE{}",
                    krl.key_line(&fp).map(|n| format!(" (line {n})")).unwrap_or_default()
                ),
            });
        }
        let cert = id.cert.as_ref()?;
        judge(cert, &self.host, cas, krl, now_ms, skew_ms)
            .err()
            .map(|p| self.own_problem(&p))
    }

    /// `p` in the words of this gateway's own certificate file.
    pub fn own_problem(&self, p: &CertProblem) -> OwnProblem {
        let path = self.cert_file.as_deref().map(Path::display);
        OwnProblem {
            check: p.check(),
            why: match path {
                Some(path) => format!("own certificate {path} (FLEET_HOST_CERT_FILE): {p}"),
                None => format!("own certificate: {p}"),
            },
        }
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
    fn the_own_certificate_must_certify_the_key() {
        let d = dir("load");
        let key = write(&d, "a.key", &fixture("a.key"));
        let ok = write(&d, "ok", &fixture("a-cert.pub"));
        let id = OwnIdentity::load(&key, Some(&ok)).expect("a's pair");
        assert_eq!(id.cert.as_ref().map(|c| c.serial), Some(11));
        let loaded = |cert: &str| {
            let p = write(&d, "c", &fixture(cert));
            OwnIdentity::load(&key, Some(&p)).map_err(|e| e.to_string())
        };
        let e = loaded("a-rotated-cert.pub").map(|_| ()).expect_err("another key");
        assert!(e.contains("FLEET_HOST_CERT_FILE") && e.contains("line 1"), "{e}");
        assert!(e.contains("not this gateway's signing key"), "{e}");
        assert!(loaded("a.pub").is_err(), "not a certificate");
        // The peer's checks do not stop the start ([C-21] 12): they make it not ready.
        assert!(loaded("a-user-cert.pub").is_ok());
        assert!(loaded("a-expired-cert.pub").is_ok());
        let none = OwnIdentity::load(&key, None).expect("no certificate");
        assert!(none.cert.is_none());
        assert!(!none.same_as(&id));
        assert!(id.same_as(&id.clone()));
    }

    #[test]
    fn the_own_certificate_is_judged_as_a_peer_would() {
        let cas = CaSet::parse(&fixture("trust-ca.txt")).expect("CA file");
        let none = Krl::default();
        let judged = |name: &str, host: &str, cas: Option<&CaSet>| {
            let c = CertInfo::parse(&fixture(&format!("{name}-cert.pub"))).expect("parses");
            judge(&c, host, cas, &none, NOW, 30_000).map_err(|p| p.check())
        };
        assert_eq!(judged("a", "a", Some(&cas)), Ok(()));
        assert_eq!(judged("a", "a", None), Ok(()), "no trust file: the CA is not judged");
        assert_eq!(judged("a-other-ca", "a", Some(&cas)), Err("certificate"));
        assert_eq!(judged("a-other-ca", "a", None), Ok(()));
        assert_eq!(judged("a-user", "a", None), Err("certificate"));
        assert_eq!(judged("a", "b", None), Err("certificate"), "principal");
        assert_eq!(
            judged("a-force-command", "a", None),
            Err("certificate"),
            "critical options"
        );
        assert_eq!(judged("a-future", "a", Some(&cas)), Err("certificate"));
        assert_eq!(judged("a-expired", "a", Some(&cas)), Err("cert_expired"));
        let c = CertInfo::parse(&fixture("a-cert.pub")).expect("parses");
        let krl = Krl::parse("serial: 11").expect("krl");
        assert_eq!(
            judge(&c, "a", None, &krl, NOW, 0).map_err(|p| p.check()),
            Err("revoked")
        );
        let mut short = c.clone();
        short.valid_before = NOW / 1000 + 1;
        assert_eq!(judge(&short, "a", None, &none, NOW + 999, 30_000), Ok(()));
        assert_eq!(
            judge(&short, "a", None, &none, NOW + 1_000, 30_000).map_err(|p| p.check()),
            Err("cert_expired"),
            "expired at valid before on its own clock, skew or not ([C-21] 1)"
        );
    }

    const NOW: u64 = 1_767_225_600_000; // 2026-01-01

    #[test]
    fn expired_or_revoked_is_not_ready_and_expiry_is_warned_once() {
        let d = dir("ready");
        let key = write(&d, "a.key", &fixture("a.key"));
        let cert = write(&d, "a.cert", &fixture("a-cert.pub"));
        let id = OwnIdentity::load(&key, Some(&cert)).expect("pair");
        let own = Own::new("a", key.clone(), Some(cert), id.clone());
        let now = crate::envelope::now_ms();
        let problem = |krl: &Krl, at: u64| own.problem(None, krl, at, 0).map(|p| p.check);
        assert_eq!(problem(&Krl::default(), now), None);
        assert_eq!(problem(&Krl::parse("serial: 11").expect("krl"), now), Some("revoked"));
        let by_key = Krl::parse(&format!("key: {}", fixture("a.pub"))).expect("krl");
        assert_eq!(problem(&by_key, now), Some("revoked"), "the key itself");
        assert!(
            own.problem(None, &Krl::parse("serial: 11").expect("krl"), now, 0)
                .is_some_and(|p| p.why.contains("a.cert")),
            "the file is named"
        );
        assert_eq!(own.seconds_left(now), None, "forever");
        let mut short = id.clone();
        let mut c = (**id.cert.as_ref().expect("cert")).clone();
        c.valid_before = now / 1000 + 3 * 86_400;
        short.cert = Some(Arc::new(c));
        own.set(short);
        assert!(own.seconds_left(now).is_some_and(|s| s > 2 * 86_400));
        assert!(own.expiry_warning_due(now).is_some());
        assert!(own.expiry_warning_due(now).is_none(), "once a day");
        assert_eq!(problem(&Krl::default(), now + 4 * 86_400_000), Some("cert_expired"));
    }
}
