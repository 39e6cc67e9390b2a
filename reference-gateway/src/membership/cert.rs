//! OpenSSH host certificates (MEM-2): read and checked with RustCrypto's `ssh-key`, never by hand.
//!
//! A certificate is read once: [`CertInfo::parse`] decodes it, verifies its CA's signature over it
//! and takes out what the checks need (the certified ed25519 key, the CA's SHA-256 fingerprint and
//! key type, type, principals, validity, serial, key id, critical options). That part never
//! changes for a given text, so the trust state caches it by the certificate's text and a
//! heartbeat never pays for it again. An ECDSA or RSA CA's signature costs more than an ed25519
//! one, once per certificate text (release build, loaded 2-core machine: ed25519 0.13 ms, RSA-3072
//! 0.35 ms, P-256 0.45 ms, P-521 1.0 ms, P-384 1.4 ms; `parse_cost` measures it). What can change
//! — the trusted CAs, the KRL, the clock — is checked by [`CertInfo::check`] with map lookups and
//! integer compares only.
//!
//! CAs ([C-21] 10): ed25519, ECDSA P-256/384/521 and RSA; an RSA CA's signature is taken as
//! `rsa-sha2-256` or `rsa-sha2-512`, a SHA-1 `ssh-rsa` one is refused ([`CertProblem::Sha1Signature`],
//! as OpenSSH refuses it; `ssh-key` is built without its `sha1` feature, so it could not verify one
//! either). The certified key is always ed25519 (a gateway's signing key). A certificate carrying
//! any critical option is refused by [`CertInfo::check_standing`] ([C-21] 11, as OpenSSH's client
//! refuses such a host certificate), so the receiver, the own-certificate check and `cert check`
//! all see it; extensions are ignored.

use ed25519_dalek::VerifyingKey;
use ssh_key::{Algorithm, Certificate, Fingerprint, HashAlg};

use super::ca::CaSet;
use super::krl::Krl;
use crate::verify::Rejection;

/// Why a certificate does not make its key a host's key. `check()` is the check name of the
/// rejection line (CONTRACT §12): `revoked`, `cert_expired` or `certificate`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertProblem {
    #[error("the certificate cannot be read: {0}")]
    Unreadable(String),
    #[error("the certificate's CA signature does not verify")]
    BadSignature,
    #[error(
        "the certificate's CA signature is {0} (SHA-1), which OpenSSH refuses by default; have the RSA CA sign it with rsa-sha2-512 or rsa-sha2-256 (ssh-keygen -s <ca> -t rsa-sha2-512 …)"
    )]
    Sha1Signature(String),
    #[error("the certificate's CA is {0}")]
    UnsupportedCa(String),
    #[error("the certificate certifies a {0} key; a gateway's key is ed25519")]
    NotEd25519(String),
    #[error("the certificate's CA {0} is not in FLEET_TRUST_CA_FILE")]
    UntrustedCa(String),
    #[error("the certificate is a user certificate, not a host certificate")]
    NotHost,
    #[error("host {host:?} is not among the certificate's principals {principals:?}")]
    WrongPrincipal { host: String, principals: Vec<String> },
    #[error(
        "the host certificate carries critical options ({}); OpenSSH refuses host certificates with critical options, and so does a gateway",
        .0.join(", ")
    )]
    CriticalOptions(Vec<String>),
    #[error("the certificate is not valid before {0}")]
    NotYetValid(String),
    #[error("the certificate expired at {0}")]
    Expired(String),
    #[error("the certificate is revoked by FLEET_REVOKED_FILE ({0})")]
    Revoked(String),
    #[error("the key {0} is revoked by FLEET_REVOKED_FILE")]
    KeyRevoked(String),
    #[error("the presence carrying the certificate does not verify under the certificate's key")]
    NotSignedByKey,
}

