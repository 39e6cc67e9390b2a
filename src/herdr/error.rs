//! Why the fake could not start or change state ([`HerdrError`]): no tokio runtime, a socket path
//! it cannot use or make short, another server on it, a failed bind or mode change, a stopped server.

use std::io;
use std::path::PathBuf;

/// Why the fake could not start or change state.
#[derive(Debug, thiserror::Error)]
pub enum HerdrError {
    /// [`FakeHerdr::start`](super::FakeHerdr::start) was called outside a tokio runtime.
    #[error("the fake herdr needs a tokio runtime: {0}")]
    NoRuntime(#[from] tokio::runtime::TryCurrentError),
    /// The socket path does not fit in a `sockaddr_un`.
    #[error("socket path {path} is {len} bytes; unix sockets take at most {max}")]
    PathTooLong {
        /// The path.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The socket path is too long and no short directory could be made for it instead.
    #[error(
        "socket path {path} is {len} bytes (unix sockets take at most {max}) and no short directory \
         {short} could be made instead: {source}; use a shorter TMPDIR"
    )]
    NoShortDir {
        /// The natural path, under the directory given.
        path: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
        /// The short directory tried.
        short: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Another server answers on the socket path.
    #[error("another server is already listening on {0}")]
    InUse(PathBuf),
    /// The directory or a stale file at the socket path could not be handled.
    #[error("cannot prepare socket path {path}: {source}")]
    Prepare {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Binding the socket failed.
    #[error("cannot bind {path}: {source}")]
    Bind {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Setting the socket's mode to 0600 failed.
    #[error("cannot set mode 0600 on {path}: {source}")]
    Permissions {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The server was stopped; it cannot be brought back up.
    #[error("the fake herdr was stopped")]
    Stopped,
}
