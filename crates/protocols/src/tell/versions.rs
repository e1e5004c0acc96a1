//! A Tell record's version set (Tell §4.1, §5.1, §5.4): every version of the record, each
//! numbered with its writer's tid, the newest first. A read picks the newest version its
//! snapshot sees (or its own); an update adds or replaces its own version; an abort takes
//! its own out again; garbage collection drops what no snapshot reads any more.

use super::descriptor::{Descriptor, Tid};

/// One version: its writer, and its payload or a deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    pub tid: Tid,
    /// The store's version word of it (incarnation and key version; never 0).
    pub word: u64,
    /// `None`: the writer deleted the record.
    pub payload: Option<Vec<u64>>,
}

/// A record's versions, newest (highest tid) first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionSet(Vec<Version>);

impl VersionSet {
    /// The set of `versions`, in any order; no two of one tid.
    pub fn new(versions: Vec<Version>) -> Self {
        Self::try_new(versions).unwrap_or_else(|t| panic!("tell: two versions of tid {}", t.0))
    }

    /// As [`VersionSet::new`]; `Err(tid)` when two versions have one tid.
    pub fn try_new(mut versions: Vec<Version>) -> Result<Self, Tid> {
        versions.sort_by(|a, b| b.tid.cmp(&a.tid));
        if let Some(w) = versions.windows(2).find(|w| w[0].tid == w[1].tid) {
            return Err(w[0].tid);
        }
        Ok(VersionSet(versions))
    }

    pub fn versions(&self) -> &[Version] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// What transaction `own` of snapshot `snap` reads: its own version, or else the newest
    /// its snapshot sees; `None` when that is a deletion or there is none (absent).
    pub fn read(&self, snap: &Descriptor, own: Tid) -> Option<&Version> {
        let v = self.0.iter().find(|v| v.tid == own || snap.sees(v.tid))?;
        v.payload.as_ref().map(|_| v)
    }

    /// Tell's rule R1: a version of another transaction that `snap` does not see (committed
    /// after it started, or still in flight) makes an update of the record abort; so does
    /// a version of a higher tid, seen or not. A record's versions are ordered by tid (the
    /// newest its snapshot sees is the highest), so a writer must be above every one. With
    /// one commit manager a higher tid started later, so the snapshot never sees it and the
    /// second clause adds nothing; with several, a manager's block can lag another's, and
    /// a transaction with a lower tid may see a commit of a higher one: its update would
    /// sort below that version and be lost behind it (Tell §4.2's "higher abort rate" of
    /// contiguous tid ranges).
    pub fn unseen_writer(&self, snap: &Descriptor, own: Tid) -> Option<Tid> {
        self.0
            .iter()
            .find(|v| v.tid != own && (v.tid > own || !snap.sees(v.tid)))
            .map(|v| v.tid)
    }

    /// `own`'s version becomes `payload` (`None`: a deletion) with version word `word`,
    /// replacing an earlier write of its own.
    pub fn write(&mut self, own: Tid, word: u64, payload: Option<Vec<u64>>) {
        self.unwrite(own);
        let at = self
            .0
            .iter()
            .position(|v| v.tid < own)
            .unwrap_or(self.0.len());
        self.0.insert(
            at,
            Version {
                tid: own,
                word,
                payload,
            },
        );
    }

    /// Takes `own`'s version out (an abort's undo); whether it was there.
    pub fn unwrite(&mut self, own: Tid) -> bool {
        let before = self.0.len();
        self.0.retain(|v| v.tid != own);
        self.0.len() != before
    }

    /// Drops the versions no snapshot reads: of those at or below `lav`, every one but the
    /// newest (which every active snapshot sees). Returns how many it dropped.
    pub fn collect(&mut self, lav: u64) -> usize {
        let Some(newest_old) = self.0.iter().position(|v| v.tid.0 <= lav) else {
            return 0;
        };
        let dropped = self.0.len() - newest_old - 1;
        self.0.truncate(newest_old + 1);
        dropped
    }

    /// Whether the record is gone for every snapshot: its only version left at or below
    /// `lav` is a deletion and none is newer (the record's slot may be freed).
    pub fn dead(&self, lav: u64) -> bool {
        matches!(&self.0[..], [v] if v.tid.0 <= lav && v.payload.is_none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(tid: u64, x: u64) -> Version {
        Version {
            tid: Tid(tid),
            word: tid + 1,
            payload: Some(vec![x]),
        }
    }

    #[test]
    fn tell_a_read_takes_its_own_version_or_the_newest_its_snapshot_sees() {
        let set = VersionSet::new(vec![v(2, 20), v(9, 90), v(5, 50)]);
        // Sees tids up to 4 and 9; 5 is in flight.
        let snap = Descriptor::new(0, 4, 9, [9]);
        assert_eq!(set.read(&snap, Tid(12)), Some(&v(9, 90)));
        let older = Descriptor::new(0, 4, 9, []);
        assert_eq!(set.read(&older, Tid(12)), Some(&v(2, 20)));
        assert_eq!(set.read(&older, Tid(5)), Some(&v(5, 50)), "its own write");
        assert_eq!(set.read(&Descriptor::new(0, 1, 1, []), Tid(12)), None);
        // R1: an update under `older` meets 9 and 5, which it does not see.
        assert_eq!(set.unseen_writer(&older, Tid(12)), Some(Tid(9)));
        // A version of a higher tid aborts an update even when seen (several managers).
        assert_eq!(set.unseen_writer(&snap, Tid(5)), Some(Tid(9)));
        let every = Descriptor::new(0, 9, 9, []);
        assert_eq!(set.unseen_writer(&every, Tid(12)), None);
        assert_eq!(
            set.unseen_writer(&every, Tid(9)),
            None,
            "its own is the highest"
        );
    }

    #[test]
    fn tell_a_write_replaces_its_own_version_and_an_abort_takes_it_out() {
        let mut set = VersionSet::new(vec![v(2, 20)]);
        set.write(Tid(7), 8, Some(vec![70]));
        set.write(Tid(7), 8, Some(vec![71]));
        assert_eq!(set.versions(), &[v(7, 71), v(2, 20)]);
        assert!(set.unwrite(Tid(7)));
        assert!(!set.unwrite(Tid(7)));
        assert_eq!(set.versions(), &[v(2, 20)]);
        // A deletion reads as absent.
        set.write(Tid(8), 9, None);
        assert_eq!(set.read(&Descriptor::new(0, 8, 8, []), Tid(9)), None);
    }

    #[test]
    fn tell_garbage_collection_keeps_the_newest_version_at_or_below_lav_and_every_newer_one() {
        let mut set = VersionSet::new(vec![v(1, 1), v(3, 3), v(6, 6), v(8, 8)]);
        assert_eq!(set.collect(0), 0);
        assert_eq!(set.collect(5), 1);
        assert_eq!(set.versions(), &[v(8, 8), v(6, 6), v(3, 3)]);
        assert_eq!(set.collect(9), 2);
        assert_eq!(set.versions(), &[v(8, 8)]);
        assert!(!set.dead(9));
        set.write(Tid(10), 11, None);
        set.collect(10);
        assert!(set.dead(10) && !set.dead(9));
    }
}
