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
//! - With [`UcxConfig::coalesce`], the active messages a worker sends one peer worker (its
//!   requests, replies, and over tcp its verbs) wait in that peer's batch until the end of
//!   the event loop's turn (every ready co-routine ran once; `Transport::end_turn`) and go
//!   as one [`AM_BATCH`] message (at most [`BATCH_BYTES_MAX`]), whose
//!   frames the receiver delivers in order: over tcp each message costs both sides a trip
//!   through the kernel and UCX.
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
///   unexpected error: Endpoint timeout", docs/cluster.md);
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
/// Active message id of a batch: the messages one worker sent one peer worker within one
/// event-loop turn (with [`UcxConfig::coalesce`]), framed back to back in its data (each
/// [`FRAME_HEADER_BYTES`]: id, header length, data length; then header and data), its
/// header the frame count. Over tcp each message costs the sender and the receiver a trip
/// through the kernel and UCX (~5-7 µs here): a batch pays it once for a turn's messages.
const AM_BATCH: u16 = 5;
/// Bytes of a batch's header: its frame count.
const BATCH_HEADER_BYTES: usize = 4;
/// Bytes of a frame's own header: id, header length, data length.
const FRAME_HEADER_BYTES: usize = 2 + 2 + 4;
/// A batch is sent at once when its frames reach this many bytes (else at the turn's end),
/// so a batch stays below UCX's rendezvous threshold in the common case and bounded always.
pub const BATCH_BYTES_MAX: usize = 32 << 10;
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
    /// Coalesce the active messages a worker sends one peer worker within an event-loop turn
    /// into one ([`AM_BATCH`]); otherwise each goes at once as its own.
    pub coalesce: bool,
    /// The CPU each worker thread is bound to, by thread (`--pin`, from the deployment's
    /// placement); empty: the OS places them.
    pub pin_cpus: Vec<usize>,
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
    wire: &'a WireFault,
}

impl RunWatch<'_> {
    /// Every co-routine of this node finished.
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire) == self.workers
    }

    /// Why this node's workers stopped early, if they did: a worker panicked, or one
    /// refused a message from the wire.
    pub fn failure(&self) -> Option<String> {
        if let Some(m) = self.wire.refused() {
            return Some(m.to_string());
        }
        self.failure
            .lock()
            .ok()
            .and_then(|f| f.as_ref().map(|p| p.to_string()))
    }
}

/// The first message from the wire a worker of this node refused, malformed or not meant for
/// it (a forged header, an unknown id, a verb's reply that does not fit its request): the
/// node's run stops and reports it as bad input, instead of a worker panicking on it.
#[derive(Debug, Default)]
pub struct WireFault {
    first: OnceLock<String>,
}

impl WireFault {
    /// Notes that node `node` refused a message for `why` (the first one wins: later ones
    /// follow from it).
    fn refuse(&self, node: NodeId, why: impl std::fmt::Display) {
        let _ = self.first.set(format!(
            "node {}: a malformed message from the wire: {why}",
            node.0
        ));
    }

    fn refused(&self) -> Option<&str> {
        self.first.get().map(String::as_str)
    }
}

