//! Runs one benchmark: sizes and lays out the cluster, starts a [`NodeRuntime`] per node
//! (each loads its own partition, in parallel), runs every node's coordinator co-routines
//! on the chosen fabric (in-process threads or the simulator), then has the driver
//! ([`crate::driver`]) merge the nodes' summaries and check parts into the report.

use crate::config::{ConfigError, Fabric, FaultConfig, RunConfig};
use crate::driver::{RunFacts, SummaryWire};
pub use crate::error::RunError;
use crate::node::{NodeChecks, NodeRuntime, NodeSummary};
use crate::report::*;
use crate::stats::{Interval, WorkerStats};
use atoll_fabric::rng::Rng;
use atoll_fabric::{
    panic_message, Coroutine, Endpoint, NodeDirectory, NodeId, NodeMemory, NodeSetup, TaskId,
    VerbCounters, WorkerPanic,
};
use atoll_fabric_inproc::{self as inproc, InprocConfig};
use atoll_fabric_sim::{self as sim, SimConfig};
use atoll_history::TxnRecord;
use atoll_protocols::ProtocolVisitor;
use atoll_storage::Catalog;
use atoll_txn::{Abort, Coordinator, Protocol, Stage, Txn, TxnConfig};
use atoll_workloads::{Draw, Outcome, Workload, WorkloadVisitor};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Instant;

/// Randomised back-off after an abort: drawn below `BACKOFF_NS_MIN << aborts so far`, which
/// doubles per abort up to `BACKOFF_NS_MAX` (after ten). A cap of 64 µs let a contended run
/// collapse into a retry storm: at RCC's shape (simulated, hot_prob 0.9) NOWAIT's rpc plan
/// committed 1,500 tx/s with every core busy on failing attempts and on serving their lock
/// and release RPCs, so lock holders waited behind them; growing to 1 ms it committed
/// 152,700 (docs/performance.md, "Contention").
const BACKOFF_NS_MIN: u64 = 1_000;
const BACKOFF_NS_MAX: u64 = 1_000_000;
const BACKOFF_DOUBLINGS_MAX: u32 = 10;
/// How long a co-routine whose workload had no transaction for it waits before asking
/// again ([`Draw::Wait`]): short against a transaction, long enough that idle co-routines
/// leave the worker's CPU to the busy ones.
const DRAW_WAIT_NS: u64 = 2_000;

/// Runs a benchmark as `cfg` says; `progress` sees one line per interval.
pub fn run(cfg: &RunConfig, progress: &ProgressFn<'_>) -> Result<Report, RunError> {
    run_via(cfg, SummaryWire::InMemory, progress)
}

/// [`run`], with the nodes' summaries handed to the driver over `wire`.
pub fn run_via(
    cfg: &RunConfig,
    wire: SummaryWire,
    progress: &ProgressFn<'_>,
) -> Result<Report, RunError> {
    struct Run<'a> {
        cfg: &'a RunConfig,
        wire: SummaryWire,
        progress: &'a ProgressFn<'a>,
    }
    impl ProtocolVisitor for Run<'_> {
        type Out = Result<Report, RunError>;
        fn visit<P: Protocol>(self) -> Self::Out {
            run_protocol_via::<P>(self.cfg, self.wire, self.progress)
        }
    }
    cfg.protocol.dispatch(Run {
        cfg,
        wire,
        progress,
    })
}

/// Runs with the protocol given as a type, whatever `cfg.protocol` says: tests use it for
/// variants no user can select (a deliberately broken one, to show the checker fails).
pub fn run_protocol<P: Protocol>(
    cfg: &RunConfig,
    progress: &ProgressFn<'_>,
) -> Result<Report, RunError> {
    run_protocol_via::<P>(cfg, SummaryWire::InMemory, progress)
}

/// [`run_protocol`], with the nodes' summaries handed to the driver over `wire`.
pub fn run_protocol_via<P: Protocol>(
    cfg: &RunConfig,
    wire: SummaryWire,
    progress: &ProgressFn<'_>,
) -> Result<Report, RunError> {
    cfg.validate()?;
    atoll_txn::check_plan::<P>(&cfg.plan)
        .map_err(|e| ConfigError(format!("plan {}: {e}", cfg.plan)))?;
    struct RunWith<'a, P> {
        cfg: &'a RunConfig,
        wire: SummaryWire,
        progress: &'a ProgressFn<'a>,
        protocol: std::marker::PhantomData<fn() -> P>,
    }
    impl<P: Protocol> WorkloadVisitor for RunWith<'_, P> {
        type Out = Result<Report, RunError>;
        fn visit<W: Workload>(self, w: W) -> Self::Out {
            run_with::<W, P>(self.cfg, w, self.wire, self.progress)
        }
    }
    let v = RunWith::<P> {
        cfg,
        wire,
        progress,
        protocol: std::marker::PhantomData,
    };
    cfg.workload
        .dispatch(&cfg.params, &cfg.workload_shape(), v)
        .map_err(|e| ConfigError(e.0))?
}

/// Runs workload `w`, built by the caller rather than from `cfg.workload` and its knobs (the
/// library's sessions, whose transactions its callers submit), under `cfg.protocol`.
pub fn run_workload<W: Workload>(
    cfg: &RunConfig,
    w: W,
    progress: &ProgressFn<'_>,
) -> Result<Report, RunError> {
    struct Run<'a, W> {
        cfg: &'a RunConfig,
        w: W,
        progress: &'a ProgressFn<'a>,
    }
    impl<W: Workload> ProtocolVisitor for Run<'_, W> {
        type Out = Result<Report, RunError>;
        fn visit<P: Protocol>(self) -> Self::Out {
            self.cfg.validate()?;
            atoll_txn::check_plan::<P>(&self.cfg.plan)
                .map_err(|e| ConfigError(format!("plan {}: {e}", self.cfg.plan)))?;
            run_with::<W, P>(self.cfg, self.w, SummaryWire::InMemory, self.progress)
        }
    }
    cfg.protocol.dispatch(Run { cfg, w, progress })
}

/// What the co-routines of one worker share.
pub struct WorkerShared<W: Workload> {
    pub stats: RefCell<WorkerStats>,
    pub live: std::cell::Cell<usize>,
    pub history: RefCell<Vec<TxnRecord>>,
    pub ledger: RefCell<W::Ledger>,
    /// With a history recorded: each co-routine's attempt under way, by coordinator id
    /// (at most one per co-routine), as the lost record it becomes if it never ends.
    pub in_flight: RefCell<std::collections::HashMap<u32, TxnRecord>>,
    /// Where the history goes, for what is left when the worker's co-routines are dropped.
    pub run: Arc<RunShared<W>>,
    /// With [`RunShared::hold_effects`]: each co-routine's committing attempt, by
    /// coordinator id, as its tag and effect (at most one per co-routine).
    pub pending: RefCell<std::collections::HashMap<u32, (u64, W::Effect)>>,
    /// The node the worker belongs to, which a crashed worker hands its ledger to.
    pub node: Arc<NodeRuntime<W>>,
}

impl<W: Workload> Drop for WorkerShared<W> {
    /// Co-routines dropped before their end (their node crashed, or the run stopped around
    /// them) leave their attempts under way: the history gets each as `lost`, and the
    /// records the worker had not yet handed over, so a checker knows what it cannot see
    /// (in the history file, or handed to the node with the worker's ledger).
    fn drop(&mut self) {
        let mut history = std::mem::take(self.history.get_mut());
        let mut lost: Vec<TxnRecord> = self.in_flight.get_mut().drain().map(|(_, r)| r).collect();
        lost.sort_unstable_by_key(|r| r.coord);
        self.settle_lost(&mut lost);
        history.extend(lost);
        if let Some(out) = &self.run.history_out {
            out.append(&mut history);
        }
        if self.live.get() > 0 {
            self.hand_over_stopped(&mut history);
        }
    }
}

impl<W: Workload> WorkerShared<W> {
    /// Attempts lost with their crashed node whose outcome a partition's recovery settled:
    /// one it committed becomes a committed record of the writes its log carried (what it
    /// read is unknown, so it reads nothing); one it aborted, or that logged nothing the
    /// survivors held after the last one they did (so it wrote nothing visible), an aborted
    /// one. The others stay lost.
    fn settle_lost(&self, lost: &mut [TxnRecord]) {
        let recovered = self
            .run
            .recovered
            .lock()
            .expect("no poisoned recovery reports");
        for r in lost.iter_mut() {
            for rec in recovered.iter().filter(|x| x.partition.is_some()) {
                let Some((_, last)) = rec.attempts.iter().find(|a| a.0 == r.coord) else {
                    continue;
                };
                let p = rec.partition.as_ref().expect("a partition's recovery");
                match last {
                    Some((tag, true)) if *tag == r.tag => {
                        if let Some(w) = p.writes.iter().find(|w| w.0 == r.coord && w.1 == r.tag) {
                            r.ops = w.2.clone();
                        }
                        r.lost = false;
                    }
                    _ => {
                        r.lost = false;
                        r.aborted = Some(Abort::NodeFailed.name().to_string());
                    }
                }
            }
        }
    }

