//! What the watcher and the receivers decided and an operator cannot see in the trust state
//! itself: a file kept out (broken, or emptied and held back), a rotation refused whose pair is
//! still on disk, and hosts whose presences are rejected for their credential.
//!
//! Why it exists: the trust state holds only what is *in force*. "Why is host e out?" and "why
//! does b still sign with its old key?" are answered by what was refused, so the refusals are
//! remembered here (from the log lines' very decisions) for `GET /v1/trust` and `trust show`
//! ([C-27] 4, issue 59). Reference behaviour: not judged by the suite.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::files::TrustFile;

/// Hosts remembered, at most (a flood of distinct hosts empties the memory, never grows it).
const REMEMBERED: usize = 4096;

/// Why a trust file's content on disk is not the one in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptOut {
    /// It does not parse (or cannot be read): the last good content stays ([C-27] 1, MEM-1).
    Broken { error: String },
    /// It turned empty where the content in force held entries: applied only if it stays so
    /// ([C-27] 2).
    Emptied,
}

/// One trust file kept out, since when (Unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileKeptOut {
    pub file: TrustFile,
    pub path: String,
    pub why: KeptOut,
    pub since_ms: u64,
}

/// A key and certificate on disk the gateway refused to rotate to (MEM-3, [C-21] 12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedRotation {
    pub file: TrustFile,
    pub error: String,
    pub since_ms: u64,
    /// Tried again then without a file change ([C-27] 3: refused only for not being valid yet).
    pub retry_at_ms: Option<u64>,
}

/// The last credential rejection of a host's presence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRejected {
    /// The check (`certificate`, `revoked`, `cert_expired`).
    pub check: &'static str,
    pub why: String,
    pub last_ms: u64,
    /// Rejections of this host's presences since the first remembered.
    pub count: u64,
}

/// The three records, each behind its own lock (each is written by one place).
#[derive(Debug, Default)]
pub struct Decisions {
    files: Mutex<BTreeMap<&'static str, FileKeptOut>>,
    rotation: Mutex<Option<RefusedRotation>>,
    rejected: Mutex<BTreeMap<String, HostRejected>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Decisions {
    /// `file` is kept out (`Some`) or its content on disk is in force (`None`). A file kept out
    /// for the same reason keeps its first `since`.
    pub fn file(&self, file: TrustFile, kept: Option<(String, KeptOut)>, now_ms: u64) {
        let mut files = lock(&self.files);
        match kept {
            None => {
                files.remove(file.var());
            }
            Some((path, why)) => {
                if files.get(file.var()).is_some_and(|k| k.why == why) {
                    return;
                }
                files.insert(
                    file.var(),
                    FileKeptOut {
                        file,
                        path,
                        why,
                        since_ms: now_ms,
                    },
                );
            }
        }
    }

    pub fn files(&self) -> Vec<FileKeptOut> {
        lock(&self.files).values().cloned().collect()
    }

    /// A rotation refused (`Some`), or the pair on disk is the one in use (`None`).
    pub fn rotation(&self, refused: Option<RefusedRotation>) {
        let mut r = lock(&self.rotation);
        match (&*r, refused) {
            (Some(old), Some(new)) if old.error == new.error && old.file == new.file => {}
            (_, new) => *r = new,
        }
    }

    pub fn refused_rotation(&self) -> Option<RefusedRotation> {
        lock(&self.rotation).clone()
    }

    /// A presence of `host` rejected by `check` because of `why`.
    pub fn rejected(&self, host: &str, check: &'static str, why: String, now_ms: u64) {
        let mut r = lock(&self.rejected);
        if !r.contains_key(host) && r.len() >= REMEMBERED {
            r.clear();
        }
        let e = r.entry(host.to_string()).or_insert(HostRejected {
            check,
            why: String::new(),
            last_ms: now_ms,
            count: 0,
        });
        e.check = check;
        e.why = why;
        e.last_ms = now_ms;
        e.count += 1;
    }

    pub fn rejected_hosts(&self) -> BTreeMap<String, HostRejected> {
        lock(&self.rejected).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_kept_out_for_the_same_reason_keeps_its_since_and_is_forgotten_once_in_force() {
        let d = Decisions::default();
        let broken = || Some(("/t/ca".to_string(), KeptOut::Broken { error: "line 3".into() }));
        d.file(TrustFile::TrustCa, broken(), 10);
        d.file(TrustFile::TrustCa, broken(), 20);
        assert_eq!(d.files()[0].since_ms, 10);
        d.file(TrustFile::TrustCa, Some(("/t/ca".into(), KeptOut::Emptied)), 30);
        assert_eq!(d.files()[0].since_ms, 30, "another reason: since then");
        d.file(TrustFile::TrustCa, None, 40);
        assert!(d.files().is_empty());
    }

    #[test]
    fn rejections_are_counted_per_host_and_the_last_why_kept() {
        let d = Decisions::default();
        d.rejected("e", "certificate", "CA untrusted".into(), 1);
        d.rejected("e", "revoked", "serial 7".into(), 2);
        let r = d.rejected_hosts();
        assert_eq!(r["e"].count, 2);
        assert_eq!(r["e"].check, "revoked");
        assert_eq!(r["e"].last_ms, 2);
    }
}
