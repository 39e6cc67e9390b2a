//! Seeing a stalled cluster node before the cluster does (SPEC §16, CLU-1).
//!
//! Exists because a RabbitMQ node cut off from the other nodes of its cluster keeps serving its
//! clients' connections — AMQP heartbeats still flow, so the connection looks alive — while
//! nothing published through it is confirmed: the quorum queues' majorities and the other nodes'
//! queues are out of its reach. The cluster sees the partition only after `net_ticktime`, and
//! `pause_minority` closes the node's connections only then (~49 s after the cut on the soak's
//! container cluster, issue 35); all that time a gateway attached to the node would keep
//! publishing into it and every caller would wait out its bound for an unknown outcome ([C-16]).
//!
//! So, when `FLEET_CONFIRM_STALL_MS` is set (opt-in: unset, nothing here runs), `FLEET_AMQP_URL`
//! lists more than one node and the oldest publish still waiting for
//! its confirm on this connection has waited longer than `FLEET_CONFIRM_STALL_MS`, the gateway
//! asks the other nodes of the list, in the order CLU-1 would try them: a short AMQP connection
//! each (bounded), closed at once. If one answers, the stall is this node's: the connection is
//! treated as lost (a WARN names the stalled node, how long confirms have stalled and the node
//! that answered), the run loop moves to the next node (CLU-1), and what was in flight is failed
//! or republished by the existing rules ([C-18] in `publish.rs`: SEND and BROADCAST never
//! republished). If none answers, the whole broker (or this host's network) is slow and moving
//! would not help: the gateway stays, and asks again only after another bound.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use super::Gateway;

/// The shortest and longest look between two readings of the oldest unconfirmed publish.
const LOOK_MIN: Duration = Duration::from_millis(50);
const LOOK_MAX: Duration = Duration::from_millis(500);

/// The least time a probe connection to another node is given (the bound itself, if longer, up to
/// the connect timeout).
const PROBE_MIN: Duration = Duration::from_secs(1);

impl Gateway {
    /// Returns once confirms on the current connection have stalled past `FLEET_CONFIRM_STALL_MS`
    /// while another node of `FLEET_AMQP_URL` answers; never with a single URL. Called for the
    /// life of one connection (by `wait_for_loss`): publishes from before it are left out.
    pub(super) async fn wait_for_stall(&self) {
        let nodes = self.cfg.broker.nodes();
        let Some(bound) = self.cfg.confirm_stall.filter(|_| nodes >= 2) else {
            return std::future::pending().await;
        };
        let connected = std::time::Instant::now();
        let mut tick = tokio::time::interval((bound / 8).clamp(LOOK_MIN, LOOK_MAX));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_probe = Instant::now();
        loop {
            tick.tick().await;
            let Some(stalled) = self.publisher.unconfirmed.oldest_since(connected) else {
                continue;
            };
            if stalled <= bound || Instant::now() < next_probe {
                continue;
            }
            let current = self.node.load(Ordering::SeqCst) % nodes;
            let stalled_node = self.cfg.broker.node_masked(current);
            if let Some(other) = self.another_node_answers(current, nodes, bound).await {
                warn!(
                    stalled_node = %stalled_node,
                    stalled_for = ?stalled,
                    bound = ?bound,
                    answered = %self.cfg.broker.node_masked(other),
                    "confirms stalled on this node while another node of FLEET_AMQP_URL answers: treating the connection as lost (CLU-1)"
                );
                self.stalled.store(true, Ordering::SeqCst);
                return;
            }
            info!(node = %stalled_node, stalled_for = ?stalled, "confirms stalled, but no other node of FLEET_AMQP_URL answers: staying");
            next_probe = Instant::now() + bound;
        }
    }

    /// The first node after `current` (in CLU-1's order) that accepts an AMQP connection within
    /// the probe bound; the connection is closed at once.
    async fn another_node_answers(&self, current: usize, nodes: usize, stall: Duration) -> Option<usize> {
        let broker = &self.cfg.broker;
        let bound = stall.clamp(PROBE_MIN, broker.connect_timeout().max(PROBE_MIN));
        for k in 1..nodes {
            let i = (current + k) % nodes;
            let name = format!("fleet-gateway {} stall probe", self.cfg.host_id);
            match tokio::time::timeout(bound, self.open_connection(name, i)).await {
                Ok(Ok(conn)) => {
                    let _ = tokio::time::timeout(bound, conn.close(200, "stall probe done".into())).await;
                    return Some(i);
                }
                Ok(Err(e)) => {
                    tracing::debug!(node = %broker.node_masked(i), error = %format!("{e:#}"), "stall probe: node does not answer")
                }
                Err(_) => tracing::debug!(node = %broker.node_masked(i), ?bound, "stall probe: no answer in time"),
            }
        }
        None
    }
}