    /// A worker whose co-routines stopped before their end (their node crashed) hands its
    /// node the ledger of what they committed, and of each attempt they were committing,
    /// the outcome a recovery settled: counted if it committed; one no recovery settled is
    /// counted as unresolved (the run is then not judged).
    fn hand_over_stopped(&mut self, history: &mut Vec<TxnRecord>) {
        let mut ledger = std::mem::take(self.ledger.get_mut());
        let recovered = self
            .run
            .recovered
            .lock()
            .expect("no poisoned recovery reports");
        let mut unresolved = 0;
        for (coord, (tag, effect)) in self.pending.get_mut().drain() {
            let last = recovered
                .iter()
                .flat_map(|r| &r.attempts)
                .find(|a| a.0 == coord)
                .map(|a| a.1);
            match last {
                Some(Some((t, true))) if t == tag => self.run.w.record(&mut ledger, effect),
                // Aborted, or never logged (its last logged attempt is an earlier one).
                Some(_) => {}
                None => unresolved += 1,
            }
        }
        self.node.hand_over_stopped(ledger, history, unresolved);
    }
}

/// What every co-routine of the run shares.
pub struct RunShared<W> {
    pub w: W,
    pub catalog: Arc<Catalog>,
    pub txn: Arc<TxnConfig>,
    pub cfg: RunConfig,
    pub warmup_end_ns: u64,
    pub end_ns: u64,
    pub interval_ns: u64,
    /// Set when a transaction's op failed after its log was written (its node's summary
    /// says which): every worker stops, and the run returns [`RunError::NodeFailed`].
    pub failed_after_log: std::sync::atomic::AtomicBool,
    pub cpu: crate::env::CpuWindow,
    /// Where the history streams to (`cfg.history_file`), if it does not stay in memory.
    pub history_out: Option<atoll_history::HistoryWriter>,
    /// Under the simulator: the coordinator's own CPU per attempt and per record touched
    /// (`CpuProfile::txn_ns`, `txn_ns_per_access`), charged to its simulated core; `None`
    /// on a real fabric, whose CPU spends it for real.
    pub txn_cpu_ns: Option<(u64, u64)>,
    /// What the run's tables grow from (this process's share under `atoll cluster`).
    pub budget: Arc<atoll_storage::MemoryBudget>,
    /// Under the simulator: the latest virtual time a co-routine began a transaction at, for
    /// the heartbeat (one OS thread: no contended write).
    pub virtual_now_ns: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// With a crash injected: each committing attempt's effect is held where its worker's
    /// shared state keeps it through the commit, so that a crashed node's attempt whose
    /// outcome a recovery settles is counted as that outcome ([`WorkerShared::pending`]).
    pub hold_effects: bool,
    /// A family's recoveries of crashed compute nodes ([`atoll_txn::Recovered`]).
    pub recovered: Arc<std::sync::Mutex<Vec<atoll_txn::Recovered>>>,
    /// Transaction co-routines of this process not yet finished: once none is left no
    /// coordinator waits on a failed node's declaration, so the watchers end (a library
    /// session, whose co-routines end when its source drains, ends at once).
    pub coroutines_live: std::sync::atomic::AtomicUsize,
}

/// Records a worker keeps before handing them to the history file: one lock and one write
/// per batch, and a bounded buffer per worker.
const HISTORY_BATCH_RECORDS: usize = 1024;

impl<W: Workload> RunShared<W> {
    /// What a run's workers share, its clock marks from `cfg` (in-process, simulated and
    /// `atoll cluster` node runs alike).
    pub fn new(
        w: W,
        layout: &Layout,
        cfg: &RunConfig,
        history_out: Option<atoll_history::HistoryWriter>,
        txn_cpu_ns: Option<(u64, u64)>,
    ) -> Self {
        RunShared {
            w,
            catalog: layout.catalog.clone(),
            txn: layout.txn_cfg.clone(),
            cfg: cfg.clone(),
            warmup_end_ns: (cfg.warmup_s * 1e9) as u64,
            end_ns: ((cfg.warmup_s + cfg.duration_s) * 1e9) as u64,
            interval_ns: (cfg.progress_interval_s * 1e9).max(1e6) as u64,
            failed_after_log: Default::default(),
            cpu: Default::default(),
            history_out,
            txn_cpu_ns,
            budget: layout.budget.clone(),
            virtual_now_ns: None,
            hold_effects: matches!(&cfg.fabric, Fabric::Sim { faults, .. } if faults.crash.is_some()),
            recovered: Arc::default(),
            coroutines_live: Default::default(),
        }
    }

    /// Whether the run is over at worker time `now` for a worker of `node`: its end
    /// reached, or a stop (Ctrl-C) requested, which is then dated `now` at the latest.
    pub(crate) fn over(&self, node: &NodeRuntime<W>, now: u64) -> bool {
        if now >= self.end_ns || self.failed_after_log.load(Ordering::Relaxed) {
            return true;
        }
        // A stop requested (Ctrl-C), or a table that could not grow within the budget
        // (where the workload stops there): the run ends here and reports what it measured.
        let budget_stop = node.store().budget().refused() && self.w.stops_at_the_memory_budget();
        if crate::interrupt::requested() || budget_stop {
            node.stopped_at(now);
            return true;
        }
        false
    }
}

/// The phases every run goes through, whatever carries it: refuse what cannot fit and lay
/// out the catalog ([`prepare`]), load every node ([`load_nodes`]), hand the workers over to
/// the fabric and measure ([`execute`], each fabric its part), then stop and summarise
/// ([`summarise`], the driver's [`crate::driver::conclude`]). `atoll cluster` runs the same
/// phases across processes: the same layout and co-routines in each node process, the same
/// conclusion over its hub.
fn run_with<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: W,
    wire: SummaryWire,
    progress: &ProgressFn<'_>,
) -> Result<Report, RunError> {
    let pulse = crate::pulse::Pulse::new(progress);
    // How far a phase is, for the heartbeat: the share of the tables loaded (from what the
    // budget holds), as records, and when the load ends; a simulation's virtual time.
    let loading = std::sync::OnceLock::<LoadWatch>::new();
    let virtual_now = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let detail = |phase: &'static str, wall_s: f64| match phase {
        "loading" => loading.get().map_or(String::new(), |l| {
            let done = (l.budget.used_bytes().saturating_sub(l.base_bytes) as f64
                / l.expected_bytes.max(1) as f64)
                .min(1.0);
            let eta = if done > 0.0 {
                wall_s * (1.0 - done).max(0.0) / done
            } else {
                f64::NAN
            };
            format!(
                "about {} of {} records ({:.0}% of the tables' {}), about {eta:.0} s left",
                (done * l.records as f64) as u64,
                l.records,
                100.0 * done,
                crate::sizing::human_bytes(l.expected_bytes)
            )
        }),
        "running" if matches!(cfg.fabric, Fabric::Sim { .. }) => {
            let (v, total) = (
                virtual_now.load(Ordering::Relaxed) as f64 / 1e9,
                cfg.warmup_s + cfg.duration_s,
            );
            let left = if v > 0.0 {
                format!(", about {:.0} s left", wall_s * (total - v).max(0.0) / v)
            } else {
                String::new()
            };
            format!("virtual time {v:.6} s of {total:.6} s{left}")
        }
        _ => String::new(),
    };
    std::thread::scope(|s| {
        s.spawn(|| pulse.beat(&detail));
        let r = run_phases::<W, P>(cfg, w, wire, &pulse, &loading, &virtual_now);
        pulse.stop();
        r
    })
}

/// What the heartbeat of a run's load reads: the budget's growth since the load began
/// against the tables' expected bytes, and the records they hold at start.
struct LoadWatch {
    budget: Arc<atoll_storage::MemoryBudget>,
    base_bytes: u64,
    expected_bytes: u64,
    records: u64,
}