impl CertProblem {
    /// The check name of CONTRACT §12.
    pub fn check(&self) -> &'static str {
        match self {
            CertProblem::Revoked(_) | CertProblem::KeyRevoked(_) => "revoked",
            CertProblem::Expired(_) => "cert_expired",
            _ => "certificate",
        }
    }
}

impl From<CertProblem> for Rejection {
    fn from(p: CertProblem) -> Rejection {
        let text = p.to_string();
        match p.check() {
            "revoked" => Rejection::Revoked(text),
            "cert_expired" => Rejection::CertExpired(text),
            _ => Rejection::Certificate(text),
        }
    }
}

/// Where `now` lies in a certificate's validity window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    NotYet,
    Valid,
    Expired,
}

/// What a certificate says, read and signature-checked once.
#[derive(Debug, Clone)]
pub struct CertInfo {
    /// The certificate line as given (whitespace at either end removed).
    pub text: String,
    /// The certified key: the gateway's signing key.
    pub key: VerifyingKey,
    /// SHA-256 fingerprint of the certified key (KRL `key:` and `hash:`).
    pub key_fingerprint: Fingerprint,
    /// SHA-256 fingerprint of the CA key that signed it.
    pub ca_fingerprint: Fingerprint,
    /// The CA key's type (`ssh-ed25519`, `ecdsa-sha2-nistp256`, `ssh-rsa`, …).
    pub ca_key_type: String,
    /// The algorithm of the CA's signature (`rsa-sha2-512` for an RSA CA, else the key type).
    pub signature_algorithm: String,
    pub host: bool,
    pub principals: Vec<String>,
    pub key_id: String,
    pub serial: u64,
    /// Seconds since the epoch (`valid after`); 0 = always.
    pub valid_after: u64,
    /// Seconds since the epoch (`valid before`); `u64::MAX` = forever.
    pub valid_before: u64,
    /// The critical options, `name` or `name=value` (a host certificate must carry none).
    pub critical_options: Vec<String>,
}

impl CertInfo {
    /// Reads an OpenSSH certificate line and verifies its CA's signature over it.
    pub fn parse(text: &str) -> Result<CertInfo, CertProblem> {
        let text = text.trim();
        let cert = Certificate::from_openssh(text).map_err(|e| CertProblem::Unreadable(e.to_string()))?;
        let signature_algorithm = cert.signature().algorithm();
        if signature_algorithm == (Algorithm::Rsa { hash: None }) {
            return Err(CertProblem::Sha1Signature(signature_algorithm.to_string()));
        }
        let ca = cert.signature_key();
        if let Err(why) = super::ca::ca_type_taken(ca) {
            return Err(CertProblem::UnsupportedCa(why));
        }
        cert.verify_signature().map_err(|_| CertProblem::BadSignature)?;
        let ed = cert
            .public_key()
            .ed25519()
            .ok_or_else(|| CertProblem::NotEd25519(cert.public_key().algorithm().to_string()))?;
        let key = VerifyingKey::try_from(ed).map_err(|e| CertProblem::Unreadable(format!("certified key: {e}")))?;
        Ok(CertInfo {
            text: text.to_string(),
            key,
            key_fingerprint: cert.public_key().fingerprint(HashAlg::Sha256),
            ca_fingerprint: ca.fingerprint(HashAlg::Sha256),
            ca_key_type: ca.algorithm().to_string(),
            signature_algorithm: signature_algorithm.to_string(),
            host: cert.cert_type().is_host(),
            principals: cert.valid_principals().to_vec(),
            key_id: cert.key_id().to_string(),
            serial: cert.serial(),
            valid_after: cert.valid_after(),
            valid_before: cert.valid_before(),
            critical_options: cert
                .critical_options()
                .iter()
                .map(|(name, value)| match value.as_str() {
                    "" => name.clone(),
                    v => format!("{name}={v}"),
                })
                .collect(),
        })
    }

