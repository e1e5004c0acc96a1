//! Tell's transaction log and the recovery of a crashed processing node (Tell §4.4).
//!
//! A committing transaction puts its log entry (tid, processing node, write set, the commit
//! flag unset) *before* it applies any update, and sets the flag once every update and
//! index change is applied: the flag is its commit point. So after a processing node
//! crashes, its transactions are resolved from the log alone:
//! - an entry of it without the flag: every version of that tid is removed from every
//!   record of its write set (a record it had not reached yet holds none), then the tid
//!   is aborted at the commit manager;
//! - an entry with the flag whose tid is still active: committed at the commit manager;
//! - a tid it started with no entry wrote nothing: aborted.
//!
//! The scan goes back from the highest tid to `lav` only: every active tid lies above its
//! base, so above `lav` (Tell: "the lav implicitly acts as a rolling checkpoint"). Once
//! every tid of the node ended, the base moves past them. The plan is computed here; the
//! caller carries it out (each removal a conditional-put loop on the record).

use super::cm::Pn;
use super::descriptor::Tid;
use atoll_fabric::NodeId;
use atoll_storage::TableId;
use atoll_txn::msg::DecodeError;

/// A record of a write set: its table, the storage node holding it and its key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rid {
    pub table: TableId,
    pub node: NodeId,
    pub key: u64,
}

/// One entry of the log, keyed by its tid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogEntry {
    pub tid: Tid,
    pub pn: Pn,
    /// The attempt's tag (what its payloads carry): how a client whose processing node
    /// crashed learns the outcome of the attempt it never heard back from.
    pub tag: u64,
    /// Every record the transaction updates, inserts or deletes.
    pub write_set: Vec<Rid>,
    /// Set once every update is applied: the transaction committed.
    pub committed: bool,
}

/// Words of an entry before its write set: tid, processing node, flag, records, tag,
/// checksum.
pub const HEAD_WORDS: u32 = 6;
/// The commit flag's word in an entry: written on its own once every put is done.
pub const FLAG_WORD: u32 = 2;
/// Words per record of the write set: table and node, key.
pub const RID_WORDS: u32 = 2;
/// The checksum's word in an entry.
const SUM_WORD: usize = 5;

/// The checksum of an entry's words: every word but the flag and the checksum itself, so
/// an entry torn by a crash mid-write does not read as one.
fn checksum(w: &[u64]) -> u64 {
    w.iter()
        .enumerate()
        .filter(|&(i, _)| i != FLAG_WORD as usize && i != SUM_WORD)
        .fold(0x7e11_u64, |a, (_, &x)| a.rotate_left(9) ^ x)
}

impl LogEntry {
    /// Words of an entry of a write set of `records` records.
    pub fn words_for(records: usize) -> u32 {
        HEAD_WORDS + RID_WORDS * records as u32
    }

    /// As the words stored for it: `[tid, pn, committed, n, tag, checksum, (table << 16 |
    /// node, key)...]`.
    pub fn to_words(&self) -> Vec<u64> {
        let mut w = Vec::with_capacity(Self::words_for(self.write_set.len()) as usize);
        w.extend_from_slice(&[
            self.tid.0,
            self.pn.0 as u64,
            self.committed as u64,
            self.write_set.len() as u64,
            self.tag,
            0,
        ]);
        for r in &self.write_set {
            w.push((r.table.0 as u64) << 16 | r.node.0 as u64);
            w.push(r.key);
        }
        w[SUM_WORD] = checksum(&w);
        w
    }

    pub fn from_words(w: &[u64]) -> Result<Self, DecodeError> {
        let err = |what: String| Err(DecodeError(format!("tell log entry: {what}")));
        let [tid, pn, committed, n, tag, sum, ref rids @ ..] = *w else {
            return err(format!("{} words", w.len()));
        };
        let Ok(pn) = u16::try_from(pn) else {
            return err(format!("processing node {pn}"));
        };
        if committed > 1 {
            return err(format!("commit flag {committed}"));
        }
        if rids.len() as u64 != n.saturating_mul(RID_WORDS as u64) {
            return err(format!("{} words of records where it says {n}", rids.len()));
        }
        if checksum(w) != sum {
            return err("checksum mismatch (torn or never written)".into());
        }
        let mut write_set = Vec::with_capacity(n as usize);
        for r in rids.chunks_exact(RID_WORDS as usize) {
            let Ok(table) = u16::try_from(r[0] >> 16) else {
                return err(format!("table {}", r[0] >> 16));
            };
            write_set.push(Rid {
                table: TableId(table),
                node: NodeId((r[0] & 0xffff) as u16),
                key: r[1],
            });
        }
        Ok(LogEntry {
            tid: Tid(tid),
            pn: Pn(pn),
            tag,
            write_set,
            committed: committed == 1,
        })
    }

