//! Start-to-ready of a gateway holding the scale run's entities (issue 46): stop it with a real
//! SIGTERM, start it again with the same configuration (identity, port, state directory, herdr),
//! and time process start → `/readyz` answering 200.
//!
//! Why: the footprint's RSS says what 10,000 entities cost a running gateway; what they cost a
//! restart (a deploy, a crash) is the other half. `/readyz` is the contract's readiness: the
//! topology declared, connected, every entity's inbox consumed. How entities come back is the
//! gateway's business: the reference gateway keeps its registry in `FLEET_STATE_DIR` and
//! re-attaches every inbox before it reports ready. A gateway that does not bring them back is
//! given them again through the local API (`POST /v1/entities`, the same gids, panes and parent),
//! and the figure becomes start-to-ready *plus* that re-registration — the report names which.
//!
//! A figure, not a goal: SPEC bounds no restart. Nothing here fails the bench: a gateway that is
//! not ready within [`READY_WAIT`] is reported as such.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};

use crate::rig::hosts::{Fleet, Member};
use crate::rig::stats::process_memory;

/// How long a SIGTERM'd gateway gets to exit by itself (its own graceful stop takes up to ~17 s).
const STOP_BOUND: Duration = Duration::from_secs(30);
/// How long the restarted gateway gets to report ready.
pub const READY_WAIT: Duration = Duration::from_secs(300);
/// How often `/readyz` is looked at: the figure's resolution. Each look builds the whole entity
/// list on the gateway, so not much more often.
const POLL: Duration = Duration::from_millis(50);

/// What the restart measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Restart {
    /// Entities the gateway held when it was stopped (its main and workers).
    pub entities: usize,
    /// SIGTERM → the process gone, ms.
    pub stop_ms: f64,
    /// Whether it exited by itself with status 0 within the stop bound.
    pub exited_cleanly: bool,
    /// Process start → `/readyz` 200, ms; `None` when it was not ready (see `not_ready`).
    pub start_to_ready_ms: Option<f64>,
    /// How often `/readyz` was looked at, ms.
    pub poll_ms: u64,
    /// Of `entities`, how many the gateway listed (`GET /v1/entities`) once ready: brought back
    /// by the gateway itself.
    pub restored: usize,
    /// The others, registered again through the local API once ready, and how long that took.
    pub re_registered: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub re_register_ms: Option<f64>,
    /// The gateway's RSS once ready (after any re-registration).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rss_kib: Option<u64>,
    /// Why the restart did not end with every entity back (shown, never fatal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<String>,
}

impl Restart {
    /// The figure: start → ready, plus the re-registration when entities had to be given again;
    /// `None` when it did not end with every entity back.
    pub fn figure_ms(&self) -> Option<f64> {
        if self.not_ready.is_some() {
            return None;
        }
        let ready = self.start_to_ready_ms?;
        match self.re_registered {
            0 => Some(ready),
            _ => Some(ready + self.re_register_ms?),
        }
    }

    /// What the figure is, in words.
    pub fn what(&self) -> &'static str {
        match (self.restored, self.re_registered) {
            (_, 0) => "process start → /readyz 200, entities restored by the gateway",
            (0, _) => "process start → /readyz 200 + every entity registered again through the API",
            _ => "process start → /readyz 200 + the entities it lost registered again through the API",
        }
    }
}

/// The members the gateway did not list once ready, in registration order (the main first).
pub fn missing<'a>(members: &'a [Member], listed: &BTreeSet<String>) -> Vec<&'a Member> {
    members.iter().filter(|m| !listed.contains(&m.gid)).collect()
}

/// Restarts `host` holding `members` (the first its main, the others that main's workers) and
/// times it; registrations it lost are made again, `concurrency` at once.
pub async fn run(fleet: &mut Fleet, host: &str, members: &[Member], concurrency: usize) -> Restart {
    let mut r = Restart {
        entities: members.len(),
        stop_ms: 0.0,
        exited_cleanly: false,
        start_to_ready_ms: None,
        poll_ms: POLL.as_millis() as u64,
        restored: 0,
        re_registered: 0,
        re_register_ms: None,
        rss_kib: None,
        not_ready: None,
    };
    if let Err(why) = restart(fleet, host, members, concurrency, &mut r).await {
        r.not_ready = Some(why);
    }
    r
}

