//! The fleet.
pub mod certs;
pub mod presence;
pub mod presence_model;
pub mod scale;
pub mod sim_fleet;
pub mod table;
pub mod trust;
