//! Dead letters (SPEC §11): the `bridge.dlq` consumer and its FAILED reports.
//!
//! Every gateway consumes `bridge.dlq` (competing consumers). A dead-lettered SEND or SPAWN whose
//! signature verifies is reported to its sender as FAILED with the `x-death` reason (`maxlen`,
//! `expired`, CAP-4), then acked. Anything rejected by verification (`rejected`) is never reported
//! (SIG-6): a forger must not be able to make gateways write to any inbox.
//!
//! A message a quorum queue dead-lettered for its **delivery limit** (`delivery_limit`) is put
//! back where it died instead ([`Gateway::put_back`]). RabbitMQ 4.0–4.2 counts every return of a
//! delivered message against a quorum queue's limit, 20 by default (3.10 has no default limit),
//! and a message is returned whenever the connection that held it unacked is lost: a REPLY held
//! for a main that does not drain (the pull path) went to `bridge.dlq` after 20 failovers of its
//! gateway (issue 57, measured on 4.0.5), which SPEC's at-least-once reply path and CLU-5 (a) do
//! not allow. Nothing the gateway does returns a message on purpose (rejects never requeue), so
//! such a dead letter was never judged by its recipient: it goes back to the tail of its inbox
//! (fresh delivery count, same msgId: the recipient's dedup holds), confirmed before the dead
//! letter is acked. It is republished on `bridge.msg` with its original routing key, because the
//! recipient checks `to` against the key it was delivered with (SIG-2), and only when that key is
//! the inbox's own gid (a direct message, routed to that inbox alone): a broadcast key would reach
//! every inbox again, and a worker that restarted meanwhile would inject a brief twice. Any other
//! delivery-limit dead letter stays counted, with a WARN naming the broker setting that avoids it
//! (the README's RabbitMQ 4.x notes: a `delivery-limit` policy).

use std::sync::Arc;

use lapin::Confirmation;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::{AMQPValue, FieldTable};
use tracing::{Instrument as _, info, warn};

use crate::envelope::{Envelope, FailReason, FailedBody, GATEWAY_FROM, Kind, header_string};
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::publish::Outgoing;
use crate::topology::{DLQ, MSG_EXCHANGE, inbox_gid};

/// A message's most recent `x-death` entry (RabbitMQ puts it first).
fn last_death(headers: Option<&FieldTable>) -> Option<&FieldTable> {
    let AMQPValue::FieldArray(arr) = headers?.inner().get("x-death")? else {
        return None;
    };
    match arr.as_slice().first()? {
        AMQPValue::FieldTable(entry) => Some(entry),
        _ => None,
    }
}

/// The `reason` of a message's most recent `x-death` entry.
pub fn death_reason(headers: Option<&FieldTable>) -> Option<String> {
    header_string(last_death(headers)?.inner().get("reason")?)
}

/// The queue a message's most recent `x-death` entry says it died in.
pub fn death_queue(headers: Option<&FieldTable>) -> Option<String> {
    header_string(last_death(headers)?.inner().get("queue")?)
}

/// The routing keys a message's most recent `x-death` entry says it was first published with.
pub fn death_routing_keys(headers: Option<&FieldTable>) -> Vec<String> {
    match last_death(headers).and_then(|d| d.inner().get("routing-keys")) {
        Some(AMQPValue::FieldArray(keys)) => keys.as_slice().iter().filter_map(header_string).collect(),
        _ => Vec::new(),
    }
}

/// The key a dead letter from `queue` may be put back with: its only original routing key, when
/// that is the gid whose inbox `queue` is (`bridge.msg` then routes it to that inbox alone).
pub fn put_back_key(queue: &str, keys: &[String]) -> Option<String> {
    let gid = inbox_gid(queue)?;
    match keys {
        [key] if key == gid => Some(key.clone()),
        _ => None,
    }
}

