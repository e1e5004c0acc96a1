//! Tell's B+tree as the index its transactions find records by (`--tell-index btree`), end
//! to end in the simulator under faults: trees built from the load, lookups by one-sided
//! reads through each processing node's cache of inner nodes or by the storage node for a
//! get by request, inserts at the commit's index step, small nodes so that runs split them.
//! Each run's checks (every live record found by its key in its tree among them) and its
//! history as snapshot isolation must hold.

use crate::tell_recovery::{crash_config, each_run, judged, seeds_from};
use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig};
use atoll_runner::{run, RunConfig, RunError};
use atoll_testkit::FAULTS_MIXED;
use atoll_workloads::WorkloadKind;

/// Keys a tree node holds: few, so that the inserts of a few milliseconds split leaves and
/// inner nodes while others read them.
const FANOUT: u64 = 4;

/// TPC-C's measured window, longer than the recovery runs' 20 ms.
const TPCC_DURATION_S: f64 = 0.05;

/// Seed `seed`'s run: the shapes of the recovery's runs, without the crash; odd seeds get
/// by one-sided reads of the trees, even ones by request (the storage node walks its own
/// tree) with puts by one-sided verbs.
fn index_config(w: WorkloadKind, seed: u64) -> RunConfig {
    let mut cfg = crash_config(w, seed);
    cfg.fabric = Fabric::Sim {
        net: "edr-ib".into(),
        faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
    };
    cfg.set_knob("tell_index", "btree");
    cfg.set_knob("btree_fanout", FANOUT);
    if w == WorkloadKind::Tpcc {
        // Two warehouses under torn verbs abort nine attempts in ten, and a node's tree is
        // read whole (a few words torn at a time): 20 ms may see no commit.
        cfg.duration_s = TPCC_DURATION_S;
    }
    if seed % 2 == 0 {
        cfg.plan = ProtocolKind::Tell
            .parse_plan("read=rpc,log=one-sided,commit=one-sided")
            .unwrap();
    }
    cfg
}

#[test]
fn tell_btree_index_finds_every_record_and_every_run_checks_clean_with_its_history_si() {
    let seeds = seeds_from("ATOLL_TELL_INDEX_SEEDS", 4);
    let mut failures = Vec::new();
    let (mut runs, mut committed) = (0, 0);
    let mut wrong_runs = Vec::new();
    each_run(seeds, index_config, &mut failures, |what, r| {
        runs += 1;
        committed += r.summary.committed;
        let mut wrong = judged(&r);
        if !r
            .checks
            .iter()
            .any(|c| c.name == "tell.index_reaches_every_record")
        {
            wrong.push("no check of the index".into());
        }
        if r.summary.committed == 0 {
            wrong.push("nothing committed".into());
        }
        if !wrong.is_empty() {
            wrong_runs.push(format!("{what}: {}", wrong.join("\n")));
        }
    });
    failures.extend(wrong_runs);
    eprintln!("tell btree index: {runs} runs, {committed} committed");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn tell_btree_index_knobs_that_do_not_go_together_are_refused_up_front() {
    let refused = |cfg: &RunConfig, expect: &str| match run(cfg, &|_| {}) {
        Err(RunError::Config(e)) => assert!(e.0.contains(expect), "{e}"),
        other => panic!(
            "expected a refusal naming {expect:?}, got {:?}",
            other.err()
        ),
    };
    // A node fanout for the hash index.
    let mut cfg = index_config(WorkloadKind::SmallBank, 1);
    cfg.set_knob("tell_index", "hash");
    refused(&cfg, "--btree-fanout");
    // A crash: the tree's nodes are put by one-sided verbs.
    let mut crash = crash_config(WorkloadKind::SmallBank, 1);
    crash.set_knob("tell_index", "btree");
    refused(&crash, "--tell-index btree");
}
