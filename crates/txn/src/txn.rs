//! The transaction API for workload code, generic over the protocol chosen at start-up.

use crate::abort::Abort;
use crate::coord::{Access, Coordinator, EntryState, TxnCore};
use crate::msg::{Reply, Request};
use crate::plan::{Plan, PlanError, Stage};
use atoll_fabric::Words;
use atoll_storage::layout::VERSION_ABSENT;
use atoll_storage::TableId;
use std::marker::PhantomData;

/// Whether protocol `P` can run `plan`: no RPC on a stage it does not use, and its own rules.
/// Every run validates its plan here once, at start-up.
pub fn check_plan<P: Protocol>(plan: &Plan) -> Result<(), PlanError> {
    plan.check_stages(P::STAGES)?;
    P::check_plan(plan)
}

/// A concurrency-control protocol: how records are fetched and how a transaction commits.
/// One implementation per file in `atoll-protocols`; each stage's primitive comes from the
/// run-time [`Plan`].
#[allow(async_fn_in_trait)]
pub trait Protocol: 'static {
    /// The name users select it by.
    const NAME: &'static str;

    /// How help and docs spell it, where that is not `NAME` in capitals (`NAM-DB`).
    const TITLE: &'static str = "";

    /// Whether a retried transaction keeps its first timestamp (WAITDIE: so it ages and
    /// wins eventually) instead of taking a new one.
    const KEEP_TS_ON_RETRY: bool = false;

    /// The isolation level it guarantees (how its histories are checked).
    const ISOLATION: crate::Isolation = crate::Isolation::Serializable;

    /// Whether it can delete records (workloads that do are refused otherwise).
    const DELETES: bool = true;

    /// What its records' `LOCK` words hold.
    const LOCK_WORD: atoll_storage::layout::LockWord = atoll_storage::layout::LockWord::Owner;

    /// Whether records keep several versions (the catalog then lays out version slots).
    const MULTI_VERSION: bool = false;

    /// Where records keep their older versions' headers (with `MULTI_VERSION`).
    const OLD_VERSIONS: atoll_storage::layout::OldVersions =
        atoll_storage::layout::OldVersions::Inline;

    /// The family's per-record coordinator state, kept in each entry (`()` for none).
    type EntryState: EntryState;

    /// The stages whose primitive changes what this protocol does (the others are ignored),
    /// so plan enumeration varies only these: common ones and its own.
    const STAGES: &'static [Stage];

    /// The stages the family declares of its own ([`Stage::family`]), beside the common
    /// ones: plans name them, and reports break latency down by them.
    const FAMILY_STAGES: &'static [Stage] = &[];

    /// Those of its own stages whose requests always go to a CPU (Tell's commit manager,
    /// a process of its own in the paper): reports break latency down by them, but no plan
    /// chooses their primitive, so they are not among `STAGES`.
    const CPU_STAGES: &'static [Stage] = &[];

    /// The aborts its conflicts end in under contention (a lock held, a validation that
    /// failed, ...): what the test matrix requires a contended run of it to count.
    const CONFLICT_ABORTS: &'static [Abort] = &[Abort::LockBusy];

    /// The knobs the family declares (set as `--NAME` flags and TOML keys); a knob several
    /// families share is declared by each, from one constant.
    const KNOBS: &'static [crate::KnobSpec] = &[];

    /// The node roles the family declares beyond memory and compute (RSI's timestamp
    /// service): each is placed by a `--NAME-node memory|own` setting, and the family finds
    /// its node with [`atoll_storage::Topology::service_node`]. A role several families
    /// share is declared by each, from one constant.
    const ROLES: &'static [atoll_storage::RoleSpec] = &[];

    /// The family's configuration from its resolved knobs, built once at start-up; refuses
    /// knobs that do not go together.
    fn configure(
        _knobs: &crate::Knobs,
    ) -> Result<std::sync::Arc<dyn crate::FamilyConfig>, crate::knobs::KnobError> {
        Ok(std::sync::Arc::new(crate::knobs::NoKnobs))
    }

    /// Rejects plans this protocol cannot run, with the reason (its own rules; callers use
    /// [`check_plan`], which also refuses RPC on a stage outside `STAGES`).
    fn check_plan(plan: &Plan) -> Result<(), PlanError>;

    /// Fetches entries `idxs` (not yet fetched) for their access mode.
    async fn fetch(tx: &mut TxnCore<'_, Self::EntryState>, idxs: &[usize]) -> Result<(), Abort>;

    /// Runs the commit pipeline. On `Err` every lock the attempt held has been released.
    async fn commit(tx: &mut TxnCore<'_, Self::EntryState>) -> Result<(), Abort>;

    /// Releases whatever the attempt holds, after an abort during execution.
    async fn rollback(tx: &mut TxnCore<'_, Self::EntryState>);

    /// Whether a range scan reports the attempt's snapshot rather than the records' newest
    /// versions ([`Protocol::scan_visible`]): Tell, whose slots hold the versions of
    /// writers still in flight, and whose snapshot may see a record the newest version
    /// deletes.
    const SCANS_SNAPSHOT: bool = false;

    /// The version the attempt's snapshot sees of each record a scan met on `node`
    /// (`keys`: key, slot, newest version word, as the node's ordered index reports them):
    /// its version word (with `VERSION_ABSENT` for a deletion), or `None` for a record the
    /// snapshot does not see at all. Called only with [`Protocol::SCANS_SNAPSHOT`].
    async fn scan_visible(
        _tx: &mut TxnCore<'_, Self::EntryState>,
        _t: TableId,
        _node: atoll_fabric::NodeId,
        keys: &[(u64, u32, u64)],
    ) -> Result<Vec<Option<u64>>, Abort> {
        Ok(keys.iter().map(|k| Some(k.2)).collect())
    }

    /// Whether its log record is exactly what its write-back installs (each written key's
    /// next version and payload, through [`crate::stages::log_and_apply`]), so a partition's
    /// backups keep a replica by applying it ([`crate::log_ring`]): NOWAIT, WAITDIE, OCC,
    /// MVCC and SUNDIAL. The snapshot-isolation family installs its versions its own way.
    const LOGS_ITS_INSTALLS: bool = false;

    /// A deliberately broken recovery of a crashed node of a replicated partitioned run
    /// ([`crate::recovery`]), which the checks must catch: tests' protocols ask for one.
    fn recovery_defect() -> Option<crate::recovery::Defect> {
        None
    }

    /// Whether the family recovers a crashed compute node itself (its memory task finds it
    /// dead and resolves its transactions from a log): a run whose compute node crashed is
    /// then judged, its lost attempts settled by the [`Recovered`] reports.
    const RECOVERS_COMPUTE_NODES: bool = false;

    /// Why this run cannot recover a crashed compute node (a plan or setting it cannot
    /// recover from), for a configuration with a crash to refuse up front.
    fn recovery_refusal(_plan: &Plan, _log_replicas: u16) -> Option<String> {
        None
    }

    /// Whether every compute node runs [`Protocol::node_task`] beside its coordinators.
    fn node_task_wanted(_cfg: &crate::TxnConfig) -> bool {
        false
    }

    /// A compute node's background task (NAM-DB's detached fetcher), on the node's first
    /// worker, until `task.over` says the run is over.
    async fn node_task(_task: NodeTask) {}

    /// Whether `node`, which runs no coordinator (a memory node, or a node of a service
    /// role), runs [`Protocol::memory_task`] (on its first worker).
    fn memory_task_wanted(_catalog: &atoll_storage::Catalog, _node: atoll_fabric::NodeId) -> bool {
        false
    }

    /// The background task of a node that runs no coordinator (NAM-DB's version mover,
    /// Tell's management role and commit managers' syncs), until `task.over` says the run
    /// is over.
    async fn memory_task(_task: NodeTask) {}

    /// A deterministic protocol ([`crate::sequenced`]): the runner runs sequenced lanes
    /// through the four `seq_` hooks instead of attempts that may abort.
    const SEQUENCED: bool = false;

    /// How its lanes collect an epoch, from the family's configuration.
    fn seq_shape(_cfg: &crate::TxnConfig) -> crate::SeqShape {
        unreachable!("{} is not a sequenced protocol", Self::NAME)
    }

    /// Sends lane `batch.lane`'s requests of epoch `batch.epoch` to every node.
    async fn seq_dispatch(
        _c: &mut crate::Coordinator,
        _batch: crate::SeqBatch,
    ) -> Result<(), Abort> {
        unreachable!("{} is not a sequenced protocol", Self::NAME)
    }

    /// The next transaction of `epoch` this node executes, once it may run (its locks
    /// granted, what it reads gathered); `None` when none is left for this lane.
    async fn seq_next(
        _c: &mut crate::Coordinator,
        _epoch: u64,
    ) -> Result<Option<crate::SeqTxn>, Abort> {
        unreachable!("{} is not a sequenced protocol", Self::NAME)
    }

    /// The transaction `seq_next` gave ended on this node (executed and applied): what it
    /// holds here is released.
    async fn seq_finish(_c: &mut crate::Coordinator, _t: &crate::SeqTxn) -> Result<(), Abort> {
        unreachable!("{} is not a sequenced protocol", Self::NAME)
    }

    /// Waits until every node finished `epoch`; `false` when it was the run's last.
    async fn seq_barrier(_c: &mut crate::Coordinator, _epoch: u64) -> Result<bool, Abort> {
        unreachable!("{} is not a sequenced protocol", Self::NAME)
    }
}

/// What a node's background task ([`Protocol::node_task`], [`Protocol::memory_task`])
/// works with.
pub struct NodeTask {
    pub ep: atoll_fabric::Endpoint,
    pub catalog: std::sync::Arc<atoll_storage::Catalog>,
    pub cfg: std::sync::Arc<crate::TxnConfig>,
    /// What the node's coordinators share with it.
    pub clock: std::sync::Arc<crate::tsvc::NodeClock>,
    /// The node's counters of old versions (the version mover's).
    pub versions: std::sync::Arc<crate::versions::VersionCounters>,
    /// Whether the run is over at worker time `now_ns`: the task ends then.
    pub over: std::rc::Rc<dyn Fn(u64) -> bool>,
    /// Record slots of a table this node handed out so far (`Store::used_slots`): a task
    /// that walks a table's records stops there, not at its reservation.
    pub used_slots: Box<dyn Fn(atoll_storage::TableId) -> u32>,
    /// Where a family's recovery of a crashed compute node reports (the run's, shared).
    pub recovered: std::sync::Arc<std::sync::Mutex<Vec<Recovered>>>,
    /// The node's families' node-wide state (the participant side's, shared).
    pub family_nodes: std::sync::Arc<crate::FamilyNodes>,
}

/// A family's recovery of one crashed compute node ([`Protocol::RECOVERS_COMPUTE_NODES`]),
/// as its background task reports it: what the driver checks the run by, and how it learns
/// the outcome of the attempts the node's clients never heard back from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    pub node: atoll_fabric::NodeId,
    /// When a probe found it dead, and when its recovery ended (worker time, ns).
    pub detected_ns: u64,
    pub done_ns: u64,
    /// When the commit manager's base first lay past every tid of the node (`None`: not
    /// by the run's end, a live node's older tid holding it).
    pub settled_ns: Option<u64>,
    /// Per coordinator of the node, its last logged attempt: `(coordinator, Some((tag,
    /// committed)))`, or `None` if its log held no entry (it never logged, or the crash
    /// tore the entry). An attempt under way that is not its last logged one wrote nothing.
    pub attempts: Vec<(u32, Option<(u64, bool)>)>,
    /// Its tids the recovery committed (flag set) and aborted at the commit manager.
    pub tids_committed: u32,
    pub tids_aborted: u32,
    /// Versions it took out of records.
    pub versions_removed: u64,
    /// What it found still wrong once it ended, read back from the records (a version of an
    /// aborted tid left in a record): a failed check each.
    pub problems: Vec<String>,
    /// A partitioned node's recovery ([`crate::recovery`]): the configuration that declared
    /// it dead, when every survivor held it (worker time, ns), and what the survivors did.
    /// `None`: a compute node's recovery by its family.
    pub partition: Option<PartitionRecovered>,
}

/// What a partitioned node's recovery did ([`Recovered::partition`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartitionRecovered {
    pub epoch: u64,
    pub configured_ns: u64,
    pub settled: crate::recovery::Settled,
    /// Per coordinator whose last logged attempt committed: its tag and the writes its
    /// record logged, as a history records them (what the attempt's lost record becomes).
    pub writes: Vec<(u32, u64, Vec<crate::HistOp>)>,
}

