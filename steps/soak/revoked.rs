//! The operations a revoked host could not complete (SPEC MEM-4, the `revoke-restore` strike):
//! counted failed or unknown, never lost — and only on evidence.
//!
//! Why a file of its own: while a host's certificate is revoked every receiver must reject what
//! it signs (`revoked`, dead-lettered; SIG-6: no FAILED is reported for it). Its gateway cannot
//! know that when the broker confirms the publish, so a reply it sends is answered with a `msgId`
//! (ok, as its caller sees it) and never reaches the main; a brief from a revoked main is rejected
//! by the worker's gateway and ends `inject_timeout` (unknown). A checker that took the caller's
//! word would call such a reply *lost*; one that excused everything near a revocation would hide
//! a gateway that loses messages for other reasons. So an operation is counted **failed** (its
//! outcome marked `→rejected_revoked`) only when both hold:
//!
//! 1. the gateway its message was for logged the rejection of exactly that `msgId` naming the
//!    check `revoked` (CONTRACT §5's rejection line, §12's check name) — a line at WARN or above
//!    holding the `msgId` and the word `revoked`; and
//! 2. the nemesis had revoked the certificate of the host that signed it around then: the
//!    operation ended at most `after` (the reconnect allowance: a message may wait in a queue that
//!    long) before a `revoke-restore` strike on that host began, and began before that strike
//!    ended (the strike ends once the new certificate is installed and every roster lists the host
//!    again: a rejection after that is the gateway's fault, and stays lost).
//!
//! Anything else stays as the caller saw it: an ok reply rejected `revoked` outside such a window
//! is lost (listed apart in the summary, to say why), and every reclassified brief is still judged
//! as failed: had it been injected after all, it is *failed but delivered* (a gateway that logs a
//! rejection must not act on the message, SIG-5, and a SEND is never republished, [C-18]). A
//! reply that the main drained is left as it was: [C-18] lets a gateway republish a REPLY whose
//! confirm was lost, with the same `msgId`, so one copy may have been rejected and another drained
//! — it arrived, and nothing needs excusing. A gateway
//! that refuses to send while its own certificate is revoked (a `failed` answer whose reason is
//! `revoked`) is failed by [`super::history`]'s classification, under the same judgement.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fleet_conformance::contract::{LogLevel, log_line_at};
use serde_json::{Value, json};

use crate::world::FleetWorld;

use super::history::{Op, Seen};
use super::nemesis::{Event, Strike};

/// CONTRACT §5's and §12's check names, as a rejection line names them.
const CHECKS: [&str; 14] = [
    "envelope",
    "signature",
    "from_not_on_host",
    "to_mismatch",
    "not_owner",
    "wrong_kind",
    "expired",
    "future_ts",
    "replay",
    "oversized",
    "presence_conflict",
    "revoked",
    "cert_expired",
    "certificate",
];

/// The rejections each gateway logged: host → msgId (any UUID on the line) → check names on it.
#[derive(Default)]
pub(super) struct Rejections {
    by_host: BTreeMap<String, BTreeMap<String, BTreeSet<&'static str>>>,
}

/// Whether `t` is a UUID in its textual form (8-4-4-4-12 hex digits).
fn is_uuid(t: &str) -> bool {
    t.len() == 36
        && t.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

impl Rejections {
    /// Reads every gateway's log of the scenario.
    pub(super) fn read(w: &FleetWorld) -> Rejections {
        let mut r = Rejections::default();
        for (host, h) in &w.hosts {
            r.add_log(host, &h.gateway.log());
        }
        r
    }

    /// The rejection lines of `host`'s log: lines at WARN or above naming a check; every UUID on
    /// such a line is noted with the checks it names.
    pub(super) fn add_log(&mut self, host: &str, log: &str) {
        let of_host = self.by_host.entry(host.to_string()).or_default();
        for line in log.lines().filter(|l| log_line_at(l, LogLevel::Warn)) {
            let tokens: Vec<&str> = line
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
                .filter(|t| !t.is_empty())
                .collect();
            let mut checks: BTreeSet<&'static str> = CHECKS.into_iter().filter(|c| tokens.contains(c)).collect();
            if checks.contains("revoked") || checks.contains("cert_expired") {
                // The word of their error text ("the certificate is revoked"), not a third check.
                checks.remove("certificate");
            }
            if checks.is_empty() {
                continue;
            }
            for t in tokens.iter().filter(|t| is_uuid(t)) {
                of_host.entry(t.to_ascii_lowercase()).or_default().extend(&checks);
            }
        }
    }

    /// The checks `host`'s gateway named rejecting `msg_id`.
    fn checks(&self, host: &str, msg_id: &str) -> Option<&BTreeSet<&'static str>> {
        self.by_host.get(host)?.get(&msg_id.to_ascii_lowercase())
    }
}

/// The `revoke-restore` strike on `host` that `span` falls in (see the module's rule 2).
fn revoked_then<'a>(events: &'a [Event], host: &str, span: (Duration, Duration), after: Duration) -> Option<&'a Event> {
    events
        .iter()
        .filter(|e| e.strike == Strike::RevokeRestore && e.target == host)
        .find(|e| span.1 + after >= e.at && span.0 <= e.at + e.took)
}

/// Counts as failed the operations whose message a receiver rejected `revoked` while the nemesis
/// had revoked its signer's certificate (the module's rule), in place; returns the summary's
/// `rejectedAsRevoked` (with the rejections of the soak's messages by check, and the `revoked`
/// rejections outside any window, which stay as they were).
/// `drained`: the texts of the replies the main drained.
pub(super) fn reclassify(
    ops: &mut [Op],
    events: &[Event],
    rejections: &Rejections,
    after: Duration,
    drained: &BTreeSet<String>,
) -> Value {
    let mut by_check: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let (mut from_ok, mut from_unknown) = (0usize, 0usize);
    let (mut briefs, mut replies, mut outside) = (Vec::new(), Vec::new(), Vec::new());
    for op in ops.iter_mut() {
        let Some(id) = op.msg_id.clone() else { continue };
        let Some(checks) = rejections.checks(&op.to_host, &id) else {
            continue;
        };
        for c in checks {
            *by_check.entry(c).or_default().entry(op.tool).or_default() += 1;
        }
        if !checks.contains("revoked") || op.seen == Seen::Failed {
            continue;
        }
        if op.tool == "bridge_reply" && drained.contains(&op.text) {
            continue;
        }
        if revoked_then(events, &op.from_host, op.span, after).is_none() {
            outside.push(json!({"tool": op.tool, "text": op.text, "msgId": id, "seen": op.seen.as_str(), "signedOn": op.from_host}));
            continue;
        }
        match op.seen {
            Seen::Ok => from_ok += 1,
            _ => from_unknown += 1,
        }
        if op.tool == "bridge_send" {
            briefs.push(op.text.clone());
        } else {
            replies.push(op.text.clone());
        }
        op.outcome = format!("{}→rejected_revoked", op.outcome);
        op.seen = Seen::Failed;
    }
    json!({
        "count": from_ok + from_unknown,
        "fromOk": from_ok,
        "fromUnknown": from_unknown,
        "briefs": briefs,
        "replies": replies,
        "revokedOutsideAnyRevocationCount": outside.len(),
        "revokedOutsideAnyRevocation": outside.iter().take(100).collect::<Vec<_>>(),
        "rejectionsOfSoakMessagesByCheck": by_check,
        "rule": "failed only when the receiving gateway logged rejecting that msgId naming `revoked` and the signer's host was revoked by the nemesis then (from the reconnect allowance before the strike began until it ended)",
    })
}
