//! Why a gateway under test could not be used at all, in one line (issue 45): its command was
//! not found or is not executable, it exited before `/readyz` answered, never became ready within
//! the bound, answered garbage, or died after it was ready.
//!
//! Exists because such a failure is no finding about any requirement, and a run of hundreds of
//! scenarios that all failed for it must say so once, plainly: [`Unusable`]'s line is the first
//! line of the scenario's error (`gateway a unusable [command-not-found]: gateway command not
//! found: /opt/gw (sh: exit 127)`), and the verdict reads it back from each failed scenario
//! ([`find`]) to group them in the summary ("all 12 scenarios on process:rabbitmq: …").
//!
//! A leaf: it names no other module of the crate, so the verdict can read what the gateway wrote.

use std::fmt;
use std::process::ExitStatus;

/// What kind of unusable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `sh` could not find the command (exit 127).
    CommandNotFound,
    /// `sh` found it and could not execute it (exit 126: permission denied, a directory).
    NotExecutable,
    /// It exited by itself before `/readyz` answered 200.
    Exited,
    /// Still running at the readiness bound, and `/readyz` never answered 200.
    NeverReady,
    /// It answered something that is not HTTP, or not JSON where the local API must answer JSON.
    Garbage,
    /// It exited after `/readyz` answered 200: its local API found nobody there.
    Died,
}

impl Kind {
    const ALL: [Kind; 6] = [
        Kind::CommandNotFound,
        Kind::NotExecutable,
        Kind::Exited,
        Kind::NeverReady,
        Kind::Garbage,
        Kind::Died,
    ];

    /// The name in the line and in `conformance.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::CommandNotFound => "command-not-found",
            Kind::NotExecutable => "not-executable",
            Kind::Exited => "exited",
            Kind::NeverReady => "never-ready",
            Kind::Garbage => "garbage",
            Kind::Died => "died",
        }
    }

    fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One gateway that could not be used, and why, in one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unusable {
    /// The simulated host it ran for (`a`), or what started it (`pre-flight`).
    pub host: String,
    /// What kind of unusable.
    pub kind: Kind,
    /// One line, e.g. `gateway command not found: /opt/gw (sh: exit 127)`.
    pub reason: String,
}

/// What stands between the host and the kind in the line.
const MARK: &str = " unusable [";

impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gateway {}{MARK}{}]: {}", self.host, self.kind, self.reason)
    }
}

impl Unusable {
    /// `host`'s gateway is unusable for `reason`, made one line (line breaks become ` | `).
    pub fn new(host: &str, kind: Kind, reason: impl Into<String>) -> Unusable {
        Unusable {
            host: host.to_string(),
            kind,
            reason: one_line(&reason.into()),
        }
    }

    /// The reason with the listen address masked (`127.0.0.1:PORT`): the same failure of two
    /// scenarios reads the same.
    pub fn normalized_reason(&self) -> String {
        mask_ports(&self.reason)
    }
}

/// The first [`Unusable`] line in `text` (a scenario's error, a broker's error), if any.
pub fn find(text: &str) -> Option<Unusable> {
    text.lines().find_map(parse_line)
}

fn parse_line(line: &str) -> Option<Unusable> {
    let at = line.find(MARK)?;
    let head = &line[..at];
    let host = &head[head.rfind("gateway ")? + "gateway ".len()..];
    let rest = &line[at + MARK.len()..];
    let (kind, reason) = rest.split_once("]: ")?;
    Some(Unusable {
        host: host.to_string(),
        kind: Kind::parse(kind)?,
        reason: reason.trim_end().to_string(),
    })
}

