//! The floor under the SEND→INJECTED p50 goal: what one brief's latency cannot go below on this
//! machine, whatever the gateway, measured in the same run.
//!
//! Why: the goal used to be "p50 − the raw unloaded round trip ≤ +1 ms", which charged the
//! gateway for herdr's own answers: an inject is at least three round trips to herdr on fresh
//! Unix-socket connections (HERDR.md answers one request per connection), and what those cost
//! depends on the machine, not on the gateway. The floor is now two parts, each timed here:
//!
//! - the **raw unloaded round trip** p50 ([`crate::paths::raw`]): the broker's work for a SEND
//!   and its INJECTED (the mean of the raw runs, as the ratios take it);
//! - the **herdr sequence** p50: a bare client ([`crate::floors::herdr_client`]) making one
//!   inject's requests against a fake herdr set up like the forward run's worker side, one whole
//!   inject at a time, serially, timed on the wall clock (the gate and the look at the terminal
//!   together, then the input, then the submit check).
//!
//! The goal ([`crate::report::goals`]) is the 1-sender p50 ≤ floor + 1 ms: the millisecond is the
//! gateway's own (HTTP/MCP, signatures, scheduling, its logic). Both parts are lower bounds: a
//! real herdr does more per request than the fake.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::floors::herdr_client;
use crate::rig::stats::Latency;

/// Injects timed before the samples (connections, allocator, the fake's first answers).
const WARMUP: usize = 20;
/// The fewest samples the p50 is taken over.
pub const MIN_SAMPLES: usize = 200;

/// The measured part of the latency floor: the bare herdr sequence, or why it was not measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyFloor {
    /// One inject's herdr requests, wall clock, one at a time (`None` when not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub herdr_sequence: Option<Latency>,
    /// Why the herdr sequence could not be measured (shown, never fatal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_measured: Option<String>,
}

/// The floor of the 1-sender SEND→INJECTED p50 and its parts, ms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct P50Floor {
    /// The raw unloaded round trip p50 (the mean of the raw runs).
    pub raw_round_trip_p50_ms: f64,
    /// The bare herdr sequence's p50.
    pub herdr_sequence_p50_ms: f64,
    /// Their sum.
    pub floor_ms: f64,
}

impl P50Floor {
    /// The floor, when both parts were measured (a sequence of no samples is not measured).
    pub fn of(raw_round_trip_p50_ms: Option<f64>, measured: Option<&LatencyFloor>) -> Option<P50Floor> {
        let raw = raw_round_trip_p50_ms.filter(|x| x.is_finite())?;
        let herdr = measured?.herdr_sequence.as_ref().filter(|l| l.n > 0)?.p50_ms;
        Some(P50Floor {
            raw_round_trip_p50_ms: raw,
            herdr_sequence_p50_ms: herdr,
            floor_ms: raw + herdr,
        })
    }
}

/// Wall-clock latency of one inject's herdr requests by a bare client, `samples` of them (at least
/// [`MIN_SAMPLES`]), one at a time, against a fake herdr in a directory under `work`.
pub async fn herdr_sequence(work: PathBuf, samples: usize) -> anyhow::Result<Latency> {
    let dir = herdr_client::work_dir(&work, "fleet-bench-latency-floor");
    let (herdr, panes) = herdr_client::start_fake(&dir, 1).await?;
    let socket = herdr.socket_path().to_path_buf();
    let timed = async {
        let pane = panes
            .first()
            .ok_or_else(|| anyhow::anyhow!("the fake herdr has no pane"))?;
        for i in 0..WARMUP {
            herdr_client::inject(&socket, pane, &format!("warm-up {i}")).await?;
        }
        let mut took: Vec<Duration> = Vec::with_capacity(samples.max(MIN_SAMPLES));
        for i in 0..samples.max(MIN_SAMPLES) {
            let text = format!("latency {i}");
            let t0 = Instant::now();
            herdr_client::inject(&socket, pane, &text).await?;
            took.push(t0.elapsed());
        }
        anyhow::Ok(Latency::of(&took))
    }
    .await;
    herdr_client::stop_fake(herdr, &dir).await;
    timed
}

/// The latency floor's measured part, or why it could not be measured.
pub async fn measure(work: PathBuf, samples: usize) -> LatencyFloor {
    match herdr_sequence(work, samples).await {
        Ok(l) => LatencyFloor {
            herdr_sequence: Some(l),
            not_measured: None,
        },
        Err(e) => LatencyFloor {
            herdr_sequence: None,
            not_measured: Some(format!("{e:#}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::latency;

    #[test]
    fn the_floor_is_the_raw_round_trip_plus_the_herdr_sequence() {
        let measured = LatencyFloor {
            herdr_sequence: Some(latency(0.6)),
            not_measured: None,
        };
        let f = P50Floor::of(Some(1.2), Some(&measured)).expect("both parts");
        assert!((f.floor_ms - 1.8).abs() < 1e-9, "{f:?}");
        assert_eq!((f.raw_round_trip_p50_ms, f.herdr_sequence_p50_ms), (1.2, 0.6));
        assert_eq!(P50Floor::of(None, Some(&measured)), None, "no raw run");
        assert_eq!(P50Floor::of(Some(1.2), None), None, "no sequence");
        let failed = LatencyFloor {
            herdr_sequence: None,
            not_measured: Some("no socket".into()),
        };
        assert_eq!(P50Floor::of(Some(1.2), Some(&failed)), None);
        let empty = LatencyFloor {
            herdr_sequence: Some(Latency::default()),
            not_measured: None,
        };
        assert_eq!(P50Floor::of(Some(1.2), Some(&empty)), None, "no sample, no p50");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_herdr_sequence_is_timed_one_inject_at_a_time() {
        let l = herdr_sequence(std::env::temp_dir(), 1).await.expect("the fake answers");
        assert_eq!(l.n, MIN_SAMPLES, "at least the minimum of samples");
        assert!(l.p50_ms > 0.0 && l.p50_ms < 100.0, "{l:?}");
    }
}
