//! The backend-independent half of a worker: doorbells, completion slots, co-routine
//! scheduling and counters. A backend supplies a [`Transport`]; protocol code sees only
//! [`Endpoint`].
//!
//! Scheduling invariant: a co-routine future returns `Pending` only while it waits on a
//! completion slot it owns; completing the slot re-queues the owner. No waker is needed, so
//! the same code runs under real threads and under the single-threaded simulator.

use crate::ids::{NodeId, WorkerId};
use crate::memory::NodeMemory;
use crate::verbs::{execute_one_sided, Completion, Handled, Op, RpcHandler, VerbCounters, Words};
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// Ops a doorbell usually carries; more only cost a reallocation.
const DOORBELL_OPS_TYPICAL: usize = 8;

/// Index of a co-routine within its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskId(pub u32);

/// Index of an in-flight doorbell's completion slot within its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotId(pub u32);

/// Where a served RPC's reply goes: the requesting worker's slot and op index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    pub worker: u32,
    pub slot: SlotId,
    pub index: u32,
    /// When the request was posted, in the requester's clock (for latency injection); 0 for
    /// a node's own request held by its handler, whose reply is never delayed.
    pub posted_ns: u64,
}

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

/// The backend-specific half of a worker: moves ops to other nodes and brings back
/// completions and incoming requests. Only the in-process backend may read the wall clock or
/// spawn threads.
pub trait Transport {
    /// This backend's clock: wall time since the cluster started, or virtual time.
    fn now_ns(&self) -> u64;
    /// Posts remote op `index` of doorbell `slot`. Returns its completion if it finished at
    /// once; otherwise it must later come back through [`Transport::poll`].
    fn post(&self, slot: SlotId, index: u32, op: Op) -> Option<Completion>;
    /// Delivers a `Completion::Timer` for `slot` after `delay_ns`.
    fn post_timer(&self, slot: SlotId, delay_ns: u64);
    /// Models `ns` of CPU work by the calling co-routine. Returns true when the work was done
    /// synchronously (the thread really spun); false means the caller must wait on a timer.
    fn compute(&self, ns: u64) -> bool;
    /// Charges a switch to a co-routine (the simulator's CPU model; free elsewhere).
    fn on_switch(&self) {}
    /// Charges one access to the node's own memory or handler (simulator only; elsewhere
    /// the access itself takes the time).
    fn on_local_op(&self) {}
    /// Hands over everything that arrived since the last call.
    fn poll(&self, sink: &mut dyn FnMut(Delivery));
    /// Sends the reply of a served request.
    fn reply(&self, to: ReplyTo, reply: Vec<u8>);
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
    slots: RefCell<Vec<Option<Slot>>>,
    free_slots: RefCell<Vec<u32>>,
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
            transport,
            slots: RefCell::new(Vec::new()),
            free_slots: RefCell::new(Vec::new()),
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
        let slot = Slot {
            task,
            results: (0..n).map(|_| None).collect(),
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

    /// Takes the results of a finished slot, or `None` while ops are outstanding.
    fn take_if_done(&self, slot: SlotId) -> Option<(Vec<Completion>, bool)> {
        let mut slots = self.slots.borrow_mut();
        let done = matches!(&slots[slot.0 as usize], Some(s) if s.remaining == 0);
        if !done {
            return None;
        }
        let s = slots[slot.0 as usize].take().expect("slot checked above");
        self.free_slots.borrow_mut().push(slot.0);
        let results = s
            .results
            .into_iter()
            .map(|r| r.expect("remaining == 0 means all set"))
            .collect();
        Some((results, s.remote))
    }

    /// Posts a doorbell: own-node ops run now, remote ones go to the transport.
    fn post(&self, task: TaskId, ops: Vec<Op>) -> SlotId {
        let slot = self.alloc_slot(task, ops.len());
        let mut any_remote = false;
        for (i, op) in ops.into_iter().enumerate() {
            let kind = op.kind() as usize;
            if op.node() == self.id.node {
                self.counters.borrow_mut().local_ops[kind] += 1;
                self.transport.on_local_op();
                let c = match op {
                    Op::Rpc { node, req } => {
                        // A local request held by the handler completes through `reply`,
                        // like a remote one; posted_ns 0 means it is never delayed.
                        let from = ReplyTo {
                            worker: self.index,
                            slot,
                            index: i as u32,
                            posted_ns: 0,
                        };
                        let mut reply = Vec::new();
                        match self.handler.handle(node, from, &req, &mut reply) {
                            Handled::Replied => Some(Completion::Rpc(reply)),
                            Handled::Deferred => {
                                // Keep polling the held request even if no event comes.
                                self.deferred_waiting.set(true);
                                None
                            }
                        }
                    }
                    op => Some(execute_one_sided(&self.local, op)),
                };
                if let Some(c) = c {
                    self.complete(slot, i as u32, c);
                }
            } else {
                any_remote = true;
                {
                    let mut ctr = self.counters.borrow_mut();
                    ctr.remote_ops[kind] += 1;
                    ctr.remote_bytes[kind] += op.request_bytes();
                }
                if let Some(c) = self.transport.post(slot, i as u32, op) {
                    self.counters.borrow_mut().remote_bytes[kind] += c.reply_bytes();
                    self.complete(slot, i as u32, c);
                }
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

    pub fn counters(&self) -> VerbCounters {
        self.core.counters()
    }

    pub fn doorbell(&self) -> Doorbell<'_> {
        Doorbell {
            ep: self,
            ops: Vec::with_capacity(DOORBELL_OPS_TYPICAL),
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

    pub async fn read(&self, ptr: crate::ids::RemotePtr, len_words: u32) -> Words {
        let mut d = self.doorbell();
        d.read(ptr, len_words);
        d.submit().await.into_read(0)
    }

    pub async fn cas(&self, ptr: crate::ids::RemotePtr, expect: u64, new: u64) -> u64 {
        let mut d = self.doorbell();
        d.cas(ptr, expect, new);
        d.submit().await.cas(0)
    }

    pub async fn rpc(&self, node: NodeId, req: Vec<u8>) -> Vec<u8> {
        let mut d = self.doorbell();
        d.rpc(node, req);
        d.submit().await.into_rpc(0)
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
    pub async fn submit(self) -> Completions {
        if self.ops.is_empty() {
            return Completions(Vec::new());
        }
        let core = &self.ep.core;
        let slot = core.post(self.ep.task, self.ops);
        let (results, remote) = match core.take_if_done(slot) {
            Some(r) => r,
            None => Wait { core, slot }.await,
        };
        if remote {
            core.counters.borrow_mut().round_trips += 1;
        }
        Completions(results)
    }
}

struct Wait<'c> {
    core: &'c WorkerCore,
    slot: SlotId,
}

impl Future for Wait<'_> {
    type Output = (Vec<Completion>, bool);
    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.core.take_if_done(self.slot) {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }
}

/// The results of a doorbell.
pub struct Completions(pub Vec<Completion>);

impl Completions {
    pub fn read(&self, i: usize) -> &Words {
        match &self.0[i] {
            Completion::Read(w) => w,
            other => panic!("op {i} completed as {other:?}, not a READ"),
        }
    }

    pub fn into_read(mut self, i: usize) -> Words {
        match std::mem::replace(&mut self.0[i], Completion::Write) {
            Completion::Read(w) => w,
            other => panic!("op {i} completed as {other:?}, not a READ"),
        }
    }

    pub fn cas(&self, i: usize) -> u64 {
        match &self.0[i] {
            Completion::Cas(v) => *v,
            other => panic!("op {i} completed as {other:?}, not a CAS"),
        }
    }

    pub fn fetch_add(&self, i: usize) -> u64 {
        match &self.0[i] {
            Completion::FetchAdd(v) => *v,
            other => panic!("op {i} completed as {other:?}, not a FETCH_ADD"),
        }
    }

    pub fn rpc(&self, i: usize) -> &[u8] {
        match &self.0[i] {
            Completion::Rpc(b) => b,
            other => panic!("op {i} completed as {other:?}, not an RPC"),
        }
    }

    pub fn into_rpc(mut self, i: usize) -> Vec<u8> {
        match std::mem::replace(&mut self.0[i], Completion::Write) {
            Completion::Rpc(b) => b,
            other => panic!("op {i} completed as {other:?}, not an RPC"),
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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerPanic {
    /// The worker whose event loop or co-routine panicked; `None` if it panicked before any
    /// worker ran (while building them).
    pub worker: Option<crate::ids::WorkerId>,
    pub message: String,
}

impl std::fmt::Display for WorkerPanic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.worker {
            Some(w) => write!(
                f,
                "worker (node {}, thread {}) panicked: {}",
                w.node.0, w.thread, self.message
            ),
            None => write!(f, "a worker thread panicked: {}", self.message),
        }
    }
}

impl std::error::Error for WorkerPanic {}

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

/// What every backend checks before it starts: one memory and one RPC handler per node.
pub(crate) fn assert_cluster_shape(
    nodes: u16,
    memory: &crate::ClusterMemory,
    handlers: &[Arc<dyn RpcHandler>],
) {
    assert_eq!(
        memory.len(),
        nodes as usize,
        "memory for {} nodes, config says {nodes}",
        memory.len()
    );
    assert_eq!(
        handlers.len(),
        nodes as usize,
        "{} RPC handlers for {nodes} nodes: one per node",
        handlers.len()
    );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{RegionId, RemotePtr};
    use crate::inproc::{self, InprocConfig};
    use crate::memory::NodeMemory;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Echoes the request back with its first byte incremented.
    struct Echo;
    impl RpcHandler for Echo {
        fn handle(&self, node: NodeId, _from: ReplyTo, req: &[u8], reply: &mut Vec<u8>) -> Handled {
            reply.extend_from_slice(req);
            reply[0] = reply[0].wrapping_add(1 + node.0 as u8);
            Handled::Replied
        }
    }

    fn cluster(
        nodes: u16,
        latency_ns: [u64; crate::VerbKind::COUNT],
        body: &(dyn Fn(Endpoint) -> Coroutine + Sync),
    ) -> Vec<crate::inproc::WorkerReport> {
        let memory: crate::ClusterMemory = (0..nodes)
            .map(|n| Arc::new(NodeMemory::new(NodeId(n), &[64])))
            .collect::<Vec<_>>()
            .into();
        let handlers: Vec<Arc<dyn RpcHandler>> = (0..nodes)
            .map(|_| Arc::new(Echo) as Arc<dyn RpcHandler>)
            .collect();
        let cfg = InprocConfig {
            nodes,
            threads_per_node: 1,
            os_threads: 2,
            pin_threads: false,
            net_latency_ns: latency_ns,
        };
        inproc::run(&cfg, memory, &handlers, &|core| {
            vec![body(Endpoint::new(core.clone(), TaskId(0)))]
        })
        .unwrap_or_else(|p| panic!("{p}"))
    }

    #[test]
    fn fabric_verbs_reach_remote_memory_and_rpcs_run_on_the_target_2_nodes() {
        let cas_wins = Arc::new(AtomicU64::new(0));
        let wins = cas_wins.clone();
        let reports = cluster(2, [0; crate::VerbKind::COUNT], &move |ep| {
            let wins = wins.clone();
            Box::pin(async move {
                let me = ep.node().0;
                let peer = NodeId(1 - me);
                let p = RemotePtr::new(peer, RegionId(0), 8);
                // One doorbell: WRITE, READ back, FETCH_ADD, RPC; results in posting order.
                let mut d = ep.doorbell();
                d.write(p.add(me as u32 * 2), Words::from_slice(&[7, 8]));
                d.read(p.add(me as u32 * 2), 2);
                d.fetch_add(p.add(10), 1);
                d.rpc(peer, vec![10, 20]);
                let r = d.submit().await;
                assert_eq!(r.read(1).as_slice(), &[7, 8]);
                assert!(r.fetch_add(2) <= 1);
                assert_eq!(r.rpc(3), &[10 + 1 + peer.0 as u8, 20]);
                // Both nodes race for one word of node 0: exactly one CAS wins.
                let target = RemotePtr::new(NodeId(0), RegionId(0), 0);
                if ep.cas(target, 0, me as u64 + 1).await == 0 {
                    wins.fetch_add(1, Ordering::SeqCst);
                }
            })
        });
        assert_eq!(cas_wins.load(Ordering::SeqCst), 1);
        let n0 = &reports[0].counters;
        // Node 0's CAS on its own memory is local; node 1's crosses the fabric.
        assert_eq!(n0.local_ops[crate::VerbKind::Cas as usize], 1);
        assert_eq!(
            reports[1].counters.remote_ops[crate::VerbKind::Cas as usize],
            1
        );
        assert_eq!(n0.remote_ops[crate::VerbKind::Rpc as usize], 1);
        assert_eq!(n0.rpcs_served, 1);
        assert_eq!(n0.remote_ops[crate::VerbKind::Write as usize], 1);
        assert_eq!(n0.remote_bytes[crate::VerbKind::Write as usize], 16);
        assert_eq!(n0.doorbells, 1);
        assert_eq!(n0.round_trips, 1, "the local CAS is not a round trip");
    }

    #[test]
    fn fabric_injected_latency_delays_remote_completions_but_not_local_ones() {
        // Large enough that a preempted local read on a busy machine stays below it.
        const LATENCY_NS: u64 = 5_000_000;
        cluster(2, [LATENCY_NS; crate::VerbKind::COUNT], &|ep| {
            Box::pin(async move {
                let peer = NodeId(1 - ep.node().0);
                let t0 = ep.now_ns();
                ep.read(RemotePtr::new(ep.node(), RegionId(0), 0), 1).await;
                let local_ns = ep.now_ns() - t0;
                let t1 = ep.now_ns();
                ep.read(RemotePtr::new(peer, RegionId(0), 0), 1).await;
                let remote_ns = ep.now_ns() - t1;
                let t2 = ep.now_ns();
                ep.rpc(peer, vec![1]).await;
                let rpc_ns = ep.now_ns() - t2;
                assert!(local_ns < LATENCY_NS, "local read took {local_ns} ns");
                assert!(remote_ns >= LATENCY_NS, "remote read took {remote_ns} ns");
                assert!(rpc_ns >= LATENCY_NS, "rpc took {rpc_ns} ns");
            })
        });
    }

    #[test]
    fn fabric_a_panicking_worker_stops_the_others_and_the_run_returns_its_message() {
        // Node 1's co-routine waits for node 0's, which panics instead: without stopping,
        // node 1 would wait (and the run spin) forever.
        const RUN_S_MAX: u64 = 60;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let memory: crate::ClusterMemory = (0..2)
                .map(|n| Arc::new(NodeMemory::new(NodeId(n), &[64])))
                .collect::<Vec<_>>()
                .into();
            let handlers: Vec<Arc<dyn RpcHandler>> = (0..2)
                .map(|_| Arc::new(Echo) as Arc<dyn RpcHandler>)
                .collect();
            let cfg = InprocConfig {
                nodes: 2,
                threads_per_node: 1,
                os_threads: 2,
                pin_threads: false,
                net_latency_ns: [0; crate::VerbKind::COUNT],
            };
            let r = inproc::run(&cfg, memory, &handlers, &|core| {
                let ep = Endpoint::new(core.clone(), TaskId(0));
                vec![Box::pin(async move {
                    let flag = RemotePtr::new(NodeId(0), RegionId(0), 0);
                    if ep.node() == NodeId(0) {
                        ep.rpc(NodeId(1), vec![1]).await;
                        panic!("injected failure after {} RPC", 1);
                    }
                    while ep.read(flag, 1).await.as_slice() != [1] {
                        ep.yield_now().await;
                    }
                })]
            });
            let _ = tx.send(r.map(|_| ()));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(RUN_S_MAX))
            .unwrap_or_else(|_| panic!("the run did not end within {RUN_S_MAX} s"));
        let p = r.expect_err("a worker panicked, yet the run succeeded");
        assert_eq!(
            p.worker,
            Some(crate::ids::WorkerId {
                node: NodeId(0),
                thread: 0
            })
        );
        assert_eq!(p.message, "injected failure after 1 RPC");
        assert!(p.to_string().contains("node 0, thread 0"), "{p}");
    }
}
