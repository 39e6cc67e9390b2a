//! The durable entity registry: which entities live on this host, kept in `FLEET_STATE_DIR`.
//!
//! It survives restarts so a restarted gateway re-declares and re-consumes its entities' inboxes,
//! keeps their MCP tokens valid, and dedups spawns by `spawnId` (SPN-2). Writes are atomic
//! (temp file + rename) so a crash never leaves a torn registry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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

/// The registry file and its in-memory copy.
pub struct Registry {
    path: PathBuf,
    entities: BTreeMap<String, Entity>,
}

impl Registry {
    /// Opens (or creates) `<state_dir>/entities.json`.
    pub fn open(state_dir: &Path) -> Result<Registry, RegistryError> {
        std::fs::create_dir_all(state_dir).map_err(|source| RegistryError::Write {
            path: state_dir.to_path_buf(),
            source,
        })?;
        let path = state_dir.join("entities.json");
        let entities = match std::fs::read(&path) {
            Ok(bytes) => {
                let list: Vec<Entity> = serde_json::from_slice(&bytes).map_err(|e| RegistryError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
                list.into_iter().map(|e| (e.gid.clone(), e)).collect()
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(source) => return Err(RegistryError::Read { path, source }),
        };
        Ok(Registry { path, entities })
    }

    pub fn get(&self, gid: &str) -> Option<&Entity> {
        self.entities.get(gid)
    }

    pub fn by_token(&self, token: &str) -> Option<&Entity> {
        self.entities
            .values()
            .find(|e| constant_time_eq(e.token.as_bytes(), token.as_bytes()))
    }

    pub fn by_spawn_id(&self, spawn_id: &str) -> Option<&Entity> {
        self.entities.values().find(|e| e.spawn_id.as_deref() == Some(spawn_id))
    }

    pub fn all(&self) -> Vec<Entity> {
        self.entities.values().cloned().collect()
    }

    pub fn insert(&mut self, e: Entity) -> Result<(), RegistryError> {
        self.entities.insert(e.gid.clone(), e);
        self.save()
    }

    pub fn remove(&mut self, gid: &str) -> Result<Option<Entity>, RegistryError> {
        let removed = self.entities.remove(gid);
        if removed.is_some() {
            self.save()?;
        }
        Ok(removed)
    }

    fn save(&self) -> Result<(), RegistryError> {
        let list: Vec<&Entity> = self.entities.values().collect();
        let bytes = serde_json::to_vec_pretty(&list).map_err(|e| RegistryError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        let tmp = self.path.with_extension("json.tmp");
        let write = || -> std::io::Result<()> {
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .write(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)
        };
        write().map_err(|source| RegistryError::Write {
            path: self.path.clone(),
            source,
        })
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entities_survive_a_reopen() {
        let dir = std::env::temp_dir().join(format!("fleet-reg-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut r = Registry::open(&dir).expect("open");
        let e = Entity {
            gid: "g1".into(),
            role: Role::Worker,
            pane: "w1:p1".into(),
            groups: vec!["red".into()],
            parent: Some("p".into()),
            token: "tok".into(),
            spawn_id: Some("s1".into()),
            legacy_pane_id: None,
        };
        r.insert(e.clone()).expect("insert");
        let r2 = Registry::open(&dir).expect("reopen");
        assert_eq!(r2.get("g1"), Some(&e));
        assert_eq!(r2.by_token("tok").map(|e| e.gid.as_str()), Some("g1"));
        assert_eq!(r2.by_spawn_id("s1").map(|e| e.gid.as_str()), Some("g1"));
        assert!(r2.by_token("to").is_none());
        let _ = std::fs::remove_dir_all(dir);
    }
}
