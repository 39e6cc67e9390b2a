//! The key revocation list (MEM-4): `FLEET_REVOKED_FILE` in the text form `ssh-keygen -k` reads,
//! its "KRL specification".
//!
//! Lines: `serial: N`, `serial: N-M`, `id: <key id>`, `key: <OpenSSH public key line>`,
//! `hash: SHA256:<base64 fingerprint>`; `#` comment lines and blank lines. Any other line is an
//! error naming it (MEM-1: the file is then not applied). Serials and ids apply to the
//! certificates of every CA of `FLEET_TRUST_CA_FILE` (SPEC MEM-4; `ssh-keygen -k` binds them to
//! the `-s` CA, and the fleet has only its own CAs). As in OpenSSH, a `key:` or `hash:` revokes a
//! plain key and every certificate over it, and one naming a CA key revokes every certificate
//! that CA signed; a `key:` holding a certificate revokes that CA's certificate by serial (by key
//! id when the serial is 0). Revocation is judged with set lookups only.

use std::collections::{BTreeSet, HashSet};

use ssh_key::{Certificate, Fingerprint, HashAlg, PublicKey};

use super::files::{LineError, meaningful_lines};

/// What a KRL can name of a certificate: its serial and key id, its key's and its CA's
/// fingerprints (`cert::CertInfo::names`). The list judges these alone, so it needs nothing of
/// how a certificate is read.
#[derive(Debug, Clone, Copy)]
pub struct CertNames<'a> {
    pub serial: u64,
    pub key_id: &'a str,
    pub key_fingerprint: &'a Fingerprint,
    pub ca_fingerprint: &'a Fingerprint,
}

/// What the KRL revokes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Krl {
    /// Inclusive serial ranges, any CA.
    serials: Vec<(u64, u64)>,
    ids: HashSet<String>,
    /// SHA-256 fingerprints of revoked keys (plain keys and CA keys alike).
    keys: HashSet<Fingerprint>,
    /// (CA, serial) and (CA, key id) of the certificates a `key:` line named.
    ca_serials: BTreeSet<(Fingerprint, u64)>,
    ca_ids: BTreeSet<(Fingerprint, String)>,
}

impl Krl {
    /// Parses a KRL specification.
    pub fn parse(text: &str) -> Result<Krl, LineError> {
        let mut krl = Krl::default();
        for (n, line) in meaningful_lines(text) {
            let (word, value) = line
                .split_once(':')
                .map(|(w, v)| (w.trim().to_ascii_lowercase(), v.trim()))
                .ok_or_else(|| LineError::new(n, format!("{line:?} is not `serial:`, `id:`, `key:` or `hash:`")))?;
            match word.as_str() {
                "serial" => krl
                    .serials
                    .push(parse_serials(value).map_err(|e| LineError::new(n, e))?),
                "id" if !value.is_empty() => {
                    krl.ids.insert(value.to_string());
                }
                "key" => krl.add_key(value).map_err(|e| LineError::new(n, e))?,
                "hash" => {
                    let fp: Fingerprint = value
                        .parse()
                        .map_err(|e| LineError::new(n, format!("hash {value:?} is not SHA256:<base64> ({e})")))?;
                    if !fp.is_sha256() {
                        return Err(LineError::new(n, format!("hash {value:?}: only SHA256 fingerprints")));
                    }
                    krl.keys.insert(fp);
                }
                "id" => return Err(LineError::new(n, "id: names no key id")),
                other => {
                    return Err(LineError::new(
                        n,
                        format!("{other:?} is not `serial:`, `id:`, `key:` or `hash:`"),
                    ));
                }
            }
        }
        Ok(krl)
    }

    fn add_key(&mut self, value: &str) -> Result<(), String> {
        if value
            .split_whitespace()
            .next()
            .is_some_and(|alg| alg.contains("-cert-v01@openssh.com"))
        {
            let cert =
                Certificate::from_openssh(value).map_err(|e| format!("key: not a readable certificate ({e})"))?;
            let ca = cert.signature_key().fingerprint(HashAlg::Sha256);
            if cert.serial() == 0 {
                self.ca_ids.insert((ca, cert.key_id().to_string()));
            } else {
                self.ca_serials.insert((ca, cert.serial()));
            }
            return Ok(());
        }
        let key = PublicKey::from_openssh(value).map_err(|e| format!("key: not an OpenSSH public key line ({e})"))?;
        self.keys.insert(key.fingerprint(HashAlg::Sha256));
        Ok(())
    }

    /// Whether a plain key (by SHA-256 fingerprint) is revoked.
    pub fn revokes_key(&self, fp: &Fingerprint) -> bool {
        self.keys.contains(fp)
    }

    /// Whether a plain ed25519 key (a peers-file key, the gateway's own) is revoked by a `key:`
    /// or `hash:` line. Free when the KRL names no key (the fingerprint is not even computed).
    pub fn revokes_ed25519(&self, key: &ed25519_dalek::VerifyingKey) -> Option<Fingerprint> {
        if self.keys.is_empty() {
            return None;
        }
        let fp = ssh_key::public::KeyData::Ed25519(key.into()).fingerprint(HashAlg::Sha256);
        self.keys.contains(&fp).then_some(fp)
    }

