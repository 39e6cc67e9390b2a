//! `--cluster`: what the cluster profile (SPEC §16) costs, and how fast gateways come back when a
//! node dies (issue 26 item 5).
//!
//! Why a section of its own: a 3-node RabbitMQ cluster with quorum queues replicates every message
//! to a majority before confirming it, so every figure of the single-node bench moves; what
//! matters is by how much, measured in the same run, and whether the gateway's own share grows.
//!
//! - **Replication's cost.** The same three figures — the raw envelope echo (the broker work of a
//!   brief, no gateway), the forward path and the pull path ([`crate::paths::forward_pull`]) — on a single node
//!   and on the cluster. Single-node runs are made with quorum queues (what replication alone
//!   costs) and with classic queues (what moving today's fleet to the cluster profile costs);
//!   `--cluster-single-types` picks them. On the cluster the gateways run
//!   `FLEET_QUEUE_TYPE=quorum` with every node in `FLEET_AMQP_URL` (CLU-1), lists rotated so the
//!   two gateways start on different nodes, and the echo's queues are quorum queues too, its
//!   origin and echoer on the two gateways' nodes. Printed: each figure per side, cluster ÷ single
//!   per path, and path ÷ raw echo on each side (the gateway's share of the work).
//! - **Kill-to-ready (CLU-5(c)).** With the two gateways of the paths still running (their pairs
//!   registered), `--kills` times: SIGKILL the node one of them is connected to (the management
//!   API's `/api/connections` `node`, found by each gateway's own login), alternating between the
//!   two, and time from the kill until every gateway answers `/readyz` 200 with all its
//!   connections on live nodes; then start the node again and wait until the cluster is whole.
//!   Median and worst beside the bound, 2H + 2 AMQP heartbeats.
//!
//! The brokers run one after the other (the single node is stopped before the cluster starts), so
//! no side measures with another side's idle nodes on the cores.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::{Deserialize, Serialize};

use crate::Options;
use crate::paths::forward_pull::{self as paths, ForwardResult, PullResult};
use crate::paths::raw::{self, EchoAt, EchoResult, QueueKind};
use crate::rig::BrokerInfo;
use crate::rig::hosts::Fleet;
use crate::rig::stats::{self, CpuProbe, Latency};
use fleet_conformance::broker::url::percent_encode;
use fleet_conformance::broker::{Broker, BrokerSpec};

/// What `--cluster` runs.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The cluster (`process:rabbitmq-cluster` unless told).
    pub cluster_broker: String,
    /// The single node the cluster is compared with (the run's `--broker`).
    pub single_broker: String,
    /// The queue types the single node runs with, one run each, in this order.
    pub single_kinds: Vec<QueueKind>,
    /// Node kills timed for kill-to-ready (0: none).
    pub kills: usize,
    /// `FLEET_AMQP_HEARTBEAT_S` every gateway of the section gets (the bound's second term).
    pub amqp_heartbeat_s: u64,
}

/// The hosts of the section: mains on `a`, workers on `b` ([`paths::pairs`]).
const HOSTS: [&str; 2] = [paths::SENDER_HOST, paths::WORKER_HOST];

/// How often kill-to-ready looks at the gateways and the broker's connection list.
const POLL: Duration = Duration::from_millis(100);

/// One broker and queue type, measured: the raw envelope echo around the two paths.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Side {
    /// `single node, classic`, `single node, quorum`, `3-node cluster, quorum`.
    pub label: String,
    pub broker: BrokerInfo,
    pub nodes: usize,
    pub queue_type: QueueKind,
    /// The raw envelope echo before the paths, and after them.
    pub echo: EchoResult,
    pub echo_after: EchoResult,
    pub forward: ForwardResult,
    pub pull: PullResult,
    pub figures: SideFigures,
}

