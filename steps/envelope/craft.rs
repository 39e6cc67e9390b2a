//! Crafting the catalogue's messages: each row of `features/envelope.feature` names one hostile
//! message, built here with the suite's own envelope code as an otherwise valid, signed message
//! carrying exactly that one defect — for an entity's inbox, every gateway's roster queue, or a
//! host's control queue — plus the valid SEND the other steps send from a fake entity.

use std::time::Duration;

use anyhow::{anyhow, bail};
use fleet_conformance::envelope::{Envelope, new_uuid, now_ms};
use fleet_conformance::herdr::AgentStatus;
use fleet_conformance::names::inbox;
use fleet_conformance::probe::{Captured, Crafted, presence_message};
use lapin::types::{AMQPValue, FieldTable, LongString};
use serde_json::json;

use crate::world::FleetWorld;

use super::{count_id, fake_gid, key, poll_until, tap, until_listed};

/// A signed, valid SEND from the fake entity `from` (on host "probe") to `to_gid`.
pub(super) fn valid_send(w: &FleetWorld, from: &str, to_gid: &str, text: &str) -> anyhow::Result<(Envelope, Vec<u8>)> {
    let body = text.as_bytes().to_vec();
    let env = Envelope::new("SEND", &fake_gid(w, from)?, to_gid, "probe").signed_by(&key(w, "probe")?, &body);
    Ok((env, body))
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s.to_string()))
}

/// A message with the marker as its AMQP message_id, whatever its headers say.
fn marked(mut c: Crafted, marker: &str) -> Crafted {
    c.properties = c.properties.with_message_id(marker.into());
    c
}

/// What one catalogue row publishes (after any preparation it needs).
pub(super) struct Planned {
    pub(super) msg: Crafted,
    pub(super) marker: String,
    pub(super) text: String,
}

