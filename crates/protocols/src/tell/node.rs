//! What one node keeps of Tell: the commit manager, on a node that runs the role
//! [`CM_ROLE`], serving `start`, `set_committed` and `set_aborted` one at a time under its
//! lock (Tell's commit manager is one sequential state machine; several managers are
//! several nodes, merged every sync interval); on the first storage node, the store's tid
//! counter several managers take blocks from; on a storage node, the processing nodes a
//! recovery fenced; and on a processing node its shared record buffer (`--buffering sb`)
//! with the snapshot of its newest transaction.

use super::btree::NodeCache;
use super::buffer::SharedBuffer;
use super::cm::{CommitManager, Summary};
use super::config::TellConfig;
use super::descriptor::Descriptor;
use super::msg::{TellReply, TellRequest};
use atoll_fabric::NodeId;
use atoll_storage::RoleSpec;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The node role that runs a commit manager: `--commit-managers N` of them, manager `i` on
/// memory node `i` or each on a node of its own (`--cm-node memory|own`).
pub const CM_ROLE: RoleSpec = RoleSpec {
    name: "cm",
    what: "commit manager",
    count_knob: Some(super::config::COMMIT_MANAGERS.name),
};

/// One node's Tell state.
#[derive(Default)]
pub struct TellNode {
    /// The commit manager, made by the first request this node serves.
    cm: Mutex<Option<CommitManager>>,
    /// Nodes declared crashed, whose puts and inserts a storage node refuses; `any_fenced`
    /// spares every put the lock while there is none.
    fenced: Mutex<Vec<NodeId>>,
    any_fenced: AtomicBool,
    /// The store's tid counter (served on the first storage node): the next tid no
    /// manager's block holds yet, 0 before the first block is taken.
    tids_next: AtomicU64,
    /// A processing node's shared buffer (made by its first buffered read).
    buffer: Mutex<Option<NodeBuffer>>,
    /// The snapshot of the newest transaction this processing node started: every tid it
    /// sees had completed when it was handed out (SB's `V_max`).
    newest: Mutex<Option<Descriptor>>,
    /// A processing node's cached inner nodes of each B+tree (`--tell-index btree`), by
    /// table and storage node; bounded by the trees' inner nodes.
    trees: Mutex<std::collections::HashMap<(atoll_storage::TableId, NodeId), NodeCache>>,
    /// The B+tree region's layout (made by the first lookup; the same on every node).
    tree_layout: std::sync::OnceLock<super::tree_store::TreeLayout>,
    /// A storage node's keys inserted into its trees since the load, and the keys whose
    /// share of the trees' growth it took from the run's memory budget so far.
    tree_keys: AtomicU64,
    tree_keys_covered: AtomicU64,
}

/// Keys whose share of the trees' growth a storage node takes from the budget at a time.
const TREE_KEYS_PER_TAKE: u64 = 4096;

/// A record in a processing node's buffer, by table, storage node and key: its slot and
/// the slot's words as fetched.
pub type NodeBuffer = SharedBuffer<(atoll_storage::TableId, NodeId, u64), (u32, Vec<u64>)>;

/// The commit manager processing node `pn` starts its transactions at: manager `pn mod N`
/// of the run's `N`.
pub fn cm_of(topology: &atoll_storage::Topology, pn: super::cm::Pn) -> NodeId {
    let managers = topology.service_nodes(CM_ROLE.name).count();
    assert!(managers > 0, "a tell run places its commit managers");
    topology
        .service_nodes(CM_ROLE.name)
        .nth(pn.0 as usize % managers)
        .expect("a manager below the count")
}

/// Where manager `index` of several begins: its first block, so that no start waits for a
/// block at the run's beginning; the counter hands out blocks after every manager's first.
pub fn first_block(index: u16, cfg: &TellConfig) -> u64 {
    1 + index as u64 * cfg.tid_block
}

impl TellNode {
    /// The processing node's cache of the tree of `t` on storage node `node`.
    pub fn tree_cache(&self, t: atoll_storage::TableId, node: NodeId) -> NodeCache {
        self.trees
            .lock()
            .expect("tell: tree caches poisoned")
            .entry((t, node))
            .or_default()
            .clone()
    }

