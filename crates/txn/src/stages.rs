//! The building blocks shared by several protocol families, each in a one-sided and an RPC
//! form: locate, read, lock, validate, log, write back, release, insert/delete. A protocol
//! composes them in its order with its own stages (in its family's module) and passes the
//! primitive its plan names for the stage.
//!
//! Every function works on a set of entry indices and posts one doorbell for the whole set
//! (several nodes at once), so a stage costs one round trip where the protocol allows.

use crate::abort::Abort;
use crate::coord::{Access, Entry, EntryState, TxnCore};
use crate::msg::{Item, Loc, Reply, ReplyView, Request, TupleRef, TuplesReader, WriteBack};
use crate::plan::{Primitive, Stage};
use crate::ts::Timestamp;
use crate::Idxs;
use atoll_fabric::{Completions, NodeId, Words};
use atoll_storage::layout::{
    IndexWalk, TableLayout, WalkStep, GROUP_WORDS, HEADER_WORDS, H_KEY, H_LOCK, H_RTS, H_VERSION,
    H_WTS, RTS_FROZEN, VERSION_ABSENT,
};

/// Ops a one-sided write-back posts per record in the common case (payload, version,
/// unlock), for sizing its doorbell; MVCC's version moves and SUNDIAL's leases add some.
const WRITE_BACK_OPS_PER_RECORD: usize = 3;

/// Decodes a participant's reply; a reply that does not decode is a bug on our own side.
pub fn decode(b: &[u8]) -> Reply {
    match Reply::decode(b) {
        Ok(r) => r,
        Err(e) => panic!("participant sent an undecodable reply: {e}"),
    }
}

/// Nodes touched by `idxs`, each once, in first-seen order.
pub fn nodes_of<S: EntryState>(
    tx: &TxnCore<'_, S>,
    idxs: &[usize],
) -> smallvec::SmallVec<[NodeId; 8]> {
    let mut ns = smallvec::SmallVec::new();
    for &i in idxs {
        let n = tx.entries[i].node;
        if !ns.contains(&n) {
            ns.push(n);
        }
    }
    ns
}

/// The nodes a stage sent one request each to, in the order of its doorbell's results.
pub type StageNodes = smallvec::SmallVec<[NodeId; 8]>;

/// The entries among `idxs` whose records live on `n`, in `idxs` order: the order a
/// request to `n` built by [`rpc_per_node`] names them, and its reply answers them.
pub fn on_node<S: EntryState>(tx: &TxnCore<'_, S>, idxs: &[usize], n: NodeId) -> Idxs {
    idxs.iter()
        .copied()
        .filter(|&i| tx.entries[i].node == n)
        .collect()
}

/// The RPC form of a stage over records: one request per node holding some of `idxs`
/// (`build` from that node's items, in `idxs` order), all in one doorbell. Returns the
/// nodes and the doorbell's results: reply `j` is `nodes[j]`'s, read in place with
/// [`view`], answering [`on_node`]'s entries.
pub async fn rpc_per_node<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    build: impl Fn(&[Item]) -> Vec<u8>,
) -> Result<(StageNodes, Completions), Abort> {
    let (nodes, d) = rpc_doorbell(tx, idxs, build);
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    Ok((nodes, res))
}

/// As [`rpc_per_node`], keeping the replies of the nodes that answered when one failed
/// ([`atoll_fabric::Doorbell::submit_partial`]): with the abort of that failure.
pub async fn rpc_per_node_partial<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    build: impl Fn(&[Item]) -> Vec<u8>,
) -> (StageNodes, Completions, Result<(), Abort>) {
    let (nodes, d) = rpc_doorbell(tx, idxs, build);
    match d.submit_partial().await {
        Ok(res) => (nodes, res, Ok(())),
        Err((e, res)) => {
            let a = tx.op_failed(e);
            (nodes, res, Err(a))
        }
    }
}

/// The doorbell of [`rpc_per_node`]: one request per node holding some of `idxs`.
fn rpc_doorbell<'t, S: EntryState>(
    tx: &'t TxnCore<'_, S>,
    idxs: &[usize],
    build: impl Fn(&[Item]) -> Vec<u8>,
) -> (StageNodes, atoll_fabric::Doorbell<'t>) {
    let nodes = nodes_of(tx, idxs);
    let mut d = tx.c.ep.doorbell_for(nodes.len());
    let mut items = smallvec::SmallVec::<[Item; 16]>::new();
    for &n in &nodes {
        items.clear();
        items.extend(
            idxs.iter()
                .filter(|&&i| tx.entries[i].node == n)
                .map(|&i| item(tx, i)),
        );
        d.rpc(n, build(&items));
    }
    (nodes, d)
}

/// A participant's reply read in place; one that does not decode is a bug on our side.
pub fn view(b: &[u8]) -> ReplyView<'_> {
    match ReplyView::new(b) {
        Ok(r) => r,
        Err(e) => panic!("participant sent an undecodable reply: {e}"),
    }
}

/// The entries of node `n`'s `Tuples` reply for `mine`, one per entry in order; a reply
/// with another count, or that does not decode, is a bug on our side.
pub fn tuples_for<'a, 'm>(
    mut r: TuplesReader<'a>,
    mine: &'m [usize],
    n: NodeId,
) -> impl Iterator<Item = (usize, Option<TupleRef<'a>>)> + use<'a, 'm> {
    assert_eq!(
        r.left(),
        mine.len(),
        "node {} answered {} tuples for {} records",
        n.0,
        r.left(),
        mine.len()
    );
    mine.iter().map(move |&i| match r.next() {
        Some(Ok(t)) => (i, t),
        Some(Err(e)) => panic!("participant sent an undecodable reply: {e}"),
        None => unreachable!("counted above"),
    })
}

/// Entry `i` as a request names it.
pub fn item<S: EntryState>(tx: &TxnCore<'_, S>, i: usize) -> Item {
    let e = &tx.entries[i];
    Item {
        table: e.table,
        key: e.key,
        loc: e.loc,
    }
}

/// Finds entry `i`'s record slot by walking its own node's index in place (the same walk
/// the READs below take, without copying a group through a verb).
fn locate_in_place<S: EntryState>(tx: &mut TxnCore<'_, S>, i: usize) -> Result<(), Abort> {
    let e = &tx.entries[i];
    let layout = tx.c.catalog.layout(e.table);
    let mut walk = IndexWalk::start(layout, e.key_hash, tx.c.catalog.index_hint(e.table, e.node));
    // The walk bounds itself (every group and level at most once).
    loop {
        let ptr = tx.c.catalog.group_ptr(e.table, e.node, walk.group());
        let region = tx.c.ep.local_memory().region(ptr.region);
        let at = ptr.offset_words as usize;
        // One bounds check for the group, none per word (`w` < GROUP_WORDS).
        let words: &[std::sync::atomic::AtomicU64; GROUP_WORDS as usize] = region
            .span("index group probe", at, GROUP_WORDS as usize)
            .try_into()
            .expect("a span of GROUP_WORDS words");
        match walk.step(layout, e.key, e.key_hash, |w| {
            words[w as usize].load(std::sync::atomic::Ordering::Acquire)
        }) {
            WalkStep::Found(loc) => {
                tx.c.catalog.note_level(e.table, e.node, walk.level());
                // The record's lines asked for now, as each key is found: the stage after
                // this one touches every record in turn, and their misses overlap.
                let slot = tx.c.catalog.record_ptr(e.table, e.node, loc);
                tx.c.ep.prefetch_in_place(slot, layout.record_words);
                tx.entries[i].loc = Some(Loc(loc));
                return Ok(());
            }
            WalkStep::Absent => return Err(Abort::NotFound),
            WalkStep::Read(_) => {}
        }
    }
}

