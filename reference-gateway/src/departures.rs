//! Departures: once an entity's `down` is on the wire, no `up` of it follows (PRS-1, PRS-2, SPN-5).
//!
//! A heartbeat round reads the list of local entities, then publishes an `up` for each. A stop
//! that announces `down` in between (while the round is publishing, or while the stop is still
//! closing the pane, before the entity leaves the registry) was followed on the wire by that
//! round's `up`, and every other gateway then listed the stopped entity again for a whole ttl
//! (3H) — a CI run caught it. [`Departures`] orders the two: a heartbeat chunk is filtered and
//! published while holding it, and a `down` is announced while holding it, after its gid is
//! marked departed. So a chunk is either wholly on the channel before the `down` (and the `down`
//! wins at every receiver, one channel keeps the order) or it no longer holds the gid.
//!
//! A graceful stop departs everything at once, the gateway's own `_gateway` entry included.

use std::collections::HashSet;

use tokio::sync::{Mutex, MutexGuard};

/// The lock that orders heartbeats after departures; see the module docs.
#[derive(Default)]
pub struct Departures {
    inner: Mutex<Departed>,
}

/// What has departed, read and changed only under [`Departures::lock`].
#[derive(Default)]
pub struct Departed {
    gids: HashSet<String>,
    all: bool,
}

impl Departures {
    /// Holds the order until the guard drops: hold it from filtering a heartbeat chunk until the
    /// chunk is handed to the channel, and from [`Departed::depart`] until the `down` is.
    pub async fn lock(&self) -> MutexGuard<'_, Departed> {
        self.inner.lock().await
    }
}

impl Departed {
    /// `gid` is leaving: no heartbeat carries it from now on.
    pub fn depart(&mut self, gid: &str) {
        self.gids.insert(gid.to_string());
    }

    /// The gateway is stopping: no heartbeat is published from now on.
    pub fn depart_all(&mut self) {
        self.all = true;
    }

    /// Forgets a departure once `gid` has left the registry (a heartbeat also checks the
    /// registry under the lock, so nothing of it is published after this), or when `gid` is
    /// registered again.
    pub fn forget(&mut self, gid: &str) {
        self.gids.remove(gid);
    }

    /// Whether a heartbeat may still carry `gid` (`None`: the gateway's own entry).
    pub fn may_heartbeat(&self, gid: Option<&str>) -> bool {
        !self.all && gid.is_none_or(|g| !self.gids.contains(g))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_departed_gid_is_not_heartbeated_until_forgotten() {
        let d = Departures::default();
        let mut g = d.lock().await;
        assert!(g.may_heartbeat(Some("a")));
        g.depart("a");
        assert!(!g.may_heartbeat(Some("a")));
        assert!(g.may_heartbeat(Some("b")));
        assert!(g.may_heartbeat(None), "the gateway's own entry still beats");
        g.forget("a");
        assert!(g.may_heartbeat(Some("a")));
    }

    #[tokio::test]
    async fn a_stopping_gateway_heartbeats_nothing() {
        let d = Departures::default();
        let mut g = d.lock().await;
        g.depart_all();
        assert!(!g.may_heartbeat(Some("a")));
        assert!(!g.may_heartbeat(None));
    }
}
