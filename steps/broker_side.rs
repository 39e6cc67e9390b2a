//! Steps that work on the broker side of a gateway to reach requirements nothing else reaches: a
//! broker that nacks (PUB-3), what the broker itself holds of a brief (SEC-3), and whether the
//! optional `bridge.delay` exchange matches what the broker offers (TOP-1, capability `delay`).
//!
//! They exist so every requirement of `fixtures/requirements.toml` has a scenario: the conformance
//! runner counts a MUST without one as not tested.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::broker::DelayedExchange;
use fleet_conformance::timing::wait_for;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Connection, ConnectionProperties, ExchangeKind};
use serde_json::json;

use crate::world::FleetWorld;

/// Publishes one throwaway message straight into `queue` (default exchange) and answers whether
/// the broker nacked it.
async fn nacked(url: &str, queue: &str) -> anyhow::Result<bool> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;
    let confirm = ch
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions::default(),
            b"conformance probe: is the nack policy in effect?",
            BasicProperties::default(),
        )
        .await?
        .await?;
    let _ = conn.close(200, "probe done".into()).await;
    Ok(confirm.is_nack())
}

#[when(expr = "the broker nacks every message published to the inbox of {string}")]
async fn broker_nacks(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let queue = fleet_conformance::names::inbox(&gid);
    // A queue already at its length limit that rejects publishes: the broker nacks each one.
    suite
        .broker
        .management()
        .put_policy(
            &vhost,
            &format!("conformance-nack-{gid}"),
            &format!("^{}$", queue.replace('.', "\\.")),
            json!({"max-length": 0, "overflow": "reject-publish"}),
        )
        .await?;
    let url = suite.broker.amqp_url(&vhost);
    wait_for(
        "the broker to nack publishes to the inbox",
        Duration::from_secs(10),
        || {
            let (url, queue) = (url.clone(), queue.clone());
            async move {
                match nacked(&url, &queue).await {
                    Ok(true) => Ok(Some(())),
                    Ok(false) => Err("the probe message was still accepted".to_string()),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[when(expr = "{string} sends {string} to {string} while the suite keeps a copy of the wire")]
async fn send_with_copy(w: &mut FleetWorld, from: String, text: String, to: String) -> anyhow::Result<()> {
    let gid = w.gid(&to)?;
    // The tap's queue (exclusive to the scenario's probe) lives until cleanup closes the probe; no
    // later step of the scenario lists queues or relies on a route it adds.
    let tap = w.probe().await?.tap("bridge.msg", &gid).await?;
    let args = json!({"to": gid, "text": text, "wait_reply": false, "timeout_s": 60});
    w.call_in_background("send", &from, "bridge_send", args).await?;
    let copy = tap
        .wait_for("the copy of the brief on the broker", Duration::from_secs(10), |m| {
            m.header_str("kind").as_deref() == Some("SEND")
        })
        .await?;
    w.notes.wire_copy = Some((
        copy.body.clone(),
        copy.properties.content_type().as_ref().map(|c| c.as_str().to_string()),
    ));
    Ok(())
}

#[then(expr = "the broker's copy carries {string} as its plain UTF-8 body")]
async fn copy_is_plain(w: &mut FleetWorld, text: String) -> anyhow::Result<()> {
    let (body, ct) = w
        .notes
        .wire_copy
        .clone()
        .ok_or_else(|| anyhow!("no copy of the wire was kept"))?;
    ensure!(
        body == text.as_bytes(),
        "the broker holds {:?}, not the brief's text {text:?}: bodies must cross the broker as plain \
         UTF-8 (SPEC §2; the broker is inside the trust circle, SEC-3)",
        String::from_utf8_lossy(&body)
    );
    let ct = ct.unwrap_or_default();
    ensure!(
        ct.starts_with("text/plain"),
        "content_type is {ct:?}, expected text/plain; charset=utf-8"
    );
    Ok(())
}

/// Whether the broker knows the `x-delayed-message` exchange type, asked on a throwaway
/// connection (RabbitMQ answers an unknown type by closing the connection).
async fn broker_has_delayed_type(url: &str) -> anyhow::Result<bool> {
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let ch = conn.create_channel().await?;
    let name = format!("conformance.delay-probe.{}", uuid::Uuid::new_v4().simple());
    let mut args = FieldTable::default();
    args.insert(
        "x-delayed-type".into(),
        AMQPValue::LongString(LongString::from("topic")),
    );
    let declared = ch
        .exchange_declare(
            name.as_str().into(),
            ExchangeKind::Custom("x-delayed-message".into()),
            ExchangeDeclareOptions {
                auto_delete: true,
                ..ExchangeDeclareOptions::default()
            },
            args,
        )
        .await;
    if declared.is_ok() {
        let _ = ch
            .exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
    let _ = conn.close(200, "probe done".into()).await;
    Ok(declared.is_ok())
}

#[then("bridge.delay is declared as SPEC §1 says where the broker knows x-delayed-message, and absent where not")]
async fn delay_exchange(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let supported = broker_has_delayed_type(&suite.broker.amqp_url(&vhost)).await?;
    let exchanges = suite.broker.management().exchanges(&vhost).await?;
    let delay = exchanges.iter().find(|e| e.name == "bridge.delay");
    // Each broker shows a delayed exchange its own way (RabbitMQ: type x-delayed-message and
    // x-delayed-type; LavinMQ: the delayed type as the type, x-delayed-exchange: true).
    let read = delay.map(|e| (e, DelayedExchange::read(e)));
    if supported {
        let (e, d) = read.ok_or_else(|| {
            anyhow!("the broker knows x-delayed-message but the gateway declared no bridge.delay (capability delay)")
        })?;
        let d = d.ok_or_else(|| {
            anyhow!(
                "bridge.delay is a plain {} exchange (arguments {:?}), not an x-delayed-message one as {} shows it",
                e.kind,
                e.arguments,
                suite.broker.product()
            )
        })?;
        ensure!(d.durable, "bridge.delay is not durable: {e:?}");
        ensure!(
            d.delayed_type.as_deref() == Some("topic"),
            "bridge.delay delays into {:?}, expected \"topic\" (x-delayed-type, SPEC §1): {e:?}",
            d.delayed_type
        );
    } else {
        ensure!(
            read.is_none_or(|(_, d)| d.is_some()),
            "the broker lacks x-delayed-message, yet bridge.delay exists as {delay:?}"
        );
    }
    Ok(())
}
