//! Operators' files (SPEC [C-21] 5 and 13; CONTRACT §12, "Operators' CAs and files"): the ways
//! operators change a file besides a rename, and the KRL as they write it.
//!
//! - *A Kubernetes ConfigMap mount*: the gateway's variables name `<mount>/<file>`, a symlink to
//!   `..data/<file>`, and `..data` is a symlink to a timestamped directory. An update writes a new
//!   timestamped directory, points a new symlink `..data_tmp` at it, renames that over `..data`
//!   and removes the old directory — Kubernetes' AtomicWriter: the file's own path never sees a
//!   write, only the directory sees `..data` renamed.
//! - *Deleted and written again*: `rm`, then the new content written at the path.
//! - *A UTF-8 BOM* at the start of a file (what Windows editors write), at start and mid-run.
//! - *The KRL by hand*: serials in `0x` hex, a `#` comment ending a line; and the binary KRL
//!   `ssh-keygen -k` makes, which a gateway refuses (ERROR naming the file; at start, exit).
//!
//! "Within 2 s" counts from the ConfigMap's rename, from the end of the new write, or from the
//! rename of the BOM copy (CONTRACT §12).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::credentials::krl::{RevocationList, Revoke, Style, binary};
use fleet_conformance::credentials::write_replace;
use fleet_conformance::gateway::{GatewayProcess, GatewaySpec};
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, time_scale, wait_for};

use crate::world::{FleetWorld, Host};

use super::super::files::{Kind, rewrite_all};
use super::super::rosters::roster;
use super::super::{ca_dir, changed_now, error_naming, host_dir, trust_file, two_seconds_after};

/// A UTF-8 byte order mark (U+FEFF as UTF-8: EF BB BF).
const BOM: &str = "\u{feff}";

/// The mount's directory in a host's directory.
const MOUNT: &str = "fleet-config";

/// The three files' names in a mount, and their variables.
const MOUNTED: [(&str, &str); 3] = [
    ("FLEET_PEERS_FILE", "peers.toml"),
    ("FLEET_TRUST_CA_FILE", "trust-cas.pub"),
    ("FLEET_REVOKED_FILE", "revoked.krl"),
];

fn mount_of(w: &FleetWorld, host: &str) -> PathBuf {
    host_dir(w, host).join(MOUNT)
}

/// Whether `host`'s gateway reads its files from a ConfigMap mount.
fn mounted(w: &FleetWorld, host: &str) -> bool {
    std::fs::symlink_metadata(mount_of(w, host).join("..data")).is_ok_and(|m| m.file_type().is_symlink())
}

/// A fresh timestamped directory name, as Kubernetes names them (`..2026_12_04_03_12_27.123456789`).
fn stamped_dir_name() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("..{}_{:09}", now.as_secs(), now.subsec_nanos())
}

