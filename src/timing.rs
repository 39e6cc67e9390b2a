//! Deadlines instead of sleeps.
//!
//! Every wait in the suite is "until a condition holds, or fail at a deadline". Deadlines are
//! written at their nominal value and stretched by one knob, `FLEET_E2E_TIME_SCALE`, so a slow
//! machine scales every deadline at once instead of tuning scenarios one by one. Unset, the knob is
//! calibrated at start from the machine's measured slowness (see [`calibrate`]).
//!
//! Not a number SPEC states as a bound on the gateway (MEM-1/MEM-4's 2 s): stretching it would
//! judge "within 2 s" as ~7 s on a loaded machine. Those are judged as written by
//! [`crate::reaction`], which measures the observation's part in the same run and takes it off.

use std::future::Future;
use std::time::Duration;

/// The suite's one time-scale knob: `FLEET_E2E_TIME_SCALE` when set, else calibrated once at
/// start from this machine's measured slowness ([`calibrate`]), never below 1.
pub fn time_scale() -> f64 {
    static SCALE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *SCALE.get_or_init(|| match std::env::var("FLEET_E2E_TIME_SCALE") {
        Ok(v) => v
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)
            .unwrap_or(1.0),
        Err(_) => calibrate().scale,
    })
}

/// What the start-up calibration measured.
#[derive(Debug, Clone, Copy)]
pub struct Calibration {
    /// Median time of [`WORK`] here.
    pub measured: Duration,
    /// The scale it implies: measured / [`REFERENCE`], within 1.0..=[`MAX_AUTO_SCALE`].
    pub scale: f64,
}

/// A fixed CPU workload (integer mixing, kept from being optimised away).
const WORK: u64 = 3_000_000;

/// How long [`WORK`] takes on the quiet 2-core machine the nominal deadlines were written on
/// (median of the debug-built suite; a release build is faster and gets 1.0).
pub const REFERENCE: Duration = Duration::from_millis(13);

/// The most an automatic calibration stretches deadlines; beyond that, say so with the knob.
pub const MAX_AUTO_SCALE: f64 = 4.0;

/// Measures how slow this machine is right now (CPU speed and contention: a loaded machine gives
/// the suite's threads less time) by timing a fixed workload nine times (the median counts); deadlines written for a
/// quiet machine are stretched by the ratio to [`REFERENCE`]. Deterministic waits ("until the
/// condition holds") are unaffected; only how long a failure takes to be declared changes.
pub fn calibrate() -> Calibration {
    let mut times: Vec<Duration> = (0..9)
        .map(|_| {
            let start = std::time::Instant::now();
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            for i in 0..WORK {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x = x.wrapping_add(i);
            }
            std::hint::black_box(x);
            start.elapsed()
        })
        .collect();
    times.sort();
    let measured = times[times.len() / 2];
    let scale = (measured.as_secs_f64() / REFERENCE.as_secs_f64()).clamp(1.0, MAX_AUTO_SCALE);
    Calibration { measured, scale }
}

/// A nominal duration stretched by the time-scale knob.
pub fn scaled(nominal: Duration) -> Duration {
    nominal.mul_f64(time_scale())
}

/// How long an absence ("no inject", "never received", "no pane") is watched before it counts:
/// something that did not happen at one instant may still happen a moment later.
pub const ABSENCE_WINDOW: Duration = Duration::from_secs(2);

/// The error of an absence check that saw the thing happen.
#[derive(Debug, thiserror::Error)]
#[error("{what}: violated after {after:?} of a {window:?} window: {seen}")]
pub struct Violated {
    pub what: String,
    pub after: Duration,
    pub window: Duration,
    pub seen: String,
}

/// Checks that `check` holds for the whole (scaled) `nominal` window, looking every 50–100 ms:
/// the way every absence is judged. Fails at the first look that sees a violation (`Err`), with
/// what that look saw.
pub async fn hold_for<F, Fut>(what: &str, nominal: Duration, mut check: F) -> Result<(), Violated>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let window = scaled(nominal);
    let start = tokio::time::Instant::now();
    loop {
        if let Err(seen) = check().await {
            return Err(Violated {
                what: what.to_string(),
                after: start.elapsed(),
                window,
                seen,
            });
        }
        if start.elapsed() >= window {
            return Ok(());
        }
        // The pace of the looks, not a wait for luck: the window is what is judged.
        tokio::time::sleep(Duration::from_millis(75)).await;
    }
}

