//! Which brokers a run asks for: `FLEET_E2E_BROKERS` entries (`container:rabbitmq`,
//! `url:lavinmq`, `process:rabbitmq-cluster`, `container:rabbitmq@4.0`, …) parsed into a
//! [`BrokerSpec`] — product and shape ([`BrokerKind`]: one node, or a RabbitMQ cluster of three),
//! provider ([`ProviderKind`]) and, optionally, the version the broker must be ([`BrokerVersion`]) — and
//! what a spec cannot do (restart, TLS, lose or cut off a node, be a cluster at all), so the runner
//! leaves those scenarios out and says why instead of failing them.

use std::fmt;
use std::str::FromStr;

use super::error::BrokerError;
use super::flavour::Product;
use super::url;
use super::version::BrokerVersion;

/// Which broker product, as one node or as a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokerKind {
    RabbitMq,
    LavinMq,
    /// Three RabbitMQ nodes clustered (`cluster_partition_handling = pause_minority`), for the
    /// cluster profile (SPEC §16): quorum queues, node loss, partitions.
    RabbitMqCluster,
}

impl BrokerKind {
    /// The product the broker must say it is (a cluster of RabbitMQ nodes is RabbitMQ).
    pub fn product(&self) -> Product {
        match self {
            BrokerKind::RabbitMq | BrokerKind::RabbitMqCluster => Product::RabbitMq,
            BrokerKind::LavinMq => Product::LavinMq,
        }
    }

    /// Whether the suite runs (or attaches to) several nodes of this kind.
    pub fn is_cluster(&self) -> bool {
        matches!(self, BrokerKind::RabbitMqCluster)
    }
}

impl fmt::Display for BrokerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BrokerKind::RabbitMq => "rabbitmq",
            BrokerKind::LavinMq => "lavinmq",
            BrokerKind::RabbitMqCluster => "rabbitmq-cluster",
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

    /// Why the suite cannot cut one node of a cluster of this provider off from the others, if
    /// it cannot. Only containers on a docker network of their own can be (`docker network
    /// disconnect`).
    pub fn cannot_partition(&self) -> Option<&'static str> {
        match self {
            ProviderKind::Container => None,
            ProviderKind::Process => Some(
                "the process: provider runs its nodes on this host's loopback, where the suite cannot cut one \
                 node's links (only container:rabbitmq-cluster, on a docker network of its own, can)",
            ),
            ProviderKind::Url => {
                Some("the url: provider attaches to a cluster someone else runs; the suite cannot cut its nodes' links")
            }
        }
    }
}

/// The tag of scenarios that need the broker's amqps listener (SEC-1).
pub const TLS_TAG: &str = "broker-tls";

/// The tag of scenarios that reach every node of a cluster over `amqps://` (CLU-1): the url
/// provider describes one TLS listener only, so they are left out there.
pub const CLUSTER_TLS_TAG: &str = "cluster-tls";

/// The tag of scenarios that restart the broker ([`Broker::restart`]); they are not run on a
/// provider that cannot ([`BrokerSpec::cannot_run`]).
pub const RESTART_TAG: &str = "broker-restart";

/// The tag of scenarios that need a cluster broker (SPEC §16): left out on a single node.
pub const CLUSTER_TAG: &str = "broker-cluster";

/// The tag of scenarios that kill and start nodes of a cluster ([`Broker::kill_node`],
/// [`Broker::start_node`]): left out where the suite cannot (a single node, the url provider).
pub const NODE_LOSS_TAG: &str = "node-loss";

/// The tag of scenarios that cut a node of a cluster off from the others
/// ([`Broker::partition_node`]): only the container provider can.
pub const NODE_PARTITION_TAG: &str = "node-partition";

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
    /// The release series the broker must report (`@4.0`); for the container provider it also
    /// picks the image ([`super::container::image_for`]).
    pub version: Option<BrokerVersion>,
}

