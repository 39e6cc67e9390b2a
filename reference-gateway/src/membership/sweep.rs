//! Dropping a host from the roster once it has no valid key left (MEM-1, MEM-4).
//!
//! A host removed from the peers file and holding no valid certificate, or whose last certificate
//! expired or was revoked, is gone: its messages are rejected by the trust state at once, and its
//! roster entries — its entities and its `_gateway` — are dropped together, within 2 s of the
//! change (CONTRACT §12), rather than left to their `ttlMs`. The sweep compares the hosts holding
//! a valid key with the hosts the roster lists, every round (500 ms).

use std::collections::BTreeSet;

use tracing::{info, warn};

use crate::envelope::now_ms;
use crate::gateway::Gateway;
use crate::presence::Roster;

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

    /// Every host with at least one entry (live or not yet swept by its ttl).
    pub fn hosts(&self) -> BTreeSet<String> {
        let m = self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        m.values().map(|e| e.host.clone()).collect()
    }
}

/// The sweep's memory between two rounds: the hosts already dropped (to log each loss once).
#[derive(Default)]
pub struct Sweeper {
    dropped: BTreeSet<String>,
}

impl Sweeper {
    /// One round: every host the roster lists that holds no valid key now is dropped. Judged on
    /// the roster itself, not on a difference with the last round: a host whose key was learned
    /// and lost between two rounds (a certificate seen just before its CA left the trust file)
    /// is dropped too, and a presence verified just before a change but applied after it is
    /// dropped again on the next round.
    pub fn sweep(&mut self, gw: &Gateway) {
        let now = now_ms();
        let trust = &gw.membership.trust;
        let listed = gw.roster.hosts();
        self.dropped
            .retain(|h| listed.contains(h) || !trust.has_valid_key(h, now));
        for host in listed {
            if host == gw.cfg.host_id || trust.has_valid_key(&host, now) {
                self.dropped.remove(&host);
                continue;
            }
            let dropped = gw.roster.drop_host(&host);
            if self.dropped.insert(host.clone()) {
                warn!(%host, entries = dropped.len(), "host has no valid key left (peers file, certificate expiry or revocation): its messages are rejected and its roster entries dropped");
            } else if !dropped.is_empty() {
                info!(%host, entries = dropped.len(), "roster entries of a host without a valid key dropped");
            }
        }
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
