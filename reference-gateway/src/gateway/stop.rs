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
use tracing::{debug, info, warn};

use super::Gateway;

/// How long closing the channels may take in all before the connection is closed anyway (a
/// broker that stopped answering must not hold up a stop or a reconnect).
const CHANNELS_CLOSE_BOUND: Duration = Duration::from_secs(3);

/// The same bound when the connection is left because its node stalled (`stall.rs`): the node's
/// channel processes wait on the nodes it cannot reach, so its close-oks come late or never, and
/// every moment spent waiting for them delays the move to another node. Also after a stop whose
/// inbox closes ran past their bound (thousands of entities): the broker answers closes in order,
/// so the last few channels' close-oks wait behind the backlog, and the stop's 10 s with them.
const STALLED_CLOSE_BOUND: Duration = Duration::from_millis(500);

impl Gateway {
    /// Graceful stop on SIGTERM, bounded: stop consuming inboxes (held messages go back to the
    /// broker), fail pending injects as `stopped` and wait until their FAILED is published,
    /// then announce `down` for every entity and the gateway. The caller then ends the run loop,
    /// which closes the channels and the connection ([`Gateway::teardown_connection`]).
    pub async fn graceful_stop(&self, bound: Duration) {
        let t0 = tokio::time::Instant::now();
        let work = async {
            self.stopping.send_replace(true);
            let inboxes = self.local.take_inboxes();
            let n = inboxes.len();
            let t = tokio::time::Instant::now();
            let confirmed = close_all(inboxes, "gateway stopping", CHANNELS_CLOSE_BOUND).await;
            self.closes_behind.store(!confirmed, Ordering::SeqCst);
            info!(channels = n, took_ms = ms(t), confirmed, "stop: inbox consumers closed");
            let t = tokio::time::Instant::now();
            while self.inflight_injects.load(Ordering::SeqCst) > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            info!(took_ms = ms(t), "stop: injects in flight ended");
            // The areas log the presence downs' own times.
            self.areas.stopping(self).await;
        };
        if tokio::time::timeout(bound, work).await.is_err() {
            warn!(
                ?bound,
                "stop: the graceful part did not end within its bound; closing the connection anyway"
            );
        }
        info!(took_ms = ms(t0), "stop: graceful part done");
    }

    /// Ends the current connection (after a stop, a loss or a failed setup): every channel first
    /// (on a lost connection each close fails at once), then the extra inbox connections, then
    /// the main one; each step bounded.
    pub(super) async fn teardown_connection(&self) {
        let stalled = self.stalled.swap(false, Ordering::SeqCst);
        let behind = self.closes_behind.swap(false, Ordering::SeqCst);
        let bound = if stalled || behind {
            STALLED_CLOSE_BOUND
        } else {
            CHANNELS_CLOSE_BOUND
        };
        let t0 = tokio::time::Instant::now();
        let mut open = self.local.take_inboxes();
        if let Ok(mut kept) = self.service_channels.lock() {
            open.append(&mut kept);
        }
        open.extend(self.publisher.detach().await);
        let n = open.len();
        close_all(open, "bye", bound).await;
        debug!(channels = n, took_ms = ms(t0), "teardown: channels closed");
        let links = self
            .inbox_links
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let t = tokio::time::Instant::now();
        let n = links.len();
        // The extra inbox connections close together: each close is a broker round trip.
        let closing = links.iter().map(|link| link.close(200, "bye".into()));
        let _ = tokio::time::timeout(bound, futures_util::future::join_all(closing)).await;
        debug!(connections = n, took_ms = ms(t), "teardown: inbox connections closed");
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
        debug!(took_ms = ms(t0), "teardown: connection closed");
    }
}

/// Milliseconds since `t`, for the stop's timed log lines.
fn ms(t: tokio::time::Instant) -> u64 {
    t.elapsed().as_millis() as u64
}

/// Closes `channels` at once and waits for the broker's close-ok of each, at most `bound` in all;
/// false when the bound ran out first. A channel already closed (by the broker, or with its
/// connection) answers at once with an error, which is nothing to report.
async fn close_all(channels: Vec<Channel>, why: &str, bound: Duration) -> bool {
    if channels.is_empty() {
        return true;
    }
    let closing = channels.iter().map(|ch| ch.close(200, why.into()));
    let closed = futures_util::future::join_all(closing);
    match tokio::time::timeout(bound, closed).await {
        Ok(results) => {
            let failed = results.iter().filter(|r| r.is_err()).count();
            if failed > 0 {
                debug!(failed, of = channels.len(), "channels already closed");
            }
            true
        }
        Err(_) => {
            warn!(
                channels = channels.len(),
                ?bound,
                "the broker did not confirm closing every channel in time; closing the connection anyway"
            );
            false
        }
    }
}
