//! Tuple and table layouts: where every word of a table lives in a node's region. This is
//! the one place the tuple header is defined; protocols address words through these names.
//!
//! A table occupies one region on each node that holds part of it:
//!
//! ```text
//! [ hash index: groups x GROUP_SLOTS x (key, meta) ][ records: capacity x (header + payload) ]
//! ```
//!
//! Tuple header (HEADER_WORDS words, then the payload):
//!
//! | word | name      | meaning                                                            |
//! |------|-----------|--------------------------------------------------------------------|
//! | 0    | `LOCK`    | 0 when free, else the owner transaction's timestamp                 |
//! | 1    | `VERSION` | bit 63 `ABSENT` (deleted / never inserted); bits 40..63 the slot's |
//! |      |           | incarnation; bits 0..40 the key's version (its commit count)        |
//! | 2    | `RTS`     | read timestamp / lease end (SUNDIAL, MVCC); bit 63 `FROZEN` while a |
//! |      |           | writer holds the record, so no lease or read can extend it          |
//! | 3    | `WTS`     | write timestamp of the current version (SUNDIAL, MVCC)              |
//! | 4    | `AUX`     | protocol word: WAITDIE's count of old waiters (starvation fix);     |
//! |      |           | NAM-DB's overflow chain (1 + its newest entry, 0 for none)          |
//! | 5    | `KEY`     | the record's key, so a cached location can be verified             |
//!
//! After the payload, a multi-version table keeps `version_slots - 1` older versions, each a
//! 2-word header (`[wts, version]` under MVCC, `[commit id, sealed version]` under RSI and
//! NAM-DB) and a payload, laid out in one of two forms ([`OldVersions`]): `Inline`, each
//! old version's header beside its payload (MVCC, RSI: a reader takes the whole block), or
//! `HeadersApart`, every old header first and the old payloads after them (NAM-DB: one READ
//! of the tuple and the headers shows every version, a second READ fetches an old payload
//! only when one is needed). See [`TableLayout::old_header_offset`]. A slot (the current
//! version's `WTS`, or an old slot's `wts`) holding [`WTS_WRITING`] is being overwritten
//! and holds no version a reader may choose.
//!
//! A table with an overflow area (NAM-DB's, [`Catalog::with_overflow`]) keeps it after the
//! records: `overflow_entries` entries of `[next, commit id, sealed version, payload]`,
//! where `next` is 1 + the next older entry of the same record's chain (0 ends it). Only
//! the node's version mover writes them.
//!
//! Payload: the engine owns its first [`ENGINE_PAYLOAD_WORDS`] words in every table, so
//! every read can be checked and every history carries the values actually read:
//!
//! | word | name      | meaning                                                            |
//! |------|-----------|--------------------------------------------------------------------|
//! | 0    | `P_TAG`   | the writer: the attempt's tag ([`LOADER_TAG`] for loaded records)  |
//! | 1    | `P_CHECK` | [`payload_check`] of table, key, tag and the workload's words       |
//!
//! A payload whose check word does not match was torn (words of several writes) or
//! belongs to another record.
//!
//! Hash index (linear hashing, so a table's index grows with its records, a bucket at a
//! time, and stays where one-sided readers find it): a group is 16 words, [`GROUP_SLOTS`]
//! slots of 2 words (`key`, then `meta` = 0 empty, 1 tombstone, `2 + record index` used),
//! then `link` (1 + the next group of the bucket's chain, 0 for none) and `level` (1 + the
//! number of hash bits that address the bucket; 0: no bucket there yet). Bucket `b`'s head
//! is group `b`; overflow groups come after the `buckets_max` heads. A bucket at level `l`
//! holds the keys whose hash ends in `b`'s `l` bits. Growing splits bucket `split` into it
//! and `split + 2^L`: the new bucket gets its entries first, then every group of the old
//! chain its raised level. A split leaves the moved entries in the old bucket (they still
//! name the right records): a reader that took the old level finds them there, and one that
//! sees the new level goes to the new bucket. An insert may reuse such a stale slot. Since a
//! group's `level` is read after its slots (a READ delivers words in ascending order), a
//! reader that saw a slot rewritten sees the level raised before it, and moves on.
//!
//! Writers publish `key` before `meta`, so a reader that sees a used `meta` sees its key.
//! A probe runs over a bucket's chain and stops at an empty slot (slots are filled in chain
//! order and never emptied again); a tombstone is skipped and reused by a later insert. A
//! reader that takes a slot's `meta` with a stale `key` word lands on a record whose `KEY`
//! word differs: every record access checks it.

// The words a history records (table ids, key versions, the loader's tag) are the history
// format's, shared with the independent checker; the layout builds on them.
use crate::topology::Topology;
use atoll_fabric::{NodeId, RegionId, RemotePtr};
pub use atoll_history::{
    key_version, TableId, INITIAL_VERSION, LOADER_TAG, VERSION_ABSENT, VERSION_KEY_BITS,
    VERSION_KEY_MASK,
};
use std::sync::Arc;

pub const HEADER_WORDS: u32 = 6;
pub const H_LOCK: u32 = 0;
pub const H_VERSION: u32 = 1;
pub const H_RTS: u32 = 2;
pub const H_WTS: u32 = 3;
pub const H_AUX: u32 = 4;
pub const H_KEY: u32 = 5;

/// What every record's `LOCK` word holds in a run (its protocol decides, once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockWord {
    /// 0 when free, else the owner transaction's timestamp (the serializable protocols).
    Owner,
    /// `[locked:1 | commit id:63]`: the commit id of the record's current version, with
    /// [`CID_LOCKED`] set while a committing writer holds it, so one CAS from the commit id
    /// read validates and locks (RSI, "The End of Slow Networks" §4.2). Loaded records
    /// carry commit id 0.
    CommitId,
}

/// The lock bit of a [`LockWord::CommitId`] word.
pub const CID_LOCKED: u64 = 1 << 63;

/// Set in an old header's commit id word (which never holds a lock) once the node's
/// version mover copied that version into the overflow area: an install overwrites it.
pub const OLD_MOVED: u64 = CID_LOCKED;

impl LockWord {
    /// Whether lock word `w` is held by a transaction.
    #[inline]
    pub fn held(self, w: u64) -> bool {
        match self {
            LockWord::Owner => w != 0,
            LockWord::CommitId => w & CID_LOCKED != 0,
        }
    }
}

/// Set in `RTS` while a writer holds the record (SUNDIAL, MVCC): lease renewals and reads
/// that would raise `RTS` by CAS then fail, so the writer's view of `RTS` is final.
pub const RTS_FROZEN: u64 = 1 << 63;
/// Words of each older version's header: `wts` (or commit id), then `version`.
pub const OLD_SLOT_HEADER_WORDS: u32 = 2;

/// Words of an overflow entry before its payload: `next`, commit id, sealed version.
pub const OVERFLOW_ENTRY_HEADER_WORDS: u32 = 3;