/// What the ratios take from one side: the echo as the mean of its two runs, the paths as measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideFigures {
    pub echo_round_trips_per_s: f64,
    /// One flow, one round trip at a time, p50 (mean of the two runs).
    pub echo_p50_ms: f64,
    pub forward_briefs_per_s: f64,
    /// SEND→INJECTED, one sender, p50.
    pub forward_p50_ms: f64,
    pub pull_replies_per_s: f64,
    /// Reply → an open `bridge_wait`, one flow, p50.
    pub pull_p50_ms: f64,
    /// The gateway's share: forward briefs/s ÷ echo round trips/s, pull likewise.
    pub forward_to_echo: f64,
    pub pull_to_echo: f64,
    /// CPU of every broker node per brief, reply and echo round trip, ms (throughput runs).
    pub broker_cpu_ms_per_brief: Option<f64>,
    pub broker_cpu_ms_per_reply: Option<f64>,
    pub broker_cpu_ms_per_echo: Option<f64>,
}

/// One side's figures over another's (`of` ÷ `over`): rates below 1 and latencies above 1 are
/// what the `of` side costs more.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub of: String,
    pub over: String,
    pub echo_rate: f64,
    pub forward_rate: f64,
    pub pull_rate: f64,
    pub echo_p50: f64,
    pub forward_p50: f64,
    pub pull_p50: f64,
}

/// One node kill.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Kill {
    /// The host whose node was killed, and that node (from 0).
    pub host: String,
    pub node: usize,
    /// The hosts that had connections on it (the others only had to stay ready).
    pub hosts_on_node: Vec<String>,
    /// Kill → every gateway ready on live nodes; `None` when that did not happen in time.
    pub ready_ms: Option<f64>,
    /// Kill → each gateway first seen ready on live nodes.
    pub per_host_ms: BTreeMap<String, f64>,
    /// Where each gateway's connections were when all were ready.
    pub nodes_after: BTreeMap<String, Vec<usize>>,
    /// How long the broker took to show the kill (`kill_node`), and to be whole again after
    /// `start_node` + `ensure_whole`.
    pub kill_seen_ms: f64,
    pub restart_ms: f64,
    /// Why it was not ready, when it was not.
    pub not_ready: Option<String>,
    /// Each gateway's states from the kill on, e.g. `/readyz 200 on [1]` (still on the killed
    /// node) → `/readyz 503 no connection` → `ready on [2]`: where a slow kill's time went.
    #[serde(default)]
    pub phases: BTreeMap<String, Vec<Phase>>,
}

/// Every kill, and the CLU-5(c) bound they are judged against.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KillToReady {
    pub heartbeat_ms: u64,
    pub amqp_heartbeat_s: u64,
    /// 2H + 2 AMQP heartbeats.
    pub bound_ms: f64,
    /// How long one kill was waited for before it counted as not ready.
    pub wait_ms: f64,
    pub kills: Vec<Kill>,
    /// Over the kills that became ready.
    pub median_ms: Option<f64>,
    /// Over every kill: a kill never ready counts as the wait.
    pub worst_ms: Option<f64>,
}

/// What `--cluster` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterResult {
    pub heartbeat_ms: u64,
    pub amqp_heartbeat_s: u64,
    /// The single-node sides, then the cluster.
    pub sides: Vec<Side>,
    /// The cluster over each single-node side; single quorum over single classic when both ran.
    pub costs: Vec<Cost>,
    pub kill_to_ready: Option<KillToReady>,
}

impl ClusterResult {
    /// The cluster's side (the last one).
    pub fn cluster(&self) -> Option<&Side> {
        self.sides.last().filter(|s| s.nodes > 1)
    }
}

/// Whole-broker CPU ms per unit: the sum of every `broker*` process of a probe's figures.
fn broker_ms(per: &BTreeMap<String, f64>) -> Option<f64> {
    let parts: Vec<f64> = per
        .iter()
        .filter(|(k, _)| k.starts_with("broker"))
        .map(|(_, v)| *v)
        .collect();
    (!parts.is_empty()).then(|| parts.iter().sum())
}

fn div(a: f64, b: f64) -> f64 {
    if b > 0.0 { a / b } else { f64::NAN }
}

