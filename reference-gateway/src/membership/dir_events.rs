//! The trust files' directories, watched for the events that can change a trust file (MEM-1).
//!
//! Why its own piece: a directory watch sees every file of the directory, and the directory of the
//! peers file may also hold busy files — the gateway's own log in the suite's and bench's layout,
//! anything else an operator keeps there. A generic watcher (the `notify` crate asks inotify for
//! every open and every write) woke the gateway once per log line: measured by the bench, ~7 % of
//! each gateway's CPU per brief. So on Linux the directories are watched with inotify directly,
//! for the events that end a change only: a file closed after writing, renamed into or out of the
//! directory, created, deleted, its attributes changed, the directory itself moved or deleted.
//! A file appended to and kept open (a log) never raises one. A trust file written in place by a
//! writer that keeps it open is still seen by the watcher's poll ([`POLL`]).
//! Elsewhere `notify` watches as before (its events filtered by name in the process).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Notify;
#[cfg(target_os = "linux")]
use tracing::debug;
use tracing::warn;

/// The watcher's poll fallback period: every trust file is also looked at this often, for the
/// changes no event announces (volumes without events; a file written in place and kept open).
pub const POLL: std::time::Duration = std::time::Duration::from_millis(500);

/// Keeps the directories watched; dropped, the watch ends.
pub struct DirWatch {
    #[cfg(target_os = "linux")]
    task: tokio::task::JoinHandle<()>,
    #[cfg(not(target_os = "linux"))]
    _watcher: notify::RecommendedWatcher,
}

