//! Each broker's form of the same thing, read from `fixtures/brokers/` (recorded from RabbitMQ
//! 3.10.8 and LavinMQ 2.5.5; RabbitMQ's delayed exchange is transcribed, its plugin is not in
//! Debian: see that directory's README).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{DelayedExchange, PrefetchBound, Product, ServerIdentity};
use crate::broker::management::{ConsumerInfo, ExchangeInfo};

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/brokers")
        .join(path)
}

fn json_fixture(path: &str) -> Value {
    let text = std::fs::read_to_string(fixture(path)).expect("fixture");
    serde_json::from_str(&text).expect("fixture JSON")
}

#[test]
fn rabbitmq_delayed_exchange_is_read_from_its_type_and_argument() {
    let e = ExchangeInfo::from_json(&json_fixture("rabbitmq-3.10/delayed-exchange.json"));
    let d = DelayedExchange::read(&e).expect("a delayed exchange");
    assert_eq!(d.delayed_type.as_deref(), Some("topic"));
    assert!(d.durable);
}

#[test]
fn lavinmq_delayed_exchange_is_read_from_its_flag() {
    let e = ExchangeInfo::from_json(&json_fixture("lavinmq-2.5.5/delayed-exchange.json"));
    assert_eq!(e.kind, "topic", "LavinMQ shows the delayed type as the exchange type");
    let d = DelayedExchange::read(&e).expect("a delayed exchange");
    assert_eq!(d.delayed_type.as_deref(), Some("topic"));
    assert!(d.durable);
}

#[test]
fn a_plain_exchange_is_not_a_delayed_one_on_either_broker() {
    for v in json_fixture("rabbitmq-3.10/exchanges.json").as_array().expect("list") {
        assert_eq!(DelayedExchange::read(&ExchangeInfo::from_json(v)), None, "{v}");
    }
    let mut lavin = json_fixture("lavinmq-2.5.5/delayed-exchange.json");
    lavin["arguments"] = json!({});
    assert_eq!(DelayedExchange::read(&ExchangeInfo::from_json(&lavin)), None);
    lavin["arguments"] = json!({"x-delayed-exchange": false});
    assert_eq!(DelayedExchange::read(&ExchangeInfo::from_json(&lavin)), None);
}

#[test]
fn a_delayed_exchange_of_another_routing_type_says_so() {
    let mut e = json_fixture("lavinmq-2.5.5/delayed-exchange.json");
    e["type"] = json!("direct");
    let d = DelayedExchange::read(&ExchangeInfo::from_json(&e)).expect("delayed");
    assert_eq!(d.delayed_type.as_deref(), Some("direct"));
    let mut r = json_fixture("rabbitmq-3.10/delayed-exchange.json");
    r["arguments"] = json!({});
    let d = DelayedExchange::read(&ExchangeInfo::from_json(&r)).expect("delayed");
    assert_eq!(d.delayed_type, None, "no x-delayed-type shown");
}

/// The recorded consumer of each broker: its queue, tag and channel name as that broker wrote
/// them (LavinMQ's recording is from a live suite run, hence its generated names).
const RECORDED_CONSUMERS: [(&str, &str, &str, &str); 2] = [
    (
        "rabbitmq-3.10",
        "agent.g1.inbox.v2",
        "ctag-1",
        "127.0.0.1:42680 -> 127.0.0.1:5672 (1)",
    ),
    (
        "lavinmq-2.5.5",
        "agent.bf329567-c97b-453e-b3ca-845c389dc83c.inbox.v2",
        "bf329567-c97b-453e-b3ca-845c389dc83c",
        "127.0.0.1:49416[6]",
    ),
];

#[test]
fn consumers_read_alike_on_both_brokers() {
    for (broker, queue, tag, channel) in RECORDED_CONSUMERS {
        let list = json_fixture(&format!("{broker}/consumers.json"));
        let consumers: Vec<ConsumerInfo> = list
            .as_array()
            .expect("list")
            .iter()
            .map(ConsumerInfo::from_json)
            .collect();
        assert_eq!(consumers.len(), 1, "{broker}");
        let c = &consumers[0];
        assert_eq!(c.queue, queue, "{broker}");
        assert_eq!(c.tag, tag, "{broker}");
        assert!(c.exclusive, "{broker}");
        assert!(c.ack_required, "{broker}");
        assert_eq!(c.prefetch_count, 32, "{broker}");
        assert_eq!(
            c.channel.as_deref(),
            Some(channel),
            "{broker}: the channel is named in its broker's form"
        );
    }
}

