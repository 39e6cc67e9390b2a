//! Ending a connection in order, and the graceful stop (CONTRACT §1) that does it last.
//!
//! Exists because closing a connection while channels are still open is not quiet everywhere:
//! LavinMQ answers `connection.close` by closing each open channel, while lapin is already closing
//! them, and lapin logs that at ERROR (`invalid channel state: Closing (channel.close)`) — on
//! every stop. So every channel of the connection (inbox consumers, the roster, control and DLQ
//! consumers, the confirm-mode publish channel) is closed first, each close awaited (bounded), and
//! only then the extra inbox connections and the main one. A graceful stop logs no ERROR
//! (CONTRACT §1).

use std::sync::atomic::Ordering;
use std::time::Duration;

use lapin::Channel;

use super::Gateway;

/// How long closing the channels may take in all before the connection is closed anyway (a
/// broker that stopped answering must not hold up a stop or a reconnect).
const CHANNELS_CLOSE_BOUND: Duration = Duration::from_secs(3);

/// The same bound when the connection is left because its node stalled (`stall.rs`): the node's
/// channel processes wait on the nodes it cannot reach, so its close-oks come late or never, and
/// every moment spent waiting for them delays the move to another node.
const STALLED_CLOSE_BOUND: Duration = Duration::from_millis(500);

impl Gateway {
    /// Graceful stop on SIGTERM, bounded: stop consuming inboxes (held messages go back to the
    /// broker), fail pending injects as `stopped` and wait until their FAILED is published,
    /// then announce `down` for every entity and the gateway. The caller then ends the run loop,
    /// which closes the channels and the connection ([`Gateway::teardown_connection`]).
    pub async fn graceful_stop(&self, bound: Duration) {
        let work = async {
            self.stopping.send_replace(true);
            close_all(self.local.take_inboxes(), "gateway stopping", CHANNELS_CLOSE_BOUND).await;
            while self.inflight_injects.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            self.areas.stopping(self).await;
        };
        let _ = tokio::time::timeout(bound, work).await;
    }

    /// Ends the current connection (after a stop, a loss or a failed setup): every channel first
    /// (on a lost connection each close fails at once), then the extra inbox connections, then
    /// the main one; each step bounded.
    pub(super) async fn teardown_connection(&self) {
        let bound = if self.stalled.swap(false, Ordering::SeqCst) {
            STALLED_CLOSE_BOUND
        } else {
            CHANNELS_CLOSE_BOUND
        };
        let mut open = self.local.take_inboxes();
        if let Ok(mut kept) = self.service_channels.lock() {
            open.append(&mut kept);
        }
        open.extend(self.publisher.detach().await);
        close_all(open, "bye", bound).await;
        let links = self
            .inbox_links
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        for link in links {
            let _ = tokio::time::timeout(bound, link.close(200, "bye".into())).await;
        }
        for key in self.pull.forget_held() {
            // Their deliveries died with the connection; the broker redelivers them, and that
            // copy must be accepted (it is the same message, never drained).
            self.seen.remove(&key);
        }
        if let Some(conn) = self.conn.write().await.take() {
            let _ = tokio::time::timeout(bound, conn.close(200, "bye".into())).await;
        }
        // After the main one is gone, so no lookup opens another side connection behind it.
        self.close_side(bound).await;
    }
}

/// Closes `channels` at once and waits for the broker's close-ok of each, at most `bound` in all.
/// A channel already closed (by the broker, or with its connection) answers at once with an
/// error, which is nothing to report.
async fn close_all(channels: Vec<Channel>, why: &str, bound: Duration) {
    if channels.is_empty() {
        return;
    }
    let closing = channels.iter().map(|ch| ch.close(200, why.into()));
    let closed = futures_util::future::join_all(closing);
    match tokio::time::timeout(bound, closed).await {
        Ok(results) => {
            let failed = results.iter().filter(|r| r.is_err()).count();
            if failed > 0 {
                tracing::debug!(failed, of = channels.len(), "channels already closed");
            }
        }
        Err(_) => tracing::warn!(
            channels = channels.len(),
            ?bound,
            "the broker did not confirm closing every channel in time; closing the connection anyway"
        ),
    }
}