impl SideFigures {
    fn of(echo: &EchoResult, after: &EchoResult, f: &ForwardResult, p: &PullResult) -> SideFigures {
        let echo_rate = (echo.round_trips_per_s + after.round_trips_per_s) / 2.0;
        SideFigures {
            echo_round_trips_per_s: echo_rate,
            echo_p50_ms: (echo.single_round_trip.p50_ms + after.single_round_trip.p50_ms) / 2.0,
            forward_briefs_per_s: f.briefs_per_s,
            forward_p50_ms: f.latency.p50_ms,
            pull_replies_per_s: p.replies_per_s,
            pull_p50_ms: p.latency.p50_ms,
            forward_to_echo: div(f.briefs_per_s, echo_rate),
            pull_to_echo: div(p.replies_per_s, echo_rate),
            broker_cpu_ms_per_brief: broker_ms(&f.cpu_ms_per_brief),
            broker_cpu_ms_per_reply: broker_ms(&p.cpu_ms_per_reply),
            broker_cpu_ms_per_echo: match (
                broker_ms(&echo.cpu_ms_per_round_trip),
                broker_ms(&after.cpu_ms_per_round_trip),
            ) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                (a, b) => a.or(b),
            },
        }
    }
}

impl Cost {
    /// `of` ÷ `over`, figure by figure.
    pub fn of(of: &Side, over: &Side) -> Cost {
        let (a, b) = (&of.figures, &over.figures);
        Cost {
            of: of.label.clone(),
            over: over.label.clone(),
            echo_rate: div(a.echo_round_trips_per_s, b.echo_round_trips_per_s),
            forward_rate: div(a.forward_briefs_per_s, b.forward_briefs_per_s),
            pull_rate: div(a.pull_replies_per_s, b.pull_replies_per_s),
            echo_p50: div(a.echo_p50_ms, b.echo_p50_ms),
            forward_p50: div(a.forward_p50_ms, b.forward_p50_ms),
            pull_p50: div(a.pull_p50_ms, b.pull_p50_ms),
        }
    }
}

/// The costs to print: the cluster over each single-node side, then single quorum over single
/// classic (the queue type alone) when both ran.
pub fn costs(sides: &[Side]) -> Vec<Cost> {
    let mut out = Vec::new();
    let Some((cluster, singles)) = sides.split_last() else {
        return out;
    };
    if cluster.nodes > 1 {
        out.extend(singles.iter().map(|s| Cost::of(cluster, s)));
    }
    let kind = |k: QueueKind| singles.iter().find(|s| s.queue_type == k);
    if let (Some(q), Some(c)) = (kind(QueueKind::Quorum), kind(QueueKind::Classic)) {
        out.push(Cost::of(q, c));
    }
    out
}

/// The CLU-5(c) bound: 2H plus two AMQP heartbeats, ms.
pub fn bound_ms(heartbeat_ms: u64, amqp_heartbeat_s: u64) -> f64 {
    (2 * heartbeat_ms + 2_000 * amqp_heartbeat_s) as f64
}

/// Median (upper of the middle two) and worst of the kills; a kill never ready counts as the wait.
fn summary(kills: &[Kill], wait_ms: f64) -> (Option<f64>, Option<f64>) {
    let mut ready: Vec<f64> = kills.iter().filter_map(|k| k.ready_ms).collect();
    ready.sort_by(f64::total_cmp);
    let median = (!ready.is_empty()).then(|| ready[ready.len() / 2]);
    let worst = kills
        .iter()
        .map(|k| k.ready_ms.unwrap_or(wait_ms))
        .max_by(f64::total_cmp);
    (median, worst)
}

/// Runs the section: each single-node side, then the cluster side with its kills.
pub async fn run(cs: &ClusterSettings, opts: &Options, work: &Path) -> anyhow::Result<ClusterResult> {
    let mut sides = Vec::new();
    if !cs.single_kinds.is_empty() {
        let broker = start(&cs.single_broker).await?;
        let mut measured = Vec::new();
        for kind in &cs.single_kinds {
            let label = format!("single node, {}", kind.as_str());
            measured.push(side(&broker, *kind, &label, cs, opts, work, false).await);
        }
        stop(broker).await;
        for m in measured {
            sides.push(m?.0);
        }
    }
    let broker = start(&cs.cluster_broker).await?;
    if !broker.is_cluster() {
        stop(broker).await;
        bail!(
            "--cluster-broker {} is a single node: name a cluster (process:rabbitmq-cluster, \
             container:rabbitmq-cluster)",
            cs.cluster_broker
        );
    }
    let label = format!("{}-node cluster, quorum", broker.node_count());
    let measured = side(&broker, QueueKind::Quorum, &label, cs, opts, work, cs.kills > 0).await;
    stop(broker).await;
    let (cluster, kill_to_ready) = measured?;
    sides.push(cluster);
    Ok(ClusterResult {
        heartbeat_ms: opts.heartbeat_ms,
        amqp_heartbeat_s: cs.amqp_heartbeat_s,
        costs: costs(&sides),
        sides,
        kill_to_ready,
    })
}

