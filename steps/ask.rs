//! Steps of conversations (SPEC §7) and nudges (RPL-3): asks, answers, expiry, notices in panes.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use fleet_conformance::envelope::{Envelope, now_ms};
use fleet_conformance::probe::Crafted;
use fleet_conformance::timing::{scaled, wait_for};
use serde_json::json;

use crate::world::FleetWorld;

mod state;

pub use state::TalkState;

#[given(regex = r#"^the wire to ((?:"[^"]+"(?:, | and )?)+) is tapped$"#)]
async fn tapped(w: &mut FleetWorld, names: String) -> anyhow::Result<()> {
    let names: Vec<String> = names.split('"').skip(1).step_by(2).map(str::to_string).collect();
    for name in names {
        let gid = w.gid(&name)?;
        let tap = w.probe().await?.tap("bridge.msg", &gid).await?;
        w.talk.taps.insert(name, tap);
    }
    Ok(())
}

/// (kind, traceId, turnId) of every tapped message to `name`.
async fn tapped_to(w: &FleetWorld, name: &str) -> anyhow::Result<Vec<(String, String, String)>> {
    let tap = w
        .talk
        .taps
        .get(name)
        .ok_or_else(|| anyhow!("the wire to {name} is not tapped"))?;
    Ok(tap
        .fetch()
        .await?
        .iter()
        .map(|m| {
            let h = |n: &str| m.header_str(n).unwrap_or_default();
            (h("kind"), h("traceId"), h("turnId"))
        })
        .collect())
}

/// How long an ASK is asked again while the main's `bridge_wait` is still being opened, and how
/// many times at most (CONTRACT §3, "An open waiter").
const WAIT_OPENING: Duration = Duration::from_secs(5);
const WAIT_OPENING_ASKS: u32 = 50;

/// CONTRACT §3 "An open waiter": while a `bridge_wait` the scenario started is in flight, the
/// gateway may not hold it yet, and `no_waiter` is then right. The suite does not race the two:
/// it asks again on `no_waiter` (each ask a full round trip), within [`WAIT_OPENING`], until the
/// wait is open. A gateway that never counts an open wait still fails: every ask answers
/// `no_waiter` and the wait never returns the ASK.
#[when(expr = "{string} asks {string} with a timeout of {int} seconds")]
async fn asks(w: &mut FleetWorld, worker: String, question: String, secs: u64) -> anyhow::Result<()> {
    let timeout = scaled(Duration::from_secs(secs)).as_secs_f64();
    let args = json!({"question": question, "timeout_s": timeout});
    let wait_opening = w.calls.get("wait").is_some_and(|t| !t.is_finished());
    if !wait_opening {
        return w.call_in_background("ask", &worker, "bridge_ask", args).await;
    }
    let handle = w.mcp(&worker).await?.handle();
    let until = tokio::time::Instant::now() + scaled(WAIT_OPENING);
    let task = tokio::spawn(async move {
        let mut asked = 0;
        loop {
            let v = handle.call("bridge_ask", args.clone()).await?;
            asked += 1;
            let again =
                v["status"] == json!("no_waiter") && asked < WAIT_OPENING_ASKS && tokio::time::Instant::now() < until;
            if !again {
                return Ok(v);
            }
        }
    });
    w.results.remove("ask");
    w.calls.insert("ask".to_string(), task);
    Ok(())
}

#[then(regex = r#"^the ask returns "([a-z_]+)"(?: with answer "([^"]*)")? within (\d+) seconds?$"#)]
async fn ask_returns(w: &mut FleetWorld, status: String, answer: String, secs: u64) -> anyhow::Result<()> {
    let v = w.call_result("ask", Duration::from_secs(secs)).await?;
    ensure!(
        v["status"] == json!(status),
        "bridge_ask returned {v}, expected {status:?}"
    );
    if !answer.is_empty() {
        ensure!(
            v["answer"] == json!(answer),
            "bridge_ask returned {v}, expected answer {answer:?}"
        );
    }
    Ok(())
}

/// The ASK a phrase names, as the main's wait returned it: "the question" is the last one the
/// wait returned, "the first question" the first one of the scenario.
fn question(w: &FleetWorld, which: &str) -> anyhow::Result<serde_json::Value> {
    let q = match which {
        "first question" => w.notes.questions.first(),
        _ => w.notes.questions.last(),
    };
    q.cloned()
        .ok_or_else(|| anyhow!("no wait has returned a question ({which})"))
}

