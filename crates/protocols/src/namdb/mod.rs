//! NAM-DB: snapshot isolation over one-sided verbs with a timestamp vector ("The End of a
//! Myth: Distributed Transactions Can Scale", VLDB'17 §4; `specs/seed-mechanisms.md` §2.3),
//! on RSI's record blocks ([`crate::rsi`]).
//!
//! Each coordinator owns one slot of the vector ([`atoll_txn::tsvc::TsVector`], on the
//! timestamp node) and
//! counts its own commit timestamps there: a commit id is `⟨slot, ts⟩` ([`commit_id`]), and
//! a version committed at `⟨i, t⟩` is in snapshot `V` iff `t <= V[i]`. Pipeline:
//!
//! 1. **snapshot**: a copy of the vector, one READ (the previous commit's publishing WRITE
//!    rides ahead of it), read again until two copies agree: a READ of several words is
//!    not atomic, and a torn copy could see a transaction but not one it read from (one
//!    READ where the backend's READs are whole: the simulator without tearing), never
//!    patched (so all snapshots lie on one chain); with a slot per coordinator it shows
//!    the coordinator's own last commit, read again until it does;
//! 2. **read**: whole-block READs; the newest version the snapshot sees
//!    ([`rsi::visible`]), else `SnapshotTooOld`;
//! 3. **lock + validate**: per written record one CAS from the commit id read to locked,
//!    in one doorbell; no commit timestamp to fetch: it is the coordinator's last plus one,
//!    taken with no network operation (an abort does not consume it);
//! 4. **log** to backups (`--replicas 1` for the paper's protocol);
//! 5. **install**: as RSI's, payload sealed with the commit id, `LOCK` = the commit id last;
//! 6. **publish**: one WRITE of the timestamp into the coordinator's slot, only after every
//!    install completed, deferred to the coordinator's next doorbell (unsignaled).
//!
//! So an update transaction costs 3 signaled round trips (snapshot and reads, lock,
//! install) plus the second copy of the vector, and no CPU at the memory nodes.
//!
//! Options (the slides' "optimizations"):
//! - **compression** (`--vector-slots node`): one slot per compute node. Its coordinators
//!   take timestamps from the node's counter ([`atoll_txn::tsvc::NodeClock`]), and the slot
//!   is published up to the highest timestamp below which every one of the node's ended, by
//!   one publisher at a time with a signaled WRITE ([`publish_shared`]), so it never moves
//!   back. A coordinator no longer sees its own last commit before it is published;
//! - **detached fetcher** (`--vector-fetcher`): a task per compute node copies the vector
//!   back to back ([`Protocol::node_task`]); snapshots take its latest copy with no network
//!   operation (a snapshot may be older: still one instant of the vector).
//!
//! The global-counter baseline of the slides is RSI ([`crate::rsi`]: a FETCH_ADD per
//! commit, a READ of the read timestamp per snapshot). Old versions: headers apart from
//! their payloads (`OldVersions::HeadersApart`), and with `--overflow-versions` an overflow
//! area that the version mover ([`mover`]) fills and frees below the oldest live
//! snapshot: each compute node registers its coordinators' snapshots with its
//! [`atoll_txn::tsvc::NodeClock`] and publishes their minimum ([`publish_floor`], by its
//! background task every mover interval). Not built: requests to CPUs (every stage is
//! one-sided; RSI's plans cover the two-sided baselines).

pub mod cid;
pub mod config;
pub mod mover;

use crate::rsi::{self, RsiEntry};
use atoll_fabric::{Endpoint, OpError, Words};
use atoll_storage::layout::{LockWord, OldVersions, CID_LOCKED};
use atoll_txn::stages::{self};
use atoll_txn::tsvc::{NodeClock, SnapshotFloors, TsVector, VectorSlots};
use atoll_txn::{
    Abort, Deferred, Idxs, Isolation, NodeTask, Plan, PlanError, Primitive, Protocol, Stage,
    Timestamp, TxnConfig, TxnCore,
};
pub use cid::*;
pub use config::NamDbConfig;

