//! `--protocol tell`: Tell's transactions (Tell §4.3) on Atoll's store. Pipeline:
//!
//! 1. **start** (stage `cm`, a request to the commit manager's node): a tid and a snapshot
//!    descriptor, at the attempt's first read (the previous attempt's end rides in the
//!    same doorbell);
//! 2. **read**: a `get` of each record, its whole slot (every version), by one-sided READs
//!    (slot, then `LOCK`; taken iff both agree) or by a request per storage node; the
//!    version read is the newest the descriptor sees, and an update's record that holds a
//!    version the descriptor does not see aborts at once (R1);
//! 3. **log**: the log entry (tid, processing node, the attempt's tag, the write set, the
//!    commit flag unset) at the start of the coordinator's log ring on each log backup;
//! 4. **apply**: inserts by a request per storage node (`put_if_absent`; a key whose newest
//!    version is a deletion gets a conditional put over it), then per updated record a
//!    conditional put of its new version set (R1 checked again, versions below `lav`
//!    collected): a CAS of `LOCK` and one doorbell of the words and the unlock, or a
//!    request per storage node; a put that fails aborts (R2), a set that does not fit its
//!    slot aborts (`slot_overflow`);
//! 5. **commit flag**: one word of the log entry set (stage `log`): the commit point a
//!    recovery goes by;
//! 6. **set_committed** at the commit manager, whose reply numbers the commit.
//!
//! An abort takes the attempt's versions out again, each by a get and a conditional put
//! (an insert's leaves a deletion by tid 0, visible to all), and only then tells the
//! commit manager, in the coordinator's next doorbell: an aborted tid counts as completed,
//! so its versions must be gone first. A read-only attempt never aborts on a version: it
//! ends with `set_committed` in the next doorbell likewise.
//!
//! The history names a snapshot by the commits recorded before it and a commit by its
//! number, both plus one (0 is the load): a snapshot sees a commit iff its number is at
//! most the snapshot's, which is exactly whether the commit manager had recorded it when it
//! handed the descriptor out.

use super::cm::Pn;
use super::config::{Buffering, TellConfig};
use super::descriptor::{Descriptor, Tid};
use super::msg::{InsertItem, Inserted, PutItem, TellReply, TellRequest};
use super::node::CM_ROLE;
use super::participant::GET_ATTEMPTS_MAX;
use super::record::{self, Record};
use super::recovery::{LogEntry, Rid, FLAG_WORD};
use super::versions::Version;
use atoll_fabric::{NodeId, RemotePtr, Words};
use atoll_storage::layout::{
    key_version, payload_intact, LockWord, CID_LOCKED, H_KEY, H_LOCK, INITIAL_VERSION,
    VERSION_ABSENT,
};
use atoll_storage::TableId;
use atoll_txn::coord::Deferred;
use atoll_txn::msg::Loc;
use atoll_txn::{
    Abort, Access, EntryState, Idxs, Isolation, Plan, PlanError, Primitive, Protocol, Stage,
    Timestamp, TxnCore,
};

pub struct Tell;

/// Tell's stage of its own: the requests to the commit manager (always to its CPU).
pub const CM: Stage = Stage::family(0, "cm");

/// Rounds of get and conditional put an abort's undo of one record takes at most: only
/// the attempt itself writes a record that holds its version (every other writer meets it
/// and aborts by R1), so the first round succeeds unless a put raced the read.
pub const UNDO_ROUNDS_MAX: u32 = 64;

/// Rounds a one-sided get reads a slot that puts hold back to back, before it pauses
/// [`GET_PAUSE_NS`] between rounds: 56 paused rounds wait out over 200 µs, the simulator's
/// node pauses.
pub const GET_SPIN_ROUNDS: u32 = 8;
pub const GET_PAUSE_NS: u64 = 4_000;

/// Rounds of conditional puts the apply phase takes at most: a put that failed is tried
/// again only if what was put since holds no version the snapshot does not see.
pub const PUT_ROUNDS_MAX: u32 = 4;

/// What Tell keeps per record: its slot as the attempt's get read it, and its put.
#[derive(Clone, Debug, Default)]
pub struct TellEntry {
    /// The slot's words (empty: not read).
    pub words: Vec<u64>,
    /// The slot's sequence number in `words`: what the put expects.
    pub seq: u64,
    /// The attempt's put of the record succeeded: the sequence number after it, which
    /// the undo expects (`words` then holds what it put).
    pub put_seq: Option<u64>,
}

impl EntryState for TellEntry {
    fn reset(&mut self) {
        let mut words = std::mem::take(&mut self.words);
        words.clear();
        *self = TellEntry {
            words,
            ..TellEntry::default()
        };
    }
}

/// The attempt's place at the commit manager (kept in the coordinator's `family_ctx`).
struct Attempt {
    /// The attempt it belongs to (a later attempt starts anew).
    tag: u64,
    tid: Tid,
    snapshot: Descriptor,
}

