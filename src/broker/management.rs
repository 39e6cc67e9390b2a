//! A small client of the broker's HTTP management API (RabbitMQ's, and LavinMQ's compatible one).
//!
//! Exists because scenarios judge a gateway by what the broker holds — queue depths, consumers,
//! arguments, bindings — and the suite creates a fresh vhost per scenario. Parsing is lenient on
//! purpose: the two brokers, and RabbitMQ right after a declaration (before the first statistics
//! tick), leave fields out; a missing count reads as 0 rather than failing a scenario.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Map, Value};

use super::error::BrokerError;
use super::url::percent_encode;

/// The `connection_name` of the suite's scenario-wide wire recorder (`crate::timeline`): left out
/// of [`Management::connections`], so no step counts, notes or closes it as a gateway's.
pub const HIDDEN_CONNECTION_NAME: &str = "fleet-conformance wire recorder";
/// The name prefix of the wire recorder's queue: left out of [`Management::queues`] and
/// [`Management::consumers`], so no step counts it among what the gateways declared.
pub const HIDDEN_QUEUE_PREFIX: &str = "fleet-conformance.recorder.";

/// Client of one broker's management API, authenticated as the admin user. For a cluster it
/// knows every node's API and asks the next when one does not answer (a killed, paused or cut-off
/// node): every node answers for the whole cluster.
#[derive(Clone)]
pub struct Management {
    client: reqwest::Client,
    /// The first node's API: the one asked first, named in errors.
    base: String,
    /// Every node's API, `base` first (just `base` for a single node).
    bases: Vec<String>,
    /// The index in `bases` of the API that answered last: asked first next time.
    current: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    user: String,
    password: String,
}

/// One node's management API (`GET /api/nodes`, one entry): how one node sees a cluster member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The Erlang node name, e.g. `rabbit@fleetcl1`.
    pub name: String,
    /// Whether the member's broker application runs, as the asked node sees it.
    pub running: bool,
    /// Members the asked node is partitioned from (RabbitMQ lists them on every running member).
    pub partitions: Vec<String>,
}

impl NodeInfo {
    pub(crate) fn from_json(v: &Value) -> NodeInfo {
        NodeInfo {
            name: string(v, "name"),
            running: flag(v, "running"),
            partitions: v
                .get("partitions")
                .and_then(Value::as_array)
                .map(|p| p.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default(),
        }
    }
}

/// One try of a request at one node's API.
enum Attempt {
    /// The API answered (or failed after answering).
    Answered(Result<Option<Value>, BrokerError>),
    /// The request never reached an answer (refused, reset, timed out): another node may answer.
    Unreachable(BrokerError),
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("bases", &self.bases)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// `GET /api/overview`, reduced to what reports need.
#[derive(Debug, Clone, PartialEq)]
pub struct Overview {
    /// "RabbitMQ", "LavinMQ", … ("unknown" when the broker does not say).
    pub product: String,
    pub version: String,
    /// The whole answer, for anything else.
    pub raw: Value,
}

impl Overview {
    /// e.g. "RabbitMQ 3.10.8".
    pub fn label(&self) -> String {
        format!("{} {}", self.product, self.version)
    }