    /// Why `cert` is revoked, if it is: its serial or key id, its key, or its CA's key.
    pub fn revokes(&self, cert: CertNames<'_>) -> Option<String> {
        if let Some((a, b)) = self.serials.iter().find(|(a, b)| (*a..=*b).contains(&cert.serial)) {
            return Some(if a == b {
                format!("serial {a}")
            } else {
                format!("serial {} in {a}-{b}", cert.serial)
            });
        }
        if self.ids.contains(cert.key_id) {
            return Some(format!("id {:?}", cert.key_id));
        }
        if self.keys.contains(cert.key_fingerprint) {
            return Some(format!("key {}", cert.key_fingerprint));
        }
        if self.keys.contains(cert.ca_fingerprint) {
            return Some(format!("its CA {}", cert.ca_fingerprint));
        }
        if self.ca_serials.contains(&(*cert.ca_fingerprint, cert.serial)) {
            return Some(format!("serial {} of CA {}", cert.serial, cert.ca_fingerprint));
        }
        if self.ca_ids.contains(&(*cert.ca_fingerprint, cert.key_id.to_string())) {
            return Some(format!("id {:?} of CA {}", cert.key_id, cert.ca_fingerprint));
        }
        None
    }

    /// How many entries the KRL holds (for the reload's log line).
    pub fn len(&self) -> usize {
        self.serials.len() + self.ids.len() + self.keys.len() + self.ca_serials.len() + self.ca_ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// `N` or `N-M` (decimal, or `0x` hexadecimal as `ssh-keygen` takes them), M ≥ N.
fn parse_serials(value: &str) -> Result<(u64, u64), String> {
    let one = |s: &str| -> Result<u64, String> {
        let s = s.trim();
        let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => s.parse(),
        };
        parsed.map_err(|_| format!("serial {s:?} is not a number"))
    };
    let (a, b) = match value.split_once('-') {
        Some((a, b)) => (one(a)?, one(b)?),
        None => {
            let a = one(value)?;
            (a, a)
        }
    };
    if b < a {
        return Err(format!("serial range {value:?} ends before it starts"));
    }
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{cert, fixture};

    /// OpenSSH's own verdicts (`ssh-keygen -Q`, written by scripts/gen-cert-fixtures) match ours.
    #[test]
    fn the_krl_agrees_with_openssh() {
        let expected = fixture("expected-revoked.txt");
        let mut checked = 0;
        for line in expected.lines() {
            let mut w = line.split_whitespace();
            let (spec, cert_file, verdict) = (
                w.next().expect("spec"),
                w.next().expect("cert"),
                w.next().expect("verdict"),
            );
            let krl = Krl::parse(&fixture(spec)).expect("the fixture KRL parses");
            let name = cert_file.trim_end_matches("-cert.pub");
            let ours = if krl.revokes(cert(name).names()).is_some() {
                "revoked"
            } else {
                "ok"
            };
            assert_eq!(ours, verdict, "{spec} {cert_file}");
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} verdicts");
    }

    #[test]
    fn each_kind_of_line_revokes() {
        let krl = Krl::parse(&fixture("krl.txt")).expect("parses");
        assert_eq!(
            krl.revokes(cert("a-serial").names()),
            Some("serial 205 in 200-210".into())
        );
        assert_eq!(krl.revokes(cert("a-id").names()), Some("id \"revoke-me\"".into()));
        assert!(
            krl.revokes(cert("c").names())
                .is_some_and(|w| w.starts_with("key SHA256:"))
        );
        assert!(krl.revokes(cert("b").names()).is_some(), "by hash");
        assert_eq!(krl.revokes(cert("a").names()), None);
        let by_ca = Krl::parse(&fixture("krl-ca.txt")).expect("parses");
        assert!(
            by_ca
                .revokes(cert("a-other-ca").names())
                .is_some_and(|w| w.starts_with("its CA"))
        );
        let a = crate::membership::cert::tests::seed_signer("a").verifying_key();
        assert_eq!(krl.revokes_ed25519(&a), None);
        let by_key = Krl::parse(&format!("key: {}", fixture("a.pub"))).expect("parses");
        assert!(by_key.revokes_ed25519(&a).is_some(), "a plain (peers-file) key");
        let by_cert = Krl::parse(&format!("key: {}", fixture("a-cert.pub"))).expect("parses");
        assert_eq!(
            by_cert
                .revokes(cert("a").names())
                .map(|w| w.starts_with("serial 11 of CA")),
            Some(true)
        );
        assert_eq!(
            by_cert.revokes(cert("a-other-ca").names()),
            None,
            "another CA's serial 11"
        );
    }

    #[test]
    fn bad_lines_are_named() {
        let line = |t: &str| Krl::parse(t).map(|_| ()).map_err(|e| e.line);
        assert_eq!(line("# ok\n\nserial: 1\nserial: 5-3\n"), Err(4));
        assert_eq!(line("serial: x\n"), Err(1));
        assert_eq!(line("id: a\nrevoke everything\n"), Err(2));
        assert_eq!(line("sha1: abc\n"), Err(1));
        assert_eq!(line("hash: MD5:abc\n"), Err(1));
        assert_eq!(line("hash: SHA256:!!\n"), Err(1));
        assert_eq!(line("key: ssh-ed25519 AAAA\n"), Err(1));
        assert_eq!(line("id:\n"), Err(1));
        assert_eq!(line("SERIAL: 0x10\nId: x\n"), Ok(()));
        assert_eq!(line(""), Ok(()));
    }
}
