//! The roster view (SPEC §8, PRS-2, PRS-3, PRB-2): what this gateway knows of the other
//! gateways' entities. The consumer of `roster.<host>` that keeps it is [`super::consumer`]; the
//! view is apart from it because the hub holds the view (and imports nothing above it).
//!
//! Kept apart from [`super::heartbeats`] (what this gateway sends): this side only receives —
//! it renews and drops entries, refuses a gid claimed by a second host, and answers
//! verification's "does `from` live on `host`".

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::{BatchEntry, PRESENCE_BATCH, PresenceBody};
use crate::envelope::GATEWAY_FROM;

/// One live roster entry.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RosterEntry {
    pub host: String,
    pub gid: String,
    pub role: String,
    pub groups: Vec<String>,
    pub agent_status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiles: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The capabilities a `_gateway` entry declared (PRB-4 reads them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub capabilities: Vec<String>,
    #[serde(skip)]
    pub expires: Instant,
}

/// What applying a heartbeat did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    Upserted,
    Removed,
    /// PRS-3: the gid is live on another host; the claim was refused.
    Conflict {
        holder: String,
    },
}

/// What applying a host-batched heartbeat did (PRB-2).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct BatchApplied {
    /// Entries refused by PRS-3: (gid, the host that holds it).
    pub conflicts: Vec<(String, String)>,
    /// Entities of the host that the batch no longer lists: now `down`.
    pub removed: Vec<String>,
}

/// The union view.
#[derive(Default)]
pub struct Roster {
    /// gid → entry, plus one `_gateway` entry per host under key `_gateway@<host>`.
    pub(crate) entries: Mutex<BTreeMap<String, RosterEntry>>,
    /// gid → (host, `ts` of its signed `down`): what an entity sent before it left still counts
    /// as sent from that host (its last FAILED or ABANDONED may arrive after its `down`).
    departed: Mutex<BTreeMap<String, (String, u64)>>,
}

/// Applies one heartbeat about `gid` from `host` to the locked view (PRS-2, PRS-3).
fn apply_to(
    m: &mut BTreeMap<String, RosterEntry>,
    host: &str,
    gid: &str,
    body: &PresenceBody,
    now: Instant,
) -> Applied {
    let key = slot(host, gid);
    if let Some(existing) = m.get(&key)
        && existing.host != host
        && existing.expires > now
    {
        return Applied::Conflict {
            holder: existing.host.clone(),
        };
    }
    if body.state == "down" {
        m.remove(&key);
        return Applied::Removed;
    }
    m.insert(
        key,
        RosterEntry {
            host: host.to_string(),
            gid: gid.to_string(),
            role: body.role.clone(),
            groups: body.groups.clone(),
            agent_status: body.agent_status.clone(),
            profiles: body.profiles.clone(),
            parent: body.parent.clone(),
            capabilities: body.capabilities.clone().unwrap_or_default(),
            expires: now + Duration::from_millis(body.ttl_ms),
        },
    );
    Applied::Upserted
}

fn slot(host: &str, gid: &str) -> String {
    if gid == GATEWAY_FROM {
        format!("{GATEWAY_FROM}@{host}")
    } else {
        gid.to_string()
    }
}

impl Roster {
    /// Applies a verified heartbeat from `host` about `gid`.
    pub fn apply(&self, host: &str, gid: &str, body: &PresenceBody) -> Applied {
        let Ok(mut m) = self.entries.lock() else {
            return Applied::Removed;
        };
        apply_to(&mut m, host, gid, body, Instant::now())
    }

