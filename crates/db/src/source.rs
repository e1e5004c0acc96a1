//! The library's transactions as a workload the runner's co-routines draw from: a queue
//! callers submit to (threads), or a generator each co-routine calls (a driven run, the
//! simulator's deterministic one).

use crate::schema::Schema;
use crate::tx::{LocalFuture, Tx};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::{Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use atoll_workloads::{
    AccessSet, CheckResult, Draw, InputDecodeError, Outcome, ParamError, Params, TxnInput,
    Workload, WorkloadShape,
};
use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A committed transaction's value, or a user's error, with its type erased.
pub(crate) type AnyBox = Box<dyn Any + Send>;

/// Why an attempt stopped without a value, as the job's body reports it.
pub(crate) enum Stop {
    Abort(Abort),
    User(AnyBox),
    Misuse(String),
    KeyCollision(String),
}

/// How a job ended, handed to whoever waits on it.
pub(crate) enum Answer {
    Committed(AnyBox),
    User(AnyBox),
    Misuse(String),
    KeyCollision(String),
    Aborted { reason: Abort, attempts: u32 },
    NodeFailed,
    Unknown,
    Closed,
}

/// A transaction's body with its types erased: runs one attempt.
pub(crate) type Body =
    Box<dyn for<'t, 'u> Fn(&'t mut Tx<'u>) -> LocalFuture<'t, Result<AnyBox, Stop>> + Send + Sync>;

/// One submitted transaction.
pub(crate) struct Job {
    pub(crate) ty: usize,
    pub(crate) body: Body,
    /// The user's error or misuse of the last attempt, answered if it was the last.
    stash: Mutex<Option<Answer>>,
    reply: Mutex<Option<Box<dyn FnOnce(Answer) + Send>>>,
    /// A co-routine took it (dropped unanswered after that, its co-routine died with it).
    drawn: AtomicBool,
    /// The keys it declared, if it did.
    pub(crate) declared: Option<crate::Declared>,
}

impl Job {
    pub(crate) fn new(ty: usize, body: Body, reply: Box<dyn FnOnce(Answer) + Send>) -> Job {
        Job {
            ty,
            body,
            stash: Mutex::new(None),
            reply: Mutex::new(Some(reply)),
            drawn: AtomicBool::new(false),
            declared: None,
        }
    }

    fn answer(&self, a: Answer) {
        let reply = self.reply.lock().map(|mut r| r.take()).ok().flatten();
        if let Some(reply) = reply {
            reply(a);
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let a = if self.drawn.load(Ordering::Relaxed) {
            Answer::Unknown
        } else {
            Answer::Closed
        };
        self.answer(a);
    }
}

/// A job as a workload input: it runs where it was submitted and never ships.
#[derive(Clone)]
pub(crate) struct JobRef(pub(crate) Arc<Job>);

impl std::fmt::Debug for JobRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "JobRef(type {})", self.0.ty)
    }
}

impl TxnInput for JobRef {
    fn encode(&self, out: &mut Vec<u64>) {
        out.push(self.0.ty as u64);
    }
    fn decode(_: &[u64]) -> Result<Self, InputDecodeError> {
        Err(InputDecodeError {
            workload: "library",
            reason: "a library transaction is code: it runs in the process that submitted it"
                .into(),
        })
    }
}

/// Bounded queue of submitted jobs.
pub(crate) struct Queue {
    jobs: Mutex<VecDeque<JobRef>>,
    /// Read without the lock by idle co-routines.
    len: AtomicUsize,
    closed: AtomicBool,
    room: Condvar,
    capacity: usize,
}

impl Queue {
    pub(crate) fn new(capacity: usize) -> Queue {
        Queue {
            jobs: Mutex::new(VecDeque::with_capacity(capacity)),
            len: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            room: Condvar::new(),
            capacity,
        }
    }

