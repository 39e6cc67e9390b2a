//! Which brokers a run asks for: `FLEET_E2E_BROKERS` entries (`container:rabbitmq`,
//! `url:lavinmq`, …) parsed into a [`BrokerSpec`] — product ([`BrokerKind`]) and provider
//! ([`ProviderKind`]) — and what a spec's provider cannot do (restart, TLS), so the runner leaves
//! those scenarios out and says why instead of failing them.

use std::fmt;
use std::str::FromStr;

use super::{BrokerError, url};

/// Which broker product.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokerKind {
    RabbitMq,
    LavinMq,
}

impl fmt::Display for BrokerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BrokerKind::RabbitMq => "rabbitmq",
            BrokerKind::LavinMq => "lavinmq",
        })
    }
}

/// Who provides the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ProviderKind {
    /// A docker container started (and removed) by the suite.
    Container,
    /// A local `rabbitmq-server` process started (and stopped) by the suite.
    Process,
    /// A broker run by someone else, at `FLEET_BROKER_URL` / `FLEET_BROKER_HTTP`.
    Url,
}

impl ProviderKind {
    /// Why the suite cannot restart a broker of this provider, if it cannot.
    pub fn cannot_restart(&self) -> Option<&'static str> {
        match self {
            ProviderKind::Container | ProviderKind::Process => None,
            ProviderKind::Url => {
                Some("the url: provider attaches to a broker someone else runs; the suite cannot stop and start it")
            }
        }
    }
}

/// The tag of scenarios that need the broker's amqps listener (SEC-1).
pub const TLS_TAG: &str = "broker-tls";

/// The tag of scenarios that restart the broker ([`Broker::restart`]); they are not run on a
/// provider that cannot ([`BrokerSpec::cannot_run`]).
pub const RESTART_TAG: &str = "broker-restart";

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProviderKind::Container => "container",
            ProviderKind::Process => "process",
            ProviderKind::Url => "url",
        })
    }
}

/// One entry of `FLEET_E2E_BROKERS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BrokerSpec {
    pub provider: ProviderKind,
    pub kind: BrokerKind,
}

impl BrokerSpec {
    /// Parses one entry: `rabbitmq`, `lavinmq` (container is the default provider),
    /// `container:rabbitmq`, `container:lavinmq`, `process:rabbitmq`, `url:rabbitmq`,
    /// `url:lavinmq`. Case and surrounding blanks do not matter.
    pub fn parse(s: &str) -> Result<Self, BrokerError> {
        let entry = s.trim().to_ascii_lowercase();
        let invalid = |reason: String| BrokerError::InvalidSpec {
            spec: s.trim().to_string(),
            reason,
        };
        let (provider, kind) = match entry.split_once(':') {
            Some((p, k)) => (p.trim(), k.trim()),
            None => ("container", entry.as_str()),
        };
        let kind = match kind {
            "rabbitmq" => BrokerKind::RabbitMq,
            "lavinmq" => BrokerKind::LavinMq,
            "" => {
                return Err(invalid("the broker is missing; expected rabbitmq or lavinmq".into()));
            }
            other => {
                return Err(invalid(format!(
                    "unknown broker {other:?}; expected rabbitmq or lavinmq"
                )));
            }
        };
        let provider = match provider {
            "container" => ProviderKind::Container,
            "process" => ProviderKind::Process,
            "url" => ProviderKind::Url,
            other => {
                return Err(invalid(format!(
                    "unknown provider {other:?}; expected container, process or url"
                )));
            }
        };
        if provider == ProviderKind::Process && kind == BrokerKind::LavinMq {
            return Err(invalid(
                "LavinMQ cannot run as a local process here (no Debian package exists); use container:lavinmq \
                 (FLEET_LAVINMQ_IMAGE) or url:lavinmq (FLEET_BROKER_URL and FLEET_BROKER_HTTP)"
                    .into(),
            ));
        }
        Ok(BrokerSpec { provider, kind })
    }

    /// Parses a comma-separated list; blank entries are skipped, an empty list or a broker named
    /// twice is an error. (What applies when `FLEET_E2E_BROKERS` is unset is the caller's call.)
    pub fn parse_list(s: &str) -> Result<Vec<Self>, BrokerError> {
        let mut specs: Vec<BrokerSpec> = Vec::new();
        for entry in s.split(',').filter(|e| !e.trim().is_empty()) {
            let spec = BrokerSpec::parse(entry)?;
            if specs.contains(&spec) {
                return Err(BrokerError::InvalidSpec {
                    spec: entry.trim().into(),
                    reason: "named twice".into(),
                });
            }
            specs.push(spec);
        }
        if specs.is_empty() {
            return Err(BrokerError::InvalidSpec {
                spec: s.into(),
                reason: "no broker named; expected e.g. rabbitmq,process:rabbitmq,url:lavinmq".into(),
            });
        }
        Ok(specs)
    }

    /// Why a scenario carrying `tags` (without `@`) cannot run on this broker, if it cannot: such
    /// a scenario is left out of the run and reported not tested on this broker, never passed.
    /// A restart ([`RESTART_TAG`]) needs a provider that can restart its broker; TLS
    /// ([`TLS_TAG`]) an amqps listener (the url provider has one only when given,
    /// [`url::url_tls_missing`]).
    pub fn cannot_run<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let tags: Vec<&str> = tags.into_iter().map(|t| t.trim_start_matches('@')).collect();
        if tags.contains(&RESTART_TAG)
            && let Some(why) = self.provider.cannot_restart()
        {
            return Some(format!("it restarts the broker (@{RESTART_TAG}), and {why}"));
        }
        if tags.contains(&TLS_TAG)
            && self.provider == ProviderKind::Url
            && let Some(why) = url::url_tls_missing()
        {
            return Some(format!("it needs the broker's amqps listener (@{TLS_TAG}), and {why}"));
        }
        None
    }

    /// `provider:kind`, e.g. `container:rabbitmq`.
    pub fn label(&self) -> String {
        format!("{}:{}", self.provider, self.kind)
    }
}

