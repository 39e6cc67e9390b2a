//! Steps of fleet membership and key lifecycle (SPEC §18, capability `membership`;
//! CONTRACT §12): hosts join, leave and re-key while the fleet runs.
//!
//! Every credential is made by the real `ssh-keygen` (`fleet_conformance::credentials`), never by
//! code shared with a gateway. The scenario's membership settings ([`MemState`]) are fleet-wide,
//! as an operator distributes them: which CAs every trust file lists, whether every gateway reads
//! a revocation list and what it revokes, which hosts are in no peers file, which hosts hold a
//! certificate. [`configure_spec`] gives each gateway started from then on its files; the steps
//! that change a file mid-run rewrite it for every running gateway by write-beside-then-rename
//! and note the instant, from which "within 2 s" counts.
//!
//! The steps, by concept:
//! - [`files`] — CAs, trust files, revocation lists and peers files: set up, changed mid-run,
//!   broken on purpose (MEM-1);
//! - [`joining`] — a certified host in no peers file joins the running fleet (MEM-5);
//! - [`rotation`] — a gateway re-keys: new key and certificate, then SIGHUP (MEM-3);
//! - [`revocation`] — revoked and expired certificates stop verifying (MEM-4);
//! - [`hostile`] — the probe plays hosts presenting credentials, hostile or not (MEM-2);
//! - [`rosters`] — what every roster lists after a change (let in, or dropped within 2 s);
//! - [`traffic`] — briefs and replies flowing across a change, and what became of them;
//! - [`edges`] — serial ranges at both ends, ids across CAs, several principals, SIGHUP alone.

mod edges;
mod files;
mod hostile;
mod joining;
mod lifecycle;
mod lifecycle_own;
mod operators;
mod revocation;
mod rosters;
mod rotation;
mod traffic;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use fleet_conformance::credentials::ca::{Ca, CertKind, CertRequest, Certificate, Validity};
use fleet_conformance::credentials::krl::RevocationList;
use fleet_conformance::credentials::openssh::write_public_key;
use fleet_conformance::credentials::peers::PeersFile;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::gateway::GatewaySpec;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::Tap;
use fleet_conformance::reaction::{Bound, Late, react_within};
use fleet_conformance::timing::{WaitTimeout, time_scale, wait_for};

use crate::world::{FleetWorld, TRUSTED_HOSTS};

/// The file names in a host's directory (beside its key and peers file).
const TRUST_FILE: &str = "trust-cas.pub";
const REVOKED_FILE: &str = "revoked.krl";
const CERT_FILE: &str = "host-cert.pub";

/// SPEC §18's "within 2 s" (MEM-1, MEM-4), nominal.
const TWO_SECONDS: Duration = Duration::from_secs(2);

/// What one observation round takes (an HTTP roster read of each gateway, a log read) beyond a
/// deadline, nominal: a change seen at the deadline is seen at the next look, not missed.
const OBSERVE: Duration = Duration::from_millis(300);

/// A certificate a host is given when its gateway starts.
#[derive(Debug, Clone)]
struct CertPlan {
    ca: String,
    validity: Validity,
}