/// Finds the record slots of entries not yet located: its own node's in place where the
/// backend allows it, others with one-sided READs of hash-index groups (the location cache
/// is consulted when an entry is added).
pub async fn locate<S: EntryState>(tx: &mut TxnCore<'_, S>, idxs: &[usize]) -> Result<(), Abort> {
    let (me, inline) = (tx.c.node(), tx.c.ep.local_inline());
    // Own-node entries to locate in place, whose first groups' lines are all asked for
    // first: their misses overlap.
    let mut here: smallvec::SmallVec<[usize; 16]> = smallvec::SmallVec::new();
    if inline {
        for &i in idxs {
            let e = &tx.entries[i];
            if e.loc.is_none() && e.node == me {
                let layout = tx.c.catalog.layout(e.table);
                let walk =
                    IndexWalk::start(layout, e.key_hash, tx.c.catalog.index_hint(e.table, e.node));
                tx.c.ep.prefetch_in_place(
                    tx.c.catalog.group_ptr(e.table, e.node, walk.group()),
                    GROUP_WORDS,
                );
                here.push(i);
            }
        }
    }
    for &i in &here {
        locate_in_place(tx, i)?;
    }
    let mut todo = Idxs::new();
    for &i in idxs {
        let e = &tx.entries[i];
        if e.loc.is_none() {
            debug_assert!(
                !(inline && e.node == me),
                "{:?} key {} of this node was not located in place",
                e.table,
                e.key
            );
            todo.push(i);
        }
    }
    let mut walks: smallvec::SmallVec<[IndexWalk; 16]> = todo
        .iter()
        .map(|&i| {
            let e = &tx.entries[i];
            IndexWalk::start(
                tx.c.catalog.layout(e.table),
                e.key_hash,
                tx.c.catalog.index_hint(e.table, e.node),
            )
        })
        .collect();
    // Each walk bounds itself (every group and level at most once), so this loop ends.
    while !todo.is_empty() {
        let mut d = tx.c.ep.doorbell_for(todo.len());
        for (j, &i) in todo.iter().enumerate() {
            let e = &tx.entries[i];
            d.read(
                tx.c.catalog.group_ptr(e.table, e.node, walks[j].group()),
                GROUP_WORDS,
            );
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        let mut next: Idxs = Idxs::new();
        let mut next_walks = smallvec::SmallVec::<[IndexWalk; 16]>::new();
        for (j, &i) in todo.iter().enumerate() {
            let e = &tx.entries[i];
            let layout = tx.c.catalog.layout(e.table);
            let words = res.read(j);
            let mut walk = walks[j];
            match walk.step(layout, e.key, e.key_hash, |w| words[w as usize]) {
                WalkStep::Found(loc) => {
                    let (t, n, k) = (e.table, e.node, e.key);
                    tx.c.catalog.note_level(t, n, walk.level());
                    tx.entries[i].loc = Some(Loc(loc));
                    tx.c.cache_loc(t, n, k, Loc(loc));
                }
                WalkStep::Absent => return Err(Abort::NotFound),
                WalkStep::Read(_) => {
                    next.push(i);
                    next_walks.push(walk);
                }
            }
        }
        todo = next;
        walks = next_walks;
    }
    Ok(())
}

/// Checks a one-sided tuple READ against the entry: right key and live. On a stale cached
/// location, forgets it so the retry looks the key up again.
pub fn check_tuple<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    i: usize,
    w: &[u64],
) -> Result<(), Abort> {
    let e = &tx.entries[i];
    if w[H_KEY as usize] != e.key || w[H_VERSION as usize] & VERSION_ABSENT != 0 {
        let (t, n, k) = (e.table, e.node, e.key);
        tx.c.forget_loc(t, n, k);
        tx.entries[i].loc = None;
        return Err(Abort::NotFound);
    }
    Ok(())
}

/// Takes a tuple a participant returned for entry `i`: location, version, the family's
/// view of its timestamps, and its payload if it carries one.
pub fn apply_tuple<S: EntryState>(tx: &mut TxnCore<'_, S>, i: usize, t: &TupleRef<'_>) {
    let e = &mut tx.entries[i];
    let h = t.head;
    e.loc = Some(h.loc);
    e.version = h.version;
    e.state.saw(h.wts, h.rts & !RTS_FROZEN, None);
    if !t.data_is_empty() {
        e.fill_words(h.version, t.data());
    }
    let (tb, n, k, l) = (e.table, e.node, e.key, h.loc);
    tx.c.cache_loc(tb, n, k, l);
}

/// Reads records without locking (OCC's fetch). Aborts with `Conflict` if a record is
/// locked by another transaction (a writer is committing it).
pub async fn read<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    prim: Primitive,
) -> Result<(), Abort> {
    if idxs.is_empty() {
        return Ok(());
    }
    let ts = tx.ts;
    match prim {
        Primitive::OneSided => {
            locate(tx, idxs).await?;
            let (me, inline) = (tx.c.node(), tx.c.ep.local_inline());
            let mut remote = Idxs::new();
            for &i in idxs {
                if inline && tx.entries[i].node == me {
                    read_in_place(tx, i)?;
                } else {
                    remote.push(i);
                }
            }
            if remote.is_empty() {
                return Ok(());
            }
            let mut d = tx.c.ep.doorbell_for(remote.len());
            for &i in &remote {
                let e = &tx.entries[i];
                let words = tx.c.catalog.layout(e.table).tuple_words;
                d.read(tx.c.catalog.record_ptr(e.table, e.node, e.slot()), words);
            }
            let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
            for (j, &i) in remote.iter().enumerate() {
                let w = res.read(j);
                check_tuple(tx, i, w)?;
                let lock = w[H_LOCK as usize];
                if ts.held_by_other(lock) {
                    return Err(Abort::Conflict);
                }
                let e = &mut tx.entries[i];
                e.version = w[H_VERSION as usize];
                e.fill(e.version, &w[HEADER_WORDS as usize..]);
            }
        }
        Primitive::Rpc => {
            let (nodes, res) = rpc_per_node(tx, idxs, Request::read_bytes).await?;
            for (j, &n) in nodes.iter().enumerate() {
                let mine = on_node(tx, idxs, n);
                let ReplyView::Tuples(tuples) = view(res.rpc(j)) else {
                    panic!("read: unexpected reply from node {}", n.0)
                };
                for (i, t) in tuples_for(tuples, &mine, n) {
                    let t = t.ok_or(Abort::NotFound)?;
                    if ts.held_by_other(t.head.lock) {
                        return Err(Abort::Conflict);
                    }
                    apply_tuple(tx, i, &t);
                }
            }
        }
    }
    Ok(())
}

/// Reads entry `i`'s record, on this node, in place: what a one-sided READ of the tuple
/// does (the same word loads in the same ascending order, so the same torn and concurrent
/// reads are possible and caught the same way), with the payload copied once, straight into
/// the entry, and no op or completion built (issue #9). Counted as a local READ.
fn read_in_place<S: EntryState>(tx: &mut TxnCore<'_, S>, i: usize) -> Result<(), Abort> {
    let e = &tx.entries[i];
    let payload_words = (tx.c.catalog.layout(e.table).tuple_words - HEADER_WORDS) as usize;
    let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
    let at = ptr.offset_words as usize;
    let mut head = [0u64; HEADER_WORDS as usize];
    tx.c.ep.load_in_place(ptr, &mut head);
    check_tuple(tx, i, &head)?;
    if tx.ts.held_by_other(head[H_LOCK as usize]) {
        return Err(Abort::Conflict);
    }
    let region = tx.c.ep.local_memory().region(ptr.region);
    let e = &mut tx.entries[i];
    e.version = head[H_VERSION as usize];
    e.fill_from_region(e.version, region, at + HEADER_WORDS as usize, payload_words);
    Ok(())
}

/// How [`lock`] locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOpts {
    pub primitive: Primitive,
    /// Also fetch each record's payload (a multi-version record whole).
    pub with_data: bool,
    /// Also freeze each record's `RTS` (SUNDIAL, MVCC writers), thawed at release.
    pub freeze_rts: bool,
    /// One-sided, on a retry: look at the lock words first ([`peek_locks`]) and abort
    /// without taking any lock while one is held. Pays where a lock stage is the
    /// transaction's first step (NOWAIT's fetch); where it follows reads (OCC's, SUNDIAL's
    /// commit) its extra round trip widens the window validation checks, and MVCC's aborted
    /// attempts leave their `RTS` raises behind, so faster retries fail more writers.
    pub peek_on_retry: bool,
}

