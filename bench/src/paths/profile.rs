//! Where a gateway's CPU goes, by component: a `perf` profile of each gateway during a path.
//!
//! Why: the stage breakdown ([`crate::paths::stages`]) says where a message *waits*; the CPU probe says
//! how much CPU a gateway burns per message. Neither says what burns it — the signatures SPEC §3
//! asks for, the AMQP client, the HTTP/MCP layer, herdr's one-request-per-connection socket, or
//! the gateway's own logic — and so neither can tell a cost the gateway could shed from one any
//! gateway pays. With `--profile` (and Linux `perf` on the PATH, Debian's `linux-perf`) each
//! gateway process is sampled with call graphs while the forward path runs; every sample is then
//! charged to the innermost frame that belongs to a known component, looking through frames that
//! belong to none (the async runtime, std, the allocator, the kernel: a `send` syscall made by the
//! AMQP client is the AMQP client's cost). Samples with no such frame are the runtime's own work
//! (scheduling, parking, timers).
//!
//! The shares are of *sampled CPU time* of the process; multiplied by the probe's CPU ms per
//! message they give ms per message per component. Nothing here is judged: it is shown.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context as _, anyhow};
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};

/// The components a sample is charged to, with the symbol prefixes that identify them.
const COMPONENTS: &[(&str, &[&str])] = &[
    (
        "signatures (Ed25519)",
        &["ed25519_dalek::", "curve25519_dalek::", "sha2::", "signature::"],
    ),
    // herdr is the only Unix-socket peer of the runtime contract (SPEC §15): a Unix socket's
    // connect, I/O and close are the herdr client's, also where the compiler inlined the client's
    // calls into the code that makes them (the inject).
    (
        "herdr client",
        &[
            "fleet_gateway::herdr::",
            "tokio::net::unix::",
            "mio::net::uds::",
            "mio::sys::unix::uds::",
        ],
    ),
    (
        "AMQP client",
        &["lapin::", "amq_protocol", "flume::", "async_rs::", "tcp_stream::"],
    ),
    (
        "HTTP + MCP",
        &[
            "hyper::",
            "hyper_util::",
            "axum::",
            "axum_core::",
            "rmcp::",
            "tower::",
            "tower_http::",
            "http::",
            "h2::",
        ],
    ),
    (
        "logs (tracing)",
        &[
            "tracing_subscriber::",
            "tracing_core::",
            "tracing::span",
            "tracing_serde",
        ],
    ),
    ("metrics", &["prometheus_client::", "fleet_gateway::metrics::"]),
    ("gateway logic", &["fleet_gateway::"]),
];

/// What samples with no component frame are charged to.
pub const RUNTIME: &str = "runtime, scheduling, idle work";

/// One gateway's profile.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Profile {
    pub samples: u64,
    /// Component → share of the samples (0..1).
    pub shares: BTreeMap<String, f64>,
    /// Share of the samples whose innermost frame is in the kernel (syscalls, network, futex).
    pub kernel_share: f64,
}

impl Profile {
    /// `ms_per_message` (the CPU probe's) split by component.
    pub fn ms_per_message(&self, ms_per_message: f64) -> BTreeMap<String, f64> {
        self.shares
            .iter()
            .map(|(c, s)| (c.clone(), s * ms_per_message))
            .collect()
    }
}

/// The component of one frame's symbol, if it has one.
fn component(symbol: &str) -> Option<&'static str> {
    let path = symbol.trim_start_matches(['<', '&']).trim_start_matches("mut ");
    if path.starts_with("tracing::instrument::") {
        return None; // the span wrapper every task runs in: look further out
    }
    if let Some(dropped) = path.strip_prefix("core::ptr::drop_in_place<") {
        return component(dropped); // dropping a component's value is that component's work
    }
    COMPONENTS
        .iter()
        .find(|(_, prefixes)| prefixes.iter().any(|p| path.starts_with(p)))
        .map(|(name, _)| *name)
}

/// The symbol of one `perf script` frame line: `\t addr symbol+0xoff (dso)`.
fn frame_symbol(line: &str) -> &str {
    let rest = line.trim_start();
    let rest = rest.split_once(' ').map(|(_, r)| r).unwrap_or("");
    let sym = rest.rsplit_once(" (").map(|(s, _)| s).unwrap_or(rest);
    sym.rsplit_once("+0x").map(|(s, _)| s).unwrap_or(sym)
}

