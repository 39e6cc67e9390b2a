//! The regression gate: this run's ratios against a checked-in baseline of ratios.
//!
//! Why: absolute rates on a shared 2-core machine swing by a third from one minute to the next, so
//! a baseline of messages per second would cry wolf; a ratio to the raw broker measured in the same
//! run carries the machine's speed in both terms and survives a change of machine far better. A
//! gated ratio that got more than [`DROP`] worse than the baseline is printed loudly. The verdict
//! is only as good as the run: with other processes taking a share of the machine while it measured
//! ([`trusted`]; the load average only when nothing was timed) the figures are
//! not trusted, and the gate says so and how to rerun, instead of blaming the gateway.
//!
//! Even on a quiet machine one run's ratios move by a fifth or more (measured: forward ÷ raw
//! echo 0.24–0.43 over six quiet runs of the same gateway within two hours, the raw broker
//! getting faster while the gateways did not), more than the gate's own threshold. So a baseline, and a verdict one can
//! lean on, come from the **median of several runs** ([`median_of`]; `fleet-bench --gate-reports
//! a.json,b.json,c.json [--record-baseline]`); a single run's comparison is a first look.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::report::sections::Ratios;

/// How much worse than the baseline a ratio may get before it is a regression (20 %).
pub const DROP: f64 = 0.20;

/// Which way is better for a gated ratio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Better {
    Higher,
    Lower,
}

/// A ratio of the report, by its name in the report's `ratios` (and in the baseline file).
type Pick = fn(&Ratios) -> Option<f64>;

/// The ratios the gate watches, and which way is better.
const GATED: [(&str, Pick, Better); 6] = [
    (
        "forward_briefs_to_raw_echo",
        |r| r.forward_briefs_to_raw_echo,
        Better::Higher,
    ),
    ("forward_briefs_to_raw", |r| r.forward_briefs_to_raw, Better::Higher),
    ("pull_replies_to_raw", |r| r.pull_replies_to_raw, Better::Higher),
    (
        "forward_p50_to_raw_round_trip",
        |r| r.forward_p50_to_raw_round_trip,
        Better::Lower,
    ),
    (
        "migration_replies_to_raw_publish",
        |r| r.migration_replies_to_raw_publish,
        Better::Higher,
    ),
    (
        "migration_move_to_raw_move",
        |r| r.migration_move_to_raw_move,
        Better::Higher,
    ),
];

/// The checked-in baseline: ratios only, with where they came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Baseline {
    /// When and on what the ratios were measured (free text, for the reader).
    pub recorded: String,
    /// The commit whose gateway was measured (`scripts/bench` passes it in
    /// `FLEET_BENCH_GATEWAY_COMMIT`): what `scripts/bench --compare-baseline` builds and runs
    /// against the working tree's gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    pub ratios: BTreeMap<String, f64>,
}

/// The commit `scripts/bench` says the measured gateway was built from, if any.
pub fn gateway_commit() -> Option<String> {
    std::env::var("FLEET_BENCH_GATEWAY_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
}

/// One gated ratio, compared.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Compared {
    pub ratio: String,
    pub baseline: f64,
    pub now: f64,
    /// How much worse (positive) or better (negative) than the baseline, as a fraction.
    pub worse_by: f64,
    pub regressed: bool,
}

/// The gate's findings, kept in the report as `gate`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Gate {
    pub baseline_file: String,
    /// `None` when there is no baseline to compare with.
    pub compared: Option<Vec<Compared>>,
    /// 1-minute load average at the start and at the end of the run, and the cores.
    pub load: [Option<f64>; 2],
    pub cores: usize,
    /// Whether the machine was quiet enough for the figures to be trusted.
    pub trusted: bool,
    /// Per timed section, the share of the machine other processes took ([`trusted`]).
    #[serde(default)]
    pub others: Vec<(String, f64)>,
}

/// A run's gated ratios, by name (ratios the run did not measure are left out).
fn gated(ratios: &Ratios) -> BTreeMap<String, f64> {
    GATED
        .iter()
        .filter_map(|(k, pick, _)| Some((k.to_string(), pick(ratios)?)))
        .collect()
}

/// The run's gated ratios, as a baseline recorded now.
pub fn baseline_of(ratios: &Ratios, recorded: String) -> Baseline {
    Baseline {
        recorded,
        commit: gateway_commit(),
        ratios: gated(ratios),
    }
}

/// Per gated ratio, the median over the runs that measured it (of an even count, the mean of
/// the middle two).
pub fn median_of(runs: &[Ratios]) -> BTreeMap<String, f64> {
    GATED
        .iter()
        .filter_map(|(k, pick, _)| {
            let mut v: Vec<f64> = runs.iter().filter_map(pick).filter(|x| x.is_finite()).collect();
            if v.is_empty() {
                return None;
            }
            v.sort_by(f64::total_cmp);
            let m = v.len() / 2;
            let median = if v.len() % 2 == 1 {
                v[m]
            } else {
                (v[m - 1] + v[m]) / 2.0
            };
            Some((k.to_string(), median))
        })
        .collect()
}

