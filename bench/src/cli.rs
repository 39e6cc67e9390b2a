//! `fleet-bench`'s command line (clap), turned into the run's [`Options`].
//!
//! Why a module: the defaults, the `--quick` preset and the checks clap cannot express (a message
//! must hold the timestamps; sections must exist) live in one place the binary and the tests share.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::result::ClusterSettings;
use crate::cluster_scale::settings::{InboxType, ScaleClusterSettings};
use crate::fleet::scale::ScaleSettings;
use crate::fleet::sim_result::{FleetSettings, Form, Trust};
use crate::migration::MigrationSettings;
use crate::paths::forward_pull::PathSettings;
use crate::paths::raw::{QueueKind, RawSettings};
use crate::{Options, SECTIONS, default_baseline};

/// Gateway paths against the raw broker, in one run: ratios, where the time goes, footprint.
#[derive(Debug, clap::Parser)]
#[command(name = "fleet-bench", version, args_override_self = true)]
pub struct BenchCli {
    /// The broker: container:rabbitmq | process:rabbitmq | url:rabbitmq | …
    #[arg(
        long,
        env = "FLEET_BENCH_BROKER",
        default_value = "process:rabbitmq",
        value_name = "SPEC"
    )]
    pub broker: String,
    /// The gateway to measure (default: the release fleet-gateway next to this binary).
    #[arg(long, env = "FLEET_GATEWAY_CMD", value_name = "CMD")]
    pub gateway_cmd: Option<String>,
    /// Message size in bytes.
    #[arg(long, default_value_t = 1024, value_name = "BYTES")]
    pub size: usize,
    /// Raw baseline messages.
    #[arg(long, value_name = "N")]
    pub raw_msgs: Option<usize>,
    /// Raw publisher confirms in flight (also the migration's raw baselines).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub outstanding: usize,
    /// Concurrent main/worker pairs.
    #[arg(long, default_value_t = 8, value_name = "N")]
    pub pairs: usize,
    /// Forward briefs in the throughput run [default: 8000].
    #[arg(long, value_name = "N")]
    pub briefs: Option<usize>,
    /// Raw echo round trips, in --pairs flows [default: 6000].
    #[arg(long, value_name = "N")]
    pub echo_rounds: Option<usize>,
    /// Pull replies in the throughput run [default: 12000].
    #[arg(long, value_name = "N")]
    pub replies: Option<usize>,
    /// Legacy replies the migration section moves [default: 2000].
    #[arg(long, value_name = "N")]
    pub migration_replies: Option<usize>,
    /// One-at-a-time samples for latencies [default: 500].
    #[arg(long, value_name = "N")]
    pub latency_samples: Option<usize>,
    /// Gateway starts timed for presence [default: 3].
    #[arg(long, value_name = "N")]
    pub presence_trials: Option<usize>,
    /// Entity counts for the footprint run of one gateway on one node (section `scale`), e.g.
    /// 1,100,1000,10000 [default: 1,100,1000,10000]. The cluster at full size is `--scale`.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub entities: Option<Vec<usize>>,
    /// The heartbeat interval H every gateway of the run gets (FLEET_HEARTBEAT_MS).
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub heartbeat_ms: u64,
    /// How many times the `scale` section's gateway is stopped (SIGTERM) and started again holding
    /// its largest level's entities, each stop and start timed [default: 1].
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub restarts: usize,
    /// CPU sampling window per scale level, in seconds [default: 15].
    #[arg(long, value_name = "S")]
    pub scale_window_s: Option<u64>,
    /// Only these sections (raw,forward,pull,presence,scale,migration).
    #[arg(long, value_delimiter = ',', value_name = "LIST", conflicts_with = "skip")]
    pub only: Option<Vec<String>>,
    /// Every section but these.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub skip: Option<Vec<String>>,
    /// Small counts, for a smoke check of the bench itself (~1 min); explicit counts win.
    #[arg(long)]
    pub quick: bool,
    /// The JSON report (default: <target>/fleet-bench/bench.json).
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Keep the work directory with the gateway logs.
    #[arg(long)]
    pub keep: bool,
    /// Ratios the regression gate compares with (default: fixtures/bench/baseline.json).
    #[arg(long, value_name = "FILE")]
    pub baseline: Option<PathBuf>,
    /// Write this run's ratios to the baseline instead of comparing (on a quiet machine; not
    /// with --profile, whose sampling costs the gateways CPU).
    #[arg(long, conflicts_with = "profile")]
    pub record_baseline: bool,
    /// Run nothing: gate the median of these reports' ratios (bench JSON files of earlier runs)
    /// against the baseline, or with --record-baseline write that median as the baseline.
    #[arg(long, value_delimiter = ',', value_name = "FILES", conflicts_with = "profile")]
    pub gate_reports: Option<Vec<PathBuf>>,
    /// Sample each gateway with Linux `perf` during the forward throughput run and print its CPU
    /// per brief by component (signatures, AMQP client, HTTP/MCP, herdr client, …). The sampling
    /// itself costs the gateways CPU (~10–20 % here): read the run's rates and ratios as slower.
    #[arg(long)]
    pub profile: bool,
    /// Presence on a fleet of simulated hosts (own keys, own roster queues, verifying what they
    /// receive) with two real gateways among them, beside the presence model. Alone, it runs
    /// only this; with --only/--skip, those sections too.
    #[arg(long)]
    pub fleet: bool,
    /// N per fleet run, the two real gateways included [default: 50,100,200].
    #[arg(long, value_delimiter = ',', value_name = "LIST", requires = "fleet")]
    pub fleet_hosts: Option<Vec<usize>>,
    /// E, entities per host of the fleet runs.
    #[arg(long, default_value_t = 50, value_name = "N")]
    pub fleet_entities: usize,
    /// H of the fleet runs, one table each [default: 5000].
    #[arg(long, value_delimiter = ',', value_name = "MS", requires = "fleet")]
    pub fleet_heartbeat_ms: Option<Vec<u64>>,
    /// batched | per-entity | both.
    #[arg(long, default_value = "both", value_name = "FORM")]
    pub fleet_form: String,
    /// Measuring window per fleet run, in seconds [default: 20; --quick 10].
    #[arg(long, value_name = "S")]
    pub fleet_window_s: Option<u64>,
    /// AMQP connections the simulated hosts share (a channel per host).
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub fleet_connections: usize,
    /// Only this many simulated hosts verify what they receive (the others count and ack it):
    /// on one machine every simulated host's verifications share the cores with the broker and
    /// the real gateways [default: all].
    #[arg(long, value_name = "K", requires = "fleet")]
    pub fleet_verifying_hosts: Option<usize>,
    /// How the real gateways trust the other hosts: peers (every key in their peers file), certs
    /// (no host in a peers file; each its own OpenSSH host certificate from a fleet CA, made by
    /// ssh-keygen, SPEC §18; a revocation timed after each run) or both (each size in both,
    /// interleaved, compared).
    #[arg(long, default_value = "peers", value_name = "TRUST")]
    pub fleet_trust: String,
    /// Rounds of --fleet-trust per size, their order alternating (peers certs, certs peers, …).
    #[arg(long, default_value_t = 1, value_name = "N", requires = "fleet")]
    pub fleet_repeat: usize,
    /// The cluster profile (SPEC §16): the forward and pull paths and the raw envelope echo on a
    /// single node (--broker) and on a cluster (--cluster-broker) with quorum queues, as ratios,
    /// then node kill → every gateway ready again (CLU-5(c)). Alone, it runs only this; with
    /// --only/--skip, those sections too. The path counts are --briefs, --replies, --echo-rounds.
    #[arg(long)]
    pub cluster: bool,
    /// The cluster of --cluster.
    #[arg(
        long,
        env = "FLEET_BENCH_CLUSTER_BROKER",
        default_value = "process:rabbitmq-cluster",
        value_name = "SPEC"
    )]
    pub cluster_broker: String,
    /// The single-node runs --cluster compares with, in order: quorum (replication alone),
    /// classic (today's fleets), both, or none.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "quorum,classic",
        value_name = "LIST",
        requires = "cluster"
    )]
    pub cluster_single_types: Vec<String>,
    /// Node kills timed by --cluster (0: none) [default: 10; --quick 3].
    #[arg(long, value_name = "N", requires = "cluster")]
    pub kills: Option<usize>,
    /// FLEET_AMQP_HEARTBEAT_S of every --cluster gateway: with --heartbeat-ms, CLU-5(c)'s bound.
    #[arg(long, default_value_t = 10, value_name = "S")]
    pub amqp_heartbeat_s: u64,
    /// The fleet at full size on a 3-node cluster (issue 47): levels of registered entities, each
    /// a quorum inbox declared by a real gateway, over several gateways; per level the broker's
    /// memory, processes and disk per node and per queue, the declare time, a node kill and a
    /// whole-cluster restart timed, a brief and a reply against the idle cluster's. Stops a level
    /// where the machine cannot hold it. Alone, it runs only this; with --only/--skip, those
    /// sections too.
    #[arg(long)]
    pub scale: bool,
    /// Entities per --scale level [default: 1000,5000,10000; --quick 100,300].
    #[arg(long, value_delimiter = ',', value_name = "LIST", requires = "scale")]
    pub scale_levels: Option<Vec<usize>>,
    /// The cluster of --scale [default: --cluster-broker's, process:rabbitmq-cluster].
    #[arg(long, env = "FLEET_BENCH_SCALE_BROKER", value_name = "SPEC")]
    pub scale_broker: Option<String>,
    /// At most this many entities on one --scale gateway [default: 1000; --quick 100].
    #[arg(long, value_name = "N", requires = "scale")]
    pub scale_per_gateway: Option<usize>,
    /// --scale registrations in flight at once, over all gateways.
    #[arg(long, default_value_t = 16, value_name = "N")]
    pub scale_concurrency: usize,
    /// Persistent REPLYs held through each --scale whole-cluster restart [default: 200; --quick 20].
    #[arg(long, value_name = "N", requires = "scale")]
    pub scale_kept: Option<usize>,
    /// Briefs and replies timed one at a time per --scale level [default: 100; --quick 20].
    #[arg(long, value_name = "N", requires = "scale")]
    pub scale_latency_samples: Option<usize>,
    /// A --scale level still registering after this long stops there [default: 1200; --quick 300].
    #[arg(long, value_name = "S", requires = "scale")]
    pub scale_level_budget_s: Option<u64>,
    /// --scale stops a level when the machine's available memory falls under this.
    #[arg(long, default_value_t = 2_048, value_name = "MIB")]
    pub scale_min_free_mib: u64,
    /// --scale stops a level when the declare rate falls under this fraction of the first window's.
    #[arg(long, default_value_t = 0.1, value_name = "FRACTION")]
    pub scale_collapse: f64,
    /// How long a --scale node kill or full restart may take to recover [default: 300; --quick 120].
    #[arg(long, value_name = "S", requires = "scale")]
    pub scale_recovery_s: Option<u64>,
    /// Do not ask for a rebalance after the killed node is back.
    #[arg(long, requires = "scale")]
    pub scale_no_rebalance: bool,
    /// The --scale nodes' quorum tick (`quorum_tick_interval`), ms: RabbitMQ's default 5000.
    #[arg(long, default_value_t = 5_000, value_name = "MS")]
    pub scale_quorum_tick_ms: u32,
    /// How long a restarted --scale node may take to answer: a node recovers a member of every
    /// quorum queue before it does.
    #[arg(long, default_value_t = 600, value_name = "S")]
    pub scale_boot_s: u64,
    /// The --scale inboxes' type: quorum (SPEC §16), classic to measure what classic inboxes
    /// would save and lose on the same cluster, or mixed (proposal P1: mains quorum, workers
    /// classic, through the reference gateway's FLEET_WORKER_QUEUE_TYPE, which is not SPEC).
    #[arg(long, default_value = "quorum", value_name = "TYPE")]
    pub scale_queue_type: String,
    /// Mains per --scale entity gateway; the others are workers.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub scale_mains_per_gateway: usize,
    /// Keep the suite's fast sampling on the --scale cluster (quorum tick 1 s, statistics 0.5 s)
    /// instead of RabbitMQ's defaults (5 s each), which the figures are meant to size.
    #[arg(long, requires = "scale")]
    pub scale_suite_sampling: bool,
    /// Other gateways (A, B, …) to measure with this one (the last) in the same invocation, runs
    /// interleaved A B B A … ([`super::compare`]); `scripts/bench --compare-baseline` passes the
    /// baseline commit's gateway. Default sections raw,forward,pull.
    #[arg(long, value_name = "CMD,…", value_delimiter = ',', conflicts_with_all = ["fleet", "cluster", "scale", "gate_reports", "record_baseline"])]
    pub compare: Option<Vec<String>>,
    /// Rounds of --compare (each gateway runs once per round).
    #[arg(long, default_value_t = 3, value_name = "N", requires = "compare")]
    pub rounds: usize,
}

