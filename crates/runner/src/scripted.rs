//! A small in-process cluster on one OS thread (so co-routine interleaving is deterministic)
//! that runs scripted co-routines: what `atoll calibrate` times verbs and RPCs on, and what
//! the protocol scenario tests (through `atoll-testkit`) script step by step.

use atoll_fabric::{
    Coroutine, Endpoint, NodeDirectory, NodeId, NodeMemory, NodeSetup, RemotePtr, TaskId,
    WorkerCore,
};
use atoll_fabric_inproc::{self as inproc, InprocConfig};
use atoll_protocols::ProtocolKind;
use atoll_storage::layout::{LockWord, OldVersions};
use atoll_storage::{Catalog, Store, TableId, TableSpec, Topology};
use atoll_txn::handler::StoreHandler;
use atoll_txn::knobs::FamilySet;
use atoll_txn::{Coordinator, FamilyConfig, Knobs, Plan, TxnConfig};
use std::rc::Rc;
use std::sync::Arc;

/// How a test cluster lays out its records: what a protocol's constants and its run's knobs
/// decide.
#[derive(Clone, Debug)]
pub struct RecordShape {
    pub version_slots: u32,
    pub lock_word: LockWord,
    pub old_versions: OldVersions,
    /// Overflow entries per record slot (NAM-DB's overflow area; 0 for none).
    pub overflow_per_record: u32,
    /// The protocol family's configuration (its regions among it).
    pub family: Arc<dyn FamilyConfig>,
}

impl RecordShape {
    /// The shape protocol `P` gives records keeping `version_slots` versions, no overflow.
    pub fn of<P: atoll_txn::Protocol>(version_slots: u32) -> Self {
        RecordShape {
            version_slots,
            lock_word: P::LOCK_WORD,
            old_versions: P::OLD_VERSIONS,
            overflow_per_record: 0,
            family: P::configure(&Knobs::defaults(P::KNOBS))
                .expect("a family's default knobs go together"),
        }
    }
}

/// Every registered family's configuration at its defaults: what a cluster not built for
/// one protocol serves (each family finds its own, and the catalog registers every
/// family's regions).
pub fn every_family() -> Arc<dyn FamilyConfig> {
    Arc::new(FamilySet(
        ProtocolKind::ALL
            .iter()
            .map(|p| {
                p.configure(std::iter::empty())
                    .expect("a family's default knobs go together")
                    .1
            })
            .collect(),
    ))
}

pub struct TestCluster {
    pub catalog: Arc<Catalog>,
    pub stores: Vec<Arc<Store>>,
    pub txn: Arc<TxnConfig>,
    pub coroutines_per_worker: u32,
}

/// Room each growing table of a test cluster may grow into, per node: far more than a
/// test's transactions insert.
const SCRIPTED_GROWTH_BYTES_PER_TABLE: u64 = 8 << 20;

impl TestCluster {
    /// `nodes` nodes with one worker each and `coroutines` co-routines per worker.
    pub fn new(nodes: u16, tables: Vec<TableSpec>, plan: Plan, coroutines: u32) -> Self {
        Self::with_versions(nodes, tables, plan, coroutines, 1)
    }

    /// As `new`, with records keeping `version_slots` versions (MVCC).
    pub fn with_versions(
        nodes: u16,
        tables: Vec<TableSpec>,
        plan: Plan,
        coroutines: u32,
        version_slots: u32,
    ) -> Self {
        Self::with_layout(
            nodes,
            tables,
            plan,
            coroutines,
            version_slots,
            LockWord::Owner,
        )
    }

    /// As `with_versions`, with lock words in `lock_word`'s format (the protocol's
    /// `LOCK_WORD`).
    pub fn with_layout(
        nodes: u16,
        tables: Vec<TableSpec>,
        plan: Plan,
        coroutines: u32,
        version_slots: u32,
        lock_word: LockWord,
    ) -> Self {
        let replicas = if nodes > 1 { 1 } else { 0 };
        // Every family's regions, so every family's roles too, on node 0.
        let topology = ProtocolKind::all_roles()
            .into_iter()
            .fold(Topology::partitioned(nodes), |t, (role, _)| {
                t.with_service(role, atoll_storage::Placement::Memory)
            });
        Self::with_topology(
            topology,
            replicas,
            tables,
            plan,
            coroutines,
            RecordShape {
                version_slots,
                lock_word,
                old_versions: OldVersions::Inline,
                overflow_per_record: 0,
                family: every_family(),
            },
        )
    }

