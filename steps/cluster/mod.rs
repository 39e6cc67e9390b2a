//! Steps of the cluster profile (SPEC §16) on a real 3-node RabbitMQ cluster the suite started.
//!
//! Every gateway of a cluster scenario is given the URLs of all nodes (CLU-1) under a login of its
//! own (SEC-2, made by `scripts/provision-broker`), so the broker's connection list says which node
//! holds whose connection: "the node the gateway on "b" is connected to" is read there, never
//! guessed from the URL order (another gateway may pick any node of its list). The lists are
//! rotated per host so that, with a gateway that takes the first reachable URL, the hosts sit on
//! different nodes and the probe (node 1 of the list, the broker's first node while it lives)
//! rarely shares a node with the one killed.
//!
//! Node loss is real: SIGKILL of the node's Erlang VM, or (container provider) its network cut off
//! the others'. The scenarios that do it take the cluster to themselves (the runner marks them,
//! [`ClusterState::exclusive`]) and the cluster is made whole again at cleanup.
//!
//! What is judged (CONTRACT §11): queue types and arguments as the management API shows them;
//! readiness as `/readyz` 200 *and* the host's connections on a live node; replies by their
//! msgIds as `bridge_reply` returned them (a failed one is unknown, [C-16]: it may arrive once);
//! the conversion by what the main drains afterwards, in order. The conversion's steps are in
//! [`convert`], [`convert_interrupted`] and [`convert_step1`], the TLS cluster's in [`tls`], the
//! queues' form in [`queue_form`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use cucumber::{given, then, when};
use fleet_conformance::names::inbox;
use fleet_conformance::timing::{ABSENCE_WINDOW, hold_for, scaled, wait_for};
use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use lapin::options::{BasicConsumeOptions, BasicNackOptions};
use lapin::types::FieldTable;
use serde_json::{Value, json};

use crate::world::FleetWorld;

mod convert;
mod convert_interrupted;
mod convert_step1;
mod queue_form;
mod returns;
mod stall;
mod state;
mod tags;
mod tls;
mod urls;

pub use state::{ClusterState, Moved, ReplyOutcome, ReplyRun, Seeded};
pub use tags::{CLASSIC_INBOX_TAG, NODE_FAULT_TAGS};
pub use urls::{host_offset, url_list};

/// The consumer tag of the probe's own consumer on an inbox (CLU-3).
const PROBE_TAG: &str = "fleet-probe-standby";

/// Gives `host`'s gateway every node's URL under its own login, before it starts (called by
/// [`FleetWorld::host_spec`] for every host once [`own_logins`] installed it).
async fn configure_host(w: &mut FleetWorld, host: &str) -> anyhow::Result<()> {
    if w.host_env.get(host).is_some_and(|e| e.contains_key("FLEET_AMQP_URL")) {
        return Ok(());
    }
    let vhost = w.vhost().await?;
    let login = crate::security::provision_login(w, host).await?;
    let urls = url_list(&w.suite()?.broker, &vhost, Some(&login), host_offset(host));
    w.host_env
        .entry(host.to_string())
        .or_default()
        .insert("FLEET_AMQP_URL".into(), urls);
    Ok(())
}

#[given("every host connects to all nodes of the cluster with its own login")]
async fn own_logins(w: &mut FleetWorld) -> anyhow::Result<()> {
    let suite = w.suite()?;
    ensure!(
        suite.broker.is_cluster(),
        "broker {} is not a cluster (this scenario needs @broker-cluster)",
        suite.broker.spec()
    );
    w.host_setup = Some(own_login);
    Ok(())
}

/// [`configure_host`] as the world's [`HostSetup`](crate::world::HostSetup).
fn own_login<'a>(w: &'a mut FleetWorld, host: &'a str) -> BoxFuture<'a, anyhow::Result<()>> {
    Box::pin(configure_host(w, host))
}