/// The scenario's membership settings and what its steps changed (SPEC §18).
#[derive(Default)]
pub struct MemState {
    /// The suite's CAs by name (kept outside every gateway's directory).
    cas: BTreeMap<String, Ca>,
    /// The CAs every trust file lists, in order; `None`: gateways get no `FLEET_TRUST_CA_FILE`.
    trusted: Option<Vec<String>>,
    /// `Some`: every gateway reads a revocation list (`FLEET_REVOKED_FILE`) revoking these.
    revoked: Option<RevocationList>,
    /// Hosts in no peers file (not even their own).
    unlisted: BTreeSet<String>,
    /// Hosts outside [`TRUSTED_HOSTS`] added to every peers file mid-run.
    added: BTreeSet<String>,
    /// Peers entries listing these keys (base64) instead of the host's one key (MEM-1).
    peer_keys: BTreeMap<String, Vec<String>>,
    /// A key a host will switch to (a peers entry lists it already).
    next_key: BTreeMap<String, HostKey>,
    /// Certificates hosts get when their gateway starts.
    cert_plans: BTreeMap<String, CertPlan>,
    /// Each certified host's current certificate.
    certs: BTreeMap<String, Certificate>,
    /// Every key each host has held, oldest first.
    key_history: BTreeMap<String, Vec<HostKey>>,
    /// Hosts whose trust file is broken at this line when their gateway starts.
    broken_at_start: BTreeMap<String, usize>,
    /// The last certificate serial handed out.
    serial: u64,
    /// When the suite last changed a file of running gateways (the rename, the signal, or the
    /// instant a certificate expires).
    changed: Option<Changed>,
    /// When a joining host's gateway was ready (MEM-5's 2H counts from there).
    joined: Option<tokio::time::Instant>,
    /// Briefs and replies flowing in the background.
    traffic: Option<traffic::Traffic>,
    /// Hosts the probe plays, and their keys.
    played: BTreeMap<String, HostKey>,
    /// Entities the probe announced on the hosts it plays: name → (host, gid).
    fakes: BTreeMap<String, (String, String)>,
    /// msgIds of what the probe published under a gateway host's name (its key's, signed by the
    /// suite): not that gateway's messages when its traffic is judged.
    probe_sent: BTreeSet<String>,
    /// The msgId of a message the probe signed with a host's old key (MEM-3: still in flight).
    in_flight: Option<String>,
    /// The probe's tap of `bridge.roster` and `bridge.msg` in one queue: the broker's order of
    /// what a gateway publishes, across both exchanges (MEM-3).
    wire: Option<Arc<Tap>>,
    /// Where the last rotation began on [`MemState::wire`], and whether it was refused.
    rotation: Option<(usize, bool)>,
    /// A refused rotation's key and certificate, still in the host's files (`edges.rs`: taken on
    /// a later SIGHUP).
    pending: BTreeMap<String, (HostKey, Certificate)>,
}

/// A change the next "within 2 s" counts from.
#[derive(Debug, Clone, Copy)]
struct Changed {
    at: tokio::time::Instant,
    /// The same instant as Unix ms (to compare with the `ts` of what gateways publish).
    unix_ms: u64,
    /// How many rounds the background traffic had made by then.
    rounds: usize,
}

impl MemState {
    fn ca(&self, name: &str) -> anyhow::Result<&Ca> {
        self.cas
            .get(name)
            .ok_or_else(|| anyhow!("no CA {name:?} in this scenario"))
    }

    fn cert(&self, host: &str) -> anyhow::Result<&Certificate> {
        self.certs
            .get(host)
            .ok_or_else(|| anyhow!("host {host:?} holds no certificate in this scenario"))
    }

    fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }
}

/// The directory of `host`'s files (the gateway's own, [`GatewaySpec::dir`]).
fn host_dir(w: &FleetWorld, host: &str) -> PathBuf {
    w.dir.join(host)
}

/// The CAs' directory: outside every gateway's.
fn ca_dir(w: &FleetWorld) -> PathBuf {
    w.dir.join("fleet-ca")
}

/// The key of `host` now: a played host's, or the world's (updated by a rotation).
fn current_key(w: &FleetWorld, host: &str) -> anyhow::Result<HostKey> {
    w.membership
        .played
        .get(host)
        .or_else(|| w.keys.get(host))
        .cloned()
        .ok_or_else(|| anyhow!("no key for host {host:?}"))
}

/// The peers file every gateway reads now: the trusted hosts and those added mid-run, less those
/// in no peers file, each with its key (or the keys its entry lists).
fn peers_file(w: &FleetWorld) -> PeersFile {
    let m = &w.membership;
    let mut p = PeersFile::default();
    let listed = TRUSTED_HOSTS
        .iter()
        .map(|h| h.to_string())
        .chain(m.added.iter().cloned())
        .filter(|h| !m.unlisted.contains(h));
    for h in listed {
        let keys = match (m.peer_keys.get(&h), w.keys.get(&h)) {
            (Some(keys), _) => keys.clone(),
            (None, Some(k)) => vec![k.public_base64()],
            (None, None) => continue,
        };
        p.entries.insert(h, keys);
    }
    p
}

