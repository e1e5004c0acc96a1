//! Simulated clusters: determinism pinned, randomized runs of every protocol × plan ×
//! workload with faults checked by the history checker and the invariants, and a broken
//! protocol that the checker must catch.
//!
//! Seeds are drawn per run of the suite (`ATOLL_SEED` replays one); a failure prints the
//! seed and the command that replays it. `ATOLL_SIM_SEEDS` sets seeds per combination.

use atoll_bench::config::Fabric;
use atoll_bench::history::{self, Mode};
use atoll_bench::{run, run_protocol, Report, RunConfig};
use atoll_fabric::sim::faults::FaultConfig;
use atoll_protocols::ProtocolKind;
use atoll_txn::stages;
use atoll_txn::{Abort, Access, Plan, PlanError, Protocol, Stage, TxnCore};
use atoll_workloads::{Params, WorkloadKind};

const PLANS: [&str; 4] = [
    "one-sided",
    "rpc",
    "read=rpc,lock=one-sided,validate=one-sided,commit=one-sided,release=rpc",
    "read=one-sided,lock=rpc,validate=rpc,log=one-sided,commit=rpc,release=one-sided",
];
const NODES: u16 = 3;
const THREADS: u16 = 2;
const COROUTINES: u16 = 4;
const DURATION_S: f64 = 0.002;
const WARMUP_S: f64 = 0.0005;
/// 84 seeds x 3 workloads x 4 plans = 1,008 runs per protocol, with faults, on every run
/// of the suite.
const SEEDS_PER_COMBINATION: u64 = 84;
const FAULTS: &str = "spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200";

fn knobs(w: WorkloadKind) -> &'static [(&'static str, &'static str)] {
    match w {
        WorkloadKind::SmallBank => &[
            ("accounts", "40"),
            ("hot_accounts", "4"),
            ("hot_prob", "0.9"),
        ],
        WorkloadKind::Ycsb => &[
            ("records", "60"),
            ("hot_fraction", "0.1"),
            ("hot_prob", "0.8"),
            ("write_fraction", "0.4"),
            ("ops_per_txn", "4"),
            ("compute_us", "1"),
        ],
        WorkloadKind::Cycle => &[
            ("pairs", "6"),
            ("record_words", "3"),
            ("ranges", "2"),
            ("range_keys", "8"),
        ],
    }
}

fn config(workload: WorkloadKind, protocol: ProtocolKind, plan: &str, seed: u64) -> RunConfig {
    RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS).unwrap(),
        },
        workload,
        params: knobs(workload)
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Params>(),
        protocol,
        plan: Plan::parse(plan).unwrap(),
        nodes: NODES,
        threads: THREADS,
        coroutines: COROUTINES,
        duration_s: DURATION_S,
        warmup_s: WARMUP_S,
        seed,
        record_history: true,
        progress_interval_s: 0.001,
        ..RunConfig::default()
    }
}

/// The command that replays a simulated run.
fn replay(cfg: &RunConfig) -> String {
    let p: Vec<String> = cfg
        .params
        .iter()
        .map(|(k, v)| format!("-p {k}={v}"))
        .collect();
    format!(
        "atoll bench --fabric sim --net edr-ib --faults {FAULTS} --workload {} --protocol {} --plan {} --nodes {} --threads {} \
         --coroutines {} --duration {} --warmup {} --seed {} {} --history h.jsonl && atoll check-history h.jsonl",
        cfg.workload.name(),
        cfg.protocol.name(),
        cfg.plan,
        cfg.nodes,
        cfg.threads,
        cfg.coroutines,
        cfg.duration_s,
        cfg.warmup_s,
        cfg.seed,
        p.join(" ")
    )
}

