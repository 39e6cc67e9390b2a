//! The container provider: a throwaway broker in docker, through testcontainers.
//!
//! Exists because a container is the one way to run both RabbitMQ and LavinMQ the same way on any
//! machine with docker. The image is taken as found locally (testcontainers pulls only when it is
//! missing); on machines without a registry, `scripts/setup` builds `fleet-rabbitmq:3.10-debian`
//! from Debian packages and `FLEET_RABBITMQ_IMAGE` names it. Ports are published on 127.0.0.1
//! only, on free host ports the suite picks and pins: docker would pick new ones when the container
//! is started again, and a restart ([`RunningContainer::halt`], `docker stop`, then
//! [`RunningContainer::resume`], `docker start` of the same container, its data kept in the
//! container's filesystem) must leave every URL handed out to gateways valid.

use std::time::Duration;

use testcontainers::bollard::models::{HostConfig, PortBinding};
use testcontainers::core::IntoContainerPort;
use testcontainers::core::error::ClientError;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt, TestcontainersError};

use super::error::BrokerError;
use super::own_nodes::{QUORUM_TICK_MS, RETENTION_POLICIES, tail};
use super::spec::BrokerKind;
use super::tls_listener::TlsListener;
use super::url::Endpoint;

/// Environment variable naming the RabbitMQ image.
pub const RABBITMQ_IMAGE_VAR: &str = "FLEET_RABBITMQ_IMAGE";
/// Environment variable naming the LavinMQ image.
pub const LAVINMQ_IMAGE_VAR: &str = "FLEET_LAVINMQ_IMAGE";
/// The official RabbitMQ image, the default where a registry is reachable.
pub const DEFAULT_RABBITMQ_IMAGE: &str = "rabbitmq:3.13-management";
/// The official LavinMQ image.
pub const DEFAULT_LAVINMQ_IMAGE: &str = "cloudamqp/lavinmq:2.5";
/// The image `scripts/setup` builds from Debian packages.
pub const LOCAL_RABBITMQ_IMAGE: &str = "fleet-rabbitmq:3.10-debian";

pub(crate) const AMQP_PORT: u16 = 5672;
pub(crate) const HTTP_PORT: u16 = 15672;

