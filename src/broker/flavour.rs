//! Which broker product the suite is talking to, and how each one shows the same thing.
//!
//! Exists so no step judges a gateway by one broker's way of saying something. RabbitMQ and
//! LavinMQ agree on almost all of AMQP 0-9-1, but not on everything a step reads
//! (measured on each broker and kept in `fixtures/brokers/`):
//!
//! - an `x-delayed-message` exchange: RabbitMQ's plugin shows type `x-delayed-message` with
//!   argument `x-delayed-type`; LavinMQ stores the *delayed type* as the exchange type and marks it
//!   with argument `x-delayed-exchange: true` ([`DelayedExchange::read`]);
//! - topic permissions (which routing keys a login may publish): RabbitMQ has them, LavinMQ 2.5
//!   has none (`/api/topic-permissions` answers 404) ([`Product::has_topic_permissions`]);
//! - an *exclusive* consume next to a plain consumer: refused by RabbitMQ, accepted by LavinMQ —
//!   which is why the suite probes exclusivity with a plain consume (both refuse that next to an
//!   exclusive consumer) and reads the consumer's `exclusive` flag;
//! - a channel-wide prefetch (`basic.qos global=true`): on RabbitMQ a consumer started without
//!   its own prefetch shows 0 and the bound shows on its channel only; on LavinMQ a consumer
//!   always shows its own prefetch (65535 by default) and the channel's bound beside it — so a
//!   bound is judged on both ([`PrefetchBound`]);
//! - management-API counters: RabbitMQ's lag 0.5–1 s, LavinMQ's are instant — no step may take a
//!   counter as proof that a gateway has finished judging a message.
//!
//! The product comes from the broker itself, first from the AMQP `connection.start` server
//! properties ([`ServerIdentity::from_connection_start`], read when the suite checks the listener),
//! else from the management API's overview. Every step can ask [`crate::broker::Broker::product`],
//! and reports record [`crate::broker::Broker::version`].

use serde_json::Value;

use super::management::{ExchangeInfo, global_prefetch_count};

/// A broker product, as the broker names itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Product {
    RabbitMq,
    LavinMq,
    /// Another AMQP 0-9-1 broker: judged as RabbitMQ is, the reference of the protocol's
    /// extensions the spec uses.
    Other(String),
}

impl Product {
    /// From the `product` server property or the overview's product name (case-insensitive).
    pub fn from_name(name: &str) -> Product {
        let lower = name.trim().to_ascii_lowercase();
        if lower.contains("lavinmq") {
            Product::LavinMq
        } else if lower.contains("rabbitmq") {
            Product::RabbitMq
        } else {
            Product::Other(name.trim().to_string())
        }
    }

    /// Whether the broker can keep a login from publishing with routing keys outside a pattern
    /// (RabbitMQ's topic permissions). LavinMQ 2.5 cannot: SEC-2's "a login cannot publish
    /// presence for another host" is then a broker limit (docs/RUNNER.md,
    /// `fixtures/baselines/lavinmq.toml`).
    pub fn has_topic_permissions(&self) -> bool {
        !matches!(self, Product::LavinMq)
    }

    /// Whether an *exclusive* consume is refused next to a plain consumer (RabbitMQ: yes;
    /// LavinMQ: no, measured on 2.5.1).
    pub fn refuses_exclusive_next_to_plain(&self) -> bool {
        !matches!(self, Product::LavinMq)
    }
}

impl std::fmt::Display for Product {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Product::RabbitMq => f.write_str("RabbitMQ"),
            Product::LavinMq => f.write_str("LavinMQ"),
            Product::Other(name) => f.write_str(name),
        }
    }
}

/// What a broker says it is in `connection.start`: the `product` and `version` server properties.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerIdentity {
    pub product: String,
    pub version: String,
}

/// Why a `connection.start` frame could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("connection.start: {0}")]
pub struct StartFrameError(String);

/// A cursor over AMQP 0-9-1 field-table bytes.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], StartFrameError> {
        if self.bytes.len() < n {
            return Err(StartFrameError(format!(
                "truncated: {n} bytes wanted, {} left",
                self.bytes.len()
            )));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, StartFrameError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, StartFrameError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, StartFrameError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn short_str(&mut self) -> Result<String, StartFrameError> {
        let n = usize::from(self.u8()?);
        Ok(String::from_utf8_lossy(self.take(n)?).into_owned())
    }

    /// One field value; strings are returned, everything else is skipped.
    fn value(&mut self) -> Result<Option<String>, StartFrameError> {
        let skip = |r: &mut Self, n: usize| r.take(n).map(|_| None);
        match self.u8()? {
            b'S' | b'x' => {
                let n = self.u32()? as usize;
                Ok(Some(String::from_utf8_lossy(self.take(n)?).into_owned()))
            }
            b's' => self.short_str().map(Some),
            b'F' | b'A' => {
                let n = self.u32()? as usize;
                skip(self, n)
            }
            b't' | b'b' | b'B' => skip(self, 1),
            b'U' | b'u' => skip(self, 2),
            b'I' | b'i' | b'f' => skip(self, 4),
            b'L' | b'l' | b'd' | b'T' => skip(self, 8),
            b'D' => skip(self, 5),
            b'V' => Ok(None),
            other => Err(StartFrameError(format!("unknown field type {:?}", char::from(other)))),
        }
    }
}

