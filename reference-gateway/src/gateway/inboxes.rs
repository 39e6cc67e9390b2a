//! The per-entity inbox consumers (TOP-2, CON-2, CLU-3, CLU-7): one channel each, spread over
//! extra connections once the main one is full, attached, refused with a reason the operator
//! can act on, retried, and detached.
//!
//! Apart from the connection's sequence ([`super::connection`]) because an inbox is attached and
//! detached on its own too (an entity registered or stopped while connected), and its refusals
//! are per entity.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::options::BasicQosOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Connection};
use tracing::{error, info, warn};

use super::{EntityHealth, Gateway};
use crate::config::{QueueArgs, QueueType};
use crate::registry::{Entity, Role};
use crate::topology;

impl Gateway {
    /// A channel for an entity's inbox consumer, and which connection carries it (0 = main).
    ///
    /// One channel per inbox (TOP-2: a refused exclusive consume closes only its own channel),
    /// but a connection carries at most the `channel_max` the broker negotiated (RabbitMQ: 2,047).
    /// Inbox channels fill the main connection up to [`MAIN_CHANNELS_KEPT`] below that limit (the
    /// rest is for the publisher, the roster, control and DLQ consumers and short-lived setup
    /// channels), then extra connections, each filled until the broker's limit, opened as needed
    /// (`fleet-gateway <host> inboxes #n`). A gateway with fewer entities than that never opens one.
    async fn inbox_channel(&self) -> anyhow::Result<(Channel, usize)> {
        use anyhow::Context as _;
        let main = self.current_connection().await?;
        let limit = match usize::from(main.configuration().channel_max()) {
            0 => usize::from(u16::MAX),
            n => n,
        };
        if self.local.inboxes_on(0) + MAIN_CHANNELS_KEPT < limit {
            match main.create_channel().await {
                Ok(ch) => return Ok((ch, 0)),
                // Ids the broker's closes took (`side.rs`): the inboxes go to extra connections.
                Err(e) if matches!(e.kind(), lapin::ErrorKind::ChannelsLimitReached) => {
                    warn!("the main connection has no channel id left; inbox channels go to an extra connection");
                }
                Err(e) => return Err(e).context("opening an inbox channel on the main connection"),
            }
        }
        let links: Vec<Arc<Connection>> = self.inbox_links.lock().map(|l| l.clone()).unwrap_or_default();
        for (i, link) in links.iter().enumerate() {
            match link.create_channel().await {
                Ok(ch) => return Ok((ch, i + 1)),
                Err(e) if matches!(e.kind(), lapin::ErrorKind::ChannelsLimitReached) => continue,
                Err(e) => return Err(e).with_context(|| format!("opening a channel on inbox connection #{}", i + 1)),
            }
        }
        let n = links.len() + 1;
        let link = self
            .open_connection(
                format!("fleet-gateway {} inboxes #{n}", self.cfg.host_id),
                self.node.load(Ordering::SeqCst),
            )
            .await
            .with_context(|| {
                format!("opening inbox connection #{n} (the main one carries {limit} channels at most)")
            })?;
        info!(connection = n, "main connection full of inbox channels; opened another");
        let ch = link.create_channel().await?;
        let index = match self.inbox_links.lock() {
            Ok(mut l) => {
                l.push(link);
                l.len()
            }
            Err(_) => n,
        };
        Ok((ch, index))
    }

    /// TOP-2: declares an entity's inbox and consumes it with an exclusive, prefetch-bounded,
    /// manual-ack consumer on its own channel (so a refusal closes only that channel); in quorum
    /// mode (CLU-3) after checking that no conversion is unfinished and nobody holds it.
    ///
    /// A refusal is logged at ERROR naming the gid and the queue, and the entity is reported not
    /// ready (`/readyz` 503) until a retry succeeds (`spawn_maintenance`). The same refusal
    /// repeated by the retries is logged at ERROR again only once a minute (DEBUG in between).
    pub async fn attach_entity(self: &Arc<Self>, e: &Entity) -> Attached {
        match self.try_attach_entity(e).await {
            Ok(()) => {
                self.set_health(&e.gid, EntityHealth::Ready);
                Attached::Ready
            }
            Err(err) => {
                let msg = format!("{err:#}");
                let lasting = err.downcast_ref::<InboxRefusal>().is_some_and(InboxRefusal::is_lasting);
                let pause = if lasting { LASTING_RETRY } else { Duration::ZERO };
                if self.local.refused(&e.gid, &msg, pause, REFUSAL_REMINDER) {
                    error!(gid = %e.gid, error = %msg, "cannot consume the inbox; entity not ready");
                } else {
                    tracing::debug!(gid = %e.gid, error = %msg, "inbox still refused; entity not ready");
                }
                Attached::Refused { why: msg, lasting }
            }
        }
    }

