//! What the suite started and must stop however the run ends: a process-global cleanup registry,
//! and a sweep of what earlier runs left behind.
//!
//! Exists because a run interrupted with Ctrl-C (SIGINT), SIGTERM or a panic in the runner never
//! reaches the code that stops gateways and brokers in order: the broker lives in a static, and
//! tokio's `kill_on_drop` needs a drop that never comes when the process exits. So every provider
//! registers what it started the moment it exists ([`register`]): a process group to SIGKILL, a
//! container to `docker rm -f`, a docker network to remove (a cluster's), a throwaway directory
//! to delete. The handle ([`Registration`])
//! forgets the entry when its owner stopped the thing itself. [`run_all`] does everything still
//! registered; the runners call it from their signal handlers and when their main future unwinds.
//!
//! A run that was SIGKILLed cannot clean up after itself, so the next run does ([`sweep`]):
//! everything the suite starts is marked with its *owner* (this process, see [`owner_id`]) — a
//! marker file next to each process's work dir, a label on each container and network — and a
//! sweep removes
//! what belongs to an owner that is gone. A concurrently running suite is alive, so its gateways,
//! brokers and containers are left alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

/// Docker label every container the suite starts carries.
pub const CONTAINER_LABEL: &str = "fleet-e2e";
/// Docker label naming the container's owner ([`owner_id`]).
pub const CONTAINER_OWNER_LABEL: &str = "fleet-e2e.owner";
/// Marker files start with this; the rest of the name keeps markers of one directory apart.
pub const MARKER_PREFIX: &str = ".fleet-owned-";
/// How deep below a `fleet-*` entry of the temp dir the sweep looks for markers
/// (`fleet-e2e-<run>/s-<scenario>/<host>/.fleet-owned-…` is three levels down).
const SWEEP_DEPTH: usize = 3;

/// One thing to undo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL every process of the group (a gateway, a `rabbitmq-server` and its Erlang VM).
    KillGroup(i32),
    /// `docker rm -f -v` the container.
    RemoveContainer(String),
    /// `docker network rm` the network (after the containers: a network in use stays).
    RemoveNetwork(String),
    /// Delete a throwaway directory (a broker's data, a socket dir), after the processes died.
    RemoveDir(PathBuf),
}

static ACTIONS: Mutex<BTreeMap<u64, Action>> = Mutex::new(BTreeMap::new());
static NEXT: AtomicU64 = AtomicU64::new(0);
/// Set once [`run_all`] ran for a signal or a panic: whatever registers afterwards (a scenario
/// still restarting a gateway) is undone at once instead of outliving the run.
static SHUTTING_DOWN: AtomicBool = AtomicBool::new(false);
/// Set when this process asked docker for a container: only then does [`run_all`] ask docker
/// about containers it may have started but not registered yet (one still booting).
static USED_DOCKER: AtomicBool = AtomicBool::new(false);

fn actions() -> std::sync::MutexGuard<'static, BTreeMap<u64, Action>> {
    ACTIONS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An entry of the registry. Dropping it forgets the entry (its owner stopped the thing); it
/// never runs the action.
#[derive(Debug)]
pub struct Registration(Option<u64>);

impl Registration {
    /// A registration that holds nothing (the action already ran).
    pub fn none() -> Registration {
        Registration(None)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(id) = self.0.take() {
            actions().remove(&id);
        }
    }
}

/// Registers `action` to be run by [`run_all`]. During a shutdown it runs at once.
pub fn register(action: Action) -> Registration {
    if SHUTTING_DOWN.load(Ordering::SeqCst) {
        perform(std::slice::from_ref(&action));
        return Registration::none();
    }
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    actions().insert(id, action);
    Registration(Some(id))
}

/// Notes that this process starts containers (see [`run_all`]).
pub fn note_docker_use() {
    USED_DOCKER.store(true, Ordering::SeqCst);
}

