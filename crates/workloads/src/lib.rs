//! Atoll's workloads: SmallBank ([`smallbank`]), YCSB ([`ycsb`]), the torn-read /
//! invariant workload Cycle ([`cycle`]), TPC-C ([`tpcc`]), the hardware-islands
//! microbenchmark ([`micro`]), the write-skew probe ([`skew`]) and TPC-W's checkout
//! ([`checkout`]). A workload declares its tables, loads a node's
//! partition, generates transaction inputs, runs the transaction logic against the [`Txn`]
//! API under any protocol, and checks its invariants after a run from the final state and
//! the effects its committed transactions report (values they read and wrote).
//!
//! The contract a scheduler that runs transactions elsewhere needs (CALVIN ships inputs to
//! other nodes and locks in advance): an input encodes to words and back ([`TxnInput`]),
//! and a workload declares a transaction's access set when it is known before it runs
//! ([`Workload::access_set`]).
//!
//! Checks run where the records are: each node checks its own records against the merged
//! ledger ([`Workload::check_node`], [`storage_check_node`]) and reports a serializable part,
//! and the driver turns the parts into verdicts ([`Workload::check_cluster`],
//! [`storage_check_cluster`]); a run whose nodes are separate processes checks the same way.

pub mod checkout;
pub mod cycle;
pub mod micro;
pub mod params;
pub mod skew;
pub mod smallbank;
pub mod tpcc;
pub mod ycsb;

use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::{
    payload_intact, HEADER_WORDS, H_KEY, H_LOCK, H_VERSION, OLD_MOVED, OVERFLOW_ENTRY_HEADER_WORDS,
    P_TAG, VERSION_ABSENT,
};
use atoll_storage::{Store, TableId, TableSpec};
use atoll_txn::{Abort, Isolation, Protocol, Txn};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
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
    /// Which runs must pass it: a check of what only serializability guarantees fails a
    /// serializable protocol's run and is reported, not failed, under snapshot isolation
    /// ([`CheckResult::under`]).
    pub binds: Binds,
}

/// Which runs a check binds, by the isolation level of the run's protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binds {
    /// Every run: what snapshot isolation guarantees too (no lost update, every record one
    /// write's, every committed change counted).
    Always,
    /// Serializable runs only: an anomaly snapshot isolation allows, such as write skew
    /// (two transactions each read what the other writes, and both commit).
    Serializable,
}

impl CheckResult {
    /// The verdict of this check for a run whose protocol guarantees `isolation`: a failure
    /// of a check that binds only serializable runs is, under snapshot isolation, an anomaly
    /// that level allows, so it passes with its detail saying so (the probe saw what it
    /// exists to find); under serializability it stays a failure.
    pub fn under(mut self, isolation: Isolation) -> CheckResult {
        if self.passed || self.binds == Binds::Always {
            return self;
        }
        match isolation {
            Isolation::Snapshot => {
                self.passed = true;
                self.detail = format!(
                    "{} (allowed under {} isolation)",
                    self.detail,
                    isolation.name()
                );
            }
            Isolation::Serializable => {
                self.detail = format!("{} (a serializable protocol allows none)", self.detail);
            }
        }
        self
    }
}

/// Why words did not decode into a workload's input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{workload} input: {reason}")]
pub struct InputDecodeError {
    pub workload: &'static str,
    pub reason: String,
}

/// A transaction's input as words, so it can be logged or shipped to another node.
pub trait TxnInput: Clone + std::fmt::Debug + Sized {
    /// Appends the input's words to `out`.
    fn encode(&self, out: &mut Vec<u64>);

    /// The input `encode` wrote as `words` (all of them).
    fn decode(words: &[u64]) -> Result<Self, InputDecodeError>;
}

/// How a transaction accesses a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum AccessMode {
    Read,
    /// Written, inserted, deleted, or read for update.
    Write,
}

/// The records a transaction touches, each once, with the strongest mode it uses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessSet {
    /// `(table, key, mode)`, sorted.
    accesses: Vec<(TableId, u64, AccessMode)>,
}

/// Why a workload whose knob caps a table it inserts into cannot run under a deterministic
/// protocol: whether an insert finds a free slot depends on inserts and deletes elsewhere,
/// which no transaction declares, so one executing node may find the table full while the
/// others commit, and a replay of the same epochs may decide it otherwise.
pub fn capped_table_refusal(workload: &str, knob: &str, value: u64, tables: &str) -> String {
    format!(
        "workload {workload} -p {knob}={value} caps {tables}: whether an insert finds a free slot depends on inserts and deletes elsewhere, which no transaction declares, so one node could find it full while the others commit (leave {knob} out: the table grows)"
    )
}

