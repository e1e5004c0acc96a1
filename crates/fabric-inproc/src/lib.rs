//! The in-process fabric: every node lives in this process, workers are real threads.
//!
//! One-sided verbs touch the target node's memory directly (as the NIC would) and complete at
//! once, or after their verb class's `net_latency_ns` when latency is injected. RPCs travel through per-worker
//! inboxes and are executed by the target worker's event loop, so the target's CPU does the
//! work. Logical workers (node, thread) are spread over at most `os_threads` OS threads, so
//! more nodes than cores work.

use atoll_fabric::core::{
    execute_local, panic_message, Delivery, Executor, NodeSetup, Posted, ReplyTo, SlotId,
    Transport, WorkerCore, WorkerPanic,
};
pub use atoll_fabric::core::{Spawner, WorkerReport};
use atoll_fabric::ids::{NodeId, WorkerId};
use atoll_fabric::memory::{ClusterMemory, NodeDirectory, NodeMemory};
use atoll_fabric::verbs::{execute_one_sided, Completion, Op, RpcHandler, VerbKind};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::BinaryHeap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

mod clock;
use clock::Clock;

/// Shape and knobs of an in-process cluster.
#[derive(Clone, Debug)]
pub struct InprocConfig {
    pub nodes: u16,
    pub threads_per_node: u16,
    /// OS threads carrying the logical workers (at least 1).
    pub os_threads: usize,
    pub pin_threads: bool,
    /// Added to every remote verb's (and RPC's) round trip, per [`VerbKind`].
    pub net_latency_ns: [u64; VerbKind::COUNT],
    /// Nodes sharing a machine, two by two ([`atoll_fabric::ids::machine_peer`]): their
    /// one-sided ops to each other get no injected latency.
    pub machine_pairs: Vec<(NodeId, NodeId)>,
}

impl InprocConfig {
    pub fn workers(&self) -> usize {
        self.nodes as usize * self.threads_per_node as usize
    }
}

enum Msg {
    Request {
        from: ReplyTo,
        node: NodeId,
        req: Vec<u8>,
    },
    Reply {
        to: ReplyTo,
        reply: Vec<u8>,
    },
}

/// A worker's inbox, alone on its cache lines: the inboxes sit side by side in one vector,
/// and a receiver polls its flag on every event-loop turn while senders write their
/// neighbours'. Sharing a line, two workers' polls and pushes invalidated each other's
/// copies, and whether they shared one depended on where the vector landed: RPC throughput
/// with 2 workers moved between runs by up to 1.5x (issue #9). 128 bytes: adjacent-line
/// prefetchers pull lines in pairs.
#[repr(align(128))]
struct Inbox {
    /// Set by senders after pushing, so an idle receiver polls one flag instead of a lock.
    nonempty: AtomicBool,
    msgs: Mutex<Vec<Msg>>,
}

struct Shared {
    memory: ClusterMemory,
    inboxes: Vec<Inbox>,
    threads_per_node: u16,
    latency_ns: [u64; VerbKind::COUNT],
    /// No verb class has injected latency: one-sided ops to any node run at once.
    no_latency: bool,
    clock: Clock,
}

impl Inbox {
    /// Takes the lock by spinning, never parking: critical sections are a push or a swap,
    /// and a parked worker would cost a context switch (microseconds) per message.
    fn lock(&self) -> parking_lot::MutexGuard<'_, Vec<Msg>> {
        loop {
            if let Some(g) = self.msgs.try_lock() {
                return g;
            }
            std::hint::spin_loop();
        }
    }
}

impl Shared {
    /// Moves `msgs` into `worker`'s inbox under one lock, leaving `msgs` empty.
    fn hand_over(&self, worker: usize, msgs: &mut Vec<Msg>) {
        let inbox = &self.inboxes[worker];
        {
            let mut held = inbox.lock();
            if held.is_empty() {
                // The buffers trade places: no copy, and both keep their capacity.
                std::mem::swap(&mut *held, msgs);
            } else {
                held.append(msgs);
            }
        }
        inbox.nonempty.store(true, Ordering::Release);
    }
}

struct Delayed {
    due_ns: u64,
    slot: SlotId,
    index: u32,
    completion: Completion,
}

impl PartialEq for Delayed {
    fn eq(&self, o: &Self) -> bool {
        self.due_ns == o.due_ns
    }
}
impl Eq for Delayed {}
impl PartialOrd for Delayed {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Delayed {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Min-heap on due time.
        o.due_ns.cmp(&self.due_ns)
    }
}

