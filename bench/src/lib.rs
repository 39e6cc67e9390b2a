//! `fleet-bench`: the gateway's message paths measured against the raw broker, in one run.
//!
//! Speed is measured, not asserted in tests (issue 9). Every gateway figure is divided by a raw
//! lapin baseline taken on the same broker, vhost, message size, durability and confirm settings
//! in the same run, because absolute numbers on a shared 2-core machine swing by ±30 % from one
//! minute to the next. The raw baseline runs before and after the gateway paths; ratios use their
//! mean, and the spread between the two says how noisy the run was.
//!
//! - [`raw`] — the baseline: pipelined confirms → durable queue → manual-ack consumer
//! - [`paths`] — the forward (SEND→INJECTED) and pull (REPLY → `bridge_poll`) paths over MCP
//! - [`presence`] — roster convergence after a gateway start
//! - [`scale`] — gateway RSS and CPU with 1, 100, 1000 local entities
//! - [`presence_model`] — from the scale run's per-message costs, presence priced for fleets of
//!   10 to 1,000 hosts, per-entity (SPEC §8) and host-batched (docs/PRESENCE-BATCH.md)
//! - [`migration`] — a v1.0.0 legacy queue moved by a gateway (MIG-2) beside a raw publish and a
//!   raw get → publish → ack move of the same messages, then checked for losses
//! - [`stages`] — the gateways' own `fleet_stage_seconds` read around each path: where the time goes
//! - [`stats`] — percentiles and `/proc` CPU accounting
//! - [`gate`] — the regression gate: ratios against `fixtures/bench/baseline.json`, and whether
//!   the machine was quiet enough to trust them
//! - [`fleet`] — the hosts (gateway processes + fake herdrs) the paths run through

pub mod cli;
pub mod fleet;
pub mod gate;
pub mod migration;
pub mod paths;
pub mod presence;
pub mod presence_model;
pub mod raw;
pub mod scale;
pub mod stages;
pub mod stats;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::{Value, json};

use fleet::Fleet;
use fleet_conformance::broker::{Broker, BrokerSpec};
use stats::CpuProbe;

/// The goals of issue 9.
pub const GOAL_FORWARD_RATIO: f64 = 0.45;
pub const GOAL_PULL_RATIO: f64 = 0.8;
pub const GOAL_FORWARD_P50_DELTA_MS: f64 = 2.0;

/// Everything a run can be told.
#[derive(Debug, Clone)]
pub struct Options {
    pub broker: String,
    pub gateway_cmd: String,
    pub out: PathBuf,
    pub sections: BTreeSet<String>,
    pub raw: raw::RawSettings,
    pub paths: paths::PathSettings,
    pub presence_trials: usize,
    pub scale: scale::ScaleSettings,
    pub migration: migration::MigrationSettings,
    /// Keep the work directory (gateway logs) after the run.
    pub keep: bool,
    /// The checked-in ratios the regression gate compares with ([`gate`]).
    pub baseline: PathBuf,
    /// Write this run's ratios to `baseline` instead of comparing with it.
    pub record_baseline: bool,
}

/// The baseline in this repository: `fixtures/bench/baseline.json`.
pub fn default_baseline() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/bench/baseline.json")
}

/// The sections a run may include.
pub const SECTIONS: [&str; 6] = ["raw", "forward", "pull", "presence", "scale", "migration"];

