//! Steps of the envelope-security catalogue (SPEC §2–3): the wire probe crafts hostile messages
//! and the suite checks that every gateway rejects them the SIG-5 way — dead-lettered with
//! `x-death` reason `rejected`, the failed check logged, nothing injected, held or reported as
//! FAILED, and the gateway still serving — and that what gateways publish is complete and signed.
//!
//! The probe holds the trusted host "probe"'s key (pinned in every gateway's peers file) and an
//! untrusted key ("mallory"). It announces fake entities on host "probe" with signed presence, so
//! a crafted message carries exactly the one defect its catalogue row names. Messages are built
//! with the suite's own envelope code (`fleet_conformance::envelope`), never the gateway's.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::envelope::{Envelope, new_uuid, now_ms};
use fleet_conformance::herdr::AgentStatus;
use fleet_conformance::keys::HostKey;
use fleet_conformance::names::inbox;
use fleet_conformance::probe::{Captured, Crafted, Probe, Tap, presence_message};
use fleet_conformance::timing::wait_for;
use lapin::types::{AMQPValue, FieldTable, LongString};
use serde_json::{Value, json};

use crate::world::FleetWorld;

/// How long a fake entity's presence lives: the whole scenario.
const FAKE_TTL: Duration = Duration::from_secs(600);

/// The probe's part of a scenario world.
#[derive(Default)]
pub struct WireState {
    probe: Option<Arc<Probe>>,
    /// Copies of every dead letter (`bridge.dlx` is a fanout).
    dlx: Option<Arc<Tap>>,
    /// Copies of everything published on `bridge.msg` (key `#`).
    msgs: Option<Arc<Tap>>,
    /// Copies of everything published on `bridge.roster` (key `roster.#`).
    roster: Option<Arc<Tap>>,
    /// Copies of SPAWN and STOP on `bridge.control` for the hosts running when the probe started
    /// (a direct exchange: one binding per host; hosts without a gateway stay unroutable).
    control: Option<Arc<Tap>>,
    /// The untrusted key.
    mallory: Option<HostKey>,
    /// Fake entities on host "probe": name → gid.
    fakes: BTreeMap<String, String>,
    /// The last hostile message: its AMQP message_id (our marker) and where it went.
    hostile: Option<Hostile>,
    /// Bodies and msgIds of every hostile message of the scenario.
    hostile_texts: Vec<String>,
    hostile_ids: Vec<String>,
    /// Bodies of valid messages the probe sent (allowed to be injected or held).
    valid_texts: Vec<String>,
    /// The last valid message the probe sent.
    last_valid: Option<Envelope>,
    /// Everything drained from mains by these steps.
    drained: Vec<Value>,
    /// msgIds that were delivered once as valid messages before being replayed.
    replayed: Vec<String>,
    /// msgIds the probe published twice in a row (each must be drained exactly once).
    copies: Vec<String>,
}

struct Hostile {
    marker: String,
}

fn probe(w: &FleetWorld) -> anyhow::Result<Arc<Probe>> {
    w.wire
        .probe
        .clone()
        .ok_or_else(|| anyhow!("the probe is not connected: add \"Given the probe watches the wire\""))
}

fn tap(t: &Option<Arc<Tap>>, what: &str) -> anyhow::Result<Arc<Tap>> {
    t.clone().ok_or_else(|| anyhow!("the probe has no {what} tap"))
}

fn fake_gid(w: &FleetWorld, name: &str) -> anyhow::Result<String> {
    w.wire
        .fakes
        .get(name)
        .cloned()
        .ok_or_else(|| anyhow!("no fake entity {name:?} announced by the probe"))
}

fn key(w: &FleetWorld, host: &str) -> anyhow::Result<HostKey> {
    if host == "mallory" {
        return w.wire.mallory.clone().ok_or_else(|| anyhow!("no untrusted key"));
    }
    w.keys
        .get(host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host:?}"))
}

/// A target of the catalogue: an entity's inbox, every gateway's roster queue, or one host's
/// control queue (SPAWN and STOP, SPEC §9).
enum Target {
    Inbox { name: String, gid: String, host: String },
    Roster,
    Control { host: String },
}

fn target(w: &FleetWorld, name: &str) -> anyhow::Result<Target> {
    if name == "the roster" {
        return Ok(Target::Roster);
    }
    if let Some(host) = name.strip_prefix("the control queue of ") {
        w.host(host)?;
        return Ok(Target::Control { host: host.to_string() });
    }
    let e = w.entity(name)?;
    Ok(Target::Inbox {
        name: name.to_string(),
        gid: e.gid.clone(),
        host: e.host.clone(),
    })
}

impl Target {
    /// (host, queue) pairs whose gateway must reject the message.
    fn rejecting(&self, w: &FleetWorld) -> Vec<(String, String)> {
        match self {
            Target::Inbox { gid, host, .. } => vec![(host.clone(), inbox(gid))],
            Target::Roster => w.hosts.keys().map(|h| (h.clone(), format!("roster.{h}"))).collect(),
            Target::Control { host } => vec![(host.clone(), format!("control.{host}"))],
        }
    }
}

// ---- Setting the stage ----

#[given(expr = "the gateways' body limit is {int} bytes")]
async fn body_limit(w: &mut FleetWorld, bytes: u64) {
    w.gateway_env.insert("FLEET_MAX_BODY_BYTES".into(), bytes.to_string());
}

