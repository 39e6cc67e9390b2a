//! What each section measured, and the ratios derived from them.
//!
//! Why a module apart from [`crate::report::document`]: the goals ([`crate::report::goals`]) judge
//! the sections and the ratios, and the regression gate ([`crate::report::gate`]) compares the
//! ratios, while the whole report holds the goals' and the gate's findings. With the sections here,
//! below all three, the report imports the goals and the gate and neither imports the report.

use serde::{Deserialize, Serialize};

use crate::fleet::presence::PresenceResult;
use crate::fleet::presence_model::Model;
use crate::fleet::scale::ScaleResult;
use crate::migration::MigrationResult;
use crate::paths::forward_pull::{ForwardResult, PullResult};
use crate::paths::raw::RawResult;
use crate::paths::stages::Breakdown;

/// What each section measured; `None` for a section that did not run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sections {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawResult>,
    /// The raw baseline again, after the gateway paths.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw_after: Option<RawResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub forward: Option<ForwardSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull: Option<PullSection>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence: Option<PresenceResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<ScaleResult>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_model: Option<Model>,
    /// What any gateway pays per brief and side, and per pull reply, here (with the forward or the
    /// pull section), and the throughput ceilings those floors allow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_floor: Option<crate::floors::floor::CpuFloor>,
    /// The measured part of the SEND→INJECTED p50 floor (with the forward section): a bare
    /// client's herdr sequence of one inject. Absent from reports written before issue 46.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_floor: Option<crate::floors::latency_floor::LatencyFloor>,
    /// `--fleet`: simulated hosts with two real gateways among them (`null` when not run).
    #[serde(default)]
    pub fleet: Option<crate::fleet::sim_result::FleetResult>,
    /// `--cluster`: single node against a cluster, and kill-to-ready (left out when not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<crate::cluster::result::ClusterResult>,
    /// `--scale`: the fleet at full size on a cluster, level by level (left out when not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scale: Option<crate::cluster_scale::settings::ClusterScaleResult>,
}

/// The forward path and where its time went inside the gateways.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ForwardSection {
    #[serde(flatten)]
    pub result: ForwardResult,
    pub stages: ForwardStages,
    /// `--profile`: each gateway's CPU by component during the throughput run, by host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<std::collections::BTreeMap<String, crate::paths::profile::Profile>>,
}

/// The gateways' stage breakdown of each forward run, scraped around that run alone.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ForwardStages {
    /// Every pair sending at once.
    pub throughput: Breakdown,
    /// One sender, one brief at a time (the latency figure).
    pub single_sender: Breakdown,
}

/// The pull path and where its time went inside the gateways.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullSection {
    #[serde(flatten)]
    pub result: PullResult,
    pub stages: Breakdown,
}

/// Every gateway figure over its raw counterpart; `None` where either side was not measured. The
/// goals ([`crate::report::goals`]) judge some of them; the others are there to read beside them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// The raw figures the ratios divide by: the mean of the runs before and after the paths.
    pub raw_msgs_per_s_used: Option<f64>,
    pub raw_echo_round_trips_per_s_used: Option<f64>,
    pub raw_envelope_echo_round_trips_per_s_used: Option<f64>,
    pub raw_round_trip_p50_ms_used: Option<f64>,
    pub forward_briefs_to_raw: Option<f64>,
    /// Physical messages (SEND + INJECTED) per second over the raw msgs/s.
    pub forward_msgs_to_raw: Option<f64>,
    pub forward_briefs_to_raw_echo: Option<f64>,
    pub forward_briefs_to_raw_envelope_echo: Option<f64>,
    pub forward_p50_minus_raw_round_trip_ms: Option<f64>,
    pub forward_p50_to_raw_round_trip: Option<f64>,
    pub pull_replies_to_raw: Option<f64>,
    pub pull_replies_to_raw_echo: Option<f64>,
    pub pull_replies_to_raw_envelope_echo: Option<f64>,
    pub pull_p50_minus_raw_round_trip_ms: Option<f64>,
    pub migration_replies_to_raw_publish: Option<f64>,
    pub migration_move_to_raw_move: Option<f64>,
}

impl Sections {
    /// A raw figure as the ratios use it: the mean of the runs before and after the paths.
    pub fn raw_mean(&self, figure: impl Fn(&RawResult) -> f64) -> Option<f64> {
        let before = figure(self.raw.as_ref()?);
        Some(match &self.raw_after {
            Some(after) => (before + figure(after)) / 2.0,
            None => before,
        })
    }
}

fn over(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? / b?)
}

fn minus(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? - b?)
}

impl Ratios {
    /// The ratios of the measured `sections`.
    pub fn of(s: &Sections) -> Ratios {
        let rate = s.raw_mean(|r| r.msgs_per_s);
        let echo = s.raw_mean(|r| r.echo.round_trips_per_s);
        let envelope_echo = s.raw_mean(|r| r.echo_envelope.round_trips_per_s);
        let rtt = s.raw_mean(|r| r.round_trip.p50_ms);
        let fwd = s.forward.as_ref().map(|f| f.result.briefs_per_s);
        let fwd_p50 = s.forward.as_ref().map(|f| f.result.latency.p50_ms);
        let pull = s.pull.as_ref().map(|p| p.result.replies_per_s);
        let pull_p50 = s.pull.as_ref().map(|p| p.result.latency.p50_ms);
        Ratios {
            raw_msgs_per_s_used: rate,
            raw_echo_round_trips_per_s_used: echo,
            raw_envelope_echo_round_trips_per_s_used: envelope_echo,
            raw_round_trip_p50_ms_used: rtt,
            forward_briefs_to_raw: over(fwd, rate),
            forward_msgs_to_raw: over(fwd.map(|f| 2.0 * f), rate),
            forward_briefs_to_raw_echo: over(fwd, echo),
            forward_briefs_to_raw_envelope_echo: over(fwd, envelope_echo),
            forward_p50_minus_raw_round_trip_ms: minus(fwd_p50, rtt),
            forward_p50_to_raw_round_trip: over(fwd_p50, rtt),
            pull_replies_to_raw: over(pull, rate),
            pull_replies_to_raw_echo: over(pull, echo),
            pull_replies_to_raw_envelope_echo: over(pull, envelope_echo),
            pull_p50_minus_raw_round_trip_ms: minus(pull_p50, rtt),
            migration_replies_to_raw_publish: s.migration.as_ref().map(|m| m.ratio_to_raw_publish),
            migration_move_to_raw_move: s.migration.as_ref().map(|m| m.move_ratio_to_raw_move),
        }
    }
}
