//! CALVIN (RCC §4.6; Thomson et al., SIGMOD 2012): a deterministic protocol. Each lane (a
//! co-routine, the same lanes on every node) collects its requests for an epoch, with the
//! records each declares, and dispatches them to every node; every node merges all lanes'
//! batches into one order ([`node`]) and queues their locks in it ([`locks`]), so no
//! transaction ever aborts on a conflict and none needs two-phase commit. A node holding
//! records of a transaction reads them under its locks and forwards them to the nodes that
//! execute it (those holding a record it writes); each of those executes the transaction's
//! logic with every value and writes only its own records. Then every node says EPOCH_DONE
//! and waits for all the others' before the next epoch (the barrier).
//!
//! Pipeline, per lane and epoch: sequence (the runner draws the requests) → dispatch
//! ([`DISPATCH`]) → take in order, wait for the locks → read, forward ([`FORWARD`]) → execute
//! and write back locally → release → EPOCH_DONE and wait ([`BARRIER`]).
//!
//! Built: the `global` and `lane` orders ([`node`]); `dispatch`, `forward` and `barrier`
//! each over RPC or one-sided ([`buffers`]); inserts and deletes, each
//! node its own records; a transaction whose records changed since its reconnaissance
//! (Calvin's OLLP) aborts with `keys_changed` on every node alike, and is sequenced again.

pub mod buffers;
pub mod config;
pub mod locks;
pub mod msg;
pub mod node;
pub mod participant;

use atoll_fabric::NodeId;
use atoll_storage::layout::{INITIAL_VERSION, VERSION_ABSENT};
use atoll_storage::TableId;
use atoll_txn::msg::{Loc, Reply};
use atoll_txn::stages::{self, WriteBackOpts};
use atoll_txn::{
    Abort, Access, Coordinator, Plan, PlanError, Primitive, Protocol, SeqBatch, SeqTxn, Stage,
    TxnCore,
};
use msg::{CalvinRequest, Request, Value, FAMILY};
use node::{CalvinNode, Ordered, Take};
use std::collections::HashMap;
use std::sync::Arc;

pub struct Calvin;

/// A lane's batch to every node.
pub const DISPATCH: Stage = Stage::family(0, "dispatch");
/// A participant's values to the executing nodes.
pub const FORWARD: Stage = Stage::family(1, "forward");
/// EPOCH_DONE to every node, then the wait for theirs.
pub const BARRIER: Stage = Stage::family(2, "barrier");

/// A waiting lane looks again after this long, doubling up to [`POLL_NS_MAX`] (other lanes
/// and the node's event loop run meanwhile).
const POLL_NS_MIN: u64 = 500;
const POLL_NS_MAX: u64 = 50_000;
/// The longest a lane waits for one thing (a batch, a lock, a value, the barrier): past it a
/// node stopped answering, and the lane ends with `node_failed`.
pub const WAIT_NS_MAX: u64 = 30_000_000_000;

/// A value this node executes with: where the record lies here (its own records), its
/// version and payload.
struct Gathered {
    loc: Option<u32>,
    version: u64,
    data: Vec<u64>,
}

/// The transaction a lane runs now (in its coordinator's `family_ctx`).
struct Running {
    t: Ordered,
    values: HashMap<(TableId, u64), Gathered>,
}

fn state(c: &Coordinator) -> Arc<CalvinNode> {
    c.family_nodes.get::<CalvinNode>(FAMILY)
}

/// A lane's wait for one thing: each pause doubles, from [`POLL_NS_MIN`] up to
/// [`POLL_NS_MAX`]; past [`WAIT_NS_MAX`] a node stopped answering (`node_failed`).
struct Backoff {
    start_ns: u64,
    pause_ns: u64,
}

impl Backoff {
    fn new(c: &Coordinator) -> Self {
        Backoff {
            start_ns: c.now_ns(),
            pause_ns: POLL_NS_MIN,
        }
    }

