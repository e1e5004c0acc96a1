//! One node's share of the database: its tables' regions, local index maintenance
//! (insert, delete, lookup, reuse of deleted slots) and the ordered indexes for range scans.
//!
//! Inserts and deletes always run on the owning node's CPU (locally or inside an RPC
//! handler), serialised per table by a mutex; lookups and record access are lock-free reads
//! of registered memory, so one-sided readers on other nodes see the same structures.
//!
//! Slot reuse: a deleted key keeps its record slot (absent) until an insert finds no
//! never-used slot left; that insert reclaims the oldest deleted slot that is unlocked
//! (taking its lock by CAS, so a coordinator holding it through a stale cached location is
//! never robbed). A reclaim first files the old key's deletion version (ordered index and
//! `gone` map), then raises the slot's incarnation in its version word while it is still
//! absent, then turns the old key's hash entry into a tombstone, and only then writes the
//! new key, payload and live version. So a reader of the old key sees `ABSENT` or another
//! `KEY`, and a validation comparing version words sees a word the slot never had before.

use crate::layout::*;
use crate::ordered::OrderedIndex;
use atoll_fabric::{NodeId, NodeMemory, Region, RegionId};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// Why a store operation could not be done.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("table {table}: key {key} already exists")]
    Duplicate { table: String, key: u64 },
    /// Every record slot is live, or deleted but not reclaimable (locked for a moment, or
    /// at [`INCARNATION_MAX`]).
    #[error("table {table}: all {capacity} record slots of this node are used")]
    Full { table: String, capacity: u32 },
    /// No free hash-index slot; cannot happen while a table's capacity is at most half its
    /// index slots (as layouts size them), since a key holds at most one index slot.
    #[error("table {table}: all {slots} hash-index slots of this node are used")]
    IndexFull { table: String, slots: u64 },
    #[error("table {table}: key {key} does not live on node {node}")]
    NotHere { table: String, key: u64, node: u16 },
    /// A deleted record being revived or reclaimed is locked for a moment by a coordinator
    /// holding a stale location: retry.
    #[error("table {table}: the deleted record taken for key {key} is briefly locked")]
    Busy { table: String, key: u64 },
    /// No live record of the key (a delete), or none locked by the caller (an undo).
    #[error("table {table}: key {key} has no such record here")]
    NotFound { table: String, key: u64 },
    /// A stored payload of the wrong length.
    #[error("table {table}: a stored payload of {words} words, expected {expected}")]
    PayloadWords {
        table: String,
        words: usize,
        expected: u32,
    },
    /// A scan of a table that keeps no ordered index.
    #[error("table {table} has no ordered index to scan")]
    NoOrderedIndex { table: String },
}

/// Set in an ordered-index value of a key whose slot went to another key; the low bits
/// hold the key's deletion version, which scans report.
const ORDERED_GONE: u64 = 1 << 63;

/// Most heap bytes a deleted key's entry in a table's `gone` map takes, for sizing: a
/// hash-map bucket of key and version (16 bytes and a control byte), at most 2 × 8/7
/// buckets per entry (power-of-two growth at a 7/8 load factor).
pub const GONE_BYTES_PER_KEY_MAX: u64 = 40;

/// The record slot a scan reports for a deleted key whose slot was reclaimed.
pub const NO_SLOT: u32 = u32::MAX;

/// Record-slot allocation of one table, guarded with its index writes.
struct Alloc {
    /// Next never-used record slot.
    next_fresh: u32,
    /// Slots whose record was deleted (or whose insert was undone), oldest first: reused
    /// once no never-used slot is left.
    deleted: VecDeque<u32>,
    /// A bit per slot: queued in `deleted` (a slot deleted, revived and deleted again is
    /// queued once, so the queue holds at most `capacity` slots).
    queued: Vec<u64>,
    /// Keys whose slot went to another key, with their deletion version, so a re-insert
    /// continues the key's versions (and the ordered index keeps a gone mark for each, so a
    /// scan reports the deletion). Never pruned: a transaction that saw such a key may still
    /// be running, and a key's versions must never repeat. Bounded instead by the table's
    /// declared `gone_keys_max_per_node`, from the workload's key space, which the run's
    /// sizing counts (TPC-C's NEW-ORDER, whose keys are never reused, files one per
    /// delivered order: at most its capacity, since its fixed ORDER table bounds the orders
    /// a run adds).
    gone: HashMap<u64, u64>,
}

