//! Revocation lists in the text form `ssh-keygen -k` reads: its "KRL specification" (SPEC MEM-4).
//!
//! Why: `FLEET_REVOKED_FILE` is that text, not a binary KRL — `serial: N` or `serial: N-M`,
//! `id: <key id>`, `key: <public key>`, `hash: SHA256:<fingerprint>`, `#` comments and blank
//! lines. The suite writes it here and proves, in its own tests, that `ssh-keygen` reads each form
//! and revokes exactly the certificate it names.
//!
//! SPEC [C-21] 13 adds the forms operators write by hand — serials in `0x` hex, a `#` comment
//! ending a line (`serial: 5  # retired`) — written by [`Revoke::styled`] and
//! [`RevocationList::render_styled`]; and the binary KRL that `ssh-keygen -k` makes out of a
//! specification ([`binary`]), which a gateway must refuse.

use std::fmt::Write as _;
use std::path::Path;

use super::{CredentialError, io, run};

/// One line of a KRL specification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoke {
    Serial(u64),
    SerialRange(u64, u64),
    /// A certificate's key id (`-I`).
    Id(String),
    /// A public key line (`ssh-ed25519 AAAA…`): the key and every certificate over it.
    Key(String),
    /// `SHA256:…`, as `ssh-keygen -l` prints it.
    Hash(String),
}

impl Revoke {
    pub fn line(&self) -> String {
        match self {
            Revoke::Serial(n) => format!("serial: {n}"),
            Revoke::SerialRange(a, b) => format!("serial: {a}-{b}"),
            Revoke::Id(id) => format!("id: {id}"),
            Revoke::Key(k) => format!("key: {}", k.trim()),
            Revoke::Hash(h) => format!("hash: {h}"),
        }
    }
}

/// How an operator may write a line beyond the plain form ([C-21] 13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Style {
    /// Serials in `0x` hex (`serial: 0x1a`, `serial: 0x10-0x1f`).
    pub hex: bool,
    /// A `#` comment ending the line, after two spaces (`serial: 5  # retired`).
    pub comment: Option<String>,
}

impl Revoke {
    /// The line written in `style`.
    pub fn styled(&self, style: &Style) -> String {
        let line = match (self, style.hex) {
            (Revoke::Serial(n), true) => format!("serial: 0x{n:x}"),
            (Revoke::SerialRange(a, b), true) => format!("serial: 0x{a:x}-0x{b:x}"),
            _ => self.line(),
        };
        match &style.comment {
            Some(c) => format!("{line}  # {c}"),
            None => line,
        }
    }
}

/// A revocation list: what the suite has revoked so far, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevocationList {
    pub entries: Vec<Revoke>,
}

impl RevocationList {
    /// The file's text: a comment, a blank line, then one line per entry (an empty list is only
    /// the comment — a valid specification that revokes nothing).
    pub fn render(&self) -> String {
        let mut s = String::from("# revoked by the fleet's operators (KRL specification, ssh-keygen -k)\n\n");
        for e in &self.entries {
            let _ = writeln!(s, "{}", e.line());
        }
        s
    }

    /// [`RevocationList::render`] with every entry written in `style`.
    pub fn render_styled(&self, style: &Style) -> String {
        let mut s = String::from("# revoked by the fleet's operators (KRL specification, ssh-keygen -k)\n\n");
        for e in &self.entries {
            let _ = writeln!(s, "{}", e.styled(style));
        }
        s
    }
}

