//! The gateway's own `_gateway` presence as the carrier of its identity (MEM-2, MEM-5).
//!
//! The host's `_gateway` presence carries its certificate, from which receivers learn its key: at
//! every (re)connect it goes out before any entity's presence, so a receiver that did not know
//! the host yet knows its key when the entities' presence arrives.

use tracing::debug;

use crate::envelope::GATEWAY_FROM;
use crate::gateway::Gateway;

impl Gateway {
    /// Publishes the `_gateway` presence with the own certificate and no entity list (a plain
    /// upsert of the host's entry at every receiver; the next heartbeat lists the entities).
    pub async fn announce_host(&self) {
        let departed = self.departures.lock().await;
        if !departed.may_heartbeat(None) {
            return;
        }
        let body = self.gateway_presence("up", None);
        if let Err(e) = self.announce(GATEWAY_FROM, &body).await {
            debug!(error = %e, "first _gateway presence not published");
        }
        drop(departed);
    }
}