/// The records one attempt touched, by kind: what a report measures a workload's fidelity
/// from (share of remote transactions, write ratio), whatever its knobs meant to draw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Distinct records in its read and write sets.
    pub records: u32,
    /// Records read (an update counts as one read and one write).
    pub reads: u32,
    /// Records updated, inserted or deleted.
    pub writes: u32,
    /// Records that live on another node than the coordinator's (a replicated table's
    /// copy is always local).
    pub remote_records: u32,
}

/// One attempt of a transaction, as workload code sees it. Its [`TxnCore`] stays inside:
/// a workload reaches the engine only through these methods.
pub struct Txn<'c, P: Protocol> {
    core: TxnCore<'c, P::EntryState>,
    /// A sequenced transaction's clock: its arrival, the same on every node executing it.
    date_ns: Option<u64>,
    _p: PhantomData<P>,
}

impl<'c, P: Protocol> Txn<'c, P> {
    pub fn begin(c: &'c mut Coordinator) -> Self {
        Txn {
            core: TxnCore::begin(c),
            date_ns: None,
            _p: PhantomData,
        }
    }

    /// Begins the one attempt of sequenced transaction `t` on this node: with the tag and
    /// timestamp it has on every participant.
    pub fn begin_sequenced(c: &'c mut Coordinator, t: &crate::SeqTxn) -> Self {
        let mut core = TxnCore::begin(c);
        core.tag = t.tag;
        if let Some(ts) = crate::Timestamp::from_word(t.ts) {
            core.ts = ts;
        }
        Txn {
            core,
            date_ns: Some(t.arrival_ns),
            _p: PhantomData,
        }
    }

