//! The backend-independent half of a worker: doorbells, completion slots, co-routine
//! scheduling and counters. A backend supplies a [`Transport`]; protocol code sees only
//! [`Endpoint`].
//!
//! Scheduling invariant: a co-routine future returns `Pending` only while it waits on a
//! completion slot it owns; completing the slot re-queues the owner. No waker is needed, so
//! the same code runs under real threads and under the single-threaded simulator.

// The ids a reply is addressed by live with the other ids (the verbs name them too).
use crate::ids::{NodeId, WorkerId};
pub use crate::ids::{ReplyTo, SlotId};
use crate::memory::{NodeDirectory, NodeMemory, Region};
use crate::verbs::{
    execute_one_sided, Completion, Handled, Op, OpError, RpcHandler, VerbCounters, Words,
};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Ops a doorbell usually carries; more only cost a reallocation.
const DOORBELL_OPS_TYPICAL: usize = 8;

/// Buffers of each kind a worker keeps for reuse: more than its co-routines hold at once
/// (one doorbell or one set of results each, a few while a stage holds two).
const SPARES_PER_KIND_MAX: usize = 64;

/// Largest buffer kept for reuse: a rare huge doorbell (a TPC-C Delivery, a long scan) must
/// not make the worker hold its memory for good.
const SPARE_BYTES_MAX: usize = 64 << 10;

/// Buffers a worker's doorbells reuse (issue #9: a doorbell allocated its op vector and its
/// slot's results, or run inline its values and words, and freed them when its results were
/// dropped: two or three allocations and frees a doorbell, ~10% of a two-node SmallBank
/// transaction's instructions). Shared with the [`Completions`] a worker hands out, which
/// give theirs back when dropped.
#[derive(Default)]
struct Spares {
    ops: Vec<Vec<Op>>,
    results: Vec<Vec<Option<Completion>>>,
    values: Vec<Vec<InlineResult>>,
    words: Vec<Vec<u64>>,
}

/// An empty vector with room for `cap` elements, reused from `pool` when it has one.
fn take_spare<T>(
    pool: &RefCell<Spares>,
    kind: fn(&mut Spares) -> &mut Vec<Vec<T>>,
    cap: usize,
) -> Vec<T> {
    match kind(&mut pool.borrow_mut()).pop() {
        Some(mut v) => {
            v.reserve(cap);
            v
        }
        None => Vec::with_capacity(cap),
    }
}

/// Keeps `v`, emptied, for reuse, unless the pool is full or `v` is empty or huge.
fn give_spare<T>(pool: &mut Vec<Vec<T>>, mut v: Vec<T>) {
    let bytes = v.capacity() * std::mem::size_of::<T>();
    if v.capacity() == 0 || bytes > SPARE_BYTES_MAX || pool.len() >= SPARES_PER_KIND_MAX {
        return;
    }
    v.clear();
    pool.push(v);
}

/// Index of a co-routine within its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskId(pub u32);

/// Something the transport hands the worker's event loop.
pub enum Delivery {
    Completion {
        slot: SlotId,
        index: u32,
        completion: Completion,
    },
    Request {
        from: ReplyTo,
        node: NodeId,
        req: Vec<u8>,
    },
}

/// What became of a posted op.
pub enum Posted {
    /// It completed at once (an own-node access on this CPU, or a backend that completes
    /// synchronously).
    Done(Completion),
    /// Its completion comes later through [`Transport::poll`].
    Pending,
    /// A request to this node's own RPC handler, which holds it (a lock waiting list): its
    /// reply comes through [`Transport::reply`] and then [`Transport::poll`], and the worker
    /// keeps polling the handler meanwhile.
    Held,
}

