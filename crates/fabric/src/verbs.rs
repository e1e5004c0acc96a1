//! Verbs and their completions: one-sided READ, WRITE, CAS, FETCH_ADD and two-sided RPC,
//! with the per-kind counters every run reports.

use crate::ids::{NodeId, RemotePtr};
use crate::memory::{NodeMemory, Region};
use smallvec::SmallVec;

/// Words moved by a READ or WRITE; inline up to a typical tuple (header + 64-byte payload).
pub type Words = SmallVec<[u64; 16]>;

/// Bytes of an RPC request or reply.
pub type Bytes = Vec<u8>;

/// One work request posted to the fabric.
#[derive(Clone, Debug)]
pub enum Op {
    Read {
        ptr: RemotePtr,
        len_words: u32,
    },
    Write {
        ptr: RemotePtr,
        data: Words,
    },
    Cas {
        ptr: RemotePtr,
        expect: u64,
        new: u64,
    },
    FetchAdd {
        ptr: RemotePtr,
        add: u64,
    },
    /// A typed request, already encoded, run by the target node's CPU.
    Rpc {
        node: NodeId,
        req: Bytes,
    },
}

impl Op {
    pub fn node(&self) -> NodeId {
        match self {
            Op::Read { ptr, .. }
            | Op::Write { ptr, .. }
            | Op::Cas { ptr, .. }
            | Op::FetchAdd { ptr, .. } => ptr.node,
            Op::Rpc { node, .. } => *node,
        }
    }

    pub fn kind(&self) -> VerbKind {
        match self {
            Op::Read { .. } => VerbKind::Read,
            Op::Write { .. } => VerbKind::Write,
            Op::Cas { .. } => VerbKind::Cas,
            Op::FetchAdd { .. } => VerbKind::FetchAdd,
            Op::Rpc { .. } => VerbKind::Rpc,
        }
    }

    /// Payload bytes this op puts on the wire in the request direction.
    /// Bytes a one-sided op's completion carries back (its [`Completion::reply_bytes`],
    /// known before it runs); an RPC's reply size is not known in advance: 0.
    pub fn one_sided_reply_bytes(&self) -> u64 {
        match self {
            Op::Read { len_words, .. } => *len_words as u64 * 8,
            Op::Cas { .. } | Op::FetchAdd { .. } => 8,
            Op::Write { .. } | Op::Rpc { .. } => 0,
        }
    }

    pub fn request_bytes(&self) -> u64 {
        match self {
            Op::Read { .. } => 0,
            Op::Write { data, .. } => data.len() as u64 * 8,
            Op::Cas { .. } => 16,
            Op::FetchAdd { .. } => 8,
            Op::Rpc { req, .. } => req.len() as u64,
        }
    }
}

/// The result of one [`Op`].
#[derive(Clone, Debug)]
pub enum Completion {
    Read(Words),
    Write,
    /// The value found before the compare-and-swap (equal to `expect` iff it succeeded).
    Cas(u64),
    /// The value before the add.
    FetchAdd(u64),
    Rpc(Bytes),
    /// A timer (simulated compute or a timed yield) expired.
    Timer,
    /// The op did not complete: its target failed or could not be reached. Whether it took
    /// effect at the target is unknown (a WRITE or CAS may have landed before the failure).
    Failed(OpError),
}

/// How an op failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// The backend knows the target is gone (its connection broke).
    Unreachable,
    /// No completion came within the backend's op timeout.
    TimedOut,
}

impl FailureKind {
    pub fn name(self) -> &'static str {
        match self {
            FailureKind::Unreachable => "unreachable",
            FailureKind::TimedOut => "timed out",
        }
    }
}

/// A failed op: the node it targeted and how it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("an op to node {} {}", .node.0, .kind.name())]
pub struct OpError {
    pub node: NodeId,
    pub kind: FailureKind,
}

impl Completion {
    /// The verb this completes; `None` for a timer or a failure (which moved no reply).
    pub fn kind(&self) -> Option<VerbKind> {
        match self {
            Completion::Read(_) => Some(VerbKind::Read),
            Completion::Write => Some(VerbKind::Write),
            Completion::Cas(_) => Some(VerbKind::Cas),
            Completion::FetchAdd(_) => Some(VerbKind::FetchAdd),
            Completion::Rpc(_) => Some(VerbKind::Rpc),
            Completion::Timer | Completion::Failed(_) => None,
        }
    }

    /// Payload bytes in the reply direction.
    pub fn reply_bytes(&self) -> u64 {
        match self {
            Completion::Read(w) => w.len() as u64 * 8,
            Completion::Cas(_) | Completion::FetchAdd(_) => 8,
            Completion::Rpc(b) => b.len() as u64,
            Completion::Write | Completion::Timer | Completion::Failed(_) => 0,
        }
    }
}

