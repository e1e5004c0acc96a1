//! Runs that fail: a panic in one worker ends the whole run promptly with the panic's
//! message, on either fabric, instead of leaving the other workers waiting for it.

use atoll_protocols::Occ;
use atoll_runner::config::Fabric;
use atoll_runner::config::FaultConfig;
use atoll_runner::{run_protocol, RunConfig, RunError};
use atoll_txn::{Abort, Plan, PlanError, Protocol, Stage, TxnCore};
use std::cell::Cell;
use std::sync::mpsc;
use std::time::Duration;

/// Commits each OS thread lets through before the injected panic: enough that every worker
/// is busy (and waits on the others' records and replies) when it happens.
const COMMITS_BEFORE_PANIC: u64 = 200;
/// Longer than any test may take, so only the panic can end the run in time.
const RUN_S: f64 = 600.0;
/// How long a failed run may take to end: loading plus the panic plus stopping the others.
const END_S_MAX: u64 = 60;

thread_local! {
    static COMMITS: Cell<u64> = const { Cell::new(0) };
}

fn injected_message() -> String {
    format!("injected: commit {COMMITS_BEFORE_PANIC} of this thread")
}

/// OCC whose commit panics after [`COMMITS_BEFORE_PANIC`] commits on one thread: test-only,
/// the stand-in for any bug in transaction logic.
struct OccPanickingAfterSomeCommits;

impl Protocol for OccPanickingAfterSomeCommits {
    const NAME: &'static str = "occ-panicking";
    const STAGES: &'static [Stage] = Occ::STAGES;
    type EntryState = ();

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        Occ::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        Occ::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let n = COMMITS.with(|c| {
            c.set(c.get() + 1);
            c.get()
        });
        if n == COMMITS_BEFORE_PANIC {
            panic!("{}", injected_message());
        }
        Occ::commit(tx).await
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        Occ::rollback(tx).await
    }
}

/// Runs `cfg` on another thread; the run's result, or a failure if it did not end in time.
fn run_bounded(cfg: RunConfig) -> Result<(), RunError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_protocol::<OccPanickingAfterSomeCommits>(&cfg, &|_| {}).map(|_| ()));
    });
    rx.recv_timeout(Duration::from_secs(END_S_MAX))
        .unwrap_or_else(|_| panic!("the run did not end within {END_S_MAX} s of a worker panic"))
}

fn assert_ended_by_the_panic(r: Result<(), RunError>) {
    match r {
        Err(RunError::Panicked(p)) => {
            assert_eq!(p.message, injected_message());
            let shown = RunError::Panicked(p).to_string();
            assert!(shown.contains(&injected_message()), "{shown}");
        }
        other => panic!("expected the injected panic to end the run, got {other:?}"),
    }
}

#[test]
fn inproc_a_worker_panic_stops_every_worker_and_the_run_returns_its_message() {
    let cfg = RunConfig {
        nodes: 2,
        threads: 2,
        coroutines: 8,
        os_threads: Some(2),
        duration_s: RUN_S,
        warmup_s: 0.0,
        ..RunConfig::default()
    };
    assert_ended_by_the_panic(run_bounded(cfg));
}

#[test]
fn sim_a_worker_panic_ends_the_run_with_its_message() {
    let cfg = RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse("none").unwrap(),
        },
        nodes: 2,
        threads: 1,
        coroutines: 8,
        duration_s: RUN_S,
        warmup_s: 0.0,
        ..RunConfig::default()
    };
    assert_ended_by_the_panic(run_bounded(cfg));
}

#[test]
fn sim_a_node_crashing_while_a_logged_transaction_commits_stops_a_run_without_backups_naming_the_node(
) {
    // Node 1 of 2 holds half the accounts and no partition has a backup (one replica):
    // crashing mid-run, it leaves some transaction past its point of no return with its
    // write-back to it still to come, which nothing can settle.
    let cfg = RunConfig {
        log_replicas: 0,
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(
                "spikes=0,pauses=0,tear_words=0,stall_permille=0,crash_node=1,crash_us=3000",
            )
            .unwrap(),
        },
        nodes: 2,
        threads: 2,
        coroutines: 8,
        duration_s: 0.01,
        warmup_s: 0.002,
        ..RunConfig::default()
    };
    match atoll_runner::run(&cfg, &|_| {}) {
        Err(e @ RunError::NodeFailed { node, .. }) => {
            assert_eq!(node.0, 1);
            let shown = e.to_string();
            assert!(
                shown.starts_with("node 1 failed while transaction")
                    && shown.contains("was committing: its outcome needs recovery, which runs for"),
                "{shown}"
            );
        }
        Err(e) => panic!("expected the crash to stop the run, got {e}"),
        Ok(r) => panic!(
            "expected the crash to stop the run, got a report: {:?}",
            r.summary.aborts_by_reason
        ),
    }
}
