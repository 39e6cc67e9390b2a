//! URLs of a broker: where its AMQP listener and management API are, and how to write them.
//!
//! Exists because every provider ends with the same [`Endpoint`], and the url provider has to read
//! one from `FLEET_BROKER_URL` / `FLEET_BROKER_HTTP`. Vhost names (`/` included) and credentials
//! must be percent-encoded both in AMQP URLs and in management API paths (the `percent-encoding`
//! crate, which the HTTP stack already brings).

use super::error::BrokerError;
use super::tls_listener::TlsListener;

/// Environment variable of the url provider: `amqp://user:pass@host:port[/vhost]` (for
/// `url:rabbitmq-cluster` a comma list, one per node).
pub const BROKER_URL_VAR: &str = "FLEET_BROKER_URL";
/// Environment variable of the url provider: `http://host:port` of the management API (for
/// `url:rabbitmq-cluster` a comma list, one per node, in the order of [`BROKER_URL_VAR`]).
pub const BROKER_HTTP_VAR: &str = "FLEET_BROKER_HTTP";

/// The fewest nodes a `url:rabbitmq-cluster` may name: a quorum queue outlives the loss of a node
/// only with three or more (SPEC §16).
pub const MIN_CLUSTER_NODES: usize = 3;

/// Environment variable of the url provider: `amqps://host[:port]` of the broker's TLS listener
/// (SEC-1 scenarios; credentials and vhost in it are ignored: the suite logs in as it must).
pub const BROKER_AMQPS_URL_VAR: &str = "FLEET_BROKER_AMQPS_URL";
/// Environment variable of the url provider: the PEM file of the CA that signed the certificate
/// of the listener at `FLEET_BROKER_AMQPS_URL`.
pub const BROKER_CA_FILE_VAR: &str = "FLEET_BROKER_CA_FILE";

/// The url provider's amqps listener, from `FLEET_BROKER_AMQPS_URL` and `FLEET_BROKER_CA_FILE`:
/// `None` when neither is set (its TLS scenarios are then not tested, [`url_tls_missing`]); an
/// error when only one is, or the CA file cannot be read.
pub fn tls_from_env() -> Result<Option<TlsListener>, BrokerError> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let (url, ca) = match (var(BROKER_AMQPS_URL_VAR), var(BROKER_CA_FILE_VAR)) {
        (None, None) => return Ok(None),
        (Some(url), Some(ca)) => (url, ca),
        (Some(_), None) | (None, Some(_)) => {
            return Err(BrokerError::Unavailable {
                provider: "url".into(),
                reason: format!("only one of {BROKER_AMQPS_URL_VAR} and {BROKER_CA_FILE_VAR} is set"),
                hint: "set both (the amqps listener and the CA that signed its certificate), or neither".into(),
            });
        }
    };
    let (host, port) = parse_amqps_addr(&url).map_err(|reason| BrokerError::InvalidUrl {
        var: BROKER_AMQPS_URL_VAR,
        value: redact_url(&url),
        reason,
    })?;
    let ca_cert = std::path::PathBuf::from(ca.trim());
    let pem = std::fs::read_to_string(&ca_cert).map_err(|e| BrokerError::InvalidUrl {
        var: BROKER_CA_FILE_VAR,
        value: ca_cert.display().to_string(),
        reason: format!("cannot read it: {e}"),
    })?;
    if !pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err(BrokerError::InvalidUrl {
            var: BROKER_CA_FILE_VAR,
            value: ca_cert.display().to_string(),
            reason: "not a PEM certificate (no BEGIN CERTIFICATE line)".into(),
        });
    }
    Ok(Some(TlsListener {
        host,
        port,
        ca_cert,
        files: None,
    }))
}

/// Why the url provider has no amqps listener to offer, if it has none: the scenarios that need
/// one are then left out and reported not tested, never failed on the gateway.
pub fn url_tls_missing() -> Option<String> {
    let set = |name: &str| std::env::var(name).is_ok_and(|v| !v.trim().is_empty());
    (!set(BROKER_AMQPS_URL_VAR)).then(|| {
        format!(
            "the url: provider was given no amqps listener ({BROKER_AMQPS_URL_VAR} and {BROKER_CA_FILE_VAR} are unset)"
        )
    })
}

