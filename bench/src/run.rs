//! One `fleet-bench` run: the sections in order on the broker, their results handed to
//! [`crate::report::document::Report`], judged by the regression gate; and the gate over earlier
//! reports (`--gate-reports`).
//!
//! Apart from [`crate::options`] (what a run is told) so the report, which records the options,
//! sits below the code that runs it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

use crate::report::document::{Machine, Report, Settings};
use crate::report::sections::{ForwardSection, ForwardStages, PullSection, Sections};
pub use crate::report::table::table;
use crate::rig::BrokerInfo;
use crate::rig::hosts::Fleet;
use crate::rig::stats::CpuProbe;
use fleet_conformance::broker::{Broker, BrokerSpec};

use crate::options::Options;
use crate::{cluster, cluster_scale, fleet, floors, migration, paths, report, rig};

/// Runs the selected sections and returns the report (also written to `opts.out`).
pub async fn run(opts: &Options) -> anyhow::Result<Report> {
    let load_before = rig::stats::load_average();
    // `--cluster` and `--scale` alone start their own brokers only.
    let (mut info, mut sections) = if !opts.sections.is_empty() || opts.fleet.is_some() {
        let spec = BrokerSpec::parse(&opts.broker)?;
        eprintln!("fleet-bench: starting broker {} …", spec.label());
        let broker = Broker::start(&spec)
            .await
            .with_context(|| format!("starting broker {}", spec.label()))?;
        let info = BrokerInfo {
            spec: broker.spec().label(),
            version: broker.version().to_string(),
        };
        let result = run_on(&broker, opts).await;
        if let Err(e) = broker.stop().await {
            eprintln!("fleet-bench: could not stop the broker: {e}");
        }
        (Some(info), result?)
    } else {
        (None, Sections::default())
    };
    if let Some(cs) = &opts.cluster {
        let work = std::env::temp_dir().join(format!(
            "fleet-bench-cluster-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        let measured = cluster::runs::run(cs, opts, &work).await;
        if measured.is_ok() && !opts.keep {
            let _ = std::fs::remove_dir_all(&work);
        }
        let measured = measured?;
        if info.is_none() {
            info = measured.cluster().map(|c| c.broker.clone());
        }
        sections.cluster = Some(measured);
    }
    if let Some(cs) = &opts.cluster_scale {
        let work = std::env::temp_dir().join(format!(
            "fleet-bench-scale-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        let partial = opts.out.with_file_name("cluster-scale.partial.json");
        let measured = cluster_scale::run::run(cs, &opts.gateway_cmd, &work, opts.keep, &partial).await;
        if measured.is_ok() && !opts.keep {
            let _ = std::fs::remove_dir_all(&work);
        }
        let measured = measured?;
        if info.is_none() {
            info = Some(measured.broker.clone());
        }
        sections.cluster_scale = Some(measured);
    }
    let info =
        info.ok_or_else(|| anyhow::anyhow!("nothing to run: no section, no --fleet, no --cluster, no --scale"))?;
    let machine = Machine {
        cores: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        load_before,
        load_after: rig::stats::load_average(),
    };
    let mut report = Report::new(info, opts.gateway_cmd.clone(), Settings::of(opts), machine, sections);
    report.gate = Some(judge(&report, opts)?);
    write_json(&opts.out, &report)?;
    Ok(report)
}

/// The regression gate over several earlier runs: the median of their gated ratios compared with
/// the baseline, or written as the baseline with `record_baseline`. Returns the text to print.
/// Every report must be readable; a run that was not quiet enough ([`report::gate::trusted`]) is left
/// out of the median and named, and with none left there is nothing to gate.
pub fn gate_reports(opts: &Options) -> anyhow::Result<Vec<String>> {
    let mut runs = Vec::new();
    let mut untrusted = Vec::new();
    let mut machine = None;
    for file in &opts.gate_reports {
        let bytes = std::fs::read(file).with_context(|| format!("reading the bench report {}", file.display()))?;
        let r: Report = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a fleet-bench report", file.display()))?;
        if !r.gate.as_ref().is_some_and(|g| g.trusted) {
            untrusted.push(file.display().to_string());
            continue;
        }
        machine.get_or_insert_with(|| format!("{} · {} · {} cores", r.broker.spec, r.broker.version, r.machine.cores));
        runs.push(r.ratios);
    }
    if runs.is_empty() {
        anyhow::bail!(
            "none of the reports was measured on a quiet enough machine ({}): rerun on a quiet one",
            untrusted.join(", ")
        );
    }
    let medians = report::gate::median_of(&runs);
    let mut out = vec![format!(
        "median of {} runs{}",
        runs.len(),
        if untrusted.is_empty() {
            String::new()
        } else {
            format!(" (left out, not quiet enough to trust: {})", untrusted.join(", "))
        }
    )];
    if opts.record_baseline {
        let b = report::gate::Baseline {
            recorded: format!("median of {} quiet runs · {}", runs.len(), machine.unwrap_or_default()),
            commit: report::gate::gateway_commit(),
            ratios: medians,
        };
        out.push(record_baseline(&opts.baseline, &b)?);
        return Ok(out);
    }
    let compared = report::gate::read_baseline(&opts.baseline)?.map(|b| report::gate::compare_values(&medians, &b));
    // The runs' own quiet verdicts are named above; the comparison follows.
    out.extend(report::gate::comparison_lines(
        &opts.baseline.display().to_string(),
        compared.as_deref(),
    ));
    Ok(out)
}

/// Writes `baseline` to `file`; returns the line that says so.
fn record_baseline(file: &Path, baseline: &report::gate::Baseline) -> anyhow::Result<String> {
    write_json(file, baseline)?;
    Ok(format!(
        "baseline of {} ratios written to {}",
        baseline.ratios.len(),
        file.display()
    ))
}

/// Writes `value` as pretty JSON to `file`, making its directory.
fn write_json(file: &Path, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let json = serde_json::to_vec_pretty(value).context("serializing the report")?;
    std::fs::write(file, json).with_context(|| format!("writing {}", file.display()))
}

/// The regression gate: compares the report's ratios with the baseline, or records them as it.
fn judge(report: &Report, opts: &Options) -> anyhow::Result<report::gate::Gate> {
    let m = &report.machine;
    let load = [m.load_before.map(|l| l[0]), m.load_after.map(|l| l[0])];
    let others = others_shares(&report.sections);
    let trusted = report::gate::trusted(&others, &load, m.cores);
    let compared = if opts.record_baseline {
        let recorded = format!(
            "{} · {} · load {:?} on {} cores{}",
            report.broker.spec,
            report.broker.version,
            load,
            m.cores,
            if trusted { "" } else { " (TOO LOADED)" }
        );
        let said = record_baseline(&opts.baseline, &report::gate::baseline_of(&report.ratios, recorded))?;
        eprintln!("fleet-bench: {said}");
        None
    } else {
        report::gate::read_baseline(&opts.baseline)?.map(|b| report::gate::compare(&report.ratios, &b))
    };
    Ok(report::gate::Gate {
        baseline_file: opts.baseline.display().to_string(),
        compared,
        load,
        cores: m.cores,
        trusted,
        others,
    })
}

/// Per timed section, the share of the machine processes outside the bench took.
fn others_shares(s: &Sections) -> Vec<(String, f64)> {
    let spent = [
        ("raw", s.raw.as_ref().map(|r| &r.cpu)),
        ("raw echo", s.raw.as_ref().map(|r| &r.echo_envelope.cpu)),
        ("forward", s.forward.as_ref().map(|f| &f.result.cpu)),
        ("pull", s.pull.as_ref().map(|p| &p.result.cpu)),
        ("migration", s.migration.as_ref().map(|m| &m.cpu)),
    ];
    let mut shares: Vec<(String, f64)> = spent
        .into_iter()
        .filter_map(|(name, cpu)| Some((name.to_string(), cpu?.others_share()?)))
        .collect();
    for side in s.cluster.iter().flat_map(|c| &c.sides) {
        for (path, cpu) in [("forward", &side.forward.cpu), ("pull", &side.pull.cpu)] {
            if let Some(share) = cpu.others_share() {
                shares.push((format!("{path} ({})", side.label), share));
            }
        }
    }
    shares
}

fn on(opts: &Options, section: &str) -> bool {
    opts.sections.contains(section)
}

/// The forward path, the gateways' stages scraped around its throughput run and its 1-sender
/// latency run separately (the warm-up in neither).
async fn forward(
    fleet: &Fleet,
    pairs: &[paths::forward_pull::Pair],
    opts: &Options,
    cpu: &CpuProbe,
) -> anyhow::Result<ForwardSection> {
    let hosts = [paths::forward_pull::SENDER_HOST, paths::forward_pull::WORKER_HOST];
    paths::forward_pull::forward_warmup(pairs, &opts.paths).await?;
    let before = paths::stages::scrape(fleet, &hosts).await;
    let recording = if opts.profile {
        start_profile(fleet, &hosts, opts).await
    } else {
        None
    };
    let throughput = paths::forward_pull::forward_throughput(pairs, &opts.paths, cpu).await?;
    let profile = match recording {
        Some(r) => r
            .finish()
            .await
            .map_err(|e| eprintln!("fleet-bench: no profile: {e:#}"))
            .ok(),
        None => None,
    };
    let between = paths::stages::scrape(fleet, &hosts).await;
    let single = paths::forward_pull::forward_single(pairs, &opts.paths).await?;
    let after = paths::stages::scrape(fleet, &hosts).await;
    Ok(ForwardSection {
        result: paths::forward_pull::ForwardResult::of(throughput, single),
        stages: ForwardStages {
            throughput: paths::stages::breakdown(&before, &between),
            single_sender: paths::stages::breakdown(&between, &after),
        },
        profile,
    })
}

/// `--profile`: starts `perf` on each gateway of `hosts` (None, said why, when it cannot).
async fn start_profile(fleet: &Fleet, hosts: &[&str], opts: &Options) -> Option<paths::profile::Recording> {
    if !paths::profile::available().await {
        eprintln!("fleet-bench: --profile needs Linux perf on the PATH (Debian: linux-perf); no profile");
        return None;
    }
    let targets: Vec<(String, u32)> = hosts
        .iter()
        .filter_map(|h| Some((h.to_string(), fleet.host(h).ok()?.gateway.pid()?)))
        .collect();
    let dir = opts.out.parent().map(PathBuf::from).unwrap_or_else(std::env::temp_dir);
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("fleet-bench: no profile: creating {}: {e}", dir.display());
        return None;
    }
    paths::profile::start(&targets, &dir)
        .await
        .map_err(|e| eprintln!("fleet-bench: no profile: {e:#}"))
        .ok()
}

/// Runs the selected sections on `broker` (one vhost, deleted afterwards).
async fn run_on(broker: &Broker, opts: &Options) -> anyhow::Result<Sections> {
    let vhost = broker.create_vhost().await?;
    let url = broker.amqp_url(&vhost);
    let broker_pid = rig::stats::own_broker_pid();
    let me = Some(std::process::id());
    let work = std::env::temp_dir().join(format!(
        "fleet-bench-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    eprintln!(
        "fleet-bench: broker {} ready (pid {broker_pid:?}); work dir {}",
        broker.version(),
        work.display()
    );
    let mut sections = Sections::default();
    let raw_cpu = CpuProbe::default().with("bench", me).with("broker", broker_pid);
    let mut raws = Vec::new();
    if on(opts, "raw") {
        eprintln!("fleet-bench: raw baseline …");
        raws.push(paths::raw::run(&url, &opts.raw, &raw_cpu).await?);
    }
    let hosts: Vec<String> = ["a", "b", "s"]
        .iter()
        .map(|s| s.to_string())
        .chain((1..=opts.presence_trials).map(|i| format!("c{i}")))
        .chain([migration::HOST.to_string()])
        .collect();
    let tunables = BTreeMap::from([("FLEET_HEARTBEAT_MS".to_string(), opts.heartbeat_ms.to_string())]);
    let mut fleet = Fleet::new(work.clone(), url.clone(), opts.gateway_cmd.clone(), tunables, &hosts);
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
            let pairs = paths::forward_pull::pairs(&fleet, opts.paths.pairs.max(1)).await?;
            if on(opts, "forward") {
                eprintln!("fleet-bench: forward path …");
                sections.forward = Some(forward(&fleet, &pairs, opts, &path_cpu).await?);
            }
            if on(opts, "pull") {
                eprintln!("fleet-bench: pull path …");
                let before = paths::stages::scrape(&fleet, &["a", "b"]).await;
                let result = paths::forward_pull::pull(&pairs, &opts.paths, &path_cpu).await?;
                let after = paths::stages::scrape(&fleet, &["a", "b"]).await;
                let stages = paths::stages::breakdown(&before, &after);
                sections.pull = Some(PullSection { result, stages });
            }
        }
        if on(opts, "raw") && (on(opts, "forward") || on(opts, "pull")) {
            eprintln!("fleet-bench: raw baseline again …");
            raws.push(paths::raw::run(&url, &opts.raw, &raw_cpu).await?);
        }
        if on(opts, "presence") {
            eprintln!("fleet-bench: presence convergence …");
            let names: Vec<String> = (1..=opts.presence_trials).map(|i| format!("c{i}")).collect();
            sections.presence = Some(fleet::presence::run(&mut fleet, &names, &env, opts.heartbeat_ms).await?);
        }
        fleet.stop_host("a").await;
        fleet.stop_host("b").await;
        if on(opts, "migration") {
            eprintln!("fleet-bench: migration of {} legacy replies …", opts.migration.replies);
            let r = migration::run(&mut fleet, &url, &opts.migration, me, broker_pid).await;
            fleet.stop_host(migration::HOST).await;
            sections.migration = Some(r?);
        }
        if on(opts, "scale") {
            eprintln!("fleet-bench: scale {:?} …", opts.scale.levels);
            fleet.start_host("s", &env).await?;
            let scaled = fleet::scale::run(&mut fleet, &url, &opts.scale, broker_pid).await?;
            let heartbeat_s = scaled.heartbeat_ms as f64 / 1e3;
            sections.presence_model = fleet::presence_model::model(&scaled.points, heartbeat_s);
            sections.scale = Some(scaled);
        }
        if let Some(fs) = &opts.fleet {
            fleet.shutdown().await;
            let model = sections.presence_model.as_ref();
            let node_urls: Vec<String> = (0..broker.node_count())
                .map(|i| broker.node_endpoint(i).amqp_url(&vhost))
                .collect();
            // On a cluster the real gateways run SPEC §16: every node in their URL list (each
            // starting at another node) and quorum inboxes.
            let real_env: BTreeMap<String, BTreeMap<String, String>> = if broker.is_cluster() {
                fleet::sim_result::REAL
                    .iter()
                    .enumerate()
                    .map(|(i, g)| {
                        let env = BTreeMap::from([
                            (
                                "FLEET_AMQP_URL".to_string(),
                                cluster::runs::url_list(broker, &vhost, None, i),
                            ),
                            ("FLEET_QUEUE_TYPE".to_string(), "quorum".to_string()),
                        ]);
                        (g.to_string(), env)
                    })
                    .collect()
            } else {
                BTreeMap::new()
            };
            let on = fleet::sim_fleet::On {
                broker,
                vhost: &vhost,
                node_urls: &node_urls,
                real_env: &real_env,
                gateway_cmd: &opts.gateway_cmd,
                work: &work,
            };
            let r = fleet::sim_fleet::run(&on, fs, model).await?;
            sections.fleet = Some(r);
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
    let mut raws = raws.into_iter();
    sections.raw = raws.next();
    sections.raw_after = raws.next();
    if sections.forward.is_some() || sections.pull.is_some() {
        // Echo figures are the mean of the raw runs, as the ratios take them.
        let echo = |who: &[&str]| {
            sections
                .raw_mean(|r| floors::floor::cpu_of(&r.echo_envelope.cpu_ms_per_round_trip, who).unwrap_or(f64::NAN))
                .filter(|ms| ms.is_finite())
        };
        let herdr_dir = std::env::temp_dir().join(format!("fleet-bench-floor-{}", uuid::Uuid::new_v4()));
        let mut cpu_floor =
            floors::floor::measure(opts.paths.size, opts.paths.pairs, herdr_dir, echo(&["bench"])).await;
        if let Some(fw) = &sections.forward {
            let brief = floors::floor::cpu_of(&fw.result.cpu_ms_per_brief, &["bench", "broker"]);
            cpu_floor.throughput_ceiling =
                floors::floor::throughput_ceiling(echo(&["bench", "broker"]), brief, cpu_floor.both_sides_ms());
        }
        if let Some(p) = &sections.pull {
            cpu_floor.pull_ceiling = floors::floor::pull_ceiling(&cpu_floor, echo(&["bench", "broker"]), &p.result);
        }
        sections.cpu_floor = Some(cpu_floor);
    }
    if sections.forward.is_some() {
        eprintln!("fleet-bench: latency floor (a bare client's herdr sequence) …");
        let samples = opts.paths.latency_samples;
        sections.latency_floor = Some(floors::latency_floor::measure(std::env::temp_dir(), samples).await);
    }
    Ok(sections)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::*;
    use crate::report::sections::{ForwardSection, ForwardStages};

    /// A report whose forward path ran at `briefs_per_s` against a 4,000/s envelope echo, on a
    /// machine that was quiet (`trusted`) or not.
    fn run_at(briefs_per_s: f64, trusted: bool) -> Report {
        let mut r = report(Sections {
            raw: Some(raw(10_000.0, 2.0, 5_000.0, 4_000.0)),
            forward: Some(ForwardSection {
                result: crate::fixtures::forward(briefs_per_s, 4.0, &[]),
                stages: ForwardStages::default(),
                profile: None,
            }),
            ..Sections::default()
        });
        r.gate = Some(report::gate::Gate {
            baseline_file: String::new(),
            compared: None,
            load: [None, None],
            cores: 2,
            trusted,
            others: vec![],
        });
        r
    }

    #[test]
    fn the_gate_over_several_reports_records_and_compares_their_median() {
        let dir = std::env::temp_dir().join(format!("fleet-bench-gate-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let files: Vec<PathBuf> = [1_000.0, 1_500.0, 1_200.0]
            .iter()
            .enumerate()
            .map(|(i, rate)| {
                let f = dir.join(format!("run{i}.json"));
                write_json(&f, &run_at(*rate, true)).expect("write");
                f
            })
            .collect();
        let baseline = dir.join("baseline.json");
        let names = files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(",");
        let opts = |extra: &[&str]| {
            let args = [
                "fleet-bench",
                "--gate-reports",
                &names,
                "--baseline",
                &baseline.display().to_string(),
            ];
            let cli = <crate::cli::BenchCli as clap::Parser>::try_parse_from(
                args.iter().copied().chain(extra.iter().copied()),
            )
            .expect("valid arguments");
            cli.options("gw".into(), "out.json".into()).expect("valid options")
        };
        let text = gate_reports(&opts(&["--record-baseline"])).expect("recorded");
        assert!(text[0].starts_with("median of 3 runs"), "{text:?}");
        let b = report::gate::read_baseline(&baseline)
            .expect("readable")
            .expect("written");
        // forward ÷ raw msgs/s: 1,000, 1,500, 1,200 over 10,000 → the median is 0.12.
        assert!((b.ratios["forward_briefs_to_raw"] - 0.12).abs() < 1e-9, "{b:?}");
        assert!(
            b.recorded.starts_with("median of 3 quiet runs · process:rabbitmq"),
            "{}",
            b.recorded
        );
        let text = gate_reports(&opts(&[])).expect("compared").join("\n");
        assert!(
            text.contains("forward_briefs_to_raw ") && text.contains("ok (0 % better)"),
            "{text}"
        );
        write_json(&files[0], &run_at(100.0, false)).expect("write");
        let text = gate_reports(&opts(&[])).expect("compared").join("\n");
        assert!(
            text.starts_with("median of 2 runs (left out, not quiet enough to trust: "),
            "{text}"
        );
        assert!(
            text.contains("run0.json") && text.contains("baseline    0.120  now    0.135"),
            "the median of 1,500 and 1,200 against 1,200: {text}"
        );
        std::fs::write(&files[1], "{}").expect("break one");
        let e = gate_reports(&opts(&[])).expect_err("a broken report is an error");
        assert!(format!("{e:#}").contains("run1.json"), "{e:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