/// Locks records for this transaction (exclusive), optionally fetching them. Every entry
/// locked is marked, so a failure part-way leaves `rollback` able to release exactly those.
/// The version word is always refreshed, so callers can compare it with what they read.
///
/// One-sided with `peek_on_retry`, a retry first looks at the lock words ([`peek_locks`])
/// and aborts with `LockBusy` while any is held, without taking one: an RPC participant
/// refuses a lock request whole, but one-sided CASes issued together grab every lock that
/// was free, and a failed attempt holds those until its co-routine gets the CPU back to
/// release them. With many co-routines on a hot set those partial locks fail everybody
/// else and the abort rate feeds itself (issue #9: NOWAIT one-sided committed 40 tx/s at
/// hot_prob 0.9, 4 nodes x 10 threads x 10 co-routines; failed attempts held ~350 locks at
/// any time, ~4 of their 10 each for ~13 us). A first attempt locks at once, so an
/// uncontended lock stays one round trip. A lock stage that fails freezes nothing: it only
/// gives back what it took, a round trip sooner.
pub async fn lock<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    opts: LockOpts,
) -> Result<(), Abort> {
    if idxs.is_empty() {
        return Ok(());
    }
    let LockOpts {
        primitive: prim,
        with_data: want_data,
        freeze_rts: freeze,
        peek_on_retry,
    } = opts;
    // The lock word holds the owner's timestamp.
    let ts = tx.ts.word();
    match prim {
        Primitive::OneSided => {
            locate(tx, idxs).await?;
            if peek_on_retry && tx.retry {
                peek_locks(tx, idxs).await?;
            }
            let mut outcome = Ok(());
            let mut to_freeze: smallvec::SmallVec<[(usize, u64); 8]> = smallvec::SmallVec::new();
            // Own-node records first, in place: the CAS, then the READ that follows it in
            // the doorbell. The first refusal ends the stage before any other lock is taken
            // (the stage fails either way; its caller releases what it took).
            let mut remote = 0;
            for &i in idxs {
                let e = &tx.entries[i];
                if !tx.c.ep.in_place_on(e.node) {
                    remote += 1;
                    continue;
                }
                let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
                if tx.c.ep.cas_in_place(ptr.add(H_LOCK), 0, ts) != 0 {
                    outcome = Err(Abort::LockBusy);
                    break;
                }
                if let Err(a) = lock_read_in_place(tx, i, ptr, want_data, freeze, &mut to_freeze) {
                    // Locked a slot that no longer holds the key (a stale cached location):
                    // give it back, since the entry has forgotten that location.
                    tx.c.ep.write_in_place(ptr.add(H_LOCK), &[0]);
                    outcome = Err(a);
                    break;
                }
            }
            if outcome.is_ok() && remote > 0 {
                outcome = lock_remote(tx, idxs, ts, want_data, freeze, &mut to_freeze).await;
            }
            // A failed lock stage only releases what it took: freezing first would hold
            // those locks another round trip.
            outcome?;
            if to_freeze.is_empty() {
                // Most lock stages freeze nothing: skip building the freezing future (a
                // move of its state per lock stage).
                return Ok(());
            }
            freeze_one_sided(tx, to_freeze).await
        }
        Primitive::Rpc => {
            let build = |items: &[Item]| Request::lock_bytes(ts, want_data, freeze, items);
            lock_by_rpc(tx, idxs, build, freeze).await
        }
    }
}

/// Words a one-sided lock READs of a record: a multi-version record whole (an MVCC
/// write-back moves the current version into the oldest of the slots this READ returns),
/// else the tuple with its data or only the header.
fn lock_read_words(layout: &TableLayout, want_data: bool) -> u32 {
    match (want_data, layout.version_slots > 1) {
        (true, true) => layout.record_words,
        (true, false) => layout.tuple_words,
        (false, _) => HEADER_WORDS,
    }
}

/// Takes what a lock's READ `w` of entry `i` (whose CAS succeeded) returned: the entry is
/// locked at that version, with the payload if `want_data`, its family shown the record's
/// timestamps, and its `RTS` queued for freezing. A READ showing another key or an absent
/// record (a stale location) fails with `NotFound` and takes nothing.
fn take_locked<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    i: usize,
    w: &[u64],
    want_data: bool,
    freeze: bool,
    to_freeze: &mut smallvec::SmallVec<[(usize, u64); 8]>,
) -> Result<(), Abort> {
    check_tuple(tx, i, w)?;
    let e = &mut tx.entries[i];
    e.locked = true;
    e.version = w[H_VERSION as usize];
    let mut whole = None;
    if want_data {
        let tuple = tx.c.catalog.layout(e.table).tuple_words as usize;
        e.fill(e.version, &w[HEADER_WORDS as usize..tuple]);
        if w.len() > tuple {
            whole = Some(w);
        }
    }
    e.state
        .saw(w[H_WTS as usize], w[H_RTS as usize] & !RTS_FROZEN, whole);
    if freeze {
        to_freeze.push((i, w[H_RTS as usize]));
    }
    Ok(())
}

/// Words of a whole multi-version record a lock reads in place without a heap buffer: four
/// version slots of records up to ~100 bytes.
const WHOLE_RECORD_WORDS_INLINE: usize = 96;

/// The READ that follows a successful lock CAS on an own-node record, in place: the same
/// words in the same ascending order; a single-version payload goes straight into the
/// entry (one copy), a multi-version record is read whole as the verb returns it.
fn lock_read_in_place<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    i: usize,
    ptr: atoll_fabric::RemotePtr,
    want_data: bool,
    freeze: bool,
    to_freeze: &mut smallvec::SmallVec<[(usize, u64); 8]>,
) -> Result<(), Abort> {
    let layout = tx.c.catalog.layout(tx.entries[i].table);
    let words = lock_read_words(layout, want_data);
    if words > layout.tuple_words {
        // On the stack for a typical multi-version record (no allocation per lock).
        let mut whole =
            smallvec::SmallVec::<[u64; WHOLE_RECORD_WORDS_INLINE]>::from_elem(0, words as usize);
        tx.c.ep.load_in_place(ptr, &mut whole);
        return take_locked(tx, i, &whole, want_data, freeze, to_freeze);
    }
    let payload_words = (words - HEADER_WORDS) as usize;
    let mut head = [0u64; HEADER_WORDS as usize];
    tx.c.ep.load_in_place(ptr, &mut head);
    take_locked(tx, i, &head, false, freeze, to_freeze)?;
    if payload_words > 0 {
        let region = tx.c.ep.local_memory().region(ptr.region);
        let at = ptr.offset_words as usize + HEADER_WORDS as usize;
        let e = &mut tx.entries[i];
        e.fill_from_region(e.version, region, at, payload_words);
    }
    Ok(())
}

/// The lock stage's doorbell for the records of `idxs` not accessed in place: CAS then
/// READ per record (RCC §4.2: the READ executes after the CAS at the target, and its data
/// is ignored when the CAS fails).
async fn lock_remote<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    ts: u64,
    want_data: bool,
    freeze: bool,
    to_freeze: &mut smallvec::SmallVec<[(usize, u64); 8]>,
) -> Result<(), Abort> {
    let mut d = tx.c.ep.doorbell_for(2 * idxs.len());
    for &i in idxs {
        let e = &tx.entries[i];
        if tx.c.ep.in_place_on(e.node) {
            continue;
        }
        let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
        d.cas(ptr.add(H_LOCK), 0, ts);
        d.read(
            ptr,
            lock_read_words(tx.c.catalog.layout(e.table), want_data),
        );
    }
    // A node that failed fails the stage, but the locks taken at the others are marked
    // taken, for the caller's release.
    let (res, mut outcome) = match d.submit_partial().await {
        Ok(res) => (res, Ok(())),
        Err((e, res)) => {
            let a = tx.op_failed(e);
            (res, Err(a))
        }
    };
    let mut stale = smallvec::SmallVec::<[atoll_fabric::RemotePtr; 4]>::new();
    let mut j = 0;
    for &i in idxs {
        if tx.c.ep.in_place_on(tx.entries[i].node) {
            continue;
        }
        let (cas, read) = (2 * j, 2 * j + 1);
        j += 1;
        if res.failed(cas) || res.failed(read) {
            continue;
        }
        if res.cas(cas) != 0 {
            outcome = outcome.and(Err(Abort::LockBusy));
            continue;
        }
        let e = &tx.entries[i];
        let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
        if let Err(a) = take_locked(tx, i, res.read(read), want_data, freeze, to_freeze) {
            // Locked a slot that no longer holds the key (a stale cached location): give
            // it back, since the entry has forgotten that location.
            stale.push(ptr);
            outcome = outcome.and(Err(a));
        }
    }
    if !stale.is_empty() {
        let mut d = tx.c.ep.doorbell();
        for p in stale {
            d.write(p.add(H_LOCK), Words::from_slice(&[0]));
        }
        d.submit().await.map_err(|e| tx.op_failed(e))?;
    }
    outcome
}

