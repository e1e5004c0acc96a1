//! RSI: snapshot isolation over one-sided verbs ("The End of Slow Networks" §4.2), with
//! one version per record as the paper's implementation ("aborts all transactions which
//! require an older snapshot").
//!
//! A record's `LOCK` word is `[locked:1 | commit id:63]` ([`LockWord::CommitId`]): the
//! commit id of its current version, which is also the tag in its payload, so one READ of
//! the record shows whether header and payload belong together. Pipeline:
//!
//! 1. **snapshot**: the `RTS` the coordinator's last commit read in its install doorbell,
//!    or else one READ of the timestamp service's `RTS`;
//! 2. **read**: whole-record READs (the previous transaction's outcome WRITE rides in the
//!    first doorbell); a version committed after the snapshot aborts (`SnapshotTooOld`),
//!    unless it may be the coordinator's own last commit and nothing was read yet (then a
//!    snapshot including it is awaited and the records are read again), a locked record or
//!    a payload of another commit aborts (`Conflict`);
//! 3. **lock + validate**: per written record one CAS from the commit id read to locked,
//!    doorbell-batched with the commit timestamp's FETCH_ADD (and a READ of `RTS` that
//!    bounds the outcome ring);
//! 4. **log** to backups (RCC's coordinator log; `--replicas 1` for the paper's
//!    protocol, which has none);
//! 5. **install**: per record the payload (sealed with the commit timestamp), the version,
//!    then `LOCK` = the commit timestamp, which unlocks, and a READ of `RTS` for the next
//!    attempt's snapshot: one doorbell;
//! 6. **outcome**: one WRITE of the commit timestamp into the service's ring, deferred to
//!    the coordinator's next doorbell (no round trip of its own: the paper's unsignaled
//!    message).
//!
//! So an update transaction whose records' locations are known costs the paper's 3
//! signaled round trips (read, lock, install) and 1 unsignaled message, and no CPU at the
//! records' nodes. The paper's first message reads `RTS` beside the records; that is not
//! safe across nodes (a record READ may land before an install that a later `RTS` READ
//! already covers), so the snapshot is the `RTS` read beside the previous installs
//! instead, which every later READ follows. A read-only transaction commits at its
//! snapshot. Inserts are placed by their nodes after the lock stage (RPC:
//! allocation) and unlocked at the commit timestamp. A deletion is locked and validated as
//! an update; then the record's node marks it absent and unlocks it at the commit timestamp
//! (RPC: the indexes change), so a reader that finds it absent aborts `SnapshotTooOld` if
//! its snapshot predates the deletion and `NotFound` if not.
//!
//! **Plans.** Every stage may instead go as requests to the serving CPUs ([`participant`]):
//! `read`, `lock`, `commit` (install) and `release` to the records' nodes, `timestamp` to
//! the timestamp service's; each request does there what the verbs do, with the same words
//! in the same order, so one protocol and one checker cover both. `--plan rpc` is the
//! paper's Figure 6 baselines: traditional SI with the records' and the service's CPUs
//! serving every request (over `ipoib` or `10gbe-tcp`), and the shared-memory design over
//! two-sided verbs (over `fdr-ib`).

pub mod config;
pub mod msg;
pub mod participant;

use atoll_fabric::{Completions, Doorbell, NodeId, RemotePtr, Words};
use atoll_storage::layout::{
    payload_check, payload_intact, LockWord, OldVersions, TableLayout, CID_LOCKED, HEADER_WORDS,
    H_AUX, H_KEY, H_LOCK, H_VERSION, OLD_SLOT_HEADER_WORDS, OVERFLOW_ENTRY_HEADER_WORDS, P_CHECK,
    P_TAG, VERSION_ABSENT, VERSION_KEY_BITS, VERSION_KEY_MASK,
};
use atoll_txn::stages::{self, check_tuple};
use atoll_txn::tsvc::TsService;
use atoll_txn::versions::VersionEvent;
use atoll_txn::{
    Abort, Access, Coordinator, Deferred, EntryState, Idxs, Isolation, Plan, PlanError, Primitive,
    Protocol, Stage, Timestamp, TxnCore,
};
use msg::{DeleteItem, InstallItem, LockChange, RsiReply, RsiRequest};

pub struct Rsi;

/// What RSI keeps per record: the commit id its read saw (unlocked), which its lock CAS
/// expects; with older versions kept, the current version as read, laid out as an old slot,
/// and the old slot its install moves it into.
#[derive(Clone, Debug, Default)]
pub struct RsiEntry {
    pub cid: u64,
    /// `[commit id, version, payload]` of the current version when it was the one read
    /// (records keeping older versions only): the install writes it into old slot `evict`.
    pub old_slot: Vec<u64>,
    /// The old slot holding the oldest version (or none yet): the one an install rewrites.
    pub evict: u32,
}

impl EntryState for RsiEntry {
    fn reset(&mut self) {
        let mut old_slot = std::mem::take(&mut self.old_slot);
        old_slot.clear();
        *self = RsiEntry {
            old_slot,
            ..RsiEntry::default()
        };
    }
}

/// Rounds a committed coordinator waits for the timestamp service to consume the ring slot
/// its commit timestamp reports in (a slower coordinator's outcome still occupies it).
pub const RING_WAIT_ROUNDS_MAX: u32 = 10_000;
/// Back-off between those rounds.
pub const RING_WAIT_NS: u64 = 10_000;
/// Re-reads of `RTS` a snapshot waits for the sequencer to pass the coordinator's own last
/// commit, and the pause before each (the sequencer runs on every event-loop turn of its
/// node: normally one pause is plenty).
pub const SNAPSHOT_WAIT_ROUNDS_MAX: u32 = 100;
pub const SNAPSHOT_WAIT_NS: u64 = 1_000;

/// The snapshot-isolation family's own stage: its requests to the timestamp service (read
/// timestamp, commit timestamp, outcome), over one-sided verbs or as RPCs.
pub const TIMESTAMP: Stage = Stage::family(0, "timestamp");

