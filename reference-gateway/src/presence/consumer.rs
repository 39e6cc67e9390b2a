//! The consumer of `roster.<host>` (SPEC §8, TOP-3, PRS-2): folds every verified heartbeat and
//! batch into the roster view ([`super::roster`]), and the [C-10] wait until it has caught up
//! (the marker bookkeeping is [`super::sync`]).
//!
//! Apart from the view because this is behaviour on the gateway (it consumes, verifies, rejects),
//! while the view is state the hub holds.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::BasicAckOptions;
use tracing::{debug, warn};

use super::roster::Applied;
use super::{BatchEntry, PresenceBody, parse_roster_key};
use crate::envelope::{Envelope, GATEWAY_FROM, Kind};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::topology;
use crate::verify::{self, Rejection};

impl Gateway {
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

impl Gateway {
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
}
