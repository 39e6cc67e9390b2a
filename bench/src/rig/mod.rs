//! The rig: what every measurement stands on.
pub mod hosts;
pub mod stats;