/// The binary KRL `ssh-keygen -k -f <out> -s <ca.pub> <spec>` makes out of `spec` (a
/// specification's text), in `dir`: what sshd's `RevokedKeys` reads, and what a gateway's
/// `FLEET_REVOKED_FILE` must not be ([C-21] 13). `-s` binds `serial:`/`id:` lines to that CA.
pub fn binary(dir: &Path, spec: &str, ca_public: &Path) -> Result<Vec<u8>, CredentialError> {
    std::fs::create_dir_all(dir).map_err(io("cannot create", dir))?;
    let stem = dir.join(format!("krl-{}", uuid::Uuid::new_v4().simple()));
    let spec_path = stem.with_extension("spec");
    let out = stem.with_extension("krl");
    std::fs::write(&spec_path, spec).map_err(io("cannot write", &spec_path))?;
    let made = run([
        "-k".as_ref(),
        "-f".as_ref(),
        out.as_os_str(),
        "-s".as_ref(),
        ca_public.as_os_str(),
        spec_path.as_os_str(),
    ]);
    let bytes = made.and_then(|_| std::fs::read(&out).map_err(io("cannot read", &out)));
    let _ = std::fs::remove_file(&spec_path);
    let _ = std::fs::remove_file(&out);
    let bytes = bytes?;
    if !bytes.starts_with(KRL_MAGIC) {
        return Err(CredentialError::Unexpected {
            what: "a binary KRL".into(),
            found: String::from_utf8_lossy(&bytes[..bytes.len().min(16)]).into_owned(),
        });
    }
    Ok(bytes)
}

