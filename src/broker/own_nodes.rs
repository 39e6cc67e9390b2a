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
