//! `convert-inboxes` (CLU-7): order, ids, properties and bindings kept, a rerun, the states a
//! kill leaves, and SIGKILLs at any point.

use std::process::{Command, Stdio};
use std::time::Duration;

use fleet_gateway::config::QueueType;
use fleet_gateway::topology;
use lapin::BasicProperties;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};

use crate::broker::{connect, exchange_exists, exists, gid, holds_as, queue_args};
use crate::messages::{Msg, classic_inbox, drain, messages, publish, publish_keyed, queue_behind, temp_arguments};

/// The two states a kill between a batch's confirm and its ack leaves, made by hand: the batch's
/// head both at the tail of the destination and at the head of the source. The rerun skips
/// exactly the copies and ends with every message once, in order.
pub(crate) async fn resumes(url: &str) {
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

pub(crate) fn convert(url: &str, queues: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_fleet-gateway"))
        .env_clear()
        .env("FLEET_AMQP_URL", url)
        .arg("convert-inboxes")
        .args(queues)
        .output()
        .expect("convert-inboxes runs")
}

pub(crate) fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `convert-inboxes` of a 200-message inbox: order, ids, routing keys, properties, bindings;
/// then a rerun is a no-op.
pub(crate) async fn conversion(url: &str) {
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
pub(crate) async fn kills(url: &str) {
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
