//! The fake herdr against real herdr v0.8.2: a replay of a recorded session.
//!
//! Why it exists: the fake must answer like real herdr (RULES: "no mocks, except the fake herdr,
//! which must answer like real herdr v0.8.2"), and a gateway tuned against a fake that differs
//! can pass the suite and fail in the field. `fixtures/herdr-0.8.2/all.jsonl` holds 209 requests
//! a real `herdr server` answered (see that directory's README.md). This test starts the fake,
//! sends every recorded request verbatim and in order, and compares each answer with the real
//! one field by field. Only what differs between any two runs is normalised: pids (kept equal
//! where they were equal: `shell_pid == foreground_process_group_id` is meaning), terminal ids,
//! working directories, and the time a row took.
//!
//! Two recorded steps were not requests of the script; they are done the way the recorded
//! stand-in agent did them: after `F start agent` the agent program reports `idle` itself
//! (`pane.report_agent`, source `custom:fakeagent`, exactly what `fake-agent.py` sends), and
//! `F kill agent` is [`FakeHerdr::agent_exits`] (a `kill -KILL` of the agent process).
//!
//! Every remaining difference is in [`ALLOWED`] with the reason it cannot hide a gateway bug
//! (docs/HERDR.md, "The fake against real herdr v0.8.2: what still differs"). A new difference
//! fails the test, and so does an allowed one that no longer occurs (the list stays true).

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

use super::FakeHerdr;
use crate::timing::scaled;

/// The recording this replays, and the same script run against the fake of main 344fdc9.
const REAL: &str = include_str!("../../fixtures/herdr-0.8.2/all.jsonl");
const FAKE_344FDC9: &str = include_str!("../../fixtures/herdr-0.8.2/fake-344fdc9.jsonl");

/// Differences that remain, by (step, field path): each with why it cannot hide a gateway bug.
const ALLOWED: &[(&str, &str, &str)] = &[(
    "F pane.read visible (real only)",
    "result.read.text",
    "the screen's text: the fake has no screen, it echoes the lines typed into the terminal; \
         programs' output is not modelled (outside HERDR.md's subset: a gateway never reads the \
         screen)",
)];

/// One recorded line.
struct Row {
    step: String,
    request: Option<String>,
    answer: Option<String>,
    drive: Option<String>,
    second_line_got: Option<String>,
}

fn rows(jsonl: &str) -> Vec<Row> {
    jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("a recorded row is JSON");
            let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
            Row {
                step: text("step").unwrap_or_default(),
                request: text("request").or_else(|| text("req")),
                answer: text("answer").or_else(|| text("ans")),
                drive: text("drive"),
                second_line_got: text("second_line_got"),
            }
        })
        .collect()
}

/// What a second request line on the same connection got, as the recording words it.
fn second_line_kind(got: &str) -> &'static str {
    if got.contains("reset") || got.contains("Reset") {
        "reset"
    } else if got.contains("closed") {
        "closed"
    } else {
        "other"
    }
}

/// An answer with what differs between runs replaced: pids by their order of appearance in the
/// answer (equal pids stay equal), terminal ids, directories.
pub(super) fn normalise(answer: &str) -> Value {
    let Ok(mut value) = serde_json::from_str::<Value>(answer) else {
        return Value::String(answer.to_string());
    };
    let mut pids = BTreeMap::new();
    walk(&mut value, None, &mut pids);
    value
}

fn walk(value: &mut Value, key: Option<&str>, pids: &mut BTreeMap<u64, usize>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                walk(v, Some(k), pids);
            }
        }
        Value::Array(items) => {
            for v in items {
                walk(v, key, pids);
            }
        }
        other => match key {
            Some("pid" | "shell_pid" | "foreground_process_group_id") => {
                if let Some(pid) = other.as_u64() {
                    let n = pids.len();
                    let label = *pids.entry(pid).or_insert(n);
                    *other = json!(format!("<pid {label}>"));
                }
            }
            Some("terminal_id") => *other = json!("<terminal>"),
            Some("cwd" | "foreground_cwd") => *other = json!("<dir>"),
            _ => {}
        },
    }
}

