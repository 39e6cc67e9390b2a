//! Test-time TLS material: a throwaway CA and a broker certificate it signs (SEC-1).
//!
//! Exists so the suite can run brokers with `amqps://` listeners without any certificate checked
//! into the repository or fetched from anywhere. Made with the `openssl` command line tool
//! (Debian's `openssl`, which `ca-certificates` pulls in, so `scripts/setup` always has it) rather
//! than a certificate crate, keeping the build lean. Keys are P-256 (fast to generate); the
//! broker certificate names `localhost`, `127.0.0.1` and any extra names given (a compose service
//! name), valid for two days.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A generated CA and a server certificate it signed, as PEM files in one directory.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    pub dir: PathBuf,
    /// The CA certificate (what clients trust).
    pub ca_cert: PathBuf,
    /// The server certificate (leaf only).
    pub server_cert: PathBuf,
    /// The server's private key (PKCS#8 PEM).
    pub server_key: PathBuf,
}

/// Why certificates could not be made.
#[derive(Debug, thiserror::Error)]
#[error("cannot generate TLS certificates in {dir} ({step}): {reason}")]
pub struct TlsError {
    pub dir: String,
    pub step: String,
    pub reason: String,
}

fn openssl(dir: &Path, step: &str, args: &[&str]) -> Result<(), TlsError> {
    let err = |reason: String| TlsError {
        dir: dir.display().to_string(),
        step: step.to_string(),
        reason,
    };
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| {
            err(format!(
                "cannot run openssl ({e}); install Debian's openssl (scripts/setup does)"
            ))
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(err(format!(
            "openssl {} failed: {}",
            args.first().copied().unwrap_or(""),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// A self-signed CA named `name` in `dir` (`<name>.pem`, `<name>.key`). Returns the cert path.
pub fn generate_ca(dir: &Path, name: &str) -> Result<PathBuf, TlsError> {
    std::fs::create_dir_all(dir).map_err(|e| TlsError {
        dir: dir.display().to_string(),
        step: "mkdir".into(),
        reason: e.to_string(),
    })?;
    let (cert, key) = (format!("{name}.pem"), format!("{name}.key"));
    openssl(
        dir,
        "CA",
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &cert,
            "-days",
            "2",
            "-subj",
            &format!("/CN=fleet test CA {name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    )?;
    Ok(dir.join(cert))
}

/// A CA (`ca.pem`) and a server certificate (`server.pem`, `server.key`) it signed for
/// `localhost`, `127.0.0.1` and `extra_names`.
pub fn generate(dir: &Path, extra_names: &[&str]) -> Result<TlsFiles, TlsError> {
    let ca_cert = generate_ca(dir, "ca")?;
    openssl(
        dir,
        "server key and request",
        &[
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    )?;
    let mut san = String::from("subjectAltName=DNS:localhost,IP:127.0.0.1");
    for n in extra_names {
        san.push_str(&format!(",DNS:{n}"));
    }
    let ext = format!(
        "{san}\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    );
    std::fs::write(dir.join("server.ext"), ext).map_err(|e| TlsError {
        dir: dir.display().to_string(),
        step: "server.ext".into(),
        reason: e.to_string(),
    })?;
    openssl(
        dir,
        "server certificate",
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "server.ext",
        ],
    )?;
    // The broker may run as another user (the container's `rabbitmq`): test keys are readable.
    for f in ["server.key", "server.pem", "ca.pem"] {
        use std::os::unix::fs::PermissionsExt as _;
        let _ = std::fs::set_permissions(dir.join(f), std::fs::Permissions::from_mode(0o644));
    }
    Ok(TlsFiles {
        dir: dir.to_path_buf(),
        ca_cert,
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_and_a_server_certificate_it_signed() {
        let dir = std::env::temp_dir().join(format!("fleet-tls-test-{}", uuid::Uuid::new_v4()));
        let files = match generate(&dir, &["rabbitmq"]) {
            Ok(f) => f,
            Err(e) if e.reason.contains("cannot run openssl") => {
                eprintln!("skipped: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        let out = Command::new("openssl")
            .args(["verify", "-CAfile"])
            .arg(&files.ca_cert)
            .arg(&files.server_cert)
            .output()
            .expect("openssl verify");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = Command::new("openssl")
            .args(["x509", "-noout", "-ext", "subjectAltName", "-in"])
            .arg(&files.server_cert)
            .output()
            .expect("openssl x509");
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains("DNS:rabbitmq") && text.contains("IP Address:127.0.0.1"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