/// [`run_with`]'s phases, each announced to `pulse`.
fn run_phases<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: W,
    wire: SummaryWire,
    pulse: &crate::pulse::Pulse<'_>,
    loading: &std::sync::OnceLock<LoadWatch>,
    virtual_now: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<Report, RunError> {
    let progress = |p: &crate::report::Progress<'_>| pulse.report(p);
    let wall = Instant::now();
    let prepared = prepare::<W, P>(cfg, &w)?;
    let sizing = &prepared.layout.sizing;
    let expected = sizing.table_start_bytes * sizing.memory_nodes as u64;
    let budget = prepared.layout.budget.clone();
    let catalog = &prepared.layout.catalog;
    let records: u64 = (0..catalog.table_count())
        .map(|t| {
            catalog
                .spec(atoll_storage::TableId(t as u16))
                .capacity_per_node as u64
        })
        .sum::<u64>()
        * catalog.nodes as u64;
    let _ = loading.set(LoadWatch {
        base_bytes: budget.used_bytes(),
        budget,
        expected_bytes: expected,
        records,
    });
    pulse.phase(
        "loading",
        &format!(
            "{records} records, {} of tables on {} nodes",
            crate::sizing::human_bytes(expected),
            sizing.memory_nodes
        ),
    );
    let nodes = load_nodes(cfg, &prepared.layout, &w)?;
    let load_s = wall.elapsed().as_secs_f64();
    pulse.phase("running", &format!("loaded in {load_s:.1} s"));
    let os_threads = os_threads(cfg);
    let txn_cpu_ns = match cfg.fabric {
        Fabric::Sim { .. } => {
            let p = cfg.sim_cpu()?;
            Some((p.txn_ns, p.txn_ns_per_access))
        }
        Fabric::InProc => None,
    };
    let mut shared = RunShared::new(w, &prepared.layout, cfg, prepared.history_out, txn_cpu_ns);
    if txn_cpu_ns.is_some() {
        shared.virtual_now_ns = Some(virtual_now.clone());
    }
    let shared = Arc::new(shared);
    let mut executed = execute::<W, P>(cfg, &nodes, &shared, os_threads, &progress)?;
    let end_ns = executed
        .sim
        .as_ref()
        .map_or(0, |s| (s.virtual_s * 1e9) as u64);
    out_of_configuration(&nodes, end_ns, &mut executed.crashed);
    pulse.phase("checking", "");
    let facts = RunFacts {
        warmup_end_ns: shared.warmup_end_ns,
        progress: executed.lines,
        load_s,
        wall_s: 0.0,
        os_threads,
        sim: executed.sim,
        log_ring_words: prepared.layout.sizing.log_ring_words,
        memory_bytes: prepared.layout.sizing.total_bytes(),
        tables_start_bytes: prepared.layout.sizing.table_start_bytes
            * prepared.layout.sizing.memory_nodes as u64,
        coroutines_hung: executed.hung,
        crashed: executed.crashed,
        recovered: shared
            .recovered
            .lock()
            .expect("no poisoned recovery reports")
            .clone(),
        rpcs_served_by_node: executed.served,
    };
    let mut report = summarise::<W, P>(cfg, wire, &nodes, &shared, facts, wall, &prepared.probe)?;
    report.sim_wall_s = executed.sim_wall_s;
    if let Some(out) = &shared.history_out {
        report.check_history_written(out.finish(), "written as the run went");
    }
    Ok(report)
}

/// What a run has decided before it loads anything.
struct Prepared {
    layout: Layout,
    probe: crate::env::Probe,
    history_out: Option<atoll_history::HistoryWriter>,
}

/// What every node of a run and its driver lay out the same way, before anything is
/// allocated: the sizing (refused if it cannot fit), the engine's configuration and the
/// catalog. The in-process and simulated runs and `atoll cluster`'s processes all build it
/// here.
pub struct Layout {
    pub sizing: crate::sizing::Sizing,
    pub txn_cfg: Arc<TxnConfig>,
    pub catalog: Arc<Catalog>,
    /// What this process's nodes may take in all, the run's fixed structures already
    /// taken: their tables take what they grow to from it.
    pub budget: Arc<atoll_storage::MemoryBudget>,
}

/// The run's [`Layout`] for workload `w` under protocol `P` (a broken variant of a family
/// keeps what its family's knobs say).
pub fn layout<W: Workload, P: Protocol>(cfg: &RunConfig, w: &W) -> Result<Layout, ConfigError> {
    let version_slots = if P::MULTI_VERSION {
        cfg.family_config().version_slots()
    } else {
        1
    };
    // Everything after this allocates: first refuse what cannot fit.
    let sizing = crate::sizing::size(cfg, w, version_slots)?;
    let topology = cfg.topology();
    let txn_cfg = Arc::new(cfg.txn_config(sizing.log_ring_words));
    let overflow_per_record = if P::MULTI_VERSION {
        txn_cfg.family.overflow_per_record()
    } else {
        0
    };
    let catalog = Arc::new(
        Catalog::with_versions(
            topology.memory_nodes(),
            w.tables(topology.memory_nodes()),
            txn_cfg.extra_regions(),
            version_slots,
        )
        .with_topology(topology)
        .with_lock_word(P::LOCK_WORD)
        .with_old_versions(P::OLD_VERSIONS)
        .with_growth(&sizing.growth_bytes_per_node, overflow_per_record)
        .with_overflow(overflow_per_record)
        .with_table_regions(|records| txn_cfg.family.table_regions(records))
        .with_replica_regions(sizing.replica_copies),
    );
    debug_assert!(
        (0..cfg.nodes).all(|n| catalog
            .region_words_of(NodeId(n))
            .iter()
            .map(|&w| w as u64)
            .eq(sizing.node_region_words(topology.holds_records(NodeId(n))))),
        "the sizing and the catalog disagree"
    );
    let budget = Arc::new(atoll_storage::MemoryBudget::new(sizing.memory_max_bytes));
    budget
        .take(
            || {
                "the run's logs, family regions, location caches, ordered indexes and co-routines"
                    .into()
            },
            0,
            0,
            sizing.start_bytes_beside_tables(),
        )
        .map_err(|r| ConfigError(r.to_string()))?;
    Ok(Layout {
        sizing,
        txn_cfg,
        catalog,
        budget,
    })
}

/// Refuses what cannot fit (before anything is allocated), lays out the catalog the sizing
/// counted, and opens the history file once everything else was accepted.
fn prepare<W: Workload, P: Protocol>(cfg: &RunConfig, w: &W) -> Result<Prepared, RunError> {
    let layout = layout::<W, P>(cfg, w)?;
    let probe = crate::env::Probe::start(!matches!(cfg.fabric, Fabric::Sim { .. }));
    // The history file is created only once everything else was accepted, so a refused
    // configuration leaves an existing file as it was.
    let history_out = match (&cfg.history_file, cfg.record_history) {
        (Some(path), true) => Some(
            atoll_history::HistoryWriter::create(path, cfg.protocol.isolation())
                .map_err(ConfigError)?,
        ),
        _ => None,
    };
    Ok(Prepared {
        layout,
        probe,
        history_out,
    })
}

/// Starts every node's runtime in parallel: each registers its memory and loads its own
/// partition (nodes holding no records load nothing).
fn load_nodes<W: Workload>(
    cfg: &RunConfig,
    layout: &Layout,
    w: &W,
) -> Result<Vec<Arc<NodeRuntime<W>>>, RunError> {
    let modelled = matches!(cfg.fabric, Fabric::Sim { .. });
    let record_words_max = layout.txn_cfg.log_ring_words;
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..cfg.nodes)
            .map(|n| {
                let (catalog, budget) = (layout.catalog.clone(), layout.budget.clone());
                let family = layout.txn_cfg.family.clone();
                s.spawn(move || {
                    NodeRuntime::load(NodeId(n), catalog, budget, family, w)
                        .and_then(|r| r.with_replicas(&layout.txn_cfg, w))
                        .and_then(|r| r.with_own_log(cfg, modelled, record_words_max))
                        .map(Arc::new)
                })
            })
            .collect();
        handles
            .into_iter()
            .enumerate()
            .map(|(n, h)| {
                h.join().map_err(|payload| {
                    RunError::Panicked(WorkerPanic {
                        worker: None,
                        message: format!("loading node {n}: {}", panic_message(payload.as_ref())),
                    })
                })?
            })
            .collect::<Result<_, _>>()
    })
}

/// OS threads carrying the workers: the simulator runs them all on one.
fn os_threads(cfg: &RunConfig) -> usize {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let workers = cfg.nodes as usize * cfg.threads as usize;
    match cfg.fabric {
        Fabric::InProc => cfg.os_threads.unwrap_or(cores).min(workers),
        Fabric::Sim { .. } => 1,
    }
}

