//! Where a message's time goes inside the gateways: the stage breakdown beside the ratios.
//!
//! Why: a ratio to the raw broker says how much slower the gateway is, not why. A gateway that
//! exports `fleet_stage_seconds{stage}` (a Prometheus histogram per step of a path; the reference
//! gateway does, see its `metrics.rs`) is read before and after a path, and the difference of each
//! stage's `_sum` and `_count` gives how many messages passed it during the path and their mean
//! time there. A gateway without the metric simply has no breakdown: nothing here is judged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::rig::hosts::Fleet;

/// `_sum` and `_count` of each stage, as one scrape of `/metrics` showed them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scrape(BTreeMap<String, (f64, f64)>);

/// One stage over a path.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageTime {
    pub count: u64,
    pub mean_ms: f64,
}

/// Stage → time, per gateway host.
pub type Breakdown = BTreeMap<String, BTreeMap<String, StageTime>>;

const SERIES: &str = "fleet_stage_seconds";

/// Reads `fleet_stage_seconds_sum{stage="…"}` / `_count` lines of a Prometheus or OpenMetrics text.
pub fn parse(text: &str) -> Scrape {
    let mut out: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(SERIES) else {
            continue;
        };
        let (is_sum, rest) = if let Some(r) = rest.strip_prefix("_sum{") {
            (true, r)
        } else if let Some(r) = rest.strip_prefix("_count{") {
            (false, r)
        } else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Some(stage) = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("stage=\""))
            .and_then(|v| v.strip_suffix('"'))
        else {
            continue;
        };
        let Ok(v) = value.trim().parse::<f64>() else {
            continue;
        };
        let e = out.entry(stage.to_string()).or_default();
        if is_sum {
            e.0 = v;
        } else {
            e.1 = v;
        }
    }
    Scrape(out)
}

/// What passed each stage between `before` and `after`.
pub fn between(before: &Scrape, after: &Scrape) -> BTreeMap<String, StageTime> {
    after
        .0
        .iter()
        .filter_map(|(stage, (sum, count))| {
            let (s0, c0) = before.0.get(stage).copied().unwrap_or_default();
            let n = count - c0;
            (n >= 1.0).then(|| {
                (
                    stage.clone(),
                    StageTime {
                        count: n as u64,
                        mean_ms: 1e3 * (sum - s0) / n,
                    },
                )
            })
        })
        .collect()
}

/// Scrapes every host in `hosts` (a host that does not answer gets an empty scrape).
pub async fn scrape(fleet: &Fleet, hosts: &[&str]) -> BTreeMap<String, Scrape> {
    let mut out = BTreeMap::new();
    for host in hosts {
        let text = match fleet.host(host) {
            Ok(h) => match h.gateway.get("/metrics").await {
                Ok((200, v)) => v.as_str().unwrap_or_default().to_string(),
                _ => String::new(),
            },
            Err(_) => String::new(),
        };
        out.insert(host.to_string(), parse(&text));
    }
    out
}

/// The breakdown per host between two [`scrape`]s; hosts with nothing measured are left out.
pub fn breakdown(before: &BTreeMap<String, Scrape>, after: &BTreeMap<String, Scrape>) -> Breakdown {
    after
        .iter()
        .map(|(host, a)| (host.clone(), between(before.get(host).unwrap_or(&Scrape::default()), a)))
        .filter(|(_, stages)| !stages.is_empty())
        .collect()
}

/// Text lines for the bench's table: `label` then one line per host.
pub fn lines(label: &str, b: &Breakdown) -> Vec<String> {
    if b.is_empty() {
        return vec![format!("{label}: no stage breakdown (the gateway exports no {SERIES})")];
    }
    let mut out = vec![format!(
        "{label} — mean ms per message in each gateway stage ({SERIES}):"
    )];
    for (host, stages) in b {
        let parts: Vec<String> = stages
            .iter()
            .map(|(s, t)| format!("{s} {:.3} ×{}", t.mean_ms, t.count))
            .collect();
        out.push(format!("  gateway {host}: {}", parts.join(" · ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# TYPE fleet_stage_seconds histogram\n\
        fleet_stage_seconds_sum{stage=\"inject\"} 0.5\n\
        fleet_stage_seconds_count{stage=\"inject\"} 10\n\
        fleet_stage_seconds_bucket{le=\"0.001\",stage=\"inject\"} 3\n\
        fleet_published_total{kind=\"SEND\"} 4\n";
    const AFTER: &str = "fleet_stage_seconds_sum{stage=\"inject\"} 1.5\n\
        fleet_stage_seconds_count{stage=\"inject\"} 110\n\
        fleet_stage_seconds_sum{stage=\"verify\"} 0.02\n\
        fleet_stage_seconds_count{stage=\"verify\"} 100\n\
        # EOF\n";

    #[test]
    fn the_difference_of_two_scrapes_is_each_stage_mean() {
        let d = between(&parse(BEFORE), &parse(AFTER));
        assert_eq!(
            d["inject"],
            StageTime {
                count: 100,
                mean_ms: 10.0
            }
        );
        assert_eq!(d["verify"].count, 100);
        assert!((d["verify"].mean_ms - 0.2).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn a_gateway_without_the_metric_has_no_breakdown() {
        let none = BTreeMap::from([("a".to_string(), parse("fleet_published_total 3\n"))]);
        let b = breakdown(&none, &none);
        assert!(b.is_empty());
        assert!(lines("forward", &b)[0].contains("no stage breakdown"));
    }

    #[test]
    fn stages_that_saw_nothing_are_left_out() {
        let d = between(&parse(AFTER), &parse(AFTER));
        assert!(d.is_empty(), "{d:?}");
    }
}