/// The trust file every gateway reads now (`None`: no trust file in this scenario), with a line
/// that does not parse at `broken` (1-based) if asked.
fn trust_file(w: &FleetWorld, broken: Option<usize>) -> anyhow::Result<Option<String>> {
    let Some(names) = &w.membership.trusted else {
        return Ok(None);
    };
    let mut lines = vec!["# the fleet's CAs (SPEC MEM-2)".to_string()];
    for n in names {
        lines.push(w.membership.ca(n)?.public_line().to_string());
    }
    if let Some(at) = broken {
        lines.insert(
            at.clamp(1, lines.len() + 1) - 1,
            "ssh-ed25519 this-is-not-base64!".to_string(),
        );
    }
    Ok(Some(lines.join("\n") + "\n"))
}

/// Gives a gateway about to start the membership files of the scenario (called by
/// [`FleetWorld::host_spec`] for every host): its peers file's entries, and — when the scenario
/// uses them — its trust file, revocation list and certificate, with their variables.
pub fn configure_spec(w: &mut FleetWorld, spec: &mut GatewaySpec) -> anyhow::Result<()> {
    let host = spec.host.clone();
    let listed = peers_file(w);
    spec.peers = listed
        .entries
        .iter()
        .filter_map(|(h, keys)| {
            let key = w.keys.get(h)?;
            (keys.len() == 1 && keys[0] == key.public_base64()).then(|| (h.clone(), key.clone()))
        })
        .collect();
    anyhow::ensure!(
        spec.peers.len() == listed.entries.len(),
        "a gateway cannot start with a several-key peers entry here: only a running gateway's file lists several keys"
    );
    // A host lists itself unless it is in no peers file (as every scenario's gateway always did).
    if !w.membership.unlisted.contains(&host) {
        spec.peers.entry(host.clone()).or_insert_with(|| spec.key.clone());
    }
    let dir = spec.dir.clone();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let broken = w.membership.broken_at_start.get(&host).copied();
    if let Some(text) = trust_file(w, broken)? {
        let path = dir.join(TRUST_FILE);
        write_replace(&path, &text, 0o644)?;
        set_env(spec, "FLEET_TRUST_CA_FILE", &path);
    }
    if let Some(list) = &w.membership.revoked {
        let path = dir.join(REVOKED_FILE);
        write_replace(&path, &list.render(), 0o644)?;
        set_env(spec, "FLEET_REVOKED_FILE", &path);
    }
    w.membership
        .key_history
        .entry(host.clone())
        .or_insert_with(|| vec![spec.key.clone()]);
    if let Some(plan) = w.membership.cert_plans.get(&host).cloned() {
        let cert = issue(w, &plan.ca, &spec.key, &host, plan.validity)?;
        let path = dir.join(CERT_FILE);
        write_replace(&path, &format!("{}\n", cert.line), 0o644)?;
        set_env(spec, "FLEET_HOST_CERT_FILE", &path);
        w.membership.certs.insert(host, cert);
    }
    Ok(())
}

fn set_env(spec: &mut GatewaySpec, var: &str, path: &Path) {
    spec.extra_env.insert(var.into(), path.display().to_string());
}

/// A host certificate from `ca` over `key`, naming `host`, with the next serial and key id
/// `<host>-<serial>`.
fn issue(w: &mut FleetWorld, ca: &str, key: &HostKey, host: &str, validity: Validity) -> anyhow::Result<Certificate> {
    let serial = w.membership.next_serial();
    sign(w, ca, key, CertKind::Host, &[host.to_string()], validity, serial)
}

/// Any certificate from `ca` over `key` (its OpenSSH public key written to the CA directory).
fn sign(
    w: &FleetWorld,
    ca: &str,
    key: &HostKey,
    kind: CertKind,
    principals: &[String],
    validity: Validity,
    serial: u64,
) -> anyhow::Result<Certificate> {
    let dir = ca_dir(w).join("keys");
    std::fs::create_dir_all(&dir)?;
    let pub_path = dir.join(format!("{}-{}.pub", key.host, uuid::Uuid::new_v4().simple()));
    write_public_key(key, &pub_path)?;
    let id = format!("{}-{serial}", key.host);
    Ok(w.membership.ca(ca)?.sign(&CertRequest {
        public_key: &pub_path,
        kind,
        key_id: &id,
        principals,
        validity,
        serial,
    })?)
}