impl Protocol for Tell {
    const NAME: &'static str = "tell";
    const ISOLATION: Isolation = Isolation::Snapshot;
    // `[lock | seq]`: the LL/SC sequence number ([`super::record`]).
    const LOCK_WORD: LockWord = LockWord::CommitId;
    const DELETES: bool = true;
    const MULTI_VERSION: bool = true;
    const STAGES: &'static [Stage] = &[Stage::Read, Stage::Log, Stage::Commit];
    const FAMILY_STAGES: &'static [Stage] = &[CM];
    const CPU_STAGES: &'static [Stage] = &[CM];
    const KNOBS: &'static [atoll_txn::KnobSpec] = &[
        super::config::VERSIONS,
        super::config::COMMIT_MANAGERS,
        super::config::CM_SYNC_US,
        super::config::TID_BLOCK,
        super::config::CM_INFLIGHT_MAX,
        super::config::BUFFERING,
        super::config::BUFFER_PERCENT,
        super::config::SBVS_UNIT,
        super::config::INDEX,
        super::config::BTREE_FANOUT,
    ];
    const ROLES: &'static [atoll_storage::RoleSpec] = &[CM_ROLE];
    // R1 (an unseen version), R2 (a failed conditional put), a record held by puts.
    const CONFLICT_ABORTS: &'static [Abort] = &[Abort::Conflict, Abort::ValidationFailed];
    type EntryState = TellEntry;

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<std::sync::Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        super::config::configure(knobs)
    }

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // A storage node's request does what the verbs do, on the same words.
        Ok(())
    }

    // The management role ([`super::manager`]) finds a crashed processing node and
    // resolves its transactions from the log.
    const RECOVERS_COMPUTE_NODES: bool = true;

    fn recovery_refusal(plan: &Plan, log_replicas: u16) -> Option<String> {
        if log_replicas == 0 {
            return Some(
                "tell recovers a crashed processing node from its log: expected --replicas 2 or more"
                    .into(),
            );
        }
        if plan.get(Stage::Commit) != Primitive::Rpc {
            // A one-sided put locks the slot, then writes it: a crash between leaves a
            // slot held, part written, with nothing to restore it from.
            return Some(format!(
                "tell recovers a crashed processing node only from puts by request: plan {plan} puts by one-sided verbs (expected commit=rpc)"
            ));
        }
        None
    }

    fn memory_task_wanted(catalog: &atoll_storage::Catalog, node: NodeId) -> bool {
        node == NodeId(0) || super::participant::cm_index(catalog.topology(), node).is_some()
    }

    /// The management role ([`super::manager`]) on the first storage node, and a commit
    /// manager's syncs ([`super::sync`]) on its node.
    async fn memory_task(task: atoll_txn::NodeTask) {
        super::sync::with_syncs(task, super::manager::run).await
    }

    async fn fetch(tx: &mut TxnCore<'_, TellEntry>, idxs: &[usize]) -> Result<(), Abort> {
        start(tx).await?;
        let t0 = tx.now_ns();
        let r = read(tx, idxs).await;
        tx.charge(Stage::Read, t0);
        r
    }

    async fn commit(tx: &mut TxnCore<'_, TellEntry>) -> Result<(), Abort> {
        let ws = tx.select(|e| matches!(e.access, Access::Update | Access::Delete));
        let ins = tx.select(|e| e.access == Access::Insert);
        if ws.is_empty() && ins.is_empty() {
            if attempt(tx).is_some() {
                end(tx, true).await;
            }
            return Ok(());
        }
        start(tx).await?;
        let blind: Idxs = ws
            .iter()
            .copied()
            .filter(|&i| tx.entries[i].state.words.is_empty())
            .collect();
        if !blind.is_empty() {
            if let Err(a) = Self::fetch(tx, &blind).await {
                end(tx, false).await;
                return Err(a);
            }
        }
        let t0 = tx.now_ns();
        let logged = log_entry(tx, &ws, &ins).await;
        tx.charge(Stage::Log, t0);
        if let Err(a) = logged {
            end(tx, false).await;
            return Err(a);
        }
        let t0 = tx.now_ns();
        let mut applied = apply(tx, &ws, &ins).await;
        if applied.is_ok() {
            // The index step: the inserted keys into their trees (B+tree index only).
            applied = super::index::add_keys(tx, &ins).await;
        }
        tx.charge(Stage::Commit, t0);
        if let Err(a) = applied {
            undo(tx).await;
            // An op that failed stops the run; the recovery bumps what it undoes.
            if bump_units(tx, &ws, &ins).await.is_ok() {
                end(tx, false).await;
            }
            return Err(a);
        }
        let t0 = tx.now_ns();
        let bumped = bump_units(tx, &ws, &ins).await;
        tx.charge(Stage::Commit, t0);
        bumped?;
        let t0 = tx.now_ns();
        let flagged = flag(tx).await;
        tx.charge(Stage::Log, t0);
        flagged?;
        let t0 = tx.now_ns();
        let r = committed(tx).await;
        tx.charge(CM, t0);
        r
    }

    // A scan reports what the snapshot sees: slots hold versions of writers in flight.
    const SCANS_SNAPSHOT: bool = true;

    async fn scan_visible(
        tx: &mut TxnCore<'_, TellEntry>,
        t: TableId,
        node: NodeId,
        keys: &[(u64, u32, u64)],
    ) -> Result<Vec<Option<u64>>, Abort> {
        start(tx).await?;
        let t0 = tx.now_ns();
        let r = scan_visible(tx, t, node, keys).await;
        tx.charge(Stage::Read, t0);
        r
    }

    async fn rollback(tx: &mut TxnCore<'_, TellEntry>) {
        // Nothing was put during execution: only the commit manager is told.
        if attempt(tx).is_some() {
            end(tx, false).await;
        }
    }
}

/// The attempt's start at the commit manager, if it has one.
fn attempt<'a>(tx: &'a TxnCore<'_, TellEntry>) -> Option<&'a Attempt> {
    tx.c.family_ctx
        .as_ref()
        .and_then(|b| b.downcast_ref::<Attempt>())
        .filter(|a| a.tag == tx.tag)
}

/// The attempt's snapshot descriptor, once started, to change in place: for tests that
/// build a deliberately broken commit manager's snapshot (the checks must catch it).
pub fn snapshot_mut<'a>(tx: &'a mut TxnCore<'_, TellEntry>) -> Option<&'a mut Descriptor> {
    let tag = tx.tag;
    tx.c.family_ctx
        .as_mut()
        .and_then(|b| b.downcast_mut::<Attempt>())
        .filter(|a| a.tag == tag)
        .map(|a| &mut a.snapshot)
}

/// Starts a transaction's attempt asks for at most while its manager has no tids.
const START_ROUNDS_MAX: u32 = 100;

/// The node of the commit manager this processing node starts its transactions at.
fn cm_node(tx: &TxnCore<'_, TellEntry>) -> NodeId {
    super::node::cm_of(tx.c.catalog.topology(), pn_of(tx))
}

