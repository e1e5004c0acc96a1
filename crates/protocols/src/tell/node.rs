//! What one node keeps of Tell: the commit manager, on the node that runs the role
//! [`CM_ROLE`], serving `start`, `set_committed` and `set_aborted` one at a time under its
//! lock (Tell's commit manager is one sequential state machine; several managers are
//! several nodes, merged every sync interval); and, on a storage node, the processing nodes
//! a recovery fenced.

use super::cm::CommitManager;
use super::msg::{TellReply, TellRequest};
use atoll_fabric::NodeId;
use atoll_storage::RoleSpec;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// The node role that runs a commit manager: on memory node 0 or a node of its own
/// (`--cm-node memory|own`).
pub const CM_ROLE: RoleSpec = RoleSpec {
    name: "cm",
    what: "commit manager",
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
}

impl TellNode {
    /// Serves one commit-manager request, the manager keeping at most `inflight_max` tids
    /// above its base (the run's setting; the first request makes it); `None` for a request
    /// that is not a commit manager's.
    pub fn serve_cm(&self, req: TellRequest, inflight_max: u64) -> Option<TellReply> {
        let mut guard = self.cm.lock().expect("no poisoned commit manager");
        let cm = guard.get_or_insert_with(|| CommitManager::single(inflight_max));
        let done = |r: Result<(), _>| r.map_or_else(TellReply::of_error, |()| TellReply::Done);
        Some(match req {
            TellRequest::Start { pn, read_only } => match cm.start(pn, read_only) {
                Ok(s) => TellReply::Started {
                    tid: s.tid,
                    snapshot: s.snapshot,
                    commits: s.commits,
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
            TellRequest::Get { .. }
            | TellRequest::PutIf { .. }
            | TellRequest::Insert { .. }
            | TellRequest::Fence { .. } => return None,
        })
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
        assert_eq!(n.cm_state(), None);
        let start = |ro| {
            let pn = crate::tell::cm::Pn(1);
            n.serve_cm(TellRequest::Start { pn, read_only: ro }, 2)
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
            n.serve_cm(TellRequest::SetCommitted { tid: Tid(t) }, 2)
                .unwrap()
        };
        assert_eq!(commit(1), TellReply::Committed { at: 1 });
        assert_eq!(commit(1), TellReply::NotActive { tid: Tid(1) });
        // Tid 2 (read-only) completed at its start, so the base is past both; it still
        // holds lav at the base it started at.
        assert_eq!(n.cm_state(), Some((2, 0)));
        assert_eq!(
            n.serve_cm(TellRequest::SetAborted { tid: Tid(2) }, 2)
                .unwrap(),
            TellReply::Done
        );
        assert_eq!(n.cm_state(), Some((2, 2)));
        let get = TellRequest::Get { items: vec![] };
        assert_eq!(n.serve_cm(get, 2), None, "a store's request");
    }
}
