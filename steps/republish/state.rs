//! What the [C-18] steps keep between steps of a scenario: the probe's copy of what is routed to
//! one entity.
//!
//! Exists as a leaf below the world, which holds it ([`crate::world::FleetWorld::republish`]):
//! kept with the steps, the world would import the steps that import the world.

use std::sync::Arc;

use fleet_conformance::probe::Tap;

/// The probe's copy of what `bridge.msg` routes to one entity's key: (the entity's name, the tap).
#[derive(Default)]
pub struct RepublishState {
    pub(super) routed: Option<(String, Arc<Tap>)>,
}
