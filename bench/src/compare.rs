//! Two gateways in one invocation, interleaved: is this one worse than that one, beyond the noise?
//!
//! Why: one run's ratios move by a fifth or more on a quiet shared machine (see [`crate::report::gate`]),
//! so comparing a run today with a baseline recorded yesterday blames the gateway for the machine.
//! Here both gateways are measured in the same invocation, on the same broker, in turns ordered
//! A B B A A B … (each gateway first as often as second, so a drift of the machine over the run
//! falls on both alike), and each figure is compared median against median. The **noise** is
//! measured, not assumed: the spread of each gateway's own runs ((max − min) ÷ median). A figure is
//! worse *beyond the noise* only when its median moved the wrong way by more than the larger of the
//! two spreads; that is the verdict printed, never a hard failure.
//!
//! `scripts/bench --compare-baseline` builds the gateway of the baseline's commit and runs this
//! with it as A and the working tree's gateway as B; `--compare CMD[,CMD…]` takes any others (a
//! bisection: several commits' gateways in one invocation, each compared with the first).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::floors::floor::cpu_of;
use crate::report::document::Report;
use crate::{Options, run};

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

fn forward(r: &Report) -> Option<&crate::report::sections::ForwardSection> {
    r.sections.forward.as_ref()
}

/// One figure, every gateway (the first is the one the others are compared with).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Figure {
    pub name: String,
    pub better: Better,
    /// Per gateway, its runs' values.
    pub values: Vec<Vec<f64>>,
    pub medians: Vec<f64>,
    /// Per gateway, its own spread: (max − min) ÷ median.
    pub spreads: Vec<f64>,
}

impl Figure {
    /// How much worse (positive) or better (negative) gateway `i`'s median is than the first
    /// gateway's, as a fraction.
    pub fn worse_by(&self, i: usize) -> f64 {
        let (a, b) = (self.medians[0], self.medians[i]);
        match self.better {
            Better::Higher => (a - b) / a,
            Better::Lower => (b - a) / a,
        }
    }

    /// The noise of comparing gateway `i` with the first: the larger of their spreads.
    pub fn noise(&self, i: usize) -> f64 {
        self.spreads[0].max(self.spreads[i])
    }

    /// Gateway `i` worse than the first by more than the noise.
    pub fn worse_beyond_noise(&self, i: usize) -> bool {
        self.worse_by(i) > self.noise(i)
    }

    fn of(name: &str, better: Better, values: Vec<Vec<f64>>) -> Option<Figure> {
        let medians = values.iter().map(|v| median(v)).collect::<Option<Vec<f64>>>()?;
        Some(Figure {
            name: name.to_string(),
            better,
            spreads: values.iter().map(|v| spread(v)).collect(),
            values,
            medians,
        })
    }
}

/// The comparison, written as JSON beside the runs' reports.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Comparison {
    /// The gateways, as labelled in the table: `A`, `B`, … in the order given (the last is
    /// `--gateway-cmd`, the working tree's by default).
    pub gateways: Vec<String>,
    pub rounds: usize,
    /// The order the runs were made in, by label.
    pub order: String,
    pub figures: Vec<Figure>,
    /// Runs other processes disturbed ([`crate::report::gate::trusted`]), by name.
    pub untrusted: Vec<String>,
}

/// The run order of `rounds` rounds of `n` gateways: forward in even rounds, backward in odd
/// ones (A B, B A, A B, … for two), so each takes each place equally often over pairs of rounds.
pub fn order(n: usize, rounds: usize) -> Vec<usize> {
    (0..rounds)
        .flat_map(|r| {
            let ids: Vec<usize> = if r % 2 == 0 {
                (0..n).collect()
            } else {
                (0..n).rev().collect()
            };
            ids
        })
        .collect()
}

fn label(i: usize) -> char {
    char::from(b'A' + (i % 26) as u8)
}