/// An integer header (`x-delivery-count`), whatever width the broker wrote it in.
fn header_count(v: &AMQPValue) -> Option<i64> {
    match v {
        AMQPValue::LongLongInt(n) => Some(*n),
        AMQPValue::LongInt(n) => Some((*n).into()),
        AMQPValue::ShortInt(n) => Some((*n).into()),
        AMQPValue::LongUInt(n) => Some((*n).into()),
        AMQPValue::ShortUInt(n) => Some((*n).into()),
        _ => None,
    }
}

/// The `x-death` reason RabbitMQ gives a message past a quorum queue's delivery limit.
pub const DELIVERY_LIMIT: &str = "delivery_limit";

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
        if reason == DELIVERY_LIMIT {
            let headers = d.properties.headers().as_ref();
            let queue = death_queue(headers).unwrap_or_default();
            match put_back_key(&queue, &death_routing_keys(headers)) {
                Some(key) => return self.put_back(d, &queue, &key).await,
                None => warn!(
                    %queue,
                    "a message was dead-lettered for the broker's delivery limit and cannot be put back (not a direct \
                     message to an inbox); raise the limit for the fleet's quorum queues (a delivery-limit policy)"
                ),
            }
        }
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
        let body = serde_json::to_vec(&FailedBody {
            reason: r,
            detail,
            typed: None,
        })
        .unwrap_or_else(|_| b"{}".to_vec());
        let mut out = Outgoing::new(Kind::Failed, MSG_EXCHANGE, env.from.clone(), GATEWAY_FROM, body);
        out.corr_id = Some(env.msg_id.clone());
        out.trace_id = Some(env.trace_id.clone());
        match self.publisher.publish(out).await {
            Ok(_) => Metrics::count(&self.metrics.dead_letters, &[("reason", reason), ("reported", "yes")]),
            Err(e) => warn!(error = %e, "FAILED for a dead letter not published"),
        }
    }

    /// A message dead-lettered for a quorum queue's delivery limit, back into `queue` (module
    /// doc): published on a confirm-mode channel of its own to `bridge.msg` with `key`, mandatory;
    /// the dead letter is acked once the broker confirmed it, or when `queue` is gone (nothing to
    /// put it back into: said at WARN); otherwise it goes back to `bridge.dlq` for another try.
    async fn put_back(&self, d: Delivery, queue: &str, key: &str) {
        let msg_id = d
            .properties
            .message_id()
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default();
        let count = d
            .properties
            .headers()
            .as_ref()
            .and_then(|h| h.inner().get("x-delivery-count").and_then(header_count))
            .map_or_else(|| "?".to_string(), |n| n.to_string());
        let put = async {
            let ch = self.channel().await?;
            ch.confirm_select(ConfirmSelectOptions::default()).await?;
            let opts = BasicPublishOptions {
                mandatory: true,
                ..BasicPublishOptions::default()
            };
            let confirm = ch
                .basic_publish(MSG_EXCHANGE.into(), key.into(), opts, &d.data, d.properties.clone())
                .await?
                .await?;
            let _ = ch.close(200, "put back".into()).await;
            anyhow::Ok(confirm)
        };
        let outcome = match tokio::time::timeout(self.cfg.inject_timeout, put).await {
            Ok(Ok(Confirmation::Ack(None))) => Ok(true),
            Ok(Ok(Confirmation::Ack(Some(_)))) => Ok(false),
            Ok(Ok(_)) => Err("nacked".to_string()),
            Ok(Err(e)) => Err(format!("{e:#}")),
            Err(_) => Err(format!("no confirm within {:?}", self.cfg.inject_timeout)),
        };
        match outcome {
            Ok(true) => {
                warn!(
                    %queue, msg_id, delivery_count = %count,
                    "a message was dead-lettered for the broker's delivery limit (returned unacked too often: RabbitMQ 4.x \
                     quorum queues allow 20 by default, each lost connection that held it counts); put back into its queue"
                );
                Metrics::count(
                    &self.metrics.dead_letters,
                    &[("reason", DELIVERY_LIMIT), ("reported", "put_back")],
                );
            }
            Ok(false) => {
                warn!(%queue, msg_id, "a message dead-lettered for the broker's delivery limit could not be put back: its queue is gone");
                Metrics::count(
                    &self.metrics.dead_letters,
                    &[("reason", DELIVERY_LIMIT), ("reported", "no")],
                );
            }
            Err(why) => {
                warn!(%queue, msg_id, error = %why, "a message dead-lettered for the broker's delivery limit was not put back yet; it stays in bridge.dlq");
                let again = BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                };
                if let Err(e) = d.acker.nack(again).await {
                    warn!(error = %e, "dead letter not handed back");
                }
                return;
            }
        }
        if let Err(e) = d.acker.ack(BasicAckOptions::default()).await {
            warn!(error = %e, "dead letter not acked");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(reason: &str, queue: &str) -> FieldTable {
        let mut entry = FieldTable::default();
        entry.insert("reason".into(), AMQPValue::LongString(reason.into()));
        entry.insert("queue".into(), AMQPValue::LongString(queue.into()));
        let mut headers = FieldTable::default();
        headers.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::FieldTable(entry)].into()),
        );
        headers
    }

    #[test]
    fn a_death_names_its_reason_and_queue() {
        let h = death(DELIVERY_LIMIT, "agent.m-1.inbox.v2");
        assert_eq!(death_reason(Some(&h)).as_deref(), Some(DELIVERY_LIMIT));
        assert_eq!(death_queue(Some(&h)).as_deref(), Some("agent.m-1.inbox.v2"));
        assert_eq!(death_queue(None), None);
    }

    #[test]
    fn only_direct_messages_to_an_inbox_are_put_back() {
        let gid = "0fd903dd-1979-481d-a1d3-979a2501cc2e";
        let inbox = format!("agent.{gid}.inbox.v2");
        assert_eq!(put_back_key(&inbox, &[gid.to_string()]).as_deref(), Some(gid));
        // A broadcast would reach every inbox again.
        assert_eq!(put_back_key(&inbox, &["broadcast.all".to_string()]), None);
        assert_eq!(
            put_back_key(&inbox, &[gid.to_string(), "broadcast.all".to_string()]),
            None
        );
        // Another inbox's key, or not an inbox at all.
        let other = "9b474d03-bafe-479c-a27e-59ac9fb219ee".to_string();
        assert_eq!(put_back_key(&inbox, std::slice::from_ref(&other)), None);
        for q in ["bridge.dlq", "roster.a", "control.a", "agent.w1:p2.inbox", ""] {
            assert_eq!(put_back_key(q, std::slice::from_ref(&other)), None, "{q}");
        }
    }

    #[test]
    fn a_death_names_the_keys_it_was_published_with() {
        let mut h = death(DELIVERY_LIMIT, "agent.x.inbox.v2");
        let AMQPValue::FieldArray(arr) = h.inner().get("x-death").cloned().expect("x-death") else {
            panic!("x-death is an array");
        };
        let AMQPValue::FieldTable(mut entry) = arr.as_slice()[0].clone() else {
            panic!("an entry is a table");
        };
        entry.insert(
            "routing-keys".into(),
            AMQPValue::FieldArray(vec![AMQPValue::LongString("k1".into())].into()),
        );
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::FieldTable(entry)].into()),
        );
        assert_eq!(death_routing_keys(Some(&h)), ["k1"]);
        assert!(death_routing_keys(None).is_empty());
    }

    #[test]
    fn delivery_counts_read_in_any_width() {
        assert_eq!(header_count(&AMQPValue::LongLongInt(20)), Some(20));
        assert_eq!(header_count(&AMQPValue::LongInt(3)), Some(3));
        assert_eq!(header_count(&AMQPValue::LongString("x".into())), None);
    }
}
