//! The soak run (`@soak`, only with `FLEET_E2E_SOAK=1`): briefs and replies across three hosts
//! while a nemesis kills, freezes and cuts gateways, closes their broker connections and restarts
//! the broker, then a Jepsen-style history check.
//!
//! **History.** Every operation (`bridge_send` of a brief, `bridge_reply` of a worker, and the
//! main's `bridge_poll` drains) is recorded as the caller saw it:
//! - **ok** — acknowledged as delivered: `bridge_send` → `injected`; `bridge_reply` → a `msgId`;
//! - **failed** — a definite failure that means "not delivered": `no_route` (the broker returned
//!   it, PUB-2) or a FAILED whose reason says the worker's gateway did not inject it (`busy`,
//!   `stopped`, `no_such_entity`, `maxlen`, `expired`, `not_submitted`), or a reply whose MCP
//!   session could not even be opened (no call made);
//! - **unknown** — the caller cannot tell: `inject_timeout` (FWD-5), a publish failed by a lost
//!   connection (PUB-3 — [C-16]: it may still have been routed; the reference gateway answers
//!   `failed` with reason `publish`), any other reason outside that list, and any MCP call that
//!   errored or missed its deadline.
//!
//! **Check** against what really happened — herdr's input log of each worker pane (the forward
//! path) and the main's drains (the pull path):
//! - **lost**: an *ok* operation whose message never arrived (never injected / never drained);
//! - **duplicated**: a brief injected more than once, whatever its operation's class (at most
//!   once, FWD-1/FWD-6), or a reply drained more than once by the main within one life of the
//!   main's gateway (RPL-1: a restart of the main's gateway may show a message once more; that is
//!   counted apart, as `redelivered_across_gateway_lives`, and allowed);
//! - **unexpected**: something arrived that no operation sent;
//! - **failed but delivered**: a *failed* operation's message arrived after all.
//!
//! Unknown operations may or may not arrive; either is fine (counted, never a violation). Any
//! violation fails the run. A history with no ok brief or no ok reply proves nothing and fails too.
//!
//! The summary is printed and written as JSON to `<reports>/<broker>/soak.json` beside
//! `cucumber.json` (`$FLEET_E2E_OUT` or `target/fleet-e2e/`), pass or fail.
//!
//! Knobs: `FLEET_SOAK_OPS` (operations in all, split evenly into briefs and replies over the two
//! workers; default: what the feature says), `FLEET_SOAK_NEMESIS` (the nemesis cycle, a comma list
//! of `kill`, `pause`, `cut`, `close`, `restart`; default [`DEFAULT_CYCLE`]), `FLEET_SOAK_SEED`
//! (the seed of the nemesis' random picks; printed).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use cucumber::{given, then, when};
use fleet_conformance::herdr::InputOutcome;
use fleet_conformance::mcp::{McpClient, McpHandle};
use fleet_conformance::timing::scaled;
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::world::FleetWorld;

/// Operations in all (briefs + replies), overriding the feature's numbers.
const OPS_VAR: &str = "FLEET_SOAK_OPS";
/// The nemesis cycle, e.g. `kill,pause,cut,close,restart`.
const NEMESIS_VAR: &str = "FLEET_SOAK_NEMESIS";
/// The seed of the nemesis' random picks (which host, which connection).
const SEED_VAR: &str = "FLEET_SOAK_SEED";

/// The nemesis cycle unless `FLEET_SOAK_NEMESIS` says otherwise: one broker restart in nine
/// strikes (it takes the broker away for seconds, the others for a moment).
const DEFAULT_CYCLE: [Strike; 9] = [
    Strike::Kill,
    Strike::Pause,
    Strike::Cut,
    Strike::Close,
    Strike::BrokerRestart,
    Strike::Pause,
    Strike::Kill,
    Strike::Close,
    Strike::Cut,
];

/// FAILED reasons that mean the worker's gateway did not inject the brief (SPEC §2.2, §5, §11).
/// Every other reason, `inject_timeout` among them, leaves the outcome unknown.
const DEFINITE_REASONS: [&str; 6] = [
    "busy",
    "stopped",
    "no_such_entity",
    "maxlen",
    "expired",
    "not_submitted",
];

/// What the caller of one operation saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Seen {
    Ok,
    Failed,
    Unknown,
}

impl Seen {
    fn as_str(self) -> &'static str {
        match self {
            Seen::Ok => "ok",
            Seen::Failed => "failed",
            Seen::Unknown => "unknown",
        }
    }
}

/// One thing the nemesis does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strike {
    /// SIGKILL a worker's gateway and start it again (same state dir, same port).
    Kill,
    /// SIGSTOP a worker's gateway for half a period, then SIGCONT.
    Pause,
    /// Cut every connection through the suite's link to the broker.
    Cut,
    /// Close one random connection of the scenario's vhost from the broker side (management API).
    Close,
    /// Restart the broker on its data (process and container providers).
    BrokerRestart,
}

