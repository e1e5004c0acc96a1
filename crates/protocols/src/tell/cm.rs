//! Tell's commit manager (Tell §4.2): hands out tids with their snapshot descriptor and
//! `lav`, and learns each transaction's end. Its state: the base `b` (every tid at or below
//! it completed), a bitset of the completed tids above it, and the active transactions with
//! the base each started at. A completion sets the tid's bit and moves the base over the
//! bits now contiguous with it.
//!
//! Several managers ([`CommitManager::merge_from`]): each hands out tids from blocks it
//! takes from a counter in the store ([`CommitManager::add_block`]), and every sync
//! interval each publishes its [`Summary`] and merges the others' (the union of the
//! completed sets, the least `lav`). A tid of another manager's block that nobody has
//! handed out yet holds every base below it (the paper's "higher abort rate" of contiguous
//! ranges), and a record's versions are ordered by tid, so an update by a lower tid than a
//! version's aborts ([`super::versions::VersionSet::unseen_writer`]). So a manager that
//! merges a summary naming a tid above some it has not handed out yet retires those: they
//! complete unused (no base waits for them), and its next tid is above the peer's. Each
//! manager numbers its own commits; a snapshot names, per manager, how many
//! of its commits it sees ([`Started::seen`]), which is a prefix of them: a summary carries
//! every completion its manager knew, so the commits of a manager it carries are exactly
//! those numbered up to the count it names.
//!
//! At most [`CommitManager::inflight_max`] tids lie above the base: `start` past it is a
//! typed error, never an unbounded bitset.

use super::descriptor::{Descriptor, Tid};
use std::collections::{BTreeMap, VecDeque};

/// A processing node, as a commit manager knows who started a transaction (so that the
/// recovery of a crashed one can end its tids).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pn(pub u16);

/// An active transaction: the base it started at and its processing node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Active {
    base: u64,
    pn: Pn,
}

/// Tids in flight at most by default: the 64 KiB ring of Tell's code, a bit each.
pub const INFLIGHT_MAX_DEFAULT: u64 = 64 * 1024 * 8;

/// Bits of one word of the bitset.
const WORD_BITS: u64 = 64;

/// Why a commit manager refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmError {
    /// The next tid lies too far above the base: some transaction has been open for
    /// `max` tids.
    InFlight { next: u64, base: u64, max: u64 },
    /// Its blocks of tids are used up: it takes the next from the store's counter first.
    NoTids,
    /// A completion of a tid that is not active here.
    NotActive(Tid),
    /// A start from a processing node declared crashed ([`CommitManager::recover`]).
    Fenced(Pn),
}

impl std::fmt::Display for CmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CmError::InFlight { next, base, max } => write!(
                f,
                "tid {next} would be {} above the base {base}, over the {max} tids a commit manager keeps in flight: a transaction stayed open too long",
                next - base
            ),
            CmError::NoTids => write!(f, "the commit manager's block of tids is used up"),
            CmError::NotActive(t) => write!(f, "tid {} is not active at this commit manager", t.0),
            CmError::Fenced(pn) => write!(f, "processing node {} was declared crashed", pn.0),
        }
    }
}

/// What a transaction starts with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    pub tid: Tid,
    pub snapshot: Descriptor,
    /// Per manager (by index), the commits of it the snapshot sees: exactly those it
    /// numbered up to this ([`CommitManager::set_committed`]), which is how a history names
    /// the snapshot (one manager: a scalar a checker orders commits by; several: a vector).
    pub seen: Vec<u64>,
}

/// What a commit manager tells the others at a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Its base, its highest known tid and the completed tids between.
    pub completed: Descriptor,
    /// The lowest base among its active transactions (its base if none).
    pub lav: u64,
    /// Per manager, the commits of it `completed` holds.
    pub seen: Vec<u64>,
}

/// One commit manager's state.
#[derive(Clone, Debug)]
pub struct CommitManager {
    base: u64,
    /// The tid of bit 0 of `bits[0]`: at most the base + 1, less than 64 below it.
    origin: u64,
    bits: VecDeque<u64>,
    /// The highest tid known handed out (here or, at the last merge, elsewhere).
    last: u64,
    /// Its tids still to hand out: `next..end`, then the blocks queued.
    next: u64,
    end: u64,
    blocks: VecDeque<(u64, u64)>,
    /// Tids it retired unused, behind a peer's.
    retired: u64,
    /// Active transactions by tid.
    active: BTreeMap<u64, Active>,
    /// Each other manager's `lav` at its last summary merged here.
    peers_lav: BTreeMap<u16, u64>,
    inflight_max: u64,
    /// This manager's index among the managers.
    index: u16,
    /// Per manager, its commits this one knows of (its own: every one it recorded, the
    /// number the next gets less one).
    seen: Vec<u64>,
    /// Processing nodes declared crashed: their starts are refused.
    fenced: std::collections::BTreeSet<Pn>,
}

