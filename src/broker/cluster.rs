//! A broker of several RabbitMQ nodes clustered (`rabbitmq-cluster`, SPEC §16): its nodes, when
//! it counts as formed, and the faults a scenario inflicts on one node — kill and start it again,
//! cut it off from the others and heal it — each returning once the cluster shows the fault.
//!
//! Exists because the cluster profile judges a gateway by what it does when one node of three
//! goes (CLU-5) or is cut off (CLU-6), and those faults are the suite's to make, the same way on
//! every provider that can: three local `rabbitmq-server` processes ([`process`]), three
//! containers on a docker network of their own ([`container`]), or a cluster someone else runs
//! (url provider: comma lists in `FLEET_BROKER_URL` and `FLEET_BROKER_HTTP`, no faults). Every
//! cluster runs `cluster_partition_handling = pause_minority`, so a node cut off from the
//! majority stops serving instead of going on alone.
//!
//! Nodes are numbered from 0 in the order the provider gives them (node 0 is the one the others
//! joined, whose address [`Broker::endpoint`] is). A single-node broker answers as one node: one
//! node, its URL, and an error ([`BrokerError::NotACluster`]) for every fault.

pub(crate) mod container;
pub(crate) mod process;
#[cfg(test)]
mod tests;

use std::sync::OnceLock;
use std::time::Duration;

use super::provider::Provider;
use super::readiness::{RESTART_BOOT, amqp_answers};
use super::{Broker, BrokerError, Endpoint, Management};
use crate::timing::wait_for;

/// How many nodes the suite's own clusters have: the fewest with which a quorum queue outlives
/// the loss of one.
pub(crate) const NODES: usize = 3;

/// Nominal deadline for the cluster to show a fault (a killed node seen down, a cut-off node seen
/// gone): with `net_ticktime` 10 s (scaled) a cut link is noticed within 7.5–12.5 s.
const FAULT_SEEN: Duration = Duration::from_secs(60);

/// Nominal deadline of one `docker` or `rabbitmqctl` command.
pub(crate) const COMMAND: Duration = Duration::from_secs(90);

/// What the suite did to a node of a cluster it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// Running (as far as the suite is concerned).
    Up,
    /// Killed by [`Broker::kill_node`] and not started again.
    Killed,
    /// Cut off by [`Broker::partition_node`] and not healed.
    Partitioned,
    /// Cut off from the other nodes only (its clients' links kept) by [`Broker::isolate_node`].
    Isolated,
}

/// What the suite did to each node of a cluster it runs, by index: shared by the process and
/// container providers, so a node the suite killed is never reported as a failure.
pub(crate) struct NodeStates(std::sync::Mutex<Vec<NodeState>>);

impl NodeStates {
    /// `count` nodes, all up.
    pub(crate) fn up(count: usize) -> Self {
        Self(std::sync::Mutex::new(vec![NodeState::Up; count]))
    }

    /// Every node's state, by index.
    pub(crate) fn all(&self) -> Vec<NodeState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Node `node`'s state (`None` past the last node).
    pub(crate) fn get(&self, node: usize) -> Option<NodeState> {
        self.all().get(node).copied()
    }

    /// Records what was done to node `node`.
    pub(crate) fn set(&self, node: usize, state: NodeState) {
        if let Some(s) = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(node)
        {
            *s = state;
        }
    }
}

/// Every node of a cluster broker, beside node 0's endpoint that [`Broker`] keeps for the probe
/// and the management client.
pub(super) struct Nodes {
    endpoints: Vec<Endpoint>,
    /// One management client per node, without fallback: how each node sees the cluster.
    managements: Vec<Management>,
    /// Every node's Erlang name (its `/api/overview` `node`), by index: learned when the cluster
    /// is first ready.
    names: OnceLock<Vec<String>>,
}