impl Protocol for Rsi {
    const NAME: &'static str = "rsi";
    const ISOLATION: Isolation = Isolation::Snapshot;
    const LOCK_WORD: LockWord = LockWord::CommitId;
    // A deletion is locked like an update and done by the record's node ([`delete`]).
    const DELETES: bool = true;
    // Record blocks keep `--rsi-versions` versions (1 by default, as the paper's code).
    const MULTI_VERSION: bool = true;
    // Each stage one-sided (the paper's protocol) or served by CPUs (its baselines).
    const STAGES: &'static [Stage] = &[
        Stage::Read,
        Stage::Lock,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
        TIMESTAMP,
    ];
    const FAMILY_STAGES: &'static [Stage] = &[TIMESTAMP];
    const KNOBS: &'static [atoll_txn::KnobSpec] = &[config::VERSIONS];
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

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // Every combination runs: a request does on its node's CPU what the verbs do, on
        // the same words, so stages over either primitive mix.
        Ok(())
    }

    async fn fetch(tx: &mut TxnCore<'_, RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
        let t0 = tx.now_ns();
        let r = read(tx, idxs).await;
        tx.charge(Stage::Read, t0);
        r
    }

    async fn commit(tx: &mut TxnCore<'_, RsiEntry>) -> Result<(), Abort> {
        let Some(w) = writes(tx) else {
            // Read-only: its snapshot is its place in the order.
            return Ok(());
        };
        if !w.blind.is_empty() {
            Self::fetch(tx, &w.blind).await?;
        }

        let t0 = tx.now_ns();
        let svc = tx.c.ts_service();
        let taken = lock(tx, &w.ws, |e| e.state.cid).await;
        tx.charge(Stage::Lock, t0);
        let (cts, rts_word) = match taken {
            Lock::Taken { cts, rts_word } => (cts, rts_word),
            Lock::Refused {
                abort,
                cts,
                rts_word,
            } => {
                release(tx, &w.ws).await;
                report(tx, &svc, cts, rts_word).await;
                return Err(abort);
            }
            Lock::Failed(a) => return Err(a),
        };
        let upd = w.updates();
        let written: Idxs = upd.iter().chain(w.ins.iter()).copied().collect();
        stamp(tx, &written, cts);

        let t0 = tx.now_ns();
        let logged = stages::log(tx, tx.c.plan().get(Stage::Log)).await;
        tx.charge(Stage::Log, t0);
        if let Err(a) = logged {
            release(tx, &w.ws).await;
            report(tx, &svc, cts, rts_word).await;
            return Err(a);
        }

        if !w.ins.is_empty() {
            // Each new record is placed by its node (allocation is one of the few requests
            // the design keeps two-sided), locked until the install unlocks it at `cts`.
            let t0 = tx.now_ns();
            let placed = stages::apply_inserts_locked_by(tx, CID_LOCKED).await;
            tx.charge(Stage::Commit, t0);
            if let Err(a) = placed {
                release(tx, &w.ws).await;
                report(tx, &svc, cts, rts_word).await;
                return Err(a);
            }
        }

        let t0 = tx.now_ns();
        delete(tx, &w.del, cts).await;
        install(tx, &upd, cts).await;
        unlock_inserted(tx, &w.ins, cts).await;
        tx.charge(Stage::Commit, t0);
        tx.c.last_commit_ts = cts;
        report(tx, &svc, cts, rts_word).await;
        Ok(())
    }

    async fn rollback(_tx: &mut TxnCore<'_, RsiEntry>) {
        // Nothing is held during execution: records are locked only at commit.
    }
}

/// Takes the attempt's snapshot, once: the read timestamp the coordinator's last commit
/// fetched in its install doorbell, or else one READ of the service's `RTS` (behind the
/// coordinator's deferred outcome WRITE: same node, so it lands first). Either may be below
/// the coordinator's own last commit; [`read`] waits for that only when a record shows it.
pub async fn snapshot(tx: &mut TxnCore<'_, RsiEntry>) -> Result<u64, Abort> {
    if let Some(s) = tx.snapshot_ts {
        return Ok(s.word());
    }
    let s = match tx.c.next_snapshot.take() {
        Some(s) => s,
        None => read_rts(tx).await?,
    };
    tx.snapshot_ts = Timestamp::from_word(s);
    Ok(s)
}

/// Moves the attempt's snapshot up to include the coordinator's own last commit (its client
/// reads its own writes): `RTS` is read again after a pause, a bounded number of times, then
/// the attempt aborts `SnapshotTooOld` (retried like any other). Only for an attempt that
/// has read nothing at its old snapshot.
async fn snapshot_covering_own(tx: &mut TxnCore<'_, RsiEntry>) -> Result<u64, Abort> {
    for _ in 0..SNAPSHOT_WAIT_ROUNDS_MAX {
        tx.c.ep.sleep(SNAPSHOT_WAIT_NS).await;
        let s = read_rts(tx).await?;
        if s >= tx.c.last_commit_ts {
            tx.snapshot_ts = Timestamp::from_word(s);
            return Ok(s);
        }
    }
    Err(Abort::SnapshotTooOld)
}

/// One read of the service's `RTS`, as a snapshot, behind the coordinator's deferred
/// outcome (same node, so it lands first).
async fn read_rts(tx: &mut TxnCore<'_, RsiEntry>) -> Result<u64, Abort> {
    let svc = tx.c.ts_service();
    let ts_rpc = rpc(tx, TIMESTAMP);
    let deferred = tx.c.take_deferred();
    let mut d = tx.c.ep.doorbell_for(2);
    if let Some(op) = deferred {
        op.post(&mut d);
    }
    let j = post_rts(&mut d, &svc, ts_rpc);
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    Ok(TsService::snapshot_of(rts_word(&res, j, ts_rpc)))
}

/// Whether stage `s` goes as requests to the serving CPUs.
fn rpc(tx: &TxnCore<'_, RsiEntry>, s: Stage) -> bool {
    tx.c.plan().get(s) == Primitive::Rpc
}

/// Posts a read of the service's `RTS` in `d` (a READ, or a request to its CPU); its op
/// index, for [`rts_word`].
fn post_rts(d: &mut Doorbell<'_>, svc: &TsService, ts_rpc: bool) -> usize {
    if ts_rpc {
        d.rpc(svc.node, RsiRequest::Snapshot.to_bytes())
    } else {
        d.read(svc.rts(), 1)
    }
}

/// The `RTS` word op `j` ([`post_rts`]) returned.
fn rts_word(res: &Completions, j: usize, ts_rpc: bool) -> u64 {
    if ts_rpc {
        words(res, j)[0]
    } else {
        res.read(j)[0]
    }
}

/// The words of an RSI `Words` reply to op `j`.
fn words(res: &Completions, j: usize) -> Vec<u64> {
    match RsiReply::of(res.rpc(j)) {
        RsiReply::Words(w) => w,
        other => panic!("rsi: expected words, got {other:?}"),
    }
}

/// Posts in `d` one request per node holding entries of `idxs`, `request` building it from
/// that node's entries: per request its op index and its entries (the replies' order).
fn post_per_node(
    tx: &TxnCore<'_, RsiEntry>,
    d: &mut Doorbell<'_>,
    idxs: &[usize],
    mut request: impl FnMut(&TxnCore<'_, RsiEntry>, &[usize]) -> RsiRequest,
) -> Vec<(usize, Idxs)> {
    stages::nodes_of(tx, idxs)
        .into_iter()
        .map(|n| {
            let on = stages::on_node(tx, idxs, n);
            (d.rpc(n, request(tx, &on).to_bytes()), on)
        })
        .collect()
}

/// Reads entries `idxs` at the attempt's snapshot: one-sided locate, then whole-record
/// READs (own-node records loaded in place, the same words in the same order); the
/// coordinator's deferred outcome WRITE rides in the same doorbell. An attempt whose first
/// reads find a version newer than its snapshot but not newer than the coordinator's own
/// last commit takes a snapshot that includes that commit and reads them again (once).
pub async fn read(tx: &mut TxnCore<'_, RsiEntry>, idxs: &[usize]) -> Result<(), Abort> {
    let fresh = tx.snapshot_ts.is_none();
    let mut snap = snapshot(tx).await?;
    let by_rpc = rpc(tx, Stage::Read);
    if !by_rpc {
        stages::locate(tx, idxs).await?;
    }
    let mut tuple = Vec::new();
    // Two passes at most: the second only after the snapshot moved up to the own commit.
    for pass in 0..2 {
        let own = tx.c.last_commit_ts;
        // A version the own last commit may have written, above a snapshot that nothing was
        // read at yet: worth a newer snapshot rather than an abort.
        let behind_own = |w: &[u64]| {
            fresh && pass == 0 && w[H_LOCK as usize] > snap && w[H_LOCK as usize] <= own
        };
        // Takes a block read for entry `i`, or notes that it shows the own commit.
        let mut again = false;
        let mut pending = smallvec::SmallVec::<[Pending; 4]>::new();
        let mut take = |tx: &mut TxnCore<'_, RsiEntry>, i: usize, w: &[u64]| {
            if behind_own(w) {
                again = true;
            } else {
                pending.extend(take_version(tx, i, w, |cid| cid <= snap, |cid, _| cid)?);
            }
            Ok(())
        };
        if by_rpc {
            for (i, block) in read_by_rpc(tx, idxs).await? {
                take(tx, i, &block)?;
            }
        } else {
            let mut remote = Idxs::new();
            for &i in idxs {
                let e = &tx.entries[i];
                if tx.c.ep.in_place_on(e.node) {
                    let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
                    tuple.resize(tx.c.catalog.layout(e.table).headers_words() as usize, 0);
                    tx.c.ep.load_in_place(ptr, &mut tuple);
                    take(tx, i, &tuple)?;
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
                    take(tx, i, res.read(j))?;
                }
            }
        }
        if !again {
            // Old payloads past the headers read (none when the whole block is read).
            return fetch_pending(tx, &pending, |cid| cid <= snap).await;
        }
        snap = snapshot_covering_own(tx).await?;
    }
    Ok(())
}

