//! The goals a run is judged against (issue 16; the path goals relative to this machine's floor
//! since issue 36): each a measured figure, its bound, and whether it was met.
//!
//! Why a module: a goal is the one place the bench says "good enough" about a number, so the
//! bounds, which figure each is taken from and the rule for a figure that was not measured (no
//! goal entry, never a made-up pass) live together, apart from the measuring and the printing.
//!
//! | figure | goal |
//! |---|---|
//! | gateway CPU per brief, each side (a = sender, b = worker) ÷ its side's floor | ≤ 1.5× each |
//! | forward briefs/s (8 senders) ÷ raw envelope echo round trips/s, ÷ the forward ceiling | ≥ 0.85× |
//! | pull replies/s (8 workers) ÷ raw envelope echo round trips/s, ÷ the pull ceiling | ≥ 0.85× |
//! | SEND→INJECTED p50 (1 sender) over its floor (raw unloaded round-trip p50 + bare herdr sequence p50) | ≤ floor + 1 ms |
//! | RSS of one gateway with 10,000 entities | ≤ 150 MiB |
//! | heartbeat round at the largest entity count | ≤ H/5 |
//! | migration move (registration → legacy queue gone) | ≥ 1,000 replies/s |
//! | `--fleet` 200 hosts × 50 agents, H = 5 s, batched: each real gateway's CPU | ≤ 5 % of one core |
//! | same run: a new host listed by both real gateways | ≤ 2H |
//! | same size with certificates (SPEC §18): each real gateway's CPU ÷ the peers-file run's | ≤ 1.10× |
//! | same: each real gateway's CPU | ≤ 5 % of one core |
//! | same: revocation-list change → the revoked host's messages rejected on every real gateway | ≤ 2 s (MEM-4) |
//!
//! The floors and ceilings are measured in the same run ([`crate::floors::floor`]): a side's floor is
//! what any gateway pays per brief on that side here (its AMQP client's share, one sign + one
//! verify, its local protocol); a ceiling is the path's ratio to the envelope echo that two
//! gateways at their floors could reach while the cores are busy. Without the floor (no raw
//! section, a local floor not measured) those three goals are not measured.
//!
//! The latency goal's floor (issue 46, [`crate::floors::latency_floor`]) is the raw unloaded round
//! trip p50 plus the p50 of a bare client making one inject's herdr requests against a fake herdr
//! like the forward run's: what the broker and herdr take of one brief whatever the gateway. It
//! replaced "p50 − raw round trip ≤ +1 ms", which charged herdr's answers to the gateway; reports
//! that carry the retired goal (`forward_p50_minus_raw_round_trip_ms`) read the new one as not
//! measured.
//!
//! Beside the fleet goals, not a goal: the per-entity form at the same size, and the largest N
//! at which the per-entity form kept up ([`crate::fleet::sim_result::FleetRun::keeps_up`]).
//!
//! The "envelope echo" is the raw round trip with the gateway's wire shape (a topic exchange and
//! the envelope's headers, [`crate::paths::raw`]): the broker work a brief costs, without a gateway.

use serde::{Deserialize, Serialize};

use crate::fleet::scale::{ScalePoint, ScaleResult};
use crate::fleet::sim_hosts::listing_wait_ms;
use crate::fleet::sim_result::Form;
use crate::fleet::trust as fleet_trust;
use crate::floors::floor::CpuFloor;
use crate::floors::latency_floor::P50Floor;
use crate::report::sections::{Ratios, Sections};