    /// Begins a retry of an attempt that had timestamp `first`: keeps it if the protocol
    /// wants (`KEEP_TS_ON_RETRY`), else takes a new one.
    pub fn retry(c: &'c mut Coordinator, first: crate::Timestamp) -> Self {
        let mut core = TxnCore::begin(c);
        core.retry = true;
        if P::KEEP_TS_ON_RETRY {
            core.ts = first;
        }
        Txn {
            core,
            date_ns: None,
            _p: PhantomData,
        }
    }

    /// The attempt's timestamp.
    pub fn ts(&self) -> crate::Timestamp {
        self.core.ts
    }

    /// The snapshot a snapshot-isolation attempt reads at, once it has taken one.
    pub fn snapshot_ts(&self) -> Option<crate::Timestamp> {
        self.core.snapshot_ts
    }

    /// The attempt's vector snapshot (NAM-DB), once it has one.
    pub fn snapshot_vector(&self) -> Option<&[u64]> {
        (!self.core.snapshot_vector.is_empty()).then_some(self.core.snapshot_vector.as_slice())
    }

    /// With a vector snapshot: the slot its commit timestamp counts in.
    pub fn commit_slot(&self) -> Option<u32> {
        self.core.commit_slot
    }

    /// The attempt's commit timestamp, once it has one (a snapshot-isolation attempt takes
    /// it at commit; `None` for protocols that order by [`Txn::ts`]).
    pub fn commit_ts(&self) -> Option<crate::Timestamp> {
        self.core.commit_ts
    }

