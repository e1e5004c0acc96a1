//! The coordinator side of a transaction: a co-routine's long-lived context
//! ([`Coordinator`]) and one attempt's read and write sets ([`TxnCore`]).

use crate::msg::Loc;
use crate::plan::{Plan, Stage};
use crate::ts::{Timestamp, TsGen, TsSource, TxnTimestamps};
use atoll_fabric::memory::Region;
use atoll_fabric::{Completions, Endpoint, NodeId, OpError, RemotePtr};
use atoll_storage::layout::{
    hash_key, payload_intact_hashed, ENGINE_PAYLOAD_WORDS, LOADER_TAG, P_TAG, VERSION_ABSENT,
};
use atoll_storage::{Catalog, TableId};
use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

/// Settings of the transaction layer, shared by every coordinator of a run.
#[derive(Clone, Debug)]
pub struct TxnConfig {
    pub plan: Plan,
    /// Backups each committing coordinator logs its writes to (RCC's coordinator log).
    pub log_replicas: u16,
    /// Words of each coordinator's log ring on each backup: its record slots
    /// ([`crate::log_ring::LOG_RING_RECORDS`] records of the largest write set each), after
    /// the ring's head word.
    pub log_ring_words: u32,
    /// The backups apply their rings to replicas of the partitions they back up (partitioned,
    /// with backups): a coordinator logs to every backup of every partition it writes, and
    /// waits for room in a ring its backup has not applied yet. Otherwise (shared-data) a
    /// coordinator logs to its own backups and a ring wraps over its oldest records.
    pub log_applied: bool,
    /// Each node keeps its own commit log, which a committing writer's record reaches
    /// before the backups' ([`crate::own_log`]).
    pub instance_log: bool,
    /// Co-routines in the cluster.
    pub coordinators_total: u32,
    /// Co-routines on each compute node: a backup holds one log ring per co-routine of each
    /// compute node it backs up.
    pub coordinators_per_node: u32,
    /// Ring slots (a compute node's rings each) every backup holds
    /// ([`atoll_storage::Topology::log_slots`]).
    pub log_slots: u32,
    /// Remote record locations a coordinator caches before it starts over.
    pub loc_cache_entries_max: usize,
    /// The protocol family's own configuration, from its knobs
    /// ([`crate::Protocol::configure`]); the family reads it with [`TxnConfig::family_as`].
    pub family: Arc<dyn crate::knobs::FamilyConfig>,
}

impl TxnConfig {
    /// The regions every node registers after its tables', in the catalog's extra-region
    /// order: the log ([`LOG_EXTRA_REGION`]), then the family's own
    /// ([`crate::knobs::FamilyConfig::regions`]). Those the tables size come after, on
    /// nodes holding records only ([`atoll_storage::Catalog::with_table_regions`]).
    pub fn extra_regions(&self) -> Vec<atoll_storage::ExtraRegion> {
        let log = atoll_storage::ExtraRegion {
            name: crate::regions::LOG_REGION,
            words: self.log_region_words(),
        };
        std::iter::once(log)
            .chain(self.family.regions(&self.shape()))
            .collect()
    }

    /// The cluster as a family sizes its regions for.
    pub fn shape(&self) -> crate::knobs::ClusterShape {
        crate::knobs::ClusterShape {
            coordinators_total: self.coordinators_total,
            coordinators_per_node: self.coordinators_per_node,
            compute_nodes: self.compute_nodes(),
            plan: self.plan,
        }
    }

    /// Compute nodes in the cluster (coordinators are spread evenly over them).
    pub fn compute_nodes(&self) -> u32 {
        self.coordinators_total / self.coordinators_per_node.max(1)
    }

    /// The family's configuration as its own type `C`. The run configured the family whose
    /// code reads it, so another type is a wiring bug.
    #[inline]
    pub fn family_as<C: crate::knobs::FamilyConfig>(&self) -> &C {
        let family: &dyn crate::knobs::FamilyConfig = &*self.family;
        let own = family.as_any().downcast_ref::<C>();
        own.or_else(|| {
            family
                .member(std::any::TypeId::of::<C>())
                .and_then(|m| m.downcast_ref::<C>())
        })
        .unwrap_or_else(|| {
            panic!(
                "the run's family configuration is {:?}, not a {}",
                self.family,
                std::any::type_name::<C>()
            )
        })
    }

