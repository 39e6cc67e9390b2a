//! The consumer of `roster.<host>` (SPEC §8, TOP-3, PRS-2): folds every verified heartbeat and
//! batch into the roster view ([`super::roster`]), and the [C-10] wait until it has caught up
//! (the marker bookkeeping is [`super::sync`]).
//!
//! Apart from the view because this is behaviour on the gateway (it consumes, verifies, rejects),
//! while the view is state the hub holds.

use std::sync::Arc;
use std::time::Duration;

use lapin::options::{BasicAckOptions, BasicRejectOptions};
use tracing::{debug, warn};

use super::roster::Applied;
use super::{BatchEntry, PresenceBody, parse_roster_key};
use crate::envelope::{Envelope, GATEWAY_FROM, Kind};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::signing::SigError;
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
        self.hosts_heard.reset(now);
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
                return self.reject(&d.acker, &msg_id, "", &Rejection::Envelope(e)).await;
            }
        };
        let key = d.routing_key.as_str();
        match self.take_presence(&env, &d.data, key) {
            Ok(()) => {
                if env.from == GATEWAY_FROM && env.host != self.cfg.host_id {
                    self.hosts_heard.heard(&env.host);
                }
                let _ = d.acker.ack(BasicAckOptions::default()).await;
            }
            Err(Rejection::Signature(SigError::UnknownHost(_))) if env.from != GATEWAY_FROM => {
                // [C-21] 7: the host's key may come with its next `_gateway` presence.
                let dropped = self
                    .membership
                    .waiting
                    .hold(env.clone(), &d.data, key, self.waiting_ttl());
                self.count_waited("dropped", dropped);
                let _ = d.acker.ack(BasicAckOptions::default()).await;
            }
            Err(why) => self.reject_presence(&d.acker, &env, &why).await,
        }
        if env.from == GATEWAY_FROM && env.host != self.cfg.host_id {
            self.release_waiting(&env.host);
        }
    }

    /// Checks and applies one presence; the error is why it is rejected.
    fn take_presence(&self, env: &Envelope, data: &[u8], key: &str) -> Result<(), Rejection> {
        self.check_presence(env, data, key)?;
        let body: PresenceBody = serde_json::from_slice(data)
            .map_err(|e| Rejection::Presence(format!("body is not a PRESENCE object: {e}")))?;
        let applied = if env.host == self.cfg.host_id {
            if env.from == GATEWAY_FROM {
                self.roster_sync.echoed(&env.msg_id);
            }
            Applied::Upserted // our own heartbeat: applied locally when it was announced
        } else if let (true, Some(listed)) = (env.from == GATEWAY_FROM, body.entities.as_ref()) {
            self.apply_batch(env, &body, listed);
            Applied::Upserted
        } else {
            self.roster.apply(&env.host, &env.from, &body)
        };
        if body.state == "down" && !matches!(applied, Applied::Conflict { .. }) {
            self.roster.record_departure(&env.host, &env.from, env.ts);
        }
        if let Applied::Conflict { holder } = applied {
            // PRS-3: keep the first claim; the second is refused like any failed check (SIG-5).
            return Err(Rejection::Conflict {
                gid: env.from.clone(),
                holder,
                claimant: env.host.clone(),
            });
        }
        Ok(())
    }

    /// [C-21] 7: after `host`'s `_gateway` presence, its presences that waited for it are judged
    /// again; those that still do not verify are dropped without a dead letter.
    fn release_waiting(&self, host: &str) {
        let (waiting, stale) = self.membership.waiting.release(host, self.waiting_ttl());
        self.count_waited("dropped", stale);
        for w in waiting {
            match self.take_presence(&w.env, &w.body, &w.routing_key) {
                Ok(()) => self.count_waited("applied", 1),
                Err(why) => {
                    debug!(
                        msgId = %w.env.msg_id,
                        host = %host,
                        check = why.reason(),
                        error = %why,
                        "a presence that waited for its host's key still does not apply: dropped without a dead letter ([C-21] 7)"
                    );
                    self.count_waited("dropped", 1);
                }
            }
        }
    }

    /// How long a presence waits for its host's `_gateway` presence: the next one is at most H
    /// away ([C-21] 7). One that comes later finds it dropped; the entity's next heartbeat, or
    /// the host's next batch, lists it anyway.
    fn waiting_ttl(&self) -> Duration {
        self.cfg.heartbeat
    }

    fn count_waited(&self, outcome: &'static str, n: usize) {
        if n > 0 {
            self.metrics
                .presence_waited
                .get_or_create(&crate::metrics::labels(&[("outcome", outcome)]))
                .inc_by(n as u64);
        }
    }

    /// SIG-5 for a presence: dead-lettered and counted as always. When it fails a certificate
    /// check (`revoked`, `cert_expired`, `certificate`: a host whose credential lapsed and keeps
    /// heartbeating) its WARN line is written once per host and check a minute, not every H.
    async fn reject_presence(&self, acker: &lapin::Acker, env: &Envelope, why: &Rejection) {
        let check = why.reason();
        if !matches!(check, "revoked" | "cert_expired" | "certificate") {
            return self.reject(acker, &env.msg_id, &env.host, why).await;
        }
        self.membership
            .decisions
            .rejected(&env.host, check, why.to_string(), crate::envelope::now_ms());
        match self
            .membership
            .repeats
            .log_now(&env.host, check, std::time::Instant::now())
        {
            Some(0) => return self.reject(acker, &env.msg_id, &env.host, why).await,
            Some(quiet) => {
                warn!(
                    host = %env.host,
                    check,
                    quiet,
                    "presences of this host rejected for the same check and not logged in the last minute"
                );
                return self.reject(acker, &env.msg_id, &env.host, why).await;
            }
            None => {}
        }
        Metrics::count(&self.metrics.rejected, &[("reason", check)]);
        Metrics::count(&self.metrics.repeated_rejections, &[("reason", check)]);
        if let Err(e) = acker.reject(BasicRejectOptions { requeue: false }).await {
            warn!(msgId = %env.msg_id, error = %e, "reject failed");
        }
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
    fn check_presence(&self, env: &Envelope, data: &[u8], key: &str) -> Result<(), Rejection> {
        verify::check_size(data, self.cfg.max_body_bytes)?;
        if env.kind != Kind::Presence {
            return Err(Rejection::Presence(format!("a {} on bridge.roster", env.kind)));
        }
        self.check_presence_signature(env, data)?;
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
