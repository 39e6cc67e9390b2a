//! Prometheus metrics, rendered as text at `/metrics`.
//!
//! A small labelled-counter and gauge registry: operators get messages published, consumed and
//! rejected by kind and reason, injects, DLQ reports, reconnects and held backlog, without a
//! metrics stack in the dependency tree.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// Counters and gauges keyed by metric name and a rendered label set.
#[derive(Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<(String, String), u64>>,
    gauges: Mutex<BTreeMap<(String, String), i64>>,
}

fn labels(pairs: &[(&str, &str)]) -> String {
    if pairs.is_empty() {
        return String::new();
    }
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", inner.join(","))
}

impl Metrics {
    pub fn inc(&self, name: &str, pairs: &[(&str, &str)]) {
        if let Ok(mut m) = self.counters.lock() {
            *m.entry((name.to_string(), labels(pairs))).or_default() += 1;
        }
    }

    /// Adds `n` to a counter (sums, e.g. `fleet_inject_latency_ms_sum`).
    pub fn add(&self, name: &str, pairs: &[(&str, &str)], n: u64) {
        if let Ok(mut m) = self.counters.lock() {
            *m.entry((name.to_string(), labels(pairs))).or_default() += n;
        }
    }

    pub fn set(&self, name: &str, pairs: &[(&str, &str)], value: i64) {
        if let Ok(mut m) = self.gauges.lock() {
            m.insert((name.to_string(), labels(pairs)), value);
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut last = String::new();
        if let Ok(m) = self.counters.lock() {
            for ((name, l), v) in m.iter() {
                if *name != last {
                    out.push_str(&format!("# TYPE {name} counter\n"));
                    last = name.clone();
                }
                out.push_str(&format!("{name}{l} {v}\n"));
            }
        }
        if let Ok(m) = self.gauges.lock() {
            for ((name, l), v) in m.iter() {
                if *name != last {
                    out.push_str(&format!("# TYPE {name} gauge\n"));
                    last = name.clone();
                }
                out.push_str(&format!("{name}{l} {v}\n"));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::default();
        m.inc("fleet_rejected_total", &[("reason", "signature")]);
        m.inc("fleet_rejected_total", &[("reason", "signature")]);
        m.set("fleet_held_messages", &[("gid", "g")], 3);
        let text = m.render();
        assert!(text.contains("# TYPE fleet_rejected_total counter\n"));
        assert!(text.contains("fleet_rejected_total{reason=\"signature\"} 2\n"));
        assert!(text.contains("fleet_held_messages{gid=\"g\"} 3\n"));
    }
}