    /// Sleeps the next pause (other lanes and the node's event loop run meanwhile).
    async fn pause(&mut self, c: &Coordinator) -> Result<(), Abort> {
        if c.now_ns().saturating_sub(self.start_ns) > WAIT_NS_MAX {
            return Err(Abort::NodeFailed);
        }
        c.ep.sleep(self.pause_ns).await;
        self.pause_ns = (self.pause_ns * 2).min(POLL_NS_MAX);
        Ok(())
    }
}

/// Waits until `ready` gives a value, polling; `node_failed` after [`WAIT_NS_MAX`].
async fn wait<T>(c: &mut Coordinator, mut ready: impl FnMut() -> Option<T>) -> Result<T, Abort> {
    let mut backoff = Backoff::new(c);
    loop {
        if let Some(v) = ready() {
            return Ok(v);
        }
        backoff.pause(c).await?;
    }
}

/// Sends `msg` to each node of `to` as an RPC and checks every answer.
async fn send(c: &mut Coordinator, msg: &CalvinRequest, to: &[u16]) -> Result<(), Abort> {
    if to.is_empty() {
        return Ok(());
    }
    let bytes = msg.to_bytes();
    let mut d = c.ep.doorbell_for(to.len());
    for &n in to {
        d.rpc(NodeId(n), bytes.clone());
    }
    let res = d.submit().await.map_err(|_| Abort::NodeFailed)?;
    for (j, &n) in to.iter().enumerate() {
        let r = stages::decode(res.rpc(j));
        assert!(
            r == Reply::Ok,
            "calvin: node {n} refused {msg:?} with {r:?}"
        );
    }
    Ok(())
}

fn others(c: &Coordinator) -> Vec<u16> {
    let me = c.node().0;
    (0..c.catalog.nodes).filter(|&n| n != me).collect()
}

/// This node finished `epoch`: it says so to every node, itself included.
async fn say_done(c: &mut Coordinator, epoch: u64) -> Result<(), Abort> {
    let me = c.node().0;
    state(c)
        .epoch_done(epoch, me, c.catalog.nodes)
        .unwrap_or_else(|e| panic!("calvin: node {me}: {e}"));
    let to = others(c);
    if c.cfg.plan.get(BARRIER) == Primitive::OneSided {
        // The word is this node's alone on every node, and only grows.
        let b = buffers(c).expect("calvin: a one-sided barrier registers its buffers");
        let mut d = c.ep.doorbell_for(to.len());
        for &n in &to {
            d.write(b.barrier(NodeId(n), me), [epoch + 1].into_iter().collect());
        }
        d.submit().await.map_err(|_| Abort::NodeFailed)?;
        return Ok(());
    }
    send(c, &CalvinRequest::EpochDone { epoch, from: me }, &to).await
}

/// The run's one-sided buffers, if the plan runs a stage one-sided.
fn buffers(c: &Coordinator) -> Option<buffers::Buffers> {
    state(c).buffers(|| {
        let batch_max = c.cfg.family_as::<config::CalvinConfig>().batch_max;
        buffers::Buffers::of(
            &c.catalog,
            &c.cfg.plan,
            c.cfg.coordinators_per_node,
            batch_max,
        )
    })
}

/// WRITEs this node's batch into its slot on every other node, then its header.
async fn write_batch(c: &mut Coordinator, b: &msg::Batch, to: &[u16]) -> Result<(), Abort> {
    let bufs = buffers(c).expect("calvin: a one-sided dispatch registers its buffers");
    let words = buffers::to_words(&CalvinRequest::Batch(b.clone()));
    assert!(
        words.len() as u64 <= bufs.slot_words,
        "calvin: a batch of {} words for a slot of {} (the lane's collection stops short of it)",
        words.len(),
        bufs.slot_words
    );
    let mut d = c.ep.doorbell_for(to.len());
    for &n in to {
        d.write(
            bufs.body(NodeId(n), b.from, b.lane),
            words.iter().copied().collect(),
        );
    }
    d.submit().await.map_err(|_| Abort::NodeFailed)?;
    let header = buffers::header_word(b.epoch, words.len() as u64);
    let mut d = c.ep.doorbell_for(to.len());
    for &n in to {
        d.write(
            bufs.header(NodeId(n), b.from, b.lane),
            [header].into_iter().collect(),
        );
    }
    d.submit().await.map_err(|_| Abort::NodeFailed)?;
    Ok(())
}

