//! The whole-site strike ([`Strike::SiteRestart`], [C-25]): a power cut takes every gateway and
//! the broker (every node of a cluster) down together, and the parts come back in a seeded random
//! order over up to [`SITE_SPREAD`] — so a receiver may be back long before a sender's host,
//! which is what [C-25]'s hold is for. What was confirmed before the cut must still arrive
//! exactly once (RPL-1) and nothing be injected twice (FWD-1), judged by the soak's history check.
//!
//! The broker's nodes come back together (the providers start a cluster's nodes at once, as
//! mnesia wants); each gateway at its own offset, started without waiting for it to be ready (a
//! gateway started before the broker is back is not ready until it is). The strike ends once
//! every gateway is ready again.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fleet_conformance::timing::scaled;

use crate::world::FleetWorld;

use super::nemesis::{Rng, SITE_SPREAD};

/// How long after the last part came back every gateway may take to be ready (nominal): the
/// broker's own start (a cluster's nodes find each other) and the gateways' reconnect backoff.
const READY_AFTER: Duration = Duration::from_secs(120);

/// Strikes the whole site: (target, done, detail) as the nemesis records them.
pub(super) async fn strike_site(
    w: &mut FleetWorld,
    rng: &mut Rng,
    vhost: &str,
    main_host: &str,
) -> anyhow::Result<(String, bool, String)> {
    let suite = w.suite()?;
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    for host in &hosts {
        w.host_mut(host)?.gateway.kill().await;
    }
    if hosts.iter().any(|h| h == main_host) {
        w.soak.main_life.fetch_add(1, Ordering::Relaxed);
    }
    if let Err(e) = suite.broker.halt(vhost).await {
        // The broker could not be stopped: the gateways come back at once, the strike undone.
        for host in &hosts {
            let _ = w.host_mut(host)?.gateway.launch().await;
        }
        return Ok(("site".into(), false, format!("the broker could not be stopped: {e}")));
    }
    // Seeded offsets: the broker (None) and each gateway, in the order they come back.
    let spread = scaled(SITE_SPREAD);
    let mut parts: Vec<(Duration, Option<String>)> = std::iter::once(None)
        .chain(hosts.iter().cloned().map(Some))
        .map(|part| (spread.mul_f64(rng.below(1001) as f64 / 1000.0), part))
        .collect();
    parts.sort();
    let t0 = Instant::now();
    let broker_at = parts
        .iter()
        .find(|(_, p)| p.is_none())
        .map(|(at, _)| *at)
        .unwrap_or_default();
    // The broker starts at its offset while the gateways start at theirs: a start that takes
    // long (a cluster's nodes finding each other) must not delay the parts after it.
    let resumer = suite.clone();
    let vhost_owned = vhost.to_string();
    let resuming = tokio::spawn(async move {
        tokio::time::sleep(broker_at).await;
        let r = resumer.broker.resume(&vhost_owned).await;
        (r, Instant::now())
    });
    let mut order = Vec::new();
    let mut failed = Vec::new();
    for (at, part) in &parts {
        let Some(host) = part else {
            order.push(format!("broker@{:.1}s", at.as_secs_f64()));
            continue;
        };
        tokio::time::sleep_until(tokio::time::Instant::from_std(t0 + *at)).await;
        if let Err(e) = w.host_mut(host)?.gateway.launch_unready() {
            failed.push(format!("{host}: not started: {e}"));
        }
        order.push(format!("{host}@{:.1}s", at.as_secs_f64()));
    }
    let (resumed, back_at) = resuming
        .await
        .map_err(|e| anyhow::anyhow!("the broker's start did not finish: {e}"))?;
    if let Err(e) = resumed {
        return Ok((
            "site".into(),
            false,
            format!("order {}; the broker did not come back: {e}", order.join(", ")),
        ));
    }
    let broker_took = back_at.duration_since(t0).saturating_sub(broker_at);
    for host in &hosts {
        if let Err(e) = w.host_mut(host)?.gateway.wait_ready(READY_AFTER).await {
            failed.push(format!("{host}: not ready: {e}"));
        }
    }
    let detail = format!(
        "order {} (the broker's start took {:.1}s); every gateway ready {:.1}s after the cut's end",
        order.join(", "),
        broker_took.as_secs_f64(),
        t0.elapsed().as_secs_f64()
    );
    if failed.is_empty() {
        Ok(("site".into(), true, detail))
    } else {
        Ok(("site".into(), false, format!("{detail}; {}", failed.join("; "))))
    }
}
