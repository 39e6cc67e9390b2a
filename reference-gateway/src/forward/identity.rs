//! Foreground identity (SPEC [C-23], capability `foreground-identity`; docs/CONTRACT.md
//! "Foreground identity"): is the program holding the worker's terminal the agent whose status
//! herdr shows?
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
//! When the binding is taken: at the worker's registration ([C-23]: the group in front and the
//! count then, so a worker that never took a brief is covered too — measured on real herdr, a
//! `bash sleeper.sh` in front of such a worker got a brief typed and its shell ran it later); with
//! nothing bound (herdr showed no agent record then), at the first look at the terminal that
//! shows a program (on trust, as [C-20] alone would); at every look before a brief whose group is
//! the bound one; after
//! each confirmed submission (FWD-7: the agent left idle, so the program in front is the agent);
//! and when that agent is seen back at idle or done after the brief ([`Gateway::follow_agent`]),
//! so that its own last reports belong to it.
//!
//! The counts come from answers the inject already has where it can (issue 46: each herdr call
//! is a connection of its own, on the worker's hot path): the count `agent.wait` opened the gate
//! with is the one "before typing" (herdr answers the gate and the look at the terminal
//! together, the look no earlier than the gate), the count the submit check read when it saw the
//! submission is the one bound after it, and the follower's `agent.wait` answers with the count at
//! idle — so following an agent costs that wait and one look at the terminal.

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

/// How long the look at registration may take: herdr answers in milliseconds; a herdr that does
/// not answer leaves the worker unbound (the first look before a brief binds it), never a
/// registration held up.
const AT_REGISTRATION: Duration = Duration::from_secs(2);

impl Gateway {
    /// [C-23] "from the worker's registration on": binds the group in front of `worker`'s terminal
    /// with herdr's count now, when herdr tells both (a pane with no agent record binds nothing).
    pub(crate) async fn bind_at_registration(&self, worker: &Entity) {
        let look = async {
            let front = self.herdr.foreground(&worker.pane).await.ok()?;
            let seq = self.herdr.agent_seq(&worker.pane).await.ok()??;
            Some(Identity {
                group: front.group?,
                seq,
            })
        };
        match tokio::time::timeout(AT_REGISTRATION, look).await {
            Ok(Some(identity)) => {
                debug!(gid = %worker.gid, group = identity.group, seq = identity.seq, "foreground identity bound at registration");
                self.herdr.bind_identity(&key(worker), identity);
            }
            Ok(None) | Err(_) => {
                debug!(gid = %worker.gid, "foreground identity not bound at registration (herdr told no group or no agent record)")
            }
        }
    }

    /// The rule, right before typing: `front` is what [C-20]'s look found (a program, or herdr
    /// could not tell); `at_gate` the count herdr opened the gate with, if it did (else it is read
    /// here). Err: a different program holds the terminal and herdr's agent record has not
    /// changed since the bound agent was last seen — type nothing, `stopped`. Ok: the count
    /// before typing (`at_gate`, else read here), when herdr shows one (the submit check's
    /// starting point).
    pub(super) async fn check_identity(
        &self,
        worker: &Entity,
        front: Front,
        at_gate: Option<u64>,
    ) -> Result<Option<u64>, NotInjected> {
        let Some(group) = front.group else {
            // herdr cannot tell who is in front (no `pane.process_info`): the status gate decides.
            return Ok(match at_gate {
                Some(seq) => Some(seq),
                None => self.herdr.agent_seq(&worker.pane).await.ok().flatten(),
            });
        };
        let key = key(worker);
        let read = match at_gate {
            Some(seq) => Ok(Some(seq)),
            None => self.herdr.agent_seq(&worker.pane).await,
        };
        let seq = match read {
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

    /// After a confirmed submission: `took` (the group that held the terminal before typing,
    /// the count the submit check read) is the agent. Bind it now, then follow it back to idle or
    /// done and bind the count herdr answered that wait with, if the group is still in front, so
    /// its own reports until then are counted as its. Ends early when another group takes the
    /// terminal, herdr shows no agent or the pane is gone.
    pub(super) async fn follow_agent(self: Arc<Self>, worker: Entity, took: Identity) {
        let key = key(&worker);
        self.herdr.advance_identity(&key, took);
        let until = tokio::time::Instant::now() + FOLLOW_FOR;
        while tokio::time::Instant::now() < until {
            match self.herdr.wait_idle(&worker.pane, FOLLOW_SLICE).await {
                Ok(idle) => {
                    let Some(seq) = idle.seq else { return };
                    let still = self.herdr.foreground(&worker.pane).await;
                    if still.is_ok_and(|f| f.group == Some(took.group) && !f.is_shell())
                        && self.herdr.advance_identity(&key, Identity { group: took.group, seq })
                    {
                        debug!(gid = %worker.gid, group = took.group, seq, "foreground identity bound at idle");
                    }
                    return;
                }
                Err(e) if e.code() == Some("timeout") => {
                    // Still working: is it still the agent in front?
                    match self.herdr.foreground(&worker.pane).await {
                        Ok(f) if f.group == Some(took.group) => continue,
                        _ => return,
                    }
                }
                Err(_) => return,
            }
        }
    }
}