/// `host` and `port` of `amqps://[user[:pass]@]host[:port][/vhost]` (port 5671 when absent).
pub fn parse_amqps_addr(url: &str) -> Result<(String, u16), String> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("amqps") => rest,
        Some((scheme, _)) => return Err(format!("scheme {scheme:?}: expected amqps://")),
        None => return Err("expected amqps://host:port".into()),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    split_host_port(hostport, 5671)
}

/// Where a running broker listens and who may administer it.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// AMQP host, without IPv6 brackets.
    pub amqp_host: String,
    pub amqp_port: u16,
    /// Base URL of the management API, e.g. `http://127.0.0.1:15672`, without a trailing slash.
    pub http_base: String,
    pub user: String,
    pub password: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("amqp_host", &self.amqp_host)
            .field("amqp_port", &self.amqp_port)
            .field("http_base", &self.http_base)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl Endpoint {
    /// `host:port` of the AMQP listener, IPv6 hosts bracketed.
    pub fn amqp_addr(&self) -> String {
        format!("{}:{}", bracket_host(&self.amqp_host), self.amqp_port)
    }

    /// `amqp://user:pass@host:port/<percent-encoded vhost>`.
    pub fn amqp_url(&self, vhost: &str) -> String {
        format!(
            "amqp://{}:{}@{}/{}",
            percent_encode(&self.user),
            percent_encode(&self.password),
            self.amqp_addr(),
            percent_encode(vhost)
        )
    }

    /// The url provider's endpoint, from `FLEET_BROKER_URL` and `FLEET_BROKER_HTTP`.
    pub fn from_env() -> Result<Endpoint, BrokerError> {
        let (amqp, http) = Endpoint::read_env()?;
        for (var, value) in [(BROKER_URL_VAR, &amqp), (BROKER_HTTP_VAR, &http)] {
            if value.contains(',') {
                return Err(BrokerError::InvalidUrl {
                    var,
                    value: redact_url(value),
                    reason: "a comma list names the nodes of a cluster: name the broker url:rabbitmq-cluster".into(),
                });
            }
        }
        Endpoint::from_urls(&amqp, &http)
    }

    /// The url provider's nodes of a cluster (`url:rabbitmq-cluster`), from the comma lists in
    /// `FLEET_BROKER_URL` and `FLEET_BROKER_HTTP` (one entry per node, the same order).
    pub fn cluster_from_env() -> Result<Vec<Endpoint>, BrokerError> {
        let (amqp, http) = Endpoint::read_env()?;
        Endpoint::cluster_from_lists(&amqp, &http)
    }

    /// The nodes of a cluster from a comma list of AMQP URLs and one of management base URLs:
    /// as many of each, at least [`MIN_CLUSTER_NODES`].
    pub fn cluster_from_lists(amqp: &str, http: &str) -> Result<Vec<Endpoint>, BrokerError> {
        let split = |s: &str| -> Vec<String> {
            s.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_string)
                .collect()
        };
        let (amqps, https) = (split(amqp), split(http));
        if amqps.len() < MIN_CLUSTER_NODES {
            return Err(BrokerError::InvalidUrl {
                var: BROKER_URL_VAR,
                value: redact_url(amqp),
                reason: format!(
                    "url:rabbitmq-cluster needs a comma list of at least {MIN_CLUSTER_NODES} node URLs, got {}",
                    amqps.len()
                ),
            });
        }
        if https.len() != amqps.len() {
            return Err(BrokerError::InvalidUrl {
                var: BROKER_HTTP_VAR,
                value: http.to_string(),
                reason: format!(
                    "{} management URLs for {} nodes: give one per node of {BROKER_URL_VAR}, in its order",
                    https.len(),
                    amqps.len()
                ),
            });
        }
        amqps
            .iter()
            .zip(&https)
            .map(|(a, h)| Endpoint::from_urls(a, h))
            .collect()
    }

    fn read_env() -> Result<(String, String), BrokerError> {
        let read = |var: &str| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| BrokerError::Unavailable {
                    provider: "url".into(),
                    reason: format!("{var} is not set"),
                    hint: format!(
                        "set {BROKER_URL_VAR} (amqp://user:pass@host:port) and {BROKER_HTTP_VAR} \
                     (http://host:port of the management API)"
                    ),
                })
        };
        Ok((read(BROKER_URL_VAR)?, read(BROKER_HTTP_VAR)?))
    }

    /// Builds the endpoint of an AMQP URL (credentials, host, port; any vhost is ignored) and a
    /// management base URL.
    pub fn from_urls(amqp: &str, http: &str) -> Result<Endpoint, BrokerError> {
        let parsed = parse_amqp_url(amqp).map_err(|reason| BrokerError::InvalidUrl {
            var: BROKER_URL_VAR,
            value: redact_url(amqp),
            reason,
        })?;
        let http_base = parse_http_base(http).map_err(|reason| BrokerError::InvalidUrl {
            var: BROKER_HTTP_VAR,
            value: redact_url(http),
            reason,
        })?;
        Ok(Endpoint {
            amqp_host: parsed.host,
            amqp_port: parsed.port,
            http_base,
            user: parsed.user,
            password: parsed.password,
        })
    }
}

