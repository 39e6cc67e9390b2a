//! Running the soak: the step that takes the broker alone (so the nemesis may restart it), and the
//! step that sends briefs and replies across the hosts, paced by the nemesis clock, while the
//! main drains and the nemesis strikes, recording every operation and strike.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use cucumber::{given, when};
use fleet_conformance::mcp::{McpClient, McpHandle};
use fleet_conformance::timing::scaled;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::world::FleetWorld;

use super::certs::trust_strikes_off;
use super::config::{NEMESIS_VAR, OPS_VAR, SEED_VAR, SoakConfig, op_counts};
use super::history::{NO_SESSION, Op, Seen, classify_reply, classify_send, msg_id_of, record_poll};
use super::nemesis::{Event, NemesisClock, Rng, Strike};
use super::nodes::{cluster_profile, cut_links, node_strike_off, strike_node};
use super::site::strike_site;
use super::trust::strike_trust;

/// One reply as its worker saw it: text, class, outcome, msgId, span.
type Replied = (String, Seen, String, Option<String>, (Duration, Duration));

/// Replies `texts` from one worker, each once, paced by the nemesis clock as the briefs are:
/// reply `k` of `r` waits until the nemesis is `k/r` of the way through the `spread` strikes (so
/// replies run through the whole nemesis, not in its first seconds). They are not paced by the
/// worker's briefs: a brief that waits out its inject bound (a frozen or revoked worker gateway)
/// would hold the replies back exactly while their host is struck, and a revoked host's replies
/// are what the history must judge (counted failed, never lost). A session the gateway dropped is
/// reopened for the next reply; a gateway that cannot be reached is retried for a while before
/// that reply counts as failed (no call was made).
async fn reply_paced(
    url: String,
    token: String,
    texts: Vec<String>,
    clock: Arc<NemesisClock>,
    spread: usize,
    run_started: Instant,
) -> Vec<Replied> {
    let r = texts.len().max(1);
    let mut out = Vec::new();
    let mut client: Option<McpClient> = None;
    for (k, text) in texts.into_iter().enumerate() {
        let due = (k * spread) as f64 / r as f64;
        while clock.progress() < due {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if client.is_none() {
            let give_up = Instant::now() + scaled(Duration::from_secs(15));
            while client.is_none() && Instant::now() < give_up {
                match McpClient::connect(&url, &token).await {
                    Ok(c) => client = Some(c),
                    Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        }
        let began = run_started.elapsed();
        let (seen, outcome, msg_id) = match &client {
            None => (Seen::Failed, NO_SESSION.to_string(), None),
            Some(c) => {
                let v = c.call("bridge_reply", json!({"text": text})).await;
                if v.is_err() {
                    client = None; // the gateway restarted or hung: a new session for the next one
                }
                let (seen, outcome) = classify_reply(&v);
                (seen, outcome, v.as_ref().ok().and_then(msg_id_of))
            }
        };
        out.push((text, seen, outcome, msg_id, (began, run_started.elapsed())));
    }
    out
}

/// The step that lets the nemesis break every connection into the broker: a broker restart (where
/// the provider can) or, on a cluster whose gateways run the cluster profile, a node strike. Either
/// would break other scenarios' connections too, so the scenario takes the broker (the cluster)
/// to itself; a scenario that strikes nodes has the cluster made whole again at its cleanup
/// ([`crate::cluster::ClusterState::exclusive`]) as well as at its end.
#[given("a broker the soak's nemesis may restart and strike node by node")]
async fn restartable_broker(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let config = SoakConfig::from_env(cluster_profile(&suite))?;
    let restarts = config.cycle.iter().any(|s| s.restarts_broker()) && suite.broker.cannot_restart().is_none();
    let strikes_nodes = config
        .cycle
        .iter()
        .any(|s| s.is_node() && node_strike_off(&suite, *s).is_none());
    if w.vhost.is_none() && (restarts || strikes_nodes) {
        // A restart or a node strike breaks every connection into the broker (into that node):
        // this scenario takes it alone.
        w.vhost = Some(
            suite
                .broker
                .create_exclusive_vhost()
                .await
                .context("taking the broker for this scenario alone")?,
        );
        w.soak.exclusive = true;
        // The cleanup makes the cluster whole again, whatever the scenario's end.
        w.cluster.exclusive |= strikes_nodes;
    }
    w.vhost().await?;
    if cluster_profile(&suite) && suite.confirm_stall {
        // A node cut off from its peers keeps its clients' connections and confirms nothing until
        // the cluster notices (~49 s): a gateway that declares `confirm-stall` leaves it, as an
        // operator of a cluster runs it (the bound is a tunable: stretched as handed, CONTRACT §7).
        let bound = fleet_conformance::timing::scaled(STALL_BOUND);
        w.gateway_env
            .insert("FLEET_CONFIRM_STALL_MS".into(), bound.as_millis().to_string());
        eprintln!(
            "soak: the gateways declare `confirm-stall`: FLEET_CONFIRM_STALL_MS={}",
            bound.as_millis()
        );
    }
    if config.cycle.contains(&Strike::SiteRestart) {
        // [C-25]'s hold (default 120 s) outlasts the site strike's spread (60 s) on any machine
        // when both stretch alike: handed stretched, as every tunable (CONTRACT §7).
        let hold = fleet_conformance::timing::scaled(std::time::Duration::from_secs(120));
        w.gateway_env.insert(
            "FLEET_UNKNOWN_HOST_HOLD_S".into(),
            (hold.as_secs() + u64::from(hold.subsec_nanos() > 0)).to_string(),
        );
    }
    w.soak.config = Some(config);
    Ok(())
}

/// The confirm stall bound the soak hands a gateway that declares `confirm-stall` on a cluster
/// (nominal; the cluster scenario's own bound).
const STALL_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

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
    let suite = w.suite()?;
    let config = match w.soak.config.clone() {
        Some(c) => c,
        None => SoakConfig::from_env(cluster_profile(&suite))?,
    };
    let (n, r) = op_counts(n, r)?;
    let vhost = w.vhost().await?;
    let every = scaled(Duration::from_millis(every));
    // Which strikes of the cycle can happen here.
    let mut off = BTreeMap::new();
    if w.link.is_none() && w.soak.links.is_empty() {
        off.insert(
            Strike::Cut.name(),
            "the scenario has no cuttable link between gateways and broker".to_string(),
        );
    }
    for s in Strike::ALL
        .into_iter()
        .filter(|s| s.restarts_broker() && config.cycle.contains(s))
    {
        if let Some(why) = suite.broker.cannot_restart() {
            off.insert(s.name(), why.to_string());
        } else if !w.soak.exclusive {
            off.insert(
                s.name(),
                "the scenario does not have the broker to itself (its Background lacks \"a broker the soak's nemesis may restart and strike node by node\")".to_string(),
            );
        }
    }
    for s in Strike::ALL
        .into_iter()
        .filter(|s| s.is_node() && config.cycle.contains(s))
    {
        if let Some(why) = node_strike_off(&suite, s) {
            off.insert(s.name(), why);
        } else if !w.soak.exclusive {
            off.insert(
                s.name(),
                "the scenario does not have the cluster to itself (its Background lacks \"a broker the soak's nemesis may restart and strike node by node\")".to_string(),
            );
        }
    }
    for s in Strike::ALL
        .into_iter()
        .filter(|s| s.is_trust() && config.cycle.contains(s))
    {
        if let Some(why) = trust_strikes_off(&suite) {
            off.insert(s.name(), why);
        } else if w.soak.fleet.is_none() {
            off.insert(
                s.name(),
                "the soak's hosts are not on certificates (its Background lacks \"hosts … run on certificates from a fleet CA when the nemesis rotates keys or revokes certificates\")".to_string(),
            );
        }
    }
    for s in Strike::ALL {
        if !config.cycle.contains(&s) {
            off.entry(s.name())
                .or_insert_with(|| format!("not in the nemesis cycle ({NEMESIS_VAR})"));
        }
    }
    let cycle: Vec<Strike> = config
        .cycle
        .iter()
        .copied()
        .filter(|s| !off.contains_key(s.name()))
        .collect();
    let mut rng = Rng::new(config.seed);
    println!(
        "soak: {n} briefs to each of {w1} and {w2}, {r} replies from each ({} operations; {OPS_VAR} overrides); \
         nemesis every {every:?}, cycle {:?}, seed {} ({SEED_VAR}); off: {off:?}; operations spread over {} strikes",
        2 * (n + r),
        cycle.iter().map(|s| s.name()).collect::<Vec<_>>(),
        config.seed,
        2 * cycle.len(),
    );
    w.soak.briefs_per_worker = n;
    w.soak.replies_per_worker = r;
    w.soak.every = every;
    w.soak.off = off;
    w.soak.config = Some(config);
    let started = Instant::now();
    w.soak.started = Some(started);
    w.soak.started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();

    // Operations are spread over two rounds of the nemesis cycle, so that even a short soak meets
    // every strike twice: a lane's k-th operation waits until the nemesis is k/(its operations)
    // of the way through those strikes (see `NemesisClock`). A lane whose operations are slower
    // than that is not held up.
    let spread = 2 * cycle.len();
    let clock = Arc::new(NemesisClock::new(every));
    w.soak.spread = spread;
    let main_host = w.entity(&main)?.host.clone();
    let worker_host: BTreeMap<String, String> = [&w1, &w2]
        .iter()
        .map(|n| Ok(((*n).clone(), w.entity(n)?.host.clone())))
        .collect::<anyhow::Result<_>>()?;
    let lead: McpHandle = w.mcp(&main).await?.handle();
    type Sent = (String, anyhow::Result<Value>, (Duration, Duration));
    let mut ops: JoinSet<(String, Vec<Sent>)> = JoinSet::new();
    for worker in [&w1, &w2] {
        let gid = w.gid(worker)?;
        for lane in 0..2 {
            let (lead, gid, worker) = (lead.clone(), gid.clone(), worker.clone());
            let clock = clock.clone();
            ops.spawn(async move {
                let mut out = Vec::new();
                let per_lane = (lane..n).step_by(2).count().max(1);
                for (k, i) in (lane..n).step_by(2).enumerate() {
                    let due = (k * spread) as f64 / per_lane as f64;
                    while clock.progress() < due {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let text = format!("soak brief {worker} #{i}");
                    let began = started.elapsed();
                    let v = lead
                        .call("bridge_send", json!({"to": gid, "text": text, "wait_reply": false}))
                        .await;
                    out.push((text, v.map_err(anyhow::Error::from), (began, started.elapsed())));
                }
                (worker, out)
            });
        }
    }
    // The main drains as it goes, as a real main does: held replies fill its prefetch window, and
    // a main that never drains stops hearing INJECTED for its own sends (RPL-5).
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let drainer = {
        let lead = lead.clone();
        let life = w.soak.main_life.clone();
        tokio::spawn(async move {
            let (mut drains, mut ok, mut unknown) = (Vec::new(), 0usize, 0usize);
            loop {
                let v = lead.call("bridge_poll", json!({"max": 200})).await;
                if record_poll(&v, life.load(Ordering::Relaxed), &mut drains) {
                    ok += 1;
                } else {
                    unknown += 1;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop_rx.changed() => break,
                }
            }
            (drains, ok, unknown)
        })
    };
    let mut repliers = JoinSet::new();
    for worker in [&w1, &w2] {
        let e = w.entity(worker)?;
        let url = w.host(&e.host)?.gateway.mcp_url();
        let texts: Vec<String> = (0..r).map(|i| format!("soak reply {worker} #{i}")).collect();
        let worker = worker.clone();
        let replies = reply_paced(url, e.token.clone(), texts, clock.clone(), spread, started);
        repliers.spawn(async move { (worker, replies.await) });
    }
    // The nemesis strikes (worker hosts, the link, the broker; a trust strike any host on
    // certificates, the main's included) until the operations are done.
    let hosts: Vec<String> = [&w1, &w2]
        .iter()
        .filter_map(|n| w.entity(n).ok().map(|e| e.host.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut round = 0usize;
    let mut next = tokio::time::Instant::now() + every;
    while !(ops.is_empty() && repliers.is_empty()) {
        tokio::select! {
            Some(done) = ops.join_next() => {
                let (worker, sent) = done?;
                let to_host = worker_host.get(&worker).cloned().unwrap_or_default();
                for (text, v, span) in sent {
                    let (seen, outcome) = classify_send(&v);
                    let msg_id = v.as_ref().ok().and_then(msg_id_of);
                    let (from_host, to_host) = (main_host.clone(), to_host.clone());
                    w.soak.ops.push(Op { tool: "bridge_send", text, seen, outcome, span, msg_id, from_host, to_host });
                }
                continue;
            }
            Some(done) = repliers.join_next() => {
                let (worker, replied) = done?;
                let from_host = worker_host.get(&worker).cloned().unwrap_or_default();
                for (text, seen, outcome, msg_id, span) in replied {
                    let (from_host, to_host) = (from_host.clone(), main_host.clone());
                    w.soak.ops.push(Op { tool: "bridge_reply", text, seen, outcome, span, msg_id, from_host, to_host });
                }
                continue;
            }
            _ = tokio::time::sleep_until(next) => {}
        }
        if cycle.is_empty() {
            next = tokio::time::Instant::now() + every;
            continue;
        }
        let strike = cycle[round % cycle.len()];
        round += 1;
        let at = started.elapsed();
        let t0 = Instant::now();
        clock.begin();
        let (target, done, detail) = match strike {
            Strike::Kill => {
                let host = hosts[rng.below(hosts.len())].clone();
                let h = w.host_mut(&host)?;
                h.gateway.kill().await;
                if host == main_host {
                    w.soak.main_life.fetch_add(1, Ordering::Relaxed);
                }
                match w.host_mut(&host)?.gateway.launch().await {
                    Ok(()) => (host, true, "killed, started again, ready".to_string()),
                    Err(e) => (host, false, format!("killed; the new process is not ready: {e}")),
                }
            }
            Strike::Pause => {
                let host = hosts[rng.below(hosts.len())].clone();
                let stopped = w.host(&host)?.gateway.signal(libc::SIGSTOP);
                tokio::time::sleep(every / 2).await;
                let cont = w.host(&host)?.gateway.signal(libc::SIGCONT);
                match (stopped, cont) {
                    (Ok(()), Ok(())) => (host, true, format!("stopped for {:?}", every / 2)),
                    (a, b) => (host, false, format!("SIGSTOP: {a:?}, SIGCONT: {b:?}")),
                }
            }
            Strike::Cut => match cut_links(w) {
                Some(n) => ("link".to_string(), n > 0, format!("{n} connections cut")),
                None => ("link".to_string(), false, "no link".to_string()),
            },
            Strike::Close => match suite.broker.management().connections(&vhost).await {
                Ok(conns) if !conns.is_empty() => {
                    let c = &conns[rng.below(conns.len())];
                    let who = c.client_name.clone().unwrap_or_else(|| c.name.clone());
                    match suite.broker.management().close_connection(&c.name).await {
                        Ok(()) => (who, true, format!("closed 1 of {} connections", conns.len())),
                        Err(e) => (who, false, format!("close failed: {e}")),
                    }
                }
                Ok(_) => ("-".to_string(), false, "no connection in the vhost".to_string()),
                Err(e) => ("-".to_string(), false, format!("listing connections: {e}")),
            },
            Strike::BrokerRestart => match suite.broker.restart(&vhost).await {
                Ok(took) => ("broker".to_string(), true, format!("back in {took:.1?}")),
                Err(e) => ("broker".to_string(), false, format!("restart failed: {e}")),
            },
            Strike::NodeKill | Strike::LeaderKill | Strike::Partition => {
                strike_node(w, strike, &mut rng, every, &main).await
            }
            Strike::Rotate | Strike::RevokeRestore => strike_trust(w, strike, &mut rng, every).await,
            Strike::SiteRestart => strike_site(w, &mut rng, &vhost, &main_host).await?,
        };
        let took = t0.elapsed();
        println!(
            "soak: {:>6.1} s  {} {target}: {detail}",
            at.as_secs_f64(),
            strike.name()
        );
        w.soak.events.push(Event {
            at,
            strike,
            target,
            took,
            done,
            detail,
        });
        clock.end();
        next = tokio::time::Instant::now() + every;
    }
    let _ = stop_tx.send(true);
    if cluster_profile(&suite) {
        // The run ends on a whole cluster (the last node strike ended so; a strike that could
        // not bring its node back left it to here), checked by the last step.
        w.soak.whole_at_end = Some(suite.broker.ensure_whole().await.map_err(|e| e.to_string()));
    }
    let (drains, polls_ok, polls_unknown) = drainer.await?;
    w.soak.drains = drains;
    w.soak.polls_ok = polls_ok;
    w.soak.polls_unknown = polls_unknown;
    w.soak.ran_for = started.elapsed();
    Ok(())
}
