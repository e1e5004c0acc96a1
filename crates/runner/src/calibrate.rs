//! `atoll calibrate`: measures on the in-process fabric, on this machine, what the
//! simulator's CPU model charges (posting and polling a verb, a co-routine switch, serving
//! an RPC, an own-node access, the coordinator's own CPU per transaction and per record),
//! each the median of several repetitions, and scales it to the papers' CPUs.
//!
//! Everything runs on one OS thread (the in-process fabric with `os_threads = 1`), so a
//! figure is the CPU of one core doing that work, never a wait on another thread. Timings
//! live here and in `atoll calibrate`, never in tests.

use crate::config::{ConfigError, CpuReport, RunConfig};
use crate::scripted::TestCluster;
use atoll_fabric::rng::Rng;
use atoll_fabric::{
    Coroutine, Endpoint, NodeId, RemotePtr, ReplyTo, RpcHandler, TaskId, WorkerCore,
};
use atoll_fabric_sim::net::{CpuProfile, CALIBRATION_SCALE};
use atoll_protocols::ProtocolKind;
use atoll_storage::{TableId, TableSpec};
use atoll_txn::handler::StoreHandler;
use atoll_txn::msg::{Item, Request};
use atoll_txn::{Plan, Primitive};
use atoll_workloads::{Params, WorkloadKind};
use serde::Serialize;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::{Arc, Mutex};

/// Records per node of the verb measurements' table: 2^19 records of 14 words (~58 MiB per
/// node), more than this machine's 32 MiB L3, so a random access misses as a big table's
/// would.
const VERB_RECORDS: u64 = 1 << 19;
/// Payload words of the verb measurements' records (64 bytes, YCSB's default record).
const VERB_PAYLOAD_WORDS: u32 = 8;
/// YCSB operations per transaction of the two runs whose difference gives the cost per
/// record touched (RCC's default, 10, lies between).
const YCSB_OPS_FEW: u64 = 4;
const YCSB_OPS_MANY: u64 = 16;
/// Ops per doorbell of the verb measurements: a stage of a transaction of RCC's YCSB (10
/// records) or SmallBank posts a handful to ten at once.
const DOORBELL_OPS: usize = 8;
/// Records the cached-READ measurement cycles over (a few hundred KiB: they stay cached).
const HOT_RECORDS: u64 = 1024;
/// Records of the larger READ request whose handler time, against a one-record request's,
/// gives the handler's cost per reply byte.
const HANDLER_RECORDS_MANY: u64 = 8;
/// Seed of the random keys.
const SEED: u64 = 11;
/// Bounds of the knobs.
pub const REPS_MAX: u32 = 100;
pub const OPS_MIN: u64 = 100;
pub const OPS_MAX: u64 = 100_000_000;
pub const TXN_S_MIN: f64 = 0.01;
pub const TXN_S_MAX: f64 = 600.0;

/// What to measure, and how long.
#[derive(Clone, Debug)]
pub struct CalibrateConfig {
    /// Repetitions of every measurement; the median is reported.
    pub reps: u32,
    /// Operations per repetition of each micro-measurement.
    pub ops: u64,
    /// Measured seconds of each transaction run (after a warm-up of a fifth of it).
    pub txn_s: f64,
    /// ns on the papers' CPU per ns here.
    pub scale: f64,
}

impl Default for CalibrateConfig {
    fn default() -> Self {
        CalibrateConfig {
            reps: 5,
            ops: 200_000,
            txn_s: 1.0,
            scale: CALIBRATION_SCALE,
        }
    }
}