    /// PRB-2: applies a verified `_gateway` heartbeat of `host` that carries `entities`. The
    /// gateway entry and every listed entry are renewed with the batch's ttl; PRS-3 is judged per
    /// entry (a refused entry leaves the rest applied); an entity of `host` the batch does not
    /// list (or lists as `down`) is removed, since the batch is the host's whole list. All under
    /// one lock, so no reader sees half a batch.
    pub fn apply_batch(&self, host: &str, body: &PresenceBody, listed: &[BatchEntry]) -> BatchApplied {
        let mut out = BatchApplied::default();
        let Ok(mut m) = self.entries.lock() else {
            return out;
        };
        let now = Instant::now();
        apply_to(&mut m, host, GATEWAY_FROM, body, now);
        let mut live = std::collections::BTreeSet::new();
        for e in listed {
            if e.gid == GATEWAY_FROM || e.gid.is_empty() || e.state != "up" {
                continue;
            }
            match apply_to(&mut m, host, &e.gid, &e.as_body(body.ttl_ms), now) {
                Applied::Conflict { holder } => out.conflicts.push((e.gid.clone(), holder)),
                _ => {
                    live.insert(e.gid.as_str());
                }
            }
        }
        m.retain(|_, entry| {
            let gone = entry.host == host && entry.gid != GATEWAY_FROM && !live.contains(entry.gid.as_str());
            if gone {
                out.removed.push(entry.gid.clone());
            }
            !gone
        });
        out
    }

    /// PRB-4: whether a live `_gateway` entry of a host other than `own` lacks `presence-batch`
    /// (an old gateway that still needs per-entity heartbeats). An entry lives for its `ttlMs`
    /// (3H), so "none seen for 3H" is "none live".
    pub fn old_gateway_live(&self, own: &str) -> bool {
        let Ok(m) = self.entries.lock() else {
            return true;
        };
        let now = Instant::now();
        m.values().any(|e| {
            e.gid == GATEWAY_FROM
                && e.host != own
                && e.expires > now
                && !e.capabilities.iter().any(|c| c == PRESENCE_BATCH)
        })
    }

    /// SIG-2 step 2: does `gid` live on `host` right now? (`_gateway` always does.)
    pub fn lives_on(&self, gid: &str, host: &str) -> bool {
        if gid == GATEWAY_FROM {
            return true;
        }
        let Ok(m) = self.entries.lock() else {
            return false;
        };
        m.get(gid).is_some_and(|e| e.host == host && e.expires > Instant::now())
    }

    /// Records a signed `down` of `gid` on `host`, published at `ts`.
    pub fn record_departure(&self, host: &str, gid: &str, ts: u64) {
        if let Ok(mut d) = self.departed.lock() {
            let horizon = ts.saturating_sub(3_600_000);
            d.retain(|_, (_, t)| *t >= horizon);
            d.insert(gid.to_string(), (host.to_string(), ts));
        }
    }

    /// SIG-2 step 2 for a message published at `ts`: `gid` lives on `host`, or lived there until a
    /// `down` published after `ts`.
    pub fn lived_on(&self, gid: &str, host: &str, ts: u64) -> bool {
        self.lives_on(gid, host)
            || self
                .departed
                .lock()
                .map(|d| d.get(gid).is_some_and(|(h, down)| h == host && ts <= *down))
                .unwrap_or(false)
    }

    /// The host a gid lives on, if live.
    pub fn host_of(&self, gid: &str) -> Option<String> {
        let m = self.entries.lock().ok()?;
        m.get(gid)
            .filter(|e| e.expires > Instant::now())
            .map(|e| e.host.clone())
    }

