//! The form of the queues a quorum-mode gateway declares (SPEC §16 CLU-2, CLU-3, CLU-4), as the
//! management API shows it (CONTRACT §11 "Queue form").
//!
//! Split out of the cluster steps (by what they judge) to keep each file short.

use std::time::Duration;

use anyhow::{bail, ensure};
use cucumber::then;
use fleet_conformance::names::{control_queue, inbox, roster_queue};
use fleet_conformance::timing::wait_for;
use serde_json::{Value, json};

use crate::world::FleetWorld;

/// The management view of one queue, waited for (the API lists a new queue within a second).
async fn queue_info(w: &mut FleetWorld, queue: &str) -> anyhow::Result<fleet_conformance::broker::QueueInfo> {
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let m = suite.broker.management();
    Ok(wait_for(
        &format!("{queue} listed by the broker"),
        Duration::from_secs(10),
        || async {
            match m.queue(&vhost, queue).await {
                Ok(Some(q)) => Ok(Some(q)),
                Ok(None) => Err(format!("{queue} is not listed")),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await?)
}

fn arg<'a>(q: &'a fleet_conformance::broker::QueueInfo, name: &str) -> Option<&'a Value> {
    q.arguments.get(name)
}

#[then(
    regex = r#"^the inbox of "([^"]+)" is a quorum queue with a single active consumer, reject-publish overflow and at-least-once dead-lettering$"#
)]
async fn quorum_inbox(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let gid = match (w.entities.get(&name), &w.cluster.seeded) {
        (Some(e), _) => e.gid.clone(),
        (None, Some(s)) if s.name == name => s.gid.clone(),
        _ => bail!("no entity {name:?} in this scenario"),
    };
    let q = queue_info(w, &inbox(&gid)).await?;
    let want = [
        ("x-queue-type", json!("quorum"), "CLU-2"),
        ("x-single-active-consumer", json!(true), "CLU-3"),
        ("x-overflow", json!("reject-publish"), "CLU-4"),
        ("x-dead-letter-strategy", json!("at-least-once"), "CLU-4"),
        ("x-dead-letter-exchange", json!("bridge.dlx"), "TOP-2"),
    ];
    for (k, v, id) in want {
        ensure!(
            arg(&q, k) == Some(&v),
            "{id}: the inbox of {name} has {k} = {:?}, expected {v}; arguments: {:?}",
            arg(&q, k),
            q.arguments
        );
    }
    for k in ["x-max-length", "x-message-ttl", "x-expires"] {
        ensure!(
            arg(&q, k).is_some_and(Value::is_number),
            "TOP-2: the quorum inbox of {name} lacks {k}: {:?}",
            q.arguments
        );
    }
    ensure!(q.durable, "the inbox of {name} is not durable");
    Ok(())
}

#[then(regex = r#"^the control queues of "([^"]+)" and "([^"]+)" are quorum queues$"#)]
async fn quorum_control(w: &mut FleetWorld, a: String, b: String) -> anyhow::Result<()> {
    for host in [a, b] {
        let q = queue_info(w, &control_queue(&host)).await?;
        ensure!(
            arg(&q, "x-queue-type") == Some(&json!("quorum")) && q.durable,
            "CLU-2: control.{host} is not a durable quorum queue: {:?}",
            q.arguments
        );
    }
    Ok(())
}

#[then("the dead-letter queue is a quorum queue that drops its oldest message when full")]
async fn quorum_dlq(w: &mut FleetWorld) -> anyhow::Result<()> {
    let q = queue_info(w, "bridge.dlq").await?;
    ensure!(
        arg(&q, "x-queue-type") == Some(&json!("quorum")),
        "CLU-2: bridge.dlq is not a quorum queue: {:?}",
        q.arguments
    );
    // drop-head is the overflow a queue has when none is named (CAP-5).
    ensure!(
        arg(&q, "x-overflow").is_none() || arg(&q, "x-overflow") == Some(&json!("drop-head")),
        "CLU-4/CAP-5: bridge.dlq must keep drop-head: {:?}",
        q.arguments
    );
    ensure!(
        arg(&q, "x-max-length").is_some_and(Value::is_number),
        "CAP-5: bridge.dlq is not capped: {:?}",
        q.arguments
    );
    Ok(())
}

#[then(regex = r#"^the roster queues of "([^"]+)" and "([^"]+)" are exclusive classic queues$"#)]
async fn classic_rosters(w: &mut FleetWorld, a: String, b: String) -> anyhow::Result<()> {
    for host in [a, b] {
        let q = queue_info(w, &roster_queue(&host)).await?;
        let kind = arg(&q, "x-queue-type");
        ensure!(
            (kind.is_none() || kind == Some(&json!("classic"))) && q.exclusive,
            "CLU-2: roster.{host} must stay an exclusive classic queue: exclusive {}, {:?}",
            q.exclusive,
            q.arguments
        );
    }
    Ok(())
}
