//! TLS to the broker (SEC-1): `amqps://` with the broker verified against a pinned CA.
//!
//! Exists because staging gateways must not talk to the broker in clear text, and because an
//! operator who names a CA means "trust this CA", not "this CA as well as every public one". So
//! the roots handed to rustls are exactly the certificates of `FLEET_TLS_CA_FILE` (PEM) when it
//! is set, and the system bundle (`SSL_CERT_FILE`, else the usual distribution paths) otherwise.
//! lapin is built without a certificate-store feature on purpose, so nothing is added behind our
//! back. A certificate the roots do not vouch for ends the attempt with an error naming the
//! variable; the gateway then stays not ready and retries with backoff (the CA may be rotated).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use lapin::tcp::OwnedTLSConfig;
use lapin::{Connection, ConnectionProperties};

/// The variable naming the CA (PEM) the broker's certificate must chain to.
pub const CA_VAR: &str = "FLEET_TLS_CA_FILE";

/// Where distributions keep the system CA bundle, in the order tried.
const SYSTEM_BUNDLES: [&str; 4] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// A set of trusted roots as PEM, with where it came from (for errors and `check-config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roots {
    pub pem: String,
    pub count: usize,
    pub path: PathBuf,
    /// The system bundle rather than `FLEET_TLS_CA_FILE`.
    pub system: bool,
}

impl Roots {
    /// e.g. `FLEET_TLS_CA_FILE=/etc/fleet/ca.pem`.
    pub fn source(&self) -> String {
        if self.system {
            format!("the system CA bundle {}", self.path.display())
        } else {
            format!("{CA_VAR}={}", self.path.display())
        }
    }
}

/// Why a PEM file cannot serve as roots.
#[derive(Debug, thiserror::Error)]
pub enum PemError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")]
    Empty { path: PathBuf },
    #[error("{path}: certificate #{index} is not valid base64 DER")]
    Garbled { path: PathBuf, index: usize },
}

/// Counts the certificates of a PEM text, checking each decodes to a DER sequence.
fn count_certificates(text: &str, path: &Path) -> Result<usize, PemError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut count = 0;
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let body = &rest[start + BEGIN.len()..];
        let Some(end) = body.find(END) else {
            return Err(PemError::Garbled {
                path: path.to_path_buf(),
                index: count + 1,
            });
        };
        let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
        match B64.decode(b64.as_bytes()) {
            Ok(der) if der.first() == Some(&0x30) => count += 1,
            _ => {
                return Err(PemError::Garbled {
                    path: path.to_path_buf(),
                    index: count + 1,
                });
            }
        }
        rest = &body[end + END.len()..];
    }
    if count == 0 {
        return Err(PemError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(count)
}

/// Reads a PEM file of CA certificates.
pub fn read_pem(path: &Path) -> Result<Roots, PemError> {
    let pem = std::fs::read_to_string(path).map_err(|source| PemError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let count = count_certificates(&pem, path)?;
    Ok(Roots {
        pem,
        count,
        path: path.to_path_buf(),
        system: false,
    })
}

/// The system bundle: `SSL_CERT_FILE` when set, else the first distribution path that exists.
pub fn system_roots() -> Result<Roots, String> {
    let candidates: Vec<PathBuf> = match std::env::var_os("SSL_CERT_FILE") {
        Some(f) => vec![PathBuf::from(f)],
        None => SYSTEM_BUNDLES.iter().map(PathBuf::from).collect(),
    };
    for path in &candidates {
        if path.is_file() {
            let mut roots = read_pem(path).map_err(|e| e.to_string())?;
            roots.system = true;
            return Ok(roots);
        }
    }
    Err(format!(
        "amqps:// needs trusted roots: set {CA_VAR} to the broker's CA (PEM), or install a system \
         CA bundle (none of {} exists)",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Connects to `url`: plain for `amqp://`, TLS verified against `ca` (or the system roots) for
/// `amqps://`. Errors name what to fix.
pub async fn connect(url: &str, ca: Option<&Roots>, props: ConnectionProperties) -> anyhow::Result<Connection> {
    if !url.starts_with("amqps://") {
        return Ok(Connection::connect(url, props).await?);
    }
    let roots = match ca {
        Some(r) => r.clone(),
        None => system_roots().map_err(anyhow::Error::msg)?,
    };
    let tls = OwnedTLSConfig {
        identity: None,
        cert_chain: Some(roots.pem.clone()),
    };
    let runtime = lapin::runtime::default_runtime()?;
    Connection::connect_with_config(url, props, tls, runtime)
        .await
        .map_err(|e| explain(&e.to_string(), &roots))
}

/// Turns a handshake failure into an error that says which roots refused the broker.
fn explain(error: &str, roots: &Roots) -> anyhow::Error {
    let lower = error.to_ascii_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") {
        anyhow::anyhow!(
            "TLS: the broker's certificate is not trusted by {} ({} certificate(s)); set {CA_VAR} \
             to the CA that signed the broker's certificate: {error}",
            roots.source(),
            roots.count
        )
    } else {
        anyhow::anyhow!("TLS connection (roots: {}): {error}", roots.source())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A certificate-shaped PEM block: base64 of a DER sequence (not a usable certificate).
    const CA: &str = "-----BEGIN CERTIFICATE-----
MIIBfTCCASOgAwIBAgIUWlr7zPYlVYzWf4WoONeJzbcD0TYwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJZmxlZXQtdGVzdDAeFw0yNjAxMDEwMDAwMDBaFw0zNjAxMDEw
MDAwMDBaMBQxEjAQBgNVBAMMCWZsZWV0LXRlc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAS5uJm0k0c4i4g0Yl8ZQ0Zt0m7K0o2hF8wX3cA1xJ8x1gP3h0m1E9sK
b8yK3cR1cOQ0w4dO3wY0xJb3rA6Xo1MwUTAdBgNVHQ4EFgQU1w8wJ0h2xJY0w2lY
-----END CERTIFICATE-----
";

    fn write(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fleet-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn a_pem_bundle_counts_its_certificates() {
        let path = write("two.pem", &format!("{CA}\n{CA}"));
        let roots = read_pem(&path).expect("valid");
        assert_eq!(roots.count, 2);
        assert!(roots.source().contains(CA_VAR), "{}", roots.source());
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let path = write(
            "key.pem",
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        );
        let err = read_pem(&path).expect_err("no certificate");
        assert!(err.to_string().contains("no PEM certificate"), "{err}");
        let garbled = write(
            "bad.pem",
            "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n",
        );
        assert!(read_pem(&garbled).is_err());
        assert!(read_pem(Path::new("/nonexistent/ca.pem")).is_err());
    }

    #[test]
    fn a_verification_failure_names_the_variable() {
        let roots = Roots {
            pem: String::new(),
            count: 1,
            path: PathBuf::from("/x/ca.pem"),
            system: false,
        };
        let e = explain("invalid peer certificate: UnknownIssuer", &roots).to_string();
        assert!(e.contains(CA_VAR) && e.contains("not trusted"), "{e}");
    }
}
