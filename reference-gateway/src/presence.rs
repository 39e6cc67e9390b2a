//! Presence (SPEC §8): heartbeat bodies and the union roster view.
//!
//! Every gateway heartbeats its entities and itself on `bridge.roster`; every gateway keeps the
//! union view from its `roster.<host>` queue. The view is soft state: an entry lives until its
//! `ttlMs` passes without a heartbeat or a `down` arrives, and a restart rebuilds it from
//! heartbeats. Verification (SIG-2 step 2) asks it whether a `from` lives on a `host`.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::envelope::GATEWAY_FROM;

/// The body of a PRESENCE message (§2.2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PresenceBody {
    pub state: String,
    pub role: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default = "unknown")]
    pub agent_status: String,
    pub ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<String>>,
    /// Extension: a worker's parent main, so peers can route replies and check ownership.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// PRB-1: the optional capabilities the sending gateway declares (`_gateway` entry only).
    /// A `_gateway` entry without `presence-batch` is an old gateway, for which PRB-4 keeps
    /// per-entity heartbeats going.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// PRB-1: every live local entity of the sending host (`_gateway` entry only). Absent means
    /// "not a batch" (an old gateway's heartbeat), which is not the same as an empty list (a
    /// batching host with no entities left: all of them are `down`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entities: Option<Vec<BatchEntry>>,
    /// MEM-2: the sending gateway's OpenSSH host certificate (`_gateway` entry only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert: Option<String>,
}

/// The capability a batching gateway declares on its `_gateway` heartbeat (SPEC §17).
pub const PRESENCE_BATCH: &str = "presence-batch";

/// One entry of a host-batched heartbeat (PRB-1). Unknown fields are ignored ([C-17]), like in
/// every body this gateway reads.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BatchEntry {
    pub gid: String,
    #[serde(default = "up")]
    pub state: String,
    pub role: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default = "unknown")]
    pub agent_status: String,
    /// Extension, as on a per-entity PRESENCE: a worker's parent main.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
}

fn up() -> String {
    "up".into()
}

impl PresenceBody {
    /// Whether this is a `_gateway` heartbeat of a gateway that batches its presence (PRB-1).
    pub fn batches(&self) -> bool {
        self.capabilities
            .as_ref()
            .is_some_and(|c| c.iter().any(|c| c == PRESENCE_BATCH))
    }
}

impl BatchEntry {
    /// The per-entity body this entry stands for: the batch's `ttlMs` applies to every entry.
    fn as_body(&self, ttl_ms: u64) -> PresenceBody {
        PresenceBody {
            state: self.state.clone(),
            role: self.role.clone(),
            groups: self.groups.clone(),
            agent_status: self.agent_status.clone(),
            ttl_ms,
            profiles: None,
            parent: self.parent.clone(),
            capabilities: None,
            entities: None,
            cert: None,
        }
    }
}

fn unknown() -> String {
    "unknown".into()
}

/// `roster.<host>.<gid>`.
pub fn roster_key(host: &str, gid: &str) -> String {
    format!("roster.{host}.{gid}")
}

/// Splits `roster.<host>.<gid>` (host ids hold no dots).
pub fn parse_roster_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix("roster.")?;
    let (host, gid) = rest.split_once('.')?;
    if host.is_empty() || gid.is_empty() {
        None
    } else {
        Some((host, gid))
    }
}

/// One live roster entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RosterEntry {
    pub host: String,
    pub gid: String,
    pub role: String,
    pub groups: Vec<String>,
    pub agent_status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The capabilities a `_gateway` entry declared (PRB-4 reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(skip)]
    pub expires: Instant,
}

/// What applying a heartbeat did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    Upserted,
    Removed,
    /// PRS-3: the gid is live on another host; the claim was refused.
    Conflict {
        holder: String,
    },
}

/// What applying a host-batched heartbeat did (PRB-2).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BatchApplied {
    /// Entries refused by PRS-3: (gid, the host that holds it).
    pub conflicts: Vec<(String, String)>,
    /// Entities of the host that the batch no longer lists: now `down`.
    pub removed: Vec<String>,
}

/// The union view.
#[derive(Default)]
pub struct Roster {
    /// gid → entry, plus one `_gateway` entry per host under key `_gateway@<host>`.
    pub(crate) entries: Mutex<BTreeMap<String, RosterEntry>>,
    /// gid → (host, `ts` of its signed `down`): what an entity sent before it left still counts
    /// as sent from that host (its last FAILED or ABANDONED may arrive after its `down`).
    departed: Mutex<BTreeMap<String, (String, u64)>>,
}