impl Nodes {
    pub(super) fn new(endpoints: Vec<Endpoint>) -> Result<Nodes, BrokerError> {
        let managements = endpoints
            .iter()
            .map(|e| Management::new(&e.http_base, &e.user, &e.password))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nodes {
            endpoints,
            managements,
            names: OnceLock::new(),
        })
    }

    /// Every node's management API (node 0's first) for a client that asks the next node when
    /// one does not answer.
    pub(super) fn management(&self) -> Result<Management, BrokerError> {
        let bases: Vec<String> = self.endpoints.iter().map(|e| e.http_base.clone()).collect();
        let first = &self.endpoints[0];
        Management::with_fallbacks(&bases, &first.user, &first.password)
    }

    fn names(&self) -> Option<&Vec<String>> {
        self.names.get()
    }

    /// Every node's name, asking each node's `/api/overview` the first time.
    async fn learn_names(&self) -> Result<&Vec<String>, String> {
        if let Some(names) = self.names.get() {
            return Ok(names);
        }
        let mut names = Vec::with_capacity(self.endpoints.len());
        for (i, m) in self.managements.iter().enumerate() {
            let overview = m.overview().await.map_err(|e| format!("node {i}: {e}"))?;
            let name = overview
                .raw
                .get("node")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("node {i}'s /api/overview names no node"))?;
            names.push(name.to_string());
        }
        Ok(self.names.get_or_init(|| names))
    }

    /// `Ok` once every node's management API and AMQP listener answer and every node lists every
    /// node running, with no partition; else what is missing. Looks node by node and stops at the
    /// first thing missing, so polling it stays cheap.
    pub(super) async fn clustered(&self) -> Result<(), String> {
        let names = self.learn_names().await?;
        for (i, m) in self.managements.iter().enumerate() {
            let seen = m.nodes().await.map_err(|e| format!("node {i} ({}): {e}", names[i]))?;
            for name in names {
                match seen.iter().find(|n| &n.name == name) {
                    Some(n) if n.running && n.partitions.is_empty() => {}
                    Some(n) if !n.running => return Err(format!("node {i} sees {name} not running")),
                    Some(n) => return Err(format!("node {i} sees {name} partitioned from {:?}", n.partitions)),
                    None => return Err(format!("node {i} does not list {name} as a cluster member")),
                }
            }
        }
        // Last, as each probe leaves three lines in the node's log.
        for (i, e) in self.endpoints.iter().enumerate() {
            amqp_answers(&e.amqp_addr())
                .await
                .map_err(|err| format!("node {i} ({}): AMQP: {err}", names[i]))?;
        }
        Ok(())
    }

    /// `Ok` once every node but `node` answers and sees `node` not running.
    async fn sees_down(&self, node: usize) -> Result<(), String> {
        let names = self.learn_names().await?;
        let gone = &names[node];
        for (i, m) in self.managements.iter().enumerate().filter(|(i, _)| *i != node) {
            let seen = m.nodes().await.map_err(|e| format!("node {i} ({}): {e}", names[i]))?;
            match seen.iter().find(|n| &n.name == gone) {
                Some(n) if n.running => return Err(format!("node {i} still sees {gone} running")),
                _ => {}
            }
        }
        Ok(())
    }
}

impl Broker {
    /// Whether the broker is a cluster of nodes (`rabbitmq-cluster`): steps of the cluster
    /// profile hand gateways every node and inflict node faults only then.
    pub fn is_cluster(&self) -> bool {
        self.cluster.is_some()
    }

    /// How many nodes the broker has (1 for a single node): the range of every `node` argument.
    pub fn node_count(&self) -> usize {
        self.cluster.as_ref().map_or(1, |c| c.endpoints.len())
    }

    /// Where node `node` (from 0) listens, for a step that talks to one node (reads through
    /// another node than the one that failed). [`Broker::endpoint`] is node 0's.
    ///
    /// # Panics
    /// If `node` is not below [`Broker::node_count`]: a step asked for a node the broker lacks.
    pub fn node_endpoint(&self, node: usize) -> &Endpoint {
        match &self.cluster {
            Some(c) => c.endpoints.get(node),
            None => (node == 0).then_some(&self.endpoint),
        }
        .unwrap_or_else(|| {
            panic!(
                "{} has {} node(s), no node {node}",
                self.spec.label(),
                self.node_count()
            )
        })
    }

