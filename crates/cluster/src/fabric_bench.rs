//! `atoll fabric-bench`: a microbenchmark of the UCX backend through the fabric API (the
//! `Endpoint` and `Doorbell` every protocol uses), beside which `ucx_perftest`'s figures
//! for the same operations say what our layer adds (docs/cluster.md).
//!
//! Two `atoll node` processes, started and bootstrapped as `atoll cluster` starts them
//! ([`crate::with_nodes`], `Hub::run_nodes`) in the node's
//! second mode ([`MODE`]): node 0, the initiator, runs [`WINDOW_COROUTINES`] co-routines on
//! one UCX worker against node 1's region (allocated by UCX, as `atoll cluster`'s nodes'
//! are, so over shm node 0 maps it and its one-sided ops are its own loads, stores and
//! atomics); node 1, the target, runs none and only serves (over tcp its event loop answers
//! the one-sided ops' messages, and its RPC handler, [`Echo`], replies to each request with
//! its own bytes; no transaction code).
//!
//! For each op (READ, WRITE, CAS, FETCH_ADD of one 8-byte word, an RPC of 8 bytes each way,
//! and a doorbell of [`MIXED_DOORBELL`]'s 8 ops) two phases run one after the other:
//! latency (one co-routine, one op outstanding: median and p99 from an HdrHistogram) and
//! rate (every co-routine, one op each outstanding: ops per second). Phases follow a fixed
//! timetable on the initiator's clock ([`Timetable`]), so co-routines need no other
//! signal to start and stop; each phase warms up before it measures.

use crate::launch as cluster;
use crate::node::NodeLink;
use crate::wire::{ClusterError, Msg, FINISH_S_MAX, RUN_MARGIN_S, STARTUP_S_MAX};
use atoll_fabric::{
    Bytes, Coroutine, Endpoint, Handled, NodeId, NodeSetup, OpError, RegionId, RemotePtr, ReplyTo,
    RpcHandler, TaskId, Words, WorkerCore,
};
use atoll_fabric_ucx::{self as ucx, Transports};
use atoll_runner::config::ConfigError;
use atoll_runner::stats::{new_histogram, WorkerStats};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// First of a `config` message's args when the node serves this benchmark, not a `bench`
/// run (a `bench` flag always starts with `-`, so the two cannot be confused).
pub const MODE: &str = "fabric-bench";
/// Format name and version of the `--json` report; the version rises when a field changes
/// meaning or goes away.
pub const REPORT_FORMAT: &str = "atoll-fabric-bench";
pub const REPORT_FORMAT_VERSION: u32 = 1;
/// The initiator and the target.
const NODES: u16 = 2;
const INITIATOR: NodeId = NodeId(0);
const TARGET: NodeId = NodeId(1);
/// Co-routines of the rate phases, each with one op (or doorbell) outstanding: the window
/// of outstanding ops. 16 is the window of the UCX layer's own example (`ucx_bench`'s
/// `OUTSTANDING`) and the `-O` that `scripts/figures-fabric.sh` gives `ucx_perftest`, so
/// the rates compare.
pub const WINDOW_COROUTINES: u32 = 16;
/// Ops of the mixed doorbell, posted together and awaited together: every kind at least
/// once, READ, WRITE and FETCH_ADD twice (a transaction's doorbells are mostly reads,
/// write-backs and counters).
pub const MIXED_DOORBELL: [Verb; 8] = [
    Verb::Read,
    Verb::Write,
    Verb::Cas,
    Verb::FetchAdd,
    Verb::Rpc,
    Verb::Read,
    Verb::Write,
    Verb::FetchAdd,
];
/// Words each co-routine owns in the target's region: a 64-byte cache line, so no two
/// co-routines' ops touch one line (the mixed doorbell's 7 one-sided ops each take a word).
const WORDS_PER_COROUTINE: u32 = 8;
/// The target's region: one line per co-routine.
const REGION_WORDS: usize = (WINDOW_COROUTINES * WORDS_PER_COROUTINE) as usize;
/// Bytes of each op's payload: one word, as `ucx_perftest -s 8` moves (and an RPC's
/// request and reply are 8 bytes each).
pub const OP_BYTES: usize = 8;
/// Longest measured time per phase accepted: 12 phases per transport, so at most 24
/// minutes for both.
pub const DURATION_MS_MAX: u64 = 60_000;
/// Default measured time per phase.
pub const DURATION_MS_DEFAULT: u64 = 1_000;
/// Each phase first runs its ops unmeasured for this share of its measured time (in
/// percent): connections, caches and UCX's lanes warm, the previous phase's last ops gone.
const WARMUP_PERCENT: u64 = 10;
/// ... and for at least this long: the first phase of a short run measured the target's
/// first turns (READ's median 13 µs after 5 ms of warm-up, 0.83 µs after 30 ms, over shm).
const WARMUP_MS_MIN: u64 = 30;
/// Idle time before each phase: a co-routine's last op of the previous phase (one round
/// trip, µs; a few ms on a loaded machine) completes before the next phase starts.
const SETTLE_MS: u64 = 5;

