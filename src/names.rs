//! The broker names SPEC §1 gives, built in one place.
//!
//! Why: a step that builds `agent.<gid>.inbox.v2` by hand in its own file is one typo away from
//! judging a queue no gateway declares — and would then "pass" an absence check on it. Every step
//! and probe takes the names from here.

/// `bridge.msg`: point-to-point and broadcast messages.
pub const MSG_EXCHANGE: &str = "bridge.msg";
/// `bridge.roster`: presence.
pub const ROSTER_EXCHANGE: &str = "bridge.roster";
/// `bridge.control`: spawn and stop.
pub const CONTROL_EXCHANGE: &str = "bridge.control";
/// `bridge.dlq`: the dead-letter queue every gateway consumes.
pub const DLQ: &str = "bridge.dlq";

/// An entity's v2 inbox, `agent.<gid>.inbox.v2` (TOP-2).
pub fn inbox(gid: &str) -> String {
    format!("agent.{gid}.inbox.v2")
}

/// A host's control queue, `control.<host>` (TOP-3).
pub fn control_queue(host: &str) -> String {
    format!("control.{host}")
}

/// A host's roster queue, `roster.<host>` (TOP-3).
pub fn roster_queue(host: &str) -> String {
    format!("roster.{host}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_spec_section_1s() {
        assert_eq!(inbox("g1"), "agent.g1.inbox.v2");
        assert_eq!(control_queue("b"), "control.b");
        assert_eq!(roster_queue("b"), "roster.b");
    }
}