/// Reads the blocks of entries `idxs` with one request per node, which finds each record by
/// its key (the location cache's slot as a hint) and returns its block as it is; the
/// coordinator's deferred outcome rides in the same doorbell. `(entry, block)` pairs; a key
/// that does not exist aborts `NotFound`.
async fn read_by_rpc(
    tx: &mut TxnCore<'_, RsiEntry>,
    idxs: &[usize],
) -> Result<Vec<(usize, Vec<u64>)>, Abort> {
    let deferred = tx.c.take_deferred();
    let mut d = tx.c.ep.doorbell_for(idxs.len() + 1);
    let mine = post_per_node(tx, &mut d, idxs, |tx, on| RsiRequest::Read {
        items: on.iter().map(|&i| stages::item(tx, i)).collect(),
    });
    if let Some(op) = deferred {
        op.post(&mut d);
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let mut out = Vec::with_capacity(idxs.len());
    for &(j, ref on) in &mine {
        let node = tx.entries[on[0]].node;
        let RsiReply::Blocks(blocks) = RsiReply::of(res.rpc(j)) else {
            panic!("rsi: node {} answered a read with another reply", node.0);
        };
        assert_eq!(
            blocks.len(),
            on.len(),
            "rsi: node {} answered {} blocks for {} records",
            node.0,
            blocks.len(),
            on.len()
        );
        for (&i, b) in on.iter().zip(blocks) {
            let Some((loc, block)) = b else {
                return Err(Abort::NotFound);
            };
            tx.entries[i].loc = Some(atoll_txn::msg::Loc(loc));
            out.push((i, block));
        }
    }
    Ok(out)
}

/// An attempt's writes, as the snapshot-isolation family commits them.
pub struct Writes {
    /// Updates and deletes: each locked by a CAS from the commit id read.
    pub ws: Idxs,
    /// The deletes among `ws`: their nodes' CPUs mark them absent (the indexes change)
    /// instead of an install.
    pub del: Idxs,
    /// Inserts: no lock (a new key has no version to validate: "with SI inserts always
    /// succeeding"), placed after the lock stage.
    pub ins: Idxs,
    /// Updates and deletes never read (blind writes): read first, for the commit id their
    /// lock validates against.
    pub blind: Idxs,
}

impl Writes {
    /// The entries of `ws` an install writes: every one but the deletes.
    pub fn updates(&self) -> Idxs {
        self.ws
            .iter()
            .copied()
            .filter(|i| !self.del.contains(i))
            .collect()
    }
}

/// The writes of the attempt, `None` if it is read-only.
pub fn writes(tx: &TxnCore<'_, RsiEntry>) -> Option<Writes> {
    let mut w = Writes {
        ws: Idxs::new(),
        del: Idxs::new(),
        ins: Idxs::new(),
        blind: Idxs::new(),
    };
    for (i, e) in tx.entries.iter().enumerate() {
        match e.access {
            Access::Update | Access::Delete => {
                w.ws.push(i);
                if e.access == Access::Delete {
                    w.del.push(i);
                }
                if !e.fetched {
                    w.blind.push(i);
                }
            }
            Access::Insert => w.ins.push(i),
            _ => {}
        }
    }
    (!w.ws.is_empty() || !w.ins.is_empty()).then_some(w)
}

/// Words of a record's whole block: the current version and every older one kept (what a
/// request returns; a one-sided READ takes [`TableLayout::headers_words`]).
pub fn block_words(layout: &TableLayout) -> u32 {
    if layout.version_slots > 1 {
        layout.record_words
    } else {
        layout.tuple_words
    }
}

/// Where the install of a record keeping older versions writes `old_slot` (`[commit id,
/// sealed version, payload]` of the version it moves out of the head) for old slot `evict`:
/// one ascending WRITE inline; apart, the payload and then the header, so a reader whose
/// header READ names the moved version finds its payload already there.
pub fn old_slot_writes<'a>(
    layout: &TableLayout,
    evict: u32,
    old_slot: &'a [u64],
) -> [(u32, &'a [u64]); 2] {
    let (header, payload) = old_slot.split_at(OLD_SLOT_HEADER_WORDS as usize);
    match layout.old_versions {
        OldVersions::Inline => [(layout.old_header_offset(evict), old_slot), (0, &[])],
        OldVersions::HeadersApart => [
            (layout.old_payload_offset(evict), payload),
            (layout.old_header_offset(evict), header),
        ],
    }
}

/// The version of block `w` a snapshot sees, `sees` telling whether it sees a commit id:
/// the newest of those it sees by `rank(commit id, version)`, by the headers in the block
/// (the current version's commit id in `LOCK`, each old slot's first word; an old slot
/// never written has version 0). `(commit id, version, payload offset)`, the offset within
/// the record, which may lie past `w` when the headers are apart; `None` if every version
/// kept is one it does not see (the one needed is gone). `w` needs only the record's first
/// [`TableLayout::headers_words`].
///
/// RSI ranks by commit id (a record's commit ids rise with its versions). A writer in
/// flight (the lock bit set) commits above every snapshot that can see its record locked
/// (its commit timestamp is not below `RTS` until it has unlocked), so the commit id beside
/// the bit is still the newest committed.
///
/// An old slot whose version word is not sealed by the commit id beside it
/// ([`seal_version`]) was read torn across a rewrite of the slot: `Err(Conflict)`, as the
/// version it holds cannot be named.
pub fn visible(
    layout: &TableLayout,
    w: &[u64],
    sees: impl Fn(u64) -> bool,
    rank: impl Fn(u64, u64) -> u64,
) -> Result<Option<(u64, u64, usize)>, Abort> {
    let mut best: Option<(u64, u64, usize, u64)> = None;
    let mut consider = |cid: u64, version: u64, at: usize| {
        let r = rank(cid, version);
        if sees(cid) && best.is_none_or(|b| r > b.3) {
            best = Some((cid, version, at, r));
        }
    };
    // Old slots first: while an install runs, the version it moved out of the head is in
    // an old slot under the same commit id, intact, and the head's payload may not be.
    // An old slot keeps its key version; the slot's incarnation is the head's (a reclaim or
    // a revival clears the old slots).
    let incarnation_bits = w[H_VERSION as usize] & !VERSION_ABSENT & !VERSION_KEY_MASK;
    for j in 0..layout.version_slots - 1 {
        let at = layout.old_header_offset(j) as usize;
        if w[at + 1] != 0 {
            let Some(key_version) = unseal_version(w[at], w[at + 1]) else {
                return Err(Abort::Conflict);
            };
            consider(
                w[at] & !MOVED,
                incarnation_bits | key_version,
                layout.old_payload_offset(j) as usize,
            );
        }
    }
    consider(
        w[H_LOCK as usize] & !CID_LOCKED,
        w[H_VERSION as usize],
        HEADER_WORDS as usize,
    );
    Ok(best.map(|(cid, version, at, _)| (cid, version, at)))
}

/// Bit where an old slot's version word keeps the seal of its commit id; versions stay
/// below it (2^40 commits of one record).
const SEAL_SHIFT: u32 = VERSION_KEY_BITS;

/// A commit id's seal: 24 bits of a hash of it, never 0 (so a written slot's version word
/// is never 0, the mark of a slot never written).
fn seal_of(cid: u64) -> u64 {
    ((cid & !CID_LOCKED).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> SEAL_SHIFT) | 1
}

/// The version word of an old slot holding version word `version` of commit id `cid`: its
/// key version (below [`SEAL_SHIFT`], which is the store's `VERSION_KEY_BITS`), the commit
/// id's seal above, where the version word keeps the slot's incarnation: that is the head's
/// (found by the first session with deletes: a reclaimed slot's versions overflowed the
/// seal). The slot's `[commit id, version, payload]` is rewritten by one WRITE that a READ
/// may straddle; the payload's tag and check word tie it to the commit id, and the seal ties
/// the version word to it too.
pub fn seal_version(cid: u64, version: u64) -> u64 {
    seal_of(cid) << SEAL_SHIFT | (version & VERSION_KEY_MASK)
}

/// The key version an old slot's version word `word` holds for commit id `cid`; `None` if
/// the seal is another commit id's (a torn READ).
pub fn unseal_version(cid: u64, word: u64) -> Option<u64> {
    (word >> SEAL_SHIFT == seal_of(cid)).then_some(word & ((1 << SEAL_SHIFT) - 1))
}

/// The moved bit of an old header ([`atoll_storage::layout::OLD_MOVED`]).
pub const MOVED: u64 = atoll_storage::layout::OLD_MOVED;

/// Hops of an overflow chain a read follows at most before it gives up (`SnapshotTooOld`):
/// a chain holds copies of versions still in the record too, and an entry the ring reused
/// can lead anywhere.
pub const OVERFLOW_HOPS_MAX: u32 = 16;

/// An old version a snapshot needs whose payload lies past the words read (headers apart
/// from data): a second READ of `payload_words` at offset `at` of the record fetches it,
/// and [`take_payload`] checks and takes it.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    pub i: usize,
    /// Word offset of the payload within the record.
    pub at: u32,
    cid: u64,
    version: u64,
    head_cid: u64,
    evict: u32,
    /// No version the record keeps is visible: walk its overflow chain instead (`at` then
    /// unused until a version is found).
    chain: Option<ChainWalk>,
}

