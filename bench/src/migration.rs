//! The migration move rate (SPEC §13, MIG-2) beside its raw baseline, in one run.
//!
//! Why it exists: issue 14 item 5 / issue 16 found migration slow — 748 legacy replies moved in
//! 19 s (~40/s) on a loaded machine — and set a target of ≥ 1,000 replies/s on this machine,
//! *measured in the bench, with its ratio to raw publishing*. A rate alone says little on a shared
//! 2-core machine, so the section first measures what the broker itself does with the same
//! messages, then times the gateway's move, then checks that nothing was lost:
//!
//! 1. **raw publish**: N persistent legacy-shaped messages (`message_id`, text body of `--size`
//!    bytes, default exchange, `mandatory`) into a fresh durable queue with publisher confirms,
//!    `outstanding` in flight — the way the raw section publishes. Seeding the real legacy queue
//!    the same way is timed too; the ratio uses the mean of the two.
//! 2. **raw move**: the same N drained by plain lapin the way the gateway moves them — `basic.get`
//!    a batch of [`RAW_MOVE_BATCH`], publish each to another durable queue, wait for the batch's
//!    confirms, one multiple-ack — without envelope, signing or checks. The floor of a move.
//! 3. **gateway move**: a legacy queue `agent.<pane>.inbox` (v1.0.0 shape: durable, no arguments,
//!    see `src/legacy.rs`) is seeded with N replies; host `m` runs a gateway with a main registered,
//!    then a worker is registered with `legacyPaneId` = that pane. Timed from the registration
//!    request to the legacy queue being gone (passive declare every `poll`), and from the first
//!    reply taken off the legacy queue to it being gone (the move alone).
//! 4. **check**: the gateway is stopped (its held, unacked deliveries return to the queue), then
//!    the main's v2 inbox must hold exactly the N replies — each a REPLY from the worker, signed by
//!    host `m`, with the UUIDv5 msgId of its legacy `message_id` and its body unchanged. Anything
//!    else is reported as a loss in the JSON, the table and the exit status.
//!
//! The gateway runs with `FLEET_INBOX_MAX_LENGTH` large enough for the whole backlog: with the
//! default cap (1000) a move fills the parent's inbox to 90 % and then waits for the main to drain
//! it, which would measure the main, not the move.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use futures_util::StreamExt as _;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::rig::hosts::Fleet;
use crate::rig::stats::{CpuProbe, CpuSpent};
use fleet_conformance::envelope::Envelope;
use fleet_conformance::herdr::{AgentStatus, InputReaction};
use fleet_conformance::legacy::{amqp_code, derived_msg_id, legacy_queue_name};

/// The raw move's batch: the reference gateway's (`reference-gateway/src/migration.rs`).
pub const RAW_MOVE_BATCH: usize = 100;

/// The host the migrating gateway runs as.
pub const HOST: &str = "m";

/// Settings of the migration section.
#[derive(Debug, Clone)]
pub struct MigrationSettings {
    /// Legacy replies moved (and raw messages published and moved).
    pub replies: usize,
    /// Body size of each legacy reply, bytes.
    pub size: usize,
    /// Raw publisher confirms in flight.
    pub outstanding: usize,
    /// How often the legacy queue is looked at during the move.
    pub poll: Duration,
}

/// N messages in some wall time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Rate {
    pub messages: usize,
    pub seconds: f64,
    pub msgs_per_s: f64,
}

impl Rate {
    fn of(messages: usize, wall: Duration) -> Rate {
        Rate {
            messages,
            seconds: wall.as_secs_f64(),
            msgs_per_s: messages as f64 / wall.as_secs_f64().max(1e-9),
        }
    }
}

/// What the main's inbox held after the move.
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Verified {
    pub expected: usize,
    /// Messages in the main's inbox (passive declare, the main's gateway stopped).
    pub found: usize,
    /// Expected msgIds not found.
    pub missing: usize,
    /// msgIds found more than once.
    pub duplicates: usize,
    /// Messages that are not one of the expected replies.
    pub unexpected: usize,
    /// Found in legacy queue order.
    pub in_order: bool,
    /// Messages whose kind, `from`, body or signature is wrong.
    pub malformed: usize,
    pub first_problem: Option<String>,
    /// Every reply there exactly once, in order, well-formed.
    pub ok: bool,
}

