//! Atoll, a distributed in-memory transaction engine, as a library: declare tables, open a
//! cluster, and run your own transactions on it (`atoll-db`, re-exported whole). The
//! `atoll` binary beside it benchmarks, checks and runs clusters of processes.
//!
//! A complete program: a bank whose transfers keep the money it holds.
//!
//! ```
//! use atoll::{Db, Options, Protocol, Schema, Table, TxError};
//!
//! let mut schema = Schema::new();
//! let accounts = schema.table(Table::new("accounts", 1));
//! schema.load(move |l| {
//!     for id in 0..10 {
//!         l.put(accounts, id, &[100]);
//!     }
//! });
//! let db = Db::open(Options::default().protocol(Protocol::Mvcc), schema)?;
//! for i in 0..20u64 {
//!     let (from, to) = (i % 10, (i * 7 + 3) % 10);
//!     let r: Result<(), TxError<String>> = db.transact(move |tx| {
//!         Box::pin(async move {
//!             let a = tx.get_for_update(accounts, from).await?[0];
//!             if a < 5 || from == to {
//!                 return Err(TxError::User(format!("account {from} cannot pay")));
//!             }
//!             let b = tx.get_for_update(accounts, to).await?[0];
//!             tx.put(accounts, from, &[a - 5])?;
//!             tx.put(accounts, to, &[b + 5])?;
//!             Ok(())
//!         })
//!     });
//!     assert!(matches!(r, Ok(()) | Err(TxError::User(_))));
//! }
//! let total: u64 = db.transact(move |tx| {
//!     Box::pin(async move {
//!         let mut sum = 0;
//!         for id in 0..10 {
//!             sum += tx.get(accounts, id).await?[0];
//!         }
//!         Ok::<_, TxError<()>>(sum)
//!     })
//! })?;
//! assert_eq!(total, 1_000);
//! let report = db.close()?;
//! assert!(report.passed, "{}", report.render());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub use atoll_db::*;