    /// The attempt's tag, written into every payload it installs.
    pub fn tag(&self) -> u64 {
        self.core.tag
    }

    /// The transaction's clock, in ns: the coordinator's, or for a sequenced transaction its
    /// arrival, so that every node executing it writes the same dates, and a replay too.
    pub fn now_ns(&self) -> u64 {
        self.date_ns.unwrap_or_else(|| self.core.now_ns())
    }

    /// Reads of payloads that failed their check word (torn, or another record's).
    /// The first op that failed after this attempt's log was written: its outcome needs
    /// recovery, so the driver stops the run naming the node.
    pub fn failed_after_log(&self) -> Option<atoll_fabric::OpError> {
        self.core.failed_after_log
    }

    pub fn torn_reads(&self) -> usize {
        self.core.torn_reads()
    }

    /// What this attempt read and installed, for the history.
    pub fn history_ops(&self) -> Vec<crate::HistOp> {
        self.core.history_ops()
    }

    /// The records this attempt has touched so far, each with how (read, update, insert,
    /// delete), in first-touch order.
    pub fn accesses(&self) -> Vec<(TableId, u64, Access)> {
        self.core
            .entries
            .iter()
            .map(|e| (e.table, e.key, e.access))
            .collect()
    }

    /// What this attempt has touched so far, counted (the report's workload fidelity, issue
    /// 10): read after the commit, it is what a committed transaction actually did.
    pub fn footprint(&self) -> Footprint {
        let home = self.core.c.node();
        let mut f = Footprint::default();
        for e in &self.core.entries {
            f.records += 1;
            // An update is a read and a write; an insert or a delete only a write.
            f.reads += matches!(e.access, Access::Read | Access::Update) as u32;
            f.writes += (e.access != Access::Read) as u32;
            f.remote_records += (e.node != home) as u32;
        }
        f
    }

