//! The deterministic simulated fabric: the whole cluster (every node, thread and
//! co-routine) on one OS thread, in virtual time, running the same protocol and workload
//! code as the threaded fabric.
//!
//! Events are ordered by (virtual time, sequence number), so the same inputs and seed give
//! the same run. Nothing here reads the wall clock. Each worker is a simulated core: running
//! its co-routines and serving RPCs costs CPU time (see [`net::CpuProfile`]), and its clock
//! advances as it works; messages cross the [`net::NetProfile`] model; [`faults`] delay
//! links, pause nodes, or crash them; [`islands`] places nodes on machines of sockets and
//! prices memory, cache lines, the channel inside a machine and thread migrations.

pub mod faults;
pub mod islands;
pub mod net;

use atoll_fabric::core::{
    execute_local, Delivery, Executor, NodeSetup, Posted, ReplyTo, SlotId, Spawner, Transport,
    WorkerCore, WorkerReport,
};
use atoll_fabric::ids::{NodeId, RegionId, RemotePtr, WorkerId};
use atoll_fabric::memory::{ClusterMemory, NodeDirectory, NodeMemory};
use atoll_fabric::verbs::{
    execute_one_sided, Completion, FailureKind, Op, OpError, RpcHandler, VerbKind, Words,
};
use faults::Fault;
use net::{CpuProfile, NetProfile};
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::rc::Rc;
use std::sync::Arc;

/// How often a simulated worker re-examines requests its handler holds.
const DEFERRED_POLL_NS: u64 = 1_000;
/// The least virtual time without any co-routine polled after which a run counts as hung: a
/// worker that polls for ever (a timestamp sequencer) keeps events coming when nothing else
/// happens. Far beyond any wait of a live run without faults or think time (back-off at
/// most 1 ms, op timeouts in ms); a run's own [`SimConfig::idle_limit_ns`] adds those.
pub const HUNG_AFTER_NS_MIN: u64 = 1_000_000_000;

/// Shape and models of a simulated cluster.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: u16,
    pub threads_per_node: u16,
    pub net: NetProfile,
    pub cpu: CpuProfile,
    pub faults: Vec<Fault>,
    /// How long an op to a crashed node waits before it completes with
    /// [`FailureKind::TimedOut`] (a NIC's retransmission timeout), from when it was posted.
    pub op_timeout_ns: u64,
    /// Nodes sharing a machine, two by two ([`atoll_fabric::ids::machine_peer`]): their
    /// one-sided ops to each other are local accesses, not network trips.
    pub machine_pairs: Vec<(NodeId, NodeId)>,
    /// Virtual time without any co-routine polled after which the run counts as hung (at
    /// least [`HUNG_AFTER_NS_MIN`]): the run sizes it from its own faults, timeouts and
    /// think times, so no wait it asked for is taken for a hang.
    pub idle_limit_ns: u64,
    /// Nodes as instances on machines of sockets ([`islands`]), and the seed of its draws;
    /// `None`: every node a machine of its own, its memory all local.
    pub islands: Option<(islands::Islands, u64)>,
    /// Every node's own commit log, group-committed, as this device prices its writes;
    /// `None`: no node keeps one.
    pub instance_log: Option<net::LogDevice>,
}

/// The op timeout when none is configured: 1 ms of virtual time, a few hundred round trips
/// of the InfiniBand profiles yet short next to any measured run.
pub const OP_TIMEOUT_NS_DEFAULT: u64 = 1_000_000;

/// What a simulated run returns.
pub struct SimReport {
    pub workers: Vec<WorkerReport>,
    /// Virtual time when the last co-routine finished.
    pub virtual_ns: u64,
    pub events: u64,
    /// Per worker (node-major, as `workers`), the virtual CPU time its core spent: the
    /// costs of the CPU profile it was charged. Over `virtual_ns` it says how saturated the
    /// simulated cores were, and so how much of a stage's time is a co-routine waiting for
    /// its core rather than for the network.
    pub cpu_busy_ns: Vec<u64>,
    /// Co-routines of live nodes that never finished: waiting with nothing left to happen, or
    /// with only pollers running for [`SimConfig::idle_limit_ns`] (a hang).
    pub unfinished: usize,
    /// Nodes that crashed: when, and how many co-routines stopped with them.
    pub crashed: Vec<(NodeId, u64, usize)>,
}

enum Ev {
    /// Run a worker's event loop and ready co-routines.
    Run {
        w: u32,
    },
    /// Hand a completion or request to a worker.
    Arrive {
        w: u32,
        delivery: Delivery,
        /// The other node whose answer a completion carries (a verb's target, a request's
        /// server): a node that holds it dead refuses it ([`World::at_node`]).
        by: Option<NodeId>,
    },
    /// A one-sided op reaches its target's NIC (or, without NIC support, its CPU).
    Exec {
        src: u32,
        slot: SlotId,
        index: u32,
        op: Op,
        /// When the source posted it, in its clock: its timeout counts from here.
        posted_ns: u64,
        cpu_reserved: bool,
    },
    Crash {
        node: NodeId,
    },
    /// A node's freeze begins ([`Fault::Freeze`]).
    Freeze {
        node: NodeId,
    },
    /// A message a worker's CPU handed to its NIC at this event's time: it takes its place
    /// in the NIC's queues now, then `then` happens when the target's NIC has received it.
    /// A worker runs ahead of the world's clock while it executes co-routines back to back,
    /// so reserving the NIC when the CPU posts would let a message from later in virtual
    /// time queue ahead of one from earlier (and hold up every node's queue behind it).
    Send {
        from: NodeId,
        to: NodeId,
        kind: VerbKind,
        bytes: u64,
        then: Box<Ev>,
    },
    /// One step of a torn READ or WRITE: words `[at_word, at_word + chunk)` move now.
    Step {
        src: u32,
        slot: SlotId,
        index: u32,
        op: Op,
        posted_ns: u64,
        at_word: u32,
        /// What a READ has gathered so far.
        buf: Words,
    },
    /// An atomic whose word was busy with earlier atomics, at its turn: it executes now,
    /// and the verbs queued behind it on its link follow.
    Atomic {
        src: u32,
        slot: SlotId,
        index: u32,
        op: Op,
        posted_ns: u64,
    },
}

impl Ev {
    fn node(&self, threads: u16) -> Option<NodeId> {
        match self {
            Ev::Run { w } | Ev::Arrive { w, .. } => Some(NodeId((*w / threads as u32) as u16)),
            Ev::Exec { op, .. } | Ev::Step { op, .. } | Ev::Atomic { op, .. } => Some(op.node()),
            // A sent message has left its worker's CPU: a crash or pause of either end
            // acts on the event it carries, when that arrives.
            Ev::Crash { .. } | Ev::Freeze { .. } | Ev::Send { .. } => None,
        }
    }

    /// When the op this event carries to a node was posted, if another node's worker posted
    /// it: its timeout counts from then.
    fn foreign_op_posted_ns(&self, at: NodeId, threads: u16) -> Option<u64> {
        let from_other = |w: u32| (w / threads as u32) as u16 != at.0;
        match self {
            Ev::Exec { src, posted_ns, .. }
            | Ev::Step { src, posted_ns, .. }
            | Ev::Atomic { src, posted_ns, .. } => from_other(*src).then_some(*posted_ns),
            Ev::Arrive {
                delivery: Delivery::Request { from, .. },
                ..
            } => from_other(from.worker).then_some(from.posted_ns),
            _ => None,
        }
    }

    /// The node that sent a request or verb this event carries: a crash of it loses what
    /// had not reached its target yet ([`World::drop_from_crashed`]).
    fn source(&self, threads: u16) -> Option<NodeId> {
        let node = |w: u32| NodeId((w / threads as u32) as u16);
        match self {
            Ev::Exec { src, .. } | Ev::Step { src, .. } | Ev::Atomic { src, .. } => {
                Some(node(*src))
            }
            Ev::Arrive {
                delivery: Delivery::Request { from, .. },
                ..
            } => Some(node(from.worker)),
            _ => None,
        }
    }
}

/// What [`World::at_node`] made of an event.
enum AtNode {
    /// It happens now.
    Happens(Ev),
    /// It happens later, or never.
    Gone,
    /// Its sender was fenced and stopped.
    Refused(NodeId),
}

/// Link stalls are drawn per thousand messages.
const PERMILLE: u64 = 1000;

/// Torn verbs: how a NIC moves a multi-word READ or WRITE in steps.
struct Tear {
    chunk_words: u32,
    stall_ns_max: u64,
    rng: atoll_fabric::rng::Rng,
}

/// A one-sided verb at its target: who posted it and where its completion goes.
struct Verb {
    src: u32,
    slot: SlotId,
    index: u32,
    op: Op,
    posted_ns: u64,
}