/// Runs the selected sections and returns the report (also written to `opts.out`).
pub async fn run(opts: &Options) -> anyhow::Result<Value> {
    let load_before = stats::load_average();
    let spec = BrokerSpec::parse(&opts.broker)?;
    eprintln!("fleet-bench: starting broker {} …", spec.label());
    let broker = Broker::start(&spec)
        .await
        .with_context(|| format!("starting broker {}", spec.label()))?;
    let result = run_on(&broker, opts).await;
    if let Err(e) = broker.stop().await {
        eprintln!("fleet-bench: could not stop the broker: {e}");
    }
    let mut report = result?;
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let load_after = stats::load_average();
    report["machine"] = json!({
        "cores": cores,
        "load_before": load_before,
        "load_after": load_after,
    });
    let load = [load_before.map(|l| l[0]), load_after.map(|l| l[0])];
    let trusted = load.iter().all(|l| gate::quiet(*l, cores));
    let compared = if opts.record_baseline {
        let recorded = format!(
            "{} · {} · load {:?} on {cores} cores{}",
            report["broker"]["spec"].as_str().unwrap_or("?"),
            report["broker"]["version"].as_str().unwrap_or("?"),
            load,
            if trusted { "" } else { " (TOO LOADED)" }
        );
        let b = gate::baseline_of(&report, recorded);
        if let Some(dir) = opts.baseline.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(&opts.baseline, serde_json::to_vec_pretty(&b)?)
            .with_context(|| format!("writing {}", opts.baseline.display()))?;
        eprintln!(
            "fleet-bench: baseline of {} ratios written to {}",
            b.ratios.len(),
            opts.baseline.display()
        );
        None
    } else {
        gate::read_baseline(&opts.baseline)?.map(|b| gate::compare(&report, &b))
    };
    report["gate"] = serde_json::to_value(gate::Gate {
        baseline_file: opts.baseline.display().to_string(),
        compared,
        load,
        cores,
        trusted,
    })?;
    if let Some(dir) = opts.out.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&opts.out, serde_json::to_vec_pretty(&report)?)
        .with_context(|| format!("writing {}", opts.out.display()))?;
    Ok(report)
}

fn on(opts: &Options, section: &str) -> bool {
    opts.sections.contains(section)
}

