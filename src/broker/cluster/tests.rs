//! A cluster end to end: quorum queue, node loss, partition, whole restart — against real nodes
//! (ignored by default). Run with
//! `cargo test -p fleet-conformance --lib -- --ignored broker_cluster --nocapture --test-threads 1`.

use std::time::{Duration, Instant};

use lapin::options::{
    BasicAckOptions, BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use crate::broker::{Broker, BrokerError, BrokerSpec, container};
use crate::timing::wait_for;

const QUEUE: &str = "fleet-quorum";
const MESSAGES: usize = 50;

async fn channel(url: &str) -> (Connection, Channel) {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("AMQP connection");
    let ch = conn.create_channel().await.expect("channel");
    (conn, ch)
}

fn quorum() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString(LongString::from("quorum")));
    args
}

/// Declares the quorum queue through `url` and publishes `count` persistent messages
/// `<tag>-<i>` with confirms, every one acked.
async fn publish(url: &str, tag: &str, count: usize) {
    let (conn, ch) = channel(url).await;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirm mode");
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(QUEUE.into(), durable, quorum())
        .await
        .expect("declare quorum queue");
    let mut confirms = Vec::with_capacity(count);
    for i in 0..count {
        let body = format!("{tag}-{i}");
        let c = ch
            .basic_publish(
                "".into(),
                QUEUE.into(),
                BasicPublishOptions::default(),
                body.as_bytes(),
                BasicProperties::default().with_delivery_mode(2),
            )
            .await
            .expect("publish");
        confirms.push(c);
    }
    for c in confirms {
        assert!(c.await.expect("confirm").is_ack(), "a publish was nacked");
    }
    let _ = conn.close(200, "published".into()).await;
}

/// Takes the `count` messages of the queue through `url` — each look takes them all unacked and
/// acks them only once all came, so a look the broker breaks (while the queue's leader is being
/// replaced `basic.get` fails with 541 `nodedown`) leaves them in the queue for the next — and
/// checks they are `<tag>-0..count`, each once; how long after the call they could be taken.
async fn drain(url: &str, tag: &str, count: usize) -> Duration {
    let t0 = Instant::now();
    let mut seen = wait_for(
        &format!("the {count} messages of the quorum queue through {url}"),
        Duration::from_secs(90),
        || async {
            // A look may hang while the queue has no leader: it is given up (its connection
            // closed, so the messages it holds go back) and made again.
            let limit = crate::timing::scaled(Duration::from_secs(10));
            let conn = tokio::time::timeout(limit, Connection::connect(url, ConnectionProperties::default()))
                .await
                .map_err(|_| "no connection in 10 s".to_string())?
                .map_err(|e| format!("connect: {e}"))?;
            let taken = tokio::time::timeout(limit, take(&conn, count)).await;
            let _ = tokio::time::timeout(limit, conn.close(200, "drained".into())).await;
            taken.map_err(|_| "no answer in 10 s".to_string())?.map(Some)
        },
    )
    .await
    .expect("the messages can be taken through another node");
    let available = t0.elapsed();
    seen.sort();
    let mut want: Vec<String> = (0..count).map(|i| format!("{tag}-{i}")).collect();
    want.sort();
    assert_eq!(seen, want, "every confirmed message, once");
    available
}

