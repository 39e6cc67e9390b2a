//! From what a scenario recorded to lifelines and arrows: who sent each envelope and to whom.
//!
//! Why it is its own file: the attribution is the chart's one judgement call, and it is kept pure
//! (no broker, no herdr) so it is unit-tested. A publish is the sender gateway's when it came on
//! a connection that gateway opened (the recorder notes them as each gateway starts), the probe's
//! when it came on any other connection that also published as a host no gateway runs (the
//! probe's own `probe`, a forger's), and otherwise the gateway of its `host` header. Its receiver
//! is the gateway of the entity its key names (`bridge.msg`), of the host (`bridge.control`), the
//! broker for what fans out (presence, broadcasts) or was routed nowhere, and the probe for a gid
//! no gateway of the scenario holds.

use std::collections::{BTreeMap, BTreeSet};

use super::recorder::{Source, WireEvent};
use super::{Event, EventKind, Lane, LaneKind};

/// The lane ids.
pub const PROBE: &str = "probe";
pub const BROKER: &str = "broker";

/// The gateway lane of `host`.
pub fn gateway_lane(host: &str) -> String {
    format!("gw:{host}")
}

/// The lane of `pane` on `host`.
pub fn pane_lane(host: &str, pane: &str) -> String {
    format!("pane:{host}:{pane}")
}

/// Who is who in the scenario.
#[derive(Debug, Clone, Default)]
pub struct Cast {
    /// The hosts whose gateways ran, in order.
    pub hosts: Vec<String>,
    pub entities: Vec<Entity>,
    /// Connection name → host (the recorder's [`super::recorder::Recording`]).
    pub gateway_connections: BTreeMap<String, String>,
}

#[derive(Debug, Clone)]
pub struct Entity {
    /// The feature's name for it (`w1`).
    pub name: String,
    pub host: String,
    pub gid: String,
    pub pane: String,
}

/// One `pane.send_input` the fake herdr received.
#[derive(Debug, Clone)]
pub struct Input {
    pub at_ms: u64,
    pub host: String,
    pub pane: String,
    pub text: String,
    pub keys: Vec<String>,
    /// What became of it (`Submitted`, `RanInShell`, …), when accepted.
    pub outcome: Option<String>,
    /// The error code, when refused.
    pub refused: Option<String>,
}