struct Queued {
    at_ns: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Queued {
    fn eq(&self, o: &Self) -> bool {
        (self.at_ns, self.seq) == (o.at_ns, o.seq)
    }
}
impl Eq for Queued {}
impl PartialOrd for Queued {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Queued {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (self.at_ns, self.seq).cmp(&(o.at_ns, o.seq))
    }
}

#[derive(Default)]
struct WorkerState {
    inbox: VecDeque<Delivery>,
    /// The core's clock while it runs; advances with the CPU time it spends.
    clock_ns: u64,
    cpu_free_ns: u64,
    run_queued: bool,
    /// CPU time charged so far (the sum of its runs' clock advances).
    busy_ns: u64,
    /// CPU time receiving messages that arrived since it last ran (a kernel channel's
    /// receive path), charged at its next run.
    recv_due_ns: u64,
}

#[derive(Default)]
struct NodeState {
    tx_free_ns: u64,
    rx_free_ns: u64,
    /// The same for the channel to the instances of its own machine ([`islands`]).
    channel_tx_free_ns: u64,
    channel_rx_free_ns: u64,
    pauses: Vec<(u64, u64)>,
    /// Its freezes ([`Fault::Freeze`]), `[start, end)`.
    freezes: Vec<(u64, u64)>,
    /// Requests it held when it froze whose requesters timed out meanwhile, by (requesting
    /// worker, slot, op index, posted): the reply it still makes once it goes on is dropped.
    abandoned: std::collections::BTreeSet<(u32, u32, u32, u64)>,
    crashed_at: Option<u64>,
    /// Requests from other nodes this node received and has not answered yet, by
    /// (requesting worker, slot, op index), with when they were posted: if it crashes,
    /// each fails at its requester after the op timeout. Ordered, so a crash replays.
    /// The request's bytes ride along for the handler's CPU charge.
    serving: BTreeMap<(u32, u32, u32), (u64, u64)>,
    /// Its own log's last group ([`SimConfig::instance_log`]): when the write carrying it
    /// starts (appends before then join it) and when it is durable.
    log_group_start_ns: u64,
    log_group_end_ns: u64,
}

struct World {
    cfg: SimConfig,
    memory: ClusterMemory,
    now_ns: u64,
    seq: u64,
    events: u64,
    queue: BinaryHeap<Reverse<Queued>>,
    workers: Vec<WorkerState>,
    nodes: Vec<NodeState>,
    /// Latest delivery per (from, to) link, to keep each link FIFO.
    link_last_ns: Vec<u64>,
    spikes: Vec<(NodeId, NodeId, u64, u64, u64)>,
    qp_penalty_ns: u64,
    tear: Option<Tear>,
    /// Link stalls: (per mille, longest, draws).
    stall: Option<(u32, u64, atoll_fabric::rng::Rng)>,
    /// Per (from, to) link: a torn verb is under way, and the verbs that arrived behind it
    /// (a link executes its verbs in order, as an RC queue pair).
    link_busy: Vec<bool>,
    link_waiting: Vec<VecDeque<Verb>>,
    /// Per word that atomics reached: when its NIC is done with the last of them
    /// (`NetProfile::atomic_word_ns`). Words whose time has passed are pruned when the map
    /// reaches `atomic_prune_len`, so it holds about the words under contention.
    atomic_free_ns: HashMap<(NodeId, RegionId, u32), u64>,
    atomic_prune_len: usize,
    islands: Option<islands::IslandsState>,
}

/// Words the atomic model keeps before it first prunes the ones no longer busy.
const ATOMIC_WORDS_PRUNE_MIN: usize = 4096;

impl World {
    /// Index of the (from, to) link in the per-link tables.
    fn link(&self, from: NodeId, to: NodeId) -> usize {
        from.0 as usize * self.cfg.nodes as usize + to.0 as usize
    }

    /// Whether messages from `from` to `to` take the channel between instances of one
    /// machine rather than the network.
    fn on_channel(&self, from: NodeId, to: NodeId) -> bool {
        self.islands
            .as_ref()
            .is_some_and(|i| from != to && i.same_machine(from, to))
    }

    /// The profile of the link from `from` to `to`: the machine's channel or the network.
    fn link_net(&self, from: NodeId, to: NodeId) -> &NetProfile {
        match &self.islands {
            Some(i) if self.on_channel(from, to) => &i.model.channel,
            _ => &self.cfg.net,
        }
    }

    /// [`World::transmit`] of a message worker `w` receives: its receive path's CPU is due
    /// at its next run.
    fn deliver(
        &mut self,
        from: NodeId,
        to: NodeId,
        kind: VerbKind,
        bytes: u64,
        t: u64,
        w: u32,
    ) -> u64 {
        let at = self.transmit(from, to, kind, bytes, t);
        self.workers[w as usize].recv_due_ns += self.link_net(from, to).msg_cpu_ns;
        at
    }

    /// Executes a verb that reached the head of its link now: whole, with its completion
    /// sent back, or, when tearing applies, as the first of its steps (the link is busy
    /// until the last). Returns whether it tore.
    fn start_verb(&mut self, verb: Verb, at_turn: bool) -> bool {
        let Verb {
            src,
            slot,
            index,
            op,
            posted_ns,
        } = verb;
        let target = op.node();
        let src_node = self.node_of(src);
        if let (false, Op::Cas { ptr, .. } | Op::FetchAdd { ptr, .. }) = (at_turn, &op) {
            let start = self.atomic_turn(src_node, *ptr);
            if start > self.now_ns {
                // Its word is busy with earlier atomics: it waits its turn, and its link
                // with it (a queue pair executes in order).
                let link = self.link(src_node, target);
                self.link_busy[link] = true;
                self.push(
                    start,
                    Ev::Atomic {
                        src,
                        slot,
                        index,
                        op,
                        posted_ns,
                    },
                );
                return true;
            }
        }
        let words = match &op {
            Op::Read { len_words, .. } => *len_words,
            Op::Write { data, .. } => data.len() as u32,
            _ => 0,
        };
        let now = self.now_ns;
        if self.tear.as_ref().is_some_and(|t| words > t.chunk_words) {
            let link = self.link(src_node, target);
            self.link_busy[link] = true;
            let buf = match &op {
                Op::Read { len_words, .. } => Words::from_elem(0, *len_words as usize),
                _ => Words::new(),
            };
            self.push(
                now,
                Ev::Step {
                    src,
                    slot,
                    index,
                    op,
                    posted_ns,
                    at_word: 0,
                    buf,
                },
            );
            return true;
        }
        let kind = op.kind();
        let c = execute_one_sided(&self.memory[target.0 as usize], op);
        let at = self.deliver(target, src_node, kind, c.reply_bytes(), now, src);
        self.push(
            at,
            Ev::Arrive {
                w: src,
                delivery: Delivery::Completion {
                    slot,
                    index,
                    completion: c,
                },
                by: (target != src_node).then_some(target),
            },
        );
        false
    }

    /// When an atomic reaching `ptr` now starts: at once, or after the atomics already
    /// queued on its word, each of which holds it `atomic_word_ns`.
    fn atomic_turn(&mut self, from: NodeId, ptr: RemotePtr) -> u64 {
        let now = self.now_ns;
        let ns = self.link_net(from, ptr.node).atomic_word_ns;
        if ns == 0 {
            return now;
        }
        if self.atomic_free_ns.len() >= self.atomic_prune_len {
            self.atomic_free_ns.retain(|_, &mut free| free > now);
            self.atomic_prune_len = (self.atomic_free_ns.len() * 2).max(ATOMIC_WORDS_PRUNE_MIN);
        }
        let free = self
            .atomic_free_ns
            .entry((ptr.node, ptr.region, ptr.offset_words))
            .or_insert(0);
        let start = (*free).max(now);
        *free = start + ns;
        start
    }

    /// Frees `link` from the verb that held it: the verbs queued behind it go now, in their
    /// order, before any verb that reaches the link later (until one of them holds it).
    fn release_link(&mut self, link: usize) {
        self.link_busy[link] = false;
        while let Some(verb) = self.link_waiting[link].pop_front() {
            if self.start_verb(verb, false) {
                break;
            }
        }
    }

    /// Completes op `index` of `src`'s doorbell `slot` with a timeout: `node` failed before
    /// answering it. It fails `op_timeout_ns` after it was posted, or now if that has passed.
    fn fail_later(&mut self, src: u32, slot: SlotId, index: u32, node: NodeId, posted_ns: u64) {
        let at = (posted_ns + self.cfg.op_timeout_ns).max(self.now_ns);
        let completion = Completion::Failed(OpError {
            node,
            kind: FailureKind::TimedOut,
        });
        self.push(
            at,
            Ev::Arrive {
                w: src,
                delivery: Delivery::Completion {
                    slot,
                    index,
                    completion,
                },
                by: None,
            },
        );
    }

    /// `ev`, at `node`, unless a crash swallows it: `node` crashed
    /// ([`World::drop_at_crashed`]), or the node that sent it ([`World::drop_from_crashed`]).
    fn past_crashes(&mut self, node: NodeId, ev: Ev) -> Option<Ev> {
        if self.nodes[node.0 as usize].crashed_at.is_some() {
            self.drop_at_crashed(ev);
            return None;
        }
        if let Some(src) = ev.source(self.cfg.threads_per_node) {
            if self.nodes[src.0 as usize].crashed_at.is_some() {
                self.drop_from_crashed(ev);
                return None;
            }
        }
        Some(ev)
    }

    /// A request or verb of a crashed node had not reached its target when the node crashed:
    /// its NIC stopped with it, so it is lost, and a torn WRITE stays torn where its steps
    /// stopped (a record whole at one backup may be missing at another). No one waits on
    /// its completion; the verbs queued behind it on its link are lost as well.
    fn drop_from_crashed(&mut self, ev: Ev) {
        if let Ev::Step { src, op, .. } | Ev::Atomic { src, op, .. } = ev {
            let link = self.link(self.node_of(src), op.node());
            self.link_busy[link] = false;
            self.link_waiting[link].clear();
        }
    }

    /// An event reached a crashed node: it never happens, and an op it carried fails at its
    /// source after the timeout (with the verbs queued behind it on its link, if it tore).
    fn drop_at_crashed(&mut self, ev: Ev) {
        match ev {
            Ev::Arrive {
                delivery: Delivery::Request { from, node, .. },
                ..
            } => self.fail_later(from.worker, from.slot, from.index, node, from.posted_ns),
            Ev::Exec {
                src,
                slot,
                index,
                op,
                posted_ns,
                ..
            } => self.fail_later(src, slot, index, op.node(), posted_ns),
            Ev::Step {
                src,
                slot,
                index,
                op,
                posted_ns,
                ..
            }
            | Ev::Atomic {
                src,
                slot,
                index,
                op,
                posted_ns,
            } => {
                let target = op.node();
                self.fail_later(src, slot, index, target, posted_ns);
                let link = self.link(self.node_of(src), target);
                self.link_busy[link] = false;
                while let Some(v) = self.link_waiting[link].pop_front() {
                    let node = v.op.node();
                    self.fail_later(v.src, v.slot, v.index, node, v.posted_ns);
                }
            }
            // Its own workers stop; completions for them are moot.
            Ev::Run { .. }
            | Ev::Arrive { .. }
            | Ev::Crash { .. }
            | Ev::Freeze { .. }
            | Ev::Send { .. } => {}
        }
    }

    fn push(&mut self, at_ns: u64, ev: Ev) {
        debug_assert!(
            at_ns >= self.now_ns,
            "event scheduled in the past: {at_ns} < {}",
            self.now_ns
        );
        self.seq += 1;
        self.queue.push(Reverse(Queued {
            at_ns,
            seq: self.seq,
            ev,
        }));
    }

    fn node_of(&self, w: u32) -> NodeId {
        NodeId((w / self.cfg.threads_per_node as u32) as u16)
    }

    /// The worker of `node` that serves requests from a worker with thread index `thread`.
    fn serving_worker(&self, node: NodeId, thread: u16) -> u32 {
        let t = self.cfg.threads_per_node;
        node.0 as u32 * t as u32 + (thread % t) as u32
    }

