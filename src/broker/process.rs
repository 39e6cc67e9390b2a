//! The process provider: Debian's `rabbitmq-server` run as a local process, no docker needed.
//!
//! Exists for machines (and CI) where containers are unwanted or no image can be had: Debian
//! packages RabbitMQ (3.10), so `apt-get install rabbitmq-server` (done by `scripts/setup`) is
//! enough. Each broker gets its own node name, loopback ports picked free, its own epmd-registered
//! distribution port and a fresh temp dir holding data, config, cookie (`HOME`) and log, so runs
//! side by side never meet. The upstream start script (not the `/usr/sbin` wrapper, which switches
//! user) is run in its own process group; stopping signals the whole group. The group and the
//! dir are in the cleanup registry (and the dir carries an owner marker) so a run that ends by a
//! signal or a SIGKILL leaves no node behind ([`crate::cleanup`]).
//!
//! [`RunningProcess::halt`] stops the node cleanly (SIGTERM, as an operator's restart would) and
//! [`RunningProcess::resume`] starts it again with the same node name, data dir
//! (`RABBITMQ_MNESIA_BASE`), config and ports, so durable queues, persistent messages, vhosts and
//! users survive and every URL handed out before stays valid.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::error::BrokerError;
use super::own_nodes::{RETENTION_POLICIES, at_rabbitmq_defaults, quorum_tick_ms, stats_interval_ms, tail};
use super::tls_listener::TlsListener;
use super::url::Endpoint;

/// The upstream start script as Debian installs it.
pub const RABBITMQ_SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";
/// Environment variable overriding [`RABBITMQ_SERVER`] (another install location).
pub const RABBITMQ_SERVER_VAR: &str = "FLEET_RABBITMQ_SERVER";

static NEXT_NODE: AtomicU32 = AtomicU32::new(0);

/// The owner marker in each broker dir (`.fleet-owned-broker`, see [`crate::cleanup`]).
pub(crate) const MARKER_NAME: &str = "broker";

/// A `rabbitmq-server` this run started.
pub(crate) struct RunningProcess {
    node: Node,
    /// The temp dir holding everything of the node.
    dir: PathBuf,
    endpoint: Endpoint,
    /// The `amqps://` listener (SEC-1); `None` when certificates could not be made.
    tls: Option<TlsListener>,
    stopped: bool,
    /// The dir in the cleanup registry, for a run that ends by a signal or a panic (dropped, so
    /// forgotten, once [`RunningProcess::stop`] or `drop` did the job itself).
    _cleanup_dir: crate::cleanup::Registration,
}

/// What a node is and where its files are: everything a start (or a start again) of it needs.
pub(crate) struct NodeSpec {
    /// The start script.
    pub(crate) server: String,
    /// The Erlang node name, e.g. `fleet-123-0@localhost`.
    pub(crate) name: String,
    /// `HOME`: where the Erlang cookie is (one for all nodes of a cluster).
    pub(crate) home: PathBuf,
    /// The node's own dir: config files ([`write_node_files`]), `mnesia/`, `log/`, its output.
    pub(crate) dir: PathBuf,
    pub(crate) amqp_port: u16,
    pub(crate) dist_port: u16,
    /// The dir whose owner marker records the node's process group, and the marker's name.
    pub(crate) marker_dir: PathBuf,
    pub(crate) marker_name: String,
}

/// One `rabbitmq-server` node this run started: a single broker, or one node of a cluster.
/// Exists so the single node and the cluster's nodes start, stop, die and are cleaned up alike.
pub(crate) struct Node {
    spec: NodeSpec,
    /// The node's output (start script and broker log).
    log: PathBuf,
    /// The node's current life: replaced by [`Node::start_again`].
    launch: Mutex<Launch>,
}

/// One start of the node: the start script and its process group.
struct Launch {
    child: Child,
    /// The process group: the child's pid (it leads its own group).
    pgid: i32,
    /// The group in the cleanup registry.
    _cleanup_group: crate::cleanup::Registration,
}

pub(crate) fn io_err(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Io { context, source }
}

/// Three distinct free loopback ports (AMQP, management, distribution), from [`crate::ports`].
/// They are released before the broker binds them; a clash in between shows up as a boot failure.
pub(crate) fn free_ports() -> Result<[u16; 3], BrokerError> {
    crate::ports::free_ports().map_err(io_err("finding free loopback ports"))
}