    /// Where the rings lie in every node's log region.
    pub fn log_geometry(&self) -> crate::log_ring::RingGeometry {
        crate::log_ring::RingGeometry {
            ring_words: self.log_ring_words,
            rings: self.log_slots * self.coordinators_per_node,
        }
    }

    /// Words of the log region each node registers.
    pub fn log_region_words(&self) -> usize {
        self.log_geometry().region_words()
    }

    /// Where, in a backup's log region, the ring of coordinator `id` starts (its head word)
    /// when its compute node's rings take `slot` there ([`atoll_storage::Topology::log_backup`];
    /// partitioned, the compute node's index).
    pub fn log_ring_offset(&self, id: u32, slot: u32) -> u32 {
        debug_assert!(
            slot < self.log_slots,
            "log slot {slot} of {}",
            self.log_slots
        );
        (slot * self.coordinators_per_node + id % self.coordinators_per_node)
            * self.log_geometry().stride()
    }
}

pub use crate::regions::LOG_EXTRA_REGION;

/// A fast hasher for the location cache: keys are already well mixed by `hash_key`.
#[derive(Default)]
pub struct LocHasher(u64);

impl Hasher for LocHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7C_C1_B7_27_22_0A_95);
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64)
    }
}

/// A co-routine's coordinator: its fabric endpoint, timestamps, caches and log position.
pub struct Coordinator {
    pub ep: Endpoint,
    pub catalog: Arc<Catalog>,
    pub cfg: Arc<TxnConfig>,
    /// Cluster-wide index of this co-routine (its log ring and timestamp id).
    pub id: u32,
    /// Where attempts take their timestamps from.
    ts: Box<dyn TsSource>,
    loc_cache: HashMap<(TableId, NodeId, u64), Loc, BuildHasherDefault<LocHasher>>,
    /// The number of this coordinator's next record in its ring on each node (by node).
    pub(crate) log_seq: Vec<u64>,
    /// Records of its ring each node had applied when it last looked ([`TxnConfig::log_applied`]).
    pub(crate) log_applied: Vec<u64>,
    /// Attempts begun so far: the low bits of the next attempt's tag.
    attempts_begun: u64,
    /// Sequenced requests this coordinator dispatched ([`Coordinator::next_sequenced_tag`]).
    sequenced_tags: u64,
    /// The most entries an attempt of this coordinator has held (up to
    /// [`ENTRIES_RESERVED_MAX`]): the next attempt reserves that many at once instead of
    /// growing its set by reallocation (issue #9).
    entries_seen_max: usize,
    /// The entry vector of the last attempt, emptied, and its entries' family states, for
    /// the next attempt to reuse (issue #9: no allocation per attempt). Their type is the
    /// family's [`Spare<S>`], which a coordinator does not name, hence `Any`.
    spare_entries: Option<Box<dyn Any>>,
    /// Emptied payload buffers of ended attempts' entries, handed to new entries, so a read
    /// or a write allocates nothing once a coordinator has run a while. At most
    /// [`ENTRIES_RESERVED_MAX`].
    spare_words: Vec<Vec<u64>>,
    /// An op a protocol left to go out with this coordinator's next doorbell (RSI's outcome
    /// to the timestamp service, "sent unsignaled"): it takes no round trip of its own, and
    /// [`Coordinator::flush_deferred`] sends it when the coordinator stops.
    deferred: Option<Deferred>,
    /// The commit timestamp of this coordinator's last committed attempt (0: none yet), for
    /// protocols whose next snapshot must include it (a client reads its own writes).
    pub last_commit_ts: u64,
    /// A read timestamp fetched in the last commit's final doorbell, for the next attempt's
    /// snapshot (RSI: so an update transaction takes no round trip of its own for it).
    pub next_snapshot: Option<u64>,
    /// What the coordinators of this compute node share of NAM-DB's timestamp vector (the
    /// runner hands every coordinator of a node the same one; a coordinator alone has its
    /// own).
    pub node_clock: Arc<crate::tsvc::NodeClock>,
    /// The node's counters of old versions read outside the record (the runner hands every
    /// coordinator of a node the same one).
    pub versions: Arc<crate::versions::VersionCounters>,
    /// The node's own commit log, when the run keeps one ([`TxnConfig::instance_log`]; the
    /// runner hands every coordinator of a node the same one).
    pub own_log: Option<Arc<crate::own_log::OwnLog>>,
    /// The families' node-wide state on this coordinator's node, shared with the node's
    /// participant side (the runner hands every coordinator of a node the same one).
    pub family_nodes: Arc<crate::sequenced::FamilyNodes>,
    /// A family's state of the transaction this coordinator runs now, beside its attempt
    /// (CALVIN's gathered values for its `fetch`).
    pub family_ctx: Option<Box<dyn Any>>,
    /// The node's view of the configuration, in a run that recovers crashed nodes
    /// ([`crate::recovery`]): a dead node gets no log record.
    pub membership: Option<Arc<crate::recovery::Membership>>,
}

