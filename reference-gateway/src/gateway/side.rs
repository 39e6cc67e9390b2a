//! The side connection: the short-lived channels (the CLU-7 probe, an inbox's declaration and
//! CON-2 look before its consumer starts, TOP-6's delete, the migration's lookups) on a broker
//! connection of their own, replaced before it runs out of channel ids.
//!
//! Exists because lapin (4.12.3) never frees the id of a channel the *broker* closed — a 404 on a
//! passive declare, a 406 on a redeclare, a 403 on an exclusive consume — while it frees the id of
//! a channel the client closed (measured against a plain RabbitMQ: after 2,046 broker-closed
//! channels, the 2,047th `create_channel` fails). Most looks a gateway takes are answered that
//! way on purpose (a passive declare is AMQP's only "does this queue exist"), and a refused inbox
//! is looked at again every few seconds. On the main connection each of those cost an id for
//! good: about a thousand quorum entities (one CLU-7 probe each), or one refusal retried for an
//! hour, left the gateway unable to open the channel an inbox consumer or a reconnect needs.
//!
//! So those channels live here. The side connection counts the channels it opened; once that
//! count nears the broker's `channel_max`, the next channel comes from a new side connection,
//! and the old one is closed when its last channel is dropped ([`SideChannel`] holds it). The
//! main connection keeps its ids for what lives long: the publisher, the consumers.
//!
//! It is opened with the main connection, to the same node, and lives and dies with it
//! (`connection.rs`: `Gateway::side_link`, `Gateway::channel`); a side connection lost alone is
//! opened again at the next maintenance tick or channel asked for (nothing is consumed on it, so
//! its loss loses nothing).

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use lapin::{Channel, Connection};
use tracing::{debug, info};

/// Ids kept free below the broker's `channel_max`: the channels still open on a side connection
/// when it is replaced (several lookups run at once) need none of the ids it has left.
const SPARE_IDS: usize = 64;

/// One side connection and how many channels it has handed out.
pub(super) struct SideLink {
    conn: Arc<Connection>,
    opened: AtomicUsize,
    /// Channels it hands out before it is replaced.
    budget: usize,
    /// Its number in this gateway's life (for the logs and the connection's name).
    number: usize,
}

impl SideLink {
    pub(super) fn new(conn: Arc<Connection>, number: usize) -> SideLink {
        let max = match usize::from(conn.configuration().channel_max()) {
            0 => usize::from(u16::MAX),
            n => n,
        };
        SideLink {
            conn,
            opened: AtomicUsize::new(0),
            budget: max.saturating_sub(SPARE_IDS).max(1),
            number,
        }
    }

    /// Whether it may hand out another channel: connected, and ids left.
    pub(super) fn usable(&self) -> bool {
        self.conn.status().connected() && self.opened.load(Ordering::SeqCst) < self.budget
    }

    /// A new channel on it, counted whether or not the broker will close it.
    pub(super) async fn channel(self: &Arc<Self>) -> anyhow::Result<SideChannel> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        let ch = self
            .conn
            .create_channel()
            .await
            .with_context(|| format!("opening a channel on side connection #{}", self.number))?;
        Ok(SideChannel {
            ch,
            _link: Some(Arc::clone(self)),
        })
    }

    /// Closes it now (a stop or a reconnect), bounded by the caller.
    pub(super) async fn close(&self) {
        if self.conn.status().connected()
            && let Err(e) = self.conn.close(200, "bye".into()).await
        {
            debug!(error = %e, number = self.number, "closing a side connection");
        }
    }

    pub(super) fn number(&self) -> usize {
        self.number
    }
}

impl Drop for SideLink {
    /// The last channel of a replaced side connection is gone: close it (in the background; a
    /// replaced connection has nothing left that could wait for it).
    fn drop(&mut self) {
        if !self.conn.status().connected() {
            return;
        }
        let conn = Arc::clone(&self.conn);
        let number = self.number;
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = conn.close(200, "replaced".into()).await;
                info!(number, "side connection replaced and closed");
            });
        }
    }
}

/// A short-lived channel on a side connection; it keeps that connection open while it lives.
/// Derefs to the lapin [`Channel`].
pub struct SideChannel {
    ch: Channel,
    /// `None`: the channel is on the main connection ([`SideChannel::on_main`]).
    _link: Option<Arc<SideLink>>,
}

impl SideChannel {
    /// A channel on the main connection, for when no side connection can be had: a broker that
    /// takes no new connection (RabbitMQ 3.10 holds every new one before its handshake once its
    /// file handle cache has no handle left to give: measured near 10,000 quorum queues with
    /// `ulimit -n` 20,000, `docs/CLUSTER-SIZING.md`), or one being opened right now by another
    /// lookup. Costs the main connection an id if the broker closes it, which is rare enough.
    pub(super) fn on_main(ch: Channel) -> SideChannel {
        SideChannel { ch, _link: None }
    }
}

impl Deref for SideChannel {
    type Target = Channel;

    fn deref(&self) -> &Channel {
        &self.ch
    }
}
