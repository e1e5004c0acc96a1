//! Atoll's workloads: SmallBank ([`smallbank`]) and YCSB ([`ycsb`]). A workload declares its
//! tables, loads a node's partition, generates transaction inputs, runs the transaction logic
//! against the [`Txn`] API under any protocol, and checks its invariants after a run.

pub mod params;
pub mod smallbank;
pub mod ycsb;

use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::{Store, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use std::collections::BTreeMap;
use std::sync::Arc;

pub use params::{ParamError, Params};

/// The outcome of one invariant check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckResult {
    pub name: String,
    pub passed: bool,
    /// What was compared, with the difference when it failed.
    pub detail: String,
}

/// A benchmark workload.
#[allow(async_fn_in_trait)]
pub trait Workload: Send + Sync + 'static {
    /// The inputs of one transaction, drawn before it runs and reused by its retries.
    type Input;

    const NAME: &'static str;

    /// Transaction type names; `generate` returns an index into this.
    fn txn_types(&self) -> &'static [&'static str];

    /// The tables, for a cluster of `nodes`.
    fn tables(&self, nodes: u16) -> Vec<TableSpec>;

    /// Loads the records that live on `store.node`.
    fn load(&self, store: &Store);

    /// Draws a transaction for a coordinator on `home`.
    fn generate(&self, rng: &mut Rng, nodes: u16, home: NodeId) -> (usize, Self::Input);

    /// Runs the transaction logic. Returns its net effect on the checked quantity (money
    /// for SmallBank, counter increments for YCSB), counted only if it commits.
    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Self::Input,
    ) -> Result<i64, Abort>;

    /// Checks the invariants on the final state, given the summed effect of committed
    /// transactions.
    fn check(&self, stores: &[Arc<Store>], committed_effect: i64) -> Vec<CheckResult>;

    /// The resolved knobs, for reports.
    fn knobs(&self) -> BTreeMap<String, String>;
}

/// The workloads a run can select, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    SmallBank,
    Ycsb,
}

impl WorkloadKind {
    pub const ALL: [WorkloadKind; 2] = [WorkloadKind::SmallBank, WorkloadKind::Ycsb];

    pub fn name(self) -> &'static str {
        match self {
            WorkloadKind::SmallBank => smallbank::SmallBank::NAME,
            WorkloadKind::Ycsb => ycsb::Ycsb::NAME,
        }
    }

    pub fn parse(s: &str) -> Option<WorkloadKind> {
        Self::ALL
            .into_iter()
            .find(|w| w.name() == s.to_ascii_lowercase())
    }

    pub fn accepted() -> String {
        Self::ALL
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
