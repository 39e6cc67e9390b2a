//! Section results shaped like a run's, for the tests of the modules that read a report.
//!
//! Why: the report, its goals, the table and the gate are all tested on reports no broker made;
//! building those by hand in each test would bury what the test is about.

use std::collections::BTreeMap;

use crate::fleet::scale::ScalePoint;
use crate::migration;
use crate::migration::{MigrationResult, Rate, Verified};
use crate::paths::forward_pull::{ForwardResult, PullResult};
use crate::paths::raw::EchoResult;
use crate::paths::raw::RawResult;
use crate::report::document::*;
use crate::report::sections::*;
use crate::rig::BrokerInfo;
use crate::rig::stats::{CpuSpent, Latency};

pub fn latency(p50_ms: f64) -> Latency {
    Latency {
        n: 10,
        p50_ms,
        p99_ms: p50_ms,
        max_ms: p50_ms,
        mean_ms: p50_ms,
    }
}

pub fn cpu() -> CpuSpent {
    CpuSpent {
        wall_s: 1.0,
        seconds: BTreeMap::new(),
        machine_s: 0.0,
        capacity_s: 0.0,
    }
}

pub fn echo(round_trips_per_s: f64) -> EchoResult {
    EchoResult {
        flows: 8,
        round_trips: 100,
        round_trips_per_s,
        latency: latency(1.0),
        single_round_trip: latency(1.0),
        cpu: cpu(),
        cpu_ms_per_round_trip: BTreeMap::new(),
    }
}

/// A raw run of `msgs_per_s`, round trip p50 `rtt_ms`, echo rates `echo` and `envelope`.
pub fn raw(msgs_per_s: f64, rtt_ms: f64, echo_rate: f64, envelope: f64) -> RawResult {
    RawResult {
        messages: 1000,
        seconds: 1.0,
        msgs_per_s,
        loaded_latency: latency(5.0),
        one_way: latency(rtt_ms / 2.0),
        round_trip: latency(rtt_ms),
        cpu: cpu(),
        cpu_ms_per_msg: BTreeMap::new(),
        echo: echo(echo_rate),
        echo_envelope: echo(envelope),
    }
}

/// A forward run of `briefs_per_s`, single-sender p50 `p50_ms`, with `cpu_ms_per_brief`.
pub fn forward(briefs_per_s: f64, p50_ms: f64, cpu_ms_per_brief: &[(&str, f64)]) -> ForwardResult {
    ForwardResult {
        briefs: 800,
        senders: 8,
        seconds: 1.0,
        briefs_per_s,
        msgs_per_s: 2.0 * briefs_per_s,
        failures: 0,
        first_failure: None,
        latency: latency(p50_ms),
        loaded_latency: latency(3.0 * p50_ms),
        cpu: cpu(),
        cpu_ms_per_brief: cpu_ms_per_brief.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
    }
}

pub fn pull(replies_per_s: f64, p50_ms: f64) -> PullResult {
    PullResult {
        replies: 1600,
        workers: 8,
        seconds: 1.0,
        replies_per_s,
        lost: 0,
        loaded_latency: latency(2.0 * p50_ms),
        reply_call: latency(1.0),
        latency: latency(p50_ms),
        drain_calls: 10,
        cpu: cpu(),
        cpu_ms_per_reply: BTreeMap::new(),
    }
}

fn rate(msgs_per_s: f64) -> Rate {
    Rate {
        messages: 10,
        seconds: 10.0 / msgs_per_s,
        msgs_per_s,
    }
}

/// A migration of 10 replies at `replies_per_s`, `ok` or with one reply missing.
pub fn migration(replies_per_s: f64, ok: bool) -> MigrationResult {
    MigrationResult {
        replies: 10,
        message_bytes: 1024,
        inbox_max_length: 1000,
        raw_publish: rate(10_000.0),
        seed: rate(10_000.0),
        raw_publish_msgs_per_s_used: 10_000.0,
        raw_move: rate(5_000.0),
        raw_move_batch: migration::RAW_MOVE_BATCH,
        plain_register_ms: 2.0,
        register_call_ms: 20.0,
        seconds: 10.0 / replies_per_s,
        replies_per_s,
        start_delay_ms: 1.0,
        move_seconds: 10.0 / replies_per_s,
        move_replies_per_s: replies_per_s,
        ratio_to_raw_publish: replies_per_s / 10_000.0,
        move_ratio_to_raw_move: replies_per_s / 5_000.0,
        poll_ms: 10.0,
        cpu: cpu(),
        cpu_ms_per_reply: BTreeMap::new(),
        verified: Verified {
            expected: 10,
            found: if ok { 10 } else { 9 },
            missing: if ok { 0 } else { 1 },
            in_order: true,
            ok,
            ..Verified::default()
        },
    }
}