/// A reconnaissance by trial (Calvin's OLLP): the set of every record `tx` touched, each a
/// write unless it only read it. What the trial's logic decided from the records (a logic
/// abort, a key not found) the execution decides again; any other abort is the trial's.
pub fn touched<P: Protocol, T>(
    tx: &Txn<'_, P>,
    trial: Result<T, Abort>,
) -> Result<Option<AccessSet>, Abort> {
    match trial {
        Ok(_) | Err(Abort::NotFound | Abort::UserAbort) => {}
        Err(a) => return Err(a),
    }
    let mode = |a| match a {
        atoll_txn::Access::Read => AccessMode::Read,
        _ => AccessMode::Write,
    };
    Ok(Some(AccessSet::new(
        tx.accesses().into_iter().map(|(t, k, a)| (t, k, mode(a))),
    )))
}

impl AccessSet {
    /// The set of `accesses`; a record named twice keeps its strongest mode.
    pub fn new(accesses: impl IntoIterator<Item = (TableId, u64, AccessMode)>) -> Self {
        let mut v: Vec<_> = accesses.into_iter().collect();
        // Write sorts after Read: keep the last of each record.
        v.sort();
        v.reverse();
        v.dedup_by_key(|a| (a.0, a.1));
        v.reverse();
        AccessSet { accesses: v }
    }

    pub fn accesses(&self) -> &[(TableId, u64, AccessMode)] {
        &self.accesses
    }

    pub fn reads(&self) -> impl Iterator<Item = (TableId, u64)> + '_ {
        self.of(AccessMode::Read)
    }

    pub fn writes(&self) -> impl Iterator<Item = (TableId, u64)> + '_ {
        self.of(AccessMode::Write)
    }

    fn of(&self, mode: AccessMode) -> impl Iterator<Item = (TableId, u64)> + '_ {
        self.accesses
            .iter()
            .filter(move |a| a.2 == mode)
            .map(|a| (a.0, a.1))
    }
}

/// Decodes the words of an input with a leading kind word: a reader that refuses words
/// left over or missing.
pub(crate) struct Words<'a> {
    workload: &'static str,
    words: &'a [u64],
}

impl<'a> Words<'a> {
    pub(crate) fn new(workload: &'static str, words: &'a [u64]) -> Self {
        Words { workload, words }
    }

    pub(crate) fn error(&self, reason: impl Into<String>) -> InputDecodeError {
        InputDecodeError {
            workload: self.workload,
            reason: reason.into(),
        }
    }

    pub(crate) fn next(&mut self) -> Result<u64, InputDecodeError> {
        let (&w, rest) = self
            .words
            .split_first()
            .ok_or_else(|| self.error("ends early"))?;
        self.words = rest;
        Ok(w)
    }

    /// Fails if words are left.
    pub(crate) fn end(&self) -> Result<(), InputDecodeError> {
        if self.words.is_empty() {
            Ok(())
        } else {
            Err(self.error(format!("{} words left over", self.words.len())))
        }
    }
}

