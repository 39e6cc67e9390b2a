//! The soak's gateways on certificates (SPEC §18), for the `rotate` and `revoke-restore` strikes.
//!
//! Why a file of its own: those strikes need a fleet whose trust is certificates, not the peers
//! file — otherwise a revoked certificate changes nothing (the peers file still pins the key) and
//! a rotated key is unknown to every receiver. When the nemesis cycle holds either strike and the
//! gateway under test declares `membership`, the Background's step here makes a fleet CA with the
//! real `ssh-keygen` and gives every soak host, before its gateway starts:
//!
//! - `FLEET_HOST_CERT_FILE`: its own host certificate over its signing key (`-h`, principal = the
//!   host, key id `<host>-<serial>`, a fresh serial);
//! - `FLEET_TRUST_CA_FILE`: the fleet CA's public key line;
//! - `FLEET_REVOKED_FILE`: a KRL specification, empty at first (a comment only);
//! - `FLEET_PEERS_FILE`: a peers file of its own, `[peers]` alone — no soak host is in any peers
//!   file, so a host's certificate is the only thing that admits its key anywhere (this replaces
//!   the suite's usual peers file through the host's environment).
//!
//! The files live in each host's directory and are replaced the way CONTRACT §12 says (written
//! beside, renamed over). [`SoakFleet`] (`fleet.rs`) keeps what the strikes change: each host's key
//! and certificate, the revocation list (it only grows: a restore keeps the old revocation) and the
//! serials handed out.

use anyhow::Context as _;
use cucumber::given;
use fleet_conformance::credentials::ca::Ca;
use fleet_conformance::credentials::peers::PeersFile;
use fleet_conformance::credentials::write_replace;
use fleet_conformance::keys::HostKey;

use crate::world::{FleetWorld, Suite};

use super::config::SoakConfig;
use super::fleet::{CERT_FILE, CertHost, PEERS_FILE, REVOKED_FILE, SoakFleet, TRUST_FILE};
use super::nodes::cluster_profile;

/// Why the soak's gateways cannot run on certificates here, if they cannot (said in the summary's
/// `nemesis.off` for `rotate` and `revoke-restore`).
pub(super) fn trust_strikes_off(suite: &Suite) -> Option<String> {
    (!suite.membership).then(|| {
        "the gateway under test does not declare `membership` (SPEC §18): its gateways run on the peers file, \
         which a certificate's rotation or revocation does not change"
            .to_string()
    })
}

/// Whether this soak runs its gateways on certificates: the cycle strikes them and the gateway
/// declares `membership`.
fn on_certificates(suite: &Suite, config: &SoakConfig) -> bool {
    config.cycle.iter().any(|s| s.is_trust()) && trust_strikes_off(suite).is_none()
}

#[given(
    regex = r#"^hosts "([^"]+)", "([^"]+)" and "([^"]+)" run on certificates from a fleet CA when the nemesis rotates keys or revokes certificates$"#
)]
async fn on_certs(w: &mut FleetWorld, a: String, b: String, c: String) -> anyhow::Result<()> {
    let suite = w.suite()?;
    let config = match w.soak.config.clone() {
        Some(c) => c,
        None => SoakConfig::from_env(cluster_profile(&suite))?,
    };
    if !on_certificates(&suite, &config) {
        // The gateways keep the peers file; the strikes are off and the summary says why.
        return Ok(());
    }
    let hosts = [a, b, c];
    for h in &hosts {
        anyhow::ensure!(
            !w.hosts.contains_key(h),
            "host {h:?} already runs: its certificate must come with its start"
        );
    }
    let ca = Ca::create(&w.dir.join("soak-ca"), "soak")?;
    let mut fleet = SoakFleet::new(ca, w.dir.clone());
    let trust = format!("# the soak's fleet CA (SPEC MEM-2)\n{}\n", fleet.ca.public_line());
    for h in &hosts {
        // The key `host_spec` will give the gateway (minted now if the world has none yet).
        let key = w.keys.entry(h.clone()).or_insert_with(|| HostKey::generate(h)).clone();
        let cert = fleet.issue(h, &key)?;
        let dir = fleet.host_dir(h);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let files = [
            ("FLEET_TRUST_CA_FILE", TRUST_FILE, trust.clone()),
            ("FLEET_REVOKED_FILE", REVOKED_FILE, fleet.revoked.render()),
            ("FLEET_HOST_CERT_FILE", CERT_FILE, format!("{}\n", cert.line)),
            ("FLEET_PEERS_FILE", PEERS_FILE, PeersFile::default().render()),
        ];
        let env = w.host_env.entry(h.clone()).or_default();
        for (var, name, text) in files {
            let path = dir.join(name);
            write_replace(&path, &text, 0o644)?;
            env.insert(var.into(), path.display().to_string());
        }
        fleet.hosts.insert(
            h.clone(),
            CertHost {
                key,
                cert: cert.clone(),
                history: vec![cert],
            },
        );
    }
    println!(
        "soak: hosts {hosts:?} run on certificates from a fleet CA (trust file, revocation list, host certificate; \
         peers file `[peers]` alone)"
    );
    w.soak.fleet = Some(fleet);
    Ok(())
}