/// What the migration section measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MigrationResult {
    pub replies: usize,
    pub message_bytes: usize,
    pub inbox_max_length: usize,
    /// Raw pipelined confirmed publish into a fresh durable queue.
    pub raw_publish: Rate,
    /// The same publish, seeding the legacy queue the gateway then moves.
    pub seed: Rate,
    /// Mean of `raw_publish` and `seed`: the figure the ratio uses.
    pub raw_publish_msgs_per_s_used: f64,
    /// get → publish → confirm → multiple-ack in batches of [`RAW_MOVE_BATCH`], plain lapin.
    pub raw_move: Rate,
    pub raw_move_batch: usize,
    /// A worker registration without a legacy claim, for comparison (ms).
    pub plain_register_ms: f64,
    /// The registration call with the claim, until it answered (the reference gateway answers
    /// after the move).
    pub register_call_ms: f64,
    /// Registration request → legacy queue gone.
    pub seconds: f64,
    pub replies_per_s: f64,
    /// Registration request → first reply taken off the legacy queue.
    pub start_delay_ms: f64,
    /// First reply taken → legacy queue gone: the move alone.
    pub move_seconds: f64,
    pub move_replies_per_s: f64,
    /// `replies_per_s` / `raw_publish_msgs_per_s_used`.
    pub ratio_to_raw_publish: f64,
    /// `move_replies_per_s` / `raw_move.msgs_per_s`.
    pub move_ratio_to_raw_move: f64,
    pub poll_ms: f64,
    /// CPU over registration → gone.
    pub cpu: CpuSpent,
    pub cpu_ms_per_reply: BTreeMap<String, f64>,
    pub verified: Verified,
}

/// One legacy reply: its v1 `message_id` and body.
struct LegacyReply {
    message_id: String,
    body: Vec<u8>,
}

/// `n` replies of `pane`, bodies padded to `size` bytes of text.
fn legacy_replies(pane: &str, n: usize, size: usize) -> Vec<LegacyReply> {
    (1..=n)
        .map(|i| {
            let message_id = uuid::Uuid::new_v5(
                &uuid::Uuid::NAMESPACE_URL,
                format!("urn:fleet:bench-migration:{pane}:{i}").as_bytes(),
            )
            .to_string();
            let mut body = format!("reply {i} of {n} from {pane} ").into_bytes();
            let mut c = b'a';
            while body.len() < size {
                body.push(c);
                c = if c == b'z' { b'a' } else { c + 1 };
            }
            LegacyReply { message_id, body }
        })
        .collect()
}

/// The v1.0.0 properties: persistent text with the v1 msgId as `message_id`, no headers.
fn legacy_props(message_id: &str) -> BasicProperties {
    BasicProperties::default()
        .with_message_id(message_id.into())
        .with_delivery_mode(2)
        .with_content_type("text/plain".into())
}

async fn connect(url: &str) -> anyhow::Result<Connection> {
    Connection::connect(url, ConnectionProperties::default())
        .await
        .context("migration bench: connecting to the broker")
}

async fn confirm_channel(conn: &Connection) -> anyhow::Result<Channel> {
    let ch = conn.create_channel().await.context("opening a channel")?;
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .context("confirm.select")?;
    Ok(ch)
}

/// Durable, no arguments: the v1.0.0 queue shape.
async fn durable_queue(ch: &Channel, name: &str) -> anyhow::Result<()> {
    let opts = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(name.into(), opts, FieldTable::default())
        .await
        .with_context(|| format!("declaring {name}"))?;
    Ok(())
}

async fn await_confirm(c: lapin::PublisherConfirm, queue: &str) -> anyhow::Result<()> {
    let conf = c.await.with_context(|| format!("confirm of a publish to {queue}"))?;
    ensure!(!conf.is_nack(), "the broker nacked a publish to {queue}");
    ensure!(
        conf.take_message().is_none(),
        "a publish to {queue} was returned unroutable"
    );
    Ok(())
}

async fn publish(
    ch: &Channel,
    queue: &str,
    body: &[u8],
    props: BasicProperties,
) -> anyhow::Result<lapin::PublisherConfirm> {
    let opts = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    ch.basic_publish("".into(), queue.into(), opts, body, props)
        .await
        .with_context(|| format!("publishing to {queue}"))
}