/// Runs every registered action (processes first, then containers, then directories) and
/// refuses new registrations from then on. Synchronous and idempotent: meant for signal handlers
/// and unwinding, where nothing else will run. Also removes containers labelled with this
/// process as owner that never got registered (interrupted while docker was starting them).
pub fn run_all() {
    SHUTTING_DOWN.store(true, Ordering::SeqCst);
    let mut todo: Vec<Action> = std::mem::take(&mut *actions()).into_values().collect();
    if USED_DOCKER.load(Ordering::SeqCst) {
        let containers = labelled_containers(Some(owner_id()))
            .into_iter()
            .map(|(id, _)| Action::RemoveContainer(id));
        let networks = labelled_networks(Some(owner_id()))
            .into_iter()
            .map(|(id, _)| Action::RemoveNetwork(id));
        for action in containers.chain(networks) {
            if !todo.contains(&action) {
                todo.push(action);
            }
        }
    }
    perform(&todo);
}

/// Runs `actions` now, in the order [`run_all`] would (processes, containers, networks, dirs):
/// for an owner that undoes what it started outside the registry's signal path (a drop).
pub fn undo(actions: &[Action]) {
    perform(actions);
}

/// Whether [`run_all`] ran: the run is being torn down.
pub fn shutting_down() -> bool {
    SHUTTING_DOWN.load(Ordering::SeqCst)
}

fn rank(a: &Action) -> u8 {
    match a {
        Action::KillGroup(_) => 0,
        Action::RemoveContainer(_) => 1,
        Action::RemoveNetwork(_) => 2,
        Action::RemoveDir(_) => 3,
    }
}

fn perform(todo: &[Action]) {
    let mut todo: Vec<&Action> = todo.iter().collect();
    todo.sort_by_key(|a| rank(a));
    let containers: Vec<&str> = todo
        .iter()
        .filter_map(|a| match a {
            Action::RemoveContainer(id) => Some(id.as_str()),
            _ => None,
        })
        .collect();
    for a in &todo {
        if let Action::KillGroup(pgid) = a {
            kill_group(*pgid, libc::SIGKILL);
        }
    }
    if !containers.is_empty() {
        remove_containers(&containers);
    }
    let networks: Vec<&str> = todo
        .iter()
        .filter_map(|a| match a {
            Action::RemoveNetwork(name) => Some(name.as_str()),
            _ => None,
        })
        .collect();
    if !networks.is_empty() {
        remove_networks(&networks);
    }
    for a in &todo {
        if let Action::RemoveDir(dir) = a {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Sends `signal` to every process of group `pgid`; false when there is no such group.
pub fn kill_group(pgid: i32, signal: libc::c_int) -> bool {
    if pgid <= 1 {
        return false;
    }
    // SAFETY: kill(2) with a negative pid only sends a signal; no memory is involved.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

/// `docker rm -f -v` (volumes too: the broker images declare data volumes).
fn remove_containers(ids: &[&str]) {
    let out = Command::new("docker")
        .args(["rm", "-f", "-v"])
        .args(ids)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => eprintln!(
            "cleanup: docker rm -f {}: {}",
            ids.join(" "),
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => eprintln!("cleanup: cannot run docker to remove {}: {e}", ids.join(" ")),
    }
}

/// `docker network rm`; a network already gone is fine.
fn remove_networks(names: &[&str]) {
    let out = Command::new("docker")
        .args(["network", "rm"])
        .args(names)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            if !err.contains("not found") {
                eprintln!("cleanup: docker network rm {}: {}", names.join(" "), err.trim());
            }
        }
        Err(e) => eprintln!("cleanup: cannot run docker to remove {}: {e}", names.join(" ")),
    }
}

/// Containers labelled [`CONTAINER_LABEL`] (only those of `owner`, if given), with their owner.
/// Empty when docker cannot be asked.
fn labelled_containers(owner: Option<&str>) -> Vec<(String, String)> {
    // Full ids, so they compare equal to the ids the providers register (`docker create`'s output).
    labelled(&["ps", "-a", "--no-trunc"], owner)
}

/// Networks labelled [`CONTAINER_LABEL`] (only those of `owner`, if given) by name, with their
/// owner. Empty when docker cannot be asked.
fn labelled_networks(owner: Option<&str>) -> Vec<(String, String)> {
    let format = format!("{{{{.Name}}}}\t{{{{.Label \"{CONTAINER_OWNER_LABEL}\"}}}}");
    labelled_with(&["network", "ls"], owner, &format)
}

/// `docker <list> --filter <label> --format <id>\t<owner>`, parsed.
fn labelled(list: &[&str], owner: Option<&str>) -> Vec<(String, String)> {
    let format = format!("{{{{.ID}}}}\t{{{{.Label \"{CONTAINER_OWNER_LABEL}\"}}}}");
    labelled_with(list, owner, &format)
}

fn labelled_with(list: &[&str], owner: Option<&str>, format: &str) -> Vec<(String, String)> {
    let filter = match owner {
        Some(o) => format!("label={CONTAINER_OWNER_LABEL}={o}"),
        None => format!("label={CONTAINER_LABEL}=1"),
    };
    let out = Command::new("docker")
        .args(list)
        .args(["--filter", &filter, "--format", format])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter_map(|l| {
                let (id, owner) = l.split_once('\t')?;
                Some((id.trim().to_string(), owner.trim().to_string()))
            })
            .filter(|(id, _)| !id.is_empty())
            .collect(),
        _ => Vec::new(),
    }
}

/// This process as an owner: `<pid namespace>:<pid>:<start time>`. The start time (clock ticks
/// since boot, from `/proc`) tells a live owner from a later process that got the same pid; the
/// pid namespace keeps a run in another container (sharing the docker daemon) from judging this
/// one's owners by its own process table.
pub fn owner_id() -> &'static str {
    static ME: OnceLock<String> = OnceLock::new();
    ME.get_or_init(|| {
        let pid = i32::try_from(std::process::id()).unwrap_or(0);
        format!("{}:{pid}:{}", pid_namespace(), start_time(pid).unwrap_or(0))
    })
}

fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            // "pid:[4026531836]"
            l.strip_prefix("pid:[")
                .and_then(|r| r.strip_suffix(']'))
                .map(str::to_string)
        })
        .unwrap_or_else(|| "0".into())
}

/// Field 22 of `/proc/<pid>/stat` (the start time); `None` when there is no such process.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_start_time(&stat)
}

/// The start time in a `/proc/<pid>/stat` line. The command name (field 2) may hold blanks and
/// parentheses, so fields are counted after its closing parenthesis.
fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; field 22 is the 20th.
    after.split_whitespace().nth(19)?.parse().ok()
}

/// How an owner id relates to the processes this one can see.
#[derive(Debug, PartialEq, Eq)]
enum Liveness {
    Alive,
    Gone,
    /// Another pid namespace or unreadable: not ours to judge.
    Unknown,
}

fn liveness(owner: &str) -> Liveness {
    let mut parts = owner.trim().splitn(3, ':');
    let (Some(ns), Some(pid), Some(start)) = (parts.next(), parts.next(), parts.next()) else {
        return Liveness::Unknown;
    };
    let (Ok(pid), Ok(start)) = (pid.parse::<i32>(), start.parse::<u64>()) else {
        return Liveness::Unknown;
    };
    if ns != pid_namespace() {
        return Liveness::Unknown;
    }
    match start_time(pid) {
        Some(s) if s == start => Liveness::Alive,
        _ => Liveness::Gone,
    }
}

/// A marker file: who owns the directory it sits in, and what to undo once that owner is gone.
///
/// ```text
/// owner <pidns>:<pid>:<start>
/// group <pgid>:<start of the group leader>     (optional: a process group to kill)
/// remove-dir                                    (optional: the whole directory is throwaway)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    pub owner: String,
    pub group: Option<(i32, u64)>,
    pub remove_dir: bool,
}

impl Marker {
    /// A marker owned by this process.
    pub fn mine() -> Marker {
        Marker {
            owner: owner_id().to_string(),
            group: None,
            remove_dir: false,
        }
    }

    /// With the process group led by `pgid` (read from `/proc` now).
    pub fn with_group(mut self, pgid: i32) -> Marker {
        self.group = Some((pgid, start_time(pgid).unwrap_or(0)));
        self
    }

    pub fn removing_dir(mut self) -> Marker {
        self.remove_dir = true;
        self
    }