/// The backend-specific half of a worker: moves ops to their node, this one included, and
/// brings back completions and incoming requests. Only the in-process backend may read the
/// wall clock or spawn threads.
///
/// Local access is the backend's decision: every op goes through [`Transport::post`]. A
/// backend whose NIC atomics are coherent with the CPU's (the in-process one, the simulator)
/// runs own-node ops on the CPU at once with [`execute_local`]; one whose NIC atomics are
/// not coherent with CPU atomics (RDMA atomics on most NICs) must send its own node's CAS
/// and FETCH_ADD through its NIC too, or a CPU CAS could race a peer's NIC CAS on one word.
pub trait Transport {
    /// This backend's clock: wall time since the cluster started, or virtual time.
    fn now_ns(&self) -> u64;
    /// Posts op `index` of doorbell `slot` to the node it names. A failed op completes with
    /// [`Completion::Failed`], never by waiting forever.
    fn post(&self, slot: SlotId, index: u32, op: Op) -> Posted;
    /// Delivers a `Completion::Timer` for `slot` after `delay_ns`.
    fn post_timer(&self, slot: SlotId, delay_ns: u64);
    /// Models `ns` of CPU work by the calling co-routine. Returns true when the work was done
    /// synchronously (the thread really spun); false means the caller must wait on a timer.
    fn compute(&self, ns: u64) -> bool;
    /// Charges a switch to a co-routine (the simulator's CPU model; free elsewhere).
    fn on_switch(&self) {}
    /// The CPU this backend charges for work on the node's own memory outside any verb
    /// (a backup applying a log record to its replica): `accesses` direct accesses and
    /// `bytes` copied. 0 (the default) where the work itself takes real time.
    fn local_work_ns(&self, _accesses: u64, _bytes: u64) -> u64 {
        0
    }
    /// The worker's event loop finished a turn: every ready co-routine ran once and what
    /// arrived was handled. A backend that holds messages back to send them together sends
    /// them now (UCX's coalescing); nothing to do elsewhere.
    fn end_turn(&self) {}
    /// Hands over everything that arrived since the last call.
    fn poll(&self, sink: &mut dyn FnMut(Delivery));
    /// Sends the reply of a served request.
    fn reply(&self, to: ReplyTo, reply: Vec<u8>);
    /// Whether a doorbell of own-node one-sided ops may run inline, in the poster's call,
    /// with no slot, completion queue or per-op [`Transport::post`]: true only for a backend
    /// whose NIC is coherent with the CPU and which charges nothing for local work (the
    /// in-process one; the simulator prices local ops, and a non-coherent NIC posts them).
    fn runs_local_inline(&self) -> bool {
        false
    }
    /// The memory of another node, when this backend would run a one-sided op to it at once
    /// on this CPU, with the target's CPU not involved and nothing charged or delayed (the
    /// in-process backend without injected latency). The core then runs a doorbell of such
    /// ops where they lie, as it runs own-node ones ([`WorkerCore::run_inline`]), instead
    /// of posting each op and moving a [`Completion`] back through a slot. `None` (the
    /// default): every op to `node` is posted.
    fn direct_memory(&self, _node: NodeId) -> Option<&NodeMemory> {
        None
    }
    /// Whether a READ of several words copies them at one instant, so no write lands
    /// between its first and last word: true only for the simulator without tearing (its
    /// model of a READ); NICs and the CPU's copies do not promise it beyond a cache line.
    fn reads_whole(&self) -> bool {
        false
    }
    /// A modelled own log of this node (the simulator's group commit): appends a record of
    /// `bytes` at the caller's now and returns how long until the write carrying it ends,
    /// having charged the calling core the write when it leads its group. `None` (the
    /// default): the backend models nothing, and the caller writes a real log.
    fn instance_log_model(&self, _bytes: u64) -> Option<LogWait> {
        None
    }
}

/// When a record appended to a modelled instance log is durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogWait {
    /// Time from the append until the write carrying the record ends.
    pub wait_ns: u64,
    /// The caller's append started the write (it leads the group and paid for the write).
    pub led: bool,
}

/// Runs an op on this node's CPU at once: a one-sided op on `memory`, an RPC by `handler`
/// (which may hold it). What a backend whose NIC is coherent with the CPU does with ops on
/// its own node; as cheap as a direct access (no allocation beyond an RPC's reply).
#[inline]
pub fn execute_local(
    memory: &NodeMemory,
    handler: &dyn RpcHandler,
    from: ReplyTo,
    op: Op,
) -> Posted {
    match op {
        Op::Rpc { node, req } => {
            // The room its request was given (sized by its encoder for a typical reply), so
            // writing the reply does not regrow it.
            let mut reply = Vec::with_capacity(req.capacity());
            match handler.handle(node, from, &req, &mut reply) {
                Handled::Replied => Posted::Done(Completion::Rpc(reply)),
                Handled::Deferred => Posted::Held,
            }
        }
        op => Posted::Done(execute_one_sided(memory, op)),
    }
}

struct Slot {
    task: TaskId,
    results: Vec<Option<Completion>>,
    remaining: u32,
    remote: bool,
}

/// A worker: one event loop serving one node's share of RPCs and running its co-routines.
pub struct WorkerCore {
    pub id: WorkerId,
    /// Dense index of this worker across the cluster (node-major).
    pub index: u32,
    local: Arc<NodeMemory>,
    handler: Arc<dyn RpcHandler>,
    transport: Box<dyn Transport>,
    /// `transport.runs_local_inline()`, asked once.
    local_inline: bool,
    /// `transport.reads_whole()`, asked once.
    reads_whole: bool,
    /// The node sharing this one's machine, whose one-sided ops the transport runs on this
    /// CPU ([`WorkerCore::set_machine_peer`]): counted as local ops, not round trips.
    machine_peer: Cell<Option<NodeId>>,
    slots: RefCell<Vec<Option<Slot>>>,
    free_slots: RefCell<Vec<u32>>,
    spares: Rc<RefCell<Spares>>,
    ready: RefCell<VecDeque<TaskId>>,
    counters: RefCell<VerbCounters>,
    reply_buf: RefCell<Vec<u8>>,
    deferred_buf: RefCell<Vec<(ReplyTo, Vec<u8>)>>,
    deferred_waiting: Cell<bool>,
    live_tasks: Cell<usize>,
}

