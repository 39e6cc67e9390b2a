//! The SPEC §15 environment contract: every `FLEET_*` variable the gateway reads, its default,
//! its parsing, and the validation error that names it. Where the raw values come from (the
//! process environment over a TOML file) is [`super::layers`]' concern.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use super::layers::{Source, read_toml};
use super::{BrokerConfig, Config, ConfigError, QueueArgs, QueueType, mask_url_password, valid_host_id};

impl Config {
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
        let worker_queue_type = match src.get("FLEET_WORKER_QUEUE_TYPE").filter(|v| !v.trim().is_empty()) {
            Some(raw) => Some(parse_type("FLEET_WORKER_QUEUE_TYPE", &raw)?),
            None => None,
        };
        let (listen, admin_token) = admin_api(&src)?;
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
            worker_queue_type,
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
            unknown_host_hold: std::time::Duration::from_secs(src.number("FLEET_UNKNOWN_HOST_HOLD_S", 120u64)?),
            max_body_bytes: src.number("FLEET_MAX_BODY_BYTES", 1_048_576)?,
            nudge_initial: src.millis("FLEET_NUDGE_INITIAL_MS", 5_000)?,
            nudge_max: src.millis("FLEET_NUDGE_MAX_MS", 300_000)?,
            log_format,
            legacy_panes: parse_legacy_panes(&src.get("FLEET_LEGACY_PANES").unwrap_or_default())?,
            presence_batch: parse_switch("FLEET_PRESENCE_BATCH", src.get("FLEET_PRESENCE_BATCH"), true)?,
            delay_exchange: parse_switch("FLEET_DELAY_EXCHANGE", src.get("FLEET_DELAY_EXCHANGE"), true)?,
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

    /// What an entity's inbox is declared with: [`Config::queue_args`], of the worker type
    /// (`FLEET_WORKER_QUEUE_TYPE`, not SPEC) for a worker's inbox when that is set.
    pub fn inbox_args(&self, worker: bool) -> QueueArgs {
        let mut args = self.queue_args();
        if let Some(t) = self.worker_queue_type.filter(|_| worker) {
            args.queue_type = t;
        }
        args
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

    /// [`Config::load_admin`] from explicit variables (and tests).
    pub fn admin_from_sources(
        env: BTreeMap<String, String>,
        file: Option<&Path>,
    ) -> Result<(SocketAddr, String), ConfigError> {
        let file = match file {
            None => BTreeMap::new(),
            Some(path) => read_toml(path)?,
        };
        admin_api(&Source { env, file })
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
        if let Some(t) = self.worker_queue_type {
            line(
                "FLEET_WORKER_QUEUE_TYPE",
                format!("{} (reference only, not SPEC §16)", t.as_str()),
            );
        }
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
        line(
            "FLEET_UNKNOWN_HOST_HOLD_S",
            self.unknown_host_hold.as_secs().to_string(),
        );
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
        line(
            "FLEET_DELAY_EXCHANGE",
            if self.delay_exchange { "on" } else { "off" }.into(),
        );
        out
    }
}

/// The local API's address and admin token (`FLEET_LISTEN`, `FLEET_ADMIN_TOKEN`): all that the
/// commands asking a running gateway need.
fn admin_api(src: &Source) -> Result<(SocketAddr, String), ConfigError> {
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
    Ok((listen, admin_token))
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
        None | Some("") => Ok(QueueType::Classic),
        Some(other) => parse_type("FLEET_QUEUE_TYPE", other),
    }
}

/// `classic` or `quorum` for `var`; nothing else.
fn parse_type(var: &'static str, raw: &str) -> Result<QueueType, ConfigError> {
    match raw.trim() {
        "classic" => Ok(QueueType::Classic),
        "quorum" => Ok(QueueType::Quorum),
        other => Err(ConfigError::Invalid {
            var,
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
        if !crate::ids::valid_legacy_pane(p) {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{AMQP_FRAME_MAX, base};
    use rstest::rstest;

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
    #[case(None, QueueType::Quorum)]
    #[case(Some(""), QueueType::Quorum)]
    #[case(Some("classic"), QueueType::Classic)]
    #[case(Some("quorum"), QueueType::Quorum)]
    fn workers_inboxes_take_the_worker_type_when_one_is_set(#[case] value: Option<&str>, #[case] worker: QueueType) {
        let mut env = base();
        env.insert("FLEET_QUEUE_TYPE".into(), "quorum".into());
        if let Some(v) = value {
            env.insert("FLEET_WORKER_QUEUE_TYPE".into(), v.into());
        }
        let c = Config::from_sources(env, None).expect("valid");
        assert_eq!(c.inbox_args(true).queue_type, worker, "a worker's inbox");
        assert_eq!(c.inbox_args(false).queue_type, QueueType::Quorum, "a main's inbox");
        assert_eq!(c.queue_args().queue_type, QueueType::Quorum, "control and dlq");
        assert_eq!(
            c.describe().contains("FLEET_WORKER_QUEUE_TYPE"),
            value.is_some_and(|v| !v.is_empty())
        );
    }

    #[test]
    fn a_bad_worker_queue_type_names_the_field() {
        let mut env = base();
        env.insert("FLEET_WORKER_QUEUE_TYPE".into(), "stream".into());
        let err = Config::from_sources(env, None).expect_err("rejected").to_string();
        assert!(err.contains("FLEET_WORKER_QUEUE_TYPE"), "{err}");
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
}
