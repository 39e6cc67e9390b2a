//! `fleet-gateway`: run the gateway, generate a key, or check a configuration.
//!
//! ```text
//! fleet-gateway [run] [--config FILE]     serve (env FLEET_* wins over the file)
//! fleet-gateway check-config [--config FILE]
//! fleet-gateway keygen --out FILE         write a signing key (0600) and FILE.pub (OpenSSH line
//!                                         a CA signs), print the peers line
//! fleet-gateway cert check FILE [--ca-file F] [--revoked-file F] [--host H] [--key F]
//!                                         what a host certificate is, and whether it is accepted
//! fleet-gateway ready [--config FILE]     exit 0 iff this host's gateway answers /readyz 200
//! fleet-gateway convert-inboxes [--config FILE] QUEUE...
//!                                         convert classic queues to quorum (SPEC §16, CLU-7)
//! ```
//!
//! `ready` is the container health check: the gateway image holds no HTTP client.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use axum::serve::ListenerExt as _;
use fleet_gateway::config::Config;
use fleet_gateway::gateway::Gateway;
use fleet_gateway::signing::Signer;

/// The reference gateway of Fleet's cross-host messaging (SPEC §15: configured by FLEET_*
/// environment variables, which win over a --config file).
#[derive(Debug, clap::Parser)]
#[command(name = "fleet-gateway", version)]
struct Cli {
    /// What to do (default: run).
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// A TOML configuration file; FLEET_* environment variables win over it.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Serve MCP and the local API, and move messages through the broker.
    Run,
    /// Validate the configuration and print the effective one, secrets masked.
    CheckConfig,
    /// Write a new signing key (mode 0600) and print this host's peers-file line.
    Keygen {
        /// Where to write the key (must not exist yet).
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// The host id to print in the peers-file line.
        #[arg(long, value_name = "ID")]
        host: Option<String>,
    },
    /// Exit 0 when this host's gateway answers /readyz with 200 (the container health check).
    Ready,
    /// OpenSSH host certificates (SPEC §18, membership).
    Cert {
        #[command(subcommand)]
        cmd: CertCmd,
    },
    /// What the running gateway trusts now, and why (SPEC §18): per host, each key, where it came
    /// from, its state and the roster consequence. Reads FLEET_LISTEN and FLEET_ADMIN_TOKEN.
    Trust {
        #[command(subcommand)]
        cmd: TrustCmd,
    },
    /// Convert classic queues to quorum queues with the arguments a gateway declares with
    /// FLEET_QUEUE_TYPE=quorum (SPEC §16, CLU-7); finishes an interrupted conversion. Reads
    /// FLEET_AMQP_URL (the first node that answers), the TLS variables and FLEET_INBOX_* /
    /// FLEET_DLQ_MAX_LENGTH. Prints one line per queue; exits 1 if any was not converted.
    ConvertInboxes {
        /// agent.<gid>.inbox.v2 (also control.<host> and bridge.dlq).
        #[arg(required = true, value_name = "QUEUE")]
        queues: Vec<String>,
    },
}

