//! [C-25]: which other hosts this gateway has heard from since its current connection began.
//!
//! After a whole site restarts, a receiver may be back long before the sender's host; a host not
//! yet heard from is no evidence against its entities. The grace (`grace.rs`) reads this record;
//! the roster consumer writes it. It lives apart from both so that the gateway's state can hold
//! it without depending on the grace logic.

use std::collections::HashMap;
use std::sync::Mutex;

/// [C-25]: when the current connection began, and when each other host's `_gateway` presence
/// first arrived since.
#[derive(Debug, Default)]
pub struct HostsHeard {
    inner: Mutex<(Option<tokio::time::Instant>, HashMap<String, tokio::time::Instant>)>,
}

impl HostsHeard {
    /// A new connection: nobody heard from yet.
    pub fn reset(&self, now: tokio::time::Instant) {
        if let Ok(mut g) = self.inner.lock() {
            g.0 = Some(now);
            g.1.clear();
        }
    }

    /// `host`'s `_gateway` presence arrived (the first time since the connection counts).
    pub fn heard(&self, host: &str) {
        if let Ok(mut g) = self.inner.lock()
            && !g.1.contains_key(host)
        {
            g.1.insert(host.to_string(), tokio::time::Instant::now());
        }
    }

    /// When `host` was first heard from since the connection began.
    pub fn first_heard(&self, host: &str) -> Option<tokio::time::Instant> {
        self.inner.lock().ok().and_then(|g| g.1.get(host).copied())
    }

    /// When the current connection began (none yet: `None`).
    pub fn since(&self) -> Option<tokio::time::Instant> {
        self.inner.lock().ok().and_then(|g| g.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_are_heard_once_per_connection() {
        let h = HostsHeard::default();
        assert_eq!(h.since(), None);
        let t0 = tokio::time::Instant::now();
        h.reset(t0);
        assert_eq!(h.first_heard("b"), None);
        h.heard("b");
        let first = h.first_heard("b").expect("heard");
        h.heard("b");
        assert_eq!(h.first_heard("b"), Some(first));
        h.reset(tokio::time::Instant::now());
        assert_eq!(h.first_heard("b"), None);
    }
}
