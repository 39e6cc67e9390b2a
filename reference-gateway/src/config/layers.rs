//! The layering of the configuration: `FLEET_*` variables from the process environment, which
//! win, over an optional TOML file whose keys are the variable names without the `FLEET_`
//! prefix, lower-cased. What each variable means is [`super::env`]' concern.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{BrokerConfig, Config, ConfigError, QueueArgs};

/// Where a raw value came from, so errors can name the right thing.
pub(super) struct Source {
    pub(super) env: BTreeMap<String, String>,
    pub(super) file: BTreeMap<String, String>,
}

impl Source {
    pub(super) fn get(&self, var: &'static str) -> Option<String> {
        if let Some(v) = self.env.get(var) {
            return Some(v.clone());
        }
        let key = var.trim_start_matches("FLEET_").to_ascii_lowercase();
        self.file.get(&key).cloned()
    }

    pub(super) fn required(&self, var: &'static str) -> Result<String, ConfigError> {
        match self.get(var) {
            Some(v) if !v.trim().is_empty() => Ok(v.trim().to_string()),
            _ => Err(ConfigError::Missing { var }),
        }
    }

    pub(super) fn path(&self, var: &'static str) -> Option<PathBuf> {
        self.get(var).filter(|v| !v.trim().is_empty()).map(|v| v.trim().into())
    }

    pub(super) fn number<T: std::str::FromStr>(&self, var: &'static str, default: T) -> Result<T, ConfigError>
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

    pub(super) fn millis(&self, var: &'static str, default_ms: u64) -> Result<Duration, ConfigError> {
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
    /// What the commands that ask a running gateway need (`trust show`, `ready`): `FLEET_LISTEN`
    /// and `FLEET_ADMIN_TOKEN`, from the process environment and an optional TOML file. Nothing
    /// else is read or required.
    pub fn load_admin(file: Option<&Path>) -> Result<(std::net::SocketAddr, String), ConfigError> {
        let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("FLEET_")).collect();
        Self::admin_from_sources(env, file)
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
}

pub(super) fn read_toml(path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
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
    use crate::config::{Config, base};

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
