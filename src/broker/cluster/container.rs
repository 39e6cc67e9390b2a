//! The container provider's cluster: three RabbitMQ containers on a docker network of their own.
//!
//! Exists because only containers let the suite cut one node off from the others (CLU-6): each
//! node is attached to the cluster's network alone, so `docker network disconnect` severs all
//! its links (and its published ports) and `docker network connect` restores them. Driven through
//! the docker CLI, which makes networks, aliases and port pinning one argument each. Every run
//! gets its own network (`fleet-cl-<pid>-<n>-<random>`) and container names
//! (`fleetcl<i>-<same suffix>`); inside it the nodes are `rabbit@fleetcl1..3` (hostname and
//! network alias), sharing one `RABBITMQ_ERLANG_COOKIE`. Nodes run
//! `cluster_partition_handling = pause_minority` and `net_ticktime` 10 s (scaled by
//! `FLEET_E2E_TIME_SCALE` up to 20 s; `rabbitmqctl` is given the same), so a cut link is noticed
//! in seconds rather than a minute. Nodes 2 and 3 join `rabbit@fleetcl1` with `rabbitmqctl`.
//! Each node's AMQP and management ports (and node 1's AMQPS) are published on loopback on host
//! ports the suite picks and pins, so a node killed and started again, or cut off and
//! reconnected, keeps every URL handed out valid. A whole-cluster restart stops node 1 last and
//! starts it first, the others one by one after it ([`super::nodes::wait_booted`] says why). Containers and network carry the suite's owner
//! labels and are in the cleanup registry ([`crate::cleanup`]); the image is only ever taken
//! from the local store (`--pull never`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::super::boot::{CONTAINER_BOOT, restart_boot};
use super::super::container::{
    AMQP_PORT, AMQPS_PORT, HTTP_PORT, TLS_DIR_IN_CONTAINER, container_tls_files, missing_image_hint, port_clash_text,
    rabbitmq_erl_args,
};
use super::super::error::BrokerError;
use super::super::spec::BrokerKind;
use super::super::tls_listener::TlsListener;
use super::super::url::Endpoint;
use super::nodes::{Booting, NODES, NodeState, NodeStates, node_tails, run_command, start_order, wait_booted};
use crate::timing::wait_for;

mod isolate;

const PROVIDER: &str = "container:rabbitmq-cluster";

/// Nominal `net_ticktime` of the nodes (scaled, at most [`MAX_TICKTIME`]): how soon a cut link is
/// noticed (within 0.75–1.25 of it). Erlang's default (60 s) would keep a partition unnoticed
/// for a minute.
const NET_TICKTIME: Duration = Duration::from_secs(10);
/// The most `net_ticktime` is stretched to on a slow machine: a node is not starved of the CPU
/// for that long, and partitions stay noticed within half a minute.
const MAX_TICKTIME: Duration = Duration::from_secs(20);

/// Nominal wait for a killed container to be reported stopped.
const KILLED: Duration = Duration::from_secs(30);

/// Nominal wait for a cut-off node to notice (within `net_ticktime`) and pause (its broker
/// stopped): 10–25 s on a loaded machine with RabbitMQ 3.10; RabbitMQ 4.0.5 began stopping ~58 s
/// after the others saw it gone and its listeners and vhosts took 16 s more, past the 90 s this
/// was (the 4.0 cluster tier, 2026-12-06).
const PAUSED: Duration = Duration::from_secs(180);
/// What a node of RabbitMQ 3.10 logs when `pause_minority` pauses it…
const MINORITY_LINE: &str = "Cluster minority/secondary status detected - awaiting recovery";
/// …and once its broker has stopped.
const STOPPED_LINE: &str = "Successfully stopped RabbitMQ and its dependencies";

/// Now, as `docker logs --since` takes it (Unix seconds with a fraction).
fn docker_since() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}

/// What container `name` wrote (output and errors) since `since` ([`docker_since`]).
/// Waits until container `name`'s log since `since` says the node noticed a cut and paused
/// itself (`pause_minority`): both a partitioned and an isolated node are healed only then.
async fn paused_in_minority(name: &str, since: &str, what: &str) -> Result<(), crate::timing::WaitTimeout> {
    wait_for(what, PAUSED, || async {
        let log = logs_since(name, since).await?;
        match (log.contains(MINORITY_LINE), log.contains(STOPPED_LINE)) {
            (true, true) => Ok(Some(())),
            (true, false) => Err("minority noticed, the broker still stopping".to_string()),
            _ => Err("no sign yet that it noticed the cut".to_string()),
        }
    })
    .await
}

