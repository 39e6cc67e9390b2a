//! The pull path's held deliveries (SPEC §6): per main, the messages held unacked in arrival
//! order and the waiters that take them.
//!
//! Exists apart from the pull path's behaviour ([`super`]) because the hub holds it: it is state
//! the connection's teardown and the sweeper touch, and it imports nothing of the hub.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use lapin::Acker;
use lapin::options::BasicAckOptions;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::envelope::{Envelope, Kind};

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
    /// A delivery for `owner` held from now on (its body and acker taken from the delivery).
    pub fn arrived(owner: &str, env: Envelope, d: lapin::message::Delivery) -> Held {
        Held {
            owner: owner.to_string(),
            env,
            body: d.data,
            acker: d.acker,
            since: std::time::Instant::now(),
        }
    }

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
