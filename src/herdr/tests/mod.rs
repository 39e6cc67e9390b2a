//! Tests of the fake herdr: every test speaks raw newline-delimited JSON over the unix socket, as
//! a gateway would, or drives the [`FakeHerdr`] handle as the suite's steps do. The helpers are
//! here; the tests, one file per concern, below.

use super::*;
use crate::timing::{scaled, wait_for};
use rstest::rstest;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;

/// Upper bound for anything that should happen "at once".
fn deadline() -> Duration {
    scaled(Duration::from_secs(5))
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Self {
        let id = uuid::Uuid::new_v4().simple().to_string();
        Scratch(std::env::temp_dir().join(format!("fh-{}", &id[..12])))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn fake() -> (FakeHerdr, Scratch) {
    let dir = Scratch::new();
    let herdr = FakeHerdr::start(&dir.0).await.expect("fake herdr starts");
    (herdr, dir)
}

/// Connects, writes `line` plus a newline, reads one line (empty string on EOF).
async fn raw_on(path: &Path, line: &str) -> String {
    let mut stream = UnixStream::connect(path).await.expect("connect");
    stream.write_all(format!("{line}\n").as_bytes()).await.expect("write");
    read_answer(stream).await
}

async fn read_answer(stream: UnixStream) -> String {
    let mut reader = BufReader::new(stream);
    let mut answer = String::new();
    tokio::time::timeout(deadline(), reader.read_line(&mut answer))
        .await
        .expect("answer before the deadline")
        .expect("read");
    answer
}

async fn raw(h: &FakeHerdr, line: &str) -> Value {
    let answer = raw_on(h.socket_path(), line).await;
    assert!(answer.ends_with('\n'), "one newline-terminated line, got {answer:?}");
    serde_json::from_str(&answer).expect("answer is JSON")
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One request with a fresh id; checks the answer carries it back.
async fn rpc(h: &FakeHerdr, method: &str, params: Value) -> Value {
    let id = format!("r{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    let line = json!({"id": id, "method": method, "params": params}).to_string();
    let answer = raw(h, &line).await;
    assert_eq!(answer["id"], id, "{answer}");
    answer
}

fn code(answer: &Value) -> &str {
    answer["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error: {answer}"))
}

fn result_type(answer: &Value) -> &str {
    answer["result"]["type"]
        .as_str()
        .unwrap_or_else(|| panic!("not a success: {answer}"))
}

async fn send(h: &FakeHerdr, pane: &str, text: &str) -> Value {
    rpc(
        h,
        "pane.send_input",
        json!({"pane_id": pane, "text": text, "keys": ["enter"]}),
    )
    .await
}

async fn status_on_wire(h: &FakeHerdr, pane: &str) -> String {
    let answer = rpc(h, "pane.get", json!({"pane_id": pane})).await;
    answer["result"]["pane"]["agent_status"]
        .as_str()
        .expect("agent_status")
        .to_string()
}

fn wait_params(pane: &str, timeout_ms: u64) -> Value {
    json!({"target": pane, "until": ["idle", "done"], "timeout_ms": timeout_ms})
}

/// `pane.process_info` → (shell pid, foreground process group id, first foreground name).
async fn foreground(h: &FakeHerdr, pane: &str) -> (u64, u64, String) {
    let answer = rpc(h, "pane.process_info", json!({"pane_id": pane})).await;
    assert_eq!(result_type(&answer), "pane_process_info", "{answer}");
    let info = &answer["result"]["process_info"];
    assert_eq!(info["pane_id"], pane);
    (
        info["shell_pid"].as_u64().unwrap_or_default(),
        info["foreground_process_group_id"].as_u64().unwrap_or_default(),
        info["foreground_processes"][0]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

mod agents;
mod detection;
mod faults;
mod keys;
mod panes;
mod processes;
mod wire;
