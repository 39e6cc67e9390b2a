//! The soak's knobs: the environment variables that override the feature's operation counts, set
//! the nemesis cycle and seed its random picks, and the cycle used when none is given.

use anyhow::{Context as _, anyhow};

use super::nemesis::Strike;

/// Operations in all (briefs + replies), overriding the feature's numbers.
pub(super) const OPS_VAR: &str = "FLEET_SOAK_OPS";
/// The nemesis cycle, e.g. `kill,pause,cut,close,restart`.
pub(super) const NEMESIS_VAR: &str = "FLEET_SOAK_NEMESIS";
/// The seed of the nemesis' random picks (which host, which connection).
pub(super) const SEED_VAR: &str = "FLEET_SOAK_SEED";

/// The nemesis cycle unless `FLEET_SOAK_NEMESIS` says otherwise: one broker restart in nine
/// strikes (it takes the broker away for seconds, the others for a moment).
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

/// The run's settings, from the feature text and the environment.
#[derive(Debug, Clone)]
pub(super) struct SoakConfig {
    pub(super) cycle: Vec<Strike>,
    pub(super) seed: u64,
}

impl SoakConfig {
    pub(super) fn from_env() -> anyhow::Result<SoakConfig> {
        let cycle = match std::env::var(NEMESIS_VAR) {
            Ok(v) if !v.trim().is_empty() => v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    Strike::parse(s).ok_or_else(|| {
                        anyhow!("{NEMESIS_VAR}={v:?}: unknown nemesis {s:?}; expected kill, pause, cut, close, restart")
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
            _ => DEFAULT_CYCLE.to_vec(),
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