/// Gateway CPU per forwarded brief on each side over that side's floor
/// ([`CpuFloor::side_a_ms`], [`CpuFloor::side_b_ms`]), at most.
pub const GOAL_CPU_TO_SIDE_FLOOR: f64 = 1.5;
/// Forward briefs/s ÷ raw envelope echo round trips/s over the forward ceiling
/// ([`CpuFloor::throughput_ceiling`]), at least.
pub const GOAL_FORWARD_TO_CEILING: f64 = 0.85;
/// Pull replies/s ÷ raw envelope echo round trips/s over the pull ceiling
/// ([`CpuFloor::pull_ceiling`]), at least.
pub const GOAL_PULL_TO_CEILING: f64 = 0.85;
/// SEND→INJECTED p50 (one sender) over its floor ([`P50Floor`]), ms, at most.
pub const GOAL_FORWARD_P50_OVER_FLOOR_MS: f64 = 1.0;
/// RSS of one gateway holding [`GOAL_RSS_ENTITIES`] entities, MiB, at most.
pub const GOAL_RSS_MIB: f64 = 150.0;
pub const GOAL_RSS_ENTITIES: usize = 10_000;
/// A heartbeat round at the largest entity count, as a fraction of H, at most.
pub const GOAL_HEARTBEAT_ROUND_OF_H: f64 = 0.2;
/// Legacy replies moved per second, at least.
pub const GOAL_MIGRATION_REPLIES_PER_S: f64 = 1_000.0;

/// The `--fleet` size the fleet goals are judged at: hosts, agents per host, H.
pub const GOAL_FLEET_HOSTS: usize = 200;
pub const GOAL_FLEET_ENTITIES: usize = 50;
pub const GOAL_FLEET_HEARTBEAT_MS: u64 = 5_000;
/// Each real gateway's CPU on presence at that size, batched, % of one core, at most.
pub const GOAL_FLEET_GATEWAY_CPU_PCT: f64 = 5.0;
/// A new host listed by both real gateways, in heartbeat intervals, at most.
pub const GOAL_FLEET_LISTED_OF_H: f64 = 2.0;
/// With certificates, each real gateway's CPU over the peers-file run's of the same invocation.
pub const GOAL_FLEET_CERTS_CPU_RATIO: f64 = 1.0 + crate::fleet::trust::CPU_TOLERANCE;

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

/// RSS at an entity count the run did not reach, on the line through its two largest levels.
/// An estimate beside a goal, never a goal's value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extrapolated {
    pub entities: usize,
    /// The two measured levels the line goes through.
    pub from_entities: [usize; 2],
    /// The line's slope (never below zero: a smaller RSS at more entities is noise).
    pub kib_per_entity: f64,
    pub rss_mib: f64,
}