/// The nodes (indexes) the broker shows `host`'s gateway connected to, by its login.
async fn nodes_of_host(w: &mut FleetWorld, host: &str) -> anyhow::Result<BTreeSet<usize>> {
    let conns = connections_of_host(w, host).await?;
    let suite = w.suite()?;
    let mut nodes = BTreeSet::new();
    for node in conns {
        if let Some(i) = suite.broker.node_index(&node).await {
            nodes.insert(i);
        }
    }
    Ok(nodes)
}

/// The node names of every connection the broker lists under `host`'s own login.
async fn connections_of_host(w: &mut FleetWorld, host: &str) -> anyhow::Result<Vec<String>> {
    let (user, _) = w
        .broker_logins
        .get(host)
        .cloned()
        .ok_or_else(|| anyhow!("host {host:?} has no login of its own (see the Background)"))?;
    let vhost = w.vhost().await?;
    let conns = w.suite()?.broker.management().connections(&vhost).await?;
    Ok(conns.into_iter().filter(|c| c.user == user).map(|c| c.node).collect())
}

/// The one node `host`'s gateway is connected to (waits for the broker to list it).
async fn node_of_host(w: &mut FleetWorld, host: &str) -> anyhow::Result<usize> {
    let deadline = Instant::now() + scaled(Duration::from_secs(15));
    loop {
        let nodes = nodes_of_host(w, host).await?;
        if let Some(first) = nodes.first() {
            if nodes.len() > 1 {
                println!("note: the gateway on {host} holds connections on nodes {nodes:?}; node {first} is struck");
            }
            return Ok(*first);
        }
        ensure!(
            Instant::now() < deadline,
            "the broker lists no connection of the gateway on {host}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[when(regex = r#"^"([^"]+)" sends (\d+) replies "([^"]+)-1" to "[^"]+-\d+" in the background$"#)]
async fn replies_in_background(w: &mut FleetWorld, worker: String, n: usize, prefix: String) -> anyhow::Result<()> {
    let texts: Vec<String> = (1..=n).map(|i| format!("{prefix}-{i}")).collect();
    send_replies(w, worker, texts).await
}

/// Starts `worker`'s `bridge_reply` of each of `texts`, one after another, in the background.
async fn send_replies(w: &mut FleetWorld, worker: String, texts: Vec<String>) -> anyhow::Result<()> {
    let handle = w.mcp(&worker).await?.handle();
    let bound = scaled(w.inject_bound()) + Duration::from_secs(1);
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let (todo, out) = (texts.clone(), outcomes.clone());
    w.cluster.replies_started = Some(Instant::now());
    let task = tokio::spawn(async move {
        for text in todo {
            let started = Instant::now();
            let r = tokio::time::timeout(bound, handle.call("bridge_reply", json!({"text": text}))).await;
            let (result, hung) = match r {
                Ok(Ok(v)) => match v["msgId"].as_str() {
                    Some(id) => (Ok(id.to_string()), false),
                    None => (Err(format!("returned {v}")), false),
                },
                Ok(Err(e)) => (Err(format!("{e:#}")), false),
                Err(_) => (Err(format!("no answer within {bound:?}")), true),
            };
            if let Ok(mut o) = out.lock() {
                o.push(ReplyOutcome {
                    text,
                    result,
                    took: started.elapsed(),
                    hung,
                });
            }
        }
    });
    w.cluster.replies = Some(ReplyRun {
        worker,
        texts,
        outcomes,
        task: Some(task),
    });
    Ok(())
}

#[when(
    regex = r#"^the node (?:the gateway on "([^"]*)" is connected to|leading the inbox of "([^"]*)") is (killed|cut off from the others)(?: once (\d+) of them are confirmed)?$"#
)]
async fn strike_node(
    w: &mut FleetWorld,
    host: String,
    owner: String,
    action: String,
    once: String,
) -> anyhow::Result<()> {
    if !once.is_empty() {
        let want: usize = once.parse()?;
        let run = w
            .cluster
            .replies
            .as_ref()
            .ok_or_else(|| anyhow!("no replies are being sent in the background"))?;
        let out = run.outcomes.clone();
        wait_for(&format!("{want} replies confirmed"), Duration::from_secs(30), || {
            let out = out.clone();
            async move {
                let o = out.lock().map(|o| o.clone()).unwrap_or_default();
                let ok = o.iter().filter(|r| r.result.is_ok()).count();
                if ok >= want {
                    Ok(Some(()))
                } else {
                    Err(format!("{ok} confirmed of {} ended: {o:?}", o.len()))
                }
            }
        })
        .await?;
    }
    let node = if host.is_empty() {
        let gid = w.gid(&owner)?;
        let vhost = w.vhost().await?;
        w.suite()?.broker.queue_leader(&vhost, &inbox(&gid)).await?
    } else {
        node_of_host(w, &host).await?
    };
    // How many connections each host holds before the strike: ready again means at least as
    // many again, all on live nodes (CONTRACT §11), so a gateway that keeps one connection up
    // and never restores the one the node took down is not called ready.
    let mut before = BTreeMap::new();
    for host in w.hosts.keys().cloned().collect::<Vec<_>>() {
        before.insert(host.clone(), connections_of_host(w, &host).await?.len());
    }
    w.cluster.held_before = before;
    let at = Instant::now();
    if action == "killed" {
        // The clock and the watch start before the kill: the provider's wait for the other
        // nodes to see the node gone is part of the time to ready again, and a gateway ready
        // again within it is seen then, not when the wait is over.
        watch_ready_again(w, node, at).await?;
        w.suite()?.broker.kill_node(node).await?;
        println!("node {node} killed (the others saw it after {:.1?})", at.elapsed());
        w.cluster.struck = Some((node, at));
        return Ok(());
    }
    let suite = w.suite()?;
    if let Some(why) = suite.broker.cannot_partition() {
        bail!("this broker cannot cut a node off ({why}); the scenario should have been left out");
    }
    suite.broker.partition_node(node).await?;
    w.cluster.partitioned = Some(node);
    // A partition: the clock starts once the majority has seen the node cut off (after the
    // cluster's `net_ticktime`). Until then the management API, which says where connections
    // are, waits on the cut-off node and cannot tell (CONTRACT §11).
    let seen = Instant::now();
    println!(
        "node {node} cut off from the others (the others saw it after {:.1?})",
        at.elapsed()
    );
    w.cluster.struck = Some((node, seen));
    watch_ready_again(w, node, seen).await
}