impl Alloc {
    fn queue(&mut self, idx: u32) {
        let (w, b) = (idx as usize / 64, idx % 64);
        if self.queued.len() <= w {
            self.queued.resize(w + 1, 0);
        }
        if self.queued[w] & (1 << b) == 0 {
            self.queued[w] |= 1 << b;
            self.deleted.push_back(idx);
        }
    }

    fn pop(&mut self) -> Option<u32> {
        let idx = self.deleted.pop_front()?;
        self.queued[idx as usize / 64] &= !(1 << (idx % 64));
        Some(idx)
    }
}

struct Shard {
    alloc: Mutex<Alloc>,
    /// Lock order: `alloc`, then `ordered`.
    ordered: Option<Mutex<OrderedIndex>>,
}

/// A node's tables.
pub struct Store {
    pub node: NodeId,
    pub catalog: Arc<Catalog>,
    memory: Arc<NodeMemory>,
    shards: Vec<Shard>,
}

/// Takes the `LOCK` word at `at` to `to` by one CAS if no transaction holds it: free is 0
/// under [`LockWord::Owner`], and any unlocked commit id under [`LockWord::CommitId`] (a
/// deleted record's keeps its deletion's commit id). Whether it was free and is now `to`.
fn take_free_lock(region: &Region, at: usize, lock_word: LockWord, to: u64) -> bool {
    let w = region.load(at);
    !lock_word.held(w) && region.cas(at, w, to) == w
}

impl Store {
    pub fn new(catalog: Arc<Catalog>, memory: Arc<NodeMemory>) -> Self {
        assert_eq!(
            memory.region_count(),
            catalog.region_words().len(),
            "node memory does not match the catalog"
        );
        let shards = (0..catalog.table_count())
            .map(|t| Shard {
                alloc: Mutex::new(Alloc {
                    next_fresh: 0,
                    deleted: VecDeque::new(),
                    queued: Vec::new(),
                    gone: HashMap::new(),
                }),
                ordered: catalog
                    .spec(TableId(t as u16))
                    .ordered
                    .then(|| Mutex::new(OrderedIndex::new())),
            })
            .collect();
        Store {
            node: memory.node,
            catalog,
            memory,
            shards,
        }
    }

    pub fn memory(&self) -> &Arc<NodeMemory> {
        &self.memory
    }

    #[inline]
    pub fn region(&self, t: TableId) -> &Region {
        self.memory.region(RegionId(t.0))
    }

    fn name(&self, t: TableId) -> String {
        self.catalog.spec(t).name.clone()
    }

    /// Finds the record slot `key` owns through the hash index, live or deleted (a deleted
    /// key keeps its slot until it is reclaimed, so a re-insert continues its versions).
    pub fn find_slot(&self, t: TableId, key: u64) -> Option<u32> {
        let layout = self.catalog.layout(t);
        let region = self.region(t);
        let mut group = layout.home_group(key);
        let mut words = [0u64; GROUP_WORDS as usize];
        for _ in 0..layout.index_groups {
            region.read_into(layout.group_offset(group) as usize, &mut words);
            match probe_group(&words, key) {
                GroupProbe::Found(idx) => return Some(idx),
                GroupProbe::Absent => return None,
                GroupProbe::Continue => group = (group + 1) & (layout.index_groups - 1),
            }
        }
        None
    }

    /// Whether slot `idx` holds `key`'s live record. Reads the version word before the key
    /// word: a reclaim marks the slot absent before it changes the key, so a live version
    /// followed by a matching key is that key's.
    pub fn live_key_at(&self, t: TableId, idx: u32, key: u64) -> bool {
        let layout = self.catalog.layout(t);
        if idx >= layout.capacity {
            return false;
        }
        let off = layout.record_offset(idx) as usize;
        let region = self.region(t);
        region.load(off + H_VERSION as usize) & VERSION_ABSENT == 0
            && region.load(off + H_KEY as usize) == key
    }

    /// Finds `key`'s live record slot through the hash index.
    pub fn lookup(&self, t: TableId, key: u64) -> Option<u32> {
        let idx = self.find_slot(t, key)?;
        self.live_key_at(t, idx, key).then_some(idx)
    }

    /// Loads a live, unlocked record of the workload's words `user`, written by
    /// [`LOADER_TAG`] (the initial state), at version [`INITIAL_VERSION`].
    pub fn insert(&self, t: TableId, key: u64, user: &[u64]) -> Result<u32, StoreError> {
        let mut payload = Vec::new();
        seal(t, key, LOADER_TAG, user, &mut payload);
        self.insert_locked(t, key, &payload, 0).map(|(idx, _)| idx)
    }

