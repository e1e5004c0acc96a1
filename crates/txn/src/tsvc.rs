//! The timestamp service of the snapshot-isolation family (RSI, "The End of Slow Networks"
//! §4.2): commit timestamps come from one FETCH_ADD on a counter, and the read timestamp
//! (`RTS`, what a new snapshot reads at) is advanced past every commit timestamp below which
//! all transactions finished. A coordinator reports its outcome (committed or aborted) with
//! one WRITE of its commit timestamp into a ring slot; a sequencer on the service's node
//! moves `RTS` over the ring in order. No transaction code runs there.
//!
//! Region of the service (one per node, used on [`TsService::node`] only):
//!
//! | word            | meaning                                                             |
//! |-----------------|---------------------------------------------------------------------|
//! | `W_COUNTER`     | commit timestamps handed out so far (`cts = old + CTS_FIRST`)        |
//! | `W_RTS`         | every commit timestamp ≤ it finished (0 before the first, read as    |
//! |                 | `SNAPSHOT_FIRST`); on its own cache line, apart from the counter     |
//! | `RING_AT + i`   | ring slot `i`: the last finished `cts` with `cts % ring_slots == i`  |

use atoll_fabric::{NodeId, Region, RegionId, RemotePtr};
use atoll_storage::{Catalog, RoleSpec};

/// The node role that serves the service, the vector and the floors (a family using them
/// declares it among its roles): node 0, or a node of its own (`--ts-node own`).
pub const TS_ROLE: RoleSpec = RoleSpec {
    name: "ts",
    what: "timestamp service",
    count_knob: None,
};

/// The name of the catalog's extra region that holds the service (a family using it
/// declares it among its regions).
pub const TS_SERVICE_REGION: &str = "ts_service";

/// The counter FETCH_ADDs take commit timestamps from.
pub const W_COUNTER: u32 = 0;
/// The read timestamp; a cache line (8 words) after the counter, so the sequencer's and the
/// snapshot READs' line is not the one every commit's FETCH_ADD writes.
pub const W_RTS: u32 = 8;
/// The first ring slot, a line after `W_RTS`.
pub const RING_AT: u32 = 16;
/// The snapshot before any commit finished: it sees the loaded state, whose records carry
/// commit id 0, and is never 0 (a [`crate::Timestamp`] is not).
pub const SNAPSHOT_FIRST: u64 = 1;
/// The first commit timestamp: above every snapshot that can precede it.
pub const CTS_FIRST: u64 = SNAPSHOT_FIRST + 1;
/// Ring slots per coordinator: each has at most one commit timestamp whose outcome is not
/// yet consumed, plus one reported and waiting for the sequencer; the rest is slack for a
/// coordinator that is slow to report.
pub const RING_SLOTS_PER_COORDINATOR: u32 = 4;
/// Fewest ring slots, whatever the cluster's size.
pub const RING_SLOTS_MIN: u32 = 64;

/// Where the service lives and how large its ring is, the same on every node of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsService {
    /// The node whose region serves (and whose workers run the sequencer).
    pub node: NodeId,
    /// The service's region id on every node.
    pub region: RegionId,
    /// Ring slots: a commit timestamp may be reported only while it is fewer than this
    /// above the read timestamp ([`TsService::fits_ring`]), so no slot is overwritten
    /// before the sequencer consumed it.
    pub ring_slots: u32,
}

impl TsService {
    /// The service for a cluster of `coordinators` co-routines, at `region` of `node`.
    pub fn for_coordinators(node: NodeId, region: RegionId, coordinators: u32) -> Self {
        let ring_slots = coordinators
            .saturating_mul(RING_SLOTS_PER_COORDINATOR)
            .max(RING_SLOTS_MIN)
            .next_power_of_two();
        TsService {
            node,
            region,
            ring_slots,
        }
    }

    /// The run's service: at the [`TS_ROLE`]'s node, in the catalog's region for it (its
    /// ring fills the region); `None` if the catalog has none or the run places no such role
    /// (a test's bare catalog, another family's run).
    pub fn of(catalog: &Catalog) -> Option<Self> {
        let node = catalog.topology().service_node(TS_ROLE.name)?;
        let i = catalog.extra_region_named(TS_SERVICE_REGION)?;
        let words = catalog.extra_region_words(i);
        assert!(
            words > RING_AT as usize,
            "the timestamp service's region has {words} words, at most its header"
        );
        Some(TsService {
            node,
            region: catalog.extra_region(i),
            ring_slots: (words - RING_AT as usize) as u32,
        })
    }