/// The usual window: valid since 5 minutes ago, for an hour.
fn an_hour() -> Validity {
    Validity::around_now(Duration::from_secs(300), Duration::from_secs(3600))
}

/// Notes a change made now (see [`MemState::changed`]).
fn changed_now(w: &mut FleetWorld) {
    let rounds = w.membership.traffic.as_ref().map_or(0, traffic::Traffic::rounds);
    w.membership.changed = Some(Changed {
        at: tokio::time::Instant::now(),
        unix_ms: fleet_conformance::envelope::now_ms(),
        rounds,
    });
}

fn last_change(w: &FleetWorld) -> anyhow::Result<Changed> {
    w.membership
        .changed
        .ok_or_else(|| anyhow!("no file was changed in this scenario"))
}

/// Waits, until `deadline`, for an ERROR line of `host`'s gateway that holds `path` (CONTRACT §12:
/// a refused file or credential is named by its path); the failure lists the ERROR lines seen.
async fn error_naming(w: &FleetWorld, host: &str, path: &str, deadline: impl Into<Until>) -> anyhow::Result<()> {
    use fleet_conformance::contract::{LogLevel, log_line_at};
    let gw = &w.host(host)?.gateway;
    by_deadline(&format!("an ERROR of {host} naming {path}"), deadline, || async move {
        let log = gw.log();
        if log.lines().any(|l| log_line_at(l, LogLevel::Error) && l.contains(path)) {
            Ok(Some(()))
        } else {
            let errors: Vec<&str> = log.lines().filter(|l| log_line_at(l, LogLevel::Error)).collect();
            Err(format!("ERROR lines: {errors:?}"))
        }
    })
    .await?;
    Ok(())
}

/// Until when a step looks: a plain instant (stretched like every deadline), or SPEC's number
/// after the last change, judged as written ([`fleet_conformance::reaction`], CONTRACT §7).
#[derive(Debug, Clone)]
enum Until {
    At(tokio::time::Instant),
    Reaction { event: tokio::time::Instant, bound: Bound },
}

impl From<tokio::time::Instant> for Until {
    fn from(at: tokio::time::Instant) -> Until {
        Until::At(at)
    }
}

impl std::ops::Add<Duration> for Until {
    type Output = Until;

    /// A tunable as handed to the gateway (n × H), added to the bound; to an instant, time.
    fn add(self, tunable: Duration) -> Until {
        match self {
            Until::At(at) => Until::At(at + tunable),
            Until::Reaction { event, mut bound } => {
                bound.tunable += tunable;
                Until::Reaction { event, bound }
            }
        }
    }
}

/// MEM-1 / MEM-4's "within 2 s" of the last change (the rename, the signal, or the instant a
/// certificate expires), judged as written: the reaction, less the observation measured on the
/// way, against 2 s plus a fixed margin — never stretched (CONTRACT §7). `extra`: a tunable as
/// handed to the gateway added to the bound (zero for SPEC's 2 s alone).
fn two_seconds_after(w: &FleetWorld, extra: Duration) -> anyhow::Result<Until> {
    Ok(Until::Reaction {
        event: last_change(w)?.at,
        bound: Bound::with_tunable("MEM-1/MEM-4: within 2 s", TWO_SECONDS, extra),
    })
}

/// Why a look [`by_deadline`] ended without the effect.
#[derive(Debug, thiserror::Error)]
enum Missed {
    #[error(transparent)]
    Timeout(#[from] WaitTimeout),
    #[error(transparent)]
    Late(#[from] Late),
}

/// Looks until `until`: [`wait_for`] until an instant (at least one look even when it has
/// passed), or a reaction judged against SPEC's number ([`react_within`]).
async fn by_deadline<T, F, Fut>(what: &str, until: impl Into<Until>, probe: F) -> Result<T, Missed>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    match until.into() {
        Until::At(deadline) => {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            Ok(wait_for(what, left.div_f64(time_scale()), probe).await?)
        }
        Until::Reaction { event, bound } => Ok(react_within(what, event, &bound, Duration::ZERO, probe).await?.0),
    }
}

/// Quoted names out of a step's text (`"a", "b" and "j"`).
fn quoted(text: &str) -> Vec<String> {
    text.split('"').skip(1).step_by(2).map(str::to_string).collect()
}
