//! The node runtime: what one node does in a run on its own — load its partition, carry its
//! workers' results, check its own records — and the serializable summary and check parts
//! it hands the driver (the driver).
//!
//! The in-process and simulated fabrics run every node's runtime in one process; a run with
//! a process per node runs one per process, and the same summaries cross the network. What
//! a node reports is sums, histograms (which merge exactly) and its workers' ledgers; the
//! driver merges them, hands the merged ledger back, and each node checks its own records
//! against it (two rounds, since a coordinator's committed effects land on every node).

use crate::error::RunError;
use crate::stats::{NodeStats, WorkerStats};
use atoll_fabric::{NodeId, NodeMemory, NodeSetup};
use atoll_history::TxnRecord;
use atoll_storage::{Catalog, MemoryBudget, Store, TableId};
use atoll_txn::handler::StoreHandler;
use atoll_workloads::{StorageCheck, Workload};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One node of a run.
pub struct NodeRuntime<W: Workload> {
    pub node: NodeId,
    store: Arc<Store>,
    handed_over: Mutex<HandedOver<W::Ledger>>,
    /// Earliest worker time at which one of this node's workers saw a stop request
    /// (`u64::MAX`: none).
    stopped_ns: AtomicU64,
    /// Latest worker time at which one of its co-routines found its workload's source
    /// drained ([`atoll_workloads::Draw::Done`]; 0: none did).
    drained_ns: AtomicU64,
    /// The first of this node's transactions whose op failed after its log was written, and
    /// the node it failed at.
    failed_after_log: Mutex<Option<(NodeId, u64)>>,
    /// One of its co-routines began a transaction (set once: read-mostly, so it costs the
    /// transactions' path no shared write).
    began: AtomicBool,
    /// Attempts its crashed workers were committing whose outcome no recovery settled.
    unresolved: std::sync::atomic::AtomicUsize,
    /// What its coordinators share of NAM-DB's timestamp vector.
    pub clock: Arc<atoll_txn::tsvc::NodeClock>,
    /// Its tasks' and coordinators' counts of old versions (NAM-DB's overflow area).
    pub versions: Arc<atoll_txn::versions::VersionCounters>,
    /// The families' node-wide state, shared by the node's participant side and its
    /// coordinators (CALVIN's batches, order and lock table).
    pub family_nodes: Arc<atoll_txn::FamilyNodes>,
    /// The run's configuration of its family, which the node's participant side serves by.
    family: Arc<dyn atoll_txn::FamilyConfig>,
    /// Its own commit log, shared by its coordinators, when the run keeps one
    /// ([`NodeRuntime::with_own_log`]).
    pub own_log: Option<Arc<atoll_txn::own_log::OwnLog>>,
    /// Its replicas of the partitions it backs up and the cleaner applying its log rings to
    /// them, when the run replicates partitions ([`NodeRuntime::with_replicas`]).
    pub cleaner: Option<Arc<Mutex<atoll_txn::log_ring::LogCleaner>>>,
    /// The node's view of the configuration, when the run replicates partitions (and so
    /// recovers a crashed node: [`atoll_txn::recovery`]).
    pub membership: Option<Arc<atoll_txn::recovery::Membership>>,
    /// The run's transaction settings, for the recovery's participant.
    txn: Option<Arc<atoll_txn::TxnConfig>>,
}

/// A node's replicas after the run, its rings drained: what the driver compares with each
/// partition's primary.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplicaCheck {
    /// The node's own partition: its live records and their digest
    /// ([`atoll_txn::log_ring::partition_digest`]).
    pub primary: (u64, u64),
    /// Each replica it holds: the partition, its live records and their digest.
    pub copies: Vec<(u16, u64, u64)>,
    /// Log records and entries its cleaner applied over the run.
    pub applied_records: u64,
    pub applied_entries: u64,
    /// Passes at which a ring's next entry waited on another ring's earlier write.
    pub waits: u64,
    /// Records applied before their coordinator logged again to the node because another
    /// ring's record wrote one of their keys next; records still waiting to be known
    /// committed when the run ended (applied by the drain).
    pub decided_by_successor: u64,
    pub held_at_end: u64,
    /// Inserts parked outside a full replica table until a delete freed a slot.
    pub parked: u64,
    /// What its cleaner found wrong (the first few), and how many in all.
    pub problems: Vec<String>,
    pub problems_seen: u64,
}

/// What the node's workers handed over when their last co-routine ended.
struct HandedOver<L> {
    stats: Vec<WorkerStats>,
    history: Vec<TxnRecord>,
    ledgers: Vec<L>,
}

