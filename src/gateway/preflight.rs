//! The runner's pre-flight: the gateway command started once before the suite (and its brokers),
//! exactly as a scenario starts it — `sh -c 'exec CMD'` with the SPEC §15 environment — but with
//! no broker to reach, for at most [`WINDOW`]: long enough for `sh` to say it cannot run the
//! command at all (exit 127, not found; 126, not executable). Then no scenario could start it
//! either, and the run stops with one line instead of failing every scenario alike.
//!
//! Anything else is left to the suite, which judges with a broker: a gateway still running at the
//! end of the window is killed (with whatever it forked), and one that exited for another reason
//! may rightly have given up on the missing broker.

use std::collections::BTreeMap;
use std::time::Duration;

use super::failure::{Kind, Unusable};
use super::{GatewayProcess, GatewaySpec};
use crate::keys::HostKey;

/// How long the pre-flight watches the command: `sh` fails to exec within milliseconds.
pub const WINDOW: Duration = Duration::from_secs(1);

/// The host id the pre-flight's gateway gets (`FLEET_HOST_ID`), and the name in its line.
pub const HOST: &str = "preflight";

/// The command a run tests: `--gateway-cmd` (`cli`), else `FLEET_GATEWAY_CMD`; `None` for the
/// reference gateway, which the suite builds itself.
pub fn command(cli: Option<&str>) -> Option<String> {
    cli.map(str::to_string)
        .or_else(|| std::env::var("FLEET_GATEWAY_CMD").ok())
        .filter(|c| !c.trim().is_empty())
}

/// Starts the run's gateway command once (see the module): why `sh` cannot run it, if it cannot.
/// `None` also when there is nothing to check (the reference gateway) or the check itself could
/// not be made (said as a warning: the suite then finds out).
pub fn run(cli: Option<&str>) -> Option<Unusable> {
    let command = command(cli)?;
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(error = %e, "no runtime for the gateway pre-flight; the suite will find out");
            return None;
        }
    };
    rt.block_on(check(&command))
}

/// [`run`] for one command.
pub async fn check(command: &str) -> Option<Unusable> {
    let dir = std::env::temp_dir().join(format!("fleet-preflight-{}", uuid::Uuid::new_v4().simple()));
    let found = try_command(command, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    match found {
        Ok(found) => found,
        Err(e) => {
            tracing::warn!(error = %e, "the gateway pre-flight could not be made; the suite will find out");
            None
        }
    }
}

async fn try_command(command: &str, dir: &std::path::Path) -> Result<Option<Unusable>, super::GatewayError> {
    // Nothing listens there: the gateway has no broker to reach.
    let amqp_port = crate::ports::free_port().map_err(|e| super::GatewayError::Files {
        dir: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let spec = GatewaySpec {
        host: HOST.to_string(),
        command: command.to_string(),
        amqp_url: format!("amqp://{HOST}:{HOST}@127.0.0.1:{amqp_port}/%2f"),
        herdr_socket: dir.join("herdr.sock"),
        dir: dir.to_path_buf(),
        key: HostKey::generate(HOST),
        peers: BTreeMap::new(),
        extra_env: BTreeMap::new(),
    };
    let mut gw = GatewayProcess::start_unready(spec)?;
    let start = tokio::time::Instant::now();
    let status = loop {
        if let Some(status) = gw.try_exit() {
            break Some(status);
        }
        if start.elapsed() >= WINDOW {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    gw.kill().await;
    let Some(status) = status else {
        return Ok(None);
    };
    let found = super::failure::exited(HOST, command, status, &gw.log_since_start(), true);
    Ok(matches!(found.kind, Kind::CommandNotFound | Kind::NotExecutable).then_some(found))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_command_sh_cannot_run_is_named() {
        let u = check("/nonexistent/fleet-gateway --flag").await.expect("found out");
        assert_eq!(u.kind, Kind::CommandNotFound);
        assert_eq!(
            u.reason,
            "gateway command not found: /nonexistent/fleet-gateway (sh: exit 127)"
        );
        let u = check("/").await.expect("found out");
        assert_eq!(u.kind, Kind::NotExecutable, "{u}");
    }

    #[tokio::test]
    async fn a_command_that_runs_or_gives_up_is_left_to_the_suite() {
        let started = std::time::Instant::now();
        assert_eq!(check("sleep 30").await, None);
        assert!(started.elapsed() < WINDOW * 5, "{:?}", started.elapsed());
        assert_eq!(check("true").await, None);
        assert_eq!(check("echo no broker >&2; exit 1").await, None);
    }
}
