//! Setting the stage for the envelope steps: the gateways' body limit, the probe's taps on the
//! wire (dead letters, `bridge.msg`, `bridge.roster`, `bridge.control`) and its untrusted key, and
//! fake entities announced on host "probe" with signed presence.

use std::sync::Arc;

use anyhow::Context as _;
use cucumber::given;
use fleet_conformance::envelope::new_uuid;
use fleet_conformance::keys::HostKey;

use crate::world::FleetWorld;

use super::{FAKE_TTL, key, until_listed};

#[given(expr = "the gateways' body limit is {int} bytes")]
async fn body_limit(w: &mut FleetWorld, bytes: u64) {
    w.gateway_env.insert("FLEET_MAX_BODY_BYTES".into(), bytes.to_string());
}

#[given("the probe watches the wire")]
async fn probe_watches(w: &mut FleetWorld) -> anyhow::Result<()> {
    let p = w.probe().await?;
    w.wire.dlx = Some(Arc::new(p.watch_dead_letters().await.context("tapping bridge.dlx")?));
    w.wire.msgs = Some(Arc::new(p.tap("bridge.msg", "#").await.context("tapping bridge.msg")?));
    w.wire.roster = Some(Arc::new(
        p.tap("bridge.roster", "roster.#")
            .await
            .context("tapping bridge.roster")?,
    ));
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    if !hosts.is_empty() {
        w.wire.control = Some(Arc::new(
            p.tap_keys("bridge.control", &hosts)
                .await
                .context("tapping bridge.control")?,
        ));
    }
    w.wire.mallory = Some(HostKey::generate("mallory"));
    Ok(())
}

#[given(expr = "the probe announces {string} on host {string}")]
async fn announces(w: &mut FleetWorld, name: String, host: String) -> anyhow::Result<()> {
    let gid = new_uuid();
    let k = key(w, &host)?;
    // The host's own `_gateway` presence first, as a real host sends it ([C-25]).
    w.probe().await?.announce_gateway(&k, FAKE_TTL).await?;
    w.probe().await?.announce(&k, &gid, "worker", FAKE_TTL).await?;
    until_listed(w, &gid, &host).await?;
    w.wire.fakes.insert(name, gid);
    Ok(())
}

/// A host the probe holds the key of, heard from by every gateway: its signed `_gateway` presence
/// ([C-25]: only then is a message claiming that host judged against its entities).
#[given(expr = "the probe announces the gateway of host {string}")]
async fn announces_gateway(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let k = key(w, &host)?;
    w.probe().await?.announce_gateway(&k, FAKE_TTL).await?;
    Ok(())
}
