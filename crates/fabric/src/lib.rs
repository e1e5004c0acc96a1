//! Atoll's fabric: the network as protocols see it.
//!
//! Registered, word-addressed memory per node ([`memory`]); one-sided verbs and typed-RPC
//! transport ([`verbs`]); doorbell batching, outstanding requests and co-routine scheduling
//! ([`core`]); and backends: the in-process threaded cluster ([`inproc`]) and the
//! deterministic simulator in virtual time ([`sim`]).
//! Nothing above this crate names a backend except the bench driver that picks one.

pub mod core;
pub mod ids;
pub mod inproc;
pub mod memory;
pub mod rng;
pub mod sim;
pub mod verbs;

pub use crate::core::ReplyTo;
pub use crate::core::{
    panic_message, Completions, Coroutine, Doorbell, Endpoint, Executor, TaskId, Transport,
    WorkerCore, WorkerPanic,
};
pub use crate::ids::{NodeId, RegionId, RemotePtr, WorkerId};
pub use crate::memory::{ClusterMemory, NodeMemory, Region};
pub use crate::verbs::{Bytes, Completion, Handled, Op, RpcHandler, VerbCounters, VerbKind, Words};
