//! Registered memory: word-addressed regions of `AtomicU64`, so concurrent one-sided access
//! (the NIC's DMA in a real cluster) is defined behaviour.
//!
//! A multi-word READ or WRITE is *not* atomic as a whole, exactly as with RDMA: words are
//! read and written in ascending address order with acquire/release ordering, which is what
//! the protocols' version checks rely on (a reader reads the header before the payload; a
//! writer writes the payload before the version and the unlock).

use crate::ids::{NodeId, RegionId};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Words a multi-word read loads per loop turn.
const LOADS_PER_TURN: usize = 4;

/// Bytes of a cache line on the CPUs this runs on (x86-64), the unit [`Region::prefetch`]
/// asks for.
const CACHE_LINE_BYTES: usize = 64;

/// One registered memory region: words this process allocated, or words a backend's
/// allocator handed over (UCX's `ucp_mem_map` with `ALLOCATE`, so that peers on this
/// machine can map them), kept alive by the region.
pub struct Region {
    base: NonNull<AtomicU64>,
    len_words: usize,
    _storage: Storage,
}

/// What holds a region's words: held only to keep them alive, never read.
#[allow(dead_code)]
enum Storage {
    Heap(Box<[AtomicU64]>),
    /// An anonymous private mapping this region made ([`Region::new`] of a large region):
    /// unmapped when the region drops.
    Mapped(Mapping),
    /// An allocation outside this crate: its owner, dropped (and so the words freed) after
    /// the region.
    Foreign(Arc<dyn Send + Sync>),
    /// Words someone else keeps alive for longer than the region (another process's words
    /// mapped into this one).
    Borrowed,
}

// SAFETY: the words are atomics (any thread may access them through `&Region`), and the
// storage that keeps them alive is Send + Sync itself.
unsafe impl Send for Region {}
// SAFETY: as for Send; `&Region` only hands out `&AtomicU64`.
unsafe impl Sync for Region {}

/// Regions of at least this many bytes are mapped rather than taken from the heap: the
/// kernel then backs a page only when it is first written, so a table reserved for the
/// records it may grow to costs the memory of the records it holds (its store counts
/// those against the run's budget), and a 1 TiB reservation is address space, not memory.
pub const MAPPED_REGION_BYTES_MIN: usize = 1 << 20;

/// An anonymous private mapping of zero-filled pages, reserved without swap accounting
/// (`MAP_NORESERVE`): pages become memory when written.
struct Mapping {
    base: NonNull<AtomicU64>,
    len_bytes: usize,
}

impl Mapping {
    fn new(len_bytes: usize) -> Option<Mapping> {
        // SAFETY: a fresh anonymous mapping with no address hint; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len_bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        // Huge pages where the kernel has them (transparent huge pages in `madvise` mode):
        // tables are read at random, and a 4 KiB page per access cost the default SmallBank
        // run 15-20% in TLB misses against the heap's huge pages. Still backed on first
        // touch, 2 MiB at a time; a kernel without them ignores the advice.
        // SAFETY: advice on the mapping just made; its result changes no memory contents.
        unsafe { libc::madvise(p, len_bytes, libc::MADV_HUGEPAGE) };
        // Page-aligned, so 8-byte aligned; mmap never returns null on success here.
        Some(Mapping {
            base: NonNull::new(p as *mut AtomicU64)?,
            len_bytes,
        })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly the mapping `new` made, unmapped once.
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len_bytes) };
    }
}

impl Region {
    /// `len_words` zeroed words. A large region is an anonymous mapping whose pages the
    /// kernel backs when first written ([`MAPPED_REGION_BYTES_MIN`]); panics if the address
    /// space cannot be reserved (the run's sizing bounds every reservation first).
    pub fn new(len_words: usize) -> Self {
        let len_bytes = len_words * std::mem::size_of::<AtomicU64>();
        if len_bytes >= MAPPED_REGION_BYTES_MIN {
            let m = Mapping::new(len_bytes).unwrap_or_else(|| {
                panic!(
                    "could not reserve {len_bytes} bytes of address space for a region: {}",
                    std::io::Error::last_os_error()
                )
            });
            return Region {
                base: m.base,
                len_words,
                _storage: Storage::Mapped(m),
            };
        }
        let words: Box<[AtomicU64]> = (0..len_words).map(|_| AtomicU64::new(0)).collect();
        Region {
            // A boxed slice's pointer is never null (dangling but aligned when empty).
            base: NonNull::new(words.as_ptr() as *mut AtomicU64).expect("a boxed slice"),
            len_words,
            _storage: Storage::Heap(words),
        }
    }

