//! Criterion benchmarks of the per-node ordered index on what TPC-C asks of it, against the
//! same API over `std::collections::BTreeMap`: the comparison that kept our B+tree (issue
//! 35; the figures are in `src/ordered.rs`).
//!
//! Keys are TPC-C's composite shape, `group << 32 | order`: a group is a district's new
//! orders or a customer's orders, holding [`GROUP_KEYS`] consecutive order ids. Inserts add
//! the next order id of a random group (NewOrder), removes take a random group's smallest
//! (Delivery); each is measured in batches and the other one restores the size untimed, so
//! every measurement sees the same number of keys. Lookups and scans pick random groups, so
//! the large size pays the cache misses of a real table. Nodes are allocated by mimalloc,
//! the `atoll` binary's allocator, since a split or a merge pays for it.
//!
//! Times are the benchmark thread's CPU time, not wall time: on a shared two-core machine
//! a wall clock also counts the slices other processes take, which differ from one
//! measurement to the next. Run with `cargo bench -p atoll-storage --bench ordered`.

use atoll_storage::ordered::OrderedIndex;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{criterion_group, criterion_main, Criterion};
use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// CPU time the calling thread has run.
fn thread_cpu_now() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec; the clock exists on every Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Criterion measurement of the benchmark thread's CPU time.
struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu_now()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu_now() - start
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Durations in nanoseconds, printed as criterion prints wall times.
        WallTime.formatter()
    }
}

/// Keys a group holds at every moment of the run.
const GROUP_KEYS: u64 = 100;
/// Keys in the index, small (a few warehouses' new orders) and large (a node's orders).
const SIZES: [u64; 2] = [10_000, 1_000_000];
/// Inserts or removes timed between two untimed restoring passes: a thousandth of the large
/// index, so the timed half never moves far from the stated size.
const BATCH: u64 = 1024;
/// Random draws, cycled; a power of two so the cycle is a mask.
const DRAWS: usize = 1 << 16;
/// Keys an ascending short scan returns (StockLevel's last 20 orders).
const SHORT_SCAN_KEYS: u64 = 20;
/// Groups a long ascending scan covers: about a thousand keys, what the store reads for
/// Delivery's oldest new order today (it reads the whole range, whatever the limit).
const LONG_SCAN_GROUPS: u64 = 10;

fn key(group: u64, order: u64) -> u64 {
    (group << 32) | order
}

/// The operations the store makes of its ordered index.
trait Index {
    fn insert(&mut self, key: u64, value: u64) -> Option<u64>;
    fn remove(&mut self, key: u64) -> Option<u64>;
    fn get(&self, key: u64) -> Option<u64>;
    fn range(&self, lo: u64, hi: u64, limit: usize, out: &mut Vec<(u64, u64)>);
    fn range_rev(&self, lo: u64, hi: u64, limit: usize, out: &mut Vec<(u64, u64)>);
}

impl Index for OrderedIndex {
    fn insert(&mut self, key: u64, value: u64) -> Option<u64> {
        OrderedIndex::insert(self, key, value)
    }
    fn remove(&mut self, key: u64) -> Option<u64> {
        OrderedIndex::remove(self, key)
    }
    fn get(&self, key: u64) -> Option<u64> {
        OrderedIndex::get(self, key)
    }
    fn range(&self, lo: u64, hi: u64, limit: usize, out: &mut Vec<(u64, u64)>) {
        OrderedIndex::range(self, lo, hi, limit, out)
    }
    fn range_rev(&self, lo: u64, hi: u64, limit: usize, out: &mut Vec<(u64, u64)>) {
        OrderedIndex::range_rev(self, lo, hi, limit, out)
    }
}

/// `OrderedIndex`'s API as a thin layer over std's B-tree: what the index would be if it
/// were not faster.
struct MapIndex(BTreeMap<u64, u64>);

impl Index for MapIndex {
    fn insert(&mut self, key: u64, value: u64) -> Option<u64> {
        self.0.insert(key, value)
    }
    fn remove(&mut self, key: u64) -> Option<u64> {
        self.0.remove(&key)
    }
    fn get(&self, key: u64) -> Option<u64> {
        self.0.get(&key).copied()
    }
    fn range(&self, lo: u64, hi: u64, limit: usize, out: &mut Vec<(u64, u64)>) {
        // `BTreeMap::range` panics on inverted bounds, which the API answers with nothing.
        if lo <= hi {
            out.extend(self.0.range(lo..=hi).take(limit).map(|(&k, &v)| (k, v)));
        }
    }
    fn range_rev(&self, lo: u64, hi: u64, limit: usize, out: &mut Vec<(u64, u64)>) {
        if lo <= hi {
            let entries = self.0.range(lo..=hi).rev().take(limit);
            out.extend(entries.map(|(&k, &v)| (k, v)));
        }
    }
}

/// SplitMix64, for reproducible draws without a dependency.
fn split_mix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// An index of `groups * GROUP_KEYS` keys and where each group's window of order ids is.
struct Fixture<I> {
    index: I,
    /// Smallest order id present per group.
    bottom: Vec<u64>,
    /// Next order id to insert per group.
    top: Vec<u64>,
    /// Random (group, offset below `GROUP_KEYS`) pairs.
    draws: Vec<(usize, u64)>,
    cursor: usize,
}