/// What a node reports to the driver after its workers finished.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(bound = "L: Serialize + DeserializeOwned")]
pub struct NodeSummary<L> {
    pub node: u16,
    /// Its workers' statistics, merged.
    pub stats: NodeStats,
    /// Its workers' committed effects, merged.
    pub ledger: L,
    /// Attempts recorded by its co-routines, when the history stays in memory.
    #[serde(with = "atoll_history::records")]
    pub history: Vec<TxnRecord>,
    /// When its first worker saw a stop request, if any did.
    pub stopped_ns: Option<u64>,
    /// When its last co-routine found the workload's source drained, if any did (a
    /// library session closed).
    #[serde(default)]
    pub drained_ns: Option<u64>,
    /// `(node, transaction)`: an op to `node` failed after the transaction's log was written.
    pub failed_after_log: Option<(u16, u64)>,
    /// RPCs its CPUs served over the whole run, where its fabric reports them to it (a
    /// node process); `None` where the driver has them from the fabric itself.
    #[serde(default)]
    pub rpcs_served: Option<u64>,
    /// Its counts of old versions, indexed by [`atoll_txn::versions::VersionEvent`], over
    /// the whole run.
    #[serde(default)]
    pub versions: [u64; atoll_txn::versions::VersionEvent::COUNT],
    /// Bytes each of its tables took from the budget (records, index, heap), by table.
    #[serde(default)]
    pub table_bytes: Vec<u64>,
    /// Its budget: what it held at the end, its limit, and the first growth it refused.
    #[serde(default)]
    pub budget_used_bytes: u64,
    #[serde(default)]
    pub budget_limit_bytes: u64,
    #[serde(default)]
    pub budget_refusal: Option<String>,
    /// Its own commit log's records, writes and first error, whole run (`--instance-log`).
    #[serde(default)]
    pub own_log: Option<(u64, u64, Option<String>)>,
}

/// A node's checks of its own records against the merged ledger.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(bound = "C: Serialize + DeserializeOwned")]
pub struct NodeChecks<C> {
    pub node: u16,
    pub storage: StorageCheck,
    pub workload: C,
    /// Its replicas against the partitions' primaries, when the run replicates partitions.
    #[serde(default)]
    pub replicas: Option<ReplicaCheck>,
}

impl<W: Workload> NodeRuntime<W> {
    /// Registers the node's memory as the catalog lays it out and loads its partition (a
    /// node holding no records registers empty table regions and loads nothing).
    pub fn load(
        node: NodeId,
        catalog: Arc<Catalog>,
        budget: Arc<MemoryBudget>,
        family: Arc<dyn atoll_txn::FamilyConfig>,
        w: &W,
    ) -> Result<Self, RunError> {
        let mem = Arc::new(NodeMemory::new(node, &catalog.region_words_of(node)));
        Self::load_into(node, catalog, budget, family, w, mem)
    }

    /// As [`NodeRuntime::load`], into memory a backend allocated (zeroed, laid out as
    /// `catalog.region_words_of(node)` says).
    pub fn load_into(
        node: NodeId,
        catalog: Arc<Catalog>,
        budget: Arc<MemoryBudget>,
        family: Arc<dyn atoll_txn::FamilyConfig>,
        w: &W,
        mem: Arc<NodeMemory>,
    ) -> Result<Self, RunError> {
        let sizes: Vec<usize> = (0..mem.region_count())
            .map(|r| mem.region(atoll_fabric::RegionId(r as u16)).len_words())
            .collect();
        assert_eq!(
            sizes,
            catalog.region_words_of(node),
            "node {}: memory laid out otherwise than the catalog says",
            node.0
        );
        let holds_records = catalog.topology().holds_records(node);
        let load_error = |e: &dyn std::fmt::Display| RunError::Load {
            node,
            message: e.to_string(),
        };
        let store = Store::with_budget(catalog, mem, budget).map_err(|e| load_error(&e))?;
        if holds_records {
            w.load(&store).map_err(|e| RunError::Load {
                node,
                message: e.to_string(),
            })?;
        }
        // What the family keeps beside the records (Tell's B+trees), before any run.
        family
            .after_load(&store)
            .map_err(|message| RunError::Load { node, message })?;
        Ok(NodeRuntime {
            node,
            store: Arc::new(store),
            handed_over: Mutex::new(HandedOver {
                stats: Vec::new(),
                history: Vec::new(),
                ledgers: Vec::new(),
            }),
            stopped_ns: AtomicU64::new(u64::MAX),
            drained_ns: AtomicU64::new(0),
            failed_after_log: Mutex::new(None),
            began: AtomicBool::new(false),
            unresolved: Default::default(),
            clock: Arc::default(),
            versions: Arc::default(),
            family_nodes: Arc::default(),
            family,
            own_log: None,
            cleaner: None,
            membership: None,
            txn: None,
        })
    }