/// Points `link` at `target` the way AtomicWriter does: a new symlink beside it, renamed over it.
fn swap_symlink(link: &Path, target: &str) -> anyhow::Result<()> {
    let tmp = link.with_file_name("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).with_context(|| format!("symlink {}", tmp.display()))?;
    std::fs::rename(&tmp, link).with_context(|| format!("renaming {} over {}", tmp.display(), link.display()))?;
    Ok(())
}

/// Lays out `spec`'s membership files as a ConfigMap mount and points its variables there: the
/// peers file its spec lists, and the trust file and revocation list the scenario wrote.
fn mount(spec: &mut GatewaySpec) -> anyhow::Result<()> {
    let dir = spec.dir.join(MOUNT);
    let stamped = stamped_dir_name();
    std::fs::create_dir_all(dir.join(&stamped))?;
    for (var, name) in MOUNTED {
        let content = match var {
            "FLEET_PEERS_FILE" => {
                let p = dir.join(&stamped).join(name);
                fleet_conformance::keys::write_peers_file(&p, &spec.peers)?;
                std::fs::read_to_string(&p)?
            }
            _ => match spec.extra_env.get(var) {
                Some(p) => std::fs::read_to_string(p).with_context(|| format!("reading {p}"))?,
                None => continue,
            },
        };
        std::fs::write(dir.join(&stamped).join(name), content)?;
        std::os::unix::fs::symlink(format!("..data/{name}"), dir.join(name))?;
        spec.extra_env.insert(var.into(), dir.join(name).display().to_string());
    }
    std::os::unix::fs::symlink(&stamped, dir.join("..data"))?;
    Ok(())
}

/// One ConfigMap update: every file as it is, `name` with `content`; then `..data` swapped and the
/// old directory removed.
fn configmap_update(mount: &Path, name: &str, content: &str) -> anyhow::Result<()> {
    let old = std::fs::read_link(mount.join("..data"))?;
    let stamped = stamped_dir_name();
    let new_dir = mount.join(&stamped);
    std::fs::create_dir(&new_dir)?;
    for entry in std::fs::read_dir(mount.join(&old))? {
        let entry = entry?;
        std::fs::copy(entry.path(), new_dir.join(entry.file_name()))?;
    }
    std::fs::write(new_dir.join(name), content)?;
    swap_symlink(&mount.join("..data"), &stamped)?;
    std::fs::remove_dir_all(mount.join(old))?;
    Ok(())
}

/// How an operator changes a file (CONTRACT §12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Habit {
    ConfigMap,
    DeleteAndWrite,
    BomRename,
}

impl Habit {
    fn parse(s: &str) -> anyhow::Result<Habit> {
        Ok(match s {
            "a ConfigMap update" => Habit::ConfigMap,
            "deleting it and writing it again" => Habit::DeleteAndWrite,
            "a rename of a copy that begins with a UTF-8 BOM" => Habit::BomRename,
            other => bail!("no habit {other:?}"),
        })
    }
}

/// Writes `kind` of every running gateway with `text` by `habit`, then notes the change.
fn change_all(w: &mut FleetWorld, kind: Kind, habit: Habit, text: &str) -> anyhow::Result<()> {
    let name = match kind {
        Kind::Peers => "peers.toml",
        Kind::Trust => "trust-cas.pub",
        Kind::Revoked => "revoked.krl",
    };
    let hosts: Vec<String> = w.hosts.keys().cloned().collect();
    ensure!(!hosts.is_empty(), "no gateway runs: nothing to change");
    for h in &hosts {
        ensure!(
            mounted(w, h) == (habit == Habit::ConfigMap),
            "the gateway on {h} {} its files from a ConfigMap mount: it cannot be changed by {habit:?}",
            if mounted(w, h) { "reads" } else { "does not read" }
        );
        match habit {
            Habit::ConfigMap => configmap_update(&mount_of(w, h), name, text)?,
            Habit::DeleteAndWrite => {
                let path = kind.path(w, h);
                std::fs::remove_file(&path).with_context(|| format!("deleting {}", path.display()))?;
                std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            }
            Habit::BomRename => write_replace(&kind.path(w, h), &format!("{BOM}{text}"), 0o644)?,
        }
    }
    changed_now(w);
    Ok(())
}

/// A gateway started as the scenario's others, its membership files either plain or in a
/// ConfigMap mount (laid out once its files are written, before it starts).
#[given(
    regex = r#"^host "([^"]+)" runs a gateway with (?:a main "([^"]+)"|a worker "([^"]+)" whose parent is "([^"]+)"), its membership files (in a Kubernetes ConfigMap mount|in plain files)$"#
)]
async fn runs_with_files(
    w: &mut FleetWorld,
    host: String,
    main: String,
    worker: String,
    parent: String,
    layout: String,
) -> anyhow::Result<()> {
    if layout.contains("ConfigMap") {
        ensure!(!w.hosts.contains_key(&host), "host {host:?} already runs");
        let (mut spec, herdr) = w.host_spec(&host).await?;
        mount(&mut spec)?;
        let gateway = GatewayProcess::start(spec).await?;
        w.hosts.insert(host.clone(), Host { gateway, herdr });
    }
    if main.is_empty() {
        w.add_entity(&host, &worker, "worker", Some(&parent), vec![]).await
    } else {
        w.add_entity(&host, &main, "main", None, vec![]).await
    }
}

