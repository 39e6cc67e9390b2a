//! The [C-7] / [C-10] grace: what a gateway does before it rejects a message about someone its
//! roster view does not know yet.
//!
//! Presence and messages race: a fresh entity's first message may overtake its first presence,
//! and a gateway that was frozen or slow may hold a backlog of presence that would make the sender
//! known. The same holds for a host that joined with a certificate (MEM-2): its key is learned
//! from its `_gateway` presence, which a message of its may overtake. So a message about an
//! unknown `from` — or from a host with no key yet — is held (unacked) until the roster consumer
//! has caught up and one heartbeat more has passed, and only then rejected.
//!
//! **[C-25]** Before that grace, a host not yet heard from since this gateway's own (re)connect is
//! no evidence against its entities: after a whole site restarts, the receiver may be back long
//! before the sender's host (measured: 15 s; 2 of 200 confirmed REPLYs were rejected). Such a
//! message is held until that host's `_gateway` presence arrives and one heartbeat more has
//! passed, at most `FLEET_UNKNOWN_HOST_HOLD_S` after the (re)connect; then the grace above.

use std::time::Duration;

use tracing::warn;

use crate::envelope::Envelope;
use crate::gateway::Gateway;

impl Gateway {
    /// SIG-2 step 2 with the [C-7] grace, counted as [C-10] says: an unknown `from` is waited for
    /// up to one heartbeat from the moment the roster consumer has applied everything that was
    /// queued when the message was judged (a frozen or slow gateway may first have a backlog of
    /// stale presence), and never before the view has heard two heartbeat rounds ([C-14]).
    pub async fn from_lives_on_host(&self, env: &Envelope) -> bool {
        let lives = || self.roster.lived_on(&env.from, &env.host, env.ts);
        if lives() {
            return true;
        }
        if self.await_host_heard(&env.host, &lives).await {
            return true;
        }
        self.roster_grace(&env.from, &env.host, lives).await
    }

    /// [C-25]: while `host` has not been heard from since the (re)connect, waits for its
    /// `_gateway` presence (at most until `FLEET_UNKNOWN_HOST_HOLD_S` after the (re)connect), then
    /// one heartbeat more. True as soon as `known()` holds.
    async fn await_host_heard(&self, host: &str, known: &impl Fn() -> bool) -> bool {
        // This gateway's own host needs no hearing: its entities are its own.
        if host == self.cfg.host_id {
            return false;
        }
        let Some(since) = self.hosts_heard.since() else {
            return false;
        };
        let heard = || self.hosts_heard.first_heard(host);
        if heard().is_none() {
            let hold_end = since + self.cfg.unknown_host_hold;
            if tokio::time::Instant::now() >= hold_end {
                return false;
            }
            let known_or_heard = || known() || heard().is_some();
            tokio::select! {
                _ = tokio::time::sleep_until(hold_end) => {}
                _ = until(&known_or_heard) => {}
            }
            if known() {
                return true;
            }
        }
        let Some(at) = heard() else {
            warn!(%host, hold = ?self.cfg.unknown_host_hold, "no presence of the sender's host since the (re)connect within FLEET_UNKNOWN_HOST_HOLD_S; judging with the plain grace");
            return false;
        };
        tokio::select! {
            _ = tokio::time::sleep_until(at + self.cfg.heartbeat) => known(),
            _ = until(known) => true,
        }
    }

    /// Waits, as [`Gateway::from_lives_on_host`] does, until `known()` holds (true) or the grace
    /// is over (`known()` then). `from` and `host` only name the wait in a log line.
    pub async fn roster_grace(&self, from: &str, host: &str, known: impl Fn() -> bool) -> bool {
        let t0 = tokio::time::Instant::now();
        // A view younger than two heartbeats is still being rebuilt (PRS-2, after a (re)start).
        let warm = self
            .roster_since
            .lock()
            .ok()
            .and_then(|t| *t)
            .map(|t| t + 2 * self.cfg.heartbeat);
        // Catching up is bounded by progress: a roster consumer that handled nothing for a
        // presence TTL is stuck, and the grace then counts from now.
        let catch_up = tokio::select! {
            caught = self.roster_caught_up(t0, 3 * self.cfg.heartbeat) => caught,
            _ = until(&known) => return true,
        };
        if !catch_up {
            warn!(%from, %host, "the roster consumer made no progress for a presence TTL; judging with the plain grace");
        }
        let start = tokio::time::Instant::now();
        let deadline = (start + self.cfg.heartbeat).max(warm.unwrap_or(start));
        tokio::select! {
            _ = tokio::time::sleep_until(deadline) => known(),
            _ = until(&known) => true,
        }
    }
}

/// Resolves once `known()` holds (polled: the view and the trust state are maps).
async fn until(known: &impl Fn() -> bool) {
    while !known() {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