/// Aborts with `LockBusy` if another transaction holds any of `idxs`' locks, read with one
/// one-word READ each (own-node ones in place, the others in one doorbell); takes nothing. What it saw may change before the
/// CAS, which decides: this only keeps an attempt that would fail from holding locks.
async fn peek_locks<S: EntryState>(tx: &mut TxnCore<'_, S>, idxs: &[usize]) -> Result<(), Abort> {
    let ts = tx.ts;
    // Own-node lock words in place (a one-word READ each), the others in one doorbell.
    let mut remote = 0;
    for &i in idxs {
        let e = &tx.entries[i];
        if !tx.c.ep.in_place_on(e.node) {
            remote += 1;
            continue;
        }
        let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
        let mut lock = [0u64; 1];
        tx.c.ep.load_in_place(ptr.add(H_LOCK), &mut lock);
        if ts.held_by_other(lock[0]) {
            return Err(Abort::LockBusy);
        }
    }
    if remote == 0 {
        return Ok(());
    }
    let mut d = tx.c.ep.doorbell_for(remote);
    for &i in idxs {
        let e = &tx.entries[i];
        if !tx.c.ep.in_place_on(e.node) {
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            d.read(ptr.add(H_LOCK), 1);
        }
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    if (0..remote).any(|j| ts.held_by_other(res.read(j)[0])) {
        return Err(Abort::LockBusy);
    }
    Ok(())
}

/// Sends one lock request per node (its bytes built from its items by `build`) in one
/// doorbell and applies the replies: every tuple granted is marked locked (and frozen when
/// `frozen`); a participant that refused holds nothing of its request.
pub async fn lock_by_rpc<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    build: impl Fn(&[Item]) -> Vec<u8>,
    frozen: bool,
) -> Result<(), Abort> {
    // A node that failed fails the stage; the locks the others granted are marked taken,
    // for the caller's release.
    let (nodes, res, mut outcome) = rpc_per_node_partial(tx, idxs, build).await;
    for (j, &n) in nodes.iter().enumerate() {
        if res.failed(j) {
            continue;
        }
        match view(res.rpc(j)) {
            ReplyView::Tuples(tuples) => {
                let mine = on_node(tx, idxs, n);
                for (i, t) in tuples_for(tuples, &mine, n) {
                    let t = t.expect("a granted lock returns every tuple");
                    tx.entries[i].locked = true;
                    tx.entries[i].frozen = frozen;
                    apply_tuple(tx, i, &t);
                }
            }
            ReplyView::Other(Reply::LockFailed { .. }) => {
                outcome = outcome.and(Err(Abort::LockBusy))
            }
            ReplyView::Other(Reply::NotFound { .. }) => outcome = outcome.and(Err(Abort::NotFound)),
            ReplyView::Other(r) => panic!("lock: unexpected reply {r:?} from node {}", n.0),
        }
    }
    outcome
}

/// Sends one check per node (its entries' `(table, slot, word)` built into a request's
/// bytes) in one doorbell; any participant answering `Invalid` fails it with
/// `ValidationFailed`.
pub async fn check_by_rpc<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    word: impl Fn(&Entry<S>) -> (atoll_storage::TableId, u32, u64),
    build: impl Fn(Vec<(atoll_storage::TableId, u32, u64)>) -> Vec<u8>,
) -> Result<(), Abort> {
    let nodes = nodes_of(tx, idxs);
    let mut d = tx.c.ep.doorbell();
    for &n in &nodes {
        let items = idxs
            .iter()
            .map(|&i| &tx.entries[i])
            .filter(|e| e.node == n)
            .map(&word)
            .collect();
        d.rpc(n, build(items));
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    for j in 0..nodes.len() {
        match decode(res.rpc(j)) {
            Reply::Ok => {}
            Reply::Invalid { .. } => return Err(Abort::ValidationFailed),
            r => panic!("check: unexpected reply {r:?} from node {}", nodes[j].0),
        }
    }
    Ok(())
}

/// Checks that read-only entries still hold the version read and are not locked by others.
pub async fn validate<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    prim: Primitive,
) -> Result<(), Abort> {
    if idxs.is_empty() {
        return Ok(());
    }
    let ts = tx.ts;
    match prim {
        Primitive::OneSided => {
            // Own-node records in place, as `read` does: the same two word loads as the READ.
            let (me, inline) = (tx.c.node(), tx.c.ep.local_inline());
            let mut remote = Idxs::new();
            for &i in idxs {
                let e = &tx.entries[i];
                if !(inline && e.node == me) {
                    remote.push(i);
                    continue;
                }
                let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
                let mut w = [0u64; 2];
                tx.c.ep.load_in_place(ptr, &mut w);
                if w[H_VERSION as usize] != e.version || ts.held_by_other(w[H_LOCK as usize]) {
                    return Err(Abort::ValidationFailed);
                }
            }
            if remote.is_empty() {
                return Ok(());
            }
            let mut d = tx.c.ep.doorbell_for(remote.len());
            for &i in &remote {
                let e = &tx.entries[i];
                d.read(tx.c.catalog.record_ptr(e.table, e.node, e.slot()), 2);
            }
            let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
            for (j, &i) in remote.iter().enumerate() {
                let w = res.read(j);
                let (lock, version) = (w[H_LOCK as usize], w[H_VERSION as usize]);
                if version != tx.entries[i].version || ts.held_by_other(lock) {
                    return Err(Abort::ValidationFailed);
                }
            }
        }
        Primitive::Rpc => {
            let build = |items| {
                Request::Validate {
                    ts: ts.word(),
                    items,
                }
                .to_bytes()
            };
            check_by_rpc(tx, idxs, |e| (e.table, e.slot(), e.version), build).await?;
        }
    }
    Ok(())
}

pub use crate::log_ring::{LOG_ENTRY_HEAD_WORDS, LOG_RECORD_HEAD_WORDS, LOG_RECORD_TAIL_WORDS};

/// Words of the log record of a write set whose entries hold payloads of these lengths
/// (stored payload words, engine words included): what [`log`] writes.
pub fn log_record_words(payload_words: impl IntoIterator<Item = u64>) -> u64 {
    LOG_RECORD_HEAD_WORDS
        + payload_words
            .into_iter()
            .map(|p| LOG_ENTRY_HEAD_WORDS + p)
            .sum::<u64>()
        + LOG_RECORD_TAIL_WORDS
}

/// Looks at a full ring's head word before the attempt gives up waiting for room
/// (`LogFull`): with the waits below, about 0.4 s of a backup applying nothing.
const LOG_ROOM_POLLS_MAX: u32 = 4096;
/// The first wait after a look found a ring still full, doubled up to the next.
const LOG_ROOM_WAIT_NS_FIRST: u64 = 500;
const LOG_ROOM_WAIT_NS_MAX: u64 = 100_000;

/// The entries whose writes the attempt installs, what its log record carries: inserts
/// (placed already), deletes, and the updates it wrote (a record locked for update and left
/// as it was is released unchanged, [`write_back`]).
pub fn installed_writes<S: EntryState>(tx: &TxnCore<'_, S>) -> Idxs {
    tx.select(|e| match e.access {
        Access::Read => false,
        Access::Update => e.dirty,
        Access::Insert | Access::Delete => true,
    })
}

/// The log record of write entries `ws`: `[ts, seq, entries, words, tag, set_ts, (what, key,
/// new version, payload length, payload...)..., checksum]`, with `seq` 0 and the checksum of
/// its body ([`crate::log_ring::body_sum`]): each backup's copy gets its ring's `seq`
/// ([`crate::log_ring::record_sum`]). An entry's version is the key's version after the
/// write (an insert's as placed, before the log). `ts` is what the attempt locks with,
/// `tag` names the attempt, `set_ts` is the timestamp its write-back sets (0: none): what a
/// recovery needs to finish its write-back for it.
pub fn log_record<S: EntryState>(tx: &TxnCore<'_, S>, ws: &[usize], set_ts: u64) -> Vec<u64> {
    use crate::log_ring::entry_what;
    // Sized once: growing it entry by entry reallocated twice a transaction (issue #9).
    let words = log_record_words(ws.iter().map(|&i| tx.entries[i].data.len() as u64)) as usize;
    let mut rec: Vec<u64> = Vec::with_capacity(words);
    rec.extend_from_slice(&[tx.ts.word(), 0, ws.len() as u64, 0, tx.tag, set_ts]);
    for &i in ws {
        let e = &tx.entries[i];
        let version = match e.access {
            Access::Insert => e.version,
            _ => e.version + 1,
        };
        rec.extend_from_slice(&[
            entry_what(e.table, e.access, e.node),
            e.key,
            version,
            e.data.len() as u64,
        ]);
        rec.extend_from_slice(&e.data);
    }
    rec[3] = rec.len() as u64 + LOG_RECORD_TAIL_WORDS;
    rec.push(crate::log_ring::body_sum(&rec));
    debug_assert_eq!(rec.len(), words);
    rec
}

