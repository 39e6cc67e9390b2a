//! What the failure steps keep between steps of a scenario: its dead-letter watch.
//!
//! Exists as a leaf below the world, which holds it ([`crate::world::FleetWorld::faults`]): kept
//! with the steps, the world would import the steps that import the world.

use fleet_conformance::probe::Tap;

/// The dead-letter watch of a scenario (a tap on the scenario's probe,
/// [`FleetWorld::probe`](crate::world::FleetWorld::probe)).
#[derive(Default)]
pub struct FaultState {
    pub(super) dead: Option<Tap>,
}
