//! Gateway configuration: the SPEC §15 environment contract, optionally layered over a TOML file.
//!
//! Operators and the conformance suite configure a gateway the same way: `FLEET_*` environment
//! variables (which win) over an optional TOML file whose keys are the variable names without the
//! `FLEET_` prefix, lower-cased (`host_id`, `amqp_url`, …). Every bad or missing value stops the
//! gateway at start with an error naming the variable, never a half-configured gateway.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The AMQP frame size the gateway asks for, unless `FLEET_AMQP_URL` sets `frame_max`.
///
/// The AMQP client keeps a receive and a send buffer of 32 frames per connection, so the
/// broker's default (RabbitMQ and LavinMQ: 128 KiB) costs 8 MiB of memory per connection, and a
/// gateway with many entities holds several connections (one per ~2,000 inbox channels). A larger
/// message is split into several frames, which costs only for bodies above this size.
pub const AMQP_FRAME_MAX: u32 = 32 * 1024;

/// `FLEET_QUEUE_TYPE` (SPEC §16, CLU-2): the type of the durable queues a gateway declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueType {
    /// SPEC §1 unchanged: classic queues, exclusive inbox consumers.
    Classic,
    /// CLU-2..CLU-4: replicated quorum queues, single-active-consumer inboxes.
    Quorum,
}

impl QueueType {
    pub fn as_str(self) -> &'static str {
        match self {
            QueueType::Classic => "classic",
            QueueType::Quorum => "quorum",
        }
    }
}

/// Everything the queue declarations depend on (TOP-4, CLU-2): the gateway and the inbox
/// conversion (`fleet-gateway convert-inboxes`) build their arguments from this one value, with
/// the same code (`topology::inbox_arguments` and friends), so the two can never disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueArgs {
    pub queue_type: QueueType,
    pub inbox_max_length: u32,
    pub inbox_ttl: Duration,
    pub inbox_expires: Duration,
    pub dlq_max_length: u32,
}

/// How to reach the broker (CLU-1, SEC-1, CON-1): one URL per node, the TLS roots that apply to
/// each, and the AMQP heartbeat.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// `FLEET_AMQP_URL`: one or more node URLs (a comma list), same scheme, vhost and login.
    pub amqp_urls: Vec<String>,
    /// SEC-1: the CA the broker's certificate must chain to (`FLEET_TLS_CA_FILE`, PEM); `None`
    /// means the system roots (for `amqps://`). It applies to every node of the list.
    pub tls_ca: Option<crate::tls::Roots>,
    pub amqp_heartbeat_s: u16,
}

impl BrokerConfig {
    /// How many node URLs the list holds (at least one).
    pub fn nodes(&self) -> usize {
        self.amqp_urls.len()
    }

    /// The URL the gateway connects to node `node` with (taken modulo the list): the AMQP
    /// heartbeat (CON-1) and the frame size ([`AMQP_FRAME_MAX`]) added, each unless the URL
    /// already sets it.
    pub fn url_effective(&self, node: usize) -> String {
        let mut url = self.amqp_urls[node % self.nodes().max(1)].clone();
        let mut add = |key: &str, value: String| {
            let has = url
                .split_once('?')
                .is_some_and(|(_, q)| q.split('&').any(|kv| kv.split('=').next() == Some(key)));
            if !has {
                let sep = if url.contains('?') { '&' } else { '?' };
                url = format!("{url}{sep}{key}={value}");
            }
        };
        add("heartbeat", self.amqp_heartbeat_s.to_string());
        add("frame_max", AMQP_FRAME_MAX.to_string());
        url
    }

    /// Node `node`'s URL with its password masked, for logs.
    pub fn node_masked(&self, node: usize) -> String {
        mask_url_password(&self.amqp_urls[node % self.nodes().max(1)])
    }

    /// The whole list, passwords masked (`check-config`).
    pub fn masked(&self) -> String {
        self.amqp_urls
            .iter()
            .map(|u| mask_url_password(u))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// How long one connection attempt to one node may take before the next node is tried
    /// (CLU-1): a node cut off by the network answers nothing, and the operating system's own
    /// TCP timeout (minutes) would hold the failover. The AMQP heartbeat, at least 5 s (a TLS
    /// handshake on a loaded host) and at most 15 s.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.amqp_heartbeat_s).clamp(5, 15))
    }

    pub fn is_tls(&self) -> bool {
        self.amqp_urls.first().is_some_and(|u| u.starts_with("amqps://"))
    }
}

