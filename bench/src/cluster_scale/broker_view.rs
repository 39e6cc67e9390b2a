//! What the cluster says about itself, read for `--scale`: each node's memory (and its own
//! breakdown), Erlang processes and data dir (`/api/nodes`), every quorum queue's leader and
//! members (`/api/queues`), the rebalance (`POST /api/rebalance/queues`), and the data dirs' size
//! on disk.
//!
//! Why its own client: the suite's management client answers typed, per-scenario questions; this
//! one reads ten thousand queues at once (`columns=` to keep the answer small) and fields the
//! suite never needs, asking the next node when one is down (a node killed on purpose).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};

use serde_json::Value;

use crate::cluster_scale::settings::{InboxType, Leaders, NodeFigures};
use crate::rig::stats::process_memory;
use fleet_conformance::broker::Broker;
use fleet_conformance::broker::url::percent_encode;

/// A reader of the cluster's management APIs (every node's, asked in turn).
pub(crate) struct BrokerView {
    client: reqwest::Client,
    /// Every node's API base, by node index.
    bases: Vec<String>,
    user: String,
    password: String,
    /// The nodes are containers (their data dirs are read with `docker exec`).
    containers: bool,
    /// The node that answered last: asked first next time, so a killed node (whose port a
    /// container's forwarding may still accept, answering nothing until the client's timeout) is
    /// asked only when the live ones fail.
    preferred: AtomicUsize,
    /// The inboxes' queue type (the management API's `type`).
    inbox_type: InboxType,
}

/// One quorum queue's leader and members as the management API lists them: the queue record's
/// `node` (a new leader writes it when elected) and the `leader` of the queue's statistics
/// (emitted once per quorum tick), whichever names a live, online node.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct QueueView {
    pub name: String,
    pub node: Option<String>,
    pub stats_leader: Option<String>,
    pub members: Vec<String>,
    pub online: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

