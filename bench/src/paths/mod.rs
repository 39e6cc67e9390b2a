//! The message paths: how fast is a gateway against the raw broker, and where does its time go.
//!
//! - [`raw`] — the baseline every ratio divides by: pipelined confirms, echoes, the envelope echo
//! - [`forward_pull`] — the forward (SEND→INJECTED) and pull (REPLY → `bridge_poll`) paths over MCP
//! - [`stages`] — the gateways' own `fleet_stage_seconds`, read around each path
//! - [`decomposition`] — the 1-sender forward p50 split into raw round trip, herdr, verify, rest
//! - [`profile`] — `--profile`: `perf` on the gateways during the forward throughput run
//!
//! Boundary: these measure and return their own result types; they import only the rig
//! ([`crate::rig`]) and each other (`decomposition` reads `stages`' breakdown and the path's host
//! names). The ratios, goals and text are the report's ([`crate::report`]), above them. The
//! gateway comparison (`--compare`, [`crate::compare`]) is not here: it reruns the whole bench and
//! compares reports, so it sits above the report.

pub mod decomposition;
pub mod forward_pull;
pub mod profile;
pub mod raw;
pub mod stages;
