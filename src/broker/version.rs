//! The broker version a run names (`container:rabbitmq@4.0`): which image the container provider
//! starts, and what the broker must say it is before anything is judged on it.
//!
//! Exists because SPEC §0 allows RabbitMQ from 3.10 on and the two ends behave differently (the
//! README's broker notes): a verdict must say which version gave it, and a run that asked for 4.0
//! must never be judged on a 3.10 that happened to be installed. A named version is checked
//! against the version the broker reports (AMQP `connection.start`, else the management API); a
//! mismatch fails the run before any scenario.

use std::fmt;

/// A `major.minor` broker version, as a spec names it (`4.0`, `3.10`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BrokerVersion {
    pub major: u16,
    pub minor: u16,
}

impl BrokerVersion {
    /// Parses `MAJOR.MINOR` (`4.0`, `3.10`); a patch level is refused (a spec names a release
    /// series, the broker reports its patch).
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let (major, minor) = s
            .split_once('.')
            .ok_or_else(|| format!("version {s:?} is not MAJOR.MINOR (e.g. 4.0 or 3.10)"))?;
        let num = |p: &str| {
            (!p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                .then(|| p.parse::<u16>().ok())
                .flatten()
                .ok_or_else(|| format!("version {s:?} is not MAJOR.MINOR (e.g. 4.0 or 3.10)"))
        };
        Ok(BrokerVersion {
            major: num(major)?,
            minor: num(minor)?,
        })
    }

    /// Whether a version the broker reported (`3.10.8`, `4.0.5`, `RabbitMQ 4.0.5`, the last word
    /// counts) is of this series.
    pub fn matches(&self, reported: &str) -> bool {
        let word = reported.split_whitespace().last().unwrap_or_default();
        let mut parts = word.split('.');
        let part = |p: Option<&str>| {
            p.map(|p| p.chars().take_while(char::is_ascii_digit).collect::<String>())
                .and_then(|d| d.parse::<u16>().ok())
        };
        part(parts.next()) == Some(self.major) && part(parts.next()) == Some(self.minor)
    }
}

impl fmt::Display for BrokerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use rstest::rstest;

    #[rstest]
    #[case("4.0", 4, 0)]
    #[case("3.10", 3, 10)]
    #[case(" 3.13 ", 3, 13)]
    fn versions_parse(#[case] s: &str, #[case] major: u16, #[case] minor: u16) {
        assert_eq!(BrokerVersion::parse(s), Ok(BrokerVersion { major, minor }));
    }

    #[rstest]
    #[case("4")]
    #[case("4.0.5")]
    #[case("4.x")]
    #[case(".0")]
    #[case("")]
    #[case("-4.0")]
    fn bad_versions_are_refused(#[case] s: &str) {
        assert!(BrokerVersion::parse(s).is_err(), "{s:?}");
    }

    #[rstest]
    #[case("4.0", "4.0.5", true)]
    #[case("4.0", "RabbitMQ 4.0.5", true)]
    #[case("3.10", "RabbitMQ 3.10.8", true)]
    #[case("3.1", "RabbitMQ 3.10.8", false)]
    #[case("4.0", "RabbitMQ 4.1.0", false)]
    #[case("4.0", "4.0.0-rc.1", true)]
    #[case("2.5", "LavinMQ 2.5.1", true)]
    #[case("4.0", "unknown unknown", false)]
    fn reported_versions_match_their_series(#[case] named: &str, #[case] reported: &str, #[case] ok: bool) {
        let v = BrokerVersion::parse(named).expect("valid");
        assert_eq!(v.matches(reported), ok, "{named} vs {reported}");
        assert_eq!(v.to_string(), named);
    }
}
