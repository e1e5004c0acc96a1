//! `UcxTransport`: the engine's [`Transport`] over UCX for ONE node per OS process, and
//! [`run_node`], which runs that node's workers (one UCX worker per worker thread).
//!
//! - The node's regions are registered with `ucp_mem_map` at start; their descriptors and
//!   every worker's address go to the peers through a [`Bootstrap`] (the bench's
//!   coordinator), which hands back every node's.
//! - Worker `t` of a node sends its one-sided ops and RPCs to worker `t` of the target node
//!   (as the in-process fabric does), so each worker connects to its peers of the same
//!   thread number at start; any other worker (a deferred reply's requester) is connected
//!   on first use.
//! - READ / WRITE are `ucp_get_nbx` / `ucp_put_nbx` (a WRITE completes when an endpoint
//!   flush after it does, i.e. at the target, as an RDMA WRITE's completion says), CAS and
//!   FETCH_ADD are UCP 64-bit atomics, an RPC is an active message served by the target
//!   worker's event loop (the node's `RpcHandler`, deferred replies through `poll_deferred`
//!   as in-process), its reply an active message back. Own-node ops run on this CPU at
//!   once ([`execute_local`]): UCX's atomics here are executed by CPU atomics on the target
//!   (shared memory, or the target worker's progress for emulated ones), which are coherent
//!   with our own.
//! - Every posted op carries a token; a pending op completes with its result, with
//!   `Failed(Unreachable)` when UCX reports its peer failed, or with `Failed(TimedOut)` after
//!   `op_timeout_ns`; a late completion of a timed-out op is dropped.

use crate::{
    AmSendOptions, Context, ContextConfig, Endpoint, MemRegion, Outcome, RegionDescriptor,
    RemoteRegion, Transports, UcxError, Worker, WorkerAddress, WorkerConfig,
};
use atoll_fabric::core::{
    execute_local, panic_message, Delivery, Executor, NodeSetup, Posted, ReplyTo, SlotId, Spawner,
    Transport, WorkerCore, WorkerPanic, WorkerReport,
};
use atoll_fabric::{
    Completion, FailureKind, IntMap, NodeId, NodeMemory, Op, OpError, RegionId, RpcHandler, Words,
    WorkerId,
};
use std::cell::{Cell, RefCell};
use std::collections::{BinaryHeap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Active message id of an RPC request, and of its reply.
const AM_REQUEST: u16 = 1;
const AM_REPLY: u16 = 2;
/// Bytes of a request's header: requester's worker, slot, op index, token, target node.
const REQUEST_HEADER_BYTES: usize = 4 + 4 + 4 + 8 + 2;
/// Bytes of a reply's header: slot, op index, token.
const REPLY_HEADER_BYTES: usize = 4 + 4 + 8;
/// Low bits of a UCX token: which of an op's UCX requests completed. Only `SUB_RESULT`
/// completes the op; the others matter only when they fail.
const SUB_RESULT: u64 = 0;
const SUB_PUT: u64 = 1;
const SUB_REQUEST_SENT: u64 = 2;
const SUB_REPLY_SENT: u64 = 3;
/// Event-loop turns that found nothing to do before the thread yields its core once: on a
/// machine with fewer cores than busy workers, a peer's worker must get the core to answer.
pub const IDLE_TURNS_BEFORE_YIELD: u32 = 64;
/// Default op timeout: far above any round trip (µs here, a few ms on an oversubscribed
/// machine), below what a user would call a hang.
pub const OP_TIMEOUT_MS_DEFAULT: u64 = 5_000;
/// How long start-up waits for this node's worker threads at each step.
pub const STARTUP_WAIT_S_MAX: u64 = 60;

/// Shape and knobs of one node's UCX fabric.
#[derive(Clone, Debug)]
pub struct UcxConfig {
    pub transports: Transports,
    /// Further UCX settings for the node's context (see [`ContextConfig::settings`]), e.g.
    /// `NET_DEVICES`, the interfaces tcp may use: whose addresses the workers' addresses
    /// carry to the peers.
    pub settings: Vec<(String, String)>,
    pub nodes: u16,
    pub threads_per_node: u16,
    /// A pending op fails as `TimedOut` after this long.
    pub op_timeout_ns: u64,
    /// Received active messages each worker holds (see [`WorkerConfig`]).
    pub am_inbox_messages_max: usize,
}

/// What one node tells its peers at start-up: its workers' addresses (by thread) and its
/// regions' descriptors (by region id), each framed as the wire needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddresses {
    pub workers: Vec<Vec<u8>>,
    pub regions: Vec<Vec<u8>>,
}

