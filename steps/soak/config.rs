//! The soak's knobs: the environment variables that override the feature's operation counts, set
//! the nemesis cycle and seed its random picks, and the cycle used when none is given.

use anyhow::{Context as _, anyhow};

use super::nemesis::Strike;

/// Operations in all (briefs + replies), overriding the feature's numbers.
pub(super) const OPS_VAR: &str = "FLEET_SOAK_OPS";
/// The nemesis cycle, e.g. `kill,pause,cut,close,restart` (on a cluster also `node-kill`,
/// `leader-kill`, `partition`; with gateways that declare `membership` also `rotate`,
/// `revoke-restore`). `default` stands for the default cycle ([`DEFAULT_CYCLE`], on a cluster
/// [`CLUSTER_CYCLE`]), so `rotate,revoke-restore,default` adds the two to it.
pub(super) const NEMESIS_VAR: &str = "FLEET_SOAK_NEMESIS";
/// The seed of the nemesis' random picks (which host, which connection).
pub(super) const SEED_VAR: &str = "FLEET_SOAK_SEED";

/// The nemesis cycle unless `FLEET_SOAK_NEMESIS` says otherwise: one broker restart in nine
/// strikes (it takes the broker away for seconds, the others for a moment).
///
/// `rotate` and `revoke-restore` (SPEC §18) are in no default cycle, even for a gateway that
/// declares `membership`: they put the whole run on certificates instead of the peers file, and a
/// revocation cuts a host off by design (its operations end failed or unknown for a period), so
/// they would change what the default soak measures (the transport nemesis' unknowns, issue 28)
/// and make runs incomparable with earlier ones. Ask for them: `rotate,revoke-restore,default`
/// (`scripts/soak --membership`).
pub(super) const DEFAULT_CYCLE: [Strike; 9] = [
    Strike::Kill,
    Strike::Pause,
    Strike::Cut,
    Strike::Close,
    Strike::BrokerRestart,
    Strike::Pause,
    Strike::Kill,
    Strike::Close,
    Strike::Cut,
];

/// The nemesis cycle on a cluster whose gateways run the cluster profile (SPEC §16), unless
/// `FLEET_SOAK_NEMESIS` says otherwise: today's gateway and link strikes and the broker restart
/// (every node, together), with a node strike between two of them: a node killed twice, the
/// main's inbox leader killed twice and a node cut off once per round (container provider only:
/// off, and said so, on the process provider), and the whole site once per round: every gateway
/// and every node down together, back in a random order (issue 58, [C-25]). Node strikes never
/// overlap: each ends with the cluster whole.
pub(super) const CLUSTER_CYCLE: [Strike; 15] = [
    Strike::Kill,
    Strike::NodeKill,
    Strike::Pause,
    Strike::Cut,
    Strike::LeaderKill,
    Strike::Close,
    Strike::BrokerRestart,
    Strike::Partition,
    Strike::Pause,
    Strike::NodeKill,
    Strike::Kill,
    Strike::Close,
    Strike::SiteRestart,
    Strike::LeaderKill,
    Strike::Cut,
];

/// The run's settings, from the feature text and the environment.
#[derive(Debug, Clone)]
pub(super) struct SoakConfig {
    pub(super) cycle: Vec<Strike>,
    pub(super) seed: u64,
}

impl SoakConfig {
    /// The knobs; `cluster`: the soak runs on a cluster whose gateways run the cluster profile,
    /// and the default cycle is [`CLUSTER_CYCLE`].
    pub(super) fn from_env(cluster: bool) -> anyhow::Result<SoakConfig> {
        let default = if cluster {
            CLUSTER_CYCLE.to_vec()
        } else {
            DEFAULT_CYCLE.to_vec()
        };
        let cycle = match std::env::var(NEMESIS_VAR) {
            Ok(v) if !v.trim().is_empty() => {
                let mut cycle = Vec::new();
                for s in v.split(',').filter(|s| !s.trim().is_empty()) {
                    if s.trim() == "default" {
                        cycle.extend(default.iter().copied());
                        continue;
                    }
                    cycle.push(Strike::parse(s).ok_or_else(|| {
                        anyhow!("{NEMESIS_VAR}={v:?}: unknown nemesis {s:?}; expected {}", Strike::NAMES)
                    })?);
                }
                cycle
            }
            _ => default,
        };
        let seed = match std::env::var(SEED_VAR) {
            Ok(v) => v
                .trim()
                .parse()
                .with_context(|| format!("{SEED_VAR}={v:?} is not a number"))?,
            Err(_) => uuid::Uuid::new_v4().as_u64_pair().0,
        };
        Ok(SoakConfig { cycle, seed })
    }
}

/// The operation counts per worker: the feature's, or `FLEET_SOAK_OPS` split in four.
pub(super) fn op_counts(briefs: usize, replies: usize) -> anyhow::Result<(usize, usize)> {
    match std::env::var(OPS_VAR) {
        Ok(v) if !v.trim().is_empty() => {
            let ops: usize = v
                .trim()
                .parse()
                .with_context(|| format!("{OPS_VAR}={v:?} is not a number"))?;
            anyhow::ensure!(
                ops >= 4,
                "{OPS_VAR}={ops}: at least 4 (one brief and one reply per worker)"
            );
            Ok((ops / 4, ops / 4))
        }
        _ => Ok((briefs, replies)),
    }
}
