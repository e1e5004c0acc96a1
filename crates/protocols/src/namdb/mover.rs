//! NAM-DB's version mover: a task on each memory node that copies the old versions its
//! records keep into the table's overflow area, so a snapshot older than every version a
//! record keeps still finds its version there (NAM-DB slides, "Multi-versioning": a
//! "detached version-mover thread" copies old versions to overflow and sets their moved
//! bit).
//!
//! Every [`MOVER_INTERVAL_NS`] (1 ms, seed-mechanisms.md §2.4; `--mover-interval-us`) the
//! mover scans the next
//! [`MOVER_RECORDS_PER_PASS`] record slots of each table with an overflow area (a cursor
//! goes round), with the node's own verbs, so its work costs what the fabric charges for it:
//!
//! 1. one READ of each record's head and old headers (a doorbell per
//!    [`MOVER_BATCH_RECORDS`] records);
//! 2. one READ of each old payload not moved yet;
//! 3. per record, its new entries `[next, commit id, sealed version, payload]`, oldest
//!    first, each linked to the one before and the first to the record's chain (`AUX`),
//!    then a CAS of `AUX` from the chain read to the newest entry, then a CAS setting the
//!    moved bit in each copied header (an install that rewrote the slot in between makes
//!    it fail, harmlessly: the entry is still a true copy of the version).
//!
//! A payload is copied only if its tag and check word say it is that header's version
//! (a slot rewritten between the two READs shows another). The overflow area is a ring,
//! written in order; an entry written over leaves chains that led to it leading to another
//! record's or a newer version, which readers detect (each entry is checked against the
//! record and the version the reader needs next; a gap aborts `SnapshotTooOld`).
//!
//! **Garbage collection** (`NamDbConfig::overflow_gc`, on with every overflow area): the ring's
//! next entry is written over only when no live snapshot can need the version it holds. The
//! mover notes, per entry (private memory, counted by the sizing: [`NOTE_BYTES_PER_ENTRY`]),
//! the commit id of the version that replaced the entry's (its *successor*: the next newer
//! version the record showed) and when it wrote the entry. Each pass starts with one READ
//! of the snapshot floors (`SnapshotFloors`, a row per compute node, each at most every
//! snapshot that node's coordinators hold or will take); an entry is free once every row
//! sees its successor (a snapshot that sees the successor reads it or a newer version,
//! never the entry's) and it is `overflow_keep_ns` old (the slides: "when older than every
//! cached T_R, or after 1 s, whichever is later"). When the next entry is not free the
//! table's pass stops (the versions left are counted `MoverBlocked`), to retry at the same
//! records next pass; meanwhile installs overwrite unmoved old versions as without a mover.
//! A wrong judgement can only cost aborts: readers check every entry they take.

use crate::rsi::{self, MOVED};
use atoll_fabric::{Endpoint, RegionId, RemotePtr, Words};
use atoll_storage::layout::{
    payload_intact, TableId, TableLayout, CID_LOCKED, H_AUX, H_KEY, H_LOCK, H_VERSION, P_TAG,
    VERSION_KEY_MASK,
};
use atoll_storage::Catalog;
use atoll_txn::tsvc::SnapshotFloors;
use atoll_txn::versions::{VersionCounters, VersionEvent};
use atoll_txn::{NodeTask, TxnConfig};

/// Pause between the mover's passes by default (NAM-DB's mover "runs every 1 ms on the
/// memory server", seed-mechanisms.md §2.4); `--mover-interval-us` sets another.
pub const MOVER_INTERVAL_NS: u64 = 1_000_000;
/// Record slots of each table one pass scans, at most: a pass is bounded work however
/// large the table (a cursor continues where the last pass stopped).
pub const MOVER_RECORDS_PER_PASS: u32 = 4096;
/// Records whose headers one doorbell READs.
pub const MOVER_BATCH_RECORDS: u32 = 64;

/// Whether a catalog has any table with an overflow area (the mover runs then).
pub fn wanted(catalog: &Catalog) -> bool {
    (0..catalog.table_count()).any(|t| catalog.layout(TableId(t as u16)).overflow_entries > 0)
}

/// Bytes of the mover's note on each overflow entry ([`Note`]), which the sizing counts.
pub const NOTE_BYTES_PER_ENTRY: u64 = std::mem::size_of::<Note>() as u64;

