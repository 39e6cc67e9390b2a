//! Re-reading the files of SPEC §18 while the gateway runs: on change and on SIGHUP, applied
//! within 2 s (MEM-1), and the gateway's own key and certificate (MEM-3).
//!
//! Files are replaced by rename (configuration managers write beside and rename over: the path
//! stays, the inode changes), so the *directories* are watched ([`super::dir_events`]: inotify on Linux), and
//! a poll every [`POLL`] compares each file's (device, inode, size, mtime, ctime) for volumes
//! that deliver no events (some network and container mounts). A changed stamp makes the file be
//! read; content equal to what was last seen changes nothing. Content that does not parse is not
//! applied: the last good content stays in force, an ERROR names the file and the line, and
//! `fleet_gateway_trust_reload_errors_total{file}` counts it — once per bad content, not once per
//! poll. SIGHUP re-reads every file at once. A file that turns empty (or comments only) where the
//! content in force held entries is applied only once it has stayed so for [`EMPTY_HOLD`] ([C-27]
//! 2): a file rewritten in place is briefly empty.
//!
//! The key and certificate files are read together [`DEBOUNCE`] after the last change of either
//! (a rotation replaces both, a few milliseconds apart), or at once on SIGHUP; see
//! [`super::rotate`]. The same task sweeps the roster of hosts that lost their last key
//! ([`super::sweep`]) and watches the own certificate's expiry (MEM-4).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, error, info, warn};

use super::ca::CaSet;
use super::files::{self, FileError, LineError, TrustFile};
use super::krl::Krl;
use super::own::OwnProblem;
use super::peers::Peers;
use super::rotate::Rotation;
use super::status::{KeptOut, RefusedRotation};
use super::sweep::Sweeper;
use super::trust::TrustFiles;
use crate::envelope::now_ms;
use crate::gateway::Gateway;
use crate::metrics::Metrics;
use crate::publish::Refusal;

/// The poll fallback's period (also the sweep's and the expiry check's); defined beside the
/// directory events it stands in for.
pub use super::dir_events::POLL;

/// How long after the last change of the key or certificate file both are read (MEM-3).
pub const DEBOUNCE: Duration = Duration::from_millis(200);

/// How long after a directory event the files are looked at (a rename burst settles).
const EVENT_SETTLE: Duration = Duration::from_millis(20);

/// How long a trust file that turned empty where it held entries must stay so before it is
/// applied ([C-27] 2): a file rewritten in place is briefly empty, which is no decision to trust
/// nobody. With the poll's 500 ms it is applied within MEM-1's 2 s all the same.
const EMPTY_HOLD: Duration = Duration::from_secs(1);

/// How often certified keys long expired are forgotten.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// A file's identity and size/time, as the poll compares them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    len: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        })
    }
}

/// One watched file.
struct Watched {
    file: TrustFile,
    path: PathBuf,
    stamp: Option<Stamp>,
    /// The content last looked at (applied or refused), or the last read error.
    seen: Option<Result<Vec<u8>, String>>,
    /// Since when the file has been empty while the content in force held entries ([C-27] 2).
    emptied: Option<Instant>,
}

impl Watched {
    fn new(file: TrustFile, path: &Path) -> Watched {
        Watched {
            file,
            path: path.to_path_buf(),
            stamp: None,
            seen: None,
            emptied: None,
        }
    }

    /// [C-27] 2: whether `content` is held back as an emptied file — empty (or comments and
    /// blank lines only) where the content in force holds entries, for less than [`EMPTY_HOLD`].
    /// Notes when it turned empty, and forgets it once the file holds entries again.
    fn held_back(&mut self, gw: &Gateway, content: &Result<Vec<u8>, String>) -> bool {
        let empty = matches!(content, Ok(bytes) if is_empty(self.file, bytes));
        if !empty || !in_force_holds_entries(gw, self.file) {
            self.emptied = None;
            return false;
        }
        let since = *self.emptied.get_or_insert_with(|| {
            gw.membership.decisions.file(
                self.file,
                Some((self.path.display().to_string(), KeptOut::Emptied)),
                now_ms(),
            );
            info!(
                file = self.file.var(),
                path = %self.path.display(),
                "{} {}: the file turned empty; applied only if it stays so for {EMPTY_HOLD:?}",
                self.file.var(),
                self.path.display()
            );
            Instant::now()
        });
        since.elapsed() < EMPTY_HOLD
    }

    /// Whether the stamp moved since the last look (always when `force`).
    fn moved(&mut self, force: bool) -> bool {
        let stamp = Stamp::of(&self.path);
        let moved = force || stamp != self.stamp || stamp.is_none();
        self.stamp = stamp;
        moved
    }