/// Compares the run's ratios with `baseline`; ratios missing on either side are left out.
pub fn compare(ratios: &Ratios, baseline: &Baseline) -> Vec<Compared> {
    compare_values(&gated(ratios), baseline)
}

/// Compares gated ratios by name (a run's, or the median of runs') with `baseline`.
pub fn compare_values(values: &BTreeMap<String, f64>, baseline: &Baseline) -> Vec<Compared> {
    GATED
        .iter()
        .filter_map(|(k, _, better)| {
            let now = *values.get(*k)?;
            let base = *baseline.ratios.get(*k)?;
            if base <= 0.0 || now <= 0.0 {
                return None;
            }
            // Worse by: the fraction the "goodness" fell (for lower-is-better, of its inverse).
            let worse_by = match better {
                Better::Higher => 1.0 - now / base,
                Better::Lower => 1.0 - base / now,
            };
            Some(Compared {
                ratio: k.to_string(),
                baseline: base,
                now,
                worse_by,
                regressed: worse_by > DROP,
            })
        })
        .collect()
}

/// Whether a load average is quiet enough: at most one runnable task per core.
/// The most of the machine that processes outside the bench may take during a timed section
/// before the run is untrusted.
pub const OTHERS_MAX_SHARE: f64 = 0.10;

/// Whether the timed sections ran on a quiet machine: judged by the CPU that *other* processes
/// took while they ran (`others`: section → share of the machine), not by the load average, which
/// after a CPU-bound section is the bench's own load. Without any section measured, the 1-minute
/// load averages decide ([`quiet`]).
pub fn trusted(others: &[(String, f64)], load: &[Option<f64>; 2], cores: usize) -> bool {
    if others.is_empty() {
        return load.iter().all(|l| quiet(*l, cores));
    }
    others.iter().all(|(_, s)| *s <= OTHERS_MAX_SHARE)
}

pub fn quiet(load: Option<f64>, cores: usize) -> bool {
    load.is_none_or(|l| l <= cores as f64)
}

