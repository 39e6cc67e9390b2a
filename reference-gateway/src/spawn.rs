//! Spawn and stop across hosts (SPEC §9): the `control.<host>` queue.
//!
//! A SPAWN is acked only after it was acted on (SPN-2, at-least-once) and is deduplicated by its
//! `spawnId` against the durable registry, so a redelivery never launches a second agent.

use std::sync::Arc;

use lapin::options::BasicAckOptions;

use serde::Deserialize;
use tracing::{Instrument as _, info, warn};

use crate::entities::RegisterRequest;
use crate::envelope::{Envelope, FailReason, FailedBody, GATEWAY_FROM, Kind};
use crate::gateway::Gateway;
use crate::publish::Outgoing;
use crate::registry::Role;
use crate::topology::{self, MSG_EXCHANGE};
use crate::verify::{self, Rejection};

/// The body of a SPAWN (§2.2).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct SpawnBody {
    pub profile: String,
    #[serde(default)]
    pub brief: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub parent: Option<String>,
}

impl Gateway {
    /// TOP-3: declares and consumes `control.<host>`.
    pub async fn start_control(self: &Arc<Self>, conn: &lapin::Connection) -> anyhow::Result<()> {
        let ch = conn.create_channel().await?;
        let q = topology::declare_control(&ch, &self.cfg.queue_args(), &self.cfg.host_id).await?;
        self.consume_each(
            ch,
            &q,
            "control",
            crate::gateway::CONSUME_PREFETCH,
            |gw, d| async move { gw.on_control(d).await },
        )
        .await?;
        Ok(())
    }

    async fn on_control(self: &Arc<Self>, d: lapin::message::Delivery) {
        let env = match Envelope::from_headers(d.properties.headers().as_ref()) {
            Ok(e) => e,
            Err(e) => return self.reject(&d.acker, "", "", &Rejection::Envelope(e)).await,
        };
        let span = Gateway::span(&env);
        async {
            if let Err(why) = self.check_control(&env, &d).await {
                return self.reject(&d.acker, &env.msg_id, &env.host, &why).await;
            }
            match env.kind {
                Kind::Spawn => self.on_spawn(&env, &d.data).await,
                Kind::Stop => self.on_stop(&env, &d.data).await,
                other => {
                    let why = Rejection::Presence(format!("a {other} on bridge.control"));
                    return self.reject(&d.acker, &env.msg_id, &env.host, &why).await;
                }
            }
            // SPN-2: acked only after it was acted on.
            if let Err(e) = d.acker.ack(BasicAckOptions::default()).await {
                warn!(error = %e, "control ack failed");
            }
        }
        .instrument(span)
        .await
    }

    async fn report_failed(&self, to: &str, from: &str, about: &Envelope, reason: FailReason, detail: String) {
        warn!(reason = reason.as_str(), %detail, "control request failed");
        let body = serde_json::to_vec(&FailedBody {
            reason,
            detail,
            typed: None,
        })
        .unwrap_or_else(|_| b"{}".to_vec());
        let mut out = Outgoing::new(Kind::Failed, MSG_EXCHANGE, to.to_string(), from.to_string(), body);
        out.corr_id = Some(about.msg_id.clone());
        out.trace_id = Some(about.trace_id.clone());
        if let Err(e) = self.publisher.publish(out).await {
            warn!(error = %e, "FAILED not published");
        }
    }