    /// The file's new content, if it differs from what was last seen; a read error that differs
    /// from the last one is returned as `Err`.
    fn fresh(&mut self) -> Option<Result<Vec<u8>, String>> {
        let now = std::fs::read(&self.path).map_err(|e| e.to_string());
        if self.seen.as_ref() == Some(&now) {
            return None;
        }
        self.seen = Some(now.clone());
        Some(now)
    }
}

/// Empty, or comments and blank lines only (a binary or unreadable text is not empty).
fn is_empty(file: TrustFile, bytes: &[u8]) -> bool {
    files::text(file, bytes).is_ok_and(|t| files::meaningful_lines(t).next().is_none())
}

/// Whether the content in force of `file` holds any entry.
fn in_force_holds_entries(gw: &Gateway, file: TrustFile) -> bool {
    let files = gw.membership.trust.files();
    match file {
        TrustFile::Peers => files.peers.hosts().next().is_some(),
        TrustFile::TrustCa => !files.cas.is_empty() || !files.cas.skipped().is_empty(),
        TrustFile::Revoked => !files.krl.is_empty(),
        TrustFile::SigningKey | TrustFile::HostCert => false,
    }
}

/// Starts the watcher task for the life of the process.
pub fn spawn(gw: Arc<Gateway>) {
    tokio::spawn(async move { run(gw).await });
}

