//! CALVIN's participant: batches, forwarded values and EPOCH_DONEs from other nodes go
//! into this node's [`CalvinNode`], checked first (a malformed or inconsistent message is
//! refused, never applied).

use super::msg::{CalvinRequest, FAMILY};
use super::node::CalvinNode;
use atoll_fabric::ReplyTo;
use atoll_txn::handler::{Local, Participant};
use atoll_txn::msg::{FamilyId, Reply};
use std::sync::Arc;

/// CALVIN's participant side of one node, over the node's state its lanes share.
pub struct CalvinParticipant {
    pub node: Arc<CalvinNode>,
}

impl Participant for CalvinParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &Local, _from: ReplyTo, body: &[u8]) -> Option<Reply> {
        let nodes = local.store().catalog.nodes;
        let r = match CalvinRequest::decode(body) {
            Err(_) => Err(()),
            Ok(CalvinRequest::Batch(b)) => self.node.batch(nodes, b).map_err(|_| ()),
            Ok(CalvinRequest::Forward {
                id, from, values, ..
            }) if from < nodes => {
                self.node.forward(id, from, values);
                Ok(())
            }
            Ok(CalvinRequest::Forward { .. }) => Err(()),
            Ok(CalvinRequest::EpochDone { epoch, from }) => {
                self.node.epoch_done(epoch, from, nodes).map_err(|_| ())
            }
        };
        Some(match r {
            Ok(()) => Reply::Ok,
            Err(()) => Reply::BadRequest,
        })
    }
}
