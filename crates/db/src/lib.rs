//! Atoll as a library: declare tables, open a cluster of nodes (real threads in this
//! process, the deterministic simulator, or OS processes over UCX), and run your own
//! transactions on it under any of the engine's protocols.
//!
//! A transaction is a closure that reads and writes through a [`Tx`]; it runs on one of the
//! engine's co-routines, and re-runs when the engine aborts it on a conflict, up to
//! [`Options::attempts_max`] attempts, with randomized back-off. The closure's own error
//! aborts it and comes back as [`TxError::User`]; a node failure and an outcome the engine
//! cannot know are errors of their own ([`TxError`]).
//!
//! ```
//! use atoll_db::{Db, Options, Schema, Table, TxError};
//!
//! let mut schema = Schema::new();
//! let accounts = schema.table(Table::new("accounts", 1));
//! schema.load(move |l| {
//!     for id in 0..100 {
//!         l.put(accounts, id, &[1_000]);
//!     }
//! });
//! let db = Db::open(Options::default(), schema).unwrap();
//! // Move 10 from account 1 to account 2, unless account 1 has less.
//! let moved: Result<u64, TxError<&str>> = db.transact(move |tx| {
//!     Box::pin(async move {
//!         let from = tx.get_for_update(accounts, 1).await?[0];
//!         let to = tx.get_for_update(accounts, 2).await?[0];
//!         if from < 10 {
//!             return Err(TxError::User("insufficient funds"));
//!         }
//!         tx.put(accounts, 1, &[from - 10])?;
//!         tx.put(accounts, 2, &[to + 10])?;
//!         Ok(from - 10)
//!     })
//! });
//! assert_eq!(moved.unwrap(), 990);
//! let report = db.close().unwrap();
//! assert!(report.passed);
//! ```
//!
//! For a deterministic run, [`run`] draws transactions from a generator on every
//! co-routine, on any fabric, the simulator with its faults included: the same seed gives
//! the same transactions in the same order. With [`Options::processes`] it runs on one OS
//! process per node over UCX, as `atoll cluster` does, each node being this program started
//! again.

mod processes;
mod record;
mod schema;
mod source;
mod tx;

pub use atoll_fabric::rng::Rng;
pub use atoll_fabric::{NodeId, Words};
pub use atoll_protocols::ProtocolKind as Protocol;
pub use atoll_protocols::UnknownProtocol;
pub use atoll_runner::config::{Fabric, FaultConfig};
pub use atoll_runner::{Report, RunConfig};
pub use atoll_storage::TableId;
pub use atoll_txn::{Abort, Isolation, Plan};
pub use record::{Declared, Key};
pub use schema::{
    key_hash_default, KeyHash, Loader, Schema, Table, TxnType, KEY_BYTES_MAX, RECORD_WORDS_MAX,
    TABLES_MAX, TXN_TYPES_MAX, WRITE_SET_MAX_DEFAULT, WRITE_SET_MAX_LIMIT,
};
pub use tx::{OpError, Tx, TxError, TxFuture, SCAN_LIMIT_MAX};

use source::{Answer, AnyBox, Body, Counters, JobRef, Library, Queue, Source, Stop};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};

/// Transactions submitted and not yet taken by a co-routine, at most: a caller submitting
/// beyond it waits.
pub const QUEUE_JOBS_MAX: usize = 4096;

/// How to run the database: the engine's whole run configuration ([`RunConfig`], the same
/// as `atoll bench`'s flags), of which the workload, duration and warm-up are the library's.
#[derive(Clone, Debug)]
pub struct Options {
    pub run: RunConfig,
    /// [`run`] on a cluster of OS processes over UCX with this transport, one node each
    /// ([`Options::processes`]); `None`: in this process.
    pub processes: Option<atoll_cluster::Transports>,
}

impl Default for Options {
    /// Two in-process nodes, one worker thread each with 8 co-routines, under OCC.
    fn default() -> Self {
        let run = RunConfig {
            warmup_s: 0.0,
            ..RunConfig::default()
        };
        Options {
            run,
            processes: None,
        }
    }
}