#[derive(Debug, clap::Subcommand)]
enum TrustCmd {
    /// Print the running gateway's trust report (GET /v1/trust).
    Show {
        /// Print the JSON the gateway answered instead of the text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, clap::Subcommand)]
enum CertCmd {
    /// Print a certificate's principals, type, key id, serial, critical options, validity (UTC),
    /// the CA it chains to (key type, signature algorithm) and whether that CA is trusted,
    /// whether the revocation list revokes it and whether it is over the signing key; exit 1
    /// when a gateway would not accept it.
    Check {
        /// The certificate file (`<key>-cert.pub` of `ssh-keygen -s`).
        #[arg(value_name = "CERT")]
        file: PathBuf,
        /// Trusted CA keys (default: FLEET_TRUST_CA_FILE).
        #[arg(long, value_name = "FILE", env = "FLEET_TRUST_CA_FILE")]
        ca_file: Option<PathBuf>,
        /// The KRL specification (default: FLEET_REVOKED_FILE).
        #[arg(long, value_name = "FILE", env = "FLEET_REVOKED_FILE")]
        revoked_file: Option<PathBuf>,
        /// The host the certificate must name (default: FLEET_HOST_ID).
        #[arg(long, value_name = "ID", env = "FLEET_HOST_ID")]
        host: Option<String>,
        /// The gateway's signing key, which the certificate must be over (default:
        /// FLEET_SIGNING_KEY_FILE).
        #[arg(long, value_name = "FILE", env = "FLEET_SIGNING_KEY_FILE")]
        key: Option<PathBuf>,
    },
}

/// `cert check`: the report on stdout; an error (exit 1) when the certificate is not accepted.
fn cert_check(req: fleet_gateway::membership::cli::CheckRequest) -> anyhow::Result<()> {
    let report = fleet_gateway::membership::cli::check(&req, fleet_gateway::envelope::now_ms())?;
    print!("{}", report.text);
    if !report.accepted {
        bail!(
            "{}: a gateway would not accept this certificate",
            req.cert_file.display()
        );
    }
    Ok(())
}

/// Drops [`fleet_gateway::topology::is_probe_noise`] events and the channel closes the gateway
/// asked for ([`fleet_gateway::expected_close`]). Decided per event (a probe runs for
/// milliseconds), so lapin's ERROR callsites are never cached as on or off.
struct ProbeNoise;

impl<S> tracing_subscriber::layer::Filter<S> for ProbeNoise {
    fn enabled(&self, meta: &tracing::Metadata<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        !fleet_gateway::topology::is_probe_noise(meta)
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _: &tracing_subscriber::layer::Context<'_, S>) -> bool {
        !fleet_gateway::expected_close::is_expected_close(event)
    }

    fn callsite_enabled(&self, meta: &'static tracing::Metadata<'static>) -> tracing::subscriber::Interest {
        if *meta.level() == tracing::Level::ERROR && meta.target().starts_with("lapin") {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::always()
        }
    }
}

/// Logs to stderr, `RUST_LOG` or `info,lapin=warn,rmcp=warn`, in text or JSON; lapin's ERROR
/// events about the `bridge.delay` probe's expected close are dropped
/// ([`fleet_gateway::topology::is_probe_noise`]), and so are those about a passive declare's
/// expected 404 ([`fleet_gateway::expected_close`]).
fn init_logs(format: &str) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lapin=warn,rmcp=warn"));
    let probe = || ProbeNoise;
    let registry = tracing_subscriber::registry().with(filter);
    if format == "json" {
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false);
        registry.with(layer.with_filter(probe())).init();
    } else {
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(false);
        registry.with(layer.with_filter(probe())).init();
    }
}

fn keygen(out: PathBuf, host: Option<String>) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let signer = Signer::generate().map_err(|e| anyhow::anyhow!("no randomness available: {e}"))?;
    let pub_file = fleet_gateway::membership::cli::pub_path(&out);
    if pub_file.exists() {
        bail!("{} exists already (it would not match the new key)", pub_file.display());
    }
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&out)
        .with_context(|| format!("cannot create {} (it must not exist yet)", out.display()))?;
    writeln!(f, "{}", signer.seed_base64())?;
    // SPEC §18: the OpenSSH line a fleet CA signs (`ssh-keygen -s CA -h -I <id> -n <host> FILE.pub`).
    let line = fleet_gateway::membership::cli::openssh_public_line(
        &signer.verifying_key(),
        host.as_deref().unwrap_or("fleet-gateway"),
    )?;
    std::fs::write(&pub_file, format!("{line}\n")).with_context(|| format!("cannot write {}", pub_file.display()))?;
    eprintln!("{line}");
    eprintln!(
        "wrote {}: certify it with ssh-keygen -s <ca> -h -I <key id> -n {} -V <window> {}",
        pub_file.display(),
        host.as_deref().unwrap_or("<host-id>"),
        pub_file.display()
    );
    println!(
        "{} = \"{}\"",
        host.as_deref().unwrap_or("<host-id>"),
        signer.public_base64()
    );
    Ok(())
}

