//! Listen ports for the processes the suite starts (gateways, process brokers, broker containers).
//!
//! The suite finds a port free, releases it, and hands it to a process that binds it a moment
//! later. A port found by binding `:0` comes from the kernel's ephemeral range — the range every
//! outgoing connection's local port is taken from, and the suite opens hundreds of those (AMQP,
//! HTTP, MCP). In between, an outgoing connection could take the port: a gateway then failed to
//! start with "Address already in use" (seen in a suite run on a busy machine). Ports here come from
//! *below* the ephemeral range (`/proc/sys/net/ipv4/ip_local_port_range`), where no outgoing
//! connection is given a port; each is checked free by a bind, and this process never hands the
//! same one out twice. A random starting point keeps two suite processes on one machine apart.

use std::net::TcpListener;
use std::sync::Mutex;

/// The lowest port handed out: above the well-known and most registered service ports.
const POOL_START: u16 = 20_000;

/// Where the next search starts (None until the first call).
static NEXT: Mutex<Option<u16>> = Mutex::new(None);

/// The first port of the kernel's ephemeral range (32768 when it cannot be read).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()))
        .unwrap_or(32_768)
}

/// A free loopback port outside the ephemeral range, never returned before by this process.
/// Falls back to the kernel's choice (`:0`) when the range leaves no room below it.
pub fn free_port() -> std::io::Result<u16> {
    let end = ephemeral_start();
    if end <= POOL_START + 1_000 {
        return Ok(TcpListener::bind(("127.0.0.1", 0))?.local_addr()?.port());
    }
    let size = end - POOL_START;
    let mut next = NEXT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut candidate = next.unwrap_or_else(|| POOL_START + random_u16() % size);
    for _ in 0..size {
        let port = candidate;
        candidate = if candidate + 1 >= end {
            POOL_START
        } else {
            candidate + 1
        };
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            *next = Some(candidate);
            return Ok(port);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no free loopback port in {POOL_START}..{end}"),
    ))
}

/// `N` distinct free ports (see [`free_port`]).
pub fn free_ports<const N: usize>() -> std::io::Result<[u16; N]> {
    let mut ports = [0u16; N];
    for p in &mut ports {
        *p = free_port()?;
    }
    Ok(ports)
}

fn random_u16() -> u16 {
    let b = uuid::Uuid::new_v4().into_bytes();
    u16::from_le_bytes([b[0], b[1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_free_and_below_the_ephemeral_range() {
        let end = ephemeral_start();
        let ports: [u16; 20] = free_ports().expect("ports");
        let mut sorted = ports.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 20, "{ports:?}");
        for p in ports {
            if end > POOL_START + 1_000 {
                assert!((POOL_START..end).contains(&p), "{p} outside {POOL_START}..{end}");
            }
            TcpListener::bind(("127.0.0.1", p)).expect("the port is free");
        }
    }
}
