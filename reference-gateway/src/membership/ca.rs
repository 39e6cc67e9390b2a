//! The fleet's CA keys (MEM-2): `FLEET_TRUST_CA_FILE`, one OpenSSH public key a line
//! (`ssh-ed25519 AAAA… comment`, the `.pub` of `ssh-keygen -t ed25519`), `#` comments and blank
//! lines allowed.
//!
//! A certificate chains to a CA when its signature key's SHA-256 fingerprint is in this set; a
//! removed line stops trusting every certificate of that CA at the next reload.

use std::collections::BTreeMap;

use ssh_key::{Fingerprint, HashAlg, PublicKey};

use super::files::{LineError, meaningful_lines};

/// The trusted CA keys, by SHA-256 fingerprint (the value is the key's comment, for people).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CaSet {
    cas: BTreeMap<Fingerprint, String>,
}

impl CaSet {
    /// Parses the CA file's text; the first line that is not a public key is the error.
    pub fn parse(text: &str) -> Result<CaSet, LineError> {
        let mut cas = BTreeMap::new();
        for (n, line) in meaningful_lines(text) {
            let key = PublicKey::from_openssh(line)
                .map_err(|e| LineError::new(n, format!("not an OpenSSH public key line ({e})")))?;
            if key.key_data().is_certificate() {
                return Err(LineError::new(n, "a certificate is not a CA key"));
            }
            cas.insert(key.fingerprint(HashAlg::Sha256), key.comment().to_string());
        }
        Ok(CaSet { cas })
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{cert, fixture};

    #[test]
    fn the_fixture_trusts_its_ca_only() {
        let cas = CaSet::parse(&fixture("trust-ca.txt")).expect("parses");
        assert_eq!(cas.len(), 1);
        assert!(cas.trusts(&cert("a").ca_fingerprint));
        assert!(!cas.trusts(&cert("a-other-ca").ca_fingerprint));
        let both = CaSet::parse(&format!("{}{}", fixture("ca.pub"), fixture("ca2.pub"))).expect("parses");
        assert!(both.trusts(&cert("a-other-ca").ca_fingerprint));
    }

    #[test]
    fn a_bad_line_is_named() {
        let text = format!("# CAs\n\n{}ssh-ed25519 AAAAnope\n", fixture("ca.pub"));
        assert_eq!(CaSet::parse(&text).map_err(|e| e.line), Err(4));
        assert_eq!(CaSet::parse(&fixture("a-cert.pub")).map_err(|e| e.line), Err(1));
        assert_eq!(CaSet::parse("").map(|c| c.is_empty()), Ok(true));
    }
}
