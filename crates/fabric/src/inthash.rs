//! A hasher for maps keyed by integers the engine or a benchmark hands out itself (op tokens,
//! record keys of committed effects): one multiply per integer, where SipHash costs tens of
//! instructions per lookup on paths run per verb or per transaction. Not for keys that come
//! from outside a run.

use std::hash::{BuildHasherDefault, Hasher};

/// A `HashMap` whose keys are hashed by [`IntHasher`].
pub type IntMap<K, V> = std::collections::HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// One multiply and rotate per integer written.
#[derive(Default)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(v as u64)
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    fn write_u64(&mut self, v: u64) {
        // Fibonacci hashing, rotated so that both the low bits (hashbrown's bucket index)
        // and the high bits (its control bytes) depend on the key's bits.
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .rotate_left(29);
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64)
    }
}