/// The backups the record of write entries `ws` goes to, each with the slot its ring takes
/// there: with [`crate::TxnConfig::log_applied`], every backup of every partition written
/// (the partition's replicas apply it); otherwise the coordinator's own backups.
pub fn log_targets<S: EntryState>(tx: &TxnCore<'_, S>, ws: &[usize]) -> Idxs {
    let topo = tx.c.catalog.topology();
    let backups = tx.c.cfg.log_replicas;
    let mut nodes = Idxs::new();
    if tx.c.cfg.log_applied {
        let dead = |n: NodeId| tx.c.membership.as_ref().is_some_and(|m| m.is_dead(n));
        for &i in ws {
            for b in 0..backups {
                let n = topo.partition_backup(tx.entries[i].node, b);
                // A dead backup is no replica of the configuration any more.
                if !dead(n) && !nodes.contains(&(n.0 as usize)) {
                    nodes.push(n.0 as usize);
                }
            }
        }
        nodes.sort_unstable();
    } else {
        nodes.extend((0..backups).map(|b| topo.log_backup(tx.c.node(), b).0 .0 as usize));
    }
    nodes
}

/// The slot coordinator rings of this coordinator's node take on backup `backup`.
fn log_slot<S: EntryState>(tx: &TxnCore<'_, S>, backup: NodeId) -> u32 {
    let topo = tx.c.catalog.topology();
    if tx.c.cfg.log_applied {
        return topo
            .compute_index(tx.c.node())
            .expect("a coordinator runs on a compute node") as u32;
    }
    (0..tx.c.cfg.log_replicas)
        .map(|b| topo.log_backup(tx.c.node(), b))
        .find(|&(n, _)| n == backup)
        .map(|(_, slot)| slot)
        .unwrap_or_else(|| {
            panic!(
                "node {} is no log backup of node {}",
                backup.0,
                tx.c.node().0
            )
        })
}

/// Waits until this coordinator's ring on each of `targets` has room for its next record
/// (its backup applied enough of it): back-pressure, never a record dropped. Looks at a
/// ring's head word only when the last look left it full; `LogFull` after
/// [`LOG_ROOM_POLLS_MAX`] looks.
async fn wait_for_room<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    targets: &[usize],
    prim: Primitive,
) -> Result<(), Abort> {
    use crate::log_ring::LOG_RING_RECORDS;
    let region = tx.c.catalog.extra_region(crate::coord::LOG_EXTRA_REGION);
    let mut wait_ns = LOG_ROOM_WAIT_NS_FIRST;
    for poll in 0..=LOG_ROOM_POLLS_MAX {
        let full: Idxs = targets
            .iter()
            .copied()
            .filter(|&n| tx.c.log_seq[n] >= tx.c.log_applied[n] + LOG_RING_RECORDS as u64)
            .collect();
        if full.is_empty() {
            return Ok(());
        }
        if poll == LOG_ROOM_POLLS_MAX {
            break;
        }
        if poll > 0 {
            tx.c.ep.sleep(wait_ns).await;
            wait_ns = (wait_ns * 2).min(LOG_ROOM_WAIT_NS_MAX);
        }
        let mut d = tx.c.ep.doorbell();
        for &n in &full {
            let backup = NodeId(n as u16);
            let base = tx.c.cfg.log_ring_offset(tx.c.id, log_slot(tx, backup));
            match prim {
                Primitive::OneSided => {
                    d.read(atoll_fabric::RemotePtr::new(backup, region, base), 1);
                }
                Primitive::Rpc => {
                    d.rpc(backup, Request::LogHead { offset: base }.to_bytes());
                }
            }
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        for (j, &n) in full.iter().enumerate() {
            let applied = match prim {
                Primitive::OneSided => res.read(j)[0],
                Primitive::Rpc => match decode(res.rpc(j)) {
                    Reply::Word { value } => value,
                    r => panic!("log head: unexpected reply {r:?}"),
                },
            };
            tx.c.log_applied[n] = tx.c.log_applied[n].max(applied);
        }
    }
    Err(Abort::LogFull)
}

/// Logs the write set to `log_replicas` backups (RCC's coordinator log, before write-back):
/// the record ([`log_record`]) goes to this coordinator's ring on each backup
/// ([`log_targets`]), in the slot its `seq` names ([`crate::log_ring`]). Where backups
/// apply their rings it first waits for room in each. With `instance_log`, the same record
/// is first made durable in the node's own log ([`crate::own_log`]).
pub async fn log<S: EntryState>(tx: &mut TxnCore<'_, S>, prim: Primitive) -> Result<(), Abort> {
    log_with(tx, prim, 0).await
}

/// As [`log`], for a write-back that sets `set_ts` (0: none), which the record carries.
pub async fn log_with<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    prim: Primitive,
    set_ts: u64,
) -> Result<(), Abort> {
    let replicas = tx.c.cfg.log_replicas as usize;
    if replicas == 0 && !tx.c.cfg.instance_log {
        // Without backups a writer passes the point of no return here all the same.
        tx.logged = tx.entries.iter().any(|e| e.is_write());
        return Ok(());
    }
    let ws = installed_writes(tx);
    if ws.is_empty() {
        return Ok(());
    }
    let mut rec = log_record(tx, &ws, set_ts);
    let room = tx.c.cfg.log_geometry().record_words_max();
    // The driver sizes the ring from the workload's largest write set; a bigger one is a
    // workload that misdeclared it.
    assert!(
        rec.len() as u32 <= room,
        "a {}-word log record does not fit a {room}-word log slot (the workload wrote more than its largest write set declares)",
        rec.len()
    );
    if tx.c.cfg.instance_log {
        let own = tx.c.own_log.clone().unwrap_or_else(|| {
            panic!(
                "coordinator {}: the run keeps instance logs and gave this one none",
                tx.c.id
            )
        });
        // The instance's own log first: a record the backups hold is one it holds too.
        own.append(&tx.c.ep, &rec).await?;
    }
    if replicas == 0 {
        tx.logged = true;
        return Ok(());
    }
    let targets = log_targets(tx, &ws);
    if tx.c.cfg.log_applied {
        wait_for_room(tx, &targets, prim).await?;
    }
    log_to(tx, prim, &targets, &mut rec).await?;
    // A failed log write voided the record on every target and aborted above; a whole
    // record without its write-back is undecided, for a crash's recovery to settle
    // ([`crate::recovery`]).
    tx.logged = true;
    Ok(())
}

/// Writes record `rec` ([`log_record`]) to this coordinator's ring on each node of
/// `targets`, as the next record of each ring (no wait for room: [`log`] waits first).
pub async fn log_to<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    prim: Primitive,
    targets: &[usize],
    rec: &mut [u64],
) -> Result<(), Abort> {
    use crate::log_ring::{record_sum, RECORD_SEQ_WORD};
    let region = tx.c.catalog.extra_region(crate::coord::LOG_EXTRA_REGION);
    let geometry = tx.c.cfg.log_geometry();
    let body = rec[rec.len() - 1];
    let mut d = tx.c.ep.doorbell_for(targets.len());
    for &n in targets {
        let backup = NodeId(n as u16);
        let base = tx.c.cfg.log_ring_offset(tx.c.id, log_slot(tx, backup));
        let seq = tx.c.log_seq[n];
        tx.c.log_seq[n] = seq + 1;
        rec[RECORD_SEQ_WORD] = seq;
        let last = rec.len() - 1;
        rec[last] = record_sum(body, seq);
        let at = geometry.slot_offset(base, seq);
        match prim {
            Primitive::OneSided => {
                d.write(
                    atoll_fabric::RemotePtr::new(backup, region, at),
                    Words::from_slice(rec),
                );
            }
            Primitive::Rpc => {
                d.rpc(backup, Request::log_bytes(at, rec));
            }
        }
    }
    let last = rec.len() - 1;
    rec[RECORD_SEQ_WORD] = 0;
    rec[last] = body;
    let res = match d.submit().await {
        Ok(res) => res,
        Err(e) => {
            void_record(tx, prim, targets).await;
            return Err(tx.op_failed(e));
        }
    };
    if prim == Primitive::Rpc {
        for j in 0..targets.len() {
            match decode(res.rpc(j)) {
                Reply::Ok => {}
                r => panic!("log: unexpected reply {r:?}"),
            }
        }
    }
    Ok(())
}