/// The turnId of the last question the main was handed: by a `bridge_wait`, or as the `question`
/// of a `bridge_send` that waited for the reply (CONTRACT §3: a message object with `turnId`).
fn last_turn(w: &FleetWorld) -> anyhow::Result<String> {
    if let Some(send) = w.results.get("send").filter(|v| v.get("question").is_some()) {
        return send["question"]["turnId"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the send's question carries no turnId (CONTRACT §3): {send}"));
    }
    let v = w
        .results
        .get("wait")
        .ok_or_else(|| anyhow!("no wait has returned a question"))?;
    fleet_conformance::contract::waited_message(v)?["turnId"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow!("the wait returned no turnId: {v}"))
}

#[when(expr = "{string} answers the question with {string}")]
async fn answers(w: &mut FleetWorld, main: String, text: String) -> anyhow::Result<()> {
    let turn = last_turn(w)?;
    let v = w
        .mcp(&main)
        .await?
        .call("bridge_answer", json!({"turn_id": turn, "text": text}))
        .await?;
    w.notes.answer = Some(v);
    Ok(())
}

#[then(expr = "the answer returns {string}")]
async fn answer_returns(w: &mut FleetWorld, status: String) -> anyhow::Result<()> {
    let v = w.notes.answer.as_ref().ok_or_else(|| anyhow!("no answer was given"))?;
    ensure!(
        v["status"] == json!(status),
        "bridge_answer returned {v}, expected {status:?}"
    );
    Ok(())
}

#[then(expr = "every message of the conversation between {string} and {string} carries one traceId")]
async fn one_trace(w: &mut FleetWorld, main: String, worker: String) -> anyhow::Result<()> {
    let mut all = tapped_to(w, &main).await?;
    all.extend(tapped_to(w, &worker).await?);
    let flow: Vec<_> = all
        .iter()
        .filter(|(k, _, _)| matches!(k.as_str(), "ASK" | "ANSWER"))
        .collect();
    ensure!(flow.iter().any(|(k, _, _)| k == "ASK"), "no ASK on the wire: {all:?}");
    ensure!(
        flow.iter().any(|(k, _, _)| k == "ANSWER"),
        "no ANSWER on the wire: {all:?}"
    );
    let first = &flow[0].1;
    ensure!(
        flow.iter().all(|(_, t, _)| t == first),
        "traceIds differ across the flow: {flow:?}"
    );
    Ok(())
}

#[then(regex = r#"^the wire carries an? ([A-Z_]+) to "([^"]+)"( for the question)? within (\d+) seconds$"#)]
async fn wire_carries(w: &mut FleetWorld, kind: String, to: String, for_turn: String, secs: u64) -> anyhow::Result<()> {
    // "for the question": the turn the main's wait returned; otherwise any turn.
    let turn = if for_turn.is_empty() { None } else { Some(last_turn(w)?) };
    let tap = w
        .talk
        .taps
        .get(&to)
        .ok_or_else(|| anyhow!("the wire to {to} is not tapped"))?;
    let notice = wait_for(&format!("a {kind} to {to}"), Duration::from_secs(secs), || {
        let (kind, turn) = (kind.clone(), turn.clone());
        async move {
            let all = tap.fetch().await.map_err(|e| e.to_string())?;
            let hit = all.iter().find(|m| {
                m.header_str("kind").as_deref() == Some(&kind)
                    && turn
                        .as_ref()
                        .is_none_or(|t| m.header_str("turnId").as_deref() == Some(t))
            });
            match hit {
                Some(m) => Ok(Some(m.clone())),
                None => Err(format!("{} message(s), none a {kind}", all.len())),
            }
        }
    })
    .await?;
    // A notice about an ASK (NO_WAITER, ABANDONED) names it (corrId = its msgId, [C-2]) and keeps
    // its flow's traceId (ENV-3). The ASK is the one the main's wait returned, when it did (an
    // ASK's broker expiration can empty it from a tap before it is read); else the tapped one.
    if matches!(kind.as_str(), "NO_WAITER" | "ABANDONED") {
        let h = |n: &str| notice.header_str(n).unwrap_or_default();
        let turn_id = h("turnId");
        let waited = w
            .results
            .get("wait")
            .and_then(|v| fleet_conformance::contract::waited_message(v).ok())
            .filter(|m| m["kind"] == "ASK" && m["turnId"] == json!(turn_id));
        let (ask_trace, ask_id) = match waited {
            Some(m) => (
                m["traceId"].as_str().unwrap_or_default().to_string(),
                m["msgId"].as_str().unwrap_or_default().to_string(),
            ),
            None => {
                let mut seen = Vec::new();
                for t in w.talk.taps.values() {
                    seen.extend(t.fetch().await?);
                }
                let ask = seen
                    .iter()
                    .find(|m| {
                        m.header_str("kind").as_deref() == Some("ASK")
                            && m.header_str("turnId").as_deref() == Some(&turn_id)
                    })
                    .ok_or_else(|| {
                        anyhow!("no ASK of turn {turn_id} drained or on the tapped wire to check the {kind} against")
                    })?;
                (
                    ask.header_str("traceId").unwrap_or_default(),
                    ask.header_str("msgId").unwrap_or_default(),
                )
            }
        };
        ensure!(
            h("traceId") == ask_trace,
            "ENV-3: the {kind} carries traceId {} but its ASK {ask_trace}",
            h("traceId")
        );
        ensure!(
            h("corrId") == ask_id,
            "[C-2]: the {kind}'s corrId {:?} is not its ASK's msgId {ask_id}",
            h("corrId")
        );
    }
    Ok(())
}

/// ASK-1: `expiresAt = now + timeout`, read from the ASK on the wire to the main (its `ts` is the
/// publish time; a second of slack for the clock read between the two). `secs` is the nominal
/// timeout of the ask step, which sent it stretched.
#[then(expr = "the ASK to {string} expires {int} seconds after its ts")]
async fn ask_expires_after(w: &mut FleetWorld, main: String, secs: u64) -> anyhow::Result<()> {
    let tap = w
        .talk
        .taps
        .get(&main)
        .ok_or_else(|| anyhow!("the wire to {main} is not tapped"))?;
    let all = tap.fetch().await?;
    let ask = all
        .iter()
        .find(|m| m.header_str("kind").as_deref() == Some("ASK"))
        .ok_or_else(|| anyhow!("no ASK on the wire to {main}"))?;
    let num = |n: &str| ask.header_str(n).and_then(|v| v.parse::<i64>().ok()).unwrap_or(0);
    let span = num("expiresAt") - num("ts");
    // The ask was made with the nominal timeout stretched by the time knob (see `asks`).
    let want = scaled(Duration::from_secs(secs)).as_millis() as i64;
    ensure!(
        (span - want).abs() <= 1000,
        "ASK-1: the ASK expires {span} ms after its ts, expected the ask's timeout_s, {want} ms"
    );
    Ok(())
}

#[then(expr = "no ANSWER reached {string}")]
async fn no_answer(w: &mut FleetWorld, worker: String) -> anyhow::Result<()> {
    let all = tapped_to(w, &worker).await?;
    ensure!(
        !all.iter().any(|(k, _, _)| k == "ANSWER"),
        "an ANSWER reached {worker}: {all:?}"
    );
    Ok(())
}

/// An ANSWER for a turn, published by the probe with the key of the main's host, as that host's
/// gateway would have sent it: the ASK's `traceId` (ENV-3) and a `turnId` of the named question.
/// Used for turns that no longer wait (ASK-4), whose answer the main's own gateway refuses to send.
#[when(
    regex = r#"^an ANSWER "([^"]*)" signed by host "([^"]+)" as "([^"]+)" reaches "([^"]+)" for the (question|first question)$"#
)]
async fn late_answer(
    w: &mut FleetWorld,
    text: String,
    host: String,
    main: String,
    worker: String,
    which: String,
) -> anyhow::Result<()> {
    let q = question(w, &which)?;
    let field = |n: &str| {
        q[n].as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow!("the question has no {n}: {q}"))
    };
    let (turn, trace) = (field("turnId")?, field("traceId")?);
    let (from, to) = (w.gid(&main)?, w.gid(&worker)?);
    let key = w
        .keys
        .get(&host)
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host}"))?;
    let mut env = Envelope::new("ANSWER", &from, &to, &host);
    env.set("turnId", &turn)
        .set("traceId", &trace)
        .set("expiresAt", &(now_ms() + 60_000).to_string());
    let env = env.signed_by(&key, text.as_bytes());
    let msg = Crafted::from_envelope("bridge.msg", &to, &env, text.as_bytes());
    w.probe().await?.publish(&msg).await?;
    w.notes.late_answer = Some(env);
    Ok(())
}

