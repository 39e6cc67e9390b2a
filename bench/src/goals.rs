//! The goals a run is judged against: each a measured figure, its bound, and whether it was met.
//!
//! Why a module: a goal is the one place the bench says "good enough" about a number, so the
//! bounds, which figure each is taken from and the rule for a figure that was not measured (no
//! goal entry, never a made-up pass) live together, apart from the measuring and the printing.

use serde::{Deserialize, Serialize};

use super::migration::GOAL_MIGRATION_REPLIES_PER_S;
use super::report::{Ratios, Sections};

/// The goals of issue 9.
pub const GOAL_FORWARD_RATIO: f64 = 0.45;
pub const GOAL_PULL_RATIO: f64 = 0.8;
pub const GOAL_FORWARD_P50_DELTA_MS: f64 = 2.0;

/// Which side of the goal a figure has to be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    AtLeast,
    AtMost,
}

/// One measured figure against its goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    pub value: f64,
    pub goal: f64,
    pub bound: Bound,
    pub met: bool,
}

impl Goal {
    /// `value` has to be at least `goal`.
    pub fn at_least(value: f64, goal: f64) -> Goal {
        Goal {
            value,
            goal,
            bound: Bound::AtLeast,
            met: value >= goal,
        }
    }

    /// `value` has to be at most `goal`.
    pub fn at_most(value: f64, goal: f64) -> Goal {
        Goal {
            value,
            goal,
            bound: Bound::AtMost,
            met: value <= goal,
        }
    }
}

/// `met`, `MISSED`, or `not measured` for a goal whose figure the run did not produce.
pub fn verdict(g: Option<&Goal>) -> &'static str {
    match g {
        Some(g) if g.met => "met",
        Some(_) => "MISSED",
        None => "not measured",
    }
}

/// Every goal of a run; `None` where the figure was not measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Goals {
    /// Forward briefs/s over the raw msgs/s.
    pub forward_ratio: Option<Goal>,
    /// Pull replies/s over the raw msgs/s.
    pub pull_ratio: Option<Goal>,
    /// SEND→INJECTED p50 (1 sender) minus the raw unloaded round-trip p50, ms.
    pub forward_p50_within_ms_of_raw_round_trip: Option<Goal>,
    /// Legacy replies moved per second, registration → legacy queue gone.
    pub migration_replies_per_s: Option<Goal>,
}

impl Goals {
    /// The goals of the measured `sections`, from their `ratios`.
    pub fn of(sections: &Sections, ratios: &Ratios) -> Goals {
        Goals {
            forward_ratio: ratios
                .forward_briefs_to_raw
                .map(|v| Goal::at_least(v, GOAL_FORWARD_RATIO)),
            pull_ratio: ratios.pull_replies_to_raw.map(|v| Goal::at_least(v, GOAL_PULL_RATIO)),
            forward_p50_within_ms_of_raw_round_trip: ratios
                .forward_p50_minus_raw_round_trip_ms
                .map(|v| Goal::at_most(v, GOAL_FORWARD_P50_DELTA_MS)),
            migration_replies_per_s: sections
                .migration
                .as_ref()
                .map(|m| Goal::at_least(m.replies_per_s, GOAL_MIGRATION_REPLIES_PER_S)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_met_on_its_side_and_at_the_goal_itself() {
        assert!(Goal::at_least(0.8, 0.8).met && !Goal::at_least(0.79, 0.8).met);
        assert!(Goal::at_most(1.0, 1.0).met && !Goal::at_most(1.01, 1.0).met);
        assert_eq!(verdict(Some(&Goal::at_most(2.0, 1.0))), "MISSED");
        assert_eq!(verdict(None), "not measured");
    }

    #[test]
    fn a_figure_not_measured_has_no_goal() {
        let g = Goals::of(&Sections::default(), &Ratios::default());
        assert_eq!(g, Goals::default());
    }
}
