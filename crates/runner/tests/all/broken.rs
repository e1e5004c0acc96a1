//! Deliberately broken protocols, test-only: each must be caught under the simulator (with
//! tearing and faults) in at least 90% of the seeds run, by the value-based history checker,
//! the invariant checks computed from state, or the Cycle workload's in-transaction checks.
//! The test prints a table of which check caught which variant in how many seeds.
//! The simulator posts own-node ops, so the in-place path of the in-process fabric has its
//! own broken variant, run on real threads.
//!
//! `ATOLL_SEED` replays a base seed; `ATOLL_BROKEN_SEEDS` sets the seeds per variant.

use atoll_check::{self as history, Mode};
use atoll_fabric::Words;
use atoll_protocols::mvcc::Versions;
use atoll_protocols::sundial::Lease;
use atoll_protocols::{calvin, namdb, rsi, tell, Mvcc, ProtocolKind, Tell};
use atoll_runner::config::Fabric;
use atoll_runner::config::FaultConfig;
use atoll_runner::{run_protocol, run_protocol_via, Report, RunConfig, SummaryWire};
use atoll_storage::layout::{
    seal, ENGINE_PAYLOAD_WORDS, HEADER_WORDS, H_KEY, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN,
    VERSION_ABSENT,
};
use atoll_txn::stages::{self, CommitOpts, LockOpts, UnchangedOpts, WriteBackOpts};
use atoll_txn::{Abort, Access, Plan, PlanError, Protocol, Stage, TxnCore};
use atoll_workloads::{Params, WorkloadKind};

/// Seeds per variant (each seed runs every workload under both plans).
const SEEDS_PER_VARIANT: u64 = 10;
/// Each seed runs under both: all one-sided, and RPC reads (the participant reads at once,
/// between the steps of a torn or stalled write-back) with one-sided locks and commits.
const PLANS: [&str; 2] = [
    "one-sided",
    "read=rpc,lock=one-sided,log=one-sided,commit=one-sided,release=one-sided",
];
/// [`PLANS`] and all RPC: a crash's recovery finishes write-backs left at any step of
/// either kind (a variant caught only when the crash leaves it something to finish needs
/// the extra runs).
const CRASH_PLANS: [&str; 3] = [PLANS[0], PLANS[1], "rpc"];
/// Every stage a request to a CPU (RSI's Figure 6 baselines).
const RPC_ONLY: [&str; 1] = ["rpc"];
/// Every stage over one-sided verbs (NAM-DB runs no other plan).
const ONE_SIDED_ONLY: [&str; 1] = ["one-sided"];
/// Simulated seconds measured per run: long enough for the conflicts each bug needs.
const DURATION_S: f64 = 0.004;
/// The share of seeds in which every variant must be caught.
const CAUGHT_SHARE_MIN: f64 = 0.9;
const FAULTS: &str =
    "spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50";

// --- the variants -------------------------------------------------------------------

/// OCC that skips read-set validation (write skew goes through).
struct OccWithoutValidation;

impl Protocol for OccWithoutValidation {
    const NAME: &'static str = "occ-without-validation";
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
        // The bug: the read set is never validated.
        stages::log_and_apply(tx).await?;
        stages::commit_and_release(tx, CommitOpts::plain()).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// OCC whose write-back puts each of the first two updates' values into the other's record
/// (correctly sealed for the record it lands in: an engine mix-up, not a torn write).
struct OccSwappingPayloads;

impl Protocol for OccSwappingPayloads {
    const NAME: &'static str = "occ-swapping-payloads";
    const STAGES: &'static [Stage] = atoll_protocols::Occ::STAGES;
    type EntryState = ();

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::Occ::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        atoll_protocols::Occ::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let ws = tx.select(|e| e.is_write() && e.access != Access::Insert);
        let rs = tx.select(|e| !e.is_write());
        stages::lock_unchanged(
            tx,
            &ws,
            UnchangedOpts {
                freeze_rts: false,
                seen: |e| e.version,
            },
        )
        .await?;
        let prim = tx.c.plan().get(Stage::Validate);
        if let Err(a) = stages::validate(tx, &rs, prim).await {
            stages::release_all(tx).await;
            return Err(a);
        }
        stages::log_and_apply(tx).await?;
        // The bug: the workload words of two updates trade places.
        let dirty = tx.select(|e| e.dirty && e.access == Access::Update);
        if let [a, b, ..] = dirty[..] {
            let user = |i: usize| tx.entries[i].data[ENGINE_PAYLOAD_WORDS as usize..].to_vec();
            let (ua, ub) = (user(a), user(b));
            if ua.len() == ub.len() {
                for (i, u) in [(a, ub), (b, ua)] {
                    let mut sealed = Vec::new();
                    let e = &tx.entries[i];
                    seal(e.table, e.key, tx.tag, &u, &mut sealed);
                    tx.entries[i].data = sealed;
                }
            }
        }
        stages::commit_and_release(tx, CommitOpts::plain()).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// NOWAIT that reads without locking: only writes are locked.
struct NoWaitWithoutReadLocks;

impl Protocol for NoWaitWithoutReadLocks {
    const NAME: &'static str = "nowait-without-read-locks";
    const STAGES: &'static [Stage] = atoll_protocols::NoWait::STAGES;
    type EntryState = ();

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::NoWait::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let reads: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access == Access::Read)
            .collect();
        let writes: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access != Access::Read)
            .collect();
        // The bug: reads take no lock.
        stages::read(tx, &reads, plan.get(Stage::Read)).await?;
        let opts = LockOpts {
            primitive: plan.get(Stage::Lock),
            with_data: plan.get(Stage::Read) == plan.get(Stage::Lock),
            freeze_rts: false,
            peek_on_retry: false,
        };
        stages::lock(tx, &writes, opts).await?;
        stages::read_after_lock(tx, &writes).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let unlocked = tx.select(|e| e.is_write() && !e.locked && e.access != Access::Insert);
        let opts = LockOpts {
            primitive: tx.c.plan().get(Stage::Lock),
            with_data: false,
            freeze_rts: false,
            peek_on_retry: false,
        };
        if let Err(a) = stages::lock(tx, &unlocked, opts).await {
            stages::release_all(tx).await;
            return Err(a);
        }
        stages::log_and_apply(tx).await?;
        stages::commit_and_release(tx, CommitOpts::plain()).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// WAITDIE whose participants give back a read lock as soon as they answer: the
/// hardware-islands paper's one-shot read-only optimisation, which lets a transaction
/// release before it holds all its locks, so it is no longer two-phase
/// (docs/reproducing.md, "One-shot 2PC").
struct WaitDieReleasingReadsAtAnswer;

impl Protocol for WaitDieReleasingReadsAtAnswer {
    const NAME: &'static str = "waitdie-releasing-reads-at-answer";
    const STAGES: &'static [Stage] = atoll_protocols::WaitDie::STAGES;
    const KEEP_TS_ON_RETRY: bool = true;
    const KNOBS: &'static [atoll_txn::KnobSpec] = atoll_protocols::WaitDie::KNOBS;
    type EntryState = ();

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        atoll_protocols::WaitDie::configure(knobs)
    }

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::WaitDie::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        <atoll_protocols::WaitDie as Protocol>::fetch(tx, idxs).await?;
        // The defect: the records only read are unlocked once read.
        let reads: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access == Access::Read)
            .collect();
        let prim = tx.c.plan().get(Stage::Release);
        stages::release(tx, &reads, prim).await;
        Ok(())
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        <atoll_protocols::WaitDie as Protocol>::commit(tx).await
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        <atoll_protocols::WaitDie as Protocol>::rollback(tx).await
    }
}

