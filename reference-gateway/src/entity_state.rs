//! What the gateway keeps about each local entity while it runs, in one place.
//!
//! The registry (`registry.rs`) is what survives a restart: gid, role, pane, token. Everything
//! else a running gateway needs per entity — is its inbox consumed (CON-2), the channel that
//! consumes it, the lock that serialises injects into its pane (FWD-2), the traceId its next
//! REPLY continues, the agent status its heartbeat reports (PRS-1), whether a nudge loop runs for
//! it (RPL-3) — lives in one [`EntityState`] per gid, so attaching, detaching and stopping an
//! entity each touch one entry instead of six parallel maps that could drift apart.
//!
//! An entry is created when the entity's inbox is first attached (or refused), cleared of its
//! consumer when it is detached, and removed when the entity is stopped ([`EntityStates::forget`]).
//! Late writers (a status read, a nudge loop ending) never bring a stopped entity back.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use lapin::Channel;

/// Health of one entity's inbox consumer (CON-2: a refused consumer is loud, never silent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntityHealth {
    Ready,
    Failed(String),
}

/// The running state of one local entity.
#[derive(Default)]
pub struct EntityState {
    /// `None` while the entity is not attached (never, or detached): `/readyz` does not list it.
    pub health: Option<EntityHealth>,
    /// The channel of the inbox consumer, so a stop can cancel it.
    pub inbox: Option<Channel>,
    /// Which broker connection carries that channel (0 = the gateway's main connection; see
    /// `Gateway::inbox_channel`).
    pub inbox_link: usize,
    /// Serialises injects into the entity's pane.
    pub inject_lock: Arc<tokio::sync::Mutex<()>>,
    /// traceId of the last brief injected into this worker (its REPLY continues the flow).
    pub last_trace: Option<String>,
    /// The agent status last read from herdr, for heartbeats.
    pub agent_status: Option<String>,
    /// A nudge loop runs for this main (RPL-3).
    pub nudging: bool,
    /// [C-23]: a brief was typed into this worker's pane and never read (FAILED `not_submitted`,
    /// `"typed": true`); the agent record's `state_change_seq` then. Nothing more is typed there
    /// until that count moves (the agent seen acting again).
    pub unread_at: Option<u64>,
    /// While the inbox is refused: when it may be tried again, and when its refusal was last
    /// logged at ERROR (so a retry repeating the same refusal does not flood the log).
    pub refusal: Option<Refusal>,
}

/// The retry and log bookkeeping of a refused inbox.
#[derive(Debug, Clone, Copy)]
pub struct Refusal {
    pub retry_at: Instant,
    pub logged_at: Instant,
}

/// Every local entity's [`EntityState`], by gid.
#[derive(Default)]
pub struct EntityStates(Mutex<HashMap<String, EntityState>>);

impl EntityStates {
    fn map(&self) -> MutexGuard<'_, HashMap<String, EntityState>> {
        // A panic while holding the lock leaves plain data behind; carry on with it.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `gid`'s entry, creating it (attach, health, inject lock).
    fn entry<R>(&self, gid: &str, f: impl FnOnce(&mut EntityState) -> R) -> R {
        f(self.map().entry(gid.to_string()).or_default())
    }

    /// Runs `f` on `gid`'s entry if it exists (late writers never recreate a stopped entity).
    fn existing<R>(&self, gid: &str, f: impl FnOnce(&mut EntityState) -> R) -> Option<R> {
        self.map().get_mut(gid).map(f)
    }

    pub fn set_health(&self, gid: &str, h: EntityHealth) {
        self.entry(gid, |s| {
            if h == EntityHealth::Ready {
                s.refusal = None;
            }
            s.health = Some(h)
        });
    }

    /// Records that `gid`'s inbox was refused for `why` (health `Failed`), to be tried again
    /// after `pause`. Returns whether to log it at ERROR: a new refusal (or another reason than
    /// the last), or the same one last logged at ERROR `reminder` ago or longer.
    pub fn refused(&self, gid: &str, why: &str, pause: Duration, reminder: Duration) -> bool {
        let now = Instant::now();
        self.entry(gid, |s| {
            let same = matches!(&s.health, Some(EntityHealth::Failed(w)) if w == why);
            let loud = match s.refusal {
                Some(r) if same => now.duration_since(r.logged_at) >= reminder,
                _ => true,
            };
            let logged_at = match s.refusal {
                Some(r) if !loud => r.logged_at,
                _ => now,
            };
            s.health = Some(EntityHealth::Failed(why.to_string()));
            s.refusal = Some(Refusal {
                retry_at: now + pause,
                logged_at,
            });
            loud
        })
    }

    /// The health of every attached entity.
    pub fn health(&self) -> Vec<(String, EntityHealth)> {
        self.map()
            .iter()
            .filter_map(|(gid, s)| s.health.clone().map(|h| (gid.clone(), h)))
            .collect()
    }

    pub fn health_of(&self, gid: &str) -> Option<EntityHealth> {
        self.existing(gid, |s| s.health.clone()).flatten()
    }

    /// Attached entities whose consumer was refused (to be retried).
    pub fn failed(&self) -> Vec<String> {
        self.failed_due(Instant::now() + Duration::from_secs(86_400 * 365))
    }

