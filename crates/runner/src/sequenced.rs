//! Sequenced lanes: how a deterministic protocol (CALVIN) runs a workload
//! ([`atoll_txn::sequenced`]). Each co-routine is a lane: it draws its requests for an
//! epoch with the records each declares, hands them to the protocol, runs the workload's
//! logic on whatever the protocol gives this node to execute, and waits at the epoch's
//! barrier. A transaction is counted (its effect, its latency from its arrival, the epoch's
//! wait included, and its history) by its first executing node only, in the window it
//! ends in.

use crate::node::NodeRuntime;
use crate::run::{coroutine_done, count_outcome, record_attempt, tick, RunShared, WorkerShared};
use crate::stats::Interval;
use atoll_fabric::rng::Rng;
use atoll_fabric::Endpoint;
use atoll_txn::{Abort, Coordinator, Protocol, SeqBatch, SeqInput, SeqTxn, Txn};
use atoll_workloads::{AccessMode, Draw, Outcome, TxnInput, Workload};
use std::rc::Rc;
use std::sync::{mpsc, Arc};

/// A lane told to wait by its source (the library's callers) looks again after this long.
const DRAW_WAIT_NS: u64 = 2_000;

/// One lane: epochs until the protocol says the run's last is over, or a node fails.
pub async fn lane<W: Workload, P: Protocol>(
    run: Arc<RunShared<W>>,
    node: Arc<NodeRuntime<W>>,
    ws: Rc<WorkerShared<W>>,
    ep: Endpoint,
    id: u32,
    progress: mpsc::Sender<Interval>,
) {
    let (nodes, home) = (run.catalog.nodes, run.catalog.topology().home_of(ep.node()));
    let mut rng = Rng::derive(run.cfg.seed, id as u64);
    let mut c = crate::run::node_coordinator(&run, &node, &ep, id);
    let lanes = run.txn.coordinators_per_node;
    let shape = P::seq_shape(&run.txn);
    // Bounded by the run's end: the lane that sees it marks its batch the last, and every
    // lane stops after that epoch.
    for epoch in 0u64.. {
        let start = c.now_ns();
        let mut requests = Vec::new();
        let mut last = false;
        while requests.len() < shape.batch_max as usize {
            let now = c.now_ns();
            tick(&run, &ws, &c.ep, now, &progress);
            if run.over(&node, now) {
                last = true;
                break;
            }
            if now.saturating_sub(start) >= shape.epoch_ns {
                break;
            }
            match run.w.draw(&mut rng, nodes, home) {
                Draw::Ready(ty, input) => {
                    let a = run.w.access_set(&input).unwrap_or_else(|| {
                        panic!(
                            "{}: a transaction of type {ty} without its records, which {} needs (the configuration check refuses such workloads)",
                            W::NAME,
                            P::NAME
                        )
                    });
                    let mut words = Vec::new();
                    input.encode(&mut words);
                    requests.push(SeqInput {
                        ty: ty as u16,
                        input: words,
                        accesses: a
                            .accesses()
                            .iter()
                            .map(|&(t, k, m)| (t, k, m == AccessMode::Write))
                            .collect(),
                        arrival_ns: now,
                    });
                }
                Draw::Wait => c.ep.sleep(DRAW_WAIT_NS).await,
                Draw::Done => {
                    node.drained_at(now);
                    last = true;
                    break;
                }
            }
        }
        node.begin_txn();
        let batch = SeqBatch {
            epoch,
            lane: id % lanes,
            lanes,
            last,
            requests,
        };
        if P::seq_dispatch(&mut c, batch).await.is_err() {
            break;
        }
        if execute_epoch::<W, P>(&run, &node, &ws, &mut c, id, epoch)
            .await
            .is_err()
        {
            break;
        }
        match P::seq_barrier(&mut c, epoch).await {
            Ok(true) => {}
            Ok(false) | Err(_) => break,
        }
    }
    run.cpu.mark_end();
    coroutine_done(&run, &node, &ws, &ep);
}

/// Runs what `epoch` gives this node to execute, one transaction at a time, in order.
async fn execute_epoch<W: Workload, P: Protocol>(
    run: &RunShared<W>,
    node: &NodeRuntime<W>,
    ws: &WorkerShared<W>,
    c: &mut Coordinator,
    id: u32,
    epoch: u64,
) -> Result<(), Abort> {
    // Bounded by the epoch's transactions: each turn ends one.
    while let Some(t) = P::seq_next(c, epoch).await? {
        execute::<W, P>(run, node, ws, c, id, &t).await;
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
        record_attempt(run, ws, &tx, id, 1, aborted, start_ns);
    }
    tx.end();
    if !t.records {
        return;
    }
    let end_ns = c.now_ns();
    let outcome = match &r {
        Ok(_) => Outcome::Committed { attempts: 1 },
        Err(a) => Outcome::Aborted {
            abort: *a,
            attempts: 1,
        },
    };
    // Counted in the window it ends in, up to the run's end: an epoch's requests arrive
    // together and run over the epoch after, so counting by arrival would take whole epochs
    // into the window or out of it (and the last epoch runs after the end).
    let measured = end_ns >= run.warmup_end_ns && end_ns <= run.end_ns;
    if let Err(a) = &r {
        if measured && *a != Abort::UserAbort {
            let mut st = ws.stats.borrow_mut();
            st.aborts[t.ty as usize][a.index()] += 1;
            st.interval.count_abort(*a);
        }
    }
    let latency_ns = end_ns.saturating_sub(t.arrival_ns);
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
