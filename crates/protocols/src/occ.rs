//! OCC in the style of DrTM+H (RCC §4.1): execution reads records without locking; commit
//! locks the write set by CAS, checks that written records kept the version read, validates
//! the read set's versions, logs to backups, writes back and unlocks.
//!
//! Pipeline: fetch = read → lock (write set) → validate (read set) → log → write back
//! (+ release) → release.

use atoll_txn::stages::{self, CommitOpts, UnchangedOpts};
use atoll_txn::{Abort, Access, Plan, PlanError, Protocol, Stage, TxnCore};

pub struct Occ;

impl Protocol for Occ {
    const NAME: &'static str = "occ";
    const LOGS_ITS_INSTALLS: bool = true;
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Validate,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    const CONFLICT_ABORTS: &'static [Abort] = &[Abort::ValidationFailed, Abort::Conflict];
    type EntryState = ();

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // The lock stage always learns each record's location (RPC replies carry it), so a
        // one-sided release after an RPC lock is valid (RCC §5.2), and vice versa.
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let prim = tx.c.plan().get(Stage::Read);
        let t0 = tx.now_ns();
        let r = stages::read(tx, idxs, prim).await;
        tx.charge(Stage::Read, t0);
        r
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let ws = tx.select(|e| e.is_write() && e.access != Access::Insert);
        let rs = tx.select(|e| !e.is_write());

        // Lock the write set; a record read earlier must still be at the version read.
        stages::lock_unchanged(
            tx,
            &ws,
            UnchangedOpts {
                freeze_rts: false,
                seen: |e| e.version,
            },
        )
        .await?;

        // Validate the read set.
        let t0 = tx.now_ns();
        let r = stages::validate(tx, &rs, plan.get(Stage::Validate)).await;
        tx.charge(Stage::Validate, t0);
        if let Err(a) = r {
            Self::rollback(tx).await;
            return Err(a);
        }

        // Serialisation point passed: log, then make the writes visible.
        stages::log_and_apply(tx).await?;
        // Write back (+ release), then release what is left.
        stages::commit_and_release(tx, CommitOpts::plain()).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}