/// Reads this node's batch headers and takes every batch of `epoch` newly written there;
/// whether it took any.
async fn pull_batches(c: &mut Coordinator, epoch: u64) -> Result<bool, Abort> {
    let Some(bufs) = buffers(c).filter(|b| b.slot_words > 0) else {
        return Ok(false);
    };
    let (me, nodes, s) = (c.node(), c.catalog.nodes, state(c));
    let (ptr, len) = bufs.headers(me);
    let headers = c.ep.read(ptr, len).await.map_err(|_| Abort::NodeFailed)?;
    let backs_up = |from: u16| {
        (0..c.cfg.log_replicas).any(|r| c.catalog.topology().log_backup(NodeId(from), r).0 == me)
    };
    let mut took = false;
    for (i, &h) in headers.iter().enumerate() {
        let (from, lane) = bufs.slot_of(i);
        let Some((e, words)) = buffers::read_header(h) else {
            continue;
        };
        if e != epoch || from == me.0 || s.has_batch(epoch, from, lane) {
            continue;
        }
        let body =
            c.ep.read(bufs.body(me, from, lane), words as u32)
                .await
                .map_err(|_| Abort::NodeFailed)?;
        let mut b = buffers::decode(&body).unwrap_or_else(|e| {
            panic!(
                "calvin: node {}: a malformed batch in its buffer: {}",
                me.0, e.0
            )
        });
        assert!(
            (b.epoch, b.from, b.lane) == (epoch, from, lane),
            "calvin: node {}: slot of node {from} lane {lane} holds epoch {} of node {} lane {}",
            me.0,
            b.epoch,
            b.from,
            b.lane
        );
        b.keep = backs_up(from);
        // Another lane of this node (on another thread) may have pulled it meanwhile: the
        // first to hand it over takes it.
        took |= s
            .pulled(nodes, b)
            .unwrap_or_else(|e| panic!("calvin: node {}: {e}", me.0));
    }
    Ok(took)
}

/// Reads this node's barrier words: every node whose word says it finished `epoch` did.
async fn pull_barrier(c: &mut Coordinator, epoch: u64) -> Result<(), Abort> {
    if c.cfg.plan.get(BARRIER) != Primitive::OneSided {
        return Ok(());
    }
    let bufs = buffers(c).expect("calvin: a one-sided barrier registers its buffers");
    let (me, nodes, s) = (c.node(), c.catalog.nodes, state(c));
    let (ptr, len) = bufs.barriers(me);
    let words = c.ep.read(ptr, len).await.map_err(|_| Abort::NodeFailed)?;
    for (n, &w) in words.iter().enumerate() {
        if n as u16 != me.0 && w > epoch {
            s.epoch_done_seen(epoch, n as u16, nodes);
        }
    }
    Ok(())
}

/// Reads `keys` on this node (its records, and replicated tables' copies) as they are now;
/// a key with no record comes back absent (its version [`VERSION_ABSENT`], no payload), for
/// the transaction's logic to meet as `NotFound` on every node alike.
async fn read_here(
    c: &mut Coordinator,
    keys: &[(TableId, u64, bool)],
) -> Result<Vec<(Value, Option<u32>)>, Abort> {
    match read_present(c, keys).await {
        Err(Abort::NotFound) => {}
        r => return r,
    }
    // Rare (TPC-C's rolled-back NewOrder names an item no one has): key by key.
    let mut out = Vec::with_capacity(keys.len());
    for &k in keys {
        match read_present(c, &[k]).await {
            Ok(mut v) => out.append(&mut v),
            Err(Abort::NotFound) => {
                let v = Value {
                    table: k.0,
                    key: k.1,
                    version: VERSION_ABSENT,
                    data: Vec::new(),
                };
                out.push((v, None));
            }
            Err(a) => return Err(a),
        }
    }
    Ok(out)
}

