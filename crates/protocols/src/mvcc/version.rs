//! MVCC's version choice over a record's kept versions (RCC §4.4), shared by the
//! coordinator (one-sided reads) and the participant (RPC reads), so both pick alike; the
//! steps of installing a new version while keeping the old one are `atoll_storage::slots`'.

use atoll_storage::layout::{TableLayout, HEADER_WORDS, H_VERSION, H_WTS, OLD_SLOT_HEADER_WORDS};
// The install's steps are the storage layer's: a recovery finishing a dead coordinator's
// write-back takes the same ones.
pub use atoll_storage::slots::{install_steps, oldest_slot};

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
/// [`WTS_WRITING`](atoll_storage::layout::WTS_WRITING), above every `ctts`, and is never
/// chosen. On equal write timestamps (the moment a write-back has copied the current
/// version but not yet marked it) the two slots hold the same version, so either is right.
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

/// Checks, on a node holding records after a run, that each live unlocked multi-version
/// record keeps the versions its writes replaced: once any old slot is written (an insert
/// clears them), the written slots hold the versions just below the current one, one
/// apart, their write timestamps falling with them, and no slot is left marked being
/// written. A write-back that put a new version in without keeping the old one (a recovery
/// finishing a dead writer's install carelessly) leaves a gap a snapshot reader would fall
/// through, seen here until later writes have cycled it out of the slots.
pub fn check_kept(store: &atoll_storage::Store) -> atoll_txn::knobs::StateCheck {
    use atoll_storage::layout::{OldVersions, H_KEY, H_LOCK, VERSION_ABSENT, WTS_WRITING};
    let mut c = atoll_txn::knobs::StateCheck {
        name: "mvcc.replaced_version_kept",
        what: "a live record written since its insert keeps, in its written old slots, the \
               versions just below its current one, one apart, older by write timestamp",
        ..Default::default()
    };
    let lock_word = store.catalog.lock_word();
    let mut record = Vec::new();
    for t in (0..store.catalog.table_count()).map(|t| atoll_storage::TableId(t as u16)) {
        let layout = *store.catalog.layout(t);
        let region = store.region(t);
        if layout.version_slots <= 1
            || layout.old_versions != OldVersions::Inline
            || region.len_words() == 0
        {
            continue;
        }
        record.resize(layout.record_words as usize, 0);
        for idx in 0..store.used_slots(t) {
            region.read_into(layout.record_offset(idx) as usize, &mut record);
            let version = record[H_VERSION as usize];
            if version & VERSION_ABSENT != 0 || lock_word.held(record[H_LOCK as usize]) {
                continue;
            }
            let mut kept: Vec<(u64, u64)> = (0..layout.version_slots - 1)
                .map(|j| {
                    let at = layout.old_slot_offset(j) as usize;
                    (record[at + 1], record[at])
                })
                .collect();
            let marked = kept.iter().any(|&(_, wts)| wts == WTS_WRITING);
            kept.retain(|&(v, _)| v != 0);
            if kept.is_empty() {
                continue;
            }
            // Newest first: each write kept the version it replaced, so the written slots
            // hold the versions just below the current one, one apart, older by `wts`.
            kept.sort_unstable_by(|a, b| b.cmp(a));
            c.checked += 1;
            let wts = record[H_WTS as usize];
            let mut newer = (version, wts);
            let gap = kept.iter().any(|&(v, w)| {
                let apart = v + 1 != newer.0 || w >= newer.1;
                newer = (v, w);
                apart
            });
            if marked || wts == WTS_WRITING || gap {
                c.failed += 1;
                if c.examples.len() < CHECK_EXAMPLES_MAX {
                    c.examples.push(format!(
                        "{}:{} on node {}: version {version:#x} wts {wts}, old slots \
                         (version, wts) newest first {kept:x?}{}",
                        store.catalog.spec(t).name,
                        record[H_KEY as usize],
                        store.node.0,
                        if marked {
                            ", a slot marked being written"
                        } else {
                            ""
                        }
                    ));
                }
            }
        }
    }
    c
}

/// Failed items a check names.
const CHECK_EXAMPLES_MAX: usize = 5;
