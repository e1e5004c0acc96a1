//! The report's measured workload fidelity (issue 10): committed share, remote fraction and
//! write ratio per transaction type, computed from what committed transactions touched,
//! checked against what the hardware-islands microbenchmark and TPC-C must do. Simulated
//! runs, so the figures are a function of the seed.

use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig};
use atoll_runner::{run, Report, RunConfig};
use atoll_txn::Plan;
use atoll_workloads::micro::{LOCAL_TYPE, MULTISITE_TYPE};
use atoll_workloads::{Params, WorkloadKind};

fn sim(workload: WorkloadKind, kv: &[(&str, &str)], nodes: u16, duration_s: f64) -> Report {
    let cfg = RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse("none").unwrap(),
        },
        workload,
        params: kv
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Params>(),
        protocol: ProtocolKind::Occ,
        plan: Plan::parse("one-sided").unwrap(),
        nodes,
        threads: 1,
        coroutines: 4,
        duration_s,
        warmup_s: 0.0005,
        seed: 5,
        ..RunConfig::default()
    };
    let r = run(&cfg, &|_| {}).unwrap();
    assert!(r.passed, "{:?}", r.checks);
    r
}

#[test]
fn micro_with_no_multisite_transactions_commits_only_local_ones_and_none_touches_another_node() {
    let r = sim(
        WorkloadKind::Micro,
        &[("rows", "10"), ("multisite_fraction", "0")],
        4,
        0.002,
    );
    assert!(r.summary.committed > 100, "{}", r.summary.committed);
    assert_eq!(r.txn_types[MULTISITE_TYPE].committed, 0);
    assert_eq!(r.txn_types[LOCAL_TYPE].fidelity.committed_share, 1.0);
    assert_eq!(r.summary.fidelity.remote_fraction, 0.0);
    assert_eq!(r.summary.fidelity.records_per_txn, 10.0);
    // Read-only: nothing written.
    assert_eq!(r.summary.fidelity.write_ratio, 0.0);
}

#[test]
fn micro_multisite_transactions_of_10_rows_on_4_nodes_all_touch_another_node_as_measured() {
    let r = sim(
        WorkloadKind::Micro,
        &[
            ("rows", "10"),
            ("multisite_fraction", "0.5"),
            ("kind", "update"),
        ],
        4,
        0.002,
    );
    let (local, multi) = (&r.txn_types[LOCAL_TYPE], &r.txn_types[MULTISITE_TYPE]);
    assert!(local.committed > 50 && multi.committed > 50, "{r:?}");
    assert_eq!(local.fidelity.remote_fraction, 0.0);
    // Local only if all 9 other rows land home: 0.25^9.
    assert!(
        multi.fidelity.remote_fraction > 0.99,
        "{:?}",
        multi.fidelity
    );
    // Every row read and written.
    assert_eq!(r.summary.fidelity.write_ratio, 0.5);
}

#[test]
fn micro_sensitivity_update_reads_one_row_and_writes_one_so_a_third_of_its_operations_are_writes() {
    let r = sim(
        WorkloadKind::Micro,
        &[
            ("variant", "sensitivity"),
            ("kind", "update"),
            ("multisite_fraction", "1"),
        ],
        2,
        0.002,
    );
    let multi = &r.txn_types[MULTISITE_TYPE];
    assert_eq!(multi.fidelity.committed_share, 1.0);
    assert_eq!(multi.fidelity.remote_fraction, 1.0);
    // One read, plus one update (a read and a write).
    assert!((r.summary.fidelity.write_ratio - 1.0 / 3.0).abs() < 1e-9);
}

/// Committed share, remote fraction and write ratio of a TPC-C run on 2 nodes (one warehouse
/// each, scaled population).
fn tpcc(extra: &[(&str, &str)]) -> Report {
    let mut kv = vec![
        ("customers_per_district", "30"),
        ("items", "1000"),
        ("new_orders_max", "3000"),
    ];
    kv.extend_from_slice(extra);
    sim(WorkloadKind::Tpcc, &kv, 2, 0.1)
}

#[test]
fn tpcc_standard_mix_measures_45_percent_new_orders_10_percent_of_them_and_15_percent_of_payments_remote(
) {
    let r = tpcc(&[]);
    let f = |name: &str| {
        r.txn_types
            .iter()
            .find(|t| t.name == name)
            .unwrap()
            .fidelity
            .clone()
    };
    let (no, pay) = (f("new_order"), f("payment"));
    assert!(r.summary.committed > 2_000, "{}", r.summary.committed);
    // Tolerances: a few thousand committed transactions, and aborts that hit some types more.
    assert!((no.committed_share - 0.45).abs() < 0.04, "{no:?}");
    // 1% remote lines over 5..=15 lines: 1 − 0.99^10 ≈ 9.5% of NewOrders.
    assert!((no.remote_fraction - 0.095).abs() < 0.03, "{no:?}");
    assert!((pay.remote_fraction - 0.15).abs() < 0.03, "{pay:?}");
    assert_eq!(f("order_status").remote_fraction, 0.0);
    assert!(r.summary.fidelity.write_ratio > 0.2 && r.summary.fidelity.write_ratio < 0.6);
    // DrTM/RCC's Payment: as often remote, now by its warehouse and district.
    let w = tpcc(&[("payment_remote", "warehouse"), ("mix", "neworder-payment")]);
    let pay = w.txn_types.iter().find(|t| t.name == "payment").unwrap();
    assert!(
        (pay.fidelity.remote_fraction - 0.15).abs() < 0.03,
        "{:?}",
        pay.fidelity
    );
    // Tell's shardable mix: nothing remote.
    let s = tpcc(&[("mix", "shardable")]);
    assert_eq!(s.summary.fidelity.remote_fraction, 0.0);
}
