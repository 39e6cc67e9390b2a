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
//! A scenario that restarts the broker ([`Broker::restart`]) breaks every connection into it, so it
//! must have the broker to itself: it takes its vhost with [`Broker::create_exclusive_vhost`],
//! which waits until every other scenario's vhost is deleted and holds back new ones
//! ([`Broker::create_vhost`] waits) until its own is deleted ([`sharing`]). That is enforced here,
//! not left to cucumber's `@serial` (cucumber 0.23 starts a queued serial scenario without waiting
//! for concurrent ones already running). The e2e runner gives those scenarios a second broker of
//! the same spec, so on it they only wait for each other. Only the process and container providers
//! can restart their broker; scenarios tagged [`RESTART_TAG`] are left out on the url provider
//! ([`BrokerSpec::cannot_run`], [`spec`]) and reported not tested there.

pub mod container;
pub mod flavour;
pub mod management;
pub mod process;
mod sharing;
mod spec;
pub mod url;

use std::fmt;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::timing::{WaitTimeout, scaled, wait_for};
pub use flavour::{DelayedExchange, Product, ServerIdentity};
pub use management::{Binding, ConnectionInfo, ConsumerInfo, ExchangeInfo, Management, Overview, QueueInfo};
use sharing::{SHARE_WAIT, Users};
pub use spec::{BrokerKind, BrokerSpec, ProviderKind, RESTART_TAG, TLS_TAG};
pub use url::Endpoint;

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
}

/// What provides a running broker, and so what stopping it means.
enum Provider {
    Container(Box<container::RunningContainer>),
    Process(Box<process::RunningProcess>),
    /// A broker someone else runs, with the amqps listener it was given, if any.
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
    fn tls(&self) -> Option<TlsListener> {
        match self {
            Provider::Container(c) => c.tls().cloned(),
            Provider::Process(p) => p.tls().cloned(),
            Provider::Url(tls) => tls.clone(),
        }
    }

    fn describe(&self, endpoint: &Endpoint) -> String {
        match self {
            Provider::Container(c) => c.describe(),
            Provider::Process(p) => p.describe(),
            Provider::Url(_) => format!("amqp {} / {}", endpoint.amqp_addr(), endpoint.http_base),
        }
    }

    async fn failure(&self) -> Option<String> {
        match self {
            Provider::Container(c) => c.failure().await,
            Provider::Process(p) => p.failure().await,
            Provider::Url(_) => None,
        }
    }

    async fn log_tail(&self) -> String {
        const LINES: usize = 40;
        match self {
            Provider::Container(c) => c.log_tail(LINES).await,
            Provider::Process(p) => p.log_tail(LINES).await,
            Provider::Url(_) => "(the url provider has no output of its own)".into(),
        }
    }

    async fn stop(self) -> Result<(), BrokerError> {
        match self {
            Provider::Container(c) => c.stop().await,
            Provider::Process(p) => p.stop().await,
            Provider::Url(_) => Ok(()),
        }
    }

    /// Stops the broker, keeping its data for [`Provider::resume`].
    async fn halt(&self, spec: &BrokerSpec) -> Result<(), BrokerError> {
        match self {
            Provider::Container(c) => c.halt().await,
            Provider::Process(p) => p.halt().await,
            Provider::Url(_) => Err(cannot_restart(spec)),
        }
    }

