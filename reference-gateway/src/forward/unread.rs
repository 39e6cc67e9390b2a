//! [C-23]'s last rule: a brief typed into a worker's pane that nobody read.
//!
//! Why it exists: the agent itself may be in front, shown `idle`, and never read the line it was
//! given (measured on real herdr v0.8.2: a program named `claude` that ignores its input). FWD-7
//! ends that brief `not_submitted`, but the line stays in the terminal's input, and the shell runs
//! it when the program ends. The FAILED says so (`"typed": true`), and nothing more is typed into
//! that pane until its agent is seen acting again — herdr's `state_change_seq` moved since the
//! brief was left there — so one unread brief never becomes several commands run later. Until
//! then the pane's gate is closed: a brief waits for it as for any gate (FWD-2) and ends `busy`.

use std::time::Duration;

use tokio::time::Instant;
use tracing::info;

use super::NotInjected;
use crate::envelope::FailReason;
use crate::gateway::Gateway;
use crate::registry::Entity;

/// How often the agent record is read while a pane holds an unread brief.
const LOOK_EVERY: Duration = Duration::from_millis(100);

impl Gateway {
    /// Notes that the brief just typed into `worker`'s pane stayed unread, herdr's count `seq`.
    pub(super) fn left_unread(&self, worker: &Entity, seq: Option<u64>) {
        self.local.set_unread(&worker.gid, seq);
    }

    /// Right before typing: when `worker`'s pane still holds an unread brief, waits until
    /// `deadline` for herdr's count to move from the one it was left at (`now` is the count read
    /// before typing); still unmoved then, nothing is typed: `busy`. A pane with no agent record
    /// any more forgets the brief (the status gate and [C-20] decided already).
    pub(super) async fn unread_gate(
        &self,
        worker: &Entity,
        now: Option<u64>,
        deadline: Instant,
    ) -> Result<(), NotInjected> {
        let Some(at) = self.local.unread_at(&worker.gid) else {
            return Ok(());
        };
        let mut seq = now;
        loop {
            if seq != Some(at) {
                self.local.set_unread(&worker.gid, None);
                info!(gid = %worker.gid, left_at = at, now = ?seq, "the worker's agent acted since a brief was left unread in its pane: typing again ([C-23])");
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(NotInjected(
                    FailReason::Busy,
                    format!(
                        "the worker's pane still holds a brief its agent never read (herdr's state_change_seq {at} has not moved since): nothing more is typed there until the agent acts ([C-23])"
                    ),
                ));
            }
            tokio::time::sleep(LOOK_EVERY).await;
            seq = match self.herdr.agent_seq(&worker.pane).await {
                Ok(s) => s,
                Err(e) if e.code() == Some("pane_not_found") => {
                    return Err(NotInjected(FailReason::Stopped, e.to_string()));
                }
                Err(_) => Some(at),
            };
        }
    }
}
