//! The process provider's cluster: three local `rabbitmq-server` nodes on loopback, clustered.
//!
//! Exists so the cluster profile runs where docker is unwanted, the way the single process broker
//! does ([`crate::broker::process`], whose node launching, process groups and cleanup this
//! reuses). One temp dir holds the shared `HOME` (one Erlang cookie for the three nodes) and a
//! dir per node (config, data, log); each node has its own name (`fleet-<pid>-<n>-<i>@localhost`,
//! unique per run), free AMQP, management and distribution ports, and
//! `cluster_partition_handling = pause_minority`. The three boot together; nodes 2 and 3 then join
//! node 1 (`rabbitmqctl -n <node> stop_app`, `join_cluster <node 1>`, `start_app`, run as this
//! user with the shared `HOME`: the upstream scripts switch no user). Every node has a TLS
//! listener of its own port, all with one certificate the run's CA signed (the nodes share
//! `127.0.0.1`, which it names), so a gateway can reach each node over `amqps://` (CLU-1). Killing a node SIGKILLs its process group (its Erlang VM; epmd is shared by every
//! node of the machine and lives on); starting it again reuses its data, so it rejoins by itself.
//! Its nodes share one loopback, so one node cannot be cut off from the others here.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::super::boot::{PROCESS_BOOT, restart_boot};
use super::super::error::BrokerError;
use super::super::process::{self as single, Node, NodeSpec};
use super::super::tls_listener::TlsListener;
use super::super::url::Endpoint;
use super::nodes::{Booting, NODES, NodeState, NodeStates, node_tails, run_command, start_order, wait_booted};

/// The cluster's lines of each node's config.
const CLUSTER_CONF: &str = "cluster_partition_handling = pause_minority\n";

/// Three clustered `rabbitmq-server` nodes this run started.
pub(crate) struct RunningCluster {
    nodes: Vec<Node>,
    endpoints: Vec<Endpoint>,
    /// The temp dir: the shared `HOME` and one dir per node.
    dir: PathBuf,
    /// Node 1's `amqps://` listener; `None` when certificates could not be made.
    tls: Option<TlsListener>,
    /// Every node's `amqps://` listener, in node order (empty without certificates).
    node_tls: Vec<TlsListener>,
    states: NodeStates,
    /// The node [`RunningCluster::halt`] stopped last: the first to start again.
    last_stopped: AtomicUsize,
    stopped: bool,
    _cleanup_dir: crate::cleanup::Registration,
}

/// Starts three nodes and clusters them (nodes 2 and 3 join node 1); readiness is the caller's.
pub(crate) async fn start() -> Result<RunningCluster, BrokerError> {
    let server = single::server_script("process:rabbitmq-cluster")?;
    let (pid, n) = single::next_node_number();
    let dir = single::make_owned_dir("fleet-rabbitmq-cluster", pid, n)?;
    let mut cluster = RunningCluster {
        nodes: Vec::with_capacity(NODES),
        endpoints: Vec::with_capacity(NODES),
        _cleanup_dir: crate::cleanup::register(crate::cleanup::Action::RemoveDir(dir.clone())),
        dir,
        tls: None,
        node_tls: Vec::with_capacity(NODES),
        states: NodeStates::up(NODES),
        last_stopped: AtomicUsize::new(0),
        stopped: false,
    };
    // On any error below, dropping `cluster` kills what started and deletes the dir.
    write_cookie(&cluster.dir)?;
    for i in 1..=NODES {
        let node_dir = cluster.dir.join(format!("n{i}"));
        std::fs::create_dir(&node_dir).map_err(single::io_err(format!("creating {}", node_dir.display())))?;
        let [amqp_port, http_port, dist_port] = single::free_ports()?;
        let mut conf = single::rabbitmq_conf(amqp_port, http_port);
        conf.push_str(CLUSTER_CONF);
        if i == 1
            && let Some((tls, lines)) = single::prepare_tls(&cluster.dir)
        {
            conf.push_str(&lines);
            cluster.node_tls.push(tls.clone());
            cluster.tls = Some(tls);
        } else if let Some(files) = cluster.tls.as_ref().and_then(|t| t.files.clone())
            && let Ok(port) = crate::ports::free_port()
        {
            // The same certificate on a port of its own: every node is reachable over amqps.
            conf.push_str(&single::tls_conf(
                "127.0.0.1",
                port,
                &files.ca_cert.display().to_string(),
                &files.server_cert.display().to_string(),
                &files.server_key.display().to_string(),
            ));
            cluster.node_tls.push(TlsListener::generated("127.0.0.1", port, files));
        }
        single::write_node_files(&node_dir, &conf)?;
        cluster.nodes.push(Node::start(NodeSpec {
            server: server.clone(),
            name: format!("fleet-{pid}-{n}-{i}@localhost"),
            home: cluster.dir.clone(),
            dir: node_dir,
            amqp_port,
            dist_port,
            marker_dir: cluster.dir.clone(),
            marker_name: format!("{}-{i}", single::MARKER_NAME),
        })?);
        cluster.endpoints.push(Endpoint {
            amqp_host: "127.0.0.1".into(),
            amqp_port,
            http_base: format!("http://127.0.0.1:{http_port}"),
            user: "guest".into(),
            password: "guest".into(),
        });
    }
    let started = std::time::Instant::now();
    let all: Vec<usize> = (0..NODES).collect();
    wait_booted(&cluster, &all, PROCESS_BOOT).await?;
    let booted = started.elapsed();
    let first = cluster.nodes[0].name().to_string();
    // One at a time: two nodes joining at once may fail `start_app` with a mnesia error
    // (`{badmatch, {error, {normal, {mnesia_app, start, …}}}}`, seen here one start in tens).
    for node in &cluster.nodes[1..] {
        join(node, &first).await?;
    }
    tracing::info!(%first, ?booted, took = ?started.elapsed(), "rabbitmq-server nodes booted and joined");
    Ok(cluster)
}

