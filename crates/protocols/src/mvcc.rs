//! MVCC with a fixed number of version slots per record (RCC §4.4): timestamp ordering over
//! multiple versions, so a reader behind a writer gets an older version instead of
//! aborting.
//!
//! A transaction's timestamp `ctts` orders it. Pipeline:
//! - fetch, records read only: the newest kept version with `wts < ctts` (Cond R1), unless
//!   a writer ordered before the reader holds the record (Cond R2), with the record's `RTS`
//!   raised to `ctts` so no writer can slip in below the reader; the double read makes a
//!   one-sided read atomic. No kept version old enough: `SlotOverflow`.
//! - fetch, records to write: lock (CAS + READ of the whole record), freeze `RTS`, then
//!   check Cond W1 (`ctts` above the newest `wts`, and above `RTS` unless this transaction
//!   raised `RTS` itself by reading the record first) — after the lock, so no
//!   reader or writer can change them meanwhile; a failure aborts (`ValidationFailed`);
//! - commit: lock blind writes and upgrades (same checks) → log → write back: the current
//!   version is copied into the oldest slot and the new one written in place, each slot
//!   marked `WTS_WRITING` while its payload changes (`atoll_txn::mvcc::install_steps`), the
//!   new one with `wts = ctts` (+ release) → release. There is no validation stage: the timestamp order is the serial order.
//!
//! Every co-routine's clock moves past the timestamps it sees in tuples (RCC's clock
//! adjustment), so versions stay within reach of the slots.

use atoll_txn::stages;
use atoll_txn::{Abort, Access, Idxs, Plan, PlanError, Primitive, Protocol, Stage, TxnCore};

pub struct Mvcc;

/// Locks `idxs` with their whole records and checks Cond W1 against the frozen `RTS`.
async fn lock_for_write(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
    let prim = tx.c.plan().get(Stage::Lock);
    let t0 = tx.now_ns();
    let mut r = stages::lock(tx, idxs, prim, true, true).await;
    let ctts = tx.ts.0;
    for &i in idxs {
        let e = &tx.entries[i];
        if e.locked {
            let seen = e.wts.max(e.rts);
            tx.c.observe_ts(seen);
            // `RTS == ctts` is this transaction's own read (timestamps are unique): a
            // read-then-write of one record may go on.
            if r.is_ok() && !(ctts > tx.entries[i].wts && ctts >= tx.entries[i].rts) {
                r = Err(Abort::ValidationFailed);
            }
        }
    }
    tx.charge(Stage::Lock, t0);
    r
}

impl Protocol for Mvcc {
    const NAME: &'static str = "mvcc";
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    const MULTI_VERSION: bool = true;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        if plan.get(Stage::Lock) == Primitive::Rpc && plan.get(Stage::Commit) == Primitive::OneSided
        {
            return Err(PlanError(
                "mvcc cannot run lock=rpc with commit=one-sided: a one-sided write-back moves the current \
                 version into the record's oldest slot, which only a one-sided lock reads (an RPC lock \
                 returns the current version only); use commit=rpc or lock=one-sided"
                    .into(),
            ));
        }
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let reads: Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access == Access::Read)
            .collect();
        let writes: Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access != Access::Read)
            .collect();
        let prim = tx.c.plan().get(Stage::Read);
        let t0 = tx.now_ns();
        let r = stages::mvcc_read(tx, &reads, prim).await;
        tx.charge(Stage::Read, t0);
        r?;
        lock_for_write(tx, &writes).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let unlocked = tx.select(|e| e.is_write() && !e.locked && e.access != Access::Insert);
        if let Err(a) = lock_for_write(tx, &unlocked).await {
            Self::rollback(tx).await;
            return Err(a);
        }
        stages::log_and_apply(tx).await?;
        // Write back (+ release), then release what is left.
        stages::commit_and_release(tx, tx.ts.0, true).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}