/// The lanes and events of a scenario, in time order.
pub fn chart(cast: &Cast, wire: &[WireEvent], inputs: &[Input]) -> (Vec<Lane>, Vec<Event>) {
    let names: BTreeMap<&str, &Entity> = cast.entities.iter().map(|e| (e.gid.as_str(), e)).collect();
    let hosts: BTreeSet<&str> = cast.hosts.iter().map(String::as_str).collect();
    // Connections that published as a host no gateway of the scenario runs: the suite's own.
    let probe_conns: BTreeSet<&str> = wire
        .iter()
        .filter(|w| w.header("host").is_some_and(|h| !hosts.contains(h)))
        .filter_map(|w| w.connection.as_deref())
        .filter(|c| !cast.gateway_connections.contains_key(*c))
        .collect();
    let mut events = Vec::new();
    let mut last_presence: BTreeMap<(String, String), String> = BTreeMap::new();
    for w in wire {
        let kind = w.header("kind").unwrap_or("?");
        let msg_id = w.header("msgId").map(|m| m.chars().take(8).collect::<String>());
        let name = |gid: &str| match names.get(gid) {
            Some(e) => e.name.clone(),
            None if gid == "_gateway" => "_gateway".into(),
            None => gid.chars().take(8).collect(),
        };
        let from_name = w.header("from").map(name).unwrap_or_else(|| "?".into());
        if w.source == Source::DeadLetter {
            let (reason, queue) = w.death.clone().unwrap_or_default();
            events.push(Event {
                at_ms: w.at_ms,
                kind: EventKind::DeadLetter,
                from: queue_owner(&queue, &names, &hosts).unwrap_or_else(|| BROKER.into()),
                to: BROKER.into(),
                label: format!(
                    "☠ {kind} {from_name} ({})",
                    if reason.is_empty() { "dead letter" } else { &reason }
                ),
                msg_id,
                detail: Some(format!("dead-lettered from {queue}")),
            });
            continue;
        }
        let from = match w.connection.as_deref() {
            Some(c) if cast.gateway_connections.contains_key(c) => gateway_lane(&cast.gateway_connections[c]),
            Some(c) if probe_conns.contains(c) => PROBE.into(),
            _ => match w.header("host") {
                Some(h) if hosts.contains(h) => gateway_lane(h),
                _ => PROBE.into(),
            },
        };
        let routed = w.routed.as_ref().map(Vec::len);
        let key = w.routing_key.as_str();
        let to_lane = match w.exchange.as_str() {
            "bridge.msg" | "bridge.delay" if !key.starts_with("broadcast.") => match names.get(key) {
                Some(e) => gateway_lane(&e.host),
                None => PROBE.into(),
            },
            "bridge.control" if hosts.contains(key) => gateway_lane(key),
            "" => queue_owner(key, &names, &hosts).unwrap_or_else(|| BROKER.into()),
            _ => BROKER.into(),
        };
        let (kind_of, to, label) = if routed == Some(0) {
            (
                EventKind::Unroutable,
                BROKER.to_string(),
                format!("✕ {kind} {from_name}→{} no route", to_name(w, &names)),
            )
        } else if kind == "PRESENCE" {
            let state = w.presence.clone().unwrap_or_default();
            let who = (w.header("host").unwrap_or("").to_string(), from_name.clone());
            let repeat = last_presence.insert(who, state.clone()).as_deref() == Some(state.as_str());
            (
                if repeat {
                    EventKind::Heartbeat
                } else {
                    EventKind::Envelope
                },
                BROKER.to_string(),
                format!("PRESENCE {from_name} {state}"),
            )
        } else {
            let reason = w.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default();
            (
                EventKind::Envelope,
                to_lane,
                format!("{kind} {from_name}→{}{reason}", to_name(w, &names)),
            )
        };
        let mut detail = format!(
            "{} · {}",
            if w.exchange.is_empty() {
                "(default)"
            } else {
                &w.exchange
            },
            key
        );
        if let Some(t) = w.header("traceId") {
            detail.push_str(&format!(" · traceId {}", t.chars().take(8).collect::<String>()));
        }
        if let Some(n) = routed {
            detail.push_str(&format!(" · routed to {n} queue(s)"));
        }
        if let Some(r) = &w.reason {
            detail.push_str(&format!(" · reason {r}"));
        }
        events.push(Event {
            at_ms: w.at_ms,
            kind: kind_of,
            from,
            to,
            label,
            msg_id,
            detail: Some(detail),
        });
    }
    for i in inputs {
        let typed: String = i.text.chars().take(32).collect();
        let more = if i.text.chars().count() > 32 { "…" } else { "" };
        let keys = if i.keys.is_empty() {
            String::new()
        } else {
            format!(" +{}", i.keys.join("+"))
        };
        let (kind, label) = match (&i.refused, &i.outcome) {
            (Some(code), _) => (EventKind::InjectRefused, format!("✕ send_input{keys} refused: {code}")),
            (None, outcome) => (
                EventKind::Inject,
                format!(
                    "inject \"{typed}{more}\"{keys}{}",
                    outcome.as_deref().map(|o| format!(" → {o}")).unwrap_or_default()
                ),
            ),
        };
        events.push(Event {
            at_ms: i.at_ms,
            kind,
            from: gateway_lane(&i.host),
            to: pane_lane(&i.host, &i.pane),
            label: label.replace(['\n', '\r'], "⏎"),
            msg_id: None,
            detail: Some(format!("pane.send_input on {}'s herdr, pane {}", i.host, i.pane)),
        });
    }
    events.sort_by_key(|e| e.at_ms);
    (lanes(cast, &events), events)
}

