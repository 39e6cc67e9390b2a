//! Readers of what a gateway answers, exactly as `docs/CONTRACT.md` publishes it (SPEC [C-11]).
//!
//! Exists so every step reads a tool result or a local-API body one way, and that way is the
//! written one: a gateway built from SPEC §15 and the contract alone must be read correctly,
//! whichever of the shapes the contract allows it chose. Where SPEC gives a shape (`bridge_poll`
//! returns a list), that shape is accepted as is; the wrapped forms the reference gateway uses
//! (`{"messages": [...]}`) are accepted too, and nothing else: an answer outside the contract is a
//! [`ContractError`] naming the section it breaks, never read as "empty".

use serde_json::Value;

/// An answer that is not in any shape `docs/CONTRACT.md` allows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} answered {answer}, which docs/CONTRACT.md ({section}) does not allow: {expected}")]
pub struct ContractError {
    pub what: &'static str,
    pub section: String,
    pub expected: String,
    /// The answer, shortened.
    pub answer: String,
}

fn broken(what: &'static str, section: &'static str, expected: &'static str, v: &Value) -> ContractError {
    let mut answer = v.to_string();
    if answer.len() > 400 {
        let mut cut = 400;
        while !answer.is_char_boundary(cut) {
            cut -= 1;
        }
        answer.truncate(cut);
        answer.push('…');
    }
    ContractError {
        what,
        section: section.to_string(),
        expected: expected.to_string(),
        answer,
    }
}

/// A list, or an object holding that list under `key`.
fn list_or_wrapped(v: &Value, key: &str) -> Option<Vec<Value>> {
    match v {
        Value::Array(items) => Some(items.clone()),
        Value::Object(o) => o.get(key).and_then(Value::as_array).cloned(),
        _ => None,
    }
}

/// Whether `v` is one message as a tool shows it (an object with a `kind` string).
fn is_message(v: &Value) -> bool {
    v.get("kind").and_then(Value::as_str).is_some()
}

/// `bridge_poll`: the drained messages (CONTRACT "bridge_poll"): a JSON list of messages, or an
/// object whose `messages` is that list. Every item must be a message (a `kind` string).
pub fn poll_messages(v: &Value) -> Result<Vec<Value>, ContractError> {
    const EXPECTED: &str = "a list of messages [{msgId, kind, from, text, …}] or {\"messages\": [...]}";
    let items = list_or_wrapped(v, "messages").ok_or_else(|| broken("bridge_poll", "bridge_poll", EXPECTED, v))?;
    if items.iter().all(is_message) {
        Ok(items)
    } else {
        Err(broken("bridge_poll", "bridge_poll", EXPECTED, v))
    }
}

/// What `bridge_wait` (or a blocking call's waiter) came back with.
#[derive(Debug, Clone, PartialEq)]
pub enum Waited {
    /// The next held message or question.
    Message(Value),
    /// `{"timeout": true}`: nothing arrived in time.
    Timeout,
}

/// `bridge_wait` (CONTRACT "bridge_wait"): the message itself (an object with `kind`), or an
/// object whose `message` is that message, or `{"timeout": true}` (other fields ignored).
pub fn waited(v: &Value) -> Result<Waited, ContractError> {
    const EXPECTED: &str = "the message {msgId, kind, from, text, …}, {\"message\": {...}}, or {\"timeout\": true}";
    if v.get("timeout").and_then(Value::as_bool) == Some(true) {
        return Ok(Waited::Timeout);
    }
    if is_message(v) {
        return Ok(Waited::Message(v.clone()));
    }
    match v.get("message") {
        Some(m) if is_message(m) => Ok(Waited::Message(m.clone())),
        _ => Err(broken("bridge_wait", "bridge_wait", EXPECTED, v)),
    }
}

/// The message `bridge_wait` returned, or an error saying it timed out or broke the contract.
pub fn waited_message(v: &Value) -> anyhow::Result<Value> {
    match waited(v)? {
        Waited::Message(m) => Ok(m),
        Waited::Timeout => anyhow::bail!("bridge_wait timed out ({v}), expected a message"),
    }
}

