//! Steps of `features/mcp_clients.feature`: a gateway seen through real MCP clients (SPEC [C-22]).
//!
//! Exists because an MCP client (Claude Code, the official SDKs) offers its model only what
//! `tools/list` returned and ends its session with `DELETE /mcp`; the suite's own client calls
//! only listed tools too (`fleet_conformance::mcp`), but these steps judge the listing itself per
//! role, its input schemas against the contract, the refusal of tools a role may not call, a
//! session through the official Python SDK, and the answer to `DELETE /mcp` (CONTRACT §3).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{then, when};
use fleet_conformance::mcp::listing::{self, TOOLS};
use fleet_conformance::mcp::{McpError, http_client};
use fleet_conformance::timing::scaled;
use serde_json::{Value, json};

use crate::world::FleetWorld;

/// Where `w.results` keeps the Python SDK client's report.
const SDK_RESULT: &str = "mcp-python-sdk";
/// Where `w.results` keeps the status of a plain `DELETE /mcp`.
const DELETE_RESULT: &str = "mcp-delete";

/// SPEC [C-22]: a session end SHOULD be answered 200 or 204, or 405 where sessions are not ended
/// by clients.
const SESSION_END_OK: [u16; 3] = [200, 204, 405];

/// "a main", "an orchestrator", "a worker".
fn a_role(role: &str) -> String {
    let article = if role.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    };
    format!("{article} {role}")
}

fn role_words(role: &str) -> anyhow::Result<(&'static [&'static str], &'static [&'static str])> {
    let may = listing::may_call(role).ok_or_else(|| anyhow!("unknown role {role:?}"))?;
    let refused = listing::judged_refusals(role).ok_or_else(|| anyhow!("unknown role {role:?}"))?;
    Ok((may, refused))
}

#[then(regex = r#"^"([^"]+)" is listed every tool an? (main|orchestrator|worker) may call$"#)]
async fn listed_every_tool(w: &mut FleetWorld, name: String, role: String) -> anyhow::Result<()> {
    let (may, _) = role_words(&role)?;
    let listed = w.mcp(&name).await?.listed();
    let names: Vec<&str> = listed.iter().map(|t| t.name.as_str()).collect();
    let missing: Vec<&str> = may.iter().copied().filter(|t| !names.contains(t)).collect();
    ensure!(
        missing.is_empty(),
        "SPEC [C-22]: the tools/list of {name} ({}) lacks {missing:?}, which SPEC §15 lets {} \
         call; an MCP client never offers an unlisted tool to its model. Listed: {names:?}",
        a_role(&role),
        a_role(&role)
    );
    Ok(())
}

#[then(regex = r#"^each tool listed to "([^"]+)" takes exactly the arguments the contract's schema takes$"#)]
async fn listed_schemas(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let listed = w.mcp(&name).await?.listed();
    let mut judged = 0;
    let mut broken = Vec::new();
    for tool in listed.iter().filter(|t| TOOLS.contains(&t.name.as_str())) {
        judged += 1;
        match listing::compare(&tool.name, &tool.input_schema) {
            Ok(d) if d.is_empty() => {}
            Ok(d) => {
                let shown: Vec<String> = d.iter().take(4).map(ToString::to_string).collect();
                broken.push(format!(
                    "{} ({} of its samples, e.g. {})",
                    tool.name,
                    d.len(),
                    shown.join("; ")
                ));
            }
            Err(e) => broken.push(e),
        }
    }
    ensure!(judged > 0, "{name} was listed no tool of SPEC §15 at all");
    ensure!(
        broken.is_empty(),
        "SPEC [C-22]: a listed tool's inputSchema must be the contract's (fixtures/schemas/contract.schema.json \
         <tool>.arguments; judged by sample arguments, CONTRACT §3); {name}'s listing differs: {}",
        broken.join(" | ")
    );
    Ok(())
}

/// Arguments the contract accepts for each tool, so that a refusal is not a complaint about them.
fn refusal_args(tool: &str, some_gid: &str) -> Value {
    let fresh = fleet_conformance::envelope::new_uuid();
    match tool {
        "bridge_send" => json!({"to": some_gid, "text": "refused brief", "wait_reply": false}),
        "bridge_wait" => json!({"timeout_s": 1}),
        "bridge_poll" => json!({"max": 1}),
        "bridge_answer" => json!({"turn_id": fresh, "text": "refused answer"}),
        "bridge_broadcast" => json!({"group": "c22-nobody", "text": "refused broadcast"}),
        "bridge_spawn" => json!({"host": "c22-nowhere", "profile": "none", "brief": "refused", "groups": []}),
        "bridge_stop" => json!({"gid": fresh}),
        "bridge_reply" => json!({"text": "refused reply"}),
        "bridge_ask" => json!({"question": "refused question", "timeout_s": 1}),
        _ => json!({}),
    }
}

