//! The fleet's CA keys (MEM-2): `FLEET_TRUST_CA_FILE`, one OpenSSH public key a line
//! (`ssh-ed25519 AAAA… comment`, the `.pub` of `ssh-keygen`), `#` comments and blank lines allowed.
//!
//! A certificate chains to a CA when its signature key's SHA-256 fingerprint is in this set; a
//! removed line stops trusting every certificate of that CA at the next reload.
//!
//! Which lines ([C-21] 10): a CA of every type OpenSSH signs host certificates with is taken —
//! `ssh-ed25519`, `ecdsa-sha2-nistp256`/`-nistp384`/`-nistp521`, `ssh-rsa` (1024 to 8192 bits,
//! what the RSA verifier takes). A well-formed public key of another type (`ssh-dss`, FIDO `sk-…`,
//! an algorithm unknown here) is *skipped*: [`CaSet::skipped`] names its line, the start and the
//! reload WARN about it ([`CaSet::warn_skipped`]), the other lines stay in force — an operator's
//! old CA list is not refused whole for one line. A line that is no public key at all (garbage, a
//! certificate) refuses the file (MEM-1), and so do the forms operators paste from elsewhere — a
//! known_hosts `@cert-authority <hosts> <key>` line, an authorized_keys `cert-authority <key>`
//! line — with an error saying which form this file wants: SPEC says the line is a public key.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use ssh_key::public::KeyData;
use ssh_key::{Fingerprint, HashAlg, PublicKey};

use super::files::{LineError, TrustFile, meaningful_lines};

/// The trusted CA keys, by SHA-256 fingerprint (the value is the key's comment, for people), and
/// the lines skipped for a key type the gateway does not take.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaSet {
    cas: BTreeMap<Fingerprint, String>,
    skipped: Vec<LineError>,
}

/// The RSA modulus sizes the verifier takes (bits; OpenSSH itself refuses below 1024).
pub const RSA_BITS: std::ops::RangeInclusive<u32> = 1024..=8192;

/// The key types of the CAs the gateway takes, as their lines name them ([C-21] 10).
const TAKEN: [&str; 5] = [
    "ssh-ed25519",
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-rsa",
];

/// What the error of a pasted line says the file wants.
const WANTED: &str =
    "FLEET_TRUST_CA_FILE wants the CA's public key line alone (the .pub file: ssh-ed25519 AAAA… comment)";

impl CaSet {
    /// Parses the CA file's text; the first line that is not a public key is the error, a line
    /// of a key type the gateway does not take is kept in [`CaSet::skipped`].
    pub fn parse(text: &str) -> Result<CaSet, LineError> {
        let mut set = CaSet::default();
        for (n, line) in meaningful_lines(text) {
            if let Some(form) = pasted_form(line) {
                return Err(LineError::new(n, format!("{form}; {WANTED}")));
            }
            let alg = line.split_whitespace().next().unwrap_or_default();
            if alg.ends_with("-cert-v01@openssh.com") {
                return Err(LineError::new(
                    n,
                    format!("a certificate ({alg}) is not a CA key; {WANTED}"),
                ));
            }
            let key = match PublicKey::from_openssh(line) {
                Ok(key) => key,
                // [C-27] 1: a type the gateway takes whose key does not parse is damaged (cut,
                // a wrong length), never a line to skip: skipping it would drop a CA silently.
                Err(e) if TAKEN.contains(&alg) => {
                    return Err(LineError::new(
                        n,
                        format!("a {alg} key that does not parse, damaged or cut ({e}); {WANTED}"),
                    ));
                }
                Err(_) if is_wire_key(line) => {
                    set.skipped.push(LineError::new(n, not_taken(alg)));
                    continue;
                }
                Err(e) => {
                    return Err(LineError::new(n, format!("not an OpenSSH public key line ({e})")));
                }
            };
            if key.key_data().is_certificate() {
                return Err(LineError::new(n, format!("a certificate is not a CA key; {WANTED}")));
            }
            match ca_type_taken(key.key_data()) {
                Ok(()) => {
                    set.cas
                        .insert(key.fingerprint(HashAlg::Sha256), key.comment().to_string());
                }
                Err(why) => set.skipped.push(LineError::new(n, why)),
            }
        }
        Ok(set)
    }

    pub fn trusts(&self, ca: &Fingerprint) -> bool {
        self.cas.contains_key(ca)
    }

    pub fn len(&self) -> usize {
        self.cas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.cas.is_empty()
    }

    /// The lines left out for a key type the gateway does not take ([C-21] 10), in file order.
    pub fn skipped(&self) -> &[LineError] {
        &self.skipped
    }

