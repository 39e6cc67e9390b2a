//! The cluster profile (SPEC §16) against a real RabbitMQ: quorum declarations (CLU-2), CON-2 by
//! passive declare and CON-1's takeover (CLU-3), a classic inbox met in quorum mode (CLU-7), and
//! `convert-inboxes` (order, ids, properties, a rerun, SIGKILLs at any point).
//!
//! Exists because none of this shows without a broker: the arguments a broker accepts together,
//! what a 406 does to a channel, what a killed conversion leaves behind. Quorum queues work on a
//! single node, so one node is enough here; failover between nodes (CLU-1, CLU-5, CLU-6) is the
//! conformance suite's cluster scenarios' job.
//!
//! Ignored by default (it needs RabbitMQ and takes about a minute):
//!
//! ```text
//! cargo test -p fleet-gateway --test cluster -- --ignored
//! ```
//!
//! With `FLEET_TEST_AMQP_URL=amqp://user:pass@host:port/vhost` it uses that broker (give it a vhost
//! of its own: the gateways declare `bridge.dlq` quorum there); otherwise it starts a throwaway
//! node of Debian's `rabbitmq-server` (`/usr/lib/rabbitmq/bin/rabbitmq-server`, installed by
//! `scripts/setup`) in a temp dir and stops it at the end.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fleet_gateway::config::{QueueArgs, QueueType};
use fleet_gateway::topology;
use futures_util::StreamExt as _;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, ExchangeDeclareOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ExchangeKind};

const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
const ADMIN: &str = "admin-token-0123456789";

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fleet-clu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn sigterm(child: &Child) {
    // SAFETY: signals a process this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
}

/// A throwaway RabbitMQ node in its own process group, stopped (and its dir removed) on drop.
struct Node {
    child: Child,
    url: String,
    dir: PathBuf,
}

