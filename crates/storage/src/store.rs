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

use crate::budget::{MemoryBudget, Refusal};
use crate::layout::*;
use crate::ordered::{self, OrderedIndex};
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
    /// No free hash-index slot in the key's bucket and no overflow group left to chain.
    #[error("table {table}: all {groups} hash-index groups of this node are used")]
    IndexFull { table: String, groups: u32 },
    /// Growing the table would take the run over its memory budget.
    #[error("{0}")]
    OverBudget(Refusal),
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

/// Most bytes a table takes from the run's budget at a time, for record slots, index
/// groups or heap: a slab, so a large table asks once per thousands of inserts. A small
/// one asks for what it holds again (from [`PAGE_BYTES`]), so a table of a few records
/// takes a page, not a slab.
pub const SLAB_BYTES: u64 = 1 << 20;
/// The least bytes taken at a time: a memory page.
pub const PAGE_BYTES: u64 = 4096;

/// Units to take next for a structure of `held` units of `unit_bytes` each: doubling from a
/// page up to a slab.
fn next_take(held: u64, unit_bytes: u64) -> u64 {
    let bytes = (held * unit_bytes).clamp(PAGE_BYTES, SLAB_BYTES);
    (bytes / unit_bytes).max(1)
}

/// Bytes of a memory word.
const WORD_BYTES: u64 = 8;

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
    /// The index's level `L` and split pointer: buckets `0..2^L + split` exist, and
    /// `bucket_at(h, L)` is split when it is below `split`.
    level: u8,
    split: u32,
    /// Index entries naming a record (used slots, stale copies of split buckets aside).
    entries: u64,
    /// Overflow groups chained so far (after the bucket heads).
    overflow_used: u32,
    /// What this table took from the budget so far, and what it covers: record slots,
    /// bucket heads and overflow groups.
    charged_bytes: u64,
    records_charged: u32,
    heads_charged: u32,
    overflow_charged: u32,
    /// Heap bytes a growing table's ordered index and deleted keys hold, and took.
    heap_bytes: u64,
    heap_charged: u64,
}

impl StoreError {
    /// Whether this refusal is a limit reached (the table, its index or the budget), which
    /// no retry of the same insert gets past.
    pub fn is_capacity(&self) -> bool {
        matches!(
            self,
            StoreError::Full { .. } | StoreError::IndexFull { .. } | StoreError::OverBudget(_)
        )
    }
}

impl Alloc {
    /// Buckets the index has now.
    fn buckets(&self) -> u32 {
        (1u32 << self.level) + self.split
    }

    /// The bucket holding keys of hash `h` now.
    fn bucket_of(&self, h: u64) -> u32 {
        let b = bucket_at(h, self.level);
        if b < self.split {
            bucket_at(h, self.level + 1)
        } else {
            b
        }
    }

    /// The level of bucket `b` now.
    fn level_of(&self, b: u32) -> u8 {
        if b < self.split || b >= 1u32 << self.level {
            self.level + 1
        } else {
            self.level
        }
    }

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

/// Whether an insert takes back the deleted slot its key still owns.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Revive {
    Yes,
    No,
}

struct Shard {
    alloc: Mutex<Alloc>,
    /// Record slots handed out (`Alloc::next_fresh`), readable without the lock.
    high_water: std::sync::atomic::AtomicU32,
    /// Lock order: `alloc`, then `ordered`.
    ordered: Option<Mutex<OrderedIndex>>,
}

/// A node's tables.
pub struct Store {
    pub node: NodeId,
    pub catalog: Arc<Catalog>,
    memory: Arc<NodeMemory>,
    shards: Vec<Shard>,
    budget: Arc<MemoryBudget>,
    /// Copies of this store each byte it grows by is charged for ([`Store::charge_copies`]):
    /// 1 alone; a replicated partition's primary pays for its backups' replicas too, and a
    /// replica, prepaid so, 0 (it never stalls where its primary grew).
    copies_charged: std::sync::atomic::AtomicU64,
}

/// Takes the `LOCK` word at `at` to `to` by one CAS if no transaction holds it: free is 0
/// under [`LockWord::Owner`], and any unlocked commit id under [`LockWord::CommitId`] (a
/// deleted record's keeps its deletion's commit id). Whether it was free and is now `to`.
fn take_free_lock(region: &Region, at: usize, lock_word: LockWord, to: u64) -> bool {
    let w = region.load(at);
    !lock_word.held(w) && region.cas(at, w, to) == w
}

