//! Unique transaction timestamps from the local clock, with the node, thread and co-routine
//! ids in the low bits (RCC §4.3), so no global clock service is needed.

/// A transaction timestamp. Never 0, so it can mark a lock word as held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub u64);

/// Low bits that carry the issuing co-routine's cluster-wide id.
pub const TS_ID_BITS: u32 = 20;
/// Co-routines a cluster may have: the id must fit in the low bits.
pub const MAX_COROUTINES: u64 = 1 << TS_ID_BITS;

impl Timestamp {
    /// The co-routine that issued it.
    pub fn issuer(self) -> u64 {
        self.0 & (MAX_COROUTINES - 1)
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
    /// `id` is the co-routine's cluster-wide index, below [`MAX_COROUTINES`].
    pub fn new(id: u64) -> Self {
        assert!(
            id < MAX_COROUTINES,
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
