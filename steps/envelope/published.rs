//! What gateways publish (ENV-1, SIG-1, ENV-3), as the probe's taps saw it: every header its kind
//! requires as an AMQP long string, `to` = the routing key, `message_id` = `msgId`, a signature
//! valid under the host's key, SPEC §2's AMQP properties, and an INJECTED that keeps the traceId
//! of the message it is about.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::then;
use fleet_conformance::envelope::Envelope;
use fleet_conformance::probe::{Captured, Tap};

use crate::world::FleetWorld;

use super::tap;

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
    let m = injected_for(&*tap(&w.wire.msgs, "bridge.msg")?, &id).await?;
    let env = check_published(w, &m)?;
    same_trace(&env, &sent)?;
    ensure!(
        env.value("to") == sent.value("from"),
        "the INJECTED goes to {}, not the sender",
        env.value("to")
    );
    Ok(())
}

/// Waits for the INJECTED that answers the SEND `id` (its `corrId`).
async fn injected_for(msgs: &Tap, id: &str) -> anyhow::Result<Captured> {
    outcome_for(msgs, "INJECTED", id).await
}

/// Waits for the notice of `kind` that reports on the message `id` (its `corrId`, [C-2]).
async fn outcome_for(msgs: &Tap, kind: &str, id: &str) -> anyhow::Result<Captured> {
    let m = msgs
        .wait_for(
            &format!("a {kind} with corrId {id}"),
            Duration::from_secs(10),
            |c: &Captured| {
                c.header_str("kind").as_deref() == Some(kind) && c.header_str("corrId").as_deref() == Some(id)
            },
        )
        .await?;
    Ok(m)
}

/// ENV-3: the outcome of `main`'s SEND — INJECTED, or FAILED (`busy`, `stopped`, …) — carries
/// the SEND's traceId: SPEC names both as messages of the SEND's flow.
#[then(regex = r#"^the (INJECTED|FAILED) for "([^"]+)"'s send carries the send's traceId$"#)]
async fn outcome_for_send(w: &mut FleetWorld, kind: String, main: String) -> anyhow::Result<()> {
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
    let outcome = outcome_for(&msgs, &kind, &id).await?;
    let outcome_env = check_published(w, &outcome)?;
    same_trace(&outcome_env, &send_env)
}

/// ENV-3: an INJECTED or FAILED carries the traceId of the SEND it answers.
fn same_trace(outcome: &Envelope, send: &Envelope) -> anyhow::Result<()> {
    ensure!(
        outcome.value("traceId") == send.value("traceId"),
        "ENV-3: the {} carries traceId {}, the SEND had {}",
        outcome.value("kind"),
        outcome.value("traceId"),
        send.value("traceId")
    );
    Ok(())
}
