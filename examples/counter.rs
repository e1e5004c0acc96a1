//! A counter service on atoll: many threads increment a few hot counters at once, every
//! increment is counted exactly once, and conflicts are retried by the engine and counted.
//!
//! `cargo run --release --example counter [PROTOCOL]` (default nowait).

use atoll::{Db, Options, Protocol, Schema, Table, TxError};
use std::sync::Arc;

const COUNTERS: u64 = 4;
const THREADS: u64 = 8;
const INCREMENTS_PER_THREAD: u64 = 2_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protocol: Protocol = std::env::args()
        .nth(1)
        .map_or(Ok(Protocol::NoWait), |name| name.parse())?;
    let mut schema = Schema::new();
    let counters = schema.table(Table::new("counters", 1));
    schema.load(move |l| {
        for c in 0..COUNTERS {
            l.put(counters, c, &[0]);
        }
    });
    // Many conflicts on few records: a generous retry budget, which the stats report.
    let db = Arc::new(Db::open(
        Options::default()
            .protocol(protocol)
            .coroutines(16)
            .attempts_max(1_000),
        schema,
    )?);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || -> Result<(), TxError<()>> {
                for i in 0..INCREMENTS_PER_THREAD {
                    let c = (t + i) % COUNTERS;
                    db.transact(move |tx| {
                        Box::pin(async move {
                            let v = tx.get_for_update(counters, c).await?[0];
                            tx.put(counters, c, &[v + 1])?;
                            Ok(())
                        })
                    })?;
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a client thread panicked")?;
    }
    let values: Vec<u64> = db.transact(move |tx| {
        Box::pin(async move {
            let mut v = Vec::new();
            for c in 0..COUNTERS {
                v.push(tx.get(counters, c).await?[0]);
            }
            Ok::<_, TxError<()>>(v)
        })
    })?;
    let stats = db.stats();
    let report = Arc::into_inner(db).expect("clients ended").close()?;
    let total: u64 = values.iter().sum();
    let expected = THREADS * INCREMENTS_PER_THREAD;
    println!(
        "counter under {}: counters {values:?}, {total} increments counted of {expected} made",
        protocol.name()
    );
    println!(
        "{} transactions committed, {} attempts: {} retried after a conflict; aborts by reason {:?}",
        stats.committed, stats.attempts, stats.retried, report.summary.aborts_by_reason
    );
    if total != expected || !report.passed {
        eprintln!(
            "counter: FAILED{}",
            if report.passed {
                ""
            } else {
                " (an engine check failed)"
            }
        );
        std::process::exit(1);
    }
    Ok(())
}