impl Strike {
    const ALL: [Strike; 5] = [
        Strike::Kill,
        Strike::Pause,
        Strike::Cut,
        Strike::Close,
        Strike::BrokerRestart,
    ];

    fn name(self) -> &'static str {
        match self {
            Strike::Kill => "gateway_kill_restart",
            Strike::Pause => "gateway_stop_cont",
            Strike::Cut => "link_cut",
            Strike::Close => "connection_close",
            Strike::BrokerRestart => "broker_restart",
        }
    }

    fn parse(s: &str) -> Option<Strike> {
        match s.trim() {
            "kill" => Some(Strike::Kill),
            "pause" | "stop" => Some(Strike::Pause),
            "cut" => Some(Strike::Cut),
            "close" => Some(Strike::Close),
            "restart" | "broker" => Some(Strike::BrokerRestart),
            _ => None,
        }
    }
}

/// A tiny xorshift generator: the suite has no `rand`, and the picks only need to be spread and
/// reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        if n == 0 { 0 } else { (x % n as u64) as usize }
    }
}

/// The run's settings, from the feature text and the environment.
#[derive(Debug, Clone)]
struct SoakConfig {
    cycle: Vec<Strike>,
    seed: u64,
}

impl SoakConfig {
    fn from_env() -> anyhow::Result<SoakConfig> {
        let cycle = match std::env::var(NEMESIS_VAR) {
            Ok(v) if !v.trim().is_empty() => v
                .split(',')
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    Strike::parse(s).ok_or_else(|| {
                        anyhow!("{NEMESIS_VAR}={v:?}: unknown nemesis {s:?}; expected kill, pause, cut, close, restart")
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?,
            _ => DEFAULT_CYCLE.to_vec(),
        };
        let seed = match std::env::var(SEED_VAR) {
            Ok(v) => v
                .trim()
                .parse()
                .with_context(|| format!("{SEED_VAR}={v:?} is not a number"))?,
            Err(_) => uuid::Uuid::new_v4().as_u64_pair().0,
        };
        Ok(SoakConfig { cycle, seed })
    }
}

/// The operation counts per worker: the feature's, or `FLEET_SOAK_OPS` split in four.
fn op_counts(briefs: usize, replies: usize) -> anyhow::Result<(usize, usize)> {
    match std::env::var(OPS_VAR) {
        Ok(v) if !v.trim().is_empty() => {
            let ops: usize = v
                .trim()
                .parse()
                .with_context(|| format!("{OPS_VAR}={v:?} is not a number"))?;
            anyhow::ensure!(
                ops >= 4,
                "{OPS_VAR}={ops}: at least 4 (one brief and one reply per worker)"
            );
            Ok((ops / 4, ops / 4))
        }
        _ => Ok((briefs, replies)),
    }
}

/// How far the nemesis is, in strikes: the strikes begun, plus how far the current one and the
/// period after it have got (time since it began over its length so far plus a period, at most
/// just under one). Continuous and even in time, strikes included: operations paced by it go
/// out during strikes (a frozen gateway, a broker restarting) as much as between them.
struct NemesisClock {
    every: Duration,
    /// Strikes begun, when the last one began (or the run), how long it took once it ended.
    state: std::sync::Mutex<(usize, Instant, Option<Duration>)>,
}

impl NemesisClock {
    fn new(every: Duration) -> NemesisClock {
        NemesisClock {
            every,
            state: std::sync::Mutex::new((0, Instant::now(), Some(Duration::ZERO))),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, Instant, Option<Duration>)> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn progress(&self) -> f64 {
        let (begun, began, took) = *self.lock();
        let t = began.elapsed();
        let slot = took.unwrap_or(t) + self.every;
        begun as f64 + (t.as_secs_f64() / slot.as_secs_f64().max(0.001)).min(0.999)
    }

    fn begin(&self) {
        let mut state = self.lock();
        *state = (state.0 + 1, Instant::now(), None);
    }

    fn end(&self) {
        let mut state = self.lock();
        state.2 = Some(state.1.elapsed());
    }
}

/// One operation of the history.
#[derive(Debug, Clone)]
struct Op {
    /// `bridge_send` or `bridge_reply`.
    tool: &'static str,
    /// Names its worker: `soak brief w1 #7`, `soak reply w2 #3`.
    text: String,
    seen: Seen,
    /// What the caller got, for the outcome counts (`injected`, `failed/busy`, `error: …`).
    outcome: String,
}

/// One strike of the nemesis.
#[derive(Debug, Clone)]
struct Event {
    at: Duration,
    strike: Strike,
    target: String,
    took: Duration,
    /// Whether it did what it meant to (a strike that found nothing to hit, or could not hit it,
    /// is recorded all the same).
    done: bool,
    detail: String,
}

/// One message the main drained.
#[derive(Debug, Clone)]
struct Drain {
    kind: String,
    text: String,
    /// Which life of the main's gateway drained it (0 = the first).
    life: u32,
}

/// The recorded history of a soak run.
#[derive(Default)]
pub struct SoakState {
    config: Option<SoakConfig>,
    /// Whether the scenario has the broker to itself (it may restart it).
    exclusive: bool,
    started: Option<Instant>,
    started_unix_ms: u128,
    ran_for: Duration,
    briefs_per_worker: usize,
    replies_per_worker: usize,
    every: Duration,
    /// The strikes the operations are spread over (two rounds of the nemesis cycle).
    spread: usize,
    ops: Vec<Op>,
    events: Vec<Event>,
    /// Strikes of the cycle that cannot happen in this run, with why.
    off: BTreeMap<&'static str, String>,
    drains: Vec<Drain>,
    polls_ok: usize,
    polls_unknown: usize,
    /// The life of the main's gateway: bumped whenever the nemesis restarts it.
    main_life: Arc<AtomicU32>,
}

fn classify_send(v: &anyhow::Result<Value>) -> (Seen, String) {
    match v {
        Ok(v) => {
            let status = v["status"].as_str().unwrap_or("?");
            let reason = v["reason"].as_str().unwrap_or("-");
            match status {
                "injected" => (Seen::Ok, "injected".into()),
                "no_route" => (Seen::Failed, "no_route".into()),
                "failed" if DEFINITE_REASONS.contains(&reason) => (Seen::Failed, format!("failed/{reason}")),
                // inject_timeout, a publish lost with its connection ([C-16]), anything else.
                _ => (Seen::Unknown, format!("{status}/{reason}")),
            }
        }
        Err(e) => (Seen::Unknown, error_label(e)),
    }
}

fn classify_reply(v: &Result<Value, fleet_conformance::mcp::McpError>) -> (Seen, String) {
    match v {
        Ok(v) if v["msgId"].is_string() => (Seen::Ok, "sent".into()),
        Ok(v) if v["status"] == "no_route" => (Seen::Failed, "no_route".into()),
        // `failed` (the reference gateway's publish failure: connection lost before the confirm,
        // [C-16]) or anything else: it may have been routed.
        Ok(v) => (
            Seen::Unknown,
            format!(
                "{}/{}",
                v["status"].as_str().unwrap_or("?"),
                v["reason"].as_str().unwrap_or("-")
            ),
        ),
        Err(e) => (Seen::Unknown, mcp_error_label(e)),
    }
}

/// A short, groupable label for an MCP error (its kind, not its arguments): read from the
/// suite's own error type, never from its wording.
fn error_label(e: &anyhow::Error) -> String {
    match e.downcast_ref::<fleet_conformance::mcp::McpError>() {
        Some(e) => mcp_error_label(e),
        None => "error: other".into(),
    }
}

fn mcp_error_label(e: &fleet_conformance::mcp::McpError) -> String {
    use fleet_conformance::mcp::McpError;
    let kind = match e {
        McpError::Deadline { .. } => "deadline",
        McpError::SessionDied { .. } => "session died",
        McpError::Connect { .. } => "connect",
        McpError::Tool { .. } => "tool error",
        McpError::Contract(_) => "contract violation",
        McpError::Call { .. } | McpError::Closed { .. } => "other",
    };
    format!("error: {kind}")
}

/// Replies `texts` from one worker, each once, paced by its briefs: reply `k` waits until the
/// worker's briefs are `k/r` done (so replies run through the whole nemesis, not in its first
/// seconds). A session the gateway dropped is reopened for the next reply; a gateway that cannot
/// be reached is retried for a while before that reply counts as failed (no call was made).
async fn reply_paced(
    url: String,
    token: String,
    texts: Vec<String>,
    briefs: usize,
    briefs_done: Arc<AtomicUsize>,
) -> Vec<(String, Seen, String)> {
    let r = texts.len().max(1);
    let mut out = Vec::new();
    let mut client: Option<McpClient> = None;
    for (k, text) in texts.into_iter().enumerate() {
        while briefs_done.load(Ordering::Relaxed) * r < k * briefs {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if client.is_none() {
            let give_up = Instant::now() + scaled(Duration::from_secs(15));
            while client.is_none() && Instant::now() < give_up {
                match McpClient::connect(&url, &token).await {
                    Ok(c) => client = Some(c),
                    Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                }
            }
        }
        let (seen, outcome) = match &client {
            None => (Seen::Failed, "not_connected".to_string()),
            Some(c) => {
                let v = c.call("bridge_reply", json!({"text": text})).await;
                if v.is_err() {
                    client = None; // the gateway restarted or hung: a new session for the next one
                }
                classify_reply(&v)
            }
        };
        out.push((text, seen, outcome));
    }
    out
}

/// Records what one `bridge_poll` drained.
fn record_poll(v: &Result<Value, fleet_conformance::mcp::McpError>, life: u32, drains: &mut Vec<Drain>) -> bool {
    match v {
        Ok(v) => {
            for m in fleet_conformance::contract::poll_messages(v).unwrap_or_default().iter() {
                drains.push(Drain {
                    kind: m["kind"].as_str().unwrap_or("?").to_string(),
                    text: m["text"].as_str().unwrap_or_default().to_string(),
                    life,
                });
            }
            true
        }
        Err(_) => false,
    }
}

#[given("a broker the soak's nemesis may restart")]
async fn restartable_broker(w: &mut FleetWorld) -> anyhow::Result<()> {
    let config = SoakConfig::from_env()?;
    let suite = w.suite()?;
    if w.vhost.is_none() && config.cycle.contains(&Strike::BrokerRestart) && suite.broker.cannot_restart().is_none() {
        // A restart breaks every connection into the broker: this scenario takes it alone.
        w.vhost = Some(
            suite
                .broker
                .create_exclusive_vhost()
                .await
                .context("taking the broker for this scenario alone")?,
        );
        w.soak.exclusive = true;
    }
    w.vhost().await?;
    w.soak.config = Some(config);
    Ok(())
}

#[when(
    regex = r#"^"([^"]+)" sends (\d+) briefs to each of "([^"]+)" and "([^"]+)", which reply (\d+) times each, while a nemesis strikes every (\d+) ms$"#
)]
async fn soak(
    w: &mut FleetWorld,
    main: String,
    n: usize,
    w1: String,
    w2: String,
    r: usize,
    every: u64,
) -> anyhow::Result<()> {
    let config = match w.soak.config.clone() {
        Some(c) => c,
        None => SoakConfig::from_env()?,
    };
    let (n, r) = op_counts(n, r)?;
    let suite = w.suite()?;
    let vhost = w.vhost().await?;
    let every = scaled(Duration::from_millis(every));
    // Which strikes of the cycle can happen here.
    let mut off = BTreeMap::new();
    if w.link.is_none() {
        off.insert(
            Strike::Cut.name(),
            "the scenario has no cuttable link between gateways and broker".to_string(),
        );
    }
    if !config.cycle.contains(&Strike::BrokerRestart) {
        // Said below, with the other strikes left out of the cycle.
    } else if let Some(why) = suite.broker.cannot_restart() {
        off.insert(Strike::BrokerRestart.name(), why.to_string());
    } else if !w.soak.exclusive {
        off.insert(
            Strike::BrokerRestart.name(),
            "the scenario does not have the broker to itself (its Background lacks \"a broker the soak's nemesis may restart\")".to_string(),
        );
    }
    for s in Strike::ALL {
        if !config.cycle.contains(&s) {
            off.entry(s.name())
                .or_insert_with(|| format!("not in the nemesis cycle ({NEMESIS_VAR})"));
        }
    }
    let cycle: Vec<Strike> = config
        .cycle
        .iter()
        .copied()
        .filter(|s| !off.contains_key(s.name()))
        .collect();
    let mut rng = Rng::new(config.seed);
    println!(
        "soak: {n} briefs to each of {w1} and {w2}, {r} replies from each ({} operations; {OPS_VAR} overrides); \
         nemesis every {every:?}, cycle {:?}, seed {} ({SEED_VAR}); off: {off:?}; operations spread over {} strikes",
        2 * (n + r),
        cycle.iter().map(|s| s.name()).collect::<Vec<_>>(),
        config.seed,
        2 * cycle.len(),
    );
    w.soak.briefs_per_worker = n;
    w.soak.replies_per_worker = r;
    w.soak.every = every;
    w.soak.off = off;
    w.soak.config = Some(config);
    let started = Instant::now();
    w.soak.started = Some(started);
    w.soak.started_unix_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();

    // Operations are spread over two rounds of the nemesis cycle, so that even a short soak meets
    // every strike twice: a lane's k-th operation waits until the nemesis is k/(its operations)
    // of the way through those strikes (see `NemesisClock`). A lane whose operations are slower
    // than that is not held up.
    let spread = 2 * cycle.len();
    let clock = Arc::new(NemesisClock::new(every));
    w.soak.spread = spread;
    let main_host = w.entity(&main)?.host.clone();
    let lead: McpHandle = w.mcp(&main).await?.handle();
    type Sent = (String, anyhow::Result<Value>);
    let mut ops: JoinSet<Vec<Sent>> = JoinSet::new();
    let mut progress: BTreeMap<String, Arc<AtomicUsize>> = BTreeMap::new();
    for worker in [&w1, &w2] {
        let gid = w.gid(worker)?;
        let done = progress.entry(worker.clone()).or_default().clone();
        for lane in 0..2 {
            let (lead, gid, worker, done) = (lead.clone(), gid.clone(), worker.clone(), done.clone());
            let clock = clock.clone();
            ops.spawn(async move {
                let mut out = Vec::new();
                let per_lane = (lane..n).step_by(2).count().max(1);
                for (k, i) in (lane..n).step_by(2).enumerate() {
                    let due = (k * spread) as f64 / per_lane as f64;
                    while clock.progress() < due {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    let text = format!("soak brief {worker} #{i}");
                    let v = lead
                        .call("bridge_send", json!({"to": gid, "text": text, "wait_reply": false}))
                        .await;
                    done.fetch_add(1, Ordering::Relaxed);
                    out.push((text, v.map_err(anyhow::Error::from)));
                }
                out
            });
        }
    }
    // The main drains as it goes, as a real main does: held replies fill its prefetch window, and
    // a main that never drains stops hearing INJECTED for its own sends (RPL-5).
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let drainer = {
        let lead = lead.clone();
        let life = w.soak.main_life.clone();
        tokio::spawn(async move {
            let (mut drains, mut ok, mut unknown) = (Vec::new(), 0usize, 0usize);
            loop {
                let v = lead.call("bridge_poll", json!({"max": 200})).await;
                if record_poll(&v, life.load(Ordering::Relaxed), &mut drains) {
                    ok += 1;
                } else {
                    unknown += 1;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                    _ = stop_rx.changed() => break,
                }
            }
            (drains, ok, unknown)
        })
    };
    let mut repliers = JoinSet::new();
    for worker in [&w1, &w2] {
        let e = w.entity(worker)?;
        let url = w.host(&e.host)?.gateway.mcp_url();
        let texts: Vec<String> = (0..r).map(|i| format!("soak reply {worker} #{i}")).collect();
        let done = progress.get(worker).cloned().unwrap_or_default();
        repliers.spawn(reply_paced(url, e.token.clone(), texts, n, done));
    }
    // The nemesis strikes (worker hosts, the link, the broker) until the operations are done.
    let hosts: Vec<String> = [&w1, &w2]
        .iter()
        .filter_map(|n| w.entity(n).ok().map(|e| e.host.clone()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut round = 0usize;
    let mut next = tokio::time::Instant::now() + every;
    while !(ops.is_empty() && repliers.is_empty()) {
        tokio::select! {
            Some(done) = ops.join_next() => {
                for (text, v) in done? {
                    let (seen, outcome) = classify_send(&v);
                    w.soak.ops.push(Op { tool: "bridge_send", text, seen, outcome });
                }
                continue;
            }
            Some(done) = repliers.join_next() => {
                for (text, seen, outcome) in done? {
                    w.soak.ops.push(Op { tool: "bridge_reply", text, seen, outcome });
                }
                continue;
            }
            _ = tokio::time::sleep_until(next) => {}
        }
        if cycle.is_empty() {
            next = tokio::time::Instant::now() + every;
            continue;
        }
        let strike = cycle[round % cycle.len()];
        round += 1;
        let at = started.elapsed();
        let t0 = Instant::now();
        clock.begin();
        let (target, done, detail) = match strike {
            Strike::Kill => {
                let host = hosts[rng.below(hosts.len())].clone();
                let h = w.host_mut(&host)?;
                h.gateway.kill().await;
                if host == main_host {
                    w.soak.main_life.fetch_add(1, Ordering::Relaxed);
                }
                match w.host_mut(&host)?.gateway.launch().await {
                    Ok(()) => (host, true, "killed, started again, ready".to_string()),
                    Err(e) => (host, false, format!("killed; the new process is not ready: {e}")),
                }
            }
            Strike::Pause => {
                let host = hosts[rng.below(hosts.len())].clone();
                let stopped = w.host(&host)?.gateway.signal(libc::SIGSTOP);
                tokio::time::sleep(every / 2).await;
                let cont = w.host(&host)?.gateway.signal(libc::SIGCONT);
                match (stopped, cont) {
                    (Ok(()), Ok(())) => (host, true, format!("stopped for {:?}", every / 2)),
                    (a, b) => (host, false, format!("SIGSTOP: {a:?}, SIGCONT: {b:?}")),
                }
            }
            Strike::Cut => match &w.link {
                Some(link) => {
                    let n = link.cut();
                    ("link".to_string(), n > 0, format!("{n} connections cut"))
                }
                None => ("link".to_string(), false, "no link".to_string()),
            },
            Strike::Close => match suite.broker.management().connections(&vhost).await {
                Ok(conns) if !conns.is_empty() => {
                    let c = &conns[rng.below(conns.len())];
                    let who = c.client_name.clone().unwrap_or_else(|| c.name.clone());
                    match suite.broker.management().close_connection(&c.name).await {
                        Ok(()) => (who, true, format!("closed 1 of {} connections", conns.len())),
                        Err(e) => (who, false, format!("close failed: {e}")),
                    }
                }
                Ok(_) => ("-".to_string(), false, "no connection in the vhost".to_string()),
                Err(e) => ("-".to_string(), false, format!("listing connections: {e}")),
            },
            Strike::BrokerRestart => match suite.broker.restart(&vhost).await {
                Ok(took) => ("broker".to_string(), true, format!("back in {took:.1?}")),
                Err(e) => ("broker".to_string(), false, format!("restart failed: {e}")),
            },
        };
        let took = t0.elapsed();
        println!(
            "soak: {:>6.1} s  {} {target}: {detail}",
            at.as_secs_f64(),
            strike.name()
        );
        w.soak.events.push(Event {
            at,
            strike,
            target,
            took,
            done,
            detail,
        });
        clock.end();
        next = tokio::time::Instant::now() + every;
    }
    let _ = stop_tx.send(true);
    let (drains, polls_ok, polls_unknown) = drainer.await?;
    w.soak.drains = drains;
    w.soak.polls_ok = polls_ok;
    w.soak.polls_unknown = polls_unknown;
    w.soak.ran_for = started.elapsed();
    Ok(())
}

/// What arrived: injects per brief text on the workers' panes, with how many were submitted.
#[derive(Default)]
struct Arrivals {
    /// Text → (input records, submitted records).
    injects: BTreeMap<String, (usize, usize)>,
}

impl Arrivals {
    fn read(w: &FleetWorld, workers: &[&String]) -> anyhow::Result<Arrivals> {
        let mut injects: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for name in workers {
            let e = w.entity(name)?;
            for rec in w.host(&e.host)?.herdr.input_log(&e.pane) {
                let slot = injects.entry(rec.text).or_default();
                slot.0 += 1;
                if rec.outcome == InputOutcome::Submitted {
                    slot.1 += 1;
                }
            }
        }
        Ok(Arrivals { injects })
    }

    fn total(&self) -> usize {
        self.injects.values().map(|(n, _)| n).sum()
    }
}

/// The checker's findings: a pure function of the history and what arrived.
struct Verdict {
    summary: Value,
    violations: usize,
    line: String,
}

/// At most this many items of each list go into the JSON (the counts are always whole).
const LIST_MAX: usize = 100;

fn capped<T: serde::Serialize>(items: &[T]) -> Value {
    json!(items.iter().take(LIST_MAX).collect::<Vec<_>>())
}

fn check(s: &SoakState, arrivals: &Arrivals) -> Verdict {
    // Drains of REPLY messages: text → life → times; other kinds (late INJECTED/FAILED notices)
    // are counted apart.
    let mut drained: BTreeMap<&str, BTreeMap<u32, usize>> = BTreeMap::new();
    let mut notices: BTreeMap<&str, usize> = BTreeMap::new();
    for d in &s.drains {
        if d.kind == "REPLY" {
            *drained.entry(&d.text).or_default().entry(d.life).or_default() += 1;
        } else {
            *notices.entry(&d.kind).or_default() += 1;
        }
    }
    let arrived = |op: &Op| -> bool {
        match op.tool {
            "bridge_send" => arrivals.injects.contains_key(&op.text),
            _ => drained.contains_key(op.text.as_str()),
        }
    };
    // Operations by kind and class, outcomes counted.
    let mut by_tool: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut outcomes: BTreeMap<&str, BTreeMap<&str, usize>> = BTreeMap::new();
    let mut unknown_arrived: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for op in &s.ops {
        let t = by_tool.entry(op.tool).or_default();
        *t.entry("total").or_default() += 1;
        *t.entry(op.seen.as_str()).or_default() += 1;
        *outcomes.entry(op.tool).or_default().entry(&op.outcome).or_default() += 1;
        if op.seen == Seen::Unknown {
            let u = unknown_arrived.entry(op.tool).or_default();
            if arrived(op) {
                u.0 += 1;
            } else {
                u.1 += 1;
            }
        }
    }
    let class = |c: Seen| s.ops.iter().filter(|o| o.seen == c).count();
    // Lost: ok, never arrived.
    let lost: Vec<&Op> = s.ops.iter().filter(|o| o.seen == Seen::Ok && !arrived(o)).collect();
    // Failed but delivered: a brief injected and submitted, a reply drained.
    let failed_delivered: Vec<&Op> = s
        .ops
        .iter()
        .filter(|o| o.seen == Seen::Failed)
        .filter(|o| match o.tool {
            "bridge_send" => arrivals.injects.get(&o.text).is_some_and(|(_, sub)| *sub > 0),
            _ => drained.contains_key(o.text.as_str()),
        })
        .collect();
    // Duplicated: a brief typed into a pane twice (any class); a reply drained twice in one life.
    let dup_injects: Vec<Value> = arrivals
        .injects
        .iter()
        .filter(|(_, (n, _))| *n > 1)
        .map(|(t, (n, sub))| json!({"text": t, "injects": n, "submitted": sub}))
        .collect();
    let mut dup_drains = Vec::new();
    let mut across_lives = Vec::new();
    for (text, lives) in &drained {
        for (life, times) in lives {
            if *times > 1 {
                dup_drains.push(json!({"text": text, "gatewayLife": life, "drains": times}));
            }
        }
        if lives.len() > 1 {
            across_lives.push(json!({"text": text, "lives": lives.len()}));
        }
    }
    // Unexpected: arrived, sent by no operation.
    let sent: BTreeSet<&str> = s.ops.iter().map(|o| o.text.as_str()).collect();
    let unexpected_injects: Vec<&String> = arrivals.injects.keys().filter(|t| !sent.contains(t.as_str())).collect();
    let unexpected_drains: Vec<&&str> = drained.keys().filter(|t| !sent.contains(**t)).collect();
    let mut nemesis_by_kind: BTreeMap<&str, Value> = BTreeMap::new();
    for strike in Strike::ALL {
        let evs: Vec<&Event> = s.events.iter().filter(|e| e.strike == strike).collect();
        if evs.is_empty() && s.off.contains_key(strike.name()) {
            continue;
        }
        nemesis_by_kind.insert(
            strike.name(),
            json!({
                "count": evs.len(),
                "missed": evs.iter().filter(|e| !e.done).count(),
                "atS": evs.iter().map(|e| (e.at.as_secs_f64() * 10.0).round() / 10.0).collect::<Vec<_>>(),
                "tookS": evs.iter().map(|e| (e.took.as_secs_f64() * 10.0).round() / 10.0).collect::<Vec<_>>(),
            }),
        );
    }
    let events: Vec<Value> = s
        .events
        .iter()
        .map(|e| {
            json!({
                "atS": (e.at.as_secs_f64() * 10.0).round() / 10.0,
                "kind": e.strike.name(),
                "target": e.target,
                "tookS": (e.took.as_secs_f64() * 10.0).round() / 10.0,
                "done": e.done,
                "detail": e.detail,
            })
        })
        .collect();
    let texts = |ops: &[&Op], tool: &str| -> Vec<String> {
        ops.iter().filter(|o| o.tool == tool).map(|o| o.text.clone()).collect()
    };
    let violations = lost.len()
        + failed_delivered.len()
        + dup_injects.len()
        + dup_drains.len()
        + unexpected_injects.len()
        + unexpected_drains.len();
    let ok_briefs = s
        .ops
        .iter()
        .filter(|o| o.tool == "bridge_send" && o.seen == Seen::Ok)
        .count();
    let ok_replies = s
        .ops
        .iter()
        .filter(|o| o.tool == "bridge_reply" && o.seen == Seen::Ok)
        .count();
    let proves_something = ok_briefs > 0 && ok_replies > 0;
    let pass = violations == 0 && proves_something;
    let mut by_tool_json = serde_json::Map::new();
    for (tool, counts) in &by_tool {
        let (arr, not) = unknown_arrived.get(tool).copied().unwrap_or_default();
        by_tool_json.insert(
            tool.to_string(),
            json!({
                "total": counts.get("total").copied().unwrap_or(0),
                "ok": counts.get("ok").copied().unwrap_or(0),
                "failed": counts.get("failed").copied().unwrap_or(0),
                "unknown": counts.get("unknown").copied().unwrap_or(0),
                "unknownArrived": arr,
                "unknownNotArrived": not,
                "outcomes": outcomes.get(tool),
            }),
        );
    }
    by_tool_json.insert(
        "bridge_poll".into(),
        json!({"total": s.polls_ok + s.polls_unknown, "ok": s.polls_ok, "unknown": s.polls_unknown}),
    );
    let config = s.config.as_ref();
    let summary = json!({
        "verdict": if pass { "pass" } else { "fail" },
        "violations": violations,
        "startedAtUnixMs": s.started_unix_ms as u64,
        "durationS": (s.ran_for.as_secs_f64() * 10.0).round() / 10.0,
        "config": {
            "briefsPerWorker": s.briefs_per_worker,
            "repliesPerWorker": s.replies_per_worker,
            "nemesisEveryMs": s.every.as_millis() as u64,
            "opsSpreadOverStrikes": s.spread,
            "nemesisCycle": config.map(|c| c.cycle.iter().map(|s| s.name()).collect::<Vec<_>>()),
            "seed": config.map(|c| c.seed),
            "timeScale": fleet_conformance::timing::time_scale(),
        },
        "operations": by_tool_json,
        "ok": class(Seen::Ok),
        "failed": class(Seen::Failed),
        "unknown": class(Seen::Unknown),
        "lost": {
            "count": lost.len(),
            "briefs": capped(&texts(&lost, "bridge_send")),
            "replies": capped(&texts(&lost, "bridge_reply")),
        },
        "duplicated": {
            "count": dup_injects.len() + dup_drains.len(),
            "injects": capped(&dup_injects),
            "drainsWithinOneGatewayLife": capped(&dup_drains),
        },
        "unexpected": {
            "count": unexpected_injects.len() + unexpected_drains.len(),
            "injects": capped(&unexpected_injects),
            "drains": capped(&unexpected_drains),
        },
        "failedButDelivered": {
            "count": failed_delivered.len(),
            "briefs": capped(&texts(&failed_delivered, "bridge_send")),
            "replies": capped(&texts(&failed_delivered, "bridge_reply")),
        },
        "redeliveredAcrossGatewayLives": capped(&across_lives),
        "arrived": {
            "injectRecords": arrivals.total(),
            "distinctBriefsInjected": arrivals.injects.len(),
            "replyDrains": drained.values().flat_map(|l| l.values()).sum::<usize>(),
            "distinctRepliesDrained": drained.len(),
            "otherDrainedKinds": notices,
        },
        "nemesis": {
            "strikes": s.events.len(),
            "byKind": nemesis_by_kind,
            "off": s.off,
            "events": events,
        },
        "provesSomething": proves_something,
    });
    let line = format!(
        "soak history: {} — ops {} (ok {} / failed {} / unknown {}; briefs ok {ok_briefs}, replies ok {ok_replies}); \
         lost {}, duplicated {}, unexpected {}, failed-but-delivered {}; nemesis {} strikes {:?}; {:.0} s",
        if pass { "PASS" } else { "FAIL" },
        s.ops.len(),
        class(Seen::Ok),
        class(Seen::Failed),
        class(Seen::Unknown),
        lost.len(),
        dup_injects.len() + dup_drains.len(),
        unexpected_injects.len() + unexpected_drains.len(),
        failed_delivered.len(),
        s.events.len(),
        nemesis_by_kind
            .iter()
            .map(|(k, v)| format!("{k}×{}", v["count"]))
            .collect::<Vec<_>>(),
        s.ran_for.as_secs_f64(),
    );
    Verdict {
        summary,
        violations,
        line,
    }
}

/// `<reports>/<broker>/soak.json`, where the runner writes `cucumber.json` (steps/main.rs).
fn summary_path(w: &FleetWorld) -> anyhow::Result<std::path::PathBuf> {
    let root = match std::env::var_os("FLEET_E2E_OUT") {
        Some(dir) if !dir.is_empty() => std::path::PathBuf::from(dir),
        _ => crate::workspace_root().join("target").join("fleet-e2e"),
    };
    let label = w.suite()?.broker.spec().label().replace(':', "-");
    Ok(root.join(label).join("soak.json"))
}

#[then(
    expr = "after healing, the history of {string} with {string} and {string} shows nothing lost, unexpected or duplicated"
)]
async fn history(w: &mut FleetWorld, main: String, w1: String, w2: String) -> anyhow::Result<()> {
    for h in w.hosts.keys().cloned().collect::<Vec<_>>() {
        w.host_mut(&h)?.gateway.wait_ready(Duration::from_secs(60)).await?;
    }
    // Healing: drain the main and watch the panes until every ok operation arrived and nothing new
    // came for a quiet window (late injects of unknown briefs, redeliveries — a duplicate that
    // comes late must still be seen), or a deadline.
    let handle = w.mcp(&main).await?.handle();
    // (The inject bound is already stretched by the time knob, steps/hosts.rs.)
    let quiet = w.inject_bound() + scaled(Duration::from_secs(2));
    let deadline = Instant::now() + scaled(Duration::from_secs(90));
    let workers = [&w1, &w2];
    let mut last_seen = (usize::MAX, usize::MAX);
    let mut last_change = Instant::now();
    loop {
        let life = w.soak.main_life.load(Ordering::Relaxed);
        let v = handle.call("bridge_poll", json!({"max": 500})).await;
        if record_poll(&v, life, &mut w.soak.drains) {
            w.soak.polls_ok += 1;
        } else {
            w.soak.polls_unknown += 1;
        }
        let arrivals = Arrivals::read(w, &workers)?;
        let now_seen = (arrivals.total(), w.soak.drains.len());
        if now_seen != last_seen {
            last_seen = now_seen;
            last_change = Instant::now();
        }
        let drained: BTreeSet<&str> = w.soak.drains.iter().map(|d| d.text.as_str()).collect();
        let missing = w
            .soak
            .ops
            .iter()
            .filter(|o| o.seen == Seen::Ok)
            .filter(|o| match o.tool {
                "bridge_send" => !arrivals.injects.contains_key(&o.text),
                _ => !drained.contains(o.text.as_str()),
            })
            .count();
        if (missing == 0 && last_change.elapsed() >= quiet) || Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let arrivals = Arrivals::read(w, &workers)?;
    let verdict = check(&w.soak, &arrivals);
    let mut summary = verdict.summary;
    summary["broker"] = json!(w.suite()?.broker.spec().label());
    summary["brokerVersion"] = json!(w.suite()?.broker.version());
    summary["scenarioDir"] = json!(w.dir.display().to_string());
    summary["config"]["injectBoundMs"] = json!(w.inject_bound().as_millis() as u64);
    let path = summary_path(w)?;
    let pretty = serde_json::to_string_pretty(&summary)?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, format!("{pretty}\n")).with_context(|| format!("writing {}", path.display()))?;
    println!("{pretty}");
    println!("{} (summary: {})", verdict.line, path.display());
    anyhow::ensure!(
        verdict.violations == 0,
        "{}\nlost: {}\nduplicated: {}\nunexpected: {}\nfailed but delivered: {}\n(full summary: {}; gateway logs under {})",
        verdict.line,
        summary["lost"],
        summary["duplicated"],
        summary["unexpected"],
        summary["failedButDelivered"],
        path.display(),
        w.dir.display(),
    );
    anyhow::ensure!(
        summary["provesSomething"] == true,
        "no brief or no reply was acknowledged, so the history proves nothing: {}",
        verdict.line
    );
    Ok(())
}