/// Publishes every reply to `queue` with up to `outstanding` confirms in flight; returns the wall
/// time from the first publish to the last confirm.
async fn publish_all(
    ch: &Channel,
    queue: &str,
    replies: &[LegacyReply],
    outstanding: usize,
) -> anyhow::Result<Duration> {
    let mut in_flight = VecDeque::with_capacity(outstanding.max(1));
    let started = Instant::now();
    for r in replies {
        if in_flight.len() >= outstanding.max(1)
            && let Some(c) = in_flight.pop_front()
        {
            await_confirm(c, queue).await?;
        }
        in_flight.push_back(publish(ch, queue, &r.body, legacy_props(&r.message_id)).await?);
    }
    for c in in_flight {
        await_confirm(c, queue).await?;
    }
    Ok(started.elapsed())
}

/// The gateway's move without the gateway: `basic.get` up to `batch` from `src`, publish each to
/// `dst` (properties kept), wait for the batch's confirms, one multiple-ack; until `src` is empty.
/// Returns the wall time and how many moved.
async fn raw_move(ch: &Channel, src: &str, dst: &str, batch: usize) -> anyhow::Result<(Duration, usize)> {
    let started = Instant::now();
    let mut moved = 0;
    loop {
        let mut confirms = Vec::with_capacity(batch);
        let mut last = None;
        while confirms.len() < batch {
            let got = ch
                .basic_get(src.into(), BasicGetOptions { no_ack: false })
                .await
                .with_context(|| format!("basic.get on {src}"))?;
            let Some(m) = got else { break };
            let d = m.delivery;
            confirms.push(publish(ch, dst, &d.data, d.properties.clone()).await?);
            last = Some(d.acker);
        }
        let Some(acker) = last else { break };
        let n = confirms.len();
        for c in confirms {
            await_confirm(c, dst).await?;
        }
        acker
            .ack(BasicAckOptions { multiple: true })
            .await
            .with_context(|| format!("multiple-ack on {src}"))?;
        moved += n;
    }
    Ok((started.elapsed(), moved))
}

/// Passive declare of `queue` on `ch`: `Ok(None)` when it does not exist (the broker then closes
/// `ch`), else (ready messages, consumers).
async fn peek(ch: &Channel, queue: &str) -> anyhow::Result<Option<(u32, u32)>> {
    let opts = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    match ch.queue_declare(queue.into(), opts, FieldTable::default()).await {
        Ok(q) => Ok(Some((q.message_count(), q.consumer_count()))),
        Err(e) if amqp_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("passive declare of {queue}")),
    }
}

/// Passive declare on a fresh channel (closed afterwards).
async fn peek_once(conn: &Connection, queue: &str) -> anyhow::Result<Option<(u32, u32)>> {
    let ch = conn.create_channel().await.context("opening a channel")?;
    let r = peek(&ch, queue).await?;
    if r.is_some() {
        let _ = ch.close(200, "peek done".into()).await;
    }
    Ok(r)
}

async fn delete_queue(conn: &Connection, queue: &str) {
    if let Ok(ch) = conn.create_channel().await {
        let _ = ch.queue_delete(queue.into(), QueueDeleteOptions::default()).await;
        let _ = ch.close(200, "deleted".into()).await;
    }
}

/// `POST /v1/entities` registering `pane` as a worker of `parent` that was v1 pane `legacy`.
async fn register_claim(
    base_url: String,
    admin_token: String,
    pane: String,
    parent: String,
    legacy: String,
) -> anyhow::Result<Value> {
    let body = json!({"role": "worker", "pane": pane, "groups": [], "parent": parent, "legacyPaneId": legacy});
    fleet_conformance::gateway::post_registration(base_url, admin_token, body)
        .await
        .context("registering a worker with legacyPaneId")
}

/// The gateway log lines about the migration, for an error message.
fn migration_log(fleet: &Fleet) -> String {
    let log = fleet.host(HOST).map(|h| h.gateway.log()).unwrap_or_default();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("legacy") || l.contains("migrat") || l.contains("ERROR"))
        .collect();
    lines[lines.len().saturating_sub(15)..].join("\n")
}

/// When the move was seen to start and to end.
struct Timed {
    started: Instant,
    first_taken: Instant,
    gone: Instant,
    register_call: Duration,
    worker_gid: String,
}

