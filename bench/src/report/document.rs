//! The run's report, typed: what every section measured, the ratios to the raw baseline, the goals.
//!
//! Why: one report is written as JSON (`bench.json`), printed as a table ([`crate::report::table`]) and
//! read by the regression gate ([`crate::report::gate`]). One set of types keeps the three agreeing, and a
//! section that did not run is `None` instead of a missing key each reader has to guess about.
//! The section results are the measuring modules' own structs; this module adds only what is
//! derived across sections (ratios, goals) and the run's frame (broker, settings, machine).

use serde::{Deserialize, Serialize};

use crate::paths::decomposition::{Decomposition, decompose};
use crate::report::gate::Gate;
use crate::report::goals::Goals;
use crate::report::sections::{Ratios, Sections};
use crate::rig::BrokerInfo;
use crate::{Options, migration};

/// Everything one run measured and concluded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    pub broker: BrokerInfo,
    pub gateway_cmd: String,
    pub settings: Settings,
    pub machine: Machine,
    #[serde(flatten)]
    pub sections: Sections,
    pub ratios: Ratios,
    pub goals: Goals,
    /// The 1-sender forward p50 split by the gateways' stage means (`None` without the metric).
    pub forward_p50_decomposition: Option<Decomposition>,
    /// The regression gate's findings (`None` until the gate ran).
    pub gate: Option<Gate>,
}

/// The machine, and how busy it was around the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    pub cores: usize,
    /// Load averages (1, 5, 15 min) at the start and at the end.
    pub load_before: Option<[f64; 3]>,
    pub load_after: Option<[f64; 3]>,
}

/// What every message of the run was like, and the run's counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Settings {
    pub message_bytes: usize,
    pub persistent: bool,
    pub publisher_confirms: bool,
    pub mandatory: bool,
    pub raw: RawCounts,
    pub paths: PathCounts,
    /// H, every gateway's heartbeat interval (`FLEET_HEARTBEAT_MS`).
    pub heartbeat_ms: u64,
    pub migration: MigrationCounts,
}

/// The raw baseline's counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RawCounts {
    pub messages: usize,
    pub outstanding_confirms: usize,
    pub prefetch: u16,
    pub round_trip_samples: usize,
}

/// The forward and pull paths' counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PathCounts {
    pub pairs: usize,
    pub briefs: usize,
    pub replies: usize,
    pub latency_samples: usize,
}

/// The migration section's counts.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrationCounts {
    pub replies: usize,
    pub message_bytes: usize,
    pub outstanding_confirms: usize,
    pub raw_move_batch: usize,
    pub poll_ms: u64,
}

impl Settings {
    /// The settings `opts` runs with.
    pub fn of(opts: &Options) -> Settings {
        Settings {
            message_bytes: opts.paths.size,
            persistent: true,
            publisher_confirms: true,
            mandatory: true,
            raw: RawCounts {
                messages: opts.raw.messages,
                outstanding_confirms: opts.raw.outstanding,
                prefetch: opts.raw.prefetch,
                round_trip_samples: opts.raw.rtt_samples,
            },
            paths: PathCounts {
                pairs: opts.paths.pairs,
                briefs: opts.paths.briefs,
                replies: opts.paths.replies,
                latency_samples: opts.paths.latency_samples,
            },
            heartbeat_ms: opts.heartbeat_ms,
            migration: MigrationCounts {
                replies: opts.migration.replies,
                message_bytes: opts.migration.size,
                outstanding_confirms: opts.migration.outstanding,
                raw_move_batch: migration::RAW_MOVE_BATCH,
                poll_ms: opts.migration.poll.as_millis() as u64,
            },
        }
    }
}

impl Report {
    /// The report of `sections`, with their ratios and goals (the gate is added by the caller).
    pub fn new(
        broker: BrokerInfo,
        gateway_cmd: String,
        settings: Settings,
        machine: Machine,
        sections: Sections,
    ) -> Report {
        let ratios = Ratios::of(&sections);
        let goals = Goals::of(&sections, &ratios);
        let forward_p50_decomposition = sections.forward.as_ref().and_then(|f| {
            let latency = &f.result.latency;
            let rtt = ratios.raw_round_trip_p50_ms_used?;
            (latency.n > 0).then(|| decompose(latency.p50_ms, rtt, &f.stages.single_sender))?
        });
        Report {
            broker,
            gateway_cmd,
            settings,
            machine,
            sections,
            ratios,
            goals,
            forward_p50_decomposition,
            gate: None,
        }
    }

