//! Unit tests of `--scale`'s arithmetic and parsing: the spread over gateways, leaders per node,
//! balance, per-queue figures, the prediction that stops a level, the extrapolation, the table.

use std::collections::BTreeMap;

use serde_json::json;

use super::broker_view::{QueueView, breakdown, dir_bytes, leaders};
use super::gateways::spread;
use super::run::predicted_short;
use super::settings::*;
use super::table::{extrapolate, lines};
use crate::rig::BrokerInfo;

fn node(name: &str, mem_mib: u64, procs: u64, disk_mib: u64) -> NodeFigures {
    NodeFigures {
        name: name.into(),
        index: None,
        mem_used: mem_mib * 1048576,
        mem_limit: 9_000 * 1048576,
        mem_alarm: false,
        proc_used: procs,
        proc_total: 1_048_576,
        breakdown: BTreeMap::from([("quorum_queue_procs".to_string(), mem_mib * 1048576 / 2)]),
        disk_bytes: Some(disk_mib * 1048576),
        rss_kib: None,
    }
}

fn rest(entities: usize, queues: usize, mem_mib: u64, free: u64) -> AtRest {
    AtRest {
        entities,
        quorum_queues: queues,
        nodes: (1..=3)
            .map(|i| node(&format!("n{i}"), mem_mib, 1_000 + 10 * queues as u64, queues as u64))
            .collect(),
        machine_available_mib: Some(free),
        cpu: None,
    }
}

fn level(entities: usize, mem_mib: u64, free: u64, idle: &AtRest) -> Level {
    let at_rest = rest(entities, entities + 10, mem_mib, free);
    Level {
        entities,
        gateways: entities.div_ceil(1000),
        registered: entities,
        register_s: entities as f64 / 50.0,
        declare_ms_per_inbox: 20.0,
        declare_per_s: 50.0,
        per_queue: PerQueue::of(idle, &at_rest),
        at_rest,
        latency: Some(Latencies::default()),
        kill: Some(NodeKill {
            leaders_ms: Some(entities as f64),
            gateways_ms: Some(2.0 * entities as f64),
            ..NodeKill::default()
        }),
        restart: Some(FullRestart {
            kept: 10,
            drained: 10,
            gateways_ms: Some(3.0 * entities as f64),
            ..FullRestart::default()
        }),
        level_s: 60.0,
    }
}

fn result(levels: Vec<Level>, idle: AtRest) -> ClusterScaleResult {
    ClusterScaleResult {
        broker: BrokerInfo {
            spec: "process:rabbitmq-cluster".into(),
            version: "3.10.8".into(),
        },
        nodes: 3,
        requested: vec![1000, 5000, 10_000],
        per_gateway: 1000,
        concurrency: 16,
        heartbeat_ms: 5000,
        amqp_heartbeat_s: 10,
        disk_source: "walked".into(),
        sampling: "defaults".into(),
        queue_type: Default::default(),
        mains_per_gateway: 1,
        idle,
        idle_latency: None,
        levels,
        stopped: None,
    }
}

#[test]
fn entities_spread_per_gateway_with_the_rest_on_the_last() {
    assert_eq!(spread(2500, 1000), vec![1000, 1000, 500]);
    assert_eq!(spread(1000, 1000), vec![1000]);
    assert_eq!(spread(0, 1000), Vec::<usize>::new());
    assert_eq!(spread(3, 0), vec![1, 1, 1], "0 per gateway reads as 1");
}

#[test]
fn leaders_count_per_node_and_a_dead_or_offline_leader_counts_as_none() {
    let q = |leader: &str, online: &[&str]| {
        QueueView::from_json(&json!({
            "name": "q", "type": "quorum", "leader": leader,
            "members": ["a", "b", "c"], "online": online,
        }))
    };
    let names: Vec<String> = ["a", "b", "c"].iter().map(|s| s.to_string()).collect();
    let qs = vec![
        q("a", &["a", "b", "c"]),
        q("b", &["a", "b"]),
        q("c", &["a", "b"]),
        q("", &[]),
    ];
    let l = leaders(&qs, &names, None);
    assert_eq!(
        l,
        Leaders {
            per_node: vec![1, 1, 0],
            none: 2
        }
    );
    let l = leaders(&qs, &names, Some("a"));
    assert_eq!(
        l,
        Leaders {
            per_node: vec![0, 1, 0],
            none: 3
        }
    );
    assert!(qs[0].whole() && !qs[1].whole());
    // A new leader writes the record's node at once; the statistics still name the dead one.
    let moved = QueueView::from_json(&json!({"name": "q", "node": "b", "leader": "a", "members": ["a", "b", "c"]}));
    assert_eq!(moved.leader(Some("a")), Some("b"));
    assert_eq!(moved.leader(None), Some("b"));
    assert!(balanced(&Leaders {
        per_node: vec![333, 330, 340],
        none: 0
    }));
    assert!(!balanced(&Leaders {
        per_node: vec![500, 500, 0],
        none: 0
    }));
    assert!(!balanced(&Leaders {
        per_node: vec![333, 333, 333],
        none: 1
    }));
}