/// Registers the claiming worker and watches the legacy queue until it is gone.
async fn time_move(
    fleet: &Fleet,
    poll_conn: &Connection,
    legacy: &str,
    main_gid: &str,
    s: &MigrationSettings,
) -> anyhow::Result<Timed> {
    let host = fleet.host(HOST)?;
    let pane = host.herdr.add_agent_pane("claude", AgentStatus::Idle);
    host.herdr.set_on_input(&pane, InputReaction::WorksBriefly);
    let queue = legacy_queue_name(legacy);
    let n = s.replies as u32;
    let deadline = Duration::from_secs(120) + Duration::from_millis(20) * n;
    let ch = poll_conn.create_channel().await.context("opening the poll channel")?;
    let started = Instant::now();
    let mut call = Some(tokio::spawn({
        let (url, token) = (host.gateway.base_url(), host.gateway.admin_token.clone());
        let (pane, parent, legacy) = (pane.clone(), main_gid.to_string(), legacy.to_string());
        async move {
            let r = register_claim(url, token, pane, parent, legacy).await;
            (r, Instant::now())
        }
    }));
    let mut answer = None;
    let mut first_taken = None;
    let mut left;
    let gone = loop {
        let now = Instant::now();
        match peek(&ch, &queue).await? {
            None => break now,
            Some((ready, _)) => {
                left = ready;
                if ready < n && first_taken.is_none() {
                    first_taken = Some(now);
                }
            }
        }
        if let Some(task) = call.take_if(|t| t.is_finished()) {
            let (r, at) = task.await.context("the registration task panicked")?;
            let v = r.with_context(|| format!("registering the worker of v1 pane {legacy}"))?;
            answer = Some((v, at.duration_since(started)));
        }
        if started.elapsed() > deadline {
            bail!(
                "{queue} still holds {left} of {n} replies {:.0} s after the registration (the move \
                 stalled or was deferred); gateway log:\n{}",
                deadline.as_secs_f64(),
                migration_log(fleet)
            );
        }
        tokio::time::sleep(s.poll).await;
    };
    let (answer, register_call) = match (answer, call) {
        (Some(a), _) => a,
        (None, Some(task)) => {
            let (r, at) = tokio::time::timeout(Duration::from_secs(60), task)
                .await
                .map_err(|_| anyhow!("the registration did not answer within 60 s of the move's end"))?
                .context("the registration task panicked")?;
            let v = r.with_context(|| format!("registering the worker of v1 pane {legacy}"))?;
            (v, at.duration_since(started))
        }
        (None, None) => bail!("the registration call was lost"),
    };
    let worker_gid = answer["gid"]
        .as_str()
        .ok_or_else(|| anyhow!("the registration answered {answer}, without a gid"))?
        .to_string();
    Ok(Timed {
        worker_gid,
        started,
        // A move faster than one poll: the first look already saw the queue gone.
        first_taken: first_taken.unwrap_or(started),
        gone,
        register_call,
    })
}

/// Keeps the first problem found.
fn problem(v: &mut Verified, p: String) {
    if v.first_problem.is_none() {
        v.first_problem = Some(p);
    }
}

