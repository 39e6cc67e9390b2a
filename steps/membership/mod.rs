//! Steps of fleet membership and key lifecycle (SPEC §18, capability `membership`;
//! CONTRACT §12): hosts join, leave and re-key while the fleet runs.
//!
//! Every credential is made by the real `ssh-keygen` (`fleet_conformance::credentials`), never by
//! code shared with a gateway. The scenario's membership settings ([`MemState`], `state.rs`) are
//! fleet-wide, as an operator distributes them: which CAs every trust file lists, whether every
//! gateway reads a revocation list and what it revokes, which hosts are in no peers file, which
//! hosts hold a certificate. [`MemState::configure_spec`] gives each gateway started from then on
//! its files; the steps that change a file mid-run rewrite it for every running gateway by
//! write-beside-then-rename and note the instant, from which "within 2 s" counts.
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
//! - [`edges`] — serial ranges at both ends, ids across CAs, several principals, SIGHUP alone;
//! - [`damaged`] — a damaged CA line, a file briefly empty, an early renewal, a CRLF list ([C-27]);
//! - [`naming`] — the log lines that name the host or the file they are about ([C-27] 4).

mod damaged;
mod edges;
mod files;
mod hostile;
mod joining;
mod lifecycle;
mod lifecycle_own;
mod naming;
mod operators;
mod revocation;
mod rosters;
mod rotation;
mod state;
mod traffic;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::anyhow;
use fleet_conformance::credentials::ca::{CertKind, Certificate, Validity};
use fleet_conformance::credentials::peers::PeersFile;
use fleet_conformance::keys::HostKey;
use fleet_conformance::reaction::{Bound, Late, react_within};
use fleet_conformance::timing::{WaitTimeout, time_scale, wait_for};

use crate::world::{FleetWorld, TRUSTED_HOSTS};

pub use state::MemState;
use state::{CERT_FILE, CertPlan, Changed, REVOKED_FILE, TRUST_FILE, Traffic, ca_dir_in};

/// SPEC §18's "within 2 s" (MEM-1, MEM-4), nominal.
const TWO_SECONDS: Duration = Duration::from_secs(2);

/// What one observation round takes (an HTTP roster read of each gateway, a log read) beyond a
/// deadline, nominal: a change seen at the deadline is seen at the next look, not missed.
const OBSERVE: Duration = Duration::from_millis(300);

/// The directory of `host`'s files (the gateway's own, [`GatewaySpec::dir`]).
fn host_dir(w: &FleetWorld, host: &str) -> PathBuf {
    w.dir.join(host)
}

/// The CAs' directory: outside every gateway's.
fn ca_dir(w: &FleetWorld) -> PathBuf {
    ca_dir_in(&w.dir)
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

/// The peers file every gateway reads now ([`MemState::peers_file`]).
fn peers_file(w: &FleetWorld) -> PeersFile {
    w.membership.peers_file(&TRUSTED_HOSTS, &w.keys)
}

/// The trust file every gateway reads now ([`MemState::trust_file`]).
fn trust_file(w: &FleetWorld, broken: Option<usize>) -> anyhow::Result<Option<String>> {
    w.membership.trust_file(broken)
}

/// A host certificate from `ca` over `key`, naming `host`, with the next serial and key id
/// `<host>-<serial>`.
fn issue(w: &mut FleetWorld, ca: &str, key: &HostKey, host: &str, validity: Validity) -> anyhow::Result<Certificate> {
    let dir = ca_dir(w);
    w.membership.issue(&dir, ca, key, host, validity)
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
    w.membership
        .sign(&ca_dir(w), ca, key, kind, principals, validity, serial)
}

/// The usual window: valid since 5 minutes ago, for an hour.
fn an_hour() -> Validity {
    Validity::around_now(Duration::from_secs(300), Duration::from_secs(3600))
}

/// Notes a change made now (see [`MemState::changed`]).
fn changed_now(w: &mut FleetWorld) {
    let rounds = w.membership.traffic.as_ref().map_or(0, Traffic::rounds);
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
