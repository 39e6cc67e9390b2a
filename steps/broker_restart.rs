//! Steps of broker restarts (features/broker_restart.feature): the broker node stopped and started
//! again on its data, with gateways that must come back on their own (CON-3) and lose or double
//! nothing — held replies (RPL-1), briefs in flight (FWD-1, FWD-5), presence (PRS-2), a migration
//! in the middle of a move (MIG-3) — because what they publish is persistent and what they declare
//! durable (SPEC §1, §2).
//!
//! A restart breaks every connection into the broker, so these scenarios run on a broker of their
//! own (`Suite::restart_suite`: a second node of the same spec, started on first use), and each
//! takes it to itself ([`Broker::create_exclusive_vhost`](fleet_conformance::broker::Broker)):
//! one at a time there, while the other scenarios share the first broker. The url: provider
//! cannot restart a broker; the runner leaves these scenarios out there (`@broker-restart`,
//! `BrokerSpec::cannot_run`) and says they were not tested, and the first step fails loudly should
//! one be run there anyway.
//!
//! State between steps lives in `w.notes.restart` ([`crate::world::RestartNotes`]) and `w.calls`
//! (background tasks, their results in `w.results`): the durable copy of the wire is a named queue
//! on the broker, read again from a fresh connection each time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::legacy::{LegacyBroker, legacy_queue_name};
use fleet_conformance::probe::Probe;
use fleet_conformance::timing::{hold_for, scaled, wait_for};
use serde_json::{Value, json};

use crate::world::FleetWorld;

/// `w.calls` label of the readiness watch that runs while the broker is away.
const WATCH: &str = "broker-restart: readiness while the broker is away";
/// Prefix of `w.calls` labels of timed sends.
const TIMED: &str = "timed:";

fn restarts(w: &FleetWorld) -> u64 {
    w.notes.restart.restarts
}

fn vhost_of(w: &FleetWorld) -> anyhow::Result<String> {
    w.vhost
        .clone()
        .ok_or_else(|| anyhow!("no vhost: the scenario must start with \"a broker the suite can restart\""))
}

/// The quoted words of a step's text, in order.
fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}

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

/// Closes a probe connection, waiting a few seconds at most: lapin's `close` sometimes never sees
/// the broker's close-ok on a connection opened after a broker restart (seen 2 times in ~15 runs;
/// what was read is complete by then). A connection left open goes with the scenario's vhost.
async fn close_quietly(probe: Probe) {
    let bound = scaled(Duration::from_secs(5));
    if tokio::time::timeout(bound, probe.close()).await.is_err() {
        eprintln!("note: a probe connection did not close within {bound:?}; it goes with the vhost");
    }
}

/// Runs `f` within the (scaled) [`PROBE_BOUND`]: a probe that hangs fails the step, saying what.
async fn bounded<T>(what: &str, f: impl std::future::Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    let bound = scaled(PROBE_BOUND);
    tokio::time::timeout(bound, f)
        .await
        .map_err(|_| anyhow!("{what} did not finish within {bound:?}"))?
}

// ---- The broker to itself, down and back ----

#[given("a broker the suite can restart, to this scenario alone")]
async fn restartable_broker(w: &mut FleetWorld) -> anyhow::Result<()> {
    ensure!(
        w.vhost.is_none(),
        "the scenario already uses the shared broker through vhost {:?}: this step must come first",
        w.vhost
    );
    let shared = w.suite()?;
    if let Some(why) = shared.broker.cannot_restart() {
        bail!(
            "not tested on {}: {why}. The runner leaves @broker-restart scenarios out on this provider; \
             this one was run anyway",
            shared.broker.spec().label()
        );
    }
    // From here on every step of this scenario (gateways, probes, the management API) uses the
    // restart broker: the world's suite is that broker's.
    let suite = shared.restart_suite().await?;
    w.suite = Some(suite.clone());
    if let Some(why) = suite.broker.cannot_restart() {
        bail!(
            "not tested on {}: {why}. The runner leaves @broker-restart scenarios out on this provider; \
             this one was run anyway",
            suite.broker.spec().label()
        );
    }
    let others = suite.broker.other_users("");
    let started = Instant::now();
    let vhost = suite
        .broker
        .create_exclusive_vhost()
        .await
        .map_err(|e| anyhow!("taking the broker for this scenario alone: {e}"))?;
    if !others.is_empty() {
        // Only @broker-restart scenarios use this broker: they take it one at a time.
        eprintln!(
            "broker restart scenario: {} other restart scenario(s) were using their broker when it started; \
             it waited {:.1?} for them to finish",
            others.len(),
            started.elapsed()
        );
    }
    w.vhost = Some(vhost);
    Ok(())
}

