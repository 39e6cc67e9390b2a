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

use crate::config::{QueueArgs, QueueType};

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

/// `<queue>.converting`: where `fleet-gateway convert-inboxes` keeps a queue's messages while
/// it converts the queue (CLU-7). Its existence means "conversion unfinished": a gateway in quorum
/// mode does not consume an inbox while it exists.
pub fn converting_queue(queue: &str) -> String {
    format!("{queue}.converting")
}

/// The gid of an inbox queue name (`agent.<gid>.inbox.v2`), if `queue` is one.
pub fn inbox_gid(queue: &str) -> Option<&str> {
    queue
        .strip_prefix("agent.")?
        .strip_suffix(".inbox.v2")
        .filter(|gid| crate::envelope::is_uuid(gid))
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

/// The AMQP reply code of a broker refusal (403, 404, 405, 406, …), if `e` is one.
pub fn amqp_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

/// CON-2 / TOP-3: the context of a failed declare-and-consume of one of the host's own queues
/// (`roster.<host>`, `control.<host>`), in the gateway's own words: it names the queue and the
/// host whatever the broker says. RabbitMQ's refusal happens to name the queue ("cannot obtain
/// exclusive access to locked queue 'roster.b' …"); LavinMQ's does not ("RESOURCE_LOCKED -
/// Exclusive queue"), and CONTRACT §5 judges the gateway's ERROR line, not the broker's words.
/// A 405 (RESOURCE_LOCKED), or a 403 about exclusive use, means another connection holds the
/// queue: another gateway for the same host is running.
pub fn host_queue_refusal(err: anyhow::Error, queue: &str, host: &str, role: &str) -> anyhow::Error {
    let refusal = err
        .chain()
        .find_map(|e| e.downcast_ref::<lapin::Error>())
        .and_then(|e| match e.kind() {
            lapin::ErrorKind::ProtocolError(p) => Some((p.get_id(), p.get_message().to_string())),
            _ => None,
        });
    let held = match &refusal {
        Some((405, _)) => true,
        Some((403, text)) => text.to_ascii_lowercase().contains("exclusive"),
        _ => false,
    };
    let words = if held {
        format!(
            "cannot take {queue}, the {role} of host {host}: the broker refused it as held by another connection, \
             so another gateway for host {host} is running (CON-2); not ready until it is free"
        )
    } else {
        format!("declaring and consuming {queue}, the {role} of host {host} (TOP-3)")
    };
    err.context(words)
}

/// CLU-2: `x-queue-type=quorum` for the durable queues of a quorum-mode gateway; nothing in
/// classic mode (SPEC §1 unchanged: no `x-queue-type` argument at all).
fn add_queue_type(args: &mut FieldTable, queue_type: QueueType) {
    if queue_type == QueueType::Quorum {
        args.insert("x-queue-type".into(), long("quorum"));
    }
}

/// `bridge.dlq`'s arguments: capped, drop-head (TOP-4, CAP-5), quorum in quorum mode (CLU-2).
pub fn dlq_arguments(q: &QueueArgs) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(q.dlq_max_length.into()));
    args.insert("x-overflow".into(), long("drop-head"));
    add_queue_type(&mut args, q.queue_type);
    args
}

/// `control.<host>`'s arguments: dead-lettered ([C-8]), quorum in quorum mode (CLU-2).
pub fn control_arguments(q: &QueueArgs) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(DLX));
    add_queue_type(&mut args, q.queue_type);
    args
}