    /// Gives the node a replica of each partition it backs up when `txn` replicates
    /// partitions ([`atoll_txn::TxnConfig::log_applied`]): each loaded as its primary was
    /// (the workload's loader is a function of the partition), into the node's registered
    /// replica regions ([`atoll_storage::Catalog::with_replica_regions`]), reached only by the
    /// node's log cleaner until fail-over is built (TODO(#41)).
    pub fn with_replicas(
        mut self,
        txn: &Arc<atoll_txn::TxnConfig>,
        w: &W,
    ) -> Result<Self, RunError> {
        use atoll_txn::log_ring::{LogCleaner, Replica};
        if !txn.log_applied {
            return Ok(self);
        }
        let nodes = self.store.catalog.topology().nodes_total();
        self.membership = Some(Arc::new(atoll_txn::recovery::Membership::new(
            nodes,
            txn.coordinators_per_node,
        )));
        self.txn = Some(txn.clone());
        let topology = *self.store.catalog.topology();
        let mut replicas = Vec::new();
        let own = self.store.memory().clone();
        for (copy, p) in topology
            .replicated_by(self.node, txn.log_replicas)
            .into_iter()
            .enumerate()
        {
            let load_error = |message: String| RunError::Load {
                node: self.node,
                message: format!("its replica of partition {}: {message}", p.0),
            };
            let catalog = Arc::new(self.store.catalog.detached());
            let tables = catalog.table_count();
            // Its tables are the node's replica regions for this copy, seen from region 0
            // as a partition's store addresses them; the other regions (the log, a
            // family's, the replicas') are the node's own and stay empty here.
            let regions = (0..catalog.region_words_of(p).len())
                .map(|r| match r < tables {
                    true => atoll_fabric::Region::view_of(
                        &own,
                        catalog.replica_region(copy as u16, TableId(r as u16)),
                    ),
                    false => atoll_fabric::Region::new(0),
                })
                .collect();
            let memory = Arc::new(NodeMemory::with_regions(p, regions));
            let store = Store::with_budget(catalog, memory, self.store.budget().clone())
                .map_err(|e| load_error(e.to_string()))?;
            w.load(&store).map_err(|e| load_error(e.to_string()))?;
            // Loaded against the budget; what it grows by in the run its primary pays.
            store.charge_copies(0);
            replicas.push(Replica {
                partition: p,
                store: Arc::new(store),
            });
        }
        if topology.holds_records(self.node) {
            self.store.charge_copies(1 + txn.log_replicas as u64);
        }
        let cleaner = LogCleaner::new(txn.log_geometry(), replicas, topology.nodes_total());
        self.cleaner = Some(Arc::new(Mutex::new(cleaner)));
        Ok(self)
    }

    /// Gives the node its own commit log as `cfg` asks (`--instance-log`): the backend's
    /// model of it (`modelled`: the simulator), or a ring file in the run's directory with
    /// room for records of `record_words_max` words.
    pub fn with_own_log(
        mut self,
        cfg: &crate::config::RunConfig,
        modelled: bool,
        record_words_max: u32,
    ) -> Result<Self, RunError> {
        use atoll_txn::own_log::OwnLog;
        let Some(l) = &cfg.instance_log else {
            return Ok(self);
        };
        let log = if modelled {
            OwnLog::modelled()
        } else {
            let dir = l.dir.clone().unwrap_or_else(|| {
                let shm = std::path::PathBuf::from(crate::config::INSTANCE_LOG_DIR_DEFAULT);
                if shm.is_dir() {
                    shm
                } else {
                    std::env::temp_dir()
                }
            });
            let path = dir.join(format!(
                "atoll-{}-node{}.log",
                std::process::id(),
                self.node.0
            ));
            // Records of the largest write set four times over: a group never wraps onto
            // its own records.
            let ring = atoll_storage::instance_log::INSTANCE_LOG_RING_BYTES_DEFAULT
                .max(4 * 8 * record_words_max as u64);
            let file =
                atoll_storage::InstanceLog::create(&path, ring).map_err(|e| RunError::Load {
                    node: self.node,
                    message: e.to_string(),
                })?;
            OwnLog::with_file(file)
        };
        self.own_log = Some(Arc::new(log));
        Ok(self)
    }

    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// What the node's fabric backend serves: its memory, and a handler for the shared
    /// requests and every registered protocol family's.
    pub fn setup(&self) -> NodeSetup {
        NodeSetup {
            memory: self.store.memory().clone(),
            handler: Arc::new({
                let h = StoreHandler::new(
                    self.store.clone(),
                    self.store
                        .catalog
                        .extra_region(atoll_txn::coord::LOG_EXTRA_REGION),
                    self.participants(),
                );
                match &self.membership {
                    Some(m) => h.with_membership(m.clone()),
                    None => h,
                }
            }),
        }
    }

