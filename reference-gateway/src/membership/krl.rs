//! The key revocation list (MEM-4): `FLEET_REVOKED_FILE` in the text form `ssh-keygen -k` reads,
//! its "KRL specification", read as `ssh-keygen -k` reads it ([C-21] 13; OpenSSH 9.2's
//! `update_krl_from_file`, its verdicts checked with `ssh-keygen -Q` by the tests):
//!
//! - a `#` anywhere ends the line (`serial: 5  # retired`); blanks and tabs around are dropped;
//! - directives in any case: `serial: N` or `serial: N-M` (strtoull's base 0: decimal, `0x` hex,
//!   a leading `0` octal; N ≥ 1, M > N), `id: <key id>` (the rest of the line, empty included),
//!   `key: <public key>`, `hash: SHA256:<base64>`, and the older `sha1: <public key>` /
//!   `sha256: <public key>` (they revoke that key, as `key:` does);
//! - a line that is a public key alone revokes that key, a certificate alone revokes that
//!   certificate (its CA's serial, or its key id when the serial is 0);
//! - `key:`, `sha1:` and `sha256:` given a certificate revoke the certificate's key (OpenSSH
//!   revokes the plain key), and every certificate over it;
//! - any other line is an error naming it (MEM-1: the file is then not applied). A binary KRL
//!   (`ssh-keygen -k` output) is refused when the file is read ([`super::files::text`]).
//!
//! Where the gateway differs on purpose: serials and ids apply to the certificates of every CA of
//! `FLEET_TRUST_CA_FILE` (SPEC MEM-4, [C-21] 6) — what `ssh-keygen -k -s none` (OpenSSH's wildcard
//! CA) compiles, where `-s ca.pub` binds them to one CA; and CRLF line ends are taken (ssh-keygen
//! refuses them). As in OpenSSH, a `key:` or `hash:` revokes a plain key and every certificate over
//! it, and one naming a CA key revokes every certificate that CA signed. Revocation is judged with
//! set lookups only.

use std::collections::{BTreeMap, HashMap};

use ssh_key::{Certificate, Fingerprint, HashAlg, PublicKey};

use super::files::LineError;

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

/// What the KRL revokes, each entry with the (first) line that says so: an operator asking "why
/// is host c out?" is pointed at the line ([`Krl::revokes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Krl {
    /// Inclusive serial ranges, any CA, and their lines.
    serials: Vec<(u64, u64, usize)>,
    ids: HashMap<String, usize>,
    /// SHA-256 fingerprints of revoked keys (plain keys and CA keys alike).
    keys: HashMap<Fingerprint, usize>,
    /// (CA, serial) and (CA, key id) of the certificates a line named alone.
    ca_serials: BTreeMap<(Fingerprint, u64), usize>,
    ca_ids: BTreeMap<(Fingerprint, String), usize>,
}

impl Krl {
    /// Parses a KRL specification.
    pub fn parse(text: &str) -> Result<Krl, LineError> {
        let mut krl = Krl::default();
        for (n, line) in spec_lines(text) {
            krl.add_line(line, n).map_err(|e| LineError::new(n, e))?;
        }
        Ok(krl)
    }

    /// One line, comment and surrounding blanks already cut.
    fn add_line(&mut self, line: &str, n: usize) -> Result<(), String> {
        if let Some(v) = directive(line, "serial:") {
            let (a, b) = parse_serials(v)?;
            self.serials.push((a, b, n));
        } else if let Some(v) = directive(line, "id:") {
            self.ids.entry(v.to_string()).or_insert(n);
        } else if let Some(v) = directive(line, "hash:") {
            self.keys.entry(parse_hash(v)?).or_insert(n);
        } else if let Some((word, v)) = ["key:", "sha1:", "sha256:"]
            .into_iter()
            .find_map(|w| directive(line, w).map(|v| (w, v)))
        {
            let fp = plain_key(v).map_err(|e| match word {
                "key:" => format!("{word} {e}"),
                _ => format!("{word} {e}: it takes a public key (a fingerprint goes on a hash: SHA256:<base64> line)"),
            })?;
            self.keys.entry(fp).or_insert(n);
        } else {
            self.add_alone(line, n)?;
        }
        Ok(())
    }

