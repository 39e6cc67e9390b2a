//! Steps of the forward path (SPEC §5): sends, injects as herdr saw them, and their outcomes.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, wait_for};
use serde_json::json;

use crate::world::FleetWorld;

#[when(regex = r#"^"([^"]+)" sends "([^"]*)" to "([^"]+)"( and waits for the reply)?$"#)]
async fn sends(w: &mut FleetWorld, from: String, text: String, to: String, wait: String) -> anyhow::Result<()> {
    let to_gid = w.gid(&to)?;
    let args = json!({"to": to_gid, "text": text, "wait_reply": !wait.is_empty(), "timeout_s": 60});
    // A new send is "the send" from now on: the outcome of an earlier one is forgotten.
    w.results.remove("send");
    w.call_in_background("send", &from, "bridge_send", args).await
}

#[when(expr = "{string} sends {string} to an unknown gid")]
async fn sends_unknown(w: &mut FleetWorld, from: String, text: String) -> anyhow::Result<()> {
    let args = json!({"to": uuid::Uuid::new_v4().to_string(), "text": text, "wait_reply": false});
    w.call_in_background("send", &from, "bridge_send", args).await
}

fn injects(w: &FleetWorld, host: &str, name: &str) -> anyhow::Result<Vec<String>> {
    let pane = w.entity(name)?.pane.clone();
    Ok(w.host(host)?.herdr.inputs(&pane))
}

#[then(regex = r#"^herdr on "([^"]+)" records exactly (\d+) injects? into "([^"]+)" with text "([^"]*)"$"#)]
async fn records_injects(w: &mut FleetWorld, host: String, n: usize, name: String, text: String) -> anyhow::Result<()> {
    let seen = wait_for(&format!("{n} inject(s) into {name}"), Duration::from_secs(10), || {
        let r = injects(w, &host, &name);
        let text = text.clone();
        async move {
            match r {
                Ok(v) if v.iter().filter(|t| **t == text).count() >= n => Ok(Some(v)),
                Ok(v) => Err(format!("{} inject(s): {v:?}", v.len())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    let matching = seen.iter().filter(|t| **t == text).count();
    ensure!(
        matching == n,
        "expected exactly {n} inject(s) of {text:?} into {name}, herdr recorded: {seen:?}"
    );
    Ok(())
}

#[then(expr = "herdr on {string} records no inject into {string}")]
async fn records_no_inject(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    hold_for(&format!("no inject into {name}"), ABSENCE_WINDOW, || {
        let r = injects(w, &host, &name);
        async move {
            match r {
                Ok(v) if v.is_empty() => Ok(()),
                Ok(v) => Err(format!("herdr recorded {v:?}")),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    Ok(())
}

fn send_bound(w: &FleetWorld, what: &str) -> Duration {
    match what {
        "the inject bound" => w.inject_bound() + Duration::from_secs(3),
        s => s
            .strip_suffix(" seconds")
            .and_then(|n| n.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(10)),
    }
}

#[then(
    regex = r#"^the send returns "([a-z_]+)"(?: with reason "([a-z_]+)")?(?: with (reply|question) "([^"]*)")? within (the inject bound|\d+ seconds)$"#
)]
async fn send_returns(
    w: &mut FleetWorld,
    status: String,
    reason: String,
    field: String,
    reply: String,
    within: String,
) -> anyhow::Result<()> {
    let bound = send_bound(w, &within);
    let started = std::time::Instant::now();
    let v = w.call_result("send", bound).await?;
    ensure!(
        v["status"] == json!(status),
        "send returned {v}, expected status {status:?}"
    );
    if !reason.is_empty() {
        ensure!(
            v["reason"] == json!(reason),
            "send returned {v}, expected reason {reason:?}"
        );
    }
    if !reply.is_empty() {
        ensure!(
            fleet_conformance::contract::send_text(&v, &field).as_deref() == Some(reply.as_str()),
            "send returned {v}, expected {field} {reply:?}"
        );
    }
    tracing::debug!(elapsed = ?started.elapsed(), "send returned");
    Ok(())
}

#[then(expr = "the send is still waiting for its outcome")]
async fn send_still_open(w: &mut FleetWorld) -> anyhow::Result<()> {
    let call = w.calls.get("send").ok_or_else(|| anyhow!("no send was started"))?;
    ensure!(
        !call.is_finished(),
        "the send already returned: the brief's outcome was settled before this point"
    );
    Ok(())
}

#[then(expr = "the send fails fast, well under the inject bound")]
async fn send_fast(w: &mut FleetWorld) -> anyhow::Result<()> {
    let v = w.call_result("send", Duration::from_secs(3)).await?;
    ensure!(v["status"] == json!("no_route"), "send returned {v}, expected no_route");
    Ok(())
}