/// Where a multi-version record keeps its older versions' headers (the protocol decides,
/// once per run; a record slot's size is the same in both forms).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OldVersions {
    /// `[header, payload]` per old version, one after another (MVCC, RSI: whole-block
    /// READs).
    #[default]
    Inline,
    /// Every old version's header right after the current payload, then every old payload
    /// (NAM-DB: "headers apart from data", so one READ of the head and the headers finds
    /// the version a snapshot needs and a second READ fetches it only if it is an old one).
    HeadersApart,
}

// The header words are distinct and inside the header; the lock word comes first, so a
// one-sided READ of a tuple sees the lock before the version and the payload, and a
// version check covers a torn payload (see `memory`). A group is one READ of whole slots.
const _: () = {
    assert!(H_LOCK == 0);
    assert!(H_LOCK < H_VERSION && H_VERSION < H_RTS && H_RTS < H_WTS);
    assert!(H_WTS < H_AUX && H_AUX < H_KEY && H_KEY < HEADER_WORDS);
    assert!(
        G_PRESENT == 0
            && G_SLOTS_BASE + GROUP_SLOTS * SLOT_WORDS == G_TAIL
            && G_TAIL + 1 == GROUP_WORDS
            && GROUP_WORDS * 8 == 128
    );
};

/// Payload words the engine owns in every record (counted in the record's size).
pub const ENGINE_PAYLOAD_WORDS: u32 = 2;

/// Most words a region may hold: remote pointers address words with 32-bit offsets (as an
/// RDMA memory key with a 32-bit offset would), so the last word's offset must fit a u32.
pub const REGION_WORDS_MAX: u64 = u32::MAX as u64;
pub const P_TAG: u32 = 0;
pub const P_CHECK: u32 = 1;

/// Marks a version slot whose payload is being overwritten: written to the slot's `wts`
/// before its payload and replaced by the real `wts` after it, so a reader that chooses
/// versions by `wts < ctts` never chooses a half-written slot (and a double read that
/// straddles the write sees the `wts` word change).
pub const WTS_WRITING: u64 = u64::MAX;

/// The check word of a payload: a hash of where it belongs, who wrote it and what it says.
/// Four independent chains take the words in turn (word `i` feeds chain `i % 4`, each seeded
/// apart, so swapped words change the result): a single chain's multiply latency made a
/// 1000-byte record's check cost ~5 cycles a word, four overlap (issue #9).
#[inline]
pub fn payload_check(table: TableId, key: u64, tag: u64, user: &[u64]) -> u64 {
    payload_check_hashed(table, hash_key(key), tag, user)
}

/// [`payload_check`] given the key's [`hash_key`] (the index's hash, which a transaction
/// computes once per record for both).
#[inline]
pub fn payload_check_hashed(table: TableId, key_hash: u64, tag: u64, user: &[u64]) -> u64 {
    const MIX: u64 = 0x9E37_79B9_7F4A_7C15;
    // Seeds differ per table: the same key in two tables must not share a check word.
    const TABLE_MIX: u64 = 0xD6E8_FEB8_6659_FD93;
    const LANE: [u64; CHECK_LANES] = [
        0x243F_6A88_85A3_08D3,
        0x1319_8A2E_0370_7344,
        0xA409_3822_299F_31D0,
        0x082E_FA98_EC4E_6C89,
    ];
    let seed = key_hash ^ (table.0 as u64 + 1).wrapping_mul(TABLE_MIX) ^ tag.wrapping_mul(MIX);
    let mut h = LANE.map(|l| seed ^ l);
    let mut chunks = user.chunks_exact(CHECK_LANES);
    for c in &mut chunks {
        for (h, &w) in h.iter_mut().zip(c) {
            *h = (*h ^ w).wrapping_mul(MIX).rotate_left(27);
        }
    }
    for (h, &w) in h.iter_mut().zip(chunks.remainder()) {
        *h = (*h ^ w).wrapping_mul(MIX).rotate_left(27);
    }
    hash_key(
        h[0] ^ h[1].rotate_left(16)
            ^ h[2].rotate_left(32)
            ^ h[3].rotate_left(48)
            ^ user.len() as u64,
    )
}

/// Independent hash chains of [`payload_check`].
const CHECK_LANES: usize = 4;

/// A whole payload for `user` words written by `tag`: tag, check word, then the words.
pub fn seal(table: TableId, key: u64, tag: u64, user: &[u64], out: &mut Vec<u64>) {
    out.clear();
    out.reserve(ENGINE_PAYLOAD_WORDS as usize + user.len());
    out.push(tag);
    out.push(payload_check(table, key, tag, user));
    out.extend_from_slice(user);
}

/// Seals in place a whole payload whose workload words were changed where they lie: `tag`
/// and the check word of the words as they are now (as [`seal`], without copying them).
pub fn reseal(table: TableId, key: u64, tag: u64, payload: &mut [u64]) {
    assert!(
        payload.len() >= ENGINE_PAYLOAD_WORDS as usize,
        "table {}, key {key}: a payload of {} words has no room for its seal",
        table.0,
        payload.len()
    );
    let (engine, user) = payload.split_at_mut(ENGINE_PAYLOAD_WORDS as usize);
    engine[P_TAG as usize] = tag;
    engine[P_CHECK as usize] = payload_check(table, key, tag, user);
}

/// Whether a whole payload (as stored) is one write's, for record `(table, key)`.
#[inline]
pub fn payload_intact(table: TableId, key: u64, payload: &[u64]) -> bool {
    payload_intact_hashed(table, hash_key(key), payload)
}

/// [`payload_intact`] given the key's [`hash_key`].
#[inline]
pub fn payload_intact_hashed(table: TableId, key_hash: u64, payload: &[u64]) -> bool {
    payload.len() >= ENGINE_PAYLOAD_WORDS as usize
        && payload[P_CHECK as usize]
            == payload_check_hashed(
                table,
                key_hash,
                payload[P_TAG as usize],
                &payload[ENGINE_PAYLOAD_WORDS as usize..],
            )
}

/// Most incarnations of one record slot; a slot at this incarnation is not reclaimed again.
pub const INCARNATION_MAX: u64 = (VERSION_ABSENT >> VERSION_KEY_BITS) - 1;

/// The version word of a slot at `incarnation` holding its key's version `key_version`
/// (live; or `ABSENT` for a deleted record).
#[inline]
pub fn make_version(incarnation: u64, key_version: u64) -> u64 {
    debug_assert!(incarnation <= INCARNATION_MAX && key_version <= VERSION_KEY_MASK);
    (incarnation << VERSION_KEY_BITS) | key_version
}

/// The slot's incarnation in a version word.
#[inline]
pub fn incarnation(word: u64) -> u64 {
    (word & !VERSION_ABSENT) >> VERSION_KEY_BITS
}

/// The lock word the owning node's CPU holds a slot with while it reassigns it to another
/// key for an unlocked insert (a loader's): no transaction has this timestamp, so others
/// see the record locked by a writer.
pub const LOCK_RECLAIM: u64 = u64::MAX - 1;