/// Starts the attempt at the commit manager, once: its tid and snapshot descriptor. The
/// coordinator's deferred end of its previous attempt goes first in the same doorbell.
pub async fn start(tx: &mut TxnCore<'_, TellEntry>) -> Result<(), Abort> {
    if attempt(tx).is_some() {
        return Ok(());
    }
    let t0 = tx.now_ns();
    let cm = cm_node(tx);
    let pn = pn_of(tx);
    let req = TellRequest::Start {
        pn,
        read_only: false,
    }
    .to_bytes();
    let mut reply = TellReply::NoTids;
    for round in 0..START_ROUNDS_MAX {
        if round > 0 {
            // Its manager retired a block behind another's: its next comes from the
            // store's counter within a check of its sync task.
            tx.c.ep.sleep(super::sync::BLOCK_CHECK_NS).await;
        }
        let deferred = tx.c.take_deferred();
        let mut d = tx.c.ep.doorbell_for(2);
        if let Some(op) = deferred {
            op.post(&mut d);
        }
        let j = d.rpc(cm, req.clone());
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        reply = TellReply::of(res.rpc(j));
        if reply != TellReply::NoTids {
            break;
        }
    }
    let r = match reply {
        TellReply::Started {
            tid,
            snapshot,
            seen,
        } => {
            // The history's snapshot: the commits it sees (one manager), or per manager
            // (several), each a commit's number plus one as its timestamp is.
            if let [commits] = seen[..] {
                tx.snapshot_ts = Timestamp::from_word(commits + 1);
            } else {
                tx.snapshot_vector = seen.iter().map(|n| n + 1).collect();
            }
            if buffered(tx) {
                tell_node(tx).started(&snapshot);
            }
            tx.c.family_ctx = Some(Box::new(Attempt {
                tag: tx.tag,
                tid,
                snapshot,
            }));
            Ok(())
        }
        // Too many tids open at the commit manager, or no tids through every round: this
        // attempt gives way (retried).
        TellReply::InFlight { .. } | TellReply::NoTids => Err(Abort::Conflict),
        // This node was declared crashed (it was not: a recovery fenced a live node).
        TellReply::Fenced => panic!("tell: the commit manager fenced live node {}", pn.0),
        other => panic!("tell: the commit manager answered a start with {other:?}"),
    };
    tx.charge(CM, t0);
    r
}

/// Tells the commit manager the attempt ended (`committed` false: aborted, its versions
/// gone; a read-only attempt ends committed). A read-only end goes in the coordinator's
/// next doorbell (no round trip of its own: its next attempt starts at once); an abort's
/// goes now, as the transaction may back off before it retries, and its tid, while
/// active, holds every snapshot's base and `lav` back (so garbage collection).
async fn end(tx: &mut TxnCore<'_, TellEntry>, committed: bool) {
    let Some(a) = attempt(tx) else {
        return;
    };
    let req = if committed {
        TellRequest::SetCommitted { tid: a.tid }
    } else {
        TellRequest::SetAborted { tid: a.tid }
    };
    let cm = cm_node(tx);
    tx.c.family_ctx = None;
    let prev = tx.c.take_deferred();
    if committed && prev.is_none() {
        tx.c.defer(Deferred::Rpc(cm, req.to_bytes()));
        return;
    }
    let mut d = tx.c.ep.doorbell_for(2);
    if let Some(op) = prev {
        op.post(&mut d);
    }
    d.rpc(cm, req.to_bytes());
    // A failed op here leaves the tid active at the commit manager: it holds the base
    // until recovery ends it (the run reports the failed node).
    let _ = tx.unabortable(d.submit().await);
}

/// Where the attempt's log entry goes on log backup `b`: `(node, word offset of the
/// coordinator's ring there)`. A coordinator runs one attempt at a time, and the entry of
/// its previous one belongs to a tid that already ended, so its entry always takes the
/// start of its ring: the log keeps exactly the entries a recovery needs.
fn log_place(tx: &TxnCore<'_, TellEntry>, b: u16) -> (NodeId, u32) {
    let (backup, slot) = tx.c.catalog.topology().log_backup(tx.c.node(), b);
    (backup, tx.c.cfg.log_ring_offset(tx.c.id, slot))
}

