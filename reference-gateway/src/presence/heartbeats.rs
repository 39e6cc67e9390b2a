//! Heartbeats and batches (SPEC §8, PRS-1, PRS-4, PRB-1, PRB-3, PRB-4): what this gateway sends
//! about itself and its entities — per-entity heartbeats, the `_gateway` heartbeat with its host
//! batch, status changes and `down`s — applied to the local view as they go out.
//!
//! Kept apart from [`super::roster`] (what this gateway knows of others).

use std::sync::Arc;

use tracing::debug;

use super::{BatchEntry, PRESENCE_BATCH, PresenceBody, roster_key, unknown};
use crate::envelope::{Envelope, GATEWAY_FROM, Kind};
use crate::gateway::Gateway;
use crate::publish::{Outgoing, PublishError};
use crate::registry::Entity;
use crate::topology::ROSTER_EXCHANGE;

/// Heartbeats handed to the publishing channel before their confirms are awaited.
const HEARTBEAT_CHUNK: usize = 256;

/// herdr status reads a heartbeat's refresh has in flight at once.
pub const STATUS_READS_IN_FLIGHT: usize = 16;

impl Gateway {
    fn ttl_ms(&self) -> u64 {
        3 * self.cfg.heartbeat.as_millis() as u64
    }

    fn entity_presence(&self, e: &Entity, state: &str) -> PresenceBody {
        let agent_status = self.local.agent_status(&e.gid).unwrap_or_else(unknown);
        PresenceBody {
            state: state.into(),
            role: e.role.as_str().into(),
            groups: e.groups.clone(),
            agent_status,
            ttl_ms: self.ttl_ms(),
            profiles: None,
            parent: e.parent.clone(),
            capabilities: None,
            entities: None,
            cert: None,
        }
    }

    /// The `_gateway` body (PRS-1, PRS-4). With batching on (PRB-1) it declares
    /// `presence-batch` and lists `entities`, every live local entity: the caller builds that list
    /// under [`crate::departures::Departures`], so a stopped entity is never listed after its
    /// `down`.
    pub(crate) fn gateway_presence(&self, state: &str, entities: Option<Vec<BatchEntry>>) -> PresenceBody {
        let batch = self.cfg.presence_batch;
        let mut capabilities = vec![crate::membership::CAPABILITY.to_string()];
        capabilities.extend(batch.then(|| PRESENCE_BATCH.to_string()));
        PresenceBody {
            state: state.into(),
            role: "gateway".into(),
            groups: vec![],
            agent_status: unknown(),
            ttl_ms: self.ttl_ms(),
            profiles: Some(self.cfg.profiles.keys().cloned().collect()),
            parent: None,
            capabilities: Some(capabilities),
            entities: if batch { entities } else { None },
            cert: self.membership.own.cert_text(),
        }
    }

    /// PRB-1: publishes the `_gateway` heartbeat — with batching on, the batch of every live
    /// local entity. The list is read and the heartbeat handed to the channel under the
    /// departures lock: a `down` (also announced under it) is then either after the batch on the
    /// wire or already reflected in it, and a registration's first `up` (announced under it too)
    /// is never followed by a batch read before the entity existed, which would make every
    /// receiver drop the new entity again (PRB-2).
    pub(super) async fn gateway_heartbeat(&self) -> Result<Envelope, PublishError> {
        let departed = self.departures.lock().await;
        if !departed.may_heartbeat(None) {
            return Err(PublishError::NotConnected);
        }
        let listed = self.cfg.presence_batch.then(|| {
            self.entities()
                .iter()
                .filter(|e| departed.may_heartbeat(Some(&e.gid)) && self.registry.contains(&e.gid))
                .map(|e| {
                    let b = self.entity_presence(e, "up");
                    BatchEntry {
                        gid: e.gid.clone(),
                        state: b.state,
                        role: b.role,
                        groups: b.groups,
                        agent_status: b.agent_status,
                        parent: b.parent,
                    }
                })
                .collect()
        });
        let body = self.gateway_presence("up", listed);
        let published = self.announce(GATEWAY_FROM, &body).await;
        drop(departed);
        published
    }

