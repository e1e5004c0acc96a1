//! Why a run produced no report: the runner's error, shared by every fabric's run loop and
//! the node runtime.

use crate::config::ConfigError;
use atoll_fabric::{NodeId, WorkerPanic};

/// Why a run produced no report.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RunError {
    /// The configuration was refused before anything started.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A worker (or a node's loader) panicked; every other worker was stopped.
    #[error("the run failed: {0}")]
    Panicked(WorkerPanic),
    /// An op to `node` failed after transaction `txn`'s log was written: its outcome is for
    /// recovery to decide, which needs backups of the partitions (`--replicas`), so the run
    /// stopped.
    /// `crashed`: nodes the simulator crashed (an injected fault), named when the op that
    /// failed was to another node (a crash stalls what waits on the crashed node: e.g. the
    /// timestamp service on its coordinators' outcomes).
    #[error(
        "node {} failed while transaction {txn:#x} was committing: its outcome needs recovery, which runs for a partitioned protocol's backups (--replicas 2 or 3 under nowait, waitdie, occ, mvcc or sundial){}",
        .node.0,
        crash_cause(*.node, .crashed)
    )]
    NodeFailed {
        node: NodeId,
        txn: u64,
        crashed: Vec<NodeId>,
    },
    /// Loading a node's partition failed although the configuration was sized for it.
    #[error("loading node {} failed: {message}", .node.0)]
    Load { node: NodeId, message: String },
    /// The simulator crashed `node` (an injected fault) at `at_ns` after its co-routines had
    /// begun transactions: what it committed was recorded in its memory, lost with it, and
    /// its transactions in flight need recovery (not built yet), so the run cannot be
    /// checked.
    #[error(
        "node {} crashed at {} µs (an injected fault) while running transactions: the record of what it committed went with it and its transactions in flight need recovery (not built yet), so the run cannot be checked",
        .node.0,
        .at_ns / 1_000
    )]
    Crashed { node: NodeId, at_ns: u64 },
    /// The simulator crashed compute node `node` at `at_ns` while it ran transactions, and
    /// the protocol recovers such a node, but its recovery did not run (`recovered` false)
    /// or left `unresolved` attempts it was committing unsettled by the run's end.
    #[error(
        "node {} crashed at {} µs (an injected fault) while running transactions, and {}: the outcome of what it was committing is unknown, so the run cannot be checked (crash it earlier or run longer)",
        .node.0,
        .at_ns / 1_000,
        if *.recovered { format!("{} of the attempts it was committing were left unsettled by its recovery", .unresolved) } else { "its recovery had not run by the run's end".to_string() }
    )]
    Unrecovered {
        node: NodeId,
        at_ns: u64,
        recovered: bool,
        unresolved: usize,
    },
}

/// The tail of [`RunError::NodeFailed`]'s message: the crashed nodes that `node` waited on,
/// when it is not one of them itself; empty otherwise.
fn crash_cause(node: NodeId, crashed: &[NodeId]) -> String {
    if crashed.is_empty() || crashed.contains(&node) {
        return String::new();
    }
    let names: Vec<String> = crashed.iter().map(|n| n.0.to_string()).collect();
    format!(
        "; the cause: node {} crashed (an injected fault), and node {} waited on it",
        names.join(", node "),
        node.0
    )
}
