//! Order entry on atoll, with a scan: customers place orders, the oldest orders ship
//! (deleted), and listing a customer's orders by a range scan always finds exactly as many
//! as the customer's row counts. The customer row is the range's guard: every insert and
//! delete into the range writes it, so the scan is free of phantoms under any protocol.
//!
//! `cargo run --release --example order_entry [PROTOCOL]` (default sundial).

use atoll::{Db, Options, Protocol, Schema, Table, TxError};
use std::sync::Arc;

const CUSTOMERS: u64 = 50;
const THREADS: u64 = 4;
const OPS_PER_THREAD: u64 = 1_500;
/// Orders of customer `c` are keys `c << ORDER_BITS | n`.
const ORDER_BITS: u32 = 32;
/// A customer's row: the next order number, the orders open.
const NEXT: usize = 0;
const OPEN: usize = 1;

fn order_key(c: u64, n: u64) -> u64 {
    c << ORDER_BITS | n
}

/// Up to `limit` of customer `c`'s open orders, oldest first.
async fn orders_of(
    tx: &mut atoll::Tx<'_>,
    orders: atoll::TableId,
    c: u64,
    limit: u32,
) -> Result<Vec<u64>, atoll::OpError> {
    let (lo, hi) = (order_key(c, 0), order_key(c, u32::MAX as u64));
    tx.scan(orders, lo, hi, limit).await
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protocol: Protocol = std::env::args()
        .nth(1)
        .map_or(Ok(Protocol::Sundial), |name| name.parse())?;
    let mut schema = Schema::new();
    let customers = schema.table(Table::new("customers", 2));
    // A customer's orders live on the customer's node, in key order.
    let orders = schema.table(
        Table::new("orders", 2)
            .ordered()
            .grouped_by(|k| k >> ORDER_BITS),
    );
    let (place, ship, list) = (
        schema.txn_type("place"),
        schema.txn_type("ship"),
        schema.txn_type("list"),
    );
    schema.load(move |l| {
        for c in 0..CUSTOMERS {
            l.put(customers, c, &[0, 0]);
        }
    });
    let db = Arc::new(Db::open(
        Options::default().protocol(protocol).attempts_max(1_000),
        schema,
    )?);
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || -> Result<(u64, u64, u64), TxError<String>> {
                let (mut placed, mut shipped, mut listed) = (0, 0, 0);
                for i in 0..OPS_PER_THREAD {
                    let c = (t * 31 + i * 7) % CUSTOMERS;
                    match i % 3 {
                        0 | 1 if i % 5 != 4 => {
                            db.transact_as(place, move |tx| {
                                Box::pin(async move {
                                    let row = tx.get_for_update(customers, c).await?;
                                    let (next, open) = (row[NEXT], row[OPEN]);
                                    tx.insert(orders, order_key(c, next), &[c, 10 + next % 90])?;
                                    tx.put(customers, c, &[next + 1, open + 1])?;
                                    Ok(())
                                })
                            })?;
                            placed += 1;
                        }
                        0 | 1 => {
                            let done: bool = db.transact_as(ship, move |tx| {
                                Box::pin(async move {
                                    let row = tx.get_for_update(customers, c).await?;
                                    let oldest = orders_of(tx, orders, c, 1).await?;
                                    let Some(&k) = oldest.first() else {
                                        return Ok(false);
                                    };
                                    tx.delete(orders, k).await?;
                                    tx.put(customers, c, &[row[NEXT], row[OPEN] - 1])?;
                                    Ok(true)
                                })
                            })?;
                            shipped += done as u64;
                        }
                        _ => {
                            db.transact_as(list, move |tx| {
                                Box::pin(async move {
                                    // Read for update: the guard orders this scan with every
                                    // change to the range, under every protocol (a plain read
                                    // would let a timestamp-ordering protocol place this
                                    // listing before a change its scan saw).
                                    let open = tx.get_for_update(customers, c).await?[OPEN];
                                    let keys = orders_of(tx, orders, c, 1 << 16).await?;
                                    if keys.len() as u64 != open {
                                        // Seen by an attempt that then validates: a commit with it is an anomaly.
                                        return Err(TxError::User(format!(
                                            "customer {c}: {} orders listed, {open} open",
                                            keys.len()
                                        )));
                                    }
                                    Ok(())
                                })
                            })?;
                            listed += 1;
                        }
                    }
                }
                Ok((placed, shipped, listed))
            })
        })
        .collect();
    let (mut placed, mut shipped, mut listed) = (0, 0, 0);
    for t in threads {
        let (p, s, l) = t.join().expect("a client thread panicked")?;
        placed += p;
        shipped += s;
        listed += l;
    }
    let open_total: u64 = db.transact(move |tx| {
        Box::pin(async move {
            let mut open = 0;
            for c in 0..CUSTOMERS {
                let row = tx.get_for_update(customers, c).await?;
                let keys = orders_of(tx, orders, c, 1 << 16).await?;
                if keys.len() as u64 != row[OPEN] {
                    return Err(TxError::User(format!(
                        "customer {c}: {} orders stored, {} counted",
                        keys.len(),
                        row[OPEN]
                    )));
                }
                open += row[OPEN];
            }
            Ok(open)
        })
    })?;
    let stats = db.stats();
    let report = Arc::into_inner(db).expect("clients ended").close()?;
    println!("order entry under {}: {placed} placed, {shipped} shipped, {listed} listings each matching its count; {open_total} open = {placed} - {shipped}", protocol.name());
    println!(
        "{} committed, {} conflicts retried",
        stats.committed, stats.retried
    );
    if open_total != placed - shipped || !report.passed {
        eprintln!(
            "order_entry: FAILED{}",
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