/// A configuration error. Each names the variable (or file) at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{var} is required but not set")]
    Missing { var: &'static str },
    #[error("{var} is invalid: {reason}")]
    Invalid { var: &'static str, reason: String },
    #[error("cannot read config file {path}: {source}")]
    File { path: PathBuf, source: std::io::Error },
    #[error("config file {path} is not valid TOML: {reason}")]
    Toml { path: PathBuf, reason: String },
}

/// The fully validated configuration of one gateway.
#[derive(Debug, Clone)]
pub struct Config {
    pub host_id: String,
    /// `FLEET_AMQP_URL` (a node list, CLU-1), `FLEET_TLS_CA_FILE`, `FLEET_AMQP_HEARTBEAT_S`.
    pub broker: BrokerConfig,
    /// `FLEET_QUEUE_TYPE` (CLU-2): `classic` (default) or `quorum`.
    pub queue_type: QueueType,
    pub signing_key_file: PathBuf,
    pub peers_file: PathBuf,
    /// SPEC §18 (`membership`), each optional: trusted CA keys, this host's certificate, the KRL.
    pub trust_ca_file: Option<PathBuf>,
    pub host_cert_file: Option<PathBuf>,
    pub revoked_file: Option<PathBuf>,
    pub herdr_socket: PathBuf,
    pub listen: SocketAddr,
    pub admin_token: String,
    pub state_dir: PathBuf,
    /// Spawnable profiles, name → command line.
    pub profiles: BTreeMap<String, String>,
    pub heartbeat: Duration,
    pub inject_timeout: Duration,
    /// FWD-7: how long the agent has to leave `idle` after an inject before it counts as submitted.
    pub submit_confirm: Duration,
    pub prefetch: u16,
    pub inbox_max_length: u32,
    pub inbox_ttl: Duration,
    pub inbox_expires: Duration,
    pub dlq_max_length: u32,
    pub clock_skew: Duration,
    /// Largest accepted message body; bigger ones are rejected before any signature work.
    pub max_body_bytes: usize,
    pub nudge_initial: Duration,
    pub nudge_max: Duration,
    /// Log format: `json` or `text`.
    pub log_format: String,
    /// `FLEET_LEGACY_PANES` (comma list): the v1.0.0 pane ids whose `agent.<pane>.inbox` the
    /// operator knows of; those no local worker claims are reported at boot (`migration`).
    pub legacy_panes: Vec<String>,
    /// `FLEET_PRESENCE_BATCH` (`on`, the default, or `off`): whether this gateway declares
    /// `presence-batch` and sends one batched `_gateway` heartbeat per interval (SPEC §17). `off`
    /// makes it a per-entity gateway of SPEC §8 only — what a mixed fleet's old gateway does, so
    /// the suite can play one with the reference (PRB-4).
    pub presence_batch: bool,
    /// `FLEET_CONFIRM_STALL_MS`: with several nodes, confirms stalled this long while another node
    /// answers is a lost connection (`gateway/stall.rs`). Unset: off (opt-in, see the README's
    /// design notes: on RabbitMQ 3.10 the move comes early but the confirms do not).
    pub confirm_stall: Option<Duration>,
}

/// Where a raw value came from, so errors can name the right thing.
struct Source {
    env: BTreeMap<String, String>,
    file: BTreeMap<String, String>,
}

impl Source {
    fn get(&self, var: &'static str) -> Option<String> {
        if let Some(v) = self.env.get(var) {
            return Some(v.clone());
        }
        let key = var.trim_start_matches("FLEET_").to_ascii_lowercase();
        self.file.get(&key).cloned()
    }

    fn required(&self, var: &'static str) -> Result<String, ConfigError> {
        match self.get(var) {
            Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
            _ => Err(ConfigError::Missing { var }),
        }
    }

    fn path(&self, var: &'static str) -> Option<PathBuf> {
        self.get(var).filter(|v| !v.trim().is_empty()).map(|v| v.trim().into())
    }

    fn number<T: std::str::FromStr>(&self, var: &'static str, default: T) -> Result<T, ConfigError>
    where
        T::Err: std::fmt::Display,
    {
        match self.get(var) {
            None => Ok(default),
            Some(v) => v.trim().parse::<T>().map_err(|e| ConfigError::Invalid {
                var,
                reason: format!("{v:?} is not a valid number ({e})"),
            }),
        }
    }

    fn millis(&self, var: &'static str, default_ms: u64) -> Result<Duration, ConfigError> {
        let ms: u64 = self.number(var, default_ms)?;
        if ms == 0 {
            return Err(ConfigError::Invalid {
                var,
                reason: "must be greater than 0".into(),
            });
        }
        Ok(Duration::from_millis(ms))
    }
}

impl Config {
    /// Loads the configuration from the process environment and an optional TOML file.
    pub fn load(file: Option<&Path>) -> Result<Config, ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("FLEET_")).collect();
        Self::from_sources(env, file)
    }

    /// Builds a configuration from explicit variables (used by `load` and by tests).
    pub fn from_sources(env: BTreeMap<String, String>, file: Option<&Path>) -> Result<Config, ConfigError> {
        let file = match file {
            None => BTreeMap::new(),
            Some(path) => read_toml(path)?,
        };
        let src = Source { env, file };

        let host_id = src.required("FLEET_HOST_ID")?;
        if !valid_host_id(&host_id) {
            return Err(ConfigError::Invalid {
                var: "FLEET_HOST_ID",
                reason: format!("{host_id:?} does not match [a-z0-9][a-z0-9-]{{0,62}}"),
            });
        }
        let broker = broker_config(&src)?;
        let queue_type = parse_queue_type(src.get("FLEET_QUEUE_TYPE"))?;
        let queue_args = queue_args(&src, queue_type)?;
        let listen_raw = src.required("FLEET_LISTEN")?;
        let listen: SocketAddr = listen_raw.parse().map_err(|e| ConfigError::Invalid {
            var: "FLEET_LISTEN",
            reason: format!("{listen_raw:?} is not an address like 127.0.0.1:7700 ({e})"),
        })?;
        let admin_token = src.required("FLEET_ADMIN_TOKEN")?;
        if admin_token.len() < 8 {
            return Err(ConfigError::Invalid {
                var: "FLEET_ADMIN_TOKEN",
                reason: "must be at least 8 characters".into(),
            });
        }
        let profiles = parse_profiles(&src.get("FLEET_PROFILES").unwrap_or_default())?;
        let prefetch: u16 = src.number("FLEET_PREFETCH", 32)?;
        if prefetch == 0 {
            return Err(ConfigError::Invalid {
                var: "FLEET_PREFETCH",
                reason: "must be greater than 0 (an unbounded prefetch makes caps meaningless)".into(),
            });
        }
        let log_format = src.get("FLEET_LOG_FORMAT").unwrap_or_else(|| "text".into());
        if log_format != "text" && log_format != "json" {
            return Err(ConfigError::Invalid {
                var: "FLEET_LOG_FORMAT",
                reason: format!("{log_format:?} is neither \"text\" nor \"json\""),
            });
        }
        let inject_timeout = src.millis("FLEET_INJECT_TIMEOUT_MS", 30_000)?;
        let confirm_default = (inject_timeout.as_millis() as u64 / 4).clamp(1, 5_000);
        let cfg = Config {
            host_id,
            broker,
            queue_type,
            signing_key_file: src.required("FLEET_SIGNING_KEY_FILE")?.into(),
            peers_file: src.required("FLEET_PEERS_FILE")?.into(),
            trust_ca_file: src.path("FLEET_TRUST_CA_FILE"),
            host_cert_file: src.path("FLEET_HOST_CERT_FILE"),
            revoked_file: src.path("FLEET_REVOKED_FILE"),
            herdr_socket: src.required("FLEET_HERDR_SOCKET")?.into(),
            listen,
            admin_token,
            state_dir: src.required("FLEET_STATE_DIR")?.into(),
            profiles,
            heartbeat: src.millis("FLEET_HEARTBEAT_MS", 5_000)?,
            inject_timeout,
            submit_confirm: src.millis("FLEET_SUBMIT_CONFIRM_MS", confirm_default)?,
            prefetch,
            inbox_max_length: queue_args.inbox_max_length,
            inbox_ttl: queue_args.inbox_ttl,
            inbox_expires: queue_args.inbox_expires,
            dlq_max_length: queue_args.dlq_max_length,
            clock_skew: src.millis("FLEET_CLOCK_SKEW_MS", 30_000)?,
            max_body_bytes: src.number("FLEET_MAX_BODY_BYTES", 1_048_576)?,
            nudge_initial: src.millis("FLEET_NUDGE_INITIAL_MS", 5_000)?,
            nudge_max: src.millis("FLEET_NUDGE_MAX_MS", 300_000)?,
            log_format,
            legacy_panes: parse_legacy_panes(&src.get("FLEET_LEGACY_PANES").unwrap_or_default())?,
            presence_batch: parse_switch("FLEET_PRESENCE_BATCH", src.get("FLEET_PRESENCE_BATCH"), true)?,
            confirm_stall: match src.get("FLEET_CONFIRM_STALL_MS") {
                Some(_) => Some(src.millis("FLEET_CONFIRM_STALL_MS", 4_000)?),
                None => None,
            },
        };
        if cfg.submit_confirm >= cfg.inject_timeout {
            return Err(ConfigError::Invalid {
                var: "FLEET_SUBMIT_CONFIRM_MS",
                reason: "must be shorter than FLEET_INJECT_TIMEOUT_MS".into(),
            });
        }
        Ok(cfg)
    }

    /// What the queue declarations depend on ([`QueueArgs`]).
    pub fn queue_args(&self) -> QueueArgs {
        QueueArgs {
            queue_type: self.queue_type,
            inbox_max_length: self.inbox_max_length,
            inbox_ttl: self.inbox_ttl,
            inbox_expires: self.inbox_expires,
            dlq_max_length: self.dlq_max_length,
        }
    }

    /// What `fleet-gateway convert-inboxes` needs, from the process environment and an optional
    /// TOML file (the gateway's own): the broker (`FLEET_AMQP_URL`, TLS, heartbeat) and the
    /// arguments the gateway declares in quorum mode (`FLEET_INBOX_*`, `FLEET_DLQ_MAX_LENGTH`,
    /// with the gateway's defaults). Nothing else is read or required; `FLEET_QUEUE_TYPE` is not
    /// needed (the conversion always goes to quorum).
    pub fn load_for_conversion(file: Option<&Path>) -> Result<(BrokerConfig, QueueArgs), ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("FLEET_")).collect();
        Self::conversion_from_sources(env, file)
    }

    /// [`Config::load_for_conversion`] from explicit variables (and tests).
    pub fn conversion_from_sources(
        env: BTreeMap<String, String>,
        file: Option<&Path>,
    ) -> Result<(BrokerConfig, QueueArgs), ConfigError> {
        let file = match file {
            None => BTreeMap::new(),
            Some(path) => read_toml(path)?,
        };
        let src = Source { env, file };
        Ok((broker_config(&src)?, queue_args(&src, QueueType::Quorum)?))
    }

    /// The effective configuration as `KEY = value` lines, secrets masked (for `check-config`).
    pub fn describe(&self) -> String {
        let mut out = String::new();
        let mut line = |k: &str, v: String| out.push_str(&format!("{k} = {v}\n"));
        line("FLEET_HOST_ID", self.host_id.clone());
        line("FLEET_AMQP_URL", self.broker.masked());
        line("FLEET_QUEUE_TYPE", self.queue_type.as_str().into());
        if self.broker.is_tls() {
            let roots = match &self.broker.tls_ca {
                Some(r) => format!("{} ({} certificate(s))", r.path.display(), r.count),
                None => "(unset: the system CA bundle)".into(),
            };
            line(crate::tls::CA_VAR, roots);
        }
        line("FLEET_SIGNING_KEY_FILE", self.signing_key_file.display().to_string());
        line("FLEET_PEERS_FILE", self.peers_file.display().to_string());
        for (var, p) in [
            ("FLEET_TRUST_CA_FILE", &self.trust_ca_file),
            ("FLEET_HOST_CERT_FILE", &self.host_cert_file),
            ("FLEET_REVOKED_FILE", &self.revoked_file),
        ] {
            line(var, p.as_ref().map_or("(unset)".into(), |p| p.display().to_string()));
        }
        line("FLEET_HERDR_SOCKET", self.herdr_socket.display().to_string());
        line("FLEET_LISTEN", self.listen.to_string());
        line("FLEET_ADMIN_TOKEN", "********".into());
        line("FLEET_STATE_DIR", self.state_dir.display().to_string());
        let profiles: Vec<String> = self.profiles.iter().map(|(k, v)| format!("{k}={v}")).collect();
        line("FLEET_PROFILES", profiles.join(";"));
        line("FLEET_HEARTBEAT_MS", self.heartbeat.as_millis().to_string());
        line("FLEET_INJECT_TIMEOUT_MS", self.inject_timeout.as_millis().to_string());
        line("FLEET_SUBMIT_CONFIRM_MS", self.submit_confirm.as_millis().to_string());
        line("FLEET_PREFETCH", self.prefetch.to_string());
        line("FLEET_INBOX_MAX_LENGTH", self.inbox_max_length.to_string());
        line("FLEET_INBOX_TTL_MS", self.inbox_ttl.as_millis().to_string());
        line("FLEET_INBOX_EXPIRES_MS", self.inbox_expires.as_millis().to_string());
        line("FLEET_DLQ_MAX_LENGTH", self.dlq_max_length.to_string());
        line("FLEET_CLOCK_SKEW_MS", self.clock_skew.as_millis().to_string());
        line("FLEET_MAX_BODY_BYTES", self.max_body_bytes.to_string());
        line("FLEET_AMQP_HEARTBEAT_S", self.broker.amqp_heartbeat_s.to_string());
        line("FLEET_NUDGE_INITIAL_MS", self.nudge_initial.as_millis().to_string());
        line("FLEET_NUDGE_MAX_MS", self.nudge_max.as_millis().to_string());
        line(
            "FLEET_CONFIRM_STALL_MS",
            self.confirm_stall
                .map_or_else(|| "off".to_string(), |d| d.as_millis().to_string()),
        );
        line("FLEET_LOG_FORMAT", self.log_format.clone());
        line("FLEET_LEGACY_PANES", self.legacy_panes.join(","));
        line(
            "FLEET_PRESENCE_BATCH",
            if self.presence_batch { "on" } else { "off" }.into(),
        );
        out
    }
}