/// A benchmark workload.
#[allow(async_fn_in_trait)]
pub trait Workload: Send + Sync + 'static {
    /// The inputs of one transaction, drawn before it runs and reused by its retries.
    type Input: TxnInput;

    const NAME: &'static str;

    /// What it is, in a few words: the CLI's `--workload` help lists it beside the name.
    const ABOUT: &'static str;

    /// Knobs that make a run small enough for the test matrices (few records, so
    /// transactions meet): the end-to-end tests run every workload with these unless they
    /// tune it by name, so a new workload is in every matrix without a test edit.
    const SMALL_PARAMS: &'static [(&'static str, &'static str)];

    /// Whether its transactions delete records (a protocol that cannot is refused before
    /// the run starts).
    const DELETES: bool = false;

    /// Whether its transactions insert records.
    const INSERTS: bool = false;

    /// Whether every transaction's records follow from its input alone
    /// ([`Workload::access_set`] answers), or from a reconnaissance read before it runs
    /// ([`Workload::reconnoiter`]): a deterministic protocol (CALVIN) needs them before the transaction runs and refuses a
    /// workload without.
    const DECLARES_KEYS: bool = false;

    /// Whether it reads only what it writes (every read for update), so its conflicts end on
    /// locks whatever the protocol family: what the test matrix requires a contended run of
    /// it to count beside the family's own conflict aborts.
    const CONFLICTS_ON_LOCKS: bool = false;

    /// Whether its inserts fill a bounded set of slots on purpose (Cycle with a `dyn_slots`
    /// cap), so a full table is part of the workload rather than a limit that stopped the
    /// run: the report's `run.no_limit_reached` does not judge it.
    fn full_table_expected(&self) -> bool {
        false
    }

    /// Whether a table that cannot grow within the memory budget ends the run (a benchmark:
    /// what it measured stops there), or only the insert that asked aborts `table_full`
    /// while the run goes on (a database serving its users' transactions).
    fn stops_at_the_memory_budget(&self) -> bool {
        true
    }

    /// The workload its knobs (`-p name=value`) describe on a cluster of `shape`: parsed and
    /// checked once, into its typed parameters; a bad knob names itself and what is accepted.
    fn configure(p: &Params, shape: &WorkloadShape) -> Result<Self, ParamError>
    where
        Self: Sized;

    /// Transaction type names; `generate` returns an index into this.
    fn txn_types(&self) -> &'static [&'static str];

    /// The tables, for a cluster of `nodes`.
    fn tables(&self, nodes: u16) -> Vec<TableSpec>;

    /// Loads the records that live on `store.node`. The driver sized every table for the
    /// load before allocating, so an error here is the engine's (a sizing bug), reported
    /// with the node, not a panic.
    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError>;

    /// The tables of the records in the largest write set (in stored words) one transaction
    /// can have, one entry per record: every record it writes, inserts, deletes or reads for
    /// update goes into its log record, and the driver sizes each coordinator's log ring
    /// from this before anything runs.
    fn largest_write_set(&self) -> Vec<TableId>;

    /// Heap bytes one coordinator co-routine running this workload takes beside what the
    /// sizing counts elsewhere (its future, buffers and transaction state), at most: the
    /// sizing counts it per co-routine before anything is allocated. Measured (peak RSS
    /// differences, docs/performance.md): SmallBank 8.8 KB, YCSB 22.5 KB, about 37 KB in a
    /// simulated cluster, rounded up.
    const COROUTINE_HEAP_BYTES: u64 = 40 << 10;

    /// The longest one transaction computes between two of its ops (virtual time under the
    /// simulator: its core is busy that long), so the simulator never takes a round of its
    /// co-routines thinking for a hang. 0 for a workload that only touches records.
    fn think_ns_max(&self) -> u64 {
        0
    }

    /// Draws a transaction for a coordinator on `home`.
    fn generate(&self, rng: &mut Rng, nodes: u16, home: NodeId) -> (usize, Self::Input);

    /// The next transaction for a coordinator on `home`, from a source that may have none
    /// yet or none any more (the library's callers submitting transactions): the benchmark
    /// workloads always have one ([`Self::generate`]).
    fn draw(&self, rng: &mut Rng, nodes: u16, home: NodeId) -> Draw<Self::Input> {
        let (ty, input) = self.generate(rng, nodes, home);
        Draw::Ready(ty, input)
    }

    /// How a drawn transaction ended, after its last attempt (a committed one's effect went
    /// to [`Self::record`] first): the library answers the caller waiting on it, and counts
    /// the outcome in the worker's `ledger`.
    fn ended(&self, _ledger: &mut Self::Ledger, _input: Self::Input, _outcome: Outcome) {}

    /// The records `input`'s transaction reads and writes, when they follow from the input
    /// alone (not from what it reads: a scan's keys do not), else `None`.
    fn access_set(&self, input: &Self::Input) -> Option<AccessSet>;

    /// The records of a transaction whose [`Workload::access_set`] is `None`, found by a
    /// reconnaissance run of the reads they follow from, now (Calvin's OLLP), on `tx`, which
    /// is ended without committing; `Ok(None)`: not even so.
    async fn reconnoiter<P: Protocol>(
        &self,
        _tx: &mut Txn<'_, P>,
        _input: &Self::Input,
    ) -> Result<Option<AccessSet>, Abort> {
        Ok(None)
    }

    /// Why this configuration cannot run under a deterministic protocol, if it cannot: an
    /// outcome that depends on state no transaction declares (a capped table's free slots)
    /// would differ between a run and its replay.
    fn sequenced_refusal(&self) -> Option<String> {
        None
    }

    /// What one committed transaction did, as the checks need it (built from the values it
    /// read and wrote, not from what it meant to do).
    type Effect: Send + 'static;

    /// The effects of committed transactions, accumulated per worker, merged per node and
    /// then by the driver, and handed back to every node for its checks: it crosses process
    /// boundaries, so it serializes.
    type Ledger: Default + Clone + Send + Serialize + DeserializeOwned + 'static;

    /// What one node's check of its own records reports to the driver.
    type NodeCheck: Send + Serialize + DeserializeOwned + 'static;

    /// Runs the transaction logic. Its effect is recorded only if it commits.
    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Self::Input,
    ) -> Result<Self::Effect, Abort>;

    /// Adds a committed transaction's effect to a ledger.
    fn record(&self, ledger: &mut Self::Ledger, effect: Self::Effect);

    /// Adds another worker's (or node's) ledger.
    fn merge(&self, into: &mut Self::Ledger, from: Self::Ledger);

    /// Checks the records on `store.node` after a run against the whole cluster's committed
    /// effects; what needs other nodes' records too is reported for the driver to finish.
    fn check_node(&self, store: &Store, ledger: &Self::Ledger) -> Self::NodeCheck;

    /// The verdicts, from every node's part (in node order) and the merged ledger.
    fn check_cluster(&self, parts: Vec<Self::NodeCheck>, ledger: &Self::Ledger)
        -> Vec<CheckResult>;

    /// Both halves at once, over stores in one process (tests).
    fn check(&self, stores: &[Arc<Store>], ledger: &Self::Ledger) -> Vec<CheckResult> {
        let parts = stores.iter().map(|s| self.check_node(s, ledger)).collect();
        self.check_cluster(parts, ledger)
    }

    /// The resolved knobs, for reports.
    fn knobs(&self) -> BTreeMap<String, String>;
}

