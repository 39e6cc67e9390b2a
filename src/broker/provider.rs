//! What provides a running broker — a container, a local process, or a broker someone else runs
//! (by URL), one node or a cluster — and so what its log, its TLS listener, stopping, halting
//! and resuming it mean (a cluster's node faults are `cluster.rs`'s); plus
//! what the container and process providers share (the management sampling policy, log tails).

use super::{BrokerError, BrokerSpec, Endpoint, cluster, container, process};

/// What provides a running broker, and so what stopping it means.
pub(super) enum Provider {
    Container(Box<container::RunningContainer>),
    Process(Box<process::RunningProcess>),
    /// Three RabbitMQ containers on a docker network of their own, clustered.
    ContainerCluster(Box<cluster::container::RunningCluster>),
    /// Three local `rabbitmq-server` nodes, clustered.
    ProcessCluster(Box<cluster::process::RunningCluster>),
    /// A broker (or cluster) someone else runs, with the amqps listener it was given, if any.
    Url(Option<TlsListener>),
}

/// A broker's `amqps://` listener (SEC-1): where it is and the test CA that signed its
/// certificate (made at start by [`crate::tls::generate`]).
#[derive(Debug, Clone)]
pub struct TlsListener {
    pub host: String,
    pub port: u16,
    /// The CA certificate that signed the listener's certificate: what a gateway is told to trust.
    pub ca_cert: std::path::PathBuf,
    /// The CA, certificate and key the suite made for a broker it started (removed with it);
    /// `None` for a broker someone else runs (url provider: `FLEET_BROKER_CA_FILE`).
    pub files: Option<crate::tls::TlsFiles>,
}

impl TlsListener {
    /// A listener whose certificates the suite generated.
    pub(crate) fn generated(host: &str, port: u16, files: crate::tls::TlsFiles) -> TlsListener {
        TlsListener {
            host: host.to_string(),
            port,
            ca_cert: files.ca_cert.clone(),
            files: Some(files),
        }
    }
}

impl Provider {
    pub(super) fn tls(&self) -> Option<TlsListener> {
        match self {
            Provider::Container(c) => c.tls().cloned(),
            Provider::Process(p) => p.tls().cloned(),
            Provider::ContainerCluster(c) => c.tls().cloned(),
            Provider::ProcessCluster(p) => p.tls().cloned(),
            Provider::Url(tls) => tls.clone(),
        }
    }

    /// Every node's `amqps://` listener, in node order (a single node: its own, if any).
    pub(super) fn node_tls(&self) -> Vec<TlsListener> {
        match self {
            Provider::ContainerCluster(c) => c.node_tls().to_vec(),
            Provider::ProcessCluster(p) => p.node_tls().to_vec(),
            _ => self.tls().into_iter().collect(),
        }
    }

    pub(super) fn describe(&self, endpoint: &Endpoint) -> String {
        match self {
            Provider::Container(c) => c.describe(),
            Provider::Process(p) => p.describe(),
            Provider::ContainerCluster(c) => c.describe(),
            Provider::ProcessCluster(p) => p.describe(),
            Provider::Url(_) => format!("amqp {} / {}", endpoint.amqp_addr(), endpoint.http_base),
        }
    }

    pub(super) async fn failure(&self) -> Option<String> {
        match self {
            Provider::Container(c) => c.failure().await,
            Provider::Process(p) => p.failure().await,
            Provider::ContainerCluster(c) => c.failure().await,
            Provider::ProcessCluster(p) => p.failure().await,
            Provider::Url(_) => None,
        }
    }

    pub(super) async fn log_tail(&self) -> String {
        const LINES: usize = 40;
        /// Per node of a cluster: three tails in one report.
        const NODE_LINES: usize = 15;
        match self {
            Provider::Container(c) => c.log_tail(LINES).await,
            Provider::Process(p) => p.log_tail(LINES).await,
            Provider::ContainerCluster(c) => c.log_tail(NODE_LINES).await,
            Provider::ProcessCluster(p) => p.log_tail(NODE_LINES).await,
            Provider::Url(_) => "(the url provider has no output of its own)".into(),
        }
    }

    pub(super) async fn stop(self) -> Result<(), BrokerError> {
        match self {
            Provider::Container(c) => c.stop().await,
            Provider::Process(p) => p.stop().await,
            Provider::ContainerCluster(c) => c.stop().await,
            Provider::ProcessCluster(p) => p.stop().await,
            Provider::Url(_) => Ok(()),
        }
    }

    /// Stops the broker, keeping its data for [`Provider::resume`].
    pub(super) async fn halt(&self, spec: &BrokerSpec) -> Result<(), BrokerError> {
        match self {
            Provider::Container(c) => c.halt().await,
            Provider::Process(p) => p.halt().await,
            Provider::ContainerCluster(c) => c.halt().await,
            Provider::ProcessCluster(p) => p.halt().await,
            Provider::Url(_) => Err(cannot_restart(spec)),
        }
    }

    /// Starts the broker [`Provider::halt`] stopped again, on its data; readiness is the caller's.
    pub(super) async fn resume(&self, spec: &BrokerSpec) -> Result<(), BrokerError> {
        match self {
            Provider::Container(c) => c.resume().await,
            Provider::Process(p) => p.resume().await,
            Provider::ContainerCluster(c) => c.resume().await,
            Provider::ProcessCluster(p) => p.resume().await,
            Provider::Url(_) => Err(cannot_restart(spec)),
        }
    }
}

fn cannot_restart(spec: &BrokerSpec) -> BrokerError {
    BrokerError::CannotRestart {
        spec: spec.label(),
        reason: spec.provider.cannot_restart().unwrap_or("unknown").into(),
    }
}

/// Management statistics sampled every second instead of every 5 s. The management agent
/// collects at its smallest retention interval, whatever `collect_statistics_interval` says, so
/// without this a queue's depth shows up to 5 s late.
pub(crate) const RETENTION_POLICIES: &str = "[{global,[{605,1}]},{basic,[{605,1}]},{detailed,[{10,1}]}]";

/// A quorum queue reports its depths (ready, unacknowledged) to the management API once per
/// tick, 5 s by default: a depth that lasts 2 s may never show. Every second instead, like the
/// classic queues' statistics above.
pub(crate) const QUORUM_TICK_MS: u32 = 1000;

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
