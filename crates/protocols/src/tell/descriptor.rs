//! Tell's snapshot descriptor (Tell §4.2): what a transaction sees, as a commit manager hands
//! it out at `start`. Every tid up to the base `b` completed (committed or aborted), and
//! a bitset says which tids above it did; a version is visible iff its writer's tid is in
//! that set. An aborted transaction removed its versions before it said so, so seeing its
//! tid as completed shows nothing of it.
//!
//! Encoded as words `[lav, b, last, bits...]`: bit k (least significant first) of the bits
//! says tid `b + 1 + k` completed, for the `last - b` tids above the base. Its size is the
//! paper's 24 bytes plus ⌈(last − b) / 8⌉.

use atoll_txn::msg::DecodeError;

/// A transaction id: handed out in increasing order by the commit managers, and the
/// version number of every version the transaction writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid(pub u64);

/// Words of a descriptor's encoding before its bits.
pub const DESCRIPTOR_FIXED_WORDS: usize = 3;

/// Bits of one word of the bitset.
const WORD_BITS: u64 = 64;

/// A snapshot: the tids whose versions a transaction sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// The lowest base among the transactions active when it was handed out: no version
    /// newer than the newest one at or below it is ever read again (garbage collection's
    /// bound).
    pub lav: u64,
    /// Every tid at or below it completed.
    pub base: u64,
    /// The highest tid the bitset covers: none above it had completed.
    pub last: u64,
    /// Bit k: tid `base + 1 + k` completed.
    bits: Vec<u64>,
}

impl Descriptor {
    /// The descriptor of base `base` whose completed tids above it are `completed` (each in
    /// `base + 1 ..= last`).
    pub fn new(lav: u64, base: u64, last: u64, completed: impl IntoIterator<Item = u64>) -> Self {
        assert!(
            lav <= base && base <= last,
            "tell: a descriptor of lav {lav}, base {base}, last {last}"
        );
        let mut bits = vec![0; words_for(last - base)];
        for tid in completed {
            assert!(
                tid > base && tid <= last,
                "tell: completed tid {tid} outside ({base}, {last}]"
            );
            let k = tid - base - 1;
            bits[(k / WORD_BITS) as usize] |= 1 << (k % WORD_BITS);
        }
        Descriptor {
            lav,
            base,
            last,
            bits,
        }
    }

    /// Whether a version written by `tid` is in the snapshot.
    pub fn sees(&self, tid: Tid) -> bool {
        let t = tid.0;
        if t <= self.base {
            return true;
        }
        if t > self.last {
            return false;
        }
        let k = t - self.base - 1;
        self.bits[(k / WORD_BITS) as usize] & (1 << (k % WORD_BITS)) != 0
    }

    /// Whether every tid this snapshot sees, `other` sees too (Tell's `V ⊆ B`).
    pub fn subset_of(&self, other: &Descriptor) -> bool {
        let below = other.base.min(self.base);
        (below + 1..=self.last).all(|t| !self.sees(Tid(t)) || other.sees(Tid(t)))
    }

    /// This snapshot with `tid` seen too (Tell's `V_max ∪ {tid}` of a write-through).
    pub fn with(&self, tid: Tid) -> Descriptor {
        if self.sees(tid) {
            return self.clone();
        }
        let last = self.last.max(tid.0);
        let seen = |t: u64| t == tid.0 || self.sees(Tid(t));
        // The base moves over the tids now contiguous with it.
        let base = (self.base + 1..=last)
            .take_while(|&t| seen(t))
            .last()
            .unwrap_or(self.base);
        let completed = (base + 1..=last).filter(|&t| seen(t));
        Descriptor::new(self.lav, base, last, completed)
    }

    /// This snapshot with `tid` not seen (what a commit manager that lost a completion
    /// would hand out; tests build broken ones with it).
    pub fn without(&self, tid: Tid) -> Descriptor {
        if tid.0 == 0 || !self.sees(tid) {
            return self.clone();
        }
        let base = self.base.min(tid.0 - 1);
        let completed = (base + 1..=self.last).filter(|&t| t != tid.0 && self.sees(Tid(t)));
        Descriptor::new(self.lav.min(base), base, self.last, completed)
    }

    /// Tids above the base that completed.
    pub fn completed_above_base(&self) -> u64 {
        self.bits.iter().map(|w| w.count_ones() as u64).sum()
    }

    /// Its size as Tell counts it: 24 bytes and a bit per tid above the base.
    pub fn size_bytes(&self) -> u64 {
        24 + (self.last - self.base).div_ceil(8)
    }

    /// As words: `[lav, base, last, bits...]`.
    pub fn to_words(&self) -> Vec<u64> {
        let mut w = Vec::with_capacity(DESCRIPTOR_FIXED_WORDS + self.bits.len());
        w.extend([self.lav, self.base, self.last]);
        w.extend_from_slice(&self.bits);
        w
    }

