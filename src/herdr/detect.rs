//! herdr's own detection of an agent it recognises by name: a `claude` that never reports turns
//! `idle` after about four seconds.
//!
//! Why it exists: real herdr v0.8.2 watches the screen of a pane whose program it recognises
//! ([`is_recognised_agent`](super::is_recognised_agent)) and shows the agent `idle` once it looks
//! settled, whether or not the program ever reports (`2026-12-06` recordings, cases n1/n2: a bash
//! script and a copy of `sleep`, both named `claude`, `idle` after 3.75–4.09 s). A gateway that
//! types a brief into such a pane sees a ready agent that will never read it — the path SPEC
//! [C-23]'s `"typed": true` is about. A fake that kept such a program `unknown` forever could not
//! play it, and a gateway that waited on `unknown` would pass here and fail on real herdr.
//!
//! The model: a recognised program starting in front arms a deadline ([`DETECT_IDLE_AFTER`](super::DETECT_IDLE_AFTER), or
//! what [`FakeHerdr::set_detection_delay`](super::FakeHerdr::set_detection_delay) set); any
//! report, release or exit before it disarms it. The deadline is applied whenever the model is
//! read ([`State::detect`]), and a timer wakes `agent.wait` callers at it
//! ([`Shared::arm_detections`]), so the change is seen exactly when it is due, not polled.

use std::sync::{Arc, Weak};
use std::time::Instant;

use super::agent::AgentStatus;
use super::model::State;
use super::server::Shared;

impl State {
    /// Applies every detection due at `now`: the pane's agent is shown `idle`, a state change.
    pub(super) fn detect(&mut self, now: Instant) {
        let due: Vec<String> = self
            .panes
            .iter()
            .filter(|p| p.detect_idle_at.is_some_and(|at| at <= now))
            .map(|p| p.id.clone())
            .collect();
        for id in due {
            self.with_pane(&id, |pane, ctx| {
                pane.detect_idle_at = None;
                pane.report(AgentStatus::Idle, ctx);
            });
        }
    }

    /// The deadlines armed since the last call (each handed out once).
    fn unarmed_detections(&mut self) -> Vec<Instant> {
        self.panes
            .iter_mut()
            .filter(|p| !p.detection_armed)
            .filter_map(|p| {
                let at = p.detect_idle_at?;
                p.detection_armed = true;
                Some(at)
            })
            .collect()
    }
}

impl Shared {
    /// Starts a timer for each detection armed since the last call: at its deadline the model is
    /// read (which applies it) and `agent.wait` callers wake. A timer outliving the fake does
    /// nothing.
    pub(super) fn arm_detections(this: &Arc<Shared>) {
        let deadlines = this.state().unarmed_detections();
        for at in deadlines {
            let weak: Weak<Shared> = Arc::downgrade(this);
            this.runtime.spawn(async move {
                tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
                if let Some(shared) = weak.upgrade() {
                    drop(shared.state());
                    shared.bump();
                }
            });
        }
    }
}
