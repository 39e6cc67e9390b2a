//! Where verification meets the trust state of SPEC §18: the signature check of every consumer.
//!
//! - inbox and control messages ([`Gateway::check_signature`]): a host with no key yet is waited
//!   for like an unknown `from` (MEM-2 → [C-7], [C-10]), then rejected `signature`; a signature
//!   that no key of a known host verifies is judged again once the roster consumer has caught up
//!   (the host may have rotated to a key its queued presence carries, MEM-3);
//! - presence ([`Gateway::check_presence_signature`]): a `_gateway` PRESENCE may carry the host's
//!   certificate, which makes its key known (MEM-2, MEM-5); no grace there (the roster consumer
//!   is what makes hosts known, it must not wait on itself);
//! - dead letters: a plain check (only a verified one is reported, SIG-6).

use serde::Deserialize;
use tracing::{info, warn};

use super::trust::PresenceTrust;
use crate::envelope::{Envelope, GATEWAY_FROM, now_ms};
use crate::gateway::Gateway;
use crate::signing::SigError;
use crate::verify::Rejection;

/// The one field of a `_gateway` body read before its signature is checked.
#[derive(Deserialize)]
struct CertField {
    #[serde(default)]
    cert: Option<String>,
}

impl Gateway {
    /// SIG-2 (1) for an inbox or control message, with MEM-2's grace for a host that holds no
    /// key yet (its `_gateway` presence may still be on its way).
    pub async fn check_signature(&self, env: &Envelope, body: &[u8]) -> Result<(), Rejection> {
        let trust = &self.membership.trust;
        match trust.verify(env, body) {
            Ok(_) => Ok(()),
            Err(Rejection::Signature(SigError::UnknownHost(_))) => {
                let known = || trust.has_valid_key(&env.host, now_ms());
                self.roster_grace(&env.from, &env.host, known).await;
                trust.verify(env, body).map(|_| ())
            }
            Err(Rejection::Signature(SigError::BadSignature(_))) => {
                // MEM-3: a host that rotated published its new key's presence, confirmed, before
                // this message; the presence may still be queued on the roster consumer. Judged
                // again once everything queued before now was applied ([C-10]'s marker).
                self.roster_caught_up(tokio::time::Instant::now(), 3 * self.cfg.heartbeat)
                    .await;
                trust.verify(env, body).map(|_| ())
            }
            Err(why) => Err(why),
        }
    }

    /// SIG-2 (1) for a PRESENCE; a `_gateway` one's `cert` is checked (MEM-2) and, valid, makes
    /// the certificate's key the host's. A presence that verifies under a key already held
    /// applies even when the certificate it carries is no good (WARN, once per certificate).
    pub fn check_presence_signature(&self, env: &Envelope, body: &[u8]) -> Result<(), Rejection> {
        let cert = if env.from == GATEWAY_FROM {
            serde_json::from_slice::<CertField>(body).ok().and_then(|c| c.cert)
        } else {
            None
        };
        match self.membership.trust.check_presence(env, body, cert.as_deref())? {
            PresenceTrust::Held => {}
            PresenceTrust::Learned => {
                info!(host = %env.host, "host key learned from its certificate (MEM-2)");
            }
            PresenceTrust::HeldBadCert(problem) => {
                if self
                    .membership
                    .first_warning(&env.host, cert.as_deref().unwrap_or_default())
                {
                    warn!(
                        host = %env.host,
                        problem = problem.check(),
                        error = %problem,
                        "the certificate of a _gateway presence is not taken; the presence verifies under a key the host already holds and applies"
                    );
                }
            }
        }
        Ok(())
    }
}