/// The error of a wait that ran out of time: says what was awaited and the last observation.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {waited:?} waiting for {what}; last observed: {last}")]
pub struct WaitTimeout {
    pub what: String,
    pub waited: Duration,
    pub last: String,
}

/// Polls `probe` until it returns `Ok(Some(v))`, or fails once the (scaled) deadline passes.
///
/// `probe` returns `Ok(None)` for "not yet" and may describe what it saw through `Err`, which is
/// kept as the last observation (transient errors are retried, not fatal). Polling starts fast
/// and backs off to 100 ms so short conditions are seen quickly without busy-looping.
///
/// A probe that itself never returns (an AMQP confirm after a link cut, an HTTP call to a frozen
/// gateway) is abandoned at the deadline: the wait fails instead of hanging the run. A probe
/// started just before the deadline still gets [`LAST_LOOK`] (scaled) to finish, so a condition
/// that holds at the deadline is seen, as it was when probes were unbounded.
pub async fn wait_for<T, F, Fut>(what: &str, nominal: Duration, mut probe: F) -> Result<T, WaitTimeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, String>>,
{
    let budget = scaled(nominal);
    let start = tokio::time::Instant::now();
    let deadline = start + budget;
    let mut pause = Duration::from_millis(5);
    let mut last = String::from("nothing yet");
    loop {
        let limit = deadline.max(tokio::time::Instant::now() + scaled(LAST_LOOK));
        match tokio::time::timeout_at(limit, probe()).await {
            Ok(Ok(Some(v))) => return Ok(v),
            Ok(Ok(None)) => {}
            Ok(Err(e)) => last = e,
            Err(_) => {
                return Err(WaitTimeout {
                    what: what.to_string(),
                    waited: start.elapsed(),
                    last: format!("{last}; then a check was still running at the deadline and was abandoned"),
                });
            }
        }
        if start.elapsed() >= budget {
            return Err(WaitTimeout {
                what: what.to_string(),
                waited: budget,
                last,
            });
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}

/// How long one check that started before a [`wait_for`] deadline may run past it (nominal).
pub const LAST_LOOK: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wait_for_returns_the_value_once_the_condition_holds() {
        let mut n = 0;
        let v = wait_for("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            let now = n;
            async move { Ok(if now >= 3 { Some(now) } else { None }) }
        })
        .await
        .expect("condition holds");
        assert_eq!(v, 3);
    }

    #[tokio::test]
    async fn wait_for_fails_at_the_deadline_with_the_last_observation() {
        let err = wait_for::<(), _, _>("never", Duration::from_millis(30), || async {
            Err("still red".to_string())
        })
        .await
        .expect_err("must time out");
        assert!(err.to_string().contains("still red"), "{err}");
    }

    #[tokio::test]
    async fn wait_for_abandons_a_check_that_never_returns_at_the_deadline() {
        let t0 = std::time::Instant::now();
        let err = wait_for::<(), _, _>("a hung check", Duration::from_millis(50), || {
            std::future::pending::<Result<Option<()>, String>>()
        })
        .await
        .expect_err("must time out");
        assert!(t0.elapsed() < scaled(Duration::from_secs(5)), "{:?}", t0.elapsed());
        assert!(err.to_string().contains("abandoned"), "{err}");
    }

    #[tokio::test]
    async fn hold_for_watches_the_whole_window_and_reports_a_violation() {
        let start = tokio::time::Instant::now();
        hold_for("nothing", Duration::from_millis(200), || async { Ok(()) })
            .await
            .expect("holds");
        assert!(start.elapsed() >= Duration::from_millis(200), "watched the window");
        let mut n = 0;
        let err = hold_for("no third look", Duration::from_secs(5), || {
            n += 1;
            let k = n;
            async move { if k < 3 { Ok(()) } else { Err(format!("look {k}")) } }
        })
        .await
        .expect_err("violated");
        assert_eq!(err.seen, "look 3");
    }

    #[test]
    fn calibration_is_at_least_one_and_bounded() {
        let c = calibrate();
        eprintln!("calibration here: {c:?}");
        assert!(c.scale >= 1.0 && c.scale <= MAX_AUTO_SCALE, "{c:?}");
        assert!(c.measured > Duration::ZERO);
    }
}
