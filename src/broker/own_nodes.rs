//! What every node the suite starts itself shares, whether a local process or a container, alone
//! or in a cluster: the management sampling and quorum tick it boots with, and how its output is
//! cut down for a failure report.
//!
//! Exists as a leaf so the process and container providers and their clusters take these from
//! one place below all of them, rather than from `provider.rs`, which holds those providers.

/// Management statistics sampled every second instead of every 5 s. The management agent
/// collects at its smallest retention interval, whatever `collect_statistics_interval` says, so
/// without this a queue's depth shows up to 5 s late.
pub(crate) const RETENTION_POLICIES: &str = "[{global,[{605,1}]},{basic,[{605,1}]},{detailed,[{10,1}]}]";

/// A quorum queue reports its depths (ready, unacknowledged) to the management API once per
/// tick, 5 s by default: a depth that lasts 2 s may never show. Every second instead, like the
/// classic queues' statistics above.
pub(crate) const QUORUM_TICK_MS: u32 = 1000;

/// Queue statistics every 0.5 s (RabbitMQ's default: 5 s), for the same reason.
pub(crate) const STATS_INTERVAL_MS: u32 = 500;

/// Set by [`sample_at_rabbitmq_defaults`]: nodes started from then on sample at RabbitMQ's own
/// defaults.
static RABBITMQ_DEFAULTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Nodes this process starts from now on (process and container providers, single or cluster)
/// sample at RabbitMQ's own defaults — quorum tick and queue statistics every 5 s, the
/// management's default retention — instead of the suite's fast sampling above. For a benchmark
/// that holds thousands of quorum queues (`fleet-bench --scale`): one tick per queue member per
/// second and per-second samples of every queue are a load and a memory no operator runs with, so
/// figures measured under them would not size a real cluster. The suite never calls this.
pub fn sample_at_rabbitmq_defaults() {
    RABBITMQ_DEFAULTS.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// Whether [`sample_at_rabbitmq_defaults`] was called.
pub(crate) fn at_rabbitmq_defaults() -> bool {
    RABBITMQ_DEFAULTS.load(std::sync::atomic::Ordering::SeqCst)
}

/// The quorum tick the next node starts with, ms.
pub(crate) fn quorum_tick_ms() -> u32 {
    if at_rabbitmq_defaults() { 5_000 } else { QUORUM_TICK_MS }
}

/// The queue statistics interval the next node starts with, ms.
pub(crate) fn stats_interval_ms() -> u32 {
    if at_rabbitmq_defaults() {
        5_000
    } else {
        STATS_INTERVAL_MS
    }
}

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