impl Options {
    pub fn nodes(mut self, nodes: u16) -> Self {
        self.run.nodes = nodes;
        self
    }
    pub fn threads(mut self, threads: u16) -> Self {
        self.run.threads = threads;
        self
    }
    pub fn coroutines(mut self, coroutines: u16) -> Self {
        self.run.coroutines = coroutines;
        self
    }
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.run.protocol = protocol;
        self
    }
    /// Attempts of one transaction, at most, before it ends with [`TxError::Aborted`].
    pub fn attempts_max(mut self, attempts: u32) -> Self {
        self.run.attempts_max = attempts;
        self
    }
    /// Records every attempt's reads and writes to `path`, for `atoll check-history`.
    pub fn history(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.run.record_history = true;
        self.run.history_file = Some(path.into());
        self
    }
    /// The deterministic simulator with network profile `net` (`edr-ib`, ...), its faults
    /// as `atoll bench --faults` takes them, and `seed`.
    pub fn simulated(mut self, net: &str, faults: &str, seed: u64) -> Result<Self, String> {
        let faults = FaultConfig::parse(faults).map_err(|e| e.to_string())?;
        self.run.fabric = Fabric::Sim {
            net: net.to_string(),
            faults,
        };
        self.run.seed = seed;
        Ok(self)
    }
    /// [`run`] on one OS process per node, as `atoll cluster` runs, over UCX's `transport`
    /// (`shm`: shared memory, one-sided ops as loads and atomics; `tcp`: sockets). Each node
    /// process is this program, started again with its arguments and told by the
    /// environment ([`atoll_cluster::LIBRARY_NODE_ENV`]) which node it is: its code before
    /// `run` must build the same options, schema and generator (nodes check the options
    /// and the tables against the coordinator's and refuse to serve if they differ), and
    /// in a node process `run` serves the node and exits the process. Nodes' standard
    /// output is discarded; their standard error is this process's.
    pub fn processes(mut self, transport: &str) -> Result<Self, String> {
        let t = atoll_cluster::parse_transport(transport).map_err(|e| e.0)?;
        self.processes = Some(t);
        Ok(self)
    }
    /// The isolation the protocol gives: serializable, or snapshot isolation (write skew
    /// allowed) under RSI and NAM-DB.
    pub fn isolation(&self) -> Isolation {
        self.run.protocol.isolation()
    }
}

/// Why a database could not open or run.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The options or the schema, refused before anything was allocated.
    #[error("{0}")]
    Config(String),
    /// The engine stopped (a panic, a node failure after a log), with its message.
    #[error("the run failed: {0}")]
    Run(String),
}

/// A transaction for a driven [`run`]: its body and what to do with its outcome.
pub struct Job(source::Job);

impl Job {
    /// A transaction of type `ty` running `f`; `done` gets its outcome.
    pub fn new<T, E, F>(
        ty: TxnType,
        f: F,
        done: impl FnOnce(Result<T, TxError<E>>) + Send + 'static,
    ) -> Job
    where
        T: Send + 'static,
        E: Send + 'static,
        F: for<'t, 'u> Fn(&'t mut Tx<'u>) -> TxFuture<'t, T, E> + Send + Sync + 'static,
    {
        Job(source::Job::new(
            ty.0,
            body(f),
            Box::new(move |a| done(typed(a))),
        ))
    }

    /// The transaction declares its keys up front ([`Db::transact_declared`]).
    pub fn declared(mut self, keys: Declared) -> Job {
        self.0.declared = Some(keys);
        self
    }
}

/// Erases a closure's types into the body a co-routine runs.
fn body<T, E, F>(f: F) -> Body
where
    T: Send + 'static,
    E: Send + 'static,
    F: for<'t, 'u> Fn(&'t mut Tx<'u>) -> TxFuture<'t, T, E> + Send + Sync + 'static,
{
    Box::new(move |tx| {
        let fut = f(tx);
        Box::pin(async move {
            match fut.await {
                Ok(v) => Ok(Box::new(v) as AnyBox),
                Err(TxError::User(e)) => Err(Stop::User(Box::new(e))),
                Err(TxError::Aborted { reason, .. }) => Err(Stop::Abort(reason)),
                Err(TxError::NodeFailed) => Err(Stop::Abort(Abort::NodeFailed)),
                Err(TxError::Misuse(m)) => Err(Stop::Misuse(m)),
                Err(TxError::KeyCollision(m)) => Err(Stop::KeyCollision(m)),
                Err(TxError::Unknown | TxError::Closed) => Err(Stop::Misuse(
                    "a transaction returned TxError::Unknown or Closed, which only the engine gives"
                        .into(),
                )),
            }
        })
    })
}

/// An answer with its types restored (the body erased them from these very types).
fn typed<T: 'static, E: 'static>(a: Answer) -> Result<T, TxError<E>> {
    match a {
        Answer::Committed(v) => Ok(*v.downcast::<T>().expect("a committed value of its type")),
        Answer::User(e) => Err(TxError::User(
            *e.downcast::<E>().expect("a user error of its type"),
        )),
        Answer::Misuse(m) => Err(TxError::Misuse(m)),
        Answer::KeyCollision(m) => Err(TxError::KeyCollision(m)),
        Answer::Aborted { reason, attempts } => Err(TxError::Aborted { reason, attempts }),
        Answer::NodeFailed => Err(TxError::NodeFailed),
        Answer::Unknown => Err(TxError::Unknown),
        Answer::Closed => Err(TxError::Closed),
    }
}

