//! Tell's recovery of a crashed processing node (Tell §4.4) end to end in the simulator: a
//! compute node crashes at a seeded moment under faults, the management role finds it dead,
//! fences it, takes the versions of its unflagged tids out and ends every tid of it; the
//! survivors go on. Each run's checks (the workload's against the ledger, with the crashed
//! node's acknowledged commits and the outcome of what it was committing as the recovery
//! settled it) and its history as snapshot isolation must hold, and a recovery that leaves
//! unflagged versions in place must be caught by them.

use atoll_check::{self as history, Mode};
use atoll_protocols::{tell, ProtocolKind, Tell};
use atoll_runner::config::{Fabric, FaultConfig, Roles};
use atoll_runner::{run, run_protocol, Report, RunConfig, RunError};
use atoll_testkit::{params, FAULTS_MIXED};
use atoll_txn::Protocol;
use atoll_workloads::{Params, WorkloadKind};

/// Gets and the log entry by verbs, puts by request (a one-sided put torn by a crash could
/// not be recovered, so such a plan is refused).
const PLAN: &str = "read=one-sided,log=one-sided,commit=rpc";

/// Workloads the recovery runs under, with their populations.
fn workload_params(w: WorkloadKind) -> Params {
    match w {
        WorkloadKind::SmallBank => params(&[("accounts", "40"), ("hot_accounts", "4")]),
        WorkloadKind::Ycsb => params(&[
            ("records", "200"),
            ("write_fraction", "0.4"),
            ("record_bytes", "128"),
            ("ops_per_txn", "4"),
        ]),
        WorkloadKind::Tpcc => params(&[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "50"),
        ]),
        _ => Params::new(),
    }
}

/// Seeds a test runs: the environment variable `var` if set, else `default`.
pub fn seeds_from(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `cfg_of(w, seed)` for SmallBank, YCSB and TPC-C and seeds `1..=seeds`: each report
/// to `each` with its name, each run that failed to run into `failures`.
pub fn each_run(
    seeds: u64,
    cfg_of: impl Fn(WorkloadKind, u64) -> RunConfig,
    failures: &mut Vec<String>,
    mut each: impl FnMut(&str, Report),
) {
    for w in [
        WorkloadKind::SmallBank,
        WorkloadKind::Ycsb,
        WorkloadKind::Tpcc,
    ] {
        for seed in 1..=seeds {
            let what = format!("{} seed {seed}", w.name());
            match run(&cfg_of(w, seed), &|_| {}) {
                Ok(r) => each(&what, r),
                Err(e) => failures.push(format!("{what}: {e}")),
            }
        }
    }
}

/// Seed `seed`'s run: 2 memory + 2 compute nodes (odd seeds) or 1 memory + 3 compute nodes
/// and the commit manager on a node of its own (even seeds), a seeded compute node crashing
/// at a seeded moment in the first half of the measured window, with the mixed faults.
pub fn crash_config(w: WorkloadKind, seed: u64) -> RunConfig {
    let (memory, compute, own) = if seed % 2 == 1 {
        (2u16, 2u16, false)
    } else {
        (1, 3, true)
    };
    let mut rng = atoll_fabric::rng::Rng::new(seed ^ 0x7e11);
    let duration_s = if w == WorkloadKind::Tpcc { 0.02 } else { 0.004 };
    let warmup_us = 500;
    let crash_node = memory + rng.below(compute as u64) as u16;
    let crash_us = warmup_us + rng.below((duration_s * 1e6 / 2.0) as u64);
    let protocol = ProtocolKind::Tell;
    RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(&format!(
                "{FAULTS_MIXED},crash_node={crash_node},crash_us={crash_us},op_timeout_us=100"
            ))
            .unwrap(),
        },
        workload: w,
        params: workload_params(w),
        protocol,
        plan: protocol.parse_plan(PLAN).unwrap(),
        nodes: memory + compute + u16::from(own),
        roles: Roles::SharedData {
            memory_nodes: memory,
        },
        placements: if own {
            [("cm".to_string(), "own".to_string())].into()
        } else {
            Default::default()
        },
        log_replicas: 1,
        threads: 2,
        coroutines: 4,
        duration_s,
        warmup_s: warmup_us as f64 / 1e6,
        seed,
        record_history: true,
        ..RunConfig::default()
    }
}

/// What the run's own checks and the history checker found wrong (empty: nothing), apart
/// from the recovery's own report.
pub fn judged(r: &Report) -> Vec<String> {
    let mut wrong: Vec<String> = r
        .checks
        .iter()
        .filter(|c| !c.passed && c.name != "recovery.compute_node")
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    let v = history::check(&r.history, mode_of(r));
    if !v.ok() {
        wrong.push(history::render(&r.history, &v));
    }
    wrong
}

/// The level a Tell run's history is checked at: snapshot isolation with one commit
/// manager, parallel snapshot isolation with several (each sees its own commits before
/// the others do, so snapshots fork: `tell_managers`).
pub fn mode_of(r: &Report) -> Mode {
    let managers = r.config.family.0.iter().find_map(|(name, v)| match v {
        atoll_txn::KnobValue::Number(n) if *name == "commit_managers" => Some(*n),
        _ => None,
    });
    if managers.unwrap_or(1) > 1 {
        Mode::ParallelSnapshot
    } else {
        Mode::Snapshot
    }
}