/// Slots per hash-index group: one READ of [`GROUP_WORDS`] words (128 bytes, two cache
/// lines) fetches a whole group with its chain link and level, so a one-sided lookup
/// usually costs one round trip.
pub const GROUP_SLOTS: u32 = 7;
pub const SLOT_WORDS: u32 = 2;
pub const GROUP_WORDS: u32 = 16;
/// The group's first word: 1 once it holds a bucket's entries (written after them, and
/// read before them: a reader that sees it set sees a new bucket whole).
pub const G_PRESENT: u32 = 0;
/// The word of the group's first slot.
pub const G_SLOTS_BASE: u32 = 1;
/// The group's last word: `(1 + level) << LINK_BITS | link`, where `link` is 1 + the next
/// group of the bucket's chain (0: the chain ends). Read after the slots: a reader that saw
/// a slot rewritten after a split sees the raised level the split wrote before.
pub const G_TAIL: u32 = GROUP_WORDS - 1;
/// Bits of [`G_TAIL`] holding the link.
pub const LINK_BITS: u32 = 40;
const LINK_MASK: u64 = (1 << LINK_BITS) - 1;

/// The tail word of a group of a bucket at `level` linking to `link` (0: none).
#[inline]
pub fn group_tail(level: u8, link: u64) -> u64 {
    (1 + level as u64) << LINK_BITS | link
}

/// The link in a tail word.
#[inline]
pub fn tail_link(tail: u64) -> u64 {
    tail & LINK_MASK
}

/// The word offset, within a group, of slot `s`.
#[inline]
pub const fn slot_word(s: u32) -> u32 {
    G_SLOTS_BASE + s * SLOT_WORDS
}
pub const META_EMPTY: u64 = 0;
pub const META_TOMBSTONE: u64 = 1;
pub const META_USED_BASE: u64 = 2;
/// Records per bucket a table's full reservation allows (buckets_max is at least its
/// capacity over this), so a full table's buckets hold about half their slots.
const RECORDS_PER_BUCKET: u64 = 4;
/// Overflow groups reserved per head group: chains past a bucket's own group are rare
/// while buckets split at [`SPLIT_LOAD_PERCENT`].
const OVERFLOW_GROUPS_PER_BUCKET_DIV: u64 = 2;
/// An insert that lifts the index's entries over this share of its buckets' slots splits
/// a bucket.
pub const SPLIT_LOAD_PERCENT: u64 = 75;
/// Most levels a bucket may have: hash bits addressing buckets (a u32 group number).
pub const LEVEL_MAX: u8 = 31;

/// The bucket `key_hash` falls in at `level`.
#[inline]
pub fn bucket_at(key_hash: u64, level: u8) -> u32 {
    (key_hash & ((1u64 << level) - 1)) as u32
}

/// Where a table's index stood on one node: its level `L` and split pointer, packed in a
/// word so readers take both at once (buckets below `split` are at `L + 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexHint(pub u64);

impl IndexHint {
    pub fn new(level: u8, split: u32) -> Self {
        IndexHint((level as u64) << 32 | split as u64)
    }
    pub fn level(self) -> u8 {
        (self.0 >> 32) as u8
    }
    pub fn split(self) -> u32 {
        self.0 as u32
    }
}

/// A lookup's walk over the hash index: the group to read next, and what to make of it.
/// The same walk serves the owning node (reading its memory in place) and one-sided
/// readers elsewhere (READing each group), so both follow splits the same way.
#[derive(Clone, Copy, Debug)]
pub struct IndexWalk {
    bucket: u32,
    level: u8,
    group: u32,
    steps: u32,
}

/// What a walk does after reading a group.
#[derive(Debug, PartialEq, Eq)]
pub enum WalkStep {
    /// The key's record slot.
    Found(u32),
    /// The key is not in the index.
    Absent,
    /// Read this group next.
    Read(u32),
}

impl IndexWalk {
    /// A walk for `key_hash` starting at the bucket `hint` addresses (the index's level and
    /// split pointer as its owner last published them, or as this reader saw them; any hint
    /// works, an exact one saves reads).
    #[inline]
    pub fn start(layout: &TableLayout, key_hash: u64, hint: IndexHint) -> Self {
        let mut level = hint.level().clamp(layout.level_initial, layout.level_max);
        let mut bucket = bucket_at(key_hash, level);
        if bucket < hint.split() && level < layout.level_max {
            level += 1;
            bucket = bucket_at(key_hash, level);
        }
        IndexWalk {
            bucket,
            level,
            group: bucket,
            steps: 0,
        }
    }

    /// The group to read.
    #[inline]
    pub fn group(&self) -> u32 {
        self.group
    }

    /// The level of the bucket the walk is in: a hint for the next walk.
    #[inline]
    pub fn level(&self) -> u8 {
        self.level
    }

    /// Decides from the words of [`IndexWalk::group`] as `word(i)` gives them (a READ's
    /// copy, or the memory itself), slots first and the level last.
    #[inline]
    pub fn step(
        &mut self,
        layout: &TableLayout,
        key: u64,
        key_hash: u64,
        word: impl Fn(u32) -> u64,
    ) -> WalkStep {
        if layout.level_initial == layout.level_max {
            // A table that never grows never splits: its buckets and their levels are fixed,
            // so only a chain's link is read (a lookup that decides in the group's first
            // cache line touches no other).
            self.steps += 1;
            return match probe_group_by(key, &word) {
                GroupProbe::Found(idx) => WalkStep::Found(idx),
                GroupProbe::Absent => WalkStep::Absent,
                GroupProbe::Continue => {
                    let link = tail_link(word(G_TAIL));
                    if link == 0
                        || link - 1 >= layout.index_groups as u64
                        || self.steps > layout.index_groups
                    {
                        WalkStep::Absent
                    } else {
                        self.group = (link - 1) as u32;
                        WalkStep::Read(self.group)
                    }
                }
            };
        }
        let present = word(G_PRESENT);
        let probe = probe_group_by(key, &word);
        let tail = word(G_TAIL);
        let (stored, link) = (tail >> LINK_BITS, tail_link(tail));
        self.steps += 1;
        // Every group at most once per level, and each level once: past that the words are
        // not an index's (a torn or foreign READ), and the key is not found in them.
        if self.steps > layout.index_groups + 2 * LEVEL_MAX as u32 {
            return WalkStep::Absent;
        }
        if present == 0 || stored == 0 {
            // No bucket here yet: the hint was above this bucket's level.
            if self.level <= layout.level_initial || self.group != self.bucket {
                return WalkStep::Absent;
            }
            self.level -= 1;
            self.bucket = bucket_at(key_hash, self.level);
            self.group = self.bucket;
            return WalkStep::Read(self.group);
        }
        let level = ((stored - 1) as u8).min(layout.level_max);
        let home = bucket_at(key_hash, level);
        if home != self.bucket {
            // Split since (or a hint below it): the key lives in another bucket.
            self.level = level;
            self.bucket = home;
            self.group = home;
            return WalkStep::Read(home);
        }
        self.level = level;
        match probe {
            GroupProbe::Found(idx) => WalkStep::Found(idx),
            GroupProbe::Absent => WalkStep::Absent,
            GroupProbe::Continue if link == 0 || link - 1 >= layout.index_groups as u64 => {
                WalkStep::Absent
            }
            GroupProbe::Continue => {
                self.group = (link - 1) as u32;
                WalkStep::Read(self.group)
            }
        }
    }
}

