//! The rig: what every measurement stands on — the hosts the paths run through (gateway
//! processes + fake herdrs, [`hosts`]), the probes that measure them (percentiles, `/proc` CPU
//! accounting, one thread's CPU: [`stats`]), and the name of the broker a run measured on
//! ([`BrokerInfo`]).
//!
//! Boundary: the bottom of the crate. Nothing here imports another module of the bench, and every
//! other folder may import it. [`BrokerInfo`] lives here, not in the report, because the cluster
//! section names the brokers of its own sides and the report holds the cluster's findings: with it
//! in the report the two would import each other.

pub mod hosts;
pub mod stats;

use serde::{Deserialize, Serialize};

/// The broker the run measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub spec: String,
    pub version: String,
}