impl WorkerCore {
    pub fn new(
        id: WorkerId,
        index: u32,
        local: Arc<NodeMemory>,
        handler: Arc<dyn RpcHandler>,
        transport: Box<dyn Transport>,
    ) -> Rc<Self> {
        assert_eq!(
            local.node, id.node,
            "worker {id:?} given the memory of node {:?}",
            local.node
        );
        Rc::new(WorkerCore {
            id,
            index,
            local,
            handler,
            local_inline: transport.runs_local_inline(),
            reads_whole: transport.reads_whole(),
            machine_peer: Cell::new(None),
            transport,
            slots: RefCell::new(Vec::new()),
            free_slots: RefCell::new(Vec::new()),
            spares: Rc::default(),
            ready: RefCell::new(VecDeque::new()),
            counters: RefCell::new(VerbCounters::default()),
            reply_buf: RefCell::new(Vec::new()),
            deferred_buf: RefCell::new(Vec::new()),
            deferred_waiting: Cell::new(false),
            live_tasks: Cell::new(0),
        })
    }

    pub fn node(&self) -> NodeId {
        self.id.node
    }

    /// Tells the counters that the transport runs one-sided ops to `peer` (the node sharing
    /// this one's machine) on this CPU: they count as local ops, as own-node ones do.
    pub fn set_machine_peer(&self, peer: Option<NodeId>) {
        self.machine_peer.set(peer);
    }

    pub fn now_ns(&self) -> u64 {
        self.transport.now_ns()
    }

    /// This node's own memory, for direct local access.
    pub fn local_memory(&self) -> &NodeMemory {
        &self.local
    }

    pub fn counters(&self) -> VerbCounters {
        self.counters.borrow().clone()
    }

    fn alloc_slot(&self, task: TaskId, n: usize) -> SlotId {
        let mut results = take_spare(&self.spares, |s| &mut s.results, n);
        results.resize_with(n, || None);
        let slot = Slot {
            task,
            results,
            remaining: n as u32,
            remote: false,
        };
        let mut slots = self.slots.borrow_mut();
        match self.free_slots.borrow_mut().pop() {
            Some(i) => {
                slots[i as usize] = Some(slot);
                SlotId(i)
            }
            None => {
                slots.push(Some(slot));
                SlotId(slots.len() as u32 - 1)
            }
        }
    }

    fn complete(&self, slot: SlotId, index: u32, c: Completion) {
        let mut slots = self.slots.borrow_mut();
        let s = match slots.get_mut(slot.0 as usize).and_then(|s| s.as_mut()) {
            Some(s) => s,
            None => panic!("worker {:?}: completion for free slot {slot:?}", self.id),
        };
        let r = &mut s.results[index as usize];
        assert!(
            r.is_none(),
            "worker {:?}: op {index} of slot {slot:?} completed twice",
            self.id
        );
        *r = Some(c);
        s.remaining -= 1;
        if s.remaining == 0 {
            self.ready.borrow_mut().push_back(s.task);
        }
    }

    /// Takes the results of a finished slot (every entry `Some`), or `None` while ops are
    /// outstanding. Handed over as stored: re-collecting them moved every completion.
    fn take_if_done(&self, slot: SlotId) -> Option<(Vec<Option<Completion>>, bool)> {
        let mut slots = self.slots.borrow_mut();
        let done = matches!(&slots[slot.0 as usize], Some(s) if s.remaining == 0);
        if !done {
            return None;
        }
        let s = slots[slot.0 as usize].take().expect("slot checked above");
        self.free_slots.borrow_mut().push(slot.0);
        Some((s.results, s.remote))
    }

    /// Runs a doorbell whose ops are all one-sided at once, when the backend lets every op's
    /// node be reached where its words lie: this node's own ([`Transport::runs_local_inline`])
    /// or another's ([`Transport::direct_memory`]); else `None` and the doorbell is posted.
    /// The ops are executed in order and their results are small values plus one arena
    /// holding every READ's words, each copied once from the region: no `Completion` per op,
    /// no slot, no buffer per READ (issue #9: moving and spilling those was a fifth of a
    /// local transaction, and a third of a two-node one). Counted as the posted path counts
    /// them: an op to another node (not the machine peer) is remote, and a doorbell with one
    /// is a round trip.
    fn run_inline(&self, ops: &[Op]) -> Option<Completions> {
        let me = self.id.node;
        let memory_of = |node: NodeId| -> Option<&NodeMemory> {
            if node == me {
                self.local_inline.then_some(&*self.local)
            } else {
                self.transport.direct_memory(node)
            }
        };
        let runnable = ops
            .iter()
            .all(|op| !matches!(op, Op::Rpc { .. }) && memory_of(op.node()).is_some());
        if !runnable {
            return None;
        }
        let read_words: usize = ops
            .iter()
            .map(|op| match op {
                Op::Read { len_words, .. } => *len_words as usize,
                _ => 0,
            })
            .sum();
        let mut words = take_spare(&self.spares, |s| &mut s.words, read_words);
        let mut values = take_spare(&self.spares, |s| &mut s.values, ops.len());
        let mut any_remote = false;
        let mut ctr = self.counters.borrow_mut();
        for op in ops {
            let kind = op.kind() as usize;
            if self.counts_local(op) {
                ctr.local_ops[kind] += 1;
            } else {
                any_remote = true;
                ctr.remote_ops[kind] += 1;
                ctr.remote_bytes[kind] += op.request_bytes() + op.one_sided_reply_bytes();
            }
            let memory = memory_of(op.node()).expect("every op's memory was checked above");
            values.push(match *op {
                Op::Read { ptr, len_words } => {
                    let start = words.len() as u32;
                    words.extend(
                        memory
                            .region(ptr.region)
                            .load_range(ptr.offset_words as usize, len_words as usize),
                    );
                    InlineResult::Read {
                        start,
                        len: len_words,
                    }
                }
                Op::Write { ptr, ref data } => {
                    memory
                        .region(ptr.region)
                        .write_from(ptr.offset_words as usize, data);
                    InlineResult::Write
                }
                Op::Cas { ptr, expect, new } => InlineResult::Cas(memory.region(ptr.region).cas(
                    ptr.offset_words as usize,
                    expect,
                    new,
                )),
                Op::FetchAdd { ptr, add } => InlineResult::FetchAdd(
                    memory
                        .region(ptr.region)
                        .fetch_add(ptr.offset_words as usize, add),
                ),
                Op::Rpc { .. } => unreachable!("an RPC is never run inline (checked above)"),
            });
        }
        if any_remote {
            ctr.doorbells += 1;
            ctr.round_trips += 1;
        }
        Some(Completions {
            results: Results::Inline { values, words },
            spares: Some(self.spares.clone()),
        })
    }