    /// Whether the migration lost (or duplicated, reordered, altered) replies.
    pub fn migration_lost(&self) -> bool {
        self.sections.migration.as_ref().is_some_and(|m| !m.verified.ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;
    use crate::paths::stages::Breakdown;
    use crate::report::sections::{ForwardSection, ForwardStages, PullSection};

    fn paths_sections() -> Sections {
        Sections {
            raw: Some(raw(10_000.0, 2.0, 5_000.0, 4_000.0)),
            raw_after: Some(raw(8_000.0, 4.0, 5_000.0, 4_000.0)),
            forward: Some(ForwardSection {
                result: forward(4_500.0, 4.5, &[]),
                stages: ForwardStages::default(),
                profile: None,
            }),
            pull: Some(PullSection {
                result: pull(7_200.0, 3.0),
                stages: Breakdown::new(),
            }),
            ..Sections::default()
        }
    }

    #[test]
    fn ratios_use_the_mean_raw_baseline() {
        let r = report(paths_sections());
        assert_eq!(r.ratios.raw_msgs_per_s_used, Some(9_000.0));
        assert_eq!(r.ratios.forward_briefs_to_raw, Some(0.5));
        assert_eq!(r.ratios.pull_replies_to_raw, Some(0.8));
        assert_eq!(r.ratios.forward_briefs_to_raw_envelope_echo, Some(4_500.0 / 4_000.0));
        assert_eq!(r.ratios.forward_p50_minus_raw_round_trip_ms, Some(1.5));
        assert_eq!(r.ratios.migration_replies_to_raw_publish, None);
        assert_eq!(r.ratios.pull_replies_to_raw_envelope_echo, Some(7_200.0 / 4_000.0));
        assert_eq!(
            r.goals.forward_to_ceiling, None,
            "no floor, no ceiling to judge against"
        );
        assert_eq!(
            r.goals.forward_p50_ms, None,
            "no herdr sequence measured, no floor to judge the p50 against"
        );
    }

    #[test]
    fn the_json_keeps_its_shape_and_reads_back() {
        let r = report(paths_sections());
        let v = serde_json::to_value(&r).expect("serializes");
        assert_eq!(v["forward"]["briefs_per_s"].as_f64(), Some(4_500.0));
        assert_eq!(v["raw"]["echo_envelope"]["round_trips_per_s"].as_f64(), Some(4_000.0));
        assert!(
            v.get("migration").is_none(),
            "a section that did not run is left out: {v}"
        );
        assert!(v["forward"]["stages"]["single_sender"].is_object(), "{v}");
        let back: Report = serde_json::from_value(v).expect("reads back");
        assert_eq!(back.ratios, r.ratios);
        assert!(back.sections.migration.is_none() && back.sections.forward.is_some());
    }

    #[test]
    fn the_decomposition_needs_the_single_sender_stages_and_the_raw_round_trip() {
        let mut s = paths_sections();
        assert_eq!(report(s.clone()).forward_p50_decomposition, None, "no metric, no split");
        let stage = |mean_ms| crate::paths::stages::StageTime { count: 100, mean_ms };
        if let Some(f) = s.forward.as_mut() {
            f.stages.single_sender = Breakdown::from([
                ("a".to_string(), [("verify".to_string(), stage(0.1))].into()),
                (
                    "b".to_string(),
                    [("verify".to_string(), stage(0.1)), ("inject".to_string(), stage(0.8))].into(),
                ),
            ]);
        }
        let d = report(s.clone()).forward_p50_decomposition.expect("split");
        // p50 4.5 − round trip 3.0 (mean of 2 and 4) − 0.8 − 0.1 − 0.1.
        assert!(
            (d.rest_ms - 0.5).abs() < 1e-9 && d.raw_round_trip_p50_ms == 3.0,
            "{d:?}"
        );
        s.raw = None;
        s.raw_after = None;
        assert_eq!(report(s).forward_p50_decomposition, None, "no raw run, no round trip");
    }

    #[test]
    fn a_migration_that_lost_replies_says_so() {
        let ok = report(Sections {
            migration: Some(migration(1_200.0, true)),
            ..Sections::default()
        });
        assert!(!ok.migration_lost());
        let lost = report(Sections {
            migration: Some(migration(1_200.0, false)),
            ..Sections::default()
        });
        assert!(lost.migration_lost());
    }
}