    /// Words of the service's region for a cluster of `coordinators` co-routines (known
    /// before the catalog numbers the regions).
    pub fn region_words_for(coordinators: u32) -> usize {
        let s = Self::for_coordinators(NodeId(0), RegionId(0), coordinators);
        RING_AT as usize + s.ring_slots as usize
    }

    pub fn counter(&self) -> RemotePtr {
        RemotePtr::new(self.node, self.region, W_COUNTER)
    }

    pub fn rts(&self) -> RemotePtr {
        RemotePtr::new(self.node, self.region, W_RTS)
    }

    /// The ring slot that reports `cts`.
    pub fn slot(&self, cts: u64) -> RemotePtr {
        RemotePtr::new(self.node, self.region, self.slot_offset(cts))
    }

    fn slot_offset(&self, cts: u64) -> u32 {
        RING_AT + (cts % self.ring_slots as u64) as u32
    }

    /// The commit timestamp a FETCH_ADD on the counter that returned `old` hands out.
    pub fn cts_of(old: u64) -> u64 {
        old + CTS_FIRST
    }

    /// The snapshot an `RTS` word read means.
    pub fn snapshot_of(rts_word: u64) -> u64 {
        rts_word.max(SNAPSHOT_FIRST)
    }

    /// Whether `cts` may be reported now that `RTS` was read as `rts_word`: its ring slot
    /// then holds no outcome the sequencer has yet to consume.
    pub fn fits_ring(&self, cts: u64, rts_word: u64) -> bool {
        cts - Self::snapshot_of(rts_word) <= self.ring_slots as u64
    }

    /// One sequencer step over the service's `region` (on its node): moves `RTS` past every
    /// commit timestamp reported in order, and returns it. Workers of the node may call it
    /// at once: `RTS` only moves by CAS, and a ring slot is only read here.
    pub fn advance(&self, region: &Region) -> u64 {
        let word = region.load(W_RTS as usize);
        let rts = Self::snapshot_of(word);
        let mut next = rts;
        // At most a ring's worth per step, so one call is bounded.
        while next - rts < self.ring_slots as u64
            && region.load(self.slot_offset(next + 1) as usize) == next + 1
        {
            next += 1;
        }
        if next == rts {
            return rts;
        }
        let seen = region.cas(W_RTS as usize, word, next);
        if seen == word {
            next
        } else {
            // Another worker advanced it first; it only moves up.
            Self::snapshot_of(seen)
        }
    }
}

impl TsService {
    /// Whether a commit timestamp handed out is still above `rts` (its outcome is awaited:
    /// the sequencer must keep polling).
    pub fn outstanding(&self, region: &Region, rts: u64) -> bool {
        let handed_out = region.load(W_COUNTER as usize);
        handed_out > 0 && Self::cts_of(handed_out - 1) > rts
    }
}

/// The name of the catalog's extra region that holds NAM-DB's timestamp vector.
pub const TS_VECTOR_REGION: &str = "ts_vector";

/// NAM-DB's timestamp vector (VLDB'17 §4; `specs/seed-mechanisms.md` §2.3): one word per
/// coordinator (its slot, which only it writes), on the timestamp node. Slot `i` holds the
/// commit timestamp of coordinator `i`'s last commit whose installs have all completed, so
/// a snapshot (a copy of the vector) sees a version committed at `(i, t)` iff `t <= V[i]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TsVector {
    pub node: NodeId,
    pub region: RegionId,
    /// Slots: every coordinator of the cluster has one.
    pub slots: u32,
}

impl TsVector {
    /// Words of the vector's region for a cluster of `coordinators` co-routines (at least
    /// one, so the region exists in every run).
    pub fn region_words_for(coordinators: u32) -> usize {
        coordinators.max(1) as usize
    }

    /// The run's vector, at the [`TS_ROLE`]'s node; `None` if the catalog registers no
    /// region for it or the run places no such role (a test's bare catalog).
    pub fn of(catalog: &Catalog) -> Option<Self> {
        let node = catalog.topology().service_node(TS_ROLE.name)?;
        let i = catalog.extra_region_named(TS_VECTOR_REGION)?;
        Some(TsVector {
            node,
            region: catalog.extra_region(i),
            slots: catalog.extra_region_words(i) as u32,
        })
    }

