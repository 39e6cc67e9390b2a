//! `--fleet`: presence measured on a fleet of simulated hosts with two real gateways among them.
//!
//! Why: [`crate::fleet::presence_model`] prices presence for fleets of 10 to 1,000 hosts from one
//! gateway's per-message costs; this section puts N hosts on the broker at once and measures what
//! the model predicts. The N−2 simulated hosts live in this process: each has its own ed25519 key
//! (pinned in the peers file the real gateways read, so they trust it), its own exclusive
//! `roster.<host>` queue bound to `roster.#` on `bridge.roster` like a gateway's (TOP-3,
//! dead-lettered to `bridge.dlx`), E entities, and a heartbeat every H — per-entity (PRS-1: one
//! signed PRESENCE per entity plus `_gateway`) or batched (PRB-1: one `_gateway` PRESENCE listing
//! every entity, declaring `presence-batch`). Each verifies what it receives as a gateway would:
//! the suite's own envelope code ([`fleet_conformance::envelope`], not the gateway's) reads the
//! headers and builds the signing input, the signature is checked under the sender's pinned key,
//! `to` must be the routing key and the routing key the sender's `roster.<host>.<from>`, and the
//! JSON body is parsed. They share a few AMQP connections, one channel per host.
//!
//! Two real reference gateways (the [`crate::rig::hosts::Fleet`] helper) each hold E registered
//! entities among them, batching on (the default, `batched` form) or `FLEET_PRESENCE_BATCH=off`
//! (`per-entity` form; the simulated hosts then declare no `presence-batch` either, so PRB-4 would
//! keep a batching gateway per-entity too).
//!
//! Per run (form, H, N) after one settling round: over a window, the messages the simulated hosts
//! received and verified (counted here; broker deliveries/s = that × N/(N−2), the real gateways'
//! two roster queues receiving the same stream as every simulated one — their backlog at the end,
//! from the management API, says whether they did), the broker's, the real gateways' and this
//! process's CPU (`/proc/<pid>/stat`), the real gateways' RSS, then the time for one more
//! simulated host to be listed (its `_gateway` entry) in both real gateways' `GET /v1/roster`.
//! With certificates ([`crate::fleet::trust`]) no key is pinned: every host carries its own.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, VerifyingKey};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::fleet::presence_model::{self, Model};
use crate::fleet::trust::{self as fleet_trust, Credentials, Revocation, Trust};
use crate::rig::hosts::Fleet;
use crate::rig::stats::{CpuProbe, process_memory};
use fleet_conformance::broker::Broker;
use fleet_conformance::envelope::{Envelope, now_ms};
use fleet_conformance::herdr::InputReaction;
use fleet_conformance::keys::HostKey;

/// The two real gateways of every run.
pub const REAL: [&str; 2] = ["gw-a", "gw-b"];
/// The simulated host started after the window, timed until both real gateways list it.
const NEWCOMER: &str = "sim-new";
/// Deliveries a simulated host takes before it acks (one `multiple` ack for them all).
const ACK_EVERY: u64 = 32;
const PREFETCH: u16 = 128;

/// How every host of a run heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Form {
    /// PRB-1: one `_gateway` PRESENCE per host per H listing every entity.
    Batched,
    /// PRS-1: one PRESENCE per entity plus the `_gateway` one, per host per H.
    PerEntity,
}

impl Form {
    pub fn label(self) -> &'static str {
        match self {
            Form::Batched => "batched",
            Form::PerEntity => "per-entity",
        }
    }

    /// `batched`, `per-entity` or `both`.
    pub fn parse_list(s: &str) -> Result<Vec<Form>, String> {
        match s {
            "batched" => Ok(vec![Form::Batched]),
            "per-entity" => Ok(vec![Form::PerEntity]),
            "both" => Ok(vec![Form::Batched, Form::PerEntity]),
            other => Err(format!("--fleet-form: {other:?} is not batched, per-entity or both")),
        }
    }
}

/// What `--fleet` runs.
#[derive(Debug, Clone)]
pub struct FleetSettings {
    /// N, hosts in all (the two real gateways included), one run per level.
    pub hosts: Vec<usize>,
    /// E, entities per host (real and simulated).
    pub entities: usize,
    /// H values, one table each.
    pub heartbeats_ms: Vec<u64>,
    pub forms: Vec<Form>,
    /// The measuring window per run.
    pub window: Duration,
    /// AMQP connections the simulated hosts share.
    pub connections: usize,
    /// Simulated hosts that verify what they receive (the others count and ack it); `None`: all.
    /// On one machine every simulated host's verifications share the cores with the broker and
    /// the real gateways, which a real fleet spreads over N machines.
    pub verifying_hosts: Option<usize>,
    /// How the real gateways trust the other hosts: one run of each per (form, H, N) and round.
    pub trusts: Vec<Trust>,
    /// Rounds of `trusts` per (form, H, N), their order alternating ([`Trust::interleaved`]).
    pub repeats: usize,
}

/// Everything `--fleet` measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetResult {
    pub entities: usize,
    /// Simulated hosts that verified what they received (`None`: all of them).
    #[serde(default)]
    pub verifying_hosts: Option<usize>,
    pub window_s: f64,
    /// How the broker deliveries were counted.
    pub deliveries_counted_as: String,
    pub runs: Vec<FleetRun>,
}

