//! Where the fake's unix socket goes: `<dir>/herdr.sock`, or — when that path is too long for a
//! `sockaddr_un` (a long `TMPDIR`) — a fresh short directory of its own under `/tmp`, removed at
//! shutdown and registered for cleanup.

use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use super::error::HerdrError;
use super::protocol::SOCKET_FILE_NAME;

/// Longest socket path the kernel accepts (`sun_path` is 108 bytes with its NUL).
const MAX_SOCKET_PATH_BYTES: usize = 107;
/// Where sockets go whose natural path is too long: short whatever `TMPDIR` says.
const SHORT_SOCKET_ROOT: &str = "/tmp";

/// A socket directory of our own under [`SHORT_SOCKET_ROOT`], in the cleanup registry (and
/// marked for later sweeps) so an interrupted run does not leave it behind.
pub(super) struct ShortDir {
    pub(super) path: PathBuf,
    _cleanup: crate::cleanup::Registration,
}

/// Where the socket of a fake serving `dir` goes: `<dir>/herdr.sock`, unless that path is longer
/// than a `sockaddr_un` takes (a long `TMPDIR`); then `/tmp/fleet-sock-<random>/herdr.sock`, a
/// fresh 0700 directory removed at shutdown. The gateway learns the path from
/// [`FakeHerdr::socket_path`] either way.
pub(super) fn socket_path_for(dir: &Path) -> Result<(PathBuf, Option<ShortDir>), HerdrError> {
    let natural = dir.join(SOCKET_FILE_NAME);
    if natural.as_os_str().len() <= MAX_SOCKET_PATH_BYTES {
        return Ok((natural, None));
    }
    let short = Path::new(SHORT_SOCKET_ROOT).join(format!(
        "fleet-sock-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    ));
    let socket_path = short.join(SOCKET_FILE_NAME);
    let len = socket_path.as_os_str().len();
    if len > MAX_SOCKET_PATH_BYTES {
        return Err(HerdrError::PathTooLong {
            path: natural,
            len,
            max: MAX_SOCKET_PATH_BYTES,
        });
    }
    let too_long = |source: io::Error| HerdrError::NoShortDir {
        path: natural.clone(),
        len: natural.as_os_str().len(),
        max: MAX_SOCKET_PATH_BYTES,
        short: short.clone(),
        source,
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&short)
        .map_err(too_long)?;
    let cleanup = crate::cleanup::register(crate::cleanup::Action::RemoveDir(short.clone()));
    if let Err(e) = crate::cleanup::Marker::mine().removing_dir().write(&short, "herdr") {
        let _ = std::fs::remove_dir_all(&short);
        return Err(too_long(e));
    }
    tracing::debug!(natural = %natural.display(), socket = %socket_path.display(), "socket path too long: using a short dir");
    Ok((
        socket_path,
        Some(ShortDir {
            path: short,
            _cleanup: cleanup,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::herdr::FakeHerdr;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    #[tokio::test]
    async fn a_dir_too_deep_for_a_unix_socket_gets_a_short_socket_dir_removed_at_stop() {
        let root = std::env::temp_dir().join(format!("fleet-herdr-long-{}", uuid::Uuid::new_v4().simple()));
        let dir = root.join("x".repeat(120));
        let herdr = FakeHerdr::start(&dir).await.expect("starts despite the long dir");
        let socket = herdr.socket_path().to_path_buf();
        assert!(
            socket.as_os_str().len() <= MAX_SOCKET_PATH_BYTES,
            "{}",
            socket.display()
        );
        assert!(socket.starts_with(SHORT_SOCKET_ROOT), "{}", socket.display());
        let short = socket.parent().expect("a dir").to_path_buf();
        let mut conn = tokio::net::UnixStream::connect(&socket).await.expect("connects");
        conn.write_all(b"{\"id\":\"1\",\"method\":\"ping\",\"params\":{}}\n")
            .await
            .expect("writes");
        let mut line = String::new();
        BufReader::new(conn).read_line(&mut line).await.expect("answers");
        assert!(line.contains("pong"), "{line}");
        herdr.stop().await;
        assert!(!short.exists(), "the short dir goes at stop");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_short_enough_dir_keeps_its_socket() {
        let dir = std::env::temp_dir().join(format!("fleet-herdr-short-{}", uuid::Uuid::new_v4().simple()));
        let herdr = FakeHerdr::start(&dir).await.expect("starts");
        assert_eq!(herdr.socket_path(), dir.join(SOCKET_FILE_NAME));
        herdr.stop().await;
        let _ = std::fs::remove_dir_all(&dir);
    }
}