    /// A line without a directive: a public key (revoked as by `key:`) or a certificate (revoked
    /// by its CA and serial, or key id when the serial is 0), as `ssh-keygen -k` reads it.
    fn add_alone(&mut self, line: &str, n: usize) -> Result<(), String> {
        let not_a_line =
            || format!("{line:?} is not a KRL line (serial:, id:, key:, hash:, sha1:, sha256:, or a public key alone)");
        if is_certificate(line) {
            let cert = Certificate::from_openssh(line).map_err(|e| format!("{} ({e})", not_a_line()))?;
            let ca = cert.signature_key().fingerprint(HashAlg::Sha256);
            if cert.serial() == 0 {
                self.ca_ids.entry((ca, cert.key_id().to_string())).or_insert(n);
            } else {
                self.ca_serials.entry((ca, cert.serial())).or_insert(n);
            }
            return Ok(());
        }
        let key = PublicKey::from_openssh(line).map_err(|_| not_a_line())?;
        self.keys.entry(key.fingerprint(HashAlg::Sha256)).or_insert(n);
        Ok(())
    }

    /// Whether a plain key (by SHA-256 fingerprint) is revoked.
    pub fn revokes_key(&self, fp: &Fingerprint) -> bool {
        self.keys.contains_key(fp)
    }

    /// The line that revokes the key `fp`, if one does.
    pub fn key_line(&self, fp: &Fingerprint) -> Option<usize> {
        self.keys.get(fp).copied()
    }

    /// Whether a plain ed25519 key (a peers-file key, the gateway's own) is revoked by a `key:`
    /// or `hash:` line. Free when the KRL names no key (the fingerprint is not even computed).
    pub fn revokes_ed25519(&self, key: &ed25519_dalek::VerifyingKey) -> Option<Fingerprint> {
        if self.keys.is_empty() {
            return None;
        }
        let fp = ssh_key::public::KeyData::Ed25519(key.into()).fingerprint(HashAlg::Sha256);
        self.keys.contains_key(&fp).then_some(fp)
    }

    /// Why `cert` is revoked, if it is: its serial or key id, its key, or its CA's key.
    pub fn revokes(&self, cert: CertNames<'_>) -> Option<String> {
        if let Some((a, b, n)) = self.serials.iter().find(|(a, b, _)| (*a..=*b).contains(&cert.serial)) {
            return Some(if a == b {
                format!("serial {a}, line {n}")
            } else {
                format!("serial {} in {a}-{b}, line {n}", cert.serial)
            });
        }
        if let Some(n) = self.ids.get(cert.key_id) {
            return Some(format!("id {:?}, line {n}", cert.key_id));
        }
        if let Some(n) = self.keys.get(cert.key_fingerprint) {
            return Some(format!("key {}, line {n}", cert.key_fingerprint));
        }
        if let Some(n) = self.keys.get(cert.ca_fingerprint) {
            return Some(format!("its CA {}, line {n}", cert.ca_fingerprint));
        }
        if let Some(n) = self.ca_serials.get(&(*cert.ca_fingerprint, cert.serial)) {
            return Some(format!(
                "serial {} of CA {}, line {n}",
                cert.serial, cert.ca_fingerprint
            ));
        }
        if let Some(n) = self.ca_ids.get(&(*cert.ca_fingerprint, cert.key_id.to_string())) {
            return Some(format!("id {:?} of CA {}, line {n}", cert.key_id, cert.ca_fingerprint));
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

/// The lines of a KRL specification as `ssh-keygen -k` cuts them: 1-based number and the text
/// before the first `#`, blanks and tabs at either end dropped; empty lines left out.
fn spec_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines().enumerate().filter_map(|(i, l)| {
        let l = l.split('#').next().unwrap_or_default().trim_matches([' ', '\t']);
        (!l.is_empty()).then_some((i + 1, l))
    })
}

/// The value after `word` (matched in any case) with leading blanks dropped, if the line starts
/// with it.
fn directive<'a>(line: &'a str, word: &str) -> Option<&'a str> {
    let head = line.get(..word.len())?;
    head.eq_ignore_ascii_case(word)
        .then(|| line[word.len()..].trim_start_matches([' ', '\t']))
}

