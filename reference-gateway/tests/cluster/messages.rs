//! Test messages for the cluster tests: what a moved message must keep, publishing them, the
//! queues they are published into, and draining a queue in order.

use std::collections::BTreeMap;
use std::time::Duration;

use fleet_gateway::config::QueueType;
use fleet_gateway::topology;
use futures_util::StreamExt as _;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};

use crate::broker::{durable, gid_like, long, queue_args};

/// Exchanges the conversion binds back to (the gateway declares them; no gateway runs here).
pub(crate) async fn exchanges(ch: &Channel) {
    let opts = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    for (name, kind) in [
        (topology::MSG_EXCHANGE, ExchangeKind::Topic),
        (topology::DLX, ExchangeKind::Fanout),
    ] {
        ch.exchange_declare(name.into(), kind, opts, FieldTable::default())
            .await
            .expect("exchange");
    }
}

/// What a moved message must keep.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    pub(crate) id: String,
    pub(crate) key: String,
    pub(crate) body: Vec<u8>,
    pub(crate) props: String,
}

/// The properties as text, without what the broker adds on a redelivery (`x-delivery-count`).
pub(crate) fn props_text(p: &BasicProperties) -> String {
    let mut p = p.clone();
    if let Some(h) = p.headers().clone() {
        let kept: BTreeMap<_, _> = h
            .inner()
            .iter()
            .filter(|(k, _)| k.as_str() != "x-delivery-count")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut t = FieldTable::default();
        for (k, v) in kept {
            t.insert(k, v);
        }
        p = p.with_headers(t);
    }
    format!("{p:?}")
}

/// One test message: what it must keep, and how it is published.
pub(crate) struct Msg {
    pub(crate) seen: Seen,
    pub(crate) props: BasicProperties,
}

/// `n` messages for inbox `gid`, routed by its gid or `broadcast.all`, each with its own id and
/// headers.
pub(crate) fn messages(gid: &str, n: usize) -> Vec<Msg> {
    (0..n)
        .map(|i| {
            let id = gid_like(i);
            let key = if i % 3 == 0 {
                "broadcast.all".to_string()
            } else {
                gid.to_string()
            };
            let mut headers = FieldTable::default();
            headers.insert("msgId".into(), long(&id));
            headers.insert("to".into(), long(&key));
            headers.insert("n".into(), AMQPValue::LongLongInt(i as i64));
            headers.insert("sig".into(), long(&format!("sig-{i}")));
            let props = BasicProperties::default()
                .with_message_id(id.as_str().into())
                .with_content_type("text/plain; charset=utf-8".into())
                .with_delivery_mode(2)
                .with_headers(headers);
            Msg {
                seen: Seen {
                    id,
                    key,
                    body: format!("message {i} for {gid}").into_bytes(),
                    props: props_text(&props),
                },
                props,
            }
        })
        .collect()
}

/// Publishes `msgs` through `exchange` with their routing keys, confirmed one by one.
pub(crate) async fn publish(conn: &Connection, exchange: &str, msgs: &[Msg]) {
    publish_keyed(conn, exchange, msgs, None).await
}

/// [`publish`], with routing key `key` instead of each message's own when given.
pub(crate) async fn publish_keyed(conn: &Connection, exchange: &str, msgs: &[Msg], key: Option<&str>) {
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    for m in msgs {
        let confirm = ch
            .basic_publish(
                exchange.into(),
                key.unwrap_or(&m.seen.key).into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &m.seen.body,
                m.props.clone(),
            )
            .await
            .expect("publish")
            .await
            .expect("confirm");
        assert!(confirm.take_message().is_none(), "routed");
    }
    let _ = ch.close(200, "x".into()).await;
}

/// Declares `queue` with `args` and a fanout `exchange` bound only to it.
pub(crate) async fn queue_behind(conn: &Connection, queue: &str, args: FieldTable, exchange: &str) {
    let ch = conn.create_channel().await.expect("channel");
    ch.queue_declare(queue.into(), durable(), args).await.expect("declare");
    let opts = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(exchange.into(), ExchangeKind::Fanout, opts, FieldTable::default())
        .await
        .expect("exchange");
    ch.queue_bind(
        queue.into(),
        exchange.into(),
        "".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .expect("bind");
    let _ = ch.close(200, "x".into()).await;
}

/// Makes a classic inbox (this configuration's classic arguments, bound as the gateway binds it)
/// holding `n` messages published through `bridge.msg`.
pub(crate) async fn classic_inbox(conn: &Connection, gid: &str, n: usize) -> (String, Vec<Seen>) {
    let q = topology::inbox_queue(gid);
    let ch = conn.create_channel().await.expect("channel");
    exchanges(&ch).await;
    ch.queue_declare(
        q.as_str().into(),
        durable(),
        topology::inbox_arguments(&queue_args(QueueType::Classic)),
    )
    .await
    .expect("classic inbox");
    for key in topology::inbox_keys(gid, &[]) {
        ch.queue_bind(
            q.as_str().into(),
            topology::MSG_EXCHANGE.into(),
            key.as_str().into(),
            Default::default(),
            FieldTable::default(),
        )
        .await
        .expect("bind");
    }
    let _ = ch.close(200, "x".into()).await;
    let msgs = messages(gid, n);
    publish(conn, topology::MSG_EXCHANGE, &msgs).await;
    (q, msgs.into_iter().map(|m| m.seen).collect())
}

/// The temporary queue's arguments, as the conversion declares them.
pub(crate) fn temp_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(topology::DLX));
    args
}

/// Everything in quorum inbox `q`, in order, acked (the queue ends empty).
pub(crate) async fn drain(conn: &Connection, q: &str, expect: usize) -> Vec<Seen> {
    let ch = conn.create_channel().await.expect("channel");
    ch.basic_qos(2000, BasicQosOptions::default()).await.expect("qos");
    let mut c = ch
        .basic_consume(
            q.into(),
            "test-drain".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .expect("consume");
    let mut got = Vec::new();
    while let Ok(Some(Ok(d))) = tokio::time::timeout(Duration::from_secs(3), c.next()).await {
        got.push(Seen {
            id: d
                .properties
                .message_id()
                .clone()
                .map(|s| s.to_string())
                .unwrap_or_default(),
            key: d.routing_key.to_string(),
            body: d.data.clone(),
            props: props_text(&d.properties),
        });
        d.acker.ack(Default::default()).await.expect("ack");
        if got.len() > expect + 50 {
            break;
        }
    }
    let _ = ch.close(200, "x".into()).await;
    got
}
