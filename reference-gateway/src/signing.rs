//! Signing and the key ring of SPEC §3: the signing input, ed25519 signatures, pinned peer keys.
//!
//! The signing input is a byte string built from the signed headers in a fixed order plus the body
//! exactly as sent, so no JSON canonicalisation is ever in the security path. The peers file pins
//! each host's public key: it is the trust root, and `host` in an envelope names the key.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use crate::envelope::{Envelope, SIGNED_HEADERS};

/// A key or key-file problem.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot read {what} {path}: {source}")]
    Read {
        what: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{what} {path}: {reason}")]
    Invalid {
        what: &'static str,
        path: String,
        reason: String,
    },
}

/// The SPEC §3.2 signing input for `env` and `body`.
pub fn signing_input(env: &Envelope, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(b"fleet-envelope-v1\n");
    for name in SIGNED_HEADERS {
        out.extend_from_slice(name.as_bytes());
        out.push(b'=');
        out.extend_from_slice(env.signed_value(name).as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    out.extend_from_slice(body);
    out
}

/// This gateway's signing key.
pub struct Signer {
    key: SigningKey,
}

impl std::fmt::Debug for Signer {
    /// The public half only: a secret never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Signer({})", self.public_base64())
    }
}

impl Signer {
    pub fn from_seed(seed: [u8; 32]) -> Signer {
        Signer {
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// Reads the key file: base64 of the 32-byte seed (SPEC §15).
    pub fn from_file(path: &Path) -> Result<Signer, KeyError> {
        let what = "signing key file (FLEET_SIGNING_KEY_FILE)";
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            what,
            path: path.display().to_string(),
            source,
        })?;
        let seed = decode_key(text.trim()).map_err(|reason| KeyError::Invalid {
            what,
            path: path.display().to_string(),
            reason,
        })?;
        Ok(Signer::from_seed(seed))
    }

    /// A fresh random key (for `keygen`).
    pub fn generate() -> Result<Signer, getrandom::Error> {
        let mut seed = [0u8; 32];
        getrandom::fill(&mut seed)?;
        Ok(Signer::from_seed(seed))
    }

    pub fn seed_base64(&self) -> String {
        B64.encode(self.key.to_bytes())
    }

    pub fn public_base64(&self) -> String {
        B64.encode(self.key.verifying_key().to_bytes())
    }

    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }

    /// Signs `env` + `body` and stores the signature in `env.sig` (SIG-1).
    pub fn sign(&self, env: &mut Envelope, body: &[u8]) {
        let sig: Signature = self.key.sign(&signing_input(env, body));
        env.sig = B64.encode(sig.to_bytes());
    }
}

/// Why a signature did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SigError {
    #[error("host {0:?} is not a known peer")]
    UnknownHost(String),
    #[error("signature is not valid base64 of 64 bytes")]
    Malformed,
    #[error("signature does not verify under the key of host {0:?}")]
    BadSignature(String),
}

/// The pinned public keys of all peers (SPEC §3.1, [C-4]).
#[derive(Clone, Default)]
pub struct Keyring {
    keys: BTreeMap<String, VerifyingKey>,
}

impl Keyring {
    /// Reads the peers file: TOML `[peers] <host> = "<base64 public key>"`.
    pub fn from_file(path: &Path) -> Result<Keyring, KeyError> {
        let what = "peers file (FLEET_PEERS_FILE)";
        let p = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
            what,
            path: p.clone(),
            source,
        })?;
        Self::from_toml(&text).map_err(|reason| KeyError::Invalid { what, path: p, reason })
    }

    pub fn from_toml(text: &str) -> Result<Keyring, String> {
        let table: toml::Table = text.parse().map_err(|e: toml::de::Error| e.to_string())?;
        let peers = table
            .get("peers")
            .and_then(|v| v.as_table())
            .ok_or("has no [peers] table")?;
        let mut keys = BTreeMap::new();
        for (host, v) in peers {
            let s = v.as_str().ok_or(format!("peer {host:?}: key must be a string"))?;
            let bytes = decode_key(s).map_err(|e| format!("peer {host:?}: {e}"))?;
            let key = VerifyingKey::from_bytes(&bytes)
                .map_err(|e| format!("peer {host:?}: not an ed25519 public key ({e})"))?;
            keys.insert(host.clone(), key);
        }
        Ok(Keyring { keys })
    }

    pub fn insert(&mut self, host: &str, key: VerifyingKey) {
        self.keys.insert(host.to_string(), key);
    }

    pub fn contains(&self, host: &str) -> bool {
        self.keys.contains_key(host)
    }

    /// SIG-2 step 1: `host` is a known peer and `sig` verifies under its key.
    pub fn verify(&self, env: &Envelope, body: &[u8]) -> Result<(), SigError> {
        let key = self
            .keys
            .get(&env.host)
            .ok_or_else(|| SigError::UnknownHost(env.host.clone()))?;
        let raw = B64.decode(env.sig.as_bytes()).map_err(|_| SigError::Malformed)?;
        let bytes: [u8; 64] = raw.try_into().map_err(|_| SigError::Malformed)?;
        let sig = Signature::from_bytes(&bytes);
        key.verify_strict(&signing_input(env, body), &sig)
            .map_err(|_| SigError::BadSignature(env.host.clone()))
    }
}

fn decode_key(s: &str) -> Result<[u8; 32], String> {
    let raw = B64
        .decode(s.trim().as_bytes())
        .map_err(|e| format!("not base64 ({e})"))?;
    let len = raw.len();
    raw.try_into()
        .map_err(|_| format!("decodes to {len} bytes, expected 32"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Kind;

    fn env() -> Envelope {
        Envelope {
            v: "1".into(),
            kind: Kind::Send,
            msg_id: "0b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            trace_id: "1b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            from: "2b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            to: "3b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            host: "a".into(),
            turn_id: None,
            spawn_id: None,
            corr_id: None,
            ts: 1,
            expires_at: 2,
            sig: String::new(),
        }
    }

    #[test]
    fn signing_input_has_every_header_in_order_and_the_body() {
        let input = signing_input(&env(), b"hi\n\nthere");
        let text = String::from_utf8(input).expect("utf8");
        assert!(text.starts_with("fleet-envelope-v1\nv=1\nkind=SEND\nmsgId="));
        assert!(text.contains("\nturnId=\nspawnId=\ncorrId=\nts=1\nexpiresAt=2\n\nhi\n\nthere"));
    }

    #[test]
    fn a_signature_verifies_only_unchanged() {
        let signer = Signer::from_seed([7u8; 32]);
        let mut ring = Keyring::default();
        ring.insert("a", signer.verifying_key());
        let mut e = env();
        signer.sign(&mut e, b"body");
        assert_eq!(ring.verify(&e, b"body"), Ok(()));
        assert!(matches!(ring.verify(&e, b"bodY"), Err(SigError::BadSignature(_))));
        let mut other = e.clone();
        other.to = "4b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into();
        assert!(ring.verify(&other, b"body").is_err());
        let mut foreign = e.clone();
        foreign.host = "zz".into();
        assert!(matches!(ring.verify(&foreign, b"body"), Err(SigError::UnknownHost(_))));
    }

    #[test]
    fn peers_file_parses() {
        let signer = Signer::from_seed([1u8; 32]);
        let ring = Keyring::from_toml(&format!("[peers]\na = \"{}\"\n", signer.public_base64())).expect("parses");
        assert!(ring.contains("a"));
        assert!(Keyring::from_toml("[peers]\na = \"AAAA\"\n").is_err());
    }
}
