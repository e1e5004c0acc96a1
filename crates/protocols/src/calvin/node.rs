//! CALVIN's state on one node, shared by its participant (lanes' batches, forwarded values
//! and EPOCH_DONEs arrive there) and its lanes (which take the epoch's transactions in
//! order): every epoch's batches, the order they make, the deterministic lock table, the
//! values gathered, and which nodes finished each epoch.
//!
//! **Order** (`global`, the original Calvin's): epoch by epoch; within one, lane 0's
//! batches first, then lane 1's, ...; within a lane, node 0's batch first, then node 1's;
//! within a batch, as the lane drew them. Every node computes it from the same batches, so
//! every node queues its locks in the same order.
//!
//! **Order** (`lane`, RCC's): each lane takes its own transactions, in the same order within
//! the lane, concurrently with the other lanes. A transaction that conflicts with one of an
//! earlier lane (a record either writes, as both declared it) is deferred: it runs in a
//! second pass, once every lane's first pass ended on the node, in the global order. The
//! first passes' transactions of different lanes touch no common record but to read it, so
//! they commute, and every node defers the same ones: the outcome is as deterministic as
//! the global order's.

use super::config::Order;
use super::locks::LockTable;
use super::msg::{Batch, Request, Value};
use atoll_fabric::NodeId;
use atoll_storage::{Catalog, TableId};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Mutex, OnceLock};

/// Epochs of each lane's batches a backup keeps (the newest): recovery replays from them.
pub const KEPT_EPOCHS_MAX: usize = 4;

/// Transactions one epoch may order, at most: its place in the order is the low 32 bits of
/// a transaction's id (the epoch is the high ones).
pub const EPOCH_TXNS_MAX: u64 = 1 << 32;

/// A transaction as this node runs it.
#[derive(Clone, Debug)]
pub struct Ordered {
    /// `epoch << 32 | place in the epoch's order`.
    pub id: u64,
    pub epoch: u64,
    pub request: Request,
    /// Its records on this node (not a replicated table's), which it locks here.
    pub local: Vec<(TableId, u64, bool)>,
    /// Nodes holding any of its records (replicated tables aside), ascending.
    pub participants: Vec<u16>,
    /// Nodes that execute it, ascending: those holding a record it writes; a read-only
    /// transaction runs on its first participant (or, reading only replicated tables, on
    /// its lane's node).
    pub executors: Vec<u16>,
    /// In the `lane` order: it conflicts with an earlier lane's transaction and runs in the
    /// epoch's second pass.
    pub deferred: bool,
    /// One-sided forward: the nodes this node forwards its values to, each with the entry
    /// they go to there ([`super::buffers`]), and the nodes it gets values from, each with
    /// the entry they come in.
    pub fwd_send: Vec<(u16, u32)>,
    pub fwd_recv: Vec<(u16, u32)>,
}

impl Ordered {
    pub fn executes_on(&self, n: u16) -> bool {
        self.executors.contains(&n)
    }
}

#[derive(Default)]
struct Epoch {
    /// `(lane, node)` -> (last, requests).
    batches: HashMap<(u32, u16), (bool, Vec<Request>)>,
    /// `(lane, node)` of every batch that arrived, taken or not.
    received: HashSet<(u32, u16)>,
    /// Lanes whose transactions are queued (in order: lanes below it all are).
    lanes_queued: u32,
    /// The next place in the order.
    places: u64,
    /// This node's transactions not yet taken by a lane, in order (the `lane` order's second
    /// pass).
    queue: VecDeque<Ordered>,
    /// The `lane` order's first pass: each lane's transactions not yet taken, in order.
    lane_queues: Vec<VecDeque<Ordered>>,
    /// The `lane` order: records the queued lanes' transactions declared (all of them, on
    /// every node), whether one writes it.
    declared: HashMap<(TableId, u64), bool>,
    /// The `lane` order: this node's deferred transactions, in order, until the second pass.
    deferred: Vec<Ordered>,
    /// The `lane` order's second pass began here.
    second_pass: bool,
    /// Forward entries used so far, per (sender, receiver) this node is one of.
    fwd_next: HashMap<(u16, u16), u32>,
    /// Words of each receiver's forward log of this node's this node used.
    fwd_used: HashMap<u16, u64>,
    /// This node's transactions queued, and ended.
    queued: u64,
    ended: u64,
    /// Some lane's batch was its last: the run ends after this epoch.
    last: bool,
    /// Nodes that finished the epoch (their EPOCH_DONE arrived; this one's too).
    done: Vec<bool>,
    /// This node sent its EPOCH_DONE.
    done_sent: bool,
    /// This node's lanes past the barrier.
    lanes_past: u32,
}

