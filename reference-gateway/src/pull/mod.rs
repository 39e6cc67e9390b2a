//! Pull path (SPEC §6): messages for a main are held unacked until the main drains them.
//!
//! At-least-once: a held message keeps its delivery unacked, so a gateway crash before the drain
//! makes the broker redeliver it. The ack follows the drain (RPL-1). An open waiter — a
//! `bridge_send` waiting for that worker's reply, or a `bridge_wait` — takes a message the moment
//! it arrives (RPL-2); otherwise it is held, in arrival order, within the prefetch window (RPL-5).
//!
//! The held deliveries and waiters themselves are [`held`] (state the hub holds); this module is
//! what the gateway does with them: the drain and the nudger.

pub mod held;

pub use held::{Drained, Held, PullState, WaitTicket, Want};

use crate::envelope::Kind;
use crate::metrics::{Metrics, Stage};

impl crate::gateway::Gateway {
    /// A drain: ack, remember the msgId for this gateway's life (RPL-1 dedup), hand it out.
    pub async fn drain(&self, held: Held) -> Drained {
        let (id, exp) = (held.env.msg_id.clone(), held.env.expires_at);
        let key = crate::verify::seen_key(&held.owner, &id);
        if held.env.kind == Kind::Ask
            && let Some(turn) = held.env.turn_id.as_deref()
        {
            // The main has seen the question: it may answer it (bridge_answer).
            let main = held.owner.clone();
            self.conversations.record_question(
                turn,
                crate::conversation::turns::Question {
                    asker: held.env.from.clone(),
                    main,
                    ask_msg_id: id.clone(),
                    trace_id: held.env.trace_id.clone(),
                    expires_at: exp,
                    abandoned: false,
                },
            );
        }
        // Seen before the ack goes out: a duplicate arriving during the ack is a replay.
        self.seen.insert(&key, exp);
        self.metrics.observe(Stage::Held, held.since.elapsed());
        let d = held.drain().await;
        Metrics::count(&self.metrics.drained, &[("kind", d.kind.as_str())]);
        d
    }
}

impl crate::gateway::Gateway {
    /// RPL-3: nudges a main that has held messages and no open waiter, with a one-line notice in
    /// its pane, repeated with backoff (`FLEET_NUDGE_INITIAL_MS`, doubling, capped) until drained.
    /// Right before each notice, `pane.process_info` ([C-20]): while a shell at its prompt holds
    /// the main's terminal the notice is not typed (the messages stay held).
    pub fn ensure_nudger(self: &std::sync::Arc<Self>, main: &str) {
        if !self.local.start_nudging(main) {
            return;
        }
        let gw = std::sync::Arc::clone(self);
        let main = main.to_string();
        tokio::spawn(async move {
            let mut delay = gw.cfg.nudge_initial;
            loop {
                tokio::time::sleep(delay).await;
                let held = gw.pull.held_count(&main);
                if held == 0 || gw.entity(&main).is_none() {
                    break;
                }
                if gw.pull.has_any_waiter(&main) {
                    continue; // an open waiter will take the next message; no nudge meanwhile
                }
                let Some(pane) = gw.entity(&main).map(|e| e.pane) else {
                    break;
                };
                match gw.herdr.foreground(&pane).await {
                    Ok(f) if f.is_shell() => {
                        // [C-20]: the main's agent is gone; a notice typed now would run in a
                        // shell. Nothing is typed and nothing counted; the messages stay held
                        // for a drain, and the nudger looks again at its next interval.
                        tracing::info!(
                            gid = %main, pane = %pane, held,
                            "nudge not typed: the main's agent is gone ({}) ([C-20])",
                            f.describe()
                        );
                        delay = (delay * 2).min(gw.cfg.nudge_max);
                        continue;
                    }
                    Err(e) if e.code() == Some("pane_not_found") => {
                        tracing::info!(gid = %main, pane = %pane, held, "nudge not typed: the main's pane is gone");
                        delay = (delay * 2).min(gw.cfg.nudge_max);
                        continue;
                    }
                    _ => {}
                }
                let note = format!("[fleet] {held} message(s) waiting for you: call bridge_poll or bridge_wait");
                match gw.herdr.send_input(&pane, &note).await {
                    Ok(()) => {
                        gw.metrics.nudges.inc();
                    }
                    Err(e) => tracing::debug!(gid = %main, error = %e, "nudge not delivered"),
                }
                delay = (delay * 2).min(gw.cfg.nudge_max);
            }
            gw.local.stop_nudging(&main);
        });
    }
}