/// SUNDIAL that commits at a timestamp its read leases may not reach: no renewal.
struct SundialWithoutRenewal;

impl Protocol for SundialWithoutRenewal {
    const NAME: &'static str = "sundial-without-renewal";
    const STAGES: &'static [Stage] = atoll_protocols::Sundial::STAGES;
    type EntryState = Lease;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::Sundial::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_, Lease>, idxs: &[usize]) -> Result<(), Abort> {
        atoll_protocols::Sundial::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_, Lease>) -> Result<(), Abort> {
        let unlocked = tx.select(|e| e.is_write() && !e.locked && e.access != Access::Insert);
        stages::lock_unchanged(
            tx,
            &unlocked,
            UnchangedOpts {
                freeze_rts: true,
                seen: |e| e.state.wts,
            },
        )
        .await?;
        let commit_ts = atoll_protocols::sundial::coord::commit_ts(tx);
        // The bug: the read leases are not renewed up to `commit_ts`.
        stages::log_and_apply(tx).await?;
        let opts = CommitOpts {
            set_ts: Some(commit_ts),
            install: None,
        };
        stages::commit_and_release(tx, opts).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_, Lease>) {
        stages::release_all(tx).await
    }
}

/// OCC that, in one attempt of four, installs its writes and then reports an abort: the
/// writes of an aborted attempt stay visible.
struct OccLeavingAbortedWrites;

/// One attempt in this many leaves its writes behind.
const LEAKY_ATTEMPT_EVERY: u64 = 4;

impl Protocol for OccLeavingAbortedWrites {
    const NAME: &'static str = "occ-leaving-aborted-writes";
    const STAGES: &'static [Stage] = atoll_protocols::Occ::STAGES;
    type EntryState = ();

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::Occ::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        atoll_protocols::Occ::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        atoll_protocols::Occ::commit(tx).await?;
        // The bug: the attempt is reported aborted after its writes were installed.
        if tx.tag % LEAKY_ATTEMPT_EVERY == 0 && tx.entries.iter().any(|e| e.installed.is_some()) {
            return Err(Abort::ValidationFailed);
        }
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// OCC whose commit logs each record to the first backup of the partitions it writes only
/// (with three replicas a partition's second backup never hears of it): the replicas drift
/// from their primaries, which only the replica check sees.
struct OccLoggingToOneBackup;

impl Protocol for OccLoggingToOneBackup {
    const NAME: &'static str = "occ-logging-to-one-backup";
    const STAGES: &'static [Stage] = atoll_protocols::Occ::STAGES;
    type EntryState = ();

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::Occ::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        atoll_protocols::Occ::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let ws = tx.select(|e| e.is_write() && e.access != Access::Insert);
        let rs = tx.select(|e| !e.is_write());
        let seen = |e: &atoll_txn::Entry| e.version;
        stages::lock_unchanged(
            tx,
            &ws,
            UnchangedOpts {
                freeze_rts: false,
                seen,
            },
        )
        .await?;
        if let Err(a) = stages::validate(tx, &rs, plan.get(Stage::Validate)).await {
            stages::release_all(tx).await;
            return Err(a);
        }
        let ts = tx.ts.word();
        let ins = tx.select(|e| e.access == Access::Insert);
        if let Err(a) = stages::apply_inserts_at(tx, &ins, ts).await {
            stages::release_all(tx).await;
            return Err(a);
        }
        let written = stages::installed_writes(tx);
        if !written.is_empty() {
            let mut rec = stages::log_record(tx, &written, 0);
            let mut targets = stages::log_targets(tx, &written);
            // The bug: one backup hears of the commit, the others never.
            targets.truncate(1);
            stages::log_to(tx, plan.get(Stage::Log), &targets, &mut rec).await?;
        }
        tx.logged = true;
        stages::apply_deletes(tx, ts).await?;
        stages::commit_and_release(tx, CommitOpts::plain()).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// Three replicas of every partition (two backups each).
fn three_replicas(cfg: &mut RunConfig) {
    cfg.log_replicas = 2;
}

/// OCC whose runs recover a crashed node with a deliberate defect `D`.
macro_rules! occ_recovering_with {
    ($(#[$m:meta])* $name:ident = $label:literal, $defect:expr) => {
        $(#[$m])*
        struct $name;

        impl Protocol for $name {
            const NAME: &'static str = $label;
            const STAGES: &'static [Stage] = atoll_protocols::Occ::STAGES;
            const LOGS_ITS_INSTALLS: bool = true;
            type EntryState = ();

            fn check_plan(plan: &Plan) -> Result<(), PlanError> {
                atoll_protocols::Occ::check_plan(plan)
            }

            async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
                atoll_protocols::Occ::fetch(tx, idxs).await
            }

            async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
                atoll_protocols::Occ::commit(tx).await
            }

            async fn rollback(tx: &mut TxnCore<'_>) {
                atoll_protocols::Occ::rollback(tx).await
            }

            fn recovery_defect() -> Option<atoll_txn::recovery::Defect> {
                Some($defect)
            }
        }
    };
}

occ_recovering_with! {
    /// OCC whose recovery of a crashed node aborts each of its coordinators' last logged
    /// transactions, committed or not: writes its clients saw acknowledged, or that other
    /// primaries hold already, are dropped.
    OccRecoveryAbortingLastRecords = "occ-recovery-aborting-last-records",
    atoll_txn::recovery::Defect::AbortsEveryLastRecord
}

occ_recovering_with! {
    /// OCC whose recovery of a crashed node leaves its coordinators' locks held.
    OccRecoveryKeepingDeadLocks = "occ-recovery-keeping-dead-locks",
    atoll_txn::recovery::Defect::KeepsDeadLocks
}

occ_recovering_with! {
    /// OCC whose survivors neither fence a node they declared dead nor hold nodes to their
    /// leases: a node that froze past its recovery comes back and goes on, finishing what
    /// recovery settled without it and answering from records out of date.
    OccRecoveryWithoutFencing = "occ-recovery-without-fencing",
    atoll_txn::recovery::Defect::NoFencing
}

/// MVCC whose recovery of a crashed node finishes its committed updates without keeping
/// the version each replaces in an old slot (where the dead writer had not): a snapshot
/// reader between the two versions would fall through to an older one.
struct MvccRecoveryDroppingReplacedVersions;

impl Protocol for MvccRecoveryDroppingReplacedVersions {
    const NAME: &'static str = "mvcc-recovery-dropping-replaced-versions";
    const STAGES: &'static [Stage] = Mvcc::STAGES;
    const LOGS_ITS_INSTALLS: bool = true;
    const MULTI_VERSION: bool = true;
    const KNOBS: &'static [atoll_txn::KnobSpec] = Mvcc::KNOBS;
    const CONFLICT_ABORTS: &'static [Abort] = Mvcc::CONFLICT_ABORTS;
    type EntryState = Versions;

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        Mvcc::configure(knobs)
    }

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        Mvcc::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_, Versions>, idxs: &[usize]) -> Result<(), Abort> {
        Mvcc::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_, Versions>) -> Result<(), Abort> {
        Mvcc::commit(tx).await
    }

    async fn rollback(tx: &mut TxnCore<'_, Versions>) {
        Mvcc::rollback(tx).await
    }

    fn recovery_defect() -> Option<atoll_txn::recovery::Defect> {
        Some(atoll_txn::recovery::Defect::DropsReplacedVersions)
    }
}

/// Three replicas, and node 1 of the three crashes mid-run (at a seeded moment of the
/// measured window, as a committing transaction of its may be anywhere in its pipeline).
fn crash_with_three_replicas(cfg: &mut RunConfig) {
    crash_with_three_replicas_from(cfg, 4);
}

