//! The seam of deterministic protocols (CALVIN, RCC §4.6): a transaction's input and keys
//! are known before it runs, sequenced into epochs, and executed in one order on every
//! node it touches, with no concurrency-control abort and no two-phase commit.
//!
//! The runner drives it (`atoll_runner`'s sequenced lanes): each co-routine is a lane that
//! collects its requests for an epoch ([`SeqInput`]), hands them to the protocol
//! ([`crate::Protocol::seq_dispatch`]), executes what the protocol gives it to run on this
//! node ([`crate::Protocol::seq_next`], then the workload's logic on a
//! [`crate::Txn::begin_sequenced`] attempt, then [`crate::Protocol::seq_finish`]) and waits
//! at the epoch's end ([`crate::Protocol::seq_barrier`]). A later deterministic protocol
//! reuses all of it and brings its own four hooks.

use atoll_storage::TableId;
use std::any::Any;
use std::sync::{Arc, Mutex};

/// One request a lane collected: what its transaction is and the records it declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqInput {
    /// The workload's transaction type.
    pub ty: u16,
    /// The workload's input, encoded (`TxnInput::encode`).
    pub input: Vec<u64>,
    /// `(table, key, write)`, each record once.
    pub accesses: Vec<(TableId, u64, bool)>,
    /// When the lane drew it, on the lane's clock: latency counts from here.
    pub arrival_ns: u64,
}

/// How lanes collect an epoch: for `epoch_ns` of the lane's clock, or until it has
/// `batch_max` requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqShape {
    pub epoch_ns: u64,
    pub batch_max: u32,
}

/// A lane's requests for one epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqBatch {
    pub epoch: u64,
    /// The lane's index on its node (the same lanes on every node).
    pub lane: u32,
    /// Lanes per node.
    pub lanes: u32,
    /// The lane stops after this epoch (the run's end): every lane stops with it.
    pub last: bool,
    pub requests: Vec<SeqInput>,
}

/// A sequenced transaction this node executes as an active participant: its locks are
/// granted and every value it reads has arrived (the protocol keeps them for its `fetch`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeqTxn {
    /// Its place in the epoch's order, cluster-wide.
    pub id: u64,
    pub ty: u16,
    /// The tag and timestamp every participant executes it with (one attempt, one tag).
    pub tag: u64,
    pub ts: u64,
    pub input: Vec<u64>,
    pub arrival_ns: u64,
    /// This node records it (history, effect, counts): its first active participant.
    pub records: bool,
}

/// What a node's participant side and its coordinators share of a protocol family (one per
/// node, whatever the backend): each family keeps one value of its own type here, made on
/// first use.
#[derive(Default)]
pub struct FamilyNodes {
    slots: Mutex<Vec<(crate::msg::FamilyId, Arc<dyn Any + Send + Sync>)>>,
}

impl FamilyNodes {
    /// The family's node state, made with `Default` on first use.
    pub fn get<T: Any + Send + Sync + Default>(&self, family: crate::msg::FamilyId) -> Arc<T> {
        let mut slots = self.slots.lock().expect("no poisoned family state");
        if let Some((_, s)) = slots.iter().find(|(f, _)| *f == family) {
            return s.clone().downcast::<T>().unwrap_or_else(|_| {
                panic!("family {} keeps node state of another type", family.0)
            });
        }
        let s = Arc::new(T::default());
        slots.push((family, s.clone()));
        s
    }
}