    /// SPN-2..4: dedup by spawnId, launch the agent in a new pane, register, deliver the brief.
    async fn on_spawn(self: &Arc<Self>, env: &Envelope, body: &[u8]) {
        let spawn_id = env.spawn_id.clone().unwrap_or_default();
        if self.registry.by_spawn_id(&spawn_id).is_some() {
            info!(spawnId = %spawn_id, "duplicate SPAWN: the worker already exists");
            return;
        }
        let req: SpawnBody = match serde_json::from_slice(body) {
            Ok(r) => r,
            Err(e) => {
                let detail = format!("SPAWN body is not {{profile, brief, groups, parent}}: {e}");
                return self
                    .report_failed(&env.from, GATEWAY_FROM, env, FailReason::SpawnFailed, detail)
                    .await;
            }
        };
        let Some(command) = self.cfg.profiles.get(&req.profile).cloned() else {
            let detail = format!("host {} has no profile {:?}", self.cfg.host_id, req.profile);
            return self
                .report_failed(&env.from, GATEWAY_FROM, env, FailReason::UnknownProfile, detail)
                .await;
        };
        let gid = spawn_id.clone();
        let token = crate::entities::new_token();
        let mut pane_env = std::collections::BTreeMap::new();
        pane_env.insert("FLEET_GID".to_string(), gid.clone());
        pane_env.insert("FLEET_MCP_URL".to_string(), format!("http://{}/mcp", self.cfg.listen));
        pane_env.insert("FLEET_MCP_TOKEN".to_string(), token.clone());
        let label = format!("fleet-{}", &gid[..8]);
        let pane = match self.herdr.create_pane(&label, &pane_env).await {
            Ok(p) => p,
            Err(e) => {
                return self
                    .report_failed(&env.from, GATEWAY_FROM, env, FailReason::SpawnFailed, e.to_string())
                    .await;
            }
        };
        if let Err(e) = self.herdr.send_input(&pane, &command).await {
            let _ = self.herdr.close(&pane).await;
            return self
                .report_failed(&env.from, GATEWAY_FROM, env, FailReason::SpawnFailed, e.to_string())
                .await;
        }
        let reg = RegisterRequest {
            role: Role::Worker,
            gid: Some(gid.clone()),
            pane: pane.clone(),
            groups: req.groups.clone(),
            parent: Some(req.parent.clone().unwrap_or_else(|| env.from.clone())),
            legacy_pane_id: None,
        };
        let worker = match self.register_with(reg, Some(spawn_id.clone()), Some(token)).await {
            Ok(w) => w,
            Err(e) => {
                let _ = self.herdr.close(&pane).await;
                return self
                    .report_failed(&env.from, GATEWAY_FROM, env, FailReason::SpawnFailed, e.to_string())
                    .await;
            }
        };
        info!(%gid, %pane, profile = %req.profile, "worker spawned");
        // SPN-4: the brief goes by the forward path, INJECTED corrId = the SPAWN's msgId; its
        // inject window starts now, as the agent is still booting.
        let mut brief_env = env.clone();
        brief_env.ts = crate::envelope::now_ms();
        brief_env.kind = Kind::Send;
        let gw = Arc::clone(self);
        Gateway::spawn_in(env, async move {
            gw.inject_and_report(worker, brief_env, req.brief, crate::forward::Launch::Booting)
                .await
        });
    }

    /// SPN-5 / [C-3]: STOP a local worker.
    async fn on_stop(self: &Arc<Self>, env: &Envelope, body: &[u8]) {
        let gid = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("gid").and_then(|g| g.as_str()).map(str::to_string))
            .unwrap_or_default();
        match self.entity(&gid) {
            Some(e) if e.role == Role::Worker => {
                if let Err(err) = self.stop_entity(&gid).await {
                    self.report_failed(&env.from, GATEWAY_FROM, env, FailReason::Stopped, err.to_string())
                        .await;
                }
            }
            _ => {
                let detail = format!("no worker {gid:?} on host {}", self.cfg.host_id);
                self.report_failed(&env.from, GATEWAY_FROM, env, FailReason::NoSuchEntity, detail)
                    .await;
            }
        }
    }

    async fn check_control(&self, env: &Envelope, d: &lapin::message::Delivery) -> Result<(), Rejection> {
        self.check_signature(env, &d.data).await?;
        if !self.from_lives_on_host(env).await {
            return Err(Rejection::FromNotOnHost {
                from: env.from.clone(),
                host: env.host.clone(),
            });
        }
        verify::check_to(env, d.routing_key.as_str())?;
        verify::check_time(env, self.cfg.clock_skew.as_millis() as u64)
    }
}