    /// Word offset of linear hash-index slot `p` (slots in probe order: a group's slots,
    /// then the next group's).
    fn index_slot_offset(layout: &TableLayout, p: u64) -> usize {
        let group = (p / GROUP_SLOTS as u64) as u32;
        layout.group_offset(group) as usize
            + (p % GROUP_SLOTS as u64) as usize * SLOT_WORDS as usize
    }

    /// The first empty or tombstone hash-index slot on `key`'s probe path (the caller knows
    /// `key` is not in the index), as a word offset.
    fn free_index_slot(&self, t: TableId, key: u64) -> Option<usize> {
        let layout = self.catalog.layout(t);
        let region = self.region(t);
        let slots = layout.index_groups as u64 * GROUP_SLOTS as u64;
        let home = layout.home_group(key) as u64 * GROUP_SLOTS as u64;
        (0..slots)
            .map(|i| Self::index_slot_offset(layout, (home + i) % slots))
            .find(|&off| matches!(region.load(off + 1), META_EMPTY | META_TOMBSTONE))
    }

    /// Turns `key`'s hash entry naming slot `idx` into a tombstone, then turns tombstones
    /// back into empty slots backwards from it while the slot after is empty: no probe
    /// path runs through a slot followed by an empty one, so none is cut short.
    fn unindex(&self, t: TableId, key: u64, idx: u32) {
        let layout = self.catalog.layout(t);
        let region = self.region(t);
        let slots = layout.index_groups as u64 * GROUP_SLOTS as u64;
        let home = layout.home_group(key) as u64 * GROUP_SLOTS as u64;
        let mut at = None;
        for i in 0..slots {
            let p = (home + i) % slots;
            let off = Self::index_slot_offset(layout, p);
            let meta = region.load(off + 1);
            if meta == META_EMPTY {
                break;
            }
            if meta == META_USED_BASE + idx as u64 && region.load(off) == key {
                at = Some(p);
                break;
            }
        }
        let Some(mut p) = at else {
            return;
        };
        region.store(Self::index_slot_offset(layout, p) + 1, META_TOMBSTONE);
        for _ in 0..slots {
            let next = Self::index_slot_offset(layout, (p + 1) % slots);
            let here = Self::index_slot_offset(layout, p);
            if region.load(here + 1) != META_TOMBSTONE || region.load(next + 1) != META_EMPTY {
                break;
            }
            region.store(here + 1, META_EMPTY);
            p = (p + slots - 1) % slots;
        }
    }

    /// Takes the oldest deleted slot that can be reused, locked with `hold`, for `key`:
    /// files its old key's deletion version, raises its incarnation (still absent) and
    /// removes the old key's hash entry. Returns the slot and its new incarnation.
    fn reclaim(
        &self,
        t: TableId,
        a: &mut Alloc,
        hold: u64,
        key: u64,
    ) -> Result<(u32, u64), StoreError> {
        let layout = *self.catalog.layout(t);
        let region = self.region(t);
        let mut busy = false;
        for _ in 0..a.deleted.len() {
            let Some(idx) = a.pop() else {
                break;
            };
            let off = layout.record_offset(idx) as usize;
            let v = region.load(off + H_VERSION as usize);
            if v & VERSION_ABSENT == 0 {
                // Revived by its key since.
                continue;
            }
            let inc = incarnation(v);
            if inc >= INCARNATION_MAX {
                // Retired: its version words are used up.
                continue;
            }
            if !take_free_lock(
                region,
                off + H_LOCK as usize,
                self.catalog.lock_word(),
                hold,
            ) {
                busy = true;
                a.queue(idx);
                continue;
            }
            let old_key = region.load(off + H_KEY as usize);
            let old_version = key_version(v);
            // An undone insert of a key that never existed leaves nothing to remember.
            if old_version >= INITIAL_VERSION {
                // What the sizing counted; more is a workload that misdeclared its keys.
                let max = self.catalog.spec(t).gone_keys_max_per_node;
                assert!(
                    a.gone.len() < max as usize || a.gone.contains_key(&old_key),
                    "table {}: deleting key {old_key} files more than the {max} deleted keys the workload declared (gone_keys_max_per_node)",
                    self.name(t)
                );
                a.gone.insert(old_key, old_version);
                if let Some(o) = &self.shards[t.0 as usize].ordered {
                    // Before the slot changes: a scan reads slot versions under this lock.
                    o.lock().insert(old_key, ORDERED_GONE | old_version);
                }
            }
            region.store(
                off + H_VERSION as usize,
                VERSION_ABSENT | make_version(inc + 1, 0),
            );
            self.unindex(t, old_key, idx);
            return Ok((idx, inc + 1));
        }
        Err(if busy {
            StoreError::Busy {
                table: self.name(t),
                key,
            }
        } else {
            StoreError::Full {
                table: self.name(t),
                capacity: layout.capacity,
            }
        })
    }

