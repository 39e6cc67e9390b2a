//! Which spec area answers each moment of the hub's connection ([`crate::gateway::Areas`]), and
//! in which order: the one place that knows both the hub and every area.
//!
//! Exists so that the order of a connection's setup — the roster before the host's announcement
//! (MEM-5), the announcement before any entity, the migration before any inbox (MIG-2/3) — is
//! written where it can be read whole, and the hub stays below the areas it serves.

use std::sync::Arc;

use anyhow::Context as _;
use lapin::Connection;
use lapin::message::Delivery;

use crate::config::QueueType;
use crate::gateway::{Areas, Gateway, Step};
use crate::registry::Entity;
use crate::topology;

/// The spec areas of this crate, as [`Gateway::new`] takes them.
pub struct SpecAreas;

impl SpecAreas {
    /// The areas, ready for [`Gateway::new`].
    pub fn all() -> Arc<dyn Areas> {
        Arc::new(SpecAreas)
    }
}

impl Areas for SpecAreas {
    fn connected<'a>(&'a self, gw: &'a Arc<Gateway>, conn: &'a Arc<Connection>) -> Step<'a, anyhow::Result<()>> {
        Box::pin(async move {
            let host = &gw.cfg.host_id;
            // TOP-3 / PRS-2: the roster consumer first, so the view fills from here on.
            gw.start_roster(conn)
                .await
                .map_err(|e| topology::host_queue_refusal(e, &topology::roster_queue(host), host, "roster queue"))?;
            // MEM-5: the host (and its certificate) is known before any of its entities.
            gw.announce_host().await;
            if let Err(e) = gw.start_control(conn).await {
                let control = topology::control_queue(host);
                let quorum = gw.cfg.queue_args().queue_type == QueueType::Quorum;
                let refused = e.downcast_ref::<lapin::Error>().and_then(topology::amqp_code) == Some(406);
                if quorum && refused {
                    return Err(e.context(format!(
                        "declaring and consuming the control queue {control} (TOP-3) ({control} is probably a classic queue from before FLEET_QUEUE_TYPE=quorum: convert it with scripts/convert-inboxes {control})"
                    )));
                }
                return Err(topology::host_queue_refusal(e, &control, host, "control queue"));
            }
            gw.start_dead_letters(conn)
                .await
                .context("consuming bridge.dlq (CAP-4)")?;
            // MIG-2/3: legacy queues move before any inbox is consumed.
            gw.migrate_on_boot().await;
            Ok(())
        })
    }

    fn inboxes_attached(&self, gw: &Arc<Gateway>, conn: Arc<Connection>) {
        gw.spawn_heartbeats(conn);
    }

    fn delivered<'a>(&'a self, gw: &'a Arc<Gateway>, owner: &'a str, d: Delivery) -> Step<'a, ()> {
        Box::pin(gw.on_inbox_delivery(owner, d))
    }

    fn reattached<'a>(&'a self, gw: &'a Gateway, e: &'a Entity) -> Step<'a, ()> {
        Box::pin(async move {
            let _ = gw.announce_entity(e, "up").await;
        })
    }

    fn stopping<'a>(&'a self, gw: &'a Gateway) -> Step<'a, ()> {
        Box::pin(async move {
            // Held to the end: no heartbeat follows these `down`s (see `departures`).
            let t = tokio::time::Instant::now();
            let mut departed = gw.departures.lock().await;
            let locked_ms = t.elapsed().as_millis() as u64;
            departed.depart_all();
            gw.announce_all_down().await;
            let entities_ms = t.elapsed().as_millis() as u64;
            let body = gw.gateway_presence("down", None);
            let _ = gw.announce(crate::envelope::GATEWAY_FROM, &body).await;
            drop(departed);
            // Where a slow stop's time went: the heartbeat holding the lock, or the confirms.
            tracing::info!(
                locked_ms,
                entities_ms,
                gateway_ms = t.elapsed().as_millis() as u64,
                "stop: presence downs (lock taken, entities down, _gateway down; ms since the step began)"
            );
        })
    }
}