/// What the fabric's run of the workers leaves for the summary.
#[derive(Default)]
struct Executed {
    lines: Vec<ProgressLine>,
    sim: Option<SimInfo>,
    sim_wall_s: f64,
    /// Co-routines of live nodes the simulator found waiting with nothing left to happen (a
    /// hang).
    hung: usize,
    /// The nodes the simulator crashed: when, and how many co-routines stopped with them.
    crashed: Vec<(NodeId, u64, usize)>,
    /// RPCs each node's workers served.
    served: Vec<u64>,
}

/// Hands the nodes' workers to the fabric, which runs them to the end of the measurement,
/// while a thread prints the progress lines they report.
fn execute<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    nodes: &[Arc<NodeRuntime<W>>],
    shared: &Arc<RunShared<W>>,
    os_threads: usize,
    progress: &ProgressFn<'_>,
) -> Result<Executed, RunError> {
    // Each node's backend is built from its own memory and handler and the directory of the
    // region keys every node's registration returned, exchanged here at start-up.
    let memory: Vec<Arc<NodeMemory>> = nodes.iter().map(|n| n.store().memory().clone()).collect();
    let directory = NodeDirectory::of(&memory);
    let setups: Vec<NodeSetup> = nodes.iter().map(|n| n.setup()).collect();
    let workers = cfg.nodes as usize * cfg.threads as usize;
    let (tx_iv, rx_iv) = mpsc::channel::<Interval>();
    std::thread::scope(|s| {
        let printer = s.spawn(|| {
            collect_progress(
                rx_iv,
                workers,
                shared.interval_ns,
                shared.budget.limit_bytes(),
                progress,
            )
        });
        // A worker's co-routines belong to its node's runtime.
        let spawn = |core: &Rc<atoll_fabric::WorkerCore>| -> Vec<Coroutine> {
            let node = &nodes[core.node().0 as usize];
            node_coroutines::<W, P>(core, shared, node, cfg.coroutines, &tx_iv)
        };
        let ran = match &cfg.fabric {
            Fabric::InProc => execute_inproc(cfg, os_threads, &setups, &directory, &spawn),
            Fabric::Sim { net, faults } => execute_sim(
                cfg,
                net,
                faults,
                shared.end_ns,
                shared.w.think_ns_max(),
                op_words_max(&shared.catalog),
                &setups,
                &directory,
                &spawn,
            ),
        };
        drop(tx_iv);
        let lines = printer.join().expect("progress thread panicked");
        ran.map(|r| Executed { lines, ..r })
            .map_err(RunError::Panicked)
    })
}

/// The in-process fabric's part: real threads until the co-routines finish.
fn execute_inproc(
    cfg: &RunConfig,
    os_threads: usize,
    setups: &[NodeSetup],
    directory: &NodeDirectory,
    spawn: &atoll_fabric::core::Spawner<'_>,
) -> Result<Executed, WorkerPanic> {
    let icfg = InprocConfig {
        nodes: cfg.nodes,
        threads_per_node: cfg.threads,
        os_threads,
        pin_threads: cfg.pin_threads,
        net_latency_ns: cfg.net_latency_us.map(|us| (us * 1000.0) as u64),
        machine_pairs: cfg.topology().machine_pairs(),
    };
    let mut served = vec![0u64; cfg.nodes as usize];
    for r in inproc::run(&icfg, setups, directory, spawn)? {
        served[r.id.node.0 as usize] += r.counters.rpcs_served;
    }
    Ok(Executed {
        served,
        ..Default::default()
    })
}

/// The most words one verb of the run moves: a whole record slot, an index group, or a log
/// record (at most a few records' slots, bounded here by the largest region a family or
/// log adds... taken as the largest record slot times the tables, generously).
fn op_words_max(catalog: &Catalog) -> u64 {
    let record = (0..catalog.table_count())
        .map(|t| {
            catalog
                .layout(atoll_storage::TableId(t as u16))
                .record_words as u64
        })
        .max()
        .unwrap_or(0);
    record
        .max(atoll_storage::layout::GROUP_WORDS as u64)
        .saturating_mul(catalog.table_count().max(1) as u64)
}

/// How long the simulator waits with no co-routine polled before it calls the run hung:
/// never less than the run itself and the floor, plus the longest its faults can hold a
/// co-routine and a round of every co-routine of a worker thinking (`think_ns` each, as a
/// worker's core runs its co-routines' computation one after another).
pub fn sim_idle_limit_ns(
    cfg: &RunConfig,
    faults: &FaultConfig,
    end_ns: u64,
    think_ns: u64,
    op_words_max: u64,
) -> u64 {
    sim::HUNG_AFTER_NS_MIN
        .saturating_add(end_ns)
        .saturating_add(faults.longest_wait_ns(op_words_max))
        .saturating_add(think_ns.saturating_mul(cfg.coroutines as u64 + 1))
}

/// The simulator's model of a deployment on machines: its placement, channel (the default
/// when none is named), the memory and migration costs, pinning as the run asks, and the
/// seed of its draws.
pub fn sim_islands(
    cfg: &RunConfig,
    i: &crate::config::IslandsConfig,
) -> (sim::islands::Islands, u64) {
    let mut model = sim_islands_model(cfg, i);
    for (name, v) in &i.constants {
        model
            .set_constant(name, *v)
            .unwrap_or_else(|e| panic!("validated at start-up: {e}"));
    }
    (model, cfg.seed)
}

/// The islands model of `cfg`'s deployment with its sources' constants.
pub(crate) fn sim_islands_model(
    cfg: &RunConfig,
    i: &crate::config::IslandsConfig,
) -> sim::islands::Islands {
    let channel = i
        .channel
        .as_deref()
        .unwrap_or(crate::config::CHANNEL_DEFAULT);
    sim::islands::Islands {
        placement: i.placement,
        channel: sim::net::channel(channel).expect("validated channel"),
        memory: sim::islands::westmere(),
        pinned: cfg.pin_threads,
        migration: sim::islands::migration(),
    }
}

/// The simulator's part: every worker on this thread in virtual time, with the run's faults.
fn execute_sim(
    cfg: &RunConfig,
    net: &str,
    faults: &FaultConfig,
    end_ns: u64,
    think_ns: u64,
    op_words_max: u64,
    setups: &[NodeSetup],
    directory: &NodeDirectory,
    spawn: &atoll_fabric::core::Spawner<'_>,
) -> Result<Executed, WorkerPanic> {
    let scfg = SimConfig {
        nodes: cfg.nodes,
        threads_per_node: cfg.threads,
        net: sim::net::profile(net).expect("validated profile"),
        cpu: cfg.sim_cpu().expect("validated profile"),
        faults: sim::faults::plan(faults, cfg.nodes, end_ns, cfg.seed),
        op_timeout_ns: faults.op_timeout_ns(),
        machine_pairs: cfg.topology().machine_pairs(),
        idle_limit_ns: sim_idle_limit_ns(cfg, faults, end_ns, think_ns, op_words_max),
        islands: cfg.islands.as_ref().map(|i| sim_islands(cfg, i)),
        instance_log: cfg
            .instance_log
            .as_ref()
            .map(|l| sim::net::LogDevice::measured((l.sync_us * 1e3).round() as u64)),
    };
    let t0 = Instant::now();
    // The simulator runs every worker on this thread: a panic ends them all.
    let r = std::panic::catch_unwind(AssertUnwindSafe(|| {
        sim::run(&scfg, setups, directory, spawn)
    }))
    .map_err(|payload| WorkerPanic {
        worker: None,
        message: panic_message(payload.as_ref()),
    })?;
    let mut served = vec![0u64; cfg.nodes as usize];
    for w in &r.workers {
        served[w.id.node.0 as usize] += w.counters.rpcs_served;
    }
    let busy = |ns: u64| ns as f64 / r.virtual_ns.max(1) as f64;
    let workers = r.cpu_busy_ns.len().max(1) as f64;
    Ok(Executed {
        sim: Some(SimInfo {
            virtual_s: r.virtual_ns as f64 / 1e9,
            events: r.events,
            committed_total: 0,
            cores_busy_mean: r.cpu_busy_ns.iter().map(|&b| busy(b)).sum::<f64>() / workers,
            cores_busy_max: r.cpu_busy_ns.iter().map(|&b| busy(b)).fold(0.0, f64::max),
        }),
        sim_wall_s: t0.elapsed().as_secs_f64(),
        hung: r.unfinished,
        crashed: r.crashed,
        served,
        ..Default::default()
    })
}

