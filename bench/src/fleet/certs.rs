//! Fleet certificates made by the real `ssh-keygen`: one fleet CA, a host certificate per host,
//! and the revocation list (SPEC §18, MEM-2 and MEM-4).
//!
//! Why a module: `--fleet-trust certs` gives every host of the fleet its own OpenSSH host
//! certificate over its ed25519 key, as an operator would issue it, so every credential here is
//! made by `ssh-keygen` itself (Debian's `openssh-client`, installed by `scripts/setup`), never by
//! code shared with a gateway. The one thing written here is the OpenSSH public-key line of a
//! suite [`HostKey`] (what `ssh-keygen -s` signs): `ssh-ed25519 ` + base64 of the key's wire form
//! (RFC 8709: `string "ssh-ed25519"`, `string <32 raw bytes>`). Files change the way
//! configuration managers change them (CONTRACT §12): written beside, then renamed over.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, anyhow, bail};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;

use fleet_conformance::keys::HostKey;

/// The validity every host certificate of a run gets: from an hour ago (clocks of a real fleet
/// disagree a little) to a day from now (no run lasts that long).
pub const VALIDITY: &str = "-1h:+1d";

/// `ssh-ed25519 <base64 wire form> <comment>`: `key`'s public key as an OpenSSH `.pub` line.
pub fn openssh_public_line(key: &HostKey, comment: &str) -> anyhow::Result<String> {
    let raw = B64
        .decode(key.public_base64())
        .context("the suite's public key is not base64")?;
    if raw.len() != 32 {
        bail!("an ed25519 public key has 32 bytes, not {}", raw.len());
    }
    const ALG: &[u8] = b"ssh-ed25519";
    let mut blob = Vec::with_capacity(4 + ALG.len() + 4 + raw.len());
    for part in [ALG, raw.as_slice()] {
        blob.extend_from_slice(&(part.len() as u32).to_be_bytes());
        blob.extend_from_slice(part);
    }
    Ok(format!("ssh-ed25519 {} {comment}", B64.encode(blob))
        .trim_end()
        .to_string())
}

/// Writes `text` to `path` the way configuration managers do: into a file beside it, then renamed
/// over it (the path stays, the inode changes; a reader sees the old content or the new, whole).
pub fn replace_file(path: &Path, text: &str) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .ok_or_else(|| anyhow!("{} names no file", path.display()))?
        .to_string_lossy();
    let beside = path.with_file_name(format!(".{name}.new-{}", std::process::id()));
    std::fs::write(&beside, text).with_context(|| format!("writing {}", beside.display()))?;
    std::fs::rename(&beside, path).with_context(|| format!("renaming {} over {}", beside.display(), path.display()))
}

/// A KRL specification (the text `ssh-keygen -k` reads, SPEC MEM-4) revoking these serials.
pub fn krl_spec(serials: &[u64]) -> String {
    let mut text = String::from("# fleet-bench: revoked host certificates (SPEC MEM-4)\n");
    for s in serials {
        text.push_str(&format!("serial: {s}\n"));
    }
    text
}

