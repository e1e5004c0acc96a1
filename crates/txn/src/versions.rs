//! Counters of old versions kept outside a record (NAM-DB's overflow area): what a memory
//! node's version mover copied and what readers found there, shared by a node's tasks and
//! coordinators (seed-mechanisms.md claim 10: reads that need a version beyond the kept
//! ones and the overflow abort and are counted; the moved bits match the versions moved).
//!
//! Counted over the whole run, warm-up included: the mover runs across both.

use std::sync::atomic::{AtomicU64, Ordering};

/// What is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionEvent {
    /// A pass of the mover over its share of each table.
    MoverPass,
    /// An old version copied into an overflow entry.
    VersionMoved,
    /// A copied version's header given its moved bit (the CAS found the header as read).
    MovedBitSet,
    /// A copied version's header rewritten by an install before its moved bit was set
    /// (the copy stays true; the slot holds another version now).
    MovedBitLost,
    /// The overflow ring came round to its first entry again.
    RingWrap,
    /// An overflow entry that held a version written over: no live snapshot needed it (the
    /// garbage collector's test), or, without the collector, the ring came round to it.
    EntryReclaimed,
    /// An old version the mover left in its record because the ring's next entry is still
    /// needed by a live snapshot (or kept for `--overflow-keep-us`): the pass stops there.
    MoverBlocked,
    /// A read whose snapshot sees no version the record keeps, walking its chain.
    ChainWalk,
    /// An overflow entry such a walk read.
    ChainHop,
    /// A version a walk found and took: a read served from the overflow area.
    ChainRead,
    /// A read that needed a version older than every one kept in the record and its
    /// overflow chain: aborted `SnapshotTooOld`.
    BeyondKept,
    /// An update whose snapshot is older than every version the record keeps: aborted
    /// `SnapshotTooOld` too, though no overflow could save it (an update needs the current
    /// version, and first-committer-wins would abort it at the lock anyway).
    UpdateBehind,
    /// A read served by a processing node's shared record buffer (Tell's SB): the entry's
    /// version set covered the reader's snapshot.
    BufferHit,
    /// A read the shared buffer could not serve: fetched from the store.
    BufferMiss,
    /// A read the shared buffer served after its entry's cache-unit stamp in the store
    /// showed no update since the fetch (Tell's SBVS): a round trip, no record fetched.
    BufferRevalidated,
}

impl VersionEvent {
    pub const COUNT: usize = 15;
    pub const ALL: [VersionEvent; Self::COUNT] = [
        VersionEvent::MoverPass,
        VersionEvent::VersionMoved,
        VersionEvent::MovedBitSet,
        VersionEvent::MovedBitLost,
        VersionEvent::RingWrap,
        VersionEvent::EntryReclaimed,
        VersionEvent::MoverBlocked,
        VersionEvent::ChainWalk,
        VersionEvent::ChainHop,
        VersionEvent::ChainRead,
        VersionEvent::BeyondKept,
        VersionEvent::UpdateBehind,
        VersionEvent::BufferHit,
        VersionEvent::BufferMiss,
        VersionEvent::BufferRevalidated,
    ];

    /// The name in reports (`--json`).
    pub fn name(self) -> &'static str {
        match self {
            VersionEvent::MoverPass => "mover_passes",
            VersionEvent::VersionMoved => "versions_moved",
            VersionEvent::MovedBitSet => "moved_bits_set",
            VersionEvent::MovedBitLost => "moved_bits_lost_to_installs",
            VersionEvent::RingWrap => "overflow_ring_wraps",
            VersionEvent::EntryReclaimed => "overflow_entries_reclaimed",
            VersionEvent::MoverBlocked => "versions_waiting_for_a_free_entry",
            VersionEvent::ChainWalk => "chain_walks",
            VersionEvent::ChainHop => "chain_hops",
            VersionEvent::ChainRead => "reads_served_from_overflow",
            VersionEvent::BeyondKept => "reads_beyond_kept_versions",
            VersionEvent::UpdateBehind => "updates_behind_kept_versions",
            VersionEvent::BufferHit => "buffer_hits",
            VersionEvent::BufferMiss => "buffer_misses",
            VersionEvent::BufferRevalidated => "buffer_revalidated",
        }
    }
}

/// One node's counts, added to by its tasks and coordinators (rare events: a relaxed
/// atomic add each).
#[derive(Debug, Default)]
pub struct VersionCounters {
    counts: [AtomicU64; VersionEvent::COUNT],
}

impl VersionCounters {
    pub fn add(&self, e: VersionEvent, n: u64) {
        if n > 0 {
            self.counts[e as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The counts so far, indexed by [`VersionEvent`].
    pub fn get(&self) -> [u64; VersionEvent::COUNT] {
        std::array::from_fn(|i| self.counts[i].load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_counters_count_each_event_apart_in_the_order_of_all() {
        let c = VersionCounters::default();
        c.add(VersionEvent::VersionMoved, 3);
        c.add(VersionEvent::BeyondKept, 1);
        c.add(VersionEvent::BeyondKept, 0);
        let got = c.get();
        for (i, e) in VersionEvent::ALL.iter().enumerate() {
            assert_eq!(*e as usize, i, "{e:?} is at its index in ALL");
        }
        assert_eq!(got[VersionEvent::VersionMoved as usize], 3);
        assert_eq!(got[VersionEvent::BeyondKept as usize], 1);
        assert_eq!(got.iter().sum::<u64>(), 4);
    }
}
