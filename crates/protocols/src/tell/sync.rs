//! Several commit managers' background work (Tell §4.2), on each manager's node: before
//! its tids run out, the manager takes the next block of `--tid-block` tids from the
//! store's counter (on the first storage node); every `--cm-sync-us` it sends each other
//! manager its summary (completed tids, `lav`, the commits they hold), which that manager
//! merges. A lone manager needs neither: every tid is its own.

use super::config::TellConfig;
use super::msg::{TellReply, TellRequest, FAMILY};
use super::node::{TellNode, CM_ROLE};
use super::participant::cm_index;
use atoll_fabric::NodeId;
use atoll_txn::NodeTask;
use std::future::Future;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::task::Poll;

/// How often a manager looks whether it needs its next block: well within the time a
/// block of the default 256 tids lasts at a million starts a second.
pub const BLOCK_CHECK_NS: u64 = 10_000;

/// The node's Tell background work: `main` (the management role, which returns at once
/// where it does not run) beside a commit manager's syncs where one runs here.
pub async fn with_syncs<F: Future<Output = ()>>(task: NodeTask, main: impl FnOnce(NodeTask) -> F) {
    let index = cm_index(task.catalog.topology(), task.ep.node());
    let cfg = *task.cfg.family_as::<TellConfig>();
    match index {
        Some(index) if cfg.commit_managers > 1 => {
            let ctx = SyncCtx {
                ep: task.ep.clone(),
                catalog: task.catalog.clone(),
                over: task.over.clone(),
                node: task.family_nodes.get(FAMILY),
                index,
                cfg,
            };
            join2(main(task), run(ctx)).await
        }
        _ => main(task).await,
    }
}

/// What a manager's syncs use of the node's task.
struct SyncCtx {
    ep: atoll_fabric::Endpoint,
    catalog: Arc<atoll_storage::Catalog>,
    over: Rc<dyn Fn(u64) -> bool>,
    node: Arc<TellNode>,
    /// The manager's index among the run's.
    index: u16,
    cfg: TellConfig,
}

/// The manager's loop until the run is over.
async fn run(ctx: SyncCtx) {
    let SyncCtx {
        ep: _,
        ref catalog,
        ref over,
        ref node,
        index,
        cfg,
    } = ctx;
    let peers: Vec<(u16, NodeId)> = catalog
        .topology()
        .service_nodes(CM_ROLE.name)
        .enumerate()
        .map(|(i, n)| (i as u16, n))
        .filter(|&(i, _)| i != index)
        .collect();
    let mut next_sync_ns = ctx.ep.now_ns() + cfg.cm_sync_ns;
    // Bounded by the run's end.
    loop {
        ctx.ep.sleep(BLOCK_CHECK_NS.min(cfg.cm_sync_ns)).await;
        let now = ctx.ep.now_ns();
        if over(now) {
            return;
        }
        if node.cm_wants_block(index, &cfg) {
            let req = TellRequest::TakeTids {
                count: cfg.tid_block,
            };
            // A failed op: the first storage node is down, which the run reports.
            let Ok(reply) = ctx.ep.rpc(NodeId(0), req.to_bytes()).await else {
                return;
            };
            match TellReply::of(&reply) {
                TellReply::Tids { first } => node.cm_add_block(index, &cfg, first),
                other => panic!("tell: the tid counter answered {other:?}"),
            }
        }
        if now >= next_sync_ns {
            let (summary, _) = node.cm_summary(index, &cfg);
            let req = TellRequest::Sync {
                from: index,
                summary,
            }
            .to_bytes();
            let mut d = ctx.ep.doorbell_for(peers.len());
            for &(_, n) in &peers {
                d.rpc(n, req.clone());
            }
            // A failed op: a peer is down (the run reports it); the next sync tries again.
            let _ = d.submit().await;
            next_sync_ns = now + cfg.cm_sync_ns;
        }
    }
}

/// Runs `a` and `b` to their ends on one task, polling both whenever it is woken (each
/// tolerates a poll it was not woken for, as every future must).
async fn join2(a: impl Future<Output = ()>, b: impl Future<Output = ()>) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut a_done, mut b_done) = (false, false);
    std::future::poll_fn(|cx| {
        if !a_done {
            a_done = a.as_mut().poll(cx).is_ready();
        }
        if !b_done {
            b_done = b.as_mut().poll(cx).is_ready();
        }
        if a_done && b_done {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await
}
