//! The broker topology of SPEC §1: exchanges, the DLQ, inboxes, control and roster queues.
//!
//! Declarations are idempotent and always carry the same arguments, because a redeclare with other
//! arguments is a 406 that closes the channel (TOP-5); callers treat such an error as "log, reopen
//! the channel, stay up".

use lapin::options::{
    BasicConsumeOptions, ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, ExchangeKind};

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::Config;

pub const MSG_EXCHANGE: &str = "bridge.msg";
pub const ROSTER_EXCHANGE: &str = "bridge.roster";
pub const CONTROL_EXCHANGE: &str = "bridge.control";
pub const DLX: &str = "bridge.dlx";
pub const DELAY_EXCHANGE: &str = "bridge.delay";
pub const DLQ: &str = "bridge.dlq";

/// `agent.<gid>.inbox.v2`: the recipient-keyed inbox (MIG-1: never the v1 name with arguments).
pub fn inbox_queue(gid: &str) -> String {
    format!("agent.{gid}.inbox.v2")
}

pub fn control_queue(host: &str) -> String {
    format!("control.{host}")
}

pub fn roster_queue(host: &str) -> String {
    format!("roster.{host}")
}

/// Routing key of a broadcast to `group` (`all` or a group name).
pub fn broadcast_key(group: &str) -> String {
    format!("broadcast.{group}")
}

fn long(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

fn durable() -> QueueDeclareOptions {
    QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    }
}

/// TOP-1: the four mandatory exchanges and `bridge.dlq`. `bridge.delay` is tried on its own
/// channel afterwards; its absence is logged and tolerated.
pub async fn declare_core(ch: &Channel, cfg: &Config) -> lapin::Result<()> {
    let opts = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(MSG_EXCHANGE.into(), ExchangeKind::Topic, opts, FieldTable::default())
        .await?;
    ch.exchange_declare(ROSTER_EXCHANGE.into(), ExchangeKind::Topic, opts, FieldTable::default())
        .await?;
    ch.exchange_declare(
        CONTROL_EXCHANGE.into(),
        ExchangeKind::Direct,
        opts,
        FieldTable::default(),
    )
    .await?;
    ch.exchange_declare(DLX.into(), ExchangeKind::Fanout, opts, FieldTable::default())
        .await?;
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(cfg.dlq_max_length.into()));
    args.insert("x-overflow".into(), long("drop-head"));
    ch.queue_declare(DLQ.into(), durable(), args).await?;
    ch.queue_bind(
        DLQ.into(),
        DLX.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    Ok(())
}

/// How many `bridge.delay` probes are running in this process ([`is_probe_noise`]).
static DELAY_PROBES: AtomicUsize = AtomicUsize::new(0);

/// Counts one running probe while it lives.
struct ProbeRunning;

impl ProbeRunning {
    fn start() -> ProbeRunning {
        DELAY_PROBES.fetch_add(1, Ordering::SeqCst);
        ProbeRunning
    }
}

