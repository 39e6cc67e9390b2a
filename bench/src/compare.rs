//! Two gateways in one invocation, interleaved: is this one worse than that one, beyond the noise?
//!
//! Why: one run's ratios move by a fifth or more on a quiet shared machine (see [`super::gate`]),
//! so comparing a run today with a baseline recorded yesterday blames the gateway for the machine.
//! Here both gateways are measured in the same invocation, on the same broker, in turns ordered
//! A B B A A B … (each gateway first as often as second, so a drift of the machine over the run
//! falls on both alike), and each figure is compared median against median. The **noise** is
//! measured, not assumed: the spread of each gateway's own runs ((max − min) ÷ median). A figure is
//! worse *beyond the noise* only when its median moved the wrong way by more than the larger of the
//! two spreads; that is the verdict printed, never a hard failure.
//!
//! `scripts/bench --compare-baseline` builds the gateway of the baseline's commit and runs this
//! with it as A and the working tree's gateway as B; `--compare CMD` takes any other gateway.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::floor::cpu_of;
use super::report::Report;
use super::{Options, run};

/// Which way is better for a compared figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Better {
    Higher,
    Lower,
}

/// A figure of one run.
type Pick = fn(&Report) -> Option<f64>;

/// The figures compared: the gated ratios of the paths, and what the floor goals look at.
pub const FIGURES: [(&str, Pick, Better); 9] = [
    (
        "forward briefs ÷ raw envelope echo",
        |r| r.ratios.forward_briefs_to_raw_envelope_echo,
        Better::Higher,
    ),
    (
        "forward briefs/s",
        |r| forward(r).map(|f| f.result.briefs_per_s),
        Better::Higher,
    ),
    (
        "SEND→INJECTED p50 ÷ raw round trip",
        |r| r.ratios.forward_p50_to_raw_round_trip,
        Better::Lower,
    ),
    (
        "SEND→INJECTED p50 − raw round trip, ms",
        |r| r.ratios.forward_p50_minus_raw_round_trip_ms,
        Better::Lower,
    ),
    (
        "gateway a CPU ms per brief",
        |r| forward(r).and_then(|f| cpu_of(&f.result.cpu_ms_per_brief, &["gateway_a"])),
        Better::Lower,
    ),
    (
        "gateway b CPU ms per brief",
        |r| forward(r).and_then(|f| cpu_of(&f.result.cpu_ms_per_brief, &["gateway_b"])),
        Better::Lower,
    ),
    ("pull replies ÷ raw", |r| r.ratios.pull_replies_to_raw, Better::Higher),
    (
        "pull replies ÷ raw envelope echo",
        |r| r.ratios.pull_replies_to_raw_envelope_echo,
        Better::Higher,
    ),
    (
        "gateway a CPU ms per reply",
        |r| {
            r.sections
                .pull
                .as_ref()
                .and_then(|p| cpu_of(&p.result.cpu_ms_per_reply, &["gateway_a"]))
        },
        Better::Lower,
    ),
];

fn forward(r: &Report) -> Option<&super::report::ForwardSection> {
    r.sections.forward.as_ref()
}

/// One figure, both gateways.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    pub name: String,
    pub better: Better,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    pub a_median: f64,
    pub b_median: f64,
    /// How much worse (positive) or better (negative) B's median is than A's, as a fraction.
    pub b_worse_by: f64,
    /// The larger of the two gateways' own spreads ((max − min) ÷ median).
    pub noise: f64,
}

impl Figure {
    /// B worse than A by more than the noise.
    pub fn worse_beyond_noise(&self) -> bool {
        self.b_worse_by > self.noise
    }

    fn of(name: &str, better: Better, a: Vec<f64>, b: Vec<f64>) -> Option<Figure> {
        let (a_median, b_median) = (median(&a)?, median(&b)?);
        let worse = match better {
            Better::Higher => (a_median - b_median) / a_median,
            Better::Lower => (b_median - a_median) / a_median,
        };
        Some(Figure {
            name: name.to_string(),
            better,
            noise: spread(&a).max(spread(&b)),
            a,
            b,
            a_median,
            b_median,
            b_worse_by: worse,
        })
    }
}

/// The comparison, written as JSON beside the runs' reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    pub a: String,
    pub b: String,
    pub rounds: usize,
    /// The order the runs were made in (`A`/`B`).
    pub order: String,
    pub figures: Vec<Figure>,
    /// Runs other processes disturbed ([`super::gate::trusted`]), by name.
    pub untrusted: Vec<String>,
}

/// The run order of `rounds` rounds: A B, B A, A B, …
pub fn order(rounds: usize) -> Vec<bool> {
    (0..rounds)
        .flat_map(|i| if i % 2 == 0 { [true, false] } else { [false, true] })
        .collect()
}

