//! Forward path (SPEC §5): a brief into a worker, at most once, confirmed by INJECTED.
//!
//! The worker's gateway acks a brief *before* it injects (FWD-1), so a redelivery can never inject
//! twice; the cost of a crash between ack and inject is a visible `inject_timeout` at the sender
//! (FWD-5), never a duplicate. The inject is status-gated (FWD-2), serialised per worker, and
//! confirmed by the agent leaving `idle` (FWD-7) before INJECTED is published (FWD-3); any other
//! outcome is a FAILED with its reason (FWD-4).

use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use tracing::{debug, warn};

mod identity;
pub mod pending;
mod unread;

pub use pending::{PendingSends, SendOutcome};

use crate::envelope::{Envelope, FailReason, FailedBody, Kind, now_ms};
use crate::gateway::Gateway;
use crate::herdr::{AgentStatus, Foreground, Front, HerdrError, Identity};
use crate::metrics::{Metrics, Stage};
use crate::publish::Outgoing;
use crate::registry::Entity;
use crate::topology::MSG_EXCHANGE;

/// Why an inject did not land.
struct NotInjected(FailReason, String);

/// Why an inject did not happen, and whether the brief was typed all the same ([C-23]: a
/// `not_submitted` brief left in the terminal's input says so).
struct Failure {
    why: NotInjected,
    typed: bool,
}

impl From<NotInjected> for Failure {
    fn from(why: NotInjected) -> Failure {
        Failure { why, typed: false }
    }
}

/// Where the brief's pane stands as the gate is waited for: a pane the gateway has just launched
/// an agent in (a spawn's brief) shows its shell at the prompt and `unknown` until the agent's
/// program takes the terminal, which is boot, not a gone agent ([C-20]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Launch {
    /// A registered worker: its agent runs (or ran) in the pane.
    Running,
    /// A spawn's brief: the agent was just launched; no program seen in front yet.
    Booting,
    /// A spawn's brief whose launched program has been seen holding the terminal.
    Booted,
}

/// The longest one `agent.wait` waits: a gate still closed then is looked at again (a pane shown
/// `unknown` is checked for a shell in front, [C-20]). An idle or done agent answers at once, so
/// the common inject is still one call.
const GATE_SLICE: Duration = Duration::from_secs(1);

/// Counts one inject in flight (from its ack to its reported outcome) for `graceful_stop`.
struct InflightInject<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> InflightInject<'a> {
    fn new(n: &'a std::sync::atomic::AtomicUsize) -> Self {
        n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        InflightInject(n)
    }
}

impl Drop for InflightInject<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Gateway {
    /// FWD-1/FWD-6: a verified brief for a local worker is recorded as seen and acked, then
    /// injected in the background.
    pub async fn forward(self: &Arc<Self>, worker: Entity, env: Envelope, d: Delivery) {
        if !self
            .seen
            .insert(&crate::verify::seen_key(&worker.gid, &env.msg_id), env.expires_at)
        {
            // A duplicate that raced past the check: the first copy owns the inject.
            let _ = d.acker.ack(BasicAckOptions::default()).await;
            return;
        }
        if let Err(e) = d.acker.ack(BasicAckOptions::default()).await {
            // Not acked means the broker will redeliver; the seen-set stops a second inject.
            warn!(error = %e, "ack before inject failed");
        }
        let text = String::from_utf8_lossy(&d.data).into_owned();
        let gw = Arc::clone(self);
        let env2 = env.clone();
        Gateway::spawn_in(&env, async move {
            gw.inject_and_report(worker, env2, text, Launch::Running).await
        });
    }