#[given("the probe watches the wire")]
async fn probe_watches(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let p = Probe::connect(&suite.broker.amqp_url(&vhost)).await?;
    w.wire.dlx = Some(Arc::new(p.watch_dead_letters().await.context("tapping bridge.dlx")?));
    w.wire.msgs = Some(Arc::new(p.tap("bridge.msg", "#").await.context("tapping bridge.msg")?));
    w.wire.roster = Some(Arc::new(
        p.tap("bridge.roster", "roster.#")
            .await
            .context("tapping bridge.roster")?,
    ));
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    if !hosts.is_empty() {
        w.wire.control = Some(Arc::new(
            p.tap_keys("bridge.control", &hosts)
                .await
                .context("tapping bridge.control")?,
        ));
    }
    w.wire.probe = Some(Arc::new(p));
    w.wire.mallory = Some(HostKey::generate("mallory"));
    Ok(())
}

/// Waits until every running gateway's roster (`GET /v1/roster`) lists `gid` on `host`.
async fn until_listed(w: &FleetWorld, gid: &str, host: &str) -> anyhow::Result<()> {
    for (name, h) in &w.hosts {
        let gw = &h.gateway;
        wait_for(
            &format!("the roster of {name} to list {gid} on {host}"),
            Duration::from_secs(10),
            || async move {
                let (status, v) = gw.get("/v1/roster").await.map_err(|e| e.to_string())?;
                let listed = fleet_conformance::contract::roster_entries("GET /v1/roster", &v)
                    .map_err(|e| format!("status {status}: {e}"))?
                    .iter()
                    .any(|e| e["gid"] == json!(gid) && e["host"] == json!(host));
                if listed {
                    Ok(Some(()))
                } else {
                    Err(format!("/v1/roster answered {status}: {v}"))
                }
            },
        )
        .await?;
    }
    Ok(())
}

#[given(expr = "the probe announces {string} on host {string}")]
async fn announces(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = new_uuid();
    let k = key(w, &host)?;
    probe(w)?.announce(&k, &gid, "worker", FAKE_TTL).await?;
    until_listed(w, &gid, &host).await?;
    w.wire.fakes.insert(name, gid);
    Ok(())
}

// ---- Crafting ----

