//! NOWAIT two-phase locking (RCC §4.2): every record read or written is locked when it is
//! fetched; a lock held by another transaction aborts at once (no waiting, so no deadlock).
//!
//! Pipeline: fetch = lock (+ read) → log → write back (+ release) → release read locks.
//! Stages used: `lock` (and `read` when it names a different primitive than `lock`, which
//! then costs a second round trip to fetch the data), `log`, `commit`, `release`.

use atoll_txn::stages::{self, CommitOpts, LockOpts};
use atoll_txn::{Abort, Plan, PlanError, Protocol, Stage, TxnCore};

pub struct NoWait;

impl Protocol for NoWait {
    const NAME: &'static str = "nowait";
    const LOGS_ITS_INSTALLS: bool = true;
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    type EntryState = ();

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // Every stage works with either primitive: locks are taken with the transaction's
        // timestamp and the location is always known after locking, so any release works.
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let t0 = tx.now_ns();
        let opts = LockOpts {
            primitive: plan.get(Stage::Lock),
            with_data: plan.get(Stage::Read) == plan.get(Stage::Lock),
            freeze_rts: false,
            // A retry looks before it locks: see `stages::lock` (issue #9).
            peek_on_retry: true,
        };
        let r = stages::lock(tx, idxs, opts).await;
        tx.charge(Stage::Lock, t0);
        r?;
        stages::read_after_lock(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        commit_locked(tx).await
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        release_all(tx).await
    }
}

/// The commit half of two-phase locking, shared with WAITDIE: every record is locked, so
/// blind writes are locked now, then log → write back (+ release) → release the rest.
pub(crate) async fn commit_locked(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
    let plan = *tx.c.plan();
    // Blind writes were never fetched: lock them now.
    let unlocked =
        tx.select(|e| e.is_write() && !e.locked && e.access != atoll_txn::Access::Insert);
    if !unlocked.is_empty() {
        let t0 = tx.now_ns();
        let opts = LockOpts {
            primitive: plan.get(Stage::Lock),
            with_data: false,
            freeze_rts: false,
            peek_on_retry: false,
        };
        let r = stages::lock(tx, &unlocked, opts).await;
        tx.charge(Stage::Lock, t0);
        if let Err(a) = r {
            release_all(tx).await;
            return Err(a);
        }
    }
    stages::log_and_apply(tx).await?;
    // Write back (+ release), then release the read locks.
    stages::commit_and_release(tx, CommitOpts::plain()).await;
    Ok(())
}

/// Releases every lock the attempt holds.
pub(crate) async fn release_all(tx: &mut TxnCore<'_>) {
    stages::release_all(tx).await
}
