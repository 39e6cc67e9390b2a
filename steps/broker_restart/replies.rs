//! Held replies across a restart (RPL-1): what a main drains afterwards — every reply it was owed,
//! each exactly once, and nothing more.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::ensure;
use cucumber::then;
use fleet_conformance::timing::scaled;
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::quoted;

/// Everything `main` can drain (from `from`, if given) until the (scaled) deadline, or until
/// `enough` says so: polls, and blocks in `bridge_wait` while nothing is held.
pub(crate) async fn drain_until(
    w: &mut FleetWorld,
    main: &str,
    from: Option<&str>,
    nominal: Duration,
    enough: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let from_gid = match from {
        Some(f) => Some(w.gid(f)?),
        None => None,
    };
    let mcp = w.mcp(main).await?.handle();
    let deadline = tokio::time::Instant::now() + scaled(nominal);
    let mut got: Vec<Value> = Vec::new();
    loop {
        let mut args = json!({"max": 100});
        if let Some(g) = &from_gid {
            args["from"] = json!(g);
        }
        let v = mcp.call("bridge_poll", args).await?;
        let batch = fleet_conformance::contract::poll_messages(&v)?;
        let fresh = !batch.is_empty();
        got.extend(batch);
        if enough(&got) {
            return Ok(got);
        }
        if fresh {
            continue;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Ok(got);
        }
        let mut args = json!({"timeout_s": left.as_secs_f64().max(0.1)});
        if let Some(g) = &from_gid {
            args["from"] = json!(g);
        }
        let v = mcp.call("bridge_wait", args).await?;
        if let fleet_conformance::contract::Waited::Message(m) = fleet_conformance::contract::waited(&v)? {
            got.push(m);
        }
    }
}

/// Short descriptions of drained messages, for error messages.
pub(crate) fn describe(msgs: &[Value]) -> Vec<String> {
    msgs.iter()
        .map(|m| {
            format!(
                "{} {} from {}",
                m["kind"].as_str().unwrap_or("?"),
                m["text"],
                m["from"].as_str().unwrap_or("?")
            )
        })
        .collect()
}

#[then(regex = r#"^"([^"]+)" drains the replies (.+) from "([^"]+)", each exactly once, within (\d+) seconds$"#)]
async fn drains_replies_once(
    w: &mut FleetWorld,
    main: String,
    texts: String,
    from: String,
    secs: u64,
) -> anyhow::Result<()> {
    let wanted = quoted(&texts);
    let from_gid = w.gid(&from)?;
    let seen_all = |got: &[Value]| wanted.iter().all(|t| got.iter().any(|m| m["text"] == json!(t)));
    let mut got = drain_until(w, &main, Some(&from), Duration::from_secs(secs), seen_all).await?;
    ensure!(
        seen_all(&got),
        "{main} drained {:?} from {from} within {secs} s; expected {wanted:?}",
        describe(&got)
    );
    // One more look over a window: a second copy of either would show up now.
    let window = w.heartbeat() * 3;
    let more = drain_until(w, &main, Some(&from), window, |_| false).await?;
    got.extend(more);
    for t in &wanted {
        let n = got.iter().filter(|m| m["text"] == json!(t)).count();
        ensure!(
            n == 1,
            "{main} drained {t:?} {n} times (RPL-1: at most once per life, and never zero): {:?}",
            describe(&got)
        );
    }
    ensure!(
        got.len() == wanted.len(),
        "{main} drained more than {wanted:?} from {from}: {:?}",
        describe(&got)
    );
    let ids: BTreeSet<&str> = got.iter().filter_map(|m| m["msgId"].as_str()).collect();
    ensure!(ids.len() == got.len(), "msgIds repeat: {got:?}");
    for m in &got {
        ensure!(
            m["kind"] == json!("REPLY") && m["from"] == json!(from_gid),
            "{m} is not a REPLY from {from}"
        );
    }
    Ok(())
}

#[then(regex = r#"^"([^"]+)" gets no further message while (\d+) heartbeats pass$"#)]
async fn no_further_message(w: &mut FleetWorld, main: String, beats: u32) -> anyhow::Result<()> {
    let window = w.heartbeat() * beats;
    let more = drain_until(w, &main, None, window, |_| false).await?;
    ensure!(
        more.is_empty(),
        "{main} got {} more message(s) after the ones expected: {:?}",
        more.len(),
        describe(&more)
    );
    Ok(())
}
