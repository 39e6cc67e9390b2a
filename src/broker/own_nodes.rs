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

/// How the nodes a process starts from then on run, when a benchmark asks for more than the
/// suite's throwaway nodes: see [`LargeFleet`].
static LARGE_FLEET: std::sync::OnceLock<LargeFleet> = std::sync::OnceLock::new();

/// Nodes that hold a fleet at full size (thousands of quorum queues), as an operator runs them,
/// rather than the suite's throwaway nodes. Set once per process by [`run_as_large_fleet`]; only
/// `fleet-bench --scale` does, the suite never.
///
/// Why: one tick per queue member per second and per-second samples of every queue are a load
/// and a memory no operator runs with, so figures measured under the suite's fast sampling would
/// not size a real cluster; and a node restarted under thousands of queues recovers a member of
/// every one before it answers, which takes minutes, not the suite's restart deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LargeFleet {
    /// Quorum tick (`quorum_tick_interval`), ms; RabbitMQ's default is 5,000.
    pub quorum_tick_ms: u32,
    /// Queue statistics (`collect_statistics_interval`), ms; RabbitMQ's default is 5,000.
    pub stats_interval_ms: u32,
    /// A node started again (after a kill or a whole-cluster stop) may take this long to answer,
    /// nominal (scaled like every boot deadline).
    pub restart_boot: std::time::Duration,
}

impl Default for LargeFleet {
    /// RabbitMQ's own intervals and default sample retention; ten minutes for a node to come back.
    fn default() -> Self {
        LargeFleet {
            quorum_tick_ms: 5_000,
            stats_interval_ms: 5_000,
            restart_boot: std::time::Duration::from_secs(600),
        }
    }
}

/// Nodes this process starts from now on (process and container providers, single or cluster)
/// run as `fleet` says, with the management's default sample retention. The first call wins; a
/// later one with other settings is refused (nodes already started would disagree with it).
pub fn run_as_large_fleet(fleet: LargeFleet) -> Result<(), String> {
    let set = LARGE_FLEET.get_or_init(|| fleet);
    if *set == fleet {
        Ok(())
    } else {
        Err(format!("this process already runs its nodes as {set:?}"))
    }
}

/// Whether [`run_as_large_fleet`] was called: the management keeps its default retention.
pub(crate) fn at_rabbitmq_defaults() -> bool {
    LARGE_FLEET.get().is_some()
}

/// The quorum tick the next node starts with, ms.
pub(crate) fn quorum_tick_ms() -> u32 {
    LARGE_FLEET.get().map_or(QUORUM_TICK_MS, |f| f.quorum_tick_ms)
}

/// The queue statistics interval the next node starts with, ms.
pub(crate) fn stats_interval_ms() -> u32 {
    LARGE_FLEET.get().map_or(STATS_INTERVAL_MS, |f| f.stats_interval_ms)
}

/// How long a restarted node may take to answer, nominal: the suite's `restart`, or a large
/// fleet's own.
pub(crate) fn restart_boot(restart: std::time::Duration) -> std::time::Duration {
    LARGE_FLEET.get().map_or(restart, |f| f.restart_boot.max(restart))
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