/// The Erlang cookie in the shared `HOME` (owner-only, as Erlang demands), so the nodes and
/// `rabbitmqctl` trust each other and nothing else.
fn write_cookie(home: &Path) -> Result<(), BrokerError> {
    use std::os::unix::fs::PermissionsExt as _;
    let cookie = home.join(".erlang.cookie");
    single::write_file(&cookie, &uuid::Uuid::new_v4().simple().to_string().to_uppercase())?;
    std::fs::set_permissions(&cookie, std::fs::Permissions::from_mode(0o400))
        .map_err(single::io_err(format!("restricting {}", cookie.display())))
}

/// `rabbitmqctl stop_app`, `join_cluster <first>`, `start_app` on `node`.
async fn join(node: &Node, first: &str) -> Result<(), BrokerError> {
    for args in [&["stop_app"][..], &["join_cluster", first], &["start_app"]] {
        run_command(node.ctl(args)).await.map_err(|reason| BrokerError::Ctl {
            node: node.name().to_string(),
            command: args.join(" "),
            reason,
        })?;
    }
    Ok(())
}

impl RunningCluster {
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
        let names: Vec<&str> = self.nodes.iter().map(Node::name).collect();
        format!("rabbitmq-server cluster of {}", names.join(", "))
    }

    pub(crate) fn states(&self) -> Vec<NodeState> {
        self.states.all()
    }

    /// `Some(reason)` once a node the suite did not kill has exited.
    pub(crate) async fn failure(&self) -> Option<String> {
        let states = self.states();
        self.nodes
            .iter()
            .zip(states)
            .filter(|(_, s)| *s != NodeState::Killed)
            .find_map(|(n, _)| n.failure())
    }

    /// Each node's last lines.
    pub(crate) async fn log_tail(&self, lines: usize) -> String {
        let mut outputs = Vec::new();
        for n in &self.nodes {
            outputs.push((n.name().to_string(), n.log_text().await));
        }
        node_tails(outputs, lines)
    }

    fn node(&self, node: usize) -> Result<&Node, BrokerError> {
        self.nodes.get(node).ok_or(BrokerError::NoSuchNode {
            spec: "process:rabbitmq-cluster".into(),
            node,
            count: self.nodes.len(),
        })
    }

    /// SIGKILLs the node's process group and waits until nothing of it is left.
    pub(crate) async fn kill_node(&self, node: usize) -> Result<(), BrokerError> {
        let n = self.node(node)?;
        n.kill().await?;
        self.states.set(node, NodeState::Killed);
        Ok(())
    }

    /// Starts a killed node again on its data and returns once it booted (its management API
    /// answers); whether it rejoined is the caller's.
    pub(crate) async fn start_node(&self, node: usize) -> Result<(), BrokerError> {
        let n = self.node(node)?;
        // Still running: nothing to start (ensure_whole after a start that failed later).
        if n.failure().is_some() {
            n.start_again()?;
        }
        self.states.set(node, NodeState::Up);
        wait_booted(self, &[node], restart_boot()).await
    }

    /// Stops every node cleanly: all but one together, then that one (node 0 unless it was
    /// killed), which mnesia then lets boot first and alone ([`RunningCluster::resume`]).
    pub(crate) async fn halt(&self) -> Result<(), BrokerError> {
        let states = self.states();
        let last = (0..self.nodes.len())
            .find(|&i| states[i] != NodeState::Killed)
            .unwrap_or(0);
        self.last_stopped.store(last, Ordering::SeqCst);
        let others = (0..self.nodes.len()).filter(|&i| i != last);
        futures_util::future::try_join_all(others.map(|i| self.nodes[i].shut_down())).await?;
        self.nodes[last].shut_down().await
    }

    /// Starts every node again on its data, the one that stopped last first, each once the one
    /// before booted ([`wait_booted`]); whether they clustered again is the caller's.
    pub(crate) async fn resume(&self) -> Result<(), BrokerError> {
        let last = self.last_stopped.load(Ordering::SeqCst);
        for i in start_order(last, self.nodes.len()) {
            self.start_node(i).await?;
        }
        Ok(())
    }

    /// Stops every node, then deletes the temp dir.
    pub(crate) async fn stop(mut self) -> Result<(), BrokerError> {
        self.stopped = true;
        let downs = self.nodes.iter().map(Node::shut_down);
        let stopped = futures_util::future::try_join_all(downs).await;
        let removed = tokio::fs::remove_dir_all(&self.dir)
            .await
            .map_err(single::io_err(format!("deleting {}", self.dir.display())));
        stopped?;
        removed
    }
}

impl Booting for RunningCluster {
    const LABEL: &'static str = "process:rabbitmq-cluster";

    fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    fn describe(&self) -> String {
        RunningCluster::describe(self)
    }

    async fn node_failure(&self, node: usize) -> Option<String> {
        self.nodes.get(node).and_then(Node::failure)
    }

    async fn log_tail(&self, lines: usize) -> String {
        RunningCluster::log_tail(self, lines).await
    }
}

impl Drop for RunningCluster {
    /// A cluster not stopped explicitly (a panicking test, a failed start) is killed outright,
    /// its dir deleted.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        for n in &self.nodes {
            n.kill_now();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
