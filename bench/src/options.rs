//! Everything a `fleet-bench` run can be told ([`Options`]), the sections it may run, and where
//! the checked-in baseline is.
//!
//! Its own file because every part reads it (the paths, the cluster runs, the report, the
//! comparison) while only [`crate::run`] runs them: kept apart, the report can name the options
//! it records without importing the code that runs it.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::{cluster, cluster_scale, fleet, migration, paths};

/// Everything a run can be told.
#[derive(Debug, Clone)]
pub struct Options {
    pub broker: String,
    pub gateway_cmd: String,
    pub out: PathBuf,
    pub sections: BTreeSet<String>,
    pub raw: paths::raw::RawSettings,
    pub paths: paths::forward_pull::PathSettings,
    pub presence_trials: usize,
    /// H, the heartbeat interval every gateway of the run is started with (`FLEET_HEARTBEAT_MS`).
    pub heartbeat_ms: u64,
    pub scale: fleet::scale::ScaleSettings,
    pub migration: migration::MigrationSettings,
    /// Keep the work directory (gateway logs) after the run.
    pub keep: bool,
    /// The checked-in ratios the regression gate compares with ([`report::gate`]).
    pub baseline: PathBuf,
    /// Write this run's ratios to `baseline` instead of comparing with it.
    pub record_baseline: bool,
    /// Run nothing: gate (or record) the median of these earlier reports ([`gate_reports`]).
    pub gate_reports: Vec<PathBuf>,
    /// Profile the gateways with `perf` during the forward throughput run ([`paths::profile`]).
    pub profile: bool,
    /// `--fleet`: the simulated fleet's runs ([`fleet::sim_fleet`]); `None` when not asked for.
    pub fleet: Option<fleet::sim_result::FleetSettings>,
    /// `--cluster`: single node against cluster, and kill-to-ready ([`cluster`]); `None` when not
    /// asked for.
    pub cluster: Option<cluster::result::ClusterSettings>,
    /// `--scale`: the fleet at full size on a cluster ([`cluster_scale`]); `None` when not asked
    /// for.
    pub cluster_scale: Option<cluster_scale::settings::ScaleClusterSettings>,
    /// `--compare CMD,… --rounds N`: those gateways and then `gateway_cmd`, interleaved
    /// ([`compare`]).
    pub compare: Option<(Vec<String>, usize)>,
}

/// The baseline in this repository: `fixtures/bench/baseline.json`.
pub fn default_baseline() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bench/baseline.json")
}

/// The sections a run may include.
pub const SECTIONS: [&str; 6] = ["raw", "forward", "pull", "presence", "scale", "migration"];