/// The broker's advanced (Erlang terms) config file: the retention policies of both management
/// applications, which rabbitmq.conf cannot express as one-second samples everywhere, and the
/// quorum queues' metrics tick ([`super::own_nodes::QUORUM_TICK_MS`]); RabbitMQ's own defaults
/// after [`super::own_nodes::run_as_large_fleet`].
fn advanced_config() -> String {
    let tick = quorum_tick_ms();
    if at_rabbitmq_defaults() {
        return format!("[{{rabbit, [{{quorum_tick_interval, {tick}}}]}}].\n");
    }
    format!(
        "[{{rabbit, [{{quorum_tick_interval, {tick}}}]}},\n \
         {{rabbitmq_management, [{{sample_retention_policies, {RETENTION_POLICIES}}}]}},\n \
         {{rabbitmq_management_agent, [{{sample_retention_policies, {RETENTION_POLICIES}}}]}}].\n"
    )
}

/// The broker's config file.
pub(crate) fn rabbitmq_conf(amqp_port: u16, http_port: u16) -> String {
    let stats = stats_interval_ms();
    format!(
        "# Written by fleet-conformance for one throwaway node.\n\
         listeners.tcp.default = 127.0.0.1:{amqp_port}\n\
         management.tcp.ip = 127.0.0.1\n\
         management.tcp.port = {http_port}\n\
         collect_statistics_interval = {stats}\n\
         loopback_users = none\n"
    )
}

/// Config lines of a TLS listener on `port` with the generated certificates (SEC-1). Clients
/// are not asked for certificates: gateways log in with user and password.
pub(crate) fn tls_conf(bind: &str, port: u16, ca: &str, cert: &str, key: &str) -> String {
    format!(
        "listeners.ssl.default = {bind}:{port}\n\
         ssl_options.cacertfile = {ca}\n\
         ssl_options.certfile = {cert}\n\
         ssl_options.keyfile = {key}\n\
         ssl_options.verify = verify_none\n\
         ssl_options.fail_if_no_peer_cert = false\n"
    )
}

/// Makes certificates in `dir/tls` and picks a port for the TLS listener; `None` (logged) when
/// that fails, so a machine without openssl still runs every non-TLS scenario.
pub(crate) fn prepare_tls(dir: &Path) -> Option<(TlsListener, String)> {
    let files = match crate::tls::generate(&dir.join("tls"), &[]) {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!(error = %e, "no TLS listener on this broker: amqps scenarios will fail");
            return None;
        }
    };
    let port = crate::ports::free_port().ok()?;
    let conf = tls_conf(
        "127.0.0.1",
        port,
        &files.ca_cert.display().to_string(),
        &files.server_cert.display().to_string(),
        &files.server_key.display().to_string(),
    );
    Some((TlsListener::generated("127.0.0.1", port, files), conf))
}

pub(crate) fn write_file(path: &Path, content: &str) -> Result<(), BrokerError> {
    let mut f = File::create(path).map_err(io_err(format!("creating {}", path.display())))?;
    f.write_all(content.as_bytes())
        .map_err(io_err(format!("writing {}", path.display())))
}

/// Writes a node's files into `dir` — `rabbitmq.conf` (`conf`), the plugins, the advanced config,
/// an empty env file — and makes its `mnesia/` and `log/` dirs.
pub(crate) fn write_node_files(dir: &Path, conf: &str) -> Result<(), BrokerError> {
    write_file(&dir.join("rabbitmq.conf"), conf)?;
    write_file(&dir.join("enabled_plugins"), "[rabbitmq_management].\n")?;
    write_file(&dir.join("advanced.config"), &advanced_config())?;
    // An empty env file keeps the machine's /etc/rabbitmq/rabbitmq-env.conf out.
    write_file(&dir.join("rabbitmq-env.conf"), "")?;
    for sub in ["mnesia", "log"] {
        std::fs::create_dir(dir.join(sub)).map_err(io_err(format!("creating {}", dir.join(sub).display())))?;
    }
    Ok(())
}

/// The start script to run: [`RABBITMQ_SERVER_VAR`] or [`RABBITMQ_SERVER`], checked to exist.
pub(crate) fn server_script(provider: &str) -> Result<String, BrokerError> {
    let server = std::env::var(RABBITMQ_SERVER_VAR)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| RABBITMQ_SERVER.into());
    if !Path::new(&server).is_file() {
        return Err(BrokerError::Unavailable {
            provider: provider.into(),
            reason: format!("{server} does not exist"),
            hint: format!(
                "install rabbitmq-server (scripts/setup does), or set {RABBITMQ_SERVER_VAR} to the upstream \
                 rabbitmq-server script of another install"
            ),
        });
    }
    Ok(server)
}