/// The run's NAM-DB configuration (a copy: it is a few words).
fn namdb_config(cfg: &TxnConfig) -> NamDbConfig {
    *cfg.family_as::<NamDbConfig>()
}

pub struct NamDb;

impl Protocol for NamDb {
    const NAME: &'static str = "namdb";
    const TITLE: &'static str = "NAM-DB";
    const ISOLATION: Isolation = Isolation::Snapshot;
    const LOCK_WORD: LockWord = LockWord::CommitId;
    // Deletions as RSI's (`rsi::delete`), unlocked at the deletion's commit id.
    const DELETES: bool = true;
    // Records keep `--rsi-versions` versions, old headers apart from their payloads: one
    // READ of the head and the headers chooses the version, a second READ fetches an old
    // payload only when one is needed; with `--overflow-versions`, older ones in the
    // overflow area the version mover fills ([`mover`]).
    const MULTI_VERSION: bool = true;
    const OLD_VERSIONS: OldVersions = OldVersions::HeadersApart;
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
    ];
    const KNOBS: &'static [atoll_txn::KnobSpec] = &config::KNOBS;
    const ROLES: &'static [atoll_storage::RoleSpec] = &[atoll_txn::tsvc::TS_ROLE];
    // First committer wins, a record locked by a committer, or a version newer than the
    // snapshot.
    const CONFLICT_ABORTS: &'static [Abort] = &[
        Abort::ValidationFailed,
        Abort::LockBusy,
        Abort::Conflict,
        Abort::SnapshotTooOld,
    ];
    type EntryState = RsiEntry;

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        config::configure(knobs)
    }

    fn check_plan(plan: &Plan) -> Result<(), PlanError> {
        // TODO(#12): NAM-DB's stages as requests (its B+tree and catalog are two-sided).
        let rpc: Vec<&str> = Self::STAGES
            .iter()
            .filter(|&&s| s != Stage::Log && plan.get(s) == Primitive::Rpc)
            .map(|s| s.name())
            .collect();
        if rpc.is_empty() {
            Ok(())
        } else {
            Err(PlanError(format!(
                "namdb runs read, lock, commit and release over one-sided verbs only (rsi has \
                 the two-sided baselines); this plan puts rpc on {}",
                rpc.join(", ")
            )))
        }
    }

    async fn fetch(tx: &mut TxnCore<'_, RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
        let t0 = tx.now_ns();
        let r = read(tx, idxs).await;
        tx.charge(Stage::Read, t0);
        r
    }

    async fn commit(tx: &mut TxnCore<'_, RsiEntry>) -> Result<(), Abort> {
        let Some(w) = rsi::writes(tx) else {
            // Read-only: its snapshot is its place.
            return Ok(());
        };
        if !w.blind.is_empty() {
            Self::fetch(tx, &w.blind).await?;
        }

        let t0 = tx.now_ns();
        let locked = lock(tx, &w.ws).await;
        tx.charge(Stage::Lock, t0);
        if let Err(a) = locked {
            rsi::release(tx, &w.ws).await;
            return Err(a);
        }
        let nc = namdb_config(&tx.c.cfg);
        let (slot, ts) = match nc.vector_slots {
            VectorSlots::Coordinator => (tx.c.id, tx.c.last_commit_ts + 1),
            // The node's counter: from here on the timestamp must end (publish_shared), or
            // the node's slot would stop below it.
            VectorSlots::Node => (
                nc.vector_slot_of(&tx.c.cfg.shape(), tx.c.id),
                tx.c.node_clock.take_ts(),
            ),
        };
        assert!(ts <= TS_MAX, "namdb: slot {slot} ran out of timestamps");
        let cid = commit_id(slot, ts);
        let upd = w.updates();
        let written: Idxs = upd.iter().chain(w.ins.iter()).copied().collect();
        rsi::stamp(tx, &written, cid);
        // The history's commit is the timestamp within the slot.
        tx.commit_ts = Timestamp::from_word(ts);
        tx.commit_slot = Some(slot);

        let t0 = tx.now_ns();
        let logged = stages::log(tx, tx.c.plan().get(Stage::Log)).await;
        tx.charge(Stage::Log, t0);
        if let Err(a) = logged {
            rsi::release(tx, &w.ws).await;
            give_up(tx, slot, ts).await;
            return Err(a);
        }
        if !w.ins.is_empty() {
            let t0 = tx.now_ns();
            let placed = stages::apply_inserts_locked_by(tx, CID_LOCKED).await;
            tx.charge(Stage::Commit, t0);
            if let Err(a) = placed {
                rsi::release(tx, &w.ws).await;
                give_up(tx, slot, ts).await;
                return Err(a);
            }
        }

        let t0 = tx.now_ns();
        rsi::delete(tx, &w.del, cid).await;
        install(tx, &upd, cid).await;
        rsi::unlock_inserted(tx, &w.ins, cid).await;
        match nc.vector_slots {
            VectorSlots::Coordinator => publish(tx, slot, ts),
            VectorSlots::Node => publish_shared(tx, slot, ts).await,
        }
        tx.charge(Stage::Commit, t0);
        Ok(())
    }

    async fn rollback(_tx: &mut TxnCore<'_, RsiEntry>) {
        // Nothing is held during execution: records are locked only at commit.
    }

    fn node_task_wanted(cfg: &TxnConfig) -> bool {
        let nc = namdb_config(cfg);
        nc.vector_fetcher || nc.overflow_gc
    }

    fn memory_task_wanted(catalog: &atoll_storage::Catalog, node: atoll_fabric::NodeId) -> bool {
        catalog.topology().holds_records(node) && mover::wanted(catalog)
    }

    /// The version mover ([`mover`]).
    async fn memory_task(task: NodeTask) {
        mover::run(task).await
    }

    /// The detached fetcher: copies of the vector back to back, one READ outstanding, each
    /// kept for the node's snapshots; and with the garbage collector, the node's snapshot
    /// floor published every mover interval. Until the run is over.
    async fn node_task(task: NodeTask) {
        let Some(vector) = TsVector::of(&task.catalog) else {
            return;
        };
        let nc = namdb_config(&task.cfg);
        let floors = SnapshotFloors::of(&task.catalog, nc.vector_slots_total(&task.cfg.shape()))
            .filter(|_| nc.overflow_gc)
            .zip(task.catalog.topology().compute_index(task.ep.node()));
        let mut floor_due_ns = 0;
        // Bounded by the run's end.
        while !(task.over)(task.ep.now_ns()) {
            if let Some((floors, row)) = floors {
                if task.ep.now_ns() >= floor_due_ns {
                    // A failed WRITE leaves the row lower than it could be: GC only waits.
                    let _ = publish_floor(&task.ep, &task.clock, floors, row as u32).await;
                    floor_due_ns = task.ep.now_ns() + nc.mover_interval_ns;
                }
            }
            if !nc.vector_fetcher {
                task.ep.sleep(nc.mover_interval_ns).await;
                continue;
            }
            match copy_vector(&task.ep, vector, None).await {
                Ok(Some(v)) => task.clock.set_cached(v),
                // No two copies agreed: the last copy stays, and the next round tries again.
                Ok(None) => {}
                // A failed node: coordinators meet it too, and the run reports it there.
                Err(_) => task.ep.sleep(FETCH_RETRY_NS).await,
            }
            // The worker's co-routines run between copies (an own-node READ may complete
            // without waiting).
            task.ep.yield_now().await;
        }
    }
}

