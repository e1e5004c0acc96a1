//! A bank on atoll: threads move money between accounts for a while, a transfer that would
//! overdraw aborts itself, and an audit at the end finds every unit still there.
//!
//! `cargo run --release --example bank [PROTOCOL] [SECONDS]` (default occ, 2 s).

use atoll::{Db, Options, Protocol, Schema, Table, TxError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 1_000;
const OPENING_BALANCE: u64 = 100;
const CLIENT_THREADS: u64 = 4;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let protocol: Protocol = args
        .first()
        .map_or(Ok(Protocol::Occ), |name| name.parse())?;
    let seconds: f64 = match args.get(1) {
        None => 2.0,
        Some(s) => s
            .parse()
            .ok()
            .filter(|s: &f64| (0.1..=600.0).contains(s))
            .ok_or_else(|| format!("seconds {s:?}: expected a number in 0.1..=600"))?,
    };

    let mut schema = Schema::new();
    let accounts = schema.table(Table::new("accounts", 1));
    let transfer = schema.txn_type("transfer");
    let audit = schema.txn_type("audit");
    schema.load(move |l| {
        for id in 0..ACCOUNTS {
            l.put(accounts, id, &[OPENING_BALANCE]);
        }
    });
    let db = Arc::new(Db::open(
        Options::default().protocol(protocol).coroutines(16),
        schema,
    )?);
    println!("bank: {ACCOUNTS} accounts of {OPENING_BALANCE} under {} ({:?} isolation), {CLIENT_THREADS} client threads for {seconds} s", protocol.name(), db.isolation());

    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..CLIENT_THREADS)
        .map(|c| {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let (mut moved, mut refused) = (0u64, 0u64);
                let mut x = c * 7919 + 1;
                while !stop.load(Ordering::Relaxed) {
                    // A small xorshift: each client its own sequence of transfers.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (from, to, amount) =
                        (x % ACCOUNTS, (x >> 20) % ACCOUNTS, 1 + (x >> 40) % 50);
                    if from == to {
                        continue;
                    }
                    let r: Result<(), TxError<String>> = db.transact_as(transfer, move |tx| {
                        Box::pin(async move {
                            let a = tx.get_for_update(accounts, from).await?[0];
                            if a < amount {
                                return Err(TxError::User(format!(
                                    "account {from} holds {a} < {amount}"
                                )));
                            }
                            let b = tx.get_for_update(accounts, to).await?[0];
                            tx.put(accounts, from, &[a - amount])?;
                            tx.put(accounts, to, &[b + amount])?;
                            Ok(())
                        })
                    });
                    match r {
                        Ok(()) => moved += 1,
                        Err(TxError::User(_)) => refused += 1,
                        Err(e) => panic!("transfer {from} -> {to}: {e}"),
                    }
                }
                (moved, refused)
            })
        })
        .collect();
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    let (mut moved, mut refused) = (0, 0);
    for c in clients {
        let (m, r) = c.join().expect("a client thread panicked");
        moved += m;
        refused += r;
    }
    let elapsed = started.elapsed().as_secs_f64();

    let total: u64 = db.transact_as(audit, move |tx| {
        Box::pin(async move {
            let mut sum = 0;
            for id in 0..ACCOUNTS {
                sum += tx.get(accounts, id).await?[0];
            }
            Ok::<_, TxError<()>>(sum)
        })
    })?;
    let stats = db.stats();
    let db = Arc::into_inner(db).expect("every client thread has ended");
    let report = db.close()?;
    println!(
        "{moved} transfers committed ({:.0}/s), {refused} refused for funds; {} conflicts retried, {} gave up",
        moved as f64 / elapsed,
        stats.retried,
        stats.gave_up
    );
    let expected = ACCOUNTS * OPENING_BALANCE;
    println!(
        "audit: {total} held, {expected} expected: {}",
        if total == expected {
            "conserved"
        } else {
            "NOT CONSERVED"
        }
    );
    let failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect();
    println!(
        "engine checks: {} of {} passed{}",
        report.checks.len() - failed.len(),
        report.checks.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" (failed: {})", failed.join(", "))
        }
    );
    if total != expected || !report.passed {
        std::process::exit(1);
    }
    Ok(())
}