/// One kind of op the benchmark measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verb {
    Read,
    Write,
    Cas,
    FetchAdd,
    Rpc,
    /// One doorbell of [`MIXED_DOORBELL`].
    #[serde(rename = "doorbell8")]
    Doorbell,
}

impl Verb {
    /// What the benchmark measures, in its order.
    pub const ALL: [Verb; 6] = [
        Verb::Read,
        Verb::Write,
        Verb::Cas,
        Verb::FetchAdd,
        Verb::Rpc,
        Verb::Doorbell,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Verb::Read => "read",
            Verb::Write => "write",
            Verb::Cas => "cas",
            Verb::FetchAdd => "fetch_add",
            Verb::Rpc => "rpc",
            Verb::Doorbell => "doorbell8",
        }
    }

    /// Ops one submission carries.
    pub fn ops_per_doorbell(self) -> u32 {
        match self {
            Verb::Doorbell => MIXED_DOORBELL.len() as u32,
            _ => 1,
        }
    }
}

/// A resolved `atoll fabric-bench`.
#[derive(Clone, Debug)]
pub struct FabricBenchConfig {
    pub transports: Vec<Transports>,
    pub duration_ms: u64,
}

impl FabricBenchConfig {
    /// From the flags; the error names the value and what is accepted.
    pub fn parse(transport: &str, duration_ms: u64) -> Result<Self, ConfigError> {
        let transports = match transport {
            "shm" => vec![Transports::SharedMemory],
            "tcp" => vec![Transports::Tcp],
            "both" => vec![Transports::SharedMemory, Transports::Tcp],
            other => {
                return Err(ConfigError(format!(
                    "fabric-bench --transport '{other}' is not accepted: expected shm, tcp or both"
                )))
            }
        };
        if !(1..=DURATION_MS_MAX).contains(&duration_ms) {
            return Err(ConfigError(format!(
                "fabric-bench --duration-ms {duration_ms} is not accepted: expected milliseconds in 1..={DURATION_MS_MAX}"
            )));
        }
        Ok(FabricBenchConfig {
            transports,
            duration_ms,
        })
    }
}

/// What the coordinator tells both nodes (the `config` message's second arg, JSON).
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
struct NodePlan {
    duration_ms: u64,
}

/// One phase: an op and how many co-routines run it.
#[derive(Clone, Copy, Debug)]
struct Phase {
    verb: Verb,
    /// Co-routines 0..window take part: 1 (latency) or `WINDOW_COROUTINES` (rate).
    window: u32,
    /// Initiator clock: ops start at `start_ns`, are measured from `measure_ns`, and no op
    /// starts at or after `end_ns`.
    start_ns: u64,
    measure_ns: u64,
    end_ns: u64,
}