/// Why a node's run ended without reports.
#[derive(Clone, Debug, thiserror::Error)]
pub enum NodeRunError {
    /// A UCX call failed at start-up.
    #[error(transparent)]
    Ucx(#[from] UcxError),
    /// The bootstrap failed or refused what a peer sent.
    #[error("{0}")]
    Bootstrap(String),
    /// A worker panicked; the others were stopped.
    #[error("{0}")]
    Panicked(WorkerPanic),
    /// A message from the wire was malformed or not for this node (its description); the
    /// workers were stopped, having changed nothing for it.
    #[error("{0}")]
    Malformed(String),
}

/// How each verb travels over `transports`, for reports: `(verb, how)`. Seen on this
/// machine with `UCX_LOG_LEVEL=info` (UCX 1.13 prints each endpoint's lanes).
pub fn describe(transports: Transports, coalesce: bool) -> Vec<(&'static str, String)> {
    let mut d = describe_verbs(transports);
    d.push((
        "messages",
        if coalesce {
            "coalesced: the active messages (requests, replies, and over tcp the verbs) a \
             worker sends one peer worker within an event-loop turn go as one"
        } else {
            "each active message sent at once, on its own"
        }
        .into(),
    ));
    d
}

fn describe_verbs(transports: Transports) -> Vec<(&'static str, String)> {
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
        // The nodes' words are allocated by UCX (`NodeArena::allocate`) in shared memory,
        // so a peer's remote key maps them into this process (`ucp_rkey_ptr`) and each verb
        // is this CPU's load, store or atomic on them at once. Words UCX did not allocate
        // (`NodeArena::register`) are reached by UCX's software path instead, which the
        // target's progress answers; a node says so on stderr at start-up.
        Transports::SharedMemory | Transports::Environment => vec![
            (
                "read",
                "shm: READ by this CPU from the target's words mapped into this process \
                 (UCX allocated them in shared memory; ucp_rkey_ptr), done at once: the \
                 target's CPU takes no part"
                    .into(),
            ),
            (
                "write",
                "shm: WRITE by this CPU into the target's mapped words, as READ".into(),
            ),
            (
                "cas",
                "shm: CAS by a CPU atomic on the target's mapped words, coherent with the \
                 target's own atomics"
                    .into(),
            ),
            (
                "fetch_add",
                "shm: FETCH_ADD by a CPU atomic on the target's mapped words, as CAS".into(),
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

/// A node's UCX context and its regions registered with it, made before the node runs:
/// [`NodeArena::allocate`] has UCX allocate the words (so peers on this machine map them:
/// real RMA over shm) and returns the node's memory over them, to be loaded;
/// [`NodeArena::register`] registers memory that exists (UCX then emulates one-sided ops
/// to it over shm, the target's progress answering them).
pub struct NodeArena {
    context: Context,
    /// By region id; `None` for an empty region (nothing to register).
    regions: Vec<Option<Arc<MemRegion>>>,
}

impl NodeArena {
    fn context(cfg: &UcxConfig) -> Result<Context, UcxError> {
        Context::new(&ContextConfig {
            transports: cfg.transports,
            settings: cfg.settings.clone(),
        })
    }

    /// Regions of `region_words` words (by region id) for node `node`, allocated and
    /// registered by UCX, zeroed, and the node's memory over them.
    pub fn allocate(
        cfg: &UcxConfig,
        node: NodeId,
        region_words: &[usize],
    ) -> Result<(NodeArena, NodeMemory), UcxError> {
        let context = Self::context(cfg)?;
        let mut regions = Vec::with_capacity(region_words.len());
        let mut memory = Vec::with_capacity(region_words.len());
        for &n in region_words {
            if n == 0 {
                regions.push(None);
                memory.push(atoll_fabric::Region::new(0));
                continue;
            }
            let m = Arc::new(MemRegion::allocate(&context, n)?);
            // SAFETY: `allocate` checked the words are word-aligned and at least `n` long;
            // UCX keeps them mapped until the MemRegion, which the region keeps alive, is
            // dropped; nothing else in this process has touched them yet.
            let r = unsafe { atoll_fabric::Region::foreign(m.base(), n, m.clone()) };
            regions.push(Some(m));
            memory.push(r);
        }
        Ok((
            NodeArena { context, regions },
            NodeMemory::with_regions(node, memory),
        ))
    }

    /// Registers the words `memory` already holds.
    pub fn register(cfg: &UcxConfig, memory: &Arc<NodeMemory>) -> Result<NodeArena, UcxError> {
        let context = Self::context(cfg)?;
        let mut regions = Vec::with_capacity(memory.region_count());
        for r in 0..memory.region_count() {
            let id = RegionId(r as u16);
            if memory.region(id).len_words() == 0 {
                regions.push(None);
                continue;
            }
            let owner = Arc::new(RegionOwner {
                memory: memory.clone(),
                region: id,
            });
            regions.push(Some(Arc::new(MemRegion::map(&context, owner)?)));
        }
        Ok(NodeArena { context, regions })
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
    /// A READ's length: the words its reply must carry.
    read_words: u32,
}

/// The UCX half of one worker: its UCX worker and endpoints; built on the worker's thread.
struct Link {
    node: NodeId,
    me: u32,
    thread: u16,
    threads: u16,
    dir: Arc<Directory>,
    /// By node, then region id: the peers' regions mapped into this process (over shm,
    /// when UCX allocated them), set once by `connect_peers`. Views into mappings the
    /// peers' remote keys hold: declared before the peers, dropped first.
    mapped: RefCell<Vec<Vec<Option<atoll_fabric::Region>>>>,
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
    /// Connects to worker `thread` of every other node and attaches its regions; returns how
    /// many of them are not mapped into this process (see [`crate::RemoteRegion::mapped`]).
    fn connect_peers(&self, nodes: u16) -> Result<usize, UcxError> {
        let mut unmapped = 0;
        let mut mapped: Vec<Vec<Option<atoll_fabric::Region>>> =
            (0..nodes).map(|_| Vec::new()).collect();
        for n in (0..nodes).map(NodeId).filter(|&n| n != self.node) {
            self.with_peer(self.target(n), |p| {
                for r in 0..p.regions.len() {
                    let mut view = None;
                    if self.dir.regions[n.0 as usize][r].is_some() {
                        let region = self.region(p, n, RegionId(r as u16))?;
                        match region.mapped_words() {
                            // SAFETY: UCX maps the peer's words for as long as the remote
                            // key lives, which `peers` holds past this view (dropped
                            // first), and every process accesses them atomically.
                            Some(base) => {
                                view = Some(unsafe {
                                    atoll_fabric::Region::borrowed(
                                        base,
                                        region.len_words() as usize,
                                    )
                                })
                            }
                            None => unmapped += 1,
                        }
                    }
                    mapped[n.0 as usize].push(view);
                }
                Ok(())
            })?;
        }
        *self.mapped.borrow_mut() = mapped;
        Ok(unmapped)
    }

    /// Runs one-sided `op` on the target's words if they are mapped into this process (a
    /// load, store or CPU atomic, as UCX's shared-memory RMA would: the target's CPU takes
    /// no part); gives `op` back otherwise.
    fn on_mapped(&self, op: Op) -> Result<Completion, Op> {
        let ptr = match &op {
            Op::Read { ptr, .. }
            | Op::Write { ptr, .. }
            | Op::Cas { ptr, .. }
            | Op::FetchAdd { ptr, .. } => *ptr,
            Op::Rpc { .. } => return Err(op),
        };
        let mapped = self.mapped.borrow();
        match mapped
            .get(ptr.node.0 as usize)
            .and_then(|n| n.get(ptr.region.0 as usize))
        {
            Some(Some(region)) => Ok(atoll_fabric::verbs::execute_on(region, op)),
            _ => Err(op),
        }
    }
}

/// A timer: due time, then slot (min-heap through `Reverse`).
type Timer = std::cmp::Reverse<(u64, u32)>;

/// The engine's transport for one worker of a node run by [`run_node`].
struct UcxTransport {
    link: Link,
    /// One-sided verbs go as [`AM_VERB`] messages rather than UCX's RMA and atomics (tcp).
    verbs_by_am: bool,
    /// [`UcxConfig::coalesce`].
    coalesce: bool,
    /// UCX's progress ran this turn (see `poll`).
    progressed: Cell<bool>,
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
    /// With [`UcxConfig::coalesce`]: each peer worker's batch being filled this turn.
    outbox: RefCell<Vec<Batch>>,
    /// Peer workers whose batch holds frames, in the order they got their first.
    outbox_used: RefCell<Vec<u32>>,
    /// Sent batches that carry requests: the batch's token, the requests' tokens (failed
    /// together if the send fails).
    batches: RefCell<IntMap<u64, Vec<u64>>>,
    /// Requests whose send failed outside `poll`: failed at the next turn.
    send_failed: RefCell<Vec<u64>>,
    /// This worker's own-node requests the handler held (`(slot, index)` as
    /// [`held_key`]): the only ones another worker of this node may answer with token 0.
    held: RefCell<IntMap<u64, ()>>,
    /// Where a worker notes a message from the wire it refused (shared by the node).
    wire: Arc<WireFault>,
}

/// Key of a held own-node request in [`UcxTransport::held`].
fn held_key(slot: SlotId, index: u32) -> u64 {
    (slot.0 as u64) << 32 | index as u64
}

/// An RPC request's header (`header.len()` checked), refused unless it names this node
/// (`me`) as its target and a worker of the cluster (below `workers`) as its requester: a
/// reply to another would have nowhere to go.
fn request_from(h: &[u8], me: NodeId, workers: usize) -> Result<ReplyTo, WireError> {
    let target = NodeId(u16::from_le_bytes([h[20], h[21]]));
    if target != me {
        return Err(WireError::RequestNotHere { target, me });
    }
    let worker = u32_at(h, 0);
    if worker as usize >= workers {
        return Err(WireError::UnknownWorker { worker, workers });
    }
    Ok(ReplyTo {
        worker,
        slot: SlotId(u32_at(h, 4)),
        index: u32_at(h, 8),
        posted_ns: u64_at(h, 12),
    })
}

/// A one-sided verb's reply, checked against the op it answers: done (a refusal means the
/// peers disagree about a region they announced), and a READ's words exactly the length
/// asked for.
fn verb_completion(
    p: &Pending,
    status: u8,
    old: u64,
    data: &[u8],
) -> Result<Completion, WireError> {
    if status != VERB_STATUS_DONE {
        return Err(WireError::VerbRefused {
            node: p.node,
            status,
        });
    }
    let expected_bytes = match p.kind {
        PendingKind::Read => p.read_words as usize * 8,
        _ => 0,
    };
    if data.len() != expected_bytes {
        return Err(WireError::ReplyLength {
            node: p.node,
            kind: p.kind,
            bytes: data.len(),
            expected: expected_bytes,
        });
    }
    Ok(match p.kind {
        PendingKind::Read => Completion::Read(
            data.chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect(),
        ),
        PendingKind::Write => Completion::Write,
        PendingKind::Cas => Completion::Cas(old),
        PendingKind::FetchAdd => Completion::FetchAdd(old),
        PendingKind::Rpc => return Err(WireError::RpcAsVerb(p.node)),
    })
}

/// Why a worker refuses a message from the wire: malformed, or not meant for it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
enum WireError {
    #[error("a request for node {} arrived at node {}", .target.0, .me.0)]
    RequestNotHere { target: NodeId, me: NodeId },
    #[error("a request from worker {worker}, of {workers} in the cluster")]
    UnknownWorker { worker: u32, workers: usize },
    #[error("node {} refused a one-sided verb within the region it announced (status {status})", .node.0)]
    VerbRefused { node: NodeId, status: u8 },
    #[error("node {} answered a {kind:?} with {bytes} bytes, {expected} expected", .node.0)]
    ReplyLength {
        node: NodeId,
        kind: PendingKind,
        bytes: usize,
        expected: usize,
    },
    #[error("node {} answered an RPC as a one-sided verb", .0.0)]
    RpcAsVerb(NodeId),
    #[error("a batch with a {0}-byte header is none of ours ({BATCH_HEADER_BYTES} expected)")]
    BatchHeader(usize),
    #[error("a batch of {count} frames in {bytes} bytes")]
    BatchCount { count: u32, bytes: usize },
    #[error("frame {k} of {count} of a batch ends past its {bytes} bytes")]
    FramePastEnd { k: u32, count: u32, bytes: usize },
    #[error("frame {k} of {count} of a batch is a batch")]
    NestedBatch { k: u32, count: u32 },
    #[error("a batch of {count} frames has {after} bytes after them")]
    TrailingBytes { count: u32, after: usize },
}

/// The frames bound for one peer worker ([`AM_BATCH`]), and the tokens of the requests
/// among them.
#[derive(Default)]
struct Batch {
    frames: Vec<u8>,
    count: u32,
    requests: Vec<u64>,
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

/// One frame of a batch: active message id, header, data.
type Frame<'a> = (u16, &'a [u8], &'a [u8]);

/// Appends one frame of a batch: [`FRAME_HEADER_BYTES`] of id, header length and data
/// length, then the header and the data.
fn put_frame(out: &mut Vec<u8>, id: u16, header: &[u8], data: &[u8]) {
    // Lengths fit: headers are ours (tens of bytes), data a record, a request or a reply,
    // bounded by the regions and the handlers far below 4 GiB.
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(data);
}

/// The frames `(id, header, data)` of a batch with header `header` and data `frames`, or
/// what is wrong with it: a header that is not a count, a frame past the data, a batch in a
/// batch, bytes after the last frame.
fn batch_frames<'a>(header: &[u8], frames: &'a [u8]) -> Result<Vec<Frame<'a>>, WireError> {
    if header.len() != BATCH_HEADER_BYTES {
        return Err(WireError::BatchHeader(header.len()));
    }
    let count = u32_at(header, 0);
    let bytes = frames.len();
    // Each frame takes at least its own header: a count the data cannot hold is refused
    // before anything is allocated for it.
    if count as usize > bytes / FRAME_HEADER_BYTES {
        return Err(WireError::BatchCount { count, bytes });
    }
    let mut out = Vec::with_capacity(count as usize);
    let mut at = 0;
    for k in 0..count {
        let malformed = || WireError::FramePastEnd { k, count, bytes };
        let f = frames
            .get(at..at + FRAME_HEADER_BYTES)
            .ok_or_else(malformed)?;
        let id = u16::from_le_bytes([f[0], f[1]]);
        let h_at = at + FRAME_HEADER_BYTES;
        let d_at = h_at + u16::from_le_bytes([f[2], f[3]]) as usize;
        let end = d_at
            .checked_add(u32_at(f, 4) as usize)
            .ok_or_else(malformed)?;
        if end > frames.len() {
            return Err(malformed());
        }
        if id == AM_BATCH {
            return Err(WireError::NestedBatch { k, count });
        }
        out.push((id, &frames[h_at..d_at], &frames[d_at..end]));
        at = end;
    }
    if at != bytes {
        return Err(WireError::TrailingBytes {
            count,
            after: bytes - at,
        });
    }
    Ok(out)
}

/// An op's completion when its peer is gone.
fn unreachable_peer(p: &Pending) -> Completion {
    Completion::Failed(OpError {
        node: p.node,
        kind: FailureKind::Unreachable,
    })
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
        self.send(worker, AM_VERB_REPLY, r, words, None);
    }

    /// Sends active message `id` to peer worker `worker`: at once, or into its batch with
    /// [`UcxConfig::coalesce`]. `request`: the token of the op it asks (a failed send fails
    /// the op); `None` for a reply, whose loss only its requester's timeout sees.
    fn send(&self, worker: u32, id: u16, header: Vec<u8>, data: Vec<u8>, request: Option<u64>) {
        if !self.coalesce {
            let sub = request.map_or(SUB_REPLY_SENT, |t| t << 2 | SUB_REQUEST_SENT);
            let sent = self.link.with_peer(worker, |p| {
                p.ep.am_send(id, header, data, AmSendOptions::default(), sub)
            });
            if let (Err(_), Some(t)) = (sent, request) {
                self.send_failed.borrow_mut().push(t);
            }
            return;
        }
        let full = {
            let mut outbox = self.outbox.borrow_mut();
            let b = &mut outbox[worker as usize];
            if b.count == 0 {
                self.outbox_used.borrow_mut().push(worker);
            }
            put_frame(&mut b.frames, id, &header, &data);
            b.count += 1;
            b.requests.extend(request);
            b.frames.len() >= BATCH_BYTES_MAX
        };
        if full {
            self.send_batch(worker);
        }
    }

    /// Sends peer worker `worker`'s batch, if it holds frames.
    fn send_batch(&self, worker: u32) {
        let b = std::mem::take(&mut self.outbox.borrow_mut()[worker as usize]);
        if b.count == 0 {
            return;
        }
        let header = b.count.to_le_bytes().to_vec();
        let sub = if b.requests.is_empty() {
            SUB_REPLY_SENT
        } else {
            let token = self.next_token.get();
            self.next_token.set(token + 1);
            token << 2 | SUB_REQUEST_SENT
        };
        let sent = self.link.with_peer(worker, |p| {
            // Eager: a batch of replies with records' words can pass UCX's rendezvous
            // threshold, whose handshake would cost the round trip the batch saves.
            let eager = AmSendOptions {
                protocol: crate::AmProtocol::Eager,
                ..AmSendOptions::default()
            };
            p.ep.am_send(AM_BATCH, header, b.frames, eager, sub)
        });
        match sent {
            Ok(()) if !b.requests.is_empty() => {
                self.batches.borrow_mut().insert(sub >> 2, b.requests);
            }
            Ok(()) => {}
            Err(_) => self.send_failed.borrow_mut().extend(b.requests),
        }
    }

    /// Sends every batch filled since the last call (each peer's messages in their order).
    fn send_batches(&self) {
        let used = std::mem::take(&mut *self.outbox_used.borrow_mut());
        for &w in &used {
            self.send_batch(w);
        }
        let mut u = self.outbox_used.borrow_mut();
        if u.is_empty() {
            // Keeps the vector's room for the next turn.
            *u = used;
            u.clear();
        }
    }

    /// Notes a message from the wire this worker refused: the node's run stops.
    fn refuse(&self, why: impl std::fmt::Display) {
        self.wire.refuse(self.link.node, why);
    }

    /// Hands active message `id` (not a batch) to the worker: a request to its handler, a
    /// reply or a verb's reply to the op it completes; serves a verb. A message that is
    /// malformed or not meant for this node is refused ([`WireFault`]), changing nothing.
    fn deliver(&self, sink: &mut dyn FnMut(Delivery), id: u16, header: &[u8], data: Vec<u8>) {
        match id {
            AM_REQUEST if header.len() == REQUEST_HEADER_BYTES => {
                let workers = self.link.peers.borrow().len();
                match request_from(header, self.link.node, workers) {
                    Ok(from) => sink(Delivery::Request {
                        from,
                        node: self.link.node,
                        req: data,
                    }),
                    Err(why) => self.refuse(why),
                }
            }
            AM_REPLY if header.len() == REPLY_HEADER_BYTES => {
                let h = &header;
                let (slot, index, token) = (SlotId(u32_at(h, 0)), u32_at(h, 4), u64_at(h, 8));
                if token != 0 {
                    self.complete(sink, token, move |_| Completion::Rpc(data));
                } else if self
                    .held
                    .borrow_mut()
                    .remove(&held_key(slot, index))
                    .is_some()
                {
                    // A held own-node request answered by another worker of this node.
                    sink(Delivery::Completion {
                        slot,
                        index,
                        completion: Completion::Rpc(data),
                    });
                } else {
                    self.refuse(format!(
                        "a reply for op {index} of slot {} that this worker holds no request for",
                        slot.0
                    ));
                }
            }
            AM_VERB if header.len() == VERB_HEADER_BYTES => self.serve_verb(header, &data),
            AM_VERB_REPLY if header.len() == VERB_REPLY_HEADER_BYTES => {
                let h = &header;
                let (token, status, old) = (u64_at(h, 0), h[8], u64_at(h, 9));
                let wire = &self.wire;
                let me = self.link.node;
                self.complete(sink, token, |p| {
                    verb_completion(p, status, old, &data).unwrap_or_else(|why| {
                        wire.refuse(me, &why);
                        Completion::Failed(OpError {
                            node: p.node,
                            kind: FailureKind::Unreachable,
                        })
                    })
                });
            }
            id => self.refuse(format!(
                "an active message with id {id} and a {}-byte header is none of ours",
                header.len()
            )),
        }
    }

    /// Delivers the frames of an [`AM_BATCH`] message in order, or refuses it whole.
    fn deliver_batch(&self, sink: &mut dyn FnMut(Delivery), header: &[u8], frames: &[u8]) {
        match batch_frames(header, frames) {
            Ok(parsed) => {
                for (id, h, data) in parsed {
                    self.deliver(sink, id, h, data.to_vec());
                }
            }
            Err(why) => self.refuse(why),
        }
    }

    /// Posts `op` to its node's serving worker with token `token`.
    fn post_remote(&self, slot: SlotId, index: u32, token: u64, op: Op) -> Result<(), UcxError> {
        let l = &self.link;
        let node = op.node();
        let t = token << 2;
        let message = l.with_peer(l.target(node), |p| match op {
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
                Ok(Some((AM_VERB, h, data)))
            }
            Op::Read { ptr, len_words } => l
                .region(p, node, ptr.region)?
                .get(ptr.offset_words as u64, len_words as u64, t | SUB_RESULT)
                .map(|()| None),
            Op::Write { ptr, data } => {
                l.region(p, node, ptr.region)?.put(
                    ptr.offset_words as u64,
                    data.to_vec(),
                    t | SUB_PUT,
                )?;
                // The flush completes when the put is done at the target: the WRITE's
                // completion, as an RDMA WRITE's.
                p.ep.flush(t | SUB_RESULT).map(|()| None)
            }
            Op::Cas { ptr, expect, new } => l
                .region(p, node, ptr.region)?
                .atomic_cswap64(ptr.offset_words as u64, expect, new, t | SUB_RESULT)
                .map(|()| None),
            Op::FetchAdd { ptr, add } => l
                .region(p, node, ptr.region)?
                .atomic_fetch_add64(ptr.offset_words as u64, add, t | SUB_RESULT)
                .map(|()| None),
            Op::Rpc { node, req } => {
                let mut h = Vec::with_capacity(REQUEST_HEADER_BYTES);
                h.extend_from_slice(&l.me.to_le_bytes());
                h.extend_from_slice(&slot.0.to_le_bytes());
                h.extend_from_slice(&index.to_le_bytes());
                h.extend_from_slice(&token.to_le_bytes());
                h.extend_from_slice(&node.0.to_le_bytes());
                Ok(Some((AM_REQUEST, h, req)))
            }
        })?;
        // A message (not UCX's own RMA or atomic): sent, or batched, outside the peer's
        // borrow.
        if let Some((id, h, data)) = message {
            self.send(l.target(node), id, h, data, Some(token));
        }
        Ok(())
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
            let posted = execute_local(&self.memory, self.handler.as_ref(), from, op);
            if matches!(posted, Posted::Held) {
                self.held.borrow_mut().insert(held_key(slot, index), ());
            }
            return posted;
        }
        // Over shm, a peer's words UCX allocated are mapped here: done at once.
        let op = match self.link.on_mapped(op) {
            Ok(c) => return Posted::Done(c),
            Err(op) => op,
        };
        let read_words = match op {
            Op::Read { len_words, .. } => len_words,
            _ => 0,
        };
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
                read_words,
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
        // UCX's progress once per turn: over tcp each is a system call (epoll_wait), and the
        // executor polls before every co-routine; what arrives meanwhile waits for the
        // turn's end at most, as the turn's messages out do.
        if !self.progressed.replace(true) {
            w.progress();
        }
        let failed = std::mem::take(&mut *self.send_failed.borrow_mut());
        for token in failed {
            self.complete(sink, token, unreachable_peer);
        }
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
            if sub == SUB_REQUEST_SENT {
                let batch = self.batches.borrow_mut().remove(&token);
                if let Some(requests) = batch {
                    if c.result.is_err() {
                        for t in requests {
                            self.complete(sink, t, unreachable_peer);
                        }
                    }
                    continue;
                }
            }
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
            if m.id == AM_BATCH {
                self.deliver_batch(sink, &m.header, &m.data);
            } else {
                self.deliver(sink, m.id, &m.header, m.data);
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

    fn end_turn(&self) {
        // What every co-routine posted and the node's handler answered this turn.
        self.send_batches();
        self.progressed.set(false);
    }

    fn reply(&self, to: ReplyTo, reply: Vec<u8>) {
        if to.worker == self.link.me {
            self.held.borrow_mut().remove(&held_key(to.slot, to.index));
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
        self.send(to.worker, AM_REPLY, h, reply, None);
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
    arena: NodeArena,
    setup: &NodeSetup,
    boot: &mut dyn Bootstrap,
    spawn: &Spawner<'_>,
) -> Result<Vec<WorkerReport>, NodeRunError> {
    let node = setup.memory.node;
    let threads = cfg.threads_per_node;
    let NodeArena { context, regions } = arena;
    let descriptors = region_descriptors(setup, &regions)?;
    let sh = NodeShared::default();
    let (to_main, from_threads) = mpsc::channel::<ThreadMsg>();
    let mut dir_senders = Vec::new();
    let result = std::thread::scope(|s| -> Result<(), NodeRunError> {
        for t in 0..threads {
            let (dir_tx, dir_rx) = mpsc::channel::<Arc<Directory>>();
            dir_senders.push(dir_tx);
            let to_main = to_main.clone();
            let (context, sh) = (&context, &sh);
            std::thread::Builder::new()
                .name(format!("atoll-ucx-{t}"))
                .spawn_scoped(s, move || {
                    let id = WorkerId { node, thread: t };
                    if let Some(&cpu) = cfg.pin_cpus.get(t as usize) {
                        // A CPU the machine lacks leaves the thread where the OS puts it
                        // (the launcher refuses such a placement before any process starts).
                        core_affinity::set_for_current(core_affinity::CoreId { id: cpu });
                    }
                    let body = || serve_thread(cfg, setup, spawn, context, sh, t, to_main, dir_rx);
                    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(body)) {
                        let mut f = sh.failure.lock().unwrap_or_else(|e| e.into_inner());
                        f.get_or_insert(WorkerPanic {
                            worker: Some(id),
                            message: panic_message(payload.as_ref()),
                        });
                        sh.failed.store(true, Ordering::Release);
                    }
                })
                .expect("spawning a worker thread");
        }
        drop(to_main);
        let meet = Meeting {
            node,
            descriptors: &descriptors,
            region_count: regions.len(),
            from_threads: &from_threads,
            dir_senders: &dir_senders,
        };
        let r = meet_and_watch(cfg, boot, &sh, &meet);
        sh.stop.store(true, Ordering::Release);
        dir_senders.clear();
        r
    });
    let panicked = sh.failure.into_inner().unwrap_or_else(|e| e.into_inner());
    drop(regions);
    // A refused message stops the workers, which the bootstrap then reports as a failure:
    // the message is the cause.
    if let Some(m) = sh.wire.refused() {
        return Err(NodeRunError::Malformed(m.to_string()));
    }
    if let Some(p) = panicked {
        return Err(NodeRunError::Panicked(p));
    }
    result?;
    let mut reports = sh.reports.into_inner().expect("no poisoned reports");
    reports.sort_by_key(|r| r.id.thread);
    Ok(reports)
}

/// What a node's worker threads and its main thread share while it runs.
#[derive(Default)]
struct NodeShared {
    /// Workers whose co-routines all finished.
    finished: AtomicUsize,
    /// The first worker panic.
    failure: Mutex<Option<WorkerPanic>>,
    failed: AtomicBool,
    /// The first message from the wire a worker refused.
    wire: Arc<WireFault>,
    /// Set once every node is connected: the clocks start.
    go: AtomicBool,
    /// Set when the run ends (done or failed): workers leave their loops.
    stop: AtomicBool,
    /// The instant the node's clocks count from.
    origin: OnceLock<Instant>,
    reports: Mutex<Vec<WorkerReport>>,
}

/// The descriptor (remote key) of each registered region, by region id (empty for an empty
/// region): what peers need to reach this node's words.
fn region_descriptors(
    setup: &NodeSetup,
    regions: &[Option<Arc<MemRegion>>],
) -> Result<Vec<Vec<u8>>, NodeRunError> {
    let node = setup.memory.node;
    assert_eq!(
        regions.len(),
        setup.memory.region_count(),
        "node {}: the arena registered another memory's regions",
        node.0
    );
    let mut descriptors = Vec::new();
    for (r, m) in regions.iter().enumerate() {
        let words = setup.memory.region(RegionId(r as u16)).words();
        match m {
            Some(m) => {
                assert!(
                    std::ptr::eq(m.words(), words),
                    "node {}: region {r} is not the words the arena registered",
                    node.0
                );
                descriptors.push(m.descriptor()?.to_bytes());
            }
            None => descriptors.push(Vec::new()),
        }
    }
    Ok(descriptors)
}

/// A UCX worker listening for every active message Atoll sends.
fn open_worker(context: &Context, cfg: &UcxConfig) -> Result<Worker, UcxError> {
    let wcfg = WorkerConfig {
        am_inbox_messages_max: cfg.am_inbox_messages_max,
    };
    let w = Worker::new(context, &wcfg)?;
    for am in [AM_REQUEST, AM_REPLY, AM_VERB, AM_VERB_REPLY, AM_BATCH] {
        w.receive_am(am)?;
    }
    Ok(w)
}

/// Worker thread `t`: opens its UCX worker and says its address, connects to every peer
/// once the directory comes, waits for the start, then runs its co-routines until stopped.
#[allow(clippy::too_many_arguments)]
fn serve_thread(
    cfg: &UcxConfig,
    setup: &NodeSetup,
    spawn: &Spawner<'_>,
    context: &Context,
    sh: &NodeShared,
    t: u16,
    to_main: mpsc::Sender<ThreadMsg>,
    dir_rx: mpsc::Receiver<Arc<Directory>>,
) {
    let node = setup.memory.node;
    let threads = cfg.threads_per_node;
    let worker = match open_worker(context, cfg) {
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
        mapped: RefCell::new(Vec::new()),
        worker,
    };
    let connected = link.connect_peers(cfg.nodes);
    if let (Ok(unmapped @ 1..), Transports::SharedMemory) = (&connected, cfg.transports) {
        // Only thread 0 says it: every thread attaches the same regions.
        if t == 0 {
            eprintln!(
                "atoll node {}: {unmapped} of the peers' regions are not \
                 mapped into this process: UCX emulates one-sided ops to \
                 them over shared-memory messages (the peers' words were not \
                 allocated in shared memory)",
                node.0
            );
        }
    }
    let connected = connected.map(|_| ());
    let ok = connected.is_ok();
    let _ = to_main.send(ThreadMsg::Connected(connected));
    if !ok {
        return;
    }
    // Progress while waiting: peers' wire-up needs this worker's turns.
    while !sh.go.load(Ordering::Acquire) {
        if sh.stop.load(Ordering::Acquire) {
            return;
        }
        link.worker.progress();
        std::thread::yield_now();
    }
    let transport = UcxTransport::new(cfg, link, setup, sh);
    let id = WorkerId { node, thread: t };
    let core = WorkerCore::new(
        id,
        me,
        setup.memory.clone(),
        setup.handler.clone(),
        Box::new(transport),
    );
    let tasks = spawn(&core);
    let mut exec = Executor::new(core, tasks);
    worker_loop(&mut exec, sh);
    sh.reports
        .lock()
        .expect("no poisoned reports")
        .push(WorkerReport {
            id,
            counters: exec.core().counters(),
        });
}

/// A worker's event loop: turns until the node stops (done, failed, or a refused message),
/// yielding the core after a run of idle turns.
fn worker_loop(exec: &mut Executor, sh: &NodeShared) {
    let mut done = false;
    let mut idle = 0u32;
    // Bounded by the stop flag, which the main thread sets when the cluster is done or
    // failed.
    loop {
        let n = exec.run_ready() + exec.core().progress();
        exec.core().end_turn();
        if !done && exec.live_tasks() == 0 {
            done = true;
            sh.finished.fetch_add(1, Ordering::AcqRel);
        }
        if sh.stop.load(Ordering::Relaxed)
            || sh.failed.load(Ordering::Relaxed)
            || sh.wire.refused().is_some()
        {
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
}

impl UcxTransport {
    /// The transport of a worker connected by `link`, its clock from the node's origin.
    fn new(cfg: &UcxConfig, link: Link, setup: &NodeSetup, sh: &NodeShared) -> UcxTransport {
        let threads = cfg.threads_per_node;
        UcxTransport {
            link,
            verbs_by_am: cfg.transports == Transports::Tcp,
            memory: setup.memory.clone(),
            handler: setup.handler.clone(),
            origin: *sh.origin.get().expect("set before go"),
            op_timeout_ns: cfg.op_timeout_ns,
            next_token: Cell::new(1),
            pending: RefCell::new(IntMap::default()),
            deadlines: RefCell::new(VecDeque::new()),
            timers: RefCell::new(BinaryHeap::new()),
            local_done: RefCell::new(VecDeque::new()),
            scratch: RefCell::new(Vec::new()),
            coalesce: cfg.coalesce,
            progressed: Cell::new(false),
            outbox: RefCell::new(
                (0..cfg.nodes as usize * threads as usize)
                    .map(|_| Batch::default())
                    .collect(),
            ),
            outbox_used: RefCell::new(Vec::new()),
            batches: RefCell::new(IntMap::default()),
            send_failed: RefCell::new(Vec::new()),
            held: RefCell::new(IntMap::default()),
            wire: sh.wire.clone(),
        }
    }
}

/// What the node's main thread meets its worker threads and peers with.
struct Meeting<'a> {
    node: NodeId,
    descriptors: &'a [Vec<u8>],
    region_count: usize,
    from_threads: &'a mpsc::Receiver<ThreadMsg>,
    dir_senders: &'a [mpsc::Sender<Arc<Directory>>],
}

/// The node's main thread: gathers its workers' addresses, exchanges them and the regions'
/// descriptors with every node through `boot`, hands the directory to its workers, waits
/// until they are connected, starts the clocks at the barrier and watches the run until
/// `boot` says stop.
fn meet_and_watch(
    cfg: &UcxConfig,
    boot: &mut dyn Bootstrap,
    sh: &NodeShared,
    meet: &Meeting<'_>,
) -> Result<(), NodeRunError> {
    let (node, threads) = (meet.node, cfg.threads_per_node);
    let wait = Duration::from_secs(STARTUP_WAIT_S_MAX);
    let mut workers = vec![Vec::new(); threads as usize];
    for _ in 0..threads {
        match meet.from_threads.recv_timeout(wait) {
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
            regions: meet.descriptors.to_vec(),
        })
        .map_err(NodeRunError::Bootstrap)?;
    let dir =
        Arc::new(Directory::decode(cfg, &all, meet.region_count).map_err(NodeRunError::Bootstrap)?);
    for tx in meet.dir_senders {
        let _ = tx.send(dir.clone());
    }
    for _ in 0..threads {
        match meet.from_threads.recv_timeout(wait) {
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
    sh.origin.get_or_init(Instant::now);
    sh.go.store(true, Ordering::Release);
    let watch = RunWatch {
        finished: &sh.finished,
        workers: threads as usize,
        failure: &sh.failure,
        wire: &sh.wire,
    };
    boot.wait_stop(&watch).map_err(NodeRunError::Bootstrap)
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
    fn ucx_a_batch_gives_back_its_frames_in_order_and_a_malformed_one_is_refused() {
        let msgs: [(u16, &[u8], &[u8]); 3] = [
            (AM_REQUEST, &[1, 2, 3], &[9; 40]),
            (AM_REPLY, &[], &[]),
            (AM_VERB_REPLY, &[4; 17], &[5; 8]),
        ];
        let mut frames = Vec::new();
        for (id, h, d) in msgs {
            put_frame(&mut frames, id, h, d);
        }
        let count = |n: u32| n.to_le_bytes().to_vec();
        assert_eq!(batch_frames(&count(3), &frames).unwrap(), msgs.to_vec());
        assert_eq!(batch_frames(&count(0), &[]).unwrap(), vec![]);
        // Each way a batch can be wrong is named, and nothing past the data is read.
        let refused = |h: &[u8], f: &[u8], what: &str| {
            let e = batch_frames(h, f).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        refused(&[3, 0], &frames, "2-byte header");
        refused(&count(4), &frames, "frame 3 of 4");
        refused(&count(2), &frames, "bytes after them");
        refused(&count(3), &frames[..frames.len() - 1], "frame 2 of 3");
        refused(&count(u32::MAX), &frames, "frames in");
        let mut nested = Vec::new();
        put_frame(&mut nested, AM_BATCH, &count(0), &[]);
        refused(&count(1), &nested, "is a batch");
        let mut long = Vec::new();
        put_frame(&mut long, AM_REPLY, &[0; 16], &[]);
        long[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        refused(&count(1), &long, "ends past");
    }

    #[test]
    fn ucx_a_verbs_reply_completes_its_op_only_when_it_fits_it() {
        let pending = |kind, read_words| Pending {
            slot: SlotId(0),
            index: 0,
            node: NodeId(2),
            kind,
            read_words,
        };
        let read = pending(PendingKind::Read, 2);
        let words = [7u8; 16];
        match verb_completion(&read, VERB_STATUS_DONE, 0, &words) {
            Ok(Completion::Read(w)) => assert_eq!(&w[..], &[u64::from_le_bytes([7; 8]); 2]),
            c => panic!("a READ's reply completed as {c:?}"),
        }
        match verb_completion(&pending(PendingKind::Cas, 0), VERB_STATUS_DONE, 5, &[]) {
            Ok(Completion::Cas(5)) => {}
            c => panic!("a CAS's reply completed as {c:?}"),
        }
        let refused = |p: &Pending, status, data: &[u8], what: &str| {
            let e = verb_completion(p, status, 0, data).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        refused(&read, VERB_STATUS_REFUSED, &words, "node 2 refused");
        refused(
            &read,
            VERB_STATUS_DONE,
            &words[..8],
            "with 8 bytes, 16 expected",
        );
        refused(
            &pending(PendingKind::Write, 0),
            VERB_STATUS_DONE,
            &words,
            "with 16 bytes, 0",
        );
        refused(
            &pending(PendingKind::Rpc, 0),
            VERB_STATUS_DONE,
            &[],
            "an RPC",
        );
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
