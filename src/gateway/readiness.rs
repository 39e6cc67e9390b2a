//! What a gateway's `/readyz` answered, told apart finely enough to say why it never became
//! ready: nothing listening, a connection taken and never answered, connections closed without
//! a word, a status other than 200 — or bytes that are not HTTP at all (garbage, which no amount
//! of waiting mends, so the wait ends there).

use std::net::SocketAddr;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::failure::{SHOWN_BYTES, escape_bytes};

/// The last thing a `/readyz` probe saw while the gateway was not ready.
#[derive(Debug, Clone)]
pub(super) enum Seen {
    /// Connection refused: nothing listens on the address.
    Refused,
    /// The connection was taken and no answer came within the probe's time.
    NoAnswer,
    /// The connection was closed without a byte.
    Closed,
    /// An HTTP answer other than 2xx.
    Status { status: reqwest::StatusCode, body: Vec<u8> },
    /// Any other failure, in words.
    Other(String),
}

/// One probe's outcome.
pub(super) enum Probe {
    /// 2xx: ready (CONTRACT §2: 200 ready; the body is free text).
    Ready,
    /// The answer is not HTTP: these bytes.
    Garbage(Vec<u8>),
    NotYet(Seen),
}

/// Asks `/readyz` once, taking at most about `limit`.
pub(super) async fn probe(http: &reqwest::Client, addr: SocketAddr, limit: Duration) -> Probe {
    let url = format!("http://{addr}/readyz");
    let asked = tokio::time::timeout(limit, async {
        let r = http.get(&url).send().await?;
        let status = r.status();
        if status.is_success() {
            return Ok((status, Vec::new()));
        }
        let body = r.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
        Ok::<_, reqwest::Error>((status, body))
    })
    .await;
    match asked {
        Err(_) => Probe::NotYet(Seen::NoAnswer),
        Ok(Ok((status, _))) if status.is_success() => Probe::Ready,
        Ok(Ok((status, body))) => Probe::NotYet(Seen::Status { status, body }),
        Ok(Err(e)) if e.is_timeout() => Probe::NotYet(Seen::NoAnswer),
        Ok(Err(e)) if e.is_connect() => Probe::NotYet(Seen::Refused),
        Ok(Err(e)) => {
            // Not an HTTP answer the client could read: look at the bytes themselves.
            match raw_answer(addr, limit.min(Duration::from_secs(2))).await {
                Some(bytes) if bytes.is_empty() => Probe::NotYet(Seen::Closed),
                Some(bytes) if !bytes.starts_with(b"HTTP/") => Probe::Garbage(bytes),
                Some(bytes) => Probe::NotYet(Seen::Other(format!(
                    "{} (it answered: {})",
                    error_chain(&e),
                    escape_bytes(&bytes, SHOWN_BYTES)
                ))),
                None => Probe::NotYet(Seen::Other(error_chain(&e))),
            }
        }
    }
}

/// The bytes a plain `GET /readyz` gets back over TCP within `limit` (at most 512); `None` when
/// the request could not be sent.
async fn raw_answer(addr: SocketAddr, limit: Duration) -> Option<Vec<u8>> {
    let mut stream = tokio::time::timeout(limit, tokio::net::TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let request = format!("GET /readyz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 512];
    let deadline = tokio::time::Instant::now() + limit;
    while answer.len() < buf.len() {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf[answer.len()..])).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[answer.len()..answer.len() + n]),
            _ => break,
        }
    }
    Some(answer)
}

/// `e` and its sources, `: `-joined (reqwest's own line says only "error sending request").
pub(super) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

/// `30 s`, or `72 s (30 s × time scale 2.4)` when the suite's time scale stretched it.
pub(super) fn bound_text(nominal: Duration, scale: f64) -> String {
    let secs = |d: Duration| {
        let s = d.as_secs_f64();
        if (s - s.round()).abs() < 0.05 {
            format!("{s:.0} s")
        } else {
            format!("{s:.1} s")
        }
    };
    if (scale - 1.0).abs() < 1e-9 {
        secs(nominal)
    } else {
        format!(
            "{} ({} × time scale {scale})",
            secs(nominal.mul_f64(scale)),
            secs(nominal)
        )
    }
}

