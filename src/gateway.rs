//! A gateway under test: a real process started with the SPEC §15 runtime contract.
//!
//! The suite never links a gateway: it starts whatever `FLEET_GATEWAY_CMD` names (default: the
//! reference `fleet-gateway` binary) with the contract's environment, waits for `/readyz`, captures
//! its log, and kills it with real signals (SIGKILL, SIGSTOP/SIGCONT, SIGTERM) to open the crash
//! windows the spec talks about. Its local API (`/v1/…`) is driven over HTTP like an operator would.
//!
//! Each gateway runs in its own process group, so whatever a gateway command forks (a wrapper
//! script's children) is killed with it, and a Ctrl-C on the terminal reaches the suite, not the
//! gateways: the suite decides when they die. The group is in the cleanup registry while it runs
//! and recorded in a marker file in the gateway's dir, so an interrupted run, or the next run
//! after a SIGKILLed one, kills it too ([`crate::cleanup`]).
//!
//! A gateway that cannot be used at all — its command not found or not executable, an exit
//! before `/readyz` answered, never ready within the bound, garbage for an answer, dead after it
//! was ready — fails with one line that says which ([`failure`]); [`preflight`] tries the command
//! once before a run, so a command `sh` cannot run stops the run at once.

pub mod failure;
pub mod preflight;
mod readiness;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::keys::{HostKey, write_peers_file};
pub use failure::{Kind, Unusable};

/// A gateway-process failure.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("cannot prepare gateway files in {dir}: {reason}")]
    Files { dir: String, reason: String },
    #[error("cannot start gateway command {cmd:?}: {reason}")]
    Spawn { cmd: String, reason: String },
    /// It cannot be used at all; the first line says why ([`Unusable`]).
    #[error("{failure}\n--- last log lines ---\n{log}")]
    Unusable { failure: Unusable, log: String },
    #[error("gateway {host} local API {what}: {reason}")]
    Api { host: String, what: String, reason: String },
}

/// Everything needed to (re)start one host's gateway.
#[derive(Clone)]
pub struct GatewaySpec {
    pub host: String,
    /// Command line; run through `sh -c 'exec …'` so signals reach the gateway itself.
    pub command: String,
    pub amqp_url: String,
    pub herdr_socket: PathBuf,
    /// This host's own directory (key, peers, state, log).
    pub dir: PathBuf,
    pub key: HostKey,
    /// Peer keys written to the peers file (normally every trusted host of the scenario).
    pub peers: BTreeMap<String, HostKey>,
    /// Tunables (`FLEET_HEARTBEAT_MS`, …) and any other variables.
    pub extra_env: BTreeMap<String, String>,
}

impl GatewaySpec {
    /// `FLEET_SIGNING_KEY_FILE`: the key file in the host's directory.
    pub fn key_file(&self) -> PathBuf {
        self.dir.join("signing.key")
    }

    /// `FLEET_PEERS_FILE`: the peers file in the host's directory.
    pub fn peers_file(&self) -> PathBuf {
        self.dir.join("peers.toml")
    }
}

/// A running (or stopped) gateway process.
pub struct GatewayProcess {
    pub spec: GatewaySpec,
    pub listen: SocketAddr,
    pub admin_token: String,
    child: Option<tokio::process::Child>,
    http: reqwest::Client,
    log_path: PathBuf,
    starts: u32,
    /// When the running process was spawned.
    spawned_at: Option<Instant>,
    /// The running process's group in the cleanup registry and its marker file.
    owned: Option<Owned>,
}

/// What ties a running gateway to the cleanup registry; see [`crate::cleanup`].
struct Owned {
    pgid: i32,
    _registration: crate::cleanup::Registration,
    marker: Option<PathBuf>,
}

impl Owned {
    fn new(pgid: i32, dir: &Path) -> Owned {
        let registration = crate::cleanup::register(crate::cleanup::Action::KillGroup(pgid));
        let marker = crate::cleanup::Marker::mine()
            .with_group(pgid)
            .write(dir, &format!("gateway-{pgid}"));
        let marker = match marker {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!(error = %e, dir = %dir.display(), "cannot record the gateway's group for later sweeps");
                None
            }
        };
        Owned {
            pgid,
            _registration: registration,
            marker,
        }
    }

    /// SIGKILLs whatever is left of the group and forgets it.
    fn finish(self) {
        crate::cleanup::kill_group(self.pgid, libc::SIGKILL);
        if let Some(m) = &self.marker {
            let _ = std::fs::remove_file(m);
        }
    }
}

