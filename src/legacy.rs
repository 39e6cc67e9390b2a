//! The v1.0.0 broker state (SPEC §13) as the suite seeds and inspects it.
//!
//! Migration scenarios need a vhost that looks exactly like one a v1.0.0 daemon left behind:
//! sender-keyed `agent.<paneId>.inbox` queues, durable, **no arguments**, messages on the default
//! exchange with routing key = queue name, `message_id` = the v1 msgId, a text body and no envelope.
//! `fixtures/legacy/v1.0.0.json` describes that state as data; this module loads it, seeds a vhost
//! with it over plain AMQP, and looks at legacy queues afterwards (live counts by passive declare,
//! not the management API's sampled ones). It also proves the hazard MIG-1 guards against: a
//! redeclare with the v2 inbox arguments is refused by the broker itself with 406.

use std::path::{Path, PathBuf};

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties, ErrorKind};
use serde::Deserialize;
use uuid::Uuid;

/// A legacy-fixture failure.
#[derive(Debug, thiserror::Error)]
pub enum LegacyError {
    #[error("cannot read legacy fixture {path}: {reason}")]
    Fixture { path: String, reason: String },
    #[error("legacy fixture has no queue for pane {0:?}")]
    NoSuchPane(String),
    #[error("cannot connect to {url} to seed legacy state: {reason}")]
    Connect { url: String, reason: String },
    #[error("AMQP error while seeding legacy state: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("the broker nacked a legacy message for {0}")]
    Nacked(String),
}

/// The UUIDv5 namespace a v2 gateway derives migrated msgIds in (the fixture's
/// `migration.namespace`): UUIDv5(NAMESPACE_URL, "urn:fleet:migration:v1.0.0").
pub fn migration_namespace() -> Uuid {
    Uuid::new_v5(&Uuid::NAMESPACE_URL, b"urn:fleet:migration:v1.0.0")
}

/// The v2 msgId a migrated message must carry (MIG-3).
pub fn derived_msg_id(legacy_message_id: &str) -> String {
    Uuid::new_v5(&migration_namespace(), legacy_message_id.as_bytes()).to_string()
}

/// `agent.<pane>.inbox`.
pub fn legacy_queue_name(pane: &str) -> String {
    format!("agent.{pane}.inbox")
}

/// One v1 message, in queue order.
#[derive(Debug, Clone, Deserialize)]
pub struct LegacyMessage {
    pub message_id: String,
    pub body: String,
    /// The msgId the main must see after the move; computed when the fixture omits it.
    #[serde(default)]
    pub v2_msg_id: Option<String>,
}

impl LegacyMessage {
    /// The expected v2 msgId (the fixture's, else derived).
    pub fn expected_msg_id(&self) -> String {
        self.v2_msg_id
            .clone()
            .unwrap_or_else(|| derived_msg_id(&self.message_id))
    }
}

/// One sender-keyed legacy queue.
#[derive(Debug, Clone, Deserialize)]
pub struct LegacyQueue {
    pub pane: String,
    pub messages: Vec<LegacyMessage>,
}

impl LegacyQueue {
    /// The queue name, `agent.<pane>.inbox`.
    pub fn name(&self) -> String {
        legacy_queue_name(&self.pane)
    }

    /// A long queue of `n` replies (fixtures/legacy/README.md, "Generated queues").
    pub fn generated(pane: &str, n: usize) -> LegacyQueue {
        let messages = (1..=n)
            .map(|i| LegacyMessage {
                message_id: Uuid::new_v5(
                    &Uuid::NAMESPACE_URL,
                    format!("urn:fleet:legacy-fixture:{pane}:{i}").as_bytes(),
                )
                .to_string(),
                body: format!("reply {i} of {n} from {pane}"),
                v2_msg_id: None,
            })
            .collect();
        LegacyQueue {
            pane: pane.to_string(),
            messages,
        }
    }
}

/// The fixture file's shape (only what seeding needs; the templates are documentation that
/// [`LegacyBroker::seed`] implements).
#[derive(Debug, Clone, Deserialize)]
pub struct LegacyState {
    pub release: String,
    pub queues: Vec<LegacyQueue>,
}

impl LegacyState {
    /// `fixtures/legacy/v1.0.0.json` of the suite's files.
    pub fn fixture_path() -> PathBuf {
        crate::conformance::suite_root().join("fixtures/legacy/v1.0.0.json")
    }

    pub fn load(path: &Path) -> Result<LegacyState, LegacyError> {
        let err = |reason: String| LegacyError::Fixture {
            path: path.display().to_string(),
            reason,
        };
        let bytes = std::fs::read(path).map_err(|e| err(e.to_string()))?;
        serde_json::from_slice(&bytes).map_err(|e| err(e.to_string()))
    }

    /// The standard fixture.
    pub fn v1_0_0() -> Result<LegacyState, LegacyError> {
        Self::load(&Self::fixture_path())
    }

    pub fn queue(&self, pane: &str) -> Result<&LegacyQueue, LegacyError> {
        self.queues
            .iter()
            .find(|q| q.pane == pane)
            .ok_or_else(|| LegacyError::NoSuchPane(pane.to_string()))
    }
}

/// What a passive declare says about a queue right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueState {
    /// Ready messages (unacknowledged ones are not counted).
    pub messages: u32,
    pub consumers: u32,
}

/// The arguments a v2 gateway declares an inbox with (SPEC TOP-2/TOP-4 defaults).
pub fn v2_inbox_arguments() -> FieldTable {
    let mut args = FieldTable::default();
    args.insert(
        "x-dead-letter-exchange".into(),
        AMQPValue::LongString(LongString::from("bridge.dlx")),
    );
    args.insert("x-max-length".into(), AMQPValue::LongLongInt(1_000));
    args.insert("x-message-ttl".into(), AMQPValue::LongLongInt(86_400_000));
    args.insert("x-expires".into(), AMQPValue::LongLongInt(604_800_000));
    args
}