/// Every goal; `None` where the figure was not measured.
///
/// Reports written before issue 36 carry the retired absolute goals (`forward_to_envelope_echo`,
/// `pull_to_envelope_echo`, `cpu_ms_per_brief_gateway_a`/`_b`), and those before issue 46 the
/// retired `forward_p50_minus_raw_round_trip_ms`: they are read past, and the goals that replace
/// them read as not measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Goals {
    /// Gateway a (the senders' side): CPU ms per brief in the forward throughput run over side
    /// a's floor.
    #[serde(default)]
    pub cpu_to_floor_gateway_a: Option<Goal>,
    /// Gateway b (the workers' side): CPU ms per brief in the forward throughput run over side
    /// b's floor.
    #[serde(default)]
    pub cpu_to_floor_gateway_b: Option<Goal>,
    /// Forward briefs/s ÷ raw envelope echo round trips/s over the forward ceiling.
    #[serde(default)]
    pub forward_to_ceiling: Option<Goal>,
    /// Pull replies/s ÷ raw envelope echo round trips/s over the pull ceiling.
    #[serde(default)]
    pub pull_to_ceiling: Option<Goal>,
    /// SEND→INJECTED p50 (1 sender), ms, against [`Goals::forward_p50_floor`] + 1 ms.
    #[serde(default)]
    pub forward_p50_ms: Option<Goal>,
    /// That goal's floor and its parts, when both were measured.
    #[serde(default)]
    pub forward_p50_floor: Option<P50Floor>,
    /// RSS of the scale run's gateway at [`GOAL_RSS_ENTITIES`] entities, MiB.
    pub rss_mib_at_10000_entities: Option<Goal>,
    /// When that level was not run: an estimate from the largest levels that were.
    pub rss_mib_at_10000_extrapolated: Option<Extrapolated>,
    /// One heartbeat round at the scale run's largest level, ms, against H/5.
    pub heartbeat_round_ms: Option<Goal>,
    pub migration_replies_per_s: Option<Goal>,
    /// `--fleet` at [`GOAL_FLEET_HOSTS`] × [`GOAL_FLEET_ENTITIES`], H = 5 s, batched: the busier
    /// real gateway's CPU, % of one core.
    #[serde(default)]
    pub fleet_batched_gateway_cpu_pct: Option<Goal>,
    /// Same run: one more host listed by both real gateways, ms, against 2H (a host never listed
    /// within the wait counts as the wait).
    #[serde(default)]
    pub fleet_batched_new_host_listed_ms: Option<Goal>,
    /// Not a goal: the largest N at which the per-entity form kept up (E = 50, H = 5 s), when it
    /// ran; `Some(0)` when none did.
    #[serde(default)]
    pub fleet_per_entity_largest_keeping_up: Option<usize>,
    /// `--fleet-trust both` at the fleet goals' size, batched: the worse real gateway's mean CPU
    /// with certificates over its mean in the peers-file runs of the same invocation.
    #[serde(default)]
    pub fleet_certs_cpu_ratio: Option<Goal>,
    /// Same: the worse real gateway's mean CPU with certificates, % of one core.
    #[serde(default)]
    pub fleet_certs_gateway_cpu_pct: Option<Goal>,
    /// Same size with certificates: revocation-list rename → the revoked host's messages rejected
    /// (dead-lettered) on every real gateway, ms, worst run; a revocation never rejected
    /// everywhere counts as the wait.
    #[serde(default)]
    pub fleet_certs_revocation_to_reject_ms: Option<Goal>,
    /// `--cluster`: the worst kill-to-ready over the node kills, ms, against CLU-5(c)'s bound
    /// (2H + 2 AMQP heartbeats of the run); a kill never ready counts as the wait.
    #[serde(default)]
    pub cluster_kill_to_ready_worst_ms: Option<Goal>,
}

/// The smallest level with at least `entities`.
fn at_level(scale: &ScaleResult, entities: usize) -> Option<&ScalePoint> {
    scale
        .points
        .iter()
        .filter(|p| p.entities >= entities)
        .min_by_key(|p| p.entities)
}

