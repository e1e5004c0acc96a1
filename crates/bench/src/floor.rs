//! The memory floor of a transaction shape: what a loop that only touches the records a
//! transaction touches achieves, with no engine in between (issue #9's yardstick: "a loop
//! copying 16 random 1000-byte records" for YCSB, "~12 cold memory operations" for
//! SmallBank). Engine throughput is quoted as a ratio of this, measured in the same run.

use crate::sizing::{human_bytes, memory_limit_bytes};
use serde::Serialize;
use std::time::{Duration, Instant};

/// The shape to measure.
#[derive(Clone, Debug)]
pub struct FloorConfig {
    /// Records in the table (per thread's view: all threads share one table).
    pub records: u64,
    pub record_bytes: u64,
    /// Records each transaction copies out of the table, at random.
    pub accesses_per_txn: u32,
    pub threads: u16,
    pub duration: Duration,
    pub seed: u64,
}

/// What the loop achieved.
#[derive(Clone, Debug, Serialize)]
pub struct FloorReport {
    pub records: u64,
    pub record_bytes: u64,
    pub accesses_per_txn: u32,
    pub threads: u16,
    pub txns: u64,
    pub seconds: f64,
    pub tx_per_s: f64,
    /// Per thread: wall-clock nanoseconds per transaction.
    pub ns_per_txn: f64,
}

/// Accepted bounds, as the YCSB knobs accept them.
const RECORD_BYTES_MIN: u64 = 8;
const RECORD_BYTES_MAX: u64 = 4096;
const ACCESSES_PER_TXN_MAX: u32 = 1024;
const THREADS_MAX: u16 = 256;

/// Transactions between two reads of the clock: a clock read must not weigh in the floor.
const TXNS_PER_CLOCK_READ: u64 = 64;

/// Checks the shape; the error names the bad value and what is accepted.
pub fn validate(cfg: &FloorConfig) -> Result<(), String> {
    if cfg.records == 0 {
        return Err("floor records=0 is not accepted: expected at least 1".into());
    }
    if !(RECORD_BYTES_MIN..=RECORD_BYTES_MAX).contains(&cfg.record_bytes)
        || cfg.record_bytes % 8 != 0
    {
        return Err(format!(
            "floor record_bytes={} is not accepted: expected a multiple of 8 in {RECORD_BYTES_MIN}..={RECORD_BYTES_MAX}",
            cfg.record_bytes
        ));
    }
    if !(1..=ACCESSES_PER_TXN_MAX).contains(&cfg.accesses_per_txn) {
        return Err(format!(
            "floor accesses={} is not accepted: expected 1..={ACCESSES_PER_TXN_MAX}",
            cfg.accesses_per_txn
        ));
    }
    if !(1..=THREADS_MAX).contains(&cfg.threads) {
        return Err(format!(
            "floor threads={} is not accepted: expected 1..={THREADS_MAX}",
            cfg.threads
        ));
    }
    let bytes = cfg.records.checked_mul(cfg.record_bytes);
    let (limit, why) = memory_limit_bytes();
    match bytes {
        Some(b) if b <= limit => Ok(()),
        _ => Err(format!(
            "floor records={} x record_bytes={} needs more than the {} allowed ({why})",
            cfg.records,
            cfg.record_bytes,
            human_bytes(limit)
        )),
    }
}

/// Fills a table (every page written, so no read lands on the shared zero page), then runs
/// `threads` loops for `duration`, each transaction copying `accesses_per_txn` random records
/// into a buffer.
pub fn run(cfg: &FloorConfig) -> Result<FloorReport, String> {
    validate(cfg)?;
    let words = (cfg.record_bytes / 8) as usize;
    let table: Vec<u64> = (0..cfg.records as usize * words)
        .map(|i| i as u64)
        .collect();
    let start = Instant::now();
    let counts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let table = &table;
                let seed = cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                s.spawn(move || copy_loop(table, words, cfg, seed, start))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a floor thread panicked"))
            .collect()
    });
    let seconds = start.elapsed().as_secs_f64();
    let txns: u64 = counts.iter().sum();
    let tx_per_s = txns as f64 / seconds;
    Ok(FloorReport {
        records: cfg.records,
        record_bytes: cfg.record_bytes,
        accesses_per_txn: cfg.accesses_per_txn,
        threads: cfg.threads,
        txns,
        seconds,
        tx_per_s,
        ns_per_txn: cfg.threads as f64 * 1e9 / tx_per_s.max(f64::MIN_POSITIVE),
    })
}

fn copy_loop(table: &[u64], words: usize, cfg: &FloorConfig, seed: u64, start: Instant) -> u64 {
    let mut rng = atoll_fabric::rng::Rng::new(seed);
    let mut buf = vec![0u64; words * cfg.accesses_per_txn as usize];
    let mut txns = 0u64;
    loop {
        for _ in 0..TXNS_PER_CLOCK_READ {
            for a in 0..cfg.accesses_per_txn as usize {
                let r = rng.below(cfg.records) as usize;
                buf[a * words..(a + 1) * words].copy_from_slice(&table[r * words..(r + 1) * words]);
            }
            std::hint::black_box(&mut buf);
            txns += 1;
        }
        if start.elapsed() >= cfg.duration {
            return txns;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> FloorConfig {
        FloorConfig {
            records: 1000,
            record_bytes: 104,
            accesses_per_txn: 16,
            threads: 2,
            duration: Duration::from_millis(20),
            seed: 1,
        }
    }

    #[test]
    fn floor_counts_transactions_of_every_thread() {
        let r = run(&shape()).unwrap();
        assert!(r.txns >= 2 * TXNS_PER_CLOCK_READ, "{r:?}");
        assert!(r.tx_per_s > 0.0 && r.ns_per_txn > 0.0, "{r:?}");
    }

    #[test]
    fn floor_refuses_a_shape_it_cannot_run_naming_the_value() {
        for (bad, needle) in [
            (
                FloorConfig {
                    records: 0,
                    ..shape()
                },
                "records=0",
            ),
            (
                FloorConfig {
                    record_bytes: 100,
                    ..shape()
                },
                "record_bytes=100",
            ),
            (
                FloorConfig {
                    accesses_per_txn: 0,
                    ..shape()
                },
                "accesses=0",
            ),
            (
                FloorConfig {
                    threads: 0,
                    ..shape()
                },
                "threads=0",
            ),
            (
                FloorConfig {
                    records: u64::MAX,
                    ..shape()
                },
                "needs more than",
            ),
        ] {
            let e = validate(&bad).unwrap_err();
            assert!(e.contains(needle), "{e}");
        }
    }
}