/// The AMQP reply code of a broker refusal, if `e` is one.
pub fn amqp_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        ErrorKind::ProtocolError(p) => Some(p.get_id()),
        _ => None,
    }
}

/// A plain AMQP connection into one scenario's vhost, acting as the v1.0.0 daemon (and as an
/// operator looking at its leftovers).
pub struct LegacyBroker {
    conn: Connection,
}

impl LegacyBroker {
    pub async fn connect(amqp_url: &str) -> Result<LegacyBroker, LegacyError> {
        let conn = Connection::connect(amqp_url, ConnectionProperties::default())
            .await
            .map_err(|e| LegacyError::Connect {
                url: redact(amqp_url),
                reason: e.to_string(),
            })?;
        Ok(LegacyBroker { conn })
    }

    async fn channel(&self) -> Result<Channel, LegacyError> {
        Ok(self.conn.create_channel().await?)
    }

    /// Declares `q` the v1.0.0 way (durable, no arguments) and publishes its messages the v1.0.0
    /// way (default exchange, key = queue name, message_id, persistent, text, no headers), in
    /// order, waiting for every confirm.
    pub async fn seed(&self, q: &LegacyQueue) -> Result<(), LegacyError> {
        let name = q.name();
        let ch = self.channel().await?;
        ch.confirm_select(ConfirmSelectOptions::default()).await?;
        let opts = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        ch.queue_declare(name.as_str().into(), opts, FieldTable::default())
            .await?;
        let mut confirms = Vec::with_capacity(q.messages.len());
        for m in &q.messages {
            let props = BasicProperties::default()
                .with_message_id(m.message_id.as_str().into())
                .with_delivery_mode(2)
                .with_content_type("text/plain".into());
            let c = ch
                .basic_publish(
                    "".into(),
                    name.as_str().into(),
                    BasicPublishOptions::default(),
                    m.body.as_bytes(),
                    props,
                )
                .await?;
            confirms.push(c);
        }
        for c in confirms {
            if c.await?.is_nack() {
                return Err(LegacyError::Nacked(name));
            }
        }
        let _ = ch.close(200, "seeded".into()).await;
        Ok(())
    }

    /// Seeds every queue of `state`.
    pub async fn seed_all(&self, state: &LegacyState) -> Result<(), LegacyError> {
        for q in &state.queues {
            self.seed(q).await?;
        }
        Ok(())
    }

    /// A passive declare on a fresh channel: `None` when the queue does not exist.
    pub async fn queue_state(&self, queue: &str) -> Result<Option<QueueState>, LegacyError> {
        let ch = self.channel().await?;
        let opts = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let r = ch.queue_declare(queue.into(), opts, FieldTable::default()).await;
        match r {
            Ok(q) => {
                let _ = ch.close(200, "peek done".into()).await;
                Ok(Some(QueueState {
                    messages: q.message_count(),
                    consumers: q.consumer_count(),
                }))
            }
            // A 404 closes the channel; nothing to clean up.
            Err(e) if amqp_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Redeclares `queue` (durable) with `args` on a fresh channel, the way a naive v2 upgrade
    /// would. `Ok(Ok(()))` = accepted; `Ok(Err((code, text)))` = the broker refused it.
    pub async fn redeclare_with(
        &self,
        queue: &str,
        args: FieldTable,
    ) -> Result<Result<(), (u16, String)>, LegacyError> {
        let ch = self.channel().await?;
        let opts = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        match ch.queue_declare(queue.into(), opts, args).await {
            Ok(_) => {
                let _ = ch.close(200, "redeclared".into()).await;
                Ok(Ok(()))
            }
            Err(e) => match amqp_code(&e) {
                Some(code) => Ok(Err((code, e.to_string()))),
                None => Err(e.into()),
            },
        }
    }

    pub async fn close(self) {
        let _ = self.conn.close(200, "legacy done".into()).await;
    }
}

fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://***{}", &url[..s], &url[at..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fixture_loads_and_its_v2_msg_ids_are_the_uuidv5_derivation() {
        let s = LegacyState::v1_0_0().expect("fixture loads");
        assert!(s.release.starts_with("v1.0.0"));
        assert_eq!(
            migration_namespace().to_string(),
            "12787294-b79a-541b-b6c4-ca1ffbc17814"
        );
        let w = s.queue("w1:p2").expect("pane w1:p2");
        assert_eq!(w.name(), "agent.w1:p2.inbox");
        assert_eq!(w.messages.len(), 3);
        for q in &s.queues {
            for m in &q.messages {
                assert_eq!(
                    m.v2_msg_id.as_deref(),
                    Some(derived_msg_id(&m.message_id).as_str()),
                    "fixture v2_msg_id of {}",
                    m.message_id
                );
            }
        }
        assert!(s.queue("w9:p9").is_err());
    }

    #[test]
    fn generated_queues_are_deterministic_and_ordered() {
        let a = LegacyQueue::generated("w1:p9", 3);
        let b = LegacyQueue::generated("w1:p9", 3);
        assert_eq!(a.messages.len(), 3);
        assert_eq!(a.messages[0].message_id, b.messages[0].message_id);
        assert_ne!(a.messages[0].message_id, a.messages[1].message_id);
        assert_eq!(a.messages[2].body, "reply 3 of 3 from w1:p9");
        assert_eq!(
            a.messages[0].expected_msg_id(),
            derived_msg_id(&a.messages[0].message_id)
        );
    }
}
