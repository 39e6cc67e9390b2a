//! The floor under the CPU goals: what any gateway pays per brief (forward path) and per reply
//! (pull path) on this machine, measured in the same run.
//!
//! Why: a gateway's CPU is only fairly judged against the work SPEC asks of every gateway here,
//! not against an absolute number another machine set. Two parts of a brief are the same for every
//! gateway that speaks AMQP and signs (SPEC §3, §5), whatever it is written in:
//!
//! - **the AMQP client's work**: per side, one confirmed persistent publish, one consume and one
//!   ack. The raw envelope echo ([`crate::paths::raw`]) does exactly both sides' share of it with the
//!   same client library and no gateway, so half of the bench's own CPU per echo round trip is one
//!   side's share;
//! - **the signatures**: per side, one Ed25519 signature and one strict verification (a signs the
//!   SEND and verifies the INJECTED; b the other way round), timed here on one thread's CPU clock
//!   over a brief-sized signing input, with the key already parsed.
//!
//! Each side also speaks one local protocol SPEC and herdr impose: gateway a serves the sender's
//! MCP call over HTTP, gateway b makes herdr's four one-shot requests of an inject. Their floors
//! are measured with minimal implementations in [`crate::floors::local_floor`] and added per side.
//!
//! A pull reply costs both gateways together: the worker's `bridge_reply` MCP call served by b,
//! which signs and publishes it (confirmed, persistent); a consumes it, verifies it strictly,
//! holds it and acks it; the main drains it with `bridge_wait` / `bridge_poll` MCP calls served by
//! a, batched (the run's drain calls per reply). That is one side's AMQP share (one publish, one
//! consume, one ack), one sign + one verify, and the MCP floor once per call served
//! ([`CpuFloor::pull_both_sides_ms`]).
//!
//! What a gateway spends above its side's floor is its own (the MCP framework beyond bare HTTP,
//! logging, scheduling, logic). This module measures and prints the floors and the ceilings they
//! allow; the goals ([`crate::report::goals`]) judge each gateway's CPU against its side's floor and each
//! path's throughput against its ceiling.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ed25519_dalek::{Signer as _, SigningKey};
use fleet_conformance::envelope::Envelope;
use serde::{Deserialize, Serialize};

use crate::paths::forward_pull::PullResult;
use crate::rig::stats::thread_cpu;

/// The floor of each side of a brief (and of both sides of a pull reply), ms of CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuFloor {
    /// One Ed25519 signature plus one strict verification of a brief's signing input.
    pub sign_verify_ms: f64,
    /// Half the bench's CPU per raw envelope echo round trip (`None` without the raw section).
    pub amqp_ms: Option<f64>,
    /// Side a's local protocol: one `tools/call` served by a bare HTTP server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_ms: Option<f64>,
    /// Side b's local protocol: an inject's four one-shot herdr requests ([C-20] added `pane.process_info`) by a bare client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub herdr_ms: Option<f64>,
    /// Why a local floor could not be measured (shown, never fatal).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_measured: Vec<String>,
    /// On a machine whose cores the run kept busy, the highest forward ÷ envelope echo ratio two
    /// gateways *at the floor* could reach: see [`throughput_ceiling`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_ceiling: Option<f64>,
    /// The same for the pull path: the highest pull ÷ envelope echo ratio two gateways at their
    /// pull floor could reach ([`pull_ceiling`]); `None` without the pull section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_ceiling: Option<f64>,
}

impl CpuFloor {
    /// What both sides pay alike (AMQP client and signatures), once both parts were measured.
    pub fn total_ms(&self) -> Option<f64> {
        self.amqp_ms.map(|a| a + self.sign_verify_ms)
    }

    /// Side a's floor: the shared part plus serving the MCP call (when it was measured).
    pub fn side_a_ms(&self) -> Option<f64> {
        Some(self.total_ms()? + self.mcp_ms?)
    }

    /// Side b's floor: the shared part plus herdr's four requests (when they were measured).
    pub fn side_b_ms(&self) -> Option<f64> {
        Some(self.total_ms()? + self.herdr_ms?)
    }

    /// Both gateways' floor for one brief: the sides' floors, or twice the shared part when a
    /// local floor is missing.
    pub fn both_sides_ms(&self) -> Option<f64> {
        match (self.side_a_ms(), self.side_b_ms()) {
            (Some(a), Some(b)) => Some(a + b),
            _ => self.total_ms().map(|t| 2.0 * t),
        }
    }