impl CalibrateConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(1..=REPS_MAX).contains(&self.reps) {
            return Err(ConfigError(format!(
                "reps={} is out of range: expected 1..={REPS_MAX}",
                self.reps
            )));
        }
        if !(OPS_MIN..=OPS_MAX).contains(&self.ops) {
            return Err(ConfigError(format!(
                "ops={} is out of range: expected {OPS_MIN}..={OPS_MAX}",
                self.ops
            )));
        }
        if !self.txn_s.is_finite() || !(TXN_S_MIN..=TXN_S_MAX).contains(&self.txn_s) {
            return Err(ConfigError(format!(
                "txn-seconds={} is out of range: expected {TXN_S_MIN}..={TXN_S_MAX}",
                self.txn_s
            )));
        }
        let max = atoll_fabric_sim::net::CPU_SCALE_MAX;
        if !self.scale.is_finite() || self.scale <= 0.0 || self.scale > max {
            return Err(ConfigError(format!(
                "scale={} is out of range: expected a factor in (0, {max}]",
                self.scale
            )));
        }
        Ok(())
    }
}

/// One measured cost.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The `CpuProfile` field it sets, or an informative name.
    pub key: &'static str,
    pub what: &'static str,
    /// Median over the repetitions, ns on this machine.
    pub ns: f64,
    /// `ns` times the scale: ns on the papers' CPU.
    pub scaled_ns: f64,
    pub how: &'static str,
    /// Every repetition's figure, ns on this machine.
    pub samples_ns: Vec<f64>,
}

/// What `atoll calibrate` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    pub scale: f64,
    pub scale_basis: &'static str,
    pub reps: u32,
    pub ops: u64,
    pub txn_s: f64,
    pub rows: Vec<Row>,
    /// The CPU profile these figures make (scaled), as `CpuProfile::calibrated` holds it.
    pub profile: CpuReport,
    /// Fields whose measured cost came out below zero (a difference of two noisy medians)
    /// and which the profile takes as 0, each with its measured ns: said, never silent.
    pub clamped_to_zero: Vec<(String, f64)>,
    pub env: crate::env::EnvReport,
}

/// CPU time of the calling thread, ns: what a measurement spent, whatever else the machine
/// ran meanwhile (wall time on a busy 2-core machine counts other processes' turns too).
fn thread_cpu_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid timespec for the call to fill; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is readable on Linux");
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn verb_cluster(nodes: u16) -> TestCluster {
    let table = TableSpec {
        name: "calibrate".into(),
        payload_words: VERB_PAYLOAD_WORDS,
        capacity_per_node: VERB_RECORDS as u32,
        capacity_max_per_node: Some(VERB_RECORDS as u32),
        partition: atoll_storage::Partition::Range {
            keys_per_node: VERB_RECORDS,
        },
        ordered: false,
        gone_keys_max_per_node: 0,
    };
    let cl = TestCluster::new(nodes, vec![table], Plan::uniform(Primitive::OneSided), 2);
    for s in &cl.stores {
        let base = s.node.0 as u64 * VERB_RECORDS;
        for k in base..base + VERB_RECORDS {
            s.insert(TableId(0), k, &[0; VERB_PAYLOAD_WORDS as usize])
                .expect("sized for the records");
        }
    }
    cl
}

/// `ops` random records of `node` among its first `records`, as pointers.
fn random_ptrs(
    cl: &TestCluster,
    node: u16,
    records: u64,
    ops: u64,
    rng: &mut Rng,
) -> Vec<RemotePtr> {
    let base = node as u64 * VERB_RECORDS;
    (0..ops)
        .map(|_| cl.record_ptr(TableId(0), base + rng.below(records)))
        .collect()
}

/// Runs `body` as node 0's first co-routine; returns the ns per op it measured.
fn timed(
    cl: &TestCluster,
    ops: u64,
    body: impl Fn(Endpoint) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>> + Sync,
) -> f64 {
    let took = Arc::new(Mutex::new(0.0f64));
    let t = took.clone();
    let body = &body;
    cl.run(&move |core: &Rc<WorkerCore>, k| {
        (core.node() == NodeId(0) && k == 0).then(|| {
            let ep = Endpoint::new(core.clone(), TaskId(0));
            let t = t.clone();
            let fut = body(ep);
            Box::pin(async move {
                let t0 = thread_cpu_ns();
                fut.await;
                *t.lock().unwrap() = (thread_cpu_ns() - t0) as f64;
            }) as Coroutine
        })
    });
    let ns = *took.lock().unwrap();
    ns / ops as f64
}

