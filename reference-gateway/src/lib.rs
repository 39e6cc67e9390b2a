//! `fleet-gateway`: the reference gateway for Fleet cross-host messaging.
//!
//! One module per spec area; each adds its behaviour to [`gateway::Gateway`], the hub that keeps
//! the broker connection and imports none of them (README, "The reference gateway's layout"):
//! - [`gateway`] — the hub: shared state, connection, inbox consumers, stall detector, stop
//! - [`areas`] — which area answers each of the hub's moments ([`gateway::Areas`]), in order
//! - [`config`] — the SPEC §15 environment contract (+ TOML)
//! - [`ids`] — host and pane id checks, shared by `config` and the modules above it
//! - [`envelope`], [`signing`], [`verify`] — SPEC §2–3: envelope, signatures, verification chain
//! - [`topology`], [`publish`] — SPEC §1 and §4: exchanges and queues, confirmed publishing
//! - [`forward`] — SPEC §5, briefs into workers (at-most-once + INJECTED)
//! - [`pull`] — SPEC §6, held messages for mains (at-least-once)
//! - [`grace`] — the [C-7]/[C-10] wait before an unknown sender is rejected
//! - [`presence`] — SPEC §8, heartbeats and the roster view; [`departures`] orders `down` after them
//! - [`entities`], [`registry`] — entity life cycle and the durable registry
//! - [`inbox`] — verification and routing of every inbox delivery
//! - [`herdr`] — the herdr socket client
//! - [`mcp`], [`api`] — the MCP tools and the local HTTP API
//! - [`membership`] — SPEC §18, host certificates, revocation, live trust files (MEM)
//! - [`metrics`] — Prometheus counters
//! - [`migration`] — SPEC §13, moving v1.0.0 legacy queues into v2 inboxes (MIG, TOP-5)
//! - [`convert`] — SPEC §16 (CLU-7), converting classic inboxes to quorum (`convert-inboxes`)
//! - [`tls`] — `amqps://` with a pinned CA (SEC-1)
//! - [`unconfirmed`] — the age of the oldest unconfirmed publish, for the stall detector (CLU-1)

pub mod api;
pub mod areas;
pub mod config;
pub mod conversation;
pub mod convert;
pub mod dead_letters;
pub mod departures;
pub mod entities;
pub mod entity_state;
pub mod envelope;
pub mod expected_close;
pub mod forward;
pub mod gateway;
pub mod grace;
pub mod herdr;
pub mod hosts_heard;
pub mod ids;
pub mod inbox;
pub mod mcp;
pub mod membership;
pub mod metrics;
pub mod migration;
pub mod presence;
pub mod publish;
pub mod pull;
pub mod registry;
pub mod signing;
pub mod slow;
pub mod spawn;
pub mod tls;
pub mod topology;
pub mod unconfirmed;
pub mod verify;
