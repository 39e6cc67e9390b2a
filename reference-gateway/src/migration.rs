//! Migration from v1.0.0 (SPEC §13, TOP-5): the sender-keyed `agent.<paneId>.inbox` queues of the
//! as-built CB-307 move into the recipient-keyed `agent.<gid>.inbox.v2` of each worker's parent.
//!
//! Why it exists: v1.0.0 kept a primary's undrained replies in one durable, argument-less queue per
//! *sender* pane, with no envelope. Redeclaring such a queue with the v2 arguments is a 406
//! PRECONDITION_FAILED that a naive upgrade turns into a crash loop (MIG-1, TOP-5), and leaving it
//! alone loses the replies. So this module only ever *passive*-declares, drains and deletes a legacy
//! queue — never declares one — and republishes each message as a signed REPLY `from` the worker
//! (MIG-2).
//!
//! How a gateway knows a worker's v1 pane id: the operator says so when registering the existing
//! pane (`POST /v1/entities {…, "legacyPaneId": "w1:p2"}`); the claim is kept in the durable
//! registry. Pane ids are unique only within one herdr server, so a claim is never guessed from the
//! worker's current pane, and spawned workers never claim one (they did not exist in v1).
//!
//! When: at boot, before any inbox is consumed (so the parent's inbox is complete before its
//! consumer starts, MIG-3), and right after a registration that makes a claim movable (the worker
//! itself, or the parent main it waited for). A move that cannot finish yet (the parent's inbox is
//! on another host and does not exist yet; a v1 consumer is still attached) is retried in the
//! background and at the next boot.
//!
//! Idempotency (MIG-3): each move is `basic.get` → publish REPLY (confirmed, `mandatory`) → ack the
//! legacy message, in batches of [`BATCH`] (gets, publishes, one wait for the confirms, one ack).
//! The REPLY's msgId is UUIDv5([`MIGRATION_NAMESPACE`], legacy `message_id`), so a
//! crash between the confirm and the ack republishes the *same* msgId, and the main's gateway drains
//! each msgId at most once (its seen-set and held set reject the second copy as a replay).
//!
//! Capacity: the parent's inbox is capped (`x-max-length`, drop-head into the DLQ, and nobody is
//! told about a dead-lettered REPLY). A legacy backlog longer than the cap would lose its oldest
//! replies, so the move fills the parent's inbox only up to 90% of the cap and defers the rest
//! until the main drains; such a move completes after the parent's consumer started, which the
//! msgId dedup keeps harmless.
//!
//! Progress is logged (start, every 100 messages, the outcome) and counted:
//! `fleet_migration_moved_total` and `fleet_migration_queues_total{outcome}`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lapin::Channel;
use lapin::options::{BasicAckOptions, BasicGetOptions, BasicNackOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use tracing::{debug, error, info, warn};
use uuid::Uuid;

use crate::entities::EntityError;
use crate::envelope::Kind;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::publish::{Outgoing, PublishError};
use crate::registry::{Entity, Role};
use crate::topology::{self, MSG_EXCHANGE};

/// The UUIDv5 namespace of migrated msgIds: UUIDv5(NAMESPACE_URL, "urn:fleet:migration:v1.0.0").
pub const MIGRATION_NAMESPACE: Uuid = Uuid::from_u128(0x1278_7294_b79a_541b_b6c4_ca1f_fbc1_7814);

/// Log a progress line every this many moved messages.
const PROGRESS_EVERY: u64 = 100;

/// Re-read the parent inbox's depth at least every this many moved messages.
const DEPTH_CHECK_EVERY: u32 = 200;

/// Replies moved per confirmed batch (MIG-3 stays at-least-once: a batch is acked on the legacy
/// queue only after every REPLY in it was confirmed).
const BATCH: u32 = 100;

/// Migration fills a parent's inbox up to this share of its `x-max-length` (percent), leaving the
/// rest to live traffic: above the cap the broker drops the *oldest* message (drop-head) into the
/// DLQ, and a dead-lettered REPLY is reported to nobody — a migration must never cause that.
const FILL_PERCENT: u32 = 90;

/// `agent.<paneId>.inbox`: the v1.0.0 queue of the replies sent from that pane. Never declared by
/// a v2 gateway (MIG-1); see [`topology::inbox_queue`] for the v2 name.
pub fn legacy_queue(pane: &str) -> String {
    format!("agent.{pane}.inbox")
}

/// The v2 msgId of a migrated message: UUIDv5 of its legacy `message_id` (MIG-3).
pub fn derived_msg_id(legacy_message_id: &str) -> String {
    Uuid::new_v5(&MIGRATION_NAMESPACE, legacy_message_id.as_bytes()).to_string()
}

/// The msgId of a legacy message that lacks a `message_id` (v1.0.0 always set one): derived from
/// its queue and body, so it is still stable across a crash. Two such messages with the same body
/// in the same queue would collapse into one for the main's dedup; the gateway warns about each.
fn fallback_msg_id(queue: &str, body: &[u8]) -> String {
    let mut name = Vec::with_capacity(queue.len() + body.len() + 16);
    name.extend_from_slice(b"no-message-id\n");
    name.extend_from_slice(queue.as_bytes());
    name.push(b'\n');
    name.extend_from_slice(body);
    Uuid::new_v5(&MIGRATION_NAMESPACE, &name).to_string()
}

/// The v1 pane id check, kept at its old path; it lives in [`crate::ids`] so that `config` can
/// use it without importing this module.
pub use crate::ids::valid_legacy_pane;

/// What one legacy queue's migration did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// There is no legacy queue (never was, or already migrated).
    Absent,
    /// Every message moved, in order, and the legacy queue is deleted.
    Migrated { moved: u64 },
    /// Stopped for a reason that may pass; the rest stays in the legacy queue and is retried.
    Deferred { moved: u64, why: String },
    /// A broker error stopped it; the rest stays in the legacy queue until the next boot.
    Failed { moved: u64, why: String },
}