    /// The `FLEET_AMQP_URL` a gateway gets: every node's `amqp://` URL for `vhost`, comma
    /// separated in node order (CLU-1), for a cluster; [`Broker::amqp_url`] otherwise.
    pub fn gateway_amqp_url(&self, vhost: &str) -> String {
        match &self.cluster {
            Some(c) => c
                .endpoints
                .iter()
                .map(|e| e.amqp_url(vhost))
                .collect::<Vec<_>>()
                .join(","),
            None => self.amqp_url(vhost),
        }
    }

    /// Node `node`'s `amqp://` URL for `vhost`: for a step's own client that must reach one node.
    ///
    /// # Panics
    /// If `node` is not below [`Broker::node_count`].
    pub fn node_amqp_url(&self, node: usize, vhost: &str) -> String {
        self.node_endpoint(node).amqp_url(vhost)
    }

    /// Why the suite cannot cut one node of this broker off from the others, if it cannot (a
    /// single node, the process and url providers): the reason `@node-partition` scenarios are
    /// left out.
    pub fn cannot_partition(&self) -> Option<&'static str> {
        self.spec.cannot_partition()
    }

    /// Checks that `node` names a node of a cluster whose nodes the suite may fault.
    fn faultable(&self, node: usize, action: &'static str) -> Result<&Nodes, BrokerError> {
        let nodes = self.cluster.as_ref().ok_or_else(|| BrokerError::NotACluster {
            spec: self.spec.label(),
            action,
        })?;
        if node >= nodes.endpoints.len() {
            return Err(BrokerError::NoSuchNode {
                spec: self.spec.label(),
                node,
                count: nodes.endpoints.len(),
            });
        }
        Ok(nodes)
    }

    /// SIGKILLs node `node` — the process provider its process group (its Erlang VM, not the
    /// shared epmd), the container provider `docker kill` — and returns once it is gone and the
    /// other nodes see it down (CLU-5's node loss). Its data stays for [`Broker::start_node`].
    pub async fn kill_node(&self, node: usize) -> Result<(), BrokerError> {
        let nodes = self.faultable(node, "kill")?;
        let started = std::time::Instant::now();
        self.provider.kill_node(&self.spec, node).await?;
        self.wait_fault_seen(nodes, node, "killed").await?;
        tracing::info!(spec = %self.spec.label(), node, took = ?started.elapsed(), "broker node killed");
        Ok(())
    }

    /// Starts node `node` (killed by [`Broker::kill_node`]) again on its data, name and ports, and
    /// returns once it runs and the cluster is whole again: every node's AMQP answers and every
    /// node lists every node running. Every URL handed out before stays valid.
    pub async fn start_node(&self, node: usize) -> Result<(), BrokerError> {
        let nodes = self.faultable(node, "start")?;
        let started = std::time::Instant::now();
        self.provider.start_node(&self.spec, node).await?;
        self.wait_clustered(nodes, RESTART_BOOT).await?;
        tracing::info!(spec = %self.spec.label(), node, took = ?started.elapsed(), "broker node back in the cluster");
        Ok(())
    }

    /// Cuts node `node` off from the other nodes (container provider: `docker network
    /// disconnect`; its published ports go with it) and returns once the others see it down
    /// (CLU-6). With `pause_minority` it then stops serving by itself. The process and url
    /// providers cannot: [`BrokerError::CannotPartition`] ([`Broker::cannot_partition`]).
    pub async fn partition_node(&self, node: usize) -> Result<(), BrokerError> {
        let nodes = self.faultable(node, "cut off")?;
        self.check_partitionable()?;
        let started = std::time::Instant::now();
        self.provider.partition_node(&self.spec, node).await?;
        self.wait_fault_seen(nodes, node, "cut off").await?;
        tracing::info!(spec = %self.spec.label(), node, took = ?started.elapsed(), "broker node cut off");
        Ok(())
    }

    /// Cuts node `node` off from the other nodes only: its clients' connections stay up (container
    /// provider: its packets to and from the other nodes dropped). Returns at once, before the
    /// cluster notices ([`Broker::wait_cut_seen`]): what a client sees in between is the point.
    pub async fn isolate_node(&self, node: usize) -> Result<(), BrokerError> {
        self.faultable(node, "cut off")?;
        self.check_partitionable()?;
        self.provider.isolate_node(&self.spec, node).await?;
        tracing::info!(spec = %self.spec.label(), node, "broker node cut off from the other nodes, its clients' links kept");
        Ok(())
    }

    /// Returns once every other node sees node `node` (cut off by [`Broker::isolate_node`]) down.
    pub async fn wait_cut_seen(&self, node: usize) -> Result<(), BrokerError> {
        let nodes = self.faultable(node, "cut off")?;
        self.wait_fault_seen(nodes, node, "cut off").await
    }

    /// Reconnects node `node` cut off by [`Broker::partition_node`] or [`Broker::isolate_node`] (the same name and ports) and
    /// returns once the cluster is whole again (every node running, no partition).
    pub async fn heal_node(&self, node: usize) -> Result<(), BrokerError> {
        let nodes = self.faultable(node, "reconnect")?;
        self.check_partitionable()?;
        let started = std::time::Instant::now();
        self.provider.heal_node(&self.spec, node).await?;
        self.wait_clustered(nodes, RESTART_BOOT).await?;
        tracing::info!(spec = %self.spec.label(), node, took = ?started.elapsed(), "broker node reconnected");
        Ok(())
    }

    fn check_partitionable(&self) -> Result<(), BrokerError> {
        match self.cannot_partition() {
            Some(reason) => Err(BrokerError::CannotPartition {
                spec: self.spec.label(),
                reason: reason.into(),
            }),
            None => Ok(()),
        }
    }

    /// The index of the node named `name` (`rabbit@host`, as the management API names nodes in a
    /// connection or a queue), if it is one of this broker's: a step finds which node holds a
    /// gateway's connection this way. A single node is node 0 whatever its name.
    pub async fn node_index(&self, name: &str) -> Option<usize> {
        let Some(nodes) = &self.cluster else {
            return Some(0);
        };
        let names = nodes.learn_names().await.ok()?;
        names.iter().position(|n| n == name)
    }

    /// Which node (from 0) leads quorum queue `queue` of `vhost`: the management API's `leader`
    /// of the queue (else its `node`), mapped to the node's index. A step kills the leader to
    /// test CLU-5 where it hurts most. A single node answers 0 for a queue that exists.
    pub async fn queue_leader(&self, vhost: &str, queue: &str) -> Result<usize, BrokerError> {
        let url = format!(
            "{}/api/queues/{}/{}",
            self.management.base_url(),
            super::url::percent_encode(vhost),
            super::url::percent_encode(queue)
        );
        let raw = self
            .management
            .queue_raw(vhost, queue)
            .await?
            .ok_or_else(|| BrokerError::Status {
                method: "GET",
                url: url.clone(),
                status: 404,
                body: format!("no queue {queue:?} in vhost {vhost:?}"),
            })?;
        let Some(nodes) = &self.cluster else {
            return Ok(0);
        };
        let leader = ["leader", "node"]
            .iter()
            .find_map(|k| raw.get(*k).and_then(serde_json::Value::as_str))
            .ok_or_else(|| BrokerError::Decode {
                url: url.clone(),
                reason: "the queue names neither a leader nor a node".into(),
            })?;
        let names = match nodes.names() {
            Some(n) => n,
            None => nodes.learn_names().await.map_err(|reason| BrokerError::Decode {
                url: url.clone(),
                reason,
            })?,
        };
        names
            .iter()
            .position(|n| n == leader)
            .ok_or_else(|| BrokerError::Decode {
                url,
                reason: format!("its leader {leader} is none of the nodes {names:?}"),
            })
    }

    /// Makes the cluster whole again after a scenario that faulted it: starts every node it
    /// killed, reconnects every node it cut off, and waits until every node runs and sees every
    /// other. Between scenarios, so the next one starts on three nodes. Nothing to do for a
    /// single node, and nothing while the broker is halted ([`Broker::halt`]: its scenario's
    /// vhost brings it back, [`Broker::delete_vhost`]).
    pub async fn ensure_whole(&self) -> Result<(), BrokerError> {
        let Some(nodes) = &self.cluster else {
            return Ok(());
        };
        if self.is_down() {
            return Ok(());
        }
        let states = self.provider.node_states();
        let mut mended = false;
        for (node, state) in states.iter().enumerate() {
            match state {
                NodeState::Up => {}
                NodeState::Killed => {
                    tracing::warn!(spec = %self.spec.label(), node, "a scenario left a node killed: starting it");
                    self.provider.start_node(&self.spec, node).await?;
                    mended = true;
                }
                NodeState::Partitioned | NodeState::Isolated => {
                    tracing::warn!(spec = %self.spec.label(), node, "a scenario left a node cut off: reconnecting it");
                    self.provider.heal_node(&self.spec, node).await?;
                    mended = true;
                }
            }
        }
        let started = std::time::Instant::now();
        self.wait_clustered(nodes, RESTART_BOOT).await?;
        if mended {
            tracing::info!(spec = %self.spec.label(), took = ?started.elapsed(), "cluster whole again");
        }
        Ok(())
    }

    /// Waits (scaled `nominal`) until the cluster is formed ([`Nodes::clustered`]).
    async fn wait_clustered(&self, nodes: &Nodes, nominal: Duration) -> Result<(), BrokerError> {
        let what = format!("every node of {} to run, clustered", self.spec.label());
        match wait_for(&what, nominal, || async { nodes.clustered().await.map(Some) }).await {
            Ok(()) => Ok(()),
            Err(source) => Err(self.not_ready(source).await),
        }
    }

    /// Waits until every other node sees `node` down.
    async fn wait_fault_seen(&self, nodes: &Nodes, node: usize, how: &str) -> Result<(), BrokerError> {
        let what = format!("the other nodes of {} to see node {node} {how}", self.spec.label());
        match wait_for(&what, FAULT_SEEN, || async { nodes.sees_down(node).await.map(Some) }).await {
            Ok(()) => Ok(()),
            Err(source) => Err(self.not_ready(source).await),
        }
    }

    async fn not_ready(&self, source: crate::timing::WaitTimeout) -> BrokerError {
        BrokerError::NotReady {
            spec: self.spec.label(),
            what: self.provider.describe(&self.endpoint),
            source: Box::new(source),
            log: self.provider.log_tail().await,
        }
    }
}

