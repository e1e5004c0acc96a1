//! The shared-data architecture end to end: memory nodes hold every record and run no
//! co-routine, compute nodes run every transaction and hold no record; every protocol runs
//! there, clean under its checks and its history checker, and which CPUs serve RPCs is
//! counted per role.

use atoll_check::{self as history, Mode};
use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig, Roles};
use atoll_runner::{run, Report, RunConfig};
use atoll_storage::Placement;
use atoll_testkit::{params, FAULTS_MIXED};
use atoll_txn::tsvc::TS_ROLE;
use atoll_txn::Plan;
use atoll_workloads::{Params, WorkloadKind};

/// `memory` memory nodes, `compute` compute nodes, and the timestamp service at `ts` if the
/// family has one (the others have no node of their own to place).
fn config(
    workload: WorkloadKind,
    protocol: ProtocolKind,
    plan: &str,
    (memory, compute, ts): (u16, u16, Placement),
    seed: u64,
) -> RunConfig {
    let params = match workload {
        WorkloadKind::SmallBank => params(&[("accounts", "40"), ("hot_accounts", "4")]),
        // Small records: under tearing a READ moves 2 words per step, so YCSB's default
        // 1000-byte records (several versions each under MVCC) take milliseconds per read,
        // and a few-millisecond run may commit nothing.
        WorkloadKind::Ycsb => params(&[
            ("records", "400"),
            ("write_fraction", "0.4"),
            ("record_bytes", "128"),
            ("ops_per_txn", "4"),
        ]),
        WorkloadKind::Checkout => params(&[
            ("products", "200"),
            ("product_bytes", "128"),
            ("orders_max", "2000"),
        ]),
        // A scaled population; inserts and deletes (NewOrder, Delivery) under every protocol.
        WorkloadKind::Tpcc => params(&[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "50"),
        ]),
        // Fewer slots than keys: inserts reclaim deleted keys' slots.
        WorkloadKind::Cycle => params(&[
            ("pairs", "6"),
            ("record_words", "3"),
            ("ranges", "2"),
            ("range_keys", "8"),
            ("dyn_slots", "10"),
        ]),
        _ => Params::new(),
    };
    let ts_role = protocol.roles().contains(&TS_ROLE);
    // TPC-C's transactions touch ~40 records: a longer run for a few dozen commits.
    let duration_s = if workload == WorkloadKind::Tpcc {
        0.02
    } else {
        0.003
    };
    RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
        },
        workload,
        params,
        protocol,
        plan: protocol.parse_plan(plan).unwrap(),
        nodes: memory + compute + u16::from(ts_role && ts == Placement::Own),
        roles: Roles::SharedData {
            memory_nodes: memory,
        },
        placements: if ts_role {
            [(TS_ROLE.name.to_string(), ts.name().to_string())].into()
        } else {
            Default::default()
        },
        threads: 2,
        coroutines: 4,
        duration_s,
        warmup_s: 0.0005,
        seed,
        record_history: true,
        ..RunConfig::default()
    }
}

fn served(r: &Report) -> &atoll_runner::report::RpcsByRole {
    r.verbs
        .rpcs_served_by_role
        .as_ref()
        .expect("a shared-data run counts RPCs per role")
}

#[test]
fn shared_data_every_protocol_runs_clean_on_memory_and_compute_nodes_with_faults_and_co_located() {
    // A sequenced protocol (CALVIN) is partitioned: it refuses the architecture.
    for protocol in ProtocolKind::ALL.into_iter().filter(|p| !p.sequenced()) {
        for workload in [
            WorkloadKind::SmallBank,
            WorkloadKind::Ycsb,
            WorkloadKind::Checkout,
            WorkloadKind::Tpcc,
            WorkloadKind::Cycle,
        ] {
            for (seed, shape, colocate) in [
                (1, (2, 2, Placement::Memory), false),
                (2, (1, 3, Placement::Own), false),
                (3, (2, 2, Placement::Memory), true),
            ] {
                let mut cfg = config(workload, protocol, "one-sided", shape, seed);
                cfg.colocate = colocate;
                let what = format!(
                    "{} / {} / {shape:?} colocate={colocate} / seed {seed}",
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
fn shared_data_co_location_takes_a_compute_nodes_home_records_off_the_network_in_the_simulator() {
    // TPC-C works on the compute node's home warehouses (memory node i for compute node i):
    // co-located, most of its one-sided ops are the CPU's own accesses.
    let run_with = |colocate: bool| {
        let mut cfg = config(
            WorkloadKind::Tpcc,
            ProtocolKind::NamDb,
            "one-sided",
            (2, 2, Placement::Memory),
            5,
        );
        cfg.colocate = colocate;
        let r = run(&cfg, &|_| {}).unwrap();
        assert!(r.passed, "colocate={colocate}: {:?}", r.checks);
        assert_eq!(r.config.colocated, Some(colocate));
        (r.summary.committed_per_s, r.summary.latency_us.p50)
    };
    let (apart, apart_p50) = run_with(false);
    let (together, together_p50) = run_with(true);
    assert!(
        together > apart * 1.2 && together_p50 < apart_p50,
        "co-located {together} tx/s, p50 {together_p50} us; apart {apart} tx/s, p50 {apart_p50} us"
    );
}

#[test]
fn namdb_reads_headers_apart_from_old_payloads_so_versions_kept_barely_add_read_bytes_unlike_rsis_whole_blocks(
) {
    // 1000-byte records, half the operations updates: every record keeps `versions`.
    let read_bytes_per_commit = |protocol: ProtocolKind, versions: u32| {
        let mut cfg = config(
            WorkloadKind::Ycsb,
            protocol,
            "one-sided",
            (1, 2, Placement::Memory),
            7,
        );
        cfg.params = params(&[
            ("records", "400"),
            ("write_fraction", "0.5"),
            ("record_bytes", "1000"),
            ("ops_per_txn", "4"),
        ]);
        cfg.set_knob("rsi_versions", versions);
        // No faults (tearing moves a 4 KB block a word pair per step) and long enough for a
        // few hundred commits.
        cfg.fabric = Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::default(),
        };
        cfg.duration_s = 0.02;
        let what = format!("{} with {versions} versions", protocol.name());
        let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.passed, "{what}: {:?}", r.checks);
        let v = history::check(&r.history, Mode::from(protocol.isolation()));
        assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
        assert!(r.summary.committed > 0, "{what}: nothing committed");
        let per_commit = r.verbs.by_kind["read"].remote_bytes as f64 / r.summary.committed as f64;
        eprintln!(
            "{what}: {per_commit:.0} read bytes per commit, {} commits",
            r.summary.committed
        );
        per_commit
    };
    let namdb = read_bytes_per_commit(ProtocolKind::NamDb, 4)
        / read_bytes_per_commit(ProtocolKind::NamDb, 1);
    let rsi =
        read_bytes_per_commit(ProtocolKind::Rsi, 4) / read_bytes_per_commit(ProtocolKind::Rsi, 1);
    // NAM-DB: 16 bytes of header per old version and now and then a second READ of one
    // old payload; RSI: every READ moves all four versions.
    assert!(
        namdb < 1.3,
        "namdb read bytes per commit, 4 versions / 1: {namdb:.2}"
    );
    assert!(
        rsi > 3.0,
        "rsi read bytes per commit, 4 versions / 1: {rsi:.2}"
    );
}

#[test]
fn namdb_runs_clean_under_snapshot_isolation_with_its_vector_per_node_and_with_the_detached_fetcher_3_versions_per_record_and_an_overflow_area_with_faults(
) {
    use atoll_txn::tsvc::VectorSlots;
    for (slots, fetcher) in [
        (VectorSlots::Node, false),
        (VectorSlots::Coordinator, true),
        (VectorSlots::Node, true),
    ] {
        for workload in [
            WorkloadKind::SmallBank,
            WorkloadKind::Ycsb,
            WorkloadKind::Checkout,
        ] {
            for (seed, shape) in [(3, (2, 2, Placement::Memory)), (4, (1, 3, Placement::Own))] {
                let mut cfg = config(workload, ProtocolKind::NamDb, "one-sided", shape, seed);
                cfg.set_knob("vector_slots", slots.name());
                cfg.set_knob("vector_fetcher", fetcher);
                // Blocks of 3 versions with the fetcher: older snapshots read old slots.
                let versions = if fetcher { 3 } else { 1 };
                cfg.set_knob("rsi_versions", versions);
                // With old versions, the mover copies them to an overflow area too.
                let overflow = if fetcher { 2 } else { 0 };
                cfg.set_knob("overflow_versions", overflow);
                let what = format!(
                    "namdb {slots:?} fetcher={fetcher} versions={versions} overflow={overflow} / {} / {shape:?} / seed {seed}",
                    workload.name()
                );
                let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(r.passed, "{what}: {:?}", r.checks);
                assert!(r.summary.committed > 0, "{what}: nothing committed");
                let v = history::check(&r.history, Mode::from(ProtocolKind::NamDb.isolation()));
                assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
                let compute = shape.1 as usize;
                let vector_len = match slots {
                    VectorSlots::Node => compute,
                    VectorSlots::Coordinator => compute * 2 * 4,
                };
                let committed: Vec<_> = r
                    .history
                    .iter()
                    .filter(|t| t.aborted.is_none() && t.commit_slot.is_some())
                    .collect();
                assert!(!committed.is_empty(), "{what}: no update committed");
                for t in &committed {
                    let v = t.snapshot_vector.as_ref().expect("a NAM-DB snapshot");
                    assert_eq!(v.len(), vector_len, "{what}: {t:?}");
                }
                if slots == VectorSlots::Node {
                    // A node's coordinators share its slot: the first compute node's slot is 0.
                    assert!(
                        committed
                            .iter()
                            .all(|t| (t.commit_slot.unwrap() as usize) < compute),
                        "{what}"
                    );
                }
            }
        }
    }
}

#[test]
fn namdb_snapshots_of_the_per_coordinator_vector_with_the_fetcher_lie_on_one_chain_no_long_fork() {
    // Seed 20 of this shape forked when a snapshot raised the coordinator's own slot to its
    // last commit: two read-only transactions each saw one of two disjoint writers and not
    // the other (adya rejected it; the checker now names it "a long fork").
    const FAULTS: &str = "spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50";
    for seed in [20, 21, 22] {
        let mut cfg = config(
            WorkloadKind::Cycle,
            ProtocolKind::NamDb,
            "one-sided",
            (1, 3, Placement::Own),
            seed,
        );
        cfg.fabric = Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS).unwrap(),
        };
        cfg.duration_s = 0.002;
        cfg.set_knob("rsi_versions", 2);
        cfg.set_knob("vector_fetcher", true);
        let what = format!("namdb fetcher / cycle / 1+3, own ts node / seed {seed}");
        let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(r.passed, "{what}: {:?}", r.checks);
        let read_only = r
            .history
            .iter()
            .filter(|t| t.aborted.is_none() && t.commit_slot.is_none())
            .count();
        assert!(read_only > 0, "{what}: no read-only commit to fork");
        let v = history::check(&r.history, Mode::Snapshot);
        assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
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
            (3, 4, Placement::Own),
            3,
        ),
        &|_| {},
    )
    .unwrap();
    assert!(r.passed, "{:?}", r.checks);
    let s = served(&r);
    assert_eq!(
        (s.memory_nodes, s.compute_nodes, s.service_nodes["ts_node"]),
        (0, 0, 0),
        "RSI's one-sided SmallBank served RPCs"
    );
    // OCC over RPC: the memory nodes' CPUs serve every request (the two-sided variant).
    let r = run(
        &config(
            WorkloadKind::SmallBank,
            ProtocolKind::Occ,
            "rpc",
            (2, 2, Placement::Memory),
            4,
        ),
        &|_| {},
    )
    .unwrap();
    assert!(r.passed, "{:?}", r.checks);
    let s = served(&r);
    assert!(s.memory_nodes > r.summary.committed, "{s:?}");
    assert_eq!(s.compute_nodes, 0, "{s:?}");
    assert!(s.service_nodes.is_empty(), "OCC has no service role: {s:?}");
}