impl fmt::Display for BrokerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.kind)
    }
}

impl FromStr for BrokerSpec {
    type Err = BrokerError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BrokerSpec::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rstest::rstest;

    #[rstest]
    #[case("rabbitmq", ProviderKind::Container, BrokerKind::RabbitMq)]
    #[case("lavinmq", ProviderKind::Container, BrokerKind::LavinMq)]
    #[case("container:rabbitmq", ProviderKind::Container, BrokerKind::RabbitMq)]
    #[case("container:lavinmq", ProviderKind::Container, BrokerKind::LavinMq)]
    #[case("process:rabbitmq", ProviderKind::Process, BrokerKind::RabbitMq)]
    #[case("url:rabbitmq", ProviderKind::Url, BrokerKind::RabbitMq)]
    #[case("url:lavinmq", ProviderKind::Url, BrokerKind::LavinMq)]
    #[case("  URL:LavinMQ ", ProviderKind::Url, BrokerKind::LavinMq)]
    fn specs_parse(#[case] s: &str, #[case] provider: ProviderKind, #[case] kind: BrokerKind) {
        assert_eq!(BrokerSpec::parse(s).expect("valid"), BrokerSpec { provider, kind });
    }

    #[rstest]
    #[case("container:rabbitmq")]
    #[case("process:rabbitmq")]
    #[case("url:lavinmq")]
    fn labels_round_trip(#[case] s: &str) {
        let spec: BrokerSpec = s.parse().expect("valid");
        assert_eq!(spec.label(), s);
        assert_eq!(spec.to_string(), s);
    }

    #[test]
    fn bare_names_get_the_container_label() {
        assert_eq!(
            BrokerSpec::parse("lavinmq").expect("valid").label(),
            "container:lavinmq"
        );
    }

    #[test]
    fn process_lavinmq_is_refused_with_a_way_out() {
        let err = BrokerSpec::parse("process:lavinmq").expect_err("no LavinMQ package");
        let text = err.to_string();
        assert!(
            text.contains("no Debian package") && text.contains("container:lavinmq") && text.contains("url:lavinmq"),
            "{text}"
        );
    }

    #[rstest]
    #[case("kafka")]
    #[case("vm:rabbitmq")]
    #[case("container:")]
    #[case(":rabbitmq")]
    #[case("")]
    fn bad_specs_are_refused(#[case] s: &str) {
        assert!(BrokerSpec::parse(s).is_err(), "{s:?}");
    }

    #[test]
    fn lists_parse_in_order() {
        let specs = BrokerSpec::parse_list("rabbitmq, process:rabbitmq,,url:lavinmq").expect("valid");
        let labels: Vec<String> = specs.iter().map(BrokerSpec::label).collect();
        assert_eq!(labels, ["container:rabbitmq", "process:rabbitmq", "url:lavinmq"]);
    }

    #[rstest]
    #[case("")]
    #[case(" , ")]
    #[case("rabbitmq,container:rabbitmq")]
    #[case("rabbitmq,process:lavinmq")]
    fn bad_lists_are_refused(#[case] s: &str) {
        assert!(BrokerSpec::parse_list(s).is_err(), "{s:?}");
    }

    #[test]
    fn kinds_display_lowercase() {
        assert_eq!(BrokerKind::RabbitMq.to_string(), "rabbitmq");
        assert_eq!(BrokerKind::LavinMq.to_string(), "lavinmq");
        assert_eq!(ProviderKind::Process.to_string(), "process");
    }

    #[test]
    fn only_restarting_scenarios_on_the_url_provider_cannot_run() {
        let url = BrokerSpec::parse("url:rabbitmq").expect("valid");
        let why = url.cannot_run(["CON-3", "serial", RESTART_TAG]).expect("left out");
        assert!(why.contains("url:") && why.contains(RESTART_TAG), "{why}");
        assert_eq!(url.cannot_run(["CON-3", "serial"]), None);
        for s in ["process:rabbitmq", "container:rabbitmq", "container:lavinmq"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run(["@broker-restart", "RPL-1"]), None, "{s}");
        }
    }

    #[test]
    fn tls_scenarios_need_a_listener_only_the_url_provider_may_lack() {
        for s in ["process:rabbitmq", "container:rabbitmq", "container:lavinmq"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run(["SEC-1", TLS_TAG]), None, "{s}");
        }
        let url = BrokerSpec::parse("url:lavinmq").expect("valid");
        let given = std::env::var(url::BROKER_AMQPS_URL_VAR).is_ok_and(|v| !v.trim().is_empty());
        match url.cannot_run(["SEC-1", "@broker-tls"]) {
            Some(why) => {
                assert!(!given);
                assert!(
                    why.contains(url::BROKER_AMQPS_URL_VAR) && why.contains(TLS_TAG),
                    "{why}"
                );
            }
            None => assert!(given, "no amqps listener was given, yet a TLS scenario would run"),
        }
        assert_eq!(url.cannot_run(["SEC-2"]), None);
    }
}