    /// The whole vector, for one READ of `slots` words.
    pub fn all(&self) -> RemotePtr {
        RemotePtr::new(self.node, self.region, 0)
    }

    /// Slot `slot`'s word.
    pub fn slot(&self, slot: u32) -> RemotePtr {
        assert!(
            slot < self.slots,
            "timestamp vector slot {slot} of {}",
            self.slots
        );
        RemotePtr::new(self.node, self.region, slot)
    }
}

/// The name of the catalog's extra region that holds NAM-DB's snapshot floors.
pub const TS_FLOORS_REGION: &str = "ts_floors";

/// NAM-DB's snapshot floors, on the timestamp node: a row per compute node, one word per
/// slot of the vector, that the node's publisher ([`NodeClock::oldest_snapshot`]) writes and
/// the version movers read. Row `n` is at most every snapshot node `n`'s coordinators hold
/// or will take, slot by slot (so an overflow entry whose successor every row sees is needed
/// by no snapshot: the test of the garbage collector NAM-DB runs with an overflow area). Each
/// row only grows, so a READ torn across a row's WRITE still gives, slot by slot, a bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotFloors {
    pub node: NodeId,
    pub region: RegionId,
    /// Rows: one per compute node.
    pub rows: u32,
    /// Words of a row: the vector's slots.
    pub slots: u32,
}

impl SnapshotFloors {
    /// Words of the floors' region: a row of `slots` words per compute node when the
    /// garbage collector runs, else one word (every run registers the region).
    pub fn region_words_for(gc: bool, compute_nodes: u32, slots: u32) -> usize {
        if gc {
            (compute_nodes as usize * slots as usize).max(1)
        } else {
            1
        }
    }

    /// The run's floors at the [`TS_ROLE`]'s node, `slots` words a row; `None` if the
    /// catalog registers no region large enough for one row per compute node (no garbage
    /// collector, or a test's bare catalog) or the run places no such role.
    pub fn of(catalog: &Catalog, slots: u32) -> Option<Self> {
        let node = catalog.topology().service_node(TS_ROLE.name)?;
        let i = catalog.extra_region_named(TS_FLOORS_REGION)?;
        if slots == 0 {
            return None;
        }
        let rows = catalog.topology().compute_nodes() as u32;
        let words = catalog.extra_region_words(i);
        (rows > 0 && words >= rows as usize * slots as usize).then(|| SnapshotFloors {
            node,
            region: catalog.extra_region(i),
            rows,
            slots,
        })
    }

    /// Every row, for one READ of `rows × slots` words.
    pub fn all(&self) -> RemotePtr {
        RemotePtr::new(self.node, self.region, 0)
    }

    /// Row `row`'s first word.
    pub fn row(&self, row: u32) -> RemotePtr {
        assert!(row < self.rows, "snapshot floor row {row} of {}", self.rows);
        RemotePtr::new(self.node, self.region, row * self.slots)
    }
}

/// What owns a slot of NAM-DB's timestamp vector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VectorSlots {
    /// Every coordinator its own slot (the paper's one per thread: a coordinator runs one
    /// transaction at a time, as a thread there).
    #[default]
    Coordinator,
    /// One slot per compute node, its coordinators sharing a local counter (the paper's
    /// "vector compression": a READ of the vector shrinks by the coordinators per node).
    Node,
}

impl VectorSlots {
    pub const ALL: [VectorSlots; 2] = [VectorSlots::Coordinator, VectorSlots::Node];

    pub fn name(self) -> &'static str {
        match self {
            VectorSlots::Coordinator => "coordinator",
            VectorSlots::Node => "node",
        }
    }

    /// Slots of a vector for `coordinators` co-routines on `compute_nodes` nodes.
    pub fn count(self, coordinators: u32, compute_nodes: u32) -> u32 {
        match self {
            VectorSlots::Coordinator => coordinators,
            VectorSlots::Node => compute_nodes,
        }
    }

    pub fn parse(s: &str) -> Result<Self, UnknownVectorSlots> {
        Self::ALL
            .into_iter()
            .find(|v| v.name() == s)
            .ok_or_else(|| UnknownVectorSlots(s.to_string()))
    }
}

