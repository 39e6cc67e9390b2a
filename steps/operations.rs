//! Steps of gateway operations (issue 10): `/metrics` moving during a flow, graceful stop on
//! SIGTERM (pending injects fail as `stopped`, entities go `down`), the roster an operator reads.
//!
//! These judge what an operator sees from outside: the Prometheus text at `/metrics`, the
//! process's exit, `GET /v1/roster` of another host. Nothing is timed by sleeping: every check
//! polls against a scaled deadline.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{anyhow, ensure};
use cucumber::{given, then, when};
use fleet_conformance::timing::{scaled, wait_for};

use crate::world::FleetWorld;

/// Nominal, like every bound: stretched by the time knob (see the default in `world.rs`).
#[given(expr = "the gateways' heartbeat is {int} seconds")]
async fn heartbeat(w: &mut FleetWorld, secs: u64) {
    let h = scaled(std::time::Duration::from_secs(secs));
    w.gateway_env
        .insert("FLEET_HEARTBEAT_MS".into(), h.as_millis().to_string());
}

/// Parses Prometheus text: `series value` per line (`# …` lines skipped).
fn parse_metrics(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            Some((series.trim().to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

async fn read_metrics(w: &FleetWorld, host: &str) -> anyhow::Result<BTreeMap<String, f64>> {
    let (status, body) = w.host(host)?.gateway.get("/metrics").await?;
    ensure!(status == 200, "/metrics of {host} answered {status}: {body}");
    let text = body
        .as_str()
        .ok_or_else(|| anyhow!("/metrics of {host} is not text: {body}"))?;
    Ok(parse_metrics(text))
}

#[given(expr = "the metrics of {string} are noted")]
#[when(expr = "the metrics of {string} are noted")]
async fn note_metrics(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let m = read_metrics(w, &host).await?;
    w.notes.metrics.insert(host, m);
    Ok(())
}

#[then(regex = r#"^the metric (\S+) of "([^"]+)" rose by (exactly|at least) (\d+)$"#)]
async fn metric_rose(w: &mut FleetWorld, series: String, host: String, how: String, n: u64) -> anyhow::Result<()> {
    let before = w
        .notes
        .metrics
        .get(&host)
        .and_then(|m| m.get(&series))
        .copied()
        .unwrap_or(0.0);
    let exact = how == "exactly";
    let want = before + n as f64;
    // Counters of a flow's last step (e.g. the INJECTED publish) may land just after the step
    // that observed the flow's outcome: wait for them, then insist on the exact value.
    let after = wait_for(
        &format!("{series} of {host} to reach {want}"),
        Duration::from_secs(5),
        || {
            let r = read_metrics(w, &host);
            let series = series.clone();
            async move {
                let m = r.await.map_err(|e| e.to_string())?;
                let now = m.get(&series).copied().unwrap_or(0.0);
                if now >= want {
                    Ok(Some(now))
                } else {
                    Err(format!("{series} = {now}"))
                }
            }
        },
    )
    .await?;
    ensure!(
        !exact || after == want,
        "{series} of {host} went from {before} to {after}, expected +{n} exactly"
    );
    Ok(())
}

#[then(regex = r#"^the metric (\S+) of "([^"]+)" is at least (\d+)$"#)]
async fn metric_at_least(w: &mut FleetWorld, series: String, host: String, n: u64) -> anyhow::Result<()> {
    let m = read_metrics(w, &host).await?;
    let now = m.get(&series).copied().unwrap_or(0.0);
    ensure!(now >= n as f64, "{series} of {host} is {now}, expected at least {n}");
    Ok(())
}

#[when(expr = "the gateway on {string} is stopped with SIGTERM")]
async fn sigterm(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let gateway = &mut w.host_mut(&host)?.gateway;
    let log_at = gateway.log().len();
    let started = std::time::Instant::now();
    // Generous: a gateway that hangs is killed after this and the next step says so.
    let exited = gateway.terminate_status(scaled(Duration::from_secs(20))).await;
    w.notes
        .sigterm
        .insert(host, (exited, started.elapsed().as_millis() as u64, log_at));
    Ok(())
}

/// CONTRACT §1 (graceful stop, item 6): from the SIGTERM to its exit a gateway logs no line at
/// ERROR (CONTRACT §5's reading of a level). A stop that worked is no error, as a healthy start
/// is none: an operator (or a check) that reads ERROR as "something failed" is not misled.
#[then(expr = "the gateway on {string} logged no line at ERROR from its SIGTERM to its exit")]
async fn quiet_stop(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let (_, _, log_at) = w
        .notes
        .sigterm
        .get(&host)
        .copied()
        .ok_or_else(|| anyhow!("the gateway on {host} was not stopped with SIGTERM"))?;
    let log = w.host(&host)?.gateway.log();
    let after = log.get(log_at..).unwrap_or_default();
    let errors: Vec<&str> = after
        .lines()
        .filter(|l| fleet_conformance::contract::log_line_at(l, fleet_conformance::contract::LogLevel::Error))
        .collect();
    ensure!(
        errors.is_empty(),
        "the gateway on {host} logged {} line(s) at ERROR while it stopped (CONTRACT §1: a graceful stop logs \
         none):\n{}",
        errors.len(),
        errors.join("\n")
    );
    Ok(())
}

/// CONTRACT §1: after SIGTERM a gateway exits by itself, with status 0, within the grace.
#[then(expr = "the gateway on {string} exited by itself with status 0 within {int} seconds")]
async fn exited_by_itself(w: &mut FleetWorld, host: String, secs: u64) -> anyhow::Result<()> {
    let (status, ms, _) = w
        .notes
        .sigterm
        .get(&host)
        .copied()
        .ok_or_else(|| anyhow!("the gateway on {host} was not stopped with SIGTERM"))?;
    let log = w.host(&host)?.gateway.log_tail(15);
    let status = status.ok_or_else(|| anyhow!("the gateway on {host} ignored SIGTERM and was killed\n{log}"))?;
    let bound = scaled(Duration::from_secs(secs)).as_millis() as u64;
    ensure!(
        ms <= bound,
        "the gateway on {host} took {ms} ms to exit after SIGTERM (bound {bound} ms)\n{log}"
    );
    ensure!(
        status.success(),
        "the gateway on {host} exited with {status} after SIGTERM, CONTRACT §1 asks for 0\n{log}"
    );
    Ok(())
}

/// CONTRACT §1: a gateway stopped with SIGTERM keeps its entities' inboxes (durable, TOP-1), so a
/// restart resumes them; only an entity's own stop deletes its inbox (SPN-5, TOP-6).
#[then(expr = "the inbox of {string} is still on the broker")]
async fn inbox_kept(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let queue = fleet_conformance::names::inbox(&w.gid(&name)?);
    let vhost = w.vhost().await?;
    let q = w.suite()?.broker.management().queue(&vhost, &queue).await?;
    ensure!(q.is_some(), "the inbox {queue} of {name} is gone after SIGTERM");
    Ok(())
}

/// `GET /v1/roster` of `host`: the (host, gid) of every live entry.
async fn roster(w: &FleetWorld, host: &str) -> anyhow::Result<Vec<(String, String)>> {
    let (status, v) = w.host(host)?.gateway.get("/v1/roster").await?;
    ensure!(status == 200, "GET /v1/roster of {host} answered {status}: {v}");
    Ok(fleet_conformance::contract::roster_entries("GET /v1/roster", &v)?
        .iter()
        .map(|e| {
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (s("host"), s("gid"))
        })
        .collect())
}

#[then(regex = r#"^within (\d+) seconds the roster of "([^"]+)" no longer lists (the gateway of "[^"]+"|"[^"]+")$"#)]
async fn roster_drops(w: &mut FleetWorld, secs: u64, host: String, who: String) -> anyhow::Result<()> {
    let (want_host, want_gid) = match who.strip_prefix("the gateway of \"") {
        Some(h) => (Some(h.trim_end_matches('"').to_string()), "_gateway".to_string()),
        None => (None, w.gid(who.trim_matches('"'))?),
    };
    wait_for(
        &format!("the roster of {host} to drop {who}"),
        Duration::from_secs(secs),
        || {
            let r = roster(w, &host);
            let (want_host, want_gid) = (want_host.clone(), want_gid.clone());
            async move {
                let entries = r.await.map_err(|e| e.to_string())?;
                let listed = entries
                    .iter()
                    .any(|(h, g)| *g == want_gid && want_host.as_ref().is_none_or(|wh| wh == h));
                if listed {
                    Err(format!("still listed: {entries:?}"))
                } else {
                    Ok(Some(()))
                }
            }
        },
    )
    .await?;
    Ok(())
}