/// The image for a broker kind: the environment's choice or the official image.
pub fn image_for(kind: BrokerKind) -> String {
    let (var, default) = match kind {
        BrokerKind::RabbitMq | BrokerKind::RabbitMqCluster => (RABBITMQ_IMAGE_VAR, DEFAULT_RABBITMQ_IMAGE),
        BrokerKind::LavinMq => (LAVINMQ_IMAGE_VAR, DEFAULT_LAVINMQ_IMAGE),
    };
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// Splits `repo[:tag]` into name and tag (default `latest`); a `:` inside a registry host's
/// `host:port/` prefix is not a tag separator.
pub fn split_image(image: &str) -> (String, String) {
    let image = image.trim();
    let last_segment_start = image.rfind('/').map_or(0, |i| i + 1);
    match image[last_segment_start..].rfind(':') {
        Some(i) => {
            let at = last_segment_start + i;
            (image[..at].to_string(), image[at + 1..].to_string())
        }
        None => (image.to_string(), "latest".to_string()),
    }
}

/// Extra Erlang arguments for RabbitMQ containers: queue statistics every 0.5 s and management
/// samples every second (instead of every 5 s), so queue depths show in the management API
/// within about a second. `RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS` is read by the rabbitmq-server
/// script itself, so every RabbitMQ image honours it; the script splits it on blanks, hence
/// terms without spaces.
pub fn rabbitmq_erl_args() -> String {
    let policies = RETENTION_POLICIES;
    let tick = QUORUM_TICK_MS;
    format!(
        "-rabbit collect_statistics_interval 500 \
         -rabbit quorum_tick_interval {tick} \
         -rabbitmq_management sample_retention_policies {policies} \
         -rabbitmq_management_agent sample_retention_policies {policies}"
    )
}

/// What to do when the image is not there.
pub(crate) fn missing_image_hint(kind: BrokerKind) -> String {
    match kind {
        BrokerKind::RabbitMq | BrokerKind::RabbitMqCluster => format!(
            "run scripts/setup to build the image {LOCAL_RABBITMQ_IMAGE} from Debian packages and set \
             {RABBITMQ_IMAGE_VAR}={LOCAL_RABBITMQ_IMAGE}, or set {RABBITMQ_IMAGE_VAR} to another local \
             RabbitMQ image (or use the broker process:{kind})"
        ),
        BrokerKind::LavinMq => format!(
            "set {LAVINMQ_IMAGE_VAR} to a LavinMQ image present locally, or run LavinMQ yourself and \
             use the broker url:lavinmq with FLEET_BROKER_URL and FLEET_BROKER_HTTP"
        ),
    }
}

/// A broker container this run started.
pub(crate) struct RunningContainer {
    container: ContainerAsync<GenericImage>,
    image: String,
    endpoint: Endpoint,
    /// The management API's pinned host port (the AMQP one is in `endpoint`).
    http_port: u16,
    /// The `amqps://` listener (SEC-1); its certificates live in `tls.files.dir`.
    tls: Option<TlsListener>,
    /// The container and its TLS dir in the cleanup registry, for a run that ends by a signal or
    /// a panic (forgotten once [`RunningContainer::stop`] removed them).
    _cleanup: Vec<crate::cleanup::Registration>,
}

pub(crate) const AMQPS_PORT: u16 = 5671;
/// Where the TLS files go inside a RabbitMQ container; `conf.d` is read by RabbitMQ ≥ 3.9
/// after `rabbitmq.conf`, in the Debian-built and the official images alike.
pub(crate) const TLS_DIR_IN_CONTAINER: &str = "/etc/rabbitmq/fleet-tls";
const TLS_CONF_IN_CONTAINER: &str = "/etc/rabbitmq/conf.d/90-fleet-tls.conf";
/// Where the TLS files go inside a LavinMQ container (named on its command line: the official
/// image's entrypoint is `lavinmq -b 0.0.0.0 --guest-only-loopback=false`, and arguments given to
/// the container are appended to it).
const LAVINMQ_TLS_DIR_IN_CONTAINER: &str = "/etc/lavinmq/fleet-tls";

/// The arguments that make LavinMQ serve AMQPS on [`AMQPS_PORT`] with the files in `dir`
/// (`--amqps-port`, `--cert`, `--key`: LavinMQ's command line since 1.0).
fn lavinmq_tls_args(dir: &str) -> Vec<String> {
    vec![
        format!("--amqps-port={AMQPS_PORT}"),
        "--cert".into(),
        format!("{dir}/server.pem"),
        "--key".into(),
        format!("{dir}/server.key"),
    ]
}

/// Certificates for a broker container, made on the host; `None` (logged) when that fails.
pub(crate) fn container_tls_files() -> Option<crate::tls::TlsFiles> {
    let dir = std::env::temp_dir().join(format!("fleet-broker-tls-{}", uuid::Uuid::new_v4().simple()));
    match crate::tls::generate(&dir, &[]) {
        Ok(f) => {
            // Throwaway: a later run deletes it if this one dies before `stop`.
            if let Err(e) = crate::cleanup::Marker::mine().removing_dir().write(&dir, "tls") {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot mark the TLS dir for later sweeps");
            }
            Some(f)
        }
        Err(e) => {
            tracing::warn!(error = %e, "no TLS listener on this broker: amqps scenarios will fail");
            let _ = std::fs::remove_dir_all(&dir);
            None
        }
    }
}

/// Free loopback ports for AMQP, management and AMQPS. They are released before docker binds them;
/// a clash in between fails the container's start, which [`start`] then retries on new ports.
fn free_host_ports() -> Result<[u16; 3], BrokerError> {
    crate::ports::free_ports().map_err(|source| BrokerError::Io {
        context: "finding free loopback ports".into(),
        source,
    })
}

/// Whether a container start failed because a host port was taken meanwhile.
fn port_clash(e: &TestcontainersError) -> bool {
    port_clash_text(&e.to_string())
}

/// Whether docker's error `text` says a host port was taken.
pub(crate) fn port_clash_text(text: &str) -> bool {
    text.contains("port is already allocated") || text.contains("address already in use")
}

/// Starts a container of `image` on pinned host ports and checks them; readiness is the caller's.
pub(crate) async fn start(kind: BrokerKind, image: &str) -> Result<RunningContainer, BrokerError> {
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        let ports = free_host_ports()?;
        match start_on(kind, image, ports).await {
            Err(BrokerError::Docker { source, .. }) if attempt < ATTEMPTS && port_clash(&source) => {
                tracing::warn!(error = %source, attempt, "a host port was taken before docker bound it: new ports");
                attempt += 1;
            }
            other => return other,
        }
    }
}

