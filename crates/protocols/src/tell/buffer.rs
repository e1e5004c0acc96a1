//! Tell's shared record buffer (Tell §5.5, SB and SBVS): one per processing node, between
//! its transactions and the store. Each entry keeps a record with a version set `B` for
//! which it is valid: every tid in `B` completed before the record was fetched, so the
//! record holds every version of them. A transaction whose snapshot sees `V_tx` may use the
//! entry iff `V_tx ⊆ B`; otherwise it fetches the record again.
//!
//! What makes `B` valid is the order of the caller's steps, which this type cannot see:
//! - **SB**: take `V_max` (the snapshot of the node's newest transaction) *before* fetching
//!   the record, then [`SharedBuffer::fill`] with it; after a successful conditional put,
//!   [`SharedBuffer::write_through`] with `V_max ∪ {tid}` (a transaction in `V_max` that
//!   changed the record would have failed the put).
//! - **SBVS**: the store keeps a stamp per cache unit of consecutive keys (the unit's
//!   version set, reduced to what a reader compares: whether it changed), which a writer
//!   bumps after its record puts (and an abort after its undo) and before it tells the
//!   commit manager. A reader that misses takes `V_max`, then reads the unit's stamp, then
//!   (if still needed) the record: an entry filled under that same stamp holds the record
//!   as the store does but for puts of writers not yet completed, so it is valid for
//!   `V_max` ([`SharedBuffer::revalidate`]); a fetched record is filled with the stamp read
//!   before it ([`SharedBuffer::fill_stamped`]).
//!
//! Bounded: at most `capacity` entries, the least recently used evicted first.

use super::descriptor::Descriptor;
use super::record::Record;
use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// A record id in the store.
pub type Rid = u64;

struct Entry<T> {
    record: T,
    valid: Descriptor,
    /// SBVS: the unit's stamp read before the record was fetched (`None`: not known, as
    /// after a write-through, so only `valid` can vouch for it).
    stamp: Option<u64>,
    /// When it was last used (the LRU order's key).
    used: u64,
}

/// Hits and misses, for the report's hit ratio.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BufferCounts {
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    /// SBVS: misses found valid by the unit's stamp after `V_tx ⊄ B` (served from the
    /// buffer, but after a round trip).
    pub revalidated: u64,
}

impl BufferCounts {
    /// Reads served from the buffer (revalidated ones included) over all reads.
    pub fn hit_ratio(&self) -> f64 {
        let all = self.hits + self.misses;
        if all == 0 {
            0.0
        } else {
            (self.hits + self.revalidated) as f64 / all as f64
        }
    }
}

/// One processing node's shared buffer of records `T` (a decoded [`Record`], or a slot's
/// words) by key `K` (a rid, or the engine's table, node and key).
pub struct SharedBuffer<K = Rid, T = Record> {
    capacity: usize,
    entries: HashMap<K, Entry<T>>,
    /// `used` -> key: the least recently used first.
    lru: BTreeMap<u64, K>,
    clock: u64,
    pub counts: BufferCounts,
}