/// The fields of two answers that differ: (path, real, fake).
pub(super) fn differences(real: &Value, fake: &Value, path: &str, out: &mut Vec<(String, String, String)>) {
    let at = |k: &str| {
        if path.is_empty() {
            k.to_string()
        } else {
            format!("{path}.{k}")
        }
    };
    match (real, fake) {
        (Value::Object(r), Value::Object(f)) => {
            for (k, rv) in r {
                match f.get(k) {
                    Some(fv) => differences(rv, fv, &at(k), out),
                    None => out.push((at(k), rv.to_string(), "(absent)".into())),
                }
            }
            for (k, fv) in f {
                if !r.contains_key(k) {
                    out.push((at(k), "(absent)".into(), fv.to_string()));
                }
            }
        }
        (Value::Array(r), Value::Array(f)) if r.len() == f.len() => {
            for (i, (rv, fv)) in r.iter().zip(f).enumerate() {
                differences(rv, fv, &at(&i.to_string()), out);
            }
        }
        (r, f) if r != f => out.push((path.to_string(), r.to_string(), f.to_string())),
        _ => {}
    }
}

/// One request on its own connection (and the second line, if the row sent one); the answer line
/// and what the second line got.
async fn exchange(h: &FakeHerdr, line: &str, second: Option<&str>) -> (String, Option<&'static str>) {
    let mut stream = UnixStream::connect(h.socket_path()).await.expect("connect");
    // Both lines in one write: the second is on the socket before the first is answered.
    let payload = match second {
        Some(second) => format!("{line}\n{second}\n"),
        None => format!("{line}\n"),
    };
    stream.write_all(payload.as_bytes()).await.expect("write");
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    tokio::time::timeout(
        scaled(std::time::Duration::from_secs(10)),
        reader.read_line(&mut answer),
    )
    .await
    .expect("an answer in time")
    .expect("read");
    let got = match second {
        None => None,
        Some(_) => {
            let mut rest = Vec::new();
            Some(match reader.read_to_end(&mut rest).await {
                Ok(_) if rest.is_empty() => "closed",
                Ok(_) => "other",
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => "reset",
                Err(_) => "other",
            })
        }
    };
    (answer.trim_end().to_string(), got)
}

/// The differences of one row, each as "step | path | real | fake".
type Found = Vec<(String, String, String, String)>;

/// Compares the answers of two recordings row by row (the script's steps in order); returns the
/// number of rows compared, of rows equal, and the differences.
fn compare(real: &[Row], other: &[(String, String, Option<&str>)]) -> (usize, usize, Found) {
    let mut found = Vec::new();
    let mut equal = 0;
    let mut compared = 0;
    let mut next = 0;
    for row in real.iter().filter(|r| r.request.is_some()) {
        let Some(at) = other[next..].iter().position(|(s, _, _)| *s == row.step) else {
            found.push((
                row.step.clone(),
                String::new(),
                "(answered)".into(),
                "(no such step)".into(),
            ));
            continue;
        };
        let (step, answer, got) = &other[next + at];
        next += at + 1;
        compared += 1;
        let mut diffs = Vec::new();
        differences(
            &normalise(row.answer.as_deref().unwrap_or_default()),
            &normalise(answer),
            "",
            &mut diffs,
        );
        let real_got = row.second_line_got.as_deref().map(second_line_kind);
        if real_got != *got {
            diffs.push(("second line".into(), format!("{real_got:?}"), format!("{got:?}")));
        }
        if diffs.is_empty() {
            equal += 1;
        }
        for (path, r, f) in diffs {
            found.push((step.clone(), path, r, f));
        }
    }
    (compared, equal, found)
}

