//! The brokers the suite runs against, behind one type whatever provides them.
//!
//! A run names its brokers in `FLEET_E2E_BROKERS` (e.g. `container:rabbitmq,url:lavinmq`); each
//! entry is a [`BrokerSpec`]: which product ([`BrokerKind`]) and who provides it
//! ([`ProviderKind`]): a docker container ([`container`]), a local Debian `rabbitmq-server`
//! process ([`process`]), or a broker someone else runs, given by URL ([`url`]). [`Broker::start`]
//! hides the difference: every provider ends as an AMQP address plus a management API
//! ([`management`]), checked to answer before the first scenario, and each scenario gets its own
//! vhost so scenarios never see each other's queues.
//!
//! The kind `rabbitmq-cluster` (SPEC §16) is three RabbitMQ nodes clustered with
//! `pause_minority`, from any of the three providers (`process:`, `container:`, `url:` with comma
//! lists): [`Broker::endpoint`] is node 0's, gateways get every node
//! ([`Broker::gateway_amqp_url`]), the management client asks the next node when one is down, and
//! scenarios kill, start, cut off and heal single nodes where the provider can ([`cluster`]:
//! [`Broker::kill_node`], [`Broker::partition_node`], [`Broker::ensure_whole`]). Scenarios tagged
//! [`CLUSTER_TAG`], [`NODE_LOSS_TAG`] or [`NODE_PARTITION_TAG`] are left out where they cannot
//! run, with the reason ([`BrokerSpec::cannot_run`]).
//!
//! A scenario that restarts the broker ([`Broker::restart`]) breaks every connection into it, so it
//! must have the broker to itself: it takes its vhost with [`Broker::create_exclusive_vhost`],
//! which waits until every other scenario's vhost is deleted and holds back new ones
//! ([`Broker::create_vhost`] waits) until its own is deleted ([`sharing`]). That is enforced here,
//! not left to cucumber's `@serial` (cucumber 0.23 starts a queued serial scenario without waiting
//! for concurrent ones already running). The e2e runner gives those scenarios a second broker of
//! the same spec, so on it they only wait for each other. Only the process and container providers
//! can restart their broker; scenarios tagged [`RESTART_TAG`] are left out on the url provider
//! ([`BrokerSpec::cannot_run`], [`spec`]) and reported not tested there.
//!
//! Here: the [`Broker`] type — start, vhosts, addresses, stop. Beside it, one file each: what can
//! go wrong ([`BrokerError`], `error.rs`), what provides a running broker (`provider.rs`), their
//! TLS listener (`tls_listener.rs`) and what the nodes the suite starts share (`own_nodes.rs`),
//! the boot deadlines and the AMQP probe (`boot.rs`), when a broker counts as ready
//! (`readiness.rs`: management and the AMQP listener answer), stopping and starting it again on
//! its data (`restart.rs`), and a cluster's nodes (`cluster/nodes.rs`) and their faults
//! (`cluster.rs`).
//!
//! The files are layered: the leaves (errors, URLs, the TLS listener, specs, flavours, the
//! management client, boot deadlines, the nodes' settings) below the providers, the providers
//! below `provider.rs` and readiness, those below this file; `restart.rs` and `cluster.rs` add
//! methods to [`Broker`] from above it, and this file imports nothing from them.

mod boot;
pub mod cluster;
pub mod container;
mod error;
pub mod flavour;
pub mod management;
mod own_nodes;
pub mod process;
mod provider;
mod readiness;
mod restart;
mod sharing;
mod spec;
mod tls_listener;
pub mod url;
mod version;

use std::fmt;

use boot::{CLUSTER_BOOT, CONTAINER_BOOT, PROCESS_BOOT, URL_ATTACH};
use cluster::nodes::Nodes;
pub use error::BrokerError;
pub use flavour::{DelayedExchange, Product, ServerIdentity};
pub use management::{Binding, ConnectionInfo, ConsumerInfo, ExchangeInfo, Management, NodeInfo, Overview, QueueInfo};
pub use own_nodes::{LargeFleet, run_as_large_fleet};
use provider::Provider;
use sharing::{SHARE_WAIT, Users};
pub use spec::{
    BrokerKind, BrokerSpec, CLUSTER_TAG, NODE_LOSS_TAG, NODE_PARTITION_TAG, ProviderKind, RESTART_TAG, TLS_TAG,
};
pub use tls_listener::TlsListener;
pub use url::Endpoint;
pub use version::BrokerVersion;

