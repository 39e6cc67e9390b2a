//! The durable entity registry: which entities live on this host, kept in `FLEET_STATE_DIR`.
//!
//! It survives restarts so a restarted gateway re-declares and re-consumes its entities' inboxes,
//! keeps their MCP tokens valid, and dedups spawns by `spawnId` (SPN-2).
//!
//! On disk: a snapshot `entities.json` (written atomically: temp file + rename) and a journal
//! `entities.journal` of the changes since, one JSON line each, appended and synced before a
//! change is answered. Every registration used to rewrite and sync the whole file, under the lock
//! every MCP call takes to find its entity: registrations slowed with the registry's size
//! (360/s at 100 entities, 54/s at 10,000) and held up MCP calls meanwhile. Now a change costs one
//! appended line; the journal is folded into the snapshot when it outgrows the registry (and at
//! every open), and lookups never wait for the disk: the in-memory index and the journal have
//! separate locks, taken in that order so the journal keeps the order of the changes.
//!
//! A journal line cut short by a crash (no newline at the end of the file) was never answered,
//! and is dropped with a warning; any other bad line is a corrupt registry.

use std::collections::{BTreeMap, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

/// The role of an entity (SPEC §0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Worker,
    Main,
    Orchestrator,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Worker => "worker",
            Role::Main => "main",
            Role::Orchestrator => "orchestrator",
        }
    }

    /// Workers are fed by injection (forward path); mains and orchestrators pull over MCP.
    pub fn pulls(self) -> bool {
        !matches!(self, Role::Worker)
    }
}

/// One local entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entity {
    pub gid: String,
    pub role: Role,
    /// herdr pane id (`w1:p2`), local to this host's herdr.
    pub pane: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub parent: Option<String>,
    /// Bearer token for this entity's MCP connection.
    pub token: String,
    /// The spawn that created it, for SPAWN dedup (SPN-2).
    #[serde(default)]
    pub spawn_id: Option<String>,
    /// The v1.0.0 pane id whose legacy queue holds this worker's replies (MIG-2, `migration`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy_pane_id: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot read entity registry {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("entity registry {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("cannot write entity registry {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
}

/// Journal lines appended before the journal is folded into the snapshot, at least.
const MIN_JOURNAL_LINES: usize = 1024;

/// One change, one journal line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Change {
    Put(Entity),
    Remove(String),
}

/// The registry: the entities in memory, indexed, and their durable copy.
pub struct Registry {
    index: Mutex<Index>,
    journal: Mutex<Journal>,
}

/// The in-memory entities, with the lookups every MCP call and SPAWN needs.
#[derive(Default)]
struct Index {
    entities: BTreeMap<String, Entity>,
    /// token → gid. The map finds the candidate (its hash keys are random per process, so the
    /// bucket a token lands in tells an attacker nothing); the token itself is then compared in
    /// constant time.
    by_token: HashMap<String, String>,
    /// spawnId → gid (SPN-2 dedup).
    by_spawn: HashMap<String, String>,
}

impl Index {
    fn put(&mut self, e: Entity) -> Option<Entity> {
        let old = self.remove(&e.gid);
        self.by_token.insert(e.token.clone(), e.gid.clone());
        if let Some(s) = &e.spawn_id {
            self.by_spawn.insert(s.clone(), e.gid.clone());
        }
        self.entities.insert(e.gid.clone(), e);
        old
    }

    fn remove(&mut self, gid: &str) -> Option<Entity> {
        let e = self.entities.remove(gid)?;
        self.by_token.remove(&e.token);
        if let Some(s) = &e.spawn_id {
            self.by_spawn.remove(s);
        }
        Some(e)
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Put(e) => {
                self.put(e);
            }
            Change::Remove(gid) => {
                self.remove(&gid);
            }
        }
    }
}