async fn logs_since(name: &str, since: &str) -> Result<String, String> {
    let out = tokio::process::Command::new("docker")
        .args(["logs", "--since", since, name])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run docker logs: {e}"))?;
    if !out.status.success() {
        return Err(format!("docker logs: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    let mut all = out.stdout;
    all.extend(out.stderr);
    Ok(String::from_utf8_lossy(&all).into_owned())
}

/// One node: its container, its hostname (and Erlang host) and pinned host ports.
struct ContainerNode {
    /// The container name (unique per run).
    name: String,
    /// `fleetcl<i>`: hostname and network alias, so the node is `rabbit@fleetcl<i>`.
    host: String,
}

/// Three clustered RabbitMQ containers on a network this run made.
pub(crate) struct RunningCluster {
    image: String,
    network: String,
    nodes: Vec<ContainerNode>,
    endpoints: Vec<Endpoint>,
    /// Node 1's `amqps://` listener; its certificates live in `tls.files.dir`.
    tls: Option<TlsListener>,
    /// Every node's `amqps://` listener (one certificate, copied into each), in node order.
    node_tls: Vec<TlsListener>,
    states: NodeStates,
    /// When each node cut off from its peers only was cut (`docker logs --since`), by node.
    isolated_since: std::sync::Mutex<std::collections::BTreeMap<usize, String>>,
    /// The node [`RunningCluster::halt`] stopped last: the first to start again.
    last_stopped: AtomicUsize,
    stopped: bool,
    /// The network, the containers and the TLS dir in the cleanup registry.
    cleanup: Vec<crate::cleanup::Registration>,
    /// What removes them all, for `stop` and `drop`.
    undo: Vec<crate::cleanup::Action>,
}

/// Runs `docker <args>`; `what` names it in errors (never the arguments: they hold the cookie).
async fn docker(what: &str, args: &[&str]) -> Result<String, BrokerError> {
    let mut cmd = tokio::process::Command::new("docker");
    cmd.args(args);
    run_command(cmd).await.map_err(|reason| BrokerError::DockerCommand {
        command: what.to_string(),
        reason,
    })
}

/// The Erlang arguments of every node: the suite's statistics settings, pause_minority and a
/// short `net_ticktime`.
fn erl_args(ticktime: u64) -> String {
    format!(
        "{} -rabbit cluster_partition_handling pause_minority -kernel net_ticktime {ticktime}",
        rabbitmq_erl_args()
    )
}

/// `net_ticktime` in seconds: [`NET_TICKTIME`] scaled, within [`NET_TICKTIME`]..=[`MAX_TICKTIME`].
fn ticktime() -> u64 {
    crate::timing::scaled(NET_TICKTIME)
        .clamp(NET_TICKTIME, MAX_TICKTIME)
        .as_secs()
}

/// Checks docker answers and `image` is present locally (nothing is ever pulled).
async fn check_docker(image: &str) -> Result<(), BrokerError> {
    if let Err(e) = docker("version", &["version", "--format", "{{.Server.Version}}"]).await {
        return Err(BrokerError::Unavailable {
            provider: PROVIDER.into(),
            reason: format!("cannot reach docker ({e})"),
            hint: "start docker (and make sure this user may use it), or use the broker process:rabbitmq-cluster"
                .into(),
        });
    }
    if let Err(e) = docker("image inspect", &["image", "inspect", "--format", "{{.Id}}", image]).await {
        return Err(BrokerError::Unavailable {
            provider: PROVIDER.into(),
            reason: format!("the image {image} is not present locally ({e})"),
            hint: missing_image_hint(BrokerKind::RabbitMqCluster),
        });
    }
    Ok(())
}

/// Starts three containers of `image` on a new network and clusters them (nodes 2 and 3 join
/// node 1); readiness is the caller's.
pub(crate) async fn start(image: &str) -> Result<RunningCluster, BrokerError> {
    check_docker(image).await?;
    let (pid, n) = super::super::process::next_node_number();
    let suffix = format!("{pid}-{n}-{}", &uuid::Uuid::new_v4().simple().to_string()[..6]);
    let network = format!("fleet-cl-{suffix}");
    let owner = crate::cleanup::owner_id();
    let labels = [
        format!("{}=1", crate::cleanup::CONTAINER_LABEL),
        format!("{}={owner}", crate::cleanup::CONTAINER_OWNER_LABEL),
        "fleet-conformance.role=broker".to_string(),
    ];
    let mut cluster = RunningCluster {
        isolated_since: Default::default(),
        image: image.to_string(),
        network: network.clone(),
        nodes: Vec::with_capacity(NODES),
        endpoints: Vec::with_capacity(NODES),
        tls: None,
        node_tls: Vec::new(),
        states: NodeStates::up(NODES),
        last_stopped: AtomicUsize::new(0),
        stopped: false,
        cleanup: Vec::new(),
        undo: Vec::new(),
    };
    // From here a signal must ask docker for this process's containers and networks.
    crate::cleanup::note_docker_use();
    let mut args = vec!["network", "create"];
    for l in &labels {
        args.extend(["--label", l]);
    }
    args.push(&network);
    docker("network create", &args).await?;
    cluster.register(crate::cleanup::Action::RemoveNetwork(network.clone()));
    // On any error below, dropping `cluster` removes what was made.
    let tls_files = container_tls_files();
    if let Some(files) = &tls_files {
        cluster.register(crate::cleanup::Action::RemoveDir(files.dir.clone()));
    }
    let cookie = uuid::Uuid::new_v4().simple().to_string().to_uppercase();
    let ticktime = ticktime();
    for i in 1..=NODES {
        let tls = tls_files.as_ref();
        let node = ContainerNode {
            name: format!("fleetcl{i}-{suffix}"),
            host: format!("fleetcl{i}"),
        };
        let (endpoint, amqps_port) = cluster.create_and_start(&node, &labels, &cookie, ticktime, tls).await?;
        if let (Some(port), Some(files)) = (amqps_port, tls) {
            let listener = TlsListener::generated("127.0.0.1", port, files.clone());
            if i == 1 {
                cluster.tls = Some(listener.clone());
            }
            cluster.node_tls.push(listener);
        }
        cluster.nodes.push(node);
        cluster.endpoints.push(endpoint);
    }
    let started = std::time::Instant::now();
    let all: Vec<usize> = (0..NODES).collect();
    wait_booted(&cluster, &all, CONTAINER_BOOT).await?;
    let booted = started.elapsed();
    let first = format!("rabbit@{}", cluster.nodes[0].host);
    // One at a time: two nodes joining at once may fail `start_app` with a mnesia error
    // (`{badmatch, {error, {normal, {mnesia_app, start, …}}}}`, seen here one start in tens).
    for node in &cluster.nodes[1..] {
        join(node, &first).await?;
    }
    tracing::info!(%network, ?booted, took = ?started.elapsed(), "broker containers booted and joined");
    Ok(cluster)
}

/// `rabbitmqctl stop_app`, `join_cluster <first>`, `start_app` in `node`'s container.
async fn join(node: &ContainerNode, first: &str) -> Result<(), BrokerError> {
    for args in [&["stop_app"][..], &["join_cluster", first], &["start_app"]] {
        let mut full = vec!["exec", node.name.as_str(), "rabbitmqctl"];
        full.extend(args);
        let mut cmd = tokio::process::Command::new("docker");
        cmd.args(&full);
        run_command(cmd).await.map_err(|reason| BrokerError::Ctl {
            node: format!("rabbit@{}", node.host),
            command: args.join(" "),
            reason,
        })?;
    }
    Ok(())
}

impl RunningCluster {
    fn register(&mut self, action: crate::cleanup::Action) {
        self.cleanup.push(crate::cleanup::register(action.clone()));
        self.undo.push(action);
    }

    /// Creates and starts node `node` on free host ports (new ones when docker finds one taken
    /// meanwhile); its endpoint, and the AMQPS host port when `tls` is given.
    async fn create_and_start(
        &mut self,
        node: &ContainerNode,
        labels: &[String],
        cookie: &str,
        ticktime: u64,
        tls: Option<&crate::tls::TlsFiles>,
    ) -> Result<(Endpoint, Option<u16>), BrokerError> {
        const ATTEMPTS: usize = 3;
        let mut attempt = 1;
        loop {
            let [amqp, http, amqps] = crate::ports::free_ports().map_err(|source| BrokerError::Io {
                context: "finding free loopback ports".into(),
                source,
            })?;
            let id = self
                .create(node, labels, cookie, ticktime, [amqp, http, amqps], tls)
                .await?;
            match docker("start", &["start", &node.name]).await {
                Ok(_) => {
                    tracing::info!(container = %node.name, amqp, http, "broker container started");
                    let endpoint = Endpoint {
                        amqp_host: "127.0.0.1".into(),
                        amqp_port: amqp,
                        http_base: format!("http://127.0.0.1:{http}"),
                        user: "guest".into(),
                        password: "guest".into(),
                    };
                    return Ok((endpoint, tls.map(|_| amqps)));
                }
                Err(BrokerError::DockerCommand { reason, .. }) if attempt < ATTEMPTS && port_clash_text(&reason) => {
                    tracing::warn!(%reason, attempt, "a host port was taken before docker bound it: new ports");
                    docker("rm", &["rm", "-f", "-v", &id]).await?;
                    // Gone: no longer the cleanup registry's.
                    self.cleanup.pop();
                    self.undo.pop();
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// `docker create` of one node (registered for cleanup at once), with the TLS files
    /// and config copied in.
    async fn create(
        &mut self,
        node: &ContainerNode,
        labels: &[String],
        cookie: &str,
        ticktime: u64,
        [amqp, http, amqps]: [u16; 3],
        tls: Option<&crate::tls::TlsFiles>,
    ) -> Result<String, BrokerError> {
        let publish = |host: u16, inside: u16| format!("127.0.0.1:{host}:{inside}");
        let mut args: Vec<String> = [
            "create",
            "--name",
            &node.name,
            "--hostname",
            &node.host,
            "--network",
            &self.network,
            "--network-alias",
            &node.host,
            "--pull",
            "never",
            "-p",
            &publish(amqp, AMQP_PORT),
            "-p",
            &publish(http, HTTP_PORT),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if tls.is_some() {
            args.extend(["-p".into(), publish(amqps, AMQPS_PORT)]);
        }
        let env = [
            format!("RABBITMQ_ERLANG_COOKIE={cookie}"),
            format!("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS={}", erl_args(ticktime)),
            // rabbitmqctl must tick as often as the nodes, or a node drops it mid-command.
            format!("RABBITMQ_CTL_ERL_ARGS=-kernel net_ticktime {ticktime}"),
        ];
        for e in env {
            args.extend(["-e".into(), e]);
        }
        for l in labels {
            args.extend(["--label".into(), l.clone()]);
        }
        args.push(self.image.clone());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let id = docker("create", &args).await?;
        self.register(crate::cleanup::Action::RemoveContainer(id.clone()));
        if let Some(files) = tls {
            self.copy_tls(&node.name, files).await?;
        }
        Ok(id)
    }

    /// Copies the certificates and a `conf.d` file with the TLS listener into a created container.
    async fn copy_tls(&self, container: &str, files: &crate::tls::TlsFiles) -> Result<(), BrokerError> {
        let inside = |p: &std::path::Path| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            format!("{TLS_DIR_IN_CONTAINER}/{name}")
        };
        let conf = super::super::process::tls_conf(
            "0.0.0.0",
            AMQPS_PORT,
            &inside(&files.ca_cert),
            &inside(&files.server_cert),
            &inside(&files.server_key),
        );
        let conf_dir = files.dir.join("conf.d");
        std::fs::create_dir_all(&conf_dir).map_err(super::super::process::io_err(format!(
            "creating {}",
            conf_dir.display()
        )))?;
        super::super::process::write_file(&conf_dir.join("90-fleet-tls.conf"), &conf)?;
        let certs = format!("{}/.", files.dir.display());
        let confs = format!("{}/.", conf_dir.display());
        docker(
            "cp (TLS files)",
            &["cp", &certs, &format!("{container}:{TLS_DIR_IN_CONTAINER}")],
        )
        .await?;
        docker(
            "cp (TLS config)",
            &["cp", &confs, &format!("{container}:/etc/rabbitmq/conf.d")],
        )
        .await?;
        Ok(())
    }

    pub(crate) fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub(crate) fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_ref()
    }

    /// Every node's `amqps://` listener, in node order.
    pub(crate) fn node_tls(&self) -> &[TlsListener] {
        &self.node_tls
    }

    pub(crate) fn describe(&self) -> String {
        let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        format!(
            "containers {} of {} on network {}",
            names.join(", "),
            self.image,
            self.network
        )
    }

    pub(crate) fn states(&self) -> Vec<NodeState> {
        self.states.all()
    }

    fn node(&self, node: usize) -> Result<&ContainerNode, BrokerError> {
        self.nodes.get(node).ok_or(BrokerError::NoSuchNode {
            spec: PROVIDER.into(),
            node,
            count: self.nodes.len(),
        })
    }

    /// Whether each node's container runs, by node; `None` when docker cannot say.
    async fn running(&self) -> Option<Vec<bool>> {
        let mut args = vec!["inspect", "--format", "{{.State.Running}}"];
        args.extend(self.nodes.iter().map(|n| n.name.as_str()));
        let out = docker("inspect", &args).await.ok()?;
        Some(out.lines().map(|l| l.trim() == "true").collect())
    }

    /// `Some(reason)` once a container the suite did not kill has stopped.
    pub(crate) async fn failure(&self) -> Option<String> {
        let running = self.running().await?;
        let states = self.states();
        self.nodes
            .iter()
            .zip(running.iter().zip(states))
            .find(|(_, (run, state))| !**run && *state != NodeState::Killed)
            .map(|(n, _)| format!("container {} of {} exited", n.name, self.image))
    }

    /// Each node's last lines (`docker logs`, output and errors).
    pub(crate) async fn log_tail(&self, lines: usize) -> String {
        // More than asked for: the probes' lines are dropped before the tail is taken.
        let fetch = (lines * 20).to_string();
        let mut outputs = Vec::new();
        for n in &self.nodes {
            let out = tokio::process::Command::new("docker")
                .args(["logs", "--tail", &fetch, &n.name])
                .stdin(std::process::Stdio::null())
                .kill_on_drop(true)
                .output()
                .await;
            let text = match out {
                Ok(out) => {
                    let mut all = out.stdout;
                    all.extend(out.stderr);
                    String::from_utf8_lossy(&all).into_owned()
                }
                Err(e) => format!("(cannot run docker logs: {e})"),
            };
            outputs.push((format!("rabbit@{} ({})", n.host, n.name), text));
        }
        node_tails(outputs, lines)
    }

    /// `docker kill` (SIGKILL) of the node's container; returns once docker reports it stopped.
    /// A cut-off node is attached to the network again once dead, so it starts connected.
    pub(crate) async fn kill_node(&self, node: usize) -> Result<(), BrokerError> {
        let n = self.node(node)?;
        let was = self.states.get(node);
        docker("kill", &["kill", &n.name]).await?;
        self.states.set(node, NodeState::Killed);
        let what = format!("container {} to stop", n.name);
        wait_for(&what, KILLED, || async {
            match self.running().await {
                Some(r) if r.get(node) == Some(&false) => Ok(Some(())),
                Some(_) => Err("still running".to_string()),
                None => Err("docker inspect failed".to_string()),
            }
        })
        .await
        .map_err(|source| BrokerError::Stuck {
            what: format!("container {}", n.name),
            source: Box::new(source),
        })?;
        if was == Some(NodeState::Partitioned) {
            self.connect(n).await?;
        }
        Ok(())
    }

    /// `docker start` of a killed node — same filesystem (its data), hostname (its node name)
    /// and pinned host ports — returning once it booted (its management API answers); whether
    /// it rejoined is the caller's.
    pub(crate) async fn start_node(&self, node: usize) -> Result<(), BrokerError> {
        let n = self.node(node)?;
        docker("start", &["start", &n.name]).await?;
        self.states.set(node, NodeState::Up);
        wait_booted(self, &[node], restart_boot()).await
    }

    /// `docker network disconnect`: the node loses every link to the others (and its published
    /// ports). Returns once the node noticed and paused itself (`pause_minority`: its log says
    /// so), so a heal never meets a node still deciding; the caller waits until the others see
    /// it down.
    pub(crate) async fn partition_node(&self, node: usize) -> Result<(), BrokerError> {
        let n = self.node(node)?;
        if self.states.get(node) != Some(NodeState::Up) {
            return Err(BrokerError::CannotPartition {
                spec: PROVIDER.into(),
                reason: format!("node {node} is killed or cut off already: start or heal it first"),
            });
        }
        let since = docker_since();
        docker("network disconnect", &["network", "disconnect", &self.network, &n.name]).await?;
        self.states.set(node, NodeState::Partitioned);
        let what = format!("{} (rabbit@{}) to pause in its minority", n.name, n.host);
        let paused = paused_in_minority(&n.name, &since, &what).await;
        match paused {
            Ok(()) => Ok(()),
            Err(source) => Err(BrokerError::NotReady {
                spec: PROVIDER.into(),
                what: self.describe(),
                source: Box::new(source),
                log: self.log_tail(15).await,
            }),
        }
    }

    /// `docker network connect` with the node's alias again (or, for a node cut off from its peers
    /// only, [`RunningCluster::rejoin_node`]); the caller waits until it rejoined.
    pub(crate) async fn heal_node(&self, node: usize) -> Result<(), BrokerError> {
        if self.states.get(node) == Some(NodeState::Isolated) {
            return self.rejoin_node(node).await;
        }
        let n = self.node(node)?;
        self.connect(n).await?;
        self.states.set(node, NodeState::Up);
        Ok(())
    }

    /// Attaches the node's container to the cluster's network under its alias.
    async fn connect(&self, n: &ContainerNode) -> Result<(), BrokerError> {
        docker(
            "network connect",
            &["network", "connect", "--alias", &n.host, &self.network, &n.name],
        )
        .await
        .map(drop)
    }

    /// Reconnects cut-off nodes, then `docker stop` (SIGTERM, SIGKILL after 30 s scaled) of
    /// every container but one together, then of that one (node 1 unless it was killed), which
    /// mnesia then lets boot first and alone ([`RunningCluster::resume`]).
    pub(crate) async fn halt(&self) -> Result<(), BrokerError> {
        for (node, state) in self.states().into_iter().enumerate() {
            if matches!(state, NodeState::Partitioned | NodeState::Isolated) {
                self.heal_node(node).await?;
            }
        }
        let states = self.states();
        let last = (0..self.nodes.len())
            .find(|&i| states[i] != NodeState::Killed)
            .unwrap_or(0);
        self.last_stopped.store(last, Ordering::SeqCst);
        let grace = crate::timing::scaled(Duration::from_secs(30)).as_secs().to_string();
        let mut args = vec!["stop", "-t", grace.as_str()];
        args.extend(
            self.nodes
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != last)
                .map(|(_, n)| n.name.as_str()),
        );
        docker("stop", &args).await?;
        docker("stop", &["stop", "-t", &grace, &self.nodes[last].name]).await?;
        Ok(())
    }

    /// `docker start` of every container, the one that stopped last first, each once the one
    /// before booted ([`wait_booted`]); whether they clustered again is the caller's.
    pub(crate) async fn resume(&self) -> Result<(), BrokerError> {
        let last = self.last_stopped.load(Ordering::SeqCst);
        for i in start_order(last, self.nodes.len()) {
            self.start_node(i).await?;
        }
        Ok(())
    }

    /// Removes the containers (killing the nodes), the network and the TLS dir.
    pub(crate) async fn stop(mut self) -> Result<(), BrokerError> {
        self.stopped = true;
        let mut args = vec!["rm", "-f", "-v"];
        args.extend(self.nodes.iter().map(|n| n.name.as_str()));
        let removed = docker("rm", &args).await;
        let network = docker("network rm", &["network", "rm", &self.network]).await;
        if let Some(files) = self.tls.as_ref().and_then(|t| t.files.as_ref()) {
            let _ = std::fs::remove_dir_all(&files.dir);
        }
        removed?;
        network?;
        tracing::info!(network = %self.network, "broker containers and network removed");
        Ok(())
    }
}

impl Booting for RunningCluster {
    const LABEL: &'static str = PROVIDER;

    fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    fn describe(&self) -> String {
        RunningCluster::describe(self)
    }

    async fn node_failure(&self, node: usize) -> Option<String> {
        match self.running().await?.get(node) {
            Some(false) => Some(format!("container {} of {} exited", self.nodes[node].name, self.image)),
            _ => None,
        }
    }

    async fn log_tail(&self, lines: usize) -> String {
        RunningCluster::log_tail(self, lines).await
    }
}

impl Drop for RunningCluster {
    /// A cluster not stopped explicitly (a panicking test, a failed start) is removed outright.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        crate::cleanup::undo(&self.undo);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_pause_in_a_minority_and_tick_fast() {
        let args = erl_args(10);
        assert!(args.starts_with(&rabbitmq_erl_args()), "{args}");
        assert!(
            args.ends_with("-rabbit cluster_partition_handling pause_minority -kernel net_ticktime 10"),
            "{args}"
        );
        assert!((NET_TICKTIME.as_secs()..=MAX_TICKTIME.as_secs()).contains(&ticktime()));
    }
}
