//! The peers file (SPEC §3.1, MEM-1): `[peers] <host> = "<base64 key>"` or
//! `<host> = ["<key>", "<key>"]`.
//!
//! A host may list several keys, each valid for it: a fleet without a CA rotates a key by adding
//! the new one everywhere, switching the host to it, then removing the old one (MEM-1, MEM-3). A
//! bad entry is reported at its own line, so the ERROR of a reload points the operator at it.

use std::collections::BTreeMap;
use std::ops::Range;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::VerifyingKey;
use serde::Deserialize;

use super::files::{LineError, line_at};

/// The pinned keys of every host the peers file lists.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers {
    keys: BTreeMap<String, Vec<VerifyingKey>>,
}

#[derive(Deserialize)]
struct Doc {
    peers: Option<toml::Spanned<BTreeMap<String, toml::Spanned<toml::Value>>>>,
}

impl Peers {
    /// Parses the peers file's text. An empty file (or comments and blank lines only) lists no
    /// peer ([C-27] 2 applies a peers file emptied for good); any other file without a `[peers]`
    /// table is broken.
    pub fn parse(text: &str) -> Result<Peers, LineError> {
        if super::files::meaningful_lines(text).next().is_none() {
            return Ok(Peers::default());
        }
        let doc: Doc = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(1, |s| line_at(text, s.start));
            LineError::new(line, format!("not valid TOML: {}", e.message()))
        })?;
        let peers = doc
            .peers
            .ok_or_else(|| LineError::new(1, "has no [peers] table"))?
            .into_inner();
        let mut keys = BTreeMap::new();
        for (host, value) in peers {
            let span = value.span();
            let list = match value.into_inner() {
                toml::Value::String(s) => vec![s],
                toml::Value::Array(items) => {
                    let mut list = Vec::with_capacity(items.len());
                    for item in items {
                        match item {
                            toml::Value::String(s) => list.push(s),
                            other => {
                                return Err(LineError::new(
                                    line_at(text, span.start),
                                    format!("peer {host:?}: every key must be a string, not {}", other.type_str()),
                                ));
                            }
                        }
                    }
                    list
                }
                other => {
                    return Err(LineError::new(
                        line_at(text, span.start),
                        format!(
                            "peer {host:?}: the key must be a string (or an array of strings), not {}",
                            other.type_str()
                        ),
                    ));
                }
            };
            if list.is_empty() {
                return Err(LineError::new(
                    line_at(text, span.start),
                    format!("peer {host:?} lists no key"),
                ));
            }
            let mut host_keys: Vec<VerifyingKey> = Vec::with_capacity(list.len());
            for s in &list {
                let key = decode_public(s)
                    .map_err(|e| LineError::new(line_of_item(text, &span, s), format!("peer {host:?}: {e}")))?;
                if !host_keys.contains(&key) {
                    host_keys.push(key);
                }
            }
            keys.insert(host, host_keys);
        }
        Ok(Peers { keys })
    }

    /// The keys listed for `host` (none if it is not listed).
    pub fn keys(&self, host: &str) -> &[VerifyingKey] {
        self.keys.get(host).map_or(&[], Vec::as_slice)
    }

    pub fn contains(&self, host: &str) -> bool {
        self.keys.contains_key(host)
    }

    /// Every listed host.
    pub fn hosts(&self) -> impl Iterator<Item = &str> {
        self.keys.keys().map(String::as_str)
    }

    /// Adds `key` for `host` (tests, and a keyring built by hand).
    pub fn insert(&mut self, host: &str, key: VerifyingKey) {
        let keys = self.keys.entry(host.to_string()).or_default();
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
}

/// The line of an array element: the line inside the value's span that holds the element's text
/// (a multi-line array points at the bad key itself), else the value's first line.
fn line_of_item(text: &str, span: &Range<usize>, item: &str) -> usize {
    let within = text.get(span.clone()).unwrap_or_default();
    match within.find(item) {
        Some(at) if !item.is_empty() => line_at(text, span.start + at),
        _ => line_at(text, span.start),
    }
}

/// An ed25519 public key: base64 (standard, padded) of its 32 raw bytes.
pub fn decode_public(s: &str) -> Result<VerifyingKey, String> {
    let raw = B64
        .decode(s.trim().as_bytes())
        .map_err(|e| format!("key {s:?} is not base64 ({e})"))?;
    let len = raw.len();
    let bytes: [u8; 32] = raw
        .try_into()
        .map_err(|_| format!("key {s:?} decodes to {len} bytes, expected 32"))?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| format!("key {s:?} is not an ed25519 public key ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signing::Signer;

    fn key(seed: u8) -> String {
        Signer::from_seed([seed; 32]).public_base64()
    }

    #[test]
    fn one_key_or_several_per_host() {
        let text = format!("[peers]\na = \"{}\"\nb = [\"{}\", \"{}\"]\n", key(1), key(2), key(3));
        let p = Peers::parse(&text).expect("parses");
        assert_eq!(p.keys("a"), &[Signer::from_seed([1; 32]).verifying_key()]);
        assert_eq!(p.keys("b").len(), 2);
        assert!(p.keys("c").is_empty());
        assert_eq!(p.hosts().collect::<Vec<_>>(), vec!["a", "b"]);
    }

    #[test]
    fn a_file_with_a_byte_order_mark_reads_as_without() {
        use crate::membership::files::{TrustFile, text};
        let plain = format!("[peers]\na = \"{}\"\n", key(1));
        let bom = format!("\u{feff}{plain}");
        let read = text(TrustFile::Peers, bom.as_bytes()).expect("text");
        assert_eq!(Peers::parse(read), Peers::parse(&plain));
        assert!(Peers::parse(read).is_ok());
    }

    #[test]
    fn an_empty_table_is_a_fleet_of_certificates_only() {
        assert_eq!(Peers::parse("[peers]\n").expect("parses"), Peers::default());
        // [C-27] 2: a file emptied for good lists no peer; other tables without [peers] are broken.
        assert_eq!(Peers::parse("").expect("parses"), Peers::default());
        assert_eq!(Peers::parse("# nobody\n\n").expect("parses"), Peers::default());
        assert!(Peers::parse("[other]\n").is_err());
    }

    #[test]
    fn errors_name_the_first_bad_line() {
        let text = format!("# fleet\n[peers]\na = \"{}\"\nb = \"AAAA\"\n", key(1));
        assert_eq!(Peers::parse(&text).map_err(|e| e.line), Err(4));
        let text = format!("[peers]\na = \"{}\"\nb = 3\n", key(1));
        assert_eq!(Peers::parse(&text).map_err(|e| e.line), Err(3));
        let text = format!("[peers]\nb = [\n  \"{}\",\n  \"nope\",\n]\n", key(1));
        let e = Peers::parse(&text).expect_err("bad element");
        assert_eq!(e.line, 4, "{e}");
        assert_eq!(Peers::parse("[peers]\na = \"x\n").map_err(|e| e.line), Err(2));
        assert_eq!(Peers::parse("[peers]\nb = []\n").map_err(|e| e.line), Err(2));
        assert_eq!(Peers::parse("[other]\n").map_err(|e| e.line), Err(1));
        assert_eq!(
            Peers::parse("[peers]\na = \"x\"\na = \"y\"\n").map_err(|e| e.line),
            Err(3)
        );
    }
}