/// How long the fetcher waits after a failed READ of the vector before the next.
pub const FETCH_RETRY_NS: u64 = 100_000;

/// Publishes compute node row `row`'s snapshot floor: one signaled WRITE of the oldest
/// snapshot `clock` knows of (every live one and every one still to be taken is at least
/// it, slot by slot), into the node's row of `floors`. Rows only grow
/// ([`NodeClock::oldest_snapshot`]), and one task per node writes its row.
pub async fn publish_floor(
    ep: &Endpoint,
    clock: &NodeClock,
    floors: SnapshotFloors,
    row: u32,
) -> Result<(), OpError> {
    let oldest = clock.oldest_snapshot(floors.slots);
    let mut d = ep.doorbell_for(1);
    d.write(floors.row(row), Words::from_slice(&oldest));
    d.submit().await.map(|_| ())
}

/// A copy of `vector` at one instant: one READ where the backend's READs are whole (the
/// simulator without tearing), else copies until two consecutive ones agree (each slot only
/// grows, so it held its value over both), at most [`VECTOR_READS_MAX`] (then `None`).
/// `first` rides in the first doorbell, ahead of the READ.
pub async fn copy_vector(
    ep: &Endpoint,
    vector: TsVector,
    mut first: Option<Deferred>,
) -> Result<Option<Vec<u64>>, OpError> {
    let mut last: Vec<u64> = Vec::new();
    for _ in 0..VECTOR_READS_MAX {
        let mut d = ep.doorbell_for(2);
        if let Some(op) = first.take() {
            op.post(&mut d);
        }
        let j = d.read(vector.all(), vector.slots);
        let res = d.submit().await?;
        let copy = res.read(j);
        if ep.reads_whole() || copy == last.as_slice() {
            return Ok(Some(copy.to_vec()));
        }
        last.clear();
        last.extend_from_slice(copy);
    }
    Ok(None)
}