/// `FLEET_AMQP_URL` (every entry checked, CLU-1), `FLEET_TLS_CA_FILE` (applies to each node),
/// `FLEET_AMQP_HEARTBEAT_S`.
fn broker_config(src: &Source) -> Result<BrokerConfig, ConfigError> {
    let amqp_urls = parse_amqp_urls(&src.required("FLEET_AMQP_URL")?)?;
    let tls_ca = match src.get(crate::tls::CA_VAR) {
        Some(p) if !p.trim().is_empty() => {
            Some(
                crate::tls::read_pem(Path::new(p.trim())).map_err(|e| ConfigError::Invalid {
                    var: crate::tls::CA_VAR,
                    reason: e.to_string(),
                })?,
            )
        }
        _ => None,
    };
    let broker = BrokerConfig {
        amqp_urls,
        tls_ca,
        amqp_heartbeat_s: src.number("FLEET_AMQP_HEARTBEAT_S", 10)?,
    };
    if broker.tls_ca.is_some() && !broker.is_tls() {
        return Err(ConfigError::Invalid {
            var: crate::tls::CA_VAR,
            reason: "is set but FLEET_AMQP_URL is not amqps:// (the CA would never be used)".into(),
        });
    }
    Ok(broker)
}

/// `FLEET_AMQP_URL`: one node URL, or a comma-separated list of them (CLU-1). Every entry must
/// be a valid `amqp://` or `amqps://` URL; all use the same scheme (no node is reached in clear
/// text while the others use TLS), the same vhost and the same login. An error names the entry
/// (1-based, password masked). A comma inside a password must be percent-encoded (`%2C`).
fn parse_amqp_urls(raw: &str) -> Result<Vec<String>, ConfigError> {
    let invalid = |reason: String| ConfigError::Invalid {
        var: "FLEET_AMQP_URL",
        reason,
    };
    let entries: Vec<&str> = raw.split(',').map(str::trim).collect();
    let n = entries.len();
    let mut first: Option<lapin::uri::AMQPUri> = None;
    let mut urls = Vec::with_capacity(n);
    for (i, entry) in entries.iter().enumerate() {
        let which = if n == 1 {
            String::new()
        } else {
            format!("entry {} of {n} ", i + 1)
        };
        if entry.is_empty() {
            return Err(invalid(format!("{which}is empty (a stray comma?)")));
        }
        let shown = mask_url_password(entry);
        if !(entry.starts_with("amqp://") || entry.starts_with("amqps://")) {
            return Err(invalid(format!("{which}{shown:?} must start with amqp:// or amqps://")));
        }
        let uri: lapin::uri::AMQPUri = entry
            .parse()
            .map_err(|e: String| invalid(format!("{which}{shown:?} is not a valid AMQP URL ({e})")))?;
        if let Some(f) = &first {
            if f.scheme != uri.scheme {
                return Err(invalid(format!(
                    "{which}{shown:?} mixes amqp:// and amqps:// with entry 1: every node is reached the same way"
                )));
            }
            if f.vhost != uri.vhost {
                return Err(invalid(format!(
                    "{which}{shown:?} names vhost {:?} but entry 1 names {:?}: every node URL uses the same vhost",
                    uri.vhost, f.vhost
                )));
            }
            if f.authority.userinfo != uri.authority.userinfo {
                return Err(invalid(format!(
                    "{which}{shown:?} has another login than entry 1: every node URL uses the same login"
                )));
            }
        } else {
            first = Some(uri);
        }
        urls.push((*entry).to_string());
    }
    Ok(urls)
}