async fn start(spec: &str) -> anyhow::Result<Broker> {
    let spec = BrokerSpec::parse(spec)?;
    eprintln!("fleet-bench: cluster section: starting broker {} …", spec.label());
    Broker::start(&spec)
        .await
        .with_context(|| format!("starting broker {}", spec.label()))
}

async fn stop(broker: Broker) {
    let label = broker.spec().label();
    if let Err(e) = broker.stop().await {
        eprintln!("fleet-bench: could not stop the broker {label}: {e}");
    }
}

/// A login of its own for `host` on `vhost` (so the broker's connection list says which node
/// holds which gateway's connections, whatever the gateway names them): user and password.
async fn create_login(broker: &Broker, vhost: &str, host: &str) -> anyhow::Result<(String, String)> {
    let id = uuid::Uuid::new_v4().simple().to_string();
    let (user, password) = (format!("fleet-bench-{host}-{}", &id[..8]), id);
    let ep = broker.node_endpoint(0);
    let url = format!("{}/api/users/{}", ep.http_base, percent_encode(&user));
    let r = reqwest::Client::new()
        .put(&url)
        .basic_auth(&ep.user, Some(&ep.password))
        .json(&serde_json::json!({"password": password, "tags": ""}))
        .send()
        .await
        .with_context(|| format!("creating the broker login {user} (PUT {url})"))?;
    if !r.status().is_success() {
        bail!("creating the broker login {user}: PUT {url} answered {}", r.status());
    }
    broker
        .management()
        .grant_all(vhost, &user)
        .await
        .with_context(|| format!("granting {user} the vhost {vhost}"))?;
    Ok((user, password))
}