    /// The participants the node's handler serves: its families', and the recovery's in a
    /// run that replicates partitions.
    fn participants(&self) -> Vec<Arc<dyn atoll_txn::handler::Participant>> {
        let mut ps = atoll_protocols::participants(&self.family_nodes, &*self.family);
        if let (Some(membership), Some(cfg)) = (&self.membership, &self.txn) {
            ps.push(Arc::new(atoll_txn::recovery::RecoveryParticipant {
                membership: membership.clone(),
                cleaner: self.cleaner.clone(),
                cfg: cfg.clone(),
            }));
        }
        ps
    }

    /// A co-routine of this node begins a transaction.
    pub fn begin_txn(&self) {
        if !self.began.load(Ordering::Relaxed) {
            self.began.store(true, Ordering::Relaxed);
        }
    }

    /// Whether any co-routine of this node began a transaction.
    pub fn began_txns(&self) -> bool {
        self.began.load(Ordering::Relaxed)
    }

    /// A worker's co-routine saw a stop request at worker time `now_ns`.
    pub fn stopped_at(&self, now_ns: u64) {
        self.stopped_ns.fetch_min(now_ns, Ordering::Relaxed);
    }

    /// A co-routine found its workload's source drained at worker time `now_ns`: the run
    /// ended normally when the last did, not at its configured end.
    pub fn drained_at(&self, now_ns: u64) {
        self.drained_ns.fetch_max(now_ns.max(1), Ordering::Relaxed);
    }

    /// Transaction `txn` of this node had an op fail at `node` after its log was written.
    pub fn failed_after_log(&self, node: NodeId, txn: u64) {
        self.failed_after_log
            .lock()
            .expect("no poisoned flag")
            .get_or_insert((node, txn));
    }

    /// A worker's last co-routine hands over what the worker gathered.
    pub fn hand_over(&self, stats: WorkerStats, history: &mut Vec<TxnRecord>, ledger: W::Ledger) {
        let mut h = self.handed_over.lock().expect("no poisoned hand-over");
        h.stats.push(stats);
        h.history.append(history);
        h.ledgers.push(ledger);
    }

    /// A worker whose co-routines stopped before their end (a crash) hands over its ledger
    /// (with the attempts a recovery found committed) and how many of the attempts it was
    /// committing no recovery settled.
    pub fn hand_over_stopped(
        &self,
        ledger: W::Ledger,
        history: &mut Vec<TxnRecord>,
        unresolved: usize,
    ) {
        let mut h = self.handed_over.lock().expect("no poisoned hand-over");
        h.ledgers.push(ledger);
        h.history.append(history);
        drop(h);
        self.unresolved.fetch_add(unresolved, Ordering::Relaxed);
    }

    /// Attempts of its crashed workers whose outcome no recovery settled.
    pub fn unresolved(&self) -> usize {
        self.unresolved.load(Ordering::Relaxed)
    }

    /// The node's summary, once its workers finished (takes what they handed over).
    pub fn summary(&self, w: &W) -> NodeSummary<W::Ledger> {
        let h = std::mem::replace(
            &mut *self.handed_over.lock().expect("no poisoned hand-over"),
            HandedOver {
                stats: Vec::new(),
                history: Vec::new(),
                ledgers: Vec::new(),
            },
        );
        let mut stats = NodeStats::new(w.txn_types().len());
        for s in &h.stats {
            stats.add_worker(s);
        }
        let mut ledger = W::Ledger::default();
        for l in h.ledgers {
            w.merge(&mut ledger, l);
        }
        let stopped_ns = self.stopped_ns.load(Ordering::Relaxed);
        NodeSummary {
            node: self.node.0,
            stats,
            ledger,
            history: h.history,
            stopped_ns: (stopped_ns != u64::MAX).then_some(stopped_ns),
            drained_ns: Some(self.drained_ns.load(Ordering::Relaxed)).filter(|&ns| ns > 0),
            failed_after_log: self
                .failed_after_log
                .lock()
                .expect("no poisoned flag")
                .map(|(n, t)| (n.0, t)),
            rpcs_served: None,
            versions: self.versions.get(),
            table_bytes: self.store.charged_bytes(),
            budget_used_bytes: self.store.budget().used_bytes(),
            budget_limit_bytes: self.store.budget().limit_bytes(),
            budget_refusal: self.store.budget().refusal().map(|r| r.to_string()),
            own_log: self.own_log.as_ref().map(|l| {
                let c = l.counts();
                (c.records, c.writes, l.failure())
            }),
        }
    }

