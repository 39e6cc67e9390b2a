//! How far the roster consumer has caught up ([C-10]): the marker bookkeeping (the wait
//! verification's grace for an unknown sender uses is [`super::consumer`]'s).
//!
//! Its own file because it joins both directions: the marker is an own heartbeat
//! ([`super::heartbeats`]) that comes back through the roster consumer ([`super::roster`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// How far the roster consumer has caught up ([C-10]).
///
/// SIG-2's grace for an unknown `from` must count from the moment the roster consumer has
/// nothing older pending: after a freeze (SIGSTOP, a long GC pause, a loaded machine) or a slow
/// consumer, `roster.<host>` may still hold a backlog of heartbeats that would make the sender
/// known. The queue is FIFO, so a marker tells: the gateway's own `_gateway` heartbeat, published
/// at instant T, comes back through `roster.<host>` only after everything queued before T was
/// applied. No extra message kind is needed — a heartbeat more is ordinary presence.
#[derive(Default)]
pub struct RosterSync {
    /// Own `_gateway` heartbeats on their way back: msgId → when they were published.
    pending: Mutex<BTreeMap<String, tokio::time::Instant>>,
    /// The publish instant of the newest own heartbeat the roster consumer has applied (or when
    /// the current roster queue was declared: a fresh queue has no backlog).
    caught_up: Mutex<Option<tokio::time::Instant>>,
    /// When the roster consumer last handled a delivery (a slow consumer is waited for; only
    /// one that stopped making progress is given up on).
    progress: Mutex<Option<tokio::time::Instant>>,
    changed: tokio::sync::Notify,
}

impl RosterSync {
    /// A fresh roster queue (connect or reconnect): nothing is pending in it.
    pub fn reset(&self, now: tokio::time::Instant) {
        lock(&self.pending).clear();
        *lock(&self.caught_up) = Some(now);
        self.changed.notify_waiters();
    }

    /// The roster consumer handled one delivery.
    pub fn progressed(&self) {
        *lock(&self.progress) = Some(tokio::time::Instant::now());
    }

    /// When the roster consumer last handled a delivery.
    pub fn last_progress(&self) -> Option<tokio::time::Instant> {
        *lock(&self.progress)
    }

    /// Records an own heartbeat about to be published.
    pub fn sent(&self, msg_id: &str, at: tokio::time::Instant) {
        lock(&self.pending).insert(msg_id.to_string(), at);
    }

    /// Forgets an own heartbeat that was not published.
    pub fn unsent(&self, msg_id: &str) {
        lock(&self.pending).remove(msg_id);
    }

    /// The roster consumer applied an own heartbeat: everything queued before it was applied.
    pub fn echoed(&self, msg_id: &str) {
        let Some(at) = lock(&self.pending).remove(msg_id) else {
            return;
        };
        // Older markers still pending were lost (FIFO): they can never be echoed.
        lock(&self.pending).retain(|_, t| *t > at);
        let mut c = lock(&self.caught_up);
        if c.is_none_or(|c| c < at) {
            *c = Some(at);
        }
        drop(c);
        self.changed.notify_waiters();
    }

    /// True once everything queued before `t` has been applied.
    pub fn is_past(&self, t: tokio::time::Instant) -> bool {
        lock(&self.caught_up).is_some_and(|c| c >= t)
    }

    /// True when a marker published at or after `t` is on its way back.
    pub fn marker_pending_since(&self, t: tokio::time::Instant) -> bool {
        lock(&self.pending).values().any(|at| *at >= t)
    }

    /// Waits until something changes (a marker echoed, a reset), at most `max`.
    pub async fn changed(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.changed.notified()).await;
    }
}

/// A std lock that survives poisoning: every critical section here leaves the data consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
