//! The soak's last step: heal (every gateway ready, drain and watch until every ok operation
//! arrived and nothing new came for a quiet window), check the history, and write the summary to
//! `<reports>/<broker>/soak.json`, the gateways' logs beside it in `soak-logs/`.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use cucumber::then;
use fleet_conformance::timing::scaled;
use serde_json::json;

use crate::world::FleetWorld;

use super::check::{Arrivals, check, unknown_line};
use super::history::{Seen, record_poll};
use super::nemesis::Strike;
use super::nodes::cluster_profile;
use super::revoked::{Rejections, reclassify};

/// `<reports>/<broker>/soak.json`, where the runner writes `cucumber.json` (steps/main.rs).
fn summary_path(w: &FleetWorld) -> anyhow::Result<std::path::PathBuf> {
    let root = match std::env::var_os("FLEET_E2E_OUT") {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => crate::workspace_root().join("target").join("fleet-e2e"),
    };
    let label = w.suite()?.broker.spec().label().replace(':', "-");
    Ok(root.join(label).join("soak.json"))
}

#[then(
    expr = "after healing, the history of {string} with {string} and {string} shows nothing lost, unexpected or duplicated"
)]
async fn history(w: &mut FleetWorld, main: String, w1: String, w2: String) -> anyhow::Result<()> {
    for h in w.hosts.keys().cloned().collect::<Vec<_>>() {
        w.host_mut(&h)?.gateway.wait_ready(Duration::from_secs(60)).await?;
    }
    // Healing: drain the main and watch the panes until every ok operation arrived and nothing new
    // came for a quiet window (late injects of unknown briefs, redeliveries — a duplicate that
    // comes late must still be seen), or a deadline.
    let handle = w.mcp(&main).await?.handle();
    // (The inject bound is already stretched by the time knob, steps/hosts.rs.)
    let quiet = w.inject_bound() + scaled(Duration::from_secs(2));
    let deadline = Instant::now() + scaled(Duration::from_secs(90));
    let workers = [&w1, &w2];
    let mut last_seen = (usize::MAX, usize::MAX);
    let mut last_change = Instant::now();
    loop {
        let life = w.soak.main_life.load(Ordering::Relaxed);
        let v = handle.call("bridge_poll", json!({"max": 500})).await;
        if record_poll(&v, life, &mut w.soak.drains) {
            w.soak.polls_ok += 1;
        } else {
            w.soak.polls_unknown += 1;
        }
        let arrivals = Arrivals::read(w, &workers)?;
        let now_seen = (arrivals.total(), w.soak.drains.len());
        if now_seen != last_seen {
            last_seen = now_seen;
            last_change = Instant::now();
        }
        let drained: BTreeSet<&str> = w.soak.drains.iter().map(|d| d.text.as_str()).collect();
        let missing = w
            .soak
            .ops
            .iter()
            .filter(|o| o.seen == Seen::Ok)
            .filter(|o| match o.tool {
                "bridge_send" => !arrivals.injects.contains_key(&o.text),
                _ => !drained.contains(o.text.as_str()),
            })
            .count();
        if (missing == 0 && last_change.elapsed() >= quiet) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let arrivals = Arrivals::read(w, &workers)?;
    // The gateways' reconnect backoff caps at 10 s: a strike's effects may come that long after it.
    let after = scaled(Duration::from_secs(10));
    // What a revoked host could not complete: failed, on the evidence of the receivers' logs.
    let rejections = Rejections::read(w);
    let drained: BTreeSet<String> = w.soak.drains.iter().map(|d| d.text.clone()).collect();
    let revoked = reclassify(&mut w.soak.ops, &w.soak.events, &rejections, after, &drained);
    // `inject_bound` is already stretched: the step that set it scaled it.
    let verdict = check(&w.soak, &arrivals, w.inject_bound(), after);
    let mut summary = verdict.summary;
    summary["rejectedAsRevoked"] = revoked;
    summary["broker"] = json!(w.suite()?.broker.spec().label());
    summary["brokerVersion"] = json!(w.suite()?.broker.version());
    summary["scenarioDir"] = json!(w.dir.display().to_string());
    summary["config"]["injectBoundMs"] = json!(w.inject_bound().as_millis() as u64);
    let suite = w.suite()?;
    if suite.broker.is_cluster() {
        summary["cluster"] = json!({
            "nodes": suite.broker.node_count(),
            "gatewaysRunClusterProfile": cluster_profile(&suite),
            "linksOnePerNode": w.soak.links.len(),
            "wholeAtEnd": match &w.soak.whole_at_end {
                Some(Ok(())) => json!(true),
                Some(Err(e)) => json!(e),
                None => json!(null),
            },
        });
    }
    println!("{}", unknown_line(&summary["unknownByNemesis"]));
    let path = summary_path(w)?;
    let pretty = serde_json::to_string_pretty(&summary)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, format!("{pretty}\n")).with_context(|| format!("writing {}", path.display()))?;
    // The gateways' logs beside it (the scenario's dir goes when it passes): a soak's unknowns
    // and strikes are read against them.
    if let Some(dir) = path.parent().map(|d| d.join("soak-logs")) {
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        for (host, h) in &w.hosts {
            let to = dir.join(format!("gateway-{host}.log"));
            std::fs::copy(h.gateway.log_path(), &to)
                .with_context(|| format!("copying {} to {}", h.gateway.log_path().display(), to.display()))?;
        }
    }
    println!("{pretty}");
    if w.soak.fleet.is_some() {
        println!(
            "soak: on certificates; rejected as revoked (counted failed): {} (ok as the caller saw it {}, unknown {}); `revoked` rejections outside any revocation: {}",
            summary["rejectedAsRevoked"]["count"],
            summary["rejectedAsRevoked"]["fromOk"],
            summary["rejectedAsRevoked"]["fromUnknown"],
            summary["rejectedAsRevoked"]["revokedOutsideAnyRevocationCount"],
        );
    }
    println!("{} (summary: {})", verdict.line, path.display());
    anyhow::ensure!(
        verdict.violations == 0,
        "{}\nlost: {}\nduplicated: {}\nunexpected: {}\nfailed but delivered: {}\n(full summary: {}; gateway logs under {})",
        verdict.line,
        summary["lost"],
        summary["duplicated"],
        summary["unexpected"],
        summary["failedButDelivered"],
        path.display(),
        w.dir.display(),
    );
    if let Some(Err(e)) = &w.soak.whole_at_end {
        anyhow::bail!("the cluster was not whole again once the nemesis was over: {e}");
    }
    // A cluster run whose node strikes all missed says nothing about node loss (CLU-5).
    let node_strikes_on = w.soak.config.as_ref().is_some_and(|c| {
        c.cycle
            .iter()
            .any(|s| s.is_node() && !w.soak.off.contains_key(s.name()))
    });
    anyhow::ensure!(
        !node_strikes_on || w.soak.events.iter().any(|e| e.strike.is_node() && e.done),
        "node strikes were in the nemesis cycle and none took its node away and brought it back: {}",
        verdict.line
    );
    // Likewise a rotation that was never seen on the wire, or a revocation never seen to apply
    // and be undone, says nothing about SPEC §18 under load.
    for s in Strike::ALL.into_iter().filter(|s| s.is_trust()) {
        let on = w
            .soak
            .config
            .as_ref()
            .is_some_and(|c| c.cycle.contains(&s) && !w.soak.off.contains_key(s.name()));
        anyhow::ensure!(
            !on || w.soak.events.iter().any(|e| e.strike == s && e.done),
            "{} was in the nemesis cycle and no strike of it was seen through: {}",
            s.name(),
            verdict.line
        );
    }
    anyhow::ensure!(
        summary["provesSomething"] == true,
        "no brief or no reply was acknowledged, so the history proves nothing: {}",
        verdict.line
    );
    Ok(())
}