/// Writes `words` at word `offset` of each log place, by the log stage's primitive.
async fn write_log(
    tx: &mut TxnCore<'_, TellEntry>,
    offset: u32,
    words: &[u64],
) -> Result<(), Abort> {
    let replicas = tx.c.cfg.log_replicas;
    let region =
        tx.c.catalog
            .extra_region(atoll_txn::coord::LOG_EXTRA_REGION);
    let one_sided = !rpc(tx, Stage::Log);
    let mut d = tx.c.ep.doorbell_for(replicas as usize);
    for b in 0..replicas {
        let (node, base) = log_place(tx, b);
        if one_sided {
            d.write(
                RemotePtr::new(node, region, base + offset),
                Words::from_slice(words),
            );
        } else {
            d.rpc(
                node,
                atoll_txn::msg::Request::log_bytes(base + offset, words),
            );
        }
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    if !one_sided {
        for j in 0..replicas as usize {
            let r = atoll_txn::msg::Reply::decode(res.rpc(j));
            assert!(
                matches!(r, Ok(atoll_txn::msg::Reply::Ok)),
                "tell: a log write answered {r:?}"
            );
        }
    }
    Ok(())
}

/// The log entry (Tell §4.4), before any insert or put: tid, processing node, the
/// attempt's tag and its write set, the commit flag unset. A recovery of this node takes
/// out the versions of an entry whose flag is unset. Without log backups
/// (`--replicas 1`) there is no log, and no recovery.
async fn log_entry(
    tx: &mut TxnCore<'_, TellEntry>,
    ws: &[usize],
    ins: &[usize],
) -> Result<(), Abort> {
    if tx.c.cfg.log_replicas == 0 {
        tx.logged = true;
        return Ok(());
    }
    let a = attempt(tx).expect("a commit starts the attempt first");
    let entry = LogEntry {
        tid: a.tid,
        pn: pn_of(tx),
        tag: tx.tag,
        write_set: ws
            .iter()
            .chain(ins)
            .map(|&i| {
                let e = &tx.entries[i];
                Rid {
                    table: e.table,
                    node: e.node,
                    key: e.key,
                }
            })
            .collect(),
        committed: false,
    };
    let words = entry.to_words();
    // The ring is sized for the workload's largest write set with its payloads.
    assert!(
        words.len() as u32 <= tx.c.cfg.log_ring_words,
        "tell: a {}-word log entry does not fit a {}-word log ring (the workload wrote more than its largest write set declares)",
        words.len(),
        tx.c.cfg.log_ring_words
    );
    write_log(tx, 0, &words).await?;
    tx.logged = true;
    Ok(())
}

/// Sets the commit flag of the attempt's log entry: every put is done, so the transaction
/// committed even if this node crashes before the commit manager hears of it.
async fn flag(tx: &mut TxnCore<'_, TellEntry>) -> Result<(), Abort> {
    if tx.c.cfg.log_replicas == 0 {
        return Ok(());
    }
    write_log(tx, FLAG_WORD, &[1]).await
}

/// This coordinator's processing node, as the commit manager knows it.
fn pn_of(tx: &TxnCore<'_, TellEntry>) -> Pn {
    Pn(tx
        .c
        .catalog
        .topology()
        .compute_index(tx.c.node())
        .unwrap_or(0))
}

/// Whether stage `s` goes as requests to the storage nodes' CPUs.
fn rpc(tx: &TxnCore<'_, TellEntry>, s: Stage) -> bool {
    tx.c.plan().get(s) == Primitive::Rpc
}

/// Whether reads go through the processing node's shared buffer (`--buffering sb|sbvs`).
fn buffered(tx: &TxnCore<'_, TellEntry>) -> bool {
    tx.c.cfg.family_as::<TellConfig>().buffering.shared()
}

/// SBVS: the cache-unit stamps of entries `idxs` on their storage nodes (`None`: not SBVS).
fn units(tx: &TxnCore<'_, TellEntry>, idxs: &[usize]) -> Option<Vec<(NodeId, u32)>> {
    let cfg = tx.c.cfg.family_as::<TellConfig>();
    (cfg.buffering == Buffering::Versioned).then(|| {
        idxs.iter()
            .map(|&i| {
                let e = &tx.entries[i];
                (
                    e.node,
                    super::sbvs::stamp_word(e.table, e.key, cfg.sbvs_unit),
                )
            })
            .collect()
    })
}

/// This node's Tell state.
pub(super) fn tell_node(tx: &TxnCore<'_, TellEntry>) -> std::sync::Arc<super::node::TellNode> {
    tx.c.family_nodes.get(super::msg::FAMILY)
}

/// Gets the slots of entries `idxs` and takes the version each attempt reads.
async fn read(tx: &mut TxnCore<'_, TellEntry>, idxs: &[usize]) -> Result<(), Abort> {
    if buffered(tx) {
        return read_buffered(tx, idxs).await;
    }
    if !rpc(tx, Stage::Read) {
        super::index::locate(tx, idxs).await?;
    }
    let slots = get(tx, idxs).await?;
    for (i, loc, words) in slots {
        take(tx, i, loc, words)?;
    }
    Ok(())
}

/// [`read`] through the processing node's shared buffer (Tell §5.5, SB): an entry whose
/// version set covers the attempt's snapshot is taken as it is; the rest are fetched, the
/// snapshot of the node's newest transaction taken first (every tid it sees had completed
/// before the fetch, so the fetched record holds each one's version), and buffered valid for
/// it. A buffered record older than the store is still right for a snapshot its set
/// covers; an update of it then fails its conditional put (R2), as Tell's does. SBVS reads
/// the misses' unit stamps between taking that snapshot and fetching ([`revalidated`]).
async fn read_buffered(tx: &mut TxnCore<'_, TellEntry>, idxs: &[usize]) -> Result<(), Abort> {
    let node = tell_node(tx);
    let mut hits = Vec::new();
    let mut misses = Idxs::new();
    {
        let snap = &attempt(tx)
            .expect("a read starts the attempt first")
            .snapshot;
        let mut g = node.buffer(|| buffer_capacity(tx));
        let buf = g.as_mut().expect("made by buffer()");
        for &i in idxs {
            let e = &tx.entries[i];
            match buf.get((e.table, e.node, e.key), snap) {
                Some((loc, words)) => hits.push((i, *loc, words.clone())),
                None => misses.push(i),
            }
        }
    }
    tx.c.versions.add(
        atoll_txn::versions::VersionEvent::BufferHit,
        hits.len() as u64,
    );
    for (i, loc, words) in hits {
        take(tx, i, loc, words)?;
    }
    if misses.is_empty() {
        return Ok(());
    }
    let valid = node.newest();
    // SBVS: each miss's unit stamp, by entry, read after `valid` was taken.
    let mut stamps: Option<Vec<(usize, u64)>> = None;
    if let (Some(valid), Some(at)) = (&valid, units(tx, &misses)) {
        let read = super::sbvs::stamps(tx, Stage::Read, false, &at).await?;
        let left = revalidated(tx, &misses, &read, valid)?;
        misses = left.iter().map(|&(i, _)| i).collect();
        stamps = Some(left);
        if misses.is_empty() {
            return Ok(());
        }
    }
    tx.c.versions.add(
        atoll_txn::versions::VersionEvent::BufferMiss,
        misses.len() as u64,
    );
    if !rpc(tx, Stage::Read) {
        super::index::locate(tx, &misses).await?;
    }
    let slots = get(tx, &misses).await?;
    if let Some(valid) = valid {
        let mut g = node.buffer(|| buffer_capacity(tx));
        let buf = g.as_mut().expect("made by buffer()");
        for (i, loc, words) in &slots {
            let e = &tx.entries[*i];
            let (key, rec) = ((e.table, e.node, e.key), (*loc, words.clone()));
            match stamps.as_ref().and_then(|st| st.iter().find(|s| s.0 == *i)) {
                Some(&(_, stamp)) => buf.fill_stamped(key, rec, valid.clone(), stamp),
                None => buf.fill(key, rec, valid.clone()),
            }
        }
    }
    for (i, loc, words) in slots {
        take(tx, i, loc, words)?;
    }
    Ok(())
}

/// SBVS: takes each miss of `misses` whose entry was filled under the stamp its unit has
/// now (`stamps`, read after `valid`), which makes the entry valid for `valid`; the misses
/// left, each with its stamp, to fetch.
fn revalidated(
    tx: &mut TxnCore<'_, TellEntry>,
    misses: &[usize],
    stamps: &[u64],
    valid: &Descriptor,
) -> Result<Vec<(usize, u64)>, Abort> {
    let node = tell_node(tx);
    let mut found = Vec::new();
    let mut left = Vec::new();
    {
        let mut g = node.buffer(|| buffer_capacity(tx));
        let buf = g.as_mut().expect("made by buffer()");
        for (&i, &stamp) in misses.iter().zip(stamps) {
            let e = &tx.entries[i];
            match buf.revalidate((e.table, e.node, e.key), stamp, valid) {
                Some((loc, words)) => found.push((i, *loc, words.clone())),
                None => left.push((i, stamp)),
            }
        }
    }
    tx.c.versions.add(
        atoll_txn::versions::VersionEvent::BufferRevalidated,
        found.len() as u64,
    );
    for (i, loc, words) in found {
        take(tx, i, loc, words)?;
    }
    Ok(left)
}

/// Records a processing node's buffer holds: `--buffer-percent` of every table's slots.
fn buffer_capacity(tx: &TxnCore<'_, TellEntry>) -> usize {
    let catalog = &tx.c.catalog;
    let slots: u64 = (0..catalog.table_count())
        .map(|t| catalog.layout(TableId(t as u16)).capacity as u64)
        .sum::<u64>()
        * catalog.topology().memory_nodes() as u64;
    let percent = tx.c.cfg.family_as::<TellConfig>().buffer_percent;
    (slots * percent / 100) as usize
}

/// Gets the slots of entries `idxs` (located, for one-sided gets) by the read stage's
/// primitive: `(entry, slot, words)`.
async fn get(
    tx: &mut TxnCore<'_, TellEntry>,
    idxs: &[usize],
) -> Result<Vec<(usize, u32, Vec<u64>)>, Abort> {
    if rpc(tx, Stage::Read) {
        get_by_rpc(tx, idxs).await
    } else {
        get_one_sided(tx, idxs).await
    }
}

/// One-sided gets: per record a READ of the slot and a READ of its `LOCK`, every record's
/// in one doorbell; a record whose two `LOCK`s differ or show a put is read again, up to
/// [`GET_ATTEMPTS_MAX`] rounds, then the attempt aborts `Conflict`.
async fn get_one_sided(
    tx: &mut TxnCore<'_, TellEntry>,
    idxs: &[usize],
) -> Result<Vec<(usize, u32, Vec<u64>)>, Abort> {
    let slots: Vec<(RemotePtr, u32)> = idxs
        .iter()
        .map(|&i| {
            let e = &tx.entries[i];
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            (ptr, tx.c.catalog.layout(e.table).record_words)
        })
        .collect();
    let got = get_slots(tx, &slots).await?;
    Ok(idxs
        .iter()
        .zip(got)
        .map(|(&i, w)| (i, tx.entries[i].slot(), w))
        .collect())
}

/// The words of each slot `(where, words)`, by one-sided gets in one doorbell a round.
async fn get_slots<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    slots: &[(RemotePtr, u32)],
) -> Result<Vec<Vec<u64>>, Abort> {
    let mut out = vec![Vec::new(); slots.len()];
    let mut todo: Vec<usize> = (0..slots.len()).collect();
    for round in 0..GET_ATTEMPTS_MAX {
        if round >= GET_SPIN_ROUNDS {
            // A put held it through a few round trips: its WRITE is stalled, or its node
            // paused mid-put. Pause between reads rather than give up in microseconds (a
            // read-only transaction would abort).
            tx.c.ep.sleep(GET_PAUSE_NS).await;
        }
        let mut d = tx.c.ep.doorbell_for(2 * todo.len());
        let ops: Vec<(usize, usize)> = todo
            .iter()
            .map(|&k| {
                let (ptr, words) = slots[k];
                (d.read(ptr, words), d.read(ptr.add(H_LOCK), 1))
            })
            .collect();
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        let mut again = Vec::new();
        for (&k, &(whole, lock)) in todo.iter().zip(&ops) {
            let w = res.read(whole);
            let before = w[H_LOCK as usize];
            if before & CID_LOCKED == 0 && res.read(lock)[0] == before {
                out[k] = w.to_vec();
            } else {
                again.push(k);
            }
        }
        if again.is_empty() {
            return Ok(out);
        }
        todo = again;
    }
    Err(Abort::Conflict)
}

