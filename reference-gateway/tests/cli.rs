//! The operator-facing commands of the `fleet-gateway` binary: `check-config`, `keygen`, `ready`.
//!
//! Exists because operators meet these before anything else (issue 10): a broken configuration
//! must be refused with a message naming the field at fault, secrets must never be printed, and
//! a key must be created private. The real binary is run, as an operator would.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fleet-gateway"));
    c.env_clear();
    c
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fleet-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("dir");
    d
}

fn base(c: &mut Command) -> &mut Command {
    c.env("FLEET_HOST_ID", "host-a")
        .env("FLEET_AMQP_URL", "amqp://gw:s3cret-pass@127.0.0.1:5672/fleet")
        .env("FLEET_SIGNING_KEY_FILE", "/k")
        .env("FLEET_PEERS_FILE", "/p")
        .env("FLEET_HERDR_SOCKET", "/s")
        .env("FLEET_LISTEN", "127.0.0.1:7700")
        .env("FLEET_ADMIN_TOKEN", "admin-token-123456")
        .env("FLEET_STATE_DIR", "/state")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn check_config_prints_the_effective_config_with_secrets_masked() {
    let d = dir("check");
    let file = d.join("gw.toml");
    std::fs::write(&file, "prefetch = 7\nheartbeat_ms = 2000\n").expect("write");
    let out = base(&mut bin())
        .env("FLEET_HEARTBEAT_MS", "3000")
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("FLEET_HOST_ID = host-a"), "{stdout}");
    assert!(
        stdout.contains("FLEET_PREFETCH = 7"),
        "the file fills what env leaves: {stdout}"
    );
    assert!(
        stdout.contains("FLEET_HEARTBEAT_MS = 3000"),
        "env wins over the file: {stdout}"
    );
    assert!(stdout.contains("gw:****@"), "{stdout}");
    assert!(
        !stdout.contains("s3cret-pass") && !stdout.contains("admin-token-123456"),
        "{stdout}"
    );
}

#[test]
fn check_config_refuses_each_bad_value_naming_its_field() {
    let d = dir("bad");
    let not_pem = d.join("not-a-ca.pem");
    std::fs::write(&not_pem, "hello\n").expect("write");
    let not_pem = not_pem.display().to_string();
    /// (variable, bad value, another variable the case needs).
    type Case<'a> = (&'a str, String, Option<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        ("FLEET_HOST_ID", "Host_A".into(), None),
        ("FLEET_AMQP_URL", "http://broker".into(), None),
        ("FLEET_LISTEN", "everywhere".into(), None),
        ("FLEET_PREFETCH", "0".into(), None),
        ("FLEET_INJECT_TIMEOUT_MS", "soon".into(), None),
        ("FLEET_ADMIN_TOKEN", "short".into(), None),
        ("FLEET_PROFILES", "claude".into(), None),
        ("FLEET_LOG_FORMAT", "xml".into(), None),
        (
            "FLEET_TLS_CA_FILE",
            not_pem,
            Some(("FLEET_AMQP_URL", "amqps://gw:pw@broker:5671/fleet")),
        ),
        (
            "FLEET_TLS_CA_FILE",
            "/nonexistent/ca.pem".into(),
            Some(("FLEET_AMQP_URL", "amqps://b:5671/f")),
        ),
    ];
    for (var, value, extra) in cases {
        let mut c = bin();
        base(&mut c).env(var, &value).arg("check-config");
        if let Some((k, v)) = extra {
            c.env(k, v);
        }
        let out = c.output().expect("run");
        let (_, stderr) = text(&out);
        assert!(!out.status.success(), "{var}={value:?} was accepted");
        assert!(
            stderr.contains(var),
            "{var}={value:?}: the error does not name it: {stderr}"
        );
    }
    // A CA for a plain amqp:// URL would never be used: refused, naming the variable.
    let ca = d.join("ca.pem");
    std::fs::write(
        &ca,
        "-----BEGIN CERTIFICATE-----\nMIIBfTCCASOg\n-----END CERTIFICATE-----\n",
    )
    .expect("write");
    let out = base(&mut bin())
        .env("FLEET_TLS_CA_FILE", &ca)
        .arg("check-config")
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(text(&out).1.contains("FLEET_TLS_CA_FILE"), "{}", text(&out).1);
    // A missing variable and a bad value in the TOML file are named too.
    let out = bin().arg("check-config").output().expect("run");
    assert!(text(&out).1.contains("FLEET_HOST_ID"), "{}", text(&out).1);
    let file = d.join("gw.toml");
    std::fs::write(&file, "prefetch = \"lots\"\n").expect("write");
    let out = base(&mut bin())
        .args(["check-config", "--config"])
        .arg(&file)
        .output()
        .expect("run");
    assert!(text(&out).1.contains("FLEET_PREFETCH"), "{}", text(&out).1);
}

#[test]
fn keygen_writes_a_private_key_once_and_prints_the_peers_line() {
    use std::os::unix::fs::PermissionsExt as _;
    let d = dir("keygen");
    let key = d.join("signing.key");
    let out = bin()
        .args(["keygen", "--host", "b", "--out"])
        .arg(&key)
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.starts_with("b = \"") && stdout.trim_end().ends_with('"'),
        "{stdout}"
    );
    let mode = std::fs::metadata(&key).expect("key").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the key must be private");
    let again = bin().args(["keygen", "--out"]).arg(&key).output().expect("run");
    assert!(!again.status.success(), "an existing key must never be overwritten");
}

#[test]
fn ready_fails_when_no_gateway_answers() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let out = base(&mut bin())
        .env("FLEET_LISTEN", format!("127.0.0.1:{port}"))
        .arg("ready")
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(text(&out).1.contains("connecting to 127.0.0.1"), "{}", text(&out).1);
}

