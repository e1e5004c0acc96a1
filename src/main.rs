//! The `atoll` command line: parses flags and config files into a run configuration, runs
//! benchmarks, prints progress and summaries, writes JSON. The only place that knows clap.

mod repro;
mod results;
mod settings;

use atoll_runner::config::{Fabric, Roles};
use atoll_runner::interrupt::{self, EXIT_INTERRUPTED};
use atoll_runner::{Progress, RunConfig};
use atoll_txn::{Plan, Primitive};
use clap::{Parser, Subcommand};
use settings::{resolve, BenchArgs, Resolved};
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

/// Writes `--results`' files for `report`, naming them.
fn write_results(
    results: Option<&results::Results>,
    report: &atoll_runner::Report,
) -> Result<(), ExitCode> {
    let Some(r) = results else { return Ok(()) };
    match r.finish(report) {
        Ok(files) => {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            println!("results     {}", names.join(", "));
            Ok(())
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::from(EXIT_BAD_INPUT))
        }
    }
}

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
        | atoll_runner::RunError::Crashed { .. }
        | atoll_runner::RunError::Unrecovered { .. } => ExitCode::from(EXIT_CHECK_FAILED),
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
    /// Run the experiments the project reproduces (`experiments/*.toml`): each writes
    /// results/NAME/{runs.csv, summary.json, NAME.svg, claims.md} and prints its claims,
    /// our figure beside the paper's.
    Repro(ReproArgs),
}

#[derive(clap::Args)]
struct ReproArgs {
    /// An experiment's name (its file in --experiments without .toml), or `all`, or `list`.
    #[arg(default_value = "list")]
    name: String,
    /// Each experiment at its quick size (seconds, not minutes): what CI runs so none rots.
    #[arg(long)]
    quick: bool,
    /// Where the experiments are described.
    #[arg(long, default_value = "experiments")]
    experiments: PathBuf,
    /// Where results go: DIR/NAME/ per experiment, and DIR/claims.md for the run.
    #[arg(long, default_value = "results")]
    out: PathBuf,
    /// An outside system's figures, which experiments with a `[peer]` compare against:
    /// DIR/NAME.toml per experiment (`experiments/peers` holds the project's own
    /// measurements). Without it, or without the file, those claims are skipped.
    #[arg(long, value_name = "DIR")]
    peers: Option<PathBuf>,
}

