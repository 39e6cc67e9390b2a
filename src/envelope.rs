//! The suite's own implementation of the Fleet envelope (SPEC §2) and signing input (SPEC §3.2).
//!
//! Written fresh, independent of any gateway, so the suite can (1) craft any message — valid or
//! deliberately broken — for the wire probe to publish, and (2) judge what a gateway publishes:
//! every required header present as an AMQP long string, no newline, a signature that verifies.
//! The published vectors in `fixtures/vectors/` are checked against this code by its unit tests,
//! and against the reference gateway by that crate's tests: both sides agree with a third,
//! Python implementation.
//!
//! An [`Envelope`] is deliberately loose: a map of header name → string value, so a scenario can
//! drop, add or corrupt any header before or after signing. Strictness lives in the checks
//! ([`Envelope::check_required`], [`Envelope::verify`], [`Envelope::from_field_table`]).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, VerifyingKey};
use lapin::types::{AMQPValue, FieldTable, LongString};

use crate::keys::HostKey;

/// The first line of every signing input.
pub const SIGNING_PREFIX: &[u8] = b"fleet-envelope-v1\n";

/// Signed header names in signing order (SPEC §3.2). `sig` is not signed.
pub const SIGNED_HEADERS: [&str; 12] = [
    "v",
    "kind",
    "msgId",
    "traceId",
    "from",
    "to",
    "host",
    "turnId",
    "spawnId",
    "corrId",
    "ts",
    "expiresAt",
];

/// Headers every kind carries (SPEC §2).
pub const ALWAYS_REQUIRED: [&str; 10] = [
    "v",
    "kind",
    "msgId",
    "traceId",
    "from",
    "to",
    "host",
    "ts",
    "expiresAt",
    "sig",
];

/// Every kind of SPEC §2.1.
pub const KINDS: [&str; 13] = [
    "SEND",
    "REPLY",
    "ASK",
    "ANSWER",
    "TOO_LATE",
    "NO_WAITER",
    "ABANDONED",
    "FAILED",
    "INJECTED",
    "BROADCAST",
    "PRESENCE",
    "SPAWN",
    "STOP",
];

/// The headers a kind requires beyond [`ALWAYS_REQUIRED`] (SPEC §2 table).
pub fn kind_requires(kind: &str) -> Vec<&'static str> {
    let mut out = Vec::new();
    if matches!(kind, "ASK" | "ANSWER" | "TOO_LATE" | "NO_WAITER" | "ABANDONED") {
        out.push("turnId");
    }
    if kind == "SPAWN" {
        out.push("spawnId");
    }
    if matches!(kind, "INJECTED" | "FAILED" | "NO_WAITER" | "TOO_LATE" | "ABANDONED") {
        out.push("corrId");
    }
    out
}

/// Why an envelope is not what SPEC §2–3 demand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("missing required header {0}")]
    Missing(String),
    #[error("header {name} is {found}, not an AMQP long string")]
    NotLongString { name: String, found: String },
    #[error("header {0} is not valid UTF-8")]
    NotUtf8(String),
    #[error("header {0} holds a newline")]
    Newline(String),
    #[error("header {0} is malformed (not `1`, a lowercase UUID, or a canonical Unix-ms number)")]
    Malformed(String),
    #[error("unknown kind {0:?}")]
    UnknownKind(String),
    #[error("public key is not base64 of 32 bytes of an ed25519 key")]
    BadKey,
    #[error("sig is not base64 of 64 bytes")]
    MalformedSig,
    #[error("sig does not verify under the given key")]
    BadSignature,
}

/// Current Unix time in ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A fresh lowercase hyphenated UUID (v4).
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// An envelope: header name → value. Absent optional headers are simply not in the map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Envelope {
    headers: BTreeMap<String, String>,
}