/// After a log write to `targets` failed: overwrites the record's `seq` word on each of them
/// (those that got it and those that did not alike), before the attempt lets its locks go,
/// so no backup takes it for a whole record another writer of its keys came after
/// ([`crate::log_ring`]); the next record to each target reuses its number and slot. A
/// target that fails again is the one that failed (its ring is gone with it, or recovery
/// reads it as a record never whole); the others complete.
async fn void_record<S: EntryState>(tx: &mut TxnCore<'_, S>, prim: Primitive, targets: &[usize]) {
    use crate::log_ring::{RECORD_SEQ_WORD, VOID_SEQ};
    let region = tx.c.catalog.extra_region(crate::coord::LOG_EXTRA_REGION);
    let geometry = tx.c.cfg.log_geometry();
    let mut d = tx.c.ep.doorbell_for(targets.len());
    for &n in targets {
        let backup = NodeId(n as u16);
        let base = tx.c.cfg.log_ring_offset(tx.c.id, log_slot(tx, backup));
        let seq = tx.c.log_seq[n] - 1;
        tx.c.log_seq[n] = seq;
        let at = geometry.slot_offset(base, seq) + RECORD_SEQ_WORD as u32;
        match prim {
            Primitive::OneSided => {
                d.write(
                    atoll_fabric::RemotePtr::new(backup, region, at),
                    Words::from_slice(&[VOID_SEQ]),
                );
            }
            Primitive::Rpc => {
                d.rpc(backup, Request::log_bytes(at, &[VOID_SEQ]));
            }
        }
    }
    // Best effort by design: the failed target is why this runs.
    let _ = d.submit().await;
}

/// A family's own way to install a new version in place of the plain write-back (MVCC
/// first keeps the current version in an old slot).
pub struct Installer<S> {
    /// One-sided: the `(word offset in the record, words)` writes that go before the new
    /// payload, in the same doorbell (a link executes them in order, each in ascending
    /// words).
    pub steps: fn(&Entry<S>, &TableLayout, &mut Vec<(u32, Words)>),
    /// RPC: the bytes of the family's request that installs one node's batch.
    pub request: fn(&WriteBack) -> Vec<u8>,
}

impl<S> Clone for Installer<S> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<S> Copy for Installer<S> {}

/// How [`write_back`] installs.
pub struct WriteBackOpts<S> {
    pub primitive: Primitive,
    /// Also unlock each record (and thaw a frozen `RTS`) in the same round trip.
    pub release: bool,
    /// Set `WTS` and `RTS` of each record written to this timestamp (SUNDIAL's commit
    /// timestamp, MVCC's version), which also thaws `RTS`.
    pub set_ts: Option<Timestamp>,
    /// The family's own install, if it has one.
    pub install: Option<Installer<S>>,
}

/// How [`commit_and_release`] installs (its primitives come from the plan).
pub struct CommitOpts<S> {
    /// As [`WriteBackOpts::set_ts`].
    pub set_ts: Option<Timestamp>,
    /// As [`WriteBackOpts::install`].
    pub install: Option<Installer<S>>,
}

impl<S> CommitOpts<S> {
    /// The plain write-back: payload and version only.
    pub fn plain() -> Self {
        CommitOpts {
            set_ts: None,
            install: None,
        }
    }
}

/// Installs dirty payloads of locked entries and bumps their versions; with `set_ts` also
/// sets `WTS` and `RTS` to it (which thaws `RTS`); with `release`, also unlocks (payload,
/// then timestamps and version, then lock: a reader that sees the lock free sees them all).
pub async fn write_back<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    opts: WriteBackOpts<S>,
) {
    if idxs.is_empty() {
        return;
    }
    let WriteBackOpts {
        primitive: prim,
        release,
        set_ts,
        install,
    } = opts;
    // On the wire and in the header 0 is no timestamp: a timestamp is never 0.
    let set_ts = set_ts.map_or(0, Timestamp::word);
    let ts = tx.ts.word();
    for &i in idxs {
        let e = &tx.entries[i];
        assert!(
            e.locked,
            "write-back of {:?} key {} which ts {ts} does not hold",
            e.table, e.key
        );
    }
    match prim {
        Primitive::OneSided => {
            // Own-node records in place, the others in one doorbell: the same stores in
            // the same order either way (`write_back_record`).
            let mut steps = Vec::new();
            let mut remote = 0;
            let c = &*tx.c;
            for &i in idxs {
                let e = &tx.entries[i];
                if !c.ep.in_place_on(e.node) {
                    remote += 1;
                    continue;
                }
                let mut sink = InPlace(&c.ep);
                write_back_record(&mut sink, c, e, release, set_ts, install, &mut steps);
            }
            if remote > 0 {
                let mut d = c.ep.doorbell_for(WRITE_BACK_OPS_PER_RECORD * remote);
                for &i in idxs {
                    let e = &tx.entries[i];
                    if !c.ep.in_place_on(e.node) {
                        write_back_record(&mut d, c, e, release, set_ts, install, &mut steps);
                    }
                }
                tx.unabortable(d.submit().await);
            }
        }
        Primitive::Rpc => {
            let nodes = nodes_of(tx, idxs);
            let mut d = tx.c.ep.doorbell();
            let mut plain_release =
                smallvec::SmallVec::<[(NodeId, Vec<(atoll_storage::TableId, u32)>); 4]>::new();
            for &n in &nodes {
                let mine = idxs.iter().map(|&i| &tx.entries[i]).filter(|e| e.node == n);
                let items: Vec<_> = mine
                    .clone()
                    .filter(|e| e.dirty)
                    .map(|e| (e.table, e.slot(), Words::from_slice(&e.data)))
                    .collect();
                if release {
                    let clean: Vec<_> = mine
                        .filter(|e| !e.dirty)
                        .map(|e| (e.table, e.slot()))
                        .collect();
                    if !clean.is_empty() {
                        plain_release.push((n, clean));
                    }
                }
                if !items.is_empty() {
                    let wb = WriteBack {
                        ts,
                        release,
                        set_ts,
                        items,
                    };
                    let bytes = match install {
                        Some(inst) => (inst.request)(&wb),
                        None => Request::WriteBack(wb).to_bytes(),
                    };
                    d.rpc(n, bytes);
                }
            }
            for (n, items) in plain_release {
                d.rpc(n, Request::Release { ts, items }.to_bytes());
            }
            let res = d.submit().await;
            // Without the replies (a participant failed) there is nothing to check; the
            // failure is recorded and the run stops.
            if let Some(replies) = tx.unabortable(res) {
                for j in 0..replies.len() {
                    match decode(replies.rpc(j)) {
                        Reply::Ok => {}
                        r => panic!("write-back: participant refused with {r:?} (ts {ts})"),
                    }
                }
            }
        }
    }
    for &i in idxs {
        let e = &mut tx.entries[i];
        if e.dirty {
            e.installed = Some(e.version + 1);
            e.version += 1;
            if set_ts != 0 {
                // The new timestamps replaced the frozen RTS: nothing is left to thaw.
                e.state.installed(set_ts);
                e.frozen = false;
            }
        }
        if release {
            e.locked = false;
            e.frozen = false;
        }
    }
}

/// Where a one-sided stage's stores to one record go: in place on the coordinator's own
/// node, or into the stage's doorbell. One sequence per record drives either
/// ([`write_back_record`], [`release_record`]), so both run the same ops in the same order,
/// each WRITE in ascending words with release stores.
trait RecordOps {
    fn write(&mut self, ptr: atoll_fabric::RemotePtr, data: &[u64]);
    fn write_words(&mut self, ptr: atoll_fabric::RemotePtr, data: Words) {
        self.write(ptr, &data)
    }
    fn fetch_add(&mut self, ptr: atoll_fabric::RemotePtr, add: u64);
}

/// Own-node records, accessed in place ([`atoll_fabric::Endpoint::write_in_place`]).
struct InPlace<'e>(&'e atoll_fabric::Endpoint);

impl RecordOps for InPlace<'_> {
    fn write(&mut self, ptr: atoll_fabric::RemotePtr, data: &[u64]) {
        self.0.write_in_place(ptr, data);
    }
    fn fetch_add(&mut self, ptr: atoll_fabric::RemotePtr, add: u64) {
        self.0.fetch_add_in_place(ptr, add);
    }
}

impl RecordOps for atoll_fabric::Doorbell<'_> {
    fn write(&mut self, ptr: atoll_fabric::RemotePtr, data: &[u64]) {
        atoll_fabric::Doorbell::write(self, ptr, Words::from_slice(data));
    }
    fn write_words(&mut self, ptr: atoll_fabric::RemotePtr, data: Words) {
        atoll_fabric::Doorbell::write(self, ptr, data);
    }
    fn fetch_add(&mut self, ptr: atoll_fabric::RemotePtr, add: u64) {
        atoll_fabric::Doorbell::fetch_add(self, ptr, add);
    }
}