    /// Whether `op` counts as a local op, not a remote one (nor part of a round trip): it
    /// targets this node, or is one-sided to the machine peer, which this CPU reaches.
    fn counts_local(&self, op: &Op) -> bool {
        op.node() == self.id.node
            || (Some(op.node()) == self.machine_peer.get() && !matches!(op, Op::Rpc { .. }))
    }

    /// Posts a doorbell: every op goes to the transport, which runs own-node ops at once or
    /// not as its backend decides; the counters tell own-node ops from remote ones.
    fn post(&self, task: TaskId, ops: &mut Vec<Op>) -> SlotId {
        let slot = self.alloc_slot(task, ops.len());
        let mut any_remote = false;
        for (i, op) in ops.drain(..).enumerate() {
            let kind = op.kind() as usize;
            let local = self.counts_local(&op);
            {
                let mut ctr = self.counters.borrow_mut();
                if local {
                    ctr.local_ops[kind] += 1;
                } else {
                    any_remote = true;
                    ctr.remote_ops[kind] += 1;
                    ctr.remote_bytes[kind] += op.request_bytes();
                }
            }
            match self.transport.post(slot, i as u32, op) {
                Posted::Done(c) => {
                    if !local {
                        self.counters.borrow_mut().remote_bytes[kind] += c.reply_bytes();
                    }
                    self.complete(slot, i as u32, c);
                }
                Posted::Pending => {}
                // Keep polling the held request even if no event comes.
                Posted::Held => self.deferred_waiting.set(true),
            }
        }
        if any_remote {
            let mut slots = self.slots.borrow_mut();
            slots[slot.0 as usize]
                .as_mut()
                .expect("just allocated")
                .remote = true;
            self.counters.borrow_mut().doorbells += 1;
        }
        // A slot completed during posting queued its task; the caller polls it synchronously
        // instead, so drop that wake-up to keep the ready queue exact.
        if self.slots.borrow()[slot.0 as usize]
            .as_ref()
            .is_some_and(|s| s.remaining == 0)
        {
            let mut ready = self.ready.borrow_mut();
            if ready.back() == Some(&task) {
                ready.pop_back();
            }
        }
        slot
    }

    /// Runs the event loop once: completions and incoming RPC requests. Returns the number
    /// of deliveries handled.
    pub fn progress(&self) -> usize {
        let mut n = 0;
        self.transport.poll(&mut |d| {
            n += 1;
            match d {
                Delivery::Completion {
                    slot,
                    index,
                    completion,
                } => {
                    if let Some(kind) = completion.kind() {
                        self.counters.borrow_mut().remote_bytes[kind as usize] +=
                            completion.reply_bytes();
                    }
                    self.complete(slot, index, completion)
                }
                Delivery::Request {
                    from,
                    node,
                    mut req,
                } => {
                    // The reply travels back in the request's own buffer, so every buffer is
                    // freed by the thread that allocated it: cross-thread frees contend on
                    // the allocator's locks.
                    let mut scratch = self.reply_buf.borrow_mut();
                    scratch.clear();
                    self.counters.borrow_mut().rpcs_served += 1;
                    if self.handler.handle(node, from, &req, &mut scratch) == Handled::Replied {
                        req.clear();
                        req.extend_from_slice(&scratch);
                        self.transport.reply(from, req);
                    }
                }
            }
        });
        let mut ready = std::mem::take(&mut *self.deferred_buf.borrow_mut());
        let waiting = self.handler.poll_deferred(self.id.node, &mut ready);
        self.deferred_waiting.set(waiting);
        n += ready.len();
        for (to, reply) in ready.drain(..) {
            self.transport.reply(to, reply);
        }
        *self.deferred_buf.borrow_mut() = ready;
        n
    }

    /// Ends a turn of the worker's event loop ([`Transport::end_turn`]): called by the loop
    /// after each pass over the ready co-routines and the progress after it.
    pub fn end_turn(&self) {
        self.transport.end_turn();
    }

    /// Whether the node's handler holds requests that it must keep polling.
    pub fn deferred_waiting(&self) -> bool {
        self.deferred_waiting.get()
    }

