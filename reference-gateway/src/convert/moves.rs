//! The broker moves of a conversion (SPEC §16, CLU-7): the AMQP operations that carry out
//! [`super::plan`](mod@super::plan) — moving every message of `<queue>` into `<queue>.converting`
//! and back through the fanout exchanges, confirmed and in order, deleting and redeclaring the
//! queue.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::StreamExt as _;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicGetOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};

use super::{
    ConvertError, Found, Outcome, Plan, Report, STEP, Target, back_exchange, message_key, plan, temp_exchange,
};
use crate::config::{BrokerConfig, QueueArgs, QueueType};
use crate::topology::{self, DLX};

/// Messages moved per confirmed batch.
const BATCH: usize = 100;

/// While reading a quorum queue's ids, the longest wait for the next message.
const READ_IDLE: Duration = Duration::from_secs(3);

/// How many times step 1 drains the source again because a message arrived before its delete.
const DELETE_ROUNDS: u32 = 50;

/// The routing key a moved message is published with: its envelope's `to` header, the key
/// `bridge.msg` (or `bridge.control`) routed it by and the one a gateway checks the delivery's
/// routing key against (SIG-2 step 3); else, for a message without one, the key it arrived with.
/// For every message a gateway published the two are the same; one that reached the queue another
/// way (the default exchange, keyed by the queue's name) is delivered as its envelope says.
pub fn route_key(d: &Delivery) -> lapin::types::ShortString {
    d.properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("to"))
        .and_then(crate::envelope::header_string)
        .filter(|to| !to.is_empty() && to.len() <= 255)
        .map(|to| to.as_str().into())
        .unwrap_or_else(|| d.routing_key.clone())
}

/// One broker step, bounded by [`STEP`], its error named by `what`.
async fn step<T>(what: impl Into<String>, fut: impl Future<Output = lapin::Result<T>>) -> Result<T, ConvertError> {
    match tokio::time::timeout(STEP, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(ConvertError::Broker {
            what: what.into(),
            source,
        }),
        Err(_) => Err(ConvertError::Timeout { what: what.into() }),
    }
}

/// The temporary queue's arguments: dead-lettered like the inbox, so a message whose own
/// expiration passes while it waits there reaches `bridge.dlq` as it would have from the inbox.
fn temp_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from(DLX)),
    );
    args
}

/// Connects to the first node of the list that answers.
pub async fn connect(broker: &BrokerConfig) -> Result<Connection, ConvertError> {
    let mut failures = Vec::new();
    for i in 0..broker.nodes() {
        let props = ConnectionProperties::default().with_connection_name("fleet-gateway convert-inboxes".into());
        let url = broker.url_effective(i);
        let connecting = crate::tls::connect(&url, broker.tls_ca.as_ref(), props);
        match tokio::time::timeout(broker.connect_timeout(), connecting).await {
            Ok(Ok(conn)) => return Ok(conn),
            Ok(Err(e)) => failures.push(format!("{}: {e:#}", broker.node_masked(i))),
            Err(_) => failures.push(format!(
                "{}: no answer within {:?}",
                broker.node_masked(i),
                broker.connect_timeout()
            )),
        }
    }
    Err(ConvertError::Connect(format!(
        "no node of FLEET_AMQP_URL answered: {}",
        failures.join("; ")
    )))
}

/// Converts `queue` on `conn` to quorum with `args`' quorum arguments (or finishes its
/// interrupted conversion); the report says what happened.
pub async fn convert_one(conn: &Connection, args: &QueueArgs, queue: &str) -> Report {
    let mut c = Conversion {
        conn,
        args,
        moved: 0,
        skipped: 0,
    };
    let result = match Target::parse(queue) {
        Ok(target) => c.run(&target).await,
        Err(e) => Err(e),
    };
    Report {
        queue: queue.to_string(),
        moved: c.moved,
        skipped: c.skipped,
        result,
    }
}

/// One queue's conversion in progress.
struct Conversion<'a> {
    conn: &'a Connection,
    args: &'a QueueArgs,
    moved: u64,
    skipped: u64,
}