/// What the mover knows of one overflow entry it wrote.
#[derive(Clone, Copy, Debug)]
struct Note {
    /// The commit id of the version that replaced the entry's; [`Note::NEVER_WRITTEN`] for
    /// an entry that holds none.
    successor: u64,
    /// When the mover wrote it (its worker's clock).
    written_at_ns: u64,
}

impl Note {
    /// No commit id is this: a NAM-DB one has bit 63 clear.
    const NEVER_WRITTEN: u64 = u64::MAX;
    const EMPTY: Note = Note {
        successor: Self::NEVER_WRITTEN,
        written_at_ns: 0,
    };
}

/// Where the mover is in one table.
struct TableCursor {
    table: TableId,
    /// The next record slot to scan.
    record: u32,
    /// The next overflow entry to write (the ring's head).
    entry: u32,
    /// A note per overflow entry.
    notes: Vec<Note>,
}

/// The garbage collector's inputs: where the snapshot floors are, and how long an entry is
/// kept at least.
#[derive(Clone, Copy, Debug)]
pub struct Gc {
    pub floors: SnapshotFloors,
    pub keep_ns: u64,
}

impl Gc {
    /// The run's collector, if it runs (with an overflow area, and a region for the floors).
    pub fn of(catalog: &Catalog, cfg: &TxnConfig) -> Option<Gc> {
        let nc = cfg.family_as::<super::NamDbConfig>();
        if !nc.overflow_gc {
            return None;
        }
        SnapshotFloors::of(catalog, nc.vector_slots_total(&cfg.shape())).map(|floors| Gc {
            floors,
            keep_ns: nc.overflow_keep_ns,
        })
    }
}

/// What one pass judges entries by: the floors as read at its start, and the time.
struct Judge<'a> {
    /// Every row of the floors, `slots` words each; `None` without the collector (an entry
    /// is free when the ring comes round to it).
    floors: Option<&'a [u64]>,
    slots: usize,
    keep_ns: u64,
    now_ns: u64,
}

impl Judge<'_> {
    /// Whether the entry `note` describes may be written over.
    fn free(&self, note: &Note) -> bool {
        if note.successor == Note::NEVER_WRITTEN {
            return true;
        }
        let Some(floors) = self.floors else {
            return true;
        };
        self.now_ns.saturating_sub(note.written_at_ns) >= self.keep_ns
            && floors
                .chunks(self.slots)
                .all(|row| super::cid::sees(row, note.successor))
    }
}

/// A memory node's version mover: where it is in each table with an overflow area.
pub struct Mover {
    cursors: Vec<TableCursor>,
    gc: Option<Gc>,
}

impl Mover {
    /// The mover of `catalog`'s tables with an overflow area; with `gc`, it writes over an
    /// entry only once no live snapshot needs it, else whenever the ring comes round.
    pub fn new(catalog: &Catalog, gc: Option<Gc>) -> Self {
        let cursors = (0..catalog.table_count())
            .map(|t| TableId(t as u16))
            .filter(|&t| catalog.layout(t).overflow_entries > 0)
            .map(|table| TableCursor {
                table,
                record: 0,
                entry: 0,
                // Grown as the ring does: a table that grows reserves far more entries
                // than its records use.
                notes: Vec::new(),
            })
            .collect();
        Mover { cursors, gc }
    }