    fn pop_ready(&self) -> Option<TaskId> {
        self.ready.borrow_mut().pop_front()
    }

    /// Whether some co-routine is ready to run.
    pub fn has_ready(&self) -> bool {
        !self.ready.borrow().is_empty()
    }

    /// Co-routines of this worker that have not finished.
    pub fn live_tasks(&self) -> usize {
        self.live_tasks.get()
    }
}

/// A co-routine's handle on the fabric.
#[derive(Clone)]
pub struct Endpoint {
    core: Rc<WorkerCore>,
    task: TaskId,
}

impl Endpoint {
    /// The endpoint of co-routine `task` of `core`; the executor polls task `i` as the `i`-th
    /// future it was given, so the two must agree.
    pub fn new(core: Rc<WorkerCore>, task: TaskId) -> Self {
        Endpoint { core, task }
    }

    pub fn node(&self) -> NodeId {
        self.core.id.node
    }

    pub fn worker(&self) -> WorkerId {
        self.core.id
    }

    pub fn worker_index(&self) -> u32 {
        self.core.index
    }

    pub fn task(&self) -> TaskId {
        self.task
    }

    pub fn now_ns(&self) -> u64 {
        self.core.now_ns()
    }

    pub fn local_memory(&self) -> &NodeMemory {
        &self.core.local
    }

    /// Whether this node's records may be read in place ([`Transport::runs_local_inline`]):
    /// then a coordinator probes its own node's index directly instead of with READs.
    pub fn local_inline(&self) -> bool {
        self.core.local_inline
    }

    pub fn counters(&self) -> VerbCounters {
        self.core.counters()
    }

    /// Appends a `bytes`-byte record to this node's modelled own log
    /// ([`Transport::instance_log_model`]): `None` where the backend models none.
    pub fn instance_log_model(&self, bytes: u64) -> Option<LogWait> {
        self.core.transport.instance_log_model(bytes)
    }

    /// The own-node region `ptr` lies in, for an in-place access counted as the local op
    /// `kind` it replaces (the report's per-verb counters stay those of the doorbell path).
    /// Only on a backend that allows it ([`Endpoint::local_inline`]): the simulator prices
    /// own-node ops as it posts them, and a non-coherent NIC must run them itself.
    #[inline(always)]
    fn in_place(&self, ptr: crate::ids::RemotePtr, kind: crate::verbs::VerbKind) -> &Region {
        assert!(
            self.in_place_on(ptr.node),
            "an in-place {kind:?} of node {} from node {} (inline: {})",
            ptr.node.0,
            self.core.id.node.0,
            self.core.local_inline
        );
        self.core.counters.borrow_mut().local_ops[kind as usize] += 1;
        self.core.local.region(ptr.region)
    }

    /// A READ of this node's own words at `ptr` run in place, on a backend that allows it
    /// ([`Endpoint::local_inline`]): the same word loads in the same order as the verb,
    /// counted as a local READ, without an op or a completion. A caller may load the rest
    /// of the same record from [`Endpoint::local_memory`] as part of this READ.
    #[inline(always)]
    pub fn load_in_place(&self, ptr: crate::ids::RemotePtr, out: &mut [u64]) {
        self.in_place(ptr, crate::verbs::VerbKind::Read)
            .read_into(ptr.offset_words as usize, out);
    }

    /// A WRITE of `data` to this node's own words at `ptr` run in place: the stores of the
    /// inline doorbell's WRITE (ascending words, each a release store, not atomic as a
    /// whole), counted as a local WRITE.
    #[inline(always)]
    pub fn write_in_place(&self, ptr: crate::ids::RemotePtr, data: &[u64]) {
        self.in_place(ptr, crate::verbs::VerbKind::Write)
            .write_from(ptr.offset_words as usize, data);
    }

    /// A CAS on this node's own word at `ptr` run in place (the inline doorbell's CAS:
    /// acquire-release); returns the value found, as the verb. Counted as a local CAS.
    #[inline(always)]
    pub fn cas_in_place(&self, ptr: crate::ids::RemotePtr, expect: u64, new: u64) -> u64 {
        self.in_place(ptr, crate::verbs::VerbKind::Cas)
            .cas(ptr.offset_words as usize, expect, new)
    }

    /// A FETCH_ADD on this node's own word at `ptr` run in place; returns the previous
    /// value. Counted as a local FETCH_ADD.
    #[inline(always)]
    pub fn fetch_add_in_place(&self, ptr: crate::ids::RemotePtr, add: u64) -> u64 {
        self.in_place(ptr, crate::verbs::VerbKind::FetchAdd)
            .fetch_add(ptr.offset_words as usize, add)
    }

    /// Starts loading the `len_words` words at `ptr` into this CPU's cache, where this
    /// endpoint accesses them in place ([`Endpoint::in_place_on`]); elsewhere nothing. A hint
    /// only ([`Region::prefetch`]): no op, no count, no effect on any result.
    #[inline(always)]
    pub fn prefetch_in_place(&self, ptr: crate::ids::RemotePtr, len_words: u32) {
        if self.in_place_on(ptr.node) {
            self.core
                .local
                .region(ptr.region)
                .prefetch(ptr.offset_words as usize, len_words as usize);
        }
    }

