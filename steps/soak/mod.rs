//! The soak run (`@soak`, only with `FLEET_E2E_SOAK=1`): briefs and replies across three hosts
//! while a nemesis kills, freezes and cuts gateways, closes their broker connections and restarts
//! the broker, then a Jepsen-style history check. On a cluster whose gateways run the cluster
//! profile (SPEC §16) the nemesis also strikes nodes one at a time — kills one and starts it
//! again, kills the main's inbox leader, cuts one off and heals it (container provider) — and the
//! run ends on a whole cluster ([`nodes`]). With a gateway that declares `membership` (SPEC §18)
//! and `rotate` or `revoke-restore` in the cycle, the hosts run on certificates from a fleet CA
//! made by `ssh-keygen` — no soak host in any peers file ([`certs`]) — and the nemesis rotates a
//! host's key mid-traffic or revokes its certificate and issues it a new one ([`trust`]).
//!
//! **History.** Every operation (`bridge_send` of a brief, `bridge_reply` of a worker, and the
//! main's `bridge_poll` drains) is recorded as the caller saw it:
//! - **ok** — acknowledged as delivered: `bridge_send` → `injected`; `bridge_reply` → a `msgId`;
//! - **failed** — a definite failure that means "not delivered": `no_route` (the broker returned
//!   it, PUB-2) or a FAILED whose reason says the worker's gateway did not inject it (`busy`,
//!   `stopped`, `no_such_entity`, `maxlen`, `expired`, `not_submitted`), a `failed` answer with
//!   reason `revoked` (a gateway refusing to send on a revoked certificate) or `not_connected`
//!   (the publish never left the caller's gateway: no connection, no open channel, refused before
//!   any byte was written), or a reply whose MCP session could not even be opened (no call made,
//!   outcome `no_mcp_session`); and, on evidence, an operation whose message
//!   the receiving gateway rejected `revoked` while the nemesis had its signer's certificate
//!   revoked — ok or unknown as the caller saw it, counted failed ([`revoked`]: a revoked host's
//!   messages are rejected by design, MEM-4, and no FAILED is reported for them, SIG-6);
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
//! - **failed but delivered**: a *failed* operation's message arrived after all, whatever its
//!   reason — a brief injected and submitted (typed into the pane at all, for one that never left
//!   the main's gateway: `not_connected`), a reply drained by the main.
//!
//! Unknown operations may or may not arrive; either is fine (counted, never a violation). Any
//! violation fails the run. A history with no ok brief or no ok reply proves nothing and fails too.
//!
//! The summary is printed and written as JSON to `<reports>/<broker>/soak.json` beside
//! `cucumber.json` (`$FLEET_E2E_OUT` or `target/fleet-e2e/`), pass or fail. Besides the verdict it
//! measures ([`summary`]): the unknown rate over all operations, with and without the unknowns
//! that are inherent (`unknownRate`, `unknownRateExcludingInherent`), the unknowns per nemesis kind
//! (`unknownByNemesis`) and the definite failures per nemesis kind, tool and reason
//! (`failedByNemesis`); the one-line summary gives both rates and the failures per kind.
//!
//! Knobs ([`config`]): `FLEET_SOAK_OPS` (operations in all, split evenly into briefs and replies
//! over the two workers; default: what the feature says), `FLEET_SOAK_NEMESIS` (the nemesis
//! cycle, a comma list of `kill`, `pause`, `cut`, `close`, `restart`, `node-kill`,
//! `leader-kill`, `partition`, `rotate`, `revoke-restore`, `site`, and `default` for the default cycle;
//! default [`config::DEFAULT_CYCLE`], on a cluster [`config::CLUSTER_CYCLE`] — neither holds
//! `rotate` nor `revoke-restore`, see [`config`]), `FLEET_SOAK_SEED` (the seed of the nemesis'
//! random picks; printed).
//!
//! The parts, one file each: [`config`] (the knobs), [`nemesis`] (its strikes, its random picks and
//! the clock that paces the operations), [`nodes`] (a cluster's links and node strikes), [`certs`]
//! (the hosts on certificates, their keys and certificates kept in [`fleet`]) and [`trust`] (the
//! rotate and revoke-restore strikes), [`site`] (the whole site down together and back in a
//! random order, [C-25]), [`history`] (what the callers saw, and the state the steps
//! keep), [`run`] (the steps that set up and run the soak), [`check`] (the history checker, a pure
//! function), [`summary`] (the summary's rates and per-nemesis failures, pure functions too),
//! [`revoked`] (what a revoked host could not complete, on the receivers' evidence) and [`heal`]
//! (the last step: heal, check, write the summary). Their unit tests: `tests.rs` (`cargo test
//! --features e2e --test steps-unit`).

mod certs;
mod check;
mod config;
mod fleet;
mod heal;
mod history;
mod nemesis;
mod nodes;
mod revoked;
mod run;
mod site;
mod summary;
// The e2e target is built with `cfg(test)` but without the test harness (its `#[test]` functions
// are dropped there), so what they use looks unused in it; `steps-unit` runs them.
#[cfg(test)]
#[allow(dead_code, unused_imports)]
mod tests;
mod trust;

pub use history::SoakState;