/// ns per READ (or CAS) of the records `ptrs` points at, posted `DOORBELL_OPS` per doorbell
/// as a transaction's stage posts them.
fn verb_ns(cl: &TestCluster, ptrs: &[RemotePtr], cas: bool) -> f64 {
    let words = atoll_storage::layout::HEADER_WORDS + VERB_PAYLOAD_WORDS;
    let ptrs: Arc<Vec<RemotePtr>> = Arc::new(ptrs.to_vec());
    timed(cl, ptrs.len() as u64, move |ep| {
        let ptrs = ptrs.clone();
        Box::pin(async move {
            for batch in ptrs.chunks(DOORBELL_OPS) {
                let mut d = ep.doorbell();
                for p in batch {
                    if cas {
                        // Expects a value no header word holds: it fails and leaves the
                        // record as it was, at the cost of a successful one.
                        d.cas(*p, u64::MAX, 0);
                    } else {
                        d.read(*p, words);
                    }
                }
                std::hint::black_box(d.submit().await.expect("in-process"));
            }
        })
    })
}

/// ns per co-routine switch: the two co-routines of `cl`'s node-0 worker yield to each
/// other.
fn switch_ns(cl: &TestCluster, ops: u64) -> f64 {
    let took = Arc::new(Mutex::new((None::<u64>, 0.0f64)));
    let t = took.clone();
    cl.run(&move |core: &Rc<WorkerCore>, k| {
        let ep = Endpoint::new(core.clone(), TaskId(k));
        let t = t.clone();
        Some(Box::pin(async move {
            {
                let mut g = t.lock().unwrap();
                g.0.get_or_insert_with(thread_cpu_ns);
            }
            for _ in 0..ops / 2 {
                ep.yield_now().await;
            }
            let mut g = t.lock().unwrap();
            let start = g.0.expect("set on entry");
            g.1 = (thread_cpu_ns() - start) as f64;
        }) as Coroutine)
    });
    let ns = took.lock().unwrap().1;
    // Each of the two co-routines yielded ops / 2 times: `ops` executor turns in all.
    ns / (ops / 2 * 2) as f64
}

/// ns per RPC served, and its request's and reply's bytes: node 1's handler decodes, dispatches and
/// answers a READ request for `records` random records, as a worker's event loop calls it.
fn rpc_handler_ns(cl: &TestCluster, ops: u64, rng: &mut Rng, records: u64) -> (f64, f64) {
    let handler = StoreHandler::new(
        cl.stores[1].clone(),
        cl.catalog.extra_region(atoll_txn::coord::LOG_EXTRA_REGION),
        atoll_protocols::participants(&Default::default(), &atoll_txn::knobs::NoKnobs),
    );
    let reqs: Vec<Vec<u8>> = (0..ops)
        .map(|_| {
            let mut req = Vec::new();
            Request::Read {
                items: (0..records)
                    .map(|_| Item {
                        table: TableId(0),
                        key: VERB_RECORDS + rng.below(VERB_RECORDS),
                        loc: None,
                    })
                    .collect(),
            }
            .encode(&mut req);
            req
        })
        .collect();
    let from = ReplyTo {
        worker: 0,
        slot: atoll_fabric::core::SlotId(0),
        index: 0,
        posted_ns: 0,
    };
    let mut reply = Vec::new();
    let mut reply_bytes = 0;
    let t0 = thread_cpu_ns();
    for req in &reqs {
        reply.clear();
        std::hint::black_box(handler.handle(NodeId(1), from, req, &mut reply));
        reply_bytes += req.len() + reply.len();
    }
    let ns = (thread_cpu_ns() - t0) as f64 / ops as f64;
    (ns, reply_bytes as f64 / ops as f64)
}