/// ASK-4: the TOO_LATE reaches the main; it reports on the late ANSWER ([C-2]: `corrId` = the
/// ANSWER's msgId) and stays in its flow (ENV-3: the ANSWER's `traceId`, which is the ASK's).
#[then(regex = r#"^"([^"]+)" drains a TOO_LATE notice for the (question|first question) within (\d+) seconds$"#)]
async fn too_late_notice(w: &mut FleetWorld, main: String, which: String, secs: u64) -> anyhow::Result<()> {
    let turn = question(w, &which)?["turnId"].as_str().unwrap_or_default().to_string();
    let handle = w.mcp(&main).await?.handle();
    let notice = wait_for("a TOO_LATE notice", Duration::from_secs(secs), || {
        let (handle, turn) = (handle.clone(), turn.clone());
        async move {
            let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
            let hit = fleet_conformance::contract::poll_messages(&v)
                .map_err(|e| e.to_string())?
                .into_iter()
                .find(|m| m["kind"] == "TOO_LATE" && m["turnId"] == turn.as_str());
            match hit {
                Some(m) => Ok(Some(m)),
                None => Err(format!("polled {v}")),
            }
        }
    })
    .await?;
    if let Some(answer) = &w.notes.late_answer {
        ensure!(
            notice["corrId"] == json!(answer.msg_id()),
            "[C-2]: the TOO_LATE's corrId is {}, not the msgId of the ANSWER it reports on ({})",
            notice["corrId"],
            answer.msg_id()
        );
        ensure!(
            notice["traceId"] == json!(answer.value("traceId")),
            "ENV-3: the TOO_LATE carries traceId {}, its ANSWER (and ASK) {}",
            notice["traceId"],
            answer.value("traceId")
        );
    }
    Ok(())
}