/// One (form, H, N).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FleetRun {
    pub form: Form,
    /// Peers file or certificates (SPEC §18).
    #[serde(default)]
    pub trust: Trust,
    pub heartbeat_ms: u64,
    /// N, the two real gateways included.
    pub hosts: usize,
    pub entities: usize,
    pub measured: Measured,
    pub model: Predicted,
    /// Received ≥ 75 % of the model's rate, no roster backlog of a round or more at the end, a
    /// new host listed by both real gateways within 2H.
    pub keeps_up: bool,
    /// Why a figure is off the model by more than 25 %, or why the run did not keep up.
    pub reasons: Vec<String>,
}

/// What one run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Measured {
    pub window_s: f64,
    /// Broker deliveries/s on `bridge.roster`: the simulated hosts' count × N/(N−2).
    pub deliveries_per_s: f64,
    /// PRESENCE messages each verifying simulated host received and verified per second (mean).
    pub verified_per_host_per_s: f64,
    /// PRESENCE messages each simulated host received per second (mean, verifying or not).
    #[serde(default)]
    pub received_per_host_per_s: f64,
    /// Deliveries that failed verification (any: a bug of the bench or the gateway).
    pub verify_failures: u64,
    /// PRESENCE messages the simulated hosts published per second.
    pub sim_published_per_s: f64,
    /// % of one core over the window (`None` without a pid).
    pub broker_cpu_pct: Option<f64>,
    pub gateway_a_cpu_pct: Option<f64>,
    pub gateway_b_cpu_pct: Option<f64>,
    /// This process (every simulated host: signing, verifying, AMQP).
    pub bench_cpu_pct: Option<f64>,
    /// The machine's busy share of all cores (0..1), other users' work included.
    pub machine_busy: f64,
    pub gateway_a_rss_mib: Option<f64>,
    pub gateway_b_rss_mib: Option<f64>,
    /// Messages ready in the real gateways' `roster.<host>` queues at the end of the window.
    pub real_backlog: Option<u64>,
    /// The most messages ready in any simulated host's queue at the end of the window.
    pub sim_backlog_max: Option<u64>,
    /// Presence messages the real gateways rejected during the window (dead letters from their
    /// roster queues, SIG-5): any is a bug of the bench's credentials or of the gateway.
    #[serde(default)]
    pub real_rejected: Option<u64>,
    /// Start of one more simulated host → its `_gateway` listed by gateway a, b; and both.
    pub new_host_listed_a_ms: Option<f64>,
    pub new_host_listed_b_ms: Option<f64>,
    pub new_host_listed_ms: Option<f64>,
    /// [C-7] under this load: the new host's first entity SENDs to a worker on gateway a right
    /// after its first heartbeat; what came back to it (`injected`, `failed:<reason>`, `none`)…
    pub new_entity_send_outcome: Option<String>,
    /// … and when, ms from the new host's start (`None` when nothing came back).
    pub new_entity_send_ms: Option<f64>,
    /// A certificate run's revocation, timed after the window and the new host.
    #[serde(default)]
    pub revocation: Option<Revocation>,
}

/// [`presence_model`]'s prediction for the same N, E, H.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    pub deliveries_per_s: f64,
    pub per_gateway_msgs_per_s: f64,
    /// From the scale run's per-message constants, when this run measured them.
    pub gateway_cpu_pct: Option<f64>,
    pub broker_cpu_pct: Option<f64>,
}

impl Predicted {
    pub fn of(form: Form, hosts: usize, entities: usize, heartbeat_ms: u64, model: Option<&Model>) -> Predicted {
        let h = heartbeat_ms as f64 / 1e3;
        let batched = form == Form::Batched;
        let (_, deliveries, per_gateway) = presence_model::counts(hosts as u64, entities as u64, h, batched);
        let cost = model.map(|m| presence_model::cost(&m.constants, h, hosts as u64, entities as u64, batched));
        Predicted {
            deliveries_per_s: deliveries,
            per_gateway_msgs_per_s: per_gateway,
            gateway_cpu_pct: cost.as_ref().map(|c| 100.0 * c.per_gateway_cores),
            broker_cpu_pct: cost.and_then(|c| c.broker_cores).map(|c| 100.0 * c),
        }
    }
}

/// Off by more than 25 %.
pub fn off(measured: f64, predicted: f64) -> bool {
    predicted > 0.0 && ((measured - predicted) / predicted).abs() > 0.25
}

