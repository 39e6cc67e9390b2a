//! One message a probe tap took off the wire, and how its headers read.
//!
//! Why a file of its own: the tap ([`super::tap`]) records them and every step reads them; kept
//! apart from the probe so neither depends on the other to name a message.

use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};

/// One message taken from a tap.
#[derive(Debug, Clone)]
pub struct Captured {
    pub exchange: String,
    pub routing_key: String,
    pub properties: BasicProperties,
    pub body: Vec<u8>,
}

impl Captured {
    pub fn headers(&self) -> FieldTable {
        self.properties.headers().clone().unwrap_or_default()
    }

    /// A header as text (long string, short string or byte array), if it is one.
    pub fn header_str(&self, name: &str) -> Option<String> {
        self.headers().inner().get(name).and_then(value_str)
    }

    /// The AMQP `message_id` property.
    pub fn message_id(&self) -> Option<String> {
        self.properties.message_id().as_ref().map(|s| s.as_str().to_string())
    }

    /// The first (most recent) `x-death` entry as a table, if the message was dead-lettered.
    fn first_death(&self) -> Option<FieldTable> {
        match self.headers().inner().get("x-death")? {
            AMQPValue::FieldArray(a) => match a.as_slice().first()? {
                AMQPValue::FieldTable(t) => Some(t.clone()),
                _ => None,
            },
            _ => None,
        }
    }

    /// `reason` of the first `x-death` entry (`rejected`, `expired`, `maxlen`).
    pub fn death_reason(&self) -> Option<String> {
        self.first_death()
            .and_then(|t| t.inner().get("reason").and_then(value_str))
    }

    /// `queue` of the first `x-death` entry: the queue the message was dead-lettered from.
    pub fn death_queue(&self) -> Option<String> {
        self.first_death()
            .and_then(|t| t.inner().get("queue").and_then(value_str))
    }
}

/// A header value as text, if it is a string type.
pub fn value_str(v: &AMQPValue) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_string()),
        AMQPValue::ByteArray(b) => String::from_utf8(b.as_slice().to_vec()).ok(),
        _ => None,
    }
}
