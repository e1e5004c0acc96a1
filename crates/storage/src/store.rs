//! One node's share of the database: its tables' regions, local index maintenance
//! (insert, delete, lookup) and the ordered indexes for range scans.
//!
//! Inserts and deletes always run on the owning node's CPU (locally or inside an RPC
//! handler), serialised per table by a mutex; lookups and record access are lock-free reads
//! of registered memory, so one-sided readers on other nodes see the same structures.

use crate::layout::*;
use crate::ordered::OrderedIndex;
use atoll_fabric::{NodeId, NodeMemory, Region, RegionId};
use parking_lot::Mutex;
use std::sync::Arc;

/// Why a store operation could not be done.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreError {
    Duplicate {
        table: String,
        key: u64,
    },
    Full {
        table: String,
        capacity: u32,
    },
    /// No free hash-index slot; cannot happen while a table's capacity is at most half its
    /// index slots (as layouts size them), since a key keeps its index slot when deleted.
    IndexFull {
        table: String,
        slots: u64,
    },
    NotHere {
        table: String,
        key: u64,
        node: u16,
    },
    /// A deleted record being revived is locked for a moment by a coordinator holding a
    /// stale location: retry.
    Busy {
        table: String,
        key: u64,
    },
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Duplicate { table, key } => {
                write!(f, "table {table}: key {key} already exists")
            }
            StoreError::Full { table, capacity } => {
                write!(
                    f,
                    "table {table}: all {capacity} record slots of this node are used"
                )
            }
            StoreError::Busy { table, key } => {
                write!(
                    f,
                    "table {table}: key {key}'s deleted record is briefly locked"
                )
            }
            StoreError::IndexFull { table, slots } => {
                write!(
                    f,
                    "table {table}: all {slots} hash-index slots of this node are used"
                )
            }
            StoreError::NotHere { table, key, node } => {
                write!(f, "table {table}: key {key} does not live on node {node}")
            }
        }
    }
}

impl std::error::Error for StoreError {}

struct Shard {
    /// Next never-used record slot; guarded with the index writes of this table.
    next_free: Mutex<u32>,
    ordered: Option<Mutex<OrderedIndex>>,
}

/// A node's tables.
pub struct Store {
    pub node: NodeId,
    pub catalog: Arc<Catalog>,
    memory: Arc<NodeMemory>,
    shards: Vec<Shard>,
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
                next_free: Mutex::new(0),
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

