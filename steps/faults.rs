//! Steps of failure semantics (SPEC §5, §6, §11, §12): dead letters, caps, herdr faults, crashes.

use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use fleet_conformance::herdr::{Fault, InputReaction};
use fleet_conformance::probe::{Crafted, Tap};
use fleet_conformance::timing::wait_for;
use serde_json::json;

use crate::world::FleetWorld;

mod state;

pub use state::FaultState;

async fn dead_tap(w: &mut FleetWorld) -> anyhow::Result<&Tap> {
    if w.faults.dead.is_none() {
        let tap = w.probe().await?.watch_dead_letters().await?;
        w.faults.dead = Some(tap);
    }
    w.faults.dead.as_ref().ok_or_else(|| anyhow!("no dead-letter tap"))
}

#[given(expr = "inboxes hold at most {int} messages")]
async fn max_len(w: &mut FleetWorld, n: u32) {
    w.gateway_env.insert("FLEET_INBOX_MAX_LENGTH".into(), n.to_string());
}

#[given(expr = "the dead-letter queue holds at most {int} messages")]
async fn dlq_max(w: &mut FleetWorld, n: u32) {
    w.gateway_env.insert("FLEET_DLQ_MAX_LENGTH".into(), n.to_string());
}

#[given(expr = "host {string} uses an inbox ttl of {int} ms")]
async fn host_ttl(w: &mut FleetWorld, host: String, ms: u64) {
    w.host_env
        .entry(host)
        .or_default()
        .insert("FLEET_INBOX_TTL_MS".into(), ms.to_string());
}

#[given(expr = "host {string} uses a prefetch of {int}")]
async fn host_prefetch(w: &mut FleetWorld, host: String, n: u32) {
    w.host_env
        .entry(host)
        .or_default()
        .insert("FLEET_PREFETCH".into(), n.to_string());
}

#[given(expr = "dead letters are watched")]
async fn watch(w: &mut FleetWorld) -> anyhow::Result<()> {
    dead_tap(w).await.map(|_| ())
}

#[when(regex = r#"^"([^"]+)" sends (\d+) briefs "([^"]+)-1" to "([^"]+)-\d+" to "([^"]+)", one after another$"#)]
async fn sends_many(
    w: &mut FleetWorld,
    from: String,
    n: usize,
    prefix: String,
    _p2: String,
    to: String,
) -> anyhow::Result<()> {
    let to_gid = w.gid(&to)?;
    let queue = fleet_conformance::names::inbox(&to_gid);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    dead_tap(w).await?;
    for i in 1..=n {
        let args = json!({"to": to_gid, "text": format!("{prefix}-{i}"), "wait_reply": false});
        w.call_in_background(&format!("send-{i}"), &from, "bridge_send", args)
            .await?;
        w.results
            .insert(format!("send-{i}-text"), json!(format!("{prefix}-{i}")));
        // The next brief goes out only once this one is on the broker (queued or dead-lettered)
        // or was refused by it (a quorum inbox at its cap nacks the publish, SPEC §16 CLU-4: the
        // send ends at once), so the order on the wire is the order of the steps.
        let tap = w.faults.dead.as_ref().ok_or_else(|| anyhow!("no tap"))?;
        let call = w.calls.get(&format!("send-{i}"));
        wait_for(&format!("brief {i} on the broker"), Duration::from_secs(10), || {
            let (suite, vhost, queue) = (suite.clone(), vhost.clone(), queue.clone());
            let refused = call.is_some_and(|c| c.is_finished());
            async move {
                if refused {
                    return Ok(Some(()));
                }
                let ready = match suite.broker.management().queue(&vhost, &queue).await {
                    Ok(Some(q)) => q.messages_ready,
                    Ok(None) => return Err("no inbox".into()),
                    Err(e) => return Err(e.to_string()),
                };
                let dead = tap.fetch().await.map_err(|e| e.to_string())?.len() as u64;
                if ready + dead >= i as u64 {
                    Ok(Some(()))
                } else {
                    Err(format!("{ready} queued + {dead} dead"))
                }
            }
        })
        .await?;
    }
    Ok(())
}