async fn start_on(kind: BrokerKind, image: &str, host_ports: [u16; 3]) -> Result<RunningContainer, BrokerError> {
    let [amqp_host_port, http_host_port, amqps_host_port] = host_ports;
    let (name, tag) = split_image(image);
    let mut request = GenericImage::new(name, tag)
        .with_exposed_port(AMQP_PORT.tcp())
        .with_exposed_port(HTTP_PORT.tcp())
        .with_exposed_port(AMQPS_PORT.tcp())
        .with_hostname(format!("fleet-{kind}"))
        .with_label("fleet-conformance.role", "broker")
        // Who started it: a later run removes it if this process died without doing so.
        .with_label(crate::cleanup::CONTAINER_LABEL, "1")
        .with_label(crate::cleanup::CONTAINER_OWNER_LABEL, crate::cleanup::owner_id())
        .with_startup_timeout(crate::timing::scaled(Duration::from_secs(60)))
        .with_host_config_modifier(move |host: &mut HostConfig| {
            // Loopback only, on the pinned ports, instead of every interface.
            let loopback = |port: u16| {
                Some(vec![PortBinding {
                    host_ip: Some("127.0.0.1".into()),
                    host_port: Some(port.to_string()),
                }])
            };
            host.publish_all_ports = Some(false);
            host.port_bindings = Some(
                [
                    (format!("{AMQP_PORT}/tcp"), loopback(amqp_host_port)),
                    (format!("{HTTP_PORT}/tcp"), loopback(http_host_port)),
                    (format!("{AMQPS_PORT}/tcp"), loopback(amqps_host_port)),
                ]
                .into_iter()
                .collect(),
            );
        });
    let tls_files = container_tls_files();
    if kind == BrokerKind::LavinMq
        && let Some(files) = &tls_files
    {
        let inside = |f: &str| format!("{LAVINMQ_TLS_DIR_IN_CONTAINER}/{f}");
        request = request
            .with_copy_to(inside("server.pem"), files.server_cert.clone())
            .with_copy_to(inside("server.key"), files.server_key.clone());
    }
    let request = if kind == BrokerKind::LavinMq && tls_files.is_some() {
        request.with_cmd(lavinmq_tls_args(LAVINMQ_TLS_DIR_IN_CONTAINER))
    } else {
        request
    };
    let mut request = request;
    if kind == BrokerKind::RabbitMq {
        request = request.with_env_var("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", rabbitmq_erl_args());
        if let Some(files) = &tls_files {
            let inside = |f: &str| format!("{TLS_DIR_IN_CONTAINER}/{f}");
            let conf = super::process::tls_conf(
                "0.0.0.0",
                AMQPS_PORT,
                &inside("ca.pem"),
                &inside("server.pem"),
                &inside("server.key"),
            );
            request = request
                .with_copy_to(TLS_CONF_IN_CONTAINER, conf.into_bytes())
                .with_copy_to(inside("ca.pem"), files.ca_cert.clone())
                .with_copy_to(inside("server.pem"), files.server_cert.clone())
                .with_copy_to(inside("server.key"), files.server_key.clone());
        }
    }
    tracing::info!(%image, %kind, "starting broker container");
    // From here a signal must ask docker for this process's containers: the one being started
    // has no id to register yet.
    crate::cleanup::note_docker_use();
    let container = request.start().await.map_err(|e| match e {
        TestcontainersError::Client(ClientError::PullImage { .. }) => BrokerError::Unavailable {
            provider: format!("container:{kind}"),
            reason: format!("the image {image} is not present locally and could not be pulled ({e})"),
            hint: missing_image_hint(kind),
        },
        TestcontainersError::Client(ClientError::Init(_)) => BrokerError::Unavailable {
            provider: format!("container:{kind}"),
            reason: format!("cannot reach docker ({e})"),
            hint: "start docker (and make sure this user may use it), or use the broker process:rabbitmq".into(),
        },
        source => BrokerError::Docker {
            context: format!("starting a container of {image}"),
            source: Box::new(source),
        },
    })?;
    let registration = crate::cleanup::register(crate::cleanup::Action::RemoveContainer(container.id().to_string()));
    let port = |p: u16| {
        let container = &container;
        async move {
            container
                .get_host_port_ipv4(p.tcp())
                .await
                .map_err(|source| BrokerError::Docker {
                    context: format!("reading the host port of {p}/tcp"),
                    source: Box::new(source),
                })
        }
    };
    let ports = async {
        let got = (port(AMQP_PORT).await?, port(HTTP_PORT).await?);
        if got != (amqp_host_port, http_host_port) {
            return Err(BrokerError::Unavailable {
                provider: format!("container:{kind}"),
                reason: format!(
                    "docker published AMQP and management on host ports {got:?}, not the pinned \
                     ({amqp_host_port}, {http_host_port})"
                ),
                hint: "check the docker daemon's port publishing (userland proxy, rootless mode)".into(),
            });
        }
        Ok(got)
    }
    .await;
    let (amqp_port, http_port) = match ports {
        Ok(p) => p,
        Err(e) => {
            if let Err(rm) = container.rm().await {
                tracing::warn!(error = %rm, "could not remove the broker container");
            }
            return Err(e);
        }
    };
    tracing::info!(id = %container.id(), amqp_port, http_port, "broker container started");
    let endpoint = Endpoint {
        amqp_host: "127.0.0.1".into(),
        amqp_port,
        http_base: format!("http://127.0.0.1:{http_port}"),
        user: "guest".into(),
        password: "guest".into(),
    };
    let tls = match tls_files {
        Some(files) => match container.get_host_port_ipv4(AMQPS_PORT.tcp()).await {
            Ok(port) => Some(TlsListener::generated("127.0.0.1", port, files)),
            Err(e) => {
                tracing::warn!(error = %e, "no host port for the TLS listener");
                let _ = std::fs::remove_dir_all(&files.dir);
                None
            }
        },
        None => None,
    };
    let mut cleanup = vec![registration];
    if let Some(files) = tls.as_ref().and_then(|t| t.files.as_ref()) {
        cleanup.push(crate::cleanup::register(crate::cleanup::Action::RemoveDir(
            files.dir.clone(),
        )));
    }
    Ok(RunningContainer {
        container,
        image: image.to_string(),
        endpoint,
        http_port,
        tls,
        _cleanup: cleanup,
    })
}