    /// All live entries, sorted by host then gid.
    pub fn snapshot(&self) -> Vec<RosterEntry> {
        let Ok(mut m) = self.entries.lock() else {
            return Vec::new();
        };
        let now = Instant::now();
        m.retain(|_, e| e.expires > now);
        let mut v: Vec<RosterEntry> = m.values().cloned().collect();
        v.sort_by(|a, b| (&a.host, &a.gid).cmp(&(&b.host, &b.gid)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(ttl: u64) -> PresenceBody {
        PresenceBody {
            state: "up".into(),
            role: "worker".into(),
            groups: vec![],
            agent_status: "idle".into(),
            ttl_ms: ttl,
            profiles: None,
            parent: None,
            capabilities: None,
            entities: None,
            cert: None,
        }
    }

    #[test]
    fn a_live_claim_wins_over_a_second_host() {
        let r = Roster::default();
        assert_eq!(r.apply("a", "g", &up(60_000)), Applied::Upserted);
        assert_eq!(r.apply("b", "g", &up(60_000)), Applied::Conflict { holder: "a".into() });
        assert!(r.lives_on("g", "a"));
        assert!(!r.lives_on("g", "b"));
        assert!(r.lives_on(GATEWAY_FROM, "anything"));
    }

    #[test]
    fn down_and_ttl_remove_entries() {
        let r = Roster::default();
        r.apply("a", "g", &up(60_000));
        let mut down = up(60_000);
        down.state = "down".into();
        assert_eq!(r.apply("a", "g", &down), Applied::Removed);
        assert!(!r.lives_on("g", "a"));
        r.apply("a", "h", &up(0));
        assert!(r.snapshot().is_empty(), "an entry past its ttl is gone");
    }

    #[test]
    fn what_an_entity_sent_before_its_down_still_counts() {
        let r = Roster::default();
        r.apply("b", "g", &up(60_000));
        let mut down = up(60_000);
        down.state = "down".into();
        r.apply("b", "g", &down);
        r.record_departure("b", "g", 1_000);
        assert!(r.lived_on("g", "b", 999), "sent before the down");
        assert!(!r.lived_on("g", "b", 1_001), "sent after the down");
        assert!(!r.lived_on("g", "c", 999), "never lived on c");
    }

    fn entry(gid: &str) -> BatchEntry {
        BatchEntry {
            gid: gid.into(),
            state: "up".into(),
            role: "worker".into(),
            groups: vec![],
            agent_status: "idle".into(),
            parent: None,
        }
    }

    fn batch(ttl: u64) -> PresenceBody {
        let mut b = up(ttl);
        b.role = "gateway".into();
        b.capabilities = Some(vec![PRESENCE_BATCH.into()]);
        b
    }

    #[test]
    fn a_batch_renews_its_entries_and_drops_what_it_no_longer_lists() {
        let r = Roster::default();
        let out = r.apply_batch("p", &batch(60_000), &[entry("e1"), entry("e2")]);
        assert_eq!(out, BatchApplied::default());
        assert!(r.lives_on("e1", "p") && r.lives_on("e2", "p"));
        let out = r.apply_batch("p", &batch(60_000), &[entry("e1")]);
        assert_eq!(out.removed, vec!["e2".to_string()]);
        assert!(r.lives_on("e1", "p"));
        assert!(!r.lives_on("e2", "p"), "missing from the latest batch is down");
        let out = r.apply_batch("p", &batch(60_000), &[]);
        assert_eq!(
            out.removed,
            vec!["e1".to_string()],
            "an empty list is a host with none left"
        );
        assert!(r.snapshot().iter().any(|e| e.gid == GATEWAY_FROM && e.host == "p"));
    }

    #[test]
    fn a_conflicting_entry_is_refused_and_the_rest_applies() {
        let r = Roster::default();
        r.apply("a", "g", &up(60_000));
        let out = r.apply_batch("p", &batch(60_000), &[entry("g"), entry("x")]);
        assert_eq!(out.conflicts, vec![("g".to_string(), "a".to_string())]);
        assert!(r.lives_on("g", "a") && !r.lives_on("g", "p"));
        assert!(r.lives_on("x", "p"));
        assert!(
            r.lives_on("g", "a"),
            "another host's entity is never dropped by p's batch"
        );
    }

    #[test]
    fn an_old_gateway_is_one_without_the_capability() {
        let r = Roster::default();
        r.apply_batch("p", &batch(60_000), &[]);
        assert!(!r.old_gateway_live("me"));
        let mut old = up(60_000);
        old.role = "gateway".into();
        r.apply("o", GATEWAY_FROM, &old);
        assert!(r.old_gateway_live("me"));
        assert!(!r.old_gateway_live("o"), "our own entry never counts");
        r.apply("o", GATEWAY_FROM, &up(0));
        assert!(!r.old_gateway_live("me"), "past its ttl it is gone");
    }
}