/// How a table's keys map to nodes.
#[derive(Clone)]
pub enum Partition {
    /// Keys `[n * keys_per_node, (n + 1) * keys_per_node)` live on node `n`.
    Range { keys_per_node: u64 },
    /// Key `k` lives on node `k % nodes`.
    Modulo,
    /// Every node holds every record (read-mostly tables such as TPC-C's ITEM).
    Replicated,
    /// Any function of the key (TPC-C partitions by warehouse).
    Custom(Arc<dyn Fn(u64) -> u16 + Send + Sync>),
}

impl std::fmt::Debug for Partition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Partition::Range { keys_per_node } => write!(f, "Range({keys_per_node})"),
            Partition::Modulo => write!(f, "Modulo"),
            Partition::Replicated => write!(f, "Replicated"),
            Partition::Custom(_) => write!(f, "Custom"),
        }
    }
}

/// What a workload declares about a table.
#[derive(Clone, Debug)]
pub struct TableSpec {
    pub name: String,
    /// The workload's words per record (the engine adds [`ENGINE_PAYLOAD_WORDS`]).
    pub payload_words: u32,
    /// Records each node holds at start and the index is first laid out for (the records a
    /// workload loads, or all it ever holds for a table that does not grow).
    pub capacity_per_node: u32,
    /// Most records a node may hold: `Some(capacity_per_node)` for a table that never
    /// grows, a cap a workload's knob sets, or `None` for a table that grows as long as the
    /// run's memory budget lets it ([`Catalog::with_growth`] reserves its room).
    pub capacity_max_per_node: Option<u32>,
    pub partition: Partition,
    /// Keep an ordered index for range scans on each node.
    pub ordered: bool,
    /// Most deleted keys a node files for this table at once: keys whose slot another key
    /// took and that were not inserted again (see `Store`'s `gone`). The workload declares
    /// it from its key space (0 for a table it never deletes from); the store holds it to
    /// it, and a run's sizing counts it before it allocates.
    pub gone_keys_max_per_node: u32,
}

/// Word offsets of one table inside its region; identical on every node, so a coordinator
/// computes remote addresses without asking.
#[derive(Clone, Copy, Debug)]
pub struct TableLayout {
    /// Groups of the hash index: `buckets_max` bucket heads, then the overflow groups.
    pub index_groups: u32,
    /// Bucket heads reserved: the most buckets the index splits into.
    pub buckets_max: u32,
    /// The level every bucket has when the table is created (`2^level_initial` buckets).
    pub level_initial: u8,
    /// The level of `buckets_max` buckets.
    pub level_max: u8,
    pub records_base: u32,
    /// Words of a whole record slot: the tuple plus MVCC's older versions.
    pub record_words: u32,
    /// Header plus current payload: what a READ of the tuple fetches.
    pub tuple_words: u32,
    /// Stored payload words: the engine's words, then the workload's.
    pub payload_words: u32,
    /// Versions kept per record (1 unless the protocol is multi-version).
    pub version_slots: u32,
    /// Where the older versions' headers are.
    pub old_versions: OldVersions,
    /// Record slots reserved: the most records a node may hold.
    pub capacity: u32,
    /// Word offset of the overflow area (after the records).
    pub overflow_base: u32,
    /// Entries of the overflow area (0: none).
    pub overflow_entries: u32,
}

/// The level of the fewest buckets that hold `records` at [`RECORDS_PER_BUCKET`] each.
fn level_for(records: u64) -> u8 {
    records
        .div_ceil(RECORDS_PER_BUCKET)
        .max(1)
        .next_power_of_two()
        .trailing_zeros() as u8
}

impl TableLayout {
    pub fn new(spec: &TableSpec) -> Self {
        Self::with_versions(spec, 1)
    }

    /// Record slots reserved for `spec` when a table without a cap may grow to
    /// `growth_records`: its cap, or that (never fewer than it starts with).
    pub fn capacity_reserved(spec: &TableSpec, growth_records: u32) -> u32 {
        spec.capacity_max_per_node
            .unwrap_or(growth_records)
            .max(spec.capacity_per_node)
    }

    /// Groups of the hash index of a table reserving `capacity` records per node: bucket
    /// heads, then overflow groups.
    fn index_groups_for(capacity: u64) -> (u64, u64) {
        let heads = 1u64 << level_for(capacity);
        (
            heads,
            heads + (heads / OVERFLOW_GROUPS_PER_BUCKET_DIV).max(1),
        )
    }

    /// Words of one record slot (tuple and older versions) of a table.
    pub fn slot_words(spec: &TableSpec, version_slots: u32) -> u64 {
        let payload_words = spec.payload_words as u64 + ENGINE_PAYLOAD_WORDS as u64;
        HEADER_WORDS as u64
            + payload_words
            + (version_slots as u64).saturating_sub(1)
                * (OLD_SLOT_HEADER_WORDS as u64 + payload_words)
    }

    /// Words of the region a table of `spec` reserving `capacity` records with
    /// `version_slots` versions each needs on each node (hash index and record slots),
    /// computed without building the layout, so a run can refuse one whose word offsets
    /// would not fit [`REGION_WORDS_MAX`].
    pub fn region_words_for(spec: &TableSpec, version_slots: u32, capacity: u32) -> u64 {
        Self::index_groups_for(capacity as u64).1 * GROUP_WORDS as u64
            + capacity as u64 * Self::slot_words(spec, version_slots)
    }

    /// [`TableLayout::region_words_for`] a table that does not grow past its start.
    pub fn region_words_needed(spec: &TableSpec, version_slots: u32) -> u64 {
        Self::region_words_for(spec, version_slots, Self::capacity_reserved(spec, 0))
    }

    /// Words of memory a table's index takes when its `records` are in place: the bucket
    /// heads a table laid out for them has (what a node writes at start).
    pub fn index_words_initial(spec: &TableSpec) -> u64 {
        (1u64 << level_for(spec.capacity_per_node as u64)) * GROUP_WORDS as u64
    }

    /// Records a table without a cap reserves on a node so that they, their index and
    /// their overflow area (`overflow_per_record` entries each) take at most
    /// `bytes_per_node`, within a region's [`REGION_WORDS_MAX`]; never fewer than it starts
    /// with.
    pub fn growth_records(
        spec: &TableSpec,
        version_slots: u32,
        bytes_per_node: u64,
        overflow_per_record: u32,
    ) -> u32 {
        // Index words per record at worst: 1.5 groups per bucket, a bucket per 4 records,
        // doubled by rounding to a power of two.
        let index_words = 2 * 3 * GROUP_WORDS as u64 / (2 * RECORDS_PER_BUCKET);
        let per_record = Self::slot_words(spec, version_slots)
            + Self::overflow_words_per_record(spec, overflow_per_record)
            + index_words;
        let by_bytes = bytes_per_node / 8 / per_record;
        let by_region = REGION_WORDS_MAX / per_record;
        by_bytes
            .min(by_region)
            .min(u32::MAX as u64)
            .max(spec.capacity_per_node as u64) as u32
    }

