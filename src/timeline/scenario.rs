//! A finished scenario's timeline, put together from its parts: the wire recorder's recording,
//! each host's fake herdr record of `pane.send_input`, the failing step and the gateways' logs.
//!
//! Why it is here and not in the suite's after-hook: the hook only gathers what the scenario's
//! world holds; turning it into the file the report reads is the library's, next to the model.

use super::build::{Cast, Entity, Input, chart};
use super::recorder::{Recorder, Recording};
use super::{Failure, Timeline, log_near};
use crate::herdr::FakeHerdr;

/// What the suite's after-hook hands over about one scenario.
pub struct Parts<'a> {
    pub scenario: String,
    pub feature: String,
    pub line: usize,
    pub passed: bool,
    /// The failing step's error and when it failed (ms since the scenario began).
    pub failure: Option<(String, u64)>,
    /// Each host: its fake herdr and its gateway's log.
    pub hosts: Vec<(String, &'a FakeHerdr, String)>,
    pub entities: Vec<Entity>,
}

/// The scenario's timeline.
pub fn assemble(recorder: &Recorder, recording: Recording, parts: Parts<'_>) -> Timeline {
    let mut inputs = Vec::new();
    for (host, herdr, _) in &parts.hosts {
        for call in herdr.calls_of("pane.send_input") {
            let pane = call.params["pane_id"].as_str().unwrap_or("?").to_string();
            let refused = call.error_code().map(str::to_string);
            let outcome = match refused {
                Some(_) => None,
                None => herdr
                    .input_log(&pane)
                    .iter()
                    .find(|r| r.received_at == call.received_at)
                    .map(|r| format!("{:?}", r.outcome)),
            };
            inputs.push(Input {
                at_ms: recorder.at_ms(call.received_at),
                host: host.clone(),
                pane,
                text: call.params["text"].as_str().unwrap_or_default().to_string(),
                keys: call.params["keys"]
                    .as_array()
                    .map(|k| k.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
                outcome,
                refused,
            });
        }
    }
    let cast = Cast {
        hosts: parts.hosts.iter().map(|(h, _, _)| h.clone()).collect(),
        entities: parts.entities,
        gateway_connections: recording.gateway_connections,
    };
    let (lanes, events) = chart(&cast, &recording.events, &inputs);
    let failure = parts.failure.map(|(error, at_ms)| Failure { at_ms, error });
    let logs = match &failure {
        Some(f) => parts
            .hosts
            .iter()
            .map(|(host, _, log)| log_near(host, log, recorder.started_unix_ms(), f.at_ms))
            .collect(),
        None => Vec::new(),
    };
    Timeline {
        scenario: parts.scenario,
        feature: parts.feature,
        line: parts.line,
        passed: parts.passed,
        started_unix_ms: recorder.started_unix_ms(),
        duration_ms: recorder.at_ms(std::time::Instant::now()),
        lanes,
        events,
        failure,
        logs,
        notes: recording.notes,
    }
}