/// What the library's transactions did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub committed: u64,
    /// Attempts run, committed or not.
    pub attempts: u64,
    /// Attempts of committed transactions beyond their first: conflicts retried.
    pub retried: u64,
    /// Transactions whose closure returned its own error, its reads confirmed by committing
    /// them alone (the engine's report counts these among its commits).
    pub user_aborted: u64,
    /// Transactions that ended aborted by the engine (retries used up, or not retryable).
    pub gave_up: u64,
}

fn stats_of(c: &Counters) -> Stats {
    Stats {
        committed: c.committed.load(Ordering::Relaxed),
        attempts: c.attempts.load(Ordering::Relaxed),
        retried: c.retried.load(Ordering::Relaxed),
        user_aborted: c.user_aborted.load(Ordering::Relaxed),
        gave_up: c.gave_up.load(Ordering::Relaxed),
    }
}

/// The library's workload for `schema` on `cfg`'s cluster, drawing from `source`.
fn library(cfg: &RunConfig, schema: Schema, source: Source) -> Result<Library, DbError> {
    if cfg.protocol.sequenced() {
        return Err(DbError::Config(format!(
            "--protocol {} does not run the library's transactions: every node a transaction writes executes it, and a transaction is a closure of the process that submitted it, which other nodes cannot run (use another protocol)",
            cfg.protocol.name()
        )));
    }
    schema.validate().map_err(DbError::Config)?;
    let nodes = cfg.memory_nodes();
    let counts = schema.count_load(nodes).map_err(DbError::Config)?;
    let specs = schema.specs(nodes, &counts);
    let tables = schema.metas();
    // Named once per database: a report's per-type counters hold `&'static str`.
    let types: Vec<&'static str> = schema
        .txn_types
        .iter()
        .map(|s| &*Box::leak(s.clone().into_boxed_str()))
        .collect();
    Ok(Library {
        schema,
        specs,
        tables,
        types: Box::leak(types.into_boxed_slice()),
        source,
        counters: Arc::default(),
        merged: Arc::default(),
        remote: false,
    })
}

fn stats_of_ledger(l: &source::Ledger) -> Stats {
    Stats {
        committed: l.committed,
        attempts: l.attempts,
        retried: l.retried,
        user_aborted: l.user_aborted,
        gave_up: l.gave_up,
    }
}

/// Runs transactions from `generator` on every co-routine for `cfg`'s duration (or until it
/// returns `None` on each), on `cfg`'s fabric or on processes ([`Options::processes`]),
/// and returns the run's report with its checks and what the transactions did, merged
/// from every node.
pub fn run(
    options: Options,
    schema: Schema,
    generator: impl Fn(&mut Rng, NodeId) -> Option<Job> + Send + Sync + 'static,
) -> Result<(Report, Stats), DbError> {
    if let Some(node) = std::env::var_os(atoll_cluster::LIBRARY_NODE_ENV) {
        processes::serve_node(&node, options, schema, Box::new(generator))
    }
    let mut w = library(&options.run, schema, Source::Generator(Box::new(generator)))?;
    let merged = w.merged.clone();
    let report = match options.processes {
        None => atoll_runner::run_workload(&options.run, w, &|_| {}).map_err(run_error)?,
        Some(t) => {
            w.remote = true;
            processes::coordinate(&options, w, t)?
        }
    };
    let ledger = *merged.lock().expect("no poisoned ledger");
    let stats = ledger.map_or_else(Stats::default, |l| stats_of_ledger(&l));
    Ok((report, stats))
}

fn run_error(e: atoll_runner::RunError) -> DbError {
    match e {
        atoll_runner::RunError::Config(c) => DbError::Config(c.0),
        other => DbError::Run(other.to_string()),
    }
}

/// An open database on real threads in this process: any thread may run transactions on it.
pub struct Db {
    queue: Arc<Queue>,
    counters: Arc<Counters>,
    isolation: Isolation,
    engine: Option<std::thread::JoinHandle<Result<Report, DbError>>>,
}