/// `quorum` / `classic` (or `none`) as queue kinds.
fn queue_kinds(named: &[String]) -> Result<Vec<QueueKind>, String> {
    let mut out = Vec::new();
    for n in named.iter().map(|n| n.trim().to_ascii_lowercase()) {
        let kind = match n.as_str() {
            "quorum" => QueueKind::Quorum,
            "classic" => QueueKind::Classic,
            "none" | "" => continue,
            other => {
                return Err(format!(
                    "--cluster-single-types: unknown queue type {other:?}; quorum, classic or none"
                ));
            }
        };
        if !out.contains(&kind) {
            out.push(kind);
        }
    }
    Ok(out)
}

fn sections(flag: &str, named: &[String]) -> Result<BTreeSet<String>, String> {
    if let Some(bad) = named.iter().find(|x| !SECTIONS.contains(&x.as_str())) {
        return Err(format!(
            "{flag}: unknown section {bad:?}; sections: {}",
            SECTIONS.join(",")
        ));
    }
    Ok(named.iter().cloned().collect())
}

impl BenchCli {
    /// The run's options: these arguments over the defaults (or the `--quick` preset).
    pub fn options(self, default_gateway: String, default_out: PathBuf) -> Result<Options, String> {
        let q = |quick: usize, full: usize| if self.quick { quick } else { full };
        if self.heartbeat_ms < 100 {
            return Err("--heartbeat-ms must be at least 100".into());
        }
        if self.size < 64 {
            return Err("--size must be at least 64 bytes (timestamps ride in the body)".into());
        }
        let mut chosen: BTreeSet<String> = SECTIONS.iter().map(|s| s.to_string()).collect();
        if (self.fleet || self.cluster || self.scale) && self.only.is_none() && self.skip.is_none() {
            chosen.clear();
        }
        if self.compare.is_some() && self.only.is_none() && self.skip.is_none() {
            chosen = ["raw", "forward", "pull"].iter().map(|s| s.to_string()).collect();
        }
        if let Some(only) = &self.only {
            chosen = sections("--only", only)?;
        }
        if let Some(skip) = &self.skip {
            let skip = sections("--skip", skip)?;
            chosen.retain(|x| !skip.contains(x));
        }
        let latency = self.latency_samples.unwrap_or(q(100, 500));
        let fleet = if self.fleet {
            let hosts = self.fleet_hosts.clone().unwrap_or_else(|| vec![50, 100, 200]);
            if hosts.iter().any(|&n| n < 3) {
                return Err("--fleet-hosts: every level needs at least 3 hosts (2 real gateways + 1 simulated)".into());
            }
            let heartbeats_ms = self.fleet_heartbeat_ms.clone().unwrap_or_else(|| vec![5_000]);
            if heartbeats_ms.iter().any(|&h| h < 100) {
                return Err("--fleet-heartbeat-ms must be at least 100".into());
            }
            Some(FleetSettings {
                hosts,
                entities: self.fleet_entities,
                heartbeats_ms,
                forms: Form::parse_list(&self.fleet_form)?,
                window: Duration::from_secs(self.fleet_window_s.unwrap_or(q(10, 20) as u64).max(1)),
                connections: self.fleet_connections.max(1),
                verifying_hosts: self.fleet_verifying_hosts,
                trusts: Trust::parse_list(&self.fleet_trust)?,
                repeats: self.fleet_repeat.max(1),
            })
        } else {
            None
        };
        let cluster = if self.cluster {
            if self.amqp_heartbeat_s == 0 {
                return Err("--amqp-heartbeat-s must be at least 1".into());
            }
            Some(ClusterSettings {
                cluster_broker: self.cluster_broker.clone(),
                single_broker: self.broker.clone(),
                single_kinds: queue_kinds(&self.cluster_single_types)?,
                kills: self.kills.unwrap_or(q(3, 10)),
                amqp_heartbeat_s: self.amqp_heartbeat_s,
            })
        } else {
            None
        };
        let cluster_scale = if self.scale {
            let mut levels = self.scale_levels.clone().unwrap_or_else(|| {
                if self.quick {
                    vec![100, 300]
                } else {
                    vec![1_000, 5_000, 10_000]
                }
            });
            levels.sort_unstable();
            levels.dedup();
            if levels.first().is_none_or(|&l| l == 0) {
                return Err("--scale-levels: give entity counts above 0".into());
            }
            if !(0.0..1.0).contains(&self.scale_collapse) {
                return Err("--scale-collapse is a fraction below 1".into());
            }
            if self.amqp_heartbeat_s == 0 {
                return Err("--amqp-heartbeat-s must be at least 1".into());
            }
            Some(ScaleClusterSettings {
                broker: self.scale_broker.clone().unwrap_or_else(|| self.cluster_broker.clone()),
                levels,
                per_gateway: self.scale_per_gateway.unwrap_or(q(100, 1_000)).max(1),
                concurrency: self.scale_concurrency.max(1),
                kept: self.scale_kept.unwrap_or(q(20, 200)),
                latency_samples: self.scale_latency_samples.unwrap_or(q(20, 100)).max(1),
                level_budget: Duration::from_secs(self.scale_level_budget_s.unwrap_or(q(300, 1_200) as u64)),
                min_free_mib: self.scale_min_free_mib,
                collapse: self.scale_collapse,
                recovery_wait: Duration::from_secs(self.scale_recovery_s.unwrap_or(q(120, 300) as u64)),
                rebalance: !self.scale_no_rebalance,
                rabbitmq_sampling: !self.scale_suite_sampling,
                quorum_tick_ms: self.scale_quorum_tick_ms.max(100),
                restart_boot: Duration::from_secs(self.scale_boot_s.max(1)),
                queue_type: InboxType::parse(&self.scale_queue_type)?,
                mains_per_gateway: self.scale_mains_per_gateway.max(1),
                heartbeat_ms: self.heartbeat_ms,
                amqp_heartbeat_s: self.amqp_heartbeat_s,
            })
        } else {
            None
        };
        Ok(Options {
            cluster_scale,
            compare: self
                .compare
                .map(|c| c.into_iter().filter(|c| !c.trim().is_empty()).collect::<Vec<_>>())
                .filter(|c| !c.is_empty())
                .map(|c| (c, self.rounds.max(1))),
            cluster,
            broker: self.broker,
            gateway_cmd: self
                .gateway_cmd
                .filter(|c| !c.trim().is_empty())
                .unwrap_or(default_gateway),
            out: self.out.unwrap_or(default_out),
            sections: chosen,
            raw: RawSettings {
                size: self.size,
                messages: self.raw_msgs.unwrap_or(q(5_000, 30_000)),
                warmup: q(500, 2_000),
                outstanding: self.outstanding,
                prefetch: 100,
                rtt_samples: latency,
                echo_flows: self.pairs.max(1),
                echo_rounds: self.echo_rounds.unwrap_or(q(800, 6_000)),
            },
            paths: PathSettings {
                size: self.size,
                pairs: self.pairs,
                briefs: self.briefs.unwrap_or(q(800, 8_000)),
                replies: self.replies.unwrap_or(q(1_600, 12_000)),
                latency_samples: latency,
                warmup: 5,
            },
            presence_trials: self.presence_trials.unwrap_or(q(1, 3)),
            heartbeat_ms: self.heartbeat_ms,
            scale: ScaleSettings {
                // 10,000 is the footprint goal's level (~1–2 min of registrations here); a
                // gateway that refuses entities before it ends the scale run, reported, and the
                // goal is then extrapolated from the largest level reached (goals.rs).
                levels: self.entities.unwrap_or_else(|| {
                    if self.quick {
                        vec![1, 100]
                    } else {
                        vec![1, 100, 1000, 10_000]
                    }
                }),
                window: Duration::from_secs(self.scale_window_s.unwrap_or(q(6, 15) as u64)),
                settle: Duration::from_millis(self.heartbeat_ms),
                concurrency: 8,
                heartbeat_ms: self.heartbeat_ms,
                restarts: self.restarts.max(1),
            },
            migration: MigrationSettings {
                replies: self.migration_replies.unwrap_or(q(500, 2_000)).max(1),
                size: self.size,
                outstanding: self.outstanding,
                poll: Duration::from_millis(10),
            },
            keep: self.keep,
            baseline: self.baseline.unwrap_or_else(default_baseline),
            record_baseline: self.record_baseline,
            gate_reports: self.gate_reports.unwrap_or_default(),
            profile: self.profile,
            fleet,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses the command line (without the program name) into options ([`BenchCli`]).
    fn parse_args(args: &[&str]) -> Result<Options, String> {
        let cli =
            <BenchCli as clap::Parser>::try_parse_from(std::iter::once("fleet-bench").chain(args.iter().copied()))
                .map_err(|e| e.to_string())?;
        cli.options("gw".into(), "out.json".into())
    }

    #[test]
    fn arguments_parse_and_sections_filter() {
        let o = parse_args(&["--size", "2048", "--skip", "scale,presence", "--entities", "1,10"]).expect("valid");
        assert_eq!(o.paths.size, 2048);
        assert_eq!(o.raw.size, 2048);
        assert!(!o.sections.contains("scale") && o.sections.contains("raw"));
        assert_eq!(o.scale.levels, vec![1, 10]);
        assert!(o.cluster_scale.is_none());
        assert!(
            parse_args(&["--scale", "1,10"]).is_err(),
            "--scale is the cluster at full size now, no longer a name of --entities"
        );
        let o = parse_args(&["--entities", "1,100,1000,10000", "--quick"]).expect("valid");
        assert_eq!(o.scale.levels, vec![1, 100, 1000, 10_000]);
        assert_eq!((o.heartbeat_ms, o.scale.heartbeat_ms), (5_000, 5_000));
        assert!(parse_args(&["--only", "nope"]).is_err());
        assert!(parse_args(&["--size", "8"]).is_err());
        assert!(parse_args(&["--only", "migration"]).is_ok());
        let o = parse_args(&["--gate-reports", "a.json,b.json", "--record-baseline"]).expect("valid");
        assert_eq!(o.gate_reports, vec![PathBuf::from("a.json"), PathBuf::from("b.json")]);
        assert!(o.record_baseline);
    }

    #[test]
    fn compare_runs_the_paths_and_a_later_argument_wins() {
        let o = parse_args(&["--compare", "old-gw", "--rounds", "3", "--rounds", "5"]).expect("valid");
        assert_eq!(o.compare, Some((vec!["old-gw".to_string()], 5)));
        let o = parse_args(&["--compare", "a,b"]).expect("valid");
        assert_eq!(o.compare, Some((vec!["a".to_string(), "b".to_string()], 3)));
        let want: BTreeSet<String> = ["raw", "forward", "pull"].iter().map(|s| s.to_string()).collect();
        assert_eq!(o.sections, want);
        let o = parse_args(&["--compare", "old-gw", "--only", "forward"]).expect("valid");
        assert_eq!(o.sections.len(), 1);
        assert!(parse_args(&["--rounds", "2"]).is_err(), "--rounds needs --compare");
        assert!(parse_args(&["--compare", "x", "--record-baseline"]).is_err());
    }

    #[test]
    fn fleet_alone_runs_only_the_fleet() {
        let o = parse_args(&["--fleet", "--fleet-hosts", "50,100", "--fleet-form", "batched"]).expect("valid");
        assert!(o.sections.is_empty(), "{:?}", o.sections);
        let f = o.fleet.expect("fleet asked for");
        assert_eq!((f.hosts, f.entities, f.heartbeats_ms), (vec![50, 100], 50, vec![5_000]));
        assert_eq!(f.forms, vec![Form::Batched]);
        let o = parse_args(&["--fleet", "--only", "scale"]).expect("valid");
        assert!(o.sections.contains("scale"));
        let f = o.fleet.expect("fleet");
        assert_eq!(f.hosts, vec![50, 100, 200]);
        assert_eq!(f.forms, vec![Form::Batched, Form::PerEntity]);
        assert!(parse_args(&["--fleet", "--fleet-form", "nope"]).is_err());
        assert!(parse_args(&["--fleet", "--fleet-hosts", "2"]).is_err());
        assert_eq!((f.trusts.clone(), f.repeats), (vec![Trust::Peers], 1));
        let o = parse_args(&["--fleet", "--fleet-trust", "both", "--fleet-repeat", "3"]).expect("valid");
        let f = o.fleet.expect("fleet");
        assert_eq!((f.trusts, f.repeats), (vec![Trust::Peers, Trust::Certs], 3));
        assert!(parse_args(&["--fleet", "--fleet-trust", "keys"]).is_err());
        assert!(parse_args(&[]).expect("valid").fleet.is_none());
    }

    #[test]
    fn scale_alone_runs_the_cluster_at_full_size_and_quick_makes_it_a_smoke() {
        let o = parse_args(&["--scale"]).expect("valid");
        assert!(o.sections.is_empty(), "{:?}", o.sections);
        let s = o.cluster_scale.expect("--scale asked for");
        assert_eq!(s.levels, vec![1_000, 5_000, 10_000]);
        assert_eq!(s.broker, "process:rabbitmq-cluster");
        assert_eq!((s.per_gateway, s.kept, s.concurrency), (1_000, 200, 16));
        assert!(s.rebalance && s.rabbitmq_sampling);
        let o = parse_args(&[
            "--scale",
            "--quick",
            "--scale-levels",
            "300,100",
            "--scale-broker",
            "container:rabbitmq-cluster",
            "--scale-no-rebalance",
        ])
        .expect("valid");
        let s = o.cluster_scale.expect("--scale");
        assert_eq!((s.levels, s.per_gateway, s.kept), (vec![100, 300], 100, 20));
        assert_eq!(s.broker, "container:rabbitmq-cluster");
        assert!(!s.rebalance && s.rabbitmq_sampling);
        let o = parse_args(&["--scale", "--scale-suite-sampling"]).expect("valid");
        assert!(!o.cluster_scale.expect("--scale").rabbitmq_sampling);
        let o = parse_args(&["--scale", "--cluster-broker", "url:rabbitmq-cluster"]).expect("valid");
        assert_eq!(o.cluster_scale.expect("--scale").broker, "url:rabbitmq-cluster");
        assert!(parse_args(&["--scale", "--scale-levels", "0"]).is_err());
        assert!(
            parse_args(&["--scale-levels", "10"]).is_err(),
            "--scale-levels needs --scale"
        );
        assert!(parse_args(&["--scale", "--compare", "x"]).is_err());
    }

    #[test]
    fn cluster_alone_runs_only_the_cluster_against_both_single_node_types() {
        let o = parse_args(&["--cluster", "--broker", "container:rabbitmq"]).expect("valid");
        assert!(o.sections.is_empty(), "{:?}", o.sections);
        let c = o.cluster.expect("cluster asked for");
        assert_eq!(c.cluster_broker, "process:rabbitmq-cluster");
        assert_eq!(c.single_broker, "container:rabbitmq");
        assert_eq!(c.single_kinds, vec![QueueKind::Quorum, QueueKind::Classic]);
        assert_eq!((c.kills, c.amqp_heartbeat_s), (10, 10));
        let o = parse_args(&[
            "--cluster",
            "--quick",
            "--cluster-single-types",
            "classic",
            "--only",
            "raw",
        ])
        .expect("valid");
        assert!(o.sections.contains("raw"));
        let c = o.cluster.expect("cluster");
        assert_eq!((c.single_kinds, c.kills), (vec![QueueKind::Classic], 3));
        let none = parse_args(&["--cluster", "--cluster-single-types", "none", "--kills", "0"]).expect("valid");
        assert!(none.cluster.is_some_and(|c| c.single_kinds.is_empty() && c.kills == 0));
        assert!(parse_args(&["--cluster", "--cluster-single-types", "stream"]).is_err());
        assert!(parse_args(&["--kills", "3"]).is_err(), "--kills needs --cluster");
        assert!(parse_args(&[]).expect("valid").cluster.is_none());
    }
}