/// Takes `count` messages unacked and acks them all once all came; their bodies.
async fn take(conn: &Connection, count: usize) -> Result<Vec<String>, String> {
    let ch = conn.create_channel().await.map_err(|e| format!("channel: {e}"))?;
    let passive = QueueDeclareOptions {
        passive: true,
        durable: true,
        ..QueueDeclareOptions::default()
    };
    let q = ch
        .queue_declare(QUEUE.into(), passive, quorum())
        .await
        .map_err(|e| format!("passive declare: {e}"))?;
    if q.message_count() as usize != count {
        return Err(format!("{} messages", q.message_count()));
    }
    let mut bodies = Vec::with_capacity(count);
    let mut last = None;
    for _ in 0..count {
        match ch.basic_get(QUEUE.into(), BasicGetOptions { no_ack: false }).await {
            Ok(Some(m)) => {
                last = Some(m.delivery.delivery_tag);
                bodies.push(String::from_utf8_lossy(&m.delivery.data).into_owned());
            }
            Ok(None) => return Err(format!("only {} of {count} messages came", bodies.len())),
            Err(e) => return Err(format!("basic.get: {e}")),
        }
    }
    if let Some(tag) = last {
        ch.basic_ack(tag, BasicAckOptions { multiple: true })
            .await
            .map_err(|e| format!("basic.ack: {e}"))?;
    }
    // The acks are the broker's once the channel closed cleanly.
    ch.close(200, "taken".into())
        .await
        .map_err(|e| format!("channel close: {e}"))?;
    Ok(bodies)
}

