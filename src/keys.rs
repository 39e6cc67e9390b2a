//! Host keys as the suite holds them: ed25519 seeds, the peers file, the key file.
//!
//! The suite mints every gateway's key itself and writes the files of the runtime contract
//! (SPEC §15), so it also holds keys of its own — a trusted "probe" host and untrusted hosts —
//! with which the wire probe signs crafted messages. This is the suite's own ed25519 use; it shares
//! no code with any gateway.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signer as _, SigningKey};

/// One host's key pair.
#[derive(Clone)]
pub struct HostKey {
    pub host: String,
    key: SigningKey,
}

impl HostKey {
    /// A fresh random key for `host`.
    pub fn generate(host: &str) -> HostKey {
        // 32 random bytes from two v4 UUIDs (OS randomness), no rand-version coupling.
        let mut seed = [0u8; 32];
        seed[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        seed[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        HostKey {
            host: host.to_string(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    pub fn from_seed(host: &str, seed: [u8; 32]) -> HostKey {
        HostKey {
            host: host.to_string(),
            key: SigningKey::from_bytes(&seed),
        }
    }

    /// base64 of the 32-byte seed: the key file's content.
    pub fn seed_base64(&self) -> String {
        B64.encode(self.key.to_bytes())
    }

    /// base64 of the 32-byte public key: the peers file's value.
    pub fn public_base64(&self) -> String {
        B64.encode(self.key.verifying_key().to_bytes())
    }

    /// The 32 raw bytes of the public key (the OpenSSH public key line of SPEC §18 wraps them).
    pub fn public_bytes(&self) -> [u8; 32] {
        self.key.verifying_key().to_bytes()
    }

    /// A standard, padded base64 signature over `input`.
    pub fn sign_base64(&self, input: &[u8]) -> String {
        B64.encode(self.key.sign(input).to_bytes())
    }

    /// Writes the key file (mode 0600).
    pub fn write_key_file(&self, path: &Path) -> std::io::Result<()> {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        writeln!(f, "{}", self.seed_base64())
    }
}

/// Writes a peers file: TOML `[peers] <host> = "<base64 public key>"`.
pub fn write_peers_file(path: &Path, keys: &BTreeMap<String, HostKey>) -> std::io::Result<()> {
    let mut text = String::from("[peers]\n");
    for (host, k) in keys {
        text.push_str(&format!("{host:?} = \"{}\"\n", k.public_base64()));
    }
    std::fs::write(path, text)
}
