//! The suite's own log lines, to stderr.
//!
//! Why: the suite's parts say things a user needs when a scenario is about to fail for a reason
//! outside the gateway — a broker container without a TLS listener, a wait that had to retry, a
//! leftover swept. Without a subscriber those `tracing` events go nowhere. `RUST_LOG` filters them
//! (default [`DEFAULT_FILTER`]; e.g. `RUST_LOG=fleet_conformance=info` shows waits as well).

/// Warnings of the suite's own parts. lapin's and rmcp's are left out: the suite cuts, freezes and
/// restarts what its own connections go through on purpose, and each of its steps reports a
/// connection it needed and lost as that step's failure.
pub const DEFAULT_FILTER: &str = "warn,lapin=off,rmcp=off";

/// Installs a stderr subscriber for the suite's binaries; a second call (or one after another
/// subscriber was installed) changes nothing.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_FILTER));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(true)
        .try_init();
}