impl Conversion<'_> {
    async fn channel(&self) -> Result<Channel, ConvertError> {
        step("opening a channel", self.conn.create_channel()).await
    }

    /// Passive declare on a fresh channel (a 404 closes it): `Some((messages, consumers))`.
    async fn peek(&self, queue: &str) -> Result<Option<(u32, u32)>, ConvertError> {
        let ch = self.channel().await?;
        let found = step(format!("passive declare of {queue}"), topology::peek(&ch, queue)).await?;
        if found.is_some() {
            let _ = ch.close(200, "peek done".into()).await;
        }
        Ok(found)
    }

    /// Declares `queue` with `args` on a fresh channel: `Ok(true)` if the broker holds it so (or
    /// created it), `Ok(false)` on a 406 (it holds it otherwise).
    async fn declare_as(&self, queue: &str, args: FieldTable) -> Result<Result<(), String>, ConvertError> {
        let ch = self.channel().await?;
        let declared = tokio::time::timeout(STEP, topology::declare_durable(&ch, queue, args)).await;
        match declared {
            Ok(Ok(_)) => {
                let _ = ch.close(200, "declared".into()).await;
                Ok(Ok(()))
            }
            Ok(Err(e)) if topology::amqp_code(&e) == Some(406) => Ok(Err(e.to_string())),
            Ok(Err(source)) => Err(ConvertError::Broker {
                what: format!("declaring {queue}"),
                source,
            }),
            Err(_) => Err(ConvertError::Timeout {
                what: format!("declaring {queue}"),
            }),
        }
    }

    /// What the broker holds under `queue`'s name ([`Found`]). Only an existing queue is
    /// declared (never created here).
    async fn look(&self, target: &Target, queue: &str) -> Result<Found, ConvertError> {
        if self.peek(queue).await?.is_none() {
            return Ok(Found::Absent);
        }
        if self
            .declare_as(queue, target.arguments(self.args, QueueType::Quorum))
            .await?
            .is_ok()
        {
            return Ok(Found::Quorum);
        }
        match self
            .declare_as(queue, target.arguments(self.args, QueueType::Classic))
            .await?
        {
            Ok(()) => Ok(Found::Classic),
            Err(broker) => Err(ConvertError::OtherArguments {
                queue: queue.to_string(),
                broker,
            }),
        }
    }

    async fn run(&mut self, target: &Target) -> Result<Outcome, ConvertError> {
        let queue = target.queue();
        let temp = topology::converting_queue(&queue);
        let found = self.look(target, &queue).await?;
        let temp_exists = self.peek(&temp).await?.is_some();
        let plan = plan(found, temp_exists);
        tracing::debug!(%queue, ?found, temp_exists, ?plan, "conversion planned");
        match plan {
            Plan::NoSuchQueue => return Err(ConvertError::NoSuchQueue(queue)),
            Plan::Done => {
                self.finish(&queue, &temp).await?;
                return Ok(Outcome::AlreadyQuorum);
            }
            Plan::Start | Plan::ResumeOut => {
                self.refuse_if_consumed(&queue).await?;
                self.step_out(&queue, &temp, plan == Plan::ResumeOut).await?;
                self.step_back(target, &queue, &temp, false).await?;
            }
            Plan::Recreate => self.step_back(target, &queue, &temp, false).await?,
            Plan::ResumeBack => self.step_back(target, &queue, &temp, true).await?,
        }
        self.finish(&queue, &temp).await?;
        Ok(if plan == Plan::Start {
            Outcome::Converted
        } else {
            Outcome::Resumed
        })
    }

    async fn refuse_if_consumed(&self, queue: &str) -> Result<(), ConvertError> {
        match self.peek(queue).await? {
            Some((_, consumers)) if consumers > 0 => Err(ConvertError::InUse {
                queue: queue.to_string(),
                consumers,
            }),
            _ => Ok(()),
        }
    }

    /// Declares fanout exchange `exchange` bound only to `queue`.
    async fn route(&self, ch: &Channel, exchange: &str, queue: &str) -> Result<(), ConvertError> {
        let opts = ExchangeDeclareOptions {
            durable: true,
            ..ExchangeDeclareOptions::default()
        };
        step(
            format!("declaring exchange {exchange}"),
            ch.exchange_declare(exchange.into(), ExchangeKind::Fanout, opts, FieldTable::default()),
        )
        .await?;
        step(
            format!("binding {queue} to {exchange}"),
            ch.queue_bind(
                queue.into(),
                exchange.into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            ),
        )
        .await
    }

    /// Step 1: every message of `queue` (classic) into `temp`, then `queue` deleted.
    async fn step_out(&mut self, queue: &str, temp: &str, resume: bool) -> Result<(), ConvertError> {
        let ch = self.channel().await?;
        step(
            format!("declaring {temp}"),
            topology::declare_durable(&ch, temp, temp_arguments()),
        )
        .await?;
        let exchange = temp_exchange(queue);
        self.route(&ch, &exchange, temp).await?;
        let _ = ch.close(200, "routed".into()).await;
        // A kill between a batch's confirm and its ack left copies at the tail of `temp`.
        let skip = if resume {
            self.ids_by_get(temp).await?
        } else {
            HashSet::new()
        };
        for _ in 0..DELETE_ROUNDS {
            self.move_all(queue, &exchange, &skip, temp, false).await?;
            let ch = self.channel().await?;
            let opts = QueueDeleteOptions {
                if_empty: true,
                if_unused: true,
                nowait: false,
            };
            match tokio::time::timeout(STEP, ch.queue_delete(queue.into(), opts)).await {
                Ok(Ok(_)) => return Ok(()),
                // 406: a message arrived (or a consumer attached) since the drain; the 406
                // closed the channel. Drain again.
                Ok(Err(e)) if topology::amqp_code(&e) == Some(406) => {
                    self.refuse_if_consumed(queue).await?;
                }
                Ok(Err(source)) => {
                    return Err(ConvertError::Broker {
                        what: format!("deleting {queue}"),
                        source,
                    });
                }
                Err(_) => {
                    return Err(ConvertError::Timeout {
                        what: format!("deleting {queue}"),
                    });
                }
            }
        }
        Err(ConvertError::Refused {
            queue: queue.to_string(),
            temp: temp.to_string(),
            why: format!("still receiving messages after {DELETE_ROUNDS} drains; stop its senders"),
        })
    }

    /// Step 2: `queue` declared quorum, every message of `temp` moved back, bindings restored.
    async fn step_back(&mut self, target: &Target, queue: &str, temp: &str, resume: bool) -> Result<(), ConvertError> {
        let ch = self.channel().await?;
        step(
            format!("declaring {queue} quorum"),
            topology::declare_durable(&ch, queue, target.arguments(self.args, QueueType::Quorum)),
        )
        .await?;
        let exchange = back_exchange(queue);
        self.route(&ch, &exchange, queue).await?;
        let _ = ch.close(200, "routed".into()).await;
        let skip = match self.peek(queue).await? {
            Some((messages, consumers)) if resume && messages > 0 => {
                if consumers > 0 {
                    return Err(ConvertError::InUse {
                        queue: queue.to_string(),
                        consumers,
                    });
                }
                self.ids_by_consuming(queue, messages).await?
            }
            _ => HashSet::new(),
        };
        self.move_all(temp, &exchange, &skip, queue, true).await?;
        let ch = self.channel().await?;
        for (exchange, key) in target.bindings() {
            step(
                format!("binding {queue} to {exchange} with key {key:?}"),
                ch.queue_bind(
                    queue.into(),
                    exchange.into(),
                    key.as_str().into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                ),
            )
            .await?;
        }
        let _ = ch.close(200, "bound".into()).await;
        Ok(())
    }

    /// The end of every run: the temporary queue (empty by now; kept if not, so nothing is lost)
    /// and both exchanges deleted. Idempotent.
    async fn finish(&self, queue: &str, temp: &str) -> Result<(), ConvertError> {
        let ch = self.channel().await?;
        let opts = QueueDeleteOptions {
            if_empty: true,
            if_unused: false,
            nowait: false,
        };
        step(format!("deleting {temp}"), ch.queue_delete(temp.into(), opts)).await?;
        for exchange in [temp_exchange(queue), back_exchange(queue)] {
            step(
                format!("deleting exchange {exchange}"),
                ch.exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default()),
            )
            .await?;
        }
        let _ = ch.close(200, "finished".into()).await;
        Ok(())
    }

    /// The ids held by classic queue `queue`, read with `basic.get` and handed back in order
    /// (the channel's close requeues them at their places).
    async fn ids_by_get(&self, queue: &str) -> Result<HashSet<String>, ConvertError> {
        let ch = self.channel().await?;
        let mut ids = HashSet::new();
        while let Some(m) = step(
            format!("basic.get on {queue}"),
            ch.basic_get(queue.into(), BasicGetOptions { no_ack: false }),
        )
        .await?
        {
            ids.extend(message_key(&m.delivery));
        }
        step(format!("handing {queue}'s messages back"), ch.close(200, "read".into())).await?;
        Ok(ids)
    }

    /// The ids held by quorum queue `queue` (a single-active-consumer queue refuses `basic.get`):
    /// read with a consumer, then handed back in order by closing its channel. The broker counts
    /// that as a delivery (`x-delivery-count`); only a rerun after a kill reads a quorum queue.
    async fn ids_by_consuming(&self, queue: &str, count: u32) -> Result<HashSet<String>, ConvertError> {
        let ch = self.channel().await?;
        let prefetch = u16::try_from(count).unwrap_or(u16::MAX);
        step(
            format!("basic.qos on {queue}"),
            ch.basic_qos(prefetch, BasicQosOptions::default()),
        )
        .await?;
        let opts = BasicConsumeOptions {
            no_ack: false,
            ..BasicConsumeOptions::default()
        };
        let mut consumer = step(
            format!("consuming {queue} to read its ids"),
            ch.basic_consume(queue.into(), "fleet-convert-read".into(), opts, FieldTable::default()),
        )
        .await?;
        let mut ids = HashSet::new();
        let mut read = 0u32;
        while read < count {
            match tokio::time::timeout(READ_IDLE, consumer.next()).await {
                Ok(Some(Ok(d))) => {
                    read += 1;
                    ids.extend(message_key(&d));
                }
                Ok(Some(Err(source))) => {
                    return Err(ConvertError::Broker {
                        what: format!("reading {queue}"),
                        source,
                    });
                }
                // Fewer than counted (some expired): what arrived is all there is.
                Ok(None) | Err(_) => break,
            }
        }
        step(format!("handing {queue}'s messages back"), ch.close(200, "read".into())).await?;
        Ok(ids)
    }

    /// Moves every message of classic queue `from` through fanout `exchange` (to `to`), in
    /// batches: get (unacked), publish each (confirmed, mandatory, everything unchanged), one
    /// multiple-ack per batch for what was confirmed. A message whose id is in `skip` is acked
    /// without a publish (its copy is there already). `back`: count the moves as moved back.
    async fn move_all(
        &mut self,
        from: &str,
        exchange: &str,
        skip: &HashSet<String>,
        to: &str,
        back: bool,
    ) -> Result<(), ConvertError> {
        let get = self.channel().await?;
        let publish = self.channel().await?;
        step(
            "confirm.select",
            publish.confirm_select(ConfirmSelectOptions::default()),
        )
        .await?;
        let result = self.move_batches(&get, &publish, from, exchange, skip, to, back).await;
        // Unacked gets go back to `from` at their places (on success there are none).
        let _ = tokio::time::timeout(STEP, get.close(200, "moved".into())).await;
        let _ = tokio::time::timeout(STEP, publish.close(200, "moved".into())).await;
        result
    }

    #[allow(clippy::too_many_arguments)]
    async fn move_batches(
        &mut self,
        get: &Channel,
        publish: &Channel,
        from: &str,
        exchange: &str,
        skip: &HashSet<String>,
        to: &str,
        back: bool,
    ) -> Result<(), ConvertError> {
        loop {
            let mut batch: Vec<Delivery> = Vec::with_capacity(BATCH);
            while batch.len() < BATCH {
                match step(
                    format!("basic.get on {from}"),
                    get.basic_get(from.into(), BasicGetOptions { no_ack: false }),
                )
                .await?
                {
                    Some(m) => batch.push(m.delivery),
                    None => break,
                }
            }
            let Some(last) = batch.last() else {
                return Ok(());
            };
            // Publish the batch in order; remember which delivery each confirm belongs to.
            let mut confirms = Vec::with_capacity(batch.len());
            let mut skipped = 0u64;
            for (i, d) in batch.iter().enumerate() {
                if message_key(d).is_some_and(|k| skip.contains(&k)) {
                    skipped += 1;
                    continue;
                }
                let opts = BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                };
                let confirm = step(
                    format!("publishing to {exchange}"),
                    publish.basic_publish(exchange.into(), route_key(d), opts, &d.data, d.properties.clone()),
                )
                .await?;
                confirms.push((i, confirm));
            }
            // Wait for the confirms in order; ack up to the last confirmed one (and the skipped
            // ones before it) on the first refusal.
            let mut acked_upto: Option<usize> = None;
            let mut refusal: Option<String> = None;
            let mut confirmed = 0u64;
            for (i, confirm) in confirms {
                let c = step(format!("confirm of a publish to {to}"), confirm).await?;
                if c.is_nack() {
                    refusal = Some("nacked (full: x-max-length with reject-publish?)".into());
                    break;
                }
                if c.take_message().is_some() {
                    refusal = Some(format!("unroutable (is {to} bound to {exchange}?)"));
                    break;
                }
                acked_upto = Some(i);
                confirmed += 1;
            }
            match refusal {
                None => {
                    step(
                        format!("ack on {from}"),
                        last.acker.ack(BasicAckOptions { multiple: true }),
                    )
                    .await?;
                    self.skipped += skipped;
                    if back {
                        self.moved += confirmed;
                    }
                }
                Some(why) => {
                    if let Some(i) = acked_upto {
                        step(
                            format!("ack on {from}"),
                            batch[i].acker.ack(BasicAckOptions { multiple: true }),
                        )
                        .await?;
                        if back {
                            self.moved += confirmed;
                        }
                    }
                    return Err(ConvertError::Refused {
                        queue: to.to_string(),
                        temp: from.to_string(),
                        why,
                    });
                }
            }
        }
    }
}
