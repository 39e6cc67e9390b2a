//! The verification chain of SPEC §3.2–3.3 and the replay bounds of SIG-3.
//!
//! Checks run in SPEC order and stop at the first failure, which names the check: envelope form
//! (ENV-2) → signature under `host`'s pinned key (SIG-2.1) → `from` lives on `host` (SIG-2.2,
//! decided by the caller with the [C-7] grace) → `to` equals the routing key (SIG-2.3) → the inbox
//! owner (SIG-4) → replay bounds (SIG-3). A failure is never acted on: it is rejected to the DLX.
//! Under SPEC §18 the signature check may also fail on a certificate (`revoked`, `cert_expired`,
//! `certificate`: see `membership::trust`).

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
    #[error("body of {len} bytes exceeds the limit of {max} (FLEET_MAX_BODY_BYTES)")]
    Oversized { len: usize, max: usize },
    #[error("a {kind} does not belong on {channel}")]
    WrongKind { kind: String, channel: String },
    #[error("gid {gid:?} is live on host {holder:?}; host {claimant:?} may not claim it (PRS-3)")]
    Conflict {
        gid: String,
        holder: String,
        claimant: String,
    },
    /// MEM-4: the signing key, or the certificate over it, is revoked by FLEET_REVOKED_FILE.
    #[error("revoked: {0}")]
    Revoked(String),
    /// MEM-4: the certificate over the signing key is past its validity.
    #[error("certificate expired: {0}")]
    CertExpired(String),
    /// MEM-2: any other failed check of a certificate the message relies on.
    #[error("certificate: {0}")]
    Certificate(String),
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
            Rejection::Oversized { .. } => "oversized",
            Rejection::WrongKind { .. } => "wrong_kind",
            Rejection::Conflict { .. } => "presence_conflict",
            Rejection::Revoked(_) => "revoked",
            Rejection::CertExpired(_) => "cert_expired",
            Rejection::Certificate(_) => "certificate",
        }
    }
}

/// The body-size bound (FLEET_MAX_BODY_BYTES), checked before any signature work.
pub fn check_size(body: &[u8], max: usize) -> Result<(), Rejection> {
    if body.len() <= max {
        Ok(())
    } else {
        Err(Rejection::Oversized { len: body.len(), max })
    }
}

/// An inbox (`bridge.msg`) takes only the kinds SPEC §2.1 routes there, and a broadcast key only
/// for a BROADCAST (a SEND to `broadcast.all` would inject into every worker and make each
/// gateway answer with INJECTED — an amplifier).
pub fn check_inbox_kind(env: &Envelope) -> Result<(), Rejection> {
    use crate::envelope::Kind;
    let broadcast_key = env.to.starts_with("broadcast.");
    let ok = match env.kind {
        Kind::Presence | Kind::Spawn | Kind::Stop => false,
        Kind::Broadcast => broadcast_key,
        _ => !broadcast_key,
    };
    if ok {
        Ok(())
    } else {
        Err(Rejection::WrongKind {
            kind: env.kind.to_string(),
            channel: format!("bridge.msg with key {:?}", env.to),
        })
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

/// The seen-set key of a message at one inbox: copies of one broadcast share a msgId but reach
/// several inboxes, so dedup is per recipient.
pub fn seen_key(owner: &str, msg_id: &str) -> String {
    format!("{owner}/{msg_id}")
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

    /// The set, even after a panic elsewhere poisoned its lock: every operation leaves it
    /// consistent (each is a few map updates), and dedup is a MUST — a poisoned lock read as
    /// "not seen" would silently switch replay protection off.
    fn lock(&self) -> std::sync::MutexGuard<'_, SeenInner> {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn contains(&self, msg_id: &str) -> bool {
        self.lock().by_id.contains_key(msg_id)
    }

    /// Forgets `msg_id` (a held delivery that died with its connection: the broker redelivers
    /// it, and that copy is the same message, not a replay).
    pub fn remove(&self, msg_id: &str) {
        let mut i = self.lock();
        if let Some(exp) = i.by_id.remove(msg_id) {
            i.by_expiry.remove(&(exp, msg_id.to_string()));
        }
    }

    /// Records `msg_id`; returns false when it was already there.
    pub fn insert(&self, msg_id: &str, expires_at: u64) -> bool {
        let mut i = self.lock();
        let now = now_ms();
        while let Some(((exp, id), ())) = i.by_expiry.first_key_value().map(|(k, v)| (k.clone(), *v)) {
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
        self.lock().by_id.len()
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

    fn env(kind: crate::envelope::Kind, to: &str) -> Envelope {
        Envelope {
            v: "1".into(),
            kind,
            msg_id: "0b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            trace_id: "1b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            from: "2b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e".into(),
            to: to.into(),
            host: "a".into(),
            turn_id: None,
            spawn_id: None,
            corr_id: None,
            ts: 1,
            expires_at: 2,
            sig: String::new(),
        }
    }

    #[test]
    fn inbox_kinds_and_broadcast_keys_go_together() {
        use crate::envelope::Kind;
        assert!(check_inbox_kind(&env(Kind::Send, "3b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e")).is_ok());
        assert!(check_inbox_kind(&env(Kind::Broadcast, "broadcast.all")).is_ok());
        assert!(check_inbox_kind(&env(Kind::Send, "broadcast.all")).is_err());
        assert!(check_inbox_kind(&env(Kind::Broadcast, "3b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e")).is_err());
        assert!(check_inbox_kind(&env(Kind::Spawn, "3b0e3c1e-6f6e-4c1a-9d7e-5f4a3b2c1d0e")).is_err());
        assert!(check_inbox_kind(&env(Kind::Presence, "x")).is_err());
    }

    #[test]
    fn body_size_is_bounded() {
        assert!(check_size(&[0u8; 10], 10).is_ok());
        assert_eq!(check_size(&[0u8; 11], 10).map_err(|e| e.reason()), Err("oversized"));
    }

    #[test]
    fn a_poisoned_seen_set_still_dedups() {
        let s = std::sync::Arc::new(SeenSet::new(10));
        let later = now_ms() + 60_000;
        assert!(s.insert("a", later));
        let s2 = std::sync::Arc::clone(&s);
        let _ = std::thread::spawn(move || {
            let _g = s2.inner.lock();
            panic!("poison the lock");
        })
        .join();
        assert!(s.inner.is_poisoned());
        assert!(s.contains("a"), "a poisoned lock must not read as not seen");
        assert!(!s.insert("a", later), "a poisoned lock must not accept a replay");
        s.remove("a");
        assert!(!s.contains("a"));
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
