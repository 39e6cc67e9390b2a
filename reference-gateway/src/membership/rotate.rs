//! The gateway's own `_gateway` presence as the carrier of its identity, and rotation without a
//! flag day (MEM-2, MEM-3, MEM-5).
//!
//! The host's `_gateway` presence carries its certificate, from which receivers learn its key: at
//! every (re)connect it goes out before any entity's presence, so a receiver that did not know
//! the host yet knows its key when the entities' presence arrives.
//!
//! A rotation loads the key and certificate files together; a certificate over another key than
//! the key file's is refused (ERROR naming the certificate file, the old pair kept), and so is one
//! the fleet would reject — CA not trusted, revoked, not yet valid, expired, host not a principal,
//! critical options ([C-21] 12: judged as a peer judges it, [`super::own::judge`]); one refused
//! only for not being valid yet is tried again when it becomes valid ([C-27] 3). Otherwise the
//! new key is trusted as the gateway's own (its own messages come back to it), the `_gateway`
//! presence with the new certificate is published signed with the new key and confirmed, and
//! only then does the publisher sign with the new key: receivers learn the new key before anything
//! else signed with it reaches them ([C-19]'s order). The presence is published under the
//! departures lock, which every heartbeat takes too, so no heartbeat pairs the old key with the
//! new certificate. Receivers keep the old key until its certificate expires (the peers file
//! lists both in a fleet without a CA), so what was signed before and is still in flight verifies.

use tracing::debug;

use super::cert::key_fingerprint;
use super::files::TrustFile;
use super::own::IdentityError;
use crate::envelope::GATEWAY_FROM;
use crate::gateway::Gateway;

/// What a rotation attempt did.
#[derive(Debug)]
pub enum Rotation {
    /// Key and certificate are the ones in use.
    Unchanged,
    /// In use from now on; the text says what changed.
    Rotated(String),
    /// A file is bad: the old pair stays. `retry_at_ms`: refused only for a certificate not
    /// valid yet, it is tried again at that instant (Unix ms) without a file change ([C-27] 3).
    Refused {
        file: TrustFile,
        error: String,
        retry_at_ms: Option<u64>,
    },
    /// The new key's presence could not be published (not connected): tried again later.
    Pending(String),
}

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

    /// MEM-3: loads the key and certificate files and, when they changed and belong together,
    /// switches to them as the module docs say.
    pub async fn rotate_identity(&self) -> Rotation {
        let own = &self.membership.own;
        let current = own.identity();
        let next = match own.reload() {
            Ok(next) => next,
            Err(IdentityError::Key(e)) => {
                return Rotation::Refused {
                    file: TrustFile::SigningKey,
                    error: e.to_string(),
                    retry_at_ms: None,
                };
            }
            Err(IdentityError::Cert(e)) => {
                return Rotation::Refused {
                    file: TrustFile::HostCert,
                    error: e.to_string(),
                    retry_at_ms: None,
                };
            }
        };
        if next.same_as(&current) {
            return Rotation::Unchanged;
        }
        // [C-21] 12: a certificate the fleet would reject is refused like one over another key.
        if let Some(cert) = &next.cert
            && let Err(p) = self.membership.judge_own(cert)
        {
            let retry_at_ms = self.membership.good_once_valid(cert);
            let when = match retry_at_ms {
                Some(at) => format!(
                    "; it is taken without a file change or SIGHUP when it becomes valid, at {} ({} ms from now)",
                    super::cert::utc(at / 1000),
                    at.saturating_sub(crate::envelope::now_ms())
                ),
                None => String::new(),
            };
            return Rotation::Refused {
                file: TrustFile::HostCert,
                error: format!("{p}: the fleet would reject it, so it is not taken{when}"),
                retry_at_ms,
            };
        }
        let new_key = next.signer.verifying_key() != current.signer.verifying_key();
        let serial = next.cert.as_ref().map_or("no certificate".to_string(), |c| {
            format!("certificate serial {}", c.serial)
        });
        if !new_key {
            // A renewed certificate over the same key: carried from now on.
            own.set(next);
            self.announce_host().await;
            return Rotation::Rotated(format!("host certificate replaced ({serial}), same key"));
        }
        self.membership.trust.add_own_key(next.signer.verifying_key());
        let departed = self.departures.lock().await;
        if !departed.may_heartbeat(None) {
            return Rotation::Pending("the gateway is stopping".into());
        }
        let mut body = self.gateway_presence("up", None);
        body.cert = next.cert.as_ref().map(|c| c.text.clone());
        let mut out = self.presence_outgoing(GATEWAY_FROM, &body);
        out.signer = Some(next.signer.clone());
        if let Err(e) = self.publisher.publish(out).await {
            return Rotation::Pending(e.to_string());
        }
        self.publisher.set_signer(next.signer.clone());
        let (from, to) = (
            key_fingerprint(&current.signer.verifying_key()),
            key_fingerprint(&next.signer.verifying_key()),
        );
        own.set(next);
        drop(departed);
        Rotation::Rotated(format!(
            "signing key rotated from {from} to {to} ({serial}): its _gateway presence was confirmed first (MEM-3)"
        ))
    }
}
