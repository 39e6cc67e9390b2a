//! The spec areas as the hub sees them: what happens at each moment of a connection's life that
//! is not the connection's own business.
//!
//! Exists so that the hub (this folder: connect, node failover, declare, consume, reconnect,
//! stop) imports none of the areas that extend the gateway. It calls them through this
//! interface; the crate's top ([`crate::areas`]) says which area answers each moment, in which
//! order. The per-area state the hub holds (held deliveries, pending sends, turns, the roster
//! view) lives in files of its own below both, so no arrow runs from the hub back up.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lapin::Connection;
use lapin::message::Delivery;

use super::Gateway;
use crate::registry::Entity;

/// One area's answer to a moment: a boxed future, so the hub can hold the areas as a trait object.
pub type Step<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the areas do at the connection's moments, in the order the hub meets them.
pub trait Areas: Send + Sync {
    /// A connection is up, the core topology declared and the publisher attached; no inbox is
    /// consumed yet: the host's own queues and consumers, its announcement, the migration. An
    /// error fails the setup (the hub logs it, reports it on `/readyz` and tries again).
    fn connected<'a>(&'a self, gw: &'a Arc<Gateway>, conn: &'a Arc<Connection>) -> Step<'a, anyhow::Result<()>>;

    /// Every registered entity's inbox was attached (or refused) on `conn`.
    fn inboxes_attached(&self, gw: &Arc<Gateway>, conn: Arc<Connection>);

    /// A delivery from the inbox of the local entity `owner`.
    fn delivered<'a>(&'a self, gw: &'a Arc<Gateway>, owner: &'a str, d: Delivery) -> Step<'a, ()>;

    /// The inbox of `e`, refused before, is consumed now.
    fn reattached<'a>(&'a self, gw: &'a Gateway, e: &'a Entity) -> Step<'a, ()>;

    /// A graceful stop, once the inboxes are closed and the injects in flight have ended.
    fn stopping<'a>(&'a self, gw: &'a Gateway) -> Step<'a, ()>;
}
