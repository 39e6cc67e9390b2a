//! Tests of the cluster section's figures and lines (no broker): a side's ratios, the costs, the
//! kill summary against its bound, and the text.
//!
//! Why a file: they share their made-up sides and kills across [`crate::cluster::result`] and
//! [`crate::cluster::table`].

use crate::cluster::result::{ClusterResult, Kill, KillToReady, Phase, Side, SideFigures, bound_ms, costs, summary};
use crate::cluster::table::*;
use std::collections::BTreeMap;

use crate::fixtures;
use crate::paths::raw::QueueKind;
use crate::rig::BrokerInfo;

fn side(label: &str, nodes: usize, kind: QueueKind, echo: f64, fwd: f64, pull: f64, p50: f64) -> Side {
    let mut e = fixtures::echo(echo);
    e.single_round_trip = fixtures::latency(p50);
    e.cpu_ms_per_round_trip = BTreeMap::from([("broker1".to_string(), 0.2), ("broker2".to_string(), 0.1)]);
    let forward = fixtures::forward(fwd, 2.0 * p50, &[("broker", 0.5), ("gateway_a", 0.1)]);
    let pull = fixtures::pull(pull, 1.5 * p50);
    let figures = SideFigures::of(&e, &e, &forward, &pull);
    Side {
        label: label.into(),
        broker: BrokerInfo {
            spec: "process:rabbitmq".into(),
            version: "RabbitMQ 3.10.8".into(),
        },
        nodes,
        queue_type: kind,
        echo: e.clone(),
        echo_after: e,
        forward,
        pull,
        figures,
    }
}

fn sides() -> Vec<Side> {
    vec![
        side(
            "single node, quorum",
            1,
            QueueKind::Quorum,
            2_000.0,
            1_000.0,
            1_600.0,
            2.0,
        ),
        side(
            "single node, classic",
            1,
            QueueKind::Classic,
            4_000.0,
            1_500.0,
            2_000.0,
            1.0,
        ),
        side(
            "3-node cluster, quorum",
            3,
            QueueKind::Quorum,
            1_000.0,
            600.0,
            800.0,
            4.0,
        ),
    ]
}

#[test]
fn a_side_s_figures_are_its_paths_over_its_own_echo_and_its_brokers_summed() {
    let s = &sides()[2];
    assert_eq!(s.figures.forward_to_echo, 0.6);
    assert_eq!(s.figures.pull_to_echo, 0.8);
    assert_eq!(s.figures.echo_p50_ms, 4.0);
    assert!((s.figures.broker_cpu_ms_per_echo.expect("brokers probed") - 0.3).abs() < 1e-12);
    assert_eq!(s.figures.broker_cpu_ms_per_brief, Some(0.5));
    assert_eq!(s.figures.broker_cpu_ms_per_reply, None, "no broker probed");
}

#[test]
fn the_costs_are_the_cluster_over_each_single_then_the_queue_type_alone() {
    let c = costs(&sides());
    assert_eq!(c.len(), 3, "{c:?}");
    assert_eq!(
        (c[0].of.as_str(), c[0].over.as_str()),
        ("3-node cluster, quorum", "single node, quorum")
    );
    assert_eq!((c[0].echo_rate, c[0].forward_rate, c[0].pull_rate), (0.5, 0.6, 0.5));
    assert_eq!((c[0].echo_p50, c[0].forward_p50), (2.0, 2.0));
    assert_eq!(c[1].over, "single node, classic");
    assert_eq!(
        (c[2].of.as_str(), c[2].over.as_str()),
        ("single node, quorum", "single node, classic")
    );
    assert!(
        costs(&sides()[..1]).is_empty(),
        "one single-node side: nothing to compare"
    );
}

fn kill(ready_ms: Option<f64>) -> Kill {
    Kill {
        host: "a".into(),
        node: 1,
        hosts_on_node: vec!["a".into()],
        ready_ms,
        per_host_ms: BTreeMap::new(),
        nodes_after: BTreeMap::new(),
        kill_seen_ms: 5.0,
        restart_ms: 9_000.0,
        not_ready: ready_ms.is_none().then(|| "a: /readyz 503".to_string()),
        phases: BTreeMap::from([(
            "a".to_string(),
            vec![
                Phase {
                    at_ms: 0.0,
                    state: "/readyz 200 on [1]".into(),
                },
                Phase {
                    at_ms: 120.0,
                    state: "/readyz 503 no connection".into(),
                },
            ],
        )]),
    }
}

#[test]
fn the_bound_is_two_heartbeats_and_two_amqp_heartbeats_and_a_lost_kill_is_the_worst() {
    assert_eq!(bound_ms(5_000, 10), 30_000.0);
    let kills: Vec<Kill> = [1_200.0, 900.0, 3_000.0].into_iter().map(|x| kill(Some(x))).collect();
    assert_eq!(summary(&kills, 60_000.0), (Some(1_200.0), Some(3_000.0)));
    let mut kills = kills;
    kills.push(kill(None));
    assert_eq!(summary(&kills, 60_000.0), (Some(1_200.0), Some(60_000.0)));
    assert_eq!(summary(&[], 60_000.0), (None, None));
}

#[test]
fn the_lines_show_every_side_the_costs_and_the_kills() {
    let s = sides();
    let r = ClusterResult {
        heartbeat_ms: 5_000,
        amqp_heartbeat_s: 10,
        costs: costs(&s),
        sides: s,
        kill_to_ready: Some(KillToReady {
            heartbeat_ms: 5_000,
            amqp_heartbeat_s: 10,
            bound_ms: 30_000.0,
            wait_ms: 60_000.0,
            kills: vec![kill(Some(1_500.0)), kill(None)],
            median_ms: Some(1_500.0),
            worst_ms: Some(60_000.0),
        }),
    };
    let text = lines(&r).join("\n");
    assert!(
        text.contains("3-node cluster, quorum ÷ single node, quorum: echo 0.50×"),
        "{text}"
    );
    assert!(text.contains("forward 0.60×"), "{text}");
    assert!(
        text.contains("2 kills (1 ready in time): median 1500 ms · worst 60000 ms"),
        "{text}"
    );
    assert!(text.contains("n1(a) 1500 · n1(a) NOT READY"), "{text}");
    assert!(
        text.contains("!!! node 1 killed: not ready within 60000 ms: a: /readyz 503"),
        "{text}"
    );
    assert!(
        text.contains(
            "slowest, node 1 (1500 ms), states from the kill (ms): a: /readyz 200 on [1] @0 → /readyz 503 no \
             connection @120"
        ),
        "{text}"
    );
    assert_eq!(r.cluster().map(|c| c.nodes), Some(3));
}