#[then(regex = r#"^"([^"]+)" is refused each tool an? (main|orchestrator|worker) may not call, called by name$"#)]
async fn refused_by_name(w: &mut FleetWorld, name: String, role: String) -> anyhow::Result<()> {
    let (_, refused) = role_words(&role)?;
    let gid = w.gid(&name)?;
    let client = w.mcp(&name).await?;
    let mut answered = Vec::new();
    for tool in refused {
        match client.call_unlisted(tool, refusal_args(tool, &gid)).await {
            Ok(r) if r.is_error == Some(true) => {}
            Ok(r) => answered.push(format!(
                "{tool} answered {}",
                r.structured_content
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| format!("{:?}", r.content))
            )),
            // A JSON-RPC error is a refusal too.
            Err(McpError::Call { .. }) => {}
            Err(e) => bail!("{name} calling {tool} by name: {e}"),
        }
    }
    ensure!(
        answered.is_empty(),
        "SPEC [C-22]: a tool the caller's role may not call is refused when called (isError or a JSON-RPC \
         error); {name} ({}) was served: {}",
        a_role(&role),
        answered.join("; ")
    );
    Ok(())
}

/// The venv with the official MCP Python SDK: `FLEET_PYTHON_VENV` (the runner image sets it), else
/// the one scripts/setup makes in the checkout this binary was built from.
fn python_venv() -> PathBuf {
    match std::env::var_os("FLEET_PYTHON_VENV") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => fleet_conformance::conformance::checkout()
            .join("target")
            .join("python-mcp"),
    }
}