impl Envelope {
    /// A well-formed, unsigned envelope: fresh `msgId` and `traceId`, `ts` now, `expiresAt` in 24 h.
    pub fn new(kind: &str, from: &str, to: &str, host: &str) -> Envelope {
        let ts = now_ms();
        let mut e = Envelope::default();
        e.set("v", "1")
            .set("kind", kind)
            .set("msgId", &new_uuid())
            .set("traceId", &new_uuid())
            .set("from", from)
            .set("to", to)
            .set("host", host)
            .set("ts", &ts.to_string())
            .set("expiresAt", &(ts + 86_400_000).to_string());
        e
    }

    /// An envelope holding exactly these headers.
    pub fn from_map(headers: BTreeMap<String, String>) -> Envelope {
        Envelope { headers }
    }

    pub fn headers(&self) -> &BTreeMap<String, String> {
        &self.headers
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }

    /// The header's value, empty when absent.
    pub fn value(&self, name: &str) -> &str {
        self.get(name).unwrap_or("")
    }

    pub fn set(&mut self, name: &str, value: &str) -> &mut Envelope {
        self.headers.insert(name.to_string(), value.to_string());
        self
    }

    pub fn remove(&mut self, name: &str) -> &mut Envelope {
        self.headers.remove(name);
        self
    }

    /// Builder form of [`Envelope::set`].
    pub fn with(mut self, name: &str, value: &str) -> Envelope {
        self.set(name, value);
        self
    }

    pub fn msg_id(&self) -> &str {
        self.value("msgId")
    }

    pub fn kind(&self) -> &str {
        self.value("kind")
    }

    /// `ts` as Unix milliseconds (the publisher's stamp, SPEC §3), or an error naming the message
    /// and what its `ts` holds.
    pub fn ts_ms(&self) -> Result<u64, String> {
        self.value("ts").parse().map_err(|_| {
            format!(
                "the {} {}'s ts {:?} is not a number of milliseconds",
                self.kind(),
                self.msg_id(),
                self.value("ts")
            )
        })
    }

    /// The SPEC §3.2 signing input over these headers and `body`.
    pub fn signing_input(&self, body: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(SIGNING_PREFIX.len() + 400 + body.len());
        out.extend_from_slice(SIGNING_PREFIX);
        for name in SIGNED_HEADERS {
            out.extend_from_slice(name.as_bytes());
            out.push(b'=');
            out.extend_from_slice(self.value(name).as_bytes());
            out.push(b'\n');
        }
        out.push(b'\n');
        out.extend_from_slice(body);
        out
    }

    /// Signs headers + body with `key` and stores the result in `sig`. Does not touch `host`.
    pub fn sign(&mut self, key: &HostKey, body: &[u8]) -> &mut Envelope {
        let sig = key.sign_base64(&self.signing_input(body));
        self.set("sig", &sig)
    }

    /// Sets `host` to the key's host and signs: what an honest gateway does.
    pub fn signed_by(mut self, key: &HostKey, body: &[u8]) -> Envelope {
        self.set("host", &key.host);
        self.sign(key, body);
        self
    }

    /// Verifies `sig` over headers + body under a base64 ed25519 public key (strict RFC 8032).
    pub fn verify(&self, public_key_b64: &str, body: &[u8]) -> Result<(), EnvelopeError> {
        let raw = B64.decode(public_key_b64.trim()).map_err(|_| EnvelopeError::BadKey)?;
        let bytes: [u8; 32] = raw.try_into().map_err(|_| EnvelopeError::BadKey)?;
        let key = VerifyingKey::from_bytes(&bytes).map_err(|_| EnvelopeError::BadKey)?;
        let sig = self.get("sig").ok_or_else(|| EnvelopeError::Missing("sig".into()))?;
        let raw = B64.decode(sig).map_err(|_| EnvelopeError::MalformedSig)?;
        let bytes: [u8; 64] = raw.try_into().map_err(|_| EnvelopeError::MalformedSig)?;
        key.verify_strict(&self.signing_input(body), &Signature::from_bytes(&bytes))
            .map_err(|_| EnvelopeError::BadSignature)
    }