/// Reads `file` (a missing file is no baseline; a broken one is an error naming it).
pub fn read_baseline(file: &Path) -> anyhow::Result<Option<Baseline>> {
    match std::fs::read(file) {
        Ok(b) => Ok(Some(serde_json::from_slice(&b).map_err(|e| {
            anyhow::anyhow!("the bench baseline {} is not a baseline: {e}", file.display())
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(anyhow::anyhow!("reading the bench baseline {}: {e}", file.display())),
    }
}

/// The gate's text: one line per gated ratio, regressions in capitals, the load verdict.
pub fn lines(g: &Gate) -> Vec<String> {
    let mut out = Vec::new();
    let load = |l: Option<f64>| l.map(|l| format!("{l:.1}")).unwrap_or_else(|| "?".into());
    let others: Vec<String> = g
        .others
        .iter()
        .map(|(s, share)| format!("{s} {:.0} %", 100.0 * share))
        .collect();
    if !g.trusted {
        let why = if others.is_empty() {
            format!(
                "load average {} → {} on {} cores",
                load(g.load[0]),
                load(g.load[1]),
                g.cores
            )
        } else {
            format!(
                "other processes took more than {:.0} % of the machine while it measured ({})",
                100.0 * OTHERS_MAX_SHARE,
                others.join(", ")
            )
        };
        out.push(format!(
            "!!! MACHINE TOO LOADED TO TRUST: {why}. The ratios below may be the machine's, not the \
             gateway's; rerun on a quiet machine (scripts/bench, nothing else running) before \
             reading a regression into them."
        ));
    } else if !others.is_empty() {
        out.push(format!(
            "machine quiet enough: other processes took {} of it while it measured (≤ {:.0} % each)",
            others.join(", "),
            100.0 * OTHERS_MAX_SHARE
        ));
    }
    out.extend(comparison_lines(&g.baseline_file, g.compared.as_deref()));
    out
}

/// The comparison's text alone: one line per gated ratio against `baseline_file` (or how to
/// record one), for a run's gate and for the median of runs alike.
pub fn comparison_lines(baseline_file: &str, compared: Option<&[Compared]>) -> Vec<String> {
    let Some(c) = compared else {
        return vec![format!(
            "regression gate: no baseline at {baseline_file} (record one on a quiet machine: fleet-bench --record-baseline)"
        )];
    };
    let mut out = vec![format!(
        "regression gate vs {baseline_file} (a ratio more than {:.0} % worse is a regression):",
        DROP * 100.0
    )];
    for x in c {
        let verdict = if x.regressed {
            format!("!!! REGRESSION: {:.0} % worse", x.worse_by * 100.0)
        } else if x.worse_by > 0.0 {
            format!("ok ({:.0} % worse)", x.worse_by * 100.0)
        } else {
            // `abs`: an unchanged ratio is 0 % better, not "-0 %".
            format!("ok ({:.0} % better)", (x.worse_by * 100.0).abs())
        };
        out.push(format!(
            "  {:<36} baseline {:>8.3}  now {:>8.3}  {verdict}",
            x.ratio, x.baseline, x.now
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(fwd: f64, p50: f64) -> Ratios {
        Ratios {
            forward_briefs_to_raw_echo: Some(fwd),
            forward_p50_to_raw_round_trip: Some(p50),
            pull_replies_to_raw: None,
            ..Ratios::default()
        }
    }

    #[test]
    fn a_ratio_more_than_a_fifth_worse_is_a_regression_either_way_round() {
        let base = baseline_of(&report(0.5, 2.0), "test".into());
        assert_eq!(base.ratios.len(), 2, "null ratios are not recorded: {base:?}");
        let c = compare(&report(0.39, 2.4), &base);
        let fwd = c.iter().find(|x| x.ratio == "forward_briefs_to_raw_echo").expect("fwd");
        assert!(fwd.regressed && (fwd.worse_by - 0.22).abs() < 1e-9, "{fwd:?}");
        // Lower is better: 2.0 → 2.4 is 1/2.4 vs 1/2.0, 16.7 % worse — not a regression.
        let p50 = c
            .iter()
            .find(|x| x.ratio == "forward_p50_to_raw_round_trip")
            .expect("p50");
        assert!(!p50.regressed && p50.worse_by > 0.16 && p50.worse_by < 0.17, "{p50:?}");
        let c = compare(&report(0.6, 2.6), &base);
        assert!(
            c.iter()
                .any(|x| x.ratio == "forward_p50_to_raw_round_trip" && x.regressed)
        );
        assert!(
            c.iter()
                .any(|x| x.ratio == "forward_briefs_to_raw_echo" && !x.regressed && x.worse_by < 0.0)
        );
    }

    #[test]
    fn the_median_of_runs_takes_each_ratio_s_middle_value() {
        let runs = [report(0.31, 2.2), report(0.24, 3.2), report(0.29, 2.5)];
        let m = median_of(&runs);
        assert_eq!(m["forward_briefs_to_raw_echo"], 0.29);
        assert_eq!(m["forward_p50_to_raw_round_trip"], 2.5);
        assert!(!m.contains_key("pull_replies_to_raw"), "measured by no run");
        let m = median_of(&runs[..2]);
        assert!(
            (m["forward_briefs_to_raw_echo"] - 0.275).abs() < 1e-9,
            "even count: mean of the middle two"
        );
        assert!(median_of(&[]).is_empty());
        let base = Baseline {
            recorded: "test".into(),
            commit: None,
            ratios: median_of(&runs),
        };
        let c = compare_values(&median_of(&[report(0.2, 2.5)]), &base);
        assert!(c.iter().any(|x| x.ratio == "forward_briefs_to_raw_echo" && x.regressed));
    }

    #[test]
    fn the_text_shouts_regressions_and_a_loaded_machine() {
        let base = baseline_of(&report(0.5, 2.0), "test".into());
        let g = Gate {
            baseline_file: "b.json".into(),
            compared: Some(compare(&report(0.3, 2.0), &base)),
            load: [Some(7.5), Some(8.0)],
            cores: 2,
            trusted: quiet(Some(8.0), 2),
            others: vec![],
        };
        let text = lines(&g).join("\n");
        assert!(
            text.contains("TOO LOADED") && text.contains("REGRESSION: 40 % worse"),
            "{text}"
        );
        assert!(quiet(Some(1.5), 2) && quiet(None, 2));
    }

    #[test]
    fn trust_rests_on_what_other_processes_took_not_on_the_bench_s_own_load() {
        let busy_after_own_work = [Some(0.4), Some(3.9)];
        let quiet_sections = vec![("forward".to_string(), 0.02), ("pull".to_string(), 0.03)];
        assert!(trusted(&quiet_sections, &busy_after_own_work, 2));
        let shared = vec![("forward".to_string(), 0.02), ("pull".to_string(), 0.35)];
        assert!(!trusted(&shared, &[Some(0.1), Some(0.1)], 2));
        assert!(
            !trusted(&[], &busy_after_own_work, 2),
            "nothing timed: the load decides"
        );
        let g = Gate {
            baseline_file: "b.json".into(),
            compared: None,
            load: [Some(0.1), Some(0.1)],
            cores: 2,
            trusted: false,
            others: shared,
        };
        let text = lines(&g).join("\n");
        assert!(
            text.contains("other processes took more than 10 %") && text.contains("pull 35 %"),
            "{text}"
        );
    }

    #[test]
    fn no_baseline_says_how_to_record_one_and_a_broken_one_is_named() {
        let dir = std::env::temp_dir().join(format!("gate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        assert_eq!(read_baseline(&dir.join("missing.json")).expect("missing is fine"), None);
        let bad = dir.join("bad.json");
        std::fs::write(&bad, "{").expect("write");
        let e = read_baseline(&bad).expect_err("broken");
        assert!(e.to_string().contains("bad.json"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
