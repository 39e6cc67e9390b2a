//! Presences that wait for their host's key ([C-21] 7).
//!
//! A receiver that holds no key for a host (it just started, or the host just joined) may meet
//! the host's entity presences before the host's `_gateway` presence, whose certificate makes its
//! key known: `roster.<host>` interleaves every host's heartbeats. Dead-lettering them would count
//! a certified host's registrations as attacks and drop its entities from this roster for an
//! interval. Such a presence is kept here instead — acknowledged, its envelope and body copied —
//! until the host's next `_gateway` presence (at most H away): it is then verified and applied,
//! or dropped without a dead letter (presence is renewed anyway). Bounded per host and in all, so
//! a host that will never have a key cannot grow it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::envelope::Envelope;

/// Presences kept per host, at most (a host's entities' heartbeats within one H).
const PER_HOST: usize = 1024;

/// Presences kept in all, at most.
const IN_ALL: usize = 16_384;

/// One presence waiting for its host's key.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub env: Envelope,
    pub body: Vec<u8>,
    pub routing_key: String,
    at: Instant,
}

/// The presences waiting, by host.
#[derive(Debug, Default)]
pub struct WaitingPresences {
    hosts: Mutex<HashMap<String, Vec<Waiting>>>,
}

impl WaitingPresences {
    /// Keeps a presence of `env.host` until its `_gateway` presence comes, unless that would pass
    /// a bound (then it is dropped at once). Returns how many were dropped, this one included, for
    /// being over a bound or older than `ttl`.
    pub fn hold(&self, env: Envelope, body: &[u8], routing_key: &str, ttl: Duration) -> usize {
        let now = Instant::now();
        let mut hosts = self.hosts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut dropped = 0;
        hosts.retain(|_, waiting| {
            let before = waiting.len();
            waiting.retain(|w| now.duration_since(w.at) < ttl);
            dropped += before - waiting.len();
            !waiting.is_empty()
        });
        let total: usize = hosts.values().map(Vec::len).sum();
        let waiting = hosts.entry(env.host.clone()).or_default();
        if total >= IN_ALL || waiting.len() >= PER_HOST {
            return dropped + 1;
        }
        waiting.push(Waiting {
            env,
            body: body.to_vec(),
            routing_key: routing_key.to_string(),
            at: now,
        });
        dropped
    }

    /// The presences of `host` that waited at most `ttl`, in the order they came; the others are
    /// counted in the second value (dropped).
    pub fn release(&self, host: &str, ttl: Duration) -> (Vec<Waiting>, usize) {
        let now = Instant::now();
        let taken = self
            .hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(host)
            .unwrap_or_default();
        let n = taken.len();
        let fresh: Vec<Waiting> = taken.into_iter().filter(|w| now.duration_since(w.at) < ttl).collect();
        let stale = n - fresh.len();
        (fresh, stale)
    }

    /// How many presences wait now.
    pub fn len(&self) -> usize {
        self.hosts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .map(Vec::len)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::envelope::Kind;

    fn presence(host: &str, from: &str) -> Envelope {
        Envelope {
            v: "1".into(),
            kind: Kind::Presence,
            msg_id: crate::envelope::new_uuid(),
            trace_id: crate::envelope::new_uuid(),
            from: from.into(),
            to: format!("roster.{host}.{from}"),
            host: host.into(),
            turn_id: None,
            spawn_id: None,
            corr_id: None,
            ts: 0,
            expires_at: 0,
            sig: String::new(),
        }
    }

    #[test]
    fn a_hosts_presences_wait_for_it_in_order_and_no_longer_than_ttl() {
        let w = WaitingPresences::default();
        let ttl = Duration::from_secs(60);
        assert_eq!(w.hold(presence("x", "x1"), b"{}", "roster.x.x1", ttl), 0);
        assert_eq!(w.hold(presence("x", "x2"), b"{}", "roster.x.x2", ttl), 0);
        assert_eq!(w.hold(presence("y", "y1"), b"{}", "roster.y.y1", ttl), 0);
        let (x, stale) = w.release("x", ttl);
        assert_eq!(stale, 0);
        let froms: Vec<&str> = x.iter().map(|p| p.env.from.as_str()).collect();
        assert_eq!(froms, ["x1", "x2"]);
        assert_eq!(w.len(), 1, "y still waits");
        let (y, stale) = w.release("y", Duration::ZERO);
        assert_eq!((y.len(), stale), (0, 1), "older than the ttl: dropped");
        assert!(w.is_empty());
    }

    #[test]
    fn a_host_cannot_grow_it_past_its_bound() {
        let w = WaitingPresences::default();
        let ttl = Duration::from_secs(60);
        for _ in 0..PER_HOST {
            assert_eq!(w.hold(presence("x", "x1"), b"{}", "k", ttl), 0);
        }
        assert_eq!(w.hold(presence("x", "x1"), b"{}", "k", ttl), 1, "over the bound");
        assert_eq!(w.len(), PER_HOST);
    }
}