/// An op left to ride in a coordinator's next doorbell ([`Coordinator::defer`]).
#[derive(Debug)]
pub enum Deferred {
    /// One word WRITE (one-sided).
    Write(RemotePtr, u64),
    /// A request to `node`'s CPU, its reply unused.
    Rpc(NodeId, Vec<u8>),
}

impl Deferred {
    /// Posts the op in `d`, ahead of what follows it there (ops to one node execute in
    /// order, so whatever follows it to its node sees it done).
    pub fn post(self, d: &mut atoll_fabric::Doorbell<'_>) {
        match self {
            Deferred::Write(ptr, word) => {
                d.write(ptr, atoll_fabric::Words::from_slice(&[word]));
            }
            Deferred::Rpc(node, req) => {
                d.rpc(node, req);
            }
        }
    }
}

/// Bits of an attempt's tag that count the coordinator's attempts; the bits above hold the
/// coordinator's index + 1 (so no attempt's tag is [`LOADER_TAG`]). 2^40 attempts is over
/// 12 days of one co-routine at a million attempts a second.
pub const TAG_SEQ_BITS: u32 = 40;

/// The attempt bit that marks a sequenced request's tag.
pub const SEQUENCED_TAG_BIT: u64 = 1 << (TAG_SEQ_BITS - 1);

/// The tag of attempt `seq` of coordinator `coord`: unique in a run, written into the payload
/// of every record the attempt writes.
pub fn make_tag(coord: u32, seq: u64) -> u64 {
    debug_assert!(
        seq < 1 << TAG_SEQ_BITS,
        "attempt {seq} of coordinator {coord}"
    );
    ((coord as u64 + 1) << TAG_SEQ_BITS) | seq
}

/// The coordinator index of a tag ([`LOADER_TAG`] has none).
pub fn tag_coord(tag: u64) -> Option<u32> {
    (tag >> TAG_SEQ_BITS).checked_sub(1).map(|c| c as u32)
}

impl Coordinator {
    /// A coordinator whose timestamps come from the local clock ([`TsGen`]).
    pub fn new(ep: Endpoint, catalog: Arc<Catalog>, cfg: Arc<TxnConfig>, id: u32) -> Self {
        let ts = Box::new(TsGen::new(id as u64));
        Self::with_ts_source(ep, catalog, cfg, id, ts)
    }

    /// A coordinator whose timestamps come from `ts`.
    pub fn with_ts_source(
        ep: Endpoint,
        catalog: Arc<Catalog>,
        cfg: Arc<TxnConfig>,
        id: u32,
        ts: Box<dyn TsSource>,
    ) -> Self {
        assert!(
            id < cfg.coordinators_total,
            "coordinator {id} of {}",
            cfg.coordinators_total
        );
        let nodes = catalog.topology().nodes_total() as usize;
        Coordinator {
            ep,
            catalog,
            ts,
            loc_cache: HashMap::default(),
            log_seq: vec![0; nodes],
            log_applied: vec![0; nodes],
            cfg,
            id,
            attempts_begun: 0,
            sequenced_tags: 0,
            entries_seen_max: ENTRIES_TYPICAL,
            spare_entries: None,
            spare_words: Vec::new(),
            deferred: None,
            last_commit_ts: 0,
            next_snapshot: None,
            node_clock: Arc::default(),
            versions: Arc::default(),
            own_log: None,
            family_nodes: Arc::default(),
            family_ctx: None,
            membership: None,
        }
    }

    pub fn plan(&self) -> &Plan {
        &self.cfg.plan
    }

    pub fn node(&self) -> NodeId {
        self.ep.node()
    }

    pub fn now_ns(&self) -> u64 {
        self.ep.now_ns()
    }