    /// ENV-1: every header required for the kind is present and non-empty, the kind is known,
    /// and no value holds a newline.
    pub fn check_required(&self) -> Result<(), EnvelopeError> {
        for (name, value) in &self.headers {
            if value.contains('\n') || value.contains('\r') {
                return Err(EnvelopeError::Newline(name.clone()));
            }
        }
        let kind = self.kind();
        if !KINDS.contains(&kind) {
            return Err(EnvelopeError::UnknownKind(kind.to_string()));
        }
        for name in ALWAYS_REQUIRED.iter().copied().chain(kind_requires(kind)) {
            if self.value(name).is_empty() {
                return Err(EnvelopeError::Missing(name.to_string()));
            }
        }
        if self.value("v") != "1" {
            return Err(EnvelopeError::Malformed("v".into()));
        }
        for name in ["msgId", "traceId", "turnId", "spawnId", "corrId"] {
            if let Some(v) = self.get(name)
                && !is_uuid(v)
            {
                return Err(EnvelopeError::Malformed(name.into()));
            }
        }
        for name in ["ts", "expiresAt"] {
            if !is_canonical_ms(self.value(name)) {
                return Err(EnvelopeError::Malformed(name.into()));
            }
        }
        Ok(())
    }

    /// The AMQP headers: every value a long string (never a short string — RabbitMQ closes the
    /// connection on those).
    pub fn to_field_table(&self) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, v) in &self.headers {
            t.insert(k.as_str().into(), AMQPValue::LongString(LongString::from(v.clone())));
        }
        t
    }

    /// Reads the envelope headers of a received message, strictly: each envelope header
    /// (signed ones and `sig`) must be an AMQP long string of UTF-8. Other headers (`x-death`, …)
    /// are ignored.
    pub fn from_field_table(t: &FieldTable) -> Result<Envelope, EnvelopeError> {
        let mut e = Envelope::default();
        for name in SIGNED_HEADERS.iter().copied().chain(["sig"]) {
            let Some(v) = t.inner().get(name) else {
                continue;
            };
            let s = match v {
                AMQPValue::LongString(s) => {
                    String::from_utf8(s.as_bytes().to_vec()).map_err(|_| EnvelopeError::NotUtf8(name.to_string()))?
                }
                other => {
                    return Err(EnvelopeError::NotLongString {
                        name: name.to_string(),
                        found: amqp_type_name(other).to_string(),
                    });
                }
            };
            e.set(name, &s);
        }
        Ok(e)
    }
}

/// A lowercase, hyphenated UUID (SPEC §0).
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

/// A Unix-ms timestamp in canonical decimal: digits only, no leading zero.
pub fn is_canonical_ms(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
}