async fn run(gw: Arc<Gateway>) {
    let cfg = &gw.cfg;
    let mut trust = vec![Watched::new(TrustFile::Peers, &cfg.peers_file)];
    if let Some(p) = &cfg.trust_ca_file {
        trust.push(Watched::new(TrustFile::TrustCa, p));
    }
    if let Some(p) = &cfg.revoked_file {
        trust.push(Watched::new(TrustFile::Revoked, p));
    }
    let mut identity = vec![Watched::new(TrustFile::SigningKey, &cfg.signing_key_file)];
    if let Some(p) = &cfg.host_cert_file {
        identity.push(Watched::new(TrustFile::HostCert, p));
    }
    let wake = Arc::new(Notify::new());
    let paths: Vec<&Path> = trust.iter().chain(&identity).map(|w| w.path.as_path()).collect();
    let _events = super::dir_events::watch_dirs(&paths, Arc::clone(&wake));
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGHUP; trust files are re-read on change only");
            None
        }
    };
    let mut shutdown = gw.shutdown_signal();
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweeper = Sweeper::default();
    let mut last_prune = Instant::now();
    let mut own: Option<OwnProblem> = None;
    // [C-21] 12: a gateway started with a credential the fleet would reject says so at once.
    watch_own_cert(&gw, &mut own);
    // The first look takes the files as the start read them (quietly: nothing changed).
    for w in &mut trust {
        w.moved(true);
        if let Some(content) = w.fresh() {
            reload(&gw, w, content, true);
        }
    }
    for w in &mut identity {
        w.moved(true);
    }
    let mut identity_due: Option<Instant> = None;
    loop {
        let mut force = false;
        let debounce = async {
            match identity_due {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        // An emptied file is looked at again once its hold has passed ([C-27] 2).
        let emptied_due = trust.iter().filter_map(|w| w.emptied).min().map(|t| t + EMPTY_HOLD);
        let emptied = async {
            match emptied_due {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = wake.notified() => tokio::time::sleep(EVENT_SETTLE).await,
            Some(()) = async { match hup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => {
                info!("SIGHUP: re-reading the trust files, the signing key and the host certificate");
                force = true;
            }
            _ = debounce => {}
            _ = emptied => {}
            _ = tick.tick() => {}
            _ = shutdown.changed() => if *shutdown.borrow() { return; },
        }
        for w in &mut trust {
            let content = if w.moved(force) { w.fresh() } else { None };
            // Held back, an emptied file is `seen` already: taken from there once its hold passed.
            let content = match content {
                Some(c) => Some(c),
                None if w.emptied.is_some() => w.seen.clone(),
                None => None,
            };
            if let Some(content) = content
                && !w.held_back(&gw, &content)
            {
                w.emptied = None;
                reload(&gw, w, content, false);
            }
        }
        if identity.iter_mut().fold(false, |any, w| w.moved(false) | any) {
            identity_due = Some(Instant::now() + DEBOUNCE);
        }
        if force || identity_due.is_some_and(|t| t <= Instant::now()) {
            identity_due = rotate(&gw, &mut identity).await;
        }
        sweeper.sweep(&gw);
        watch_own_cert(&gw, &mut own);
        if last_prune.elapsed() >= PRUNE_EVERY {
            gw.membership.trust.prune(now_ms());
            last_prune = Instant::now();
        }
    }
}

/// Applies one changed trust file, or reports why not (`quiet`: no INFO line when applied).
fn reload(gw: &Gateway, w: &Watched, content: Result<Vec<u8>, String>, quiet: bool) {
    let path = w.path.display().to_string();
    let applied = match content {
        Ok(bytes) => apply(gw, w.file, &bytes).map_err(|e| FileError::at(w.file, &w.path, e)),
        Err(reason) => Err(FileError::Read {
            var: w.file.var(),
            path: path.clone(),
            reason,
        }),
    };
    let decisions = &gw.membership.decisions;
    match applied {
        Ok(what) if quiet => debug!(file = w.file.var(), %path, "{what}: in force"),
        Ok(what) => {
            decisions.file(w.file, None, now_ms());
            info!(file = w.file.var(), %path, "{what}: re-read and applied");
        }
        Err(e) => {
            let kept = KeptOut::Broken { error: e.to_string() };
            decisions.file(w.file, Some((path.clone(), kept)), now_ms());
            error!(file = w.file.var(), %path, "{e}: not applied; the last good content stays in force");
            Metrics::count(&gw.metrics.trust_reload_errors, &[("file", w.file.var())]);
        }
    }
}

/// Parses `bytes` as `file` and puts it in force; says what it holds. The bytes become text as at
/// start ([`files::text`]: BOM, UTF-8, binary KRL); a CA-file line of a type not taken is skipped
/// with a WARN ([C-21] 10).
fn apply(gw: &Gateway, file: TrustFile, bytes: &[u8]) -> Result<String, LineError> {
    let text = files::text(file, bytes)?;
    let trust = &gw.membership.trust;
    Ok(match file {
        TrustFile::Peers => {
            let peers = Peers::parse(text)?;
            let what = format!("peers file: {}", TrustFiles::peers_summary(&peers));
            trust.set_peers(peers);
            what
        }
        TrustFile::TrustCa => {
            let cas = CaSet::parse(text)?;
            // Once per content: not again at the first look, which reads what the start read.
            if let Some(path) = &gw.cfg.trust_ca_file
                && trust.files().cas != cas
            {
                cas.warn_skipped(path);
            }
            let what = format!("CA file: {}", TrustFiles::cas_summary(&cas));
            trust.set_cas(cas);
            what
        }
        TrustFile::Revoked => {
            let krl = Krl::parse(text)?;
            let what = format!("revocation list: {}", TrustFiles::krl_summary(&krl));
            trust.set_krl(krl);
            what
        }
        TrustFile::SigningKey | TrustFile::HostCert => String::new(),
    })
}

/// Tries the rotation (MEM-3); returns when to try again (a publish that could not be made).
async fn rotate(gw: &Gateway, identity: &mut [Watched]) -> Option<Instant> {
    let decisions = &gw.membership.decisions;
    match gw.rotate_identity().await {
        Rotation::Unchanged => {
            decisions.rotation(None);
            None
        }
        Rotation::Rotated(what) => {
            decisions.rotation(None);
            info!("{what}");
            None
        }
        Rotation::Refused {
            file,
            error,
            retry_at_ms,
        } => {
            decisions.rotation(Some(RefusedRotation {
                file,
                error: error.clone(),
                since_ms: now_ms(),
                retry_at_ms,
            }));
            // Logged once per content: looked at again when a file changes or on SIGHUP, and a
            // certificate not valid yet also when it becomes valid ([C-27] 3).
            error!(
                file = file.var(),
                "{error}: the gateway keeps signing with its current key and certificate"
            );
            Metrics::count(&gw.metrics.trust_reload_errors, &[("file", file.var())]);
            for w in identity.iter_mut() {
                w.moved(true);
            }
            // A little after: the monotonic clock and the wall clock need not agree to the ms.
            retry_at_ms.map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(now_ms()) + 50))
        }
        Rotation::Pending(why) => {
            warn!(reason = %why, "rotation waits: the new key's presence could not be published yet; retrying");
            Some(Instant::now() + POLL)
        }
    }
}

/// MEM-4, [C-21] 9 and 12: the seconds-left gauge, the WARN within 7 days; and, while the own
/// credential would be rejected by the fleet (revoked, expired, or failing another check a peer
/// makes), not ready and refusing to publish — an ERROR naming why when that starts.
fn watch_own_cert(gw: &Gateway, last: &mut Option<OwnProblem>) {
    let now = now_ms();
    let own = &gw.membership.own;
    if let Some(left) = own.seconds_left(now) {
        Metrics::gauge(&gw.metrics.cert_expiry_seconds, &[], left);
    }
    if let Some(text) = own.expiry_warning_due(now) {
        warn!("{text}");
    }
    let problem = gw.membership.own_problem();
    if problem != *last {
        match &problem {
            Some(p) => error!(
                check = p.check,
                "{}: every peer would reject this gateway's messages; reporting not ready (/readyz 503) and refusing to publish until the credential is replaced",
                p.why
            ),
            None => info!("own credential valid: ready and publishing as far as membership goes"),
        }
        gw.publisher.set_refusal(problem.as_ref().map(|p| Refusal {
            reason: p.check,
            detail: p.why.clone(),
        }));
        *last = problem;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::membership::cert::tests::{fixture, seed_signer};

    /// Writes `text` beside `path` and renames it over (as configuration managers do).
    fn replace(path: &Path, text: &str) {
        let tmp = path.with_extension("new");
        std::fs::write(&tmp, text).expect("write");
        std::fs::rename(&tmp, path).expect("rename");
    }

    async fn within_2s(what: &str, ok: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(2);
        while !ok() {
            assert!(Instant::now() < deadline, "{what} within 2 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn renamed_files_are_applied_and_a_broken_one_is_kept_out() {
        let d = std::env::temp_dir().join(format!("fleet-watch-gw-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let file = |name: &str, text: &str| {
            let p = d.join(name);
            std::fs::write(&p, text).expect("write");
            p.display().to_string()
        };
        let env: std::collections::BTreeMap<String, String> = [
            ("FLEET_HOST_ID", "r".to_string()),
            ("FLEET_AMQP_URL", "amqp://127.0.0.1:1/fleet".into()),
            ("FLEET_SIGNING_KEY_FILE", file("r.key", &fixture("c.key"))),
            ("FLEET_PEERS_FILE", file("peers.toml", "[peers]\n")),
            ("FLEET_TRUST_CA_FILE", file("ca.txt", &fixture("trust-ca.txt"))),
            ("FLEET_REVOKED_FILE", file("krl.txt", "# nothing\n")),
            ("FLEET_HERDR_SOCKET", d.join("herdr.sock").display().to_string()),
            ("FLEET_LISTEN", "127.0.0.1:0".into()),
            ("FLEET_ADMIN_TOKEN", "admin-token-123".into()),
            ("FLEET_STATE_DIR", d.join("state").display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let cfg = crate::config::Config::from_sources(env, None).expect("config");
        let gw = Gateway::new(cfg, crate::areas::SpecAreas::all()).expect("gateway");
        spawn(Arc::clone(&gw));
        let trust = &gw.membership.trust;
        let b = seed_signer("b");
        let known = || trust.has_valid_key("b", now_ms());
        assert!(!known());
        replace(
            &d.join("peers.toml"),
            &format!("[peers]\nb = \"{}\"\n", b.public_base64()),
        );
        within_2s("a host added to the peers file is known", known).await;
        replace(&d.join("peers.toml"), "[peers]\nb = 1\n");
        let counted = || {
            gw.metrics
                .render()
                .contains("fleet_gateway_trust_reload_errors_total{file=\"FLEET_PEERS_FILE\"} 1")
        };
        within_2s("a broken peers file is counted", counted).await;
        assert!(known(), "the last good content stays in force");
        replace(&d.join("krl.txt"), &format!("key: {}", fixture("b.pub")));
        within_2s("a revoked key is no longer valid", || !known()).await;
        // [C-27] 2: emptied in place for 300 ms, then written back: never applied.
        std::fs::write(d.join("krl.txt"), "").expect("truncate");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!known(), "an emptied file is held back");
        std::fs::write(d.join("krl.txt"), format!("key: {}", fixture("b.pub"))).expect("write back");
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!known(), "the file written back was never applied empty");
        // Left empty (comments only): applied once it stayed so for 1 s, within 2 s.
        let emptied = Instant::now();
        replace(&d.join("krl.txt"), "# nothing revoked\n");
        within_2s("an emptied file that stays empty is applied", known).await;
        assert!(emptied.elapsed() >= EMPTY_HOLD, "applied after {:?}", emptied.elapsed());
        gw.begin_shutdown();
    }

    #[test]
    fn a_rename_over_the_file_moves_its_stamp() {
        let d = std::env::temp_dir().join(format!("fleet-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("dir");
        let path = d.join("peers.toml");
        std::fs::write(&path, "[peers]\n").expect("write");
        let mut w = Watched::new(TrustFile::Peers, &path);
        assert!(w.moved(false), "first look");
        assert_eq!(w.fresh(), Some(Ok(b"[peers]\n".to_vec())));
        assert!(!w.moved(false), "nothing changed");
        let tmp = d.join("peers.toml.new");
        std::fs::write(&tmp, "[peers]\n").expect("write");
        std::fs::rename(&tmp, &path).expect("rename");
        assert!(w.moved(false), "a new inode");
        assert_eq!(w.fresh(), None, "the same content changes nothing");
        std::fs::remove_file(&path).expect("rm");
        assert!(w.moved(false));
        assert!(matches!(w.fresh(), Some(Err(_))), "a read error is news once");
        assert!(w.moved(false));
        assert_eq!(w.fresh(), None);
    }
}