    pub(crate) fn from_json(raw: Value) -> Overview {
        let s = |k: &str| {
            raw.get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
                .map(str::to_string)
        };
        let product = s("product_name").unwrap_or_else(|| {
            if raw.get("lavinmq_version").is_some() {
                "LavinMQ".into()
            } else if raw.get("rabbitmq_version").is_some() {
                "RabbitMQ".into()
            } else {
                "unknown".into()
            }
        });
        let version = s("product_version")
            .or_else(|| s("rabbitmq_version"))
            .or_else(|| s("lavinmq_version"))
            .unwrap_or_else(|| "unknown".into());
        Overview { product, version, raw }
    }
}

/// One queue as the management API describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    pub name: String,
    pub messages_ready: u64,
    pub messages_unacknowledged: u64,
    pub consumers: u64,
    /// Declaration arguments (`x-message-ttl`, `x-dead-letter-exchange`, …).
    pub arguments: Map<String, Value>,
    pub durable: bool,
    pub exclusive: bool,
    pub auto_delete: bool,
    /// Messages acknowledged since the queue was declared (`message_stats.ack`, 0 when absent).
    pub acked_total: u64,
    /// Messages delivered since the queue was declared (`message_stats.deliver_get`, else
    /// `message_stats.deliver`, 0 when absent).
    pub delivered_total: u64,
}

impl QueueInfo {
    pub(crate) fn from_json(v: &Value) -> QueueInfo {
        let stats = v.get("message_stats").unwrap_or(&Value::Null);
        let delivered = if stats.get("deliver_get").is_some() {
            count(stats, "deliver_get")
        } else {
            count(stats, "deliver")
        };
        QueueInfo {
            name: string(v, "name"),
            messages_ready: count(v, "messages_ready"),
            messages_unacknowledged: count(v, "messages_unacknowledged"),
            consumers: count(v, "consumers"),
            arguments: object(v, "arguments"),
            durable: flag(v, "durable"),
            exclusive: flag(v, "exclusive"),
            auto_delete: flag(v, "auto_delete"),
            acked_total: count(stats, "ack"),
            delivered_total: delivered,
        }
    }
}

/// One binding of a queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Binding {
    /// The exchange; "" is the default exchange (every queue has that binding).
    pub source: String,
    pub routing_key: String,
    pub arguments: Map<String, Value>,
}

impl Binding {
    fn from_json(v: &Value) -> Binding {
        Binding {
            source: string(v, "source"),
            routing_key: string(v, "routing_key"),
            arguments: object(v, "arguments"),
        }
    }
}

/// One exchange.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeInfo {
    pub name: String,
    /// The exchange type (`direct`, `topic`, `fanout`, `headers`, `x-delayed-message`, …): the
    /// API's `type` field.
    pub kind: String,
    pub durable: bool,
    pub auto_delete: bool,
    pub internal: bool,
    pub arguments: Map<String, Value>,
}

impl ExchangeInfo {
    pub(crate) fn from_json(v: &Value) -> ExchangeInfo {
        ExchangeInfo {
            name: string(v, "name"),
            kind: string(v, "type"),
            durable: flag(v, "durable"),
            auto_delete: flag(v, "auto_delete"),
            internal: flag(v, "internal"),
            arguments: object(v, "arguments"),
        }
    }
}

/// One consumer as `GET /api/consumers/{vhost}` shows it (same keys on RabbitMQ and LavinMQ:
/// `fixtures/brokers/`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerInfo {
    /// The queue it consumes.
    pub queue: String,
    pub tag: String,
    /// Whether it was made with `exclusive` (no other consumer may attach to its queue).
    pub exclusive: bool,
    /// Manual acknowledgement (not `no_ack`).
    pub ack_required: bool,
    /// Its own (per-consumer) `basic.qos` prefetch: 0 when none was set on RabbitMQ; LavinMQ's
    /// default (65535) when none was set there. A channel-wide prefetch shows on its channel only
    /// ([`Management::channel_global_prefetch`], [`crate::broker::flavour::PrefetchBound`]).
    pub prefetch_count: u64,
    /// The broker's name of its channel.
    pub channel: Option<String>,
    /// On a single-active-consumer queue, whether it is the active one (`active`; a standby is
    /// not). `None` where the broker does not say.
    pub active: Option<bool>,
}