struct InprocTransport {
    shared: Arc<Shared>,
    me: u32,
    node: NodeId,
    thread: u16,
    /// This node's own memory and handler: own-node ops run on this CPU at once.
    memory: Arc<NodeMemory>,
    handler: Arc<dyn RpcHandler>,
    /// The node sharing this one's machine: its one-sided ops come back at once.
    peer: Option<NodeId>,
    delayed: RefCell<BinaryHeap<Delayed>>,
    batch: RefCell<Vec<Msg>>,
    /// Messages (requests and replies) this worker sent during the current turn of its
    /// event loop, per target worker, handed over at the turn's end ([`Transport::end_turn`])
    /// with one lock of the target's inbox: a cross-core hand-over costs a few cache-line
    /// transfers, and one per message was most of an RPC plan's time (issue #9). Bounded by
    /// what a turn sends: one doorbell per ready co-routine and one reply per request
    /// received. One entry per worker this one has talked to (its buffer kept for the next
    /// turns), searched in order: a worker talks to few (its thread index on each node and
    /// its requesters), and a dense vector per worker would be quadratic in the cluster.
    outbox: RefCell<Vec<(u32, Vec<Msg>)>>,
}

impl InprocTransport {
    /// Queues `msg` for worker `target`, sent at the end of this turn.
    fn send(&self, target: usize, msg: Msg) {
        let mut out = self.outbox.borrow_mut();
        let target = target as u32;
        match out.iter_mut().find(|(t, _)| *t == target) {
            Some((_, msgs)) => msgs.push(msg),
            None => out.push((target, vec![msg])),
        }
    }

    fn delay(
        &self,
        posted_ns: u64,
        slot: SlotId,
        index: u32,
        completion: Completion,
    ) -> Option<Completion> {
        let latency_ns = match completion.kind() {
            Some(k) => self.shared.latency_ns[k as usize],
            None => 0,
        };
        if latency_ns == 0 {
            return Some(completion);
        }
        let due_ns = posted_ns + latency_ns;
        self.delayed.borrow_mut().push(Delayed {
            due_ns,
            slot,
            index,
            completion,
        });
        None
    }
}

impl Transport for InprocTransport {
    fn now_ns(&self) -> u64 {
        self.shared.clock.now_ns()
    }

    fn direct_memory(&self, node: NodeId) -> Option<&NodeMemory> {
        // What `post` does for a one-sided op to another node when no latency is injected
        // (or to the machine's own peer): run it at once on this CPU.
        if self.shared.no_latency || Some(node) == self.peer {
            self.shared.memory.get(node.0 as usize).map(|m| &**m)
        } else {
            None
        }
    }

    fn post(&self, slot: SlotId, index: u32, op: Op) -> Posted {
        if op.node() == self.node {
            // Threads of one process share coherent atomics: the CPU does it directly, as
            // before any network. A held request's reply is never delayed (posted_ns 0).
            let from = ReplyTo {
                worker: self.me,
                slot,
                index,
                posted_ns: 0,
            };
            return execute_local(&self.memory, self.handler.as_ref(), from, op);
        }
        let now = if self.shared.latency_ns[op.kind() as usize] == 0 {
            0
        } else {
            self.now_ns()
        };
        match op {
            Op::Rpc { node, req } => {
                let target = node.0 as usize * self.shared.threads_per_node as usize
                    + (self.thread % self.shared.threads_per_node) as usize;
                let from = ReplyTo {
                    worker: self.me,
                    slot,
                    index,
                    posted_ns: now,
                };
                self.send(target, Msg::Request { from, node, req });
                Posted::Pending
            }
            op => {
                let node = op.node();
                let c = execute_one_sided(&self.shared.memory[node.0 as usize], op);
                if Some(node) == self.peer {
                    // The machine's own memory: no network in between.
                    return Posted::Done(c);
                }
                match self.delay(now, slot, index, c) {
                    Some(c) => Posted::Done(c),
                    None => Posted::Pending,
                }
            }
        }
    }

    fn post_timer(&self, slot: SlotId, delay_ns: u64) {
        let due_ns = self.now_ns() + delay_ns;
        self.delayed.borrow_mut().push(Delayed {
            due_ns,
            slot,
            index: 0,
            completion: Completion::Timer,
        });
    }

    fn compute(&self, ns: u64) -> bool {
        let until = self.now_ns() + ns;
        while self.now_ns() < until {
            std::hint::spin_loop();
        }
        true
    }