/// As [`crash_with_three_replicas`], the crash at a seeded moment of the window's last
/// `1 - 1/from_part`, the first `1/from_part` of it left to commit in before the crash
/// (after it, the transactions touching node 1 give up `node_failed`).
fn crash_with_three_replicas_from(cfg: &mut RunConfig, from_part: u64) {
    cfg.log_replicas = 2;
    let window_us = (cfg.duration_s * 1e6) as u64;
    let first_us = window_us / from_part;
    let spread_us = (window_us - first_us) * 2 / 3;
    let at_us = (cfg.warmup_s * 1e6) as u64 + first_us + cfg.seed % spread_us;
    cfg.fabric = Fabric::Sim {
        net: "edr-ib".into(),
        faults: FaultConfig::parse(&format!("{FAULTS},crash_node=1,crash_us={at_us}")).unwrap(),
    };
}

/// Three replicas, and node 1 of the three freezes mid-run (at a seeded moment of the
/// measured window) for four op timeouts: long enough to be found dead, fenced and
/// recovered without it, short enough to come back with most of the window left.
fn freeze_with_three_replicas(cfg: &mut RunConfig) {
    const OP_TIMEOUT_US: u64 = 300;
    cfg.log_replicas = 2;
    let window_us = (cfg.duration_s * 1e6) as u64;
    let at_us = (cfg.warmup_s * 1e6) as u64 + window_us / 8 + cfg.seed % (window_us / 4);
    let freeze_us = 4 * OP_TIMEOUT_US;
    cfg.fabric = Fabric::Sim {
        net: "edr-ib".into(),
        faults: FaultConfig::parse(&format!(
            "{FAULTS},crash_node=1,crash_us={at_us},freeze_us={freeze_us},op_timeout_us={OP_TIMEOUT_US}"
        ))
        .unwrap(),
    };
}

/// As [`crash_with_three_replicas`], with twice the co-routines: more commits in flight
/// when the node dies, so more of its committed writes are left for recovery to finish.
/// YCSB's hot set grows fourfold with them: twice the co-routines on six hot records abort
/// some 98% of attempts, and on twelve a run still committed nothing in its window once in
/// CI (seed 1796410279740826053: MVCC attempts there take ~1 ms, and after the crash four
/// in five touch node 1); the crash comes after the window's first half.
fn crash_with_three_replicas_busy(cfg: &mut RunConfig) {
    crash_with_three_replicas_from(cfg, 2);
    cfg.coroutines *= 2;
    if let Some(hot) = cfg.params.get_mut("hot_fraction") {
        let grown = hot.parse::<f64>().expect("hot_fraction is a number") * 4.0;
        *hot = grown.to_string();
    }
}

/// OCC whose write-back stores a record's payload and version after unlocking it, the
/// order an in-place write-back must never take; the gap (a yield to the worker's other
/// co-routines) stands for a descheduled writer. On one in-process node every record is the
/// coordinator's own, so each of those stores runs in place.
struct OccStoringAfterUnlock;

impl Protocol for OccStoringAfterUnlock {
    const NAME: &'static str = "occ-storing-after-unlock";
    const STAGES: &'static [Stage] = atoll_protocols::Occ::STAGES;
    type EntryState = ();

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::Occ::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        atoll_protocols::Occ::fetch(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let plan = *tx.c.plan();
        let ws = tx.select(|e| e.is_write() && e.access != Access::Insert);
        let rs = tx.select(|e| !e.is_write());
        let unchanged = UnchangedOpts {
            freeze_rts: false,
            seen: |e| e.version,
        };
        stages::lock_unchanged(tx, &ws, unchanged).await?;
        if let Err(a) = stages::validate(tx, &rs, plan.get(Stage::Validate)).await {
            stages::release_all(tx).await;
            return Err(a);
        }
        stages::log_and_apply(tx).await?;
        // The bug: unlock first, then store into records no longer held.
        stages::release(tx, &ws, plan.get(Stage::Release)).await;
        tx.c.ep.yield_now().await;
        for &i in &ws {
            // `write_back` insists on the lock the variant just gave away.
            tx.entries[i].locked = true;
        }
        let opts = WriteBackOpts {
            primitive: plan.get(Stage::Commit),
            release: false,
            set_ts: None,
            install: None,
        };
        stages::write_back(tx, &ws, opts).await;
        for &i in &ws {
            tx.entries[i].locked = false;
        }
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_>) {
        stages::release_all(tx).await
    }
}

/// MVCC with the bug of defect 1 (issue 7) as the review found it: a reader takes a record
/// locked by a later writer at once (Cond R2), choosing by `WTS` with ties going to the
/// current slot; and the write-back copies the current version to the oldest slot, then
/// overwrites the current payload in place, and only then sets `WTS` and the version (a
/// writer descheduled in between leaves that state for a while). No slot is ever marked as
/// being written, so such a reader gets the new payload under the old version, or a torn one.
struct MvccOldWriteBack;

/// How long the old write-back's writer stalls after overwriting payloads in place.
const WRITER_STALL_NS: u64 = 50_000;

impl Protocol for MvccOldWriteBack {
    const NAME: &'static str = "mvcc-old-write-back";
    const STAGES: &'static [Stage] = Mvcc::STAGES;
    const MULTI_VERSION: bool = true;
    type EntryState = Versions;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        if plan.get(Stage::Lock) != atoll_txn::Primitive::OneSided
            || plan.get(Stage::Commit) != atoll_txn::Primitive::OneSided
        {
            return Err(PlanError(
                "the old write-back is one-sided and needs the record read by a one-sided lock"
                    .into(),
            ));
        }
        Mvcc::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_, Versions>, idxs: &[usize]) -> Result<(), Abort> {
        let reads: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access == Access::Read)
            .collect();
        let writes: atoll_txn::Idxs = idxs
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].access != Access::Read)
            .collect();
        for i in reads {
            read_under_later_writers(tx, i).await?;
        }
        Mvcc::fetch(tx, &writes).await
    }

    async fn commit(tx: &mut TxnCore<'_, Versions>) -> Result<(), Abort> {
        let unlocked = tx.select(|e| e.is_write() && !e.locked && e.access != Access::Insert);
        if let Err(a) = Mvcc::fetch(tx, &unlocked).await {
            Mvcc::rollback(tx).await;
            return Err(a);
        }
        stages::log_and_apply(tx).await?;
        let ts = tx.ts.word();
        let ws = tx.select(|e| e.locked && e.dirty);
        let mut d = tx.c.ep.doorbell();
        for &i in &ws {
            let e = &tx.entries[i];
            let layout = tx.c.catalog.layout(e.table);
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            let at = layout.old_slot_offset(atoll_protocols::mvcc::version::oldest_slot(
                layout,
                &e.state.before,
            ));
            let mut old = vec![
                e.state.before[H_WTS as usize],
                e.state.before[H_VERSION as usize],
            ];
            old.extend_from_slice(
                &e.state.before[HEADER_WORDS as usize..layout.tuple_words as usize],
            );
            d.write(ptr.add(at), Words::from_slice(&old));
            d.write(ptr.add(HEADER_WORDS), Words::from_slice(&e.data));
        }
        tx.unabortable(d.submit().await);
        // A writer descheduled between its WRITEs (on real threads, preemption).
        tx.c.ep.sleep(WRITER_STALL_NS).await;
        let mut d = tx.c.ep.doorbell();
        for &i in &ws {
            let e = &tx.entries[i];
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            d.write(ptr.add(H_RTS), Words::from_slice(&[ts, ts]));
            d.write(ptr.add(H_VERSION), Words::from_slice(&[e.version + 1]));
            d.write(ptr.add(H_LOCK), Words::from_slice(&[0]));
        }
        tx.unabortable(d.submit().await);
        for &i in &ws {
            let e = &mut tx.entries[i];
            e.installed = Some(e.version + 1);
            e.version += 1;
            e.state.wts = ts;
            e.state.rts = ts;
            e.frozen = false;
            e.locked = false;
        }
        stages::release_all(tx).await;
        Ok(())
    }

    async fn rollback(tx: &mut TxnCore<'_, Versions>) {
        Mvcc::rollback(tx).await
    }
}