/// Every phase of one transport's run, on the initiator's clock (0 = the start barrier).
struct Timetable {
    phases: Vec<Phase>,
    /// When the last phase ends.
    end_ns: u64,
}

impl Timetable {
    fn new(duration_ms: u64) -> Self {
        let ms = 1_000_000u64;
        let (settle, warmup, measure) = (
            SETTLE_MS * ms,
            warmup_ms(duration_ms) * ms,
            duration_ms * ms,
        );
        let mut at = 0;
        let mut phases = Vec::new();
        for verb in Verb::ALL {
            for window in [1, WINDOW_COROUTINES] {
                let start_ns = at + settle;
                phases.push(Phase {
                    verb,
                    window,
                    start_ns,
                    measure_ns: start_ns + warmup,
                    end_ns: start_ns + warmup + measure,
                });
                at = start_ns + warmup + measure;
            }
        }
        Timetable {
            phases,
            end_ns: at + settle,
        }
    }
}

/// Unmeasured milliseconds before each phase's measured `duration_ms`.
fn warmup_ms(duration_ms: u64) -> u64 {
    (duration_ms * WARMUP_PERCENT / 100).max(WARMUP_MS_MIN)
}

/// The target's RPC handler: replies with the request's bytes, no transaction code.
pub struct Echo;

impl RpcHandler for Echo {
    fn handle(&self, _node: NodeId, _from: ReplyTo, req: &[u8], reply: &mut Bytes) -> Handled {
        reply.extend_from_slice(req);
        Handled::Replied
    }
}

/// What the co-routines of one phase measured, merged.
struct Tally {
    latency_ns: Histogram<u64>,
    /// Submissions completed in the measured part (doorbells for the mixed one).
    submissions: u64,
    /// Latest completion of a measured submission.
    last_done_ns: u64,
    failures: u64,
    first_failure: Option<String>,
}

impl Tally {
    fn new() -> Self {
        Tally {
            latency_ns: new_histogram(),
            submissions: 0,
            last_done_ns: 0,
            failures: 0,
            first_failure: None,
        }
    }

    fn merge(&mut self, o: &Tally) {
        let _ = self.latency_ns.add(&o.latency_ns);
        self.submissions += o.submissions;
        self.last_done_ns = self.last_done_ns.max(o.last_done_ns);
        self.failures += o.failures;
        if self.first_failure.is_none() {
            self.first_failure.clone_from(&o.first_failure);
        }
    }
}

/// One phase's figures, as the initiator sends them to the coordinator.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct PhaseFigures {
    pub op: Verb,
    pub window: u32,
    pub submissions: u64,
    /// From the measured part's start to its last completion.
    pub measured_ns: u64,
    pub ops_per_s: f64,
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_mean: f64,
    pub failures: u64,
    pub first_failure: Option<String>,
}

impl PhaseFigures {
    fn of(phase: &Phase, t: &Tally) -> Self {
        let us = |ns: u64| ns as f64 / 1e3;
        let measured_ns = t.last_done_ns.saturating_sub(phase.measure_ns);
        let ops = t.submissions * phase.verb.ops_per_doorbell() as u64;
        let has = !t.latency_ns.is_empty();
        PhaseFigures {
            op: phase.verb,
            window: phase.window,
            submissions: t.submissions,
            measured_ns,
            ops_per_s: if measured_ns > 0 {
                ops as f64 * 1e9 / measured_ns as f64
            } else {
                0.0
            },
            latency_us_p50: if has {
                us(t.latency_ns.value_at_quantile(0.5))
            } else {
                0.0
            },
            latency_us_p99: if has {
                us(t.latency_ns.value_at_quantile(0.99))
            } else {
                0.0
            },
            latency_us_mean: t.latency_ns.mean() / 1e3,
            failures: t.failures,
            first_failure: t.first_failure.clone(),
        }
    }
}

