//! The simulated hosts of `--fleet`: their keys, roster queues, heartbeats and the check each
//! applies to what it receives, as a gateway would.
//!
//! Why a module: what a simulated host is (publishes, verifies, counts) is apart from how the runs
//! are orchestrated and measured ([`crate::fleet::sim_fleet`]); the revocation timing
//! ([`crate::fleet::trust`]) drives a host's rounds and asks whether a real gateway lists it, so
//! it imports this module, below both.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, VerifyingKey};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection};
use serde_json::{Value, json};

use crate::fleet::sim_result::Form;
use crate::rig::hosts::Fleet;
use fleet_conformance::envelope::{Envelope, now_ms};
use fleet_conformance::keys::HostKey;

/// What a simulated host publishes each round: (routing key, body, properties).
pub type Round = Vec<(String, Vec<u8>, lapin::BasicProperties)>;

/// Deliveries a simulated host takes before it acks (one `multiple` ack for them all).
const ACK_EVERY: u64 = 32;
const PREFETCH: u16 = 128;

/// What the simulated hosts count.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) received: AtomicU64,
    pub(crate) verified: AtomicU64,
    pub(crate) failed: AtomicU64,
    pub(crate) published: AtomicU64,
}

pub(crate) type Peers = Arc<HashMap<String, VerifyingKey>>;

/// Checks one delivery as a receiving gateway would (SIG-2 (1)–(3) for PRESENCE, body parsed).
pub(crate) fn verify(
    peers: &HashMap<String, VerifyingKey>,
    routing_key: &str,
    headers: Option<&FieldTable>,
    body: &[u8],
) -> bool {
    let Some(env) = headers.and_then(|t| Envelope::from_field_table(t).ok()) else {
        return false;
    };
    if env.check_required().is_err() || env.kind() != "PRESENCE" || env.value("to") != routing_key {
        return false;
    }
    let host = env.value("host");
    let Some(key) = peers.get(host) else {
        return false;
    };
    // A PRESENCE's `from` must be its routing key's gid and `host` its host.
    let Some(rest) = routing_key.strip_prefix("roster.") else {
        return false;
    };
    if rest.strip_prefix(host).and_then(|r| r.strip_prefix('.')) != Some(env.value("from")) {
        return false;
    }
    let Some(sig) = B64
        .decode(env.value("sig"))
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
    else {
        return false;
    };
    if key
        .verify_strict(&env.signing_input(body), &Signature::from_bytes(&sig))
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.is_object())
}

/// What every simulated host of a run shares: how it heartbeats, whom it trusts, what it counts.
#[derive(Clone)]
pub(crate) struct Beat {
    pub(crate) entities: usize,
    pub(crate) form: Form,
    pub(crate) heartbeat_ms: u64,
    pub(crate) peers: Peers,
    pub(crate) counters: Arc<Counters>,
    /// A certificate run: every host's certificate line, carried in its `_gateway` presence.
    pub(crate) certs: Option<Arc<BTreeMap<String, String>>>,
}

/// A simulated host: its key, its entities, its channel and tasks.
pub(crate) struct SimHost {
    pub(crate) key: HostKey,
    pub(crate) gids: Vec<String>,
    pub(crate) channel: Channel,
    pub(crate) tasks: Vec<tokio::task::JoinHandle<()>>,
}

pub(crate) fn long(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v.to_string()))
}

/// One signed PRESENCE of `host` about `gid` (`_gateway` for the host itself).
pub(crate) fn presence(key: &HostKey, gid: &str, body: &Value, ttl_ms: u64) -> (String, Vec<u8>, BasicProperties) {
    let to = format!("roster.{}.{gid}", key.host);
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut env = Envelope::new("PRESENCE", gid, &to, &key.host);
    env.set("expiresAt", &(now_ms() + ttl_ms).to_string());
    let env = env.signed_by(key, &bytes);
    let props = BasicProperties::default()
        .with_message_id(env.msg_id().into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(env.to_field_table());
    (to, bytes, props)
}

/// One heartbeat round of a simulated host: the messages to publish; `cert` (MEM-2) in its
/// `_gateway` presence when it has one.
pub(crate) fn round(key: &HostKey, gids: &[String], form: Form, heartbeat_ms: u64, cert: Option<&str>) -> Round {
    let ttl = 3 * heartbeat_ms;
    let entity = |gid: &str| json!({"gid": gid, "state": "up", "role": "worker", "groups": [], "agentStatus": "idle"});
    let mut gateway = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl, "profiles": [],
    });
    if let Some(c) = cert {
        gateway["cert"] = json!(c);
    }
    match form {
        Form::Batched => {
            gateway["capabilities"] = json!(["presence-batch"]);
            gateway["entities"] = Value::Array(gids.iter().map(|g| entity(g)).collect());
            vec![presence(key, "_gateway", &gateway, ttl)]
        }
        Form::PerEntity => {
            let mut out: Vec<_> = gids
                .iter()
                .map(|g| {
                    let body =
                        json!({"state": "up", "role": "worker", "groups": [], "agentStatus": "idle", "ttlMs": ttl});
                    presence(key, g, &body, ttl)
                })
                .collect();
            out.push(presence(key, "_gateway", &gateway, ttl));
            out
        }
    }
}