async fn run_on(broker: &Broker, opts: &Options) -> anyhow::Result<Value> {
    let vhost = broker.create_vhost().await?;
    let url = broker.amqp_url(&vhost);
    let broker_pid = stats::own_broker_pid();
    let me = Some(std::process::id());
    let work = std::env::temp_dir().join(format!(
        "fleet-bench-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&work)?;
    eprintln!(
        "fleet-bench: broker {} ready (pid {broker_pid:?}); work dir {}",
        broker.version(),
        work.display()
    );
    let mut report = json!({
        "broker": {"spec": broker.spec().label(), "version": broker.version()},
        "gateway_cmd": opts.gateway_cmd,
        "settings": {
            "message_bytes": opts.paths.size,
            "persistent": true,
            "publisher_confirms": true,
            "mandatory": true,
            "raw": {"messages": opts.raw.messages, "outstanding_confirms": opts.raw.outstanding,
                    "prefetch": opts.raw.prefetch, "round_trip_samples": opts.raw.rtt_samples},
            "paths": {"pairs": opts.paths.pairs, "briefs": opts.paths.briefs, "replies": opts.paths.replies,
                      "latency_samples": opts.paths.latency_samples},
            "heartbeat_ms": "gateway default (SPEC: 5000)",
            "migration": {"replies": opts.migration.replies, "message_bytes": opts.migration.size,
                          "outstanding_confirms": opts.migration.outstanding,
                          "raw_move_batch": migration::RAW_MOVE_BATCH,
                          "poll_ms": opts.migration.poll.as_millis() as u64},
        },
    });
    let raw_cpu = CpuProbe::default().with("bench", me).with("broker", broker_pid);
    let mut raws = Vec::new();
    if on(opts, "raw") {
        eprintln!("fleet-bench: raw baseline …");
        raws.push(raw::run(&url, &opts.raw, &raw_cpu).await?);
    }
    let hosts: Vec<String> = ["a", "b", "s"]
        .iter()
        .map(|s| s.to_string())
        .chain((1..=opts.presence_trials).map(|i| format!("c{i}")))
        .chain([migration::HOST.to_string()])
        .collect();
    let mut fleet = Fleet::new(work.clone(), url.clone(), opts.gateway_cmd.clone(), &hosts);
    let env = BTreeMap::new();
    let outcome = async {
        let needs_ab = ["forward", "pull", "presence"].iter().any(|s| on(opts, s));
        if needs_ab {
            fleet.start_host("a", &env).await?;
            fleet.start_host("b", &env).await?;
        }
        let path_cpu = CpuProbe::default()
            .with("bench", me)
            .with("broker", broker_pid)
            .with("gateway_a", fleet.hosts.get("a").and_then(|h| h.gateway.pid()))
            .with("gateway_b", fleet.hosts.get("b").and_then(|h| h.gateway.pid()));
        if on(opts, "forward") || on(opts, "pull") {
            let pairs = paths::pairs(&fleet, opts.paths.pairs.max(1)).await?;
            if on(opts, "forward") {
                eprintln!("fleet-bench: forward path …");
                let before = stages::scrape(&fleet, &["a", "b"]).await;
                report["forward"] = serde_json::to_value(paths::forward(&pairs, &opts.paths, &path_cpu).await?)?;
                let after = stages::scrape(&fleet, &["a", "b"]).await;
                report["forward"]["stages"] = serde_json::to_value(stages::breakdown(&before, &after))?;
            }
            if on(opts, "pull") {
                eprintln!("fleet-bench: pull path …");
                let before = stages::scrape(&fleet, &["a", "b"]).await;
                report["pull"] = serde_json::to_value(paths::pull(&pairs, &opts.paths, &path_cpu).await?)?;
                let after = stages::scrape(&fleet, &["a", "b"]).await;
                report["pull"]["stages"] = serde_json::to_value(stages::breakdown(&before, &after))?;
            }
        }
        if on(opts, "raw") && (on(opts, "forward") || on(opts, "pull")) {
            eprintln!("fleet-bench: raw baseline again …");
            raws.push(raw::run(&url, &opts.raw, &raw_cpu).await?);
        }
        if on(opts, "presence") {
            eprintln!("fleet-bench: presence convergence …");
            let names: Vec<String> = (1..=opts.presence_trials).map(|i| format!("c{i}")).collect();
            let r = presence::run(&mut fleet, &names, &env, 5_000).await?;
            report["presence"] = serde_json::to_value(r)?;
        }
        fleet.stop_host("a").await;
        fleet.stop_host("b").await;
        if on(opts, "migration") {
            eprintln!("fleet-bench: migration of {} legacy replies …", opts.migration.replies);
            let r = migration::run(&mut fleet, &url, &opts.migration, me, broker_pid).await;
            fleet.stop_host(migration::HOST).await;
            report["migration"] = serde_json::to_value(r?)?;
        }
        if on(opts, "scale") {
            eprintln!("fleet-bench: scale {:?} …", opts.scale.levels);
            fleet.start_host("s", &env).await?;
            let points = scale::run(&fleet, &url, &opts.scale, broker_pid).await?;
            if let Some(m) = presence_model::model(&points, presence_model::HEARTBEAT_S) {
                report["presence_model"] = serde_json::to_value(m)?;
            }
            report["scale"] = serde_json::to_value(points)?;
        }
        anyhow::Ok(())
    }
    .await;
    fleet.shutdown().await;
    let _ = broker.delete_vhost(&vhost).await;
    if outcome.is_ok() && !opts.keep {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        eprintln!("fleet-bench: gateway logs kept in {}", work.display());
    }
    outcome?;
    if !raws.is_empty() {
        report["raw"] = serde_json::to_value(&raws[0])?;
        if let Some(after) = raws.get(1) {
            report["raw_after"] = serde_json::to_value(after)?;
        }
    }
    add_ratios(&mut report);
    Ok(report)
}

/// The raw baseline figure ratios are taken against: the mean of the runs before and after.
fn raw_rate(report: &Value) -> Option<f64> {
    let a = report["raw"]["msgs_per_s"].as_f64()?;
    Some(match report["raw_after"]["msgs_per_s"].as_f64() {
        Some(b) => (a + b) / 2.0,
        None => a,
    })
}

fn raw_echo_rate(report: &Value) -> Option<f64> {
    let a = report["raw"]["echo"]["round_trips_per_s"].as_f64()?;
    Some(match report["raw_after"]["echo"]["round_trips_per_s"].as_f64() {
        Some(b) => (a + b) / 2.0,
        None => a,
    })
}

fn raw_envelope_echo_rate(report: &Value) -> Option<f64> {
    let a = report["raw"]["echo_envelope"]["round_trips_per_s"].as_f64()?;
    Some(
        match report["raw_after"]["echo_envelope"]["round_trips_per_s"].as_f64() {
            Some(b) => (a + b) / 2.0,
            None => a,
        },
    )
}

fn raw_rtt_p50(report: &Value) -> Option<f64> {
    let a = report["raw"]["round_trip"]["p50_ms"].as_f64()?;
    Some(match report["raw_after"]["round_trip"]["p50_ms"].as_f64() {
        Some(b) => (a + b) / 2.0,
        None => a,
    })
}

fn goal(value: Option<f64>, goal: f64, at_least: bool) -> Value {
    match value {
        Some(v) => json!({"value": v, "goal": goal, "met": if at_least { v >= goal } else { v <= goal }}),
        None => Value::Null,
    }
}

fn add_ratios(report: &mut Value) {
    let rate = raw_rate(report);
    let rtt = raw_rtt_p50(report);
    let fwd = report["forward"]["briefs_per_s"].as_f64();
    let pull = report["pull"]["replies_per_s"].as_f64();
    let fwd_p50 = report["forward"]["latency"]["p50_ms"].as_f64();
    let pull_p50 = report["pull"]["latency"]["p50_ms"].as_f64();
    let ratio = |x: Option<f64>| Some(x? / rate?);
    let delta = |x: Option<f64>| Some(x? - rtt?);
    let echo = raw_echo_rate(report);
    report["ratios"] = json!({
        "raw_msgs_per_s_used": rate,
        "raw_echo_round_trips_per_s_used": echo,
        "forward_briefs_to_raw_echo": Some(fwd.zip(echo).map(|(a, b)| a / b)).flatten(),
        "forward_briefs_to_raw_envelope_echo": Some(fwd.zip(raw_envelope_echo_rate(report)).map(|(a, b)| a / b)).flatten(),
        "raw_round_trip_p50_ms_used": rtt,
        "forward_briefs_to_raw": ratio(fwd),
        "forward_msgs_to_raw": ratio(fwd.map(|f| 2.0 * f)),
        "pull_replies_to_raw": ratio(pull),
        "forward_p50_minus_raw_round_trip_ms": delta(fwd_p50),
        "forward_p50_to_raw_round_trip": Some(fwd_p50.zip(rtt).map(|(a, b)| a / b)).flatten(),
        "pull_p50_minus_raw_round_trip_ms": delta(pull_p50),
        "migration_replies_to_raw_publish": report["migration"]["ratio_to_raw_publish"].as_f64(),
        "migration_move_to_raw_move": report["migration"]["move_ratio_to_raw_move"].as_f64(),
    });
    let migration_goal = report["migration"]["replies_per_s"]
        .as_f64()
        .map(|v| goal(Some(v), migration::GOAL_MIGRATION_REPLIES_PER_S, true))
        .unwrap_or(Value::Null);
    report["goals"] = json!({
        "forward_ratio": goal(ratio(fwd), GOAL_FORWARD_RATIO, true),
        "pull_ratio": goal(ratio(pull), GOAL_PULL_RATIO, true),
        "forward_p50_within_ms_of_raw_round_trip": goal(delta(fwd_p50), GOAL_FORWARD_P50_DELTA_MS, false),
        "migration_replies_per_s": migration_goal,
    });
}

fn f(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "-".into(),
    }
}

fn lat(v: &Value) -> String {
    if v.is_null() || v["n"].as_u64() == Some(0) {
        return "-".into();
    }
    format!("{} / {} / {}", f(&v["p50_ms"]), f(&v["p99_ms"]), f(&v["max_ms"]))
}

fn met(v: &Value) -> &'static str {
    match v["met"].as_bool() {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "",
    }
}