/// Starts polling every gateway's `/readyz` until the broker is back (or a bound passes), keeping
/// the statuses each answered; [`come_back`] collects them.
fn watch_readiness(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let targets: Vec<(String, String)> = w
        .hosts
        .iter()
        .map(|(name, h)| (name.clone(), format!("{}/readyz", h.gateway.base_url())))
        .collect();
    let task = tokio::spawn(async move {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(1)).build()?;
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let bound = Instant::now() + scaled(Duration::from_secs(300));
        let mut was_down = false;
        loop {
            let down = suite.broker.is_down();
            for (host, url) in &targets {
                let status = match http.get(url).send().await {
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) => format!("unreachable ({e})"),
                };
                seen.entry(host.clone()).or_default().insert(status);
            }
            was_down |= down;
            if (was_down && !suite.broker.is_down()) || Instant::now() > bound {
                return Ok(json!(seen));
            }
            // The pace of the looks: what is judged is every status seen until the broker is back.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    w.results.remove(WATCH);
    w.calls.insert(WATCH.into(), task);
    Ok(())
}

/// Stops the broker (its data kept), after taking what the durable copy holds so far.
async fn go_down(w: &mut FleetWorld) -> anyhow::Result<()> {
    if w.notes.restart.copy.is_some() {
        fetch_copy(w)
            .await
            .map_err(|e| anyhow!("reading the durable copy before the restart: {e:#}"))?;
    }
    let suite = w.suite()?;
    let vhost = vhost_of(w)?;
    watch_readiness(w)?;
    let started = Instant::now();
    suite
        .broker
        .halt(&vhost)
        .await
        .map_err(|e| anyhow!("stopping the broker: {e}"))?;
    eprintln!(
        "broker {} stopped in {:.1?}",
        suite.broker.spec().label(),
        started.elapsed()
    );
    w.notes.restart.restarts += 1;
    Ok(())
}

/// Starts the broker again on its data and collects what gateways answered meanwhile.
async fn come_back(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = vhost_of(w)?;
    let started = Instant::now();
    suite
        .broker
        .resume(&vhost)
        .await
        .map_err(|e| anyhow!("starting the broker again: {e}"))?;
    eprintln!(
        "broker {} back in {:.1?}",
        suite.broker.spec().label(),
        started.elapsed()
    );
    w.call_result(WATCH, Duration::from_secs(10))
        .await
        .map_err(|e| anyhow!("the readiness watch: {e:#}"))?;
    Ok(())
}

#[when("the broker restarts")]
async fn broker_restarts(w: &mut FleetWorld) -> anyhow::Result<()> {
    go_down(w).await?;
    come_back(w).await
}

#[when("the broker goes down")]
async fn broker_down(w: &mut FleetWorld) -> anyhow::Result<()> {
    go_down(w).await
}

#[when("the broker comes back")]
async fn broker_back(w: &mut FleetWorld) -> anyhow::Result<()> {
    come_back(w).await
}

#[then("every gateway reported not ready while the broker was away")]
async fn reported_not_ready(w: &mut FleetWorld) -> anyhow::Result<()> {
    let seen = w
        .results
        .get(WATCH)
        .cloned()
        .ok_or_else(|| anyhow!("the broker has not been restarted in this scenario"))?;
    for host in w.hosts.keys() {
        let statuses: Vec<String> = serde_json::from_value(seen[host].clone()).unwrap_or_default();
        ensure!(
            statuses.iter().any(|s| s == "503"),
            "the gateway on {host} never answered /readyz 503 while the broker was away (it answered {statuses:?}): \
             [C-14] wants 503 while it has no broker connection"
        );
    }
    Ok(())
}

#[then(expr = "every gateway reports not ready within {int} seconds")]
async fn reports_not_ready(w: &mut FleetWorld, secs: u64) -> anyhow::Result<()> {
    for (host, h) in &w.hosts {
        wait_for(
            &format!("/readyz of {host} to answer 503"),
            Duration::from_secs(secs),
            || async {
                match h.gateway.get("/readyz").await {
                    Ok((503, _)) => Ok(Some(())),
                    Ok((s, v)) => Err(format!("{s}: {v}")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
    }
    Ok(())
}

#[then(expr = "every gateway is ready again within {int} seconds")]
async fn ready_again(w: &mut FleetWorld, secs: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    for host in hosts {
        // One deadline for all: they reconnect in parallel.
        let left = Duration::from_secs(secs)
            .saturating_sub(started.elapsed().div_f64(fleet_conformance::timing::time_scale()));
        w.host_mut(&host)?
            .gateway
            .wait_ready(left)
            .await
            .map_err(|e| anyhow!("the gateway on {host} is not ready again after the broker restart: {e}"))?;
    }
    eprintln!(
        "gateways ready again {:.1?} after the broker was back",
        started.elapsed()
    );
    Ok(())
}

// ---- Briefs and replies around the restart ----

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

/// Everything `main` can drain (from `from`, if given) until the (scaled) deadline, or until
/// `enough` says so: polls, and blocks in `bridge_wait` while nothing is held.
async fn drain_until(
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
fn describe(msgs: &[Value]) -> Vec<String> {
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

// ---- A migration interrupted by the restart ----

#[when(expr = "the broker restarts once {int} of the {int} replies of v1 pane {string} have moved")]
async fn restart_mid_move(w: &mut FleetWorld, k: u32, total: u32, pane: String) -> anyhow::Result<()> {
    ensure!(total > k + 1, "seed more than {} replies for this step", k + 1);
    let suite = w.suite()?;
    let url = suite.broker.amqp_url(&vhost_of(w)?);
    let queue = legacy_queue_name(&pane);
    let lb = LegacyBroker::connect(&url).await?;
    let (lbr, queue_ref) = (&lb, queue.as_str());
    // Ready messages exclude those the gateway holds unacked: "moved" counts them too, which is
    // fine for "the move is under way".
    let seen = wait_for(
        &format!("{k} replies of {queue} to move"),
        Duration::from_secs(30),
        || async move {
            match lbr.queue_state(queue_ref).await {
                Ok(Some(s)) if total.saturating_sub(s.messages) >= k => Ok(Some(Ok(s))),
                Ok(Some(s)) => Err(format!("{} moved so far", total.saturating_sub(s.messages))),
                Ok(None) => Ok(Some(Err(()))),
                Err(e) => Err(e.to_string()),
            }
        },
    )
    .await;
    lb.close().await;
    match seen? {
        Ok(_) => {}
        Err(()) => bail!("{queue} was gone before the restart: the whole move finished first; seed more replies"),
    }
    go_down(w).await?;
    // What the broker kept, read the moment it answers again: the look starts while the broker
    // is still down and retries until it connects, so it comes before the gateways' own
    // reconnect (backoff, then declares) can resume the move. (Read after `come_back`, which
    // waits for every gateway's readiness, a fast gateway had already finished the move.)
    let look = {
        let (url, queue) = (url.clone(), queue.clone());
        tokio::spawn(async move {
            wait_for(
                &format!("{queue} readable again after the restart"),
                Duration::from_secs(120),
                move || {
                    let (url, queue) = (url.clone(), queue.clone());
                    async move {
                        let lb = tokio::time::timeout(scaled(Duration::from_secs(5)), LegacyBroker::connect(&url))
                            .await
                            .map_err(|_| "connect: no answer".to_string())?
                            .map_err(|e| e.to_string())?;
                        let s = lb.queue_state(&queue).await;
                        // As with the probe (see `close_quietly`): what was read is complete.
                        let _ = tokio::time::timeout(scaled(Duration::from_secs(5)), lb.close()).await;
                        s.map(Some).map_err(|e| e.to_string())
                    }
                },
            )
            .await
        })
    };
    come_back(w).await?;
    let s = look
        .await
        .map_err(|e| anyhow!("the look at {pane}'s legacy queue: {e}"))??;
    w.notes.restart.legacy_back = Some((pane, s.map(|s| s.messages)));
    Ok(())
}

#[then(expr = "the legacy queue of v1 pane {string} still held replies when the broker was back")]
async fn legacy_held_when_back(w: &mut FleetWorld, pane: String) -> anyhow::Result<()> {
    let (moved, held) = w
        .notes
        .restart
        .legacy_back
        .clone()
        .ok_or_else(|| anyhow!("the broker was not restarted in the middle of a move"))?;
    ensure!(moved == pane, "the restart was in the move of {moved}");
    ensure!(
        held.unwrap_or(0) > 0,
        "{} held no reply when the broker was back ({}): the restart interrupted nothing (the move had \
         finished, or resumed before the suite could look)",
        legacy_queue_name(&pane),
        held.map_or("the queue was gone".to_string(), |n| format!("{n} ready"))
    );
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

// ---- What gateways publish and declare ----

#[given("the probe keeps a durable copy of what is published on bridge.msg, bridge.roster and bridge.control")]
async fn durable_copy(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let url = suite.broker.amqp_url(&vhost_of(w)?);
    let queue = format!("probe.durable-copy.{}", uuid::Uuid::new_v4().simple());
    // bridge.control is a direct exchange: one binding per host that runs a gateway (a binding
    // for any other key would make an unroutable SPAWN routable).
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    let mut bindings: Vec<(&str, &str)> = vec![("bridge.msg", "#"), ("bridge.roster", "#")];
    bindings.extend(hosts.iter().map(|h| ("bridge.control", h.as_str())));
    bounded("declaring the durable copy", async {
        let probe = Probe::connect(&url).await?;
        let r = probe.durable_tap(&queue, &bindings).await;
        close_quietly(probe).await;
        r.map(drop).map_err(anyhow::Error::from)
    })
    .await?;
    w.notes.restart.copy = Some((queue, Vec::new()));
    Ok(())
}

/// Takes what the durable copy received since the last look (marked with the number of restarts
/// so far) and returns everything it ever received.
async fn fetch_copy(w: &mut FleetWorld) -> anyhow::Result<Vec<Value>> {
    let (queue, mut captured) = w
        .notes
        .restart
        .copy
        .clone()
        .ok_or_else(|| anyhow!("no durable copy: add \"the probe keeps a durable copy of …\""))?;
    let suite = w.suite()?;
    let url = suite.broker.amqp_url(&vhost_of(w)?);
    // Which part of the look is under way, for the error should one hang.
    let stage = std::sync::Mutex::new("connecting");
    let set = |now: &'static str| *stage.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
    let fetched = bounded(&format!("reading the durable copy {queue}"), async {
        let probe = Probe::connect(&url).await?;
        set("opening a channel");
        let fetched = match probe.reattach(&queue).await {
            Ok(tap) => {
                set("fetching");
                tap.fetch().await
            }
            Err(e) => Err(e),
        };
        set("closing the connection");
        close_quietly(probe).await;
        Ok(fetched?)
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