#[test]
fn shared_data_compute_nodes_register_no_table_memory() {
    let partitioned = RunConfig {
        nodes: 3,
        ..RunConfig::default()
    };
    let shared = RunConfig {
        nodes: 3,
        roles: Roles::SharedData { memory_nodes: 1 },
        ..RunConfig::default()
    };
    let p = atoll_runner::sizing::sizing(&partitioned).unwrap();
    let s = atoll_runner::sizing::sizing(&shared).unwrap();
    let tables =
        |z: &atoll_runner::sizing::Sizing| z.table_region_words.iter().map(|(_, w)| w).sum::<u64>();
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
    let mut no_compute = RunConfig {
        nodes: 2,
        protocol: ProtocolKind::Rsi,
        roles: Roles::SharedData { memory_nodes: 1 },
        ..RunConfig::default()
    };
    no_compute.set_placement(TS_ROLE.name, Placement::Own);
    let e = no_compute.validate().unwrap_err().0;
    assert!(
        e.contains("1 memory node and a timestamp service node leave 0 compute nodes"),
        "{e}"
    );
    let backups = RunConfig {
        nodes: 4,
        roles: Roles::SharedData { memory_nodes: 2 },
        log_replicas: 3,
        ..RunConfig::default()
    };
    let e = backups.validate().unwrap_err().0;
    assert!(e.contains("replicas=4") && e.contains("1..=3"), "{e}");
}

/// One coordinator on a compute node, records on a memory node, the timestamp service on a
/// node of its own: every op it posts is remote, so its worker's counters are its verbs.
fn rsi_one_coordinator(plan: Plan) -> atoll_testkit::TestCluster {
    rsi_cluster(1, 1, plan)
}

/// As [`rsi_one_coordinator`], with `coroutines` co-routines and `versions` per record.
fn rsi_cluster(coroutines: u32, versions: u32, plan: Plan) -> atoll_testkit::TestCluster {
    si_cluster::<atoll_protocols::Rsi>(coroutines, versions, plan)
}

/// As [`rsi_cluster`], for snapshot-isolation family `P` (its records, regions and knobs at
/// their defaults).
fn si_cluster<P: atoll_txn::Protocol>(
    coroutines: u32,
    versions: u32,
    plan: Plan,
) -> atoll_testkit::TestCluster {
    si_cluster_logged::<P>(coroutines, versions, plan, 0)
}

/// As [`si_cluster`], each coordinator logging to `log_replicas` memory nodes.
fn si_cluster_logged<P: atoll_txn::Protocol>(
    coroutines: u32,
    versions: u32,
    plan: Plan,
    log_replicas: u16,
) -> atoll_testkit::TestCluster {
    use atoll_storage::{Partition, TableSpec, Topology};
    let spec = TableSpec {
        name: "t".into(),
        payload_words: 1,
        capacity_per_node: 16,
        capacity_max_per_node: Some(16),
        partition: Partition::Modulo,
        ordered: false,
        gone_keys_max_per_node: 0,
    };
    // The family's roles (RSI's and NAM-DB's timestamp service, Tell's commit manager) each
    // on a node of its own.
    let topology = P::ROLES.iter().fold(Topology::shared_data(1, 1), |t, r| {
        t.with_service(*r, Placement::Own)
    });
    let c = atoll_testkit::TestCluster::with_topology(
        topology,
        log_replicas,
        vec![spec],
        plan,
        coroutines,
        atoll_testkit::RecordShape::of::<P>(versions),
    );
    for k in 0..8 {
        c.stores[0].insert(T, k, &[100]).unwrap();
    }
    c
}

const T: atoll_storage::TableId = atoll_storage::TableId(0);

