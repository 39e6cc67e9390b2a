//! The cluster: `--cluster`, what the cluster profile (SPEC §16) costs and how fast gateways come
//! back when a node dies.
pub mod kill;
pub mod result;
pub mod runs;
pub mod table;
#[cfg(test)]
mod tests;
