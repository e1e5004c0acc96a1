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
//!   marked `WTS_WRITING` while its payload changes (`version::install_steps`), the
//!   new one with `wts = ctts` (+ release) → release. There is no validation stage: the timestamp order is the serial order.
//!
//! Every co-routine's clock moves past the timestamps it sees in tuples (RCC's clock
//! adjustment), so versions stay within reach of the slots.

//!
//! The family's files: `config.rs` (its knob), `coord.rs` (each record's [`Versions`], the snapshot read, the
//! writer's lock with Cond W1, the install), `version.rs` (the version choice and install
//! steps, shared with the participant), `participant.rs` (read and install on the owner's
//! CPU), `msg.rs` (its requests and the read's refusal).

pub mod config;
pub mod coord;
pub mod msg;
pub mod participant;
pub mod version;

use atoll_txn::stages::{self, CommitOpts};
use atoll_txn::{Abort, Access, Idxs, Plan, PlanError, Primitive, Protocol, Stage, TxnCore};
pub use coord::Versions;
use coord::{lock_for_write, INSTALLER};
pub use participant::MvccParticipant;

pub struct Mvcc;

impl Protocol for Mvcc {
    const NAME: &'static str = "mvcc";
    const LOGS_ITS_INSTALLS: bool = true;
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    const MULTI_VERSION: bool = true;
    const KNOBS: &'static [atoll_txn::KnobSpec] = &[config::SLOTS];
    const CONFLICT_ABORTS: &'static [Abort] = &[Abort::ValidationFailed, Abort::Conflict];
    type EntryState = Versions;

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        config::configure(knobs)
    }

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

    async fn fetch(tx: &mut TxnCore<'_, Versions>, idxs: &[usize]) -> Result<(), Abort> {
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
        let r = coord::read(tx, &reads, prim).await;
        tx.charge(Stage::Read, t0);
        r?;
        lock_for_write(tx, &writes).await
    }

    async fn commit(tx: &mut TxnCore<'_, Versions>) -> Result<(), Abort> {
        let unlocked = tx.select(|e| e.is_write() && !e.locked && e.access != Access::Insert);
        if let Err(a) = lock_for_write(tx, &unlocked).await {
            Self::rollback(tx).await;
            return Err(a);
        }
        stages::log_and_apply_setting(tx, Some(tx.ts)).await?;
        // Write back (+ release), then release what is left.
        let opts = CommitOpts {
            set_ts: Some(tx.ts),
            install: Some(INSTALLER),
        };
        stages::commit_and_release(tx, opts).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_, Versions>) {
        stages::release_all(tx).await
    }
}