    /// Inserts a live record with a whole stored `payload` (engine words included) whose
    /// lock word is `lock` (0 for free): a transaction inserts its records locked and frees
    /// them with its other writes. A key that still owns its deleted slot gets it back, at
    /// the version after its deletion's; otherwise a never-used slot, or else a reclaimed
    /// one (see the module docs), at the version after the key's deletion if it had one.
    /// Returns the slot and the version word installed.
    pub fn insert_locked(
        &self,
        t: TableId,
        key: u64,
        payload: &[u64],
        lock: u64,
    ) -> Result<(u32, u64), StoreError> {
        if !self.catalog.holds(t, key, self.node) {
            return Err(StoreError::NotHere {
                table: self.name(t),
                key,
                node: self.node.0,
            });
        }
        let layout = *self.catalog.layout(t);
        if payload.len() != layout.payload_words as usize {
            return Err(StoreError::PayloadWords {
                table: self.name(t),
                words: payload.len(),
                expected: layout.payload_words,
            });
        }
        let shard = &self.shards[t.0 as usize];
        let mut a = shard.alloc.lock();
        let region = self.region(t);
        if let Some(idx) = self.find_slot(t, key) {
            let off = layout.record_offset(idx) as usize;
            let old = region.load(off + H_VERSION as usize);
            if old & VERSION_ABSENT == 0 {
                return Err(StoreError::Duplicate {
                    table: self.name(t),
                    key,
                });
            }
            // Revive the deleted record. A coordinator with a stale cached location may
            // hold its lock for a moment (it releases on seeing it absent): take the lock
            // by CAS so that release cannot free the inserter's lock.
            if lock != 0
                && !take_free_lock(
                    region,
                    off + H_LOCK as usize,
                    self.catalog.lock_word(),
                    lock,
                )
            {
                return Err(StoreError::Busy {
                    table: self.name(t),
                    key,
                });
            }
            for j in 0..layout.version_slots - 1 {
                // Older versions of the previous incarnation are gone with it.
                region.store(off + layout.old_header_offset(j) as usize + 1, 0);
            }
            region.write_from(off + HEADER_WORDS as usize, payload);
            region.store(off + H_RTS as usize, 0);
            region.store(off + H_WTS as usize, 0);
            region.store(off + H_AUX as usize, 0);
            let version = (old & !VERSION_ABSENT) + 1;
            region.store(off + H_VERSION as usize, version);
            if let Some(o) = &shard.ordered {
                o.lock().insert(key, idx as u64);
            }
            return Ok((idx, version));
        }
        let gone = a.gone.get(&key).copied();
        let version_of_key = gone.map_or(INITIAL_VERSION, |v| v + 1);
        // A reclaim needs no free index slot of its own: it frees the old key's.
        let hold = if lock != 0 { lock } else { LOCK_RECLAIM };
        let reclaimed = if a.next_fresh < layout.capacity {
            None
        } else {
            Some(self.reclaim(t, &mut a, hold, key)?)
        };
        // The first empty or tombstone slot: `key` is not in the index, so a probe for it
        // may stop at the slot it gets.
        let Some(slot) = self.free_index_slot(t, key) else {
            if let Some((idx, _)) = reclaimed {
                // Give the slot back: absent, unlocked, named by no index entry.
                region.store(layout.record_offset(idx) as usize + H_LOCK as usize, 0);
                a.queue(idx);
            }
            return Err(StoreError::IndexFull {
                table: self.name(t),
                slots: layout.index_groups as u64 * GROUP_SLOTS as u64,
            });
        };
        let (idx, inc) = match reclaimed {
            Some(r) => r,
            None => {
                a.next_fresh += 1;
                (a.next_fresh - 1, 0)
            }
        };
        let off = layout.record_offset(idx) as usize;
        let version = make_version(inc, version_of_key);
        // The record is complete before its version word says live and before the index
        // names it: a reader that sees it live there sees the new key.
        region.store(off + H_KEY as usize, key);
        if reclaimed.is_some() {
            for j in 0..layout.version_slots - 1 {
                // The previous key's older versions are not this key's.
                region.store(off + layout.old_header_offset(j) as usize + 1, 0);
            }
        }
        region.write_from(off + HEADER_WORDS as usize, payload);
        region.store(off + H_RTS as usize, 0);
        region.store(off + H_WTS as usize, 0);
        region.store(off + H_AUX as usize, 0);
        if reclaimed.is_none() {
            region.store(off + H_LOCK as usize, lock);
        }
        region.store(off + H_VERSION as usize, version);
        if reclaimed.is_some() && lock == 0 {
            region.store(off + H_LOCK as usize, 0);
        }
        // Publish in the index: key before meta, so a reader that sees the meta sees the key.
        region.store(slot, key);
        region.store(slot + 1, META_USED_BASE + idx as u64);
        if gone.is_some() {
            a.gone.remove(&key);
        }
        if let Some(o) = &shard.ordered {
            o.lock().insert(key, idx as u64);
        }
        Ok((idx, version))
    }