/// The faults a cluster provider inflicts; the url provider and single nodes have none.
impl Provider {
    /// What the suite did to each node (all [`NodeState::Up`] for a provider without faults).
    pub(super) fn node_states(&self) -> Vec<NodeState> {
        match self {
            Provider::ProcessCluster(c) => c.states(),
            Provider::ContainerCluster(c) => c.states(),
            _ => vec![NodeState::Up],
        }
    }

    pub(super) async fn kill_node(&self, spec: &super::BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ProcessCluster(c) => c.kill_node(node).await,
            Provider::ContainerCluster(c) => c.kill_node(node).await,
            _ => Err(cannot_fault(spec)),
        }
    }

    pub(super) async fn start_node(&self, spec: &super::BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ProcessCluster(c) => c.start_node(node).await,
            Provider::ContainerCluster(c) => c.start_node(node).await,
            _ => Err(cannot_fault(spec)),
        }
    }

    pub(super) async fn partition_node(&self, spec: &super::BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ContainerCluster(c) => c.partition_node(node).await,
            _ => Err(cannot_partition(spec)),
        }
    }

    pub(super) async fn isolate_node(&self, spec: &super::BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ContainerCluster(c) => c.isolate_node(node).await,
            _ => Err(cannot_partition(spec)),
        }
    }

    pub(super) async fn heal_node(&self, spec: &super::BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ContainerCluster(c) => c.heal_node(node).await,
            _ => Err(cannot_partition(spec)),
        }
    }
}

