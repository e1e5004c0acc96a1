//! The `atoll` command line: parses flags and config files into a run configuration, runs
//! benchmarks, prints progress and summaries, writes JSON. The only place that knows clap.

use atoll_protocols::ProtocolKind;
use atoll_runner::config::Fabric;
use atoll_runner::config::FaultConfig;
use atoll_runner::config::{Roles, NODES_MAX};
use atoll_runner::interrupt::{self, EXIT_INTERRUPTED};
use atoll_runner::{ProgressLine, RunConfig};
use atoll_storage::{Architecture, TsPlacement};
use atoll_txn::{Plan, Primitive};
use atoll_workloads::{Params, WorkloadKind};
use clap::{Parser, Subcommand};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc frees a block allocated by another thread without locks; glibc's allocator takes
/// the owning arena's lock, and RPC buffers cross threads on every round trip (profiles of
/// the RPC plans showed futex waits).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Exit code for bad input (flags, config, values): the usual usage-error code.
const EXIT_BAD_INPUT: u8 = 2;
/// Exit code when a run's invariant checks fail, or the run itself failed (a worker panicked,
/// or a node failed while a transaction was committing).
const EXIT_CHECK_FAILED: u8 = 1;

/// Prints a run's report, writes its JSON if asked, and names every failed check: the exit
/// code to end with when the file cannot be written or a check failed.
fn finish_report(report: &atoll_runner::Report, json: Option<&PathBuf>) -> Result<(), ExitCode> {
    print!("{}", report.render());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report).expect("reports serialise");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return Err(ExitCode::from(EXIT_BAD_INPUT));
        }
    }
    if !report.passed {
        for c in report.checks.iter().filter(|c| !c.passed) {
            eprintln!("error: check {} failed: {}", c.name, c.detail);
        }
        return Err(ExitCode::from(EXIT_CHECK_FAILED));
    }
    Ok(())
}

/// Prints why a run produced no report; returns the exit code: bad input, or a failed run.
fn run_failed(e: &atoll_runner::RunError, context: &str) -> ExitCode {
    eprintln!("error: {context}{e}");
    match e {
        atoll_runner::RunError::Config(_) => ExitCode::from(EXIT_BAD_INPUT),
        atoll_runner::RunError::Panicked(_)
        | atoll_runner::RunError::NodeFailed { .. }
        | atoll_runner::RunError::Load { .. }
        | atoll_runner::RunError::Crashed { .. } => ExitCode::from(EXIT_CHECK_FAILED),
    }
}

#[derive(Parser)]
#[command(
    name = "atoll",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("ATOLL_GIT_COMMIT"), ")"),
    about = "Atoll: a distributed in-memory transaction engine for fast networks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a benchmark (default: SmallBank under OCC on 2 in-process nodes for 10 s).
    Bench(Box<BenchArgs>),
    /// Check a recorded history (from `bench --history`) for serializability.
    CheckHistory(CheckArgs),
    /// Measure the memory floor of a transaction shape: threads copying random records out
    /// of a table, no engine (compare `bench` against it as a ratio, in the same session).
    Floor(FloorArgs),
    /// Measure on this machine (in-process fabric) what the simulator's CPU model charges:
    /// verbs, switches, RPC handling, local accesses, the coordinator's own CPU.
    Calibrate(CalibrateArgs),
    /// Run a benchmark on a cluster of node processes over UCX, started here
    /// (`atoll cluster --nodes 3 --transport tcp bench --workload ycsb ...`, the same flags
    /// as `bench`) or waiting on other machines (`--hosts h1:p1,h2:p2 ...`).
    Cluster(ClusterArgs),
    /// Serve one node of an `atoll cluster` run: `--listen HOST:PORT` waits there for a
    /// coordinator (`cluster --hosts`); `--coordinator ADDR --node N` is how `cluster
    /// --nodes` starts its children.
    Node(NodeArgs),
    /// Microbenchmark of the UCX backend through the fabric API: latency and rate of READ,
    /// WRITE, CAS, FETCH_ADD, RPC and a doorbell of 8, between two local node processes.
    FabricBench(FabricBenchArgs),
}

#[derive(clap::Args)]
struct ClusterArgs {
    /// Node processes to start on this machine [default: 2]. Not with --hosts.
    #[arg(long)]
    nodes: Option<u16>,
    /// Nodes waiting at these addresses (`atoll node --listen HOST:PORT` on each host),
    /// comma-separated: node i is the i-th, the node count the list's length.
    #[arg(long)]
    hosts: Option<String>,
    /// UCX transport between them: shm (shared memory), tcp, or auto (shm when every node
    /// is on this machine, else tcp).
    #[arg(long, default_value = "auto")]
    transport: String,
    /// `bench` and its flags.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, required = true)]
    command: Vec<String>,
}

#[derive(clap::Args)]
struct NodeArgs {
    /// Listen on HOST:PORT (this host's address) for a coordinator (`cluster --hosts`),
    /// serve its run, exit.
    #[arg(long, conflicts_with_all = ["coordinator", "node"])]
    listen: Option<String>,
    /// The coordinator's address (host:port) to dial (as `cluster --nodes` starts nodes).
    #[arg(long, requires = "node", required_unless_present = "listen")]
    coordinator: Option<String>,
    /// This node's id (with --coordinator).
    #[arg(long, requires = "coordinator")]
    node: Option<u16>,
}

/// `bench`'s flags alone, as `cluster` forwards them and `node` receives them.
#[derive(Parser)]
#[command(name = "bench", no_binary_name = true)]
struct BenchOnly {
    #[command(flatten)]
    args: BenchArgs,
}