    /// Removes `key`: marks its record absent at the next version and queues the slot for
    /// reuse; until it is reclaimed the hash and ordered indexes keep naming it, so a stale
    /// cached location still finds the key's own record, absent, and a re-insert revives
    /// it. Returns the slot and the version word of the deletion.
    pub fn delete(&self, t: TableId, key: u64) -> Result<(u32, u64), StoreError> {
        let layout = *self.catalog.layout(t);
        let mut a = self.shards[t.0 as usize].alloc.lock();
        let region = self.region(t);
        let not_found = || StoreError::NotFound {
            table: self.name(t),
            key,
        };
        let idx = self.find_slot(t, key).ok_or_else(not_found)?;
        let off = layout.record_offset(idx) as usize;
        let v = region.load(off + H_VERSION as usize);
        if v & VERSION_ABSENT != 0 {
            return Err(not_found());
        }
        // The ordered index keeps the key too: a scan then reports its absence with the
        // version that made it absent (what the history checker needs for phantoms).
        region.store(off + H_VERSION as usize, (v + 1) | VERSION_ABSENT);
        a.queue(idx);
        Ok((idx, v + 1))
    }

    /// Takes back an insert of `key` that holds the lock `lock` (its attempt aborts): the
    /// record goes back to absent at the version before the insert's, unlocked, and its
    /// slot is queued for reuse; a key that had never existed leaves the ordered index
    /// again. Fails with `NotFound` if `key` is not a live record locked by `lock`.
    pub fn undo_insert(&self, t: TableId, key: u64, lock: u64) -> Result<(), StoreError> {
        let layout = *self.catalog.layout(t);
        let shard = &self.shards[t.0 as usize];
        let mut a = shard.alloc.lock();
        let region = self.region(t);
        let not_found = || StoreError::NotFound {
            table: self.name(t),
            key,
        };
        let idx = self.find_slot(t, key).ok_or_else(not_found)?;
        let off = layout.record_offset(idx) as usize;
        let v = region.load(off + H_VERSION as usize);
        if v & VERSION_ABSENT != 0 || region.load(off + H_LOCK as usize) != lock {
            return Err(not_found());
        }
        let before = v - 1;
        region.store(off + H_VERSION as usize, before | VERSION_ABSENT);
        if key_version(before) < INITIAL_VERSION {
            if let Some(o) = &shard.ordered {
                o.lock().remove(key);
            }
        }
        region.store(off + H_LOCK as usize, 0);
        a.queue(idx);
        Ok(())
    }

    /// The stored payload (engine words included) of slot `idx`.
    pub fn read_payload(&self, t: TableId, idx: u32, out: &mut Vec<u64>) {
        let layout = self.catalog.layout(t);
        out.resize(layout.payload_words as usize, 0);
        self.region(t).read_into(
            layout.record_offset(idx) as usize + HEADER_WORDS as usize,
            out,
        );
    }

    /// Up to `limit` live `(key, record slot)` pairs with `lo <= key <= hi`, ascending,
    /// or descending when `reverse`.
    pub fn scan(
        &self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
        out: &mut Vec<(u64, u32)>,
    ) -> Result<(), StoreError> {
        let mut all = Vec::new();
        self.scan_versions(t, lo, hi, limit, reverse, &mut all)?;
        out.extend(
            all.into_iter()
                .filter(|(_, _, v)| v & VERSION_ABSENT == 0)
                .map(|(k, idx, _)| (k, idx)),
        );
        Ok(())
    }

