//! What a conformance run is told besides the features: the capabilities a gateway declares and
//! the known-failures baseline, read from TOML and checked against the requirement registry.
//!
//! Why a module of their own: both are user input, so both fail with the file and the reason
//! ([`InputError`]) before anything runs; the verdict (`super::verdict`) only consumes them.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::registry::Registry;
use super::verdict::BrokerRun;

/// A capabilities or baseline file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Toml {
        path: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {reason}")]
    Invalid { path: String, reason: String },
}

fn read(path: &Path) -> Result<String, InputError> {
    std::fs::read_to_string(path).map_err(|source| InputError::Io {
        path: path.display().to_string(),
        source,
    })
}

fn toml_err(origin: &str) -> impl FnOnce(toml::de::Error) -> InputError + '_ {
    move |e| InputError::Toml {
        path: origin.to_string(),
        source: Box::new(e),
    }
}

/// The optional parts a gateway declares it implements (`capabilities = ["stop", …]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Capabilities {
    pub declared: BTreeSet<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CapabilitiesFile {
    capabilities: Vec<String>,
}

impl Capabilities {
    pub fn load(path: &Path, registry: &Registry) -> Result<Capabilities, InputError> {
        Capabilities::parse(&path.display().to_string(), &read(path)?, registry)
    }

    /// Parses a capabilities file; every name must be a capability of the registry.
    pub fn parse(origin: &str, text: &str, registry: &Registry) -> Result<Capabilities, InputError> {
        let file: CapabilitiesFile = toml::from_str(text).map_err(toml_err(origin))?;
        let mut declared = BTreeSet::new();
        for name in file.capabilities {
            if registry.capability(&name).is_none() {
                let known: Vec<&str> = registry.capabilities.iter().map(|c| c.name.as_str()).collect();
                return Err(InputError::Invalid {
                    path: origin.to_string(),
                    reason: format!("unknown capability {name:?}; known: {known:?}"),
                });
            }
            declared.insert(name);
        }
        Ok(Capabilities { declared })
    }

    /// Every capability of the registry.
    pub fn all(registry: &Registry) -> Capabilities {
        Capabilities {
            declared: registry.capabilities.iter().map(|c| c.name.clone()).collect(),
        }
    }

    /// Scenario tags of the capabilities *not* declared: scenarios carrying one are not run.
    pub fn excluded_tags(&self, registry: &Registry) -> Vec<String> {
        registry
            .capabilities
            .iter()
            .filter(|c| !self.declared.contains(&c.name))
            .map(|c| c.tag.clone())
            .collect()
    }
}

/// One known failure: requirement `requirement` fails on `broker` (a kind such as `rabbitmq`, a
/// label such as `container:rabbitmq`, or every broker when absent).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KnownFailure {
    pub requirement: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl KnownFailure {
    pub(crate) fn covers(&self, id: &str, run: &BrokerRun) -> bool {
        self.requirement == id
            && self
                .broker
                .as_deref()
                .is_none_or(|b| b.eq_ignore_ascii_case(&run.label) || b.eq_ignore_ascii_case(&run.kind))
    }
}

/// The known-failures baseline (`[[known-failure]]` entries).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    #[serde(rename = "known-failure", default)]
    pub known: Vec<KnownFailure>,
}

impl Baseline {
    pub fn load(path: &Path, registry: &Registry) -> Result<Baseline, InputError> {
        Baseline::parse(&path.display().to_string(), &read(path)?, registry)
    }

    /// Parses a baseline; every requirement must be in the registry.
    pub fn parse(origin: &str, text: &str, registry: &Registry) -> Result<Baseline, InputError> {
        let b: Baseline = toml::from_str(text).map_err(toml_err(origin))?;
        if let Some(k) = b.known.iter().find(|k| registry.get(&k.requirement).is_none()) {
            return Err(InputError::Invalid {
                path: origin.to_string(),
                reason: format!("known-failure names unknown requirement {:?}", k.requirement),
            });
        }
        Ok(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_broker_baselines_load_and_say_why() {
        let registry = Registry::load(&super::super::registry::default_path()).expect("registry");
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/baselines");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("fixtures/baselines") {
            let path = entry.expect("entry").path();
            let b = Baseline::load(&path, &registry).expect("a valid baseline");
            for k in &b.known {
                seen += 1;
                assert!(
                    k.broker.is_some(),
                    "{}: a broker limit names its broker",
                    path.display()
                );
                assert!(
                    k.reason.as_deref().is_some_and(|r| r.len() > 40),
                    "{}: {} needs its reason and reference",
                    path.display(),
                    k.requirement
                );
            }
        }
        assert!(seen > 0);
    }

    #[test]
    fn capabilities_and_baselines_parse_and_name_only_known_things() {
        let reg = crate::conformance::registry::test_registry();
        let c = Capabilities::parse("c", "capabilities = [\"stop\"]", &reg).expect("parses");
        assert_eq!(c.excluded_tags(&reg), ["cap-submit-confirm"]);
        assert!(Capabilities::parse("c", "capabilities = [\"teleport\"]", &reg).is_err());
        let b = Baseline::parse(
            "b",
            "[[known-failure]]\nrequirement = \"FWD-1\"\nbroker = \"lavinmq\"\nreason = \"issue 12\"\n",
            &reg,
        )
        .expect("parses");
        assert_eq!(b.known[0].reason.as_deref(), Some("issue 12"));
        assert!(Baseline::parse("b", "[[known-failure]]\nrequirement = \"XYZ-9\"\n", &reg).is_err());
    }
}