/// A readable name of an AMQP field type, for error messages.
pub fn amqp_type_name(v: &AMQPValue) -> &'static str {
    match v {
        AMQPValue::Boolean(_) => "a boolean",
        AMQPValue::ShortShortInt(_) | AMQPValue::ShortShortUInt(_) => "an 8-bit integer",
        AMQPValue::ShortInt(_) | AMQPValue::ShortUInt(_) => "a 16-bit integer",
        AMQPValue::LongInt(_) | AMQPValue::LongUInt(_) => "a 32-bit integer",
        AMQPValue::LongLongInt(_) => "a 64-bit integer",
        AMQPValue::Float(_) | AMQPValue::Double(_) => "a float",
        AMQPValue::DecimalValue(_) => "a decimal",
        AMQPValue::ShortString(_) => "a short string",
        AMQPValue::LongString(_) => "a long string",
        AMQPValue::FieldArray(_) => "an array",
        AMQPValue::Timestamp(_) => "a timestamp",
        AMQPValue::FieldTable(_) => "a table",
        AMQPValue::ByteArray(_) => "a byte array",
        AMQPValue::Void => "void",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    struct Vector {
        file: String,
        v: serde_json::Value,
    }

    impl Vector {
        fn str(&self, f: &str) -> &str {
            self.v[f].as_str().unwrap_or_else(|| panic!("{}: no {f}", self.file))
        }
        fn bytes(&self, f: &str) -> Vec<u8> {
            B64.decode(self.str(f)).expect("base64")
        }
        fn envelope(&self) -> Envelope {
            let map = self.v["headers"]
                .as_object()
                .expect("headers")
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().expect("string").to_string()))
                .collect();
            Envelope::from_map(map)
        }
        fn key(&self) -> HostKey {
            let seed: [u8; 32] = self.bytes("seed").try_into().expect("32 bytes");
            HostKey::from_seed(self.str("host"), seed)
        }
    }

    fn vectors() -> Vec<Vector> {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/vectors");
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .expect("fixtures/vectors")
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let v: Vec<Vector> = files
            .iter()
            .map(|p| Vector {
                file: p.display().to_string(),
                v: serde_json::from_slice(&std::fs::read(p).expect("read")).expect("json"),
            })
            .collect();
        assert!(v.len() >= 12, "at least 12 vectors, found {}", v.len());
        v
    }

    #[test]
    fn vectors_cover_every_kind() {
        let vs = vectors();
        for kind in KINDS {
            assert!(
                vs.iter().any(|v| v.v["headers"]["kind"] == kind),
                "no vector of kind {kind}"
            );
        }
    }

    #[test]
    fn signing_input_and_sig_match_every_vector() {
        for vec in vectors() {
            let env = vec.envelope();
            let body = vec.bytes("body_base64");
            assert_eq!(
                env.signing_input(&body),
                vec.bytes("signing_input_base64"),
                "{}",
                vec.file
            );
            let key = vec.key();
            assert_eq!(key.public_base64(), vec.str("public_key"), "{}", vec.file);
            let mut resigned = env.clone();
            resigned.remove("sig").sign(&key, &body);
            assert_eq!(resigned.value("sig"), vec.str("sig"), "{}", vec.file);
            assert_eq!(resigned, env, "{}", vec.file);
        }
    }

    #[test]
    fn every_vector_verifies_is_complete_and_refuses_changes() {
        for vec in vectors() {
            let env = vec.envelope();
            let body = vec.bytes("body_base64");
            let pk = vec.str("public_key");
            assert_eq!(env.verify(pk, &body), Ok(()), "{}", vec.file);
            assert_eq!(env.check_required(), Ok(()), "{}", vec.file);
            let parsed = Envelope::from_field_table(&env.to_field_table()).expect("long strings");
            assert_eq!(parsed, env, "{}", vec.file);
            let mut body2 = body.clone();
            body2.push(b'!');
            assert_eq!(env.verify(pk, &body2), Err(EnvelopeError::BadSignature));
            for name in SIGNED_HEADERS {
                let mut changed = env.clone();
                let v = format!("{}x", changed.value(name));
                changed.set(name, &v);
                assert_eq!(
                    changed.verify(pk, &body),
                    Err(EnvelopeError::BadSignature),
                    "{}: changing {name} must break the signature",
                    vec.file
                );
            }
        }
    }

    #[test]
    fn required_headers_and_types_are_enforced() {
        let key = HostKey::from_seed("probe", [9u8; 32]);
        let e = Envelope::new("FAILED", "_gateway", "x", "probe")
            .with("corrId", &new_uuid())
            .signed_by(&key, b"{}");
        assert_eq!(e.check_required(), Ok(()));
        let mut no_corr = e.clone();
        no_corr.remove("corrId");
        assert_eq!(no_corr.check_required(), Err(EnvelopeError::Missing("corrId".into())));
        let padded = format!("0{}", e.value("ts"));
        assert_eq!(
            e.clone().with("ts", &padded).check_required(),
            Err(EnvelopeError::Malformed("ts".into()))
        );
        assert_eq!(
            e.clone().with("msgId", "NOT-A-UUID").check_required(),
            Err(EnvelopeError::Malformed("msgId".into()))
        );
        let nl = e.clone().with("from", "a\nb");
        assert!(matches!(nl.check_required(), Err(EnvelopeError::Newline(_))));
        let mut t = e.to_field_table();
        t.insert("ts".into(), AMQPValue::LongLongInt(5));
        assert!(matches!(
            Envelope::from_field_table(&t),
            Err(EnvelopeError::NotLongString { .. })
        ));
    }
}