/// A running broker shared by all scenarios of a run.
pub struct Broker {
    spec: BrokerSpec,
    /// Node 0's addresses (the only node's, for a single node).
    endpoint: Endpoint,
    /// Every node of a cluster (`None`: a single node).
    cluster: Option<Nodes>,
    /// What the broker says it is ([`flavour`]): steps read its forms through this.
    product: Product,
    version: String,
    management: Management,
    provider: Provider,
    tls: Option<TlsListener>,
    /// Every node's `amqps://` listener, in node order (CLU-1: the TLS variables apply to each).
    node_tls: Vec<TlsListener>,
    users: Users,
    /// Stopped by [`Broker::halt`] and not yet resumed.
    down: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Broker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Broker")
            .field("spec", &self.spec.label())
            .field("version", &self.version)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Broker {
    /// Starts (or, for the url provider, attaches to) the broker, then waits (deadline scaled by
    /// `FLEET_E2E_TIME_SCALE`) until management `GET /api/overview` answers and the AMQP listener
    /// answers the protocol header. On failure whatever was started is removed again and the
    /// error says what to do.
    pub async fn start(spec: &BrokerSpec) -> Result<Broker, BrokerError> {
        let image = match spec.provider {
            ProviderKind::Container => Some(container::image_for(spec)),
            _ => None,
        };
        Broker::start_with_image(spec, image).await
    }

    /// [`Broker::start`] with the container image given (`None`: from the environment).
    pub(crate) async fn start_with_image(spec: &BrokerSpec, image: Option<String>) -> Result<Broker, BrokerError> {
        let started = std::time::Instant::now();
        let (provider, endpoints, deadline) = Broker::provide(spec, image).await?;
        let (endpoint, cluster, management) = match Broker::nodes(spec, endpoints) {
            Ok(n) => n,
            Err(e) => {
                if let Err(stop) = provider.stop().await {
                    tracing::warn!(error = %stop, "could not clean up the broker");
                }
                return Err(e);
            }
        };
        match readiness::wait_ready(spec, &provider, &endpoint, cluster.as_ref(), &management, deadline).await {
            Ok((overview, identity)) => {
                // The broker's own word first (AMQP server properties), the management API's else.
                let (product, version) = match identity {
                    Some(id) if id.product != "unknown" => (Product::from_name(&id.product), id.label()),
                    _ => (Product::from_name(&overview.product), overview.label()),
                };
                tracing::info!(spec = %spec.label(), %version, took = ?started.elapsed(), "broker ready");
                if let Some(named) = spec.version
                    && !named.matches(&version)
                {
                    // A verdict must rest on the version the run named, never on another one.
                    if let Err(stop) = provider.stop().await {
                        tracing::warn!(error = %stop, "could not clean up the broker of another version");
                    }
                    return Err(BrokerError::InvalidSpec {
                        spec: spec.label(),
                        reason: format!(
                            "RabbitMQ/LavinMQ {named} was named, but the broker started says it is {version}; \
                             name the version it is, or give the provider one of {named} ({})",
                            container::version_hint(spec)
                        ),
                    });
                }
                if product != spec.kind.product() {
                    // Steps follow what the broker says it is, not what the run named.
                    tracing::warn!(spec = %spec.label(), %version, "the broker reports another product than the one named");
                    eprintln!(
                        "warning: {} was named, but the broker says it is {version}; its checks follow what it says",
                        spec.label()
                    );
                }
                Ok(Broker {
                    spec: *spec,
                    endpoint,
                    cluster,
                    product,
                    version,
                    management,
                    tls: provider.tls(),
                    node_tls: provider.node_tls(),
                    provider,
                    users: Users::default(),
                    down: std::sync::atomic::AtomicBool::new(false),
                })
            }
            Err(e) => {
                if let Err(stop) = provider.stop().await {
                    tracing::warn!(error = %stop, "could not clean up the broker that failed to boot");
                }
                Err(e)
            }
        }
    }

    /// Starts what provides the broker: its nodes' endpoints (one for a single node) and boot
    /// deadline.
    async fn provide(
        spec: &BrokerSpec,
        image: Option<String>,
    ) -> Result<(Provider, Vec<Endpoint>, std::time::Duration), BrokerError> {
        let cluster = spec.kind.is_cluster();
        Ok(match spec.provider {
            ProviderKind::Container => {
                let image = image.unwrap_or_else(|| container::image_for(spec));
                if cluster {
                    let c = cluster::container::start(&image).await?;
                    let endpoints = c.endpoints().to_vec();
                    (Provider::ContainerCluster(Box::new(c)), endpoints, CLUSTER_BOOT)
                } else {
                    let c = container::start(spec.kind, &image).await?;
                    let endpoint = c.endpoint().clone();
                    (Provider::Container(Box::new(c)), vec![endpoint], CONTAINER_BOOT)
                }
            }
            ProviderKind::Process => {
                if spec.kind == BrokerKind::LavinMq {
                    return Err(BrokerError::InvalidSpec {
                        spec: spec.label(),
                        reason: "only RabbitMQ can run as a local process".into(),
                    });
                }
                if cluster {
                    let p = cluster::process::start().await?;
                    let endpoints = p.endpoints().to_vec();
                    (Provider::ProcessCluster(Box::new(p)), endpoints, CLUSTER_BOOT)
                } else {
                    let p = process::start().await?;
                    let endpoint = p.endpoint().clone();
                    (Provider::Process(Box::new(p)), vec![endpoint], PROCESS_BOOT)
                }
            }
            ProviderKind::Url => {
                let endpoints = if cluster {
                    Endpoint::cluster_from_env()?
                } else {
                    vec![Endpoint::from_env()?]
                };
                (Provider::Url(url::tls_from_env()?), endpoints, URL_ATTACH)
            }
        })
    }

    /// Node 0's endpoint, every node (a cluster) and the management client (for a cluster, one
    /// that asks the next node when one does not answer).
    fn nodes(
        spec: &BrokerSpec,
        mut endpoints: Vec<Endpoint>,
    ) -> Result<(Endpoint, Option<Nodes>, Management), BrokerError> {
        let endpoint = endpoints.first().cloned().ok_or_else(|| BrokerError::InvalidSpec {
            spec: spec.label(),
            reason: "the provider gave no node".into(),
        })?;
        if !spec.kind.is_cluster() {
            endpoints.truncate(1);
            let management = Management::new(&endpoint.http_base, &endpoint.user, &endpoint.password)?;
            return Ok((endpoint, None, management));
        }
        let nodes = Nodes::new(endpoints)?;
        let management = nodes.management()?;
        Ok((endpoint, Some(nodes), management))
    }

    pub fn spec(&self) -> &BrokerSpec {
        &self.spec
    }

    /// Product and version as the broker names itself (AMQP `connection.start`, else
    /// `/api/overview`), e.g. "RabbitMQ 3.10.8", for reports.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The broker's product, whose forms the steps accept ([`flavour`]).
    pub fn product(&self) -> &Product {
        &self.product
    }

    /// Where the broker listens and who administers it.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// Creates a fresh vhost `fleet-<uuid>` and grants the admin user full permissions on it
    /// (RabbitMQ and LavinMQ grant the creator already; explicit is harmless). Waits while a
    /// scenario has the broker to itself, or waits for it ([`Broker::create_exclusive_vhost`]).
    pub async fn create_vhost(&self) -> Result<String, BrokerError> {
        self.new_vhost(false).await
    }

    /// [`Broker::create_vhost`] for a scenario that needs the broker to itself (it restarts it):
    /// waits until every other vhost made through this broker is deleted, and keeps new ones
    /// waiting until this one is deleted ([`Broker::delete_vhost`]).
    pub async fn create_exclusive_vhost(&self) -> Result<String, BrokerError> {
        self.new_vhost(true).await
    }

    async fn new_vhost(&self, exclusive: bool) -> Result<String, BrokerError> {
        let vhost = format!("fleet-{}", uuid::Uuid::new_v4().simple());
        self.reserve(&vhost, exclusive).await?;
        let made = async {
            self.management.create_vhost(&vhost).await?;
            self.management.grant_all(&vhost, &self.endpoint.user).await
        }
        .await;
        match made {
            Ok(()) => Ok(vhost),
            Err(e) => {
                self.release(&vhost);
                Err(e)
            }
        }
    }

    /// Records `vhost` as in use once the broker is shared (or, `exclusive`, once it is free).
    async fn reserve(&self, vhost: &str, exclusive: bool) -> Result<(), BrokerError> {
        self.users
            .reserve(vhost, exclusive, SHARE_WAIT)
            .await
            .map_err(|reason| BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason,
            })
    }

