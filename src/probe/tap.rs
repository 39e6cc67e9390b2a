//! A probe-owned queue that copies what crosses the wire, and the suite's record of it.
//!
//! Why a file of its own: a tap is read by looks that may be abandoned (`react_within` gives up
//! on a look that hangs) and by steps that run while background traffic keeps filling the queue.
//! Messages are taken with `basic.get` and `no_ack`, so whatever a fetch took is gone from the
//! broker: a fetch that was dropped half-way used to lose what it had taken, and two fetches at
//! once could record their halves out of the broker's order — a step judging *which message came
//! first* (MEM-3's order) then saw a later message first. So a fetch here:
//! - runs in a task of its own, which finishes even when the look that started it is abandoned,
//!   and records each message the moment it is taken;
//! - runs one at a time (later fetches wait), so the record keeps the queue's order;
//! - takes at most what the queue held when it began (plus one), so traffic that never pauses
//!   cannot keep a look from ending.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lapin::Channel;
use lapin::options::BasicGetOptions;

use super::captured::Captured;
use super::error::ProbeError;
use crate::timing::wait_for;

/// A probe-owned queue bound to an exchange; messages are fetched with `basic.get` and kept.
pub struct Tap {
    inner: Arc<Inner>,
}

struct Inner {
    ch: Channel,
    queue: String,
    /// Everything taken so far, in the queue's order.
    seen: Mutex<Vec<Captured>>,
    /// Held by the one fetch running.
    fetching: tokio::sync::Mutex<()>,
}

impl Tap {
    pub(super) fn new(ch: Channel, queue: String) -> Tap {
        Tap {
            inner: Arc::new(Inner {
                ch,
                queue,
                seen: Mutex::new(Vec::new()),
                fetching: tokio::sync::Mutex::new(()),
            }),
        }
    }

    pub fn queue(&self) -> &str {
        &self.inner.queue
    }

    pub(super) fn channel(&self) -> &Channel {
        &self.inner.ch
    }

    /// Fetches what waits in the tap queue; returns all messages captured so far, in order.
    pub async fn fetch(&self) -> Result<Vec<Captured>, ProbeError> {
        let inner = Arc::clone(&self.inner);
        tokio::spawn(async move { inner.drain().await })
            .await
            .map_err(|e| ProbeError::Fetch(e.to_string()))??;
        Ok(self.inner.snapshot())
    }

    /// Waits (scaled deadline) until a captured message satisfies `pred`, and returns it.
    pub async fn wait_for(
        &self,
        what: &str,
        nominal: Duration,
        pred: impl Fn(&Captured) -> bool,
    ) -> Result<Captured, ProbeError> {
        let pred = &pred;
        Ok(wait_for(what, nominal, || async move {
            let all = self.fetch().await.map_err(|e| e.to_string())?;
            match all.iter().find(|m| pred(m)) {
                Some(m) => Ok(Some(m.clone())),
                None => Err(format!("{} message(s) captured, none matching", all.len())),
            }
        })
        .await?)
    }
}

impl Inner {
    fn snapshot(&self) -> Vec<Captured> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes what the queue holds now (at most that many and one more), recording each message
    /// as it is taken.
    async fn drain(&self) -> Result<(), ProbeError> {
        let _one = self.fetching.lock().await;
        let mut left: Option<u32> = None;
        while left != Some(0) {
            let Some(m) = self
                .ch
                .basic_get(self.queue.as_str().into(), BasicGetOptions { no_ack: true })
                .await?
            else {
                break;
            };
            // The count after the first take bounds this fetch; later counts only shrink it.
            left = Some(match left {
                None => m.message_count,
                Some(n) => n.saturating_sub(1).min(m.message_count),
            });
            let d = m.delivery;
            self.seen.lock().unwrap_or_else(|p| p.into_inner()).push(Captured {
                exchange: d.exchange.as_str().to_string(),
                routing_key: d.routing_key.as_str().to_string(),
                properties: d.properties,
                body: d.data,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lapin::BasicProperties;
    use lapin::types::FieldTable;

    use super::*;
    use crate::broker::{Broker, BrokerSpec};
    use crate::probe::{Crafted, Probe};

    /// Publishes `n` messages numbered from `from` to `amq.topic`.
    async fn publish(probe: &Probe, from: usize, n: usize) {
        for i in from..from + n {
            let msg = Crafted {
                exchange: "amq.topic".into(),
                routing_key: "tap.test".into(),
                headers: FieldTable::default(),
                body: i.to_string().into_bytes(),
                properties: BasicProperties::default(),
                mandatory: false,
            };
            probe.publish(&msg).await.expect("probe publish");
        }
    }

    fn numbers(seen: &[Captured]) -> Vec<usize> {
        seen.iter()
            .map(|c| String::from_utf8_lossy(&c.body).parse().expect("a number"))
            .collect()
    }

    /// A fetch abandoned half-way loses nothing it took, and fetches at once keep the queue's
    /// order: what MEM-3's "first message signed with the new key" rests on. Red on the tap
    /// before this file (the dropped fetch's messages were gone; concurrent halves interleaved).
    /// Run with `cargo test -p fleet-conformance --lib -- --ignored probe::tap`.
    #[tokio::test]
    #[ignore = "starts a real rabbitmq-server process; needs the Debian package"]
    async fn abandoned_and_concurrent_fetches_lose_and_reorder_nothing() {
        let broker = Broker::start(&BrokerSpec::parse("process:rabbitmq").expect("valid"))
            .await
            .expect("broker starts");
        let vhost = broker.create_vhost().await.expect("vhost");
        let probe = Probe::connect(&broker.amqp_url(&vhost)).await.expect("probe");
        let tap = probe.tap("amq.topic", "tap.#").await.expect("tap");
        const N: usize = 2000;
        publish(&probe, 0, N).await;
        // Abandoned as `react_within` abandons a look that hangs.
        let cut = tokio::time::timeout(Duration::from_millis(20), tap.fetch()).await;
        assert!(cut.is_err(), "the first fetch was meant to be cut off; make N larger");
        let all = tap.fetch().await.expect("fetch");
        assert_eq!(numbers(&all), (0..N).collect::<Vec<_>>(), "after an abandoned fetch");

        publish(&probe, N, N).await;
        let (x, y) = tokio::join!(tap.fetch(), tap.fetch());
        x.expect("fetch");
        y.expect("fetch");
        let all = tap.fetch().await.expect("fetch");
        assert_eq!(
            numbers(&all),
            (0..2 * N).collect::<Vec<_>>(),
            "after two fetches at once"
        );
        probe.close().await;
        broker.delete_vhost(&vhost).await.expect("vhost deleted");
        broker.stop().await.expect("broker stops");
    }
}