/// The recovery's report in `r`: (its check passed, versions taken out, tids committed
/// from the log, the base passed the node's tids by the run's end).
pub fn recovery(r: &Report) -> (bool, u64, u64, bool) {
    let c = r
        .checks
        .iter()
        .find(|c| c.name == "recovery.compute_node")
        .unwrap_or_else(|| panic!("no recovery check: {:?}", r.checks));
    let number = |before: &str| -> u64 {
        let at = c
            .detail
            .find(before)
            .expect("a count in the recovery's detail");
        c.detail[..at]
            .rsplit(|ch: char| !ch.is_ascii_digit())
            .find(|s| !s.is_empty())
            .and_then(|s| s.parse().ok())
            .expect("a number before it")
    };
    (
        c.passed,
        number(" versions taken out"),
        number(" tids committed from the log"),
        c.detail.contains("its tids all behind the base"),
    )
}

#[test]
fn tell_a_crashed_processing_node_is_recovered_and_every_run_checks_clean_with_its_history_si() {
    let seeds = seeds_from("ATOLL_TELL_CRASH_SEEDS", 8);
    let (mut runs, mut removed, mut from_log, mut committed, mut settled) = (0, 0, 0, 0, 0);
    let mut failures = Vec::new();
    let mut wrong_runs = Vec::new();
    each_run(seeds, crash_config, &mut failures, |what, r| {
        runs += 1;
        committed += r.summary.committed;
        let (passed, versions, tids, base_passed) = recovery(&r);
        removed += versions;
        from_log += tids;
        settled += u64::from(base_passed);
        let mut wrong = judged(&r);
        if !passed {
            let c = r.checks.iter().find(|c| c.name == "recovery.compute_node");
            wrong.push(format!("the recovery's own check failed: {c:?}"));
        }
        if !wrong.is_empty() {
            wrong_runs.push(format!("{what}: {}", wrong.join("\n")));
        }
    });
    failures.extend(wrong_runs);
    eprintln!(
        "tell recovery: {runs} runs, {committed} committed; {removed} versions taken out, {from_log} flagged tids committed from the log; the base passed the crashed node's tids in {settled} runs"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    // The crashes hit transactions mid-commit: the recovery had both kinds of work.
    assert!(removed > 0, "no crash left a version to take out");
    assert!(from_log > 0, "no crash left a flagged tid uncommitted");
    // Where it did not, a survivor's attempt older than the crash still held the base.
    assert!(
        settled * 10 >= runs * 9,
        "the base passed the crashed node's tids in only {settled} of {runs} runs"
    );
}

tell_variant! {
    /// Tell whose management role ends a dead node's unflagged tids without taking their
    /// versions out ([`tell::manager::Defect::KeepsUnflaggedVersions`]).
    TellKeepsUnflaggedVersions = "tell-keeps-unflagged-versions";
    fetch(tx, idxs) {
        <Tell as Protocol>::fetch(tx, idxs).await
    }
    memory_task(task) {
        tell::manager::run_with(task, Some(tell::manager::Defect::KeepsUnflaggedVersions)).await
    }
}

#[test]
fn tell_a_recovery_that_keeps_unflagged_versions_is_caught_by_the_ledger_or_history_whenever_it_mattered(
) {
    // Where the real recovery took versions out, the broken one leaves them: a committed
    // transaction then reads a version no commit wrote, and the balances or counts the
    // ledger expects differ. Its own read-back is not what catches it (it skips that too).
    let (mut mattered, mut caught) = (0, 0);
    let mut missed = Vec::new();
    for seed in 1..=16 {
        let cfg = crash_config(WorkloadKind::SmallBank, seed);
        let real = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        assert!(
            judged(&real).is_empty(),
            "seed {seed}: the real recovery was flagged"
        );
        if recovery(&real).1 == 0 {
            continue;
        }
        mattered += 1;
        let broken = run_protocol::<TellKeepsUnflaggedVersions>(&cfg, &|_| {})
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        if judged(&broken).is_empty() {
            missed.push(seed);
        } else {
            caught += 1;
        }
    }
    eprintln!("tell recovery keeping unflagged versions: caught in {caught} of {mattered} seeds where it mattered, missed {missed:?}");
    assert!(
        mattered >= 5,
        "only {mattered} of 16 crashes left versions to take out"
    );
    assert!(
        caught * 10 >= mattered * 9,
        "caught in {caught} of {mattered}: missed seeds {missed:?}"
    );
}

#[test]
fn tell_a_crash_it_cannot_recover_from_is_refused_up_front_naming_why() {
    let refused = |tweak: &dyn Fn(&mut RunConfig), expect: &str| {
        let mut cfg = crash_config(WorkloadKind::SmallBank, 1);
        tweak(&mut cfg);
        match run(&cfg, &|_| {}) {
            Err(RunError::Config(e)) => assert!(e.0.contains(expect), "{e}"),
            other => panic!(
                "expected a refusal naming {expect:?}, got {:?}",
                other.err()
            ),
        }
    };
    let crash = |cfg: &mut RunConfig, node: u16| {
        if let Fabric::Sim { faults, .. } = &mut cfg.fabric {
            faults.crash = Some((atoll_fabric::NodeId(node), 1000));
        }
    };
    // A storage node (its fail-over comes with replication).
    refused(&|c| crash(c, 0), "recovers a crashed compute node");
    // Puts by one-sided verbs: a crash between lock and write leaves a slot held.
    refused(
        &|c| c.plan = ProtocolKind::Tell.parse_plan("one-sided").unwrap(),
        "commit=rpc",
    );
    // No log to recover from.
    refused(&|c| c.log_replicas = 0, "--replicas 2 or more");
}