    /// PRB-4: whether this round also heartbeats each entity on its own: always without
    /// batching (SPEC §8), and with it while an old gateway (no `presence-batch`) is live in the
    /// roster.
    fn per_entity_heartbeats(&self) -> bool {
        !self.cfg.presence_batch || self.roster.old_gateway_live(&self.cfg.host_id)
    }

    /// The PRESENCE about `gid` to publish, applied to the local view at once.
    pub(crate) fn presence_outgoing(&self, gid: &str, body: &PresenceBody) -> Outgoing {
        let host = &self.cfg.host_id;
        let bytes = serde_json::to_vec(body).unwrap_or_else(|_| b"{}".to_vec());
        let mut out = Outgoing::new(Kind::Presence, ROSTER_EXCHANGE, roster_key(host, gid), gid, bytes);
        out.expires_at = Some(crate::envelope::now_ms() + body.ttl_ms);
        match &body.entities {
            // Our own batch renews our own entities in our view too (PRB-2 applies to us).
            Some(listed) if gid == GATEWAY_FROM => {
                self.roster.apply_batch(host, body, listed);
            }
            _ => {
                self.roster.apply(host, gid, body);
            }
        }
        out
    }

    /// Publishes one PRESENCE (PRS-1), signed, and applies it to the local view at once.
    pub async fn announce(&self, gid: &str, body: &PresenceBody) -> Result<Envelope, PublishError> {
        let mut out = self.presence_outgoing(gid, body);
        if gid != GATEWAY_FROM {
            return self.publisher.publish(out).await;
        }
        // An own heartbeat doubles as the roster consumer's progress marker ([C-10]).
        let msg_id = crate::envelope::new_uuid();
        out.msg_id = Some(msg_id.clone());
        self.roster_sync.sent(&msg_id, tokio::time::Instant::now());
        let published = self.publisher.publish(out).await;
        if published.is_err() {
            self.roster_sync.unsent(&msg_id);
        }
        published
    }

    pub async fn announce_entity(&self, e: &Entity, state: &str) -> Result<Envelope, PublishError> {
        let body = self.entity_presence(e, state);
        self.announce(&e.gid, &body).await
    }

    /// A graceful stop's `down` for every local entity (CONTRACT §1, 3). While every live
    /// gateway batches (PRB-4: no per-entity heartbeats), one last `_gateway` batch that lists
    /// none of them does it in one message: PRB-2 makes each entity missing from the host's
    /// latest batch `down` at every receiver. 10,000 signed `down`s took over 4 s of a 10 s
    /// stop on a loaded 2-core machine; the batch takes one publish. Otherwise one `down` each.
    pub async fn announce_all_down(&self) {
        if self.per_entity_heartbeats() {
            self.announce_entities_down().await;
            return;
        }
        let body = self.gateway_presence("up", Some(Vec::new()));
        if let Err(err) = self.announce(GATEWAY_FROM, &body).await {
            debug!(error = %err, "the last, empty batch not published; one down per entity instead");
            self.announce_entities_down().await;
        }
    }

    /// The graceful stop's `down` for every local entity, pipelined in chunks as a heartbeat
    /// round is: one broker round trip per chunk of `HEARTBEAT_CHUNK` instead of one per entity,
    /// whose sum grows into the stop's 10 s bound with thousands of entities. (With 10,000 the
    /// stop still takes its whole bound, measured in issue 46: the rest is elsewhere in the stop.)
    pub async fn announce_entities_down(&self) {
        let entities = self.entities();
        for chunk in entities.chunks(HEARTBEAT_CHUNK) {
            let outs = chunk
                .iter()
                .map(|e| self.presence_outgoing(&e.gid, &self.entity_presence(e, "down")))
                .collect();
            for (e, published) in chunk.iter().zip(self.publisher.publish_batch(outs).await) {
                if let Err(err) = published {
                    debug!(gid = %e.gid, error = %err, "down not published");
                }
            }
        }
    }