/// The entity (or host) a message's key names, for its label.
fn to_name(w: &WireEvent, names: &BTreeMap<&str, &Entity>) -> String {
    let key = w.routing_key.as_str();
    match names.get(key) {
        Some(e) => e.name.clone(),
        None if key.len() > 12 && !key.starts_with("broadcast.") => key.chars().take(8).collect(),
        None => key.to_string(),
    }
}

/// The gateway lane of the one who consumes `queue` (`agent.<gid>.inbox.v2`, `control.<h>`,
/// `roster.<h>`).
fn queue_owner(queue: &str, names: &BTreeMap<&str, &Entity>, hosts: &BTreeSet<&str>) -> Option<String> {
    if let Some(gid) = queue.strip_prefix("agent.").and_then(|r| r.strip_suffix(".inbox.v2")) {
        return names.get(gid).map(|e| gateway_lane(&e.host));
    }
    let host = queue
        .strip_prefix("control.")
        .or_else(|| queue.strip_prefix("roster."))?;
    hosts.contains(host).then(|| gateway_lane(host))
}

/// Probe and broker (when used), every gateway, then the panes that were typed into.
fn lanes(cast: &Cast, events: &[Event]) -> Vec<Lane> {
    let used = |id: &str| events.iter().any(|e| e.from == id || e.to == id);
    let mut lanes = Vec::new();
    if used(PROBE) {
        lanes.push(Lane {
            id: PROBE.into(),
            label: "probe (suite)".into(),
            kind: LaneKind::Probe,
        });
    }
    if used(BROKER) {
        lanes.push(Lane {
            id: BROKER.into(),
            label: "broker".into(),
            kind: LaneKind::Broker,
        });
    }
    let mut hosts: Vec<&str> = cast.hosts.iter().map(String::as_str).collect();
    for e in events {
        for id in [&e.from, &e.to] {
            if let Some(h) = id.strip_prefix("gw:")
                && !hosts.contains(&h)
            {
                hosts.push(h);
            }
        }
    }
    for h in &hosts {
        lanes.push(Lane {
            id: gateway_lane(h),
            label: format!("gateway {h}"),
            kind: LaneKind::Gateway,
        });
    }
    let mut panes: Vec<&str> = Vec::new();
    for e in events {
        if e.to.starts_with("pane:") && !panes.contains(&e.to.as_str()) {
            panes.push(&e.to);
        }
    }
    for p in panes {
        let mut parts = p.splitn(3, ':').skip(1);
        let (host, pane) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let who = cast
            .entities
            .iter()
            .find(|e| e.host == host && e.pane == pane)
            .map(|e| e.name.clone())
            .unwrap_or_else(|| format!("pane {pane}"));
        lanes.push(Lane {
            id: p.to_string(),
            label: format!("{who} @{host} ({pane})"),
            kind: LaneKind::Pane,
        });
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(at_ms: u64, conn: &str, exchange: &str, key: &str, h: &[(&str, &str)], routed: usize) -> WireEvent {
        WireEvent {
            at_ms,
            source: Source::Publish,
            exchange: exchange.into(),
            routing_key: key.into(),
            connection: Some(conn.into()),
            routed: Some((0..routed).map(|i| format!("q{i}")).collect()),
            headers: h.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            death: None,
            presence: None,
            reason: None,
        }
    }

    fn cast() -> Cast {
        let e = |name: &str, host: &str, gid: &str| Entity {
            name: name.into(),
            host: host.into(),
            gid: gid.into(),
            pane: format!("w1:p{}", name.len()),
        };
        Cast {
            hosts: vec!["a".into(), "b".into()],
            entities: vec![e("main", "a", "gid-main"), e("w1", "b", "gid-w1")],
            gateway_connections: [("conn-a".to_string(), "a".to_string())].into(),
        }
    }

    /// Issue 64: a FAILED's row and its hover name the reason — the field that was wrong when a
    /// gateway said `busy` where `stopped` was due.
    #[test]
    fn a_failed_shows_its_reason_in_the_row_and_the_hover() {
        let mut failed = publish(
            5,
            "conn-b",
            "bridge.msg",
            "gid-main",
            &[("kind", "FAILED"), ("from", "gid-w1"), ("host", "b"), ("msgId", "m1")],
            1,
        );
        failed.reason = Some("stopped".into());
        let (_, events) = chart(&cast(), &[failed], &[]);
        assert_eq!(events[0].label, "FAILED w1→main (stopped)");
        assert!(
            events[0]
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("reason stopped")),
            "{events:?}"
        );
    }

    #[test]
    fn senders_and_receivers_are_the_gateways_the_probe_and_the_broker() {
        let wire = vec![
            publish(
                10,
                "conn-a",
                "bridge.msg",
                "gid-w1",
                &[
                    ("kind", "SEND"),
                    ("from", "gid-main"),
                    ("host", "a"),
                    ("msgId", "0123456789"),
                ],
                1,
            ),
            // b's connection was not noted: its host header says whose it is.
            publish(
                20,
                "conn-b",
                "bridge.msg",
                "gid-main",
                &[("kind", "INJECTED"), ("from", "gid-w1"), ("host", "b")],
                1,
            ),
            // The probe's connection: it also published as host "probe", so its forgery is its own.
            publish(
                30,
                "conn-p",
                "bridge.roster",
                "roster.probe.x",
                &[("kind", "PRESENCE"), ("from", "x"), ("host", "probe")],
                2,
            ),
            publish(
                40,
                "conn-p",
                "bridge.msg",
                "gid-w1",
                &[("kind", "SEND"), ("from", "gid-main"), ("host", "a")],
                1,
            ),
            publish(
                50,
                "conn-a",
                "bridge.msg",
                "nobody-at-all",
                &[("kind", "SEND"), ("from", "gid-main"), ("host", "a")],
                0,
            ),
        ];
        let (lanes, events) = chart(&cast(), &wire, &[]);
        let ends: Vec<(&str, &str)> = events.iter().map(|e| (e.from.as_str(), e.to.as_str())).collect();
        assert_eq!(
            ends,
            [
                ("gw:a", "gw:b"),
                ("gw:b", "gw:a"),
                ("probe", "broker"),
                ("probe", "gw:b"),
                ("gw:a", "broker")
            ]
        );
        assert_eq!(events[0].label, "SEND main→w1");
        assert_eq!(events[0].msg_id.as_deref(), Some("01234567"));
        assert_eq!(events[4].kind, EventKind::Unroutable);
        let ids: Vec<&str> = lanes.iter().map(|l| l.id.as_str()).collect();
        assert_eq!(ids, ["probe", "broker", "gw:a", "gw:b"]);
    }

    #[test]
    fn a_repeated_presence_is_a_heartbeat_and_injects_go_to_their_pane() {
        let mut p = publish(
            10,
            "conn-a",
            "bridge.roster",
            "roster.a.gid-main",
            &[("kind", "PRESENCE"), ("from", "gid-main"), ("host", "a")],
            2,
        );
        p.presence = Some("up/idle".into());
        let mut q = p.clone();
        q.at_ms = 1010;
        let mut r = p.clone();
        r.at_ms = 2010;
        r.presence = Some("up/working".into());
        let input = Input {
            at_ms: 1500,
            host: "b".into(),
            pane: "w1:p2".into(),
            text: "do the thing\n".into(),
            keys: vec!["enter".into()],
            outcome: Some("Submitted".into()),
            refused: None,
        };
        let (lanes, events) = chart(&cast(), &[p, q, r], &[input]);
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                EventKind::Envelope,
                EventKind::Heartbeat,
                EventKind::Inject,
                EventKind::Envelope
            ]
        );
        assert_eq!(events[2].label, "inject \"do the thing⏎\" +enter → Submitted");
        assert_eq!(events[2].to, "pane:b:w1:p2");
        assert_eq!(lanes.last().map(|l| l.label.as_str()), Some("w1 @b (w1:p2)"));
    }
}