    /// Starts the broker [`Provider::halt`] stopped again, on its data; readiness is the caller's.
    async fn resume(&self, spec: &BrokerSpec) -> Result<(), BrokerError> {
        match self {
            Provider::Container(c) => c.resume().await,
            Provider::Process(p) => p.resume().await,
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

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Nominal boot deadlines (scaled by `FLEET_E2E_TIME_SCALE`). RabbitMQ with management boots in
/// 5–10 s on two cores; the margin covers a loaded CI machine.
const CONTAINER_BOOT: Duration = Duration::from_secs(120);
const PROCESS_BOOT: Duration = Duration::from_secs(90);
const URL_ATTACH: Duration = Duration::from_secs(30);
/// Nominal deadline of a broker's boot after a restart.
const RESTART_BOOT: Duration = Duration::from_secs(90);

/// An AMQP 0-9-1 server answers the protocol header with `connection.start`, a method frame
/// (frame type 1). A bare TCP connect is not enough: docker's port proxy accepts connections
/// before the broker listens. The frame names the broker (its `product` and `version` server
/// properties); `None` when they cannot be read (the listener still answered).
async fn amqp_answers(addr: &str) -> Result<Option<ServerIdentity>, String> {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(b"AMQP\x00\x00\x09\x01")
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut header = [0u8; 7];
        stream.read_exact(&mut header).await.map_err(|e| format!("read: {e}"))?;
        if header[0] != 1 {
            return Err(format!("answered frame type {}, not a method frame", header[0]));
        }
        let size = u32::from_be_bytes([header[3], header[4], header[5], header[6]]) as usize;
        // A connection.start is a few hundred bytes; a larger size is not one, the listener answered.
        if size > 64 * 1024 {
            return Ok(None);
        }
        let mut frame = header.to_vec();
        frame.resize(7 + size + 1, 0);
        if stream.read_exact(&mut frame[7..]).await.is_err() {
            return Ok(None);
        }
        match ServerIdentity::from_connection_start(&frame) {
            Ok(id) => Ok(Some(id)),
            Err(e) => {
                tracing::warn!(error = %e, "the broker's connection.start could not be read; its product comes from the management API");
                Ok(None)
            }
        }
    };
    tokio::time::timeout(scaled(Duration::from_secs(5)), attempt)
        .await
        .map_err(|_| "no answer to the AMQP protocol header".to_string())?
}

/// A running broker shared by all scenarios of a run.
pub struct Broker {
    spec: BrokerSpec,
    endpoint: Endpoint,
    /// What the broker says it is ([`flavour`]): steps read its forms through this.
    product: Product,
    version: String,
    management: Management,
    provider: Provider,
    tls: Option<TlsListener>,
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
            ProviderKind::Container => Some(container::image_for(spec.kind)),
            _ => None,
        };
        Broker::start_with_image(spec, image).await
    }

