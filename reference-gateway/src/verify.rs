//! The verification chain of SPEC §3.2–3.3 and the replay bounds of SIG-3.
//!
//! Checks run in SPEC order and stop at the first failure, which names the check: envelope form
//! (ENV-2) → signature under `host`'s pinned key (SIG-2.1) → `from` lives on `host` (SIG-2.2,
//! decided by the caller with the [C-7] grace) → `to` equals the routing key (SIG-2.3) → the inbox
//! owner (SIG-4) → replay bounds (SIG-3). A failure is never acted on: it is rejected to the DLX.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use crate::envelope::{Envelope, EnvelopeError, now_ms};
use crate::signing::SigError;

/// A failed check. `reason()` is the short label used in logs and metrics.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("envelope: {0}")]
    Envelope(#[from] EnvelopeError),
    #[error("signature: {0}")]
    Signature(#[from] SigError),
    #[error("from {from:?} does not live on host {host:?} per signed presence")]
    FromNotOnHost { from: String, host: String },
    #[error("to {to:?} differs from the routing key {key:?}")]
    ToMismatch { to: String, key: String },
    #[error("inbox of {owner:?} received a message for {to:?}")]
    NotOwner { owner: String, to: String },
    #[error("expired at {expires_at} (now {now})")]
    Expired { expires_at: u64, now: u64 },
    #[error("ts {ts} lies more than the allowed skew in the future (now {now})")]
    FromFuture { ts: u64, now: u64 },
    #[error("msgId {0} was already seen (replay)")]
    Replay(String),
    #[error("presence: {0}")]
    Presence(String),
}

impl Rejection {
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Envelope(_) => "envelope",
            Rejection::Signature(_) => "signature",
            Rejection::FromNotOnHost { .. } => "from_not_on_host",
            Rejection::ToMismatch { .. } => "to_mismatch",
            Rejection::NotOwner { .. } => "not_owner",
            Rejection::Expired { .. } => "expired",
            Rejection::FromFuture { .. } => "future_ts",
            Rejection::Replay(_) => "replay",
            Rejection::Presence(_) => "presence",
        }
    }
}

/// SIG-2 step 3: `to` equals the routing key.
pub fn check_to(env: &Envelope, routing_key: &str) -> Result<(), Rejection> {
    if env.to == routing_key {
        Ok(())
    } else {
        Err(Rejection::ToMismatch {
            to: env.to.clone(),
            key: routing_key.to_string(),
        })
    }
}

/// SIG-4: an inbox takes only messages for its owner or a broadcast key the owner is bound to.
pub fn check_owner(env: &Envelope, owner: &str, groups: &[String]) -> Result<(), Rejection> {
    let ok = env.to == owner
        || env.to == "broadcast.all"
        || env
            .to
            .strip_prefix("broadcast.")
            .is_some_and(|g| groups.iter().any(|x| x == g));
    if ok {
        Ok(())
    } else {
        Err(Rejection::NotOwner {
            owner: owner.to_string(),
            to: env.to.clone(),
        })
    }
}

/// SIG-3 time bounds: not expired, `ts` not beyond the allowed skew in the future.
pub fn check_time(env: &Envelope, skew_ms: u64) -> Result<(), Rejection> {
    let now = now_ms();
    if env.expires_at <= now {
        return Err(Rejection::Expired {
            expires_at: env.expires_at,
            now,
        });
    }
    if env.ts > now + skew_ms {
        return Err(Rejection::FromFuture { ts: env.ts, now });
    }
    Ok(())
}

/// The bounded seen-set of SIG-3 / FWD-6: msgIds this gateway has completed (acked or drained),
/// each kept until its `expiresAt`, and capped so a flood cannot exhaust memory (the oldest
/// expiries go first — they are the closest to being rejected as expired anyway).
pub struct SeenSet {
    cap: usize,
    inner: Mutex<SeenInner>,
}

#[derive(Default)]
struct SeenInner {
    by_id: HashMap<String, u64>,
    by_expiry: BTreeMap<(u64, String), ()>,
}

impl SeenSet {
    pub fn new(cap: usize) -> SeenSet {
        SeenSet {
            cap,
            inner: Mutex::new(SeenInner::default()),
        }
    }

    pub fn contains(&self, msg_id: &str) -> bool {
        self.inner
            .lock()
            .map(|i| i.by_id.contains_key(msg_id))
            .unwrap_or(false)
    }

    /// Records `msg_id`; returns false when it was already there.
    pub fn insert(&self, msg_id: &str, expires_at: u64) -> bool {
        let Ok(mut i) = self.inner.lock() else {
            return true;
        };
        let now = now_ms();
        while let Some(((exp, id), ())) =
            i.by_expiry.first_key_value().map(|(k, v)| (k.clone(), *v))
        {
            if exp > now && i.by_id.len() < self.cap {
                break;
            }
            i.by_expiry.remove(&(exp, id.clone()));
            i.by_id.remove(&id);
        }
        if i.by_id.contains_key(msg_id) {
            return false;
        }
        i.by_id.insert(msg_id.to_string(), expires_at);
        i.by_expiry.insert((expires_at, msg_id.to_string()), ());
        true
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|i| i.by_id.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seen_set_dedups_and_forgets_expired_entries() {
        let s = SeenSet::new(10);
        let later = now_ms() + 60_000;
        assert!(s.insert("a", later));
        assert!(!s.insert("a", later));
        assert!(s.insert("old", now_ms() - 1));
        assert!(s.insert("b", later), "inserting sweeps expired entries");
        assert!(!s.contains("old"));
    }

    #[test]
    fn seen_set_is_bounded() {
        let s = SeenSet::new(3);
        let later = now_ms() + 60_000;
        for i in 0..10 {
            s.insert(&format!("m{i}"), later + i);
        }
        assert!(s.len() <= 3);
        assert!(s.contains("m9"));
    }
}