impl CommitManager {
    /// A lone commit manager: every tid from 1 on is its own.
    pub fn single(inflight_max: u64) -> Self {
        let mut cm = Self::one_of(0, 1, inflight_max);
        cm.add_block(1, u64::MAX - 1);
        cm
    }

    /// Manager `index` of `managers`: it hands out tids only from the blocks
    /// [`CommitManager::add_block`] gives it.
    pub fn one_of(index: u16, managers: u16, inflight_max: u64) -> Self {
        assert!(
            inflight_max > 0,
            "tell: a commit manager with no tid in flight"
        );
        assert!(
            index < managers,
            "tell: commit manager {index} of {managers}"
        );
        CommitManager {
            base: 0,
            origin: 1,
            bits: VecDeque::new(),
            last: 0,
            next: 1,
            end: 1,
            blocks: VecDeque::new(),
            retired: 0,
            active: BTreeMap::new(),
            peers_lav: BTreeMap::new(),
            inflight_max,
            index,
            seen: vec![0; managers as usize],
            fenced: Default::default(),
        }
    }

    pub fn inflight_max(&self) -> u64 {
        self.inflight_max
    }

    pub fn base(&self) -> u64 {
        self.base
    }

    /// Tids `first .. first + len` are this manager's to hand out (taken from the store's
    /// counter), after those it has: blocks come from one counter in increasing order, so
    /// its tids do too.
    pub fn add_block(&mut self, first: u64, len: u64) {
        let behind = self.blocks.back().map_or(self.end, |&(f, l)| f + l);
        assert!(
            first >= behind && len > 0,
            "tell: block {first} (+{len}) behind tids up to {behind}"
        );
        if self.next >= self.end {
            (self.next, self.end) = (first, first.saturating_add(len));
        } else {
            self.blocks.push_back((first, len));
        }
    }

    /// Tids not yet handed out, in its current block and those queued.
    pub fn tids_left(&self) -> u64 {
        self.end - self.next + self.blocks.iter().map(|&(_, l)| l).sum::<u64>()
    }

    /// Blocks queued behind the current one.
    pub fn blocks_queued(&self) -> usize {
        self.blocks.len()
    }

    /// A new transaction's tid and snapshot. A read-only one completes at once (no base
    /// waits for it) but stays active until it ends, so that `lav` keeps its versions.
    pub fn start(&mut self, pn: Pn, read_only: bool) -> Result<Started, CmError> {
        if self.fenced.contains(&pn) {
            return Err(CmError::Fenced(pn));
        }
        if self.next >= self.end {
            let Some((first, len)) = self.blocks.pop_front() else {
                return Err(CmError::NoTids);
            };
            (self.next, self.end) = (first, first + len);
        }
        let tid = self.next;
        if tid - self.base > self.inflight_max {
            return Err(CmError::InFlight {
                next: tid,
                base: self.base,
                max: self.inflight_max,
            });
        }
        self.next += 1;
        self.last = self.last.max(tid);
        let snapshot = self.descriptor(self.lav());
        self.active.insert(
            tid,
            Active {
                base: self.base,
                pn,
            },
        );
        if read_only {
            self.complete(tid);
        }
        Ok(Started {
            tid: Tid(tid),
            snapshot,
            seen: self.seen.clone(),
        })
    }

    /// `tid` committed: its versions are in the store and become visible to every
    /// snapshot handed out from now on. Returns its commit's number at this manager (1,
    /// 2, ...): every snapshot handed out after it sees at least that many of its commits
    /// ([`Started::seen`]).
    pub fn set_committed(&mut self, tid: Tid) -> Result<u64, CmError> {
        self.end_txn(tid)?;
        let own = &mut self.seen[self.index as usize];
        *own += 1;
        Ok(*own)
    }

    /// This manager's index among the managers.
    pub fn index(&self) -> u16 {
        self.index
    }

    /// `tid` aborted, its versions already removed.
    pub fn set_aborted(&mut self, tid: Tid) -> Result<(), CmError> {
        self.end_txn(tid)
    }

    fn end_txn(&mut self, tid: Tid) -> Result<(), CmError> {
        if self.active.remove(&tid.0).is_none() {
            return Err(CmError::NotActive(tid));
        }
        self.complete(tid.0);
        Ok(())
    }

