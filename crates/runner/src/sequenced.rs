//! Sequenced lanes: how a deterministic protocol (CALVIN) runs a workload
//! ([`atoll_txn::sequenced`]). Each co-routine is a lane: it draws its requests for an
//! epoch with the records each declares, hands them to the protocol, runs the workload's
//! logic on whatever the protocol gives this node to execute, and waits at the epoch's
//! barrier. A transaction is counted (its effect, its latency from its arrival, the epoch's
//! wait included, and its history) by its first executing node only, in the window it
//! ends in.

use crate::node::NodeRuntime;
use crate::run::{
    coroutine_done, count_outcome, record_attempt, tick, OpenLoop, RunShared, WorkerShared,
};
use crate::stats::Interval;
use atoll_fabric::rng::Rng;
use atoll_fabric::Endpoint;
use atoll_txn::{
    Abort, Coordinator, EpochLog, EpochLogMode, Protocol, SeqBatch, SeqInput, SeqShape, SeqTxn, Txn,
};
use atoll_workloads::{AccessMode, Draw, Outcome, TxnInput, Workload};
use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::{mpsc, Arc};

/// A lane told to wait by its source (the library's callers) looks again after this long.
const DRAW_WAIT_NS: u64 = 2_000;

/// Transactions a lane holds to sequence again ([`Again`]), at most, in batches of its
/// epoch: past it one gives up (counted) rather than grow the queue without bound.
const AGAIN_BATCHES_MAX: usize = 4;

/// A transaction whose records changed since its reconnaissance (`keys_changed`): this
/// lane sequences it again in a later epoch, with a new reconnaissance.
struct Again<I> {
    ty: usize,
    input: I,
    arrival_ns: u64,
    attempt: u32,
}

/// One lane: epochs until the protocol says the run's last is over, or a node fails.
pub async fn lane<W: Workload, P: Protocol>(
    run: Arc<RunShared<W>>,
    node: Arc<NodeRuntime<W>>,
    ws: Rc<WorkerShared<W>>,
    ep: Endpoint,
    id: u32,
    progress: mpsc::Sender<Interval>,
) {
    let mut c = crate::run::node_coordinator(&run, &node, &ep, id);
    let mut src = Source {
        rng: Rng::derive(run.cfg.seed, id as u64),
        pending: None,
        again: VecDeque::new(),
        schedule: OpenLoop::new(&run, c.now_ns(), id),
        shape: P::seq_shape(&run.txn),
        progress,
    };
    let lanes = run.txn.coordinators_per_node;
    // Bounded by the run's end: the lane that sees it marks its batch the last, and every
    // lane stops after that epoch.
    for epoch in 0u64.. {
        let start_ns = c.now_ns();
        let lane = id % lanes;
        let (requests, last) = match &run.cfg.epoch_log {
            Some(EpochLogMode::Replay(log)) => replayed(log, epoch, c.node().0, lane),
            _ => collect::<W, P>(&run, &node, &ws, &mut c, &mut src).await,
        };
        if let Some(EpochLogMode::Record(log)) = &run.cfg.epoch_log {
            log.record(epoch, c.node().0, lane, last, &requests);
        }
        let n = requests.len() as u64;
        node.begin_txn();
        let batch = SeqBatch {
            epoch,
            lane,
            lanes,
            last,
            requests,
        };
        let dispatch_ns = c.now_ns();
        if P::seq_dispatch(&mut c, batch).await.is_err() {
            break;
        }
        let run_ns = c.now_ns();
        if execute_epoch::<W, P>(&run, &node, &ws, &mut c, id, epoch, &mut src.again)
            .await
            .is_err()
        {
            break;
        }
        let barrier_ns = c.now_ns();
        let more = P::seq_barrier(&mut c, epoch).await;
        let end_ns = c.now_ns();
        if end_ns >= run.warmup_end_ns && end_ns <= run.end_ns {
            let mut st = ws.stats.borrow_mut();
            let q = &mut st.seq;
            q.lane_epochs += 1;
            q.epoch_ns += end_ns - start_ns;
            q.requests += n;
            q.sequence_ns += dispatch_ns - start_ns;
            q.dispatch_ns += run_ns - dispatch_ns;
            q.run_ns += barrier_ns - run_ns;
            q.barrier_ns += end_ns - barrier_ns;
        }
        if more != Ok(true) {
            break;
        }
    }
    run.cpu.mark_end();
    coroutine_done(&run, &node, &ws, &ep);
}

