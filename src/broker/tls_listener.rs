//! A broker's `amqps://` listener (SEC-1): where it is and the test CA that signed its
//! certificate.
//!
//! Exists as a leaf of its own because every provider makes or reads one (the process and
//! container providers, one per node of their clusters; the url provider from its variables),
//! while `provider.rs`, which holds the running providers, sits above them all.

/// A broker's `amqps://` listener (SEC-1): where it is and the test CA that signed its
/// certificate (made at start by [`crate::tls::generate`]).
#[derive(Debug, Clone)]
pub struct TlsListener {
    pub host: String,
    pub port: u16,
    /// The CA certificate that signed the listener's certificate: what a gateway is told to trust.
    pub ca_cert: std::path::PathBuf,
    /// The CA, certificate and key the suite made for a broker it started (removed with it);
    /// `None` for a broker someone else runs (url provider: `FLEET_BROKER_CA_FILE`).
    pub files: Option<crate::tls::TlsFiles>,
}

impl TlsListener {
    /// A listener whose certificates the suite generated.
    pub(crate) fn generated(host: &str, port: u16, files: crate::tls::TlsFiles) -> TlsListener {
        TlsListener {
            host: host.to_string(),
            port,
            ca_cert: files.ca_cert.clone(),
            files: Some(files),
        }
    }
}