    /// A layout keeping `version_slots` versions per record (MVCC), at least 1.
    pub fn with_versions(spec: &TableSpec, version_slots: u32) -> Self {
        Self::reserving(spec, version_slots, Self::capacity_reserved(spec, 0))
    }

    /// A layout reserving `capacity` record slots, each keeping `version_slots` versions.
    pub fn reserving(spec: &TableSpec, version_slots: u32, capacity: u32) -> Self {
        assert!(
            version_slots >= 1,
            "table {}: at least one version slot",
            spec.name
        );
        let total = Self::region_words_for(spec, version_slots, capacity);
        assert!(
            total <= REGION_WORDS_MAX,
            "table {} needs {total} words per node, over the 2^32-word region limit",
            spec.name
        );
        // Every figure below is at most `total`, which fits a u32.
        let (heads, groups) = Self::index_groups_for(capacity as u64);
        let records_base = (groups * GROUP_WORDS as u64) as u32;
        let payload_words = spec.payload_words + ENGINE_PAYLOAD_WORDS;
        let tuple_words = HEADER_WORDS + payload_words;
        let record_words = Self::slot_words(spec, version_slots) as u32;
        TableLayout {
            index_groups: groups as u32,
            buckets_max: heads as u32,
            level_initial: level_for(spec.capacity_per_node.min(capacity) as u64),
            level_max: level_for(capacity as u64),
            records_base,
            record_words,
            tuple_words,
            payload_words,
            version_slots,
            old_versions: OldVersions::Inline,
            capacity,
            overflow_base: total as u32,
            overflow_entries: 0,
        }
    }

    /// Words of an overflow area of `per_record` entries per record slot of `spec`.
    pub fn overflow_words_needed(spec: &TableSpec, per_record: u32) -> u64 {
        Self::capacity_reserved(spec, 0) as u64 * Self::overflow_words_per_record(spec, per_record)
    }

    /// Words of overflow area each record slot brings with `per_record` entries.
    pub fn overflow_words_per_record(spec: &TableSpec, per_record: u32) -> u64 {
        let entry = OVERFLOW_ENTRY_HEADER_WORDS as u64
            + spec.payload_words as u64
            + ENGINE_PAYLOAD_WORDS as u64;
        per_record as u64 * entry
    }

    /// Words of one overflow entry.
    #[inline]
    pub fn overflow_entry_words(&self) -> u32 {
        OVERFLOW_ENTRY_HEADER_WORDS + self.payload_words
    }

    /// Word offset, within the table's region, of overflow entry `e`.
    #[inline]
    pub fn overflow_entry_offset(&self, e: u32) -> u32 {
        debug_assert!(
            e < self.overflow_entries,
            "overflow entry {e} of {}",
            self.overflow_entries
        );
        self.overflow_base + e * self.overflow_entry_words()
    }

    /// Word offset, within a record, of older version `j` (0-based, `j < version_slots - 1`)
    /// in the [`OldVersions::Inline`] form: its header, then its payload.
    #[inline]
    pub fn old_slot_offset(&self, j: u32) -> u32 {
        debug_assert!(
            j + 1 < self.version_slots,
            "old slot {j} of {}",
            self.version_slots
        );
        debug_assert_eq!(
            self.old_versions,
            OldVersions::Inline,
            "old slots are apart"
        );
        self.tuple_words + j * (OLD_SLOT_HEADER_WORDS + self.payload_words)
    }

    /// Word offset, within a record, of older version `j`'s 2-word header, in either form.
    #[inline]
    pub fn old_header_offset(&self, j: u32) -> u32 {
        debug_assert!(
            j + 1 < self.version_slots,
            "old slot {j} of {}",
            self.version_slots
        );
        match self.old_versions {
            OldVersions::Inline => {
                self.tuple_words + j * (OLD_SLOT_HEADER_WORDS + self.payload_words)
            }
            OldVersions::HeadersApart => self.tuple_words + j * OLD_SLOT_HEADER_WORDS,
        }
    }

    /// Word offset, within a record, of older version `j`'s payload, in either form.
    #[inline]
    pub fn old_payload_offset(&self, j: u32) -> u32 {
        match self.old_versions {
            OldVersions::Inline => self.old_header_offset(j) + OLD_SLOT_HEADER_WORDS,
            OldVersions::HeadersApart => {
                debug_assert!(j + 1 < self.version_slots, "old slot {j}");
                self.tuple_words
                    + (self.version_slots - 1) * OLD_SLOT_HEADER_WORDS
                    + j * self.payload_words
            }
        }
    }

    /// Words from a record's start that hold the header of every version it keeps: what a
    /// reader choosing a version by its headers READs (the tuple alone with one version; the
    /// whole block inline; the tuple and the old headers apart).
    #[inline]
    pub fn headers_words(&self) -> u32 {
        match (self.version_slots, self.old_versions) {
            (1, _) => self.tuple_words,
            (_, OldVersions::Inline) => self.record_words,
            (v, OldVersions::HeadersApart) => self.tuple_words + (v - 1) * OLD_SLOT_HEADER_WORDS,
        }
    }

    pub fn region_words(&self) -> usize {
        self.overflow_base as usize
            + self.overflow_entries as usize * self.overflow_entry_words() as usize
    }

    /// Word offset of record slot `idx`.
    #[inline]
    pub fn record_offset(&self, idx: u32) -> u32 {
        debug_assert!(
            idx < self.capacity,
            "record {idx} beyond capacity {}",
            self.capacity
        );
        self.records_base + idx * self.record_words
    }

    /// Record slot index of a record offset.
    #[inline]
    pub fn record_index(&self, offset: u32) -> u32 {
        (offset - self.records_base) / self.record_words
    }

    #[inline]
    pub fn group_offset(&self, group: u32) -> u32 {
        group * GROUP_WORDS
    }
}