/// [C-21] 5 with MEM-2: a CA added to every trust file by an operator's habit.
#[when(regex = r#"^the CA "([^"]+)" is added to every trust file by (.+)$"#)]
async fn ca_added_by(w: &mut FleetWorld, ca: String, habit: String) -> anyhow::Result<()> {
    let habit = Habit::parse(&habit)?;
    w.membership.ca(&ca)?;
    w.membership
        .trusted
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no trust file"))?
        .push(ca);
    let text = trust_file(w, None)?.ok_or_else(|| anyhow!("no trust file"))?;
    change_all(w, Kind::Trust, habit, &text)
}

/// [C-21] 5 with MEM-4: a certificate revoked by its serial in every revocation list by an
/// operator's habit.
#[when(regex = r#"^the certificate of "([^"]+)" is revoked by its serial in every revocation list by (.+)$"#)]
async fn revoked_by_habit(w: &mut FleetWorld, host: String, habit: String) -> anyhow::Result<()> {
    let habit = Habit::parse(&habit)?;
    let serial = w.membership.cert(&host)?.serial;
    let list = w
        .membership
        .revoked
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no revocation list"))?;
    list.entries.push(Revoke::Serial(serial));
    let text = list.render();
    change_all(w, Kind::Revoked, habit, &text)
}

/// Certificates the scenario issues from now on are numbered from `n` (so that a serial written
/// in hex has letters: 26 is `0x1a`).
#[given(expr = "the CAs number certificates from serial {int}")]
async fn serials_from(w: &mut FleetWorld, n: u64) -> anyhow::Result<()> {
    ensure!(n > w.membership.serial, "serial {n} was handed out already");
    w.membership.serial = n - 1;
    Ok(())
}

/// [C-21] 13: the revocation written as operators write it by hand — hex, and a `#` comment
/// ending the line — in every revocation list (each line of the list in that style).
#[when(
    regex = r#"^the certificate of "([^"]+)" is revoked in every revocation list by (its serial in hex|a hex serial range around it|its key id), with a comment ending the line$"#
)]
async fn revoked_by_hand(w: &mut FleetWorld, host: String, how: String) -> anyhow::Result<()> {
    let cert = w.membership.cert(&host)?.clone();
    let entry = match how.as_str() {
        "its serial in hex" => Revoke::Serial(cert.serial),
        "a hex serial range around it" => Revoke::SerialRange(cert.serial.saturating_sub(3), cert.serial + 3),
        "its key id" => Revoke::Id(cert.key_id.clone()),
        other => bail!("no revocation by {other:?}"),
    };
    w.membership
        .revoked
        .as_mut()
        .ok_or_else(|| anyhow!("the gateways read no revocation list"))?
        .entries
        .push(entry);
    let style = Style {
        hex: true,
        comment: Some(format!("retired {host} by hand")),
    };
    rewrite_all(w, Kind::Revoked, |w, _| {
        Ok(w.membership.revoked.clone().unwrap_or_default().render_styled(&style))
    })
}

/// The binary KRL `ssh-keygen -k` makes of the scenario's list with `host`'s certificate revoked
/// (by serial and key id, bound to its CA with `-s`).
fn binary_revoking(w: &FleetWorld, host: &str) -> anyhow::Result<Vec<u8>> {
    let cert = w.membership.cert(host)?;
    let mut list: RevocationList = w.membership.revoked.clone().unwrap_or_default();
    list.entries.push(Revoke::Serial(cert.serial));
    list.entries.push(Revoke::Id(cert.key_id.clone()));
    let ca = w.membership.ca(&cert.ca)?;
    Ok(binary(&ca_dir(w).join("krl"), &list.render(), &ca.public_path())?)
}