/// Where a lane's requests come from: the workload's generator, drawn at once (a closed
/// loop: the lane's clients each wait for their request's epoch) or on a schedule (`--rate`).
struct Source<I> {
    rng: Rng,
    /// A request drawn that did not fit its epoch's batch: the next one's first.
    pending: Option<SeqInput>,
    /// Transactions to sequence again (before new ones are drawn), oldest first.
    again: VecDeque<Again<I>>,
    schedule: Option<OpenLoop>,
    shape: SeqShape,
    progress: mpsc::Sender<Interval>,
}

/// Collects one epoch's requests: until the epoch's time is up (the sequencer's timer, as
/// Calvin's), at most `batch_max` of them; a request that arrives over the cap waits for the
/// next epoch (in an open loop its latency counts from its scheduled arrival). The batch is
/// the run's last when the run is over or the source drained.
async fn collect<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    c: &mut Coordinator,
    src: &mut Source<W::Input>,
) -> (Vec<SeqInput>, bool) {
    let (nodes, topo) = (run.catalog.nodes, *run.catalog.topology());
    let epoch_end_ns = c.now_ns() + src.shape.epoch_ns;
    let mut requests: Vec<SeqInput> = Vec::new();
    let mut words = 0;
    // Bounded by the epoch's end: each turn draws one request or sleeps towards it.
    loop {
        let now = c.now_ns();
        tick(run, ws, &c.ep, now, &src.progress);
        if run.over(node, now) {
            return (requests, true);
        }
        if now >= epoch_end_ns {
            return (requests, false);
        }
        let until_ns = epoch_end_ns.min(run.end_ns);
        let full = requests.len() >= src.shape.batch_max as usize;
        if let Some(r) = src.pending.take_if(|r| !full && fits(&src.shape, words, r)) {
            words += r.words();
            requests.push(r);
            continue;
        }
        if !full && src.pending.is_none() {
            if let Some(a) = src.again.pop_front() {
                let (ty, attempt) = (a.ty, a.attempt);
                let r =
                    sequenced_input::<W, P>(run, ws, c, ty, &a.input, a.arrival_ns, attempt).await;
                if let Some(r) = r {
                    src.pending = Some(r);
                }
                continue;
            }
        }
        let arrival_ns = match &mut src.schedule {
            _ if full || src.pending.is_some() => {
                c.ep.sleep(until_ns.saturating_sub(now).max(1)).await;
                continue;
            }
            Some(s) if s.next_ns() > now => {
                c.ep.sleep(s.next_ns().min(until_ns).saturating_sub(now).max(1))
                    .await;
                continue;
            }
            Some(s) => {
                let at = s.next_ns();
                s.advance();
                at
            }
            None => now,
        };
        let home = topo.home_for(c.ep.node(), |m| src.rng.below(m as u64) as u16);
        match run.w.draw(&mut src.rng, nodes, home) {
            Draw::Ready(ty, input) => {
                let Some(r) = sequenced_input::<W, P>(run, ws, c, ty, &input, arrival_ns, 1).await
                else {
                    continue;
                };
                // A request over a whole batch's words could never be dispatched.
                assert!(
                    r.words() <= src.shape.words_max,
                    "{}: a request of {} words, over a whole batch's {}",
                    W::NAME,
                    r.words(),
                    src.shape.words_max
                );
                if fits(&src.shape, words, &r) {
                    words += r.words();
                    requests.push(r);
                } else {
                    src.pending = Some(r);
                }
            }
            Draw::Wait => c.ep.sleep(DRAW_WAIT_NS).await,
            Draw::Done => {
                node.drained_at(now);
                return (requests, true);
            }
        }
    }
}