/// Applies one heartbeat about `gid` from `host` to the locked view (PRS-2, PRS-3).
fn apply_to(
    m: &mut BTreeMap<String, RosterEntry>,
    host: &str,
    gid: &str,
    body: &PresenceBody,
    now: Instant,
) -> Applied {
    let key = slot(host, gid);
    if let Some(existing) = m.get(&key)
        && existing.host != host
        && existing.expires > now
    {
        return Applied::Conflict {
            holder: existing.host.clone(),
        };
    }
    if body.state == "down" {
        m.remove(&key);
        return Applied::Removed;
    }
    m.insert(
        key,
        RosterEntry {
            host: host.to_string(),
            gid: gid.to_string(),
            role: body.role.clone(),
            groups: body.groups.clone(),
            agent_status: body.agent_status.clone(),
            profiles: body.profiles.clone(),
            parent: body.parent.clone(),
            capabilities: body.capabilities.clone().unwrap_or_default(),
            expires: now + Duration::from_millis(body.ttl_ms),
        },
    );
    Applied::Upserted
}

fn slot(host: &str, gid: &str) -> String {
    if gid == GATEWAY_FROM {
        format!("{GATEWAY_FROM}@{host}")
    } else {
        gid.to_string()
    }
}

impl Roster {
    /// Applies a verified heartbeat from `host` about `gid`.
    pub fn apply(&self, host: &str, gid: &str, body: &PresenceBody) -> Applied {
        let Ok(mut m) = self.entries.lock() else {
            return Applied::Removed;
        };
        apply_to(&mut m, host, gid, body, Instant::now())
    }

    /// PRB-2: applies a verified `_gateway` heartbeat of `host` that carries `entities`. The
    /// gateway entry and every listed entry are renewed with the batch's ttl; PRS-3 is judged per
    /// entry (a refused entry leaves the rest applied); an entity of `host` the batch does not
    /// list (or lists as `down`) is removed, since the batch is the host's whole list. All under
    /// one lock, so no reader sees half a batch.
    pub fn apply_batch(&self, host: &str, body: &PresenceBody, listed: &[BatchEntry]) -> BatchApplied {
        let mut out = BatchApplied::default();
        let Ok(mut m) = self.entries.lock() else {
            return out;
        };
        let now = Instant::now();
        apply_to(&mut m, host, GATEWAY_FROM, body, now);
        let mut live = std::collections::BTreeSet::new();
        for e in listed {
            if e.gid == GATEWAY_FROM || e.gid.is_empty() || e.state != "up" {
                continue;
            }
            match apply_to(&mut m, host, &e.gid, &e.as_body(body.ttl_ms), now) {
                Applied::Conflict { holder } => out.conflicts.push((e.gid.clone(), holder)),
                _ => {
                    live.insert(e.gid.as_str());
                }
            }
        }
        m.retain(|_, entry| {
            let gone = entry.host == host && entry.gid != GATEWAY_FROM && !live.contains(entry.gid.as_str());
            if gone {
                out.removed.push(entry.gid.clone());
            }
            !gone
        });
        out
    }

    /// PRB-4: whether a live `_gateway` entry of a host other than `own` lacks `presence-batch`
    /// (an old gateway that still needs per-entity heartbeats). An entry lives for its `ttlMs`
    /// (3H), so "none seen for 3H" is "none live".
    pub fn old_gateway_live(&self, own: &str) -> bool {
        let Ok(m) = self.entries.lock() else {
            return true;
        };
        let now = Instant::now();
        m.values().any(|e| {
            e.gid == GATEWAY_FROM
                && e.host != own
                && e.expires > now
                && !e.capabilities.iter().any(|c| c == PRESENCE_BATCH)
        })
    }

    /// SIG-2 step 2: does `gid` live on `host` right now? (`_gateway` always does.)
    pub fn lives_on(&self, gid: &str, host: &str) -> bool {
        if gid == GATEWAY_FROM {
            return true;
        }
        let Ok(m) = self.entries.lock() else {
            return false;
        };
        m.get(gid).is_some_and(|e| e.host == host && e.expires > Instant::now())
    }