/// The verbs of one update transaction of snapshot-isolation family `P` (read keys 3 and
/// 4, write both, commit) on [`si_cluster`] with `versions` per record, as
/// [`update_verbs`] measures them.
fn update_verbs_with<P: atoll_txn::Protocol>(
    plan: Plan,
    versions: u32,
) -> (atoll_fabric::VerbCounters, bool) {
    update_verbs_on::<P>(si_cluster::<P>(1, versions, plan))
}

/// The verbs of one RSI update transaction (read keys 3 and 4, write both, commit) by the
/// only coordinator of [`si_cluster`] under `plan`, after two transactions that
/// learn the keys' places and leave an outcome deferred; and whether its own outcome is
/// left deferred.
fn rsi_update_verbs(plan: Plan) -> (atoll_fabric::VerbCounters, bool) {
    update_verbs::<atoll_protocols::Rsi>(plan)
}

/// [`rsi_update_verbs`] under protocol `P` of the snapshot-isolation family.
fn update_verbs<P: atoll_txn::Protocol>(plan: Plan) -> (atoll_fabric::VerbCounters, bool) {
    update_verbs_on::<P>(si_cluster::<P>(1, 1, plan))
}

/// [`update_verbs`] on cluster `c`.
fn update_verbs_on<P: atoll_txn::Protocol>(
    c: atoll_testkit::TestCluster,
) -> (atoll_fabric::VerbCounters, bool) {
    use atoll_fabric::{NodeId, VerbCounters, VerbKind};
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
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
            let mut tx = Txn::<P>::begin(&mut co);
            tx.fetch(&[(T, 3, false), (T, 4, false)]).await.unwrap();
            tx.commit().await.unwrap();
            let mut tx = Txn::<P>::begin(&mut co);
            tx.fetch(&update([1, 2])).await.unwrap();
            tx.write(T, 1, &[7]);
            tx.write(T, 2, &[7]);
            tx.commit().await.unwrap();
            // The measured update: read both, write both, commit.
            let before = co.ep.counters();
            let mut tx = Txn::<P>::begin(&mut co);
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
            let outcome_pending = co.take_deferred().is_some();
            co.flush_deferred().await.unwrap();
            *seen.lock().unwrap() = Some((d, outcome_pending));
        }))
    });
    assert_eq!(c.payload(T, 3), vec![8]);
    assert_eq!(c.payload(T, 4), vec![8]);
    let seen = seen.lock().unwrap().clone();
    seen.expect("the script ran")
}

#[test]
fn rsi_an_update_transaction_takes_3_signaled_round_trips_and_1_unsignaled_message_and_no_memory_node_cpu(
) {
    use atoll_fabric::VerbKind;
    let (d, outcome_pending) = rsi_update_verbs(Plan::uniform(atoll_txn::Primitive::OneSided));
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
}

#[test]
fn tell_a_contention_free_update_takes_start_get_put_if_and_set_committed_one_sided_or_by_rpc() {
    use atoll_fabric::VerbKind;
    use atoll_txn::Primitive;
    let (d, pending) =
        update_verbs_with::<atoll_protocols::Tell>(Plan::uniform(Primitive::OneSided), 4);
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    // start (a request to the commit manager), the gets (a READ of each slot and of its
    // LOCK), the puts' CAS, their words and unlocks, set_committed.
    assert_eq!((d.round_trips, d.doorbells), (5, 5), "{d:?}");
    assert_eq!(ops(VerbKind::Read), 2 * 2, "{d:?}");
    assert_eq!(ops(VerbKind::Cas), 2, "{d:?}");
    assert_eq!(ops(VerbKind::Write), 2 * 2, "{d:?}");
    assert_eq!(ops(VerbKind::Rpc), 2, "start and set_committed: {d:?}");
    assert!(
        !pending,
        "a commit waits for set_committed's reply, its number"
    );
    // The storage node's CPU serves the gets and the puts instead: a request each.
    let plan =
        Plan::uniform(Primitive::Rpc).only(<atoll_protocols::Tell as atoll_txn::Protocol>::STAGES);
    let (d, _) = update_verbs_with::<atoll_protocols::Tell>(plan, 4);
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    assert_eq!((d.round_trips, ops(VerbKind::Rpc)), (4, 4), "{d:?}");
    assert_eq!(
        ops(VerbKind::Read) + ops(VerbKind::Write) + ops(VerbKind::Cas),
        0,
        "{d:?}"
    );
}

#[test]
fn tell_a_logged_update_adds_the_log_entry_and_the_commit_flag_a_round_trip_each() {
    use atoll_fabric::VerbKind;
    use atoll_txn::Primitive;
    let logged = |plan: Plan| {
        update_verbs_on::<atoll_protocols::Tell>(si_cluster_logged::<atoll_protocols::Tell>(
            1, 4, plan, 1,
        ))
        .0
    };
    let d = logged(Plan::uniform(Primitive::OneSided));
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    // start, the gets, the log entry (a WRITE), the puts' CAS, their words and unlocks,
    // the commit flag (a WRITE of one word), set_committed.
    assert_eq!((d.round_trips, d.doorbells), (7, 7), "{d:?}");
    assert_eq!(ops(VerbKind::Read), 2 * 2, "{d:?}");
    assert_eq!(ops(VerbKind::Cas), 2, "{d:?}");
    assert_eq!(ops(VerbKind::Write), 1 + 2 * 2 + 1, "{d:?}");
    assert_eq!(ops(VerbKind::Rpc), 2, "start and set_committed: {d:?}");
    // By request: start, get, the log entry, put, the flag, set_committed.
    let plan =
        Plan::uniform(Primitive::Rpc).only(<atoll_protocols::Tell as atoll_txn::Protocol>::STAGES);
    let d = logged(plan);
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    assert_eq!((d.round_trips, ops(VerbKind::Rpc)), (6, 6), "{d:?}");
}

#[test]
fn namdb_an_update_takes_its_commit_timestamp_with_no_network_op_and_publishes_it_with_one_deferred_write(
) {
    use atoll_fabric::VerbKind;
    let (d, published_later) =
        update_verbs::<atoll_protocols::NamDb>(Plan::uniform(atoll_txn::Primitive::OneSided));
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    // Two copies of the vector until they agree (a READ of several words is not atomic),
    // then read, lock + validate, install.
    assert_eq!(
        (d.round_trips, d.doorbells),
        (2 + 3, 2 + 3),
        "vector twice, read, lock, install: {d:?}"
    );
    // READs: the vector twice and the 2 records; WRITEs: the previous commit's publishing
    // WRITE, riding in the first doorbell, and 3 per record installed.
    assert_eq!(ops(VerbKind::Read), 2 + 2, "{d:?}");
    assert_eq!(ops(VerbKind::Cas), 2, "{d:?}");
    assert_eq!(
        ops(VerbKind::FetchAdd),
        0,
        "the commit timestamp is local: {d:?}"
    );
    assert_eq!(ops(VerbKind::Write), 1 + 2 * 3, "{d:?}");
    assert_eq!(ops(VerbKind::Rpc), 0, "no CPU-served request: {d:?}");
    assert!(published_later, "its own publishing WRITE is deferred");
}

#[test]
fn rsi_over_rpc_takes_the_same_3_round_trips_with_every_message_a_request_to_a_cpu() {
    use atoll_fabric::VerbKind;
    let (d, outcome_pending) = rsi_update_verbs(Plan::uniform(atoll_txn::Primitive::Rpc));
    let ops = |k: VerbKind| d.remote_ops[k as usize];
    assert_eq!((d.round_trips, d.doorbells), (3, 3), "{d:?}");
    // Read: the memory node's read + the previous outcome; lock: the memory node's lock +
    // the commit timestamp; install: the memory node's install + the next snapshot.
    assert_eq!(ops(VerbKind::Rpc), 2 + 2 + 2, "{d:?}");
    for k in [
        VerbKind::Read,
        VerbKind::Write,
        VerbKind::Cas,
        VerbKind::FetchAdd,
    ] {
        assert_eq!(ops(k), 0, "no one-sided {k:?}: {d:?}");
    }
    assert!(outcome_pending, "the transaction's own outcome is deferred");
}