    /// A region over `len_words` words at `base` that `owner` keeps allocated, zeroed here.
    ///
    /// # Safety
    /// `base` is 8-byte aligned and the `len_words` words after it are readable and
    /// writable for as long as `owner` lives, and nothing else in this process holds a
    /// Rust reference to them (other processes may access them, atomically).
    pub unsafe fn foreign(
        base: NonNull<AtomicU64>,
        len_words: usize,
        owner: Arc<dyn Send + Sync>,
    ) -> Self {
        // SAFETY: the caller vouches for the range; zero bytes are zero atomics.
        unsafe { std::ptr::write_bytes(base.as_ptr(), 0, len_words) };
        Region {
            base,
            len_words,
            _storage: Storage::Foreign(owner),
        }
    }

    /// A view of `len_words` words at `base` that the caller keeps mapped (another
    /// process's region, mapped into this one): accessed as any region is, never zeroed
    /// or freed by it.
    ///
    /// # Safety
    /// `base` is 8-byte aligned and the `len_words` words after it stay readable and
    /// writable for as long as the region lives; every access to them, from any process,
    /// is atomic.
    pub unsafe fn borrowed(base: NonNull<AtomicU64>, len_words: usize) -> Self {
        Region {
            base,
            len_words,
            _storage: Storage::Borrowed,
        }
    }

    /// The same words as region `id` of `owner`, kept alive by `owner`: a second name for
    /// part of a node's registered memory (a backup's replica of another partition, whose
    /// store addresses its tables from region 0 while the fabric serves them further on).
    pub fn view_of(owner: &Arc<NodeMemory>, id: RegionId) -> Self {
        let r = owner.region(id);
        Region {
            base: r.base,
            len_words: r.len_words,
            _storage: Storage::Foreign(owner.clone()),
        }
    }

    pub fn len_words(&self) -> usize {
        self.len_words
    }