    /// Whether `node`'s records are accessed in place by this endpoint: its own node's, on a
    /// backend that allows it.
    #[inline(always)]
    pub fn in_place_on(&self, node: NodeId) -> bool {
        self.core.local_inline && node == self.core.id.node
    }

    /// Whether a READ of several words is atomic on this backend ([`Transport::reads_whole`]).
    pub fn reads_whole(&self) -> bool {
        self.core.reads_whole
    }

    pub fn doorbell(&self) -> Doorbell<'_> {
        self.doorbell_for(DOORBELL_OPS_TYPICAL)
    }

    /// A doorbell with room for `ops` ops, for a caller that knows how many it posts: an op
    /// is ~150 bytes, so growing the batch is a copy of all of them.
    pub fn doorbell_for(&self, ops: usize) -> Doorbell<'_> {
        Doorbell {
            ep: self,
            ops: take_spare(&self.core.spares, |s| &mut s.ops, ops),
        }
    }

    /// Models `ns` of transaction logic on this core.
    pub async fn compute(&self, ns: u64) {
        if ns == 0 || self.core.transport.compute(ns) {
            return;
        }
        let slot = self.core.alloc_slot(self.task, 1);
        self.core.transport.post_timer(slot, ns);
        Wait {
            core: &self.core,
            slot,
        }
        .await;
    }

    /// Charges what this backend prices `accesses` direct accesses to the node's own memory
    /// and `bytes` copied at ([`Transport::local_work_ns`]): nothing where the work took
    /// its real time already.
    pub async fn local_work(&self, accesses: u64, bytes: u64) {
        let ns = self.core.transport.local_work_ns(accesses, bytes);
        self.compute(ns).await;
    }

    /// Lets the other co-routines of this worker run, resuming after `ns` (at least one
    /// event-loop turn).
    pub async fn sleep(&self, ns: u64) {
        let slot = self.core.alloc_slot(self.task, 1);
        self.core.transport.post_timer(slot, ns);
        Wait {
            core: &self.core,
            slot,
        }
        .await;
    }

    /// Lets the worker's other co-routines and its event loop run once before resuming.
    pub async fn yield_now(&self) {
        let mut yielded = false;
        std::future::poll_fn(|_| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            self.core.ready.borrow_mut().push_back(self.task);
            Poll::Pending
        })
        .await
    }

    pub async fn read(&self, ptr: crate::ids::RemotePtr, len_words: u32) -> Result<Words, OpError> {
        let mut d = self.doorbell();
        d.read(ptr, len_words);
        Ok(d.submit().await?.into_read(0))
    }

    pub async fn cas(
        &self,
        ptr: crate::ids::RemotePtr,
        expect: u64,
        new: u64,
    ) -> Result<u64, OpError> {
        let mut d = self.doorbell();
        d.cas(ptr, expect, new);
        Ok(d.submit().await?.cas(0))
    }

    pub async fn rpc(&self, node: NodeId, req: Vec<u8>) -> Result<Vec<u8>, OpError> {
        let mut d = self.doorbell();
        d.rpc(node, req);
        Ok(d.submit().await?.into_rpc(0))
    }
}

/// A batch of ops posted with one doorbell and awaited together (one yield at most).
pub struct Doorbell<'e> {
    ep: &'e Endpoint,
    ops: Vec<Op>,
}

impl Doorbell<'_> {
    fn push(&mut self, op: Op) -> usize {
        self.ops.push(op);
        self.ops.len() - 1
    }

    pub fn read(&mut self, ptr: crate::ids::RemotePtr, len_words: u32) -> usize {
        self.push(Op::Read { ptr, len_words })
    }

    pub fn write(&mut self, ptr: crate::ids::RemotePtr, data: Words) -> usize {
        self.push(Op::Write { ptr, data })
    }

    pub fn cas(&mut self, ptr: crate::ids::RemotePtr, expect: u64, new: u64) -> usize {
        self.push(Op::Cas { ptr, expect, new })
    }

    pub fn fetch_add(&mut self, ptr: crate::ids::RemotePtr, add: u64) -> usize {
        self.push(Op::FetchAdd { ptr, add })
    }

    pub fn rpc(&mut self, node: NodeId, req: Vec<u8>) -> usize {
        self.push(Op::Rpc { node, req })
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Rings the doorbell and waits for every op; results are indexed as the ops were added.
    /// If any op failed, the first failure (in posting order) instead: the doorbell waits for
    /// every op either way, so no completion arrives for a slot after it was freed.
    pub async fn submit(self) -> Result<Completions, OpError> {
        self.submit_partial().await.map_err(|(e, _)| e)
    }

    /// As [`Doorbell::submit`], but a failure keeps the other ops' results: `Err` holds
    /// the first failure and every completion ([`Completions::failed`] tells the failed
    /// ones), so a stage learns what the ops at live nodes did (the locks it took there).
    pub async fn submit_partial(mut self) -> Result<Completions, (OpError, Completions)> {
        if self.ops.is_empty() {
            return Ok(Completions {
                results: Results::Posted(Vec::new()),
                spares: None,
            });
        }
        let core = &self.ep.core;
        if let Some(done) = core.run_inline(&self.ops) {
            return Ok(done);
        }
        let slot = core.post(self.ep.task, &mut self.ops);
        let (results, remote) = match core.take_if_done(slot) {
            Some(r) => r,
            None => Wait { core, slot }.await,
        };
        if remote {
            core.counters.borrow_mut().round_trips += 1;
        }
        let failed = results.iter().find_map(|c| match c {
            Some(Completion::Failed(e)) => Some(*e),
            _ => None,
        });
        let done = Completions {
            results: Results::Posted(results),
            spares: Some(core.spares.clone()),
        };
        match failed {
            Some(e) => Err((e, done)),
            None => Ok(done),
        }
    }
}