#[test]
fn rsi_a_snapshot_older_than_a_commit_reads_the_version_before_it_when_the_block_keeps_two_and_aborts_when_it_keeps_one(
) {
    use atoll_fabric::NodeId;
    use atoll_testkit::Steps;
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    for versions in [1, 2] {
        let c = rsi_cluster(2, versions, Plan::uniform(atoll_txn::Primitive::OneSided));
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

#[test]
fn namdb_a_snapshot_older_than_every_version_a_record_keeps_reads_it_from_the_overflow_chain_and_aborts_on_a_gap(
) {
    use atoll_fabric::NodeId;
    use atoll_protocols::{namdb::mover::Mover, NamDb};
    use atoll_storage::{Partition, TableSpec, Topology};
    use atoll_testkit::{Steps, TestCluster};
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    const COMMITS: u32 = 3;
    use atoll_txn::versions::{VersionCounters, VersionEvent as E};
    // (overflow entries per record, the commits after which the mover passes, what the old
    // reader gets, and what is counted: chain walks, reads served from overflow, reads
    // beyond the kept versions). Missing the second commit's version, the chain skips from
    // the third to the first: a gap, which the reader cannot tell invisible, so it aborts.
    let every: &[u32] = &[0, 1, 2];
    for (overflow, passes, expect, counted) in [
        (0, every, "Err(SnapshotTooOld)", [0, 0, 1]),
        (2, every, "Ok(100)", [1, 1, 0]),
        (2, &[0, 2][..], "Err(SnapshotTooOld)", [1, 0, 1]),
        (2, &[2][..], "Err(SnapshotTooOld)", [1, 0, 1]),
    ] {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 1,
            capacity_per_node: 16,
            capacity_max_per_node: Some(16),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        let shape = namdb_shape(overflow);
        let c = TestCluster::with_topology(
            Topology::shared_data(1, 1).with_service(TS_ROLE, Placement::Own),
            0,
            vec![spec],
            Plan::uniform(atoll_txn::Primitive::OneSided),
            2,
            shape,
        );
        for k in 0..8 {
            c.stores[0].insert(T, k, &[100]).unwrap();
        }
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let steps = Steps::default();
        let catalog = c.catalog.clone();
        let counts: Arc<VersionCounters> = Arc::default();
        c.run(&|core, k| {
            let (seen, steps, catalog) = (seen.clone(), steps.clone(), catalog.clone());
            let counts = counts.clone();
            match (core.id.node, k) {
                (NodeId(0), 0) => {
                    // The memory node's mover, one pass when told.
                    let ep = atoll_fabric::Endpoint::new(core.clone(), atoll_fabric::TaskId(0));
                    Some(Box::pin(async move {
                        let mut mover = Mover::new(&catalog, None);
                        for n in 0..COMMITS {
                            steps.wait(&ep, 2 + 2 * n).await;
                            if passes.contains(&n) {
                                mover
                                    .pass(&ep, &catalog, &|t| catalog.layout(t).capacity, &counts)
                                    .await
                                    .unwrap();
                            }
                            steps.reach(3 + 2 * n);
                        }
                    }))
                }
                (NodeId(1), _) => {
                    let mut co = c.coordinator(core, k);
                    Some(Box::pin(async move {
                        let ep = co.ep.clone();
                        if k == 0 {
                            // The old reader: its snapshot is taken by its first read.
                            co.versions = counts;
                            let mut tx = Txn::<NamDb>::begin(&mut co);
                            tx.read(T, 5).await.unwrap();
                            steps.reach(1);
                            steps.wait(&ep, 1 + 2 * COMMITS).await;
                            let r = tx.read(T, 6).await.map(|v| v[0]);
                            seen.lock().unwrap().push(format!("{r:?}"));
                            tx.rollback().await;
                        } else {
                            // A writer commits key 6 three times after that snapshot: the
                            // record keeps the last two versions, the loaded one is gone
                            // from it.
                            for n in 0..COMMITS {
                                steps.wait(&ep, 1 + 2 * n).await;
                                let mut tx = Txn::<NamDb>::begin(&mut co);
                                let v = tx.read(T, 6).await.unwrap();
                                tx.write(T, 6, &[v[0] + 1]);
                                tx.commit().await.unwrap();
                                co.flush_deferred().await.unwrap();
                                steps.reach(2 + 2 * n);
                            }
                        }
                    }))
                }
                _ => None,
            }
        });
        let what = format!("overflow {overflow}, mover after commits {passes:?}");
        assert_eq!(*seen.lock().unwrap(), vec![expect.to_string()], "{what}");
        let n = counts.get();
        assert_eq!(
            [E::ChainWalk, E::ChainRead, E::BeyondKept].map(|e| n[e as usize]),
            counted,
            "{what}: {n:?}"
        );
        // Each pass after a commit copies the version that commit pushed out of the head,
        // and sets its moved bit (nothing rewrites it in between).
        let moved = if overflow == 0 {
            0
        } else {
            passes.len() as u64
        };
        assert_eq!(n[E::VersionMoved as usize], moved, "{what}: {n:?}");
        assert_eq!(n[E::MovedBitSet as usize], moved, "{what}: {n:?}");
        assert_eq!(n[E::MovedBitLost as usize], 0, "{what}: {n:?}");
        // From state: each moved bit names a version the overflow area holds.
        let moved_check = || {
            atoll_workloads::storage_checks(&c.stores)
                .into_iter()
                .find(|r| r.name == "storage.moved_versions_copied")
        };
        match moved_check() {
            None => assert_eq!(overflow, 0, "{what}: the check runs with an overflow area"),
            Some(r) => {
                assert!(r.passed, "{what}: {}", r.detail);
                // The same moved bit with the overflow area wiped: the check must see it.
                let layout = *c.catalog.layout(T);
                let region = c.stores[0].region(T);
                let words = layout.overflow_entries * layout.overflow_entry_words();
                for w in 0..words {
                    region.store((layout.overflow_base + w) as usize, 0);
                }
                let r = moved_check().unwrap();
                assert!(
                    !r.passed && r.detail.contains("t:6"),
                    "{what}: {}",
                    r.detail
                );
            }
        }
        assert_eq!(c.payload(T, 6), vec![100 + COMMITS as u64], "{what}");
    }
}

#[test]
fn rsi_a_snapshot_older_than_a_deletion_aborts_snapshot_too_old_a_newer_one_finds_nothing_and_a_reinsert_revives_the_key(
) {
    use atoll_fabric::NodeId;
    use atoll_testkit::Steps;
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    for plan in ["one-sided", "rpc"] {
        let c = rsi_cluster(2, 1, ProtocolKind::Rsi.parse_plan(plan).unwrap());
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
                    steps.reach(3);
                } else {
                    // A deleter commits the deletion of key 6 after that snapshot.
                    steps.wait(&ep, 1).await;
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    tx.delete(T, 6).await.unwrap();
                    let r = tx.commit().await.map(|_| ());
                    seen.lock().unwrap().push(format!("deleter {r:?}"));
                    co.flush_deferred().await.unwrap();
                    steps.reach(2);
                    steps.wait(&ep, 3).await;
                    // A snapshot taken after the deletion: the key is not there.
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    let r = tx.read(T, 6).await.map(|v| v[0]);
                    seen.lock().unwrap().push(format!("new reader {r:?}"));
                    tx.rollback().await;
                    // Inserted again: the key's slot is revived at the next version.
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    tx.insert(T, 6, &[7]);
                    let r = tx.commit().await.map(|_| ());
                    seen.lock().unwrap().push(format!("inserter {r:?}"));
                    co.flush_deferred().await.unwrap();
                }
            }))
        });
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                "deleter Ok(())".to_string(),
                "old reader Err(SnapshotTooOld)".to_string(),
                "new reader Err(NotFound)".to_string(),
                "inserter Ok(())".to_string(),
            ],
            "plan {plan}"
        );
        assert_eq!(c.payload(T, 6), vec![7], "plan {plan}");
    }
}