/// Whether `r` fits a batch of `words` words so far.
fn fits(shape: &SeqShape, words: u64, r: &SeqInput) -> bool {
    words.saturating_add(r.words()) <= shape.words_max
}

/// A replayed epoch: the batch the recorded run's lane dispatched, as recorded (its
/// arrivals are the transactions' dates, so latencies measured in a replay mean little). A
/// lane of the recorded run stopped after the epoch some lane's batch was the last of, so
/// every lane finds its batches up to it; past it (a log of another shape) the replay ends.
fn replayed(log: &EpochLog, epoch: u64, node: u16, lane: u32) -> (Vec<SeqInput>, bool) {
    log.batch(epoch, node, lane)
        .map_or((Vec::new(), true), |(last, requests)| (requests, last))
}

/// A drawn transaction as a lane dispatches it: its input in words and its records, from
/// its input or from a reconnaissance read now (counted); `None` if the reconnaissance
/// aborted (counted as the transaction's abort: it never reaches an epoch).
async fn sequenced_input<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    ws: &WorkerShared<W>,
    c: &mut Coordinator,
    ty: usize,
    input: &W::Input,
    arrival_ns: u64,
    attempt: u32,
) -> Option<SeqInput> {
    let a = match run.w.access_set(input) {
        Some(a) => a,
        None => {
            let mut tx = Txn::<P>::begin(c);
            let found = run.w.reconnoiter(&mut tx, input).await;
            tx.rollback().await;
            tx.end();
            let measured = c.now_ns() >= run.warmup_end_ns;
            let mut st = ws.stats.borrow_mut();
            if measured {
                st.seq.reconnaissance += 1;
            }
            match found {
                Ok(Some(a)) => a,
                Ok(None) => panic!(
                    "{}: a transaction of type {ty} without its records, which a sequenced protocol needs (the configuration check refuses such mixes)",
                    W::NAME
                ),
                Err(abort) => {
                    if measured {
                        st.aborts[ty][abort.index()] += 1;
                        st.interval.count_abort(abort);
                    }
                    return None;
                }
            }
        }
    };
    let mut words = Vec::new();
    input.encode(&mut words);
    Some(SeqInput {
        ty: ty as u16,
        input: words,
        accesses: a
            .accesses()
            .iter()
            .map(|&(t, k, m)| (t, k, m == AccessMode::Write))
            .collect(),
        arrival_ns,
        attempt,
    })
}

/// Runs what `epoch` gives this node to execute, one transaction at a time, in order.
async fn execute_epoch<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    c: &mut Coordinator,
    id: u32,
    epoch: u64,
    again: &mut VecDeque<Again<W::Input>>,
) -> Result<(), Abort> {
    // Bounded by the epoch's transactions: each turn ends one.
    while let Some(t) = P::seq_next(c, epoch).await? {
        execute::<W, P>(run, node, ws, c, id, &t, again).await;
        P::seq_finish(c, &t).await?;
    }
    Ok(())
}