fn cpu_line(label: &str, v: &Value) -> Option<String> {
    let m = v.as_object()?;
    let parts: Vec<String> = m.iter().map(|(k, x)| format!("{k} {}", f(x))).collect();
    Some(format!("  {label:<28} {}", parts.join(" · ")))
}

/// Whether the report shows replies lost (or duplicated, reordered, altered) by the migration.
pub fn migration_lost(r: &Value) -> bool {
    r["migration"]["verified"]["ok"].as_bool() == Some(false)
}

/// The migration section's rows: its raw baselines, the move, its check.
fn migration_rows(out: &mut Vec<String>, m: &Value, goal: &Value) {
    let row = |out: &mut Vec<String>, name: &str, value: String, vs: String, goal: String| {
        out.push(format!("{name:<40} {value:>22} {vs:>14} {goal:>14}"));
    };
    row(
        out,
        &format!("migration raw publish msgs/s ({})", m["replies"]),
        f(&m["raw_publish_msgs_per_s_used"]),
        "1".into(),
        format!(
            "(runs: {}, {})",
            f(&m["raw_publish"]["msgs_per_s"]),
            f(&m["seed"]["msgs_per_s"])
        ),
    );
    row(
        out,
        &format!("migration raw get+publish+ack/s (×{})", m["raw_move_batch"]),
        f(&m["raw_move"]["msgs_per_s"]),
        String::new(),
        String::new(),
    );
    row(
        out,
        "migration replies/s (register → gone)",
        f(&m["replies_per_s"]),
        format!("{}×", f(&m["ratio_to_raw_publish"])),
        format!("≥1000/s {}", met(goal)),
    );
    row(
        out,
        "  move alone, vs the raw get+publish+ack",
        f(&m["move_replies_per_s"]),
        format!("{}×", f(&m["move_ratio_to_raw_move"])),
        format!("start +{} ms", f(&m["start_delay_ms"])),
    );
    row(
        out,
        "  registration call ms (plain worker)",
        format!("{} ({})", f(&m["register_call_ms"]), f(&m["plain_register_ms"])),
        String::new(),
        String::new(),
    );
    let v = &m["verified"];
    if v["ok"].as_bool() == Some(true) {
        row(
            out,
            "  main's inbox after the move",
            format!("{}/{} ok", v["found"], v["expected"]),
            String::new(),
            "in order".into(),
        );
    } else {
        out.push(format!(
            "!!! MIGRATION LOST OR DAMAGED REPLIES: main's inbox holds {} of {}; missing {}, duplicated {}, \
             unexpected {}, malformed {}, in order {}; first problem: {}",
            v["found"],
            v["expected"],
            v["missing"],
            v["duplicates"],
            v["unexpected"],
            v["malformed"],
            v["in_order"],
            v["first_problem"].as_str().unwrap_or("-")
        ));
    }
}