/// A scale level of `entities` with `rss_kib`, its heartbeat round taking `round_ms`.
pub fn scale_point(entities: usize, rss_kib: u64, round_ms: f64) -> ScalePoint {
    ScalePoint {
        entities,
        register_s: 1.0,
        register_per_s: entities as f64,
        rss_kib,
        peak_rss_kib: rss_kib,
        threads: 4,
        fds: 20,
        gateway_cpu_pct: 5.0,
        broker_cpu_pct: Some(5.0),
        window_s: 15.0,
        heartbeat_rounds: 2,
        heartbeat_round_ms: round_ms,
        presences_per_round: entities as f64 + 1.0,
    }
}

/// A report of `sections`, as a run on a quiet 2-core machine would make it.
pub fn report(sections: Sections) -> Report {
    Report::new(
        BrokerInfo {
            spec: "process:rabbitmq".into(),
            version: "3.10.8".into(),
        },
        "fleet-gateway".into(),
        Settings {
            message_bytes: 1024,
            persistent: true,
            publisher_confirms: true,
            mandatory: true,
            raw: RawCounts {
                messages: 1000,
                outstanding_confirms: 1000,
                prefetch: 100,
                round_trip_samples: 100,
            },
            paths: PathCounts {
                pairs: 8,
                briefs: 800,
                replies: 1600,
                latency_samples: 100,
            },
            heartbeat_ms: 5_000,
            migration: MigrationCounts {
                replies: 10,
                message_bytes: 1024,
                outstanding_confirms: 1000,
                raw_move_batch: migration::RAW_MOVE_BATCH,
                poll_ms: 10,
            },
        },
        Machine {
            cores: 2,
            load_before: Some([0.5, 0.5, 0.5]),
            load_after: Some([0.6, 0.5, 0.5]),
        },
        sections,
    )
}

/// A floor of 0.25 ms (side a) and 0.30 ms (side b) with these ceilings.
pub fn cpu_floor(throughput_ceiling: Option<f64>, pull_ceiling: Option<f64>) -> crate::floors::floor::CpuFloor {
    crate::floors::floor::CpuFloor {
        sign_verify_ms: 0.08,
        amqp_ms: Some(0.12),
        mcp_ms: Some(0.05),
        herdr_ms: Some(0.10),
        not_measured: vec![],
        throughput_ceiling,
        pull_ceiling,
    }
}

/// A bare herdr sequence of p50 `p50_ms` (the measured part of the latency floor).
pub fn latency_floor(p50_ms: f64) -> crate::floors::latency_floor::LatencyFloor {
    crate::floors::latency_floor::LatencyFloor {
        herdr_sequence: Some(latency(p50_ms)),
        not_measured: None,
    }
}

/// Both paths beside a raw run (envelope echo 5,000 round trips/s, unloaded round trip p50 2 ms):
/// forward 4,500 briefs/s (0.9× the envelope echo), pull 3,500 replies/s (0.7×), with
/// [`cpu_floor`]'s floor and these ceilings; forward p50 2.9 ms against a latency floor of 2.5 ms
/// (the round trip + a herdr sequence of 0.5 ms).
pub fn path_sections(throughput_ceiling: Option<f64>, pull_ceiling: Option<f64>) -> Sections {
    Sections {
        raw: Some(raw(20_000.0, 2.0, 8_000.0, 5_000.0)),
        forward: Some(ForwardSection {
            result: forward(4_500.0, 2.9, &[("gateway_a", 0.3), ("gateway_b", 0.6)]),
            stages: ForwardStages::default(),
            profile: None,
        }),
        pull: Some(PullSection {
            result: pull(3_500.0, 2.5),
            stages: crate::paths::stages::Breakdown::new(),
        }),
        cpu_floor: Some(cpu_floor(throughput_ceiling, pull_ceiling)),
        latency_floor: Some(latency_floor(0.5)),
        ..Sections::default()
    }
}