// ---------------------------------------------------------------- the node

/// `atoll node` in [`MODE`]: serves node `node` of a fabric-bench run over `transports`
/// (`args` follow the mode: the plan as JSON), and sends the initiator's figures to the
/// coordinator as its summary.
pub(crate) fn serve_node(
    args: &[String],
    node: NodeId,
    transports: Transports,
    link: &mut NodeLink,
) -> Result<(), ClusterError> {
    let plan: NodePlan = match args {
        [one] => serde_json::from_str(one).map_err(|e| {
            ClusterError::BadInput(format!("fabric-bench plan {one:?} is malformed: {e}"))
        })?,
        _ => {
            return Err(ClusterError::BadInput(format!(
                "fabric-bench node args {args:?}: expected one plan"
            )))
        }
    };
    if node.0 >= NODES {
        return Err(ClusterError::BadInput(format!(
            "fabric-bench node {}: the run has nodes 0 (initiator) and 1 (target)",
            node.0
        )));
    }
    FabricBenchConfig::parse("both", plan.duration_ms)?;
    let timetable = Timetable::new(plan.duration_ms);
    link.run_deadline = Instant::now()
        + Duration::from_nanos(timetable.end_ns)
        + Duration::from_secs(STARTUP_S_MAX)
        + Duration::from_secs_f64(RUN_MARGIN_S);
    let ucfg = ucx::UcxConfig {
        transports,
        nodes: NODES,
        threads_per_node: 1,
        op_timeout_ns: ucx::OP_TIMEOUT_MS_DEFAULT * 1_000_000,
        am_inbox_messages_max: ucx::AM_INBOX_MESSAGES_DEFAULT,
        // Each op's own latency and rate, as ucx_perftest measures them.
        coalesce: false,
        // Both nodes are children of this machine's `fabric-bench`: UCX's defaults find them.
        settings: Vec::new(),
        pin_cpus: Vec::new(),
    };
    // Both nodes register the same region, as the directory expects of every node; UCX
    // allocates it, as `atoll cluster`'s nodes do, so the peer maps it over shm.
    let (arena, memory) = ucx::NodeArena::allocate(&ucfg, node, &[REGION_WORDS])
        .map_err(|e| ClusterError::BadInput(format!("node {}: {e}", node.0)))?;
    let setup = NodeSetup {
        memory: Arc::new(memory),
        handler: Arc::new(Echo),
    };
    let tallies: Arc<Mutex<Vec<Tally>>> = Arc::new(Mutex::new(
        timetable.phases.iter().map(|_| Tally::new()).collect(),
    ));
    // The spawner runs on the worker's thread; the co-routines' timetable is built there
    // (an `Rc` stays on its thread) from the same plan, so it is the same.
    let spawn = |core: &Rc<WorkerCore>| -> Vec<Coroutine> {
        if node != INITIATOR {
            return Vec::new();
        }
        let table = Rc::new(Timetable::new(plan.duration_ms));
        (0..WINDOW_COROUTINES)
            .map(|task| {
                let ep = Endpoint::new(core.clone(), TaskId(task));
                let (table, tallies) = (table.clone(), tallies.clone());
                Box::pin(async move { initiate(ep, task, &table, &tallies).await }) as Coroutine
            })
            .collect()
    };
    let ran = ucx::run_node(&ucfg, arena, &setup, link, &spawn);
    match ran {
        Ok(_) => {}
        Err(ucx::NodeRunError::Ucx(e)) => {
            return Err(ClusterError::BadInput(format!("node {}: {e}", node.0)))
        }
        // Its message names the node and what was wrong.
        Err(ucx::NodeRunError::Malformed(m)) => return Err(ClusterError::BadInput(m)),
        Err(e) => return Err(ClusterError::Failed(format!("node {}: {e}", node.0))),
    }
    // The worker, and with it every co-routine, is gone: the tallies are final.
    let tallies = std::mem::take(&mut *tallies.lock().unwrap_or_else(|e| e.into_inner()));
    let figures: Vec<PhaseFigures> = if node == INITIATOR {
        timetable
            .phases
            .iter()
            .zip(&tallies)
            .map(|(p, t)| PhaseFigures::of(p, t))
            .collect()
    } else {
        Vec::new()
    };
    let summary = serde_json::to_value(&figures)
        .map_err(|e| ClusterError::Failed(format!("the figures do not serialize: {e}")))?;
    link.send(&Msg::Summary { summary })?;
    link.recv("bye", Instant::now() + Duration::from_secs(FINISH_S_MAX))?;
    Ok(())
}

