//! A cluster's nodes as the suite sees them: how many the suite's own clusters have, what it did
//! to each, whether they count as formed (every node answers and sees every other) or see one
//! down, and what the process and container clusters share for booting their nodes and running
//! their commands.
//!
//! Exists apart from `cluster.rs` (the faults a scenario inflicts, as methods of
//! [`Broker`](crate::broker::Broker)) because the broker holds these nodes and the providers of
//! its clusters build on them: they sit below the broker and its providers, the faults above.

use std::sync::OnceLock;
use std::time::Duration;

use crate::broker::boot::amqp_answers;
use crate::broker::error::BrokerError;
use crate::broker::management::Management;
use crate::broker::own_nodes::tail;
use crate::broker::url::Endpoint;
use crate::timing::wait_for;

/// How many nodes the suite's own clusters have: the fewest with which a quorum queue outlives
/// the loss of one.
pub(crate) const NODES: usize = 3;

/// Nominal deadline of one `docker` or `rabbitmqctl` command.
pub(crate) const COMMAND: Duration = Duration::from_secs(90);

/// What the suite did to a node of a cluster it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NodeState {
    /// Running (as far as the suite is concerned).
    Up,
    /// Killed by [`Broker::kill_node`](crate::broker::Broker::kill_node) and not started again.
    Killed,
    /// Cut off by [`Broker::partition_node`](crate::broker::Broker::partition_node) and not healed.
    Partitioned,
    /// Cut off from the other nodes only (its clients' links kept) by
    /// [`Broker::isolate_node`](crate::broker::Broker::isolate_node).
    Isolated,
}

/// What the suite did to each node of a cluster it runs, by index: shared by the process and
/// container providers, so a node the suite killed is never reported as a failure.
pub(crate) struct NodeStates(std::sync::Mutex<Vec<NodeState>>);

impl NodeStates {
    /// `count` nodes, all up.
    pub(crate) fn up(count: usize) -> Self {
        Self(std::sync::Mutex::new(vec![NodeState::Up; count]))
    }

    /// Every node's state, by index.
    pub(crate) fn all(&self) -> Vec<NodeState> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// Node `node`'s state (`None` past the last node).
    pub(crate) fn get(&self, node: usize) -> Option<NodeState> {
        self.all().get(node).copied()
    }

    /// Records what was done to node `node`.
    pub(crate) fn set(&self, node: usize, state: NodeState) {
        if let Some(s) = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get_mut(node)
        {
            *s = state;
        }
    }
}

/// Every node of a cluster broker, beside node 0's endpoint that [`Broker`](crate::broker::Broker)
/// keeps for the probe and the management client.
pub(crate) struct Nodes {
    pub(super) endpoints: Vec<Endpoint>,
    /// One management client per node, without fallback: how each node sees the cluster.
    managements: Vec<Management>,
    /// Every node's Erlang name (its `/api/overview` `node`), by index: learned when the cluster
    /// is first ready.
    names: OnceLock<Vec<String>>,
}

impl Nodes {
    pub(crate) fn new(endpoints: Vec<Endpoint>) -> Result<Nodes, BrokerError> {
        let managements = endpoints
            .iter()
            .map(|e| Management::new(&e.http_base, &e.user, &e.password))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Nodes {
            endpoints,
            managements,
            names: OnceLock::new(),
        })
    }

    /// Every node's management API (node 0's first) for a client that asks the next node when
    /// one does not answer.
    pub(crate) fn management(&self) -> Result<Management, BrokerError> {
        let bases: Vec<String> = self.endpoints.iter().map(|e| e.http_base.clone()).collect();
        let first = &self.endpoints[0];
        Management::with_fallbacks(&bases, &first.user, &first.password)
    }

    pub(super) fn names(&self) -> Option<&Vec<String>> {
        self.names.get()
    }

    /// Every node's name, asking each node's `/api/overview` the first time.
    pub(super) async fn learn_names(&self) -> Result<&Vec<String>, String> {
        if let Some(names) = self.names.get() {
            return Ok(names);
        }
        let mut names = Vec::with_capacity(self.endpoints.len());
        for (i, m) in self.managements.iter().enumerate() {
            let overview = m.overview().await.map_err(|e| format!("node {i}: {e}"))?;
            let name = overview
                .raw
                .get("node")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| format!("node {i}'s /api/overview names no node"))?;
            names.push(name.to_string());
        }
        Ok(self.names.get_or_init(|| names))
    }

    /// `Ok` once every node's management API and AMQP listener answer and every node lists every
    /// node running, with no partition; else what is missing. Looks node by node and stops at the
    /// first thing missing, so polling it stays cheap.
    pub(crate) async fn clustered(&self) -> Result<(), String> {
        let names = self.learn_names().await?;
        for (i, m) in self.managements.iter().enumerate() {
            let seen = m.nodes().await.map_err(|e| format!("node {i} ({}): {e}", names[i]))?;
            for name in names {
                match seen.iter().find(|n| &n.name == name) {
                    Some(n) if n.running && n.partitions.is_empty() => {}
                    Some(n) if !n.running => return Err(format!("node {i} sees {name} not running")),
                    Some(n) => return Err(format!("node {i} sees {name} partitioned from {:?}", n.partitions)),
                    None => return Err(format!("node {i} does not list {name} as a cluster member")),
                }
            }
        }
        // Last, as each probe leaves three lines in the node's log.
        for (i, e) in self.endpoints.iter().enumerate() {
            amqp_answers(&e.amqp_addr())
                .await
                .map_err(|err| format!("node {i} ({}): AMQP: {err}", names[i]))?;
        }
        Ok(())
    }

    /// `Ok` once every node but `node` answers and sees `node` not running.
    pub(super) async fn sees_down(&self, node: usize) -> Result<(), String> {
        let names = self.learn_names().await?;
        let gone = &names[node];
        for (i, m) in self.managements.iter().enumerate().filter(|(i, _)| *i != node) {
            let seen = m.nodes().await.map_err(|e| format!("node {i} ({}): {e}", names[i]))?;
            match seen.iter().find(|n| &n.name == gone) {
                Some(n) if n.running => return Err(format!("node {i} still sees {gone} running")),
                _ => {}
            }
        }
        Ok(())
    }
}

