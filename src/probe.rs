//! The wire probe: a raw AMQP client the suite uses to look at and poke the broker directly.
//!
//! It checks what a gateway declared and how (an exclusive consumer really refuses a second one),
//! and publishes crafted messages. Queue counters come from the management API (`broker`); this
//! module is the AMQP side.

use lapin::options::{BasicCancelOptions, BasicConsumeOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

/// A probe failure.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("probe cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("probe AMQP error: {0}")]
    Amqp(#[from] lapin::Error),
}

/// An AMQP connection into one scenario's vhost.
pub struct Probe {
    conn: Connection,
}

impl Probe {
    pub async fn connect(amqp_url: &str) -> Result<Probe, ProbeError> {
        let conn = Connection::connect(amqp_url, ConnectionProperties::default())
            .await
            .map_err(|e| ProbeError::Connect {
                url: redact(amqp_url),
                reason: e.to_string(),
            })?;
        Ok(Probe { conn })
    }

    /// Tries to consume `queue` (exclusively or not) on a fresh channel. `Ok(())` means the broker
    /// accepted the consumer (it is cancelled again at once); `Err(text)` carries the broker's
    /// refusal, e.g. `ACCESS_REFUSED`.
    pub async fn try_consume(
        &self,
        queue: &str,
        exclusive: bool,
    ) -> Result<Result<(), String>, ProbeError> {
        let ch = self.conn.create_channel().await?;
        let opts = BasicConsumeOptions {
            exclusive,
            ..BasicConsumeOptions::default()
        };
        let tag = format!("probe-{}", uuid::Uuid::new_v4().simple());
        match ch
            .basic_consume(
                queue.into(),
                tag.as_str().into(),
                opts,
                FieldTable::default(),
            )
            .await
        {
            Ok(_consumer) => {
                let _ = ch
                    .basic_cancel(tag.as_str().into(), BasicCancelOptions::default())
                    .await;
                let _ = ch.close(200, "probe done".into()).await;
                Ok(Ok(()))
            }
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    pub async fn close(self) {
        let _ = self.conn.close(200, "probe done".into()).await;
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}
