//! What `tools/list` must offer each role, and whether a listed input schema takes exactly the
//! arguments the contract's schema takes (SPEC [C-22], CONTRACT §3).
//!
//! Exists because an MCP client offers its model only the listed tools and builds the model's
//! arguments from the listed schema: a schema that leaves out a required argument or admits a
//! wrong type has the model send calls the gateway then refuses. Two schemas are compared by what
//! they accept, not by their text (a gateway may spell a schema its own way): a sample set is
//! derived from the contract's `<tool>.arguments` — each required argument left out, each argument
//! given every value of a fixed pool of JSON values, every argument at once, and non-objects — and
//! both schemas must give each sample the same verdict. Unknown extra arguments are not sampled
//! (the contract's shapes leave them open; CONTRACT §3 says they are not judged).

use serde_json::{Map, Value, json};

/// The tools of SPEC §15's table, in its order.
pub const TOOLS: [&str; 10] = [
    "bridge_send",
    "bridge_wait",
    "bridge_poll",
    "bridge_answer",
    "bridge_broadcast",
    "bridge_roster",
    "bridge_spawn",
    "bridge_stop",
    "bridge_reply",
    "bridge_ask",
];

/// The tools SPEC §15's "Who" column lets `role` call (`main`, `orchestrator`, `worker`).
pub fn may_call(role: &str) -> Option<&'static [&'static str]> {
    match role {
        // Every tool but the worker's two (the table's last rows); SPEC [C-24]: an orchestrator
        // pulls like a main, so its tools are a main's.
        "main" | "orchestrator" => Some(&TOOLS[..8]),
        "worker" => Some(&["bridge_roster", "bridge_reply", "bridge_ask"]),
        _ => None,
    }
}

/// The tools whose refusal to `role` is judged (CONTRACT §3): a worker's calls of a puller's
/// tools, a puller's (a main's or an orchestrator's, SPEC [C-24]) calls of a worker's.
pub fn judged_refusals(role: &str) -> Option<&'static [&'static str]> {
    match role {
        "main" | "orchestrator" => Some(&["bridge_reply", "bridge_ask"]),
        "worker" => Some(&[
            "bridge_send",
            "bridge_wait",
            "bridge_poll",
            "bridge_answer",
            "bridge_broadcast",
            "bridge_spawn",
            "bridge_stop",
        ]),
        _ => None,
    }
}

/// The values every argument is tried with: each JSON type, empty and edge values, strings a
/// pattern may or may not take.
fn pool() -> Vec<Value> {
    vec![
        json!("x"),
        json!(""),
        json!("all"),
        json!("ops-1"),
        json!("Bad Group!"),
        json!("a".repeat(64)),
        json!(0),
        json!(-1),
        json!(1),
        json!(2.5),
        json!(30),
        json!(true),
        json!(false),
        Value::Null,
        json!([]),
        json!(["g1"]),
        json!([1]),
        json!({}),
    ]
}

/// The contract's `<tool>.arguments` schema, as written in the schema file.
pub fn contract_arguments(tool: &str) -> Result<Value, String> {
    let root: Value =
        serde_json::from_str(crate::schemas::CONTRACT_SCHEMA).map_err(|e| format!("contract.schema.json: {e}"))?;
    root.pointer(&format!("/$defs/{tool}.arguments"))
        .cloned()
        .ok_or_else(|| format!("the contract has no {tool}.arguments"))
}

/// The sample arguments derived from a contract `.arguments` schema (see the module doc).
pub fn samples(contract: &Value) -> Result<Vec<Value>, String> {
    let props = contract
        .get("properties")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let required: Vec<String> = contract
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    // A value each argument's own schema takes (the first of the pool).
    let mut good = Map::new();
    for (name, schema) in &props {
        let v = jsonschema::validator_for(schema).map_err(|e| format!("property {name}: {e}"))?;
        let value = pool()
            .into_iter()
            .find(|x| v.is_valid(x))
            .ok_or_else(|| format!("no value of the pool fits property {name}"))?;
        good.insert(name.clone(), value);
    }
    let base: Map<String, Value> = required
        .iter()
        .filter_map(|r| good.get(r).map(|v| (r.clone(), v.clone())))
        .collect();
    let mut out = vec![Value::Object(base.clone()), Value::Object(good.clone())];
    for r in &required {
        let mut s = base.clone();
        s.remove(r);
        out.push(Value::Object(s));
    }
    for name in props.keys() {
        for value in pool() {
            let mut s = base.clone();
            s.insert(name.clone(), value);
            out.push(Value::Object(s));
        }
    }
    out.extend([json!([]), json!("x"), Value::Null, json!(1)]);
    Ok(out)
}