/// [`read_here`] of keys that all have a record; `NotFound` if one has none.
async fn read_present(
    c: &mut Coordinator,
    keys: &[(TableId, u64, bool)],
) -> Result<Vec<(Value, Option<u32>)>, Abort> {
    let mut tx = TxnCore::<()>::begin(c);
    let idxs: Vec<usize> = keys
        .iter()
        .map(|&(t, k, _)| tx.add(t, k, Access::Read))
        .collect();
    let r = stages::read(&mut tx, &idxs, Primitive::OneSided).await;
    let out = r.map(|()| {
        tx.entries
            .iter()
            .map(|e| {
                let v = Value {
                    table: e.table,
                    key: e.key,
                    version: e.version,
                    data: e.data.clone(),
                };
                (v, e.loc.map(|l| l.0))
            })
            .collect()
    });
    tx.end();
    out
}

/// Runs `t`'s part on this node once its locks are granted: reads its records here and
/// forwards them to the executing nodes. `Some(values)` when this node executes it, with
/// every value it reads.
async fn participate(
    c: &mut Coordinator,
    t: &Ordered,
    locks: LockWait,
) -> Result<Option<Running>, Abort> {
    let s = state(c);
    let me = c.node().0;
    if locks == LockWait::Granted {
        wait(c, || s.granted(t).then_some(())).await?;
    }
    let mine = read_here(c, &t.local).await?;
    let to: Vec<u16> = t.executors.iter().copied().filter(|&n| n != me).collect();
    if !to.is_empty() && !mine.is_empty() {
        let msg = CalvinRequest::Forward {
            epoch: t.epoch,
            id: t.id,
            from: me,
            values: mine.iter().map(|(v, _)| v.clone()).collect(),
        };
        let to = if c.cfg.plan.get(FORWARD) == Primitive::OneSided {
            write_forward(c, t, &buffers::to_words(&msg)).await?
        } else {
            to
        };
        send(c, &msg, &to).await?;
    }
    if !t.executes_on(me) {
        return Ok(None);
    }
    let remote = gather(c, t).await?;
    let replicated: Vec<(TableId, u64, bool)> = t
        .request
        .accesses
        .iter()
        .copied()
        .filter(|&(tb, _, write)| {
            let r = c.catalog.is_replicated(tb);
            assert!(!(r && write), "calvin: a write to replicated table {tb:?}");
            r
        })
        .collect();
    let copies = read_here(c, &replicated).await?;
    let mut values = HashMap::new();
    for (v, loc) in mine.into_iter().chain(copies) {
        let g = Gathered {
            loc,
            version: v.version,
            data: v.data,
        };
        values.insert((v.table, v.key), g);
    }
    for v in remote {
        let g = Gathered {
            loc: None,
            version: v.version,
            data: v.data,
        };
        values.insert((v.table, v.key), g);
    }
    Ok(Some(Running {
        t: t.clone(),
        values,
    }))
}

