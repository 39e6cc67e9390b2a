//! How long a broker may take to come up, per provider, and the probe that says its AMQP listener
//! is up: the protocol header answered with `connection.start`.
//!
//! Exists as a leaf because the providers' own boot waits (a cluster's nodes, one by one), the
//! cluster's formed check and the broker's readiness (`readiness.rs`) all need them, and
//! readiness sits above the providers it asks.

use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::flavour::ServerIdentity;
use crate::timing::scaled;

/// Nominal boot deadlines (scaled by `FLEET_E2E_TIME_SCALE`). RabbitMQ with management boots in
/// 5–10 s on two cores; the margin covers a loaded CI machine.
pub(super) const CONTAINER_BOOT: Duration = Duration::from_secs(120);
pub(super) const PROCESS_BOOT: Duration = Duration::from_secs(90);
pub(super) const URL_ATTACH: Duration = Duration::from_secs(30);
/// Nominal deadline of a cluster's readiness once its nodes booted and joined (the provider's
/// own boot waits count apart): every node answers and sees every other.
pub(super) const CLUSTER_BOOT: Duration = Duration::from_secs(120);
/// Nominal deadline of a broker's boot after a restart.
const RESTART_BOOT: Duration = Duration::from_secs(90);

/// Nominal deadline of a broker's (or one node's) boot after a restart: [`RESTART_BOOT`], or
/// longer for nodes that hold a large fleet ([`super::own_nodes::run_as_large_fleet`]).
pub(super) fn restart_boot() -> Duration {
    super::own_nodes::restart_boot(RESTART_BOOT)
}

/// An AMQP 0-9-1 server answers the protocol header with `connection.start`, a method frame
/// (frame type 1). A bare TCP connect is not enough: docker's port proxy accepts connections
/// before the broker listens. The frame names the broker (its `product` and `version` server
/// properties); `None` when they cannot be read (the listener still answered).
pub(super) async fn amqp_answers(addr: &str) -> Result<Option<ServerIdentity>, String> {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(b"AMQP\x00\x00\x09\x01")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut header = [0u8; 7];
        stream.read_exact(&mut header).await.map_err(|e| format!("read: {e}"))?;
        if header[0] != 1 {
            return Err(format!("answered frame type {}, not a method frame", header[0]));
        }
        let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
        // A connection.start is a few hundred bytes; a larger size is not one, the listener answered.
        if size > 64 * 1024 {
            return Ok(None);
        }
        let mut frame = header.to_vec();
        frame.resize(7 + size + 1, 0);
        if stream.read_exact(&mut frame[7..]).await.is_err() {
            return Ok(None);
        }
        match ServerIdentity::from_connection_start(&frame) {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                tracing::warn!(error = %e, "the broker's connection.start could not be read; its product comes from the management API");
                Ok(None)
            }
        }
    };
    tokio::time::timeout(scaled(Duration::from_secs(5)), attempt)
        .await
        .map_err(|_| "no answer to the AMQP protocol header".to_string())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn amqp_probe_rejects_a_listener_that_is_not_amqp() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let err = amqp_answers(&addr).await.expect_err("not AMQP");
        assert!(err.contains("frame type"), "{err}");
    }
}
