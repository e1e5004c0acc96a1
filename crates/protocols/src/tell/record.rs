//! A Tell record in its slot of the store: the serialized set of its versions (Tell §5.1)
//! in the storage layout's words, so that `get` returns the whole slot and a conditional
//! put writes a whole new one.
//!
//! | words                     | what                                                       |
//! |---------------------------|------------------------------------------------------------|
//! | `LOCK`                    | `[lock:1 | seq:63]`: the LL/SC sequence number, one up per  |
//! |                           | successful put (the store's `CommitId` lock-word form)     |
//! | `VERSION`, payload        | the newest version's version word and payload (a deletion: |
//! |                           | `VERSION_ABSENT` set, the payload zeroed)                   |
//! | `WTS`                     | the newest version's writer tid (0: loaded)                |
//! | old slot `j` (inline)     | `[tid, version word]`, payload: the next newest, in order; |
//! |                           | version word 0: no version                                 |
//!
//! `KEY`, `RTS` and `AUX` keep what the slot holds. A set larger than the slot's versions
//! is refused ([`RecordError::Full`]): garbage collection by `lav` makes room first, and an
//! update that still finds none aborts.

use super::descriptor::Tid;
use super::versions::{Version, VersionSet};
use atoll_storage::layout::{
    OldVersions, TableLayout, CID_LOCKED, HEADER_WORDS, H_LOCK, H_VERSION, H_WTS,
    OLD_SLOT_HEADER_WORDS, VERSION_ABSENT,
};

/// A record's slot, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The LL/SC sequence number.
    pub seq: u64,
    /// A one-sided put holds it (its value is being written).
    pub locked: bool,
    pub versions: VersionSet,
}

/// Why a slot's words are not a Tell record, or a set does not fit one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The words are not a record of this layout.
    Malformed(String),
    /// `have` versions for a slot of `max`.
    Full { have: usize, max: u32 },
}

/// Whether `layout` can hold Tell records: old versions inline, at least two versions (the
/// newest may be a writer's in flight, and a reader needs the one before it).
pub fn fits(layout: &TableLayout) -> bool {
    layout.version_slots >= 2 && layout.old_versions == OldVersions::Inline
}

/// The record in slot words `w` (the whole slot).
pub fn decode(layout: &TableLayout, w: &[u64]) -> Result<Record, RecordError> {
    let bad = |what: String| Err(RecordError::Malformed(what));
    if !fits(layout) || w.len() != layout.record_words as usize {
        return bad(format!(
            "{} words for a slot of {} with {} versions",
            w.len(),
            layout.record_words,
            layout.version_slots
        ));
    }
    let payload_of = |at: usize, word: u64| {
        (word & VERSION_ABSENT == 0).then(|| w[at..at + layout.payload_words as usize].to_vec())
    };
    let head_word = w[H_VERSION as usize];
    let mut versions = vec![Version {
        tid: Tid(w[H_WTS as usize]),
        word: head_word,
        payload: payload_of(HEADER_WORDS as usize, head_word),
    }];
    for j in 0..layout.version_slots - 1 {
        let at = layout.old_header_offset(j) as usize;
        let (tid, word) = (w[at], w[at + 1]);
        if word == 0 {
            continue;
        }
        versions.push(Version {
            tid: Tid(tid),
            word,
            payload: payload_of(layout.old_payload_offset(j) as usize, word),
        });
    }
    let versions = match VersionSet::try_new(versions) {
        Ok(v) => v,
        Err(t) => return bad(format!("two versions of tid {}", t.0)),
    };
    let lock = w[H_LOCK as usize];
    Ok(Record {
        seq: lock & !CID_LOCKED,
        locked: lock & CID_LOCKED != 0,
        versions,
    })
}

