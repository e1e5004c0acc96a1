//! The memory floor of a transaction shape: what a loop that only touches the records a
//! transaction touches achieves, with no engine in between (issue #9's yardstick: "a loop
//! copying 16 random 1000-byte records" for YCSB, "~12 cold memory operations" for
//! SmallBank). Engine throughput is quoted as a ratio of this, measured in the same run.
//!
//! With `index_probe` every access first finds its record through a hash index, as an
//! engine must: a dependent cache miss before the copy's, which the bare copy loop lacks.

use crate::sizing::{human_bytes, memory_limit_bytes};
use atoll_storage::layout::hash_key;
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
    /// Find each record through an open-addressing hash index first (its slot, then the
    /// record it names), instead of computing its position.
    pub index_probe: bool,
}

/// What the loop achieved.
#[derive(Clone, Debug, Serialize)]
pub struct FloorReport {
    pub records: u64,
    pub record_bytes: u64,
    pub accesses_per_txn: u32,
    pub threads: u16,
    pub index_probe: bool,
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

/// Words of an index slot: the key plus one (0: empty), then the record's position.
const INDEX_SLOT_WORDS: usize = 2;
/// Index slots per record at most: a power of two at least twice the records (load factor
/// at most 1/2, so a probe mostly reads one slot, as the engine's grouped index does).
const INDEX_SLOTS_PER_RECORD_MAX: u64 = 4;
const WORD_BYTES: u64 = 8;

/// Index slots for `records` (0 when the index does not fit a u64 count).
fn index_slots(records: u64) -> u64 {
    records
        .checked_mul(2)
        .and_then(u64::checked_next_power_of_two)
        .unwrap_or(0)
}

/// A floor shape that is refused: the bad value and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FloorError {
    #[error("floor records=0 is not accepted: expected at least 1")]
    NoRecords,
    #[error("floor record_bytes={0} is not accepted: expected a multiple of 8 in {RECORD_BYTES_MIN}..={RECORD_BYTES_MAX}")]
    RecordBytes(u64),
    #[error("floor accesses={0} is not accepted: expected 1..={ACCESSES_PER_TXN_MAX}")]
    Accesses(u32),
    #[error("floor threads={0} is not accepted: expected 1..={THREADS_MAX}")]
    Threads(u16),
    /// The table, its index and the threads' copy buffers exceed the memory limit (`why`
    /// says where the limit comes from).
    #[error(
        "floor records={records} x record_bytes={record_bytes}{} needs more than the {} allowed ({why})",
        if *.index_probe { " with its index" } else { "" },
        human_bytes(*.limit)
    )]
    TooBig {
        records: u64,
        record_bytes: u64,
        index_probe: bool,
        limit: u64,
        why: String,
    },
}

/// Checks the shape; the error names the bad value and what is accepted.
pub fn validate(cfg: &FloorConfig) -> Result<(), FloorError> {
    if cfg.records == 0 {
        return Err(FloorError::NoRecords);
    }
    if !(RECORD_BYTES_MIN..=RECORD_BYTES_MAX).contains(&cfg.record_bytes)
        || cfg.record_bytes % 8 != 0
    {
        return Err(FloorError::RecordBytes(cfg.record_bytes));
    }
    if !(1..=ACCESSES_PER_TXN_MAX).contains(&cfg.accesses_per_txn) {
        return Err(FloorError::Accesses(cfg.accesses_per_txn));
    }
    if !(1..=THREADS_MAX).contains(&cfg.threads) {
        return Err(FloorError::Threads(cfg.threads));
    }
    let index_bytes = if cfg.index_probe {
        match index_slots(cfg.records) {
            0 => None,
            n => {
                debug_assert!(n <= cfg.records * INDEX_SLOTS_PER_RECORD_MAX);
                n.checked_mul(INDEX_SLOT_WORDS as u64 * WORD_BYTES)
            }
        }
    } else {
        Some(0)
    };
    // Each thread also copies a transaction's records into a buffer of its own.
    let buffers_bytes = cfg.threads as u64 * cfg.accesses_per_txn as u64 * cfg.record_bytes;
    let bytes = cfg
        .records
        .checked_mul(cfg.record_bytes)
        .and_then(|b| b.checked_add(index_bytes?))
        .and_then(|b| b.checked_add(buffers_bytes));
    let (limit, why) = memory_limit_bytes();
    match bytes {
        Some(b) if b <= limit => Ok(()),
        _ => Err(FloorError::TooBig {
            records: cfg.records,
            record_bytes: cfg.record_bytes,
            index_probe: cfg.index_probe,
            limit,
            why,
        }),
    }
}