impl Outcome {
    fn label(&self) -> &'static str {
        match self {
            Outcome::Absent => "absent",
            Outcome::Migrated { .. } => "migrated",
            Outcome::Deferred { .. } => "deferred",
            Outcome::Failed { .. } => "failed",
        }
    }
}

/// One migration at a time per process (boot, registrations and the retry loop may overlap).
static MIGRATION_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Whether the background retry loop runs.
static RETRYING: AtomicBool = AtomicBool::new(false);

/// Passive declare on its own channel: `Ok(Some((messages, consumers)))`, `Ok(None)` for 404
/// (logged by nobody: [`crate::expected_close`]); bounded by `t`.
async fn peek(ch: &Channel, queue: &str, t: Duration) -> Result<Option<(u32, u32)>, String> {
    let opts = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    // The 404 of a queue that is gone closes the channel; that close is expected, not an ERROR.
    let _looking = crate::expected_close::LookingFor::start(ch.id());
    match tokio::time::timeout(t, ch.queue_declare(queue.into(), opts, FieldTable::default())).await {
        Ok(Ok(q)) => Ok(Some((q.message_count(), q.consumer_count()))),
        Ok(Err(e)) if topology::amqp_code(&e) == Some(404) => Ok(None),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer from the broker within {t:?}")),
    }
}

/// One broker step of a move, bounded by `t` (the inject bound): a connection lost mid-move
/// fails the step within one bound instead of holding the migration lock — and so the next
/// connection's boot-time migration and readiness — until the lost connection is noticed.
async fn bound<T, E: std::fmt::Display>(t: Duration, step: impl Future<Output = Result<T, E>>) -> Result<T, String> {
    match tokio::time::timeout(t, step).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer from the broker within {t:?}")),
    }
}

/// Closes a move's channel, waiting at most `t` (the channel may be on a lost connection).
async fn close_quietly(ch: &Channel, reason: &str, t: Duration) {
    let _ = tokio::time::timeout(t, ch.close(200, reason.into())).await;
}