    fn poll(&self, sink: &mut dyn FnMut(Delivery)) {
        let inbox = &self.shared.inboxes[self.me as usize];
        if inbox.nonempty.load(Ordering::Acquire) {
            let mut batch = self.batch.borrow_mut();
            {
                let mut msgs = inbox.lock();
                inbox.nonempty.store(false, Ordering::Relaxed);
                std::mem::swap(&mut *msgs, &mut *batch);
            }
            for msg in batch.drain(..) {
                match msg {
                    Msg::Request { from, node, req } => sink(Delivery::Request { from, node, req }),
                    Msg::Reply { to, reply } => {
                        if let Some(c) =
                            self.delay(to.posted_ns, to.slot, to.index, Completion::Rpc(reply))
                        {
                            sink(Delivery::Completion {
                                slot: to.slot,
                                index: to.index,
                                completion: c,
                            });
                        }
                    }
                }
            }
        }
        if self.delayed.borrow().is_empty() {
            return;
        }
        let now = self.now_ns();
        loop {
            let due = {
                let mut d = self.delayed.borrow_mut();
                match d.peek() {
                    Some(top) if top.due_ns <= now => d.pop(),
                    _ => None,
                }
            };
            match due {
                Some(d) => sink(Delivery::Completion {
                    slot: d.slot,
                    index: d.index,
                    completion: d.completion,
                }),
                None => break,
            }
        }
    }

    fn reply(&self, to: ReplyTo, reply: Vec<u8>) {
        self.send(to.worker as usize, Msg::Reply { to, reply });
    }

    fn end_turn(&self) {
        for (target, msgs) in self.outbox.borrow_mut().iter_mut() {
            if !msgs.is_empty() {
                self.shared.hand_over(*target as usize, msgs);
            }
        }
    }

    /// Threads of one process share coherent atomics, and local work costs only itself.
    fn runs_local_inline(&self) -> bool {
        true
    }
}

/// Runs a cluster until every co-routine has finished. `handlers[n]` serves node `n`'s RPCs.
///
/// A panic in any worker (its event loop, RPC handler or a co-routine) stops every worker:
/// the others would otherwise wait forever for the failed one's progress or replies. The run
/// then returns the first panic's worker and message.
pub fn run(
    cfg: &InprocConfig,
    setups: &[NodeSetup],
    directory: &NodeDirectory,
    spawn: &Spawner<'_>,
) -> Result<Vec<WorkerReport>, WorkerPanic> {
    atoll_fabric::core::assert_cluster_shape(cfg.nodes, setups, directory);
    // Peers' memory, reached in this process as a NIC reaches it by the directory's keys
    // (which the in-process and simulated NICs need not check: they are the same memory).
    let memory: ClusterMemory = setups
        .iter()
        .map(|s| s.memory.clone())
        .collect::<Vec<_>>()
        .into();
    let workers = cfg.workers();
    let os_threads = cfg.os_threads.clamp(1, workers.max(1));
    let shared = Arc::new(Shared {
        memory,
        inboxes: (0..workers)
            .map(|_| Inbox {
                nonempty: AtomicBool::new(false),
                msgs: Mutex::new(Vec::new()),
            })
            .collect(),
        threads_per_node: cfg.threads_per_node,
        latency_ns: cfg.net_latency_ns,
        no_latency: cfg.net_latency_ns.iter().all(|&l| l == 0),
        clock: Clock::start(),
    });
    // Counts workers whose co-routines are all done; a thread keeps serving RPCs until every
    // worker in the cluster is done, since others may still send it requests.
    let finished = AtomicUsize::new(0);
    // The first panic of any worker; set, it stops every thread.
    let failed = AtomicBool::new(false);
    let failure: Mutex<Option<WorkerPanic>> = Mutex::new(None);
    let core_ids = if cfg.pin_threads {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let reports = Mutex::new(Vec::with_capacity(workers));
    std::thread::scope(|s| {
        for t in 0..os_threads {
            let shared = shared.clone();
            let (finished, failed, failure, reports) = (&finished, &failed, &failure, &reports);
            let core_id = if core_ids.is_empty() {
                None
            } else {
                Some(core_ids[t % core_ids.len()])
            };
            std::thread::Builder::new()
                .name(format!("atoll-worker-{t}"))
                .spawn_scoped(s, move || {
                    // The worker this thread is running, for naming a panic.
                    let current: Cell<Option<WorkerId>> = Cell::new(None);
                    let body = || {
                        if let Some(c) = core_id {
                            core_affinity::set_for_current(c);
                        }
                        let mine: Vec<usize> = (t..workers).step_by(os_threads).collect();
                        let mut execs: Vec<Executor> = mine
                            .iter()
                            .map(|&w| {
                                let id = worker_id(cfg, w);
                                current.set(Some(id));
                                executor(cfg, &shared, setups, spawn, w)
                            })
                            .collect();
                        event_loop(&mut execs, &current, finished, failed, workers);
                        let mut r = reports.lock();
                        for e in &execs {
                            r.push(WorkerReport {
                                id: e.core().id,
                                counters: e.core().counters(),
                            });
                        }
                    };
                    if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(body)) {
                        let mut f = failure.lock();
                        if f.is_none() {
                            *f = Some(WorkerPanic {
                                worker: current.get(),
                                message: panic_message(payload.as_ref()),
                            });
                        }
                        failed.store(true, Ordering::Release);
                    }
                })
                .expect("spawning a worker thread");
        }
    });
    if let Some(p) = failure.into_inner() {
        return Err(p);
    }
    let mut reports = reports.into_inner();
    reports.sort_by_key(|r| (r.id.node, r.id.thread));
    Ok(reports)
}