    /// The CA as `ssh-keygen -L` names it: `ECDSA SHA256:… (ecdsa-sha2-nistp256)`, the signature
    /// algorithm in parentheses (`RSA SHA256:… (rsa-sha2-512)`).
    pub fn ca_description(&self) -> String {
        let kind = match self.ca_key_type.as_str() {
            "ssh-ed25519" => "ED25519",
            "ssh-rsa" => "RSA",
            t if t.starts_with("ecdsa-") => "ECDSA",
            t => t,
        };
        format!("{kind} {} ({})", self.ca_fingerprint, self.signature_algorithm)
    }

    /// Reads a certificate file (`FLEET_HOST_CERT_FILE`, `cert check`): its first meaningful line.
    pub fn parse_file_text(text: &str) -> Result<CertInfo, CertProblem> {
        let line = super::files::meaningful_lines(text)
            .next()
            .map(|(_, l)| l)
            .ok_or_else(|| CertProblem::Unreadable("the file holds no certificate".into()))?;
        CertInfo::parse(line)
    }

    /// Where `now_ms` lies in the validity window, widened by `skew_ms` at both ends (MEM-2).
    pub fn window(&self, now_ms: u64, skew_ms: u64) -> Window {
        let after = self.valid_after.saturating_mul(1000).saturating_sub(skew_ms);
        let before = self.valid_before.saturating_mul(1000).saturating_add(skew_ms);
        if now_ms < after {
            Window::NotYet
        } else if now_ms >= before {
            Window::Expired
        } else {
            Window::Valid
        }
    }

    /// What a revocation list can name of this certificate ([`Krl::revokes`]).
    pub fn names(&self) -> super::krl::CertNames<'_> {
        super::krl::CertNames {
            serial: self.serial,
            key_id: &self.key_id,
            key_fingerprint: &self.key_fingerprint,
            ca_fingerprint: &self.ca_fingerprint,
        }
    }

    /// When the certificate stops being valid here (Unix ms, skew included); None = never.
    pub fn expires_at_ms(&self, skew_ms: u64) -> Option<u64> {
        (self.valid_before != u64::MAX).then(|| self.valid_before.saturating_mul(1000).saturating_add(skew_ms))
    }

    /// The checks that do not depend on the clock: the CA is trusted, it is a host certificate for
    /// `host` without critical options ([C-21] 11), and neither it nor its key nor its CA is
    /// revoked.
    pub fn check_standing(&self, host: &str, cas: &CaSet, krl: &Krl) -> Result<(), CertProblem> {
        if !cas.trusts(&self.ca_fingerprint) {
            return Err(CertProblem::UntrustedCa(self.ca_fingerprint.to_string()));
        }
        self.check_host(host)?;
        if let Some(why) = krl.revokes(self.names()) {
            return Err(CertProblem::Revoked(why));
        }
        Ok(())
    }

    /// What the certificate itself must be for `host`, whatever the files say: a host
    /// certificate, `host` among its principals, no critical option ([C-21] 11). Part of
    /// [`CertInfo::check_standing`]; also for a check made without a CA file (the own one).
    pub fn check_host(&self, host: &str) -> Result<(), CertProblem> {
        if !self.host {
            return Err(CertProblem::NotHost);
        }
        if !self.principals.iter().any(|p| p == host) {
            return Err(CertProblem::WrongPrincipal {
                host: host.to_string(),
                principals: self.principals.clone(),
            });
        }
        if !self.critical_options.is_empty() {
            return Err(CertProblem::CriticalOptions(self.critical_options.clone()));
        }
        Ok(())
    }

    /// The clock's part of the check.
    pub fn check_time(&self, now_ms: u64, skew_ms: u64) -> Result<(), CertProblem> {
        match self.window(now_ms, skew_ms) {
            Window::Valid => Ok(()),
            Window::NotYet => Err(CertProblem::NotYetValid(utc(self.valid_after))),
            Window::Expired => Err(CertProblem::Expired(utc(self.valid_before))),
        }
    }

    /// The whole MEM-2 check of the certificate for `host` at `now_ms`.
    pub fn check(&self, host: &str, cas: &CaSet, krl: &Krl, now_ms: u64, skew_ms: u64) -> Result<(), CertProblem> {
        self.check_standing(host, cas, krl)?;
        self.check_time(now_ms, skew_ms)
    }
}