/// The files: the snapshot and the journal appended since.
struct Journal {
    snapshot: PathBuf,
    path: PathBuf,
    file: std::fs::File,
    lines: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Registry {
    /// Opens (or creates) the registry in `state_dir`: the snapshot, then the journal replayed
    /// over it, then both folded into a fresh snapshot.
    pub fn open(state_dir: &Path) -> Result<Registry, RegistryError> {
        std::fs::create_dir_all(state_dir).map_err(|source| RegistryError::Write {
            path: state_dir.to_path_buf(),
            source,
        })?;
        let snapshot = state_dir.join("entities.json");
        let path = state_dir.join("entities.journal");
        let mut index = Index::default();
        match std::fs::read(&snapshot) {
            Ok(bytes) => {
                let list: Vec<Entity> = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Corrupt {
                    path: snapshot.clone(),
                    reason: e.to_string(),
                })?;
                for e in list {
                    index.put(e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(RegistryError::Read { path: snapshot, source }),
        }
        match std::fs::read(&path) {
            Ok(bytes) => replay(&path, &bytes, &mut index)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(RegistryError::Read { path, source }),
        }
        write_snapshot(&snapshot, &index)?;
        let file = open_journal(&path)?;
        Ok(Registry {
            index: Mutex::new(index),
            journal: Mutex::new(Journal {
                snapshot,
                path,
                file,
                lines: 0,
            }),
        })
    }

    pub fn get(&self, gid: &str) -> Option<Entity> {
        lock(&self.index).entities.get(gid).cloned()
    }

    pub fn contains(&self, gid: &str) -> bool {
        lock(&self.index).entities.contains_key(gid)
    }

    pub fn by_token(&self, token: &str) -> Option<Entity> {
        let index = lock(&self.index);
        let e = index.by_token.get(token).and_then(|gid| index.entities.get(gid))?;
        constant_time_eq(e.token.as_bytes(), token.as_bytes()).then(|| e.clone())
    }

    pub fn by_spawn_id(&self, spawn_id: &str) -> Option<Entity> {
        let index = lock(&self.index);
        index
            .by_spawn
            .get(spawn_id)
            .and_then(|gid| index.entities.get(gid))
            .cloned()
    }

    pub fn all(&self) -> Vec<Entity> {
        lock(&self.index).entities.values().cloned().collect()
    }

    /// Records `e` (new, or replacing the entity of its gid); durable when this returns `Ok`.
    /// On a write error the change is undone in memory too.
    pub fn insert(&self, e: Entity) -> Result<(), RegistryError> {
        let gid = e.gid.clone();
        let mut index = lock(&self.index);
        let old = index.put(e.clone());
        let written = self.record(index, Change::Put(e));
        if written.is_err() {
            let mut index = lock(&self.index);
            index.remove(&gid);
            if let Some(old) = old {
                index.put(old);
            }
        }
        written
    }

    /// Forgets `gid`; durable when this returns `Ok` (with the entity it held).
    pub fn remove(&self, gid: &str) -> Result<Option<Entity>, RegistryError> {
        let mut index = lock(&self.index);
        let Some(removed) = index.remove(gid) else {
            return Ok(None);
        };
        match self.record(index, Change::Remove(gid.to_string())) {
            Ok(()) => Ok(Some(removed)),
            Err(e) => {
                lock(&self.index).put(removed);
                Err(e)
            }
        }
    }

    /// Makes `change` (already applied to `index`) durable. The journal lock is taken before the
    /// index lock is released, so changes reach the journal in the order they were applied; the
    /// write and its sync happen after, so lookups do not wait for the disk.
    fn record(&self, index: MutexGuard<'_, Index>, change: Change) -> Result<(), RegistryError> {
        let mut journal = lock(&self.journal);
        let fold = journal.lines + 1 > MIN_JOURNAL_LINES.max(index.entities.len());
        let snapshot = fold.then(|| {
            let mut copy = Index::default();
            for e in index.entities.values() {
                copy.put(e.clone());
            }
            copy
        });
        drop(index);
        // Appended even when folding: the journal then holds every change since the last
        // snapshot, and replaying it over the new snapshot (a crash between the snapshot's rename
        // and the journal's truncation) changes nothing.
        off_the_runtime(|| {
            journal.append(&change)?;
            match snapshot {
                Some(copy) => journal.fold(&copy),
                None => Ok(()),
            }
        })
    }
}

/// Runs a disk write that ends in a sync without stalling the runtime worker it was called on:
/// on tokio's multi-thread runtime the worker's other tasks move to another thread meanwhile
/// (`block_in_place`); elsewhere (a current-thread runtime, tests, no runtime) it just runs.
fn off_the_runtime<T>(write: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(write),
        _ => write(),
    }
}

impl Journal {
    fn append(&mut self, change: &Change) -> Result<(), RegistryError> {
        let mut line = serde_json::to_vec(change).map_err(|e| RegistryError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        line.push(b'\n');
        let written = self.file.write_all(&line).and_then(|()| self.file.sync_data());
        written.map_err(|source| RegistryError::Write {
            path: self.path.clone(),
            source,
        })?;
        self.lines += 1;
        Ok(())
    }

    /// Writes `index` as the new snapshot, then empties the journal it covers.
    fn fold(&mut self, index: &Index) -> Result<(), RegistryError> {
        write_snapshot(&self.snapshot, index)?;
        self.file = open_journal(&self.path)?;
        self.lines = 0;
        Ok(())
    }
}

/// Replays journal `bytes` into `index`; see the module docs for a line cut short.
fn replay(path: &Path, bytes: &[u8], index: &mut Index) -> Result<(), RegistryError> {
    let complete = bytes.last().is_none_or(|b| *b == b'\n');
    let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()).collect();
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_slice::<Change>(line) {
            Ok(change) => index.apply(change),
            Err(_) if !complete && i + 1 == lines.len() => {
                tracing::warn!(path = %path.display(), "the journal's last line was cut short (a crash mid-write); it was never confirmed and is dropped");
            }
            Err(e) => {
                return Err(RegistryError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("line {}: {e}", i + 1),
                });
            }
        }
    }
    Ok(())
}