/// `FLEET_QUEUE_TYPE`: `classic` (also when blank or unset) or `quorum`; nothing else.
fn parse_queue_type(raw: Option<String>) -> Result<QueueType, ConfigError> {
    match raw.as_deref().map(str::trim) {
        None | Some("") | Some("classic") => Ok(QueueType::Classic),
        Some("quorum") => Ok(QueueType::Quorum),
        Some(other) => Err(ConfigError::Invalid {
            var: "FLEET_QUEUE_TYPE",
            reason: format!("{other:?} is neither \"classic\" nor \"quorum\""),
        }),
    }
}

/// The queue arguments' variables with their TOP-4 defaults (shared by the gateway and the
/// conversion).
fn queue_args(src: &Source, queue_type: QueueType) -> Result<QueueArgs, ConfigError> {
    Ok(QueueArgs {
        queue_type,
        inbox_max_length: src.number("FLEET_INBOX_MAX_LENGTH", 1_000)?,
        inbox_ttl: src.millis("FLEET_INBOX_TTL_MS", 86_400_000)?,
        inbox_expires: src.millis("FLEET_INBOX_EXPIRES_MS", 604_800_000)?,
        dlq_max_length: src.number("FLEET_DLQ_MAX_LENGTH", 10_000)?,
    })
}