/// The roster, from `bridge_roster` or `GET /v1/roster` (CONTRACT "roster"): a list of entries,
/// or an object whose `entries` is that list; each entry has `gid` and `host` strings.
pub fn roster_entries(what: &'static str, v: &Value) -> Result<Vec<Value>, ContractError> {
    const EXPECTED: &str = "a list of entries [{gid, host, …}] or {\"entries\": [...]}";
    crate::schemas::check(what, "roster.response", v).map_err(|e| ContractError {
        what,
        section: "roster; fixtures/schemas/contract.schema.json roster.response".to_string(),
        expected: e.problems.join("; "),
        answer: e.answer.clone(),
    })?;
    let items = list_or_wrapped(v, "entries").ok_or_else(|| broken(what, "roster", EXPECTED, v))?;
    let entry = |e: &Value| e.get("gid").is_some_and(Value::is_string) && e.get("host").is_some_and(Value::is_string);
    if items.iter().all(entry) {
        Ok(items)
    } else {
        Err(broken(what, "roster", EXPECTED, v))
    }
}

/// Whether a roster lists `gid` on `host`.
pub fn roster_lists(entries: &[Value], gid: &str, host: &str) -> bool {
    entries.iter().any(|e| e["gid"] == gid && e["host"] == host)
}

/// The text of a `reply` or `question` of a `bridge_send` result (CONTRACT "bridge_send"): the
/// text itself, or an object with a `text` string (the reply message). `None` when absent.
pub fn send_text(v: &Value, field: &str) -> Option<String> {
    match v.get(field)? {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("text").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

/// CONTRACT §5: a log line at `level` — the level's name written in the line as that text
/// (`WARN`, `level=ERROR`, `"level":"WARN"`); `WARNING` counts as `WARN` (Python's logging).
pub fn log_line_at(line: &str, level: LogLevel) -> bool {
    match level {
        LogLevel::Warn => line.contains("WARN") || line.contains("ERROR"),
        LogLevel::Error => line.contains("ERROR"),
    }
}

/// CONTRACT §5: a healthy start logs no line at ERROR. `log` is what the process logged from its
/// start until it was ready (and the broker up, nothing refused); `Err` lists the ERROR lines.
pub fn healthy_start(host: &str, log: &str) -> Result<(), String> {
    let errors: Vec<&str> = log.lines().filter(|l| log_line_at(l, LogLevel::Error)).collect();
    if errors.is_empty() {
        return Ok(());
    }
    Err(format!(
        "gateway {host} logged {} line(s) at ERROR on a healthy start, before it was ready (CONTRACT §5: \
         a healthy start logs none; an ERROR line means a refusal):\n{}",
        errors.len(),
        errors.join("\n")
    ))
}

/// The levels CONTRACT §5 judges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// `WARN` (or `WARNING`) or above.
    Warn,
    /// `ERROR`.
    Error,
}

/// CONTRACT §5, CON-2: the first line of `log` at ERROR that names one of `names` (the gid of the
/// entity the gateway cannot serve, or the name of the queue it could not consume).
pub fn con2_refusal<'a>(log: &'a str, names: &[String]) -> Option<&'a str> {
    log.lines()
        .find(|l| log_line_at(l, LogLevel::Error) && names.iter().any(|n| l.contains(n.as_str())))
}

