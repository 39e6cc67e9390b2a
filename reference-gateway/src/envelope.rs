//! The message envelope of SPEC §2: headers, kinds, bodies, and their strict parsing.
//!
//! Every message on the wire carries its envelope in AMQP headers as long strings (never short
//! strings: RabbitMQ closes the connection on those). Parsing is strict (ENV-2): a
//! missing required header, an unknown kind, a foreign version or a malformed UUID or timestamp is
//! an error that names the header, so the consumer can dead-letter it with a reason.

use lapin::types::{AMQPValue, FieldTable, LongString};
use serde::{Deserialize, Serialize};

/// The envelope schema version this gateway speaks.
pub const VERSION: &str = "1";

/// The `from` of a gateway's own messages.
pub const GATEWAY_FROM: &str = "_gateway";

/// Message kinds (SPEC §2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Kind {
    Send,
    Reply,
    Ask,
    Answer,
    TooLate,
    NoWaiter,
    Abandoned,
    Failed,
    Injected,
    Broadcast,
    Presence,
    Spawn,
    Stop,
}

impl Kind {
    pub const ALL: [Kind; 13] = [
        Kind::Send,
        Kind::Reply,
        Kind::Ask,
        Kind::Answer,
        Kind::TooLate,
        Kind::NoWaiter,
        Kind::Abandoned,
        Kind::Failed,
        Kind::Injected,
        Kind::Broadcast,
        Kind::Presence,
        Kind::Spawn,
        Kind::Stop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Send => "SEND",
            Kind::Reply => "REPLY",
            Kind::Ask => "ASK",
            Kind::Answer => "ANSWER",
            Kind::TooLate => "TOO_LATE",
            Kind::NoWaiter => "NO_WAITER",
            Kind::Abandoned => "ABANDONED",
            Kind::Failed => "FAILED",
            Kind::Injected => "INJECTED",
            Kind::Broadcast => "BROADCAST",
            Kind::Presence => "PRESENCE",
            Kind::Spawn => "SPAWN",
            Kind::Stop => "STOP",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Kinds whose body is JSON (§2.2); the others carry UTF-8 text.
    pub fn is_json(self) -> bool {
        !matches!(
            self,
            Kind::Send | Kind::Reply | Kind::Ask | Kind::Answer | Kind::Broadcast
        )
    }

    /// ASK and ANSWER are transient and carry a broker `expiration` backstop.
    pub fn is_transient(self) -> bool {
        matches!(self, Kind::Ask | Kind::Answer)
    }

    pub fn needs_turn_id(self) -> bool {
        matches!(
            self,
            Kind::Ask | Kind::Answer | Kind::TooLate | Kind::NoWaiter | Kind::Abandoned
        )
    }

    pub fn needs_corr_id(self) -> bool {
        matches!(
            self,
            Kind::Injected | Kind::Failed | Kind::NoWaiter | Kind::TooLate | Kind::Abandoned
        )
    }

    pub fn needs_spawn_id(self) -> bool {
        matches!(self, Kind::Spawn)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an envelope could not be parsed (ENV-2). Each variant names the header at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("missing required header {0}")]
    Missing(&'static str),
    #[error("header {0} is not a string")]
    NotAString(&'static str),
    #[error("header {0} holds a newline")]
    Newline(&'static str),
    #[error("unknown kind {0:?}")]
    UnknownKind(String),
    #[error("unsupported envelope version {0:?}")]
    Version(String),
    #[error("header {0} is not a lowercase hyphenated UUID")]
    BadUuid(&'static str),
    #[error("header {0} is not a Unix-ms timestamp")]
    BadTimestamp(&'static str),
}

/// The envelope of one message: every header of SPEC §2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    pub v: String,
    pub kind: Kind,
    pub msg_id: String,
    pub trace_id: String,
    pub from: String,
    pub to: String,
    pub host: String,
    pub turn_id: Option<String>,
    pub spawn_id: Option<String>,
    pub corr_id: Option<String>,
    pub ts: u64,
    pub expires_at: u64,
    pub sig: String,
}

/// Header names in signing order (SPEC §3.2), `sig` excluded.
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

impl Envelope {
    /// The value of a signed header by name, empty for an absent optional header.
    pub fn signed_value(&self, name: &str) -> String {
        match name {
            "v" => self.v.clone(),
            "kind" => self.kind.as_str().to_string(),
            "msgId" => self.msg_id.clone(),
            "traceId" => self.trace_id.clone(),
            "from" => self.from.clone(),
            "to" => self.to.clone(),
            "host" => self.host.clone(),
            "turnId" => self.turn_id.clone().unwrap_or_default(),
            "spawnId" => self.spawn_id.clone().unwrap_or_default(),
            "corrId" => self.corr_id.clone().unwrap_or_default(),
            "ts" => self.ts.to_string(),
            "expiresAt" => self.expires_at.to_string(),
            _ => String::new(),
        }
    }

    /// The AMQP headers table: long strings only, absent optionals omitted.
    pub fn to_headers(&self) -> FieldTable {
        let mut t = FieldTable::default();
        for name in SIGNED_HEADERS {
            let value = self.signed_value(name);
            let optional = matches!(name, "turnId" | "spawnId" | "corrId");
            if optional && value.is_empty() {
                continue;
            }
            t.insert(name.into(), AMQPValue::LongString(LongString::from(value)));
        }
        t.insert("sig".into(), AMQPValue::LongString(LongString::from(self.sig.clone())));
        t
    }

    /// Parses and validates an envelope from AMQP headers (ENV-2). The signature is not checked here.
    pub fn from_headers(headers: Option<&FieldTable>) -> Result<Envelope, EnvelopeError> {
        let empty = FieldTable::default();
        let h = headers.unwrap_or(&empty);
        let get = |name: &'static str| -> Result<Option<String>, EnvelopeError> {
            match h.inner().get(name) {
                None => Ok(None),
                Some(v) => {
                    let s = header_string(v).ok_or(EnvelopeError::NotAString(name))?;
                    if s.contains('\n') || s.contains('\r') {
                        return Err(EnvelopeError::Newline(name));
                    }
                    Ok(Some(s))
                }
            }
        };
        let req = |name: &'static str| -> Result<String, EnvelopeError> {
            match get(name)? {
                Some(s) if !s.is_empty() => Ok(s),
                _ => Err(EnvelopeError::Missing(name)),
            }
        };
        let v = req("v")?;
        let kind_raw = req("kind")?;
        if v != VERSION {
            return Err(EnvelopeError::Version(v));
        }
        let kind = Kind::parse(&kind_raw).ok_or(EnvelopeError::UnknownKind(kind_raw))?;
        let msg_id = uuid_header("msgId", req("msgId")?)?;
        let trace_id = uuid_header("traceId", req("traceId")?)?;
        let from = req("from")?;
        let to = req("to")?;
        let host = req("host")?;
        let opt_uuid = |name: &'static str, needed: bool| -> Result<Option<String>, EnvelopeError> {
            match get(name)?.filter(|s| !s.is_empty()) {
                Some(s) => Ok(Some(uuid_header(name, s)?)),
                None if needed => Err(EnvelopeError::Missing(name)),
                None => Ok(None),
            }
        };
        let turn_id = opt_uuid("turnId", kind.needs_turn_id())?;
        let spawn_id = opt_uuid("spawnId", kind.needs_spawn_id())?;
        let corr_id = opt_uuid("corrId", kind.needs_corr_id())?;
        let ts = ts_header("ts", req("ts")?)?;
        let expires_at = ts_header("expiresAt", req("expiresAt")?)?;
        let sig = req("sig")?;
        Ok(Envelope {
            v,
            kind,
            msg_id,
            trace_id,
            from,
            to,
            host,
            turn_id,
            spawn_id,
            corr_id,
            ts,
            expires_at,
            sig,
        })
    }
}

/// A header value as a string: long strings, short strings and byte arrays are accepted (brokers
/// hand long strings back as byte arrays).
pub fn header_string(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        AMQPValue::ByteArray(b) => String::from_utf8(b.as_slice().to_vec()).ok(),
        _ => None,
    }
}

/// True for a lowercase, hyphenated UUID (SPEC §0).
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36
        && s.bytes().enumerate().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

fn uuid_header(name: &'static str, s: String) -> Result<String, EnvelopeError> {
    if is_uuid(&s) {
        Ok(s)
    } else {
        Err(EnvelopeError::BadUuid(name))
    }
}

/// A Unix-ms timestamp in canonical decimal. Leading zeros are refused: the signing input is
/// rebuilt from the parsed number, so "0123" would verify under the signature made for "123" —
/// the header bytes would no longer be the bytes that were signed (found by the fuzz test).
fn ts_header(name: &'static str, s: String) -> Result<u64, EnvelopeError> {
    let leading_zero = s.len() > 1 && s.starts_with('0');
    if s.is_empty() || s.len() > 15 || leading_zero || !s.bytes().all(|c| c.is_ascii_digit()) {
        return Err(EnvelopeError::BadTimestamp(name));
    }
    s.parse().map_err(|_| EnvelopeError::BadTimestamp(name))
}

/// Current Unix time in ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A fresh random UUID (v4), lowercase hyphenated.
pub fn new_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// FAILED reasons (§2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailReason {
    Maxlen,
    Expired,
    InjectTimeout,
    Busy,
    NotSubmitted,
    NoSuchEntity,
    UnknownProfile,
    SpawnFailed,
    Stopped,
}

