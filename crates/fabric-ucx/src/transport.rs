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
//!   FETCH_ADD are UCP 64-bit atomics; over tcp all four are our own active messages instead
//!   (see [`AM_VERB`]); an RPC is an active message served by the target
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
use atoll_fabric::verbs::execute_one_sided;
use atoll_fabric::{
    Completion, FailureKind, IntMap, NodeId, NodeMemory, Op, OpError, RegionId, RemotePtr,
    RpcHandler, Words, WorkerId,
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
/// Active message id of a one-sided verb carried by us over tcp, and of its reply. Over tcp
/// UCX 1.13 emulates RMA and atomics itself over active messages (`rma_am`, `amo_am`), which
/// the target's progress answers anyway, but:
/// - an emulated atomic outstanding when a peer fails can crash the process while UCX purges
///   the endpoint's requests (`ucp_ep_reqs_purge` -> `ucp_request_memory_dereg`: 8 of 200
///   test runs);
/// - a target whose requester left mid-put died in UCX (`ucp_put_handler`: "Fatal:
///   unexpected error: Endpoint timeout", NOTES-hosts.md);
///
/// Both cost a message per verb that the target's progress answers, so ours costs about
/// what UCX's did (Deneva's YCSB shape over tcp, OCC one-sided: 5,604 tx/s against 5,995
/// before). The target's event loop serves ours: it checks the words are its own, applies the verb
/// to them (the CPU atomics own-node ops use) without transaction code, and replies.
const AM_VERB: u16 = 3;
const AM_VERB_REPLY: u16 = 4;
/// Bytes of a verb's header: requester's worker, token, region, offset, kind, two operands (a
/// READ's length; CAS's expected and new values; FETCH_ADD's addend). A WRITE's words follow
/// as the message's data.
const VERB_HEADER_BYTES: usize = 4 + 8 + 2 + 4 + 1 + 8 + 8;
/// Bytes of a verb's reply header: token, status, an atomic's old value. A READ's words follow
/// as the data.
const VERB_REPLY_HEADER_BYTES: usize = 8 + 1 + 8;
const VERB_READ: u8 = 0;
const VERB_WRITE: u8 = 1;
const VERB_CAS: u8 = 2;
const VERB_FETCH_ADD: u8 = 3;
const VERB_STATUS_DONE: u8 = 0;
/// The target refused it, changing nothing: not its words, or a malformed verb.
const VERB_STATUS_REFUSED: u8 = 1;
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
                "tcp: READ by Atoll's own active message (not UCX's rma_am/amo_am emulation, \
                 which can crash UCX 1.13 when a peer fails): the target worker's event loop \
                 copies the words back, no transaction code runs"
                    .into(),
            ),
            (
                "write",
                "tcp: WRITE by Atoll's own active message, as READ: complete when the target \
                 has stored the words"
                    .into(),
            ),
            (
                "cas",
                "tcp: CAS by Atoll's own active message, as READ: a CPU atomic by the target \
                 worker's event loop"
                    .into(),
            ),
            (
                "fetch_add",
                "tcp: FETCH_ADD by Atoll's own active message, as CAS".into(),
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
    /// One-sided verbs go as [`AM_VERB`] messages rather than UCX's RMA and atomics (tcp).
    verbs_by_am: bool,
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

/// The header of an [`AM_VERB`] message.
fn verb_header(me: u32, token: u64, ptr: RemotePtr, kind: u8, a: u64, b: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(VERB_HEADER_BYTES);
    h.extend_from_slice(&me.to_le_bytes());
    h.extend_from_slice(&token.to_le_bytes());
    h.extend_from_slice(&ptr.region.0.to_le_bytes());
    h.extend_from_slice(&ptr.offset_words.to_le_bytes());
    h.push(kind);
    h.extend_from_slice(&a.to_le_bytes());
    h.extend_from_slice(&b.to_le_bytes());
    h
}

/// The verb an [`AM_VERB`] message (`h` its header of [`VERB_HEADER_BYTES`], `data` a WRITE's
/// words) asks of `memory`, or `None` to refuse it: an unknown kind, a WRITE whose data is not
/// whole words, or words outside the node's regions (an empty access included).
fn verb_op(memory: &NodeMemory, h: &[u8], data: &[u8]) -> Option<Op> {
    let region = RegionId(u16::from_le_bytes([h[12], h[13]]));
    let offset_words = u32_at(h, 14);
    let (kind, a, b) = (h[18], u64_at(h, 19), u64_at(h, 27));
    let ptr = RemotePtr {
        node: memory.node,
        region,
        offset_words,
    };
    let (op, len_words) = match kind {
        VERB_READ => (
            Op::Read {
                ptr,
                len_words: u32::try_from(a).ok()?,
            },
            a,
        ),
        VERB_WRITE if data.len() % 8 == 0 => (
            Op::Write {
                ptr,
                data: data
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                    .collect(),
            },
            (data.len() / 8) as u64,
        ),
        VERB_CAS => (
            Op::Cas {
                ptr,
                expect: a,
                new: b,
            },
            1,
        ),
        VERB_FETCH_ADD => (Op::FetchAdd { ptr, add: a }, 1),
        _ => return None,
    };
    let in_bounds = (region.0 as usize) < memory.region_count()
        && len_words > 0
        && (offset_words as u64)
            .checked_add(len_words)
            .is_some_and(|end| end <= memory.region(region).len_words() as u64);
    in_bounds.then_some(op)
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

    /// Serves an [`AM_VERB`] message from a peer: applies the verb [`verb_op`] accepts as an
    /// own-node op would (CPU atomics, coherent with own-node ops) and replies; or refuses
    /// and changes nothing.
    fn serve_verb(&self, h: &[u8], data: &[u8]) {
        let (worker, token) = (u32_at(h, 0), u64_at(h, 4));
        if worker as usize >= self.link.peers.borrow().len() {
            // Names no worker of the cluster: malformed, and nobody to answer.
            return;
        }
        let op = verb_op(&self.memory, h, data);
        let (status, old, words) = match op {
            Some(op) => match execute_one_sided(&self.memory, op) {
                Completion::Read(w) => {
                    let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
                    (VERB_STATUS_DONE, 0, bytes)
                }
                Completion::Cas(v) | Completion::FetchAdd(v) => (VERB_STATUS_DONE, v, Vec::new()),
                Completion::Write => (VERB_STATUS_DONE, 0, Vec::new()),
                c => unreachable!("a one-sided verb completed as {c:?}"),
            },
            None => (VERB_STATUS_REFUSED, 0, Vec::new()),
        };
        let mut r = Vec::with_capacity(VERB_REPLY_HEADER_BYTES);
        r.extend_from_slice(&token.to_le_bytes());
        r.push(status);
        r.extend_from_slice(&old.to_le_bytes());
        // A reply that cannot be sent has a dead requester: nothing waits for it here.
        let _ = self.link.with_peer(worker, |p| {
            p.ep.am_send(
                AM_VERB_REPLY,
                r,
                words,
                AmSendOptions::default(),
                SUB_REPLY_SENT,
            )
        });
    }

    /// Posts `op` to its node's serving worker with token `token`.
    fn post_remote(&self, slot: SlotId, index: u32, token: u64, op: Op) -> Result<(), UcxError> {
        let l = &self.link;
        let node = op.node();
        let t = token << 2;
        l.with_peer(l.target(node), |p| match op {
            Op::Read { .. } | Op::Write { .. } | Op::Cas { .. } | Op::FetchAdd { .. }
                if self.verbs_by_am =>
            {
                let (ptr, kind, len_words, a, b, data) = match op {
                    Op::Read { ptr, len_words } => (
                        ptr,
                        VERB_READ,
                        len_words as u64,
                        len_words as u64,
                        0,
                        Vec::new(),
                    ),
                    Op::Write { ptr, data } => {
                        let bytes: Vec<u8> = data.iter().flat_map(|w| w.to_le_bytes()).collect();
                        (ptr, VERB_WRITE, data.len() as u64, 0, 0, bytes)
                    }
                    Op::Cas { ptr, expect, new } => (ptr, VERB_CAS, 1, expect, new, Vec::new()),
                    Op::FetchAdd { ptr, add } => (ptr, VERB_FETCH_ADD, 1, add, 0, Vec::new()),
                    Op::Rpc { .. } => unreachable!("not a one-sided verb"),
                };
                // Refused here as UCX's own verbs are, before anything is sent.
                l.region(p, node, ptr.region)?.check(
                    "one-sided verb (active message)",
                    ptr.offset_words as u64,
                    len_words,
                )?;
                let h = verb_header(l.me, token, ptr, kind, a, b);
                p.ep.am_send(
                    AM_VERB,
                    h,
                    data,
                    AmSendOptions::default(),
                    t | SUB_REQUEST_SENT,
                )
            }
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
                AM_VERB if m.header.len() == VERB_HEADER_BYTES => {
                    self.serve_verb(&m.header, &m.data)
                }
                AM_VERB_REPLY if m.header.len() == VERB_REPLY_HEADER_BYTES => {
                    let h = &m.header;
                    let (token, status, old) = (u64_at(h, 0), h[8], u64_at(h, 9));
                    let (me, data) = (self.link.node, m.data);
                    self.complete(sink, token, move |p| {
                        // We checked the words against the peer's announced region before
                        // sending: a refusal means the peers disagree about their layout.
                        assert_eq!(
                            status, VERB_STATUS_DONE,
                            "node {}: node {} refused a one-sided verb within the region it announced",
                            me.0, p.node.0
                        );
                        match p.kind {
                            PendingKind::Read => Completion::Read(
                                data.chunks_exact(8)
                                    .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                                    .collect(),
                            ),
                            PendingKind::Write => Completion::Write,
                            PendingKind::Cas => Completion::Cas(old),
                            PendingKind::FetchAdd => Completion::FetchAdd(old),
                            PendingKind::Rpc => unreachable!("an RPC's token on a verb's reply"),
                        }
                    });
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
                            w.receive_am(AM_VERB)?;
                            w.receive_am(AM_VERB_REPLY)?;
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
                            verbs_by_am: cfg.transports == Transports::Tcp,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn verb(region: u16, offset_words: u32, kind: u8, a: u64, b: u64) -> Vec<u8> {
        let ptr = RemotePtr {
            node: NodeId(1),
            region: RegionId(region),
            offset_words,
        };
        verb_header(7, 42, ptr, kind, a, b)
    }

    #[test]
    fn ucx_verb_message_within_the_nodes_words_is_served_and_anything_else_refused() {
        let memory = NodeMemory::new(NodeId(1), &[8, 0]);
        let ok = |h: &[u8], d: &[u8]| verb_op(&memory, h, d).is_some();
        assert!(ok(&verb(0, 0, VERB_READ, 8, 0), &[]), "a whole-region READ");
        assert!(
            ok(&verb(0, 7, VERB_CAS, 1, 2), &[]),
            "a CAS on the last word"
        );
        assert!(
            ok(&verb(0, 6, VERB_WRITE, 0, 0), &[0; 16]),
            "a 2-word WRITE at the end"
        );
        let refused = [
            (verb(0, 1, VERB_READ, 8, 0), vec![], "a READ past the end"),
            (verb(0, 0, VERB_READ, 0, 0), vec![], "an empty READ"),
            (
                verb(0, 0, VERB_READ, u64::MAX, 0),
                vec![],
                "a READ whose length overflows",
            ),
            (
                verb(0, 8, VERB_FETCH_ADD, 1, 0),
                vec![],
                "a FETCH_ADD past the end",
            ),
            (
                verb(1, 0, VERB_CAS, 0, 1),
                vec![],
                "a CAS in an empty region",
            ),
            (
                verb(2, 0, VERB_CAS, 0, 1),
                vec![],
                "a CAS in a region the node lacks",
            ),
            (
                verb(0, 0, VERB_WRITE, 0, 0),
                vec![0; 12],
                "a WRITE of 1.5 words",
            ),
            (verb(0, 0, VERB_WRITE, 0, 0), vec![], "an empty WRITE"),
            (
                verb(0, 7, VERB_WRITE, 0, 0),
                vec![0; 16],
                "a WRITE past the end",
            ),
            (
                verb(0, u32::MAX, VERB_READ, 2, 0),
                vec![],
                "an offset at u32::MAX",
            ),
            (verb(0, 0, 9, 0, 0), vec![], "an unknown kind"),
        ];
        for (h, d, what) in refused {
            assert!(!ok(&h, &d), "{what} was accepted");
        }
        let words: Vec<u64> = memory
            .region(RegionId(0))
            .words()
            .iter()
            .map(|w| w.load(std::sync::atomic::Ordering::Acquire))
            .collect();
        assert_eq!(words, vec![0; 8], "deciding changes nothing");
    }
}