fn is_certificate(line: &str) -> bool {
    line.split_whitespace()
        .next()
        .is_some_and(|alg| alg.ends_with("-cert-v01@openssh.com"))
}

/// The SHA-256 fingerprint of the plain key of `value` (a public key line; a certificate's own
/// key when it is one), for `key:`, `sha1:` and `sha256:`.
fn plain_key(value: &str) -> Result<Fingerprint, String> {
    if is_certificate(value) {
        let cert = Certificate::from_openssh(value).map_err(|e| format!("not a readable certificate ({e})"))?;
        return Ok(cert.public_key().fingerprint(HashAlg::Sha256));
    }
    let key = PublicKey::from_openssh(value).map_err(|e| format!("not an OpenSSH public key line ({e})"))?;
    Ok(key.fingerprint(HashAlg::Sha256))
}

/// `SHA256:<base64>` (the prefix in that case, `=` padding optional, as `ssh-keygen -k`).
fn parse_hash(value: &str) -> Result<Fingerprint, String> {
    if !value.starts_with("SHA256:") {
        return Err(format!(
            "hash {value:?}: only SHA256:<base64> fingerprints (ssh-keygen -l -E sha256)"
        ));
    }
    value
        .trim_end_matches('=')
        .parse()
        .map_err(|e| format!("hash {value:?} is not SHA256:<base64 of 32 bytes> ({e})"))
}

/// `N` or `N-M` as `ssh-keygen -k` reads them (strtoull, base 0: decimal, `0x` hexadecimal, a
/// leading `0` octal); N ≥ 1, M > N. Returned as an inclusive range.
fn parse_serials(value: &str) -> Result<(u64, u64), String> {
    let (a, rest) = serial_number(value)?;
    let b = match rest.strip_prefix('-') {
        None if rest.is_empty() => a,
        None => return Err(format!("invalid serial {value:?}")),
        Some(second) => {
            let (b, rest) = serial_number(second)?;
            if !rest.is_empty() {
                return Err(format!("invalid serial {value:?}"));
            }
            if b <= a {
                return Err(format!(
                    "invalid serial range {value:?}: the end must be above the start ({a}-{b})"
                ));
            }
            b
        }
    };
    if a == 0 {
        return Err(format!(
            "serial {value:?}: serial 0 cannot be revoked by serial (a certificate of serial 0 is revoked by its key id)"
        ));
    }
    Ok((a, b))
}