/// Folds `perf script` output (samples with call chains, innermost frame first) into a profile.
pub fn classify(script: &str) -> Profile {
    let mut counts: BTreeMap<&'static str, u64> = BTreeMap::new();
    let (mut samples, mut kernel) = (0u64, 0u64);
    let mut in_sample = false;
    let mut first = true;
    let mut charged: Option<&'static str> = None;
    let finish = |charged: Option<&'static str>, counts: &mut BTreeMap<&'static str, u64>| {
        *counts.entry(charged.unwrap_or(RUNTIME)).or_default() += 1;
    };
    for line in script.lines() {
        if line.trim().is_empty() {
            if in_sample {
                finish(charged, &mut counts);
                in_sample = false;
            }
            continue;
        }
        if !line.starts_with(char::is_whitespace) {
            if in_sample {
                finish(charged, &mut counts);
            }
            in_sample = true;
            first = true;
            charged = None;
            samples += 1;
            continue;
        }
        if !in_sample {
            continue;
        }
        let sym = frame_symbol(line);
        if first {
            first = false;
            if line.contains("(/proc/kcore)") || line.contains("[kernel.kallsyms]") || sym.starts_with("[k]") {
                kernel += 1;
            }
        }
        if charged.is_none() {
            charged = component(sym);
        }
    }
    if in_sample {
        finish(charged, &mut counts);
    }
    let n = samples.max(1) as f64;
    Profile {
        samples,
        shares: counts.into_iter().map(|(c, k)| (c.to_string(), k as f64 / n)).collect(),
        kernel_share: kernel as f64 / n,
    }
}

/// `perf` sampling running on some processes.
pub struct Recording {
    runs: Vec<(String, Child, PathBuf)>,
}

