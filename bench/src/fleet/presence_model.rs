//! Presence at fleet scale, on paper from measured constants (docs/PRESENCE-BATCH.md).
//!
//! Why: one machine cannot hold 1,000 gateways, yet the cost of SPEC §8's per-entity heartbeats
//! grows with the fleet squared (every gateway's `roster.<host>` is bound to `roster.#`). The
//! [`crate::fleet::scale`] run measures one gateway holding E entities at rest; from its largest level
//! this module takes the gateway's and the broker's CPU per presence message, then prices a grid
//! of fleet sizes for per-entity presence (SPEC today) and for host-batched presence (the
//! proposal). Message counts are exact; CPU is the measured per-message cost times the count.
//!
//! The constants are upper bounds: at rest the gateway's CPU covers sending its heartbeats,
//! receiving them back (its own `roster.<host>` is bound to `roster.#` too) and one herdr status
//! read per worker, and all of it is charged to the messages it receives; the broker's CPU is
//! charged to its deliveries (the gateway's queue plus the bench's tap), publish cost included.

use serde::{Deserialize, Serialize};

use crate::fleet::scale::ScalePoint;

/// The spec's default heartbeat interval H (PRS-1), the bench's default `--heartbeat-ms` (a run
/// prices with the H its scale run used).
pub const HEARTBEAT_S: f64 = 5.0;

/// Fleet sizes the model prices: hosts × agents per host.
pub const GRID: [(u64, u64); 6] = [(10, 5), (10, 50), (100, 5), (100, 50), (1_000, 5), (1_000, 50)];

/// What one presence message costs, measured on this machine.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Constants {
    /// The scale level the constants come from (entities on the measured gateway).
    pub measured_entities: usize,
    /// Presence messages the measured gateway handled per second (its own, sent and received).
    pub measured_presences_per_s: f64,
    /// Gateway CPU per presence received (ms, upper bound: sending and herdr reads included).
    pub gateway_cpu_ms_per_presence: f64,
    /// Broker CPU per delivery (ms, upper bound: publishing included); `None` without a broker pid.
    pub broker_cpu_ms_per_delivery: Option<f64>,
}

/// One fleet size, both designs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    pub hosts: u64,
    pub agents_per_host: u64,
    pub per_entity: Cost,
    pub batched: Cost,
}

/// The steady-state cost of presence (no deltas: nothing comes up or goes down).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Cost {
    pub publishes_per_s: f64,
    pub broker_deliveries_per_s: f64,
    /// Messages each gateway receives and verifies per second.
    pub per_gateway_msgs_per_s: f64,
    /// CPU cores each gateway spends on presence (at the measured per-message cost).
    pub per_gateway_cores: f64,
    /// CPU cores the broker spends on presence deliveries, when measured.
    pub broker_cores: Option<f64>,
}

/// The model's output: the constants it used and the priced grid.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Model {
    pub heartbeat_s: f64,
    pub constants: Constants,
    pub rows: Vec<Row>,
}

/// Takes the constants from the largest measured level (the most messages per second, the least
/// noise); `None` when no level had a CPU sample to divide.
pub fn constants(points: &[ScalePoint], heartbeat_s: f64) -> Option<Constants> {
    let p = points.iter().filter(|p| p.entities > 0).max_by_key(|p| p.entities)?;
    // The entities plus the gateway's own `_gateway` entry, once per heartbeat.
    let presences_per_s = (p.entities as f64 + 1.0) / heartbeat_s;
    if presences_per_s <= 0.0 || p.gateway_cpu_pct <= 0.0 {
        return None;
    }
    // % of one core → core-ms per second, over messages per second.
    let gateway = 10.0 * p.gateway_cpu_pct / presences_per_s;
    // The gateway's own queue and the bench's tap: two deliveries per presence.
    let broker = p.broker_cpu_pct.map(|b| 10.0 * b / (2.0 * presences_per_s));
    Some(Constants {
        measured_entities: p.entities,
        measured_presences_per_s: presences_per_s,
        gateway_cpu_ms_per_presence: gateway,
        broker_cpu_ms_per_delivery: broker,
    })
}