    /// Spends `ns` of the coordinator's CPU (think time, RCC's execution phase); other
    /// co-routines run meanwhile.
    pub async fn compute(&mut self, ns: u64) {
        self.core.c.ep.compute(ns).await
    }

    fn entry(&mut self, t: TableId, key: u64, access: Access) -> usize {
        match self.core.find(t, key) {
            Some(i) => {
                let e = &mut self.core.entries[i];
                if access != Access::Read && e.access == Access::Read {
                    e.access = access;
                }
                i
            }
            None => self.core.add(t, key, access),
        }
    }

    /// Fetches entry `i` if needed and returns the workload's words of its payload (what
    /// this transaction wrote, if it wrote it).
    async fn fetch_one(&mut self, i: usize) -> Result<Words, Abort> {
        self.ensure_fetched(i).await?;
        Ok(Words::from_slice(self.core.entries[i].user_words()))
    }

    /// Fetches entry `i` unless this attempt has read or written it already.
    async fn ensure_fetched(&mut self, i: usize) -> Result<(), Abort> {
        if !self.core.entries[i].fetched && !self.core.entries[i].dirty {
            if self.core.touches_dead([i]) {
                return Err(Abort::NodeFailed);
            }
            P::fetch(&mut self.core, &[i]).await?;
        }
        Ok(())
    }

    /// Entry `i` of a record this transaction will write (replicated tables are read-only).
    fn entry_for_update(&mut self, t: TableId, key: u64) -> usize {
        assert!(
            !self.core.c.catalog.is_replicated(t),
            "table {} is replicated and read-only",
            t.0
        );
        self.entry(t, key, Access::Update)
    }

    /// Reads a record.
    pub async fn read(&mut self, t: TableId, key: u64) -> Result<Words, Abort> {
        let i = self.entry(t, key, Access::Read);
        self.fetch_one(i).await
    }

    /// Reads a record that this transaction will write.
    pub async fn read_for_update(&mut self, t: TableId, key: u64) -> Result<Words, Abort> {
        let i = self.entry_for_update(t, key);
        self.fetch_one(i).await
    }

    /// Reads a record this transaction will write and changes its workload words where
    /// they lie (`change` gets them as read, or as this attempt last wrote them), sealed as
    /// this attempt's write: the record is not copied out and back, as a
    /// [`Self::read_for_update`] then [`Self::write`] copies it.
    pub async fn update(
        &mut self,
        t: TableId,
        key: u64,
        change: impl FnOnce(&mut [u64]),
    ) -> Result<(), Abort> {
        let i = self.entry_for_update(t, key);
        self.ensure_fetched(i).await?;
        let tag = self.core.tag;
        let words = self.core.c.catalog.spec(t).payload_words as usize;
        let e = &mut self.core.entries[i];
        assert_eq!(
            e.user_words().len(),
            words,
            "table {}, key {key}: updating a payload of {} words, expected {words}",
            t.0,
            e.user_words().len()
        );
        change(&mut e.data[atoll_storage::layout::ENGINE_PAYLOAD_WORDS as usize..]);
        atoll_storage::layout::reseal(t, key, tag, &mut e.data);
        e.dirty = true;
        Ok(())
    }