    /// One pass: the next [`MOVER_RECORDS_PER_PASS`] record slots of each table, with
    /// `ep`'s node's own verbs (a table's pass stops early where the ring is blocked).
    /// `Err` if an op failed (the node itself, or the floors' node, is down).
    pub async fn pass(
        &mut self,
        ep: &Endpoint,
        catalog: &Catalog,
        used_slots: &dyn Fn(TableId) -> u32,
        counts: &VersionCounters,
    ) -> Result<(), atoll_fabric::OpError> {
        let floors = match &self.gc {
            Some(gc) => {
                let mut d = ep.doorbell_for(1);
                let j = d.read(gc.floors.all(), gc.floors.rows * gc.floors.slots);
                Some(d.submit().await?.read(j).to_vec())
            }
            None => None,
        };
        let judge = Judge {
            floors: floors.as_deref(),
            slots: self.gc.map_or(1, |g| g.floors.slots as usize),
            keep_ns: self.gc.map_or(0, |g| g.keep_ns),
            now_ns: ep.now_ns(),
        };
        for c in &mut self.cursors {
            let mut layout = *catalog.layout(c.table);
            // The records handed out so far, and as many overflow entries per record as the
            // whole area has: the ring grows with the table (the budget counted both).
            let used = used_slots(c.table).min(layout.capacity);
            let per_record = layout.overflow_entries / layout.capacity.max(1);
            layout.capacity = used;
            layout.overflow_entries = (used * per_record).max(per_record.min(1));
            if c.notes.len() < layout.overflow_entries as usize {
                c.notes
                    .resize(layout.overflow_entries as usize, Note::EMPTY);
            }
            if c.entry >= layout.overflow_entries {
                c.entry = 0;
            }
            let pass_end = c.record.saturating_add(MOVER_RECORDS_PER_PASS);
            while c.record < pass_end.min(layout.capacity) {
                let n = MOVER_BATCH_RECORDS.min(layout.capacity - c.record);
                if move_batch(ep, &layout, c, n, &judge, counts).await? == Ring::Blocked {
                    // The same records again next pass: their versions were left behind.
                    break;
                }
                c.record += n;
            }
            if c.record >= layout.capacity {
                c.record = 0;
            }
        }
        Ok(())
    }
}

/// Whether a batch found room for every version it had to move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ring {
    Room,
    /// The ring's next entry is still needed: the batch left versions unmoved.
    Blocked,
}

/// Runs the mover on memory node `task.ep`'s records until the run is over.
pub async fn run(task: NodeTask) {
    let mut mover = Mover::new(&task.catalog, Gc::of(&task.catalog, &task.cfg));
    // Bounded by the run's end.
    while !(task.over)(task.ep.now_ns()) {
        // A failed op (the node itself is down): the run reports it elsewhere.
        if mover
            .pass(&task.ep, &task.catalog, &*task.used_slots, &task.versions)
            .await
            .is_err()
        {
            return;
        }
        task.versions.add(VersionEvent::MoverPass, 1);
        let interval_ns = task.cfg.family_as::<super::NamDbConfig>().mover_interval_ns;
        task.ep.sleep(interval_ns).await;
    }
}

/// An old version to copy: its record, header offset, commit id, sealed version word, the
/// commit id of the version after it, and where its payload lands in the batch's payload
/// READs.
struct Candidate {
    record: u32,
    header_at: u32,
    cid: u64,
    sealed: u64,
    key_version: u64,
    successor: u64,
    payload_read: usize,
}

/// The commit id of the version that replaced key version `key_version` in record words
/// `w` (head and old headers): the next newer version the record shows. `None` while that
/// is not known: the head is locked (an install may be rewriting it), or the record shows
/// no newer version.
fn successor_of(layout: &TableLayout, w: &[u64], key_version: u64) -> Option<u64> {
    let head = w[H_LOCK as usize];
    if head & CID_LOCKED != 0 {
        return None;
    }
    let mut next = (w[H_VERSION as usize] & VERSION_KEY_MASK, head & !CID_LOCKED);
    for j in 0..layout.version_slots - 1 {
        let at = layout.old_header_offset(j) as usize;
        let cid = w[at] & !MOVED;
        if let Some(kv) = rsi::unseal_version(cid, w[at + 1]).filter(|_| w[at + 1] != 0) {
            if kv > key_version && kv < next.0 {
                next = (kv, cid);
            }
        }
    }
    (next.0 > key_version).then_some(next.1)
}