/// One-sided forward: WRITEs `words` (`t`'s forward, encoded) into each receiver's log of
/// this node, then the transaction's entry there; the receivers whose log has no room left
/// this epoch, to whom it goes as an RPC instead.
async fn write_forward(c: &mut Coordinator, t: &Ordered, words: &[u64]) -> Result<Vec<u16>, Abort> {
    let bufs = buffers(c).expect("calvin: a one-sided forward registers its buffers");
    let (me, s) = (c.node(), state(c));
    let mut placed = Vec::with_capacity(t.fwd_send.len());
    let mut by_rpc = Vec::new();
    for &(r, k) in &t.fwd_send {
        match s.fwd_alloc(t.epoch, r, words.len() as u64, bufs.fwd_log_words) {
            Some(off) => placed.push((r, k, off)),
            None => by_rpc.push(r),
        }
    }
    if placed.is_empty() {
        return Ok(by_rpc);
    }
    let mut d = c.ep.doorbell_for(placed.len());
    for &(r, _, off) in &placed {
        d.write(
            bufs.fwd_log(NodeId(r), me.0, off),
            words.iter().copied().collect(),
        );
    }
    d.submit().await.map_err(|_| Abort::NodeFailed)?;
    // The values are in place before their entry says so.
    let mut d = c.ep.doorbell_for(placed.len());
    for &(r, k, off) in &placed {
        let entry = buffers::fwd_word(off, words.len() as u64);
        d.write(
            bufs.fwd_entry(NodeId(r), me.0, k),
            [entry].into_iter().collect(),
        );
    }
    d.submit().await.map_err(|_| Abort::NodeFailed)?;
    Ok(by_rpc)
}

/// Reads this node's forward entries of `t` not yet taken: the values each written one
/// points to become `t`'s, and the entry is zeroed for the next epoch's.
async fn pull_forwards(c: &mut Coordinator, t: &Ordered) -> Result<(), Abort> {
    let Some(bufs) = buffers(c).filter(|b| b.fwd_entries > 0) else {
        return Ok(());
    };
    let (me, s) = (c.node(), state(c));
    for &(p, k) in &t.fwd_recv {
        if s.has_forward(t.id, p) {
            continue;
        }
        let entry = bufs.fwd_entry(me, p, k);
        let word = c.ep.read(entry, 1).await.map_err(|_| Abort::NodeFailed)?[0];
        let Some((off, len)) = buffers::read_fwd_word(word) else {
            continue;
        };
        let body =
            c.ep.read(bufs.fwd_log(me, p, off), len as u32)
                .await
                .map_err(|_| Abort::NodeFailed)?;
        let (id, from, values) = buffers::decode_values(&body).unwrap_or_else(|e| {
            panic!(
                "calvin: node {}: a malformed forward in its log of node {p}: {}",
                me.0, e.0
            )
        });
        assert!(
            (id, from) == (t.id, p),
            "calvin: node {}: forward entry {k} of node {p} holds transaction {id} of node {from}, not {}",
            me.0,
            t.id
        );
        let mut d = c.ep.doorbell_for(1);
        d.write(entry, [0].into_iter().collect());
        d.submit().await.map_err(|_| Abort::NodeFailed)?;
        s.forward(t.id, p, values);
    }
    Ok(())
}

/// The values every other participant of `t` forwarded here, once all are (pulled from
/// this node's forward log when forward is one-sided); `node_failed` after [`WAIT_NS_MAX`].
async fn gather(c: &mut Coordinator, t: &Ordered) -> Result<Vec<Value>, Abort> {
    let (me, s) = (c.node().0, state(c));
    let mut backoff = Backoff::new(c);
    loop {
        pull_forwards(c, t).await?;
        if let Some(v) = s.gathered(t, me) {
            return Ok(v);
        }
        backoff.pause(c).await?;
    }
}

/// Inserts the transaction's records this node holds (their keys follow from the values
/// its logic read under its locks, e.g. TPC-C's order id from `D_NEXT_O_ID`, so they are the
/// same on every node executing it); the others' nodes insert theirs, as fresh keys.
async fn insert_own(tx: &mut TxnCore<'_>, me: NodeId) -> Result<(), Abort> {
    let own = tx.select(|e| e.access == Access::Insert && e.node == me);
    for e in tx
        .entries
        .iter_mut()
        .filter(|e| e.access == Access::Insert && e.node != me)
    {
        // A key no deletion left behind starts at the initial version (Calvin runs no
        // deletes yet).
        e.installed = Some(INITIAL_VERSION);
    }
    if own.is_empty() {
        return Ok(());
    }
    // Installed locked by the attempt's timestamp and freed at once: the records' locks
    // are the node's lock table's, and the inserted keys are covered by a record the
    // transaction holds (TPC-C's district), so no other transaction looks for them yet.
    stages::apply_inserts_at(tx, &own, tx.ts.word()).await?;
    stages::release(tx, &own, Primitive::OneSided).await;
    Ok(())
}