async fn restart(
    fleet: &mut Fleet,
    host: &str,
    members: &[Member],
    concurrency: usize,
    r: &mut Restart,
) -> Result<(), String> {
    let gateway = &mut fleet
        .hosts
        .get_mut(host)
        .ok_or_else(|| format!("host {host} is not running"))?
        .gateway;
    let stopping = Instant::now();
    let status = gateway.terminate_status(STOP_BOUND).await;
    r.stop_ms = ms(stopping.elapsed());
    r.exited_cleanly = status.is_some_and(|s| s.success());
    let started = Instant::now();
    gateway
        .launch_unready()
        .map_err(|e| format!("starting the gateway again: {e}"))?;
    let readyz = format!("{}/readyz", gateway.base_url());
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| format!("an HTTP client: {e}"))?;
    loop {
        if let Some(status) = gateway.try_exit() {
            return Err(format!("the restarted gateway exited ({status}) before it was ready"));
        }
        let last = match http.get(&readyz).send().await {
            Ok(a) if a.status().is_success() => break,
            Ok(a) => format!("/readyz answered {}", a.status()),
            Err(e) => format!("/readyz unreachable: {e}"),
        };
        if started.elapsed() >= READY_WAIT {
            return Err(format!("not ready within {} s: {last}", READY_WAIT.as_secs()));
        }
        tokio::time::sleep(POLL).await;
    }
    r.start_to_ready_ms = Some(ms(started.elapsed()));
    let fleet = &*fleet;
    let gateway = &fleet.host(host).map_err(|e| format!("{e:#}"))?.gateway;
    let (code, list) = gateway
        .get("/v1/entities")
        .await
        .map_err(|e| format!("listing the entities after the restart: {e}"))?;
    if code != 200 {
        return Err(format!("GET /v1/entities answered {code} after the restart"));
    }
    let listed: BTreeSet<String> = list["entities"]
        .as_array()
        .map(|l| l.iter().filter_map(|e| e["gid"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    let lost = missing(members, &listed);
    r.restored = members.len() - lost.len();
    if !lost.is_empty() {
        let again = Instant::now();
        let main = members.first().map(|m| m.gid.as_str());
        let mut registered = futures_util::stream::iter(lost)
            .map(|m| {
                let (role, parent) = if Some(m.gid.as_str()) == main {
                    ("main", None)
                } else {
                    ("worker", main)
                };
                gateway.register(role, &m.pane, &[], parent, Some(&m.gid))
            })
            .buffered(concurrency.max(1));
        while let Some(done) = registered.next().await {
            done.map_err(|e| format!("registering a lost entity again: {e}"))?;
            r.re_registered += 1;
        }
        r.re_register_ms = Some(ms(again.elapsed()));
    }
    r.rss_kib = gateway.pid().and_then(process_memory).map(|(rss, _, _)| rss);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(gid: &str) -> Member {
        Member {
            host: "s".into(),
            gid: gid.into(),
            token: "t".into(),
            pane: format!("w1:{gid}"),
        }
    }

    fn restart(restored: usize, re_registered: usize) -> Restart {
        Restart {
            entities: restored + re_registered,
            stop_ms: 300.0,
            exited_cleanly: true,
            start_to_ready_ms: Some(2_000.0),
            poll_ms: 50,
            restored,
            re_registered,
            re_register_ms: (re_registered > 0).then_some(5_000.0),
            rss_kib: Some(100 * 1024),
            not_ready: None,
        }
    }

    #[test]
    fn the_lost_members_are_those_not_listed_in_their_order() {
        let members = [member("m"), member("w1"), member("w2")];
        let listed: BTreeSet<String> = ["w1".to_string()].into();
        let lost: Vec<&str> = missing(&members, &listed).iter().map(|m| m.gid.as_str()).collect();
        assert_eq!(lost, ["m", "w2"]);
        assert!(missing(&members, &["m", "w1", "w2"].map(String::from).into()).is_empty());
    }

    #[test]
    fn the_figure_adds_the_re_registration_only_when_there_was_one() {
        let kept = restart(10_001, 0);
        assert_eq!(kept.figure_ms(), Some(2_000.0));
        assert!(kept.what().contains("restored by the gateway"), "{}", kept.what());
        let lost = restart(0, 10_001);
        assert_eq!(lost.figure_ms(), Some(7_000.0));
        assert!(lost.what().contains("every entity registered again"), "{}", lost.what());
        assert!(restart(1, 10_000).what().contains("the entities it lost"));
        let mut never = restart(10_001, 0);
        never.start_to_ready_ms = None;
        never.not_ready = Some("not ready within 300 s".into());
        assert_eq!(never.figure_ms(), None);
    }

    #[test]
    fn a_restart_reads_back_from_json() {
        let r = restart(10_001, 0);
        let v = serde_json::to_value(&r).expect("serializes");
        assert!(v.get("re_register_ms").is_none() && v.get("not_ready").is_none(), "{v}");
        let back: Restart = serde_json::from_value(v).expect("reads back");
        assert_eq!(back, r);
    }
}
