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
    Duplicate { table: String, key: u64 },
    Full { table: String, capacity: u32 },
    NotHere { table: String, key: u64, node: u16 },
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

    /// Finds `key`'s record slot through the hash index.
    pub fn lookup(&self, t: TableId, key: u64) -> Option<u32> {
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

    /// Inserts a live, unlocked record with version 1.
    pub fn insert(&self, t: TableId, key: u64, payload: &[u64]) -> Result<u32, StoreError> {
        self.insert_locked(t, key, payload, 0)
    }

    /// Inserts a live record with version 1 whose lock word is `lock` (0 for free): a
    /// transaction inserts its records locked and frees them with its other writes.
    pub fn insert_locked(
        &self,
        t: TableId,
        key: u64,
        payload: &[u64],
        lock: u64,
    ) -> Result<u32, StoreError> {
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
            spec.payload_words as usize,
            "table {}: payload of {} words",
            spec.name,
            payload.len()
        );
        let shard = &self.shards[t.0 as usize];
        let mut next_free = shard.next_free.lock();
        if self.lookup(t, key).is_some() {
            return Err(StoreError::Duplicate {
                table: spec.name.clone(),
                key,
            });
        }
        if *next_free >= layout.capacity {
            return Err(StoreError::Full {
                table: spec.name.clone(),
                capacity: layout.capacity,
            });
        }
        let idx = *next_free;
        *next_free += 1;
        let region = self.region(t);
        let off = layout.record_offset(idx) as usize;
        region.write_from(off + HEADER_WORDS as usize, payload);
        region.store(off + H_KEY as usize, key);
        region.store(off + H_RTS as usize, 0);
        region.store(off + H_WTS as usize, 0);
        region.store(off + H_AUX as usize, 0);
        region.store(off + H_LOCK as usize, lock);
        region.store(off + H_VERSION as usize, 1);
        // Publish in the index: first slot that is empty (tombstones are not reused, so a
        // probe never stops early on a slot that once held this key).
        let mut group = layout.home_group(key);
        let mut placed = false;
        'probe: for _ in 0..layout.index_groups {
            let g = layout.group_offset(group) as usize;
            for s in 0..GROUP_SLOTS as usize {
                let slot = g + s * SLOT_WORDS as usize;
                if region.load(slot + 1) == META_EMPTY {
                    region.store(slot, key);
                    region.store(slot + 1, META_USED_BASE + idx as u64);
                    placed = true;
                    break 'probe;
                }
            }
            group = (group + 1) & (layout.index_groups - 1);
        }
        assert!(
            placed,
            "table {}: hash index full with {} of {} records",
            spec.name, idx, layout.capacity
        );
        if let Some(o) = &shard.ordered {
            o.lock().insert(key, idx as u64);
        }
        Ok(idx)
    }

    /// Removes `key`: marks its record absent, tombstones its index slot, drops it from the
    /// ordered index. Returns the freed slot. (Slots are not reused: a stale cached location
    /// then still names a record whose header says absent.)
    pub fn delete(&self, t: TableId, key: u64) -> Option<u32> {
        let layout = *self.catalog.layout(t);
        let shard = &self.shards[t.0 as usize];
        let _guard = shard.next_free.lock();
        let region = self.region(t);
        let mut group = layout.home_group(key);
        for _ in 0..layout.index_groups {
            let g = layout.group_offset(group) as usize;
            for s in 0..GROUP_SLOTS as usize {
                let slot = g + s * SLOT_WORDS as usize;
                let meta = region.load(slot + 1);
                if meta == META_EMPTY {
                    return None;
                }
                if meta >= META_USED_BASE && region.load(slot) == key {
                    let idx = (meta - META_USED_BASE) as u32;
                    let off = layout.record_offset(idx) as usize;
                    let v = region.load(off + H_VERSION as usize);
                    region.store(off + H_VERSION as usize, (v + 1) | VERSION_ABSENT);
                    region.store(slot + 1, META_TOMBSTONE);
                    if let Some(o) = &shard.ordered {
                        o.lock().remove(key);
                    }
                    return Some(idx);
                }
            }
            group = (group + 1) & (layout.index_groups - 1);
        }
        None
    }

    /// Up to `limit` `(key, record slot)` pairs with `lo <= key <= hi`, ascending, or
    /// descending when `reverse`. Panics if the table keeps no ordered index.
    pub fn scan(
        &self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: usize,
        reverse: bool,
        out: &mut Vec<(u64, u32)>,
    ) {
        let Some(o) = &self.shards[t.0 as usize].ordered else {
            panic!(
                "table {} has no ordered index to scan",
                self.catalog.spec(t).name
            );
        };
        let mut pairs = Vec::new();
        let o = o.lock();
        if reverse {
            o.range_rev(lo, hi, limit, &mut pairs);
        } else {
            o.range(lo, hi, limit, &mut pairs);
        }
        out.extend(pairs.into_iter().map(|(k, v)| (k, v as u32)));
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
            assert_eq!(found, model.get(&key).copied(), "one-sided probe of {key}");
        }
        let mut out = Vec::new();
        s.scan(t, 0, u64::MAX, usize::MAX, false, &mut out);
        assert_eq!(out, model.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>());
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