/// Takes the attempt's snapshot, once: the fetcher's copy, or copies of the vector until two
/// agree (the first carries the coordinator's deferred publishing WRITE ahead of it, same
/// node). Either is the vector at one instant, so every snapshot lies on one chain. (A
/// snapshot made of a copy with the coordinator's own slot raised to its last commit was
/// not: two coordinators each seeing their own last commit and not the other's forked, a
/// long fork adya rejects, found by seed 20 of the Cycle seeds with the fetcher.)
///
/// With a slot per coordinator, the snapshot also covers the coordinator's own last commit
/// (its client reads its own writes, and an update of its own last write would otherwise
/// abort at the lock): a fetched copy that predates it is not used, and a copy that still
/// does not show it (a backend that lets the READ pass the publishing WRITE) is read again
/// after a pause, at most [`rsi::SNAPSHOT_WAIT_ROUNDS_MAX`] times, then `SnapshotTooOld`.
pub async fn snapshot(tx: &mut TxnCore<'_, RsiEntry>) -> Result<(), Abort> {
    if !tx.snapshot_vector.is_empty() {
        return Ok(());
    }
    let nc = namdb_config(&tx.c.cfg);
    let own = (nc.vector_slots == VectorSlots::Coordinator).then_some((
        nc.vector_slot_of(&tx.c.cfg.shape(), tx.c.id) as usize,
        tx.c.last_commit_ts,
    ));
    let covers_own = |v: &[u64]| own.is_none_or(|(s, last)| v[s] >= last);
    // With the overflow area's collector, the node knows every live snapshot (registered
    // before the copy is made, so no floor published meanwhile is above it).
    let gc = nc.overflow_gc;
    let id = tx.c.id;
    if nc.vector_fetcher {
        let v = if gc {
            tx.c.node_clock.snapshot_from_cache(id, covers_own)
        } else {
            tx.c.node_clock.cached().filter(|v| covers_own(v))
        };
        if let Some(v) = v {
            // The fetcher's copy (the deferred WRITE, if any, rides with the reads).
            tx.snapshot_vector = v.as_ref().clone();
            return Ok(());
        }
    }
    if gc {
        tx.c.node_clock.snapshot_starts(id);
    }
    let vector = tx.c.ts_vector();
    for round in 0..rsi::SNAPSHOT_WAIT_ROUNDS_MAX {
        if round > 0 {
            tx.c.ep.sleep(rsi::SNAPSHOT_WAIT_NS).await;
        }
        let deferred = tx.c.take_deferred();
        let v = match copy_vector(&tx.c.ep, vector, deferred).await {
            Ok(Some(v)) => v,
            Ok(None) => return Err(Abort::SnapshotTooOld),
            Err(e) => return Err(tx.op_failed(e)),
        };
        if covers_own(&v) {
            if gc {
                // The fetcher's copy, when it runs, may be older: it stays the floor.
                let raises = !nc.vector_fetcher;
                tx.c.node_clock.snapshot_taken(id, &v, raises);
            }
            tx.snapshot_vector = v;
            return Ok(());
        }
    }
    Err(Abort::SnapshotTooOld)
}

