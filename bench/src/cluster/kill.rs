//! Kill-to-ready (CLU-5(c)): SIGKILL the node a gateway is connected to, and time until every
//! gateway answers ready with all its connections on live nodes.
//!
//! Why a module: it is the cluster section's second question (how fast gateways come back), apart
//! from what replication costs ([`crate::cluster::runs`], which calls it with the paths' gateways
//! still running).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};

use crate::cluster::result::{ClusterSettings, HOSTS, Kill, KillToReady, Phase, bound_ms, summary};
use crate::rig::hosts::Fleet;
use fleet_conformance::broker::Broker;

/// How often kill-to-ready looks at the gateways and the broker's connection list.
const POLL: Duration = Duration::from_millis(100);

/// The nodes (indexes) the broker lists `user`'s connections on.
async fn nodes_of(broker: &Broker, vhost: &str, user: &str) -> anyhow::Result<Vec<usize>> {
    let conns = broker.management().connections(vhost).await?;
    let mut nodes = Vec::new();
    for c in conns.iter().filter(|c| c.user == user) {
        if let Some(i) = broker.node_index(&c.node).await
            && !nodes.contains(&i)
        {
            nodes.push(i);
        }
    }
    nodes.sort_unstable();
    Ok(nodes)
}

/// One look at every gateway: ready (`/readyz` 200) with connections listed, none on `dead`. Per
/// host: `Ok(nodes)` when so, else what it looked like (a short state, e.g. `/readyz 503 on [1]`).
async fn look(
    broker: &Broker,
    vhost: &str,
    fleet: &Fleet,
    logins: &BTreeMap<String, (String, String)>,
    dead: Option<usize>,
) -> BTreeMap<String, Result<Vec<usize>, String>> {
    let mut out = BTreeMap::new();
    for host in HOSTS {
        let verdict = async {
            let (user, _) = logins.get(host).ok_or_else(|| format!("no login for {host}"))?;
            let gateway = &fleet.host(host).map_err(|e| e.to_string())?.gateway;
            let status = match gateway.get("/readyz").await {
                Ok((s, _)) => s.to_string(),
                Err(_) => "no answer".to_string(),
            };
            let nodes = nodes_of(broker, vhost, user)
                .await
                .map_err(|e| format!("/readyz {status}; connection list: {e:#}"))?;
            let on = if nodes.is_empty() {
                "no connection".to_string()
            } else {
                format!("on {nodes:?}")
            };
            if status != "200" || nodes.is_empty() || dead.is_some_and(|d| nodes.contains(&d)) {
                return Err(format!("/readyz {status} {on}"));
            }
            Ok(nodes)
        };
        out.insert(host.to_string(), verdict.await);
    }
    out
}

/// What [`until_ready`] saw until every gateway was ready.
struct Readiness {
    all_ms: f64,
    per_host_ms: BTreeMap<String, f64>,
    nodes: BTreeMap<String, Vec<usize>>,
    phases: BTreeMap<String, Vec<Phase>>,
}

