//! Latency percentiles and CPU accounting for `fleet-bench`.
//!
//! Latencies are kept as plain sorted vectors (a few thousand samples per figure, so no histogram
//! crate is needed). CPU time comes from `/proc`: per process (`/proc/<pid>/stat` utime + stime)
//! and for the whole machine (`/proc/stat`), so every throughput figure can say how many CPU
//! milliseconds each component spent per message — on a 2-core machine that, not the network, is
//! what bounds throughput.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Percentiles of one latency series, in milliseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Latency {
    pub n: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Latency {
    /// Nearest-rank percentiles of `samples` (empty → all zero).
    pub fn of(samples: &[Duration]) -> Latency {
        if samples.is_empty() {
            return Latency::default();
        }
        let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let rank = |p: f64| {
            let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1;
            ms[i]
        };
        Latency {
            n: ms.len(),
            p50_ms: rank(0.50),
            p99_ms: rank(0.99),
            max_ms: ms[ms.len() - 1],
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
        }
    }

    /// `p50 / p99 / max` for the table.
    pub fn cell(&self) -> String {
        format!("{:.2} / {:.2} / {:.2}", self.p50_ms, self.p99_ms, self.max_ms)
    }
}

/// Clock ticks per second of `/proc` CPU times.
fn clk_tck() -> f64 {
    // SAFETY: sysconf has no memory effects.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// utime + stime of one process, in ticks (`None` once it is gone).
pub fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold blanks) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime is field 14, stime field 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// (busy, total) ticks of the whole machine from `/proc/stat`.
fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).filter_map(|x| x.parse().ok()).collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// A process's resident set size and peak, in KiB, and its thread count.
pub fn process_memory(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?, field("Threads:")?))
}

/// Open file descriptors of a process.
pub fn process_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// The processes whose CPU a measurement splits out, by name.
#[derive(Debug, Clone, Default)]
pub struct CpuProbe {
    pids: Vec<(String, u32)>,
}

/// CPU ticks of each probed process and the machine at one instant.
pub struct CpuSnapshot {
    at: Instant,
    per: Vec<(String, Option<u64>)>,
    machine: Option<(u64, u64)>,
}

/// CPU spent between two snapshots.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CpuSpent {
    pub wall_s: f64,
    /// CPU seconds per probed process.
    pub seconds: BTreeMap<String, f64>,
    /// CPU seconds of the whole machine (every process, also other users').
    pub machine_s: f64,
    /// CPU seconds the machine's cores could have given in that wall time.
    pub capacity_s: f64,
}

impl CpuSpent {
    /// The share of the machine's capacity that processes outside the probe (other users, a build)
    /// took during the measurement: what makes a figure the machine's rather than the gateway's.
    pub fn others_share(&self) -> Option<f64> {
        (self.capacity_s > 0.0).then(|| {
            let ours: f64 = self.seconds.values().sum();
            ((self.machine_s - ours) / self.capacity_s).max(0.0)
        })
    }
}

impl CpuProbe {
    pub fn with(mut self, name: &str, pid: Option<u32>) -> CpuProbe {
        if let Some(pid) = pid {
            self.pids.push((name.to_string(), pid));
        }
        self
    }

    pub fn snapshot(&self) -> CpuSnapshot {
        CpuSnapshot {
            at: Instant::now(),
            per: self.pids.iter().map(|(n, p)| (n.clone(), process_ticks(*p))).collect(),
            machine: machine_ticks(),
        }
    }
}

impl CpuSnapshot {
    /// CPU spent from `self` until `later`.
    pub fn until(&self, later: &CpuSnapshot) -> CpuSpent {
        let tck = clk_tck();
        let mut seconds = BTreeMap::new();
        for ((name, a), (_, b)) in self.per.iter().zip(&later.per) {
            if let (Some(a), Some(b)) = (a, b) {
                seconds.insert(name.clone(), b.saturating_sub(*a) as f64 / tck);
            }
        }
        let (machine_s, capacity_s) = match (self.machine, later.machine) {
            (Some((b0, t0)), Some((b1, t1))) => {
                (b1.saturating_sub(b0) as f64 / tck, t1.saturating_sub(t0) as f64 / tck)
            }
            _ => (0.0, 0.0),
        };
        CpuSpent {
            wall_s: later.at.duration_since(self.at).as_secs_f64(),
            seconds,
            machine_s,
            capacity_s,
        }
    }
}

