//! The scenario's membership settings and what its steps changed ([`MemState`]), the files a
//! gateway is started with from them, and the traffic that flows across a change.
//!
//! Exists as a leaf below the world, which holds the settings
//! ([`crate::world::FleetWorld::membership`]) and gives every gateway it starts its files from
//! them ([`MemState::configure_spec`]): kept with the membership steps, the world would import the
//! steps that import the world.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, anyhow};
use fleet_conformance::credentials::ca::{Ca, CertKind, CertRequest, Certificate, Validity};
use fleet_conformance::credentials::krl::RevocationList;
use fleet_conformance::credentials::openssh::write_public_key;
use fleet_conformance::credentials::peers::PeersFile;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::gateway::GatewaySpec;
use fleet_conformance::keys::HostKey;
use fleet_conformance::probe::Tap;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The file names in a host's directory (beside its key and peers file).
pub(super) const TRUST_FILE: &str = "trust-cas.pub";
pub(super) const REVOKED_FILE: &str = "revoked.krl";
pub(super) const CERT_FILE: &str = "host-cert.pub";

/// A certificate a host is given when its gateway starts.
#[derive(Debug, Clone)]
pub(super) struct CertPlan {
    pub(super) ca: String,
    pub(super) validity: Validity,
}

/// The scenario's membership settings and what its steps changed (SPEC §18).
#[derive(Default)]
pub struct MemState {
    /// The suite's CAs by name (kept outside every gateway's directory).
    pub(super) cas: BTreeMap<String, Ca>,
    /// The CAs every trust file lists, in order; `None`: gateways get no `FLEET_TRUST_CA_FILE`.
    pub(super) trusted: Option<Vec<String>>,
    /// `Some`: every gateway reads a revocation list (`FLEET_REVOKED_FILE`) revoking these.
    pub(super) revoked: Option<RevocationList>,
    /// Hosts in no peers file (not even their own).
    pub(super) unlisted: BTreeSet<String>,
    /// Hosts outside [`TRUSTED_HOSTS`](crate::world::TRUSTED_HOSTS) added to every peers file
    /// mid-run.
    pub(super) added: BTreeSet<String>,
    /// Peers entries listing these keys (base64) instead of the host's one key (MEM-1).
    pub(super) peer_keys: BTreeMap<String, Vec<String>>,
    /// A key a host will switch to (a peers entry lists it already).
    pub(super) next_key: BTreeMap<String, HostKey>,
    /// Certificates hosts get when their gateway starts.
    pub(super) cert_plans: BTreeMap<String, CertPlan>,
    /// Each certified host's current certificate.
    pub(super) certs: BTreeMap<String, Certificate>,
    /// Every key each host has held, oldest first.
    pub(super) key_history: BTreeMap<String, Vec<HostKey>>,
    /// Hosts whose trust file is broken at this line when their gateway starts.
    pub(super) broken_at_start: BTreeMap<String, usize>,
    /// The last certificate serial handed out.
    pub(super) serial: u64,
    /// When the suite last changed a file of running gateways (the rename, the signal, or the
    /// instant a certificate expires).
    pub(super) changed: Option<Changed>,
    /// When a joining host's gateway was ready (MEM-5's 2H counts from there).
    pub(super) joined: Option<tokio::time::Instant>,
    /// Briefs and replies flowing in the background.
    pub(super) traffic: Option<Traffic>,
    /// Hosts the probe plays, and their keys.
    pub(super) played: BTreeMap<String, HostKey>,
    /// Entities the probe announced on the hosts it plays: name → (host, gid).
    pub(super) fakes: BTreeMap<String, (String, String)>,
    /// msgIds of what the probe published under a gateway host's name (its key's, signed by the
    /// suite): not that gateway's messages when its traffic is judged.
    pub(super) probe_sent: BTreeSet<String>,
    /// The msgId of a message the probe signed with a host's old key (MEM-3: still in flight).
    pub(super) in_flight: Option<String>,
    /// The probe's tap of `bridge.roster` and `bridge.msg` in one queue: the broker's order of
    /// what a gateway publishes, across both exchanges (MEM-3).
    pub(super) wire: Option<Arc<Tap>>,
    /// Where the last rotation began on [`MemState::wire`], and whether it was refused.
    pub(super) rotation: Option<(usize, bool)>,
    /// A refused rotation's key and certificate, still in the host's files (`edges.rs`: taken on
    /// a later SIGHUP).
    pub(super) pending: BTreeMap<String, (HostKey, Certificate)>,
    /// A file emptied in place and written back in the background ([C-27] 2, `damaged.rs`).
    pub(super) rewrite: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// A change the next "within 2 s" counts from.
#[derive(Debug, Clone, Copy)]
pub(super) struct Changed {
    pub(super) at: tokio::time::Instant,
    /// The same instant as Unix ms (to compare with the `ts` of what gateways publish).
    pub(super) unix_ms: u64,
    /// How many rounds the background traffic had made by then.
    pub(super) rounds: usize,
}

impl MemState {
    pub(super) fn ca(&self, name: &str) -> anyhow::Result<&Ca> {
        self.cas
            .get(name)
            .ok_or_else(|| anyhow!("no CA {name:?} in this scenario"))
    }