/// An Ed25519 key's SHA-256 fingerprint as `ssh-keygen -l` prints it (`SHA256:…`): how every
/// log line and report names a key.
pub fn key_fingerprint(key: &ed25519_dalek::VerifyingKey) -> String {
    ssh_key::public::KeyData::Ed25519(key.into())
        .fingerprint(HashAlg::Sha256)
        .to_string()
}

/// `YYYY-MM-DDTHH:MM:SSZ` for Unix seconds; `always` / `forever` for OpenSSH's open ends.
pub fn utc(secs: u64) -> String {
    if secs == 0 {
        return "always".into();
    }
    if secs == u64::MAX {
        return "forever".into();
    }
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's days-from-civil inverse.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::signing::Signer;

    /// A fixture of `tests/fixtures/membership` (made by `scripts/gen-cert-fixtures`).
    pub(crate) fn fixture(name: &str) -> String {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/membership/");
        std::fs::read_to_string(format!("{path}{name}")).unwrap_or_else(|e| panic!("fixture {name}: {e}"))
    }

    pub(crate) fn cert(name: &str) -> CertInfo {
        CertInfo::parse(&fixture(&format!("{name}-cert.pub"))).expect("the fixture parses")
    }

    pub(crate) fn seed_signer(name: &str) -> Signer {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::STANDARD
            .decode(fixture(&format!("{name}.key")).trim())
            .expect("base64");
        Signer::from_seed(raw.try_into().expect("32 bytes"))
    }

    fn trusted() -> CaSet {
        CaSet::parse(&fixture("trust-ca.txt")).expect("CA file")
    }

    const NOW: u64 = 1_767_225_600_000; // 2026-01-01

    #[test]
    fn a_host_certificate_over_the_hosts_key_passes() {
        let c = cert("a");
        assert_eq!(c.key, seed_signer("a").verifying_key());
        assert!(c.host);
        assert_eq!(c.principals, vec!["a".to_string()]);
        assert_eq!((c.serial, c.key_id.as_str()), (11, "a-key-1"));
        assert_eq!(c.check("a", &trusted(), &Krl::default(), NOW, 30_000), Ok(()));
        assert_eq!(c.text, fixture("a-cert.pub").trim());
    }

    #[test]
    fn each_bad_certificate_is_named() {
        let (cas, krl) = (trusted(), Krl::default());
        let check = |name: &str, host: &str| cert(name).check(host, &cas, &krl, NOW, 30_000).map_err(|p| p.check());
        assert!(matches!(
            cert("a-other-ca").check("a", &cas, &krl, NOW, 0),
            Err(CertProblem::UntrustedCa(_))
        ));
        assert!(matches!(
            cert("a-user").check("a", &cas, &krl, NOW, 0),
            Err(CertProblem::NotHost)
        ));
        assert!(matches!(
            cert("a-wrong-principal").check("a", &cas, &krl, NOW, 0),
            Err(CertProblem::WrongPrincipal { .. })
        ));
        assert!(matches!(
            cert("a-future").check("a", &cas, &krl, NOW, 0),
            Err(CertProblem::NotYetValid(_))
        ));
        assert_eq!(check("a-future", "a"), Err("certificate"));
        assert_eq!(check("a-expired", "a"), Err("cert_expired"));
        assert_eq!(check("a", "b"), Err("certificate"), "a's certificate is not b's");
        assert_eq!(check("b", "b"), Ok(()));
        let revoking = Krl::parse("serial: 11\n").expect("krl");
        assert_eq!(
            cert("a").check("a", &cas, &revoking, NOW, 0).map_err(|p| p.check()),
            Err("revoked")
        );
    }

    #[test]
    fn garbage_and_truncated_certificates_are_unreadable() {
        assert!(matches!(CertInfo::parse("garbage"), Err(CertProblem::Unreadable(_))));
        let text = fixture("a-cert.pub");
        let half = &text[..text.len() / 2];
        assert!(matches!(CertInfo::parse(half), Err(CertProblem::Unreadable(_))));
        assert!(matches!(
            CertInfo::parse(&fixture("a.pub")),
            Err(CertProblem::Unreadable(_))
        ));
    }

    #[test]
    fn a_tampered_certificate_fails_its_ca_signature() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let text = fixture("a-cert.pub");
        let mut parts = text.split_whitespace();
        let (alg, blob) = (parts.next().expect("alg"), parts.next().expect("blob"));
        let mut raw = b64.decode(blob).expect("base64");
        // The principal "a" sits near the middle of the signed part; flip a byte of the key id.
        let at = raw
            .windows(7)
            .position(|w| w == b"a-key-1")
            .expect("the key id is in the certificate");
        raw[at + 6] = b'9';
        let forged = format!("{alg} {}", b64.encode(&raw));
        assert_eq!(CertInfo::parse(&forged).map(|_| ()), Err(CertProblem::BadSignature));
    }

    #[test]
    fn certificates_from_every_ca_type_verify() {
        let cas = CaSet::parse(&fixture("trust-ca-all.txt")).expect("CA file");
        for (name, ca, sig) in [
            ("a", "ssh-ed25519", "ssh-ed25519"),
            ("a-ecdsa256", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp256"),
            ("a-ecdsa384", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp384"),
            ("a-ecdsa521", "ecdsa-sha2-nistp521", "ecdsa-sha2-nistp521"),
            ("a-rsa", "ssh-rsa", "rsa-sha2-512"),
            ("a-rsa-sha256", "ssh-rsa", "rsa-sha2-256"),
        ] {
            let c = cert(name);
            assert_eq!(
                (c.ca_key_type.as_str(), c.signature_algorithm.as_str()),
                (ca, sig),
                "{name}"
            );
            assert_eq!(c.key, seed_signer("a").verifying_key(), "{name}: the certified key");
            assert_eq!(c.check("a", &cas, &Krl::default(), NOW, 0), Ok(()), "{name}");
        }
        assert!(cert("a-ecdsa256").ca_description().starts_with("ECDSA SHA256:"));
        assert!(cert("a-rsa").ca_description().ends_with(" (rsa-sha2-512)"));
        assert!(cert("a").ca_description().starts_with("ED25519 SHA256:"));
        // What OpenSSH itself says it signed with (ssh-keygen -L, scripts/gen-cert-fixtures).
        for line in fixture("rsa-signatures.txt").lines() {
            let (name, openssh) = line.split_once(' ').expect("<cert> <algorithm>");
            let ours = CertInfo::parse(&fixture(&format!("{name}-cert.pub")))
                .map(|c| c.signature_algorithm)
                .unwrap_or_else(|p| format!("refused: {p}"));
            if openssh == "ssh-rsa" {
                assert!(ours.starts_with("refused:") && ours.contains("SHA-1"), "{name}: {ours}");
            } else {
                assert_eq!(ours, openssh, "{name}");
            }
        }
    }

    #[test]
    fn a_sha1_rsa_signature_is_refused_as_openssh_refuses_it() {
        let text = fixture("a-rsa-sha1-cert.pub");
        let p = CertInfo::parse(&text).expect_err("SHA-1");
        assert_eq!(p, CertProblem::Sha1Signature("ssh-rsa".into()));
        assert_eq!(p.check(), "certificate");
        // ssh-key is built without its `sha1` feature: it cannot verify one either.
        let raw = Certificate::from_openssh(text.trim()).expect("it reads");
        assert!(raw.verify_signature().is_err());
    }

    #[test]
    fn a_certificate_from_a_ca_type_not_taken_says_so() {
        let p = CertInfo::parse(&fixture("a-dsa-cert.pub")).expect_err("DSA CA");
        assert!(
            matches!(&p, CertProblem::UnsupportedCa(why) if why.contains("ssh-dss")),
            "{p}"
        );
        assert_eq!(p.check(), "certificate");
        assert!(
            p.to_string()
                .starts_with("the certificate's CA is a ssh-dss key, not a CA type"),
            "{p}"
        );
    }

    #[test]
    fn critical_options_refuse_a_host_certificate_and_extensions_do_not() {
        let (cas, krl) = (trusted(), Krl::default());
        let fc = cert("a-force-command");
        assert_eq!(fc.critical_options, vec!["force-command=/bin/true".to_string()]);
        let p = fc.check("a", &cas, &krl, NOW, 0).expect_err("critical");
        assert_eq!(p.check(), "certificate");
        assert!(
            p.to_string().contains("force-command=/bin/true") && p.to_string().contains("OpenSSH refuses"),
            "{p}"
        );
        let sa = cert("a-source-address");
        assert_eq!(
            sa.check_standing("a", &cas, &krl),
            Err(CertProblem::CriticalOptions(vec![
                "source-address=10.0.0.0/8".into(),
                "verify-required".into()
            ]))
        );
        assert!(
            matches!(fc.check_host("a"), Err(CertProblem::CriticalOptions(_))),
            "without a CA file too"
        );
        let ext = cert("a-extension");
        assert!(ext.critical_options.is_empty());
        assert_eq!(ext.check("a", &cas, &krl, NOW, 0), Ok(()));
    }

    #[test]
    fn a_tampered_ecdsa_or_rsa_certificate_fails_its_ca_signature() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        for name in ["a-ecdsa256", "a-ecdsa521", "a-rsa", "a-rsa-sha256"] {
            let text = fixture(&format!("{name}-cert.pub"));
            let mut parts = text.split_whitespace();
            let (alg, blob) = (parts.next().expect("alg"), parts.next().expect("blob"));
            let mut raw = b64.decode(blob).expect("base64");
            let at = raw
                .windows(name.len())
                .position(|w| w == name.as_bytes())
                .expect("the key id is in the certificate");
            raw[at] ^= 0x20;
            let forged = format!("{alg} {}", b64.encode(&raw));
            assert_eq!(
                CertInfo::parse(&forged).map(|_| ()),
                Err(CertProblem::BadSignature),
                "{name}"
            );
        }
    }

    /// The price of reading a certificate per CA type (paid once per certificate text: the trust
    /// state caches it). `cargo test --release -p fleet-gateway --lib parse_cost -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore]
    fn parse_cost() {
        for name in ["a", "a-ecdsa256", "a-ecdsa384", "a-ecdsa521", "a-rsa"] {
            let text = fixture(&format!("{name}-cert.pub"));
            let n = 200;
            let start = std::time::Instant::now();
            for _ in 0..n {
                CertInfo::parse(&text).expect("parses");
            }
            println!(
                "{name:<12} {:>8.1} µs per parse",
                start.elapsed().as_secs_f64() * 1e6 / f64::from(n)
            );
        }
    }

    #[test]
    fn the_window_widens_by_the_skew() {
        let mut c = cert("a");
        c.valid_after = 100;
        c.valid_before = 200;
        assert_eq!(c.window(99_000, 0), Window::NotYet);
        assert_eq!(c.window(99_000, 1_000), Window::Valid);
        assert_eq!(c.window(200_000, 0), Window::Expired);
        assert_eq!(c.window(200_000, 1), Window::Valid);
        assert_eq!(c.expires_at_ms(5), Some(200_005));
        assert_eq!(cert("a").expires_at_ms(5), None, "forever");
    }

    #[test]
    fn times_print_in_utc() {
        assert_eq!(utc(0), "always");
        assert_eq!(utc(u64::MAX), "forever");
        assert_eq!(utc(1_767_225_600), "2026-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400 + 3_723), "2000-02-29T01:02:03Z");
    }
}