impl FailReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailReason::Maxlen => "maxlen",
            FailReason::Expired => "expired",
            FailReason::InjectTimeout => "inject_timeout",
            FailReason::Busy => "busy",
            FailReason::NotSubmitted => "not_submitted",
            FailReason::NoSuchEntity => "no_such_entity",
            FailReason::UnknownProfile => "unknown_profile",
            FailReason::SpawnFailed => "spawn_failed",
            FailReason::Stopped => "stopped",
        }
    }
}

/// The body of a FAILED message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FailedBody {
    pub reason: FailReason,
    #[serde(default)]
    pub detail: String,
    /// [C-23]: a `not_submitted` brief that was typed and left unread in the terminal's input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub typed: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Envelope {
        Envelope {
            v: "1".into(),
            kind: Kind::Injected,
            msg_id: "0b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            trace_id: "1b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            from: "2b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            to: "3b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            host: "host-b".into(),
            turn_id: None,
            spawn_id: None,
            corr_id: Some("4b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into()),
            ts: 1_700_000_000_000,
            expires_at: 1_700_086_400_000,
            sig: "c2ln".into(),
        }
    }

    #[test]
    fn headers_round_trip_as_long_strings() {
        let e = sample();
        let h = e.to_headers();
        assert!(h.inner().values().all(|v| matches!(v, AMQPValue::LongString(_))));
        assert!(!h.inner().contains_key("turnId"), "absent optional headers are omitted");
        assert_eq!(Envelope::from_headers(Some(&h)).expect("parses"), e);
    }

    #[rstest::rstest]
    #[case("msgId", None, "missing required header msgId")]
    #[case("kind", Some("GOSSIP"), "unknown kind")]
    #[case("v", Some("2"), "unsupported envelope version")]
    #[case("traceId", Some("not-a-uuid"), "traceId is not")]
    #[case("msgId", Some("0B0E3C1E-6F6E-4C1A-9D7E-5F4A3B2C1D0E"), "msgId is not")]
    #[case("ts", Some("12x"), "ts is not")]
    #[case("ts", Some("01700000000000"), "ts is not")]
    #[case("from", Some("a\nb"), "newline")]
    #[case("corrId", None, "missing required header corrId")]
    fn malformed_envelopes_are_rejected_naming_the_header(
        #[case] name: &str,
        #[case] value: Option<&str>,
        #[case] expect: &str,
    ) {
        let mut h = sample().to_headers();
        let mut map = h.inner().clone();
        match value {
            None => {
                map.remove(name);
            }
            Some(v) => {
                map.insert(name.into(), AMQPValue::LongString(v.into()));
            }
        }
        h = FieldTable::from(map);
        let err = Envelope::from_headers(Some(&h)).expect_err("rejected");
        assert!(err.to_string().contains(expect), "{err}");
    }
}
