//! WAITDIE two-phase locking (RCC §4.3): on a lock conflict a transaction older than the
//! holder waits, a younger one dies, so waits only go from old to young and no deadlock
//! forms. A transaction keeps its first timestamp across retries, so it ages until it is
//! the oldest and cannot starve at a participant's waiting list.
//!
//! Pipeline: fetch = lock (+ read), waiting or dying → log → write back (+ release) →
//! release. RPC: the participant holds the request on a waiting list its event loop serves
//! (it never busy-waits). One-sided: CAS + READ; the failed CAS returns the holder's
//! timestamp and the coordinator retries after a pause or dies. With the starvation fix
//! (`--waitdie-counter`, [`config::COUNTER`]), a waiter raises a FETCH_ADD counter in the tuple header
//! that makes other lockers die until it has the lock.
//!
//! The family's files: `config.rs` (its knob), `coord.rs` (the wait-or-die lock), `participant.rs` (the waiting
//! list), `msg.rs` (its lock request). Commit is NOWAIT's (`nowait::commit_locked`).

pub mod config;
pub mod coord;
pub mod msg;
pub mod participant;

use crate::nowait::{commit_locked, release_all};
use atoll_txn::stages;
use atoll_txn::{Abort, Plan, PlanError, Protocol, Stage, TxnCore};
use coord::{lock_wait_die, WaitDieOpts};
pub use participant::WaitDieParticipant;

pub struct WaitDie;

impl Protocol for WaitDie {
    const NAME: &'static str = "waitdie";
    const LOGS_ITS_INSTALLS: bool = true;
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    const KEEP_TS_ON_RETRY: bool = true;
    const KNOBS: &'static [atoll_txn::KnobSpec] = &[config::COUNTER];
    type EntryState = ();

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        config::configure(knobs)
    }

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // As NOWAIT: the lock word holds the owner's timestamp, so any release works.
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let counter = tx.c.cfg.family_as::<config::WaitDieConfig>().counter;
        let counter_unit = if counter {
            let shape = tx.c.cfg.shape();
            let per = shape.coordinators_per_node.max(1);
            config::CounterFields::new(shape.compute_nodes, per)
                .unit((tx.ts.issuer() / per as u64) as u32)
        } else {
            0
        };
        let t0 = tx.now_ns();
        let opts = WaitDieOpts {
            primitive: plan.get(Stage::Lock),
            with_data: plan.get(Stage::Read) == plan.get(Stage::Lock),
            counter_unit,
        };
        let r = lock_wait_die(tx, idxs, opts).await;
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