    /// Checks the node's records against the whole run's committed effects; `None` on a
    /// node holding no records (compute, timestamp).
    pub fn check(&self, w: &W, ledger: &W::Ledger) -> Option<NodeChecks<W::NodeCheck>> {
        if !self.store.catalog.topology().holds_records(self.node) {
            return None;
        }
        Some(self.checks_of(&self.store, self.node, w, ledger, self.replica_check()))
    }

    /// The storage, family and workload checks of `store`'s records, reported as `node`'s.
    fn checks_of(
        &self,
        store: &Store,
        node: NodeId,
        w: &W,
        ledger: &W::Ledger,
        replicas: Option<ReplicaCheck>,
    ) -> NodeChecks<W::NodeCheck> {
        let mut storage = atoll_workloads::storage_check_node(store);
        storage.family = self
            .family
            .check_node(store)
            .into_iter()
            .map(Into::into)
            .collect();
        NodeChecks {
            node: node.0,
            storage,
            workload: w.check_node(store, ledger),
            replicas,
        }
    }

    /// The node's log region: the rings of every coordinator that logs to it.
    fn log_region(&self) -> &atoll_fabric::memory::Region {
        self.store.memory().region(
            self.store
                .catalog
                .extra_region(atoll_txn::coord::LOG_EXTRA_REGION),
        )
    }

    /// Checks dead partition `p`'s records as this node's replica holds them (its rings
    /// drained, the partition's recovery settled): what stands for the partition once its
    /// primary is gone. `None` if this node holds no replica of it.
    pub fn check_replica(
        &self,
        p: NodeId,
        w: &W,
        ledger: &W::Ledger,
    ) -> Option<NodeChecks<W::NodeCheck>> {
        let cleaner = self.cleaner.as_ref()?;
        let mut c = cleaner.lock().expect("no poisoned cleaner");
        c.drain(self.log_region());
        let store = c
            .replicas()
            .iter()
            .find(|r| r.partition == p)?
            .store
            .clone();
        drop(c);
        Some(self.checks_of(&store, p, w, ledger, None))
    }

    /// Drains the node's log rings into its replicas (every coordinator has finished) and
    /// digests them and its own partition.
    fn replica_check(&self) -> Option<ReplicaCheck> {
        use atoll_txn::log_ring::partition_digest;
        let cleaner = self.cleaner.as_ref()?;
        let mut c = cleaner.lock().expect("no poisoned cleaner");
        let log = self.log_region();
        let held_at_end = c.held_now(log);
        c.drain(log);
        let mut problems = c.problems.clone();
        problems.extend(self.replicas_outside_registered_memory(c.replicas()));
        Some(ReplicaCheck {
            primary: partition_digest(&self.store),
            copies: c
                .replicas()
                .iter()
                .map(|r| {
                    let (records, digest) = partition_digest(&r.store);
                    (r.partition.0, records, digest)
                })
                .collect(),
            applied_records: c.applied.records,
            applied_entries: c.applied.entries,
            waits: c.applied.waiting,
            decided_by_successor: c.applied.decided_by_successor,
            held_at_end,
            parked: c.applied.parked,
            problems_seen: c.problems_seen() + (problems.len() - c.problems.len()) as u64,
            problems,
        })
    }

    /// Each replica table whose words are not the node's registered replica region for it
    /// ([`atoll_storage::Catalog::with_replica_regions`]), which the fabric could not serve
    /// at fail-over.
    fn replicas_outside_registered_memory(
        &self,
        replicas: &[atoll_txn::log_ring::Replica],
    ) -> Vec<String> {
        let own = self.store.memory();
        let catalog = &self.store.catalog;
        let mut wrong = Vec::new();
        for (copy, r) in replicas.iter().enumerate() {
            for t in 0..catalog.table_count() {
                let t = TableId(t as u16);
                let registered = catalog.replica_region(copy as u16, t);
                let (held, served) = (r.store.region(t).words(), own.region(registered).words());
                if held.as_ptr() != served.as_ptr() || held.len() != served.len() {
                    wrong.push(format!(
                        "its replica of partition {} keeps table {} outside region {} of its registered memory",
                        r.partition.0,
                        catalog.spec(t).name,
                        registered.0
                    ));
                }
            }
        }
        wrong
    }
}