/// CONTRACT §12: whether a log line names line `n` of the file at `path`, as `line <n>` or
/// `<path>:<n>` (the number not followed by another digit).
pub fn names_file_line(line: &str, path: &str, n: usize) -> bool {
    let ends = |rest: &str| !rest.starts_with(|c: char| c.is_ascii_digit());
    let by_word = line
        .match_indices(&format!("line {n}"))
        .any(|(i, m)| ends(&line[i + m.len()..]));
    let by_colon = line
        .match_indices(&format!("{path}:{n}"))
        .any(|(i, m)| ends(&line[i + m.len()..]));
    by_word || by_colon
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_file_line_is_named_as_line_n_or_path_colon_n() {
        let p = "/t/a/peers.toml";
        assert!(names_file_line("ERROR /t/a/peers.toml: line 3: bad", p, 3));
        assert!(names_file_line("ERROR cannot read /t/a/peers.toml:3:7 expected", p, 3));
        assert!(names_file_line("TOML parse error at line 3, column 5", p, 3));
        assert!(!names_file_line("ERROR /t/a/peers.toml line 31", p, 3));
        assert!(!names_file_line("ERROR /t/a/peers.toml:30", p, 3));
        assert!(!names_file_line("ERROR /t/a/peers.toml", p, 3));
    }

    fn msg(kind: &str, text: &str) -> Value {
        json!({"msgId": "m1", "kind": kind, "from": "g1", "text": text, "traceId": "t1"})
    }

    #[test]
    fn poll_takes_the_spec_list_and_the_wrapped_list() {
        let bare = json!([msg("REPLY", "a"), msg("INJECTED", "")]);
        assert_eq!(poll_messages(&bare).expect("spec shape").len(), 2);
        let wrapped = json!({"messages": [msg("REPLY", "a")]});
        assert_eq!(poll_messages(&wrapped).expect("wrapped").len(), 1);
        assert_eq!(poll_messages(&json!([])).expect("empty"), Vec::<Value>::new());
        assert_eq!(
            poll_messages(&json!({"messages": []})).expect("empty"),
            Vec::<Value>::new()
        );
    }

    #[test]
    fn poll_refuses_what_no_reading_allows_instead_of_reading_it_as_empty() {
        for bad in [
            json!({}),
            json!(null),
            json!({"msgs": []}),
            json!([{"text": "no kind"}]),
            json!("[]"),
        ] {
            let e = poll_messages(&bad).expect_err("outside the contract");
            assert!(e.to_string().contains("docs/CONTRACT.md"), "{e}");
        }
    }

    #[test]
    fn wait_takes_the_message_itself_the_wrapped_one_and_the_timeout() {
        assert_eq!(
            waited(&msg("ASK", "q")).expect("bare"),
            Waited::Message(msg("ASK", "q"))
        );
        assert_eq!(
            waited(&json!({"message": msg("REPLY", "r")})).expect("wrapped"),
            Waited::Message(msg("REPLY", "r"))
        );
        assert_eq!(waited(&json!({"timeout": true})).expect("timeout"), Waited::Timeout);
        assert_eq!(
            waited(&json!({"timeout": true, "message": null})).expect("timeout"),
            Waited::Timeout
        );
        assert!(waited(&json!({"message": null})).is_err());
        assert!(waited(&json!({})).is_err());
        assert!(waited_message(&json!({"timeout": true})).is_err());
    }

    #[test]
    fn rosters_are_lists_of_gid_and_host_however_wrapped() {
        let entries = json!([{"gid": "g1", "host": "a", "role": "main"}, {"gid": "_gateway", "host": "b"}]);
        let bare = roster_entries("GET /v1/roster", &entries).expect("list");
        assert!(roster_lists(&bare, "g1", "a"));
        assert!(!roster_lists(&bare, "g1", "b"));
        let wrapped = roster_entries("bridge_roster", &json!({"entries": entries})).expect("wrapped");
        assert_eq!(wrapped, bare);
        assert!(roster_entries("bridge_roster", &json!([{"gid": "g1"}])).is_err());
        assert!(roster_entries("bridge_roster", &json!({"hosts": {}})).is_err());
    }

    #[test]
    fn a_reply_is_its_text_or_a_message_holding_it() {
        assert_eq!(send_text(&json!({"reply": "done"}), "reply").as_deref(), Some("done"));
        assert_eq!(
            send_text(&json!({"reply": {"text": "done", "kind": "REPLY"}}), "reply").as_deref(),
            Some("done")
        );
        assert_eq!(send_text(&json!({"status": "injected"}), "reply"), None);
        assert_eq!(
            send_text(&json!({"question": "why?"}), "question").as_deref(),
            Some("why?")
        );
    }

    #[test]
    fn log_levels_as_contract_section_5_reads_them() {
        assert!(log_line_at(
            "2026-12-02T05:00:00Z  WARN rejected msgId=1 check=replay",
            LogLevel::Warn
        ));
        assert!(log_line_at("WARNING:gateway:rejected 1 replay", LogLevel::Warn));
        assert!(log_line_at(r#"{"level":"ERROR","msg":"x"}"#, LogLevel::Warn));
        assert!(!log_line_at("INFO rejected 1 replay", LogLevel::Warn));
        assert!(!log_line_at("WARN refused", LogLevel::Error));
        assert!(log_line_at("level=ERROR refused", LogLevel::Error));
    }

    #[test]
    fn con2_refusal_names_the_entity_or_its_queue() {
        let names = vec!["g-1".to_string(), "roster.b".to_string()];
        let log = "ERROR lapin: channel closed\nINFO g-1 registered\nERROR cannot consume agent.g-1.inbox.v2: held";
        assert_eq!(
            con2_refusal(log, &names),
            Some("ERROR cannot consume agent.g-1.inbox.v2: held")
        );
        assert_eq!(con2_refusal("ERROR lapin: channel closed", &names), None);
        assert_eq!(con2_refusal("WARN roster.b in exclusive use", &names), None);
    }
}
