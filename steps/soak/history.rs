//! The history of a soak run: what the caller of each operation saw ([`Seen`]: ok, failed or
//! unknown, classified from the tool's answer), what the main drained, and the state the soak's
//! steps keep in the world ([`SoakState`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::config::SoakConfig;
use super::fleet::SoakFleet;
use super::nemesis::Event;

/// The reason of a `failed` answer whose publish never left the caller's gateway (no connection,
/// no open channel, refused before any byte of it was written): a definite "not sent", unlike
/// `publish` — a publish whose confirm was lost, which may still have been routed ([C-16]).
pub(super) const NOT_CONNECTED: &str = "not_connected";

/// FAILED reasons that mean the worker's gateway did not inject the brief (SPEC §2.2, §5, §11),
/// `revoked`: a gateway that refuses to send while its own certificate is revoked (SPEC MEM-4
/// lets every receiver reject it; a gateway may say so before publishing), and
/// [`NOT_CONNECTED`]: the SEND never left the main's gateway. Every other reason,
/// `inject_timeout` and `publish` among them, leaves the outcome unknown.
const DEFINITE_REASONS: [&str; 8] = [
    "busy",
    "stopped",
    "no_such_entity",
    "maxlen",
    "expired",
    "not_submitted",
    "revoked",
    NOT_CONNECTED,
];

/// The reasons of a `bridge_reply` answer that mean nothing was published: a gateway that refuses
/// to send while its own certificate is revoked, and [`NOT_CONNECTED`] (the publish never left
/// the worker's gateway). (`no_route` is the broker's, PUB-2; `publish` is unknown, [C-16].)
const REPLY_NOT_SENT_REASONS: [&str; 2] = ["revoked", NOT_CONNECTED];

/// The outcome of a reply for which no call was made: its worker's MCP session could not be
/// opened (counted failed; distinct from a gateway's [`NOT_CONNECTED`]).
pub(super) const NO_SESSION: &str = "no_mcp_session";

/// What the caller of one operation saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Seen {
    Ok,
    Failed,
    Unknown,
}

impl Seen {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Seen::Ok => "ok",
            Seen::Failed => "failed",
            Seen::Unknown => "unknown",
        }
    }
}

/// One operation of the history.
#[derive(Debug, Clone)]
pub(super) struct Op {
    /// `bridge_send` or `bridge_reply`.
    pub(super) tool: &'static str,
    /// Names its worker: `soak brief w1 #7`, `soak reply w2 #3`.
    pub(super) text: String,
    pub(super) seen: Seen,
    /// What the caller got, for the outcome counts (`injected`, `failed/busy`, `error: …`).
    pub(super) outcome: String,
    /// When the call began and ended, since the run began: an *unknown* is put down to the strike
    /// it overlapped ([`blame`]).
    pub(super) span: (Duration, Duration),
    /// The `msgId` the tool answered with, if any (`bridge_send` always has one, CONTRACT).
    pub(super) msg_id: Option<String>,
    /// The host whose gateway signed the message (the caller's), and the host it was for.
    pub(super) from_host: String,
    pub(super) to_host: String,
}

impl Op {
    /// Why a *failed* operation failed, for grouping: the gateway's reason (`busy`,
    /// `not_connected`, …), `no_route`, [`NO_SESSION`], or `rejected_revoked` for one the soak
    /// counted failed on the receivers' evidence ([`super::revoked`]).
    pub(super) fn reason(&self) -> &str {
        let o = self.outcome.as_str();
        match o.rsplit_once('→') {
            Some((_, after)) => after,
            None => o.strip_prefix("failed/").unwrap_or(o),
        }
    }

    /// Whether the operation's message never left its caller's gateway, on the gateway's own word
    /// (a `failed` answer with reason [`NOT_CONNECTED`]): then any arrival at all, even a brief
    /// typed and never submitted, is a failed operation delivered.
    pub(super) fn never_left(&self) -> bool {
        self.seen == Seen::Failed && self.outcome == format!("failed/{NOT_CONNECTED}")
    }
}

/// The `msgId` of a tool's answer.
pub(super) fn msg_id_of(v: &Value) -> Option<String> {
    v["msgId"].as_str().map(str::to_string)
}

/// The strike an operation's outcome is put down to: the one under way when the call began (its
/// message went out then: a brief that then waits out its inject bound is that strike's, not one
/// that began while it waited), else the last one that began before the call ended and had not
/// been over for longer than `after` when the call began (a gateway back from a strike still
/// reconnects, re-consumes and redelivers for a while). `None`: no strike was near.
pub(super) fn blame(events: &[Event], span: (Duration, Duration), after: Duration) -> Option<&Event> {
    events
        .iter()
        .filter(|e| e.at <= span.0 && span.0 <= e.at + e.took)
        .max_by_key(|e| e.at)
        .or_else(|| {
            events
                .iter()
                .filter(|e| e.at <= span.1 && e.at + e.took + after >= span.0)
                .max_by_key(|e| e.at)
        })
}