/// This process's nodes, stopped: summaries and checks carried over `wire`.
struct LocalNodes<'a, W: Workload> {
    nodes: &'a [Arc<NodeRuntime<W>>],
    w: &'a W,
    wire: SummaryWire,
    /// The nodes the simulator crashed: when, and how many co-routines stopped with them.
    crashed: &'a [(NodeId, u64, usize)],
    /// The compute nodes a family recovered, if the protocol recovers any
    /// ([`Protocol::RECOVERS_COMPUTE_NODES`]).
    recovered: Option<Vec<NodeId>>,
}

impl<W: Workload> crate::driver::StoppedNodes<W> for LocalNodes<'_, W> {
    type Error = RunError;

    fn summaries(&mut self) -> Result<Vec<NodeSummary<W::Ledger>>, RunError> {
        Ok(self
            .nodes
            .iter()
            .map(|n| self.wire.carry("a node summary", n.summary(self.w)))
            .collect())
    }

    fn crashed(&self) -> Vec<NodeId> {
        self.crashed.iter().map(|c| c.0).collect()
    }

    fn refuse_unchecked(&self) -> Result<(), RunError> {
        for &(node, at_ns, _) in self.crashed {
            let n = &self.nodes[node.0 as usize];
            if !n.began_txns() {
                continue;
            }
            match &self.recovered {
                None => return Err(RunError::Crashed { node, at_ns }),
                // Recovered, and every attempt it was committing settled by the recovery.
                Some(r) if r.contains(&node) && n.unresolved() == 0 => {}
                Some(r) => {
                    return Err(RunError::Unrecovered {
                        node,
                        at_ns,
                        recovered: r.contains(&node),
                        unresolved: n.unresolved(),
                    })
                }
            }
        }
        Ok(())
    }

    fn checks(&mut self, ledger: &W::Ledger) -> Result<Vec<NodeChecks<W::NodeCheck>>, RunError> {
        // Only nodes holding records check them (a workload's parts are per memory node); a
        // crashed node's partition a recovery settled is checked at a live backup's replica.
        let crashed: Vec<NodeId> = self.crashed.iter().map(|c| c.0).collect();
        let recovered = self.recovered.clone().unwrap_or_default();
        Ok(self
            .nodes
            .iter()
            .filter_map(|n| {
                if crashed.contains(&n.node) {
                    if !recovered.contains(&n.node) {
                        return None;
                    }
                    let wire = self.wire;
                    return self
                        .nodes
                        .iter()
                        .filter(|b| !crashed.contains(&b.node))
                        .find_map(|b| b.check_replica(n.node, self.w, ledger))
                        .map(|c| wire.carry("a replica's checks", c));
                }
                // In memory every node reads the driver's ledger; over a wire each gets a copy.
                let carried;
                let ledger = match self.wire {
                    SummaryWire::InMemory => ledger,
                    SummaryWire::Json => {
                        carried = self.wire.carry("the merged ledger", ledger.clone());
                        &carried
                    }
                };
                self.wire.carry("a node's checks", n.check(self.w, ledger))
            })
            .collect())
    }
}

/// The driver's part ([`crate::driver::conclude`]) over this process's nodes.
fn summarise<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    wire: SummaryWire,
    nodes: &[Arc<NodeRuntime<W>>],
    shared: &RunShared<W>,
    facts: RunFacts,
    wall: Instant,
    probe: &crate::env::Probe,
) -> Result<Report, RunError> {
    let crashed = facts.crashed.clone();
    let recovered = (P::RECOVERS_COMPUTE_NODES || cfg.replicates_partitions())
        .then(|| facts.recovered.iter().map(|r| r.node).collect());
    let mut local = LocalNodes {
        nodes,
        w: &shared.w,
        wire,
        crashed: &crashed,
        recovered,
    };
    crate::driver::conclude::<W, P, _>(cfg, &shared.w, &mut local, facts, wall, |committed| {
        probe.finish(&shared.cpu, committed)
    })
}

/// The cluster's progress lines from every worker's intervals (`workers` of each, in any
/// order), each reported as it completes: an `atoll cluster` coordinator feeds it what its
/// node processes send. `budget_bytes` is the budget an interval's memory is held against.
pub fn collect_progress(
    rx: mpsc::Receiver<Interval>,
    workers: usize,
    interval_ns: u64,
    budget_bytes: u64,
    progress: &ProgressFn<'_>,
) -> Vec<ProgressLine> {
    let mut pending: BTreeMap<u64, (usize, Interval)> = BTreeMap::new();
    let mut lines = Vec::new();
    let mut memory_before = None;
    let mut close = |reported: usize, iv: Interval, lines: &mut Vec<ProgressLine>| {
        let line = progress_line(&iv, interval_ns, budget_bytes, &mut memory_before);
        let line = ProgressLine {
            workers_reported: reported as u32,
            workers: workers as u32,
            ..line
        };
        progress(&crate::report::Progress::Interval(&line));
        lines.push(line);
    };
    for iv in rx {
        let e = pending
            .entry(iv.index)
            .or_insert_with(|| (0, Interval::new(iv.index)));
        e.0 += 1;
        e.1.committed += iv.committed;
        e.1.aborted += iv.aborted;
        for (sum, n) in e.1.aborts.iter_mut().zip(iv.aborts) {
            *sum += n;
        }
        e.1.latency_ns.add(&iv.latency_ns).expect("same bounds");
        e.1.memory_bytes = e.1.memory_bytes.max(iv.memory_bytes);
        if e.0 == workers {
            let (reported, iv) = pending.remove(&iv.index).expect("just seen");
            close(reported, iv, &mut lines);
        }
    }
    // Intervals some worker never reported: its node died (or the run stopped) first. A
    // worker reports its intervals in order, so every complete interval came before these.
    for (_, (reported, iv)) in std::mem::take(&mut pending) {
        close(reported, iv, &mut lines);
    }
    lines
}

/// One interval's line from what its workers reported (`memory_before`: what the budget
/// held at the previous interval's end, updated).
fn progress_line(
    iv: &Interval,
    interval_ns: u64,
    budget_bytes: u64,
    memory_before: &mut Option<u64>,
) -> ProgressLine {
    let secs = interval_ns as f64 / 1e9;
    let total = iv.committed + iv.aborted;
    let grew = memory_before.map_or(0, |b| iv.memory_bytes.saturating_sub(b));
    *memory_before = Some(iv.memory_bytes);
    let quantile_us = |q: f64| {
        if iv.latency_ns.is_empty() {
            0.0
        } else {
            iv.latency_ns.value_at_quantile(q) as f64 / 1000.0
        }
    };
    ProgressLine {
        t_s: ((iv.index + 1) * interval_ns) as f64 / 1e9,
        interval_s: secs,
        committed: iv.committed,
        attempts: total,
        committed_per_s: iv.committed as f64 / secs,
        abort_rate: if total == 0 {
            0.0
        } else {
            iv.aborted as f64 / total as f64
        },
        aborts_by_reason: Abort::ALL
            .iter()
            .map(|a| (a.name(), iv.aborts[a.index()]))
            .filter(|(_, n)| *n > 0)
            .collect(),
        p50_us: quantile_us(0.5),
        p90_us: quantile_us(0.9),
        p99_us: quantile_us(0.99),
        latency_us_max: iv.latency_ns.max() as f64 / 1000.0,
        latency_ns: Some(iv.latency_ns.clone()),
        memory_bytes: iv.memory_bytes,
        budget_reached_in_s: (grew > 0)
            .then(|| budget_bytes.saturating_sub(iv.memory_bytes) as f64 / (grew as f64 / secs)),
        workers_reported: 0,
        workers: 0,
    }
}

/// What a worker runs, on every fabric: its node's coordinators, or, on a node that runs
/// none (a memory node, a family's service node), only what serves ([`memory_task`]).
pub fn node_coroutines<W: Workload, P: Protocol>(
    core: &Rc<atoll_fabric::WorkerCore>,
    shared: &Arc<RunShared<W>>,
    node: &Arc<NodeRuntime<W>>,
    coroutines: u16,
    progress: &mpsc::Sender<Interval>,
) -> Vec<Coroutine> {
    if !shared.catalog.topology().runs_coordinators(core.node()) {
        return memory_task::<W, P>(core, shared, node);
    }
    worker_coroutines::<W, P>(core, shared, node, coroutines, progress)
}