#[test]
fn shared_data_rsi_runs_clean_under_snapshot_isolation_with_its_stages_served_by_cpus_with_faults()
{
    for plan in [
        "rpc",
        "read=rpc,timestamp=rpc",
        "lock=rpc,commit=rpc,release=rpc",
    ] {
        for workload in [
            WorkloadKind::SmallBank,
            WorkloadKind::Ycsb,
            WorkloadKind::Checkout,
        ] {
            for (seed, shape) in [(5, (2, 2, Placement::Memory)), (6, (1, 3, Placement::Own))] {
                let mut cfg = config(workload, ProtocolKind::Rsi, plan, shape, seed);
                cfg.set_knob("rsi_versions", 1 + seed % 2);
                let what = format!(
                    "rsi / {plan} / {} / {shape:?} / seed {seed}",
                    workload.name()
                );
                let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert!(r.passed, "{what}: {:?}", r.checks);
                assert!(r.summary.committed > 0, "{what}: nothing committed");
                let v = history::check(&r.history, Mode::from(ProtocolKind::NamDb.isolation()));
                assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
                let s = served(&r);
                assert_eq!(s.compute_nodes, 0, "{what}");
                // Record stages over RPC are served by the memory nodes' CPUs; the timestamp
                // service's requests by its node's (memory node 0 or its own).
                assert!(s.memory_nodes > 0, "{what}: {s:?}");
                if plan != "lock=rpc,commit=rpc,release=rpc" && shape.2 == Placement::Own {
                    assert!(s.service_nodes["ts_node"] > 0, "{what}: {s:?}");
                }
            }
        }
    }
}

#[test]
fn rsi_requests_that_would_corrupt_a_record_or_the_timestamp_service_are_refused_and_change_nothing(
) {
    use atoll_protocols::rsi::msg::{InstallItem, LockChange, RsiRequest};
    use atoll_storage::layout::{CID_LOCKED, H_LOCK};
    use atoll_txn::handler::StoreHandler;
    use atoll_txn::msg::{Item, Reply};
    let c = rsi_one_coordinator(Plan::uniform(atoll_txn::Primitive::Rpc));
    let handler = |n: usize| {
        let log = c.catalog.extra_region(atoll_txn::coord::LOG_EXTRA_REGION);
        StoreHandler::new(
            c.stores[n].clone(),
            log,
            atoll_protocols::participants(&Default::default(), &atoll_txn::knobs::NoKnobs),
        )
    };
    let ask = |n: usize, req: &[u8]| {
        handler(n)
            .answer(req)
            .expect("an rsi request is answered at once")
    };
    let memory_words = |n: usize| -> Vec<Vec<u64>> {
        let m = c.stores[n].memory();
        (0..m.region_count())
            .map(|r| {
                let region = m.region(atoll_fabric::RegionId(r as u16));
                region.load_range(0, region.len_words()).collect()
            })
            .collect()
    };
    let loc = c.stores[0].lookup(T, 5).unwrap();
    let lock_word = {
        let off = c.catalog.layout(T).record_offset(loc) as usize;
        c.stores[0].region(T).load(off + H_LOCK as usize)
    };
    let change = |from: u64, to: u64| LockChange {
        table: T,
        loc,
        from,
        to,
    };
    let install = |payload: &[u64]| RsiRequest::Install {
        cts: lock_word + 1,
        items: vec![InstallItem {
            table: T,
            loc,
            version: 9,
            evict: 0,
            old_slot: Default::default(),
            payload: atoll_fabric::Words::from_slice(payload),
        }],
    };
    let (memory_before, ts_before) = (memory_words(0), memory_words(2));
    let refused: Vec<(usize, Vec<u8>, &str)> = vec![
        (
            0,
            RsiRequest::Lock {
                items: vec![change(lock_word, lock_word + 1)],
            }
            .to_bytes(),
            "a lock that writes another commit id",
        ),
        (
            0,
            RsiRequest::SetLock {
                items: vec![change(lock_word, CID_LOCKED)],
            }
            .to_bytes(),
            "an unlock of an unlocked word",
        ),
        (
            0,
            install(&[1]).to_bytes(),
            "an install of a record nobody locked",
        ),
        (
            0,
            RsiRequest::Lock {
                items: vec![LockChange {
                    loc: 1 << 20,
                    ..change(lock_word, lock_word | CID_LOCKED)
                }],
            }
            .to_bytes(),
            "a lock of a slot out of range",
        ),
        (
            1,
            RsiRequest::Read {
                items: vec![Item {
                    table: T,
                    key: 5,
                    loc: None,
                }],
            }
            .to_bytes(),
            "a read at a compute node",
        ),
        (
            0,
            RsiRequest::Snapshot.to_bytes(),
            "a snapshot at a node that runs no service",
        ),
        (
            2,
            RsiRequest::Outcome { cts: 1 << 40 }.to_bytes(),
            "the outcome of a commit timestamp never handed out",
        ),
        (
            0,
            RsiRequest::Snapshot.to_bytes()[..8].to_vec(),
            "a truncated request",
        ),
    ];
    for (n, req, what) in &refused {
        assert_eq!(ask(*n, req), Reply::BadRequest, "{what}");
    }
    assert!(
        memory_words(0) == memory_before,
        "a refused request changed the memory node"
    );
    assert!(
        memory_words(2) == ts_before,
        "a refused request changed the timestamp node"
    );
    // A locked record's install with a payload of the wrong size is refused too.
    let Reply::Family { .. } = ask(
        0,
        &RsiRequest::Lock {
            items: vec![change(lock_word, lock_word | CID_LOCKED)],
        }
        .to_bytes(),
    ) else {
        panic!("a valid lock was not answered")
    };
    assert_eq!(ask(0, &install(&[1, 2]).to_bytes()), Reply::BadRequest);
    assert_eq!(c.payload(T, 5), vec![100]);
}

#[test]
fn rsi_a_compute_node_crash_stops_the_run_naming_the_crashed_node() {
    // The crashed node's record of what it committed goes with it, and its coordinators'
    // commit timestamps are never reported (`RTS` stalls): the run stops naming the crash,
    // whether it ends first (nothing can be checked) or a survivor's commit gives up
    // waiting on the timestamp node.
    for (duration_s, crash_us) in [(0.01, 1000), (0.3, 1000)] {
        let mut cfg = config(
            WorkloadKind::SmallBank,
            ProtocolKind::Rsi,
            "one-sided",
            (2, 2, Placement::Own),
            7,
        );
        cfg.fabric = Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(&format!("crash_node=2,crash_us={crash_us}")).unwrap(),
        };
        cfg.duration_s = duration_s;
        let what = format!("{duration_s} s, crash at {crash_us} us");
        match run(&cfg, &|_| {}) {
            Err(e @ atoll_runner::RunError::Crashed { .. }) => {
                assert!(
                    e.to_string().contains("node 2 crashed at 1000 µs"),
                    "{what}: {e}"
                );
            }
            Err(e @ atoll_runner::RunError::NodeFailed { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("the cause: node 2 crashed"), "{what}: {msg}");
            }
            other => panic!(
                "{what}: expected the run to stop on the crash, got {:?}",
                other.map(|r| r
                    .checks
                    .into_iter()
                    .filter(|c| !c.passed)
                    .collect::<Vec<_>>())
            ),
        }
    }
}