#[test]
fn plain_exchanges_read_alike_on_both_brokers() {
    for broker in ["rabbitmq-3.10", "lavinmq-2.5.5"] {
        let list = json_fixture(&format!("{broker}/exchanges.json"));
        let e: Vec<ExchangeInfo> = list
            .as_array()
            .expect("list")
            .iter()
            .map(ExchangeInfo::from_json)
            .collect();
        assert_eq!(e.len(), 1, "{broker}");
        assert_eq!(e[0].name, "bridge.msg", "{broker}");
        assert_eq!(e[0].kind, "topic", "{broker}");
        assert!(e[0].durable && !e[0].auto_delete && !e[0].internal, "{broker}");
        assert!(e[0].arguments.is_empty(), "{broker}");
    }
}

#[test]
fn rabbitmq_names_itself_in_connection_start() {
    let frame = std::fs::read(fixture("rabbitmq-3.10/connection-start.bin")).expect("fixture");
    let id = ServerIdentity::from_connection_start(&frame).expect("readable");
    assert_eq!(id.product, "RabbitMQ");
    assert_eq!(id.version, "3.10.8");
    assert_eq!(Product::from_name(&id.product), Product::RabbitMq);
}

/// A `connection.start` frame with `props` as server properties (name, AMQP type, value bytes).
fn start_frame(props: &[(&str, u8, Vec<u8>)]) -> Vec<u8> {
    let mut table = Vec::new();
    for (name, kind, value) in props {
        table.push(name.len() as u8);
        table.extend_from_slice(name.as_bytes());
        table.push(*kind);
        table.extend_from_slice(value);
    }
    let mut payload = vec![0, 10, 0, 10, 0, 9];
    payload.extend_from_slice(&(table.len() as u32).to_be_bytes());
    payload.extend_from_slice(&table);
    for s in ["AMQPLAIN PLAIN", "en_US"] {
        payload.extend_from_slice(&(s.len() as u32).to_be_bytes());
        payload.extend_from_slice(s.as_bytes());
    }
    let mut frame = vec![1, 0, 0];
    frame.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(&payload);
    frame.push(0xCE);
    frame
}

fn long_str(s: &str) -> Vec<u8> {
    let mut v = (s.len() as u32).to_be_bytes().to_vec();
    v.extend_from_slice(s.as_bytes());
    v
}

#[test]
fn lavinmq_names_itself_in_connection_start() {
    // Recorded from LavinMQ 2.5.5: product, platform, version, then a capabilities table; no
    // channel_max or clustered property.
    let frame = std::fs::read(fixture("lavinmq-2.5.5/connection-start.bin")).expect("fixture");
    let id = ServerIdentity::from_connection_start(&frame).expect("readable");
    assert_eq!(id.label(), "LavinMQ 2.5.5");
    let product = Product::from_name(&id.product);
    assert_eq!(product, Product::LavinMq);
    assert!(!product.has_topic_permissions());
    assert!(!product.refuses_exclusive_next_to_plain());
    assert!(Product::RabbitMq.has_topic_permissions());
}

#[test]
fn server_properties_of_every_field_type_are_skipped_to_reach_the_version() {
    // Properties a broker may send before `version` (LavinMQ 2.5.2 sent `channel_max` and
    // `clustered` after it; others may not): each must be skipped by its type's width.
    let mut caps = Vec::new();
    for cap in ["publisher_confirms", "per_consumer_qos"] {
        caps.push(cap.len() as u8);
        caps.extend_from_slice(cap.as_bytes());
        caps.extend_from_slice(b"t\x01");
    }
    let mut caps_value = (caps.len() as u32).to_be_bytes().to_vec();
    caps_value.extend_from_slice(&caps);
    let frame = start_frame(&[
        ("product", b'S', long_str("LavinMQ")),
        ("capabilities", b'F', caps_value),
        ("channel_max", b'u', vec![0x08, 0x00]),
        ("clustered", b't', vec![0]),
        ("version", b'S', long_str("2.5.2")),
    ]);
    let id = ServerIdentity::from_connection_start(&frame).expect("readable");
    assert_eq!(id.label(), "LavinMQ 2.5.2");
}

#[test]
fn a_frame_that_is_not_connection_start_is_an_error_not_a_guess() {
    let mut frame = start_frame(&[("product", b'S', long_str("X"))]);
    frame[10] = 20; // method 10.20
    assert!(ServerIdentity::from_connection_start(&frame).is_err());
    let truncated = &start_frame(&[("product", b'S', long_str("X"))])[..12];
    assert!(ServerIdentity::from_connection_start(truncated).is_err());
    let frame = start_frame(&[("odd", b'?', vec![])]);
    assert!(ServerIdentity::from_connection_start(&frame).is_err());
    let frame = start_frame(&[("information", b'S', long_str("no product here"))]);
    let id = ServerIdentity::from_connection_start(&frame).expect("readable");
    assert_eq!(id.product, "unknown");
}

