//! Presence (SPEC §8): heartbeat bodies and the union roster view.
//!
//! Every gateway heartbeats its entities and itself on `bridge.roster`; every gateway keeps the
//! union view from its `roster.<host>` queue. The view is soft state: an entry lives until its
//! `ttlMs` passes without a heartbeat or a `down` arrives, and a restart rebuilds it from
//! heartbeats. Verification (SIG-2 step 2) asks it whether a `from` lives on a `host`.
//!
//! This module holds what both directions share, the PRESENCE body and the roster routing keys;
//! one file per direction:
//! - [`roster`] — what this gateway knows of others: the view (entries, renewal, drops, PRS-3
//!   conflicts) and the roster consumer that folds verified heartbeats into it
//! - [`sync`] — how far the roster consumer has caught up ([C-10])
//! - [`heartbeats`] — what this gateway sends: per-entity heartbeats, host batches (PRB), the
//!   `_gateway` heartbeat, `down`s

pub mod consumer;
pub mod heartbeats;
pub mod roster;
pub mod sync;

pub use heartbeats::STATUS_READS_IN_FLIGHT;
pub use roster::{Applied, BatchApplied, Roster, RosterEntry};
pub use sync::RosterSync;

use serde::{Deserialize, Serialize};

/// The body of a PRESENCE message (§2.2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PresenceBody {
    pub state: String,
    pub role: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default = "unknown")]
    pub agent_status: String,
    pub ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<String>>,
    /// Extension: a worker's parent main, so peers can route replies and check ownership.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// PRB-1: the optional capabilities the sending gateway declares (`_gateway` entry only).
    /// A `_gateway` entry without `presence-batch` is an old gateway, for which PRB-4 keeps
    /// per-entity heartbeats going.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// PRB-1: every live local entity of the sending host (`_gateway` entry only). Absent means
    /// "not a batch" (an old gateway's heartbeat), which is not the same as an empty list (a
    /// batching host with no entities left: all of them are `down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<Vec<BatchEntry>>,
    /// MEM-2: the sending gateway's OpenSSH host certificate (`_gateway` entry only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
}

/// The capability a batching gateway declares on its `_gateway` heartbeat (SPEC §17).
pub const PRESENCE_BATCH: &str = "presence-batch";

/// One entry of a host-batched heartbeat (PRB-1). Unknown fields are ignored ([C-17]), like in
/// every body this gateway reads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BatchEntry {
    pub gid: String,
    #[serde(default = "up")]
    pub state: String,
    pub role: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default = "unknown")]
    pub agent_status: String,
    /// Extension, as on a per-entity PRESENCE: a worker's parent main.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

fn up() -> String {
    "up".into()
}

impl PresenceBody {
    /// Whether this is a `_gateway` heartbeat of a gateway that batches its presence (PRB-1).
    pub fn batches(&self) -> bool {
        self.capabilities
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c == PRESENCE_BATCH))
    }
}

impl BatchEntry {
    /// The per-entity body this entry stands for: the batch's `ttlMs` applies to every entry.
    fn as_body(&self, ttl_ms: u64) -> PresenceBody {
        PresenceBody {
            state: self.state.clone(),
            role: self.role.clone(),
            groups: self.groups.clone(),
            agent_status: self.agent_status.clone(),
            ttl_ms,
            profiles: None,
            parent: self.parent.clone(),
            capabilities: None,
            entities: None,
            cert: None,
        }
    }
}

fn unknown() -> String {
    "unknown".into()
}

/// `roster.<host>.<gid>`.
pub fn roster_key(host: &str, gid: &str) -> String {
    format!("roster.{host}.{gid}")
}

/// Splits `roster.<host>.<gid>` (host ids hold no dots).
pub fn parse_roster_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("roster.")?;
    let (host, gid) = rest.split_once('.')?;
    if host.is_empty() || gid.is_empty() {
        None
    } else {
        Some((host, gid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_body_fields_are_ignored() {
        // [C-17]: a receiver that rejected them would make PRB-1 a rejection every H.
        let b: PresenceBody = serde_json::from_str(
            r#"{"state":"up","role":"gateway","ttlMs":3000,"future":{"x":1},
                "entities":[{"gid":"g","role":"worker","novel":true}]}"#,
        )
        .expect("unknown fields are ignored");
        assert_eq!(b.entities.map(|e| e[0].state.clone()), Some("up".to_string()));
    }

    #[test]
    fn roster_keys_parse() {
        assert_eq!(parse_roster_key("roster.host-a.abc"), Some(("host-a", "abc")));
        assert_eq!(parse_roster_key("roster.host-a._gateway"), Some(("host-a", "_gateway")));
        assert_eq!(parse_roster_key("roster.x"), None);
    }
}
