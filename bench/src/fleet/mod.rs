//! The fleet: what presence costs as the fleet grows.
//!
//! - [`presence`] — roster convergence after a gateway start
//! - [`scale`] — one gateway's RSS, CPU and heartbeat rounds at 1, 100, 1,000 (… 10,000) entities
//! - [`restart`] — that gateway stopped and started again holding its entities: start-to-ready
//! - [`presence_model`] — presence priced for fleets of 10 to 1,000 hosts from the scale run
//! - `--fleet`: [`sim_result`] (the settings and findings, with the trust modes), [`sim_hosts`]
//!   (the simulated hosts), [`sim_fleet`] (the runs: orchestration and measuring), [`trust`]
//!   (certificates beside the peers file, a revocation timed; its credentials made in [`certs`]),
//!   and [`table`] (the fleet's lines)
//!
//! Boundary, bottom up: `sim_result` ← `sim_hosts` ← `trust` ← `table` ← `sim_fleet`. The types the
//! runs, the trust comparison and the lines all read (including [`sim_result::Trust`] and
//! [`sim_result::Revocation`]) are in `sim_result`, so `trust` and the runs no longer import each
//! other; the fleet's rows of the goals block are the report's
//! ([`crate::report::goals_table`]), so nothing here imports the report. Only the rig is imported
//! from outside.

pub mod certs;
pub mod presence;
pub mod presence_model;
pub mod restart;
pub mod scale;
pub mod sim_fleet;
pub mod sim_hosts;
pub mod sim_result;
pub mod table;
pub mod trust;