#[derive(clap::Args)]
struct FloorArgs {
    /// Records in the table.
    #[arg(long, default_value_t = 2_000_000)]
    records: u64,
    /// Bytes per record (a multiple of 8, 8..=4096).
    #[arg(long, default_value_t = 1000)]
    record_bytes: u64,
    /// Random records each transaction copies.
    #[arg(long, default_value_t = 16)]
    accesses: u32,
    #[arg(long, default_value_t = 2)]
    threads: u16,
    /// Seconds to run (after filling the table).
    #[arg(long, default_value_t = 3.0)]
    duration: f64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Find each record through a hash index first (a dependent miss before the copy's, as
    /// an engine has), instead of computing where it lies.
    #[arg(long)]
    index_probe: bool,
    /// Also write the result as JSON.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CalibrateArgs {
    /// Repetitions of every measurement (the median is reported).
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Operations per repetition of each micro-measurement.
    #[arg(long, default_value_t = 200_000)]
    ops: u64,
    /// Measured seconds of each transaction run.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    txn_seconds: f64,
    /// ns on the papers' CPU per ns on this machine (default: the ratio of base clocks,
    /// 2.596 GHz / 2.3 GHz).
    #[arg(long, allow_negative_numbers = true)]
    scale: Option<f64>,
    /// Write the table and the profile as JSON to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CheckArgs {
    /// The history file (JSON lines).
    file: PathBuf,
    /// Also write it as an rw-register history for adya / Elle (and OUT.order.json beside it).
    #[arg(long, value_name = "OUT.jsonl")]
    adya: Option<PathBuf>,
    /// The isolation level to check: serializable (the default) or snapshot (from each
    /// attempt's snapshot and commit timestamps; write skew allowed). A history that records
    /// no snapshot timestamp cannot be checked as snapshot (exit 2).
    #[arg(long, value_name = "LEVEL")]
    isolation: Option<String>,
}

#[derive(clap::Args, Default)]
struct BenchArgs {
    /// Fabric: inproc (threads in this process) or sim (deterministic simulator, virtual time).
    #[arg(long)]
    fabric: Option<String>,
    /// Simulator network profile: edr-ib, fdr-ib, qdr-ib, 10gbe-tcp, ipoib.
    #[arg(long)]
    net: Option<String>,
    /// Simulator CPU profile: calibrated (measured by `atoll calibrate`, the default) or xeon
    /// (the first estimate, no coordinator CPU).
    #[arg(long)]
    cpu_profile: Option<String>,
    /// Simulator only: multiply every cost of the CPU profile by this factor (default 1).
    #[arg(long, allow_negative_numbers = true)]
    cpu_scale: Option<f64>,
    /// Simulator faults: none, some, or
    /// spikes=N,spike_us=X,spike_len_us=Y,pauses=N,pause_us=Z,tear_words=W,tear_ns=S.
    #[arg(long)]
    faults: Option<String>,
    // The workloads and what each is come from their registration, so a new one needs no
    // edit here.
    #[arg(long, help = format!("Workload: {}", WorkloadKind::described()))]
    workload: Option<String>,
    /// Protocol: nowait, waitdie, occ, mvcc, sundial, rsi, namdb.
    #[arg(long)]
    protocol: Option<String>,
    /// Stage plan: one-sided, rpc, per stage (e.g. read=rpc,lock=one-sided,commit=one-sided),
    /// or all (every valid plan of the protocol, ranked).
    #[arg(long)]
    plan: Option<String>,
    /// Nodes of the cluster (partitioned architecture).
    #[arg(long)]
    nodes: Option<u16>,
    /// partitioned (every node holds a partition and runs transactions) or shared-data
    /// (memory nodes hold the records, compute nodes run the transactions) [default:
    /// partitioned].
    #[arg(long)]
    architecture: Option<String>,
    /// Shared-data: nodes holding the records [default: 1].
    #[arg(long)]
    memory_nodes: Option<u16>,
    /// Shared-data: nodes running the transactions [default: 2].
    #[arg(long)]
    compute_nodes: Option<u16>,
    /// Shared-data: where the timestamp service runs: memory (a role of memory node 0) or
    /// own (a node of its own, as RSI's Figure 6) [default: memory].
    #[arg(long)]
    ts_node: Option<String>,
    /// Shared-data: compute node i shares memory node i's machine and reaches its records
    /// with the CPU's own loads, stores and atomics, not the network (NAM-DB's locality;
    /// simulated and in-process fabrics).
    #[arg(long)]
    colocate: bool,
    /// Worker threads per node.
    #[arg(long)]
    threads: Option<u16>,
    /// Coordinator co-routines per thread.
    #[arg(long)]
    coroutines: Option<u16>,
    /// Measured seconds.
    #[arg(long, allow_negative_numbers = true)]
    duration: Option<f64>,
    /// Warm-up seconds before measuring.
    #[arg(long, allow_negative_numbers = true)]
    warmup: Option<f64>,
    /// Seed of every random choice.
    #[arg(long)]
    seed: Option<u64>,
    /// Round-trip latency added to remote verbs, in microseconds: one number for all, or
    /// per class, e.g. read=2,write=2,cas=2.5,fetch_add=2.5,rpc=4.
    #[arg(long, allow_hyphen_values = true)]
    net_latency_us: Option<String>,
    /// Backups each commit logs to (default 1, or 0 on a single node).
    #[arg(long)]
    log_replicas: Option<u16>,
    /// Pin worker threads to cores.
    #[arg(long)]
    pin: bool,
    /// MVCC only: versions kept per record (default 4).
    #[arg(long)]
    mvcc_slots: Option<u32>,
    /// RSI and NAM-DB only: versions in a record block, the newest a snapshot sees read
    /// (default 1, as RSI's paper's implementation).
    #[arg(long)]
    rsi_versions: Option<u32>,
    /// NAM-DB only, with --rsi-versions 2 or more: overflow entries per record slot, where
    /// each memory node's version mover copies the old versions records keep, so older
    /// snapshots still find theirs (default 0: none, no mover).
    #[arg(long)]
    overflow_versions: Option<u32>,
    /// NAM-DB only, with --overflow-versions: microseconds between the version mover's
    /// passes over a memory node's records (default 1000, the paper's 1 ms; 1..=1000000).
    #[arg(long)]
    mover_interval_us: Option<u64>,
    /// NAM-DB only, with --overflow-versions: the least microseconds an overflow entry is
    /// kept when no live snapshot needs it any more (default 0; the slides keep 1 s,
    /// 1000000; 0..=60000000).
    #[arg(long)]
    overflow_keep_us: Option<u64>,
    /// `atoll cluster` only: coalesce the UCX active messages a worker sends one peer worker
    /// within an event-loop turn into one (on, the default), or send each at once (off).
    #[arg(long)]
    coalesce: Option<String>,
    /// WAITDIE only: the starvation fix (waiters raise a FETCH_ADD counter that makes
    /// younger lockers die).
    #[arg(long)]
    waitdie_counter: bool,
    /// NAM-DB only: what owns a slot of the timestamp vector: coordinator (default, the
    /// paper's one per thread) or node (compression: one per compute node, its
    /// coordinators sharing a local counter).
    #[arg(long, value_name = "coordinator|node")]
    vector_slots: Option<String>,
    /// NAM-DB only: a detached fetcher on each compute node keeps a copy of the timestamp
    /// vector, which snapshots take instead of reading the vector.
    #[arg(long)]
    vector_fetcher: bool,
    /// OS threads carrying the workers (default: one per core).
    #[arg(long)]
    os_threads: Option<usize>,
    /// A TOML file with any of these settings and a [params] table of workload knobs.
    #[arg(long, value_name = "FILE.toml")]
    config: Option<PathBuf>,
    /// A workload knob, e.g. -p hot_prob=0.5 (repeatable; overrides the config file).
    #[arg(short = 'p', value_name = "KEY=VALUE")]
    params: Vec<String>,
    /// Write the resolved configuration and every result to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Record every transaction attempt's reads and writes (JSON lines) for check-history.
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Print only the summary.
    #[arg(long)]
    quiet: bool,
    /// Run the same configuration N times (fresh cluster each) and print the median and
    /// spread of throughput and p50/p99 latency (default 1).
    #[arg(long, value_name = "N")]
    repeat: Option<u32>,
}

/// The settings a config file may hold; unknown keys are errors.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    fabric: Option<String>,
    net: Option<String>,
    cpu_profile: Option<String>,
    cpu_scale: Option<f64>,
    faults: Option<String>,
    workload: Option<String>,
    protocol: Option<String>,
    plan: Option<String>,
    nodes: Option<u16>,
    architecture: Option<String>,
    memory_nodes: Option<u16>,
    compute_nodes: Option<u16>,
    ts_node: Option<String>,
    colocate: Option<bool>,
    threads: Option<u16>,
    coroutines: Option<u16>,
    duration: Option<f64>,
    warmup: Option<f64>,
    seed: Option<u64>,
    net_latency_us: Option<toml::Value>,
    log_replicas: Option<u16>,
    pin: Option<bool>,
    waitdie_counter: Option<bool>,
    vector_slots: Option<String>,
    vector_fetcher: Option<bool>,
    mvcc_slots: Option<u32>,
    rsi_versions: Option<u32>,
    overflow_versions: Option<u32>,
    mover_interval_us: Option<u64>,
    overflow_keep_us: Option<u64>,
    os_threads: Option<usize>,
    attempts_max: Option<u32>,
    repeat: Option<u32>,
    params: Option<BTreeMap<String, toml::Value>>,
}