    /// Makes sure the run's memory budget covers one more key in this storage node's
    /// trees of `fanout` (taking a share for [`TREE_KEYS_PER_TAKE`] keys when it does
    /// not); `false` when the budget refuses.
    pub fn cover_tree_key(&self, store: &atoll_storage::Store, fanout: u32) -> bool {
        let next = self.tree_keys.load(Ordering::Relaxed) + 1;
        let covered = self.tree_keys_covered.load(Ordering::Relaxed);
        if next <= covered {
            return true;
        }
        let per_key = super::tree_store::TreeLayout::bytes_per_key(fanout);
        let taken = store.budget().take(
            || "Tell's B+tree index".into(),
            store.memory().node.0,
            covered * per_key,
            TREE_KEYS_PER_TAKE * per_key,
        );
        if taken.is_err() {
            return false;
        }
        self.tree_keys_covered
            .fetch_add(TREE_KEYS_PER_TAKE, Ordering::Relaxed);
        true
    }

    /// A key went into this storage node's trees (its share covered first).
    pub fn tree_key_inserted(&self) {
        self.tree_keys.fetch_add(1, Ordering::Relaxed);
    }

    /// The B+tree region's layout, made by `make` the first time.
    pub fn tree_layout(
        &self,
        make: impl FnOnce() -> super::tree_store::TreeLayout,
    ) -> &super::tree_store::TreeLayout {
        self.tree_layout.get_or_init(make)
    }

    /// Serves one request to commit manager `index` of the run's (`cfg`; the first
    /// request makes it); `None` for a request that is not a commit manager's.
    pub fn serve_cm(&self, req: TellRequest, index: u16, cfg: &TellConfig) -> Option<TellReply> {
        let mut guard = self.cm.lock().expect("no poisoned commit manager");
        let cm = guard.get_or_insert_with(|| Self::new_cm(index, cfg));
        let done = |r: Result<(), _>| r.map_or_else(TellReply::of_error, |()| TellReply::Done);
        Some(match req {
            TellRequest::Start { pn, read_only } => match cm.start(pn, read_only) {
                Ok(s) => TellReply::Started {
                    tid: s.tid,
                    snapshot: s.snapshot,
                    seen: s.seen,
                },
                Err(e) => TellReply::of_error(e),
            },
            TellRequest::SetCommitted { tid } => match cm.set_committed(tid) {
                Ok(at) => TellReply::Committed { at },
                Err(e) => TellReply::of_error(e),
            },
            TellRequest::SetAborted { tid } => done(cm.set_aborted(tid)),
            TellRequest::Recover { pn } => TellReply::Active(cm.recover(pn)),
            TellRequest::State => TellReply::State {
                base: cm.base(),
                lav: cm.lav(),
            },
            TellRequest::Sync { from, summary } => {
                if from == index
                    || from >= cfg.commit_managers
                    || summary.seen.len() != cfg.commit_managers as usize
                {
                    return None;
                }
                cm.merge_from(from, &summary);
                TellReply::Done
            }
            TellRequest::Get { .. }
            | TellRequest::PutIf { .. }
            | TellRequest::Insert { .. }
            | TellRequest::Fence { .. }
            | TellRequest::TakeTids { .. }
            | TellRequest::Stamps { .. } => return None,
        })
    }

    fn new_cm(index: u16, cfg: &TellConfig) -> CommitManager {
        if cfg.commit_managers == 1 {
            return CommitManager::single(cfg.cm_inflight_max);
        }
        let mut cm = CommitManager::one_of(index, cfg.commit_managers, cfg.cm_inflight_max);
        cm.add_block(first_block(index, cfg), cfg.tid_block);
        cm
    }

    /// The next `count` tids of the store's counter (this node holds it), after every
    /// manager's first block.
    pub fn take_tids(&self, count: u64, cfg: &TellConfig) -> u64 {
        let after_first = first_block(cfg.commit_managers, cfg);
        let _ =
            self.tids_next
                .compare_exchange(0, after_first, Ordering::AcqRel, Ordering::Acquire);
        self.tids_next.fetch_add(count, Ordering::AcqRel)
    }

    /// Manager `index`'s summary for the others, and whether it wants another block of
    /// tids (fewer than `tid_block` left to hand out, none queued); made on first use.
    pub fn cm_summary(&self, index: u16, cfg: &TellConfig) -> (Summary, bool) {
        let mut guard = self.cm.lock().expect("no poisoned commit manager");
        let cm = guard.get_or_insert_with(|| Self::new_cm(index, cfg));
        (cm.summary(), Self::wants_block(cm, cfg))
    }

    /// Whether manager `index` wants another block of tids.
    pub fn cm_wants_block(&self, index: u16, cfg: &TellConfig) -> bool {
        let mut guard = self.cm.lock().expect("no poisoned commit manager");
        let cm = guard.get_or_insert_with(|| Self::new_cm(index, cfg));
        Self::wants_block(cm, cfg)
    }