/// Where a walk down a record's overflow chain is: the next entry to READ, and the key
/// version just below the lowest one seen (every one seen is invisible), which is the only
/// one it may take next: versions are consecutive, so a chain that skips it lost it.
#[derive(Clone, Copy, Debug)]
struct ChainWalk {
    entry: u32,
    below: u64,
    incarnation_bits: u64,
    hops: u32,
}

/// Takes block `w` read for entry `i` (at least its [`TableLayout::headers_words`]) at a
/// snapshot that sees the commit ids `sees` accepts: the version [`visible`] names (newest
/// by `rank`), if its payload is that commit's own (intact, tagged with its commit id). The
/// version is found by the headers, not by which payloads are intact, so a torn READ of the
/// version needed aborts rather than falls back to an older one. `Some` when that version's
/// payload is not in `w`: the caller fetches it ([`fetch_pending`]).
pub fn take_version(
    tx: &mut TxnCore<'_, RsiEntry>,
    i: usize,
    w: &[u64],
    sees: impl Fn(u64) -> bool,
    rank: impl Fn(u64, u64) -> u64,
) -> Result<Option<Pending>, Abort> {
    let head = w[H_LOCK as usize];
    if w[H_KEY as usize] == tx.entries[i].key && w[H_VERSION as usize] & VERSION_ABSENT != 0 {
        // Deleted ([`delete`]), being deleted, or an insert taken back (commit id 0).
        if head & CID_LOCKED != 0 {
            return Err(Abort::Conflict);
        }
        if !sees(head) {
            // Deleted after the snapshot: the version the snapshot needs is gone with it.
            return Err(Abort::SnapshotTooOld);
        }
    }
    // Another key's slot now, or absent in the snapshot: `NotFound`.
    check_tuple(tx, i, w)?;
    let e = &tx.entries[i];
    let layout = tx.c.catalog.layout(e.table);
    let head_cid = head & !CID_LOCKED;
    let Some((cid, version, at)) = visible(layout, w, sees, rank)? else {
        // Older than every version kept: NAM-DB's overflow chain may have it (an update
        // needs the current version, so it aborts as without one).
        let aux = w[H_AUX as usize];
        let no_chain =
            layout.overflow_entries == 0 || aux == 0 || aux > layout.overflow_entries as u64;
        if e.is_write() {
            tx.c.versions.add(VersionEvent::UpdateBehind, 1);
            return Err(Abort::SnapshotTooOld);
        }
        if no_chain {
            tx.c.versions.add(VersionEvent::BeyondKept, 1);
            return Err(Abort::SnapshotTooOld);
        }
        tx.c.versions.add(VersionEvent::ChainWalk, 1);
        let lowest = (0..layout.version_slots - 1)
            .map(|j| layout.old_header_offset(j) as usize)
            .filter(|&at| w[at + 1] != 0)
            .filter_map(|at| unseal_version(w[at], w[at + 1]))
            .chain([key_version_of(w[H_VERSION as usize])])
            .min()
            .expect("the head's version");
        return Ok(Some(Pending {
            i,
            at: 0,
            cid: 0,
            version: 0,
            head_cid,
            evict: oldest_slot(layout, w),
            chain: Some(ChainWalk {
                entry: (aux - 1) as u32,
                below: lowest,
                incarnation_bits: w[H_VERSION as usize] & !VERSION_ABSENT & !VERSION_KEY_MASK,
                hops: 0,
            }),
        }));
    };
    let current = at == HEADER_WORDS as usize;
    if current && head & CID_LOCKED != 0 && layout.version_slots == 1 {
        // A writer is installing over the only version kept.
        return Err(Abort::Conflict);
    }
    let kept = layout.version_slots > 1;
    if kept && e.is_write() && cid != head_cid {
        // An older version for a record this attempt updates: a later commit is already
        // installed, so its lock's CAS would fail (first committer wins). Abort now.
        return Err(Abort::ValidationFailed);
    }
    // An install (whose CAS proves the head still holds the commit id read) copies the
    // head's version into the oldest slot.
    let evict = if kept { oldest_slot(layout, w) } else { 0 };
    let end = at + layout.payload_words as usize;
    let p = Pending {
        i,
        at: at as u32,
        cid,
        version,
        head_cid,
        evict,
        chain: None,
    };
    if end > w.len() {
        return Ok(Some(p));
    }
    take_payload(tx, &p, &w[at..end])?;
    Ok(None)
}