/// The config file's settings (`--config FILE.toml`), or none; unknown keys are refused with
/// the line they are on.
fn read_config_file(path: Option<&std::path::Path>) -> Result<FileConfig, String> {
    Ok(match path {
        None => FileConfig::default(),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
            toml::from_str::<FileConfig>(&text).map_err(|e| {
                let line = e
                    .span()
                    .map(|sp| text[..sp.start].matches('\n').count() + 1);
                let at = line
                    .map(|l| {
                        format!(
                            " line {l} `{}`:",
                            text.lines().nth(l - 1).unwrap_or("").trim()
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "config file {}:{at} {}",
                    path.display(),
                    e.message().trim_end()
                )
            })?
        }
    })
}

/// The fabric, and the simulator's network, faults and CPU model (refused without it).
fn resolve_fabric(cfg: &mut RunConfig, a: &BenchArgs, file: &FileConfig) -> Result<(), String> {
    let net = a.net.as_ref().or(file.net.as_ref());
    let faults = a.faults.as_ref().or(file.faults.as_ref());
    let cpu_profile = a.cpu_profile.as_ref().or(file.cpu_profile.as_ref());
    let cpu_scale = a.cpu_scale.or(file.cpu_scale);
    match a
        .fabric
        .as_deref()
        .or(file.fabric.as_deref())
        .unwrap_or("inproc")
    {
        "inproc" => {
            if let Some(n) = net {
                return Err(format!(
                    "--net {n} needs --fabric sim (the in-process fabric has no network model)"
                ));
            }
            if let Some(f) = faults {
                return Err(format!("--faults {f} needs --fabric sim"));
            }
            if let Some(p) = cpu_profile {
                return Err(format!(
                    "--cpu-profile {p} needs --fabric sim (the in-process fabric spends real CPU)"
                ));
            }
            if let Some(x) = cpu_scale {
                return Err(format!("--cpu-scale {x} needs --fabric sim"));
            }
        }
        "sim" => {
            cfg.fabric = Fabric::Sim {
                net: net.cloned().unwrap_or_else(|| "edr-ib".into()),
                faults: FaultConfig::parse(faults.map(String::as_str).unwrap_or("none"))
                    .map_err(|e| e.to_string())?,
            }
        }
        other => {
            return Err(format!(
                "unknown fabric '{other}': accepted fabrics are inproc, sim"
            ))
        }
    }
    if let Some(p) = cpu_profile {
        cfg.cpu_profile = p.clone();
    }
    if let Some(x) = cpu_scale {
        cfg.cpu_scale = x;
    }
    Ok(())
}

/// The knobs of one protocol family each (WAITDIE's counter, MVCC's slots, RSI's and
/// NAM-DB's versions, NAM-DB's vector, overflow area and mover), refused with another family.
fn resolve_family_knobs(
    cfg: &mut RunConfig,
    a: &BenchArgs,
    file: &FileConfig,
) -> Result<(), String> {
    cfg.waitdie_counter = a.waitdie_counter || file.waitdie_counter.unwrap_or(false);
    if let Some(v) = a.vector_slots.as_deref().or(file.vector_slots.as_deref()) {
        cfg.vector_slots = atoll_txn::tsvc::VectorSlots::parse(v).map_err(|e| e.to_string())?;
    }
    cfg.vector_fetcher = a.vector_fetcher || file.vector_fetcher.unwrap_or(false);
    if let Some(n) = a.mvcc_slots.or(file.mvcc_slots) {
        if cfg.protocol != ProtocolKind::Mvcc {
            return Err(format!(
                "mvcc-slots={n} needs --protocol mvcc, not {}",
                cfg.protocol.name()
            ));
        }
        cfg.mvcc_slots = n;
    }
    if let Some(n) = a.rsi_versions.or(file.rsi_versions) {
        if !matches!(cfg.protocol, ProtocolKind::Rsi | ProtocolKind::NamDb) {
            return Err(format!(
                "rsi-versions={n} needs --protocol rsi or namdb, not {}",
                cfg.protocol.name()
            ));
        }
        cfg.rsi_versions = n;
    }
    if let Some(n) = a.overflow_versions.or(file.overflow_versions) {
        cfg.overflow_versions = n;
    }
    if let Some(us) = a.mover_interval_us.or(file.mover_interval_us) {
        if cfg.overflow_versions == 0 {
            return Err(format!(
                "mover-interval-us={us} paces NAM-DB's version mover, which runs only with an \
                 overflow area: it needs --overflow-versions 1 or more (with --protocol namdb)"
            ));
        }
        cfg.mover_interval_us = us;
    }
    if let Some(us) = a.overflow_keep_us.or(file.overflow_keep_us) {
        if cfg.overflow_versions == 0 {
            return Err(format!(
                "overflow-keep-us={us} is how long NAM-DB's garbage collector keeps an overflow \
                 entry, which exists only with an overflow area: it needs --overflow-versions 1 \
                 or more (with --protocol namdb)"
            ));
        }
        cfg.overflow_keep_us = us;
    }
    Ok(())
}

/// The workload's knobs: the config file's `[params]`, overridden by `-p KEY=VALUE`.
fn resolve_params(
    a: &BenchArgs,
    file_params: Option<BTreeMap<String, toml::Value>>,
) -> Result<Params, String> {
    let mut params = Params::new();
    for (k, v) in file_params.unwrap_or_default() {
        let s = match v {
            toml::Value::String(s) => s,
            other => other.to_string(),
        };
        params.insert(k, s);
    }
    for p in &a.params {
        let (k, v) = p
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| format!("-p '{p}' is not KEY=VALUE (for example -p hot_prob=0.5)"))?;
        params.insert(k.trim().to_string(), v.trim().to_string());
    }
    Ok(params)
}

