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

use anyhow::{Context as _, bail};

use crate::Options;
use crate::cluster::kill::kill_to_ready;
use crate::cluster::result::{ClusterResult, ClusterSettings, HOSTS, KillToReady, Side, SideFigures, costs};
use crate::paths::forward_pull::{self as paths, ForwardResult};
use crate::paths::raw::{self, EchoAt, QueueKind};
use crate::rig::BrokerInfo;
use crate::rig::hosts::Fleet;
use crate::rig::stats::{self, CpuProbe};
use fleet_conformance::broker::url::percent_encode;
use fleet_conformance::broker::{Broker, BrokerSpec};

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