    /// Finds `key`'s record slot through the hash index, live or deleted (a deleted key
    /// keeps its slot, so a re-insert continues its version sequence).
    fn find_slot(&self, t: TableId, key: u64) -> Option<u32> {
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

    /// Finds `key`'s live record slot through the hash index.
    pub fn lookup(&self, t: TableId, key: u64) -> Option<u32> {
        let idx = self.find_slot(t, key)?;
        let off = self.catalog.layout(t).record_offset(idx) as usize;
        (self.region(t).load(off + H_VERSION as usize) & VERSION_ABSENT == 0).then_some(idx)
    }

    /// Loads a live, unlocked record of the workload's words `user`, written by
    /// [`LOADER_TAG`] (the initial state), at version [`INITIAL_VERSION`].
    pub fn insert(&self, t: TableId, key: u64, user: &[u64]) -> Result<u32, StoreError> {
        let mut payload = Vec::new();
        seal(t, key, LOADER_TAG, user, &mut payload);
        self.insert_locked(t, key, &payload, 0).map(|(idx, _)| idx)
    }

    /// Inserts a live record with a whole stored `payload` (engine words included) whose
    /// lock word is `lock` (0 for free): a transaction inserts its records locked and frees
    /// them with its other writes. A key deleted before gets its old slot back, at the
    /// version after its deletion's. Returns the slot and the version installed.
    pub fn insert_locked(
        &self,
        t: TableId,
        key: u64,
        payload: &[u64],
        lock: u64,
    ) -> Result<(u32, u64), StoreError> {
        let spec = self.catalog.spec(t);
        if !self.catalog.holds(t, key, self.node) {
            return Err(StoreError::NotHere {
                table: spec.name.clone(),
                key,
                node: self.node.0,
            });
        }
        let layout = *self.catalog.layout(t);
        assert_eq!(
            payload.len(),
            layout.payload_words as usize,
            "table {}: stored payload of {} words",
            spec.name,
            payload.len()
        );
        let shard = &self.shards[t.0 as usize];
        let mut next_free = shard.next_free.lock();
        let region = self.region(t);
        if let Some(idx) = self.find_slot(t, key) {
            let off = layout.record_offset(idx) as usize;
            let old = region.load(off + H_VERSION as usize);
            if old & VERSION_ABSENT == 0 {
                return Err(StoreError::Duplicate {
                    table: spec.name.clone(),
                    key,
                });
            }
            // Revive the deleted record. A coordinator with a stale cached location may
            // hold its lock for a moment (it releases on seeing it absent): take the lock
            // by CAS so that release cannot free the inserter's lock.
            if lock != 0 && region.cas(off + H_LOCK as usize, 0, lock) != 0 {
                return Err(StoreError::Busy {
                    table: spec.name.clone(),
                    key,
                });
            }
            for j in 0..layout.version_slots - 1 {
                // Older versions of the previous incarnation are gone with it.
                region.store(off + layout.old_slot_offset(j) as usize + 1, 0);
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
        if *next_free >= layout.capacity {
            return Err(StoreError::Full {
                table: spec.name.clone(),
                capacity: layout.capacity,
            });
        }
        // The index slot first (the first empty one; tombstones are not reused, so a probe
        // never stops early on a slot that once held this key), so a full index changes
        // nothing.
        let mut group = layout.home_group(key);
        let mut free_slot = None;
        'probe: for _ in 0..layout.index_groups {
            let g = layout.group_offset(group) as usize;
            for s in 0..GROUP_SLOTS as usize {
                let slot = g + s * SLOT_WORDS as usize;
                if region.load(slot + 1) == META_EMPTY {
                    free_slot = Some(slot);
                    break 'probe;
                }
            }
            group = (group + 1) & (layout.index_groups - 1);
        }
        let Some(slot) = free_slot else {
            return Err(StoreError::IndexFull {
                table: spec.name.clone(),
                slots: layout.index_groups as u64 * GROUP_SLOTS as u64,
            });
        };
        let idx = *next_free;
        *next_free += 1;
        let off = layout.record_offset(idx) as usize;
        // The record is complete before the index names it.
        region.write_from(off + HEADER_WORDS as usize, payload);
        region.store(off + H_KEY as usize, key);
        region.store(off + H_RTS as usize, 0);
        region.store(off + H_WTS as usize, 0);
        region.store(off + H_AUX as usize, 0);
        region.store(off + H_LOCK as usize, lock);
        region.store(off + H_VERSION as usize, INITIAL_VERSION);
        // Publish in the index: key before meta, so a reader that sees the meta sees the key.
        region.store(slot, key);
        region.store(slot + 1, META_USED_BASE + idx as u64);
        if let Some(o) = &shard.ordered {
            o.lock().insert(key, idx as u64);
        }
        Ok((idx, INITIAL_VERSION))
    }

    /// Removes `key`: marks its record absent at the next version; the hash and ordered
    /// indexes keep naming the slot, so a stale cached location
    /// still finds the key's own record, absent, and a re-insert revives it. Returns the
    /// slot and the version of the deletion.
    pub fn delete(&self, t: TableId, key: u64) -> Option<(u32, u64)> {
        let layout = *self.catalog.layout(t);
        let shard = &self.shards[t.0 as usize];
        let _guard = shard.next_free.lock();
        let region = self.region(t);
        let idx = self.find_slot(t, key)?;
        let off = layout.record_offset(idx) as usize;
        let v = region.load(off + H_VERSION as usize);
        if v & VERSION_ABSENT != 0 {
            return None;
        }
        // The ordered index keeps the key too: a scan then reports its absence with the
        // version that made it absent (what the history checker needs for phantoms).
        region.store(off + H_VERSION as usize, (v + 1) | VERSION_ABSENT);
        Some((idx, v + 1))
    }

    /// Takes back an insert of `key` that holds the lock `lock` (its attempt aborts): the
    /// record goes back to absent at the version before the insert's, unlocked; a key that
    /// had never existed leaves the ordered index again. Returns false if `key` is not a
    /// live record locked by `lock`.
    pub fn undo_insert(&self, t: TableId, key: u64, lock: u64) -> bool {
        let layout = *self.catalog.layout(t);
        let shard = &self.shards[t.0 as usize];
        let _guard = shard.next_free.lock();
        let region = self.region(t);
        let Some(idx) = self.find_slot(t, key) else {
            return false;
        };
        let off = layout.record_offset(idx) as usize;
        let v = region.load(off + H_VERSION as usize);
        if v & VERSION_ABSENT != 0 || region.load(off + H_LOCK as usize) != lock {
            return false;
        }
        let before = v - 1;
        region.store(off + H_VERSION as usize, before | VERSION_ABSENT);
        if before < INITIAL_VERSION {
            if let Some(o) = &shard.ordered {
                o.lock().remove(key);
            }
        }
        region.store(off + H_LOCK as usize, 0);
        true
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
    /// or descending when `reverse`. Panics if the table keeps no ordered index.
    pub fn scan(
        &self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
        out: &mut Vec<(u64, u32)>,
    ) {
        let mut all = Vec::new();
        self.scan_versions(t, lo, hi, limit, reverse, &mut all);
        out.extend(
            all.into_iter()
                .filter(|(_, _, v)| v & VERSION_ABSENT == 0)
                .map(|(k, idx, _)| (k, idx)),
        );
    }

    /// Like [`Store::scan`], with each key's version word, and with the deleted keys met on
    /// the way (their version has [`VERSION_ABSENT`]): up to `limit` live keys.
    pub fn scan_versions(
        &self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
        out: &mut Vec<(u64, u32, u64)>,
    ) {
        let Some(o) = &self.shards[t.0 as usize].ordered else {
            panic!(
                "table {} has no ordered index to scan",
                self.catalog.spec(t).name
            );
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
        for (k, idx) in pairs {
            if live >= limit {
                break;
            }
            let idx = idx as u32;
            let v = region.load(layout.record_offset(idx) as usize + H_VERSION as usize);
            live += (v & VERSION_ABSENT == 0) as usize;
            out.push((k, idx, v));
        }
    }

    /// Reads a whole tuple (header and payload) of slot `idx`.
    pub fn read_tuple(&self, t: TableId, idx: u32, out: &mut [u64]) {
        let layout = self.catalog.layout(t);
        debug_assert!(out.len() <= layout.record_words as usize);
        self.region(t)
            .read_into(layout.record_offset(idx) as usize, out);
    }

    /// Records used on this node (slots handed out, including deleted ones).
    pub fn used_slots(&self, t: TableId) -> u32 {
        *self.shards[t.0 as usize].next_free.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Partition, TableSpec};

    fn store(capacity: u32) -> Store {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 2,
            capacity_per_node: capacity,
            partition: Partition::Modulo,
            ordered: true,
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
                    s.delete(t, key).is_some(),
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
            let live = found.filter(|&i| {
                let off = layout.record_offset(i) as usize + H_VERSION as usize;
                s.region(t).load(off) & VERSION_ABSENT == 0
            });
            assert_eq!(live, model.get(&key).copied(), "one-sided probe of {key}");
        }
        let mut out = Vec::new();
        s.scan(t, 0, u64::MAX, usize::MAX, false, &mut out);
        assert_eq!(out, model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
    }

    #[test]
    fn store_revives_a_deleted_key_in_its_slot_at_the_next_version() {
        let s = store(4);
        let t = TableId(0);
        let idx = s.insert(t, 5, &[1, 2]).unwrap();
        assert_eq!(s.delete(t, 5), Some((idx, INITIAL_VERSION + 1)));
        assert_eq!(s.lookup(t, 5), None);
        assert_eq!(s.delete(t, 5), None, "already deleted");
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
}