/// A resolved `bench` command: the run's configuration, and whether `--plan all` (from the
/// flag or the config file) asks for one run per valid plan.
struct Resolved {
    cfg: RunConfig,
    plan_all: bool,
    repeat: u32,
}

/// The architecture and node roles from the flags and the config file: `--nodes` for
/// partitioned, `--memory-nodes`, `--compute-nodes` and `--ts-node` for shared-data.
fn resolve_roles(cfg: &mut RunConfig, a: &BenchArgs, file: &FileConfig) -> Result<(), String> {
    let architecture = a
        .architecture
        .as_deref()
        .or(file.architecture.as_deref())
        .unwrap_or(Architecture::Partitioned.name());
    let memory = a.memory_nodes.or(file.memory_nodes);
    let compute = a.compute_nodes.or(file.compute_nodes);
    let ts = a.ts_node.as_deref().or(file.ts_node.as_deref());
    match Architecture::parse(architecture) {
        Some(Architecture::Partitioned) => {
            let given = [
                memory.map(|_| "--memory-nodes"),
                compute.map(|_| "--compute-nodes"),
                ts.map(|_| "--ts-node"),
            ];
            if let Some(flag) = given.into_iter().flatten().next() {
                return Err(format!(
                    "{flag} needs --architecture shared-data (a partitioned cluster has --nodes, each holding records and running transactions)"
                ));
            }
        }
        Some(Architecture::SharedData) => {
            if let Some(n) = a.nodes.or(file.nodes) {
                return Err(format!(
                    "--nodes {n} with --architecture shared-data: expected --memory-nodes M --compute-nodes C (and --ts-node memory|own) in its place"
                ));
            }
            let ts = match ts {
                None => TsPlacement::Memory,
                Some(t) => TsPlacement::parse(t)
                    .ok_or_else(|| format!("unknown --ts-node '{t}': accepted are memory, own"))?,
            };
            let memory = memory.unwrap_or(SHARED_DATA_MEMORY_NODES_DEFAULT);
            let compute = compute.unwrap_or(SHARED_DATA_COMPUTE_NODES_DEFAULT);
            if memory == 0 || compute == 0 {
                return Err(format!(
                    "--memory-nodes {memory} --compute-nodes {compute}: shared-data needs at least one of each (expected 1..={NODES_MAX} each)"
                ));
            }
            let total = memory as u32 + compute as u32 + u32::from(ts == TsPlacement::Own);
            if total > NODES_MAX as u32 {
                return Err(format!(
                    "--memory-nodes {memory} --compute-nodes {compute} --ts-node {} make {total} nodes, out of range: expected at most {NODES_MAX}",
                    ts.name()
                ));
            }
            cfg.nodes = total as u16;
            cfg.roles = Roles::SharedData {
                memory_nodes: memory,
                ts,
            };
        }
        None => {
            return Err(format!(
                "unknown architecture '{architecture}': accepted are partitioned, shared-data"
            ))
        }
    }
    Ok(())
}