/// Co-routine `task` of the initiator: every phase it takes part in, at its time. Bounded:
/// no op starts after its phase's end, and every op completes (or fails) within the fabric's
/// op timeout.
async fn initiate(ep: Endpoint, task: u32, table: &Timetable, tallies: &Mutex<Vec<Tally>>) {
    let line = RemotePtr::new(TARGET, RegionId(0), task * WORDS_PER_COROUTINE);
    let mut seq = 0u64;
    for (k, phase) in table.phases.iter().enumerate() {
        if task >= phase.window {
            continue;
        }
        let now = ep.now_ns();
        if phase.start_ns > now {
            ep.sleep(phase.start_ns - now).await;
        }
        let mut t = Tally::new();
        loop {
            let t0 = ep.now_ns();
            if t0 >= phase.end_ns {
                break;
            }
            seq += 1;
            if let Err(e) = submit(&ep, phase.verb, line, seq).await {
                t.failures += 1;
                t.first_failure = Some(e.to_string());
                break;
            }
            let t1 = ep.now_ns();
            if t0 >= phase.measure_ns {
                WorkerStats::record_latency(&mut t.latency_ns, t1 - t0);
                t.submissions += 1;
                t.last_done_ns = t1;
            }
        }
        tallies.lock().unwrap_or_else(|e| e.into_inner())[k].merge(&t);
    }
}

/// Why a submission failed, naming its verb.
#[derive(Debug, thiserror::Error)]
enum SubmitError {
    #[error("{}: {failed}", .verb.name())]
    Op { verb: Verb, failed: OpError },
    #[error("{}: the RPC reply {reply:?} is not the request {request:?} echoed", .verb.name())]
    NotEchoed {
        verb: Verb,
        reply: Vec<u8>,
        request: Vec<u8>,
    },
}