/// Takes `payload`, read for the version `p` names, if it is that commit's own: a READ that
/// overlapped an install shows a torn payload (its check word fails), and one after the
/// slot was rewritten a later commit's (another tag).
pub fn take_payload(
    tx: &mut TxnCore<'_, RsiEntry>,
    p: &Pending,
    payload: &[u64],
) -> Result<(), Abort> {
    let e = &tx.entries[p.i];
    let kept = tx.c.catalog.layout(e.table).version_slots > 1;
    let own = payload_intact(e.table, e.key, payload) && payload[P_TAG as usize] == p.cid;
    let e = &mut tx.entries[p.i];
    // A blind write keeps its payload, but with older versions kept the one read is what
    // its install preserves, so it too must be whole.
    if !own && (!e.dirty || kept) {
        return Err(Abort::Conflict);
    }
    e.version = p.version;
    e.state.cid = p.cid;
    e.fill(p.version, payload);
    if kept {
        e.state.evict = p.evict;
        e.state.old_slot.clear();
        if p.cid == p.head_cid {
            e.state
                .old_slot
                .extend_from_slice(&[p.cid, seal_version(p.cid, p.version)]);
            e.state.old_slot.extend_from_slice(payload);
        }
    }
    Ok(())
}

/// The key version of a version word (no incarnation, no `ABSENT`).
fn key_version_of(word: u64) -> u64 {
    word & VERSION_KEY_MASK
}

/// Fetches and takes what `pending` names: old payloads (own-node ones loaded in place, the
/// others with one READ each in one doorbell: the second READ of a version found by headers
/// apart from data), then overflow chains, one entry per READ and hop, every walk's in one
/// doorbell, the version taken the first one `sees` accepts, consecutive below the record's.
pub async fn fetch_pending(
    tx: &mut TxnCore<'_, RsiEntry>,
    pending: &[Pending],
    sees: impl Fn(u64) -> bool,
) -> Result<(), Abort> {
    let mut remote = smallvec::SmallVec::<[&Pending; 8]>::new();
    let mut walks = smallvec::SmallVec::<[Pending; 4]>::new();
    let mut payload = Vec::new();
    for p in pending {
        if p.chain.is_some() {
            walks.push(*p);
            continue;
        }
        let e = &tx.entries[p.i];
        let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot()).add(p.at);
        if tx.c.ep.in_place_on(e.node) {
            payload.resize(tx.c.catalog.layout(e.table).payload_words as usize, 0);
            tx.c.ep.load_in_place(ptr, &mut payload);
            take_payload(tx, p, &payload)?;
        } else {
            remote.push(p);
        }
    }
    if !remote.is_empty() {
        let mut d = tx.c.ep.doorbell_for(remote.len());
        for p in &remote {
            let e = &tx.entries[p.i];
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot()).add(p.at);
            d.read(ptr, tx.c.catalog.layout(e.table).payload_words);
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        for (j, p) in remote.iter().enumerate() {
            take_payload(tx, p, res.read(j))?;
        }
    }
    // Each round READs every unfinished walk's next entry; a walk ends or hops on.
    let mut entry = Vec::new();
    while !walks.is_empty() {
        let ptr_of = |tx: &TxnCore<'_, RsiEntry>, p: &Pending| {
            let e = &tx.entries[p.i];
            let layout = tx.c.catalog.layout(e.table);
            let at = layout.overflow_entry_offset(p.chain.expect("a walk").entry);
            (
                RemotePtr::new(e.node, atoll_fabric::RegionId(e.table.0), at),
                layout.overflow_entry_words(),
            )
        };
        let mut read = smallvec::SmallVec::<[usize; 4]>::new();
        let mut results: Vec<Vec<u64>> = vec![Vec::new(); walks.len()];
        let mut d = tx.c.ep.doorbell_for(walks.len());
        for (k, p) in walks.iter().enumerate() {
            let (ptr, words) = ptr_of(tx, p);
            if tx.c.ep.in_place_on(ptr.node) {
                entry.resize(words as usize, 0);
                tx.c.ep.load_in_place(ptr, &mut entry);
                results[k] = entry.clone();
            } else {
                d.read(ptr, words);
                read.push(k);
            }
        }
        if !read.is_empty() {
            let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
            for (j, &k) in read.iter().enumerate() {
                results[k] = res.read(j).to_vec();
            }
        } else {
            drop(d);
        }
        let mut next = smallvec::SmallVec::<[Pending; 4]>::new();
        for (p, w) in walks.iter().zip(&results) {
            if let Some(p) = chain_step(tx, p, w, &sees)? {
                next.push(p);
            }
        }
        walks = next;
    }
    Ok(())
}

/// One hop of walk `p` over overflow entry `w` (`[next, commit id, sealed version,
/// payload]`): takes the entry's version if it is the one just below those seen and
/// visible, skips a copy of one seen, and gives up (`SnapshotTooOld`) on a gap, an entry
/// not of this record (the ring reused it, or it was read while rewritten), the chain's end
/// or [`OVERFLOW_HOPS_MAX`]. `Some` to go on.
fn chain_step(
    tx: &mut TxnCore<'_, RsiEntry>,
    p: &Pending,
    w: &[u64],
    sees: &impl Fn(u64) -> bool,
) -> Result<Option<Pending>, Abort> {
    tx.c.versions.add(VersionEvent::ChainHop, 1);
    let step = chain_hop(tx, p, w, sees);
    match &step {
        Ok(None) => tx.c.versions.add(VersionEvent::ChainRead, 1),
        Err(Abort::SnapshotTooOld) => tx.c.versions.add(VersionEvent::BeyondKept, 1),
        _ => {}
    }
    step
}

/// [`chain_step`] uncounted.
fn chain_hop(
    tx: &mut TxnCore<'_, RsiEntry>,
    p: &Pending,
    w: &[u64],
    sees: &impl Fn(u64) -> bool,
) -> Result<Option<Pending>, Abort> {
    let mut walk = p.chain.expect("a walk");
    let e = &tx.entries[p.i];
    let layout = tx.c.catalog.layout(e.table);
    let cid = w[1];
    let payload = &w[OVERFLOW_ENTRY_HEADER_WORDS as usize..];
    let Some(kv) = unseal_version(cid, w[2]) else {
        return Err(Abort::SnapshotTooOld);
    };
    if !payload_intact(e.table, e.key, payload) || payload[P_TAG as usize] != cid {
        return Err(Abort::SnapshotTooOld);
    }
    if kv + 1 == walk.below {
        if sees(cid) {
            let found = Pending {
                cid,
                version: walk.incarnation_bits | kv,
                chain: None,
                ..*p
            };
            take_payload(tx, &found, payload)?;
            return Ok(None);
        }
        walk.below = kv;
    } else if kv < walk.below {
        // The version between was overwritten before the mover copied it.
        return Err(Abort::SnapshotTooOld);
    }
    walk.hops += 1;
    let next = w[0];
    if next == 0 || next > layout.overflow_entries as u64 || walk.hops >= OVERFLOW_HOPS_MAX {
        return Err(Abort::SnapshotTooOld);
    }
    walk.entry = (next - 1) as u32;
    Ok(Some(Pending {
        chain: Some(walk),
        ..*p
    }))
}

/// The old slot holding the oldest version of block `w` (a never-written one first), by
/// version: a record's versions rise with its commits, whereas commit ids rise with them
/// only under RSI (NAM-DB's are `⟨slot, ts⟩`, unordered across slots: ranking by them
/// evicted a newer version and kept an older one, a stale read found by the seeds with 3
/// versions per block).
fn oldest_slot(layout: &TableLayout, w: &[u64]) -> u32 {
    (0..layout.version_slots - 1)
        .min_by_key(|&j| {
            let at = layout.old_header_offset(j) as usize;
            // Every old slot was unsealed by `visible` before (a torn one aborted).
            (
                w[at + 1] != 0,
                unseal_version(w[at], w[at + 1]).unwrap_or(0),
            )
        })
        .expect("a block with older versions has old slots")
}

