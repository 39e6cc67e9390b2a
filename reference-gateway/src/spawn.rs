//! Spawn and stop across hosts (SPEC §9): the `control.<host>` queue.
//!
//! A SPAWN is acked only after it was acted on (SPN-2, at-least-once) and is deduplicated by its
//! `spawnId` against the durable registry, so a redelivery never launches a second agent.

use std::sync::Arc;

use futures_util::StreamExt as _;
use lapin::options::BasicAckOptions;
use lapin::types::FieldTable;

use crate::envelope::Envelope;
use crate::gateway::Gateway;
use crate::topology;
use crate::verify::{self, Rejection};

impl Gateway {
    /// TOP-3: declares and consumes `control.<host>`.
    pub async fn start_control(self: &Arc<Self>, conn: &lapin::Connection) -> anyhow::Result<()> {
        let ch = conn.create_channel().await?;
        let q = topology::declare_control(&ch, &self.cfg.host_id).await?;
        let mut consumer = ch
            .basic_consume(
                q.as_str().into(),
                "control".into(),
                Default::default(),
                FieldTable::default(),
            )
            .await?;
        let gw = Arc::clone(self);
        tokio::spawn(async move {
            let _keep = ch;
            while let Some(Ok(d)) = consumer.next().await {
                gw.on_control(d).await;
            }
        });
        Ok(())
    }

    async fn on_control(self: &Arc<Self>, d: lapin::message::Delivery) {
        let env = match Envelope::from_headers(d.properties.headers().as_ref()) {
            Ok(e) => e,
            Err(e) => return self.reject(&d.acker, "", &Rejection::Envelope(e)).await,
        };
        if let Err(why) = self.check_control(&env, &d).await {
            return self.reject(&d.acker, &env.msg_id, &why).await;
        }
        let why = Rejection::Presence(format!("{} is not handled on this host yet", env.kind));
        self.reject(&d.acker, &env.msg_id, &why).await;
        let _ = BasicAckOptions::default();
    }

    async fn check_control(
        &self,
        env: &Envelope,
        d: &lapin::message::Delivery,
    ) -> Result<(), Rejection> {
        self.keyring.verify(env, &d.data)?;
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
