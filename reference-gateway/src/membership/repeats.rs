//! One WARN per host and check a minute for rejected presences.
//!
//! A host whose certificate expired (or was revoked) and that keeps running heartbeats every
//! interval: every receiver rejects each heartbeat (SIG-5: dead-lettered and counted), and a WARN
//! line for each would bury everything else in the log at ~1 line a second per such host. The
//! first rejection of a (host, check) is logged as always; the ones that follow within
//! [`QUIET_FOR`] are only counted, and the next line logged says how many were not.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a (host, check) stays quiet after its WARN.
pub const QUIET_FOR: Duration = Duration::from_secs(60);

/// Pairs remembered, at most (a flood of distinct hosts empties the memory, never grows it).
const REMEMBERED: usize = 4096;

/// A host and the check it failed.
type Pair = (String, &'static str);

/// When each (host, check) was last logged, and how many were not logged since.
#[derive(Debug, Default)]
pub struct Repeats {
    last: Mutex<HashMap<Pair, (Instant, u64)>>,
}

impl Repeats {
    /// Whether this rejection of `host` by `check` is to be logged: `Some(n)` with the number of
    /// rejections of the same pair not logged since the last line, `None` to stay quiet.
    pub fn log_now(&self, host: &str, check: &'static str, now: Instant) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, quiet)) = last.get_mut(&(host.to_string(), check)) {
            if now.duration_since(*at) < QUIET_FOR {
                *quiet += 1;
                return None;
            }
            let n = *quiet;
            *at = now;
            *quiet = 0;
            return Some(n);
        }
        if last.len() >= REMEMBERED {
            last.clear();
        }
        last.insert((host.to_string(), check), (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_a_minute_per_host_and_check() {
        let r = Repeats::default();
        let t = Instant::now();
        assert_eq!(r.log_now("x", "cert_expired", t), Some(0));
        assert_eq!(r.log_now("x", "cert_expired", t + Duration::from_secs(1)), None);
        assert_eq!(r.log_now("x", "cert_expired", t + Duration::from_secs(2)), None);
        assert_eq!(r.log_now("x", "revoked", t), Some(0), "another check");
        assert_eq!(r.log_now("y", "cert_expired", t), Some(0), "another host");
        assert_eq!(r.log_now("x", "cert_expired", t + QUIET_FOR), Some(2));
    }
}
