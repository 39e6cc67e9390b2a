//! Dropping a host from the roster once it has no valid key left (MEM-1, MEM-4).
//!
//! A host removed from the peers file and holding no valid certificate, or whose last certificate
//! expired or was revoked, is gone: its messages are rejected by the trust state at once, and its
//! roster entries — its entities and its `_gateway` — are dropped together, within 2 s of the
//! change (CONTRACT §12), rather than left to their `ttlMs`. The sweep compares the hosts holding
//! a valid key with the previous sweep's; a host that lost its last one is dropped again on the
//! sweeps of the next few seconds, since a presence verified just before the change may be
//! applied just after it.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::envelope::now_ms;
use crate::gateway::Gateway;
use crate::presence::Roster;

/// How long a host that lost its last key keeps being dropped.
const DROP_AGAIN_FOR: Duration = Duration::from_secs(3);

impl Roster {
    /// Removes every entry of `host`, its `_gateway` included; returns the gids removed.
    pub fn drop_host(&self, host: &str) -> Vec<String> {
        let mut removed = Vec::new();
        let mut m = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.retain(|_, e| {
            let gone = e.host == host;
            if gone {
                removed.push(e.gid.clone());
            }
            !gone
        });
        removed
    }
}

/// The sweep's memory between two rounds.
#[derive(Default)]
pub struct Sweeper {
    valid: BTreeSet<String>,
    lost: HashMap<String, Instant>,
}

impl Sweeper {
    /// One round: hosts that lost their last valid key since the last round are dropped.
    pub fn sweep(&mut self, gw: &Gateway) {
        let valid = gw.membership.trust.valid_hosts(now_ms());
        for host in self.valid.difference(&valid) {
            warn!(%host, "host has no valid key left (peers file, certificate expiry or revocation): its messages are rejected and its roster entries dropped");
            self.lost.insert(host.clone(), Instant::now());
        }
        self.lost
            .retain(|host, since| !valid.contains(host) && since.elapsed() < DROP_AGAIN_FOR);
        for host in self.lost.keys() {
            let dropped = gw.roster.drop_host(host);
            if !dropped.is_empty() {
                info!(%host, entries = dropped.len(), "roster entries of a host without a valid key dropped");
            }
        }
        self.valid = valid;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::presence::PresenceBody;

    fn up(role: &str) -> PresenceBody {
        serde_json::from_value(serde_json::json!({"state":"up","role":role,"ttlMs":60000})).expect("body")
    }

    #[test]
    fn a_dropped_host_loses_every_entry_and_only_its_own() {
        let r = Roster::default();
        r.apply("a", "g1", &up("worker"));
        r.apply("a", "g2", &up("main"));
        r.apply("a", "_gateway", &up("gateway"));
        r.apply("b", "g3", &up("worker"));
        r.apply("b", "_gateway", &up("gateway"));
        let mut gone = r.drop_host("a");
        gone.sort();
        assert_eq!(gone, vec!["_gateway", "g1", "g2"]);
        let left: Vec<_> = r.snapshot().into_iter().map(|e| (e.host, e.gid)).collect();
        assert_eq!(left, vec![("b".into(), "_gateway".into()), ("b".into(), "g3".into())]);
    }
}