    async fn try_attach_entity(self: &Arc<Self>, e: &Entity) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let args = self.cfg.inbox_args(e.role == Role::Worker);
        let queue = topology::inbox_queue(&e.gid);
        if args.queue_type == QueueType::Quorum && self.conversion_unfinished(&queue).await? {
            return Err(InboxRefusal::Converting { queue }.into());
        }
        self.declare_and_look(e, &args, &queue).await?;
        let (ch, link) = self.inbox_channel().await?;
        ch.basic_qos(self.cfg.prefetch, BasicQosOptions::default())
            .await
            .context("basic.qos")?;
        let what = if args.queue_type == QueueType::Quorum {
            format!("consuming {queue} (CLU-3: single active consumer)")
        } else {
            format!("consuming {queue} exclusively (CON-2)")
        };
        let mut consumer = ch
            .basic_consume(
                queue.as_str().into(),
                e.gid.as_str().into(),
                topology::inbox_consumer(args.queue_type),
                FieldTable::default(),
            )
            .await
            .context(what)?;
        self.local.set_inbox(&e.gid, ch, link);
        let gw = Arc::clone(self);
        let gid = e.gid.clone();
        tokio::spawn(async move {
            while let Some(item) = consumer.next().await {
                match item {
                    // Boxed: the handling future is large, and an idle consumer task would
                    // otherwise hold its full size for the entity's whole life.
                    Ok(d) => gw.areas.delivered(&gw, &gid, d).await,
                    Err(err) => {
                        warn!(%gid, error = %err, "inbox consumer ended");
                        break;
                    }
                }
            }
        });
        Ok(())
    }

    /// TOP-2 and CON-2 before the consume, on a side channel (`side.rs`: the broker's refusal
    /// closes that channel and costs the main connection no channel id, however often it is
    /// retried): declares the inbox and its bindings (TOP-5 / CLU-7: a 406 is a refusal naming
    /// the queue), then looks by passive declare whether another gateway consumes it (CLU-3:
    /// a consumer that slips in between is a standby the broker delivers nothing to while this
    /// one lives; on a classic inbox, the exclusive consume is refused with 403 then).
    async fn declare_and_look(&self, e: &Entity, args: &QueueArgs, queue: &str) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let ch = self.channel().await?;
        if let Err(err) = topology::declare_inbox(&ch, args, &e.gid, &e.groups).await {
            if topology::amqp_code(&err) == Some(406) {
                // The 406 closed the side channel; the gateway stays up and serves the others.
                return Err(InboxRefusal::Mismatch {
                    queue: queue.to_string(),
                    queue_type: args.queue_type,
                    broker: err.to_string(),
                }
                .into());
            }
            return Err(anyhow::Error::new(err).context(format!("declaring {queue}")));
        }
        let found = topology::peek(&ch, queue)
            .await
            .with_context(|| format!("passive declare of {queue} (CON-2)"))?;
        let _ = ch.close(200, "inbox declared".into()).await;
        match found {
            Some((_, consumers)) if consumers > 0 => Err(InboxRefusal::Held {
                queue: queue.to_string(),
                consumers,
            }
            .into()),
            Some(_) => Ok(()),
            None => anyhow::bail!("{queue} vanished right after its declaration"),
        }
    }

    /// CLU-7: whether `<queue>.converting` exists, i.e. a conversion of `queue` started and has
    /// not finished (or was interrupted): its messages are not all back in the inbox, so the
    /// inbox is not consumed yet. The look is a passive declare, answered by a 404 (logged by
    /// lapin at ERROR, dropped as probe noise) almost always.
    async fn conversion_unfinished(&self, queue: &str) -> anyhow::Result<bool> {
        use anyhow::Context as _;
        let temp = topology::converting_queue(queue);
        let _quiet = topology::ProbeRunning::start();
        let ch = self.channel().await?;
        let found = topology::peek(&ch, &temp)
            .await
            .with_context(|| format!("passive declare of {temp} (CLU-7)"))?;
        if found.is_some() {
            let _ = ch.close(200, "probe done".into()).await;
        }
        Ok(found.is_some())
    }

    /// Consumes `queue` on `ch` (manual ack, at most `prefetch` unacked) and hands every delivery
    /// to `handle`, one at a time, for the life of the channel: the shape of the roster, control
    /// and DLQ consumers.
    pub async fn consume_each<F, Fut>(
        self: &Arc<Self>,
        ch: Channel,
        queue: &str,
        tag: &str,
        prefetch: u16,
        handle: F,
    ) -> lapin::Result<()>
    where
        F: Fn(Arc<Gateway>, lapin::message::Delivery) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send,
    {
        // Bounded like the inboxes: without a prefetch the broker pushed a backlog it could not
        // yet handle (a 10,000-entity heartbeat round comes back to its own roster queue) into
        // this process's memory; with one, the backlog waits in the queue.
        ch.basic_qos(prefetch, BasicQosOptions::default()).await?;
        let mut consumer = ch
            .basic_consume(queue.into(), tag.into(), Default::default(), FieldTable::default())
            .await?;
        if let Ok(mut kept) = self.service_channels.lock() {
            kept.push(ch.clone());
        }
        let gw = Arc::clone(self);
        let tag = tag.to_string();
        tokio::spawn(async move {
            let _keep = ch;
            while let Some(Ok(d)) = consumer.next().await {
                let started = std::time::Instant::now();
                handle(Arc::clone(&gw), d).await;
                crate::slow::delivery_handled(&tag, started.elapsed());
            }
        });
        Ok(())
    }

    /// Stops consuming an entity's inbox (its channel closes; unacked deliveries return).
    pub async fn detach_entity(&self, gid: &str) {
        if let Some(ch) = self.local.detach(gid) {
            let _ = ch.close(200, "entity stopped".into()).await;
        }
    }
}

