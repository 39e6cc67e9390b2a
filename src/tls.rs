//! Test-time TLS material: a throwaway CA and a broker certificate it signs (SEC-1).
//!
//! Exists so the suite can run brokers with `amqps://` listeners without any certificate checked
//! into the repository or fetched from anywhere. Made with the `openssl` command line tool
//! (Debian's `openssl`, which `ca-certificates` pulls in, so `scripts/setup` always has it) rather
//! than a certificate crate, keeping the build lean. Keys are P-256 (fast to generate); the
//! broker certificate names `localhost`, `127.0.0.1` and any extra names given (a compose service
//! name), valid for two days.
//!
//! [`RogueEndpoint`] stands for a broker node whose certificate another CA signed (CLU-1: the TLS
//! variables apply to each node of a list): `openssl s_server` with such a certificate, which
//! forwards nothing and only says whether a client completed a TLS session with it.

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
    generate_signed_by(dir, "ca", extra_names)
}

/// As [`generate`], the CA named `ca_name` (`<ca_name>.pem`, and in its subject: two CAs made
/// with different names are told apart by name as well as by key).
pub fn generate_signed_by(dir: &Path, ca_name: &str, extra_names: &[&str]) -> Result<TlsFiles, TlsError> {
    let ca_cert = generate_ca(dir, ca_name)?;
    let (ca_pem, ca_key) = (format!("{ca_name}.pem"), format!("{ca_name}.key"));
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
            &ca_pem,
            "-CAkey",
            &ca_key,
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
    for f in ["server.key", "server.pem", ca_pem.as_str()] {
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

/// An `amqps://` endpoint that presents a certificate signed by a CA of its own (not the
/// broker's): a client that verifies against the broker's CA must refuse it. It is `openssl
/// s_server` (one client at a time; nothing is forwarded), whose output tells a completed session
/// (`CIPHER is …`, then whatever the client sent, e.g. the AMQP protocol header) from a refused
/// handshake (an `alert` on its error output). Killed (its process group) when dropped.
pub struct RogueEndpoint {
    pub port: u16,
    /// The CA that signed its certificate (not the broker's).
    pub ca_cert: PathBuf,
    child: tokio::process::Child,
    out: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    err: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    /// Held open: `s_server` stops at the end of its input.
    _stdin: tokio::process::ChildStdin,
    _cleanup: crate::cleanup::Registration,
}

impl RogueEndpoint {
    /// Makes a CA and a server certificate in `dir` and starts listening on a free loopback port
    /// (waits until `s_server` says it accepts).
    pub async fn start(dir: &Path) -> Result<RogueEndpoint, TlsError> {
        let files = generate_signed_by(dir, "rogue-ca", &[])?;
        let err = |step: &str, reason: String| TlsError {
            dir: dir.display().to_string(),
            step: step.to_string(),
            reason,
        };
        let port = crate::ports::free_port().map_err(|e| err("port", e.to_string()))?;
        let mut child = tokio::process::Command::new("openssl")
            .arg("s_server")
            .arg("-accept")
            .arg(format!("127.0.0.1:{port}"))
            .arg("-cert")
            .arg(&files.server_cert)
            .arg("-key")
            .arg(&files.server_key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| err("s_server", format!("cannot run openssl: {e}")))?;
        let cleanup = match child.id().and_then(|p| i32::try_from(p).ok()) {
            Some(pid) => crate::cleanup::register(crate::cleanup::Action::KillGroup(pid)),
            None => return Err(err("s_server", "exited at once".into())),
        };
        let stdin = child.stdin.take().ok_or_else(|| err("s_server", "no stdin".into()))?;
        let out = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let errs = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        if let Some(o) = child.stdout.take() {
            collect(o, out.clone());
        }
        if let Some(e) = child.stderr.take() {
            collect(e, errs.clone());
        }
        let rogue = RogueEndpoint {
            port,
            ca_cert: files.ca_cert.clone(),
            child,
            out,
            err: errs,
            _stdin: stdin,
            _cleanup: cleanup,
        };
        crate::timing::wait_for(
            "openssl s_server listening",
            std::time::Duration::from_secs(10),
            || async {
                if rogue.stdout().contains("ACCEPT") {
                    Ok(Some(()))
                } else {
                    Err(rogue.stderr())
                }
            },
        )
        .await
        .map_err(|e| err("s_server", e.to_string()))?;
        Ok(rogue)
    }

    fn stdout(&self) -> String {
        self.out
            .lock()
            .map(|o| String::from_utf8_lossy(&o).into_owned())
            .unwrap_or_default()
    }

    fn stderr(&self) -> String {
        self.err
            .lock()
            .map(|o| String::from_utf8_lossy(&o).into_owned())
            .unwrap_or_default()
    }

    /// TLS sessions a client completed with it (it accepted the certificate).
    pub fn sessions(&self) -> usize {
        self.stdout().matches("CIPHER is").count()
    }

    /// Whether a client sent the AMQP protocol header over a completed session.
    pub fn amqp_seen(&self) -> bool {
        self.stdout().contains("AMQP")
    }

    /// Handshakes that failed (a client that refuses the certificate ends it with an alert, or
    /// just closes): `s_server`'s error lines.
    pub fn refusals(&self) -> usize {
        self.stderr().lines().filter(|l| l.contains(":error:")).count()
    }

    /// The last error line `s_server` printed (what the last failed handshake looked like).
    pub fn last_error(&self) -> Option<String> {
        self.stderr()
            .lines()
            .rev()
            .find(|l| l.contains(":error:"))
            .map(str::to_string)
    }

    /// Whether it still runs (it does not stop by itself).
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

/// Copies everything `from` yields into `into`, in a task of its own.
fn collect(
    mut from: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    into: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
) {
    tokio::spawn(async move {
        use tokio::io::AsyncReadExt as _;
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut v) = into.lock() {
                v.extend_from_slice(&buf[..n]);
            }
        }
    });
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
