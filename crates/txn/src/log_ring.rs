//! The coordinators' log rings on a backup and the log cleaner that applies them to the
//! backup's replicas of the partitions it backs up (FaRM's backups, applied in order).
//!
//! A ring is a header word then [`LOG_RING_RECORDS`] record slots, each room for the
//! workload's largest record. A coordinator's records to one backup are numbered from 0
//! (`seq`); record `seq` lies in slot `seq % LOG_RING_RECORDS`, and the header word holds
//! how many records the backup applied, so a coordinator writes record `seq` only once
//! `seq < applied + LOG_RING_RECORDS` (back-pressure: a full ring waits, never drops). A
//! record carries its `seq` in its checksum, so a slot's stale record of an earlier lap, or
//! one still being written (a torn WRITE), is never taken for the one expected.
//!
//! The cleaner applies each ring's records in order, entry by entry, each entry only when
//! its key's version in the replica is the one just before it (a record of another
//! coordinator's ring that wrote the key before may not be applied yet): a key's writes are
//! serialized by its lock, and a writer logs only after the previous writer's log reached
//! every backup, so the record an entry waits for is always already in its ring and the
//! wait ends.
//!
//! A record is applied only once its transaction is known to have committed, so a crash
//! leaves every record of an undecided transaction unapplied, for recovery to roll forward
//! or drop: a ring's record is decided once the coordinator's next record to the same ring
//! is there (a coordinator logs its next transaction only after the last one's write-back,
//! and one whose log write failed voids the record at every backup before it lets its
//! locks go, [`crate::stages::log_to`]), or once another ring's record writes the next
//! version of a key it writes (that writer saw its write installed, which follows a whole
//! log), or once the run is over ([`LogCleaner::drain`]).

use crate::coord::Access;
use atoll_fabric::memory::Region;
use atoll_fabric::NodeId;
use atoll_storage::layout::{VERSION_ABSENT, VERSION_KEY_MASK};
use atoll_storage::{Store, TableId};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Record slots of a coordinator's ring on each backup: a few, so a backup that applies a
/// little behind does not stall its coordinators.
pub const LOG_RING_RECORDS: u32 = 8;
/// Words before a ring's slots: the count of its records the backup applied.
pub const LOG_RING_HEAD_WORDS: u32 = 1;

/// Words of a log record before its entries: timestamp, the ring's record number (`seq`),
/// entry count, record length, the attempt's tag, the timestamp its write-back sets.
pub const LOG_RECORD_HEAD_WORDS: u64 = 6;
/// Where in a record the attempt's tag and its write-back's timestamp lie.
pub const RECORD_TAG_WORD: usize = 4;
pub const RECORD_SET_TS_WORD: usize = 5;
/// Words of a log record after its entries: the checksum.
pub const LOG_RECORD_TAIL_WORDS: u64 = 1;
/// Words of each log entry before its payload: what (table, access, partition), key, new
/// version, payload length.
pub const LOG_ENTRY_HEAD_WORDS: u64 = 4;

/// Where in a record its `seq` lies (filled per backup, after the rest is built).
pub const RECORD_SEQ_WORD: usize = 1;

/// Mixes a ring's record number into a record's checksum.
const SEQ_MIX: u64 = 0x9e37_79b9_7f4a_7c15;

/// The checksum of a record's words (`seq` word and checksum excluded), before its `seq`.
pub fn body_sum(words: &[u64]) -> u64 {
    words
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != RECORD_SEQ_WORD)
        .fold(0u64, |a, (_, w)| a.rotate_left(7) ^ w)
}

/// The checksum of a record whose body sums to `body` as record `seq` of its ring.
pub fn record_sum(body: u64, seq: u64) -> u64 {
    body ^ seq.wrapping_mul(SEQ_MIX).rotate_left(17)
}

/// The first word of a log entry: its table, how the transaction used the record, and the
/// partition (the primary node) holding it.
pub fn entry_what(table: TableId, access: Access, partition: NodeId) -> u64 {
    let a = match access {
        Access::Read => 0,
        Access::Update => 1,
        Access::Insert => 2,
        Access::Delete => 3,
    };
    table.0 as u64 | a << 16 | (partition.0 as u64) << 32
}

pub(crate) fn what_parts(w: u64) -> Option<(TableId, Access, NodeId)> {
    let access = match (w >> 16) & 0xffff {
        1 => Access::Update,
        2 => Access::Insert,
        3 => Access::Delete,
        _ => return None,
    };
    if w >> 48 != 0 {
        return None;
    }
    Some((
        TableId((w & 0xffff) as u16),
        access,
        NodeId(((w >> 32) & 0xffff) as u16),
    ))
}

/// Where coordinators' rings lie in a node's log region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingGeometry {
    /// Words of a ring's record slots, all of them (`LOG_RING_RECORDS` × the largest record).
    pub ring_words: u32,
    /// Rings the region holds.
    pub rings: u32,
}

impl RingGeometry {
    /// Words from one ring's start to the next's.
    pub fn stride(&self) -> u32 {
        LOG_RING_HEAD_WORDS + self.ring_words
    }

    /// Room for one record in a slot.
    pub fn record_words_max(&self) -> u32 {
        self.ring_words / LOG_RING_RECORDS
    }

    /// Words of the region holding every ring.
    pub fn region_words(&self) -> usize {
        self.stride() as usize * self.rings as usize
    }

    /// Where record `seq` goes in the ring starting at `base`.
    pub fn slot_offset(&self, base: u32, seq: u64) -> u32 {
        base + LOG_RING_HEAD_WORDS
            + (seq % LOG_RING_RECORDS as u64) as u32 * self.record_words_max()
    }
}