    /// The run's timestamp service (the snapshot-isolation family's).
    pub fn ts_service(&self) -> crate::tsvc::TsService {
        crate::tsvc::TsService::of(&self.catalog)
            .expect("the run registers the timestamp service's region and places its role")
    }

    /// The run's timestamp vector (NAM-DB).
    pub fn ts_vector(&self) -> crate::tsvc::TsVector {
        crate::tsvc::TsVector::of(&self.catalog)
            .expect("the run registers the timestamp vector's region and places its role")
    }

    /// Leaves `op` to go out with this coordinator's next doorbell. One at a time: the
    /// protocol that defers takes the previous one first.
    pub fn defer(&mut self, op: Deferred) {
        assert!(
            self.deferred.is_none(),
            "coordinator {}: a deferred op {:?} is still waiting",
            self.id,
            self.deferred
        );
        self.deferred = Some(op);
    }

    /// The deferred op, taken to be posted first in a doorbell ([`Deferred::post`]).
    pub fn take_deferred(&mut self) -> Option<Deferred> {
        self.deferred.take()
    }

    /// Sends the deferred op, if any, on its own (the coordinator stops).
    pub async fn flush_deferred(&mut self) -> Result<(), OpError> {
        if let Some(op) = self.deferred.take() {
            let mut d = self.ep.doorbell_for(1);
            op.post(&mut d);
            d.submit().await?;
        }
        Ok(())
    }

    /// The tag of a new attempt.
    pub fn next_tag(&mut self) -> u64 {
        self.attempts_begun += 1;
        make_tag(self.id, self.attempts_begun)
    }

    /// The tag of a sequenced request this coordinator dispatches: its own count of them, in
    /// the upper half of the attempt bits (no other attempt of the coordinator has it). It
    /// depends only on what the lane dispatched, not on which transactions its node's lanes
    /// happened to take, so a replay of the same epochs writes the same tags.
    pub fn next_sequenced_tag(&mut self) -> u64 {
        self.sequenced_tags += 1;
        make_tag(self.id, SEQUENCED_TAG_BIT | self.sequenced_tags)
    }

    /// The timestamps of a new attempt, from this coordinator's source.
    pub fn begin_ts(&mut self) -> TxnTimestamps {
        let now = self.ep.now_ns();
        self.ts.begin(now)
    }

    /// Adjusts the timestamp source past a timestamp word found in a tuple (`RTS_FROZEN`
    /// is ignored; 0, no timestamp, changes nothing).
    pub fn observe_ts(&mut self, seen: u64) {
        if let Some(t) = Timestamp::from_word(seen & !atoll_storage::layout::RTS_FROZEN) {
            self.ts.observe(t);
        }
    }

    /// Whether `node`'s index is probed in place rather than cached: this node's, on a
    /// backend that runs local ops inline (a probe costs less than a cache insert there).
    fn probes_in_place(&self, node: NodeId) -> bool {
        node == self.node() && self.ep.local_inline()
    }

    pub(crate) fn cached_loc(&self, t: TableId, node: NodeId, key: u64) -> Option<Loc> {
        if self.probes_in_place(node) {
            return None;
        }
        self.loc_cache.get(&(t, node, key)).copied()
    }

    pub(crate) fn cache_loc(&mut self, t: TableId, node: NodeId, key: u64, loc: Loc) {
        if self.probes_in_place(node) {
            return;
        }
        if self.loc_cache.len() >= self.cfg.loc_cache_entries_max {
            self.loc_cache.clear();
        }
        self.loc_cache.insert((t, node, key), loc);
    }

    /// Drops `key`'s cached location (its record was deleted or its slot moved on).
    pub fn forget_loc(&mut self, t: TableId, node: NodeId, key: u64) {
        self.loc_cache.remove(&(t, node, key));
    }
}

/// Records a transaction of a coordinator's first attempt reserves (SmallBank touches 1-3);
/// later attempts reserve what the coordinator's largest so far held.
const ENTRIES_TYPICAL: usize = 4;

/// Bound of that reservation: a rare huge transaction (a TPC-C Delivery batch, a long scan)
/// must not make every later one reserve ~200 bytes per record it touched.
const ENTRIES_RESERVED_MAX: usize = 64;

/// How a transaction uses a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Update,
    Insert,
    Delete,
}