/// The parts of an AMQP URL the suite uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpUrlParts {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: String,
    /// The decoded vhost, `None` when the URL has no path (the default vhost `/` then applies).
    pub vhost: Option<String>,
}

/// Parses `amqp://[user[:pass]@]host[:port][/vhost]` (user and password default to guest, the
/// port to 5672, as in the AMQP URI spec). `amqps` is refused: the suite speaks plain AMQP.
pub fn parse_amqp_url(url: &str) -> Result<AmqpUrlParts, String> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("amqp") => rest,
        Some((scheme, _)) => {
            return Err(format!("scheme {scheme:?} is not supported, use amqp://"));
        }
        None => return Err("expected amqp://user:pass@host:port".into()),
    };
    let (authority, path) = match rest.find(['/', '?', '#']) {
        Some(i) => (&rest[..i], Some(&rest[i..])),
        None => (rest, None),
    };
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (user, password) = match userinfo {
        Some(u) => {
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            (percent_decode(user)?, percent_decode(pass)?)
        }
        None => ("guest".to_string(), "guest".to_string()),
    };
    let (host, port) = split_host_port(hostport, 5672)?;
    let vhost = match path {
        Some(p) if p.starts_with('/') => {
            let segment = p[1..].split(['?', '#']).next().unwrap_or("");
            Some(percent_decode(segment)?)
        }
        _ => None,
    };
    Ok(AmqpUrlParts {
        host,
        port,
        user,
        password,
        vhost,
    })
}

/// Checks a management base URL (`http://host:port[/prefix]`) and strips trailing slashes.
/// Credentials in it are refused (they come from the AMQP URL); so is https (no TLS stack here).
pub fn parse_http_base(url: &str) -> Result<String, String> {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!("scheme {scheme:?} is not supported, use http://"));
        }
        None => return Err("expected http://host:port".into()),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(format!(
            "put credentials in {BROKER_URL_VAR}, not in the management URL"
        ));
    }
    split_host_port(authority, 15672)?;
    if rest.contains(['?', '#']) {
        return Err("a base URL has no query or fragment".into());
    }
    Ok(format!("http://{}", rest.trim_end_matches('/')))
}

fn split_host_port(hostport: &str, default_port: u16) -> Result<(String, u16), String> {
    let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
        let (host, after) = inner.split_once(']').ok_or("unclosed [ in host")?;
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(format!("unexpected {after:?} after the host")),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty() {
        return Err("the host is missing".into());
    }
    let port = match port {
        Some(p) => p.parse::<u16>().map_err(|_| format!("invalid port {p:?}"))?,
        None => default_port,
    };
    Ok((host.to_string(), port))
}

/// `[::1]` for IPv6 literals, the host unchanged otherwise.
pub fn bracket_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