    /// Like [`Store::scan`], with each key's version (its [`key_version`], without the
    /// slot's incarnation), and with the deleted keys met on the way (their version has
    /// [`VERSION_ABSENT`]; one whose slot was reclaimed comes with [`NO_SLOT`]): up to
    /// `limit` live keys.
    pub fn scan_versions(
        &self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
        out: &mut Vec<(u64, u32, u64)>,
    ) -> Result<(), StoreError> {
        let Some(o) = &self.shards[t.0 as usize].ordered else {
            return Err(StoreError::NoOrderedIndex {
                table: self.name(t),
            });
        };
        let layout = self.catalog.layout(t);
        let region = self.region(t);
        let mut pairs = Vec::new();
        let o = o.lock();
        // Deleted keys do not count towards the limit, so the range is read whole.
        if reverse {
            o.range_rev(lo, hi, usize::MAX, &mut pairs);
        } else {
            o.range(lo, hi, usize::MAX, &mut pairs);
        }
        let mut live = 0;
        for (k, val) in pairs {
            if live >= limit {
                break;
            }
            if val & ORDERED_GONE != 0 {
                out.push((k, NO_SLOT, VERSION_ABSENT | (val & !ORDERED_GONE)));
                continue;
            }
            let idx = val as u32;
            let v = region.load(layout.record_offset(idx) as usize + H_VERSION as usize);
            live += (v & VERSION_ABSENT == 0) as usize;
            out.push((k, idx, (v & VERSION_ABSENT) | key_version(v)));
        }
        Ok(())
    }

    /// Reads a whole tuple (header and payload) of slot `idx`.
    pub fn read_tuple(&self, t: TableId, idx: u32, out: &mut [u64]) {
        let layout = self.catalog.layout(t);
        debug_assert!(out.len() <= layout.record_words as usize);
        self.region(t)
            .read_into(layout.record_offset(idx) as usize, out);
    }

    /// Record slots handed out on this node, live, deleted or reclaimed: slots
    /// `0..used_slots` are the ones that ever held a record.
    pub fn used_slots(&self, t: TableId) -> u32 {
        self.shards[t.0 as usize].alloc.lock().next_fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Partition, TableSpec};

    /// The churn tests' key spaces are a few thousand keys at most.
    const GONE_KEYS_TESTS: u32 = 10_000;

