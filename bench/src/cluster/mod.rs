//! The cluster.
pub mod runs;