/// Reads every message of the main's inbox (its gateway stopped) and checks it against `replies`.
async fn verify(
    conn: &Connection,
    inbox: &str,
    replies: &[LegacyReply],
    worker_gid: &str,
    public_key: &str,
) -> anyhow::Result<Verified> {
    // The stopped gateway's connection closes a moment later; its unacked deliveries return then.
    let end = Instant::now() + Duration::from_secs(15);
    let found = loop {
        match peek_once(conn, inbox).await? {
            Some((ready, 0)) => break ready as usize,
            Some((_, consumers)) if Instant::now() < end => {
                tracing::debug!(consumers, "waiting for the main's consumer to go");
            }
            Some((_, consumers)) => bail!("{inbox} still has {consumers} consumer(s) after the gateway was stopped"),
            None => bail!("the main's inbox {inbox} does not exist"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let ch = conn.create_channel().await.context("opening a channel")?;
    ch.basic_qos(500, BasicQosOptions::default())
        .await
        .context("basic.qos")?;
    let opts = BasicConsumeOptions {
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let mut consumer = ch
        .basic_consume(
            inbox.into(),
            "bench-migration-check".into(),
            opts,
            FieldTable::default(),
        )
        .await
        .with_context(|| format!("consuming {inbox}"))?;
    let expected: BTreeMap<String, usize> = replies
        .iter()
        .enumerate()
        .map(|(i, r)| (derived_msg_id(&r.message_id), i))
        .collect();
    let mut v = Verified {
        expected: replies.len(),
        found,
        in_order: true,
        ..Verified::default()
    };
    let mut seen = BTreeSet::new();
    let mut last_index = None;
    for k in 0..found {
        let d = match tokio::time::timeout(Duration::from_secs(5), consumer.next()).await {
            Ok(Some(Ok(d))) => d,
            Ok(Some(Err(e))) => return Err(e).context("reading the main's inbox"),
            Ok(None) | Err(_) => bail!("{inbox}: only {k} of the {found} messages it held could be read"),
        };
        let msg_id = d
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        let Some(&i) = expected.get(&msg_id) else {
            v.unexpected += 1;
            problem(
                &mut v,
                format!("message {} has msgId {msg_id:?}, not a migrated reply's", k + 1),
            );
            continue;
        };
        if !seen.insert(i) {
            v.duplicates += 1;
            problem(&mut v, format!("reply {} arrived twice", i + 1));
            continue;
        }
        if last_index.is_some_and(|l| i < l) {
            v.in_order = false;
            problem(&mut v, format!("reply {} arrived after a later one", i + 1));
        }
        last_index = Some(i);
        let env = d
            .properties
            .headers()
            .as_ref()
            .map(Envelope::from_field_table)
            .transpose()
            .map_err(|e| e.to_string())
            .and_then(|e| e.ok_or_else(|| "no envelope headers".to_string()));
        let bad = match env {
            Err(e) => Some(e),
            Ok(env) if env.kind() != "REPLY" => Some(format!("kind {}", env.kind())),
            Ok(env) if env.get("from") != Some(worker_gid) => Some(format!("from {:?}", env.get("from"))),
            Ok(_) if d.data != replies[i].body => Some("body changed".into()),
            Ok(env) => env.verify(public_key, &d.data).err().map(|e| format!("signature: {e}")),
        };
        if let Some(why) = bad {
            v.malformed += 1;
            problem(&mut v, format!("reply {}: {why}", i + 1));
        }
    }
    v.missing = replies.len() - seen.len();
    if v.missing > 0 {
        let first = (0..replies.len()).find(|i| !seen.contains(i)).unwrap_or(0);
        let text = format!("{} replies missing, the first is reply {}", v.missing, first + 1);
        problem(&mut v, text);
    }
    v.ok = v.missing == 0 && v.duplicates == 0 && v.unexpected == 0 && v.malformed == 0 && v.in_order;
    let _ = ch.close(200, "checked".into()).await;
    Ok(v)
}

/// Runs the section: raw baselines, then the gateway's move on host [`HOST`] (started here and
/// stopped before returning, also on error, by the caller's fleet shutdown).
pub async fn run(
    fleet: &mut Fleet,
    amqp_url: &str,
    s: &MigrationSettings,
    bench_pid: Option<u32>,
    broker_pid: Option<u32>,
) -> anyhow::Result<MigrationResult> {
    let n = s.replies.max(1);
    let s = &MigrationSettings {
        replies: n,
        ..s.clone()
    };
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let legacy_pane = format!("b{}:p1", &tag[..8]);
    let legacy = legacy_queue_name(&legacy_pane);
    let replies = legacy_replies(&legacy_pane, n, s.size);
    let conn = connect(amqp_url).await?;

    // 1 + 2: the raw baselines, on their own queues.
    let (src, dst) = (format!("bench.mig.src.{tag}"), format!("bench.mig.dst.{tag}"));
    let ch = confirm_channel(&conn).await?;
    durable_queue(&ch, &src).await?;
    durable_queue(&ch, &dst).await?;
    let raw_publish = Rate::of(n, publish_all(&ch, &src, &replies, s.outstanding).await?);
    let (wall, moved) = raw_move(&ch, &src, &dst, RAW_MOVE_BATCH).await?;
    ensure!(moved == n, "the raw move moved {moved} of {n} messages");
    let raw_move = Rate::of(n, wall);
    let landed = peek_once(&conn, &dst).await?.map_or(0, |(ready, _)| ready as usize);
    ensure!(landed == n, "the raw move left {landed} of {n} messages in {dst}");
    delete_queue(&conn, &src).await;
    delete_queue(&conn, &dst).await;

    // 3: the legacy queue, seeded the v1.0.0 way, then moved by a gateway.
    durable_queue(&ch, &legacy).await?;
    let seed = Rate::of(n, publish_all(&ch, &legacy, &replies, s.outstanding).await?);
    let _ = ch.close(200, "seeded".into()).await;
    let inbox_max_length = (2 * n).max(1_000);
    let env = BTreeMap::from([("FLEET_INBOX_MAX_LENGTH".to_string(), inbox_max_length.to_string())]);
    fleet.start_host(HOST, &env).await?;
    let main = fleet.add(HOST, "main", None, InputReaction::StartWorking).await?;
    let t = Instant::now();
    fleet
        .add(HOST, "worker", Some(&main.gid), InputReaction::WorksBriefly)
        .await?;
    let plain_register = t.elapsed();
    let host = fleet.host(HOST)?;
    let public_key = host.gateway.spec.key.public_base64();
    let cpu = CpuProbe::default()
        .with("bench", bench_pid)
        .with("broker", broker_pid)
        .with("gateway", host.gateway.pid());
    let before = cpu.snapshot();
    let timed = time_move(fleet, &conn, &legacy_pane, &main.gid, s).await?;
    let spent = before.until(&cpu.snapshot());
    // 4: the check, with the main's gateway stopped.
    fleet.stop_host(HOST).await;
    let inbox = fleet_conformance::names::inbox(&main.gid);
    let verified = verify(&conn, &inbox, &replies, &timed.worker_gid, &public_key).await?;
    if !verified.ok {
        eprintln!(
            "fleet-bench: MIGRATION CHECK FAILED: {} of {} replies in the main's inbox, {} missing, {} duplicated, \
             {} unexpected, {} malformed, in order: {}; first problem: {}",
            verified.found,
            verified.expected,
            verified.missing,
            verified.duplicates,
            verified.unexpected,
            verified.malformed,
            verified.in_order,
            verified.first_problem.as_deref().unwrap_or("-")
        );
    }
    delete_queue(&conn, &inbox).await;
    let _ = conn.close(200, "done".into()).await;

    let total = timed.gone.duration_since(timed.started);
    let moving = timed.gone.duration_since(timed.first_taken);
    let replies_per_s = n as f64 / total.as_secs_f64().max(1e-9);
    let move_replies_per_s = n as f64 / moving.as_secs_f64().max(1e-9);
    let raw_used = (raw_publish.msgs_per_s + seed.msgs_per_s) / 2.0;
    Ok(MigrationResult {
        replies: n,
        message_bytes: s.size,
        inbox_max_length,
        raw_publish_msgs_per_s_used: raw_used,
        ratio_to_raw_publish: replies_per_s / raw_used.max(1e-9),
        move_ratio_to_raw_move: move_replies_per_s / raw_move.msgs_per_s.max(1e-9),
        raw_publish,
        seed,
        raw_move,
        raw_move_batch: RAW_MOVE_BATCH,
        plain_register_ms: plain_register.as_secs_f64() * 1e3,
        register_call_ms: timed.register_call.as_secs_f64() * 1e3,
        seconds: total.as_secs_f64(),
        replies_per_s,
        start_delay_ms: timed.first_taken.duration_since(timed.started).as_secs_f64() * 1e3,
        move_seconds: moving.as_secs_f64(),
        move_replies_per_s,
        poll_ms: s.poll.as_secs_f64() * 1e3,
        cpu_ms_per_reply: spent.per_unit_ms(n),
        cpu: spent,
        verified,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_replies_are_sized_text_with_stable_ids() {
        let a = legacy_replies("b1:p1", 3, 1024);
        let b = legacy_replies("b1:p1", 3, 1024);
        assert_eq!(a.len(), 3);
        assert!(
            a.iter()
                .all(|r| r.body.len() == 1024 && std::str::from_utf8(&r.body).is_ok())
        );
        assert!(a[2].body.starts_with(b"reply 3 of 3 from b1:p1 "));
        assert_eq!(a[0].message_id, b[0].message_id);
        assert_ne!(a[0].message_id, a[1].message_id);
        // A size below the prefix keeps the prefix whole.
        assert!(legacy_replies("b1:p1", 1, 4)[0].body.starts_with(b"reply 1 of 1"));
    }

    #[test]
    fn rates_are_messages_per_second() {
        let r = Rate::of(2_000, Duration::from_secs(2));
        assert!((r.msgs_per_s - 1_000.0).abs() < 1e-9);
    }
}