/// [C-9]: an ANSWER expires when its ASK does — the worker's gateway drops an ANSWER that comes
/// after the asking turn ended (ASK-3), so an ANSWER that outlived its ASK would be judged by a
/// clock the asker never agreed to. Read from the wire: the ANSWER to the worker and the ASK of
/// the same turn to the main.
#[then(expr = "the ANSWER to {string} carries the expiresAt of its ASK to {string}")]
async fn answer_expiry(w: &mut FleetWorld, worker: String, main: String) -> anyhow::Result<()> {
    let fetch = |name: &str| {
        w.talk
            .taps
            .get(name)
            .ok_or_else(|| anyhow!("the wire to {name} is not tapped"))
    };
    let answers = fetch(&worker)?.fetch().await?;
    let answer = answers
        .iter()
        .find(|m| m.header_str("kind").as_deref() == Some("ANSWER"))
        .ok_or_else(|| anyhow!("no ANSWER on the wire to {worker}"))?;
    let turn = answer.header_str("turnId").unwrap_or_default();
    let asks = fetch(&main)?.fetch().await?;
    let ask = asks
        .iter()
        .find(|m| m.header_str("kind").as_deref() == Some("ASK") && m.header_str("turnId") == Some(turn.clone()))
        .ok_or_else(|| anyhow!("no ASK of turn {turn} on the wire to {main}"))?;
    ensure!(
        answer.header_str("expiresAt") == ask.header_str("expiresAt"),
        "[C-9]: the ANSWER expires at {:?}, its ASK at {:?}",
        answer.header_str("expiresAt"),
        ask.header_str("expiresAt")
    );
    Ok(())
}

// ---- nudges ----

/// When each nudge reached the main's pane. A main is fed by the pull path only, never by an
/// inject, so every text a gateway writes into a main's pane is a nudge, whatever its wording
/// (docs/CONTRACT.md, "Nudges": the wording is the gateway's own).
fn nudges(w: &FleetWorld, host: &str, name: &str) -> anyhow::Result<Vec<std::time::Instant>> {
    let pane = w.entity(name)?.pane.clone();
    Ok(w.host(host)?
        .herdr
        .input_log(&pane)
        .into_iter()
        .map(|r| r.received_at)
        .collect())
}

#[then(
    regex = r#"^herdr on "([^"]+)" records at least (\d+) nudges into "([^"]+)" with growing gaps within (\d+) seconds$"#
)]
async fn growing_nudges(w: &mut FleetWorld, host: String, n: usize, name: String, secs: u64) -> anyhow::Result<()> {
    let w2: &FleetWorld = w;
    let at = wait_for(&format!("{n} nudges into {name}"), Duration::from_secs(secs), || {
        let r = nudges(w2, &host, &name);
        async move {
            match r {
                Ok(v) if v.len() >= n => Ok(Some(v)),
                Ok(v) => Err(format!("{} nudge(s)", v.len())),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    let gaps: Vec<Duration> = at.windows(2).map(|p| p[1] - p[0]).collect();
    ensure!(
        gaps.windows(2).all(|g| g[1] > g[0].mul_f64(1.3)),
        "nudge gaps do not grow: {gaps:?}"
    );
    Ok(())
}

#[then(regex = r#"^herdr on "([^"]+)" records no (?:further )?nudge into "([^"]+)" while (\d+) nudge intervals pass$"#)]
async fn no_more_nudges(w: &mut FleetWorld, host: String, name: String, k: u32) -> anyhow::Result<()> {
    // Absence can only be shown over a window: the window is k times the largest interval the
    // gateway could be waiting, scaled by the time-scale knob like every deadline.
    let before = nudges(w, &host, &name)?.len();
    let initial: u64 = w
        .gateway_env
        .get("FLEET_NUDGE_INITIAL_MS")
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let interval = Duration::from_millis(initial) * 2u32.pow(before.min(6) as u32);
    let window = scaled(interval * k);
    let w2: &FleetWorld = w;
    let r = tokio::time::timeout(window, async {
        loop {
            if nudges(w2, &host, &name).map(|v| v.len()).unwrap_or(0) > before {
                return;
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    ensure!(r.is_err(), "a nudge reached {name} within {window:?}");
    Ok(())
}