/// Gets by a request per storage node, which finds each record by its key.
async fn get_by_rpc(
    tx: &mut TxnCore<'_, TellEntry>,
    idxs: &[usize],
) -> Result<Vec<(usize, u32, Vec<u64>)>, Abort> {
    let mut d = tx.c.ep.doorbell_for(idxs.len());
    let mut asked = Vec::new();
    for n in atoll_txn::stages::nodes_of(tx, idxs) {
        let on = atoll_txn::stages::on_node(tx, idxs, n);
        let items = on
            .iter()
            .map(|&i| (tx.entries[i].table, tx.entries[i].key))
            .collect();
        asked.push((d.rpc(n, TellRequest::Get { items }.to_bytes()), on));
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let mut out = Vec::with_capacity(idxs.len());
    for (j, on) in asked {
        match TellReply::of(res.rpc(j)) {
            TellReply::Records(records) => {
                assert_eq!(
                    records.len(),
                    on.len(),
                    "tell: {} records for {} keys",
                    records.len(),
                    on.len()
                );
                for (&i, r) in on.iter().zip(records) {
                    let Some((loc, words)) = r else {
                        return Err(Abort::NotFound);
                    };
                    tx.entries[i].loc = Some(Loc(loc));
                    out.push((i, loc, words));
                }
            }
            // A put held a record through every read there.
            TellReply::Busy => return Err(Abort::Conflict),
            other => panic!("tell: a get answered {other:?}"),
        }
    }
    Ok(out)
}

/// The record in slot words `w` of entry `i`'s table; a slot of another key is `NotFound`
/// (its cached location forgotten).
fn decode(tx: &mut TxnCore<'_, TellEntry>, i: usize, w: &[u64]) -> Result<Record, Abort> {
    let e = &tx.entries[i];
    if w[H_KEY as usize] != e.key {
        let (t, n, k) = (e.table, e.node, e.key);
        tx.c.forget_loc(t, n, k);
        tx.entries[i].loc = None;
        return Err(Abort::NotFound);
    }
    let layout = tx.c.catalog.layout(e.table);
    // A get takes a slot only between two equal unlocked `LOCK`s, so its words are one
    // put's; a slot that still does not decode was read torn (a fault): read again.
    record::decode(layout, w).map_err(|_| Abort::Conflict)
}

/// Takes the slot `w` got for entry `i`: the version the attempt reads (its own, else the
/// newest its snapshot sees), and for an update R1.
fn take(tx: &mut TxnCore<'_, TellEntry>, i: usize, loc: u32, w: Vec<u64>) -> Result<(), Abort> {
    let rec = decode(tx, i, &w)?;
    let a = attempt(tx).expect("a read starts the attempt first");
    let (tid, snap) = (a.tid, &a.snapshot);
    if tx.entries[i].is_write() && rec.versions.unseen_writer(snap, tid).is_some() {
        // R1: a version written since the snapshot, or still in flight.
        return Err(Abort::Conflict);
    }
    let seen = rec.versions.read(snap, tid).cloned();
    let e = &mut tx.entries[i];
    e.loc = Some(Loc(loc));
    e.state.seq = rec.seq;
    e.state.words = w;
    let Some(Version {
        word,
        payload: Some(payload),
        ..
    }) = seen
    else {
        // Deleted, or inserted after the snapshot.
        return Err(Abort::NotFound);
    };
    if !payload_intact(e.table, e.key, &payload) {
        // Torn as above.
        return Err(Abort::Conflict);
    }
    e.version = word;
    e.fill(word, &payload);
    Ok(())
}

/// [`Protocol::scan_visible`]: each record's slot by a get (one-sided by the slot the scan
/// found, or a request by key), and the version of it the snapshot sees.
async fn scan_visible(
    tx: &mut TxnCore<'_, TellEntry>,
    t: TableId,
    node: NodeId,
    keys: &[(u64, u32, u64)],
) -> Result<Vec<Option<u64>>, Abort> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let words: Vec<Option<Vec<u64>>> = if rpc(tx, Stage::Read) {
        let items = keys.iter().map(|k| (t, k.0)).collect();
        let mut d = tx.c.ep.doorbell_for(1);
        let j = d.rpc(node, TellRequest::Get { items }.to_bytes());
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        match TellReply::of(res.rpc(j)) {
            TellReply::Records(rs) => rs.into_iter().map(|r| r.map(|(_, w)| w)).collect(),
            TellReply::Busy => return Err(Abort::Conflict),
            other => panic!("tell: a get answered {other:?}"),
        }
    } else {
        let len = tx.c.catalog.layout(t).record_words;
        let slots: Vec<(RemotePtr, u32)> = keys
            .iter()
            .map(|k| (tx.c.catalog.record_ptr(t, node, k.1), len))
            .collect();
        get_slots(tx, &slots).await?.into_iter().map(Some).collect()
    };
    let a = attempt(tx).expect("a scan starts the attempt first");
    let layout = tx.c.catalog.layout(t);
    let mut out = Vec::with_capacity(keys.len());
    for (k, w) in keys.iter().zip(words) {
        let Some(w) = w.filter(|w| w[H_KEY as usize] == k.0) else {
            // No record of the key there now: none a snapshot sees.
            out.push(None);
            continue;
        };
        let rec = record::decode(layout, &w).map_err(|_| Abort::Conflict)?;
        let v = rec
            .versions
            .versions()
            .iter()
            .find(|v| v.tid == a.tid || a.snapshot.sees(v.tid));
        // An insert taken back leaves its key absent below its first version: it never
        // existed for any snapshot.
        out.push(
            v.map(|v| v.word)
                .filter(|&w| key_version(w) >= INITIAL_VERSION),
        );
    }
    Ok(out)
}

