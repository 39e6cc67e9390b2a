//! A broker of several RabbitMQ nodes clustered (`rabbitmq-cluster`, SPEC §16): its nodes as the
//! steps address them, and the faults a scenario inflicts on one node — kill and start it again,
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
//!
//! Here: the [`Broker`] methods of a cluster and the faults each provider inflicts. Below the
//! broker, in this directory: the nodes as the suite sees them, when they count as formed and what
//! the suite's own clusters share (`nodes.rs`), and those clusters, of processes (`process.rs`)
//! and of containers (`container.rs`).

pub(crate) mod container;
pub(super) mod nodes;
pub(crate) mod process;
#[cfg(test)]
mod tests;

use std::time::Duration;

use nodes::{NodeState, Nodes};

use super::Broker;
use super::boot::restart_boot;
use super::error::BrokerError;
use super::provider::Provider;
use super::spec::BrokerSpec;
use super::url::Endpoint;
use crate::timing::wait_for;

/// Nominal deadline for the cluster to show a fault (a killed node seen down, a cut-off node seen
/// gone): with `net_ticktime` 10 s (scaled) a cut link is noticed within 7.5–12.5 s.
const FAULT_SEEN: Duration = Duration::from_secs(60);

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
        self.wait_clustered(nodes, restart_boot()).await?;
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
        self.wait_clustered(nodes, restart_boot()).await?;
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
        self.wait_clustered(nodes, restart_boot()).await?;
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

    pub(super) async fn kill_node(&self, spec: &BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ProcessCluster(c) => c.kill_node(node).await,
            Provider::ContainerCluster(c) => c.kill_node(node).await,
            _ => Err(cannot_fault(spec)),
        }
    }

    pub(super) async fn start_node(&self, spec: &BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ProcessCluster(c) => c.start_node(node).await,
            Provider::ContainerCluster(c) => c.start_node(node).await,
            _ => Err(cannot_fault(spec)),
        }
    }

    pub(super) async fn partition_node(&self, spec: &BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ContainerCluster(c) => c.partition_node(node).await,
            _ => Err(cannot_partition(spec)),
        }
    }

    pub(super) async fn isolate_node(&self, spec: &BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ContainerCluster(c) => c.isolate_node(node).await,
            _ => Err(cannot_partition(spec)),
        }
    }

    pub(super) async fn heal_node(&self, spec: &BrokerSpec, node: usize) -> Result<(), BrokerError> {
        match self {
            Provider::ContainerCluster(c) => c.heal_node(node).await,
            _ => Err(cannot_partition(spec)),
        }
    }
}

fn cannot_fault(spec: &BrokerSpec) -> BrokerError {
    BrokerError::CannotRestart {
        spec: spec.label(),
        reason: spec.cannot_lose_node().unwrap_or("unknown").into(),
    }
}

fn cannot_partition(spec: &BrokerSpec) -> BrokerError {
    BrokerError::CannotPartition {
        spec: spec.label(),
        reason: spec.cannot_partition().unwrap_or("unknown").into(),
    }
}