impl Gateway {
    /// Validates a registration's `legacyPaneId` claim before the entity is stored.
    pub fn check_legacy_claim(
        &self,
        role: Role,
        parent: Option<&str>,
        legacy_pane_id: Option<&str>,
    ) -> Result<(), EntityError> {
        let Some(pane) = legacy_pane_id else {
            return Ok(());
        };
        if role != Role::Worker {
            return Err(EntityError::Invalid(
                "legacyPaneId is for workers: a v1.0.0 queue held the replies a worker sent".into(),
            ));
        }
        if parent.is_none() {
            return Err(EntityError::Invalid(
                "legacyPaneId needs a parent: the legacy replies move into the parent's inbox".into(),
            ));
        }
        if !valid_legacy_pane(pane) {
            return Err(EntityError::Invalid(format!(
                "legacyPaneId {pane:?} is not a pane id (printable ASCII, no spaces, at most 200 bytes)"
            )));
        }
        if let Some(other) = self
            .entities()
            .into_iter()
            .find(|e| e.legacy_pane_id.as_deref() == Some(pane))
        {
            return Err(EntityError::Invalid(format!(
                "legacyPaneId {pane:?} is already claimed by worker {}",
                other.gid
            )));
        }
        Ok(())
    }

    /// Local workers with a legacy claim and a parent.
    fn legacy_workers(&self) -> Vec<Entity> {
        self.entities()
            .into_iter()
            .filter(|e| e.role == Role::Worker && e.legacy_pane_id.is_some() && e.parent.is_some())
            .collect()
    }

    /// MIG-2 at boot: runs before any inbox is consumed. Moves every claimed legacy queue, reports
    /// the listed v1 panes no local worker claims, and schedules a retry for deferred moves. Never
    /// fails the boot: every problem is logged and left for a retry.
    pub async fn migrate_on_boot(self: &Arc<Self>) {
        let _one = MIGRATION_LOCK.lock().await;
        let workers = self.legacy_workers();
        let mut deferred = false;
        for w in &workers {
            deferred |= matches!(self.migrate_worker(w, false).await, Outcome::Deferred { .. });
        }
        self.report_unclaimed(&workers).await;
        if deferred {
            self.spawn_migration_retry();
        }
    }

    /// MIG-2 at registration: the new entity is a worker with a claim, or a main whose workers'
    /// claims waited for its inbox. Runs once the entity is registered and announced.
    pub async fn migrate_at_registration(self: &Arc<Self>, e: &Entity) {
        let _one = MIGRATION_LOCK.lock().await;
        let mut deferred = false;
        for w in self
            .legacy_workers()
            .iter()
            .filter(|w| w.gid == e.gid || w.parent.as_deref() == Some(e.gid.as_str()))
        {
            deferred |= matches!(self.migrate_worker(w, false).await, Outcome::Deferred { .. });
        }
        if deferred {
            self.spawn_migration_retry();
        }
    }

    /// Moves one worker's legacy queue, then logs and counts the outcome (`quiet`: a retry logs a
    /// repeated deferral at DEBUG only).
    async fn migrate_worker(self: &Arc<Self>, w: &Entity, quiet: bool) -> Outcome {
        let (Some(pane), Some(parent)) = (w.legacy_pane_id.as_deref(), w.parent.as_deref()) else {
            return Outcome::Absent;
        };
        let queue = legacy_queue(pane);
        let outcome = self.move_queue(w, &queue, parent).await;
        match &outcome {
            Outcome::Absent => {
                debug!(%pane, %queue, worker = %w.gid, "no legacy queue to migrate");
            }
            Outcome::Migrated { moved } => {
                info!(%pane, %queue, worker = %w.gid, %parent, moved, "legacy queue migrated and deleted (MIG-2)");
            }
            Outcome::Deferred { moved, why } if quiet && *moved == 0 => {
                debug!(%pane, %queue, worker = %w.gid, %parent, reason = %why, "legacy queue migration still deferred");
            }
            Outcome::Deferred { moved, why } => {
                warn!(%pane, %queue, worker = %w.gid, %parent, moved, reason = %why, "legacy queue migration deferred; retrying later");
            }
            Outcome::Failed { moved, why } => {
                error!(%pane, %queue, worker = %w.gid, %parent, moved, error = %why, "legacy queue migration failed; the rest stays in the legacy queue until the next boot");
            }
        }
        let repeated = quiet && matches!(outcome, Outcome::Deferred { moved: 0, .. });
        if outcome != Outcome::Absent && !repeated {
            Metrics::count(&self.metrics.migration_queues, &[("outcome", outcome.label())]);
        }
        outcome
    }