/// From the strike on, watches every host until it is ready (`/readyz` 200) with at least as many
/// connections as it held before ([`ClusterState::held_before`]), none on the struck node, and
/// notes how long that took: CLU-5(c) is judged on that instant, not on when a
/// later step gets round to looking.
async fn watch_ready_again(w: &mut FleetWorld, dead: usize, at: Instant) -> anyhow::Result<()> {
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    let give_up = scaled(Duration::from_secs(120));
    w.cluster.ready_again.clear();
    for (host, h) in &w.hosts {
        let Some((user, _)) = w.broker_logins.get(host).cloned() else {
            bail!("host {host:?} has no login of its own (see the Background)");
        };
        let (url, token) = (
            format!("{}/readyz", h.gateway.base_url()),
            h.gateway.admin_token.clone(),
        );
        let want = w.cluster.held_before.get(host).copied().unwrap_or(1).max(1);
        let seen = Arc::new(Mutex::new(None));
        w.cluster.ready_again.insert(host.clone(), seen.clone());
        let (suite, vhost) = (suite.clone(), vhost.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            while at.elapsed() < give_up {
                let ready = match http.get(&url).bearer_auth(&token).send().await {
                    Ok(r) => r.status().as_u16() == 200,
                    Err(_) => false,
                };
                if ready && let Ok(conns) = suite.broker.management().connections(&vhost).await {
                    let mut nodes = BTreeSet::new();
                    let mine: Vec<_> = conns.iter().filter(|c| c.user == user).collect();
                    for c in &mine {
                        nodes.extend(suite.broker.node_index(&c.node).await);
                    }
                    if mine.len() >= want && !nodes.is_empty() && !nodes.contains(&dead) {
                        if let Ok(mut s) = seen.lock() {
                            *s = Some(at.elapsed());
                        }
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    Ok(())
}

#[when("the partition heals")]
async fn partition_heals(w: &mut FleetWorld) -> anyhow::Result<()> {
    let node = w
        .cluster
        .partitioned
        .take()
        .ok_or_else(|| anyhow!("no node was cut off"))?;
    w.suite()?.broker.heal_node(node).await?;
    Ok(())
}

/// CLU-5(c): `/readyz` 200 with every connection of the host on a live node, within 2H plus two
/// AMQP heartbeats of the strike (nominal, scaled). A gateway that lost nothing passes at once.
#[then("every gateway is ready again within 2 heartbeats and two AMQP heartbeats")]
async fn ready_again(w: &mut FleetWorld) -> anyhow::Result<()> {
    let (dead, at) = w.cluster.struck.ok_or_else(|| anyhow!("no node was struck"))?;
    let amqp_hb: u64 = w
        .gateway_env
        .get("FLEET_AMQP_HEARTBEAT_S")
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let bound = w.heartbeat() * 2 + Duration::from_secs(2 * amqp_hb);
    let deadline = at + scaled(bound);
    let watched: Vec<(String, Arc<Mutex<Option<Duration>>>)> = w
        .cluster
        .ready_again
        .iter()
        .map(|(h, s)| (h.clone(), s.clone()))
        .collect();
    for (host, seen) in &watched {
        loop {
            let took = seen.lock().map(|s| *s).unwrap_or_default();
            if let Some(took) = took {
                ensure!(
                    took <= scaled(bound),
                    "CLU-5(c): the gateway on {host} was ready again on a live node only {took:.1?} after node {dead} \
                     went; the bound is {bound:?} (scaled: {:?})",
                    scaled(bound)
                );
                println!("the gateway on {host} was ready on a live node {took:.1?} after node {dead} went");
                break;
            }
            if Instant::now() >= deadline {
                let ready = matches!(w.host(host)?.gateway.get("/readyz").await, Ok((200, _)));
                let conns = connections_of_host(w, host).await?;
                let nodes = nodes_of_host(w, host).await?;
                bail!(
                    "CLU-5(c): the gateway on {host} was not ready again within {bound:?} (scaled) of node {dead} going: \
                     /readyz 200 now: {ready}, {} connection(s) now (it held {} before the strike), on nodes {nodes:?}",
                    conns.len(),
                    w.cluster.held_before.get(host).copied().unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

#[then(regex = r#"^every reply of "([^"]+)" ends within the inject bound$"#)]
async fn replies_end(w: &mut FleetWorld, worker: String) -> anyhow::Result<()> {
    let run = w
        .cluster
        .replies
        .as_mut()
        .ok_or_else(|| anyhow!("no replies are being sent in the background"))?;
    ensure!(
        run.worker == worker,
        "the replies in the background are {}'s",
        run.worker
    );
    if let Some(task) = run.task.take() {
        task.await.context("the background replies' task")?;
    }
    let outcomes = run.outcomes();
    ensure!(
        outcomes.len() == run.texts.len(),
        "{} of {} replies ended",
        outcomes.len(),
        run.texts.len()
    );
    let hung: Vec<&ReplyOutcome> = outcomes.iter().filter(|o| o.hung).collect();
    ensure!(
        hung.is_empty(),
        "CLU-5(d): bridge_reply was left hanging past the inject bound: {hung:?}"
    );
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    let slowest = outcomes.iter().map(|o| o.took).max().unwrap_or_default();
    println!(
        "{} replies confirmed, {failed} failed (unknown, [C-16]); the slowest took {slowest:.1?}",
        outcomes.len() - failed
    );
    Ok(())
}

#[then(
    regex = r#"^"([^"]+)" drains every reply of "([^"]+)" the broker confirmed, each exactly once, within (\d+) seconds$"#
)]
async fn drains_confirmed(w: &mut FleetWorld, main: String, worker: String, secs: u64) -> anyhow::Result<()> {
    let run = w
        .cluster
        .replies
        .as_ref()
        .ok_or_else(|| anyhow!("no replies were sent in the background"))?;
    ensure!(
        run.worker == worker,
        "the replies in the background are {}'s",
        run.worker
    );
    let outcomes = run.outcomes();
    let confirmed: BTreeMap<String, String> = outcomes
        .iter()
        .filter_map(|o| o.result.as_ref().ok().map(|id| (id.clone(), o.text.clone())))
        .collect();
    let texts: BTreeSet<String> = run.texts.iter().cloned().collect();
    let want = confirmed.clone();
    let seen_all = move |got: &[Value]| want.keys().all(|id| got.iter().any(|m| m["msgId"] == json!(id)));
    let mut got =
        crate::broker_restart::drain_until(w, &main, Some(&worker), Duration::from_secs(secs), seen_all.clone())
            .await?;
    ensure!(
        seen_all(&got),
        "CLU-5(a): {main} did not drain every confirmed reply of {worker} within {secs} s; missing: {:?}; drained: {:?}",
        confirmed
            .iter()
            .filter(|(id, _)| !got.iter().any(|m| m["msgId"] == json!(id)))
            .map(|(_, t)| t)
            .collect::<Vec<_>>(),
        crate::broker_restart::describe(&got)
    );
    // One more look over a window: a second copy would show up now.
    let window = w.heartbeat() * 2;
    got.extend(crate::broker_restart::drain_until(w, &main, Some(&worker), window, |_| false).await?);
    let mut by_text: BTreeMap<String, usize> = BTreeMap::new();
    for m in &got {
        let text = m["text"].as_str().unwrap_or_default().to_string();
        ensure!(
            texts.contains(&text) && m["kind"] == json!("REPLY"),
            "{main} drained a message that is none of {worker}'s replies: {m}"
        );
        *by_text.entry(text).or_default() += 1;
    }
    let twice: Vec<_> = by_text.iter().filter(|(_, n)| **n > 1).collect();
    ensure!(
        twice.is_empty(),
        "CLU-5(a)/[C-15]: {main} drained replies more than once: {twice:?}"
    );
    let unknown_arrived = got
        .iter()
        .filter(|m| !confirmed.contains_key(m["msgId"].as_str().unwrap_or_default()))
        .count();
    println!(
        "{main} drained {} confirmed replies once each, and {unknown_arrived} of the unknown ones",
        confirmed.len()
    );
    Ok(())
}

/// The probe's own consumer (tag [`PROBE_TAG`]), as the broker lists it on `queue`: `Ok(true)`
/// once it is listed and active, with every other consumer of the queue.
async fn probe_consumer_listed(
    suite: &Arc<crate::world::Suite>,
    vhost: &str,
    queue: &str,
) -> Result<(bool, Vec<fleet_conformance::broker::ConsumerInfo>), String> {
    let all = suite
        .broker
        .management()
        .consumers(vhost)
        .await
        .map_err(|e| e.to_string())?;
    let on: Vec<_> = all.into_iter().filter(|c| c.queue == queue).collect();
    let active = on.iter().any(|c| c.tag == PROBE_TAG && c.active != Some(false));
    Ok((active, on))
}

/// CLU-3: the probe holds the inbox (its consumer listed and active), as another gateway would.
#[when(regex = r#"^the probe holds the inbox of "([^"]+)" with a consumer of its own$"#)]
async fn probe_holds(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    probe_consumes(w, name.clone()).await?;
    let q = inbox(&w.gid(&name)?);
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    wait_for(
        &format!("the probe's consumer listed as the active consumer of {q}"),
        Duration::from_secs(15),
        || {
            let (suite, vhost, q) = (suite.clone(), vhost.clone(), q.clone());
            async move {
                match probe_consumer_listed(&suite, &vhost, &q).await? {
                    (true, _) => Ok(Some(())),
                    (false, on) => Err(format!("listed on {q}: {on:?}")),
                }
            }
        },
    )
    .await?;
    Ok(())
}

/// CLU-3 + CON-2: a gateway whose entity's inbox is held logs that at ERROR naming the gid or
/// the inbox, and answers `/readyz` with 503 ([C-14]).
#[then(regex = r#"^the gateway on "([^"]+)" logs the refusal of the inbox of "([^"]+)" at ERROR and is not ready$"#)]
async fn refuses_held_inbox(w: &mut FleetWorld, host: String, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let names = vec![gid.clone(), inbox(&gid)];
    crate::faults::refused_and_not_ready(&w.host(&host)?.gateway, &names).await
}

/// CLU-3: a gateway that finds an inbox held (`consumer_count` above 0) does not consume it, not
/// even as a standby (which the broker would make active the moment the holder goes: two
/// consumers of one inbox, one after the other, without CON-1's takeover). The broker's consumer
/// list (`/api/consumers`, standbys included) shows only the probe's consumer on the inbox over
/// a window. SPEC tolerates a standby that slipped in through the race between the check and the
/// consume; here the probe has held the inbox since before the gateway started, so there is no
/// race to slip through.
#[then(regex = r#"^the inbox of "([^"]+)" lists only the probe's consumer over a window$"#)]
async fn only_the_probe(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let q = inbox(&w.gid(&name)?);
    let vhost = w.vhost().await?;
    let suite = w.suite()?;
    hold_for(
        &format!("only the probe's consumer on {q} (CLU-3: a refused gateway does not consume, not even as a standby)"),
        ABSENCE_WINDOW,
        || {
            let (suite, vhost, q) = (suite.clone(), vhost.clone(), q.clone());
            async move {
                match probe_consumer_listed(&suite, &vhost, &q).await? {
                    (true, on) if on.len() == 1 => Ok(()),
                    (_, on) => Err(format!("{} consumer(s) listed on {q}: {on:?}", on.len())),
                }
            }
        },
    )
    .await?;
    Ok(())
}

#[when(regex = r#"^the probe also consumes the inbox of "([^"]+)"$"#)]
async fn probe_consumes(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let gid = w.gid(&name)?;
    let vhost = w.vhost().await?;
    let url = w.suite()?.broker.amqp_url(&vhost);
    let conn = lapin::Connection::connect(&url, lapin::ConnectionProperties::default())
        .await
        .context("connecting the probe's consumer")?;
    let ch = conn.create_channel().await?;
    let mut consumer = ch
        .basic_consume(
            inbox(&gid).as_str().into(),
            PROBE_TAG.into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .with_context(|| {
            format!("the broker refused a plain consume of {name}'s quorum inbox (CLU-3: a standby is accepted)")
        })?;
    let handed = Arc::new(Mutex::new(Vec::new()));
    let seen = handed.clone();
    let task = tokio::spawn(async move {
        while let Some(Ok(d)) = consumer.next().await {
            let text = String::from_utf8_lossy(&d.data).to_string();
            if let Ok(mut s) = seen.lock() {
                s.push(text);
            }
            // Back to the queue: the holder must still get it (the check has failed already).
            let _ = d
                .acker
                .nack(BasicNackOptions {
                    requeue: true,
                    ..BasicNackOptions::default()
                })
                .await;
        }
    });
    w.cluster.standby = Some((handed, task, conn));
    Ok(())
}

#[then(regex = r#"^the probe's consumer on the inbox of "([^"]+)" is handed nothing over a window$"#)]
async fn standby_handed_nothing(w: &mut FleetWorld, name: String) -> anyhow::Result<()> {
    let (handed, _, _) = w
        .cluster
        .standby
        .as_ref()
        .ok_or_else(|| anyhow!("the probe does not consume the inbox of {name}"))?;
    let handed = handed.clone();
    hold_for(
        &format!("CLU-3: no delivery to a second consumer of {name}'s inbox"),
        ABSENCE_WINDOW,
        || {
            let handed = handed.clone();
            async move {
                let h = handed.lock().map(|h| h.clone()).unwrap_or_default();
                if h.is_empty() {
                    Ok(())
                } else {
                    Err(format!(
                        "the probe's consumer was handed {h:?} while the gateway held the inbox"
                    ))
                }
            }
        },
    )
    .await?;
    Ok(())
}