/// What the lock stage got.
pub enum Lock {
    /// Every record locked; the commit timestamp and the `RTS` read after it.
    Taken { cts: u64, rts_word: u64 },
    /// Some record had moved on or was locked: those locked are to be released, and the
    /// commit timestamp taken still needs its outcome reported.
    Refused {
        abort: Abort,
        cts: u64,
        rts_word: u64,
    },
    /// An op failed: nothing can be said of the records (some may be locked: the run stops
    /// for recovery); no timestamp to report.
    Failed(Abort),
}

/// Locks entries `ws` with one CAS each from `expect(entry)` to locked (or one request per
/// node whose CPU does those CAS), in one doorbell with the commit timestamp's FETCH_ADD
/// and a read of `RTS` behind it (or one request to the service's CPU doing both).
pub async fn lock(
    tx: &mut TxnCore<'_, RsiEntry>,
    ws: &[usize],
    expect: fn(&atoll_txn::Entry<RsiEntry>) -> u64,
) -> Lock {
    let svc = tx.c.ts_service();
    let (by_rpc, ts_rpc) = (rpc(tx, Stage::Lock), rpc(tx, TIMESTAMP));
    let deferred = tx.c.take_deferred();
    let mut d = tx.c.ep.doorbell_for(ws.len() + 3);
    // The previous outcome, if still deferred, goes ahead of the FETCH_ADD on its link.
    if let Some(op) = deferred {
        op.post(&mut d);
    }
    let cas_at = post_locks(tx, &mut d, ws, expect, by_rpc);
    let (fa, rr) = if ts_rpc {
        let j = d.rpc(svc.node, RsiRequest::CommitTs.to_bytes());
        (j, j)
    } else {
        (d.fetch_add(svc.counter(), 1), d.read(svc.rts(), 1))
    };
    let res = match d.submit().await {
        Ok(r) => r,
        Err(e) => {
            // Which CAS took its lock is unknown (the doorbell reports its first failure),
            // and a `[locked | commit id]` word does not name its owner, so no release is
            // safe: locks may stay held, as after a failure past the log. Stop the run for
            // recovery, naming the node.
            tx.failed_after_log.get_or_insert(e);
            return Lock::Failed(tx.op_failed(e));
        }
    };
    let (cts, rts_word) = if ts_rpc {
        let w = words(&res, fa);
        (TsService::cts_of(w[0]), w[1])
    } else {
        (TsService::cts_of(res.fetch_add(fa)), res.read(rr)[0])
    };
    let abort = locks_taken(tx, &res, ws, &cas_at, expect, by_rpc);
    match abort {
        None => Lock::Taken { cts, rts_word },
        Some(abort) => Lock::Refused {
            abort,
            cts,
            rts_word,
        },
    }
}
/// Per written entry, the op whose result is its lock CAS: its own, or its node's request
/// and its place in it.
pub type CasAt = smallvec::SmallVec<[(usize, usize); 16]>;

/// Posts in `d` the lock of each entry of `ws`: one CAS from `expect(entry)` to locked, or
/// one request per node whose CPU does those CAS (`by_rpc`). Where each result will be.
pub fn post_locks(
    tx: &TxnCore<'_, RsiEntry>,
    d: &mut Doorbell<'_>,
    ws: &[usize],
    expect: fn(&atoll_txn::Entry<RsiEntry>) -> u64,
    by_rpc: bool,
) -> CasAt {
    // Per entry, the op whose result is its CAS: its own, or its node's request and its
    // place in it.
    let mut cas_at = CasAt::new();
    if by_rpc {
        let mut at = vec![(0, 0); ws.len()];
        for n in stages::nodes_of(tx, ws) {
            // The op index this node's request gets.
            let j = d.len();
            let mut items = Vec::new();
            for (k, &i) in ws.iter().enumerate() {
                let e = &tx.entries[i];
                if e.node == n {
                    let from = expect(e);
                    at[k] = (j, items.len());
                    items.push(LockChange {
                        table: e.table,
                        loc: e.slot(),
                        from,
                        to: from | CID_LOCKED,
                    });
                }
            }
            let posted = d.rpc(n, RsiRequest::Lock { items }.to_bytes());
            debug_assert_eq!(posted, j, "a doorbell numbers its ops in order");
        }
        cas_at.extend(at);
    } else {
        for &i in ws {
            let e = &tx.entries[i];
            let old = expect(e);
            let ptr =
                tx.c.catalog
                    .record_ptr(e.table, e.node, e.slot())
                    .add(H_LOCK);
            cas_at.push((d.cas(ptr, old, old | CID_LOCKED), 0));
        }
    }
    cas_at
}

/// Marks the entries of `ws` whose lock [`post_locks`] took, from results `res`; the abort
/// if any was refused: locked by another (`LockBusy`) or moved on since it was read
/// (`ValidationFailed`, first committer wins).
pub fn locks_taken(
    tx: &mut TxnCore<'_, RsiEntry>,
    res: &Completions,
    ws: &[usize],
    cas_at: &CasAt,
    expect: fn(&atoll_txn::Entry<RsiEntry>) -> u64,
    by_rpc: bool,
) -> Option<Abort> {
    let mut replies: Vec<(usize, Vec<u64>)> = Vec::new();
    let mut abort = None;
    for (k, &i) in ws.iter().enumerate() {
        let (j, at) = cas_at[k];
        let seen = if by_rpc {
            if !replies.iter().any(|r| r.0 == j) {
                replies.push((j, words(res, j)));
            }
            replies.iter().find(|r| r.0 == j).expect("just added").1[at]
        } else {
            res.cas(j)
        };
        let e = &mut tx.entries[i];
        if seen == expect(e) {
            e.locked = true;
        } else if seen & CID_LOCKED != 0 {
            abort.get_or_insert(Abort::LockBusy);
        } else {
            // First committer wins: another transaction committed the record since.
            abort = Some(Abort::ValidationFailed);
        }
    }
    abort
}

/// The attempt commits at `cts`: its tag becomes `cts`, and each payload it writes is
/// sealed with it, so the payload names the commit id its `LOCK` word will hold.
pub fn stamp(tx: &mut TxnCore<'_, RsiEntry>, ws: &[usize], cts: u64) {
    tx.commit_ts = Timestamp::from_word(cts);
    tx.tag = cts;
    for &i in ws {
        let e = &mut tx.entries[i];
        e.data[P_TAG as usize] = cts;
        e.data[P_CHECK as usize] = payload_check(e.table, e.key, cts, e.user_words());
    }
}

/// Installs the locked entries `ws` at `cts`: payload, version, then `LOCK` = `cts`, which
/// unlocks (ops to one node execute in order; own-node records are stored in place in the
/// same order; a request does the same steps on its node's CPU).
pub async fn install(tx: &mut TxnCore<'_, RsiEntry>, ws: &[usize], cts: u64) {
    let (by_rpc, ts_rpc) = (rpc(tx, Stage::Commit), rpc(tx, TIMESTAMP));
    let c = &*tx.c;
    let mut d = c.ep.doorbell_for(ws.len() * 5 + 1);
    // The next attempt's snapshot, read beside the installs: every commit below it had
    // finished before this read, so whatever the next attempt reads after it shows them.
    let rts = post_rts(&mut d, &c.ts_service(), ts_rpc);
    let asked = post_installs(tx, &mut d, ws, cts, by_rpc);
    let r = d.submit().await;
    if let Ok(res) = &r {
        expect_ok(res, &asked, "an install");
        tx.c.next_snapshot = Some(TsService::snapshot_of(rts_word(res, rts, ts_rpc)));
    }
    // An op that failed here is after the log: recorded, and the driver stops the run.
    let _ = tx.unabortable(r);
    installed(tx, ws);
}