/// Deletes the transaction's records this node holds (each held in the node's lock table
/// since before it ran, so the record is there); the others' nodes delete theirs, from the
/// same values in the same order: the version after the one read.
async fn delete_own(tx: &mut TxnCore<'_>, me: NodeId) -> Result<(), Abort> {
    for e in tx
        .entries
        .iter_mut()
        .filter(|e| e.access == Access::Delete && e.node != me)
    {
        e.installed = Some(e.version + 1);
    }
    let own = tx.select(|e| e.access == Access::Delete && e.node == me);
    if own.is_empty() {
        return Ok(());
    }
    let mut d = tx.c.ep.doorbell_for(own.len());
    for &i in &own {
        let e = &tx.entries[i];
        let req = atoll_txn::msg::Request::Delete {
            table: e.table,
            key: e.key,
        };
        d.rpc(me, req.to_bytes());
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    for (j, &i) in own.iter().enumerate() {
        match stages::decode(res.rpc(j)) {
            Reply::Deleted { version } => tx.entries[i].installed = Some(version),
            r => panic!(
                "calvin: delete of {:?} key {}, held in the lock table: {r:?}",
                tx.entries[i].table, tx.entries[i].key
            ),
        }
        let (t, k) = (tx.entries[i].table, tx.entries[i].key);
        tx.c.forget_loc(t, me, k);
    }
    Ok(())
}

/// The next transaction of `epoch` this node runs, in order, once the batches before it
/// are all here (pulled from the buffers when dispatch is one-sided); `None`: the epoch
/// has nothing left here. `node_failed` after [`WAIT_NS_MAX`].
async fn take(c: &mut Coordinator, s: &CalvinNode, epoch: u64) -> Result<Option<Ordered>, Abort> {
    let (me, catalog) = (c.node(), c.catalog.clone());
    let lane = c.id % c.cfg.coordinators_per_node;
    let order = c.cfg.family_as::<config::CalvinConfig>().order;
    let mut backoff = Backoff::new(c);
    loop {
        match s.take(epoch, &catalog, me, lane, order) {
            Take::Run(t) => return Ok(Some(t)),
            Take::Drained => return Ok(None),
            Take::Wait => {}
        }
        if !pull_batches(c, epoch).await? {
            backoff.pause(c).await?;
        }
    }
}

/// Whether a transaction runs only once it holds its locks: always, but for the
/// deliberately broken variant the tests run (which the checks must catch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockWait {
    Granted,
    Skipped,
}

/// [`Protocol::seq_next`]: the next transaction of `epoch` this node executes, in order;
/// those it only reads for are done here (read, forwarded, released).
pub async fn next_in_order(
    c: &mut Coordinator,
    epoch: u64,
    locks: LockWait,
) -> Result<Option<SeqTxn>, Abort> {
    let s = state(c);
    let me = c.node();
    // Bounded: each turn takes one transaction of the epoch's, or waits (bounded).
    loop {
        let t = take(c, &s, epoch).await?;
        let Some(t) = t else {
            if s.finished(epoch) {
                say_done(c, epoch).await?;
            }
            return Ok(None);
        };
        let taken_ns = c.now_ns();
        match participate(c, &t, locks).await? {
            Some(running) => {
                let r = &running.t.request;
                let seq = SeqTxn {
                    id: running.t.id,
                    ty: r.ty,
                    tag: r.tag,
                    ts: r.ts,
                    input: r.input.clone(),
                    arrival_ns: r.arrival_ns,
                    attempt: r.attempt,
                    taken_ns,
                    gathered_ns: c.now_ns(),
                    records: running.t.executors.first() == Some(&me.0),
                    second_pass: running.t.deferred,
                };
                c.family_ctx = Some(Box::new(running));
                return Ok(Some(seq));
            }
            None => {
                if s.ended(&t) {
                    say_done(c, epoch).await?;
                }
            }
        }
    }
}