/// A worker's co-routines, which belong to its node's runtime `node`: every backend spawns
/// them the same way (one shared state per worker, cluster-wide co-routine ids).
fn worker_coroutines<W: Workload, P: Protocol>(
    core: &Rc<atoll_fabric::WorkerCore>,
    shared: &Arc<RunShared<W>>,
    node: &Arc<NodeRuntime<W>>,
    coroutines: u16,
    progress: &mpsc::Sender<Interval>,
) -> Vec<Coroutine> {
    shared
        .coroutines_live
        .fetch_add(coroutines as usize, Ordering::Relaxed);
    let ws = Rc::new(WorkerShared::<W> {
        stats: RefCell::new(WorkerStats::new(shared.w.txn_types().len())),
        live: (coroutines as usize).into(),
        history: RefCell::new(Vec::new()),
        ledger: RefCell::new(W::Ledger::default()),
        in_flight: RefCell::new(Default::default()),
        run: shared.clone(),
        pending: RefCell::new(Default::default()),
        node: node.clone(),
    });
    let mut tasks: Vec<Coroutine> = (0..coroutines as u32)
        .map(|k| {
            let ep = Endpoint::new(core.clone(), TaskId(k));
            let id = coordinator_id(&shared.catalog, core, shared.cfg.threads, coroutines, k);
            let (run, rt, ws) = (shared.clone(), node.clone(), ws.clone());
            if P::SEQUENCED {
                let fut = crate::sequenced::lane::<W, P>(run, rt, ws, ep, id, progress.clone());
                return Box::pin(fut) as Coroutine;
            }
            let fut = coroutine::<W, P>(run, rt, ws, ep, id, progress.clone());
            Box::pin(fut) as Coroutine
        })
        .collect();
    if let (0, Some(cleaner)) = (core.id.thread, &node.cleaner) {
        // The node's log cleaner rides on its first worker too, until the run is over or
        // the worker's co-routines all ended (a library session ends when its source drains).
        let (run, rt, ws) = (shared.clone(), node.clone(), ws.clone());
        tasks.push(Box::pin(atoll_txn::log_ring::clean(
            Endpoint::new(core.clone(), TaskId(tasks.len() as u32)),
            cleaner.clone(),
            shared
                .catalog
                .extra_region(atoll_txn::coord::LOG_EXTRA_REGION),
            Rc::new(move |now| run.over(&rt, now) || ws.live.get() == 0),
        )));
    }
    if let (0, Some(membership)) = (core.id.thread, &node.membership) {
        // The node's watcher (heartbeats; the manager's recovery of a dead node) rides on
        // its first worker as well.
        let (run, rt) = (shared.clone(), node.clone());
        // It goes on a crash's detection time past the run's end: a coordinator whose op
        // failed at a node that crashed near the end waits for the node to be declared.
        let grace_ns = detect_bound_ns(&shared.cfg);
        let over_at = std::cell::Cell::new(None::<u64>);
        tasks.push(Box::pin(atoll_txn::recovery::watch(
            atoll_txn::recovery::Watch {
                ep: Endpoint::new(core.clone(), TaskId(tasks.len() as u32)),
                membership: membership.clone(),
                catalog: shared.catalog.clone(),
                cfg: shared.txn.clone(),
                over: Rc::new(move |now| {
                    if run.coroutines_live.load(Ordering::Relaxed) == 0 {
                        return true;
                    }
                    if !run.over(&rt, now) {
                        return false;
                    }
                    let at = over_at.get().unwrap_or(now);
                    over_at.set(Some(at));
                    now >= at.saturating_add(grace_ns)
                }),
                report: shared.recovered.clone(),
                defect: P::recovery_defect(),
                lease_ns: lease_ns(&shared.cfg),
            },
        )));
    }
    if core.id.thread == 0 && P::node_task_wanted(&shared.txn) {
        // The node's background task rides on its first worker, after its co-routines.
        let (run, rt) = (shared.clone(), node.clone());
        let task = atoll_txn::NodeTask {
            ep: Endpoint::new(core.clone(), TaskId(tasks.len() as u32)),
            catalog: shared.catalog.clone(),
            cfg: shared.txn.clone(),
            clock: node.clock.clone(),
            versions: node.versions.clone(),
            recovered: run.recovered.clone(),
            family_nodes: node.family_nodes.clone(),
            over: Rc::new(move |now| run.over(&rt, now)),
            used_slots: {
                let store = node.store().clone();
                Box::new(move |t| store.used_slots(t))
            },
        };
        tasks.push(Box::pin(P::node_task(task)));
    }
    tasks
}

/// The background task of a node that runs no coordinator ([`Protocol::memory_task`],
/// NAM-DB's version mover) on its first worker, if the protocol runs one there; nothing
/// else runs there.
fn memory_task<W: Workload, P: Protocol>(
    core: &Rc<atoll_fabric::WorkerCore>,
    shared: &Arc<RunShared<W>>,
    node: &Arc<NodeRuntime<W>>,
) -> Vec<Coroutine> {
    if core.id.thread != 0 || !P::memory_task_wanted(&shared.catalog, core.node()) {
        return Vec::new();
    }
    let (run, rt) = (shared.clone(), node.clone());
    let task = atoll_txn::NodeTask {
        ep: Endpoint::new(core.clone(), TaskId(0)),
        catalog: shared.catalog.clone(),
        cfg: shared.txn.clone(),
        clock: node.clock.clone(),
        versions: node.versions.clone(),
        recovered: run.recovered.clone(),
        family_nodes: node.family_nodes.clone(),
        over: Rc::new(move |now| run.over(&rt, now)),
        used_slots: {
            let store = node.store().clone();
            Box::new(move |t| store.used_slots(t))
        },
    };
    vec![Box::pin(P::memory_task(task))]
}

/// How often a coordinator whose op failed past its whole log looks whether the failed
/// node was declared dead.
const DEAD_POLL_NS: u64 = 10_000;
/// Heartbeats a crash may take to be found beyond one op timeout (the ping in flight when
/// it crashed, the next one that times out), and to reach every node.
const DETECT_HEARTBEATS: u64 = 4;
/// A real fabric's bound on an op to a dead node (its transport's timeout and more).
const REAL_OP_TIMEOUT_NS: u64 = 1_000_000_000;

/// Adds to `crashed` each node a survivor holds dead that never stopped (it froze and came
/// back after the run's last op it would have been refused, or a broken variant let it go
/// on): out of the configuration, its memory is not its partition's any more, so the
/// run judges it as a crashed node's (at its end, having stopped no co-routine).
fn out_of_configuration<W: Workload>(
    nodes: &[Arc<NodeRuntime<W>>],
    end_ns: u64,
    crashed: &mut Vec<(NodeId, u64, usize)>,
) {
    let down = |n: NodeId, c: &[(NodeId, u64, usize)]| c.iter().any(|x| x.0 == n);
    let Some(m) = nodes
        .iter()
        .find(|n| !down(n.node, crashed))
        .and_then(|n| n.membership.clone())
    else {
        return;
    };
    for d in m.dead() {
        if !down(d, crashed) {
            crashed.push((d, end_ns, 0));
        }
    }
}

/// The fabric's bound on an op to a dead node.
fn op_timeout_ns(cfg: &RunConfig) -> u64 {
    match &cfg.fabric {
        Fabric::Sim { faults, .. } => faults.op_timeout_ns(),
        _ => REAL_OP_TIMEOUT_NS,
    }
}

/// How long an answered heartbeat holds a node's lease ([`atoll_txn::recovery::Watch`]):
/// an op timeout, some ten heartbeats, so only a node whose pings would time out loses it.
fn lease_ns(cfg: &RunConfig) -> u64 {
    op_timeout_ns(cfg)
}

/// A commit's outcome at `now_ns` for an attempt that made `writes` writes: one that wrote
/// nothing commits only while its node's lease holds (always, in a run without recovery),
/// as past it the node may be out of the configuration and its reads stale.
fn within_lease<T>(
    committed: Result<T, Abort>,
    writes: u32,
    membership: &Option<Arc<atoll_txn::recovery::Membership>>,
    now_ns: u64,
) -> Result<T, Abort> {
    let holds = || membership.as_ref().is_none_or(|m| m.lease_holds(now_ns));
    match committed {
        Ok(_) if writes == 0 && !holds() => Err(Abort::LeaseExpired),
        r => r,
    }
}

