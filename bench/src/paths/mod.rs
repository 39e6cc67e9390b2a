//! The message paths.
pub mod decomposition;
pub mod forward_pull;
pub mod profile;
pub mod raw;
pub mod stages;
