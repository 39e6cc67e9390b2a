//! A suite host key in OpenSSH's public key form, and fingerprints as `ssh-keygen -l` prints them.
//!
//! Why: a gateway's signing key is the seed file of SPEC §15; `ssh-keygen` signs a certificate
//! over its OpenSSH public key line (`ssh-ed25519 AAAA…`, RFC 8709: the string `ssh-ed25519` and
//! the 32 raw bytes, each length-prefixed, in base64). The suite writes that line from its own
//! [`HostKey`] here; the rest is `ssh-keygen`'s.

use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use super::{CredentialError, io, run};
use crate::keys::HostKey;

/// The key type name of an ed25519 public key (RFC 8709).
pub const ED25519: &str = "ssh-ed25519";

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u32).to_be_bytes());
    out.extend_from_slice(s);
}

/// The OpenSSH public key line of a raw ed25519 public key: `ssh-ed25519 <base64> <comment>`.
pub fn public_key_line(raw: &[u8; 32], comment: &str) -> String {
    let mut blob = Vec::with_capacity(51);
    put_string(&mut blob, ED25519.as_bytes());
    put_string(&mut blob, raw);
    let line = format!("{ED25519} {}", B64.encode(blob));
    if comment.is_empty() {
        line
    } else {
        format!("{line} {comment}")
    }
}

/// `key`'s OpenSSH public key line, commented with its host id.
pub fn host_key_line(key: &HostKey) -> String {
    public_key_line(&key.public_bytes(), &key.host)
}

/// Writes `key`'s public key line to `path` (which must end in `.pub` for `ssh-keygen -s`).
pub fn write_public_key(key: &HostKey, path: &Path) -> Result<(), CredentialError> {
    std::fs::write(path, format!("{}\n", host_key_line(key))).map_err(io("cannot write", path))
}

/// The SHA256 fingerprint of the key (or certificate) in `path`, as `ssh-keygen -lf` prints it:
/// `SHA256:<base64, unpadded>` — the form a KRL's `hash:` line takes (SPEC MEM-4).
pub fn fingerprint(path: &Path) -> Result<String, CredentialError> {
    let out = run([std::ffi::OsStr::new("-l"), "-f".as_ref(), path.as_os_str()])?;
    out.split_whitespace()
        .nth(1)
        .filter(|f| f.starts_with("SHA256:"))
        .map(str::to_string)
        .ok_or_else(|| CredentialError::Unexpected {
            what: format!("fingerprint of {}", path.display()),
            found: out.clone(),
        })
}

/// The fields of an OpenSSH ed25519 certificate line that a scenario reads back: the certified
/// key and whether it is a host certificate. (The suite never judges a certificate by this; it
/// checks what `ssh-keygen` made.)
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFields {
    pub key: [u8; 32],
    pub serial: u64,
    /// 1 user, 2 host (PROTOCOL.certkeys).
    pub cert_type: u32,
    pub key_id: String,
}

/// Reads the certified key, serial, type and key id out of an `ssh-ed25519-cert-v01@openssh.com`
/// line (PROTOCOL.certkeys: type, nonce, pk, serial, type, key id, …). `None` if it is not one.
pub fn cert_fields(line: &str) -> Option<CertFields> {
    let mut parts = line.split_whitespace();
    if parts.next()? != "ssh-ed25519-cert-v01@openssh.com" {
        return None;
    }
    let blob = B64.decode(parts.next()?).ok()?;
    let mut r = Reader(&blob);
    if r.string()? != b"ssh-ed25519-cert-v01@openssh.com" {
        return None;
    }
    let _nonce = r.string()?;
    let key: [u8; 32] = r.string()?.try_into().ok()?;
    let serial = u64::from_be_bytes(r.take(8)?.try_into().ok()?);
    let cert_type = u32::from_be_bytes(r.take(4)?.try_into().ok()?);
    let key_id = String::from_utf8(r.string()?.to_vec()).ok()?;
    Some(CertFields {
        key,
        serial,
        cert_type,
        key_id,
    })
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }

    fn string(&mut self) -> Option<&'a [u8]> {
        let n = u32::from_be_bytes(self.take(4)?.try_into().ok()?) as usize;
        self.take(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_of_rfc8032s_first_test_key_is_openssh_form() {
        // RFC 8032 §7.1 TEST 1's public key; the expected line was made by an independent
        // implementation (Python's struct + base64) of RFC 8709's wire form.
        let raw: [u8; 32] = [
            0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64, 0x07, 0x3a, 0x0e, 0xe1,
            0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68, 0xf7, 0x07, 0x51, 0x1a,
        ];
        assert_eq!(
            public_key_line(&raw, "b"),
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINdamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea b"
        );
    }

    #[test]
    fn ssh_keygen_reads_the_line_and_fingerprints_it() {
        let dir = std::env::temp_dir().join(format!("ossh-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("dir");
        let key = HostKey::generate("b");
        let path = dir.join("b.pub");
        write_public_key(&key, &path).expect("write");
        let fp = fingerprint(&path).expect("ssh-keygen -l reads it");
        assert!(fp.starts_with("SHA256:") && fp.len() > 40, "{fp}");
        // Another key, another fingerprint; the same key, the same one.
        let other = dir.join("c.pub");
        write_public_key(&HostKey::generate("c"), &other).expect("write");
        assert_ne!(fingerprint(&other).expect("fp"), fp);
        assert_eq!(fingerprint(&path).expect("fp"), fp);
        std::fs::remove_dir_all(&dir).expect("rm");
    }

    #[test]
    fn no_fingerprint_of_what_is_not_a_key() {
        let dir = std::env::temp_dir().join(format!("ossh-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("junk.pub");
        std::fs::write(&path, "not a key\n").expect("write");
        assert!(fingerprint(&path).is_err());
        std::fs::remove_dir_all(&dir).expect("rm");
    }
}
