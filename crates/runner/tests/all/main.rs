//! The bench crate's end-to-end tests, one module per subject, linked into one test binary:
//! the engine's generic code is compiled and linked once for all of them, not once per file.
//! `cargo test --profile ci --workspace --test all -- sim::` runs one module.

/// Epochs sized for a run of a few simulated milliseconds: a sequenced protocol (CALVIN)
/// collects an epoch of `--epoch-us` (RCC's 10 ms by default) or `--calvin-batch-max`
/// requests per lane, and a run shorter than one epoch measures no commit at all (under the
/// tests' contention an epoch's transactions on a hot record run one after another).
pub fn short_epochs(cfg: &mut atoll_runner::RunConfig) {
    uncapped(cfg);
    if cfg.protocol.sequenced() {
        cfg.set_knob("epoch_us", SHORT_EPOCH_US);
        cfg.set_knob("calvin_batch_max", SHORT_BATCH_MAX);
    }
}

/// A sequenced protocol refuses a workload knob that caps a table it inserts into (an
/// insert finding it full on one node would not on another): the tables grow instead.
pub fn uncapped(cfg: &mut atoll_runner::RunConfig) {
    if cfg.protocol.sequenced() {
        for knob in ["dyn_slots", "new_orders_max", "orders_max"] {
            cfg.params.remove(knob);
        }
    }
}

/// A Tell that is Tell in every item but `fetch` and `memory_task`, given here: a
/// deliberately broken variant states only its defect, and the rest (deletes, conflict
/// aborts, recovery) cannot drift from the real family's.
macro_rules! tell_variant {
    (
        $(#[$doc:meta])* $ty:ident = $name:literal;
        fetch($tx:ident, $idxs:ident) $fetch:block
        memory_task($task:ident) $mt:block
    ) => {
        $(#[$doc])*
        struct $ty;

        impl atoll_txn::Protocol for $ty {
            const NAME: &'static str = $name;
            const ISOLATION: atoll_txn::Isolation = <Tell as Protocol>::ISOLATION;
            const DELETES: bool = <Tell as Protocol>::DELETES;
            const LOCK_WORD: atoll_storage::layout::LockWord = <Tell as Protocol>::LOCK_WORD;
            const MULTI_VERSION: bool = <Tell as Protocol>::MULTI_VERSION;
            const STAGES: &'static [atoll_txn::Stage] = <Tell as Protocol>::STAGES;
            const FAMILY_STAGES: &'static [atoll_txn::Stage] = <Tell as Protocol>::FAMILY_STAGES;
            const CPU_STAGES: &'static [atoll_txn::Stage] = <Tell as Protocol>::CPU_STAGES;
            const CONFLICT_ABORTS: &'static [atoll_txn::Abort] = <Tell as Protocol>::CONFLICT_ABORTS;
            const KNOBS: &'static [atoll_txn::KnobSpec] = <Tell as Protocol>::KNOBS;
            const ROLES: &'static [atoll_storage::RoleSpec] = <Tell as Protocol>::ROLES;
            const SCANS_SNAPSHOT: bool = <Tell as Protocol>::SCANS_SNAPSHOT;
            const RECOVERS_COMPUTE_NODES: bool = <Tell as Protocol>::RECOVERS_COMPUTE_NODES;
            type EntryState = atoll_protocols::tell::txn::TellEntry;

            fn configure(
                knobs: &atoll_txn::Knobs,
            ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
                <Tell as Protocol>::configure(knobs)
            }

            fn check_plan(plan: &atoll_txn::Plan) -> Result<(), atoll_txn::PlanError> {
                <Tell as Protocol>::check_plan(plan)
            }

            fn recovery_refusal(plan: &atoll_txn::Plan, log_replicas: u16) -> Option<String> {
                <Tell as Protocol>::recovery_refusal(plan, log_replicas)
            }

            fn memory_task_wanted(
                catalog: &atoll_storage::Catalog,
                node: atoll_fabric::NodeId,
            ) -> bool {
                <Tell as Protocol>::memory_task_wanted(catalog, node)
            }

            async fn memory_task($task: atoll_txn::NodeTask) $mt

            async fn fetch(
                $tx: &mut atoll_txn::TxnCore<'_, Self::EntryState>,
                $idxs: &[usize],
            ) -> Result<(), atoll_txn::Abort> $fetch

            async fn scan_visible(
                tx: &mut atoll_txn::TxnCore<'_, Self::EntryState>,
                t: atoll_storage::TableId,
                node: atoll_fabric::NodeId,
                keys: &[(u64, u32, u64)],
            ) -> Result<Vec<Option<u64>>, atoll_txn::Abort> {
                <Tell as Protocol>::scan_visible(tx, t, node, keys).await
            }

            async fn commit(
                tx: &mut atoll_txn::TxnCore<'_, Self::EntryState>,
            ) -> Result<(), atoll_txn::Abort> {
                <Tell as Protocol>::commit(tx).await
            }

            async fn rollback(tx: &mut atoll_txn::TxnCore<'_, Self::EntryState>) {
                <Tell as Protocol>::rollback(tx).await
            }
        }
    };
}

const SHORT_EPOCH_US: u64 = 20;
const SHORT_BATCH_MAX: u32 = 2;

mod broken;
mod checkout;
mod contention;
mod contracts;
mod driver;
mod failures;
mod fidelity;
mod islands;
mod matrix;
mod replicas;
mod shared_data;
mod si_samples;
mod sim;
mod skew;
mod tell_index;
mod tell_managers;
mod tell_recovery;
mod tell_tree;
mod tpcc;