impl ConsumerInfo {
    pub(crate) fn from_json(v: &Value) -> ConsumerInfo {
        let queue = v.get("queue").unwrap_or(&Value::Null);
        ConsumerInfo {
            queue: string(queue, "name"),
            tag: string(v, "consumer_tag"),
            exclusive: flag(v, "exclusive"),
            ack_required: flag(v, "ack_required"),
            prefetch_count: count(v, "prefetch_count"),
            active: v.get("active").and_then(Value::as_bool),
            channel: v
                .get("channel_details")
                .and_then(|c| c.get("name"))
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

/// One channel as `GET /api/vhosts/{vhost}/channels` shows it (RabbitMQ and LavinMQ both list
/// `confirm`, `consumer_count` and `message_stats.publish` there).
#[derive(Debug, Clone, PartialEq)]
pub struct ChannelInfo {
    /// The broker's name of the channel (`"<connection> (<number>)"`).
    pub name: String,
    /// The login of its connection.
    pub user: String,
    /// Whether the client put it in confirm mode (`confirm.select`).
    pub confirm: bool,
    /// How many consumers it holds.
    pub consumer_count: u64,
    /// Messages published on it so far (0 until the broker's statistics have sampled it).
    pub published: u64,
}

impl ChannelInfo {
    pub(crate) fn from_json(v: &Value) -> ChannelInfo {
        ChannelInfo {
            name: string(v, "name"),
            user: string(v, "user"),
            confirm: flag(v, "confirm"),
            consumer_count: count(v, "consumer_count"),
            published: v.get("message_stats").map_or(0, |m| count(m, "publish")),
        }
    }
}

/// One client connection.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionInfo {
    /// The broker's name for it, what [`Management::close_connection`] takes.
    pub name: String,
    pub user: String,
    pub vhost: String,
    /// The `connection_name` client property, when the client set one.
    pub client_name: Option<String>,
    /// Whether the client connected over TLS (the API's `ssl`).
    pub tls: bool,
    /// The broker node that holds it (`rabbit@host`; on a cluster, which node a client is on).
    pub node: String,
}

impl ConnectionInfo {
    fn from_json(v: &Value) -> ConnectionInfo {
        let client_name = v
            .get("client_properties")
            .and_then(|p| p.get("connection_name"))
            .and_then(Value::as_str)
            .map(str::to_string);
        ConnectionInfo {
            name: string(v, "name"),
            user: string(v, "user"),
            vhost: string(v, "vhost"),
            tls: flag(v, "ssl"),
            node: string(v, "node"),
            client_name,
        }
    }
}

/// The channel-wide prefetch in a channel's JSON (`GET /api/channels/{name}`), the same key on
/// both brokers; 0 when absent.
pub(crate) fn global_prefetch_count(channel: &Value) -> u64 {
    channel
        .get("global_prefetch_count")
        .and_then(Value::as_u64)
        .unwrap_or(0)
}

fn count(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
            .unwrap_or(0),
        _ => 0,
    }
}

fn string(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or_default().to_string()
}

fn flag(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn object(v: &Value, key: &str) -> Map<String, Value> {
    v.get(key).and_then(Value::as_object).cloned().unwrap_or_default()
}

fn list<T>(v: Value, what: &str, url: &str, f: impl Fn(&Value) -> T) -> Result<Vec<T>, BrokerError> {
    match v {
        Value::Array(items) => Ok(items.iter().map(f).collect()),
        other => Err(BrokerError::Decode {
            url: url.to_string(),
            reason: format!("expected a list of {what}, got {}", short(&other.to_string())),
        }),
    }
}

fn short(s: &str) -> String {
    const MAX: usize = 300;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

impl Management {
    /// A client of the API at `base` (e.g. `http://127.0.0.1:15672`).
    pub fn new(base: &str, user: &str, password: &str) -> Result<Management, BrokerError> {
        let client = reqwest::Client::builder()
            // The API is always reached directly: never through a proxy from the environment.
            .no_proxy()
            .connect_timeout(crate::timing::scaled(Duration::from_secs(3)))
            .timeout(crate::timing::scaled(Duration::from_secs(15)))
            .build()
            .map_err(|source| BrokerError::Http {
                method: "CLIENT",
                url: base.to_string(),
                source,
            })?;
        let base = base.trim_end_matches('/').to_string();
        Ok(Management {
            client,
            bases: vec![base.clone()],
            base,
            current: Default::default(),
            user: user.to_string(),
            password: password.to_string(),
        })
    }

    /// A client of a cluster's APIs, one per node (`bases[0]` asked first): a request that does
    /// not reach one node goes to the next. `bases` must not be empty.
    pub fn with_fallbacks(bases: &[String], user: &str, password: &str) -> Result<Management, BrokerError> {
        let first = bases.first().ok_or_else(|| BrokerError::Decode {
            url: String::new(),
            reason: "a cluster's management client needs at least one node's API".into(),
        })?;
        let mut m = Management::new(first, user, password)?;
        m.bases = bases.iter().map(|b| b.trim_end_matches('/').to_string()).collect();
        Ok(m)
    }

    /// The base URL, e.g. `http://127.0.0.1:15672` (the first node's, for a cluster).
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// Sends one request, to the node that answered last and then to the others while none
    /// answers; answers `None` for 404 so callers decide what absence means.
    async fn request(&self, method: Method, path: &str, body: Option<Value>) -> Result<Option<Value>, BrokerError> {
        use std::sync::atomic::Ordering;
        let n = self.bases.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut unreachable = None;
        for k in 0..n {
            let i = (first + k) % n;
            match self
                .request_at(&self.bases[i], method.clone(), path, body.clone())
                .await
            {
                Attempt::Answered(answer) => {
                    if k > 0 {
                        tracing::info!(base = %self.bases[i], "management API: another node answers");
                        self.current.store(i, Ordering::Relaxed);
                    }
                    return answer;
                }
                Attempt::Unreachable(e) => unreachable = Some(e),
            }
        }
        Err(unreachable.unwrap_or_else(|| BrokerError::Decode {
            url: format!("{}{path}", self.base),
            reason: "no management API to ask".into(),
        }))
    }

    /// [`Management::request`] at one node's API.
    async fn request_at(&self, base: &str, method: Method, path: &str, body: Option<Value>) -> Attempt {
        let url = format!("{base}{path}");
        let method_name: &'static str = match method {
            Method::GET => "GET",
            Method::PUT => "PUT",
            Method::DELETE => "DELETE",
            Method::POST => "POST",
            _ => "HTTP",
        };
        let mut req = self
            .client
            .request(method, &url)
            .basic_auth(&self.user, Some(&self.password));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(source) => {
                return Attempt::Unreachable(BrokerError::Http {
                    method: method_name,
                    url,
                    source,
                });
            }
        };
        Attempt::Answered(Management::answer(method_name, url, resp).await)
    }

    /// What an answer means: `None` for 404, the JSON body (`Null` when empty) for success.
    async fn answer(method: &'static str, url: String, resp: reqwest::Response) -> Result<Option<Value>, BrokerError> {
        let status = resp.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        let text = resp.text().await.map_err(|source| BrokerError::Http {
            method,
            url: url.clone(),
            source,
        })?;
        if !status.is_success() {
            return Err(BrokerError::Status {
                method,
                url,
                status: status.as_u16(),
                body: short(&text),
            });
        }
        if text.trim().is_empty() {
            return Ok(Some(Value::Null));
        }
        serde_json::from_str(&text).map(Some).map_err(|e| BrokerError::Decode {
            url,
            reason: format!("{e}; body: {}", short(&text)),
        })
    }

    async fn get(&self, path: &str) -> Result<Value, BrokerError> {
        self.request(Method::GET, path, None)
            .await?
            .ok_or_else(|| BrokerError::Status {
                method: "GET",
                url: format!("{}{path}", self.base),
                status: 404,
                body: "not found".into(),
            })
    }

    /// `GET /api/overview`: product, version and the rest.
    pub async fn overview(&self) -> Result<Overview, BrokerError> {
        Ok(Overview::from_json(self.get("/api/overview").await?))
    }

    /// `GET /api/nodes`: every member of the cluster as the answering node sees it (one entry for
    /// a single node).
    pub async fn nodes(&self) -> Result<Vec<NodeInfo>, BrokerError> {
        let v = self.get("/api/nodes").await?;
        list(v, "nodes", "/api/nodes", NodeInfo::from_json)
    }

    /// `GET /api/queues/{vhost}/{name}` as it came, for fields [`QueueInfo`] leaves out (a quorum
    /// queue's `leader`, `members`); `None` when the queue (or the vhost) does not exist.
    pub async fn queue_raw(&self, vhost: &str, name: &str) -> Result<Option<Value>, BrokerError> {
        let path = format!("/api/queues/{}/{}", percent_encode(vhost), percent_encode(name));
        self.request(Method::GET, &path, None).await
    }

    /// `GET /api/queues/{vhost}/{name}`; `None` when the queue (or the vhost) does not exist.
    pub async fn queue(&self, vhost: &str, name: &str) -> Result<Option<QueueInfo>, BrokerError> {
        let path = format!("/api/queues/{}/{}", percent_encode(vhost), percent_encode(name));
        Ok(self
            .request(Method::GET, &path, None)
            .await?
            .map(|v| QueueInfo::from_json(&v)))
    }

    /// `GET /api/queues/{vhost}`: every queue of the vhost.
    /// (The wire recorder's queue, [`HIDDEN_QUEUE_PREFIX`], left out.)
    pub async fn queues(&self, vhost: &str) -> Result<Vec<QueueInfo>, BrokerError> {
        let path = format!("/api/queues/{}", percent_encode(vhost));
        let v = self.get(&path).await?;
        let all = list(v, "queues", &path, QueueInfo::from_json)?;
        Ok(all
            .into_iter()
            .filter(|q| !q.name.starts_with(HIDDEN_QUEUE_PREFIX))
            .collect())
    }

    /// `GET /api/queues/{vhost}/{queue}/bindings`, the default exchange's binding included.
    pub async fn bindings(&self, vhost: &str, queue: &str) -> Result<Vec<Binding>, BrokerError> {
        let path = format!(
            "/api/queues/{}/{}/bindings",
            percent_encode(vhost),
            percent_encode(queue)
        );
        let v = self.get(&path).await?;
        list(v, "bindings", &path, Binding::from_json)
    }

    /// `GET /api/exchanges/{vhost}`, the built-in `amq.*` and default exchanges included.
    pub async fn exchanges(&self, vhost: &str) -> Result<Vec<ExchangeInfo>, BrokerError> {
        let path = format!("/api/exchanges/{}", percent_encode(vhost));
        let v = self.get(&path).await?;
        list(v, "exchanges", &path, ExchangeInfo::from_json)
    }

    /// `GET /api/vhosts/{vhost}/connections`, without the suite's own wire recorder
    /// ([`HIDDEN_CONNECTION_NAME`]): steps that count or close a vhost's connections never see it.
    pub async fn connections(&self, vhost: &str) -> Result<Vec<ConnectionInfo>, BrokerError> {
        let path = format!("/api/vhosts/{}/connections", percent_encode(vhost));
        let v = self.get(&path).await?;
        let all = list(v, "connections", &path, ConnectionInfo::from_json)?;
        Ok(all
            .into_iter()
            .filter(|c| c.client_name.as_deref() != Some(HIDDEN_CONNECTION_NAME))
            .collect())
    }

    /// `PUT /api/vhosts/{vhost}` with `tracing`: RabbitMQ's firehose for the vhost on or off
    /// (every publish copied to `amq.rabbitmq.trace`, routing unchanged; the wire recorder of
    /// `crate::timeline`). A broker without it ignores the field or refuses: an error then.
    pub async fn set_tracing(&self, vhost: &str, on: bool) -> Result<(), BrokerError> {
        let path = format!("/api/vhosts/{}", percent_encode(vhost));
        let body = serde_json::json!({ "tracing": on });
        self.request(Method::PUT, &path, Some(body)).await.map(drop)
    }

    /// `GET /api/vhosts/{vhost}/channels`: every channel of the vhost's connections.
    pub async fn channels(&self, vhost: &str) -> Result<Vec<ChannelInfo>, BrokerError> {
        let path = format!("/api/vhosts/{}/channels", percent_encode(vhost));
        let v = self.get(&path).await?;
        list(v, "channels", &path, ChannelInfo::from_json)
    }

    /// `GET /api/consumers/{vhost}`: every consumer of the vhost.
    /// (The wire recorder's consumer, on its [`HIDDEN_QUEUE_PREFIX`] queue, left out.)
    pub async fn consumers(&self, vhost: &str) -> Result<Vec<ConsumerInfo>, BrokerError> {
        let path = format!("/api/consumers/{}", percent_encode(vhost));
        let v = self.get(&path).await?;
        let all = list(v, "consumers", &path, ConsumerInfo::from_json)?;
        Ok(all
            .into_iter()
            .filter(|c| !c.queue.starts_with(HIDDEN_QUEUE_PREFIX))
            .collect())
    }

    /// The channel-wide prefetch of channel `name` (`GET /api/channels/{name}`, its
    /// `global_prefetch_count`, set by `basic.qos global=true`; 0 when none); `None` when the
    /// channel is gone. Both brokers show it under that key; the channel's `prefetch_count` is
    /// not read, as it is only the default for consumers started later
    /// ([`crate::broker::flavour::PrefetchBound`]).
    pub async fn channel_global_prefetch(&self, name: &str) -> Result<Option<u64>, BrokerError> {
        let path = format!("/api/channels/{}", percent_encode(name));
        Ok(self
            .request(Method::GET, &path, None)
            .await?
            .map(|v| global_prefetch_count(&v)))
    }

    /// `DELETE /api/connections/{name}`: the broker closes that client connection (320
    /// CONNECTION_FORCED). Already gone is fine.
    pub async fn close_connection(&self, name: &str) -> Result<(), BrokerError> {
        let path = format!("/api/connections/{}", percent_encode(name));
        self.request(Method::DELETE, &path, None).await.map(drop)
    }

    /// `PUT /api/vhosts/{vhost}`.
    pub async fn create_vhost(&self, vhost: &str) -> Result<(), BrokerError> {
        let path = format!("/api/vhosts/{}", percent_encode(vhost));
        match self.request(Method::PUT, &path, Some(serde_json::json!({}))).await? {
            Some(_) => Ok(()),
            None => Err(BrokerError::Status {
                method: "PUT",
                url: format!("{}{path}", self.base),
                status: 404,
                body: "not found".into(),
            }),
        }
    }

    /// `GET /api/vhosts`: the names of every vhost of the broker.
    pub async fn vhosts(&self) -> Result<Vec<String>, BrokerError> {
        let v = self.get("/api/vhosts").await?;
        list(v, "vhosts", "/api/vhosts", |v| string(v, "name"))
    }

    /// `DELETE /api/vhosts/{vhost}`; a vhost that does not exist counts as deleted.
    pub async fn delete_vhost(&self, vhost: &str) -> Result<(), BrokerError> {
        let path = format!("/api/vhosts/{}", percent_encode(vhost));
        self.request(Method::DELETE, &path, None).await.map(drop)
    }

    /// `PUT /api/permissions/{vhost}/{user}` with configure/write/read `.*`.
    pub async fn grant_all(&self, vhost: &str, user: &str) -> Result<(), BrokerError> {
        let path = format!("/api/permissions/{}/{}", percent_encode(vhost), percent_encode(user));
        let body = serde_json::json!({ "configure": ".*", "write": ".*", "read": ".*" });
        match self.request(Method::PUT, &path, Some(body)).await? {
            Some(_) => Ok(()),
            None => Err(BrokerError::Status {
                method: "PUT",
                url: format!("{}{path}", self.base),
                status: 404,
                body: "vhost or user not found".into(),
            }),
        }
    }

    /// `PUT /api/policies/{vhost}/{name}`: a queue policy with `definition` for the queues whose
    /// names match `pattern` (how a scenario makes the broker misbehave, e.g. nack publishes).
    pub async fn put_policy(
        &self,
        vhost: &str,
        name: &str,
        pattern: &str,
        definition: Value,
    ) -> Result<(), BrokerError> {
        let path = format!("/api/policies/{}/{}", percent_encode(vhost), percent_encode(name));
        let body = serde_json::json!({
            "pattern": pattern, "definition": definition, "priority": 100, "apply-to": "queues",
        });
        match self.request(Method::PUT, &path, Some(body)).await? {
            Some(_) => Ok(()),
            None => Err(BrokerError::Status {
                method: "PUT",
                url: format!("{}{path}", self.base),
                status: 404,
                body: "vhost not found".into(),
            }),
        }
    }

    /// `DELETE /api/users/{user}`; a user that does not exist counts as deleted.
    pub async fn delete_user(&self, user: &str) -> Result<(), BrokerError> {
        let path = format!("/api/users/{}", percent_encode(user));
        self.request(Method::DELETE, &path, None).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_full_queue_answer_parses() {
        let q = QueueInfo::from_json(&json!({
            "name": "orders", "vhost": "fleet-x", "durable": true, "exclusive": false, "auto_delete": false,
            "arguments": {"x-message-ttl": 1000, "x-dead-letter-exchange": "dlx"},
            "messages_ready": 3, "messages_unacknowledged": 2, "consumers": 1,
            "message_stats": {"ack": 7, "deliver": 8, "deliver_get": 9, "publish": 12}
        }));
        assert_eq!(q.name, "orders");
        assert_eq!((q.messages_ready, q.messages_unacknowledged, q.consumers), (3, 2, 1));
        assert!(q.durable && !q.exclusive && !q.auto_delete);
        assert_eq!(q.arguments.get("x-dead-letter-exchange"), Some(&json!("dlx")));
        assert_eq!((q.acked_total, q.delivered_total), (7, 9));
    }

    #[test]
    fn a_fresh_queue_without_statistics_reads_as_zero() {
        let q = QueueInfo::from_json(&json!({"name": "fresh", "durable": false, "messages_ready": null}));
        assert_eq!((q.messages_ready, q.messages_unacknowledged, q.consumers), (0, 0, 0));
        assert_eq!((q.acked_total, q.delivered_total), (0, 0));
        assert!(q.arguments.is_empty());
    }

    #[test]
    fn delivered_falls_back_to_deliver() {
        let q = QueueInfo::from_json(&json!({"name": "q", "message_stats": {"deliver": 4}}));
        assert_eq!(q.delivered_total, 4);
    }

    #[test]
    fn overview_names_product_and_version() {
        let rabbit = Overview::from_json(
            json!({"product_name": "RabbitMQ", "product_version": "3.10.8", "rabbitmq_version": "3.10.8"}),
        );
        assert_eq!(rabbit.label(), "RabbitMQ 3.10.8");
        let lavin = Overview::from_json(json!({"lavinmq_version": "2.5.1"}));
        assert_eq!(lavin.label(), "LavinMQ 2.5.1");
        assert_eq!(Overview::from_json(json!({})).label(), "unknown unknown");
    }

    #[test]
    fn bindings_exchanges_and_connections_parse() {
        let b = Binding::from_json(&json!({"source": "amq.topic", "destination": "q", "routing_key": "a.*"}));
        assert_eq!((b.source.as_str(), b.routing_key.as_str()), ("amq.topic", "a.*"));
        let e = ExchangeInfo::from_json(&json!({"name": "x", "type": "fanout", "durable": true}));
        assert_eq!((e.name.as_str(), e.kind.as_str(), e.durable), ("x", "fanout", true));
        let c = ConnectionInfo::from_json(&json!({"name": "127.0.0.1:1 -> 127.0.0.1:2", "user": "guest",
            "vhost": "v", "client_properties": {"connection_name": "gw"}}));
        assert_eq!(c.client_name.as_deref(), Some("gw"));
    }

    #[test]
    fn nodes_parse_with_and_without_partitions() {
        let n = NodeInfo::from_json(
            &json!({"name": "rabbit@fleetcl1", "running": true, "partitions": ["rabbit@fleetcl3"]}),
        );
        assert_eq!(n.name, "rabbit@fleetcl1");
        assert!(n.running);
        assert_eq!(n.partitions, ["rabbit@fleetcl3"]);
        let down = NodeInfo::from_json(&json!({"name": "rabbit@fleetcl3", "running": false}));
        assert!(!down.running && down.partitions.is_empty());
    }

    #[tokio::test]
    async fn a_cluster_client_asks_the_next_node_when_one_does_not_answer() {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        // A port nothing listens on (bound, then released), and a node that answers.
        let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let dead_base = format!("http://{}", dead.local_addr().expect("addr"));
        drop(dead);
        let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let live_base = format!("http://{}", live.local_addr().expect("addr"));
        tokio::spawn(async move {
            while let Ok((mut s, _)) = live.accept().await {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let body = r#"[{"name":"rabbit@b","running":true}]"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        let m = Management::with_fallbacks(&[dead_base.clone(), live_base], "guest", "guest").expect("client");
        assert_eq!(m.base_url(), dead_base);
        let nodes = m.nodes().await.expect("the second node answers");
        assert_eq!(nodes[0].name, "rabbit@b");
        // The node that answered is asked first from now on.
        assert_eq!(m.current.load(std::sync::atomic::Ordering::Relaxed), 1);
        let single = Management::new(&dead_base, "guest", "guest").expect("client");
        assert!(matches!(single.nodes().await, Err(BrokerError::Http { .. })));
    }

    #[test]
    fn a_non_list_answer_is_a_decode_error() {
        let err = list(json!({"error": "x"}), "queues", "/api/queues/v", QueueInfo::from_json).expect_err("not a list");
        assert!(err.to_string().contains("/api/queues/v"), "{err}");
    }
}