/// The version word after `head`'s: live, or (`delete`) a deletion.
fn next_word(head: u64, delete: bool) -> u64 {
    let w = (head & !VERSION_ABSENT) + 1;
    if delete {
        w | VERSION_ABSENT
    } else {
        w
    }
}

/// The slot words of entry `i` with the attempt's version added to those it read (R1
/// checked again, versions no snapshot reads dropped); `SlotOverflow` if they do not fit.
fn new_slot(tx: &TxnCore<'_, TellEntry>, i: usize) -> Result<(Vec<u64>, u64), Abort> {
    let a = attempt(tx).expect("a commit starts the attempt first");
    let e = &tx.entries[i];
    let layout = tx.c.catalog.layout(e.table);
    let mut rec = record::decode(layout, &e.state.words).expect("decoded when read");
    if rec.versions.unseen_writer(&a.snapshot, a.tid).is_some() {
        return Err(Abort::Conflict);
    }
    rec.versions.collect(a.snapshot.lav);
    let head = rec.versions.versions()[0].word;
    let delete = e.access == Access::Delete;
    let word = next_word(head, delete);
    let payload = (!delete).then(|| e.data.clone());
    rec.versions.write(a.tid, word, payload);
    match record::encode(layout, &e.state.words, &rec.versions) {
        Ok(w) => Ok((w, word)),
        Err(record::RecordError::Full { .. }) => Err(Abort::SlotOverflow),
        Err(err) => panic!("tell: {:?} key {}: {err:?}", e.table, e.key),
    }
}

/// The apply phase: inserts, then a conditional put of every written record.
async fn apply(tx: &mut TxnCore<'_, TellEntry>, ws: &[usize], ins: &[usize]) -> Result<(), Abort> {
    let mut puts: Idxs = ws.iter().copied().collect();
    if !ins.is_empty() {
        puts.extend(insert(tx, ins).await?);
    }
    for _ in 0..PUT_ROUNDS_MAX {
        let mut items = Vec::with_capacity(puts.len());
        for &i in &puts {
            let (words, word) = new_slot(tx, i)?;
            items.push((i, words, word));
        }
        // SB's write-through is valid for the node's newest snapshot taken before the put
        // (each of its tids had put before it was handed out, so a put it made after the
        // attempt's read would have failed this one) and the attempt's own tid.
        let through = buffered(tx).then(|| (tell_node(tx).newest(), attempt(tx).map(|a| a.tid)));
        let done = if rpc(tx, Stage::Commit) {
            put_by_rpc(tx, &items).await?
        } else {
            put_one_sided(tx, &items).await?
        };
        let mut failed = Idxs::new();
        for ((i, words, word), ok) in items.into_iter().zip(done) {
            if !ok {
                failed.push(i);
                continue;
            }
            let e = &mut tx.entries[i];
            e.state.put_seq = Some(e.state.seq + 1);
            e.state.words = words;
            e.installed = Some(word & !VERSION_ABSENT);
            if let Some((Some(valid), Some(tid))) = &through {
                write_through(tx, i, valid.with(*tid));
            }
        }
        if failed.is_empty() {
            return Ok(());
        }
        // A put since the read. R2 makes it a conflict, unless it added no version this
        // snapshot does not see (an aborted writer's undo, which takes its version out
        // again): then every version there was there when the attempt read, and the
        // next round's `new_slot` puts over them, or aborts by R1.
        reread(tx, &failed).await?;
        puts = failed;
    }
    Err(Abort::ValidationFailed)
}

