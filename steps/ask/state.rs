//! What the conversation steps keep between steps of a scenario: their wire taps.
//!
//! Exists as a leaf below the world, which holds it ([`crate::world::FleetWorld::talk`]): kept
//! with the steps, the world would import the steps that import the world.

use std::collections::BTreeMap;

use fleet_conformance::probe::Tap;

/// The wire taps of a conversation scenario (on the scenario's probe,
/// [`FleetWorld::probe`](crate::world::FleetWorld::probe)): every message routed to the tapped
/// entities.
#[derive(Default)]
pub struct TalkState {
    pub(super) taps: BTreeMap<String, Tap>,
}