    fn schedule_run(&mut self, w: u32, at_ns: u64) {
        let ws = &mut self.workers[w as usize];
        if !ws.run_queued {
            ws.run_queued = true;
            let at = at_ns.max(ws.cpu_free_ns).max(self.now_ns);
            self.push(at, Ev::Run { w });
        }
    }

    /// Moves `bytes` from one node to another starting at `t`; returns when the target's
    /// NIC has received it.
    fn transmit(&mut self, from: NodeId, to: NodeId, kind: VerbKind, bytes: u64, t: u64) -> u64 {
        let channel = self.on_channel(from, to);
        let net = self.link_net(from, to);
        let svc = net.service_ns(bytes);
        let half_rtt_ns = net.rtt_ns[kind as usize] / 2;
        // The channel inside a machine has no NIC connections to cache.
        let qp_ns = if channel { 0 } else { self.qp_penalty_ns };
        let src = &mut self.nodes[from.0 as usize];
        let tx_free = if channel {
            &mut src.channel_tx_free_ns
        } else {
            &mut src.tx_free_ns
        };
        let depart = t.max(*tx_free);
        *tx_free = depart + svc;
        let spike: u64 = self
            .spikes
            .iter()
            .filter(|(f, to_, s, e, _)| *f == from && *to_ == to && (*s..*e).contains(&depart))
            .map(|s| s.4)
            .sum();
        let stall = match &mut self.stall {
            Some((permille, ns_max, rng)) => {
                if rng.below(PERMILLE) < *permille as u64 {
                    rng.below(*ns_max + 1)
                } else {
                    0
                }
            }
            None => 0,
        };
        let arrive = depart + svc + half_rtt_ns + spike + stall + qp_ns;
        let dst = &mut self.nodes[to.0 as usize];
        let rx_free = if channel {
            &mut dst.channel_rx_free_ns
        } else {
            &mut dst.rx_free_ns
        };
        let received = arrive.max(*rx_free) + svc;
        *rx_free = received;
        let link = self.link(from, to);
        let received = received.max(self.link_last_ns[link]);
        self.link_last_ns[link] = received;
        received
    }

    /// A message a core handed its NIC now crosses the link; what it carries happens when
    /// it arrives (a delivery charges its receiver's side of the channel).
    fn on_send(&mut self, from: NodeId, to: NodeId, kind: VerbKind, bytes: u64, then: Ev) {
        let now = self.now_ns;
        let at = match then {
            Ev::Arrive { w, .. } => self.deliver(from, to, kind, bytes, now, w),
            _ => self.transmit(from, to, kind, bytes, now),
        };
        self.push(at, then);
    }

    /// CPU of an own-node op `posted` by worker `w` of `node`: serving it when it was a
    /// request, else a local access (and, with islands, its socket hops and line transfer).
    fn own_node_ns(
        &mut self,
        w: u32,
        node: NodeId,
        posted: &Posted,
        access: Option<(RemotePtr, bool)>,
        req_bytes: u64,
    ) -> u64 {
        let cpu = &self.cfg.cpu;
        match posted {
            Posted::Done(Completion::Rpc(reply)) => cpu.handler_ns(req_bytes + reply.len() as u64),
            Posted::Held => cpu.handler_ns(req_bytes),
            _ => {
                let far = match (self.islands.as_mut(), access) {
                    (Some(i), Some((ptr, write))) => i.access_ns(w, node, ptr, write),
                    _ => 0,
                };
                cpu.local_op_ns + far
            }
        }
    }

    /// What becomes of event `ev` (queued at `at_ns`, `seq`) at `node` before it happens: swallowed by a crash
    /// ([`World::past_crashes`]); refused by the node's fence, its sender stopped at once
    /// (an evicted machine reboots) losing what it had not delivered; given up by its
    /// requester while the node stands frozen, or deferred with its place in line to the
    /// end of a freeze or pause (so a link stays in order across it).
    fn at_node(
        &mut self,
        node: NodeId,
        at_ns: u64,
        seq: u64,
        ev: Ev,
        handlers: &[Arc<dyn RpcHandler>],
    ) -> AtNode {
        let threads = self.cfg.threads_per_node;
        let Some(ev) = self.past_crashes(node, ev) else {
            return AtNode::Gone;
        };
        if let Some(src) = ev.source(threads) {
            if src != node && handlers[node.0 as usize].refuses(src) {
                self.on_crash(src, at_ns);
                self.drop_from_crashed(ev);
                return AtNode::Refused(src);
            }
        }
        if let Ev::Arrive {
            w,
            delivery: Delivery::Completion { slot, index, .. },
            by: Some(by),
        } = ev
        {
            if handlers[node.0 as usize].refuses(by) {
                // An answer from a node this one holds dead (a frozen node serving, once it
                // goes on, what was posted to it shortly before it was found dead): the op
                // fails as one to a dead node does, and the answering node stops.
                let failed = Delivery::Completion {
                    slot,
                    index,
                    completion: Completion::Failed(OpError {
                        node: by,
                        kind: FailureKind::Unreachable,
                    }),
                };
                self.push(
                    at_ns,
                    Ev::Arrive {
                        w,
                        delivery: failed,
                        by: None,
                    },
                );
                if self.nodes[by.0 as usize].crashed_at.is_some() {
                    return AtNode::Gone;
                }
                self.on_crash(by, at_ns);
                return AtNode::Refused(by);
            }
        }
        let resume = match self.frozen_until(node, at_ns) {
            Some(resume) => {
                let posted = ev.foreign_op_posted_ns(node, threads);
                if posted.is_some_and(|p| p.saturating_add(self.cfg.op_timeout_ns) < resume) {
                    self.drop_at_crashed(ev);
                    return AtNode::Gone;
                }
                resume
            }
            None => match self.paused_until(node, at_ns) {
                Some(resume) => resume,
                None => return AtNode::Happens(ev),
            },
        };
        self.queue.push(Reverse(Queued {
            at_ns: resume,
            seq,
            ev,
        }));
        AtNode::Gone
    }

    /// End of the freeze covering `t` on `node`, if any.
    fn frozen_until(&self, node: NodeId, t: u64) -> Option<u64> {
        self.nodes[node.0 as usize]
            .freezes
            .iter()
            .filter(|(s, e)| (*s..*e).contains(&t))
            .map(|(_, e)| *e)
            .max()
    }

    /// `node` freezes at `at_ns` (unless it crashed): each request it holds whose
    /// requester times out before the freeze ends fails there, and the reply it makes once
    /// it goes on is dropped.
    fn on_freeze(&mut self, node: NodeId, at_ns: u64) {
        if self.nodes[node.0 as usize].crashed_at.is_some() {
            return;
        }
        let end_ns = self.frozen_until(node, at_ns).unwrap_or(at_ns);
        let timeout_ns = self.cfg.op_timeout_ns;
        let held: Vec<((u32, u32, u32), u64)> = self.nodes[node.0 as usize]
            .serving
            .iter()
            .filter(|(_, &(posted_ns, _))| posted_ns.saturating_add(timeout_ns) < end_ns)
            .map(|(&k, &(posted_ns, _))| (k, posted_ns))
            .collect();
        for ((w, slot, index), posted_ns) in held {
            let n = &mut self.nodes[node.0 as usize];
            n.serving.remove(&(w, slot, index));
            n.abandoned.insert((w, slot, index, posted_ns));
            self.fail_later(w, SlotId(slot), index, node, posted_ns);
        }
        // One its workers had not begun is never served; one its handler holds may still
        // change its state when answered (the reply is dropped).
        let t = self.cfg.threads_per_node as usize;
        for w in node.0 as usize * t..(node.0 as usize + 1) * t {
            let (workers, nodes) = (&mut self.workers, &mut self.nodes);
            workers[w].inbox.retain(|d| match d {
                Delivery::Request { from, .. } => !nodes[node.0 as usize].abandoned.remove(&(
                    from.worker,
                    from.slot.0,
                    from.index,
                    from.posted_ns,
                )),
                _ => true,
            });
        }
    }

    /// End of the pause covering `t` on `node`, if any.
    fn paused_until(&self, node: NodeId, t: u64) -> Option<u64> {
        self.nodes[node.0 as usize]
            .pauses
            .iter()
            .filter(|(s, e)| (*s..*e).contains(&t))
            .map(|(_, e)| *e)
            .max()
    }
}

struct SimTransport {
    world: Rc<RefCell<World>>,
    w: u32,
    node: NodeId,
    thread: u16,
    /// This node's own memory and handler: own-node ops run on its CPU at once.
    memory: Arc<NodeMemory>,
    handler: Arc<dyn RpcHandler>,
    /// The node sharing this one's machine, and its memory: one-sided ops to it run on
    /// this CPU at once too (its RPCs still go to its CPU over the network).
    peer: Option<(NodeId, Arc<NodeMemory>)>,
}

impl Transport for SimTransport {
    fn now_ns(&self) -> u64 {
        self.world.borrow().workers[self.w as usize].clock_ns
    }

