//! A worker's own broadcast (BRD-2): the probe publishes the BROADCAST a worker's gateway would,
//! so the broker hands the worker's inbox a copy that its gateway must drop.

use cucumber::when;
use fleet_conformance::envelope::Envelope;
use fleet_conformance::probe::Crafted;

use crate::world::FleetWorld;

use super::key;

/// A BROADCAST from worker `from` to `group`, signed by its own host's key (the probe holds every
/// trusted host's key): what a worker's gateway would publish. Its own inbox is bound to the key,
/// so the broker hands it a copy too, which its gateway must drop.
#[when(expr = "a BROADCAST {string} from {string} to group {string}, signed by its host, reaches the broker")]
async fn broadcast_from_worker(w: &mut FleetWorld, text: String, from: String, group: String) -> anyhow::Result<()> {
    let e = w.entity(&from)?;
    let (gid, host) = (e.gid.clone(), e.host.clone());
    let routing = format!("broadcast.{group}");
    let env = Envelope::new("BROADCAST", &gid, &routing, &host).signed_by(&key(w, &host)?, text.as_bytes());
    let mut msg = Crafted::from_envelope("bridge.msg", &routing, &env, text.as_bytes());
    msg.mandatory = false;
    w.probe().await?.publish(&msg).await?;
    Ok(())
}