/// Posts one submission of `verb` on co-routine `line`'s words and awaits it; an error
/// names what failed.
async fn submit(ep: &Endpoint, verb: Verb, line: RemotePtr, seq: u64) -> Result<(), SubmitError> {
    let one = [verb];
    let ops: &[Verb] = if verb == Verb::Doorbell {
        &MIXED_DOORBELL
    } else {
        &one
    };
    let request = seq.to_le_bytes().to_vec();
    let mut d = ep.doorbell_for(ops.len());
    let mut rpcs = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        // Each one-sided op of the doorbell on its own word of the line.
        let word = line.add(i as u32 % WORDS_PER_COROUTINE);
        match op {
            Verb::Read => d.read(word, 1),
            Verb::Write => d.write(word, Words::from_slice(&[seq])),
            // Whether it swaps does not change what it costs.
            Verb::Cas => d.cas(word, seq, seq + 1),
            Verb::FetchAdd => d.fetch_add(word, 1),
            Verb::Rpc => {
                let i = d.rpc(TARGET, request.clone());
                rpcs.push(i);
                i
            }
            Verb::Doorbell => unreachable!("a doorbell holds single ops"),
        };
    }
    let done = d
        .submit()
        .await
        .map_err(|failed: OpError| SubmitError::Op { verb, failed })?;
    for i in rpcs {
        if done.rpc(i) != request.as_slice() {
            return Err(SubmitError::NotEchoed {
                verb,
                reply: done.rpc(i).to_vec(),
                request,
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- the coordinator

/// One op over one transport: latency with one outstanding, rate with the window.
#[derive(Clone, Debug, Serialize)]
pub struct OpRow {
    pub op: Verb,
    pub ops_per_doorbell: u32,
    /// How the transport carries it (`ucx::describe`; for the doorbell, each op as its own).
    pub carried: String,
    /// UCX emulates it with active messages the target's progress answers (no RDMA).
    pub emulated_by_am: bool,
    /// One op (or doorbell) outstanding.
    pub latency_us_p50: f64,
    pub latency_us_p99: f64,
    pub latency_us_mean: f64,
    pub latency_samples: u64,
    /// `rate_window` co-routines, one op (or doorbell) each outstanding; ops per second
    /// (8 per doorbell for the mixed one), and their latency under that load.
    pub rate_ops_per_s: f64,
    pub rate_window: u32,
    pub rate_latency_us_p50: f64,
    pub rate_latency_us_p99: f64,
    pub failures: u64,
    pub first_failure: Option<String>,
}

/// Every op over one transport.
#[derive(Clone, Debug, Serialize)]
pub struct TransportReport {
    pub transport: String,
    /// How each verb travels (the report's `ucx.verbs` in `atoll cluster`).
    pub verbs: BTreeMap<String, String>,
    pub ops: Vec<OpRow>,
}

/// The settings of a run, as the report states them.
#[derive(Clone, Debug, Serialize)]
pub struct FabricBenchSettings {
    pub duration_ms: u64,
    pub warmup_ms: u64,
    pub processes: u16,
    pub workers_per_process: u16,
    pub window_coroutines: u32,
    pub op_bytes: usize,
    pub mixed_doorbell: Vec<Verb>,
}

/// What `atoll fabric-bench` prints and writes.
#[derive(Clone, Debug, Serialize)]
pub struct FabricBenchReport {
    pub format: &'static str,
    pub format_version: u32,
    pub config: FabricBenchSettings,
    pub transports: Vec<TransportReport>,
    /// Every op of every phase completed.
    pub passed: bool,
    pub env: atoll_runner::env::EnvReport,
}

/// Whether `how` (a `ucx::describe` line) says UCX emulates the verb over messages.
fn emulated(how: &str) -> bool {
    how.contains("emulated")
}

/// Runs every transport of `cfg`, each on two fresh node processes of `exe`.
pub fn run(
    cfg: &FabricBenchConfig,
    exe: &std::path::Path,
) -> Result<FabricBenchReport, ClusterError> {
    cluster::ucx_available()?;
    let probe = atoll_runner::env::Probe::start(true);
    let plan = NodePlan {
        duration_ms: cfg.duration_ms,
    };
    let args = vec![
        MODE.to_string(),
        serde_json::to_string(&plan).expect("a plan serializes"),
    ];
    let run = Duration::from_nanos(Timetable::new(cfg.duration_ms).end_ns);
    let mut transports = Vec::new();
    for &t in &cfg.transports {
        let figures = cluster::with_nodes(NODES, exe, |hub| {
            hub.run_nodes(&args, t, run, &|| {})?;
            let finish = Instant::now() + Duration::from_secs(FINISH_S_MAX);
            let summaries = hub.gather("summary", finish)?;
            hub.broadcast(&Msg::Bye)?;
            let Some(Msg::Summary { summary }) = summaries.into_iter().next() else {
                unreachable!("gather returns one summary per node")
            };
            serde_json::from_value::<Vec<PhaseFigures>>(summary).map_err(|e| {
                ClusterError::BadInput(format!("malformed figures from the initiator: {e}"))
            })
        })?;
        transports.push(transport_report(t, &figures));
    }
    let passed = transports
        .iter()
        .all(|t| t.ops.iter().all(|o| o.failures == 0));
    Ok(FabricBenchReport {
        format: REPORT_FORMAT,
        format_version: REPORT_FORMAT_VERSION,
        config: FabricBenchSettings {
            duration_ms: cfg.duration_ms,
            warmup_ms: warmup_ms(cfg.duration_ms),
            processes: NODES,
            workers_per_process: 1,
            window_coroutines: WINDOW_COROUTINES,
            op_bytes: OP_BYTES,
            mixed_doorbell: MIXED_DOORBELL.to_vec(),
        },
        transports,
        passed,
        env: probe.finish(&atoll_runner::env::CpuWindow::default(), 0),
    })
}

/// One transport's rows from the initiator's phases (a latency and a rate phase per op).
fn transport_report(t: Transports, figures: &[PhaseFigures]) -> TransportReport {
    let verbs: BTreeMap<String, String> = ucx::describe(t, false)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    let how = |v: Verb| verbs.get(v.name()).cloned().unwrap_or_default();
    let ops = Verb::ALL
        .iter()
        .map(|&v| {
            let phase = |window: u32| figures.iter().find(|f| f.op == v && f.window == window);
            let (lat, rate) = (phase(1), phase(WINDOW_COROUTINES));
            let (carried, emulated_by_am) = if v == Verb::Doorbell {
                (
                    "each op as its verb travels, posted together, awaited together".to_string(),
                    MIXED_DOORBELL.iter().any(|&o| emulated(&how(o))),
                )
            } else {
                let h = how(v);
                let e = emulated(&h);
                (h, e)
            };
            let failures = lat.map_or(1, |f| f.failures) + rate.map_or(1, |f| f.failures);
            OpRow {
                op: v,
                ops_per_doorbell: v.ops_per_doorbell(),
                carried,
                emulated_by_am,
                latency_us_p50: lat.map_or(0.0, |f| f.latency_us_p50),
                latency_us_p99: lat.map_or(0.0, |f| f.latency_us_p99),
                latency_us_mean: lat.map_or(0.0, |f| f.latency_us_mean),
                latency_samples: lat.map_or(0, |f| f.submissions),
                rate_ops_per_s: rate.map_or(0.0, |f| f.ops_per_s),
                rate_window: WINDOW_COROUTINES,
                rate_latency_us_p50: rate.map_or(0.0, |f| f.latency_us_p50),
                rate_latency_us_p99: rate.map_or(0.0, |f| f.latency_us_p99),
                failures,
                first_failure: lat
                    .and_then(|f| f.first_failure.clone())
                    .or_else(|| rate.and_then(|f| f.first_failure.clone()))
                    .or_else(|| {
                        (lat.is_none() || rate.is_none())
                            .then(|| format!("{}: a phase reported no figures", v.name()))
                    }),
            }
        })
        .collect();
    TransportReport {
        transport: t.name().to_string(),
        verbs,
        ops,
    }
}

impl FabricBenchReport {
    /// The printed report: per transport a table of ops, then build and machine.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let c = &self.config;
        let _ = writeln!(
            o,
            "fabric-bench: {} processes (initiator, target), {} UCX worker each, {}-byte ops; \
             {} ms measured per phase after {} ms warm-up",
            c.processes, c.workers_per_process, c.op_bytes, c.duration_ms, c.warmup_ms
        );
        let _ = writeln!(
            o,
            "latency: one op outstanding; rate: {} co-routines, one op each outstanding; \
             doorbell8 = {}",
            c.window_coroutines,
            c.mixed_doorbell
                .iter()
                .map(|v| v.name())
                .collect::<Vec<_>>()
                .join(" ")
        );
        for t in &self.transports {
            let _ = writeln!(o);
            let _ = writeln!(
                o,
                "{:<10} {:<8} {:>10} {:>10} {:>13} {:>14}",
                format!("[{}]", t.transport),
                "emulated",
                "p50 us",
                "p99 us",
                "ops/s",
                "p50 us loaded"
            );
            for r in &t.ops {
                let _ = writeln!(
                    o,
                    "{:<10} {:<8} {:>10.2} {:>10.2} {:>13.0} {:>14.2}{}",
                    r.op.name(),
                    if r.emulated_by_am { "AM" } else { "no" },
                    r.latency_us_p50,
                    r.latency_us_p99,
                    r.rate_ops_per_s,
                    r.rate_latency_us_p50,
                    match &r.first_failure {
                        Some(f) => format!("  FAILED {} ops: {f}", r.failures),
                        None => String::new(),
                    }
                );
            }
            for (verb, how) in &t.verbs {
                let _ = writeln!(o, "  {verb:<10} {how}");
            }
        }
        let _ = writeln!(o);
        let b = &self.env.build;
        let _ = writeln!(
            o,
            "build       atoll {} ({}, {})",
            b.git_commit, b.profile, b.target
        );
        let load = |l: Option<f64>| l.map_or("unknown".into(), |l| format!("{l:.2}"));
        let _ = writeln!(
            o,
            "machine     {}, {} cores, 1-minute load {} at start, {} at end",
            self.env.cpu_model,
            self.env.cores,
            load(self.env.loadavg_1m_start),
            load(self.env.loadavg_1m_end)
        );
        if let Some(w) = self.env.busy_warning() {
            let _ = writeln!(o, "warning     {w}");
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fabric_bench_refuses_an_unknown_transport_and_a_zero_duration_naming_them() {
        let e = FabricBenchConfig::parse("ib", 100).unwrap_err().0;
        assert!(e.contains("'ib'") && e.contains("shm, tcp or both"), "{e}");
        let e = FabricBenchConfig::parse("shm", 0).unwrap_err().0;
        assert!(e.contains("--duration-ms 0") && e.contains("1..="), "{e}");
        assert!(FabricBenchConfig::parse("shm", DURATION_MS_MAX + 1).is_err());
        assert_eq!(
            FabricBenchConfig::parse("both", 1)
                .unwrap()
                .transports
                .len(),
            2
        );
    }

    #[test]
    fn fabric_bench_timetable_runs_every_op_twice_in_order_without_overlap() {
        let t = Timetable::new(100);
        assert_eq!(t.phases.len(), Verb::ALL.len() * 2);
        let mut last_end = 0;
        for (i, p) in t.phases.iter().enumerate() {
            assert_eq!(p.verb, Verb::ALL[i / 2]);
            assert_eq!(p.window, if i % 2 == 0 { 1 } else { WINDOW_COROUTINES });
            assert!(p.start_ns >= last_end + SETTLE_MS * 1_000_000, "{i}");
            assert!(p.start_ns < p.measure_ns && p.measure_ns < p.end_ns, "{i}");
            assert_eq!(p.end_ns - p.measure_ns, 100 * 1_000_000);
            last_end = p.end_ns;
        }
        assert!(t.end_ns > last_end);
    }

    #[test]
    fn fabric_bench_the_mixed_doorbell_holds_every_kind_on_distinct_words() {
        for v in [
            Verb::Read,
            Verb::Write,
            Verb::Cas,
            Verb::FetchAdd,
            Verb::Rpc,
        ] {
            assert!(MIXED_DOORBELL.contains(&v), "{v:?}");
        }
        assert!(MIXED_DOORBELL.len() <= WORDS_PER_COROUTINE as usize);
    }

    #[test]
    fn fabric_bench_echo_replies_with_the_request() {
        let mut reply = Vec::new();
        let from = ReplyTo {
            worker: 0,
            slot: atoll_fabric::core::SlotId(0),
            index: 0,
            posted_ns: 0,
        };
        assert_eq!(
            Echo.handle(TARGET, from, &[1, 2, 3], &mut reply),
            Handled::Replied
        );
        assert_eq!(reply, vec![1, 2, 3]);
    }
}