    fn post(&self, slot: SlotId, index: u32, op: Op) -> Posted {
        if let Some((peer, mem)) = &self.peer {
            let up = || {
                self.world.borrow().nodes[peer.0 as usize]
                    .crashed_at
                    .is_none()
            };
            if op.node() == *peer && !matches!(op, Op::Rpc { .. }) && up() {
                // The machine's own memory: a local access (a crashed peer's machine is
                // gone, and its ops fail over the network's path).
                let c = atoll_fabric::verbs::execute_one_sided(mem, op);
                let mut wd = self.world.borrow_mut();
                let ns = wd.cfg.cpu.local_op_ns;
                wd.workers[self.w as usize].clock_ns += ns;
                return Posted::Done(c);
            }
        }
        if op.node() == self.node {
            // A simulated node's NIC is coherent with its CPU: the CPU accesses its own
            // memory (or calls its own handler) at once, at the cost of a local access, or
            // of serving the request (an own-node RPC runs the same handler as a remote
            // one; charging it one local access would make a batch of many records nearly
            // free next to the same records accessed one-sided). A held request's reply is
            // never delayed (posted_ns 0); its handler is charged when it answers.
            let from = ReplyTo {
                worker: self.w,
                slot,
                index,
                posted_ns: 0,
            };
            let req_bytes = match &op {
                Op::Rpc { req, .. } => req.len() as u64,
                _ => 0,
            };
            // Where a one-sided op lands, for the islands' memory model.
            let access = match &op {
                Op::Read { ptr, .. } => Some((*ptr, false)),
                Op::Write { ptr, .. } | Op::Cas { ptr, .. } | Op::FetchAdd { ptr, .. } => {
                    Some((*ptr, true))
                }
                Op::Rpc { .. } => None,
            };
            let posted = execute_local(&self.memory, self.handler.as_ref(), from, op);
            let mut wd = self.world.borrow_mut();
            let ns = wd.own_node_ns(self.w, self.node, &posted, access, req_bytes);
            wd.workers[self.w as usize].clock_ns += ns;
            return posted;
        }
        let mut wd = self.world.borrow_mut();
        let to = op.node();
        // Posting, and a kernel channel's send path.
        let send_ns = wd.cfg.cpu.post_ns + wd.link_net(self.node, to).msg_cpu_ns;
        wd.workers[self.w as usize].clock_ns += send_ns;
        let t = wd.workers[self.w as usize].clock_ns;
        let kind = op.kind();
        let bytes = op.request_bytes();
        let then = match op {
            Op::Rpc { node, req } => {
                let tw = wd.serving_worker(node, self.thread);
                let from = ReplyTo {
                    worker: self.w,
                    slot,
                    index,
                    posted_ns: t,
                };
                Ev::Arrive {
                    w: tw,
                    delivery: Delivery::Request { from, node, req },
                    by: None,
                }
            }
            op => Ev::Exec {
                src: self.w,
                slot,
                index,
                op,
                posted_ns: t,
                cpu_reserved: false,
            },
        };
        wd.push(
            t,
            Ev::Send {
                from: self.node,
                to,
                kind,
                bytes,
                then: Box::new(then),
            },
        );
        Posted::Pending
    }

    fn reads_whole(&self) -> bool {
        // Without tearing, a verb executes at one instant of virtual time.
        self.world.borrow().tear.is_none()
    }

    fn instance_log_model(&self, bytes: u64) -> Option<atoll_fabric::LogWait> {
        let mut wd = self.world.borrow_mut();
        let device = wd.cfg.instance_log?;
        let now = wd.workers[self.w as usize].clock_ns;
        let node = &mut wd.nodes[self.node.0 as usize];
        if now < node.log_group_start_ns {
            // A group gathers behind the write under way: the record rides in its write.
            return Some(atoll_fabric::LogWait {
                wait_ns: node.log_group_end_ns - now,
                led: false,
            });
        }
        // A new group, written once the write under way (if any) ends. Its first appender
        // pays the write's CPU now (the real leader pays it when the group starts: the same
        // CPU, a little earlier).
        let start = now.max(node.log_group_end_ns);
        let end = start + device.write_ns(bytes) + device.sync_ns;
        node.log_group_start_ns = start;
        node.log_group_end_ns = end;
        let cpu = device.write_ns(bytes);
        wd.workers[self.w as usize].clock_ns += cpu;
        Some(atoll_fabric::LogWait {
            wait_ns: end.saturating_sub(now + cpu),
            led: true,
        })
    }

    fn post_timer(&self, slot: SlotId, delay_ns: u64) {
        let mut wd = self.world.borrow_mut();
        let at = wd.workers[self.w as usize].clock_ns + delay_ns;
        let delivery = Delivery::Completion {
            slot,
            index: 0,
            completion: Completion::Timer,
        };
        wd.push(
            at,
            Ev::Arrive {
                w: self.w,
                delivery,
                by: None,
            },
        );
    }

    fn compute(&self, ns: u64) -> bool {
        // The core is busy: its clock moves on and nothing else runs on it meanwhile.
        self.world.borrow_mut().workers[self.w as usize].clock_ns += ns;
        true
    }

    fn local_work_ns(&self, accesses: u64, bytes: u64) -> u64 {
        // Priced as a handler's work on the same memory: its accesses and its copying.
        let wd = self.world.borrow();
        let cpu = &wd.cfg.cpu;
        accesses * cpu.local_op_ns + (bytes as f64 * cpu.rpc_handler_ns_per_byte) as u64
    }

    fn on_switch(&self) {
        let mut wd = self.world.borrow_mut();
        wd.workers[self.w as usize].clock_ns += wd.cfg.cpu.switch_ns;
    }

    fn poll(&self, sink: &mut dyn FnMut(Delivery)) {
        // One at a time: serving a request calls `reply`, which needs the world again.
        loop {
            let d = self.world.borrow_mut().workers[self.w as usize]
                .inbox
                .pop_front();
            match d {
                Some(d) => sink(d),
                None => break,
            }
        }
    }