#[cfg(target_os = "linux")]
impl Drop for DirWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The file names of `paths` and their directories (`.` for a bare name).
fn names_and_dirs(paths: &[&Path]) -> (BTreeSet<OsString>, BTreeSet<PathBuf>) {
    let names = paths.iter().filter_map(|p| p.file_name().map(OsString::from)).collect();
    let dirs = paths
        .iter()
        .map(|p| match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    (names, dirs)
}

/// The inotify events that end a change of a file in a watched directory (see the module doc).
#[cfg(target_os = "linux")]
fn mask() -> inotify::WatchMask {
    use inotify::WatchMask;
    WatchMask::CLOSE_WRITE
        | WatchMask::MOVED_TO
        | WatchMask::MOVED_FROM
        | WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::ATTRIB
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

/// Watches the directories of `paths` (non-recursively) and wakes `wake` on an event about one of
/// their files, or about a directory itself. None (polling only) when no watch can be set up.
#[cfg(target_os = "linux")]
pub fn watch_dirs(paths: &[&Path], wake: Arc<Notify>) -> Option<DirWatch> {
    use futures_util::StreamExt as _;
    use inotify::Inotify;
    let (names, dirs) = names_and_dirs(paths);
    let inotify = match Inotify::init() {
        Ok(i) => i,
        Err(e) => {
            warn!(error = %e, "cannot watch the trust files' directories; polling every {POLL:?}");
            return None;
        }
    };
    for dir in &dirs {
        match inotify.watches().add(dir, mask()) {
            Ok(_) => debug!(dir = %dir.display(), "watching for trust file changes"),
            Err(e) => {
                warn!(dir = %dir.display(), error = %e, "cannot watch a trust file's directory; polling it every {POLL:?}");
            }
        }
    }
    let mut events = match inotify.into_event_stream(vec![0u8; 4096]) {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot read the trust files' directory events; polling every {POLL:?}");
            return None;
        }
    };
    let task = tokio::spawn(async move {
        while let Some(event) = events.next().await {
            // No name: the directory itself, or the kernel's queue overflowed — look at all.
            let ours = match &event {
                Ok(ev) => ev.name.as_ref().is_none_or(|n| names.contains(n)),
                Err(_) => true,
            };
            if ours {
                wake.notify_one();
            }
            if let Err(e) = event {
                warn!(error = %e, "the trust files' directory events ended; polling every {POLL:?}");
                return;
            }
        }
    });
    Some(DirWatch { task })
}

/// Watches the directories of `paths` (non-recursively) and wakes `wake` on an event about one of
/// their files. None (polling only) when the platform's watcher cannot be set up.
#[cfg(not(target_os = "linux"))]
pub fn watch_dirs(paths: &[&Path], wake: Arc<Notify>) -> Option<DirWatch> {
    use notify::Watcher as _;
    let (names, dirs) = names_and_dirs(paths);
    let handler = move |res: notify::Result<notify::Event>| {
        let ours = match &res {
            Ok(ev) => {
                ev.paths.is_empty()
                    || ev
                        .paths
                        .iter()
                        .any(|p| p.file_name().is_some_and(|n| names.contains(n)))
            }
            Err(_) => true,
        };
        if ours {
            wake.notify_one();
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "cannot watch the trust files' directories; polling every {POLL:?}");
            return None;
        }
    };
    for dir in &dirs {
        if let Err(e) = watcher.watch(dir, notify::RecursiveMode::NonRecursive) {
            warn!(dir = %dir.display(), error = %e, "cannot watch a trust file's directory; polling it every {POLL:?}");
        }
    }
    Some(DirWatch { _watcher: watcher })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::time::Duration;

    /// The events the kernel queues for a watched directory, read without waiting (the kernel
    /// queues them within the syscall that caused them).
    fn drain(ino: &mut inotify::Inotify) -> usize {
        let mut buf = [0u8; 4096];
        let mut n = 0;
        loop {
            match ino.read_events(&mut buf) {
                Ok(events) => match events.count() {
                    0 => return n,
                    k => n += k,
                },
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return n,
                Err(e) => panic!("reading inotify events: {e}"),
            }
        }
    }

    /// What costs the gateway CPU is the event itself (its task wakes for each, whatever the name):
    /// a log kept open and appended to must raise none; a rename over a file, or a write closed in
    /// place, must raise one.
    #[test]
    fn an_appended_log_raises_no_event_a_finished_change_does() {
        let d = std::env::temp_dir().join(format!("fleet-dir-mask-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        let mut ino = inotify::Inotify::init().expect("inotify");
        ino.watches().add(&d, mask()).expect("watch");
        let mut log = std::fs::File::create(d.join("gateway.log")).expect("log");
        assert!(drain(&mut ino) > 0, "the log's creation is an event");
        for _ in 0..50 {
            writeln!(log, "a log line").expect("write");
            log.flush().expect("flush");
        }
        assert_eq!(drain(&mut ino), 0, "an appended log must raise no event");
        let tmp = d.join("peers.toml.new");
        std::fs::write(&tmp, "[peers]\n").expect("new");
        let _ = drain(&mut ino);
        std::fs::rename(&tmp, d.join("peers.toml")).expect("rename");
        assert!(drain(&mut ino) > 0, "a rename raises an event");
        std::fs::write(d.join("peers.toml"), "[peers]\n").expect("in place");
        assert!(drain(&mut ino) > 0, "a write closed in place raises an event");
        drop(log);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A trust file renamed over, or closed after writing, wakes the watcher; a busy neighbour
    /// kept open and appended to (a log) never does.
    #[tokio::test]
    async fn only_a_finished_change_of_a_watched_file_wakes() {
        let d = std::env::temp_dir().join(format!("fleet-dir-events-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("dir");
        let peers = d.join("peers.toml");
        std::fs::write(&peers, "[peers]\n").expect("peers");
        let wake = Arc::new(Notify::new());
        let _w = watch_dirs(&[peers.as_path()], Arc::clone(&wake)).expect("watch");
        let woke = |wake: Arc<Notify>| async move {
            tokio::time::timeout(Duration::from_millis(300), wake.notified())
                .await
                .is_ok()
        };
        let mut log = std::fs::File::create(d.join("gateway.log")).expect("log");
        // The creation of the log was an event about another file: let it pass unseen.
        for _ in 0..50 {
            writeln!(log, "a log line").expect("write");
            log.flush().expect("flush");
        }
        assert!(
            !woke(Arc::clone(&wake)).await,
            "an appended log must not wake the watcher"
        );
        let tmp = d.join("peers.toml.new");
        std::fs::write(&tmp, "[peers]\nb = \"x\"\n").expect("new");
        std::fs::rename(&tmp, &peers).expect("rename");
        assert!(woke(Arc::clone(&wake)).await, "a rename over the peers file wakes it");
        std::fs::write(&peers, "[peers]\n").expect("in place");
        assert!(woke(Arc::clone(&wake)).await, "a write closed in place wakes it");
        drop(log);
        let _ = std::fs::remove_dir_all(&d);
    }
}