/// Writes `bytes` beside `path` and renames them over it (CONTRACT §12's way).
fn replace_bytes(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let beside = path.with_file_name(format!(".binary-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&beside, bytes).with_context(|| format!("writing {}", beside.display()))?;
    std::fs::rename(&beside, path).with_context(|| format!("renaming over {}", path.display()))?;
    Ok(())
}

/// [C-21] 13: a binary KRL given mid-run — one that would revoke `host` if it were read.
#[when(
    regex = r#"^the revocation list of "([^"]+)" is replaced by the binary KRL ssh-keygen -k makes of it with "([^"]+)" revoked$"#
)]
async fn binary_mid_run(w: &mut FleetWorld, of: String, host: String) -> anyhow::Result<()> {
    w.host(&of)?;
    let bytes = binary_revoking(w, &host)?;
    replace_bytes(&Kind::Revoked.path(w, &of), &bytes)?;
    changed_now(w);
    Ok(())
}

/// [C-21] 13 / CONTRACT §12: the refusal of a binary KRL is one line at ERROR holding the file's
/// path (a binary file has no line to name).
#[then(expr = "within 2 seconds the gateway on {string} logs an ERROR naming its revocation list")]
async fn error_names_krl(w: &mut FleetWorld, host: String) -> anyhow::Result<()> {
    let path = Kind::Revoked.path(w, &host).display().to_string();
    let deadline = two_seconds_after(w, Duration::ZERO)?;
    error_naming(w, &host, &path, deadline).await
}

/// A gateway started with a binary KRL as its `FLEET_REVOKED_FILE` (revoking the certificate of
/// `host`, were it read), not waited for.
#[when(regex = r#"^host "([^"]+)" starts a gateway whose revocation list is a binary KRL revoking "([^"]+)"$"#)]
async fn starts_with_binary(w: &mut FleetWorld, host: String, revoked: String) -> anyhow::Result<()> {
    ensure!(!w.hosts.contains_key(&host), "host {host:?} already runs");
    let (spec, herdr) = w.host_spec(&host).await?;
    let path = spec
        .extra_env
        .get("FLEET_REVOKED_FILE")
        .map(PathBuf::from)
        .ok_or_else(|| anyhow!("the gateways read no revocation list"))?;
    replace_bytes(&path, &binary_revoking(w, &revoked)?)?;
    let gateway = GatewayProcess::start_unready(spec)?;
    w.hosts.insert(host, Host { gateway, herdr });
    Ok(())
}

/// MEM-1 / CONTRACT §12 ("A broken file"): started with a file it refuses, the gateway exits
/// non-zero within the start bound, and its output names the file (or its variable).
#[then(
    regex = r#"^the gateway on "([^"]+)" exits non-zero within (\d+) seconds, its output naming its revocation list$"#
)]
async fn exits_naming_krl(w: &mut FleetWorld, host: String, secs: u64) -> anyhow::Result<()> {
    let path = Kind::Revoked.path(w, &host).display().to_string();
    let gw = &mut w.host_mut(&host)?.gateway;
    let status = wait_for(
        &format!("the gateway on {host} to exit"),
        Duration::from_secs(secs),
        || {
            let status = gw.try_exit();
            async move { Ok::<_, String>(status) }
        },
    )
    .await?;
    let log = gw.log();
    ensure!(
        !status.success(),
        "the gateway on {host} exited with {status} although its revocation list is a binary KRL\n{log}"
    );
    ensure!(
        log.lines()
            .any(|l| l.contains(path.as_str()) || l.contains("FLEET_REVOKED_FILE")),
        "the output of the gateway on {host} names neither its revocation list ({path}) nor FLEET_REVOKED_FILE:\n{log}"
    );
    Ok(())
}

