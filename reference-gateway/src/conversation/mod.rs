//! Conversation (SPEC §7): ASK / ANSWER with gateway-enforced expiry.
//!
//! Asks are deliberately not durable; only their terminal outcome matters. The asking worker's
//! gateway keeps each waiting turn; the main's gateway keeps each open question. An ANSWER reaches
//! the worker only while its turn still waits (else TOO_LATE goes back, ASK-4); a turn that ends
//! unanswered is ABANDONED and the main's gateway withdraws the question (ASK-5); a main with no
//! open waiter gets the ASK refused at once with NO_WAITER (ASK-2).

use std::sync::Arc;
use std::time::Duration;

use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use tracing::{info, warn};

pub mod turns;

pub use turns::{Conversations, Question, TurnEnd};

use crate::envelope::{Envelope, Kind, now_ms};
use crate::gateway::Gateway;
use crate::publish::{Outgoing, PublishError};
use crate::pull::held::Held;
use crate::registry::Entity;
use crate::topology::MSG_EXCHANGE;

/// Abandons a turn whose `bridge_ask` call went away before it ended (ASK-5: cancel).
struct TurnGuard {
    gw: Arc<Gateway>,
    worker: Entity,
    parent: String,
    /// The ASK while the turn is still open.
    ask: Option<Envelope>,
}

impl Drop for TurnGuard {
    fn drop(&mut self) {
        if let Some(ask) = self.ask.take() {
            self.gw
                .conversations
                .close_turn(ask.turn_id.as_deref().unwrap_or_default());
            let (gw, worker, parent) = (Arc::clone(&self.gw), self.worker.clone(), self.parent.clone());
            tokio::spawn(async move { gw.abandon_turn(&worker, &parent, &ask).await });
        }
    }
}

/// What `bridge_ask` returns.
pub enum AskOutcome {
    Answered(String),
    NoWaiter,
    Expired,
    NoRoute,
    Failed(String),
    /// The ASK's publish failed ([`PublishError`]: `not_connected` is definite, CONTRACT §3).
    NotPublished(PublishError),
}

/// What `bridge_answer` returns.
pub enum AnswerOutcome {
    Sent,
    Abandoned,
    Expired,
    Unknown,
    Failed(String),
}

