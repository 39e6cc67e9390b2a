//! Sends awaiting their INJECTED or FAILED at the sender's gateway (SPEC §5, FWD-3/FWD-4), by
//! msgId.
//!
//! Exists apart from the forward path's behaviour ([`super`]) because the hub holds it (the
//! control consumer resolves a send, `bridge_send` waits on one); it imports nothing of the hub.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::oneshot;

use crate::envelope::FailedBody;

/// The outcome of a SEND as its sender's gateway learns it.
#[derive(Debug, Clone)]
pub enum SendOutcome {
    Injected,
    Failed(FailedBody),
}

/// Sends awaiting their INJECTED or FAILED, by msgId.
#[derive(Default)]
pub struct PendingSends {
    map: Mutex<HashMap<String, oneshot::Sender<SendOutcome>>>,
}

impl PendingSends {
    pub fn open(&self, msg_id: &str) -> oneshot::Receiver<SendOutcome> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut m) = self.map.lock() {
            m.insert(msg_id.to_string(), tx);
        }
        rx
    }

    pub fn is_open(&self, msg_id: &str) -> bool {
        self.map.lock().map(|m| m.contains_key(msg_id)).unwrap_or(false)
    }

    pub fn resolve(&self, msg_id: &str, outcome: SendOutcome) {
        if let Some(tx) = self.map.lock().ok().and_then(|mut m| m.remove(msg_id)) {
            let _ = tx.send(outcome);
        }
    }

    pub fn close(&self, msg_id: &str) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(msg_id);
        }
    }
}