impl FleetRun {
    /// Judges the measured figures against the model: keeps up, and why not / why off.
    pub fn judge(form: Form, heartbeat_ms: u64, hosts: usize, entities: usize, m: Measured, p: Predicted) -> FleetRun {
        let mut reasons = Vec::new();
        let round = match form {
            Form::Batched => hosts as u64,
            Form::PerEntity => hosts as u64 * (entities as u64 + 1),
        };
        let behind_real = m.real_backlog.is_some_and(|b| b >= round);
        let behind_sim = m.sim_backlog_max.is_some_and(|b| b >= round);
        let slow = m.verified_per_host_per_s < 0.75 * p.per_gateway_msgs_per_s;
        let listed = m.new_host_listed_ms.is_some_and(|ms| ms <= 2.0 * heartbeat_ms as f64);
        if behind_real {
            reasons.push(format!(
                "real gateways {} msgs behind at the end (a round is {round})",
                m.real_backlog.unwrap_or_default()
            ));
        }
        if let Some(n) = m.real_rejected.filter(|n| *n > 0) {
            reasons.push(format!(
                "the real gateways rejected {n} presence messages in the window"
            ));
        }
        if behind_sim {
            reasons.push(format!(
                "a simulated host {} msgs behind (this process cannot verify the rate)",
                m.sim_backlog_max.unwrap_or_default()
            ));
        }
        if off(m.deliveries_per_s, p.deliveries_per_s) || off(m.verified_per_host_per_s, p.per_gateway_msgs_per_s) {
            let why = if behind_sim || behind_real || m.machine_busy > 0.9 {
                format!(
                    "the machine is saturated ({:.0} % of its cores busy): the broker or the verifiers fall behind",
                    100.0 * m.machine_busy
                )
            } else if m.verified_per_host_per_s > p.per_gateway_msgs_per_s {
                "more than the model: deltas or the registration's up presences fell in the window".into()
            } else {
                "fewer rounds fell in the window than H divides into it (phase)".into()
            };
            reasons.push(why);
        }
        if let Some(o) = m.new_entity_send_outcome.as_deref().filter(|o| *o != "injected") {
            reasons.push(format!("[C-7]: a new entity's first SEND came back {o}"));
        }
        if !listed {
            reasons.push(match m.new_host_listed_ms {
                Some(ms) => format!("a new host took {ms:.0} ms to be listed everywhere (> 2H)"),
                None => "a new host was not listed everywhere within the wait".into(),
            });
        }
        FleetRun {
            form,
            trust: Trust::Peers,
            heartbeat_ms,
            hosts,
            entities,
            keeps_up: !slow && !behind_real && !behind_sim && listed,
            measured: m,
            model: p,
            reasons,
        }
    }
}

impl FleetResult {
    /// The first peers-file run at exactly this size, if there was one.
    pub fn at(&self, form: Form, hosts: usize, entities: usize, heartbeat_ms: u64) -> Option<&FleetRun> {
        self.runs.iter().find(|r| {
            (r.form, r.trust, r.hosts, r.entities, r.heartbeat_ms)
                == (form, Trust::Peers, hosts, entities, heartbeat_ms)
        })
    }

    /// The largest N of `form` with E `entities` at H that kept up, if any did.
    pub fn largest_keeping_up_at(&self, form: Form, entities: usize, heartbeat_ms: u64) -> Option<usize> {
        self.runs
            .iter()
            .filter(|r| r.form == form && r.trust == Trust::Peers && r.entities == entities)
            .filter(|r| r.heartbeat_ms == heartbeat_ms && r.keeps_up)
            .map(|r| r.hosts)
            .max()
    }
}

/// What the simulated hosts count.
#[derive(Default)]
struct Counters {
    received: AtomicU64,
    verified: AtomicU64,
    failed: AtomicU64,
    published: AtomicU64,
}

type Peers = Arc<HashMap<String, VerifyingKey>>;

/// Checks one delivery as a receiving gateway would (SIG-2 (1)–(3) for PRESENCE, body parsed).
fn verify(peers: &HashMap<String, VerifyingKey>, routing_key: &str, headers: Option<&FieldTable>, body: &[u8]) -> bool {
    let Some(env) = headers.and_then(|t| Envelope::from_field_table(t).ok()) else {
        return false;
    };
    if env.check_required().is_err() || env.kind() != "PRESENCE" || env.value("to") != routing_key {
        return false;
    }
    let host = env.value("host");
    let Some(key) = peers.get(host) else {
        return false;
    };
    // A PRESENCE's `from` must be its routing key's gid and `host` its host.
    let Some(rest) = routing_key.strip_prefix("roster.") else {
        return false;
    };
    if rest.strip_prefix(host).and_then(|r| r.strip_prefix('.')) != Some(env.value("from")) {
        return false;
    }
    let Some(sig) = B64
        .decode(env.value("sig"))
        .ok()
        .and_then(|b| <[u8; 64]>::try_from(b).ok())
    else {
        return false;
    };
    if key
        .verify_strict(&env.signing_input(body), &Signature::from_bytes(&sig))
        .is_err()
    {
        return false;
    }
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.is_object())
}

/// What every simulated host of a run shares: how it heartbeats, whom it trusts, what it counts.
#[derive(Clone)]
struct Beat {
    entities: usize,
    form: Form,
    heartbeat_ms: u64,
    peers: Peers,
    counters: Arc<Counters>,
    /// A certificate run: every host's certificate line, carried in its `_gateway` presence.
    certs: Option<Arc<BTreeMap<String, String>>>,
}

/// A simulated host: its key, its entities, its channel and tasks.
struct SimHost {
    key: HostKey,
    gids: Vec<String>,
    channel: Channel,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn long(v: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(v.to_string()))
}