/// The one-sided write-back of one locked record, in the order readers rely on: the
/// family's install steps, the payload (its tag and check word catch a reader that
/// overlaps it), the new timestamps, the version, then (with `release`) the thaw and the
/// unlock. A reader that sees the lock free sees them all.
fn write_back_record<S: EntryState>(
    ops: &mut impl RecordOps,
    c: &crate::Coordinator,
    e: &Entry<S>,
    release: bool,
    set_ts: u64,
    install: Option<Installer<S>>,
    steps: &mut Vec<(u32, Words)>,
) {
    let ptr = c.catalog.record_ptr(e.table, e.node, e.slot());
    if e.dirty {
        if let Some(inst) = install {
            // Ops of one doorbell to one node execute in order, each in ascending words:
            // the steps' order is what keeps readers safe.
            (inst.steps)(e, c.catalog.layout(e.table), steps);
            for (at, words) in steps.drain(..) {
                ops.write_words(ptr.add(at), words);
            }
        }
        ops.write(ptr.add(HEADER_WORDS), &e.data);
        if set_ts != 0 {
            // RTS and WTS are adjacent: one WRITE sets the new lease.
            ops.write(ptr.add(H_RTS), &[set_ts, set_ts]);
        }
        ops.write(ptr.add(H_VERSION), &[e.version + 1]);
    }
    if release {
        if e.frozen && !(e.dirty && set_ts != 0) {
            ops.fetch_add(ptr.add(H_RTS), THAW);
        }
        ops.write(ptr.add(H_LOCK), &[0]);
    }
}

/// The one-sided release of one locked record: thaw a frozen `RTS` (keeping any raise an
/// earlier-ordered MVCC reader made meanwhile), then unlock.
fn release_record<S: EntryState>(ops: &mut impl RecordOps, c: &crate::Coordinator, e: &Entry<S>) {
    let ptr = c.catalog.record_ptr(e.table, e.node, e.slot());
    if e.frozen {
        ops.fetch_add(ptr.add(H_RTS), THAW);
    }
    ops.write(ptr.add(H_LOCK), &[0]);
}

/// Unlocks every locked entry among `idxs`.
pub async fn release<S: EntryState>(tx: &mut TxnCore<'_, S>, idxs: &[usize], prim: Primitive) {
    let held: Idxs = idxs
        .iter()
        .copied()
        .filter(|&i| tx.entries[i].locked)
        .collect();
    release_held(tx, &held, prim).await
}

/// Unlocks `held`, entries this attempt has locked (selected as such by the caller, so no
/// second list is built).
async fn release_held<S: EntryState>(tx: &mut TxnCore<'_, S>, held: &[usize], prim: Primitive) {
    if held.is_empty() {
        return;
    }
    let ts = tx.ts.word();
    match prim {
        Primitive::OneSided => {
            let c = &*tx.c;
            let mut remote = 0;
            for &i in held {
                let e = &tx.entries[i];
                if c.ep.in_place_on(e.node) {
                    release_record(&mut InPlace(&c.ep), c, e);
                } else {
                    remote += 1;
                }
            }
            if remote > 0 {
                let mut d = c.ep.doorbell_for(2 * remote);
                for &i in held {
                    let e = &tx.entries[i];
                    if !c.ep.in_place_on(e.node) {
                        release_record(&mut d, c, e);
                    }
                }
                tx.unabortable(d.submit().await);
            }
        }
        Primitive::Rpc => {
            let nodes = nodes_of(tx, held);
            let mut d = tx.c.ep.doorbell();
            for &n in &nodes {
                let items = held
                    .iter()
                    .map(|&i| &tx.entries[i])
                    .filter(|e| e.node == n)
                    .map(|e| (e.table, e.slot()))
                    .collect();
                d.rpc(n, Request::Release { ts, items }.to_bytes());
            }
            tx.unabortable(d.submit().await);
        }
    }
    for &i in held {
        tx.entries[i].locked = false;
        tx.entries[i].frozen = false;
    }
}

/// Applies inserts and deletes on their owners' CPUs (index changes always need the owner,
/// so this step is RPC whatever the plan; a node's own are local calls). Inserted records
/// are installed locked by this transaction and freed by its release; deleted entries must
/// be locked and are unlocked here. If an insert finds its key taken or its table full, the
/// inserts already made are deleted again and the transaction aborts with `Duplicate` or
/// `TableFull`.
pub async fn apply_inserts_deletes<S: EntryState>(tx: &mut TxnCore<'_, S>) -> Result<(), Abort> {
    let ts = tx.ts.word();
    apply_inserts_deletes_locked_by(tx, ts).await
}

/// [`apply_inserts_deletes`], with each inserted record's `LOCK` word set to `lock` until
/// the attempt unlocks it (the attempt's timestamp, or a commit-id family's locked word).
pub async fn apply_inserts_deletes_locked_by<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    lock: u64,
) -> Result<(), Abort> {
    // Most transactions neither insert nor delete: one pass tells, no index lists built.
    let index_change = |e: &Entry<S>| matches!(e.access, Access::Insert | Access::Delete);
    if !tx.entries.iter().any(index_change) {
        return Ok(());
    }
    apply_inserts_locked_by(tx, lock).await?;
    apply_deletes(tx, lock).await
}

/// The delete half of [`apply_inserts_deletes_locked_by`]: each deleted record removed by
/// its node and its lock (`lock`) released.
pub async fn apply_deletes<S: EntryState>(tx: &mut TxnCore<'_, S>, lock: u64) -> Result<(), Abort> {
    let del = tx.select(|e| e.access == Access::Delete);
    if del.is_empty() {
        return Ok(());
    }
    let ts = lock;
    let mut d = tx.c.ep.doorbell();
    for &i in &del {
        let e = &tx.entries[i];
        assert!(e.locked, "delete of unlocked key {}", e.key);
        d.rpc(
            e.node,
            Request::Delete {
                table: e.table,
                key: e.key,
            }
            .to_bytes(),
        );
        d.rpc(
            e.node,
            Request::Release {
                ts,
                items: vec![(e.table, e.slot())],
            }
            .to_bytes(),
        );
    }
    let res = match d.submit().await {
        Ok(res) => res,
        Err(e) => {
            // The deletes at the other nodes completed, each with its release; the failed
            // node's are its recovery's.
            for &i in &del {
                tx.entries[i].locked = false;
            }
            return Err(tx.op_failed(e));
        }
    };
    for (j, &i) in del.iter().enumerate() {
        // The deleter holds the lock, so the record is there to delete.
        match decode(res.rpc(2 * j)) {
            Reply::Deleted { version } => tx.entries[i].installed = Some(version),
            r => panic!("delete: unexpected reply {r:?} for a record this transaction holds"),
        }
        let (t, n, k) = (tx.entries[i].table, tx.entries[i].node, tx.entries[i].key);
        tx.c.forget_loc(t, n, k);
        tx.entries[i].locked = false;
    }
    Ok(())
}

/// The insert half of [`apply_inserts_deletes_locked_by`], for families that delete their
/// own way (the snapshot-isolation family): each inserted record placed by its node, its
/// `LOCK` word `lock` until the attempt unlocks it; on a duplicate or a full table the
/// inserts made are taken back and the attempt aborts.
pub async fn apply_inserts_locked_by<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    lock: u64,
) -> Result<(), Abort> {
    let ins = tx.select(|e| e.access == Access::Insert);
    apply_inserts_at(tx, &ins, lock).await
}