#[derive(Default)]
struct Inner {
    /// Nodes and lanes per node, from the first batch (every batch says).
    shape: Option<(u16, u32)>,
    epochs: BTreeMap<u64, Epoch>,
    locks: LockTable,
    /// Values forwarded to this node, by transaction id, with the nodes they came from.
    forwards: HashMap<u64, Vec<(u16, Vec<Value>)>>,
    /// As a backup: the newest batches of each `(node, lane)` it backs up, by epoch.
    kept: HashMap<(u16, u32), VecDeque<(u64, Vec<Request>)>>,
}

/// One node's CALVIN state.
#[derive(Default)]
pub struct CalvinNode {
    inner: Mutex<Inner>,
    /// Where the run's one-sided buffers lie (the same for every lane of a run), found once.
    buffers: OnceLock<Option<super::buffers::Buffers>>,
}

/// What [`CalvinNode::take`] found.
pub enum Take {
    /// A transaction to run here, taken in order (its locks queued, maybe not granted).
    Run(Ordered),
    /// The epoch's batches are not all here yet, or another lane holds what is left.
    Wait,
    /// Nothing of the epoch is left to take on this node.
    Drained,
}

impl CalvinNode {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("no poisoned calvin state")
    }

    /// The run's one-sided buffers, found by `find` on first use.
    pub fn buffers(
        &self,
        find: impl FnOnce() -> Option<super::buffers::Buffers>,
    ) -> Option<super::buffers::Buffers> {
        *self.buffers.get_or_init(find)
    }

    /// A batch a lane of this node pulled from its one-sided buffer: taken unless another
    /// lane (on another thread) took it first, atomically; whether this one took it.
    pub fn pulled(&self, nodes: u16, b: Batch) -> Result<bool, String> {
        self.batch_inner(nodes, b, true)
    }

    /// A lane's batch arrived (from another node's lane, or this node's own); when it says
    /// `keep`, this node backs the sender up and keeps it after the epoch.
    pub fn batch(&self, nodes: u16, b: Batch) -> Result<(), String> {
        self.batch_inner(nodes, b, false).map(|_| ())
    }

    /// [`CalvinNode::batch`]; a second copy of a batch is an error, or ignored (`Ok(false)`)
    /// when `pulled`.
    fn batch_inner(&self, nodes: u16, b: Batch, pulled: bool) -> Result<bool, String> {
        let Batch {
            epoch,
            from,
            lane,
            lanes,
            last,
            keep,
            requests,
        } = b;
        let mut s = self.lock();
        match s.shape {
            None => s.shape = Some((nodes, lanes)),
            Some(shape) if shape != (nodes, lanes) => {
                return Err(format!(
                    "a batch for {nodes} nodes x {lanes} lanes in a run of {} x {}",
                    shape.0, shape.1
                ))
            }
            Some(_) => {}
        }
        if from >= nodes || lane >= lanes {
            return Err(format!(
                "a batch from node {from} lane {lane} of {nodes} x {lanes}"
            ));
        }
        let e = s.epochs.entry(epoch).or_default();
        if !e.received.insert((lane, from)) {
            if pulled {
                return Ok(false);
            }
            return Err(format!(
                "a second batch of epoch {epoch} from node {from} lane {lane}"
            ));
        }
        if keep {
            let kept = s.kept.entry((from, lane)).or_default();
            if kept.len() == KEPT_EPOCHS_MAX {
                kept.pop_front();
            }
            kept.push_back((epoch, requests.clone()));
        }
        let e = s.epochs.entry(epoch).or_default();
        e.batches.insert((lane, from), (last, requests));
        Ok(true)
    }

    /// Whether node `from`'s lane `lane` batch of `epoch` arrived (a one-sided reader pulls
    /// each once).
    pub fn has_batch(&self, epoch: u64, from: u16, lane: u32) -> bool {
        self.lock()
            .epochs
            .get(&epoch)
            .is_some_and(|e| e.received.contains(&(lane, from)))
    }

    /// The epochs of `(node, lane)`'s batches this node keeps as its backup, oldest first.
    pub fn kept_epochs(&self, from: u16, lane: u32) -> Vec<u64> {
        self.lock()
            .kept
            .get(&(from, lane))
            .map_or(Vec::new(), |k| k.iter().map(|(e, _)| *e).collect())
    }

    /// Values of transaction `id` forwarded by node `from`.
    pub fn forward(&self, id: u64, from: u16, values: Vec<Value>) {
        self.lock()
            .forwards
            .entry(id)
            .or_default()
            .push((from, values));
    }

    /// Node `from` finished `epoch`.
    pub fn epoch_done(&self, epoch: u64, from: u16, nodes: u16) -> Result<(), String> {
        let mut s = self.lock();
        let e = s.epochs.entry(epoch).or_default();
        if e.done.is_empty() {
            e.done = vec![false; nodes as usize];
        }
        match e.done.get_mut(from as usize) {
            Some(d) if !*d => {
                *d = true;
                Ok(())
            }
            Some(_) => Err(format!(
                "a second EPOCH_DONE of epoch {epoch} from node {from}"
            )),
            None => Err(format!("an EPOCH_DONE from node {from} of {nodes}")),
        }
    }

    /// Node `from` finished `epoch`, as its one-sided word says (read again and again: once
    /// is enough).
    pub fn epoch_done_seen(&self, epoch: u64, from: u16, nodes: u16) {
        let mut s = self.lock();
        let e = s.epochs.entry(epoch).or_default();
        if e.done.is_empty() {
            e.done = vec![false; nodes as usize];
        }
        if let Some(d) = e.done.get_mut(from as usize) {
            *d = true;
        }
    }

    /// Takes the next transaction of `epoch` this node runs on lane `lane`, in `order`,
    /// queueing the lanes whose batches are all here first.
    pub fn take(&self, epoch: u64, catalog: &Catalog, me: NodeId, lane: u32, order: Order) -> Take {
        let mut s = self.lock();
        let Some((nodes, lanes)) = s.shape else {
            return Take::Wait;
        };
        let Inner { epochs, locks, .. } = &mut *s;
        let e = epochs.entry(epoch).or_default();
        if e.lane_queues.is_empty() && order == Order::Lane {
            e.lane_queues = vec![VecDeque::new(); lanes as usize];
        }
        while e.lanes_queued < lanes
            && (0..nodes).all(|n| e.batches.contains_key(&(e.lanes_queued, n)))
        {
            queue_lane(e, epoch, nodes, catalog, me, locks, order);
        }
        if order == Order::Lane {
            if let Some(t) = e.lane_queues[lane as usize].pop_front() {
                return Take::Run(t);
            }
            let first_pass_over = e.second_pass
                || e.lanes_queued == lanes
                    && e.lane_queues.iter().all(VecDeque::is_empty)
                    && e.ended == e.queued;
            if !first_pass_over {
                return Take::Wait;
            }
            if !e.second_pass {
                // Every first-pass transaction released its locks here: the deferred queue
                // theirs in order, behind nothing.
                e.second_pass = true;
                for t in std::mem::take(&mut e.deferred) {
                    locks.enqueue(t.id, &t.local);
                    e.queued += 1;
                    e.queue.push_back(t);
                }
            }
        }
        match e.queue.pop_front() {
            Some(t) => Take::Run(t),
            None if e.lanes_queued == lanes => Take::Drained,
            None => Take::Wait,
        }
    }

    /// Takes `words` of receiver `to`'s forward log of this node, for `epoch`: where they
    /// start, or `None` when fewer than that are left of its `log_words`.
    pub fn fwd_alloc(&self, epoch: u64, to: u16, words: u64, log_words: u64) -> Option<u64> {
        let mut s = self.lock();
        let e = s.epochs.entry(epoch).or_default();
        let used = e.fwd_used.entry(to).or_default();
        let off = *used;
        (off + words <= log_words).then(|| {
            *used += words;
            off
        })
    }

    /// Whether node `from`'s values of transaction `id` are here.
    pub fn has_forward(&self, id: u64, from: u16) -> bool {
        self.lock()
            .forwards
            .get(&id)
            .is_some_and(|v| v.iter().any(|(f, _)| *f == from))
    }

    /// Whether `t` holds its locks here.
    pub fn granted(&self, t: &Ordered) -> bool {
        self.lock().locks.granted(t.id, &t.local)
    }

    /// The values forwarded for `t` once every other participant's are here.
    pub fn gathered(&self, t: &Ordered, me: u16) -> Option<Vec<Value>> {
        let mut s = self.lock();
        let want = t.participants.iter().filter(|&&n| n != me).count();
        let have = s.forwards.get(&t.id).map_or(0, Vec::len);
        if have < want {
            return None;
        }
        let got = s.forwards.remove(&t.id).unwrap_or_default();
        Some(got.into_iter().flat_map(|(_, v)| v).collect())
    }

    /// `t` ended on this node: its locks are released. Returns whether this node just
    /// finished the epoch (and is to say so: its EPOCH_DONE, once).
    pub fn ended(&self, t: &Ordered) -> bool {
        let mut s = self.lock();
        s.locks.release(t.id, &t.local);
        let lanes = s.shape.map_or(0, |(_, l)| l);
        let e = s.epochs.get_mut(&t.epoch).expect("a live epoch");
        e.ended += 1;
        finished(e, lanes)
    }

    /// Whether this node finished `epoch` with nothing of it left to run and is to say so
    /// (once).
    pub fn finished(&self, epoch: u64) -> bool {
        let mut s = self.lock();
        let lanes = s.shape.map_or(0, |(_, l)| l);
        s.epochs.get_mut(&epoch).is_some_and(|e| finished(e, lanes))
    }

    /// Whether every node finished `epoch`; then this lane is past it, and `Some(last)`
    /// says whether the run ends with it. The last of this node's lanes past an epoch
    /// forgets it.
    pub fn past_barrier(&self, epoch: u64, nodes: u16) -> Option<bool> {
        let mut s = self.lock();
        let lanes = s.shape.map_or(0, |(_, l)| l);
        let e = s.epochs.get_mut(&epoch)?;
        if e.done.len() != nodes as usize || !e.done.iter().all(|&d| d) {
            return None;
        }
        e.lanes_past += 1;
        let last = e.last;
        if e.lanes_past == lanes {
            s.epochs.remove(&epoch);
        }
        Some(last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(seq: u32) -> Request {
        Request {
            seq,
            ty: 0,
            tag: 1,
            ts: 1,
            arrival_ns: 0,
            attempt: 1,
            input: vec![],
            accesses: vec![],
        }
    }

    fn batch(epoch: u64, from: u16, lanes: u32, keep: bool, requests: Vec<Request>) -> Batch {
        Batch {
            epoch,
            from,
            lane: 0,
            lanes,
            last: false,
            keep,
            requests,
        }
    }

    fn catalog() -> Catalog {
        let spec = atoll_storage::TableSpec {
            name: "t".into(),
            payload_words: 1,
            capacity_per_node: 16,
            capacity_max_per_node: Some(16),
            partition: atoll_storage::Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        Catalog::new(2, vec![spec], vec![])
    }

    fn touching(seq: u32, accesses: &[(u64, bool)]) -> Request {
        Request {
            accesses: accesses.iter().map(|&(k, w)| (TableId(0), k, w)).collect(),
            ..request(seq)
        }
    }

    fn run(n: &CalvinNode, c: &Catalog, me: u16, lane: u32) -> Take {
        n.take(0, c, NodeId(me), lane, Order::Lane)
    }

    #[test]
    fn calvin_lane_order_defers_a_transaction_that_conflicts_with_an_earlier_lanes_to_a_second_pass(
    ) {
        let c = catalog();
        // Keys on node 0 are even. Lane 0 writes 2; lane 1 reads 2 (deferred) and writes 4.
        let batches = |n: &CalvinNode| {
            let lane = |lane, from, requests| Batch {
                lane,
                lanes: 2,
                ..batch(0, from, 2, false, requests)
            };
            n.batch(2, lane(0, 0, vec![touching(0, &[(2, true)])]))
                .unwrap();
            n.batch(2, lane(0, 1, vec![])).unwrap();
            n.batch(
                2,
                lane(
                    1,
                    0,
                    vec![touching(0, &[(2, false)]), touching(1, &[(4, true)])],
                ),
            )
            .unwrap();
            n.batch(2, lane(1, 1, vec![touching(0, &[(3, true)])]))
                .unwrap();
        };
        let n = CalvinNode::default();
        batches(&n);
        let Take::Run(a) = run(&n, &c, 0, 0) else {
            panic!("lane 0 runs its own")
        };
        assert!(!a.deferred);
        let Take::Run(b) = run(&n, &c, 0, 1) else {
            panic!("lane 1 runs its own that conflicts with nothing earlier")
        };
        assert_eq!(b.request.accesses, vec![(TableId(0), 4, true)]);
        assert!(
            matches!(run(&n, &c, 0, 1), Take::Wait),
            "the first pass is not over"
        );
        assert!(!n.ended(&a) && !n.ended(&b));
        let Take::Run(d) = run(&n, &c, 0, 1) else {
            panic!("the second pass runs the deferred one")
        };
        assert!(d.deferred);
        assert_eq!(d.request.accesses, vec![(TableId(0), 2, false)]);
        assert!(matches!(run(&n, &c, 0, 0), Take::Drained));
        assert!(n.ended(&d), "node 0 finished the epoch");
        // Node 1 holds none of the others' records: it runs its own write of 3 and is done.
        let other = CalvinNode::default();
        batches(&other);
        let Take::Run(mine) = run(&other, &c, 1, 1) else {
            panic!("node 1 runs lane 1's write of 3")
        };
        assert!(!mine.deferred);
        assert!(other.ended(&mine), "node 1 finished the epoch");
        assert!(matches!(run(&other, &c, 1, 0), Take::Drained));
    }

    #[test]
    fn calvin_a_backup_keeps_the_newest_batches_it_backs_up_and_a_second_batch_is_refused() {
        let n = CalvinNode::default();
        for epoch in 0..10 {
            n.batch(2, batch(epoch, 1, 1, true, vec![request(0)]))
                .unwrap();
            n.batch(2, batch(epoch, 0, 1, false, vec![])).unwrap();
        }
        assert_eq!(n.kept_epochs(1, 0), vec![6, 7, 8, 9]);
        assert!(n.kept_epochs(0, 0).is_empty(), "not a backup of node 0");
        let e = n.batch(2, batch(9, 1, 1, true, vec![])).unwrap_err();
        assert!(e.contains("second batch"), "{e}");
        let e = n.batch(3, batch(3, 1, 1, false, vec![])).unwrap_err();
        assert!(e.contains("3 nodes"), "{e}");
        let e = n.batch(2, batch(3, 2, 1, false, vec![])).unwrap_err();
        assert!(e.contains("node 2"), "{e}");
    }
}

fn finished(e: &mut Epoch, lanes: u32) -> bool {
    let all = e.lanes_queued == lanes
        && e.queue.is_empty()
        && e.lane_queues.iter().all(VecDeque::is_empty)
        && e.deferred.is_empty()
        && e.ended == e.queued;
    if all && !e.done_sent {
        e.done_sent = true;
        return true;
    }
    false
}

/// Queues the next lane's transactions of the epoch (every node's batch of it is here), in
/// order: into the lock table and the node's queue (`global`), or into the lane's own queue,
/// a transaction that conflicts with an earlier lane's aside for the second pass (`lane`).
fn queue_lane(
    e: &mut Epoch,
    epoch: u64,
    nodes: u16,
    catalog: &Catalog,
    me: NodeId,
    locks: &mut LockTable,
    order: Order,
) {
    let lane = e.lanes_queued;
    let mut declared_here: Vec<(TableId, u64, bool)> = Vec::new();
    for n in 0..nodes {
        let (last, requests) = e.batches.remove(&(lane, n)).expect("checked");
        e.last |= last;
        for request in requests {
            let place = e.places;
            e.places += 1;
            assert!(
                place < EPOCH_TXNS_MAX,
                "calvin: epoch {epoch} over {EPOCH_TXNS_MAX} transactions"
            );
            let mut t = order_txn(epoch << 32 | place, epoch, request, catalog, me, n);
            forward_entries(&mut t, me.0, &mut e.fwd_next);
            if order == Order::Lane {
                // Against the earlier lanes' records only: this lane's own run in its order.
                t.deferred = t.request.accesses.iter().any(|&(tb, k, write)| {
                    e.declared
                        .get(&(tb, k))
                        .is_some_and(|&written| written || write)
                });
                declared_here.extend(t.request.accesses.iter().copied());
            }
            if !(t.participants.contains(&me.0) || t.executes_on(me.0)) {
                continue;
            }
            match (order, t.deferred) {
                (Order::Global, _) => {
                    locks.enqueue(t.id, &t.local);
                    e.queued += 1;
                    e.queue.push_back(t);
                }
                (Order::Lane, false) => {
                    locks.enqueue(t.id, &t.local);
                    e.queued += 1;
                    e.lane_queues[lane as usize].push_back(t);
                }
                (Order::Lane, true) => e.deferred.push(t),
            }
        }
    }
    for (tb, k, write) in declared_here {
        *e.declared.entry((tb, k)).or_default() |= write;
    }
    e.lanes_queued += 1;
}

/// The forward entries of `t` that node `me` sends or receives: the pair's next, counted
/// over the epoch's transactions in order (both ends count the same).
fn forward_entries(t: &mut Ordered, me: u16, next: &mut HashMap<(u16, u16), u32>) {
    for &p in &t.participants {
        for &r in &t.executors {
            if p == r || (p != me && r != me) {
                continue;
            }
            let k = next.entry((p, r)).or_default();
            if p == me {
                t.fwd_send.push((r, *k));
            } else {
                t.fwd_recv.push((p, *k));
            }
            *k += 1;
        }
    }
}

/// Where request `request` (drawn by node `from`'s lane) runs, as node `me` sees it.
fn order_txn(
    id: u64,
    epoch: u64,
    request: Request,
    catalog: &Catalog,
    me: NodeId,
    from: u16,
) -> Ordered {
    let mut local = Vec::new();
    let mut participants = Vec::new();
    let mut writers = Vec::new();
    for &(t, k, write) in &request.accesses {
        if catalog.is_replicated(t) {
            continue;
        }
        let n = catalog.home(t, k, me).0;
        participants.push(n);
        if write {
            writers.push(n);
        }
        if n == me.0 {
            local.push((t, k, write));
        }
    }
    participants.sort_unstable();
    participants.dedup();
    writers.sort_unstable();
    writers.dedup();
    let executors = match (writers.is_empty(), participants.first()) {
        (false, _) => writers,
        (true, Some(&first)) => vec![first],
        (true, None) => vec![from],
    };
    Ordered {
        id,
        epoch,
        request,
        local,
        participants,
        executors,
        deferred: false,
        fwd_send: Vec::new(),
        fwd_recv: Vec::new(),
    }
}
