//! The container provider: a throwaway broker in docker, driven through the docker CLI.
//!
//! Exists because a container is the one way to run both RabbitMQ and LavinMQ the same way on any
//! machine with docker. The image is taken as found locally and pulled only when it is missing;
//! on machines without a registry, `scripts/setup` builds `fleet-rabbitmq:3.10-debian` and
//! `fleet-rabbitmq:4.0-debian` from Debian packages, and a spec naming a version
//! (`container:rabbitmq@4.0`) or `FLEET_RABBITMQ_IMAGE` picks one. Ports are published on 127.0.0.1 only, on
//! free host ports the suite picks and pins: docker would pick new ones when the container is
//! started again, and a restart (`RunningContainer::halt`, `docker stop`, then
//! `RunningContainer::resume`, `docker start` of the same container, its data kept in the
//! container's filesystem) must leave every URL handed out to gateways valid.
//!
//! The container is made with `docker create`, gets its TLS files and config as a tar stream on
//! `docker cp -`'s stdin (nothing is bind-mounted: a runner that is itself a container, talking
//! to the host's docker, has no paths of its own the daemon could see), then `docker start`.
//! It is in the cleanup registry ([`crate::cleanup`]) by its full id from `docker create` on,
//! and carries the suite's owner labels, so a run that dies leaves nothing for long.

use std::time::Duration;

use tokio::io::AsyncWriteExt as _;

use super::error::{BrokerError, DockerEnd, DockerFailure};
use super::own_nodes::{RETENTION_POLICIES, at_rabbitmq_defaults, quorum_tick_ms, stats_interval_ms, tail};
use super::spec::{BrokerKind, BrokerSpec};
use super::tls_listener::TlsListener;
use super::url::Endpoint;
use crate::timing::scaled;

/// Environment variable naming the RabbitMQ image.
pub const RABBITMQ_IMAGE_VAR: &str = "FLEET_RABBITMQ_IMAGE";
/// Environment variable naming the LavinMQ image.
pub const LAVINMQ_IMAGE_VAR: &str = "FLEET_LAVINMQ_IMAGE";
/// The official RabbitMQ image, the default where a registry is reachable: the newest version the
/// suite proves (scripts/test runs the whole suite on 4.0).
pub const DEFAULT_RABBITMQ_IMAGE: &str = "rabbitmq:4.0-management";
/// The official LavinMQ image.
pub const DEFAULT_LAVINMQ_IMAGE: &str = "cloudamqp/lavinmq:2.5";
/// The image `scripts/setup` builds from Debian packages, of the version users run.
pub const LOCAL_RABBITMQ_IMAGE: &str = "fleet-rabbitmq:4.0-debian";

pub(crate) const AMQP_PORT: u16 = 5672;
pub(crate) const HTTP_PORT: u16 = 15672;

/// The image for a broker spec. A spec naming a version (`container:rabbitmq@4.0`) gets the
/// image `scripts/build-images` makes of it when this machine has it (`fleet-rabbitmq:4.0-debian`),
/// else the official one (`rabbitmq:4.0-management`, `cloudamqp/lavinmq:2.5`); without a version,
/// the environment's choice (`FLEET_RABBITMQ_IMAGE`, `FLEET_LAVINMQ_IMAGE`) or the official
/// default. Whichever it is, the broker must then report the named version
/// ([`super::Broker::start`]).
pub fn image_for(spec: &BrokerSpec) -> String {
    if let Some(v) = spec.version {
        return match spec.kind {
            BrokerKind::RabbitMq | BrokerKind::RabbitMqCluster => {
                let local = format!("fleet-rabbitmq:{v}-debian");
                if image_present(&local) {
                    local
                } else {
                    format!("rabbitmq:{v}-management")
                }
            }
            BrokerKind::LavinMq => format!("cloudamqp/lavinmq:{v}"),
        };
    }
    let (var, default) = match spec.kind {
        BrokerKind::RabbitMq | BrokerKind::RabbitMqCluster => (RABBITMQ_IMAGE_VAR, DEFAULT_RABBITMQ_IMAGE),
        BrokerKind::LavinMq => (LAVINMQ_IMAGE_VAR, DEFAULT_LAVINMQ_IMAGE),
    };
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| default.to_string())
}