/// Worker `w`'s id: its node and its thread there.
fn worker_id(cfg: &InprocConfig, w: usize) -> WorkerId {
    WorkerId {
        node: NodeId((w / cfg.threads_per_node as usize) as u16),
        thread: (w % cfg.threads_per_node as usize) as u16,
    }
}

/// Worker `w` with its transport on the cluster's shared inboxes and memory, and the
/// co-routines `spawn` gives it.
fn executor(
    cfg: &InprocConfig,
    shared: &Arc<Shared>,
    setups: &[NodeSetup],
    spawn: &Spawner<'_>,
    w: usize,
) -> Executor {
    let id = worker_id(cfg, w);
    let memory = shared.memory[id.node.0 as usize].clone();
    let handler = setups[id.node.0 as usize].handler.clone();
    let transport = InprocTransport {
        shared: shared.clone(),
        me: w as u32,
        node: id.node,
        thread: id.thread,
        memory: memory.clone(),
        handler: handler.clone(),
        peer: atoll_fabric::ids::machine_peer(&cfg.machine_pairs, id.node),
        delayed: RefCell::new(BinaryHeap::new()),
        batch: RefCell::new(Vec::new()),
        outbox: RefCell::new(Vec::new()),
    };
    let core = WorkerCore::new(id, w as u32, memory, handler, Box::new(transport));
    core.set_machine_peer(atoll_fabric::ids::machine_peer(&cfg.machine_pairs, id.node));
    let tasks = spawn(&core);
    Executor::new(core, tasks)
}

