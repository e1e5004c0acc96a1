//! The shared-data architecture end to end: memory nodes hold every record and run no
//! co-routine, compute nodes run every transaction and hold no record; every protocol runs
//! there, clean under its checks and its history checker, and which CPUs serve RPCs is
//! counted per role.

use atoll_bench::config::{Fabric, FaultConfig, Roles};
use atoll_bench::history::{self, Mode};
use atoll_bench::testkit::{params, FAULTS_MIXED};
use atoll_bench::{run, Report, RunConfig};
use atoll_protocols::ProtocolKind;
use atoll_storage::TsPlacement;
use atoll_txn::Plan;
use atoll_workloads::{Params, WorkloadKind};

/// `memory` memory nodes, `compute` compute nodes, the timestamp service at `ts`.
fn config(
    workload: WorkloadKind,
    protocol: ProtocolKind,
    plan: &str,
    (memory, compute, ts): (u16, u16, TsPlacement),
    seed: u64,
) -> RunConfig {
    let params = match workload {
        WorkloadKind::SmallBank => params(&[("accounts", "40"), ("hot_accounts", "4")]),
        WorkloadKind::Ycsb => params(&[("records", "400"), ("write_fraction", "0.4")]),
        WorkloadKind::Checkout => params(&[
            ("products", "200"),
            ("product_bytes", "128"),
            ("orders_max", "2000"),
        ]),
        _ => Params::new(),
    };
    RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
        },
        workload,
        params,
        protocol,
        plan: Plan::parse(plan).unwrap(),
        nodes: memory + compute + u16::from(ts == TsPlacement::Own),
        roles: Roles::SharedData {
            memory_nodes: memory,
            ts,
        },
        threads: 2,
        coroutines: 4,
        duration_s: 0.003,
        warmup_s: 0.0005,
        seed,
        record_history: true,
        ..RunConfig::default()
    }
}

fn served(r: &Report) -> &atoll_bench::report::RpcsByRole {
    r.verbs
        .rpcs_served_by_role
        .as_ref()
        .expect("a shared-data run counts RPCs per role")
}

#[test]
fn shared_data_every_protocol_runs_clean_on_memory_and_compute_nodes_with_faults() {
    for protocol in ProtocolKind::ALL {
        for workload in [
            WorkloadKind::SmallBank,
            WorkloadKind::Ycsb,
            WorkloadKind::Checkout,
        ] {
            for (seed, shape) in [
                (1, (2, 2, TsPlacement::Memory)),
                (2, (1, 3, TsPlacement::Own)),
            ] {
                let cfg = config(workload, protocol, "one-sided", shape, seed);
                let what = format!(
                    "{} / {} / {shape:?} / seed {seed}",
                    protocol.name(),
                    workload.name()
                );
                let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(r.passed, "{what}: {:?}", r.checks);
                assert!(r.summary.committed > 0, "{what}: nothing committed");
                assert_eq!(r.config.architecture, "shared-data", "{what}");
                let v = history::check(&r.history, Mode::from(protocol.isolation()));
                assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
                // Coordinators run on compute nodes only; nobody calls a compute node.
                assert_eq!(served(&r).compute_nodes, 0, "{what}");
            }
        }
    }
}

#[test]
fn shared_data_rsi_updates_involve_no_memory_node_cpu_and_the_rpc_plan_is_served_by_memory_nodes() {
    // SmallBank inserts nothing: RSI's one-sided run serves no RPC anywhere.
    let r = run(
        &config(
            WorkloadKind::SmallBank,
            ProtocolKind::Rsi,
            "one-sided",
            (3, 4, TsPlacement::Own),
            3,
        ),
        &|_| {},
    )
    .unwrap();
    assert!(r.passed, "{:?}", r.checks);
    let s = served(&r);
    assert_eq!(
        (s.memory_nodes, s.compute_nodes, s.ts_node),
        (0, 0, 0),
        "RSI's one-sided SmallBank served RPCs"
    );
    // OCC over RPC: the memory nodes' CPUs serve every request (the two-sided variant).
    let r = run(
        &config(
            WorkloadKind::SmallBank,
            ProtocolKind::Occ,
            "rpc",
            (2, 2, TsPlacement::Memory),
            4,
        ),
        &|_| {},
    )
    .unwrap();
    assert!(r.passed, "{:?}", r.checks);
    let s = served(&r);
    assert!(s.memory_nodes > r.summary.committed, "{s:?}");
    assert_eq!((s.compute_nodes, s.ts_node), (0, 0), "{s:?}");
}