#[test]
fn shared_data_a_co_located_memory_nodes_crash_takes_its_machines_compute_node_with_it() {
    // Found by a hostile probe: with the compute node running on, a run whose crash hit only
    // aborting attempts ended with exit 0, as if half of a machine could fail alone.
    let mut cfg = config(
        WorkloadKind::Tpcc,
        ProtocolKind::Rsi,
        "one-sided",
        (2, 2, Placement::Memory),
        7,
    );
    cfg.colocate = true;
    cfg.fabric = Fabric::Sim {
        net: "edr-ib".into(),
        faults: FaultConfig::parse("crash_node=0,crash_us=5000").unwrap(),
    };
    cfg.duration_s = 0.01;
    match run(&cfg, &|_| {}) {
        Err(e @ atoll_runner::RunError::Crashed { .. }) => {
            assert!(e.to_string().contains("node 2 crashed at 5000 µs"), "{e}");
        }
        // Or a survivor's commit met the dead memory node past its log first: the error
        // names both nodes of the machine as crashed.
        Err(atoll_runner::RunError::NodeFailed { crashed, .. })
            if crashed.contains(&atoll_fabric::NodeId(2))
                && crashed.contains(&atoll_fabric::NodeId(0)) => {}
        other => panic!(
            "expected the run to stop on compute node 2's crash, got {:?}",
            other.map(|r| r.summary.committed)
        ),
    }
}

#[test]
fn rsi_a_blind_write_and_a_read_then_write_commit_and_the_second_of_two_racing_writers_fails_validation_over_verbs_and_requests(
) {
    use atoll_fabric::NodeId;
    use atoll_testkit::Steps;
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    for prim in [atoll_txn::Primitive::OneSided, atoll_txn::Primitive::Rpc] {
        let c = rsi_cluster(2, 1, Plan::uniform(prim));
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
                let log = |s: String| seen.lock().unwrap().push(s);
                if k == 0 {
                    // A blind write: nothing read, its lock validates the commit id it
                    // fetches at commit.
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    tx.write(T, 2, &[5]);
                    log(format!("blind {:?}", tx.commit().await.map(|_| ())));
                    // A read then a write of one record: the write builds on the read.
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    let v = tx.read(T, 3).await.unwrap()[0];
                    tx.write(T, 3, &[v + 1]);
                    log(format!(
                        "read-then-write {:?}",
                        tx.commit().await.map(|_| ())
                    ));
                    // The first of two writers that read key 4 at one snapshot.
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    let v = tx.read(T, 4).await.unwrap()[0];
                    steps.reach(1);
                    steps.wait(&ep, 2).await;
                    tx.write(T, 4, &[v + 10]);
                    log(format!("first {:?}", tx.commit().await.map(|_| ())));
                    co.flush_deferred().await.unwrap();
                    steps.reach(3);
                } else {
                    steps.wait(&ep, 1).await;
                    let mut tx = Txn::<atoll_protocols::Rsi>::begin(&mut co);
                    let v = tx.read(T, 4).await.unwrap()[0];
                    steps.reach(2);
                    steps.wait(&ep, 3).await;
                    tx.write(T, 4, &[v + 20]);
                    log(format!("second {:?}", tx.commit().await.map(|_| ())));
                    co.flush_deferred().await.unwrap();
                }
            }))
        });
        let seen = seen.lock().unwrap().clone();
        assert_eq!(
            seen,
            [
                "blind Ok(())",
                "read-then-write Ok(())",
                "first Ok(())",
                "second Err(ValidationFailed)"
            ],
            "{prim:?}"
        );
        // What the records hold: the blind value, the increment, the first writer's only.
        assert_eq!(c.payload(T, 2), vec![5], "{prim:?}");
        assert_eq!(c.payload(T, 3), vec![101], "{prim:?}");
        assert_eq!(c.payload(T, 4), vec![110], "{prim:?}");
    }
}

#[test]
fn namdb_the_overflow_collector_keeps_an_entry_a_live_snapshot_needs_and_reclaims_it_once_the_snapshot_moves_on(
) {
    use atoll_fabric::NodeId;
    use atoll_protocols::{namdb, namdb::mover, NamDb};
    use atoll_storage::{Partition, TableSpec, Topology};
    use atoll_testkit::{Steps, TestCluster};
    use atoll_txn::tsvc::{NodeClock, SnapshotFloors};
    use atoll_txn::versions::{VersionCounters, VersionEvent as E};
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    // One overflow entry per record: a ring of 16. Key 6's loaded version goes to entry 0,
    // then 16 versions of other keys come round to it, then key 6 is updated again, so the
    // old reader (snapshot before all of it) finds its version only in entry 0.
    let others = [0u64, 1, 2, 3, 4, 5, 7];
    let mut commits = vec![6u64];
    commits.extend((0..16).map(|n| others[n % others.len()]));
    commits.push(6);
    let n_commits = commits.len() as u32;
    // Steps: commit n at 1 + 2n, the mover's pass after it at 2 + 2n; the old reader reads at
    // 1 + 2N and reaches 2 + 2N with a new snapshot; the writer publishes the floor then
    // (3 + 2N), and the mover passes once more.
    let last = 3 + 2 * n_commits;
    for gc in [true, false] {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 1,
            capacity_per_node: 16,
            capacity_max_per_node: Some(16),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        let shape = namdb_shape(1);
        let c = TestCluster::with_topology(
            Topology::shared_data(1, 1).with_service(TS_ROLE, Placement::Own),
            0,
            vec![spec],
            Plan::uniform(atoll_txn::Primitive::OneSided),
            2,
            shape,
        );
        let nc = *c.txn.family_as::<atoll_protocols::namdb::NamDbConfig>();
        assert!(
            nc.overflow_gc,
            "the test kit runs the collector with an overflow area"
        );
        for k in 0..8 {
            c.stores[0].insert(T, k, &[100]).unwrap();
        }
        let floors = SnapshotFloors::of(&c.catalog, nc.vector_slots_total(&c.txn.shape()))
            .expect("the catalog registers the floors' region");
        let collector = gc.then_some(mover::Gc { floors, keep_ns: 0 });
        let clock: Arc<NodeClock> = Arc::default();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let steps = Steps::default();
        let catalog = c.catalog.clone();
        let counts: Arc<VersionCounters> = Arc::default();
        // Counters after the reader's read, and at the end.
        let at_read: Arc<Mutex<Vec<u64>>> = Arc::default();
        c.run(&|core, k| {
            let (seen, steps, catalog) = (seen.clone(), steps.clone(), catalog.clone());
            let (counts, at_read, clock) = (counts.clone(), at_read.clone(), clock.clone());
            let commits = commits.clone();
            match (core.id.node, k) {
                (NodeId(0), 0) => {
                    let ep = atoll_fabric::Endpoint::new(core.clone(), atoll_fabric::TaskId(0));
                    Some(Box::pin(async move {
                        let mut m = mover::Mover::new(&catalog, collector);
                        let after_commits = (0..n_commits).map(|n| 2 + 2 * n);
                        for step in after_commits.chain([last]) {
                            steps.wait(&ep, step).await;
                            m.pass(&ep, &catalog, &|t| catalog.layout(t).capacity, &counts)
                                .await
                                .unwrap();
                            steps.reach(step + 1);
                        }
                    }))
                }
                (NodeId(1), _) => {
                    let mut co = c.coordinator(core, k);
                    co.node_clock = clock;
                    Some(Box::pin(async move {
                        let ep = co.ep.clone();
                        if k == 0 {
                            co.versions = counts.clone();
                            let mut tx = Txn::<NamDb>::begin(&mut co);
                            tx.read(T, 5).await.unwrap();
                            steps.reach(1);
                            steps.wait(&ep, 1 + 2 * n_commits).await;
                            let r = tx.read(T, 6).await.map(|v| v[0]);
                            seen.lock().unwrap().push(format!("{r:?}"));
                            *at_read.lock().unwrap() = counts.get().to_vec();
                            tx.rollback().await;
                            // A new snapshot replaces the old one: nothing needs entry 0 now.
                            let mut tx = Txn::<NamDb>::begin(&mut co);
                            tx.read(T, 5).await.unwrap();
                            tx.rollback().await;
                            steps.reach(2 + 2 * n_commits);
                        } else {
                            for (n, &key) in commits.iter().enumerate() {
                                steps.wait(&ep, 1 + 2 * n as u32).await;
                                let mut tx = Txn::<NamDb>::begin(&mut co);
                                let v = tx.read(T, key).await.unwrap();
                                tx.write(T, key, &[v[0] + 1]);
                                tx.commit().await.unwrap();
                                co.flush_deferred().await.unwrap();
                                namdb::publish_floor(&ep, &co.node_clock, floors, 0)
                                    .await
                                    .unwrap();
                                steps.reach(2 + 2 * n as u32);
                            }
                            steps.wait(&ep, 2 + 2 * n_commits).await;
                            namdb::publish_floor(&ep, &co.node_clock, floors, 0)
                                .await
                                .unwrap();
                            steps.reach(3 + 2 * n_commits);
                        }
                    }))
                }
                _ => None,
            }
        });
        let what = format!("collector {gc}");
        let at_read = at_read.lock().unwrap().clone();
        let end = counts.get();
        if gc {
            // Entry 0 was kept for the old reader: the pass that came round to it stopped,
            // and key 6's newer version stayed unmoved, so its chain leads right to it.
            assert_eq!(*seen.lock().unwrap(), vec!["Ok(100)".to_string()], "{what}");
            assert_eq!(at_read[E::VersionMoved as usize], 16, "{what}: {at_read:?}");
            assert_eq!(
                at_read[E::EntryReclaimed as usize],
                0,
                "{what}: {at_read:?}"
            );
            assert!(
                at_read[E::MoverBlocked as usize] >= 2,
                "{what}: {at_read:?}"
            );
            // Once the reader's node published a floor above it, the ring moved on: entry 0
            // and the next are reused for the two versions left behind.
            assert_eq!(end[E::EntryReclaimed as usize], 2, "{what}: {end:?}");
            assert_eq!(end[E::VersionMoved as usize], 18, "{what}: {end:?}");
        } else {
            // The ring's wrap wrote over entry 0: the chain shows a gap.
            assert_eq!(
                *seen.lock().unwrap(),
                vec!["Err(SnapshotTooOld)".to_string()],
                "{what}"
            );
            assert_eq!(at_read[E::MoverBlocked as usize], 0, "{what}: {at_read:?}");
            assert_eq!(at_read[E::VersionMoved as usize], 18, "{what}: {at_read:?}");
        }
        assert_eq!(c.payload(T, 6), vec![102], "{what}");
        let moved = atoll_workloads::storage_checks(&c.stores)
            .into_iter()
            .find(|r| r.name == "storage.moved_versions_copied")
            .expect("the check runs with an overflow area");
        assert!(moved.passed, "{what}: {}", moved.detail);
    }
}