/// The exact message counts of presence at steady state: (publishes/s, broker deliveries/s,
/// messages each gateway receives and verifies per second) — N·(E+1)/H, N²·(E+1)/H, N·(E+1)/H
/// per-entity; N/H, N²/H, N/H batched.
pub fn counts(hosts: u64, agents: u64, heartbeat_s: f64, batched: bool) -> (f64, f64, f64) {
    let n = hosts as f64;
    let per_host = if batched { 1.0 } else { agents as f64 + 1.0 };
    let publishes = n * per_host / heartbeat_s;
    (publishes, publishes * n, publishes)
}

/// Prices `hosts` × `agents` for both designs.
pub fn cost(c: &Constants, heartbeat_s: f64, hosts: u64, agents: u64, batched: bool) -> Cost {
    let (publishes, deliveries, _) = counts(hosts, agents, heartbeat_s, batched);
    Cost {
        publishes_per_s: publishes,
        broker_deliveries_per_s: deliveries,
        per_gateway_msgs_per_s: publishes,
        per_gateway_cores: publishes * c.gateway_cpu_ms_per_presence / 1e3,
        broker_cores: c.broker_cpu_ms_per_delivery.map(|b| deliveries * b / 1e3),
    }
}

/// The model for the measured `points`, or `None` when they hold no usable level.
pub fn model(points: &[ScalePoint], heartbeat_s: f64) -> Option<Model> {
    let constants = constants(points, heartbeat_s)?;
    let rows = GRID
        .iter()
        .map(|&(hosts, agents)| Row {
            hosts,
            agents_per_host: agents,
            per_entity: cost(&constants, heartbeat_s, hosts, agents, false),
            batched: cost(&constants, heartbeat_s, hosts, agents, true),
        })
        .collect();
    Some(Model {
        heartbeat_s,
        constants,
        rows,
    })
}

