//! The in-process fabric: every node lives in this process, workers are real threads.
//!
//! One-sided verbs touch the target node's memory directly (as the NIC would) and complete at
//! once, or after their verb class's `net_latency_ns` when latency is injected. RPCs travel through per-worker
//! inboxes and are executed by the target worker's event loop, so the target's CPU does the
//! work. Logical workers (node, thread) are spread over at most `os_threads` OS threads, so
//! more nodes than cores work.

use crate::core::{
    panic_message, Delivery, Executor, ReplyTo, SlotId, Transport, WorkerCore, WorkerPanic,
};
pub use crate::core::{Spawner, WorkerReport};
use crate::ids::{NodeId, WorkerId};
use crate::memory::ClusterMemory;
use crate::verbs::{execute_one_sided, Completion, Op, RpcHandler, VerbKind};
use parking_lot::Mutex;
use std::cell::{Cell, RefCell};
use std::collections::BinaryHeap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

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
    start: Instant,
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
    fn send(&self, worker: usize, msg: Msg) {
        let inbox = &self.inboxes[worker];
        inbox.lock().push(msg);
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
    thread: u16,
    delayed: RefCell<BinaryHeap<Delayed>>,
    batch: RefCell<Vec<Msg>>,
}

impl InprocTransport {
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
        self.shared.start.elapsed().as_nanos() as u64
    }

    fn post(&self, slot: SlotId, index: u32, op: Op) -> Option<Completion> {
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
                self.shared.send(target, Msg::Request { from, node, req });
                None
            }
            op => {
                let node = op.node();
                let c = execute_one_sided(&self.shared.memory[node.0 as usize], op);
                self.delay(now, slot, index, c)
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
        self.shared
            .send(to.worker as usize, Msg::Reply { to, reply });
    }
}

/// Runs a cluster until every co-routine has finished. `handlers[n]` serves node `n`'s RPCs.
///
/// A panic in any worker (its event loop, RPC handler or a co-routine) stops every worker:
/// the others would otherwise wait forever for the failed one's progress or replies. The run
/// then returns the first panic's worker and message.
pub fn run(
    cfg: &InprocConfig,
    memory: ClusterMemory,
    handlers: &[Arc<dyn RpcHandler>],
    spawn: &Spawner<'_>,
) -> Result<Vec<WorkerReport>, WorkerPanic> {
    crate::core::assert_cluster_shape(cfg.nodes, &memory, handlers);
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
        start: Instant::now(),
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
                                let id = WorkerId {
                                    node: NodeId((w / cfg.threads_per_node as usize) as u16),
                                    thread: (w % cfg.threads_per_node as usize) as u16,
                                };
                                current.set(Some(id));
                                let transport = InprocTransport {
                                    shared: shared.clone(),
                                    me: w as u32,
                                    thread: id.thread,
                                    delayed: RefCell::new(BinaryHeap::new()),
                                    batch: RefCell::new(Vec::new()),
                                };
                                let core = WorkerCore::new(
                                    id,
                                    w as u32,
                                    shared.memory[id.node.0 as usize].clone(),
                                    handlers[id.node.0 as usize].clone(),
                                    Box::new(transport),
                                );
                                let tasks = spawn(&core);
                                Executor::new(core, tasks)
                            })
                            .collect();
                        let mut done = vec![false; execs.len()];
                        loop {
                            for (i, e) in execs.iter_mut().enumerate() {
                                current.set(Some(e.core().id));
                                e.run_ready();
                                e.core().progress();
                                if !done[i] && e.live_tasks() == 0 {
                                    done[i] = true;
                                    finished.fetch_add(1, Ordering::AcqRel);
                                }
                            }
                            if finished.load(Ordering::Acquire) == workers
                                || failed.load(Ordering::Acquire)
                            {
                                break;
                            }
                        }
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