/// An `on`/`off` switch (blank: `default`). Nothing else is accepted, so a typo such as `of`
/// fails at start instead of silently keeping the default.
fn parse_switch(var: &'static str, raw: Option<String>, default: bool) -> Result<bool, ConfigError> {
    match raw.as_deref().map(str::trim) {
        None | Some("") => Ok(default),
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(ConfigError::Invalid {
            var,
            reason: format!("{other:?} is neither \"on\" nor \"off\""),
        }),
    }
}

/// `FLEET_LEGACY_PANES`: comma-separated v1.0.0 pane ids (`w1:p2,w1:p5`), blanks ignored.
fn parse_legacy_panes(raw: &str) -> Result<Vec<String>, ConfigError> {
    let mut panes = Vec::new();
    for p in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if !crate::migration::valid_legacy_pane(p) {
            return Err(ConfigError::Invalid {
                var: "FLEET_LEGACY_PANES",
                reason: format!("{p:?} is not a pane id (printable ASCII, no spaces, at most 200 bytes)"),
            });
        }
        if !panes.iter().any(|q| q == p) {
            panes.push(p.to_string());
        }
    }
    Ok(panes)
}

/// Host ids as SPEC §0 defines them: `[a-z0-9][a-z0-9-]{0,62}`.
pub fn valid_host_id(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && (b[0].is_ascii_lowercase() || b[0].is_ascii_digit())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
}

