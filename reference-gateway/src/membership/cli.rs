//! The operator's side of SPEC §18 in the `fleet-gateway` binary: `cert check` says what a
//! certificate is and whether a gateway would accept it; `keygen` writes the OpenSSH public key
//! line a CA signs. Issuing stays `ssh-keygen`'s job.

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
    row("principals", cert.principals.join(", "));
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
    let ca = match &cas {
        Some((path, set)) if set.trusts(&cert.ca_fingerprint) => format!("trusted by {}", path.display()),
        Some((path, _)) => {
            failed.push("CA not trusted");
            format!("NOT in {}", path.display())
        }
        None => "trust not checked (no --ca-file, FLEET_TRUST_CA_FILE unset)".into(),
    };
    row("CA", format!("{}: {ca}", cert.ca_fingerprint));
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
        };
        let r = check(&req, NOW).expect("report");
        assert!(r.accepted, "{}", r.text);
        for want in [
            "host certificate",
            "\"a-key-1\"",
            "serial       11",
            "always to forever",
            "trusted by",
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
        };
        let r = check(&unchecked, NOW).expect("report");
        assert!(r.accepted && r.text.contains("not checked"), "{}", r.text);
        let garbage = CheckRequest {
            cert_file: path("krl.txt"),
            ..unchecked
        };
        assert!(check(&garbage, NOW).is_err());
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