    /// The region's words, for a backend that registers them with its NIC (UCX's
    /// `ucp_mem_map`): the NIC then reads and writes the same atomics the CPU does.
    #[inline]
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: base and len_words describe the words the storage keeps alive as long as
        // self (see `new` and `foreign`).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len_words) }
    }

    #[inline]
    fn word(&self, offset: usize) -> &AtomicU64 {
        match self.words().get(offset) {
            Some(w) => w,
            None => panic!(
                "memory access out of bounds: word {offset} of a {}-word region",
                self.len_words
            ),
        }
    }

    /// Asks the CPU to start loading the cache lines holding the `len` words at `offset`: a
    /// hint with no effect on what any access returns or on its ordering, so a caller that
    /// is about to touch several cold records of its own node pays their misses together
    /// rather than one after another (issue #9: a local YCSB transaction spent most of its
    /// time on 32 misses in sequence, an index group and a record per key).
    #[inline]
    pub fn prefetch(&self, offset: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            // Addresses only, no bounds check: a prefetch never faults, so even a span past
            // the region's end would be harmless, and `wrapping_add` keeps the arithmetic
            // defined for any offset.
            let start = (self.base.as_ptr() as *const u8).wrapping_add(offset * 8) as usize;
            let end = start.wrapping_add(len * 8);
            let mut line = start & !(CACHE_LINE_BYTES - 1);
            while line < end {
                // SAFETY: PREFETCHT0 has no architectural effect and never faults, whatever
                // the address; SSE, which it needs, is part of x86-64.
                unsafe {
                    core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(
                        line as *const i8,
                    )
                };
                line += CACHE_LINE_BYTES;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (offset, len);
    }

    /// The `len` words at `offset`; `what` ("read", "write") names the access that overran.
    #[inline]
    pub fn span(&self, what: &str, offset: usize, len: usize) -> &[AtomicU64] {
        match self.words().get(offset..offset + len) {
            Some(ws) => ws,
            None => panic!(
                "{what} of {len} words at {offset} overruns a {}-word region",
                self.len_words
            ),
        }
    }

    /// The words of `bytes` little-endian words long; `what` names the access.
    #[inline]
    fn whole_words(what: &str, bytes: usize) -> usize {
        assert!(bytes % 8 == 0, "a {what} of {bytes} bytes, not whole words");
        bytes / 8
    }

    #[inline]
    pub fn load(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::Acquire)
    }

    #[inline]
    pub fn store(&self, offset: usize, value: u64) {
        self.word(offset).store(value, Ordering::Release)
    }

    /// Compare-and-swap; returns the value found (equal to `expect` on success), as RDMA CAS.
    #[inline]
    pub fn cas(&self, offset: usize, expect: u64, new: u64) -> u64 {
        match self
            .word(offset)
            .compare_exchange(expect, new, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(v) | Err(v) => v,
        }
    }

    /// Fetch-and-add; returns the previous value, as RDMA FETCH_ADD.
    #[inline]
    pub fn fetch_add(&self, offset: usize, add: u64) -> u64 {
        self.word(offset).fetch_add(add, Ordering::AcqRel)
    }

    /// Reads `out.len()` words in ascending order.
    #[inline]
    pub fn read_into(&self, offset: usize, out: &mut [u64]) {
        // SAFETY: `MaybeUninit<u64>` has `u64`'s layout, and `read_into_uninit` only
        // stores initialised words, so `out` stays initialised.
        let out = unsafe { &mut *(out as *mut [u64] as *mut [MaybeUninit<u64>]) };
        self.read_into_uninit(offset, out);
    }

    /// Reads `out.len()` words in ascending order into storage that need not be
    /// initialised (a read set's buffer, filled without zeroing it first), four loads a turn:
    /// a 1000-byte record is 125 words, and a loop test per word was most of its copy.
    #[inline]
    pub fn read_into_uninit(&self, offset: usize, out: &mut [MaybeUninit<u64>]) {
        let src = self.span("read", offset, out.len());
        let mut outs = out.chunks_exact_mut(LOADS_PER_TURN);
        let mut srcs = src.chunks_exact(LOADS_PER_TURN);
        for (o, s) in (&mut outs).zip(&mut srcs) {
            for (o, s) in o.iter_mut().zip(s) {
                o.write(s.load(Ordering::Acquire));
            }
        }
        for (o, s) in outs.into_remainder().iter_mut().zip(srcs.remainder()) {
            o.write(s.load(Ordering::Acquire));
        }
    }

    /// Reads `out.len() / 8` words in ascending order into `out` as little-endian bytes: a
    /// record copied once, from the region straight into the message that carries it.
    #[inline]
    pub fn read_into_le_bytes(&self, offset: usize, out: &mut [u8]) {
        let words = Self::whole_words("read", out.len());
        for (o, v) in out.chunks_exact_mut(8).zip(self.load_range(offset, words)) {
            o.copy_from_slice(&v.to_le_bytes());
        }
    }

    /// The `len` words at `offset`, loaded in ascending order as they are iterated.
    #[inline]
    pub fn load_range(&self, offset: usize, len: usize) -> impl ExactSizeIterator<Item = u64> + '_ {
        self.span("read", offset, len)
            .iter()
            .map(|w| w.load(Ordering::Acquire))
    }

    /// Writes the little-endian words of `bytes` in ascending order (a payload installed
    /// straight from the message that carried it).
    #[inline]
    pub fn write_from_le_bytes(&self, offset: usize, bytes: &[u8]) {
        let words = Self::whole_words("write", bytes.len());
        for (w, b) in self
            .span("write", offset, words)
            .iter()
            .zip(bytes.chunks_exact(8))
        {
            w.store(
                u64::from_le_bytes(b.try_into().expect("8 bytes")),
                Ordering::Release,
            );
        }
    }

    /// Writes `data` in ascending order.
    #[inline]
    pub fn write_from(&self, offset: usize, data: &[u64]) {
        for (w, d) in self.span("write", offset, data.len()).iter().zip(data) {
            w.store(*d, Ordering::Release);
        }
    }
}

/// What a peer needs to address a registered region (an RDMA rkey): returned by
/// registration, exchanged at start-up through the [`NodeDirectory`]. Backends that reach
/// peers' memory in-process ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RegionKey(pub u64);

impl RegionKey {
    /// The key this process's registration hands out: node and region, as a NIC that
    /// numbers its registrations would (a real NIC chooses its own).
    fn local(node: NodeId, region: RegionId) -> Self {
        RegionKey((node.0 as u64) << 16 | region.0 as u64)
    }
}

/// The registered regions of one node, fixed after start-up.
pub struct NodeMemory {
    pub node: NodeId,
    regions: Vec<Region>,
    keys: Vec<RegionKey>,
}

impl NodeMemory {
    /// Registers regions of the given sizes (in words), numbered from 0; their keys are in
    /// [`NodeMemory::keys`].
    pub fn new(node: NodeId, region_words: &[usize]) -> Self {
        Self::with_regions(node, region_words.iter().map(|&n| Region::new(n)).collect())
    }

    /// A node's memory over regions made elsewhere (a backend's allocator), numbered from 0.
    pub fn with_regions(node: NodeId, regions: Vec<Region>) -> Self {
        NodeMemory {
            node,
            keys: (0..regions.len())
                .map(|r| RegionKey::local(node, RegionId(r as u16)))
                .collect(),
            regions,
        }
    }

    /// The keys of this node's regions, by region id: what its peers need to address them.
    pub fn keys(&self) -> &[RegionKey] {
        &self.keys
    }

    #[inline]
    pub fn region(&self, id: RegionId) -> &Region {
        match self.regions.get(id.0 as usize) {
            Some(r) => r,
            None => panic!("node {} has no region {}", self.node.0, id.0),
        }
    }

