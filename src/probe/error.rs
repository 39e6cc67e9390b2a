//! What can go wrong in the wire probe.

/// A probe failure.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("probe cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("probe AMQP error: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("the broker nacked the probe's publish to {exchange:?} · {routing_key:?}")]
    Nacked { exchange: String, routing_key: String },
    #[error("{0}")]
    Timeout(#[from] crate::timing::WaitTimeout),
    #[error("the probe's fetch from a tap ended abnormally: {0}")]
    Fetch(String),
}