    fn store(capacity: u32) -> Store {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 2,
            capacity_per_node: capacity,
            partition: Partition::Modulo,
            ordered: true,
            gone_keys_max_per_node: GONE_KEYS_TESTS,
        };
        let catalog = Arc::new(Catalog::new(1, vec![spec], vec![]));
        let mem = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        Store::new(catalog, mem)
    }

    #[test]
    fn store_insert_lookup_delete_agree_with_a_model_and_one_sided_probes() {
        let s = store(3000);
        let t = TableId(0);
        let mut model = std::collections::BTreeMap::new();
        let mut x = 12345u64;
        for step in 0..6000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % 4000;
            if x % 3 == 0 {
                assert_eq!(
                    s.delete(t, key).is_ok(),
                    model.remove(&key).is_some(),
                    "delete {key} at {step}"
                );
            } else {
                match s.insert(t, key, &[key, step]) {
                    Ok(idx) => assert!(
                        model.insert(key, idx).is_none(),
                        "insert {key} succeeded twice"
                    ),
                    Err(StoreError::Duplicate { .. }) => assert!(model.contains_key(&key)),
                    Err(StoreError::Full { .. }) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let layout = *s.catalog.layout(t);
        for key in 0..4000 {
            assert_eq!(s.lookup(t, key), model.get(&key).copied(), "lookup {key}");
            // What a one-sided reader does: READ groups and probe them.
            let mut g = layout.home_group(key);
            let mut words = [0u64; GROUP_WORDS as usize];
            let found = loop {
                s.region(t)
                    .read_into(layout.group_offset(g) as usize, &mut words);
                match probe_group(&words, key) {
                    GroupProbe::Found(i) => break Some(i),
                    GroupProbe::Absent => break None,
                    GroupProbe::Continue => g = (g + 1) & (layout.index_groups - 1),
                }
            };
            // A deleted key keeps its slot, whose record says absent.
            let live = found.filter(|&i| s.live_key_at(t, i, key));
            assert_eq!(live, model.get(&key).copied(), "one-sided probe of {key}");
        }
        let mut out = Vec::new();
        s.scan(t, 0, u64::MAX, usize::MAX, false, &mut out).unwrap();
        assert_eq!(out, model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
    }

    #[test]
    #[should_panic(expected = "table t: deleting key 1 files more than the 0 deleted keys")]
    fn store_refuses_to_file_more_deleted_keys_than_its_table_declared() {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 2,
            capacity_per_node: 1,
            partition: Partition::Modulo,
            ordered: true,
            gone_keys_max_per_node: 0,
        };
        let catalog = Arc::new(Catalog::new(1, vec![spec], vec![]));
        let mem = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        let s = Store::new(catalog, mem);
        let t = TableId(0);
        s.insert(t, 1, &[1, 0]).unwrap();
        s.delete(t, 1).unwrap();
        // Key 2 takes key 1's slot: 1 would be a deleted key the sizing did not count.
        let _ = s.insert(t, 2, &[2, 0]);
    }

    #[test]
    fn store_revives_a_deleted_key_in_its_slot_at_the_next_version() {
        let s = store(4);
        let t = TableId(0);
        let idx = s.insert(t, 5, &[1, 2]).unwrap();
        assert_eq!(s.delete(t, 5), Ok((idx, INITIAL_VERSION + 1)));
        assert_eq!(s.lookup(t, 5), None);
        assert!(
            matches!(s.delete(t, 5), Err(StoreError::NotFound { key: 5, .. })),
            "already deleted"
        );
        let mut p = Vec::new();
        seal(t, 5, 77, &[3, 4], &mut p);
        assert_eq!(
            s.insert_locked(t, 5, &p, 9),
            Ok((idx, INITIAL_VERSION + 2)),
            "same slot, a fresh version: no aliasing of the loaded one"
        );
        assert_eq!(s.lookup(t, 5), Some(idx));
        let mut out = Vec::new();
        s.read_payload(t, idx, &mut out);
        assert_eq!(out, p);
        assert!(payload_intact(t, 5, &out));
        assert_eq!(s.used_slots(t), 1);
    }

    #[test]
    fn store_rejects_a_full_table_and_a_key_of_another_node() {
        let s = store(2);
        let t = TableId(0);
        s.insert(t, 1, &[0, 0]).unwrap();
        s.insert(t, 2, &[0, 0]).unwrap();
        assert_eq!(
            s.insert(t, 3, &[0, 0]),
            Err(StoreError::Full {
                table: "t".into(),
                capacity: 2
            })
        );
        assert_eq!(
            s.insert(t, 1, &[0, 0]),
            Err(StoreError::Duplicate {
                table: "t".into(),
                key: 1
            })
        );
    }

    /// What a coordinator caches and later checks: the slot, the key word and the version
    /// word it read there.
    fn snapshot(s: &Store, t: TableId, idx: u32) -> (u64, u64) {
        let mut h = [0u64; HEADER_WORDS as usize];
        s.read_tuple(t, idx, &mut h);
        (h[H_KEY as usize], h[H_VERSION as usize])
    }

    #[test]
    fn store_churn_of_inserts_and_deletes_never_fills_a_small_table() {
        let cap = 8u32;
        let s = store(cap);
        let t = TableId(0);
        let mut model: std::collections::BTreeMap<u64, u64> = Default::default();
        // Each key's versions so far: they continue across the slots it lives in.
        let mut last_version: HashMap<u64, u64> = HashMap::new();
        let mut x = 99u64;
        for step in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = x % 40;
            if model.len() as u32 == cap || (x >> 8) % 2 == 0 {
                if let Some(&k) = model.keys().nth((x >> 16) as usize % model.len().max(1)) {
                    let (_, v) = s.delete(t, k).unwrap();
                    assert_eq!(key_version(v), last_version[&k] + 1, "delete of {k}");
                    last_version.insert(k, key_version(v));
                    model.remove(&k);
                }
                continue;
            }
            let mut p = Vec::new();
            seal(t, key, step + 1, &[key, step], &mut p);
            match s.insert_locked(t, key, &p, 0) {
                Ok((idx, v)) => {
                    assert!(model.insert(key, step).is_none(), "{key} inserted twice");
                    let want = last_version.get(&key).map_or(INITIAL_VERSION, |v| v + 1);
                    assert_eq!(key_version(v), want, "insert of {key} at step {step}");
                    last_version.insert(key, want);
                    assert_eq!(s.lookup(t, key), Some(idx));
                }
                Err(StoreError::Duplicate { .. }) => assert!(model.contains_key(&key)),
                Err(e) => panic!("step {step}: {e} with {} live keys", model.len()),
            }
        }
        assert_eq!(s.used_slots(t), cap, "every slot was used, none added");
        // Every live key is found where the index says, with its own payload; every other
        // key is absent, and a scan reports each deleted key at its deletion version.
        let mut out = Vec::new();
        s.scan_versions(t, 0, 39, usize::MAX, false, &mut out)
            .unwrap();
        for key in 0..40u64 {
            let seen = out.iter().find(|o| o.0 == key);
            match model.get(&key) {
                Some(&step) => {
                    let idx = s.lookup(t, key).expect("live key found");
                    let mut p = Vec::new();
                    s.read_payload(t, idx, &mut p);
                    assert!(payload_intact(t, key, &p));
                    assert_eq!(p[ENGINE_PAYLOAD_WORDS as usize + 1], step);
                    assert_eq!(seen.map(|o| o.2), Some(last_version[&key]));
                }
                None => {
                    assert_eq!(s.lookup(t, key), None, "{key} deleted");
                    let want = last_version.get(&key).map(|v| v | VERSION_ABSENT);
                    assert_eq!(seen.map(|o| o.2), want, "scan of deleted {key}");
                }
            }
        }
    }

    #[test]
    fn store_reuse_rejects_a_stale_cached_location_and_never_repeats_a_version_word() {
        let s = store(1);
        let t = TableId(0);
        let idx = s.insert(t, 5, &[1, 2]).unwrap();
        let (k5, v5) = snapshot(&s, t, idx);
        assert_eq!((k5, v5), (5, INITIAL_VERSION));
        s.delete(t, 5).unwrap();
        // The only slot goes to key 6: a reader of 5 by its cached location sees key 6, and a
        // validation of the version word it read sees another word.
        let idx6 = s.insert(t, 6, &[3, 4]).unwrap();
        assert_eq!(idx6, idx);
        assert!(!s.live_key_at(t, idx, 5));
        assert!(s.live_key_at(t, idx, 6));
        let (k6, v6) = snapshot(&s, t, idx);
        assert_eq!(k6, 6);
        assert!(
            v6 > v5,
            "a reused slot's version word grows: {v6:#x} after {v5:#x}"
        );
        assert_eq!(key_version(v6), INITIAL_VERSION, "key 6's first version");
        assert_eq!(incarnation(v6), 1);
        assert_eq!(s.lookup(t, 5), None);
        // Key 5 comes back in the reclaimed slot: its versions continue after its deletion.
        s.delete(t, 6).unwrap();
        let mut p = Vec::new();
        seal(t, 5, 77, &[9, 9], &mut p);
        let (i, v) = s.insert_locked(t, 5, &p, 42).unwrap();
        assert_eq!(i, idx);
        assert_eq!(key_version(v), INITIAL_VERSION + 2);
        assert!(v > v6 && incarnation(v) == 2);
        // A locked slot is not reclaimed: the table is full until it is unlocked.
        assert!(matches!(
            s.insert(t, 7, &[0, 0]),
            Err(StoreError::Full { capacity: 1, .. })
        ));
        s.undo_insert(t, 5, 42).unwrap();
        assert_eq!(s.lookup(t, 5), None);
        let mut out = Vec::new();
        s.scan_versions(t, 0, 10, usize::MAX, false, &mut out)
            .unwrap();
        assert_eq!(
            out,
            vec![
                (5, idx, VERSION_ABSENT | (INITIAL_VERSION + 1)),
                (6, NO_SLOT, VERSION_ABSENT | (INITIAL_VERSION + 1)),
            ],
            "5 owns the slot again, absent; 6's deletion is kept without a slot"
        );
        // A stale locker holding the absent slot makes a reclaim wait, not take it.
        let off = s.catalog.layout(t).record_offset(idx) as usize;
        s.region(t).store(off + H_LOCK as usize, 1234);
        assert!(matches!(
            s.insert(t, 8, &[0, 0]),
            Err(StoreError::Busy { .. })
        ));
        s.region(t).store(off + H_LOCK as usize, 0);
        assert_eq!(s.insert(t, 8, &[0, 0]), Ok(idx));
        assert_eq!(
            s.region(t).load(off + H_LOCK as usize),
            0,
            "loaded unlocked"
        );
    }

    #[test]
    fn store_errors_are_typed_not_panics() {
        let s = store(2);
        let t = TableId(0);
        assert!(matches!(
            s.insert_locked(t, 1, &[0; 3], 0),
            Err(StoreError::PayloadWords { words: 3, .. })
        ));
        assert!(matches!(s.delete(t, 1), Err(StoreError::NotFound { .. })));
        assert!(matches!(
            s.undo_insert(t, 1, 9),
            Err(StoreError::NotFound { .. })
        ));
        let spec = TableSpec {
            name: "h".into(),
            payload_words: 1,
            capacity_per_node: 4,
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        let catalog = Arc::new(Catalog::new(2, vec![spec], vec![]));
        let mem = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        let h = Store::new(catalog, mem);
        let mut out = Vec::new();
        let e = h.scan_versions(t, 0, 9, 1, false, &mut out).unwrap_err();
        assert_eq!(e.to_string(), "table h has no ordered index to scan");
        assert!(matches!(
            h.insert(t, 3, &[0]),
            Err(StoreError::NotHere { node: 0, .. })
        ));
    }
}