/// Whether docker has `image` locally (a quick `docker image inspect`; no docker: no).
fn image_present(image: &str) -> bool {
    std::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", image])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Where a broker of the named version comes from, for a message about a mismatch.
pub(crate) fn version_hint(spec: &BrokerSpec) -> String {
    let v = spec.version.map(|v| v.to_string()).unwrap_or_default();
    match (spec.provider, spec.kind) {
        (super::ProviderKind::Container, BrokerKind::LavinMq) => format!("the image cloudamqp/lavinmq:{v}"),
        (super::ProviderKind::Container, _) => format!(
            "scripts/build-images --rabbitmq {v} builds fleet-rabbitmq:{v}-debian; elsewhere rabbitmq:{v}-management is pulled"
        ),
        (super::ProviderKind::Process, _) => {
            "the process provider runs the rabbitmq-server installed on this machine".into()
        }
        (super::ProviderKind::Url, _) => "the url provider attaches to FLEET_BROKER_URL as it is".into(),
    }
}

/// Extra Erlang arguments for RabbitMQ containers: queue statistics every 0.5 s and management
/// samples every second (instead of every 5 s), so queue depths show in the management API
/// within about a second. `RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS` is read by the rabbitmq-server
/// script itself, so every RabbitMQ image honours it; the script splits it on blanks, hence
/// terms without spaces.
///
/// After [`super::own_nodes::run_as_large_fleet`]: RabbitMQ's own intervals, written
/// out, and its default retention.
pub fn rabbitmq_erl_args() -> String {
    let policies = RETENTION_POLICIES;
    let (tick, stats) = (quorum_tick_ms(), stats_interval_ms());
    if at_rabbitmq_defaults() {
        return format!("-rabbit collect_statistics_interval {stats} -rabbit quorum_tick_interval {tick}");
    }
    format!(
        "-rabbit collect_statistics_interval {stats} \
         -rabbit quorum_tick_interval {tick} \
         -rabbitmq_management sample_retention_policies {policies} \
         -rabbitmq_management_agent sample_retention_policies {policies}"
    )
}

/// What to do when the image is not there.
pub(crate) fn missing_image_hint(kind: BrokerKind) -> String {
    match kind {
        BrokerKind::RabbitMq | BrokerKind::RabbitMqCluster => format!(
            "run scripts/setup to build the images fleet-rabbitmq:3.10-debian and {LOCAL_RABBITMQ_IMAGE} from \
             Debian packages and name a version (container:{kind}@4.0), or set {RABBITMQ_IMAGE_VAR} to another \
             local RabbitMQ image (or use the broker process:{kind})"
        ),
        BrokerKind::LavinMq => format!(
            "set {LAVINMQ_IMAGE_VAR} to a LavinMQ image present locally, or run LavinMQ yourself and \
             use the broker url:lavinmq with FLEET_BROKER_URL and FLEET_BROKER_HTTP"
        ),
    }
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

/// Nominal deadline of one `docker` command (inspect, create, cp, rm, logs).
const COMMAND: Duration = Duration::from_secs(90);
/// Nominal deadline of `docker start`: the container running, not the broker booted (that is the
/// caller's readiness wait, with its own deadline in `boot.rs`).
const STARTUP: Duration = Duration::from_secs(60);
/// Nominal deadline of pulling a missing image.
const PULL: Duration = Duration::from_secs(300);
/// Nominal grace of `docker stop` before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Free loopback ports for AMQP, management and AMQPS. They are released before docker binds them;
/// a clash in between fails the container's start, which [`start`] then retries on new ports.
fn free_host_ports() -> Result<[u16; 3], BrokerError> {
    crate::ports::free_ports().map_err(|source| BrokerError::Io {
        context: "finding free loopback ports".into(),
        source,
    })
}

/// Whether docker's error `text` says a host port was taken.
pub(crate) fn port_clash_text(text: &str) -> bool {
    text.contains("port is already allocated") || text.contains("address already in use")
}

/// What a `docker` command that succeeded wrote.
struct Ran {
    stdout: String,
    stderr: String,
}

/// `docker <args>` rendered for an error: whole when short, else its subcommand and its last
/// argument (the image or the container).
fn render(args: &[&str]) -> String {
    const SHORT: usize = 100;
    let whole = format!("docker {}", args.join(" "));
    match args {
        [first, .., last] if whole.chars().count() > SHORT => format!("docker {first} … {last}"),
        _ => whole,
    }
}

/// Runs `docker <args>` to its end within `limit` (killed past it), with `input` on its stdin;
/// what it wrote when it succeeds, else how it failed and its stderr.
async fn docker_with(args: &[&str], input: Option<Vec<u8>>, limit: Duration) -> Result<Ran, DockerFailure> {
    let fail = |end: DockerEnd, stderr: &[u8]| DockerFailure {
        command: render(args),
        end,
        stderr: String::from_utf8_lossy(stderr).trim().to_string(),
    };
    let mut cmd = tokio::process::Command::new("docker");
    cmd.args(args)
        .stdin(if input.is_some() {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| fail(DockerEnd::NotRun(e.to_string()), b""))?;
    let pipe = child.stdin.take();
    let run = async {
        let feed = async {
            if let (Some(mut pipe), Some(bytes)) = (pipe, input) {
                // A docker that stops reading has failed: its exit status and stderr say why.
                let _ = pipe.write_all(&bytes).await;
                // Dropped here: end of input.
            }
        };
        let (_, out) = tokio::join!(feed, child.wait_with_output());
        out
    };
    let out = match tokio::time::timeout(limit, run).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(fail(DockerEnd::NotRun(e.to_string()), b"")),
        Err(_) => return Err(fail(DockerEnd::TimedOut(limit), b"")),
    };
    if !out.status.success() {
        return Err(fail(DockerEnd::Exit(out.status.code()), &out.stderr));
    }
    Ok(Ran {
        stdout: String::from_utf8_lossy(&out.stdout).trim().to_string(),
        stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

/// Runs `docker <args>` within the scaled [`COMMAND`] deadline; its output, trimmed.
async fn docker(args: &[&str]) -> Result<String, DockerFailure> {
    docker_with(args, None, scaled(COMMAND)).await.map(|r| r.stdout)
}

/// `BrokerError::Docker` saying what was being done.
fn docker_err(context: impl Into<String>) -> impl FnOnce(DockerFailure) -> BrokerError {
    let context = context.into();
    move |source| BrokerError::Docker {
        context,
        source: Box::new(source),
    }
}

/// Checks docker answers and `image` is present, pulling it when it is missing.
async fn ensure_image(kind: BrokerKind, image: &str) -> Result<(), BrokerError> {
    let provider = format!("container:{kind}");
    if let Err(e) = docker(&["version", "--format", "{{.Server.Version}}"]).await {
        return Err(BrokerError::Unavailable {
            provider,
            reason: format!("cannot reach docker ({e})"),
            hint: "start docker (and make sure this user may use it), or use the broker process:rabbitmq".into(),
        });
    }
    if docker(&["image", "inspect", "--format", "{{.Id}}", image])
        .await
        .is_ok()
    {
        return Ok(());
    }
    tracing::info!(%image, "the broker image is not present locally: pulling it");
    match docker_with(&["pull", "--quiet", image], None, scaled(PULL)).await {
        Ok(_) => Ok(()),
        Err(e) => Err(BrokerError::Unavailable {
            provider,
            reason: format!("the image {image} is not present locally and could not be pulled ({e})"),
            hint: missing_image_hint(kind),
        }),
    }
}

/// A file to put into the container before it starts: its absolute path there and its content.
struct FileIn {
    path: String,
    content: Vec<u8>,
}

/// The files a broker container gets before it starts (its TLS certificates and, for
/// RabbitMQ, the config of its TLS listener), and the arguments appended to the image's
/// command (LavinMQ's TLS options).
fn tls_setup(kind: BrokerKind, files: &crate::tls::TlsFiles) -> Result<(Vec<FileIn>, Vec<String>), BrokerError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|source| BrokerError::Io {
            context: format!("reading {}", p.display()),
            source,
        })
    };
    if kind == BrokerKind::LavinMq {
        let inside = |f: &str| format!("{LAVINMQ_TLS_DIR_IN_CONTAINER}/{f}");
        let put = vec![
            FileIn {
                path: inside("server.pem"),
                content: read(&files.server_cert)?,
            },
            FileIn {
                path: inside("server.key"),
                content: read(&files.server_key)?,
            },
        ];
        return Ok((put, lavinmq_tls_args(LAVINMQ_TLS_DIR_IN_CONTAINER)));
    }
    let inside = |f: &str| format!("{TLS_DIR_IN_CONTAINER}/{f}");
    let conf = super::process::tls_conf(
        "0.0.0.0",
        AMQPS_PORT,
        &inside("ca.pem"),
        &inside("server.pem"),
        &inside("server.key"),
    );
    let put = vec![
        FileIn {
            path: TLS_CONF_IN_CONTAINER.into(),
            content: conf.into_bytes(),
        },
        FileIn {
            path: inside("ca.pem"),
            content: read(&files.ca_cert)?,
        },
        FileIn {
            path: inside("server.pem"),
            content: read(&files.server_cert)?,
        },
        FileIn {
            path: inside("server.key"),
            content: read(&files.server_key)?,
        },
    ];
    Ok((put, Vec::new()))
}

/// A tar archive (ustar) of `files`, regular files of mode 0644 owned by root, named relative to
/// `/`: what `docker cp - <container>:/` unpacks (making their directories) before the start.
fn tar(files: &[FileIn]) -> Result<Vec<u8>, String> {
    const BLOCK: usize = 512;
    let octal = |field: &mut [u8], value: u64| {
        let digits = field.len() - 1;
        let text = format!("{value:0digits$o}");
        field[..digits].copy_from_slice(&text.as_bytes()[text.len() - digits..]);
        field[digits] = 0;
    };
    let mtime = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut out = Vec::new();
    for f in files {
        let name = f.path.trim_start_matches('/');
        if name.is_empty() || name.len() >= 100 {
            return Err(format!("{}: no name for a tar header of up to 99 bytes", f.path));
        }
        let size = f.content.len() as u64;
        if size >= 8u64.pow(11) {
            return Err(format!("{}: too large for a tar header", f.path));
        }
        let mut header = [0u8; BLOCK];
        header[..name.len()].copy_from_slice(name.as_bytes());
        octal(&mut header[100..108], 0o644);
        octal(&mut header[108..116], 0);
        octal(&mut header[116..124], 0);
        octal(&mut header[124..136], size);
        octal(&mut header[136..148], mtime.min(8u64.pow(11) - 1));
        header[156] = b'0';
        header[257..263].copy_from_slice(b"ustar\0");
        header[263..265].copy_from_slice(b"00");
        // The checksum is the byte sum with its own field taken as blanks.
        header[148..156].copy_from_slice(b"        ");
        let sum: u64 = header.iter().map(|&b| u64::from(b)).sum();
        let text = format!("{sum:06o}\0 ");
        header[148..156].copy_from_slice(text.as_bytes());
        out.extend_from_slice(&header);
        out.extend_from_slice(&f.content);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
    }
    // Two empty blocks end the archive.
    out.resize(out.len() + 2 * BLOCK, 0);
    Ok(out)
}

/// A container this run created, in the cleanup registry by its full id until it is removed:
/// by [`Container::remove`], or at once when dropped without (a failed start, a panicking test).
struct Container {
    id: String,
    removed: bool,
    _registration: crate::cleanup::Registration,
}

impl Container {
    fn short_id(&self) -> &str {
        short_id(&self.id)
    }

    /// The container's published ports (`docker inspect`'s `NetworkSettings.Ports`).
    async fn published(&self) -> Result<serde_json::Value, BrokerError> {
        let what = format!("reading the published ports of container {}", self.short_id());
        let text = docker(&["inspect", "--format", "{{json .NetworkSettings.Ports}}", &self.id])
            .await
            .map_err(docker_err(what.clone()))?;
        serde_json::from_str(&text).map_err(|e| BrokerError::Io {
            context: what,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{e}: {text}")),
        })
    }

    /// `docker rm -f -v` (the broker images declare data volumes).
    async fn remove(mut self) -> Result<(), BrokerError> {
        let context = format!("removing container {}", self.short_id());
        docker(&["rm", "-f", "-v", &self.id])
            .await
            .map_err(docker_err(context))?;
        self.removed = true;
        Ok(())
    }

    /// [`Container::remove`] after a failed start: a failure to remove is only logged (the
    /// start's error is the one to report; a drop retries).
    async fn discard(self) {
        if let Err(e) = self.remove().await {
            tracing::warn!(error = %e, "could not remove the broker container");
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        if !self.removed {
            crate::cleanup::undo(&[crate::cleanup::Action::RemoveContainer(self.id.clone())]);
        }
    }
}

/// The host port `inside/tcp` is published on, on an IPv4 address, in `docker inspect`'s
/// `NetworkSettings.Ports` (`{"5672/tcp": [{"HostIp": "127.0.0.1", "HostPort": "20001"}]}`).
fn host_port(published: &serde_json::Value, inside: u16) -> Option<u16> {
    published
        .get(format!("{inside}/tcp"))?
        .as_array()?
        .iter()
        .filter(|b| {
            b.get("HostIp")
                .and_then(serde_json::Value::as_str)
                .is_none_or(|ip| ip.is_empty() || ip.parse::<std::net::Ipv4Addr>().is_ok())
        })
        .find_map(|b| b.get("HostPort")?.as_str()?.parse().ok())
}

/// `docker create` of a broker container of `image` on `host_ports` (AMQP, management, AMQPS on
/// 127.0.0.1), registered for cleanup at once, with `files` copied in; not started.
async fn create(
    kind: BrokerKind,
    image: &str,
    host_ports: [u16; 3],
    files: &[FileIn],
    cmd: &[String],
) -> Result<Container, BrokerError> {
    let [amqp, http, amqps] = host_ports;
    let publish = |host: u16, inside: u16| format!("127.0.0.1:{host}:{inside}");
    let mut args: Vec<String> = vec![
        "create".into(),
        "--hostname".into(),
        format!("fleet-{kind}"),
        "--label".into(),
        "fleet-conformance.role=broker".into(),
        // Who started it: a later run removes it if this process died without doing so.
        "--label".into(),
        format!("{}=1", crate::cleanup::CONTAINER_LABEL),
        "--label".into(),
        format!(
            "{}={}",
            crate::cleanup::CONTAINER_OWNER_LABEL,
            crate::cleanup::owner_id()
        ),
        // Present: ensure_image made sure of it.
        "--pull".into(),
        "never".into(),
        // Loopback only, on the pinned ports, instead of every interface.
        "-p".into(),
        publish(amqp, AMQP_PORT),
        "-p".into(),
        publish(http, HTTP_PORT),
        "-p".into(),
        publish(amqps, AMQPS_PORT),
    ];
    if kind == BrokerKind::RabbitMq {
        args.extend([
            "-e".into(),
            format!("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS={}", rabbitmq_erl_args()),
        ]);
    }
    args.push(image.to_string());
    args.extend(cmd.iter().cloned());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let id = docker(&args)
        .await
        .map_err(docker_err(format!("creating a container of {image}")))?;
    let container = Container {
        _registration: crate::cleanup::register(crate::cleanup::Action::RemoveContainer(id.clone())),
        id,
        removed: false,
    };
    if !files.is_empty() {
        let archive = tar(files).map_err(|reason| BrokerError::Io {
            context: "packing the TLS files for the broker container".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, reason),
        })?;
        let target = format!("{}:/", container.id);
        let copied = docker_with(&["cp", "-", &target], Some(archive), scaled(COMMAND)).await;
        if let Err(e) = copied {
            let context = format!("copying the TLS files into container {}", container.short_id());
            container.discard().await;
            return Err(docker_err(context)(e));
        }
    }
    Ok(container)
}

/// Starts a container of `image` on pinned host ports and checks them; readiness is the caller's.
pub(crate) async fn start(kind: BrokerKind, image: &str) -> Result<RunningContainer, BrokerError> {
    ensure_image(kind, image).await?;
    let tls_files = container_tls_files();
    let setup = match &tls_files {
        Some(files) => match tls_setup(kind, files) {
            Ok(setup) => Some(setup),
            Err(e) => {
                tracing::warn!(error = %e, "no TLS listener on this broker: amqps scenarios will fail");
                let _ = std::fs::remove_dir_all(&files.dir);
                None
            }
        },
        None => None,
    };
    let tls_files = tls_files.filter(|_| setup.is_some());
    let (put, cmd) = setup.unwrap_or_default();
    // Until the container holds them, and while it lives: the certificates' dir.
    let mut cleanup: Vec<crate::cleanup::Registration> = tls_files
        .iter()
        .map(|f| crate::cleanup::register(crate::cleanup::Action::RemoveDir(f.dir.clone())))
        .collect();
    tracing::info!(%image, %kind, "starting broker container");
    // From here a signal must ask docker for this process's containers: the one being created
    // has no id to register yet.
    crate::cleanup::note_docker_use();
    let started = start_on_free_ports(kind, image, &put, &cmd).await;
    let (container, HostPorts { amqp, http, amqps }) = match started {
        Ok(c) => c,
        Err(e) => {
            if let Some(files) = &tls_files {
                let _ = std::fs::remove_dir_all(&files.dir);
            }
            return Err(e);
        }
    };
    let (amqp_port, http_port) = (amqp, http);
    tracing::info!(id = %container.short_id(), amqp_port, http_port, "broker container started");
    let endpoint = Endpoint {
        amqp_host: "127.0.0.1".into(),
        amqp_port,
        http_base: format!("http://127.0.0.1:{http_port}"),
        user: "guest".into(),
        password: "guest".into(),
    };
    let tls = match (tls_files, amqps) {
        (Some(files), Some(port)) => Some(TlsListener::generated("127.0.0.1", port, files)),
        (Some(files), None) => {
            tracing::warn!("no host port for the TLS listener");
            let _ = std::fs::remove_dir_all(&files.dir);
            cleanup.clear();
            None
        }
        (None, _) => None,
    };
    Ok(RunningContainer {
        container,
        image: image.to_string(),
        endpoint,
        http_port,
        tls,
        _cleanup: cleanup,
    })
}

/// Creates and starts the container on free host ports, on new ones when docker finds one taken
/// meanwhile; the container and its host ports (AMQP, management, AMQPS) ([`check_ports`]).
async fn start_on_free_ports(
    kind: BrokerKind,
    image: &str,
    files: &[FileIn],
    cmd: &[String],
) -> Result<(Container, HostPorts), BrokerError> {
    const ATTEMPTS: usize = 3;
    let mut attempt = 1;
    loop {
        let ports = free_host_ports()?;
        let container = create(kind, image, ports, files, cmd).await?;
        match docker_with(&["start", &container.id], None, scaled(STARTUP)).await {
            Ok(_) => return check_ports(kind, container, ports).await,
            Err(e) if attempt < ATTEMPTS && port_clash_text(&e.stderr) => {
                tracing::warn!(error = %e, attempt, "a host port was taken before docker bound it: new ports");
                container.discard().await;
                attempt += 1;
            }
            Err(e) => {
                container.discard().await;
                return Err(docker_err(format!("starting a container of {image}"))(e));
            }
        }
    }
}

/// The host ports a started container's listeners are published on.
struct HostPorts {
    amqp: u16,
    http: u16,
    /// As docker published it (`None`: not at all).
    amqps: Option<u16>,
}

/// The started container's host ports: AMQP and management checked to be the `pinned` ones (the
/// container is removed if they are not).
async fn check_ports(
    kind: BrokerKind,
    container: Container,
    pinned: [u16; 3],
) -> Result<(Container, HostPorts), BrokerError> {
    let published = match container.published().await {
        Ok(p) => p,
        Err(e) => {
            container.discard().await;
            return Err(e);
        }
    };
    let got = [AMQP_PORT, HTTP_PORT, AMQPS_PORT].map(|inside| host_port(&published, inside));
    if got[..2] != [Some(pinned[0]), Some(pinned[1])] {
        container.discard().await;
        return Err(BrokerError::Unavailable {
            provider: format!("container:{kind}"),
            reason: format!(
                "docker published AMQP and management on host ports {:?}, not the pinned ({}, {})",
                &got[..2],
                pinned[0],
                pinned[1]
            ),
            hint: "check the docker daemon's port publishing (userland proxy, rootless mode)".into(),
        });
    }
    let ports = HostPorts {
        amqp: pinned[0],
        http: pinned[1],
        amqps: got[2],
    };
    Ok((container, ports))
}

/// A broker container this run started.
pub(crate) struct RunningContainer {
    container: Container,
    image: String,
    endpoint: Endpoint,
    /// The management API's pinned host port (the AMQP one is in `endpoint`).
    http_port: u16,
    /// The `amqps://` listener (SEC-1); its certificates live in `tls.files.dir`.
    tls: Option<TlsListener>,
    /// The TLS dir in the cleanup registry, for a run that ends by a signal or a panic
    /// (forgotten once [`RunningContainer::stop`] removed it; the container is `container`'s).
    _cleanup: Vec<crate::cleanup::Registration>,
}

impl RunningContainer {
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    pub(crate) fn tls(&self) -> Option<&TlsListener> {
        self.tls.as_ref()
    }

    pub(crate) fn describe(&self) -> String {
        format!("container {} of {}", self.container.short_id(), self.image)
    }

    /// `Some(reason)` once the container is no longer running.
    pub(crate) async fn failure(&self) -> Option<String> {
        let state = docker(&[
            "inspect",
            "--format",
            "{{.State.Running}} {{.State.ExitCode}}",
            &self.container.id,
        ])
        .await
        // Docker hiccups are not the broker's death: keep polling.
        .ok()?;
        match state.split_once(' ') {
            Some(("false", code)) => Some(format!("{} exited (exit code {code})", self.describe())),
            _ => None,
        }
    }

    /// The last lines the container wrote (output, then errors), for boot failures.
    pub(crate) async fn log_tail(&self, lines: usize) -> String {
        let n = lines.to_string();
        let limit = scaled(COMMAND);
        match docker_with(&["logs", "--tail", &n, &self.container.id], None, limit).await {
            Ok(out) => tail(&format!("{}\n{}", out.stdout, out.stderr), lines),
            Err(e) => format!("(cannot read the container's log: {e})"),
        }
    }

    /// `docker stop` (SIGTERM: the broker shuts down cleanly; SIGKILL after 30 s, scaled). The
    /// container and its data stay for [`RunningContainer::resume`].
    pub(crate) async fn halt(&self) -> Result<(), BrokerError> {
        let what = self.describe();
        let started = std::time::Instant::now();
        let grace = scaled(STOP_GRACE);
        let secs = grace.as_secs().to_string();
        docker_with(
            &["stop", "-t", &secs, &self.container.id],
            None,
            grace + scaled(COMMAND),
        )
        .await
        .map_err(docker_err(format!("stopping the {what}")))?;
        tracing::info!(%what, took = ?started.elapsed(), "broker container stopped");
        Ok(())
    }

    /// `docker start` of the container [`RunningContainer::halt`] stopped: same filesystem (the
    /// broker's data), same hostname (its node name), same pinned host ports — checked, since
    /// gateways hold URLs with them. Readiness is the caller's.
    pub(crate) async fn resume(&self) -> Result<(), BrokerError> {
        let what = self.describe();
        docker_with(&["start", &self.container.id], None, scaled(STARTUP))
            .await
            .map_err(docker_err(format!("starting the {what} again")))?;
        let published = self.container.published().await?;
        for (inside, pinned) in [(AMQP_PORT, self.endpoint.amqp_port), (HTTP_PORT, self.http_port)] {
            let now = host_port(&published, inside);
            if now != Some(pinned) {
                return Err(BrokerError::Unavailable {
                    provider: what.clone(),
                    reason: format!("after the restart {inside}/tcp is published on {now:?}, not on {pinned}"),
                    hint: "check the docker daemon's port publishing (userland proxy, rootless mode)".into(),
                });
            }
        }
        Ok(())
    }

    /// Removes the container (killing the broker) and its TLS dir.
    pub(crate) async fn stop(self) -> Result<(), BrokerError> {
        let what = self.describe();
        if let Some(files) = self.tls.as_ref().and_then(|t| t.files.as_ref()) {
            let _ = std::fs::remove_dir_all(&files.dir);
        }
        self.container.remove().await?;
        tracing::info!(%what, "broker container removed");
        Ok(())
    }
}

pub(crate) fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

#[cfg(test)]
mod tests;