fn mask_url_password(url: &str) -> String {
    // amqp://user:pass@host → amqp://user:****@host
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let Some((creds, host)) = rest.split_once('@') else {
        return url.to_string();
    };
    match creds.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:****@{host}"),
        None => url.to_string(),
    }
}

fn parse_profiles(raw: &str) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for part in raw.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, cmd)) = part.split_once('=') else {
            return Err(ConfigError::Invalid {
                var: "FLEET_PROFILES",
                reason: format!("entry {part:?} is not name=command"),
            });
        };
        let (name, cmd) = (name.trim(), cmd.trim());
        if name.is_empty() || cmd.is_empty() {
            return Err(ConfigError::Invalid {
                var: "FLEET_PROFILES",
                reason: format!("entry {part:?} has an empty name or command"),
            });
        }
        out.insert(name.to_string(), cmd.to_string());
    }
    Ok(out)
}

fn read_toml(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::File {
        path: path.to_path_buf(),
        source,
    })?;
    let table: toml::Table = text.parse().map_err(|e: toml::de::Error| ConfigError::Toml {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut out = BTreeMap::new();
    for (k, v) in table {
        let s = match v {
            toml::Value::String(s) => s,
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ConfigError::Toml {
                    path: path.to_path_buf(),
                    reason: format!("key {k:?} must be a string or number, not {}", other.type_str()),
                });
            }
        };
        out.insert(k.to_ascii_lowercase(), s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    fn base() -> BTreeMap<String, String> {
        [
            ("FLEET_HOST_ID", "host-a"),
            ("FLEET_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
            ("FLEET_SIGNING_KEY_FILE", "/k"),
            ("FLEET_PEERS_FILE", "/p"),
            ("FLEET_HERDR_SOCKET", "/s"),
            ("FLEET_LISTEN", "127.0.0.1:7700"),
            ("FLEET_ADMIN_TOKEN", "0123456789"),
            ("FLEET_STATE_DIR", "/state"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    #[test]
    fn the_amqp_url_keeps_what_it_sets() {
        let mut env = base();
        env.insert(
            "FLEET_AMQP_URL".into(),
            "amqp://u:p@b:5672/v?frame_max=131072&heartbeat=30".into(),
        );
        let c = Config::from_sources(env, None).expect("valid");
        assert_eq!(
            c.broker.url_effective(0),
            "amqp://u:p@b:5672/v?frame_max=131072&heartbeat=30"
        );
        let mut env = base();
        env.insert("FLEET_AMQP_URL".into(), "amqp://u:p@b:5672/v?channel_max=100".into());
        let c = Config::from_sources(env, None).expect("valid");
        assert_eq!(
            c.broker.url_effective(0),
            format!("amqp://u:p@b:5672/v?channel_max=100&heartbeat=10&frame_max={AMQP_FRAME_MAX}")
        );
    }

    #[test]
    fn defaults_match_the_spec() {
        let c = Config::from_sources(base(), None).expect("valid");
        assert_eq!(c.prefetch, 32);
        assert_eq!(c.inbox_max_length, 1000);
        assert_eq!(c.inbox_ttl, Duration::from_millis(86_400_000));
        assert_eq!(c.inbox_expires, Duration::from_millis(604_800_000));
        assert_eq!(c.dlq_max_length, 10_000);
        assert_eq!(c.max_body_bytes, 1 << 20);
        assert_eq!(c.heartbeat, Duration::from_secs(5));
        assert_eq!(c.inject_timeout, Duration::from_secs(30));
        assert_eq!(c.submit_confirm, Duration::from_secs(5), "FWD-7 confirm bound");
        assert!(
            c.presence_batch,
            "the reference batches its presence unless told not to"
        );
        assert!(
            c.broker
                .url_effective(0)
                .ends_with(&format!("?heartbeat=10&frame_max={AMQP_FRAME_MAX}"))
        );
        let mut env = base();
        env.insert("FLEET_INJECT_TIMEOUT_MS".into(), "8000".into());
        let short = Config::from_sources(env, None).expect("valid");
        assert_eq!(
            short.submit_confirm,
            Duration::from_secs(2),
            "a short bound keeps room for the gate"
        );
    }

    #[rstest]
    #[case("FLEET_HOST_ID", "Host_A")]
    #[case("FLEET_AMQP_URL", "http://x")]
    #[case("FLEET_LISTEN", "not-an-addr")]
    #[case("FLEET_PRESENCE_BATCH", "of")]
    #[case("FLEET_PREFETCH", "0")]
    #[case("FLEET_PREFETCH", "lots")]
    #[case("FLEET_HEARTBEAT_MS", "-5")]
    #[case("FLEET_CONFIRM_STALL_MS", "0")]
    #[case("FLEET_PROFILES", "claude")]
    #[case("FLEET_ADMIN_TOKEN", "short")]
    fn a_bad_value_names_its_variable(#[case] var: &str, #[case] value: &str) {
        let mut env = base();
        env.insert(var.to_string(), value.to_string());
        let err = Config::from_sources(env, None).expect_err("must be rejected");
        assert!(err.to_string().contains(var), "{err}");
    }

    #[test]
    fn the_amqp_url_may_be_a_node_list() {
        let mut env = base();
        env.insert(
            "FLEET_AMQP_URL".into(),
            "amqp://gw:s3cret@n1:5672/fleet, amqp://gw:s3cret@n2:5673/fleet,amqp://gw:s3cret@n3/fleet?heartbeat=4"
                .into(),
        );
        let c = Config::from_sources(env, None).expect("valid");
        assert_eq!(c.broker.nodes(), 3);
        assert_eq!(
            c.broker.url_effective(1),
            format!("amqp://gw:s3cret@n2:5673/fleet?heartbeat=10&frame_max={AMQP_FRAME_MAX}")
        );
        assert_eq!(
            c.broker.url_effective(2),
            format!("amqp://gw:s3cret@n3/fleet?heartbeat=4&frame_max={AMQP_FRAME_MAX}"),
            "each entry keeps what it sets"
        );
        assert_eq!(c.broker.url_effective(3), c.broker.url_effective(0), "the list wraps");
        assert_eq!(c.broker.node_masked(1), "amqp://gw:****@n2:5673/fleet");
        let shown = c.describe();
        assert!(
            shown.contains(
                "FLEET_AMQP_URL = amqp://gw:****@n1:5672/fleet,amqp://gw:****@n2:5673/fleet,amqp://gw:****@n3/fleet?heartbeat=4\n"
            ),
            "{shown}"
        );
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[rstest]
    #[case("amqp://u:p@n1/v,", "entry 2 of 2 is empty")]
    #[case(
        "amqp://u:p@n1/v,http://u:p@n2/v",
        "entry 2 of 2 \"http://u:****@n2/v\" must start with amqp://"
    )]
    #[case(
        "amqp://u:p@n1/v,amqps://u:p@n2/v",
        "entry 2 of 2 \"amqps://u:****@n2/v\" mixes amqp:// and amqps://"
    )]
    #[case(
        "amqp://u:p@n1/v,amqp://u:p@n2/w",
        "entry 2 of 2 \"amqp://u:****@n2/w\" names vhost \"w\""
    )]
    #[case(
        "amqp://u:p@n1/v,amqp://u:q@n2/v",
        "entry 2 of 2 \"amqp://u:****@n2/v\" has another login"
    )]
    #[case("amqp://u:p@n1/v,amqp://x:p@n2/v", "has another login")]
    #[case("amqp://u:p@n1:99999/v", "is not a valid AMQP URL")]
    fn a_bad_node_url_names_the_variable_and_the_entry(#[case] value: &str, #[case] says: &str) {
        let mut env = base();
        env.insert("FLEET_AMQP_URL".into(), value.into());
        let err = Config::from_sources(env, None)
            .expect_err("must be rejected")
            .to_string();
        assert!(err.contains("FLEET_AMQP_URL"), "{err}");
        assert!(err.contains(says), "{err}");
        assert!(!err.contains(":p@") && !err.contains(":q@"), "password shown: {err}");
    }

    #[rstest]
    #[case(None, QueueType::Classic)]
    #[case(Some(""), QueueType::Classic)]
    #[case(Some("classic"), QueueType::Classic)]
    #[case(Some("quorum"), QueueType::Quorum)]
    fn the_queue_type_is_classic_unless_quorum(#[case] value: Option<&str>, #[case] want: QueueType) {
        let mut env = base();
        if let Some(v) = value {
            env.insert("FLEET_QUEUE_TYPE".into(), v.into());
        }
        let c = Config::from_sources(env, None).expect("valid");
        assert_eq!(c.queue_type, want);
        assert_eq!(c.queue_args().queue_type, want);
        assert!(
            c.describe()
                .contains(&format!("FLEET_QUEUE_TYPE = {}\n", want.as_str()))
        );
    }

    #[rstest]
    #[case("Quorum")]
    #[case("stream")]
    #[case("quorum,classic")]
    fn a_bad_queue_type_names_the_field(#[case] value: &str) {
        let mut env = base();
        env.insert("FLEET_QUEUE_TYPE".into(), value.into());
        let err = Config::from_sources(env, None)
            .expect_err("must be rejected")
            .to_string();
        assert!(err.contains("FLEET_QUEUE_TYPE"), "{err}");
    }

    #[test]
    fn the_conversion_reads_only_the_broker_and_the_queue_arguments() {
        let env: BTreeMap<String, String> = [
            ("FLEET_AMQP_URL", "amqp://u:p@n1/v,amqp://u:p@n2/v"),
            ("FLEET_INBOX_MAX_LENGTH", "50"),
            ("FLEET_QUEUE_TYPE", "classic"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let (broker, args) = Config::conversion_from_sources(env, None).expect("valid");
        assert_eq!(broker.nodes(), 2);
        assert_eq!(args.queue_type, QueueType::Quorum, "always converts to quorum");
        assert_eq!(args.inbox_max_length, 50);
        let gw = Config::from_sources(base(), None).expect("valid");
        let mut defaults = gw.queue_args();
        defaults.queue_type = QueueType::Quorum;
        let (_, conv) = Config::conversion_from_sources(
            [("FLEET_AMQP_URL".to_string(), "amqp://u:p@n1/v".to_string())].into(),
            None,
        )
        .expect("valid");
        assert_eq!(conv, defaults, "the same defaults as the gateway");
        let err = Config::conversion_from_sources(BTreeMap::new(), None).expect_err("no URL");
        assert!(err.to_string().contains("FLEET_AMQP_URL"), "{err}");
    }

    #[test]
    fn a_missing_value_names_its_variable() {
        let mut env = base();
        env.remove("FLEET_STATE_DIR");
        let err = Config::from_sources(env, None).expect_err("must be rejected");
        assert!(err.to_string().contains("FLEET_STATE_DIR"), "{err}");
    }

    #[test]
    fn profiles_parse_and_env_wins_over_file() {
        let dir = std::env::temp_dir().join(format!("fleet-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("gw.toml");
        std::fs::write(&path, "host_id = \"from-file\"\nprefetch = 7\n").expect("write");
        let mut env = base();
        env.insert("FLEET_PROFILES".into(), "claude=claude --yes; codex=codex".into());
        let c = Config::from_sources(env, Some(&path)).expect("valid");
        assert_eq!(c.host_id, "host-a", "env wins");
        assert_eq!(c.prefetch, 7, "file fills what env leaves");
        assert_eq!(c.profiles.get("claude").map(String::as_str), Some("claude --yes"));
        assert!(!c.describe().contains("0123456789"), "secrets masked");
        let _ = std::fs::remove_dir_all(dir);
    }
}
