//! Restarting a broker on its data — halt, then resume on the same node, data dir, ports and
//! container — which only the scenario that has the broker to itself may do (see the module doc
//! of `super`), and only the process and container providers can.

use std::time::Duration;

use super::Broker;
use super::boot::restart_boot;
use super::error::BrokerError;
use super::readiness;

impl Broker {
    /// Why this broker cannot be restarted by the suite, if it cannot.
    pub fn cannot_restart(&self) -> Option<&'static str> {
        self.spec.provider.cannot_restart()
    }

    /// Restarts the broker on its data ([`Broker::halt`], then [`Broker::resume`]); only the
    /// scenario that has the broker to itself may, from its vhost `vhost`. Returns how long the
    /// broker was away.
    pub async fn restart(&self, vhost: &str) -> Result<Duration, BrokerError> {
        let started = std::time::Instant::now();
        self.halt(vhost).await?;
        self.resume(vhost).await?;
        Ok(started.elapsed())
    }

    /// Stops the broker — the process node with SIGTERM, the container with `docker stop`; every
    /// node of a cluster, together — and keeps its data. Every connection into it breaks, so only the scenario that has the broker
    /// to itself may do this, from its vhost `vhost` ([`Broker::create_exclusive_vhost`]).
    pub async fn halt(&self, vhost: &str) -> Result<(), BrokerError> {
        self.check_exclusive(vhost)?;
        if self.down.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason: "the broker is already down".into(),
            });
        }
        tracing::info!(spec = %self.spec.label(), "stopping the broker (its data kept)");
        self.provider.halt(&self.spec).await
    }

    /// Starts the broker [`Broker::halt`] stopped — the same node on the same data dir and ports,
    /// the same container; every node of a cluster, together, as mnesia wants — and waits (scaled
    /// deadline) until management and AMQP answer again on the same addresses (a cluster: every
    /// node, clustered) and `vhost` is still there.
    pub async fn resume(&self, vhost: &str) -> Result<(), BrokerError> {
        self.check_exclusive(vhost)?;
        if !self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason: "the broker is not down".into(),
            });
        }
        let started = std::time::Instant::now();
        self.provider.resume(&self.spec).await?;
        readiness::wait_ready(
            &self.spec,
            &self.provider,
            &self.endpoint,
            self.cluster.as_ref(),
            &self.management,
            restart_boot(),
        )
        .await?;
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
        let vhosts = self.management.vhosts().await?;
        if !vhosts.iter().any(|v| v == vhost) {
            return Err(BrokerError::Died {
                spec: self.spec.label(),
                reason: format!("the broker came back without vhost {vhost}: its data was lost (vhosts: {vhosts:?})"),
                log: self.provider.log_tail().await,
            });
        }
        tracing::info!(spec = %self.spec.label(), took = ?started.elapsed(), "broker back");
        Ok(())
    }

    /// Whether the broker is stopped by [`Broker::halt`] and not yet back ([`Broker::resume`]).
    pub fn is_down(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn check_exclusive(&self, vhost: &str) -> Result<(), BrokerError> {
        if let Some(why) = self.cannot_restart() {
            return Err(BrokerError::CannotRestart {
                spec: self.spec.label(),
                reason: why.into(),
            });
        }
        let holder = self.users.exclusive();
        if holder.as_deref() != Some(vhost) {
            return Err(BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason: format!(
                    "vhost {vhost} does not have the broker to itself (that is {holder:?}): stopping it would \
                     break other scenarios' connections; make the vhost with create_exclusive_vhost"
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::{BrokerSpec, container};

    /// A durable queue with one persistent message survives a restart; the addresses stay the same.
    /// Run with `cargo test -p fleet-conformance --lib -- --ignored broker_restart --nocapture`.
    async fn restart_keeps_data(spec: BrokerSpec, image: Option<String>) {
        use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        use lapin::{BasicProperties, Connection, ConnectionProperties};

        let broker = Broker::start_with_image(&spec, image).await.expect("broker starts");
        let before = broker.endpoint().clone();
        let vhost = broker.create_exclusive_vhost().await.expect("vhost");
        let conn = Connection::connect(&broker.amqp_url(&vhost), ConnectionProperties::default())
            .await
            .expect("AMQP connection");
        let channel = conn.create_channel().await.expect("channel");
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare("kept".into(), durable, FieldTable::default())
            .await
            .expect("declare");
        for (body, mode) in [(&b"persistent"[..], 2), (&b"transient"[..], 1)] {
            channel
                .basic_publish(
                    "".into(),
                    "kept".into(),
                    BasicPublishOptions::default(),
                    body,
                    BasicProperties::default().with_delivery_mode(mode),
                )
                .await
                .expect("publish")
                .await
                .expect("publish sent");
        }
        let took = broker.restart(&vhost).await.expect("restart");
        assert_eq!(broker.endpoint(), &before, "the addresses must not change");
        let conn = Connection::connect(&broker.amqp_url(&vhost), ConnectionProperties::default())
            .await
            .expect("AMQP connection after the restart");
        let channel = conn.create_channel().await.expect("channel");
        let q = channel
            .queue_declare(
                "kept".into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("the durable queue survived");
        assert_eq!(
            q.message_count(),
            1,
            "the persistent message survives, the transient one not"
        );
        let _ = conn.close(200, "bye".into()).await;
        broker.delete_vhost(&vhost).await.expect("delete vhost");
        eprintln!("{}: restarted in {took:.1?}", spec.label());
        broker.stop().await.expect("stop");
    }

    #[tokio::test]
    #[ignore = "starts a real rabbitmq-server process; needs the Debian package"]
    async fn broker_restart_process_rabbitmq() {
        restart_keeps_data(BrokerSpec::parse("process:rabbitmq").expect("valid"), None).await;
    }

    #[tokio::test]
    #[ignore = "starts a real broker container; needs docker and a local RabbitMQ image"]
    async fn broker_restart_container_rabbitmq() {
        let image = std::env::var(container::RABBITMQ_IMAGE_VAR)
            .unwrap_or_else(|_| container::LOCAL_RABBITMQ_IMAGE.to_string());
        restart_keeps_data(BrokerSpec::parse("container:rabbitmq").expect("valid"), Some(image)).await;
    }
}