/// SIGTERM → exit (CONTRACT §1's grace is 10 s): what the whole stop may take.
const STOP_BUDGET: Duration = Duration::from_millis(9_500);
/// Of it, the graceful part (consumers closed, injects ended, presence `down`s published); the
/// channels and connections are closed in what is left.
const GRACEFUL_PART: Duration = Duration::from_secs(7);

async fn serve(cfg: Config) -> anyhow::Result<()> {
    let gw = Gateway::new(cfg.clone(), fleet_gateway::areas::SpecAreas::all())?;
    // Without TCP_NODELAY an answer on a kept-alive connection waits for the client's delayed ACK
    // (up to 40 ms on Linux): an MCP answer is written in two parts (the SSE stream's head, then
    // the result), and Nagle holds the second until the first is acknowledged.
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("FLEET_LISTEN: cannot listen on {}", cfg.listen))?
        .tap_io(|tcp| {
            if let Err(e) = tcp.set_nodelay(true) {
                tracing::debug!(error = %e, "cannot set TCP_NODELAY on an accepted connection");
            }
        });
    tracing::info!(host = %cfg.host_id, listen = %cfg.listen, "fleet-gateway starting");
    let app = fleet_gateway::api::router(gw.clone());
    let mut http_shutdown = gw.shutdown_signal();
    let http = tokio::spawn(async move {
        let r = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = http_shutdown.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "http server failed");
        }
    });
    // SPEC §18: trust files re-read on change and on SIGHUP, rotation, expiry (MEM-1, MEM-3, MEM-4).
    fleet_gateway::membership::watch::spawn(gw.clone());
    let runner = {
        let gw = Arc::clone(&gw);
        tokio::spawn(async move { gw.run().await })
    };
    wait_for_signal().await;
    let stop = tokio::time::Instant::now();
    tracing::info!("shutting down");
    // CONTRACT §1: SIGTERM → exit within 10 s. One budget for every step, so the later ones are
    // not granted time the earlier ones already spent.
    let deadline = stop + STOP_BUDGET;
    gw.graceful_stop(GRACEFUL_PART).await;
    gw.begin_shutdown();
    let t = tokio::time::Instant::now();
    let _ = tokio::time::timeout_at(deadline - Duration::from_millis(500), runner).await;
    tracing::info!(
        took_ms = t.elapsed().as_millis() as u64,
        "stop: channels and connections closed"
    );
    let _ = tokio::time::timeout_at(deadline, http).await;
    tracing::info!(took_ms = stop.elapsed().as_millis() as u64, "stopped");
    Ok(())
}

/// `GET /readyz` on the gateway's own listen address (loopback when it listens on all
/// interfaces); Ok only for a 200 answer. Plain HTTP/1.0 over std, bounded by 3 s.
fn probe_ready(listen: std::net::SocketAddr) -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    let mut addr = listen;
    if addr.ip().is_unspecified() {
        addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let timeout = Duration::from_secs(3);
    let mut s =
        std::net::TcpStream::connect_timeout(&addr, timeout).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    write!(s, "GET /readyz HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut answer = String::new();
    s.read_to_string(&mut answer)?;
    let status = answer.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) == Some("200") {
        println!("ready");
        Ok(())
    } else {
        bail!(
            "not ready: {status}: {}",
            answer.split("\r\n\r\n").nth(1).unwrap_or_default()
        )
    }
}

/// Queues converted on one connection: each conversion's lookups cost the connection a few of its
/// 2,047 channel ids for good (see `gateway/side.rs`), so a long list is worked through on several.
const QUEUES_PER_CONNECTION: usize = 200;