    fn reply(&self, to: ReplyTo, reply: Vec<u8>) {
        let mut wd = self.world.borrow_mut();
        let node = self.node.0 as usize;
        // A held request of this node's own co-routine was never in `serving`: its request
        // bytes were charged when the handler first saw it.
        if wd.nodes[node]
            .abandoned
            .remove(&(to.worker, to.slot.0, to.index, to.posted_ns))
        {
            // Its requester gave it up while this node stood frozen.
            return;
        }
        let req_bytes = wd.nodes[node]
            .serving
            .remove(&(to.worker, to.slot.0, to.index))
            .map_or(0, |(_, bytes)| bytes);
        let dst = wd.node_of(to.worker);
        let handler_ns = wd.cfg.cpu.handler_ns(req_bytes + reply.len() as u64);
        let send_ns = if dst == self.node {
            0
        } else {
            wd.link_net(self.node, dst).msg_cpu_ns
        };
        wd.workers[self.w as usize].clock_ns += handler_ns + send_ns;
        let t = wd.workers[self.w as usize].clock_ns;
        let bytes = reply.len() as u64;
        let arrive = Ev::Arrive {
            w: to.worker,
            delivery: Delivery::Completion {
                slot: to.slot,
                index: to.index,
                completion: Completion::Rpc(reply),
            },
            by: (dst != self.node).then_some(self.node),
        };
        // A held local request is answered without the network.
        let ev = if dst == self.node {
            arrive
        } else {
            Ev::Send {
                from: self.node,
                to: dst,
                kind: VerbKind::Rpc,
                bytes,
                then: Box::new(arrive),
            }
        };
        wd.push(t, ev);
    }
}

/// Runs a simulated cluster until every co-routine has finished (or nothing is left to
/// happen). `handlers[n]` serves node `n`'s RPCs.
pub fn run(
    cfg: &SimConfig,
    setups: &[NodeSetup],
    directory: &NodeDirectory,
    spawn: &Spawner<'_>,
) -> SimReport {
    atoll_fabric::core::assert_cluster_shape(cfg.nodes, setups, directory);
    // Peers' memory, reached in this process as a NIC reaches it by the directory's keys
    // (which the in-process and simulated NICs need not check: they are the same memory).
    let memory: ClusterMemory = setups
        .iter()
        .map(|s| s.memory.clone())
        .collect::<Vec<_>>()
        .into();
    // Each node's fence, asked of every op reaching it from a peer.
    let handlers: Vec<Arc<dyn RpcHandler>> = setups.iter().map(|s| s.handler.clone()).collect();
    let world = Rc::new(RefCell::new(World::new(cfg, memory.clone())));
    let mut execs = executors(cfg, &world, &memory, setups, spawn);
    let workers = execs.len();
    for w in 0..workers as u32 {
        world.borrow_mut().schedule_run(w, 0);
    }
    let mut live: usize = execs.iter().map(|e| e.live_tasks()).sum();
    let mut crashed = Vec::new();
    let mut end_ns = 0;
    // Bounded by the events the co-routines generate: it ends when all finished or when
    // nothing is left to happen.
    let mut polled_ns = 0;
    while live > 0 {
        let Some(Reverse(mut q)) = world.borrow_mut().queue.pop() else {
            break;
        };
        if q.at_ns > polled_ns + cfg.idle_limit_ns.max(HUNG_AFTER_NS_MIN) {
            break;
        }
        let mut wd = world.borrow_mut();
        wd.now_ns = q.at_ns;
        wd.events += 1;
        if let Some(node) = q.ev.node(cfg.threads_per_node) {
            match wd.at_node(node, q.at_ns, q.seq, q.ev, &handlers) {
                AtNode::Happens(ev) => q.ev = ev,
                AtNode::Gone => continue,
                AtNode::Refused(src) => {
                    crashed.push((src, q.at_ns));
                    continue;
                }
            }
        }
        match q.ev {
            Ev::Crash { node } => {
                wd.on_crash(node, q.at_ns);
                crashed.push((node, q.at_ns));
            }
            Ev::Freeze { node } => wd.on_freeze(node, q.at_ns),
            Ev::Send {
                from,
                to,
                kind,
                bytes,
                then,
            } => {
                wd.on_send(from, to, kind, bytes, *then);
            }
            Ev::Arrive { w, delivery, .. } => wd.on_arrive(w, delivery),
            Ev::Exec {
                src,
                slot,
                index,
                op,
                posted_ns,
                cpu_reserved,
            } => wd.on_exec(
                Verb {
                    src,
                    slot,
                    index,
                    op,
                    posted_ns,
                },
                cpu_reserved,
            ),
            Ev::Step {
                src,
                slot,
                index,
                op,
                posted_ns,
                at_word,
                buf,
            } => wd.on_step(
                Verb {
                    src,
                    slot,
                    index,
                    op,
                    posted_ns,
                },
                at_word,
                buf,
            ),
            Ev::Atomic {
                src,
                slot,
                index,
                op,
                posted_ns,
            } => {
                let link = wd.link(wd.node_of(src), op.node());
                let verb = Verb {
                    src,
                    slot,
                    index,
                    op,
                    posted_ns,
                };
                wd.start_verb(verb, true);
                wd.release_link(link);
            }
            Ev::Run { w } => {
                drop(wd);
                let ran = run_worker(&world, &mut execs[w as usize], w, q.at_ns);
                live -= ran.finished;
                if ran.polled {
                    polled_ns = q.at_ns;
                }
                end_ns = end_ns.max(ran.clock_ns);
            }
        }
    }
    let wd = world.borrow();
    report(&wd, &execs, crashed, live, end_ns)
}

/// One worker per simulated thread, its transport on the shared world, its co-routines from
/// `spawn`.
fn executors(
    cfg: &SimConfig,
    world: &Rc<RefCell<World>>,
    memory: &ClusterMemory,
    setups: &[NodeSetup],
    spawn: &Spawner<'_>,
) -> Vec<Executor> {
    let workers = cfg.nodes as usize * cfg.threads_per_node as usize;
    (0..workers)
        .map(|w| {
            let id = WorkerId {
                node: NodeId((w / cfg.threads_per_node as usize) as u16),
                thread: (w % cfg.threads_per_node as usize) as u16,
            };
            let own = memory[id.node.0 as usize].clone();
            let handler = setups[id.node.0 as usize].handler.clone();
            let peer = atoll_fabric::ids::machine_peer(&cfg.machine_pairs, id.node)
                .map(|p| (p, memory[p.0 as usize].clone()));
            let transport = SimTransport {
                world: world.clone(),
                w: w as u32,
                node: id.node,
                thread: id.thread,
                memory: own.clone(),
                handler: handler.clone(),
                peer,
            };
            let core = WorkerCore::new(id, w as u32, own, handler, Box::new(transport));
            core.set_machine_peer(atoll_fabric::ids::machine_peer(&cfg.machine_pairs, id.node));
            let tasks = spawn(&core);
            Executor::new(core, tasks)
        })
        .collect()
}

/// What one turn of a worker's event loop did.
struct Ran {
    /// Co-routines that finished in it.
    finished: usize,
    /// Whether any co-routine was polled (progress, not a hang).
    polled: bool,
    /// The worker's clock after it.
    clock_ns: u64,
}

/// A turn of worker `w`'s event loop at `at_ns` (or when its core is free): completions and
/// requests handled, ready co-routines polled, the CPU time charged, the next turn scheduled.
fn run_worker(world: &Rc<RefCell<World>>, e: &mut Executor, w: u32, at_ns: u64) -> Ran {
    let run_start_ns = {
        let mut wd = world.borrow_mut();
        let wd = &mut *wd;
        let ws = &mut wd.workers[w as usize];
        ws.run_queued = false;
        let start = at_ns.max(ws.cpu_free_ns);
        ws.clock_ns = start;
        // What arrived over a kernel channel, and the OS moving an unbound thread, took
        // this core's time before the turn.
        ws.clock_ns += std::mem::take(&mut ws.recv_due_ns);
        if let Some(i) = wd.islands.as_mut() {
            ws.clock_ns += i.migrations_ns(w, ws.clock_ns);
        }
        start
    };
    let before = e.live_tasks();
    e.core().progress();
    let polled = e.run_ready() > 0;
    let after = e.live_tasks();
    let more = e.core().has_ready();
    let holding = e.core().deferred_waiting();
    let mut wd = world.borrow_mut();
    let clock = wd.workers[w as usize].clock_ns;
    wd.workers[w as usize].busy_ns += clock - run_start_ns;
    wd.workers[w as usize].cpu_free_ns = clock;
    if more || !wd.workers[w as usize].inbox.is_empty() {
        wd.schedule_run(w, clock);
    } else if holding {
        // A real event loop spins over its waiting list; poll it periodically.
        wd.schedule_run(w, clock + DEFERRED_POLL_NS);
    }
    Ran {
        finished: before - after,
        polled,
        clock_ns: clock,
    }
}

/// What the run leaves: each worker's counters, virtual time, events, busy cores, and the
/// co-routines left unfinished (a hang) apart from those a crash stopped.
fn report(
    wd: &World,
    execs: &[Executor],
    crashed: Vec<(NodeId, u64)>,
    live: usize,
    end_ns: u64,
) -> SimReport {
    // A crashed node's co-routines stop where they were: count them apart from a hang.
    let stopped = |node: NodeId| -> usize {
        execs
            .iter()
            .filter(|e| e.core().id.node == node)
            .map(|e| e.live_tasks())
            .sum()
    };
    let crashed: Vec<(NodeId, u64, usize)> = crashed
        .into_iter()
        .map(|(node, at_ns)| (node, at_ns, stopped(node)))
        .collect();
    let unfinished = live - crashed.iter().map(|c| c.2).sum::<usize>();
    SimReport {
        workers: execs
            .iter()
            .map(|e| WorkerReport {
                id: e.core().id,
                counters: e.core().counters(),
            })
            .collect(),
        virtual_ns: end_ns,
        events: wd.events,
        cpu_busy_ns: wd.workers.iter().map(|w| w.busy_ns).collect(),
        unfinished,
        crashed,
    }
}

impl World {
    /// The world of a run of `cfg`, its faults in place: spikes, pauses, crashes (a machine
    /// crashes whole), tearing and stalls.
    fn new(cfg: &SimConfig, memory: ClusterMemory) -> World {
        let workers = cfg.nodes as usize * cfg.threads_per_node as usize;
        let peers = (cfg.nodes as u32 - 1) * cfg.threads_per_node as u32;
        let mut nodes: Vec<NodeState> = (0..cfg.nodes).map(|_| NodeState::default()).collect();
        let mut spikes = Vec::new();
        let mut crashes = Vec::new();
        let mut freezes = Vec::new();
        let mut tear = None;
        let mut stall = None;
        for f in &cfg.faults {
            match *f {
                Fault::Spike {
                    from,
                    to,
                    start_ns,
                    end_ns,
                    extra_ns,
                } => spikes.push((from, to, start_ns, end_ns, extra_ns)),
                Fault::Pause {
                    node,
                    start_ns,
                    end_ns,
                } => nodes[node.0 as usize].pauses.push((start_ns, end_ns)),
                Fault::Freeze {
                    node,
                    start_ns,
                    end_ns,
                } => {
                    nodes[node.0 as usize].freezes.push((start_ns, end_ns));
                    freezes.push((node, start_ns));
                }
                Fault::Crash { node, at_ns } => {
                    crashes.push((node, at_ns));
                    // A machine crashes whole: the node sharing it goes down at the same instant.
                    if let Some(peer) = atoll_fabric::ids::machine_peer(&cfg.machine_pairs, node) {
                        crashes.push((peer, at_ns));
                    }
                }
                Fault::Tear {
                    chunk_words,
                    stall_ns_max,
                    seed,
                } => {
                    tear = Some(Tear {
                        chunk_words: chunk_words.max(1),
                        stall_ns_max,
                        rng: atoll_fabric::rng::Rng::new(seed),
                    })
                }
                Fault::Stall {
                    permille,
                    stall_ns_max,
                    seed,
                } => stall = Some((permille, stall_ns_max, atoll_fabric::rng::Rng::new(seed))),
            }
        }
        if let Some((i, _)) = &cfg.islands {
            assert_eq!(
                (i.placement.nodes(), i.placement.threads_per_node),
                (cfg.nodes, cfg.threads_per_node),
                "the islands' placement and the simulated cluster's shape differ"
            );
        }
        let links = cfg.nodes as usize * cfg.nodes as usize;
        let mut world = World {
            memory,
            now_ns: 0,
            seq: 0,
            events: 0,
            queue: BinaryHeap::new(),
            workers: (0..workers).map(|_| WorkerState::default()).collect(),
            link_last_ns: vec![0; links],
            nodes,
            spikes,
            qp_penalty_ns: cfg.net.qp_penalty_ns(peers),
            tear,
            stall,
            link_busy: vec![false; links],
            link_waiting: (0..links).map(|_| VecDeque::new()).collect(),
            atomic_free_ns: HashMap::new(),
            atomic_prune_len: ATOMIC_WORDS_PRUNE_MIN,
            islands: cfg
                .islands
                .as_ref()
                .map(|(model, seed)| islands::IslandsState::new(model.clone(), *seed)),
            cfg: cfg.clone(),
        };
        for (node, at_ns) in crashes {
            world.push(at_ns, Ev::Crash { node });
        }
        for (node, at_ns) in freezes {
            world.push(at_ns, Ev::Freeze { node });
        }
        world
    }

    /// `node` crashes: requests it received and never answered (queued, or held by its
    /// handler) fail at their requesters; its own co-routines stop where they are.
    fn on_crash(&mut self, node: NodeId, at_ns: u64) {
        self.nodes[node.0 as usize].crashed_at = Some(at_ns);
        let serving = std::mem::take(&mut self.nodes[node.0 as usize].serving);
        for ((w, slot, index), (posted_ns, _)) in serving {
            self.fail_later(w, SlotId(slot), index, node, posted_ns);
        }
        let t = self.cfg.threads_per_node as usize;
        for w in node.0 as usize * t..(node.0 as usize + 1) * t {
            self.workers[w].inbox.clear();
        }
    }

    /// A delivery reaches worker `w`'s inbox (a request is held as being served by its node
    /// until answered), and the worker is scheduled.
    fn on_arrive(&mut self, w: u32, delivery: Delivery) {
        if let Delivery::Request { from, req, .. } = &delivery {
            let node = self.node_of(w).0 as usize;
            self.nodes[node].serving.insert(
                (from.worker, from.slot.0, from.index),
                (from.posted_ns, req.len() as u64),
            );
        }
        self.workers[w as usize].inbox.push_back(delivery);
        let now = self.now_ns;
        self.schedule_run(w, now);
    }

    /// A one-sided verb reaches its target: without RDMA the target's CPU performs it first
    /// (as a small request); behind a torn verb on the same link it waits its turn.
    fn on_exec(&mut self, verb: Verb, cpu_reserved: bool) {
        let target = verb.op.node();
        let src_node = self.node_of(verb.src);
        if !self.link_net(src_node, target).one_sided_in_nic && !cpu_reserved {
            // No RDMA: the target's CPU receives the op and performs it like a small
            // request.
            let threads = self.cfg.threads_per_node as u32;
            let tw = self.serving_worker(target, (verb.src % threads) as u16);
            let start = self.now_ns.max(self.workers[tw as usize].cpu_free_ns);
            let recv_ns = self.link_net(src_node, target).msg_cpu_ns;
            let done = start + self.cfg.cpu.rpc_handler_ns + recv_ns;
            self.workers[tw as usize].cpu_free_ns = done;
            let Verb {
                src,
                slot,
                index,
                op,
                posted_ns,
            } = verb;
            self.push(
                done,
                Ev::Exec {
                    src,
                    slot,
                    index,
                    op,
                    posted_ns,
                    cpu_reserved: true,
                },
            );
            return;
        }
        let link = self.link(self.node_of(verb.src), target);
        if self.link_busy[link] {
            // Behind a torn verb on the same link: runs when it is done.
            self.link_waiting[link].push_back(verb);
        } else {
            self.start_verb(verb, false);
        }
    }