/// A one-node, one-thread, one-co-routine in-process run (every record local, no other
/// thread): CPU ns per committed transaction and own-node ops per committed transaction.
fn txn_run(
    workload: WorkloadKind,
    params: &[(&str, String)],
    txn_s: f64,
) -> Result<(f64, f64), ConfigError> {
    let cfg = RunConfig {
        workload,
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<Params>(),
        protocol: ProtocolKind::Occ,
        plan: Plan::uniform(Primitive::OneSided),
        nodes: 1,
        threads: 1,
        coroutines: 1,
        os_threads: Some(1),
        log_replicas: 0,
        duration_s: txn_s,
        warmup_s: txn_s / 5.0,
        ..RunConfig::default()
    };
    let r = crate::run(&cfg, &|_| {}).expect("a calibration run is a valid configuration");
    assert!(
        r.passed,
        "a calibration run failed its checks: {:?}",
        r.checks
    );
    let committed = r.summary.committed;
    let cpu_ns = r.env.cpu_us_per_txn.filter(|_| committed > 0).ok_or_else(|| {
        ConfigError(format!(
            "txn-seconds={txn_s}: the {} run committed {committed} transactions in its measured window (expected some: give it longer)",
            workload.name()
        ))
    })? * 1e3;
    let local: u64 = r.verbs.by_kind.values().map(|v| v.local_ops).sum();
    Ok((cpu_ns, local as f64 / committed as f64))
}