    fn render(&self) -> String {
        let mut s = format!("owner {}\n", self.owner);
        if let Some((pgid, start)) = self.group {
            s.push_str(&format!("group {pgid}:{start}\n"));
        }
        if self.remove_dir {
            s.push_str("remove-dir\n");
        }
        s
    }

    fn parse(text: &str) -> Option<Marker> {
        let mut owner = None;
        let mut group = None;
        let mut remove_dir = false;
        for line in text.lines() {
            match line.split_once(' ') {
                Some(("owner", o)) => owner = Some(o.trim().to_string()),
                Some(("group", g)) => {
                    let (pgid, start) = g.trim().split_once(':')?;
                    group = Some((pgid.parse().ok()?, start.parse().ok()?));
                }
                _ if line.trim() == "remove-dir" => remove_dir = true,
                _ => {}
            }
        }
        Some(Marker {
            owner: owner?,
            group,
            remove_dir,
        })
    }

    /// Writes the marker as `<dir>/.fleet-owned-<name>`; returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> std::io::Result<PathBuf> {
        let path = dir.join(format!("{MARKER_PREFIX}{name}"));
        std::fs::write(&path, self.render())?;
        Ok(path)
    }
}

/// Kills a leftover process group of a dead owner. The group leader is checked by start time:
/// if its pid now belongs to another process, that process and its group are not ours. If the
/// leader is gone, the group id cannot have been reused while members remain, so members are ours.
fn kill_leftover_group(pgid: i32, leader_start: u64) -> bool {
    match start_time(pgid) {
        Some(s) if s != leader_start => false,
        _ => kill_group(pgid, libc::SIGKILL),
    }
}

/// What a sweep removed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub groups: usize,
    pub containers: usize,
    pub networks: usize,
    pub dirs: usize,
}

impl Swept {
    pub fn is_empty(&self) -> bool {
        *self == Swept::default()
    }
}

impl std::fmt::Display for Swept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} process group(s), {} container(s), {} network(s), {} dir(s)",
            self.groups, self.containers, self.networks, self.dirs
        )
    }
}

/// The directories a sweep searches: the temp dir and `/tmp` (short socket dirs live there).
fn sweep_roots() -> Vec<PathBuf> {
    let mut roots = vec![std::env::temp_dir()];
    let tmp = PathBuf::from("/tmp");
    if !roots.contains(&tmp) {
        roots.push(tmp);
    }
    roots
}

/// Removes what earlier runs left behind whose owner is gone: process groups and throwaway
/// directories named by marker files under `fleet-*` entries of the temp dirs, and (with
/// `containers`) containers and networks labelled [`CONTAINER_LABEL`]. Leftovers of live owners (a suite
/// running concurrently) are left alone.
pub fn sweep(containers: bool) -> Swept {
    let mut swept = Swept::default();
    for root in sweep_roots() {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with("fleet-") && e.file_type().is_ok_and(|t| t.is_dir()) {
                sweep_dir(&e.path(), SWEEP_DEPTH, &mut swept);
            }
        }
    }
    if containers {
        let dead: Vec<String> = labelled_containers(None)
            .into_iter()
            .filter(|(_, owner)| liveness(owner) == Liveness::Gone)
            .map(|(id, _)| id)
            .collect();
        if !dead.is_empty() {
            let ids: Vec<&str> = dead.iter().map(String::as_str).collect();
            remove_containers(&ids);
            swept.containers += dead.len();
        }
        let dead: Vec<String> = labelled_networks(None)
            .into_iter()
            .filter(|(_, owner)| liveness(owner) == Liveness::Gone)
            .map(|(name, _)| name)
            .collect();
        if !dead.is_empty() {
            let names: Vec<&str> = dead.iter().map(String::as_str).collect();
            remove_networks(&names);
            swept.networks += dead.len();
        }
    }
    swept
}