/// What the suite's own clusters (process and container) share for waiting on their nodes' boot.
pub(crate) trait Booting {
    /// The spec's label, for errors.
    const LABEL: &'static str;
    fn endpoints(&self) -> &[Endpoint];
    fn describe(&self) -> String;
    /// `Some(reason)` once node `node` died (its process exited, its container stopped).
    async fn node_failure(&self, node: usize) -> Option<String>;
    async fn log_tail(&self, lines: usize) -> String;
}

/// Waits (scaled `nominal`) until the management API of every node in `which` answers: the node
/// booted (not yet clustered, when it is new). Fails early when one of them dies.
///
/// Exists because RabbitMQ 3.10 nodes that boot at the same time as a peer of theirs may crash
/// syncing feature flags with it (`incompatible_feature_flags`, `badmap`, seen at a whole-cluster
/// restart): a cluster's nodes are started again one after the other, each once the previous
/// answers.
pub(crate) async fn wait_booted<C: Booting>(c: &C, which: &[usize], nominal: Duration) -> Result<(), BrokerError> {
    let managements = which
        .iter()
        .map(|&i| {
            let e = &c.endpoints()[i];
            Management::new(&e.http_base, &e.user, &e.password).map(|m| (i, m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let what = format!("the management API of node(s) {which:?} to answer");
    let outcome = wait_for(&what, nominal, || async {
        for (i, m) in &managements {
            if let Err(e) = m.overview().await {
                // Only a node that does not answer is asked whether it died.
                if let Some(dead) = c.node_failure(*i).await {
                    return Ok(Some(Err(dead)));
                }
                return Err(format!("node {i}: {e}"));
            }
        }
        Ok(Some(Ok(())))
    })
    .await;
    match outcome {
        Ok(Ok(())) => Ok(()),
        Ok(Err(reason)) => Err(BrokerError::Died {
            spec: C::LABEL.into(),
            reason,
            log: c.log_tail(15).await,
        }),
        Err(source) => Err(BrokerError::NotReady {
            spec: C::LABEL.into(),
            what: c.describe(),
            source: Box::new(source),
            log: c.log_tail(15).await,
        }),
    }
}

/// In which order a halted cluster's nodes start again: `last` (the node that stopped last, so
/// mnesia lets it boot alone) first, then the others in node order.
pub(crate) fn start_order(last: usize, count: usize) -> Vec<usize> {
    std::iter::once(last).chain((0..count).filter(|&i| i != last)).collect()
}

/// Each node's output (its name, its text) as its last `lines` lines without the lines the
/// suite's own AMQP probes leave ([`quiet`]), under a header naming the node: a cluster's part of
/// failure reports.
pub(crate) fn node_tails(outputs: Vec<(String, String)>, lines: usize) -> String {
    outputs
        .into_iter()
        .map(|(node, text)| format!("=== {node} ===\n{}", tail(&quiet(&text), lines)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `text` without the lines of connections that closed right after the protocol header — the
/// suite's readiness probes, three lines each, polled while a wait lasts — which would otherwise
/// fill a failure's log tail.
pub(crate) fn quiet(text: &str) -> String {
    const PROBE: [&str; 3] = [
        "accepting AMQP connection",
        "closing AMQP connection",
        "client unexpectedly closed TCP connection",
    ];
    text.lines()
        .filter(|l| !PROBE.iter().any(|p| l.contains(p)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `cmd` (a `docker` or `rabbitmqctl` command) to its end, within the scaled [`COMMAND`]
/// deadline; its stdout when it succeeds, else its stderr (or why it did not run) as the error.
pub(crate) async fn run_command(mut cmd: tokio::process::Command) -> Result<String, String> {
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let limit = crate::timing::scaled(COMMAND);
    let out = match tokio::time::timeout(limit, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("cannot run it: {e}")),
        Err(_) => return Err(format!("no end after {limit:?}; abandoned")),
    };
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if out.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    // rabbitmqctl writes some errors to stdout; the deprecation noise of the cookie variable
    // is never the reason.
    let reason: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| !l.contains("RABBITMQ_ERLANG_COOKIE env variable support is deprecated"))
        .filter(|l| !l.trim().is_empty())
        .collect();
    Err(format!("{} ({})", tail(&reason.join("\n"), 10), out.status))
}