/// The key hash used by the index (a 64-bit finaliser: cheap and well mixed).
#[inline]
pub fn hash_key(key: u64) -> u64 {
    let mut z = key.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// What scanning one index group found.
#[derive(Debug, PartialEq, Eq)]
pub enum GroupProbe {
    /// The key's record slot.
    Found(u32),
    /// An empty slot ends the probe: the key is absent.
    Absent,
    /// The group is full of other keys; probe the next group.
    Continue,
}

/// Looks for `key` in the words of one index group (as one READ returns them).
pub fn probe_group(words: &[u64], key: u64) -> GroupProbe {
    debug_assert_eq!(words.len(), GROUP_WORDS as usize);
    probe_group_by(key, |w| words[w as usize])
}

/// [`probe_group`] over a group's words as `word(i)` gives them (`i` < [`GROUP_WORDS`]),
/// taken in the order a READ delivers them (each slot's key, then its meta) and only up to
/// the slot that decides: a group probed in place loads no more than it needs.
#[inline]
pub fn probe_group_by(key: u64, word: impl Fn(u32) -> u64) -> GroupProbe {
    for s in 0..GROUP_SLOTS {
        let at = slot_word(s);
        let k = word(at);
        match word(at + 1) {
            META_EMPTY => return GroupProbe::Absent,
            META_TOMBSTONE => {}
            meta if k == key => return GroupProbe::Found((meta - META_USED_BASE) as u32),
            _ => {}
        }
    }
    GroupProbe::Continue
}

/// Tables, their layouts and how they map to nodes: immutable after start-up and shared by
/// every node.
#[derive(Debug)]
pub struct Catalog {
    /// Nodes holding records (`0..nodes`): every node when partitioned, the memory nodes
    /// under shared-data ([`Topology`]).
    pub nodes: u16,
    topology: Topology,
    tables: Vec<(TableSpec, TableLayout)>,
    extra_regions: Vec<ExtraRegion>,
    /// The last this many of `extra_regions` are registered only by nodes holding records
    /// ([`Catalog::with_table_regions`]).
    records_only: usize,
    /// Copies of other partitions each node holding records keeps beside its own (a
    /// backup's replicas, [`Catalog::with_replica_regions`]): their tables' regions are the
    /// last `replica_copies × tables` of `extra_regions`.
    replica_copies: u16,
    lock_word: LockWord,
    /// Per table and node holding records, where its index stood as its owner last
    /// published it (or a reader saw it): where the next lookup starts (a hint only; any
    /// hint finds the key, see [`IndexWalk`]).
    index_hints: Vec<std::sync::atomic::AtomicU64>,
}

/// A table's record slots on each node holding it: as loaded, and as reserved for its
/// growth ([`Catalog::with_growth`]); what a region sized by the tables is sized from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TableSlots {
    pub start: u64,
    pub reserved: u64,
}

/// The name of the extra regions holding a backup's replicas ([`Catalog::with_replica_regions`]).
pub const REPLICA_REGION: &str = "replica";

/// A region every node registers after its tables' (the coordinators' log, a protocol
/// family's own), found by its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtraRegion {
    pub name: &'static str,
    pub words: usize,
}

impl Catalog {
    /// `extra_regions` are regions numbered after the tables' (logs, a family's own).
    pub fn new(nodes: u16, specs: Vec<TableSpec>, extra_regions: Vec<ExtraRegion>) -> Self {
        Self::with_versions(nodes, specs, extra_regions, 1)
    }

    /// A catalog whose records keep `version_slots` versions each (MVCC).
    pub fn with_versions(
        nodes: u16,
        specs: Vec<TableSpec>,
        extra_regions: Vec<ExtraRegion>,
        version_slots: u32,
    ) -> Self {
        assert!(nodes > 0, "a catalog needs at least one node");
        let tables = specs.into_iter().map(|s| {
            let l = TableLayout::with_versions(&s, version_slots);
            (s, l)
        });
        let tables: Vec<_> = tables.collect();
        Catalog {
            nodes,
            topology: Topology::partitioned(nodes),
            index_hints: tables
                .iter()
                .flat_map(|(_, l)| {
                    (0..nodes).map(|_| {
                        std::sync::atomic::AtomicU64::new(IndexHint::new(l.level_initial, 0).0)
                    })
                })
                .collect(),
            tables,
            extra_regions,
            records_only: 0,
            replica_copies: 0,
            lock_word: LockWord::Owner,
        }
    }

    /// The catalog whose tables without a cap reserve room to grow to `bytes_per_node` (by
    /// table) of records (and their index and overflow area) on each node holding them, within a
    /// region's [`REGION_WORDS_MAX`]; called before [`Catalog::with_overflow`], whose
    /// `overflow_per_record` it counts. The run's memory budget, not the reservation, bounds
    /// what they take.
    pub fn with_growth(mut self, bytes_per_node: &[u64], overflow_per_record: u32) -> Self {
        assert_eq!(
            bytes_per_node.len(),
            self.tables.len(),
            "room for every table"
        );
        let nodes = self.nodes as usize;
        for (((spec, l), hints), &bytes_per_node) in self
            .tables
            .iter_mut()
            .zip(self.index_hints.chunks(nodes))
            .zip(bytes_per_node)
        {
            assert_eq!(l.overflow_entries, 0, "growth is laid out before overflow");
            if spec.capacity_max_per_node.is_some() {
                continue;
            }
            let records = TableLayout::growth_records(
                spec,
                l.version_slots,
                bytes_per_node,
                overflow_per_record,
            );
            *l = TableLayout::reserving(spec, l.version_slots, records);
            for h in hints {
                h.store(
                    IndexHint::new(l.level_initial, 0).0,
                    std::sync::atomic::Ordering::Relaxed,
                );
            }
        }
        self
    }

    fn hint_cell(&self, t: TableId, node: NodeId) -> &std::sync::atomic::AtomicU64 {
        &self.index_hints[t.0 as usize * self.nodes as usize + node.0 as usize]
    }