#[then(regex = r#"^sends? ([\d, and]+) returns? "([a-z_]+)"(?: with reason "([a-z_]+)")? within the inject bound$"#)]
async fn sends_return(w: &mut FleetWorld, which: String, status: String, reason: String) -> anyhow::Result<()> {
    let bound = w.inject_bound() + Duration::from_secs(3);
    let ids: Vec<u32> = which
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    for i in ids {
        let v = w.call_result(&format!("send-{i}"), bound).await?;
        ensure!(
            v["status"] == json!(status),
            "send {i} returned {v}, expected {status:?}"
        );
        if !reason.is_empty() {
            ensure!(
                v["reason"] == json!(reason),
                "send {i} returned {v}, expected reason {reason:?}"
            );
        }
    }
    Ok(())
}

#[when(regex = r#"^"([^"]+)" sends (\d+) briefs "([^"]+)-1" to "[^"]+-\d+" to "([^"]+)" at once$"#)]
async fn sends_at_once(w: &mut FleetWorld, from: String, n: usize, prefix: String, to: String) -> anyhow::Result<()> {
    let to_gid = w.gid(&to)?;
    for i in 1..=n {
        let args = json!({"to": to_gid, "text": format!("{prefix}-{i}"), "wait_reply": false});
        w.call_in_background(&format!("send-{i}"), &from, "bridge_send", args)
            .await?;
    }
    Ok(())
}

#[then(regex = r#"^sends? ([\d, and]+) (?:each )?ends? within the inject bound, whatever the outcome$"#)]
async fn sends_end(w: &mut FleetWorld, which: String) -> anyhow::Result<()> {
    // FWD-5 bounds every bridge_send at the inject bound, whatever happened underneath; the
    // outcome itself (injected, failed, inject_timeout) may differ with the moment of a fault.
    let bound = w.inject_bound() + Duration::from_secs(3);
    for i in which
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse::<u32>().ok())
    {
        let v = w.call_result(&format!("send-{i}"), bound).await?;
        ensure!(
            ["injected", "failed", "inject_timeout"].contains(&v["status"].as_str().unwrap_or("")),
            "send {i} returned {v}, expected a FWD-5 outcome"
        );
    }
    Ok(())
}

