//! The suite's own files, carried inside the binary.
//!
//! Someone judging their gateway has the `fleet-conformance` binary (installed with cargo, or in
//! the runner image) and nothing else: no checkout. The build script (`build.rs`) packs
//! `features/`, `fixtures/`, the published documents and the SDK client script into the binary;
//! [`unpack`] writes them once into a cache directory named by their digest and hands back that
//! directory as the suite root. Writing goes to a temporary sibling renamed into place, so two
//! runs starting at once never read a half-written tree.

use std::path::{Path, PathBuf};

mod files {
    include!(concat!(env!("OUT_DIR"), "/embedded_files.rs"));
}

pub use files::{DIGEST, FILES};

/// Overrides where the files are unpacked (default: `$XDG_CACHE_HOME/fleet-conformance`, else
/// `$HOME/.cache/fleet-conformance`, else the temporary directory).
pub const CACHE_VAR: &str = "FLEET_CONFORMANCE_CACHE";

/// Marks a complete unpacked tree.
const COMPLETE: &str = ".complete";

/// The cache root the unpacked trees live under.
pub fn cache_root() -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var(CACHE_VAR)
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("fleet-conformance")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("fleet-conformance")))
        .unwrap_or_else(|| std::env::temp_dir().join("fleet-conformance"))
}

/// The directory this binary's files unpack to.
pub fn dir() -> PathBuf {
    cache_root().join(format!("{}-{DIGEST}", env!("CARGO_PKG_VERSION")))
}

/// Unpacks the files (once per digest) and returns the directory holding them.
pub fn unpack() -> std::io::Result<PathBuf> {
    let dir = dir();
    if dir.join(COMPLETE).is_file() {
        return Ok(dir);
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| with_path(e, parent))?;
    let tmp = parent.join(format!(".unpacking-{DIGEST}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    for (rel, bytes) in FILES {
        let path = tmp.join(rel);
        if let Some(p) = path.parent() {
            std::fs::create_dir_all(p).map_err(|e| with_path(e, p))?;
        }
        std::fs::write(&path, bytes).map_err(|e| with_path(e, &path))?;
        if rel.starts_with("scripts/") {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(|e| with_path(e, &path))?;
        }
    }
    std::fs::write(tmp.join(COMPLETE), DIGEST).map_err(|e| with_path(e, &tmp))?;
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another run unpacked the same digest first: theirs is as good as ours.
        Err(_) if dir.join(COMPLETE).is_file() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(with_path(e, &dir)),
    }
}

fn with_path(e: std::io::Error, path: &Path) -> std::io::Error {
    std::io::Error::new(
        e.kind(),
        format!("unpacking the suite's files to {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_travels_whole() {
        let has = |p: &str| FILES.iter().any(|(rel, _)| *rel == p);
        assert!(has("fixtures/requirements.toml"));
        assert!(has("docs/SPEC.md"));
        assert!(has("scripts/mcp-python-client.py"));
        assert!(has("scripts/provision-broker") && has("scripts/convert-inboxes"));
        assert!(FILES.iter().filter(|(rel, _)| rel.ends_with(".feature")).count() > 20);
    }

    #[test]
    fn unpacks_once_to_a_directory_named_by_the_digest() {
        let root = std::env::temp_dir().join(format!("fleet-embedded-{}", uuid::Uuid::new_v4().simple()));
        // SAFETY: no other test of this process reads or writes CACHE_VAR.
        unsafe { std::env::set_var(CACHE_VAR, &root) };
        let dir = unpack().expect("unpack");
        assert!(dir.ends_with(format!("{}-{DIGEST}", env!("CARGO_PKG_VERSION"))));
        let req = std::fs::read(dir.join("fixtures/requirements.toml")).expect("requirements");
        assert!(!req.is_empty());
        assert_eq!(unpack().expect("second unpack"), dir);
        let _ = std::fs::remove_dir_all(&root);
    }
}