/// One sample the two schemas disagree on.
#[derive(Debug, Clone, PartialEq)]
pub struct Disagreement {
    pub sample: Value,
    pub contract_accepts: bool,
}

impl std::fmt::Display for Disagreement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (c, l) = if self.contract_accepts {
            ("accepts", "rejects")
        } else {
            ("rejects", "accepts")
        };
        write!(f, "{} — the contract {c} it, the listed schema {l} it", self.sample)
    }
}

/// The samples on which `listed` (a tool's listed `inputSchema`) and the contract's
/// `<tool>.arguments` disagree; `Err` when the listed schema does not compile or the sample set
/// does not have both verdicts (a suite error).
pub fn compare(tool: &str, listed: &Value) -> Result<Vec<Disagreement>, String> {
    let contract = contract_arguments(tool)?;
    let listed_v = jsonschema::validator_for(listed)
        .map_err(|e| format!("{tool}'s listed inputSchema is not a JSON Schema: {e}"))?;
    let shape = format!("{tool}.arguments");
    let mut verdicts = (0, 0);
    let mut out = Vec::new();
    for sample in samples(&contract)? {
        let c = crate::schemas::check(tool, &shape, &sample).is_ok();
        if c {
            verdicts.0 += 1;
        } else {
            verdicts.1 += 1;
        }
        if c != listed_v.is_valid(&sample) {
            out.push(Disagreement {
                sample,
                contract_accepts: c,
            });
        }
    }
    if verdicts.0 == 0 || verdicts.1 == 0 {
        return Err(format!(
            "the samples of {shape} are all {} by the contract: nothing is judged (a suite error)",
            if verdicts.0 == 0 { "rejected" } else { "accepted" }
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_schema_itself_agrees_with_itself_for_every_tool() {
        for tool in TOOLS {
            let c = contract_arguments(tool).expect("in the contract");
            assert_eq!(compare(tool, &c).expect("compared"), vec![], "{tool}");
        }
    }

    #[test]
    fn a_schema_missing_a_required_argument_or_a_bound_disagrees() {
        let mut send = contract_arguments("bridge_send").expect("send");
        send["required"] = json!(["text"]);
        let d = compare("bridge_send", &send).expect("compared");
        assert!(
            d.iter()
                .any(|d| d.sample == json!({"text": "x"}) && !d.contract_accepts),
            "{d:?}"
        );
        let mut wait = contract_arguments("bridge_wait").expect("wait");
        wait["properties"]["timeout_s"] = json!({"type": "number"});
        let d = compare("bridge_wait", &wait).expect("compared");
        assert!(d.iter().any(|d| d.sample == json!({"timeout_s": 0})), "{d:?}");
        let mut bc = contract_arguments("bridge_broadcast").expect("broadcast");
        bc["properties"]["group"] = json!({"type": "string"});
        assert!(!compare("bridge_broadcast", &bc).expect("compared").is_empty());
        let strict = json!({"type": "object", "properties": {"text": {"type": "integer"}}, "required": ["text"]});
        assert!(!compare("bridge_reply", &strict).expect("compared").is_empty());
    }

    #[test]
    fn every_role_may_call_roster_and_refusals_are_tools_it_may_not_call() {
        for role in ["main", "orchestrator", "worker"] {
            let may = may_call(role).expect("a role");
            assert!(may.contains(&"bridge_roster"));
            for t in judged_refusals(role).expect("a role") {
                assert!(!may.contains(t) && TOOLS.contains(t), "{role} {t}");
            }
        }
    }
}