impl Store {
    /// A store with no memory budget (tools and tests that build one by hand).
    pub fn new(catalog: Arc<Catalog>, memory: Arc<NodeMemory>) -> Self {
        Self::with_budget(catalog, memory, Arc::new(MemoryBudget::unlimited()))
            .expect("an unlimited budget refuses nothing")
    }

    /// A store whose tables take what they grow to from `budget`: lays out every table's
    /// first buckets (each table's index at its initial level) and takes their bytes.
    pub fn with_budget(
        catalog: Arc<Catalog>,
        memory: Arc<NodeMemory>,
        budget: Arc<MemoryBudget>,
    ) -> Result<Self, StoreError> {
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
                    level: catalog.layout(TableId(t as u16)).level_initial,
                    split: 0,
                    entries: 0,
                    overflow_used: 0,
                    charged_bytes: 0,
                    records_charged: 0,
                    heads_charged: 0,
                    overflow_charged: 0,
                    heap_bytes: 0,
                    heap_charged: 0,
                }),
                high_water: std::sync::atomic::AtomicU32::new(0),
                ordered: catalog
                    .spec(TableId(t as u16))
                    .ordered
                    .then(|| Mutex::new(OrderedIndex::new())),
            })
            .collect();
        let store = Store {
            node: memory.node,
            catalog,
            memory,
            shards,
            budget,
            copies_charged: std::sync::atomic::AtomicU64::new(1),
        };
        for t in 0..store.catalog.table_count() {
            let t = TableId(t as u16);
            if store.region(t).len_words() == 0 {
                // A node holding no records registers its tables' regions empty.
                continue;
            }
            let mut a = store.shards[t.0 as usize].alloc.lock();
            let heads = a.buckets();
            store.cover_groups(t, &mut a, heads, 0)?;
            let region = store.region(t);
            let layout = store.catalog.layout(t);
            for b in 0..heads {
                let at = layout.group_offset(b) as usize;
                region.store(at + G_TAIL as usize, group_tail(layout.level_initial, 0));
                region.store(at + G_PRESENT as usize, 1);
            }
        }
        Ok(store)
    }

    /// The budget this store's tables grow from.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    /// Bytes each table of this node took from the budget (its record slabs and index
    /// groups), by table.
    pub fn charged_bytes(&self) -> Vec<u64> {
        self.shards
            .iter()
            .map(|s| s.alloc.lock().charged_bytes)
            .collect()
    }

    /// From now on, charges what the tables grow by for `copies` copies of this store: a
    /// replicated partition's primary for itself and its backups' replicas (whose growth
    /// follows its own), a replica 0 (its primary paid). A replica's growth then never
    /// waits on a budget its primary's growth took first, which would stall its log
    /// cleaner for good.
    pub fn charge_copies(&self, copies: u64) {
        self.copies_charged
            .store(copies, std::sync::atomic::Ordering::Relaxed);
    }

    /// Takes `bytes` from the budget for table `t`'s `what` (times the copies charged).
    fn take(&self, t: TableId, a: &mut Alloc, what: &str, bytes: u64) -> Result<(), StoreError> {
        let copies = self
            .copies_charged
            .load(std::sync::atomic::Ordering::Relaxed);
        if copies > 0 {
            self.budget
                .take(
                    || format!("{what} of table {}", self.catalog.spec(t).name),
                    self.node.0,
                    a.charged_bytes,
                    bytes.saturating_mul(copies),
                )
                .map_err(StoreError::OverBudget)?;
        }
        a.charged_bytes += bytes;
        Ok(())
    }

    /// Makes sure the budget covers `heads` bucket heads and `overflow` overflow groups of
    /// `t`'s index, a slab at a time.
    fn cover_groups(
        &self,
        t: TableId,
        a: &mut Alloc,
        heads: u32,
        overflow: u32,
    ) -> Result<(), StoreError> {
        let layout = *self.catalog.layout(t);
        let group_bytes = GROUP_WORDS as u64 * WORD_BYTES;
        while a.heads_charged < heads {
            let n = (next_take(a.heads_charged as u64, group_bytes) as u32)
                .min(layout.buckets_max - a.heads_charged)
                .max(heads - a.heads_charged);
            self.take(t, a, "the hash index", n as u64 * group_bytes)?;
            a.heads_charged += n;
        }
        while a.overflow_charged < overflow {
            let room = layout.index_groups - layout.buckets_max - a.overflow_charged;
            let n = (next_take(a.overflow_charged as u64, group_bytes) as u32)
                .min(room)
                .max(1);
            self.take(
                t,
                a,
                "the hash index's overflow groups",
                n as u64 * group_bytes,
            )?;
            a.overflow_charged += n;
        }
        Ok(())
    }

    /// Takes `bytes` more of a growing table's heap (ordered index keys, deleted keys) from
    /// the budget, a slab at a time.
    fn cover_heap(&self, t: TableId, a: &mut Alloc, bytes: u64) -> Result<(), StoreError> {
        if a.heap_bytes + bytes > a.heap_charged {
            let n = next_take(a.heap_charged, 1).max(bytes);
            self.take(t, a, "the ordered index and deleted keys", n)?;
            a.heap_charged += n;
        }
        a.heap_bytes += bytes;
        Ok(())
    }

    /// Makes sure the budget covers record slot `idx` of `t` (and its overflow entries), a
    /// slab at a time.
    fn cover_record(&self, t: TableId, a: &mut Alloc, idx: u32) -> Result<(), StoreError> {
        if idx < a.records_charged {
            return Ok(());
        }
        let layout = *self.catalog.layout(t);
        let overflow_words = layout.overflow_entries as u64 / layout.capacity.max(1) as u64
            * layout.overflow_entry_words() as u64;
        let record_bytes = (layout.record_words as u64 + overflow_words) * WORD_BYTES;
        let n = (next_take(a.records_charged as u64, record_bytes) as u32)
            .min(layout.capacity - a.records_charged);
        self.take(t, a, "the records", n as u64 * record_bytes)?;
        a.records_charged += n;
        Ok(())
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
        let h = hash_key(key);
        let mut walk = IndexWalk::start(layout, h, self.catalog.index_hint(t, self.node));
        loop {
            let at = layout.group_offset(walk.group()) as usize;
            let step = walk.step(layout, key, h, |w| region.load(at + w as usize));
            match step {
                WalkStep::Found(idx) => {
                    self.catalog.note_level(t, self.node, walk.level());
                    return Some(idx);
                }
                WalkStep::Absent => return None,
                WalkStep::Read(_) => {}
            }
        }
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

    /// The groups of bucket `b`'s chain, head first (the owner's view, under the table's
    /// lock).
    fn chain(&self, t: TableId, b: u32) -> chain::Chain<'_> {
        chain::Chain {
            region: self.region(t),
            layout: *self.catalog.layout(t),
            next: Some(b),
        }
    }

    /// The word offset of a free slot in bucket `b`'s chain, chaining an overflow group
    /// (its level set before the link names it) when every slot is taken.
    fn free_slot_in(&self, t: TableId, a: &mut Alloc, b: u32) -> Result<usize, StoreError> {
        let layout = *self.catalog.layout(t);
        let region = self.region(t);
        let mut last = b;
        for g in self.chain(t, b) {
            last = g;
            let base = layout.group_offset(g) as usize;
            for s in 0..GROUP_SLOTS as usize {
                let at = base + slot_word(s as u32) as usize;
                let free = match region.load(at + 1) {
                    META_EMPTY | META_TOMBSTONE => true,
                    _ => a.bucket_of(hash_key(region.load(at))) != b,
                };
                if free {
                    return Ok(at);
                }
            }
        }
        let g = self.new_overflow_group(t, a, a.level_of(b))?;
        self.link(t, last, g);
        Ok(layout.group_offset(g) as usize + slot_word(0) as usize)
    }

    /// A fresh overflow group at `level`, not yet linked.
    fn new_overflow_group(&self, t: TableId, a: &mut Alloc, level: u8) -> Result<u32, StoreError> {
        let layout = *self.catalog.layout(t);
        if a.overflow_used >= layout.index_groups - layout.buckets_max {
            return Err(StoreError::IndexFull {
                table: self.name(t),
                groups: layout.index_groups,
            });
        }
        self.cover_groups(t, a, 0, a.overflow_used + 1)?;
        let g = layout.buckets_max + a.overflow_used;
        a.overflow_used += 1;
        let at = layout.group_offset(g) as usize;
        let region = self.region(t);
        region.store(at + G_TAIL as usize, group_tail(level, 0));
        region.store(at + G_PRESENT as usize, 1);
        Ok(g)
    }

    /// Links group `to` after group `from` (the chain's last), keeping `from`'s level.
    fn link(&self, t: TableId, from: u32, to: u32) {
        let at = self.catalog.layout(t).group_offset(from) as usize + G_TAIL as usize;
        let region = self.region(t);
        let tail = region.load(at);
        debug_assert_eq!(tail_link(tail), 0, "group {from} is the chain's last");
        region.store(at, tail | (1 + to as u64));
    }

    /// Splits bucket `split` into itself and `split + 2^L` while the entries fill more than
    /// [`SPLIT_LOAD_PERCENT`] of the buckets' slots and there is room for another bucket.
    /// The new bucket is complete (entries, chain, then its level) before the old chain's
    /// groups say their raised level; the old chain keeps the moved entries, stale.
    fn maybe_split(&self, t: TableId, a: &mut Alloc) -> Result<(), StoreError> {
        let layout = *self.catalog.layout(t);
        let region = self.region(t);
        while a.entries * 100 > a.buckets() as u64 * GROUP_SLOTS as u64 * SPLIT_LOAD_PERCENT
            && a.buckets() < layout.buckets_max
        {
            let (old, level) = (a.split, a.level);
            let new = old + (1u32 << level);
            self.cover_groups(t, a, new + 1, 0)?;
            let mut moved: Vec<(u64, u64)> = Vec::new();
            for g in self.chain(t, old) {
                let base = layout.group_offset(g) as usize;
                for s in 0..GROUP_SLOTS as usize {
                    let at = base + slot_word(s as u32) as usize;
                    let meta = region.load(at + 1);
                    let k = region.load(at);
                    if meta >= META_USED_BASE {
                        let h = hash_key(k);
                        if a.bucket_of(h) == old && bucket_at(h, level + 1) == new {
                            moved.push((k, meta));
                        }
                    }
                }
            }
            // The new bucket's chain, written whole before its head says it exists.
            let mut group = new;
            for (i, chunk) in moved.chunks(GROUP_SLOTS as usize).enumerate() {
                if i > 0 {
                    let g = self.new_overflow_group(t, a, level + 1)?;
                    self.link(t, group, g);
                    group = g;
                }
                let base = layout.group_offset(group) as usize;
                for (s, &(k, meta)) in chunk.iter().enumerate() {
                    region.store(base + slot_word(s as u32) as usize, k);
                    region.store(base + slot_word(s as u32) as usize + 1, meta);
                }
            }
            let head = layout.group_offset(new) as usize;
            let tail = region.load(head + G_TAIL as usize);
            region.store(
                head + G_TAIL as usize,
                group_tail(level + 1, tail_link(tail)),
            );
            region.store(head + G_PRESENT as usize, 1);
            let old_chain: Vec<u32> = self.chain(t, old).collect();
            for g in old_chain {
                let at = layout.group_offset(g) as usize + G_TAIL as usize;
                let tail = region.load(at);
                region.store(at, group_tail(level + 1, tail_link(tail)));
            }
            a.split += 1;
            if a.split == 1u32 << a.level {
                a.level += 1;
                a.split = 0;
            }
            self.catalog
                .publish_index(t, self.node, IndexHint::new(a.level, a.split));
        }
        Ok(())
    }

    /// Turns `key`'s hash entry naming slot `idx` into a tombstone (in the bucket that
    /// holds the key now; a stale copy in a split bucket is ignored by every reader).
    fn unindex(&self, t: TableId, a: &mut Alloc, key: u64, idx: u32) {
        let layout = *self.catalog.layout(t);
        let region = self.region(t);
        let b = a.bucket_of(hash_key(key));
        for g in self.chain(t, b) {
            let base = layout.group_offset(g) as usize;
            for s in 0..GROUP_SLOTS as usize {
                let at = base + slot_word(s as u32) as usize;
                let meta = region.load(at + 1);
                if meta == META_EMPTY {
                    return;
                }
                if meta == META_USED_BASE + idx as u64 && region.load(at) == key {
                    region.store(at + 1, META_TOMBSTONE);
                    a.entries -= 1;
                    return;
                }
            }
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
            let old_key = region.load(off + H_KEY as usize);
            let old_version = key_version(v);
            let files = old_version >= INITIAL_VERSION && !a.gone.contains_key(&old_key);
            if files && self.catalog.spec(t).capacity_max_per_node.is_none() {
                // A growing table's deleted keys grow with it: the budget counts them.
                if let Err(e) = self.cover_heap(t, a, GONE_BYTES_PER_KEY_MAX) {
                    a.queue(idx);
                    return Err(e);
                }
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
            // An undone insert of a key that never existed leaves nothing to remember.
            if old_version >= INITIAL_VERSION {
                // What the sizing counted; more is a workload that misdeclared its keys.
                let max = match self.catalog.spec(t).capacity_max_per_node {
                    Some(_) => self.catalog.spec(t).gone_keys_max_per_node as usize,
                    None => usize::MAX,
                };
                assert!(
                    a.gone.len() < max || a.gone.contains_key(&old_key),
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
            self.unindex(t, a, old_key, idx);
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

    /// Writes a record's payload and clears its timestamps and protocol word (and, with
    /// `forget_old`, its older versions), before its version word says live.
    fn write_body(
        region: &Region,
        layout: &TableLayout,
        off: usize,
        payload: &[u64],
        forget_old: bool,
    ) {
        if forget_old {
            for j in 0..layout.version_slots - 1 {
                region.store(off + layout.old_header_offset(j) as usize + 1, 0);
            }
        }
        region.write_from(off + HEADER_WORDS as usize, payload);
        region.store(off + H_RTS as usize, 0);
        region.store(off + H_WTS as usize, 0);
        region.store(off + H_AUX as usize, 0);
    }

    /// Revives `key`'s deleted record in its own slot `idx` (under the table's lock), at the
    /// version after its deletion's; `Duplicate` if it is live.
    fn revive(
        &self,
        t: TableId,
        idx: u32,
        key: u64,
        payload: &[u64],
        lock: u64,
    ) -> Result<(u32, u64), StoreError> {
        let layout = *self.catalog.layout(t);
        let region = self.region(t);
        let shard = &self.shards[t.0 as usize];
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
        // Older versions of the previous incarnation are gone with it.
        Self::write_body(region, &layout, off, payload, true);
        let version = (old & !VERSION_ABSENT) + 1;
        region.store(off + H_VERSION as usize, version);
        if let Some(o) = &shard.ordered {
            o.lock().insert(key, idx as u64);
        }
        Ok((idx, version))
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
        self.insert_locked_as(t, key, payload, lock, Revive::Yes)
    }

    /// [`Store::insert_locked`] of a key that has no slot yet: a key that still owns one
    /// (live, or deleted and not reclaimed) is refused `Duplicate` instead of revived. For a
    /// protocol that keeps its own versions in the slot (Tell), where a deleted key's slot
    /// holds versions older snapshots still read and a sequence number that must not
    /// restart.
    pub fn insert_new_locked(
        &self,
        t: TableId,
        key: u64,
        payload: &[u64],
        lock: u64,
    ) -> Result<(u32, u64), StoreError> {
        self.insert_locked_as(t, key, payload, lock, Revive::No)
    }

    /// The layout of `t` if `key` lives on this node and `payload` is a whole stored one.
    fn insertable(&self, t: TableId, key: u64, payload: &[u64]) -> Result<TableLayout, StoreError> {
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
        Ok(layout)
    }

    fn insert_locked_as(
        &self,
        t: TableId,
        key: u64,
        payload: &[u64],
        lock: u64,
        revive: Revive,
    ) -> Result<(u32, u64), StoreError> {
        let layout = self.insertable(t, key, payload)?;
        let shard = &self.shards[t.0 as usize];
        let mut a = shard.alloc.lock();
        let region = self.region(t);
        if let Some(idx) = self.find_slot(t, key) {
            return match revive {
                Revive::Yes => self.revive(t, idx, key, payload, lock),
                Revive::No => Err(StoreError::Duplicate {
                    table: self.name(t),
                    key,
                }),
            };
        }
        let gone = a.gone.get(&key).copied();
        if shard.ordered.is_some()
            && gone.is_none()
            && self.catalog.spec(t).capacity_max_per_node.is_none()
        {
            // A key new to a growing table's ordered index: the budget counts its bytes.
            self.cover_heap(t, &mut a, ordered::BYTES_PER_KEY_MAX)?;
        }
        let version_of_key = gone.map_or(INITIAL_VERSION, |v| v + 1);
        let hold = if lock != 0 { lock } else { LOCK_RECLAIM };
        let reclaimed = if a.next_fresh < layout.capacity {
            let next = a.next_fresh;
            self.cover_record(t, &mut a, next)?;
            None
        } else {
            Some(self.reclaim(t, &mut a, hold, key)?)
        };
        // Room in the index first: a reclaim freed its old key's entry, and a bucket whose
        // chain is full gets an overflow group.
        let bucket = a.bucket_of(hash_key(key));
        let slot = match self.free_slot_in(t, &mut a, bucket) {
            Ok(slot) => slot,
            Err(e) => {
                if let Some((idx, _)) = reclaimed {
                    // Give the slot back: absent, unlocked, named by no index entry.
                    region.store(layout.record_offset(idx) as usize + H_LOCK as usize, 0);
                    a.queue(idx);
                }
                return Err(e);
            }
        };
        let (idx, inc) = match reclaimed {
            Some(r) => r,
            None => {
                a.next_fresh += 1;
                self.publish_high_water(t, a.next_fresh);
                (a.next_fresh - 1, 0)
            }
        };
        let off = layout.record_offset(idx) as usize;
        let version = make_version(inc, version_of_key);
        // The record is complete before its version word says live and before the index
        // names it: a reader that sees it live there sees the new key.
        region.store(off + H_KEY as usize, key);
        // A reclaimed slot's older versions are the previous key's, not this key's.
        Self::write_body(region, &layout, off, payload, reclaimed.is_some());
        if reclaimed.is_none() {
            region.store(off + H_LOCK as usize, lock);
        }
        region.store(off + H_VERSION as usize, version);
        if reclaimed.is_some() && lock == 0 {
            region.store(off + H_LOCK as usize, 0);
        }
        // Publish in the index: key before meta, so a reader that sees the meta sees the
        // key; a reused slot is a tombstone first, so no reader pairs its old meta with
        // the new key.
        if region.load(slot + 1) != META_EMPTY {
            region.store(slot + 1, META_TOMBSTONE);
        }
        region.store(slot, key);
        region.store(slot + 1, META_USED_BASE + idx as u64);
        a.entries += 1;
        // A split the budget refuses leaves the index as it is (chains grow instead) and
        // the refusal on the budget, which stops the run: this insert is done either way.
        let _ = self.maybe_split(t, &mut a);
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

    /// The key version an insert of `key` would install now: one past the version its
    /// deletion left (in its slot, or filed once the slot was reclaimed), or
    /// `INITIAL_VERSION` for a key the table never held; `None` while `key` is live. A
    /// backup's log cleaner applies a logged insert only at this version: a later one waits
    /// for the key's writes before it.
    pub fn insert_version(&self, t: TableId, key: u64) -> Option<u64> {
        let shard = &self.shards[t.0 as usize];
        let a = shard.alloc.lock();
        if let Some(idx) = self.find_slot(t, key) {
            let off = self.catalog.layout(t).record_offset(idx) as usize;
            let v = self.region(t).load(off + H_VERSION as usize);
            if v & VERSION_ABSENT == 0 {
                return None;
            }
            return Some(key_version(v) + 1);
        }
        Some(a.gone.get(&key).map_or(INITIAL_VERSION, |v| v + 1))
    }

    /// Files `key`, which holds no slot here, as deleted at key version `key_version`, so
    /// its next insert continues at the version after (and a scan reports the deletion): a
    /// backup's log cleaner applying the delete of a key whose insert it held outside the
    /// replica's slots. `Duplicate` if the key holds a slot.
    pub fn file_deleted(&self, t: TableId, key: u64, key_version: u64) -> Result<(), StoreError> {
        let shard = &self.shards[t.0 as usize];
        let mut a = shard.alloc.lock();
        if self.find_slot(t, key).is_some() {
            return Err(StoreError::Duplicate {
                table: self.name(t),
                key,
            });
        }
        if !a.gone.contains_key(&key) && self.catalog.spec(t).capacity_max_per_node.is_none() {
            self.cover_heap(t, &mut a, GONE_BYTES_PER_KEY_MAX)?;
        }
        a.gone.insert(key, key_version);
        if let Some(o) = &shard.ordered {
            o.lock().insert(key, ORDERED_GONE | key_version);
        }
        Ok(())
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

    /// The key version of `key`'s live record and its slot, `None` if it has none.
    pub fn live_key_version(&self, t: TableId, key: u64) -> Option<(u32, u64)> {
        let idx = self.lookup(t, key)?;
        let off = self.catalog.layout(t).record_offset(idx) as usize;
        let v = self.region(t).load(off + H_VERSION as usize);
        Some((idx, v & VERSION_KEY_MASK))
    }

    /// Installs a whole stored `payload` and `key_version` in the live record at slot `idx`
    /// on the owner's CPU (a backup's log cleaner applying a logged write to its replica):
    /// payload first, then the version word, keeping the slot's incarnation.
    pub fn install(&self, t: TableId, idx: u32, key_version: u64, payload: &[u64]) {
        let layout = self.catalog.layout(t);
        assert_eq!(
            payload.len(),
            layout.payload_words as usize,
            "{}: a payload of {} words installed in {}-word records",
            self.name(t),
            payload.len(),
            layout.payload_words
        );
        let off = layout.record_offset(idx) as usize;
        let region = self.region(t);
        region.write_from(off + HEADER_WORDS as usize, payload);
        let v = region.load(off + H_VERSION as usize);
        debug_assert_eq!(v & VERSION_ABSENT, 0, "install into an absent record");
        region.store(
            off + H_VERSION as usize,
            make_version(incarnation(v), key_version & VERSION_KEY_MASK),
        );
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
        self.shards[t.0 as usize]
            .high_water
            .load(std::sync::atomic::Ordering::Acquire)
    }

    fn publish_high_water(&self, t: TableId, used: u32) {
        self.shards[t.0 as usize]
            .high_water
            .store(used, std::sync::atomic::Ordering::Release);
    }
}

/// The chain of one bucket, group by group.
mod chain {
    use crate::layout::{tail_link, TableLayout, G_TAIL};
    use atoll_fabric::Region;

    pub struct Chain<'a> {
        pub region: &'a Region,
        pub layout: TableLayout,
        pub next: Option<u32>,
    }

    impl Iterator for Chain<'_> {
        type Item = u32;
        fn next(&mut self) -> Option<u32> {
            let g = self.next?;
            let link = tail_link(
                self.region
                    .load(self.layout.group_offset(g) as usize + G_TAIL as usize),
            );
            // Links only point past the heads, to groups the owner chained in order.
            assert!(
                link == 0 || (link - 1 > g as u64 && link - 1 < self.layout.index_groups as u64),
                "group {g} links to {link}: not an index this store wrote"
            );
            self.next = (link != 0).then(|| (link - 1) as u32);
            Some(g)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Partition, TableSpec};
    use std::collections::BTreeMap;

    /// What a one-sided reader starting at level `hint` finds: READs of whole groups.
    fn read_walk(s: &Store, t: TableId, layout: &TableLayout, key: u64, hint: u8) -> Option<u32> {
        read_walk_from(s, t, layout, key, IndexHint::new(hint, 0))
    }

    /// [`read_walk`] from an exact hint (a level and a split pointer).
    fn read_walk_from(
        s: &Store,
        t: TableId,
        layout: &TableLayout,
        key: u64,
        hint: IndexHint,
    ) -> Option<u32> {
        let h = hash_key(key);
        let mut walk = IndexWalk::start(layout, h, hint);
        let mut words = [0u64; GROUP_WORDS as usize];
        loop {
            s.region(t)
                .read_into(layout.group_offset(walk.group()) as usize, &mut words);
            match walk.step(layout, key, h, |w| words[w as usize]) {
                WalkStep::Found(i) => return Some(i),
                WalkStep::Absent => return None,
                WalkStep::Read(_) => {}
            }
        }
    }

    /// The churn tests' key spaces are a few thousand keys at most.
    const GONE_KEYS_TESTS: u32 = 10_000;

    fn store(capacity: u32) -> Store {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 2,
            capacity_per_node: capacity,
            capacity_max_per_node: Some(capacity),
            partition: Partition::Modulo,
            ordered: true,
            gone_keys_max_per_node: GONE_KEYS_TESTS,
        };
        let catalog = Arc::new(Catalog::new(1, vec![spec], vec![]));
        let mem = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        Store::new(catalog, mem)
    }

    /// A store whose one table starts laid out for `start` records and grows, within
    /// `budget_bytes`.
    fn growing(start: u32, budget_bytes: u64) -> Store {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 2,
            capacity_per_node: start,
            capacity_max_per_node: None,
            partition: Partition::Modulo,
            ordered: true,
            gone_keys_max_per_node: 0,
        };
        let catalog = Arc::new(Catalog::new(1, vec![spec], vec![]).with_growth(&[1 << 30], 0));
        let mem = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        Store::with_budget(catalog, mem, Arc::new(MemoryBudget::new(budget_bytes))).unwrap()
    }

    #[test]
    fn store_grows_a_table_past_its_start_and_every_reader_finds_every_key_from_any_level() {
        let s = growing(8, u64::MAX);
        let t = TableId(0);
        let layout = *s.catalog.layout(t);
        assert_eq!(layout.level_initial, 1, "8 records start in 2 buckets");
        let mut model = BTreeMap::new();
        let mut x = 7u64;
        for step in 0..60_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let key = (x >> 20) % 40_000;
            if x % 5 == 0 {
                assert_eq!(
                    s.delete(t, key).is_ok(),
                    model.remove(&key).is_some(),
                    "delete {key}"
                );
            } else {
                match s.insert(t, key, &[key, step]) {
                    Ok(idx) => assert!(model.insert(key, idx).is_none()),
                    Err(StoreError::Duplicate { .. }) => assert!(model.contains_key(&key)),
                    Err(e) => panic!("insert {key} at {step}: {e}"),
                }
            }
        }
        let a = s.shards[0].alloc.lock().level;
        assert!(a >= 12, "the index split to level {a}");
        for key in 0..40_000 {
            assert_eq!(s.lookup(t, key), model.get(&key).copied(), "lookup {key}");
            for hint in [0, layout.level_initial, a - 3, a, a + 1, layout.level_max] {
                let live =
                    read_walk(&s, t, &layout, key, hint).filter(|&i| s.live_key_at(t, i, key));
                assert_eq!(
                    live,
                    model.get(&key).copied(),
                    "READ walk of {key} from level {hint}"
                );
            }
        }
        assert!(s.charged_bytes()[0] > 0, "the growth was counted");
    }

    #[test]
    fn store_readers_find_every_inserted_key_while_the_index_splits_under_them() {
        let s = Arc::new(growing(4, u64::MAX));
        let t = TableId(0);
        let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let reader = {
            let (s, done) = (s.clone(), done.clone());
            std::thread::spawn(move || {
                let layout = *s.catalog.layout(t);
                let mut checked = 0u64;
                loop {
                    let upto = done.load(std::sync::atomic::Ordering::Acquire);
                    if upto == u64::MAX {
                        return checked;
                    }
                    for key in upto.saturating_sub(64)..upto {
                        assert!(
                            read_walk(&s, t, &layout, key, (key % 20) as u8).is_some(),
                            "key {key}, inserted before, not found (inserted up to {upto})"
                        );
                        let published = s.catalog.index_hint(t, NodeId(0));
                        assert!(
                            read_walk_from(&s, t, &layout, key, published).is_some(),
                            "key {key} not found from the published {published:?}"
                        );
                        checked += 1;
                    }
                }
            })
        };
        for key in 0..200_000u64 {
            s.insert(t, key, &[key, 0]).unwrap();
            done.store(key + 1, std::sync::atomic::Ordering::Release);
        }
        done.store(u64::MAX, std::sync::atomic::Ordering::Release);
        assert!(reader.join().unwrap() > 0);
    }

    #[test]
    fn store_growth_past_the_budget_is_refused_naming_the_table_and_kept_on_the_budget() {
        let s = growing(8, 3 * SLAB_BYTES);
        let t = TableId(0);
        let mut refused = None;
        for key in 0..1_000_000u64 {
            match s.insert(t, key, &[key, 0]) {
                Ok(_) => {}
                Err(StoreError::OverBudget(r)) => {
                    refused = Some((key, r));
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        let (key, r) = refused.expect("a 3 MiB budget refuses a million records");
        assert!(key > 1000, "refused after {key} records");
        assert!(r.structure.ends_with("of table t"), "{}", r.structure);
        assert_eq!(r.limit_bytes, 3 * SLAB_BYTES);
        assert_eq!(s.budget().refusal(), Some(r));
        assert!(s.budget().used_bytes() <= 3 * SLAB_BYTES);
        for k in 0..key {
            assert!(
                s.lookup(t, k).is_some(),
                "key {k} inserted before the refusal is kept"
            );
        }
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
            // What a one-sided reader does: READ groups and walk them.
            let found = read_walk(&s, t, &layout, key, 0);
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
            capacity_max_per_node: Some(1),
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
            capacity_max_per_node: Some(4),
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