/// A `--vector-slots` value that names no [`VectorSlots`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown vector slots '{0}': accepted are coordinator, node")]
pub struct UnknownVectorSlots(pub String);

/// Published values a compressed slot's publisher writes in a row before it hands the turn
/// over (the next coordinator whose timestamp ends takes it), so no transaction publishes
/// for the others indefinitely.
pub const PUBLISH_ROUNDS_MAX: u32 = 16;

/// A compute node's share of NAM-DB's timestamp vector, held in common by all its
/// coordinators (every worker thread of the node):
/// - with [`VectorSlots::Node`], the counter its commit timestamps come from and which of
///   them ended, so the node's slot is published only up to a timestamp below which every
///   one ended (installed, or given up), by one publisher at a time: two WRITEs of one slot
///   from two coordinators could land out of order and move it back, and a copy of the
///   vector taken then could see a transaction but not one it read from;
/// - the detached fetcher's latest copy of the vector.
#[derive(Debug, Default)]
pub struct NodeClock {
    state: std::sync::Mutex<ClockState>,
}

#[derive(Debug, Default)]
struct ClockState {
    /// The last commit timestamp handed out.
    issued: u64,
    /// Every timestamp up to it ended.
    ended_upto: u64,
    /// Timestamps above `ended_upto` that ended (at most one per coordinator of the node:
    /// each holds one timestamp at a time).
    ended: std::collections::BTreeSet<u64>,
    /// The last value a publisher took to write.
    published: u64,
    /// A publisher's WRITE is under way.
    publishing: bool,
    /// The fetcher's copy of the vector.
    cached: Option<std::sync::Arc<Vec<u64>>>,
    /// With the overflow area's garbage collector: each coordinator's snapshot (or, while
    /// it copies the vector, the floor when it began: its copy will be at least that), by
    /// coordinator id. Replaced by the coordinator's next snapshot, never removed: a
    /// coordinator between transactions keeps its last one (a bound that is only low).
    live: std::collections::BTreeMap<u32, std::sync::Arc<Vec<u64>>>,
    /// At most every snapshot a coordinator of the node takes from now on, slot by slot:
    /// the latest copy of the vector that the next snapshots cannot be older than (the
    /// fetcher's, when it runs; else any coordinator's). Empty: nothing known yet (zeros).
    floor: std::sync::Arc<Vec<u64>>,
}

impl NodeClock {
    /// A commit timestamp for a coordinator of the node (no network operation).
    pub fn take_ts(&self) -> u64 {
        let mut st = self.lock();
        st.issued += 1;
        st.issued
    }

    /// Timestamp `ts` ended: its installs completed, or its transaction gave it up. Returns
    /// the value the caller is to publish now, if it took the turn.
    pub fn end_ts(&self, ts: u64) -> Option<u64> {
        let mut st = self.lock();
        assert!(
            ts > st.ended_upto && ts <= st.issued && !st.ended.contains(&ts),
            "node clock: timestamp {ts} ended twice or never issued ({st:?})"
        );
        st.ended.insert(ts);
        while st.ended.first() == Some(&(st.ended_upto + 1)) {
            st.ended.pop_first();
            st.ended_upto += 1;
        }
        Self::turn(&mut st)
    }

    /// The publisher's WRITE landed: the next value it is to publish, if more ended
    /// meanwhile and `rounds` (values it published in a row) is below
    /// [`PUBLISH_ROUNDS_MAX`]; else the turn is free.
    pub fn published(&self, rounds: u32) -> Option<u64> {
        let mut st = self.lock();
        st.publishing = false;
        if rounds >= PUBLISH_ROUNDS_MAX {
            return None;
        }
        Self::turn(&mut st)
    }

    fn turn(st: &mut ClockState) -> Option<u64> {
        if st.publishing || st.ended_upto <= st.published {
            return None;
        }
        st.publishing = true;
        st.published = st.ended_upto;
        Some(st.published)
    }

    /// The fetcher's latest copy of the vector, if it has one.
    pub fn cached(&self) -> Option<std::sync::Arc<Vec<u64>>> {
        self.lock().cached.clone()
    }