    /// Both gateways' floor for one pull reply, when the shared part and the MCP floor were
    /// measured: one side's AMQP share (b's publish, a's consume and ack), one sign (b) + one
    /// verify (a), and one MCP call served for the `bridge_reply` plus `drain_calls_per_reply`
    /// for the main's `bridge_wait` / `bridge_poll`.
    pub fn pull_both_sides_ms(&self, drain_calls_per_reply: f64) -> Option<f64> {
        Some(self.total_ms()? + self.mcp_ms? * (1.0 + drain_calls_per_reply))
    }
}

/// The main's drain calls per reply drained in a pull run (`None` when none was drained).
pub fn drain_calls_per_reply(pull: &PullResult) -> Option<f64> {
    (pull.replies > 0).then(|| pull.drain_calls as f64 / pull.replies as f64)
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
/// machine, with `floors_ms` both gateways' floor for one brief ([`CpuFloor::both_sides_ms`]);
/// the pull path's the same way per reply ([`pull_ceiling`]).
///
/// Where the cores are the limit, throughput is inversely proportional to the CPU one unit costs
/// the machine. A raw echo round trip costs the bench (both clients) and the broker (`echo_ms`);
/// a brief costs the bench (MCP clients and fake herdrs, which the echo does not need) and the
/// broker (`brief_ms`, or a reply's), plus both gateways. With the gateways' share at their
/// floors, the ratio is at most `echo_ms ÷ (brief_ms + floors_ms)`. Meaningful only when the run
/// kept the cores busy (the table shows how busy).
pub fn throughput_ceiling(echo_ms: Option<f64>, brief_ms: Option<f64>, floors_ms: Option<f64>) -> Option<f64> {
    let (echo, cost) = (echo_ms?, brief_ms? + floors_ms?);
    (echo > 0.0 && cost > 0.0).then(|| echo / cost)
}

/// The pull ÷ envelope echo ratio two gateways at their pull floor could reach: `echo_ms` (the
/// bench's and the broker's CPU per envelope echo round trip) over the bench's and the broker's
/// CPU per reply in `pull` plus both gateways' pull floor at the run's drain calls per reply.
pub fn pull_ceiling(floor: &CpuFloor, echo_ms: Option<f64>, pull: &PullResult) -> Option<f64> {
    let reply_ms = cpu_of(&pull.cpu_ms_per_reply, &["bench", "broker"]);
    let floors_ms = floor.pull_both_sides_ms(drain_calls_per_reply(pull)?);
    throughput_ceiling(echo_ms, reply_ms, floors_ms)
}

/// The floor of a run: the signatures and the local protocols timed now (`parallel` at once, as
/// the forward run's senders; the fake herdr in `work`), the AMQP share from the raw envelope
/// echo's bench CPU per round trip (when the raw section ran).
pub async fn measure(
    size: usize,
    parallel: usize,
    work: PathBuf,
    echo_bench_ms_per_round_trip: Option<f64>,
) -> CpuFloor {
    let sign_verify_ms = tokio::task::spawn_blocking(move || sign_verify_ms(size, 500))
        .await
        .unwrap_or(f64::NAN);
    let (mcp, herdr) = crate::floors::local_floor::measure(size, parallel, work).await;
    let mut not_measured = Vec::new();
    let mut keep = |what: &str, r: Result<f64, String>| match r {
        Ok(ms) => Some(ms),
        Err(e) => {
            not_measured.push(format!("{what}: {e}"));
            None
        }
    };
    let (mcp_ms, herdr_ms) = (keep("MCP over HTTP", mcp), keep("herdr", herdr));
    CpuFloor {
        sign_verify_ms,
        amqp_ms: echo_bench_ms_per_round_trip.map(|ms| ms / 2.0),
        mcp_ms,
        herdr_ms,
        not_measured,
        throughput_ceiling: None,
        pull_ceiling: None,
    }
}

/// The table lines shown beside the CPU goal: the shared floor, each side's with its local
/// protocol, and what each gateway of the run spent above its side's floor (`spent`: gateway
/// CPU ms per brief, by process name).
pub fn lines(floor: &CpuFloor, spent: &BTreeMap<String, f64>) -> Vec<String> {
    let mut out = vec![match (floor.amqp_ms, floor.total_ms()) {
        (Some(amqp), Some(total)) => format!(
            "  floor per side (any gateway here): AMQP client {amqp:.3} (raw envelope echo, bench CPU ÷ 2) + Ed25519 sign + verify {:.3} = {total:.3} ms",
            floor.sign_verify_ms
        ),
        _ => format!(
            "  floor per side (any gateway here): Ed25519 sign + verify {:.3} ms (+ the AMQP client's share: run the raw section to see it)",
            floor.sign_verify_ms
        ),
    }];
    let side = |name: &str, what: &str, part: Option<f64>, whole: Option<f64>, process: &str| {
        let part = part?;
        let mut l = format!("    {name}: + {what} {part:.3}");
        if let Some(w) = whole {
            l.push_str(&format!(" = {w:.3} ms"));
            if let Some(ms) = spent.get(process) {
                l.push_str(&format!(
                    " · gateway {name} spent {ms:.3}: {:.3} above it ({:.1}× the floor)",
                    ms - w,
                    ms / w
                ));
            }
        }
        Some(l)
    };
    out.extend(side(
        "a",
        "serving one MCP call over HTTP (bare hyper server, JSON answer)",
        floor.mcp_ms,
        floor.side_a_ms(),
        "gateway_a",
    ));
    out.extend(side(
        "b",
        "herdr's four one-shot requests of an inject (bare client)",
        floor.herdr_ms,
        floor.side_b_ms(),
        "gateway_b",
    ));
    out.extend(floor.not_measured.iter().map(|why| format!("    not measured: {why}")));
    out
}

/// The pull path's floor line (both gateways per reply, and what the run's gateways spent above
/// it) and its ceiling line, printed beside the pull goal.
pub fn pull_lines(floor: &CpuFloor, pull: &PullResult) -> Vec<String> {
    let calls = drain_calls_per_reply(pull);
    let mut out = vec![match (floor.amqp_ms, floor.mcp_ms, calls) {
        (Some(amqp), Some(mcp), Some(calls)) => {
            let whole = floor.pull_both_sides_ms(calls).unwrap_or(f64::NAN);
            let mut l = format!(
                "  pull floor per reply, both gateways (any gateway here): AMQP client {amqp:.3} (one publish + consume + ack) + Ed25519 sign + verify {:.3} + MCP call served {mcp:.3} × (1 reply + {calls:.2} drain calls) = {whole:.3} ms",
                floor.sign_verify_ms
            );
            if let Some(ms) = cpu_of(&pull.cpu_ms_per_reply, &["gateway_a", "gateway_b"]) {
                l.push_str(&format!(
                    " · gateways a + b spent {ms:.3}: {:.3} above it ({:.1}× the floor)",
                    ms - whole,
                    ms / whole
                ));
            }
            l
        }
        _ => "  pull floor per reply: not measured (it needs the raw section's AMQP share, the MCP floor and a reply drained)"
            .to_string(),
    }];
    out.extend(floor.pull_ceiling.map(|c| {
        format!(
            "  pull ceiling: with both gateways at their pull floor, pull ÷ envelope echo ≤ {c:.2}× on this machine while its cores are busy (the bench's MCP clients and the broker share them)"
        )
    }));
    out
}

/// The ceiling line, when it was computed.
pub fn ceiling_line(floor: &CpuFloor) -> Option<String> {
    floor.throughput_ceiling.map(|c| {
        format!(
            "  ceiling: with both gateways at their floors, forward ÷ envelope echo ≤ {c:.2}× on this machine while its cores are busy (the bench's MCP clients and fake herdrs, and the broker, share them)"
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
            mcp_ms: None,
            herdr_ms: None,
            not_measured: vec![],
            throughput_ceiling: None,
            pull_ceiling: None,
        };
        assert!((f.total_ms().unwrap_or(0.0) - 0.20).abs() < 1e-9);
        assert!(lines(&f, &BTreeMap::new())[0].contains("= 0.200 ms"));
        assert_eq!(f.side_a_ms(), None);
        assert!(
            (f.both_sides_ms().unwrap_or(0.0) - 0.40).abs() < 1e-9,
            "twice the shared part"
        );
        let g = CpuFloor { amqp_ms: None, ..f };
        assert_eq!(g.total_ms(), None);
        assert_eq!(g.both_sides_ms(), None);
    }

    #[test]
    fn each_side_adds_its_local_protocol_and_shows_what_is_above_it() {
        let f = CpuFloor {
            sign_verify_ms: 0.08,
            amqp_ms: Some(0.12),
            mcp_ms: Some(0.05),
            herdr_ms: Some(0.10),
            not_measured: vec![],
            throughput_ceiling: None,
            pull_ceiling: None,
        };
        assert!((f.side_a_ms().unwrap_or(0.0) - 0.25).abs() < 1e-9);
        assert!((f.side_b_ms().unwrap_or(0.0) - 0.30).abs() < 1e-9);
        assert!((f.both_sides_ms().unwrap_or(0.0) - 0.55).abs() < 1e-9);
        let spent = BTreeMap::from([("gateway_a".to_string(), 0.5), ("gateway_b".to_string(), 0.45)]);
        let l = lines(&f, &spent);
        assert!(
            l[1].contains("= 0.250 ms") && l[1].contains("0.250 above it (2.0× the floor)"),
            "{}",
            l[1]
        );
        assert!(
            l[2].contains("= 0.300 ms") && l[2].contains("0.150 above it (1.5× the floor)"),
            "{}",
            l[2]
        );
        let missing = CpuFloor {
            herdr_ms: None,
            not_measured: vec!["herdr: no socket".into()],
            ..f
        };
        let l = lines(&missing, &spent);
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(l[2].contains("not measured: herdr: no socket"));
    }

    #[test]
    fn the_ceiling_charges_the_gateways_their_floor_only() {
        let m = |b: f64, k: f64| BTreeMap::from([("bench".to_string(), b), ("broker".to_string(), k)]);
        let (echo, brief) = (m(0.2, 0.6), m(0.4, 0.8));
        let both = ["bench", "broker"];
        // echo 0.2 + 0.6 = 0.8; brief 0.4 + 0.8 + 2 × 0.2 = 1.6 → 0.5×.
        let c = throughput_ceiling(cpu_of(&echo, &both), cpu_of(&brief, &both), Some(0.4)).unwrap_or(0.0);
        assert!((c - 0.5).abs() < 1e-9, "{c}");
        assert_eq!(cpu_of(&BTreeMap::new(), &both), None);
        assert_eq!(throughput_ceiling(None, cpu_of(&brief, &both), Some(0.4)), None);
    }

    fn pull_run(replies: usize, drain_calls: usize, per_reply: &[(&str, f64)]) -> PullResult {
        PullResult {
            replies,
            drain_calls,
            cpu_ms_per_reply: per_reply.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..crate::fixtures::pull(1_000.0, 2.0)
        }
    }

    #[test]
    fn the_pull_floor_is_one_side_of_amqp_one_signature_pair_and_every_mcp_call_served() {
        let f = CpuFloor {
            sign_verify_ms: 0.08,
            amqp_ms: Some(0.12),
            mcp_ms: Some(0.05),
            herdr_ms: None,
            not_measured: vec![],
            throughput_ceiling: None,
            pull_ceiling: None,
        };
        // 0.12 + 0.08 + 0.05 × (1 + 0.2) = 0.26: herdr plays no part in a reply.
        let p = pull_run(1_000, 200, &[("gateway_a", 0.3), ("gateway_b", 0.22)]);
        let calls = drain_calls_per_reply(&p).unwrap_or(f64::NAN);
        assert!((calls - 0.2).abs() < 1e-9, "{calls}");
        let floor = f.pull_both_sides_ms(calls).unwrap_or(f64::NAN);
        assert!((floor - 0.26).abs() < 1e-9, "{floor}");
        assert_eq!(drain_calls_per_reply(&pull_run(0, 3, &[])), None, "nothing drained");
        assert_eq!(
            CpuFloor {
                mcp_ms: None,
                ..f.clone()
            }
            .pull_both_sides_ms(0.2),
            None
        );
        assert_eq!(
            CpuFloor {
                amqp_ms: None,
                ..f.clone()
            }
            .pull_both_sides_ms(0.2),
            None
        );
        // Echo 0.8 (bench + broker) over reply 0.3 + 0.24 (bench + broker) + floor 0.26 → 1.0×.
        let p = pull_run(
            1_000,
            200,
            &[
                ("bench", 0.3),
                ("broker", 0.24),
                ("gateway_a", 0.3),
                ("gateway_b", 0.22),
            ],
        );
        let c = pull_ceiling(&f, Some(0.8), &p).unwrap_or(f64::NAN);
        assert!((c - 1.0).abs() < 1e-9, "{c}");
        assert_eq!(pull_ceiling(&f, None, &p), None);
        assert_eq!(
            pull_ceiling(&f, Some(0.8), &pull_run(1_000, 200, &[("bench", 0.3)])),
            None
        );
        let l = pull_lines(
            &CpuFloor {
                pull_ceiling: Some(c),
                ..f.clone()
            },
            &p,
        );
        assert!(
            l[0].contains("× (1 reply + 0.20 drain calls) = 0.260 ms")
                && l[0].contains("spent 0.520: 0.260 above it (2.0× the floor)"),
            "{l:?}"
        );
        assert!(l[1].contains("pull ÷ envelope echo ≤ 1.00×"), "{l:?}");
        let l = pull_lines(&CpuFloor { mcp_ms: None, ..f }, &p);
        assert_eq!(l.len(), 1, "no ceiling computed: {l:?}");
        assert!(l[0].contains("pull floor per reply: not measured"), "{l:?}");
    }
}