impl Protocol for Calvin {
    const NAME: &'static str = "calvin";
    const TITLE: &'static str = "CALVIN";
    const DELETES: bool = true;
    const STAGES: &'static [Stage] = &[DISPATCH, FORWARD, BARRIER];
    const FAMILY_STAGES: &'static [Stage] = &[DISPATCH, FORWARD, BARRIER];
    // Deterministic: a conflict waits in the lock table, it never aborts.
    const CONFLICT_ABORTS: &'static [Abort] = &[];
    const KNOBS: &'static [atoll_txn::KnobSpec] =
        &[config::EPOCH_US, config::BATCH_MAX, config::ORDER];
    const SEQUENCED: bool = true;
    type EntryState = ();

    fn configure(
        knobs: &atoll_txn::Knobs,
    ) -> Result<Arc<dyn atoll_txn::FamilyConfig>, atoll_txn::knobs::KnobError> {
        config::configure(knobs)
    }

    fn check_plan(_plan: &Plan) -> Result<(), PlanError> {
        // Every stage runs over either primitive.
        Ok(())
    }

    fn seq_shape(cfg: &atoll_txn::TxnConfig) -> atoll_txn::SeqShape {
        let c = cfg.family_as::<config::CalvinConfig>();
        let slot_words = buffers::slot_words(&cfg.plan, c.batch_max);
        atoll_txn::SeqShape {
            epoch_ns: c.epoch_ns,
            batch_max: c.batch_max,
            words_max: match slot_words {
                0 => u64::MAX,
                w => w - buffers::BATCH_FIXED_WORDS,
            },
        }
    }

    async fn fetch(tx: &mut TxnCore<'_>, idxs: &[usize]) -> Result<(), Abort> {
        let sequenced = tx.c.family_ctx.as_ref().is_some_and(|b| b.is::<Running>());
        if !sequenced {
            // A reconnaissance run before sequencing (Calvin's OLLP): the records as they are
            // now, unlocked; what it finds is only declared, never written.
            return stages::read(tx, idxs, Primitive::OneSided).await;
        }
        for &i in idxs {
            let (t, k) = (tx.entries[i].table, tx.entries[i].key);
            let running =
                tx.c.family_ctx
                    .as_ref()
                    .and_then(|b| b.downcast_ref::<Running>())
                    .expect("checked above");
            let Some(g) = running.values.get(&(t, k)) else {
                // Every executing node reads the same values in the same order, so each
                // finds the same undeclared record: the transaction is sequenced again, with
                // a new reconnaissance (a workload declaring from its input alone never
                // gets here: the contracts test holds it to its declaration).
                return Err(Abort::KeysChanged);
            };
            if g.version & VERSION_ABSENT != 0 {
                // Every executing node reads the same key absent: the same outcome on each.
                return Err(Abort::NotFound);
            }
            let (loc, version, data) = (g.loc, g.version, g.data.clone());
            let e = &mut tx.entries[i];
            e.version = version;
            if let Some(l) = loc {
                e.loc = Some(Loc(l));
                // Held in the node's lock table since before the transaction ran.
                e.locked = true;
            }
            e.fill(version, &data);
            e.fetched = true;
        }
        Ok(())
    }

