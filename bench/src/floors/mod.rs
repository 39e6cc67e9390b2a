//! The floors.
pub mod floor;
pub mod local_floor;