/// The first bytes of a binary KRL (OpenSSH PROTOCOL.krl: `#define KRL_MAGIC "SSHKRL\n\0"`).
pub const KRL_MAGIC: &[u8] = b"SSHKRL\n\0";

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::credentials::ca::{Ca, CertKind, CertRequest, Certificate, Validity};
    use crate::credentials::openssh::{fingerprint, host_key_line, write_public_key};
    use crate::keys::HostKey;

    struct Fixture {
        dir: PathBuf,
        ca: Ca,
        certs: Vec<(HostKey, PathBuf, Certificate)>,
    }

    fn fixture() -> Fixture {
        let dir = std::env::temp_dir().join(format!("krl-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = Ca::create(&dir.join("ca"), "fleet").expect("ca");
        let certs = (1..=3u64)
            .map(|i| {
                let host = format!("h{i}");
                let key = HostKey::generate(&host);
                let pub_path = dir.join(format!("{host}.pub"));
                write_public_key(&key, &pub_path).expect("pub");
                let cert = ca
                    .sign(&CertRequest {
                        public_key: &pub_path,
                        kind: CertKind::Host,
                        key_id: &format!("{host}-id"),
                        principals: std::slice::from_ref(&host),
                        validity: Validity::around_now(Duration::from_secs(60), Duration::from_secs(3600)),
                        serial: 10 * i,
                    })
                    .expect("sign");
                (key, pub_path, cert)
            })
            .collect();
        Fixture { dir, ca, certs }
    }

    /// Which of the fixture's certificates `ssh-keygen` finds revoked by `list`.
    fn revoked_by(f: &Fixture, list: &RevocationList) -> Vec<bool> {
        revoked_by_text(f, &list.render())
    }

    /// Which of the fixture's certificates `ssh-keygen` finds revoked by the specification `text`.
    fn revoked_by_text(f: &Fixture, text: &str) -> Vec<bool> {
        let spec = f.dir.join(format!("{}.spec", uuid::Uuid::new_v4().simple()));
        std::fs::write(&spec, text).expect("spec");
        let krl = spec.with_extension("krl");
        run([
            "-k".as_ref(),
            "-f".as_ref(),
            krl.as_os_str(),
            "-s".as_ref(),
            f.ca.public_path().as_os_str(),
            spec.as_os_str(),
        ])
        .expect("ssh-keygen -k reads the specification");
        f.certs
            .iter()
            .map(|(_, _, c)| {
                let p = f.dir.join(format!("{}-cert.pub", uuid::Uuid::new_v4().simple()));
                std::fs::write(&p, format!("{}\n", c.line)).expect("cert");
                query(&krl, &p)
            })
            .collect()
    }

    /// Which of the fixture's certificates `ssh-keygen -Q` finds revoked by the KRL at `krl`.
    fn queried(f: &Fixture, krl: &Path) -> Vec<bool> {
        f.certs
            .iter()
            .map(|(_, _, c)| {
                let p = f.dir.join(format!("{}-cert.pub", uuid::Uuid::new_v4().simple()));
                std::fs::write(&p, format!("{}\n", c.line)).expect("cert");
                query(krl, &p)
            })
            .collect()
    }

    fn query(krl: &Path, cert: &Path) -> bool {
        // `ssh-keygen -Q` exits non-zero when a key is revoked; its output says which.
        let out = std::process::Command::new(crate::credentials::ssh_keygen().expect("ssh-keygen"))
            .args(["-Q".as_ref(), "-f".as_ref(), krl.as_os_str(), cert.as_os_str()])
            .output()
            .expect("run");
        String::from_utf8_lossy(&out.stdout).contains("REVOKED")
    }

    #[test]
    fn each_form_revokes_exactly_the_certificate_it_names() {
        let f = fixture();
        let (key2, pub2, cert2) = &f.certs[1];
        let forms = [
            Revoke::Serial(cert2.serial),
            Revoke::SerialRange(15, 25),
            Revoke::Id(cert2.key_id.clone()),
            Revoke::Key(host_key_line(key2)),
            Revoke::Hash(fingerprint(pub2).expect("fp")),
        ];
        for form in forms {
            let list = RevocationList {
                entries: vec![form.clone()],
            };
            assert_eq!(revoked_by(&f, &list), vec![false, true, false], "{}", form.line());
        }
        std::fs::remove_dir_all(&f.dir).expect("rm");
    }

    #[test]
    fn an_empty_list_is_a_specification_that_revokes_nothing() {
        let f = fixture();
        let empty = RevocationList::default();
        assert!(empty.render().starts_with('#'));
        assert_eq!(revoked_by(&f, &empty), vec![false, false, false]);
        let both = RevocationList {
            entries: vec![Revoke::Serial(10), Revoke::Id("h3-id".into())],
        };
        assert_eq!(revoked_by(&f, &both), vec![true, false, true]);
        std::fs::remove_dir_all(&f.dir).expect("rm");
    }

    #[test]
    fn hex_serials_and_end_of_line_comments_revoke_exactly_what_they_name() {
        // [C-21] 13, as ssh-keygen -k reads them (measured on OpenSSH 9.2: FACTS.md).
        let f = fixture();
        let (key2, pub2, cert2) = &f.certs[1];
        let hex = Style {
            hex: true,
            comment: None,
        };
        let commented = Style {
            hex: true,
            comment: Some("retired".into()),
        };
        let forms = [
            Revoke::Serial(cert2.serial),
            Revoke::SerialRange(15, 25),
            Revoke::Id(cert2.key_id.clone()),
            Revoke::Key(host_key_line(key2)),
            Revoke::Hash(fingerprint(pub2).expect("fp")),
        ];
        for form in &forms {
            for style in [&hex, &commented] {
                let list = RevocationList {
                    entries: vec![form.clone()],
                };
                let text = list.render_styled(style);
                assert_eq!(revoked_by_text(&f, &text), vec![false, true, false], "{text}");
            }
        }
        assert_eq!(Revoke::Serial(26).styled(&hex), "serial: 0x1a");
        assert_eq!(
            Revoke::SerialRange(16, 31).styled(&commented),
            "serial: 0x10-0x1f  # retired"
        );
        assert_eq!(Revoke::Id("b-3".into()).styled(&commented), "id: b-3  # retired");
        std::fs::remove_dir_all(&f.dir).expect("rm");
    }

    #[test]
    fn a_binary_krl_is_what_ssh_keygen_k_makes_and_revokes_the_same() {
        let f = fixture();
        let list = RevocationList {
            entries: vec![Revoke::Serial(20), Revoke::Id("h3-id".into())],
        };
        let bytes = binary(&f.dir, &list.render(), &f.ca.public_path()).expect("ssh-keygen -k");
        assert!(bytes.starts_with(KRL_MAGIC));
        assert!(
            std::str::from_utf8(&bytes).is_err() || bytes.contains(&0),
            "binary, not text"
        );
        let path = f.dir.join("binary.krl");
        std::fs::write(&path, &bytes).expect("write");
        assert_eq!(queried(&f, &path), vec![false, true, true]);
        std::fs::remove_dir_all(&f.dir).expect("rm");
    }
}