/// A backup's copy of one partition, which its cleaner keeps.
pub struct Replica {
    pub partition: NodeId,
    pub store: Arc<Store>,
}

/// A record number no ring reaches: what a voided record's `seq` word is overwritten with
/// (its coordinator's log write failed, or a recovery found it aborted).
pub const VOID_SEQ: u64 = u64::MAX;

/// One ring as a recovery gathers it ([`LogCleaner::doubts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RingDoubt {
    pub ring: u32,
    /// The tag of the last record the backup applied from it (0: none).
    pub applied_tag: u64,
    /// That record, if its slot still holds it whole (else empty).
    pub applied: Vec<u64>,
    /// The whole records not applied yet, in ring order.
    pub unapplied: Vec<Vec<u64>>,
}

/// Where one ring's cleaning stands.
#[derive(Clone, Copy, Debug, Default)]
struct RingState {
    /// The record expected next (records before it are applied).
    next_seq: u64,
    /// Entries of that record already applied (it stopped at one whose key was not ready).
    entries_done: u32,
    /// Records before this one are known to have committed, though no record follows them
    /// in the ring: another ring's record writes the next version of a key one writes, or
    /// a recovery settled it.
    decided_through: u64,
    /// The tag of the last record applied (0: none yet).
    applied_tag: u64,
}

/// The write an entry that was not ready waits for: of key `key` of table `table` in
/// `partition`, its version `version` (`None`: the key's insert).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Want {
    table: TableId,
    partition: NodeId,
    key: u64,
    version: Option<u64>,
}

/// What a pass of the cleaner did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PassCounts {
    pub records: u64,
    pub entries: u64,
    /// Words of the applied entries' payloads (what the pass copied).
    pub words: u64,
    /// Rings whose next record waited on a key another ring's record writes first.
    pub waiting: u64,
    /// Rings whose next record, whole, waited to be known committed (the coordinator's
    /// last record to this node).
    pub held: u64,
    /// Records applied because another ring's record wrote after them (not because their
    /// coordinator logged again).
    pub decided_by_successor: u64,
    /// Inserts parked because their replica table had no free slot yet, and those moved
    /// into a slot since.
    pub parked: u64,
    pub unparked: u64,
}

/// Most problems a cleaner keeps word of (the first ones: each names its record).
const PROBLEMS_MAX: usize = 8;

/// A backup's log cleaner: its rings' progress and its replicas.
pub struct LogCleaner {
    geometry: RingGeometry,
    rings: Vec<RingState>,
    replicas: Vec<Replica>,
    /// Which replica holds partition `n` (by node index), if this node backs it up.
    by_partition: Vec<Option<usize>>,
    /// Records and entries applied so far.
    pub applied: PassCounts,
    /// Malformed records and entries that could not apply as logged: the replica check
    /// fails naming them.
    pub problems: Vec<String>,
    problems_seen: u64,
    scratch: Vec<u64>,
    /// Logged inserts whose replica table had no free slot, by (replica, table, key): the
    /// primary's slot was freed by a delete another ring still holds, and an insert that
    /// came later on the primary took the replica's free slot first. Each waits here, live
    /// to the cleaner at its key version, until a delete frees a slot; rings drained, none
    /// is left (the replica then holds what its primary holds, which fits).
    parked: BTreeMap<(usize, u16, u64), Parked>,
    /// At most the replicas' record slots are parked: beyond, an insert waits in its ring.
    parked_max: usize,
}

/// A parked insert: the key's version and payload since.
struct Parked {
    partition: NodeId,
    kv: u64,
    payload: Vec<u64>,
}

/// What one entry found in the replica.
enum Step {
    Applied(u64),
    NotReady(Option<Want>),
    Skipped,
}

/// How a ring's next record stands.
enum Next {
    /// Not there whole yet.
    Absent,
    /// There, but not known to have committed.
    Held,
    /// Applied whole (`true`) or stopped at an entry not ready.
    Applied(bool),
}

impl LogCleaner {
    pub fn new(geometry: RingGeometry, replicas: Vec<Replica>, nodes: u16) -> Self {
        let mut by_partition = vec![None; nodes as usize];
        let parked_max = replicas
            .iter()
            .map(|r| {
                let c = &r.store.catalog;
                (0..c.table_count())
                    .map(|t| c.layout(TableId(t as u16)).capacity as usize)
                    .sum::<usize>()
            })
            .sum();
        for (i, r) in replicas.iter().enumerate() {
            by_partition[r.partition.0 as usize] = Some(i);
        }
        LogCleaner {
            geometry,
            rings: vec![RingState::default(); geometry.rings as usize],
            replicas,
            by_partition,
            applied: PassCounts::default(),
            problems: Vec::new(),
            problems_seen: 0,
            scratch: Vec::new(),
            parked: BTreeMap::new(),
            parked_max,
        }
    }

    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// Problems found in all, including those not kept.
    pub fn problems_seen(&self) -> u64 {
        self.problems_seen
    }

    fn problem(&mut self, what: String) {
        self.problems_seen += 1;
        if self.problems.len() < PROBLEMS_MAX {
            self.problems.push(what);
        }
    }

    /// One pass over every ring of `log` (the node's log region): applies what is ready and
    /// known to have committed, and publishes each ring's applied count in its header word.
    pub fn pass(&mut self, log: &Region) -> PassCounts {
        self.pass_settling(log, false)
    }