/// SBVS: bumps the cache-unit stamps of the written records `ws` and inserted `ins`, after
/// their puts (or their undo) and before the commit flag and the commit manager hear: a
/// tid a snapshot sees has bumped every unit it changed. Nothing to do under TB and SB.
async fn bump_units(
    tx: &mut TxnCore<'_, TellEntry>,
    ws: &[usize],
    ins: &[usize],
) -> Result<(), Abort> {
    if tx.c.cfg.family_as::<TellConfig>().buffering != Buffering::Versioned {
        // TB and SB keep no stamps: nothing to gather on every commit.
        return Ok(());
    }
    let written: Idxs = ws.iter().chain(ins).copied().collect();
    let mut at = units(tx, &written).expect("sbvs");
    // Units sharing a stamp need one bump.
    at.sort_unstable();
    at.dedup();
    super::sbvs::stamps(tx, Stage::Commit, true, &at).await?;
    Ok(())
}

/// Puts entry `i`'s slot as its successful put left it into the node's buffer, valid for
/// `valid`, which names the attempt's own tid. An abort must take the entry out again
/// before `set_aborted` ([`undo`]): an aborted tid counts as completed, so a later snapshot
/// that `valid` covers would read the aborted version.
fn write_through(tx: &TxnCore<'_, TellEntry>, i: usize, valid: Descriptor) {
    let e = &tx.entries[i];
    let (Some(loc), Some(seq)) = (e.loc, e.state.put_seq) else {
        return;
    };
    let mut words = e.state.words.clone();
    words[H_LOCK as usize] = seq;
    let node = tell_node(tx);
    let mut g = node.buffer(|| buffer_capacity(tx));
    let buf = g.as_mut().expect("made by buffer()");
    buf.write_through((e.table, e.node, e.key), (loc.0, words), valid);
}

/// Gets the slots of entries `idxs` again, for another put over them (`words`, `seq`).
async fn reread(tx: &mut TxnCore<'_, TellEntry>, idxs: &[usize]) -> Result<(), Abort> {
    for (i, _, w) in get(tx, idxs).await? {
        let rec = decode(tx, i, &w)?;
        let e = &mut tx.entries[i];
        e.state.seq = rec.seq;
        e.state.words = w;
    }
    Ok(())
}

/// Inserts entries `ins` by a request per storage node. A placed record is the attempt's
/// put already; a key whose newest version is a deletion gets its words for a put over
/// them (returned); a live key aborts `Duplicate` (R3), a full table `TableFull`.
async fn insert(tx: &mut TxnCore<'_, TellEntry>, ins: &[usize]) -> Result<Idxs, Abort> {
    let tid = attempt(tx).expect("a commit starts the attempt first").tid;
    let mut d = tx.c.ep.doorbell_for(ins.len());
    let mut asked = Vec::new();
    for n in atoll_txn::stages::nodes_of(tx, ins) {
        let on = atoll_txn::stages::on_node(tx, ins, n);
        let items = on
            .iter()
            .map(|&i| {
                let e = &tx.entries[i];
                InsertItem {
                    table: e.table,
                    key: e.key,
                    payload: e.data.clone(),
                }
            })
            .collect();
        let origin = tx.c.node();
        let req = TellRequest::Insert { origin, tid, items };
        asked.push((d.rpc(n, req.to_bytes()), on));
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let mut over = Idxs::new();
    let mut refused = None;
    for (j, on) in asked {
        let TellReply::Inserted(outcomes) = TellReply::of(res.rpc(j)) else {
            panic!("tell: an insert answered another reply");
        };
        for (&i, o) in on.iter().zip(outcomes) {
            let e = &mut tx.entries[i];
            match o {
                Inserted::Placed { loc, version, seq } => {
                    e.loc = Some(Loc(loc));
                    e.state.put_seq = Some(seq);
                    e.installed = Some(version);
                }
                Inserted::Deleted { loc, words } => {
                    e.loc = Some(Loc(loc));
                    e.state.seq = words[H_LOCK as usize] & !CID_LOCKED;
                    e.state.words = words;
                    over.push(i);
                }
                Inserted::Live => refused = Some(Abort::Duplicate),
                Inserted::Full => refused = refused.or(Some(Abort::TableFull)),
            }
        }
    }
    // Placed records hold the attempt's versions: the abort's undo finds them by `put_seq`.
    for &i in ins {
        if tx.entries[i].state.put_seq.is_some() {
            let e = &tx.entries[i];
            let layout = tx.c.catalog.layout(e.table);
            let slot = placed_slot(layout, e, tid);
            tx.entries[i].state.words = slot;
        }
    }
    match refused {
        Some(a) => Err(a),
        None => Ok(over),
    }
}

/// The slot words a placed insert wrote (what its undo puts over): the record's one
/// version, the tid's.
fn placed_slot(
    layout: &atoll_storage::layout::TableLayout,
    e: &atoll_txn::coord::Entry<TellEntry>,
    tid: Tid,
) -> Vec<u64> {
    let mut old = vec![0; layout.record_words as usize];
    old[H_KEY as usize] = e.key;
    let set = super::versions::VersionSet::new(vec![Version {
        tid,
        word: e.installed.expect("placed"),
        payload: Some(e.data.clone()),
    }]);
    record::encode(layout, &old, &set).expect("one version fits a tell slot")
}

/// Conditional puts over one-sided verbs: every record's CAS of `LOCK` in one doorbell,
/// then the words and the unlock of those taken in another. Whether each was put.
async fn put_one_sided(
    tx: &mut TxnCore<'_, TellEntry>,
    items: &[(usize, Vec<u64>, u64)],
) -> Result<Vec<bool>, Abort> {
    let ptr = |tx: &TxnCore<'_, TellEntry>, i: usize| {
        let e = &tx.entries[i];
        tx.c.catalog
            .record_ptr(e.table, e.node, e.slot())
            .add(H_LOCK)
    };
    let mut d = tx.c.ep.doorbell_for(items.len());
    let cas: Vec<usize> = items
        .iter()
        .map(|(i, _, _)| {
            let seq = tx.entries[*i].state.seq;
            d.cas(ptr(tx, *i), seq, seq | CID_LOCKED)
        })
        .collect();
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let took: Vec<bool> = items
        .iter()
        .zip(&cas)
        .map(|((i, _, _), &j)| res.cas(j) == tx.entries[*i].state.seq)
        .collect();
    let mut d = tx.c.ep.doorbell_for(2 * items.len());
    for ((i, words, _), &ok) in items.iter().zip(&took) {
        if ok {
            let lock = ptr(tx, *i);
            d.write(
                lock.add(1),
                Words::from_slice(&words[H_LOCK as usize + 1..]),
            );
            d.write(lock, Words::from_slice(&[tx.entries[*i].state.seq + 1]));
        }
    }
    if took.iter().any(|&t| t) {
        // The puts taken are the attempt's now: a failure here leaves them held, which
        // only recovery can settle (the run stops).
        tx.logged = true;
        d.submit().await.map_err(|e| tx.op_failed(e))?;
    }
    Ok(took)
}