impl RunningContainer {
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub(crate) fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_ref()
    }

    pub(crate) fn describe(&self) -> String {
        format!("container {} of {}", short_id(self.container.id()), self.image)
    }

    /// `Some(reason)` once the container is no longer running.
    pub(crate) async fn failure(&self) -> Option<String> {
        match self.container.is_running().await {
            Ok(true) => None,
            Ok(false) => {
                let code = self.container.exit_code().await.ok().flatten();
                Some(format!("{} exited (exit code {code:?})", self.describe()))
            }
            // Docker hiccups are not the broker's death: keep polling.
            Err(_) => None,
        }
    }

    /// The last lines the container wrote, for boot failures.
    pub(crate) async fn log_tail(&self, lines: usize) -> String {
        let mut out = self.container.stdout_to_vec().await.unwrap_or_default();
        out.extend(self.container.stderr_to_vec().await.unwrap_or_default());
        tail(&String::from_utf8_lossy(&out), lines)
    }

    /// `docker stop` (SIGTERM: the broker shuts down cleanly; SIGKILL after 30 s, scaled). The
    /// container and its data stay for [`RunningContainer::resume`].
    pub(crate) async fn halt(&self) -> Result<(), BrokerError> {
        let what = self.describe();
        let started = std::time::Instant::now();
        let grace = i32::try_from(crate::timing::scaled(Duration::from_secs(30)).as_secs()).unwrap_or(30);
        self.container
            .stop_with_timeout(Some(grace))
            .await
            .map_err(|source| BrokerError::Docker {
                context: format!("stopping the {what}"),
                source: Box::new(source),
            })?;
        tracing::info!(%what, took = ?started.elapsed(), "broker container stopped");
        Ok(())
    }

    /// `docker start` of the container [`RunningContainer::halt`] stopped: same filesystem (the
    /// broker's data), same hostname (its node name), same pinned host ports — checked, since
    /// gateways hold URLs with them. Readiness is the caller's.
    pub(crate) async fn resume(&self) -> Result<(), BrokerError> {
        let what = self.describe();
        let docker = |context: String| {
            move |source| BrokerError::Docker {
                context,
                source: Box::new(source),
            }
        };
        self.container
            .start()
            .await
            .map_err(docker(format!("starting the {what} again")))?;
        for (inside, pinned) in [(AMQP_PORT, self.endpoint.amqp_port), (HTTP_PORT, self.http_port)] {
            let now = self
                .container
                .get_host_port_ipv4(inside.tcp())
                .await
                .map_err(docker(format!(
                    "reading the host port of {inside}/tcp after the restart"
                )))?;
            if now != pinned {
                return Err(BrokerError::Unavailable {
                    provider: what.clone(),
                    reason: format!("after the restart {inside}/tcp is published on {now}, not on {pinned}"),
                    hint: "check the docker daemon's port publishing (userland proxy, rootless mode)".into(),
                });
            }
        }
        Ok(())
    }

    /// Removes the container (killing the broker).
    pub(crate) async fn stop(self) -> Result<(), BrokerError> {
        let what = self.describe();
        if let Some(files) = self.tls.as_ref().and_then(|t| t.files.as_ref()) {
            let _ = std::fs::remove_dir_all(&files.dir);
        }
        self.container.rm().await.map_err(|source| BrokerError::Docker {
            context: format!("removing the {what}"),
            source: Box::new(source),
        })?;
        tracing::info!(%what, "broker container removed");
        Ok(())
    }
}

