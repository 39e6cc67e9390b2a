//! The cluster: `--cluster`, what the cluster profile (SPEC §16) costs and how fast gateways come
//! back when a node dies.
//!
//! - [`result`] — the settings and findings: each side's figures, the costs, the kills and bound
//! - [`runs`] — each single-node side and the cluster side: the envelope echo around both paths
//! - [`kill`] — kill-to-ready (CLU-5(c)), timed on the cluster side with its gateways still up
//! - [`table`] — the section's lines
//!
//! Boundary, bottom up: `result` ← `kill` ← `runs`, and `result` ← `table`. The report holds the
//! findings and imports `result`; nothing here imports the report (the broker's name is the rig's,
//! [`crate::rig::BrokerInfo`]). The runs reuse the paths ([`crate::paths`]) and the rig.

pub mod kill;
pub mod result;
pub mod runs;
pub mod table;
#[cfg(test)]
mod tests;