impl Drop for ProbeRunning {
    fn drop(&mut self) {
        DELAY_PROBES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Whether a log event is lapin's ERROR while a `bridge.delay` probe runs: RabbitMQ without the
/// plugin answers the probe's declare by closing its connection (503 COMMAND_INVALID), which lapin
/// logs at ERROR twice ("Connection closed", "Connection error") although it is the expected
/// answer, and the probe's own `info!` says what it found. A healthy start logs no ERROR line
/// (CONTRACT §5), so the log layer (`main.rs`) drops exactly these: lapin's, at ERROR, while a
/// probe runs (a few milliseconds of the setup, before any consumer exists). The gateway reports
/// every failure it acts on in its own words, so nothing else goes unsaid.
pub fn is_probe_noise(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == tracing::Level::ERROR
        && meta.target().starts_with("lapin")
        && DELAY_PROBES.load(Ordering::SeqCst) > 0
}

/// TOP-1 (optional part): `bridge.delay`. Returns whether the broker has the exchange type.
///
/// RabbitMQ answers an unknown exchange type with a *connection* error (503 COMMAND_INVALID), so
/// the attempt runs on a throwaway connection of its own ([`is_probe_noise`] for its log). Where
/// the declare succeeds, the channel is closed (and its close-ok awaited) before the connection:
/// closing the connection with the channel still open made LavinMQ close that channel while
/// lapin was already closing it, which lapin logged at ERROR (`invalid channel state: Closing
/// (channel.close)`) on every start.
pub async fn declare_delay(url: &str, ca: Option<&crate::tls::Roots>) -> bool {
    let _running = ProbeRunning::start();
    let Ok(conn) = crate::tls::connect(url, ca, lapin::ConnectionProperties::default()).await else {
        return false;
    };
    // Subscribed before the declare: lapin logs "Connection error" and only then sends the
    // error event, so receiving the event means its log line is behind us (inside the window
    // of `_running`).
    let mut events = conn.events_listener();
    let ok = match conn.create_channel().await {
        Ok(ch) => {
            let ok = try_declare_delay(&ch).await;
            if ok && let Err(e) = ch.close(200, "probe done".into()).await {
                tracing::debug!(error = %e, "closing the bridge.delay probe's channel");
            }
            ok
        }
        Err(_) => false,
    };
    if conn.status().connected() {
        if let Err(e) = conn.close(200, "probe done".into()).await {
            tracing::debug!(error = %e, "closing the bridge.delay probe's connection");
        }
    } else {
        // The broker closed it (no such exchange type): wait for lapin to finish with it, at
        // most a moment; a missed event only lets its ERROR lines through.
        let closed = async {
            while let Some(ev) = futures_util::StreamExt::next(&mut events).await {
                if matches!(ev, lapin::Event::Error(_)) {
                    break;
                }
            }
        };
        if tokio::time::timeout(std::time::Duration::from_secs(2), closed)
            .await
            .is_err()
        {
            tracing::debug!("the bridge.delay probe's connection reported no error within 2 s");
        }
    }
    ok
}

async fn try_declare_delay(ch: &Channel) -> bool {
    let mut args = FieldTable::default();
    args.insert("x-delayed-type".into(), long("topic"));
    let opts = ExchangeDeclareOptions {
        durable: true,
        ..ExchangeDeclareOptions::default()
    };
    ch.exchange_declare(
        DELAY_EXCHANGE.into(),
        ExchangeKind::Custom("x-delayed-message".into()),
        opts,
        args,
    )
    .await
    .is_ok()
}

/// The four inbox arguments of TOP-2 / TOP-4.
pub fn inbox_arguments(cfg: &Config) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(DLX));
    args.insert(
        "x-max-length".into(),
        AMQPValue::LongLongInt(cfg.inbox_max_length.into()),
    );
    args.insert(
        "x-message-ttl".into(),
        AMQPValue::LongLongInt(cfg.inbox_ttl.as_millis() as i64),
    );
    args.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(cfg.inbox_expires.as_millis() as i64),
    );
    args
}

/// TOP-2: declares an entity's inbox with all four arguments and binds it to its gid and to the
/// broadcast keys of `broadcast.all` and each of its groups.
pub async fn declare_inbox(ch: &Channel, cfg: &Config, gid: &str, groups: &[String]) -> lapin::Result<()> {
    let q = inbox_queue(gid);
    ch.queue_declare(q.as_str().into(), durable(), inbox_arguments(cfg))
        .await?;
    let mut keys = vec![gid.to_string(), broadcast_key("all")];
    keys.extend(groups.iter().map(|g| broadcast_key(g)));
    for key in keys {
        ch.queue_bind(
            q.as_str().into(),
            MSG_EXCHANGE.into(),
            key.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    }
    Ok(())
}

/// TOP-6: deletes an entity's inbox (its bindings go with it).
pub async fn delete_inbox(ch: &Channel, gid: &str) -> lapin::Result<()> {
    ch.queue_delete(inbox_queue(gid).as_str().into(), QueueDeleteOptions::default())
        .await?;
    Ok(())
}

/// TOP-3: `control.<host>` (durable, dead-lettered [C-8]) bound to `bridge.control` by host id.
pub async fn declare_control(ch: &Channel, host: &str) -> lapin::Result<String> {
    let q = control_queue(host);
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(DLX));
    ch.queue_declare(q.as_str().into(), durable(), args).await?;
    ch.queue_bind(
        q.as_str().into(),
        CONTROL_EXCHANGE.into(),
        host.into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    Ok(q)
}

/// TOP-3: `roster.<host>` (exclusive, auto-delete, dead-lettered [C-8]) bound to `roster.#`.
pub async fn declare_roster(ch: &Channel, host: &str) -> lapin::Result<String> {
    let q = roster_queue(host);
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(DLX));
    let opts = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..QueueDeclareOptions::default()
    };
    ch.queue_declare(q.as_str().into(), opts, args).await?;
    ch.queue_bind(
        q.as_str().into(),
        ROSTER_EXCHANGE.into(),
        "roster.#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    Ok(q)
}

/// Options of an inbox consumer: manual ack, exclusive (TOP-2, CON-2).
pub fn exclusive_consumer() -> BasicConsumeOptions {
    BasicConsumeOptions {
        no_ack: false,
        exclusive: true,
        ..BasicConsumeOptions::default()
    }
}