/// How a node meets its peers: the bench's coordinator implements it over a socket.
pub trait Bootstrap {
    /// Sends this node's addresses; returns every node's (this one's included), in node order.
    fn exchange(&mut self, mine: NodeAddresses) -> Result<Vec<NodeAddresses>, String>;
    /// Every worker is connected: waits until every node is (the start barrier).
    fn start(&mut self) -> Result<(), String>;
    /// The workers run: returns once the cluster says stop (every node's co-routines
    /// finished), or with an error (a peer or the coordinator failed, or `watch` reports a
    /// worker's panic). Must poll `watch` at least every few milliseconds.
    fn wait_stop(&mut self, watch: &RunWatch<'_>) -> Result<(), String>;
}

/// What the bootstrap sees of a running node.
pub struct RunWatch<'a> {
    finished: &'a AtomicUsize,
    workers: usize,
    failure: &'a Mutex<Option<WorkerPanic>>,
}

impl RunWatch<'_> {
    /// Every co-routine of this node finished.
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire) == self.workers
    }

    /// A worker of this node panicked (its message), if one did.
    pub fn failure(&self) -> Option<WorkerPanic> {
        self.failure.lock().ok().and_then(|f| f.clone())
    }
}

/// Why a node's run ended without reports.
#[derive(Clone, Debug)]
pub enum NodeRunError {
    /// A UCX call failed at start-up.
    Ucx(UcxError),
    /// The bootstrap failed or refused what a peer sent.
    Bootstrap(String),
    /// A worker panicked; the others were stopped.
    Panicked(WorkerPanic),
}

impl std::fmt::Display for NodeRunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeRunError::Ucx(e) => write!(f, "{e}"),
            NodeRunError::Bootstrap(e) => write!(f, "{e}"),
            NodeRunError::Panicked(p) => write!(f, "{p}"),
        }
    }
}

impl std::error::Error for NodeRunError {}

impl From<UcxError> for NodeRunError {
    fn from(e: UcxError) -> Self {
        NodeRunError::Ucx(e)
    }
}

/// How each verb travels over `transports`, for reports: `(verb, how)`. Seen on this
/// machine with `UCX_LOG_LEVEL=info` (UCX 1.13 prints each endpoint's lanes).
pub fn describe(transports: Transports) -> Vec<(&'static str, String)> {
    let rpc = "active message served by the target worker's event loop (the node's RPC \
               handler); the reply an active message back";
    let own = "own node: on this CPU at once (execute_local), coherent with UCX's atomics";
    match transports {
        Transports::Tcp => vec![
            (
                "read",
                "tcp: READ emulated by UCX over active messages (rma_am): the target worker's \
                 progress answers it, no transaction code runs"
                    .into(),
            ),
            (
                "write",
                "tcp: WRITE emulated by UCX over active messages (rma_am), then an endpoint \
                 flush: complete at the target"
                    .into(),
            ),
            (
                "cas",
                "tcp: CAS emulated by UCX over active messages (amo_am): a CPU atomic by the \
                 target worker's progress"
                    .into(),
            ),
            (
                "fetch_add",
                "tcp: FETCH_ADD emulated by UCX over active messages (amo_am)".into(),
            ),
            ("rpc", format!("tcp: {rpc}")),
            ("local", own.into()),
        ],
        // UCX 1.13 lists rma and amo lanes on sysv/posix, but those reach only memory UCX
        // allocated itself: for our registered words a get or CAS completed only once the
        // target worker progressed (checked with the target idle), so it is UCX's software
        // path over shared-memory messages.
        Transports::SharedMemory | Transports::Environment => vec![
            (
                "read",
                "shm: READ emulated by UCX over shared-memory messages (sysv/posix lanes; our \
                 words are not UCX-allocated, so no direct mapping): the target worker's \
                 progress answers it, no transaction code runs"
                    .into(),
            ),
            (
                "write",
                "shm: WRITE emulated likewise, then an endpoint flush: complete at the target"
                    .into(),
            ),
            (
                "cas",
                "shm: CAS emulated by UCX over shared-memory messages: a CPU atomic by the \
                 target worker's progress"
                    .into(),
            ),
            (
                "fetch_add",
                "shm: FETCH_ADD emulated by UCX over shared-memory messages".into(),
            ),
            ("rpc", format!("shm: {rpc}")),
            ("local", own.into()),
        ],
    }
}