/// Rounds of the permissive MVCC read before it gives up.
const READ_ROUNDS_MAX: u32 = 64;
/// Pause between them.
const READ_RETRY_NS: u64 = 1_000;

/// MVCC's one-sided read (double READ, Cond R1 by `WTS`), except that a record held by a
/// writer ordered after the reader is read at once, whatever its (frozen) `RTS`.
async fn read_under_later_writers(tx: &mut TxnCore<'_, Versions>, i: usize) -> Result<(), Abort> {
    stages::locate(tx, &[i]).await?;
    let ctts = tx.ts.word();
    let ep = tx.c.ep.clone();
    let (table, node, loc, key) = {
        let e = &tx.entries[i];
        (e.table, e.node, e.slot(), e.key)
    };
    let layout = *tx.c.catalog.layout(table);
    let ptr = tx.c.catalog.record_ptr(table, node, loc);
    for _ in 0..READ_ROUNDS_MAX {
        let mut d = ep.doorbell();
        d.read(ptr, layout.record_words);
        d.read(ptr, layout.record_words);
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        let (a, b) = (res.read(0), res.read(1));
        if a[H_KEY as usize] != key || a[H_VERSION as usize] & VERSION_ABSENT != 0 {
            return Err(Abort::NotFound);
        }
        let same = a
            .iter()
            .zip(b.iter())
            .enumerate()
            .all(|(k, (x, y))| k == H_RTS as usize || x == y);
        let lock = a[H_LOCK as usize];
        if lock != 0 && lock < ctts {
            return Err(Abort::Conflict);
        }
        let Some(c) = atoll_protocols::mvcc::version::choose(&layout, a, ctts) else {
            return Err(Abort::SlotOverflow);
        };
        let rts = b[H_RTS as usize];
        let payload = &a[c.payload_at..c.payload_at + layout.payload_words as usize];
        // The bug: a later writer's lock is taken as leave to read now.
        let take = same && (lock > ctts || rts & !RTS_FROZEN >= ctts);
        let raise = same && !take && rts & RTS_FROZEN == 0;
        if take || raise {
            let ok = take || {
                let mut d = ep.doorbell();
                d.cas(ptr.add(H_RTS), rts, ctts);
                d.read(ptr, HEADER_WORDS);
                let r = d.submit().await.map_err(|e| tx.op_failed(e))?;
                let h = r.read(1);
                r.cas(0) == rts
                    && h[H_VERSION as usize] == a[H_VERSION as usize]
                    && h[H_WTS as usize] == a[H_WTS as usize]
            };
            if ok {
                tx.c.observe_ts(c.wts.max(rts));
                let e = &mut tx.entries[i];
                e.version = c.version;
                e.state.wts = c.wts;
                e.state.rts = (rts & !RTS_FROZEN).max(if take { 0 } else { ctts });
                e.fill(c.version, payload);
                return Ok(());
            }
        }
        ep.sleep(READ_RETRY_NS).await;
    }
    Err(Abort::Conflict)
}

/// RSI whose lock CAS does not compare the commit id its read saw: it reads each record's
/// lock word anew and swaps from that, so a writer that committed since is overwritten
/// (first-committer-wins broken: a lost update).
struct RsiWithoutValidation;

