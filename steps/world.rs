//! The scenario world: one fresh vhost, the hosts (gateway + fake herdr) and entities of a scenario.
//!
//! Every scenario gets its own vhost on the shared broker, so scenarios run concurrently; hosts,
//! keys and entities are named by the feature text ("host \"b\"", "worker \"w1\"") and resolved
//! here. Cleanup (processes, vhost) happens in the runner's after-hook, also for failed scenarios.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use fleet_conformance::broker::Broker;
use fleet_conformance::gateway::{GatewayProcess, GatewaySpec};
use fleet_conformance::herdr::{AgentStatus, FakeHerdr};
use fleet_conformance::keys::HostKey;
use fleet_conformance::mcp::McpClient;
use fleet_conformance::probe::Probe;
use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio::sync::{OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;

/// What every scenario of one run shares: the broker and how to start a gateway.
pub struct Suite {
    pub broker: Broker,
    pub gateway_cmd: String,
    pub work_dir: PathBuf,
    /// How many scenarios share `broker` at once (`FLEET_E2E_CONCURRENCY`): a scenario takes a
    /// slot before its first step and holds it until its cleanup. The `@broker-restart` ones do
    /// not: they run on [`Suite::restart_suite`]'s broker.
    pub slots: Arc<Semaphore>,
    /// The suite of the broker that `@broker-restart` scenarios restart: a second node of the
    /// same spec, started when the first of them asks for it. A restart breaks every connection
    /// into its broker, so on one shared broker each such scenario had to wait until every other
    /// scenario was gone and hold new ones back (~200 s of a run with nothing else running); on
    /// their own broker they take it one at a time while the others go on.
    restart: OnceCell<Arc<Suite>>,
    /// The gateway under test runs the cluster profile (SPEC §16): the broker is a cluster and
    /// the gateway declares `cluster`, so gateways get every node's URL and FLEET_QUEUE_TYPE=quorum.
    pub quorum: bool,
    /// The gateway under test declares `membership` (SPEC §18): the soak may run its gateways on
    /// certificates and rotate keys or revoke certificates.
    pub membership: bool,
    /// The gateway under test declares `confirm-stall` (`FLEET_CONFIRM_STALL_MS`): the soak on a
    /// cluster hands it a stall bound, as an operator of a cluster would.
    pub confirm_stall: bool,
}

impl Suite {
    pub fn new(broker: Broker, gateway_cmd: String, work_dir: PathBuf, concurrency: usize) -> Suite {
        Suite {
            broker,
            gateway_cmd,
            work_dir,
            slots: Arc::new(Semaphore::new(concurrency.max(1))),
            restart: OnceCell::new(),
            quorum: false,
            membership: false,
            confirm_stall: false,
        }
    }

    /// The restart broker's suite, its broker started on first use (same spec as `broker`).
    pub async fn restart_suite(&self) -> anyhow::Result<Arc<Suite>> {
        self.restart
            .get_or_try_init(|| async {
                let spec = *self.broker.spec();
                let started = std::time::Instant::now();
                let broker = Broker::start(&spec).await.map_err(|e| {
                    anyhow!(
                        "the broker for @broker-restart scenarios ({}) could not start: {e}",
                        spec.label()
                    )
                })?;
                eprintln!(
                    "== broker for @broker-restart scenarios ({}) ready in {:.1?} ==",
                    spec.label(),
                    started.elapsed()
                );
                let mut suite = Suite::new(broker, self.gateway_cmd.clone(), self.work_dir.clone(), 1);
                suite.quorum = self.quorum;
                suite.membership = self.membership;
                suite.confirm_stall = self.confirm_stall;
                anyhow::Ok(Arc::new(suite))
            })
            .await
            .cloned()
    }

    /// Stops this suite's brokers (the restart broker too, if it was started); every scenario must
    /// have let go of them.
    pub async fn stop(self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(restart) = self.restart.into_inner() {
            match Arc::try_unwrap(restart) {
                Ok(r) => problems.extend(Box::pin(r.stop()).await),
                Err(_) => problems.push("scenarios still hold the restart broker".into()),
            }
        }
        let label = self.broker.spec().label();
        if let Err(e) = self.broker.stop().await {
            problems.push(format!("stopping broker {label}: {e}"));
        }
        problems
    }
}

/// The suite of the broker being run, set by the runner (`main.rs`) around each broker's run.
pub static CURRENT: RwLock<Option<Arc<Suite>>> = RwLock::new(None);

/// The suite of the broker being run (read by each new scenario world).
pub fn current_suite() -> Option<Arc<Suite>> {
    CURRENT.read().ok().and_then(|g| g.clone())
}

/// Hosts whose keys every gateway of a scenario trusts (pinned in its peers file).
pub const TRUSTED_HOSTS: [&str; 6] = ["a", "b", "c", "d", "probe", "e"];

pub struct Host {
    pub gateway: GatewayProcess,
    pub herdr: FakeHerdr,
}

pub struct EntityRef {
    pub host: String,
    pub gid: String,
    pub token: String,
    pub pane: String,
    pub mcp: Option<McpClient>,
}

/// What a step keeps for a later step of the same scenario: one typed field per kind of note, so
/// a step that reads one cannot misspell its key or misread its shape.
#[derive(Debug, Default)]
pub struct Notes {
    /// Hosts whose gateway starts are not healthy ones by CONTRACT §5 (a broker endpoint set up
    /// to fail is in their list), with why: their start's ERROR lines are shown, not judged.
    pub unhealthy_starts: BTreeMap<String, String>,
    /// `bridge_answer`'s result (ask.feature).
    pub answer: Option<Value>,
    /// Every ASK a main's `bridge_wait` returned, in order (ask.feature: "the first question").
    pub questions: Vec<Value>,
    /// The ANSWER the probe published for a turn that no longer waits (ASK-4), to judge the
    /// TOO_LATE that reports on it.
    pub late_answer: Option<fleet_conformance::envelope::Envelope>,
    /// The large text a broadcast carried (broadcast.feature).
    pub big_text: Option<String>,
    /// The broker's copy of a brief: body and content type (broker_side.rs).
    pub wire_copy: Option<(Vec<u8>, Option<String>)>,
    /// Each spawn's arguments, by the spawned worker's name (spawn.feature).
    pub spawn_args: BTreeMap<String, SpawnArgs>,
    /// A second registration: its host, the gid it claimed, and the gateway's refusal if it
    /// refused (CON-2).
    pub registration: Option<(String, String, Result<(), String>)>,
    /// A gid claimed by the probe: (gid, claiming host) (PRS-3).
    pub claim: Option<(String, String)>,
    /// `/metrics` series noted per host (operations.feature).
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
    /// Per host: the gateway's exit status if it exited by itself after SIGTERM (`None`: it was
    /// killed), how long it took (ms), and how long its log was when the signal went (bytes).
    pub sigterm: BTreeMap<String, (Option<std::process::ExitStatus>, u64, usize)>,
    /// Lengths of generated legacy queues, by pane (migration.feature).
    pub legacy_generated: BTreeMap<String, usize>,
    /// The arguments the broker recorded for each seeded legacy queue, by queue name, read right
    /// after the probe's own plain declare: RabbitMQ 4.x records `x-queue-type` there where 3.10
    /// records nothing, so "never redeclared" compares with this, not with an empty table.
    pub legacy_arguments: BTreeMap<String, serde_json::Map<String, serde_json::Value>>,
    /// The watch of a main's inbox against a legacy queue across a boot (MIG-3): how many
    /// samples it took, or the first sample that broke the order.
    pub move_watch: Option<tokio::task::JoinHandle<anyhow::Result<u64>>>,
    /// The broker's answer to a redeclare of a legacy queue: accepted, or (code, text).
    pub redeclare: Option<Result<(), (u16, String)>>,
    /// The broker connections of the scenario's vhost noted at one moment.
    pub connections: Option<std::collections::BTreeSet<String>>,
    /// broker_restart.feature's state.
    pub restart: RestartNotes,
    /// SPAWNs the probe published in a main's name, by the worker's name: its `spawnId` (the
    /// spawned worker's gid) ([C-17], spawn.feature).
    pub crafted_spawns: BTreeMap<String, String>,
    /// When the per-entity gateway the probe played last heartbeated (PRB-4).
    pub old_gateway_silent_since: Option<tokio::time::Instant>,
}

/// The arguments of one `bridge_spawn`.
#[derive(Debug, Clone)]
pub struct SpawnArgs {
    pub main: String,
    pub host: String,
    pub profile: String,
    pub brief: String,
}

/// What the broker-restart steps keep between steps.
#[derive(Debug, Default)]
pub struct RestartNotes {
    /// How many times the broker went down in this scenario.
    pub restarts: u64,
    /// The durable copy of the wire: its queue, and what it received so far.
    pub copy: Option<(String, Vec<Value>)>,
    /// The legacy queue as the broker held it when it came back: (pane, messages).
    pub legacy_back: Option<(String, Option<u32>)>,
    /// The gateways' durable queues seen before the first restart.
    pub queues_before: Option<std::collections::BTreeSet<String>>,
    /// When the broker last came back (Unix ms): what a gateway publishes after it is "after the
    /// restart" on the wire ([C-19]).
    pub back_at_ms: Option<u64>,
    /// When the broker was last asked to start again (the suite's clock, before the start): no
    /// gateway can have reconnected before it ([C-25]'s hold counts from the reconnect).
    pub resuming_at: Option<std::time::Instant>,
    /// The gateways' [C-25] hold as handed to them (`FLEET_UNKNOWN_HOST_HOLD_S`).
    pub hold: Option<std::time::Duration>,
    /// Confirmed REPLYs kept in a main's inbox across the restart: (text, msgId).
    pub kept: Vec<(String, String)>,
    /// The durable copy of `bridge.dlx`: its queue, and each copy taken with the suite's clock at
    /// the look that found it.
    pub dead_copy: Option<(String, Vec<(std::time::Instant, fleet_conformance::probe::Captured)>)>,
}

/// A tool call running in the background (a blocking `bridge_send`, a `bridge_wait`).
pub type PendingCall = JoinHandle<anyhow::Result<Value>>;

/// What a step asks to be done to each host's settings just before its gateway starts, from then
/// on ([`FleetWorld::host_setup`]: a cluster scenario's own login per host). Declared here and
/// installed by the step, so that the world calls into a spec area without importing it.
pub type HostSetup = for<'a> fn(&'a mut FleetWorld, &'a str) -> BoxFuture<'a, anyhow::Result<()>>;

#[derive(cucumber::World)]
#[world(init = Self::new)]
pub struct FleetWorld {
    pub suite: Option<Arc<Suite>>,
    /// This scenario's slot on the shared broker ([`Suite::slots`]), held until cleanup.
    pub slot: Option<OwnedSemaphorePermit>,
    pub vhost: Option<String>,
    pub dir: PathBuf,
    pub keys: BTreeMap<String, HostKey>,
    pub hosts: BTreeMap<String, Host>,
    pub entities: BTreeMap<String, EntityRef>,
    /// Background calls by label ("send", "wait", …).
    pub calls: BTreeMap<String, PendingCall>,
    /// Results of finished background calls by label (`w.calls`), kept by [`Self::call_result`].
    pub results: BTreeMap<String, Value>,
    /// What steps keep for later steps of the scenario, one typed field each.
    pub notes: Notes,
    /// The last drained messages.
    pub drained: Vec<Value>,
    /// The main and arguments of the last `bridge_poll` step, so a "gets" step can poll again
    /// while a message is still being judged by the gateway (it is only "held" once judged).
    pub last_poll: Option<(String, Value)>,
    /// Tunables for gateways started from now on.
    pub gateway_env: BTreeMap<String, String>,
    /// Second gateway processes started for a host (CON-1/CON-2 takeover scenarios).
    pub replacements: BTreeMap<String, GatewayProcess>,
    /// The cuttable link between gateways and the broker, when the scenario asked for one.
    pub link: Option<fleet_conformance::proxy::Proxy>,
    /// The soak run's history.
    pub soak: crate::soak::SoakState,
    /// The failure scenarios' dead-letter watch.
    pub faults: crate::faults::FaultState,
    /// The conversation scenarios' wire taps.
    pub talk: crate::ask::TalkState,
    /// Extra variables for one host's gateway (e.g. its `FLEET_PROFILES`).
    pub host_env: BTreeMap<String, BTreeMap<String, String>>,
    /// The wire probe of the envelope scenarios: its taps, fake entities and crafted messages.
    pub wire: crate::envelope::WireState,
    /// Per-host broker logins made for this scenario (SEC-2): host → (user, password); the users
    /// are deleted at cleanup.
    pub broker_logins: BTreeMap<String, (String, String)>,
    /// The cluster scenarios' notes (SPEC §16), and whether this scenario strikes nodes.
    pub cluster: crate::cluster::ClusterState,
    /// The membership scenarios' files and credentials (SPEC §18).
    pub membership: crate::membership::MemState,
    /// [C-18]'s SEND scenario: the probe's copy of what is routed to the worker.
    pub republish: crate::republish::RepublishState,
    /// Done to each host's settings before its gateway starts, once a step installed it
    /// ([`FleetWorld::host_spec`]).
    pub host_setup: Option<HostSetup>,
    /// The scenario's wire probe and the AMQP URL it was connected to ([`FleetWorld::probe`]);
    /// closed at cleanup.
    probe: Option<(String, Arc<Probe>)>,
    /// The scenario's wire recorder, for its sequence chart (`fleet_conformance::timeline`);
    /// stopped by the runner's after-hook.
    pub recorder: fleet_conformance::timeline::recorder::Recorder,
}

impl std::fmt::Debug for FleetWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetWorld")
            .field("vhost", &self.vhost)
            .field("hosts", &self.hosts.keys().collect::<Vec<_>>())
            .field("entities", &self.entities.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl FleetWorld {
    async fn new() -> Result<Self, anyhow::Error> {
        let suite = current_suite();
        let dir = match &suite {
            Some(s) => s.work_dir.join(format!("s-{}", uuid::Uuid::new_v4().simple())),
            None => std::env::temp_dir().join(format!("fleet-e2e-{}", uuid::Uuid::new_v4().simple())),
        };
        std::fs::create_dir_all(&dir)?;
        let keys = TRUSTED_HOSTS
            .iter()
            .map(|h| (h.to_string(), HostKey::generate(h)))
            .collect();
        let mut gateway_env = BTreeMap::new();
        // Short heartbeats keep presence and [C-7] waits quick; the spec default is 5 s. Like
        // every bound a scenario relies on, it is nominal and stretches with the time knob: the
        // [C-7]/[C-14] grace is two heartbeats of the *gateway's* clock, and on a machine four
        // times slower a 1 s heartbeat left a fresh gateway's roster without a sender's presence
        // when its first brief arrived (herdr_faults.feature:27, flakes run under 2 hogs + load).
        let heartbeat = fleet_conformance::timing::scaled(Duration::from_secs(1));
        gateway_env.insert("FLEET_HEARTBEAT_MS".into(), heartbeat.as_millis().to_string());
        gateway_env.insert("FLEET_AMQP_HEARTBEAT_S".into(), "5".into());
        if suite.as_ref().is_some_and(|s| s.quorum) {
            // SPEC §16 CLU-2: a gateway that declares `cluster` runs on a cluster with quorum queues.
            gateway_env.insert("FLEET_QUEUE_TYPE".into(), "quorum".into());
        }
        Ok(FleetWorld {
            suite,
            slot: None,
            vhost: None,
            dir,
            keys,
            hosts: BTreeMap::new(),
            entities: BTreeMap::new(),
            calls: BTreeMap::new(),
            results: BTreeMap::new(),
            notes: Notes::default(),
            drained: Vec::new(),
            last_poll: None,
            gateway_env,
            host_env: BTreeMap::new(),
            talk: Default::default(),
            faults: Default::default(),
            soak: Default::default(),
            link: None,
            replacements: BTreeMap::new(),
            wire: Default::default(),
            broker_logins: BTreeMap::new(),
            cluster: Default::default(),
            membership: Default::default(),
            republish: Default::default(),
            host_setup: None,
            probe: None,
            recorder: Default::default(),
        })
    }

    pub fn suite(&self) -> anyhow::Result<Arc<Suite>> {
        self.suite.clone().ok_or_else(|| anyhow!("no broker for this run"))
    }

    /// The scenario's vhost, created on first use.
    pub async fn vhost(&mut self) -> anyhow::Result<String> {
        if let Some(v) = &self.vhost {
            return Ok(v.clone());
        }
        let suite = self.suite()?;
        let v = if self.cluster.exclusive {
            // It kills or cuts off nodes: every other scenario's connections would break too.
            suite.broker.create_exclusive_vhost().await
        } else {
            suite.broker.create_vhost().await
        }
        .context("creating the scenario's vhost")?;
        self.vhost = Some(v.clone());
        Ok(v)
    }

    /// The scenario's wire probe: one AMQP connection into the scenario's vhost on its current
    /// broker, shared by every step (and every tap they make), instead of one connection per step.
    /// Connected on first use, and again when the cached one is no longer connected (a broker
    /// restart breaks it, and the taps made on it with it) or was made to another URL (a restart
    /// scenario moves the world to the restart broker, [`Suite::restart_suite`]).
    pub async fn probe(&mut self) -> anyhow::Result<Arc<Probe>> {
        let vhost = self.vhost().await?;
        let url = self.suite()?.broker.amqp_url(&vhost);
        if let Some((at, p)) = &self.probe
            && *at == url
            && p.is_connected()
        {
            return Ok(p.clone());
        }
        match self.probe.take() {
            // Into another broker or vhost (the world moved since): let go of it.
            Some((_, old)) if old.is_connected() => close_probe(old).await,
            // Lost (there is nothing to close): said, since every tap on it is gone too.
            Some((at, _)) if at == url => {
                eprintln!("note: the probe's connection into {vhost} was lost; connecting again (its taps are gone)")
            }
            _ => {}
        }
        let p = Arc::new(
            Probe::connect(&url)
                .await
                .with_context(|| format!("connecting the scenario's probe into {vhost}"))?,
        );
        self.probe = Some((url, p.clone()));
        Ok(p)
    }

    /// Whether the scenario's probe holds a connection (open or lost): a step that counts every
    /// connection into the vhost as a gateway's must know it would count the probe's too.
    pub fn has_probe(&self) -> bool {
        self.probe.is_some()
    }

    /// Starts a fake herdr and a gateway for `host`.
    pub async fn start_host(&mut self, host: &str) -> anyhow::Result<()> {
        if self.hosts.contains_key(host) {
            return Ok(());
        }
        let (spec, herdr) = self.host_spec(host).await?;
        let gateway = GatewayProcess::start(spec).await?;
        if let (Some(s), Some(v)) = (self.suite.clone(), self.vhost.clone()) {
            self.recorder.after_gateway(&s.broker, &v, host).await;
        }
        let started = self.judge_start(host, &gateway.log_since_start());
        self.hosts.insert(host.to_string(), Host { gateway, herdr });
        started
    }

    /// CONTRACT §5: a healthy start logs no ERROR. A host facing an endpoint set up to fail
    /// ([`Notes::unhealthy_starts`]) does not start healthy: what it logged is shown only.
    pub fn judge_start(&self, host: &str, log: &str) -> anyhow::Result<()> {
        let judged = fleet_conformance::contract::healthy_start(host, log);
        match (self.notes.unhealthy_starts.get(host), judged) {
            (Some(why), Err(lines)) => {
                println!("reference behaviour (not judged: not a healthy start, CONTRACT §5 — {why}): {lines}");
                Ok(())
            }
            (_, judged) => judged.map_err(anyhow::Error::msg),
        }
    }

    /// Starts `host`'s fake herdr and returns it with the gateway spec `start_host` would use.
    pub async fn host_spec(&mut self, host: &str) -> anyhow::Result<(GatewaySpec, FakeHerdr)> {
        if let Some(setup) = self.host_setup {
            setup(self, host).await?;
        }
        let suite = self.suite()?;
        let vhost = self.vhost().await?;
        self.recorder.before_gateway(&suite.broker, &vhost).await;
        let hdir = self.dir.join(host);
        let herdr = FakeHerdr::start(&hdir.join("herdr"))
            .await
            .context("starting fake herdr")?;
        let key = self
            .keys
            .entry(host.to_string())
            .or_insert_with(|| HostKey::generate(host))
            .clone();
        let mut peers: BTreeMap<String, HostKey> = TRUSTED_HOSTS
            .iter()
            .filter_map(|h| self.keys.get(*h).map(|k| (h.to_string(), k.clone())))
            .collect();
        peers.insert(host.to_string(), key.clone());
        let mut spec = GatewaySpec {
            host: host.to_string(),
            command: suite.gateway_cmd.clone(),
            amqp_url: match &self.link {
                // Through the suite's cuttable link instead of straight to the broker.
                Some(p) => suite
                    .broker
                    .amqp_url(&vhost)
                    .replace(&suite.broker.endpoint().amqp_addr(), &p.listen().to_string()),
                // SPEC §16 CLU-1: every node's URL, when the gateway runs the cluster profile.
                None if suite.quorum => {
                    crate::cluster::url_list(&suite.broker, &vhost, None, crate::cluster::host_offset(host))
                }
                None => suite.broker.amqp_url(&vhost),
            },
            herdr_socket: herdr.socket_path().to_path_buf(),
            dir: hdir,
            key,
            peers,
            extra_env: {
                let mut env = self.gateway_env.clone();
                env.extend(self.host_env.get(host).cloned().unwrap_or_default());
                env
            },
        };
        self.membership
            .configure_spec(&TRUSTED_HOSTS, &self.keys, &self.dir, &mut spec)?;
        Ok((spec, herdr))
    }

    pub fn host(&self, host: &str) -> anyhow::Result<&Host> {
        self.hosts
            .get(host)
            .ok_or_else(|| anyhow!("host {host:?} was not started in this scenario"))
    }

    pub fn host_mut(&mut self, host: &str) -> anyhow::Result<&mut Host> {
        self.hosts
            .get_mut(host)
            .ok_or_else(|| anyhow!("host {host:?} was not started in this scenario"))
    }

    pub fn entity(&self, name: &str) -> anyhow::Result<&EntityRef> {
        self.entities
            .get(name)
            .ok_or_else(|| anyhow!("no entity {name:?} in this scenario"))
    }

    pub fn gid(&self, name: &str) -> anyhow::Result<String> {
        Ok(self.entity(name)?.gid.clone())
    }

    /// Adds an agent pane on `host`'s herdr and registers it with the gateway.
    pub async fn add_entity(
        &mut self,
        host: &str,
        name: &str,
        role: &str,
        parent: Option<&str>,
        groups: Vec<String>,
    ) -> anyhow::Result<()> {
        self.add_entity_with_gid(host, name, role, parent, groups, None).await
    }

    /// `add_entity` with a chosen gid.
    pub async fn add_entity_with_gid(
        &mut self,
        host: &str,
        name: &str,
        role: &str,
        parent: Option<&str>,
        groups: Vec<String>,
        gid: Option<&str>,
    ) -> anyhow::Result<()> {
        self.start_host(host).await?;
        let parent_gid = match parent {
            Some(p) => Some(self.gid(p)?),
            None => None,
        };
        let h = self.host(host)?;
        let agent = if role == "worker" { "claude" } else { "claude-main" };
        let pane = h.herdr.add_agent_pane(agent, AgentStatus::Idle);
        let (gid, token) = h
            .gateway
            .register(role, &pane, &groups, parent_gid.as_deref(), gid)
            .await?;
        self.entities.insert(
            name.to_string(),
            EntityRef {
                host: host.into(),
                gid,
                token,
                pane,
                mcp: None,
            },
        );
        Ok(())
    }

    /// Records an entity the suite did not register itself (a spawned worker).
    pub fn adopt_entity(&mut self, name: &str, host: &str, gid: &str, token: &str, pane: &str) {
        self.entities.insert(
            name.to_string(),
            EntityRef {
                host: host.into(),
                gid: gid.into(),
                token: token.into(),
                pane: pane.into(),
                mcp: None,
            },
        );
    }

    /// The heartbeat interval gateways of this scenario run with.
    pub fn heartbeat(&self) -> Duration {
        let ms = self
            .gateway_env
            .get("FLEET_HEARTBEAT_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(5_000);
        Duration::from_millis(ms)
    }

    /// The entity's MCP client, connected on first use.
    pub async fn mcp(&mut self, name: &str) -> anyhow::Result<&McpClient> {
        let (url, token) = {
            let e = self.entity(name)?;
            (self.host(&e.host)?.gateway.mcp_url(), e.token.clone())
        };
        let e = self
            .entities
            .get_mut(name)
            .ok_or_else(|| anyhow!("no entity {name:?}"))?;
        if e.mcp.is_none() {
            e.mcp = Some(McpClient::connect(&url, &token).await?);
        }
        e.mcp.as_ref().ok_or_else(|| anyhow!("unreachable"))
    }

    /// Starts a tool call in the background under `label`. A new call replaces the result of an
    /// earlier one under the same label (a second ask is not answered by the first's result).
    pub async fn call_in_background(
        &mut self,
        label: &str,
        entity: &str,
        tool: &str,
        args: Value,
    ) -> anyhow::Result<()> {
        let handle = self.mcp(entity).await?.handle();
        let tool = tool.to_string();
        let task = tokio::spawn(async move { Ok(handle.call(&tool, args).await?) });
        self.results.remove(label);
        self.calls.insert(label.to_string(), task);
        Ok(())
    }

    /// Waits (scaled deadline) for the background call `label` and returns its result.
    pub async fn call_result(&mut self, label: &str, within: Duration) -> anyhow::Result<Value> {
        if let Some(v) = self.results.get(label) {
            return Ok(v.clone());
        }
        let task = self
            .calls
            .remove(label)
            .ok_or_else(|| anyhow!("no call {label:?} was started"))?;
        let budget = fleet_conformance::timing::scaled(within);
        let v = tokio::time::timeout(budget, task)
            .await
            .map_err(|_| anyhow!("the {label} call did not return within {budget:?}"))???;
        self.results.insert(label.to_string(), v.clone());
        Ok(v)
    }

    /// The inject bound gateways of this scenario were started with.
    pub fn inject_bound(&self) -> Duration {
        let ms = self
            .gateway_env
            .get("FLEET_INJECT_TIMEOUT_MS")
            .and_then(|v| v.parse().ok())
            .unwrap_or(30_000);
        Duration::from_millis(ms)
    }

    /// Tears everything down: gateways killed, herdr stopped, the probe closed, vhost deleted,
    /// files removed when the scenario passed (kept for a failed one, to read the logs).
    pub async fn cleanup(&mut self, passed: bool) {
        for (_, c) in std::mem::take(&mut self.calls) {
            c.abort();
        }
        for (_, e) in std::mem::take(&mut self.entities) {
            if let Some(m) = e.mcp {
                drop(m);
            }
        }
        for (_, mut g) in std::mem::take(&mut self.replacements) {
            let _ = g.signal(libc::SIGCONT);
            g.kill().await;
        }
        for (_, mut h) in std::mem::take(&mut self.hosts) {
            h.gateway.kill().await;
            h.herdr.stop().await;
        }
        if let Some((_, p)) = self.probe.take() {
            close_probe(p).await;
        }
        if let Some((_, task, conn)) = self.cluster.standby.take() {
            task.abort();
            let _ = conn.close(200, "scenario over".into()).await;
        }
        if let Some(t) = self.cluster.replies.as_mut().and_then(|r| r.task.take()) {
            t.abort();
        }
        if self.cluster.exclusive
            && let Some(s) = &self.suite
            && let Err(e) = s.broker.ensure_whole().await
        {
            eprintln!("error: the cluster could not be made whole again after the scenario: {e}");
        }
        if let (Some(v), Some(s)) = (self.vhost.take(), &self.suite) {
            let _ = s.broker.delete_vhost(&v).await;
        }
        if let Some(s) = &self.suite {
            for (_, (user, _)) in std::mem::take(&mut self.broker_logins) {
                let _ = s.broker.management().delete_user(&user).await;
            }
        }
        if passed {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        self.slot = None;
    }
}

/// Closes a probe connection, waiting a few seconds at most: lapin's `close` sometimes never sees
/// the broker's close-ok on a connection opened after a broker restart (seen 2 times in ~15 runs),
/// and a scenario's cleanup must not hang on it. A connection left open goes with the vhost. A
/// probe still shared (a task of the scenario holds it) is only let go: the last holder's drop
/// closes it, and deleting the vhost closes it anyway.
async fn close_probe(probe: Arc<Probe>) {
    let Ok(probe) = Arc::try_unwrap(probe) else {
        return;
    };
    let bound = fleet_conformance::timing::scaled(Duration::from_secs(5));
    if tokio::time::timeout(bound, probe.close()).await.is_err() {
        eprintln!("note: a probe connection did not close within {bound:?}; it goes with the vhost");
    }
}
