//! The node runtime and the driver: a run whose per-node summaries, merged ledger and check
//! parts cross a wire as JSON gives the same report as one that hands them over in memory
//! (the simulator makes both runs of a seed the same run).

use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig};
use atoll_runner::{run_via, Report, RunConfig, SummaryWire};
use atoll_testkit::FAULTS_MIXED;
use atoll_workloads::{Params, WorkloadKind};

/// Faults that tear, stall and pause, so the runs abort and retry for many reasons.
const SEED: u64 = 8;

/// Report fields that are not the run's: the build, machine and process (`env`).
const NOT_THE_RUNS: [&str; 1] = ["env"];

fn config(workload: WorkloadKind, protocol: ProtocolKind, plan: &str) -> RunConfig {
    let knobs: &[(&str, &str)] = match workload {
        WorkloadKind::SmallBank => &[("accounts", "40"), ("hot_accounts", "4")],
        WorkloadKind::Ycsb => &[("records", "60"), ("ops_per_txn", "4")],
        WorkloadKind::Cycle => &[("pairs", "6"), ("ranges", "2"), ("range_keys", "8")],
        // A scaled population (the spec's 3000 customers and 100000 items per warehouse
        // load too slowly for hundreds of short runs); one warehouse per node.
        WorkloadKind::Tpcc => &[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "50"),
        ],
        // The sensitivity variant: one row read (of another node, half the time), one
        // home row updated.
        WorkloadKind::Micro => &[
            ("variant", "sensitivity"),
            ("kind", "update"),
            ("rows_per_node", "20"),
            ("multisite_fraction", "0.5"),
        ],
        WorkloadKind::Skew => &[("pairs", "4")],
        WorkloadKind::Checkout => &[
            ("products", "30"),
            ("product_bytes", "128"),
            ("orders_max", "2000"),
        ],
        // A workload not tuned here runs with the small knobs it declares.
        #[allow(unreachable_patterns)]
        other => other.small_params(),
    };
    RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
        },
        workload,
        params: knobs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Params>(),
        protocol,
        plan: protocol.parse_plan(plan).unwrap(),
        nodes: 3,
        threads: 2,
        coroutines: 4,
        duration_s: 0.003,
        warmup_s: 0.0005,
        seed: SEED,
        record_history: true,
        progress_interval_s: 0.001,
        ..RunConfig::default()
    }
}

/// The report's JSON without the fields that are not the run's.
fn run_json(r: &Report) -> String {
    let mut v = serde_json::to_value(r).unwrap();
    for f in NOT_THE_RUNS {
        v.as_object_mut().unwrap().remove(f);
    }
    serde_json::to_string_pretty(&v).unwrap()
}

#[test]
fn driver_per_node_summaries_carried_as_json_and_merged_give_a_byte_identical_report_apart_from_env(
) {
    for workload in WorkloadKind::ALL {
        for (protocol, plan) in [
            (ProtocolKind::Occ, "one-sided"),
            (ProtocolKind::Mvcc, "rpc"),
            (ProtocolKind::WaitDie, "one-sided"),
        ] {
            let cfg = config(workload, protocol, plan);
            let what = format!(
                "{} {} {plan}, seed {SEED}",
                workload.name(),
                protocol.name()
            );
            let memory = run_via(&cfg, SummaryWire::InMemory, &|_| {}).unwrap();
            let json = run_via(&cfg, SummaryWire::Json, &|_| {}).unwrap();
            assert!(memory.summary.committed > 0, "{what}: nothing committed");
            assert!(memory.summary.aborted > 0, "{what}: nothing aborted");
            assert!(memory.passed, "{what}: {:?}", memory.checks);
            assert_eq!(run_json(&memory), run_json(&json), "{what}");
            assert_eq!(memory.history, json.history, "{what}: histories differ");
            assert!(!memory.history.is_empty(), "{what}: no history recorded");
        }
    }
}
