//! How long the oldest publish still waiting for its broker confirm has waited.
//!
//! Exists for the stall detector (`gateway/stall.rs`): a cluster node cut off from the others
//! keeps its client connections (heartbeats flow) but confirms nothing, and the only sign the
//! gateway gets is that age growing. Every publish passes through here, so the hot path is two
//! atomic stores and no lock: a publish takes a free slot of a fixed table and stamps it with
//! the time it was handed to the channel ([`Unconfirmed::track`]); its confirm (or its failure,
//! or its caller giving up) frees the slot ([`Waiting`] is dropped). The detector scans the table
//! a few times a second ([`Unconfirmed::oldest_since`]).
//!
//! A publish that finds no free slot after a few tries (thousands in flight at once) is not
//! tracked: the slots taken are enough to show a stall.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Slots of the table: publishes tracked at once.
const SLOTS: usize = 1024;
/// Slots a publish tries before it goes untracked.
const TRIES: usize = 16;

/// The table of unconfirmed publishes (cheap to clone: one table).
#[derive(Clone)]
pub struct Unconfirmed {
    table: Arc<Table>,
}

struct Table {
    /// Stamps count milliseconds from here.
    base: Instant,
    /// 0: free; otherwise 1 + the milliseconds from `base` to when the publish was handed over.
    stamps: Box<[AtomicU64]>,
    /// Where the next publish starts looking for a free slot.
    next: AtomicUsize,
}

/// One publish waiting for its confirm; dropping it says the wait is over.
pub struct Waiting {
    table: Arc<Table>,
    slot: Option<usize>,
}

impl Default for Unconfirmed {
    fn default() -> Self {
        Unconfirmed {
            table: Arc::new(Table {
                base: Instant::now(),
                stamps: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
                next: AtomicUsize::new(0),
            }),
        }
    }
}

impl Unconfirmed {
    /// Notes a publish handed to the channel now; drop the answer once its confirm came (or the
    /// publish ended otherwise).
    pub fn track(&self) -> Waiting {
        self.track_at(Instant::now())
    }

    fn track_at(&self, at: Instant) -> Waiting {
        let t = &self.table;
        let stamp = 1 + t.millis(at).min(u64::MAX - 1);
        let start = t.next.fetch_add(1, Ordering::Relaxed);
        let slot = (0..TRIES).map(|k| (start + k) % SLOTS).find(|&i| {
            t.stamps[i]
                .compare_exchange(0, stamp, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        Waiting {
            table: Arc::clone(t),
            slot,
        }
    }

    /// How long the oldest publish handed over at or after `since` has waited for its confirm;
    /// `None` when none is waiting. Older ones (a connection before this one) are left out.
    pub fn oldest_since(&self, since: Instant) -> Option<Duration> {
        self.oldest_at(since, Instant::now())
    }

    fn oldest_at(&self, since: Instant, now: Instant) -> Option<Duration> {
        let t = &self.table;
        let floor = t.millis(since);
        let oldest = t
            .stamps
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&s| s != 0 && s > floor)
            .min()?;
        Some(Duration::from_millis(t.millis(now).saturating_sub(oldest - 1)))
    }
}

impl Table {
    /// Milliseconds from `base` to `at` (0 before it).
    fn millis(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(i) = self.slot {
            self.table.stamps[i].store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_publish_is_reported_until_its_wait_ends() {
        let u = Unconfirmed::default();
        let t0 = u.table.base;
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(u.oldest_at(t0, ms(0)).is_none(), "nothing waits");
        let first = u.track_at(ms(10));
        let second = u.track_at(ms(40));
        assert_eq!(
            u.oldest_at(t0, ms(100)),
            Some(Duration::from_millis(90)),
            "the first one's age"
        );
        drop(first);
        assert_eq!(
            u.oldest_at(t0, ms(100)),
            Some(Duration::from_millis(60)),
            "now the second one's"
        );
        drop(second);
        assert!(u.oldest_at(t0, ms(100)).is_none(), "nothing waits any more");
    }

    #[test]
    fn publishes_from_before_a_reconnect_are_left_out() {
        let u = Unconfirmed::default();
        let t0 = u.table.base;
        let ms = |n| t0 + Duration::from_millis(n);
        let _old = u.track_at(ms(10));
        assert!(u.oldest_at(ms(20), ms(50)).is_none());
        let _new = u.track_at(ms(30));
        assert_eq!(u.oldest_at(ms(20), ms(50)), Some(Duration::from_millis(20)));
    }

    #[test]
    fn a_full_table_leaves_further_publishes_untracked_and_frees_every_slot() {
        let u = Unconfirmed::default();
        let held: Vec<Waiting> = (0..SLOTS).map(|_| u.track()).collect();
        assert!(held.iter().all(|w| w.slot.is_some()));
        let extra = u.track();
        assert!(extra.slot.is_none(), "no free slot");
        drop(extra);
        drop(held);
        assert!(u.table.stamps.iter().all(|s| s.load(Ordering::Relaxed) == 0));
    }
}