impl<K: Copy + Eq + Hash, T> SharedBuffer<K, T> {
    /// A buffer of at most `capacity` records.
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0, "tell: a buffer of {capacity} records");
        SharedBuffer {
            capacity,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
            counts: BufferCounts::default(),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The record for a transaction of snapshot `v_tx`, if the entry is valid for it
    /// (counted as a hit; a miss otherwise).
    pub fn get(&mut self, rid: K, v_tx: &Descriptor) -> Option<&T> {
        let hit = self
            .entries
            .get(&rid)
            .is_some_and(|e| v_tx.subset_of(&e.valid));
        if !hit {
            self.counts.misses += 1;
            return None;
        }
        self.counts.hits += 1;
        self.touch(rid);
        self.entries.get(&rid).map(|e| &e.record)
    }

    /// SBVS: after a miss, the unit's stamp `stamp`, read after `v_max` was taken: an entry
    /// filled under the same stamp lacks no version of a tid completed before the read, so
    /// it is valid for `v_max` from now on (counted as revalidated; the miss stays counted).
    pub fn revalidate(&mut self, rid: K, stamp: u64, v_max: &Descriptor) -> Option<&T> {
        let e = self.entries.get_mut(&rid)?;
        if e.stamp != Some(stamp) {
            return None;
        }
        e.valid = v_max.clone();
        self.counts.revalidated += 1;
        self.touch(rid);
        self.entries.get(&rid).map(|e| &e.record)
    }

    /// Puts `record`, fetched after `valid` was taken, in place of what the entry held.
    pub fn fill(&mut self, rid: K, record: T, valid: Descriptor) {
        self.insert(rid, record, valid, None);
    }

    /// SBVS: [`SharedBuffer::fill`] of a record fetched after its unit's stamp was read as
    /// `stamp`.
    pub fn fill_stamped(&mut self, rid: K, record: T, valid: Descriptor, stamp: u64) {
        self.insert(rid, record, valid, Some(stamp));
    }

    fn insert(&mut self, rid: K, record: T, valid: Descriptor, stamp: Option<u64>) {
        self.clock += 1;
        let used = self.clock;
        if let Some(old) = self.entries.insert(
            rid,
            Entry {
                record,
                valid,
                stamp,
                used,
            },
        ) {
            self.lru.remove(&old.used);
        }
        self.lru.insert(used, rid);
        while self.entries.len() > self.capacity {
            let (_, victim) = self.lru.pop_first().expect("an entry per lru key");
            self.entries.remove(&victim);
            self.counts.evictions += 1;
        }
    }

    /// After this node's conditional put of `record` succeeded: the record as put, valid
    /// for `V_max ∪ {tid}`.
    pub fn write_through(&mut self, rid: K, record: T, valid: Descriptor) {
        self.fill(rid, record, valid);
    }

    /// Drops `rid`'s entry (an aborting writer's write-through).
    pub fn forget(&mut self, rid: K) {
        if let Some(e) = self.entries.remove(&rid) {
            self.lru.remove(&e.used);
        }
    }

    fn touch(&mut self, rid: K) {
        self.clock += 1;
        let e = self.entries.get_mut(&rid).expect("present");
        self.lru.remove(&e.used);
        e.used = self.clock;
        self.lru.insert(self.clock, rid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tell::cm::{CommitManager, Pn};
    use crate::tell::descriptor::Tid;
    use crate::tell::versions::{Version, VersionSet};

    /// The store as the model sees it: each record's whole version set (no garbage
    /// collection) and its sequence number.
    struct Store {
        records: Vec<Record>,
        /// SBVS: each cache unit's stamp.
        stamps: Vec<u64>,
    }

    /// Records per cache unit in the model.
    const UNIT_RECORDS: u64 = 3;

    /// Which mode the model runs and which of its order it breaks (for the test to catch).
    #[derive(Clone, Copy, Default)]
    struct Model {
        /// SBVS: misses revalidated by the unit's stamp.
        sbvs: bool,
        /// `V_max` (and the stamp) taken after the fetch.
        fill_after_fetch: bool,
        /// An aborting writer leaves its written-through entries.
        forget_none: bool,
        /// SBVS: an aborting writer's undo does not bump the unit's stamp.
        undo_unstamped: bool,
    }

    impl Store {
        fn new(n: usize) -> Self {
            let loaded = Version {
                tid: Tid(0),
                word: 1,
                payload: Some(vec![0]),
            };
            let r = Record {
                seq: 0,
                locked: false,
                versions: VersionSet::new(vec![loaded]),
            };
            Store {
                records: vec![r; n],
                stamps: vec![0; n.div_ceil(UNIT_RECORDS as usize)],
            }
        }

        fn put(&mut self, rid: Rid, tid: Tid, value: u64) -> Record {
            let r = &mut self.records[rid as usize];
            r.versions.write(tid, tid.0 + 1, Some(vec![value]));
            r.seq += 1;
            r.clone()
        }

        fn undo(&mut self, rid: Rid, tid: Tid) {
            let r = &mut self.records[rid as usize];
            assert!(r.versions.unwrite(tid));
            r.seq += 1;
        }

        fn bump(&mut self, rid: Rid) {
            self.stamps[(rid / UNIT_RECORDS) as usize] += 1;
        }

        fn stamp(&self, rid: Rid) -> u64 {
            self.stamps[(rid / UNIT_RECORDS) as usize]
        }
    }

    /// The value a snapshot reads of a record.
    fn value(r: &Record, snap: &Descriptor, own: Tid) -> Option<u64> {
        r.versions
            .read(snap, own)
            .map(|v| v.payload.as_ref().unwrap()[0])
    }

    /// A writer in flight: its tid, snapshot and the records it put.
    struct Writer {
        tid: Tid,
        /// It runs on the buffer's node (it writes through).
        here: bool,
        snap: Descriptor,
        put: Vec<Rid>,
    }

    /// Random transactions on one processing node with a shared buffer and writers (of
    /// this node and others) putting, committing and aborting: every read through the
    /// buffer equals the read of the store itself at the same moment.
    fn run_model(seed: u64, m: Model) -> Result<(), String> {
        const RECORDS: u64 = 12;
        let mut rng = atoll_fabric::rng::Rng::new(seed);
        let mut cm = CommitManager::single(1 << 20);
        let mut store = Store::new(RECORDS as usize);
        let mut buf = SharedBuffer::new(6);
        let mut writers: Vec<Writer> = Vec::new();
        // The node's newest transaction's snapshot (V_max).
        let mut v_max = cm.start(Pn(0), true).map_err(|e| e.to_string())?.snapshot;
        for step in 0..4_000 {
            match rng.below(5) {
                // A reader of this node.
                0 | 1 => {
                    let s = cm.start(Pn(0), true).map_err(|e| e.to_string())?;
                    v_max = s.snapshot.clone();
                    for _ in 0..3 {
                        let rid = rng.below(RECORDS);
                        let truth = value(&store.records[rid as usize], &s.snapshot, s.tid);
                        let stamp = store.stamp(rid);
                        let mut cached = buf
                            .get(rid, &s.snapshot)
                            .map(|r| value(r, &s.snapshot, s.tid));
                        if cached.is_none() && m.sbvs {
                            cached = buf
                                .revalidate(rid, stamp, &v_max)
                                .map(|r| value(r, &s.snapshot, s.tid));
                        }
                        let got = match cached {
                            Some(v) => v,
                            None => {
                                let fetched = store.records[rid as usize].clone();
                                // The broken order takes V_max after the fetch: a commit
                                // in between makes B claim what the record lacks.
                                let mut stamp = stamp;
                                if m.fill_after_fetch && rng.below(2) == 0 {
                                    let w = cm.start(Pn(0), false).map_err(|e| e.to_string())?;
                                    let r = &store.records[rid as usize];
                                    if r.versions.unseen_writer(&w.snapshot, w.tid).is_none() {
                                        store.put(rid, w.tid, w.tid.0 * 100 + rid);
                                        store.bump(rid);
                                    }
                                    cm.set_committed(w.tid).map_err(|e| e.to_string())?;
                                    stamp = store.stamp(rid);
                                    // The node's newest transaction: a writer, still open.
                                    let newest =
                                        cm.start(Pn(0), false).map_err(|e| e.to_string())?;
                                    v_max = newest.snapshot.clone();
                                    writers.push(Writer {
                                        tid: newest.tid,
                                        here: true,
                                        snap: newest.snapshot,
                                        put: Vec::new(),
                                    });
                                }
                                if m.sbvs {
                                    buf.fill_stamped(rid, fetched.clone(), v_max.clone(), stamp);
                                } else {
                                    buf.fill(rid, fetched.clone(), v_max.clone());
                                }
                                value(&fetched, &s.snapshot, s.tid)
                            }
                        };
                        if got != truth {
                            return Err(format!(
                                "seed {seed} step {step}: record {rid} read {got:?} through the buffer, {truth:?} in the store"
                            ));
                        }
                    }
                    cm.set_committed(s.tid).map_err(|e| e.to_string())?;
                }
                // A writer starts and puts some records.
                2 => {
                    let s = cm.start(Pn(0), false).map_err(|e| e.to_string())?;
                    // Half the writers run on this node: the newest transaction here.
                    let here = rng.below(2) == 0;
                    if here {
                        v_max = s.snapshot.clone();
                    }
                    let mut w = Writer {
                        tid: s.tid,
                        here,
                        snap: s.snapshot,
                        put: Vec::new(),
                    };
                    for _ in 0..2 {
                        let rid = rng.below(RECORDS);
                        let r = &store.records[rid as usize];
                        // R1: another writer's version it does not see aborts it.
                        if w.put.contains(&rid)
                            || r.versions.unseen_writer(&w.snap, w.tid).is_some()
                        {
                            continue;
                        }
                        let put = store.put(rid, w.tid, w.tid.0 * 100 + rid);
                        w.put.push(rid);
                        // This node's writers write through, valid for V_max plus itself.
                        if here {
                            buf.write_through(rid, put, v_max.with(w.tid));
                        }
                    }
                    writers.push(w);
                }
                // A writer commits, or aborts (its versions taken out first).
                _ if !writers.is_empty() => {
                    let w = writers.swap_remove(rng.below(writers.len() as u64) as usize);
                    if rng.below(3) == 0 {
                        for &rid in &w.put {
                            store.undo(rid, w.tid);
                            if !m.undo_unstamped {
                                store.bump(rid);
                            }
                            if w.here && !m.forget_none {
                                buf.forget(rid);
                            }
                        }
                        cm.set_aborted(w.tid).map_err(|e| e.to_string())?;
                    } else {
                        // The stamps after the puts, before the commit manager hears.
                        for &rid in &w.put {
                            store.bump(rid);
                        }
                        cm.set_committed(w.tid).map_err(|e| e.to_string())?;
                    }
                }
                _ => {}
            }
        }
        if buf.counts.hits == 0 || buf.counts.misses == 0 || (m.sbvs && buf.counts.revalidated == 0)
        {
            return Err(format!(
                "seed {seed}: {:?}, the buffer was not exercised",
                buf.counts
            ));
        }
        Ok(())
    }

    #[test]
    fn tell_a_shared_buffer_read_equals_the_stores_under_concurrent_writers_and_aborts() {
        for sbvs in [false, true] {
            for seed in 0..20 {
                run_model(
                    seed,
                    Model {
                        sbvs,
                        ..Model::default()
                    },
                )
                .unwrap();
            }
        }
    }

    #[test]
    fn tell_a_shared_buffer_breaking_its_order_is_caught() {
        let caught = |m: Model| (0..20).filter(|&s| run_model(s, m).is_err()).count();
        for sbvs in [false, true] {
            let broken = [
                (
                    "V_max after the fetch",
                    Model {
                        sbvs,
                        fill_after_fetch: true,
                        ..Model::default()
                    },
                ),
                (
                    "aborted entries kept",
                    Model {
                        sbvs,
                        forget_none: true,
                        ..Model::default()
                    },
                ),
            ];
            for (what, m) in broken {
                let n = caught(m);
                assert!(n >= 18, "{what} (sbvs {sbvs}): caught in {n} of 20 seeds");
            }
        }
        let n = caught(Model {
            sbvs: true,
            undo_unstamped: true,
            ..Model::default()
        });
        assert!(
            n >= 18,
            "sbvs: an undo that leaves the stamp: caught in {n} of 20 seeds"
        );
    }

    #[test]
    fn tell_a_shared_buffer_evicts_the_least_recently_used_and_revalidates_by_the_stamp() {
        let rec = Record {
            seq: 0,
            locked: false,
            versions: VersionSet::default(),
        };
        let all = Descriptor::new(0, 100, 100, []);
        let mut buf = SharedBuffer::new(2);
        buf.fill(1, rec.clone(), all.clone());
        buf.fill(2, rec.clone(), all.clone());
        assert!(buf.get(1, &all).is_some());
        buf.fill(13, rec.clone(), all.clone());
        assert!(buf.get(2, &all).is_none(), "2 was the least recently used");
        assert_eq!((buf.len(), buf.counts.evictions), (2, 1));
        // SBVS: an entry fetched under the unit's stamp is valid while the stamp is the same.
        let b = Descriptor::new(0, 5, 5, []);
        buf.fill_stamped(3, rec, b.clone(), 7);
        assert!(buf.get(3, &all).is_none());
        assert!(buf.revalidate(3, 8, &all).is_none(), "the unit changed");
        assert!(buf.revalidate(3, 7, &all).is_some());
        assert!(
            buf.get(3, &all).is_some(),
            "valid for V_max once revalidated"
        );
        assert!(
            buf.revalidate(13, 0, &all).is_none(),
            "filled without a stamp"
        );
        assert_eq!(buf.counts.revalidated, 1);
    }
}