    /// A pass; `settle_all`: every whole record counts as committed (the run is over and no
    /// coordinator crashed, so none is undecided).
    fn pass_settling(&mut self, log: &Region, settle_all: bool) -> PassCounts {
        let mut c = PassCounts::default();
        let before: Vec<u64> = self.rings.iter().map(|st| st.next_seq).collect();
        // Each round after the first decides at least one held record (or ends), so the
        // rounds are bounded by the rings.
        for _round in 0..=self.rings.len() {
            // What waits or is held is counted as the pass leaves it: in its last round.
            (c.waiting, c.held) = (0, 0);
            let mut wants = Vec::new();
            for r in 0..self.rings.len() {
                let base = r as u32 * self.geometry.stride();
                loop {
                    match self.apply_next(log, r, base, settle_all, &mut c, &mut wants) {
                        Next::Applied(true) => continue,
                        Next::Applied(false) => c.waiting += 1,
                        Next::Held => c.held += 1,
                        Next::Absent => {}
                    }
                    break;
                }
            }
            if wants.is_empty() || !self.decide_for(log, &wants) {
                break;
            }
        }
        self.unpark();
        for (r, &seq) in before.iter().enumerate() {
            if self.rings[r].next_seq != seq {
                log.store(r * self.geometry.stride() as usize, self.rings[r].next_seq);
            }
        }
        self.applied.records += c.records;
        self.applied.entries += c.entries;
        self.applied.words += c.words;
        self.applied.waiting += c.waiting;
        self.applied.held += c.held;
        c
    }

    /// Record `seq` of the ring at `base`, if it is there whole, read into `out`.
    fn read_whole(&self, log: &Region, base: u32, seq: u64, out: &mut Vec<u64>) -> bool {
        let at = self.geometry.slot_offset(base, seq) as usize;
        let room = self.geometry.record_words_max() as u64;
        let words = log.load(at + 3);
        if log.load(at + RECORD_SEQ_WORD) != seq
            || words < LOG_RECORD_HEAD_WORDS + LOG_RECORD_TAIL_WORDS
            || words > room
        {
            return false;
        }
        out.resize(words as usize, 0);
        log.read_into(at, out);
        out[RECORD_SEQ_WORD] == seq
            && record_sum(body_sum(&out[..out.len() - 1]), seq) == out[out.len() - 1]
    }

    /// Applies ring `r`'s next record if it is there whole and known to have committed (its
    /// successor in the ring is there whole, a later write of one of its keys needed it, or
    /// `settle_all`); an entry not ready adds what it waits for to `wants`.
    fn apply_next(
        &mut self,
        log: &Region,
        r: usize,
        base: u32,
        settle_all: bool,
        c: &mut PassCounts,
        wants: &mut Vec<Want>,
    ) -> Next {
        let st = self.rings[r];
        let mut rec = std::mem::take(&mut self.scratch);
        let out = if !self.read_whole(log, base, st.next_seq, &mut rec) {
            Next::Absent
        } else {
            let mut next = Vec::new();
            if settle_all
                || st.next_seq < st.decided_through
                || self.read_whole(log, base, st.next_seq + 1, &mut next)
            {
                Next::Applied(self.apply_record(r, &rec, c, wants))
            } else {
                Next::Held
            }
        };
        self.scratch = rec;
        out
    }

    /// Marks as decided each held record (whole, not known to have committed) with an
    /// entry that a write in `wants` waits for: a later writer of its key saw it installed.
    /// Whether it decided any.
    fn decide_for(&mut self, log: &Region, wants: &[Want]) -> bool {
        let mut any = false;
        let mut rec = Vec::new();
        for r in 0..self.rings.len() {
            let st = self.rings[r];
            let base = r as u32 * self.geometry.stride();
            if st.next_seq < st.decided_through
                || !self.read_whole(log, base, st.next_seq, &mut rec)
            {
                continue;
            }
            let wanted = entries(&rec).any(|(what, key, version, _)| {
                let Some((table, access, partition)) = what_parts(what) else {
                    return false;
                };
                wants.iter().any(|w| {
                    w.table == table
                        && w.partition == partition
                        && w.key == key
                        && match w.version {
                            Some(v) => v == version & VERSION_KEY_MASK,
                            None => access == Access::Insert,
                        }
                })
            });
            if wanted {
                self.rings[r].decided_through = st.next_seq + 1;
                self.applied.decided_by_successor += 1;
                any = true;
            }
        }
        any
    }

    /// Applies the entries of record `rec` of ring `r` from where the ring stopped.
    fn apply_record(
        &mut self,
        r: usize,
        rec: &[u64],
        c: &mut PassCounts,
        wants: &mut Vec<Want>,
    ) -> bool {
        let st = self.rings[r];
        let entries = rec[2];
        let end = rec.len() - LOG_RECORD_TAIL_WORDS as usize;
        let mut at = LOG_RECORD_HEAD_WORDS as usize;
        for j in 0..entries {
            if at + LOG_ENTRY_HEAD_WORDS as usize > end {
                self.malformed(r, st.next_seq, "its entries run past its length");
                break;
            }
            let len = rec[at + 3] as usize;
            let payload_at = at + LOG_ENTRY_HEAD_WORDS as usize;
            if payload_at + len > end {
                self.malformed(r, st.next_seq, "an entry's payload runs past its length");
                break;
            }
            if j >= st.entries_done as u64 {
                let (what, key, version) = (rec[at], rec[at + 1], rec[at + 2]);
                match self.apply_entry(what, key, version, &rec[payload_at..payload_at + len]) {
                    Step::Applied(words) => {
                        c.entries += 1;
                        c.words += words;
                    }
                    Step::Skipped => {}
                    Step::NotReady(want) => {
                        self.rings[r].entries_done = j as u32;
                        self.rings[r].decided_through = st.next_seq + 1;
                        wants.extend(want);
                        return false;
                    }
                }
            }
            at = payload_at + len;
        }
        self.rings[r] = RingState {
            next_seq: st.next_seq + 1,
            entries_done: 0,
            decided_through: st.decided_through,
            applied_tag: rec[RECORD_TAG_WORD],
        };
        c.records += 1;
        true
    }