impl CpuSpent {
    /// CPU milliseconds per unit of work (message, brief) for each process, plus `other` (the
    /// rest of the machine: other users' work) and `machine`.
    pub fn per_unit_ms(&self, units: usize) -> BTreeMap<String, f64> {
        let n = units.max(1) as f64;
        let mut out: BTreeMap<String, f64> = self.seconds.iter().map(|(k, s)| (k.clone(), s * 1e3 / n)).collect();
        let known: f64 = self.seconds.values().sum();
        out.insert("other".into(), (self.machine_s - known).max(0.0) * 1e3 / n);
        out.insert("machine".into(), self.machine_s * 1e3 / n);
        out
    }

    /// Busy share of the machine's cores over the window (0..1).
    pub fn machine_busy(&self) -> f64 {
        if self.capacity_s > 0.0 {
            self.machine_s / self.capacity_s
        } else {
            0.0
        }
    }
}

/// The pid of the RabbitMQ node this process started (process provider): the `beam.smp` whose
/// environment names the node `fleet-<our pid>-…` (the node name is passed as
/// `RABBITMQ_NODENAME`, not on the command line).
pub fn own_broker_pid() -> Option<u32> {
    own_broker_pids().into_iter().next()
}

/// `probe` with the broker processes this process started: `broker` for one node, `broker1`…
/// for a cluster's ([`broker_seconds`] adds them up).
pub fn with_brokers(probe: CpuProbe) -> CpuProbe {
    let pids = own_broker_pids();
    if pids.len() == 1 {
        return probe.with("broker", pids.first().copied());
    }
    pids.iter()
        .enumerate()
        .fold(probe, |p, (i, pid)| p.with(&format!("broker{}", i + 1), Some(*pid)))
}

/// The CPU seconds of every broker process of [`with_brokers`] together (`None`: none measured).
pub fn broker_seconds(spent: &CpuSpent) -> Option<f64> {
    let mut brokers = spent
        .seconds
        .iter()
        .filter(|(name, _)| {
            name.strip_prefix("broker")
                .is_some_and(|i| i.chars().all(|c| c.is_ascii_digit()))
        })
        .map(|(_, s)| *s)
        .peekable();
    brokers.peek()?;
    Some(brokers.sum())
}

/// Every RabbitMQ node this process started and that runs now (a process cluster's three), by
/// pid, ascending: see [`own_broker_pid`].
pub fn own_broker_pids() -> Vec<u32> {
    let needle = format!("RABBITMQ_NODENAME=fleet-{}-", std::process::id());
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if !String::from_utf8_lossy(&cmd).contains("beam.smp") {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v.starts_with(needle.as_bytes())) {
            pids.push(pid);
        }
    }
    pids.sort_unstable();
    pids
}

/// The 1-minute load average.
pub fn load_average() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let v: Vec<f64> = s.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
    Some([*v.first()?, *v.get(1)?, *v.get(2)?])
}

/// One thread's CPU time so far.
pub fn thread_cpu() -> std::time::Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; the call only writes it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broker_seconds_add_up_every_node_and_nothing_else() {
        let spent = |pairs: &[(&str, f64)]| CpuSpent {
            wall_s: 1.0,
            seconds: pairs.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
            machine_s: 0.0,
            capacity_s: 2.0,
        };
        let cluster = spent(&[("broker1", 0.25), ("broker2", 0.5), ("broker3", 0.25), ("bench", 1.0)]);
        assert_eq!(broker_seconds(&cluster), Some(1.0));
        assert_eq!(
            broker_seconds(&spent(&[("broker", 0.5), ("gateway_a", 0.1)])),
            Some(0.5)
        );
        assert_eq!(broker_seconds(&spent(&[("brokerage", 0.5), ("bench", 1.0)])), None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let l = Latency::of(&v);
        assert_eq!(l.n, 100);
        assert!((l.p50_ms - 50.0).abs() < 1e-9);
        assert!((l.p99_ms - 99.0).abs() < 1e-9);
        assert!((l.max_ms - 100.0).abs() < 1e-9);
        assert!((l.mean_ms - 50.5).abs() < 1e-9);
        assert_eq!(Latency::of(&[]).n, 0);
    }

    #[test]
    fn own_process_has_cpu_ticks_and_memory() {
        let pid = std::process::id();
        assert!(process_ticks(pid).is_some());
        let (rss, hwm, threads) = process_memory(pid).expect("status readable");
        assert!(rss > 0 && hwm >= rss && threads >= 1);
    }
}