impl Node {
    fn start() -> Node {
        let dir = scratch("node");
        let port = free_port();
        let dist = free_port();
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(dir.join(sub)).expect("dir");
        }
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("plugins");
        std::fs::write(dir.join("rabbitmq.conf"), "loopback_users = none\n").expect("conf");
        let log = std::fs::File::create(dir.join("server.out")).expect("log");
        let child = Command::new(SERVER)
            .env("HOME", dir.join("home"))
            .env("RABBITMQ_NODENAME", format!("fleetclu{}@localhost", std::process::id()))
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", port.to_string())
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
            .env("ERL_EPMD_ADDRESS", "127.0.0.1")
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("rabbitmq-server starts");
        Node {
            child,
            url: format!("amqp://guest:guest@127.0.0.1:{port}/%2f"),
            dir,
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let group = -(self.child.id() as i32);
        // SAFETY: signals the process group this test started.
        unsafe {
            libc::kill(group, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        // SAFETY: as above (the group may be gone already).
        unsafe {
            libc::kill(group, libc::SIGKILL);
        }
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn connect(url: &str) -> Connection {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match Connection::connect(url, ConnectionProperties::default()).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("no broker at {url}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

fn queue_args(queue_type: QueueType) -> QueueArgs {
    QueueArgs {
        queue_type,
        inbox_max_length: 1000,
        inbox_ttl: Duration::from_millis(86_400_000),
        inbox_expires: Duration::from_millis(604_800_000),
        dlq_max_length: 10_000,
    }
}

/// Whether the broker holds `queue` with exactly `args` (a declare with them is accepted).
async fn holds_as(conn: &Connection, queue: &str, args: FieldTable) -> bool {
    let ch = conn.create_channel().await.expect("channel");
    let ok = ch.queue_declare(queue.into(), durable(), args).await.is_ok();
    let _ = ch.close(200, "x".into()).await;
    ok
}

async fn exists(conn: &Connection, queue: &str) -> Option<(u32, u32)> {
    let ch = conn.create_channel().await.expect("channel");
    let found = topology::peek(&ch, queue).await.expect("passive declare");
    if found.is_some() {
        let _ = ch.close(200, "x".into()).await;
    }
    found
}

async fn exchange_exists(conn: &Connection, exchange: &str) -> bool {
    let ch = conn.create_channel().await.expect("channel");
    let opts = ExchangeDeclareOptions {
        passive: true,
        ..ExchangeDeclareOptions::default()
    };
    let found = ch
        .exchange_declare(exchange.into(), ExchangeKind::Fanout, opts, FieldTable::default())
        .await
        .is_ok();
    if found {
        let _ = ch.close(200, "x".into()).await;
    }
    found
}

fn gid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Exchanges the conversion binds back to (the gateway declares them; no gateway runs here).
async fn exchanges(ch: &Channel) {
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
struct Seen {
    id: String,
    key: String,
    body: Vec<u8>,
    props: String,
}

/// The properties as text, without what the broker adds on a redelivery (`x-delivery-count`).
fn props_text(p: &BasicProperties) -> String {
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
struct Msg {
    seen: Seen,
    props: BasicProperties,
}

/// `n` messages for inbox `gid`, routed by its gid or `broadcast.all`, each with its own id and
/// headers.
fn messages(gid: &str, n: usize) -> Vec<Msg> {
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
async fn publish(conn: &Connection, exchange: &str, msgs: &[Msg]) {
    publish_keyed(conn, exchange, msgs, None).await
}

/// [`publish`], with routing key `key` instead of each message's own when given.
async fn publish_keyed(conn: &Connection, exchange: &str, msgs: &[Msg], key: Option<&str>) {
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
async fn queue_behind(conn: &Connection, queue: &str, args: FieldTable, exchange: &str) {
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
async fn classic_inbox(conn: &Connection, gid: &str, n: usize) -> (String, Vec<Seen>) {
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
fn temp_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(topology::DLX));
    args
}

/// The two states a kill between a batch's confirm and its ack leaves, made by hand: the batch's
/// head both at the tail of the destination and at the head of the source. The rerun skips
/// exactly the copies and ends with every message once, in order.
async fn resumes(url: &str) {
    let conn = connect(url).await;
    let n = 150;
    // Step 1 interrupted: the temporary queue holds 0..60, the classic inbox still 40..150.
    let g = gid();
    let (q, _) = classic_inbox(&conn, &g, 0).await;
    let msgs = messages(&g, n);
    let temp = topology::converting_queue(&q);
    let into_temp = fleet_gateway::convert::temp_exchange(&q);
    queue_behind(&conn, &temp, temp_arguments(), &into_temp).await;
    publish(&conn, &into_temp, &msgs[..60]).await;
    publish(&conn, topology::MSG_EXCHANGE, &msgs[40..]).await;
    let out = convert(url, &[&q]);
    assert_eq!(
        text(&out).trim(),
        format!("{q}: moved {n}, converted to quorum (an interrupted conversion finished) (20 duplicate(s) skipped)")
    );
    let got = drain(&conn, &q, n).await;
    assert_eq!(got, msgs.iter().map(|m| m.seen.clone()).collect::<Vec<_>>());

    // Step 2 interrupted: the quorum inbox holds 0..60, the temporary queue still 50..150.
    let g = gid();
    let q = topology::inbox_queue(&g);
    let msgs = messages(&g, n);
    let temp = topology::converting_queue(&q);
    let into_temp = fleet_gateway::convert::temp_exchange(&q);
    let back = fleet_gateway::convert::back_exchange(&q);
    queue_behind(
        &conn,
        &q,
        topology::inbox_arguments(&queue_args(QueueType::Quorum)),
        &back,
    )
    .await;
    queue_behind(&conn, &temp, temp_arguments(), &into_temp).await;
    publish(&conn, &back, &msgs[..60]).await;
    publish(&conn, &into_temp, &msgs[50..]).await;
    let out = convert(url, &[&q]);
    assert_eq!(
        text(&out).trim(),
        format!("{q}: moved 90, converted to quorum (an interrupted conversion finished) (10 duplicate(s) skipped)")
    );
    let got = drain(&conn, &q, n).await;
    assert_eq!(got, msgs.iter().map(|m| m.seen.clone()).collect::<Vec<_>>());
    assert_eq!(exists(&conn, &temp).await, None, "{temp} removed");
    for gone in [into_temp, back] {
        assert!(!exchange_exists(&conn, &gone).await, "{gone} removed");
    }
}

fn gid_like(i: usize) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, format!("{i}-{}", gid()).as_bytes()).to_string()
}

/// Everything in quorum inbox `q`, in order, acked (the queue ends empty).
async fn drain(conn: &Connection, q: &str, expect: usize) -> Vec<Seen> {
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

fn convert(url: &str, queues: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fleet-gateway"))
        .env_clear()
        .env("FLEET_AMQP_URL", url)
        .arg("convert-inboxes")
        .args(queues)
        .output()
        .expect("convert-inboxes runs")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A gateway process, killed on drop.
struct Gateway {
    child: Child,
    listen: u16,
    log: PathBuf,
}

impl Gateway {
    fn start(dir: &Path, host: &str, state: &str, url: &str) -> Gateway {
        let listen = free_port();
        let log = dir.join(format!("{host}-{state}-{listen}.log"));
        let out = std::fs::File::create(&log).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_fleet-gateway"))
            .env_clear()
            .env("FLEET_HOST_ID", host)
            .env("FLEET_AMQP_URL", url)
            .env("FLEET_QUEUE_TYPE", "quorum")
            .env("FLEET_SIGNING_KEY_FILE", dir.join(format!("{host}.key")))
            .env("FLEET_PEERS_FILE", dir.join("peers.toml"))
            .env("FLEET_HERDR_SOCKET", dir.join("herdr.sock"))
            .env("FLEET_LISTEN", format!("127.0.0.1:{listen}"))
            .env("FLEET_ADMIN_TOKEN", ADMIN)
            .env("FLEET_STATE_DIR", dir.join(state))
            .env("FLEET_HEARTBEAT_MS", "1000")
            .env("FLEET_AMQP_HEARTBEAT_S", "2")
            .stdout(out.try_clone().expect("log"))
            .stderr(out)
            .spawn()
            .expect("gateway starts");
        Gateway { child, listen, log }
    }

    fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.listen)) else {
            return (0, String::new());
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
        let req = format!(
            "{method} {path} HTTP/1.0\r\nHost: x\r\nAuthorization: Bearer {ADMIN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if s.write_all(req.as_bytes()).is_err() {
            return (0, String::new());
        }
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer);
        let code = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default().to_string();
        (code, body)
    }

    fn readyz(&self) -> (u16, String) {
        self.http("GET", "/readyz", "")
    }

    /// Waits until `/readyz` answers (any status), then until `want` or the deadline.
    fn wait_ready(&self, want: u16, secs: u64) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let r = self.readyz();
            if r.0 == want || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn register_main(&self, gid: &str) -> (u16, String) {
        self.http(
            "POST",
            "/v1/entities",
            &format!(r#"{{"role":"main","pane":"p-{gid}","gid":"{gid}"}}"#),
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn stop(mut self) {
        sigterm(&self.child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && self.alive() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keys(dir: &Path, hosts: &[&str]) {
    let mut peers = String::from("[peers]\n");
    for h in hosts {
        let out = Command::new(env!("CARGO_BIN_EXE_fleet-gateway"))
            .env_clear()
            .args(["keygen", "--host", h, "--out"])
            .arg(dir.join(format!("{h}.key")))
            .output()
            .expect("keygen");
        assert!(out.status.success(), "{}", text(&out));
        peers.push_str(&String::from_utf8_lossy(&out.stdout));
    }
    std::fs::write(dir.join("peers.toml"), peers).expect("peers");
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

/// CLU-2, CLU-3 (CON-2 by passive declare, CON-1's takeover), CLU-7 at the gateway.
async fn gateways(url: &str) {
    let conn = connect(url).await;
    let dir = scratch("gw");
    let suffix = &gid()[..8];
    let (host_a, host_b) = (format!("a{suffix}"), format!("b{suffix}"));
    keys(&dir, &[&host_a, &host_b]);
    let main = gid();
    let inbox = topology::inbox_queue(&main);
    let quorum = queue_args(QueueType::Quorum);

    // CLU-2: a quorum-mode gateway declares its queues quorum; its inbox has CLU-3/4's arguments.
    let a = Gateway::start(&dir, &host_a, "state-a", url);
    let (code, body) = a.wait_ready(200, 60);
    assert_eq!(code, 200, "gateway a ready: {body}\n{}", a.log());
    let (code, body) = a.register_main(&main);
    assert_eq!(code, 201, "register: {body}\n{}", a.log());
    assert!(
        holds_as(&conn, &inbox, topology::inbox_arguments(&quorum)).await,
        "the inbox is quorum with the gateway's arguments"
    );
    assert!(holds_as(&conn, topology::DLQ, topology::dlq_arguments(&quorum)).await);
    assert!(
        holds_as(
            &conn,
            &topology::control_queue(&host_a),
            topology::control_arguments(&quorum)
        )
        .await
    );
    assert_eq!(exists(&conn, &inbox).await.map(|(_, c)| c), Some(1), "one consumer");
    assert!(
        !a.log().contains("ERROR"),
        "a healthy quorum-mode start logs no ERROR:\n{}",
        a.log()
    );

    // CLU-3: a second gateway with the same entity is refused by the passive declare.
    copy_dir(&dir.join("state-a"), &dir.join("state-b"));
    let mut b = Gateway::start(&dir, &host_b, "state-b", url);
    let (code, body) = b.wait_ready(503, 30);
    std::thread::sleep(Duration::from_secs(2));
    let (code2, body2) = b.readyz();
    assert_eq!((code, code2), (503, 503), "{body}\n{body2}\n{}", b.log());
    assert!(body2.contains(&inbox), "/readyz names the inbox: {body2}");
    let log = b.log();
    let refusal = log
        .lines()
        .find(|l| l.contains("ERROR") && l.contains(&main))
        .unwrap_or_else(|| panic!("an ERROR line naming the gid:\n{log}"));
    assert!(refusal.contains("already has 1 consumer(s)"), "{refusal}");
    assert_eq!(
        log.lines().filter(|l| l.contains("ERROR")).count(),
        1,
        "the retries repeat nothing at ERROR:\n{log}"
    );
    assert_eq!(
        exists(&conn, &inbox).await.map(|(_, c)| c),
        Some(1),
        "never two consumers"
    );
    assert!(b.alive());

    // CON-1: once the holder is gone, the second gateway takes the inbox over.
    a.stop();
    let (code, body) = b.wait_ready(200, 20);
    assert_eq!(code, 200, "takeover: {body}\n{}", b.log());
    b.stop();

    // CLU-7: a classic inbox met in quorum mode (registered while it is classic, as the suite
    // does): that entity registered but not ready, the others served, no exit.
    let other = gid();
    let other_inbox = topology::inbox_queue(&other);
    let _ = classic_inbox(&conn, &other, 3).await;
    let mut a = Gateway::start(&dir, &host_a, "state-a", url);
    assert_eq!(a.wait_ready(200, 60).0, 200, "{}", a.log());
    let (code, body) = a.register_main(&other);
    assert_eq!(code, 202, "registered, not ready: {body}\n{}", a.log());
    assert!(
        body.contains("\"ready\":false") && body.contains(&other_inbox),
        "{body}"
    );
    std::thread::sleep(Duration::from_secs(3));
    let (code, body) = a.readyz();
    assert_eq!(code, 503, "{body}\n{}", a.log());
    let status: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(status["connected"], true, "{body}");
    assert_eq!(status["entities"][&main], "ready", "the other entity is served: {body}");
    let why = status["entities"][&other]["failed"].as_str().unwrap_or_default();
    assert!(
        why.contains(&other_inbox) && why.contains(&format!("scripts/convert-inboxes {other_inbox}")),
        "{why}"
    );
    let log = a.log();
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains(&format!("scripts/convert-inboxes {other_inbox}"))),
        "{log}"
    );
    assert_eq!(
        exists(&conn, &other_inbox).await,
        Some((3, 0)),
        "the classic inbox is left alone"
    );
    assert!(a.alive(), "no exit, no crash loop:\n{log}");
    let out = convert(url, &[&other_inbox]);
    assert!(out.status.success(), "{}", text(&out));
    let (code, body) = a.wait_ready(200, 20);
    assert_eq!(code, 200, "ready once converted: {body}\n{}", a.log());
    assert_eq!(exists(&conn, &other_inbox).await.map(|(_, c)| c), Some(1));
    a.stop();
    // A restart serves it too (it stayed registered).
    let a = Gateway::start(&dir, &host_a, "state-a", url);
    let (code, body) = a.wait_ready(200, 60);
    assert_eq!(code, 200, "{body}\n{}", a.log());
    a.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

/// `convert-inboxes` of a 200-message inbox: order, ids, routing keys, properties, bindings;
/// then a rerun is a no-op.
async fn conversion(url: &str) {
    let conn = connect(url).await;
    let g = gid();
    let (q, mut sent) = classic_inbox(&conn, &g, 190).await;
    // Ten more through the default exchange, keyed by the queue's name (as a test may seed an
    // inbox): they come back keyed by their envelope's `to`, as bridge.msg would have routed them.
    let more: Vec<Msg> = messages(&g, 10);
    publish_keyed(&conn, "", &more, Some(&q)).await;
    sent.extend(more.into_iter().map(|m| m.seen));
    let out = convert(url, &[&q]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert_eq!(said.trim(), format!("{q}: moved 200, converted to quorum"));
    let quorum = queue_args(QueueType::Quorum);
    assert!(holds_as(&conn, &q, topology::inbox_arguments(&quorum)).await);
    assert_eq!(exists(&conn, &topology::converting_queue(&q)).await, None);
    for gone in [
        fleet_gateway::convert::temp_exchange(&q),
        fleet_gateway::convert::back_exchange(&q),
    ] {
        assert!(!exchange_exists(&conn, &gone).await, "{gone} removed");
    }
    let out = convert(url, &[&q]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        text(&out).trim(),
        format!("{q}: moved 0, already quorum, nothing to do")
    );
    let got = drain(&conn, &q, 200).await;
    assert_eq!(got.len(), 200);
    assert_eq!(got, sent, "order, ids, routing keys, bodies and properties kept");
    // The bindings its name implies are back.
    let ch = conn.create_channel().await.expect("channel");
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .expect("confirms");
    let routed = ch
        .basic_publish(
            topology::MSG_EXCHANGE.into(),
            g.as_str().into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            b"after",
            BasicProperties::default(),
        )
        .await
        .expect("publish")
        .await
        .expect("confirm");
    assert!(routed.take_message().is_none(), "routed by its gid again");

    let out = convert(url, &["agent.not-a-gid.inbox.v2"]);
    assert!(!out.status.success());
    let missing = topology::inbox_queue(&gid());
    let out = convert(url, &[&missing]);
    assert!(!out.status.success());
    assert!(text(&out).contains("no such queue"), "{}", text(&out));
}

/// SIGKILLs at many points of a 400-message conversion; each rerun converges, and the inbox ends
/// with every message once, in order.
async fn kills(url: &str) {
    let conn = connect(url).await;
    let n = 400;
    for (round, delay_ms) in [5u64, 30, 60, 90, 120, 150, 180, 220, 260, 300, 350, 420]
        .into_iter()
        .enumerate()
    {
        let g = gid();
        let (q, sent) = classic_inbox(&conn, &g, n).await;
        let mut child = Command::new(env!("CARGO_BIN_EXE_fleet-gateway"))
            .env_clear()
            .env("FLEET_AMQP_URL", url)
            .args(["convert-inboxes", &q])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        // A second kill, sooner, in every other round: a rerun interrupted too.
        if round % 2 == 1 {
            let mut again = Command::new(env!("CARGO_BIN_EXE_fleet-gateway"))
                .env_clear()
                .env("FLEET_AMQP_URL", url)
                .args(["convert-inboxes", &q])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn");
            std::thread::sleep(Duration::from_millis(delay_ms / 2 + 20));
            let _ = again.kill();
            let _ = again.wait();
        }
        let out = convert(url, &[&q]);
        assert!(out.status.success(), "round {round}: {}", text(&out));
        eprintln!("kill at {delay_ms} ms, then: {}", text(&out).trim());
        let out = convert(url, &[&q]);
        assert!(
            text(&out).contains("moved 0, already quorum"),
            "round {round}: {}",
            text(&out)
        );
        let got = drain(&conn, &q, n).await;
        let ids: Vec<&str> = got.iter().map(|s| s.id.as_str()).collect();
        let want: Vec<&str> = sent.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(
            ids.len(),
            n,
            "round {round} (kill at {delay_ms} ms): every message once"
        );
        assert_eq!(ids, want, "round {round} (kill at {delay_ms} ms): in order");
        assert_eq!(got, sent, "round {round}: properties kept");
    }
}

#[test]
#[ignore = "needs RabbitMQ (FLEET_TEST_AMQP_URL, or Debian's rabbitmq-server to start one)"]
fn cluster_profile_on_a_real_broker() {
    let node;
    let url = match std::env::var("FLEET_TEST_AMQP_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            assert!(
                Path::new(SERVER).exists(),
                "set FLEET_TEST_AMQP_URL or install rabbitmq-server (scripts/setup)"
            );
            node = Node::start();
            node.url.clone()
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let _ = connect(&url).await;
        conversion(&url).await;
        resumes(&url).await;
        kills(&url).await;
        gateways(&url).await;
    });
}
