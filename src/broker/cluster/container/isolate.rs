//! Cutting one node off from the other nodes only, its clients' links kept ([`RunningCluster::isolate_node`]).
//!
//! Exists because `docker network disconnect` (the partition of CLU-6) takes the node's published
//! ports with it, so its clients lose their connections at the cut. A node cut off from its peers
//! alone behaves otherwise, and that is what a real partition between broker hosts often is: its
//! clients' connections stay up (AMQP heartbeats flow) while nothing published through it is
//! confirmed, until the cluster notices (`net_ticktime`) and `pause_minority` pauses the node. A
//! gateway that sees its confirms stall can move before that (issue 35), and the suite needs the
//! fault to show it.
//!
//! The cut: `iptables` rules in the node's own network namespace (entered with `nsenter`, as root,
//! with this host's `iptables`: the image needs none) drop every packet to or from the other
//! nodes' addresses on the cluster's network. Clients reach the node through its published ports
//! from the docker bridge's gateway address, which no rule names. The heal deletes the same rules;
//! a node killed meanwhile loses them with its network namespace.

use super::super::nodes::{NodeState, run_command};
use super::{PROVIDER, RunningCluster, docker, docker_since};
use crate::broker::BrokerError;

impl RunningCluster {
    /// Drops node `node`'s traffic with the other nodes (its clients' links kept) and returns at
    /// once: the cluster notices later, within its `net_ticktime`.
    pub(crate) async fn isolate_node(&self, node: usize) -> Result<(), BrokerError> {
        if self.states.get(node) != Some(NodeState::Up) {
            return Err(BrokerError::CannotPartition {
                spec: PROVIDER.into(),
                reason: format!("node {node} is killed or cut off already: start or heal it first"),
            });
        }
        let since = docker_since();
        self.peer_rules(node, "-I").await?;
        self.states.set(node, NodeState::Isolated);
        if let Ok(mut m) = self.isolated_since.lock() {
            m.insert(node, since);
        }
        Ok(())
    }

    /// Deletes the rules [`RunningCluster::isolate_node`] added, once the node noticed the cut and
    /// paused itself (`pause_minority`: its log says so). Healed before that, both sides would
    /// remember a partition that no node resolves. The caller waits until the node rejoined.
    pub(crate) async fn rejoin_node(&self, node: usize) -> Result<(), BrokerError> {
        let since = self.isolated_since.lock().ok().and_then(|mut m| m.remove(&node));
        if let Some(since) = since {
            let n = self.node(node)?;
            let what = format!(
                "{} (rabbit@{}) to pause in its minority before the heal",
                n.name, n.host
            );
            let paused = super::paused_in_minority(&n.name, &since, &what).await;
            if let Err(e) = paused {
                tracing::warn!(node, error = %e, "healing a node cut off from its peers that did not pause");
            }
        }
        self.peer_rules(node, "-D").await?;
        self.states.set(node, NodeState::Up);
        Ok(())
    }

    /// Inserts (`-I`) or deletes (`-D`) the rules dropping node `node`'s packets to and from each
    /// other node, in `node`'s network namespace.
    async fn peer_rules(&self, node: usize, op: &str) -> Result<(), BrokerError> {
        let n = self.node(node)?;
        let pid = docker("inspect (pid)", &["inspect", "--format", "{{.State.Pid}}", &n.name]).await?;
        let ip_of = format!(
            "{{{{(index .NetworkSettings.Networks \"{}\").IPAddress}}}}",
            self.network
        );
        let mut peers = Vec::new();
        for (i, other) in self.nodes.iter().enumerate().filter(|(i, _)| *i != node) {
            let ip = docker("inspect (address)", &["inspect", "--format", &ip_of, &other.name]).await?;
            if ip.trim().is_empty() {
                return Err(cut_failed(format!(
                    "node {i} ({}) has no address on {}",
                    other.name, self.network
                )));
            }
            peers.push(ip.trim().to_string());
        }
        for ip in &peers {
            for (chain, way) in [("INPUT", "-s"), ("OUTPUT", "-d")] {
                let mut cmd = tokio::process::Command::new("nsenter");
                cmd.args([
                    "-t",
                    pid.trim(),
                    "-n",
                    "iptables",
                    "-w",
                    op,
                    chain,
                    way,
                    ip,
                    "-j",
                    "DROP",
                ]);
                run_command(cmd).await.map_err(|e| {
                    cut_failed(format!(
                        "nsenter -t {} -n iptables {op} {chain} {way} {ip} -j DROP (node {node}): {e}; this cut needs root, nsenter and iptables on this host",
                        pid.trim()
                    ))
                })?;
            }
        }
        Ok(())
    }
}

fn cut_failed(reason: String) -> BrokerError {
    BrokerError::CannotPartition {
        spec: PROVIDER.into(),
        reason,
    }
}
