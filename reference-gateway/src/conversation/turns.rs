//! The conversation's own state (SPEC §7): the turns waiting at this gateway's workers and the
//! questions open at its mains, both by turnId.
//!
//! Exists apart from the conversation's behaviour ([`super`]) because the hub holds it; it imports
//! nothing of the hub.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::envelope::now_ms;

/// How a waiting turn ended.
#[derive(Debug)]
pub enum TurnEnd {
    Answered(String),
    NoWaiter,
}

/// An open question at the main's gateway.
#[derive(Debug, Clone)]
pub struct Question {
    pub asker: String,
    pub main: String,
    pub ask_msg_id: String,
    pub trace_id: String,
    pub expires_at: u64,
    pub abandoned: bool,
}

/// Turns waiting at workers and questions open at mains, both by turnId.
#[derive(Default)]
pub struct Conversations {
    /// turnId → (asking worker, its waiting call).
    turns: Mutex<HashMap<String, (String, oneshot::Sender<TurnEnd>)>>,
    questions: Mutex<HashMap<String, Question>>,
}

impl Conversations {
    pub fn open_turn(&self, worker: &str, turn_id: &str) -> oneshot::Receiver<TurnEnd> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.turns.lock() {
            m.insert(turn_id.to_string(), (worker.to_string(), tx));
        }
        rx
    }

    pub fn close_turn(&self, turn_id: &str) -> Option<oneshot::Sender<TurnEnd>> {
        self.turns.lock().ok()?.remove(turn_id).map(|(_, tx)| tx)
    }

    /// Ends every waiting turn of a worker (it is being stopped): each waiting `bridge_ask`
    /// then returns `expired` and its question is ABANDONED (ASK-5).
    pub fn end_turns_of(&self, worker: &str) {
        if let Ok(mut m) = self.turns.lock() {
            m.retain(|_, (w, _)| w != worker);
        }
    }

    pub fn record_question(&self, turn_id: &str, q: Question) {
        if let Ok(mut m) = self.questions.lock() {
            let now = now_ms();
            m.retain(|_, q| q.expires_at + 60_000 > now);
            m.entry(turn_id.to_string()).or_insert(q);
        }
    }

    pub fn question(&self, turn_id: &str) -> Option<Question> {
        self.questions.lock().ok()?.get(turn_id).cloned()
    }

    pub fn abandon(&self, turn_id: &str) -> bool {
        self.questions
            .lock()
            .ok()
            .and_then(|mut m| m.get_mut(turn_id).map(|q| q.abandoned = true))
            .is_some()
    }

    pub fn remove_question(&self, turn_id: &str) {
        if let Ok(mut m) = self.questions.lock() {
            m.remove(turn_id);
        }
    }
}
