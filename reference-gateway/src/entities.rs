//! Entity life cycle: register an existing pane, stop an entity (local API, STOP, spawn).
//!
//! Registration follows the order SPEC asks for: the inbox is declared and consumed (TOP-2)
//! before the entity is announced, and its first presence is confirmed by the broker before the
//! caller gets the token ([C-7]), so the entity's first message is never lost to a presence race.
//! Stopping undoes it: consumer, inbox (TOP-6), `down`, pane (SPN-5).

use std::sync::Arc;

use serde::Deserialize;
use tracing::{info, warn};

use crate::envelope::{is_uuid, new_uuid};
use crate::gateway::{Attached, Gateway};
use crate::registry::{Entity, Role};
use crate::topology;

/// `POST /v1/entities` body.
#[derive(Debug, Deserialize)]
pub struct RegisterRequest {
    pub role: Role,
    #[serde(default)]
    pub gid: Option<String>,
    pub pane: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub parent: Option<String>,
    /// Extension (MIG-2): the worker's v1.0.0 pane id, whose legacy queue migrates to its parent.
    #[serde(default, rename = "legacyPaneId")]
    pub legacy_pane_id: Option<String>,
}

/// Why a registration or stop failed; `status()` maps it to HTTP.
#[derive(Debug, thiserror::Error)]
pub enum EntityError {
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("entity {0} is already registered")]
    Exists(String),
    #[error("no such entity {0}")]
    NotFound(String),
    #[error("broker: {0}")]
    Broker(String),
    #[error("registry: {0}")]
    Registry(String),
}

fn valid_group(g: &str) -> bool {
    let b = g.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// A fresh bearer token: 32 random bytes, hex.
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    if getrandom::fill(&mut b).is_err() {
        // Fall back to two v4 UUIDs (still 244 random bits) rather than fail registration.
        return format!("{}{}", uuid::Uuid::new_v4().simple(), uuid::Uuid::new_v4().simple());
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

impl Gateway {
    /// Registers an entity and returns it once its inbox is consumed and its presence confirmed.
    /// An inbox refused for a lasting reason (CLU-7: another queue type, a conversion under way)
    /// leaves the entity registered but not ready (`/readyz` 503 names why); the caller sees it
    /// in the entity's health (`POST /v1/entities` answers 202 with `ready: false`).
    pub async fn register(
        self: &Arc<Self>,
        req: RegisterRequest,
        spawn_id: Option<String>,
    ) -> Result<Entity, EntityError> {
        self.register_with(req, spawn_id, None).await
    }

    /// `register` with a token chosen by the caller (a spawned pane gets it in its environment
    /// before the gateway registers it).
    pub async fn register_with(
        self: &Arc<Self>,
        req: RegisterRequest,
        spawn_id: Option<String>,
        token: Option<String>,
    ) -> Result<Entity, EntityError> {
        let gid = req.gid.unwrap_or_else(new_uuid);
        if !is_uuid(&gid) {
            return Err(EntityError::Invalid(format!(
                "gid {gid:?} is not a lowercase hyphenated UUID"
            )));
        }
        if req.pane.trim().is_empty() {
            return Err(EntityError::Invalid("pane is empty".into()));
        }
        if let Some(g) = req.groups.iter().find(|g| !valid_group(g)) {
            return Err(EntityError::Invalid(format!(
                "group {g:?} does not match [a-z0-9][a-z0-9_-]{{0,62}}"
            )));
        }
        if let Some(p) = &req.parent
            && !is_uuid(p)
        {
            return Err(EntityError::Invalid(format!("parent {p:?} is not a gid")));
        }
        if self.entity(&gid).is_some() {
            return Err(EntityError::Exists(gid));
        }
        self.check_legacy_claim(req.role, req.parent.as_deref(), req.legacy_pane_id.as_deref())?;
        let entity = Entity {
            gid: gid.clone(),
            role: req.role,
            pane: req.pane,
            groups: req.groups,
            parent: req.parent,
            token: token.unwrap_or_else(new_token),
            spawn_id,
            legacy_pane_id: req.legacy_pane_id,
        };
        self.registry
            .insert(entity.clone())
            .map_err(|e| EntityError::Registry(e.to_string()))?;
        if entity.role == crate::registry::Role::Worker {
            // [C-23]: before its inbox is consumed, so its first brief is judged by it.
            self.bind_at_registration(&entity).await;
        }
        let failure = match self.attach_entity(&entity).await {
            Attached::Refused { why, lasting: true } => {
                // CLU-7 / TOP-5: the inbox exists in another form (a classic inbox met in quorum
                // mode) or is being converted. That lasts until an operator acts, so the entity
                // stays registered, not ready (`/readyz` 503 names the queue) and unannounced; the
                // background retry serves and announces it once the inbox is right.
                warn!(gid = %entity.gid, role = entity.role.as_str(), reason = %why, "entity registered but not served until its inbox is fixed");
                return Ok(entity);
            }
            Attached::Refused { why, lasting: false } => Some(why),
            Attached::Ready => {
                // Under the departures lock, like the `_gateway` batch (PRB-1): a batch whose
                // list was read before this entity existed is then on the wire before this `up`,
                // never after it (it would drop the new entity from every roster for an interval).
                let departed = self.departures.lock().await;
                let first = self.announce_entity(&entity, "up").await;
                drop(departed);
                match first {
                    Ok(_) => None,
                    Err(e) => Some(format!("first presence not confirmed: {e}")),
                }
            }
        };
        if let Some(why) = failure {
            // Roll back: an entity that cannot be served is not registered.
            self.detach_entity(&entity.gid).await;
            self.local.forget(&entity.gid);
            let _ = self.registry.remove(&entity.gid);
            return Err(EntityError::Broker(why));
        }
        info!(gid = %entity.gid, role = entity.role.as_str(), pane = %entity.pane, "entity registered");
        self.migrate_at_registration(&entity).await;
        Ok(entity)
    }

    /// Stops an entity: consumer, inbox (TOP-6), presence `down`, pane for a worker (SPN-5).
    pub async fn stop_entity(self: &Arc<Self>, gid: &str) -> Result<Entity, EntityError> {
        let entity = self.entity(gid).ok_or_else(|| EntityError::NotFound(gid.to_string()))?;
        self.detach_entity(gid).await;
        self.conversations.end_turns_of(gid);
        match self.channel().await {
            Ok(ch) => {
                if let Err(e) = topology::delete_inbox(&ch, gid).await {
                    warn!(%gid, error = %e, "inbox not deleted; x-expires will collect it");
                }
            }
            Err(e) => warn!(%gid, error = %e, "inbox not deleted; x-expires will collect it"),
        }
        {
            // No heartbeat carries the gid once its `down` is announced (see `departures`).
            let mut departed = self.departures.lock().await;
            departed.depart(gid);
            if let Err(e) = self.announce_entity(&entity, "down").await {
                warn!(%gid, error = %e, "presence down not published; the entry expires with its ttl");
            }
        }
        if entity.role == Role::Worker
            && let Err(e) = self.herdr.close(&entity.pane).await
        {
            warn!(%gid, pane = %entity.pane, error = %e, "pane not closed");
        }
        self.pull.remove(gid);
        self.local.forget(gid);
        self.registry
            .remove(gid)
            .map_err(|e| EntityError::Registry(e.to_string()))?;
        // Out of the registry, so no heartbeat round takes it any more.
        self.departures.lock().await.forget(gid);
        info!(%gid, "entity stopped");
        Ok(entity)
    }
}
