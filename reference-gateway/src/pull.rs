//! Pull path (SPEC §6): messages for a main are held unacked until the main drains them.
//!
//! At-least-once: a held message keeps its delivery unacked, so a gateway crash before the drain
//! makes the broker redeliver it. The ack follows the drain (RPL-1). An open waiter — a
//! `bridge_send` waiting for that worker's reply, or a `bridge_wait` — takes a message the moment
//! it arrives (RPL-2); otherwise it is held, in arrival order, within the prefetch window (RPL-5).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lapin::Acker;
use lapin::options::BasicAckOptions;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::envelope::{Envelope, Kind};
use crate::metrics::{Metrics, Stage};

/// The longest a drain waits for its ack to be handed to the connection.
const ACK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One message held for a main, with the means to ack it.
pub struct Held {
    /// The local main whose inbox it came from.
    pub owner: String,
    pub env: Envelope,
    pub body: Vec<u8>,
    pub acker: Acker,
    pub since: std::time::Instant,
}

/// What a drain hands to the MCP caller.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Drained {
    pub msg_id: String,
    pub kind: Kind,
    pub from: String,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    pub trace_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corr_id: Option<String>,
    /// The routing key it came by (`<gid>` or `broadcast.<group>`).
    pub to: String,
}

impl Held {
    /// Acks the delivery (the drain) and returns the caller's view of it.
    pub async fn drain(self) -> Drained {
        // Bounded: an ack on a connection that died unnoticed must not hang the drain (the MCP
        // call waits on it). Unacked, the broker redelivers it (at-least-once, RPL-1).
        let ack = self.acker.ack(BasicAckOptions::default());
        match tokio::time::timeout(ACK_TIMEOUT, ack).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(msgId = %self.env.msg_id, traceId = %self.env.trace_id, error = %e, "ack after drain failed");
            }
            Err(_) => {
                tracing::warn!(msgId = %self.env.msg_id, traceId = %self.env.trace_id, "ack after drain not sent within {ACK_TIMEOUT:?}");
            }
        }
        Drained {
            msg_id: self.env.msg_id.clone(),
            kind: self.env.kind,
            from: self.env.from.clone(),
            text: String::from_utf8_lossy(&self.body).into_owned(),
            turn_id: self.env.turn_id.clone(),
            trace_id: self.env.trace_id.clone(),
            corr_id: self.env.corr_id.clone(),
            to: self.env.to.clone(),
        }
    }
}

/// Which messages a waiter takes.
#[derive(Debug, Clone)]
pub enum Want {
    /// `bridge_wait(from?)`: anything held, optionally only from one sender.
    Any { from: Option<String> },
    /// `bridge_send(wait_reply)`: the worker's REPLY or ASK.
    ReplyFrom { from: String },
}

impl Want {
    fn takes(&self, env: &Envelope) -> bool {
        match self {
            Want::Any { from } => from.as_deref().is_none_or(|f| f == env.from),
            Want::ReplyFrom { from } => *from == env.from && matches!(env.kind, Kind::Reply | Kind::Ask),
        }
    }
}

struct Waiter {
    id: u64,
    want: Want,
    tx: oneshot::Sender<Held>,
}

#[derive(Default)]
struct MainBox {
    held: VecDeque<Held>,
    waiters: Vec<Waiter>,
}

type Mains = Arc<Mutex<HashMap<String, MainBox>>>;

/// Held messages and open waiters of every local main.
#[derive(Default)]
pub struct PullState {
    mains: Mains,
    next_id: AtomicU64,
}

/// A registered waiter. Dropping it — also when its MCP call is cancelled or its client goes
/// away mid-wait — withdraws the waiter and puts a message that already reached it back at the
/// head of the held list: a message handed to a waiter that is gone is never stranded unacked.
pub struct WaitTicket {
    pub id: u64,
    pub main: String,
    pub rx: oneshot::Receiver<Held>,
    mains: Mains,
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        // Under the lock: `offer` sends to waiters while holding it, so once the waiter is
        // withdrawn here nothing more can reach this receiver.
        let mut m = self.mains.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(b) = m.get_mut(&self.main) else { return };
        b.waiters.retain(|w| w.id != self.id);
        if let Ok(h) = self.rx.try_recv() {
            b.held.push_front(h);
        }
    }
}

impl PullState {
    /// The state, even after a panic elsewhere poisoned the lock: a held message must never be
    /// dropped on the floor because of it (it would sit unacked until the next reconnect).
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, MainBox>> {
        self.mains.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Offers an arriving message: an open waiter that wants it takes it; otherwise it is held.
    /// Returns true when a waiter took it.
    pub fn offer(&self, main: &str, mut held: Held) -> bool {
        let mut m = self.lock();
        let b = m.entry(main.to_string()).or_default();
        while let Some(pos) = b.waiters.iter().position(|w| w.want.takes(&held.env)) {
            let w = b.waiters.remove(pos);
            match w.tx.send(held) {
                Ok(()) => return true,
                Err(back) => held = back, // that caller is gone; try the next waiter
            }
        }
        b.held.push_back(held);
        false
    }

    /// Takes held messages matching `want`, oldest first, at most `max`.
    pub fn take(&self, main: &str, want: &Want, max: usize) -> Vec<Held> {
        let mut m = self.lock();
        let Some(b) = m.get_mut(main) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut keep = VecDeque::with_capacity(b.held.len());
        while let Some(h) = b.held.pop_front() {
            if out.len() < max && want.takes(&h.env) {
                out.push(h)
            } else {
                keep.push_back(h)
            }
        }
        b.held = keep;
        out
    }

    /// Registers a waiter, unless a held message already matches (then it is returned at once).
    /// Take-or-register is one step under the lock: a message arriving between a look at the
    /// held list and the registration would otherwise stay held while the waiter takes the one
    /// after it — drained out of order.
    pub fn wait(&self, main: &str, want: Want) -> Result<Held, WaitTicket> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let ticket = WaitTicket {
            id,
            main: main.to_string(),
            rx,
            mains: Arc::clone(&self.mains),
        };
        let mut m = self.lock();
        let b = m.entry(main.to_string()).or_default();
        if let Some(pos) = b.held.iter().position(|h| want.takes(&h.env))
            && let Some(h) = b.held.remove(pos)
        {
            drop(m);
            return Ok(h); // the unused ticket's drop finds no waiter to withdraw
        }
        b.waiters.push(Waiter { id, want, tx });
        Err(ticket)
    }