    /// The lowest base among the active transactions, here and at the others.
    pub fn lav(&self) -> u64 {
        let here = self.active.values().next().map_or(self.base, |a| a.base);
        // Bases only grow, so the oldest active tid started at the lowest one.
        debug_assert!(self.active.values().all(|a| a.base >= here));
        self.peers_lav.values().fold(here, |m, &p| m.min(p))
    }

    /// The tids processing node `pn` started that are still active, in order.
    pub fn active_of(&self, pn: Pn) -> Vec<Tid> {
        self.active
            .iter()
            .filter(|(_, a)| a.pn == pn)
            .map(|(&t, _)| Tid(t))
            .collect()
    }

    /// Processing node `pn` crashed: its starts are refused from now on (a start it sent
    /// before it crashed may still arrive), and these are its active tids, for its recovery
    /// to end.
    pub fn recover(&mut self, pn: Pn) -> Vec<Tid> {
        self.fenced.insert(pn);
        self.active_of(pn)
    }

    /// The highest tid handed out that this manager knows.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// What this manager tells the others.
    pub fn summary(&self) -> Summary {
        Summary {
            completed: self.descriptor(self.base),
            lav: self.active.values().next().map_or(self.base, |a| a.base),
            seen: self.seen.clone(),
        }
    }

    /// Takes in manager `peer`'s latest summary: its completions and the commits they
    /// hold, and its `lav` (in place of the one it sent before).
    pub fn merge_from(&mut self, peer: u16, s: &Summary) {
        assert!(
            peer != self.index && s.seen.len() == self.seen.len(),
            "tell: manager {} of {} merging a summary of manager {peer} of {}",
            self.index,
            self.seen.len(),
            s.seen.len()
        );
        self.peers_lav.insert(peer, s.lav);
        let d = &s.completed;
        for tid in self.base + 1..=d.last {
            if d.sees(Tid(tid)) {
                self.complete(tid);
            }
        }
        self.last = self.last.max(d.last);
        self.retire_through(d.last);
        for (m, &n) in s.seen.iter().enumerate() {
            if m != self.index as usize {
                self.seen[m] = self.seen[m].max(n);
            }
        }
    }

    /// Retires its tids not yet handed out up to `bound` (another manager handed `bound`
    /// out): each completes unused, and its next tid is above `bound`.
    fn retire_through(&mut self, bound: u64) {
        // Bounded: each turn drops a block or moves `next` past `bound`.
        while self.next <= bound {
            if self.next < self.end {
                let upto = self.end.min(bound + 1);
                for t in self.next..upto {
                    self.complete(t);
                }
                self.retired += upto - self.next;
                self.next = upto;
            }
            if self.next < self.end {
                return;
            }
            match self.blocks.pop_front() {
                Some((first, len)) => (self.next, self.end) = (first, first + len),
                None => return,
            }
        }
    }

    /// Tids it retired unused ([`CommitManager::merge_from`]).
    pub fn retired(&self) -> u64 {
        self.retired
    }

    /// The snapshot of every completion known now.
    fn descriptor(&self, lav: u64) -> Descriptor {
        let completed = (self.base + 1..=self.last).filter(|&t| self.bit(t));
        Descriptor::new(lav.min(self.base), self.base, self.last, completed)
    }

    fn bit(&self, tid: u64) -> bool {
        if tid < self.origin {
            return true;
        }
        let k = tid - self.origin;
        self.bits
            .get((k / WORD_BITS) as usize)
            .is_some_and(|w| w & (1 << (k % WORD_BITS)) != 0)
    }