/// A fresh number for node names and dirs: this process's pid and a counter keep runs side by
/// side (and brokers of one run) apart.
pub(crate) fn next_node_number() -> (u32, u32) {
    (std::process::id(), NEXT_NODE.fetch_add(1, Ordering::Relaxed))
}

/// Makes a temp dir `<prefix>-<pid>-<n>-<random>` carrying this run's owner marker (written before
/// anything runs in it, so a run killed from here on leaves a dir the next run's sweep
/// recognises, [`crate::cleanup`]).
pub(crate) fn make_owned_dir(prefix: &str, pid: u32, n: u32) -> Result<PathBuf, BrokerError> {
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{pid}-{n}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    ));
    std::fs::create_dir(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
    let marker = crate::cleanup::Marker::mine().removing_dir();
    if let Err(e) = marker.write(&dir, MARKER_NAME) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(io_err(format!("writing the owner marker in {}", dir.display()))(e));
    }
    Ok(dir)
}

/// Starts a node; readiness is the caller's.
pub(crate) async fn start() -> Result<RunningProcess, BrokerError> {
    let server = server_script("process:rabbitmq")?;
    let (pid, n) = next_node_number();
    let node = format!("fleet-{pid}-{n}@localhost");
    let dir = make_owned_dir("fleet-rabbitmq", pid, n)?;
    match spawn(&server, &node, &dir) {
        Ok(p) => Ok(p),
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            Err(e)
        }
    }
}

fn spawn(server: &str, node: &str, dir: &Path) -> Result<RunningProcess, BrokerError> {
    let [amqp_port, http_port, dist_port] = free_ports()?;
    let tls = prepare_tls(dir);
    let mut conf_text = rabbitmq_conf(amqp_port, http_port);
    if let Some((_, lines)) = &tls {
        conf_text.push_str(lines);
    }
    write_node_files(dir, &conf_text)?;
    let node = Node::start(NodeSpec {
        server: server.to_string(),
        name: node.to_string(),
        home: dir.to_path_buf(),
        dir: dir.to_path_buf(),
        amqp_port,
        dist_port,
        marker_dir: dir.to_path_buf(),
        marker_name: MARKER_NAME.into(),
    })?;
    Ok(RunningProcess {
        node,
        dir: dir.to_path_buf(),
        endpoint: Endpoint {
            amqp_host: "127.0.0.1".into(),
            amqp_port,
            http_base: format!("http://127.0.0.1:{http_port}"),
            user: "guest".into(),
            password: "guest".into(),
        },
        tls: tls.map(|(t, _)| t),
        stopped: false,
        _cleanup_dir: crate::cleanup::register(crate::cleanup::Action::RemoveDir(dir.to_path_buf())),
    })
}

/// The start script run with a scrubbed environment: nothing of an outer RabbitMQ/Erlang setup
/// may leak into a node (or into `rabbitmqctl`).
fn scrubbed(program: &str) -> Command {
    let mut cmd = Command::new(program);
    for (key, _) in std::env::vars_os() {
        if let Some(k) = key.to_str()
            && (k.starts_with("RABBITMQ_") || k.starts_with("ERL_"))
        {
            cmd.env_remove(k);
        }
    }
    if std::env::var_os("LANG").is_none() {
        cmd.env("LANG", "C.UTF-8");
    }
    cmd
}

/// Runs the start script for the node on the files [`write_node_files`] wrote in its dir
/// (appending to its log), in a process group of its own, registered for cleanup and recorded in
/// the owner marker.
fn launch(spec: &NodeSpec, log: &Path) -> Result<Launch, BrokerError> {
    let dir = &spec.dir;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(io_err(format!("opening {}", log.display())))?;
    let err = out.try_clone().map_err(io_err("duplicating the log file handle"))?;

    let mut cmd = scrubbed(&spec.server);
    cmd.env("HOME", &spec.home)
        .env("RABBITMQ_NODENAME", &spec.name)
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", spec.amqp_port.to_string())
        .env("RABBITMQ_DIST_PORT", spec.dist_port.to_string())
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_LOGS", "-")
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
        .env("ERL_EPMD_ADDRESS", "127.0.0.1")
        .env(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            "-kernel inet_dist_use_interface {127,0,0,1}",
        )
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    tracing::info!(node = %spec.name, amqp_port = spec.amqp_port, dir = %dir.display(), "starting rabbitmq-server");
    let child = cmd.spawn().map_err(io_err(format!("starting {}", spec.server)))?;
    let pgid = i32::try_from(child.id()).map_err(|_| BrokerError::Io {
        context: "reading the broker's pid".into(),
        source: std::io::Error::other("pid out of range"),
    })?;
    let cleanup_group = crate::cleanup::register(crate::cleanup::Action::KillGroup(pgid));
    // Now with the group: a later run kills it if this one dies without cleaning up.
    if let Err(e) = crate::cleanup::Marker::mine()
        .with_group(pgid)
        .removing_dir()
        .write(&spec.marker_dir, &spec.marker_name)
    {
        tracing::warn!(error = %e, dir = %spec.marker_dir.display(), "cannot record the broker's group for later sweeps");
    }
    Ok(Launch {
        child,
        pgid,
        _cleanup_group: cleanup_group,
    })
}

