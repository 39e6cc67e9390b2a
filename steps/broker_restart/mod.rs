//! Steps of broker restarts (features/broker_restart.feature): the broker node stopped and started
//! again on its data, with gateways that must come back on their own (CON-3) and lose or double
//! nothing — held replies (RPL-1), briefs in flight (FWD-1, FWD-5), presence (PRS-2), a migration
//! in the middle of a move (MIG-3) — because what they publish is persistent and what they declare
//! durable (SPEC §1, §2).
//!
//! A restart breaks every connection into the broker, so these scenarios run on a broker of their
//! own (`Suite::restart_suite`: a second node of the same spec, started on first use), and each
//! takes it to itself ([`Broker::create_exclusive_vhost`](fleet_conformance::broker::Broker)):
//! one at a time there, while the other scenarios share the first broker. The url: provider
//! cannot restart a broker; the runner leaves these scenarios out there (`@broker-restart`,
//! `BrokerSpec::cannot_run`) and says they were not tested, and the first step fails loudly should
//! one be run there anyway.
//!
//! State between steps lives in `w.notes.restart` ([`crate::world::RestartNotes`]) and `w.calls`
//! (background tasks, their results in `w.results`): the durable copy of the wire is a named queue
//! on the broker, read through the scenario's probe ([`FleetWorld::probe`]), which connects again
//! once a restart has broken its connection.
//!
//! The steps, by what they do around the restart: [`outage`] (the broker to itself, down and back,
//! and the gateways' readiness meanwhile), [`briefs`] (briefs in flight: timed sends and injects),
//! [`replies`] (held replies drained once), [`site`] (a whole site back in any order, [C-25]),
//! [`migration`] (a move interrupted by the restart) and
//! [`durability`] (what gateways publish and declare survives it: the durable copy of the wire,
//! persistent messages, durable queues).

mod briefs;
mod durability;
mod migration;
mod outage;
mod replies;
mod site;

pub(crate) use briefs::TIMED;
pub(crate) use replies::{describe, drain_until};

use anyhow::anyhow;

use crate::world::FleetWorld;

fn restarts(w: &FleetWorld) -> u64 {
    w.notes.restart.restarts
}

fn vhost_of(w: &FleetWorld) -> anyhow::Result<String> {
    w.vhost
        .clone()
        .ok_or_else(|| anyhow!("no vhost: the scenario must start with \"a broker the suite can restart\""))
}

/// The quoted words of a step's text, in order.
fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}