/// `figure` over `ceiling`, when both were measured and the ceiling is above zero.
fn over_ceiling(figure: Option<f64>, ceiling: Option<f64>) -> Option<f64> {
    let ceiling = ceiling.filter(|c| *c > 0.0)?;
    Some(figure? / ceiling)
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// RSS at `entities` on the line through the two largest distinct levels below it.
pub fn extrapolate_rss(points: &[ScalePoint], entities: usize) -> Option<Extrapolated> {
    let mut below: Vec<&ScalePoint> = points.iter().filter(|p| p.entities < entities).collect();
    below.sort_by_key(|p| p.entities);
    below.dedup_by_key(|p| p.entities);
    let [.., a, b] = below.as_slice() else {
        return None;
    };
    let slope = ((b.rss_kib as f64 - a.rss_kib as f64) / (b.entities - a.entities) as f64).max(0.0);
    Some(Extrapolated {
        entities,
        from_entities: [a.entities, b.entities],
        kib_per_entity: slope,
        rss_mib: mib(b.rss_kib) + slope * (entities - b.entities) as f64 / 1024.0,
    })
}

impl Goals {
    /// The goals of the measured `sections`, from their `ratios`.
    pub fn of(sections: &Sections, ratios: &Ratios) -> Goals {
        let floor = sections.cpu_floor.as_ref();
        let cpu = |side: &str, side_floor: fn(&CpuFloor) -> Option<f64>| {
            let f = sections.forward.as_ref()?;
            let ms = f.result.cpu_ms_per_brief.get(side)?;
            let floor_ms = floor.and_then(side_floor).filter(|x| *x > 0.0)?;
            (f.result.briefs > 0).then(|| Goal::at_most(ms / floor_ms, GOAL_CPU_TO_SIDE_FLOOR))
        };
        let scale = sections.scale.as_ref();
        let rss = scale
            .and_then(|s| at_level(s, GOAL_RSS_ENTITIES))
            .map(|p| Goal::at_most(mib(p.rss_kib), GOAL_RSS_MIB));
        let extrapolated = match rss {
            Some(_) => None,
            None => scale.and_then(|s| extrapolate_rss(&s.points, GOAL_RSS_ENTITIES)),
        };
        let heartbeat = scale.and_then(|s| {
            let p = s.largest()?;
            let h_ms = s.heartbeat_ms as f64;
            (p.heartbeat_rounds > 0).then(|| Goal::at_most(p.heartbeat_round_ms, GOAL_HEARTBEAT_ROUND_OF_H * h_ms))
        });
        let fleet = sections.fleet.as_ref();
        let batched = fleet.and_then(|f| {
            f.at(
                Form::Batched,
                GOAL_FLEET_HOSTS,
                GOAL_FLEET_ENTITIES,
                GOAL_FLEET_HEARTBEAT_MS,
            )
        });
        let h = GOAL_FLEET_HEARTBEAT_MS as f64;
        let per_entity_ran = fleet.is_some_and(|f| {
            f.runs.iter().any(|r| {
                r.form == Form::PerEntity
                    && r.entities == GOAL_FLEET_ENTITIES
                    && r.heartbeat_ms == GOAL_FLEET_HEARTBEAT_MS
            })
        });
        let p50_floor = P50Floor::of(ratios.raw_round_trip_p50_ms_used, sections.latency_floor.as_ref());
        let forward_p50 = sections.forward.as_ref().and_then(|f| {
            let floor = p50_floor.as_ref()?;
            let l = &f.result.latency;
            (l.n > 0).then(|| Goal::at_most(l.p50_ms, floor.floor_ms + GOAL_FORWARD_P50_OVER_FLOOR_MS))
        });
        let kills = sections.cluster.as_ref().and_then(|c| c.kill_to_ready.as_ref());
        let at_goal_size = |form: Form, hosts: usize, entities: usize, h: u64| {
            (form, hosts, entities, h)
                == (
                    Form::Batched,
                    GOAL_FLEET_HOSTS,
                    GOAL_FLEET_ENTITIES,
                    GOAL_FLEET_HEARTBEAT_MS,
                )
        };
        let trust = fleet.and_then(|f| {
            fleet_trust::compare(f)
                .into_iter()
                .find(|c| at_goal_size(c.form, c.hosts, c.entities, c.heartbeat_ms))
        });
        let revocation = fleet.and_then(|f| {
            f.runs
                .iter()
                .filter(|r| at_goal_size(r.form, r.hosts, r.entities, r.heartbeat_ms))
                .filter_map(|r| r.measured.revocation.as_ref())
                .map(|v| v.rejected_everywhere_ms().unwrap_or(v.waited_ms))
                .reduce(f64::max)
        });
        Goals {
            fleet_certs_cpu_ratio: trust
                .as_ref()
                .map(|c| Goal::at_most(c.ratio[0].max(c.ratio[1]), GOAL_FLEET_CERTS_CPU_RATIO)),
            fleet_certs_gateway_cpu_pct: trust
                .as_ref()
                .map(|c| Goal::at_most(c.certs_cpu_pct[0].max(c.certs_cpu_pct[1]), GOAL_FLEET_GATEWAY_CPU_PCT)),
            fleet_certs_revocation_to_reject_ms: revocation.map(|ms| Goal::at_most(ms, fleet_trust::MEM4_BOUND_MS)),
            cluster_kill_to_ready_worst_ms: kills.and_then(|k| Some(Goal::at_most(k.worst_ms?, k.bound_ms))),
            fleet_batched_gateway_cpu_pct: batched.and_then(|r| {
                let m = &r.measured;
                let worst = m.gateway_a_cpu_pct?.max(m.gateway_b_cpu_pct?);
                Some(Goal::at_most(worst, GOAL_FLEET_GATEWAY_CPU_PCT))
            }),
            fleet_batched_new_host_listed_ms: batched.map(|r| {
                let waited = listing_wait_ms(r.heartbeat_ms);
                Goal::at_most(
                    r.measured.new_host_listed_ms.unwrap_or(waited),
                    GOAL_FLEET_LISTED_OF_H * h,
                )
            }),
            fleet_per_entity_largest_keeping_up: per_entity_ran.then(|| {
                fleet
                    .and_then(|f| {
                        f.largest_keeping_up_at(Form::PerEntity, GOAL_FLEET_ENTITIES, GOAL_FLEET_HEARTBEAT_MS)
                    })
                    .unwrap_or(0)
            }),
            cpu_to_floor_gateway_a: cpu("gateway_a", CpuFloor::side_a_ms),
            cpu_to_floor_gateway_b: cpu("gateway_b", CpuFloor::side_b_ms),
            forward_to_ceiling: over_ceiling(
                ratios.forward_briefs_to_raw_envelope_echo,
                floor.and_then(|f| f.throughput_ceiling),
            )
            .map(|v| Goal::at_least(v, GOAL_FORWARD_TO_CEILING)),
            pull_to_ceiling: over_ceiling(
                ratios.pull_replies_to_raw_envelope_echo,
                floor.and_then(|f| f.pull_ceiling),
            )
            .map(|v| Goal::at_least(v, GOAL_PULL_TO_CEILING)),
            forward_p50_ms: forward_p50,
            forward_p50_floor: p50_floor,
            rss_mib_at_10000_entities: rss,
            rss_mib_at_10000_extrapolated: extrapolated,
            heartbeat_round_ms: heartbeat,
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
    use crate::fixtures::*;

    #[test]
    fn a_bound_is_met_on_its_side_and_at_the_goal_itself() {
        assert!(Goal::at_least(0.8, 0.8).met && !Goal::at_least(0.79, 0.8).met);
        assert!(Goal::at_most(1.0, 1.0).met && !Goal::at_most(1.01, 1.0).met);
        assert_eq!(verdict(Some(&Goal::at_most(2.0, 1.0))), "MISSED");
        assert_eq!(verdict(Some(&Goal::at_least(2.0, 1.0))), "met");
        assert_eq!(verdict(None), "not measured");
    }

    #[test]
    fn a_figure_not_measured_has_no_goal() {
        let g = Goals::of(&Sections::default(), &Ratios::default());
        assert_eq!(g, Goals::default());
    }

    /// Side a's floor 0.25 ms, side b's 0.30 ms; both ceilings 1.0×.
    fn floor() -> CpuFloor {
        cpu_floor(Some(1.0), Some(1.0))
    }

    fn paths() -> Sections {
        path_sections(Some(1.0), Some(1.0))
    }

    fn goals(s: &Sections) -> Goals {
        Goals::of(s, &Ratios::of(s))
    }

    #[test]
    fn the_throughput_goals_are_against_each_paths_ceiling() {
        let s = paths();
        let g = goals(&s);
        // Forward 0.9× the envelope echo under a 1.0× ceiling: met; pull 0.7×: MISSED.
        let fwd = g.forward_to_ceiling.expect("forward measured");
        assert!(
            (fwd.value - 0.9).abs() < 1e-9 && fwd.met && fwd.goal == 0.85 && fwd.bound == Bound::AtLeast,
            "{fwd:?}"
        );
        let pull = g.pull_to_ceiling.expect("pull measured");
        assert!((pull.value - 0.7).abs() < 1e-9 && !pull.met, "{pull:?}");
        assert_eq!(verdict(Some(&pull)), "MISSED");
        // The same figures under other ceilings: forward ÷ 1.2 = 0.75 MISSED, pull ÷ 0.8 = 0.875 met.
        let mut s = paths();
        s.cpu_floor = Some(CpuFloor {
            throughput_ceiling: Some(1.2),
            pull_ceiling: Some(0.8),
            ..floor()
        });
        let g = goals(&s);
        let fwd = g.forward_to_ceiling.expect("forward measured");
        assert!((fwd.value - 0.75).abs() < 1e-9 && !fwd.met, "{fwd:?}");
        let pull = g.pull_to_ceiling.expect("pull measured");
        assert!((pull.value - 0.875).abs() < 1e-9 && pull.met, "{pull:?}");
        assert_eq!(verdict(Some(&pull)), "met");
        // No ceiling (no raw CPU, no pull run, no floor): not measured.
        s.cpu_floor = Some(CpuFloor {
            throughput_ceiling: None,
            pull_ceiling: Some(0.0),
            ..floor()
        });
        let g = goals(&s);
        assert_eq!(verdict(g.forward_to_ceiling.as_ref()), "not measured");
        assert_eq!(verdict(g.pull_to_ceiling.as_ref()), "not measured");
        s.cpu_floor = None;
        let g = goals(&s);
        assert!(g.forward_to_ceiling.is_none() && g.pull_to_ceiling.is_none());
    }

    #[test]
    fn the_latency_goal_is_against_the_raw_round_trip_plus_the_herdr_sequence() {
        // p50 2.9 ms; floor = raw round trip 2.0 + herdr sequence 0.5 = 2.5; goal 3.5: met.
        let s = paths();
        let g = goals(&s);
        let p50 = g.forward_p50_ms.expect("latency measured");
        assert!(
            (p50.value - 2.9).abs() < 1e-9 && (p50.goal - 3.5).abs() < 1e-9 && p50.met && p50.bound == Bound::AtMost,
            "{p50:?}"
        );
        let floor = g.forward_p50_floor.expect("both parts measured");
        assert_eq!((floor.raw_round_trip_p50_ms, floor.herdr_sequence_p50_ms), (2.0, 0.5));
        // A slower herdr sequence raises the floor; a slower gateway misses it.
        let mut s = paths();
        s.latency_floor = Some(latency_floor(0.05));
        let p50 = goals(&s).forward_p50_ms.expect("measured");
        assert!((p50.goal - 3.05).abs() < 1e-9 && p50.met, "{p50:?}");
        if let Some(f) = s.forward.as_mut() {
            f.result.latency = latency(3.1);
        }
        assert!(!goals(&s).forward_p50_ms.expect("measured").met);
        // The raw round trip is the mean of the raw runs, as the ratios take it: (2 + 4) / 2 = 3.
        let mut s = paths();
        s.raw_after = Some(raw(20_000.0, 4.0, 8_000.0, 5_000.0));
        let g = goals(&s);
        assert_eq!(g.forward_p50_floor.expect("floor").floor_ms, 3.5);
        assert!(g.forward_p50_ms.expect("measured").met, "2.9 ≤ 4.5");
        // Without either part of the floor, or without a single sample, not measured.
        let mut s = paths();
        s.latency_floor = Some(crate::floors::latency_floor::LatencyFloor {
            herdr_sequence: None,
            not_measured: Some("no socket".into()),
        });
        assert_eq!(goals(&s).forward_p50_ms, None);
        let mut s = paths();
        s.raw = None;
        assert!(goals(&s).forward_p50_ms.is_none() && goals(&s).forward_p50_floor.is_none());
        let mut s = paths();
        if let Some(f) = s.forward.as_mut() {
            f.result.latency = crate::rig::stats::Latency::default();
        }
        let g = goals(&s);
        assert!(g.forward_p50_ms.is_none() && g.forward_p50_floor.is_some());
    }

    #[test]
    fn cpu_per_brief_is_judged_against_each_sides_floor() {
        let g = goals(&paths());
        // a: 0.3 ms over 0.25 = 1.2× (met); b: 0.6 ms over 0.30 = 2.0× (MISSED).
        let a = g.cpu_to_floor_gateway_a.expect("a");
        assert!(
            (a.value - 1.2).abs() < 1e-9 && a.met && a.goal == 1.5 && a.bound == Bound::AtMost,
            "{a:?}"
        );
        let b = g.cpu_to_floor_gateway_b.expect("b");
        assert!((b.value - 2.0).abs() < 1e-9 && !b.met, "{b:?}");
        assert_eq!(verdict(Some(&b)), "MISSED");
        // A missing pid: that side is not measured.
        let mut s = paths();
        if let Some(f) = s.forward.as_mut() {
            f.result.cpu_ms_per_brief.remove("gateway_b");
        }
        let g = goals(&s);
        assert!(g.cpu_to_floor_gateway_a.is_some() && g.cpu_to_floor_gateway_b.is_none());
        // A side whose local floor was not measured is not judged; the other side still is.
        let mut s = paths();
        s.cpu_floor = Some(CpuFloor {
            herdr_ms: None,
            ..floor()
        });
        let g = goals(&s);
        assert!(g.cpu_to_floor_gateway_a.is_some() && g.cpu_to_floor_gateway_b.is_none());
        // No floor at all (no raw section): neither.
        s.cpu_floor = None;
        let g = goals(&s);
        assert!(g.cpu_to_floor_gateway_a.is_none() && g.cpu_to_floor_gateway_b.is_none());
    }

    #[test]
    fn a_report_with_the_retired_absolute_goals_still_reads() {
        let goal = serde_json::json!({"value": 0.9, "goal": 0.8, "bound": "at_least", "met": true});
        let old = serde_json::json!({
            "forward_to_envelope_echo": goal,
            "pull_to_envelope_echo": goal,
            "cpu_ms_per_brief_gateway_a": {"value": 0.1, "goal": 0.15, "bound": "at_most", "met": true},
            "cpu_ms_per_brief_gateway_b": null,
            "forward_p50_minus_raw_round_trip_ms": {"value": 0.9, "goal": 1.0, "bound": "at_most", "met": true},
            "rss_mib_at_10000_entities": null,
            "rss_mib_at_10000_extrapolated": null,
            "heartbeat_round_ms": null,
            "migration_replies_per_s": {"value": 1200.0, "goal": 1000.0, "bound": "at_least", "met": true},
        });
        let g: Goals = serde_json::from_value(old).expect("an old report's goals read");
        assert!(g.forward_to_ceiling.is_none() && g.pull_to_ceiling.is_none());
        assert!(g.cpu_to_floor_gateway_a.is_none() && g.cpu_to_floor_gateway_b.is_none());
        assert!(g.forward_p50_ms.is_none() && g.forward_p50_floor.is_none());
        assert!(g.migration_replies_per_s.is_some_and(|m| m.met));
    }

    fn scaled(levels: &[(usize, u64, f64)]) -> Sections {
        Sections {
            scale: Some(ScaleResult {
                heartbeat_ms: 5_000,
                points: levels
                    .iter()
                    .map(|&(entities, rss_mib, round_ms)| scale_point(entities, rss_mib * 1024, round_ms))
                    .collect(),
                refused: None,
                restart: None,
                more_restarts: Vec::new(),
            }),
            ..Sections::default()
        }
    }

    #[test]
    fn rss_at_10000_is_judged_only_when_that_level_ran() {
        let s = scaled(&[(1, 20, 1.0), (1_000, 40, 30.0), (10_000, 160, 400.0)]);
        let g = Goals::of(&s, &Ratios::of(&s));
        let rss = g.rss_mib_at_10000_entities.expect("10,000 ran");
        assert!(rss.value == 160.0 && !rss.met, "{rss:?}");
        assert_eq!(g.rss_mib_at_10000_extrapolated, None);
    }

    #[test]
    fn without_10000_entities_the_rss_goal_is_not_measured_and_extrapolated() {
        // 20 MiB at 100, 38 MiB at 1,000: 20.48 KiB per entity → 38 + 9,000 × 20.48 / 1024 = 218.
        let s = scaled(&[(1, 19, 1.0), (100, 20, 5.0), (1_000, 38, 30.0)]);
        let g = Goals::of(&s, &Ratios::of(&s));
        assert_eq!(g.rss_mib_at_10000_entities, None);
        assert_eq!(verdict(g.rss_mib_at_10000_entities.as_ref()), "not measured");
        let x = g
            .rss_mib_at_10000_extrapolated
            .expect("two levels to draw a line through");
        assert_eq!(x.from_entities, [100, 1_000]);
        assert!((x.rss_mib - 218.0).abs() < 1e-9, "{x:?}");
        // One level is no line; a falling one is flat.
        assert_eq!(extrapolate_rss(&[scale_point(1_000, 1024, 1.0)], 10_000), None);
        let flat = extrapolate_rss(&[scale_point(1, 2048, 1.0), scale_point(100, 1024, 1.0)], 10_000).expect("line");
        assert!(flat.kib_per_entity == 0.0 && flat.rss_mib == 1.0, "{flat:?}");
    }

    #[test]
    fn the_heartbeat_round_is_judged_at_the_largest_level_against_a_fifth_of_h() {
        let s = scaled(&[(1, 19, 1.0), (1_000, 38, 1_200.0)]);
        let g = Goals::of(&s, &Ratios::of(&s));
        let hb = g.heartbeat_round_ms.expect("rounds seen");
        assert!(hb.goal == 1_000.0 && hb.value == 1_200.0 && !hb.met, "{hb:?}");
        // No round seen at the largest level: not measured, whatever smaller levels saw.
        let mut s = scaled(&[(1, 19, 1.0), (1_000, 38, 30.0)]);
        if let Some(p) = s.scale.as_mut().and_then(|x| x.points.last_mut()) {
            p.heartbeat_rounds = 0;
        }
        assert_eq!(Goals::of(&s, &Ratios::of(&s)).heartbeat_round_ms, None);
    }

    #[test]
    fn the_worst_kill_to_ready_is_judged_against_the_clu5_bound() {
        use crate::cluster::result::{ClusterResult, KillToReady};
        let at = |worst_ms: Option<f64>| {
            let s = Sections {
                cluster: Some(ClusterResult {
                    heartbeat_ms: 5_000,
                    amqp_heartbeat_s: 10,
                    sides: vec![],
                    costs: vec![],
                    kill_to_ready: Some(KillToReady {
                        heartbeat_ms: 5_000,
                        amqp_heartbeat_s: 10,
                        bound_ms: 30_000.0,
                        wait_ms: 60_000.0,
                        kills: vec![],
                        median_ms: worst_ms,
                        worst_ms,
                    }),
                }),
                ..Sections::default()
            };
            Goals::of(&s, &Ratios::of(&s)).cluster_kill_to_ready_worst_ms
        };
        let met = at(Some(4_000.0)).expect("kills ran");
        assert!(met.met && met.goal == 30_000.0 && met.bound == Bound::AtMost, "{met:?}");
        assert!(!at(Some(30_001.0)).expect("kills ran").met);
        assert_eq!(at(None), None, "no kill, nothing judged");
    }

    #[test]
    fn the_migration_goal_is_a_thousand_replies_a_second() {
        let s = Sections {
            migration: Some(migration(999.0, true)),
            ..Sections::default()
        };
        let g = Goals::of(&s, &Ratios::of(&s));
        assert!(!g.migration_replies_per_s.expect("ran").met);
    }
}
