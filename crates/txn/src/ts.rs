//! Transaction timestamps: the [`Timestamp`] type, the [`TsSource`] a coordinator takes
//! them from, and today's source, [`TsGen`]: unique timestamps from the local clock, with
//! the co-routine's id in the low bits (RCC §4.3), so no global clock service is needed.

/// A transaction timestamp. Never 0, so it can mark a lock word as held. Ordered as the
/// serial order of the protocols that order by timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

/// The timestamps of one attempt: the one it reads at (and locks with), and a commit
/// timestamp where its source gives one at begin (a snapshot-isolation source will; the
/// local clock does not: protocols that need one compute it, as SUNDIAL does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnTimestamps {
    pub read: Timestamp,
    pub commit: Option<Timestamp>,
}

/// Where a coordinator takes its attempts' timestamps from (the local clock today; a global
/// counter, a timestamp vector or a commit manager for the snapshot-isolation family).
pub trait TsSource: Send {
    /// The timestamps of a new attempt, at local clock reading `now_ns`.
    fn begin(&mut self, now_ns: u64) -> TxnTimestamps;

    /// A timestamp seen in a record: a clock-based source moves past it (RCC §4.4's clock
    /// adjustment).
    fn observe(&mut self, seen: Timestamp);
}

/// Low bits that carry the issuing co-routine's cluster-wide id.
pub const TS_ID_BITS: u32 = 20;
/// Co-routines a cluster may have: the id must fit in the low bits.
pub const COROUTINES_MAX: u64 = 1 << TS_ID_BITS;

impl Timestamp {
    /// The timestamp a memory or message word holds; `None` for 0 (no timestamp: a free
    /// lock, a record never read under a lease).
    pub const fn from_word(w: u64) -> Option<Timestamp> {
        if w == 0 {
            None
        } else {
            Some(Timestamp(w))
        }
    }

    /// The word that stores it (in a lock word, a header, a message).
    pub const fn word(self) -> u64 {
        self.0
    }

    /// Whether lock word `lock` is held by a transaction other than this one.
    pub const fn held_by_other(self, lock: u64) -> bool {
        lock != 0 && lock != self.0
    }

    /// The co-routine that issued it.
    pub fn issuer(self) -> u64 {
        self.0 & (COROUTINES_MAX - 1)
    }

    /// The clock part, in the issuer's nanoseconds.
    pub fn clock_ns(self) -> u64 {
        self.0 >> TS_ID_BITS
    }
}

/// Issues strictly increasing timestamps for one co-routine.
#[derive(Clone, Debug)]
pub struct TsGen {
    id: u64,
    last_clock: u64,
}

impl TsGen {
    /// `id` is the co-routine's cluster-wide index, below [`COROUTINES_MAX`].
    pub fn new(id: u64) -> Self {
        assert!(
            id < COROUTINES_MAX,
            "co-routine id {id} does not fit in {TS_ID_BITS} timestamp bits"
        );
        TsGen { id, last_clock: 0 }
    }

    /// A timestamp from clock reading `now_ns`, later than any this generator issued.
    pub fn next(&mut self, now_ns: u64) -> Timestamp {
        // Clock 0 is reserved so that no timestamp is 0.
        let clock = now_ns.max(self.last_clock + 1).max(1);
        assert!(
            clock < 1 << (64 - TS_ID_BITS),
            "clock {now_ns} ns overflows the timestamp"
        );
        self.last_clock = clock;
        Timestamp((clock << TS_ID_BITS) | self.id)
    }

    /// Moves this generator's clock past a timestamp seen in a tuple (RCC §4.4's local
    /// clock adjustment), so clocks of different nodes cannot drift far apart.
    pub fn observe(&mut self, seen: Timestamp) {
        self.last_clock = self.last_clock.max(seen.clock_ns());
    }
}

impl TsSource for TsGen {
    fn begin(&mut self, now_ns: u64) -> TxnTimestamps {
        TxnTimestamps {
            read: self.next(now_ns),
            commit: None,
        }
    }

    fn observe(&mut self, seen: Timestamp) {
        TsGen::observe(self, seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_clock_source_issues_increasing_unique_timestamps_that_move_past_seen_ones() {
        let mut g = TsGen::new(5);
        let src: &mut dyn TsSource = &mut g;
        let a = src.begin(100).read;
        let b = src.begin(100).read;
        assert!(a < b && a.issuer() == 5 && b.issuer() == 5);
        let seen = Timestamp::from_word(1_000 << TS_ID_BITS | 9).unwrap();
        src.observe(seen);
        let c = src.begin(100);
        assert!(c.read > seen && c.commit.is_none());
        assert_eq!(Timestamp::from_word(0), None);
        assert!(c.read.held_by_other(seen.word()) && !c.read.held_by_other(c.read.word()));
        assert!(!c.read.held_by_other(0));
    }
}