/// Channels the main connection keeps free of inbox consumers, below the broker's `channel_max`.
pub const MAIN_CHANNELS_KEPT: usize = 64;

/// How often an inbox refused for a lasting reason (CLU-7: other arguments, a conversion under
/// way) is tried again; a held inbox (CON-2) is tried every maintenance tick, for CON-1's
/// takeover.
const LASTING_RETRY: Duration = Duration::from_secs(5);

/// The same refusal of an entity is logged at ERROR again after this long (DEBUG in between).
const REFUSAL_REMINDER: Duration = Duration::from_secs(60);

/// What [`Gateway::attach_entity`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attached {
    /// The inbox is consumed.
    Ready,
    /// Refused (the entity is not ready; retried in the background). `lasting`: until an operator
    /// acts ([`InboxRefusal::is_lasting`]).
    Refused { why: String, lasting: bool },
}

/// Why an inbox is not consumed, in the words the ERROR line and `/readyz` carry: each names the
/// queue (CONTRACT §5) and, where the operator can act, what to do.
#[derive(Debug, thiserror::Error)]
pub enum InboxRefusal {
    /// CON-2 (CLU-3): the passive declare found a consumer: another gateway holds the inbox.
    #[error("{queue} already has {consumers} consumer(s): another gateway holds this inbox (CON-2); not consuming it")]
    Held { queue: String, consumers: u32 },
    /// TOP-5 / CLU-7: the broker holds the inbox with other arguments (406).
    #[error("{}", mismatch_text(queue, *queue_type, broker))]
    Mismatch {
        queue: String,
        queue_type: QueueType,
        broker: String,
    },
    /// CLU-7: `<queue>.converting` exists.
    #[error(
        "{queue} is being converted to a quorum queue ({queue}.converting exists): the entity is not served until `scripts/convert-inboxes {queue}` has finished (run it again if it was interrupted)"
    )]
    Converting { queue: String },
}

impl InboxRefusal {
    /// Whether the refusal lasts until an operator acts (retried less often).
    pub fn is_lasting(&self) -> bool {
        !matches!(self, InboxRefusal::Held { .. })
    }
}

fn mismatch_text(queue: &str, queue_type: QueueType, broker: &str) -> String {
    match queue_type {
        QueueType::Quorum => format!(
            "{queue} exists with other arguments than FLEET_QUEUE_TYPE=quorum declares (a classic inbox from before the switch?): the entity is not served until the inbox is converted: run `scripts/convert-inboxes {queue}` (CLU-7; broker: {broker})"
        ),
        QueueType::Classic => format!(
            "{queue} exists with other arguments than this gateway declares (TOP-5: a quorum inbox while FLEET_QUEUE_TYPE=classic, or other FLEET_INBOX_* settings): the entity is not served (broker: {broker})"
        ),
    }
}