/// The slot words of `versions` over slot `old` (whose `LOCK`, `KEY`, `RTS` and `AUX` it
/// keeps; the put sets `LOCK`).
pub fn encode(
    layout: &TableLayout,
    old: &[u64],
    versions: &VersionSet,
) -> Result<Vec<u64>, RecordError> {
    let bad = |what: String| Err(RecordError::Malformed(what));
    if !fits(layout) || old.len() != layout.record_words as usize {
        return bad(format!("a slot of {} words to rewrite", old.len()));
    }
    let vs = versions.versions();
    if vs.len() > layout.version_slots as usize {
        return Err(RecordError::Full {
            have: vs.len(),
            max: layout.version_slots,
        });
    }
    let Some(head) = vs.first() else {
        return bad("a record with no version".into());
    };
    let payload_words = layout.payload_words as usize;
    let mut w = old.to_vec();
    w[HEADER_WORDS as usize..].fill(0);
    let put = |w: &mut Vec<u64>, at: usize, v: &Version| -> Result<(), RecordError> {
        if v.word == 0 || (v.word & VERSION_ABSENT != 0) != v.payload.is_none() {
            return Err(RecordError::Malformed(format!(
                "tid {}'s version word {:#x} for a {}",
                v.tid.0,
                v.word,
                if v.payload.is_some() {
                    "payload"
                } else {
                    "deletion"
                }
            )));
        }
        if let Some(p) = &v.payload {
            if p.len() != payload_words {
                return Err(RecordError::Malformed(format!(
                    "tid {}'s payload of {} words for {payload_words}",
                    v.tid.0,
                    p.len()
                )));
            }
            w[at..at + payload_words].copy_from_slice(p);
        }
        Ok(())
    };
    put(&mut w, HEADER_WORDS as usize, head)?;
    w[H_VERSION as usize] = head.word;
    w[H_WTS as usize] = head.tid.0;
    for (j, v) in vs[1..].iter().enumerate() {
        let at = layout.old_header_offset(j as u32) as usize;
        w[at] = v.tid.0;
        w[at + 1] = v.word;
        put(&mut w, at + OLD_SLOT_HEADER_WORDS as usize, v)?;
    }
    Ok(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_storage::layout::{Partition, TableSpec, H_KEY};

    fn layout(versions: u32) -> TableLayout {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 3,
            capacity_per_node: 4,
            capacity_max_per_node: Some(4),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        TableLayout::with_versions(&spec, versions)
    }

    fn v(tid: u64, x: u64) -> Version {
        Version {
            tid: Tid(tid),
            word: tid + 1,
            payload: Some(vec![x, x + 1, x + 2, x + 3, x + 4]),
        }
    }

    #[test]
    fn tell_a_version_set_round_trips_through_a_slot_newest_in_the_tuple() {
        let l = layout(3);
        let mut old = vec![0; l.record_words as usize];
        old[H_KEY as usize] = 77;
        old[H_LOCK as usize] = 5;
        let mut set = VersionSet::new(vec![v(4, 40), v(9, 90)]);
        set.write(Tid(12), 13 | VERSION_ABSENT, None);
        let w = encode(&l, &old, &set).unwrap();
        assert_eq!((w[H_KEY as usize], w[H_WTS as usize]), (77, 12));
        let r = decode(&l, &w).unwrap();
        assert_eq!((r.seq, r.locked, &r.versions), (5, false, &set));
        // The set of a loaded record: its one version, tid 0.
        let mut loaded = old.clone();
        loaded[H_VERSION as usize] = 1;
        let r = decode(&l, &loaded).unwrap();
        assert_eq!(r.versions.versions().len(), 1);
        assert_eq!(r.versions.versions()[0].tid, Tid(0));
    }

    #[test]
    fn tell_a_set_over_the_slots_versions_or_a_malformed_slot_is_refused_by_a_typed_error() {
        let l = layout(2);
        let old = vec![0; l.record_words as usize];
        let three = VersionSet::new(vec![v(1, 1), v(2, 2), v(3, 3)]);
        assert_eq!(
            encode(&l, &old, &three),
            Err(RecordError::Full { have: 3, max: 2 })
        );
        assert!(matches!(
            encode(&l, &old, &VersionSet::default()),
            Err(RecordError::Malformed(_))
        ));
        let mut short = v(1, 1);
        short.payload = Some(vec![1]);
        assert!(matches!(
            encode(&l, &old, &VersionSet::new(vec![short])),
            Err(RecordError::Malformed(_))
        ));
        assert!(matches!(
            decode(&l, &old[1..]),
            Err(RecordError::Malformed(_))
        ));
        assert!(matches!(
            decode(&layout(1), &old[..layout(1).record_words as usize]),
            Err(RecordError::Malformed(_))
        ));
        // Two versions of one tid in a slot.
        let mut w = encode(&l, &old, &VersionSet::new(vec![v(1, 1), v(2, 2)])).unwrap();
        let at = l.old_header_offset(0) as usize;
        w[at] = 2;
        assert_eq!(
            decode(&l, &w),
            Err(RecordError::Malformed("two versions of tid 2".into()))
        );
    }
}