    fn wants_block(cm: &CommitManager, cfg: &TellConfig) -> bool {
        cm.blocks_queued() == 0 && cm.tids_left() < cfg.tid_block
    }

    /// Gives manager `index` the block of tids from `first` on.
    pub fn cm_add_block(&self, index: u16, cfg: &TellConfig, first: u64) {
        let mut guard = self.cm.lock().expect("no poisoned commit manager");
        let cm = guard.get_or_insert_with(|| Self::new_cm(index, cfg));
        cm.add_block(first, cfg.tid_block);
    }

    /// Refuses `node`'s puts and inserts from now on.
    pub fn fence(&self, node: NodeId) {
        let mut f = self.fenced.lock().expect("no poisoned fence list");
        if !f.contains(&node) {
            f.push(node);
        }
        self.any_fenced.store(true, Ordering::Release);
    }

    /// Whether `node` was fenced.
    pub fn is_fenced(&self, node: NodeId) -> bool {
        self.any_fenced.load(Ordering::Acquire)
            && self
                .fenced
                .lock()
                .expect("no poisoned fence list")
                .contains(&node)
    }

    /// This processing node's buffer, made with `capacity()` records by its first use.
    pub fn buffer(
        &self,
        capacity: impl FnOnce() -> usize,
    ) -> std::sync::MutexGuard<'_, Option<NodeBuffer>> {
        let mut g = self.buffer.lock().expect("no poisoned buffer");
        g.get_or_insert_with(|| SharedBuffer::new(capacity().max(1)));
        g
    }

    /// A transaction of this node started with `snapshot`: the newest, if its tids reach
    /// at least as far as the one kept (snapshots of one manager only grow).
    pub fn started(&self, snapshot: &Descriptor) {
        let mut g = self.newest.lock().expect("no poisoned snapshot");
        if g.as_ref()
            .is_none_or(|d| d.last <= snapshot.last && d.base <= snapshot.base)
        {
            *g = Some(snapshot.clone());
        }
    }

    /// The snapshot of the newest transaction this node started (SB's `V_max`).
    pub fn newest(&self) -> Option<Descriptor> {
        self.newest.lock().expect("no poisoned snapshot").clone()
    }

    /// The manager's base and `lav` now (for a report or a check); `None` before it served.
    pub fn cm_state(&self) -> Option<(u64, u64)> {
        let guard = self.cm.lock().expect("no poisoned commit manager");
        guard.as_ref().map(|cm| (cm.base(), cm.lav()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tell::descriptor::Tid;

    #[test]
    fn tell_a_commit_manager_node_hands_out_tids_and_refuses_what_it_cannot_do_by_a_typed_reply() {
        let n = TellNode::default();
        let cfg = TellConfig {
            cm_inflight_max: 2,
            ..TellConfig::default()
        };
        assert_eq!(n.cm_state(), None);
        let start = |ro| {
            let pn = crate::tell::cm::Pn(1);
            n.serve_cm(TellRequest::Start { pn, read_only: ro }, 0, &cfg)
                .expect("a commit manager's request")
        };
        let TellReply::Started { tid, snapshot, .. } = start(false) else {
            panic!("no tid");
        };
        assert_eq!((tid, snapshot.base), (Tid(1), 0));
        assert!(matches!(
            start(true),
            TellReply::Started { tid: Tid(2), .. }
        ));
        // Two tids above the base 0: a third is over the limit.
        assert_eq!(
            start(false),
            TellReply::InFlight {
                next: 3,
                base: 0,
                max: 2
            }
        );
        let commit = |t| {
            n.serve_cm(TellRequest::SetCommitted { tid: Tid(t) }, 0, &cfg)
                .unwrap()
        };
        assert_eq!(commit(1), TellReply::Committed { at: 1 });
        assert_eq!(commit(1), TellReply::NotActive { tid: Tid(1) });
        // Tid 2 (read-only) completed at its start, so the base is past both; it still
        // holds lav at the base it started at.
        assert_eq!(n.cm_state(), Some((2, 0)));
        assert_eq!(
            n.serve_cm(TellRequest::SetAborted { tid: Tid(2) }, 0, &cfg)
                .unwrap(),
            TellReply::Done
        );
        assert_eq!(n.cm_state(), Some((2, 2)));
        let get = TellRequest::Get { items: vec![] };
        assert_eq!(n.serve_cm(get, 0, &cfg), None, "a store's request");
    }
}