impl SimHost {
    /// Declares, binds and consumes `roster.<host>` (TOP-3) and starts heartbeating at a random
    /// phase of H (`first_now`: the first round at once, for the newcomer).
    pub(crate) async fn start(
        conn: &Connection,
        key: HostKey,
        beat: &Beat,
        first_now: bool,
        verifying: bool,
    ) -> anyhow::Result<SimHost> {
        let Beat {
            entities,
            form,
            heartbeat_ms,
            peers,
            counters,
            certs,
        } = beat.clone();
        let ch = conn.create_channel().await?;
        ch.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
        let q = format!("roster.{}", key.host);
        let mut args = FieldTable::default();
        args.insert("x-dead-letter-exchange".into(), long("bridge.dlx"));
        let opts = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(q.as_str().into(), opts, args).await?;
        ch.queue_bind(
            q.as_str().into(),
            "bridge.roster".into(),
            "roster.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
        let mut consumer = ch
            .basic_consume(
                q.as_str().into(),
                format!("sim-{}", key.host).as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let c = Arc::clone(&counters);
        let receiving = tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(Ok(d)) = consumer.next().await {
                c.received.fetch_add(1, Ordering::Relaxed);
                if verifying {
                    let ok = verify(&peers, d.routing_key.as_str(), d.properties.headers().as_ref(), &d.data);
                    c.verified.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        c.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                n += 1;
                if n.is_multiple_of(ACK_EVERY) {
                    let _ = d.acker.ack(BasicAckOptions { multiple: true }).await;
                }
            }
        });
        let gids: Vec<String> = (0..entities).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let (pch, pkey, pgids) = (ch.clone(), key.clone(), gids.clone());
        let heartbeating = tokio::spawn(async move {
            let h = Duration::from_millis(heartbeat_ms.max(1));
            let phase = if first_now {
                Duration::ZERO
            } else {
                Duration::from_millis((uuid::Uuid::new_v4().as_u128() % u128::from(heartbeat_ms.max(1))) as u64)
            };
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + phase, h);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let cert = certs.as_ref().and_then(|c| c.get(&pkey.host)).map(String::as_str);
            loop {
                tick.tick().await;
                for (to, body, props) in round(&pkey, &pgids, form, heartbeat_ms, cert) {
                    let published = pch
                        .basic_publish(
                            "bridge.roster".into(),
                            to.as_str().into(),
                            BasicPublishOptions::default(),
                            &body,
                            props,
                        )
                        .await;
                    if published.is_err() {
                        return;
                    }
                    counters.published.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(SimHost {
            key,
            gids,
            channel: ch,
            tasks: vec![receiving, heartbeating],
        })
    }

    pub(crate) async fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        // Closing the shared connection closes the channel (one by one, a broker in a memory
        // alarm could keep each waiting).
        drop(self.channel);
        let _ = (self.key, self.gids);
    }
}

/// How long a run waits for both real gateways to list a new host, ms.
pub fn listing_wait_ms(heartbeat_ms: u64) -> f64 {
    (4 * heartbeat_ms + 10_000) as f64
}

/// Whether `gateway`'s roster lists `host`'s `_gateway` entry.
pub(crate) async fn listed(fleet: &Fleet, gateway: &str, host: &str) -> bool {
    let Ok(g) = fleet.host(gateway) else {
        return false;
    };
    let got = tokio::time::timeout(Duration::from_secs(5), g.gateway.get("/v1/roster")).await;
    match got.unwrap_or(Ok((0, Value::Null))) {
        Ok((200, r)) => r["entries"]
            .as_array()
            .is_some_and(|es| es.iter().any(|e| e["host"] == host && e["gid"] == "_gateway")),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_simulated_host_publishes_its_peers_verify() {
        let key = HostKey::generate("sim-0");
        let vk = VerifyingKey::from_bytes(
            &<[u8; 32]>::try_from(B64.decode(key.public_base64()).expect("b64")).expect("32 bytes"),
        )
        .expect("key");
        let peers = HashMap::from([("sim-0".to_string(), vk)]);
        let gids: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let batch = round(&key, &gids, Form::Batched, 5_000, None);
        assert_eq!(batch.len(), 1);
        let (to, body, props) = &batch[0];
        assert_eq!(to, "roster.sim-0._gateway");
        assert!(verify(&peers, to, props.headers().as_ref(), body));
        let v: Value = serde_json::from_slice(body).expect("json");
        assert_eq!(v["entities"].as_array().map(Vec::len), Some(3));
        assert_eq!(v["capabilities"], json!(["presence-batch"]));
        assert!(
            !verify(&peers, "roster.sim-0.x", props.headers().as_ref(), body),
            "to ≠ key"
        );
        let mut tampered = body.clone();
        tampered.push(b' ');
        assert!(!verify(&peers, to, props.headers().as_ref(), &tampered));
        let each = round(&key, &gids, Form::PerEntity, 5_000, None);
        assert_eq!(each.len(), 4, "one per entity and the _gateway one");
        assert!(
            each.iter()
                .all(|(to, body, props)| verify(&peers, to, props.headers().as_ref(), body))
        );
        assert!(
            !verify(&HashMap::new(), to, props.headers().as_ref(), body),
            "unknown host"
        );
        assert!(v.get("cert").is_none(), "no certificate without one");
        // With a certificate (MEM-2): in the `_gateway` presence only, whatever the form.
        for form in [Form::Batched, Form::PerEntity] {
            let with = round(
                &key,
                &gids,
                form,
                5_000,
                Some("ssh-ed25519-cert-v01@openssh.com AAAA x"),
            );
            for (to, body, props) in &with {
                assert!(verify(&peers, to, props.headers().as_ref(), body));
                let v: Value = serde_json::from_slice(body).expect("json");
                let cert = v.get("cert").and_then(Value::as_str);
                match to.as_str() {
                    "roster.sim-0._gateway" => assert_eq!(cert, Some("ssh-ed25519-cert-v01@openssh.com AAAA x")),
                    _ => assert_eq!(cert, None, "{to}"),
                }
            }
        }
    }
}
