//! The cluster profile's scenario tags the runner reads before a scenario starts: which scenarios
//! take the cluster to themselves, and which are left out where gateways run quorum inboxes.
//!
//! Exists as a leaf because the runner (`main.rs`) reads them and the cluster steps depend, through
//! the logins they provision, on the runner's helpers: kept with the steps, the two would import
//! each other.

/// The tags of scenarios that kill or cut off broker nodes: they take the cluster to themselves.
pub const NODE_FAULT_TAGS: [&str; 2] = ["node-loss", "node-partition"];

/// The tag of scenarios that judge a classic inbox's form where SPEC §16 changes it (CAP-4's
/// maxlen path, an exclusive consumer): left out, and said so, when gateways run quorum inboxes.
pub const CLASSIC_INBOX_TAG: &str = "classic-inbox";