impl Db {
    /// Lays out, loads and starts the cluster `options` describes with `schema`'s tables.
    /// The run lasts until [`Db::close`] (at most [`atoll_runner::config::run_s_max`]
    /// seconds: a timestamp's clock).
    pub fn open(options: Options, schema: Schema) -> Result<Db, DbError> {
        let on_processes = options.processes.is_some();
        let mut cfg = options.run;
        if !matches!(cfg.fabric, Fabric::InProc) || on_processes {
            return Err(DbError::Config(
                "Db::open runs on real threads in this process (a transaction is a closure of this process's): for the simulator or a cluster of processes, drive a run with atoll_db::run"
                    .into(),
            ));
        }
        cfg.warmup_s = 0.0;
        cfg.duration_s = atoll_runner::config::run_s_max();
        // One progress interval for the whole session: an idle stretch is no stalled run.
        cfg.progress_interval_s = atoll_runner::config::PROGRESS_INTERVAL_S_MAX;
        cfg.validate().map_err(|e| DbError::Config(e.0))?;
        let queue = Arc::new(Queue::new(QUEUE_JOBS_MAX));
        let w = library(&cfg, schema, Source::Queue(queue.clone()))?;
        atoll_runner::sizing::size(&cfg, &w, cfg.family_config().version_slots())
            .map_err(|e| DbError::Config(e.0))?;
        let counters = w.counters.clone();
        let isolation = cfg.protocol.isolation();
        let q = queue.clone();
        let engine = std::thread::Builder::new()
            .name("atoll-db".into())
            .spawn(move || {
                let r = atoll_runner::run_workload(&cfg, w, &|_| {}).map_err(run_error);
                // Callers waiting for room, queued, or submitting later learn the run is over.
                q.abandon();
                r
            })
            .map_err(|e| DbError::Run(format!("starting the engine's thread: {e}")))?;
        Ok(Db {
            queue,
            counters,
            isolation,
            engine: Some(engine),
        })
    }

    /// Runs `f` as one transaction on the engine and waits for its outcome: its value if it
    /// committed. It re-runs on a conflict (see [`TxError`] for how else it ends).
    pub fn transact<T, E, F>(&self, f: F) -> Result<T, TxError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: for<'t, 'u> Fn(&'t mut Tx<'u>) -> TxFuture<'t, T, E> + Send + Sync + 'static,
    {
        self.transact_as(TxnType(0), f)
    }

    /// [`Db::transact`] of a transaction that declares its keys up front: an access outside
    /// `keys` is [`TxError::Misuse`], and it cannot scan. A deterministic protocol (CALVIN)
    /// needs them to order transactions before they run.
    pub fn transact_declared<T, E, F>(&self, keys: Declared, f: F) -> Result<T, TxError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: for<'t, 'u> Fn(&'t mut Tx<'u>) -> TxFuture<'t, T, E> + Send + Sync + 'static,
    {
        self.submit(TxnType(0), Some(keys), f)
    }

    /// [`Db::transact`], counted under transaction type `ty` in the report.
    pub fn transact_as<T, E, F>(&self, ty: TxnType, f: F) -> Result<T, TxError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: for<'t, 'u> Fn(&'t mut Tx<'u>) -> TxFuture<'t, T, E> + Send + Sync + 'static,
    {
        self.submit(ty, None, f)
    }

    fn submit<T, E, F>(&self, ty: TxnType, keys: Option<Declared>, f: F) -> Result<T, TxError<E>>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: for<'t, 'u> Fn(&'t mut Tx<'u>) -> TxFuture<'t, T, E> + Send + Sync + 'static,
    {
        let (tx, rx) = mpsc::sync_channel::<Answer>(1);
        let mut job = source::Job::new(
            ty.0,
            body(f),
            Box::new(move |a| {
                // The caller may have gone; its answer then has no one to go to.
                let _ = tx.send(a);
            }),
        );
        job.declared = keys;
        if self.queue.push(JobRef(Arc::new(job))).is_err() {
            return Err(TxError::Closed);
        }
        typed(rx.recv().unwrap_or(Answer::Closed))
    }

    /// The isolation the database gives its transactions.
    pub fn isolation(&self) -> Isolation {
        self.isolation
    }

    pub fn stats(&self) -> Stats {
        stats_of(&self.counters)
    }

    /// Stops taking transactions, runs those already submitted, checks the stored records
    /// and returns the run's report (throughput, aborts by reason, latency, checks).
    pub fn close(mut self) -> Result<Report, DbError> {
        self.queue.close();
        let engine = self.engine.take().expect("a database closes once");
        engine
            .join()
            .unwrap_or_else(|_| Err(DbError::Run("the engine's thread panicked".into())))
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if let Some(engine) = self.engine.take() {
            self.queue.close();
            let _ = engine.join();
        }
    }
}
