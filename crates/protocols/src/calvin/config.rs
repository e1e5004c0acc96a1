//! CALVIN's knobs: how long a lane collects an epoch, how many requests it takes in one, and
//! which order the epoch's transactions run in.

use atoll_storage::ExtraRegion;
use atoll_txn::knobs::{
    ClusterShape, FamilyConfig, FamilyHeap, KnobError, KnobKind, KnobSpec, Knobs,
};
use std::any::Any;
use std::sync::Arc;

/// `--epoch-us`: RCC's code buffers 10 ms of requests per lane for an epoch.
pub const EPOCH_US: KnobSpec = KnobSpec {
    name: "epoch_us",
    kind: KnobKind::Number {
        default: 10_000,
        min: 1,
        max: 1_000_000,
    },
    help: "microseconds a lane collects requests for an epoch before it dispatches them (RCC's \
           code: 10 ms)",
};

/// `--calvin-batch-max`: a lane dispatches early with this many requests.
pub const BATCH_MAX: KnobSpec = KnobSpec {
    name: "calvin_batch_max",
    kind: KnobKind::Number {
        default: 256,
        min: 1,
        max: 65_536,
    },
    help: "requests a lane collects in one epoch, at most (it dispatches as soon as it has them)",
};

/// `--calvin-order`: one order across the epoch's lanes (the original Calvin's), or each
/// lane its own (RCC's).
pub const ORDER: KnobSpec = KnobSpec {
    name: "calvin_order",
    kind: KnobKind::Choice {
        default: "global",
        accepted: &["global", "lane"],
    },
    help: "global: one order over every lane's batches and a deterministic lock table (the \
           original Calvin); lane: each lane runs its own batches in its own order (RCC), and a \
           transaction that conflicts with an earlier lane's runs again after the lanes' passes",
};

/// The order an epoch's transactions run in on every node ([`ORDER`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Lane 0's batches, then lane 1's, ...: one lock queue per record, in that order.
    Global,
    /// Each lane runs its own batches, in their order, concurrently with the other lanes; a
    /// transaction that conflicts with one of an earlier lane (found from the declared
    /// records, so every node finds the same) is deferred to a second pass, run after every
    /// lane's first pass in the global order.
    Lane,
}

/// CALVIN's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CalvinConfig {
    pub epoch_ns: u64,
    pub batch_max: u32,
    pub order: Order,
}

/// Bytes of one sequenced request as a node holds it, counted generously: its order key and
/// identity (6 words), a workload's input (up to 20 words) and up to 16 declared records (3
/// words each), in vectors.
pub const REQUEST_BYTES: u64 = 640;

/// Epochs of every lane's batches a node may hold at once: the one it runs, the next one
/// arriving early, and [`super::node::KEPT_EPOCHS_MAX`] kept for the nodes it backs up.
pub const EPOCHS_HELD_MAX: u64 = 2 + super::node::KEPT_EPOCHS_MAX as u64;

impl FamilyConfig for CalvinConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn epoch_ns(&self) -> Option<u64> {
        Some(self.epoch_ns)
    }

    /// The one-sided stages' buffers ([`super::buffers`]), when the plan runs one so.
    fn regions(&self, shape: &ClusterShape) -> Vec<ExtraRegion> {
        let words = super::buffers::region_words(
            &shape.plan,
            shape.compute_nodes,
            shape.coordinators_per_node,
            self.batch_max,
        );
        if words == 0 {
            return Vec::new();
        }
        vec![ExtraRegion {
            name: super::buffers::REGION,
            words: words as usize,
        }]
    }

    /// Every node holds every lane's batches (each at most `--calvin-batch-max` requests)
    /// of the epochs it may hold at once.
    fn heap(&self, shape: &ClusterShape) -> FamilyHeap {
        let per_node = (shape.coordinators_total as u64)
            .saturating_mul(self.batch_max as u64)
            .saturating_mul(EPOCHS_HELD_MAX)
            .saturating_mul(REQUEST_BYTES);
        FamilyHeap {
            cluster_bytes: per_node.saturating_mul(shape.compute_nodes as u64),
            cluster_what: "CALVIN's epoch batches on every node",
            cluster_hint: ", or a smaller --calvin-batch-max",
            per_record_bytes: 0,
            table_copies_percent: 0,
        }
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(CalvinConfig {
        epoch_ns: knobs.number(EPOCH_US.name) * 1_000,
        batch_max: knobs.number(BATCH_MAX.name) as u32,
        order: match knobs.choice(ORDER.name) {
            "global" => Order::Global,
            "lane" => Order::Lane,
            other => {
                return Err(KnobError(format!(
                    "--{} {other}: accepted are {}",
                    ORDER.flag(),
                    ORDER.accepted()
                )))
            }
        },
    }))
}