    /// Injects a brief in the background of its caller and reports INJECTED or FAILED to its
    /// sender. `launch` says whether the gateway has just launched the worker's agent (a spawn).
    pub(crate) async fn inject_and_report(
        self: Arc<Self>,
        worker: Entity,
        env: Envelope,
        text: String,
        launch: Launch,
    ) {
        let _inflight = InflightInject::new(&self.inflight_injects);
        let lock = self.local.inject_lock(&worker.gid);
        let guard = lock.lock().await;
        let started = std::time::Instant::now();
        let result = self.inject(&worker, &env, &text, launch).await;
        // The pane is free for the next brief once this one is typed and confirmed: reporting
        // the outcome (a confirmed publish) does not hold the next inject back.
        drop(guard);
        if let Ok(Some(took)) = result {
            // Foreground identity: the program that took the brief is the agent; follow it back
            // to idle so its own reports until then count as its.
            tokio::spawn(Arc::clone(&self).follow_agent(worker.clone(), took));
        }
        let result = result.map(|_| ());
        let (kind, body) = match &result {
            Ok(()) => {
                debug!(gid = %worker.gid, "brief injected");
                Metrics::count(&self.metrics.injects, &[("outcome", "injected")]);
                self.local.set_last_trace(&worker.gid, &env.trace_id);
                (Kind::Injected, b"{}".to_vec())
            }
            Err(Failure {
                why: NotInjected(reason, detail),
                typed,
            }) => {
                warn!(gid = %worker.gid, reason = reason.as_str(), %detail, typed, "brief not injected");
                Metrics::count(&self.metrics.injects, &[("outcome", reason.as_str())]);
                let body = serde_json::to_vec(&FailedBody {
                    reason: *reason,
                    detail: detail.clone(),
                    typed: typed.then_some(true),
                })
                .unwrap_or_else(|_| b"{}".to_vec());
                (Kind::Failed, body)
            }
        };
        let took = started.elapsed();
        self.metrics.last_inject_ms.set(took.as_millis() as i64);
        self.metrics.observe(Stage::Inject, took);
        if env.kind == Kind::Broadcast && kind == Kind::Injected {
            return; // FWD-3: a BROADCAST gets no INJECTED.
        }
        let mut out = Outgoing::new(kind, MSG_EXCHANGE, env.from.clone(), worker.gid.clone(), body);
        out.trace_id = Some(env.trace_id.clone());
        out.corr_id = Some(env.msg_id.clone());
        let reporting = std::time::Instant::now();
        if let Err(e) = self.publisher.publish(out).await {
            warn!(error = %e, "could not report the inject outcome to the sender");
        }
        self.metrics.observe(Stage::Report, reporting.elapsed());
    }

    /// FWD-2 + FWD-7: wait for the gate, type, confirm the agent took it. Ok: who took it — the
    /// group that held the terminal right before typing and herdr's count the submit check read
    /// — when herdr told both (the foreground follower's starting point).
    async fn inject(
        &self,
        worker: &Entity,
        env: &Envelope,
        text: &str,
        launch: Launch,
    ) -> Result<Option<Identity>, Failure> {
        let confirm = self.cfg.submit_confirm;
        // [C-12]: the sender gives up at ts + inject bound, so the wait for the gate ends at
        // ts + bound − confirm bound at the latest, leaving room for the submit confirmation. A
        // brief that arrives after that (its worker's gateway was down or frozen) gets one look
        // at the gate: open, it is injected (once); closed, it is `busy` — never a wait the
        // sender's bound has already given up on.
        let now = now_ms();
        if env.expires_at <= now {
            return Err(NotInjected(
                FailReason::Expired,
                "the brief expired before it could be injected".into(),
            )
            .into());
        }
        let window = self.cfg.inject_timeout.saturating_sub(confirm).as_millis() as u64;
        let gate_deadline_ms = (env.ts + window).min(env.expires_at);
        // A graceful stop (SIGTERM) ends the wait: the sender learns `stopped` now, not at its bound.
        let mut stopping = self.stopping.subscribe();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(gate_deadline_ms.saturating_sub(now));
        let (at_gate, front) = if gate_deadline_ms <= now {
            self.look_at_gate(&worker.pane).await?;
            (None, None)
        } else {
            tokio::select! {
                r = self.gate_and_front(&worker.pane, deadline, launch) => r?,
                _ = stopping.wait_for(|s| *s) => {
                    return Err(NotInjected(FailReason::Stopped, "the worker's gateway is shutting down".into()).into());
                }
            }
        };
        let front = match front {
            Some(front) => Self::judge_front(front)?,
            None => self.ensure_agent_in_front(&worker.pane).await?,
        };
        // The agent record's count before typing: the submit check's starting point.
        let before = self.check_identity(worker, front, at_gate).await?;
        // [C-23]: a brief left unread in the pane closes its gate until the agent acts.
        self.unread_gate(worker, before, deadline).await?;
        self.herdr
            .send_input(&worker.pane, text)
            .await
            .map_err(|e| match e.code() {
                Some("pane_not_found") => NotInjected(FailReason::Stopped, e.to_string()),
                _ => NotInjected(FailReason::NotSubmitted, e.to_string()),
            })?;
        let seq = match self.confirm_submitted(&worker.pane, confirm, before).await {
            Err(NotInjected(FailReason::NotSubmitted, detail)) => {
                self.left_unread(worker, before);
                return Err(Failure {
                    why: NotInjected(FailReason::NotSubmitted, detail),
                    typed: true,
                });
            }
            other => other?,
        };
        Ok(front.group.zip(seq).map(|(group, seq)| Identity { group, seq }))
    }