    /// Adds a job, waiting while the queue is full; `Err` once closed.
    pub(crate) fn push(&self, job: JobRef) -> Result<(), JobRef> {
        let mut q = self.jobs.lock().expect("no poisoned queue");
        while q.len() >= self.capacity && !self.closed.load(Ordering::Acquire) {
            q = self.room.wait(q).expect("no poisoned queue");
        }
        if self.closed.load(Ordering::Acquire) {
            return Err(job);
        }
        q.push_back(job);
        self.len.store(q.len(), Ordering::Release);
        Ok(())
    }

    fn pop(&self) -> Draw<JobRef> {
        if self.len.load(Ordering::Acquire) == 0 {
            return if self.closed.load(Ordering::Acquire) {
                Draw::Done
            } else {
                Draw::Wait
            };
        }
        let mut q = self.jobs.lock().expect("no poisoned queue");
        match q.pop_front() {
            Some(j) => {
                self.len.store(q.len(), Ordering::Release);
                self.room.notify_one();
                Draw::Ready(j.0.ty, j)
            }
            None if self.closed.load(Ordering::Acquire) => Draw::Done,
            None => Draw::Wait,
        }
    }

    /// The engine stopped: no job is accepted, and those queued are dropped, each answered
    /// [`Answer::Closed`] (none waits on a run that is over).
    pub(crate) fn abandon(&self) {
        let dropped: Vec<JobRef> = {
            let mut q = self.jobs.lock().expect("no poisoned queue");
            self.closed.store(true, Ordering::Release);
            self.len.store(0, Ordering::Release);
            self.room.notify_all();
            q.drain(..).collect()
        };
        // Answered outside the lock: an answer wakes its caller.
        drop(dropped);
    }

    /// No job is accepted any more; those queued still run.
    pub(crate) fn close(&self) {
        let _q = self.jobs.lock().expect("no poisoned queue");
        self.closed.store(true, Ordering::Release);
        self.room.notify_all();
    }
}

/// Draws a transaction for a co-routine (its rng, its coordinator's home node); `None`
/// ends the co-routine.
pub type Generator = dyn Fn(&mut Rng, NodeId) -> Option<crate::Job> + Send + Sync;

pub(crate) enum Source {
    Queue(Arc<Queue>),
    Generator(Box<Generator>),
}

/// What callers can read while a database runs and after.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) committed: AtomicU64,
    pub(crate) attempts: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) user_aborted: AtomicU64,
    pub(crate) gave_up: AtomicU64,
}

/// The library's transactions as a [`Workload`].
pub(crate) struct Library {
    pub(crate) schema: Schema,
    pub(crate) specs: Vec<TableSpec>,
    pub(crate) tables: Vec<crate::schema::TableMeta>,
    pub(crate) types: &'static [&'static str],
    pub(crate) source: Source,
    pub(crate) counters: Arc<Counters>,
    /// The merged ledger's counts once the run is checked: what [`crate::run`] reports,
    /// also when the transactions ran in other processes.
    pub(crate) merged: Arc<Mutex<Option<Ledger>>>,
    /// The transactions run in other processes (`atoll cluster`'s nodes): this process's
    /// counters see none of them.
    pub(crate) remote: bool,
}

/// Committed attempts and how transactions ended, counted by each worker, for the ledger
/// the runner merges (the same counts as [`Counters`], which callers read live).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Ledger {
    /// Committed attempts recorded: values and user errors.
    pub(crate) recorded: u64,
    pub(crate) committed: u64,
    pub(crate) attempts: u64,
    pub(crate) retried: u64,
    pub(crate) user_aborted: u64,
    pub(crate) gave_up: u64,
}

/// A committed attempt's answer (its value, or the user's error its committed reads
/// confirmed), given when it is recorded.
pub(crate) struct Effect {
    job: JobRef,
    answer: Answer,
}

impl Workload for Library {
    /// A database's insert into a full budget aborts `table_full` and the database keeps
    /// serving; a generated run (`atoll::run`) is a benchmark and stops there.
    fn stops_at_the_memory_budget(&self) -> bool {
        !matches!(self.source, Source::Queue(_))
    }