pub(crate) fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("rabbitmq:3.13-management", "rabbitmq", "3.13-management")]
    #[case("fleet-rabbitmq:3.10-debian", "fleet-rabbitmq", "3.10-debian")]
    #[case("cloudamqp/lavinmq:2.5", "cloudamqp/lavinmq", "2.5")]
    #[case("cloudamqp/lavinmq", "cloudamqp/lavinmq", "latest")]
    #[case("registry.local:5000/team/rabbit", "registry.local:5000/team/rabbit", "latest")]
    #[case("registry.local:5000/team/rabbit:3", "registry.local:5000/team/rabbit", "3")]
    fn images_split_into_name_and_tag(#[case] image: &str, #[case] name: &str, #[case] tag: &str) {
        assert_eq!(split_image(image), (name.to_string(), tag.to_string()));
    }

    #[test]
    fn erl_args_are_blank_separated_terms_without_inner_blanks() {
        let args = rabbitmq_erl_args();
        let words: Vec<&str> = args.split_whitespace().collect();
        assert_eq!(words.len(), 12, "{args}");
        assert_eq!(&words[..3], ["-rabbit", "collect_statistics_interval", "500"]);
        assert_eq!(&words[3..6], ["-rabbit", "quorum_tick_interval", "1000"]);
        assert_eq!(words[8], RETENTION_POLICIES);
    }

    #[test]
    fn the_missing_image_hint_says_what_to_do() {
        let hint = missing_image_hint(BrokerKind::RabbitMq);
        assert!(
            hint.contains("scripts/setup") && hint.contains(LOCAL_RABBITMQ_IMAGE) && hint.contains(RABBITMQ_IMAGE_VAR)
        );
        assert!(missing_image_hint(BrokerKind::LavinMq).contains(LAVINMQ_IMAGE_VAR));
    }

    #[test]
    fn lavinmq_is_told_where_its_tls_listener_and_files_are() {
        let args = lavinmq_tls_args("/etc/lavinmq/fleet-tls");
        assert_eq!(
            args,
            [
                "--amqps-port=5671",
                "--cert",
                "/etc/lavinmq/fleet-tls/server.pem",
                "--key",
                "/etc/lavinmq/fleet-tls/server.key"
            ]
        );
    }
}