/// Builds the hostile message a catalogue row names, aimed at an entity's inbox. Each row plants
/// exactly one defect into an otherwise valid, signed SEND from fake entity "p1" on host "probe".
pub(super) async fn craft_for_inbox(w: &mut FleetWorld, row: &str, to_gid: &str) -> anyhow::Result<Planned> {
    let probe_key = key(w, "probe")?;
    let p1 = fake_gid(w, "p1")?;
    let mut env = Envelope::new("SEND", &p1, to_gid, "probe");
    let marker = env.msg_id().to_string();
    let mut body = format!("hostile message {marker}").into_bytes();
    let mut exchange = "bridge.msg".to_string();
    let mut routing_key = to_gid.to_string();
    // Header edits applied after signing, with any AMQP type.
    let mut after: Vec<(&str, Option<AMQPValue>)> = Vec::new();
    let mut sign_with = probe_key.clone();
    let mut body_after: Option<Vec<u8>> = None;

    if let Some(h) = row.strip_prefix("a SEND without ") {
        after.push((header_name(h), None));
    } else {
        match row {
            "an ASK without turnId" => {
                env.set("kind", "ASK");
            }
            "a FAILED without corrId" => {
                env.set("kind", "FAILED");
                body = br#"{"reason":"busy","detail":"no corrId"}"#.to_vec();
            }
            "a SEND of kind GOSSIP" => {
                env.set("kind", "GOSSIP");
            }
            "a SEND with v 2" => {
                env.set("v", "2");
            }
            "a SEND whose msgId is not a UUID" => {
                env.set("msgId", "not-a-uuid");
            }
            "a SEND whose traceId is uppercase" => {
                let t = new_uuid().to_uppercase();
                env.set("traceId", &t);
            }
            "a SEND whose ts is not a number" => {
                env.set("ts", "17x");
            }
            "a SEND whose ts gained a leading zero after signing" => {
                // The same number, other bytes: accepting it would mean the signature does not
                // cover the header bytes as sent (found by scripts/fuzz).
                let padded = format!("0{}", env.value("ts"));
                after.push(("ts", Some(long(&padded))));
            }
            "a SEND whose expiresAt is negative" => {
                env.set("expiresAt", "-5");
            }
            "a SEND whose from holds a newline" => {
                env.set("from", &format!("{p1}\nx"));
            }
            "a SEND whose ts is a 64-bit integer" => {
                after.push(("ts", Some(AMQPValue::LongLongInt(now_ms() as i64))));
            }
            "a SEND whose msgId is a table" => {
                let mut t = FieldTable::default();
                t.insert("id".into(), long(&marker));
                after.push(("msgId", Some(AMQPValue::FieldTable(t))));
            }
            "a SEND whose v is a boolean" => {
                after.push(("v", Some(AMQPValue::Boolean(true))));
            }
            "a SEND signed by the untrusted host mallory" => {
                sign_with = key(w, "mallory")?;
            }
            "a SEND from lead forged under host a" => {
                // SIG-6: a forger dresses a message up as lead's; rejecting it must never make a
                // gateway write to lead (no FAILED).
                env.set("from", &w.gid("lead")?);
                let mut forged = key(w, "mallory")?;
                forged.host = "a".into();
                sign_with = forged;
            }
            "a FAILED forged to lead about another message" => {
                env.set("kind", "FAILED")
                    .set("from", &w.gid("w1")?)
                    .set("corrId", &new_uuid());
                body = br#"{"reason":"busy","detail":"forged"}"#.to_vec();
                let mut forged = key(w, "mallory")?;
                forged.host = "b".into();
                sign_with = forged;
            }
            "a SEND whose body changed after signing" => {
                let mut b = body.clone();
                b.extend_from_slice(b" (changed)");
                body_after = Some(b);
            }
            "a SEND whose traceId changed after signing" => {
                after.push(("traceId", Some(long(&new_uuid()))));
            }
            "a SEND whose sig is not base64" => {
                after.push(("sig", Some(long("not base64 at all!"))));
            }
            "a SEND carrying the sig of another message" => {
                let other = Envelope::new("SEND", &p1, to_gid, "probe").signed_by(&probe_key, &body);
                after.push(("sig", Some(long(other.value("sig")))));
            }
            "a SEND from a gid that does not live on host probe" => {
                env.set("from", &new_uuid());
            }
            "a SEND from p1 signed by host c" => {
                sign_with = key(w, "c")?;
            }
            "a SEND whose to is not its routing key" => {
                env.set("to", &new_uuid());
            }
            "a SEND through the default exchange straight into the inbox" => {
                exchange = String::new();
                routing_key = inbox(to_gid);
                env.set("to", &routing_key);
            }
            "a SEND through a rogue binding" => {
                let rogue = format!("rogue-{}", new_uuid());
                w.probe().await?.bind(&inbox(to_gid), "bridge.msg", &rogue).await?;
                routing_key = rogue.clone();
                env.set("to", &rogue);
            }
            "a BROADCAST to a group it is not in, through a rogue binding" => {
                // SIG-4: the broker binds `broadcast.<g>` only to members' inboxes, so a copy in a
                // non-member's inbox came by a binding nobody should have made; the owner's
                // gateway must judge membership itself, not trust the route.
                let group = format!("outsiders-{}", &new_uuid()[..8]);
                let key = format!("broadcast.{group}");
                w.probe().await?.bind(&inbox(to_gid), "bridge.msg", &key).await?;
                env.set("kind", "BROADCAST").set("to", &key);
                routing_key = key;
            }
            "a SEND to broadcast.all" => {
                routing_key = "broadcast.all".into();
                env.set("to", "broadcast.all");
            }
            "a SPAWN into an inbox" => {
                env.set("kind", "SPAWN").set("spawnId", &new_uuid());
                body = json!({"profile": "claude", "brief": marker, "groups": [], "parent": p1})
                    .to_string()
                    .into_bytes();
            }
            "a PRESENCE into an inbox" => {
                env.set("kind", "PRESENCE");
                body = json!({"state": "up", "role": "worker", "groups": [], "agentStatus": "idle",
                    "ttlMs": 60000, "note": marker})
                .to_string()
                .into_bytes();
            }
            "an expired SEND" => {
                let now = now_ms();
                env.set("ts", &(now - 7_200_000).to_string())
                    .set("expiresAt", &(now - 3_600_000).to_string());
            }
            "a SEND stamped 10 minutes ahead" => {
                let ts = now_ms() + 600_000;
                env.set("ts", &ts.to_string())
                    .set("expiresAt", &(ts + 86_400_000).to_string());
            }
            "a SEND over the body limit" => {
                let limit: usize = w
                    .gateway_env
                    .get("FLEET_MAX_BODY_BYTES")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1_048_576);
                body.resize(limit + 1024, b'x');
            }
            "a replay of a drained SEND" => {
                return replay_of_drained(w, to_gid, 0).await;
            }
            "a replay of a SEND drained 20 messages ago" => {
                return replay_of_drained(w, to_gid, 20).await;
            }
            "a replay of an injected SEND" => {
                return replay_of_injected(w, to_gid).await;
            }
            other => bail!("no catalogue row {other:?} for an inbox"),
        }
    }

    env.set("host", &sign_with.host);
    env.sign(&sign_with, &body);
    let sent_body = body_after.unwrap_or(body);
    let mut msg = Crafted::from_envelope(&exchange, &routing_key, &env, &sent_body);
    for (name, value) in after {
        match value {
            Some(v) => msg.set_header(name, v),
            None => msg.remove_header(name),
        };
    }
    Ok(Planned {
        msg: marked(msg, &marker),
        marker,
        text: String::from_utf8_lossy(&sent_body).into_owned(),
    })
}