/// The op vector goes back to the worker's spares, submitted or not.
impl Drop for Doorbell<'_> {
    fn drop(&mut self) {
        let ops = std::mem::take(&mut self.ops);
        give_spare(&mut self.ep.core.spares.borrow_mut().ops, ops);
    }
}

struct Wait<'c> {
    core: &'c WorkerCore,
    slot: SlotId,
}

impl Future for Wait<'_> {
    type Output = (Vec<Option<Completion>>, bool);
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.core.take_if_done(self.slot) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

/// The results of a doorbell, indexed as its ops were added.
pub struct Completions {
    results: Results,
    /// Where the result buffers go when dropped: the worker's spares (`None`: nothing to
    /// give back).
    spares: Option<Rc<RefCell<Spares>>>,
}

impl Drop for Completions {
    fn drop(&mut self) {
        let Some(spares) = self.spares.take() else {
            return;
        };
        let mut s = spares.borrow_mut();
        match std::mem::replace(&mut self.results, Results::Posted(Vec::new())) {
            Results::Posted(r) => give_spare(&mut s.results, r),
            Results::Inline { values, words } => {
                give_spare(&mut s.values, values);
                give_spare(&mut s.words, words);
            }
        }
    }
}

enum Results {
    /// As the transport delivered them: every entry is `Some` (a slot is handed over only
    /// when its last op completed).
    Posted(Vec<Option<Completion>>),
    /// Run inline ([`WorkerCore::run_inline`]): READs' words in one arena.
    Inline {
        values: Vec<InlineResult>,
        words: Vec<u64>,
    },
}

/// The result of one op run inline; a READ's words are `words[start..start + len]`.
#[derive(Clone, Copy, Debug)]
enum InlineResult {
    Read { start: u32, len: u32 },
    Write,
    Cas(u64),
    FetchAdd(u64),
}

impl Completions {
    pub fn len(&self) -> usize {
        match &self.results {
            Results::Posted(c) => c.len(),
            Results::Inline { values, .. } => values.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether op `i` failed (its node down): only a [`Doorbell::submit_partial`] hands
    /// back such completions.
    pub fn failed(&self, i: usize) -> bool {
        match &self.results {
            Results::Posted(c) => matches!(c[i], Some(Completion::Failed(_))),
            Results::Inline { .. } => false,
        }
    }

    fn mismatch(&self, i: usize, want: &str) -> ! {
        match &self.results {
            Results::Posted(c) => panic!("op {i} completed as {:?}, not {want}", c[i]),
            Results::Inline { values, .. } => {
                panic!("op {i} completed inline as {:?}, not {want}", values[i])
            }
        }
    }

    pub fn read(&self, i: usize) -> &[u64] {
        match &self.results {
            Results::Posted(c) => match &c[i] {
                Some(Completion::Read(w)) => w,
                _ => self.mismatch(i, "a READ"),
            },
            Results::Inline { values, words } => match values[i] {
                InlineResult::Read { start, len } => &words[start as usize..(start + len) as usize],
                _ => self.mismatch(i, "a READ"),
            },
        }
    }

    pub fn into_read(mut self, i: usize) -> Words {
        match &mut self.results {
            Results::Posted(c) => match c[i].take() {
                Some(Completion::Read(w)) => w,
                other => panic!("op {i} completed as {other:?}, not a READ"),
            },
            Results::Inline { .. } => Words::from_slice(self.read(i)),
        }
    }

    pub fn cas(&self, i: usize) -> u64 {
        match &self.results {
            Results::Posted(c) => match c[i] {
                Some(Completion::Cas(v)) => v,
                _ => self.mismatch(i, "a CAS"),
            },
            Results::Inline { values, .. } => match values[i] {
                InlineResult::Cas(v) => v,
                _ => self.mismatch(i, "a CAS"),
            },
        }
    }

    pub fn fetch_add(&self, i: usize) -> u64 {
        match &self.results {
            Results::Posted(c) => match c[i] {
                Some(Completion::FetchAdd(v)) => v,
                _ => self.mismatch(i, "a FETCH_ADD"),
            },
            Results::Inline { values, .. } => match values[i] {
                InlineResult::FetchAdd(v) => v,
                _ => self.mismatch(i, "a FETCH_ADD"),
            },
        }
    }

    pub fn rpc(&self, i: usize) -> &[u8] {
        match &self.results {
            Results::Posted(c) => match &c[i] {
                Some(Completion::Rpc(b)) => b,
                _ => self.mismatch(i, "an RPC"),
            },
            Results::Inline { .. } => self.mismatch(i, "an RPC"),
        }
    }

    pub fn into_rpc(mut self, i: usize) -> Vec<u8> {
        match &mut self.results {
            Results::Posted(c) => match c[i].take() {
                Some(Completion::Rpc(b)) => b,
                other => panic!("op {i} completed as {other:?}, not an RPC"),
            },
            Results::Inline { .. } => self.mismatch(i, "an RPC"),
        }
    }
}

/// A co-routine: a future run to completion by its worker's executor.
pub type Coroutine = Pin<Box<dyn Future<Output = ()>>>;

/// What a run returns per worker.
pub struct WorkerReport {
    pub id: crate::ids::WorkerId,
    pub counters: crate::verbs::VerbCounters,
}

/// A worker that panicked: which one, and the panic's message. A backend that catches one
/// stops every other worker and returns this instead of its reports.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} panicked: {message}", panicked_worker(.worker))]
pub struct WorkerPanic {
    /// The worker whose event loop or co-routine panicked; `None` if it panicked before any
    /// worker ran (while building them).
    pub worker: Option<crate::ids::WorkerId>,
    pub message: String,
}

/// The worker a [`WorkerPanic`] names: the one running, or none yet.
fn panicked_worker(worker: &Option<crate::ids::WorkerId>) -> String {
    match worker {
        Some(w) => format!("worker (node {}, thread {})", w.node.0, w.thread),
        None => "a worker thread".to_string(),
    }
}

/// The message a panic carried (`panic!` with a literal or with a format), or a note that it
/// carried something else.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(a panic whose payload is not a message)".to_string()
    }
}