/// Why a gateway still running at the bound was never ready, from the last thing seen.
pub(super) fn never_ready(addr: SocketAddr, seen: &Seen, bound: &str) -> String {
    let never_answered = format!("gateway never answered /readyz on {addr} within {bound}");
    match seen {
        Seen::Refused => format!("{never_answered}: nothing listened there (still running)"),
        Seen::NoAnswer => format!("{never_answered}: it took the connection and sent nothing back (still running)"),
        Seen::Closed => format!("{never_answered}: it closed each connection without a word (still running)"),
        Seen::Other(e) => format!("{never_answered}: {e} (still running)"),
        Seen::Status { status, body } => {
            let contract = if status.as_u16() == 503 {
                String::new()
            } else {
                format!(
                    " (CONTRACT: 200 ready, 503 not; body: {})",
                    escape_bytes(body, SHOWN_BYTES)
                )
            };
            format!(
                "gateway never became ready within {bound}: /readyz on {addr} answered {status} to the end{contract} \
                 (still running)"
            )
        }
    }
}

/// The exit status of process `pid` if it has exited, without reaping it (its owner still
/// waits for it): `waitid(WNOWAIT)`. `None` while it runs, or when it is not our child.
pub(super) fn peek_exit(pid: u32) -> Option<ExitStatus> {
    use std::os::unix::process::ExitStatusExt as _;
    let id = libc::id_t::try_from(pid).ok()?;
    // SAFETY: `info` is a zeroed siginfo_t that waitid(2) fills; WNOWAIT leaves the child
    // waitable, WNOHANG returns at once; no other memory is touched.
    let info = unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(
            libc::P_PID,
            id,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        if rc != 0 {
            return None;
        }
        info
    };
    // SAFETY: after a successful waitid with WEXITED, si_pid and si_status are the fields set.
    let (child, status) = unsafe { (info.si_pid(), info.si_status()) };
    if child == 0 {
        return None;
    }
    Some(match info.si_code {
        libc::CLD_EXITED => ExitStatus::from_raw((status & 0xff) << 8),
        _ => ExitStatus::from_raw(status & 0x7f),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_says_how_it_was_stretched() {
        assert_eq!(bound_text(Duration::from_secs(30), 1.0), "30 s");
        assert_eq!(bound_text(Duration::from_secs(30), 2.4), "72 s (30 s × time scale 2.4)");
        assert_eq!(
            bound_text(Duration::from_secs(30), 0.25),
            "7.5 s (30 s × time scale 0.25)"
        );
    }

    #[test]
    fn a_peek_leaves_the_exit_to_its_owner() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "exit 3"])
            .spawn()
            .expect("sh runs");
        let pid = child.id();
        let seen = (0..200).find_map(|_| {
            std::thread::sleep(Duration::from_millis(10));
            peek_exit(pid)
        });
        assert_eq!(seen.and_then(|s| s.code()), Some(3));
        assert_eq!(child.wait().expect("still waitable").code(), Some(3));
    }

    #[tokio::test]
    async fn bytes_that_are_not_http_are_garbage() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let mut buf = [0u8; 256];
                let _ = s.read(&mut buf).await;
                let _ = s.write_all(b"\x00\x01GARBAGE\r\n").await;
            }
        });
        let http = reqwest::Client::new();
        match probe(&http, addr, Duration::from_secs(5)).await {
            Probe::Garbage(bytes) => assert_eq!(escape_bytes(&bytes, SHOWN_BYTES), "\\x00\\x01GARBAGE\\r\\n"),
            Probe::Ready => panic!("garbage taken for ready"),
            Probe::NotYet(seen) => panic!("garbage taken for {seen:?}"),
        }
    }
}
