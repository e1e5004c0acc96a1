//! Atoll's fabric: the network as protocols see it.
//!
//! Registered, word-addressed memory per node ([`memory`]); one-sided verbs and typed-RPC
//! transport ([`verbs`]); doorbell batching, outstanding requests and co-routine scheduling
//! ([`core`]), with the [`Transport`] seam a backend implements. The backends live in their
//! own crates (`atoll-fabric-inproc`: threads in one process; `atoll-fabric-sim`: the
//! deterministic simulator in virtual time); only the bench driver depends on them.

pub mod core;
pub mod ids;
pub mod inthash;
pub mod machine;
pub mod memory;
pub mod names;
pub mod rng;
pub mod verbs;

pub use crate::core::ReplyTo;
pub use crate::core::{
    execute_local, panic_message, Completions, Coroutine, Doorbell, Endpoint, Executor, LogWait,
    NodeSetup, Posted, TaskId, Transport, WorkerCore, WorkerPanic,
};
pub use crate::ids::{NodeId, RegionId, RemotePtr, WorkerId};
pub use crate::inthash::{IntHasher, IntMap};
pub use crate::memory::{ClusterMemory, NodeDirectory, NodeMemory, Region, RegionKey};
pub use crate::verbs::{
    Bytes, Completion, FailureKind, Handled, Op, OpError, RpcHandler, VerbCounters, VerbKind, Words,
};