/// How long a crash takes at most to be declared at every node: an op timeout (after which
/// a ping to the dead node fails), the lease the recoverer waits out, and
/// [`DETECT_HEARTBEATS`] heartbeats. A coordinator waits this long for a failed node to be
/// declared dead, and the watchers go on this long after the run is over, so a crash near
/// its end is still declared.
pub(crate) fn detect_bound_ns(cfg: &RunConfig) -> u64 {
    op_timeout_ns(cfg)
        .saturating_add(lease_ns(cfg))
        .saturating_add(DETECT_HEARTBEATS * atoll_txn::recovery::HEARTBEAT_NS)
}

/// Whether `failed` is declared dead in the configuration coordinator `c`'s node holds,
/// waiting up to `wait_ns` ([`detect_bound_ns`]); at once `false` in a run without
/// recovery.
async fn node_declared_dead(c: &Coordinator, failed: NodeId, wait_ns: u64) -> bool {
    let Some(m) = c.membership.clone() else {
        return false;
    };
    // Its op given up may never be performed, and this coordinator cannot tell: the node
    // is declared dead (and fenced, if it only froze) rather than left in doubt.
    m.suspect(failed);
    let until = c.ep.now_ns().saturating_add(wait_ns);
    while !m.is_dead(failed) {
        if c.ep.now_ns() >= until {
            return false;
        }
        c.ep.sleep(DEAD_POLL_NS).await;
    }
    true
}

/// The cluster-wide index of co-routine `k` of worker `core`: compute nodes in order, their
/// workers, then their co-routines (so ids are dense over the coordinators only).
pub fn coordinator_id(
    catalog: &Catalog,
    core: &atoll_fabric::WorkerCore,
    threads: u16,
    coroutines: u16,
    k: u32,
) -> u32 {
    let topology = catalog.topology();
    let compute = topology
        .compute_index(core.node())
        .unwrap_or_else(|| panic!("node {} runs no coordinators", core.node().0));
    (compute as u32 * threads as u32 + core.id.thread as u32) * coroutines as u32 + k
}

/// Co-routine `id`'s coordinator on `node`, sharing what the node's coordinators share (its
/// clock, version counters and families' node state).
pub(crate) fn node_coordinator<W: Workload>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ep: &Endpoint,
    id: u32,
) -> Coordinator {
    let mut c = Coordinator::new(ep.clone(), run.catalog.clone(), run.txn.clone(), id);
    c.node_clock = node.clock.clone();
    c.versions = node.versions.clone();
    c.own_log = node.own_log.clone();
    c.family_nodes = node.family_nodes.clone();
    c.membership = node.membership.clone();
    c
}

/// An open loop's schedule (`--rate`): one coordinator's starts, one per period, staggered
/// over the coordinators so that together they offer the rate.
pub(crate) struct OpenLoop {
    next_ns: f64,
    period_ns: f64,
}

impl OpenLoop {
    /// Coordinator `id`'s schedule from `now_ns`, in an open loop; `None` in a closed one.
    pub(crate) fn new<W: Workload>(run: &RunShared<W>, now_ns: u64, id: u32) -> Option<Self> {
        run.cfg.rate_per_s.map(|r| {
            let coordinators = run.cfg.coordinators_total() as f64;
            let period_ns = (coordinators * 1e9 / r).max(1.0);
            OpenLoop {
                next_ns: now_ns as f64 + period_ns * id as f64 / coordinators,
                period_ns,
            }
        })
    }

    /// The next scheduled start.
    pub(crate) fn next_ns(&self) -> u64 {
        self.next_ns as u64
    }

    pub(crate) fn advance(&mut self) {
        self.next_ns += self.period_ns;
    }
}

pub async fn coroutine<W: Workload, P: Protocol>(
    run: Arc<RunShared<W>>,
    node: Arc<NodeRuntime<W>>,
    ws: Rc<WorkerShared<W>>,
    ep: Endpoint,
    id: u32,
    progress: mpsc::Sender<Interval>,
) {
    // Workloads pick keys among the memory nodes, "local" ones on the coordinator's home.
    let (nodes, topo) = (run.catalog.nodes, *run.catalog.topology());
    let mut rng = Rng::derive(run.cfg.seed, id as u64);
    let mut c = node_coordinator(&run, &node, &ep, id);
    let mut schedule = OpenLoop::new(&run, c.now_ns(), id);
    // Bounded by the run's end time: each iteration runs one transaction to completion.
    loop {
        // Latency counts from the scheduled start in an open loop: a start the system fell
        // behind on waited in its queue (no coordinated omission). Which window a
        // transaction counts in follows when it really started.
        let mut scheduled_ns = None;
        if let Some(s) = &mut schedule {
            let (at, now) = (s.next_ns(), c.now_ns());
            // Never past the run's end: a start scheduled after it does not happen.
            if now < at.min(run.end_ns) {
                c.ep.sleep(at.min(run.end_ns) - now).await;
            }
            s.advance();
            scheduled_ns = Some(at);
        }
        let start_ns = c.now_ns();
        tick(&run, &ws, &ep, start_ns, &progress);
        if run.over(&node, start_ns) {
            run.cpu.mark_end();
            break;
        }
        let home = topo.home_for(ep.node(), |m| rng.below(m as u64) as u16);
        let (ty, input) = match run.w.draw(&mut rng, nodes, home) {
            Draw::Ready(ty, input) => (ty, input),
            Draw::Wait => {
                // Nothing submitted yet: a notice deferred to the next transaction (RSI's
                // outcome to the timestamp service, which holds back every snapshot) goes
                // out now; the worker's event loop and other co-routines run, and this one
                // asks again a moment later. A failed node is met by the next transaction.
                let _ = c.flush_deferred().await;
                c.ep.sleep(DRAW_WAIT_NS).await;
                continue;
            }
            Draw::Done => {
                node.drained_at(start_ns);
                run.cpu.mark_end();
                break;
            }
        };
        node.begin_txn();
        let (outcome, attempts, unknown) =
            attempt_until_settled::<W, P>(&run, &node, &ws, &mut c, &mut rng, id, ty, &input).await;
        let end_ns = c.now_ns();
        let ended = match &outcome {
            _ if unknown => Outcome::Unknown,
            Ok(_) => Outcome::Committed { attempts },
            Err(abort) => Outcome::Aborted {
                abort: *abort,
                attempts,
            },
        };
        let latency_ns = end_ns - scheduled_ns.unwrap_or(start_ns).min(start_ns);
        let measured = start_ns >= run.warmup_end_ns;
        count_outcome(&run, &node, &ws, ty, outcome, measured, end_ns, latency_ns);
        run.w.ended(&mut ws.ledger.borrow_mut(), input, ended);
        // One transaction per turn: the event loop and the other co-routines get the core
        // even when a transaction touched only local records and never waited.
        c.ep.yield_now().await;
    }
    // A protocol's unsignaled notice still waiting for a next transaction (RSI's outcome to
    // the timestamp service) goes out now. A failed node cannot be told; the run reports
    // the failure where it met it.
    let _ = c.flush_deferred().await;
    coroutine_done(&run, &node, &ws, &ep);
}

/// A committed transaction's effect, its time per stage and what it touched.
type Settled<E> = Result<(E, [u64; Stage::COUNT], atoll_txn::Footprint), Abort>;

