//! The report: what a run found, what it is judged against, and how it is written and printed.
//!
//! - [`sections`] — what each section measured, and the ratios to the raw baseline
//! - [`gate`] — the regression gate: ratios against `fixtures/bench/baseline.json`, and whether
//!   the machine was quiet enough to trust them
//! - [`goals`] — what the sections and ratios are judged against
//! - [`document`] — the whole report (sections, ratios, goals, gate), written as JSON
//! - [`goals_table`], [`table`] — the report as text
//!
//! Boundary, bottom up: `sections` ← `gate`, `goals` ← `document` ← `goals_table` ← `table`. The
//! sections and ratios are apart from the whole report because the goals and the gate judge them
//! while the report holds the goals' and the gate's findings; with them in one module the three
//! imported each other. The report is the top of the measuring folders: it imports the paths, the
//! floors, the fleet, the cluster, the migration and the rig, and none of them imports it.
//! `--compare` ([`crate::compare`]) and the crate root's glue are above it.

pub mod document;
pub mod gate;
pub mod goals;
pub mod goals_table;
pub mod sections;
pub mod table;