    /// Fetches several records in one batch (one doorbell per stage): `(table, key, for_update)`.
    pub async fn fetch(&mut self, accesses: &[(TableId, u64, bool)]) -> Result<(), Abort> {
        let mut idxs = crate::Idxs::new();
        for &(t, k, upd) in accesses {
            let known = self.core.entries.len();
            let i = self.entry(t, k, if upd { Access::Update } else { Access::Read });
            // An entry just added is neither fetched nor listed yet: only a repeated key
            // needs the search.
            if i >= known || (!self.core.entries[i].fetched && !idxs.contains(&i)) {
                idxs.push(i);
            }
        }
        if idxs.is_empty() {
            return Ok(());
        }
        if self.core.touches_dead(idxs.iter().copied()) {
            return Err(Abort::NodeFailed);
        }
        P::fetch(&mut self.core, &idxs).await
    }

    /// The workload's words of a fetched (or written) record.
    pub fn get(&self, t: TableId, key: u64) -> Option<&[u64]> {
        self.core
            .find(t, key)
            .filter(|&i| !self.core.entries[i].data.is_empty())
            .map(|i| self.core.entries[i].user_words())
    }

    /// Makes entry `i`'s payload the stored form of `user` words, written by this attempt
    /// (sealed in the entry's own buffer: no allocation per write).
    fn seal_into(&mut self, i: usize, user: &[u64]) {
        let e = &mut self.core.entries[i];
        let words = self.core.c.catalog.spec(e.table).payload_words as usize;
        assert_eq!(
            user.len(),
            words,
            "table {}: payload of {} words, expected {words}",
            e.table.0,
            user.len()
        );
        atoll_storage::layout::seal(e.table, e.key, self.core.tag, user, &mut e.data);
        e.dirty = true;
    }

    /// Sets the new payload of a record read for update (or a blind write, locked at commit).
    pub fn write(&mut self, t: TableId, key: u64, payload: &[u64]) {
        let i = self.entry(t, key, Access::Update);
        self.seal_into(i, payload);
    }

    /// Inserts a new record at commit.
    pub fn insert(&mut self, t: TableId, key: u64, payload: &[u64]) {
        let i = self.core.add(t, key, Access::Insert);
        self.seal_into(i, payload);
    }

    /// Deletes a record at commit.
    pub async fn delete(&mut self, t: TableId, key: u64) -> Result<(), Abort> {
        let i = self.entry(t, key, Access::Update);
        self.fetch_one(i).await?;
        self.core.entries[i].access = Access::Delete;
        Ok(())
    }