/// A NAM-DB test cluster's records: 2 versions each and `overflow` overflow entries per
/// record slot, the family configured as `--rsi-versions 2 --overflow-versions OVERFLOW`
/// configures it (the collector runs with an overflow area).
fn namdb_shape(overflow: u32) -> atoll_testkit::RecordShape {
    let knobs = atoll_txn::Knobs::resolve(
        &atoll_protocols::namdb::config::KNOBS,
        [
            ("rsi_versions", "2"),
            ("overflow_versions", &*overflow.to_string()),
        ],
    )
    .expect("the knobs go together");
    let mut shape = atoll_testkit::RecordShape::of::<atoll_protocols::NamDb>(2);
    shape.overflow_per_record = overflow;
    shape.family = atoll_protocols::namdb::config::configure(&knobs).expect("valid knobs");
    shape
}

#[test]
fn shared_data_a_node_role_is_placed_only_for_a_family_that_declares_it_and_only_under_shared_data()
{
    let mut occ = RunConfig {
        nodes: 4,
        roles: Roles::SharedData { memory_nodes: 1 },
        ..RunConfig::default()
    };
    occ.set_placement(TS_ROLE.name, Placement::Own);
    let e = occ.validate().unwrap_err().0;
    assert_eq!(
        e,
        "--ts-node own needs --protocol rsi or namdb, not occ (its roles: none)"
    );
    let mut partitioned = RunConfig {
        nodes: 3,
        protocol: ProtocolKind::Rsi,
        ..RunConfig::default()
    };
    partitioned.set_placement(TS_ROLE.name, Placement::Memory);
    let e = partitioned.validate().unwrap_err().0;
    assert!(
        e.starts_with("--ts-node needs --architecture shared-data"),
        "{e}"
    );
    let mut far = RunConfig {
        nodes: 4,
        protocol: ProtocolKind::Rsi,
        roles: Roles::SharedData { memory_nodes: 1 },
        ..RunConfig::default()
    };
    far.placements.insert("ts".into(), "far".into());
    assert_eq!(
        far.validate().unwrap_err().0,
        "unknown --ts-node 'far': accepted are memory, own"
    );
    // Placed on its own, the role takes the last node; the family finds it there.
    far.set_placement(TS_ROLE.name, Placement::Own);
    far.validate().unwrap();
    let t = far.topology();
    assert_eq!(
        (t.compute_nodes(), t.service_node(TS_ROLE.name)),
        (2, Some(atoll_fabric::NodeId(3)))
    );
    // Not given, it is a role of node 0, partitioned or not.
    partitioned.placements.clear();
    partitioned.validate().unwrap();
    assert_eq!(
        partitioned.topology().service_node(TS_ROLE.name),
        Some(atoll_fabric::NodeId(0))
    );
    assert_eq!(occ.protocol.roles(), &[]);
}

#[test]
fn tell_a_storage_node_gets_a_whole_slot_and_puts_one_only_at_the_sequence_number_read() {
    use atoll_protocols::tell::descriptor::Tid;
    use atoll_protocols::tell::msg::{PutItem, TellReply, TellRequest, FAMILY};
    use atoll_protocols::tell::record;
    use atoll_storage::layout::H_KEY;
    use atoll_txn::handler::StoreHandler;
    use atoll_txn::msg::Reply;
    // RSI's records with two versions inline: the slot Tell's records take.
    let c = rsi_cluster(1, 2, Plan::uniform(atoll_txn::Primitive::Rpc));
    let layout = c.catalog.layout(T).clone();
    let handler = StoreHandler::new(
        c.stores[0].clone(),
        c.catalog.extra_region(atoll_txn::coord::LOG_EXTRA_REGION),
        atoll_protocols::participants(&Default::default(), &atoll_txn::knobs::NoKnobs),
    );
    let ask = |req: TellRequest| -> Option<TellReply> {
        match handler.answer(&req.to_bytes()).expect("answered at once") {
            Reply::Family { family, body } if family == FAMILY => {
                Some(TellReply::decode(&body).expect("a tell reply"))
            }
            Reply::BadRequest => None,
            other => panic!("{other:?}"),
        }
    };
    let get = || match ask(TellRequest::Get {
        items: vec![(T, 5), (T, 99)],
    }) {
        Some(TellReply::Records(r)) => r,
        other => panic!("{other:?}"),
    };
    let records = get();
    assert!(records[1].is_none(), "key 99 was never loaded");
    let (loc, words) = records[0].clone().expect("key 5 is loaded");
    let r = record::decode(&layout, &words).unwrap();
    assert_eq!((r.seq, r.versions.len()), (0, 1));
    // Tid 7 adds its version; the loaded one stays for older snapshots.
    let mut set = r.versions.clone();
    let head = set.versions()[0].clone();
    let mut payload = head.payload.clone().unwrap();
    payload[2] = 555;
    set.write(Tid(7), head.word + 1, Some(payload));
    let new = record::encode(&layout, &words, &set).unwrap();
    let put = |seq: u64, words: Vec<u64>| {
        ask(TellRequest::PutIf {
            origin: atoll_fabric::NodeId(1),
            items: vec![PutItem {
                table: T,
                loc,
                seq,
                words,
            }],
        })
    };
    assert_eq!(put(0, new.clone()), Some(TellReply::Puts(vec![true])));
    // The same words again at the same sequence number: a put happened since, so it fails.
    assert_eq!(put(0, new.clone()), Some(TellReply::Puts(vec![false])));
    let (_, after) = get()[0].clone().unwrap();
    let r = record::decode(&layout, &after).unwrap();
    assert_eq!((r.seq, r.locked), (1, false));
    assert_eq!(r.versions, set);
    // Refused, changing nothing: another key's words, words that are no record, a
    // commit manager's request where no commit manager runs.
    let mut other_key = new.clone();
    other_key[H_KEY as usize] += 1;
    assert_eq!(put(1, other_key), None);
    assert_eq!(put(1, new[..new.len() - 1].to_vec()), None);
    assert_eq!(
        ask(TellRequest::Start {
            pn: atoll_protocols::tell::cm::Pn(1),
            read_only: false
        }),
        None
    );
    assert_eq!(get()[0].clone().unwrap().1, after);
}