    /// Records a signed `down` of `gid` on `host`, published at `ts`.
    pub fn record_departure(&self, host: &str, gid: &str, ts: u64) {
        if let Ok(mut d) = self.departed.lock() {
            let horizon = ts.saturating_sub(3_600_000);
            d.retain(|_, (_, t)| *t >= horizon);
            d.insert(gid.to_string(), (host.to_string(), ts));
        }
    }

    /// SIG-2 step 2 for a message published at `ts`: `gid` lives on `host`, or lived there until a
    /// `down` published after `ts`.
    pub fn lived_on(&self, gid: &str, host: &str, ts: u64) -> bool {
        self.lives_on(gid, host)
            || self
                .departed
                .lock()
                .map(|d| d.get(gid).is_some_and(|(h, down)| h == host && ts <= *down))
                .unwrap_or(false)
    }

    /// The host a gid lives on, if live.
    pub fn host_of(&self, gid: &str) -> Option<String> {
        let m = self.entries.lock().ok()?;
        m.get(gid)
            .filter(|e| e.expires > Instant::now())
            .map(|e| e.host.clone())
    }

    /// All live entries, sorted by host then gid.
    pub fn snapshot(&self) -> Vec<RosterEntry> {
        let Ok(mut m) = self.entries.lock() else {
            return Vec::new();
        };
        let now = Instant::now();
        m.retain(|_, e| e.expires > now);
        let mut v: Vec<RosterEntry> = m.values().cloned().collect();
        v.sort_by(|a, b| (&a.host, &a.gid).cmp(&(&b.host, &b.gid)));
        v
    }
}

/// How far the roster consumer has caught up ([C-10]).
///
/// SIG-2's grace for an unknown `from` must count from the moment the roster consumer has
/// nothing older pending: after a freeze (SIGSTOP, a long GC pause, a loaded machine) or a slow
/// consumer, `roster.<host>` may still hold a backlog of heartbeats that would make the sender
/// known. The queue is FIFO, so a marker tells: the gateway's own `_gateway` heartbeat, published
/// at instant T, comes back through `roster.<host>` only after everything queued before T was
/// applied. No extra message kind is needed — a heartbeat more is ordinary presence.
#[derive(Default)]
pub struct RosterSync {
    /// Own `_gateway` heartbeats on their way back: msgId → when they were published.
    pending: Mutex<BTreeMap<String, tokio::time::Instant>>,
    /// The publish instant of the newest own heartbeat the roster consumer has applied (or when
    /// the current roster queue was declared: a fresh queue has no backlog).
    caught_up: Mutex<Option<tokio::time::Instant>>,
    /// When the roster consumer last handled a delivery (a slow consumer is waited for; only
    /// one that stopped making progress is given up on).
    progress: Mutex<Option<tokio::time::Instant>>,
    changed: tokio::sync::Notify,
}

impl RosterSync {
    /// A fresh roster queue (connect or reconnect): nothing is pending in it.
    pub fn reset(&self, now: tokio::time::Instant) {
        lock(&self.pending).clear();
        *lock(&self.caught_up) = Some(now);
        self.changed.notify_waiters();
    }

    /// The roster consumer handled one delivery.
    pub fn progressed(&self) {
        *lock(&self.progress) = Some(tokio::time::Instant::now());
    }

    /// When the roster consumer last handled a delivery.
    pub fn last_progress(&self) -> Option<tokio::time::Instant> {
        *lock(&self.progress)
    }

    /// Records an own heartbeat about to be published.
    pub fn sent(&self, msg_id: &str, at: tokio::time::Instant) {
        lock(&self.pending).insert(msg_id.to_string(), at);
    }

    /// Forgets an own heartbeat that was not published.
    pub fn unsent(&self, msg_id: &str) {
        lock(&self.pending).remove(msg_id);
    }

    /// The roster consumer applied an own heartbeat: everything queued before it was applied.
    pub fn echoed(&self, msg_id: &str) {
        let Some(at) = lock(&self.pending).remove(msg_id) else {
            return;
        };
        // Older markers still pending were lost (FIFO): they can never be echoed.
        lock(&self.pending).retain(|_, t| *t > at);
        let mut c = lock(&self.caught_up);
        if c.is_none_or(|c| c < at) {
            *c = Some(at);
        }
        drop(c);
        self.changed.notify_waiters();
    }