#[then(regex = r#"^herdr on "([^"]+)" records no inject into "([^"]+)" with text "([^"]*)"$"#)]
async fn no_inject_text(w: &mut FleetWorld, host: String, name: String, text: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let herdr = &w.host(&host)?.herdr;
    fleet_conformance::timing::hold_for(
        &format!("no inject of {text:?} into {name}"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let log = herdr.input_log(&pane);
            let hit = log.iter().any(|r| r.text == text);
            let texts: Vec<String> = log.into_iter().map(|r| r.text).collect();
            async move {
                if hit {
                    Err(format!("herdr received {texts:?}"))
                } else {
                    Ok(())
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[then(regex = r#"^herdr on "([^"]+)" received exactly (\d+) inputs? of "([^"]*)" into "([^"]+)"$"#)]
async fn received_inputs(w: &mut FleetWorld, host: String, n: usize, text: String, name: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let w2: &FleetWorld = w;
    let h = w2.host(&host)?;
    let got = wait_for(&format!("{n} input(s) into {name}"), Duration::from_secs(10), || {
        let c = h.herdr.input_log(&pane).iter().filter(|r| r.text == text).count();
        async move {
            if c >= n {
                Ok(Some(c))
            } else {
                Err(format!("{c} input(s)"))
            }
        }
    })
    .await?;
    ensure!(
        got == n,
        "herdr received {got} input(s) of {text:?}, expected exactly {n}"
    );
    Ok(())
}

#[then(expr = "the dead-letter queue never holds more than {int} messages")]
async fn dlq_capped(w: &mut FleetWorld, cap: u64) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let tap = dead_tap(w).await?;
    // Every flooded message has reached the DLX (the tap holds a copy of each) before the count.
    let q = wait_for("the flood to reach the DLX", Duration::from_secs(10), || {
        let (suite, vhost) = (suite.clone(), vhost.clone());
        async move {
            let n = tap.fetch().await.map_err(|e| e.to_string())?.len() as u64;
            if n < 3 * cap {
                return Err(format!("{n} dead letters so far"));
            }
            match suite.broker.management().queue(&vhost, "bridge.dlq").await {
                Ok(Some(q)) if q.messages_ready > 0 => Ok(Some(q)),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await?;
    ensure!(
        q.messages_ready <= cap,
        "bridge.dlq holds {} messages, cap {cap}",
        q.messages_ready
    );
    Ok(())
}

#[when(expr = "{int} messages are dead-lettered while no gateway runs")]
async fn flood_dlq(w: &mut FleetWorld, n: usize) -> anyhow::Result<()> {
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    for h in hosts {
        w.host_mut(&h)?.gateway.kill().await;
    }
    dead_tap(w).await?;
    let probe = w.probe().await?;
    for i in 0..n {
        let msg = Crafted {
            exchange: "bridge.dlx".into(),
            routing_key: "flood".into(),
            headers: Default::default(),
            body: format!("dead letter {i}").into_bytes(),
            properties: Default::default(),
            mandatory: false,
        };
        probe.publish(&msg).await?;
    }
    Ok(())
}

#[given(regex = r#"^herdr on "([^"]+)" (swallows input|is down|comes back|cannot open panes)$"#)]
#[when(regex = r#"^herdr on "([^"]+)" (swallows input|is down|comes back|cannot open panes)$"#)]
async fn herdr_fault(w: &mut FleetWorld, host: String, what: String) -> anyhow::Result<()> {
    let h = w.host(&host)?;
    match what.as_str() {
        "swallows input" => h.herdr.set_fault(Fault::SwallowInput, true),
        "cannot open panes" => h.herdr.set_fault(Fault::CreateFails, true),
        "is down" => h.herdr.try_set_fault(Fault::Refuse, true)?,
        _ => h.herdr.try_set_fault(Fault::Refuse, false)?,
    }
    Ok(())
}

#[when(expr = "the pane of {string} is closed under the gateway")]
async fn pane_closed_under(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let e = w.entity(&name)?;
    let (host, pane) = (e.host.clone(), e.pane.clone());
    w.host(&host)?.herdr.close_pane(&pane);
    Ok(())
}

/// The shell hazard: the agent's process exits without `pane.release_agent`; herdr keeps showing
/// its last status, and the pane's shell now has the terminal ([`Fault::AgentGone`], which holds
/// for every agent on that herdr: the scenarios using it have one agent per host).
#[given(expr = "the agent of {string} has exited, herdr still showing its last status")]
#[when(expr = "the agent of {string} exits, herdr still showing its last status")]
async fn agent_exits(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let host = w.entity(&name)?.host.clone();
    w.host(&host)?.herdr.set_fault(Fault::AgentGone, true);
    Ok(())
}

/// Nothing at all reached the pane: no inject, nothing typed, nothing run by its shell.
#[then(expr = "herdr on {string} records nothing typed into {string}")]
async fn nothing_typed(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let herdr = &w.host(&host)?.herdr;
    fleet_conformance::timing::hold_for(
        &format!("nothing typed into {name}"),
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let log = herdr.input_log(&pane);
            async move {
                if log.is_empty() {
                    Ok(())
                } else {
                    Err(format!("herdr received {log:?}"))
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[given(expr = "{string} takes input without starting to work")]
async fn stays_idle(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let e = w.entity(&name)?;
    let (host, pane) = (e.host.clone(), e.pane.clone());
    w.host(&host)?.herdr.set_on_input(&pane, InputReaction::StayIdle);
    Ok(())
}

/// The agent program reads the line and never reports a status (a stuck or dead-slow agent):
/// herdr took the input and the status stays `idle`, so FWD-7's confirm window must fail.
#[given(expr = "{string} reads its input but never reports working")]
async fn never_reports(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let e = w.entity(&name)?;
    let (host, pane) = (e.host.clone(), e.pane.clone());
    w.host(&host)?.herdr.set_on_input(&pane, InputReaction::NeverReports);
    Ok(())
}

#[then(expr = "herdr on {string} records {string} as swallowed in {string}")]
async fn swallowed(w: &mut FleetWorld, host: String, text: String, name: String) -> anyhow::Result<()> {
    let pane = w.entity(&name)?.pane.clone();
    let s = w.host(&host)?.herdr.swallowed(&pane);
    ensure!(s.contains(&text), "herdr swallowed {s:?}, expected {text:?} among them");
    Ok(())
}

#[then(expr = "the gateway on {string} is still ready")]
async fn still_ready(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let (status, v) = w.host(&host)?.gateway.get("/readyz").await?;
    ensure!(status == 200, "/readyz on {host} answered {status}: {v}");
    Ok(())
}

#[then(
    regex = r#"^"([^"]+)" drains an? (INJECTED|FAILED) notice for the send(?: with reason "([a-z_]+)")? within (\d+) seconds$"#
)]
async fn send_notice(w: &mut FleetWorld, main: String, kind: String, reason: String, secs: u64) -> anyhow::Result<()> {
    let send = w
        .results
        .get("send")
        .cloned()
        .ok_or_else(|| anyhow!("the send has not returned yet"))?;
    let msg_id = send["msgId"]
        .as_str()
        .ok_or_else(|| anyhow!("send result has no msgId: {send}"))?
        .to_string();
    let handle = w.mcp(&main).await?.handle();
    let found = wait_for(
        &format!("an {kind} notice for the send"),
        Duration::from_secs(secs),
        || {
            let (handle, msg_id, kind) = (handle.clone(), msg_id.clone(), kind.clone());
            async move {
                let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
                let hit = fleet_conformance::contract::poll_messages(&v)
                    .map_err(|e| e.to_string())?
                    .into_iter()
                    .find(|m| m["kind"] == json!(kind) && m["corrId"] == json!(msg_id));
                Ok(hit)
            }
        },
    )
    .await?;
    if !reason.is_empty() {
        let body: serde_json::Value = serde_json::from_str(found["text"].as_str().unwrap_or("{}"))?;
        ensure!(
            body["reason"] == json!(reason),
            "notice {found} has reason {}, expected {reason:?}",
            body["reason"]
        );
    }
    Ok(())
}

/// [C-12] as written: a brief that reaches its worker's gateway after `ts + bound − confirm` gets
/// one look at the gate. Open, it is injected once (its INJECTED comes late); closed, it is FAILED
/// `busy`. Both are right, so each brief is judged to have exactly one of those outcomes: typed
/// once into the pane, or a FAILED `busy` notice (corrId = its SEND) drained by its main — never
/// lost, never typed twice, never both.
#[then(
    regex = r#"^briefs ([\d, and]+) each land once in "([^"]+)" on "([^"]+)" or come back to "([^"]+)" as FAILED busy$"#
)]
async fn land_once_or_busy(
    w: &mut FleetWorld,
    which: String,
    worker: String,
    host: String,
    main: String,
) -> anyhow::Result<()> {
    let ids: Vec<u32> = which
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse().ok())
        .collect();
    let mut briefs = Vec::new();
    for i in &ids {
        let v = w.call_result(&format!("send-{i}"), w.inject_bound()).await?;
        let msg_id = v["msgId"]
            .as_str()
            .ok_or_else(|| anyhow!("send {i} returned no msgId: {v}"))?
            .to_string();
        let text = w
            .results
            .get(&format!("send-{i}-text"))
            .and_then(|t| t.as_str().map(str::to_string))
            .ok_or_else(|| anyhow!("send {i}'s text was not recorded"))?;
        briefs.push((text, msg_id));
    }
    let pane = w.entity(&worker)?.pane.clone();
    let handle = w.mcp(&main).await?.handle();
    let herdr = w.host(&host)?.herdr.clone();
    let busy: std::sync::Mutex<Vec<String>> = Default::default();
    let outcome = |herdr: &fleet_conformance::herdr::FakeHerdr, busy: &[String]| {
        let log = herdr.input_log(&pane);
        briefs
            .iter()
            .map(|(text, id)| {
                let typed = log.iter().filter(|r| &r.text == text).count();
                (text.clone(), typed, busy.contains(id))
            })
            .collect::<Vec<_>>()
    };
    let poll_busy = |handle: fleet_conformance::mcp::McpHandle| {
        let busy = &busy;
        async move {
            let v = handle.call("bridge_poll", json!({})).await.map_err(|e| e.to_string())?;
            for m in fleet_conformance::contract::poll_messages(&v).map_err(|e| e.to_string())? {
                let body: serde_json::Value =
                    serde_json::from_str(m["text"].as_str().unwrap_or("{}")).unwrap_or_default();
                if m["kind"] == json!("FAILED")
                    && body["reason"] == json!("busy")
                    && let Some(c) = m["corrId"].as_str()
                {
                    busy.lock().map_err(|e| e.to_string())?.push(c.to_string());
                }
            }
            Ok::<(), String>(())
        }
    };
    wait_for(
        "every brief typed once or reported busy",
        w.inject_bound() + Duration::from_secs(3),
        || {
            let handle = handle.clone();
            let (herdr, poll_busy, outcome, busy) = (&herdr, &poll_busy, &outcome, &busy);
            async move {
                poll_busy(handle).await?;
                let seen = busy.lock().map_err(|e| e.to_string())?.clone();
                let now = outcome(herdr, &seen);
                if now.iter().all(|(_, typed, busy)| *typed > 0 || *busy) {
                    Ok(Some(()))
                } else {
                    Err(format!("(text, typed, busy): {now:?}"))
                }
            }
        },
    )
    .await?;
    fleet_conformance::timing::hold_for(
        "each brief typed at most once, never both typed and busy",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let handle = handle.clone();
            let (herdr, poll_busy, outcome, busy) = (&herdr, &poll_busy, &outcome, &busy);
            async move {
                poll_busy(handle).await?;
                let seen = busy.lock().map_err(|e| e.to_string())?.clone();
                let now = outcome(herdr, &seen);
                match now.iter().find(|(_, typed, busy)| *typed > 1 || (*typed > 0 && *busy)) {
                    Some(bad) => Err(format!("(text, typed, busy) {bad:?} among {now:?}")),
                    None => Ok(()),
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[given(expr = "{string} finishes each brief quickly")]
async fn works_briefly(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let e = w.entity(&name)?;
    let (host, pane) = (e.host.clone(), e.pane.clone());
    w.host(&host)?.herdr.set_on_input(&pane, InputReaction::WorksBriefly);
    Ok(())
}

#[given(expr = "gateways reach the broker through a link the suite can cut")]
async fn cuttable_link(w: &mut FleetWorld) -> anyhow::Result<()> {
    let addr = w.suite()?.broker.endpoint().amqp_addr();
    w.link = Some(fleet_conformance::proxy::Proxy::start(addr).await?);
    Ok(())
}

/// The link keeps carrying what gateways send, and drops what the broker answers: a publish
/// reaches its queue while its confirm is lost (SPEC [C-16], [C-18]). The next cut ends it.
#[when(expr = "the broker's answers through the link are lost")]
async fn lose_answers(w: &mut FleetWorld) -> anyhow::Result<()> {
    let link = w
        .link
        .as_ref()
        .ok_or_else(|| anyhow!("this scenario has no cuttable link"))?;
    link.lose_answers();
    Ok(())
}

#[then(regex = r#"^within (\d+) seconds the inbox of "([^"]+)" holds (\d+) messages?, ready or unacknowledged$"#)]
async fn inbox_holds_any(w: &mut FleetWorld, secs: u64, name: String, n: u64) -> anyhow::Result<()> {
    let queue = fleet_conformance::names::inbox(&w.gid(&name)?);
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    wait_for(&format!("{n} message(s) on {queue}"), Duration::from_secs(secs), || {
        let (suite, vhost, queue) = (suite.clone(), vhost.clone(), queue.clone());
        async move {
            match suite.broker.management().queue(&vhost, &queue).await {
                Ok(Some(q)) if q.messages_ready + q.messages_unacknowledged == n => Ok(Some(())),
                Ok(Some(q)) => Err(format!(
                    "{} ready + {} unacknowledged",
                    q.messages_ready, q.messages_unacknowledged
                )),
                Ok(None) => Err("no such queue".into()),
                Err(e) => Err(e.to_string()),
            }
        }
    })
    .await?;
    Ok(())
}

#[when(expr = "the link to the broker is cut")]
async fn cut_link(w: &mut FleetWorld) -> anyhow::Result<()> {
    let link = w
        .link
        .as_ref()
        .ok_or_else(|| anyhow!("this scenario has no cuttable link"))?;
    let n = link.cut();
    ensure!(n > 0, "no live connection went through the link");
    Ok(())
}

#[given(expr = "gateways use an AMQP heartbeat of {int} seconds")]
async fn amqp_heartbeat(w: &mut FleetWorld, s: u32) {
    w.gateway_env.insert("FLEET_AMQP_HEARTBEAT_S".into(), s.to_string());
}

#[when(expr = "a second gateway for host {string} starts on the same state")]
async fn second_gateway(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let spec = w.host(&host)?.gateway.spec.clone();
    let gw = fleet_conformance::gateway::GatewayProcess::start_unready(spec)?;
    w.replacements.insert(host, gw);
    Ok(())
}

/// CONTRACT §5: a healthy start logs no line at ERROR. CON-2 judges a refusal by a line at ERROR;
/// a gateway whose every start logs one (as the reference gateway did on LavinMQ, closing its
/// `bridge.delay` probe) would pass that check without refusing anything. The window is the whole
/// log so far: every gateway of the scenario has started and is ready, and nothing has failed.
#[then("no gateway has logged a line at ERROR since it started")]
async fn no_error_on_start(w: &mut FleetWorld) -> anyhow::Result<()> {
    ensure!(
        !w.hosts.is_empty(),
        "no gateway is running: the check would prove nothing"
    );
    for (name, h) in &w.hosts {
        let (status, v) = h.gateway.get("/readyz").await?;
        ensure!(
            status == 200,
            "gateway {name} is not ready (/readyz {status}: {v}): not a healthy start"
        );
        let log = h.gateway.log();
        ensure!(
            !log.trim().is_empty(),
            "gateway {name} has logged nothing: its log is not being read"
        );
        let errors: Vec<&str> = log
            .lines()
            .filter(|l| fleet_conformance::contract::log_line_at(l, fleet_conformance::contract::LogLevel::Error))
            .collect();
        ensure!(
            errors.is_empty(),
            "gateway {name} logged {} line(s) at ERROR on a healthy start (CONTRACT §5: none; CON-2 \
             judges a refusal by its ERROR line):\n{}",
            errors.len(),
            errors.join("\n")
        );
    }
    Ok(())
}

/// CON-2 + [C-14]: the second gateway is refused its host's exclusive queues or an entity's
/// inbox (the frozen first one holds them): it logs that at ERROR, naming what it could not take
/// (CONTRACT §5: the queue's name or the entity's gid), and its `/readyz` answers 503. The
/// wording around the name is the gateway's.
#[then(regex = r#"^the second gateway for "([^"]+)" logs the refusal at ERROR and is not ready$"#)]
async fn second_not_ready(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let gw = w
        .replacements
        .get(&host)
        .ok_or_else(|| anyhow!("no second gateway for {host}"))?;
    let host_id = gw.spec.host.clone();
    let mut names = vec![
        fleet_conformance::names::roster_queue(&host_id),
        fleet_conformance::names::control_queue(&host_id),
    ];
    names.extend(w.entities.values().filter(|e| e.host == host).map(|e| e.gid.clone()));
    refused_and_not_ready(gw, &names).await
}

/// CON-2 + [C-14]: `gw` logs a line at ERROR naming one of `names` (a queue or gid it could not
/// take, CONTRACT §5) and then answers `/readyz` 503. Shared by CON-2's and CLU-3's refusals.
pub(crate) async fn refused_and_not_ready(
    gw: &fleet_conformance::gateway::GatewayProcess,
    names: &[String],
) -> anyhow::Result<()> {
    wait_for(
        "the gateway to log the refusal at ERROR, naming a queue or gid it could not take (CON-2)",
        Duration::from_secs(15),
        || async move {
            let log = gw.log();
            if fleet_conformance::contract::con2_refusal(&log, names).is_some() {
                Ok(Some(()))
            } else {
                Err(format!(
                    "no ERROR line naming any of {names:?} yet; last: {:?}",
                    log.lines().last()
                ))
            }
        },
    )
    .await?;
    // Not a window: the broker drops a frozen holder's consumers after a few heartbeats, and
    // then the refused gateway rightly becomes ready (CON-2's next step).
    wait_for(
        "the gateway answering /readyz 503 after the refusal ([C-14])",
        Duration::from_secs(10),
        || async {
            match gw.get("/readyz").await {
                Ok((503, _)) => Ok(Some(())),
                Ok((s, v)) => Err(format!("/readyz answered {s}: {v}")),
                Err(e) => Err(format!("/readyz did not answer: {e}")),
            }
        },
    )
    .await?;
    Ok(())
}

#[then(expr = "the second gateway for {string} becomes ready within {int} seconds")]
async fn second_ready(w: &mut FleetWorld, host: String, secs: u64) -> anyhow::Result<()> {
    let gw = w
        .replacements
        .get_mut(&host)
        .ok_or_else(|| anyhow!("no second gateway for {host}"))?;
    gw.wait_ready(Duration::from_secs(secs)).await?;
    Ok(())
}

#[when(expr = "the first gateway for {string} is replaced by the second")]
async fn replace_first(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let second = w
        .replacements
        .remove(&host)
        .ok_or_else(|| anyhow!("no second gateway for {host}"))?;
    let h = w.host_mut(&host)?;
    let mut first = std::mem::replace(&mut h.gateway, second);
    let _ = first.signal(libc::SIGCONT);
    first.kill().await;
    for e in w.entities.values_mut().filter(|e| e.host == host) {
        e.mcp = None;
    }
    Ok(())
}