impl Protocol for RsiWithoutValidation {
    const NAME: &'static str = "rsi-without-validation";
    const ISOLATION: atoll_txn::Isolation = atoll_txn::Isolation::Snapshot;
    const LOCK_WORD: atoll_storage::layout::LockWord = atoll_storage::layout::LockWord::CommitId;
    const DELETES: bool = false;
    const STAGES: &'static [Stage] = atoll_protocols::Rsi::STAGES;
    type EntryState = rsi::RsiEntry;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::Rsi::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_, rsi::RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
        rsi::read(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_, rsi::RsiEntry>) -> Result<(), Abort> {
        let ws = tx.select(|e| e.is_write());
        if ws.is_empty() {
            return Ok(());
        }
        let blind: atoll_txn::Idxs = ws
            .iter()
            .copied()
            .filter(|&i| !tx.entries[i].fetched)
            .collect();
        if !blind.is_empty() {
            rsi::read(tx, &blind).await?;
        }
        // The defect: expect whatever commit id the record holds now, not the one read.
        let mut d = tx.c.ep.doorbell_for(ws.len());
        for &i in &ws {
            let e = &tx.entries[i];
            d.read(
                tx.c.catalog
                    .record_ptr(e.table, e.node, e.slot())
                    .add(H_LOCK),
                1,
            );
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        for (j, &i) in ws.iter().enumerate() {
            tx.entries[i].state.cid = res.read(j)[0] & !atoll_storage::layout::CID_LOCKED;
        }
        let svc = tx.c.ts_service();
        let (cts, rts_word) = match rsi::lock(tx, &ws, |e| e.state.cid).await {
            rsi::Lock::Taken { cts, rts_word } => (cts, rts_word),
            rsi::Lock::Refused {
                abort,
                cts,
                rts_word,
            } => {
                rsi::release(tx, &ws).await;
                rsi::report(tx, &svc, cts, rts_word).await;
                return Err(abort);
            }
            rsi::Lock::Failed(a) => return Err(a),
        };
        rsi::stamp(tx, &ws, cts);
        rsi::install(tx, &ws, cts).await;
        tx.c.last_commit_ts = cts;
        rsi::report(tx, &svc, cts, rts_word).await;
        Ok(())
    }

    async fn rollback(_tx: &mut TxnCore<'_, rsi::RsiEntry>) {}
}

/// NAM-DB whose visibility test admits one timestamp past the snapshot's (`t <= V[i] + 1`):
/// it reads a commit installed but not yet published, which its snapshot does not include
/// (a read from the future).
struct NamDbSeeingOneAhead;

impl Protocol for NamDbSeeingOneAhead {
    const NAME: &'static str = "namdb-seeing-one-ahead";
    const ISOLATION: atoll_txn::Isolation = atoll_txn::Isolation::Snapshot;
    const LOCK_WORD: atoll_storage::layout::LockWord = atoll_storage::layout::LockWord::CommitId;
    const DELETES: bool = false;
    const MULTI_VERSION: bool = true;
    const OLD_VERSIONS: atoll_storage::layout::OldVersions = atoll_protocols::NamDb::OLD_VERSIONS;
    const STAGES: &'static [Stage] = atoll_protocols::NamDb::STAGES;
    type EntryState = rsi::RsiEntry;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::NamDb::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_, rsi::RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
        namdb::snapshot(tx).await?;
        stages::locate(tx, idxs).await?;
        // The defect: every slot one ahead.
        let ahead: Vec<u64> = tx.snapshot_vector.iter().map(|t| t + 1).collect();
        namdb::read_seeing(tx, idxs, |cid| namdb::sees(&ahead, cid)).await
    }

    async fn commit(tx: &mut TxnCore<'_, rsi::RsiEntry>) -> Result<(), Abort> {
        <atoll_protocols::NamDb as Protocol>::commit(tx).await
    }

    async fn rollback(_tx: &mut TxnCore<'_, rsi::RsiEntry>) {}
}

/// NAM-DB (a slot per coordinator, the detached fetcher) whose snapshot is the fetcher's
/// copy with the coordinator's own slot raised to its last commit, as NAM-DB's snapshot did
/// before session 17: two coordinators each seeing their own last commit and not the
/// other's fork (a long fork, which no single order of time holds).
struct NamDbRaisingOwnSlot;

impl Protocol for NamDbRaisingOwnSlot {
    const NAME: &'static str = "namdb-raising-own-slot";
    const ISOLATION: atoll_txn::Isolation = atoll_txn::Isolation::Snapshot;
    const LOCK_WORD: atoll_storage::layout::LockWord = atoll_storage::layout::LockWord::CommitId;
    const DELETES: bool = false;
    const MULTI_VERSION: bool = true;
    const OLD_VERSIONS: atoll_storage::layout::OldVersions = atoll_protocols::NamDb::OLD_VERSIONS;
    const STAGES: &'static [Stage] = atoll_protocols::NamDb::STAGES;
    type EntryState = rsi::RsiEntry;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::NamDb::check_plan(plan)
    }

    fn node_task_wanted(cfg: &atoll_txn::TxnConfig) -> bool {
        atoll_protocols::NamDb::node_task_wanted(cfg)
    }

    async fn node_task(task: atoll_txn::NodeTask) {
        <atoll_protocols::NamDb as Protocol>::node_task(task).await
    }

    async fn fetch(tx: &mut TxnCore<'_, rsi::RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
        if tx.snapshot_vector.is_empty() {
            if let Some(v) = tx.c.node_clock.cached() {
                // The defect: a copy of one instant, patched with its own last commit.
                let mut v = v.as_ref().clone();
                let own = namdb_slot_of(tx) as usize;
                v[own] = v[own].max(tx.c.last_commit_ts);
                tx.snapshot_vector = v;
            }
        }
        namdb::read(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_, rsi::RsiEntry>) -> Result<(), Abort> {
        <atoll_protocols::NamDb as Protocol>::commit(tx).await
    }

    async fn rollback(_tx: &mut TxnCore<'_, rsi::RsiEntry>) {}
}

/// NAM-DB with one slot per compute node (`--vector-slots node`) whose committer writes
/// its own timestamp into the node's slot as soon as its installs are done, not the highest
/// below which all of the node's ended: a snapshot then includes a timestamp of the node
/// whose transaction is still installing (and two committers' WRITEs can land out of order).
struct NamDbPublishingAhead;

impl Protocol for NamDbPublishingAhead {
    const NAME: &'static str = "namdb-publishing-ahead";
    const ISOLATION: atoll_txn::Isolation = atoll_txn::Isolation::Snapshot;
    const LOCK_WORD: atoll_storage::layout::LockWord = atoll_storage::layout::LockWord::CommitId;
    const DELETES: bool = false;
    const MULTI_VERSION: bool = true;
    const OLD_VERSIONS: atoll_storage::layout::OldVersions = atoll_protocols::NamDb::OLD_VERSIONS;
    const STAGES: &'static [Stage] = atoll_protocols::NamDb::STAGES;
    type EntryState = rsi::RsiEntry;

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        atoll_protocols::NamDb::check_plan(plan)
    }

    async fn fetch(tx: &mut TxnCore<'_, rsi::RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
        namdb::read(tx, idxs).await
    }

    async fn commit(tx: &mut TxnCore<'_, rsi::RsiEntry>) -> Result<(), Abort> {
        let Some(w) = rsi::writes(tx) else {
            return Ok(());
        };
        let (ws, ins, blind) = (w.updates(), w.ins, w.blind);
        if !blind.is_empty() {
            namdb::read(tx, &blind).await?;
        }
        if let Err(a) = namdb::lock(tx, &ws).await {
            rsi::release(tx, &ws).await;
            return Err(a);
        }
        let slot = namdb_slot_of(tx);
        let ts = tx.c.node_clock.take_ts();
        let cid = namdb::commit_id(slot, ts);
        let written: Vec<usize> = ws.iter().chain(ins.iter()).copied().collect();
        rsi::stamp(tx, &written, cid);
        tx.commit_ts = atoll_txn::Timestamp::from_word(ts);
        tx.commit_slot = Some(slot);
        if !ins.is_empty() {
            if let Err(a) =
                stages::apply_inserts_locked_by(tx, atoll_storage::layout::CID_LOCKED).await
            {
                rsi::release(tx, &ws).await;
                return Err(a);
            }
        }
        namdb::install(tx, &ws, cid).await;
        rsi::unlock_inserted(tx, &ins, cid).await;
        // The defect: its own timestamp, whatever the node's others are doing.
        let ptr = tx.c.ts_vector().slot(slot);
        let mut d = tx.c.ep.doorbell_for(1);
        d.write(ptr, Words::from_slice(&[ts]));
        let r = d.submit().await;
        let _ = tx.unabortable(r);
        Ok(())
    }

    async fn rollback(_tx: &mut TxnCore<'_, rsi::RsiEntry>) {}
}

// --- running them -------------------------------------------------------------------

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
            ("compute_us", "20"),
        ],
        WorkloadKind::Cycle => &[
            ("pairs", "6"),
            ("record_words", "16"),
            ("ranges", "2"),
            ("range_keys", "8"),
        ],
        // A scaled population (the spec's 3000 customers and 100000 items per warehouse
        // load too slowly for hundreds of short runs); one warehouse per node.
        WorkloadKind::Tpcc => &[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "50"),
        ],
        WorkloadKind::Micro => &[
            ("rows", "4"),
            ("rows_per_node", "20"),
            ("kind", "update"),
            ("multisite_fraction", "0.5"),
        ],
        // Few pairs: the probe of write skew, which OCC without validation lets through.
        WorkloadKind::Skew => &[("pairs", "4")],
        WorkloadKind::Checkout => &[
            ("products", "30"),
            ("product_bytes", "128"),
            ("orders_max", "2000"),
        ],
        // A workload not tuned here runs with the small knobs it declares.
        #[allow(unreachable_patterns)]
        other => other.small_params(),
    }
}