/// The recorded consumer of `broker` with its `prefetch_count` replaced by `consumer_prefetch`
/// (`None`: as recorded), read as the TOP-2 step reads it.
fn recorded_consumer(broker: &str, consumer_prefetch: Option<u64>) -> ConsumerInfo {
    let mut list = json_fixture(&format!("{broker}/consumers.json"));
    if let Some(n) = consumer_prefetch {
        list[0]["prefetch_count"] = json!(n);
    }
    ConsumerInfo::from_json(&list[0])
}

/// A channel as `GET /api/channels/<name>` shows it, with the keys each broker writes around the
/// prefetch (RabbitMQ 3.10: `prefetch_count` 0 unless a per-consumer default was set; LavinMQ
/// 2.5: `prefetch_count` = its `default_consumer_prefetch`, 65535, unless set).
fn channel_json(broker: &str, per_consumer_default: u64, global: u64) -> Value {
    match broker {
        "lavinmq-2.5.5" => json!({
            "number": 6, "name": "127.0.0.1:49416[6]", "vhost": "fleet", "user": "guest",
            "consumer_count": 1, "prefetch_count": per_consumer_default,
            "global_prefetch_count": global, "confirm": true, "transactional": false,
            "messages_unacknowledged": 0, "state": "running"
        }),
        _ => json!({
            "name": "127.0.0.1:42680 -> 127.0.0.1:5672 (1)", "number": 1, "node": "rabbit@rec",
            "consumer_count": 1, "prefetch_count": per_consumer_default,
            "global_prefetch_count": global, "confirm": true, "transactional": false,
            "messages_unacknowledged": 0, "state": "running"
        }),
    }
}

fn bound(broker: &str, consumer_prefetch: Option<u64>, channel: &Value) -> PrefetchBound {
    PrefetchBound {
        consumer: recorded_consumer(broker, consumer_prefetch).prefetch_count,
        channel_global: PrefetchBound::channel_global(channel),
    }
}

#[test]
fn a_per_consumer_prefetch_is_a_bound_on_both_brokers() {
    // As recorded: the gateway's basic.qos(32) per consumer.
    for (broker, default) in [("rabbitmq-3.10", 32), ("lavinmq-2.5.5", 32)] {
        let b = bound(broker, None, &channel_json(broker, default, 0));
        assert_eq!(b.effective(), Some(32), "{broker}");
        assert!(b.within(32), "{broker}");
        assert!(!b.within(31), "{broker}: a bound above FLEET_PREFETCH fails");
    }
}

#[test]
fn a_channel_wide_prefetch_is_a_bound_on_both_brokers() {
    // basic.qos(32, global=true) and no per-consumer qos: RabbitMQ shows the consumer at 0,
    // LavinMQ at its default 65535; both show 32 on the channel only.
    let rabbit = bound("rabbitmq-3.10", Some(0), &channel_json("rabbitmq-3.10", 0, 32));
    let lavin = bound("lavinmq-2.5.5", Some(65535), &channel_json("lavinmq-2.5.5", 65535, 32));
    for (broker, b) in [("rabbitmq", rabbit), ("lavinmq", lavin)] {
        assert_eq!(b.effective(), Some(32), "{broker}: {b:?}");
        assert!(b.within(32), "{broker}: a channel-wide bound is fair");
        assert!(!b.within(16), "{broker}: and can still be too large");
    }
}

#[test]
fn an_unbounded_consumer_fails_on_both_brokers() {
    // basic.qos(0) or none at all: nothing bounds the consumer but LavinMQ's default, which is
    // far above any FLEET_PREFETCH.
    let cases = [
        (
            "rabbitmq-3.10 qos 0",
            bound("rabbitmq-3.10", Some(0), &channel_json("rabbitmq-3.10", 0, 0)),
        ),
        (
            "lavinmq qos 0",
            bound("lavinmq-2.5.5", Some(0), &channel_json("lavinmq-2.5.5", 0, 0)),
        ),
        (
            "lavinmq no qos",
            bound("lavinmq-2.5.5", Some(65535), &channel_json("lavinmq-2.5.5", 65535, 0)),
        ),
        (
            "channel gone",
            PrefetchBound {
                consumer: recorded_consumer("rabbitmq-3.10", Some(0)).prefetch_count,
                channel_global: 0,
            },
        ),
    ];
    for (case, b) in cases {
        assert!(!b.within(32), "{case}: {b:?}");
    }
    assert_eq!(cases[0].1.effective(), None, "0 on both is unbounded, not a bound of 0");
}

#[test]
fn the_channel_per_consumer_default_is_not_a_bound_of_an_existing_consumer() {
    // RabbitMQ applies a later basic.qos(n, global=false) to consumers started after it only:
    // a consumer at 0 beside a channel default of 32 is still unbounded.
    let b = bound("rabbitmq-3.10", Some(0), &channel_json("rabbitmq-3.10", 32, 0));
    assert!(!b.within(32), "{b:?}");
}