    /// The gate (FWD-2) and [C-20]'s look at the terminal, asked of herdr together: one round trip
    /// less per brief in the common case, an agent already idle or done. Also returns the count
    /// herdr opened the gate with (`agent.wait`'s agent record), when it did.
    ///
    /// The look is used only when herdr answered the gate first: the agent was then idle or done
    /// by the time the look was answered, so the look is as recent as one asked after the gate
    /// (both lie between the asking and the typing, nothing else between them). When the look came
    /// back first — the agent was still working, herdr showed no agent yet, or it simply answered
    /// that one sooner — it may predate the agent's exit: `None`, and the caller looks again right
    /// before typing, as without the overlap.
    async fn gate_and_front(
        &self,
        pane: &str,
        deadline: tokio::time::Instant,
        launch: Launch,
    ) -> Result<(Option<u64>, Option<Result<Front, HerdrError>>), NotInjected> {
        let gate = self.wait_gate(pane, deadline, launch);
        let front = self.herdr.foreground(pane);
        tokio::pin!(gate, front);
        tokio::select! {
            biased;
            opened = &mut gate => {
                let seq = opened?;
                Ok((seq, Some(front.await)))
            }
            _ = &mut front => {
                Ok((gate.await?, None))
            }
        }
    }

    /// [C-12]'s one look: a brief that arrived after its gate deadline is injected only if the
    /// gate is open now; a closed gate is `busy` at once.
    async fn look_at_gate(&self, pane: &str) -> Result<(), NotInjected> {
        match self.herdr.status(pane).await {
            Ok(s) if s.injectable() => Ok(()),
            Ok(AgentStatus::Unknown) => match self.unknown_pane_gone(pane, &mut Launch::Running).await {
                Some(gone) => Err(gone),
                None => Err(NotInjected(
                    FailReason::Busy,
                    "the brief arrived after ts + bound − confirm and the pane showed no agent at its one look ([C-12])"
                        .into(),
                )),
            },
            Ok(s) => Err(NotInjected(
                FailReason::Busy,
                format!(
                    "the brief arrived after ts + bound − confirm and the agent was {s:?} at its one look ([C-12])"
                ),
            )),
            Err(e) if e.code() == Some("pane_not_found") => Err(NotInjected(FailReason::Stopped, e.to_string())),
            Err(e) => Err(NotInjected(
                FailReason::Busy,
                format!("one look at the gate failed: {e}"),
            )),
        }
    }