/// One signed PRESENCE of `host` about `gid` (`_gateway` for the host itself).
fn presence(key: &HostKey, gid: &str, body: &Value, ttl_ms: u64) -> (String, Vec<u8>, BasicProperties) {
    let to = format!("roster.{}.{gid}", key.host);
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut env = Envelope::new("PRESENCE", gid, &to, &key.host);
    env.set("expiresAt", &(now_ms() + ttl_ms).to_string());
    let env = env.signed_by(key, &bytes);
    let props = BasicProperties::default()
        .with_message_id(env.msg_id().into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_headers(env.to_field_table());
    (to, bytes, props)
}

/// One heartbeat round of a simulated host: the messages to publish; `cert` (MEM-2) in its
/// `_gateway` presence when it has one.
pub(crate) fn round(
    key: &HostKey,
    gids: &[String],
    form: Form,
    heartbeat_ms: u64,
    cert: Option<&str>,
) -> fleet_trust::Round {
    let ttl = 3 * heartbeat_ms;
    let entity = |gid: &str| json!({"gid": gid, "state": "up", "role": "worker", "groups": [], "agentStatus": "idle"});
    let mut gateway = json!({
        "state": "up", "role": "gateway", "groups": [], "agentStatus": "unknown", "ttlMs": ttl, "profiles": [],
    });
    if let Some(c) = cert {
        gateway["cert"] = json!(c);
    }
    match form {
        Form::Batched => {
            gateway["capabilities"] = json!(["presence-batch"]);
            gateway["entities"] = Value::Array(gids.iter().map(|g| entity(g)).collect());
            vec![presence(key, "_gateway", &gateway, ttl)]
        }
        Form::PerEntity => {
            let mut out: Vec<_> = gids
                .iter()
                .map(|g| {
                    let body =
                        json!({"state": "up", "role": "worker", "groups": [], "agentStatus": "idle", "ttlMs": ttl});
                    presence(key, g, &body, ttl)
                })
                .collect();
            out.push(presence(key, "_gateway", &gateway, ttl));
            out
        }
    }
}

impl SimHost {
    /// Declares, binds and consumes `roster.<host>` (TOP-3) and starts heartbeating at a random
    /// phase of H (`first_now`: the first round at once, for the newcomer).
    async fn start(
        conn: &Connection,
        key: HostKey,
        beat: &Beat,
        first_now: bool,
        verifying: bool,
    ) -> anyhow::Result<SimHost> {
        let Beat {
            entities,
            form,
            heartbeat_ms,
            peers,
            counters,
            certs,
        } = beat.clone();
        let ch = conn.create_channel().await?;
        ch.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
        let q = format!("roster.{}", key.host);
        let mut args = FieldTable::default();
        args.insert("x-dead-letter-exchange".into(), long("bridge.dlx"));
        let opts = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(q.as_str().into(), opts, args).await?;
        ch.queue_bind(
            q.as_str().into(),
            "bridge.roster".into(),
            "roster.#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
        let mut consumer = ch
            .basic_consume(
                q.as_str().into(),
                format!("sim-{}", key.host).as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let c = Arc::clone(&counters);
        let receiving = tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(Ok(d)) = consumer.next().await {
                c.received.fetch_add(1, Ordering::Relaxed);
                if verifying {
                    let ok = verify(&peers, d.routing_key.as_str(), d.properties.headers().as_ref(), &d.data);
                    c.verified.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        c.failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
                n += 1;
                if n.is_multiple_of(ACK_EVERY) {
                    let _ = d.acker.ack(BasicAckOptions { multiple: true }).await;
                }
            }
        });
        let gids: Vec<String> = (0..entities).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let (pch, pkey, pgids) = (ch.clone(), key.clone(), gids.clone());
        let heartbeating = tokio::spawn(async move {
            let h = Duration::from_millis(heartbeat_ms.max(1));
            let phase = if first_now {
                Duration::ZERO
            } else {
                Duration::from_millis((uuid::Uuid::new_v4().as_u128() % u128::from(heartbeat_ms.max(1))) as u64)
            };
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + phase, h);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let cert = certs.as_ref().and_then(|c| c.get(&pkey.host)).map(String::as_str);
            loop {
                tick.tick().await;
                for (to, body, props) in round(&pkey, &pgids, form, heartbeat_ms, cert) {
                    let published = pch
                        .basic_publish(
                            "bridge.roster".into(),
                            to.as_str().into(),
                            BasicPublishOptions::default(),
                            &body,
                            props,
                        )
                        .await;
                    if published.is_err() {
                        return;
                    }
                    counters.published.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Ok(SimHost {
            key,
            gids,
            channel: ch,
            tasks: vec![receiving, heartbeating],
        })
    }

    async fn stop(self) {
        for t in &self.tasks {
            t.abort();
        }
        // Closing the shared connection closes the channel (one by one, a broker in a memory
        // alarm could keep each waiting).
        drop(self.channel);
        let _ = (self.key, self.gids);
    }
}

/// How long a run waits for both real gateways to list a new host, ms.
pub fn listing_wait_ms(heartbeat_ms: u64) -> f64 {
    (4 * heartbeat_ms + 10_000) as f64
}

/// Whether `gateway`'s roster lists `host`'s `_gateway` entry.
pub(crate) async fn listed(fleet: &Fleet, gateway: &str, host: &str) -> bool {
    let Ok(g) = fleet.host(gateway) else {
        return false;
    };
    let got = tokio::time::timeout(Duration::from_secs(5), g.gateway.get("/v1/roster")).await;
    match got.unwrap_or(Ok((0, Value::Null))) {
        Ok((200, r)) => r["entries"]
            .as_array()
            .is_some_and(|es| es.iter().any(|e| e["host"] == host && e["gid"] == "_gateway")),
        _ => false,
    }
}

fn pct(spent: &crate::rig::stats::CpuSpent, name: &str) -> Option<f64> {
    spent.seconds.get(name).map(|c| 100.0 * c / spent.wall_s.max(1e-9))
}

fn rss_mib(pid: Option<u32>) -> Option<f64> {
    process_memory(pid?).map(|(rss, _, _)| rss as f64 / 1024.0)
}

/// Where the runs happen: the broker, its vhost, the gateway to start, the work directory.
pub struct On<'a> {
    pub broker: &'a Broker,
    pub vhost: &'a str,
    /// One URL per broker node (one on a single node): the simulated hosts' connections are
    /// spread over them round-robin, as a fleet's gateways would be.
    pub node_urls: &'a [String],
    /// Extra environment of the real gateways, by host (on a cluster: `FLEET_AMQP_URL` with
    /// every node, `FLEET_QUEUE_TYPE=quorum`, SPEC §16).
    pub real_env: &'a BTreeMap<String, BTreeMap<String, String>>,
    pub gateway_cmd: &'a str,
    pub work: &'a std::path::Path,
}

/// Runs every (H, form, N) of `s` on `on`, each beside `model` (the scale run's, when it ran).
pub async fn run(on: &On<'_>, s: &FleetSettings, model: Option<&Model>) -> anyhow::Result<FleetResult> {
    let mut runs = Vec::new();
    for &h in &s.heartbeats_ms {
        for &form in &s.forms {
            'sizes: for &n in &s.hosts {
                for turn in 0..s.repeats.max(1) {
                    for trust in Trust::interleaved(&s.trusts, turn) {
                        match measure(on, s, model, (form, h, n, trust, turn)).await? {
                            Some(r) => runs.push(r),
                            None => break 'sizes,
                        }
                        // Each run's line as it ends, so a run cut short still leaves its figures.
                        let so_far = FleetResult {
                            entities: s.entities,
                            verifying_hosts: s.verifying_hosts,
                            window_s: s.window.as_secs_f64(),
                            deliveries_counted_as: String::new(),
                            runs: runs.last().cloned().into_iter().collect(),
                        };
                        for l in crate::fleet::table::lines(&so_far).iter().skip(2) {
                            eprintln!("fleet-bench: {l}");
                        }
                    }
                }
            }
        }
    }
    Ok(FleetResult {
        entities: s.entities,
        verifying_hosts: s.verifying_hosts,
        window_s: s.window.as_secs_f64(),
        deliveries_counted_as: "messages the N−2 simulated hosts received in the window × N/(N−2), over the window \
                                (the real gateways' roster queues get the same stream; their backlog says whether \
                                they kept up)"
            .into(),
        runs,
    })
}

/// One run of (form, H, N, trust, turn), judged; `None` when it did not finish (larger fleets of
/// that form are then skipped).
async fn measure(
    on: &On<'_>,
    s: &FleetSettings,
    model: Option<&Model>,
    (form, h, n, trust, turn): (Form, u64, usize, Trust, usize),
) -> anyhow::Result<Option<FleetRun>> {
    eprintln!(
        "fleet-bench: fleet: {n} hosts × {} entities, H = {h} ms, {}, trust {} (round {}) …",
        s.entities,
        form.label(),
        trust.label(),
        turn + 1
    );
    let dir = on
        .work
        .join(format!("fleet-{}-{}-{h}-{n}-{turn}", form.label(), trust.label()));
    // A broker that enters a memory alarm while the hosts start stops reading their
    // connections: such a run never ends on its own, and a larger N only sooner.
    let certs = if trust == Trust::Certs { 60_000 } else { 0 };
    let limit = Duration::from_millis(listing_wait_ms(h) as u64 + 5 * h + 200_000 + certs) + s.window;
    let Ok(m) = tokio::time::timeout(limit, one(on, dir, s, (form, h, n, trust))).await else {
        eprintln!(
            "fleet-bench: fleet: {n} hosts {} did not finish within {} s (the broker stopped \
             answering: a memory alarm?); larger fleets of this form are skipped",
            form.label(),
            limit.as_secs()
        );
        return Ok(None);
    };
    let p = Predicted::of(form, n, s.entities, h, model);
    let mut r = FleetRun::judge(form, h, n, s.entities, m?, p);
    r.trust = trust;
    eprintln!(
        "fleet-bench: fleet: {:.0} deliveries/s (model {:.0}), {:.0} verified/s per host (model {:.0}), \
         gateways {:?}/{:?} % CPU, listed in {:?} ms{}",
        r.measured.deliveries_per_s,
        r.model.deliveries_per_s,
        r.measured.verified_per_host_per_s,
        r.model.per_gateway_msgs_per_s,
        r.measured.gateway_a_cpu_pct.map(|x| (x * 10.0).round() / 10.0),
        r.measured.gateway_b_cpu_pct.map(|x| (x * 10.0).round() / 10.0),
        r.measured.new_host_listed_ms.map(|x| x.round()),
        if r.keeps_up { "" } else { " — does not keep up" }
    );
    Ok(Some(r))
}

/// One run: the real gateways with E entities each, N−2 simulated hosts, the window, the newcomer.
async fn one(
    on: &On<'_>,
    dir: std::path::PathBuf,
    s: &FleetSettings,
    (form, heartbeat_ms, hosts, trust): (Form, u64, usize, Trust),
) -> anyhow::Result<Measured> {
    let On {
        broker,
        vhost,
        node_urls,
        real_env,
        gateway_cmd,
        ..
    } = *on;
    let url_of = |i: usize| node_urls.get(i % node_urls.len().max(1)).cloned().unwrap_or_default();
    let sims = hosts.saturating_sub(REAL.len()).max(1);
    let names: Vec<String> = REAL
        .iter()
        .map(|s| s.to_string())
        .chain((0..sims).map(|i| format!("sim-{i}")))
        .chain([NEWCOMER.to_string()])
        .collect();
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut env = BTreeMap::from([("FLEET_HEARTBEAT_MS".to_string(), heartbeat_ms.to_string())]);
    if form == Form::PerEntity {
        env.insert("FLEET_PRESENCE_BATCH".into(), "off".into());
    }
    let trust_dir = dir.join("trust");
    let mut fleet = Fleet::new(dir, url_of(0), gateway_cmd.to_string(), env, &names);
    // With certificates no host is in a peers file (`[peers]` alone), each has its certificate.
    let creds = match trust {
        Trust::Certs => {
            fleet.pin_only(&[]);
            let keys: Vec<HostKey> = names.iter().filter_map(|h| fleet.key(h).cloned()).collect();
            Some(tokio::task::spawn_blocking(move || Credentials::issue(&trust_dir, &keys)).await??)
        }
        Trust::Peers => None,
    };
    let mut sim_hosts = Vec::new();
    let mut conns = Vec::new();
    let outcome = async {
        for g in REAL {
            let mut env = real_env.get(g).cloned().unwrap_or_default();
            if let Some(c) = &creds {
                env.extend(c.gateway_env(g)?);
            }
            fleet.start_host(g, &env).await?;
        }
        let mut workers = Vec::new();
        for g in REAL {
            workers.push(register(&fleet, g, s.entities).await?);
        }
        let peers: Peers = Arc::new(
            names
                .iter()
                .filter_map(|h| {
                    let k = fleet.key(h)?;
                    let raw = B64.decode(k.public_base64()).ok()?;
                    let vk = VerifyingKey::from_bytes(&<[u8; 32]>::try_from(raw).ok()?).ok()?;
                    Some((h.clone(), vk))
                })
                .collect(),
        );
        for i in 0..s.connections.max(1) {
            conns.push(Connection::connect(&url_of(i), ConnectionProperties::default()).await?);
        }
        let counters = Arc::new(Counters::default());
        let beat = Beat {
            entities: s.entities,
            form,
            heartbeat_ms,
            peers: Arc::clone(&peers),
            counters: Arc::clone(&counters),
            certs: creds.as_ref().map(Credentials::certs),
        };
        for (i, h) in names.iter().skip(REAL.len()).take(sims).enumerate() {
            let key = fleet.key(h).ok_or_else(|| anyhow!("no key for {h}"))?.clone();
            let c = &conns[i % conns.len()];
            let verifying = s.verifying_hosts.is_none_or(|k| i < k);
            let host = SimHost::start(c, key, &beat, false, verifying).await?;
            sim_hosts.push(host);
        }
        // Rejections tapped before settling: connecting to a busy broker must not cut the window.
        let rejections = fleet_trust::Rejections::start(&url_of(0)).await.ok();
        // Every host heartbeats once (rosters fill), then the window.
        tokio::time::sleep(Duration::from_millis(heartbeat_ms + heartbeat_ms / 2)).await;
        let pid = |g: &str| fleet.host(g).ok().and_then(|h| h.gateway.pid());
        let probe = crate::rig::stats::with_brokers(CpuProbe::default())
            .with("gateway_a", pid(REAL[0]))
            .with("gateway_b", pid(REAL[1]))
            .with("bench", Some(std::process::id()));
        let rejected = || rejections.as_ref().map(fleet_trust::Rejections::total);
        let (r0, v0, p0, j0) = (
            counters.received.load(Ordering::Relaxed),
            counters.verified.load(Ordering::Relaxed),
            counters.published.load(Ordering::Relaxed),
            rejected(),
        );
        let a = probe.snapshot();
        tokio::time::sleep(s.window).await;
        let spent = a.until(&probe.snapshot());
        let received = counters.received.load(Ordering::Relaxed) - r0;
        let verified = counters.verified.load(Ordering::Relaxed) - v0;
        let published = counters.published.load(Ordering::Relaxed) - p0;
        let real_rejected = rejected().zip(j0).map(|(n, n0)| n - n0);
        if let Some(r) = rejections {
            r.stop().await;
        }
        let verifiers = s.verifying_hosts.map_or(sims, |k| k.clamp(1, sims));
        let wall = spent.wall_s.max(1e-9);
        let queues = tokio::time::timeout(Duration::from_secs(20), broker.management().queues(vhost))
            .await
            .ok()
            .and_then(Result::ok);
        let ready = |real: bool| {
            queues.as_ref().map(|qs| {
                qs.iter()
                    .filter(|q| {
                        let name = q.name.strip_prefix("roster.").unwrap_or("");
                        !name.is_empty() && REAL.contains(&name) == real
                    })
                    .map(|q| q.messages_ready)
                    .collect::<Vec<u64>>()
            })
        };
        let per_host = received as f64 / sims as f64 / wall;
        let mut m = Measured {
            window_s: wall,
            deliveries_per_s: per_host * hosts.max(sims) as f64,
            verified_per_host_per_s: verified as f64 / verifiers as f64 / wall,
            received_per_host_per_s: per_host,
            verify_failures: counters.failed.load(Ordering::Relaxed),
            sim_published_per_s: published as f64 / wall,
            broker_cpu_pct: crate::rig::stats::broker_seconds(&spent).map(|c| 100.0 * c / wall),
            gateway_a_cpu_pct: pct(&spent, "gateway_a"),
            gateway_b_cpu_pct: pct(&spent, "gateway_b"),
            bench_cpu_pct: pct(&spent, "bench"),
            machine_busy: spent.machine_busy(),
            gateway_a_rss_mib: rss_mib(pid(REAL[0])),
            gateway_b_rss_mib: rss_mib(pid(REAL[1])),
            real_backlog: ready(true).map(|v| v.iter().sum()),
            sim_backlog_max: ready(false).map(|v| v.into_iter().max().unwrap_or(0)),
            real_rejected,
            ..Measured::default()
        };
        // One more host: its first heartbeat at once; both real gateways polled.
        let key = fleet
            .key(NEWCOMER)
            .ok_or_else(|| anyhow!("no key for {NEWCOMER}"))?
            .clone();
        let t0 = Instant::now();
        // A new host has a connection of its own, not one shared with N/connections others.
        // Its channels are opened before it publishes: a broker in a memory alarm stops reading
        // a connection that published, and would never answer them.
        let setup = async {
            let own = Connection::connect(&url_of(sims), ConnectionProperties::default()).await?;
            let pch = own.create_channel().await?;
            let newcomer = SimHost::start(&own, key.clone(), &beat, true, true).await?;
            anyhow::Ok((own, pch, newcomer))
        };
        let Ok(started) = tokio::time::timeout(Duration::from_secs(15), setup).await else {
            eprintln!("fleet-bench: fleet: the broker did not let a new host start within 15 s (memory alarm?)");
            return anyhow::Ok(m);
        };
        let (own, pch, newcomer) = started?;
        let probe = match (newcomer.gids.first(), workers.first().cloned().flatten()) {
            (Some(from), Some(to)) => {
                let from = from.clone();
                let wait = Duration::from_millis(3 * heartbeat_ms + 35_000);
                Some(tokio::spawn(async move {
                    let sent = first_send(pch, &key, &from, &to, t0, wait);
                    tokio::time::timeout(wait + Duration::from_secs(5), sent)
                        .await
                        .unwrap_or_else(|_| Ok(("none".to_string(), None)))
                }))
            }
            _ => None,
        };
        sim_hosts.push(newcomer);
        conns.push(own);
        let deadline = t0 + Duration::from_millis(listing_wait_ms(heartbeat_ms) as u64);
        while (m.new_host_listed_a_ms.is_none() || m.new_host_listed_b_ms.is_none()) && Instant::now() < deadline {
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            if m.new_host_listed_a_ms.is_none() && listed(&fleet, REAL[0], NEWCOMER).await {
                m.new_host_listed_a_ms = Some(ms);
            }
            if m.new_host_listed_b_ms.is_none() && listed(&fleet, REAL[1], NEWCOMER).await {
                m.new_host_listed_b_ms = Some(ms);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        m.new_host_listed_ms = match (m.new_host_listed_a_ms, m.new_host_listed_b_ms) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
        if let Some(p) = probe {
            match p.await {
                Ok(Ok((outcome, ms))) => {
                    m.new_entity_send_outcome = Some(outcome);
                    m.new_entity_send_ms = ms;
                }
                Ok(Err(e)) => eprintln!("fleet-bench: fleet: no [C-7] probe: {e:#}"),
                Err(e) => eprintln!("fleet-bench: fleet: no [C-7] probe: {e}"),
            }
        }
        // With certificates: one simulated host revoked, timed until rejected everywhere.
        if let (Some(c), Some(victim)) = (&creds, sim_hosts.first()) {
            // Its probe: one entity's PRESENCE (~0.5 KB), not its batch: 200 fan-outs of a 6 KB
            // batch 10 times a second would add to the broker's load what is being timed.
            let (key, gids) = (victim.key.clone(), victim.gids[..1].to_vec());
            let k = key.clone();
            let beat_once = move || round(&k, &gids, Form::PerEntity, heartbeat_ms, None)[..1].to_vec();
            let wait = Duration::from_millis(heartbeat_ms + 10_000);
            match fleet_trust::time_revocation(&fleet, c, &url_of(0), &key, beat_once, wait).await {
                Ok(r) => m.revocation = Some(r),
                Err(e) => eprintln!("fleet-bench: fleet: no revocation timed: {e:#}"),
            }
        }
        anyhow::Ok(m)
    }
    .await;
    for h in sim_hosts {
        h.stop().await;
    }
    for c in conns {
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close(200, "done".into())).await;
    }
    fleet.shutdown().await;
    outcome
}

/// A main and E−1 workers (its children) on real gateway `g`; returns a worker's gid, if any.
async fn register(fleet: &Fleet, g: &str, entities: usize) -> anyhow::Result<Option<String>> {
    if entities == 0 {
        return Ok(None);
    }
    let main = fleet.add(g, "main", None, InputReaction::StartWorking).await?;
    let mut added = futures_util::stream::iter(1..entities)
        .map(|_| fleet.add(g, "worker", Some(&main.gid), InputReaction::WorksBriefly))
        .buffer_unordered(8);
    let mut worker = None;
    while let Some(m) = added.next().await {
        worker.get_or_insert(m?.gid);
    }
    Ok(worker)
}

/// [C-7]: a SEND from `from` (an entity of `key`'s host, whose presence may not have arrived
/// yet) to `to`; waits up to `wait` for the INJECTED or FAILED about it on a queue of our own
/// bound to `from` on `bridge.msg`. Returns the outcome and when it came, ms from `t0`.
async fn first_send(
    ch: Channel,
    key: &HostKey,
    from: &str,
    to: &str,
    t0: Instant,
    wait: Duration,
) -> anyhow::Result<(String, Option<f64>)> {
    let mut replies = crate::fleet::scale::tap(&ch, "bridge.msg", from, "c7").await?;
    let body = b"fleet-bench [C-7] probe".to_vec();
    let env = Envelope::new("SEND", from, to, &key.host).signed_by(key, &body);
    let props = BasicProperties::default()
        .with_message_id(env.msg_id().into())
        .with_content_type("text/plain; charset=utf-8".into())
        .with_delivery_mode(2)
        .with_headers(env.to_field_table());
    ch.basic_publish(
        "bridge.msg".into(),
        to.into(),
        BasicPublishOptions::default(),
        &body,
        props,
    )
    .await?;
    let deadline = tokio::time::Instant::now() + wait;
    let outcome = loop {
        match tokio::time::timeout_at(deadline, replies.next()).await {
            Ok(Some(Ok(d))) => {
                let Some(e) = d
                    .properties
                    .headers()
                    .as_ref()
                    .and_then(|t| Envelope::from_field_table(t).ok())
                else {
                    continue;
                };
                if e.value("corrId") != env.msg_id() {
                    continue;
                }
                let ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                match e.kind() {
                    "INJECTED" => break ("injected".to_string(), ms),
                    "FAILED" => {
                        let reason = serde_json::from_slice::<Value>(&d.data)
                            .ok()
                            .and_then(|v| v["reason"].as_str().map(str::to_string))
                            .unwrap_or_default();
                        break (format!("failed:{reason}"), ms);
                    }
                    _ => continue,
                }
            }
            _ => break ("none".to_string(), None),
        }
    };
    let _ = ch.close(200, "done".into()).await;
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_simulated_host_publishes_its_peers_verify() {
        let key = HostKey::generate("sim-0");
        let vk = VerifyingKey::from_bytes(
            &<[u8; 32]>::try_from(B64.decode(key.public_base64()).expect("b64")).expect("32 bytes"),
        )
        .expect("key");
        let peers = HashMap::from([("sim-0".to_string(), vk)]);
        let gids: Vec<String> = (0..3).map(|_| uuid::Uuid::new_v4().to_string()).collect();
        let batch = round(&key, &gids, Form::Batched, 5_000, None);
        assert_eq!(batch.len(), 1);
        let (to, body, props) = &batch[0];
        assert_eq!(to, "roster.sim-0._gateway");
        assert!(verify(&peers, to, props.headers().as_ref(), body));
        let v: Value = serde_json::from_slice(body).expect("json");
        assert_eq!(v["entities"].as_array().map(Vec::len), Some(3));
        assert_eq!(v["capabilities"], json!(["presence-batch"]));
        assert!(
            !verify(&peers, "roster.sim-0.x", props.headers().as_ref(), body),
            "to ≠ key"
        );
        let mut tampered = body.clone();
        tampered.push(b' ');
        assert!(!verify(&peers, to, props.headers().as_ref(), &tampered));
        let each = round(&key, &gids, Form::PerEntity, 5_000, None);
        assert_eq!(each.len(), 4, "one per entity and the _gateway one");
        assert!(
            each.iter()
                .all(|(to, body, props)| verify(&peers, to, props.headers().as_ref(), body))
        );
        assert!(
            !verify(&HashMap::new(), to, props.headers().as_ref(), body),
            "unknown host"
        );
        assert!(v.get("cert").is_none(), "no certificate without one");
        // With a certificate (MEM-2): in the `_gateway` presence only, whatever the form.
        for form in [Form::Batched, Form::PerEntity] {
            let with = round(
                &key,
                &gids,
                form,
                5_000,
                Some("ssh-ed25519-cert-v01@openssh.com AAAA x"),
            );
            for (to, body, props) in &with {
                assert!(verify(&peers, to, props.headers().as_ref(), body));
                let v: Value = serde_json::from_slice(body).expect("json");
                let cert = v.get("cert").and_then(Value::as_str);
                match to.as_str() {
                    "roster.sim-0._gateway" => assert_eq!(cert, Some("ssh-ed25519-cert-v01@openssh.com AAAA x")),
                    _ => assert_eq!(cert, None, "{to}"),
                }
            }
        }
    }

    #[test]
    fn a_run_that_falls_behind_does_not_keep_up_and_says_why() {
        let p = Predicted::of(Form::PerEntity, 200, 50, 5_000, None);
        assert_eq!(p.deliveries_per_s, 200.0 * 200.0 * 51.0 / 5.0);
        let m = Measured {
            deliveries_per_s: p.deliveries_per_s / 3.0,
            verified_per_host_per_s: p.per_gateway_msgs_per_s / 3.0,
            machine_busy: 0.99,
            real_backlog: Some(50_000),
            sim_backlog_max: Some(20),
            new_host_listed_ms: Some(30_000.0),
            ..Measured::default()
        };
        let r = FleetRun::judge(Form::PerEntity, 5_000, 200, 50, m, p);
        assert!(!r.keeps_up);
        let why = r.reasons.join("; ");
        assert!(
            why.contains("behind") && why.contains("saturated") && why.contains("> 2H"),
            "{why}"
        );
        let p = Predicted::of(Form::Batched, 50, 50, 5_000, None);
        assert_eq!((p.deliveries_per_s, p.per_gateway_msgs_per_s), (500.0, 10.0));
        let m = Measured {
            deliveries_per_s: 480.0,
            verified_per_host_per_s: 9.6,
            real_backlog: Some(0),
            sim_backlog_max: Some(0),
            new_host_listed_ms: Some(40.0),
            ..Measured::default()
        };
        let r = FleetRun::judge(Form::Batched, 5_000, 50, 50, m, p);
        assert!(r.keeps_up && r.reasons.is_empty(), "{r:?}");
    }
}