    /// Registers a waiter for messages arriving from now on (held ones are left for a drain).
    pub fn register(&self, main: &str, want: Want) -> WaitTicket {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut m = self.lock();
            m.entry(main.to_string())
                .or_default()
                .waiters
                .push(Waiter { id, want, tx });
        }
        WaitTicket {
            id,
            main: main.to_string(),
            rx,
            mains: Arc::clone(&self.mains),
        }
    }

    /// Withdraws a waiter; a message that reached it in the meantime is returned (never lost).
    pub fn cancel(&self, mut ticket: WaitTicket) -> Option<Held> {
        let mut m = self.lock();
        if let Some(b) = m.get_mut(&ticket.main) {
            b.waiters.retain(|w| w.id != ticket.id);
        }
        let got = ticket.rx.try_recv().ok();
        drop(m);
        got // the ticket's drop then finds nothing left to do
    }

    /// Takes the held message with that msgId, if any.
    pub fn take_msg(&self, main: &str, msg_id: &str) -> Option<Held> {
        let mut m = self.lock();
        let b = m.get_mut(main)?;
        let pos = b.held.iter().position(|h| h.env.msg_id == msg_id)?;
        b.held.remove(pos)
    }

    /// Takes every held ASK of a turn (ABANDONED withdraws it).
    pub fn take_turn(&self, main: &str, turn_id: &str) -> Vec<Held> {
        let mut m = self.lock();
        let Some(b) = m.get_mut(main) else { return Vec::new() };
        let (out, keep): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut b.held)
            .into_iter()
            .partition(|h| h.env.kind == Kind::Ask && h.env.turn_id.as_deref() == Some(turn_id));
        b.held = keep;
        out.into_iter().collect()
    }

    /// True while any waiter of that main is open (no nudges then).
    pub fn has_any_waiter(&self, main: &str) -> bool {
        self.mains
            .lock()
            .map(|m| m.get(main).is_some_and(|b| !b.waiters.is_empty()))
            .unwrap_or(false)
    }

    /// Takes every held message whose `expiresAt` has passed (CAP-3).
    pub fn take_expired(&self, now_ms: u64) -> Vec<Held> {
        let mut m = self.lock();
        let mut out = Vec::new();
        for b in m.values_mut() {
            let (gone, keep): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut b.held)
                .into_iter()
                .partition(|h| h.env.expires_at <= now_ms);
            b.held = keep;
            out.extend(gone);
        }
        out
    }

    /// Puts a message back at the head (a waiter that could not deliver it).
    pub fn put_back(&self, main: &str, held: Held) {
        {
            let mut m = self.lock();
            m.entry(main.to_string()).or_default().held.push_front(held);
        }
    }

    /// True while a waiter of that main is open (ASK-2, nudges).
    pub fn has_waiter(&self, main: &str, env: &Envelope) -> bool {
        self.mains
            .lock()
            .map(|m| m.get(main).is_some_and(|b| b.waiters.iter().any(|w| w.want.takes(env))))
            .unwrap_or(false)
    }

    /// True while a message with that msgId is held (a second copy is a replay).
    pub fn is_held(&self, main: &str, msg_id: &str) -> bool {
        self.mains
            .lock()
            .map(|m| {
                m.get(main)
                    .is_some_and(|b| b.held.iter().any(|h| h.env.msg_id == msg_id))
            })
            .unwrap_or(false)
    }

    pub fn held_count(&self, main: &str) -> usize {
        self.mains
            .lock()
            .map(|m| m.get(main).map_or(0, |b| b.held.len()))
            .unwrap_or(0)
    }

    /// Forgets every held message: their deliveries died with the connection and the broker
    /// redelivers them.
    /// Returns the seen-set keys of what was forgotten.
    pub fn forget_held(&self) -> Vec<String> {
        let mut keys = Vec::new();
        {
            let mut m = self.lock();
            for b in m.values_mut() {
                keys.extend(
                    b.held
                        .drain(..)
                        .map(|h| crate::verify::seen_key(&h.owner, &h.env.msg_id)),
                );
            }
        }
        keys
    }

    /// Drops a main's state (entity stopped).
    pub fn remove(&self, main: &str) {
        {
            let mut m = self.lock();
            m.remove(main);
        }
    }
}

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
                crate::conversation::Question {
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
