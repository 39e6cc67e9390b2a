//! Gateway-enforced expiry (ASK-3, [C-13]): an ASK that reaches the main's gateway after its
//! `expiresAt`, with no broker `expiration` to drop it first, is acked and dropped — never
//! dead-lettered, surfaced or answered.

use cucumber::{then, when};
use fleet_conformance::envelope::{Envelope, new_uuid, now_ms};
use fleet_conformance::probe::Crafted;

use crate::world::FleetWorld;

use super::{Hostile, fake_gid, key, last_hostile, tap};

/// Publishes an ASK from fake entity `from` to `main` whose `expiresAt` passed a minute ago, with
/// no broker `expiration`: only the gateway can tell it is late. It counts as hostile for the
/// "nothing … held" check (it must never be surfaced).
#[when(expr = "the probe sends {string} an ASK from {string} that expired a minute ago")]
async fn sends_expired_ask(w: &mut FleetWorld, main: String, from: String) -> anyhow::Result<()> {
    let to = w.gid(&main)?;
    let mut env = Envelope::new("ASK", &fake_gid(w, &from)?, &to, "probe");
    let now = now_ms();
    env.set("turnId", &new_uuid())
        .set("ts", &(now - 120_000).to_string())
        .set("expiresAt", &(now - 60_000).to_string());
    let marker = env.msg_id().to_string();
    let text = format!("a late question {marker}");
    let env = env.signed_by(&key(w, "probe")?, text.as_bytes());
    let msg = Crafted::from_envelope("bridge.msg", &to, &env, text.as_bytes());
    w.probe().await?.publish(&msg).await?;
    w.wire.hostile_texts.push(text);
    w.wire.hostile_ids.push(marker.clone());
    w.wire.hostile = Some(Hostile { marker });
    Ok(())
}

/// [C-13]: a late ASK/ANSWER is acked and dropped — not rejected, and never acted on (no
/// NO_WAITER or any other notice names it). Watched over a window on the dead-letter and message
/// taps (the FIFO check before it proved the gateway had handled it).
#[then("the late ASK was acked and dropped: never dead-lettered, never answered")]
async fn late_ask_dropped(w: &mut FleetWorld) -> anyhow::Result<()> {
    let marker = last_hostile(w)?.marker.clone();
    let dlx = tap(&w.wire.dlx, "bridge.dlx")?;
    let msgs = tap(&w.wire.msgs, "bridge.msg")?;
    fleet_conformance::timing::hold_for(
        "the late ASK dropped",
        fleet_conformance::timing::ABSENCE_WINDOW,
        || {
            let (dlx, msgs, marker) = (&dlx, &msgs, marker.as_str());
            async move {
                let dead = dlx.fetch().await.map_err(|e| e.to_string())?;
                if let Some(c) = dead.iter().find(|c| c.message_id().as_deref() == Some(marker)) {
                    return Err(format!(
                        "the late ASK was dead-lettered (x-death reason {:?}): [C-13] wants it acked and dropped",
                        c.death_reason()
                    ));
                }
                let wire = msgs.fetch().await.map_err(|e| e.to_string())?;
                match wire.iter().find(|c| c.header_str("corrId").as_deref() == Some(marker)) {
                    Some(c) => Err(format!(
                        "a {} about the late ASK was published: ASK-3 wants it dropped, never surfaced or answered",
                        c.header_str("kind").unwrap_or_default()
                    )),
                    None => Ok(()),
                }
            }
        },
    )
    .await?;
    Ok(())
}