#[test]
fn tell_conditional_puts_one_sided_and_by_rpc_racing_on_one_record_lose_no_update_and_no_get_is_torn(
) {
    use atoll_fabric::NodeId;
    use atoll_protocols::tell::descriptor::Tid;
    use atoll_protocols::tell::msg::{PutItem, TellReply, TellRequest};
    use atoll_protocols::tell::{record, store};
    use atoll_txn::msg::Reply;
    use std::sync::atomic::{AtomicU64, Ordering};
    const COROUTINES: u32 = 4;
    const PUTS_EACH: u64 = 200;
    const KEY: u64 = 5;
    let c = rsi_cluster(COROUTINES, 2, Plan::uniform(atoll_txn::Primitive::OneSided));
    let layout = c.catalog.layout(T).clone();
    let loc = c.stores[0].lookup(T, KEY).unwrap();
    let slot = c.catalog.record_ptr(T, NodeId(0), loc);
    let failed = std::sync::Arc::new(AtomicU64::new(0));
    async fn rpc(ep: &atoll_fabric::Endpoint, req: TellRequest) -> TellReply {
        let mut d = ep.doorbell_for(1);
        let i = d.rpc(NodeId(0), req.to_bytes());
        let res = d.submit().await.unwrap();
        match Reply::decode(res.rpc(i)).unwrap() {
            Reply::Family { body, .. } => TellReply::decode(&body).unwrap(),
            other => panic!("{other:?}"),
        }
    }
    c.run(&|core, k| {
        if core.id.node != NodeId(1) {
            return None;
        }
        let co = c.coordinator(core, k);
        let (layout, failed) = (layout.clone(), failed.clone());
        // Even co-routines use verbs, odd ones requests served by the memory node's CPU,
        // which runs on its own thread: the puts race for real.
        let by_rpc = k % 2 == 1;
        Some(Box::pin(async move {
            let mut put = 0;
            while put < PUTS_EACH {
                let words = if by_rpc {
                    match rpc(
                        &co.ep,
                        TellRequest::Get {
                            items: vec![(T, KEY)],
                        },
                    )
                    .await
                    {
                        TellReply::Records(r) => r[0].clone().unwrap().1,
                        TellReply::Busy => continue,
                        other => panic!("{other:?}"),
                    }
                } else {
                    match store::get(&co.ep, slot, layout.record_words).await.unwrap() {
                        Some(w) => w,
                        None => continue,
                    }
                };
                let r = record::decode(&layout, &words).unwrap();
                // Every put writes its sequence number into the newest payload: a torn get
                // would show another.
                let head = r.versions.versions()[0].clone();
                let mut payload = head.payload.clone().unwrap();
                if r.seq > 0 {
                    assert_eq!(payload[2], r.seq, "a torn get");
                }
                payload[2] = r.seq + 1;
                let mut set = r.versions.clone();
                set.collect(u64::MAX);
                set.write(Tid(r.seq + 1), head.word + 1, Some(payload));
                let new = record::encode(&layout, &words, &set).unwrap();
                // Other co-routines run between this get and this put (one-sided ops to
                // an in-process peer complete inline, without a yield of their own).
                co.ep.sleep(1_000).await;
                let ok = if by_rpc {
                    let items = vec![PutItem {
                        table: T,
                        loc,
                        seq: r.seq,
                        words: new,
                    }];
                    let origin = co.ep.node();
                    rpc(&co.ep, TellRequest::PutIf { origin, items }).await
                        == TellReply::Puts(vec![true])
                } else {
                    store::put_if(&co.ep, slot, r.seq, &new).await.unwrap()
                };
                if ok {
                    put += 1;
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }))
    });
    let r = c.stores[0].region(T);
    let off = layout.record_offset(loc) as usize;
    let words: Vec<u64> = r.load_range(off, layout.record_words as usize).collect();
    let rec = record::decode(&layout, &words).unwrap();
    let all = COROUTINES as u64 * PUTS_EACH;
    assert_eq!((rec.seq, rec.locked), (all, false));
    assert_eq!(rec.versions.versions()[0].payload.as_ref().unwrap()[2], all);
    assert!(failed.load(Ordering::Relaxed) > 0, "the puts never raced");
}

#[test]
fn tell_a_long_reader_holds_lav_so_a_hot_slot_fills_and_its_writers_abort_slot_overflow_in_the_slots_fixed_memory(
) {
    // Tell's records grow while the oldest active transaction holds `lav` back (Tell §5.1).
    // Atoll's slot holds `--tell-versions` versions, sized and counted against the memory
    // budget before the run: with the reader open, the slot keeps the version it reads and
    // every newer one, so the writer that finds no room after garbage collection aborts
    // `slot_overflow` rather than growing the record. Once the reader ends, `lav` moves and
    // the next write collects the versions no snapshot reads any more.
    use atoll_fabric::NodeId;
    use atoll_protocols::Tell;
    use atoll_testkit::Steps;
    use atoll_txn::Txn;
    use std::sync::{Arc, Mutex};
    const VERSIONS: u32 = 4;
    async fn update(co: &mut atoll_txn::Coordinator) -> Result<(), atoll_txn::Abort> {
        let mut tx = Txn::<Tell>::begin(co);
        let v = tx.read(T, 6).await.unwrap();
        tx.write(T, 6, &[v[0] + 1]);
        let r = tx.commit().await.map(|_| ());
        co.flush_deferred().await.unwrap();
        r
    }
    let c = si_cluster::<Tell>(2, VERSIONS, Plan::uniform(atoll_txn::Primitive::OneSided));
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
                // The long reader: its snapshot is taken by its first read.
                let mut tx = Txn::<Tell>::begin(&mut co);
                tx.read(T, 5).await.unwrap();
                steps.reach(1);
                steps.wait(&ep, 2).await;
                let r = tx.read(T, 6).await.map(|v| v[0]);
                seen.lock().unwrap().push(format!("reader {r:?}"));
                tx.commit().await.unwrap();
                co.flush_deferred().await.unwrap();
                steps.reach(3);
            } else {
                steps.wait(&ep, 1).await;
                for _ in 0..VERSIONS + 1 {
                    let r = update(&mut co).await;
                    seen.lock().unwrap().push(format!("writer {r:?}"));
                }
                steps.reach(2);
                steps.wait(&ep, 3).await;
                let r = update(&mut co).await;
                seen.lock().unwrap().push(format!("after the reader {r:?}"));
            }
        }))
    });
    let ok = "writer Ok(())".to_string();
    let full = "writer Err(SlotOverflow)".to_string();
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            ok.clone(),
            ok.clone(),
            ok,
            full.clone(),
            full,
            "reader Ok(100)".to_string(),
            "after the reader Ok(())".to_string(),
        ]
    );
    assert_eq!(c.payload(T, 6), vec![104]);
}
