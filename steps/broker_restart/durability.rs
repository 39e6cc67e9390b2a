//! What gateways publish and declare, and what survives the restart (SPEC §1, §2): the probe's
//! durable copy of the wire (a named queue, read through the scenario's probe, which connects
//! again after each restart: [`FleetWorld::probe`]), every
//! message persistent but ASK and ANSWER, every queue durable but the roster queues, and the
//! queues of before the restart there again.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then};
use fleet_conformance::timing::{scaled, wait_for};
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::{restarts, vhost_of};

/// Kind names of a list like `ASK, ANSWER, SEND and PRESENCE`.
fn kinds(list: &str) -> Vec<String> {
    list.split([',', ' '])
        .map(str::trim)
        .filter(|k| !k.is_empty() && *k != "and")
        .map(str::to_string)
        .collect()
}

/// How long one look at the broker through the probe may take (nominal).
const PROBE_BOUND: Duration = Duration::from_secs(30);

/// Runs `f` within the (scaled) [`PROBE_BOUND`]: a probe that hangs fails the step, saying what.
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let bound = scaled(PROBE_BOUND);
    tokio::time::timeout(bound, f)
        .await
        .map_err(|_| anyhow!("{what} did not finish within {bound:?}"))?
}

#[given("the probe keeps a durable copy of what is published on bridge.msg, bridge.roster and bridge.control")]
async fn durable_copy(w: &mut FleetWorld) -> anyhow::Result<()> {
    vhost_of(w)?;
    let queue = format!("probe.durable-copy.{}", uuid::Uuid::new_v4().simple());
    // bridge.control is a direct exchange: one binding per host that runs a gateway (a binding
    // for any other key would make an unroutable SPAWN routable).
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    let mut bindings: Vec<(&str, &str)> = vec![("bridge.msg", "#"), ("bridge.roster", "#")];
    bindings.extend(hosts.iter().map(|h| ("bridge.control", h.as_str())));
    bounded("declaring the durable copy", async {
        let probe = w.probe().await?;
        probe.durable_tap(&queue, &bindings).await.map(drop)?;
        Ok(())
    })
    .await?;
    w.notes.restart.copy = Some((queue, Vec::new()));
    Ok(())
}

/// Takes what the durable copy received since the last look (marked with the number of restarts
/// so far) and returns everything it ever received.
pub(super) async fn fetch_copy(w: &mut FleetWorld) -> anyhow::Result<Vec<Value>> {
    let (queue, mut captured) = w
        .notes
        .restart
        .copy
        .clone()
        .ok_or_else(|| anyhow!("no durable copy: add \"the probe keeps a durable copy of …\""))?;
    vhost_of(w)?;
    // Which part of the look is under way, for the error should one hang.
    let stage = std::sync::Mutex::new("connecting the probe (again, after a restart)");
    let set = |now: &'static str| *stage.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
    let fetched = bounded(&format!("reading the durable copy {queue}"), async {
        let probe = w.probe().await?;
        set("opening a channel");
        let tap = probe.reattach(&queue).await?;
        set("fetching");
        Ok(tap.fetch().await?)
    })
    .await
    .map_err(|e| {
        let at = *stage.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        anyhow!("{e} (it was {at})")
    })?;
    let generation = restarts(w);
    for m in fetched {
        captured.push(json!({
            "kind": m.header_str("kind"),
            "host": m.header_str("host"),
            "msgId": m.header_str("msgId"),
            "exchange": m.exchange,
            "routingKey": m.routing_key,
            "deliveryMode": m.properties.delivery_mode(),
            "restarts": generation,
            "from": m.header_str("from"),
            "ts": m.header_str("ts").and_then(|t| t.parse::<u64>().ok()),
            "state": serde_json::from_slice::<Value>(&m.body).ok().and_then(|b| b["state"].as_str().map(str::to_string)),
        }));
    }
    w.notes.restart.copy = Some((queue, captured.clone()));
    Ok(captured)
}

#[then(
    regex = r#"^every message the durable copy holds from a gateway( since the restart)? is persistent but ASK and ANSWER, among them (.+)$"#
)]
async fn copy_is_persistent(w: &mut FleetWorld, since: String, required: String) -> anyhow::Result<()> {
    let all = fetch_copy(w).await?;
    let gateways: BTreeSet<String> = w.hosts.keys().cloned().collect();
    let from = if since.is_empty() { 0 } else { restarts(w) };
    ensure!(
        from > 0 || since.is_empty(),
        "the broker was not restarted in this scenario"
    );
    let mine: Vec<&Value> = all
        .iter()
        .filter(|m| m["host"].as_str().is_some_and(|h| gateways.contains(h)))
        .filter(|m| m["restarts"].as_u64().unwrap_or(0) >= from)
        .collect();
    let mut wrong = Vec::new();
    for m in &mine {
        let kind = m["kind"].as_str().unwrap_or_default();
        let expected = if matches!(kind, "ASK" | "ANSWER") { 1 } else { 2 };
        if m["deliveryMode"].as_u64() != Some(expected) {
            wrong.push(format!(
                "{kind} from host {} on {} · {}: delivery_mode {} (expected {expected})",
                m["host"].as_str().unwrap_or("?"),
                m["exchange"].as_str().unwrap_or("?"),
                m["routingKey"].as_str().unwrap_or("?"),
                m["deliveryMode"]
            ));
        }
    }
    ensure!(
        wrong.is_empty(),
        "SPEC §2: every kind but ASK and ANSWER is persistent (delivery_mode 2), ASK and ANSWER are 1:\n{}",
        wrong.join("\n")
    );
    let present: BTreeSet<&str> = mine.iter().filter_map(|m| m["kind"].as_str()).collect();
    let missing: Vec<String> = kinds(&required)
        .into_iter()
        .filter(|k| !present.contains(k.as_str()))
        .collect();
    ensure!(
        missing.is_empty(),
        "the durable copy holds no {missing:?} from a gateway{since} (it holds {present:?}, {} message(s))",
        mine.len()
    );
    Ok(())
}