/// Runs `ssh-keygen` with `args`; its stderr in the error when it fails.
fn ssh_keygen(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ssh-keygen")
        .args(args)
        .output()
        .context("running ssh-keygen (Debian: openssh-client; scripts/setup installs it)")?;
    if !out.status.success() {
        bail!(
            "ssh-keygen {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The fleet CA: an ed25519 key made by `ssh-keygen -t ed25519`, kept in the run's directory.
pub struct FleetCa {
    dir: PathBuf,
    key: PathBuf,
    pub_line: String,
}

impl FleetCa {
    /// Makes a new CA key (no passphrase) in `dir`.
    pub fn create(dir: &Path) -> anyhow::Result<FleetCa> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let key = dir.join("fleet-ca");
        let _ = std::fs::remove_file(&key);
        let _ = std::fs::remove_file(key.with_extension("pub"));
        let path = key.to_string_lossy().to_string();
        ssh_keygen(&["-q", "-t", "ed25519", "-N", "", "-C", "fleet-bench-ca", "-f", &path])?;
        let pub_line = std::fs::read_to_string(dir.join("fleet-ca.pub"))
            .context("reading the CA's .pub line")?
            .trim()
            .to_string();
        Ok(FleetCa {
            dir: dir.to_path_buf(),
            key,
            pub_line,
        })
    }

    /// The CA's public key, one OpenSSH line: `FLEET_TRUST_CA_FILE`'s content.
    pub fn pub_line(&self) -> &str {
        &self.pub_line
    }

    /// A host certificate over `key` for the host `key.host` with this serial:
    /// `ssh-keygen -s ca -h -I <id> -n <host> -V <VALIDITY> -z <serial> <host>.pub`; the
    /// certificate line it wrote.
    pub fn sign_host(&self, key: &HostKey, serial: u64) -> anyhow::Result<String> {
        let hosts = self.dir.join("hosts");
        std::fs::create_dir_all(&hosts).with_context(|| format!("creating {}", hosts.display()))?;
        let public = hosts.join(format!("{}.pub", key.host));
        std::fs::write(&public, format!("{}\n", openssh_public_line(key, &key.host)?))
            .with_context(|| format!("writing {}", public.display()))?;
        let ca = self.key.to_string_lossy().to_string();
        let id = format!("{}-{serial}", key.host);
        let serial = serial.to_string();
        let file = public.to_string_lossy().to_string();
        ssh_keygen(&[
            "-q", "-s", &ca, "-h", "-I", &id, "-n", &key.host, "-V", VALIDITY, "-z", &serial, &file,
        ])?;
        let cert = hosts.join(format!("{}-cert.pub", key.host));
        let line = std::fs::read_to_string(&cert).with_context(|| format!("reading {}", cert.display()))?;
        Ok(line.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("fleet-bench-certs-{name}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&d).expect("dir");
        d
    }

    /// `ssh-keygen -l` reads our line as an ed25519 public key, and another seed gives another line.
    #[test]
    fn the_public_line_is_one_ssh_keygen_reads_as_this_ed25519_key() {
        let d = dir("pub");
        let key = HostKey::from_seed("h1", [7u8; 32]);
        let line = openssh_public_line(&key, "h1").expect("line");
        assert!(line.starts_with("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI"), "{line}");
        assert!(line.ends_with(" h1"));
        let f = d.join("h1.pub");
        std::fs::write(&f, format!("{line}\n")).expect("write");
        let out = Command::new("ssh-keygen")
            .args(["-l", "-f"])
            .arg(&f)
            .output()
            .expect("ssh-keygen runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success() && text.contains("(ED25519)"), "{text}");
        let other = openssh_public_line(&HostKey::from_seed("h1", [8u8; 32]), "h1").expect("line");
        assert_ne!(line, other, "another key, another line");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_host_certificate_is_signed_by_the_ca_for_that_host_and_serial() {
        let d = dir("sign");
        let ca = FleetCa::create(&d).expect("ca");
        assert!(ca.pub_line().starts_with("ssh-ed25519 "), "{}", ca.pub_line());
        let key = HostKey::generate("sim-7");
        let cert = ca.sign_host(&key, 42).expect("cert");
        assert!(cert.starts_with("ssh-ed25519-cert-v01@openssh.com "), "{cert}");
        let f = d.join("check-cert.pub");
        std::fs::write(&f, format!("{cert}\n")).expect("write");
        let out = Command::new("ssh-keygen")
            .args(["-L", "-f"])
            .arg(&f)
            .output()
            .expect("ssh-keygen runs");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{text}");
        assert!(text.contains("host certificate"), "{text}");
        assert!(text.contains("Serial: 42"), "{text}");
        assert!(text.contains("sim-7"), "{text}");
        // The certified key is ours: its public line's blob is in the listing's "Public key".
        let ours = openssh_public_line(&key, "").expect("line");
        let fp = |line: &str| {
            let p = d.join(format!("fp-{}.pub", uuid::Uuid::new_v4()));
            std::fs::write(&p, format!("{line}\n")).expect("write");
            let o = Command::new("ssh-keygen")
                .args(["-l", "-f"])
                .arg(&p)
                .output()
                .expect("runs");
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string()
        };
        let key_fp = fp(&ours);
        assert!(!key_fp.is_empty() && text.contains(&key_fp), "{key_fp} not in {text}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_revocation_list_is_replaced_whole_and_revokes_by_serial() {
        let d = dir("krl");
        let f = d.join("revoked");
        replace_file(&f, &krl_spec(&[])).expect("empty");
        let before = std::fs::metadata(&f)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .expect("meta");
        replace_file(&f, &krl_spec(&[5, 9])).expect("revoke");
        let after = std::fs::metadata(&f)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .expect("meta");
        assert_ne!(before, after, "renamed over, not written in place");
        let text = std::fs::read_to_string(&f).expect("read");
        assert!(text.contains("serial: 5\nserial: 9\n"), "{text}");
        // ssh-keygen reads it as a KRL specification.
        let ca = FleetCa::create(&d.join("ca")).expect("ca");
        let krl = d.join("krl.bin");
        let out = Command::new("ssh-keygen")
            .args(["-k", "-f"])
            .arg(&krl)
            .arg("-s")
            .arg(d.join("ca").join("fleet-ca.pub"))
            .arg(&f)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let revoked = d.join("revoked-cert.pub");
        std::fs::write(&revoked, ca.sign_host(&HostKey::generate("x"), 9).expect("cert")).expect("write");
        let kept = d.join("kept-cert.pub");
        std::fs::write(&kept, ca.sign_host(&HostKey::generate("y"), 6).expect("cert")).expect("write");
        let query = |p: &Path| {
            Command::new("ssh-keygen")
                .args(["-Q", "-f"])
                .arg(&krl)
                .arg(p)
                .output()
                .expect("runs")
                .status
                .success()
        };
        assert!(!query(&revoked), "serial 9 is revoked");
        assert!(query(&kept), "serial 6 is not");
        let _ = std::fs::remove_dir_all(&d);
    }
}
