//! A fleet CA made by `ssh-keygen -t <type>`, and the certificates it signs (`ssh-keygen -s`).
//!
//! Why: SPEC MEM-2's credential is an OpenSSH host certificate over the gateway's signing key,
//! issued exactly as an operator issues one: `ssh-keygen -s ca -h -I <key id> -n <host> -V <window>
//! -z <serial> host.pub`. Hostile scenarios need the other kinds too (a user certificate, another
//! CA, a principal that is another host, a window not yet open or already closed), so every knob
//! of that command is a field of [`CertRequest`].
//!
//! Operators' existing CAs are often ECDSA or RSA (SPEC [C-21] 10), so a CA has a key type
//! ([`CaKeyType`]: what `ssh-keygen -t`/`-b` made it). How a CA signs beyond [`CertRequest`] — an
//! RSA CA's signature algorithm (`-t rsa-sha2-256`, `-t ssh-rsa`), critical options (`-O
//! force-command=…`, [C-21] 11) — is a [`Ca::variant`]: the same key under another name, whose
//! every certificate `ssh-keygen -s` signs with those extra arguments.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{CredentialError, io, run};

/// A CA key pair on disk (`<dir>/<name>` and `<dir>/<name>.pub`).
#[derive(Debug, Clone)]
pub struct Ca {
    pub name: String,
    key: PathBuf,
    public_line: String,
    key_type: CaKeyType,
    /// Extra arguments of every `ssh-keygen -s` this CA runs (a [`Ca::variant`]'s).
    sign_args: Vec<String>,
}

/// The key type of a CA: what `ssh-keygen -t` (and `-b` for ECDSA) made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaKeyType {
    /// `-t ed25519`
    Ed25519,
    /// `-t ecdsa -b <bits>`: 256, 384 or 521 (`ecdsa-sha2-nistp<bits>`).
    Ecdsa(u16),
    /// `-t rsa` (ssh-keygen's default size, 3072 bits in OpenSSH 9.2).
    Rsa,
    /// `-t dsa`: a type SPEC [C-21] 10 does not list (OpenSSH refuses DSA keys by default since
    /// 7.0); the suite makes one only to write a trust-file line no gateway takes.
    Dsa,
}