/// Measures every cost `reps` times; prints nothing.
pub fn calibrate(cfg: &CalibrateConfig) -> Result<Calibration, ConfigError> {
    cfg.validate()?;
    let probe = crate::env::Probe::start(true);
    // Never opened: the process's CPU over a window means nothing here.
    let window = crate::env::CpuWindow::default();
    let mut rng = Rng::new(SEED);
    let (one, two) = (verb_cluster(1), verb_cluster(2));
    let n = cfg.reps as usize;
    let mut s: std::collections::BTreeMap<&'static str, Vec<f64>> = Default::default();
    let mut push = |k: &'static str, v: f64| s.entry(k).or_default().push(v);
    for _ in 0..n {
        // Fresh random records for each measurement, so none runs on records another just
        // brought into the caches.
        let mut ptrs = |cl: &TestCluster, node: u16, records: u64| {
            random_ptrs(cl, node, records, cfg.ops, &mut rng)
        };
        let lr = verb_ns(&one, &ptrs(&one, 0, VERB_RECORDS), false);
        let lc = verb_ns(&one, &ptrs(&one, 0, VERB_RECORDS), true);
        let rr = verb_ns(&two, &ptrs(&two, 1, VERB_RECORDS), false);
        let rc = verb_ns(&two, &ptrs(&two, 1, VERB_RECORDS), true);
        let hot = verb_ns(&one, &ptrs(&one, 0, HOT_RECORDS), false);
        push("local_read", lr);
        push("local_read_hot", hot);
        push("local_cas", lc);
        push("remote_read", rr);
        push("remote_cas", rc);
        push("post", ((rr - lr) + (rc - lc)) / 2.0);
        let sw = switch_ns(&one, cfg.ops);
        push("switch", sw);
        let (one_ns, one_bytes) = rpc_handler_ns(&two, cfg.ops, &mut rng, 1);
        let (many_ns, many_bytes) = rpc_handler_ns(&two, cfg.ops, &mut rng, HANDLER_RECORDS_MANY);
        push("rpc_handler", one_ns);
        push("rpc_handler_many", many_ns);
        push(
            "rpc_handler_per_byte",
            (many_ns - one_ns) / (many_bytes - one_bytes).max(1.0),
        );
        let ycsb = |ops: u64| {
            vec![
                ("compute_us", "0".to_string()),
                ("ops_per_txn", ops.to_string()),
            ]
        };
        // Outside verbs: less the own-node accesses and the one co-routine switch per
        // transaction (the bench's yield after each). The runs' tables (YCSB's 100,000
        // records of 64 bytes, ~14 MiB) fit this machine's L3, so their accesses cost the
        // cached READ's path, not a miss to memory.
        let outside = |(cpu, local_ops): (f64, f64)| cpu - local_ops * hot - sw;
        let few = outside(txn_run(WorkloadKind::Ycsb, &ycsb(YCSB_OPS_FEW), cfg.txn_s)?);
        let many = outside(txn_run(
            WorkloadKind::Ycsb,
            &ycsb(YCSB_OPS_MANY),
            cfg.txn_s,
        )?);
        let per_access = (many - few) / (YCSB_OPS_MANY - YCSB_OPS_FEW) as f64;
        push("ycsb_few", few);
        push("ycsb_many", many);
        push("txn_per_access", per_access);
        push("txn", few - per_access * YCSB_OPS_FEW as f64);
        push(
            "smallbank",
            outside(txn_run(WorkloadKind::SmallBank, &[], cfg.txn_s)?),
        );
    }
    let rows_spec: [(&'static str, &'static str, &'static str, &'static str); 15] = [
        ("post_ns", "post", "post + poll a one-sided verb to another node", "(remote READ - local READ + remote CAS - local CAS) / 2, random records of a 2^19-record table, 8 ops per doorbell, 1 OS thread"),
        ("switch_ns", "switch", "co-routine switch (one executor turn)", "two co-routines of one worker yield_now to each other; elapsed / turns"),
        ("rpc_handler_ns", "rpc_handler", "serve one small RPC (dispatch + handler)", "StoreHandler::handle of a one-record READ request for a random record, in a loop"),
        ("rpc_handler_ns_per_byte", "rpc_handler_per_byte", "serve an RPC: per request + reply byte beyond the small one's (ns per byte)", "StoreHandler::handle of 8-record vs one-record READ requests: (ns 8 - ns 1) / (request + reply bytes 8 - request + reply bytes 1)"),
        ("-", "rpc_handler_many", "serve an 8-record READ RPC", "as rpc_handler, 8 random records per request"),
        ("local_op_ns", "local_read", "own-node access (READ of a random record)", "doorbells of 8 own-node READs (the inline path), random records of a 2^19-record table; per op"),
        ("txn_ns", "txn", "coordinator CPU per attempt outside verbs", "YCSB fit's intercept (on the medians): CPU per committed txn (1 node x 1 thread x 1 co-routine, OCC, compute_us=0) less local ops x cached local READ and 1 switch, at 4 and 16 ops"),
        ("txn_ns_per_access", "txn_per_access", "coordinator CPU per record touched outside verbs", "YCSB fit's slope (on the medians): (16-op figure - 4-op figure) / 12"),
        ("-", "local_read_hot", "own-node READ of a cached record", "as local READ, over 1,024 records (what the transaction runs' local ops are charged)"),
        ("-", "local_cas", "own-node CAS (random record)", "as local READ, with CAS"),
        ("-", "remote_read", "remote READ, whole (post, execute, poll)", "doorbells of 8 READs of node 1's random records from node 0, 1 OS thread; per op"),
        ("-", "remote_cas", "remote CAS, whole", "as remote READ, with CAS"),
        ("-", "ycsb_few", "YCSB 4 ops: coordinator CPU per txn outside verbs", "CPU per committed txn less local ops x cached local READ and 1 switch"),
        ("-", "ycsb_many", "YCSB 16 ops: coordinator CPU per txn outside verbs", "as above"),
        ("-", "smallbank", "SmallBank: coordinator CPU per txn outside verbs", "as above, SmallBank defaults (check of the fit: model = txn_ns + accesses x txn_ns_per_access)"),
    ];
    // The fit is made on the medians of the two YCSB figures (each repetition's own fit is
    // kept as its samples): a fit per repetition compounds two noisy figures.
    let med = |k: &str| median(s.get(k).map(Vec::as_slice).unwrap_or(&[0.0]));
    let slope = (med("ycsb_many") - med("ycsb_few")) / (YCSB_OPS_MANY - YCSB_OPS_FEW) as f64;
    let intercept = med("ycsb_few") - slope * YCSB_OPS_FEW as f64;
    let rows: Vec<Row> = rows_spec
        .iter()
        .map(|&(key, k, what, how)| {
            let samples = s.get(k).cloned().unwrap_or_default();
            let ns = match k {
                "txn" => intercept,
                "txn_per_access" => slope,
                _ => median(&samples),
            };
            Row {
                key,
                what,
                ns,
                scaled_ns: ns * cfg.scale,
                how,
                samples_ns: samples,
            }
        })
        .collect();
    let get = |key: &str| {
        rows.iter()
            .find(|r| r.key == key)
            .map(|r| r.scaled_ns.max(0.0).round() as u64)
            .expect("every profile field has a row")
    };
    let profile = CpuProfile {
        name: "measured".into(),
        switch_ns: get("switch_ns"),
        post_ns: get("post_ns"),
        local_op_ns: get("local_op_ns"),
        rpc_handler_ns: get("rpc_handler_ns"),
        rpc_handler_ns_per_byte: rows
            .iter()
            .find(|r| r.key == "rpc_handler_ns_per_byte")
            .map(|r| r.scaled_ns.max(0.0))
            .expect("a row for the per-byte handler cost"),
        txn_ns: get("txn_ns"),
        txn_ns_per_access: get("txn_ns_per_access"),
    };
    Ok(Calibration {
        scale: cfg.scale,
        scale_basis: SCALE_BASIS,
        reps: cfg.reps,
        ops: cfg.ops,
        txn_s: cfg.txn_s,
        clamped_to_zero: clamped_to_zero(&rows),
        rows,
        profile: CpuReport::of(&profile),
        env: probe.finish(&window, 0),
    })
}