/// A protocol family's per-record coordinator state, kept in each [`Entry`] beside the
/// shared fields (SUNDIAL's lease, MVCC's version and record read at lock time). The shared
/// stages tell it what they saw of the record's timestamps; the family's own stages set it
/// directly. Families with none use `()`.
pub trait EntryState: Default + Clone + fmt::Debug + 'static {
    /// A lock or a participant's tuple showed the record's `WTS` and `RTS` (without
    /// `RTS_FROZEN`); for a multi-version record locked one-sided, `record` is the whole
    /// record as read.
    fn saw(&mut self, _wts: u64, _rts: u64, _record: Option<&[u64]>) {}

    /// This attempt froze the record's `RTS`, found at `rts` (without the flag).
    fn froze(&mut self, _rts: u64) {}

    /// This attempt's write-back set the record's `WTS` and `RTS` to `ts`.
    fn installed(&mut self, _ts: u64) {}

    /// Makes a state recycled from an ended attempt's entry equal to a new one. A state
    /// holding buffers clears them keeping their capacity, so a new entry allocates nothing
    /// (issue #9).
    fn reset(&mut self) {
        *self = Self::default();
    }
}

/// What an ended attempt leaves its coordinator for the next: its entry vector, emptied,
/// and its entries' family states, to be [`EntryState::reset`] when reused.
struct Spare<S> {
    entries: Vec<Entry<S>>,
    states: Vec<S>,
}

impl EntryState for () {}

/// One record of the read or write set, with its family's state `S`.
#[derive(Clone, Debug)]
pub struct Entry<S = ()> {
    pub table: TableId,
    pub key: u64,
    /// `hash_key(key)`, computed once: the index's home group and the payload check's seed.
    pub key_hash: u64,
    pub node: NodeId,
    /// Record slot on `node`, once located.
    pub loc: Option<Loc>,
    pub access: Access,
    /// The version word observed when the record was read or locked.
    pub version: u64,
    /// The stored payload: engine words (tag, check), then the workload's words.
    pub data: Vec<u64>,
    pub fetched: bool,
    pub locked: bool,
    /// `write` was called: the payload is to be installed.
    pub dirty: bool,
    /// This transaction froze the record's `RTS` when it locked it.
    pub frozen: bool,
    /// The protocol family's own state of this record.
    pub state: S,
    /// What this transaction read: the version and the payload's own tag and check.
    pub observed: Option<Observed>,
    /// The version this transaction's write installed.
    pub installed: Option<u64>,
}

impl<S> Entry<S> {
    /// The record's slot: the stages that address a record run after it is located.
    pub fn slot(&self) -> u32 {
        match self.loc {
            Some(l) => l.0,
            None => panic!(
                "{:?} key {} used before it was located",
                self.table, self.key
            ),
        }
    }

    pub fn is_write(&self) -> bool {
        self.access != Access::Read
    }

    /// Takes a fetched payload (`data`, engine words included) at `version`, and records
    /// what it holds: the writer's tag and whether the check word matches. A payload the
    /// transaction already wrote (`dirty`) is kept: a lock that re-reads the record must not
    /// undo a blind write.
    pub fn fill(&mut self, version: u64, data: &[u64]) {
        if self.dirty {
            return;
        }
        self.data.clear();
        self.data.extend_from_slice(data);
        self.observe(version);
    }

    /// [`Entry::fill`] from words as a reply read in place yields them.
    pub fn fill_words(&mut self, version: u64, data: impl ExactSizeIterator<Item = u64>) {
        if self.dirty {
            return;
        }
        self.data.clear();
        self.data.extend(data);
        self.observe(version);
    }

    /// [`Entry::fill`] with the `words` words at `offset` of an own-node `region`, loaded
    /// straight into the entry (one copy, no zero-fill first; issue #9).
    #[inline]
    pub fn fill_from_region(&mut self, version: u64, region: &Region, offset: usize, words: usize) {
        if self.dirty {
            return;
        }
        self.data.clear();
        self.data.reserve(words);
        // SAFETY: `reserve` made room for `words` words after the (now empty) start;
        // `MaybeUninit<u64>` has `u64`'s layout.
        let room = unsafe {
            std::slice::from_raw_parts_mut(
                self.data.as_mut_ptr() as *mut std::mem::MaybeUninit<u64>,
                words,
            )
        };
        region.read_into_uninit(offset, room);
        // SAFETY: `read_into_uninit` initialised all `words` (or panicked first).
        unsafe { self.data.set_len(words) };
        self.observe(version);
    }