/// One number as C's `strtoull(s, &end, 0)` reads it (leading white space, `+`, base prefix); the
/// rest of the text after it. A `-` sign (which strtoull would wrap around) is refused.
fn serial_number(s: &str) -> Result<(u64, &str), String> {
    let t = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let t = t.strip_prefix('+').unwrap_or(t);
    if t.starts_with('-') {
        return Err(format!("invalid serial {s:?}: serials are not negative"));
    }
    let hex = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .filter(|h| h.starts_with(|c: char| c.is_ascii_hexdigit()));
    let (digits, radix) = match hex {
        Some(h) => (h, 16),
        None if t.starts_with('0') => (t, 8),
        None => (t, 10),
    };
    let len = digits.find(|c: char| !c.is_digit(radix)).unwrap_or(digits.len());
    if len == 0 {
        return Err(format!("invalid serial {s:?}"));
    }
    let n = u64::from_str_radix(&digits[..len], radix).map_err(|_| format!("serial {s:?} is out of range"))?;
    Ok((n, &digits[len..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{cert, fixture, seed_signer};

    /// OpenSSH's own verdicts (`ssh-keygen -k -s none` then `ssh-keygen -Q`, written by
    /// scripts/gen-cert-fixtures) match ours, for every certificate (of every CA type) and every
    /// host key. `-s none` is OpenSSH's wildcard CA: serials and ids apply to every CA, as in
    /// MEM-4; so the verdicts agree everywhere (`-s ca.pub` would bind serial 42 to the ed25519
    /// CA, and a-ecdsa384, serial 42 of the P-384 CA, would be "ok" there: [C-21] 6).
    #[test]
    fn the_krl_agrees_with_openssh() {
        let expected = fixture("expected-revoked.txt");
        let mut checked = std::collections::BTreeMap::<&str, usize>::new();
        for line in expected.lines() {
            let mut w = line.split_whitespace();
            let (spec, file, verdict) = (
                w.next().expect("spec"),
                w.next().expect("file"),
                w.next().expect("verdict"),
            );
            let krl = Krl::parse(&fixture(spec)).unwrap_or_else(|e| panic!("{spec}: {e}"));
            let revoked = match file.strip_suffix("-cert.pub") {
                Some(name) => krl.revokes(cert(name).names()).is_some(),
                None => {
                    let host = file.strip_suffix(".pub").expect("a host key");
                    krl.revokes_ed25519(&seed_signer(host).verifying_key()).is_some()
                }
            };
            let ours = if revoked { "revoked" } else { "ok" };
            assert_eq!(ours, verdict, "{spec} {file}");
            *checked.entry(spec).or_default() += 1;
        }
        assert_eq!(checked.len(), 5, "{checked:?}");
        assert!(checked.values().all(|n| *n >= 20), "{checked:?}");
    }

    #[test]
    fn each_kind_of_line_revokes() {
        let krl = Krl::parse(&fixture("krl.txt")).expect("parses");
        assert_eq!(
            krl.revokes(cert("a-serial").names()),
            Some("serial 205 in 200-210, line 4".into()),
            "the line is named"
        );
        assert_eq!(
            krl.revokes(cert("a-id").names()),
            Some("id \"revoke-me\", line 5".into())
        );
        assert!(
            krl.revokes(cert("c").names())
                .is_some_and(|w| w.starts_with("key SHA256:"))
        );
        assert!(krl.revokes(cert("b").names()).is_some(), "by hash");
        assert_eq!(krl.revokes(cert("a").names()), None);
        assert_eq!(
            krl.revokes(cert("a-ecdsa384").names()),
            Some("serial 42, line 3".into()),
            "serials apply to every CA"
        );
        let by_ca = Krl::parse(&fixture("krl-ca.txt")).expect("parses");
        assert!(
            by_ca
                .revokes(cert("a-other-ca").names())
                .is_some_and(|w| w.starts_with("its CA"))
        );
        let a = seed_signer("a").verifying_key();
        assert_eq!(krl.revokes_ed25519(&a), None);
        let by_key = Krl::parse(&format!("key: {}", fixture("a.pub"))).expect("parses");
        assert!(by_key.revokes_ed25519(&a).is_some(), "a plain (peers-file) key");
        // A certificate alone: that certificate (its CA's serial), not another CA's serial 11.
        let by_cert = Krl::parse(&fixture("a-cert.pub")).expect("parses");
        assert_eq!(
            by_cert
                .revokes(cert("a").names())
                .map(|w| w.starts_with("serial 11 of CA")),
            Some(true)
        );
        assert_eq!(by_cert.revokes(cert("a-other-ca").names()), None);
        assert_eq!(by_cert.revokes_ed25519(&a), None, "not its key");
        // `key:` given a certificate revokes the certificate's key (as OpenSSH does).
        let by_cert_key = Krl::parse(&format!("key: {}", fixture("a-cert.pub"))).expect("parses");
        assert!(by_cert_key.revokes_ed25519(&a).is_some());
        assert!(by_cert_key.revokes(cert("a-other-ca").names()).is_some());
    }

    #[test]
    fn comments_end_lines_and_numbers_read_as_strtoull() {
        let serials = |t: &str| {
            Krl::parse(t)
                .map(|k| k.serials.iter().map(|(a, b, _)| (*a, *b)).collect::<Vec<_>>())
                .map_err(|e| e.line)
        };
        assert_eq!(serials("serial: 5  # retired\n"), Ok(vec![(5, 5)]));
        assert_eq!(serials("serial: 5# retired\n"), Ok(vec![(5, 5)]));
        assert_eq!(serials("  # indented\n\t SERIAL:\t0x10 \t\n"), Ok(vec![(16, 16)]));
        assert_eq!(serials("Serial: 0X10-0x1f\n"), Ok(vec![(16, 31)]));
        assert_eq!(serials("serial: 010\n"), Ok(vec![(8, 8)]), "octal, as strtoull");
        assert_eq!(serials("serial: +5\n"), Ok(vec![(5, 5)]));
        assert_eq!(serials("serial: 5- 10\n"), Ok(vec![(5, 10)]));
        assert_eq!(
            serials("serial:5\r\nserial: 6\r\n"),
            Ok(vec![(5, 5), (6, 6)]),
            "CRLF taken"
        );
        assert_eq!(
            serials("serial: 18446744073709551615\n"),
            Ok(vec![(u64::MAX, u64::MAX)])
        );
        let ids = |t: &str| Krl::parse(t).map(|k| k.ids.into_keys().collect::<Vec<_>>());
        assert_eq!(ids("id: a key id  # with blanks\n"), Ok(vec!["a key id".to_string()]));
        assert_eq!(ids("ID:x#y\n"), Ok(vec!["x".to_string()]));
        assert_eq!(ids("id:\n"), Ok(vec![String::new()]), "the empty key id, as OpenSSH");
    }

    #[test]
    fn the_older_sha1_and_sha256_forms_revoke_the_key() {
        let b = seed_signer("b").verifying_key();
        for form in ["sha1:", "SHA256:", "key:"] {
            for given in ["b.pub", "b-cert.pub", "b-rsa-cert.pub"] {
                let krl = Krl::parse(&format!("{form} {}", fixture(given))).expect("parses");
                assert!(krl.revokes_ed25519(&b).is_some(), "{form} {given}");
                assert!(krl.revokes(cert("a-rotated").names()).is_some(), "{form} {given}");
                assert_eq!(krl.revokes(cert("a").names()), None, "{form} {given}");
            }
        }
    }

    #[test]
    fn bad_lines_are_named() {
        let line = |t: &str| Krl::parse(t).map(|_| ()).map_err(|e| e.line);
        assert_eq!(line("# ok\n\nserial: 1\nserial: 5-3\n"), Err(4));
        assert_eq!(line("serial: 5-5\n"), Err(1), "ssh-keygen: invalid serial range");
        assert_eq!(line("serial: 0\n"), Err(1), "ssh-keygen: revoke serial failed");
        assert_eq!(line("serial: 0-5\n"), Err(1));
        assert_eq!(line("serial: x\n"), Err(1));
        assert_eq!(line("serial: 1-\n"), Err(1));
        assert_eq!(line("serial: 5 -10\n"), Err(1));
        assert_eq!(line("serial: 08\n"), Err(1), "8 is no octal digit");
        assert_eq!(line("serial: -5\n"), Err(1));
        assert_eq!(line("serial: 99999999999999999999\n"), Err(1));
        assert_eq!(line("serial : 5\n"), Err(1), "ssh-keygen reads it as a key: invalid");
        assert_eq!(line("id: a\nrevoke everything\n"), Err(2));
        assert_eq!(line("sha1: abc\n"), Err(1));
        assert_eq!(line("hash: MD5:abc\n"), Err(1));
        assert_eq!(line("hash: sha256:abc\n"), Err(1), "the prefix is case-sensitive");
        assert_eq!(line("hash: SHA256:!!\n"), Err(1));
        assert_eq!(line("key: ssh-ed25519 AAAA\n"), Err(1));
        assert_eq!(line("SERIAL: 0x10\nId: x\n"), Ok(()));
        assert_eq!(line(""), Ok(()));
        let e = Krl::parse("serial: 7\ngarbage\n").expect_err("garbage");
        assert!(e.reason.contains("not a KRL line"), "{e}");
    }

    #[test]
    fn a_hash_may_carry_its_padding() {
        let text = fixture("krl.txt");
        let hash = text.lines().find(|l| l.starts_with("hash:")).expect("a hash line");
        let krl = Krl::parse(&format!("{hash}=\n")).expect("padded");
        assert!(krl.revokes(cert("b").names()).is_some());
    }
}