/// Header names come from the feature text; the catalogue only names real headers.
fn header_name(h: &str) -> &'static str {
    match h {
        "v" => "v",
        "kind" => "kind",
        "msgId" => "msgId",
        "traceId" => "traceId",
        "from" => "from",
        "to" => "to",
        "host" => "host",
        "ts" => "ts",
        "expiresAt" => "expiresAt",
        "sig" => "sig",
        _ => "unknown-header",
    }
}

/// SIG-3 / FWD-6 replay: a valid SEND is injected into the worker and reported INJECTED; the
/// worker is idle again; then the very same message is published again.
async fn replay_of_injected(w: &mut FleetWorld, to_gid: &str) -> anyhow::Result<Planned> {
    let worker = entity_named_by_gid(w, to_gid)?;
    let text = format!("injected once {}", new_uuid());
    let (env, body) = valid_send(w, "p1", to_gid, &text)?;
    let msg = Crafted::from_envelope("bridge.msg", to_gid, &env, &body);
    w.probe().await?.publish(&msg).await?;
    w.wire.valid_texts.push(text.clone());
    let id = env.msg_id().to_string();
    // The INJECTED closes the original's forward path (FWD-7 confirm included).
    tap(&w.wire.msgs, "bridge.msg")?
        .wait_for(
            &format!("an INJECTED for {id}"),
            Duration::from_secs(10),
            |c: &Captured| {
                c.header_str("kind").as_deref() == Some("INJECTED")
                    && c.header_str("corrId").as_deref() == Some(id.as_str())
            },
        )
        .await?;
    let e = w.entity(&worker)?;
    w.host(&e.host)?.herdr.set_status(&e.pane, AgentStatus::Idle);
    Ok(Planned { marker: id, msg, text })
}

/// SIG-3 replay: a valid SEND is delivered to the main and drained, then `later` other valid
/// messages are delivered and drained; then the very same first message is published again.
///
/// Why `later`: SIG-3 keeps a msgId in the seen-set until its `expiresAt` (24 h here), however
/// many messages come after it. A replay right after the original passes a seen-set that only
/// remembers the last few msgIds; one replayed 20 messages later does not.
async fn replay_of_drained(w: &mut FleetWorld, to_gid: &str, later: usize) -> anyhow::Result<Planned> {
    let main = entity_named_by_gid(w, to_gid)?;
    let text = format!("drained once {}", new_uuid());
    let (env, body) = valid_send(w, "p1", to_gid, &text)?;
    let msg = Crafted::from_envelope("bridge.msg", to_gid, &env, &body);
    w.probe().await?.publish(&msg).await?;
    let id = env.msg_id().to_string();
    poll_until(w, &main, |m| m["msgId"] == json!(id)).await?;
    let mut after = Vec::with_capacity(later);
    for i in 0..later {
        let (e, b) = valid_send(w, "p1", to_gid, &format!("message {i} after {id}"))?;
        w.probe()
            .await?
            .publish(&Crafted::from_envelope("bridge.msg", to_gid, &e, &b))
            .await?;
        after.push(e.msg_id().to_string());
    }
    for later_id in &after {
        if count_id(&w.wire.drained, later_id) == 0 {
            poll_until(w, &main, |m| m["msgId"] == json!(later_id)).await?;
        }
    }
    w.wire.replayed.push(id);
    Ok(Planned {
        marker: env.msg_id().to_string(),
        msg,
        text,
    })
}

fn entity_named_by_gid(w: &FleetWorld, gid: &str) -> anyhow::Result<String> {
    w.entities
        .iter()
        .find(|(_, e)| e.gid == gid)
        .map(|(n, _)| n.clone())
        .ok_or_else(|| anyhow!("no entity with gid {gid}"))
}

