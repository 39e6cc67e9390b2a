//! The [C-7] grace (SIG-2): a message whose sender's presence is announced only once the
//! receiving gateway holds it must be waited for (up to a heartbeat), not rejected.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::envelope::new_uuid;
use fleet_conformance::names::inbox;
use fleet_conformance::probe::{Captured, Crafted};
use fleet_conformance::timing::wait_for;
use serde_json::json;

use crate::world::FleetWorld;

use super::craft::valid_send;
use super::{FAKE_TTL, fake_gid, key, poll_until, tap};

/// Publishes a valid SEND from a fresh fake entity `name` on host "probe" to `main`, waits until
/// the main's gateway has taken it off the queue (passive declare: no ready message left), and
/// only then announces `name`'s presence. A gateway that judges `from` at once rejects it before
/// the presence exists; one that waits ([C-7], up to a heartbeat) accepts it once it lands.
#[when(
    expr = "the probe sends a valid message to {string} from {string}, announcing {string} only once the gateway holds it"
)]
async fn sends_before_presence(w: &mut FleetWorld, main: String, name: String, _again: String) -> anyhow::Result<()> {
    let gid = new_uuid();
    w.wire.fakes.insert(name.clone(), gid.clone());
    let to = w.gid(&main)?;
    let text = format!("early message {}", new_uuid());
    let (env, body) = valid_send(w, &name, &to, &text)?;
    let probe = w.probe().await?;
    probe
        .publish(&Crafted::from_envelope("bridge.msg", &to, &env, &body))
        .await?;
    w.wire.valid_texts.push(text);
    w.wire.last_valid = Some(env.clone());
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let lb = fleet_conformance::legacy::LegacyBroker::connect(&suite.broker.amqp_url(&vhost)).await?;
    let q = inbox(&to);
    let taken = wait_for(
        &format!("the gateway of {main} to take the early message off {q}"),
        Duration::from_secs(10),
        || {
            let (lb, q) = (&lb, q.as_str());
            async move {
                match lb.queue_state(q).await {
                    Ok(Some(s)) if s.messages == 0 => Ok(Some(())),
                    Ok(Some(s)) => Err(format!("{q}: {s:?}")),
                    Ok(None) => Err(format!("{q} does not exist")),
                    Err(e) => Err(e.to_string()),
                }
            }
        },
    )
    .await;
    lb.close().await;
    taken?;
    probe.announce(&key(w, "probe")?, &gid, "worker", FAKE_TTL).await?;
    Ok(())
}

#[then(expr = "{string} drains the message from {string}, which was never dead-lettered")]
async fn drains_early(w: &mut FleetWorld, main: String, name: String) -> anyhow::Result<()> {
    let env = w
        .wire
        .last_valid
        .clone()
        .ok_or_else(|| anyhow!("the probe sent no valid message"))?;
    let id = env.msg_id().to_string();
    let from = fake_gid(w, &name)?;
    let m = poll_until(w, &main, |m| m["msgId"] == json!(id)).await?;
    ensure!(
        m["from"] == json!(from),
        "drained {m}, expected it from {name} ({from})"
    );
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    let dead: Vec<Captured> = dlx
        .fetch()
        .await?
        .into_iter()
        .filter(|c| c.message_id().as_deref() == Some(id.as_str()))
        .collect();
    ensure!(dead.is_empty(), "the early message was dead-lettered too: {dead:?}");
    Ok(())
}