    /// Where a lookup in `t` on `node` starts ([`IndexWalk::start`]).
    #[inline]
    pub fn index_hint(&self, t: TableId, node: NodeId) -> IndexHint {
        IndexHint(
            self.hint_cell(t, node)
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The owner of `t`'s records on `node` publishes where its index stands now.
    #[inline]
    pub fn publish_index(&self, t: TableId, node: NodeId, hint: IndexHint) {
        self.hint_cell(t, node)
            .store(hint.0, std::sync::atomic::Ordering::Relaxed);
    }

    /// A reader that found a bucket at `level` notes it: only a level its hint cannot
    /// explain (beyond the hint's `L + 1`, the index moved on a whole level since) raises
    /// the hint, so readers never undo what the owner published.
    #[inline]
    pub fn note_level(&self, t: TableId, node: NodeId, level: u8) {
        let cell = self.hint_cell(t, node);
        let hint = IndexHint(cell.load(std::sync::atomic::Ordering::Relaxed));
        if level > hint.level().saturating_add(1) {
            cell.fetch_max(
                IndexHint::new(level - 1, 0).0,
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    }

    /// The same catalog with index hints of its own, starting where this one's stand: for a
    /// store that holds a copy of a partition (a backup's replica), whose own splits must
    /// not move the hints the partition's readers start from.
    pub fn detached(&self) -> Catalog {
        Catalog {
            nodes: self.nodes,
            topology: self.topology,
            tables: self.tables.clone(),
            extra_regions: self.extra_regions.clone(),
            records_only: self.records_only,
            replica_copies: self.replica_copies,
            lock_word: self.lock_word,
            index_hints: self
                .index_hints
                .iter()
                .map(|h| {
                    std::sync::atomic::AtomicU64::new(h.load(std::sync::atomic::Ordering::Relaxed))
                })
                .collect(),
        }
    }

    /// The catalog with records whose `LOCK` word holds `lock_word`'s format.
    pub fn with_lock_word(mut self, lock_word: LockWord) -> Self {
        self.lock_word = lock_word;
        self
    }

    /// The catalog whose tables each keep an overflow area of `per_record` entries per
    /// record slot on every node holding them (NAM-DB's; its size counted by
    /// [`TableLayout::overflow_words_needed`] before).
    pub fn with_overflow(mut self, per_record: u32) -> Self {
        for (spec, l) in &mut self.tables {
            let entries = l.capacity as u64 * per_record as u64;
            let total = l.overflow_base as u64
                + l.capacity as u64 * TableLayout::overflow_words_per_record(spec, per_record);
            assert!(
                total <= REGION_WORDS_MAX && entries <= u32::MAX as u64,
                "table {} with {per_record} overflow entries per record needs {total} words per node, over the 2^32-word region limit",
                spec.name
            );
            l.overflow_entries = entries as u32;
        }
        self
    }

    /// The catalog with records keeping their older versions in `form` (the slot sizes, and
    /// so every region's, stay the same).
    pub fn with_old_versions(mut self, form: OldVersions) -> Self {
        for (_, l) in &mut self.tables {
            l.old_versions = form;
        }
        self
    }

    /// The catalog of a cluster whose nodes have `topology`'s roles (its memory nodes are
    /// the catalog's nodes).
    pub fn with_topology(mut self, topology: Topology) -> Self {
        assert_eq!(
            topology.memory_nodes(),
            self.nodes,
            "the topology's memory nodes are the catalog's nodes"
        );
        self.topology = topology;
        self
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// What every record's `LOCK` word holds.
    pub fn lock_word(&self) -> LockWord {
        self.lock_word
    }

    pub fn table_count(&self) -> usize {
        self.tables.len()
    }

    pub fn spec(&self, t: TableId) -> &TableSpec {
        &self.tables[t.0 as usize].0
    }

    #[inline]
    pub fn layout(&self, t: TableId) -> &TableLayout {
        &self.tables[t.0 as usize].1
    }

    pub fn table_by_name(&self, name: &str) -> Option<TableId> {
        self.tables
            .iter()
            .position(|(s, _)| s.name == name)
            .map(|i| TableId(i as u16))
    }

    /// The region id of extra region `i`.
    pub fn extra_region(&self, i: usize) -> RegionId {
        assert!(
            i < self.extra_regions.len(),
            "extra region {i} of {}",
            self.extra_regions.len()
        );
        RegionId((self.tables.len() + i) as u16)
    }

    /// Extra regions (after the tables') every node registers.
    pub fn extra_region_count(&self) -> usize {
        self.extra_regions.len()
    }

    /// Words of extra region `i`.
    pub fn extra_region_words(&self, i: usize) -> usize {
        self.extra_regions[i].words
    }

    /// The index of the extra region named `name`, if the catalog registers one.
    pub fn extra_region_named(&self, name: &str) -> Option<usize> {
        self.extra_regions.iter().position(|r| r.name == name)
    }

    /// The catalog with regions sized by its tables' record slots per node (growth
    /// included), as `regions` makes them from those counts (Tell's B+tree index): numbered
    /// after the extra regions, registered by nodes holding records only (empty elsewhere).
    /// Called after [`Catalog::with_growth`] and [`Catalog::with_overflow`].
    pub fn with_table_regions(
        mut self,
        regions: impl FnOnce(&[TableSlots]) -> Vec<ExtraRegion>,
    ) -> Self {
        assert_eq!(self.replica_copies, 0, "replica regions come last");
        let records = self.table_slots();
        let made = regions(&records);
        self.records_only += made.len();
        self.extra_regions.extend(made);
        self
    }

    /// The catalog with room in every node holding records for `copies` replicas of other
    /// partitions: a region per table per copy, as large as the table's own, numbered after
    /// every other region and registered by nodes holding records only. A backup's replica
    /// lives in registered memory, so the fabric can serve it once its partition fails over
    /// (TODO(#41)). Called last.
    pub fn with_replica_regions(mut self, copies: u16) -> Self {
        assert_eq!(self.replica_copies, 0, "replica regions are laid out once");
        let made: Vec<ExtraRegion> = (0..copies)
            .flat_map(|_| {
                self.tables.iter().map(|(_, l)| ExtraRegion {
                    name: REPLICA_REGION,
                    words: l.region_words(),
                })
            })
            .collect();
        self.records_only += made.len();
        self.extra_regions.extend(made);
        self.replica_copies = copies;
        self
    }

    /// Copies of other partitions each node holding records has room for
    /// ([`Catalog::with_replica_regions`]).
    pub fn replica_copies(&self) -> u16 {
        self.replica_copies
    }

    /// The region of a node holding records where its replica `copy` keeps table `t`.
    pub fn replica_region(&self, copy: u16, t: TableId) -> RegionId {
        assert!(
            copy < self.replica_copies && (t.0 as usize) < self.tables.len(),
            "replica {copy} of {} copies, table {} of {}",
            self.replica_copies,
            t.0,
            self.tables.len()
        );
        let tables = self.tables.len();
        let first = self.extra_regions.len() - self.replica_copies as usize * tables;
        self.extra_region(first + copy as usize * tables + t.0 as usize)
    }

    /// Each table's record slots per node, as loaded and as reserved.
    pub fn table_slots(&self) -> Vec<TableSlots> {
        self.tables
            .iter()
            .map(|(s, l)| TableSlots {
                start: s.capacity_per_node as u64,
                reserved: l.capacity as u64,
            })
            .collect()
    }

    /// Whether extra region `i` is registered only by nodes holding records.
    fn records_only(&self, i: usize) -> bool {
        i >= self.extra_regions.len() - self.records_only
    }

    /// Sizes of every region a node registers, in region-id order.
    pub fn region_words(&self) -> Vec<usize> {
        self.tables
            .iter()
            .map(|(_, l)| l.region_words())
            .chain(self.extra_regions.iter().map(|r| r.words))
            .collect()
    }

    /// Sizes of every region node `n` registers: a node holding no records registers its
    /// tables' regions empty (their ids stay the same on every node).
    pub fn region_words_of(&self, n: NodeId) -> Vec<usize> {
        let holds = self.topology.holds_records(n);
        self.tables
            .iter()
            .map(|(_, l)| if holds { l.region_words() } else { 0 })
            .chain(self.extra_regions.iter().enumerate().map(|(i, r)| {
                if holds || !self.records_only(i) {
                    r.words
                } else {
                    0
                }
            }))
            .collect()
    }

    /// The node holding `key`; for a replicated table, the asking node's own copy (a compute
    /// node's home memory node's, under shared-data).
    #[inline]
    pub fn home(&self, t: TableId, key: u64, asking: NodeId) -> NodeId {
        let n = match &self.tables[t.0 as usize].0.partition {
            Partition::Range { keys_per_node } => {
                ((key / keys_per_node) as u16).min(self.nodes - 1)
            }
            Partition::Modulo => (key % self.nodes as u64) as u16,
            Partition::Replicated if asking.0 < self.nodes => asking.0,
            Partition::Replicated => self.topology.home_of(asking).0,
            Partition::Custom(f) => f(key),
        };
        debug_assert!(
            n < self.nodes,
            "table {} maps key {key} to node {n} of {}",
            self.spec(t).name,
            self.nodes
        );
        NodeId(n)
    }

    pub fn is_replicated(&self, t: TableId) -> bool {
        matches!(self.tables[t.0 as usize].0.partition, Partition::Replicated)
    }

    /// Whether node `n` holds (a copy of) `key`.
    pub fn holds(&self, t: TableId, key: u64, n: NodeId) -> bool {
        self.is_replicated(t) || self.home(t, key, n) == n
    }

    #[inline]
    pub fn record_ptr(&self, t: TableId, node: NodeId, idx: u32) -> RemotePtr {
        RemotePtr::new(node, RegionId(t.0), self.layout(t).record_offset(idx))
    }

    #[inline]
    pub fn group_ptr(&self, t: TableId, node: NodeId, group: u32) -> RemotePtr {
        RemotePtr::new(node, RegionId(t.0), self.layout(t).group_offset(group))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, partition: Partition) -> TableSpec {
        TableSpec {
            name: name.into(),
            payload_words: 3,
            capacity_per_node: 100,
            capacity_max_per_node: Some(100),
            partition,
            ordered: false,
            gone_keys_max_per_node: 0,
        }
    }

    #[test]
    fn catalog_maps_keys_to_nodes_per_table_and_replicated_tables_to_the_asker() {
        let by_warehouse = Partition::Custom(Arc::new(|k: u64| ((k >> 32) % 3) as u16));
        let c = Catalog::new(
            3,
            vec![
                spec("range", Partition::Range { keys_per_node: 10 }),
                spec("modulo", Partition::Modulo),
                spec("item", Partition::Replicated),
                spec("custom", by_warehouse),
            ],
            vec![ExtraRegion {
                name: "log",
                words: 64,
            }],
        );
        let (range, modulo, item, custom) = (TableId(0), TableId(1), TableId(2), TableId(3));
        assert_eq!(c.home(range, 9, NodeId(2)), NodeId(0));
        assert_eq!(c.home(range, 25, NodeId(0)), NodeId(2));
        assert_eq!(
            c.home(range, 1000, NodeId(0)),
            NodeId(2),
            "range clamps to the last node"
        );
        assert_eq!(c.home(modulo, 7, NodeId(0)), NodeId(1));
        for n in 0..3 {
            assert_eq!(c.home(item, 5, NodeId(n)), NodeId(n));
            assert!(c.holds(item, 5, NodeId(n)));
        }
        assert_eq!(c.home(custom, (4 << 32) | 9, NodeId(0)), NodeId(1));
        assert_eq!(c.extra_region(0), RegionId(4));
        assert_eq!(c.region_words().len(), 5);
        assert_eq!(c.table_by_name("item"), Some(item));
        // Layouts: index groups first, then records of header + payload.
        let l = c.layout(range);
        assert_eq!(l.record_words, HEADER_WORDS + ENGINE_PAYLOAD_WORDS + 3);
        assert_eq!(l.record_offset(0), l.index_groups * GROUP_WORDS);
        assert_eq!(l.record_index(l.record_offset(7)), 7);
        assert!(l.index_groups * GROUP_SLOTS >= 2 * l.capacity);
    }

    #[test]
    fn both_forms_of_old_versions_tile_the_same_record_slot_without_overlap() {
        for form in [OldVersions::Inline, OldVersions::HeadersApart] {
            for versions in 2..6 {
                let mut l = TableLayout::with_versions(&spec("t", Partition::Modulo), versions);
                l.old_versions = form;
                // Every word of the slot is covered exactly once: the tuple, each old
                // header and each old payload.
                let mut owner = vec![0u32; l.record_words as usize];
                for w in &mut owner[..l.tuple_words as usize] {
                    *w += 1;
                }
                for j in 0..versions - 1 {
                    let h = l.old_header_offset(j) as usize;
                    let p = l.old_payload_offset(j) as usize;
                    for w in &mut owner[h..h + OLD_SLOT_HEADER_WORDS as usize] {
                        *w += 1;
                    }
                    for w in &mut owner[p..p + l.payload_words as usize] {
                        *w += 1;
                    }
                }
                assert!(
                    owner.iter().all(|&n| n == 1),
                    "{form:?} x{versions}: {owner:?}"
                );
                let last_header = l.old_header_offset(versions - 2) + OLD_SLOT_HEADER_WORDS;
                match form {
                    OldVersions::Inline => assert_eq!(l.headers_words(), l.record_words),
                    OldVersions::HeadersApart => {
                        assert_eq!(l.headers_words(), last_header, "headers come first");
                        assert_eq!(l.headers_words(), l.old_payload_offset(0));
                    }
                }
            }
        }
        let one = TableLayout::new(&spec("t", Partition::Modulo));
        assert_eq!(one.headers_words(), one.tuple_words);
    }

    #[test]
    fn a_payload_check_catches_torn_misplaced_and_retagged_payloads() {
        let t = TableId(1);
        let mut p = Vec::new();
        seal(t, 7, 42, &[1, 2, 3], &mut p);
        assert!(payload_intact(t, 7, &p));
        assert!(
            payload_intact_hashed(t, hash_key(7), &p),
            "the hashed form checks the same"
        );
        assert!(!payload_intact(t, 8, &p), "another key's payload");
        assert!(!payload_intact(TableId(0), 7, &p), "table 0's payload");
        assert!(
            !payload_intact(TableId(2), 7, &p),
            "another table's payload"
        );
        let mut torn = p.clone();
        torn[4] = 9;
        assert!(!payload_intact(t, 7, &torn), "a word of another write");
        let mut retagged = p.clone();
        retagged[P_TAG as usize] = 43;
        assert!(!payload_intact(t, 7, &retagged), "another writer's tag");
    }

    #[test]
    fn probe_stops_at_empty_skips_tombstones_and_continues_when_full() {
        let mut g = vec![0u64; GROUP_WORDS as usize];
        assert_eq!(probe_group(&g, 5), GroupProbe::Absent);
        let at = |s: u32| slot_word(s) as usize;
        g[at(0)] = 5;
        g[at(0) + 1] = META_TOMBSTONE;
        g[at(1)] = 5;
        g[at(1) + 1] = META_USED_BASE + 9;
        assert_eq!(probe_group(&g, 5), GroupProbe::Found(9));
        for s in 0..GROUP_SLOTS {
            g[at(s)] = 100 + s as u64;
            g[at(s) + 1] = META_USED_BASE;
        }
        assert_eq!(probe_group(&g, 5), GroupProbe::Continue);
    }
}