/// Executes sequenced transaction `t` on this node: the workload's logic over the values
/// the protocol gathered, and its writes here; counted if this node records it.
async fn execute<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    c: &mut Coordinator,
    id: u32,
    t: &SeqTxn,
    again: &mut VecDeque<Again<W::Input>>,
) {
    let input = W::Input::decode(&t.input)
        .unwrap_or_else(|e| panic!("{}: a sequenced input that does not decode: {e}", W::NAME));
    let start_ns = c.now_ns();
    let mut tx = Txn::<P>::begin_sequenced(c, t);
    if let Some((txn_ns, _)) = run.txn_cpu_ns {
        tx.compute(txn_ns).await;
    }
    let executed = run.w.execute(&mut tx, &input).await;
    let r = match executed {
        Ok(effect) => match tx.commit().await {
            Ok(stages) => Ok((effect, stages, tx.footprint())),
            Err(a) => Err(a),
        },
        Err(a) => {
            tx.rollback().await;
            Err(a)
        }
    };
    if t.records && run.cfg.record_history {
        let aborted = r.as_ref().err().map(|a| a.name().to_string());
        record_attempt(run, ws, &tx, id, t.attempt, aborted, start_ns);
    }
    tx.end();
    let end_ns = c.now_ns();
    if end_ns >= run.warmup_end_ns && end_ns <= run.end_ns {
        ws.stats.borrow_mut().seq.executions += 1;
    }
    if !t.records {
        return;
    }
    // Counted in the window it ends in, up to the run's end: an epoch's requests arrive
    // together and run over the epoch after, so counting by arrival would take whole epochs
    // into the window or out of it (and the last epoch runs after the end).
    let measured = end_ns >= run.warmup_end_ns && end_ns <= run.end_ns;
    let input = if matches!(r, Err(Abort::KeysChanged)) {
        match sequence_again::<W, P>(run, ws, t, input, measured, again) {
            Ok(()) => return,
            Err(input) => input,
        }
    } else {
        input
    };
    end::<W>(run, node, ws, t, r, measured, end_ns, input);
}

/// Calvin's OLLP: `t`'s records changed since its reconnaissance, so this lane sequences
/// it again (a replay finds it in the log's later epochs instead), unless it is out of
/// attempts or the lane's queue is full: then `Err(input)`, for its end to be counted.
fn sequence_again<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    ws: &WorkerShared<W>,
    t: &SeqTxn,
    input: W::Input,
    measured: bool,
    again: &mut VecDeque<Again<W::Input>>,
) -> Result<(), W::Input> {
    let replaying = matches!(run.cfg.epoch_log, Some(EpochLogMode::Replay(_)));
    let room = again.len() < AGAIN_BATCHES_MAX * P::seq_shape(&run.txn).batch_max as usize;
    if t.attempt >= run.cfg.attempts_max || !room || replaying {
        return Err(input);
    }
    if measured {
        let mut st = ws.stats.borrow_mut();
        st.aborts[t.ty as usize][Abort::KeysChanged.index()] += 1;
        st.interval.count_abort(Abort::KeysChanged);
        st.seq.sequenced_again += 1;
    }
    again.push_back(Again {
        ty: t.ty as usize,
        input,
        arrival_ns: t.arrival_ns,
        attempt: t.attempt + 1,
    });
    Ok(())
}

/// Counts how recorded transaction `t` ended (committed, or aborted for good) and hands
/// its outcome to the workload.
#[allow(clippy::too_many_arguments)]
fn end<W: Workload>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    t: &SeqTxn,
    r: Result<
        (
            W::Effect,
            [u64; atoll_txn::Stage::COUNT],
            atoll_txn::Footprint,
        ),
        Abort,
    >,
    measured: bool,
    end_ns: u64,
    input: W::Input,
) {
    let outcome = match &r {
        Ok(_) => Outcome::Committed {
            attempts: t.attempt,
        },
        Err(a) => Outcome::Aborted {
            abort: *a,
            attempts: t.attempt,
        },
    };
    if let Err(a) = &r {
        if measured && *a != Abort::UserAbort {
            let mut st = ws.stats.borrow_mut();
            st.aborts[t.ty as usize][a.index()] += 1;
            st.interval.count_abort(*a);
        }
    }
    let latency_ns = end_ns.saturating_sub(t.arrival_ns);
    if measured && r.is_ok() {
        let mut st = ws.stats.borrow_mut();
        let q = &mut st.seq;
        q.txns += 1;
        q.queued_ns += t.taken_ns.saturating_sub(t.arrival_ns);
        q.forward_ns += t.gathered_ns.saturating_sub(t.taken_ns);
        q.execute_ns += end_ns.saturating_sub(t.gathered_ns);
        q.second_pass += u64::from(t.second_pass);
    }
    count_outcome(
        run,
        node,
        ws,
        t.ty as usize,
        r,
        measured,
        end_ns,
        latency_ns,
    );
    run.w.ended(&mut ws.ledger.borrow_mut(), input, outcome);
}
