//! `fleet-gateway`: run the gateway, generate a key, or check a configuration.
//!
//! ```text
//! fleet-gateway [run] [--config FILE]     serve (env FLEET_* wins over the file)
//! fleet-gateway check-config [--config FILE]
//! fleet-gateway keygen --out FILE         write a signing key (0600), print the peers line
//! fleet-gateway ready [--config FILE]     exit 0 iff this host's gateway answers /readyz 200
//! ```
//!
//! `ready` is the container health check: the gateway image holds no HTTP client.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use fleet_gateway::config::Config;
use fleet_gateway::gateway::Gateway;
use fleet_gateway::signing::Signer;

fn usage() -> &'static str {
    "usage: fleet-gateway [run|check-config|ready] [--config FILE] | fleet-gateway keygen --out FILE [--host ID]"
}

struct Args {
    cmd: String,
    config: Option<PathBuf>,
    out: Option<PathBuf>,
    host: Option<String>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        cmd: "run".into(),
        config: None,
        out: None,
        host: None,
    };
    let mut first = true;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--config" => a.config = Some(it.next().context("--config needs a file")?.into()),
            "--out" => a.out = Some(it.next().context("--out needs a file")?.into()),
            "--host" => a.host = Some(it.next().context("--host needs a host id")?),
            "-h" | "--help" => {
                println!("{}", usage());
                std::process::exit(0);
            }
            c if first && !c.starts_with('-') => a.cmd = c.to_string(),
            other => bail!("unexpected argument {other:?}\n{}", usage()),
        }
        first = false;
    }
    Ok(a)
}

fn init_logs(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,lapin=warn,rmcp=warn"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if format == "json" {
        b.json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init();
    } else {
        b.with_ansi(false).init();
    }
}

fn keygen(out: Option<PathBuf>, host: Option<String>) -> anyhow::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let out = out.context("keygen needs --out FILE")?;
    let signer = Signer::generate().map_err(|e| anyhow::anyhow!("no randomness available: {e}"))?;
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(0o600)
        .open(&out)
        .with_context(|| format!("cannot create {} (it must not exist yet)", out.display()))?;
    writeln!(f, "{}", signer.seed_base64())?;
    println!(
        "{} = \"{}\"",
        host.as_deref().unwrap_or("<host-id>"),
        signer.public_base64()
    );
    Ok(())
}

async fn serve(cfg: Config) -> anyhow::Result<()> {
    let gw = Gateway::new(cfg.clone())?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("FLEET_LISTEN: cannot listen on {}", cfg.listen))?;
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
    let runner = {
        let gw = Arc::clone(&gw);
        tokio::spawn(async move { gw.run().await })
    };
    wait_for_signal().await;
    tracing::info!("shutting down");
    gw.graceful_stop(Duration::from_secs(10)).await;
    gw.begin_shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(5), runner).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), http).await;
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

fn main() -> std::process::ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("fleet-gateway: {e:#}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = match args.cmd.as_str() {
        "keygen" => keygen(args.out, args.host),
        "ready" => Config::load(args.config.as_deref())
            .map_err(anyhow::Error::from)
            .and_then(|c| probe_ready(c.listen)),
        "check-config" => Config::load(args.config.as_deref())
            .map(|c| print!("{}", c.describe()))
            .map_err(anyhow::Error::from),
        "run" => match Config::load(args.config.as_deref()) {
            Err(e) => Err(anyhow::Error::from(e).context("invalid configuration")),
            Ok(cfg) => {
                init_logs(&cfg.log_format);
                match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
                    Ok(rt) => rt.block_on(serve(cfg)),
                    Err(e) => Err(e.into()),
                }
            }
        },
        other => Err(anyhow::anyhow!("unknown command {other:?}\n{}", usage())),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fleet-gateway: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}