    fn release(&self, vhost: &str) {
        self.users.release(vhost);
    }

    /// Deletes a vhost and everything in it; an already deleted vhost is fine. The vhost is no
    /// longer in use afterwards, even if the broker could not delete it. A scenario that stopped
    /// the broker ([`Broker::halt`]) and ended before starting it again (a failed step) gets it
    /// started here, so the scenarios after it find a broker.
    pub async fn delete_vhost(&self, vhost: &str) -> Result<(), BrokerError> {
        if self.is_down() && self.users.exclusive().as_deref() == Some(vhost) {
            tracing::warn!(%vhost, "the scenario that stopped the broker ended without starting it: starting it");
            if let Err(e) = self.resume(vhost).await {
                tracing::error!(error = %e, "the broker did not come back");
            }
        }
        let r = self.management.delete_vhost(vhost).await;
        self.release(vhost);
        r
    }

    /// Vhosts made through this broker that are in use right now, other than `mine`.
    pub fn other_users(&self, mine: &str) -> Vec<String> {
        self.users.others(mine)
    }

    /// `amqp://user:pass@host:port/<percent-encoded vhost>`.
    pub fn amqp_url(&self, vhost: &str) -> String {
        self.endpoint.amqp_url(vhost)
    }

    /// The `amqps://` listener, when the provider started one (RabbitMQ process and container).
    pub fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_ref()
    }

    /// Node `node`'s `amqps://` listener (a cluster: each node has one when certificates could be
    /// made; a single node: node 0 is its listener).
    pub fn node_tls(&self, node: usize) -> Option<&TlsListener> {
        self.node_tls.get(node)
    }

    /// `amqp://` (or, with `tls`, `amqps://` on the TLS listener) for `vhost`, logged in as
    /// `login` (user, password) or as the admin user. `None`: TLS asked for, but no listener.
    pub fn url_as(&self, vhost: &str, login: Option<(&str, &str)>, tls: bool) -> Option<String> {
        let (user, password) = login.unwrap_or((&self.endpoint.user, &self.endpoint.password));
        let (scheme, addr) = if tls {
            let t = self.tls.as_ref()?;
            ("amqps", format!("{}:{}", t.host, t.port))
        } else {
            ("amqp", self.endpoint.amqp_addr())
        };
        Some(format!(
            "{scheme}://{}:{}@{addr}/{}",
            url::percent_encode(user),
            url::percent_encode(password),
            url::percent_encode(vhost)
        ))
    }

    /// The management client, for queue inspection.
    pub fn management(&self) -> &Management {
        &self.management
    }

    /// Stops and removes what the provider started: the container is removed, the process
    /// stopped and its data dir deleted (a cluster: every node, and its network). Nothing for the
    /// url provider.
    pub async fn stop(self) -> Result<(), BrokerError> {
        let label = self.spec.label();
        self.provider.stop().await?;
        tracing::info!(spec = %label, "broker stopped");
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::wait_for;
    use std::time::Duration;

    #[tokio::test]
    async fn url_provider_without_variables_says_what_to_set() {
        // Only meaningful where the variables are unset (they are in the unit-test environment).
        if std::env::var_os(url::BROKER_URL_VAR).is_some() || std::env::var_os(url::BROKER_HTTP_VAR).is_some() {
            return;
        }
        let spec = BrokerSpec::parse("url:rabbitmq").expect("valid");
        let err = Broker::start(&spec).await.expect_err("no variables");
        let text = err.to_string();
        assert!(
            text.contains("FLEET_BROKER_URL") && text.contains("FLEET_BROKER_HTTP"),
            "{text}"
        );
    }

    #[tokio::test]
    #[ignore = "talks to docker (which may try a registry)"]
    async fn broker_missing_image_says_how_to_get_one() {
        let spec = BrokerSpec::parse("container:rabbitmq").expect("valid");
        let image = format!("fleet-no-such-image-{}:none", uuid::Uuid::new_v4().simple());
        match Broker::start_with_image(&spec, Some(image)).await {
            Err(e @ BrokerError::Unavailable { .. }) => {
                eprintln!("{e}");
                assert!(e.to_string().contains("scripts/setup"), "{e}");
            }
            // Without docker the error is about docker, which is just as clear.
            Err(BrokerError::Docker { .. }) => {}
            Err(other) => panic!("unexpected error: {other}"),
            Ok(broker) => {
                let _ = broker.stop().await;
                panic!("a container of a nonexistent image started");
            }
        }
    }

    /// End to end through a real broker: vhost, queue, one message seen by management, cleanup.
    /// Run with `cargo test -p fleet-conformance --lib -- --ignored broker --nocapture`.
    async fn round_trip(spec: BrokerSpec, image: Option<String>) {
        use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        use lapin::{BasicProperties, Connection, ConnectionProperties};

        let t0 = std::time::Instant::now();
        let broker = Broker::start_with_image(&spec, image).await.expect("broker starts");
        let boot = t0.elapsed();
        let vhost = broker.create_vhost().await.expect("vhost");
        let conn = Connection::connect(&broker.amqp_url(&vhost), ConnectionProperties::default())
            .await
            .expect("AMQP connection");
        let channel = conn.create_channel().await.expect("channel");
        channel
            .queue_declare(
                "fleet-probe".into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("declare");
        channel
            .basic_publish(
                "".into(),
                "fleet-probe".into(),
                BasicPublishOptions::default(),
                b"hello",
                BasicProperties::default(),
            )
            .await
            .expect("publish")
            .await
            .expect("publish sent");
        let t1 = std::time::Instant::now();
        let q = wait_for("the message to show in management", Duration::from_secs(15), || async {
            match broker.management().queue(&vhost, "fleet-probe").await {
                Ok(Some(q)) if q.messages_ready == 1 => Ok(Some(q)),
                Ok(q) => Err(format!("{q:?}")),
                Err(e) => Err(e.to_string()),
            }
        })
        .await
        .expect("messages_ready == 1");
        let seen = t1.elapsed();
        assert_eq!(q.name, "fleet-probe");
        let queues = broker.management().queues(&vhost).await.expect("queues");
        assert_eq!(queues.len(), 1);
        let bindings = broker
            .management()
            .bindings(&vhost, "fleet-probe")
            .await
            .expect("bindings");
        assert!(
            bindings
                .iter()
                .any(|b| b.source.is_empty() && b.routing_key == "fleet-probe"),
            "{bindings:?}"
        );
        let exchanges = broker.management().exchanges(&vhost).await.expect("exchanges");
        assert!(
            exchanges.iter().any(|e| e.name == "amq.topic" && e.kind == "topic"),
            "{exchanges:?}"
        );
        let _ = conn.close(200, "bye".into()).await;
        broker.delete_vhost(&vhost).await.expect("delete vhost");
        assert_eq!(
            broker.management().queue(&vhost, "fleet-probe").await.expect("query"),
            None
        );
        let version = broker.version().to_string();
        let t2 = std::time::Instant::now();
        broker.stop().await.expect("stop");
        eprintln!(
            "{}: {version}: boot {boot:.2?}, message visible in management after {seen:.2?}, stop {:.2?}",
            spec.label(),
            t2.elapsed()
        );
    }

    #[tokio::test]
    #[ignore = "starts a real broker container; needs docker and a local RabbitMQ image"]
    async fn broker_round_trip_container_rabbitmq() {
        let image = std::env::var(container::RABBITMQ_IMAGE_VAR)
            .unwrap_or_else(|_| container::LOCAL_RABBITMQ_IMAGE.to_string());
        round_trip(BrokerSpec::parse("container:rabbitmq").expect("valid"), Some(image)).await;
    }

    #[tokio::test]
    #[ignore = "needs a running broker at FLEET_BROKER_URL / FLEET_BROKER_HTTP"]
    async fn broker_round_trip_url() {
        if std::env::var_os(url::BROKER_URL_VAR).is_none() {
            eprintln!("skipped: {} is not set", url::BROKER_URL_VAR);
            return;
        }
        let kind = std::env::var("FLEET_BROKER_KIND").unwrap_or_else(|_| "rabbitmq".into());
        round_trip(BrokerSpec::parse(&format!("url:{kind}")).expect("valid"), None).await;
    }

    #[tokio::test]
    #[ignore = "starts a real rabbitmq-server process; needs the Debian package"]
    async fn broker_round_trip_process_rabbitmq() {
        round_trip(BrokerSpec::parse("process:rabbitmq").expect("valid"), None).await;
    }
}
