//! A fleet CA made by `ssh-keygen -t ed25519`, and the certificates it signs (`ssh-keygen -s`).
//!
//! Why: SPEC MEM-2's credential is an OpenSSH host certificate over the gateway's signing key,
//! issued exactly as an operator issues one: `ssh-keygen -s ca -h -I <key id> -n <host> -V <window>
//! -z <serial> host.pub`. Hostile scenarios need the other kinds too (a user certificate, another
//! CA, a principal that is another host, a window not yet open or already closed), so every knob
//! of that command is a field of [`CertRequest`].

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{CredentialError, io, run};

/// A CA key pair on disk (`<dir>/<name>` and `<dir>/<name>.pub`).
#[derive(Debug, Clone)]
pub struct Ca {
    pub name: String,
    key: PathBuf,
    public_line: String,
}

/// Host or user certificate (`-h` or not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CertKind {
    Host,
    User,
}

/// A validity window in Unix seconds, `valid after` to `valid before` (passed to `-V` as
/// `0x<from>:0x<to>`, so the suite knows the instants to the second).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    pub from: u64,
    pub to: u64,
}

impl Validity {
    /// From `before` ago until `after` from now (rounded to whole seconds: `after` up).
    pub fn around_now(before: Duration, after: Duration) -> Validity {
        let now = unix_now();
        let now_s = now.as_secs();
        let to = (now + after).as_secs() + u64::from((now + after).subsec_nanos() > 0);
        Validity {
            from: now_s.saturating_sub(before.as_secs()),
            to,
        }
    }

    /// A window that opens `from_now` from now and lasts `length` (a certificate not yet valid).
    pub fn later(from_now: Duration, length: Duration) -> Validity {
        let from = (unix_now() + from_now).as_secs();
        Validity {
            from,
            to: from + length.as_secs(),
        }
    }

    /// A window that closed `ago` ago, having lasted `length` (an expired certificate).
    pub fn past(ago: Duration, length: Duration) -> Validity {
        let to = unix_now().saturating_sub(ago).as_secs();
        Validity {
            from: to.saturating_sub(length.as_secs()),
            to,
        }
    }

    /// The `-V` argument.
    pub fn arg(&self) -> String {
        format!("0x{:x}:0x{:x}", self.from, self.to)
    }

    /// `valid before` as a point in time.
    pub fn ends_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(self.to)
    }
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// What `ssh-keygen -s` is asked to sign.
#[derive(Debug, Clone)]
pub struct CertRequest<'a> {
    /// The public key file to certify (its name ends in `.pub`).
    pub public_key: &'a Path,
    pub kind: CertKind,
    /// `-I`
    pub key_id: &'a str,
    /// `-n`
    pub principals: &'a [String],
    /// `-V`
    pub validity: Validity,
    /// `-z`
    pub serial: u64,
}

/// A certificate `ssh-keygen` made: its line as written (trimmed) and what it was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    pub line: String,
    pub key_id: String,
    pub serial: u64,
    pub principals: Vec<String>,
    pub validity: Validity,
    pub kind: CertKind,
    pub ca: String,
}

impl Ca {
    /// `ssh-keygen -q -t ed25519 -N '' -C <name> -f <dir>/<name>`: a fresh CA key pair.
    pub fn create(dir: &Path, name: &str) -> Result<Ca, CredentialError> {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        let key = dir.join(name);
        run([
            "-q".as_ref(),
            "-t".as_ref(),
            "ed25519".as_ref(),
            "-N".as_ref(),
            "".as_ref(),
            "-C".as_ref(),
            std::ffi::OsStr::new(&format!("fleet-ca-{name}")),
            "-f".as_ref(),
            key.as_os_str(),
        ])?;
        let pub_path = key.with_extension("pub");
        let public_line = std::fs::read_to_string(&pub_path)
            .map_err(io("cannot read", &pub_path))?
            .trim()
            .to_string();
        if !public_line.starts_with("ssh-ed25519 ") {
            return Err(CredentialError::Unexpected {
                what: format!("CA public key {}", pub_path.display()),
                found: public_line,
            });
        }
        Ok(Ca {
            name: name.to_string(),
            key,
            public_line,
        })
    }

    /// The CA's public key line (`ssh-ed25519 AAAA… fleet-ca-<name>`): a line of
    /// `FLEET_TRUST_CA_FILE`.
    pub fn public_line(&self) -> &str {
        &self.public_line
    }

    /// The CA's public key file (for `ssh-keygen -k -s`).
    pub fn public_path(&self) -> PathBuf {
        self.key.with_extension("pub")
    }