/// One message the main drained.
#[derive(Debug, Clone)]
pub(super) struct Drain {
    pub(super) kind: String,
    pub(super) text: String,
    /// Which life of the main's gateway drained it (0 = the first).
    pub(super) life: u32,
}

/// The recorded history of a soak run.
#[derive(Default)]
pub struct SoakState {
    pub(super) config: Option<SoakConfig>,
    /// Whether the scenario has the broker to itself (it may restart it).
    pub(super) exclusive: bool,
    pub(super) started: Option<Instant>,
    pub(super) started_unix_ms: u128,
    pub(super) ran_for: Duration,
    pub(super) briefs_per_worker: usize,
    pub(super) replies_per_worker: usize,
    pub(super) every: Duration,
    /// The strikes the operations are spread over (two rounds of the nemesis cycle).
    pub(super) spread: usize,
    pub(super) ops: Vec<Op>,
    pub(super) events: Vec<Event>,
    /// Strikes of the cycle that cannot happen in this run, with why.
    pub(super) off: BTreeMap<&'static str, String>,
    pub(super) drains: Vec<Drain>,
    pub(super) polls_ok: usize,
    pub(super) polls_unknown: usize,
    /// The life of the main's gateway: bumped whenever the nemesis restarts it.
    pub(super) main_life: Arc<AtomicU32>,
    /// On a cluster: one cuttable link per node ([`super::nodes`]); a single node's is the
    /// world's `link`.
    pub(super) links: Vec<fleet_conformance::proxy::Proxy>,
    /// On a cluster: whether it was whole again once the strikes were over (else why not).
    pub(super) whole_at_end: Option<Result<(), String>>,
    /// The soak's hosts on certificates, when the nemesis rotates keys or revokes certificates
    /// ([`super::certs`]).
    pub(super) fleet: Option<SoakFleet>,
}

pub(super) fn classify_send(v: &anyhow::Result<Value>) -> (Seen, String) {
    match v {
        Ok(v) => {
            let status = v["status"].as_str().unwrap_or("?");
            let reason = v["reason"].as_str().unwrap_or("-");
            match status {
                "injected" => (Seen::Ok, "injected".into()),
                "no_route" => (Seen::Failed, "no_route".into()),
                "failed" if DEFINITE_REASONS.contains(&reason) => (Seen::Failed, format!("failed/{reason}")),
                // inject_timeout, `publish`: a publish lost with its connection ([C-16]), anything
                // else.
                _ => (Seen::Unknown, format!("{status}/{reason}")),
            }
        }
        Err(e) => (Seen::Unknown, error_label(e)),
    }
}

pub(super) fn classify_reply(v: &Result<Value, fleet_conformance::mcp::McpError>) -> (Seen, String) {
    match v {
        Ok(v) if v["msgId"].is_string() => (Seen::Ok, "sent".into()),
        Ok(v) if v["status"] == "no_route" => (Seen::Failed, "no_route".into()),
        Ok(v)
            if v["status"] == "failed"
                && v["reason"]
                    .as_str()
                    .is_some_and(|r| REPLY_NOT_SENT_REASONS.contains(&r)) =>
        {
            (Seen::Failed, format!("failed/{}", v["reason"].as_str().unwrap_or("-")))
        }
        // `failed/publish` (the reference gateway's publish failure: connection lost before the
        // confirm, [C-16]) or anything else: it may have been routed.
        Ok(v) => (
            Seen::Unknown,
            format!(
                "{}/{}",
                v["status"].as_str().unwrap_or("?"),
                v["reason"].as_str().unwrap_or("-")
            ),
        ),
        Err(e) => (Seen::Unknown, mcp_error_label(e)),
    }
}

/// A short, groupable label for an MCP error (its kind, not its arguments): read from the
/// suite's own error type, never from its wording.
fn error_label(e: &anyhow::Error) -> String {
    match e.downcast_ref::<fleet_conformance::mcp::McpError>() {
        Some(e) => mcp_error_label(e),
        None => "error: other".into(),
    }
}

fn mcp_error_label(e: &fleet_conformance::mcp::McpError) -> String {
    use fleet_conformance::mcp::McpError;
    let kind = match e {
        McpError::Deadline { .. } => "deadline",
        McpError::SessionDied { .. } => "session died",
        McpError::Connect { .. } => "connect",
        McpError::Tool { .. } => "tool error",
        McpError::Contract(_) => "contract violation",
        McpError::Unlisted { .. } => "tool not listed",
        McpError::Call { .. } | McpError::Closed { .. } => "other",
    };
    format!("error: {kind}")
}

/// Records what one `bridge_poll` drained.
pub(super) fn record_poll(
    v: &Result<Value, fleet_conformance::mcp::McpError>,
    life: u32,
    drains: &mut Vec<Drain>,
) -> bool {
    match v {
        Ok(v) => {
            for m in fleet_conformance::contract::poll_messages(v).unwrap_or_default().iter() {
                drains.push(Drain {
                    kind: m["kind"].as_str().unwrap_or("?").to_string(),
                    text: m["text"].as_str().unwrap_or_default().to_string(),
                    life,
                });
            }
            true
        }
        Err(_) => false,
    }
}