/// Opens the journal empty, for appending (only after a snapshot covers what it held).
fn open_journal(path: &Path) -> Result<std::fs::File, RegistryError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| RegistryError::Write {
            path: path.to_path_buf(),
            source,
        })
}

/// Writes the snapshot atomically: a temp file, synced, renamed over the old one.
fn write_snapshot(path: &Path, index: &Index) -> Result<(), RegistryError> {
    let list: Vec<&Entity> = index.entities.values().collect();
    let bytes = serde_json::to_vec(&list).map_err(|e| RegistryError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let tmp = path.with_extension("json.tmp");
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|source| RegistryError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Compares two secrets without an early exit, so the time taken does not say how much matched.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(gid: &str, token: &str, spawn: Option<&str>) -> Entity {
        Entity {
            gid: gid.into(),
            role: Role::Worker,
            pane: "w1:p1".into(),
            groups: vec!["red".into()],
            parent: Some("p".into()),
            token: token.into(),
            spawn_id: spawn.map(str::to_string),
            legacy_pane_id: None,
        }
    }

    fn fresh_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("fleet-reg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn entities_survive_a_reopen() {
        let dir = fresh_dir("reopen");
        let r = Registry::open(&dir).expect("open");
        let e = entity("g1", "tok", Some("s1"));
        r.insert(e.clone()).expect("insert");
        r.insert(entity("g2", "tok2", None)).expect("insert");
        r.remove("g2").expect("remove");
        drop(r);
        let r2 = Registry::open(&dir).expect("reopen");
        assert_eq!(r2.get("g1"), Some(e));
        assert!(r2.get("g2").is_none(), "a removal is durable too");
        assert_eq!(r2.by_token("tok").map(|e| e.gid), Some("g1".to_string()));
        assert_eq!(r2.by_spawn_id("s1").map(|e| e.gid), Some("g1".to_string()));
        assert!(r2.by_token("to").is_none());
        assert!(r2.by_token("tok2").is_none(), "a removed entity's token is gone");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_change_is_one_journal_line_not_a_rewrite() {
        let dir = fresh_dir("journal");
        let r = Registry::open(&dir).expect("open");
        let snapshot = std::fs::read(dir.join("entities.json")).expect("snapshot");
        r.insert(entity("g1", "t1", None)).expect("insert");
        r.remove("g1").expect("remove");
        let journal = std::fs::read_to_string(dir.join("entities.journal")).expect("journal");
        assert_eq!(journal.lines().count(), 2, "{journal}");
        assert_eq!(std::fs::read(dir.join("entities.json")).expect("snapshot"), snapshot);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_journal_is_folded_once_it_outgrows_the_registry() {
        let dir = fresh_dir("fold");
        let r = Registry::open(&dir).expect("open");
        r.insert(entity("kept", "tk", None)).expect("insert");
        for i in 0..MIN_JOURNAL_LINES {
            r.insert(entity("g", &format!("t{i}"), None)).expect("insert");
            r.remove("g").expect("remove");
        }
        let journal = std::fs::read_to_string(dir.join("entities.journal")).expect("journal");
        let lines = journal.lines().count();
        assert!(lines <= MIN_JOURNAL_LINES, "{lines} lines: never folded");
        drop(r);
        let r2 = Registry::open(&dir).expect("reopen");
        assert_eq!(r2.all(), vec![entity("kept", "tk", None)]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_crash_between_snapshot_and_truncation_changes_nothing() {
        // The journal since the last snapshot replayed over a snapshot that already holds it.
        let dir = fresh_dir("crash");
        std::fs::create_dir_all(&dir).expect("dir");
        let a = entity("a", "ta", None);
        let b = entity("b", "tb", None);
        let journal = [Change::Put(a), Change::Put(b.clone()), Change::Remove("a".into())]
            .iter()
            .map(|c| serde_json::to_string(c).expect("json") + "\n")
            .collect::<String>();
        std::fs::write(dir.join("entities.journal"), journal).expect("journal");
        std::fs::write(dir.join("entities.json"), serde_json::to_vec(&[&b]).expect("json")).expect("snap");
        let r = Registry::open(&dir).expect("open");
        assert_eq!(r.all(), vec![b]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_line_cut_short_at_the_end_is_dropped_and_one_in_the_middle_is_corrupt() {
        let dir = fresh_dir("torn");
        std::fs::create_dir_all(&dir).expect("dir");
        let good = serde_json::to_string(&Change::Put(entity("a", "ta", None))).expect("json");
        std::fs::write(dir.join("entities.journal"), format!("{good}\n{{\"put\":{{\"gid\"")).expect("w");
        let r = Registry::open(&dir).expect("a torn last line is not corruption");
        assert_eq!(r.all().len(), 1);
        drop(r);
        std::fs::write(dir.join("entities.journal"), format!("{{\"put\":1}}\n{good}\n")).expect("w");
        match Registry::open(&dir) {
            Err(RegistryError::Corrupt { reason, .. }) => assert!(reason.contains("line 1"), "{reason}"),
            other => panic!("expected Corrupt, got {:?}", other.map(|r| r.all())),
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_old_pretty_snapshot_still_opens() {
        let dir = fresh_dir("compat");
        std::fs::create_dir_all(&dir).expect("dir");
        let e = entity("g1", "tok", None);
        std::fs::write(
            dir.join("entities.json"),
            serde_json::to_vec_pretty(&[&e]).expect("json"),
        )
        .expect("w");
        assert_eq!(Registry::open(&dir).expect("open").all(), vec![e]);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_change_made_on_the_runtime_syncs_off_its_worker() {
        let dir = fresh_dir("runtime");
        let r = Registry::open(&dir).expect("open");
        r.insert(entity("g1", "t1", None))
            .expect("insert on a multi-thread runtime");
        assert!(r.remove("g1").expect("remove").is_some());
        let _ = std::fs::remove_dir_all(dir);
    }
}