impl Drop for GatewayProcess {
    /// A gateway nobody stopped (a panicking step, a dropped world) dies with its handle, and
    /// so does anything it forked.
    fn drop(&mut self) {
        if let Some(o) = self.owned.take() {
            o.finish();
        }
    }
}

impl GatewayProcess {
    /// Starts the gateway and waits until `/readyz` answers 200.
    pub async fn start(spec: GatewaySpec) -> Result<GatewayProcess, GatewayError> {
        let mut gw = Self::prepare(spec)?;
        gw.launch().await?;
        Ok(gw)
    }

    /// Starts the gateway without waiting for `/readyz` (one a scenario expects never to be ready).
    pub fn start_unready(spec: GatewaySpec) -> Result<GatewayProcess, GatewayError> {
        let mut gw = Self::prepare(spec)?;
        gw.spawn_child()?;
        Ok(gw)
    }

    /// Writes the key and peers files and picks the listen port.
    fn prepare(spec: GatewaySpec) -> Result<GatewayProcess, GatewayError> {
        let files = |e: std::io::Error| GatewayError::Files {
            dir: spec.dir.display().to_string(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(spec.dir.join("state")).map_err(files)?;
        spec.key.write_key_file(&spec.key_file()).map_err(files)?;
        write_peers_file(&spec.peers_file(), &spec.peers).map_err(files)?;
        let port = crate::ports::free_port().map_err(files)?;
        Ok(GatewayProcess {
            listen: SocketAddr::from(([127, 0, 0, 1], port)),
            admin_token: format!("admin-{}", uuid::Uuid::new_v4().simple()),
            log_path: spec.dir.join("gateway.log"),
            spec,
            child: None,
            http: local_api_client(),
            starts: 0,
            spawned_at: None,
            owned: None,
        })
    }

    fn env(&self) -> BTreeMap<String, String> {
        let d = &self.spec.dir;
        let mut env: BTreeMap<String, String> = [
            ("FLEET_HOST_ID", self.spec.host.clone()),
            ("FLEET_AMQP_URL", self.spec.amqp_url.clone()),
            ("FLEET_SIGNING_KEY_FILE", self.spec.key_file().display().to_string()),
            ("FLEET_PEERS_FILE", self.spec.peers_file().display().to_string()),
            ("FLEET_HERDR_SOCKET", self.spec.herdr_socket.display().to_string()),
            ("FLEET_LISTEN", self.listen.to_string()),
            ("FLEET_ADMIN_TOKEN", self.admin_token.clone()),
            ("FLEET_STATE_DIR", d.join("state").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        env.extend(self.spec.extra_env.clone());
        env
    }

    /// (Re)launches the process with the same identity, port and state dir, and waits for ready.
    pub async fn launch(&mut self) -> Result<(), GatewayError> {
        self.spawn_child()?;
        self.wait_ready(Duration::from_secs(30)).await
    }

    /// Starts the process again (log appended) without waiting for it to be ready: for a start
    /// that must be refused (CON-2, CLU-3) and judged by its log and `/readyz`.
    pub fn launch_unready(&mut self) -> Result<(), GatewayError> {
        self.spawn_child()
    }

    /// Spawns the process (log appended), without waiting for anything.
    fn spawn_child(&mut self) -> Result<(), GatewayError> {
        self.starts += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|e| GatewayError::Files {
                dir: self.spec.dir.display().to_string(),
                reason: e.to_string(),
            })?;
        let log2 = log.try_clone().map_err(|e| GatewayError::Files {
            dir: self.spec.dir.display().to_string(),
            reason: e.to_string(),
        })?;
        use std::io::Write as _;
        let _ = writeln!(&log, "===== start #{} of gateway {} =====", self.starts, self.spec.host);
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c")
            .arg(format!("exec {}", self.spec.command))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()))
            .env(
                "RUST_LOG",
                std::env::var("FLEET_GATEWAY_LOG").unwrap_or_else(|_| "info,lapin=warn".into()),
            )
            .envs(self.env())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .process_group(0)
            .kill_on_drop(true);
        if crate::cleanup::shutting_down() {
            return Err(GatewayError::Spawn {
                cmd: self.spec.command.clone(),
                reason: "the run is being interrupted".into(),
            });
        }
        let child = cmd.spawn().map_err(|e| GatewayError::Spawn {
            cmd: self.spec.command.clone(),
            reason: e.to_string(),
        })?;
        // A relaunch replaces the previous process; whatever is left of its group goes now.
        if let Some(o) = self.owned.take() {
            o.finish();
        }
        if let Some(pgid) = child.id().and_then(|p| i32::try_from(p).ok()) {
            self.owned = Some(Owned::new(pgid, &self.spec.dir));
        }
        self.child = Some(child);
        self.spawned_at = Some(Instant::now());
        Ok(())
    }

    /// Waits until `/readyz` answers 200 (2xx), within `nominal` stretched by the suite's time
    /// scale. Fails at once, saying which, when the process exits (its command not found or not
    /// executable, or an exit of its own) or answers bytes that are not HTTP; at the bound, with
    /// the last thing `/readyz` did ([`Unusable`]).
    pub async fn wait_ready(&mut self, nominal: Duration) -> Result<(), GatewayError> {
        let bound = crate::timing::scaled(nominal);
        let start = tokio::time::Instant::now();
        let deadline = start + bound;
        let mut pause = Duration::from_millis(5);
        let seen = loop {
            if let Some(status) = self.try_exit() {
                return Err(self.unusable(self.exited_before_ready(status)));
            }
            let now = tokio::time::Instant::now();
            let limit = deadline
                .saturating_duration_since(now)
                .max(crate::timing::scaled(crate::timing::LAST_LOOK));
            match readiness::probe(&self.http, self.listen, limit).await {
                readiness::Probe::Ready => return Ok(()),
                readiness::Probe::Garbage(bytes) => {
                    let reason = format!(
                        "gateway answered /readyz with garbage: {}",
                        failure::escape_bytes(&bytes, failure::SHOWN_BYTES)
                    );
                    return Err(self.unusable(Unusable::new(&self.spec.host, Kind::Garbage, reason)));
                }
                readiness::Probe::NotYet(seen) if tokio::time::Instant::now() >= deadline => break seen,
                readiness::Probe::NotYet(_) => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        };
        if let Some(status) = self.try_exit() {
            return Err(self.unusable(self.exited_before_ready(status)));
        }
        let bound = readiness::bound_text(nominal, crate::timing::time_scale());
        let reason = readiness::never_ready(self.listen, &seen, &bound);
        Err(self.unusable(Unusable::new(&self.spec.host, Kind::NeverReady, reason)))
    }

    /// Why the process that exited with `status` before it was ready could not be used.
    fn exited_before_ready(&self, status: std::process::ExitStatus) -> Unusable {
        let at_once = self.spawned_at.is_some_and(|t| t.elapsed() < Duration::from_secs(1));
        failure::exited(
            &self.spec.host,
            &self.spec.command,
            status,
            &self.log_since_start(),
            at_once,
        )
    }

    /// The error of an unusable gateway: its line, then its last log lines.
    fn unusable(&self, failure: Unusable) -> GatewayError {
        GatewayError::Unusable {
            failure,
            log: self.log_tail(40),
        }
    }

    /// The error of a local-API call that could not be made: when the process has exited (it
    /// died after it was ready), that, in one line; else the call's error with its causes.
    /// `patient`: a process that just closed its port is given half a second to be gone (a call
    /// that ends its step anyway); else it is looked at once (a call polled in a loop).
    async fn api_failure(&self, what: &str, e: &reqwest::Error, patient: bool) -> GatewayError {
        let lost = e.is_connect() || e.is_body() || (e.is_request() && !e.is_timeout());
        if lost && self.pid().is_some() {
            let looks = if patient { 10 } else { 1 };
            for look in 0..looks {
                if look > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if let Some(status) = self.pid().and_then(readiness::peek_exit) {
                    let output = match failure::last_output_line(&self.log_since_start()) {
                        Some(l) => format!("last output line: {l}"),
                        None => "it wrote nothing".into(),
                    };
                    let reason = format!(
                        "gateway exited with {} after /readyz answered; {what} found nobody ({output})",
                        failure::describe_status(status)
                    );
                    return self.unusable(Unusable::new(&self.spec.host, Kind::Died, reason));
                }
            }
        }
        self.api_err(what, readiness::error_chain(e))
    }

    /// The error of a local-API answer that is not JSON: garbage, shown.
    fn api_garbage(&self, what: &str, status: reqwest::StatusCode, body: &[u8]) -> GatewayError {
        let reason = format!(
            "gateway answered {what} with garbage ({status}, not JSON): {}",
            failure::escape_bytes(body, failure::SHOWN_BYTES)
        );
        self.unusable(Unusable::new(&self.spec.host, Kind::Garbage, reason))
    }

    /// The process's exit status once it has exited by itself (reaped here); `None` while it runs
    /// or when it was never started.
    pub fn try_exit(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Sends a real signal to the gateway process.
    pub fn signal(&self, sig: i32) -> std::io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| std::io::Error::other("gateway is not running"))?;
        // SAFETY: kill(2) with a pid we spawned and a valid signal number has no memory effects.
        let rc = unsafe { libc::kill(pid as i32, sig) };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }

    /// SIGKILL (the whole process group) and reap: the crash of SPEC's crash windows.
    pub async fn kill(&mut self) {
        if let Some(o) = self.owned.take() {
            o.finish();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }

    /// SIGTERM and wait for a graceful exit within `bound`; SIGKILL after that. Returns whether it
    /// exited by itself. Whatever the gateway forked and left behind is killed either way.
    pub async fn terminate(&mut self, bound: Duration) -> bool {
        self.terminate_status(bound).await.is_some()
    }

    /// [`Gateway::terminate`] that keeps the exit status of a gateway that exited by itself
    /// (`None`: it was killed after `bound`). CONTRACT §1 asks for status 0 after SIGTERM.
    pub async fn terminate_status(&mut self, bound: Duration) -> Option<std::process::ExitStatus> {
        let _ = self.signal(libc::SIGTERM);
        let Some(mut c) = self.child.take() else {
            if let Some(o) = self.owned.take() {
                o.finish();
            }
            return Some(std::os::unix::process::ExitStatusExt::from_raw(0));
        };
        let status = match tokio::time::timeout(bound, c.wait()).await {
            Ok(Ok(status)) => Some(status),
            Ok(Err(_)) => Some(std::os::unix::process::ExitStatusExt::from_raw(0)),
            Err(_) => {
                let _ = c.start_kill();
                let _ = c.wait().await;
                None
            }
        };
        if let Some(o) = self.owned.take() {
            o.finish();
        }
        status
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.listen)
    }

    pub fn mcp_url(&self) -> String {
        format!("http://{}/mcp", self.listen)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The lines the current process has logged so far: the log after the marker the suite
    /// writes at each (re)start.
    pub fn log_since_start(&self) -> String {
        let log = self.log();
        let marker = format!("===== start #{} of gateway {} =====", self.starts, self.spec.host);
        match log.rfind(&marker) {
            Some(at) => log[at + marker.len()..].to_string(),
            None => log,
        }
    }

    fn api_err(&self, what: &str, reason: impl ToString) -> GatewayError {
        GatewayError::Api {
            host: self.spec.host.clone(),
            what: what.into(),
            reason: reason.to_string(),
        }
    }

    /// `POST /v1/entities` → `(gid, token)`.
    pub async fn register(
        &self,
        role: &str,
        pane: &str,
        groups: &[String],
        parent: Option<&str>,
        gid: Option<&str>,
    ) -> Result<(String, String), GatewayError> {
        let mut body = json!({"role": role, "pane": pane, "groups": groups});
        if let Some(p) = parent {
            body["parent"] = json!(p);
        }
        if let Some(g) = gid {
            body["gid"] = json!(g);
        }
        const WHAT: &str = "POST /v1/entities";
        let sent = self
            .http
            .post(format!("{}/v1/entities", self.base_url()))
            .bearer_auth(&self.admin_token)
            .json(&body)
            .send()
            .await;
        let r = match sent {
            Ok(r) => r,
            Err(e) => return Err(self.api_failure(WHAT, &e, true).await),
        };
        let status = r.status();
        let bytes = match r.bytes().await {
            Ok(b) => b,
            Err(e) => return Err(self.api_failure(WHAT, &e, true).await),
        };
        if !status.is_success() {
            // A refusal's body is free (CONTRACT §2).
            return Err(self.api_err(WHAT, format!("{status}: {}", String::from_utf8_lossy(&bytes))));
        }
        let v: Value = serde_json::from_slice(&bytes).map_err(|_| self.api_garbage(WHAT, status, &bytes))?;
        crate::schemas::check("POST /v1/entities", "entities.post.response", &v)
            .map_err(|e| self.api_err("POST /v1/entities", e))?;
        let gid = v["gid"]
            .as_str()
            .ok_or_else(|| self.api_err("POST /v1/entities", format!("no gid in {v}")))?;
        let token = v["token"]
            .as_str()
            .ok_or_else(|| self.api_err("POST /v1/entities", format!("no token in {v}")))?;
        Ok((gid.to_string(), token.to_string()))
    }

    /// `DELETE /v1/entities/<gid>`.
    pub async fn stop_entity(&self, gid: &str) -> Result<(), GatewayError> {
        const WHAT: &str = "DELETE /v1/entities";
        let sent = self
            .http
            .delete(format!("{}/v1/entities/{gid}", self.base_url()))
            .bearer_auth(&self.admin_token)
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => Ok(()),
            Ok(r) => Err(self.api_err(WHAT, r.status())),
            Err(e) => Err(self.api_failure(WHAT, &e, true).await),
        }
    }

    /// GET an admin or probe path → (status, JSON or text as a JSON string).
    pub async fn get(&self, path: &str) -> Result<(u16, Value), GatewayError> {
        let what = format!("GET {path}");
        let sent = self
            .http
            .get(format!("{}{path}", self.base_url()))
            .bearer_auth(&self.admin_token)
            .send()
            .await;
        let r = match sent {
            Ok(r) => r,
            Err(e) => return Err(self.api_failure(&what, &e, false).await),
        };
        let status = r.status().as_u16();
        let text = match r.text().await {
            Ok(t) => t,
            Err(e) => return Err(self.api_failure(&what, &e, false).await),
        };
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }
}

/// `POST /v1/entities` with any registration `body` (e.g. one claiming a legacy queue) → the
/// answer's JSON, or an error naming the status. Owned arguments, so a caller can run it in the
/// background (a registration that migrates, or whose gateway is killed meanwhile); no deadline of
/// its own for the same reason — such a registration takes as long as its move, and its caller
/// bounds the wait.
pub async fn post_registration(base_url: String, admin_token: String, body: Value) -> anyhow::Result<Value> {
    use anyhow::Context as _;
    let r = reqwest::Client::new()
        .post(format!("{base_url}/v1/entities"))
        .bearer_auth(admin_token)
        .json(&body)
        .send()
        .await
        .context("POST /v1/entities")?;
    let status = r.status();
    let text = r.text().await.context("POST /v1/entities answer")?;
    // A refusal's body is free (CONTRACT §2); a 2xx one is JSON.
    anyhow::ensure!(status.is_success(), "POST /v1/entities answered {status}: {text}");
    serde_json::from_str(&text).map_err(|_| {
        anyhow::anyhow!(
            "POST /v1/entities answered {status} with garbage (not JSON): {}",
            failure::escape_bytes(text.as_bytes(), failure::SHOWN_BYTES)
        )
    })
}

/// The HTTP client for a gateway's local API: every request has a deadline (a frozen gateway
/// accepts the connection and never answers; the kernel does that for it), scaled by the suite's
/// time knob. The local API answers at once by contract: none of its calls blocks.
fn local_api_client() -> reqwest::Client {
    let timeout = crate::timing::scaled(Duration::from_secs(10));
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .build()
        .unwrap_or_default()
}