    /// [`Broker::start`] with the container image given (`None`: from the environment).
    pub(crate) async fn start_with_image(spec: &BrokerSpec, image: Option<String>) -> Result<Broker, BrokerError> {
        let started = std::time::Instant::now();
        let (provider, endpoint, deadline) = match spec.provider {
            ProviderKind::Container => {
                let image = image.unwrap_or_else(|| container::image_for(spec.kind));
                let c = container::start(spec.kind, &image).await?;
                let endpoint = c.endpoint().clone();
                (Provider::Container(Box::new(c)), endpoint, CONTAINER_BOOT)
            }
            ProviderKind::Process => {
                if spec.kind != BrokerKind::RabbitMq {
                    return Err(BrokerError::InvalidSpec {
                        spec: spec.label(),
                        reason: "only RabbitMQ can run as a local process".into(),
                    });
                }
                let p = process::start().await?;
                let endpoint = p.endpoint().clone();
                (Provider::Process(Box::new(p)), endpoint, PROCESS_BOOT)
            }
            ProviderKind::Url => (Provider::Url(url::tls_from_env()?), Endpoint::from_env()?, URL_ATTACH),
        };
        let management = Management::new(&endpoint.http_base, &endpoint.user, &endpoint.password)?;
        match Broker::wait_ready(spec, &provider, &endpoint, &management, deadline).await {
            Ok((overview, identity)) => {
                // The broker's own word first (AMQP server properties), the management API's else.
                let (product, version) = match identity {
                    Some(id) if id.product != "unknown" => (Product::from_name(&id.product), id.label()),
                    _ => (Product::from_name(&overview.product), overview.label()),
                };
                tracing::info!(spec = %spec.label(), %version, took = ?started.elapsed(), "broker ready");
                let named = match spec.kind {
                    BrokerKind::RabbitMq => Product::RabbitMq,
                    BrokerKind::LavinMq => Product::LavinMq,
                };
                if product != named {
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
                    product,
                    version,
                    management,
                    tls: provider.tls(),
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

    async fn wait_ready(
        spec: &BrokerSpec,
        provider: &Provider,
        endpoint: &Endpoint,
        management: &Management,
        deadline: Duration,
    ) -> Result<(Overview, Option<ServerIdentity>), BrokerError> {
        let addr = endpoint.amqp_addr();
        let what = format!(
            "management GET {}/api/overview and AMQP on {addr} to answer",
            endpoint.http_base
        );
        let outcome = wait_for(&what, deadline, || {
            let addr = &addr;
            async move {
                if let Some(dead) = provider.failure().await {
                    return Ok(Some(Err(dead)));
                }
                let overview = management.overview().await.map_err(|e| e.to_string())?;
                let identity = amqp_answers(addr)
                    .await
                    .map_err(|e| format!("management answers ({}), AMQP not yet: {e}", overview.label()))?;
                Ok(Some(Ok((overview, identity))))
            }
        })
        .await;
        match outcome {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(reason)) => Err(BrokerError::Died {
                spec: spec.label(),
                reason,
                log: provider.log_tail().await,
            }),
            Err(source) => Err(BrokerError::NotReady {
                spec: spec.label(),
                what: provider.describe(endpoint),
                source: Box::new(source),
                log: provider.log_tail().await,
            }),
        }
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

    /// Why this broker cannot be restarted by the suite, if it cannot.
    pub fn cannot_restart(&self) -> Option<&'static str> {
        self.spec.provider.cannot_restart()
    }

    /// Restarts the broker on its data ([`Broker::halt`], then [`Broker::resume`]); only the
    /// scenario that has the broker to itself may, from its vhost `vhost`. Returns how long the
    /// broker was away.
    pub async fn restart(&self, vhost: &str) -> Result<Duration, BrokerError> {
        let started = std::time::Instant::now();
        self.halt(vhost).await?;
        self.resume(vhost).await?;
        Ok(started.elapsed())
    }

    /// Stops the broker — the process node with SIGTERM, the container with `docker stop` — and
    /// keeps its data. Every connection into it breaks, so only the scenario that has the broker
    /// to itself may do this, from its vhost `vhost` ([`Broker::create_exclusive_vhost`]).
    pub async fn halt(&self, vhost: &str) -> Result<(), BrokerError> {
        self.check_exclusive(vhost)?;
        if self.down.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return Err(BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason: "the broker is already down".into(),
            });
        }
        tracing::info!(spec = %self.spec.label(), "stopping the broker (its data kept)");
        self.provider.halt(&self.spec).await
    }

    /// Starts the broker [`Broker::halt`] stopped — the same node on the same data dir and ports,
    /// the same container — and waits (scaled deadline) until management and AMQP answer again on
    /// the same addresses and `vhost` is still there.
    pub async fn resume(&self, vhost: &str) -> Result<(), BrokerError> {
        self.check_exclusive(vhost)?;
        if !self.down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason: "the broker is not down".into(),
            });
        }
        let started = std::time::Instant::now();
        self.provider.resume(&self.spec).await?;
        Broker::wait_ready(
            &self.spec,
            &self.provider,
            &self.endpoint,
            &self.management,
            RESTART_BOOT,
        )
        .await?;
        self.down.store(false, std::sync::atomic::Ordering::SeqCst);
        let vhosts = self.management.vhosts().await?;
        if !vhosts.iter().any(|v| v == vhost) {
            return Err(BrokerError::Died {
                spec: self.spec.label(),
                reason: format!("the broker came back without vhost {vhost}: its data was lost (vhosts: {vhosts:?})"),
                log: self.provider.log_tail().await,
            });
        }
        tracing::info!(spec = %self.spec.label(), took = ?started.elapsed(), "broker back");
        Ok(())
    }

    /// Whether the broker is stopped by [`Broker::halt`] and not yet back ([`Broker::resume`]).
    pub fn is_down(&self) -> bool {
        self.down.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn check_exclusive(&self, vhost: &str) -> Result<(), BrokerError> {
        if let Some(why) = self.cannot_restart() {
            return Err(BrokerError::CannotRestart {
                spec: self.spec.label(),
                reason: why.into(),
            });
        }
        let holder = self.users.exclusive();
        if holder.as_deref() != Some(vhost) {
            return Err(BrokerError::NotExclusive {
                spec: self.spec.label(),
                reason: format!(
                    "vhost {vhost} does not have the broker to itself (that is {holder:?}): stopping it would \
                     break other scenarios' connections; make the vhost with create_exclusive_vhost"
                ),
            });
        }
        Ok(())
    }

    /// `amqp://user:pass@host:port/<percent-encoded vhost>`.
    pub fn amqp_url(&self, vhost: &str) -> String {
        self.endpoint.amqp_url(vhost)
    }

    /// The `amqps://` listener, when the provider started one (RabbitMQ process and container).
    pub fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_ref()
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
    /// stopped and its data dir deleted. Nothing for the url provider.
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
    use rstest::rstest;

    #[rstest]
    #[case("rabbitmq", ProviderKind::Container, BrokerKind::RabbitMq)]
    #[case("lavinmq", ProviderKind::Container, BrokerKind::LavinMq)]
    #[case("container:rabbitmq", ProviderKind::Container, BrokerKind::RabbitMq)]
    #[case("container:lavinmq", ProviderKind::Container, BrokerKind::LavinMq)]
    #[case("process:rabbitmq", ProviderKind::Process, BrokerKind::RabbitMq)]
    #[case("url:rabbitmq", ProviderKind::Url, BrokerKind::RabbitMq)]
    #[case("url:lavinmq", ProviderKind::Url, BrokerKind::LavinMq)]
    #[case("  URL:LavinMQ ", ProviderKind::Url, BrokerKind::LavinMq)]
    fn specs_parse(#[case] s: &str, #[case] provider: ProviderKind, #[case] kind: BrokerKind) {
        assert_eq!(BrokerSpec::parse(s).expect("valid"), BrokerSpec { provider, kind });
    }

    #[rstest]
    #[case("container:rabbitmq")]
    #[case("process:rabbitmq")]
    #[case("url:lavinmq")]
    fn labels_round_trip(#[case] s: &str) {
        let spec: BrokerSpec = s.parse().expect("valid");
        assert_eq!(spec.label(), s);
        assert_eq!(spec.to_string(), s);
    }

    #[test]
    fn bare_names_get_the_container_label() {
        assert_eq!(
            BrokerSpec::parse("lavinmq").expect("valid").label(),
            "container:lavinmq"
        );
    }

    #[test]
    fn process_lavinmq_is_refused_with_a_way_out() {
        let err = BrokerSpec::parse("process:lavinmq").expect_err("no LavinMQ package");
        let text = err.to_string();
        assert!(
            text.contains("no Debian package") && text.contains("container:lavinmq") && text.contains("url:lavinmq"),
            "{text}"
        );
    }

    #[rstest]
    #[case("kafka")]
    #[case("vm:rabbitmq")]
    #[case("container:")]
    #[case(":rabbitmq")]
    #[case("")]
    fn bad_specs_are_refused(#[case] s: &str) {
        assert!(BrokerSpec::parse(s).is_err(), "{s:?}");
    }

    #[test]
    fn lists_parse_in_order() {
        let specs = BrokerSpec::parse_list("rabbitmq, process:rabbitmq,,url:lavinmq").expect("valid");
        let labels: Vec<String> = specs.iter().map(BrokerSpec::label).collect();
        assert_eq!(labels, ["container:rabbitmq", "process:rabbitmq", "url:lavinmq"]);
    }

    #[rstest]
    #[case("")]
    #[case(" , ")]
    #[case("rabbitmq,container:rabbitmq")]
    #[case("rabbitmq,process:lavinmq")]
    fn bad_lists_are_refused(#[case] s: &str) {
        assert!(BrokerSpec::parse_list(s).is_err(), "{s:?}");
    }

    #[test]
    fn kinds_display_lowercase() {
        assert_eq!(BrokerKind::RabbitMq.to_string(), "rabbitmq");
        assert_eq!(BrokerKind::LavinMq.to_string(), "lavinmq");
        assert_eq!(ProviderKind::Process.to_string(), "process");
    }

    #[test]
    fn only_restarting_scenarios_on_the_url_provider_cannot_run() {
        let url = BrokerSpec::parse("url:rabbitmq").expect("valid");
        let why = url.cannot_run(["CON-3", "serial", RESTART_TAG]).expect("left out");
        assert!(why.contains("url:") && why.contains(RESTART_TAG), "{why}");
        assert_eq!(url.cannot_run(["CON-3", "serial"]), None);
        for s in ["process:rabbitmq", "container:rabbitmq", "container:lavinmq"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run(["@broker-restart", "RPL-1"]), None, "{s}");
        }
    }

    #[test]
    fn tls_scenarios_need_a_listener_only_the_url_provider_may_lack() {
        for s in ["process:rabbitmq", "container:rabbitmq", "container:lavinmq"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run(["SEC-1", TLS_TAG]), None, "{s}");
        }
        let url = BrokerSpec::parse("url:lavinmq").expect("valid");
        let given = std::env::var(url::BROKER_AMQPS_URL_VAR).is_ok_and(|v| !v.trim().is_empty());
        match url.cannot_run(["SEC-1", "@broker-tls"]) {
            Some(why) => {
                assert!(!given);
                assert!(
                    why.contains(url::BROKER_AMQPS_URL_VAR) && why.contains(TLS_TAG),
                    "{why}"
                );
            }
            None => assert!(given, "no amqps listener was given, yet a TLS scenario would run"),
        }
        assert_eq!(url.cannot_run(["SEC-2"]), None);
    }

    /// Polls `f` until it is true (a short deadline: these are in-memory state changes).
    async fn soon(what: &str, f: impl Fn() -> bool) {
        wait_for(what, Duration::from_secs(5), || {
            let ok = f();
            async move { Ok(ok.then_some(())) }
        })
        .await
        .expect(what);
    }

    #[tokio::test]
    async fn an_exclusive_user_waits_for_the_others_and_holds_new_ones_back() {
        let users = std::sync::Arc::new(Users::default());
        users
            .reserve("c1", false, Duration::from_secs(5))
            .await
            .expect("shared");
        users
            .reserve("c2", false, Duration::from_secs(5))
            .await
            .expect("shared");
        let u = users.clone();
        let exclusive = tokio::spawn(async move { u.reserve("x", true, Duration::from_secs(10)).await });
        soon("the exclusive user to wait", || users.usage.borrow().waiting == 1).await;
        // A newcomer waits behind the exclusive user, which waits for c1 and c2.
        let u = users.clone();
        let newcomer = tokio::spawn(async move { u.reserve("c3", false, Duration::from_secs(10)).await });
        users.release("c1");
        assert!(!exclusive.is_finished(), "c2 still uses the broker");
        users.release("c2");
        exclusive.await.expect("joined").expect("exclusive");
        assert_eq!(users.exclusive().as_deref(), Some("x"));
        assert_eq!(users.others("x"), Vec::<String>::new());
        assert!(!newcomer.is_finished(), "the newcomer must wait while x has the broker");
        users.release("x");
        newcomer.await.expect("joined").expect("shared again");
        assert_eq!(users.exclusive(), None);
        assert_eq!(users.others("x"), vec!["c3".to_string()]);
    }

    #[tokio::test]
    async fn a_wait_for_the_broker_alone_ends_at_its_deadline_and_says_who_held_it() {
        let users = Users::default();
        users
            .reserve("busy", false, Duration::from_secs(5))
            .await
            .expect("shared");
        let err = users
            .reserve("x", true, Duration::from_millis(50))
            .await
            .expect_err("busy holds the broker");
        assert!(err.contains("busy"), "{err}");
        // Given up: it no longer holds newcomers back.
        users
            .reserve("c", false, Duration::from_millis(50))
            .await
            .expect("shared");
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }

    #[tokio::test]
    async fn amqp_probe_rejects_a_listener_that_is_not_amqp() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            if let Ok((mut s, _)) = listener.accept().await {
                let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
            }
        });
        let err = amqp_answers(&addr).await.expect_err("not AMQP");
        assert!(err.contains("frame type"), "{err}");
    }

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

    /// A durable queue with one persistent message survives a restart; the addresses stay the same.
    /// Run with `cargo test -p fleet-conformance --lib -- --ignored broker_restart --nocapture`.
    async fn restart_keeps_data(spec: BrokerSpec, image: Option<String>) {
        use lapin::options::{BasicPublishOptions, QueueDeclareOptions};
        use lapin::types::FieldTable;
        use lapin::{BasicProperties, Connection, ConnectionProperties};

        let broker = Broker::start_with_image(&spec, image).await.expect("broker starts");
        let before = broker.endpoint().clone();
        let vhost = broker.create_exclusive_vhost().await.expect("vhost");
        let conn = Connection::connect(&broker.amqp_url(&vhost), ConnectionProperties::default())
            .await
            .expect("AMQP connection");
        let channel = conn.create_channel().await.expect("channel");
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .queue_declare("kept".into(), durable, FieldTable::default())
            .await
            .expect("declare");
        for (body, mode) in [(&b"persistent"[..], 2), (&b"transient"[..], 1)] {
            channel
                .basic_publish(
                    "".into(),
                    "kept".into(),
                    BasicPublishOptions::default(),
                    body,
                    BasicProperties::default().with_delivery_mode(mode),
                )
                .await
                .expect("publish")
                .await
                .expect("publish sent");
        }
        let took = broker.restart(&vhost).await.expect("restart");
        assert_eq!(broker.endpoint(), &before, "the addresses must not change");
        let conn = Connection::connect(&broker.amqp_url(&vhost), ConnectionProperties::default())
            .await
            .expect("AMQP connection after the restart");
        let channel = conn.create_channel().await.expect("channel");
        let q = channel
            .queue_declare(
                "kept".into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .expect("the durable queue survived");
        assert_eq!(
            q.message_count(),
            1,
            "the persistent message survives, the transient one not"
        );
        let _ = conn.close(200, "bye".into()).await;
        broker.delete_vhost(&vhost).await.expect("delete vhost");
        eprintln!("{}: restarted in {took:.1?}", spec.label());
        broker.stop().await.expect("stop");
    }

    #[tokio::test]
    #[ignore = "starts a real rabbitmq-server process; needs the Debian package"]
    async fn broker_restart_process_rabbitmq() {
        restart_keeps_data(BrokerSpec::parse("process:rabbitmq").expect("valid"), None).await;
    }

    #[tokio::test]
    #[ignore = "starts a real broker container; needs docker and a local RabbitMQ image"]
    async fn broker_restart_container_rabbitmq() {
        let image = std::env::var(container::RABBITMQ_IMAGE_VAR)
            .unwrap_or_else(|_| container::LOCAL_RABBITMQ_IMAGE.to_string());
        restart_keeps_data(BrokerSpec::parse("container:rabbitmq").expect("valid"), Some(image)).await;
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