/// Runs `opts`' sections `rounds` times with each gateway, interleaved ([`order`]): `a_cmd` is
/// A, `opts.gateway_cmd` is B. Every run's report is written beside `opts.out`
/// (`<stem>-A-1.json`, …), the comparison to `opts.out` itself.
pub async fn compare(opts: &Options, a_cmd: &str, rounds: usize) -> anyhow::Result<Comparison> {
    let (mut a, mut b, mut untrusted) = (Vec::new(), Vec::new(), Vec::new());
    let mut seen = [0usize; 2];
    let mut order_text = String::new();
    for is_a in order(rounds) {
        let (label, cmd) = if is_a {
            ("A", a_cmd)
        } else {
            ("B", opts.gateway_cmd.as_str())
        };
        let n = &mut seen[usize::from(!is_a)];
        *n += 1;
        order_text.push_str(label);
        let mut o = opts.clone();
        o.gateway_cmd = cmd.to_string();
        o.out = beside(&opts.out, &format!("{label}-{n}"));
        o.record_baseline = false;
        eprintln!("fleet-bench: compare run {label} {n}/{rounds}: {cmd}");
        let report = run(&o).await?;
        if report.gate.as_ref().is_some_and(|g| !g.trusted) {
            untrusted.push(o.out.display().to_string());
        }
        if is_a { a.push(report) } else { b.push(report) }
    }
    let figures = FIGURES
        .iter()
        .filter_map(|(name, pick, better)| {
            let values = |runs: &[Report]| runs.iter().filter_map(pick).filter(|v| v.is_finite()).collect();
            Figure::of(name, *better, values(&a), values(&b))
        })
        .collect();
    let c = Comparison {
        a: a_cmd.to_string(),
        b: opts.gateway_cmd.clone(),
        rounds,
        order: order_text,
        figures,
        untrusted,
    };
    let text = serde_json::to_vec_pretty(&c)?;
    std::fs::write(&opts.out, text).map_err(|e| anyhow::anyhow!("writing {}: {e}", opts.out.display()))?;
    Ok(c)
}

/// `out` with `-<tag>` before its extension.
fn beside(out: &std::path::Path, tag: &str) -> PathBuf {
    let stem = out.file_stem().and_then(|s| s.to_str()).unwrap_or("bench");
    out.with_file_name(format!("{stem}-{tag}.json"))
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// (max − min) ÷ median; 0 for fewer than two values.
fn spread(v: &[f64]) -> f64 {
    let (Some(m), Some(lo), Some(hi)) = (
        median(v),
        v.iter().copied().reduce(f64::min),
        v.iter().copied().reduce(f64::max),
    ) else {
        return 0.0;
    };
    if v.len() < 2 || m == 0.0 {
        0.0
    } else {
        (hi - lo) / m.abs()
    }
}

/// The comparison as a table: each figure's runs, medians, B against A and the verdict.
pub fn table(c: &Comparison) -> String {
    let mut out = vec![
        format!("Interleaved comparison, {} rounds, order {}", c.rounds, c.order),
        format!("  A = {}", c.a),
        format!("  B = {}", c.b),
        String::new(),
        format!(
            "{:<40} {:>10} {:>10} {:>9} {:>7}  verdict",
            "figure", "A median", "B median", "B vs A", "noise"
        ),
    ];
    for f in &c.figures {
        let verdict = if f.worse_beyond_noise() {
            "B WORSE beyond the noise"
        } else if -f.b_worse_by > f.noise {
            "B better beyond the noise"
        } else {
            "within the noise"
        };
        out.push(format!(
            "{:<40} {:>10.3} {:>10.3} {:>+8.1}% {:>6.1}%  {verdict}",
            f.name,
            f.a_median,
            f.b_median,
            -f.b_worse_by * 100.0,
            f.noise * 100.0
        ));
    }
    out.push(String::new());
    out.push("B vs A: + is B better (whichever way is better for the figure); noise: the larger of the two gateways' own spreads (max − min) ÷ median.".into());
    if !c.untrusted.is_empty() {
        out.push(format!(
            "Not quiet (other processes took a share of the machine): {}",
            c.untrusted.join(", ")
        ));
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_order_puts_each_gateway_first_as_often_as_second() {
        let o: String = order(4).into_iter().map(|a| if a { 'A' } else { 'B' }).collect();
        assert_eq!(o, "ABBAABBA");
    }

    #[test]
    fn a_figure_is_worse_only_beyond_the_larger_spread() {
        let f = Figure::of("x", Better::Higher, vec![1.0, 1.1, 0.9], vec![0.85, 0.9, 0.95]).expect("figure");
        assert!((f.noise - 0.2).abs() < 1e-9, "A's spread 0.2 over 1.0: {}", f.noise);
        assert!((f.b_worse_by - 0.1).abs() < 1e-9);
        assert!(!f.worse_beyond_noise());
        let f = Figure::of("x", Better::Lower, vec![1.0, 1.02, 0.98], vec![1.5, 1.5, 1.5]).expect("figure");
        assert!(f.worse_beyond_noise(), "{f:?}");
    }

    #[test]
    fn reports_of_a_run_go_beside_the_comparison() {
        let p = beside(std::path::Path::new("/t/compare.json"), "A-2");
        assert_eq!(p, PathBuf::from("/t/compare-A-2.json"));
    }
}
