//! The soak run (`@soak`, not in the default set): many briefs and replies across three hosts
//! while a nemesis kills, freezes and cuts gateways, then a history check.
//!
//! Every operation is classified as the caller saw it — ok, failed, or unknown (the call itself
//! could not tell) — and checked against what really happened (herdr's input log, the main's
//! drains): an ok brief never injected or an ok reply never drained is **lost**; a failed brief
//! that was injected is **unexpected**; a brief injected twice is a **duplicate inject**; a reply
//! drained twice is a pull-path duplicate. Any of these fails the run.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{then, when};
use fleet_conformance::mcp::{McpClient, McpHandle};
use fleet_conformance::timing::{scaled, wait_for};
use serde_json::json;
use tokio::task::JoinSet;

use crate::world::FleetWorld;

/// What the caller of one operation saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    Ok,
    Failed,
    Unknown,
}

/// The recorded history of a soak run.
#[derive(Default)]
pub struct SoakState {
    briefs: BTreeMap<String, (String, Seen)>,
    /// How each failed or unknown brief was answered (status/reason), counted.
    outcomes: BTreeMap<String, usize>,
    replies: BTreeMap<String, Seen>,
    nemesis: Vec<String>,
    /// REPLY texts the main drained, with how often, while the run went on.
    drained: BTreeMap<String, usize>,
}

fn classify_send(v: &anyhow::Result<serde_json::Value>) -> Seen {
    match v {
        Ok(v) if v["status"] == "injected" => Seen::Ok,
        Ok(v) if v["status"] == "failed" || v["status"] == "no_route" => Seen::Failed,
        _ => Seen::Unknown,
    }
}

async fn reply_with_reconnect(url: String, token: String, texts: Vec<String>) -> Vec<(String, Seen)> {
    let mut out = Vec::new();
    let mut client: Option<McpClient> = None;
    for text in texts {
        if client.is_none() {
            client = McpClient::connect(&url, &token).await.ok();
        }
        let seen = match &client {
            None => Seen::Failed,
            Some(c) => match c.call("bridge_reply", json!({"text": text})).await {
                Ok(v) if v["msgId"].is_string() => Seen::Ok,
                Ok(_) => Seen::Failed,
                Err(_) => {
                    client = None; // the gateway restarted: reconnect for the next one
                    Seen::Unknown
                }
            },
        };
        out.push((text, seen));
    }
    out
}