#[when(
    regex = r#"^"([^"]+)" uses the official MCP Python SDK to list its tools, read the roster and send "([^"]*)" to "([^"]+)" without waiting for a reply$"#
)]
async fn python_sdk_session(w: &mut FleetWorld, name: String, text: String, to: String) -> anyhow::Result<()> {
    let to_gid = w.gid(&to)?;
    let (url, token) = {
        let e = w.entity(&name)?;
        (w.host(&e.host)?.gateway.mcp_url(), e.token.clone())
    };
    let python = python_venv().join("bin").join("python");
    ensure!(
        python.exists(),
        "no Python venv with the official MCP SDK at {} — run scripts/setup in a checkout (it makes the \
         venv), or make one (python3 -m venv DIR && DIR/bin/pip install mcp==2.3.0) and name it in \
         FLEET_PYTHON_VENV",
        python.display()
    );
    let script = fleet_conformance::conformance::suite_root()
        .join("scripts")
        .join("mcp-python-client.py");
    let calls = json!([
        {"tool": "bridge_roster", "arguments": {}},
        {"tool": "bridge_send", "arguments": {"to": to_gid, "text": text, "wait_reply": false}},
    ]);
    let deadline = scaled(Duration::from_secs(90));
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(&script)
        .arg(&url)
        .arg(&token)
        .arg(calls.to_string())
        .kill_on_drop(true);
    let out = tokio::time::timeout(deadline, cmd.output())
        .await
        .map_err(|_| anyhow!("the Python SDK client did not finish within {deadline:?}"))?
        .with_context(|| format!("running {}", python.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(stdout.trim()).with_context(|| {
        format!(
            "the Python SDK client printed no JSON (exit {}): {stdout} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    tracing::info!(%report, "python SDK session");
    w.results.insert(SDK_RESULT.into(), report);
    Ok(())
}

fn sdk_report(w: &FleetWorld) -> anyhow::Result<&Value> {
    w.results
        .get(SDK_RESULT)
        .ok_or_else(|| anyhow!("no Python SDK session ran in this scenario"))
}

#[then(regex = r#"^the SDK was listed bridge_roster and bridge_send, read the roster, and the send was "injected"$"#)]
async fn sdk_calls_worked(w: &mut FleetWorld) -> anyhow::Result<()> {
    let r = sdk_report(w)?;
    ensure!(
        r["error"].is_null(),
        "the Python SDK session failed: {}; report: {r}",
        r["error"]
    );
    let calls = r["calls"].as_array().cloned().unwrap_or_default();
    let call = |tool: &str| calls.iter().find(|c| c["tool"] == tool).cloned().unwrap_or(Value::Null);
    for tool in ["bridge_roster", "bridge_send"] {
        let c = call(tool);
        ensure!(
            c["listed"] == true,
            "SPEC [C-22]: the Python SDK was not listed {tool}, so it never offers it (listed: {})",
            r["listed"]
        );
        ensure!(c["isError"] == false, "the SDK's {tool} came back isError: {c}");
    }
    // CONTRACT §3: structured content (a lone `result` field unwrapped), else the text as JSON.
    let value = |c: &Value| {
        fleet_conformance::mcp::tool_value(Some(c["result"].clone()), c["text"].as_str().unwrap_or_default())
            .map_err(|e| anyhow!("the SDK's {} result: {e}", c["tool"]))
    };
    let roster = value(&call("bridge_roster"))?;
    fleet_conformance::schemas::check("bridge_roster", "bridge_roster.result", &roster)?;
    let send = value(&call("bridge_send"))?;
    fleet_conformance::schemas::check("bridge_send", "bridge_send.result", &send)?;
    ensure!(
        send["status"] == "injected",
        "the SDK's bridge_send was not injected: {send}"
    );
    Ok(())
}

#[then(regex = r#"^the SDK's DELETE /mcp was answered 200, 204 or 405, and the SDK logged no failed session end$"#)]
async fn sdk_session_end(w: &mut FleetWorld) -> anyhow::Result<()> {
    let r = sdk_report(w)?;
    let statuses: Vec<u64> = r["delete"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect();
    ensure!(
        !statuses.is_empty(),
        "the Python SDK sent no DELETE /mcp at its session's end (report: {r})"
    );
    ensure!(
        statuses.iter().all(|s| SESSION_END_OK.contains(&(*s as u16))),
        "SPEC [C-22]: DELETE /mcp SHOULD be answered 200 or 204 (or 405); the SDK got {statuses:?}"
    );
    let failed: Vec<&Value> = r["warnings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|l| l.as_str().is_some_and(|s| s.contains("termination failed")))
        .collect();
    ensure!(failed.is_empty(), "SPEC [C-22]: the Python SDK logged {failed:?}");
    Ok(())
}

#[when(regex = r#"^"([^"]+)" opens an MCP session over plain HTTP and ends it with DELETE /mcp$"#)]
async fn plain_delete(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (url, token) = {
        let e = w.entity(&name)?;
        (w.host(&e.host)?.gateway.mcp_url(), e.token.clone())
    };
    let http = http_client();
    let deadline = scaled(Duration::from_secs(20));
    let version = "2025-06-18";
    let post = |body: Value, session: Option<String>| {
        let mut req = http
            .post(&url)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .json(&body);
        if let Some(s) = session {
            req = req.header("mcp-session-id", s).header("mcp-protocol-version", version);
        }
        req
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": version, "capabilities": {},
        "clientInfo": {"name": "fleet-suite-plain-http", "version": "0"}}});
    let res = tokio::time::timeout(deadline, post(init, None).send())
        .await
        .map_err(|_| anyhow!("no answer to initialize within {deadline:?}"))??;
    ensure!(res.status().is_success(), "initialize answered {}", res.status());
    let session = res
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .ok_or_else(|| anyhow!("initialize answered no Mcp-Session-Id: nothing to end"))?;
    let body = tokio::time::timeout(deadline, res.text())
        .await
        .map_err(|_| anyhow!("the initialize answer did not end within {deadline:?}"))??;
    ensure!(body.contains("\"result\""), "initialize answered no result: {body}");
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let res = tokio::time::timeout(deadline, post(note, Some(session.clone())).send())
        .await
        .map_err(|_| anyhow!("no answer to notifications/initialized within {deadline:?}"))??;
    ensure!(
        res.status().is_success(),
        "notifications/initialized answered {}",
        res.status()
    );
    let res = tokio::time::timeout(
        deadline,
        http.delete(&url)
            .bearer_auth(&token)
            .header("mcp-session-id", &session)
            .header("mcp-protocol-version", version)
            .send(),
    )
    .await
    .map_err(|_| anyhow!("no answer to DELETE /mcp within {deadline:?}"))??;
    w.results.insert(DELETE_RESULT.into(), json!(res.status().as_u16()));
    Ok(())
}

#[then(regex = r#"^that DELETE was answered 200, 204 or 405$"#)]
async fn delete_answered(w: &mut FleetWorld) -> anyhow::Result<()> {
    let status = w
        .results
        .get(DELETE_RESULT)
        .and_then(Value::as_u64)
        .ok_or_else(|| anyhow!("no DELETE /mcp was sent in this scenario"))?;
    ensure!(
        SESSION_END_OK.contains(&(status as u16)),
        "SPEC [C-22]: DELETE /mcp SHOULD be answered 200 or 204 (what the official SDKs expect), or 405; \
         it was answered {status}"
    );
    Ok(())
}