fn config(workload: WorkloadKind, protocol: ProtocolKind, plan: &str, seed: u64) -> RunConfig {
    let mut cfg = RunConfig {
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
        plan: protocol.parse_plan(plan).unwrap(),
        nodes: 3,
        threads: 2,
        coroutines: 4,
        duration_s: DURATION_S,
        warmup_s: 0.0005,
        seed,
        record_history: true,
        progress_interval_s: 0.001,
        ..RunConfig::default()
    };
    crate::short_epochs(&mut cfg);
    cfg
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
fn save_history(r: &Report, name: &str, isolation: atoll_txn::Isolation) {
    let d = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("histories");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::write(
        d.join(format!("{name}.jsonl")),
        // Checked at the level the variant's base promises.
        history::to_text(&r.history, isolation),
    )
    .unwrap();
}

/// Which checks caught one variant in one seed, and the first run they caught (what a
/// flagged control prints, to replay).
#[derive(Default, Clone)]
struct Caught {
    history: bool,
    invariants: bool,
    cycle: bool,
    first: Option<String>,
}

/// Runs `P` on every workload under each of `plans` with one seed, each run's
/// configuration changed by `tweak`: what caught it.
fn try_seed_with<P: Protocol>(
    base: ProtocolKind,
    plans: &[&str],
    tweak: &dyn Fn(&mut RunConfig),
    seed: u64,
    keep: &mut Option<String>,
) -> Caught {
    let mut c = Caught::default();
    for (plan, w) in plans.iter().flat_map(|p| WorkloadKind::ALL.map(|w| (p, w))) {
        // What the base protocol refuses (RSI: RPC reads; deletes; CALVIN: undeclared keys,
        // inserts) its variant skips.
        if base.check_plan(&base.parse_plan(plan).unwrap()).is_err()
            || atoll_runner::config::runs_workload(base, w).is_err()
        {
            continue;
        }
        let mut cfg = config(w, base, plan, seed);
        tweak(&mut cfg);
        // TPC-W's checkout spans every partition in every transaction: until a dead
        // partition fails over (TODO(#41)) a crash can leave its short runs committing
        // nothing, which `run.kept_committing` fails, rightly.
        if w == WorkloadKind::Checkout
            && matches!(&cfg.fabric, Fabric::Sim { faults, .. } if faults.crash.is_some())
        {
            continue;
        }
        let r = match run_protocol::<P>(&cfg, &|_| {}) {
            Ok(r) => r,
            // An assertion of the engine's stopped the run: a participant met a request its
            // state says cannot be (a write-back from a writer holding no lock). Caught by
            // an invariant, checked where it broke.
            Err(atoll_runner::RunError::Panicked(p)) => {
                c.invariants = true;
                c.first.get_or_insert_with(|| {
                    format!(
                        "{} / {plan} seed {seed}: an assertion stopped the run: {p}",
                        w.name()
                    )
                });
                continue;
            }
            Err(e) => panic!(
                "{} / {} seed {seed}: the run failed: {e}",
                P::NAME,
                w.name()
            ),
        };
        let v = history::check(&r.history, Mode::from(base.isolation()));
        let failed = r.checks.iter().find(|c| !c.passed);
        if c.first.is_none() && (!v.ok() || failed.is_some()) {
            c.first = Some(format!(
                "{} / {plan} seed {seed}: {}",
                w.name(),
                failed.map_or("the history check".to_string(), |f| format!(
                    "{}: {}",
                    f.name, f.detail
                ))
            ));
        }
        if !v.ok() {
            c.history = true;
            if keep.is_none() && v.cycle.is_some() && v.anomalies_total == 0 {
                // A history only a cycle condemns: adya must agree on it.
                save_history(&r, &format!("broken-{}", P::NAME), base.isolation());
                *keep = Some(format!("{} seed {seed}", w.name()));
            }
        }
        for check in r.checks.iter().filter(|c| !c.passed) {
            if check.name.starts_with("cycle.") {
                c.cycle = true;
            } else {
                c.invariants = true;
            }
        }
    }
    c
}

/// One row of the table: its name; caught by each check, and by any, out of `seeds`; the
/// first run caught.
type Row = (String, [u64; 4], Option<String>);

/// One row of the table for `P` under [`PLANS`].
fn row<P: Protocol>(base: ProtocolKind, seeds: u64, start: u64) -> Row {
    row_under::<P>(base, &PLANS, "", seeds, start)
}

/// As [`row`], under `plans`, the row named with `suffix`.
fn row_under<P: Protocol>(
    base: ProtocolKind,
    plans: &[&str],
    suffix: &str,
    seeds: u64,
    start: u64,
) -> Row {
    row_with::<P>(base, plans, suffix, &|_| {}, seeds, start)
}

/// As [`row_under`], each run's configuration changed by `tweak`.
fn row_with<P: Protocol>(
    base: ProtocolKind,
    plans: &[&str],
    suffix: &str,
    tweak: &dyn Fn(&mut RunConfig),
    seeds: u64,
    start: u64,
) -> Row {
    let mut counts = [0u64; 4];
    let mut keep = None;
    let mut first = None;
    for s in 0..seeds {
        let c = try_seed_with::<P>(base, plans, tweak, start.wrapping_add(s * 7919), &mut keep);
        counts[0] += c.history as u64;
        counts[1] += c.invariants as u64;
        counts[2] += c.cycle as u64;
        counts[3] += (c.history || c.invariants || c.cycle) as u64;
        first = first.or(c.first);
    }
    (format!("{}{suffix}", P::NAME), counts, first)
}

tell_variant! {
    /// Tell whose commit manager hands out descriptors missing a completed tid (the base it
    /// would report): a snapshot misses a committed version it must see, so reads go stale.
    TellMissingCompletedTid = "tell-missing-completed-tid";
    fetch(tx, idxs) {
        tell::txn::start(tx).await?;
        // The defect: the descriptor misses the tid at its base.
        if let Some(d) = tell::txn::snapshot_mut(tx) {
            *d = d.without(tell::descriptor::Tid(d.base));
        }
        <Tell as Protocol>::fetch(tx, idxs).await
    }
    memory_task(task) {
        tell::manager::run(task).await
    }
}

/// CALVIN whose lanes run a transaction without waiting for its locks in the node's lock
/// table: transactions of one epoch on one node run at once on the same records (lost
/// updates, reads of a half-applied transaction).
struct CalvinWithoutLockWaits;

impl Protocol for CalvinWithoutLockWaits {
    const NAME: &'static str = "calvin-without-lock-waits";
    const DELETES: bool = false;
    const STAGES: &'static [Stage] = <atoll_protocols::Calvin as Protocol>::STAGES;
    const FAMILY_STAGES: &'static [Stage] = <atoll_protocols::Calvin as Protocol>::FAMILY_STAGES;
    const KNOBS: &'static [atoll_txn::KnobSpec] = <atoll_protocols::Calvin as Protocol>::KNOBS;
    const SEQUENCED: bool = true;
    type EntryState = ();

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        <atoll_protocols::Calvin as Protocol>::configure(knobs)
    }
    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        <atoll_protocols::Calvin as Protocol>::check_plan(plan)
    }
    fn seq_shape(cfg: &atoll_txn::TxnConfig) -> atoll_txn::SeqShape {
        <atoll_protocols::Calvin as Protocol>::seq_shape(cfg)
    }
    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        <atoll_protocols::Calvin as Protocol>::fetch(tx, idxs).await
    }
    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        <atoll_protocols::Calvin as Protocol>::commit(tx).await
    }
    async fn rollback(tx: &mut TxnCore<'_>) {
        <atoll_protocols::Calvin as Protocol>::rollback(tx).await
    }
    async fn seq_dispatch(
        c: &mut atoll_txn::Coordinator,
        b: atoll_txn::SeqBatch,
    ) -> Result<(), Abort> {
        <atoll_protocols::Calvin as Protocol>::seq_dispatch(c, b).await
    }
    async fn seq_next(
        c: &mut atoll_txn::Coordinator,
        epoch: u64,
    ) -> Result<Option<atoll_txn::SeqTxn>, Abort> {
        calvin::next_in_order(c, epoch, calvin::LockWait::Skipped).await
    }
    async fn seq_finish(
        c: &mut atoll_txn::Coordinator,
        t: &atoll_txn::SeqTxn,
    ) -> Result<(), Abort> {
        <atoll_protocols::Calvin as Protocol>::seq_finish(c, t).await
    }
    async fn seq_barrier(c: &mut atoll_txn::Coordinator, epoch: u64) -> Result<bool, Abort> {
        <atoll_protocols::Calvin as Protocol>::seq_barrier(c, epoch).await
    }
}

/// The slot of NAM-DB's vector the attempt's coordinator commits in.
fn namdb_slot_of(tx: &TxnCore<'_, rsi::RsiEntry>) -> u32 {
    tx.c.cfg
        .family_as::<namdb::NamDbConfig>()
        .vector_slot_of(&tx.c.cfg.shape(), tx.c.id)
}

/// CALVIN's per-lane order (RCC's), cross-lane conflicts in a second pass.
fn lane_order(cfg: &mut RunConfig) {
    cfg.set_knob("calvin_order", "lane");
}