/// One OS thread's event loop over its workers: turns until every worker of the cluster is
/// done (others may still send this thread's workers requests) or one failed.
fn event_loop(
    execs: &mut [Executor],
    current: &Cell<Option<WorkerId>>,
    finished: &AtomicUsize,
    failed: &AtomicBool,
    workers: usize,
) {
    let mut done = vec![false; execs.len()];
    loop {
        for (i, e) in execs.iter_mut().enumerate() {
            current.set(Some(e.core().id));
            e.run_ready();
            e.core().progress();
            e.core().end_turn();
            if !done[i] && e.live_tasks() == 0 {
                done[i] = true;
                finished.fetch_add(1, Ordering::AcqRel);
            }
        }
        if finished.load(Ordering::Acquire) == workers || failed.load(Ordering::Acquire) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::ids::{RegionId, RemotePtr};
    use atoll_fabric::memory::NodeMemory;
    use atoll_fabric::{Coroutine, Endpoint, Handled, TaskId, Words};
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
        latency_ns: [u64; atoll_fabric::VerbKind::COUNT],
        body: &(dyn Fn(Endpoint) -> Coroutine + Sync),
    ) -> Vec<WorkerReport> {
        let memory: atoll_fabric::ClusterMemory = (0..nodes)
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
            machine_pairs: Vec::new(),
        };
        run(
            &cfg,
            &NodeSetup::zip(&memory, &handlers),
            &NodeDirectory::of(&memory),
            &|core| vec![body(Endpoint::new(core.clone(), TaskId(0)))],
        )
        .unwrap_or_else(|p| panic!("{p}"))
    }

    #[test]
    fn fabric_verbs_reach_remote_memory_and_rpcs_run_on_the_target_2_nodes() {
        let cas_wins = Arc::new(AtomicU64::new(0));
        let wins = cas_wins.clone();
        let reports = cluster(2, [0; atoll_fabric::VerbKind::COUNT], &move |ep| {
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
                let r = d.submit().await.expect("no node fails in process");
                assert_eq!(r.read(1), &[7, 8]);
                assert!(r.fetch_add(2) <= 1);
                assert_eq!(r.rpc(3), &[10 + 1 + peer.0 as u8, 20]);
                // Both nodes race for one word of node 0: exactly one CAS wins.
                let target = RemotePtr::new(NodeId(0), RegionId(0), 0);
                if ep.cas(target, 0, me as u64 + 1).await == Ok(0) {
                    wins.fetch_add(1, Ordering::SeqCst);
                }
            })
        });
        assert_eq!(cas_wins.load(Ordering::SeqCst), 1);
        let n0 = &reports[0].counters;
        // Node 0's CAS on its own memory is local; node 1's crosses the fabric.
        assert_eq!(n0.local_ops[atoll_fabric::VerbKind::Cas as usize], 1);
        assert_eq!(
            reports[1].counters.remote_ops[atoll_fabric::VerbKind::Cas as usize],
            1
        );
        assert_eq!(n0.remote_ops[atoll_fabric::VerbKind::Rpc as usize], 1);
        assert_eq!(n0.rpcs_served, 1);
        assert_eq!(n0.remote_ops[atoll_fabric::VerbKind::Write as usize], 1);
        assert_eq!(n0.remote_bytes[atoll_fabric::VerbKind::Write as usize], 16);
        assert_eq!(n0.doorbells, 1);
        assert_eq!(n0.round_trips, 1, "the local CAS is not a round trip");
    }

    #[test]
    fn fabric_injected_latency_delays_remote_completions_but_not_local_ones() {
        // Large enough that a preempted local read on a busy machine stays below it.
        const LATENCY_NS: u64 = 5_000_000;
        cluster(2, [LATENCY_NS; atoll_fabric::VerbKind::COUNT], &|ep| {
            Box::pin(async move {
                let peer = NodeId(1 - ep.node().0);
                let t0 = ep.now_ns();
                ep.read(RemotePtr::new(ep.node(), RegionId(0), 0), 1)
                    .await
                    .expect("no node fails in process");
                let local_ns = ep.now_ns() - t0;
                let t1 = ep.now_ns();
                ep.read(RemotePtr::new(peer, RegionId(0), 0), 1)
                    .await
                    .expect("no node fails in process");
                let remote_ns = ep.now_ns() - t1;
                let t2 = ep.now_ns();
                ep.rpc(peer, vec![1])
                    .await
                    .expect("no node fails in process");
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
            let memory: atoll_fabric::ClusterMemory = (0..2)
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
                net_latency_ns: [0; atoll_fabric::VerbKind::COUNT],
                machine_pairs: Vec::new(),
            };
            let r = run(
                &cfg,
                &NodeSetup::zip(&memory, &handlers),
                &NodeDirectory::of(&memory),
                &|core| {
                    let ep = Endpoint::new(core.clone(), TaskId(0));
                    vec![Box::pin(async move {
                        let flag = RemotePtr::new(NodeId(0), RegionId(0), 0);
                        if ep.node() == NodeId(0) {
                            ep.rpc(NodeId(1), vec![1])
                                .await
                                .expect("no node fails in process");
                            panic!("injected failure after {} RPC", 1);
                        }
                        while ep
                            .read(flag, 1)
                            .await
                            .expect("no node fails in process")
                            .as_slice()
                            != [1]
                        {
                            ep.yield_now().await;
                        }
                    })]
                },
            );
            let _ = tx.send(r.map(|_| ()));
        });
        let r = rx
            .recv_timeout(std::time::Duration::from_secs(RUN_S_MAX))
            .unwrap_or_else(|_| panic!("the run did not end within {RUN_S_MAX} s"));
        let p = r.expect_err("a worker panicked, yet the run succeeded");
        assert_eq!(
            p.worker,
            Some(atoll_fabric::ids::WorkerId {
                node: NodeId(0),
                thread: 0
            })
        );
        assert_eq!(p.message, "injected failure after 1 RPC");
        assert!(p.to_string().contains("node 0, thread 0"), "{p}");
    }
}