    /// From words: a malformed descriptor (short, inconsistent, bits beyond `last`) is a
    /// typed error.
    pub fn from_words(w: &[u64]) -> Result<Self, DecodeError> {
        let err = |what: String| Err(DecodeError(format!("tell descriptor: {what}")));
        let [lav, base, last, ref bits @ ..] = *w else {
            return err(format!(
                "{} words, fewer than its {DESCRIPTOR_FIXED_WORDS} fixed ones",
                w.len()
            ));
        };
        if !(lav <= base && base <= last) {
            return err(format!("lav {lav}, base {base}, last {last} out of order"));
        }
        let span = last - base;
        if bits.len() != words_for(span) {
            return err(format!(
                "{} words of bits for {span} tids above the base, expected {}",
                bits.len(),
                words_for(span)
            ));
        }
        let tail = span % WORD_BITS;
        if tail != 0 && bits.last().is_some_and(|&b| b >> tail != 0) {
            return err(format!("bits set beyond last tid {last}"));
        }
        Ok(Descriptor {
            lav,
            base,
            last,
            bits: bits.to_vec(),
        })
    }
}

/// Words of a bitset of `span` tids.
fn words_for(span: u64) -> usize {
    usize::try_from(span.div_ceil(WORD_BITS)).expect("a descriptor's span fits memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tell_a_descriptor_sees_the_base_and_below_and_exactly_the_completed_tids_above_it() {
        let d = Descriptor::new(3, 10, 20, [12, 13, 20]);
        for t in 0..=10 {
            assert!(d.sees(Tid(t)), "tid {t} at or below the base");
        }
        let seen: Vec<u64> = (11..=25).filter(|&t| d.sees(Tid(t))).collect();
        assert_eq!(seen, vec![12, 13, 20]);
        assert_eq!(d.completed_above_base(), 3);
        assert_eq!(Descriptor::from_words(&d.to_words()), Ok(d));
    }

    #[test]
    fn tell_a_descriptor_is_a_subset_of_another_iff_the_other_sees_every_tid_it_sees() {
        let a = Descriptor::new(0, 4, 9, [6, 9]);
        assert!(a.subset_of(&a));
        assert!(a.subset_of(&Descriptor::new(0, 6, 9, [9])));
        assert!(!a.subset_of(&Descriptor::new(0, 6, 9, [])), "misses 9");
        assert!(
            !a.subset_of(&Descriptor::new(0, 3, 9, [4, 6, 8])),
            "misses 9"
        );
        assert!(!Descriptor::new(0, 7, 7, []).subset_of(&a), "7 is not in a");
        let b = a.with(Tid(5));
        assert_eq!((b.base, b.last), (6, 9));
        assert!(a.subset_of(&b) && b.sees(Tid(5)) && !b.sees(Tid(7)));
        assert_eq!(a.with(Tid(12)).last, 12);
        assert_eq!(a.with(Tid(3)), a, "3 is seen already");
    }

    #[test]
    fn tell_a_descriptor_without_a_tid_sees_every_other_it_saw_and_not_that_one() {
        let d = Descriptor::new(3, 10, 20, [12, 13, 20]);
        for gone in [5, 10, 13, 20] {
            let w = d.without(Tid(gone));
            for t in 0..=22 {
                assert_eq!(
                    w.sees(Tid(t)),
                    t != gone && d.sees(Tid(t)),
                    "without {gone}: {t}"
                );
            }
            assert!(w.lav <= w.base);
        }
        assert_eq!(d.without(Tid(11)), d, "a tid it does not see");
    }

    #[test]
    fn tell_a_descriptor_of_100000_open_tids_takes_24_bytes_and_a_bit_each() {
        // The paper: "N <= 13 KB with 100,000 newly committed transactions".
        let d = Descriptor::new(0, 0, 100_000, (1..=100_000).step_by(2));
        assert_eq!(d.size_bytes(), 24 + 12_500);
        assert_eq!(d.completed_above_base(), 50_000);
        let words = d.to_words();
        assert_eq!(words.len(), DESCRIPTOR_FIXED_WORDS + 1_563);
        assert_eq!(Descriptor::from_words(&words), Ok(d));
    }

    #[test]
    fn tell_a_malformed_descriptor_is_a_typed_error_naming_what_is_wrong() {
        let cases: [(&[u64], &str); 4] = [
            (&[1, 2], "fewer than"),
            (&[5, 2, 9, 0], "out of order"),
            (&[0, 2, 200, 0], "words of bits"),
            (&[0, 2, 9, 1 << 7], "beyond last"),
        ];
        for (words, what) in cases {
            match Descriptor::from_words(words) {
                Err(DecodeError(m)) => assert!(m.contains(what), "{words:?}: {m}"),
                Ok(d) => panic!("{words:?} decoded as {d:?}"),
            }
        }
    }
}