    /// One WARN per skipped line, naming the variable, the path and the line (the start and the
    /// reload both call it, once per content read).
    pub fn warn_skipped(&self, path: &Path) {
        let var = TrustFile::TrustCa.var();
        for e in &self.skipped {
            tracing::warn!(
                file = var,
                path = %path.display(),
                line = e.line,
                "{var} {}: line {}: {}; this line is skipped, the file's other CA keys are in force",
                path.display(),
                e.line,
                e.reason
            );
        }
    }
}

/// Whether certificates signed by a CA of this key are verified here ([C-21] 10); if not, why
/// (the words of a skipped line, and of a certificate from such a CA).
pub fn ca_type_taken(key: &KeyData) -> Result<(), String> {
    match key {
        KeyData::Ed25519(_) | KeyData::Ecdsa(_) => Ok(()),
        KeyData::Rsa(rsa) if RSA_BITS.contains(&rsa.key_size()) => Ok(()),
        KeyData::Rsa(rsa) => Err(format!(
            "an RSA key of {} bits: the gateway verifies RSA CAs of {} to {} bits",
            rsa.key_size(),
            RSA_BITS.start(),
            RSA_BITS.end()
        )),
        other => Err(not_taken(other.algorithm().as_str())),
    }
}

fn not_taken(alg: &str) -> String {
    format!("a {alg} key, not a CA type the gateway takes ({})", TAKEN.join(", "))
}

/// Whether `line` is `<type> <base64> [comment]` whose blob begins with that type's name: a
/// well-formed OpenSSH public key of a type `ssh-key` does not know.
fn is_wire_key(line: &str) -> bool {
    let mut words = line.split_whitespace();
    let (Some(alg), Some(b64)) = (words.next(), words.next()) else {
        return false;
    };
    let Ok(blob) = base64::engine::general_purpose::STANDARD.decode(b64) else {
        return false;
    };
    let Some((len, rest)) = blob.split_first_chunk::<4>() else {
        return false;
    };
    let len = u32::from_be_bytes(*len) as usize;
    rest.get(..len) == Some(alg.as_bytes())
}

