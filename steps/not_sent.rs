//! Steps of CONTRACT §3's `not_connected` (a [C-16] companion): a broker out of reach through the
//! cuttable link, and the answers a caller gets then — a definite "not sent" where the gateway
//! knows it, never where the message reached the broker.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use serde_json::{Value, json};

use crate::world::FleetWorld;

/// The reason of a definite failure: the message was never handed to the broker.
const NOT_CONNECTED: &str = "not_connected";

fn link(w: &FleetWorld) -> anyhow::Result<&fleet_conformance::proxy::Proxy> {
    w.link
        .as_ref()
        .ok_or_else(|| anyhow!("this scenario has no cuttable link"))
}

/// Every live connection through the link is cut and every new one closed at once, until the
/// broker is in reach again: the gateways cannot reach the broker at all.
#[when("the broker goes out of reach through the link")]
async fn out_of_reach(w: &mut FleetWorld) -> anyhow::Result<()> {
    let n = link(w)?.go_down();
    ensure!(n > 0, "no live connection went through the link");
    Ok(())
}

#[when("the broker is in reach through the link again")]
async fn in_reach(w: &mut FleetWorld) -> anyhow::Result<()> {
    link(w)?.come_back();
    Ok(())
}

/// The bound a call made while the broker is out of reach gets: the inject bound (the longest a
/// gateway may wait for its connection, CONTRACT §3) plus a margin for the call's travel.
fn outage_bound(w: &FleetWorld) -> Duration {
    w.inject_bound() + Duration::from_secs(5)
}

#[then(expr = "the reply returns {string} with reason {string} within the inject bound")]
async fn reply_fails(w: &mut FleetWorld, status: String, reason: String) -> anyhow::Result<()> {
    let bound = outage_bound(w);
    let v = w.call_result("reply", bound).await?;
    ensure!(
        v["status"] == json!(status) && v["reason"] == json!(reason),
        "bridge_reply returned {v}, expected status {status:?} with reason {reason:?} (CONTRACT §3: \
         a publish never handed to the broker is a definite failure, `not_connected`)"
    );
    Ok(())
}

/// Whether a tool's answer is the definite "not sent" of CONTRACT §3.
pub(crate) fn is_not_connected(v: &Value) -> bool {
    v["status"] == json!("failed") && v["reason"] == json!(NOT_CONNECTED)
}

/// The send's message reached the broker (the scenario saw it in the inbox): whatever the send
/// answers, it may not be the definite "not sent".
#[then("the send does not answer not_connected")]
async fn send_not_definite(w: &mut FleetWorld) -> anyhow::Result<()> {
    let bound = outage_bound(w);
    let v = w.call_result("send", bound).await?;
    ensure!(
        !is_not_connected(&v),
        "bridge_send answered {v}, yet its SEND reached the recipient's inbox and was injected: \
         `not_connected` promises the message was never handed to the broker (CONTRACT §3); a \
         publish whose confirm was lost is unknown ([C-16]), never not sent"
    );
    Ok(())
}

/// The reply's message reached the broker (the scenario saw it in the main's inbox) before the
/// broker went out of reach: whatever the reply answers, it may not be the definite "not sent".
#[then("the reply does not answer not_connected")]
async fn reply_not_definite(w: &mut FleetWorld) -> anyhow::Result<()> {
    let bound = outage_bound(w);
    let v = w.call_result("reply", bound).await?;
    ensure!(
        !is_not_connected(&v),
        "bridge_reply answered {v}, yet its REPLY had reached the main's inbox before the broker \
         went out of reach: `not_connected` promises the message was never handed to the broker \
         (CONTRACT §3); a publish that may have reached it ends unknown ([C-16]), republished or not"
    );
    Ok(())
}
