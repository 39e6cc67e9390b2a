//! A gateway whose side connection cannot be opened (`gateway/side.rs`): it still gets ready and
//! registers entities, its lookups on the main connection, and opens the side connection once the
//! broker takes it. The broker refuses it by a per-user connection limit of one (the measured case,
//! RabbitMQ 3.10 taking no new connection with its file handle cache full, is not made on purpose).

use std::process::Command;
use std::time::{Duration, Instant};

use crate::broker::{Node, gid, scratch};
use crate::gateways::{Gateway, keys};

const USER: &str = "fallback";
const PASSWORD: &str = "fallback-pass";

/// `rabbitmqctl` against the throwaway `node`.
fn ctl(node: &Node, args: &[&str]) {
    let cookie = std::fs::read_to_string(node.dir.join("home/.erlang.cookie")).expect("the node's cookie");
    let out = Command::new("rabbitmqctl")
        .args(["--erlang-cookie", cookie.trim(), "-n", &node.name])
        .args(args)
        .output()
        .expect("rabbitmqctl runs");
    assert!(
        out.status.success(),
        "rabbitmqctl {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

pub(crate) async fn side_refused(node: &Node) {
    ctl(node, &["add_user", USER, PASSWORD]);
    ctl(node, &["set_permissions", "-p", "/", USER, ".*", ".*", ".*"]);
    ctl(node, &["set_user_limits", USER, r#"{"max-connections": 1}"#]);
    let url = format!("amqp://{USER}:{PASSWORD}@127.0.0.1:{}/%2f", node.port);
    let dir = scratch("fallback");
    let host = format!("f{}", &gid()[..8]);
    keys(&dir, &[&host]);
    let a = Gateway::start(&dir, &host, "state", &url);
    let (code, body) = a.wait_ready(200, 60);
    assert_eq!(code, 200, "ready on its main connection alone: {body}\n{}", a.log());
    for _ in 0..3 {
        let (code, body) = a.register_main(&gid());
        assert_eq!(
            code,
            201,
            "registered with lookups on the main connection: {body}\n{}",
            a.log()
        );
    }
    assert!(
        a.log()
            .contains("cannot open the side connection; lookups use the main connection meanwhile"),
        "the refusal is said at WARN:\n{}",
        a.log()
    );
    ctl(node, &["clear_user_limits", USER, "max-connections"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !a.log().contains("side connection opened after earlier failures") {
        assert!(
            Instant::now() < deadline,
            "the side connection is opened once the broker takes it:\n{}",
            a.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (code, body) = a.register_main(&gid());
    assert_eq!(code, 201, "{body}\n{}", a.log());
    assert_eq!(
        a.log().matches("cannot open the side connection").count(),
        1,
        "the retries (every 5 s) are not repeated at WARN:\n{}",
        a.log()
    );
    a.stop();
    let _ = std::fs::remove_dir_all(&dir);
}