    fn malformed(&mut self, r: usize, seq: u64, why: &str) {
        self.problem(format!("ring {r}: record {seq} is malformed: {why}"));
    }

    /// Applies one logged write to the replica of its partition, if this node holds one and
    /// the replica's copy of the key is at the version just before the write's.
    fn apply_entry(&mut self, what: u64, key: u64, version: u64, payload: &[u64]) -> Step {
        let Some((t, access, partition)) = what_parts(what) else {
            self.problem(format!(
                "a log entry names no table, access and partition: {what:#x}"
            ));
            return Step::Skipped;
        };
        let Some(Some(i)) = self.by_partition.get(partition.0 as usize).copied() else {
            return Step::Skipped;
        };
        let store = self.replicas[i].store.clone();
        if t.0 as usize >= store.catalog.table_count()
            || payload.len() != store.catalog.layout(t).payload_words as usize
                && access != Access::Delete
        {
            self.problem(format!(
                "a log entry of table {} for key {key} does not fit the table ({} payload words)",
                t.0,
                payload.len()
            ));
            return Step::Skipped;
        }
        let kv = version & VERSION_KEY_MASK;
        if self.parked.contains_key(&(i, t.0, key)) {
            return self.apply_parked(i, t, access, key, kv, payload);
        }
        let live = store.live_key_version(t, key);
        // What an entry not ready waits for: the key's write after the replica's version,
        // or its insert.
        let want = |version: Option<u64>| {
            Step::NotReady(Some(Want {
                table: t,
                partition,
                key,
                version,
            }))
        };
        match access {
            Access::Update => match live {
                Some((idx, v)) if v + 1 == kv => {
                    store.install(t, idx, kv, payload);
                    Step::Applied(payload.len() as u64)
                }
                Some((_, v)) if v >= kv => self.stale(t, key, kv, v),
                Some((_, v)) => want(Some(v + 1)),
                None => want(None),
            },
            Access::Delete => match live {
                Some((_, v)) if v + 1 == kv => match store.delete(t, key) {
                    Ok(_) => Step::Applied(0),
                    Err(e) => {
                        self.problem(format!("replica of partition {}: {e}", partition.0));
                        Step::Skipped
                    }
                },
                Some((_, v)) if v >= kv => self.stale(t, key, kv, v),
                Some((_, v)) => want(Some(v + 1)),
                None => want(None),
            },
            Access::Insert => match live {
                // Its delete, at the version after the replica's.
                Some((_, v)) => want(Some(v + 1)),
                // Absent at a version before the one just ahead of the insert: the key's
                // earlier insert or delete is in a ring not applied yet (a record held until
                // it is known committed).
                None => match store.insert_version(t, key) {
                    Some(next) if next < kv => want(Some(next)),
                    Some(next) if next > kv => self.stale(t, key, kv, next - 1),
                    _ => self.insert_at(i, partition, t, key, kv, payload),
                },
            },
            Access::Read => Step::Skipped,
        }
    }

    /// Applies a logged insert of `key` at key version `kv`, the key absent at the version
    /// before it.
    fn insert_at(
        &mut self,
        i: usize,
        partition: NodeId,
        t: TableId,
        key: u64,
        kv: u64,
        payload: &[u64],
    ) -> Step {
        match install_insert(&self.replicas[i].store, t, key, kv, payload) {
            Ok(()) => Step::Applied(payload.len() as u64),
            // The primary freed a slot for it by deleting another key, whose delete (an
            // earlier commit) another ring holds, and a later insert took the replica's
            // free slot: parked until a delete frees one. Waiting in the ring instead could
            // wait for ever, on a delete behind a write of this key.
            Err(e) if e.is_capacity() && self.parked.len() < self.parked_max => {
                let p = Parked {
                    partition,
                    kv,
                    payload: payload.to_vec(),
                };
                self.parked.insert((i, t.0, key), p);
                self.applied.parked += 1;
                Step::Applied(payload.len() as u64)
            }
            Err(e) if e.is_capacity() => Step::NotReady(None),
            Err(e) => {
                self.problem(format!("replica of partition {}: {e}", partition.0));
                Step::Skipped
            }
        }
    }

    /// Applies a logged write of a parked key (its insert found no slot).
    fn apply_parked(
        &mut self,
        i: usize,
        t: TableId,
        access: Access,
        key: u64,
        kv: u64,
        payload: &[u64],
    ) -> Step {
        let at = (i, t.0, key);
        let p = self.parked.get_mut(&at).expect("a parked key");
        let (held, partition) = (p.kv, p.partition);
        match access {
            Access::Update if held + 1 == kv => {
                p.kv = kv;
                p.payload.copy_from_slice(payload);
                Step::Applied(payload.len() as u64)
            }
            Access::Delete if held + 1 == kv => {
                self.parked.remove(&at);
                match self.replicas[i].store.file_deleted(t, key, kv) {
                    Ok(()) => Step::Applied(0),
                    Err(e) => {
                        self.problem(format!("replica of partition {}: {e}", partition.0));
                        Step::Skipped
                    }
                }
            }
            Access::Update | Access::Delete if held >= kv => self.stale(t, key, kv, held),
            // Like a live key's: its next write, or (an insert) its delete.
            _ => Step::NotReady(Some(Want {
                table: t,
                partition,
                key,
                version: Some(held + 1),
            })),
        }
    }