/// TOP-1: the four mandatory exchanges and `bridge.dlq`. `bridge.delay` is tried on its own
/// channel afterwards; its absence is logged and tolerated.
pub async fn declare_core(ch: &Channel, q: &QueueArgs) -> lapin::Result<()> {
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
    ch.queue_declare(DLQ.into(), durable(), dlq_arguments(q)).await?;
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

/// How many probes are running in this process ([`is_probe_noise`]).
static DELAY_PROBES: AtomicUsize = AtomicUsize::new(0);

/// Counts one running probe while it lives: a broker question whose expected answer may be a
/// refusal that lapin logs at ERROR although the gateway handles it (see [`is_probe_noise`]).
pub struct ProbeRunning;

impl ProbeRunning {
    pub fn start() -> ProbeRunning {
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
///
/// The same holds for two questions of a quorum-mode gateway (SPEC §16) whose expected answer is
/// a channel refusal lapin logs at ERROR ("Channel closed"): the look for `<inbox>.converting`
/// before an inbox is consumed (a 404 almost always, CLU-7), and the periodic retry of an inbox
/// already refused (the gateway said so at ERROR once, in its own words, naming the queue).
pub fn is_probe_noise(meta: &tracing::Metadata<'_>) -> bool {
    *meta.level() == tracing::Level::ERROR
        && meta.target().starts_with("lapin")
        && DELAY_PROBES.load(Ordering::SeqCst) > 0
}

/// TOP-1 (optional part): `bridge.delay`. Returns whether the broker has the exchange type.
///
/// RabbitMQ 3.10 answers an unknown exchange type with a *connection* error (503 COMMAND_INVALID),
/// 4.0 with a *channel* error (406 PRECONDITION_FAILED), so the attempt runs on a throwaway
/// connection of its own ([`is_probe_noise`] for its log). Where the declare succeeds, the channel
/// is closed (and its close-ok awaited) before the connection: closing the connection with the
/// channel still open made LavinMQ close that channel while lapin was already closing it, which
/// lapin logged at ERROR (`invalid channel state: Closing (channel.close)`) on every start.
///
/// Where only the channel was refused (4.0), lapin removes it from its table in a task of its own
/// once it has sent `channel.close-ok`; when the connection's close overtakes that task, lapin
/// removes the channel a second time and logs `Connection error error=invalid channel: 1` at
/// ERROR just *after* the probe returned (issue 57: twice in ~1,000 gateway starts on 4.0.5; a
/// wait for the channel to close and one more round trip first did not prevent it). So the window
/// stays open until lapin's `invalid channel` error event for that connection (it follows the log
/// line; the refused channel's own error event comes earlier and does not count), at most 250 ms,
/// then up to [`LATE_PROBE_NOISE`] more in the background.
pub async fn declare_delay(url: &str, ca: Option<&crate::tls::Roots>, connect_timeout: std::time::Duration) -> bool {
    let _running = ProbeRunning::start();
    let connecting = crate::tls::connect(url, ca, lapin::ConnectionProperties::default());
    let Ok(Ok(conn)) = tokio::time::timeout(connect_timeout, connecting).await else {
        return false;
    };
    // Subscribed before the declare: lapin logs "Connection error" and only then sends the
    // error event, so receiving the event means its log line is behind us (inside the window
    // of `_running`).
    let mut events = conn.events_listener();
    let mut refused_channel = false;
    let ok = match conn.create_channel().await {
        Ok(ch) => {
            let ok = try_declare_delay(&ch).await;
            if ok && let Err(e) = ch.close(200, "probe done".into()).await {
                tracing::debug!(error = %e, "closing the bridge.delay probe's channel");
            }
            refused_channel = !ok;
            ok
        }
        Err(_) => false,
    };
    // How long lapin may still be finishing with the probe's connection once it is closed.
    let (wait, what) = if conn.status().connected() {
        if let Err(e) = conn.close(200, "probe done".into()).await {
            tracing::debug!(error = %e, "closing the bridge.delay probe's connection");
        }
        // RabbitMQ 4.x refused only the channel: lapin drops it in a task of its own, and when
        // the connection's close overtakes that task it drops it twice and logs "Connection
        // error … invalid channel" (once in ~250 starts on 4.0.5). The error event follows that
        // line; a clean close sends none, so this waits out its bound.
        (
            refused_channel.then_some(std::time::Duration::from_millis(250)),
            "after its close",
        )
    } else {
        // The broker closed it (RabbitMQ 3.x: no such exchange type).
        (Some(std::time::Duration::from_secs(2)), "after the broker closed it")
    };
    // On 4.x, wait for the connection's own error: the refused channel's close-ok already sent an
    // error event (the 406, which lapin does not log), so any error event would end the wait
    // before lapin's "invalid channel" line (seen in a quiet run on 4.0.5, issue 59).
    let waited = match wait {
        Some(wait) if refused_channel => tokio::time::timeout(wait, invalid_channel_event(&mut events)).await,
        Some(wait) => tokio::time::timeout(wait, error_event(&mut events)).await,
        None => Ok(()),
    };
    if let Some(wait) = wait
        && waited.is_err()
    {
        tracing::debug!(?wait, "the bridge.delay probe's connection reported no error {what}");
        if refused_channel {
            // On a loaded machine lapin's second removal can come later than the wait (seen once
            // more in ~200 starts on 4.0.5 after the 250 ms window): its line stays filtered for
            // a while longer in the background, and the start does not wait for it.
            let late = ProbeRunning::start();
            tokio::spawn(async move {
                let _late = late;
                let _ = tokio::time::timeout(LATE_PROBE_NOISE, invalid_channel_event(&mut events)).await;
                drop(conn);
            });
        }
    }
    ok
}

/// How long lapin's late `invalid channel` line of a refused probe channel stays filtered after
/// the probe returned (in the background; only lapin's ERROR lines are dropped meanwhile, and the
/// gateway says every failure it acts on in its own words).
const LATE_PROBE_NOISE: std::time::Duration = std::time::Duration::from_secs(3);

/// Resolves at the connection's next error event (lapin sends it after logging the error).
async fn error_event(events: &mut (impl futures_util::Stream<Item = lapin::Event> + Unpin)) {
    while let Some(ev) = futures_util::StreamExt::next(events).await {
        if matches!(ev, lapin::Event::Error(_)) {
            break;
        }
    }
}

/// Resolves at the connection's error event for a channel it no longer knows (lapin's second
/// removal of the refused probe channel; it logs `invalid channel: 1` just before).
async fn invalid_channel_event(events: &mut (impl futures_util::Stream<Item = lapin::Event> + Unpin)) {
    while let Some(ev) = futures_util::StreamExt::next(events).await {
        if let lapin::Event::Error(e) = ev
            && e.to_string().contains("invalid channel")
        {
            break;
        }
    }
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

/// The inbox arguments: the four of TOP-2 / TOP-4 and, in quorum mode, those of CLU-2..CLU-4:
/// `x-queue-type=quorum`, `x-single-active-consumer=true` (CLU-3: a quorum queue does not
/// enforce an exclusive consumer), `x-overflow=reject-publish` (CLU-4: a publish over the cap is
/// nacked to its sender) and `x-dead-letter-strategy=at-least-once` (expired messages reach
/// `bridge.dlq` at-least-once; it needs `reject-publish`).
pub fn inbox_arguments(q: &QueueArgs) -> FieldTable {
    let mut args = FieldTable::default();
    args.insert("x-dead-letter-exchange".into(), long(DLX));
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(q.inbox_max_length.into()));
    args.insert(
        "x-message-ttl".into(),
        AMQPValue::LongLongInt(q.inbox_ttl.as_millis() as i64),
    );
    args.insert(
        "x-expires".into(),
        AMQPValue::LongLongInt(q.inbox_expires.as_millis() as i64),
    );
    if q.queue_type == QueueType::Quorum {
        add_queue_type(&mut args, q.queue_type);
        args.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
        args.insert("x-overflow".into(), long("reject-publish"));
        args.insert("x-dead-letter-strategy".into(), long("at-least-once"));
    }
    args
}

/// The routing keys an inbox is bound to on `bridge.msg`: its gid, `broadcast.all`, and
/// `broadcast.<g>` for each of its groups (TOP-2).
pub fn inbox_keys(gid: &str, groups: &[String]) -> Vec<String> {
    let mut keys = vec![gid.to_string(), broadcast_key("all")];
    keys.extend(groups.iter().map(|g| broadcast_key(g)));
    keys
}

/// Declares queue `queue` durable with `args` (an inbox, or a control queue, or `bridge.dlq`).
pub async fn declare_durable(ch: &Channel, queue: &str, args: FieldTable) -> lapin::Result<lapin::Queue> {
    ch.queue_declare(queue.into(), durable(), args).await
}

/// TOP-2: declares an entity's inbox with all its arguments and binds it to its gid and to the
/// broadcast keys of `broadcast.all` and each of its groups.
pub async fn declare_inbox(ch: &Channel, q: &QueueArgs, gid: &str, groups: &[String]) -> lapin::Result<()> {
    let queue = inbox_queue(gid);
    declare_durable(ch, &queue, inbox_arguments(q)).await?;
    for key in inbox_keys(gid, groups) {
        ch.queue_bind(
            queue.as_str().into(),
            MSG_EXCHANGE.into(),
            key.as_str().into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await?;
    }
    Ok(())
}

/// Passive declare: `Ok(Some((messages, consumers)))`, `Ok(None)` when the queue does not exist
/// (a 404, which closes `ch`; not logged as an error: [`crate::expected_close`]).
pub async fn peek(ch: &Channel, queue: &str) -> lapin::Result<Option<(u32, u32)>> {
    let opts = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    let _looking = crate::expected_close::LookingFor::start(ch.id());
    match ch.queue_declare(queue.into(), opts, FieldTable::default()).await {
        Ok(q) => Ok(Some((q.message_count(), q.consumer_count()))),
        Err(e) if amqp_code(&e) == Some(404) => Ok(None),
        Err(e) => Err(e),
    }
}

/// TOP-6: deletes an entity's inbox (its bindings go with it).
pub async fn delete_inbox(ch: &Channel, gid: &str) -> lapin::Result<()> {
    ch.queue_delete(inbox_queue(gid).as_str().into(), QueueDeleteOptions::default())
        .await?;
    Ok(())
}

/// TOP-3: `control.<host>` (durable, dead-lettered [C-8], quorum in quorum mode) bound to
/// `bridge.control` by host id.
pub async fn declare_control(ch: &Channel, args: &QueueArgs, host: &str) -> lapin::Result<String> {
    let q = control_queue(host);
    ch.queue_declare(q.as_str().into(), durable(), control_arguments(args))
        .await?;
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
/// Classic in both modes (CLU-2): it lives and dies with the gateway's connection.
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

/// Options of an inbox consumer: manual ack; exclusive for a classic inbox (TOP-2, CON-2), not
/// for a quorum one (CLU-3: the single-active-consumer argument makes a second consumer a
/// standby, and the passive-declare check before consuming refuses a held inbox).
pub fn inbox_consumer(queue_type: QueueType) -> BasicConsumeOptions {
    BasicConsumeOptions {
        no_ack: false,
        exclusive: queue_type == QueueType::Classic,
        ..BasicConsumeOptions::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::time::Duration;

    fn args(queue_type: QueueType) -> QueueArgs {
        QueueArgs {
            queue_type,
            inbox_max_length: 1000,
            inbox_ttl: Duration::from_millis(86_400_000),
            inbox_expires: Duration::from_millis(604_800_000),
            dlq_max_length: 10_000,
        }
    }

    /// A field table as `name → value` text, for whole-table comparisons.
    fn table(t: &FieldTable) -> BTreeMap<String, String> {
        t.inner()
            .iter()
            .map(|(k, v)| {
                let v = match v {
                    AMQPValue::LongString(s) => format!("{:?}", s.to_string()),
                    AMQPValue::LongLongInt(i) => i.to_string(),
                    AMQPValue::Boolean(b) => b.to_string(),
                    other => format!("{other:?}"),
                };
                (k.to_string(), v)
            })
            .collect()
    }

    fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn classic_mode_declares_what_spec_section_1_says() {
        let a = args(QueueType::Classic);
        assert_eq!(
            table(&inbox_arguments(&a)),
            expect(&[
                ("x-dead-letter-exchange", "\"bridge.dlx\""),
                ("x-max-length", "1000"),
                ("x-message-ttl", "86400000"),
                ("x-expires", "604800000"),
            ])
        );
        assert_eq!(
            table(&control_arguments(&a)),
            expect(&[("x-dead-letter-exchange", "\"bridge.dlx\"")])
        );
        assert_eq!(
            table(&dlq_arguments(&a)),
            expect(&[("x-max-length", "10000"), ("x-overflow", "\"drop-head\"")])
        );
        assert!(inbox_consumer(QueueType::Classic).exclusive, "CON-2: exclusive");
    }

    #[test]
    fn quorum_mode_adds_the_cluster_profile_arguments() {
        let a = args(QueueType::Quorum);
        assert_eq!(
            table(&inbox_arguments(&a)),
            expect(&[
                ("x-dead-letter-exchange", "\"bridge.dlx\""),
                ("x-max-length", "1000"),
                ("x-message-ttl", "86400000"),
                ("x-expires", "604800000"),
                ("x-queue-type", "\"quorum\""),
                ("x-single-active-consumer", "true"),
                ("x-overflow", "\"reject-publish\""),
                ("x-dead-letter-strategy", "\"at-least-once\""),
            ]),
            "CLU-2, CLU-3, CLU-4"
        );
        assert_eq!(
            table(&control_arguments(&a)),
            expect(&[
                ("x-dead-letter-exchange", "\"bridge.dlx\""),
                ("x-queue-type", "\"quorum\""),
            ])
        );
        assert_eq!(
            table(&dlq_arguments(&a)),
            expect(&[
                ("x-max-length", "10000"),
                ("x-overflow", "\"drop-head\""),
                ("x-queue-type", "\"quorum\""),
            ]),
            "CAP-5: bridge.dlq keeps drop-head"
        );
        let c = inbox_consumer(QueueType::Quorum);
        assert!(!c.exclusive && !c.no_ack, "CLU-3: manual ack, not exclusive");
    }

    #[test]
    fn names_of_the_conversion() {
        let gid = "0b7e7c1e-6a0e-4c8e-9d4f-1c2b3a4d5e6f";
        let q = inbox_queue(gid);
        assert_eq!(inbox_gid(&q), Some(gid));
        assert_eq!(converting_queue(&q), format!("agent.{gid}.inbox.v2.converting"));
        assert_eq!(inbox_gid("agent.w1:p2.inbox"), None);
        assert_eq!(inbox_gid("agent.0B7E7C1E-6A0E-4C8E-9D4F-1C2B3A4D5E6F.inbox.v2"), None);
        assert_eq!(inbox_gid(&converting_queue(&q)), None);
        assert_eq!(
            inbox_keys(gid, &["ops".to_string()]),
            vec![gid.to_string(), "broadcast.all".into(), "broadcast.ops".into()]
        );
    }

    /// A broker refusal as lapin reports it: the channel.close's reply code and text.
    fn refused(code: u16, text: &str) -> anyhow::Error {
        let amqp = lapin::protocol::AMQPError::from_id(code, text.into()).expect("a known reply code");
        anyhow::Error::new(lapin::Error::from(lapin::ErrorKind::ProtocolError(amqp)))
    }

    /// CON-2 on LavinMQ 2.5: a second gateway's `queue.declare` of `roster.b` (exclusive, held by
    /// the first gateway's connection) is answered by `send_resource_locked(frame, "Exclusive
    /// queue")`: channel.close 405 "RESOURCE_LOCKED - Exclusive queue", which names no queue. The
    /// ERROR line must name it in the gateway's own words (CONTRACT §5).
    #[test]
    fn a_roster_held_elsewhere_is_named_in_the_gateways_words_on_lavinmq() {
        const LAVINMQ: &str = "RESOURCE_LOCKED - Exclusive queue";
        let line = format!(
            "{:#}",
            host_queue_refusal(refused(405, LAVINMQ), "roster.b", "b", "roster queue")
        );
        assert!(!LAVINMQ.contains("roster.b"), "the broker's words carry no name");
        assert!(line.contains("roster.b"), "{line}");
        assert!(line.contains("another gateway for host b"), "{line}");
        assert!(line.contains(LAVINMQ), "the broker's words follow: {line}");
        // RabbitMQ's refusal of the same declare, and an exclusive consumer's 403: same words.
        let rabbit = "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue 'roster.b' in vhost 'v'";
        for err in [
            refused(405, rabbit),
            refused(403, "ACCESS_REFUSED - queue 'control.b' in vhost 'v' in exclusive use"),
        ] {
            let line = format!("{:#}", host_queue_refusal(err, "control.b", "b", "control queue"));
            assert!(
                line.starts_with("cannot take control.b, the control queue of host b"),
                "{line}"
            );
        }
        // Any other failure still names the queue, without blaming another gateway.
        let denied = refused(
            403,
            "ACCESS_REFUSED - access to queue 'roster.b' in vhost 'v' refused for user 'b'",
        );
        let line = format!("{:#}", host_queue_refusal(denied, "roster.b", "b", "roster queue"));
        assert!(
            line.starts_with("declaring and consuming roster.b, the roster queue of host b (TOP-3)"),
            "{line}"
        );
        let lost = host_queue_refusal(anyhow::anyhow!("connection lost"), "roster.b", "b", "roster queue");
        assert!(format!("{lost:#}").contains("roster.b"));
    }
}