/// [C-21] 5 / CONTRACT §12: a gateway started with each of its three files beginning with a
/// UTF-8 BOM — whose first line is, each time, one that matters: `[peers]`, the first CA, and a
/// revocation of `revoked`'s certificate that only this gateway's list holds.
#[when(
    regex = r#"^host "([^"]+)" starts a gateway with a worker "([^"]+)" whose parent is "([^"]+)", its peers file, trust file and revocation list each beginning with a UTF-8 BOM, its revocation list revoking the certificate of "([^"]+)"$"#
)]
async fn starts_with_bom(
    w: &mut FleetWorld,
    host: String,
    worker: String,
    parent: String,
    revoked: String,
) -> anyhow::Result<()> {
    ensure!(!w.hosts.contains_key(&host), "host {host:?} already runs");
    let serial = w.membership.cert(&revoked)?.serial;
    let (mut spec, herdr) = w.host_spec(&host).await?;
    let dir = spec.dir.join("bom");
    std::fs::create_dir_all(&dir)?;
    // The peers file: what the suite writes at a start ([peers] on line 1), with a BOM before it.
    let peers = dir.join("peers.toml");
    fleet_conformance::keys::write_peers_file(&peers, &spec.peers)?;
    let text = std::fs::read_to_string(&peers)?;
    ensure!(text.starts_with("[peers]\n"), "{text}");
    // The trust file without its comment line: the first CA is line 1.
    let trust = trust_file(w, None)?.ok_or_else(|| anyhow!("the gateways read no trust file"))?;
    let cas: Vec<&str> = trust.lines().filter(|l| !l.starts_with('#')).collect();
    ensure!(!cas.is_empty(), "no CA in the trust file");
    let krl = RevocationList {
        entries: vec![Revoke::Serial(serial)],
    };
    let krl_text = krl
        .render()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
        + "\n";
    for (var, name, content) in [
        ("FLEET_PEERS_FILE", "peers.toml", text),
        ("FLEET_TRUST_CA_FILE", "trust-cas.pub", cas.join("\n") + "\n"),
        ("FLEET_REVOKED_FILE", "revoked.krl", krl_text),
    ] {
        let path = dir.join(name);
        write_replace(&path, &format!("{BOM}{content}"), 0o644)?;
        spec.extra_env.insert(var.into(), path.display().to_string());
    }
    let gateway = GatewayProcess::start(spec).await?;
    w.hosts.insert(host.clone(), Host { gateway, herdr });
    w.add_entity(&host, &worker, "worker", Some(&parent), vec![]).await
}

/// A revocation only `at`'s list holds: while `other` lists `name` on `of`, `at` lists nothing of
/// `of` over `n` heartbeats (at least the absence window) — `at` hears every heartbeat of `of`.
#[then(
    regex = r#"^over (\d+) heartbeats the roster of "([^"]+)" lists nothing of host "([^"]+)", while the roster of "([^"]+)" lists "([^"]+)" on "([^"]+)"$"#
)]
async fn absent_here_listed_there(
    w: &mut FleetWorld,
    n: u32,
    at: String,
    of: String,
    other: String,
    name: String,
    on: String,
) -> anyhow::Result<()> {
    ensure!(of == on, "the step compares one host, not {of} and {on}");
    let gid = w.gid(&name)?;
    let (gid, other, on, w2) = (&gid, &other, &on, &*w);
    wait_for(&format!("{name} listed by {other}"), w.heartbeat() * 2, || async move {
        let entries = roster(w2, other).await?;
        if entries
            .iter()
            .any(|e| e["gid"] == gid.as_str() && e["host"] == on.as_str())
        {
            Ok(Some(()))
        } else {
            Err(format!("not listed by {other}: {entries:?}"))
        }
    })
    .await?;
    let window = (w.heartbeat() * n).div_f64(time_scale()).max(ABSENCE_WINDOW);
    let (at, of) = (&at, &of);
    hold_for(
        &format!("the roster of {at} lists nothing of {of}"),
        window,
        || async move {
            let entries = roster(w2, at).await?;
            let listed: Vec<_> = entries.iter().filter(|e| e["host"] == of.as_str()).collect();
            if listed.is_empty() {
                Ok(())
            } else {
                Err(format!("the roster of {at} lists {listed:?}"))
            }
        },
    )
    .await?;
    Ok(())
}
