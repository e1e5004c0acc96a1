//! Newtype identifiers for nodes, regions, workers and remote pointers.

use std::fmt;

/// A node of the cluster (a machine in the papers' terms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct NodeId(pub u16);

/// The node sharing a machine with `n` among `pairs` (nodes co-located two by two, as a
/// compute node beside a memory node): a backend runs one-sided ops between them as the
/// CPU's own loads, stores and atomics, not over the network.
pub fn machine_peer(pairs: &[(NodeId, NodeId)], n: NodeId) -> Option<NodeId> {
    pairs.iter().find_map(|&(a, b)| {
        if a == n {
            Some(b)
        } else if b == n {
            Some(a)
        } else {
            None
        }
    })
}

/// A registered memory region of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct RegionId(pub u16);

/// A worker (an event loop with its co-routines) of one node: `(node, thread)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WorkerId {
    pub node: NodeId,
    pub thread: u16,
}

/// Names a 64-bit word in some node's registered memory: what an RDMA verb targets.
/// No Rust reference ever crosses nodes; only these.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemotePtr {
    pub node: NodeId,
    pub region: RegionId,
    /// Offset in 64-bit words from the start of the region.
    pub offset_words: u32,
}

impl RemotePtr {
    pub const fn new(node: NodeId, region: RegionId, offset_words: u32) -> Self {
        RemotePtr {
            node,
            region,
            offset_words,
        }
    }

    /// The pointer `words` words further into the same region.
    pub const fn add(self, words: u32) -> Self {
        RemotePtr {
            offset_words: self.offset_words + words,
            ..self
        }
    }
}

impl fmt::Debug for RemotePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "n{}:r{}+{}",
            self.node.0, self.region.0, self.offset_words
        )
    }
}

/// Index of an in-flight doorbell's completion slot within its worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotId(pub u32);

/// Where a served RPC's reply goes: the requesting worker's slot and op index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyTo {
    pub worker: u32,
    pub slot: SlotId,
    pub index: u32,
    /// When the request was posted, in the requester's clock (for latency injection); 0 for
    /// a node's own request held by its handler, whose reply is never delayed. A backend
    /// that injects no latency may put its own tag of the request here instead (UCX: the
    /// requester's op token, echoed in the reply so a late reply to a timed-out request
    /// cannot complete a later op in the same slot); handlers only carry it back.
    pub posted_ns: u64,
}