#[then("every queue the gateways declared is durable but the roster queues, which are exclusive and auto-delete")]
async fn queues_durable(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = vhost_of(w)?;
    let copy = w.notes.restart.copy.as_ref().map(|(q, _)| q.clone());
    let rosters: BTreeSet<String> = w.hosts.keys().map(|h| format!("roster.{h}")).collect();
    // The management API lists a queue a moment after its declaration: wait until every host's
    // roster queue is listed (after a restart the gateways declare them again).
    let queues = queues_listed(&suite, &vhost, &rosters, "every host's roster queue to be listed").await?;
    let mut wrong = Vec::new();
    let mut declared = Vec::new();
    for q in queues.iter().filter(|q| Some(&q.name) != copy.as_ref()) {
        if rosters.contains(&q.name) {
            if q.durable || !q.exclusive || !q.auto_delete {
                wrong.push(format!(
                    "{}: durable={} exclusive={} auto_delete={}, expected a transient exclusive auto-delete queue",
                    q.name, q.durable, q.exclusive, q.auto_delete
                ));
            }
        } else {
            declared.push(q.name.clone());
            if !q.durable {
                wrong.push(format!("{}: not durable", q.name));
            }
        }
    }
    ensure!(
        wrong.is_empty(),
        "SPEC §1: every queue but roster.<host> is durable:\n{}",
        wrong.join("\n")
    );
    if restarts(w) == 0 {
        w.notes.restart.queues_before = Some(declared.into_iter().collect());
    }
    Ok(())
}

#[then("every queue the gateways declared before the restart is there again")]
async fn queues_back(w: &mut FleetWorld) -> anyhow::Result<()> {
    let before: BTreeSet<String> = w
        .notes
        .restart
        .queues_before
        .clone()
        .ok_or_else(|| anyhow!("the queues were not looked at before the restart"))?;
    ensure!(!before.is_empty(), "no gateway queue was seen before the restart");
    let suite = w.suite()?;
    let vhost = vhost_of(w)?;
    queues_listed(&suite, &vhost, &before, "the queues of before the restart").await?;
    Ok(())
}

/// Waits until the management API lists every queue of `names` (it lists a queue a moment after
/// its declaration), and returns every queue of the vhost as then listed.
async fn queues_listed(
    suite: &std::sync::Arc<crate::world::Suite>,
    vhost: &str,
    names: &BTreeSet<String>,
    what: &str,
) -> anyhow::Result<Vec<fleet_conformance::broker::QueueInfo>> {
    Ok(wait_for(what, Duration::from_secs(10), || async move {
        let qs = suite
            .broker
            .management()
            .queues(vhost)
            .await
            .map_err(|e| e.to_string())?;
        let listed: BTreeSet<&str> = qs.iter().map(|q| q.name.as_str()).collect();
        let missing: Vec<&String> = names.iter().filter(|n| !listed.contains(n.as_str())).collect();
        if missing.is_empty() {
            Ok(Some(qs))
        } else {
            Err(format!("{missing:?} not listed; listed {listed:?}"))
        }
    })
    .await?)
}

/// SPEC [C-19]: after its (re)connect a gateway publishes an entity's `up`, confirmed, before
/// anything else from that entity. Judged on the durable copy of the wire, in the broker's order:
/// the first message from `worker` published after the broker came back (its `ts` later than
/// that) comes after an `up` of `worker` published after the broker came back. A confirmed `up`
/// was routed before a later publish, whichever exchange and channel each took.
#[then(expr = "on the wire, {string} published nothing after the restart before its presence up")]
async fn up_first(w: &mut FleetWorld, worker: String) -> anyhow::Result<()> {
    let gid = w.gid(&worker)?;
    let back = w
        .notes
        .restart
        .back_at_ms
        .ok_or_else(|| anyhow!("the broker has not come back in this scenario"))?;
    let copy = fetch_copy(w).await?;
    let after: Vec<&Value> = copy
        .iter()
        .filter(|m| m["from"] == json!(gid) && m["ts"].as_u64().is_some_and(|ts| ts >= back))
        .collect();
    let first_other = after
        .iter()
        .position(|m| m["kind"] != json!("PRESENCE"))
        .ok_or_else(|| anyhow!("nothing but presence from {worker} after the restart: {after:?}"))?;
    let up_before = after[..first_other]
        .iter()
        .any(|m| m["kind"] == json!("PRESENCE") && m["state"] == json!("up"));
    ensure!(
        up_before,
        "[C-19]: {worker}'s first {} after the restart (msgId {}) reached the broker before any `up` of {worker}; \
         what {worker} published after the restart, in the broker's order: {:?}",
        after[first_other]["kind"],
        after[first_other]["msgId"],
        after
            .iter()
            .map(|m| (m["kind"].clone(), m["state"].clone()))
            .collect::<Vec<_>>()
    );
    Ok(())
}
