//! The plan of a conversion (SPEC §16, CLU-7): which queues convert-inboxes converts and with
//! which arguments, what a run does from what it finds (the idempotent rerun), and what
//! identifies a message for the dedup. No broker I/O: [`super::moves`] carries the plan out.

use lapin::message::Delivery;
use lapin::types::FieldTable;

use super::ConvertError;
use crate::config::{QueueArgs, QueueType};
use crate::topology::{self, CONTROL_EXCHANGE, DLQ, DLX, MSG_EXCHANGE};

/// A queue the command converts, told by its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Inbox { gid: String },
    Control { host: String },
    Dlq,
}

impl Target {
    pub fn parse(queue: &str) -> Result<Target, ConvertError> {
        if let Some(gid) = topology::inbox_gid(queue) {
            return Ok(Target::Inbox { gid: gid.to_string() });
        }
        if queue == DLQ {
            return Ok(Target::Dlq);
        }
        if let Some(host) = queue.strip_prefix("control.")
            && crate::config::valid_host_id(host)
        {
            return Ok(Target::Control { host: host.to_string() });
        }
        Err(ConvertError::NotConvertible(queue.to_string()))
    }

    pub fn queue(&self) -> String {
        match self {
            Target::Inbox { gid } => topology::inbox_queue(gid),
            Target::Control { host } => topology::control_queue(host),
            Target::Dlq => DLQ.to_string(),
        }
    }

    /// The arguments the gateway declares this queue with, for `queue_type`.
    pub fn arguments(&self, args: &QueueArgs, queue_type: QueueType) -> FieldTable {
        let args = QueueArgs {
            queue_type,
            ..args.clone()
        };
        match self {
            Target::Inbox { .. } => topology::inbox_arguments(&args),
            Target::Control { .. } => topology::control_arguments(&args),
            Target::Dlq => topology::dlq_arguments(&args),
        }
    }

    /// The bindings the queue gets back after its conversion: those its name implies. An inbox's
    /// group bindings are the gateway's to restore (it binds them when it takes the inbox).
    pub fn bindings(&self) -> Vec<(&'static str, String)> {
        match self {
            Target::Inbox { gid } => topology::inbox_keys(gid, &[])
                .into_iter()
                .map(|k| (MSG_EXCHANGE, k))
                .collect(),
            Target::Control { host } => vec![(CONTROL_EXCHANGE, host.clone())],
            Target::Dlq => vec![(DLX, String::new())],
        }
    }
}

/// The fanout exchange that routes into the temporary queue (step 1).
pub fn temp_exchange(queue: &str) -> String {
    format!("{queue}.converting.temp")
}

/// The fanout exchange that routes back into the converted queue (step 2).
pub fn back_exchange(queue: &str) -> String {
    format!("{queue}.converting.back")
}

/// What the broker holds under a queue's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    Absent,
    /// Declared with this configuration's classic arguments.
    Classic,
    /// Declared with this configuration's quorum arguments.
    Quorum,
}

/// What a run does, from what it finds ([`plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Neither the queue nor its temporary queue exists.
    NoSuchQueue,
    /// Already quorum and no conversion unfinished: nothing to move (leftovers are cleaned up).
    Done,
    /// A classic queue, no conversion started: step 1 from the start.
    Start,
    /// A classic queue and its temporary queue: a kill during step 1; finish it.
    ResumeOut,
    /// No queue, but its temporary queue: a kill between the delete and the quorum declare.
    Recreate,
    /// A quorum queue and its temporary queue: a kill during step 2; finish it.
    ResumeBack,
}

/// Decides what to do from what exists (the whole of the rerun logic; see the module doc).
pub fn plan(queue: Found, temp_exists: bool) -> Plan {
    match (queue, temp_exists) {
        (Found::Absent, false) => Plan::NoSuchQueue,
        (Found::Quorum, false) => Plan::Done,
        (Found::Classic, false) => Plan::Start,
        (Found::Classic, true) => Plan::ResumeOut,
        (Found::Absent, true) => Plan::Recreate,
        (Found::Quorum, true) => Plan::ResumeBack,
    }
}

