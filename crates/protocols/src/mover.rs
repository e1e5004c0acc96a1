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
//! (a slot rewritten between the two READs shows another). The overflow area is a ring:
//! when it wraps, the oldest entries are written over, so chains that led to them now
//! lead to another record's or a newer version, which readers detect (each entry is checked
//! against the record and the version the reader needs next; a gap aborts
//! `SnapshotTooOld`). That wrap is the garbage collector: an entry lives as long as the
//! ring takes to come round.

use crate::rsi::{self, MOVED};
use atoll_fabric::{Endpoint, RegionId, RemotePtr, Words};
use atoll_storage::layout::{
    payload_intact, TableId, TableLayout, H_AUX, H_KEY, P_TAG, VERSION_KEY_MASK,
};
use atoll_storage::Catalog;
use atoll_txn::versions::{VersionCounters, VersionEvent};
use atoll_txn::NodeTask;

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

/// Where the mover is in one table.
struct TableCursor {
    table: TableId,
    /// The next record slot to scan.
    record: u32,
    /// The next overflow entry to write (the ring's head).
    entry: u32,
}

/// A memory node's version mover: where it is in each table with an overflow area.
pub struct Mover {
    cursors: Vec<TableCursor>,
}

impl Mover {
    pub fn new(catalog: &Catalog) -> Self {
        let cursors = (0..catalog.table_count())
            .map(|t| TableId(t as u16))
            .filter(|&t| catalog.layout(t).overflow_entries > 0)
            .map(|table| TableCursor {
                table,
                record: 0,
                entry: 0,
            })
            .collect();
        Mover { cursors }
    }

    /// One pass: the next [`MOVER_RECORDS_PER_PASS`] record slots of each table, with
    /// `ep`'s node's own verbs. `Err` if an op failed (the node itself is down).
    pub async fn pass(
        &mut self,
        ep: &Endpoint,
        catalog: &Catalog,
        counts: &VersionCounters,
    ) -> Result<(), atoll_fabric::OpError> {
        for c in &mut self.cursors {
            let layout = *catalog.layout(c.table);
            let pass_end = c.record.saturating_add(MOVER_RECORDS_PER_PASS);
            while c.record < pass_end.min(layout.capacity) {
                let n = MOVER_BATCH_RECORDS.min(layout.capacity - c.record);
                move_batch(ep, &layout, c, n, counts).await?;
                c.record += n;
            }
            if c.record >= layout.capacity {
                c.record = 0;
            }
        }
        Ok(())
    }
}

/// Runs the mover on memory node `task.ep`'s records until the run is over.
pub async fn run(task: NodeTask) {
    let mut mover = Mover::new(&task.catalog);
    // Bounded by the run's end.
    while !(task.over)(task.ep.now_ns()) {
        // A failed op (the node itself is down): the run reports it elsewhere.
        if mover
            .pass(&task.ep, &task.catalog, &task.versions)
            .await
            .is_err()
        {
            return;
        }
        task.versions.add(VersionEvent::MoverPass, 1);
        task.ep.sleep(task.cfg.mover_interval_ns).await;
    }
}

/// An old version to copy: its record, header offset, commit id, sealed version word, and
/// where its payload lands in the batch's payload READs.
struct Candidate {
    record: u32,
    header_at: u32,
    cid: u64,
    sealed: u64,
    key_version: u64,
    payload_read: usize,
}

/// Copies the unmoved old versions of records `c.record .. c.record + n` of `layout`.
async fn move_batch(
    ep: &Endpoint,
    layout: &TableLayout,
    c: &mut TableCursor,
    n: u32,
    counts: &VersionCounters,
) -> Result<(), atoll_fabric::OpError> {
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
                Some(Candidate {
                    record: c.record + k,
                    header_at: at,
                    cid,
                    sealed,
                    key_version,
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
        return Ok(());
    }
    let payloads = d.submit().await?;
    let mut d = ep.doorbell_for(candidates.len() * 3);
    // (op index, commit id) of each moved-bit CAS, to count which found its header.
    let mut moved_cas: Vec<(usize, u64)> = Vec::with_capacity(candidates.len());
    let mut k = 0;
    while k < candidates.len() {
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
    Ok(())
}
