//! Slow steps, named in the log at WARN: a publish the broker confirmed late, a delivery one of
//! the gateway's consumers took long to handle.
//!
//! Why it exists: a stall shows in a roster or an inject only as something that did not happen
//! (issue 59: a host's heartbeats reached a peer's roster ~17 s late, once in ~37 quiet runs, and
//! INFO logs could not say whether the publisher, the broker or the consumer held them). With
//! these two lines, the next such stall names its side at the default level; a healthy gateway
//! logs neither (both take milliseconds), so an operator can alert on them.

use std::time::Duration;

use tracing::warn;

/// A step slower than this is named: well above a healthy broker round trip, below the
/// roster's and the inject path's bounds (CONTRACT §12's 2 s, H, the inject bound).
pub const SLOW: Duration = Duration::from_secs(2);

/// A publish confirmed `took` after it was asked for (from the first attempt: a wait for a
/// reconnect counts).
pub fn publish_confirmed(msg_id: &str, kind: &str, took: Duration) {
    if took >= SLOW {
        warn!(msgId = %msg_id, kind, took = ?took, "publish confirmed slowly: the broker took longer than {SLOW:?} to take it");
    }
}

/// One delivery of consumer `tag` took `took` to handle; the queue's later deliveries waited.
pub fn delivery_handled(tag: &str, took: Duration) {
    if took >= SLOW {
        warn!(consumer = tag, took = ?took, "a delivery took longer than {SLOW:?} to handle; this consumer's later deliveries waited");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// What the closure logged, as the gateway's formatter writes it.
    fn logged(f: impl FnOnce()) -> String {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let buf = Arc::clone(&buf);
            move || Capture(Arc::clone(&buf))
        };
        let subscriber = tracing_subscriber::fmt().with_writer(writer).with_ansi(false).finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buf.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if let Ok(mut v) = self.0.lock() {
                v.extend_from_slice(b);
            }
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn only_a_slow_step_is_named_at_warn() {
        let quick = logged(|| {
            publish_confirmed("m1", "SEND", Duration::from_millis(40));
            delivery_handled("roster", Duration::from_millis(5));
        });
        assert!(quick.is_empty(), "{quick}");
        let slow = logged(|| {
            publish_confirmed("m2", "PRESENCE", Duration::from_secs(12));
            delivery_handled("roster", Duration::from_secs(3));
        });
        let lines: Vec<&str> = slow.lines().collect();
        assert_eq!(lines.len(), 2, "{slow}");
        assert!(lines[0].contains("WARN") && lines[0].contains("m2") && lines[0].contains("confirmed slowly"));
        assert!(lines[1].contains("WARN") && lines[1].contains("roster") && lines[1].contains("to handle"));
    }
}
