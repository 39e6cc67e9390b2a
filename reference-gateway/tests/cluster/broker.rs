//! A broker for the cluster tests: a throwaway RabbitMQ node (or the one `FLEET_TEST_AMQP_URL`
//! names), and what the tests ask it (does a queue or exchange exist, with which arguments).

use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fleet_gateway::config::{QueueArgs, QueueType};
use fleet_gateway::topology;
use lapin::options::{ExchangeDeclareOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Connection, ConnectionProperties, ExchangeKind};

pub(crate) const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
pub(crate) const ADMIN: &str = "admin-token-0123456789";

pub(crate) fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fleet-clu-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

pub(crate) fn sigterm(child: &Child) {
    // SAFETY: signals a process this test started.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
}

/// A throwaway RabbitMQ node in its own process group, stopped (and its dir removed) on drop.
pub(crate) struct Node {
    pub(crate) child: Child,
    pub(crate) url: String,
    pub(crate) dir: PathBuf,
    /// The node's Erlang name and AMQP port (for `rabbitmqctl` and other logins).
    pub(crate) name: String,
    pub(crate) port: u16,
}

impl Node {
    pub(crate) fn start() -> Node {
        let dir = scratch("node");
        let port = free_port();
        let dist = free_port();
        for sub in ["home", "mnesia", "log"] {
            std::fs::create_dir_all(dir.join(sub)).expect("dir");
        }
        std::fs::write(dir.join("enabled_plugins"), "[].\n").expect("plugins");
        std::fs::write(dir.join("rabbitmq.conf"), "loopback_users = none\n").expect("conf");
        let log = std::fs::File::create(dir.join("server.out")).expect("log");
        let name = format!("fleetclu{}@localhost", std::process::id());
        let child = Command::new(SERVER)
            .env("HOME", dir.join("home"))
            .env("RABBITMQ_NODENAME", &name)
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
            name,
            port,
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

pub(crate) async fn connect(url: &str) -> Connection {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match Connection::connect(url, ConnectionProperties::default()).await {
            Ok(c) => return c,
            Err(e) if Instant::now() > deadline => panic!("no broker at {url}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

pub(crate) fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

pub(crate) fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

pub(crate) fn queue_args(queue_type: QueueType) -> QueueArgs {
    QueueArgs {
        queue_type,
        inbox_max_length: 1000,
        inbox_ttl: Duration::from_millis(86_400_000),
        inbox_expires: Duration::from_millis(604_800_000),
        dlq_max_length: 10_000,
    }
}

/// Whether the broker holds `queue` with exactly `args` (a declare with them is accepted).
pub(crate) async fn holds_as(conn: &Connection, queue: &str, args: FieldTable) -> bool {
    let ch = conn.create_channel().await.expect("channel");
    let ok = ch.queue_declare(queue.into(), durable(), args).await.is_ok();
    let _ = ch.close(200, "x".into()).await;
    ok
}

pub(crate) async fn exists(conn: &Connection, queue: &str) -> Option<(u32, u32)> {
    let ch = conn.create_channel().await.expect("channel");
    let found = topology::peek(&ch, queue).await.expect("passive declare");
    if found.is_some() {
        let _ = ch.close(200, "x".into()).await;
    }
    found
}

pub(crate) async fn exchange_exists(conn: &Connection, exchange: &str) -> bool {
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

pub(crate) fn gid() -> String {
    uuid::Uuid::new_v4().to_string()
}

pub(crate) fn gid_like(i: usize) -> String {
    uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, format!("{i}-{}", gid()).as_bytes()).to_string()
}
