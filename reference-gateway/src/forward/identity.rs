//! Foreground identity (docs/CONTRACT.md "Foreground identity", a proposed clarification of SPEC
//! FWD-7 and [C-20], capability `foreground-identity`): is the program holding the worker's
//! terminal the agent whose status herdr shows?
//!
//! Why it exists: herdr keeps the last status of an agent it does not recognise by name after the
//! agent exits, and [C-20]'s look at the terminal only catches a *shell* at its prompt there. When
//! another program takes the terminal instead (measured on real herdr v0.8.2: `bash sleeper.sh`
//! running `sleep 1000`), the status still says `idle`, the brief is typed, nobody reads it, FWD-7
//! ends `not_submitted` — and once that program ends the shell runs the typed brief as a command.
//! herdr ties no status report to a process, so the gateway remembers, per worker, the foreground
//! process group it last saw acting as the agent together with the agent record's
//! `state_change_seq` then ([`Identity`]); right before typing, a *different* group in front while
//! that count has not moved means the status shown is the old agent's: nothing is typed, FAILED
//! `stopped` at once. A count that moved means something reported since: the new program is
//! taken for the agent and bound.
//!
//! When the binding is taken: at the first look at a worker's terminal that shows a program (on
//! trust, as [C-20] alone would); at every look before a brief whose group is the bound one; after
//! each confirmed submission (FWD-7: the agent left idle, so the program in front is the agent);
//! and when that agent is seen back at idle or done after the brief ([`Gateway::follow_agent`]),
//! so that its own last reports belong to it.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info};

use super::NotInjected;
use crate::envelope::FailReason;
use crate::gateway::Gateway;
use crate::herdr::{Front, Identity};
use crate::registry::Entity;

/// How long one `agent.wait` of the follower lasts before it looks at the terminal again.
const FOLLOW_SLICE: Duration = Duration::from_secs(30);
/// How long the follower waits at most for the agent to come back to idle after a brief.
const FOLLOW_FOR: Duration = Duration::from_secs(3600);

/// The key of a worker's binding: its gid and pane (a worker registered again starts afresh).
pub(super) fn key(worker: &Entity) -> String {
    format!("{}|{}", worker.gid, worker.pane)
}

impl Gateway {
    /// The rule, right before typing: `front` is what [C-20]'s look found (a program, or herdr
    /// could not tell). Err: a different program holds the terminal and herdr's agent record has
    /// not changed since the bound agent was last seen — type nothing, `stopped`. Ok: herdr's
    /// count read right before typing, when it was read (the submit check's starting point).
    pub(super) async fn check_identity(&self, worker: &Entity, front: Front) -> Result<Option<u64>, NotInjected> {
        let Some(group) = front.group else {
            return Ok(None); // herdr cannot tell (no `pane.process_info`): the status gate decides
        };
        let key = key(worker);
        let seq = match self.herdr.agent_seq(&worker.pane).await {
            Ok(Some(seq)) => seq,
            Ok(None) => {
                // herdr shows no agent record: nothing to tell an old status by.
                self.herdr.forget_identity(&key);
                return Ok(None);
            }
            Err(e) if e.code() == Some("pane_not_found") => {
                return Err(NotInjected(FailReason::Stopped, e.to_string()));
            }
            Err(e) => {
                debug!(gid = %worker.gid, error = %e, "agent record unreadable; foreground identity not checked");
                return Ok(None);
            }
        };
        match self.herdr.identity(&key) {
            Some(bound) if bound.group != group && bound.seq == seq => Err(NotInjected(
                FailReason::Stopped,
                format!(
                    "another program holds the worker's terminal (foreground group {group}, the agent's was {}) and herdr's agent record has not changed since (state_change_seq {seq}): the status shown is the exited agent's; the brief was not typed (foreground identity)",
                    bound.group
                ),
            )),
            Some(bound) => {
                if bound.group != group {
                    info!(gid = %worker.gid, from = bound.group, to = group, seq, "a new program holds the worker's terminal and reported since: taken for its agent");
                }
                self.herdr.bind_identity(&key, Identity { group, seq });
                Ok(Some(seq))
            }
            None => {
                self.herdr.bind_identity(&key, Identity { group, seq });
                Ok(Some(seq))
            }
        }
    }

    /// After a confirmed submission: the program in front is the agent (it left idle on the
    /// brief). Bind it now, then follow it back to idle or done and bind again, so its own reports
    /// until then are counted as its. Ends early when another group takes the terminal, herdr
    /// shows no agent or the pane is gone.
    pub(super) async fn follow_agent(self: Arc<Self>, worker: Entity) {
        let key = key(&worker);
        let Some(group) = self.bind_now(&worker, &key, None).await else {
            return;
        };
        let until = tokio::time::Instant::now() + FOLLOW_FOR;
        while tokio::time::Instant::now() < until {
            match self.herdr.wait_idle(&worker.pane, FOLLOW_SLICE).await {
                Ok(()) => {
                    self.bind_now(&worker, &key, Some(group)).await;
                    return;
                }
                Err(e) if e.code() == Some("timeout") => {
                    // Still working: is it still the agent in front?
                    match self.herdr.foreground(&worker.pane).await {
                        Ok(f) if f.group == Some(group) => continue,
                        _ => return,
                    }
                }
                Err(_) => return,
            }
        }
    }

    /// Reads who holds the terminal and the agent record's count, and binds them — only when the
    /// group in front is a program and, with `only`, that group. Returns the bound group.
    ///
    /// The count is read before and after the look at the terminal and the pair is bound only
    /// when both reads agree: the group then held the terminal at that count. Otherwise (the
    /// agent exited and another one reported in between) nothing is bound, and the group read may
    /// be the old one paired with the new one's count.
    async fn bind_now(&self, worker: &Entity, key: &str, only: Option<u32>) -> Option<u32> {
        let before = self.herdr.agent_seq(&worker.pane).await.ok()??;
        let front = self.herdr.foreground(&worker.pane).await.ok()?;
        let group = front.group.filter(|_| !front.is_shell())?;
        if only.is_some_and(|g| g != group) {
            return None;
        }
        let seq = self.herdr.agent_seq(&worker.pane).await.ok()??;
        if seq != before {
            debug!(gid = %worker.gid, before, seq, "herdr's agent record changed while the terminal was looked at; not bound");
            return None;
        }
        self.herdr.bind_identity(key, Identity { group, seq });
        debug!(gid = %worker.gid, group, seq, "foreground identity bound");
        Some(group)
    }
}
