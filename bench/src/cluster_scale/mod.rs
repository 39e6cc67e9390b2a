//! `--scale`: the fleet at full size on a 3-node RabbitMQ cluster (issue 47) — thousands of
//! registered entities, each a quorum inbox (SPEC §16) declared by a real reference gateway,
//! spread over several gateways, measured level by level until the machine cannot hold the next.
//!
//! - [`settings`] — what a run is told and what it found (the types the report holds)
//! - [`broker_view`] — what the cluster says: nodes' memory, processes, data dirs; queues' leaders
//! - [`gateways`] — the level's gateways and the registrations that grow them, watched for limits
//! - [`latency`] — a brief and a reply through the cluster, one at a time
//! - [`node_kill`] — a node SIGKILLed and started again: leaders, gateways ready, rebalance
//! - [`full_restart`] — every node stopped and started: gateways ready, kept messages drained
//! - [`level`] — one level, in order; [`run`] — the levels, and when to stop
//! - [`table`] — the section's lines
//!
//! Boundary, bottom up: `settings` ← `broker_view` ← `gateways`, `latency`, `node_kill` ←
//! `full_restart` ← `level` ← `run`, and `settings` ← `table`. It reuses the rig, the paths'
//! pairs and the cluster section's URL lists ([`crate::cluster::runs::url_list`]); nothing here
//! imports the report, which holds [`settings::ClusterScaleResult`].

pub mod broker_view;
pub mod full_restart;
pub mod gateways;
pub mod latency;
pub mod level;
pub mod node_kill;
pub mod run;
pub mod settings;
pub mod table;
#[cfg(test)]
mod tests;
