//! Revocation lists in the text form `ssh-keygen -k` reads: its "KRL specification" (SPEC MEM-4).
//!
//! Why: `FLEET_REVOKED_FILE` is that text, not a binary KRL — `serial: N` or `serial: N-M`,
//! `id: <key id>`, `key: <public key>`, `hash: SHA256:<fingerprint>`, `#` comments and blank
//! lines. The suite writes it here and proves, in its own tests, that `ssh-keygen` reads each form
//! and revokes exactly the certificate it names.

use std::fmt::Write as _;

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
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use super::*;
    use crate::credentials::ca::{Ca, CertKind, CertRequest, Certificate, Validity};
    use crate::credentials::openssh::{fingerprint, host_key_line, write_public_key};
    use crate::credentials::run;
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
        let spec = f.dir.join(format!("{}.spec", uuid::Uuid::new_v4().simple()));
        std::fs::write(&spec, list.render()).expect("spec");
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
}
