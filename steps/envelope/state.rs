//! The probe's part of a scenario world ([`WireState`]): its taps, keys, fake entities and
//! crafted messages, and what other areas' steps record in it.
//!
//! Exists as a leaf below the world, which holds it ([`crate::world::FleetWorld::wire`]): kept
//! with the envelope steps, the world would import the steps that import the world.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::anyhow;
use fleet_conformance::envelope::Envelope;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::Tap;
use serde_json::Value;

/// The probe's part of a scenario world: its taps (on the scenario's probe connection,
/// [`FleetWorld::probe`](crate::world::FleetWorld::probe)), keys, fake entities and crafted
/// messages.
#[derive(Default)]
pub struct WireState {
    /// Copies of every dead letter (`bridge.dlx` is a fanout).
    pub(super) dlx: Option<Arc<Tap>>,
    /// Copies of everything published on `bridge.msg` (key `#`).
    pub(super) msgs: Option<Arc<Tap>>,
    /// Copies of everything published on `bridge.roster` (key `roster.#`).
    pub(super) roster: Option<Arc<Tap>>,
    /// Copies of SPAWN and STOP on `bridge.control` for the hosts running when the probe started
    /// (a direct exchange: one binding per host; hosts without a gateway stay unroutable).
    pub(super) control: Option<Arc<Tap>>,
    /// The untrusted key.
    pub(super) mallory: Option<HostKey>,
    /// Fake entities on host "probe": name → gid.
    pub(super) fakes: BTreeMap<String, String>,
    /// The last hostile message: its AMQP message_id (our marker) and where it went.
    pub(super) hostile: Option<Hostile>,
    /// Bodies and msgIds of every hostile message of the scenario.
    pub(super) hostile_texts: Vec<String>,
    pub(super) hostile_ids: Vec<String>,
    /// Bodies of valid messages the probe sent (allowed to be injected or held).
    pub(super) valid_texts: Vec<String>,
    /// The last valid message the probe sent.
    pub(super) last_valid: Option<Envelope>,
    /// Everything drained from mains by these steps.
    pub(super) drained: Vec<Value>,
    /// msgIds that were delivered once as valid messages before being replayed.
    pub(super) replayed: Vec<String>,
    /// msgIds the probe published twice in a row (each must be drained exactly once).
    pub(super) copies: Vec<String>,
    /// msgIds of the presence the probe published as host "probe" (batches, [C-17] bodies).
    pub(super) batches: Vec<String>,
    /// A position on the roster tap that presence-batch steps judge from.
    pub(super) batch_mark: Option<usize>,
}

impl WireState {
    /// The probe's `bridge.roster` tap, for steps of other areas that judge presence on the wire.
    pub fn roster_tap(&self) -> anyhow::Result<Arc<Tap>> {
        tap(&self.roster, "bridge.roster")
    }

    /// The probe's `bridge.dlx` tap (every dead letter of the scenario).
    pub fn dlx_tap(&self) -> anyhow::Result<Arc<Tap>> {
        tap(&self.dlx, "bridge.dlx")
    }

    /// The probe's `bridge.msg` tap.
    pub fn msgs_tap(&self) -> anyhow::Result<Arc<Tap>> {
        tap(&self.msgs, "bridge.msg")
    }

    /// Records a hostile message another area's step published (membership's credentials), so
    /// this catalogue's checks (dead-lettered, the check logged, never injected or held) judge it
    /// as they judge their own rows.
    pub fn record_hostile(&mut self, marker: &str, text: &str) {
        self.hostile_texts.push(text.to_string());
        self.hostile_ids.push(marker.to_string());
        self.hostile = Some(Hostile {
            marker: marker.to_string(),
        });
    }

    /// The `msgId` (or AMQP `message_id`) of the last hostile message published.
    pub fn last_hostile_marker(&self) -> Option<&str> {
        self.hostile.as_ref().map(|h| h.marker.as_str())
    }

    /// A text another area's step sent validly: it may be injected or held.
    pub fn record_valid_text(&mut self, text: &str) {
        self.valid_texts.push(text.to_string());
    }

    /// Names a fake entity another area's step announced, for the steps that look fakes up by name.
    pub fn name_fake(&mut self, name: &str, gid: &str) {
        self.fakes.insert(name.to_string(), gid.to_string());
    }
}

pub(super) struct Hostile {
    pub(super) marker: String,
}

pub(super) fn tap(t: &Option<Arc<Tap>>, what: &str) -> anyhow::Result<Arc<Tap>> {
    t.clone().ok_or_else(|| anyhow!("the probe has no {what} tap"))
}
