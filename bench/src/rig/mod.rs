//! The rig: what every measurement stands on.
pub mod hosts;
pub mod stats;

use serde::{Deserialize, Serialize};

/// The broker the run measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BrokerInfo {
    pub spec: String,
    pub version: String,
}
