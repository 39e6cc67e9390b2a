//! The operator's side of SPEC §18 in the `fleet-gateway` binary: `cert check` says what a
//! certificate is and whether a gateway would accept it; `keygen` writes the OpenSSH public key
//! line a CA signs. Issuing stays `ssh-keygen`'s job.
//!
//! `cert check` is the reference behaviour operators compare with: one row per fact or check
//! (`<name>` padded to 12, then the value; the rows tests read stay as they are), a check it could
//! not make (no file, no host, no key) printed as not checked and not held against the verdict. It
//! makes the checks a receiver makes (MEM-2, MEM-4, [C-21] 10/11), and with `--key` (default
//! `FLEET_SIGNING_KEY_FILE`) the one a gateway makes of its own pair (MEM-3): whether the
//! certificate is over that key. A CA-file line the gateway would skip ([C-21] 10) is a `note`
//! row, not a failure.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;

use super::ca::CaSet;
use super::cert::{CertInfo, Window, utc};
use super::files::{self, TrustFile};
use super::krl::Krl;

/// What `fleet-gateway cert check` is asked.
#[derive(Debug, Clone)]
pub struct CheckRequest {
    pub cert_file: PathBuf,
    pub ca_file: Option<PathBuf>,
    pub revoked_file: Option<PathBuf>,
    pub host: Option<String>,
    /// The gateway's signing key (`FLEET_SIGNING_KEY_FILE`): is the certificate over it?
    pub key_file: Option<PathBuf>,
}

/// The report of `cert check`, and whether a gateway would accept the certificate (every check
/// that could be made passed; one without its file or host is printed as not checked).
pub struct CheckReport {
    pub text: String,
    pub accepted: bool,
}

/// Reads the certificate and the optional trust files and judges the certificate as a receiver
/// would (MEM-2, MEM-4; the clock without skew).
pub fn check(req: &CheckRequest, now_ms: u64) -> anyhow::Result<CheckReport> {
    let text = files::read(TrustFile::HostCert, &req.cert_file)?;
    let cert = CertInfo::parse_file_text(&text).map_err(|p| anyhow::anyhow!("{}: {p}", req.cert_file.display()))?;
    let cas = match &req.ca_file {
        Some(p) => Some((p, files::load(TrustFile::TrustCa, p, CaSet::parse)?)),
        None => None,
    };
    let krl = match &req.revoked_file {
        Some(p) => Some((p, files::load(TrustFile::Revoked, p, Krl::parse)?)),
        None => None,
    };
    let signer = match &req.key_file {
        Some(p) => Some((p, crate::signing::Signer::from_file(p)?)),
        None => None,
    };
    let mut out = String::new();
    let mut failed: Vec<&str> = Vec::new();
    let mut row = |k: &str, v: String| {
        let _ = writeln!(out, "{k:<12} {v}");
    };
    row("certificate", req.cert_file.display().to_string());
    row(
        "type",
        if cert.host {
            "host certificate".into()
        } else {
            failed.push("not a host certificate");
            "user certificate (a gateway needs a host certificate: ssh-keygen -h)".into()
        },
    );
    row("key id", format!("{:?}", cert.key_id));
    row("serial", cert.serial.to_string());
    row(
        "principals",
        if cert.principals.is_empty() {
            // CONTRACT §12: OpenSSH takes such a certificate for any host; MEM-2 for none.
            "none (ssh-keygen without -n): names no host, so no gateway accepts it".into()
        } else {
            cert.principals.join(", ")
        },
    );
    row(
        "critical",
        if cert.critical_options.is_empty() {
            "no critical options".into()
        } else {
            failed.push("critical options");
            format!(
                "{}: REFUSED (OpenSSH refuses host certificates with critical options)",
                cert.critical_options.join(", ")
            )
        },
    );
    let window = match cert.window(now_ms, 0) {
        Window::Valid => "valid now",
        Window::NotYet => {
            failed.push("not yet valid");
            "NOT YET VALID"
        }
        Window::Expired => {
            failed.push("expired");
            "EXPIRED"
        }
    };
    row(
        "validity",
        format!(
            "{} to {} (UTC): {window}",
            utc(cert.valid_after),
            utc(cert.valid_before)
        ),
    );
    row("key", format!("{} (ed25519)", cert.key_fingerprint));
    let over = match &signer {
        Some((path, s)) if s.verifying_key() == cert.key => {
            format!("{}: the certificate is over this key", path.display())
        }
        Some((path, s)) => {
            failed.push("not over the signing key");
            let theirs =
                ssh_key::public::KeyData::Ed25519(s.verifying_key().into()).fingerprint(ssh_key::HashAlg::Sha256);
            format!(
                "{}: NOT the certified key (this key is {theirs}; the certificate is over {})",
                path.display(),
                cert.key_fingerprint
            )
        }
        None => "not checked (no --key, FLEET_SIGNING_KEY_FILE unset)".into(),
    };
    row("signing key", over);
    let ca = match &cas {
        Some((path, set)) if set.trusts(&cert.ca_fingerprint) => format!("trusted by {}", path.display()),
        Some((path, _)) => {
            failed.push("CA not trusted");
            format!("NOT in {}", path.display())
        }
        None => "trust not checked (no --ca-file, FLEET_TRUST_CA_FILE unset)".into(),
    };
    row("CA", format!("{}: {ca}", cert.ca_fingerprint));
    row("CA key", cert.ca_description());
    if let Some((path, set)) = &cas {
        for e in set.skipped() {
            row(
                "note",
                format!(
                    "{} {}: line {}: {}; skipped (a gateway WARNs and keeps the other lines)",
                    TrustFile::TrustCa.var(),
                    path.display(),
                    e.line,
                    e.reason
                ),
            );
        }
    }
    let revoked = match &krl {
        Some((path, krl)) => match krl.revokes(cert.names()) {
            Some(why) => {
                failed.push("revoked");
                format!("REVOKED by {} ({why})", path.display())
            }
            None => format!("no (checked against {})", path.display()),
        },
        None => "not checked (no --revoked-file, FLEET_REVOKED_FILE unset)".into(),
    };
    row("revoked", revoked);
    let host = match &req.host {
        Some(h) if cert.principals.iter().any(|p| p == h) => format!("{h}: among the principals"),
        Some(h) => {
            failed.push("host not among the principals");
            format!("{h}: NOT among the principals")
        }
        None => "not checked (no --host, FLEET_HOST_ID unset)".into(),
    };
    row("host", host);
    let accepted = failed.is_empty();
    row(
        "verdict",
        if accepted {
            "accepted".into()
        } else {
            format!("NOT accepted: {}", failed.join(", "))
        },
    );
    Ok(CheckReport { text: out, accepted })
}

