//! Steps of broadcast (SPEC §10).

use std::time::Duration;

use anyhow::ensure;
use cucumber::{then, when};
use fleet_conformance::timing::wait_for;
use serde_json::json;

use crate::world::FleetWorld;

#[when(regex = r#"^"([^"]+)" broadcasts "([^"]*)" to (?:group "([^"]+)"|everyone)$"#)]
async fn broadcasts(w: &mut FleetWorld, from: String, text: String, group: String) -> anyhow::Result<()> {
    let group = if group.is_empty() { "all".to_string() } else { group };
    let v = w
        .mcp(&from)
        .await?
        .call("bridge_broadcast", json!({"group": group, "text": text}))
        .await?;
    ensure!(v["msgId"].is_string(), "bridge_broadcast returned {v}");
    Ok(())
}

#[when(regex = r#"^"([^"]+)" broadcasts a (\d+) KiB text to group "([^"]+)"$"#)]
async fn broadcasts_big(w: &mut FleetWorld, from: String, kib: usize, group: String) -> anyhow::Result<()> {
    let line = "0123456789abcdef-fleet-large-broadcast-";
    let text: String = line.chars().cycle().take(kib * 1024).collect();
    w.notes.big_text = Some(text.clone());
    let v = w
        .mcp(&from)
        .await?
        .call("bridge_broadcast", json!({"group": group, "text": text}))
        .await?;
    ensure!(v["msgId"].is_string(), "bridge_broadcast returned {v}");
    Ok(())
}

#[then(expr = "herdr on {string} records the large text intact in {string}")]
async fn big_intact(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let want = w.notes.big_text.clone().unwrap_or_default();
    let pane = w.entity(&name)?.pane.clone();
    let h = w.host(&host)?;
    let got = wait_for("the large broadcast", Duration::from_secs(15), || {
        let inputs = h.herdr.inputs(&pane);
        async move {
            if inputs.is_empty() {
                Err("nothing yet".into())
            } else {
                Ok(Some(inputs))
            }
        }
    })
    .await?;
    ensure!(got.len() == 1, "{} injects into {name}", got.len());
    ensure!(
        got[0] == want,
        "the text arrived altered ({} bytes, expected {})",
        got[0].len(),
        want.len()
    );
    Ok(())
}

#[then(expr = "the inbox of {string} never received a message")]
async fn never_received(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let q = fleet_conformance::names::inbox(&w.gid(&name)?);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    // The broker's counters lag by up to a second: the absence is watched over a window longer
    // than that lag.
    fleet_conformance::timing::hold_for(
        &format!("{q} never receiving a message"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (suite, vhost, q) = (suite.clone(), vhost.clone(), q.clone());
            async move {
                let info = suite
                    .broker
                    .management()
                    .queue(&vhost, &q)
                    .await
                    .map_err(|e| e.to_string())?;
                let info = info.ok_or_else(|| format!("{q} does not exist"))?;
                if info.delivered_total == 0 && info.messages_ready == 0 && info.messages_unacknowledged == 0 {
                    Ok(())
                } else {
                    Err(format!("{q} received something: {info:?}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then(expr = "the broker shows {string}'s own copy delivered and dropped")]
async fn own_copy_dropped(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let q = fleet_conformance::names::inbox(&w.gid(&name)?);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    wait_for(&format!("{q}: own copy acked"), Duration::from_secs(10), || {
        let (suite, vhost, q) = (suite.clone(), vhost.clone(), q.clone());
        async move {
            match suite.broker.management().queue(&vhost, &q).await {
                Ok(Some(i)) if i.acked_total >= 1 && i.messages_ready == 0 && i.messages_unacknowledged == 0 => {
                    Ok(Some(()))
                }
                Ok(i) => Err(format!("{i:?}")),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    let v = w.mcp(&name).await?.call("bridge_poll", json!({})).await?;
    ensure!(
        fleet_conformance::contract::poll_messages(&v)?.is_empty(),
        "{name} drained its own broadcast: {v}"
    );
    Ok(())
}

/// BRD-3 on the broker, where a stopped entity's copy would be: a gateway that left the stopped
/// entity's inbox (or its bindings) behind gets the broadcast routed into it, and a later
/// consumer of that queue would be handed it. Read by passive declare (exact counts, no
/// management lag) over a window, after the broadcast reached the other members.
#[then(expr = "no queue holds a copy of the broadcast for {string} over a window")]
async fn no_copy_for(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let q = fleet_conformance::names::inbox(&w.gid(&name)?);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let lb = fleet_conformance::legacy::LegacyBroker::connect(&suite.broker.amqp_url(&vhost)).await?;
    let held = fleet_conformance::timing::hold_for(
        &format!("no copy in {q} for the stopped {name}"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (lb, q) = (&lb, q.as_str());
            async move {
                match lb.queue_state(q).await {
                    Ok(None) => Ok(()),
                    Ok(Some(s)) if s.messages == 0 => Ok(()),
                    Ok(Some(s)) => Err(format!("{q} still exists and holds {} message(s): {s:?}", s.messages)),
                    Err(e) => Err(format!("a passive declare of {q} failed: {e}")),
                }
            }
        },
    )
    .await;
    lb.close().await;
    held?;
    Ok(())
}