fn number(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn name_at(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
}

impl QueueView {
    pub(crate) fn from_json(v: &Value) -> QueueView {
        QueueView {
            name: name_at(v, "name").unwrap_or_default(),
            node: name_at(v, "node"),
            stats_leader: name_at(v, "leader"),
            members: strings(v, "members"),
            online: strings(v, "online"),
        }
    }

    /// The leader: the first of the record's node and the statistics' leader that is not `dead`
    /// and is online (when the list is given).
    pub(crate) fn leader(&self, dead: Option<&str>) -> Option<&str> {
        [&self.node, &self.stats_leader]
            .into_iter()
            .flatten()
            .map(String::as_str)
            .find(|l| dead != Some(*l) && (self.online.is_empty() || self.online.iter().any(|o| o == l)))
    }

    /// Led by a live node.
    pub(crate) fn led(&self, dead: Option<&str>) -> bool {
        self.leader(dead).is_some()
    }

    /// Every member online.
    pub(crate) fn whole(&self) -> bool {
        !self.members.is_empty() && self.members.iter().all(|m| self.online.contains(m))
    }
}

/// Leaders per node (`names` by index) of `queues`, counting a queue not [`QueueView::led`] as
/// `none`.
pub(crate) fn leaders(queues: &[QueueView], names: &[String], dead: Option<&str>) -> Leaders {
    let mut out = Leaders {
        per_node: vec![0; names.len()],
        none: 0,
    };
    for q in queues {
        let at = q.leader(dead).and_then(|l| names.iter().position(|n| n == l));
        match at {
            Some(i) => out.per_node[i] += 1,
            None => out.none += 1,
        }
    }
    out
}

/// A node's memory breakdown: the numeric categories of `memory` (`total` and `strategy` left out).
pub(crate) fn breakdown(v: &Value) -> BTreeMap<String, u64> {
    v.get("memory")
        .and_then(Value::as_object)
        .map(|m| m.iter().filter_map(|(k, x)| Some((k.clone(), x.as_u64()?))).collect())
        .unwrap_or_default()
}

/// Bytes allocated on disk under `dir` (what `du` counts), following no links.
pub(crate) fn dir_bytes(dir: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let listed = match std::fs::read_dir(&d) {
            Ok(l) => l,
            Err(e) if d == dir => return Err(e),
            // A dir deleted while we walk (a queue's segments compacted): skip it.
            Err(_) => continue,
        };
        for entry in listed {
            let Ok(entry) = entry else { continue };
            let meta = match entry.path().symlink_metadata() {
                Ok(m) => m,
                Err(_) => continue,
            };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    Ok(total)
}

impl BrokerView {
    /// A reader of `broker`'s nodes' APIs, as its admin.
    pub(crate) fn of(broker: &Broker, inbox_type: InboxType) -> anyhow::Result<BrokerView> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .connect_timeout(Duration::from_secs(3))
            .timeout(Duration::from_secs(120))
            .build()
            .context("building the management API client")?;
        let first = broker.node_endpoint(0);
        Ok(BrokerView {
            client,
            bases: (0..broker.node_count())
                .map(|i| broker.node_endpoint(i).http_base.trim_end_matches('/').to_string())
                .collect(),
            user: first.user.clone(),
            password: first.password.clone(),
            containers: broker.spec().label().starts_with("container:"),
            preferred: AtomicUsize::new(0),
            inbox_type,
        })
    }

    /// Where the disk figures come from, in words.
    pub(crate) fn disk_source(&self) -> &'static str {
        if self.containers {
            "each node's data dir (management API db_dir), `du -sk` inside its container"
        } else {
            "each node's data dir (management API db_dir), blocks allocated, walked on this host"
        }
    }

    /// `GET path` from the first node that answers it.
    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        // Every node's failure is kept: the last alone (a killed node's refusal) hides why the
        // live ones failed.
        let mut failed: Vec<String> = Vec::new();
        let first = self.preferred.load(Ordering::Relaxed);
        for i in (0..self.bases.len()).map(|k| (first + k) % self.bases.len()) {
            let url = format!("{}{path}", self.bases[i]);
            let sent = self
                .client
                .get(&url)
                .basic_auth(&self.user, Some(&self.password))
                .send()
                .await;
            match sent {
                Ok(r) if r.status().is_success() => {
                    self.preferred.store(i, Ordering::Relaxed);
                    return r.json().await.with_context(|| format!("reading GET {url}"));
                }
                Ok(r) => failed.push(format!("GET {url} answered {}", r.status())),
                Err(e) => failed.push(format!("GET {url}: {e}")),
            }
        }
        if failed.is_empty() {
            return Err(anyhow!("no management API to ask"));
        }
        Err(anyhow!("{}", failed.join("; ")))
    }

    /// Every node's figures (the nodes that run), with its data dir's size and its RSS.
    pub(crate) async fn nodes(&self, broker: &Broker) -> anyhow::Result<Vec<NodeFigures>> {
        let listed = self.get("/api/nodes").await?;
        let listed = listed.as_array().ok_or_else(|| anyhow!("/api/nodes is not a list"))?;
        let mut out = Vec::new();
        for n in listed {
            let name = n.get("name").and_then(Value::as_str).unwrap_or_default().to_string();
            if !n.get("running").and_then(Value::as_bool).unwrap_or(false) {
                continue;
            }
            let detail = self
                .get(&format!("/api/nodes/{}?memory=true", percent_encode(&name)))
                .await
                .with_context(|| format!("node {name}'s memory breakdown"))?;
            let index = broker.node_index(&name).await;
            let db_dir = detail.get("db_dir").and_then(Value::as_str).map(str::to_string);
            let disk_bytes = match (&db_dir, index) {
                (Some(dir), Some(i)) => self.disk(i, dir).await,
                _ => None,
            };
            let rss_kib = if self.containers {
                None
            } else {
                detail
                    .get("os_pid")
                    .and_then(|p| {
                        p.as_str()
                            .and_then(|s| s.parse::<u32>().ok())
                            .or(p.as_u64().map(|x| x as u32))
                    })
                    .and_then(process_memory)
                    .map(|(rss, _, _)| rss)
            };
            out.push(NodeFigures {
                name,
                index,
                mem_used: number(&detail, "mem_used"),
                mem_limit: number(&detail, "mem_limit"),
                mem_alarm: detail.get("mem_alarm").and_then(Value::as_bool).unwrap_or(false),
                proc_used: number(&detail, "proc_used"),
                proc_total: number(&detail, "proc_total"),
                breakdown: breakdown(&detail),
                disk_bytes,
                rss_kib,
            });
        }
        out.sort_by_key(|n| n.index);
        Ok(out)
    }

    /// Node `index`'s data dir `dir`, bytes on disk (`None`, said why, when it cannot be read).
    async fn disk(&self, index: usize, dir: &str) -> Option<u64> {
        if !self.containers {
            let dir = dir.to_string();
            let walked = tokio::task::spawn_blocking(move || dir_bytes(Path::new(&dir))).await;
            return match walked {
                Ok(Ok(b)) => Some(b),
                Ok(Err(e)) => {
                    eprintln!("fleet-bench: scale: cannot size node {index}'s data dir: {e}");
                    None
                }
                Err(_) => None,
            };
        }
        let port = self.bases.get(index)?.rsplit(':').next()?.to_string();
        let ps = tokio::process::Command::new("docker")
            .args(["ps", "--filter", &format!("publish={port}"), "--format", "{{.Names}}"])
            .output()
            .await
            .ok()?;
        let name = String::from_utf8_lossy(&ps.stdout).lines().next()?.trim().to_string();
        let du = tokio::process::Command::new("docker")
            .args(["exec", &name, "du", "-sk", dir])
            .output()
            .await
            .ok()?;
        let kib: u64 = String::from_utf8_lossy(&du.stdout)
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(kib * 1024)
    }

    /// Every queue of `vhost` of the inboxes' type with its leader and members (a classic queue:
    /// its home node as leader, no members).
    pub(crate) async fn quorum_queues(&self, vhost: &str) -> anyhow::Result<Vec<QueueView>> {
        let path = format!(
            "/api/queues/{}?columns=name,type,node,leader,members,online",
            percent_encode(vhost)
        );
        let v = self.get(&path).await?;
        let list = v.as_array().ok_or_else(|| anyhow!("{path} is not a list"))?;
        Ok(list
            .iter()
            .filter(|q| {
                q.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| self.inbox_type.lists(t))
            })
            .map(QueueView::from_json)
            .collect())
    }

    /// A queue's messages as the management API counts them: (ready, unacknowledged, consumers).
    pub(crate) async fn depth(&self, vhost: &str, queue: &str) -> anyhow::Result<(u64, u64, u64)> {
        let path = format!(
            "/api/queues/{}/{}?columns=messages_ready,messages_unacknowledged,consumers",
            percent_encode(vhost),
            percent_encode(queue)
        );
        let v = self.get(&path).await?;
        Ok((
            number(&v, "messages_ready"),
            number(&v, "messages_unacknowledged"),
            number(&v, "consumers"),
        ))
    }

    /// The `msgId`s of the messages in `bridge.dlq` of `vhost` that hold `needle` in their body
    /// (looked at up to `max` + 100 of them, requeued: the look takes nothing away; a body that is
    /// not an envelope counts with an empty id).
    pub(crate) async fn dead_lettered(&self, vhost: &str, needle: &str, max: usize) -> anyhow::Result<Vec<String>> {
        let first = self.preferred.load(Ordering::Relaxed) % self.bases.len().max(1);
        let base = self
            .bases
            .get(first)
            .ok_or_else(|| anyhow!("no management API to ask"))?;
        let url = format!("{base}/api/queues/{}/bridge.dlq/get", percent_encode(vhost));
        let body = serde_json::json!({
            "count": max + 100,
            "ackmode": "ack_requeue_true",
            "encoding": "auto",
            "truncate": 100_000,
        });
        let got: Value = self
            .client
            .post(&url)
            .basic_auth(&self.user, Some(&self.password))
            .json(&body)
            .send()
            .await
            .with_context(|| format!("POST {url}"))?
            .error_for_status()
            .with_context(|| format!("POST {url}"))?
            .json()
            .await
            .with_context(|| format!("reading POST {url}"))?;
        let list = got.as_array().ok_or_else(|| anyhow!("POST {url} answered no list"))?;
        Ok(list
            .iter()
            .filter_map(|m| m.get("payload").and_then(Value::as_str))
            .filter(|p| p.contains(needle))
            .map(|p| {
                serde_json::from_str::<Value>(p)
                    .ok()
                    .and_then(|v| v.get("msgId").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_default()
            })
            .collect())
    }

    /// `POST /api/rebalance/queues` (asynchronous: the leaders move afterwards).
    pub(crate) async fn rebalance(&self) -> anyhow::Result<()> {
        let mut last = None;
        for base in &self.bases {
            let url = format!("{base}/api/rebalance/queues");
            match self
                .client
                .post(&url)
                .basic_auth(&self.user, Some(&self.password))
                .send()
                .await
            {
                Ok(r) if r.status().is_success() => return Ok(()),
                Ok(r) => last = Some(anyhow!("POST {url} answered {}", r.status())),
                Err(e) => last = Some(anyhow!("POST {url}: {e}")),
            }
        }
        match last {
            Some(e) => Err(e),
            None => bail!("no management API to ask"),
        }
    }

    /// Every node's name, by index (asked of each node's own `/api/overview`).
    pub(crate) async fn names(&self) -> anyhow::Result<Vec<String>> {
        let mut out = Vec::new();
        for base in &self.bases {
            let url = format!("{base}/api/overview");
            let v: Value = self
                .client
                .get(&url)
                .basic_auth(&self.user, Some(&self.password))
                .send()
                .await
                .with_context(|| format!("GET {url}"))?
                .json()
                .await
                .with_context(|| format!("reading GET {url}"))?;
            let name = v
                .get("node")
                .and_then(Value::as_str)
                .ok_or_else(|| anyhow!("GET {url} names no node"))?;
            out.push(name.to_string());
        }
        Ok(out)
    }
}

/// The machine's available memory (`/proc/meminfo` MemAvailable), MiB.
pub(crate) fn available_mib() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}
