//! NAM-DB's commit ids: a slot of the timestamp vector and a timestamp within it in one
//! word, and which snapshots see which commits.

use atoll_storage::layout::CID_LOCKED;

/// Bit 62 marks a NAM-DB commit id, so none equals an attempt's tag (`make_tag`'s are
/// below it) or the loaded state's commit id (0).
pub const CID_MARK: u64 = 1 << 62;
/// Bits of a commit id below the slot: the timestamp within the slot.
pub const TS_BITS: u32 = 38;
/// The largest timestamp a slot counts to (2.7e11 commits of one coordinator).
pub const TS_MAX: u64 = (1 << TS_BITS) - 1;
/// Slots a commit id can name (bits 38..62).
pub const SLOTS_MAX: u32 = 1 << (62 - TS_BITS);
/// Copies of the vector a snapshot reads, at most, waiting for two that agree; then the
/// attempt aborts `SnapshotTooOld` (retried as any other).
pub const VECTOR_READS_MAX: u32 = 64;

/// The commit id of timestamp `ts` of slot `slot`.
pub fn commit_id(slot: u32, ts: u64) -> u64 {
    debug_assert!(slot < SLOTS_MAX && ts <= TS_MAX, "slot {slot} ts {ts}");
    CID_MARK | (slot as u64) << TS_BITS | ts
}

/// `(slot, timestamp)` of commit id `cid` (lock bit ignored); `None` for the loaded state's.
pub fn slot_ts(cid: u64) -> Option<(u32, u64)> {
    let cid = cid & !CID_LOCKED;
    (cid & CID_MARK != 0).then(|| (((cid & !CID_MARK) >> TS_BITS) as u32, cid & TS_MAX))
}

/// Whether snapshot `v` sees commit id `cid`: the loaded state always, else iff its
/// timestamp is at most the snapshot's for its slot.
pub fn sees(v: &[u64], cid: u64) -> bool {
    match slot_ts(cid) {
        None => cid & !CID_LOCKED == 0,
        Some((s, t)) => v.get(s as usize).is_some_and(|&seen| t <= seen),
    }
}