    fn complete(&mut self, tid: u64) {
        if tid <= self.base {
            return;
        }
        let k = tid - self.origin;
        let word = (k / WORD_BITS) as usize;
        while self.bits.len() <= word {
            self.bits.push_back(0);
        }
        self.bits[word] |= 1 << (k % WORD_BITS);
        while self.bit(self.base + 1) {
            self.base += 1;
        }
        while self.base + 1 - self.origin >= WORD_BITS {
            self.bits.pop_front();
            self.origin += WORD_BITS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tell_a_commit_managers_base_moves_over_contiguous_completions_only() {
        let mut cm = CommitManager::single(INFLIGHT_MAX_DEFAULT);
        let t: Vec<Tid> = (0..4)
            .map(|_| cm.start(Pn(0), false).unwrap().tid)
            .collect();
        assert_eq!(t, vec![Tid(1), Tid(2), Tid(3), Tid(4)]);
        cm.set_committed(Tid(2)).unwrap();
        cm.set_aborted(Tid(3)).unwrap();
        assert_eq!(cm.base(), 0, "tid 1 is still open");
        let s = cm.start(Pn(0), false).unwrap();
        assert!(!s.snapshot.sees(Tid(1)) && s.snapshot.sees(Tid(2)) && s.snapshot.sees(Tid(3)));
        assert!(!s.snapshot.sees(Tid(4)) && !s.snapshot.sees(s.tid));
        assert_eq!(s.snapshot.lav, 0);
        cm.set_committed(Tid(1)).unwrap();
        assert_eq!(cm.base(), 3);
        assert_eq!(cm.set_committed(Tid(1)), Err(CmError::NotActive(Tid(1))));
    }

    #[test]
    fn tell_a_long_read_only_transaction_holds_lav_back_but_not_the_base() {
        let mut cm = CommitManager::single(INFLIGHT_MAX_DEFAULT);
        let reader = cm.start(Pn(0), true).unwrap();
        for _ in 0..100 {
            let w = cm.start(Pn(0), false).unwrap();
            cm.set_committed(w.tid).unwrap();
        }
        assert_eq!(cm.base(), 101);
        assert_eq!(cm.lav(), 0, "the reader started at base 0");
        cm.set_committed(reader.tid).unwrap();
        assert_eq!(cm.lav(), 101);
    }

    #[test]
    fn tell_a_start_past_the_tids_in_flight_is_refused_by_name() {
        let mut cm = CommitManager::single(8);
        let first = cm.start(Pn(0), false).unwrap().tid;
        for _ in 1..8 {
            cm.start(Pn(0), false).unwrap();
        }
        let e = cm.start(Pn(0), false).unwrap_err();
        assert_eq!(
            e,
            CmError::InFlight {
                next: 9,
                base: 0,
                max: 8
            }
        );
        assert!(e.to_string().contains("stayed open too long"), "{e}");
        cm.set_aborted(first).unwrap();
        assert!(cm.start(Pn(0), false).is_ok());
    }

    #[test]
    fn tell_commit_managers_that_merge_see_each_others_completions() {
        let mut a = CommitManager::one_of(0, 2, INFLIGHT_MAX_DEFAULT);
        let mut b = CommitManager::one_of(1, 2, INFLIGHT_MAX_DEFAULT);
        assert_eq!(a.start(Pn(0), false), Err(CmError::NoTids));
        a.add_block(1, 4);
        b.add_block(5, 4);
        let ta: Vec<Tid> = (0..4).map(|_| a.start(Pn(0), false).unwrap().tid).collect();
        let tb = b.start(Pn(0), false).unwrap().tid;
        for &t in &ta {
            a.set_committed(t).unwrap();
        }
        b.set_committed(tb).unwrap();
        assert_eq!((a.base(), b.base()), (4, 0));
        let (sa, sb) = (a.summary(), b.summary());
        a.merge_from(1, &sb);
        b.merge_from(0, &sa);
        assert_eq!((a.base(), b.base()), (5, 5));
        let s = b.start(Pn(0), false).unwrap();
        assert!((1..=5).all(|t| s.snapshot.sees(Tid(t))));
        // Each numbers its own commits; the snapshot sees a's 4 and b's 1.
        assert_eq!(s.seen, vec![4, 1]);
        // b's open transaction holds a's lav back after the next sync.
        a.merge_from(1, &b.summary());
        assert_eq!(a.lav(), 5);
    }

    #[test]
    fn tell_a_commit_manager_takes_queued_blocks_in_order_and_says_when_it_has_none() {
        let mut cm = CommitManager::one_of(0, 1, INFLIGHT_MAX_DEFAULT);
        cm.add_block(1, 2);
        cm.add_block(7, 1);
        assert_eq!((cm.tids_left(), cm.blocks_queued()), (3, 1));
        let t: Vec<u64> = (0..3)
            .map(|_| cm.start(Pn(0), false).unwrap().tid.0)
            .collect();
        assert_eq!(t, vec![1, 2, 7]);
        assert_eq!(cm.start(Pn(0), false), Err(CmError::NoTids));
    }

    #[test]
    fn tell_a_commit_manager_retires_its_tids_below_a_peers_so_no_base_waits_for_them() {
        let mut a = CommitManager::one_of(0, 2, INFLIGHT_MAX_DEFAULT);
        let mut b = CommitManager::one_of(1, 2, INFLIGHT_MAX_DEFAULT);
        a.add_block(1, 8);
        b.add_block(9, 8);
        let t1 = a.start(Pn(0), false).unwrap().tid;
        let t9 = b.start(Pn(1), false).unwrap().tid;
        b.set_committed(t9).unwrap();
        a.merge_from(1, &b.summary());
        assert_eq!(a.retired(), 7, "tids 2..=8 retired behind b's 9");
        assert_eq!(a.start(Pn(0), false), Err(CmError::NoTids));
        a.add_block(17, 8);
        assert_eq!(a.start(Pn(0), false).unwrap().tid, Tid(17));
        a.set_committed(t1).unwrap();
        assert_eq!(a.base(), 9, "1 committed, 2..=8 retired, 9 committed at b");
        // b learns the retired tids as completed, and retires its own 10..=16 behind a's 17.
        b.merge_from(0, &a.summary());
        assert_eq!((b.base(), b.retired()), (16, 7));
    }

    /// Several managers with random starts, ends and syncs: every snapshot sees exactly
    /// the commits its `seen` vector names (commit `n` of manager `m` iff `n <= seen[m]`),
    /// which is what the history checker is told.
    #[test]
    fn tell_several_commit_managers_snapshots_see_exactly_the_commits_their_vectors_name() {
        const MANAGERS: u16 = 3;
        const BLOCK: u64 = 8;
        let mut rng = atoll_fabric::rng::Rng::new(11);
        let mut cms: Vec<CommitManager> = (0..MANAGERS)
            .map(|i| CommitManager::one_of(i, MANAGERS, INFLIGHT_MAX_DEFAULT))
            .collect();
        let mut counter = 1;
        // Per tid: the manager and number of its commit.
        let mut committed: BTreeMap<u64, (u16, u64)> = BTreeMap::new();
        let mut open: Vec<(u16, Tid)> = Vec::new();
        for step in 0..20_000 {
            let m = rng.below(MANAGERS as u64) as u16;
            let cm = &mut cms[m as usize];
            match rng.below(10) {
                0 => {
                    let peer = rng.below(MANAGERS as u64) as u16;
                    if peer != m {
                        let s = cms[peer as usize].summary();
                        cms[m as usize].merge_from(peer, &s);
                    }
                }
                1..=5 if open.len() < 200 => {
                    if cm.tids_left() < BLOCK {
                        cm.add_block(counter, BLOCK);
                        counter += BLOCK;
                    }
                    let s = cm.start(Pn(m), false).unwrap();
                    for (&t, &(cm_of, n)) in &committed {
                        let named = n <= s.seen[cm_of as usize];
                        assert_eq!(s.snapshot.sees(Tid(t)), named, "step {step}: tid {t}");
                    }
                    open.push((m, s.tid));
                }
                _ if !open.is_empty() => {
                    let (at, t) = open.swap_remove(rng.below(open.len() as u64) as usize);
                    if rng.below(4) == 0 {
                        cms[at as usize].set_aborted(t).unwrap();
                    } else {
                        let n = cms[at as usize].set_committed(t).unwrap();
                        committed.insert(t.0, (at, n));
                    }
                }
                _ => {}
            }
        }
        assert!(committed.len() > 1000, "{} committed", committed.len());
    }

    /// A model check: random starts and ends against a plain set of completed tids and
    /// the base each open transaction started at.
    #[test]
    fn tell_a_commit_manager_agrees_with_a_set_of_completed_tids() {
        let mut rng = atoll_fabric::rng::Rng::new(7);
        let mut cm = CommitManager::single(4096);
        let mut open: Vec<(Tid, u64)> = Vec::new();
        let mut done = std::collections::BTreeSet::new();
        for step in 0..20_000 {
            if open.is_empty() || (rng.below(3) > 0 && open.len() < 300) {
                let read_only = rng.below(4) == 0;
                let base = cm.base();
                let s = cm.start(Pn(0), read_only).unwrap();
                // The snapshot sees exactly what completed before it.
                if step % 97 == 0 {
                    for t in 1..=s.tid.0 {
                        assert_eq!(s.snapshot.sees(Tid(t)), done.contains(&t), "tid {t}");
                    }
                }
                if read_only {
                    done.insert(s.tid.0);
                }
                open.push((s.tid, base));
            } else {
                let (t, _) = open.swap_remove(rng.below(open.len() as u64) as usize);
                cm.set_committed(t).unwrap();
                done.insert(t.0);
            }
            let base = (1..).take_while(|t| done.contains(t)).last().unwrap_or(0);
            assert_eq!(cm.base(), base, "step {step}");
            let lav = open.iter().map(|&(_, b)| b).min().unwrap_or(base);
            assert_eq!(cm.lav(), lav, "step {step}");
        }
    }
}
