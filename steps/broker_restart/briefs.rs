//! Briefs in flight across a restart (FWD-1, FWD-5): sends started in the background and timed,
//! each ending within the inject bound whatever the broker did, and herdr's record of at most (or
//! exactly) one inject of each.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::ensure;
use cucumber::{then, when};
use fleet_conformance::timing::{hold_for, scaled, wait_for};
use serde_json::json;

use crate::world::FleetWorld;

use super::quoted;

/// Prefix of `w.calls` labels of timed sends.
pub(crate) const TIMED: &str = "timed:";

#[when(regex = r#"^"([^"]+)" sends "([^"]*)" to "([^"]+)", timed$"#)]
async fn timed_send(w: &mut FleetWorld, from: String, text: String, to: String) -> anyhow::Result<()> {
    let to_gid = w.gid(&to)?;
    let handle = w.mcp(&from).await?.handle();
    let args = json!({"to": to_gid, "text": text, "wait_reply": false, "timeout_s": 60});
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let r = handle.call("bridge_send", args).await;
        let ms = started.elapsed().as_millis() as u64;
        Ok(match r {
            Ok(v) => json!({"elapsedMs": ms, "result": v}),
            Err(e) => json!({"elapsedMs": ms, "error": e.to_string()}),
        })
    });
    w.calls.insert(format!("{TIMED}{text}"), task);
    Ok(())
}

#[then("the timed sends each ended within the inject bound, whatever the outcome")]
async fn timed_sends_ended(w: &mut FleetWorld) -> anyhow::Result<()> {
    // FWD-5: the sender's bound holds whatever the broker does meanwhile. `inject_bound` is what
    // the gateways were configured with (already stretched by the time knob); the margin for the
    // MCP round trip is nominal, as in the suite's other send steps.
    let bound = w.inject_bound() + scaled(Duration::from_secs(3));
    let labels: Vec<String> = w
        .calls
        .keys()
        .chain(w.results.keys())
        .filter(|l| l.starts_with(TIMED))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    ensure!(!labels.is_empty(), "no timed send was started");
    for label in labels {
        let v = w.call_result(&label, bound).await?;
        let ms = v["elapsedMs"].as_u64().unwrap_or(u64::MAX);
        let status = v["result"]["status"].as_str().unwrap_or_default();
        eprintln!("{label}: {status} after {ms} ms (bound {bound:?} with the margin)");
        ensure!(
            Duration::from_millis(ms) <= bound,
            "{label} took {ms} ms, over the gateways' inject bound {:?} + a {:?} margin: {v}",
            w.inject_bound(),
            bound.saturating_sub(w.inject_bound())
        );
        ensure!(
            ["injected", "failed", "inject_timeout"].contains(&status),
            "{label} ended with {v}, not a FWD-5 outcome"
        );
    }
    Ok(())
}

#[then(expr = "the timed send of {string} returns {string} within {int} seconds")]
async fn timed_send_returns(w: &mut FleetWorld, text: String, status: String, secs: u64) -> anyhow::Result<()> {
    let v = w
        .call_result(&format!("{TIMED}{text}"), Duration::from_secs(secs))
        .await?;
    ensure!(
        v["result"]["status"] == json!(status),
        "the send of {text:?} ended with {v}, expected {status:?}"
    );
    Ok(())
}

#[then(
    regex = r#"^herdr on "([^"]+)" records (at most|exactly) 1 inject of each of (.+) into "([^"]+)" while (\d+) heartbeats pass$"#
)]
async fn injects_over_window(
    w: &mut FleetWorld,
    host: String,
    how: String,
    texts: String,
    name: String,
    beats: u32,
) -> anyhow::Result<()> {
    let texts = quoted(&texts);
    let pane = w.entity(&name)?.pane.clone();
    let window = w.heartbeat() * beats;
    let herdr = &w.host(&host)?.herdr;
    let counts = |pane: &str| -> BTreeMap<String, usize> {
        let inputs = herdr.inputs(pane);
        texts
            .iter()
            .map(|t| (t.clone(), inputs.iter().filter(|i| *i == t).count()))
            .collect()
    };
    let exactly = how == "exactly";
    if exactly {
        wait_for(
            &format!("one inject of each of {texts:?} into {name}"),
            Duration::from_secs(10),
            || {
                let c = counts(&pane);
                async move {
                    if c.values().all(|n| *n >= 1) {
                        Ok(Some(()))
                    } else {
                        Err(format!("{c:?}"))
                    }
                }
            },
        )
        .await?;
    }
    // Absence of a second inject is judged over the whole window.
    hold_for(
        &format!("at most one inject of each of {texts:?} into {name}"),
        window,
        || {
            let c = counts(&pane);
            let all = herdr.inputs(&pane);
            async move {
                if c.values().all(|n| *n <= 1) {
                    Ok(())
                } else {
                    Err(format!("herdr recorded {c:?} (all inputs: {all:?})"))
                }
            }
        },
    )
    .await?;
    Ok(())
}
