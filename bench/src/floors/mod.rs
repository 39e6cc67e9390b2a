//! The floors: what any gateway must pay on this machine per brief and per pull reply, and the
//! throughput ceilings that allows (the path goals are relative to them).
//!
//! - [`floor`] — the CPU floor of each side (the raw envelope echo, a signature and its check, the
//!   MCP and herdr floors), and the ceilings
//! - [`local_floor`] — the MCP and herdr floors, measured with minimal implementations
//!
//! Boundary: `floor` imports `local_floor`, never the reverse; the per-thread CPU clock both use is
//! the rig's ([`crate::rig::stats::thread_cpu`]), which is what kept them importing each other.
//! They read the paths' results ([`crate::paths`]) and are read by the report.

pub mod floor;
pub mod local_floor;