/// The human-readable table of a report.
pub fn table(r: &Value) -> String {
    let mut out = Vec::new();
    let s = &r["settings"];
    out.push(format!(
        "fleet-bench · broker {} ({}) · {} B messages, persistent, confirms, mandatory · load {} → {}",
        r["broker"]["spec"].as_str().unwrap_or("?"),
        r["broker"]["version"].as_str().unwrap_or("?"),
        s["message_bytes"],
        r["machine"]["load_before"],
        r["machine"]["load_after"],
    ));
    out.push(format!(
        "{:<40} {:>22} {:>14} {:>14}",
        "figure", "value", "vs raw", "goal"
    ));
    let row = |out: &mut Vec<String>, name: &str, value: String, vs: String, goal: String| {
        out.push(format!("{name:<40} {value:>22} {vs:>14} {goal:>14}"));
    };
    let rt = &r["ratios"];
    let g = &r["goals"];
    if !r["raw"].is_null() {
        let after = if r["raw_after"].is_null() {
            String::new()
        } else {
            format!(" (after: {})", f(&r["raw_after"]["msgs_per_s"]))
        };
        row(&mut out, "raw msgs/s", f(&r["raw"]["msgs_per_s"]), "1".into(), after);
        row(
            &mut out,
            "raw latency under load p50/p99/max ms",
            lat(&r["raw"]["loaded_latency"]),
            String::new(),
            String::new(),
        );
        row(
            &mut out,
            "raw one-way (unloaded) ms",
            lat(&r["raw"]["one_way"]),
            String::new(),
            String::new(),
        );
        row(
            &mut out,
            "raw round trip (unloaded) ms",
            lat(&r["raw"]["round_trip"]),
            "1".into(),
            String::new(),
        );
        let e = &r["raw"]["echo"];
        let after = if r["raw_after"].is_null() {
            String::new()
        } else {
            format!(" (after: {})", f(&r["raw_after"]["echo"]["round_trips_per_s"]))
        };
        row(
            &mut out,
            &format!("raw echo round trips/s ({} flows)", e["flows"]),
            f(&e["round_trips_per_s"]),
            String::new(),
            after,
        );
        row(
            &mut out,
            "raw echo round trip under load ms",
            lat(&e["latency"]),
            String::new(),
            String::new(),
        );
        let e = &r["raw"]["echo_envelope"];
        row(
            &mut out,
            "  same, topic exchange + envelope headers",
            f(&e["round_trips_per_s"]),
            String::new(),
            format!("1 flow p50 {} ms", f(&e["single_round_trip"]["p50_ms"])),
        );
    }
    if !r["forward"].is_null() {
        let fw = &r["forward"];
        row(
            &mut out,
            &format!("forward briefs/s ({} senders)", fw["senders"]),
            f(&fw["briefs_per_s"]),
            format!("{}×", f(&rt["forward_briefs_to_raw"])),
            format!("≥0.45× {}", met(&g["forward_ratio"])),
        );
        row(
            &mut out,
            "  (physical msgs/s, 2 per brief)",
            f(&fw["msgs_per_s"]),
            format!("{}×", f(&rt["forward_msgs_to_raw"])),
            String::new(),
        );
        row(
            &mut out,
            "  (briefs/s vs raw echo round trips/s)",
            String::new(),
            format!("{}×", f(&rt["forward_briefs_to_raw_echo"])),
            format!("envelope {}×", f(&rt["forward_briefs_to_raw_envelope_echo"])),
        );
        row(
            &mut out,
            "forward SEND→INJECTED (1 sender) ms",
            lat(&fw["latency"]),
            format!("+{} ms", f(&rt["forward_p50_minus_raw_round_trip_ms"])),
            format!("≤+2 ms {}", met(&g["forward_p50_within_ms_of_raw_round_trip"])),
        );
        row(
            &mut out,
            "forward SEND→INJECTED under load ms",
            lat(&fw["loaded_latency"]),
            String::new(),
            String::new(),
        );
        if fw["failures"].as_u64().unwrap_or(0) > 0 {
            out.push(format!(
                "  forward failures: {} (first: {})",
                fw["failures"], fw["first_failure"]
            ));
        }
        if let Ok(b) = serde_json::from_value::<stages::Breakdown>(fw["stages"].clone()) {
            out.extend(stages::lines("forward", &b));
        }
    }
    if !r["pull"].is_null() {
        let p = &r["pull"];
        row(
            &mut out,
            &format!("pull replies/s ({} workers)", p["workers"]),
            f(&p["replies_per_s"]),
            format!("{}×", f(&rt["pull_replies_to_raw"])),
            format!("≥0.8× {}", met(&g["pull_ratio"])),
        );
        row(
            &mut out,
            "pull reply→drained under load ms",
            lat(&p["loaded_latency"]),
            String::new(),
            String::new(),
        );
        row(
            &mut out,
            "pull bridge_reply call under load ms",
            lat(&p["reply_call"]),
            String::new(),
            String::new(),
        );
        row(
            &mut out,
            "pull reply→bridge_wait (1 flow) ms",
            lat(&p["latency"]),
            format!("+{} ms", f(&rt["pull_p50_minus_raw_round_trip_ms"])),
            String::new(),
        );
        if let Ok(b) = serde_json::from_value::<stages::Breakdown>(p["stages"].clone()) {
            out.extend(stages::lines("pull", &b));
        }
    }
    if !r["presence"].is_null() {
        let p = &r["presence"];
        row(
            &mut out,
            "presence: new gateway /readyz ms (mean)",
            f(&p["ready_ms_mean"]),
            String::new(),
            String::new(),
        );
        row(
            &mut out,
            "presence: new host listed at peer ms",
            f(&p["visible_at_peer_ms_mean"]),
            String::new(),
            format!("H={} ms", p["heartbeat_ms"]),
        );
        row(
            &mut out,
            "presence: peer listed at new host ms",
            f(&p["peer_visible_at_new_ms_mean"]),
            String::new(),
            String::new(),
        );
    }
    if !r["migration"].is_null() {
        migration_rows(&mut out, &r["migration"], &g["migration_replies_per_s"]);
    }
    if let Some(points) = r["scale"].as_array() {
        out.push(format!(
            "{:<12} {:>10} {:>10} {:>8} {:>6} {:>10} {:>10} {:>12} {:>16}",
            "entities",
            "RSS MiB",
            "peak MiB",
            "threads",
            "fds",
            "gw CPU %",
            "broker %",
            "register/s",
            "heartbeat round"
        ));
        for p in points {
            out.push(format!(
                "{:<12} {:>10.1} {:>10.1} {:>8} {:>6} {:>10.1} {:>10} {:>12.1} {:>16}",
                p["entities"].as_u64().unwrap_or(0),
                p["rss_kib"].as_f64().unwrap_or(0.0) / 1024.0,
                p["peak_rss_kib"].as_f64().unwrap_or(0.0) / 1024.0,
                p["threads"].as_u64().unwrap_or(0),
                p["fds"].as_u64().unwrap_or(0),
                p["gateway_cpu_pct"].as_f64().unwrap_or(0.0),
                f(&p["broker_cpu_pct"]),
                p["register_per_s"].as_f64().unwrap_or(0.0),
                format!(
                    "{} ms / {:.0} msgs",
                    f(&p["heartbeat_round_ms"]),
                    p["presences_per_round"].as_f64().unwrap_or(0.0)
                ),
            ));
        }
    }
    if let Ok(m) = serde_json::from_value::<presence_model::Model>(r["presence_model"].clone()) {
        out.extend(presence_model::lines(&m));
    }
    if let Ok(g) = serde_json::from_value::<gate::Gate>(r["gate"].clone()) {
        out.extend(gate::lines(&g));
    }
    out.push("CPU ms per message (by process; other = rest of the machine, also other users):".into());
    for (label, v, cpu) in [
        ("raw (per msg)", &r["raw"]["cpu_ms_per_msg"], &r["raw"]["cpu"]),
        (
            "raw echo (per round trip)",
            &r["raw"]["echo"]["cpu_ms_per_round_trip"],
            &r["raw"]["echo"]["cpu"],
        ),
        (
            "raw envelope echo (per r.t.)",
            &r["raw"]["echo_envelope"]["cpu_ms_per_round_trip"],
            &r["raw"]["echo_envelope"]["cpu"],
        ),
        (
            "forward (per brief)",
            &r["forward"]["cpu_ms_per_brief"],
            &r["forward"]["cpu"],
        ),
        ("pull (per reply)", &r["pull"]["cpu_ms_per_reply"], &r["pull"]["cpu"]),
        (
            "migration (per reply)",
            &r["migration"]["cpu_ms_per_reply"],
            &r["migration"]["cpu"],
        ),
    ] {
        if let Some(l) = cpu_line(label, v) {
            let busy = match (cpu["machine_s"].as_f64(), cpu["capacity_s"].as_f64()) {
                (Some(m), Some(c)) if c > 0.0 => format!(" · cores busy {:.0} %", 100.0 * m / c),
                _ => String::new(),
            };
            out.push(format!("{l}{busy}"));
        }
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses the command line (without the program name) into options ([`cli::BenchCli`]).
    fn parse_args(args: &[String], default_gateway: String, default_out: PathBuf) -> Result<Options, String> {
        let cli = <cli::BenchCli as clap::Parser>::try_parse_from(
            std::iter::once("fleet-bench".to_string()).chain(args.iter().cloned()),
        )
        .map_err(|e| e.to_string())?;
        cli.options(default_gateway, default_out)
    }

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn arguments_parse_and_sections_filter() {
        let o = parse_args(
            &args(&["--size", "2048", "--skip", "scale,presence", "--scale", "1,10"]),
            "gw".into(),
            "out.json".into(),
        )
        .expect("valid");
        assert_eq!(o.paths.size, 2048);
        assert_eq!(o.raw.size, 2048);
        assert!(!o.sections.contains("scale") && o.sections.contains("raw"));
        assert_eq!(o.scale.levels, vec![1, 10]);
        assert!(parse_args(&args(&["--only", "nope"]), "gw".into(), "o".into()).is_err());
        assert!(parse_args(&args(&["--size", "8"]), "gw".into(), "o".into()).is_err());
    }

    #[test]
    fn ratios_use_the_mean_raw_baseline() {
        let mut r = json!({
            "raw": {"msgs_per_s": 10000.0, "round_trip": {"p50_ms": 2.0}},
            "raw_after": {"msgs_per_s": 8000.0, "round_trip": {"p50_ms": 4.0}},
            "forward": {"briefs_per_s": 4500.0, "latency": {"p50_ms": 4.5}},
            "pull": {"replies_per_s": 7200.0, "latency": {"p50_ms": 3.0}},
        });
        add_ratios(&mut r);
        assert_eq!(r["ratios"]["forward_briefs_to_raw"].as_f64(), Some(0.5));
        assert_eq!(r["ratios"]["pull_replies_to_raw"].as_f64(), Some(0.8));
        assert_eq!(r["ratios"]["forward_p50_minus_raw_round_trip_ms"].as_f64(), Some(1.5));
        assert_eq!(r["goals"]["forward_ratio"]["met"], true);
        assert_eq!(r["goals"]["forward_p50_within_ms_of_raw_round_trip"]["met"], true);
        assert!(table(&r).contains("forward briefs/s"));
    }

    #[test]
    fn a_migration_that_lost_replies_says_so() {
        let mut r = json!({
            "migration": {"replies": 10, "replies_per_s": 1200.0, "ratio_to_raw_publish": 0.1,
                          "verified": {"ok": true, "found": 10, "expected": 10}},
        });
        add_ratios(&mut r);
        assert_eq!(r["goals"]["migration_replies_per_s"]["met"], true);
        assert!(!migration_lost(&r) && table(&r).contains("10/10 ok"));
        r["migration"]["verified"] = json!({"ok": false, "found": 9, "expected": 10, "missing": 1});
        assert!(migration_lost(&r) && table(&r).contains("MIGRATION LOST"));
        assert!(parse_args(&args(&["--only", "migration"]), "gw".into(), "o".into()).is_ok());
    }
}
