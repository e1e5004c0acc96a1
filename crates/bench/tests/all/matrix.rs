//! The concurrency matrix: every protocol × {one-sided, rpc, mixed plans} × {SmallBank,
//! YCSB, Cycle, TPC-C, the hardware-islands microbenchmark, the write-skew probe, TPC-W's
//! checkout} on 2 nodes × 2 threads × 4 co-routines under high contention, with the invariant
//! checks clean and the expected abort reasons counted.

use atoll_bench::{run, RunConfig};
use atoll_protocols::ProtocolKind;
use atoll_txn::Plan;
use atoll_workloads::{Params, WorkloadKind};

fn params(w: WorkloadKind) -> Params {
    let kv: &[(&str, &str)] = match w {
        // Two hot accounts per node take 90% of accesses: constant conflicts.
        WorkloadKind::SmallBank => &[
            ("accounts", "200"),
            ("hot_accounts", "2"),
            ("hot_prob", "0.9"),
        ],
        WorkloadKind::Ycsb => &[
            ("records", "500"),
            ("hot_fraction", "0.01"),
            ("hot_prob", "0.9"),
            ("write_fraction", "0.5"),
            ("ops_per_txn", "4"),
            ("compute_us", "1"),
        ],
        WorkloadKind::Cycle => &[
            ("pairs", "8"),
            ("record_words", "4"),
            ("ranges", "2"),
            ("range_keys", "8"),
            // 10 slots for 16 keys (8 loaded): inserts reuse deleted keys' slots.
            ("dyn_slots", "10"),
        ],
        // A scaled population (the spec's 3000 customers and 100000 items per warehouse
        // load too slowly for hundreds of short runs); one warehouse per node.
        WorkloadKind::Tpcc => &[
            ("customers_per_district", "30"),
            ("items", "100"),
            // Room for every NewOrder of a 0.25 s run on real threads.
            ("new_orders_max", "2000"),
        ],
        // The sensitivity variant over 40 rows, half of its transactions reading another
        // node's row: a read and an update each (so validations fail too), constant
        // conflicts, local and distributed.
        WorkloadKind::Micro => &[
            ("variant", "sensitivity"),
            ("rows_per_node", "20"),
            ("kind", "update"),
            ("multisite_fraction", "0.5"),
        ],
        // Four pairs per node: withdraws meet on a pair all the time, across the nodes.
        WorkloadKind::Skew => &[("pairs", "4")],
        // 20 products of 64 bytes: three of them per checkout, conflicts all the time;
        // room for every order of a 0.25 s run on real threads.
        WorkloadKind::Checkout => &[
            ("products", "20"),
            ("product_bytes", "64"),
            ("orders_max", "200000"),
        ],
    };
    kv.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

const PLANS: [&str; 4] = [
    "one-sided",
    "rpc",
    "read=rpc,lock=one-sided,validate=one-sided,commit=one-sided,release=rpc",
    "read=one-sided,lock=rpc,validate=rpc,log=one-sided,commit=rpc,release=one-sided",
];

#[test]
fn every_protocol_plan_and_workload_keeps_invariants_under_contention_2_nodes_2_threads_4_coroutines(
) {
    let mut failures = Vec::new();
    for workload in WorkloadKind::ALL {
        for protocol in ProtocolKind::ALL {
            if workload.deletes() && !protocol.deletes() {
                continue;
            }
            for plan in PLANS {
                // A per-stage plan, as this protocol reads it (stages it lacks one-sided).
                let plan = Plan::parse(plan).unwrap().only(protocol.stages());
                if protocol.check_plan(&plan).is_err() {
                    continue;
                }
                let cfg = RunConfig {
                    workload,
                    params: params(workload),
                    protocol,
                    plan,
                    nodes: 2,
                    threads: 2,
                    coroutines: 4,
                    duration_s: 0.25,
                    warmup_s: 0.0,
                    seed: 7,
                    ..RunConfig::default()
                };
                let what = format!("{} / {} / {plan}", workload.name(), protocol.name());
                let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                if !r.passed {
                    failures.push(format!("{what}: {:?}", r.checks));
                }
                let s = &r.summary;
                assert!(s.committed > 100, "{what}: only {} committed", s.committed);
                let reason = |n: &str| s.aborts_by_reason[n];
                match protocol {
                    ProtocolKind::NoWait | ProtocolKind::WaitDie => assert!(
                        reason("lock_busy") > 0,
                        "{what}: no lock_busy counted: {s:?}"
                    ),
                    // A checkout reads nothing it does not write (its products for
                    // update): its conflicts are on locks, as a writer's are.
                    ProtocolKind::Occ | ProtocolKind::Sundial | ProtocolKind::Mvcc
                        if workload == WorkloadKind::Checkout =>
                    {
                        assert!(
                            reason("validation_failed") + reason("conflict") + reason("lock_busy")
                                > 0,
                            "{what}: no validation_failed/conflict/lock_busy counted: {s:?}"
                        )
                    }
                    ProtocolKind::Occ | ProtocolKind::Sundial | ProtocolKind::Mvcc => assert!(
                        reason("validation_failed") + reason("conflict") > 0,
                        "{what}: no validation_failed/conflict counted: {s:?}"
                    ),
                    // First committer wins, a record locked by a committer, or a version
                    // newer than the snapshot.
                    ProtocolKind::Rsi | ProtocolKind::NamDb => assert!(
                        reason("validation_failed")
                            + reason("lock_busy")
                            + reason("conflict")
                            + reason("snapshot_too_old")
                            > 0,
                        "{what}: no first-committer-wins/lock/snapshot abort counted: {s:?}"
                    ),
                }
                if workload == WorkloadKind::SmallBank {
                    assert!(
                        reason("user_abort") > 0,
                        "{what}: no user_abort counted: {s:?}"
                    );
                    assert_eq!(s.user_aborted, reason("user_abort"));
                }
                assert!(
                    s.abort_rate > 0.0 && s.abort_rate < 1.0,
                    "{what}: abort rate {}",
                    s.abort_rate
                );
            }
        }
    }
    assert!(
        failures.is_empty(),
        "checks failed:\n{}",
        failures.join("\n")
    );
}

#[test]
fn injected_latency_slows_round_trips_but_keeps_invariants() {
    let base = RunConfig {
        params: params(WorkloadKind::SmallBank),
        nodes: 2,
        threads: 1,
        coroutines: 4,
        duration_s: 0.3,
        warmup_s: 0.0,
        ..RunConfig::default()
    };
    let fast = run(&base, &|_| {}).unwrap();
    let slow = run(
        &RunConfig {
            net_latency_us: [50.0; atoll_fabric::VerbKind::COUNT],
            ..base.clone()
        },
        &|_| {},
    )
    .unwrap();
    assert!(fast.passed && slow.passed);
    // Every remote round trip waits at least 50 µs, and a SmallBank transaction has some.
    assert!(
        slow.summary.latency_us.p90 >= 50.0,
        "p90 {} with 50 us injected",
        slow.summary.latency_us.p90
    );
    assert!(slow.summary.latency_us.p50 > fast.summary.latency_us.p50);
}

#[test]
fn more_nodes_than_cores_run_on_shared_os_threads_6_nodes_on_2_threads() {
    for protocol in ProtocolKind::ALL {
        // RPC where the protocol has it (every stage's requests served by shared threads).
        let rpc = Plan::parse("rpc").unwrap();
        let plan = if protocol.check_plan(&rpc).is_ok() {
            rpc
        } else {
            Plan::parse("one-sided").unwrap()
        };
        let cfg = RunConfig {
            params: params(WorkloadKind::SmallBank),
            protocol,
            plan,
            nodes: 6,
            threads: 2,
            coroutines: 4,
            os_threads: Some(2),
            log_replicas: 2,
            duration_s: 0.3,
            warmup_s: 0.0,
            ..RunConfig::default()
        };
        let r = run(&cfg, &|_| {}).unwrap();
        assert!(r.passed, "{:?}", r.checks);
        assert_eq!(r.config.os_threads, 2);
        assert!(r.summary.committed > 100, "{}", r.summary.committed);
    }
}
