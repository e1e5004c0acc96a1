//! The concurrency matrix: every protocol × {one-sided, rpc, mixed plans} × {SmallBank,
//! YCSB, Cycle, TPC-C, the hardware-islands microbenchmark, the write-skew probe, TPC-W's
//! checkout} on 2 nodes × 2 threads × 4 co-routines under high contention, with the invariant
//! checks clean and the expected abort reasons counted.

use atoll_protocols::ProtocolKind;
use atoll_runner::{run, RunConfig};
use atoll_txn::{Abort, Plan};
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
        // A workload not tuned here runs with the small knobs it declares.
        #[allow(unreachable_patterns)]
        other => other.small_params(),
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
            if atoll_runner::config::runs_workload(protocol, workload).is_err() {
                continue;
            }
            for plan in PLANS {
                // A per-stage plan, as this protocol reads it (stages it lacks one-sided).
                let plan = protocol.parse_plan(plan).unwrap().only(protocol.stages());
                if protocol.check_plan(&plan).is_err() {
                    continue;
                }
                // The expected conflicts depend on how the threads interleave: a machine
                // busy with other work may run a short cell nearly serially, so a cell that
                // saw none runs again, longer, before it fails (every run's checks count).
                let mut duration_s = MATRIX_RUN_S;
                loop {
                    let mut cfg = RunConfig {
                        workload,
                        params: params(workload),
                        protocol,
                        plan,
                        nodes: 2,
                        threads: 2,
                        coroutines: 4,
                        duration_s,
                        warmup_s: 0.0,
                        seed: 7,
                        ..RunConfig::default()
                    };
                    crate::uncapped(&mut cfg);
                    if protocol.sequenced() {
                        // Epochs of a millisecond and small batches: a quarter-second cell
                        // runs hundreds of them (its default 10 ms epochs of 256 requests a
                        // lane are a few, which a descheduled thread stretches).
                        cfg.set_knob("epoch_us", 1_000);
                        cfg.set_knob("calvin_batch_max", 16);
                    }
                    let what = format!(
                        "{} / {} / {plan} ({duration_s} s)",
                        workload.name(),
                        protocol.name()
                    );
                    let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                    if !r.passed {
                        failures.push(format!("{what}: {:?}", r.checks));
                    }
                    let s = &r.summary;
                    // A busy machine slows a sequenced protocol's lanes, each epoch waiting
                    // for the slowest: a cell that committed little runs again, longer.
                    if s.committed <= 100 && duration_s < MATRIX_RUN_S_MAX {
                        eprintln!(
                            "{what}: only {} committed; running it again, longer",
                            s.committed
                        );
                        duration_s *= 2.0;
                        continue;
                    }
                    assert!(s.committed > 100, "{what}: only {} committed", s.committed);
                    if workload == WorkloadKind::SmallBank {
                        assert_eq!(s.user_aborted, s.aborts_by_reason["user_abort"], "{what}");
                    }
                    match expected_aborts(workload, protocol, s) {
                        Ok(()) => break,
                        Err(e) if duration_s < MATRIX_RUN_S_MAX => {
                            eprintln!("{what}: {e}; running it again, longer");
                            duration_s *= 2.0;
                        }
                        Err(e) => panic!("{what}: {e}: {s:?}"),
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "checks failed:\n{}",
        failures.join("\n")
    );
}

/// Seconds of a matrix cell's first run, and of its longest retry.
const MATRIX_RUN_S: f64 = 0.25;
const MATRIX_RUN_S_MAX: f64 = 1.0;

/// Whether a cell counted the aborts its protocol must meet under this contention, or what
/// it missed.
fn expected_aborts(
    workload: WorkloadKind,
    protocol: ProtocolKind,
    s: &atoll_runner::report::Summary,
) -> Result<(), String> {
    let reason = |n: &str| s.aborts_by_reason[n];
    if protocol.sequenced() {
        // Deterministic: a conflict waits its turn, so the only aborts are the logic's own
        // and, for the records a reconnaissance found, their having changed since (OLLP).
        let expected = [Abort::UserAbort.name(), Abort::KeysChanged.name()];
        let other: u64 = s
            .aborts_by_reason
            .iter()
            .filter(|(n, _)| !expected.contains(&n.as_str()))
            .map(|(_, &v)| v)
            .sum();
        if other > 0 {
            return Err(format!(
                "{other} aborts besides user_abort and keys_changed: {:?}",
                s.aborts_by_reason
            ));
        }
        if workload == WorkloadKind::SmallBank && reason("user_abort") == 0 {
            return Err("no user_abort counted".into());
        }
        return Ok(());
    }
    // The family's conflicts; a workload that reads nothing it does not write (a checkout's
    // products, for update) has its conflicts on locks, whatever the family.
    let mut want: Vec<&str> = protocol
        .conflict_aborts()
        .iter()
        .map(|a| a.name())
        .collect();
    if workload.conflicts_on_locks() && !want.contains(&Abort::LockBusy.name()) {
        want.push(Abort::LockBusy.name());
    }
    let seen: u64 = want.iter().map(|n| reason(n)).sum();
    let want = want.join("/");
    if seen == 0 {
        return Err(format!("no {want} abort counted"));
    }
    if workload == WorkloadKind::SmallBank && reason("user_abort") == 0 {
        return Err("no user_abort counted".into());
    }
    if !(s.abort_rate > 0.0 && s.abort_rate < 1.0) {
        return Err(format!("abort rate {}", s.abort_rate));
    }
    Ok(())
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