/// NAM-DB ranks a block's versions by version number: its commit ids are not ordered
/// across slots. An old slot's version word is sealed by its commit id
/// ([`rsi::seal_version`]), so one read torn across a rewrite is refused, never ranked.
pub fn by_version(_cid: u64, version: u64) -> u64 {
    version
}

/// Reads entries `idxs` at the attempt's snapshot: one-sided locate, then READs of each
/// record's head and old headers (own-node records loaded in place) and, for those whose
/// snapshot needs an old version, a second READ of its payload; the coordinator's deferred
/// WRITE rides in the first doorbell.
pub async fn read(tx: &mut TxnCore<'_, RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
    snapshot(tx).await?;
    stages::locate(tx, idxs).await?;
    let v = std::mem::take(&mut tx.snapshot_vector);
    let r = read_seeing(tx, idxs, |cid| sees(&v, cid)).await;
    tx.snapshot_vector = v;
    r
}

/// Reads located entries `idxs` at the snapshot that sees the commit ids `seen` accepts.
pub async fn read_seeing(
    tx: &mut TxnCore<'_, RsiEntry>,
    idxs: &[usize],
    seen: impl Fn(u64) -> bool + Copy,
) -> Result<(), Abort> {
    let mut remote = Idxs::new();
    let mut pending = smallvec::SmallVec::<[rsi::Pending; 4]>::new();
    let mut tuple = Vec::new();
    for &i in idxs {
        let e = &tx.entries[i];
        if tx.c.ep.in_place_on(e.node) {
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            tuple.resize(tx.c.catalog.layout(e.table).headers_words() as usize, 0);
            tx.c.ep.load_in_place(ptr, &mut tuple);
            pending.extend(rsi::take_version(tx, i, &tuple, seen, by_version)?);
        } else {
            remote.push(i);
        }
    }
    let deferred = tx.c.take_deferred();
    if !remote.is_empty() || deferred.is_some() {
        let mut d = tx.c.ep.doorbell_for(remote.len() + 1);
        for &i in &remote {
            let e = &tx.entries[i];
            let words = tx.c.catalog.layout(e.table).headers_words();
            d.read(tx.c.catalog.record_ptr(e.table, e.node, e.slot()), words);
        }
        if let Some(op) = deferred {
            op.post(&mut d);
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        for (j, &i) in remote.iter().enumerate() {
            pending.extend(rsi::take_version(tx, i, res.read(j), seen, by_version)?);
        }
    }
    rsi::fetch_pending(tx, &pending, seen).await
}

/// The commit id an entry's read saw, which its lock CAS expects.
fn read_cid(e: &atoll_txn::Entry<RsiEntry>) -> u64 {
    e.state.cid
}

/// Locks entries `ws`: one CAS each from the commit id read to locked, in one doorbell
/// (behind the coordinator's deferred WRITE, if any).
pub async fn lock(tx: &mut TxnCore<'_, RsiEntry>, ws: &[usize]) -> Result<(), Abort> {
    let deferred = tx.c.take_deferred();
    let mut d = tx.c.ep.doorbell_for(ws.len() + 1);
    if let Some(op) = deferred {
        op.post(&mut d);
    }
    let cas_at = rsi::post_locks(tx, &mut d, ws, read_cid, false);
    let res = match d.submit().await {
        Ok(r) => r,
        Err(e) => {
            // As RSI's: which CAS took its lock is unknown, so the run stops for recovery.
            tx.failed_after_log.get_or_insert(e);
            return Err(tx.op_failed(e));
        }
    };
    match rsi::locks_taken(tx, &res, ws, &cas_at, read_cid, false) {
        None => Ok(()),
        Some(a) => Err(a),
    }
}

/// Installs the locked entries `ws` at commit id `cid` (as RSI's install, one doorbell).
pub async fn install(tx: &mut TxnCore<'_, RsiEntry>, ws: &[usize], cid: u64) {
    let c = &*tx.c;
    let mut d = c.ep.doorbell_for(ws.len() * 5);
    rsi::post_installs(tx, &mut d, ws, cid, false);
    let r = d.submit().await;
    // An op that failed here is after the log: recorded, and the driver stops the run.
    let _ = tx.unabortable(r);
    rsi::installed(tx, ws);
}

/// Publishes timestamp `ts` of slot `slot`: every install of it completed, so one WRITE of
/// the slot makes it visible to the snapshots that copy the vector after it lands. Deferred
/// to the coordinator's next doorbell (unsignaled); until then only this coordinator sees
/// it, through its own slot.
pub fn publish(tx: &mut TxnCore<'_, RsiEntry>, slot: u32, ts: u64) {
    tx.c.last_commit_ts = ts;
    let ptr = tx.c.ts_vector().slot(slot);
    tx.c.defer(Deferred::Write(ptr, ts));
}

/// A commit timestamp taken from the node's counter ends without a commit: the node's slot
/// may move past it (nothing carries it). A coordinator's own timestamp is simply not used.
async fn give_up(tx: &mut TxnCore<'_, RsiEntry>, slot: u32, ts: u64) {
    if namdb_config(&tx.c.cfg).vector_slots == VectorSlots::Node {
        publish_shared(tx, slot, ts).await;
    }
}

/// Ends timestamp `ts` of the node's shared slot `slot` (its installs completed, or it was
/// given up), and publishes the slot if this coordinator takes the turn: a signaled WRITE
/// of the highest timestamp below which all of the node's ended, again while more ended
/// meanwhile (up to [`atoll_txn::tsvc::PUBLISH_ROUNDS_MAX`] in a row), one publisher at a time so the
/// slot never moves back.
pub async fn publish_shared(tx: &mut TxnCore<'_, RsiEntry>, slot: u32, ts: u64) {
    let clock = tx.c.node_clock.clone();
    let ptr = tx.c.ts_vector().slot(slot);
    let mut next = clock.end_ts(ts);
    let mut rounds = 0;
    while let Some(v) = next {
        rounds += 1;
        let mut d = tx.c.ep.doorbell_for(1);
        d.write(ptr, Words::from_slice(&[v]));
        let r = d.submit().await;
        // A failed WRITE is after the installs: recorded, and the driver stops the run.
        let _ = tx.unabortable(r);
        next = clock.published(rounds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namdb_a_commit_id_names_its_slot_and_timestamp_and_is_never_a_tag() {
        let cid = commit_id(5, 77);
        assert_eq!(slot_ts(cid), Some((5, 77)));
        assert_eq!(
            slot_ts(cid | CID_LOCKED),
            Some((5, 77)),
            "the lock bit is ignored"
        );
        assert_eq!(slot_ts(0), None, "the loaded state");
        assert!(cid > atoll_txn::coord::make_tag(SLOTS_MAX - 1, (1 << 40) - 1));
        let v = [0, 0, 0, 0, 0, 76];
        assert!(!sees(&v, cid));
        assert!(sees(&[0, 0, 0, 0, 0, 77], cid));
        assert!(sees(&v, 0), "every snapshot sees the loaded state");
        assert!(!sees(&[0; 3], cid), "a slot beyond the vector is unseen");
    }
}