    pub fn region_count(&self) -> usize {
        self.regions.len()
    }
}

/// Every node's memory, as the in-process and simulated fabrics hold it. A process-per-node
/// backend holds only its own node's [`NodeMemory`].
pub type ClusterMemory = Arc<[Arc<NodeMemory>]>;

/// The address book each node's backend is built with: every node's region keys, gathered
/// by the driver at start-up from what each node's registration returned (a process-per-node
/// backend would add each node's network address).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeDirectory {
    /// By node id: the keys of that node's regions, by region id.
    region_keys: Vec<Vec<RegionKey>>,
}

impl NodeDirectory {
    /// The directory of nodes `0..memories.len()`, from their registrations.
    pub fn of(memories: &[Arc<NodeMemory>]) -> Self {
        for (n, m) in memories.iter().enumerate() {
            assert_eq!(
                m.node.0 as usize, n,
                "node {n} given the memory of node {}",
                m.node.0
            );
        }
        NodeDirectory {
            region_keys: memories.iter().map(|m| m.keys().to_vec()).collect(),
        }
    }

    pub fn nodes(&self) -> u16 {
        self.region_keys.len() as u16
    }

    /// The key a peer uses to address `region` of `node`.
    pub fn key(&self, node: NodeId, region: RegionId) -> RegionKey {
        self.region_keys[node.0 as usize][region.0 as usize]
    }

    /// Whether `memory` is registered as the directory says (its node's keys).
    pub fn lists(&self, memory: &NodeMemory) -> bool {
        self.region_keys
            .get(memory.node.0 as usize)
            .map(|k| k.as_slice())
            == Some(memory.keys())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words that outlive every region over them, as a backend's allocation would.
    struct Words(Box<[AtomicU64]>);

    #[test]
    fn a_view_of_a_nodes_region_reads_and_writes_its_words_and_keeps_them_alive() {
        let owner = Arc::new(NodeMemory::new(NodeId(1), &[4, 16]));
        let view = Region::view_of(&owner, RegionId(1));
        assert_eq!(view.len_words(), 16);
        view.store(3, 7);
        assert_eq!(
            owner.region(RegionId(1)).load(3),
            7,
            "the view writes the owner's words"
        );
        owner.region(RegionId(1)).store(15, 9);
        assert_eq!(view.load(15), 9, "the view reads what the owner wrote");
        assert_eq!(
            owner.region(RegionId(0)).load(3),
            0,
            "other regions untouched"
        );
        let weak = Arc::downgrade(&owner);
        drop(owner);
        assert!(
            weak.upgrade().is_some(),
            "the view keeps the owner's memory"
        );
        assert_eq!(view.load(3), 7);
        drop(view);
        assert!(
            weak.upgrade().is_none(),
            "the memory goes with the last view"
        );
    }

    #[test]
    fn a_large_region_is_mapped_zeroed_and_written_only_where_touched() {
        let words = MAPPED_REGION_BYTES_MIN / 8 * 4;
        let r = Region::new(words);
        assert!(matches!(r._storage, Storage::Mapped(_)));
        assert_eq!(r.load(words - 1), 0, "a page never written reads zero");
        r.store(words - 1, 7);
        assert_eq!(r.cas(words - 1, 7, 8), 7);
        assert_eq!(r.load(words - 1), 8);
        let small = Region::new(16);
        assert!(matches!(small._storage, Storage::Heap(_)));
    }

    #[test]
    fn region_over_foreign_words_zeroes_them_keeps_them_alive_and_a_borrowed_view_shares_them() {
        let words = Arc::new(Words((0..8).map(|i| AtomicU64::new(100 + i)).collect()));
        let base = NonNull::new(words.0.as_ptr() as *mut AtomicU64).unwrap();
        // SAFETY: 8 aligned words, alive as long as `words`, which the region holds.
        let owned = unsafe { Region::foreign(base, 8, words.clone()) };
        assert_eq!(owned.len_words(), 8);
        assert!(
            (0..8).all(|i| owned.load(i) == 0),
            "foreign words start zeroed"
        );
        // SAFETY: `owned` keeps the words alive past the view, dropped first below.
        let view = unsafe { Region::borrowed(base, 8) };
        assert_eq!(view.cas(3, 0, 7), 0);
        assert_eq!(
            owned.load(3),
            7,
            "a CAS through the view lands in the words"
        );
        owned.store(5, 9);
        assert_eq!(view.load(5), 9, "and the view sees the owner's stores");
        drop(view);
        assert_eq!(Arc::strong_count(&words), 2, "the region holds its owner");
        drop(owned);
        assert_eq!(Arc::strong_count(&words), 1, "and lets it go when dropped");
    }
}
