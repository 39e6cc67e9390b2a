//! `fleet-conformance`: the black-box conformance harness for Fleet gateways.
//!
//! One module per real component the suite drives. Nothing here imports the reference gateway:
//! the suite judges any gateway by what crosses the wire, so a bug in the gateway cannot hide
//! behind a helper they share.
//!
//! - [`conformance`] — the runner's verdict: requirement registry, capabilities, baseline, reports
//! - [`broker`] — broker providers (container, local process, URL) and the management API
//! - [`credentials`] — SPEC §18's CAs, certificates and revocation lists, made by real `ssh-keygen`
//! - [`cleanup`] — what the suite started, stopped on Ctrl-C, SIGTERM or panic; leftovers swept
//! - [`gateway`] — a gateway under test, as a real process with the SPEC §15 contract
//! - [`herdr`] — the fake herdr socket server (the only fake)
//! - [`mcp`] — a real MCP client acting as one entity
//! - [`keys`] — host keys and the peers file
//! - [`names`] — the broker names of SPEC §1 (inboxes, control and roster queues), built once
//! - [`probe`] — the suite's own AMQP connection: taps, crafted messages, passive declares
//! - [`proxy`] — the cuttable link: a TCP proxy between gateways and the broker
//! - [`envelope`] — the suite's own envelope and signing input, to craft and judge messages
//! - [`logs`] — the suite's own `tracing` lines to stderr (`RUST_LOG`)
//! - [`legacy`] — the v1.0.0 broker state of `fixtures/legacy/`, seeded for migration scenarios
//! - [`schemas`] — the contract's JSON Schemas (`fixtures/schemas/`), checked on every answer read
//! - [`timeline`] — a scenario's wire, injects and failing step in time order, for its sequence chart
//! - [`timing`] — deadlines instead of sleeps, and the time-scale knob
//! - [`reaction`] — a gateway's reaction judged against SPEC's number, the machine's part measured and taken off
//! - [`tls`] — test-time certificates for `amqps://` brokers

pub mod broker;
pub mod cleanup;
pub mod conformance;
pub mod contract;
pub mod credentials;
pub mod envelope;
pub mod gateway;
pub mod herdr;
pub mod keys;
pub mod legacy;
pub mod logs;
pub mod mcp;
pub mod names;
pub mod ports;
pub mod probe;
pub mod proxy;
pub mod reaction;
pub mod report;
pub mod schemas;
pub mod timeline;
pub mod timing;
pub mod tls;