/// Conditional puts by a request per storage node.
async fn put_by_rpc(
    tx: &mut TxnCore<'_, TellEntry>,
    items: &[(usize, Vec<u64>, u64)],
) -> Result<Vec<bool>, Abort> {
    let idxs: Idxs = items.iter().map(|(i, _, _)| *i).collect();
    let mut d = tx.c.ep.doorbell_for(items.len());
    let mut asked = Vec::new();
    for n in atoll_txn::stages::nodes_of(tx, &idxs) {
        let on: Vec<usize> = (0..items.len())
            .filter(|&k| tx.entries[items[k].0].node == n)
            .collect();
        let puts = on
            .iter()
            .map(|&k| {
                let e = &tx.entries[items[k].0];
                PutItem {
                    table: e.table,
                    loc: e.slot(),
                    seq: e.state.seq,
                    words: items[k].1.clone(),
                }
            })
            .collect();
        let req = TellRequest::PutIf {
            origin: tx.c.node(),
            items: puts,
        };
        asked.push((d.rpc(n, req.to_bytes()), on));
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let mut done = vec![false; items.len()];
    for (j, on) in asked {
        let TellReply::Puts(puts) = TellReply::of(res.rpc(j)) else {
            panic!("tell: a put answered another reply");
        };
        assert_eq!(puts.len(), on.len(), "tell: a put answered per item");
        for (k, ok) in on.into_iter().zip(puts) {
            done[k] = ok;
        }
    }
    Ok(done)
}

/// Takes the attempt's versions out of every record it put (an abort), each by a
/// conditional put of its slot without them; a record it inserted keeps a deletion by tid
/// 0 (seen by every snapshot). A put that fails (a put since) gets the slot again and
/// retries, at most [`UNDO_ROUNDS_MAX`] rounds.
async fn undo(tx: &mut TxnCore<'_, TellEntry>) {
    let t0 = tx.now_ns();
    let tid = attempt(tx).expect("an undo of a started attempt").tid;
    let mut todo = tx.select(|e| e.state.put_seq.is_some());
    if buffered(tx) {
        // The attempt's written-through entries hold its version, valid for its tid.
        let node = tell_node(tx);
        let mut g = node.buffer(|| buffer_capacity(tx));
        let buf = g.as_mut().expect("made by buffer()");
        for &i in &todo {
            let e = &tx.entries[i];
            buf.forget((e.table, e.node, e.key));
        }
    }
    for _ in 0..UNDO_ROUNDS_MAX {
        if todo.is_empty() {
            break;
        }
        let mut items = Vec::with_capacity(todo.len());
        for &i in &todo {
            let e = &mut tx.entries[i];
            e.state.seq = e.state.put_seq.take().expect("put");
            e.installed = None;
            let layout = tx.c.catalog.layout(e.table);
            let mut rec = record::decode(layout, &e.state.words).expect("what it put");
            if !rec.versions.unwrite(tid) {
                continue;
            }
            if rec.versions.is_empty() {
                // An insert into a new slot: back to absent at the version before it, as
                // the store takes an insert back, so the key's versions stay consecutive.
                let head = record::decode(layout, &e.state.words).expect("what it put");
                let word = head.versions.versions()[0].word;
                rec.versions
                    .write(Tid(0), (word - 1) | VERSION_ABSENT, None);
            }
            let words =
                record::encode(layout, &e.state.words, &rec.versions).expect("fewer versions fit");
            items.push((i, words, 0));
        }
        if items.is_empty() {
            break;
        }
        let done = if rpc(tx, Stage::Commit) {
            put_by_rpc(tx, &items).await
        } else {
            put_one_sided(tx, &items).await
        };
        let Ok(done) = done else {
            // An op failed: recorded after the log, the run stops.
            return;
        };
        let again: Idxs = items
            .iter()
            .zip(done)
            .filter(|(_, ok)| !ok)
            .map(|((i, _, _), _)| *i)
            .collect();
        if again.is_empty() {
            break;
        }
        // Read them again: the next round puts over what is there now.
        if get_again(tx, &again).await.is_err() {
            return;
        }
        todo = again;
    }
    assert!(
        todo.iter().all(|&i| tx.entries[i].state.put_seq.is_none()),
        "tell: tid {} could not take its versions out in {UNDO_ROUNDS_MAX} rounds",
        tid.0
    );
    tx.charge(Stage::Release, t0);
}

/// Gets entries `idxs` again for an undo round: `put_seq` is the sequence number now and
/// `words` the slot.
async fn get_again(tx: &mut TxnCore<'_, TellEntry>, idxs: &[usize]) -> Result<(), Abort> {
    for (i, _, w) in get(tx, idxs).await? {
        let e = &mut tx.entries[i];
        e.state.put_seq = Some(w[H_LOCK as usize] & !CID_LOCKED);
        e.state.words = w;
    }
    Ok(())
}

/// `set_committed`: the commit manager records the commit and numbers it.
async fn committed(tx: &mut TxnCore<'_, TellEntry>) -> Result<(), Abort> {
    let tid = attempt(tx).expect("a commit starts the attempt first").tid;
    let cm = cm_node(tx);
    let deferred = tx.c.take_deferred();
    let mut d = tx.c.ep.doorbell_for(2);
    if let Some(op) = deferred {
        op.post(&mut d);
    }
    let j = d.rpc(cm, TellRequest::SetCommitted { tid }.to_bytes());
    tx.logged = true;
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    match TellReply::of(res.rpc(j)) {
        TellReply::Committed { at } => {
            tx.commit_ts = Timestamp::from_word(at + 1);
            let managers = tx.c.catalog.topology().service_nodes(CM_ROLE.name).count();
            if managers > 1 {
                // Numbered at its manager: the slot of the history's vector it counts in.
                tx.commit_slot = Some(pn_of(tx).0 as u32 % managers as u32);
            }
            tx.c.family_ctx = None;
            Ok(())
        }
        other => panic!(
            "tell: the commit manager answered tid {}'s commit with {other:?}",
            tid.0
        ),
    }
}
