//! Tell's knobs beyond the single-manager pipeline, end to end in the simulator with faults
//! and a crashed processing node, each run checked by the workload's checks and the history
//! checker: several commit managers (Tell §4.2, `--commit-managers N`: processing node `p`
//! starts at manager `p mod N`, the managers take tid blocks from the store's counter and
//! merge each other's completions every sync interval), the shapes the flags refuse, and a
//! shared record buffer per processing node, alone or revalidated by its cache units' stamps
//! in the store (Tell §5.5, `--buffering sb|sbvs`).

use crate::tell_recovery::{crash_config, each_run, judged, recovery, seeds_from};
use atoll_check::{self as history, Mode};
use atoll_runner::{run, RunConfig, RunError};
use atoll_workloads::WorkloadKind;

/// Seed `seed`'s run of `w` with `managers` commit managers: the recovery tests' shapes and
/// crash (2 memory + 2 compute nodes with the managers on memory nodes, or 1 + 3 with each
/// on a node of its own).
fn managers_config(w: WorkloadKind, seed: u64, managers: u16) -> RunConfig {
    let mut cfg = crash_config(w, seed);
    cfg.set_knob("commit_managers", managers);
    // A sync every 50 µs: runs of a few milliseconds see many.
    cfg.set_knob("cm_sync_us", 50);
    if cfg.placements.contains_key("cm") {
        cfg.nodes += managers - 1;
    }
    cfg
}

#[test]
fn tell_two_commit_managers_run_clean_as_parallel_snapshot_isolation_and_their_snapshots_fork() {
    let seeds = seeds_from("ATOLL_TELL_CM_SEEDS", 4);
    let (mut runs, mut committed, mut forked) = (0, 0, 0);
    let mut failures = Vec::new();
    let mut wrong_runs = Vec::new();
    let cfg_of = |w, seed| managers_config(w, seed, 2);
    each_run(seeds, cfg_of, &mut failures, |what, r| {
        runs += 1;
        committed += r.summary.committed;
        let mut wrong = judged(&r);
        if !recovery(&r).0 {
            wrong.push("the recovery's own check failed".into());
        }
        if !wrong.is_empty() {
            wrong_runs.push(format!("{what}: {}", wrong.join("\n")));
        }
        // The same history as snapshot isolation: a long fork is all it may add.
        let si = history::check(&r.history, Mode::Snapshot);
        if !si.ok() {
            forked += 1;
            let text = history::render(&r.history, &si);
            let other = text
                .lines()
                .filter(|l| l.starts_with("anomaly:") && !l.contains("a long fork"))
                .count();
            if other > 0 || si.cycle.is_some() {
                wrong_runs.push(format!("{what}: more than long forks under SI:\n{text}"));
            }
        }
    });
    failures.extend(wrong_runs);
    eprintln!("tell with 2 commit managers: {runs} runs, {committed} committed; the snapshots of {forked} forked (long forks: parallel snapshot isolation, not snapshot isolation)");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        committed > runs * 10,
        "only {committed} committed in {runs} runs"
    );
    // The paper's "operating on delayed snapshots ... does not affect correctness" holds
    // as parallel snapshot isolation: a manager sees its own commits before the others.
    assert!(forked > 0, "no run's snapshots forked");
}

#[test]
fn tell_commit_managers_on_memory_nodes_need_a_memory_node_each_or_nodes_of_their_own() {
    let mut cfg = managers_config(WorkloadKind::SmallBank, 1, 2);
    cfg.set_knob("commit_managers", 3);
    let e = run(&cfg, &|_| {}).map(|_| ()).unwrap_err();
    assert!(
        matches!(&e, RunError::Config(_)),
        "refused up front, not {e:?}"
    );
    let text = e.to_string();
    assert!(
        text.contains("--commit-managers 3") && text.contains("--cm-node own"),
        "{text}"
    );
    // Each on a node of its own: three nodes more.
    let own = managers_config(WorkloadKind::SmallBank, 2, 3);
    let r = run(&own, &|_| {}).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.config.nodes, 1 + 3 + 3, "{:?}", r.config);
    assert!(judged(&r).is_empty(), "{:?}", judged(&r));
}

#[test]
fn tell_shared_buffers_sb_and_sbvs_serve_reads_and_every_run_checks_clean_with_its_history_si() {
    let seeds = seeds_from("ATOLL_TELL_CM_SEEDS", 4);
    let mut failures = Vec::new();
    for buffering in ["sb", "sbvs"] {
        let (mut hits, mut misses, mut revalidated, mut committed) = (0, 0, 0, 0);
        let mut wrong_runs = Vec::new();
        let cfg_of = |w, seed| {
            let mut cfg = crash_config(w, seed);
            cfg.set_knob("buffering", buffering);
            // Units of 4 keys: records of a unit meet in one run's few milliseconds.
            if buffering == "sbvs" {
                cfg.set_knob("sbvs_unit", 4);
            }
            cfg
        };
        each_run(seeds, cfg_of, &mut failures, |what, r| {
            committed += r.summary.committed;
            let count = |k: &str| r.versions.as_ref().and_then(|m| m.get(k)).copied();
            hits += count("buffer_hits").unwrap_or(0);
            misses += count("buffer_misses").unwrap_or(0);
            revalidated += count("buffer_revalidated").unwrap_or(0);
            let mut wrong = judged(&r);
            if !recovery(&r).0 {
                wrong.push("the recovery's own check failed".into());
            }
            if !wrong.is_empty() {
                wrong_runs.push(format!("{buffering} {what}: {}", wrong.join("\n")));
            }
        });
        failures.extend(wrong_runs);
        eprintln!("tell {buffering}: {committed} committed; {hits} reads served by the buffers, {revalidated} after their unit's stamp, {misses} fetched");
        assert!(
            hits > 0 && misses > 0,
            "{buffering}: {hits} hits, {misses} misses"
        );
        assert_eq!(
            revalidated > 0,
            buffering == "sbvs",
            "{buffering}: {revalidated} revalidated"
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn tell_shared_buffers_on_real_threads_keep_tpcc_snapshot_isolated_through_aborts() {
    // Real threads race a node's coroutines over its buffer; TPC-C on 2 warehouses aborts
    // often, so written-through entries of aborted attempts meet later snapshots (an
    // aborting writer that left them was caught here as an aborted read, G1a).
    for buffering in ["sb", "sbvs"] {
        let mut cfg = crash_config(WorkloadKind::Tpcc, 1);
        cfg.fabric = atoll_runner::config::Fabric::InProc;
        cfg.homes = atoll_storage::Homes::Any;
        cfg.duration_s = 0.5;
        cfg.warmup_s = 0.1;
        // Room for every NewOrder a fast machine commits in the window (a full table stops
        // the run, and this test is about the buffer).
        cfg.params = atoll_testkit::params(&[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "5000"),
        ]);
        cfg.set_knob("buffering", buffering);
        if buffering == "sbvs" {
            cfg.set_knob("sbvs_unit", 1000);
        }
        let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{buffering}: {e}"));
        let wrong = judged(&r);
        assert!(wrong.is_empty(), "{buffering}: {}", wrong.join("\n"));
        assert!(
            r.summary.committed > 100,
            "{buffering}: {} committed",
            r.summary.committed
        );
    }
}