impl ServerIdentity {
    /// Reads the server properties of a `connection.start` method frame: the whole frame as the
    /// broker sends it after the protocol header (type 1, channel 0, size, payload, 0xCE).
    pub fn from_connection_start(frame: &[u8]) -> Result<ServerIdentity, StartFrameError> {
        let mut r = Reader { bytes: frame };
        let kind = r.u8()?;
        let _channel = r.u16()?;
        let size = r.u32()? as usize;
        if kind != 1 {
            return Err(StartFrameError(format!("frame type {kind}, not a method frame")));
        }
        let mut r = Reader { bytes: r.take(size)? };
        let (class, method) = (r.u16()?, r.u16()?);
        if (class, method) != (10, 10) {
            return Err(StartFrameError(format!(
                "method {class}.{method}, not connection.start (10.10)"
            )));
        }
        let _version = (r.u8()?, r.u8()?);
        let table_len = r.u32()? as usize;
        let mut table = Reader {
            bytes: r.take(table_len)?,
        };
        let (mut product, mut version) = (None, None);
        while !table.bytes.is_empty() {
            let name = table.short_str()?;
            let value = table.value()?;
            match name.as_str() {
                "product" => product = value,
                "version" => version = value,
                _ => {}
            }
        }
        Ok(ServerIdentity {
            product: product.unwrap_or_else(|| "unknown".into()),
            version: version.unwrap_or_else(|| "unknown".into()),
        })
    }

    /// e.g. "RabbitMQ 3.10.8".
    pub fn label(&self) -> String {
        format!("{} {}", self.product, self.version)
    }
}

/// An exchange of the `x-delayed-message` kind, whichever way the broker shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DelayedExchange {
    /// The routing type behind the delay (`x-delayed-type` on RabbitMQ; the exchange type on
    /// LavinMQ). `None` when the broker does not show it.
    pub delayed_type: Option<String>,
    pub durable: bool,
}

impl DelayedExchange {
    /// `Some` when `e` is a delayed-message exchange in RabbitMQ's form (type
    /// `x-delayed-message`, argument `x-delayed-type`) or LavinMQ's (type = the delayed type,
    /// argument `x-delayed-exchange: true`); `None` for any other exchange.
    pub fn read(e: &ExchangeInfo) -> Option<DelayedExchange> {
        let arg = |k: &str| e.arguments.get(k);
        if e.kind == "x-delayed-message" {
            return Some(DelayedExchange {
                delayed_type: arg("x-delayed-type").and_then(Value::as_str).map(str::to_string),
                durable: e.durable,
            });
        }
        let lavin_flag = matches!(arg("x-delayed-exchange"), Some(Value::Bool(true)))
            || arg("x-delayed-exchange").and_then(Value::as_str) == Some("true");
        lavin_flag.then(|| DelayedExchange {
            delayed_type: Some(e.kind.clone()),
            durable: e.durable,
        })
    }
}

/// The prefetch limits a consumer is held to, as the management API shows them.
///
/// Exists because the two brokers show a channel-wide `basic.qos` differently: RabbitMQ shows a
/// consumer started without its own prefetch as `prefetch_count` 0, LavinMQ shows it with its own
/// default (65535), and both show the channel-wide bound only on the channel
/// (`global_prefetch_count`). A check that read the channel only when the consumer showed 0
/// failed a gateway bounding prefetch channel-wide on LavinMQ. Both limits hold at once on both
/// brokers, so the tighter one (the smaller non-zero) is the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrefetchBound {
    /// The consumer's own prefetch (`prefetch_count` of `/api/consumers`); 0: none.
    pub consumer: u64,
    /// Its channel's channel-wide prefetch (`global_prefetch_count`); 0: none, or the channel was
    /// not found.
    pub channel_global: u64,
}

impl PrefetchBound {
    /// The channel-wide prefetch in a channel's JSON (`GET /api/channels/{name}`), the same key
    /// on both brokers; 0 when absent.
    pub fn channel_global(channel: &Value) -> u64 {
        global_prefetch_count(channel)
    }

    /// The limit in force: the smaller of the non-zero limits; `None` when neither bounds the
    /// consumer (it may be handed a whole backlog).
    pub fn effective(&self) -> Option<u64> {
        [self.consumer, self.channel_global]
            .into_iter()
            .filter(|n| *n > 0)
            .min()
    }

    /// Whether the consumer is held to at most `bound` unacknowledged messages (TOP-2).
    pub fn within(&self, bound: u64) -> bool {
        self.effective().is_some_and(|n| n <= bound)
    }
}

#[cfg(test)]
mod tests;
