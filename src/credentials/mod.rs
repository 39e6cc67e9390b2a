//! The credentials of SPEC §18 (fleet membership), made by the real `ssh-keygen` of OpenSSH.
//!
//! Why a module of its own: every certificate, CA and revocation list a membership scenario hands
//! a gateway must come from the tool operators use (`ssh-keygen`, Debian's `openssh-client`), never
//! from code shared with a gateway (CONTRACT §12) — a gateway that misreads a real certificate
//! must fail here, not agree with a helper that misreads it the same way. This module drives that
//! binary and writes the files a gateway reads, the way configuration managers replace them:
//! the new content beside the file, then a rename over it.
//!
//! - [`ca`] — a fleet CA of any key type operators use (ed25519, ECDSA, RSA; DSA for a line no
//!   gateway takes), the host and user certificates it signs (`ssh-keygen -s`, with an RSA CA's
//!   signature algorithm or critical options where a scenario asks), and what `ssh-keygen -L`
//!   says of one;
//! - [`openssh`] — a suite host key as an OpenSSH public key line, and fingerprints (`-l`);
//! - [`krl`] — revocation lists in the KRL specification form `ssh-keygen -k` reads (hex serials
//!   and end-of-line comments too), and the binary KRL it makes of one;
//! - [`peers`] — peers files whose entries may list several keys (MEM-1).

pub mod ca;
pub mod krl;
pub mod openssh;
pub mod peers;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// What went wrong making or writing a credential.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("ssh-keygen not found: run scripts/setup (it installs Debian's openssh-client)")]
    NotFound,
    #[error("ssh-keygen {args} failed ({status}): {stderr}")]
    Failed {
        args: String,
        status: String,
        stderr: String,
    },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("ssh-keygen's {what} is not what was expected: {found:?}")]
    Unexpected { what: String, found: String },
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> CredentialError + use<> {
    let path = path.to_path_buf();
    move |source| CredentialError::Io { what, path, source }
}

/// The `ssh-keygen` binary on `PATH`, looked up once.
pub fn ssh_keygen() -> Result<&'static Path, CredentialError> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|d| d.join("ssh-keygen"))
                .find(|p| p.is_file())
        })
        .as_deref()
        .ok_or(CredentialError::NotFound)
}

/// Runs `ssh-keygen` with `args` and returns its standard output; a non-zero exit is an error
/// carrying its standard error.
pub(crate) fn run<I, S>(args: I) -> Result<String, CredentialError>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let bin = ssh_keygen()?;
    let args: Vec<std::ffi::OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new(bin)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| CredentialError::Failed {
            args: shown.clone(),
            status: "not started".into(),
            stderr: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(CredentialError::Failed {
            args: shown,
            status: out.status.to_string(),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Replaces `path` with `content` the way configuration managers do (CONTRACT §12): written to a
/// new file beside it, then renamed over it — the path stays, the inode changes, and a reader
/// never sees half a file. `mode` sets the new file's permissions (a key file is 0600).
pub fn write_replace(path: &Path, content: &str, mode: u32) -> Result<(), CredentialError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let beside = path.with_file_name(format!(".{name}.new-{}", uuid::Uuid::new_v4().simple()));
    let mut f = std::fs::OpenOptions::new()
        .create_new(true)
        .write(true)
        .mode(mode)
        .open(&beside)
        .map_err(io("cannot create", &beside))?;
    f.write_all(content.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io("cannot write", &beside))?;
    drop(f);
    std::fs::rename(&beside, path).map_err(io("cannot rename over", path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replaced_file_has_the_new_content_a_new_inode_and_nothing_left_beside() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = std::env::temp_dir().join(format!("cred-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("peers.toml");
        std::fs::write(&path, "old\n").expect("write");
        let before = std::fs::metadata(&path).expect("meta").ino();
        write_replace(&path, "new\n", 0o600).expect("replace");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "new\n");
        let meta = std::fs::metadata(&path).expect("meta");
        assert_ne!(meta.ino(), before, "renamed over, not written in place");
        assert_eq!(meta.mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(&dir)
            .expect("ls")
            .map(|e| e.expect("e").file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        std::fs::remove_dir_all(&dir).expect("rm");
    }

    #[test]
    fn ssh_keygen_is_installed_here() {
        // The suite's credentials need it; scripts/setup installs it.
        ssh_keygen().expect("ssh-keygen on PATH (scripts/setup installs openssh-client)");
    }
}