/// What a co-routine drew from its workload ([`Workload::draw`]).
#[derive(Debug)]
pub enum Draw<I> {
    /// A transaction of type index `.0` to run.
    Ready(usize, I),
    /// None yet: the co-routine lets the others run and asks again.
    Wait,
    /// None any more: the co-routine ends, its transactions drained.
    Done,
}

/// How a drawn transaction ended ([`Workload::ended`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed {
        attempts: u32,
    },
    /// Its last attempt aborted for this reason: not retryable, the attempts used up, or the
    /// run ended.
    Aborted {
        abort: Abort,
        attempts: u32,
    },
    /// An op failed after its log was written: whether it commits is the recovery's to say,
    /// and this run stops.
    Unknown,
}

/// A workload's declarations ([`Workload`]'s constants), by [`WorkloadKind`].
struct Declared {
    name: &'static str,
    about: &'static str,
    small_params: &'static [(&'static str, &'static str)],
    deletes: bool,
    inserts: bool,
    declares_keys: bool,
    conflicts_on_locks: bool,
}

impl Declared {
    fn of<W: Workload>() -> Declared {
        Declared {
            name: W::NAME,
            about: W::ABOUT,
            small_params: W::SMALL_PARAMS,
            deletes: W::DELETES,
            inserts: W::INSERTS,
            declares_keys: W::DECLARES_KEYS,
            conflicts_on_locks: W::CONFLICTS_ON_LOCKS,
        }
    }
}

/// The workloads a run can select, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WorkloadKind {
    SmallBank,
    Ycsb,
    Cycle,
    Tpcc,
    Micro,
    Skew,
    Checkout,
}

/// What a workload's knobs are read against: the cluster it runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkloadShape {
    /// Nodes holding records (the memory nodes on the shared-data architecture).
    pub nodes: u16,
    /// Worker threads per node.
    pub threads: u16,
    /// `(index, count)`: this process is the `index`-th of `count` processes drawing
    /// transactions for the same nodes (`atoll cluster`'s node processes); `(0, 1)` when one
    /// process draws them all. A workload whose inserted keys must not collide across
    /// processes (checkout's orders) stripes them by it.
    pub stripe: (u16, u16),
}

impl WorkloadShape {
    /// One process drawing every transaction.
    pub fn new(nodes: u16, threads: u16) -> Self {
        WorkloadShape {
            nodes,
            threads,
            stripe: (0, 1),
        }
    }
}