/// Builds a forged SPAWN or STOP for `host`'s control queue: signed by the untrusted key, or
/// from an entity that no signed presence puts on host "probe". A gateway that acted on one would
/// launch an agent (SPAWN, or report FAILED `unknown_profile`) or close a worker's pane (STOP).
pub(super) fn craft_for_control(w: &FleetWorld, row: &str, host: &str) -> anyhow::Result<Planned> {
    let p1 = fake_gid(w, "p1")?;
    let (kind, rest) = if let Some(r) = row.strip_prefix("a SPAWN ") {
        ("SPAWN", r)
    } else if let Some(r) = row.strip_prefix("a STOP for w1 ") {
        ("STOP", r)
    } else {
        bail!("unknown control catalogue row {row:?}")
    };
    let (from, signer) = match rest {
        "signed by the untrusted host mallory" => (p1.clone(), key(w, "mallory")?),
        "from an entity not present on its host" => (new_uuid(), key(w, "probe")?),
        _ => bail!("unknown control catalogue row {row:?}"),
    };
    let mut env = Envelope::new(kind, &from, host, "probe");
    let marker = env.msg_id().to_string();
    let body = if kind == "SPAWN" {
        env.set("spawnId", &new_uuid());
        json!({"profile": "claude", "brief": marker, "groups": [], "parent": p1})
    } else {
        json!({"gid": w.gid("w1")?})
    }
    .to_string()
    .into_bytes();
    let env = env.signed_by(&signer, &body);
    let msg = Crafted::from_envelope("bridge.control", host, &env, &body);
    Ok(Planned {
        marker: marker.clone(),
        msg: marked(msg, &marker),
        text: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Builds the hostile presence a catalogue row names (for every gateway's roster queue).
pub(super) async fn craft_for_roster(w: &mut FleetWorld, row: &str) -> anyhow::Result<Planned> {
    let probe_key = key(w, "probe")?;
    let body = |gid: &str| {
        json!({"state": "up", "role": "worker", "groups": [], "agentStatus": "idle", "ttlMs": 60000, "note": gid})
            .to_string()
            .into_bytes()
    };
    if let Some(h) = row.strip_prefix("a PRESENCE without ") {
        let gid = new_uuid();
        let b = body(&gid);
        let (mut m, e) = presence_message(&probe_key, &gid, &b, 60_000);
        m.remove_header(header_name(h));
        return Ok(Planned {
            marker: e.msg_id().to_string(),
            msg: marked(m, e.msg_id()),
            text: String::from_utf8_lossy(&b).into_owned(),
        });
    }
    let (msg, env, text) = match row {
        "a PRESENCE claiming w1 for host probe" => {
            // PRS-3: w1 lives on b; a second host's claim is refused.
            let w1 = w.gid("w1")?;
            let b = body(&w1);
            let (m, e) = presence_message(&probe_key, &w1, &b, 60_000);
            (m, e, b)
        }
        "a PRESENCE whose from differs from its routing key" => {
            let gid = new_uuid();
            let b = body(&gid);
            let key_gid = new_uuid();
            let routing = format!("roster.probe.{key_gid}");
            let mut e = Envelope::new("PRESENCE", &gid, &routing, "probe");
            let ts: u64 = e.value("ts").parse().unwrap_or_else(|_| now_ms());
            e.set("expiresAt", &(ts + 60_000).to_string());
            let e = e.signed_by(&probe_key, &b);
            (Crafted::from_envelope("bridge.roster", &routing, &e, &b), e, b)
        }
        "a _gateway PRESENCE signed by the untrusted host mallory" => {
            // A host's own `_gateway` presence: SPEC [C-21] 7 lets an entity's presence from a
            // host with no key wait for this one (and be dropped without a dead letter), so the
            // unknown signer is judged on the presence that is never held.
            let gid = "_gateway";
            let b = body(gid);
            let (m, e) = presence_message(&key(w, "mallory")?, gid, &b, 60_000);
            (m, e, b)
        }
        "a replayed PRESENCE" => {
            // SIG-3: the first copy is accepted (the entity shows up), the second is a replay.
            let gid = new_uuid();
            let b = body(&gid);
            let (m, e) = presence_message(&probe_key, &gid, &b, 60_000);
            w.probe().await?.publish(&m).await?;
            until_listed(w, &gid, "probe").await?;
            (m, e, b)
        }
        other => bail!("no catalogue row {other:?} for the roster"),
    };
    Ok(Planned {
        marker: env.msg_id().to_string(),
        msg: marked(msg, env.msg_id()),
        text: String::from_utf8_lossy(&text).into_owned(),
    })
}