/// `atoll repro`: exit 2 for an unknown name or a bad description, 1 if a run failed a
/// check or gave no figure (a claim that does not hold is reported, not failed).
fn repro_cmd(a: ReproArgs) -> ExitCode {
    let catalog = match repro::catalog(&a.experiments) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let names: Vec<String> = match a.name.as_str() {
        "list" => {
            for (name, path) in &catalog {
                match repro::load(path) {
                    Ok(e) => println!("{name:<28} {} ({})", e.title, e.source),
                    Err(err) => println!("{name:<28} REFUSED: {err}"),
                }
            }
            return ExitCode::SUCCESS;
        }
        "all" => catalog.keys().cloned().collect(),
        one if catalog.contains_key(one) => vec![one.to_string()],
        other => {
            let known: Vec<&str> = catalog.keys().map(String::as_str).collect();
            eprintln!(
                "error: no experiment '{other}' in {}: accepted are all, list, {}{}",
                a.experiments.display(),
                known.join(", "),
                atoll_fabric::names::did_you_mean(other, known.iter().copied())
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if let Some(dir) = a.peers.as_ref().filter(|d| !d.is_dir()) {
        eprintln!(
            "error: --peers {}: not a directory (expected one holding NAME.toml per experiment)",
            dir.display()
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    // Every description and peer file is read and checked before the first run.
    let mut experiments = Vec::new();
    for name in &names {
        let loaded = repro::load(&catalog[name])
            .and_then(|e| Ok((repro::peer_figures(name, &e, a.peers.as_deref())?, e)));
        match loaded {
            Ok((peer, e)) => experiments.push((name.clone(), e, peer)),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let started = std::time::Instant::now();
    let mut table = String::from(repro::CLAIMS_HEADER);
    let mut failed = Vec::new();
    for (name, e, peer) in &experiments {
        let out = a.out.join(name);
        match repro::run(name, e, a.quick, &out, peer.as_ref()) {
            Ok(o) => {
                table += &repro::claims_rows(name, &o.verdicts);
                if !o.clean {
                    failed.push(name.clone());
                }
            }
            Err(err) => {
                eprintln!("error: {name}: {err}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let claims = a.out.join("claims.md");
    if let Err(e) = std::fs::write(&claims, &table) {
        eprintln!("error: cannot write {}: {e}", claims.display());
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    println!(
        "\n{} experiments{} in {:.0} s; claims (also in {}):\n\n{table}",
        experiments.len(),
        if a.quick { " (quick)" } else { "" },
        started.elapsed().as_secs_f64(),
        claims.display()
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!(
            "error: a run failed a check or gave no figure in: {}",
            failed.join(", ")
        );
        ExitCode::from(EXIT_CHECK_FAILED)
    }
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
    /// The isolation level to check: serializable (the default), snapshot (from each
    /// attempt's snapshot and commit timestamps; write skew allowed) or parallel-snapshot
    /// (snapshot, long forks of vector snapshots allowed too). A history that records no
    /// snapshot timestamp cannot be checked as snapshot (exit 2).
    #[arg(long, value_name = "LEVEL")]
    isolation: Option<String>,
    /// Memory the check may take (bytes, or with a unit: 512MiB, 8GiB); default the
    /// memory available. A larger history (a file by its size, a pipe as it is read) is
    /// refused with exit 2.
    #[arg(long, value_name = "SIZE")]
    memory_max: Option<String>,
}

/// The plan a report ran.
fn plan_of(r: &atoll_runner::Report) -> Plan {
    atoll_protocols::ProtocolKind::parse(r.config.protocol)
        .expect("reports name a registered protocol")
        .parse_plan(&r.config.plan)
        .expect("reports carry a valid plan")
}

/// `--plan all`: run every valid plan of the protocol and rank them (RCC §5.1).
pub(crate) const PLAN_ALL: &str = "all";

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
    print!("{}", provenance(&rows));
    if let Err(code) = plans_json(&rows, json) {
        return code;
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
        replay,
    } = match resolve(&a) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if a.list_knobs {
        return list_knobs(&cfg);
    }
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
    let results = match open_outputs(&a) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if all {
        return plan_all(cfg, a.json.as_ref());
    }
    let print = progress_printer(a.quiet, results.as_ref());
    if repeat > 1 {
        return bench_repeated(&cfg, repeat, &print, a.json.as_ref());
    }
    let report = match atoll_runner::run(&cfg, &print) {
        Ok(r) => r,
        Err(e) => return run_failed(&e, ""),
    };
    if let Err(code) = write_results(results.as_ref(), &report) {
        return code;
    }
    if let Err(code) = finish_report(&report, a.json.as_ref()) {
        return code;
    }
    if interrupt::requested() {
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    match replay {
        Some(faults) => replay_epochs(&cfg, faults, &report),
        None => ExitCode::SUCCESS,
    }
}

/// `--replay-faults`: the recorded run's epochs replayed under other faults must end in the
/// same state on every node.
fn replay_epochs(
    cfg: &RunConfig,
    faults: atoll_runner::config::FaultConfig,
    recorded: &atoll_runner::Report,
) -> ExitCode {
    use atoll_txn::EpochLogMode;
    let Some(EpochLogMode::Record(log)) = &cfg.epoch_log else {
        unreachable!("--replay-faults records the run's epochs")
    };
    let Fabric::Sim { net, .. } = &cfg.fabric else {
        unreachable!("--replay-faults needs the simulator, checked at start-up")
    };
    let again = RunConfig {
        fabric: Fabric::Sim {
            net: net.clone(),
            faults,
        },
        record_history: false,
        history_file: None,
        epoch_log: Some(EpochLogMode::Replay(log.clone())),
        ..cfg.clone()
    };
    if let Err(e) = again.validate() {
        eprintln!("error: the replay: {}", e.0);
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let r = match atoll_runner::run(&again, &|_| {}) {
        Ok(r) => r,
        Err(e) => return run_failed(&e, "the replay: "),
    };
    println!(
        "replay      {log:?} under other faults: {}",
        r.digests_line()
    );
    if r.state_digests == recorded.state_digests {
        println!("determinism PASS  every node ended in the recorded run's state");
        ExitCode::SUCCESS
    } else {
        println!(
            "determinism FAIL  recorded {}; replayed {} (seed {} replays the recorded run)",
            recorded.digests_line(),
            r.digests_line(),
            cfg.seed
        );
        ExitCode::FAILURE
    }
}

/// `--plan all --json FILE`: every plan's report.
fn plans_json(
    rows: &[(String, atoll_runner::Report)],
    json: Option<&PathBuf>,
) -> Result<(), ExitCode> {
    let Some(path) = json else {
        return Ok(());
    };
    let out: Vec<serde_json::Value> = rows
        .iter()
        .map(|(plan, r)| serde_json::json!({"plan": plan, "report": r}))
        .collect();
    let text = serde_json::to_string_pretty(&out).expect("reports serialise");
    std::fs::write(path, text + "\n").map_err(|e| {
        eprintln!("error: cannot write {}: {e}", path.display());
        ExitCode::from(EXIT_BAD_INPUT)
    })
}

/// What a ranking of several runs rests on, as a single run's report says it: the build and
/// machine (the first run's lines, with the load at its start), and each kind of warning
/// the runs raised (a busy machine, cores that moved) once, as its first run said it, with
/// how many runs raised it.
fn provenance(rows: &[(String, atoll_runner::Report)]) -> String {
    let mut lines: Vec<String> = Vec::new();
    // Each kind of warning (its text up to the first ':'), its first wording and its count.
    let mut warnings: Vec<(String, String, usize)> = Vec::new();
    for (i, (_, r)) in rows.iter().enumerate() {
        let mut text = String::new();
        r.env.render(&mut text);
        for l in text.lines() {
            if !l.starts_with("warning") {
                if i == 0 {
                    lines.push(l.to_string());
                }
                continue;
            }
            let kind = l.split(':').next().unwrap_or(l).to_string();
            match warnings.iter_mut().find(|w| w.0 == kind) {
                Some(w) => w.2 += 1,
                None => warnings.push((kind, l.to_string(), 1)),
            }
        }
    }
    for (_, first, n) in warnings {
        lines.push(format!("{first} ({n} of {} runs)", rows.len()));
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}

/// `bench --knobs`: the workload's knobs at the values a run of `cfg` would take (given with
/// `-p`, else their defaults on this cluster shape), and what the report derives from them.
fn list_knobs(cfg: &RunConfig) -> ExitCode {
    struct KnobsOf;
    impl atoll_workloads::WorkloadVisitor for KnobsOf {
        type Out = std::collections::BTreeMap<String, String>;
        fn visit<W: atoll_workloads::Workload>(self, w: W) -> Self::Out {
            w.knobs()
        }
    }
    let shape = cfg.workload_shape();
    match cfg.workload.dispatch(&cfg.params, &shape, KnobsOf) {
        Ok(knobs) => {
            println!(
                "{} knobs (-p NAME=VALUE) on {} nodes x {} threads, as given or by default:",
                cfg.workload.name(),
                shape.nodes,
                shape.threads
            );
            for (k, v) in knobs {
                println!("  {k} = {v}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", e.0);
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}

/// The sizing of an `atoll cluster` run with the budget its processes get (and where that
/// comes from), for its sizing line.
fn cluster_sizing(
    cfg: &RunConfig,
) -> Result<atoll_runner::sizing::Sizing, atoll_runner::config::ConfigError> {
    atoll_runner::sizing::sizing(cfg).and_then(|s| {
        let mut c = cfg.clone();
        if c.memory_max_bytes.is_none() {
            c.memory_max_from = Some(atoll_cluster::cluster_budget_source());
        }
        c.memory_max_bytes = Some(atoll_cluster::cluster_budget(cfg, &s));
        atoll_runner::sizing::sizing(&c)
    })
}

/// What `bench` prints of a run's progress (phases and heartbeats unless `quiet`, every
/// interval to `--results` too).
fn progress_printer(
    quiet: bool,
    results_ref: Option<&results::Results>,
) -> impl Fn(&Progress<'_>) + Sync + '_ {
    move |p: &Progress<'_>| {
        let l = match p {
            Progress::Interval(l) => l,
            _ if quiet => return,
            Progress::Phase { phase, detail } => {
                println!(
                    "[{phase}]{}",
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(" {detail}")
                    }
                );
                return;
            }
            Progress::Heartbeat {
                phase,
                wall_s,
                detail,
            } => {
                println!(
                    "[{phase}] still going after {wall_s:.0} s{}",
                    if detail.is_empty() {
                        String::new()
                    } else {
                        format!(": {detail}")
                    }
                );
                return;
            }
        };
        if let Some(r) = results_ref {
            r.interval(l);
        }
        if !quiet {
            // Sub-second intervals (the simulator's) show their milliseconds.
            let digits = if l.interval_s < 0.1 { 3 } else { 1 };
            println!(
                "[{:>6.digits$} s] {:>12.0} committed tx/s  abort rate {:>6.2}%  p99 {:>9.1} us  memory {}{}{}",
                l.t_s,
                l.committed_per_s,
                l.abort_rate * 100.0,
                l.p99_us,
                atoll_runner::sizing::human_bytes(l.memory_bytes),
                l.budget_reached_in_s
                    .map_or(String::new(), |s| format!(" (budget in {s:.0} s)")),
                if l.workers_reported < l.workers {
                    format!("  ({} of {} workers)", l.workers_reported, l.workers)
                } else {
                    String::new()
                }
            );
        }
    }
}

/// Every output path, checked before the run (a run is not lost to a path that fails after
/// it): `--json`'s file created, `--results`' directory opened.
fn open_outputs(a: &BenchArgs) -> Result<Option<results::Results>, ExitCode> {
    if let Some(path) = &a.json {
        if let Err(e) = std::fs::File::create(path) {
            eprintln!(
                "error: --json {}: cannot write there ({e}): give a file path that can be created",
                path.display()
            );
            return Err(ExitCode::from(EXIT_BAD_INPUT));
        }
    }
    a.results
        .as_deref()
        .map(results::Results::create)
        .transpose()
        .map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        })
}

/// `--repeat N`: one line per run, then medians and spreads; JSON holds every report.
fn bench_repeated(
    cfg: &RunConfig,
    n: u32,
    print: &atoll_runner::ProgressFn<'_>,
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
/// The stem is kept as the bytes it is (a name that is not UTF-8 keeps its bytes).
fn order_path(out: &std::path::Path) -> PathBuf {
    let mut name = out.file_stem().unwrap_or_default().to_os_string();
    name.push(".order.json");
    out.with_file_name(name)
}

/// Peak memory of `check-history` per byte of a history file, at most, as measured on real
/// histories (YCSB 10.2, TPC-C 7.5, SmallBank 3.1; docs/checking.md), rounded up: a file
/// whose size says more than the memory available is refused before it is read. A crafted
/// file, or a pipe (no size), is bounded as it is read instead
/// ([`atoll_check::parse_with_header_bounded`]).
const CHECK_BYTES_PER_FILE_BYTE: u64 = 12;

/// The memory `check-history` may take (`--memory-max`, else what is available), refusing
/// a file whose size says it needs more; printed with the file's size.
fn check_memory_bound(a: &CheckArgs, file: &std::fs::File) -> Result<u64, ExitCode> {
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
    let avail = match a.memory_max.as_deref() {
        Some(s) => match atoll_runner::config::parse_bytes("--memory-max", s) {
            Ok(b) => Some(b),
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(EXIT_BAD_INPUT));
            }
        },
        None => atoll_runner::env::mem_available_bytes(),
    };
    if let Some(avail) = avail {
        if need_bytes > avail {
            eprintln!(
                "error: {} needs about {:.0} MiB to check, more than the {:.0} MiB available (or --memory-max): record a shorter run",
                a.file.display(),
                mib(need_bytes),
                mib(avail)
            );
            return Err(ExitCode::from(EXIT_BAD_INPUT));
        }
    }
    // What it reads is bounded too: a pipe's size says nothing, and a line can hold more
    // ops than its bytes suggest.
    Ok(avail.unwrap_or(atoll_runner::sizing::MEMORY_BYTES_FALLBACK))
}

fn check_history(a: CheckArgs) -> ExitCode {
    use atoll_check as history;
    use atoll_txn::Isolation;
    let mode = match a.isolation.as_deref() {
        None => history::Mode::Serializable,
        Some(s) => match history::Mode::parse(s) {
            Some(m) => m,
            None => {
                eprintln!(
                    "error: unknown isolation '{s}': accepted levels are {}",
                    history::Mode::ALL.map(history::Mode::flag).join(", ")
                );
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        },
    };
    let file = match std::fs::File::open(&a.file) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("error: cannot read history {}: {e}", a.file.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let bound = match check_memory_bound(&a, &file) {
        Ok(b) => b,
        Err(code) => return code,
    };
    let (header, h) = match history::parse_with_header_bounded(std::io::BufReader::new(file), bound)
    {
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
    if mode.snapshots() && !history::has_snapshots(&h) {
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
        Cmd::Repro(a) => repro_cmd(a),
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
    // `--pin` binds each process's threads (`RunConfig::pin_cpus`); these two only shape
    // an in-process run.
    if a.os_threads.is_some() || a.net_latency_us.is_some() {
        return Err(
            "--os-threads and --net-latency-us are in-process settings, not a cluster's".into(),
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
    // give a shared-data shape, which names its own (memory + compute + the family's role
    // nodes), or a deployment on machines, whose placement gives them.
    let mut args: Vec<String> = rest.to_vec();
    let shaped = resolve_cluster_bench(&args)
        .is_ok_and(|(c, _)| c.roles != Roles::Partitioned || c.islands.is_some());
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
        let what = match (cfg.roles, &cfg.islands) {
            (_, Some(i)) => format!("the deployment's {} instances ({})", cfg.nodes, i.placement),
            (Roles::Partitioned, None) => format!("bench --nodes {}", cfg.nodes),
            (Roles::SharedData { .. }, None) => format!(
                "the shared-data shape's {} nodes ({})",
                cfg.nodes,
                cfg.topology().describe()
            ),
        };
        return bad(format!("{what} disagrees with {source} {nodes}"));
    }
    match cluster_sizing(&cfg) {
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
        program: cluster::NodeProgram::Atoll(exe),
        hosts,
    };
    cluster_run(&cfg, &cc, &bench_args)
}

/// Runs a checked cluster configuration: its outputs opened first, its progress printed.
fn cluster_run(
    cfg: &RunConfig,
    cc: &atoll_cluster::ClusterConfig,
    bench_args: &BenchArgs,
) -> ExitCode {
    // Ctrl-C reaches the node processes started here too (one process group): each ends
    // its run early, and the report, JSON and history cover what was measured.
    interrupt::install().unwrap_or_else(|e| eprintln!("warning: {e}"));
    let results = match open_outputs(bench_args) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let print = progress_printer(bench_args.quiet, results.as_ref());
    let report = match atoll_cluster::run_cluster(cfg, cc, &print) {
        Ok(r) => r,
        Err(e) => return cluster_failed(&e),
    };
    if let Err(code) = write_results(results.as_ref(), &report) {
        return code;
    }
    if let Err(code) = finish_report(&report, bench_args.json.as_ref()) {
        return code;
    }
    if interrupt::requested() {
        return ExitCode::from(EXIT_INTERRUPTED);
    }
    ExitCode::SUCCESS
}

fn node(a: NodeArgs) -> ExitCode {
    use atoll_cluster::{self as cluster, ClusterError};
    // A Ctrl-C at the coordinator's terminal reaches this process too: it ends the run
    // early like the coordinator, rather than dying under it.
    if let Err(e) = interrupt::install() {
        eprintln!("warning: {e}");
    }
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
