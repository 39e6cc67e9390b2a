//! Steps of quorum_returns.feature: a message a quorum inbox delivered and got back, again and
//! again, as a gateway's connection is lost (issue 57: RabbitMQ 4.x's delivery limit).
//!
//! The returns are made from outside, as a failover makes them: the broker closes the connection
//! that holds the inbox's consumer (`DELETE /api/connections/{name}`), the gateway reconnects
//! (CON-3) and the broker delivers the held message to its new consumer. Which connection holds
//! the consumer is read from the broker (its consumer list names the channel, hence the
//! connection), never from the gateway.

use std::collections::BTreeSet;
use std::time::Duration;

use cucumber::{given, when};
use fleet_conformance::names::inbox;
use fleet_conformance::timing::wait_for;

use crate::world::FleetWorld;

#[given("gateways started from now on run quorum queues")]
async fn quorum_from_now(w: &mut FleetWorld) {
    // SPEC §16 CLU-2: the runtime contract's switch for quorum queues.
    w.gateway_env.insert("FLEET_QUEUE_TYPE".into(), "quorum".into());
}

/// The broker's name of the connection a channel (`"<peer> -> <node> (3)"`) belongs to.
fn connection_of(channel: &str) -> &str {
    channel.rsplit_once(" (").map_or(channel, |(conn, _)| conn)
}

#[when(
    regex = r#"^the broker closes the connection consuming the inbox of "([^"]+)" (\d+) times, each time once it holds (\d+) unacknowledged messages? again$"#
)]
async fn close_holder(w: &mut FleetWorld, name: String, times: u32, held: u64) -> anyhow::Result<()> {
    let q = inbox(&w.gid(&name)?);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let mut closed: BTreeSet<String> = BTreeSet::new();
    for i in 1..=times {
        let (m, vh, queue, gone) = (suite.broker.management(), vhost.as_str(), q.as_str(), &closed);
        // Held again: the broker counts the message unacked, and its consumer is on a connection
        // not closed before (the broker's lists lag: an old consumer may still show a moment).
        let holder = wait_for(
            &format!("close {i} of {times}: {q} to hold {held} unacked message(s) on a consumer of a new connection"),
            Duration::from_secs(30),
            || async move {
                let info = m.queue(vh, queue).await.map_err(|e| e.to_string())?;
                let Some(info) = info else {
                    return Err(format!("{queue} does not exist"));
                };
                if info.messages_unacknowledged != held || info.messages_ready != 0 {
                    return Err(format!(
                        "ready {} unacked {}",
                        info.messages_ready, info.messages_unacknowledged
                    ));
                }
                let consumers = m.consumers(vh).await.map_err(|e| e.to_string())?;
                consumers
                    .iter()
                    .filter(|c| c.queue == queue)
                    .filter_map(|c| c.channel.as_deref().map(connection_of))
                    .find(|conn| !gone.contains(*conn))
                    .map(|conn| Some(conn.to_string()))
                    .ok_or_else(|| "no consumer on a connection not closed yet".to_string())
            },
        )
        .await?;
        suite.broker.management().close_connection(&holder).await?;
        closed.insert(holder);
    }
    println!("closed {times} connections holding {q}'s consumer");
    Ok(())
}
