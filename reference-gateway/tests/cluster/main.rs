//! The cluster profile (SPEC §16) against a real RabbitMQ: quorum declarations (CLU-2), CON-2 by
//! passive declare and CON-1's takeover (CLU-3), a classic inbox met in quorum mode (CLU-7), and
//! `convert-inboxes` (order, ids, properties, a rerun, SIGKILLs at any point).
//!
//! Exists because none of this shows without a broker: the arguments a broker accepts together,
//! what a 406 does to a channel, what a killed conversion leaves behind. Quorum queues work on a
//! single node, so one node is enough here; failover between nodes (CLU-1, CLU-5, CLU-6) is the
//! conformance suite's cluster scenarios' job.
//!
//! Ignored by default (it needs RabbitMQ and takes about a minute):
//!
//! ```text
//! cargo test -p fleet-gateway --test cluster -- --ignored
//! ```
//!
//! With `FLEET_TEST_AMQP_URL=amqp://user:pass@host:port/vhost` it uses that broker (give it a vhost
//! of its own: the gateways declare `bridge.dlq` quorum there); otherwise it starts a throwaway
//! node of Debian's `rabbitmq-server` (`/usr/lib/rabbitmq/bin/rabbitmq-server`, installed by
//! `scripts/setup`) in a temp dir and stops it at the end.
//!
//! Files by what they test: [`gateways`] (the gateway in quorum mode: CLU-2, CLU-3, CLU-7),
//! [`channel_ids`] (refusals retried by the thousand cost the gateway no channel it needs),
//! [`side_fallback`] (a side connection the broker refuses: lookups on the main one),
//! [`delay_probe`] (the `bridge.delay` probe leaves no lapin ERROR; `FLEET_TEST_DELAY_PROBES`
//! rounds, default 200) and [`conversion`] (`convert-inboxes`); with their support, [`broker`] (a throwaway node and
//! looks at what it holds) and [`messages`] (test messages, publishing and draining them).

mod broker;
mod channel_ids;
mod conversion;
mod delay_probe;
mod gateways;
mod messages;
mod side_fallback;

use std::path::Path;

use broker::{Node, SERVER, connect};
use channel_ids::refusals_retried;
use conversion::{conversion, kills, resumes};
use delay_probe::delay_probe_leaves_no_error;
use gateways::gateways;
use side_fallback::side_refused;

#[test]
#[ignore = "needs RabbitMQ (FLEET_TEST_AMQP_URL, or Debian's rabbitmq-server to start one)"]
fn cluster_profile_on_a_real_broker() {
    let mut node = None;
    let url = match std::env::var("FLEET_TEST_AMQP_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => {
            assert!(
                Path::new(SERVER).exists(),
                "set FLEET_TEST_AMQP_URL or install rabbitmq-server (scripts/setup)"
            );
            let started = Node::start();
            let url = started.url.clone();
            node = Some(started);
            url
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let _ = connect(&url).await;
        let rounds = std::env::var("FLEET_TEST_DELAY_PROBES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(200);
        assert_eq!(
            delay_probe_leaves_no_error(&url, rounds).await,
            0,
            "lapin ERROR lines after bridge.delay probes"
        );
        conversion(&url).await;
        resumes(&url).await;
        kills(&url).await;
        gateways(&url).await;
        refusals_retried(&url).await;
        match &node {
            Some(node) => side_refused(node).await,
            // Needs rabbitmqctl on the node (a per-user connection limit): said, not passed.
            None => eprintln!("side connection refused: NOT RUN (needs the throwaway node, not FLEET_TEST_AMQP_URL)"),
        }
    });
}