    fn observe(&mut self, version: u64) {
        self.observed = Some(Observed {
            version: version & !VERSION_ABSENT,
            tag: self.data.get(P_TAG as usize).copied().unwrap_or(LOADER_TAG),
            intact: payload_intact_hashed(self.table, self.key_hash, &self.data),
        });
        self.fetched = true;
    }

    /// The workload's words of the payload.
    pub fn user_words(&self) -> &[u64] {
        self.data
            .get(ENGINE_PAYLOAD_WORDS as usize..)
            .unwrap_or(&[])
    }
}

/// What one read found in a record, taken from the payload it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    pub version: u64,
    /// The tag in the payload: which attempt wrote it.
    pub tag: u64,
    /// The check word matched: every word is that attempt's, for this record.
    pub intact: bool,
}

/// One attempt of a transaction: its timestamps, read and write sets (each entry with its
/// family's state `S`) and stage timings.
pub struct TxnCore<'c, S = ()> {
    pub c: &'c mut Coordinator,
    /// The attempt's timestamp: it reads at it and locks with it.
    pub ts: Timestamp,
    /// A commit timestamp its source gave at begin, or its protocol took at commit (see
    /// [`TxnTimestamps`]).
    pub commit_ts: Option<Timestamp>,
    /// The snapshot a snapshot-isolation attempt reads at, once taken (from a timestamp
    /// service, at its first read).
    pub snapshot_ts: Option<Timestamp>,
    /// A vector snapshot (NAM-DB's timestamp vector), once taken; empty before (and for
    /// protocols with scalar snapshots). `snapshot_ts` is then unused.
    pub snapshot_vector: Vec<u64>,
    /// With a vector snapshot: the slot `commit_ts` counts in.
    pub commit_slot: Option<u32>,
    /// This attempt's tag, written into every payload it installs.
    pub tag: u64,
    /// Range scans done, with the keys and versions they returned.
    pub scans: Vec<ScanObs>,
    pub entries: Vec<Entry<S>>,
    /// Nanoseconds spent per [`Stage`] in this attempt.
    pub stage_ns: [u64; Stage::COUNT],
    /// Its log record was written (or, without backups, it passed the point where it would
    /// have been): from here its outcome is decided, and an op that fails cannot abort it.
    pub logged: bool,
    /// The first op that failed after [`TxnCore::logged`]: the attempt's outcome needs
    /// recovery (not built yet), so the driver stops the run naming the node.
    pub failed_after_log: Option<OpError>,
    /// This attempt retries one of the same transaction that aborted: it met contention, so
    /// a one-sided lock stage looks at the lock words before it takes any (see
    /// [`crate::stages::lock`]).
    pub retry: bool,
    /// One bit per `(table, key)` hash of every entry added ([`key_bit`]): a key whose bit
    /// is clear has no entry, so [`TxnCore::find`] skips its linear search (issue #9: a
    /// 16-record transaction searched ~120 entries adding its keys).
    key_filter: [u64; KEY_FILTER_WORDS],
    /// Family states of ended attempts' entries, for [`TxnCore::add`] to reuse.
    spare_states: Vec<S>,
}

/// Words of [`TxnCore`]'s key filter: 256 bits keep false positives of a 16-record
/// transaction near 6%.
const KEY_FILTER_WORDS: usize = 4;

/// The filter word and bit of `(t, key)`.
#[inline]
fn key_bit(t: TableId, key: u64) -> (usize, u64) {
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    let h = (key ^ ((t.0 as u64) << 56)).wrapping_mul(MIX);
    // The top bits of the product depend on every key bit.
    let bit = (h >> (64 - 8)) as usize;
    (bit / 64 % KEY_FILTER_WORDS, 1 << (bit % 64))
}