#[test]
fn shared_data_compute_nodes_register_no_table_memory() {
    let partitioned = RunConfig {
        nodes: 3,
        ..RunConfig::default()
    };
    let shared = RunConfig {
        nodes: 3,
        roles: Roles::SharedData {
            memory_nodes: 1,
            ts: TsPlacement::Memory,
        },
        ..RunConfig::default()
    };
    let p = atoll_bench::sizing::sizing(&partitioned).unwrap();
    let s = atoll_bench::sizing::sizing(&shared).unwrap();
    let tables =
        |z: &atoll_bench::sizing::Sizing| z.table_region_words.iter().map(|(_, w)| w).sum::<u64>();
    // SmallBank's population is per memory node: the one memory node holds what a node of
    // the partitioned cluster holds, the two compute nodes hold nothing.
    assert_eq!(s.memory_nodes, 1);
    assert_eq!(tables(&s), tables(&p));
    assert!(s.node_region_words(false)[..s.table_region_words.len()]
        .iter()
        .all(|&w| w == 0));
    assert!(
        s.region_bytes() * 2 < p.region_bytes(),
        "shared-data {} bytes vs partitioned {} bytes of regions",
        s.region_bytes(),
        p.region_bytes()
    );
}

#[test]
fn shared_data_shapes_that_leave_no_compute_node_or_too_many_backups_are_refused_naming_the_value()
{
    let no_compute = RunConfig {
        nodes: 2,
        roles: Roles::SharedData {
            memory_nodes: 1,
            ts: TsPlacement::Own,
        },
        ..RunConfig::default()
    };
    let e = no_compute.validate().unwrap_err().0;
    assert!(e.contains("compute node"), "{e}");
    let backups = RunConfig {
        nodes: 4,
        roles: Roles::SharedData {
            memory_nodes: 2,
            ts: TsPlacement::Memory,
        },
        log_replicas: 3,
        ..RunConfig::default()
    };
    let e = backups.validate().unwrap_err().0;
    assert!(e.contains("log_replicas=3") && e.contains("0..=2"), "{e}");
}

/// One coordinator on a compute node, records on a memory node, the timestamp service on a
/// node of its own: every op it posts is remote, so its worker's counters are its verbs.
fn rsi_one_coordinator() -> atoll_bench::testkit::TestCluster {
    rsi_cluster(1, 1)
}

/// As [`rsi_one_coordinator`], with `coroutines` co-routines and `versions` per record.
fn rsi_cluster(coroutines: u32, versions: u32) -> atoll_bench::testkit::TestCluster {
    use atoll_storage::{Partition, TableSpec, Topology};
    let spec = TableSpec {
        name: "t".into(),
        payload_words: 1,
        capacity_per_node: 16,
        partition: Partition::Modulo,
        ordered: false,
        gone_keys_max_per_node: 0,
    };
    let c = atoll_bench::testkit::TestCluster::with_topology(
        Topology::shared_data(1, 1, TsPlacement::Own),
        0,
        vec![spec],
        Plan::uniform(atoll_txn::Primitive::OneSided),
        coroutines,
        versions,
        atoll_storage::layout::LockWord::CommitId,
    );
    for k in 0..8 {
        c.stores[0].insert(T, k, &[100]).unwrap();
    }
    c
}

const T: atoll_storage::TableId = atoll_storage::TableId(0);

