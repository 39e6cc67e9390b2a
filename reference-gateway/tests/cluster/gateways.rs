//! CLU-2, CLU-3, CLU-7 at the gateway: real gateway processes in quorum mode against the broker.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fleet_gateway::config::QueueType;
use fleet_gateway::topology;

use crate::broker::{ADMIN, connect, exists, free_port, gid, holds_as, queue_args, scratch, sigterm};
use crate::conversion::{convert, text};
use crate::messages::classic_inbox;

/// A gateway process, killed on drop.
pub(crate) struct Gateway {
    pub(crate) child: Child,
    pub(crate) listen: u16,
    pub(crate) log: PathBuf,
}

impl Gateway {
    pub(crate) fn start(dir: &Path, host: &str, state: &str, url: &str) -> Gateway {
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

    pub(crate) fn http(&self, method: &str, path: &str, body: &str) -> (u16, String) {
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

    pub(crate) fn readyz(&self) -> (u16, String) {
        self.http("GET", "/readyz", "")
    }

    /// Waits until `/readyz` answers (any status), then until `want` or the deadline.
    pub(crate) fn wait_ready(&self, want: u16, secs: u64) -> (u16, String) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let r = self.readyz();
            if r.0 == want || Instant::now() > deadline {
                return r;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    pub(crate) fn register_main(&self, gid: &str) -> (u16, String) {
        self.http(
            "POST",
            "/v1/entities",
            &format!(r#"{{"role":"main","pane":"p-{gid}","gid":"{gid}"}}"#),
        )
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub(crate) fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub(crate) fn stop(mut self) {
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

pub(crate) fn keys(dir: &Path, hosts: &[&str]) {
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

pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("dir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
    }
}

/// CLU-2, CLU-3 (CON-2 by passive declare, CON-1's takeover), CLU-7 at the gateway.
pub(crate) async fn gateways(url: &str) {
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
