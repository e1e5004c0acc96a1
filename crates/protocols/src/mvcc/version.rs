//! MVCC's version choice over a record's kept versions (RCC §4.4), shared by the
//! coordinator (one-sided reads) and the participant (RPC reads), so both pick alike; and
//! the steps of installing a new version while keeping the old one.

use atoll_fabric::Words;
use atoll_storage::layout::{
    TableLayout, HEADER_WORDS, H_VERSION, H_WTS, OLD_SLOT_HEADER_WORDS, WTS_WRITING,
};

/// A version a reader may see.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chosen {
    pub wts: u64,
    pub version: u64,
    /// Word offset of its payload within the record.
    pub payload_at: usize,
}

/// Among the current version and the older slots of `record` (a whole record as READ
/// returns it), the one with the largest write timestamp below `ctts` (Cond R1); `None`
/// when every kept version is too new (the one needed was overwritten: slot overflow). An
/// old slot never written has version 0 and is skipped; a slot being written holds
/// [`WTS_WRITING`], above every `ctts`, and is never chosen. On equal write timestamps
/// (the moment a write-back has copied the current version but not yet marked it) the
/// two slots hold the same version, so either is right.
pub fn choose(layout: &TableLayout, record: &[u64], ctts: u64) -> Option<Chosen> {
    let mut best: Option<Chosen> = None;
    let mut consider = |wts: u64, version: u64, payload_at: usize| {
        if version != 0 && wts < ctts && best.is_none_or(|b| wts > b.wts) {
            best = Some(Chosen {
                wts,
                version,
                payload_at,
            });
        }
    };
    consider(
        record[H_WTS as usize],
        record[H_VERSION as usize] & !atoll_storage::layout::VERSION_ABSENT,
        HEADER_WORDS as usize,
    );
    for j in 0..layout.version_slots.saturating_sub(1) {
        let at = layout.old_slot_offset(j) as usize;
        if at + (OLD_SLOT_HEADER_WORDS + layout.payload_words) as usize <= record.len() {
            consider(
                record[at],
                record[at + 1],
                at + OLD_SLOT_HEADER_WORDS as usize,
            );
        }
    }
    best
}

/// The old slot a writer overwrites: the one holding the oldest version (never-written
/// slots first).
pub fn oldest_slot(layout: &TableLayout, record: &[u64]) -> u32 {
    (0..layout.version_slots - 1)
        .min_by_key(|&j| {
            let at = layout.old_slot_offset(j) as usize;
            (record[at + 1] != 0, record[at])
        })
        .expect("a multi-version layout has old slots")
}

/// The writes that make room for a new current version, in the order they must happen:
/// the oldest old slot is marked being written, filled with the current version, then
/// given its `wts`; then the current version's `WTS` is marked being written. The caller
/// then writes the new payload, then `WTS`/`RTS` and the version. Each step is a
/// `(word offset in the record, words)` write, done in order with ascending words.
///
/// Why a reader never takes a half-written slot: it chooses by `wts`, which a slot under
/// rewrite holds as [`WTS_WRITING`]; and a double read whose first READ saw a slot's old
/// `wts` before the marker went in, and then payload words of the rewrite, sees a
/// different `wts` in its second READ (the marker or the new one), so it reads again.
pub fn install_steps(layout: &TableLayout, record: &[u64]) -> [(u32, Words); 3] {
    let at = layout.old_slot_offset(oldest_slot(layout, record));
    let mut old = Words::with_capacity((OLD_SLOT_HEADER_WORDS + layout.payload_words) as usize);
    old.push(WTS_WRITING);
    old.push(record[H_VERSION as usize]);
    old.extend_from_slice(&record[HEADER_WORDS as usize..layout.tuple_words as usize]);
    [
        (at, old),
        (at, Words::from_slice(&[record[H_WTS as usize]])),
        (H_WTS, Words::from_slice(&[WTS_WRITING])),
    ]
}