/// Whether a difference is allowed: its step is listed with this path, or with "" (the whole row).
fn allowed(step: &str, path: &str) -> Option<usize> {
    ALLOWED
        .iter()
        .position(|(s, p, _)| *s == step && (p.is_empty() || *p == path))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fake_answers_the_recorded_session_as_real_herdr_did() {
    let real = rows(REAL);
    assert_eq!(real.len(), 209, "the recording's rows");
    let id = uuid::Uuid::new_v4().simple().to_string();
    let dir = std::env::temp_dir().join(format!("fr-{}", &id[..12]));
    let h = FakeHerdr::start(&dir).await.expect("the fake starts");
    let mut answers: Vec<(String, String, Option<&str>)> = Vec::new();
    let mut agent_pane = String::new();
    for row in &real {
        if let Some(drive) = &row.drive {
            // `kill -KILL <agent pid>`: the stand-in agent's process dies.
            assert!(drive.starts_with("kill"), "an unknown drive step {drive:?}");
            h.agent_exits(&agent_pane);
            continue;
        }
        let Some(line) = &row.request else { continue };
        let second = row
            .second_line_got
            .as_ref()
            .map(|_| r#"{"id": "second", "method": "ping", "params": {}}"#);
        let (answer, got) = exchange(&h, line, second).await;
        answers.push((row.step.clone(), answer, got));
        if row.step == "F start agent" {
            // The stand-in agent starts and reports itself, as fake-agent.py does.
            let request: Value = serde_json::from_str(line).expect("a request");
            agent_pane = request["params"]["pane_id"].as_str().unwrap_or_default().to_string();
            let report = json!({"id": "fa", "method": "pane.report_agent", "params": {
                "pane_id": agent_pane, "source": "custom:fakeagent", "agent": "fakeagent", "state": "idle"}});
            let (answer, _) = exchange(&h, &report.to_string(), None).await;
            assert_eq!(answer, r#"{"id":"fa","result":{"type":"ok"}}"#);
        }
    }
    h.stop().await;
    let _ = std::fs::remove_dir_all(&dir);

    let (compared, equal, found) = compare(&real, &answers);
    let mut used = vec![false; ALLOWED.len()];
    let mut unexpected = Vec::new();
    for (step, path, r, f) in &found {
        match allowed(step, path) {
            Some(i) => used[i] = true,
            None => unexpected.push(format!("{step} | {path} | real {r} | fake {f}")),
        }
    }
    let stale: Vec<&str> = ALLOWED
        .iter()
        .zip(&used)
        .filter(|(_, used)| !**used)
        .map(|((s, p, _), _)| if p.is_empty() { *s } else { *p })
        .collect();
    eprintln!(
        "replay: {compared} rows compared, {equal} equal, {} differ; {} differences not allowed",
        compared - equal,
        unexpected.len()
    );
    assert_replayed(&unexpected, &stale);
}

/// A replay's verdict: no difference outside the allowed list, and no allowed one that no longer
/// occurs (the list stays true).
pub(super) fn assert_replayed<S: std::fmt::Debug>(unexpected: &[String], stale: &[S]) {
    assert!(
        unexpected.is_empty(),
        "the fake answers differently from real herdr v0.8.2 ({} differences; fix the fake, or \
         allow one in ALLOWED with the reason it cannot hide a gateway bug):\n{}",
        unexpected.len(),
        unexpected.join("\n")
    );
    assert!(stale.is_empty(), "allowed differences that no longer occur: {stale:?}");
}

/// The same comparison against the fake of main 344fdc9 (recorded), for the record: how far the
/// fake was from real herdr before this replay existed.
#[test]
fn the_fake_of_344fdc9_differed_from_real_herdr() {
    let real = rows(REAL);
    let old: Vec<(String, String, Option<&str>)> = rows(FAKE_344FDC9)
        .into_iter()
        .filter(|r| r.drive.is_none())
        .filter_map(|r| {
            let got = r.second_line_got.as_deref().map(second_line_kind);
            r.answer.map(|a| (r.step, a, got))
        })
        .collect();
    let (compared, equal, found) = compare(&real, &old);
    eprintln!(
        "fake 344fdc9: {compared} rows compared, {equal} equal, {} differ ({} fields)",
        compared - equal,
        found.len()
    );
    assert_eq!(
        (compared, equal),
        (195, 63),
        "the recordings are fixed: so is their comparison"
    );
}
