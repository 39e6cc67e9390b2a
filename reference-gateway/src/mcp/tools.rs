//! The tools of SPEC §15's table as `tools/list` shows them, and who may call each ([C-22]).
//!
//! Exists because an MCP client (Claude Code, the official SDKs) offers its model only the tools
//! `tools/list` returns: a tool left out of the listing is a tool the agent never uses, however
//! well it works when called by name. One table says both what a role is listed and what it may
//! call, so the listing and the refusal in `call_tool` cannot drift apart. The input schemas are
//! written here, in the gateway's own words, to mean what the published contract's
//! `bridge_*.arguments` mean (the suite judges them by validating sample arguments with both).

use std::sync::Arc;

use rmcp::model::Tool;
use serde_json::{Value, json};

use crate::registry::Role;

/// Roles that pull over MCP (SPEC §0): main and orchestrator.
const PULLERS: &[Role] = &[Role::Main, Role::Orchestrator];
const WORKER: &[Role] = &[Role::Worker];
const ANY: &[Role] = &[Role::Main, Role::Orchestrator, Role::Worker];

/// One tool of the table: its name, what an agent reads about it, who may call it, its schema.
struct Def {
    name: &'static str,
    description: &'static str,
    roles: &'static [Role],
    schema: fn() -> Value,
}

/// `timeout_s` as the contract has it: seconds, more than zero.
fn timeout_s() -> Value {
    json!({"type": "number", "exclusiveMinimum": 0, "description": "seconds to wait, more than 0"})
}

fn object(props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": props, "required": required})
}

const TABLE: &[Def] = &[
    Def {
        name: "bridge_send",
        description: "Send a task brief to an entity. Returns once it was injected (or failed); with wait_reply it stays open until the worker's REPLY or ASK.",
        roles: PULLERS,
        schema: || {
            object(
                json!({
                    "to": {"type": "string", "description": "the recipient's gid"},
                    "text": {"type": "string"},
                    "wait_reply": {"type": "boolean", "default": true},
                    "timeout_s": timeout_s(),
                }),
                &["to", "text"],
            )
        },
    },
    Def {
        name: "bridge_wait",
        description: "Wait for the next held message or question (optionally only from one sender).",
        roles: PULLERS,
        schema: || object(json!({"from": {"type": "string"}, "timeout_s": timeout_s()}), &[]),
    },
    Def {
        name: "bridge_poll",
        description: "Drain held messages (optionally only from one sender).",
        roles: PULLERS,
        schema: || {
            object(
                json!({"from": {"type": "string"}, "max": {"type": "integer", "minimum": 1}}),
                &[],
            )
        },
    },
    Def {
        name: "bridge_answer",
        description: "Answer a worker's question (turn_id from the question you received).",
        roles: PULLERS,
        schema: || {
            object(
                json!({"turn_id": {"type": "string"}, "text": {"type": "string"}}),
                &["turn_id", "text"],
            )
        },
    },
    Def {
        name: "bridge_broadcast",
        description: "Send a text to every entity of a group (`all` for everyone).",
        roles: PULLERS,
        schema: || {
            object(
                json!({
                    "group": {"type": "string", "pattern": "^(all|[a-z0-9][a-z0-9_-]{0,62})$"},
                    "text": {"type": "string"},
                }),
                &["group", "text"],
            )
        },
    },
    Def {
        name: "bridge_roster",
        description: "The union roster view of all hosts.",
        roles: ANY,
        schema: || object(json!({}), &[]),
    },
    Def {
        name: "bridge_spawn",
        description: "Start an agent of a profile on a host, with a brief and groups; returns its gid once present.",
        roles: PULLERS,
        schema: || {
            object(
                json!({
                    "host": {"type": "string"},
                    "profile": {"type": "string"},
                    "brief": {"type": "string"},
                    "groups": {"type": "array", "items": {"type": "string"}},
                }),
                &["host", "profile", "brief"],
            )
        },
    },
    Def {
        name: "bridge_stop",
        description: "Stop an entity (its pane closes, its inbox goes).",
        roles: PULLERS,
        schema: || object(json!({"gid": {"type": "string"}}), &["gid"]),
    },
    Def {
        name: "bridge_reply",
        description: "Reply to your parent main.",
        roles: WORKER,
        schema: || object(json!({"text": {"type": "string"}}), &["text"]),
    },
    Def {
        name: "bridge_ask",
        description: "Ask your parent main a question and wait for its answer.",
        roles: WORKER,
        schema: || {
            object(
                json!({"question": {"type": "string"}, "timeout_s": timeout_s()}),
                &["question"],
            )
        },
    },
];

/// The tools a caller of `role` is listed: exactly those it may call.
pub fn listed_for(role: Role) -> Vec<Tool> {
    TABLE
        .iter()
        .filter(|d| d.roles.contains(&role))
        .map(|d| {
            let schema = (d.schema)().as_object().cloned().unwrap_or_default();
            Tool::new(d.name, d.description, Arc::new(schema))
        })
        .collect()
}

/// Whether `role` may call `tool`; `None` for a tool the table does not have.
pub fn may_call(role: Role, tool: &str) -> Option<bool> {
    TABLE.iter().find(|d| d.name == tool).map(|d| d.roles.contains(&role))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(role: Role) -> Vec<String> {
        listed_for(role).into_iter().map(|t| t.name.to_string()).collect()
    }

    #[test]
    fn each_role_is_listed_what_it_may_call_and_nothing_else() {
        assert_eq!(names(Role::Worker), ["bridge_roster", "bridge_reply", "bridge_ask"]);
        assert_eq!(names(Role::Main).len(), 8);
        assert_eq!(names(Role::Orchestrator), names(Role::Main));
        for role in [Role::Main, Role::Orchestrator, Role::Worker] {
            for d in TABLE {
                assert_eq!(may_call(role, d.name), Some(names(role).iter().any(|n| n == d.name)));
            }
        }
        assert_eq!(may_call(Role::Main, "bridge_nothing"), None);
    }

    #[test]
    fn every_schema_is_an_object_schema() {
        for t in listed_for(Role::Main).into_iter().chain(listed_for(Role::Worker)) {
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")), "{}", t.name);
        }
    }
}