/// Whether `perf` can be run here.
pub async fn available() -> bool {
    Command::new("perf")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Starts sampling each `(label, pid)` into `dir`.
pub async fn start(targets: &[(String, u32)], dir: &Path) -> anyhow::Result<Recording> {
    let mut runs = Vec::new();
    for (label, pid) in targets {
        let out = dir.join(format!("perf-{label}.data"));
        let child = Command::new("perf")
            .args([
                "record",
                "-q",
                "-e",
                "cpu-clock",
                "-F",
                "499",
                "--call-graph",
                "dwarf,16384",
            ])
            .arg("-p")
            .arg(pid.to_string())
            .arg("-o")
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting perf record")?;
        runs.push((label.clone(), child, out));
    }
    Ok(Recording { runs })
}

impl Recording {
    /// Stops sampling (SIGINT, as perf expects) and classifies each recording.
    pub async fn finish(self) -> anyhow::Result<BTreeMap<String, Profile>> {
        let mut out = BTreeMap::new();
        for (label, child, file) in self.runs {
            if let Some(pid) = child.id() {
                let _ = Command::new("kill").arg("-INT").arg(pid.to_string()).status().await;
            }
            let done = child.wait_with_output().await.context("waiting for perf record")?;
            if !file.exists() {
                return Err(anyhow!(
                    "perf record wrote nothing for {label}: {}",
                    String::from_utf8_lossy(&done.stderr).trim()
                ));
            }
            let script = Command::new("perf")
                .args(["script", "--no-inline", "-F", "comm,tid,ip,sym,dso", "-i"])
                .arg(&file)
                .stderr(Stdio::null())
                .output()
                .await
                .context("running perf script")?;
            out.insert(label, classify(&String::from_utf8_lossy(&script.stdout)));
        }
        Ok(out)
    }
}

/// Text lines: per gateway, ms per message per component (largest first).
pub fn lines(label: &str, profiles: &BTreeMap<String, Profile>, ms_per_message: &BTreeMap<String, f64>) -> Vec<String> {
    let mut out = vec![format!(
        "{label} — gateway CPU per message by component (perf samples, innermost known frame):"
    )];
    for (host, p) in profiles {
        let per = ms_per_message.get(host).copied();
        let mut parts: Vec<(String, f64)> = p.shares.iter().map(|(c, s)| (c.clone(), *s)).collect();
        parts.sort_by(|a, b| b.1.total_cmp(&a.1));
        let text: Vec<String> = parts
            .iter()
            .map(|(c, s)| match per {
                Some(ms) => format!("{c} {:.3} ms ({:.0} %)", s * ms, 100.0 * s),
                None => format!("{c} {:.0} %", 100.0 * s),
            })
            .collect();
        out.push(format!(
            "  gateway {host} ({} samples, {:.0} % in the kernel): {}",
            p.samples,
            100.0 * p.kernel_share,
            text.join(" · ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four samples in `perf script -F comm,tid,ip,sym,dso` form (a header line, then its frames).
    const SCRIPT: &str = "\
fleet-gateway 1 1.0: 1 cpu-clock:
\t  930155 <&curve25519_dalek::backend::vector::avx2::field::FieldElement2625x4 as core::ops::Mul>::mul+0x135 (/x/fleet-gateway)
\t  928a47 ed25519_dalek::verifying::VerifyingKey::verify_strict+0x127 (/x/fleet-gateway)
\t  6ee1f4 fleet_gateway::signing::Keyring::verify+0x2a4 (/x/fleet-gateway)

fleet-gateway 1 1.1: 1 cpu-clock:
\tffffffff81000000 tcp_sendmsg+0x10 ([kernel.kallsyms])
\t  111111 __libc_send+0x10 (/usr/lib/libc.so.6)
\t  222222 tokio::net::tcp::stream::TcpStream::poll_write_priv+0x1 (/x/fleet-gateway)
\t  333333 hyper::proto::h1::dispatch::Dispatcher<D,Bs,I,T>::poll_write+0x1 (/x/fleet-gateway)
\t  444444 <tracing::instrument::Instrumented<T> as core::future::future::Future>::poll+0x1 (/x/fleet-gateway)

fleet-gateway 1 1.2: 1 cpu-clock:
\t  555555 <tracing_subscriber::registry::sharded::Registry as tracing_core::subscriber::Subscriber>::enter+0x13 (/x/fleet-gateway)
\t  444444 <tracing::instrument::Instrumented<T> as core::future::future::Future>::poll+0x28 (/x/fleet-gateway)

fleet-gateway 1 1.3: 1 cpu-clock:
\tffffffff81000001 finish_task_switch.isra.0+0x1 ([kernel.kallsyms])
\t  666666 tokio::runtime::scheduler::multi_thread::worker::Context::park_internal+0x1 (/x/fleet-gateway)
";

    #[test]
    fn each_sample_goes_to_its_innermost_known_component() {
        let p = classify(SCRIPT);
        assert_eq!(p.samples, 4);
        assert_eq!(p.shares["signatures (Ed25519)"], 0.25);
        assert_eq!(p.shares["HTTP + MCP"], 0.25, "a send made by hyper is hyper's: {p:?}");
        assert_eq!(
            p.shares["logs (tracing)"], 0.25,
            "the span wrapper itself is looked through"
        );
        assert_eq!(p.shares[RUNTIME], 0.25);
        assert_eq!(p.kernel_share, 0.5);
    }

    #[test]
    fn a_frame_line_gives_its_bare_symbol() {
        assert_eq!(
            frame_symbol("\t  6ee1f4 fleet_gateway::signing::Keyring::verify+0x2a4 (/x/fleet-gateway)"),
            "fleet_gateway::signing::Keyring::verify"
        );
        assert_eq!(frame_symbol("\tffffffffffffffff [unknown] ([unknown])"), "[unknown]");
        assert_eq!(
            component("fleet_gateway::herdr::Herdr::call::{{closure}}"),
            Some("herdr client")
        );
        assert_eq!(
            component("<fleet_gateway::mcp::Mcp as rmcp::ServerHandler>::call_tool"),
            Some("gateway logic")
        );
        assert_eq!(component("tokio::runtime::park"), None);
        assert_eq!(
            component("core::ptr::drop_in_place<tokio::net::unix::stream::UnixStream>"),
            Some("herdr client"),
            "closing herdr's connection, inlined into the inject"
        );
        assert_eq!(
            component("mio::net::uds::stream::UnixStream::connect_addr"),
            Some("herdr client")
        );
        assert_eq!(
            component("core::ptr::drop_in_place<fleet_gateway::envelope::Envelope>"),
            Some("gateway logic")
        );
        assert_eq!(component("core::ptr::drop_in_place<alloc::vec::Vec<u8>>"), None);
    }

    #[test]
    fn ms_per_message_splits_the_probe_figure() {
        let p = classify(SCRIPT);
        let ms = p.ms_per_message(0.4);
        assert!((ms["HTTP + MCP"] - 0.1).abs() < 1e-12);
        let text = lines(
            "forward",
            &BTreeMap::from([("a".to_string(), p)]),
            &BTreeMap::from([("a".to_string(), 0.4)]),
        );
        assert!(text[1].contains("4 samples, 50 % in the kernel"), "{text:?}");
    }
}