/// Fills a table (every page written, so no read lands on the shared zero page), then runs
/// `threads` loops for `duration`, each transaction copying `accesses_per_txn` random records
/// into a buffer.
pub fn run(cfg: &FloorConfig) -> Result<FloorReport, FloorError> {
    validate(cfg)?;
    let words = (cfg.record_bytes / 8) as usize;
    let table: Vec<u64> = (0..cfg.records as usize * words)
        .map(|i| i as u64)
        .collect();
    let index = if cfg.index_probe {
        build_index(cfg.records)
    } else {
        Vec::new()
    };
    let start = Instant::now();
    let counts: Vec<u64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.threads)
            .map(|t| {
                let (table, index) = (&table, &index);
                let seed = cfg.seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                s.spawn(move || copy_loop(table, index, words, cfg, seed, start))
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
        index_probe: cfg.index_probe,
        txns,
        seconds,
        tx_per_s,
        ns_per_txn: cfg.threads as f64 * 1e9 / tx_per_s.max(f64::MIN_POSITIVE),
    })
}

/// An open-addressing index of keys `0..records`, each naming its record's position
/// (the key itself: the hash scatters the slots, not the records).
fn build_index(records: u64) -> Vec<u64> {
    let slots = index_slots(records) as usize;
    let mask = slots - 1;
    let mut index = vec![0u64; slots * INDEX_SLOT_WORDS];
    for key in 0..records {
        let mut s = hash_key(key) as usize & mask;
        while index[s * INDEX_SLOT_WORDS] != 0 {
            s = (s + 1) & mask;
        }
        index[s * INDEX_SLOT_WORDS] = key + 1;
        index[s * INDEX_SLOT_WORDS + 1] = key;
    }
    index
}

/// The record position `index` names for `key` (which it holds: the probe ends at it).
#[inline]
fn probe(index: &[u64], key: u64) -> usize {
    let mask = index.len() / INDEX_SLOT_WORDS - 1;
    let mut s = hash_key(key) as usize & mask;
    while index[s * INDEX_SLOT_WORDS] != key + 1 {
        s = (s + 1) & mask;
    }
    index[s * INDEX_SLOT_WORDS + 1] as usize
}

fn copy_loop(
    table: &[u64],
    index: &[u64],
    words: usize,
    cfg: &FloorConfig,
    seed: u64,
    start: Instant,
) -> u64 {
    let mut rng = atoll_fabric::rng::Rng::new(seed);
    let mut buf = vec![0u64; words * cfg.accesses_per_txn as usize];
    let mut txns = 0u64;
    loop {
        for _ in 0..TXNS_PER_CLOCK_READ {
            for a in 0..cfg.accesses_per_txn as usize {
                let key = rng.below(cfg.records);
                let r = if index.is_empty() {
                    key as usize
                } else {
                    probe(index, key)
                };
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
            index_probe: false,
        }
    }

    #[test]
    fn floor_index_names_every_record_and_the_probing_loop_runs() {
        let index = build_index(1000);
        assert_eq!(index.len(), 2048 * INDEX_SLOT_WORDS);
        for key in 0..1000 {
            assert_eq!(probe(&index, key), key as usize);
        }
        let r = run(&FloorConfig {
            index_probe: true,
            ..shape()
        })
        .unwrap();
        assert!(r.index_probe && r.txns >= 2 * TXNS_PER_CLOCK_READ, "{r:?}");
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
            (
                FloorConfig {
                    records: u64::MAX / 2,
                    record_bytes: 8,
                    index_probe: true,
                    ..shape()
                },
                "with its index needs more than",
            ),
        ] {
            let e = validate(&bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