impl<'c, S: EntryState> TxnCore<'c, S> {
    pub fn begin(c: &'c mut Coordinator) -> Self {
        let ts = c.begin_ts();
        let tag = c.next_tag();
        let Spare {
            mut entries,
            states: spare_states,
        } = c
            .spare_entries
            .as_mut()
            .and_then(|b| b.downcast_mut::<Spare<S>>())
            .map(|s| Spare {
                entries: std::mem::take(&mut s.entries),
                states: std::mem::take(&mut s.states),
            })
            .unwrap_or(Spare {
                entries: Vec::new(),
                states: Vec::new(),
            });
        entries.reserve(c.entries_seen_max);
        TxnCore {
            c,
            ts: ts.read,
            commit_ts: ts.commit,
            snapshot_ts: None,
            snapshot_vector: Vec::new(),
            commit_slot: None,
            tag,
            scans: Vec::new(),
            entries,
            stage_ns: [0; Stage::COUNT],
            logged: false,
            failed_after_log: None,
            retry: false,
            key_filter: [0; KEY_FILTER_WORDS],
            spare_states,
        }
    }

    /// The abort of an attempt whose op failed at a wait. Before the log is written the
    /// attempt simply aborts; after, its outcome is undecided, which is recorded for the
    /// driver to stop the run.
    pub fn op_failed(&mut self, e: OpError) -> crate::Abort {
        if let Some(m) = &self.c.membership {
            // An op given up may never be performed, nor a request held there answered:
            // the node is declared dead (fenced, if it only froze) rather than trusted.
            m.suspect(e.node);
        }
        if self.logged {
            self.failed_after_log.get_or_insert(e);
        }
        crate::Abort::NodeFailed
    }

    /// Whether `n` is dead in the configuration this node holds: an op to it would only
    /// fail at its timeout (or be refused), so an attempt that needs it aborts `node_failed`
    /// at once rather than hold its co-routine for a timeout per retry.
    #[inline]
    pub fn node_dead(&self, n: atoll_fabric::NodeId) -> bool {
        self.c.membership.as_ref().is_some_and(|m| m.is_dead(n))
    }

    /// Whether any of entries `idxs` lies on a node dead in this node's configuration.
    pub fn touches_dead(&self, idxs: impl IntoIterator<Item = usize>) -> bool {
        self.c
            .membership
            .as_ref()
            .is_some_and(|m| idxs.into_iter().any(|i| m.is_dead(self.entries[i].node)))
    }

    /// The results of a stage that cannot abort (write back, release), or `None` if an op
    /// failed. After the log that failure is recorded (the run stops). Before it (a release
    /// while aborting) it is ignored: the failed node's locks went with it, the other ops
    /// of the doorbell completed, and nothing of the attempt was installed.
    pub fn unabortable(&mut self, r: Result<Completions, OpError>) -> Option<Completions> {
        match r {
            Ok(c) => Some(c),
            Err(e) => {
                let _ = self.op_failed(e);
                None
            }
        }
    }

    pub fn find(&self, t: TableId, key: u64) -> Option<usize> {
        let (w, bit) = key_bit(t, key);
        if self.key_filter[w] & bit == 0 {
            debug_assert!(
                !self.entries.iter().any(|e| e.table == t && e.key == key),
                "{t:?} key {key} has an entry its filter bit does not show"
            );
            return None;
        }
        self.entries
            .iter()
            .position(|e| e.table == t && e.key == key)
    }

    /// Adds an entry (not yet fetched) and returns its index.
    pub fn add(&mut self, t: TableId, key: u64, access: Access) -> usize {
        let node = self.c.catalog.home(t, key, self.c.node());
        let loc = self.c.cached_loc(t, node, key);
        let (w, bit) = key_bit(t, key);
        self.key_filter[w] |= bit;
        self.entries.push(Entry {
            table: t,
            key,
            key_hash: hash_key(key),
            node,
            loc,
            access,
            version: 0,
            data: self.c.spare_words.pop().unwrap_or_default(),
            fetched: false,
            locked: false,
            dirty: false,
            observed: None,
            installed: None,
            frozen: false,
            state: match self.spare_states.pop() {
                Some(mut s) => {
                    s.reset();
                    s
                }
                None => S::default(),
            },
        });
        let n = self.entries.len();
        if n > self.c.entries_seen_max && n <= ENTRIES_RESERVED_MAX {
            self.c.entries_seen_max = n;
        }
        n - 1
    }

