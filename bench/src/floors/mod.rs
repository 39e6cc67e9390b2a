//! The floors: what any gateway must pay on this machine per brief and per pull reply, the
//! throughput ceilings that allows, and the least a brief's latency can be (the path goals are
//! relative to them).
//!
//! - [`floor`] — the CPU floor of each side (the raw envelope echo, a signature and its check, the
//!   MCP and herdr floors), and the ceilings
//! - [`local_floor`] — the MCP and herdr CPU floors, measured with minimal implementations
//! - [`latency_floor`] — the floor under the SEND→INJECTED p50: the raw round trip plus a bare
//!   client's herdr sequence of one inject
//! - [`herdr_client`] — that bare herdr client and its fake herdr, shared by both herdr floors
//!
//! Boundary: `floor` imports `local_floor`, both herdr floors import `herdr_client`, never the
//! reverse; the per-thread CPU clock is the rig's ([`crate::rig::stats::thread_cpu`]), which is
//! what kept them importing each other. They read the paths' results ([`crate::paths`]) and are
//! read by the report.

pub mod floor;
pub mod herdr_client;
pub mod latency_floor;
pub mod local_floor;
