//! The contract's machine-readable schemas (`fixtures/schemas/contract.schema.json`), applied to
//! every tool result and local-API body the suite reads.
//!
//! Exists because `docs/CONTRACT.md` is prose and another team builds from it: the same shapes as
//! JSON Schema let them check their gateway without this suite, and let the suite say *which
//! field* of an answer broke the contract instead of failing later on a missing value. The
//! readers of [`crate::contract`] still pick a shape apart; this module only decides whether an
//! answer is inside the contract at all.
//!
//! Each `$defs` entry is one shape, named `<tool>.result`, `<tool>.arguments` or
//! `<call>.response`; [`check`] validates a value against one of them.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{Value, json};

/// The schema file, compiled into the suite so a run can never read a different one.
pub const CONTRACT_SCHEMA: &str = include_str!("../fixtures/schemas/contract.schema.json");

/// An answer outside its schema, with every place that broke it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} broke the contract's schema {shape:?} (fixtures/schemas/contract.schema.json): {}; answer: {answer}", problems.join("; "))]
pub struct SchemaViolation {
    /// What was read (a tool, an API call).
    pub what: String,
    pub shape: String,
    /// `at <JSON pointer>: <what is wrong>`, one per failed keyword.
    pub problems: Vec<String>,
    /// The answer, shortened.
    pub answer: String,
}

fn validators() -> &'static Result<HashMap<String, jsonschema::Validator>, String> {
    static V: OnceLock<Result<HashMap<String, jsonschema::Validator>, String>> = OnceLock::new();
    V.get_or_init(|| {
        let root: Value = serde_json::from_str(CONTRACT_SCHEMA).map_err(|e| format!("contract.schema.json: {e}"))?;
        let defs = root
            .get("$defs")
            .and_then(Value::as_object)
            .ok_or("contract.schema.json has no $defs")?;
        let mut out = HashMap::new();
        for name in defs.keys() {
            // A root that refers to one entry, with every entry beside it for its own $refs.
            let pointer = format!("#/$defs/{}", name.replace('~', "~0").replace('/', "~1"));
            let schema = json!({
                "$schema": root.get("$schema").cloned().unwrap_or(Value::Null),
                "$defs": defs,
                "$ref": pointer,
            });
            let v = jsonschema::validator_for(&schema).map_err(|e| format!("contract.schema.json {name}: {e}"))?;
            out.insert(name.clone(), v);
        }
        Ok(out)
    })
}

/// The names of every shape in the schema file.
pub fn shapes() -> Result<Vec<String>, String> {
    let mut names: Vec<String> = validators().as_ref().map_err(Clone::clone)?.keys().cloned().collect();
    names.sort();
    Ok(names)
}

/// Whether the schema file has a shape of that name.
pub fn has_shape(shape: &str) -> bool {
    validators().as_ref().is_ok_and(|v| v.contains_key(shape))
}

/// Validates `v` (the answer of `what`) against `shape`. A shape the file does not have, or a
/// file that does not compile, is an error too: the suite never judges against nothing.
pub fn check(what: &str, shape: &str, v: &Value) -> Result<(), SchemaViolation> {
    let violation = |problems: Vec<String>| SchemaViolation {
        what: what.to_string(),
        shape: shape.to_string(),
        problems,
        answer: shorten(&v.to_string()),
    };
    let all = validators().as_ref().map_err(|e| violation(vec![e.clone()]))?;
    let validator = all
        .get(shape)
        .ok_or_else(|| violation(vec![format!("no shape {shape:?} in the schema file")]))?;
    let problems: Vec<String> = validator
        .iter_errors(v)
        .map(|e| {
            let at = e.instance_path().to_string();
            format!("at {}: {e}", if at.is_empty() { "/".to_string() } else { at })
        })
        .collect();
    if problems.is_empty() {
        Ok(())
    } else {
        Err(violation(problems))
    }
}

fn shorten(s: &str) -> String {
    const MAX: usize = 400;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_compiles_and_every_tool_has_arguments_and_a_result() {
        let names = shapes().expect("schema file compiles");
        for tool in crate::mcp::listing::TOOLS {
            for part in ["arguments", "result"] {
                let n = format!("{tool}.{part}");
                assert!(names.contains(&n), "{n} missing from {names:?}");
            }
        }
    }

    const ID: &str = "0b7e6a56-3c1f-4f0e-9d2a-5a1e0c9b8f11";

    fn message() -> Value {
        json!({"kind": "REPLY", "msgId": ID, "from": ID, "text": "done", "traceId": ID, "to": ID})
    }

    #[test]
    fn every_shape_the_contract_allows_passes() {
        let ok = [
            ("bridge_poll.result", json!([message()])),
            ("bridge_poll.result", json!({"messages": [message()]})),
            ("bridge_poll.result", json!([])),
            ("bridge_wait.result", message()),
            ("bridge_wait.result", json!({"message": message()})),
            ("bridge_wait.result", json!({"timeout": true})),
            (
                "bridge_send.result",
                json!({"msgId": ID, "status": "injected", "reply": "ok"}),
            ),
            (
                "bridge_send.result",
                json!({"msgId": ID, "status": "injected", "reply": message()}),
            ),
            (
                "bridge_send.result",
                json!({"msgId": ID, "status": "failed", "reason": "busy", "detail": "x"}),
            ),
            ("bridge_roster.result", json!([{"gid": ID, "host": "a"}])),
            (
                "bridge_roster.result",
                json!({"entries": [{"gid": "_gateway", "host": "b", "role": "gateway"}]}),
            ),
            ("bridge_ask.result", json!({"status": "answered", "answer": "yes"})),
            ("bridge_ask.result", json!({"status": "no_waiter"})),
            ("bridge_ask.result", json!({"status": "failed", "detail": "publish"})),
            ("bridge_answer.result", json!({"status": "abandoned"})),
            ("bridge_spawn.result", json!({"gid": ID, "status": "present"})),
            ("bridge_broadcast.result", json!({"msgId": ID})),
            ("bridge_reply.result", json!({"msgId": ID})),
            ("entities.post.response", json!({"gid": ID, "token": "t"})),
        ];
        for (shape, v) in ok {
            check("test", shape, &v).unwrap_or_else(|e| panic!("{e}"));
        }
    }

    #[test]
    fn an_answer_outside_the_contract_names_the_field_that_broke_it() {
        let mut m = message();
        m["msgId"] = json!("not-a-uuid");
        let e = check("bridge_poll", "bridge_poll.result", &json!({"messages": [m]})).expect_err("bad msgId");
        assert!(e.problems.iter().any(|p| p.contains("/messages/0/msgId")), "{e}");
        let e = check("bridge_wait", "bridge_wait.result", &json!({"timeout": false})).expect_err("not a timeout");
        assert!(e.to_string().contains("bridge_wait.result"), "{e}");
        let e = check("bridge_ask", "bridge_ask.result", &json!({"status": "answered"})).expect_err("no answer");
        assert!(!e.problems.is_empty());
        assert!(check("x", "no-such-shape", &json!({})).is_err());
    }
}