/// Runs `opts`' sections `rounds` times with each gateway of `others` and then
/// `opts.gateway_cmd`, interleaved ([`order`]). Every run's report is written beside `opts.out`
/// (`<stem>-A-1.json`, …), the comparison to `opts.out` itself.
pub async fn compare(opts: &Options, others: &[String], rounds: usize) -> anyhow::Result<Comparison> {
    let gateways: Vec<String> = others.iter().cloned().chain([opts.gateway_cmd.clone()]).collect();
    let mut reports: Vec<Vec<Report>> = gateways.iter().map(|_| Vec::new()).collect();
    let (mut untrusted, mut order_text) = (Vec::new(), String::new());
    for i in order(gateways.len(), rounds) {
        let n = reports[i].len() + 1;
        order_text.push(label(i));
        let mut o = opts.clone();
        o.gateway_cmd = gateways[i].clone();
        o.out = beside(&opts.out, &format!("{}-{n}", label(i)));
        o.record_baseline = false;
        eprintln!("fleet-bench: compare run {} {n}/{rounds}: {}", label(i), gateways[i]);
        let report = run(&o).await?;
        if report.gate.as_ref().is_some_and(|g| !g.trusted) {
            untrusted.push(o.out.display().to_string());
        }
        reports[i].push(report);
    }
    let figures = FIGURES
        .iter()
        .filter_map(|(name, pick, better)| {
            let values = reports
                .iter()
                .map(|runs| runs.iter().filter_map(pick).filter(|v| v.is_finite()).collect())
                .collect();
            Figure::of(name, *better, values)
        })
        .collect();
    let c = Comparison {
        gateways,
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

/// The verdict on gateway `i` against the first: none without a noise to judge by (a gateway
/// with a single run has no spread of its own).
fn verdict(f: &Figure, i: usize) -> &'static str {
    if f.values[0].len() < 2 || f.values[i].len() < 2 {
        "1 run"
    } else if f.worse_beyond_noise(i) {
        "WORSE"
    } else if -f.worse_by(i) > f.noise(i) {
        "better"
    } else {
        "~"
    }
}

/// The comparison as a table: per figure each gateway's median and, for every gateway after the
/// first, how it compares with the first (+ better), the noise and the verdict.
pub fn table(c: &Comparison) -> String {
    let mut out = vec![format!(
        "Interleaved comparison, {} rounds, order {}",
        c.rounds, c.order
    )];
    for (i, g) in c.gateways.iter().enumerate() {
        out.push(format!("  {} = {g}", label(i)));
    }
    out.push(String::new());
    let mut head = format!("{:<40} {:>9}", "figure", "A");
    for i in 1..c.gateways.len() {
        head.push_str(&format!(" | {:>9} {:>8} {:>6} {:>6}", label(i), "vs A", "noise", ""));
    }
    out.push(head);
    for f in &c.figures {
        let mut line = format!("{:<40} {:>9.3}", f.name, f.medians[0]);
        for i in 1..f.medians.len() {
            line.push_str(&format!(
                " | {:>9.3} {:>+7.1}% {:>5.1}% {:>6}",
                f.medians[i],
                -f.worse_by(i) * 100.0,
                f.noise(i) * 100.0,
                verdict(f, i)
            ));
        }
        out.push(line);
    }
    out.push(String::new());
    out.push("vs A: + is better than A (whichever way is better for the figure); noise: the larger of the two gateways' own spreads, (max − min) ÷ median; WORSE / better only beyond it.".into());
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
        let o: String = order(2, 4).into_iter().map(label).collect();
        assert_eq!(o, "ABBAABBA");
        let o: String = order(3, 2).into_iter().map(label).collect();
        assert_eq!(o, "ABCCBA");
    }

    #[test]
    fn a_figure_is_worse_only_beyond_the_larger_spread() {
        let f = Figure::of("x", Better::Higher, vec![vec![1.0, 1.1, 0.9], vec![0.85, 0.9, 0.95]]).expect("figure");
        assert!(
            (f.noise(1) - 0.2).abs() < 1e-9,
            "A's spread 0.2 over 1.0: {}",
            f.noise(1)
        );
        assert!((f.worse_by(1) - 0.1).abs() < 1e-9);
        assert!(!f.worse_beyond_noise(1));
        let f = Figure::of(
            "x",
            Better::Lower,
            vec![vec![1.0, 1.02, 0.98], vec![1.5, 1.5, 1.5], vec![0.5, 0.5, 0.5]],
        )
        .expect("figure");
        assert!(f.worse_beyond_noise(1), "{f:?}");
        assert_eq!((verdict(&f, 1), verdict(&f, 2)), ("WORSE", "better"));
        assert!(
            Figure::of("x", Better::Lower, vec![vec![1.0], vec![]]).is_none(),
            "a gateway without the figure"
        );
    }

    #[test]
    fn reports_of_a_run_go_beside_the_comparison() {
        let p = beside(std::path::Path::new("/t/compare.json"), "A-2");
        assert_eq!(p, PathBuf::from("/t/compare-A-2.json"));
    }
}
