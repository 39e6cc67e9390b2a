//! Prometheus metrics at `/metrics`, through the `prometheus-client` crate (OpenMetrics text).
//!
//! What an operator watches: messages published, consumed, rejected and dead-lettered by kind and
//! reason, injects by outcome, reconnects, held backlogs and the roster's size — and where a
//! message's time goes: `fleet_stage_seconds{stage}` is a histogram per step of the two paths
//! (see [`Stage`]), which `fleet-bench` reads to print its breakdown beside the raw-broker ratios.
//! Every metric is declared here, once, with its help text; the crate does the exposition format
//! (escaping, `_total` suffixes, histogram buckets).

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A metric's labels: (name, value) pairs.
pub type Labels = Vec<(&'static str, String)>;

/// The labels `pairs` name.
pub fn labels(pairs: &[(&'static str, &str)]) -> Labels {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

/// A step of a message's way through a gateway, timed into `fleet_stage_seconds{stage}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `bridge_send`/`bridge_reply` and the other sends: signing, publish and the broker's confirm.
    Publish,
    /// A `bridge_send`'s wait from its confirm to the worker gateway's INJECTED or FAILED.
    AwaitInjected,
    /// An inbox delivery's envelope checks (signature, sender on host, `to`, replay), grace included.
    Verify,
    /// A brief's way into the worker's pane: busy check, herdr `send_input`, the submit check.
    Inject,
    /// Publishing the INJECTED or FAILED that reports an inject, until confirmed.
    Report,
    /// A reply held for a main, from its delivery to its drain (`bridge_poll`/`bridge_wait`).
    Held,
}

impl Stage {
    pub const ALL: [Stage; 6] = [
        Stage::Publish,
        Stage::AwaitInjected,
        Stage::Verify,
        Stage::Inject,
        Stage::Report,
        Stage::Held,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Publish => "publish",
            Stage::AwaitInjected => "await_injected",
            Stage::Verify => "verify",
            Stage::Inject => "inject",
            Stage::Report => "report",
            Stage::Held => "held",
        }
    }
}

type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn stage_histogram() -> Histogram {
    // 50 µs … ~13 s, doubling.
    Histogram::new(exponential_buckets(0.000_05, 2.0, 19))
}

/// Every metric of the gateway.
pub struct Metrics {
    registry: Registry,
    /// `fleet_published_total{kind}`: messages confirmed by the broker.
    pub published: Family<Labels, Counter>,
    /// `fleet_publish_failed_total{kind,reason}`.
    pub publish_failed: Family<Labels, Counter>,
    /// `fleet_consumed_total{kind}`: inbox deliveries that passed verification.
    pub consumed: Family<Labels, Counter>,
    /// `fleet_rejected_total{reason}`: deliveries rejected to `bridge.dlx` (SIG-5).
    pub rejected: Family<Labels, Counter>,
    /// `fleet_injects_total{outcome}`: `injected` or the FAILED reason.
    pub injects: Family<Labels, Counter>,
    /// `fleet_drained_total{kind}`: messages a main drained.
    pub drained: Family<Labels, Counter>,
    /// `fleet_dead_letters_total{reason,reported}`: `bridge.dlq` messages handled.
    pub dead_letters: Family<Labels, Counter>,
    /// `fleet_expired_dropped_total{kind}`: expired ASK/ANSWER acked and dropped (ASK-3).
    pub expired_dropped: Family<Labels, Counter>,
    /// `fleet_migration_queues_total{outcome}`: legacy queues handled by the migration.
    pub migration_queues: Family<Labels, Counter>,
    pub reconnects: Counter,
    /// Held messages whose `expiresAt` passed undrained (rejected by the sweeper).
    pub swept: Counter,
    pub nudges: Counter,
    pub migration_moved: Counter,
    /// `fleet_held_messages{gid}`: replies held for each main (RPL-5).
    pub held_messages: Family<Labels, Gauge>,
    pub roster_entries: Gauge,
    pub last_inject_ms: Gauge,
    /// `fleet_stage_seconds{stage}`.
    pub stages: HistogramFamily,
    /// `fleet_gateway_trust_reload_errors_total{file}`: a trust file changed but could not be
    /// applied (MEM-1); `file` is its variable (`FLEET_PEERS_FILE`, …).
    pub trust_reload_errors: Family<Labels, Counter>,
    /// `fleet_gateway_cert_expiry_seconds`: seconds the own certificate has left (MEM-4); no
    /// series without a certificate or for one valid forever.
    pub cert_expiry_seconds: Family<Labels, Gauge>,
    /// `fleet_gateway_presence_waited_total{outcome}`: presences of a host with no key yet, held
    /// for its `_gateway` presence ([C-21] 7): `applied` once it came, `dropped` (no dead letter)
    /// when it did not come within H or the presence still did not verify.
    pub presence_waited: Family<Labels, Counter>,
    /// `fleet_gateway_repeated_rejections_total{reason}`: rejected presences whose WARN line was
    /// not written because the same host failed the same check within the minute (they are still
    /// dead-lettered and counted in `fleet_rejected_total`).
    pub repeated_rejections: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let m = Metrics {
            registry: Registry::default(),
            published: Family::default(),
            publish_failed: Family::default(),
            consumed: Family::default(),
            rejected: Family::default(),
            injects: Family::default(),
            drained: Family::default(),
            dead_letters: Family::default(),
            expired_dropped: Family::default(),
            migration_queues: Family::default(),
            reconnects: Counter::default(),
            swept: Counter::default(),
            nudges: Counter::default(),
            migration_moved: Counter::default(),
            held_messages: Family::default(),
            roster_entries: Gauge::default(),
            last_inject_ms: Gauge::default(),
            stages: Family::new_with_constructor(stage_histogram),
            trust_reload_errors: Family::default(),
            cert_expiry_seconds: Family::default(),
            presence_waited: Family::default(),
            repeated_rejections: Family::default(),
        };
        let mut r = m.registry;
        // Counters are registered without `_total`: the crate appends it.
        r.register(
            "fleet_published",
            "Messages published and confirmed, by kind",
            m.published.clone(),
        );
        r.register(
            "fleet_publish_failed",
            "Publishes that failed, by kind and reason",
            m.publish_failed.clone(),
        );
        r.register(
            "fleet_consumed",
            "Inbox deliveries that passed verification, by kind",
            m.consumed.clone(),
        );
        r.register(
            "fleet_rejected",
            "Deliveries rejected to bridge.dlx, by failed check",
            m.rejected.clone(),
        );
        r.register("fleet_injects", "Briefs into a pane, by outcome", m.injects.clone());
        r.register(
            "fleet_drained",
            "Messages drained by a main, by kind",
            m.drained.clone(),
        );
        r.register(
            "fleet_dead_letters",
            "bridge.dlq messages handled, by reason and whether FAILED was reported",
            m.dead_letters.clone(),
        );
        r.register(
            "fleet_expired_dropped",
            "Expired ASK/ANSWER acked and dropped, by kind",
            m.expired_dropped.clone(),
        );
        r.register(
            "fleet_migration_queues",
            "Legacy queues handled by the migration, by outcome",
            m.migration_queues.clone(),
        );
        r.register(
            "fleet_reconnects",
            "Broker connections lost and set up again",
            m.reconnects.clone(),
        );
        r.register("fleet_swept", "Held messages that expired undrained", m.swept.clone());
        r.register("fleet_nudges", "Nudges written into a main's pane", m.nudges.clone());
        r.register(
            "fleet_migration_moved",
            "Legacy replies moved into v2 inboxes",
            m.migration_moved.clone(),
        );
        r.register(
            "fleet_held_messages",
            "Replies held for a main",
            m.held_messages.clone(),
        );
        r.register(
            "fleet_roster_entries",
            "Entries in the roster view",
            m.roster_entries.clone(),
        );
        r.register(
            "fleet_last_inject_ms",
            "Duration of the last inject, in ms",
            m.last_inject_ms.clone(),
        );
        r.register(
            "fleet_stage_seconds",
            "Time a message spends in each stage of a path",
            m.stages.clone(),
        );
        r.register(
            "fleet_gateway_trust_reload_errors",
            "Trust file changes not applied because the file does not parse, by file variable (MEM-1)",
            m.trust_reload_errors.clone(),
        );
        r.register(
            "fleet_gateway_cert_expiry_seconds",
            "Seconds until this gateway's own host certificate expires (MEM-4)",
            m.cert_expiry_seconds.clone(),
        );
        r.register(
            "fleet_gateway_presence_waited",
            "Presences of a host with no key yet held for its _gateway presence, by outcome ([C-21] 7)",
            m.presence_waited.clone(),
        );
        r.register(
            "fleet_gateway_repeated_rejections",
            "Rejected presences not logged again: the same host failed the same check within the minute",
            m.repeated_rejections.clone(),
        );
        Metrics { registry: r, ..m }
    }

    /// Adds one to the counter of `family` with `pairs`.
    pub fn count(family: &Family<Labels, Counter>, pairs: &[(&'static str, &str)]) {
        family.get_or_create(&labels(pairs)).inc();
    }

    /// Sets the gauge of `family` with `pairs`.
    pub fn gauge(family: &Family<Labels, Gauge>, pairs: &[(&'static str, &str)], value: i64) {
        family.get_or_create(&labels(pairs)).set(value);
    }

    /// Records that a message spent `took` in `stage`.
    pub fn observe(&self, stage: Stage, took: Duration) {
        self.stages
            .get_or_create(&labels(&[("stage", stage.as_str())]))
            .observe(took.as_secs_f64());
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The content type of [`Metrics::render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_stage_histograms() {
        let m = Metrics::default();
        Metrics::count(&m.rejected, &[("reason", "signature")]);
        Metrics::count(&m.rejected, &[("reason", "signature")]);
        Metrics::gauge(&m.held_messages, &[("gid", "g")], 3);
        m.reconnects.inc();
        m.observe(Stage::Inject, Duration::from_millis(3));
        let text = m.render();
        assert!(text.contains("# TYPE fleet_rejected counter\n"), "{text}");
        assert!(
            text.contains("fleet_rejected_total{reason=\"signature\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("fleet_held_messages{gid=\"g\"} 3\n"), "{text}");
        assert!(text.contains("fleet_reconnects_total 1\n"), "{text}");
        assert!(
            text.contains("fleet_stage_seconds_count{stage=\"inject\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("fleet_stage_seconds_sum{stage=\"inject\"} 0.003\n"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Metrics::default();
        Metrics::count(&m.dead_letters, &[("reason", "a\"b\\c\nd"), ("reported", "no")]);
        let text = m.render();
        assert!(
            text.contains(r#"fleet_dead_letters_total{reason="a\"b\\c\nd",reported="no"} 1"#),
            "{text}"
        );
    }
}