/// Runs transaction `input` of type `ty` on coordinator `c` until it commits or its aborts
/// are final (not retryable, the attempts used up, the run over), with randomized
/// exponential back-off between attempts: the outcome, the attempts made, and whether an op
/// failed after its log was written (its outcome unknown).
#[allow(clippy::too_many_arguments)]
async fn attempt_until_settled<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    c: &mut Coordinator,
    rng: &mut Rng,
    id: u32,
    ty: usize,
    input: &W::Input,
) -> (Settled<W::Effect>, u32, bool) {
    let mut attempts = 0;
    let mut first_ts = None;
    let mut unknown = false;
    let membership = c.membership.clone();
    // Bounded by `attempts_max` and the run's end.
    loop {
        attempts += 1;
        let attempt_start_ns = c.now_ns();
        let mut tx = match first_ts {
            None => Txn::<P>::begin(c),
            Some(ts) => Txn::<P>::retry(c, ts),
        };
        first_ts.get_or_insert(tx.ts());
        note_in_flight(run, ws, &tx, id, attempts, attempt_start_ns);
        if let Some((txn_ns, _)) = run.txn_cpu_ns {
            // The simulated core pays the attempt's own logic and bookkeeping.
            tx.compute(txn_ns).await;
        }
        let executed = run.w.execute(&mut tx, input).await;
        if let Some((_, per_access_ns)) = run.txn_cpu_ns {
            let touched = u64::from(tx.footprint().records);
            tx.compute(per_access_ns * touched).await;
        }
        let r = match executed {
            Ok(effect) => {
                let mut effect = Some(effect);
                if run.hold_effects {
                    let held = (tx.tag(), effect.take().expect("an effect"));
                    ws.pending.borrow_mut().insert(id, held);
                }
                let committed = tx.commit().await;
                if run.hold_effects {
                    effect = ws.pending.borrow_mut().remove(&id).map(|p| p.1);
                }
                let effect = effect.expect("held through the commit");
                let footprint = tx.footprint();
                // What the committed attempt touched, for the measured fidelity.
                within_lease(committed, footprint.writes, &membership, tx.now_ns())
                    .map(|stages| (effect, stages, footprint))
            }
            Err(a) => {
                tx.rollback().await;
                Err(a)
            }
        };
        // An op that failed past the attempt's whole log: committed if the node is dead
        // (its recovery settles what the op would have done); otherwise the run stops.
        let failed_after_log = tx.failed_after_log().map(|e| (e, tx.ts().word()));
        if r.is_ok() && tx.torn_reads() > 0 {
            ws.stats.borrow_mut().committed_torn_reads += 1;
        }
        if run.cfg.record_history {
            let aborted = r.as_ref().err().map(|a| a.name().to_string());
            record_attempt(run, ws, &tx, id, attempts, aborted, attempt_start_ns);
        }
        tx.end();
        if let Some((e, ts)) = failed_after_log {
            if !node_declared_dead(c, e.node, detect_bound_ns(&run.cfg)).await {
                unknown = true;
                node.failed_after_log(e.node, ts);
                run.failed_after_log.store(true, Ordering::Relaxed);
            }
        }
        match r {
            Ok(x) => return (Ok(x), attempts, unknown),
            Err(a) => {
                let now = c.now_ns();
                // Each attempt counts by its own start: a transaction begun in the
                // warm-up may retry throughout the measured window, and those retries
                // are work the window did (a retry storm would otherwise go unseen).
                if attempt_start_ns >= run.warmup_end_ns && a != Abort::UserAbort {
                    let mut st = ws.stats.borrow_mut();
                    st.aborts[ty][a.index()] += 1;
                    st.interval.count_abort(a);
                }
                if !a.is_retryable() || attempts >= run.cfg.attempts_max || run.over(node, now) {
                    return (Err(a), attempts, unknown);
                }
                // Randomised exponential back-off, so conflicting retries spread out.
                let cap =
                    (BACKOFF_NS_MIN << attempts.min(BACKOFF_DOUBLINGS_MAX)).min(BACKOFF_NS_MAX);
                c.ep.sleep(rng.below(cap)).await;
            }
        }
    }
}

/// Records one attempt of coordinator `coord` as it ran: what it read and installed, its
/// outcome and timestamps; a batch full goes to the history file.
pub(crate) fn record_attempt<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    ws: &WorkerShared<W>,
    tx: &Txn<'_, P>,
    coord: u32,
    attempt: u32,
    aborted: Option<String>,
    start_ns: u64,
) {
    let rec = TxnRecord {
        id: tx.ts().word(),
        tag: tx.tag(),
        coord,
        attempt,
        aborted,
        start_ns,
        end_ns: tx.now_ns(),
        snapshot: tx.snapshot_ts().map(|t| t.word()),
        commit: tx.commit_ts().map(|t| t.word()),
        snapshot_vector: tx.snapshot_vector().map(<[u64]>::to_vec),
        commit_slot: tx.commit_slot(),
        lost: false,
        ops: tx.history_ops(),
    };
    ws.in_flight.borrow_mut().remove(&coord);
    let mut h = ws.history.borrow_mut();
    h.push(rec);
    if let Some(out) = &run.history_out {
        if h.len() >= HISTORY_BATCH_RECORDS {
            out.append(&mut h);
        }
    }
}

/// With a history recorded, notes attempt `attempt` of coordinator `coord` as under way: the
/// record the history gets if it never ends ([`TxnRecord::lost`]), who and when, nothing of
/// what it did.
fn note_in_flight<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    ws: &WorkerShared<W>,
    tx: &Txn<'_, P>,
    coord: u32,
    attempt: u32,
    start_ns: u64,
) {
    if !run.cfg.record_history {
        return;
    }
    let lost = TxnRecord {
        id: tx.ts().word(),
        tag: tx.tag(),
        coord,
        attempt,
        aborted: None,
        start_ns,
        end_ns: start_ns,
        snapshot: None,
        commit: None,
        snapshot_vector: None,
        commit_slot: None,
        lost: true,
        ops: Vec::new(),
    };
    ws.in_flight.borrow_mut().insert(coord, lost);
}

/// Counts a transaction of type `ty` ended at `end_ns`: a commit's effect into the ledger
/// and, if `measured` (it counts in the measured window), its latency (`latency_ns`: from its scheduled
/// start in an open loop), footprint and stages; an abort that
/// gave up (not one the run's end cut off).
#[allow(clippy::too_many_arguments)]
pub(crate) fn count_outcome<W: Workload>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    ty: usize,
    outcome: Result<(W::Effect, [u64; Stage::COUNT], atoll_txn::Footprint), Abort>,
    measured: bool,
    end_ns: u64,
    latency_ns: u64,
) {
    let mut st = ws.stats.borrow_mut();
    match outcome {
        Ok((effect, stages, footprint)) => {
            run.w.record(&mut ws.ledger.borrow_mut(), effect);
            st.committed_all += 1;
            if measured {
                st.committed[ty] += 1;
                st.touched[ty].add(footprint);
                WorkerStats::record_latency(&mut st.latency_ns[ty], latency_ns);
                st.interval.committed += 1;
                WorkerStats::record_latency(&mut st.interval.latency_ns, latency_ns);
                for (acc, ns) in st.stage_ns.iter_mut().zip(stages) {
                    *acc += ns;
                }
            }
        }
        Err(a) => {
            if measured {
                if a == Abort::UserAbort {
                    st.user_aborted[ty] += 1;
                } else if !run.over(node, end_ns) {
                    // Retries stop at the end of the run; those are cut off, not
                    // given up.
                    st.gave_up[a.index()] += 1;
                }
            }
        }
    }
}

/// The last co-routine of a worker to finish hands its statistics, history and ledger to
/// its node.
pub(crate) fn coroutine_done<W: Workload>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    ep: &Endpoint,
) {
    let left = ws.live.get() - 1;
    ws.live.set(left);
    run.coroutines_live.fetch_sub(1, Ordering::Relaxed);
    if left == 0 {
        let mut st = ws.stats.borrow_mut();
        if st.verbs_at_end.is_none() {
            st.verbs_at_end = Some(ep.counters());
        }
        if st.verbs_at_start.is_none() {
            st.verbs_at_start = Some(VerbCounters::default());
        }
        let mut history = ws.history.borrow_mut();
        if let Some(out) = &run.history_out {
            out.append(&mut history);
        }
        node.hand_over(
            st.clone(),
            &mut history,
            std::mem::take(&mut *ws.ledger.borrow_mut()),
        );
    }
}

/// Per-transaction bookkeeping of a worker's clock: counter snapshots at the window edges
/// and progress intervals.
pub(crate) fn tick<W: Workload>(
    run: &RunShared<W>,
    ws: &WorkerShared<W>,
    ep: &Endpoint,
    now: u64,
    progress: &mpsc::Sender<Interval>,
) {
    if let Some(v) = &run.virtual_now_ns {
        v.fetch_max(now, Ordering::Relaxed);
    }
    let mut st = ws.stats.borrow_mut();
    if now >= run.warmup_end_ns && st.verbs_at_start.is_none() {
        st.verbs_at_start = Some(ep.counters());
        run.cpu.mark_start();
    }
    if now >= run.end_ns && st.verbs_at_end.is_none() {
        st.verbs_at_end = Some(ep.counters());
    }
    if now < run.warmup_end_ns {
        return;
    }
    // Intervals count from the end of warm-up. Every finished one is reported, empty ones
    // included, so the collector can close each; the last one ends with the run.
    let idx = (now - run.warmup_end_ns) / run.interval_ns;
    let intervals = (run.end_ns - run.warmup_end_ns).div_ceil(run.interval_ns);
    while st.interval.index < idx.min(intervals) {
        let next = Interval::new(st.interval.index + 1);
        let mut done = std::mem::replace(&mut st.interval, next);
        done.memory_bytes = run.budget.used_bytes();
        // The receiver outlives every co-routine; a send error cannot happen.
        let _ = progress.send(done);
    }
}
