//! Replicated partitions: each partition's backups keep a replica applied from the
//! coordinators' logs, and after the run every replica equals its primary (`replicas.match`),
//! in the simulator under faults and on real threads.

use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig};
use atoll_runner::{run, Report, RunConfig};
use atoll_workloads::{Params, WorkloadKind};

/// Seeds of the simulated matrix (each runs every protocol, workload and plan).
const SEEDS: u64 = 2;

fn params(w: WorkloadKind) -> Params {
    w.small_params()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn replica_check(r: &Report) -> &atoll_runner::report::CheckReport {
    r.checks
        .iter()
        .find(|c| c.name == "replicas.match")
        .unwrap_or_else(|| panic!("no replicas.match among {:?}", r.checks))
}

#[test]
fn replicas_every_partitioned_protocols_three_replicas_equal_their_primaries_under_faults_3_nodes()
{
    let base = std::env::var("ATOLL_SEED").map_or(1, |s| s.parse().expect("a whole number"));
    for seed in base..base + SEEDS {
        for protocol in ProtocolKind::ALL
            .into_iter()
            .filter(|p| p.logs_its_installs())
        {
            for w in WorkloadKind::ALL {
                if atoll_runner::config::runs_workload(protocol, w).is_err() {
                    continue;
                }
                for plan in ["one-sided", "rpc"] {
                    let cfg = RunConfig {
                        fabric: Fabric::Sim {
                            net: "edr-ib".into(),
                            faults: FaultConfig::parse("some").unwrap(),
                        },
                        workload: w,
                        params: params(w),
                        protocol,
                        plan: protocol.parse_plan(plan).unwrap(),
                        nodes: 3,
                        threads: 2,
                        coroutines: 4,
                        log_replicas: 2,
                        duration_s: 0.005,
                        warmup_s: 0.001,
                        seed,
                        ..RunConfig::default()
                    };
                    let r = run(&cfg, &|_| {}).unwrap();
                    let what = format!(
                        "{} / {} / {plan}, seed {seed} (ATOLL_SEED={seed} replays)",
                        protocol.name(),
                        w.name()
                    );
                    let c = replica_check(&r);
                    assert!(r.passed && c.passed, "{what}: {:?}", r.checks);
                    // These write in every short run (the others may draw only reads).
                    let writes = matches!(
                        w,
                        WorkloadKind::SmallBank | WorkloadKind::Ycsb | WorkloadKind::Tpcc
                    );
                    assert!(
                        !writes || !c.detail.contains("applied 0 log records"),
                        "{what}: the cleaners applied nothing: {}",
                        c.detail
                    );
                }
            }
        }
    }
}

#[test]
fn replicas_one_copy_keeps_no_replica_and_the_snapshot_isolation_family_logs_without_them() {
    let sim = |protocol: ProtocolKind, backups: u16| RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse("none").unwrap(),
        },
        params: params(WorkloadKind::SmallBank),
        protocol,
        nodes: 3,
        log_replicas: backups,
        duration_s: 0.001,
        warmup_s: 0.0,
        ..RunConfig::default()
    };
    let r = run(&sim(ProtocolKind::Occ, 0), &|_| {}).unwrap();
    assert!(r.passed, "{:?}", r.checks);
    assert!(r.checks.iter().all(|c| c.name != "replicas.match"));
    let r = run(&sim(ProtocolKind::Rsi, 2), &|_| {}).unwrap();
    assert!(r.passed, "{:?}", r.checks);
    assert!(r.checks.iter().all(|c| c.name != "replicas.match"));
}

#[test]
fn replicas_on_real_threads_equal_their_primaries_3_nodes_3_replicas() {
    for (protocol, w) in [
        (ProtocolKind::Occ, WorkloadKind::SmallBank),
        (ProtocolKind::Mvcc, WorkloadKind::SmallBank),
        (ProtocolKind::Sundial, WorkloadKind::Cycle),
        (ProtocolKind::WaitDie, WorkloadKind::Ycsb),
    ] {
        let cfg = RunConfig {
            workload: w,
            params: params(w),
            protocol,
            nodes: 3,
            threads: 1,
            coroutines: 4,
            os_threads: Some(2),
            log_replicas: 2,
            duration_s: 0.3,
            warmup_s: 0.0,
            ..RunConfig::default()
        };
        let r = run(&cfg, &|_| {}).unwrap();
        let c = replica_check(&r);
        assert!(
            r.passed && c.passed,
            "{} / {}: {:?}",
            protocol.name(),
            w.name(),
            r.checks
        );
    }
}