/// A TLS handshake with the broker's amqps listener, its certificate checked against the CA the
/// suite made (`openssl s_client`, as `crate::tls`'s own tests use openssl).
fn tls_answers(broker: &Broker) {
    let tls = broker.tls().expect("node 0 has an amqps listener");
    let out = std::process::Command::new("openssl")
        .args(["s_client", "-brief", "-verify_return_error", "-connect"])
        .arg(format!("{}:{}", tls.host, tls.port))
        .arg("-CAfile")
        .arg(&tls.ca_cert)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "TLS handshake with {}:{}: {}",
        tls.host,
        tls.port,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Start, quorum queue, kill its leader, read through another node, start it again, (container:
/// cut a node off and heal it), restart the whole cluster, stop; prints the timings.
async fn node_loss(spec: BrokerSpec, image: Option<String>, partition: bool) {
    let t0 = Instant::now();
    let broker = Broker::start_with_image(&spec, image).await.expect("cluster starts");
    let boot = t0.elapsed();
    assert!(broker.is_cluster());
    assert_eq!(broker.node_count(), 3);
    assert_eq!(broker.node_endpoint(0), broker.endpoint());
    tls_answers(&broker);
    let vhost = broker.create_exclusive_vhost().await.expect("vhost");
    let urls = broker.gateway_amqp_url(&vhost);
    assert_eq!(urls.split(',').count(), 3, "{urls}");
    assert!(urls.starts_with(&broker.amqp_url(&vhost)));

    publish(&broker.node_amqp_url(0, &vhost), "a", MESSAGES).await;
    let leader = broker.queue_leader(&vhost, QUEUE).await.expect("leader");
    let t1 = Instant::now();
    broker.kill_node(leader).await.expect("kill the leader");
    let killed = t1.elapsed();
    // The management client still answers with a node down.
    broker
        .management()
        .overview()
        .await
        .expect("management through another node");
    let other = (leader + 1) % 3;
    let _ = drain(&broker.node_amqp_url(other, &vhost), "a", MESSAGES).await;
    let available = t1.elapsed();
    let new_leader = broker.queue_leader(&vhost, QUEUE).await.expect("new leader");
    assert_ne!(new_leader, leader, "a killed node cannot lead");
    let t2 = Instant::now();
    broker.start_node(leader).await.expect("start the node again");
    let back = t2.elapsed();
    broker.ensure_whole().await.expect("whole");

    let mut report = format!(
        "{}: cluster formed in {boot:.1?}; leader node {leader} killed in {killed:.1?}, queue available \
         through node {other} {available:.1?} after the kill (new leader node {new_leader}); node back in {back:.1?}",
        spec.label()
    );

    if partition {
        let cut = broker.queue_leader(&vhost, QUEUE).await.expect("leader");
        publish(&broker.node_amqp_url(cut, &vhost), "b", MESSAGES).await;
        let other = (cut + 2) % 3;
        let t3 = Instant::now();
        let other_url = broker.node_amqp_url(other, &vhost);
        // The queue is read through the majority while the cut-off node pauses.
        let (cut_off, available) = tokio::join!(
            async {
                broker.partition_node(cut).await.expect("cut the leader off");
                t3.elapsed()
            },
            drain(&other_url, "b", MESSAGES),
        );
        let t4 = Instant::now();
        broker.heal_node(cut).await.expect("heal");
        let healed = t4.elapsed();
        report.push_str(&format!(
            "; leader node {cut} cut off: paused and seen down in {cut_off:.1?}, queue available through \
             node {other} {available:.1?} after the cut; healed in {healed:.1?}"
        ));
    } else {
        match broker.partition_node(1).await {
            Err(BrokerError::CannotPartition { reason, .. }) => assert!(reason.contains("loopback"), "{reason}"),
            other => panic!("the process provider cannot cut a node off: {other:?}"),
        }
    }

    // Node faults left behind are mended (container: a cut-off node then killed, which must
    // start attached to the network again).
    let t5 = Instant::now();
    if partition {
        broker.partition_node(2).await.expect("cut node 2 off");
    }
    broker.kill_node(2).await.expect("kill node 2");
    broker.ensure_whole().await.expect("whole after a kill");
    report.push_str(&format!("; node 2 left faulted and mended in {:.1?}", t5.elapsed()));

    // The whole cluster stopped and started on its data.
    publish(&broker.node_amqp_url(1, &vhost), "c", 10).await;
    let before: Vec<_> = (0..3).map(|n| broker.node_endpoint(n).clone()).collect();
    let took = broker.restart(&vhost).await.expect("restart the cluster");
    let after: Vec<_> = (0..3).map(|n| broker.node_endpoint(n).clone()).collect();
    assert_eq!(before, after, "the addresses must not change");
    let _ = drain(&broker.node_amqp_url(2, &vhost), "c", 10).await;
    report.push_str(&format!("; whole cluster restarted in {took:.1?}"));

    broker.delete_vhost(&vhost).await.expect("delete vhost");
    let t6 = Instant::now();
    broker.stop().await.expect("stop");
    eprintln!(
        "{report}; stopped in {:.1?} (time scale {:.2})",
        t6.elapsed(),
        crate::timing::time_scale()
    );
}

#[tokio::test]
#[ignore = "starts three real rabbitmq-server processes; needs the Debian package"]
async fn broker_cluster_process_rabbitmq() {
    node_loss(
        BrokerSpec::parse("process:rabbitmq-cluster").expect("valid"),
        None,
        false,
    )
    .await;
}

#[tokio::test]
#[ignore = "starts three real broker containers; needs docker and a local RabbitMQ image"]
async fn broker_cluster_container_rabbitmq() {
    let image =
        std::env::var(container::RABBITMQ_IMAGE_VAR).unwrap_or_else(|_| container::LOCAL_RABBITMQ_IMAGE.to_string());
    node_loss(
        BrokerSpec::parse("container:rabbitmq-cluster").expect("valid"),
        Some(image),
        true,
    )
    .await;
}

fn endpoint(port: u16) -> crate::broker::Endpoint {
    crate::broker::Endpoint {
        amqp_host: "127.0.0.1".into(),
        amqp_port: port,
        // Nothing listens there: these tests never reach a broker.
        http_base: format!("http://127.0.0.1:{}", port + 1),
        user: "guest".into(),
        password: "guest".into(),
    }
}

/// A broker someone else runs (url provider), never asked anything: `ports` one per node.
fn attached(spec: &str, ports: &[u16]) -> Broker {
    let spec = BrokerSpec::parse(spec).expect("valid");
    let endpoints: Vec<_> = ports.iter().map(|p| endpoint(*p)).collect();
    let (endpoint, cluster, management) = Broker::nodes(&spec, endpoints).expect("nodes");
    Broker {
        spec,
        endpoint,
        cluster,
        product: crate::broker::Product::RabbitMq,
        version: "RabbitMQ test".into(),
        management,
        provider: crate::broker::provider::Provider::Url(None),
        tls: None,
        node_tls: Vec::new(),
        users: Default::default(),
        down: Default::default(),
    }
}

#[tokio::test]
async fn a_single_node_is_one_node_and_refuses_node_faults() {
    let broker = attached("url:rabbitmq", &[5672]);
    assert!(!broker.is_cluster());
    assert_eq!(broker.node_count(), 1);
    assert_eq!(broker.node_endpoint(0), broker.endpoint());
    assert_eq!(broker.gateway_amqp_url("v"), broker.amqp_url("v"));
    assert_eq!(broker.node_amqp_url(0, "v"), broker.amqp_url("v"));
    assert!(broker.cannot_partition().is_some_and(|w| w.contains("single node")));
    for err in [
        broker.kill_node(0).await.expect_err("no cluster"),
        broker.start_node(0).await.expect_err("no cluster"),
        broker.partition_node(0).await.expect_err("no cluster"),
        broker.heal_node(0).await.expect_err("no cluster"),
    ] {
        assert!(matches!(err, BrokerError::NotACluster { .. }), "{err}");
        assert!(err.to_string().contains("not a cluster"), "{err}");
    }
    broker.ensure_whole().await.expect("nothing to mend on one node");
}

#[test]
#[should_panic(expected = "no node 1")]
fn a_single_node_has_no_second_node() {
    let broker = attached("url:rabbitmq", &[5672]);
    let _ = broker.node_endpoint(1);
}

#[tokio::test]
async fn a_cluster_hands_gateways_every_node_in_order() {
    let broker = attached("url:rabbitmq-cluster", &[20001, 20003, 20005]);
    assert!(broker.is_cluster());
    assert_eq!(broker.node_count(), 3);
    assert_eq!(broker.node_endpoint(0), broker.endpoint());
    assert_eq!(broker.node_endpoint(2).amqp_port, 20005);
    assert_eq!(
        broker.gateway_amqp_url("fleet-x"),
        "amqp://guest:guest@127.0.0.1:20001/fleet-x,amqp://guest:guest@127.0.0.1:20003/fleet-x,\
         amqp://guest:guest@127.0.0.1:20005/fleet-x"
    );
    assert_eq!(broker.node_amqp_url(1, "/"), "amqp://guest:guest@127.0.0.1:20003/%2F");
    // The management client knows every node's API, node 0's first.
    assert_eq!(broker.management().base_url(), "http://127.0.0.1:20002");
}

#[tokio::test]
async fn a_cluster_someone_else_runs_refuses_faults_with_the_reason() {
    let broker = attached("url:rabbitmq-cluster", &[20001, 20003, 20005]);
    let err = broker.kill_node(1).await.expect_err("url: cannot kill");
    assert!(err.to_string().contains("url:"), "{err}");
    let err = broker.partition_node(1).await.expect_err("url: cannot cut off");
    assert!(matches!(err, BrokerError::CannotPartition { .. }), "{err}");
    let err = broker.heal_node(1).await.expect_err("url: cannot heal");
    assert!(matches!(err, BrokerError::CannotPartition { .. }), "{err}");
    let err = broker.kill_node(3).await.expect_err("no node 3");
    assert!(
        matches!(err, BrokerError::NoSuchNode { node: 3, count: 3, .. }),
        "{err}"
    );
}

#[test]
fn the_node_that_stopped_last_starts_first() {
    assert_eq!(super::nodes::start_order(0, 3), [0, 1, 2]);
    assert_eq!(super::nodes::start_order(2, 3), [2, 0, 1]);
}

#[test]
fn node_tails_name_each_node() {
    let probe = "t [info] <0.1.0> accepting AMQP connection <0.1.0> (a -> b)\n\
                 t [warning] <0.1.0> closing AMQP connection <0.1.0> (a -> b):\n\
                 t [warning] <0.1.0> client unexpectedly closed TCP connection\n";
    let a = format!("w\nx\n{probe}{probe}");
    let report = super::nodes::node_tails(vec![("a@h".into(), a), ("b@h".into(), "y".into())], 2);
    assert_eq!(report, "=== a@h ===\nw\nx\n=== b@h ===\ny");
}