    /// A cluster whose nodes have `topology`'s roles (`stores` has every node, those holding
    /// no records with empty tables), logging to `log_replicas` backups.
    pub fn with_topology(
        topology: Topology,
        log_replicas: u16,
        tables: Vec<TableSpec>,
        plan: Plan,
        coroutines: u32,
        shape: RecordShape,
    ) -> Self {
        let nodes = topology.nodes_total();
        // Growing tables (no capacity cap) get room to grow, mapped but untouched until used.
        let growth_bytes = vec![SCRIPTED_GROWTH_BYTES_PER_TABLE; tables.len()];
        let txn = Arc::new(TxnConfig {
            plan,
            log_replicas,
            // Room for records of up to 1024 words in each of a ring's slots.
            log_ring_words: atoll_txn::log_ring::LOG_RING_RECORDS * 1024,
            log_applied: false,
            instance_log: false,
            // Ids as `coordinator` hands them out: by worker index, over every node.
            coordinators_total: nodes as u32 * coroutines,
            coordinators_per_node: coroutines,
            log_slots: topology.log_slots(log_replicas),
            loc_cache_entries_max: 1024,
            family: shape.family.clone(),
        });
        let catalog = Arc::new(
            Catalog::with_versions(
                topology.memory_nodes(),
                tables,
                txn.extra_regions(),
                shape.version_slots,
            )
            .with_topology(topology)
            .with_lock_word(shape.lock_word)
            .with_old_versions(shape.old_versions)
            .with_growth(&growth_bytes, shape.overflow_per_record)
            .with_overflow(shape.overflow_per_record)
            .with_table_regions(|records| txn.family.table_regions(records)),
        );
        let stores = (0..nodes)
            .map(|n| {
                let mem = Arc::new(NodeMemory::new(
                    NodeId(n),
                    &catalog.region_words_of(NodeId(n)),
                ));
                Arc::new(Store::new(catalog.clone(), mem))
            })
            .collect();
        TestCluster {
            catalog,
            stores,
            txn,
            coroutines_per_worker: coroutines,
        }
    }

    /// Runs `script(core, k)` as co-routine `k` of every worker until all finish.
    pub fn run(&self, script: &(dyn Fn(&Rc<WorkerCore>, u32) -> Option<Coroutine> + Sync)) {
        let memory: Vec<Arc<NodeMemory>> = self.stores.iter().map(|s| s.memory().clone()).collect();
        let setups: Vec<NodeSetup> = self
            .stores
            .iter()
            .map(|s| NodeSetup {
                memory: s.memory().clone(),
                handler: Arc::new(StoreHandler::new(
                    s.clone(),
                    self.catalog
                        .extra_region(atoll_txn::coord::LOG_EXTRA_REGION),
                    atoll_protocols::participants(&Default::default(), &atoll_txn::knobs::NoKnobs),
                )),
            })
            .collect();
        let cfg = InprocConfig {
            nodes: self.catalog.topology().nodes_total(),
            threads_per_node: 1,
            os_threads: 1,
            pin_threads: false,
            net_latency_ns: [0; atoll_fabric::VerbKind::COUNT],
            machine_pairs: Vec::new(),
        };
        let k = self.coroutines_per_worker;
        let spawn = |core: &Rc<WorkerCore>| -> Vec<Coroutine> {
            (0..k)
                .map(|i| script(core, i).unwrap_or_else(|| Box::pin(async {})))
                .collect()
        };
        // A scenario's failed assertion panics its worker: fail the test with its message.
        if let Err(p) = inproc::run(&cfg, &setups, &NodeDirectory::of(&memory), &spawn) {
            panic!("{p}");
        }
    }

    /// A coordinator for co-routine `k` of `core`.
    pub fn coordinator(&self, core: &Rc<WorkerCore>, k: u32) -> Coordinator {
        let ep = Endpoint::new(core.clone(), TaskId(k));
        Coordinator::new(
            ep,
            self.catalog.clone(),
            self.txn.clone(),
            core.index * self.coroutines_per_worker + k,
        )
    }

    /// Where `key`'s record lives.
    pub fn record_ptr(&self, t: TableId, key: u64) -> RemotePtr {
        let node = self.catalog.home(t, key, NodeId(0));
        let idx = self.stores[node.0 as usize]
            .lookup(t, key)
            .expect("key loaded");
        self.catalog.record_ptr(t, node, idx)
    }

    /// The tuple header of `key` as stored now (see `layout` for the words).
    pub fn header(&self, t: TableId, key: u64) -> Vec<u64> {
        let node = self.catalog.home(t, key, NodeId(0));
        let s = &self.stores[node.0 as usize];
        let idx = s.lookup(t, key).expect("key present");
        let mut w = vec![0; atoll_storage::layout::HEADER_WORDS as usize];
        s.read_tuple(t, idx, &mut w);
        w
    }

    /// The workload's words of `key`'s payload as stored now, after checking the engine
    /// words (writer tag, check word) still match them.
    pub fn payload(&self, t: TableId, key: u64) -> Vec<u64> {
        let node = self.catalog.home(t, key, NodeId(0));
        let s = &self.stores[node.0 as usize];
        let idx = s.lookup(t, key).expect("key present");
        let mut w = vec![0; self.catalog.layout(t).tuple_words as usize];
        s.read_tuple(t, idx, &mut w);
        let payload = &w[atoll_storage::layout::HEADER_WORDS as usize..];
        assert!(
            atoll_storage::layout::payload_intact(t, key, payload),
            "payload of key {key} in table {t:?} is torn or misplaced: {payload:?}"
        );
        payload[atoll_storage::layout::ENGINE_PAYLOAD_WORDS as usize..].to_vec()
    }
}