/// Where the default scale comes from.
const SCALE_BASIS: &str =
    "base clocks: 2.596 GHz here (TSC) / 2.3 GHz (Xeon E5-2670 v3, RCC's CPU); equal IPC assumed";

/// The rows whose cost came out below zero, with what was measured.
fn clamped_to_zero(rows: &[Row]) -> Vec<(String, f64)> {
    rows.iter()
        .filter(|r| r.scaled_ns < 0.0)
        .map(|r| (r.key.to_string(), r.ns))
        .collect()
}

impl Calibration {
    /// The table: what, ns here, ns on the papers' CPU, how measured; then the profile.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "calibration: median of {} repetitions ({} ops each, {} s per transaction run); scale x{:.3} ({})",
            self.reps, self.ops, self.txn_s, self.scale, self.scale_basis
        );
        let _ = writeln!(
            o,
            "{:<20} {:<52} {:>10} {:>12}  how measured",
            "profile field", "what", "ns here", "ns papers'"
        );
        for r in &self.rows {
            let _ = writeln!(
                o,
                "{:<20} {:<52} {:>10.1} {:>12.1}  {}",
                r.key, r.what, r.ns, r.scaled_ns, r.how
            );
        }
        let p = &self.profile;
        let _ = writeln!(
            o,
            "profile             switch_ns {} post_ns {} local_op_ns {} rpc_handler_ns {} txn_ns {} txn_ns_per_access {} rpc_handler_ns_per_byte {:.3} (scaled)",
            p.switch_ns, p.post_ns, p.local_op_ns, p.rpc_handler_ns, p.txn_ns, p.txn_ns_per_access, p.rpc_handler_ns_per_byte
        );
        for (key, ns) in &self.clamped_to_zero {
            let _ = writeln!(
                o,
                "note        {key} measured {ns:.1} ns, below zero (a difference of two medians within their noise): the profile takes 0"
            );
        }
        self.env.render(&mut o);
        o
    }
}
