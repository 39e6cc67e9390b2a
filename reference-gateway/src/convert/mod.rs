//! Converting a classic queue to a quorum queue (SPEC §16, CLU-7): `fleet-gateway convert-inboxes`.
//!
//! Why it exists: a queue cannot change its type in place (a declare with another `x-queue-type`
//! is a 406, TOP-5), so a single-node fleet that moves to a cluster (`FLEET_QUEUE_TYPE=quorum`)
//! must move each inbox's messages out, delete the inbox, declare it quorum and move the messages
//! back. A gateway in quorum mode that meets a classic inbox reports that entity not ready and
//! names this command; it never consumes the inbox while the conversion is unfinished.
//!
//! What it converts, by name: `agent.<gid>.inbox.v2` (the inboxes), and also `control.<host>` and
//! `bridge.dlq` (a quorum-mode gateway declares those quorum too, CLU-2, and does not set up while
//! they are classic). The quorum arguments are exactly the gateway's: built by the same functions
//! ([`topology::inbox_arguments`](crate::topology::inbox_arguments) …) from the same configuration
//! ([`QueueArgs`](crate::config::QueueArgs)).
//!
//! How (for queue `Q`, temporary queue `T` = `Q.converting`, durable classic):
//! 1. every message of `Q` is moved to `T`, then `Q` is deleted (only if empty and unused);
//! 2. `Q` is declared quorum, every message of `T` is moved back, `Q` gets back the bindings its
//!    name implies (an inbox: its gid and `broadcast.all`; the gateway restores its groups' when
//!    it takes the inbox), then `T` is deleted.
//!
//! A move is `basic.get` from the source (unacked), a publish (confirmed, `mandatory`) with the
//! body and every property and header unchanged (messages are signed), then one multiple-ack of
//! the source per batch. The publish goes through a fanout exchange bound only to the destination
//! (`Q.converting.temp` → `T`, `Q.converting.back` → `Q`), which delivers it with the routing key
//! it was published with: the envelope's `to` ([`route_key`]), which a gateway checks the
//! delivery's routing key against. So the move is at-least-once and in order.
//!
//! Idempotent: a rerun after a kill at any point looks at what exists and finishes the job —
//! `Q` classic and no `T`: start; `Q` classic and `T`: finish step 1; no `Q` and `T`: step 2; `Q`
//! quorum and `T`: finish step 2; `Q` quorum and no `T`: nothing to do (exit 0). A kill between
//! a batch's confirm and its ack leaves that batch both at the head of the source and at the tail
//! of the destination; the rerun reads the destination's message ids first and skips (acks
//! without publishing) every source message whose id is already there, so nothing is duplicated
//! to the main. The id is the AMQP `message_id`, else the envelope's `msgId` header.
//!
//! One file per concern: [`plan`](mod@plan) decides (what a name converts, what a rerun finds
//! and does, what identifies a message for the dedup); [`moves`] acts on the broker (the steps
//! that move messages via `<queue>.converting`). This file holds what both report: errors and
//! outcomes.

pub mod moves;
pub mod plan;

pub use moves::{connect, convert_one, route_key};
pub use plan::{Found, Plan, Target, back_exchange, message_key, plan, temp_exchange};

use std::fmt;
use std::time::Duration;

/// The longest one broker step may take before the conversion gives up (it can be run again).
pub(crate) const STEP: Duration = Duration::from_secs(30);

/// Why a queue was not converted.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("{0:?} is not a queue convert-inboxes converts (agent.<gid>.inbox.v2, control.<host> or bridge.dlq)")]
    NotConvertible(String),
    #[error("no such queue {0} (and no {0}.converting: nothing to convert)")]
    NoSuchQueue(String),
    #[error(
        "{queue} exists with arguments that are neither this configuration's classic nor its quorum ones (other FLEET_INBOX_* / FLEET_DLQ_MAX_LENGTH than the gateway's?); not touched (broker: {broker})"
    )]
    OtherArguments { queue: String, broker: String },
    #[error(
        "{queue} has {consumers} consumer(s): a gateway still consumes it; stop that gateway (or run it with FLEET_QUEUE_TYPE=quorum, which leaves a classic queue alone) and run this again"
    )]
    InUse { queue: String, consumers: u32 },
    #[error("{queue} refused a moved message: {why}; the rest stays in {temp}: run this again later")]
    Refused { queue: String, temp: String, why: String },
    #[error("{what}: {source}")]
    Broker { what: String, source: lapin::Error },
    #[error("{what}: no answer from the broker within {STEP:?}")]
    Timeout { what: String },
    #[error("cannot connect: {0}")]
    Connect(String),
}

/// How one queue's conversion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Converted,
    /// An interrupted conversion finished.
    Resumed,
    AlreadyQuorum,
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Outcome::Converted => "converted to quorum",
            Outcome::Resumed => "converted to quorum (an interrupted conversion finished)",
            Outcome::AlreadyQuorum => "already quorum, nothing to do",
        })
    }
}

/// One queue's report: the line the command prints.
#[derive(Debug)]
pub struct Report {
    pub queue: String,
    /// Messages moved back into the quorum queue by this run.
    pub moved: u64,
    /// Copies skipped because the destination already held their id (left by a kill).
    pub skipped: u64,
    pub result: Result<Outcome, ConvertError>,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: moved {}, ", self.queue, self.moved)?;
        match &self.result {
            Ok(o) => write!(f, "{o}")?,
            Err(e) => write!(f, "FAILED: {e}")?,
        }
        if self.skipped > 0 {
            write!(f, " ({} duplicate(s) skipped)", self.skipped)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_line() {
        let r = Report {
            queue: "q".into(),
            moved: 200,
            skipped: 0,
            result: Ok(Outcome::Converted),
        };
        assert_eq!(r.to_string(), "q: moved 200, converted to quorum");
        let r = Report {
            queue: "q".into(),
            moved: 0,
            skipped: 0,
            result: Err(ConvertError::NoSuchQueue("q".into())),
        };
        assert_eq!(
            r.to_string(),
            "q: moved 0, FAILED: no such queue q (and no q.converting: nothing to convert)"
        );
        assert_eq!(temp_exchange("q"), "q.converting.temp");
        assert_eq!(back_exchange("q"), "q.converting.back");
    }
}