/// Everything but RFC 3986 unreserved characters (`A-Z a-z 0-9 - . _ ~`) is escaped, so an
/// encoded value is safe as a path segment or in userinfo (`/` becomes `%2F`).
const ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Percent-encodes `s` for a URL path segment or userinfo ([`ESCAPED`]).
pub fn percent_encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, ESCAPED).to_string()
}

/// Decodes `%XX` escapes; a truncated or invalid escape, or a result that is not UTF-8, is an
/// error (the crate itself would pass a bad escape through unchanged).
pub fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    for (i, _) in s.match_indices('%') {
        let hex = s
            .get(i + 1..i + 3)
            .ok_or_else(|| format!("truncated escape in {s:?}"))?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("invalid escape %{hex} in {s:?}"));
        }
    }
    percent_encoding::percent_decode(bytes)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|_| format!("{s:?} does not decode to UTF-8"))
}

/// The URL with any password replaced, for error messages.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("amqps://broker.example:5671", "broker.example", 5671)]
    #[case("amqps://u:p@10.0.0.5:15671/fleet", "10.0.0.5", 15671)]
    #[case("AMQPS://lavinmq", "lavinmq", 5671)]
    #[case("amqps://[::1]:5671/", "::1", 5671)]
    fn amqps_listeners_parse(#[case] url: &str, #[case] host: &str, #[case] port: u16) {
        assert_eq!(parse_amqps_addr(url), Ok((host.to_string(), port)));
    }

    #[rstest]
    #[case("amqp://broker:5672")]
    #[case("broker:5671")]
    #[case("amqps://:5671")]
    #[case("amqps://broker:tls")]
    fn bad_amqps_listeners_are_refused(#[case] url: &str) {
        assert!(parse_amqps_addr(url).is_err(), "{url}");
    }

    fn endpoint() -> Endpoint {
        Endpoint {
            amqp_host: "127.0.0.1".into(),
            amqp_port: 32768,
            http_base: "http://127.0.0.1:32769".into(),
            user: "guest".into(),
            password: "guest".into(),
        }
    }

    #[rstest]
    #[case("fleet-0123abcd", "amqp://guest:guest@127.0.0.1:32768/fleet-0123abcd")]
    #[case("/", "amqp://guest:guest@127.0.0.1:32768/%2F")]
    #[case("a b/c%", "amqp://guest:guest@127.0.0.1:32768/a%20b%2Fc%25")]
    fn amqp_url_percent_encodes_the_vhost(#[case] vhost: &str, #[case] want: &str) {
        assert_eq!(endpoint().amqp_url(vhost), want);
    }

    #[test]
    fn amqp_url_encodes_credentials_and_brackets_ipv6() {
        let ep = Endpoint {
            amqp_host: "::1".into(),
            user: "u@x".into(),
            password: "p:w/d".into(),
            ..endpoint()
        };
        assert_eq!(ep.amqp_url("v"), "amqp://u%40x:p%3Aw%2Fd@[::1]:32768/v");
    }

    #[rstest]
    #[case("amqp://u:p@h:1234/vh", "h", 1234, "u", "p", Some("vh"))]
    #[case("amqp://u:p@h", "h", 5672, "u", "p", None)]
    #[case("amqp://h:5673/", "h", 5673, "guest", "guest", Some(""))]
    #[case("AMQP://a%40b:c%2Fd@[::1]:5672/%2F", "::1", 5672, "a@b", "c/d", Some("/"))]
    #[case("amqp://u:p@h:1/v?heartbeat=10", "h", 1, "u", "p", Some("v"))]
    fn amqp_urls_parse(
        #[case] url: &str,
        #[case] host: &str,
        #[case] port: u16,
        #[case] user: &str,
        #[case] password: &str,
        #[case] vhost: Option<&str>,
    ) {
        let parts = parse_amqp_url(url).expect("parses");
        assert_eq!(
            parts,
            AmqpUrlParts {
                host: host.into(),
                port,
                user: user.into(),
                password: password.into(),
                vhost: vhost.map(str::to_string),
            }
        );
    }

    #[rstest]
    #[case("amqps://h")]
    #[case("h:5672")]
    #[case("amqp://u:p@:5672")]
    #[case("amqp://u:p@h:notaport")]
    #[case("amqp://u:p@h:99999")]
    #[case("amqp://u:%zz@h")]
    fn bad_amqp_urls_are_refused(#[case] url: &str) {
        assert!(parse_amqp_url(url).is_err(), "{url}");
    }

    #[rstest]
    #[case("http://127.0.0.1:15672", "http://127.0.0.1:15672")]
    #[case("http://h:1/", "http://h:1")]
    #[case("http://h", "http://h")]
    #[case("http://h:1/prefix/", "http://h:1/prefix")]
    fn http_bases_parse(#[case] url: &str, #[case] want: &str) {
        assert_eq!(parse_http_base(url).as_deref(), Ok(want));
    }

    #[rstest]
    #[case("https://h:15671")]
    #[case("http://u:p@h:15672")]
    #[case("h:15672")]
    #[case("http://h:x")]
    fn bad_http_bases_are_refused(#[case] url: &str) {
        assert!(parse_http_base(url).is_err(), "{url}");
    }

    #[test]
    fn endpoint_from_urls_takes_credentials_from_the_amqp_url_and_ignores_its_vhost() {
        let ep =
            Endpoint::from_urls("amqp://admin:s3cret@broker:5672/some-vhost", "http://broker:15672/").expect("valid");
        assert_eq!(ep.amqp_host, "broker");
        assert_eq!(ep.amqp_port, 5672);
        assert_eq!(ep.http_base, "http://broker:15672");
        assert_eq!((ep.user.as_str(), ep.password.as_str()), ("admin", "s3cret"));
        assert_eq!(ep.amqp_url("x"), "amqp://admin:s3cret@broker:5672/x");
    }

    #[test]
    fn errors_about_urls_never_show_the_password() {
        let err = Endpoint::from_urls("amqp://admin:s3cret@broker:nope", "http://broker:15672").expect_err("bad port");
        let text = err.to_string();
        assert!(!text.contains("s3cret"), "{text}");
        assert!(text.contains(BROKER_URL_VAR), "{text}");
        let debug = format!(
            "{:?}",
            Endpoint {
                password: "s3cret".into(),
                ..endpoint()
            }
        );
        assert!(!debug.contains("s3cret"), "{debug}");
    }

    #[test]
    fn a_cluster_is_a_comma_list_per_variable_in_node_order() {
        let nodes = Endpoint::cluster_from_lists(
            "amqp://u:p@h1:5672, amqp://u:p@h2:5673 ,amqp://u:p@h3:5674/ignored",
            "http://h1:15672,http://h2:15673/,http://h3:15674",
        )
        .expect("valid");
        let addrs: Vec<String> = nodes.iter().map(Endpoint::amqp_addr).collect();
        assert_eq!(addrs, ["h1:5672", "h2:5673", "h3:5674"]);
        assert_eq!(nodes[1].http_base, "http://h2:15673");
        assert!(nodes.iter().all(|n| n.user == "u" && n.password == "p"));
    }

    #[rstest]
    #[case("amqp://u:p@h1,amqp://u:p@h2", "http://h1,http://h2", "at least 3")]
    #[case("amqp://u:p@h1,amqp://u:p@h2,amqp://u:p@h3", "http://h1", "one per node")]
    #[case(
        "amqp://u:s3cret@h1,amqp://u:p@h2,amqps://u:p@h3",
        "http://h1,http://h2,http://h3",
        "amqp://"
    )]
    fn bad_cluster_lists_are_refused(#[case] amqp: &str, #[case] http: &str, #[case] says: &str) {
        let err = Endpoint::cluster_from_lists(amqp, http).expect_err("refused");
        let text = err.to_string();
        assert!(text.contains(says), "{text}");
        assert!(!text.contains("s3cret"), "{text}");
    }

    #[test]
    fn percent_coding_round_trips() {
        for s in ["/", "fleet-abc", "ä ö/%?#@:"] {
            assert_eq!(percent_decode(&percent_encode(s)).as_deref(), Ok(s));
        }
    }
}