#[test]
fn the_breakdown_keeps_the_numeric_categories() {
    let v = json!({"memory": {"quorum_ets": 10, "binary": 20, "strategy": "rss", "total": {"rss": 5}}});
    let b = breakdown(&v);
    assert_eq!(b.len(), 2);
    assert_eq!(b["binary"], 20);
    assert!(breakdown(&json!({})).is_empty());
}

#[test]
fn per_queue_figures_are_the_level_over_the_idle_cluster() {
    let idle = rest(0, 10, 100, 20_000);
    let l = rest(1000, 1010, 200, 19_000);
    let p = PerQueue::of(&idle, &l);
    assert_eq!(p.queues, 1000);
    // 3 nodes × 100 MiB more over 1,000 queues.
    assert!((p.mem_bytes - 3.0 * 104857.6).abs() < 1.0, "{}", p.mem_bytes);
    assert!((p.mem_bytes_per_node - 104857.6).abs() < 1.0);
    assert!((p.procs - 30.0).abs() < 1e-9, "{}", p.procs);
    assert!(p.disk_bytes.is_some_and(|d| (d - 3.0 * 1048576.0).abs() < 1.0));
    assert_eq!(PerQueue::of(&idle, &idle).queues, 0);
}

#[test]
fn a_level_the_measured_memory_says_will_not_fit_is_not_tried() {
    let idle = rest(0, 10, 100, 20_000);
    // 1,000 entities took 3 × 1,000 MiB: 3 MiB each; 10,000 need ≈ 27,000 MiB more.
    let r = result(vec![level(1000, 1100, 20_000, &idle)], idle.clone());
    let why = predicted_short(&r, 10_000, 2_048).expect("does not fit");
    assert!(why.contains("predicted"), "{why}");
    assert!(
        predicted_short(&r, 2_000, 2_048).is_none(),
        "3,000 MiB more fits in 20,000"
    );
    assert!(predicted_short(&result(vec![], idle), 10_000, 2_048).is_none());
}

#[test]
fn the_extrapolation_is_a_line_through_the_two_largest_levels_and_says_so() {
    let idle = rest(0, 10, 100, 20_000);
    let levels = vec![level(1000, 200, 20_000, &idle), level(5000, 600, 18_000, &idle)];
    let y = extrapolate(&levels, 10_000.0, |l| l.kill.as_ref()?.leaders_ms).expect("two levels");
    assert!((y - 10_000.0).abs() < 1e-6, "{y}");
    assert!(extrapolate(&levels[..1], 10_000.0, |l| Some(l.entities as f64)).is_none());
    let text = lines(&result(levels, idle)).join("\n");
    assert!(text.contains("5000 entities") && text.contains("idle"), "{text}");
    assert!(text.contains("extrapolated (NOT measured"), "{text}");
    assert!(text.contains("10 → 10 (0)"), "{text}");
    assert!(text.contains("every level asked for was measured"), "{text}");
}

#[test]
fn a_result_reads_back_from_its_json() {
    let idle = rest(0, 10, 100, 20_000);
    let mut r = result(vec![level(1000, 200, 20_000, &idle)], idle);
    r.stopped = Some(Stopped {
        level: 5000,
        reached: 3210,
        why: "the declare rate collapsed".into(),
        at_reached: None,
    });
    let back: ClusterScaleResult = serde_json::from_value(serde_json::to_value(&r).expect("json")).expect("reads");
    assert_eq!(back.stopped, r.stopped);
    assert!(
        lines(&back)
            .join("\n")
            .contains("stopped before level 5000 at 3210 entities")
    );
}

#[test]
fn a_data_dir_is_sized_by_the_blocks_its_files_take() {
    let dir = std::env::temp_dir().join(format!("fleet-bench-du-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(dir.join("quorum/a")).expect("dirs");
    std::fs::write(dir.join("quorum/a/00000001.segment"), vec![7u8; 100_000]).expect("file");
    let bytes = dir_bytes(&dir).expect("walked");
    assert!(bytes >= 100_000, "{bytes}");
    assert!(dir_bytes(&dir.join("nope")).is_err(), "a missing data dir is an error");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_dead_lettered_reply_is_counted_by_the_check_its_gateway_logged() {
    use super::full_restart::rejection_checks;
    let log = concat!(
        "2026-12-06T00:00:01Z  WARN msg{traceId=t1 msgId=m1 kind=REPLY}: fleet_gateway: message rejected to bridge.dlx msgId=m1 check=\"from_not_on_host\" error=x\n",
        "{\"level\":\"WARN\",\"fields\":{\"message\":\"message rejected to bridge.dlx\",\"msgId\":\"m2\",\"check\":\"expired\"}}\n",
        "2026-12-06T00:00:02Z  INFO delivered msgId=m3\n",
    );
    let ids = ["m1", "m2", "m3", ""].map(String::from);
    let got = rejection_checks(log, &ids);
    assert_eq!(got.get("from_not_on_host"), Some(&1));
    assert_eq!(got.get("expired"), Some(&1));
    assert_eq!(got.get("not in the log"), Some(&2), "{got:?}");
}