/// `convert-inboxes`: one line per queue on stdout, as each finishes; an error if any failed.
async fn convert_inboxes(config: Option<&std::path::Path>, queues: &[String]) -> anyhow::Result<()> {
    use fleet_gateway::convert;
    let (broker, args) = Config::load_for_conversion(config).context("invalid configuration")?;
    let mut conn = convert::connect(&broker).await?;
    let mut failed = 0;
    for (i, queue) in queues.iter().enumerate() {
        if i > 0 && i % QUEUES_PER_CONNECTION == 0 {
            // lapin keeps the id of every channel the broker closed (a conversion's lookups are
            // 404s and 406s on purpose): a fresh connection before the old one runs out.
            let _ = conn.close(200, "done".into()).await;
            conn = convert::connect(&broker).await?;
        }
        let report = convert::convert_one(&conn, &args, queue).await;
        println!("{report}");
        if report.result.is_err() {
            failed += 1;
        }
    }
    let _ = conn.close(200, "done".into()).await;
    if failed > 0 {
        bail!(
            "{failed} of {} queue(s) not converted (see above); running the command again is safe",
            queues.len()
        );
    }
    Ok(())
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

/// At most two glibc malloc arenas, unless the operator set `MALLOC_ARENA_MAX` (glibc reads it
/// itself, and it wins).
///
/// glibc gives threads that allocate at once arenas of their own, up to eight per core, and each
/// keeps what was freed in it. A gateway's allocations are small and spread over its runtime's
/// threads, so the memory held idle in arenas grew with the entity count: measured at 10,000
/// entities, 173 MiB of RSS with glibc's default, 143 MiB with two arenas; the forward path's CPU
/// per brief stayed within the runs' noise (0.47 / 0.44 ms before, 0.45 / 0.44 ms after). Called
/// before the runtime starts its threads.
fn limit_malloc_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no other thread exists yet.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

fn main() -> std::process::ExitCode {
    // clap prints --help / --version and exits 0, or names a bad argument and exits 2.
    let cli = <Cli as clap::Parser>::parse();
    let config = cli.config.as_deref();
    let result = match cli.cmd.unwrap_or(Cmd::Run) {
        Cmd::Keygen { out, host } => keygen(out, host),
        Cmd::Cert {
            cmd:
                CertCmd::Check {
                    file,
                    ca_file,
                    revoked_file,
                    host,
                    key,
                },
        } => cert_check(fleet_gateway::membership::cli::CheckRequest {
            cert_file: file,
            ca_file,
            revoked_file,
            host,
            key_file: key,
        }),
        Cmd::Trust {
            cmd: TrustCmd::Show { json },
        } => Config::load_admin(config)
            .map_err(anyhow::Error::from)
            .and_then(|(listen, token)| fleet_gateway::membership::report::show(listen, &token, json))
            .map(|text| print!("{text}")),
        Cmd::Ready => Config::load_admin(config)
            .map_err(anyhow::Error::from)
            .and_then(|(listen, _)| probe_ready(listen)),
        Cmd::ConvertInboxes { queues } => {
            // Its own words on stdout and stderr; lapin's (a 404 is an answer here) stay quiet.
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,lapin=off"));
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .init();
            match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt.block_on(convert_inboxes(config, &queues)),
                Err(e) => Err(e.into()),
            }
        }
        Cmd::CheckConfig => Config::load(config)
            .map(|c| print!("{}", c.describe()))
            .map_err(anyhow::Error::from),
        Cmd::Run => match Config::load(config) {
            Err(e) => Err(anyhow::Error::from(e).context("invalid configuration")),
            Ok(cfg) => {
                init_logs(&cfg.log_format);
                limit_malloc_arenas();
                match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                    Ok(rt) => {
                        let served = rt.block_on(serve(cfg));
                        if served.is_ok() {
                            // The graceful stop is done and logged (stderr, unbuffered): nothing is
                            // left to write. Dropping the runtime's tasks and 10,000 entities' state
                            // one by one took ~0.9 s of CONTRACT §1's 10 s after `stopped`.
                            std::process::exit(0);
                        }
                        served
                    }
                    Err(e) => Err(e.into()),
                }
            }
        },
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-gateway: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