    /// Replaces the cached copy with `v` (a copy taken at one instant, later than the
    /// last): the node's next snapshots are at least it.
    pub fn set_cached(&self, v: Vec<u64>) {
        let mut st = self.lock();
        let v = std::sync::Arc::new(v);
        st.floor = v.clone();
        st.cached = Some(v);
    }

    /// Coordinator `id` takes the fetcher's copy as its snapshot if `usable` accepts it,
    /// and registers it as live in the same step (so no floor published meanwhile misses
    /// it).
    pub fn snapshot_from_cache(
        &self,
        id: u32,
        usable: impl Fn(&[u64]) -> bool,
    ) -> Option<std::sync::Arc<Vec<u64>>> {
        let mut st = self.lock();
        let v = st.cached.clone().filter(|v| usable(v))?;
        st.live.insert(id, v.clone());
        Some(v)
    }

    /// Coordinator `id` starts copying the vector for its snapshot: registered at the
    /// node's floor (its copy, which starts after this, is at least that, slot by slot:
    /// each slot only grows).
    pub fn snapshot_starts(&self, id: u32) {
        let mut st = self.lock();
        let floor = st.floor.clone();
        st.live.insert(id, floor);
    }

    /// Coordinator `id`'s snapshot is `v`, a copy it made; it raises the node's floor when
    /// `raises_floor` (no fetcher runs, whose older copy a later snapshot could take).
    pub fn snapshot_taken(&self, id: u32, v: &[u64], raises_floor: bool) {
        let mut st = self.lock();
        st.live.insert(id, std::sync::Arc::new(v.to_vec()));
        if raises_floor {
            let raised: Vec<u64> = (0..v.len().max(st.floor.len()))
                .map(|s| {
                    let (a, b) = (v.get(s), st.floor.get(s));
                    *a.max(b).unwrap_or(&0)
                })
                .collect();
            st.floor = std::sync::Arc::new(raised);
        }
    }