#[test]
fn check_config_prints_a_node_list_masked_and_names_a_bad_entry() {
    let out = base(&mut bin())
        .env(
            "FLEET_AMQP_URL",
            "amqp://gw:s3cret-pass@n1:5672/fleet,amqp://gw:s3cret-pass@n2:5672/fleet",
        )
        .env("FLEET_QUEUE_TYPE", "quorum")
        .arg("check-config")
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("FLEET_AMQP_URL = amqp://gw:****@n1:5672/fleet,amqp://gw:****@n2:5672/fleet\n"),
        "{stdout}"
    );
    assert!(stdout.contains("FLEET_QUEUE_TYPE = quorum\n"), "{stdout}");
    assert!(!stdout.contains("s3cret-pass"), "{stdout}");
    let out = base(&mut bin())
        .env("FLEET_AMQP_URL", "amqp://gw:s3cret-pass@n1:5672/fleet,n2:5672/fleet")
        .arg("check-config")
        .output()
        .expect("run");
    let (_, stderr) = text(&out);
    assert!(!out.status.success());
    assert!(
        stderr.contains("FLEET_AMQP_URL") && stderr.contains("entry 2 of 2"),
        "{stderr}"
    );
    let out = base(&mut bin())
        .env("FLEET_QUEUE_TYPE", "stream")
        .arg("check-config")
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(text(&out).1.contains("FLEET_QUEUE_TYPE"), "{}", text(&out).1);
}

#[test]
fn convert_inboxes_needs_queues_and_a_broker_url() {
    let out = bin().arg("convert-inboxes").output().expect("run");
    assert_eq!(out.status.code(), Some(2), "no queue named: a usage error");
    let q = "agent.0b7e7c1e-6a0e-4c8e-9d4f-1c2b3a4d5e6f.inbox.v2";
    let out = bin().args(["convert-inboxes", q]).output().expect("run");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out).1.contains("FLEET_AMQP_URL"), "{}", text(&out).1);
    // Only the broker settings are needed; an unreachable broker is a clear error.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("port")
        .port();
    let out = bin()
        .env(
            "FLEET_AMQP_URL",
            format!("amqp://gw:s3cret-pass@127.0.0.1:{port}/fleet"),
        )
        .args(["convert-inboxes", q])
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let (_, stderr) = text(&out);
    assert!(stderr.contains("no node of FLEET_AMQP_URL answered"), "{stderr}");
    assert!(!stderr.contains("s3cret-pass"), "{stderr}");
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/membership")).join(name)
}

#[test]
fn keygen_also_writes_the_openssh_line_a_ca_signs() {
    let d = dir("keygen-pub");
    let key = d.join("signing.key");
    let out = bin()
        .args(["keygen", "--host", "b", "--out"])
        .arg(&key)
        .output()
        .expect("run");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.starts_with("b = \""), "stdout stays the peers line: {stdout}");
    let line = std::fs::read_to_string(d.join("signing.key.pub")).expect("the .pub file");
    assert!(
        line.starts_with("ssh-ed25519 AAAA") && line.trim_end().ends_with(" b"),
        "{line}"
    );
    assert!(stderr.contains(line.trim()), "{stderr}");
}

#[test]
fn cert_check_says_whether_a_gateway_would_accept_it() {
    let check = |cert: &str, host: &str| {
        bin()
            .args(["cert", "check"])
            .arg(fixture(cert))
            .arg("--ca-file")
            .arg(fixture("trust-ca.txt"))
            .arg("--revoked-file")
            .arg(fixture("krl.txt"))
            .args(["--host", host])
            .output()
            .expect("run")
    };
    let ok = check("a-cert.pub", "a");
    let (stdout, stderr) = text(&ok);
    assert!(ok.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("serial       11") && stdout.contains("trusted by"),
        "{stdout}"
    );
    for (cert, host, why) in [
        ("a-other-ca-cert.pub", "a", "CA not trusted"),
        ("a-id-cert.pub", "a", "revoked"),
        ("a-expired-cert.pub", "a", "expired"),
        ("a-cert.pub", "b", "host not among the principals"),
    ] {
        let o = check(cert, host);
        let (stdout, stderr) = text(&o);
        assert!(!o.status.success(), "{cert}: {stdout}");
        assert!(stdout.contains(why), "{cert}: {stdout}");
        assert!(stderr.contains("would not accept"), "{stderr}");
    }
    let ca_from_env = bin()
        .env("FLEET_TRUST_CA_FILE", fixture("ca2.pub"))
        .args(["cert", "check"])
        .arg(fixture("a-cert.pub"))
        .output()
        .expect("run");
    assert!(
        !ca_from_env.status.success(),
        "FLEET_TRUST_CA_FILE is the default --ca-file"
    );
}

#[test]
fn a_broken_trust_file_refuses_the_start_naming_file_and_line() {
    let d = dir("broken-trust");
    let key = d.join("a.key");
    std::fs::copy(fixture("a.key"), &key).expect("key");
    let peers = d.join("peers.toml");
    std::fs::write(&peers, "[peers]\n").expect("peers");
    let krl = d.join("krl.txt");
    std::fs::write(&krl, "# revoked\nserial: 1\nrevoke everything\n").expect("krl");
    let out = base(&mut bin())
        .env("FLEET_SIGNING_KEY_FILE", &key)
        .env("FLEET_PEERS_FILE", &peers)
        .env("FLEET_REVOKED_FILE", &krl)
        .env("FLEET_STATE_DIR", d.join("state"))
        .env("FLEET_LISTEN", "127.0.0.1:0")
        .output()
        .expect("run");
    let (_, stderr) = text(&out);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{}: line 3", krl.display())),
        "names the file and the line: {stderr}"
    );
}