    /// Ends the attempt: its entry vector and spilled payload buffers go back to the
    /// coordinator, emptied, for its next attempt (an attempt dropped instead only costs the
    /// next one its allocations).
    pub fn end(self) {
        let TxnCore {
            c,
            mut entries,
            spare_states: mut states,
            ..
        } = self;
        for e in entries.drain(..) {
            if e.data.capacity() > 0 && c.spare_words.len() < ENTRIES_RESERVED_MAX {
                let mut data = e.data;
                data.clear();
                c.spare_words.push(data);
            }
            if states.len() < ENTRIES_RESERVED_MAX {
                states.push(e.state);
            }
        }
        // A rare huge attempt must not make the coordinator hold its vector for good.
        entries.shrink_to(ENTRIES_RESERVED_MAX);
        let spare = Spare { entries, states };
        match c
            .spare_entries
            .as_mut()
            .and_then(|b| b.downcast_mut::<Spare<S>>())
        {
            Some(s) => *s = spare,
            None => c.spare_entries = Some(Box::new(spare)),
        }
    }

    /// Charges the time since `start_ns` to `stage`.
    pub fn charge(&mut self, stage: Stage, start_ns: u64) {
        self.stage_ns[stage.index()] += self.c.now_ns().saturating_sub(start_ns);
    }

    pub fn now_ns(&self) -> u64 {
        self.c.now_ns()
    }

    /// Entry indices matching `f`.
    pub fn select(&self, f: impl Fn(&Entry<S>) -> bool) -> crate::Idxs {
        (0..self.entries.len())
            .filter(|&i| f(&self.entries[i]))
            .collect()
    }
}

pub use atoll_history::{HistOp, ScanObs, WriteKind};

impl<S> TxnCore<'_, S> {
    /// What this attempt read and installed, in entry order (reads before writes per key),
    /// then its scans.
    pub fn history_ops(&self) -> Vec<HistOp> {
        let mut ops = Vec::with_capacity(self.entries.len() * 2 + self.scans.len());
        for e in &self.entries {
            if let Some(o) = e.observed {
                ops.push(HistOp::Read {
                    table: e.table,
                    key: e.key,
                    version: o.version,
                    tag: o.tag,
                    intact: o.intact,
                });
            }
            if let Some(v) = e.installed {
                ops.push(HistOp::Write {
                    table: e.table,
                    key: e.key,
                    version: v,
                    kind: match e.access {
                        Access::Insert => WriteKind::Insert,
                        Access::Delete => WriteKind::Delete,
                        Access::Read | Access::Update => WriteKind::Update,
                    },
                });
            }
        }
        ops.extend(self.scans.iter().cloned().map(HistOp::Scan));
        ops
    }

    /// Reads this attempt made whose payload failed its check (torn, or another record's).
    pub fn torn_reads(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| e.observed.is_some_and(|o| !o.intact))
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Primitive;

    #[test]
    fn log_rings_of_every_coordinator_logging_to_a_node_are_disjoint_and_fill_its_region() {
        use atoll_storage::{Placement, Topology};
        let per_node = 6u32;
        for (topology, replicas) in [
            (Topology::partitioned(5), 3u16),
            (
                Topology::shared_data(3, 7).with_service(crate::tsvc::TS_ROLE, Placement::Own),
                2,
            ),
            (Topology::shared_data(2, 2), 2),
        ] {
            let computes = topology.compute_nodes() as u32;
            let cfg = TxnConfig {
                plan: Plan::uniform(Primitive::OneSided),
                log_replicas: replicas,
                log_ring_words: 10,
                log_applied: false,
                instance_log: false,
                coordinators_total: computes * per_node,
                coordinators_per_node: per_node,
                log_slots: topology.log_slots(replicas),
                loc_cache_entries_max: 1,
                family: Arc::new(crate::knobs::NoKnobs),
            };
            let mut rings: HashMap<u16, Vec<u32>> = HashMap::new();
            for id in 0..computes * per_node {
                let node = topology.compute_node((id / per_node) as u16);
                for b in 0..replicas {
                    let (backup, slot) = topology.log_backup(node, b);
                    rings
                        .entry(backup.0)
                        .or_default()
                        .push(cfg.log_ring_offset(id, slot));
                }
            }
            for (backup, mut rings) in rings {
                rings.sort();
                for w in rings.windows(2) {
                    assert!(
                        w[1] >= w[0] + cfg.log_geometry().stride(),
                        "{topology:?}: rings overlap on node {backup}"
                    );
                }
                let end = rings.last().unwrap() + cfg.log_geometry().stride();
                assert!(
                    end as usize <= cfg.log_region_words(),
                    "{topology:?}: a ring ends at {end}, past node {backup}'s region"
                );
            }
        }
    }
}
