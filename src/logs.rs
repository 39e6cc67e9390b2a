//! The suite's own log lines, to stderr.
//!
//! Why: the suite's parts say things a user needs when a scenario is about to fail for a reason
//! outside the gateway — a broker container without a TLS listener, a wait that had to retry, a
//! leftover swept. Without a subscriber those `tracing` events go nowhere. `RUST_LOG` filters them
//! (default `warn`; e.g. `RUST_LOG=fleet_conformance=info` shows waits as well).

/// Installs a stderr subscriber for the suite's binaries; a second call (or one after another
/// subscriber was installed) changes nothing.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .try_init();
}