fn base_seed() -> u64 {
    match std::env::var("ATOLL_SEED") {
        Ok(s) => s.parse().expect("ATOLL_SEED is a whole number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

/// Where sample histories go for the CI's cross-check with adya.
fn history_dir() -> std::path::PathBuf {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("histories");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn save_history(r: &Report, name: &str) {
    let text = history::to_text(&r.history);
    std::fs::write(history_dir().join(format!("{name}.jsonl")), text).unwrap();
}

/// Runs one configuration; on any failure returns the reason with seed and replay command.
fn verify(cfg: &RunConfig) -> Result<Report, String> {
    let r = run(cfg, &|_| {}).map_err(|e| format!("{e}\n  replay: {}", replay(cfg)))?;
    let v = history::check(&r.history, Mode::Serializable);
    let mut problems = Vec::new();
    if !r.passed {
        problems.push(format!(
            "checks: {:?}",
            r.checks.iter().filter(|c| !c.passed).collect::<Vec<_>>()
        ));
    }
    if !v.ok() {
        problems.push(history::render(&r.history, &v));
    }
    if r.summary.committed == 0 {
        problems.push("nothing committed".into());
    }
    if problems.is_empty() {
        Ok(r)
    } else {
        Err(format!(
            "{} / {} / {} seed {}: {}\n  replay: {}",
            cfg.workload.name(),
            cfg.protocol.name(),
            cfg.plan,
            cfg.seed,
            problems.join("\n"),
            replay(cfg)
        ))
    }
}

#[test]
fn sim_same_seed_gives_byte_identical_json_apart_from_env_and_another_seed_differs() {
    for w in WorkloadKind::ALL {
        let cfg = config(w, ProtocolKind::Occ, "rpc", 42);
        // Everything but `env` (build, machine, load, CPU time, memory: not the seed's).
        let json = |c: &RunConfig| {
            let mut v = serde_json::to_value(run(c, &|_| {}).unwrap()).unwrap();
            v.as_object_mut().unwrap().remove("env");
            v.to_string()
        };
        let a = json(&cfg);
        assert_eq!(a, json(&cfg), "{}: same seed, different JSON", w.name());
        assert_ne!(
            a,
            json(&RunConfig {
                seed: 43,
                ..cfg.clone()
            }),
            "{}: seed changed nothing",
            w.name()
        );
        assert!(
            !a.contains("wall_s"),
            "wall-clock time in a simulated report"
        );
    }
}

#[test]
fn sim_every_protocol_plan_and_workload_is_serializable_under_faults() {
    let base = base_seed();
    let seeds: u64 = std::env::var("ATOLL_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS_PER_COMBINATION);
    eprintln!(
        "sim matrix: base seed {base} (ATOLL_SEED={base} replays), {seeds} seeds per combination"
    );
    let mut failures = Vec::new();
    let mut runs = 0;
    let mut committed = 0;
    for w in WorkloadKind::ALL {
        for p in ProtocolKind::ALL {
            for (pi, plan) in PLANS.iter().enumerate() {
                for s in 0..seeds {
                    let seed = base.wrapping_add(s * 7919 + pi as u64 * 104_729);
                    let cfg = config(w, p, plan, seed);
                    match verify(&cfg) {
                        Ok(r) => {
                            committed += r.summary.committed;
                            if s == 0 && pi < 2 {
                                save_history(&r, &format!("{}-{}-{}", w.name(), p.name(), plan));
                            }
                        }
                        Err(e) => failures.push(e),
                    }
                    runs += 1;
                }
            }
        }
    }
    eprintln!("sim matrix: {runs} runs, {committed} committed transactions checked");
    assert!(
        failures.is_empty(),
        "{} of {runs} runs failed:\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// OCC that skips read-set validation: test-only, to prove the checker can fail.
struct OccWithoutValidation;

impl Protocol for OccWithoutValidation {
    const NAME: &'static str = "occ-without-validation";
    const STAGES: &'static [Stage] = &[Stage::Read, Stage::Lock, Stage::Commit, Stage::Release];

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let prim = tx.c.plan().get(Stage::Read);
        stages::read(tx, idxs, prim).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let ws = tx.select(|e| e.is_write() && e.access != Access::Insert);
        stages::lock_unchanged(tx, &ws, false, |e| e.version).await?;
        // The bug: the read set is never validated.
        stages::commit_and_release(tx, 0, false).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

#[test]
fn sim_occ_without_validation_is_caught_by_the_history_checker_with_a_cycle() {
    let base = base_seed();
    // Write skew needs read-only entries next to writes: YCSB with a few hot keys.
    let mut caught = None;
    for s in 0..8 {
        let cfg = config(
            WorkloadKind::Ycsb,
            ProtocolKind::Occ,
            "one-sided",
            base.wrapping_add(s),
        );
        let r = run_protocol::<OccWithoutValidation>(&cfg, &|_| {}).unwrap();
        let v = history::check(&r.history, Mode::Serializable);
        if let Some(c) = &v.cycle {
            eprintln!(
                "broken OCC caught (seed {}):\n{}",
                cfg.seed,
                history::render(&r.history, &v)
            );
            assert!(c.len() >= 2);
            save_history(&r, "broken-occ-without-validation");
            caught = Some(cfg.seed);
            break;
        }
    }
    assert!(
        caught.is_some(),
        "8 seeds from {base}: the checker never caught OCC without validation"
    );
}