/// The known_hosts / authorized_keys forms of a CA line, which this file does not take.
fn pasted_form(line: &str) -> Option<String> {
    let first = line.split_whitespace().next()?;
    if first.eq_ignore_ascii_case("@cert-authority") {
        return Some("this is the known_hosts form (@cert-authority <hosts> <key>)".into());
    }
    if first.eq_ignore_ascii_case("@revoked") {
        return Some(
            "this is a known_hosts @revoked line (revocations go in FLEET_REVOKED_FILE as key: <public key>)".into(),
        );
    }
    if first.starts_with('@') {
        return Some(format!("this is a known_hosts marker line ({first} <hosts> <key>)"));
    }
    if first
        .get(..14)
        .is_some_and(|w| w.eq_ignore_ascii_case("cert-authority"))
    {
        return Some("this is the authorized_keys form (cert-authority[,<options>] <key>)".into());
    }
    // `<hosts> <key>` or `<options> <key>`: a key of a known shape after the first word.
    let rest = line.trim_start().get(first.len()..).unwrap_or_default().trim_start();
    if !is_wire_key(line) && is_wire_key(rest) {
        return Some(format!(
            "{first:?} stands before the key: a known_hosts (<hosts> <key>) or authorized_keys \
             (<options> <key>) line"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{cert, fixture};

    #[test]
    fn the_fixture_trusts_its_ca_only() {
        let cas = CaSet::parse(&fixture("trust-ca.txt")).expect("parses");
        assert_eq!(cas.len(), 1);
        assert!(cas.skipped().is_empty());
        assert!(cas.trusts(&cert("a").ca_fingerprint));
        assert!(!cas.trusts(&cert("a-other-ca").ca_fingerprint));
        let both = CaSet::parse(&format!("{}{}", fixture("ca.pub"), fixture("ca2.pub"))).expect("parses");
        assert!(both.trusts(&cert("a-other-ca").ca_fingerprint));
    }

    #[test]
    fn every_ca_type_openssh_signs_host_certificates_with_is_taken() {
        let cas = CaSet::parse(&fixture("trust-ca-all.txt")).expect("parses");
        assert_eq!((cas.len(), cas.skipped()), (5, &[][..]));
        for name in ["a", "a-ecdsa256", "a-ecdsa384", "a-ecdsa521", "a-rsa", "a-rsa-sha256"] {
            assert!(cas.trusts(&cert(name).ca_fingerprint), "{name}");
        }
    }

    #[test]
    fn a_line_of_a_type_not_taken_is_skipped_and_named() {
        let cas = CaSet::parse(&fixture("trust-ca-mixed.txt")).expect("the other lines are in force");
        assert_eq!(cas.len(), 2, "ed25519 and RSA");
        assert!(cas.trusts(&cert("a").ca_fingerprint) && cas.trusts(&cert("a-rsa").ca_fingerprint));
        let lines: Vec<usize> = cas.skipped().iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 7]);
        let words: Vec<&str> = cas.skipped().iter().map(|e| e.reason.as_str()).collect();
        for (said, alg) in words.iter().zip([
            "ssh-dss",
            "sk-ssh-ed25519@openssh.com",
            "x-new-algorithm",
            "ssh-xmss@openssh.com",
        ]) {
            assert!(said.contains(alg) && said.contains("not a CA type"), "{said}");
        }
    }

    #[test]
    fn a_bad_line_is_named() {
        let text = format!("# CAs\n\n{}ssh-ed25519 AAAAnope\n", fixture("ca.pub"));
        assert_eq!(CaSet::parse(&text).map_err(|e| e.line), Err(4));
        assert_eq!(CaSet::parse(&fixture("a-cert.pub")).map_err(|e| e.line), Err(1));
        assert_eq!(CaSet::parse(&fixture("a-rsa-cert.pub")).map_err(|e| e.line), Err(1));
        assert_eq!(CaSet::parse("garbage here\n").map_err(|e| e.line), Err(1));
        assert_eq!(CaSet::parse("").map(|c| c.is_empty()), Ok(true));
    }

    /// [C-27] 1: a CA line of every taken type cut at a multiple of 4 base64 characters (the
    /// rest still decodes) or of a wrong length refuses the file, naming the line.
    #[test]
    fn a_damaged_line_of_a_taken_type_refuses_the_file() {
        let all = fixture("trust-ca-all.txt");
        let lines: Vec<&str> = all
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .collect();
        assert_eq!(lines.len(), 5);
        for line in lines {
            let mut words = line.split_whitespace();
            let (alg, b64) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
            for cut in [4, 8, b64.len() / 2 / 4 * 4] {
                let damaged = format!("{alg} {}", &b64[..b64.len() - cut]);
                let text = format!("# CAs\n{}{damaged} cut\n", fixture("ca.pub"));
                let e = CaSet::parse(&text).expect_err(&damaged);
                assert_eq!(e.line, 3, "{alg} cut by {cut}: {e}");
                assert!(e.reason.contains(alg) && e.reason.contains("does not parse"), "{e}");
            }
        }
        // Grown, not cut: an ed25519 key of 33 bytes.
        let blob = [
            &11u32.to_be_bytes()[..],
            b"ssh-ed25519",
            &33u32.to_be_bytes(),
            &[7u8; 33],
        ]
        .concat();
        let line = format!("ssh-ed25519 {}", base64::engine::general_purpose::STANDARD.encode(blob));
        assert_eq!(CaSet::parse(&line).map_err(|e| e.line), Err(1));
    }

    #[test]
    fn pasted_known_hosts_and_authorized_keys_forms_say_what_is_wanted() {
        let ca = fixture("ca.pub");
        let ca = ca.trim();
        for (line, form) in [
            (
                format!("@cert-authority * {ca}"),
                "known_hosts form (@cert-authority <hosts> <key>)",
            ),
            (format!("@cert-authority *.fleet,10.0.0.* {ca}"), "known_hosts form"),
            (format!("@revoked * {ca}"), "@revoked"),
            (
                format!("cert-authority {ca}"),
                "authorized_keys form (cert-authority[,<options>] <key>)",
            ),
            (format!("cert-authority,principals=\"x\" {ca}"), "authorized_keys form"),
            (format!("host1,host2 {ca}"), "known_hosts (<hosts> <key>)"),
            (format!("restrict {}", fixture("ca-rsa.pub").trim()), "authorized_keys"),
        ] {
            let text = format!("# CAs\n{ca}\n{line}\n");
            let e = CaSet::parse(&text).expect_err(&line);
            assert_eq!(e.line, 3, "{e}");
            assert!(e.reason.contains(form), "{line}: {e}");
            assert!(
                e.reason
                    .contains("FLEET_TRUST_CA_FILE wants the CA's public key line alone"),
                "{e}"
            );
        }
    }

    #[test]
    fn skipped_lines_are_logged_one_warn_each() {
        // The WARN itself is tracing output; that it runs and names each line is what the
        // start and the reload rely on.
        let cas = CaSet::parse(&fixture("trust-ca-mixed.txt")).expect("parses");
        cas.warn_skipped(Path::new("/etc/fleet/ca.txt"));
        assert_eq!(cas.skipped().len(), 4);
    }
}