    /// The move itself: passive declare, make the route and the presence ready, then
    /// get → publish → ack until empty, then delete the empty, unused queue.
    async fn move_queue(self: &Arc<Self>, w: &Entity, queue: &str, parent: &str) -> Outcome {
        let failed = |moved: u64, why: String| Outcome::Failed { moved, why };
        let ch = match bound(self.cfg.inject_timeout, self.channel()).await {
            Ok(ch) => ch,
            Err(e) => return failed(0, e),
        };
        let (messages, consumers) = match peek(&ch, queue, self.cfg.inject_timeout).await {
            Ok(Some(found)) => found,
            Ok(None) => return Outcome::Absent,
            Err(e) => return failed(0, format!("passive declare of {queue}: {e}")),
        };
        if consumers > 0 {
            close_quietly(&ch, "migration deferred", self.cfg.inject_timeout).await;
            return Outcome::Deferred {
                moved: 0,
                why: format!("{consumers} consumer(s) still attached — is a v1.0.0 daemon running?"),
            };
        }
        info!(%queue, messages, worker = %w.gid, %parent, "legacy queue found; moving its replies to the parent's v2 inbox (MIG-2)");
        if let Err(why) = self.prepare_move(w, parent).await {
            close_quietly(&ch, "migration failed", self.cfg.inject_timeout).await;
            return failed(0, why);
        }
        let mut moved = 0u64;
        let mut budget = 0u32;
        loop {
            if budget == 0 {
                budget = match self.parent_budget(parent).await {
                    Ok(b) if b > 0 => b,
                    Ok(_) => {
                        close_quietly(&ch, "migration deferred", self.cfg.inject_timeout).await;
                        return Outcome::Deferred {
                            moved,
                            why: format!(
                                "the inbox of parent {parent} is {FILL_PERCENT}% full; waiting for the main to drain it"
                            ),
                        };
                    }
                    Err(why) => {
                        close_quietly(&ch, "migration deferred", self.cfg.inject_timeout).await;
                        return Outcome::Deferred { moved, why };
                    }
                };
            }
            // A batch off the legacy queue (unacked), published in order, confirmed together,
            // then acked with one multiple-ack: one confirm round trip per batch, not per reply.
            let want = budget.min(BATCH);
            let mut ackers = Vec::with_capacity(want as usize);
            let mut outs = Vec::with_capacity(want as usize);
            let mut left = 0;
            while (outs.len() as u32) < want {
                let got = match bound(
                    self.cfg.inject_timeout,
                    ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }),
                )
                .await
                {
                    Ok(got) => got,
                    Err(e) => {
                        // Unacked gets return to the legacy queue with the channel, in order.
                        close_quietly(&ch, "migration failed", self.cfg.inject_timeout).await;
                        return failed(moved, format!("basic.get on {queue}: {e}"));
                    }
                };
                let Some(m) = got else { break };
                left = m.message_count;
                let d = m.delivery;
                let msg_id = match d.properties.message_id() {
                    Some(id) if !id.as_str().is_empty() => derived_msg_id(id.as_str()),
                    _ => {
                        warn!(%queue, "legacy message without message_id; deriving its msgId from queue and body");
                        fallback_msg_id(queue, &d.data)
                    }
                };
                let mut out = Outgoing::new(Kind::Reply, MSG_EXCHANGE, parent, w.gid.as_str(), d.data);
                out.msg_id = Some(msg_id.clone());
                // A legacy reply starts its own flow; its traceId is as stable as its msgId.
                out.trace_id = Some(msg_id);
                outs.push(out);
                ackers.push(d.acker);
            }
            if outs.is_empty() {
                break;
            }
            let results = self.publisher.publish_batch(outs).await;
            let ok = results.iter().take_while(|r| r.is_ok()).count();
            if ok > 0 {
                // Acks every get up to and including the last confirmed one.
                let upto = BasicAckOptions { multiple: true };
                if let Err(e) = bound(self.cfg.inject_timeout, ackers[ok - 1].ack(upto)).await {
                    // Unacked, they return to the legacy queue and move again with the same msgIds.
                    close_quietly(&ch, "migration failed", self.cfg.inject_timeout).await;
                    return failed(moved, format!("ack on {queue}: {e}"));
                }
                let before = moved;
                moved += ok as u64;
                budget = budget.saturating_sub(ok as u32);
                self.metrics.migration_moved.inc_by(ok as u64);
                if moved / PROGRESS_EVERY > before / PROGRESS_EVERY {
                    info!(%queue, moved, left, "moving legacy replies");
                }
            }
            if let Some(Err(e)) = results.into_iter().nth(ok) {
                // The rest goes back to the head of the legacy queue, order kept; it moves next time.
                let rest = BasicNackOptions {
                    requeue: true,
                    multiple: true,
                };
                if let Some(last) = ackers.last() {
                    let _ = bound(self.cfg.inject_timeout, last.nack(rest)).await;
                }
                close_quietly(&ch, "migration stopped", self.cfg.inject_timeout).await;
                return match e {
                    PublishError::NoRoute => Outcome::Deferred {
                        moved,
                        why: format!(
                            "the inbox of parent {parent} does not exist yet (no_route); its gateway has not declared it"
                        ),
                    },
                    other => failed(moved, format!("publishing a migrated REPLY: {other}")),
                };
            }
        }
        let opts = QueueDeleteOptions {
            if_empty: true,
            if_unused: true,
            nowait: false,
        };
        let outcome = match bound(self.cfg.inject_timeout, ch.queue_delete(queue.into(), opts)).await {
            Ok(_) => Outcome::Migrated { moved },
            // 406 (TOP-5): a v1 publisher added a message, or a consumer attached, since the queue
            // was drained. The channel is closed by it; the next attempt uses a fresh one.
            Err(e) => Outcome::Deferred {
                moved,
                why: format!("not deleted: {e}"),
            },
        };
        close_quietly(&ch, "migration done", self.cfg.inject_timeout).await;
        outcome
    }

    /// How many REPLYs may go into the parent's inbox now: up to [`FILL_PERCENT`] of the inbox cap
    /// (this gateway's `x-max-length`; peers share the fleet's configuration) minus what is ready
    /// in it, at most [`DEPTH_CHECK_EVERY`] before the next look. A missing inbox is an error
    /// (nothing can be routed to it yet).
    async fn parent_budget(&self, parent: &str) -> Result<u32, String> {
        let inbox = topology::inbox_queue(parent);
        let ch = self.channel().await.map_err(|e| format!("{e:#}"))?;
        let found = peek(&ch, &inbox, self.cfg.inject_timeout).await;
        close_quietly(&ch, "peek done", self.cfg.inject_timeout).await;
        let ready = match found {
            Ok(Some((ready, _))) => ready,
            Ok(None) => {
                return Err(format!(
                    "the inbox of parent {parent} does not exist yet; its gateway has not declared it"
                ));
            }
            Err(e) => return Err(format!("passive declare of {inbox}: {e}")),
        };
        let limit = (self.cfg.inbox_max_length.saturating_mul(FILL_PERCENT) / 100).max(1);
        Ok(limit.saturating_sub(ready).min(DEPTH_CHECK_EVERY))
    }

    /// Makes the moved REPLYs routable and acceptable before the first one is published: the
    /// worker's inbox exists before its presence says it is up (TOP-2), its presence lets the
    /// parent's gateway accept `from` = the worker (SIG-2 step 2), and a local parent's inbox is
    /// declared now, before its consumer starts (MIG-3). A remote parent's inbox is its gateway's.
    async fn prepare_move(&self, w: &Entity, parent: &str) -> Result<(), String> {
        let ch = self.channel().await.map_err(|e| format!("{e:#}"))?;
        topology::declare_inbox(&ch, &self.cfg.inbox_args(w.role == Role::Worker), &w.gid, &w.groups)
            .await
            .map_err(|e| format!("declaring {}: {e}", topology::inbox_queue(&w.gid)))?;
        if let Some(p) = self.entity(parent) {
            topology::declare_inbox(&ch, &self.cfg.inbox_args(p.role == Role::Worker), &p.gid, &p.groups)
                .await
                .map_err(|e| format!("declaring {}: {e}", topology::inbox_queue(&p.gid)))?;
        }
        close_quietly(&ch, "migration prepared", self.cfg.inject_timeout).await;
        self.announce_entity(w, "up")
            .await
            .map_err(|e| format!("presence of worker {} not confirmed: {e}", w.gid))?;
        Ok(())
    }

    /// Reports the v1 panes listed in `FLEET_LEGACY_PANES` that no local worker claims: their
    /// queues are left alone (they may belong to another host's worker, or to nobody now).
    async fn report_unclaimed(&self, workers: &[Entity]) {
        let claimed: BTreeSet<&str> = workers.iter().filter_map(|w| w.legacy_pane_id.as_deref()).collect();
        for pane in self.cfg.legacy_panes.iter().filter(|p| !claimed.contains(p.as_str())) {
            let queue = legacy_queue(pane);
            let found = match self.channel().await {
                Ok(ch) => {
                    let r = peek(&ch, &queue, self.cfg.inject_timeout).await;
                    close_quietly(&ch, "peek done", self.cfg.inject_timeout).await;
                    r
                }
                Err(e) => {
                    warn!(%pane, error = %format!("{e:#}"), "cannot look for a legacy queue");
                    continue;
                }
            };
            match found {
                Ok(Some((messages, consumers))) => {
                    warn!(%pane, %queue, messages, consumers, "legacy queue of a pane no local worker claims; left alone (register its worker with legacyPaneId to migrate it)");
                    Metrics::count(&self.metrics.migration_queues, &[("outcome", "left_alone")]);
                }
                Ok(None) => debug!(%pane, %queue, "listed v1 pane has no legacy queue"),
                Err(e) => warn!(%pane, %queue, error = %e, "cannot look for a legacy queue"),
            }
        }
    }

    /// Retries deferred moves every heartbeat until none is deferred (or shutdown). While the
    /// broker is away it just waits; there is one loop per process.
    fn spawn_migration_retry(self: &Arc<Self>) {
        if RETRYING.swap(true, Ordering::SeqCst) {
            return;
        }
        let gw = Arc::clone(self);
        tokio::spawn(async move {
            let pause = gw.cfg.heartbeat.max(Duration::from_millis(200));
            let mut shutdown = gw.shutdown_signal();
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(pause) => {}
                    _ = shutdown.changed() => break,
                }
                if !gw.is_connected() {
                    continue;
                }
                let _one = MIGRATION_LOCK.lock().await;
                let mut deferred = false;
                for w in &gw.legacy_workers() {
                    deferred |= matches!(gw.migrate_worker(w, true).await, Outcome::Deferred { .. });
                }
                if !deferred {
                    break;
                }
            }
            RETRYING.store(false, Ordering::SeqCst);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_namespace_is_the_documented_derivation() {
        let ns = Uuid::new_v5(&Uuid::NAMESPACE_URL, b"urn:fleet:migration:v1.0.0");
        assert_eq!(ns, MIGRATION_NAMESPACE);
        assert_eq!(MIGRATION_NAMESPACE.to_string(), "12787294-b79a-541b-b6c4-ca1ffbc17814");
    }

    #[test]
    fn derived_msg_ids_are_stable_lowercase_uuids() {
        let a = derived_msg_id("5f0c1a52-8d3e-4a7b-9c41-2b6e0d9f1a01");
        assert_eq!(a, "e5577a3c-e5b5-537c-b057-e223e08109dd");
        assert_eq!(a, derived_msg_id("5f0c1a52-8d3e-4a7b-9c41-2b6e0d9f1a01"));
        assert!(crate::envelope::is_uuid(&a));
        assert_ne!(a, derived_msg_id("5f0c1a52-8d3e-4a7b-9c41-2b6e0d9f1a02"));
        let f = fallback_msg_id("agent.w1:p2.inbox", b"hello");
        assert!(crate::envelope::is_uuid(&f));
        assert_ne!(f, fallback_msg_id("agent.w1:p3.inbox", b"hello"));
    }

    #[test]
    fn legacy_and_v2_names_never_meet() {
        assert_eq!(legacy_queue("w1:p2"), "agent.w1:p2.inbox");
        let gid = "0b7e7c1e-6a0e-4c8e-9d4f-1c2b3a4d5e6f";
        assert_eq!(topology::inbox_queue(gid), format!("agent.{gid}.inbox.v2"));
        assert_ne!(legacy_queue(gid), topology::inbox_queue(gid));
    }
}