    /// Waits until herdr reports the agent idle or done, or the deadline passes (`busy`). Ok: the
    /// count of the agent record `agent.wait` answered with (none when `pane.get` opened it).
    ///
    /// `agent.wait` comes first: it answers at once for an agent that is already idle or done, so
    /// the common case is one herdr call, not a `pane.get` and then a wait. A pane that is no
    /// agent (yet) makes it fail at once with `agent_not_found`; such a pane is then polled with
    /// `pane.get` until it shows an agent (`unknown` is not injectable, FWD-2). A pane shown
    /// `unknown` is also asked who holds its terminal: a shell at its prompt there means the agent
    /// is gone, FAILED `stopped` now rather than `busy` at the bound ([C-20]).
    async fn wait_gate(
        &self,
        pane: &str,
        deadline: tokio::time::Instant,
        mut launch: Launch,
    ) -> Result<Option<u64>, NotInjected> {
        let mut last = String::from("agent never became idle");
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(NotInjected(FailReason::Busy, last));
            }
            let pause = left.min(Duration::from_millis(100));
            // Whether herdr shows the pane `unknown` (then: who holds its terminal?), and whether
            // to pause before the next look (not after a wait that took its slice).
            let (unknown, then_pause) = match self.herdr.wait_idle(pane, left.min(GATE_SLICE)).await {
                Ok(agent) => return Ok(agent.seq),
                Err(e) if e.code() == Some("pane_not_found") => {
                    return Err(NotInjected(FailReason::Stopped, e.to_string()));
                }
                Err(HerdrError::Api { code, .. }) if code == "timeout" => {
                    last = "agent still busy at the inject bound".into();
                    // Still closed after a slice: an agent herdr shows `unknown` may be gone.
                    (matches!(self.herdr.status(pane).await, Ok(AgentStatus::Unknown)), false)
                }
                Err(HerdrError::Api { code, .. }) if code == "agent_not_found" => {
                    // Not (yet) an agent, or herdr cannot tell: the pane's own status decides.
                    match self.herdr.status(pane).await {
                        Ok(s) if s.injectable() => return Ok(None),
                        Ok(AgentStatus::Unknown) => {
                            last = "pane shows no agent (status unknown)".into();
                            (true, true)
                        }
                        Ok(_) => (false, true),
                        Err(e) if e.code() == Some("pane_not_found") => {
                            return Err(NotInjected(FailReason::Stopped, e.to_string()));
                        }
                        Err(e) => {
                            last = e.to_string();
                            (false, true)
                        }
                    }
                }
                Err(e) => {
                    last = e.to_string();
                    tokio::time::sleep(pause).await;
                    continue;
                }
            };
            if unknown && let Some(gone) = self.unknown_pane_gone(pane, &mut launch).await {
                return Err(gone);
            }
            if then_pause {
                tokio::time::sleep(pause).await;
            }
        }
    }

    /// [C-20]: a pane herdr shows `unknown` while a shell at its prompt holds its terminal has no
    /// agent and will get none: FAILED `stopped`. A spawn's pane is exempt until the launched
    /// program has been seen in front (before that, the shell at its prompt is the agent's boot).
    async fn unknown_pane_gone(&self, pane: &str, launch: &mut Launch) -> Option<NotInjected> {
        match self.herdr.foreground(pane).await {
            Ok(f) if f.is_shell() && *launch != Launch::Booting => Some(NotInjected(
                FailReason::Stopped,
                format!(
                    "herdr shows no agent (status unknown) and {}: the worker's agent is gone; the brief was not typed ([C-20])",
                    f.describe()
                ),
            )),
            Ok(f) if f.kind == Foreground::Program && *launch == Launch::Booting => {
                *launch = Launch::Booted;
                None
            }
            Err(e) if e.code() == Some("pane_not_found") => Some(NotInjected(FailReason::Stopped, e.to_string())),
            _ => None,
        }
    }

    /// The shell hazard ([C-20]): herdr keeps showing an agent's last status (`done`, `idle`) after
    /// the agent's process died without releasing the pane, and text typed then goes to a shell,
    /// which runs it as a command. So the status gate alone is not enough: right before typing,
    /// `pane.process_info` must not show a shell at its prompt in front — the pane's own, or an
    /// interactive one started in it. A dead agent is FAILED `stopped` (FWD-4: the worker is gone,
    /// its pane is not). A herdr that cannot tell (no such method, unreachable) leaves the decision
    /// to the gate and to the input call.
    async fn ensure_agent_in_front(&self, pane: &str) -> Result<Front, NotInjected> {
        Self::judge_front(self.herdr.foreground(pane).await)
    }

    /// [C-20]'s decision on herdr's answer to `pane.process_info` (see [`Self::ensure_agent_in_front`]):
    /// the front to type into (unknown when herdr could not tell), or why nothing is typed.
    fn judge_front(front: Result<Front, HerdrError>) -> Result<Front, NotInjected> {
        match front {
            Ok(f) if f.is_shell() => Err(NotInjected(
                FailReason::Stopped,
                format!(
                    "the worker's agent is gone ({}) though herdr still shows its last status; the brief was not typed ([C-20])",
                    f.describe()
                ),
            )),
            Err(e) if e.code() == Some("pane_not_found") => Err(NotInjected(FailReason::Stopped, e.to_string())),
            Ok(f) => Ok(f),
            Err(_) => Ok(Front::UNKNOWN),
        }
    }

    /// FWD-7: the input counts as submitted once the agent left `idle`/`done`.
    ///
    /// Read from the agent record (`agent.get`), which carries herdr's `state_change_seq` beside
    /// the status: a count moved since `before` (the one before typing) means the agent left
    /// idle and came back between two reads (HERDR.md) — an agent that finished the brief before
    /// this check looked, or whose `working` another reader of the pane saw first. A pane with no
    /// agent record is judged by its status alone (`pane.get`). Ok: the count read when the
    /// submission was seen, when herdr showed one.
    async fn confirm_submitted(
        &self,
        pane: &str,
        bound: Duration,
        before: Option<u64>,
    ) -> Result<Option<u64>, NotInjected> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            let (left_idle, seq) = match self.herdr.agent_state(pane).await {
                Ok(Some(a)) => (
                    !a.status.injectable() || (before.is_some() && a.seq.is_some() && a.seq != before),
                    a.seq,
                ),
                Ok(None) => (self.herdr.status(pane).await.is_ok_and(|s| !s.injectable()), None),
                Err(e) if e.code() == Some("pane_not_found") => {
                    return Err(NotInjected(FailReason::Stopped, e.to_string()));
                }
                Err(_) => (false, None),
            };
            if left_idle {
                return Ok(seq);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(NotInjected(
                    FailReason::NotSubmitted,
                    format!(
                        "herdr accepted the input but the agent stayed idle for {bound:?}: the brief is left in the terminal's input, and a shell may run it when the program in front ends ([C-23])"
                    ),
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