/// The OpenSSH public key line of an ed25519 key (`ssh-ed25519 AAAA… comment`), the form
/// `ssh-keygen -s` signs.
pub fn openssh_public_line(key: &VerifyingKey, comment: &str) -> anyhow::Result<String> {
    let public = ssh_key::PublicKey::new(ssh_key::public::KeyData::Ed25519(key.into()), comment);
    Ok(public.to_openssh()?)
}

/// `<key file>.pub`: where `keygen` writes the OpenSSH public key line.
pub fn pub_path(key_file: &Path) -> PathBuf {
    let mut name = key_file.as_os_str().to_os_string();
    name.push(".pub");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{fixture, seed_signer};

    fn path(name: &str) -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/membership")).join(name)
    }

    const NOW: u64 = 1_767_225_600_000;

    #[test]
    fn a_good_certificate_is_accepted_and_described() {
        let req = CheckRequest {
            cert_file: path("a-cert.pub"),
            ca_file: Some(path("trust-ca.txt")),
            revoked_file: Some(path("krl.txt")),
            host: Some("a".into()),
            key_file: Some(path("a.key")),
        };
        let r = check(&req, NOW).expect("report");
        assert!(r.accepted, "{}", r.text);
        for want in [
            "host certificate",
            "\"a-key-1\"",
            "serial       11",
            "always to forever",
            "trusted by",
            "critical     no critical options",
            "signing key  ",
            "a.key: the certificate is over this key",
            "CA key       ED25519 SHA256:",
            "(ssh-ed25519)",
            "verdict      accepted",
        ] {
            assert!(r.text.contains(want), "{want:?} in\n{}", r.text);
        }
    }

    #[test]
    fn each_failed_check_makes_it_not_accepted() {
        let judge = |cert: &str, host: &str| {
            let req = CheckRequest {
                cert_file: path(cert),
                ca_file: Some(path("trust-ca.txt")),
                revoked_file: Some(path("krl.txt")),
                host: Some(host.into()),
                key_file: None,
            };
            check(&req, NOW).expect("report")
        };
        assert!(!judge("a-other-ca-cert.pub", "a").accepted);
        assert!(!judge("a-user-cert.pub", "a").accepted);
        assert!(!judge("a-expired-cert.pub", "a").accepted);
        assert!(!judge("a-serial-cert.pub", "a").text.contains("verdict      accepted"));
        assert!(judge("a-serial-cert.pub", "a").text.contains("REVOKED"));
        assert!(!judge("a-cert.pub", "b").accepted);
        let unchecked = CheckRequest {
            cert_file: path("a-cert.pub"),
            ca_file: None,
            revoked_file: None,
            host: None,
            key_file: None,
        };
        let r = check(&unchecked, NOW).expect("report");
        assert!(r.accepted && r.text.contains("not checked"), "{}", r.text);
        let garbage = CheckRequest {
            cert_file: path("krl.txt"),
            ..unchecked
        };
        assert!(check(&garbage, NOW).is_err());
    }

    fn full(cert: &str, ca_file: &str, key: Option<&str>) -> CheckReport {
        let req = CheckRequest {
            cert_file: path(cert),
            ca_file: Some(path(ca_file)),
            revoked_file: Some(path("krl.txt")),
            host: Some("a".into()),
            key_file: key.map(path),
        };
        check(&req, NOW).expect("report")
    }

    #[test]
    fn ecdsa_and_rsa_cas_are_described_by_key_type_and_signature() {
        for (cert, words) in [
            ("a-ecdsa384-cert.pub", "CA key       ECDSA SHA256:"),
            ("a-ecdsa384-cert.pub", "(ecdsa-sha2-nistp384)"),
            ("a-rsa-cert.pub", "CA key       RSA SHA256:"),
            ("a-rsa-cert.pub", "(rsa-sha2-512)"),
            ("a-rsa-sha256-cert.pub", "(rsa-sha2-256)"),
        ] {
            let r = full(cert, "trust-ca-all.txt", Some("a.key"));
            assert!(r.text.contains(words), "{words:?} in\n{}", r.text);
        }
        let ok = full("a-ecdsa256-cert.pub", "trust-ca-all.txt", None);
        assert!(ok.text.contains("trusted by"), "{}", ok.text);
        let sha1 = CheckRequest {
            cert_file: path("a-rsa-sha1-cert.pub"),
            ca_file: None,
            revoked_file: None,
            host: None,
            key_file: None,
        };
        let e = check(&sha1, NOW)
            .err()
            .expect("a SHA-1 signature is refused")
            .to_string();
        assert!(e.contains("SHA-1") && e.contains("rsa-sha2-512"), "{e}");
    }

    #[test]
    fn critical_options_and_another_key_are_not_accepted() {
        let r = full("a-force-command-cert.pub", "trust-ca.txt", Some("a.key"));
        assert!(!r.accepted, "{}", r.text);
        assert!(
            r.text.contains("critical     force-command=/bin/true: REFUSED")
                && r.text.contains("NOT accepted: critical options"),
            "{}",
            r.text
        );
        let r = full("a-source-address-cert.pub", "trust-ca.txt", None);
        assert!(
            r.text.contains("source-address=10.0.0.0/8, verify-required"),
            "{}",
            r.text
        );
        let r = full("a-extension-cert.pub", "trust-ca.txt", Some("a.key"));
        assert!(r.accepted, "an extension is ignored: {}", r.text);
        let r = full("a-cert.pub", "trust-ca.txt", Some("b.key"));
        assert!(!r.accepted, "{}", r.text);
        assert!(
            r.text.contains("NOT the certified key") && r.text.contains("not over the signing key"),
            "{}",
            r.text
        );
    }

    #[test]
    fn a_skipped_ca_line_is_a_note_not_a_failure() {
        let r = full("a-rsa-cert.pub", "trust-ca-mixed.txt", Some("a.key"));
        assert!(r.accepted, "{}", r.text);
        let notes: Vec<&str> = r.text.lines().filter(|l| l.starts_with("note ")).collect();
        assert_eq!(notes.len(), 4, "{}", r.text);
        assert!(
            notes[0].contains("FLEET_TRUST_CA_FILE") && notes[0].contains("line 3: a ssh-dss key"),
            "{}",
            notes[0]
        );
    }

    #[test]
    fn the_openssh_line_is_the_one_ssh_keygen_signed() {
        let line = openssh_public_line(&seed_signer("a").verifying_key(), "host-a").expect("line");
        assert_eq!(line, fixture("a.pub").trim());
        assert_eq!(
            pub_path(Path::new("/k/signing.key")),
            PathBuf::from("/k/signing.key.pub")
        );
    }
}
