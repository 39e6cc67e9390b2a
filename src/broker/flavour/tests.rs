//! Each broker's form of the same thing, read from `fixtures/brokers/` (recorded where a broker
//! could run here, transcribed otherwise: see that directory's README).

use std::path::PathBuf;

use serde_json::{Value, json};

use super::{DelayedExchange, Product, ServerIdentity};
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
    let e = ExchangeInfo::from_json(&json_fixture("lavinmq-2.5/delayed-exchange.json"));
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
    let mut lavin = json_fixture("lavinmq-2.5/delayed-exchange.json");
    lavin["arguments"] = json!({});
    assert_eq!(DelayedExchange::read(&ExchangeInfo::from_json(&lavin)), None);
    lavin["arguments"] = json!({"x-delayed-exchange": false});
    assert_eq!(DelayedExchange::read(&ExchangeInfo::from_json(&lavin)), None);
}

#[test]
fn a_delayed_exchange_of_another_routing_type_says_so() {
    let mut e = json_fixture("lavinmq-2.5/delayed-exchange.json");
    e["type"] = json!("direct");
    let d = DelayedExchange::read(&ExchangeInfo::from_json(&e)).expect("delayed");
    assert_eq!(d.delayed_type.as_deref(), Some("direct"));
    let mut r = json_fixture("rabbitmq-3.10/delayed-exchange.json");
    r["arguments"] = json!({});
    let d = DelayedExchange::read(&ExchangeInfo::from_json(&r)).expect("delayed");
    assert_eq!(d.delayed_type, None, "no x-delayed-type shown");
}

#[test]
fn consumers_read_alike_on_both_brokers() {
    for broker in ["rabbitmq-3.10", "lavinmq-2.5"] {
        let list = json_fixture(&format!("{broker}/consumers.json"));
        let consumers: Vec<ConsumerInfo> = list
            .as_array()
            .expect("list")
            .iter()
            .map(ConsumerInfo::from_json)
            .collect();
        assert_eq!(consumers.len(), 1, "{broker}");
        let c = &consumers[0];
        assert_eq!(c.queue, "agent.g1.inbox.v2", "{broker}");
        assert_eq!(c.tag, "ctag-1", "{broker}");
        assert!(c.exclusive, "{broker}");
        assert!(c.ack_required, "{broker}");
        assert_eq!(c.prefetch_count, 32, "{broker}");
        assert!(c.channel.is_some(), "{broker}: the channel is named");
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
    // LavinMQ 2.5's server properties: product and version first, then a capabilities table.
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
        ("version", b'S', long_str("2.5.2")),
        ("platform", b'S', long_str("Crystal 1.17.1")),
        ("capabilities", b'F', caps_value),
        ("channel_max", b'u', vec![0x08, 0x00]),
        ("clustered", b't', vec![0]),
    ]);
    let id = ServerIdentity::from_connection_start(&frame).expect("readable");
    assert_eq!(id.label(), "LavinMQ 2.5.2");
    let product = Product::from_name(&id.product);
    assert_eq!(product, Product::LavinMq);
    assert!(!product.has_topic_permissions());
    assert!(!product.refuses_exclusive_next_to_plain());
    assert!(Product::RabbitMq.has_topic_permissions());
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
