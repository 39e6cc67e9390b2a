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
    #[error("docker: {context}: {source}")]
    Docker {
        context: String,
        #[source]
        source: Box<testcontainers::TestcontainersError>,
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