    /// The entry in `w`, the first words of its place in the log, or `None` if they hold
    /// none (never written, or torn by a crash mid-write).
    pub fn find(w: &[u64]) -> Option<Self> {
        let n = *w.get(3)?;
        let len = Self::words_for(usize::try_from(n).ok()?.min(w.len())) as usize;
        Self::from_words(w.get(..len)?).ok()
    }
}

/// What recovering processing node `pn` does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Versions to remove: `(record, tid)`, before any of the tids is aborted.
    pub undo: Vec<(Rid, Tid)>,
    /// Tids to abort at the commit manager (after the removals).
    pub abort: Vec<Tid>,
    /// Tids whose commit flag is set but that are still active: to commit.
    pub commit: Vec<Tid>,
    /// Entries read by the scan.
    pub scanned: usize,
}

/// The plan for crashed node `pn`: `log` read back from the highest tid down to `lav`
/// (entries at or below it are not needed), `active` the tids of `pn` the commit manager
/// still holds active.
pub fn plan<'a>(
    log: impl IntoIterator<Item = &'a LogEntry>,
    pn: Pn,
    lav: u64,
    active: &[Tid],
) -> Plan {
    let mut p = Plan::default();
    let mut logged = Vec::new();
    for e in log {
        if e.tid.0 <= lav {
            break;
        }
        p.scanned += 1;
        if e.pn != pn {
            continue;
        }
        logged.push(e.tid);
        if e.committed {
            if active.contains(&e.tid) {
                p.commit.push(e.tid);
            }
            continue;
        }
        p.undo.extend(e.write_set.iter().map(|&r| (r, e.tid)));
        if active.contains(&e.tid) {
            p.abort.push(e.tid);
        }
    }
    // Tids it started that never logged wrote nothing.
    p.abort
        .extend(active.iter().copied().filter(|t| !logged.contains(t)));
    p.abort.sort_unstable();
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tell::cm::CommitManager;
    use crate::tell::versions::VersionSet;
    use std::collections::BTreeMap;

    fn rid(key: u64) -> Rid {
        Rid {
            table: TableId(0),
            node: NodeId(0),
            key,
        }
    }

    #[test]
    fn tell_a_log_entry_round_trips_and_a_malformed_one_is_a_typed_error() {
        let e = LogEntry {
            tid: Tid(9),
            pn: Pn(2),
            tag: 77,
            write_set: vec![rid(4), rid(7)],
            committed: true,
        };
        let w = e.to_words();
        assert_eq!(LogEntry::from_words(&w), Ok(e.clone()));
        // The flag is set on its own, outside the checksum.
        let mut unflagged = w.clone();
        unflagged[FLAG_WORD as usize] = 0;
        assert!(!LogEntry::from_words(&unflagged).unwrap().committed);
        // In a longer place of the log, followed by anything.
        let mut place = w.clone();
        place.extend([5, 6, 7]);
        assert_eq!(LogEntry::find(&place), Some(e));
        // Torn: any other word changed.
        for i in (0..w.len()).filter(|&i| i != FLAG_WORD as usize) {
            let mut torn = w.clone();
            torn[i] ^= 1 << 3;
            assert_eq!(LogEntry::find(&torn), None, "word {i} torn");
        }
        assert_eq!(LogEntry::find(&[0; 8]), None, "never written");
        for bad in [
            &[1, 2, 0][..],
            &[1, 2, 5, 0, 0, 0],
            &[1, 1 << 20, 0, 0, 0, 0],
        ] {
            assert!(LogEntry::from_words(bad).is_err(), "{bad:?}");
        }
    }

    /// One transaction's progress: log entry, then one put per record, then the flag,
    /// then `set_committed`.
    struct Txn {
        tid: Tid,
        pn: Pn,
        writes: Vec<Rid>,
        /// Steps done: 0 started, 1 logged, 1 + k: k records put, then flagged, then ended.
        done: usize,
    }

    /// Processing nodes run transactions step by step in a seeded interleaving; one
    /// crashes at a random moment; its recovery (this plan, carried out) must leave no
    /// version of an unflagged tid of it, keep every flagged one's, end every one of its
    /// tids at the commit manager, and touch no other node's. `Ok(n)`: the crashed node
    /// had `n` tids it had not logged yet.
    fn crash_and_recover(seed: u64, forget_unlogged: bool) -> Result<usize, String> {
        const RECORDS: u64 = 16;
        const PNS: u16 = 3;
        let mut rng = atoll_fabric::rng::Rng::new(seed);
        let mut cm = CommitManager::single(1 << 20);
        let mut store: Vec<VersionSet> = vec![VersionSet::default(); RECORDS as usize];
        let mut log: BTreeMap<u64, LogEntry> = BTreeMap::new();
        let mut running: Vec<Txn> = Vec::new();
        let crashed = Pn(rng.below(PNS as u64) as u16);
        let crash_at = 200 + rng.below(400);
        for _ in 0..crash_at {
            if running.len() < 8 && rng.below(3) == 0 {
                let pn = Pn(rng.below(PNS as u64) as u16);
                let s = cm.start(pn, false).map_err(|e| e.to_string())?;
                let n = 1 + rng.below(3);
                let mut writes: Vec<Rid> = (0..n).map(|_| rid(rng.below(RECORDS))).collect();
                writes.sort_unstable();
                writes.dedup();
                running.push(Txn {
                    tid: s.tid,
                    pn,
                    writes,
                    done: 0,
                });
                continue;
            }
            if running.is_empty() {
                continue;
            }
            let i = rng.below(running.len() as u64) as usize;
            let t = &mut running[i];
            let puts = t.writes.len();
            match t.done {
                0 => {
                    let e = LogEntry {
                        tid: t.tid,
                        pn: t.pn,
                        tag: t.tid.0,
                        write_set: t.writes.clone(),
                        committed: false,
                    };
                    log.insert(t.tid.0, e);
                }
                d if d <= puts => {
                    let r = t.writes[d - 1];
                    store[r.key as usize].write(t.tid, t.tid.0 + 1, Some(vec![t.tid.0]));
                }
                d if d == puts + 1 => log.get_mut(&t.tid.0).expect("logged").committed = true,
                _ => {
                    cm.set_committed(t.tid).map_err(|e| e.to_string())?;
                    running.swap_remove(i);
                    continue;
                }
            }
            running[i].done += 1;
        }
        // The crash: the node's transactions stop where they are. Recovery reads the log
        // back from the highest tid to lav.
        let active = cm.active_of(crashed);
        let unlogged = active.iter().filter(|t| !log.contains_key(&t.0)).count();
        let mut p = plan(log.values().rev(), crashed, cm.lav(), &active);
        if forget_unlogged {
            // A recovery that ends only the tids it found in the log.
            p.abort.retain(|t| log.contains_key(&t.0));
        }
        for &(r, tid) in &p.undo {
            store[r.key as usize].unwrite(tid);
        }
        for &t in &p.abort {
            cm.set_aborted(t)
                .map_err(|e| format!("seed {seed}: abort {}: {e}", t.0))?;
        }
        for &t in &p.commit {
            cm.set_committed(t)
                .map_err(|e| format!("seed {seed}: commit {}: {e}", t.0))?;
        }
        // Every record holds versions of flagged tids or of other nodes only.
        for (r, set) in store.iter().enumerate() {
            for v in set.versions() {
                let e = &log[&v.tid.0];
                if e.pn == crashed && !e.committed {
                    return Err(format!(
                        "seed {seed}: record {r} keeps tid {} of crashed node {} (unflagged)",
                        v.tid.0, crashed.0
                    ));
                }
            }
        }
        for e in log.values().filter(|e| e.pn == crashed && e.committed) {
            for &r in &e.write_set {
                if !store[r.key as usize]
                    .versions()
                    .iter()
                    .any(|v| v.tid == e.tid)
                {
                    return Err(format!(
                        "seed {seed}: flagged tid {} lost record {r:?}",
                        e.tid.0
                    ));
                }
            }
        }
        if !cm.active_of(crashed).is_empty() {
            return Err(format!(
                "seed {seed}: tids of the crashed node still active"
            ));
        }
        // The survivors finish; then the base is past every tid.
        for t in running.iter().filter(|t| t.pn != crashed) {
            cm.set_committed(t.tid).map_err(|e| e.to_string())?;
        }
        if cm.base() != cm.last() {
            return Err(format!(
                "seed {seed}: base {} below the last tid {}",
                cm.base(),
                cm.last()
            ));
        }
        Ok(unlogged)
    }

    #[test]
    fn tell_a_crashed_processing_node_leaves_no_unflagged_version_and_the_base_moves_past_it() {
        let unlogged: usize = (0..200)
            .map(|seed| crash_and_recover(seed, false).unwrap())
            .sum();
        assert!(unlogged > 0, "no crash left a tid unlogged");
    }

    #[test]
    fn tell_a_recovery_that_forgets_unlogged_tids_is_caught_whenever_there_was_one() {
        let mut mattered = 0;
        for seed in 0..100 {
            let unlogged = crash_and_recover(seed, false).unwrap();
            let broken = crash_and_recover(seed, true);
            if unlogged > 0 {
                mattered += 1;
                assert!(
                    broken.is_err(),
                    "seed {seed}: {unlogged} unlogged tids not caught"
                );
            } else {
                assert!(broken.is_ok(), "seed {seed}: {broken:?}");
            }
        }
        assert!(
            mattered >= 20,
            "only {mattered} of 100 crashes left an unlogged tid"
        );
    }
}