    /// The next chunk of a torn READ or WRITE moves; after the last, its completion is sent
    /// back and the link is released.
    fn on_step(&mut self, verb: Verb, at_word: u32, mut buf: Words) {
        let Verb {
            src,
            slot,
            index,
            op,
            posted_ns,
        } = verb;
        let target = op.node();
        let tear = self.tear.as_ref().expect("torn steps only with tearing on");
        let chunk = tear.chunk_words;
        let (ptr, total) = match &op {
            Op::Read { ptr, len_words } => (*ptr, *len_words),
            Op::Write { ptr, data } => (*ptr, data.len() as u32),
            _ => unreachable!("only READs and WRITEs are torn"),
        };
        let end = (at_word + chunk).min(total);
        let region = self.memory[target.0 as usize].region(ptr.region);
        let off = (ptr.offset_words + at_word) as usize;
        match &op {
            Op::Read { .. } => region.read_into(off, &mut buf[at_word as usize..end as usize]),
            Op::Write { data, .. } => region.write_from(off, &data[at_word as usize..end as usize]),
            _ => unreachable!("only READs and WRITEs are torn"),
        }
        let now = self.now_ns;
        if end < total {
            let bandwidth = self
                .link_net(self.node_of(src), target)
                .bandwidth_bytes_per_s;
            let wire_ns = ((chunk as u64 * 8) as f64 * 1e9 / bandwidth).ceil() as u64;
            let tear = self.tear.as_mut().expect("torn steps only with tearing on");
            let stall = tear.rng.below(tear.stall_ns_max + 1);
            self.push(
                now + wire_ns + stall,
                Ev::Step {
                    src,
                    slot,
                    index,
                    op,
                    posted_ns,
                    at_word: end,
                    buf,
                },
            );
            return;
        }
        let kind = op.kind();
        let c = match op {
            Op::Read { .. } => Completion::Read(buf),
            _ => Completion::Write,
        };
        let src_node = self.node_of(src);
        let at = self.deliver(target, src_node, kind, c.reply_bytes(), now, src);
        self.push(
            at,
            Ev::Arrive {
                w: src,
                delivery: Delivery::Completion {
                    slot,
                    index,
                    completion: c,
                },
                by: (target != src_node).then_some(target),
            },
        );
        let link = self.link(src_node, target);
        self.release_link(link);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::core::{Coroutine, Endpoint, TaskId};
    use atoll_fabric::ids::{RegionId, RemotePtr};
    use atoll_fabric::memory::NodeMemory;
    use std::sync::Mutex;

    struct Echo;
    impl RpcHandler for Echo {
        fn handle(
            &self,
            _node: NodeId,
            _from: ReplyTo,
            req: &[u8],
            reply: &mut Vec<u8>,
        ) -> atoll_fabric::Handled {
            reply.extend_from_slice(req);
            atoll_fabric::Handled::Replied
        }
    }

    fn profile() -> NetProfile {
        NetProfile {
            name: "test",
            source: "unit test",
            rtt_ns: [1_000, 1_200, 2_000, 2_000, 3_000],
            bandwidth_bytes_per_s: 1e9,
            nic_msgs_per_s: 1e6,
            wire_header_bytes: 0,
            qp_cache_peers: 1000,
            qp_miss_ns: 0,
            one_sided_in_nic: true,
            atomic_word_ns: 0,
            msg_cpu_ns: 0,
        }
    }

    fn cpu() -> CpuProfile {
        CpuProfile {
            name: "test".into(),
            switch_ns: 0,
            post_ns: 0,
            local_op_ns: 0,
            rpc_handler_ns: 400,
            rpc_handler_ns_per_byte: 0.0,
            txn_ns: 0,
            txn_ns_per_access: 0,
        }
    }

    /// Two nodes of 64 words each, echo handlers, the test profiles, `threads` per node.
    fn two_nodes(
        threads: u16,
        faults: Vec<Fault>,
    ) -> (ClusterMemory, Vec<Arc<dyn RpcHandler>>, SimConfig) {
        let memory: ClusterMemory = (0..2)
            .map(|n| Arc::new(NodeMemory::new(NodeId(n), &[64])))
            .collect::<Vec<_>>()
            .into();
        let handlers: Vec<Arc<dyn RpcHandler>> = (0..2)
            .map(|_| Arc::new(Echo) as Arc<dyn RpcHandler>)
            .collect();
        let cfg = SimConfig {
            nodes: 2,
            threads_per_node: threads,
            net: profile(),
            cpu: cpu(),
            faults,
            op_timeout_ns: OP_TIMEOUT_NS_DEFAULT,
            machine_pairs: Vec::new(),
            idle_limit_ns: HUNG_AFTER_NS_MIN,
            islands: None,
            instance_log: None,
        };
        (memory, handlers, cfg)
    }

    /// Runs `body` as the only co-routine of node 0's worker; returns what it recorded.
    fn sim(
        faults: Vec<Fault>,
        body: fn(Endpoint, Arc<Mutex<Vec<u64>>>) -> Coroutine,
    ) -> (Vec<u64>, SimReport) {
        sim_on(profile(), faults, body)
    }

    /// Runs `cfg` with `body` as the only co-routine of node 0's worker.
    fn on_node_0(
        cfg: &SimConfig,
        memory: &ClusterMemory,
        handlers: &[Arc<dyn RpcHandler>],
        body: impl Fn(Endpoint) -> Coroutine + Send + Sync + 'static,
    ) -> SimReport {
        run(
            cfg,
            &NodeSetup::zip(memory, handlers),
            &NodeDirectory::of(memory),
            &move |core| {
                if core.id.node == NodeId(0) {
                    vec![body(Endpoint::new(core.clone(), TaskId(0)))]
                } else {
                    Vec::new()
                }
            },
        )
    }

    /// As [`sim`], on network profile `net`.
    fn sim_on(
        net: NetProfile,
        faults: Vec<Fault>,
        body: fn(Endpoint, Arc<Mutex<Vec<u64>>>) -> Coroutine,
    ) -> (Vec<u64>, SimReport) {
        let (memory, handlers, mut cfg) = two_nodes(1, faults);
        cfg.net = net;
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        let report = on_node_0(&cfg, &memory, &handlers, move |ep| body(ep, o.clone()));
        let v = out.lock().unwrap().clone();
        (v, report)
    }

    #[test]
    fn instance_log_appends_during_a_write_share_the_next_one() {
        // Node 0's three workers append a 64-byte record at time 0 to a log whose device
        // takes 10 us to sync: the first starts a write; the second finds it under way and
        // starts the next group, written when the first ends; the third joins that group.
        const SYNC_NS: u64 = 10_000;
        let (memory, handlers, mut cfg) = two_nodes(3, Vec::new());
        cfg.instance_log = Some(net::LogDevice::measured(SYNC_NS));
        let write = cfg.instance_log.unwrap().write_ns(64);
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        run(
            &cfg,
            &NodeSetup::zip(&memory, &handlers),
            &NodeDirectory::of(&memory),
            &move |core| {
                if core.id.node != NodeId(0) {
                    return Vec::new();
                }
                let ep = Endpoint::new(core.clone(), TaskId(0));
                let o = o.clone();
                vec![Box::pin(async move {
                    let w = ep.instance_log_model(64).expect("the run models a log");
                    ep.sleep(w.wait_ns).await;
                    o.lock().unwrap().push((w.led, ep.now_ns()));
                }) as Coroutine]
            },
        );
        let mut t = out.lock().unwrap().clone();
        t.sort();
        let group = write + SYNC_NS;
        assert_eq!(
            t,
            vec![(false, 2 * group), (true, group), (true, 2 * group)]
        );
    }

    const REMOTE: RemotePtr = RemotePtr::new(NodeId(1), RegionId(0), 0);

    /// Node 0 writes 16 words of 7 over node 1's zeros while node 2 READs them many times:
    /// returns how many READs saw a mix of old and new words, and the final words.
    fn race_a_write_and_reads(faults: Vec<Fault>) -> (usize, Vec<u64>) {
        const WORDS: u32 = 16;
        let memory: ClusterMemory = (0..3)
            .map(|n| Arc::new(NodeMemory::new(NodeId(n), &[64])))
            .collect::<Vec<_>>()
            .into();
        let handlers: Vec<Arc<dyn RpcHandler>> = (0..3)
            .map(|_| Arc::new(Echo) as Arc<dyn RpcHandler>)
            .collect();
        let cfg = SimConfig {
            nodes: 3,
            threads_per_node: 1,
            net: NetProfile {
                nic_msgs_per_s: 1e9,
                ..profile()
            },
            cpu: cpu(),
            faults,
            op_timeout_ns: OP_TIMEOUT_NS_DEFAULT,
            machine_pairs: Vec::new(),
            idle_limit_ns: HUNG_AFTER_NS_MIN,
            islands: None,
            instance_log: None,
        };
        let mixed = Arc::new(Mutex::new(0usize));
        let m = mixed.clone();
        run(
            &cfg,
            &NodeSetup::zip(&memory, &handlers),
            &NodeDirectory::of(&memory),
            &move |core| {
                let ep = Endpoint::new(core.clone(), TaskId(0));
                let m = m.clone();
                let task: Coroutine = match core.id.node.0 {
                    0 => Box::pin(async move {
                        let mut d = ep.doorbell();
                        d.write(REMOTE, Words::from_elem(7, WORDS as usize));
                        d.submit().await.expect("no node crashed");
                    }),
                    2 => Box::pin(async move {
                        for _ in 0..200 {
                            let w = ep.read(REMOTE, WORDS).await.expect("no node crashed");
                            if w.iter().any(|x| *x == 0) && w.iter().any(|x| *x == 7) {
                                *m.lock().unwrap() += 1;
                            }
                        }
                    }),
                    _ => return Vec::new(),
                };
                vec![task]
            },
        );
        let mut end = vec![0; WORDS as usize];
        memory[1].region(RegionId(0)).read_into(0, &mut end);
        let n = *mixed.lock().unwrap();
        (n, end)
    }

    #[test]
    fn sim_a_torn_write_is_seen_half_done_only_when_tearing_is_on() {
        let tear = Fault::Tear {
            chunk_words: 2,
            stall_ns_max: 200,
            seed: 5,
        };
        let (mixed, end) = race_a_write_and_reads(vec![tear.clone()]);
        assert!(mixed > 0, "no READ saw the WRITE half done");
        assert_eq!(end, vec![7; 16], "the torn WRITE completed");
        assert_eq!(
            race_a_write_and_reads(vec![tear]).0,
            mixed,
            "seeded: replays"
        );
        let (whole, end) = race_a_write_and_reads(Vec::new());
        assert_eq!(whole, 0, "without tearing a WRITE is one step");
        assert_eq!(end, vec![7; 16]);
    }

    #[test]
    fn sim_verbs_on_one_link_stay_in_order_behind_a_torn_one() {
        let tear = Fault::Tear {
            chunk_words: 1,
            stall_ns_max: 500,
            seed: 9,
        };
        let (t, _) = sim(vec![tear], |ep, out| {
            Box::pin(async move {
                // A torn 8-word WRITE, then a 1-word WRITE over its first word: the second
                // must land last, as on one RC queue pair.
                let mut d = ep.doorbell();
                d.write(REMOTE, Words::from_elem(3, 8));
                d.write(REMOTE, Words::from_elem(4, 1));
                d.submit().await.expect("no node crashed");
                let w = ep.read(REMOTE, 8).await.expect("no node crashed");
                out.lock().unwrap().extend(w.iter().copied());
            })
        });
        assert_eq!(t, vec![4, 3, 3, 3, 3, 3, 3, 3]);
    }

    /// Four co-routines on node 0 each post doorbells of torn WRITEs and 1-word WRITEs
    /// over their first word, while node 1 pauses often (a pause re-queues everything that
    /// reached it at one instant): returns the first words READ after each doorbell.
    fn ordered_writes_through_pauses(seed: u64) -> Vec<(u64, u64)> {
        const TASKS: u32 = 4;
        const ROUNDS: u64 = 60;
        let memory: ClusterMemory = (0..2)
            .map(|n| Arc::new(NodeMemory::new(NodeId(n), &[64])))
            .collect::<Vec<_>>()
            .into();
        let handlers: Vec<Arc<dyn RpcHandler>> = (0..2)
            .map(|_| Arc::new(Echo) as Arc<dyn RpcHandler>)
            .collect();
        let mut faults: Vec<Fault> = (0..400u64)
            .map(|i| Fault::Pause {
                node: NodeId(1),
                start_ns: 2_000 + i * 3_000,
                end_ns: 2_000 + i * 3_000 + 1_000,
            })
            .collect();
        faults.push(Fault::Tear {
            chunk_words: 2,
            stall_ns_max: 300,
            seed,
        });
        let cfg = SimConfig {
            nodes: 2,
            threads_per_node: 1,
            net: NetProfile {
                nic_msgs_per_s: 1e9,
                ..profile()
            },
            cpu: cpu(),
            faults,
            op_timeout_ns: OP_TIMEOUT_NS_DEFAULT,
            machine_pairs: Vec::new(),
            idle_limit_ns: HUNG_AFTER_NS_MIN,
            islands: None,
            instance_log: None,
        };
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        run(
            &cfg,
            &NodeSetup::zip(&memory, &handlers),
            &NodeDirectory::of(&memory),
            &move |core| {
                if core.id.node != NodeId(0) {
                    return Vec::new();
                }
                (0..TASKS)
                    .map(|k| {
                        let ep = Endpoint::new(core.clone(), TaskId(k));
                        let o = o.clone();
                        let at = REMOTE.add(k * 16);
                        Box::pin(async move {
                            for v in 0..ROUNDS {
                                let mut d = ep.doorbell();
                                // Torn, 1 word, torn, 1 word (an MVCC install's shape).
                                d.write(at, Words::from_elem(2 * v + 1, 8));
                                d.write(at, Words::from_elem(2 * v + 1, 1));
                                d.write(at.add(8), Words::from_elem(2 * v + 1, 8));
                                d.write(at, Words::from_elem(2 * v + 2, 1));
                                d.submit().await.expect("no node crashed");
                                let w = ep.read(at, 1).await.expect("no node crashed");
                                o.lock().unwrap().push((2 * v + 2, w[0]));
                            }
                        }) as Coroutine
                    })
                    .collect()
            },
        );
        let v = out.lock().unwrap().clone();
        v
    }

    #[test]
    fn sim_verbs_behind_a_torn_one_keep_their_order_when_a_pause_releases_them_together() {
        for seed in 0..8 {
            let seen = ordered_writes_through_pauses(seed);
            assert_eq!(seen.len(), 4 * 60, "seed {seed}: every doorbell completed");
            let wrong: Vec<_> = seen.iter().filter(|(want, got)| want != got).collect();
            assert!(
                wrong.is_empty(),
                "seed {seed}: the later WRITE landed first in {wrong:?}"
            );
        }
    }

    #[test]
    fn sim_a_read_takes_its_round_trip_plus_nic_service_and_an_rpc_adds_handler_time() {
        let (t, _) = sim(Vec::new(), |ep, out| {
            Box::pin(async move {
                let t0 = ep.now_ns();
                ep.read(REMOTE, 1).await.expect("no node crashed");
                let t1 = ep.now_ns();
                ep.rpc(NodeId(1), vec![0; 8])
                    .await
                    .expect("no node crashed");
                let t2 = ep.now_ns();
                out.lock().unwrap().extend([t1 - t0, t2 - t1]);
            })
        });
        // 1 Mmsg/s: each of the 4 NIC queues passed costs 1 us; plus the 1 us round trip.
        assert_eq!(t[0], 1_000 + 4 * 1_000);
        // RPC: 3 us round trip, 4 NIC services, 400 ns of handler CPU.
        assert_eq!(t[1], 3_000 + 4 * 1_000 + 400);
    }

    #[test]
    fn sim_a_nic_serves_messages_in_virtual_time_order_not_in_the_order_workers_ran() {
        // Node 0 has two workers whose runs both start at time 0. Thread 0 runs first and
        // computes 50 us before its READ; thread 1 posts its READ at once. Thread 1's READ
        // must not queue behind a message its NIC will only see 50 us later.
        let (memory, handlers, cfg) = two_nodes(2, Vec::new());
        const AHEAD_NS: u64 = 50_000;
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        let report = run(
            &cfg,
            &NodeSetup::zip(&memory, &handlers),
            &NodeDirectory::of(&memory),
            &move |core| {
                if core.id.node != NodeId(0) {
                    return Vec::new();
                }
                let ep = Endpoint::new(core.clone(), TaskId(0));
                let o = o.clone();
                let ahead = core.id.thread == 0;
                vec![Box::pin(async move {
                    if ahead {
                        ep.compute(AHEAD_NS).await;
                    }
                    let t0 = ep.now_ns();
                    ep.read(REMOTE, 1).await.expect("no node crashed");
                    o.lock().unwrap().push((ahead, t0, ep.now_ns() - t0));
                }) as Coroutine]
            },
        );
        let mut t = out.lock().unwrap().clone();
        t.sort();
        // Thread 1 (not ahead): its READ alone on the wire, 1 us round trip + 4 services.
        assert_eq!(t[0], (false, 0, 1_000 + 4 * 1_000), "{t:?}");
        // Thread 0's READ leaves 50 us later, behind nothing.
        assert_eq!(t[1], (true, AHEAD_NS, 1_000 + 4 * 1_000), "{t:?}");
        // Thread 0's core was busy for its 50 us, thread 1's for nothing (free CPU profile).
        assert_eq!(report.cpu_busy_ns[0], AHEAD_NS, "{:?}", report.cpu_busy_ns);
        assert_eq!(report.cpu_busy_ns[1], 0, "{:?}", report.cpu_busy_ns);
    }

    #[test]
    fn sim_the_message_rate_limit_queues_a_doorbell_of_many_ops() {
        let (t, _) = sim(Vec::new(), |ep, out| {
            Box::pin(async move {
                let t0 = ep.now_ns();
                let mut d = ep.doorbell();
                for i in 0..10 {
                    d.read(REMOTE.add(i), 1);
                }
                d.submit().await.expect("no node crashed");
                out.lock().unwrap().push(ep.now_ns() - t0);
            })
        });
        // The tenth op leaves the send queue 9 us after the first; the replies queue too.
        assert_eq!(t[0], 1_000 + 4 * 1_000 + 9 * 1_000);
    }

    #[test]
    fn sim_atomics_to_one_word_take_turns_at_the_nic_and_to_different_words_do_not() {
        const ATOMIC_NS: u64 = 5_000;
        let net = NetProfile {
            atomic_word_ns: ATOMIC_NS,
            ..profile()
        };
        // Ten FETCH_ADDs to one word, then ten to ten words, then a READ of the first word
        // behind ten more on the same link: it must see all of them (the link keeps order).
        let (t, _) = sim_on(net, Vec::new(), |ep, out| {
            Box::pin(async move {
                for words in [1, 10] {
                    let t0 = ep.now_ns();
                    let mut d = ep.doorbell();
                    for i in 0..10 {
                        d.fetch_add(REMOTE.add(40 + i % words), 1);
                    }
                    d.submit().await.expect("no node crashed");
                    out.lock().unwrap().push(ep.now_ns() - t0);
                }
                let mut d = ep.doorbell();
                for _ in 0..10 {
                    d.fetch_add(REMOTE.add(40), 1);
                }
                let j = d.read(REMOTE.add(40), 1);
                let r = d.submit().await.expect("no node crashed");
                out.lock().unwrap().push(r.read(j)[0]);
            })
        });
        // Apart: as any ten ops, the tenth leaves the send queue 9 us after the first.
        let apart = 2_000 + 4 * 1_000 + 9 * 1_000;
        assert_eq!(
            t[1], apart,
            "atomics to different words do not wait for each other"
        );
        // On one word: the tenth starts 9 turns after the first reached it.
        // Each way: the send queue, half the round trip, the receive queue.
        let one_way = 1_000 + 2_000 / 2 + 1_000;
        assert_eq!(t[0], one_way + 9 * ATOMIC_NS + one_way);
        assert!(t[0] > apart, "{t:?}");
        assert_eq!(
            t[2],
            10 + 1 + 10,
            "the READ ran after every FETCH_ADD before it on the link"
        );
    }

    #[test]
    fn sim_a_latency_spike_and_a_pause_delay_the_link_and_the_node() {
        let spike = Fault::Spike {
            from: NodeId(0),
            to: NodeId(1),
            start_ns: 0,
            end_ns: 1_000_000,
            extra_ns: 50_000,
        };
        let (t, _) = sim(vec![spike], |ep, out| {
            Box::pin(async move {
                ep.read(REMOTE, 1).await.expect("no node crashed");
                out.lock().unwrap().push(ep.now_ns());
            })
        });
        assert_eq!(t[0], 5_000 + 50_000);
        let pause = Fault::Pause {
            node: NodeId(1),
            start_ns: 0,
            end_ns: 80_000,
        };
        let (t, _) = sim(vec![pause], |ep, out| {
            Box::pin(async move {
                ep.read(REMOTE, 1).await.expect("no node crashed");
                out.lock().unwrap().push(ep.now_ns());
            })
        });
        assert!(t[0] >= 80_000, "the paused node answered at {} ns", t[0]);
    }

    #[test]
    fn sim_is_deterministic_and_never_reorders_a_link_even_across_a_spike() {
        // A spike ends while ops are in flight: later ops must not overtake earlier ones.
        let spike = Fault::Spike {
            from: NodeId(0),
            to: NodeId(1),
            start_ns: 0,
            end_ns: 3_000,
            extra_ns: 40_000,
        };
        let body: fn(Endpoint, Arc<Mutex<Vec<u64>>>) -> Coroutine = |ep, out| {
            Box::pin(async move {
                // Each WRITE stores its sequence number; a READ after all sees the last.
                let mut d = ep.doorbell();
                for i in 1..=8u64 {
                    d.write(REMOTE, atoll_fabric::Words::from_slice(&[i]));
                }
                d.read(REMOTE, 1);
                let r = d.submit().await.expect("no node crashed");
                out.lock().unwrap().extend([r.read(8)[0], ep.now_ns()]);
            })
        };
        let (a, ra) = sim(vec![spike.clone()], body);
        let (b, rb) = sim(vec![spike], body);
        assert_eq!(a[0], 8, "a later write overtook an earlier one");
        assert_eq!(a, b);
        assert_eq!(ra.events, rb.events);
    }

    #[test]
    fn sim_an_op_to_a_crashed_node_completes_with_a_typed_failure_within_its_timeout() {
        let crash = Fault::Crash {
            node: NodeId(1),
            at_ns: 0,
        };
        let (t, r) = sim(vec![crash], |ep, out| {
            Box::pin(async move {
                let t0 = ep.now_ns();
                let read = ep.read(REMOTE, 1).await;
                let t1 = ep.now_ns();
                let rpc = ep.rpc(NodeId(1), vec![0; 8]).await;
                let t2 = ep.now_ns();
                let failed = OpError {
                    node: NodeId(1),
                    kind: FailureKind::TimedOut,
                };
                assert_eq!(read.err(), Some(failed));
                assert_eq!(rpc.err(), Some(failed));
                out.lock().unwrap().extend([t1 - t0, t2 - t1]);
            })
        });
        assert_eq!(r.crashed, vec![(NodeId(1), 0, 0)]);
        assert_eq!(
            r.unfinished, 0,
            "node 0's co-routine got its failures and finished"
        );
        for waited_ns in t {
            assert!(
                waited_ns <= OP_TIMEOUT_NS_DEFAULT + 1_000,
                "failed after {waited_ns} ns, past the {OP_TIMEOUT_NS_DEFAULT} ns timeout"
            );
            assert!(
                waited_ns >= OP_TIMEOUT_NS_DEFAULT,
                "failed before the timeout"
            );
        }
    }

    #[test]
    fn sim_an_op_to_a_frozen_node_times_out_unperformed_and_one_due_after_the_freeze_completes() {
        // Node 1 stands frozen from 10 us for 3 op timeouts. A CAS posted in the freeze
        // fails at its timeout and never lands, not even once node 1 goes on; an RPC posted
        // close enough to the freeze's end is served when it does.
        const FREEZE_NS: u64 = 3 * OP_TIMEOUT_NS_DEFAULT;
        let freeze = Fault::Freeze {
            node: NodeId(1),
            start_ns: 10_000,
            end_ns: 10_000 + FREEZE_NS,
        };
        let (memory, handlers, cfg) = two_nodes(1, vec![freeze]);
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        let report = run(
            &cfg,
            &NodeSetup::zip(&memory, &handlers),
            &NodeDirectory::of(&memory),
            &move |core| {
                if core.id.node != NodeId(0) {
                    return Vec::new();
                }
                let ep = Endpoint::new(core.clone(), TaskId(0));
                let o = o.clone();
                vec![Box::pin(async move {
                    ep.sleep(20_000).await;
                    let t0 = ep.now_ns();
                    let w = ep.cas(REMOTE, 0, 7).await;
                    assert_eq!(
                        w.err(),
                        Some(OpError {
                            node: NodeId(1),
                            kind: FailureKind::TimedOut
                        })
                    );
                    o.lock().unwrap().push(ep.now_ns() - t0);
                    // Posted half a timeout before node 1 goes on: it is served then.
                    let due = 10_000 + FREEZE_NS - OP_TIMEOUT_NS_DEFAULT / 2;
                    ep.sleep(due - ep.now_ns()).await;
                    let rpc = ep.rpc(NodeId(1), vec![5; 8]).await;
                    assert_eq!(rpc.ok().map(|r| r.to_vec()), Some(vec![5; 8]));
                    o.lock().unwrap().push(ep.now_ns());
                    // Long after: the CAS given up never happened.
                    ep.sleep(2 * FREEZE_NS).await;
                    let r = ep.read(REMOTE, 1).await.expect("node 1 is up");
                    o.lock().unwrap().push(r[0]);
                }) as Coroutine]
            },
        );
        let t = out.lock().unwrap().clone();
        assert_eq!(report.unfinished, 0);
        assert!(report.crashed.is_empty(), "a freeze is no crash");
        assert!(
            (OP_TIMEOUT_NS_DEFAULT..=OP_TIMEOUT_NS_DEFAULT + 1_000).contains(&t[0]),
            "the CAS failed after {} ns",
            t[0]
        );
        assert!(
            t[1] >= 10_000 + FREEZE_NS,
            "the RPC was served at {} ns, in the freeze",
            t[1]
        );
        assert_eq!(t[2], 0, "a CAS its requester gave up landed");
    }

    /// Refuses every op from node `.0` once `.1` is set (a configuration declared it dead).
    struct Fenced(NodeId, std::sync::atomic::AtomicBool);
    impl RpcHandler for Fenced {
        fn handle(
            &self,
            _node: NodeId,
            _from: ReplyTo,
            req: &[u8],
            reply: &mut Vec<u8>,
        ) -> atoll_fabric::Handled {
            reply.extend_from_slice(req);
            atoll_fabric::Handled::Replied
        }
        fn refuses(&self, from: NodeId) -> bool {
            from == self.0 && self.1.load(std::sync::atomic::Ordering::Relaxed)
        }
    }

    #[test]
    fn sim_a_fenced_node_stops_at_its_first_op_and_the_op_is_not_performed() {
        let (memory, _, cfg) = two_nodes(1, Vec::new());
        let fence = Arc::new(Fenced(NodeId(0), std::sync::atomic::AtomicBool::new(false)));
        let handlers: Vec<Arc<dyn RpcHandler>> = vec![Arc::new(Echo), fence.clone()];
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        let report = on_node_0(&cfg, &memory, &handlers, move |ep| {
            let (o, fence) = (o.clone(), fence.clone());
            Box::pin(async move {
                ep.cas(REMOTE, 0, 3).await.expect("not fenced yet");
                o.lock().unwrap().push(ep.now_ns());
                fence.1.store(true, std::sync::atomic::Ordering::Relaxed);
                let _ = ep.cas(REMOTE, 3, 9).await;
                unreachable!("a fenced node's co-routine went on past its refused op");
            })
        });
        let fenced_at = out.lock().unwrap()[0];
        assert_eq!(report.crashed.len(), 1);
        assert_eq!(report.crashed[0].0, NodeId(0));
        assert!(report.crashed[0].1 > fenced_at);
        assert_eq!(
            memory[1].region(RegionId(0)).load(0),
            3,
            "the refused CAS landed"
        );
    }

    #[test]
    fn sim_an_answer_from_a_node_held_dead_fails_at_its_receiver_and_the_node_stops() {
        // Node 0 declares node 1 dead while its READ and its RPC to node 1 are out: both
        // answers arrive and are refused, so each op fails as one to a dead node does, and
        // node 1, which answered a node that fenced it, stops.
        let (memory, _, cfg) = two_nodes(1, Vec::new());
        let fence = Arc::new(Fenced(NodeId(1), std::sync::atomic::AtomicBool::new(false)));
        let handlers: Vec<Arc<dyn RpcHandler>> = vec![fence.clone(), Arc::new(Echo)];
        let out = Arc::new(Mutex::new(Vec::new()));
        let o = out.clone();
        let report = on_node_0(&cfg, &memory, &handlers, move |ep| {
            let (o, fence) = (o.clone(), fence.clone());
            Box::pin(async move {
                ep.read(REMOTE, 1).await.expect("not fenced yet");
                let mut d = ep.doorbell();
                d.read(REMOTE, 1);
                d.rpc(NodeId(1), vec![1; 8]);
                // Declared dead before the answers are back.
                fence.1.store(true, std::sync::atomic::Ordering::Relaxed);
                let res = d.submit().await;
                o.lock().unwrap().push(res.err());
            })
        });
        let got = out.lock().unwrap().clone();
        assert_eq!(
            got,
            vec![Some(OpError {
                node: NodeId(1),
                kind: FailureKind::Unreachable
            })],
            "an answer from a fenced node was taken"
        );
        assert_eq!(report.unfinished, 0);
        assert_eq!(report.crashed.len(), 1, "{:?}", report.crashed);
        assert_eq!(report.crashed[0].0, NodeId(1));
    }

    #[test]
    fn sim_a_request_held_or_queued_at_a_node_that_crashes_fails_at_its_requester() {
        // Node 1 crashes while node 0's RPC is on its way: the request reaches node 1 (and is
        // tracked as served) or is dropped on arrival; either way it fails, once.
        let crash = Fault::Crash {
            node: NodeId(1),
            at_ns: 2_000,
        };
        let (t, r) = sim(vec![crash], |ep, out| {
            Box::pin(async move {
                let mut d = ep.doorbell();
                for i in 0..4 {
                    d.read(REMOTE.add(i), 1);
                    d.rpc(NodeId(1), vec![i as u8]);
                }
                let failed = d.submit().await.is_err();
                out.lock().unwrap().push(failed as u64);
            })
        });
        assert_eq!(t, vec![1]);
        assert_eq!(r.unfinished, 0);
    }
}
