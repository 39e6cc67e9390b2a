//! `fleet-bench`: the gateway's message paths measured against the raw broker, in one run.
//!
//! Speed is measured, not asserted in tests (issue 9). Every gateway figure is divided by a raw
//! lapin baseline taken on the same broker, vhost, message size, durability and confirm settings
//! in the same run, because absolute numbers on a shared 2-core machine swing by ±30 % from one
//! minute to the next. The raw baseline runs before and after the gateway paths; ratios use their
//! mean, and the spread between the two says how noisy the run was.
//!
//! The sources are grouped by the question each part answers (each folder's `mod.rs` says why its
//! boundaries are where they are); imports only go down this list, never back up:
//!
//! - [`rig`] — what every measurement stands on: the hosts (gateway processes + fake herdrs,
//!   [`rig::hosts`]), percentiles and `/proc` CPU accounting ([`rig::stats`]), the broker's name
//! - [`paths`] — how fast are the gateway's message paths against the raw broker: the baseline
//!   ([`paths::raw`]: pipelined confirms → durable queue → manual-ack consumer), the forward
//!   (SEND→INJECTED) and pull (REPLY → `bridge_poll`) paths over MCP ([`paths::forward_pull`]),
//!   where the time goes ([`paths::stages`], [`paths::decomposition`], [`paths::profile`])
//! - [`floors`] — what any gateway must pay here: the CPU floor per brief and per pull reply, and
//!   the throughput ceilings it allows (the path goals are relative to them)
//! - [`fleet`] — what presence costs as the fleet grows: roster convergence ([`fleet::presence`]),
//!   one gateway at 1 … 10,000 entities ([`fleet::scale`]), the model priced from it
//!   ([`fleet::presence_model`]), and `--fleet`'s simulated hosts with two real gateways among
//!   them, peers file or certificates (`--fleet-trust`, SPEC §18)
//! - [`cluster`] — `--cluster`: what replication costs (single node against a 3-node cluster with
//!   quorum queues), and node kill → gateways ready again (CLU-5(c))
//! - [`cluster_scale`] — `--scale`: the fleet at full size on a 3-node cluster (issue 47): 1,000 …
//!   10,000 quorum inboxes over several gateways, the broker's memory, processes and disk per
//!   queue, a node kill and a whole-cluster restart timed, a brief and a reply through it
//! - [`migration`] — a v1.0.0 legacy queue moved by a gateway (MIG-2) beside a raw publish and a
//!   raw get → publish → ack move of the same messages, then checked for losses
//! - [`report`] — the typed report (sections, ratios) written as JSON, the goals it is judged
//!   against, the regression gate (`fixtures/bench/baseline.json`), and the report as text
//! - [`compare`] — `--compare`: whole runs of several gateways, interleaved, compared
//! - [`cli`] — the command line
//!
//! - [`options`] — everything a run can be told; [`run`] — runs the sections in order and hands
//!   their results to [`report::document::Report`], and gates the reports
//!
//! This file only names the parts (and re-exports what `main.rs` calls).

pub mod cli;
pub mod cluster;
pub mod cluster_scale;
pub mod compare;
#[cfg(test)]
mod fixtures;
pub mod fleet;
pub mod floors;
pub mod migration;
pub mod options;
pub mod paths;
pub mod report;
pub mod rig;
pub mod run;

pub use options::{Options, SECTIONS, default_baseline};
pub use report::table::table;
pub use run::{gate_reports, run};