/// Executes a one-sided op against the memory of the node it targets (what the NIC does).
/// RPCs are not one-sided and are rejected here.
pub fn execute_one_sided(mem: &NodeMemory, op: Op) -> Completion {
    let region = match &op {
        Op::Read { ptr, .. }
        | Op::Write { ptr, .. }
        | Op::Cas { ptr, .. }
        | Op::FetchAdd { ptr, .. } => mem.region(ptr.region),
        Op::Rpc { node, .. } => panic!("RPC to node {} passed to execute_one_sided", node.0),
    };
    execute_on(region, op)
}

/// Executes one-sided `op` on `region`, the region its pointer names (a node's own, or a
/// peer's mapped into this process): what the NIC does at the target.
pub fn execute_on(region: &Region, op: Op) -> Completion {
    match op {
        // Copied once, straight from the region (no zero-filled buffer first).
        Op::Read { ptr, len_words } => Completion::Read(
            region
                .load_range(ptr.offset_words as usize, len_words as usize)
                .collect(),
        ),
        Op::Write { ptr, data } => {
            region.write_from(ptr.offset_words as usize, &data);
            Completion::Write
        }
        Op::Cas { ptr, expect, new } => {
            Completion::Cas(region.cas(ptr.offset_words as usize, expect, new))
        }
        Op::FetchAdd { ptr, add } => {
            Completion::FetchAdd(region.fetch_add(ptr.offset_words as usize, add))
        }
        Op::Rpc { node, .. } => panic!("RPC to node {} passed to execute_on", node.0),
    }
}

/// The verb classes counted and (in the simulator) priced separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbKind {
    Read = 0,
    Write = 1,
    Cas = 2,
    FetchAdd = 3,
    Rpc = 4,
}

impl VerbKind {
    pub const ALL: [VerbKind; 5] = [
        VerbKind::Read,
        VerbKind::Write,
        VerbKind::Cas,
        VerbKind::FetchAdd,
        VerbKind::Rpc,
    ];
    pub const COUNT: usize = 5;

    pub fn parse(s: &str) -> Option<VerbKind> {
        Self::ALL.into_iter().find(|k| k.name() == s)
    }

    pub fn name(self) -> &'static str {
        match self {
            VerbKind::Read => "read",
            VerbKind::Write => "write",
            VerbKind::Cas => "cas",
            VerbKind::FetchAdd => "fetch_add",
            VerbKind::Rpc => "rpc",
        }
    }
}

/// Per-worker verb counters. Remote ops cross the fabric; local ops are a node touching its
/// own memory directly (or calling its own handler), as the papers do. They serialize: a
/// node's summary carries them to the driver.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct VerbCounters {
    pub remote_ops: [u64; VerbKind::COUNT],
    pub remote_bytes: [u64; VerbKind::COUNT],
    pub local_ops: [u64; VerbKind::COUNT],
    /// Doorbells rung with at least one remote op.
    pub doorbells: u64,
    /// Times a co-routine waited on the network (a doorbell with remote ops, awaited).
    pub round_trips: u64,
    /// RPC requests this worker served for other nodes.
    pub rpcs_served: u64,
}

impl VerbCounters {
    pub fn merge(&mut self, o: &VerbCounters) {
        for i in 0..VerbKind::COUNT {
            self.remote_ops[i] += o.remote_ops[i];
            self.remote_bytes[i] += o.remote_bytes[i];
            self.local_ops[i] += o.local_ops[i];
        }
        self.doorbells += o.doorbells;
        self.round_trips += o.round_trips;
        self.rpcs_served += o.rpcs_served;
    }

    pub fn total_remote_ops(&self) -> u64 {
        self.remote_ops.iter().sum()
    }
}

/// Whether a request was answered at once or is held (a lock waiting list).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    Replied,
    /// The handler keeps the `ReplyTo` and answers later from `poll_deferred`.
    Deferred,
}

/// Executed by the target node's CPU for each RPC request. Implemented above the fabric (the
/// transaction layer), so the fabric never learns what a request means.
pub trait RpcHandler: Send + Sync {
    /// Serves `req` on `node`: appends the encoded reply to `reply`, or keeps `from` and
    /// answers later.
    fn handle(
        &self,
        node: NodeId,
        from: crate::ids::ReplyTo,
        req: &[u8],
        reply: &mut Bytes,
    ) -> Handled;

    /// Called by each of `node`'s workers on every event-loop turn: pushes the replies of
    /// held requests that can now be answered. Returns whether requests are still held (so
    /// a simulated worker keeps polling).
    fn poll_deferred(&self, _node: NodeId, _out: &mut Vec<(crate::ids::ReplyTo, Bytes)>) -> bool {
        false
    }

    /// Whether this node refuses every op from node `from` (fencing: `from` was declared
    /// dead in the configuration this node holds, so a stale node coming back cannot write).
    /// A backend that can fence asks it of each op arriving from a peer and stops a refused
    /// node at once, as a machine evicted from its cluster's configuration reboots.
    fn refuses(&self, _from: NodeId) -> bool {
        false
    }
}
