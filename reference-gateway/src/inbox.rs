//! Inbox deliveries: verify every message, then route it to the forward or the pull path.
//!
//! This is where a message from the broker first meets the gateway. Nothing is acted on before the
//! full verification chain passed (SIG-2..4, SIG-3); a failure is rejected to the DLX (SIG-5).
//! Workers are fed by the forward path (at-most-once), mains and orchestrators by the pull path
//! (at-least-once).

use std::sync::Arc;

use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use tracing::{Instrument as _, debug, warn};

use crate::envelope::{Envelope, FailedBody, Kind};
use crate::forward::SendOutcome;
use crate::gateway::Gateway;
use crate::metrics::{Metrics, Stage};
use crate::pull::Held;
use crate::registry::Role;
use crate::verify::{self, Rejection};

impl Gateway {
    /// Handles one delivery from the inbox of local entity `owner`.
    pub async fn on_inbox_delivery(self: &Arc<Self>, owner: &str, d: Delivery) {
        let msg_id = d
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        let env = match Envelope::from_headers(d.properties.headers().as_ref()) {
            Ok(env) => env,
            Err(e) => {
                return self.reject(&d.acker, &msg_id, "", &Rejection::Envelope(e)).await;
            }
        };
        let span = Gateway::span(&env);
        async {
            let Some(entity) = self.entity(owner) else {
                // Stopped while the message was in flight: hand it back to the broker's DLX.
                return self
                    .reject(
                        &d.acker,
                        &env.msg_id,
                        &env.host,
                        &Rejection::NotOwner {
                            owner: owner.into(),
                            to: env.to.clone(),
                        },
                    )
                    .await;
            };
            let checking = std::time::Instant::now();
            let verified = self.verify(&env, &d, &entity.gid, &entity.groups).await;
            self.metrics.observe(Stage::Verify, checking.elapsed());
            if !d.acker.usable() {
                // Its channel died while it was being verified (the sender's presence can take a
                // while, [C-7]/[C-10]): the broker has requeued it and redelivers it on the next
                // connection, in its place. Acting on this copy would record its msgId as seen
                // and turn that redelivery into a "replay" — lost on the pull path, or out of
                // order behind what came after it (measured: a broker restart mid-migration).
                debug!("delivery died with its channel during verification; the broker redelivers it");
                return;
            }
            if let Err(why) = verified {
                if matches!(why, Rejection::Expired { .. }) && env.kind.is_transient() {
                    // ASK-3: an expired ASK/ANSWER is acked and dropped, never surfaced.
                    debug!("expired {} dropped", env.kind);
                    let _ = d.acker.ack(BasicAckOptions::default()).await;
                    Metrics::count(&self.metrics.expired_dropped, &[("kind", env.kind.as_str())]);
                    return;
                }
                return self.reject(&d.acker, &env.msg_id, &env.host, &why).await;
            }
            Metrics::count(&self.metrics.consumed, &[("kind", env.kind.as_str())]);
            match entity.role {
                Role::Worker => self.to_worker(entity, env, d).await,
                Role::Main | Role::Orchestrator => self.to_main(&entity.gid, env, d).await,
            }
        }
        .instrument(span)
        .await
    }

    /// The verification chain, in SPEC order.
    async fn verify(&self, env: &Envelope, d: &Delivery, owner: &str, groups: &[String]) -> Result<(), Rejection> {
        verify::check_size(&d.data, self.cfg.max_body_bytes)?;
        self.check_signature(env, &d.data).await?;
        if !self.from_lives_on_host(env).await {
            return Err(Rejection::FromNotOnHost {
                from: env.from.clone(),
                host: env.host.clone(),
            });
        }
        verify::check_to(env, d.routing_key.as_str())?;
        verify::check_owner(env, owner, groups)?;
        verify::check_inbox_kind(env)?;
        verify::check_time(env, self.cfg.clock_skew.as_millis() as u64)?;
        if self.seen.contains(&verify::seen_key(owner, &env.msg_id)) || self.pull.is_held(owner, &env.msg_id) {
            return Err(Rejection::Replay(env.msg_id.clone()));
        }
        Ok(())
    }

    /// Worker inbox: briefs go the forward path; everything else is not for a worker.
    async fn to_worker(self: &Arc<Self>, worker: crate::registry::Entity, env: Envelope, d: Delivery) {
        if env.kind == Kind::Broadcast && env.from == worker.gid {
            // BRD-2: the sender gets none of its own broadcast.
            self.seen
                .insert(&verify::seen_key(&worker.gid, &env.msg_id), env.expires_at);
            let _ = d.acker.ack(BasicAckOptions::default()).await;
            return;
        }
        match env.kind {
            Kind::Send | Kind::Broadcast => self.forward(worker, env, d).await,
            Kind::Answer | Kind::NoWaiter => self.on_turn_message(&worker, env, d).await,
            _ => {
                let why = Rejection::Presence(format!("a {} is not for a worker's inbox", env.kind));
                self.reject(&d.acker, &env.msg_id, &env.host, &why).await
            }
        }
    }

    /// Accepts a verified message into the pull path: records its msgId as seen *first*, so a
    /// duplicate arriving while it is held, handed to a waiter or half-way through a drain (its
    /// ack in flight) is a replay — never a second drain (RPL-1). A held delivery that dies with
    /// its connection is forgotten again (`forget_held`), so its redelivery is accepted.
    pub(crate) fn hold(&self, held: Held) -> bool {
        self.seen
            .insert(&verify::seen_key(&held.owner, &held.env.msg_id), held.env.expires_at);
        let main = held.owner.clone();
        self.pull.offer(&main, held)
    }

    /// Main inbox: outcomes of open sends resolve them; everything else is offered to waiters or held.
    async fn to_main(self: &Arc<Self>, main: &str, env: Envelope, d: Delivery) {
        if matches!(env.kind, Kind::Injected | Kind::Failed)
            && let Some(corr) = env.corr_id.as_deref()
            && self.pending.is_open(corr)
        {
            let outcome = if env.kind == Kind::Injected {
                SendOutcome::Injected
            } else {
                match serde_json::from_slice::<FailedBody>(&d.data) {
                    Ok(b) => SendOutcome::Failed(b),
                    Err(e) => {
                        let why = Rejection::Presence(format!("FAILED body is not {{reason, detail}}: {e}"));
                        return self.reject(&d.acker, &env.msg_id, &env.host, &why).await;
                    }
                }
            };
            self.pending.resolve(corr, outcome);
            self.seen.insert(&verify::seen_key(main, &env.msg_id), env.expires_at);
            if let Err(e) = d.acker.ack(BasicAckOptions::default()).await {
                warn!(error = %e, "ack failed");
            }
            return;
        }
        match env.kind {
            Kind::Broadcast if env.from == main => {
                // BRD-2: the sender gets none of its own broadcast.
                self.seen.insert(&verify::seen_key(main, &env.msg_id), env.expires_at);
                let _ = d.acker.ack(BasicAckOptions::default()).await;
                return;
            }
            Kind::Ask => return self.on_ask(main, env, d).await,
            Kind::Abandoned => return self.on_abandoned(main, env, d).await,
            _ => {}
        }
        let held = Held::arrived(main, env.clone(), d);
        let taken = self.hold(held);
        debug!(
            taken,
            "message for a main {}",
            if taken {
                "handed to a waiter"
            } else {
                "held until drained"
            }
        );
        Metrics::gauge(
            &self.metrics.held_messages,
            &[("gid", main)],
            self.pull.held_count(main) as i64,
        );
        if !taken {
            self.ensure_nudger(main);
        }
    }
}