    pub(super) fn cert(&self, host: &str) -> anyhow::Result<&Certificate> {
        self.certs
            .get(host)
            .ok_or_else(|| anyhow!("host {host:?} holds no certificate in this scenario"))
    }

    pub(super) fn next_serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    /// The peers file every gateway reads now: the trusted hosts (`trusted`) and those added
    /// mid-run, less those in no peers file, each with its key in `keys` (or the keys its entry
    /// lists).
    pub(super) fn peers_file(&self, trusted: &[&str], keys: &BTreeMap<String, HostKey>) -> PeersFile {
        let mut p = PeersFile::default();
        let listed = trusted
            .iter()
            .map(|h| h.to_string())
            .chain(self.added.iter().cloned())
            .filter(|h| !self.unlisted.contains(h));
        for h in listed {
            let keys = match (self.peer_keys.get(&h), keys.get(&h)) {
                (Some(keys), _) => keys.clone(),
                (None, Some(k)) => vec![k.public_base64()],
                (None, None) => continue,
            };
            p.entries.insert(h, keys);
        }
        p
    }

    /// The trust file every gateway reads now (`None`: no trust file in this scenario), with a
    /// line that does not parse at `broken` (1-based) if asked.
    pub(super) fn trust_file(&self, broken: Option<usize>) -> anyhow::Result<Option<String>> {
        let Some(names) = &self.trusted else {
            return Ok(None);
        };
        let mut lines = vec!["# the fleet's CAs (SPEC MEM-2)".to_string()];
        for n in names {
            lines.push(self.ca(n)?.public_line().to_string());
        }
        if let Some(at) = broken {
            lines.insert(
                at.clamp(1, lines.len() + 1) - 1,
                "ssh-ed25519 this-is-not-base64!".to_string(),
            );
        }
        Ok(Some(lines.join("\n") + "\n"))
    }

    /// A host certificate from `ca` over `key`, naming `host`, with the next serial and key id
    /// `<host>-<serial>`; `ca_dir`: the CAs' directory ([`ca_dir_in`]).
    pub(super) fn issue(
        &mut self,
        ca_dir: &Path,
        ca: &str,
        key: &HostKey,
        host: &str,
        validity: Validity,
    ) -> anyhow::Result<Certificate> {
        let serial = self.next_serial();
        self.sign(ca_dir, ca, key, CertKind::Host, &[host.to_string()], validity, serial)
    }

    /// Any certificate from `ca` over `key` (its OpenSSH public key written to `ca_dir`).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn sign(
        &self,
        ca_dir: &Path,
        ca: &str,
        key: &HostKey,
        kind: CertKind,
        principals: &[String],
        validity: Validity,
        serial: u64,
    ) -> anyhow::Result<Certificate> {
        let dir = ca_dir.join("keys");
        std::fs::create_dir_all(&dir)?;
        let pub_path = dir.join(format!("{}-{}.pub", key.host, uuid::Uuid::new_v4().simple()));
        write_public_key(key, &pub_path)?;
        let id = format!("{}-{serial}", key.host);
        Ok(self.ca(ca)?.sign(&CertRequest {
            public_key: &pub_path,
            kind,
            key_id: &id,
            principals,
            validity,
            serial,
        })?)
    }