/// The shortest a heartbeat round of the measured gateway can be on `cores` cores, seconds: its
/// entities plus its `_gateway` entry, one delivery each (only the gateway's own roster queue, no
/// observer), at the broker's measured CPU per delivery, with the gateway costing nothing.
pub fn round_floor_s(c: &Constants, cores: usize) -> Option<f64> {
    let b = c.broker_cpu_ms_per_delivery?;
    Some((c.measured_entities as f64 + 1.0) * b / 1e3 / cores.max(1) as f64)
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// A number in engineering form (1.2 k, 10.2 M), for the table.
fn eng(v: f64) -> String {
    match v {
        v if v >= 1e9 => format!("{:.1} G", v / 1e9),
        v if v >= 1e6 => format!("{:.1} M", v / 1e6),
        v if v >= 1e3 => format!("{:.1} k", v / 1e3),
        v => format!("{v:.1}"),
    }
}

/// The model as text lines for the bench's table.
pub fn lines(m: &Model) -> Vec<String> {
    let c = &m.constants;
    let mut out = vec![
        format!(
            "presence at fleet scale (H = {} s; docs/PRESENCE-BATCH.md), from the scale run at {} entities: \
             gateway {:.3} ms CPU per presence, broker {} ms per delivery (upper bounds)",
            m.heartbeat_s,
            c.measured_entities,
            c.gateway_cpu_ms_per_presence,
            c.broker_cpu_ms_per_delivery
                .map(|b| format!("{b:.3}"))
                .unwrap_or_else(|| "n/a".into())
        ),
        format!(
            "{:<16} {:>10} {:>12} {:>12} {:>12}   {:>10} {:>12} {:>12} {:>12}",
            "hosts × agents",
            "publish/s",
            "deliveries/s",
            "per gw msg/s",
            "gw cores",
            "batched:",
            "deliveries/s",
            "per gw msg/s",
            "gw cores"
        ),
    ];
    if let Some(floor) = round_floor_s(c, cores()) {
        out.push(format!(
            "one round of {} presences needs {:.2} s of broker CPU for its least delivery (the \
             gateway's own roster queue, TOP-3), i.e. ≥ {floor:.2} s on {} cores, whatever the \
             gateway — against H/5 = {:.2} s",
            c.measured_entities + 1,
            (c.measured_entities as f64 + 1.0) * c.broker_cpu_ms_per_delivery.unwrap_or_default() / 1e3,
            cores(),
            m.heartbeat_s / 5.0,
        ));
    }
    for r in &m.rows {
        let (a, b) = (&r.per_entity, &r.batched);
        out.push(format!(
            "{:<16} {:>10} {:>12} {:>12} {:>12.3}   {:>10} {:>12} {:>12} {:>12.4}",
            format!("{} × {}", r.hosts, r.agents_per_host),
            eng(a.publishes_per_s),
            eng(a.broker_deliveries_per_s),
            eng(a.per_gateway_msgs_per_s),
            a.per_gateway_cores,
            eng(b.publishes_per_s),
            eng(b.broker_deliveries_per_s),
            eng(b.per_gateway_msgs_per_s),
            b.per_gateway_cores,
        ));
        if let (Some(x), Some(y)) = (a.broker_cores, b.broker_cores) {
            out.push(format!("{:<16} broker cores: per-entity {x:.1}, batched {y:.2}", ""));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(entities: usize, gw_pct: f64, broker_pct: Option<f64>) -> ScalePoint {
        ScalePoint {
            entities,
            register_s: 1.0,
            register_per_s: 1.0,
            rss_kib: 0,
            peak_rss_kib: 0,
            threads: 0,
            fds: 0,
            gateway_cpu_pct: gw_pct,
            broker_cpu_pct: broker_pct,
            window_s: 15.0,
            heartbeat_rounds: 3,
            heartbeat_round_ms: 1.0,
            presences_per_round: entities as f64 + 1.0,
        }
    }

    #[test]
    fn the_issue_figure_is_exact_1000_hosts_of_50_agents_is_10_million_deliveries() {
        let c = constants(&[point(999, 20.0, Some(30.0))], HEARTBEAT_S).expect("constants");
        let per_entity = cost(&c, HEARTBEAT_S, 1_000, 50, false);
        assert_eq!(per_entity.publishes_per_s, 10_200.0);
        assert_eq!(per_entity.broker_deliveries_per_s, 10_200_000.0);
        assert_eq!(per_entity.per_gateway_msgs_per_s, 10_200.0);
        let batched = cost(&c, HEARTBEAT_S, 1_000, 50, true);
        assert_eq!(batched.publishes_per_s, 200.0);
        assert_eq!(batched.broker_deliveries_per_s, 200_000.0);
    }

    #[test]
    fn constants_come_from_the_largest_level_and_price_cpu_per_message() {
        // 999 entities + the gateway's entry = 1000 presences per 5 s = 200/s; 20 % of a core
        // = 200 core-ms/s → 1 ms per presence; broker 30 % over 400 deliveries/s → 0.75 ms.
        let c = constants(&[point(1, 90.0, Some(90.0)), point(999, 20.0, Some(30.0))], HEARTBEAT_S).expect("constants");
        assert_eq!(c.measured_entities, 999);
        assert!((c.gateway_cpu_ms_per_presence - 1.0).abs() < 1e-9, "{c:?}");
        assert!(
            (c.broker_cpu_ms_per_delivery.unwrap_or_default() - 0.75).abs() < 1e-9,
            "{c:?}"
        );
        let row = cost(&c, HEARTBEAT_S, 10, 9, false);
        // 10 hosts × 10 presences / 5 s = 20 msgs/s per gateway × 1 ms = 0.02 cores.
        assert!((row.per_gateway_cores - 0.02).abs() < 1e-9, "{row:?}");
    }

    #[test]
    fn no_cpu_sample_no_model() {
        assert_eq!(model(&[point(100, 0.0, None)], HEARTBEAT_S), None);
        assert_eq!(model(&[], HEARTBEAT_S), None);
    }

    #[test]
    fn the_table_has_a_row_per_fleet_size() {
        let m = model(&[point(999, 20.0, None)], HEARTBEAT_S).expect("model");
        assert_eq!(m.rows.len(), GRID.len());
        let text = lines(&m).join("\n");
        assert!(text.contains("1000 × 50") && text.contains("10.2 M"), "{text}");
        assert!(!text.contains("broker cores"), "no broker pid, no broker cores: {text}");
    }

    #[test]
    fn the_round_floor_is_one_delivery_per_presence_over_the_cores() {
        let c = Constants {
            measured_entities: 9_999,
            measured_presences_per_s: 2_000.0,
            gateway_cpu_ms_per_presence: 0.3,
            broker_cpu_ms_per_delivery: Some(0.3),
        };
        assert!((round_floor_s(&c, 2).unwrap_or_default() - 1.5).abs() < 1e-9);
        assert_eq!(
            round_floor_s(
                &Constants {
                    broker_cpu_ms_per_delivery: None,
                    ..c
                },
                2
            ),
            None
        );
    }
}