    async fn commit(tx: &mut TxnCore<'_>) -> Result<(), Abort> {
        let blind = tx.select(|e| e.dirty && !e.fetched && e.access != Access::Insert);
        if !blind.is_empty() {
            Self::fetch(tx, &blind).await?;
        }
        let me = tx.c.node();
        insert_own(tx, me).await?;
        delete_own(tx, me).await?;
        for e in tx.entries.iter_mut().filter(|e| {
            e.dirty && e.node != me && !matches!(e.access, Access::Insert | Access::Delete)
        }) {
            // Its node installs it, from the same values in the same order: this version.
            e.installed = Some(e.version + 1);
        }
        let local = tx.select(|e| e.dirty && e.node == me && e.access != Access::Delete);
        let opts = WriteBackOpts {
            primitive: Primitive::OneSided,
            release: false,
            set_ts: None,
            install: None,
        };
        stages::write_back(tx, &local, opts).await;
        Ok(())
    }

    async fn rollback(_tx: &mut TxnCore<'_>) {
        // Nothing is held by the attempt: its locks are the node's lock table's, released
        // by `seq_finish`, and it wrote nothing.
    }

    async fn seq_dispatch(c: &mut Coordinator, batch: SeqBatch) -> Result<(), Abort> {
        let me = c.node().0;
        let requests: Vec<Request> = batch
            .requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| Request {
                seq: i as u32,
                ty: r.ty,
                tag: c.next_sequenced_tag(),
                ts: c.begin_ts().read.word(),
                arrival_ns: r.arrival_ns,
                attempt: r.attempt,
                input: r.input,
                accesses: r.accesses,
            })
            .collect();
        // The input replicas: this node's log backups keep the batch after the epoch.
        let backups: Vec<u16> = (0..c.cfg.log_replicas)
            .map(|b| c.catalog.topology().log_backup(c.node(), b).0 .0)
            .collect();
        let b = msg::Batch {
            epoch: batch.epoch,
            from: me,
            lane: batch.lane,
            lanes: batch.lanes,
            last: batch.last,
            keep: true,
            requests,
        };
        if c.cfg.plan.get(DISPATCH) == Primitive::OneSided {
            // Each reader knows whether it backs this node up (`keep`) when it pulls.
            let to = others(c);
            write_batch(c, &b, &to).await?;
            state(c)
                .batch(c.catalog.nodes, b)
                .unwrap_or_else(|e| panic!("calvin: node {me}: {e}"));
            return Ok(());
        }
        let (kept, plain): (Vec<u16>, Vec<u16>) =
            others(c).into_iter().partition(|n| backups.contains(n));
        let mut m = CalvinRequest::Batch(b);
        send(c, &m, &kept).await?;
        if let CalvinRequest::Batch(b) = &mut m {
            b.keep = false;
        }
        send(c, &m, &plain).await?;
        let CalvinRequest::Batch(b) = m else {
            unreachable!("built above")
        };
        state(c)
            .batch(c.catalog.nodes, b)
            .unwrap_or_else(|e| panic!("calvin: node {me}: {e}"));
        Ok(())
    }

    async fn seq_next(c: &mut Coordinator, epoch: u64) -> Result<Option<SeqTxn>, Abort> {
        next_in_order(c, epoch, LockWait::Granted).await
    }

    async fn seq_finish(c: &mut Coordinator, t: &SeqTxn) -> Result<(), Abort> {
        let running = c
            .family_ctx
            .take()
            .and_then(|b| b.downcast::<Running>().ok())
            .expect("calvin: a transaction finished that was not running");
        assert_eq!(running.t.id, t.id, "calvin: finished another transaction");
        if state(c).ended(&running.t) {
            say_done(c, running.t.epoch).await?;
        }
        Ok(())
    }

    async fn seq_barrier(c: &mut Coordinator, epoch: u64) -> Result<bool, Abort> {
        let s = state(c);
        let nodes = c.catalog.nodes;
        let mut backoff = Backoff::new(c);
        // Bounded by WAIT_NS_MAX: past it a node stopped answering.
        loop {
            pull_barrier(c, epoch).await?;
            if let Some(last) = s.past_barrier(epoch, nodes) {
                return Ok(!last);
            }
            backoff.pause(c).await?;
        }
    }
}