    /// Attached entities whose consumer was refused and may be tried again at `now`.
    pub fn failed_due(&self, now: Instant) -> Vec<String> {
        self.map()
            .iter()
            .filter(|(_, s)| matches!(s.health, Some(EntityHealth::Failed(_))))
            .filter(|(_, s)| s.refusal.is_none_or(|r| r.retry_at <= now))
            .map(|(gid, _)| gid.clone())
            .collect()
    }

    pub fn set_inbox(&self, gid: &str, ch: Channel, link: usize) {
        self.entry(gid, |s| {
            s.inbox = Some(ch);
            s.inbox_link = link;
        });
    }

    /// How many inbox channels connection `link` carries.
    pub fn inboxes_on(&self, link: usize) -> usize {
        self.map()
            .values()
            .filter(|s| s.inbox.is_some() && s.inbox_link == link)
            .count()
    }

    /// Detaches `gid`: takes its consumer's channel (for the caller to close) and drops its health.
    pub fn detach(&self, gid: &str) -> Option<Channel> {
        self.existing(gid, |s| {
            s.health = None;
            s.refusal = None;
            s.inbox.take()
        })
        .flatten()
    }

    /// Takes every consumer's channel (a graceful stop closes them).
    pub fn take_inboxes(&self) -> Vec<Channel> {
        self.map().values_mut().filter_map(|s| s.inbox.take()).collect()
    }

    /// Forgets every consumer's channel (they died with their connection).
    pub fn clear_inboxes(&self) {
        for s in self.map().values_mut() {
            s.inbox = None;
        }
    }

    /// Removes `gid`'s entry: the entity was stopped.
    pub fn forget(&self, gid: &str) {
        self.map().remove(gid);
    }

    pub fn inject_lock(&self, gid: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.entry(gid, |s| Arc::clone(&s.inject_lock))
    }

    pub fn set_last_trace(&self, gid: &str, trace_id: &str) {
        self.existing(gid, |s| s.last_trace = Some(trace_id.to_string()));
    }

    pub fn last_trace(&self, gid: &str) -> Option<String> {
        self.existing(gid, |s| s.last_trace.clone()).flatten()
    }

    /// [C-23]: a brief typed into `gid`'s pane stayed unread with herdr's count at `seq`.
    pub fn set_unread(&self, gid: &str, seq: Option<u64>) {
        self.existing(gid, |s| s.unread_at = seq);
    }

    pub fn unread_at(&self, gid: &str) -> Option<u64> {
        self.existing(gid, |s| s.unread_at).flatten()
    }

    pub fn set_agent_status(&self, gid: &str, status: String) {
        self.existing(gid, |s| s.agent_status = Some(status));
    }

    pub fn agent_status(&self, gid: &str) -> Option<String> {
        self.existing(gid, |s| s.agent_status.clone()).flatten()
    }

    /// Marks a nudge loop as running for `gid`; false when one already runs.
    pub fn start_nudging(&self, gid: &str) -> bool {
        self.entry(gid, |s| !std::mem::replace(&mut s.nudging, true))
    }

    pub fn stop_nudging(&self, gid: &str) {
        self.existing(gid, |s| s.nudging = false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detached_entities_leave_readiness_and_stopped_ones_are_forgotten() {
        let s = EntityStates::default();
        s.set_health("g1", EntityHealth::Ready);
        s.set_health("g2", EntityHealth::Failed("403".into()));
        s.set_last_trace("g1", "t1");
        assert_eq!(s.failed(), vec!["g2".to_string()]);
        assert_eq!(s.health().len(), 2);
        assert!(s.detach("g1").is_none(), "no channel was attached");
        assert_eq!(s.health_of("g1"), None);
        assert_eq!(
            s.last_trace("g1").as_deref(),
            Some("t1"),
            "a detach keeps the flow's trace"
        );
        s.forget("g1");
        s.set_last_trace("g1", "t2");
        s.set_agent_status("g1", "idle".into());
        s.stop_nudging("g1");
        assert_eq!(
            s.last_trace("g1"),
            None,
            "a late write does not bring a stopped entity back"
        );
        assert_eq!(s.health().len(), 1);
    }

    #[test]
    fn a_repeated_refusal_is_loud_once_then_after_the_reminder() {
        let s = EntityStates::default();
        let minute = Duration::from_secs(60);
        assert!(s.refused("g", "held", Duration::ZERO, minute), "first: loud");
        assert!(!s.refused("g", "held", Duration::ZERO, minute), "same again: quiet");
        assert!(s.refused("g", "406", Duration::ZERO, minute), "another reason: loud");
        assert!(
            s.refused("g", "406", Duration::ZERO, Duration::ZERO),
            "reminder due: loud"
        );
        assert_eq!(s.failed_due(Instant::now()), vec!["g".to_string()]);
        s.refused("g", "406", Duration::from_secs(5), minute);
        assert!(s.failed_due(Instant::now()).is_empty(), "not before its pause");
        assert_eq!(s.failed(), vec!["g".to_string()]);
        assert_eq!(
            s.failed_due(Instant::now() + Duration::from_secs(6)),
            vec!["g".to_string()]
        );
        s.set_health("g", EntityHealth::Ready);
        assert!(s.failed().is_empty());
        assert!(
            s.refused("g", "406", Duration::ZERO, minute),
            "a new refusal after ready: loud"
        );
    }

    #[test]
    fn one_nudge_loop_per_main() {
        let s = EntityStates::default();
        assert!(s.start_nudging("m"));
        assert!(!s.start_nudging("m"));
        s.stop_nudging("m");
        assert!(s.start_nudging("m"));
    }
}