/// Work done with a configured workload, its type chosen at run time
/// ([`WorkloadKind::dispatch`]), as the protocols' visitor does for protocols.
pub trait WorkloadVisitor {
    type Out;
    fn visit<W: Workload>(self, w: W) -> Self::Out;
}

impl WorkloadKind {
    /// Configures the workload from its knobs on `shape` and calls `v` with it: the one place
    /// that maps a selected workload to its code (a run, a node process, a sizing all go
    /// through it).
    pub fn dispatch<V: WorkloadVisitor>(
        self,
        p: &Params,
        shape: &WorkloadShape,
        v: V,
    ) -> Result<V::Out, ParamError> {
        fn with<W: Workload, V: WorkloadVisitor>(
            p: &Params,
            shape: &WorkloadShape,
            v: V,
        ) -> Result<V::Out, ParamError> {
            Ok(v.visit(W::configure(p, shape)?))
        }
        match self {
            WorkloadKind::SmallBank => with::<smallbank::SmallBank, V>(p, shape, v),
            WorkloadKind::Ycsb => with::<ycsb::Ycsb, V>(p, shape, v),
            WorkloadKind::Cycle => with::<cycle::Cycle, V>(p, shape, v),
            WorkloadKind::Tpcc => with::<tpcc::Tpcc, V>(p, shape, v),
            WorkloadKind::Micro => with::<micro::Micro, V>(p, shape, v),
            WorkloadKind::Skew => with::<skew::Skew, V>(p, shape, v),
            WorkloadKind::Checkout => with::<checkout::Checkout, V>(p, shape, v),
        }
    }

    pub const ALL: [WorkloadKind; 7] = [
        WorkloadKind::SmallBank,
        WorkloadKind::Ycsb,
        WorkloadKind::Cycle,
        WorkloadKind::Tpcc,
        WorkloadKind::Micro,
        WorkloadKind::Skew,
        WorkloadKind::Checkout,
    ];

    /// What a workload declares of itself, read without configuring it.
    fn declared(self) -> Declared {
        match self {
            WorkloadKind::SmallBank => Declared::of::<smallbank::SmallBank>(),
            WorkloadKind::Ycsb => Declared::of::<ycsb::Ycsb>(),
            WorkloadKind::Cycle => Declared::of::<cycle::Cycle>(),
            WorkloadKind::Tpcc => Declared::of::<tpcc::Tpcc>(),
            WorkloadKind::Micro => Declared::of::<micro::Micro>(),
            WorkloadKind::Skew => Declared::of::<skew::Skew>(),
            WorkloadKind::Checkout => Declared::of::<checkout::Checkout>(),
        }
    }