/// Shared-data's shape when `--memory-nodes` or `--compute-nodes` is not given.
const SHARED_DATA_MEMORY_NODES_DEFAULT: u16 = 1;
const SHARED_DATA_COMPUTE_NODES_DEFAULT: u16 = 2;

fn resolve(a: &BenchArgs) -> Result<Resolved, String> {
    let file = read_config_file(a.config.as_deref())?;
    let mut cfg = RunConfig::default();
    resolve_fabric(&mut cfg, a, &file)?;
    if let Some(w) = a.workload.as_ref().or(file.workload.as_ref()) {
        cfg.workload = WorkloadKind::parse(w).ok_or_else(|| {
            format!(
                "unknown workload '{w}': accepted workloads are {}",
                WorkloadKind::accepted()
            )
        })?;
    }
    if let Some(p) = a.protocol.as_ref().or(file.protocol.as_ref()) {
        cfg.protocol = ProtocolKind::parse(p).ok_or_else(|| {
            format!(
                "unknown protocol '{p}': accepted protocols are {}",
                ProtocolKind::accepted()
            )
        })?;
    }
    let mut plan_all = false;
    if let Some(p) = a.plan.as_ref().or(file.plan.as_ref()) {
        // `all` is resolved by `bench`: every valid plan of the protocol, one run each.
        if p.trim() == PLAN_ALL {
            plan_all = true;
        } else {
            cfg.plan = Plan::parse(p).map_err(|e| e.0)?;
        }
    }
    macro_rules! pick {
        ($field:ident, $arg:expr, $file:expr) => {
            if let Some(v) = $arg.or($file) {
                cfg.$field = v;
            }
        };
    }
    pick!(nodes, a.nodes, file.nodes);
    resolve_roles(&mut cfg, a, &file)?;
    pick!(threads, a.threads, file.threads);
    pick!(coroutines, a.coroutines, file.coroutines);
    pick!(duration_s, a.duration, file.duration);
    pick!(warmup_s, a.warmup, file.warmup);
    pick!(seed, a.seed, file.seed);
    let file_latency = file.net_latency_us.as_ref().map(|v| match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    if let Some(s) = a.net_latency_us.as_ref().or(file_latency.as_ref()) {
        cfg.net_latency_us = atoll_runner::config::parse_latency_us(s).map_err(|e| e.0)?;
    }
    // Unless asked for explicitly, log to one backup when there is another node to hold it.
    cfg.colocate = a.colocate || file.colocate.unwrap_or(false);
    cfg.log_replicas = match cfg.roles {
        Roles::Partitioned => RunConfig::default_log_replicas(cfg.nodes),
        // Every compute node has a memory node to log to, unless co-located with the only one.
        Roles::SharedData { .. } => cfg.topology().log_replicas_max().min(1),
    };
    pick!(log_replicas, a.log_replicas, file.log_replicas);
    pick!(attempts_max, None, file.attempts_max);
    cfg.pin_threads = a.pin || file.pin.unwrap_or(false);
    resolve_family_knobs(&mut cfg, a, &file)?;
    cfg.os_threads = a.os_threads.or(file.os_threads);
    cfg.params = resolve_params(a, file.params.clone())?;
    cfg.record_history = a.history.is_some();
    // Streamed to the file as the run goes: memory stays bounded whatever the duration.
    cfg.history_file = a.history.clone();
    if let Some(path) = &a.history {
        eprintln!(
            "history: written to {} as the run goes (one JSON line per attempt)",
            path.display()
        );
    }
    cfg.validate().map_err(|e| e.0)?;
    if plan_all && cfg.record_history {
        return Err(
            "--history with --plan all: a history file holds one run (name one plan)".into(),
        );
    }
    let repeat = a.repeat.or(file.repeat).unwrap_or(1);
    atoll_runner::repeat::check(repeat, cfg.record_history, plan_all).map_err(|e| e.0)?;
    Ok(Resolved {
        cfg,
        plan_all,
        repeat,
    })
}

/// The plan a report ran.
fn plan_of(r: &atoll_runner::Report) -> Plan {
    Plan::parse(&r.config.plan).expect("reports carry a valid plan")
}

/// `--plan all`: run every valid plan of the protocol and rank them (RCC §5.1).
const PLAN_ALL: &str = "all";

fn plan_all(cfg: RunConfig, json: Option<&PathBuf>) -> ExitCode {
    let plans = cfg.protocol.all_plans();
    let used: Vec<&str> = cfg.protocol.stages().iter().map(|s| s.name()).collect();
    println!(
        "{}: {} valid plans over stages {} ({} fabric, {:.3} s each)",
        cfg.protocol.name(),
        plans.len(),
        used.join(", "),
        cfg.fabric.name(),
        cfg.duration_s
    );
    let mut rows = Vec::new();
    let mut all_passed = true;
    for (i, plan) in plans.iter().enumerate() {
        if interrupt::requested() {
            break;
        }
        let run = RunConfig {
            plan: *plan,
            ..cfg.clone()
        };
        match atoll_runner::run(&run, &|_| {}) {
            Ok(r) => {
                all_passed &= r.passed;
                eprintln!(
                    "[{}/{}] {} {:.0} tx/s",
                    i + 1,
                    plans.len(),
                    plan,
                    r.summary.committed_per_s
                );
                rows.push((plan.to_string(), r));
            }
            Err(e) => return run_failed(&e, &format!("plan {plan}: ")),
        }
    }
    rows.sort_by(|a, b| {
        b.1.summary
            .committed_per_s
            .total_cmp(&a.1.summary.committed_per_s)
    });
    // The pure plans: every used stage one-sided, or every used stage RPC.
    let stages = cfg.protocol.stages();
    let pure = |prim: Primitive| {
        rows.iter()
            .find(|(_, r)| stages.iter().all(|st| plan_of(r).get(*st) == prim))
            .map(|(_, r)| r.summary.committed_per_s)
            .unwrap_or(0.0)
    };
    let best_pure = pure(Primitive::OneSided).max(pure(Primitive::Rpc));
    println!(
        "{:>4} {:>14} {:>8} {:>9} {:>9} {:>8}  plan ({})",
        "rank",
        "committed/s",
        "abort%",
        "p50 us",
        "p99 us",
        "vs pure",
        used.join("/")
    );
    for (rank, (plan, r)) in rows.iter().enumerate() {
        let s = &r.summary;
        let short: Vec<&str> = used
            .iter()
            .map(|st| {
                if plan == "rpc" || plan.contains(&format!("{st}=rpc")) {
                    "R"
                } else {
                    "1"
                }
            })
            .collect();
        println!(
            "{:>4} {:>14.0} {:>8.2} {:>9.1} {:>9.1} {:>+7.1}%  {} {}",
            rank + 1,
            s.committed_per_s,
            s.abort_rate * 100.0,
            s.latency_us.p50,
            s.latency_us.p99,
            if best_pure > 0.0 {
                (s.committed_per_s / best_pure - 1.0) * 100.0
            } else {
                0.0
            },
            short.join(""),
            plan
        );
    }
    if let Some(path) = json {
        let out: Vec<serde_json::Value> = rows
            .iter()
            .map(|(plan, r)| serde_json::json!({"plan": plan, "report": r}))
            .collect();
        let text = serde_json::to_string_pretty(&out).expect("reports serialise");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    if !all_passed {
        eprintln!("error: a check failed in at least one plan's run");
        ExitCode::from(EXIT_CHECK_FAILED)
    } else if interrupt::requested() {
        ExitCode::from(EXIT_INTERRUPTED)
    } else {
        ExitCode::SUCCESS
    }
}

fn bench(a: BenchArgs) -> ExitCode {
    if let Some(v) = &a.coalesce {
        eprintln!(
            "error: --coalesce {v} sets how atoll cluster's node processes send UCX messages; \
             atoll bench runs in one process (run it as atoll cluster ... bench --coalesce {v})"
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let Resolved {
        cfg,
        plan_all: all,
        repeat,
    } = match resolve(&a) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    // What the configuration needs, refused before anything is allocated if it cannot fit.
    match atoll_runner::sizing::sizing(&cfg) {
        Ok(s) => println!("{}", s.line()),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    if let Err(e) = interrupt::install() {
        eprintln!("warning: {e}");
    }
    if all {
        return plan_all(cfg, a.json.as_ref());
    }
    let quiet = a.quiet;
    let print = move |l: &ProgressLine| {
        if !quiet {
            println!(
                "[{:>6.1} s] {:>12.0} committed tx/s  abort rate {:>6.2}%  p99 {:>9.1} us",
                l.t_s,
                l.committed_per_s,
                l.abort_rate * 100.0,
                l.p99_us
            );
        }
    };
    if repeat > 1 {
        return bench_repeated(&cfg, repeat, &print, a.json.as_ref());
    }
    let report = match atoll_runner::run(&cfg, &print) {
        Ok(r) => r,
        Err(e) => return run_failed(&e, ""),
    };
    if let Err(code) = finish_report(&report, a.json.as_ref()) {
        return code;
    }
    if interrupt::requested() {
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    ExitCode::SUCCESS
}

/// `--repeat N`: one line per run, then medians and spreads; JSON holds every report.
fn bench_repeated(
    cfg: &RunConfig,
    n: u32,
    print: &(dyn Fn(&ProgressLine) + Sync),
    json: Option<&PathBuf>,
) -> ExitCode {
    let mut line =
        |i: usize, r: &atoll_runner::Report| println!("{}", atoll_runner::repeat::line(i, n, r));
    let rep = match atoll_runner::repeat::run(cfg, n, print, &mut line) {
        Ok(r) => r,
        Err(e) => return run_failed(&e, ""),
    };
    print!("{}", rep.render());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&rep).expect("reports serialise");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    if !rep.passed {
        eprintln!("error: a check failed in at least one run (see CHECK FAILED above)");
        return ExitCode::from(EXIT_CHECK_FAILED);
    }
    if interrupt::requested() {
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    ExitCode::SUCCESS
}

/// The order file adya reads beside an export: `x.jsonl` -> `x.order.json`.
fn order_path(out: &std::path::Path) -> PathBuf {
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    out.with_file_name(format!("{stem}.order.json"))
}

/// Peak memory of `check-history` per byte of history file (measured: 524 MB for a 168 MB
/// SmallBank history, rounded up).
const CHECK_BYTES_PER_FILE_BYTE: u64 = 4;

fn check_history(a: CheckArgs) -> ExitCode {
    use atoll_check as history;
    use atoll_txn::Isolation;
    let isolation = match a.isolation.as_deref() {
        None => Isolation::Serializable,
        Some(s) => match Isolation::parse(s) {
            Some(i) => i,
            None => {
                eprintln!(
                    "error: unknown isolation '{s}': accepted levels are {}",
                    Isolation::ALL.map(Isolation::name).join(", ")
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
    };
    let mode = history::Mode::from(isolation);
    let file = match std::fs::File::open(&a.file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot read history {}: {e}", a.file.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    // The checker keeps every attempt's typed record and the dependency graph: about
    // `CHECK_BYTES_PER_FILE_BYTE` times the file (measured on SmallBank histories).
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let need_bytes = file_bytes.saturating_mul(CHECK_BYTES_PER_FILE_BYTE);
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    println!(
        "check-history: {:.0} MiB of history, about {:.0} MiB of memory to check it",
        mib(file_bytes),
        mib(need_bytes)
    );
    if let Some(avail) = atoll_runner::env::mem_available_bytes() {
        if need_bytes > avail {
            eprintln!(
                "error: {} needs about {:.0} MiB to check, more than the {:.0} MiB available: record a shorter run",
                a.file.display(),
                mib(need_bytes),
                mib(avail)
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let (header, h) = match history::parse_with_header(std::io::BufReader::new(file)) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {}: {e}", a.file.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if h.is_empty() {
        eprintln!(
            "error: {} holds no transactions: there is nothing to check",
            a.file.display()
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    // Snapshot isolation is judged from timestamps: without any, asking for it is a wrong
    // question about this file (exit 2), not a verdict on the history (exit 1).
    if mode == history::Mode::Snapshot && !history::has_snapshots(&h) {
        eprintln!(
            "error: {} records no snapshot timestamps (format version {}, recorded under {} isolation): it cannot be checked as snapshot isolation; check it with --isolation serializable",
            a.file.display(),
            header.version,
            header.isolation.name()
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    println!(
        "check-history: checking {} as {}",
        a.file.display(),
        mode.name()
    );
    if a.isolation.is_none() && header.isolation == Isolation::Snapshot {
        println!(
            "note: this history was recorded under snapshot isolation; --isolation snapshot checks what its protocol guarantees (write skew fails a serializable check)"
        );
    }
    let v = history::check(&h, mode);
    print!("{}", history::render(&h, &v));
    if let Some(out) = &a.adya {
        let (lines, order) = history::to_adya(&h);
        let order_file = order_path(out);
        for (path, body) in [(out.clone(), lines), (order_file, order)] {
            if let Err(e) = std::fs::write(&path, body) {
                eprintln!("error: cannot write {}: {e}", path.display());
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    if v.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CHECK_FAILED)
    }
}

fn calibrate(a: CalibrateArgs) -> ExitCode {
    use atoll_runner::calibrate::{calibrate, CalibrateConfig};
    let cfg = CalibrateConfig {
        reps: a.reps,
        ops: a.ops,
        txn_s: a.txn_seconds,
        scale: a.scale.unwrap_or(CalibrateConfig::default().scale),
    };
    if let Err(e) = cfg.validate() {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let c = match calibrate(&cfg) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    print!("{}", c.render());
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&c).expect("calibrations serialise");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    atoll_runner::env::set_build(atoll_runner::env::Build {
        git_commit: env!("ATOLL_GIT_COMMIT").into(),
        profile: env!("ATOLL_BUILD_PROFILE").into(),
        target: env!("ATOLL_BUILD_TARGET").into(),
        features: env!("ATOLL_BUILD_FEATURES").into(),
    });
    match Cli::parse().cmd {
        Cmd::Bench(a) => bench(*a),
        Cmd::CheckHistory(a) => check_history(a),
        Cmd::Floor(a) => floor(a),
        Cmd::Calibrate(a) => calibrate(a),
        Cmd::Cluster(a) => cluster(a),
        Cmd::Node(a) => node(a),
        Cmd::FabricBench(a) => fabric_bench(a),
    }
}

/// Longest floor run accepted, in seconds.
const FLOOR_SECONDS_MAX: f64 = 3600.0;

fn floor(a: FloorArgs) -> ExitCode {
    use atoll_runner::floor;
    if !(a.duration > 0.0 && a.duration <= FLOOR_SECONDS_MAX) {
        eprintln!(
            "error: floor --duration {} is not accepted: expected seconds in (0, {FLOOR_SECONDS_MAX}]",
            a.duration
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let cfg = floor::FloorConfig {
        records: a.records,
        record_bytes: a.record_bytes,
        accesses_per_txn: a.accesses,
        threads: a.threads,
        duration: std::time::Duration::from_secs_f64(a.duration),
        seed: a.seed,
        index_probe: a.index_probe,
    };
    let r = match floor::run(&cfg) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    println!(
        "floor: {} threads copying {} random {}-byte records of {} per transaction{}: {:.0} tx/s ({:.0} ns per transaction per thread, {} transactions in {:.2} s)",
        r.threads, r.accesses_per_txn, r.record_bytes, r.records,
        if r.index_probe { ", each found through a hash index" } else { "" },
        r.tx_per_s, r.ns_per_txn, r.txns, r.seconds
    );
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&r).expect("a floor report serializes");
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    ExitCode::SUCCESS
}

/// The configuration of a cluster run from its `bench` flags: refuses what a cluster cannot
/// run (another fabric, `--plan all`, `--repeat`).
fn resolve_cluster_bench(args: &[String]) -> Result<(RunConfig, BenchArgs), String> {
    let a = BenchOnly::try_parse_from(args)
        .map_err(|e| {
            e.to_string()
                .lines()
                .next()
                .unwrap_or("bad bench flags")
                .trim_start_matches("error: ")
                .to_string()
        })?
        .args;
    if let Some(f) = &a.fabric {
        return Err(format!(
            "--fabric {f} with cluster: a cluster's fabric is UCX between its processes"
        ));
    }
    if a.os_threads.is_some() || a.pin || a.net_latency_us.is_some() {
        return Err(
            "--os-threads, --pin and --net-latency-us are in-process settings, not a cluster's"
                .into(),
        );
    }
    let r = resolve(&a)?;
    if r.plan_all {
        return Err("--plan all with cluster: name one plan".into());
    }
    if r.repeat > 1 {
        return Err(format!("--repeat {} with cluster: run it again", r.repeat));
    }
    let mut r = r;
    if let Some(v) = &a.coalesce {
        r.cfg.coalesce = match v.as_str() {
            "on" => true,
            "off" => false,
            _ => return Err(format!("--coalesce {v}: accepted are on, off")),
        };
    }
    Ok((r.cfg, a))
}

fn cluster_failed(e: &atoll_cluster::ClusterError) -> ExitCode {
    eprintln!("error: {e}");
    match e {
        atoll_cluster::ClusterError::BadInput(_) => ExitCode::from(EXIT_BAD_INPUT),
        atoll_cluster::ClusterError::Failed(_) => ExitCode::from(EXIT_CHECK_FAILED),
    }
}

/// Nodes `atoll cluster` starts when neither `--nodes` nor `--hosts` says.
const CLUSTER_NODES_DEFAULT: u16 = 2;

fn cluster(a: ClusterArgs) -> ExitCode {
    use atoll_cluster::{self as cluster, ClusterConfig, ClusterError};
    let bad = |m: String| cluster_failed(&ClusterError::BadInput(m));
    let Some((first, rest)) = a.command.split_first() else {
        return bad("cluster needs a command: bench".into());
    };
    if first != "bench" {
        return bad(format!("cluster runs 'bench', not '{first}'"));
    }
    let (given, hosts, source) = match (a.nodes, &a.hosts) {
        (Some(n), Some(h)) => {
            return bad(format!(
                "--nodes {n} with --hosts {h}: give one (with --hosts the node count is the list's length)"
            ))
        }
        (None, Some(h)) => match atoll_cluster::hosts::parse_hosts(h) {
            Ok(hosts) => (Some(hosts.len() as u16), Some(hosts), "--hosts' length"),
            Err(e) => return bad(e.0),
        },
        (n, None) => (n, None, "cluster --nodes"),
    };
    let transport = match &hosts {
        Some(h) => cluster::hosts_transport(&a.transport, h),
        None => cluster::parse_transport(&a.transport),
    };
    let transport = match transport {
        Ok(t) => t,
        Err(e) => return bad(e.0),
    };
    // The nodes get the flags as given, with the cluster's node count, unless the flags
    // give a shared-data shape, which names its own (memory + compute + timestamp node).
    let mut args: Vec<String> = rest.to_vec();
    let shaped = resolve_cluster_bench(&args).is_ok_and(|(c, _)| c.roles != Roles::Partitioned);
    if !shaped
        && !rest
            .iter()
            .any(|x| x == "--nodes" || x.starts_with("--nodes="))
    {
        let n = given.unwrap_or(CLUSTER_NODES_DEFAULT);
        args.extend(["--nodes".to_string(), n.to_string()]);
    }
    let (cfg, bench_args) = match resolve_cluster_bench(&args) {
        Ok(r) => r,
        Err(e) => return bad(e),
    };
    if cfg.colocate {
        return bad(
            "--colocate is modelled by the simulated and in-process fabrics (atoll bench): separate processes share no memory for it".into(),
        );
    }
    if let Some(nodes) = given.filter(|&n| n != cfg.nodes) {
        let what = match cfg.roles {
            Roles::Partitioned => format!("bench --nodes {}", cfg.nodes),
            Roles::SharedData { .. } => format!(
                "the shared-data shape's {} nodes ({})",
                cfg.nodes,
                cfg.topology().describe()
            ),
        };
        return bad(format!("{what} disagrees with {source} {nodes}"));
    }
    match atoll_runner::sizing::sizing(&cfg) {
        Ok(s) => println!("{}", s.line()),
        Err(e) => return bad(e.to_string()),
    }
    // Only now: bad input is named as such whether or not this build has UCX.
    if let Err(e) = cluster::ucx_available() {
        return cluster_failed(&e);
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => return bad(format!("cannot find this program to start nodes: {e}")),
    };
    let cc = ClusterConfig {
        transport,
        bench_args: args,
        exe,
        hosts,
    };
    let report = match cluster::run_cluster(&cfg, &cc) {
        Ok(r) => r,
        Err(e) => return cluster_failed(&e),
    };
    if let Err(code) = finish_report(&report, bench_args.json.as_ref()) {
        return code;
    }
    ExitCode::SUCCESS
}

fn node(a: NodeArgs) -> ExitCode {
    use atoll_cluster::{self as cluster, ClusterError};
    let resolve = |args: &[String]| resolve_cluster_bench(args).map(|(cfg, _)| cfg);
    let (r, who) = match (&a.listen, &a.coordinator, a.node) {
        (Some(l), _, _) => (
            cluster::serve_listening(l, &resolve),
            format!("node at {l}"),
        ),
        (None, Some(c), Some(n)) => (cluster::serve_node(c, n, &resolve), format!("node {n}")),
        _ => (
            Err(ClusterError::BadInput(
                "node needs --listen HOST:PORT, or --coordinator ADDR with --node N".into(),
            )),
            "node".to_string(),
        ),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {who}: {e}");
            match e {
                ClusterError::BadInput(_) => ExitCode::from(EXIT_BAD_INPUT),
                ClusterError::Failed(_) => ExitCode::from(EXIT_CHECK_FAILED),
            }
        }
    }
}

#[derive(clap::Args)]
struct FabricBenchArgs {
    /// UCX transport between the two processes: shm, tcp, or both (one after the other).
    #[arg(long, default_value = "both")]
    transport: String,
    /// Measured milliseconds per phase (each op has a latency and a rate phase).
    #[arg(long, default_value_t = atoll_cluster::fabric_bench::DURATION_MS_DEFAULT)]
    duration_ms: u64,
    /// Write the figures of every op and transport to this file.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
}

fn fabric_bench(a: FabricBenchArgs) -> ExitCode {
    use atoll_cluster::fabric_bench::{self as fb, FabricBenchConfig};
    let cfg = match FabricBenchConfig::parse(&a.transport, a.duration_ms) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: cannot find this program to start nodes: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let report = match fb::run(&cfg, &exe) {
        Ok(r) => r,
        Err(e) => return cluster_failed(&e),
    };
    print!("{}", report.render());
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report).expect("reports serialise");
        if let Err(e) = std::fs::write(path, text + "\n") {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    if !report.passed {
        eprintln!("error: fabric-bench: an op failed (see FAILED above)");
        return ExitCode::from(EXIT_CHECK_FAILED);
    }
    ExitCode::SUCCESS
}