/// [`apply_inserts_locked_by`] of the inserted entries `ins` only (a deterministic family's
/// node inserts its own records; the others' nodes insert theirs).
pub async fn apply_inserts_at<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    ins: &[usize],
    lock: u64,
) -> Result<(), Abort> {
    if ins.is_empty() {
        return Ok(());
    }
    let ts = lock;
    let mut d = tx.c.ep.doorbell();
    for &i in ins {
        let e = &tx.entries[i];
        d.rpc(
            e.node,
            Request::Insert {
                ts,
                table: e.table,
                key: e.key,
                payload: Words::from_slice(&e.data),
            }
            .to_bytes(),
        );
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let mut failed = None;
    let mut done: Idxs = Idxs::new();
    for (j, &i) in ins.iter().enumerate() {
        match decode(res.rpc(j)) {
            Reply::Inserted { loc, version } => {
                // Installed locked by this transaction, payload in place: the release
                // stage frees it together with the other writes.
                let e = &mut tx.entries[i];
                e.loc = Some(loc);
                e.version = version;
                e.installed = Some(version);
                e.locked = true;
                e.dirty = false;
                done.push(i);
            }
            Reply::Duplicate => failed = failed.or(Some(Abort::Duplicate)),
            // A deleted record being revived was briefly locked by a stale locker.
            Reply::LockFailed { .. } => failed = failed.or(Some(Abort::LockBusy)),
            Reply::Full => failed = Some(Abort::TableFull),
            r => panic!("insert: unexpected reply {r:?}"),
        }
    }
    if let Some(abort) = failed {
        undo_inserts(tx, &done, ts).await?;
        return Err(abort);
    }
    Ok(())
}

/// Takes back the inserts `done` made by an attempt that aborts (they hold lock `ts`): each
/// record returns to its absent state at its old version (an aborted attempt leaves no
/// version behind) and unlocked.
pub async fn undo_inserts<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    done: &[usize],
    ts: u64,
) -> Result<(), Abort> {
    if done.is_empty() {
        return Ok(());
    }
    let mut d = tx.c.ep.doorbell();
    for &i in done {
        let e = &tx.entries[i];
        d.rpc(
            e.node,
            Request::UndoInsert {
                ts,
                table: e.table,
                key: e.key,
            }
            .to_bytes(),
        );
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    for (j, &i) in done.iter().enumerate() {
        match decode(res.rpc(j)) {
            Reply::Ok => {}
            r => panic!(
                "undo insert: unexpected reply {r:?} for key {} this attempt inserted",
                tx.entries[i].key
            ),
        }
    }
    for &i in done {
        tx.entries[i].locked = false;
        tx.entries[i].installed = None;
    }
    Ok(())
}

/// Added to a frozen `RTS` to clear `RTS_FROZEN` (bit 63) in one atomic op: the holder
/// knows the bit is set, so the add carries out of the word and leaves the rest as it is.
const THAW: u64 = RTS_FROZEN;

/// CAS rounds to freeze `RTS` before giving up: each failed CAS saw a concurrent renewal.
const FREEZE_ROUNDS_MAX: u32 = 1024;

/// Freezes `RTS` of records this transaction just locked, given the `RTS` each READ saw:
/// CAS(seen → seen | FROZEN), retried with the value found while renewals race.
async fn freeze_one_sided<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    mut todo: smallvec::SmallVec<[(usize, u64); 8]>,
) -> Result<(), Abort> {
    let ep = tx.c.ep.clone();
    for _ in 0..FREEZE_ROUNDS_MAX {
        if todo.is_empty() {
            return Ok(());
        }
        let mut d = ep.doorbell();
        for &(i, seen) in &todo {
            let e = &tx.entries[i];
            d.cas(
                tx.c.catalog
                    .record_ptr(e.table, e.node, e.slot())
                    .add(H_RTS),
                seen,
                seen | RTS_FROZEN,
            );
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        let mut again = smallvec::SmallVec::new();
        for (j, &(i, seen)) in todo.iter().enumerate() {
            let found = res.cas(j);
            if found == seen {
                let e = &mut tx.entries[i];
                e.frozen = true;
                e.state.froze(seen & !RTS_FROZEN);
            } else {
                again.push((i, found));
            }
        }
        todo = again;
    }
    panic!("could not freeze RTS in {FREEZE_ROUNDS_MAX} rounds: renewals never stop");
}

/// The end of every pipeline once the transaction may commit: write back (as `opts` say)
/// and release, in one round trip when both stages use the same primitive; each stage's
/// time is charged.
pub async fn commit_and_release<S: EntryState>(tx: &mut TxnCore<'_, S>, opts: CommitOpts<S>) {
    let plan = *tx.c.plan();
    let same = plan.get(Stage::Commit) == plan.get(Stage::Release);
    let t0 = tx.now_ns();
    // With one primitive for both, every lock the attempt holds goes in the write-back's
    // doorbell: the written records installed and unlocked, the others (2PL's read locks)
    // only unlocked (`write_back` releases a clean entry as `release_held` would). The
    // attempt is past its commit point, so its read locks may go while its writes land;
    // the written records stay locked until theirs do. The round trip is charged to commit.
    let ws = if same {
        tx.select(|e| e.locked)
    } else {
        tx.select(|e| e.locked && e.is_write())
    };
    let wb = WriteBackOpts {
        primitive: plan.get(Stage::Commit),
        release: same,
        set_ts: opts.set_ts,
        install: opts.install,
    };
    write_back(tx, &ws, wb).await;
    tx.charge(Stage::Commit, t0);
    let t0 = tx.now_ns();
    let rest = tx.select(|e| e.locked);
    release_held(tx, &rest, plan.get(Stage::Release)).await;
    tx.charge(Stage::Release, t0);
}

/// Releases every lock the attempt holds (the rollback of every protocol).
pub async fn release_all<S: EntryState>(tx: &mut TxnCore<'_, S>) {
    let t0 = tx.now_ns();
    let held = tx.select(|e| e.locked);
    let prim = tx.c.plan().get(Stage::Release);
    release_held(tx, &held, prim).await;
    tx.charge(Stage::Release, t0);
}

/// The steps between a protocol's serialisation point and its write-back: log, then apply
/// inserts and deletes. On failure every lock the attempt holds is released.
pub async fn log_and_apply<S: EntryState>(tx: &mut TxnCore<'_, S>) -> Result<(), Abort> {
    log_and_apply_setting(tx, None).await
}

/// As [`log_and_apply`], for a write-back that sets `WTS` and `RTS` to `set_ts` (SUNDIAL's
/// commit timestamp, MVCC's version timestamp): the log carries it, for a recovery that
/// finishes the write-back.
pub async fn log_and_apply_setting<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    set_ts: Option<Timestamp>,
) -> Result<(), Abort> {
    let prim = tx.c.plan().get(Stage::Log);
    let ts = tx.ts.word();
    // Inserts are placed (locked, so invisible) before the log: one refused (a duplicate,
    // a full table) aborts the attempt before anything is logged, and the log carries the
    // versions they were placed at. Deletes make a change visible, so they come after it.
    let ins = tx.select(|e| e.access == Access::Insert);
    let r = match apply_inserts_at(tx, &ins, ts).await {
        Ok(()) => {
            let t0 = tx.now_ns();
            let r = log_with(tx, prim, set_ts.map_or(0, Timestamp::word)).await;
            tx.charge(Stage::Log, t0);
            r
        }
        Err(a) => Err(a),
    };
    let r = match r {
        // Past a whole log the attempt has committed: a delete that failed at a node (its
        // failure recorded, [`TxnCore::op_failed`]) is for the node's recovery to settle
        // (its backups hold the record), and the write-back goes on.
        Ok(()) => match apply_deletes(tx, ts).await {
            Err(_) if tx.logged => Ok(()),
            r => r,
        },
        Err(a) if tx.logged => Err(a),
        Err(a) => {
            // Nothing was logged: the inserts placed are taken back.
            let placed = tx.select(|e| e.access == Access::Insert && e.installed.is_some());
            undo_inserts(tx, &placed, ts).await.and(Err(a))
        }
    };
    if r.is_err() {
        release_all(tx).await;
    }
    r
}

/// How [`lock_unchanged`] locks and what it checks.
pub struct UnchangedOpts<S> {
    /// Also freeze each record's `RTS` (SUNDIAL), thawed at release.
    pub freeze_rts: bool,
    /// What must not have changed since the entry was fetched (OCC: the version; SUNDIAL:
    /// `WTS`).
    pub seen: fn(&Entry<S>) -> u64,
}

/// Locks write entries with the plan's lock primitive and checks that each one fetched
/// earlier still carries what `opts.seen` read from it then, else `ValidationFailed`. On
/// failure every lock the attempt holds is released.
pub async fn lock_unchanged<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
    opts: UnchangedOpts<S>,
) -> Result<(), Abort> {
    let UnchangedOpts {
        freeze_rts: freeze,
        seen,
    } = opts;
    let prim = tx.c.plan().get(Stage::Lock);
    let before: smallvec::SmallVec<[(usize, u64); 8]> = idxs
        .iter()
        .filter(|&&i| tx.entries[i].fetched)
        .map(|&i| (i, seen(&tx.entries[i])))
        .collect();
    let t0 = tx.now_ns();
    let opts = LockOpts {
        primitive: prim,
        with_data: false,
        freeze_rts: freeze,
        peek_on_retry: false,
    };
    let mut r = lock(tx, idxs, opts).await;
    if r.is_ok() && before.iter().any(|&(i, v)| seen(&tx.entries[i]) != v) {
        r = Err(Abort::ValidationFailed);
    }
    tx.charge(Stage::Lock, t0);
    if r.is_err() {
        release_all(tx).await;
    }
    r
}

/// After locking `idxs` without their data (the plan's read primitive differs from its lock
/// primitive), fetches the data with the read primitive: a second round trip.
pub async fn read_after_lock<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    idxs: &[usize],
) -> Result<(), Abort> {
    let plan = *tx.c.plan();
    if plan.get(Stage::Read) == plan.get(Stage::Lock) {
        return Ok(());
    }
    let t0 = tx.now_ns();
    let r = read(tx, idxs, plan.get(Stage::Read)).await;
    tx.charge(Stage::Read, t0);
    r
}