fn sweep_dir(dir: &Path, depth: usize, swept: &mut Swept) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut subdirs = Vec::new();
    let mut remove_dir = false;
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Ok(kind) = e.file_type() else { continue };
        if kind.is_dir() {
            subdirs.push(e.path());
        } else if name.starts_with(MARKER_PREFIX) {
            let Some(marker) = std::fs::read_to_string(e.path()).ok().and_then(|t| Marker::parse(&t)) else {
                continue;
            };
            if liveness(&marker.owner) != Liveness::Gone {
                continue;
            }
            if let Some((pgid, start)) = marker.group
                && kill_leftover_group(pgid, start)
            {
                swept.groups += 1;
            }
            remove_dir |= marker.remove_dir;
            let _ = std::fs::remove_file(e.path());
        }
    }
    if remove_dir {
        if std::fs::remove_dir_all(dir).is_ok() {
            swept.dirs += 1;
        }
        return;
    }
    if depth > 0 {
        for d in subdirs {
            sweep_dir(&d, depth - 1, swept);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_parse_past_odd_command_names() {
        let stat = "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 100 10";
        assert_eq!(parse_start_time(stat), Some(987_654));
        assert_eq!(parse_start_time("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_made_up_one_is_not() {
        assert_eq!(liveness(owner_id()), Liveness::Alive);
        let me = std::process::id();
        let ns = pid_namespace();
        let other_start = start_time(i32::try_from(me).expect("pid")).expect("own start") + 1;
        assert_eq!(liveness(&format!("{ns}:{me}:{other_start}")), Liveness::Gone);
        assert_eq!(liveness(&format!("not-{ns}:{me}:1")), Liveness::Unknown);
        assert_eq!(liveness("rubbish"), Liveness::Unknown);
    }

    #[test]
    fn markers_round_trip() {
        let m = Marker {
            owner: "1:2:3".into(),
            group: Some((77, 88)),
            remove_dir: true,
        };
        assert_eq!(Marker::parse(&m.render()), Some(m));
        assert_eq!(Marker::parse("group 1:2\n"), None, "a marker without owner is ignored");
    }

    #[test]
    fn registrations_are_forgotten_when_dropped() {
        let dir = std::env::temp_dir().join(format!("fleet-cleanup-test-{}", uuid::Uuid::new_v4().simple()));
        let reg = register(Action::RemoveDir(dir.clone()));
        assert!(actions().values().any(|a| *a == Action::RemoveDir(dir.clone())));
        drop(reg);
        assert!(!actions().values().any(|a| *a == Action::RemoveDir(dir.clone())));
    }

    #[test]
    fn a_sweep_kills_the_group_of_a_dead_owner_and_spares_a_live_one() {
        use std::os::unix::process::CommandExt as _;
        let root = std::env::temp_dir().join(format!("fleet-cleanup-test-{}", uuid::Uuid::new_v4().simple()));
        let (dead_dir, live_dir) = (root.join("dead"), root.join("live"));
        std::fs::create_dir_all(&dead_dir).expect("dir");
        std::fs::create_dir_all(&live_dir).expect("dir");
        let spawn = || {
            Command::new("sleep")
                .arg("600")
                .process_group(0)
                .spawn()
                .expect("sleep starts")
        };
        let (mut orphan, mut kept) = (spawn(), spawn());
        let pid = |c: &std::process::Child| i32::try_from(c.id()).expect("pid");
        let ns = pid_namespace();
        let dead_owner = format!("{ns}:{}:1", std::process::id());
        let m = Marker {
            owner: dead_owner,
            group: None,
            remove_dir: true,
        }
        .with_group(pid(&orphan));
        m.write(&dead_dir, "gw").expect("marker");
        Marker::mine()
            .with_group(pid(&kept))
            .write(&live_dir, "gw")
            .expect("marker");
        let mut swept = Swept::default();
        sweep_dir(&root, 2, &mut swept);
        assert_eq!(swept.groups, 1);
        assert_eq!(swept.dirs, 1);
        assert!(!dead_dir.exists(), "a remove-dir marker takes its directory along");
        let status = orphan.wait().expect("reaped");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(
            kept.try_wait().expect("try_wait").is_none(),
            "a live owner's process survives"
        );
        let _ = kept.kill();
        let _ = kept.wait();
        let _ = std::fs::remove_dir_all(&root);
    }
}
