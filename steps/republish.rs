//! SPEC [C-18]'s one prohibition: a SEND whose confirm was lost with its connection is never
//! published again. A gateway MAY republish every other kind (`consumers.feature` judges the
//! REPLY's, under the capability `republish`), but the forward path is at-most-once, and a
//! receiver that restarted between two copies has forgotten the `msgId`: its dedup (FWD-6) is no
//! guard then. So the copies are counted where every one of them lands, not at the receiver:
//! the probe's copy of what `bridge.msg` routes to the worker's key (CONTRACT §4: the suite taps
//! `bridge.msg`), and the worker's inbox itself while no gateway consumes it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use cucumber::{given, then};
use fleet_conformance::probe::{Captured, Tap};
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, wait_for};

use crate::world::{FleetWorld, Suite};

mod state;

pub use state::RepublishState;

/// Copies of everything routed to `name`'s gid on `bridge.msg` from now on (its point-to-point
/// messages: SEND, REPLY, notices; not broadcasts, which go by `broadcast.*` keys).
#[given(expr = "the probe copies every message routed to {string}")]
async fn copy_routed(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let tap = w
        .probe()
        .await?
        .tap("bridge.msg", &gid)
        .await
        .with_context(|| format!("tapping bridge.msg for {name}'s key"))?;
    w.republish.routed = Some((name, Arc::new(tap)));
    Ok(())
}

/// [C-18], PUB-3: a SEND whose connection was lost before its confirm is failed to the caller, or
/// left to FWD-5's bound, never published again. Judged from now (the main's gateway is back on
/// the broker) until the timed send of `text` has ended — a republish happens before the send
/// returns — and over the absence window after: the wire carried exactly one SEND to `name` (one
/// `msgId`, one copy), and `name`'s inbox, which no gateway consumes, holds exactly one message.
/// A send still open at the inject bound (plus a margin) ends the first part; FWD-5's own step
/// judges that.
#[then(
    regex = r#"^until the timed send of "([^"]*)" has ended, and over a window after, one SEND was routed to "([^"]+)" and its inbox holds one message$"#
)]
async fn one_send_routed(w: &mut FleetWorld, text: String, name: String) -> anyhow::Result<()> {
    let tap = match &w.republish.routed {
        Some((on, tap)) if *on == name => tap.clone(),
        _ => return Err(anyhow!("the probe does not copy what is routed to {name}")),
    };
    let queue = fleet_conformance::names::inbox(&w.gid(&name)?);
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let label = format!("{}{text}", crate::broker_restart::TIMED);
    if !w.calls.contains_key(&label) && !w.results.contains_key(&label) {
        return Err(anyhow!("no timed send of {text:?} was started"));
    }
    let look = || look_once(&tap, &suite, &vhost, &queue);
    // Until the send has ended: a violation ends the wait at once (Ok(Some(Err))).
    let ended = {
        let (calls, results) = (&w.calls, &w.results);
        wait_for(
            &format!("the end of the send of {text:?}, one SEND to {name} meanwhile"),
            w.inject_bound() + Duration::from_secs(3),
            || {
                let seen = look();
                let done = results.contains_key(&label) || calls.get(&label).is_none_or(|t| t.is_finished());
                async move {
                    match seen.await {
                        Err(Look::Broken(v)) => Ok(Some(Err(v))),
                        Err(Look::Unread(e)) => Err(e),
                        Ok(()) if done => Ok(Some(Ok(()))),
                        Ok(()) => Err("one SEND so far; the send is still open".to_string()),
                    }
                }
            },
        )
        .await
    };
    match ended {
        Ok(Err(v)) => return Err(violation(&name, v)),
        Ok(Ok(())) => {}
        // Still open at the bound: FWD-5's step says so; the copies are still judged below.
        Err(e) => eprintln!("note: {e}"),
    }
    hold_for(
        &format!("one SEND routed to {name}, one message in its inbox ([C-18]: a SEND is never republished)"),
        ABSENCE_WINDOW,
        || async {
            look().await.map_err(|l| match l {
                Look::Broken(v) | Look::Unread(v) => v,
            })
        },
    )
    .await
    .map_err(|e| violation(&name, e.to_string()))?;
    Ok(())
}

fn violation(name: &str, seen: String) -> anyhow::Error {
    anyhow!(
        "[C-18]: a SEND whose confirm was lost with its connection must not be published again (the \
         forward path is at-most-once; a receiver that restarted in between has forgotten the msgId) — \
         on the way to {name}: {seen}"
    )
}

/// What one look saw when it is not "one SEND, one message".
enum Look {
    /// More than one copy (or none at all): the verdict.
    Broken(String),
    /// The broker could not be read this time.
    Unread(String),
}

async fn look_once(tap: &Tap, suite: &Suite, vhost: &str, queue: &str) -> Result<(), Look> {
    let all = tap
        .fetch()
        .await
        .map_err(|e| Look::Unread(format!("the probe's tap: {e}")))?;
    let sends: Vec<&Captured> = all
        .iter()
        .filter(|c| c.header_str("kind").as_deref() == Some("SEND"))
        .collect();
    if sends.len() != 1 {
        let ids: Vec<String> = sends
            .iter()
            .map(|c| c.header_str("msgId").or_else(|| c.message_id()).unwrap_or_default())
            .collect();
        return Err(Look::Broken(format!(
            "the wire carried {} SEND(s), msgIds {ids:?}",
            sends.len()
        )));
    }
    match suite.broker.management().queue(vhost, queue).await {
        Ok(Some(q)) if q.messages_ready + q.messages_unacknowledged == 1 => Ok(()),
        Ok(Some(q)) => Err(Look::Broken(format!(
            "{queue} holds {} ready + {} unacknowledged message(s), the wire one SEND",
            q.messages_ready, q.messages_unacknowledged
        ))),
        Ok(None) => Err(Look::Broken(format!("{queue} is gone"))),
        Err(e) => Err(Look::Unread(format!("the management API on {queue}: {e}"))),
    }
}
