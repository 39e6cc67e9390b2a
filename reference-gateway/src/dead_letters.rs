//! Dead letters (SPEC §11): the `bridge.dlq` consumer and its FAILED reports.
//!
//! Every gateway consumes `bridge.dlq` (competing consumers). A dead-lettered SEND or SPAWN whose
//! signature verifies is reported to its sender as FAILED with the `x-death` reason (`maxlen`,
//! `expired`, CAP-4), then acked. Anything rejected by verification (`rejected`) is never reported
//! (SIG-6): a forger must not be able to make gateways write to any inbox.

use std::sync::Arc;

use lapin::message::Delivery;
use lapin::options::BasicAckOptions;
use lapin::types::{AMQPValue, FieldTable};
use tracing::{Instrument as _, info, warn};

use crate::envelope::{Envelope, FailReason, FailedBody, GATEWAY_FROM, Kind, header_string};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::publish::Outgoing;
use crate::topology::{DLQ, MSG_EXCHANGE};

/// The `reason` of a message's most recent `x-death` entry.
pub fn death_reason(headers: Option<&FieldTable>) -> Option<String> {
    let deaths = headers?.inner().get("x-death")?;
    let AMQPValue::FieldArray(arr) = deaths else {
        return None;
    };
    let AMQPValue::FieldTable(first) = arr.as_slice().first()? else {
        return None;
    };
    header_string(first.inner().get("reason")?)
}

impl Gateway {
    /// Consumes `bridge.dlq` for the life of `conn`.
    pub async fn start_dead_letters(self: &Arc<Self>, conn: &lapin::Connection) -> anyhow::Result<()> {
        let ch = conn.create_channel().await?;
        let tag = format!("dlq-{}", self.cfg.host_id);
        self.consume_each(ch, DLQ, &tag, self.cfg.prefetch, |gw, d| async move {
            gw.on_dead_letter(d).await
        })
        .await?;
        Ok(())
    }

    async fn on_dead_letter(&self, d: Delivery) {
        let reason = death_reason(d.properties.headers().as_ref()).unwrap_or_default();
        let report = match Envelope::from_headers(d.properties.headers().as_ref()) {
            Ok(env) if matches!(env.kind, Kind::Send | Kind::Spawn) => match reason.as_str() {
                "maxlen" | "expired" if self.membership.trust.verify(&env, &d.data).is_ok() => Some(env),
                _ => None,
            },
            _ => None,
        };
        match report {
            Some(env) => {
                let span = Gateway::span(&env);
                self.report_dead_letter(&env, &reason).instrument(span).await;
            }
            None => {
                // SIG-6 and everything else: counted, never reported.
                Metrics::count(
                    &self.metrics.dead_letters,
                    &[
                        ("reason", if reason.is_empty() { "unknown" } else { &reason }),
                        ("reported", "no"),
                    ],
                );
            }
        }
        if let Err(e) = d.acker.ack(BasicAckOptions::default()).await {
            warn!(error = %e, "dead letter not acked");
        }
    }

    /// CAP-4: FAILED with the `x-death` reason to the dead letter's sender.
    async fn report_dead_letter(&self, env: &Envelope, reason: &str) {
        let r = if reason == "maxlen" {
            FailReason::Maxlen
        } else {
            FailReason::Expired
        };
        let detail = format!("{} to {} was dead-lettered ({reason})", env.kind, env.to);
        info!(reason, "reporting a dead-lettered {} to its sender", env.kind);
        let body = serde_json::to_vec(&FailedBody { reason: r, detail }).unwrap_or_else(|_| b"{}".to_vec());
        let mut out = Outgoing::new(Kind::Failed, MSG_EXCHANGE, env.from.clone(), GATEWAY_FROM, body);
        out.corr_id = Some(env.msg_id.clone());
        out.trace_id = Some(env.trace_id.clone());
        match self.publisher.publish(out).await {
            Ok(_) => Metrics::count(&self.metrics.dead_letters, &[("reason", reason), ("reported", "yes")]),
            Err(e) => warn!(error = %e, "FAILED for a dead letter not published"),
        }
    }
}