/// Sends `signal` to every process of the group; false once the group is gone.
fn signal_group(pgid: i32, signal: libc::c_int) -> bool {
    crate::cleanup::kill_group(pgid, signal)
}

impl Node {
    /// Starts the node described by `spec` (its files written); readiness is the caller's.
    pub(crate) fn start(spec: NodeSpec) -> Result<Node, BrokerError> {
        let log = spec.dir.join("rabbitmq.log");
        let launch = launch(&spec, &log)?;
        Ok(Node {
            spec,
            log,
            launch: Mutex::new(launch),
        })
    }

    /// Starts the node again (after [`Node::shut_down`] or [`Node::kill`]) with the same name,
    /// data dir, config and ports. Readiness is the caller's.
    pub(crate) fn start_again(&self) -> Result<(), BrokerError> {
        // A line in the broker's log between its two lives, for whoever reads a failure's tail.
        if let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&self.log) {
            let _ = writeln!(
                f,
                "===== fleet-conformance: starting {} again on the same data =====",
                self.spec.name
            );
        }
        let next = launch(&self.spec, &self.log)?;
        // The old launch (reaped, its group gone) leaves the cleanup registry as it is replaced.
        *self.launch() = next;
        Ok(())
    }

    /// The Erlang node name.
    pub(crate) fn name(&self) -> &str {
        &self.spec.name
    }

    pub(crate) fn describe(&self) -> String {
        format!("rabbitmq-server node {}", self.spec.name)
    }

    fn launch(&self) -> std::sync::MutexGuard<'_, Launch> {
        self.launch.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn pgid(&self) -> i32 {
        self.launch().pgid
    }

    /// Reaps the start script if it exited; `Some(status)` then.
    fn exit_status(&self) -> Option<String> {
        let mut launch = self.launch();
        match launch.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot be waited for: {e}")),
        }
    }

    /// `Some(reason)` once the node has exited.
    pub(crate) fn failure(&self) -> Option<String> {
        self.exit_status()
            .map(|status| format!("{} exited early ({status})", self.describe()))
    }

    /// The last lines of the node's output, for boot failures.
    pub(crate) async fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_text().await, lines)
    }

    /// The node's whole output (or why it cannot be read).
    pub(crate) async fn log_text(&self) -> String {
        match tokio::fs::read(&self.log).await {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }

    /// Waits until the start script is reaped and nothing of its group is left.
    async fn wait_gone(&self, nominal: Duration) -> Result<(), crate::timing::WaitTimeout> {
        crate::timing::wait_for(&format!("{} to exit", self.spec.name), nominal, || {
            let gone = self.exit_status().is_some() && !signal_group(self.pgid(), 0);
            async move { Ok(gone.then_some(())) }
        })
        .await
    }

    /// SIGTERM to the group (RabbitMQ shuts down cleanly), SIGKILL if that takes too long.
    pub(crate) async fn shut_down(&self) -> Result<(), BrokerError> {
        let started = std::time::Instant::now();
        signal_group(self.pgid(), libc::SIGTERM);
        if let Err(timeout) = self.wait_gone(Duration::from_secs(30)).await {
            tracing::warn!(%timeout, node = %self.spec.name, "rabbitmq-server ignored SIGTERM: killing it");
            self.kill().await?;
        }
        tracing::info!(node = %self.spec.name, took = ?started.elapsed(), "rabbitmq-server stopped");
        Ok(())
    }

    /// SIGKILL to the node's process group (its start script and Erlang VM; not epmd, which
    /// daemonized into a session of its own and is shared by every node of the machine), and
    /// waits until nothing of the group is left.
    pub(crate) async fn kill(&self) -> Result<(), BrokerError> {
        signal_group(self.pgid(), libc::SIGKILL);
        self.wait_gone(Duration::from_secs(10))
            .await
            .map_err(|source| BrokerError::Stuck {
                what: self.describe(),
                source: Box::new(source),
            })
    }

    /// `rabbitmqctl -n <node> <args>` (the upstream script beside the start script), with the
    /// node's `HOME` (its cookie) and env file, nothing of an outer setup.
    pub(crate) fn ctl(&self, args: &[&str]) -> tokio::process::Command {
        let ctl = Path::new(&self.spec.server)
            .parent()
            .map_or_else(|| PathBuf::from("rabbitmqctl"), |d| d.join("rabbitmqctl"));
        let mut cmd = scrubbed(&ctl.to_string_lossy());
        cmd.env("HOME", &self.spec.home)
            .env("RABBITMQ_CONF_ENV_FILE", self.spec.dir.join("rabbitmq-env.conf"))
            .arg("-n")
            .arg(&self.spec.name)
            .args(args)
            .stdin(Stdio::null());
        let mut cmd = tokio::process::Command::from(cmd);
        cmd.kill_on_drop(true);
        cmd
    }

    /// Kills the node outright if it still runs (a broker dropped without being stopped).
    pub(crate) fn kill_now(&self) {
        let mut launch = self.launch();
        if matches!(launch.child.try_wait(), Ok(None)) {
            signal_group(launch.pgid, libc::SIGKILL);
            let _ = launch.child.wait();
        }
    }
}