impl BrokerSpec {
    /// Parses one entry: `rabbitmq`, `lavinmq`, `rabbitmq-cluster` (container is the default
    /// provider), `container:rabbitmq`, `container:lavinmq`, `process:rabbitmq`, `url:rabbitmq`,
    /// `url:lavinmq`, and `rabbitmq-cluster` after any of the three providers, each optionally
    /// followed by `@MAJOR.MINOR` (`container:rabbitmq@4.0`). Case and surrounding blanks do not
    /// matter.
    pub fn parse(s: &str) -> Result<Self, BrokerError> {
        let lowered = s.trim().to_ascii_lowercase();
        let invalid = |reason: String| BrokerError::InvalidSpec {
            spec: s.trim().to_string(),
            reason,
        };
        let (entry, version) = match lowered.split_once('@') {
            Some((e, v)) => (e.trim().to_string(), Some(BrokerVersion::parse(v).map_err(invalid)?)),
            None => (lowered.clone(), None),
        };
        let (provider, kind) = match entry.split_once(':') {
            Some((p, k)) => (p.trim(), k.trim()),
            None => ("container", entry.as_str()),
        };
        let kind = match kind {
            "rabbitmq" => BrokerKind::RabbitMq,
            "lavinmq" => BrokerKind::LavinMq,
            "rabbitmq-cluster" => BrokerKind::RabbitMqCluster,
            "" => {
                return Err(invalid(
                    "the broker is missing; expected rabbitmq, lavinmq or rabbitmq-cluster".into(),
                ));
            }
            other => {
                return Err(invalid(format!(
                    "unknown broker {other:?}; expected rabbitmq, lavinmq or rabbitmq-cluster"
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
        Ok(BrokerSpec {
            provider,
            kind,
            version,
        })
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

    /// Why a scenario carrying `tags` (with or without `@`) cannot run on this broker, if it
    /// cannot: such a scenario is left out of the run and reported not tested on this broker,
    /// never passed. A restart ([`RESTART_TAG`]) needs a provider that can restart its broker;
    /// TLS ([`TLS_TAG`]) an amqps listener (the url provider has one only when given,
    /// [`url::url_tls_missing`]); the cluster profile ([`CLUSTER_TAG`]) a cluster; killing nodes
    /// ([`NODE_LOSS_TAG`]) a cluster the suite runs; cutting one off ([`NODE_PARTITION_TAG`]) a
    /// cluster of containers.
    pub fn cannot_run<'a>(&self, tags: impl IntoIterator<Item = &'a str>) -> Option<String> {
        let tags: Vec<&str> = tags.into_iter().map(|t| t.trim_start_matches('@')).collect();
        for (tag, what) in [
            (CLUSTER_TAG, "it needs a cluster broker"),
            (NODE_LOSS_TAG, "it kills and starts broker nodes"),
            (NODE_PARTITION_TAG, "it cuts a broker node off from the others"),
        ] {
            if tags.contains(&tag) && !self.kind.is_cluster() {
                return Some(format!(
                    "{what} (@{tag}), and {} is a single node (name process:rabbitmq-cluster, \
                     container:rabbitmq-cluster or url:rabbitmq-cluster)",
                    self.label()
                ));
            }
        }
        if tags.contains(&NODE_LOSS_TAG)
            && let Some(why) = self.cannot_lose_node()
        {
            return Some(format!(
                "it kills and starts broker nodes (@{NODE_LOSS_TAG}), and {why}"
            ));
        }
        if tags.contains(&NODE_PARTITION_TAG)
            && let Some(why) = self.cannot_partition()
        {
            return Some(format!(
                "it cuts a broker node off from the others (@{NODE_PARTITION_TAG}), and {why}"
            ));
        }
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
        if tags.contains(&CLUSTER_TLS_TAG) && self.provider == ProviderKind::Url {
            return Some(format!(
                "it needs every node's amqps listener (@{CLUSTER_TLS_TAG}), and the url: provider describes one \
                 (FLEET_BROKER_AMQPS_URL); the process and container clusters give every node one"
            ));
        }
        None
    }

    /// Why the suite cannot kill and start single nodes of this broker, if it cannot.
    pub fn cannot_lose_node(&self) -> Option<&'static str> {
        if !self.kind.is_cluster() {
            return Some("the broker is a single node, not a cluster");
        }
        match self.provider {
            ProviderKind::Url => Some(
                "the url: provider attaches to a cluster someone else runs; the suite cannot kill and start its nodes",
            ),
            ProviderKind::Container | ProviderKind::Process => None,
        }
    }

    /// Why the suite cannot cut one node of this broker off from the others, if it cannot.
    pub fn cannot_partition(&self) -> Option<&'static str> {
        if !self.kind.is_cluster() {
            return Some("the broker is a single node, not a cluster");
        }
        self.provider.cannot_partition()
    }

    /// `provider:kind[@version]`, e.g. `container:rabbitmq` or `container:rabbitmq@4.0`.
    pub fn label(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for BrokerSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.provider, self.kind)?;
        match self.version {
            Some(v) => write!(f, "@{v}"),
            None => Ok(()),
        }
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
    #[case("rabbitmq-cluster", ProviderKind::Container, BrokerKind::RabbitMqCluster)]
    #[case("container:rabbitmq-cluster", ProviderKind::Container, BrokerKind::RabbitMqCluster)]
    #[case("process:rabbitmq-cluster", ProviderKind::Process, BrokerKind::RabbitMqCluster)]
    #[case("url:RabbitMQ-Cluster", ProviderKind::Url, BrokerKind::RabbitMqCluster)]
    fn specs_parse(#[case] s: &str, #[case] provider: ProviderKind, #[case] kind: BrokerKind) {
        assert_eq!(
            BrokerSpec::parse(s).expect("valid"),
            BrokerSpec {
                provider,
                kind,
                version: None
            }
        );
    }

    #[rstest]
    #[case("container:rabbitmq@4.0", "container:rabbitmq@4.0", "4.0")]
    #[case("rabbitmq@3.10", "container:rabbitmq@3.10", "3.10")]
    #[case(" process:RabbitMQ-Cluster @ 4.0", "process:rabbitmq-cluster@4.0", "4.0")]
    #[case("url:lavinmq@2.5", "url:lavinmq@2.5", "2.5")]
    fn versions_are_named_after_an_at(#[case] s: &str, #[case] label: &str, #[case] version: &str) {
        let spec = BrokerSpec::parse(s).expect("valid");
        assert_eq!(spec.label(), label);
        assert_eq!(spec.version.map(|v| v.to_string()).as_deref(), Some(version));
    }

    #[test]
    fn two_versions_of_one_broker_are_two_entries() {
        let specs = BrokerSpec::parse_list("container:rabbitmq@3.10,container:rabbitmq@4.0").expect("valid");
        assert_eq!(specs.len(), 2);
        assert!(BrokerSpec::parse_list("rabbitmq@4.0,container:rabbitmq@4.0").is_err());
    }

    #[rstest]
    #[case("container:rabbitmq")]
    #[case("process:rabbitmq")]
    #[case("url:lavinmq")]
    #[case("process:rabbitmq-cluster")]
    #[case("container:rabbitmq-cluster")]
    #[case("url:rabbitmq-cluster")]
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
    #[case("process:lavinmq-cluster")]
    #[case("rabbitmq-clusters")]
    #[case("rabbitmq@4")]
    #[case("rabbitmq@latest")]
    #[case("rabbitmq@")]
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
        assert_eq!(BrokerKind::RabbitMqCluster.to_string(), "rabbitmq-cluster");
    }

    #[test]
    fn a_cluster_is_rabbitmq_and_only_it_is_a_cluster() {
        assert_eq!(BrokerKind::RabbitMqCluster.product(), crate::broker::Product::RabbitMq);
        assert_eq!(BrokerKind::RabbitMq.product(), crate::broker::Product::RabbitMq);
        assert_eq!(BrokerKind::LavinMq.product(), crate::broker::Product::LavinMq);
        assert!(BrokerKind::RabbitMqCluster.is_cluster());
        assert!(!BrokerKind::RabbitMq.is_cluster() && !BrokerKind::LavinMq.is_cluster());
    }

    #[test]
    fn cluster_scenarios_are_left_out_on_a_single_node_with_the_reason() {
        for s in [
            "process:rabbitmq",
            "container:rabbitmq",
            "container:lavinmq",
            "url:rabbitmq",
        ] {
            let spec = BrokerSpec::parse(s).expect("valid");
            for tag in [CLUSTER_TAG, NODE_LOSS_TAG, NODE_PARTITION_TAG] {
                let why = spec.cannot_run(["CLU-5", tag]).expect("left out");
                assert!(
                    why.contains(tag) && why.contains("single node") && why.contains(s),
                    "{s} {tag}: {why}"
                );
            }
            assert!(
                spec.cannot_partition().is_some() && spec.cannot_lose_node().is_some(),
                "{s}"
            );
        }
    }

    #[test]
    fn every_cluster_provider_runs_cluster_scenarios() {
        for s in [
            "process:rabbitmq-cluster",
            "container:rabbitmq-cluster",
            "url:rabbitmq-cluster",
        ] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run(["@broker-cluster", "CLU-2"]), None, "{s}");
        }
    }

