//! `--fleet-trust`: the fleet run with certificates (SPEC §18) beside the peers-file run.
//!
//! Why a module: with a peers file every receiver holds every host's key from its start; with
//! certificates (MEM-2) a receiver learns a host's key from the certificate in that host's
//! `_gateway` presence, checks it against the fleet CA and the revocation list, and is expected to
//! cache that check (a heartbeat must not cost a certificate check each time). This module holds
//! what a certificate run adds to [`crate::fleet::sim_fleet`]'s run: the credentials
//! ([`Credentials`]: one fleet CA, a host certificate per host, all made by `ssh-keygen` through
//! [`crate::fleet::certs`]), the revocation timed after the window ([`time_revocation`]), and the
//! comparison of the two trust modes measured in the same invocation ([`compare`]).
//!
//! In a certificate run the simulated hosts are in no peers file: the real gateways' peers file
//! is `[peers]` alone, and every host — simulated or real — is trusted through its certificate.
//! What is timed after a revocation is what SPEC and CONTRACT judge, not a log line: the first
//! dead letter of the revoked host's messages from each real gateway's `roster.<host>` queue on
//! `bridge.dlx` with `x-death` reason `rejected` (SIG-5), and the host's `_gateway` entry gone from
//! each real gateway's `GET /v1/roster` (MEM-4, CONTRACT §12).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use futures_util::StreamExt as _;
use lapin::options::BasicPublishOptions;
use lapin::{Channel, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use crate::fleet::certs::{FleetCa, krl_spec, replace_file};
use crate::fleet::sim_hosts::{Round, listed};
use crate::fleet::sim_result::{FleetResult, FleetRun, Form, REAL, Revocation, Trust, off};
use crate::rig::hosts::Fleet;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::Captured;

/// A certificate run's credentials: the fleet CA, every host's certificate, the files the real
/// gateways read.
pub struct Credentials {
    dir: PathBuf,
    ca_file: PathBuf,
    krl_file: PathBuf,
    certs: Arc<BTreeMap<String, String>>,
    serials: BTreeMap<String, u64>,
}

impl Credentials {
    /// A new fleet CA in `dir` and a host certificate for every key (serials 1, 2, … in order),
    /// the CA's trust file and an empty revocation list.
    pub fn issue(dir: &Path, keys: &[HostKey]) -> anyhow::Result<Credentials> {
        let ca = FleetCa::create(dir)?;
        let mut certs = BTreeMap::new();
        let mut serials = BTreeMap::new();
        for (i, k) in keys.iter().enumerate() {
            let serial = i as u64 + 1;
            let cert = ca
                .sign_host(k, serial)
                .with_context(|| format!("certifying {}", k.host))?;
            certs.insert(k.host.clone(), cert);
            serials.insert(k.host.clone(), serial);
        }
        let ca_file = dir.join("trusted-ca.pub");
        replace_file(&ca_file, &format!("{}\n", ca.pub_line()))?;
        let krl_file = dir.join("revoked.krl");
        replace_file(&krl_file, &krl_spec(&[]))?;
        Ok(Credentials {
            dir: dir.to_path_buf(),
            ca_file,
            krl_file,
            certs: Arc::new(certs),
            serials,
        })
    }

    /// Every host's certificate line, by host.
    pub fn certs(&self) -> Arc<BTreeMap<String, String>> {
        Arc::clone(&self.certs)
    }

    pub fn serial(&self, host: &str) -> Option<u64> {
        self.serials.get(host).copied()
    }

    /// The variables of §18 a real gateway gets: the CA file, the revocation list (both shared
    /// by the fleet) and its own certificate file (written here).
    pub fn gateway_env(&self, host: &str) -> anyhow::Result<BTreeMap<String, String>> {
        let cert = self
            .certs
            .get(host)
            .ok_or_else(|| anyhow!("no certificate for {host}"))?;
        let file = self.dir.join(format!("{host}-cert.pub"));
        replace_file(&file, &format!("{cert}\n"))?;
        let path = |p: &Path| p.display().to_string();
        Ok(BTreeMap::from([
            ("FLEET_TRUST_CA_FILE".to_string(), path(&self.ca_file)),
            ("FLEET_REVOKED_FILE".to_string(), path(&self.krl_file)),
            ("FLEET_HOST_CERT_FILE".to_string(), path(&file)),
        ]))
    }

    /// Revokes `host`'s certificate by its serial: the revocation list rewritten beside and
    /// renamed over (CONTRACT §12). Returns the serial.
    pub fn revoke(&self, host: &str) -> anyhow::Result<u64> {
        let serial = self.serial(host).ok_or_else(|| anyhow!("no certificate for {host}"))?;
        replace_file(&self.krl_file, &krl_spec(&[serial]))?;
        Ok(serial)
    }
}

/// How often the revoked host sends a presence after the rename: the time to the first rejection
/// is then the fleet's own (to this resolution), not the phase of the host's next heartbeat in H.
/// Each one fans out to every roster queue (N deliveries), so not more often.
pub const PROBE_EVERY: Duration = Duration::from_millis(100);
/// MEM-4's bound: a revoked certificate stops verifying within 2 s of the file change.
pub const MEM4_BOUND_MS: f64 = 2_000.0;

/// Which real gateway's roster queue a dead letter came from, if it is a message rejected there
/// (SIG-5) and `host`'s (any host's with `None`).
fn rejected_by(d: &Captured, host: Option<&str>) -> Option<usize> {
    if host.is_some_and(|h| d.header_str("host").as_deref() != Some(h))
        || d.death_reason().as_deref() != Some("rejected")
    {
        return None;
    }
    let queue = d.death_queue()?;
    REAL.iter().position(|g| queue == format!("roster.{g}"))
}

fn captured(d: &lapin::message::Delivery) -> Captured {
    Captured {
        exchange: d.exchange.to_string(),
        routing_key: d.routing_key.to_string(),
        properties: d.properties.clone(),
        body: d.data.clone(),
    }
}

/// Counts the presence messages each real gateway rejects (dead letters from its `roster.<host>`
/// queue, `x-death` reason `rejected`), whoever sent them: a run's window must have none, or the
/// gateway's CPU would be that of refusing, not of trusting.
pub struct Rejections {
    conn: Connection,
    counts: Arc<[AtomicU64; 2]>,
    reading: tokio::task::JoinHandle<()>,
}

impl Rejections {
    pub async fn start(amqp_url: &str) -> anyhow::Result<Rejections> {
        let conn = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
        let ch = conn.create_channel().await?;
        let mut dead = crate::fleet::scale::tap(&ch, "bridge.dlx", "", "bench-rejections").await?;
        let counts: Arc<[AtomicU64; 2]> = Arc::default();
        let c = Arc::clone(&counts);
        let reading = tokio::spawn(async move {
            while let Some(Ok(d)) = dead.next().await {
                if let Some(i) = rejected_by(&captured(&d), None) {
                    c[i].fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(Rejections { conn, counts, reading })
    }

    /// Rejections by real gateway a + b so far.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub async fn stop(self) {
        self.reading.abort();
        let _ = self.conn.close(200, "done".into()).await;
    }
}

/// Revokes `key.host`'s certificate and times, on each real gateway, its first message rejected
/// and its roster entry dropped. From the rename on the host sends a presence every
/// [`PROBE_EVERY`] (`round` makes it); the bench waits up to `wait`. The dead letters are read, and the
/// probes sent, on a connection of its own (`amqp_url`), not one the simulated hosts share.
pub async fn time_revocation(
    fleet: &Fleet,
    creds: &Credentials,
    amqp_url: &str,
    key: &HostKey,
    round: impl Fn() -> Round + Send + 'static,
    wait: Duration,
) -> anyhow::Result<Revocation> {
    let host = key.host.clone();
    let conn = Connection::connect(amqp_url, ConnectionProperties::default()).await?;
    let tap_ch = conn.create_channel().await?;
    let mut dead = crate::fleet::scale::tap(&tap_ch, "bridge.dlx", "", "bench-revocation-dlx").await?;
    let pub_ch = conn.create_channel().await?;
    let mut listed_before = true;
    for g in REAL {
        listed_before &= listed(fleet, g, &host).await;
    }
    let rejected: Arc<Mutex<[Option<f64>; 2]>> = Arc::default();
    let t0 = Instant::now();
    let serial = creds.revoke(&host)?;
    let seen = Arc::clone(&rejected);
    let h = host.clone();
    let reading = tokio::spawn(async move {
        while let Some(Ok(d)) = dead.next().await {
            if let Some(i) = rejected_by(&captured(&d), Some(&h)) {
                let ms = t0.elapsed().as_secs_f64() * 1e3;
                seen.lock().await[i].get_or_insert(ms);
            }
        }
    });
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let publishing = tokio::spawn(probe_heartbeats(
        pub_ch.clone(),
        round,
        Arc::clone(&stop),
        Arc::clone(&sent),
    ));
    let mut dropped: [Option<f64>; 2] = [None, None];
    let deadline = t0 + wait;
    loop {
        for (i, g) in REAL.iter().enumerate() {
            if dropped[i].is_none() && !listed(fleet, g, &host).await {
                dropped[i] = Some(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
        let all_rejected = rejected.lock().await.iter().all(Option::is_some);
        if (all_rejected && dropped.iter().all(Option::is_some)) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let _ = publishing.await;
    reading.abort();
    let _ = tap_ch.close(200, "done".into()).await;
    let _ = pub_ch.close(200, "done".into()).await;
    let _ = conn.close(200, "done".into()).await;
    let [rejected_a_ms, rejected_b_ms] = *rejected.lock().await;
    Ok(Revocation {
        host,
        serial,
        rejected_a_ms,
        rejected_b_ms,
        dropped_a_ms: dropped[0],
        dropped_b_ms: dropped[1],
        waited_ms: t0.elapsed().as_secs_f64() * 1e3,
        sent: sent.load(Ordering::Relaxed),
        listed_before,
    })
}

/// `round()`'s messages every [`PROBE_EVERY`] on `ch` until `stop`.
async fn probe_heartbeats(ch: Channel, round: impl Fn() -> Round, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let mut tick = tokio::time::interval(PROBE_EVERY);
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        for (to, body, props) in round() {
            let published = ch
                .basic_publish(
                    "bridge.roster".into(),
                    to.as_str().into(),
                    BasicPublishOptions::default(),
                    &body,
                    props,
                )
                .await;
            if published.is_err() {
                return;
            }
            sent.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The two trust modes of one (form, H, N, E), measured in the same invocation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrustComparison {
    pub form: Form,
    pub heartbeat_ms: u64,
    pub hosts: usize,
    pub entities: usize,
    /// Runs of each mode that measured both gateways' CPU, kept up and rejected nothing in
    /// their window: the means are theirs.
    pub peers_runs: usize,
    pub certs_runs: usize,
    /// Runs left out of the means (fell behind, off the model, or rejected in the window).
    #[serde(default)]
    pub left_out: usize,
    /// Mean CPU of real gateway a, b over those runs, % of one core.
    pub peers_cpu_pct: [f64; 2],
    pub certs_cpu_pct: [f64; 2],
    /// certs ÷ peers, per gateway.
    pub ratio: [f64; 2],
    /// Mean share of the machine's cores busy during each mode's windows (others' work included).
    pub peers_machine_busy: f64,
    pub certs_machine_busy: f64,
    /// Every gateway's ratio ≤ 1 + [`CPU_TOLERANCE`].
    pub within_tolerance: bool,
    /// Every gateway ≤ [`CPU_CEILING_PCT`] with certificates.
    pub under_ceiling: bool,
    /// Rename → rejected on every real gateway, worst over the certificate runs (`None` when
    /// some run never saw it rejected everywhere, or none was timed).
    pub revocation_to_reject_worst_ms: Option<f64>,
    /// Presence messages the real gateways rejected during the windows, peers runs and
    /// certificate runs (`None` where not counted): both should be 0.
    #[serde(default)]
    pub rejected_in_windows: [Option<u64>; 2],
}

/// The certificate run's CPU may exceed the peers-file run's by this share, per gateway.
pub const CPU_TOLERANCE: f64 = 0.10;
/// And stay at most this, % of one core.
pub const CPU_CEILING_PCT: f64 = 5.0;

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() {
        f64::NAN
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// The runs that measured the cost of trusting in a steady fleet: a run that fell behind, whose
/// deliveries were off the model by more than 25 % (a backlog caught up in the window, or a
/// starved broker), or whose gateways rejected presence in its window measured the machine or a
/// refusal, and is left out.
fn sound<'a>(runs: &[&'a FleetRun]) -> Vec<&'a FleetRun> {
    runs.iter()
        .copied()
        .filter(|x| x.keeps_up && x.measured.real_rejected.unwrap_or(0) == 0)
        .filter(|x| !off(x.measured.deliveries_per_s, x.model.deliveries_per_s))
        .collect()
}

/// Both trust modes side by side, for every (form, H, N, E) that ran in both.
pub fn compare(r: &FleetResult) -> Vec<TrustComparison> {
    let mut keys: Vec<(Form, u64, usize, usize)> = r
        .runs
        .iter()
        .map(|x| (x.form, x.heartbeat_ms, x.hosts, x.entities))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut out = Vec::new();
    for (form, heartbeat_ms, hosts, entities) in keys {
        let of = |t: Trust| -> Vec<&FleetRun> {
            r.runs
                .iter()
                .filter(|x| {
                    (x.form, x.heartbeat_ms, x.hosts, x.entities, x.trust) == (form, heartbeat_ms, hosts, entities, t)
                })
                .filter(|x| x.measured.gateway_a_cpu_pct.is_some() && x.measured.gateway_b_cpu_pct.is_some())
                .collect()
        };
        let (all_peers, all_certs) = (of(Trust::Peers), of(Trust::Certs));
        let (peers, certs) = (sound(&all_peers), sound(&all_certs));
        let left_out = all_peers.len() + all_certs.len() - peers.len() - certs.len();
        let revocations: Vec<Option<f64>> = all_certs
            .iter()
            .filter_map(|x| x.measured.revocation.as_ref())
            .map(Revocation::rejected_everywhere_ms)
            .collect();
        if peers.is_empty() || certs.is_empty() {
            continue;
        }
        let cpu = |runs: &[&FleetRun]| {
            [
                mean(
                    &runs
                        .iter()
                        .filter_map(|x| x.measured.gateway_a_cpu_pct)
                        .collect::<Vec<_>>(),
                ),
                mean(
                    &runs
                        .iter()
                        .filter_map(|x| x.measured.gateway_b_cpu_pct)
                        .collect::<Vec<_>>(),
                ),
            ]
        };
        let busy = |runs: &[&FleetRun]| mean(&runs.iter().map(|x| x.measured.machine_busy).collect::<Vec<_>>());
        let rejected = |runs: &[&FleetRun]| runs.iter().map(|x| x.measured.real_rejected).sum::<Option<u64>>();
        let (p, c) = (cpu(&peers), cpu(&certs));
        let ratio = [c[0] / p[0], c[1] / p[1]];
        let worst = if revocations.is_empty() || revocations.iter().any(Option::is_none) {
            None
        } else {
            revocations.into_iter().flatten().reduce(f64::max)
        };
        out.push(TrustComparison {
            form,
            heartbeat_ms,
            hosts,
            entities,
            left_out,
            peers_runs: peers.len(),
            certs_runs: certs.len(),
            peers_cpu_pct: p,
            certs_cpu_pct: c,
            ratio,
            peers_machine_busy: busy(&peers),
            certs_machine_busy: busy(&certs),
            within_tolerance: ratio.iter().all(|x| *x <= 1.0 + CPU_TOLERANCE),
            under_ceiling: c.iter().all(|x| *x <= CPU_CEILING_PCT),
            revocation_to_reject_worst_ms: worst,
            rejected_in_windows: [rejected(&peers), rejected(&certs)],
        });
    }
    out
}

/// The comparison and every revocation as text lines.
pub fn lines(r: &FleetResult) -> Vec<String> {
    let cmp = compare(r);
    let revoked: Vec<&FleetRun> = r.runs.iter().filter(|x| x.measured.revocation.is_some()).collect();
    if cmp.is_empty() && revoked.is_empty() {
        return Vec::new();
    }
    let ms = |v: Option<f64>| v.map_or("never".to_string(), |x| format!("{x:.0} ms"));
    let mut out =
        vec!["  with certificates (SPEC §18) beside the peers file, same invocation, runs interleaved:".to_string()];
    for c in &cmp {
        out.push(format!(
            "  {} N = {} × {}, H = {} ms: gateway a/b CPU peers {:.2}/{:.2} % (runs: {}, machine {:.0} % busy) · certs {:.2}/{:.2} % (runs: {}, machine {:.0} % busy) · certs÷peers {:.2}/{:.2}× — within {:.0} %: {} · ≤ {CPU_CEILING_PCT} % of a core: {} · rejected in the windows peers/certs: {}/{}{}",
            c.form.label(),
            c.hosts,
            c.entities,
            c.heartbeat_ms,
            c.peers_cpu_pct[0],
            c.peers_cpu_pct[1],
            c.peers_runs,
            100.0 * c.peers_machine_busy,
            c.certs_cpu_pct[0],
            c.certs_cpu_pct[1],
            c.certs_runs,
            100.0 * c.certs_machine_busy,
            c.ratio[0],
            c.ratio[1],
            100.0 * CPU_TOLERANCE,
            if c.within_tolerance { "yes" } else { "NO" },
            if c.under_ceiling { "yes" } else { "NO" },
            c.rejected_in_windows[0].map_or("-".into(), |n| n.to_string()),
            c.rejected_in_windows[1].map_or("-".into(), |n| n.to_string()),
            match c.left_out {
                0 => String::new(),
                n => format!(" · {n} runs left out (fell behind, off the model by > 25 %, or rejected in the window)"),
            },
        ));
    }
    for x in revoked {
        let Some(v) = &x.measured.revocation else { continue };
        out.push(format!(
            "  {} N = {}: revoked {} (serial {}) → first message rejected (dead letter, x-death rejected) on a {} / b {} (everywhere {}; MEM-4 ≤ {MEM4_BOUND_MS:.0} ms: {}) · dropped from the roster a {} / b {} · {} probes sent{}",
            x.form.label(),
            x.hosts,
            v.host,
            v.serial,
            ms(v.rejected_a_ms),
            ms(v.rejected_b_ms),
            ms(v.rejected_everywhere_ms()),
            match v.rejected_everywhere_ms() {
                Some(t) if t <= MEM4_BOUND_MS => "yes",
                _ => "NO",
            },
            ms(v.dropped_a_ms),
            ms(v.dropped_b_ms),
            v.sent,
            if v.listed_before { "" } else { " (the host was not listed everywhere before)" },
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::sim_result::{Measured, Predicted};

    fn run(trust: Trust, a: f64, b: f64, rev: Option<Revocation>) -> FleetRun {
        let m = Measured {
            gateway_a_cpu_pct: Some(a),
            gateway_b_cpu_pct: Some(b),
            machine_busy: 0.5,
            revocation: rev,
            ..Measured::default()
        };
        let mut r = FleetRun::judge(Form::Batched, 5_000, 200, 50, m, Predicted::default());
        r.trust = trust;
        r.keeps_up = true;
        r
    }

    fn result(runs: Vec<FleetRun>) -> FleetResult {
        FleetResult {
            entities: 50,
            verifying_hosts: None,
            window_s: 20.0,
            deliveries_counted_as: String::new(),
            runs,
        }
    }

    #[test]
    fn certificates_are_judged_against_the_peers_runs_of_the_same_size() {
        let rev = |a: Option<f64>, b: Option<f64>| Revocation {
            host: "sim-0".into(),
            serial: 3,
            rejected_a_ms: a,
            rejected_b_ms: b,
            ..Revocation::default()
        };
        let r = result(vec![
            run(Trust::Peers, 4.0, 4.0, None),
            run(Trust::Certs, 4.2, 4.3, Some(rev(Some(120.0), Some(180.0)))),
            run(Trust::Certs, 4.4, 4.3, Some(rev(Some(300.0), Some(90.0)))),
            run(Trust::Peers, 4.0, 4.0, None),
        ]);
        let c = compare(&r);
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!((c.peers_runs, c.certs_runs), (2, 2));
        assert!((c.ratio[0] - 1.075).abs() < 1e-9, "{:?}", c.ratio);
        assert!(c.within_tolerance && c.under_ceiling);
        assert_eq!(c.revocation_to_reject_worst_ms, Some(300.0));
        let text = lines(&r).join("\n");
        assert!(
            text.contains("within 10 %: yes") && text.contains("everywhere 300 ms"),
            "{text}"
        );

        // 12 % more on gateway b, and one revocation never rejected on b.
        let r = result(vec![
            run(Trust::Peers, 4.0, 4.0, None),
            run(Trust::Certs, 4.0, 4.48, Some(rev(Some(100.0), None))),
        ]);
        let c = &compare(&r)[0];
        assert!(!c.within_tolerance && c.under_ceiling);
        assert_eq!(c.revocation_to_reject_worst_ms, None);
        assert!(lines(&r).join("\n").contains("within 10 %: NO"));
        // Above the ceiling though within the tolerance.
        let r = result(vec![
            run(Trust::Peers, 5.0, 5.0, None),
            run(Trust::Certs, 5.2, 5.1, None),
        ]);
        let c = &compare(&r)[0];
        assert!(c.within_tolerance && !c.under_ceiling);
        // A run that fell behind or rejected in its window is left out of the means.
        let mut behind = run(Trust::Certs, 2.0, 2.0, None);
        behind.keeps_up = false;
        let mut refusing = run(Trust::Certs, 2.0, 2.0, None);
        refusing.measured.real_rejected = Some(17);
        let mut catching_up = run(Trust::Certs, 3.0, 3.0, None);
        (
            catching_up.model.deliveries_per_s,
            catching_up.measured.deliveries_per_s,
        ) = (8_000.0, 17_000.0);
        let r = result(vec![
            run(Trust::Peers, 4.0, 4.0, None),
            behind,
            refusing,
            catching_up,
            run(Trust::Certs, 4.2, 4.2, None),
        ]);
        let c = &compare(&r)[0];
        assert_eq!((c.certs_runs, c.left_out, c.certs_cpu_pct), (1, 3, [4.2, 4.2]));
        assert_eq!(c.rejected_in_windows, [None, None], "not every run counted");
        assert!(lines(&r).join("\n").contains("3 runs left out"));
        // One mode alone: nothing to compare.
        assert!(compare(&result(vec![run(Trust::Certs, 1.0, 1.0, None)])).is_empty());
    }

    #[test]
    fn rounds_alternate_their_order() {
        let both = Trust::parse_list("both").expect("both");
        assert_eq!(Trust::interleaved(&both, 0), vec![Trust::Peers, Trust::Certs]);
        assert_eq!(Trust::interleaved(&both, 1), vec![Trust::Certs, Trust::Peers]);
        assert_eq!(Trust::interleaved(&both, 2), vec![Trust::Peers, Trust::Certs]);
        assert!(Trust::parse_list("keys").is_err());
    }

    #[test]
    fn only_the_revoked_hosts_rejected_messages_from_a_real_gateways_roster_queue_count() {
        use lapin::types::{AMQPValue, FieldArray, FieldTable, LongString};
        let dead = |host: &str, queue: &str, reason: &str| {
            let mut death = FieldTable::default();
            death.insert(
                "queue".into(),
                AMQPValue::LongString(LongString::from(queue.to_string())),
            );
            death.insert(
                "reason".into(),
                AMQPValue::LongString(LongString::from(reason.to_string())),
            );
            let mut h = FieldTable::default();
            h.insert("host".into(), AMQPValue::LongString(LongString::from(host.to_string())));
            h.insert(
                "x-death".into(),
                AMQPValue::FieldArray(FieldArray::from(vec![AMQPValue::FieldTable(death)])),
            );
            Captured {
                exchange: "bridge.roster".into(),
                routing_key: format!("roster.{host}._gateway"),
                properties: lapin::BasicProperties::default().with_headers(h),
                body: Vec::new(),
            }
        };
        assert_eq!(
            rejected_by(&dead("sim-3", "roster.gw-a", "rejected"), Some("sim-3")),
            Some(0)
        );
        assert_eq!(
            rejected_by(&dead("sim-3", "roster.gw-b", "rejected"), Some("sim-3")),
            Some(1)
        );
        assert_eq!(
            rejected_by(&dead("sim-3", "roster.sim-1", "rejected"), Some("sim-3")),
            None
        );
        assert_eq!(
            rejected_by(&dead("sim-3", "roster.gw-a", "expired"), Some("sim-3")),
            None
        );
        assert_eq!(
            rejected_by(&dead("sim-4", "roster.gw-a", "rejected"), Some("sim-3")),
            None
        );
        assert_eq!(rejected_by(&dead("sim-4", "roster.gw-b", "rejected"), None), Some(1));
        assert_eq!(rejected_by(&dead("sim-4", "roster.gw-b", "maxlen"), None), None);
    }
}