/// `bytes` as readable text: printable ASCII as is, `\r` `\n` `\t` and everything else escaped
/// (`\x00`), at most `max` bytes of them, `…` when there was more.
pub fn escape_bytes(bytes: &[u8], max: usize) -> String {
    let mut out = String::new();
    for &b in bytes.iter().take(max) {
        match b {
            b'\r' => out.push_str("\\r"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    if bytes.len() > max {
        out.push('…');
    }
    if bytes.is_empty() {
        out.push_str("(nothing)");
    }
    out
}

/// How many bytes of an answer a line shows.
pub const SHOWN_BYTES: usize = 80;

/// The last line the process wrote (stdout and stderr share the log), without the suite's
/// start markers, cut to fit in a line; `None` when it wrote nothing.
pub fn last_output_line(output: &str) -> Option<String> {
    let line = output
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with("===== start #"))?;
    Some(escape_bytes(line.as_bytes(), 160))
}

/// `status 0`, `signal 9 (SIGKILL)`.
pub fn describe_status(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("status {code}"),
        (None, Some(sig)) => match signal_name(sig) {
            Some(name) => format!("signal {sig} ({name})"),
            None => format!("signal {sig}"),
        },
        (None, None) => status.to_string(),
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

/// Why a process that exited before `/readyz` answered 200 could not be used: `sh`'s 127 and 126
/// (with the name it could not run, read from its message in `output`), or the status and the
/// last line of output. `at_once`: it exited within a second of its start.
pub fn exited(host: &str, command: &str, status: ExitStatus, output: &str, at_once: bool) -> Unusable {
    let last = last_output_line(output);
    let sh_says = |words: &[&str]| {
        output
            .lines()
            .rev()
            .find(|l| words.iter().any(|w| l.contains(w)))
            .map(str::trim)
    };
    match status.code() {
        Some(127) => {
            if let Some(line) = sh_says(&["not found", "No such file"]) {
                return Unusable::new(
                    host,
                    Kind::CommandNotFound,
                    format!("gateway command not found: {} (sh: exit 127)", named(line, command)),
                );
            }
        }
        Some(126) => {
            let line = sh_says(&[
                "Permission denied",
                "Is a directory",
                "cannot execute",
                "Exec format error",
            ]);
            let why = line
                .and_then(|l| l.rsplit_once(": ").map(|(_, why)| format!(": {why}")))
                .unwrap_or_default();
            let name = line.map_or_else(|| first_word(command), |l| named(l, command));
            return Unusable::new(
                host,
                Kind::NotExecutable,
                format!("gateway command not executable: {name} (sh: exit 126{why})"),
            );
        }
        _ => {}
    }
    let when = if at_once { "at once " } else { "" };
    let output = match last {
        Some(l) => format!("last output line: {l}"),
        None => "it wrote nothing".to_string(),
    };
    Unusable::new(
        host,
        Kind::Exited,
        format!(
            "gateway exited {when}with {} before /readyz answered ({output})",
            describe_status(status)
        ),
    )
}

/// The name `sh` could not run, from its message (`sh: 1: exec: /opt/gw: not found`): the part
/// before the last `: ` that the command holds; else the command's first word.
fn named(sh_line: &str, command: &str) -> String {
    let mut parts: Vec<&str> = sh_line.split(": ").collect();
    parts.pop();
    parts
        .into_iter()
        .rev()
        .find(|p| !p.is_empty() && command.contains(p))
        .map_or_else(|| first_word(command), str::to_string)
}

fn first_word(command: &str) -> String {
    command.split_whitespace().next().unwrap_or(command).to_string()
}

/// `text` on one line: line breaks become ` | `.
fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Every `<IPv4>:<port>` with the port replaced by `PORT`.
fn mask_ports(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(colon) = rest.find(':') {
        let (before, after) = rest.split_at(colon);
        let digits = after[1..].bytes().take_while(u8::is_ascii_digit).count();
        let address = before
            .rsplit(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .is_some_and(|a| a.split('.').count() == 4 && a.split('.').all(|o| !o.is_empty()));
        out.push_str(before);
        if address && digits > 0 {
            out.push_str(":PORT");
            rest = &after[1 + digits..];
        } else {
            out.push(':');
            rest = &after[1..];
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;

    fn code(c: i32) -> ExitStatus {
        ExitStatus::from_raw(c << 8)
    }

    #[test]
    fn the_line_reads_back() {
        let u = Unusable::new(
            "a",
            Kind::NeverReady,
            "gateway never answered /readyz on 127.0.0.1:4242",
        );
        let text = format!("Given x\nStep panicked. Captured output: {u}\n--- last log lines ---\nfoo");
        assert_eq!(find(&text), Some(u.clone()));
        assert_eq!(
            u.normalized_reason(),
            "gateway never answered /readyz on 127.0.0.1:PORT"
        );
        assert_eq!(find("gateway a not ready: timed out"), None);
        assert_eq!(find("gateway a unusable [no-such-kind]: x"), None);
    }

    #[test]
    fn sh_s_127_and_126_name_the_command() {
        let u = exited(
            "a",
            "/nonexistent/gw --flag",
            code(127),
            "sh: 1: exec: /nonexistent/gw: not found\n",
            true,
        );
        assert_eq!(u.kind, Kind::CommandNotFound);
        assert_eq!(u.reason, "gateway command not found: /nonexistent/gw (sh: exit 127)");
        let u = exited("a", "./gw", code(126), "sh: 1: exec: ./gw: Permission denied\n", true);
        assert_eq!(u.kind, Kind::NotExecutable);
        assert_eq!(
            u.reason,
            "gateway command not executable: ./gw (sh: exit 126: Permission denied)"
        );
        // A 127 the shell did not explain is an exit like another.
        let u = exited("a", "./gw", code(127), "", false);
        assert_eq!(u.kind, Kind::Exited);
    }

    #[test]
    fn an_exit_names_its_status_and_last_output_line() {
        let out = "===== start #1 of gateway a =====\ngw: starting\ngw: config missing\n\n";
        let u = exited("a", "./gw", code(0), out, true);
        assert_eq!(
            u.reason,
            "gateway exited at once with status 0 before /readyz answered (last output line: gw: config missing)"
        );
        let u = exited("a", "./gw", ExitStatus::from_raw(libc::SIGSEGV), "", false);
        assert_eq!(
            u.reason,
            "gateway exited with signal 11 (SIGSEGV) before /readyz answered (it wrote nothing)"
        );
    }

    #[test]
    fn garbage_is_shown_escaped_and_cut() {
        assert_eq!(
            escape_bytes(b"\x00\x01GARBAGE\r\n\xff", 80),
            "\\x00\\x01GARBAGE\\r\\n\\xff"
        );
        assert_eq!(escape_bytes(b"abcdef", 3), "abc…");
        assert_eq!(escape_bytes(b"", 3), "(nothing)");
    }

    #[test]
    fn ports_are_masked_and_nothing_else() {
        assert_eq!(
            mask_ports("on 127.0.0.1:28723 within 30 s: 10:20 at 1.2:3"),
            "on 127.0.0.1:PORT within 30 s: 10:20 at 1.2:3"
        );
    }
}