/// Copies the unmoved old versions of records `c.record .. c.record + n` of `layout`, into
/// entries `judge` finds free.
async fn move_batch(
    ep: &Endpoint,
    layout: &TableLayout,
    c: &mut TableCursor,
    n: u32,
    judge: &Judge<'_>,
    counts: &VersionCounters,
) -> Result<Ring, atoll_fabric::OpError> {
    let node = ep.node();
    let region = RegionId(c.table.0);
    let record_ptr = |r: u32| RemotePtr::new(node, region, layout.record_offset(r));
    let mut d = ep.doorbell_for(n as usize);
    for r in c.record..c.record + n {
        d.read(record_ptr(r), layout.headers_words());
    }
    let heads = d.submit().await?;
    let mut candidates = Vec::new();
    let mut d = ep.doorbell();
    for k in 0..n {
        let w = heads.read(k as usize);
        let mut mine: Vec<Candidate> = (0..layout.version_slots - 1)
            .filter_map(|j| {
                let at = layout.old_header_offset(j);
                let (cid, sealed) = (w[at as usize], w[at as usize + 1]);
                if sealed == 0 || cid & MOVED != 0 {
                    return None;
                }
                let key_version = rsi::unseal_version(cid, sealed)?;
                // A version whose successor is not known yet waits for a later pass.
                let successor = successor_of(layout, w, key_version)?;
                Some(Candidate {
                    record: c.record + k,
                    header_at: at,
                    cid,
                    sealed,
                    key_version,
                    successor,
                    payload_read: 0,
                })
            })
            .collect();
        // Oldest first, so each record's chain runs from its newest version down.
        mine.sort_by_key(|m| m.key_version);
        for m in &mut mine {
            let j = (0..layout.version_slots - 1)
                .find(|&j| layout.old_header_offset(j) == m.header_at)
                .expect("a candidate's slot");
            m.payload_read = d.read(
                record_ptr(m.record).add(layout.old_payload_offset(j)),
                layout.payload_words,
            );
        }
        candidates.extend(mine);
    }
    if candidates.is_empty() {
        return Ok(Ring::Room);
    }
    let payloads = d.submit().await?;
    let mut d = ep.doorbell_for(candidates.len() * 3);
    // (op index, commit id) of each moved-bit CAS, to count which found its header.
    let mut moved_cas: Vec<(usize, u64)> = Vec::with_capacity(candidates.len());
    let mut ring = Ring::Room;
    let mut k = 0;
    while k < candidates.len() && ring == Ring::Room {
        let record = candidates[k].record;
        let w = heads.read((record - c.record) as usize);
        let key = w[H_KEY as usize];
        let chain = w[H_AUX as usize];
        let mut link = chain;
        let mut moved = Vec::new();
        while k < candidates.len() && candidates[k].record == record {
            let m = &candidates[k];
            let payload = payloads.read(m.payload_read);
            // Only a payload that is the header's version (an install may have rewritten
            // the slot between the READs).
            if payload_intact(c.table, key, payload) && payload[P_TAG as usize] == m.cid {
                let e = c.entry;
                let note = &mut c.notes[e as usize];
                if !judge.free(note) {
                    // Oldest first: this record's newer versions and the batch's later
                    // records wait too.
                    counts.add(VersionEvent::MoverBlocked, (candidates.len() - k) as u64);
                    ring = Ring::Blocked;
                    break;
                }
                if note.successor != Note::NEVER_WRITTEN {
                    counts.add(VersionEvent::EntryReclaimed, 1);
                }
                *note = Note {
                    successor: m.successor,
                    written_at_ns: judge.now_ns,
                };
                c.entry = (c.entry + 1) % layout.overflow_entries;
                if c.entry == 0 {
                    counts.add(VersionEvent::RingWrap, 1);
                }
                counts.add(VersionEvent::VersionMoved, 1);
                let mut words = Vec::with_capacity(layout.overflow_entry_words() as usize);
                words.extend_from_slice(&[link, m.cid, m.sealed]);
                words.extend_from_slice(payload);
                d.write(
                    RemotePtr::new(node, region, layout.overflow_entry_offset(e)),
                    Words::from_slice(&words),
                );
                link = e as u64 + 1;
                moved.push(m);
            }
            k += 1;
        }
        if moved.is_empty() {
            continue;
        }
        // Ops to one node execute in order: the entries are whole before the chain names
        // them.
        d.cas(record_ptr(record).add(H_AUX), chain, link);
        for m in moved {
            debug_assert!(m.key_version <= VERSION_KEY_MASK);
            let j = d.cas(record_ptr(record).add(m.header_at), m.cid, m.cid | MOVED);
            moved_cas.push((j, m.cid));
        }
    }
    if !d.is_empty() {
        let res = d.submit().await?;
        // A CAS returns the word it found: the header as read, or rewritten by an install.
        let set = moved_cas
            .iter()
            .filter(|&&(j, cid)| res.cas(j) == cid)
            .count() as u64;
        counts.add(VersionEvent::MovedBitSet, set);
        counts.add(VersionEvent::MovedBitLost, moved_cas.len() as u64 - set);
    }
    Ok(ring)
}