impl<I: Index> Fixture<I> {
    fn new(mut index: I, keys: u64) -> Self {
        let groups = keys / GROUP_KEYS;
        // Loaded as TPC-C loads: group after group, orders ascending.
        for g in 0..groups {
            for o in 1..=GROUP_KEYS {
                index.insert(key(g, o), o);
            }
        }
        let mut state = 0x5EED_0000_0000_0035;
        let draws = (0..DRAWS)
            .map(|_| {
                let g = split_mix(&mut state) % groups;
                (g as usize, split_mix(&mut state) % GROUP_KEYS)
            })
            .collect();
        Self {
            index,
            bottom: vec![1; groups as usize],
            top: vec![GROUP_KEYS + 1; groups as usize],
            draws,
            cursor: 0,
        }
    }

    fn draw(&mut self) -> (usize, u64) {
        self.cursor = (self.cursor + 1) & (DRAWS - 1);
        self.draws[self.cursor]
    }

    /// Adds the next order of the given groups.
    fn add_newest(&mut self, n: u64, groups: &[usize]) {
        for &g in &groups[..n as usize] {
            let o = self.top[g];
            self.top[g] += 1;
            black_box(self.index.insert(key(g as u64, o), o));
        }
    }

    /// Removes the oldest order of the given groups.
    fn remove_oldest(&mut self, n: u64, groups: &[usize]) {
        for &g in &groups[..n as usize] {
            let o = self.bottom[g];
            self.bottom[g] += 1;
            black_box(self.index.remove(key(g as u64, o)));
        }
    }

    /// Times `iters` inserts (or removes) in batches, each followed by the untimed
    /// opposite on the same groups, which restores every group's key count.
    fn churn(&mut self, iters: u64, time_inserts: bool) -> Duration {
        let mut took = Duration::ZERO;
        let mut groups = vec![0; BATCH as usize];
        let mut left = iters;
        while left > 0 {
            let n = left.min(BATCH);
            for g in &mut groups[..n as usize] {
                *g = self.draw().0;
            }
            if time_inserts {
                let t0 = thread_cpu_now();
                self.add_newest(n, &groups);
                took += thread_cpu_now() - t0;
                self.remove_oldest(n, &groups);
            } else {
                let t0 = thread_cpu_now();
                self.remove_oldest(n, &groups);
                took += thread_cpu_now() - t0;
                self.add_newest(n, &groups);
            }
            left -= n;
        }
        took
    }
}

fn bench_size<A: Index, B: Index>(
    c: &mut Criterion<ThreadCpuTime>,
    keys: u64,
    a: (&str, A),
    b: (&str, B),
) {
    let (name_a, mut fa) = (a.0, Fixture::new(a.1, keys));
    let (name_b, mut fb) = (b.0, Fixture::new(b.1, keys));
    let groups = keys / GROUP_KEYS;
    let prefix = format!("ordered_{keys}");

    macro_rules! both {
        ($op:expr, |$f:ident, $bencher:ident| $body:expr) => {{
            let mut g = c.benchmark_group(format!("{prefix}/{}", $op));
            g.bench_function(name_a, |$bencher| {
                let $f = &mut fa;
                $body
            });
            g.bench_function(name_b, |$bencher| {
                let $f = &mut fb;
                $body
            });
            g.finish();
        }};
    }

    both!("insert_increasing", |f, bencher| {
        bencher.iter_custom(|iters| f.churn(iters, true))
    });
    both!("remove_smallest", |f, bencher| {
        bencher.iter_custom(|iters| f.churn(iters, false))
    });
    both!("get", |f, bencher| {
        bencher.iter(|| {
            let (g, off) = f.draw();
            black_box(f.index.get(key(g as u64, f.bottom[g] + off)))
        })
    });
    both!("newest_rev_limit_1", |f, bencher| {
        let mut out = Vec::with_capacity(1);
        bencher.iter(|| {
            let g = f.draw().0 as u64;
            out.clear();
            f.index
                .range_rev(key(g, 0), key(g, u32::MAX as u64), 1, &mut out);
            black_box(out.first().copied())
        })
    });
    both!("scan_asc_20", |f, bencher| {
        let mut out = Vec::with_capacity(SHORT_SCAN_KEYS as usize);
        bencher.iter(|| {
            let (g, off) = f.draw();
            let lo = f.bottom[g] + off % (GROUP_KEYS - SHORT_SCAN_KEYS + 1);
            out.clear();
            let (g, hi) = (g as u64, lo + SHORT_SCAN_KEYS - 1);
            f.index.range(key(g, lo), key(g, hi), usize::MAX, &mut out);
            black_box(out.len())
        })
    });
    both!("scan_asc_1000", |f, bencher| {
        let mut out = Vec::with_capacity((LONG_SCAN_GROUPS * GROUP_KEYS) as usize);
        bencher.iter(|| {
            let g = f.draw().0 as u64 % (groups - LONG_SCAN_GROUPS + 1);
            out.clear();
            let hi = key(g + LONG_SCAN_GROUPS - 1, u32::MAX as u64);
            f.index.range(key(g, 0), hi, usize::MAX, &mut out);
            black_box(out.len())
        })
    });
}

fn ordered(c: &mut Criterion<ThreadCpuTime>) {
    for keys in SIZES {
        bench_size(
            c,
            keys,
            ("ours", OrderedIndex::new()),
            ("btreemap", MapIndex(BTreeMap::new())),
        );
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .with_measurement(ThreadCpuTime)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = ordered
}
criterion_main!(benches);