/// NAM-DB's vector compressed to one slot per compute node.
fn node_slots(cfg: &mut RunConfig) {
    cfg.set_knob("vector_slots", "node");
}

/// A slot per coordinator, snapshots taken from the detached fetcher's copy.
fn fetcher(cfg: &mut RunConfig) {
    cfg.set_knob("vector_fetcher", true);
}

/// As [`node_slots`], snapshots taken from the detached fetcher's copy.
fn node_slots_fetcher(cfg: &mut RunConfig) {
    node_slots(cfg);
    cfg.set_knob("vector_fetcher", true);
}

#[test]
fn every_broken_variant_is_caught_in_at_least_90_percent_of_simulated_seeds() {
    let base = base_seed();
    let seeds: u64 = std::env::var("ATOLL_BROKEN_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEEDS_PER_VARIANT);
    let rows = vec![
        row::<OccWithoutValidation>(ProtocolKind::Occ, seeds, base),
        row::<OccSwappingPayloads>(ProtocolKind::Occ, seeds, base),
        row::<NoWaitWithoutReadLocks>(ProtocolKind::NoWait, seeds, base),
        row::<WaitDieReleasingReadsAtAnswer>(ProtocolKind::WaitDie, seeds, base),
        row::<SundialWithoutRenewal>(ProtocolKind::Sundial, seeds, base),
        row::<OccLeavingAbortedWrites>(ProtocolKind::Occ, seeds, base),
        row_with::<OccLoggingToOneBackup>(
            ProtocolKind::Occ,
            &PLANS,
            " (3 replicas)",
            &three_replicas,
            seeds,
            base,
        ),
        row_with::<OccRecoveryAbortingLastRecords>(
            ProtocolKind::Occ,
            &PLANS,
            " (node 1 crashes)",
            &crash_with_three_replicas,
            seeds,
            base,
        ),
        row_with::<OccRecoveryKeepingDeadLocks>(
            ProtocolKind::Occ,
            &PLANS,
            " (node 1 crashes)",
            &crash_with_three_replicas,
            seeds,
            base,
        ),
        row_with::<OccRecoveryWithoutFencing>(
            ProtocolKind::Occ,
            &CRASH_PLANS,
            " (node 1 freezes)",
            &freeze_with_three_replicas,
            seeds,
            base,
        ),
        row::<MvccOldWriteBack>(ProtocolKind::Mvcc, seeds, base),
        row_with::<MvccRecoveryDroppingReplacedVersions>(
            ProtocolKind::Mvcc,
            &CRASH_PLANS,
            " (node 1 crashes, busy)",
            &crash_with_three_replicas_busy,
            seeds,
            base,
        ),
        row::<RsiWithoutValidation>(ProtocolKind::Rsi, seeds, base),
        // Its lock requests served by the records' CPUs (the participant's compare).
        row_under::<RsiWithoutValidation>(ProtocolKind::Rsi, &RPC_ONLY, " (rpc)", seeds, base),
        row_under::<NamDbSeeingOneAhead>(ProtocolKind::NamDb, &ONE_SIDED_ONLY, "", seeds, base),
        row_with::<NamDbPublishingAhead>(
            ProtocolKind::NamDb,
            &ONE_SIDED_ONLY,
            " (node slots)",
            &node_slots,
            seeds,
            base,
        ),
        row_with::<NamDbRaisingOwnSlot>(
            ProtocolKind::NamDb,
            &ONE_SIDED_ONLY,
            " (fetcher)",
            &fetcher,
            seeds,
            base,
        ),
        row::<TellMissingCompletedTid>(ProtocolKind::Tell, seeds, base),
        row_under::<CalvinWithoutLockWaits>(ProtocolKind::Calvin, &RPC_ONLY, "", seeds, base),
        // Its second pass (the cross-lane conflicts) runs without the lock table.
        row_with::<CalvinWithoutLockWaits>(
            ProtocolKind::Calvin,
            &RPC_ONLY,
            " (lane order)",
            &lane_order,
            seeds,
            base,
        ),
    ];
    // Controls: the real protocols under the same runs are caught by nothing.
    let controls = vec![
        row::<atoll_protocols::Occ>(ProtocolKind::Occ, seeds, base),
        row_with::<atoll_protocols::Occ>(
            ProtocolKind::Occ,
            &PLANS,
            " (3 replicas)",
            &three_replicas,
            seeds,
            base,
        ),
        row_with::<atoll_protocols::Occ>(
            ProtocolKind::Occ,
            &PLANS,
            " (node 1 crashes)",
            &crash_with_three_replicas,
            seeds,
            base,
        ),
        row_with::<atoll_protocols::Occ>(
            ProtocolKind::Occ,
            &CRASH_PLANS,
            " (node 1 freezes)",
            &freeze_with_three_replicas,
            seeds,
            base,
        ),
        row::<atoll_protocols::NoWait>(ProtocolKind::NoWait, seeds, base),
        row::<atoll_protocols::WaitDie>(ProtocolKind::WaitDie, seeds, base),
        row::<atoll_protocols::Sundial>(ProtocolKind::Sundial, seeds, base),
        row::<Mvcc>(ProtocolKind::Mvcc, seeds, base),
        row_with::<Mvcc>(
            ProtocolKind::Mvcc,
            &CRASH_PLANS,
            " (node 1 crashes, busy)",
            &crash_with_three_replicas_busy,
            seeds,
            base,
        ),
        row::<atoll_protocols::Rsi>(ProtocolKind::Rsi, seeds, base),
        row_under::<atoll_protocols::Rsi>(ProtocolKind::Rsi, &RPC_ONLY, " (rpc)", seeds, base),
        row_under::<atoll_protocols::NamDb>(ProtocolKind::NamDb, &ONE_SIDED_ONLY, "", seeds, base),
        row::<Tell>(ProtocolKind::Tell, seeds, base),
        row_under::<atoll_protocols::Calvin>(ProtocolKind::Calvin, &RPC_ONLY, "", seeds, base),
        row_with::<atoll_protocols::Calvin>(
            ProtocolKind::Calvin,
            &RPC_ONLY,
            " (lane order)",
            &lane_order,
            seeds,
            base,
        ),
        row_with::<atoll_protocols::NamDb>(
            ProtocolKind::NamDb,
            &ONE_SIDED_ONLY,
            " (node slots, fetcher)",
            &node_slots_fetcher,
            seeds,
            base,
        ),
        row_with::<atoll_protocols::NamDb>(
            ProtocolKind::NamDb,
            &ONE_SIDED_ONLY,
            " (fetcher)",
            &fetcher,
            seeds,
            base,
        ),
    ];
    let mut table = format!(
        "broken variants, {seeds} seeds each (base seed {base}, ATOLL_SEED={base} replays; each seed runs every workload, one-sided and with RPC reads, under {FAULTS}):\n\
         {:<38} {:>8} {:>11} {:>8} {:>8}\n",
        "variant", "history", "invariants", "cycle", "caught"
    );
    let mut missed = Vec::new();
    for (name, [h, i, c, any], _) in &rows {
        table += &format!("{name:<38} {h:>8} {i:>11} {c:>8} {any:>5}/{seeds}\n");
        if (*any as f64) < CAUGHT_SHARE_MIN * seeds as f64 {
            missed.push(name.clone());
        }
    }
    let mut flagged = Vec::new();
    for (name, [h, i, c, any], first) in &controls {
        table += &format!(
            "{:<38} {h:>8} {i:>11} {c:>8} {any:>5}/{seeds}\n",
            format!("(control) {name}")
        );
        if *any != 0 {
            flagged.push(format!("{name}, first {}", first.as_deref().unwrap_or("?")));
        }
    }
    eprintln!("{table}");
    assert!(
        flagged.is_empty(),
        "correct protocols flagged: {flagged:?}\n{table}"
    );
    assert!(
        missed.is_empty(),
        "caught in fewer than {:.0}% of seeds: {missed:?}\n{table}",
        CAUGHT_SHARE_MIN * 100.0
    );
}

/// Defect 1 of issue 7 on real threads: the Cycle workload under MVCC (one-sided, 1 thread
/// and 4 co-routines per node, 2 nodes) for `ATOLL_INPROC_S` seconds (default 2): the fixed
/// write-back commits no inconsistent read; the old one is caught. Wall-clock and timing
/// dependent, so it runs on demand:
/// `cargo test --profile ci --workspace --test all -- --ignored broken::`.
#[test]
#[ignore]
fn mvcc_cycle_on_real_threads_fixed_is_clean_and_old_write_back_is_caught() {
    let secs: f64 = std::env::var("ATOLL_INPROC_S")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    let cfg = |seed| RunConfig {
        fabric: Fabric::InProc,
        workload: WorkloadKind::Cycle,
        params: Params::new(),
        protocol: ProtocolKind::Mvcc,
        plan: Plan::parse("one-sided").unwrap(),
        nodes: 2,
        threads: 1,
        coroutines: 4,
        duration_s: secs,
        warmup_s: 0.0,
        seed,
        record_history: true,
        ..RunConfig::default()
    };
    let verdict = |r: &Report| {
        let v = history::check(&r.history, Mode::Serializable);
        let failed: Vec<_> = r.checks.iter().filter(|c| !c.passed).collect();
        format!(
            "{} committed; history: {}; failed checks: {:?}",
            r.summary.committed,
            if v.ok() {
                "serializable".to_string()
            } else {
                format!(
                    "{} anomalies, cycle {}",
                    v.anomalies_total,
                    v.cycle.is_some()
                )
            },
            failed
                .iter()
                .map(|c| (&c.name, &c.detail))
                .collect::<Vec<_>>()
        )
    };
    let fixed = run_protocol::<Mvcc>(&cfg(1), &|_| {}).unwrap();
    eprintln!("mvcc, fixed write-back, {secs} s: {}", verdict(&fixed));
    let old = run_protocol::<MvccOldWriteBack>(&cfg(1), &|_| {}).unwrap();
    eprintln!("mvcc, old write-back, {secs} s: {}", verdict(&old));
    assert!(
        fixed.passed && history::check(&fixed.history, Mode::Serializable).ok(),
        "fixed MVCC flagged"
    );
    assert!(
        !old.passed || !history::check(&old.history, Mode::Serializable).ok(),
        "old write-back not caught in {secs} s"
    );
}

/// Seconds each in-process run of the in-place test lasts.
const IN_PLACE_RUN_S: f64 = 0.3;

#[test]
fn in_place_write_back_storing_after_the_unlock_is_caught_on_real_threads_and_every_protocol_is_clean(
) {
    // One node: every record is the coordinator's own, so lock, read, validation,
    // write-back and release all run in place (2 threads x 4 co-routines, hot records).
    in_place_and_direct_runs_catch_the_late_store(1, 2);
}

#[test]
fn direct_peer_write_back_storing_after_the_unlock_is_caught_on_real_threads_and_every_protocol_is_clean(
) {
    // Two in-process nodes with no injected latency: a coordinator's doorbells to the other
    // node run at once on the peer's words (`Transport::direct_memory`, no slot, no
    // completion), its own records in place; the same late store must be caught there.
    in_place_and_direct_runs_catch_the_late_store(2, 1);
}

fn in_place_and_direct_runs_catch_the_late_store(nodes: u16, threads: u16) {
    let cfg = |workload, protocol: ProtocolKind| RunConfig {
        fabric: Fabric::InProc,
        workload,
        params: knobs(workload)
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<Params>(),
        protocol,
        // A sequenced protocol's stages run over rpc so far.
        plan: Plan::parse(if protocol.sequenced() {
            "rpc"
        } else {
            "one-sided"
        })
        .unwrap(),
        nodes,
        threads,
        coroutines: 4,
        duration_s: IN_PLACE_RUN_S,
        warmup_s: 0.0,
        // One node has no other to log to.
        log_replicas: nodes - 1,
        seed: 1,
        record_history: true,
        ..RunConfig::default()
    };
    // Each protocol's history is checked at the level it guarantees.
    let caught = |r: &Report, p: ProtocolKind| {
        !r.passed || !history::check(&r.history, Mode::from(p.isolation())).ok()
    };
    let workloads = [WorkloadKind::SmallBank, WorkloadKind::Ycsb];
    let mut flagged = Vec::new();
    for w in workloads {
        for p in ProtocolKind::ALL {
            let r = atoll_runner::run(&cfg(w, p), &|_| {}).unwrap();
            assert!(
                r.summary.committed > 100,
                "{} / {} on {nodes} node(s): {:?}",
                w.name(),
                p.name(),
                r.summary
            );
            if nodes > 1 {
                // The direct path must have carried the other node's ops: remote ops counted,
                // as the posted path counts them.
                assert!(
                    r.verbs.remote_ops_per_txn > 0.0,
                    "{} / {}: no remote op on {nodes} nodes",
                    w.name(),
                    p.name()
                );
            }
            if caught(&r, p) {
                flagged.push(format!("{} / {}", w.name(), p.name()));
            }
        }
    }
    assert!(
        flagged.is_empty(),
        "correct protocols flagged on {nodes} in-process node(s): {flagged:?}"
    );
    let missed: Vec<_> = workloads
        .into_iter()
        .filter(|&w| {
            let r =
                run_protocol::<OccStoringAfterUnlock>(&cfg(w, ProtocolKind::Occ), &|_| {}).unwrap();
            !caught(&r, ProtocolKind::Occ)
        })
        .map(|w| w.name())
        .collect();
    assert!(
        missed.is_empty(),
        "a write-back storing after the unlock went unnoticed on {nodes} in-process node(s): {missed:?}"
    );
}

/// Seeds tried for a run whose checks fail, before the test gives up.
const FAILING_SEEDS_MAX: u64 = 40;
/// Measured seconds of the driver test's runs: several of the longest back-offs.
const DRIVER_DURATION_S: f64 = 0.02;

#[test]
fn driver_failed_verdicts_of_a_broken_variant_are_the_same_through_json_summaries() {
    // OCC without validation commits what it read stale: some workload's checks fail.
    // Through the JSON wire the same checks fail with the same details (3 nodes).
    let runs = (1..=FAILING_SEEDS_MAX).flat_map(|s| WorkloadKind::ALL.map(|w| (s, w)));
    for (seed, workload) in runs {
        // Long enough for stale commits to pile up past the retries' back-off (up to 1 ms).
        let cfg = RunConfig {
            duration_s: DRIVER_DURATION_S,
            ..config(workload, ProtocolKind::Occ, "one-sided", seed)
        };
        let memory =
            run_protocol_via::<OccWithoutValidation>(&cfg, SummaryWire::InMemory, &|_| {}).unwrap();
        if memory.passed {
            continue;
        }
        let json =
            run_protocol_via::<OccWithoutValidation>(&cfg, SummaryWire::Json, &|_| {}).unwrap();
        let verdicts = |r: &Report| {
            r.checks
                .iter()
                .map(|c| (c.name.clone(), c.passed, c.detail.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            verdicts(&memory),
            verdicts(&json),
            "{} seed {seed}",
            workload.name()
        );
        assert!(!json.passed);
        return;
    }
    panic!("no seed of {FAILING_SEEDS_MAX} made OCC without validation fail a check");
}