impl Drop for Node {
    /// A node not stopped explicitly (a panicking test) is killed outright.
    fn drop(&mut self) {
        self.kill_now();
    }
}

impl RunningProcess {
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub(crate) fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_ref()
    }

    pub(crate) fn describe(&self) -> String {
        self.node.describe()
    }

    /// `Some(reason)` once the broker has exited.
    pub(crate) async fn failure(&self) -> Option<String> {
        self.node.failure()
    }

    /// The last lines of the broker's output, for boot failures.
    pub(crate) async fn log_tail(&self, lines: usize) -> String {
        self.node.log_tail(lines).await
    }

    /// Stops the node cleanly (SIGTERM, SIGKILL only if that takes too long), keeping its data
    /// dir for [`RunningProcess::resume`].
    pub(crate) async fn halt(&self) -> Result<(), BrokerError> {
        self.node.shut_down().await
    }

    /// Starts the node [`RunningProcess::halt`] stopped again, on the same data dir, node name,
    /// config and ports. Readiness is the caller's.
    pub(crate) async fn resume(&self) -> Result<(), BrokerError> {
        self.node.start_again()
    }

    /// Stops the node (as [`RunningProcess::halt`] does), then deletes the temp dir.
    pub(crate) async fn stop(mut self) -> Result<(), BrokerError> {
        self.stopped = true;
        self.node.shut_down().await?;
        tokio::fs::remove_dir_all(&self.dir)
            .await
            .map_err(io_err(format!("deleting {}", self.dir.display())))
    }
}

impl Drop for RunningProcess {
    /// A broker not stopped explicitly (a panicking test) is killed outright, its dir deleted.
    fn drop(&mut self) {
        if self.stopped {
            return;
        }
        self.node.kill_now();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct() {
        let [a, b, c] = free_ports().expect("ports");
        assert!(a != b && b != c && a != c);
    }

    #[test]
    fn the_config_binds_loopback_and_refreshes_statistics_fast() {
        let conf = rabbitmq_conf(5000, 5001);
        assert!(conf.contains("listeners.tcp.default = 127.0.0.1:5000"));
        assert!(conf.contains("management.tcp.port = 5001"));
        assert!(conf.contains("management.tcp.ip = 127.0.0.1"));
        assert!(conf.contains("collect_statistics_interval = 500"));
    }

    #[test]
    fn the_advanced_config_samples_every_second_for_both_management_apps() {
        let adv = advanced_config();
        assert!(adv.starts_with("[{rabbit, [{quorum_tick_interval, 1000}]},"), "{adv}");
        assert!(
            adv.contains("{rabbitmq_management, [{sample_retention_policies, [{global,[{605,1}]}"),
            "{adv}"
        );
        assert!(
            adv.contains("{rabbitmq_management_agent, [{sample_retention_policies, "),
            "{adv}"
        );
        assert!(adv.trim_end().ends_with("]."), "{adv}");
    }
}