/// A signed, valid SEND from the fake entity `from` (on host "probe") to `to_gid`.
fn valid_send(w: &FleetWorld, from: &str, to_gid: &str, text: &str) -> anyhow::Result<(Envelope, Vec<u8>)> {
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
struct Planned {
    msg: Crafted,
    marker: String,
    text: String,
}

/// Builds the hostile message a catalogue row names, aimed at an entity's inbox. Each row plants
/// exactly one defect into an otherwise valid, signed SEND from fake entity "p1" on host "probe".
async fn craft_for_inbox(w: &mut FleetWorld, row: &str, to_gid: &str) -> anyhow::Result<Planned> {
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
                probe(w)?.bind(&inbox(to_gid), "bridge.msg", &rogue).await?;
                routing_key = rogue.clone();
                env.set("to", &rogue);
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
                return replay_of_drained(w, to_gid).await;
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

/// SIG-3 replay: a valid SEND is delivered to the main and drained; then the very same message is
/// published again.
/// SIG-3 / FWD-6 replay: a valid SEND is injected into the worker and reported INJECTED; the
/// worker is idle again; then the very same message is published again.
async fn replay_of_injected(w: &mut FleetWorld, to_gid: &str) -> anyhow::Result<Planned> {
    let worker = entity_named_by_gid(w, to_gid)?;
    let text = format!("injected once {}", new_uuid());
    let (env, body) = valid_send(w, "p1", to_gid, &text)?;
    let msg = Crafted::from_envelope("bridge.msg", to_gid, &env, &body);
    probe(w)?.publish(&msg).await?;
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

async fn replay_of_drained(w: &mut FleetWorld, to_gid: &str) -> anyhow::Result<Planned> {
    let main = entity_named_by_gid(w, to_gid)?;
    let text = format!("drained once {}", new_uuid());
    let (env, body) = valid_send(w, "p1", to_gid, &text)?;
    let msg = Crafted::from_envelope("bridge.msg", to_gid, &env, &body);
    probe(w)?.publish(&msg).await?;
    let id = env.msg_id().to_string();
    poll_until(w, &main, |m| m["msgId"] == json!(id)).await?;
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

/// Polls the main until a drained message matches; returns it. Drained messages are recorded.
async fn poll_until(w: &mut FleetWorld, main: &str, pred: impl Fn(&Value) -> bool) -> anyhow::Result<Value> {
    let handle = w.mcp(main).await?.handle();
    let drained = std::sync::Mutex::new(Vec::new());
    let found = wait_for(&format!("{main} to drain the message"), Duration::from_secs(10), || {
        let handle = handle.clone();
        let drained = &drained;
        let pred = &pred;
        async move {
            let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
            let msgs: Vec<Value> = fleet_conformance::contract::poll_messages(&v).map_err(|e| e.to_string())?;
            let hit = msgs.iter().find(|m| pred(m)).cloned();
            if let Ok(mut d) = drained.lock() {
                d.extend(msgs);
            }
            match hit {
                Some(m) => Ok(Some(m)),
                None => Err("not drained yet".to_string()),
            }
        }
    })
    .await;
    w.wire.drained.extend(drained.into_inner().unwrap_or_default());
    Ok(found?)
}

/// Builds a forged SPAWN or STOP for `host`'s control queue: signed by the untrusted key, or
/// from an entity that no signed presence puts on host "probe". A gateway that acted on one would
/// launch an agent (SPAWN, or report FAILED `unknown_profile`) or close a worker's pane (STOP).
fn craft_for_control(w: &FleetWorld, row: &str, host: &str) -> anyhow::Result<Planned> {
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

#[then(expr = "herdr on {string} opened no pane and closed none")]
async fn panes_untouched(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let herdr = &w.host(&host)?.herdr;
    let panes: Vec<(String, String)> = w
        .entities
        .iter()
        .filter(|(_, e)| e.host == host)
        .map(|(n, e)| (n.clone(), e.pane.clone()))
        .collect();
    let before = herdr.created_panes().len();
    fleet_conformance::timing::hold_for(
        &format!("no pane opened or closed on {host}"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let now = herdr.created_panes().len();
            let closed: Vec<&String> = panes
                .iter()
                .filter(|(_, p)| !herdr.pane_exists(p))
                .map(|(n, _)| n)
                .collect();
            async move {
                if now != before {
                    Err(format!("{} pane(s) opened", now - before))
                } else if !closed.is_empty() {
                    Err(format!("the pane(s) of {closed:?} closed"))
                } else {
                    Ok(())
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// Builds the hostile presence a catalogue row names (for every gateway's roster queue).
async fn craft_for_roster(w: &mut FleetWorld, row: &str) -> anyhow::Result<Planned> {
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
        "a PRESENCE signed by the untrusted host mallory" => {
            let gid = new_uuid();
            let b = body(&gid);
            let (m, e) = presence_message(&key(w, "mallory")?, &gid, &b, 60_000);
            (m, e, b)
        }
        "a replayed PRESENCE" => {
            // SIG-3: the first copy is accepted (the entity shows up), the second is a replay.
            let gid = new_uuid();
            let b = body(&gid);
            let (m, e) = presence_message(&probe_key, &gid, &b, 60_000);
            probe(w)?.publish(&m).await?;
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

// ---- The catalogue steps ----

#[when(expr = "the probe publishes {string} to {string}")]
async fn publishes_hostile(w: &mut FleetWorld, row: String, to: String) -> anyhow::Result<()> {
    let planned = match target(w, &to)? {
        Target::Inbox { gid, .. } => craft_for_inbox(w, &row, &gid).await?,
        Target::Roster => craft_for_roster(w, &row).await?,
        Target::Control { host } => craft_for_control(w, &row, &host)?,
    };
    let p = probe(w)?;
    p.publish(&planned.msg)
        .await
        .with_context(|| format!("publishing {row:?}"))?;
    w.wire.hostile_texts.push(planned.text);
    w.wire.hostile_ids.push(planned.marker.clone());
    w.wire.hostile = Some(Hostile { marker: planned.marker });
    Ok(())
}

fn last_hostile(w: &FleetWorld) -> anyhow::Result<&Hostile> {
    w.wire
        .hostile
        .as_ref()
        .ok_or_else(|| anyhow!("the probe has published no hostile message"))
}

#[then(expr = "the gateway of {string} dead-letters it with x-death reason {string}")]
async fn dead_lettered(w: &mut FleetWorld, to: String, reason: String) -> anyhow::Result<()> {
    let marker = last_hostile(w)?.marker.clone();
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    for (host, queue) in target(w, &to)?.rejecting(w) {
        let m = dlx
            .wait_for(
                &format!("a dead letter of {marker} from {queue} (gateway {host})"),
                Duration::from_secs(10),
                |c: &Captured| {
                    c.message_id().as_deref() == Some(marker.as_str())
                        && c.death_queue().as_deref() == Some(queue.as_str())
                },
            )
            .await?;
        ensure!(
            m.death_reason().as_deref() == Some(reason.as_str()),
            "the dead letter from {queue} has x-death reason {:?}, expected {reason:?}",
            m.death_reason()
        );
    }
    Ok(())
}

#[then(expr = "the gateway of {string} logs the rejection naming the check {string}")]
async fn logs_check(w: &mut FleetWorld, to: String, check: String) -> anyhow::Result<()> {
    let marker = last_hostile(w)?.marker.clone();
    // "a or b": the message fails several checks whose order SPEC leaves open (SIG-2 orders its
    // own three; SIG-4's ownership and ENV-2's kind checks have no place in that order), so any
    // of them may be the one named (docs/CONTRACT.md, "Rejection log line").
    let names: Vec<String> = check.split(" or ").map(|c| c.trim().to_string()).collect();
    for (host, _) in target(w, &to)?.rejecting(w) {
        let gw = &w.host(&host)?.gateway;
        let marker = marker.as_str();
        let names = &names;
        wait_for(
            &format!("gateway {host} to log the rejection of {marker} naming {check:?}"),
            Duration::from_secs(5),
            || async move {
                let log = gw.log();
                let lines: Vec<&str> = log.lines().filter(|l| l.contains(marker)).collect();
                if lines.iter().any(|l| {
                    names.iter().any(|c| l.contains(c.as_str())) && (l.contains("WARN") || l.contains("ERROR"))
                }) {
                    Ok(Some(()))
                } else {
                    Err(format!("lines naming {marker}: {lines:?}"))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// Sends a valid message from fake entity `from` to `to` and waits until it is acted on: injected
/// into a worker, drained from a main, or (for the roster) a fresh presence listed everywhere.
/// Queues are FIFO with one consumer, so this also proves the hostile message before it was
/// handled and did not wedge the consumer.
async fn valid_accepted(w: &mut FleetWorld, from: &str, to: &str) -> anyhow::Result<()> {
    match target(w, to)? {
        Target::Roster => {
            let gid = new_uuid();
            let k = key(w, "probe")?;
            probe(w)?.announce(&k, &gid, "worker", FAKE_TTL).await?;
            until_listed(w, &gid, "probe").await
        }
        Target::Control { host } => {
            bail!("no valid-message check for the control queue of {host}: a valid SPAWN would launch an agent")
        }
        Target::Inbox { name, gid, host } => {
            let text = format!("valid message {}", new_uuid());
            let (env, body) = valid_send(w, from, &gid, &text)?;
            probe(w)?
                .publish(&Crafted::from_envelope("bridge.msg", &gid, &env, &body))
                .await?;
            w.wire.valid_texts.push(text.clone());
            w.wire.last_valid = Some(env.clone());
            let e = w.entity(&name)?;
            let worker = w.host(&e.host)?.herdr.agent(&e.pane).is_some_and(|a| a == "claude");
            if worker {
                let pane = e.pane.clone();
                let herdr = &w.host(&host)?.herdr;
                wait_for(
                    &format!("the valid message injected into {name}"),
                    Duration::from_secs(10),
                    || {
                        let inputs = herdr.inputs(&pane);
                        let text = text.clone();
                        async move {
                            if inputs.contains(&text) {
                                Ok(Some(()))
                            } else {
                                Err(format!("inputs: {inputs:?}"))
                            }
                        }
                    },
                )
                .await?;
                Ok(())
            } else {
                let id = env.msg_id().to_string();
                poll_until(w, &name, |m| m["msgId"] == json!(id)).await.map(|_| ())
            }
        }
    }
}

#[then(expr = "a valid message from {string} to {string} is still accepted")]
async fn still_accepted(w: &mut FleetWorld, from: String, to: String) -> anyhow::Result<()> {
    valid_accepted(w, &from, &to).await
}

#[when(expr = "{string} on the probe host sends a valid message to {string}")]
async fn sends_valid(w: &mut FleetWorld, from: String, to: String) -> anyhow::Result<()> {
    valid_accepted(w, &from, &to).await
}

#[then(expr = "nothing hostile was injected into {string} or held for {string}")]
async fn nothing_hostile(w: &mut FleetWorld, worker: String, main: String) -> anyhow::Result<()> {
    // The worker's pane: every text herdr was handed (submitted or not) is a valid one.
    let e = w.entity(&worker)?;
    let log = w.host(&e.host)?.herdr.input_log(&e.pane);
    for r in &log {
        ensure!(
            w.wire.valid_texts.contains(&r.text),
            "herdr was handed {:?} for {worker}: not a valid message of this scenario",
            r.text
        );
        ensure!(
            log.iter().filter(|x| x.text == r.text).count() == 1,
            "herdr was handed {:?} for {worker} more than once",
            r.text
        );
    }
    // The main: nothing hostile was drained so far, nothing is held now, the inbox is empty.
    let handle = w.mcp(&main).await?.handle();
    let v = handle.call("bridge_poll", json!({})).await?;
    let now: Vec<Value> = fleet_conformance::contract::poll_messages(&v)?;
    w.wire.drained.extend(now.clone());
    for id in &w.wire.hostile_ids {
        // A replayed message was legitimately drained once, as the original.
        let allowed = usize::from(w.wire.replayed.contains(id));
        let n = count_id(&w.wire.drained, id);
        ensure!(
            n <= allowed,
            "{main} was handed hostile message {id} {n} time(s): {:?}",
            w.wire.drained
        );
    }
    for m in &w.wire.drained {
        let text = m["text"].as_str().unwrap_or_default();
        ensure!(
            !w.wire.hostile_texts.iter().any(|h| h == text) || w.wire.replayed.iter().any(|r| m["msgId"] == json!(r)),
            "{main} was handed a hostile message: {m}"
        );
    }
    ensure!(
        now.is_empty(),
        "{main} still had messages held after the valid one: {now:?}"
    );
    let gid = w.gid(&main)?;
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let q = inbox(&gid);
    let (suite, vhost, q) = (&suite, &vhost, &q);
    wait_for(&format!("{q} to be empty"), Duration::from_secs(10), || async move {
        match suite.broker.management().queue(vhost, q).await {
            Ok(Some(i)) if i.messages_ready == 0 && i.messages_unacknowledged == 0 => Ok(Some(())),
            Ok(Some(i)) => Err(format!(
                "ready {} unacked {}",
                i.messages_ready, i.messages_unacknowledged
            )),
            Ok(None) => Err(format!("{q} does not exist")),
            Err(e) => Err(e.to_string()),
        }
    })
    .await?;
    Ok(())
}

fn count_id(drained: &[Value], id: &str) -> usize {
    drained.iter().filter(|m| m["msgId"] == json!(id)).count()
}

#[then("no gateway published FAILED")]
async fn no_failed(w: &mut FleetWorld) -> anyhow::Result<()> {
    // Watched over a window: a FAILED could still be on its way at any one instant (SIG-6).
    let t = tap(&w.wire.msgs, "bridge.msg")?;
    let gateways: Vec<&String> = w.hosts.keys().collect();
    let hostile = &w.wire.hostile_ids;
    fleet_conformance::timing::hold_for(
        "no FAILED from a gateway",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (gateways, t) = (&gateways, &t);
            async move {
                let msgs = t.fetch().await.map_err(|e| e.to_string())?;
                let failed: Vec<String> = msgs
                    .iter()
                    .filter(|m| m.header_str("kind").as_deref() == Some("FAILED"))
                    .filter(|m| m.header_str("host").is_some_and(|h| gateways.iter().any(|g| **g == h)))
                    // The probe's own forgeries claim a gateway's host too: they are not the gateway's.
                    .filter(|m| !m.message_id().is_some_and(|id| hostile.contains(&id)))
                    .map(|m| {
                        format!(
                            "FAILED from host {:?} to {}: {}",
                            m.header_str("host"),
                            m.routing_key,
                            String::from_utf8_lossy(&m.body)
                        )
                    })
                    .collect();
                if failed.is_empty() {
                    Ok(())
                } else {
                    Err(format!("a gateway published FAILED: {failed:?}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then("every gateway is still ready")]
async fn still_ready(w: &mut FleetWorld) -> anyhow::Result<()> {
    for (name, h) in &w.hosts {
        let (status, v) = h.gateway.get("/readyz").await?;
        ensure!(status == 200, "gateway {name} /readyz answered {status}: {v}");
    }
    Ok(())
}

// ---- What gateways publish (ENV-1, SIG-1, ENV-3) ----

/// Checks one captured message: every header its kind requires, each an AMQP long string without
/// a newline, `to` = its routing key, `message_id` = `msgId`, and `sig` valid under the key of
/// the host named in `host`.
fn check_published(w: &FleetWorld, m: &Captured) -> anyhow::Result<Envelope> {
    let env = Envelope::from_field_table(&m.headers()).map_err(|e| anyhow!("{e} in {}", describe(m)))?;
    env.check_required()
        .map_err(|e| anyhow!("ENV-1: {e} in {}", describe(m)))?;
    ensure!(
        env.value("to") == m.routing_key,
        "`to` differs from the routing key in {}",
        describe(m)
    );
    ensure!(
        m.message_id().as_deref() == Some(env.msg_id()),
        "message_id differs from msgId in {}",
        describe(m)
    );
    let host = env.value("host");
    let k = w
        .keys
        .get(host)
        .ok_or_else(|| anyhow!("{} names host {host:?}, which the suite holds no key for", describe(m)))?;
    env.verify(&k.public_base64(), &m.body)
        .map_err(|e| anyhow!("SIG-1: {e} ({})", describe(m)))?;
    check_properties(&env, m)?;
    Ok(env)
}

/// SPEC §2's AMQP properties: `delivery_mode` 2 for every kind but ASK and ANSWER (1); the content
/// type of the body (text for the text kinds, JSON for the others; compared without case or
/// spaces); for ASK and ANSWER an `expiration` of at most the ms from `ts` to `expiresAt`.
fn check_properties(env: &Envelope, m: &Captured) -> anyhow::Result<()> {
    let kind = env.kind();
    let transient = matches!(kind, "ASK" | "ANSWER");
    let text = matches!(kind, "SEND" | "REPLY" | "ASK" | "ANSWER" | "BROADCAST");
    let mode = m.properties.delivery_mode().unwrap_or(1);
    let want = if transient { 1 } else { 2 };
    ensure!(
        mode == want,
        "SPEC §2: a {kind} is published with delivery_mode {want}, got {mode} in {}",
        describe(m)
    );
    let norm = |s: &str| s.to_ascii_lowercase().replace(' ', "");
    let ct = m
        .properties
        .content_type()
        .as_ref()
        .map(|c| norm(c.as_str()))
        .unwrap_or_default();
    let want_ct = if text {
        "text/plain;charset=utf-8"
    } else {
        "application/json"
    };
    ensure!(
        ct == want_ct,
        "SPEC §2: a {kind} has content_type {want_ct:?}, got {ct:?} in {}",
        describe(m)
    );
    if transient {
        let ts: u64 = env.value("ts").parse().unwrap_or(0);
        let exp: u64 = env.value("expiresAt").parse().unwrap_or(0);
        let exp_prop = m.properties.expiration().as_ref().map(|e| e.as_str().to_string());
        let ms: Option<u64> = exp_prop.as_deref().and_then(|e| e.parse().ok());
        ensure!(
            ms.is_some_and(|ms| ms > 0 && ms <= exp.saturating_sub(ts)),
            "SPEC §2: a {kind} carries expiration = ms left until expiresAt ({} ms at ts), got {exp_prop:?} in {}",
            exp.saturating_sub(ts),
            describe(m)
        );
    }
    Ok(())
}

fn describe(m: &Captured) -> String {
    format!(
        "{} on {} · {} (headers {:?})",
        m.header_str("kind").unwrap_or_default(),
        m.exchange,
        m.routing_key,
        m.headers()
            .inner()
            .keys()
            .map(|k| k.as_str().to_string())
            .collect::<Vec<_>>()
    )
}

#[then(
    regex = r#"^the probe saw host "([^"]+)" publish an? ([A-Z_]+)(?: (?:from|for) "([^"]+)")?, complete, in long strings, signed with its key$"#
)]
async fn saw_published(w: &mut FleetWorld, host: String, kind: String, who: String) -> anyhow::Result<()> {
    let who_gid = if who.is_empty() {
        None
    } else if who == "_gateway" {
        Some("_gateway".to_string())
    } else {
        Some(w.gid(&who)?)
    };
    let t = if kind == "PRESENCE" {
        tap(&w.wire.roster, "bridge.roster")?
    } else {
        tap(&w.wire.msgs, "bridge.msg")?
    };
    let m = t
        .wait_for(
            &format!("a {kind} published by host {host}"),
            Duration::from_secs(10),
            |c: &Captured| {
                c.header_str("kind").as_deref() == Some(kind.as_str())
                    && c.header_str("host").as_deref() == Some(host.as_str())
                    && who_gid
                        .as_ref()
                        .is_none_or(|g| c.header_str("from").as_deref() == Some(g.as_str()))
            },
        )
        .await?;
    check_published(w, &m)?;
    Ok(())
}

#[then("every message the probe saw a gateway publish is complete, in long strings, and signed")]
async fn all_published_ok(w: &mut FleetWorld) -> anyhow::Result<()> {
    let gateways: Vec<String> = w.hosts.keys().cloned().collect();
    let mut all = tap(&w.wire.msgs, "bridge.msg")?.fetch().await?;
    all.extend(tap(&w.wire.roster, "bridge.roster")?.fetch().await?);
    if let Some(c) = &w.wire.control {
        all.extend(c.fetch().await?);
    }
    let mut n = 0;
    for m in all
        .iter()
        .filter(|m| m.header_str("host").is_some_and(|h| gateways.contains(&h)))
    {
        check_published(w, m)?;
        n += 1;
    }
    ensure!(n > 0, "the probe saw no message published by a gateway");
    let mut kinds: Vec<String> = all
        .iter()
        .filter(|m| m.header_str("host").is_some_and(|h| gateways.contains(&h)))
        .filter_map(|m| m.header_str("kind"))
        .collect();
    kinds.sort();
    kinds.dedup();
    println!("checked {n} message(s) published by the gateways, of kinds {kinds:?}");
    Ok(())
}

#[then(expr = "the INJECTED for the probe's message carries its msgId as corrId and its traceId")]
async fn injected_for_valid(w: &mut FleetWorld) -> anyhow::Result<()> {
    let sent = w
        .wire
        .last_valid
        .clone()
        .ok_or_else(|| anyhow!("the probe sent no valid message"))?;
    let id = sent.msg_id().to_string();
    let m = tap(&w.wire.msgs, "bridge.msg")?
        .wait_for(
            &format!("an INJECTED with corrId {id}"),
            Duration::from_secs(10),
            |c: &Captured| {
                c.header_str("kind").as_deref() == Some("INJECTED")
                    && c.header_str("corrId").as_deref() == Some(id.as_str())
            },
        )
        .await?;
    let env = check_published(w, &m)?;
    ensure!(
        env.value("traceId") == sent.value("traceId"),
        "ENV-3: the INJECTED carries traceId {}, the SEND had {}",
        env.value("traceId"),
        sent.value("traceId")
    );
    ensure!(
        env.value("to") == sent.value("from"),
        "the INJECTED goes to {}, not the sender",
        env.value("to")
    );
    Ok(())
}

#[then(expr = "the INJECTED for {string}'s send carries the send's traceId")]
async fn injected_for_send(w: &mut FleetWorld, main: String) -> anyhow::Result<()> {
    let main_gid = w.gid(&main)?;
    let msgs = tap(&w.wire.msgs, "bridge.msg")?;
    let send = msgs
        .wait_for(
            &format!("a SEND from {main}"),
            Duration::from_secs(10),
            |c: &Captured| {
                c.header_str("kind").as_deref() == Some("SEND")
                    && c.header_str("from").as_deref() == Some(main_gid.as_str())
            },
        )
        .await?;
    let send_env = check_published(w, &send)?;
    let id = send_env.msg_id().to_string();
    let inj = msgs
        .wait_for(
            &format!("an INJECTED with corrId {id}"),
            Duration::from_secs(10),
            |c: &Captured| {
                c.header_str("kind").as_deref() == Some("INJECTED")
                    && c.header_str("corrId").as_deref() == Some(id.as_str())
            },
        )
        .await?;
    let inj_env = check_published(w, &inj)?;
    ensure!(
        inj_env.value("traceId") == send_env.value("traceId"),
        "ENV-3: INJECTED traceId {} ≠ SEND traceId {}",
        inj_env.value("traceId"),
        send_env.value("traceId")
    );
    Ok(())
}

#[then(expr = "the roster of every gateway still lists {string} on host {string}")]
async fn still_lists(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    until_listed(w, &gid, &host).await
}

// ---- Copies racing a drain (RPL-1, FWD-6) ----

/// Sends `n` valid SENDs from fake entity `from` to the main `main`, publishing each one twice in
/// a row (the same bytes: msgId, signature, everything), while a task keeps `main` draining with
/// `bridge_wait`. A copy then reaches the gateway while its original is held, handed to the
/// waiter, or half-way through its drain (the ack in flight): every window in which a gateway
/// that records the msgId too late drains it a second time. The drains are kept for the check.
#[when(
    expr = "{string} on the probe host sends {int} messages to {string}, each published twice in a row, while it drains"
)]
async fn sends_twice_while_draining(w: &mut FleetWorld, from: String, n: usize, main: String) -> anyhow::Result<()> {
    let gid = w.gid(&main)?;
    let handle = w.mcp(&main).await?.handle();
    let probe = probe(w)?;
    let ids = std::sync::Arc::new(std::sync::Mutex::new(std::collections::HashSet::<String>::new()));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let drainer = {
        let (ids, stop) = (ids.clone(), stop.clone());
        tokio::spawn(async move {
            let mut got: Vec<Value> = Vec::new();
            loop {
                let done = {
                    let ids = ids.lock().map_err(|_| anyhow!("poisoned"))?;
                    ids.len() == n && ids.iter().all(|id| count_id(&got, id) >= 1)
                };
                if done || stop.load(std::sync::atomic::Ordering::SeqCst) {
                    return anyhow::Ok(got);
                }
                let v = handle.call("bridge_wait", json!({"timeout_s": 1})).await?;
                if let fleet_conformance::contract::Waited::Message(m) = fleet_conformance::contract::waited(&v)? {
                    got.push(m);
                }
            }
        })
    };
    let mut sent = Vec::with_capacity(n);
    for i in 0..n {
        let text = format!("copy race {i} {}", new_uuid());
        let (env, body) = valid_send(w, &from, &gid, &text)?;
        let msg = Crafted::from_envelope("bridge.msg", &gid, &env, &body);
        ids.lock()
            .map_err(|_| anyhow!("poisoned"))?
            .insert(env.msg_id().to_string());
        probe.publish(&msg).await?;
        probe.publish(&msg).await?;
        w.wire.valid_texts.push(text);
        sent.push(env.msg_id().to_string());
        w.wire.replayed.push(env.msg_id().to_string());
    }
    let deadline = fleet_conformance::timing::scaled(Duration::from_secs(30));
    let got = match tokio::time::timeout(deadline, drainer).await {
        Ok(joined) => joined.context("the draining task panicked")??,
        Err(_) => {
            stop.store(true, std::sync::atomic::Ordering::SeqCst);
            bail!("{main} did not drain all {n} messages within {deadline:?}")
        }
    };
    w.wire.drained.extend(got);
    w.wire.copies = sent;
    Ok(())
}

#[then(expr = "{string} drained each of those messages exactly once")]
async fn drained_each_once(w: &mut FleetWorld, main: String) -> anyhow::Result<()> {
    // A late second copy is still drainable for a while: poll over a window and keep what comes.
    let handle = w.mcp(&main).await?.handle();
    let late = std::sync::Mutex::new(Vec::<Value>::new());
    let copies = w.wire.copies.clone();
    ensure!(!copies.is_empty(), "no messages were sent twice in this scenario");
    fleet_conformance::timing::hold_for(
        "no second drain of a message sent twice",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (handle, late, copies) = (handle.clone(), &late, &copies);
            async move {
                let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
                let msgs = fleet_conformance::contract::poll_messages(&v).map_err(|e| e.to_string())?;
                let again: Vec<&Value> = msgs
                    .iter()
                    .filter(|m| copies.iter().any(|id| m["msgId"] == json!(id)))
                    .collect();
                let seen = format!("drained again: {again:?}");
                let hit = !again.is_empty();
                if let Ok(mut l) = late.lock() {
                    l.extend(msgs);
                }
                if hit { Err(seen) } else { Ok(()) }
            }
        },
    )
    .await?;
    let late = late.into_inner().unwrap_or_default();
    w.wire.drained.extend(late);
    let twice: Vec<(String, usize)> = copies
        .iter()
        .map(|id| (id.clone(), count_id(&w.wire.drained, id)))
        .filter(|(_, c)| *c != 1)
        .collect();
    ensure!(
        twice.is_empty(),
        "{} of {} messages sent twice were not drained exactly once (msgId, drains): {twice:?}",
        twice.len(),
        copies.len()
    );
    Ok(())
}

// ---- The [C-7] grace (SIG-2) ----

/// Publishes a valid SEND from a fresh fake entity `name` on host "probe" to `main`, waits until
/// the main's gateway has taken it off the queue (passive declare: no ready message left), and
/// only then announces `name`'s presence. A gateway that judges `from` at once rejects it before
/// the presence exists; one that waits ([C-7], up to a heartbeat) accepts it once it lands.
#[when(
    expr = "the probe sends a valid message to {string} from {string}, announcing {string} only once the gateway holds it"
)]
async fn sends_before_presence(w: &mut FleetWorld, main: String, name: String, _again: String) -> anyhow::Result<()> {
    let gid = new_uuid();
    w.wire.fakes.insert(name.clone(), gid.clone());
    let to = w.gid(&main)?;
    let text = format!("early message {}", new_uuid());
    let (env, body) = valid_send(w, &name, &to, &text)?;
    let probe = probe(w)?;
    probe
        .publish(&Crafted::from_envelope("bridge.msg", &to, &env, &body))
        .await?;
    w.wire.valid_texts.push(text);
    w.wire.last_valid = Some(env.clone());
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let lb = fleet_conformance::legacy::LegacyBroker::connect(&suite.broker.amqp_url(&vhost)).await?;
    let q = inbox(&to);
    let taken = wait_for(
        &format!("the gateway of {main} to take the early message off {q}"),
        Duration::from_secs(10),
        || {
            let (lb, q) = (&lb, q.as_str());
            async move {
                match lb.queue_state(q).await {
                    Ok(Some(s)) if s.messages == 0 => Ok(Some(())),
                    Ok(Some(s)) => Err(format!("{q}: {s:?}")),
                    Ok(None) => Err(format!("{q} does not exist")),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await;
    lb.close().await;
    taken?;
    probe.announce(&key(w, "probe")?, &gid, "worker", FAKE_TTL).await?;
    Ok(())
}

#[then(expr = "{string} drains the message from {string}, which was never dead-lettered")]
async fn drains_early(w: &mut FleetWorld, main: String, name: String) -> anyhow::Result<()> {
    let env = w
        .wire
        .last_valid
        .clone()
        .ok_or_else(|| anyhow!("the probe sent no valid message"))?;
    let id = env.msg_id().to_string();
    let from = fake_gid(w, &name)?;
    let m = poll_until(w, &main, |m| m["msgId"] == json!(id)).await?;
    ensure!(
        m["from"] == json!(from),
        "drained {m}, expected it from {name} ({from})"
    );
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    let dead: Vec<Captured> = dlx
        .fetch()
        .await?
        .into_iter()
        .filter(|c| c.message_id().as_deref() == Some(id.as_str()))
        .collect();
    ensure!(dead.is_empty(), "the early message was dead-lettered too: {dead:?}");
    Ok(())
}

// ---- Gateway-enforced expiry (ASK-3, [C-13]) ----

/// Publishes an ASK from fake entity `from` to `main` whose `expiresAt` passed a minute ago, with
/// no broker `expiration`: only the gateway can tell it is late. It counts as hostile for the
/// "nothing … held" check (it must never be surfaced).
#[when(expr = "the probe sends {string} an ASK from {string} that expired a minute ago")]
async fn sends_expired_ask(w: &mut FleetWorld, main: String, from: String) -> anyhow::Result<()> {
    let to = w.gid(&main)?;
    let mut env = Envelope::new("ASK", &fake_gid(w, &from)?, &to, "probe");
    let now = now_ms();
    env.set("turnId", &new_uuid())
        .set("ts", &(now - 120_000).to_string())
        .set("expiresAt", &(now - 60_000).to_string());
    let marker = env.msg_id().to_string();
    let text = format!("a late question {marker}");
    let env = env.signed_by(&key(w, "probe")?, text.as_bytes());
    let msg = Crafted::from_envelope("bridge.msg", &to, &env, text.as_bytes());
    probe(w)?.publish(&msg).await?;
    w.wire.hostile_texts.push(text);
    w.wire.hostile_ids.push(marker.clone());
    w.wire.hostile = Some(Hostile { marker });
    Ok(())
}

/// [C-13]: a late ASK/ANSWER is acked and dropped — not rejected, and never acted on (no
/// NO_WAITER or any other notice names it). Watched over a window on the dead-letter and message
/// taps (the FIFO check before it proved the gateway had handled it).
#[then("the late ASK was acked and dropped: never dead-lettered, never answered")]
async fn late_ask_dropped(w: &mut FleetWorld) -> anyhow::Result<()> {
    let marker = last_hostile(w)?.marker.clone();
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    let msgs = tap(&w.wire.msgs, "bridge.msg")?;
    fleet_conformance::timing::hold_for(
        "the late ASK dropped",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (dlx, msgs, marker) = (&dlx, &msgs, marker.as_str());
            async move {
                let dead = dlx.fetch().await.map_err(|e| e.to_string())?;
                if let Some(c) = dead.iter().find(|c| c.message_id().as_deref() == Some(marker)) {
                    return Err(format!(
                        "the late ASK was dead-lettered (x-death reason {:?}): [C-13] wants it acked and dropped",
                        c.death_reason()
                    ));
                }
                let wire = msgs.fetch().await.map_err(|e| e.to_string())?;
                match wire.iter().find(|c| c.header_str("corrId").as_deref() == Some(marker)) {
                    Some(c) => Err(format!(
                        "a {} about the late ASK was published: ASK-3 wants it dropped, never surfaced or answered",
                        c.header_str("kind").unwrap_or_default()
                    )),
                    None => Ok(()),
                }
            }
        },
    )
    .await?;
    Ok(())
}

// ---- A worker's own broadcast (BRD-2) ----

/// A BROADCAST from worker `from` to `group`, signed by its own host's key (the probe holds every
/// trusted host's key): what a worker's gateway would publish. Its own inbox is bound to the key,
/// so the broker hands it a copy too, which its gateway must drop.
#[when(expr = "a BROADCAST {string} from {string} to group {string}, signed by its host, reaches the broker")]
async fn broadcast_from_worker(w: &mut FleetWorld, text: String, from: String, group: String) -> anyhow::Result<()> {
    let e = w.entity(&from)?;
    let (gid, host) = (e.gid.clone(), e.host.clone());
    let routing = format!("broadcast.{group}");
    let env = Envelope::new("BROADCAST", &gid, &routing, &host).signed_by(&key(w, &host)?, text.as_bytes());
    let mut msg = Crafted::from_envelope("bridge.msg", &routing, &env, text.as_bytes());
    msg.mandatory = false;
    probe(w)?.publish(&msg).await?;
    Ok(())
}