    /// PRS-1: heartbeats every entity and the gateway itself every interval H, for the life of `conn`.
    pub fn spawn_heartbeats(self: &Arc<Self>, conn: Arc<lapin::Connection>) {
        let gw = Arc::clone(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(gw.cfg.heartbeat);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            while conn.status().connected() {
                tick.tick().await;
                if let Err(e) = gw.gateway_heartbeat().await {
                    debug!(error = %e, "gateway heartbeat not published");
                }
                gw.heartbeat_entities(gw.per_entity_heartbeats()).await;
                gw.refresh_agent_statuses();
            }
        });
    }

    /// One heartbeat round of the local entities, pipelined: each chunk is handed to the channel
    /// whole, then its confirms are awaited together — one broker round trip per chunk instead of
    /// one per entity (1,000 entities took 875 ms a round one by one; a round must stay well
    /// inside H).
    ///
    /// Each chunk is filtered and published under [`crate::departures::Departures`]: an entity
    /// stopped since the round read the list is left out, so no `up` follows its `down`.
    ///
    /// With `all` false (batching, no old gateway live: PRB-4) only entities whose `up` is not
    /// yet confirmed on this connection go out — after a (re)connect [C-19] holds each entity's
    /// messages until its own `up` is confirmed, and PRB-3 keeps that per-entity `up`.
    async fn heartbeat_entities(&self, all: bool) {
        let entities = self.entities();
        for chunk in entities.chunks(HEARTBEAT_CHUNK) {
            let departed = self.departures.lock().await;
            let live: Vec<&Entity> = chunk
                .iter()
                .filter(|e| departed.may_heartbeat(Some(&e.gid)) && self.registry.contains(&e.gid))
                .filter(|e| all || !self.publisher.is_announced(&e.gid))
                .collect();
            if live.is_empty() {
                continue;
            }
            let outs = live
                .iter()
                .map(|e| self.presence_outgoing(&e.gid, &self.entity_presence(e, "up")))
                .collect();
            let published = self.publisher.publish_batch(outs).await;
            drop(departed);
            for (e, published) in live.iter().zip(published) {
                if let Err(err) = published {
                    debug!(gid = %e.gid, error = %err, "heartbeat not published");
                }
            }
        }
    }

    /// Refreshes the cached agent status of each entity for the next heartbeat, in the
    /// background, so a slow herdr can never delay a heartbeat.
    ///
    /// One refresh at a time, [`STATUS_READS_IN_FLIGHT`] herdr calls at once: herdr has no call that
    /// lists panes, so a round is one `pane.get` per entity, and thousands of entities read all at
    /// once would open thousands of herdr connections together (and hold their buffers). A round
    /// that is still running when the next heartbeat comes is left to finish; the next starts then.
    fn refresh_agent_statuses(self: &Arc<Self>) {
        use std::sync::atomic::Ordering;
        if self.refreshing_statuses.swap(true, Ordering::SeqCst) {
            return;
        }
        let gw = Arc::clone(self);
        tokio::spawn(async move {
            use futures_util::StreamExt as _;
            let reads = futures_util::stream::iter(gw.entities()).map(|e| {
                let gw = Arc::clone(&gw);
                async move {
                    let s = match gw.herdr.status(&e.pane).await {
                        Ok(s) => format!("{s:?}").to_ascii_lowercase(),
                        Err(_) => unknown(),
                    };
                    let before = gw.local.agent_status(&e.gid).unwrap_or_else(unknown);
                    let changed = before != s;
                    gw.local.set_agent_status(&e.gid, s);
                    if changed && gw.cfg.presence_batch {
                        gw.announce_status_change(&e).await;
                    }
                }
            });
            reads
                .buffer_unordered(STATUS_READS_IN_FLIGHT)
                .for_each(|()| async {})
                .await;
            gw.refreshing_statuses.store(false, Ordering::SeqCst);
        });
    }

    /// PRB-3: a changed `agentStatus` goes out at once as a per-entity PRESENCE, not with the
    /// next batch. Under the departures lock, like every heartbeat: never after the entity's
    /// `down`.
    async fn announce_status_change(&self, e: &Entity) {
        let departed = self.departures.lock().await;
        if departed.may_heartbeat(Some(&e.gid))
            && self.registry.contains(&e.gid)
            && let Err(err) = self.announce_entity(e, "up").await
        {
            debug!(gid = %e.gid, error = %err, "agentStatus change not published");
        }
        drop(departed);
    }
}
