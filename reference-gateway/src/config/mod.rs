//! Gateway configuration: the SPEC §15 environment contract, optionally layered over a TOML file.
//!
//! Operators and the conformance suite configure a gateway the same way: `FLEET_*` environment
//! variables (which win) over an optional TOML file whose keys are the variable names without the
//! `FLEET_` prefix, lower-cased (`host_id`, `amqp_url`, …). Every bad or missing value stops the
//! gateway at start with an error naming the variable, never a half-configured gateway.
//!
//! One file per concern:
//! - [`env`](mod@env) — the environment contract: every `FLEET_*` variable, its default, its
//!   parsing and the validation message naming it
//! - [`layers`] — the layering: the process environment over the optional TOML file
//!
//! This file holds the values both produce and the rest of the gateway reads.

pub mod env;
pub mod layers;

pub use crate::ids::valid_host_id;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
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
    /// `FLEET_WORKER_QUEUE_TYPE` — reference only, **not SPEC** (CLU-2 declares every inbox of
    /// `queue_type`): the type of workers' inboxes when set, for measuring proposal P1 of
    /// `docs/CLUSTER-SIZING.md` (quorum for mains, orchestrators and the host queues; classic for
    /// workers). Unset: `queue_type`.
    pub worker_queue_type: Option<QueueType>,
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
    /// [C-25] `FLEET_UNKNOWN_HOST_HOLD_S`: how long after its (re)connect a message from a host not
    /// heard from since is held before [C-7] judges it.
    pub unknown_host_hold: Duration,
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
    /// `FLEET_DELAY_EXCHANGE` (`on`, the default, or `off`; reference only, not SPEC): whether the
    /// gateway tries to declare the optional `bridge.delay` (TOP-1). A broker without the
    /// x-delayed-message type refuses the declare, and RabbitMQ logs every refusal at ERROR (one
    /// line per gateway start, 3.10 and 4.x alike); an operator who knows the plugin is absent
    /// turns the attempt off.
    pub delay_exchange: bool,
    /// `FLEET_CONFIRM_STALL_MS`: with several nodes, confirms stalled this long while another node
    /// answers is a lost connection (`gateway/stall.rs`). Unset: off (opt-in, see the README's
    /// design notes: on RabbitMQ 3.10 the move comes early but the confirms do not).
    pub confirm_stall: Option<Duration>,
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

/// The smallest valid environment, which the unit tests vary.
#[cfg(test)]
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
