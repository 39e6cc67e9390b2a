//! The floor under the CPU goal: what any gateway pays per brief on this machine, measured in the
//! same run.
//!
//! Why: "gateway CPU per brief ≤ 0.15 ms" is only a fair goal if the work SPEC asks of every
//! gateway costs less than that here. Two parts of a brief are the same for every gateway that
//! speaks AMQP and signs (SPEC §3, §5), whatever it is written in:
//!
//! - **the AMQP client's work**: per side, one confirmed persistent publish, one consume and one
//!   ack. The raw envelope echo ([`super::raw`]) does exactly both sides' share of it with the
//!   same client library and no gateway, so half of the bench's own CPU per echo round trip is one
//!   side's share;
//! - **the signatures**: per side, one Ed25519 signature and one strict verification (a signs the
//!   SEND and verifies the INJECTED; b the other way round), timed here on one thread's CPU clock
//!   over a brief-sized signing input, with the key already parsed.
//!
//! What a gateway spends above the floor is its own (HTTP/MCP, herdr, logging, scheduling, logic).
//! Nothing here is judged: the floor is printed beside the goal.

use std::collections::BTreeMap;

use ed25519_dalek::{Signer as _, SigningKey};
use fleet_conformance::envelope::Envelope;
use serde::{Deserialize, Serialize};

/// The floor of one side of a brief, ms of CPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CpuFloor {
    /// One Ed25519 signature plus one strict verification of a brief's signing input.
    pub sign_verify_ms: f64,
    /// Half the bench's CPU per raw envelope echo round trip (`None` without the raw section).
    pub amqp_ms: Option<f64>,
    /// On a machine whose cores the run kept busy, the highest forward ÷ envelope echo ratio two
    /// gateways *at the floor* could reach: see [`throughput_ceiling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_ceiling: Option<f64>,
}

impl CpuFloor {
    /// The whole floor, once both parts were measured.
    pub fn total_ms(&self) -> Option<f64> {
        self.amqp_ms.map(|a| a + self.sign_verify_ms)
    }
}

/// One thread's CPU time so far.
fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU ms of one sign + one strict verify over a signing input of `size` body bytes: the best of
/// three runs of `rounds` (the least disturbed by other work on the machine).
pub fn sign_verify_ms(size: usize, rounds: usize) -> f64 {
    let key = SigningKey::from_bytes(&[7u8; 32]);
    let public = key.verifying_key();
    // SPEC §3.2's input over a SEND with every header a brief carries.
    let env = Envelope::new("SEND", "main-a", "worker-b", "host-a");
    let body = vec![b'x'; size];
    let input = env.signing_input(&body);
    let rounds = rounds.max(1);
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let start = thread_cpu();
        for _ in 0..rounds {
            let sig = key.sign(&input);
            if public.verify_strict(&input, &sig).is_err() {
                // Cannot happen with a key's own signature; a failure here would make the
                // figure meaningless, so it is not counted.
                return f64::NAN;
            }
        }
        let spent = thread_cpu().saturating_sub(start);
        best = best.min(spent.as_secs_f64() * 1e3 / rounds as f64);
    }
    best
}

/// The CPU ms per unit of the processes `who` together (`None` when one was not measured).
pub fn cpu_of(per_unit: &BTreeMap<String, f64>, who: &[&str]) -> Option<f64> {
    who.iter().map(|w| per_unit.get(*w).copied()).sum()
}

/// The forward ÷ envelope echo ratio two gateways at the floor could reach on a CPU-bound
/// machine.
///
/// Where the cores are the limit, throughput is inversely proportional to the CPU one unit costs
/// the machine. A raw echo round trip costs the bench (both clients) and the broker (`echo_ms`);
/// a brief costs the bench (MCP clients and fake herdrs, which the echo does not need) and the
/// broker (`brief_ms`), plus both gateways. With the gateways' share at `2 × floor`, the ratio is
/// at most `echo_ms ÷ (brief_ms + 2 × floor)`. Meaningful only when the run kept the cores busy
/// (the table shows how busy).
pub fn throughput_ceiling(echo_ms: Option<f64>, brief_ms: Option<f64>, floor_ms: Option<f64>) -> Option<f64> {
    let (echo, cost) = (echo_ms?, brief_ms? + 2.0 * floor_ms?);
    (echo > 0.0 && cost > 0.0).then(|| echo / cost)
}

/// The floor of a run: the signatures timed now, the AMQP share from the raw envelope echo's
/// bench CPU per round trip (when the raw section ran).
pub async fn measure(size: usize, echo_bench_ms_per_round_trip: Option<f64>) -> CpuFloor {
    let sign_verify_ms = tokio::task::spawn_blocking(move || sign_verify_ms(size, 500))
        .await
        .unwrap_or(f64::NAN);
    CpuFloor {
        sign_verify_ms,
        amqp_ms: echo_bench_ms_per_round_trip.map(|ms| ms / 2.0),
        throughput_ceiling: None,
    }
}

/// The table line shown beside the CPU goal.
pub fn line(floor: &CpuFloor) -> String {
    match (floor.amqp_ms, floor.total_ms()) {
        (Some(amqp), Some(total)) => format!(
            "  floor per side (any gateway here): AMQP client {amqp:.3} (raw envelope echo, bench CPU ÷ 2) + Ed25519 sign + verify {:.3} = {total:.3} ms",
            floor.sign_verify_ms
        ),
        _ => format!(
            "  floor per side (any gateway here): Ed25519 sign + verify {:.3} ms (+ the AMQP client's share: run the raw section to see it)",
            floor.sign_verify_ms
        ),
    }
}

/// The ceiling line, when it was computed.
pub fn ceiling_line(floor: &CpuFloor) -> Option<String> {
    floor.throughput_ceiling.map(|c| {
        format!(
            "  ceiling: with both gateways at that floor, forward ÷ envelope echo ≤ {c:.2}× on this machine while its cores are busy (the bench's MCP clients and fake herdrs, and the broker, share them)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_and_its_check_cost_something_and_not_much() {
        let ms = sign_verify_ms(1024, 20);
        assert!(ms > 0.0 && ms < 50.0, "{ms} ms");
    }

    #[test]
    fn the_floor_adds_up_only_when_both_parts_were_measured() {
        let f = CpuFloor {
            sign_verify_ms: 0.08,
            amqp_ms: Some(0.12),
            throughput_ceiling: None,
        };
        assert!((f.total_ms().unwrap_or(0.0) - 0.20).abs() < 1e-9);
        assert!(line(&f).contains("= 0.200 ms"));
        let g = CpuFloor { amqp_ms: None, ..f };
        assert_eq!(g.total_ms(), None);
    }

    #[test]
    fn the_ceiling_charges_the_gateways_their_floor_only() {
        let m = |b: f64, k: f64| BTreeMap::from([("bench".to_string(), b), ("broker".to_string(), k)]);
        let (echo, brief) = (m(0.2, 0.6), m(0.4, 0.8));
        let both = ["bench", "broker"];
        // echo 0.2 + 0.6 = 0.8; brief 0.4 + 0.8 + 2 × 0.2 = 1.6 → 0.5×.
        let c = throughput_ceiling(cpu_of(&echo, &both), cpu_of(&brief, &both), Some(0.2)).unwrap_or(0.0);
        assert!((c - 0.5).abs() < 1e-9, "{c}");
        assert_eq!(cpu_of(&BTreeMap::new(), &both), None);
        assert_eq!(throughput_ceiling(None, cpu_of(&brief, &both), Some(0.2)), None);
    }
}