/// One of the node's regions, registered: the words the fabric's `Region` holds.
struct RegionOwner {
    memory: Arc<NodeMemory>,
    region: RegionId,
}

impl AsRef<[AtomicU64]> for RegionOwner {
    fn as_ref(&self) -> &[AtomicU64] {
        self.memory.region(self.region).words()
    }
}

/// Every node's decoded addresses, shared by this node's worker threads.
struct Directory {
    workers: Vec<Vec<WorkerAddress>>,
    regions: Vec<Vec<Option<RegionDescriptor>>>,
}

impl Directory {
    fn decode(cfg: &UcxConfig, all: &[NodeAddresses], regions: usize) -> Result<Self, String> {
        if all.len() != cfg.nodes as usize {
            return Err(format!(
                "the directory lists {} nodes, the run has {}",
                all.len(),
                cfg.nodes
            ));
        }
        let mut d = Directory {
            workers: Vec::new(),
            regions: Vec::new(),
        };
        for (n, a) in all.iter().enumerate() {
            if a.workers.len() != cfg.threads_per_node as usize || a.regions.len() != regions {
                return Err(format!(
                    "node {n} announced {} workers and {} regions; expected {} and {regions}",
                    a.workers.len(),
                    a.regions.len(),
                    cfg.threads_per_node
                ));
            }
            d.workers.push(
                a.workers
                    .iter()
                    .map(|w| WorkerAddress::from_bytes(w))
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("node {n}: {e}"))?,
            );
            d.regions.push(
                a.regions
                    .iter()
                    .map(|r| {
                        if r.is_empty() {
                            Ok(None)
                        } else {
                            RegionDescriptor::from_bytes(r).map(Some)
                        }
                    })
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("node {n}: {e}"))?,
            );
        }
        Ok(d)
    }
}

/// A connection to one peer worker, with the peer node's regions attached on first use.
struct Peer {
    regions: Vec<Option<RemoteRegion>>,
    ep: Endpoint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PendingKind {
    Read,
    Write,
    Cas,
    FetchAdd,
    Rpc,
}

/// An op posted to a peer, waiting for its completion.
struct Pending {
    slot: SlotId,
    index: u32,
    node: NodeId,
    kind: PendingKind,
}

/// The UCX half of one worker: its UCX worker and endpoints; built on the worker's thread.
struct Link {
    node: NodeId,
    me: u32,
    thread: u16,
    threads: u16,
    dir: Arc<Directory>,
    /// By global worker index (node-major); declared before the worker, dropped first.
    peers: RefCell<Vec<Option<Peer>>>,
    worker: Worker,
}

impl Link {
    /// The endpoint to global worker `w`, connected on first use.
    fn with_peer<R>(
        &self,
        w: u32,
        f: impl FnOnce(&mut Peer) -> Result<R, UcxError>,
    ) -> Result<R, UcxError> {
        let mut peers = self.peers.borrow_mut();
        let slot = &mut peers[w as usize];
        if slot.is_none() {
            let node = (w / self.threads as u32) as usize;
            let thread = (w % self.threads as u32) as usize;
            let ep = self.worker.connect(&self.dir.workers[node][thread])?;
            *slot = Some(Peer {
                regions: (0..self.dir.regions[node].len()).map(|_| None).collect(),
                ep,
            });
        }
        f(slot.as_mut().expect("connected above"))
    }