#[when(
    regex = r#"^"([^"]+)" sends (\d+) briefs to each of "([^"]+)" and "([^"]+)", which reply (\d+) times each, while a nemesis strikes every (\d+) ms$"#
)]
async fn soak(
    w: &mut FleetWorld,
    main: String,
    n: usize,
    w1: String,
    w2: String,
    r: usize,
    every: u64,
) -> anyhow::Result<()> {
    let lead: McpHandle = w.mcp(&main).await?.handle();
    let mut ops: JoinSet<Vec<(String, String, anyhow::Result<serde_json::Value>)>> = JoinSet::new();
    for worker in [&w1, &w2] {
        let gid = w.gid(worker)?;
        for lane in 0..2 {
            let (lead, gid, worker) = (lead.clone(), gid.clone(), worker.clone());
            ops.spawn(async move {
                let mut out = Vec::new();
                for i in (lane..n).step_by(2) {
                    let text = format!("soak brief {worker} #{i}");
                    let v = lead
                        .call("bridge_send", json!({"to": gid, "text": text, "wait_reply": false}))
                        .await;
                    out.push((worker.clone(), text, v.map_err(anyhow::Error::from)));
                }
                out
            });
        }
    }
    // The main drains as it goes, as a real main does: held replies fill its prefetch window, and
    // a main that never drains stops hearing INJECTED for its own sends (RPL-5).
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let drainer = {
        let lead = lead.clone();
        tokio::spawn(async move {
            let mut drained: BTreeMap<String, usize> = BTreeMap::new();
            loop {
                if let Ok(v) = lead.call("bridge_poll", json!({"max": 200})).await {
                    for m in v["messages"].as_array().into_iter().flatten() {
                        if m["kind"] == "REPLY" {
                            *drained
                                .entry(m["text"].as_str().unwrap_or_default().to_string())
                                .or_default() += 1;
                        }
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop_rx.changed() => break,
                }
            }
            drained
        })
    };
    let mut repliers = JoinSet::new();
    for worker in [&w1, &w2] {
        let e = w.entity(worker)?;
        let url = w.host(&e.host)?.gateway.mcp_url();
        let texts: Vec<String> = (0..r).map(|i| format!("soak reply {worker} #{i}")).collect();
        repliers.spawn(reply_with_reconnect(url, e.token.clone(), texts));
    }
    // The nemesis strikes the workers' hosts until the operations are done.
    let hosts: Vec<String> = [&w1, &w2]
        .iter()
        .filter_map(|n| w.entity(n).ok().map(|e| e.host.clone()))
        .collect();
    let mut round = 0usize;
    while !(ops.is_empty() && repliers.is_empty()) {
        let tick = tokio::time::sleep(scaled(Duration::from_millis(every)));
        tokio::select! {
            Some(done) = ops.join_next() => {
                for (worker, text, v) in done? {
                    let seen = classify_send(&v);
                    let label = match &v {
                        Ok(v) => format!(
                            "{}/{} {}",
                            v["status"].as_str().unwrap_or("?"),
                            v["reason"].as_str().unwrap_or("-"),
                            v["detail"].as_str().unwrap_or("").chars().take(50).collect::<String>()
                        ),
                        Err(e) => format!("error: {}", e.to_string().chars().take(60).collect::<String>()),
                    };
                    *w.soak.outcomes.entry(label).or_default() += 1;
                    w.soak.briefs.insert(text, (worker, seen));
                }
                continue;
            }
            Some(done) = repliers.join_next() => {
                for (text, seen) in done? {
                    w.soak.replies.insert(text, seen);
                }
                continue;
            }
            _ = tick => {}
        }
        let host = hosts[round % hosts.len()].clone();
        let act = match round % 3 {
            0 => {
                let h = w.host_mut(&host)?;
                h.gateway.kill().await;
                h.gateway.launch().await?;
                format!("SIGKILL+restart {host}")
            }
            1 => {
                let h = w.host(&host)?;
                h.gateway.signal(libc::SIGSTOP)?;
                tokio::time::sleep(scaled(Duration::from_millis(every / 2))).await;
                w.host(&host)?.gateway.signal(libc::SIGCONT)?;
                format!("SIGSTOP/SIGCONT {host}")
            }
            _ => match &w.link {
                Some(link) => format!("cut {} connections", link.cut()),
                None => "no link to cut".into(),
            },
        };
        w.soak.nemesis.push(act);
        round += 1;
    }
    let _ = stop_tx.send(true);
    w.soak.drained = drainer.await?;
    Ok(())
}

#[then(
    expr = "after healing, the history of {string} with {string} and {string} shows nothing lost, unexpected or duplicated"
)]
async fn history(w: &mut FleetWorld, main: String, w1: String, w2: String) -> anyhow::Result<()> {
    for h in w.hosts.keys().cloned().collect::<Vec<_>>() {
        w.host_mut(&h)?.gateway.wait_ready(Duration::from_secs(30)).await?;
    }
    // Drain every reply the main can still get (ok or unknown), until the ok ones are all in.
    let want_ok: Vec<String> = w
        .soak
        .replies
        .iter()
        .filter(|(_, s)| **s == Seen::Ok)
        .map(|(t, _)| t.clone())
        .collect();
    let handle = w.mcp(&main).await?.handle();
    let mut drained: BTreeMap<String, usize> = std::mem::take(&mut w.soak.drained);
    let deadline = tokio::time::Instant::now() + scaled(Duration::from_secs(60));
    loop {
        let v = handle.call("bridge_poll", json!({"max": 500})).await?;
        for m in v["messages"].as_array().into_iter().flatten() {
            if m["kind"] == "REPLY" {
                *drained
                    .entry(m["text"].as_str().unwrap_or_default().to_string())
                    .or_default() += 1;
            }
        }
        let missing = want_ok.iter().filter(|t| !drained.contains_key(*t)).count();
        if missing == 0 || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Injects as herdr saw them; briefs still in flight get the inject bound to land.
    let inject_log = |w: &FleetWorld| -> anyhow::Result<BTreeMap<String, usize>> {
        let mut m = BTreeMap::new();
        for name in [&w1, &w2] {
            let e = w.entity(name)?;
            for r in w.host(&e.host)?.herdr.input_log(&e.pane) {
                *m.entry(r.text).or_default() += 1;
            }
        }
        Ok(m)
    };
    let want_inj: Vec<String> = w
        .soak
        .briefs
        .iter()
        .filter(|(_, (_, s))| *s == Seen::Ok)
        .map(|(t, _)| t.clone())
        .collect();
    let w2r: &FleetWorld = w;
    let _ = wait_for("every ok brief to be in herdr's log", Duration::from_secs(30), || {
        let log = inject_log(w2r);
        let want = &want_inj;
        async move {
            let log = log.map_err(|e| e.to_string())?;
            let missing = want.iter().filter(|t| !log.contains_key(*t)).count();
            if missing == 0 {
                Ok(Some(()))
            } else {
                Err(format!("{missing} missing"))
            }
        }
    })
    .await;
    let injects = inject_log(w)?;
    let count = |s: Seen| w.soak.briefs.values().filter(|(_, x)| *x == s).count();
    let lost_briefs: Vec<&String> = w
        .soak
        .briefs
        .iter()
        .filter(|(t, (_, s))| *s == Seen::Ok && !injects.contains_key(*t))
        .map(|(t, _)| t)
        .collect();
    let unexpected: Vec<&String> = w
        .soak
        .briefs
        .iter()
        .filter(|(t, (_, s))| *s == Seen::Failed && injects.contains_key(*t))
        .map(|(t, _)| t)
        .collect();
    let dup_injects: Vec<(&String, &usize)> = injects
        .iter()
        .filter(|(t, n)| t.starts_with("soak brief") && **n > 1)
        .collect();
    let lost_replies: Vec<&String> = want_ok.iter().filter(|t| !drained.contains_key(*t)).collect();
    let dup_replies: Vec<(&String, &usize)> = drained.iter().filter(|(_, n)| **n > 1).collect();
    let summary = format!(
        "soak history: briefs ok {} / failed {} / unknown {}; replies ok {} / unknown {} / failed {}; \
         nemesis {} strikes ({:?}); lost briefs {}, unexpected injects {}, duplicate injects {}, \
         lost replies {}, duplicate drains {}; send outcomes {:?}",
        count(Seen::Ok),
        count(Seen::Failed),
        count(Seen::Unknown),
        want_ok.len(),
        w.soak.replies.values().filter(|s| **s == Seen::Unknown).count(),
        w.soak.replies.values().filter(|s| **s == Seen::Failed).count(),
        w.soak.nemesis.len(),
        w.soak.nemesis.iter().take(6).collect::<Vec<_>>(),
        lost_briefs.len(),
        unexpected.len(),
        dup_injects.len(),
        lost_replies.len(),
        dup_replies.len(),
        w.soak.outcomes,
    );
    println!("{summary}");
    ensure!(
        lost_briefs.is_empty()
            && unexpected.is_empty()
            && dup_injects.is_empty()
            && lost_replies.is_empty()
            && dup_replies.is_empty(),
        "{summary}\nlost briefs {lost_briefs:?}\nunexpected {unexpected:?}\nduplicate injects {dup_injects:?}\nlost replies {lost_replies:?}\nduplicate drains {dup_replies:?}"
    );
    // A history with nothing acknowledged proves nothing.
    ensure!(
        count(Seen::Ok) > 0 && !want_ok.is_empty(),
        "{}",
        anyhow!("no brief or no reply was acknowledged: {summary}")
    );
    Ok(())
}