    /// Moves parked inserts into slots that deletes freed since; names any whose table
    /// had no error but a full one.
    fn unpark(&mut self) {
        if self.parked.is_empty() {
            return;
        }
        let parked = std::mem::take(&mut self.parked);
        for ((i, t, key), p) in parked {
            match install_insert(&self.replicas[i].store, TableId(t), key, p.kv, &p.payload) {
                Ok(()) => self.applied.unparked += 1,
                Err(e) if e.is_capacity() => {
                    self.parked.insert((i, t, key), p);
                }
                Err(e) => self.problem(format!("replica of partition {}: {e}", p.partition.0)),
            }
        }
    }

    /// Names each insert still parked once every ring is applied: its replica holds more
    /// live keys than its table's slots, which its primary cannot.
    fn name_parked(&mut self) {
        let left: Vec<String> = self
            .parked
            .iter()
            .map(|(&(_, t, key), p)| {
                format!(
                    "replica of partition {}: table {t} key {key} (version {}) never found a free slot",
                    p.partition.0, p.kv
                )
            })
            .collect();
        for l in left {
            self.problem(l);
        }
    }

    /// An entry whose key the replica already holds at its version or later: logged twice
    /// or out of its key's order.
    fn stale(&mut self, t: TableId, key: u64, kv: u64, v: u64) -> Step {
        self.problem(format!(
            "table {} key {key}: a log entry writes version {kv} where the replica holds {v} already",
            t.0
        ));
        Step::Skipped
    }

    /// What rings `rings` hold for a recovery of their coordinators' node: per ring, the
    /// tag of the last record applied and that record if its slot still holds it whole,
    /// and every whole record not applied yet, in order.
    pub fn doubts(&self, log: &Region, rings: std::ops::Range<u32>) -> Vec<RingDoubt> {
        rings
            .filter(|&r| (r as usize) < self.rings.len())
            .map(|r| {
                let st = self.rings[r as usize];
                let base = r * self.geometry.stride();
                let mut applied = Vec::new();
                if st.next_seq == 0 || !self.read_whole(log, base, st.next_seq - 1, &mut applied) {
                    applied.clear();
                }
                let mut unapplied = Vec::new();
                for seq in st.next_seq..st.next_seq + LOG_RING_RECORDS as u64 {
                    let mut rec = Vec::new();
                    if !self.read_whole(log, base, seq, &mut rec) {
                        break;
                    }
                    unapplied.push(rec);
                }
                RingDoubt {
                    ring: r,
                    applied_tag: st.applied_tag,
                    applied,
                    unapplied,
                }
            })
            .collect()
    }

    /// Settles the records rings `rings` hold unapplied by their tags' outcomes (`outcome`
    /// of a tag: `Some(true)` committed, `Some(false)` aborted, `None` not decided): a
    /// committed one is applied (now, or once the entries before it are), an aborted one is
    /// voided in its slot, never to be applied. Returns the records applied and voided; a
    /// record no outcome names is left as it is, and named in `problems`.
    pub fn settle(
        &mut self,
        log: &Region,
        rings: std::ops::Range<u32>,
        outcome: impl Fn(u64) -> Option<bool>,
    ) -> (u64, u64) {
        let mut voided = 0;
        let mut rec = Vec::new();
        let count = self.rings.len() as u32;
        for r in rings.filter(|&r| r < count) {
            let base = r * self.geometry.stride();
            let first = self.rings[r as usize].next_seq;
            for seq in first..first + LOG_RING_RECORDS as u64 {
                if !self.read_whole(log, base, seq, &mut rec) {
                    break;
                }
                let tag = rec[RECORD_TAG_WORD];
                match outcome(tag) {
                    Some(true) => {
                        let st = &mut self.rings[r as usize];
                        st.decided_through = st.decided_through.max(seq + 1);
                    }
                    Some(false) => {
                        let at = self.geometry.slot_offset(base, seq) as usize;
                        log.store(at + RECORD_SEQ_WORD, VOID_SEQ);
                        voided += 1;
                        break;
                    }
                    None => {
                        self.problem(format!(
                            "ring {r}: record {seq} (tag {tag:#x}) left unsettled by the recovery"
                        ));
                        break;
                    }
                }
            }
        }
        let before = self.applied.records;
        self.pass(log);
        (self.applied.records - before, voided)
    }

    /// Rings whose next record is whole but not yet known to have committed.
    pub fn held_now(&self, log: &Region) -> u64 {
        let mut rec = Vec::new();
        let mut next = Vec::new();
        (0..self.rings.len())
            .filter(|&r| {
                let st = self.rings[r];
                let base = r as u32 * self.geometry.stride();
                st.next_seq >= st.decided_through
                    && self.read_whole(log, base, st.next_seq, &mut rec)
                    && !self.read_whole(log, base, st.next_seq + 1, &mut next)
            })
            .count() as u64
    }

    /// Applies everything the rings hold (the run is over and no coordinator crashed:
    /// every record written is whole and committed), then names each ring still stopped at
    /// an entry that never became ready.
    pub fn drain(&mut self, log: &Region) {
        // Each pass applies at least one record while any applies; a ring stops only
        // behind another ring's record, so at most one pass per record is needed.
        loop {
            let c = self.pass_settling(log, true);
            if c.records == 0 && c.entries == 0 {
                break;
            }
        }
        let mut rec = Vec::new();
        for r in 0..self.rings.len() {
            let st = self.rings[r];
            let base = r as u32 * self.geometry.stride();
            // Settled as committed, a whole record left unapplied stopped at an entry.
            if self.read_whole(log, base, st.next_seq, &mut rec) {
                let stuck = self.describe_entry(&rec, st.entries_done);
                self.problem(format!(
                    "ring {r}: record {} stopped at entry {} ({stuck}), whose key's earlier write never arrived",
                    st.next_seq, st.entries_done
                ));
            }
        }
        self.name_parked();
    }

