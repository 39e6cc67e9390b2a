//! The report.
pub mod document;
pub mod gate;
pub mod goals;
pub mod goals_table;
pub mod sections;
pub mod table;
