//! Everything that can go wrong bringing up, using or tearing down a broker, as one error type
//! whose messages say what to do where the fix is on the user's side.

use crate::timing::WaitTimeout;

/// Everything that can go wrong bringing up, using or tearing down a broker. Messages say what to
/// do where the fix is on the user's side.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("invalid broker {spec:?} in FLEET_E2E_BROKERS: {reason}")]
    InvalidSpec { spec: String, reason: String },
    #[error("broker {provider} is unavailable: {reason}; {hint}")]
    Unavailable {
        provider: String,
        reason: String,
        hint: String,
    },
    #[error("invalid {var}={value:?}: {reason}")]
    InvalidUrl {
        var: &'static str,
        value: String,
        reason: String,
    },
    #[error("broker {spec} ({what}) did not become ready: {source}\n--- last output ---\n{log}")]
    NotReady {
        spec: String,
        what: String,
        #[source]
        source: Box<WaitTimeout>,
        log: String,
    },
    #[error("broker {spec} died while booting: {reason}\n--- last output ---\n{log}")]
    Died { spec: String, reason: String, log: String },
    #[error("{what} could not be stopped: {source}")]
    Stuck {
        what: String,
        #[source]
        source: Box<WaitTimeout>,
    },
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    /// A `docker` command of the container provider failed.
    #[error("{context}: {source}")]
    Docker {
        context: String,
        #[source]
        source: Box<DockerFailure>,
    },
    #[error("management API {method} {url}: {source}")]
    Http {
        method: &'static str,
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("management API {method} {url} answered {status}: {body}")]
    Status {
        method: &'static str,
        url: String,
        status: u16,
        body: String,
    },
    #[error("management API {url}: unexpected answer: {reason}")]
    Decode { url: String, reason: String },
    #[error("broker {spec} cannot be restarted: {reason}")]
    CannotRestart { spec: String, reason: String },
    #[error("broker {spec}: {reason}")]
    NotExclusive { spec: String, reason: String },
    /// A node fault ([`super::Broker::kill_node`], …) asked of a broker that is one node.
    #[error("broker {spec} is not a cluster: it has no single node to {action}")]
    NotACluster { spec: String, action: &'static str },
    /// A node index beyond the cluster's nodes.
    #[error("broker {spec} has {count} node(s): there is no node {node} (nodes count from 0)")]
    NoSuchNode { spec: String, node: usize, count: usize },
    /// A partition asked of a provider that cannot cut a node's links.
    #[error("broker {spec} cannot cut a node off from the others: {reason}")]
    CannotPartition { spec: String, reason: String },
    /// A `docker` command (the cluster's network and containers) failed.
    #[error("docker {command}: {reason}")]
    DockerCommand { command: String, reason: String },
    /// `rabbitmqctl` (clustering nodes) failed.
    #[error("rabbitmqctl {command} on node {node}: {reason}")]
    Ctl {
        node: String,
        command: String,
        reason: String,
    },
}

/// A `docker` command that failed: the command line, how it ended and what it wrote to stderr.
/// Reads `docker start 4f2a…: exit 1: Error response from daemon: …` (the first line of stderr;
/// all of it is in [`DockerFailure::stderr`]).
#[derive(Debug)]
pub struct DockerFailure {
    /// `docker <args>`, shortened to its subcommand and last argument when long.
    pub command: String,
    pub end: DockerEnd,
    /// Everything the command wrote to stderr, trimmed.
    pub stderr: String,
}

/// How a failed `docker` command ended.
#[derive(Debug)]
pub enum DockerEnd {
    /// It ran and failed with this exit code (`None`: killed by a signal).
    Exit(Option<i32>),
    /// It did not run at all (no `docker` binary, …): why.
    NotRun(String),
    /// It did not end within its deadline and was killed.
    TimedOut(std::time::Duration),
}

impl std::fmt::Display for DockerEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DockerEnd::Exit(Some(code)) => write!(f, "exit {code}"),
            DockerEnd::Exit(None) => write!(f, "killed by a signal"),
            DockerEnd::NotRun(why) => write!(f, "cannot run it: {why}"),
            DockerEnd::TimedOut(after) => write!(f, "no end after {after:?}; killed"),
        }
    }
}

impl std::fmt::Display for DockerFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.command, self.end)?;
        match self.stderr.lines().map(str::trim).find(|l| !l.is_empty()) {
            Some(line) => write!(f, ": {line}"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for DockerFailure {}