#[test]
fn rsi_an_update_transaction_takes_3_signaled_round_trips_and_1_unsignaled_message_and_no_memory_node_cpu(
) {
    use atoll_fabric::{NodeId, VerbCounters, VerbKind};
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    let c = rsi_one_coordinator();
    let seen: Arc<Mutex<Option<(VerbCounters, bool)>>> = Arc::default();
    let update = |keys: [u64; 2]| keys.into_iter().map(|k| (T, k, true)).collect::<Vec<_>>();
    c.run(&|core, k| {
        if core.id.node != NodeId(1) {
            return None;
        }
        let mut co = c.coordinator(core, k);
        let seen = seen.clone();
        Some(Box::pin(async move {
            // Learn where keys 3 and 4 live (read-only: commits at its snapshot), then
            // commit an update of keys 1 and 2, whose outcome is left to go unsignaled.
            let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
            tx.fetch(&[(T, 3, false), (T, 4, false)]).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
            tx.fetch(&update([1, 2])).await.unwrap();
            tx.write(T, 1, &[7]);
            tx.write(T, 2, &[7]);
            tx.commit().await.unwrap();
            // The measured update: read both, write both, commit.
            let before = co.ep.counters();
            let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
            tx.fetch(&update([3, 4])).await.unwrap();
            tx.write(T, 3, &[8]);
            tx.write(T, 4, &[8]);
            tx.commit().await.unwrap();
            let after = co.ep.counters();
            let mut d = after.clone();
            for i in 0..VerbKind::COUNT {
                d.remote_ops[i] -= before.remote_ops[i];
            }
            d.round_trips -= before.round_trips;
            d.doorbells -= before.doorbells;
            // Its own outcome waits for the next doorbell, as the previous one rode in its
            // first.
            let outcome_pending = co.take_deferred_write().is_some();
            co.flush_deferred().await.unwrap();
            *seen.lock().unwrap() = Some((d, outcome_pending));
        }))
    });
    let (d, outcome_pending) = seen.lock().unwrap().clone().expect("the script ran");
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    assert_eq!(
        (d.round_trips, d.doorbells),
        (3, 3),
        "read, lock + validate, install: {d:?}"
    );
    // READs: the 2 records, `RTS` beside the lock (it bounds the outcome ring) and beside
    // the install (the next snapshot). WRITEs: the previous transaction's outcome, riding
    // in the read doorbell (the paper's unsignaled message), and 3 per record installed.
    assert_eq!(ops(VerbKind::Read), 2 + 1 + 1, "{d:?}");
    assert_eq!(ops(VerbKind::Cas), 2, "{d:?}");
    assert_eq!(ops(VerbKind::FetchAdd), 1, "{d:?}");
    assert_eq!(ops(VerbKind::Write), 1 + 2 * 3, "{d:?}");
    assert_eq!(ops(VerbKind::Rpc), 0, "no CPU-served request: {d:?}");
    assert!(outcome_pending, "the transaction's own outcome is deferred");
    assert_eq!(c.payload(T, 3), vec![8]);
    assert_eq!(c.payload(T, 4), vec![8]);
}

#[test]
fn rsi_a_snapshot_older_than_a_commit_reads_the_version_before_it_when_the_block_keeps_two_and_aborts_when_it_keeps_one(
) {
    use atoll_bench::testkit::Steps;
    use atoll_fabric::NodeId;
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    for versions in [1, 2] {
        let c = rsi_cluster(2, versions);
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let steps = Steps::default();
        c.run(&|core, k| {
            if core.id.node != NodeId(1) {
                return None;
            }
            let mut co = c.coordinator(core, k);
            let (seen, steps) = (seen.clone(), steps.clone());
            Some(Box::pin(async move {
                let ep = co.ep.clone();
                if k == 0 {
                    // The old reader: its snapshot is taken by its first read.
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    tx.read(T, 5).await.unwrap();
                    steps.reach(1);
                    steps.wait(&ep, 2).await;
                    let r = tx.read(T, 6).await.map(|v| v[0]);
                    seen.lock().unwrap().push(format!("old reader {r:?}"));
                    tx.rollback().await;
                } else {
                    // A writer commits key 6 after that snapshot.
                    steps.wait(&ep, 1).await;
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    let v = tx.read(T, 6).await.unwrap();
                    tx.write(T, 6, &[v[0] + 1]);
                    let r = tx.commit().await.map(|_| ());
                    seen.lock().unwrap().push(format!("writer {r:?}"));
                    co.flush_deferred().await.unwrap();
                    steps.reach(2);
                }
            }))
        });
        let expect = match versions {
            1 => "old reader Err(SnapshotTooOld)",
            _ => "old reader Ok(100)",
        };
        assert_eq!(
            *seen.lock().unwrap(),
            vec!["writer Ok(())".to_string(), expect.to_string()],
            "{versions} versions"
        );
        assert_eq!(c.payload(T, 6), vec![101], "{versions} versions");
    }
}
