//! SUNDIAL (Yu et al., VLDB 2018; RCC §4.5): logical leases `[wts, rts]` order transactions
//! without aborting readers that a later writer overtakes.
//!
//! Pipeline:
//! - fetch: records read only are read atomically (two READs in one doorbell that must
//!   agree, or the participant's consistent read); records to write are locked, and their
//!   `RTS` frozen so no lease can grow behind the writer's back (see `layout::RTS_FROZEN`);
//! - lock: records written but not locked yet (blind writes, upgrades); an upgraded read
//!   must still see the `WTS` it read;
//! - commit_ts = max(`WTS` of every read, `RTS` + 1 of every write);
//! - renew: each read's lease is extended to commit_ts by CAS on `RTS` (one-sided) or by
//!   the participant; it fails if a later write committed (`WTS` moved) or a writer froze
//!   `RTS` — the transaction then aborts (`ValidationFailed`);
//! - log → write back with `WTS` = `RTS` = commit_ts (+ release) → release.
//!
//! The family's files: `coord.rs` (each record's [`Lease`], the atomic read, the commit
//! timestamp, renewal), `participant.rs` (renewal on the owner's CPU), `msg.rs` (the renew
//! request). Locking, logging and write-back are the shared stages'.

pub mod coord;
pub mod msg;
pub mod participant;

use atoll_txn::stages::{self, CommitOpts, LockOpts, UnchangedOpts};
use atoll_txn::{Abort, Access, Plan, PlanError, Protocol, Stage, TxnCore};
pub use coord::Lease;
use coord::{commit_ts, read_atomic, renew};
pub use participant::SundialParticipant;

pub struct Sundial;

impl Protocol for Sundial {
    const NAME: &'static str = "sundial";
    const LOGS_ITS_INSTALLS: bool = true;
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Renew,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    const CONFLICT_ABORTS: &'static [Abort] = &[Abort::ValidationFailed, Abort::Conflict];
    type EntryState = Lease;

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // Every stage works with either primitive: an RPC lock freezes `RTS` as a one-sided
        // one does, and either release thaws it (the coordinator knows the frozen value).
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_, Lease>, idxs: &[usize]) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let reads: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access == Access::Read)
            .collect();
        let writes: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access != Access::Read)
            .collect();
        let t0 = tx.now_ns();
        let r = read_atomic(tx, &reads, plan.get(Stage::Read)).await;
        tx.charge(Stage::Read, t0);
        r?;
        let opts = LockOpts {
            primitive: plan.get(Stage::Lock),
            with_data: plan.get(Stage::Read) == plan.get(Stage::Lock),
            freeze_rts: true,
            peek_on_retry: false,
        };
        let t0 = tx.now_ns();
        let r = stages::lock(tx, &writes, opts).await;
        tx.charge(Stage::Lock, t0);
        r?;
        stages::read_after_lock(tx, &writes).await
    }

    async fn commit(tx: &mut TxnCore<'_, Lease>) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        // Writes not locked yet: blind writes and reads upgraded to writes.
        let unlocked = tx.select(|e| e.is_write() && !e.locked && e.access != Access::Insert);
        // An upgraded read must still see the WTS it read.
        stages::lock_unchanged(
            tx,
            &unlocked,
            UnchangedOpts {
                freeze_rts: true,
                seen: |e| e.state.wts,
            },
        )
        .await?;

        let commit_ts = commit_ts(tx);

        let reads = tx.select(|e| !e.is_write());
        let t0 = tx.now_ns();
        let r = renew(tx, &reads, plan.get(Stage::Renew), commit_ts).await;
        tx.charge(Stage::Renew, t0);
        if let Err(a) = r {
            Self::rollback(tx).await;
            return Err(a);
        }

        stages::log_and_apply_setting(tx, Some(commit_ts)).await?;
        // Write back (+ release), then release what is left.
        let opts = CommitOpts {
            set_ts: Some(commit_ts),
            install: None,
        };
        stages::commit_and_release(tx, opts).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_, Lease>) {
        stages::release_all(tx).await
    }
}