    #[test]
    fn only_the_url_cluster_cannot_lose_a_node() {
        for s in ["process:rabbitmq-cluster", "container:rabbitmq-cluster"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run([CLUSTER_TAG, "@node-loss"]), None, "{s}");
            assert_eq!(spec.cannot_lose_node(), None, "{s}");
        }
        let url = BrokerSpec::parse("url:rabbitmq-cluster").expect("valid");
        let why = url.cannot_run([CLUSTER_TAG, NODE_LOSS_TAG]).expect("left out");
        assert!(why.contains(NODE_LOSS_TAG) && why.contains("url:"), "{why}");
    }

    #[test]
    fn only_the_container_cluster_can_be_partitioned() {
        let container = BrokerSpec::parse("container:rabbitmq-cluster").expect("valid");
        assert_eq!(container.cannot_run([CLUSTER_TAG, NODE_PARTITION_TAG]), None);
        assert_eq!(container.cannot_partition(), None);
        for (s, says) in [
            ("process:rabbitmq-cluster", "loopback"),
            ("url:rabbitmq-cluster", "url:"),
        ] {
            let spec = BrokerSpec::parse(s).expect("valid");
            let why = spec.cannot_run(["@node-partition"]).expect("left out");
            assert!(why.contains(NODE_PARTITION_TAG) && why.contains(says), "{s}: {why}");
            assert!(spec.cannot_partition().is_some_and(|w| w.contains(says)), "{s}");
        }
    }

    #[test]
    fn restart_and_tls_tags_keep_their_rules_on_a_cluster() {
        for s in ["process:rabbitmq-cluster", "container:rabbitmq-cluster"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run([RESTART_TAG, TLS_TAG]), None, "{s}");
        }
        let url = BrokerSpec::parse("url:rabbitmq-cluster").expect("valid");
        assert!(url.cannot_run([RESTART_TAG]).is_some_and(|w| w.contains(RESTART_TAG)));
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

    #[test]
    fn every_node_over_tls_is_left_out_on_a_url_cluster_only() {
        for s in ["process:rabbitmq-cluster", "container:rabbitmq-cluster"] {
            let spec = BrokerSpec::parse(s).expect("valid");
            assert_eq!(spec.cannot_run(["CLU-1", CLUSTER_TLS_TAG]), None, "{s}");
        }
        let url = BrokerSpec::parse("url:rabbitmq-cluster").expect("valid");
        let why = url.cannot_run(["CLU-1", "@cluster-tls"]).expect("left out");
        assert!(why.contains(CLUSTER_TLS_TAG), "{why}");
    }
}