    /// Signs a certificate. The key file is copied to a fresh name first, so several certificates
    /// over one key (a rotation, a hostile variant) never overwrite each other's `-cert.pub`.
    pub fn sign(&self, req: &CertRequest<'_>) -> Result<Certificate, CredentialError> {
        let dir = req
            .public_key
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        let stem = format!("sign-{}", uuid::Uuid::new_v4().simple());
        let copy = dir.join(format!("{stem}.pub"));
        std::fs::copy(req.public_key, &copy).map_err(io("cannot copy", req.public_key))?;
        let principals = req.principals.join(",");
        let validity = req.validity.arg();
        let serial = req.serial.to_string();
        let mut args: Vec<&std::ffi::OsStr> = vec!["-q".as_ref(), "-s".as_ref(), self.key.as_os_str()];
        if req.kind == CertKind::Host {
            args.push("-h".as_ref());
        }
        args.extend([
            "-I".as_ref(),
            req.key_id.as_ref(),
            "-n".as_ref(),
            principals.as_ref(),
            "-V".as_ref(),
            validity.as_ref(),
            "-z".as_ref(),
            serial.as_ref(),
            copy.as_os_str(),
        ]);
        let signed = run(args);
        let cert_path = dir.join(format!("{stem}-cert.pub"));
        let line = signed.and_then(|_| {
            std::fs::read_to_string(&cert_path)
                .map(|s| s.trim().to_string())
                .map_err(io("cannot read", &cert_path))
        });
        let _ = std::fs::remove_file(&copy);
        let _ = std::fs::remove_file(&cert_path);
        Ok(Certificate {
            line: line?,
            key_id: req.key_id.to_string(),
            serial: req.serial,
            principals: req.principals.to_vec(),
            validity: req.validity,
            kind: req.kind,
            ca: self.name.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credentials::openssh::{cert_fields, fingerprint, write_public_key};
    use crate::keys::HostKey;

    fn tmp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("ca-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    /// What `ssh-keygen -L` says of a certificate line.
    fn inspect(dir: &Path, line: &str) -> String {
        let p = dir.join(format!("{}-cert.pub", uuid::Uuid::new_v4().simple()));
        std::fs::write(&p, format!("{line}\n")).expect("write");
        run(["-L".as_ref(), "-f".as_ref(), p.as_os_str()]).expect("ssh-keygen -L")
    }

    #[test]
    fn a_host_certificate_over_the_suites_key_says_what_was_asked() {
        let dir = tmp();
        let ca = Ca::create(&dir.join("ca"), "fleet").expect("ca");
        assert!(ca.public_line().starts_with("ssh-ed25519 AAAA"), "{}", ca.public_line());
        let key = HostKey::generate("b");
        let pub_path = dir.join("b.pub");
        write_public_key(&key, &pub_path).expect("pub");
        let validity = Validity::around_now(Duration::from_secs(300), Duration::from_secs(3600));
        let cert = ca
            .sign(&CertRequest {
                public_key: &pub_path,
                kind: CertKind::Host,
                key_id: "b-1",
                principals: &["b".to_string()],
                validity,
                serial: 42,
            })
            .expect("sign");
        assert!(
            cert.line.starts_with("ssh-ed25519-cert-v01@openssh.com "),
            "{}",
            cert.line
        );
        let fields = cert_fields(&cert.line).expect("a certificate line");
        assert_eq!(fields.key, key.public_bytes(), "it certifies the suite's key");
        assert_eq!(
            (fields.serial, fields.cert_type, fields.key_id.as_str()),
            (42, 2, "b-1")
        );
        let shown = inspect(&dir, &cert.line);
        assert!(shown.contains("host certificate"), "{shown}");
        assert!(shown.contains("Key ID: \"b-1\""), "{shown}");
        assert!(shown.contains("Serial: 42"), "{shown}");
        let ca_fp = fingerprint(&ca.public_path()).expect("fp");
        assert!(shown.contains(&ca_fp), "signed by the CA {ca_fp}: {shown}");
        // Nothing left beside the key: each signing works on its own copy.
        assert!(
            !dir.read_dir()
                .expect("ls")
                .any(|e| e.expect("e").file_name().to_string_lossy().starts_with("sign-"))
        );
        std::fs::remove_dir_all(&dir).expect("rm");
    }

    #[test]
    fn user_certificates_and_windows_are_what_was_asked() {
        let dir = tmp();
        let ca = Ca::create(&dir.join("ca"), "fleet").expect("ca");
        let pub_path = dir.join("x.pub");
        write_public_key(&HostKey::generate("x"), &pub_path).expect("pub");
        let later = Validity::later(Duration::from_secs(3600), Duration::from_secs(3600));
        let user = ca
            .sign(&CertRequest {
                public_key: &pub_path,
                kind: CertKind::User,
                key_id: "x-user",
                principals: &["x".to_string(), "b".to_string()],
                validity: later,
                serial: 7,
            })
            .expect("sign");
        assert_eq!(cert_fields(&user.line).expect("cert").cert_type, 1);
        let shown = inspect(&dir, &user.line);
        assert!(shown.contains("user certificate"), "{shown}");
        assert!(
            shown.contains("\n                x\n") && shown.contains("\n                b"),
            "{shown}"
        );
        assert!(later.from > unix_now().as_secs() + 3000);
        let past = Validity::past(Duration::from_secs(60), Duration::from_secs(600));
        assert!(past.to < unix_now().as_secs() && past.to - past.from == 600);
        assert_eq!(Validity { from: 16, to: 255 }.arg(), "0x10:0xff");
        std::fs::remove_dir_all(&dir).expect("rm");
    }

    #[test]
    fn a_missing_key_file_is_an_error_naming_ssh_keygens_complaint() {
        let dir = tmp();
        let ca = Ca::create(&dir.join("ca"), "fleet").expect("ca");
        let e = ca
            .sign(&CertRequest {
                public_key: &dir.join("absent.pub"),
                kind: CertKind::Host,
                key_id: "n",
                principals: &[],
                validity: Validity::around_now(Duration::ZERO, Duration::from_secs(60)),
                serial: 1,
            })
            .expect_err("no such key");
        assert!(e.to_string().contains("absent.pub"), "{e}");
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