/// Posts in `d` the installs of the locked entries `ws` at `cts`: per record the version
/// read moved into its oldest slot (records keeping older versions), the payload, the
/// version, then `LOCK` = `cts`, which unlocks (ops to one node execute in order; own-node
/// records are stored in place in the same order); or with `by_rpc` one request per node
/// doing the same steps on its CPU. The requests' op indexes.
pub fn post_installs(
    tx: &TxnCore<'_, RsiEntry>,
    d: &mut Doorbell<'_>,
    ws: &[usize],
    cts: u64,
    by_rpc: bool,
) -> Idxs {
    let c = &*tx.c;
    for &i in ws {
        let e = &tx.entries[i];
        let layout = c.catalog.layout(e.table);
        // With older versions kept, the version read (the current one: the lock's CAS
        // proved it) moves to the oldest slot first.
        let old_slot_words = match layout.version_slots {
            1 => 0,
            _ => (OLD_SLOT_HEADER_WORDS + layout.payload_words) as usize,
        };
        assert_eq!(
            e.state.old_slot.len(),
            old_slot_words,
            "rsi: the install of {:?} key {} lacks the version it read",
            e.table,
            e.key
        );
    }
    let mut asked = Idxs::new();
    if by_rpc {
        let posted = post_per_node(tx, d, ws, |tx, on| RsiRequest::Install {
            cts,
            items: on
                .iter()
                .map(|&i| {
                    let e = &tx.entries[i];
                    InstallItem {
                        table: e.table,
                        loc: e.slot(),
                        version: e.version + 1,
                        evict: e.state.evict,
                        old_slot: Words::from_slice(&e.state.old_slot),
                        payload: Words::from_slice(&e.data),
                    }
                })
                .collect(),
        });
        asked.extend(posted.into_iter().map(|(j, _)| j));
    } else {
        for &i in ws {
            let e = &tx.entries[i];
            let ptr = c.catalog.record_ptr(e.table, e.node, e.slot());
            if !e.state.old_slot.is_empty() {
                // `[commit id, version, payload]` before the head changes, so a snapshot
                // that needs it still finds it while the head is rewritten.
                let layout = c.catalog.layout(e.table);
                for (at, words) in old_slot_writes(layout, e.state.evict, &e.state.old_slot) {
                    if !words.is_empty() {
                        put(c, d, e.node, ptr.add(at), words);
                    }
                }
            }
            put(c, d, e.node, ptr.add(HEADER_WORDS), &e.data);
            put(c, d, e.node, ptr.add(H_VERSION), &[e.version + 1]);
            put(c, d, e.node, ptr.add(H_LOCK), &[cts]);
        }
    }
    asked
}

/// Marks the entries `ws` installed (their new version) and unlocked.
pub fn installed(tx: &mut TxnCore<'_, RsiEntry>, ws: &[usize]) {
    for &i in ws {
        let e = &mut tx.entries[i];
        e.installed = Some(e.version + 1);
        e.locked = false;
    }
}

/// Deletes the locked entries `del`, committing at commit id `cid`: one request per node,
/// whose CPU marks each record absent at its next version (the indexes change: one of the
/// few steps the design keeps two-sided) and then unlocks it at `cid`. A reader that finds
/// a record absent tells by that commit id whether its snapshot includes the deletion
/// ([`take_version`]).
pub async fn delete(tx: &mut TxnCore<'_, RsiEntry>, del: &[usize], cid: u64) {
    if del.is_empty() {
        return;
    }
    let mut d = tx.c.ep.doorbell_for(del.len());
    let mine = post_per_node(tx, &mut d, del, |tx, on| RsiRequest::Delete {
        cid,
        items: on
            .iter()
            .map(|&i| {
                let e = &tx.entries[i];
                DeleteItem {
                    table: e.table,
                    loc: e.slot(),
                    key: e.key,
                }
            })
            .collect(),
    });
    let r = d.submit().await;
    if let Ok(res) = &r {
        for (j, on) in &mine {
            let versions = words(res, *j);
            assert_eq!(
                versions.len(),
                on.len(),
                "rsi: node {} answered {} deletions for {}",
                tx.entries[on[0]].node.0,
                versions.len(),
                on.len()
            );
            for (&i, v) in on.iter().zip(versions) {
                tx.entries[i].installed = Some(v);
            }
        }
    }
    // An op that failed here is after the log: recorded, and the driver stops the run.
    let failed = tx.unabortable(r).is_none();
    for &i in del {
        let (t, n, k) = (tx.entries[i].table, tx.entries[i].node, tx.entries[i].key);
        tx.c.forget_loc(t, n, k);
        if !failed {
            tx.entries[i].locked = false;
        }
    }
}

/// Asserts that requests `asked` were answered `Ok`: this coordinator sends only requests
/// its participant accepts (records it holds locked, payloads of the table's size).
fn expect_ok(res: &Completions, asked: &[usize], what: &str) {
    for &j in asked {
        let reply = atoll_txn::msg::Reply::decode(res.rpc(j));
        assert!(
            matches!(reply, Ok(atoll_txn::msg::Reply::Ok)),
            "rsi: {what} was answered {reply:?}"
        );
    }
}

/// Sets the `LOCK` words of entries, each `(entry, from, to)`: stores of `to` (one-sided:
/// only this attempt can hold the words), or with `by_rpc` one request per node whose CPU
/// swaps each from `from` to `to`.
async fn set_locks(tx: &mut TxnCore<'_, RsiEntry>, by_rpc: bool, changes: &[(usize, u64, u64)]) {
    if changes.is_empty() {
        return;
    }
    let c = &*tx.c;
    let mut d = c.ep.doorbell_for(changes.len());
    let mut asked = Idxs::new();
    if by_rpc {
        let idxs: Idxs = changes.iter().map(|ch| ch.0).collect();
        for n in stages::nodes_of(tx, &idxs) {
            let items = changes
                .iter()
                .filter(|ch| tx.entries[ch.0].node == n)
                .map(|&(i, from, to)| {
                    let e = &tx.entries[i];
                    LockChange {
                        table: e.table,
                        loc: e.slot(),
                        from,
                        to,
                    }
                })
                .collect();
            asked.push(d.rpc(n, RsiRequest::SetLock { items }.to_bytes()));
        }
    } else {
        for &(i, _, to) in changes {
            let e = &tx.entries[i];
            let ptr = c.catalog.record_ptr(e.table, e.node, e.slot()).add(H_LOCK);
            put(c, &mut d, e.node, ptr, &[to]);
        }
    }
    let r = d.submit().await;
    if let Ok(res) = &r {
        expect_ok(res, &asked, "a lock change");
    }
    let _ = tx.unabortable(r);
    for &(i, _, _) in changes {
        tx.entries[i].locked = false;
    }
}