    /// Entry `j` of whole record `rec` and what the replica holds of its key, for a
    /// problem's text.
    fn describe_entry(&self, rec: &[u64], j: u32) -> String {
        let Some((what, key, version, _)) = entries(rec).nth(j as usize) else {
            return "past its entries".into();
        };
        let Some((t, access, partition)) = what_parts(what) else {
            return format!("what {what:#x}");
        };
        let held = match self
            .by_partition
            .get(partition.0 as usize)
            .copied()
            .flatten()
        {
            Some(i) => {
                let store = &self.replicas[i].store;
                match store.live_key_version(t, key) {
                    Some((_, v)) => format!("live at version {v}"),
                    None => match store.insert_version(t, key) {
                        Some(next) => format!("absent, next insert at version {next}"),
                        None => "absent".into(),
                    },
                }
            }
            None => "no replica here".into(),
        };
        format!(
            "{access:?} of table {} key {key} at version {} on partition {}; the replica holds it {held}",
            t.0,
            version & VERSION_KEY_MASK,
            partition.0
        )
    }
}

/// Inserts `key` into `store` with `payload` at key version `kv` (a replica's, on its
/// owner's CPU).
fn install_insert(
    store: &Store,
    t: TableId,
    key: u64,
    kv: u64,
    payload: &[u64],
) -> Result<(), atoll_storage::StoreError> {
    let (idx, _) = store.insert_locked(t, key, payload, 0)?;
    // The primary's slot history may differ from the replica's (a deleted key's slot
    // reclaimed on one and not the other): the logged version is the key's.
    store.install(t, idx, kv, payload);
    Ok(())
}

/// The entries of whole record `rec`: what, key, version, payload; stops at one that runs
/// past the record's length (the cleaner names it when it applies the record).
fn entries(rec: &[u64]) -> impl Iterator<Item = (u64, u64, u64, &[u64])> + '_ {
    let end = rec.len() - LOG_RECORD_TAIL_WORDS as usize;
    let count = rec[2];
    let mut at = LOG_RECORD_HEAD_WORDS as usize;
    (0..count).map_while(move |_| {
        let payload_at = at + LOG_ENTRY_HEAD_WORDS as usize;
        if payload_at > end {
            return None;
        }
        let len = rec[at + 3] as usize;
        if payload_at + len > end {
            return None;
        }
        let e = (
            rec[at],
            rec[at + 1],
            rec[at + 2],
            &rec[payload_at..payload_at + len],
        );
        at = payload_at + len;
        Some(e)
    })
}