/// Waits until every gateway is ready on live nodes (none on `dead`), looking every [`POLL`]
/// from `since`, and records each gateway's changes of state on the way. `Err` (what each
/// gateway looked like, and the phases) once `wait` has passed.
async fn until_ready(
    broker: &Broker,
    vhost: &str,
    fleet: &Fleet,
    logins: &BTreeMap<String, (String, String)>,
    dead: Option<usize>,
    since: Instant,
    wait: Duration,
) -> Result<Readiness, (String, BTreeMap<String, Vec<Phase>>)> {
    let mut first: BTreeMap<String, f64> = BTreeMap::new();
    let mut phases: BTreeMap<String, Vec<Phase>> = BTreeMap::new();
    loop {
        let seen = look(broker, vhost, fleet, logins, dead).await;
        let at_ms = since.elapsed().as_secs_f64() * 1e3;
        for (host, v) in &seen {
            let state = match v {
                Ok(nodes) => format!("ready on {nodes:?}"),
                Err(e) => e.clone(),
            };
            let p = phases.entry(host.clone()).or_default();
            if p.last().is_none_or(|l| l.state != state) {
                p.push(Phase { at_ms, state });
            }
            if v.is_ok() {
                first.entry(host.clone()).or_insert(at_ms);
            }
        }
        let why: Vec<String> = seen
            .iter()
            .filter_map(|(h, v)| v.as_ref().err().map(|e| format!("{h}: {e}")))
            .collect();
        if why.is_empty() {
            return Ok(Readiness {
                all_ms: at_ms,
                per_host_ms: first,
                nodes: seen.into_iter().filter_map(|(h, v)| Some((h, v.ok()?))).collect(),
                phases,
            });
        }
        if since.elapsed() > wait {
            return Err((why.join("; "), phases));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `cs.kills` node kills, alternating between the hosts' nodes; each timed until every gateway
/// is ready on live nodes, then the node started again and the cluster whole before the next.
pub(crate) async fn kill_to_ready(
    broker: &Broker,
    vhost: &str,
    fleet: &Fleet,
    logins: &BTreeMap<String, (String, String)>,
    cs: &ClusterSettings,
    heartbeat_ms: u64,
) -> anyhow::Result<KillToReady> {
    let bound = bound_ms(heartbeat_ms, cs.amqp_heartbeat_s);
    // Twice the bound (at least a minute) before a kill counts as never ready.
    let wait = Duration::from_millis((2.0 * bound).max(60_000.0) as u64);
    let mut kills = Vec::with_capacity(cs.kills);
    until_ready(broker, vhost, fleet, logins, None, Instant::now(), wait)
        .await
        .map_err(|(why, _)| anyhow!("the gateways were not ready on the cluster before the first kill: {why}"))?;
    for i in 0..cs.kills {
        let host = HOSTS[i % HOSTS.len()];
        let (user, _) = logins
            .get(host)
            .ok_or_else(|| anyhow!("host {host} has no login of its own"))?;
        let node = *nodes_of(broker, vhost, user)
            .await?
            .first()
            .ok_or_else(|| anyhow!("the broker lists no connection of the gateway on {host}"))?;
        let mut hosts_on_node = Vec::new();
        for h in HOSTS {
            let (u, _) = logins
                .get(h)
                .ok_or_else(|| anyhow!("host {h} has no login of its own"))?;
            if nodes_of(broker, vhost, u).await?.contains(&node) {
                hosts_on_node.push(h.to_string());
            }
        }
        let since = Instant::now();
        let killing = async {
            broker
                .kill_node(node)
                .await
                .with_context(|| format!("killing node {node}"))?;
            anyhow::Ok(since.elapsed())
        };
        let ready = async { anyhow::Ok(until_ready(broker, vhost, fleet, logins, Some(node), since, wait).await) };
        let (kill_seen, ready) = tokio::try_join!(killing, ready)?;
        let restarting = Instant::now();
        broker
            .start_node(node)
            .await
            .with_context(|| format!("starting node {node} again"))?;
        broker.ensure_whole().await.context("making the cluster whole again")?;
        let restart = restarting.elapsed();
        let mut kill = Kill {
            host: host.to_string(),
            node,
            hosts_on_node,
            ready_ms: None,
            per_host_ms: BTreeMap::new(),
            nodes_after: BTreeMap::new(),
            kill_seen_ms: kill_seen.as_secs_f64() * 1e3,
            restart_ms: restart.as_secs_f64() * 1e3,
            not_ready: None,
            phases: BTreeMap::new(),
        };
        match ready {
            Ok(r) => {
                kill.ready_ms = Some(r.all_ms);
                kill.per_host_ms = r.per_host_ms;
                kill.nodes_after = r.nodes;
                kill.phases = r.phases;
            }
            Err((why, phases)) => {
                kill.not_ready = Some(why);
                kill.phases = phases;
            }
        }
        eprintln!(
            "fleet-bench: kill {}/{}: node {node} ({host}'s) → {}; node back in {:.1} s",
            i + 1,
            cs.kills,
            kill.ready_ms
                .map_or_else(|| "NOT ready".to_string(), |ms| format!("ready in {ms:.0} ms")),
            restart.as_secs_f64()
        );
        kills.push(kill);
        // Everyone ready again (a gateway that was not may come back once its node is).
        until_ready(broker, vhost, fleet, logins, None, Instant::now(), wait)
            .await
            .map_err(|(why, _)| anyhow!("the gateways were not ready again after node {node} came back: {why}"))?;
    }
    let wait_ms = wait.as_secs_f64() * 1e3;
    let (median_ms, worst_ms) = summary(&kills, wait_ms);
    Ok(KillToReady {
        heartbeat_ms,
        amqp_heartbeat_s: cs.amqp_heartbeat_s,
        bound_ms: bound,
        wait_ms,
        kills,
        median_ms,
        worst_ms,
    })
}