    /// The slot-by-slot minimum of every live snapshot of the node and of its floor, over
    /// `slots` slots (a slot nothing names yet is 0): at most every snapshot the node's
    /// coordinators hold or will take. It only grows: a snapshot registered later is at
    /// least the floor, and the floor only grows.
    pub fn oldest_snapshot(&self, slots: u32) -> Vec<u64> {
        let st = self.lock();
        let at = |v: &Vec<u64>, s: usize| v.get(s).copied().unwrap_or(0);
        (0..slots as usize)
            .map(|s| {
                st.live
                    .values()
                    .map(|v| at(v, s))
                    .fold(at(&st.floor, s), u64::min)
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ClockState> {
        // A panic while holding it is a bug that already stops the run.
        self.state.lock().expect("node clock poisoned")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsvc_a_compressed_slot_is_published_only_below_every_running_timestamp_one_writer_at_a_time()
    {
        let c = NodeClock::default();
        let (a, b, d) = (c.take_ts(), c.take_ts(), c.take_ts());
        assert_eq!(
            c.end_ts(b),
            None,
            "a still runs: nothing to publish past it"
        );
        assert_eq!(c.end_ts(a), Some(b), "a and b ended: publish b");
        assert_eq!(c.end_ts(d), None, "the publisher's WRITE of b is under way");
        assert_eq!(c.published(1), Some(d), "then the publisher writes d");
        assert_eq!(c.published(2), None, "nothing further ended");
        let e = c.take_ts();
        assert_eq!(c.end_ts(e), Some(e), "the turn was free");
        let f = c.take_ts();
        assert_eq!(c.end_ts(f), None);
        assert_eq!(
            c.published(PUBLISH_ROUNDS_MAX),
            None,
            "a publisher that wrote its share hands the turn over"
        );
        let g = c.take_ts();
        assert_eq!(c.end_ts(g), Some(g), "the next to end takes it");
    }

    #[test]
    fn tsvc_a_nodes_oldest_snapshot_is_below_every_live_snapshot_and_every_one_still_to_be_taken() {
        let c = NodeClock::default();
        assert_eq!(c.oldest_snapshot(2), vec![0, 0], "nothing known: zeros");
        c.snapshot_taken(0, &[5, 7], true);
        c.snapshot_taken(1, &[6, 7], true);
        assert_eq!(
            c.oldest_snapshot(2),
            vec![5, 7],
            "coordinator 0's is the oldest"
        );
        c.snapshot_starts(0);
        assert_eq!(
            c.oldest_snapshot(2),
            vec![6, 7],
            "0 copies anew: it will see at least the floor, the newest copy made"
        );
        c.snapshot_taken(0, &[9, 9], true);
        assert_eq!(c.oldest_snapshot(2), vec![6, 7], "1 still holds its own");
        c.snapshot_taken(1, &[9, 9], true);
        assert_eq!(c.oldest_snapshot(2), vec![9, 9]);
        // The fetcher's copy is the floor: a coordinator's own newer copy does not raise it
        // (the next snapshot may be the fetcher's older one).
        let f = NodeClock::default();
        f.set_cached(vec![3, 3]);
        f.snapshot_taken(0, &[8, 8], false);
        assert_eq!(f.oldest_snapshot(2), vec![3, 3]);
        assert_eq!(
            f.snapshot_from_cache(1, |v| v[0] >= 4),
            None,
            "not usable: not taken, not registered"
        );
        assert_eq!(*f.snapshot_from_cache(1, |_| true).unwrap(), vec![3, 3]);
        f.set_cached(vec![10, 10]);
        assert_eq!(
            f.oldest_snapshot(2),
            vec![3, 3],
            "coordinator 1 still holds the older copy"
        );
    }

    fn service() -> (TsService, Region) {
        let s = TsService::for_coordinators(NodeId(0), RegionId(0), 1);
        let r = Region::new(TsService::region_words_for(1));
        (s, r)
    }

    fn report(s: &TsService, r: &Region, cts: u64) {
        r.store(s.slot_offset(cts) as usize, cts);
    }

    #[test]
    fn tsvc_rts_advances_only_over_a_gapless_prefix_of_finished_commits() {
        let (s, r) = service();
        assert_eq!(s.advance(&r), SNAPSHOT_FIRST, "nothing finished yet");
        let (a, b, c) = (
            TsService::cts_of(0),
            TsService::cts_of(1),
            TsService::cts_of(2),
        );
        report(&s, &r, c);
        report(&s, &r, a);
        assert_eq!(s.advance(&r), a, "b is still running: rts stops before it");
        report(&s, &r, b);
        assert_eq!(s.advance(&r), c, "b finished: rts passes b and c");
        assert_eq!(s.advance(&r), c);
    }

    #[test]
    fn tsvc_a_slot_is_reusable_only_once_the_sequencer_passed_its_previous_commit() {
        let (s, r) = service();
        let n = s.ring_slots as u64;
        let first = TsService::cts_of(0);
        assert!(s.fits_ring(first + n - 1, 0));
        // `first + n` shares `first`'s slot, but the sequencer has not consumed `first`.
        assert!(!s.fits_ring(first + n, 0));
        report(&s, &r, first);
        let rts = s.advance(&r);
        assert!(s.fits_ring(first + n, rts));
        // A stale value in a slot (its previous commit) is not mistaken for the expected one.
        report(&s, &r, first + 2);
        assert_eq!(s.advance(&r), first, "first + 1 is missing");
    }

    #[test]
    fn tsvc_the_timestamp_vector_has_a_slot_per_coordinator_and_refuses_others() {
        assert_eq!(
            TsVector::region_words_for(0),
            1,
            "the region exists in every run"
        );
        assert_eq!(TsVector::region_words_for(320), 320);
        let v = TsVector {
            node: NodeId(3),
            region: RegionId(7),
            slots: 4,
        };
        assert_eq!(v.slot(3), RemotePtr::new(NodeId(3), RegionId(7), 3));
        assert_eq!(v.all(), RemotePtr::new(NodeId(3), RegionId(7), 0));
        let beyond = std::panic::catch_unwind(|| v.slot(4)).unwrap_err();
        let msg = beyond.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains("slot 4 of 4"), "{msg}");
    }

    #[test]
    fn tsvc_ring_size_grows_with_the_cluster_as_a_power_of_two() {
        let s = TsService::for_coordinators(NodeId(0), RegionId(0), 100);
        assert_eq!(s.ring_slots, 512);
        assert_eq!(
            TsService::for_coordinators(NodeId(0), RegionId(0), 1).ring_slots,
            RING_SLOTS_MIN
        );
    }
}
