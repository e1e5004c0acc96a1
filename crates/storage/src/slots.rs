//! A timestamp-ordered multi-version record's old slots (MVCC's `[wts, version]` headers,
//! the `Inline` form): which slot the next install overwrites, the steps that keep the
//! current version there, and the steps still due when a writer died part way through them
//! (a recovery finishing a dead coordinator's committed write-back).

use crate::layout::{
    TableLayout, HEADER_WORDS, H_VERSION, H_WTS, OLD_SLOT_HEADER_WORDS, WTS_WRITING,
};
use atoll_fabric::Words;

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
    steps_into(layout, record, oldest_slot(layout, record))
}

/// [`install_steps`] into old slot `j`.
fn steps_into(layout: &TableLayout, record: &[u64], j: u32) -> [(u32, Words); 3] {
    let at = layout.old_slot_offset(j);
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

/// The [`install_steps`] still due on `record` (whole, locked by a writer that died with its
/// write-back not done, its version not raised yet) before the writer's new version, whose
/// `wts` is `new_wts`, goes in: a crash stopped the writes anywhere, and each step is found
/// done from the words themselves, so a slot is never lost to a marker left behind and the
/// current version is kept exactly once.
/// - the current `WTS` marked being written, or already `new_wts` (the write-back's
///   timestamps went in, only its version did not): every step is done;
/// - an old slot marked being written (the first step begun, maybe torn): both slot steps
///   again into that slot, then the mark;
/// - an old slot holding the current version whole with its `wts`: the mark only;
/// - else none was done: every step, into the oldest slot.
pub fn install_steps_due(layout: &TableLayout, record: &[u64], new_wts: u64) -> Vec<(u32, Words)> {
    if record[H_WTS as usize] == WTS_WRITING || record[H_WTS as usize] == new_wts {
        return Vec::new();
    }
    let slots = 0..layout.version_slots - 1;
    let slot = |j: u32| {
        let at = layout.old_slot_offset(j) as usize;
        &record[at..at + (OLD_SLOT_HEADER_WORDS + layout.payload_words) as usize]
    };
    if let Some(j) = slots.clone().find(|&j| slot(j)[0] == WTS_WRITING) {
        return steps_into(layout, record, j).into();
    }
    let current = &record[HEADER_WORDS as usize..layout.tuple_words as usize];
    let kept = slots.clone().any(|j| {
        let s = slot(j);
        s[0] == record[H_WTS as usize]
            && s[1] == record[H_VERSION as usize]
            && &s[OLD_SLOT_HEADER_WORDS as usize..] == current
    });
    if kept {
        return vec![(H_WTS, Words::from_slice(&[WTS_WRITING]))];
    }
    install_steps(layout, record).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{Partition, TableSpec};

    fn layout() -> TableLayout {
        let spec = TableSpec {
            name: "t".into(),
            // With the engine's tag and check words, a payload of 3 words.
            payload_words: 1,
            capacity_per_node: 4,
            capacity_max_per_node: Some(4),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        TableLayout::with_versions(&spec, 3)
    }

    fn apply(record: &mut [u64], steps: &[(u32, Words)]) {
        for (at, words) in steps {
            record[*at as usize..*at as usize + words.len()].copy_from_slice(words);
        }
    }

    /// A record at version 7 (`wts` 70) with one old slot holding version 6 (`wts` 60).
    fn record(l: &TableLayout) -> Vec<u64> {
        let mut r = vec![0u64; l.record_words as usize];
        r[H_VERSION as usize] = 7;
        r[H_WTS as usize] = 70;
        r[HEADER_WORDS as usize..l.tuple_words as usize].copy_from_slice(&[1, 2, 3]);
        let at = l.old_slot_offset(0) as usize;
        r[at..at + 5].copy_from_slice(&[60, 6, 9, 9, 9]);
        r
    }

    #[test]
    fn slots_an_install_stopped_after_any_step_or_torn_in_the_first_ends_as_one_never_stopped() {
        let l = layout();
        let before = record(&l);
        const NEW_WTS: u64 = 80;
        let mut whole = before.clone();
        let steps = install_steps(&l, &before);
        apply(&mut whole, &steps);
        // The rest of the write-back: the new payload, then the timestamps.
        let rest = [
            (HEADER_WORDS, Words::from_slice(&[4, 5, 6])),
            (H_WTS, Words::from_slice(&[NEW_WTS])),
        ];
        // The untouched record, after each whole step, and the first step torn after each
        // of its words: the steps due finish it the same.
        let mut cuts: Vec<Vec<u64>> = vec![before.clone()];
        for k in 0..steps.len() {
            let mut r = before.clone();
            apply(&mut r, &steps[..=k]);
            cuts.push(r);
        }
        let (at, first) = &steps[0];
        for w in 1..first.len() {
            let mut r = before.clone();
            r[*at as usize..*at as usize + w].copy_from_slice(&first[..w]);
            cuts.push(r);
        }
        // Stopped after the payload, and after the timestamps too.
        for k in 0..rest.len() {
            let mut r = whole.clone();
            apply(&mut r, &rest[..=k]);
            cuts.push(r);
        }
        apply(&mut whole, &rest);
        for (i, mut r) in cuts.into_iter().enumerate() {
            let due = install_steps_due(&l, &r, NEW_WTS);
            apply(&mut r, &due);
            apply(&mut r, &rest);
            assert_eq!(r, whole, "cut {i}");
        }
        // The slot written is the never-written one, and version 6 is kept beside 7.
        let kept = l.old_slot_offset(1) as usize;
        assert_eq!(&whole[kept..kept + 5], &[70, 7, 1, 2, 3]);
        assert_eq!(
            &whole[..kept],
            &{
                let mut r = before.clone();
                r[HEADER_WORDS as usize..l.tuple_words as usize].copy_from_slice(&[4, 5, 6]);
                r[H_WTS as usize] = NEW_WTS;
                r
            }[..kept]
        );
    }
}