fn cannot_fault(spec: &super::BrokerSpec) -> BrokerError {
    BrokerError::CannotRestart {
        spec: spec.label(),
        reason: spec.cannot_lose_node().unwrap_or("unknown").into(),
    }
}

fn cannot_partition(spec: &super::BrokerSpec) -> BrokerError {
    BrokerError::CannotPartition {
        spec: spec.label(),
        reason: spec.cannot_partition().unwrap_or("unknown").into(),
    }
}

/// What the suite's own clusters (process and container) share for waiting on their nodes' boot.
pub(crate) trait Booting {
    /// The spec's label, for errors.
    const LABEL: &'static str;
    fn endpoints(&self) -> &[Endpoint];
    fn describe(&self) -> String;
    /// `Some(reason)` once node `node` died (its process exited, its container stopped).
    async fn node_failure(&self, node: usize) -> Option<String>;
    async fn log_tail(&self, lines: usize) -> String;
}

/// Waits (scaled `nominal`) until the management API of every node in `which` answers: the node
/// booted (not yet clustered, when it is new). Fails early when one of them dies.
///
/// Exists because RabbitMQ 3.10 nodes that boot at the same time as a peer of theirs may crash
/// syncing feature flags with it (`incompatible_feature_flags`, `badmap`, seen at a whole-cluster
/// restart): a cluster's nodes are started again one after the other, each once the previous
/// answers.
pub(crate) async fn wait_booted<C: Booting>(c: &C, which: &[usize], nominal: Duration) -> Result<(), BrokerError> {
    let managements = which
        .iter()
        .map(|&i| {
            let e = &c.endpoints()[i];
            Management::new(&e.http_base, &e.user, &e.password).map(|m| (i, m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let what = format!("the management API of node(s) {which:?} to answer");
    let outcome = wait_for(&what, nominal, || async {
        for (i, m) in &managements {
            if let Err(e) = m.overview().await {
                // Only a node that does not answer is asked whether it died.
                if let Some(dead) = c.node_failure(*i).await {
                    return Ok(Some(Err(dead)));
                }
                return Err(format!("node {i}: {e}"));
            }
        }
        Ok(Some(Ok(())))
    })
    .await;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(reason)) => Err(BrokerError::Died {
            spec: C::LABEL.into(),
            reason,
            log: c.log_tail(15).await,
        }),
        Err(source) => Err(BrokerError::NotReady {
            spec: C::LABEL.into(),
            what: c.describe(),
            source: Box::new(source),
            log: c.log_tail(15).await,
        }),
    }
}

/// In which order a halted cluster's nodes start again: `last` (the node that stopped last, so
/// mnesia lets it boot alone) first, then the others in node order.
pub(crate) fn start_order(last: usize, count: usize) -> Vec<usize> {
    std::iter::once(last).chain((0..count).filter(|&i| i != last)).collect()
}

/// Each node's output (its name, its text) as its last `lines` lines without the lines the
/// suite's own AMQP probes leave ([`quiet`]), under a header naming the node: a cluster's part of
/// failure reports.
pub(crate) fn node_tails(outputs: Vec<(String, String)>, lines: usize) -> String {
    outputs
        .into_iter()
        .map(|(node, text)| format!("=== {node} ===\n{}", super::tail(&quiet(&text), lines)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` without the lines of connections that closed right after the protocol header — the
/// suite's readiness probes, three lines each, polled while a wait lasts — which would otherwise
/// fill a failure's log tail.
pub(crate) fn quiet(text: &str) -> String {
    const PROBE: [&str; 3] = [
        "accepting AMQP connection",
        "closing AMQP connection",
        "client unexpectedly closed TCP connection",
    ];
    text.lines()
        .filter(|l| !PROBE.iter().any(|p| l.contains(p)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `cmd` (a `docker` or `rabbitmqctl` command) to its end, within the scaled [`COMMAND`]
/// deadline; its stdout when it succeeds, else its stderr (or why it did not run) as the error.
pub(crate) async fn run_command(mut cmd: tokio::process::Command) -> Result<String, String> {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let limit = crate::timing::scaled(COMMAND);
    let out = match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("cannot run it: {e}")),
        Err(_) => return Err(format!("no end after {limit:?}; abandoned")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // rabbitmqctl writes some errors to stdout; the deprecation noise of the cookie variable
    // is never the reason.
    let reason: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| !l.contains("RABBITMQ_ERLANG_COOKIE env variable support is deprecated"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    Err(format!("{} ({})", super::tail(&reason.join("\n"), 10), out.status))
}