/// Records and an order-independent digest of a store's live records: key, key version and
/// payload (engine words included) of each, not the slots or their incarnations, which a
/// replica need not share with its primary.
pub fn partition_digest(store: &Store) -> (u64, u64) {
    use atoll_storage::layout::{HEADER_WORDS, H_KEY, H_VERSION};
    let (mut records, mut digest) = (0u64, 0u64);
    let mut tuple = Vec::new();
    for t in (0..store.catalog.table_count()).map(|t| TableId(t as u16)) {
        if store.region(t).len_words() == 0 || store.catalog.is_replicated(t) {
            continue;
        }
        tuple.resize(store.catalog.layout(t).tuple_words as usize, 0);
        for idx in 0..store.used_slots(t) {
            store.read_tuple(t, idx, &mut tuple);
            let v = tuple[H_VERSION as usize];
            if v & VERSION_ABSENT != 0 {
                continue;
            }
            records += 1;
            let mix = |h: u64, w: u64| (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
            let head = mix(
                mix(t.0 as u64 + 1, tuple[H_KEY as usize]),
                v & VERSION_KEY_MASK,
            );
            let h = tuple[HEADER_WORDS as usize..]
                .iter()
                .fold(head, |h, &w| mix(h, w));
            digest = digest.wrapping_add(h);
        }
    }
    (records, digest)
}

/// How long a cleaner with nothing to apply waits before its next pass.
pub const CLEANER_IDLE_NS: u64 = 2_000;
/// How long a cleaner goes on after the run is over: coordinators finishing their last
/// attempts may still wait for room in its rings (one that waits longer gives up `LogFull`).
pub const CLEANER_GRACE_NS: u64 = 2_000_000;
/// Direct accesses a cleaner's pass makes per record applied (its head and checksum) and per
/// entry (the replica's index walk, the version word, the install), for backends that
/// price own-node work ([`atoll_fabric::Endpoint::local_work`]); its payload words are
/// priced as copied bytes.
const ACCESSES_PER_RECORD: u64 = 1;
const ACCESSES_PER_ENTRY: u64 = 3;

/// A node's log cleaner as a background task on one of its workers: passes over the rings
/// in `log_region` until the run is `over` (and [`CLEANER_GRACE_NS`] after), waiting
/// [`CLEANER_IDLE_NS`] after a pass that applied nothing.
pub async fn clean(
    ep: atoll_fabric::Endpoint,
    cleaner: Arc<std::sync::Mutex<LogCleaner>>,
    log_region: atoll_fabric::RegionId,
    over: std::rc::Rc<dyn Fn(u64) -> bool>,
) {
    let mut over_at = None;
    loop {
        let now = ep.now_ns();
        if over(now) {
            let at = *over_at.get_or_insert(now);
            if now >= at + CLEANER_GRACE_NS {
                break;
            }
        }
        let c = {
            let mut cl = cleaner.lock().expect("no poisoned cleaner");
            cl.pass(ep.local_memory().region(log_region))
        };
        if c.records + c.entries > 0 {
            let accesses = ACCESSES_PER_RECORD * c.records + ACCESSES_PER_ENTRY * c.entries;
            ep.local_work(accesses, c.words * 8).await;
            // The worker's co-routines run between passes that found work.
            ep.yield_now().await;
        } else {
            ep.sleep(CLEANER_IDLE_NS).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::NodeMemory;
    use atoll_storage::layout::{seal, Catalog, Partition, TableSpec};

    const T: TableId = TableId(0);
    const KEYS: u64 = 4;

    /// A replica of partition 0 of a 2-node table (keys 0, 2, 4, 6 live at their loaded
    /// version) and a log region of `rings` rings.
    fn setup(rings: u32) -> (LogCleaner, Arc<Store>, NodeMemory, RingGeometry) {
        setup_sized(rings, 16)
    }

    /// [`setup`] with `slots` record slots per node (4: the loaded keys fill it).
    fn setup_sized(rings: u32, slots: u32) -> (LogCleaner, Arc<Store>, NodeMemory, RingGeometry) {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 3,
            capacity_per_node: slots,
            capacity_max_per_node: Some(slots),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: KEYS as u32,
        };
        let catalog = Arc::new(Catalog::new(2, vec![spec], vec![]));
        let memory = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        let store = Arc::new(Store::new(catalog, memory));
        for k in 0..KEYS {
            store.insert(T, 2 * k, &[k, 0, 0]).unwrap();
        }
        let geometry = RingGeometry {
            ring_words: LOG_RING_RECORDS * 32,
            rings,
        };
        let log = NodeMemory::new(NodeId(1), &[geometry.region_words()]);
        let replica = Replica {
            partition: NodeId(0),
            store: store.clone(),
        };
        (
            LogCleaner::new(geometry, vec![replica], 2),
            store,
            log,
            geometry,
        )
    }

    /// Writes record `seq` of ring `ring`: one entry per `(access, key, version, user)`.
    fn put(
        log: &NodeMemory,
        g: RingGeometry,
        ring: u32,
        seq: u64,
        entries: &[(Access, u64, u64, u64)],
    ) {
        let mut rec = vec![1, 0, entries.len() as u64, 0, 7, 0];
        for &(access, key, version, user) in entries {
            let mut payload = Vec::new();
            seal(T, key, 7, &[user, 0, 0], &mut payload);
            rec.extend_from_slice(&[
                entry_what(T, access, NodeId((key % 2) as u16)),
                key,
                version,
                payload.len() as u64,
            ]);
            rec.extend_from_slice(&payload);
        }
        rec[3] = rec.len() as u64 + 1;
        let body = body_sum(&rec);
        rec[RECORD_SEQ_WORD] = seq;
        rec.push(record_sum(body, seq));
        let at = g.slot_offset(ring * g.stride(), seq);
        log.region(atoll_fabric::RegionId(0))
            .write_from(at as usize, &rec);
    }

    fn user_word(store: &Store, key: u64) -> (u64, u64) {
        let (idx, v) = store.live_key_version(T, key).expect("live");
        let mut p = Vec::new();
        store.read_payload(T, idx, &mut p);
        (v, p[atoll_storage::layout::ENGINE_PAYLOAD_WORDS as usize])
    }

    #[test]
    fn log_cleaner_applies_a_keys_writes_in_version_order_across_rings_once_known_committed() {
        let (mut cl, store, log, g) = setup(2);
        let region = log.region(atoll_fabric::RegionId(0));
        let loaded = user_word(&store, 2);
        let v0 = loaded.0;
        // Ring 1 holds the key's second write, ring 0 its first (and a write of partition 1,
        // which this node does not back up): each its coordinator's last record here, so
        // neither is known to have committed yet.
        put(&log, g, 1, 0, &[(Access::Update, 2, v0 + 2, 20)]);
        put(
            &log,
            g,
            0,
            0,
            &[(Access::Update, 3, 9, 5), (Access::Update, 2, v0 + 1, 10)],
        );
        let c = cl.pass(region);
        assert_eq!((c.records, c.held), (0, 2), "undecided records wait");
        assert_eq!(user_word(&store, 2), loaded, "nothing applied");
        // Ring 1's coordinator logs again: its record 0 committed, and it wrote key 2 after
        // ring 0's record, which so committed too.
        let loaded6 = user_word(&store, 6);
        let v6 = loaded6.0;
        put(&log, g, 1, 1, &[(Access::Update, 6, v6 + 1, 60)]);
        let c = cl.pass(region);
        assert_eq!((c.records, c.held), (2, 1), "{:?}", cl.problems);
        assert_eq!(user_word(&store, 2), (v0 + 2, 20), "{:?}", cl.problems);
        assert_eq!(cl.applied.decided_by_successor, 1);
        assert_eq!(user_word(&store, 6), loaded6, "the last record still waits");
        cl.drain(region);
        assert_eq!(user_word(&store, 6), (v6 + 1, 60));
        assert_eq!(cl.applied.records, 3);
        assert!(cl.problems.is_empty(), "{:?}", cl.problems);
        assert_eq!(
            (region.load(0), region.load(g.stride() as usize)),
            (1, 2),
            "each ring's applied count published"
        );
    }

    #[test]
    fn log_cleaner_never_applies_a_voided_record_and_takes_the_one_written_in_its_slot() {
        let (mut cl, store, log, g) = setup(2);
        let region = log.region(atoll_fabric::RegionId(0));
        let (v0, _) = user_word(&store, 4);
        // Ring 0's record 0 reached this node, but its log write failed elsewhere: its
        // coordinator voided it (before letting its locks go) and aborted.
        put(&log, g, 0, 0, &[(Access::Update, 4, v0 + 1, 1)]);
        let at = g.slot_offset(0, 0) as usize + RECORD_SEQ_WORD;
        region.store(at, u64::MAX);
        // Another writer of key 4 then committed the same version, and logged again.
        put(&log, g, 1, 0, &[(Access::Update, 4, v0 + 1, 2)]);
        put(&log, g, 1, 1, &[(Access::Update, 4, v0 + 2, 3)]);
        cl.pass(region);
        assert_eq!(user_word(&store, 4), (v0 + 1, 2), "{:?}", cl.problems);
        // The voiding coordinator's next record to this node reuses record 0's number.
        put(&log, g, 0, 0, &[(Access::Update, 4, v0 + 3, 4)]);
        cl.drain(region);
        assert_eq!(user_word(&store, 4), (v0 + 3, 4), "{:?}", cl.problems);
        assert!(cl.problems.is_empty(), "{:?}", cl.problems);
    }

    #[test]
    fn log_cleaner_takes_no_stale_or_torn_record_and_names_a_write_that_never_became_ready() {
        let (mut cl, store, log, g) = setup(1);
        let region = log.region(atoll_fabric::RegionId(0));
        let (v0, _) = user_word(&store, 4);
        // Record 0's slot holds a record numbered 8 (a later lap's): not the one expected.
        put(
            &log,
            g,
            0,
            LOG_RING_RECORDS as u64,
            &[(Access::Update, 4, v0 + 1, 1)],
        );
        assert_eq!(cl.pass(region).records, 0);
        // Record 0 with one word torn: its checksum fails.
        put(&log, g, 0, 0, &[(Access::Update, 4, v0 + 1, 1)]);
        let at = g.slot_offset(0, 0) as usize + LOG_RECORD_HEAD_WORDS as usize + 5;
        region.store(at, region.load(at) ^ 1);
        assert_eq!(cl.pass(region).records, 0);
        // Whole, but a delete then an insert of key 6 wait behind a write never logged.
        put(
            &log,
            g,
            0,
            0,
            &[
                (Access::Update, 4, v0 + 1, 1),
                (Access::Update, 6, v0 + 5, 1),
            ],
        );
        cl.drain(region);
        assert_eq!(user_word(&store, 4), (v0 + 1, 1));
        assert_eq!(cl.problems.len(), 1, "{:?}", cl.problems);
        assert!(
            cl.problems[0].contains("never arrived"),
            "{:?}",
            cl.problems
        );
    }

    #[test]
    fn log_cleaner_applies_a_delete_and_a_reinsert_at_the_logged_version() {
        let (mut cl, store, log, g) = setup(2);
        let region = log.region(atoll_fabric::RegionId(0));
        let (v0, _) = user_word(&store, 0);
        // The re-insert (ring 1) arrives before the delete it follows (ring 0).
        put(&log, g, 1, 0, &[(Access::Insert, 0, v0 + 2, 33)]);
        assert_eq!(cl.pass(region).records, 0);
        put(&log, g, 0, 0, &[(Access::Delete, 0, v0 + 1, 0)]);
        cl.drain(region);
        assert_eq!(user_word(&store, 0), (v0 + 2, 33));
        assert!(cl.problems.is_empty(), "{:?}", cl.problems);
    }

    #[test]
    fn log_cleaner_parks_an_insert_its_full_replica_table_has_no_slot_for_until_a_delete_frees_one()
    {
        let (mut cl, store, log, g) = setup_sized(5, KEYS as u32);
        let region = log.region(atoll_fabric::RegionId(0));
        let (v0, _) = user_word(&store, 0);
        let new = v0;
        // The primary, full, deleted key 0, inserted key 8 in its slot, deleted key 8 and
        // key 2, and re-inserted key 0. The replica meets the re-insert (ring 1) before key
        // 8's insert (ring 2), so key 8 finds no slot; its delete (ring 3) waits on it, and
        // key 2's delete, which frees a slot, waits behind that in its ring.
        put(&log, g, 0, 0, &[(Access::Delete, 0, v0 + 1, 0)]);
        put(&log, g, 1, 0, &[(Access::Insert, 0, v0 + 2, 1)]);
        put(&log, g, 2, 0, &[(Access::Insert, 8, new, 2)]);
        put(&log, g, 3, 0, &[(Access::Delete, 8, new + 1, 0)]);
        put(&log, g, 3, 1, &[(Access::Delete, 2, v0 + 1, 0)]);
        // Then key 8 again in key 2's slot, key 2 again (full: parked), and key 6's delete,
        // which frees the slot key 2 then moves into.
        put(&log, g, 4, 0, &[(Access::Insert, 8, new + 2, 4)]);
        put(&log, g, 4, 1, &[(Access::Insert, 2, v0 + 2, 5)]);
        put(&log, g, 4, 2, &[(Access::Delete, 6, v0 + 1, 0)]);
        cl.drain(region);
        assert!(cl.problems.is_empty(), "{:?}", cl.problems);
        assert_eq!((cl.applied.parked, cl.applied.unparked), (2, 1));
        assert_eq!(user_word(&store, 0), (v0 + 2, 1));
        assert_eq!(
            user_word(&store, 8),
            (new + 2, 4),
            "key 8's versions continue"
        );
        assert_eq!(user_word(&store, 2), (v0 + 2, 5));
        assert_eq!(store.live_key_version(T, 6), None);
    }
}