/// What a backend serves for one node: the node's registered memory and its RPC handler. A
/// node's backend is built from this and the [`NodeDirectory`] of its peers.
#[derive(Clone)]
pub struct NodeSetup {
    pub memory: Arc<NodeMemory>,
    pub handler: Arc<dyn RpcHandler>,
}

impl NodeSetup {
    /// One setup per node from memories and handlers given in node order.
    pub fn zip(memory: &[Arc<NodeMemory>], handlers: &[Arc<dyn RpcHandler>]) -> Vec<NodeSetup> {
        assert_eq!(
            memory.len(),
            handlers.len(),
            "{} memories and {} RPC handlers: one of each per node",
            memory.len(),
            handlers.len()
        );
        memory
            .iter()
            .zip(handlers)
            .map(|(m, h)| NodeSetup {
                memory: m.clone(),
                handler: h.clone(),
            })
            .collect()
    }
}

/// What every backend checks before it starts: one setup per node, in node order, each
/// registered as the directory its peers address it by says.
pub fn assert_cluster_shape(nodes: u16, setups: &[NodeSetup], directory: &NodeDirectory) {
    assert_eq!(
        setups.len(),
        nodes as usize,
        "setups for {} nodes, config says {nodes}",
        setups.len()
    );
    assert_eq!(
        directory.nodes(),
        nodes,
        "a directory of {} nodes, config says {nodes}",
        directory.nodes()
    );
    for (n, s) in setups.iter().enumerate() {
        assert_eq!(
            s.memory.node.0 as usize, n,
            "setup {n} holds node {}'s memory",
            s.memory.node.0
        );
        assert!(
            directory.lists(&s.memory),
            "node {n}'s registration differs from the directory's keys for it"
        );
    }
}

/// Builds the co-routines of one worker, on that worker's OS thread.
pub type Spawner<'a> = dyn Fn(&Rc<WorkerCore>) -> Vec<Coroutine> + Sync + 'a;

/// Runs one worker's co-routines beside its event loop.
pub struct Executor {
    core: Rc<WorkerCore>,
    tasks: Vec<Option<Coroutine>>,
}

impl Executor {
    /// Takes the worker's co-routines; future `i` must use `TaskId(i)`.
    pub fn new(core: Rc<WorkerCore>, tasks: Vec<Coroutine>) -> Self {
        core.live_tasks.set(tasks.len());
        {
            let mut ready = core.ready.borrow_mut();
            ready.extend((0..tasks.len() as u32).map(TaskId));
        }
        Executor {
            core,
            tasks: tasks.into_iter().map(Some).collect(),
        }
    }

    pub fn core(&self) -> &Rc<WorkerCore> {
        &self.core
    }

    /// Polls each co-routine that was ready on entry once, running the event loop after each
    /// so that requests and replies are not held up behind a whole pass. Returns how many
    /// co-routines were polled.
    pub fn run_ready(&mut self) -> usize {
        let mut cx = Context::from_waker(Waker::noop());
        let ready_on_entry = self.core.ready.borrow().len();
        let mut n = 0;
        while n < ready_on_entry {
            let Some(t) = self.core.pop_ready() else {
                break;
            };
            n += 1;
            self.core.progress();
            self.core.transport.on_switch();
            let Some(fut) = self.tasks[t.0 as usize].as_mut() else {
                continue;
            };
            if fut.as_mut().poll(&mut cx).is_ready() {
                self.tasks[t.0 as usize] = None;
                self.core.live_tasks.set(self.core.live_tasks.get() - 1);
            }
        }
        n
    }

    pub fn live_tasks(&self) -> usize {
        self.core.live_tasks()
    }
}