    pub fn name(self) -> &'static str {
        self.declared().name
    }

    /// [`Workload::DELETES`] of the workload.
    pub fn deletes(self) -> bool {
        self.declared().deletes
    }

    /// [`Workload::INSERTS`] of the workload.
    pub fn inserts(self) -> bool {
        self.declared().inserts
    }

    /// [`Workload::DECLARES_KEYS`] of the workload.
    pub fn declares_keys(self) -> bool {
        self.declared().declares_keys
    }

    /// [`Workload::CONFLICTS_ON_LOCKS`] of the workload.
    pub fn conflicts_on_locks(self) -> bool {
        self.declared().conflicts_on_locks
    }

    pub fn parse(s: &str) -> Option<WorkloadKind> {
        Self::ALL
            .into_iter()
            .find(|w| w.name() == s.to_ascii_lowercase())
    }

    /// [`Workload::ABOUT`] of the workload.
    pub fn about(self) -> &'static str {
        self.declared().about
    }

    /// [`Workload::SMALL_PARAMS`] of the workload.
    pub fn small_params(self) -> &'static [(&'static str, &'static str)] {
        self.declared().small_params
    }

    /// Every workload with what it is, for the CLI's help.
    pub fn described() -> String {
        Self::ALL
            .iter()
            .map(|w| match w.about() {
                "" => w.name().to_string(),
                about => format!("{} ({about})", w.name()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn accepted() -> String {
        Self::ALL
            .iter()
            .map(|w| w.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Mismatches a check lists by name before it only counts the rest.
pub const EXAMPLES_MAX: usize = 5;

/// Examples kept in a list of them: up to [`EXAMPLES_MAX`].
pub fn push_example(examples: &mut Vec<String>, example: impl FnOnce() -> String) {
    if examples.len() < EXAMPLES_MAX {
        examples.push(example());
    }
}

/// One node's part of the checks every workload shares, from the final state of its
/// tables.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StorageCheck {
    pub records: u64,
    /// Live records whose payload fails its check word, with the first few named.
    pub torn: u64,
    pub torn_examples: Vec<String>,
    /// Live records still locked, with the first few named.
    pub locked: u64,
    pub locked_examples: Vec<String>,
    /// Tables with an overflow area (NAM-DB's), on this node.
    #[serde(default)]
    pub overflow_tables: u64,
    /// Old headers whose moved bit is set.
    #[serde(default)]
    pub moved: u64,
    /// Of those, ones whose version no overflow entry holds (a true copy: that commit id
    /// and sealed version, a payload intact for the record's key and tagged by that commit),
    /// with the first few named.
    #[serde(default)]
    pub moved_uncopied: u64,
    #[serde(default)]
    pub moved_uncopied_examples: Vec<String>,
    /// Moved bits in tables whose overflow ring has come round (its wrap frees the oldest
    /// entries, so a copy may be gone by design): not checked.
    #[serde(default)]
    pub moved_unchecked: u64,
    /// A digest of the node's live records (table, key, version word and payload), whatever
    /// order their slots are in: two runs that installed the same writes have the same.
    #[serde(default)]
    pub digest: u64,
    /// The protocol family's checks of what it keeps beside the records
    /// ([`atoll_txn::FamilyConfig::check_node`]).
    #[serde(default)]
    pub family: Vec<FamilyCheck>,
}

/// One node's part of a family's check ([`atoll_txn::knobs::StateCheck`]), as it travels.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FamilyCheck {
    pub name: String,
    pub what: String,
    pub checked: u64,
    pub failed: u64,
    pub examples: Vec<String>,
}

impl From<atoll_txn::knobs::StateCheck> for FamilyCheck {
    fn from(c: atoll_txn::knobs::StateCheck) -> Self {
        FamilyCheck {
            name: c.name.into(),
            what: c.what.into(),
            checked: c.checked,
            failed: c.failed,
            examples: c.examples,
        }
    }
}

/// The family's checks over every node's part, by name in first-seen order.
fn family_checks(parts: &[StorageCheck]) -> Vec<CheckResult> {
    let mut all: Vec<FamilyCheck> = Vec::new();
    for c in parts.iter().flat_map(|p| &p.family) {
        let i = match all.iter().position(|a| a.name == c.name) {
            Some(i) => i,
            None => {
                all.push(FamilyCheck {
                    name: c.name.clone(),
                    what: c.what.clone(),
                    ..FamilyCheck::default()
                });
                all.len() - 1
            }
        };
        let a = &mut all[i];
        a.checked += c.checked;
        a.failed += c.failed;
        for e in &c.examples {
            push_example(&mut a.examples, || e.clone());
        }
    }
    all.into_iter()
        .map(|a| CheckResult {
            name: a.name,
            binds: Binds::Always,
            passed: a.failed == 0,
            detail: if a.checked == 0 {
                // A run with nothing of the kind (MVCC keeping no old slot, a record never
                // written twice) measured nothing: it passes without a claim.
                format!("not judged: no item of the run to check ({})", a.what)
            } else if a.failed == 0 {
                format!("all {} hold: {}", a.checked, a.what)
            } else {
                format!(
                    "{} of {} fail ({}): {}",
                    a.failed,
                    a.checked,
                    a.what,
                    a.examples.join(", ")
                )
            },
        })
        .collect()
}

/// One word folded into a running hash (SplitMix64's finalizer over the sum).
fn fold(h: u64, w: u64) -> u64 {
    let mut z = h.wrapping_add(w).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Checks `store`'s live records: each payload passes its check word (one write's, for this
/// record: no torn or misplaced payload survived), and no lock is left held.
pub fn storage_check_node(s: &Store) -> StorageCheck {
    let mut c = StorageCheck::default();
    let mut tuple = Vec::new();
    for t in (0..s.catalog.table_count()).map(|t| TableId(t as u16)) {
        let layout = *s.catalog.layout(t);
        tuple.resize(layout.tuple_words as usize, 0);
        for idx in 0..s.used_slots(t) {
            s.read_tuple(t, idx, &mut tuple);
            if tuple[H_VERSION as usize] & VERSION_ABSENT != 0 {
                continue;
            }
            c.records += 1;
            let key = tuple[H_KEY as usize];
            // Summed, so the slots' order (inserts racing for them) does not matter.
            let record = tuple[HEADER_WORDS as usize..].iter().fold(
                fold(fold(t.0 as u64, key), tuple[H_VERSION as usize]),
                |h, &w| fold(h, w),
            );
            c.digest = c.digest.wrapping_add(record);
            let name = || format!("{}:{key} on node {}", s.catalog.spec(t).name, s.node.0);
            if !payload_intact(t, key, &tuple[HEADER_WORDS as usize..]) {
                c.torn += 1;
                push_example(&mut c.torn_examples, name);
            }
            if s.catalog.lock_word().held(tuple[H_LOCK as usize]) {
                c.locked += 1;
                push_example(&mut c.locked_examples, name);
            }
        }
        // A compute node of a shared-data run registers no table memory.
        if layout.overflow_entries > 0 && s.region(t).len_words() > 0 {
            moved_versions_copied(s, t, &mut c);
        }
    }
    c
}

/// The overflow part of [`storage_check_node`] for table `t`: every old header whose moved
/// bit is set has a true copy in the overflow area (the mover writes the copy before it
/// sets the bit), unless the ring has come round.
fn moved_versions_copied(s: &Store, t: TableId, c: &mut StorageCheck) {
    let layout = *s.catalog.layout(t);
    let region = s.region(t);
    c.overflow_tables += 1;
    let entry_words = layout.overflow_entry_words() as usize;
    let mut entry = vec![0u64; entry_words];
    // (commit id, sealed version) -> the entries holding it.
    let mut copies: std::collections::HashMap<(u64, u64), Vec<u32>> = Default::default();
    for e in 0..layout.overflow_entries {
        region.read_into(layout.overflow_entry_offset(e) as usize, &mut entry);
        if entry[2] != 0 {
            copies.entry((entry[1], entry[2])).or_default().push(e);
        }
    }
    // The mover fills the ring from entry 0: with the last written, it has come round (or
    // is about to), and the oldest copies may be gone.
    region.read_into(
        layout.overflow_entry_offset(layout.overflow_entries - 1) as usize,
        &mut entry,
    );
    let wrapped = entry[2] != 0;
    let mut headers = vec![0u64; layout.headers_words() as usize];
    for idx in 0..s.used_slots(t) {
        region.read_into(layout.record_offset(idx) as usize, &mut headers);
        let key = headers[H_KEY as usize];
        for j in 0..layout.version_slots - 1 {
            let at = layout.old_header_offset(j) as usize;
            let (cid, sealed) = (headers[at], headers[at + 1]);
            if sealed == 0 || cid & OLD_MOVED == 0 {
                continue;
            }
            c.moved += 1;
            if wrapped {
                c.moved_unchecked += 1;
                continue;
            }
            let cid = cid & !OLD_MOVED;
            let copied = copies.get(&(cid, sealed)).is_some_and(|es| {
                es.iter().any(|&e| {
                    region.read_into(layout.overflow_entry_offset(e) as usize, &mut entry);
                    let payload = &entry[OVERFLOW_ENTRY_HEADER_WORDS as usize..];
                    payload_intact(t, key, payload) && payload[P_TAG as usize] == cid
                })
            });
            if !copied {
                c.moved_uncopied += 1;
                push_example(&mut c.moved_uncopied_examples, || {
                    format!(
                        "{}:{key} on node {} (old slot {j}, commit id {cid:#x})",
                        s.catalog.spec(t).name,
                        s.node.0
                    )
                });
            }
        }
    }
}

/// The shared checks' verdicts from every node's part.
pub fn storage_check_cluster(parts: &[StorageCheck]) -> Vec<CheckResult> {
    let mut all = StorageCheck::default();
    for p in parts {
        all.records += p.records;
        all.torn += p.torn;
        all.locked += p.locked;
        all.overflow_tables += p.overflow_tables;
        all.moved += p.moved;
        all.moved_uncopied += p.moved_uncopied;
        all.moved_unchecked += p.moved_unchecked;
        for e in &p.moved_uncopied_examples {
            push_example(&mut all.moved_uncopied_examples, || e.clone());
        }
        for e in &p.torn_examples {
            push_example(&mut all.torn_examples, || e.clone());
        }
        for e in &p.locked_examples {
            push_example(&mut all.locked_examples, || e.clone());
        }
    }
    let records = all.records;
    let mut checks = vec![
        CheckResult {
            name: "storage.payloads_intact".into(),
            binds: Binds::Always,
            passed: all.torn == 0,
            detail: if all.torn == 0 {
                format!("all {records} live records hold one write's payload for their own key")
            } else {
                format!(
                    "{} of {records} live records hold a payload that fails its check word \
                     (torn, or another record's): {}",
                    all.torn,
                    all.torn_examples.join(", ")
                )
            },
        },
        CheckResult {
            name: "storage.no_lock_left_held".into(),
            binds: Binds::Always,
            passed: all.locked == 0,
            detail: if all.locked == 0 {
                format!("none of {records} live records is locked")
            } else {
                format!(
                    "{} records are still locked: {}",
                    all.locked,
                    all.locked_examples.join(", ")
                )
            },
        },
    ];
    checks.extend(family_checks(parts));
    if all.overflow_tables > 0 {
        checks.push(CheckResult {
            name: "storage.moved_versions_copied".into(),
            binds: Binds::Always,
            passed: all.moved_uncopied == 0,
            detail: if all.moved_uncopied == 0 {
                format!(
                    "each of {} old versions marked moved has its copy in the overflow area \
                     ({} more not checked: their ring came round)",
                    all.moved - all.moved_unchecked,
                    all.moved_unchecked
                )
            } else {
                format!(
                    "{} of {} old versions marked moved have no copy in the overflow area: {}",
                    all.moved_uncopied,
                    all.moved - all.moved_unchecked,
                    all.moved_uncopied_examples.join(", ")
                )
            },
        });
    }
    checks
}

/// [`storage_check_node`] and [`storage_check_cluster`] over stores in one process (tests).
pub fn storage_checks(stores: &[Arc<Store>]) -> Vec<CheckResult> {
    let parts: Vec<_> = stores.iter().map(|s| storage_check_node(s)).collect();
    storage_check_cluster(&parts)
}

/// A map keyed by record keys (integers, table ids) that a benchmark fills itself: committed
/// effects per record, recorded once per committed transaction, where SipHash cost ~300-560
/// instructions a transaction (issue #9).
pub type KeyMap<K, V> = atoll_fabric::IntMap<K, V>;

#[cfg(test)]
mod tests {
    use super::*;

    fn check(passed: bool, binds: Binds) -> CheckResult {
        CheckResult {
            name: "probe".into(),
            passed,
            detail: "2 pairs below zero".into(),
            binds,
        }
    }

    #[test]
    fn a_failed_check_binding_serializable_runs_fails_them_and_passes_under_snapshot_isolation_saying_so(
    ) {
        let serializable = check(false, Binds::Serializable).under(Isolation::Serializable);
        assert!(!serializable.passed);
        assert_eq!(
            serializable.detail,
            "2 pairs below zero (a serializable protocol allows none)"
        );
        let snapshot = check(false, Binds::Serializable).under(Isolation::Snapshot);
        assert!(snapshot.passed);
        assert_eq!(
            snapshot.detail,
            "2 pairs below zero (allowed under snapshot isolation)"
        );
    }

    #[test]
    fn a_check_binding_every_run_fails_under_either_isolation_and_a_passed_one_is_left_alone() {
        for isolation in Isolation::ALL {
            assert_eq!(
                check(false, Binds::Always).under(isolation),
                check(false, Binds::Always)
            );
            assert_eq!(
                check(true, Binds::Serializable).under(isolation),
                check(true, Binds::Serializable)
            );
        }
    }

    #[test]
    fn workloads_every_small_parameter_set_configures_on_a_small_cluster() {
        struct Named;
        impl WorkloadVisitor for Named {
            type Out = &'static str;
            fn visit<W: Workload>(self, _w: W) -> &'static str {
                W::NAME
            }
        }
        for w in WorkloadKind::ALL {
            let p: Params = w
                .small_params()
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            let shape = WorkloadShape::new(2, 2);
            let name = w.dispatch(&p, &shape, Named);
            assert_eq!(name.as_deref(), Ok(w.name()), "{}: {:?}", w.name(), p);
            assert!(!w.about().is_empty(), "{} says what it is", w.name());
        }
    }
}
