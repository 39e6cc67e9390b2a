//! SPEC §18, fleet membership and key lifecycle (capability `membership`): hosts join, leave and
//! re-key while the fleet runs, with OpenSSH host certificates, key revocation lists and trust
//! files re-read without a restart.
//!
//! One file per concept:
//! - [`files`] — which variable names each file; errors that name the file and the line (MEM-1)
//! - [`peers`], [`ca`], [`krl`] — the three trust files' formats (MEM-1, MEM-2, MEM-4)
//! - [`cert`] — an OpenSSH host certificate, read once and checked (MEM-2)
//! - [`trust`] — the live trust state: which keys are host h's now (MEM-2, MEM-3)
//! - [`own`] — this gateway's key and certificate, its expiry and readiness (MEM-3, MEM-4)
//! - [`gate`] — where verification meets the trust state (inbox, control, roster, DLQ)
//! - [`rotate`] — the own `_gateway` presence, and switching to a new key without a flag day
//!   (MEM-3, MEM-5)
//! - [`sweep`] — dropping a host's roster entries once it has no valid key (MEM-1, MEM-4)
//! - [`watch`] — re-reading the files on change and on SIGHUP, within 2 s (MEM-1, MEM-3)
//! - [`waiting`] — presences of a host with no key yet, held for its `_gateway` ([C-21] 7)
//! - [`report`] — what this gateway trusts now, and why (`GET /v1/trust`, `trust show`)
//! - [`repeats`] — a host failing the same check every heartbeat is logged once a minute
//! - [`status`] — what was refused (a file kept out, a rotation, a host's presences), for the report
//! - [`cli`] — `fleet-gateway cert check`, and the OpenSSH line `keygen` writes

pub mod ca;
pub mod cert;
pub mod cli;
pub mod dir_events;
pub mod files;
pub mod gate;
pub mod krl;
pub mod own;
pub mod peers;
pub mod repeats;
pub mod report;
pub mod rotate;
pub mod status;
pub mod sweep;
pub mod trust;
pub mod waiting;
pub mod watch;

use crate::config::Config;
use files::{FileError, TrustFile};

/// The capability this module implements (declared on the `_gateway` presence).
pub const CAPABILITY: &str = "membership";

/// Everything SPEC §18 adds to a gateway.
pub struct Membership {
    pub trust: trust::Trust,
    pub own: own::Own,
    /// Whether `FLEET_TRUST_CA_FILE` is set: only then is the own certificate's CA judged.
    ca_configured: bool,
    /// Presences of hosts with no key yet, waiting for their `_gateway` presence ([C-21] 7).
    pub waiting: waiting::WaitingPresences,
    /// Rejected presences' WARN lines, once per host and check a minute.
    pub repeats: repeats::Repeats,
    /// What was refused, for `GET /v1/trust` ([`status`]).
    pub decisions: status::Decisions,
    /// host → the certificate last WARNed about ([`Membership::first_warning`]).
    warned: std::sync::Mutex<std::collections::HashMap<String, String>>,
}

impl Membership {
    /// Reads every file at start; a file that cannot be read or parsed refuses the start with
    /// the file and the line named.
    pub fn load(cfg: &Config) -> anyhow::Result<Membership> {
        let id = own::OwnIdentity::load(&cfg.signing_key_file, cfg.host_cert_file.as_deref())?;
        let files = read_trust_files(cfg)?;
        log_loaded(cfg, &files, &id);
        let trust = trust::Trust::new(
            &cfg.host_id,
            cfg.clock_skew.as_millis() as u64,
            files,
            id.signer.verifying_key(),
        );
        let own = own::Own::new(
            &cfg.host_id,
            cfg.signing_key_file.clone(),
            cfg.host_cert_file.clone(),
            id,
        );
        Ok(Membership {
            trust,
            own,
            ca_configured: cfg.trust_ca_file.is_some(),
            waiting: Default::default(),
            repeats: Default::default(),
            decisions: Default::default(),
            warned: Default::default(),
        })
    }