/// Every node's URL for `vhost` under `login` (else the admin's), starting with node `offset`,
/// comma-joined (CLU-1); a single node's one URL.
pub(crate) fn url_list(broker: &Broker, vhost: &str, login: Option<&(String, String)>, offset: usize) -> String {
    let n = broker.node_count();
    (0..n)
        .map(|i| {
            let mut ep = broker.node_endpoint((i + offset) % n).clone();
            if let Some((user, password)) = login {
                ep.user = user.clone();
                ep.password = password.clone();
            }
            ep.amqp_url(vhost)
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// One side: a vhost of its own on `broker`, the echo, the two gateways and their paths, the echo
/// again, and (`kills`) kill-to-ready. Everything it made is removed, whatever happened.
async fn side(
    broker: &Broker,
    kind: QueueKind,
    label: &str,
    cs: &ClusterSettings,
    opts: &Options,
    work: &Path,
    kills: bool,
) -> anyhow::Result<(Side, Option<KillToReady>)> {
    eprintln!("fleet-bench: cluster section: {label} ({}) …", broker.version());
    let vhost = broker.create_vhost().await?;
    let dir = work.join(label.replace([' ', ','], "-"));
    let mut logins = BTreeMap::new();
    let mut fleet = None;
    let outcome = async {
        if broker.is_cluster() {
            for host in HOSTS {
                logins.insert(host.to_string(), create_login(broker, &vhost, host).await?);
            }
        }
        let urls: BTreeMap<String, String> = HOSTS
            .iter()
            .enumerate()
            .map(|(i, h)| (h.to_string(), url_list(broker, &vhost, logins.get(*h), i)))
            .collect();
        // The echo's two sides on the nodes the two gateways start on.
        let n = broker.node_count();
        let (origin_url, echoer_url) = (
            broker.node_endpoint(0).amqp_url(&vhost),
            broker.node_endpoint(1 % n).amqp_url(&vhost),
        );
        let at = EchoAt {
            origin_url: &origin_url,
            echoer_url: &echoer_url,
            kind,
        };
        let me = Some(std::process::id());
        let raw_cpu = stats::with_brokers(CpuProbe::default().with("bench", me));
        let echo = raw::envelope_echo(&at, &opts.raw, &raw_cpu).await?;
        let tunables = BTreeMap::from([
            ("FLEET_HEARTBEAT_MS".to_string(), opts.heartbeat_ms.to_string()),
            ("FLEET_AMQP_HEARTBEAT_S".to_string(), cs.amqp_heartbeat_s.to_string()),
            ("FLEET_QUEUE_TYPE".to_string(), kind.as_str().to_string()),
        ]);
        let names: Vec<String> = HOSTS.iter().map(|h| h.to_string()).collect();
        let first = urls.get(HOSTS[0]).cloned().unwrap_or_default();
        let f = fleet.insert(Fleet::new(
            dir.clone(),
            first,
            opts.gateway_cmd.clone(),
            tunables,
            &names,
        ));
        for host in HOSTS {
            let env = BTreeMap::from([(
                "FLEET_AMQP_URL".to_string(),
                urls.get(host).cloned().unwrap_or_default(),
            )]);
            f.start_host(host, &env)
                .await
                .with_context(|| format!("starting the gateway on {host} ({label})"))?;
        }
        let gw = |h: &str| f.hosts.get(h).and_then(|x| x.gateway.pid());
        let path_cpu = stats::with_brokers(CpuProbe::default().with("bench", me))
            .with("gateway_a", gw(HOSTS[0]))
            .with("gateway_b", gw(HOSTS[1]));
        let pairs = paths::pairs(f, opts.paths.pairs.max(1)).await?;
        paths::forward_warmup(&pairs, &opts.paths).await?;
        let throughput = paths::forward_throughput(&pairs, &opts.paths, &path_cpu).await?;
        let single = paths::forward_single(&pairs, &opts.paths).await?;
        let forward = ForwardResult::of(throughput, single);
        let pull = paths::pull(&pairs, &opts.paths, &path_cpu).await?;
        let echo_after = raw::envelope_echo(&at, &opts.raw, &raw_cpu).await?;
        let figures = SideFigures::of(&echo, &echo_after, &forward, &pull);
        let measured = Side {
            label: label.to_string(),
            broker: BrokerInfo {
                spec: broker.spec().label(),
                version: broker.version().to_string(),
            },
            nodes: n,
            queue_type: kind,
            echo,
            echo_after,
            forward,
            pull,
            figures,
        };
        let k = if kills {
            eprintln!("fleet-bench: cluster section: kill-to-ready, {} kills …", cs.kills);
            Some(kill_to_ready(broker, &vhost, f, &logins, cs, opts.heartbeat_ms).await?)
        } else {
            None
        };
        anyhow::Ok((measured, k))
    }
    .await;
    if let Some(f) = fleet.as_mut() {
        f.shutdown().await;
    }
    if let Err(e) = broker.ensure_whole().await {
        eprintln!("fleet-bench: the cluster is not whole after {label}: {e}");
    }
    let _ = broker.delete_vhost(&vhost).await;
    for (user, _) in logins.values() {
        let _ = broker.management().delete_user(user).await;
    }
    if outcome.is_ok() && !opts.keep {
        let _ = std::fs::remove_dir_all(&dir);
    } else {
        eprintln!("fleet-bench: gateway logs of {label} kept in {}", dir.display());
    }
    outcome.with_context(|| format!("cluster section, {label}"))
}

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

/// A gateway's state from some time after the kill on (ms), as [`look`] saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub at_ms: f64,
    pub state: String,
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
async fn kill_to_ready(
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

fn num(x: f64) -> String {
    if !x.is_finite() {
        "-".into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

fn opt_ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".into(), |x| format!("{x:.3}"))
}

fn lat(l: &Latency) -> String {
    if l.n == 0 {
        "-".into()
    } else {
        format!("{} / {}", num(l.p50_ms), num(l.p99_ms))
    }
}

/// The section as text: one column per side, then the costs, then the kills.
pub fn lines(r: &ClusterResult) -> Vec<String> {
    let mut out = vec![format!(
        "cluster profile (SPEC §16): replication's cost · H = {} ms, AMQP heartbeat {} s · gateways on every \
         node's URL; echo queues of the side's type",
        r.heartbeat_ms, r.amqp_heartbeat_s
    )];
    let w = 24;
    let mut row = |name: &str, cells: Vec<String>| {
        let cells: String = cells.iter().map(|c| format!(" {c:>w$}")).collect();
        out.push(format!("  {name:<38}{cells}"));
    };
    let sides = &r.sides;
    row("", sides.iter().map(|s| s.label.clone()).collect());
    row(
        "raw envelope echo round trips/s",
        sides
            .iter()
            .map(|s| {
                format!(
                    "{} ({}, {})",
                    num(s.figures.echo_round_trips_per_s),
                    num(s.echo.round_trips_per_s),
                    num(s.echo_after.round_trips_per_s)
                )
            })
            .collect(),
    );
    row(
        "  1 flow round trip p50 ms",
        sides.iter().map(|s| num(s.figures.echo_p50_ms)).collect(),
    );
    row(
        "forward briefs/s",
        sides.iter().map(|s| num(s.forward.briefs_per_s)).collect(),
    );
    row(
        "  ÷ raw envelope echo",
        sides
            .iter()
            .map(|s| format!("{}×", num(s.figures.forward_to_echo)))
            .collect(),
    );
    row(
        "  SEND→INJECTED 1 sender p50/p99 ms",
        sides.iter().map(|s| lat(&s.forward.latency)).collect(),
    );
    row(
        "  under load p50/p99 ms",
        sides.iter().map(|s| lat(&s.forward.loaded_latency)).collect(),
    );
    row(
        "pull replies/s",
        sides.iter().map(|s| num(s.pull.replies_per_s)).collect(),
    );
    row(
        "  ÷ raw envelope echo",
        sides
            .iter()
            .map(|s| format!("{}×", num(s.figures.pull_to_echo)))
            .collect(),
    );
    row(
        "  reply→bridge_wait 1 flow p50/p99 ms",
        sides.iter().map(|s| lat(&s.pull.latency)).collect(),
    );
    row(
        "broker CPU ms per echo / brief / reply",
        sides
            .iter()
            .map(|s| {
                let f = &s.figures;
                format!(
                    "{} / {} / {}",
                    opt_ms(f.broker_cpu_ms_per_echo),
                    opt_ms(f.broker_cpu_ms_per_brief),
                    opt_ms(f.broker_cpu_ms_per_reply)
                )
            })
            .collect(),
    );
    let fails: Vec<String> = sides
        .iter()
        .filter(|s| s.forward.failures > 0 || s.pull.lost > 0)
        .map(|s| {
            format!(
                "{}: {} forward failures (first: {}), {} pull drainers gave up",
                s.label,
                s.forward.failures,
                s.forward.first_failure.as_deref().unwrap_or("-"),
                s.pull.lost
            )
        })
        .collect();
    for f in fails {
        out.push(format!("  !!! {f}"));
    }
    for c in &r.costs {
        out.push(format!(
            "  {} ÷ {}: echo {}× · forward {}× · pull {}× (rates); 1-flow p50 echo {}× · forward {}× · pull {}×",
            c.of,
            c.over,
            num(c.echo_rate),
            num(c.forward_rate),
            num(c.pull_rate),
            num(c.echo_p50),
            num(c.forward_p50),
            num(c.pull_p50)
        ));
    }
    if let Some(k) = &r.kill_to_ready {
        out.extend(kill_lines(k));
    }
    out
}

fn kill_lines(k: &KillToReady) -> Vec<String> {
    let ms = |x: Option<f64>| x.map_or_else(|| "-".into(), |x| format!("{x:.0} ms"));
    let ready = k.kills.iter().filter(|x| x.ready_ms.is_some()).count();
    let mut out = vec![format!(
        "  kill-to-ready (CLU-5(c)), {} kills ({} ready in time): median {} · worst {} · bound 2H + 2 AMQP \
         heartbeats = {} ms",
        k.kills.len(),
        ready,
        ms(k.median_ms),
        ms(k.worst_ms),
        k.bound_ms
    )];
    let each: Vec<String> = k
        .kills
        .iter()
        .map(|x| {
            format!(
                "n{}({}){}",
                x.node,
                x.hosts_on_node.join("+"),
                x.ready_ms.map_or_else(|| " NOT READY".into(), |v| format!(" {v:.0}"))
            )
        })
        .collect();
    out.push(format!("    each (node(hosts on it) ms): {}", each.join(" · ")));
    let restarts: Vec<f64> = k.kills.iter().map(|x| x.restart_ms).collect();
    if !restarts.is_empty() {
        let mean = restarts.iter().sum::<f64>() / restarts.len() as f64;
        out.push(format!(
            "    node killed → others see it down: {} ms max; start_node + ensure_whole: {:.1} s mean",
            k.kills.iter().map(|x| x.kill_seen_ms).fold(0.0, f64::max).round(),
            mean / 1e3
        ));
    }
    let slowest = k
        .kills
        .iter()
        .filter(|x| x.ready_ms.is_some())
        .max_by(|a, b| a.ready_ms.unwrap_or(0.0).total_cmp(&b.ready_ms.unwrap_or(0.0)));
    if let Some(x) = slowest {
        out.push(format!(
            "    slowest, node {} ({:.0} ms), states from the kill (ms): {}",
            x.node,
            x.ready_ms.unwrap_or(f64::NAN),
            phases_text(&x.phases)
        ));
    }
    for x in k.kills.iter().filter(|x| x.not_ready.is_some()) {
        out.push(format!(
            "  !!! node {} killed: not ready within {:.0} ms: {}; states: {}",
            x.node,
            k.wait_ms,
            x.not_ready.as_deref().unwrap_or("-"),
            phases_text(&x.phases)
        ));
    }
    out
}

/// `a: /readyz 200 on [1] @0 → ready on [2] @803; b: …`
fn phases_text(phases: &BTreeMap<String, Vec<Phase>>) -> String {
    phases
        .iter()
        .map(|(host, ps)| {
            let steps: Vec<String> = ps.iter().map(|p| format!("{} @{:.0}", p.state, p.at_ms)).collect();
            format!("{host}: {}", steps.join(" → "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn side(label: &str, nodes: usize, kind: QueueKind, echo: f64, fwd: f64, pull: f64, p50: f64) -> Side {
        let mut e = fixtures::echo(echo);
        e.single_round_trip = fixtures::latency(p50);
        e.cpu_ms_per_round_trip = BTreeMap::from([("broker1".to_string(), 0.2), ("broker2".to_string(), 0.1)]);
        let forward = fixtures::forward(fwd, 2.0 * p50, &[("broker", 0.5), ("gateway_a", 0.1)]);
        let pull = fixtures::pull(pull, 1.5 * p50);
        let figures = SideFigures::of(&e, &e, &forward, &pull);
        Side {
            label: label.into(),
            broker: BrokerInfo {
                spec: "process:rabbitmq".into(),
                version: "RabbitMQ 3.10.8".into(),
            },
            nodes,
            queue_type: kind,
            echo: e.clone(),
            echo_after: e,
            forward,
            pull,
            figures,
        }
    }

    fn sides() -> Vec<Side> {
        vec![
            side(
                "single node, quorum",
                1,
                QueueKind::Quorum,
                2_000.0,
                1_000.0,
                1_600.0,
                2.0,
            ),
            side(
                "single node, classic",
                1,
                QueueKind::Classic,
                4_000.0,
                1_500.0,
                2_000.0,
                1.0,
            ),
            side(
                "3-node cluster, quorum",
                3,
                QueueKind::Quorum,
                1_000.0,
                600.0,
                800.0,
                4.0,
            ),
        ]
    }

    #[test]
    fn a_side_s_figures_are_its_paths_over_its_own_echo_and_its_brokers_summed() {
        let s = &sides()[2];
        assert_eq!(s.figures.forward_to_echo, 0.6);
        assert_eq!(s.figures.pull_to_echo, 0.8);
        assert_eq!(s.figures.echo_p50_ms, 4.0);
        assert!((s.figures.broker_cpu_ms_per_echo.expect("brokers probed") - 0.3).abs() < 1e-12);
        assert_eq!(s.figures.broker_cpu_ms_per_brief, Some(0.5));
        assert_eq!(s.figures.broker_cpu_ms_per_reply, None, "no broker probed");
    }

    #[test]
    fn the_costs_are_the_cluster_over_each_single_then_the_queue_type_alone() {
        let c = costs(&sides());
        assert_eq!(c.len(), 3, "{c:?}");
        assert_eq!(
            (c[0].of.as_str(), c[0].over.as_str()),
            ("3-node cluster, quorum", "single node, quorum")
        );
        assert_eq!((c[0].echo_rate, c[0].forward_rate, c[0].pull_rate), (0.5, 0.6, 0.5));
        assert_eq!((c[0].echo_p50, c[0].forward_p50), (2.0, 2.0));
        assert_eq!(c[1].over, "single node, classic");
        assert_eq!(
            (c[2].of.as_str(), c[2].over.as_str()),
            ("single node, quorum", "single node, classic")
        );
        assert!(
            costs(&sides()[..1]).is_empty(),
            "one single-node side: nothing to compare"
        );
    }

    fn kill(ready_ms: Option<f64>) -> Kill {
        Kill {
            host: "a".into(),
            node: 1,
            hosts_on_node: vec!["a".into()],
            ready_ms,
            per_host_ms: BTreeMap::new(),
            nodes_after: BTreeMap::new(),
            kill_seen_ms: 5.0,
            restart_ms: 9_000.0,
            not_ready: ready_ms.is_none().then(|| "a: /readyz 503".to_string()),
            phases: BTreeMap::from([(
                "a".to_string(),
                vec![
                    Phase {
                        at_ms: 0.0,
                        state: "/readyz 200 on [1]".into(),
                    },
                    Phase {
                        at_ms: 120.0,
                        state: "/readyz 503 no connection".into(),
                    },
                ],
            )]),
        }
    }

    #[test]
    fn the_bound_is_two_heartbeats_and_two_amqp_heartbeats_and_a_lost_kill_is_the_worst() {
        assert_eq!(bound_ms(5_000, 10), 30_000.0);
        let kills: Vec<Kill> = [1_200.0, 900.0, 3_000.0].into_iter().map(|x| kill(Some(x))).collect();
        assert_eq!(summary(&kills, 60_000.0), (Some(1_200.0), Some(3_000.0)));
        let mut kills = kills;
        kills.push(kill(None));
        assert_eq!(summary(&kills, 60_000.0), (Some(1_200.0), Some(60_000.0)));
        assert_eq!(summary(&[], 60_000.0), (None, None));
    }

    #[test]
    fn the_lines_show_every_side_the_costs_and_the_kills() {
        let s = sides();
        let r = ClusterResult {
            heartbeat_ms: 5_000,
            amqp_heartbeat_s: 10,
            costs: costs(&s),
            sides: s,
            kill_to_ready: Some(KillToReady {
                heartbeat_ms: 5_000,
                amqp_heartbeat_s: 10,
                bound_ms: 30_000.0,
                wait_ms: 60_000.0,
                kills: vec![kill(Some(1_500.0)), kill(None)],
                median_ms: Some(1_500.0),
                worst_ms: Some(60_000.0),
            }),
        };
        let text = lines(&r).join("\n");
        assert!(
            text.contains("3-node cluster, quorum ÷ single node, quorum: echo 0.50×"),
            "{text}"
        );
        assert!(text.contains("forward 0.60×"), "{text}");
        assert!(
            text.contains("2 kills (1 ready in time): median 1500 ms · worst 60000 ms"),
            "{text}"
        );
        assert!(text.contains("n1(a) 1500 · n1(a) NOT READY"), "{text}");
        assert!(
            text.contains("!!! node 1 killed: not ready within 60000 ms: a: /readyz 503"),
            "{text}"
        );
        assert!(
            text.contains(
                "slowest, node 1 (1500 ms), states from the kill (ms): a: /readyz 200 on [1] @0 → /readyz 503 no \
                 connection @120"
            ),
            "{text}"
        );
        assert_eq!(r.cluster().map(|c| c.nodes), Some(3));
    }
}
