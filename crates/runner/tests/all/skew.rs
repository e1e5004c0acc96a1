//! The write-skew probe end to end: under every serializable protocol and plan the pair
//! constraint holds and the history is serializable; under a protocol that lets write skew
//! through, the run's isolation decides whether the skew it leaves fails the run (declared
//! serializable) or is reported without failing it (declared snapshot isolation).

use atoll_check::{self as history, Mode};
use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig};
use atoll_runner::{run, run_protocol, Report, RunConfig};
use atoll_testkit::{params, FAULTS_MIXED};
use atoll_txn::stages::{self, CommitOpts, UnchangedOpts};
use atoll_txn::{Abort, Access, Isolation, Plan, PlanError, Protocol, Stage, TxnCore};
use atoll_workloads::WorkloadKind;

/// Few pairs for many co-routines: withdraws of one pair meet all the time.
const PAIRS_PER_NODE: &str = "4";
const SEEDS: u64 = 4;
const PLANS: [&str; 2] = ["one-sided", "rpc"];
/// Seeds tried before a run that lets skew through must have shown it.
const SKEW_SEEDS_MAX: u64 = 8;
fn config(protocol: ProtocolKind, plan: &str, seed: u64) -> RunConfig {
    let mut cfg = RunConfig {
        fabric: Fabric::Sim {
            net: "edr-ib".into(),
            faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
        },
        workload: WorkloadKind::Skew,
        params: params(&[("pairs", PAIRS_PER_NODE)]),
        protocol,
        plan: protocol.parse_plan(plan).unwrap(),
        nodes: 3,
        threads: 2,
        coroutines: 4,
        duration_s: 0.003,
        warmup_s: 0.0005,
        seed,
        record_history: true,
        ..RunConfig::default()
    };
    crate::short_epochs(&mut cfg);
    cfg
}

fn check<'r>(r: &'r Report, name: &str) -> &'r atoll_runner::report::CheckReport {
    r.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {:?}", r.checks))
}

fn committed(r: &Report, ty: &str) -> u64 {
    r.txn_types.iter().find(|t| t.name == ty).unwrap().committed
}

#[test]
fn skew_the_pair_constraint_holds_under_every_serializable_protocol_and_plan() {
    // Snapshot-isolation protocols (RSI) allow the skew this probe looks for.
    for protocol in ProtocolKind::ALL
        .into_iter()
        .filter(|p| p.isolation() == Isolation::Serializable)
    {
        for plan in PLANS {
            // What the protocol refuses (a stage of its own without an RPC form) it skips.
            if protocol
                .check_plan(&protocol.parse_plan(plan).unwrap())
                .is_err()
            {
                continue;
            }
            for seed in 0..SEEDS {
                let cfg = config(protocol, plan, seed);
                let what = format!("{} / {plan} / seed {seed}", protocol.name());
                let r = run(&cfg, &|_| {}).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_eq!(r.config.isolation, protocol.isolation().name(), "{what}");
                assert!(r.passed, "{what}: {:?}", r.checks);
                for name in [
                    "skew.pairs_at_or_above_zero",
                    "skew.no_committed_withdraw_read_below_zero",
                ] {
                    let c = check(&r, name);
                    assert!(!c.detail.contains("write skew"), "{what}: {}", c.detail);
                }
                let v = history::check(&r.history, Mode::Serializable);
                assert!(v.ok(), "{what}: {}", history::render(&r.history, &v));
                // The probe ran: both kinds committed, and transactions met (aborts).
                assert!(
                    committed(&r, "withdraw") > 0 && committed(&r, "deposit") > 0,
                    "{what}: {:?}",
                    r.txn_types
                );
                if protocol.sequenced() {
                    // Deterministic: transactions that meet wait their turn, none aborts.
                    assert_eq!(r.summary.aborted, 0, "{what}: {:?}", r.summary);
                } else {
                    assert!(r.summary.aborted > 0, "{what}: no transaction met another");
                }
            }
        }
    }
}

/// OCC whose commit locks its writes and checks they are unchanged since read (so of two
/// writers of a record only the first commits), but never validates what it only read:
/// two withdraws of one pair that each read the other's record both commit. `SNAPSHOT`
/// says which isolation it claims.
struct FirstCommitterWins<const SNAPSHOT: bool>;

impl<const SNAPSHOT: bool> Protocol for FirstCommitterWins<SNAPSHOT> {
    const NAME: &'static str = if SNAPSHOT {
        "first-committer-wins-as-snapshot"
    } else {
        "first-committer-wins-as-serializable"
    };
    const ISOLATION: Isolation = if SNAPSHOT {
        Isolation::Snapshot
    } else {
        Isolation::Serializable
    };
    const STAGES: &'static [Stage] = &[Stage::Read, Stage::Lock, Stage::Commit, Stage::Release];
    type EntryState = ();

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let prim = tx.c.plan().get(Stage::Read);
        stages::read(tx, idxs, prim).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let ws = tx.select(|e| e.is_write() && e.access != Access::Insert);
        stages::lock_unchanged(
            tx,
            &ws,
            UnchangedOpts {
                freeze_rts: false,
                seen: |e| e.version,
            },
        )
        .await?;
        stages::log_and_apply(tx).await?;
        stages::commit_and_release(tx, CommitOpts::plain()).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// Runs `P` on seeds until a run shows write skew; that run.
fn first_skewed_run<P: Protocol>() -> Report {
    for seed in 0..SKEW_SEEDS_MAX {
        let cfg = config(ProtocolKind::Occ, "one-sided", seed);
        let r = run_protocol::<P>(&cfg, &|_| {}).unwrap();
        if r.checks
            .iter()
            .any(|c| c.detail.contains("write skew observed"))
        {
            return r;
        }
    }
    panic!("{}: no write skew in {SKEW_SEEDS_MAX} seeds", P::NAME);
}

#[test]
fn skew_write_skew_fails_a_run_that_claims_serializability_and_is_reported_not_failed_under_snapshot_isolation(
) {
    let snapshot = first_skewed_run::<FirstCommitterWins<true>>();
    assert_eq!(snapshot.config.isolation, "snapshot");
    assert!(snapshot.passed, "{:?}", snapshot.checks);
    // First-committer-wins forbids lost updates: every record is its committed changes.
    assert!(check(&snapshot, "skew.records_match_committed_changes").passed);
    let skewed: Vec<_> = snapshot
        .checks
        .iter()
        .filter(|c| c.detail.starts_with("write skew observed"))
        .collect();
    assert!(!skewed.is_empty());
    for c in &skewed {
        assert!(c.passed, "{c:?}");
        assert!(
            c.detail.ends_with("(allowed under snapshot isolation)"),
            "{}",
            c.detail
        );
    }

    let serializable = first_skewed_run::<FirstCommitterWins<false>>();
    assert_eq!(serializable.config.isolation, "serializable");
    assert!(!serializable.passed);
    assert!(check(&serializable, "skew.records_match_committed_changes").passed);
    for c in serializable
        .checks
        .iter()
        .filter(|c| c.detail.starts_with("write skew observed"))
    {
        assert!(!c.passed, "{c:?}");
        assert!(
            c.detail.ends_with("(a serializable protocol allows none)"),
            "{}",
            c.detail
        );
    }
    // The history checker sees it too: a cycle of two anti-dependencies.
    let v = history::check(&serializable.history, Mode::Serializable);
    assert!(!v.ok(), "write skew left the history serializable");
}