/// A message's identity for the dedup: its AMQP `message_id`, else its envelope `msgId` header.
pub fn message_key(d: &Delivery) -> Option<String> {
    if let Some(id) = d.properties.message_id()
        && !id.as_str().is_empty()
    {
        return Some(id.as_str().to_string());
    }
    d.properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("msgId"))
        .and_then(crate::envelope::header_string)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const GID: &str = "0b7e7c1e-6a0e-4c8e-9d4f-1c2b3a4d5e6f";

    fn args() -> QueueArgs {
        QueueArgs {
            queue_type: QueueType::Classic,
            inbox_max_length: 1000,
            inbox_ttl: Duration::from_millis(86_400_000),
            inbox_expires: Duration::from_millis(604_800_000),
            dlq_max_length: 10_000,
        }
    }

    #[test]
    fn every_state_a_kill_can_leave_has_a_plan() {
        assert_eq!(plan(Found::Absent, false), Plan::NoSuchQueue);
        assert_eq!(plan(Found::Classic, false), Plan::Start);
        assert_eq!(plan(Found::Classic, true), Plan::ResumeOut, "killed in step 1");
        assert_eq!(plan(Found::Absent, true), Plan::Recreate, "killed after the delete");
        assert_eq!(plan(Found::Quorum, true), Plan::ResumeBack, "killed in step 2");
        assert_eq!(plan(Found::Quorum, false), Plan::Done, "converted: a rerun is a no-op");
    }

    #[test]
    fn targets_are_told_by_name() {
        let inbox = topology::inbox_queue(GID);
        assert_eq!(Target::parse(&inbox).ok(), Some(Target::Inbox { gid: GID.into() }));
        assert_eq!(
            Target::parse("control.host-a").ok(),
            Some(Target::Control { host: "host-a".into() })
        );
        assert_eq!(Target::parse("bridge.dlq").ok(), Some(Target::Dlq));
        for bad in [
            "agent.w1:p2.inbox",
            "roster.host-a",
            "control.Host_A",
            "bridge.dlq.converting",
            &topology::converting_queue(&inbox),
        ] {
            assert!(
                matches!(Target::parse(bad), Err(ConvertError::NotConvertible(_))),
                "{bad}"
            );
        }
        assert_eq!(Target::parse(&inbox).map(|t| t.queue()).ok(), Some(inbox));
    }

    #[test]
    fn the_arguments_are_the_gateways_own() {
        let a = args();
        let t = Target::Inbox { gid: GID.into() };
        let quorum = QueueArgs {
            queue_type: QueueType::Quorum,
            ..a.clone()
        };
        assert_eq!(t.arguments(&a, QueueType::Quorum), topology::inbox_arguments(&quorum));
        assert_eq!(t.arguments(&quorum, QueueType::Classic), topology::inbox_arguments(&a));
        assert_eq!(
            Target::Dlq.arguments(&a, QueueType::Quorum),
            topology::dlq_arguments(&quorum)
        );
        assert_eq!(
            Target::Control { host: "h".into() }.arguments(&a, QueueType::Quorum),
            topology::control_arguments(&quorum)
        );
    }

    #[test]
    fn bindings_restored_are_those_the_name_implies() {
        assert_eq!(
            Target::Inbox { gid: GID.into() }.bindings(),
            vec![
                (MSG_EXCHANGE, GID.to_string()),
                (MSG_EXCHANGE, "broadcast.all".to_string())
            ]
        );
        assert_eq!(
            Target::Control { host: "h".into() }.bindings(),
            vec![(CONTROL_EXCHANGE, "h".to_string())]
        );
        assert_eq!(Target::Dlq.bindings(), vec![(DLX, String::new())]);
    }
}