impl CaKeyType {
    /// The `ssh-keygen` arguments that make a key of this type.
    fn keygen_args(self) -> Vec<String> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        match self {
            CaKeyType::Ed25519 => v(&["-t", "ed25519"]),
            CaKeyType::Ecdsa(bits) => vec!["-t".into(), "ecdsa".into(), "-b".into(), bits.to_string()],
            CaKeyType::Rsa => v(&["-t", "rsa"]),
            CaKeyType::Dsa => v(&["-t", "dsa"]),
        }
    }

    /// The key type name that begins the public key line (RFC 4253, 5656, 8709).
    pub fn line_type(self) -> String {
        match self {
            CaKeyType::Ed25519 => "ssh-ed25519".into(),
            CaKeyType::Ecdsa(bits) => format!("ecdsa-sha2-nistp{bits}"),
            CaKeyType::Rsa => "ssh-rsa".into(),
            CaKeyType::Dsa => "ssh-dss".into(),
        }
    }

    /// From the words of `ssh-keygen -t <type> [-b <bits>]`: `ed25519`, `ecdsa` (256 bits),
    /// `ecdsa -b 384`, `rsa`, `dsa`.
    pub fn parse(t: &str, bits: Option<u16>) -> Option<CaKeyType> {
        Some(match (t, bits) {
            ("ed25519", None) => CaKeyType::Ed25519,
            ("ecdsa", None) => CaKeyType::Ecdsa(256),
            ("ecdsa", Some(b @ (256 | 384 | 521))) => CaKeyType::Ecdsa(b),
            ("rsa", None) => CaKeyType::Rsa,
            ("dsa", None) => CaKeyType::Dsa,
            _ => return None,
        })
    }
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
        Ca::create_typed(dir, name, CaKeyType::Ed25519)
    }

    /// `ssh-keygen -q -t <type> [-b <bits>] -N '' -C fleet-ca-<name> -f <dir>/<name>`: a fresh CA
    /// key pair of `key_type`.
    pub fn create_typed(dir: &Path, name: &str, key_type: CaKeyType) -> Result<Ca, CredentialError> {
        std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
        let key = dir.join(name);
        let comment = format!("fleet-ca-{name}");
        let mut args: Vec<std::ffi::OsString> = vec!["-q".into()];
        args.extend(key_type.keygen_args().into_iter().map(Into::into));
        args.extend(["-N".into(), "".into(), "-C".into(), comment.into(), "-f".into()]);
        args.push(key.clone().into_os_string());
        run(args)?;
        let pub_path = key.with_extension("pub");
        let public_line = std::fs::read_to_string(&pub_path)
            .map_err(io("cannot read", &pub_path))?
            .trim()
            .to_string();
        if !public_line.starts_with(&format!("{} ", key_type.line_type())) {
            return Err(CredentialError::Unexpected {
                what: format!("CA public key {} ({key_type:?})", pub_path.display()),
                found: public_line,
            });
        }
        Ok(Ca {
            name: name.to_string(),
            key,
            public_line,
            key_type,
            sign_args: Vec::new(),
        })
    }

    /// The same CA key under the name `name`, signing every certificate with `extra` added to
    /// `ssh-keygen -s` (after this CA's own extras): `["-t", "rsa-sha2-256"]` for an RSA CA's
    /// SHA-256 signature, `["-t", "ssh-rsa"]` for SHA-1, `["-O", "force-command=…"]` for a critical
    /// option. Its public line is the CA's: a trust file listing the CA trusts the variant.
    pub fn variant(&self, name: &str, extra: &[&str]) -> Ca {
        let mut v = self.clone();
        v.name = name.to_string();
        v.sign_args.extend(extra.iter().map(|a| a.to_string()));
        v
    }

    /// The CA's public key line (`<type> AAAA… fleet-ca-<name>`): a line of
    /// `FLEET_TRUST_CA_FILE`.
    pub fn public_line(&self) -> &str {
        &self.public_line
    }

    /// What `ssh-keygen -t` made.
    pub fn key_type(&self) -> CaKeyType {
        self.key_type
    }

    /// The extra arguments of every `ssh-keygen -s` this CA runs (empty but for a variant).
    pub fn sign_args(&self) -> &[String] {
        &self.sign_args
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
        args.extend(self.sign_args.iter().map(|a| std::ffi::OsStr::new(a.as_str())));
        if req.kind == CertKind::Host {
            args.push("-h".as_ref());
        }
        args.extend::<[&std::ffi::OsStr; 2]>(["-I".as_ref(), req.key_id.as_ref()]);
        // No principals: no `-n` at all (ssh-keygen refuses an empty name), a certificate that
        // OpenSSH reads as valid for any principal.
        if !req.principals.is_empty() {
            args.extend::<[&std::ffi::OsStr; 2]>(["-n".as_ref(), principals.as_ref()]);
        }
        args.extend([
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

/// What `ssh-keygen -L` says of a certificate line (written to a file of its own in `dir`): the
/// suite's check that a certificate it made is what a scenario says it is (its signature
/// algorithm, its critical options), in ssh-keygen's words.
pub fn describe(dir: &Path, line: &str) -> Result<String, CredentialError> {
    std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    let p = dir.join(format!("describe-{}-cert.pub", uuid::Uuid::new_v4().simple()));
    std::fs::write(&p, format!("{}\n", line.trim())).map_err(io("cannot write", &p))?;
    let out = run(["-L".as_ref(), "-f".as_ref(), p.as_os_str()]);
    let _ = std::fs::remove_file(&p);
    out
}

/// The CA signature algorithm `ssh-keygen -L` names (`Signing CA: RSA SHA256:… (using
/// rsa-sha2-256)`): `ssh-ed25519`, `ecdsa-sha2-nistp256`, `rsa-sha2-512`, `ssh-rsa`, ….
pub fn signature_algorithm(described: &str) -> Option<String> {
    let line = described.lines().find(|l| l.trim_start().starts_with("Signing CA:"))?;
    let using = line.split("(using ").nth(1)?;
    Some(using.trim_end().trim_end_matches(')').to_string())
}

/// The critical options `ssh-keygen -L` lists (`force-command /bin/true`, one per line); empty
/// when it says `Critical Options: (none)`.
pub fn critical_options(described: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for l in described.lines() {
        let t = l.trim();
        if t.starts_with("Critical Options:") {
            inside = true;
            continue;
        }
        if inside {
            if t.ends_with(':') || t.contains(": ") || t.starts_with("Extensions:") || t.is_empty() {
                break;
            }
            out.push(t.to_string());
        }
    }
    out
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

    fn host_cert(ca: &Ca, dir: &Path, serial: u64) -> (HostKey, Certificate) {
        let key = HostKey::generate("b");
        let pub_path = dir.join(format!("b-{serial}.pub"));
        write_public_key(&key, &pub_path).expect("pub");
        let cert = ca
            .sign(&CertRequest {
                public_key: &pub_path,
                kind: CertKind::Host,
                key_id: &format!("b-{serial}"),
                principals: &["b".to_string()],
                validity: Validity::around_now(Duration::from_secs(60), Duration::from_secs(3600)),
                serial,
            })
            .expect("sign");
        (key, cert)
    }

    #[test]
    fn every_ca_type_signs_a_host_certificate_over_the_suites_ed25519_key() {
        // SPEC [C-21] 10: ed25519, ECDSA (three curves) and RSA CAs; the certified key is always
        // the gateway's ed25519 key, so the certificate line is always an ed25519 certificate.
        let dir = tmp();
        let cases = [
            (CaKeyType::Ed25519, "ssh-ed25519", "ED25519"),
            (CaKeyType::Ecdsa(256), "ecdsa-sha2-nistp256", "ECDSA"),
            (CaKeyType::Ecdsa(384), "ecdsa-sha2-nistp384", "ECDSA"),
            (CaKeyType::Ecdsa(521), "ecdsa-sha2-nistp521", "ECDSA"),
            (CaKeyType::Rsa, "rsa-sha2-512", "RSA"),
        ];
        for (i, (t, alg, shown)) in cases.into_iter().enumerate() {
            let ca = Ca::create_typed(&dir.join("ca"), &format!("ca{i}"), t).expect("ca");
            assert!(
                ca.public_line().starts_with(&format!("{} AAAA", t.line_type())),
                "{}",
                ca.public_line()
            );
            let (key, cert) = host_cert(&ca, &dir, i as u64 + 1);
            assert!(
                cert.line.starts_with("ssh-ed25519-cert-v01@openssh.com "),
                "{}",
                cert.line
            );
            assert_eq!(cert_fields(&cert.line).expect("cert").key, key.public_bytes());
            let d = describe(&dir, &cert.line).expect("-L");
            assert!(d.contains(&format!("Signing CA: {shown} ")), "{d}");
            assert_eq!(signature_algorithm(&d).as_deref(), Some(alg), "{d}");
            assert!(critical_options(&d).is_empty(), "{d}");
        }
        let dsa =
            Ca::create_typed(&dir.join("ca"), "old", CaKeyType::Dsa).expect("ssh-keygen 9.2 still makes DSA keys");
        assert!(dsa.public_line().starts_with("ssh-dss AAAA"), "{}", dsa.public_line());
        std::fs::remove_dir_all(&dir).expect("rm");
    }

    #[test]
    fn variants_sign_with_their_algorithm_and_options_under_the_same_key() {
        let dir = tmp();
        let rsa = Ca::create_typed(&dir.join("ca"), "rsa", CaKeyType::Rsa).expect("ca");
        let sha256 = rsa.variant("rsa-sha256", &["-t", "rsa-sha2-256"]);
        let sha1 = rsa.variant("rsa-sha1", &["-t", "ssh-rsa"]);
        assert_eq!(sha256.public_line(), rsa.public_line());
        for (ca, alg) in [(&rsa, "rsa-sha2-512"), (&sha256, "rsa-sha2-256"), (&sha1, "ssh-rsa")] {
            let (_, cert) = host_cert(ca, &dir, 7);
            let d = describe(&dir, &cert.line).expect("-L");
            assert_eq!(signature_algorithm(&d).as_deref(), Some(alg), "{d}");
        }
        let ed = Ca::create(&dir.join("ca"), "fleet").expect("ca");
        let forced = ed.variant(
            "forced",
            &["-O", "force-command=/usr/bin/true", "-O", "source-address=10.0.0.0/8"],
        );
        let (_, cert) = host_cert(&forced, &dir, 8);
        let d = describe(&dir, &cert.line).expect("-L");
        assert!(d.contains("host certificate"), "{d}");
        assert_eq!(
            critical_options(&d),
            vec![
                "force-command /usr/bin/true".to_string(),
                "source-address 10.0.0.0/8".to_string()
            ],
            "{d}"
        );
        assert!(critical_options(&describe(&dir, &host_cert(&ed, &dir, 9).1.line).expect("-L")).is_empty());
        assert_eq!(CaKeyType::parse("ecdsa", Some(384)), Some(CaKeyType::Ecdsa(384)));
        assert_eq!(CaKeyType::parse("ecdsa", Some(300)), None);
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
