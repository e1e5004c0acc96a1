//! Tell's commit manager (Tell §4.2): hands out tids with their snapshot descriptor and
//! `lav`, and learns each transaction's end. Its state: the base `b` (every tid at or below
//! it completed), a bitset of the completed tids above it, and the active transactions with
//! the base each started at. A completion sets the tid's bit and moves the base over the
//! bits now contiguous with it.
//!
//! Several managers ([`CommitManager::merge`]): each hands out tids from blocks it takes
//! from a counter in the store, and every sync interval each publishes its
//! [`Summary`] and merges the others' (the union of the completed sets, the least `lav`).
//! A tid of another manager's block that nobody has handed out yet holds every base below
//! it (the paper's "higher abort rate" of contiguous ranges).
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
    /// Its block of tids is used up: it takes the next from the store's counter first.
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
    /// Commits this manager had recorded when it took the snapshot: the snapshot sees
    /// exactly the commits numbered up to it ([`CommitManager::set_committed`]), which is
    /// how a history names it (a scalar snapshot a checker orders commits by).
    pub commits: u64,
}

/// What a commit manager tells the others at a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Its base, its highest known tid and the completed tids between.
    pub completed: Descriptor,
    /// The lowest base among its active transactions (its base if none).
    pub lav: u64,
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
    /// Its tids still to hand out: `next..end`.
    next: u64,
    end: u64,
    /// Active transactions by tid.
    active: BTreeMap<u64, Active>,
    /// The others' least `lav` at the last merge.
    peers_lav: Option<u64>,
    inflight_max: u64,
    /// Commits recorded so far: the number the next one gets, less one.
    commits: u64,
    /// Processing nodes declared crashed: their starts are refused.
    fenced: std::collections::BTreeSet<Pn>,
}

impl CommitManager {
    /// A lone commit manager: every tid from 1 on is its own.
    pub fn single(inflight_max: u64) -> Self {
        let mut cm = Self::without_tids(inflight_max);
        cm.add_block(1, u64::MAX - 1);
        cm
    }

    /// One of several: it hands out tids only from the blocks [`CommitManager::add_block`]
    /// gives it.
    pub fn without_tids(inflight_max: u64) -> Self {
        assert!(
            inflight_max > 0,
            "tell: a commit manager with no tid in flight"
        );
        CommitManager {
            base: 0,
            origin: 1,
            bits: VecDeque::new(),
            last: 0,
            next: 1,
            end: 1,
            active: BTreeMap::new(),
            peers_lav: None,
            inflight_max,
            commits: 0,
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
    /// counter), after those it has.
    pub fn add_block(&mut self, first: u64, len: u64) {
        assert!(
            first >= self.end,
            "tell: block {first} behind tids up to {}",
            self.end
        );
        self.next = first;
        self.end = first.saturating_add(len);
    }

    /// Tids of its block not yet handed out.
    pub fn tids_left(&self) -> u64 {
        self.end - self.next
    }

    /// A new transaction's tid and snapshot. A read-only one completes at once (no base
    /// waits for it) but stays active until it ends, so that `lav` keeps its versions.
    pub fn start(&mut self, pn: Pn, read_only: bool) -> Result<Started, CmError> {
        if self.fenced.contains(&pn) {
            return Err(CmError::Fenced(pn));
        }
        if self.next >= self.end {
            return Err(CmError::NoTids);
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
            commits: self.commits,
        })
    }

    /// `tid` committed: its versions are in the store and become visible to every
    /// snapshot handed out from now on. Returns its commit's number (1, 2, ...): every
    /// snapshot handed out after it has [`Started::commits`] at least that.
    pub fn set_committed(&mut self, tid: Tid) -> Result<u64, CmError> {
        self.end_txn(tid)?;
        self.commits += 1;
        Ok(self.commits)
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
        self.peers_lav.map_or(here, |p| p.min(here))
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
        }
    }

    /// Takes in the summaries of every other manager (their completions, their `lav`).
    pub fn merge(&mut self, others: &[Summary]) {
        self.peers_lav = others.iter().map(|s| s.lav).min();
        for s in others {
            let d = &s.completed;
            for tid in self.base + 1..=d.last {
                if d.sees(Tid(tid)) {
                    self.complete(tid);
                }
            }
            self.last = self.last.max(d.last);
        }
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
        let mut a = CommitManager::without_tids(INFLIGHT_MAX_DEFAULT);
        let mut b = CommitManager::without_tids(INFLIGHT_MAX_DEFAULT);
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
        a.merge(std::slice::from_ref(&sb));
        b.merge(std::slice::from_ref(&sa));
        assert_eq!((a.base(), b.base()), (5, 5));
        let s = b.start(Pn(0), false).unwrap();
        assert!((1..=5).all(|t| s.snapshot.sees(Tid(t))));
        // b's open transaction holds a's lav back after the next sync.
        a.merge(&[b.summary()]);
        assert_eq!(a.lav(), 5);
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
