//! Channel ids under refusals retried (`gateway/side.rs`): lapin keeps the id of every channel
//! the broker closed, and a refused inbox is looked at again every few seconds. A gateway whose
//! inboxes are refused by the thousand, rounds after rounds, must still open every inbox once
//! the refusals end, and still register a new entity.

use fleet_gateway::topology;
use lapin::options::QueueDeleteOptions;

use crate::broker::{connect, exists, gid, scratch};
use crate::gateways::{Gateway, keys};
use crate::messages::classic_inbox;

/// Entities refused at once: each attach costs two broker-closed channels (the CLU-7 probe's 404
/// and the declaration's 406), so one round alone is more than the 2,047 ids of a connection.
const REFUSED: usize = 1_100;

/// Side connections the retries must have gone through before the refusals end: four replaced
/// ones are about 7,900 broker-closed channels, almost four times a connection's ids.
const SIDE_CONNECTIONS: usize = 5;

/// CLU-7 refusals of [`REFUSED`] entities (classic inboxes met in quorum mode) retried until
/// [`SIDE_CONNECTIONS`] side connections were used, then the classic inboxes removed: every
/// entity is served, and a new one registers.
pub(crate) async fn refusals_retried(url: &str) {
    let conn = connect(url).await;
    let dir = scratch("ids");
    let host = format!("c{}", &gid()[..8]);
    keys(&dir, &[&host]);
    let gids: Vec<String> = (0..REFUSED).map(|_| gid()).collect();
    for g in &gids {
        let _ = classic_inbox(&conn, g, 0).await;
    }
    let a = Gateway::start(&dir, &host, "state", url);
    let (code, body) = a.wait_ready(200, 60);
    assert_eq!(code, 200, "gateway ready: {body}\n{}", a.log());
    for (i, g) in gids.iter().enumerate() {
        let (code, body) = a.register_main(g);
        assert_eq!(
            code,
            202,
            "registration {i} of {REFUSED}: registered, not served (CLU-7): {body}\n{}",
            tail(&a.log())
        );
    }
    let wanted = format!("number={SIDE_CONNECTIONS} ");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    while !a
        .log()
        .lines()
        .any(|l| l.contains("side connection opened") && l.contains(&wanted))
    {
        assert!(
            std::time::Instant::now() < deadline,
            "side connection #{SIDE_CONNECTIONS} never opened while {REFUSED} refusals were retried:\n{}",
            tail(&a.log())
        );
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    let ch = conn.create_channel().await.expect("channel");
    for g in &gids {
        ch.queue_delete(topology::inbox_queue(g).as_str().into(), QueueDeleteOptions::default())
            .await
            .expect("delete a classic inbox");
    }
    let _ = ch.close(200, "x".into()).await;
    let (code, body) = a.wait_ready(200, 120);
    assert_eq!(
        code,
        200,
        "every inbox served once the refusals end: {body}\n{}",
        tail(&a.log())
    );
    for g in [&gids[0], &gids[REFUSED / 2], &gids[REFUSED - 1]] {
        assert_eq!(exists(&conn, &topology::inbox_queue(g)).await.map(|(_, c)| c), Some(1));
    }
    let (code, body) = a.register_main(&gid());
    assert_eq!(code, 201, "a new entity registers: {body}\n{}", tail(&a.log()));
    a.stop();
    let _ = std::fs::remove_dir_all(&dir);
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