    /// Gives a gateway about to start the membership files of the scenario (the world calls it
    /// for every host, [`FleetWorld::host_spec`](crate::world::FleetWorld::host_spec)): its peers
    /// file's entries, and — when the scenario uses them — its trust file, revocation list and
    /// certificate, with their variables. `trusted` and `keys`: the hosts every peers file lists
    /// and the scenario's host keys; `scenario_dir`: the scenario's directory.
    pub fn configure_spec(
        &mut self,
        trusted: &[&str],
        keys: &BTreeMap<String, HostKey>,
        scenario_dir: &Path,
        spec: &mut GatewaySpec,
    ) -> anyhow::Result<()> {
        let host = spec.host.clone();
        let listed = self.peers_file(trusted, keys);
        spec.peers = listed
            .entries
            .iter()
            .filter_map(|(h, entry)| {
                let key = keys.get(h)?;
                (entry.len() == 1 && entry[0] == key.public_base64()).then(|| (h.clone(), key.clone()))
            })
            .collect();
        anyhow::ensure!(
            spec.peers.len() == listed.entries.len(),
            "a gateway cannot start with a several-key peers entry here: only a running gateway's file lists several keys"
        );
        // A host lists itself unless it is in no peers file (as every scenario's gateway always did).
        if !self.unlisted.contains(&host) {
            spec.peers.entry(host.clone()).or_insert_with(|| spec.key.clone());
        }
        let dir = spec.dir.clone();
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let broken = self.broken_at_start.get(&host).copied();
        if let Some(text) = self.trust_file(broken)? {
            let path = dir.join(TRUST_FILE);
            write_replace(&path, &text, 0o644)?;
            set_env(spec, "FLEET_TRUST_CA_FILE", &path);
        }
        if let Some(list) = &self.revoked {
            let path = dir.join(REVOKED_FILE);
            write_replace(&path, &list.render(), 0o644)?;
            set_env(spec, "FLEET_REVOKED_FILE", &path);
        }
        self.key_history
            .entry(host.clone())
            .or_insert_with(|| vec![spec.key.clone()]);
        if let Some(plan) = self.cert_plans.get(&host).cloned() {
            let cert = self.issue(&ca_dir_in(scenario_dir), &plan.ca, &spec.key, &host, plan.validity)?;
            let path = dir.join(CERT_FILE);
            write_replace(&path, &format!("{}\n", cert.line), 0o644)?;
            set_env(spec, "FLEET_HOST_CERT_FILE", &path);
            self.certs.insert(host, cert);
        }
        Ok(())
    }
}

/// The CAs' directory in the scenario's directory `scenario_dir`: outside every gateway's.
pub(super) fn ca_dir_in(scenario_dir: &Path) -> PathBuf {
    scenario_dir.join("fleet-ca")
}

fn set_env(spec: &mut GatewaySpec, var: &str, path: &Path) {
    spec.extra_env.insert(var.into(), path.display().to_string());
}

/// One round: a brief and what `bridge_send` answered, then the worker's reply and its msgId.
#[derive(Debug, Clone)]
pub(super) struct Round {
    pub(super) brief: String,
    pub(super) sent: Result<Value, String>,
    pub(super) replied: Result<String, String>,
}

/// Traffic running in the background between a main and a worker.
pub(super) struct Traffic {
    pub(super) main: String,
    pub(super) worker: String,
    pub(super) rounds: Arc<AtomicUsize>,
    pub(super) stop: watch::Sender<bool>,
    pub(super) task: Option<JoinHandle<Vec<Round>>>,
    /// What the loop did, once it stopped (`None` for a round it could not finish).
    pub(super) done: Option<Vec<Round>>,
    pub(super) drained: Arc<Mutex<Vec<Value>>>,
    pub(super) drain_stop: watch::Sender<bool>,
    pub(super) drainer: Option<JoinHandle<()>>,
}

impl Traffic {
    /// Rounds completed so far.
    pub(super) fn rounds(&self) -> usize {
        self.rounds.load(Ordering::Relaxed)
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        if let Some(t) = self.drainer.take() {
            t.abort();
        }
    }
}