    /// The region `region` of the node behind `peer`, attached on first use.
    fn region<'p>(
        &self,
        peer: &'p mut Peer,
        node: NodeId,
        region: RegionId,
    ) -> Result<&'p RemoteRegion, UcxError> {
        let r = &mut peer.regions[region.0 as usize];
        if r.is_none() {
            let d = self.dir.regions[node.0 as usize][region.0 as usize]
                .as_ref()
                .ok_or_else(|| {
                    UcxError::invalid(
                        "attach",
                        format!("node {} region {} is empty", node.0, region.0),
                    )
                })?;
            *r = Some(peer.ep.attach(d)?);
        }
        Ok(r.as_ref().expect("attached above"))
    }

    /// The worker that serves this worker's ops to `node`: its thread of the same number.
    fn target(&self, node: NodeId) -> u32 {
        node.0 as u32 * self.threads as u32 + self.thread as u32
    }

    /// Connects to this thread's peer on every other node and attaches their regions, so a
    /// bad address or key shows at start-up.
    fn connect_peers(&self, nodes: u16) -> Result<(), UcxError> {
        for n in (0..nodes).map(NodeId).filter(|&n| n != self.node) {
            self.with_peer(self.target(n), |p| {
                for r in 0..p.regions.len() {
                    if self.dir.regions[n.0 as usize][r].is_some() {
                        self.region(p, n, RegionId(r as u16))?;
                    }
                }
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// A timer: due time, then slot (min-heap through `Reverse`).
type Timer = std::cmp::Reverse<(u64, u32)>;

/// The engine's transport for one worker of a node run by [`run_node`].
struct UcxTransport {
    link: Link,
    memory: Arc<NodeMemory>,
    handler: Arc<dyn RpcHandler>,
    origin: Instant,
    op_timeout_ns: u64,
    next_token: Cell<u64>,
    /// Keyed by token: one insert and one remove per op, hashed with one multiply.
    pending: RefCell<IntMap<u64, Pending>>,
    /// `(deadline, token)` in posting order; deadlines rise, as the timeout is one.
    deadlines: RefCell<VecDeque<(u64, u64)>>,
    timers: RefCell<BinaryHeap<Timer>>,
    /// Replies to this worker's own held requests, answered by this worker.
    local_done: RefCell<VecDeque<(SlotId, u32, Completion)>>,
    scratch: RefCell<Vec<crate::Completion>>,
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

impl UcxTransport {
    fn failed(node: NodeId, kind: FailureKind) -> Posted {
        Posted::Done(Completion::Failed(OpError { node, kind }))
    }

    /// Posts `op` to its node's serving worker with token `token`.
    fn post_remote(&self, slot: SlotId, index: u32, token: u64, op: Op) -> Result<(), UcxError> {
        let l = &self.link;
        let node = op.node();
        let t = token << 2;
        l.with_peer(l.target(node), |p| match op {
            Op::Read { ptr, len_words } => l.region(p, node, ptr.region)?.get(
                ptr.offset_words as u64,
                len_words as u64,
                t | SUB_RESULT,
            ),
            Op::Write { ptr, data } => {
                l.region(p, node, ptr.region)?.put(
                    ptr.offset_words as u64,
                    data.to_vec(),
                    t | SUB_PUT,
                )?;
                // The flush completes when the put is done at the target: the WRITE's
                // completion, as an RDMA WRITE's.
                p.ep.flush(t | SUB_RESULT)
            }
            Op::Cas { ptr, expect, new } => l.region(p, node, ptr.region)?.atomic_cswap64(
                ptr.offset_words as u64,
                expect,
                new,
                t | SUB_RESULT,
            ),
            Op::FetchAdd { ptr, add } => l.region(p, node, ptr.region)?.atomic_fetch_add64(
                ptr.offset_words as u64,
                add,
                t | SUB_RESULT,
            ),
            Op::Rpc { node, req } => {
                let mut h = Vec::with_capacity(REQUEST_HEADER_BYTES);
                h.extend_from_slice(&l.me.to_le_bytes());
                h.extend_from_slice(&slot.0.to_le_bytes());
                h.extend_from_slice(&index.to_le_bytes());
                h.extend_from_slice(&token.to_le_bytes());
                h.extend_from_slice(&node.0.to_le_bytes());
                p.ep.am_send(
                    AM_REQUEST,
                    h,
                    req,
                    AmSendOptions::default(),
                    t | SUB_REQUEST_SENT,
                )
            }
        })
    }

    fn complete(
        &self,
        sink: &mut dyn FnMut(Delivery),
        token: u64,
        c: impl FnOnce(&Pending) -> Completion,
    ) {
        let p = self.pending.borrow_mut().remove(&token);
        if let Some(p) = p {
            let completion = c(&p);
            sink(Delivery::Completion {
                slot: p.slot,
                index: p.index,
                completion,
            });
        }
    }
}

impl Transport for UcxTransport {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn post(&self, slot: SlotId, index: u32, op: Op) -> Posted {
        let node = op.node();
        if node == self.link.node {
            let from = ReplyTo {
                worker: self.link.me,
                slot,
                index,
                posted_ns: 0,
            };
            return execute_local(&self.memory, self.handler.as_ref(), from, op);
        }
        let kind = match op {
            Op::Read { .. } => PendingKind::Read,
            Op::Write { .. } => PendingKind::Write,
            Op::Cas { .. } => PendingKind::Cas,
            Op::FetchAdd { .. } => PendingKind::FetchAdd,
            Op::Rpc { .. } => PendingKind::Rpc,
        };
        let token = self.next_token.get();
        self.next_token.set(token + 1);
        // Registered before posting: UCX may complete the op within the call.
        self.pending.borrow_mut().insert(
            token,
            Pending {
                slot,
                index,
                node,
                kind,
            },
        );
        match self.post_remote(slot, index, token, op) {
            Ok(()) => {
                let deadline = self.now_ns() + self.op_timeout_ns;
                self.deadlines.borrow_mut().push_back((deadline, token));
                Posted::Pending
            }
            Err(e @ UcxError::OutOfBounds { .. }) => {
                panic!("node {}: {e}", self.link.node.0)
            }
            Err(_) => {
                self.pending.borrow_mut().remove(&token);
                Self::failed(node, FailureKind::Unreachable)
            }
        }
    }

    fn post_timer(&self, slot: SlotId, delay_ns: u64) {
        let due = self.now_ns() + delay_ns;
        self.timers
            .borrow_mut()
            .push(std::cmp::Reverse((due, slot.0)));
    }

    fn compute(&self, ns: u64) -> bool {
        let until = self.now_ns() + ns;
        while self.now_ns() < until {
            std::hint::spin_loop();
        }
        true
    }

    fn poll(&self, sink: &mut dyn FnMut(Delivery)) {
        let w = &self.link.worker;
        w.progress();
        loop {
            let next = self.local_done.borrow_mut().pop_front();
            let Some((slot, index, completion)) = next else {
                break;
            };
            sink(Delivery::Completion {
                slot,
                index,
                completion,
            });
        }
        let mut done = std::mem::take(&mut *self.scratch.borrow_mut());
        w.poll_completions(|c| done.push(c));
        for c in done.drain(..) {
            let (token, sub) = (c.token >> 2, c.token & 3);
            match (sub, &c.result) {
                (SUB_REPLY_SENT, _) | (SUB_PUT | SUB_REQUEST_SENT, Ok(_)) => continue,
                _ => {}
            }
            self.complete(sink, token, |p| match c.result {
                Ok(Outcome::Words(words)) => Completion::Read(Words::from_vec(words)),
                Ok(Outcome::Old(v)) if p.kind == PendingKind::Cas => Completion::Cas(v),
                Ok(Outcome::Old(v)) => Completion::FetchAdd(v),
                Ok(Outcome::Done) => Completion::Write,
                Err(_) => Completion::Failed(OpError {
                    node: p.node,
                    kind: FailureKind::Unreachable,
                }),
            });
        }
        *self.scratch.borrow_mut() = done;
        // Bounded by the inbox: messages arriving meanwhile wait for the next turn.
        while let Some(m) = w.take_am() {
            match m.id {
                AM_REQUEST if m.header.len() == REQUEST_HEADER_BYTES => {
                    let h = &m.header;
                    let target = NodeId(u16::from_le_bytes([h[20], h[21]]));
                    assert_eq!(
                        target, self.link.node,
                        "node {}: a request for node {} arrived here",
                        self.link.node.0, target.0
                    );
                    sink(Delivery::Request {
                        from: ReplyTo {
                            worker: u32_at(h, 0),
                            slot: SlotId(u32_at(h, 4)),
                            index: u32_at(h, 8),
                            posted_ns: u64_at(h, 12),
                        },
                        node: target,
                        req: m.data,
                    });
                }
                AM_REPLY if m.header.len() == REPLY_HEADER_BYTES => {
                    let h = &m.header;
                    let (slot, index, token) = (SlotId(u32_at(h, 0)), u32_at(h, 4), u64_at(h, 8));
                    if token == 0 {
                        // A held own-node request answered by another worker of this node.
                        sink(Delivery::Completion {
                            slot,
                            index,
                            completion: Completion::Rpc(m.data),
                        });
                    } else {
                        let data = m.data;
                        self.complete(sink, token, move |_| Completion::Rpc(data));
                    }
                }
                id => panic!(
                    "node {}: an active message with id {id} and a {}-byte header is none of ours",
                    self.link.node.0,
                    m.header.len()
                ),
            }
        }
        // Deadlines of completed ops go now, oldest first (bounded by the queue), so the queue
        // holds about the outstanding ops, not every op of the last `op_timeout_ns` (millions
        // at a high rate: `atoll fabric-bench` saw it grow and fault in pages); and the clock,
        // a vDSO call that took a fifth of an idle serving loop's turn there (perf), is read
        // only when an op or a timer waits on it.
        {
            let pending = self.pending.borrow();
            let mut d = self.deadlines.borrow_mut();
            while d
                .front()
                .is_some_and(|(_, token)| !pending.contains_key(token))
            {
                d.pop_front();
            }
        }
        if self.deadlines.borrow().is_empty() && self.timers.borrow().is_empty() {
            return;
        }
        let now = self.now_ns();
        loop {
            let due = {
                let mut d = self.deadlines.borrow_mut();
                match d.front() {
                    Some(&(deadline, token)) if deadline <= now => {
                        d.pop_front();
                        Some(token)
                    }
                    _ => None,
                }
            };
            let Some(token) = due else { break };
            self.complete(sink, token, |p| {
                Completion::Failed(OpError {
                    node: p.node,
                    kind: FailureKind::TimedOut,
                })
            });
        }
        loop {
            let due = {
                let mut t = self.timers.borrow_mut();
                match t.peek() {
                    Some(std::cmp::Reverse((at, _))) if *at <= now => t.pop(),
                    _ => None,
                }
            };
            let Some(std::cmp::Reverse((_, slot))) = due else {
                break;
            };
            sink(Delivery::Completion {
                slot: SlotId(slot),
                index: 0,
                completion: Completion::Timer,
            });
        }
    }

    fn reply(&self, to: ReplyTo, reply: Vec<u8>) {
        if to.worker == self.link.me {
            self.local_done
                .borrow_mut()
                .push_back((to.slot, to.index, Completion::Rpc(reply)));
            return;
        }
        let mut h = Vec::with_capacity(REPLY_HEADER_BYTES);
        h.extend_from_slice(&to.slot.0.to_le_bytes());
        h.extend_from_slice(&to.index.to_le_bytes());
        h.extend_from_slice(&to.posted_ns.to_le_bytes());
        // A reply that cannot be sent has a dead requester: nothing waits for it here.
        let _ = self.link.with_peer(to.worker, |p| {
            p.ep.am_send(AM_REPLY, h, reply, AmSendOptions::default(), SUB_REPLY_SENT)
        });
    }
}

/// What a worker thread tells the node's main thread at start-up.
enum ThreadMsg {
    Address(u16, Result<Vec<u8>, UcxError>),
    Connected(Result<(), UcxError>),
}

/// Runs node `setup.memory.node` of a cluster: registers its memory, meets its peers
/// through `boot`, runs `cfg.threads_per_node` workers (each `spawn`s its co-routines),
/// and returns their counters once `boot` says stop.
pub fn run_node(
    cfg: &UcxConfig,
    setup: &NodeSetup,
    boot: &mut dyn Bootstrap,
    spawn: &Spawner<'_>,
) -> Result<Vec<WorkerReport>, NodeRunError> {
    let node = setup.memory.node;
    let threads = cfg.threads_per_node;
    let context = Context::new(&ContextConfig {
        transports: cfg.transports,
        settings: cfg.settings.clone(),
    })?;
    // Registered for the whole run, unmapped only after every worker (and so every
    // endpoint peers could reach through) is gone.
    let mut regions: Vec<Option<MemRegion>> = Vec::new();
    let mut descriptors = Vec::new();
    for r in 0..setup.memory.region_count() {
        let id = RegionId(r as u16);
        if setup.memory.region(id).len_words() == 0 {
            regions.push(None);
            descriptors.push(Vec::new());
            continue;
        }
        let owner = Arc::new(RegionOwner {
            memory: setup.memory.clone(),
            region: id,
        });
        let m = MemRegion::map(&context, owner)?;
        descriptors.push(m.descriptor()?.to_bytes());
        regions.push(Some(m));
    }
    let region_count = regions.len();
    let finished = AtomicUsize::new(0);
    let failure: Mutex<Option<WorkerPanic>> = Mutex::new(None);
    let failed = AtomicBool::new(false);
    let go = AtomicBool::new(false);
    let stop = AtomicBool::new(false);
    let origin: OnceLock<Instant> = OnceLock::new();
    let reports = Mutex::new(Vec::new());
    let (to_main, from_threads) = mpsc::channel::<ThreadMsg>();
    let mut dir_senders = Vec::new();
    let result = std::thread::scope(|s| -> Result<(), NodeRunError> {
        for t in 0..threads {
            let (dir_tx, dir_rx) = mpsc::channel::<Arc<Directory>>();
            dir_senders.push(dir_tx);
            let to_main = to_main.clone();
            let (context, finished, failure, failed, go, stop, origin, reports) = (
                &context, &finished, &failure, &failed, &go, &stop, &origin, &reports,
            );
            std::thread::Builder::new()
                .name(format!("atoll-ucx-{t}"))
                .spawn_scoped(s, move || {
                    let id = WorkerId { node, thread: t };
                    let body = || {
                        let wcfg = WorkerConfig {
                            am_inbox_messages_max: cfg.am_inbox_messages_max,
                        };
                        let worker = match Worker::new(context, &wcfg).and_then(|w| {
                            w.receive_am(AM_REQUEST)?;
                            w.receive_am(AM_REPLY)?;
                            Ok(w)
                        }) {
                            Ok(w) => w,
                            Err(e) => {
                                let _ = to_main.send(ThreadMsg::Address(t, Err(e)));
                                return;
                            }
                        };
                        let addr = worker.address().map(|a| a.to_bytes());
                        let _ = to_main.send(ThreadMsg::Address(t, addr));
                        // The main thread drops the sender when start-up fails.
                        let Ok(dir) = dir_rx.recv() else { return };
                        let me = node.0 as u32 * threads as u32 + t as u32;
                        let link = Link {
                            node,
                            me,
                            thread: t,
                            threads,
                            peers: RefCell::new(
                                (0..cfg.nodes as usize * threads as usize)
                                    .map(|_| None)
                                    .collect(),
                            ),
                            dir,
                            worker,
                        };
                        let connected = link.connect_peers(cfg.nodes);
                        let ok = connected.is_ok();
                        let _ = to_main.send(ThreadMsg::Connected(connected));
                        if !ok {
                            return;
                        }
                        // Progress while waiting: peers' wire-up needs this worker's turns.
                        while !go.load(Ordering::Acquire) {
                            if stop.load(Ordering::Acquire) {
                                return;
                            }
                            link.worker.progress();
                            std::thread::yield_now();
                        }
                        let transport = UcxTransport {
                            link,
                            memory: setup.memory.clone(),
                            handler: setup.handler.clone(),
                            origin: *origin.get().expect("set before go"),
                            op_timeout_ns: cfg.op_timeout_ns,
                            next_token: Cell::new(1),
                            pending: RefCell::new(IntMap::default()),
                            deadlines: RefCell::new(VecDeque::new()),
                            timers: RefCell::new(BinaryHeap::new()),
                            local_done: RefCell::new(VecDeque::new()),
                            scratch: RefCell::new(Vec::new()),
                        };
                        let core = WorkerCore::new(
                            id,
                            me,
                            setup.memory.clone(),
                            setup.handler.clone(),
                            Box::new(transport),
                        );
                        let tasks = spawn(&core);
                        let mut exec = Executor::new(core, tasks);
                        let mut done = false;
                        let mut idle = 0u32;
                        // Bounded by the stop flag, which the main thread sets when the
                        // cluster is done or failed.
                        loop {
                            let n = exec.run_ready() + exec.core().progress();
                            if !done && exec.live_tasks() == 0 {
                                done = true;
                                finished.fetch_add(1, Ordering::AcqRel);
                            }
                            if stop.load(Ordering::Relaxed) || failed.load(Ordering::Relaxed) {
                                break;
                            }
                            if n == 0 {
                                idle += 1;
                                if idle >= IDLE_TURNS_BEFORE_YIELD {
                                    idle = 0;
                                    std::thread::yield_now();
                                }
                            } else {
                                idle = 0;
                            }
                        }
                        reports
                            .lock()
                            .expect("no poisoned reports")
                            .push(WorkerReport {
                                id,
                                counters: exec.core().counters(),
                            });
                    };
                    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(body)) {
                        let mut f = failure.lock().unwrap_or_else(|e| e.into_inner());
                        f.get_or_insert(WorkerPanic {
                            worker: Some(id),
                            message: panic_message(payload.as_ref()),
                        });
                        failed.store(true, Ordering::Release);
                    }
                })
                .expect("spawning a worker thread");
        }
        drop(to_main);
        let wait = Duration::from_secs(STARTUP_WAIT_S_MAX);
        let mut main = || -> Result<(), NodeRunError> {
            let mut workers = vec![Vec::new(); threads as usize];
            for _ in 0..threads {
                match from_threads.recv_timeout(wait) {
                    Ok(ThreadMsg::Address(t, a)) => workers[t as usize] = a?,
                    Ok(ThreadMsg::Connected(..)) => unreachable!("no directory was sent yet"),
                    Err(_) => {
                        return Err(NodeRunError::Bootstrap(format!(
                            "node {}: a worker thread did not start within {STARTUP_WAIT_S_MAX} s",
                            node.0
                        )))
                    }
                }
            }
            let all = boot
                .exchange(NodeAddresses {
                    workers,
                    regions: descriptors.clone(),
                })
                .map_err(NodeRunError::Bootstrap)?;
            let dir = Arc::new(
                Directory::decode(cfg, &all, region_count).map_err(NodeRunError::Bootstrap)?,
            );
            for tx in &dir_senders {
                let _ = tx.send(dir.clone());
            }
            for _ in 0..threads {
                match from_threads.recv_timeout(wait) {
                    Ok(ThreadMsg::Connected(r)) => r?,
                    Ok(ThreadMsg::Address(..)) => unreachable!("each thread sends one address"),
                    Err(_) => {
                        return Err(NodeRunError::Bootstrap(format!(
                        "node {}: a worker thread did not connect within {STARTUP_WAIT_S_MAX} s",
                        node.0
                    )))
                    }
                }
            }
            boot.start().map_err(NodeRunError::Bootstrap)?;
            origin.get_or_init(Instant::now);
            go.store(true, Ordering::Release);
            let watch = RunWatch {
                finished: &finished,
                workers: threads as usize,
                failure: &failure,
            };
            boot.wait_stop(&watch).map_err(NodeRunError::Bootstrap)
        };
        let r = main();
        stop.store(true, Ordering::Release);
        dir_senders.clear();
        r
    });
    let panicked = failure.into_inner().unwrap_or_else(|e| e.into_inner());
    drop(regions);
    if let Some(p) = panicked {
        return Err(NodeRunError::Panicked(p));
    }
    result?;
    let mut reports = reports.into_inner().expect("no poisoned reports");
    reports.sort_by_key(|r| r.id.thread);
    Ok(reports)
}