/// Writes `data` at `ptr` of node `node`: stored in place when that is the coordinator's
/// own node, else posted in doorbell `d` (ops to one node execute in order, and in-place
/// stores happen in program order, so either way the writes land in the order made).
fn put(c: &Coordinator, d: &mut Doorbell<'_>, node: NodeId, ptr: RemotePtr, data: &[u64]) {
    if c.ep.in_place_on(node) {
        c.ep.write_in_place(ptr, data);
    } else {
        d.write(ptr, Words::from_slice(data));
    }
}

/// Unlocks the records `ins` this attempt inserted (payload and version placed by their
/// nodes, locked with no commit id): `LOCK` = `cts`.
pub async fn unlock_inserted(tx: &mut TxnCore<'_, RsiEntry>, ins: &[usize], cts: u64) {
    let changes: smallvec::SmallVec<[(usize, u64, u64); 8]> =
        ins.iter().map(|&i| (i, CID_LOCKED, cts)).collect();
    let by_rpc = rpc(tx, Stage::Commit);
    set_locks(tx, by_rpc, &changes).await;
}

/// Unlocks the entries of `ws` this attempt locked, back to the commit id they held.
pub async fn release(tx: &mut TxnCore<'_, RsiEntry>, ws: &[usize]) {
    let t0 = tx.now_ns();
    let changes: smallvec::SmallVec<[(usize, u64, u64); 8]> = ws
        .iter()
        .filter(|&&i| tx.entries[i].locked)
        .map(|&i| {
            let cid = tx.entries[i].state.cid;
            (i, cid | CID_LOCKED, cid)
        })
        .collect();
    let by_rpc = rpc(tx, Stage::Release);
    set_locks(tx, by_rpc, &changes).await;
    for &i in ws {
        tx.entries[i].locked = false;
    }
    tx.charge(Stage::Release, t0);
}

/// Reports that `cts` finished (committed or aborted): deferred to the coordinator's next
/// doorbell to the service, once its ring slot is free (`RTS` read as `rts_word` says so, or
/// a re-read of it does).
pub async fn report(tx: &mut TxnCore<'_, RsiEntry>, svc: &TsService, cts: u64, rts_word: u64) {
    let ts_rpc = rpc(tx, TIMESTAMP);
    let mut rts_word = rts_word;
    let mut rounds = 0;
    while !svc.fits_ring(cts, rts_word) {
        rounds += 1;
        if rounds > RING_WAIT_ROUNDS_MAX {
            // The service stopped consuming outcomes (its node is stalled or gone): the
            // run cannot go on consistently, so it stops naming the node.
            let e = atoll_fabric::OpError {
                node: svc.node,
                kind: atoll_fabric::FailureKind::TimedOut,
            };
            tx.failed_after_log.get_or_insert(e);
            return;
        }
        tx.c.ep.sleep(RING_WAIT_NS).await;
        let mut d = tx.c.ep.doorbell_for(1);
        let j = post_rts(&mut d, svc, ts_rpc);
        match d.submit().await {
            Ok(res) => rts_word = self::rts_word(&res, j, ts_rpc),
            Err(e) => {
                tx.failed_after_log.get_or_insert(e);
                return;
            }
        }
    }
    tx.c.defer(if ts_rpc {
        Deferred::Rpc(svc.node, RsiRequest::Outcome { cts }.to_bytes())
    } else {
        Deferred::Write(svc.slot(cts), cts)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsi_an_old_slot_read_torn_across_a_rewrite_is_refused_by_its_version_seal() {
        let (old_cid, new_cid) = (17, 4242);
        let (old_word, new_word) = (seal_version(old_cid, 3), seal_version(new_cid, 5));
        assert_eq!(unseal_version(old_cid, old_word), Some(3));
        assert_eq!(unseal_version(new_cid, new_word), Some(5));
        assert_ne!(old_word, 0, "a written slot's version word is never 0");
        // A READ straddling the rewrite: one commit id beside the other's version word.
        assert_eq!(unseal_version(new_cid, old_word), None);
        assert_eq!(unseal_version(old_cid, new_word), None);
        assert_eq!(
            unseal_version(new_cid | CID_LOCKED, new_word),
            Some(5),
            "the lock bit is not part of the commit id"
        );
    }

    #[test]
    fn namdb_headers_apart_choose_an_old_version_from_the_headers_alone() {
        use atoll_storage::layout::TableSpec;
        use atoll_storage::Partition;
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 5,
            capacity_per_node: 4,
            capacity_max_per_node: Some(4),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        let mut layout = TableLayout::with_versions(&spec, 3);
        layout.old_versions = OldVersions::HeadersApart;
        // What one READ of the head and the headers returns: no old payload in it.
        let mut w = vec![0u64; layout.headers_words() as usize];
        assert!(w.len() < layout.record_words as usize);
        w[H_LOCK as usize] = 30;
        w[H_VERSION as usize] = 3;
        for (j, (cid, version)) in [(20, 2), (10, 1)].into_iter().enumerate() {
            let at = layout.old_header_offset(j as u32) as usize;
            w[at] = cid;
            w[at + 1] = seal_version(cid, version);
        }
        let by_cid = |cid: u64, _| cid;
        let now = visible(&layout, &w, |_| true, by_cid).unwrap().unwrap();
        assert_eq!(
            now,
            (30, 3, HEADER_WORDS as usize),
            "the head, within the READ"
        );
        let old = visible(&layout, &w, |cid| cid < 30, by_cid)
            .unwrap()
            .unwrap();
        assert_eq!((old.0, old.1), (20, 2));
        assert_eq!(old.2, layout.old_payload_offset(0) as usize);
        assert!(old.2 >= w.len(), "an old payload takes a second READ");
        assert_eq!(visible(&layout, &w, |cid| cid < 10, by_cid).unwrap(), None);
        // A header torn across its rewrite is refused before any payload is fetched.
        w[layout.old_header_offset(1) as usize] = 25;
        assert!(visible(&layout, &w, |cid| cid < 30, by_cid).is_err());
        // An install writes the moved payload before the header naming it.
        let old_slot: Vec<u64> = (0..2 + layout.payload_words as u64).collect();
        let writes = old_slot_writes(&layout, 1, &old_slot);
        assert_eq!(writes[0], (layout.old_payload_offset(1), &old_slot[2..]));
        assert_eq!(writes[1], (layout.old_header_offset(1), &old_slot[..2]));
    }

    #[test]
    fn rsi_a_reclaimed_slots_old_versions_keep_the_heads_incarnation_under_their_seal() {
        use atoll_storage::layout::{make_version, TableSpec};
        use atoll_storage::Partition;
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 3,
            capacity_per_node: 4,
            capacity_max_per_node: Some(4),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        let layout = TableLayout::with_versions(&spec, 2);
        // A slot at incarnation 2 (reclaimed twice), key version 7 in the head under commit
        // id 900, key version 6 in the old slot under commit id 800: a version word above
        // the seal's bits, which the seal once refused with a panic.
        let (head, old) = (make_version(2, 7), make_version(2, 6));
        let mut w = vec![0u64; layout.record_words as usize];
        w[H_LOCK as usize] = 900;
        w[H_VERSION as usize] = head;
        let at = layout.old_slot_offset(0) as usize;
        w[at] = 800;
        w[at + 1] = seal_version(800, old);
        let all = visible(&layout, &w, |_| true, |cid, _| cid).unwrap();
        assert_eq!(all.map(|v| (v.0, v.1)), Some((900, head)));
        let before = visible(&layout, &w, |cid| cid < 900, |cid, _| cid).unwrap();
        assert_eq!(
            before.map(|v| (v.0, v.1)),
            Some((800, old)),
            "the old slot's version is the head's incarnation with its own key version"
        );
    }
}
