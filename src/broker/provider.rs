//! What provides a running broker — a container, a local process, or a broker someone else runs
//! (by URL), one node or a cluster — and so what its log, its TLS listener, stopping, halting
//! and resuming it mean (a cluster's node faults are `cluster.rs`'s). What the providers share
//! is below them: their TLS listener (`tls_listener.rs`) and their nodes' settings and log tails
//! (`own_nodes.rs`).

use super::cluster::container::RunningCluster as ContainerNodes;
use super::cluster::process::RunningCluster as ProcessNodes;
use super::error::BrokerError;
use super::spec::BrokerSpec;
use super::tls_listener::TlsListener;
use super::url::Endpoint;
use super::{container, process};

/// What provides a running broker, and so what stopping it means.
pub(super) enum Provider {
    Container(Box<container::RunningContainer>),
    Process(Box<process::RunningProcess>),
    /// Three RabbitMQ containers on a docker network of their own, clustered.
    ContainerCluster(Box<ContainerNodes>),
    /// Three local `rabbitmq-server` nodes, clustered.
    ProcessCluster(Box<ProcessNodes>),
    /// A broker (or cluster) someone else runs, with the amqps listener it was given, if any.
    Url(Option<TlsListener>),
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