    /// True once everything queued before `t` has been applied.
    pub fn is_past(&self, t: tokio::time::Instant) -> bool {
        lock(&self.caught_up).is_some_and(|c| c >= t)
    }

    /// True when a marker published at or after `t` is on its way back.
    pub fn marker_pending_since(&self, t: tokio::time::Instant) -> bool {
        lock(&self.pending).values().any(|at| *at >= t)
    }

    /// Waits until something changes (a marker echoed, a reset), at most `max`.
    pub async fn changed(&self, max: Duration) {
        let _ = tokio::time::timeout(max, self.changed.notified()).await;
    }
}

/// A std lock that survives poisoning: every critical section here leaves the data consistent.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

// ---- The presence runtime: heartbeats out, roster in. ----

/// Heartbeats handed to the publishing channel before their confirms are awaited.
const HEARTBEAT_CHUNK: usize = 256;

use std::sync::Arc;

use lapin::options::BasicAckOptions;
use tracing::{debug, warn};

use crate::metrics::Metrics;

use crate::envelope::{Envelope, Kind};
use crate::gateway::Gateway;
use crate::publish::{Outgoing, PublishError};
use crate::registry::Entity;
use crate::topology::{self, ROSTER_EXCHANGE};
use crate::verify::{self, Rejection};

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
    async fn gateway_heartbeat(&self) -> Result<Envelope, PublishError> {
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

    /// [C-10]: returns once the roster consumer has applied everything queued before `t0`
    /// (publishing an own heartbeat as the marker when none is on its way). A slow consumer is
    /// waited for as long as it makes progress; one that handled nothing for `stall` (and no
    /// marker came back within `stall` of `t0`) is given up on. Returns whether it caught up.
    pub async fn roster_caught_up(&self, t0: tokio::time::Instant, stall: Duration) -> bool {
        loop {
            if self.roster_sync.is_past(t0) {
                return true;
            }
            let now = tokio::time::Instant::now();
            let active = self.roster_sync.last_progress().map_or(t0, |p| p.max(t0));
            let deadline = active + stall;
            if now >= deadline {
                return false;
            }
            if !self.roster_sync.marker_pending_since(t0) {
                // The marker is a full heartbeat: with batching on, a `_gateway` presence without
                // the capability would make every receiver take this host for an old gateway.
                if let Err(e) = self.gateway_heartbeat().await {
                    debug!(error = %e, "roster marker not published");
                    // Not connected: nothing to catch up with now; try again shortly.
                    self.roster_sync.changed(Duration::from_millis(100)).await;
                }
                continue;
            }
            self.roster_sync
                .changed((deadline - now).min(Duration::from_millis(250)))
                .await;
        }
    }

    pub async fn announce_entity(&self, e: &Entity, state: &str) -> Result<Envelope, PublishError> {
        let body = self.entity_presence(e, state);
        self.announce(&e.gid, &body).await
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

    /// TOP-3 / PRS-2: declares `roster.<host>` and folds every verified heartbeat into the view.
    pub async fn start_roster(self: &Arc<Self>, conn: &lapin::Connection) -> anyhow::Result<()> {
        let ch = conn.create_channel().await?;
        let q = topology::declare_roster(&ch, &self.cfg.host_id).await?;
        let now = tokio::time::Instant::now();
        if let Ok(mut t) = self.roster_since.lock() {
            *t = Some(now);
        }
        self.roster_sync.reset(now);
        self.consume_each(ch, &q, "roster", crate::gateway::CONSUME_PREFETCH, |gw, d| async move {
            gw.on_presence(d).await
        })
        .await?;
        Ok(())
    }

    async fn on_presence(&self, d: lapin::message::Delivery) {
        self.roster_sync.progressed();
        let env = match Envelope::from_headers(d.properties.headers().as_ref()) {
            Ok(e) => e,
            Err(e) => {
                let msg_id = d
                    .properties
                    .message_id()
                    .as_ref()
                    .map(|s| s.to_string())
                    .unwrap_or_default();
                return self.reject(&d.acker, &msg_id, &Rejection::Envelope(e)).await;
            }
        };
        if let Err(why) = self.check_presence(&env, &d) {
            return self.reject(&d.acker, &env.msg_id, &why).await;
        }
        let body: PresenceBody = match serde_json::from_slice(&d.data) {
            Ok(b) => b,
            Err(e) => {
                let why = Rejection::Presence(format!("body is not a PRESENCE object: {e}"));
                return self.reject(&d.acker, &env.msg_id, &why).await;
            }
        };
        let applied = if env.host == self.cfg.host_id {
            if env.from == GATEWAY_FROM {
                self.roster_sync.echoed(&env.msg_id);
            }
            Applied::Upserted // our own heartbeat: applied locally when it was announced
        } else if let (true, Some(listed)) = (env.from == GATEWAY_FROM, body.entities.as_ref()) {
            self.apply_batch(&env, &body, listed);
            Applied::Upserted
        } else {
            self.roster.apply(&env.host, &env.from, &body)
        };
        if body.state == "down" && !matches!(applied, Applied::Conflict { .. }) {
            self.roster.record_departure(&env.host, &env.from, env.ts);
        }
        if let Applied::Conflict { holder } = applied {
            // PRS-3: keep the first claim; the second is refused like any failed check (SIG-5).
            let why = Rejection::Conflict {
                gid: env.from.clone(),
                holder,
                claimant: env.host.clone(),
            };
            return self.reject(&d.acker, &env.msg_id, &why).await;
        }
        let _ = d.acker.ack(BasicAckOptions::default()).await;
    }

    /// PRB-2: folds a verified batch into the view. A refused entry (PRS-3) is logged, not the
    /// batch rejected: the rest of it still applies, and a dead-lettered batch would drop every
    /// other entity of the host for an interval.
    fn apply_batch(&self, env: &Envelope, body: &PresenceBody, listed: &[BatchEntry]) {
        let applied = self.roster.apply_batch(&env.host, body, listed);
        for (gid, holder) in &applied.conflicts {
            warn!(
                msgId = %env.msg_id,
                check = "presence_conflict",
                %gid,
                %holder,
                claimant = %env.host,
                "a batch entry claims a gid live on another host; that entry is refused, the rest of the batch applies (PRS-3, PRB-2)"
            );
            Metrics::count(&self.metrics.rejected, &[("reason", "presence_conflict")]);
        }
        for gid in &applied.removed {
            // Missing from its host's latest batch: `down` as of that batch (PRB-2).
            self.roster.record_departure(&env.host, gid, env.ts);
        }
    }

    /// SIG-2 for PRESENCE: signature, `from`/`host` match the routing key, `to` is the key; then
    /// the replay bounds of SIG-3 (a replayed `up` must not resurrect an entity that went `down`).
    fn check_presence(&self, env: &Envelope, d: &lapin::message::Delivery) -> Result<(), Rejection> {
        verify::check_size(&d.data, self.cfg.max_body_bytes)?;
        if env.kind != Kind::Presence {
            return Err(Rejection::Presence(format!("a {} on bridge.roster", env.kind)));
        }
        self.check_presence_signature(env, &d.data)?;
        let key = d.routing_key.as_str();
        let Some((host, gid)) = parse_roster_key(key) else {
            return Err(Rejection::Presence(format!(
                "routing key {key:?} is not roster.<host>.<gid>"
            )));
        };
        if env.from != gid || env.host != host {
            return Err(Rejection::FromNotOnHost {
                from: env.from.clone(),
                host: env.host.clone(),
            });
        }
        verify::check_to(env, key)?;
        verify::check_time(env, self.cfg.clock_skew.as_millis() as u64)?;
        if !self
            .seen
            .insert(&verify::seen_key("roster", &env.msg_id), env.expires_at)
        {
            return Err(Rejection::Replay(env.msg_id.clone()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(ttl: u64) -> PresenceBody {
        PresenceBody {
            state: "up".into(),
            role: "worker".into(),
            groups: vec![],
            agent_status: "idle".into(),
            ttl_ms: ttl,
            profiles: None,
            parent: None,
            capabilities: None,
            entities: None,
            cert: None,
        }
    }

    #[test]
    fn a_live_claim_wins_over_a_second_host() {
        let r = Roster::default();
        assert_eq!(r.apply("a", "g", &up(60_000)), Applied::Upserted);
        assert_eq!(r.apply("b", "g", &up(60_000)), Applied::Conflict { holder: "a".into() });
        assert!(r.lives_on("g", "a"));
        assert!(!r.lives_on("g", "b"));
        assert!(r.lives_on(GATEWAY_FROM, "anything"));
    }

    #[test]
    fn down_and_ttl_remove_entries() {
        let r = Roster::default();
        r.apply("a", "g", &up(60_000));
        let mut down = up(60_000);
        down.state = "down".into();
        assert_eq!(r.apply("a", "g", &down), Applied::Removed);
        assert!(!r.lives_on("g", "a"));
        r.apply("a", "h", &up(0));
        assert!(r.snapshot().is_empty(), "an entry past its ttl is gone");
    }

    #[test]
    fn what_an_entity_sent_before_its_down_still_counts() {
        let r = Roster::default();
        r.apply("b", "g", &up(60_000));
        let mut down = up(60_000);
        down.state = "down".into();
        r.apply("b", "g", &down);
        r.record_departure("b", "g", 1_000);
        assert!(r.lived_on("g", "b", 999), "sent before the down");
        assert!(!r.lived_on("g", "b", 1_001), "sent after the down");
        assert!(!r.lived_on("g", "c", 999), "never lived on c");
    }

    fn entry(gid: &str) -> BatchEntry {
        BatchEntry {
            gid: gid.into(),
            state: "up".into(),
            role: "worker".into(),
            groups: vec![],
            agent_status: "idle".into(),
            parent: None,
        }
    }

    fn batch(ttl: u64) -> PresenceBody {
        let mut b = up(ttl);
        b.role = "gateway".into();
        b.capabilities = Some(vec![PRESENCE_BATCH.into()]);
        b
    }

    #[test]
    fn a_batch_renews_its_entries_and_drops_what_it_no_longer_lists() {
        let r = Roster::default();
        let out = r.apply_batch("p", &batch(60_000), &[entry("e1"), entry("e2")]);
        assert_eq!(out, BatchApplied::default());
        assert!(r.lives_on("e1", "p") && r.lives_on("e2", "p"));
        let out = r.apply_batch("p", &batch(60_000), &[entry("e1")]);
        assert_eq!(out.removed, vec!["e2".to_string()]);
        assert!(r.lives_on("e1", "p"));
        assert!(!r.lives_on("e2", "p"), "missing from the latest batch is down");
        let out = r.apply_batch("p", &batch(60_000), &[]);
        assert_eq!(
            out.removed,
            vec!["e1".to_string()],
            "an empty list is a host with none left"
        );
        assert!(r.snapshot().iter().any(|e| e.gid == GATEWAY_FROM && e.host == "p"));
    }

    #[test]
    fn a_conflicting_entry_is_refused_and_the_rest_applies() {
        let r = Roster::default();
        r.apply("a", "g", &up(60_000));
        let out = r.apply_batch("p", &batch(60_000), &[entry("g"), entry("x")]);
        assert_eq!(out.conflicts, vec![("g".to_string(), "a".to_string())]);
        assert!(r.lives_on("g", "a") && !r.lives_on("g", "p"));
        assert!(r.lives_on("x", "p"));
        assert!(
            r.lives_on("g", "a"),
            "another host's entity is never dropped by p's batch"
        );
    }

    #[test]
    fn an_old_gateway_is_one_without_the_capability() {
        let r = Roster::default();
        r.apply_batch("p", &batch(60_000), &[]);
        assert!(!r.old_gateway_live("me"));
        let mut old = up(60_000);
        old.role = "gateway".into();
        r.apply("o", GATEWAY_FROM, &old);
        assert!(r.old_gateway_live("me"));
        assert!(!r.old_gateway_live("o"), "our own entry never counts");
        r.apply("o", GATEWAY_FROM, &up(0));
        assert!(!r.old_gateway_live("me"), "past its ttl it is gone");
    }

    #[test]
    fn unknown_body_fields_are_ignored() {
        // [C-17]: a receiver that rejected them would make PRB-1 a rejection every H.
        let b: PresenceBody = serde_json::from_str(
            r#"{"state":"up","role":"gateway","ttlMs":3000,"future":{"x":1},
                "entities":[{"gid":"g","role":"worker","novel":true}]}"#,
        )
        .expect("unknown fields are ignored");
        assert_eq!(b.entities.map(|e| e[0].state.clone()), Some("up".to_string()));
    }

    #[test]
    fn roster_keys_parse() {
        assert_eq!(parse_roster_key("roster.host-a.abc"), Some(("host-a", "abc")));
        assert_eq!(parse_roster_key("roster.host-a._gateway"), Some(("host-a", "_gateway")));
        assert_eq!(parse_roster_key("roster.x"), None);
    }
}
