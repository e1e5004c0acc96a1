//! Atoll's transaction layer: the API workloads program against ([`Txn`]), read and write
//! sets ([`coord`]), typed RPC messages ([`msg`]) and the participant that serves them
//! ([`handler`]), stage building blocks in both primitives ([`stages`]), run-time plans
//! ([`plan`]), timestamps ([`ts`]) and typed aborts ([`abort`]).
//!
//! Protocols implement [`Protocol`]; nothing here names a fabric backend.

pub mod abort;
pub mod coord;
pub mod handler;
pub mod knobs;
pub mod log_ring;
pub mod msg;
pub mod own_log;
pub mod plan;
pub mod recovery;
pub mod regions;
pub mod sequenced;
pub mod stages;
pub mod ts;
pub mod tsvc;
mod txn;
pub mod versions;

pub use abort::Abort;
pub use coord::{
    Access, Coordinator, Deferred, Entry, EntryState, HistOp, Observed, ScanObs, TxnConfig,
    TxnCore, WriteKind,
};
pub use knobs::{FamilyConfig, KnobKind, KnobSpec, KnobValue, Knobs};
pub use plan::{Isolation, Plan, PlanError, Primitive, Stage};
pub use sequenced::{EpochLog, EpochLogMode, FamilyNodes, SeqBatch, SeqInput, SeqShape, SeqTxn};
pub use ts::{Timestamp, TsSource, TxnTimestamps};
pub use txn::{check_plan, Footprint, NodeTask, PartitionRecovered, Protocol, Recovered, Txn};

/// A small set of entry indices (read and write sets are usually small).
pub type Idxs = smallvec::SmallVec<[usize; 16]>;
