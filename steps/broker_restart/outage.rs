//! The broker to itself, down and back: the step that gives a scenario the restart broker alone,
//! stopping and starting it on its data, and what every gateway's `/readyz` said meanwhile and
//! after ([C-14], CON-3).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::timing::{scaled, wait_for};
use serde_json::json;

use crate::world::FleetWorld;

use super::durability::fetch_copy;
use super::vhost_of;

/// `w.calls` label of the readiness watch that runs while the broker is away.
const WATCH: &str = "broker-restart: readiness while the broker is away";

#[given("a broker the suite can restart, to this scenario alone")]
async fn restartable_broker(w: &mut FleetWorld) -> anyhow::Result<()> {
    ensure!(
        w.vhost.is_none(),
        "the scenario already uses the shared broker through vhost {:?}: this step must come first",
        w.vhost
    );
    let shared = w.suite()?;
    if let Some(why) = shared.broker.cannot_restart() {
        bail!(
            "not tested on {}: {why}. The runner leaves @broker-restart scenarios out on this provider; \
             this one was run anyway",
            shared.broker.spec().label()
        );
    }
    // From here on every step of this scenario (gateways, probes, the management API) uses the
    // restart broker: the world's suite is that broker's.
    let suite = shared.restart_suite().await?;
    w.suite = Some(suite.clone());
    if let Some(why) = suite.broker.cannot_restart() {
        bail!(
            "not tested on {}: {why}. The runner leaves @broker-restart scenarios out on this provider; \
             this one was run anyway",
            suite.broker.spec().label()
        );
    }
    let others = suite.broker.other_users("");
    let started = Instant::now();
    let vhost = suite
        .broker
        .create_exclusive_vhost()
        .await
        .map_err(|e| anyhow!("taking the broker for this scenario alone: {e}"))?;
    if !others.is_empty() {
        // Only @broker-restart scenarios use this broker: they take it one at a time.
        eprintln!(
            "broker restart scenario: {} other restart scenario(s) were using their broker when it started; \
             it waited {:.1?} for them to finish",
            others.len(),
            started.elapsed()
        );
    }
    w.vhost = Some(vhost);
    Ok(())
}

/// Starts polling every gateway's `/readyz` until the broker is back (or a bound passes), keeping
/// the statuses each answered; [`come_back`] collects them.
fn watch_readiness(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let targets: Vec<(String, String)> = w
        .hosts
        .iter()
        .map(|(name, h)| (name.clone(), format!("{}/readyz", h.gateway.base_url())))
        .collect();
    let task = tokio::spawn(async move {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(1)).build()?;
        let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let bound = Instant::now() + scaled(Duration::from_secs(300));
        let mut was_down = false;
        loop {
            let down = suite.broker.is_down();
            for (host, url) in &targets {
                let status = match http.get(url).send().await {
                    Ok(r) => r.status().as_u16().to_string(),
                    Err(e) => format!("unreachable ({e})"),
                };
                seen.entry(host.clone()).or_default().insert(status);
            }
            was_down |= down;
            if (was_down && !suite.broker.is_down()) || Instant::now() > bound {
                return Ok(json!(seen));
            }
            // The pace of the looks: what is judged is every status seen until the broker is back.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    w.results.remove(WATCH);
    w.calls.insert(WATCH.into(), task);
    Ok(())
}

/// Stops the broker (its data kept), after taking what the durable copy holds so far.
pub(super) async fn go_down(w: &mut FleetWorld) -> anyhow::Result<()> {
    if w.notes.restart.copy.is_some() {
        fetch_copy(w)
            .await
            .map_err(|e| anyhow!("reading the durable copy before the restart: {e:#}"))?;
    }
    let suite = w.suite()?;
    let vhost = vhost_of(w)?;
    watch_readiness(w)?;
    let started = Instant::now();
    suite
        .broker
        .halt(&vhost)
        .await
        .map_err(|e| anyhow!("stopping the broker: {e}"))?;
    eprintln!(
        "broker {} stopped in {:.1?}",
        suite.broker.spec().label(),
        started.elapsed()
    );
    w.notes.restart.restarts += 1;
    Ok(())
}

/// Starts the broker again on its data and collects what gateways answered meanwhile.
pub(super) async fn come_back(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let vhost = vhost_of(w)?;
    let started = Instant::now();
    w.notes.restart.resuming_at = Some(started);
    suite
        .broker
        .resume(&vhost)
        .await
        .map_err(|e| anyhow!("starting the broker again: {e}"))?;
    eprintln!(
        "broker {} back in {:.1?}",
        suite.broker.spec().label(),
        started.elapsed()
    );
    w.notes.restart.back_at_ms = Some(fleet_conformance::envelope::now_ms());
    w.call_result(WATCH, Duration::from_secs(10))
        .await
        .map_err(|e| anyhow!("the readiness watch: {e:#}"))?;
    Ok(())
}

#[when("the broker restarts")]
async fn broker_restarts(w: &mut FleetWorld) -> anyhow::Result<()> {
    go_down(w).await?;
    come_back(w).await
}

#[when("the broker goes down")]
async fn broker_down(w: &mut FleetWorld) -> anyhow::Result<()> {
    go_down(w).await
}

#[when("the broker comes back")]
async fn broker_back(w: &mut FleetWorld) -> anyhow::Result<()> {
    come_back(w).await
}

#[then("every gateway reported not ready while the broker was away")]
async fn reported_not_ready(w: &mut FleetWorld) -> anyhow::Result<()> {
    let seen = w
        .results
        .get(WATCH)
        .cloned()
        .ok_or_else(|| anyhow!("the broker has not been restarted in this scenario"))?;
    for host in w.hosts.keys() {
        let statuses: Vec<String> = serde_json::from_value(seen[host].clone()).unwrap_or_default();
        ensure!(
            statuses.iter().any(|s| s == "503"),
            "the gateway on {host} never answered /readyz 503 while the broker was away (it answered {statuses:?}): \
             [C-14] wants 503 while it has no broker connection"
        );
    }
    Ok(())
}

#[then(expr = "every gateway reports not ready within {int} seconds")]
async fn reports_not_ready(w: &mut FleetWorld, secs: u64) -> anyhow::Result<()> {
    for (host, h) in &w.hosts {
        wait_for(
            &format!("/readyz of {host} to answer 503"),
            Duration::from_secs(secs),
            || async {
                match h.gateway.get("/readyz").await {
                    Ok((503, _)) => Ok(Some(())),
                    Ok((s, v)) => Err(format!("{s}: {v}")),
                    Err(e) => Err(e.to_string()),
                }
            },
        )
        .await?;
    }
    Ok(())
}

#[then(expr = "every gateway is ready again within {int} seconds")]
async fn ready_again(w: &mut FleetWorld, secs: u64) -> anyhow::Result<()> {
    let started = Instant::now();
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    for host in hosts {
        // One deadline for all: they reconnect in parallel.
        let left = Duration::from_secs(secs)
            .saturating_sub(started.elapsed().div_f64(fleet_conformance::timing::time_scale()));
        w.host_mut(&host)?
            .gateway
            .wait_ready(left)
            .await
            .map_err(|e| anyhow!("the gateway on {host} is not ready again after the broker restart: {e}"))?;
    }
    eprintln!(
        "gateways ready again {:.1?} after the broker was back",
        started.elapsed()
    );
    Ok(())
}