impl Gateway {
    /// ASK-1: a worker asks its parent and blocks until answered, refused, or expired. If the
    /// caller goes away first (the MCP request is cancelled), the turn is abandoned all the same.
    pub async fn ask(self: &Arc<Self>, worker: &Entity, question: &str, timeout: Duration) -> AskOutcome {
        let Some(parent) = worker.parent.clone() else {
            return AskOutcome::Failed("this worker has no parent".into());
        };
        let turn_id = crate::envelope::new_uuid();
        let expires_at = now_ms() + timeout.as_millis() as u64;
        let rx = self.conversations.open_turn(&worker.gid, &turn_id);
        let mut out = Outgoing::new(
            Kind::Ask,
            MSG_EXCHANGE,
            parent.clone(),
            worker.gid.clone(),
            question.as_bytes().to_vec(),
        );
        out.turn_id = Some(turn_id.clone());
        out.expires_at = Some(expires_at);
        let env = match self.publisher.publish(out).await {
            Ok(env) => env,
            Err(e) => {
                self.conversations.close_turn(&turn_id);
                return match e {
                    PublishError::NoRoute => AskOutcome::NoRoute,
                    other => AskOutcome::NotPublished(other),
                };
            }
        };
        info!(traceId = %env.trace_id, msgId = %env.msg_id, turnId = %turn_id, "ASK published");
        let mut guard = TurnGuard {
            gw: Arc::clone(self),
            worker: worker.clone(),
            parent,
            ask: Some(env),
        };
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(TurnEnd::Answered(text))) => {
                guard.ask = None;
                AskOutcome::Answered(text)
            }
            Ok(Ok(TurnEnd::NoWaiter)) => {
                guard.ask = None;
                AskOutcome::NoWaiter
            }
            _ => {
                // ASK-5: the turn ended without an answer; withdraw the question.
                if let Some(ask) = guard.ask.take() {
                    self.conversations
                        .close_turn(ask.turn_id.as_deref().unwrap_or_default());
                    self.abandon_turn(&guard.worker, &guard.parent, &ask).await;
                }
                AskOutcome::Expired
            }
        }
    }

    async fn abandon_turn(&self, worker: &Entity, parent: &str, ask: &Envelope) {
        let mut out = Outgoing::new(
            Kind::Abandoned,
            MSG_EXCHANGE,
            parent.to_string(),
            worker.gid.clone(),
            b"{}".to_vec(),
        );
        out.turn_id = ask.turn_id.clone();
        out.corr_id = Some(ask.msg_id.clone());
        out.trace_id = Some(ask.trace_id.clone());
        if let Err(e) = self.publisher.publish(out).await {
            warn!(traceId = %ask.trace_id, error = %e, "ABANDONED not published");
        }
    }

    /// ANSWER or NO_WAITER arriving at a worker's inbox.
    pub async fn on_turn_message(&self, worker: &Entity, env: Envelope, d: Delivery) {
        let turn = env.turn_id.clone().unwrap_or_default();
        let waiting = self.conversations.close_turn(&turn);
        match (env.kind, waiting) {
            (Kind::Answer, Some(tx)) => {
                let text = String::from_utf8_lossy(&d.data).into_owned();
                if let Err(TurnEnd::Answered(_)) = tx.send(TurnEnd::Answered(text)) {
                    self.too_late(worker, &env).await;
                }
            }
            (Kind::Answer, None) => self.too_late(worker, &env).await,
            (Kind::NoWaiter, Some(tx)) => {
                let _ = tx.send(TurnEnd::NoWaiter);
            }
            _ => {}
        }
        self.seen
            .insert(&crate::verify::seen_key(&worker.gid, &env.msg_id), env.expires_at);
        let _ = d.acker.ack(BasicAckOptions::default()).await;
    }

    /// ASK-4: an ANSWER for a turn no longer waiting goes back as TOO_LATE.
    async fn too_late(&self, worker: &Entity, answer: &Envelope) {
        let mut out = Outgoing::new(
            Kind::TooLate,
            MSG_EXCHANGE,
            answer.from.clone(),
            worker.gid.clone(),
            b"{}".to_vec(),
        );
        out.turn_id = answer.turn_id.clone();
        out.corr_id = Some(answer.msg_id.clone());
        out.trace_id = Some(answer.trace_id.clone());
        if let Err(e) = self.publisher.publish(out).await {
            warn!(error = %e, "TOO_LATE not published");
        }
    }

    /// ASK-2: an ASK for a main goes to an open waiter, or is refused at once with NO_WAITER.
    pub async fn on_ask(&self, main: &str, env: Envelope, d: Delivery) {
        let held = Held::arrived(main, env.clone(), d);
        if self.pull.has_waiter(main, &env) && self.hold(held) {
            return; // the waiter drains (and acks) it, recording the question.
        }
        // No waiter took it: take it back out of the held list and refuse it.
        let taken = self.pull.take_msg(main, &env.msg_id);
        let mut out = Outgoing::new(
            Kind::NoWaiter,
            MSG_EXCHANGE,
            env.from.clone(),
            main.to_string(),
            b"{}".to_vec(),
        );
        out.turn_id = env.turn_id.clone();
        out.corr_id = Some(env.msg_id.clone());
        out.trace_id = Some(env.trace_id.clone());
        if let Err(e) = self.publisher.publish(out).await {
            warn!(error = %e, "NO_WAITER not published");
        }
        self.seen
            .insert(&crate::verify::seen_key(main, &env.msg_id), env.expires_at);
        if let Some(h) = taken {
            let _ = h.acker.ack(BasicAckOptions::default()).await;
        }
    }

    /// ASK-5: ABANDONED withdraws the question (and a held ASK of that turn).
    pub async fn on_abandoned(&self, main: &str, env: Envelope, d: Delivery) {
        if let Some(turn) = env.turn_id.as_deref() {
            if !self.conversations.abandon(turn) {
                self.conversations.record_question(
                    turn,
                    Question {
                        asker: env.from.clone(),
                        main: main.to_string(),
                        ask_msg_id: env.corr_id.clone().unwrap_or_default(),
                        trace_id: env.trace_id.clone(),
                        expires_at: env.expires_at,
                        abandoned: true,
                    },
                );
            }
            for h in self.pull.take_turn(main, turn) {
                let _ = h.acker.ack(BasicAckOptions::default()).await;
            }
        }
        self.seen
            .insert(&crate::verify::seen_key(main, &env.msg_id), env.expires_at);
        let _ = d.acker.ack(BasicAckOptions::default()).await;
    }

    /// `bridge_answer`: ANSWER the asker, unless the question was withdrawn or has expired.
    pub async fn answer(&self, main: &Entity, turn_id: &str, text: &str) -> AnswerOutcome {
        let Some(q) = self.conversations.question(turn_id).filter(|q| q.main == main.gid) else {
            return AnswerOutcome::Unknown;
        };
        if q.abandoned {
            return AnswerOutcome::Abandoned;
        }
        if q.expires_at <= now_ms() {
            self.conversations.remove_question(turn_id);
            return AnswerOutcome::Expired;
        }
        let mut out = Outgoing::new(
            Kind::Answer,
            MSG_EXCHANGE,
            q.asker.clone(),
            main.gid.clone(),
            text.as_bytes().to_vec(),
        );
        out.turn_id = Some(turn_id.to_string());
        out.corr_id = None;
        out.trace_id = Some(q.trace_id.clone());
        out.expires_at = Some(q.expires_at);
        match self.publisher.publish(out).await {
            Ok(_) => {
                self.conversations.remove_question(turn_id);
                AnswerOutcome::Sent
            }
            Err(e) => AnswerOutcome::Failed(e.to_string()),
        }
    }
}