    /// Keys in `[lo, hi]` of the partition holding `lo`, up to `limit`, ascending or
    /// descending, from that node's ordered index. A scan is not protected against
    /// phantoms by the protocols: a workload that needs it reads a record every insert and
    /// delete into the range writes (as TPC-C's district row). The scan is recorded for the
    /// history checker, which does check phantoms.
    pub async fn scan(
        &mut self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<u64>, Abort> {
        if P::SCANS_SNAPSHOT {
            return self.scan_snapshot(t, lo, hi, limit, reverse).await;
        }
        let node = self.core.c.catalog.home(t, lo, self.core.c.node());
        if self.core.node_dead(node) {
            return Err(Abort::NodeFailed);
        }
        let ks = self.scan_keys(node, t, lo, hi, limit, reverse).await?;
        let live = |v: u64| v & VERSION_ABSENT == 0;
        let full = ks.iter().filter(|k| live(k.2)).count() as u32 >= limit;
        // A scan cut off at its limit covered the range up to its last key.
        let last = ks.last().map(|k| k.0);
        let (covered_lo, covered_hi) = match (full, reverse, last) {
            (true, false, Some(k)) => (lo, k),
            (true, true, Some(k)) => (k, hi),
            _ => (lo, hi),
        };
        self.core.scans.push(crate::coord::ScanObs {
            table: t,
            lo: covered_lo,
            hi: covered_hi,
            seen: ks.iter().map(|&(k, _, v)| (k, v)).collect(),
        });
        Ok(ks
            .into_iter()
            .filter(|k| live(k.2))
            .map(|(k, _, _)| k)
            .collect())
    }

    /// One scan request to `node`'s ordered index: the keys it met in `[lo, hi]` (up to
    /// `limit` live ones), each `(key, slot, newest version word)`.
    async fn scan_keys(
        &mut self,
        node: atoll_fabric::NodeId,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<(u64, u32, u64)>, Abort> {
        let req = Request::Scan {
            table: t,
            lo,
            hi,
            limit,
            reverse,
        };
        let reply = self
            .core
            .c
            .ep
            .rpc(node, req.to_bytes())
            .await
            .map_err(|e| self.core.op_failed(e))?;
        match Reply::decode(&reply) {
            Ok(Reply::Keys(ks)) => Ok(ks),
            other => panic!("scan: unexpected reply {other:?}"),
        }
    }

    /// [`Txn::scan`] for a protocol whose scans report its snapshot
    /// ([`Protocol::SCANS_SNAPSHOT`]): the node's keys in chunks of `limit` newest-live ones,
    /// each chunk's versions as the snapshot sees them, until `limit` keys are live in the
    /// snapshot or the range is done (at most one chunk per key in the range).
    async fn scan_snapshot(
        &mut self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<u64>, Abort> {
        let node = self.core.c.catalog.home(t, lo, self.core.c.node());
        let live = |v: u64| v & VERSION_ABSENT == 0;
        let (mut from, mut to) = (lo, hi);
        let mut seen = Vec::new();
        let mut out = Vec::new();
        // Bounded: every chunk that goes on moves `from` or `to` past a key it met.
        loop {
            let ks = self.scan_keys(node, t, from, to, limit, reverse).await?;
            let cut = ks.iter().filter(|k| live(k.2)).count() as u32 >= limit;
            let vs = P::scan_visible(&mut self.core, t, node, &ks).await?;
            for (&(k, _, _), v) in ks.iter().zip(vs) {
                let Some(v) = v else {
                    // Not in the snapshot: a key inserted since.
                    continue;
                };
                seen.push((k, v));
                if live(v) {
                    out.push(k);
                    if out.len() as u32 >= limit {
                        break;
                    }
                }
            }
            let last = ks.last().map(|k| k.0);
            let done = out.len() as u32 >= limit || !cut;
            match last {
                Some(k) if !done && !reverse && k < to => from = k + 1,
                Some(k) if !done && reverse && k > from => to = k - 1,
                _ => break,
            }
        }
        // A scan that found `limit` keys covered the range up to its last.
        let (covered_lo, covered_hi) = match (out.len() as u32 >= limit, out.last()) {
            (true, Some(&k)) if reverse => (k, hi),
            (true, Some(&k)) => (lo, k),
            _ => (lo, hi),
        };
        self.core.scans.push(crate::coord::ScanObs {
            table: t,
            lo: covered_lo,
            hi: covered_hi,
            seen,
        });
        Ok(out)
    }

    /// Commits; on `Err` the attempt's locks are released.
    pub async fn commit(&mut self) -> Result<[u64; crate::Stage::COUNT], Abort> {
        // Blind writes and inserts were never fetched: one on a dead node aborts here.
        if self.core.touches_dead(0..self.core.entries.len()) {
            P::rollback(&mut self.core).await;
            return Err(Abort::NodeFailed);
        }
        P::commit(&mut self.core).await?;
        Ok(self.core.stage_ns)
    }

    /// Ends the attempt (after its commit or rollback), handing its buffers back to the
    /// coordinator for the next one.
    pub fn end(self) {
        self.core.end()
    }

    /// Gives up the attempt, releasing what it holds.
    pub async fn rollback(&mut self) {
        P::rollback(&mut self.core).await
    }
}