    /// Whether `cert` is news for `host`'s WARN (a bad certificate on every heartbeat is logged
    /// once, not every interval).
    pub fn first_warning(&self, host: &str, cert: &str) -> bool {
        let mut w = self.warned.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if w.get(host).is_some_and(|c| c == cert) {
            return false;
        }
        if w.len() >= 4096 {
            w.clear();
        }
        w.insert(host.to_string(), cert.to_string());
        true
    }

    /// MEM-4, [C-21] 12: why the gateway's own credential would be rejected by its peers now (not
    /// ready, and publishing refused, [C-21] 9), if it would.
    pub fn own_problem(&self) -> Option<own::OwnProblem> {
        let files = self.trust.files();
        let cas = self.ca_configured.then_some(&files.cas);
        self.own
            .problem(cas, &files.krl, crate::envelope::now_ms(), self.trust.skew_ms())
    }

    /// MEM-4: why the gateway is not ready on account of its own credential, if it is not.
    pub fn unready(&self) -> Option<String> {
        self.own_problem().map(|p| p.to_string())
    }

    /// [C-21] 12 for a rotation's candidate: the certificate `cert` judged as a peer would.
    pub fn judge_own(&self, cert: &cert::CertInfo) -> Result<(), own::OwnProblem> {
        let files = self.trust.files();
        let cas = self.ca_configured.then_some(&files.cas);
        own::judge(
            cert,
            self.own.host(),
            cas,
            &files.krl,
            crate::envelope::now_ms(),
            self.trust.skew_ms(),
        )
        .map_err(|p| self.own.own_problem(&p))
    }

    /// [C-27] 3: when `cert` is refused only for not being valid yet, the instant (Unix ms) it
    /// becomes valid as MEM-2 counts it (`valid after` − skew), if nothing else refuses it then.
    pub fn good_once_valid(&self, cert: &cert::CertInfo) -> Option<u64> {
        let now = crate::envelope::now_ms();
        let skew = self.trust.skew_ms();
        if cert.window(now, skew) != cert::Window::NotYet {
            return None;
        }
        let at = cert.valid_after.saturating_mul(1000).saturating_sub(skew);
        let files = self.trust.files();
        let cas = self.ca_configured.then_some(&files.cas);
        own::judge(cert, self.own.host(), cas, &files.krl, at, skew)
            .is_ok()
            .then_some(at)
    }
}

/// [C-27] 4: the start names each file it loaded, with what it holds — one INFO line each.
fn log_loaded(cfg: &Config, files: &trust::TrustFiles, id: &own::OwnIdentity) {
    let line = |file: TrustFile, path: &std::path::Path, what: String| {
        tracing::info!(file = file.var(), path = %path.display(), "{} {}: {what}: loaded", file.var(), path.display());
    };
    use trust::TrustFiles as T;
    line(TrustFile::Peers, &cfg.peers_file, T::peers_summary(&files.peers));
    if let Some(p) = &cfg.trust_ca_file {
        line(TrustFile::TrustCa, p, T::cas_summary(&files.cas));
    }
    if let Some(p) = &cfg.revoked_file {
        line(TrustFile::Revoked, p, T::krl_summary(&files.krl));
    }
    if let (Some(p), Some(c)) = (&cfg.host_cert_file, &id.cert) {
        line(
            TrustFile::HostCert,
            p,
            format!(
                "certificate serial {}, key id {:?}, valid until {}",
                c.serial,
                c.key_id,
                cert::utc(c.valid_before)
            ),
        );
    }
}

/// The three trust files (`FLEET_TRUST_CA_FILE` and `FLEET_REVOKED_FILE` only when set).
pub fn read_trust_files(cfg: &Config) -> Result<trust::TrustFiles, FileError> {
    let peers = files::load(TrustFile::Peers, &cfg.peers_file, peers::Peers::parse)?;
    let cas = match &cfg.trust_ca_file {
        Some(p) => {
            let cas = files::load(TrustFile::TrustCa, p, ca::CaSet::parse)?;
            cas.warn_skipped(p); // [C-21] 10: a line of a type not taken is skipped, named
            cas
        }
        None => ca::CaSet::default(),
    };
    let krl = match &cfg.revoked_file {
        Some(p) => files::load(TrustFile::Revoked, p, krl::Krl::parse)?,
        None => krl::Krl::default(),
    };
    Ok(trust::TrustFiles { peers, cas, krl })
}