    type Input = JobRef;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = ();
    const NAME: &'static str = "library";
    const ABOUT: &'static str = "the transactions a program submits through atoll's library";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] = &[];
    const DELETES: bool = true;
    const INSERTS: bool = true;

    fn configure(_: &Params, _: &WorkloadShape) -> Result<Self, ParamError> {
        Err(ParamError(
            "the library's workload is built by atoll::Db, not from knobs".into(),
        ))
    }

    fn txn_types(&self) -> &'static [&'static str] {
        self.types
    }

    fn tables(&self, _nodes: u16) -> Vec<TableSpec> {
        self.specs.clone()
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        self.schema.load_node(store)
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        let widest = (0..self.tables.len())
            .max_by_key(|&i| self.tables[i].record_words())
            .unwrap_or(0);
        vec![TableId(widest as u16); self.schema.write_set_max as usize]
    }

    fn generate(&self, _: &mut Rng, _: u16, _: NodeId) -> (usize, JobRef) {
        unreachable!("the library's co-routines draw with Workload::draw")
    }

    fn draw(&self, rng: &mut Rng, _nodes: u16, home: NodeId) -> Draw<JobRef> {
        let d = match &self.source {
            Source::Queue(q) => q.pop(),
            Source::Generator(g) => match g(rng, home) {
                Some(j) => {
                    let job = JobRef(Arc::new(j.0));
                    Draw::Ready(job.0.ty, job)
                }
                None => Draw::Done,
            },
        };
        if let Draw::Ready(_, j) = &d {
            j.0.drawn.store(true, Ordering::Relaxed);
        }
        d
    }

    fn access_set(&self, _: &JobRef) -> Option<AccessSet> {
        None
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &JobRef,
    ) -> Result<Effect, Abort> {
        let mut t = Tx::new(tx, &self.tables, self.schema.write_set_max);
        if let Some(d) = &input.0.declared {
            match d.resolve(&self.tables) {
                Ok(keys) => t.declare(keys),
                Err(m) => {
                    *input.0.stash.lock().expect("no poisoned stash") = Some(Answer::Misuse(m));
                    return Err(Abort::UserAbort);
                }
            }
        }
        let answer = match (input.0.body)(&mut t).await {
            Ok(value) => {
                t.apply().await?;
                Answer::Committed(value)
            }
            Err(Stop::Abort(a)) => return Err(a),
            // Its reads commit alone, so the user's decision stands only on a consistent
            // state: a failed validation re-runs the closure.
            Err(Stop::User(e)) => Answer::User(e),
            // Answered as they are, the attempt aborted so nothing it wrote is installed.
            Err(Stop::Misuse(m)) => {
                *input.0.stash.lock().expect("no poisoned stash") = Some(Answer::Misuse(m));
                return Err(Abort::UserAbort);
            }
            Err(Stop::KeyCollision(m)) => {
                *input.0.stash.lock().expect("no poisoned stash") = Some(Answer::KeyCollision(m));
                return Err(Abort::UserAbort);
            }
        };
        Ok(Effect {
            job: input.clone(),
            answer,
        })
    }

    fn record(&self, ledger: &mut Ledger, effect: Effect) {
        ledger.recorded += 1;
        let c = &self.counters;
        match &effect.answer {
            Answer::Committed(_) => {
                ledger.committed += 1;
                c.committed.fetch_add(1, Ordering::Relaxed)
            }
            _ => {
                ledger.user_aborted += 1;
                c.user_aborted.fetch_add(1, Ordering::Relaxed)
            }
        };
        effect.job.0.answer(effect.answer);
    }

    fn ended(&self, ledger: &mut Ledger, input: JobRef, outcome: Outcome) {
        let c = &self.counters;
        let attempts = match outcome {
            Outcome::Committed { attempts } | Outcome::Aborted { attempts, .. } => attempts,
            Outcome::Unknown => 0,
        };
        ledger.attempts += u64::from(attempts);
        c.attempts.fetch_add(u64::from(attempts), Ordering::Relaxed);
        let answer = match outcome {
            Outcome::Committed { attempts } => {
                ledger.retried += u64::from(attempts - 1);
                c.retried
                    .fetch_add(u64::from(attempts - 1), Ordering::Relaxed);
                return;
            }
            Outcome::Aborted {
                abort: Abort::UserAbort,
                ..
            } => {
                let stashed = input.0.stash.lock().expect("no poisoned stash").take();
                stashed.unwrap_or(Answer::Misuse(
                    "the transaction returned user_abort without an error".into(),
                ))
            }
            Outcome::Aborted {
                abort: Abort::NodeFailed,
                ..
            } => Answer::NodeFailed,
            Outcome::Aborted { abort, attempts } => {
                ledger.gave_up += 1;
                c.gave_up.fetch_add(1, Ordering::Relaxed);
                Answer::Aborted {
                    reason: abort,
                    attempts,
                }
            }
            Outcome::Unknown => Answer::Unknown,
        };
        input.0.answer(answer);
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        into.recorded += from.recorded;
        into.committed += from.committed;
        into.attempts += from.attempts;
        into.retried += from.retried;
        into.user_aborted += from.user_aborted;
        into.gave_up += from.gave_up;
    }

    fn check_node(&self, _: &Store, _: &Ledger) -> Self::NodeCheck {}

    fn check_cluster(&self, _: Vec<()>, ledger: &Ledger) -> Vec<CheckResult> {
        *self.merged.lock().expect("no poisoned ledger") = Some(*ledger);
        if self.remote {
            // The callers were answered in the node processes, whose counters are theirs.
            return Vec::new();
        }
        // The ledger is what the runner merged from every node; the counter is what the
        // co-routines answered callers with: two counts of the same commits.
        let c = &self.counters;
        let answered = c.committed.load(Ordering::Relaxed) + c.user_aborted.load(Ordering::Relaxed);
        vec![CheckResult {
            name: "library.every_commit_answered".into(),
            passed: ledger.recorded == answered,
            detail: format!(
                "{} commits merged, {answered} answered to callers",
                ledger.recorded
            ),
            binds: atoll_workloads::Binds::Always,
        }]
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        let mut k: BTreeMap<String, String> = self
            .schema
            .tables
            .iter()
            .map(|t| {
                (
                    format!("table.{}", t.name),
                    match (t.typed_bytes_max, t.byte_keys) {
                        (Some(b), _) => format!("typed, at most {b} bytes"),
                        (None, _) => format!("{} words", t.record_words),
                    } + &t.byte_keys.map_or(String::new(), |(b, _)| {
                        format!(", byte keys of at most {b} bytes")
                    }),
                )
            })
            .collect();
        k.insert(
            "write_set_max".into(),
            self.schema.write_set_max.to_string(),
        );
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_jobs_queued_when_the_engine_stops_are_answered_closed_and_no_more_are_taken() {
        let q = Queue::new(8);
        let answers = Arc::new(Mutex::new(Vec::new()));
        let job = |answers: &Arc<Mutex<Vec<&'static str>>>| {
            let a = answers.clone();
            let body: Body = Box::new(|_| Box::pin(async { Err(Stop::Misuse("unused".into())) }));
            JobRef(Arc::new(Job::new(
                0,
                body,
                Box::new(move |ans| {
                    a.lock().unwrap().push(match ans {
                        Answer::Closed => "closed",
                        _ => "other",
                    })
                }),
            )))
        };
        for _ in 0..3 {
            assert!(q.push(job(&answers)).is_ok());
        }
        q.abandon();
        assert_eq!(*answers.lock().unwrap(), ["closed"; 3]);
        assert!(q.push(job(&answers)).is_err());
        assert!(matches!(q.pop(), Draw::Done));
    }
}
