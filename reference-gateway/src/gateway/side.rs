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
//! It is opened with the main connection, to the same node, and lives and dies with it; a side
//! connection lost alone is opened again by the next channel asked for (nothing is consumed on it,
//! so its loss loses nothing).

use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::Context as _;
use lapin::{Channel, Connection};
use tracing::{debug, info};

use super::Gateway;

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
            _link: Arc::clone(self),
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
    _link: Arc<SideLink>,
}

impl Deref for SideChannel {
    type Target = Channel;

    fn deref(&self) -> &Channel {
        &self.ch
    }
}

impl Gateway {
    /// A fresh short-lived channel for a lookup, a declaration or a delete: on the side
    /// connection, never on the main one (see the module's doc). An error while not connected.
    pub async fn channel(&self) -> anyhow::Result<SideChannel> {
        self.side_link().await?.channel().await
    }

    /// The side connection to hand out the next channel: the current one while it is usable,
    /// else a new one to the main connection's node (the old one closes with its last channel).
    pub(super) async fn side_link(&self) -> anyhow::Result<Arc<SideLink>> {
        let mut side = self.side.lock().await;
        if let Some(link) = side.as_ref()
            && link.usable()
        {
            return Ok(Arc::clone(link));
        }
        if self.conn.read().await.is_none() {
            anyhow::bail!("not connected to the broker");
        }
        let number = self.side_count.fetch_add(1, Ordering::SeqCst) + 1;
        let conn = self
            .open_connection(
                format!("fleet-gateway {} side", self.cfg.host_id),
                self.node.load(Ordering::SeqCst),
            )
            .await
            .with_context(|| format!("opening side connection #{number}"))?;
        let link = Arc::new(SideLink::new(conn, number));
        if let Some(old) = side.replace(Arc::clone(&link)) {
            info!(
                number,
                replaced = old.number(),
                "side connection opened (the previous one had used its channel ids or was lost)"
            );
        }
        Ok(link)
    }

    /// Closes the side connection with the main one (a stop, a loss, a failed setup).
    pub(super) async fn close_side(&self, bound: std::time::Duration) {
        let link = self.side.lock().await.take();
        if let Some(link) = link {
            let _ = tokio::time::timeout(bound, link.close()).await;
        }
    }
}
