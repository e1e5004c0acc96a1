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
use std::sync::{Arc, Mutex, OnceLock};

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
    /// Its attempt: 1, or more when its records changed since its reconnaissance
    /// (`Abort::KeysChanged`) and it is sequenced again.
    pub attempt: u32,
}

/// How lanes collect an epoch: for `epoch_ns` of the lane's clock, at most `batch_max`
/// requests of at most `words_max` words in all ([`SeqInput::words`]; a one-sided dispatch
/// WRITEs the batch into a slot of fixed size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeqShape {
    pub epoch_ns: u64,
    pub batch_max: u32,
    pub words_max: u64,
}

/// Words of a request beside its input and records, counted generously (a family's
/// encoding of a request takes at most this many more).
pub const SEQ_REQUEST_FIXED_WORDS: u64 = 8;

impl SeqInput {
    /// Its size as a batch carries it: the fixed words, the input, three words a record.
    pub fn words(&self) -> u64 {
        SEQ_REQUEST_FIXED_WORDS + self.input.len() as u64 + 3 * self.accesses.len() as u64
    }
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
    /// Its attempt ([`SeqInput::attempt`]).
    pub attempt: u32,
    /// When a lane took it in order here, and when every value it reads was here (its
    /// latency's parts).
    pub taken_ns: u64,
    pub gathered_ns: u64,
    /// This node records it (history, effect, counts): its first active participant.
    pub records: bool,
    /// It runs in the epoch's second pass (CALVIN's `lane` order: it conflicts with an
    /// earlier lane's transaction).
    pub second_pass: bool,
}

/// What a node's participant side and its coordinators share of a protocol family (one per
/// node, whatever the backend): each family keeps one value of its own type here, made on
/// first use. A slot per family id, so that a lookup on the hot path takes no lock.
pub struct FamilyNodes {
    slots: Box<[OnceLock<Arc<dyn Any + Send + Sync>>]>,
}

impl Default for FamilyNodes {
    fn default() -> Self {
        let ids = u8::MAX as usize + 1;
        FamilyNodes {
            slots: (0..ids).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl FamilyNodes {
    /// The family's node state, made with `Default` on first use.
    pub fn get<T: Any + Send + Sync + Default>(&self, family: crate::msg::FamilyId) -> Arc<T> {
        let s = self.slots[family.0 as usize].get_or_init(|| Arc::new(T::default()));
        s.clone()
            .downcast::<T>()
            .unwrap_or_else(|_| panic!("family {} keeps node state of another type", family.0))
    }
}

/// Requests an [`EpochLog`] holds at most: a log past it stops recording and says so (a
/// replay of it is refused), so a long run cannot grow it without bound.
pub const EPOCH_LOG_REQUESTS_MAX: usize = 10_000_000;

/// Every lane's batches of a run, by epoch, node and lane: what a sequenced protocol's
/// inputs and order are made of. Recorded from one run and replayed by another (with
/// other timing, other faults), it must end in the same database state.
#[derive(Default)]
pub struct EpochLog {
    inner: Mutex<LogInner>,
}

#[derive(Default)]
struct LogInner {
    /// `(epoch, node, lane)` -> (the lane's last batch, its requests).
    batches: std::collections::BTreeMap<(u64, u16, u32), (bool, Vec<SeqInput>)>,
    requests: usize,
    overflowed: bool,
}

impl std::fmt::Debug for EpochLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.inner.lock().expect("no poisoned epoch log");
        write!(
            f,
            "EpochLog({} batches, {} requests{})",
            s.batches.len(),
            s.requests,
            if s.overflowed { ", overflowed" } else { "" }
        )
    }
}

impl EpochLog {
    /// Node `node`'s lane `lane` dispatched `requests` in `epoch`.
    pub fn record(&self, epoch: u64, node: u16, lane: u32, last: bool, requests: &[SeqInput]) {
        let mut s = self.inner.lock().expect("no poisoned epoch log");
        if s.overflowed || s.requests + requests.len() > EPOCH_LOG_REQUESTS_MAX {
            s.overflowed = true;
            return;
        }
        s.requests += requests.len();
        s.batches
            .insert((epoch, node, lane), (last, requests.to_vec()));
    }

    /// The batch node `node`'s lane `lane` dispatched in `epoch`, and whether it was its
    /// last; `None` if it dispatched none then.
    pub fn batch(&self, epoch: u64, node: u16, lane: u32) -> Option<(bool, Vec<SeqInput>)> {
        let s = self.inner.lock().expect("no poisoned epoch log");
        s.batches.get(&(epoch, node, lane)).cloned()
    }

    /// Batches and requests recorded; whether the log stopped recording at its bound.
    pub fn size(&self) -> (usize, usize, bool) {
        let s = self.inner.lock().expect("no poisoned epoch log");
        (s.batches.len(), s.requests, s.overflowed)
    }
}

/// What a run does with an [`EpochLog`]: records its lanes' batches into it, or dispatches
/// them from it instead of drawing (a replay).
#[derive(Clone, Debug)]
pub enum EpochLogMode {
    Record(Arc<EpochLog>),
    Replay(Arc<EpochLog>),
}
