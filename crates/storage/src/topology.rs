//! Which nodes hold records, which run coordinators, where coordinators log and where the
//! timestamp service lives: the partitioned architecture (every node both) or the
//! shared-data one (memory nodes hold every record and run no transaction; compute nodes
//! run transactions and hold no record), as NAM-DB and RSI describe it.
//!
//! Node ids are laid out the same way on every fabric: memory nodes first (`0..M`, so the
//! key-to-node maps of the workloads stay the same in both architectures), then compute
//! nodes (`M..M+C`), then the timestamp service's own node if it has one (`M+C`).

use atoll_fabric::NodeId;

/// How the cluster's nodes share the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Architecture {
    /// Every node holds a partition and runs coordinators (RCC, hardware islands).
    Partitioned,
    /// Memory nodes hold the records; compute nodes run the coordinators (NAM-DB, Tell).
    SharedData,
}

impl Architecture {
    pub const ALL: [Architecture; 2] = [Architecture::Partitioned, Architecture::SharedData];

    pub fn name(self) -> &'static str {
        match self {
            Architecture::Partitioned => "partitioned",
            Architecture::SharedData => "shared-data",
        }
    }

    pub fn parse(s: &str) -> Option<Architecture> {
        Self::ALL.into_iter().find(|a| a.name() == s)
    }
}

/// Where the timestamp service (RSI's commit timestamps and read timestamp) runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TsPlacement {
    /// A role of node 0 (a memory node under shared-data).
    Memory,
    /// A node of its own that holds no record and runs no coordinator (RSI's Figure 6).
    Own,
}

impl TsPlacement {
    pub const ALL: [TsPlacement; 2] = [TsPlacement::Memory, TsPlacement::Own];

    pub fn name(self) -> &'static str {
        match self {
            TsPlacement::Memory => "memory",
            TsPlacement::Own => "own",
        }
    }

    pub fn parse(s: &str) -> Option<TsPlacement> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// The roles of a run's nodes; immutable after start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    architecture: Architecture,
    /// Nodes `0..memory_nodes` hold records.
    memory_nodes: u16,
    /// Nodes running coordinators: the same nodes when partitioned, else the next ones.
    compute_nodes: u16,
    ts: TsPlacement,
    /// Compute node `i` shares a machine with memory node `i` (for `i` below both counts):
    /// NAM-DB's locality, where a compute server next to a memory server reaches its records
    /// with the CPU's own loads, stores and atomics.
    colocated: bool,
}

impl Topology {
    /// `nodes` nodes, each holding a partition and running coordinators.
    pub fn partitioned(nodes: u16) -> Self {
        assert!(nodes > 0, "a cluster needs at least one node");
        Topology {
            architecture: Architecture::Partitioned,
            memory_nodes: nodes,
            compute_nodes: nodes,
            ts: TsPlacement::Memory,
            colocated: false,
        }
    }

    /// `memory` memory nodes, `compute` compute nodes and the timestamp service at `ts`.
    pub fn shared_data(memory: u16, compute: u16, ts: TsPlacement) -> Self {
        assert!(
            memory > 0 && compute > 0,
            "shared-data needs a memory and a compute node, not {memory} and {compute}"
        );
        Topology {
            architecture: Architecture::SharedData,
            memory_nodes: memory,
            compute_nodes: compute,
            ts,
            colocated: false,
        }
    }

    /// The same roles with compute node `i` on memory node `i`'s machine (shared-data only).
    pub fn colocated(mut self) -> Self {
        assert_eq!(
            self.architecture,
            Architecture::SharedData,
            "only shared-data separates the roles that co-location pairs"
        );
        self.colocated = true;
        self
    }

    pub fn is_colocated(&self) -> bool {
        self.colocated
    }

    /// The pairs of nodes sharing a machine: `(memory node i, compute node i)` for `i` below
    /// both counts when co-located; none otherwise.
    pub fn machine_pairs(&self) -> Vec<(NodeId, NodeId)> {
        if !self.colocated {
            return Vec::new();
        }
        (0..self.memory_nodes.min(self.compute_nodes))
            .map(|i| (NodeId(i), self.compute_node(i)))
            .collect()
    }

    pub fn architecture(&self) -> Architecture {
        self.architecture
    }

    pub fn ts_placement(&self) -> TsPlacement {
        self.ts
    }

    /// Every node of the run, whatever its role.
    pub fn nodes_total(&self) -> u16 {
        match self.architecture {
            Architecture::Partitioned => self.memory_nodes,
            Architecture::SharedData => {
                self.memory_nodes + self.compute_nodes + u16::from(self.ts == TsPlacement::Own)
            }
        }
    }

    /// Nodes holding records: `0..memory_nodes()`.
    pub fn memory_nodes(&self) -> u16 {
        self.memory_nodes
    }

    /// Nodes running coordinators.
    pub fn compute_nodes(&self) -> u16 {
        self.compute_nodes
    }

    pub fn holds_records(&self, n: NodeId) -> bool {
        n.0 < self.memory_nodes
    }

    /// Which of the compute nodes `n` is (0-based), if it runs coordinators.
    pub fn compute_index(&self, n: NodeId) -> Option<u16> {
        match self.architecture {
            Architecture::Partitioned => (n.0 < self.memory_nodes).then_some(n.0),
            Architecture::SharedData => {
                let first = self.memory_nodes;
                (n.0 >= first && n.0 < first + self.compute_nodes).then(|| n.0 - first)
            }
        }
    }

    pub fn runs_coordinators(&self, n: NodeId) -> bool {
        self.compute_index(n).is_some()
    }

    /// The `i`-th compute node.
    pub fn compute_node(&self, i: u16) -> NodeId {
        assert!(
            i < self.compute_nodes,
            "compute node {i} of {}",
            self.compute_nodes
        );
        match self.architecture {
            Architecture::Partitioned => NodeId(i),
            Architecture::SharedData => NodeId(self.memory_nodes + i),
        }
    }

    /// The node whose timestamp-service region serves.
    pub fn ts_node(&self) -> NodeId {
        match self.ts {
            TsPlacement::Memory => NodeId(0),
            TsPlacement::Own => NodeId(self.memory_nodes + self.compute_nodes),
        }
    }

    /// The memory node a coordinator on compute node `n` treats as its home when a workload
    /// picks "local" keys: itself when partitioned; under shared-data, compute node `i`'s
    /// home is memory node `i mod M` (NAM-DB's locality: a compute server next to a memory
    /// server works on that server's warehouses).
    pub fn home_of(&self, n: NodeId) -> NodeId {
        let i = self
            .compute_index(n)
            .unwrap_or_else(|| panic!("node {} runs no coordinator", n.0));
        NodeId(i % self.memory_nodes)
    }

    /// The most log backups a coordinator can have: other nodes when partitioned, memory
    /// nodes under shared-data, but those on other machines when co-located (a backup
    /// beside its coordinator dies with it).
    pub fn log_replicas_max(&self) -> u16 {
        match self.architecture {
            Architecture::Partitioned => self.memory_nodes - 1,
            Architecture::SharedData if self.colocated => self.memory_nodes - 1,
            Architecture::SharedData => self.memory_nodes,
        }
    }

    /// Log ring slots (each one ring per co-routine of a compute node) a backup holds, for
    /// `replicas` backups per coordinator.
    pub fn log_slots(&self, replicas: u16) -> u32 {
        match self.architecture {
            Architecture::Partitioned => replicas as u32,
            Architecture::SharedData => {
                replicas as u32 * self.compute_nodes.div_ceil(self.memory_nodes) as u32
            }
        }
    }

    /// Backup `b` (0-based) of coordinators on compute node `n`, and the slot of their rings
    /// there. Partitioned: the `b+1`-th next node, slot `b`. Shared-data: compute node `i`
    /// logs to memory nodes `(i + b) mod M`; a memory node holds, per `b`, the compute nodes
    /// `i ≡ m - b (mod M)`, told apart by `i / M`.
    pub fn log_backup(&self, n: NodeId, b: u16) -> (NodeId, u32) {
        let i = self
            .compute_index(n)
            .unwrap_or_else(|| panic!("node {} runs no coordinator", n.0));
        let m = self.memory_nodes;
        match self.architecture {
            Architecture::Partitioned => {
                debug_assert!(b < m - 1, "backup {b} of {m} nodes");
                (
                    NodeId(((i as u32 + 1 + b as u32) % m as u32) as u16),
                    b as u32,
                )
            }
            Architecture::SharedData => {
                debug_assert!(
                    b < self.log_replicas_max(),
                    "backup {b} of {m} memory nodes"
                );
                // Co-located, the first backup is the next machine's memory node.
                let skip = u32::from(self.colocated);
                let per_b = self.compute_nodes.div_ceil(m) as u32;
                (
                    NodeId(((i as u32 + b as u32 + skip) % m as u32) as u16),
                    b as u32 * per_b + (i / m) as u32,
                )
            }
        }
    }

    /// `partitioned: 4 nodes` or `shared-data: 3 memory + 4 compute + timestamp node`.
    pub fn describe(&self) -> String {
        match self.architecture {
            Architecture::Partitioned => format!("partitioned: {} nodes", self.memory_nodes),
            Architecture::SharedData => format!(
                "shared-data: {} memory + {} compute nodes{}{}",
                self.memory_nodes,
                self.compute_nodes,
                match self.ts {
                    TsPlacement::Memory => " (timestamp service on memory node 0)",
                    TsPlacement::Own => " + a timestamp node",
                },
                if self.colocated {
                    format!(
                        ", {} machines each a compute node beside a memory node",
                        self.memory_nodes.min(self.compute_nodes)
                    )
                } else {
                    String::new()
                }
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn topology_colocation_pairs_compute_node_i_with_memory_node_i_and_only_under_shared_data() {
        let t = Topology::shared_data(2, 3, TsPlacement::Own);
        assert!(t.machine_pairs().is_empty(), "not co-located unless asked");
        let c = t.colocated();
        assert_eq!(
            c.machine_pairs(),
            vec![(NodeId(0), NodeId(2)), (NodeId(1), NodeId(3))]
        );
        assert_eq!(
            atoll_fabric::ids::machine_peer(&c.machine_pairs(), NodeId(3)),
            Some(NodeId(1))
        );
        // The third compute node and the timestamp node have no memory node beside them.
        assert_eq!(
            atoll_fabric::ids::machine_peer(&c.machine_pairs(), NodeId(4)),
            None
        );
        assert_eq!(
            atoll_fabric::ids::machine_peer(&c.machine_pairs(), NodeId(5)),
            None
        );
        assert!(c
            .describe()
            .contains("2 machines each a compute node beside a memory node"));
    }

    #[test]
    fn topology_shared_data_lays_out_memory_then_compute_then_the_timestamp_node() {
        let t = Topology::shared_data(3, 4, TsPlacement::Own);
        assert_eq!(t.nodes_total(), 8);
        assert!((0..3).all(|n| t.holds_records(NodeId(n)) && !t.runs_coordinators(NodeId(n))));
        assert!((3..7).all(|n| !t.holds_records(NodeId(n)) && t.runs_coordinators(NodeId(n))));
        assert_eq!(t.ts_node(), NodeId(7));
        assert!(!t.holds_records(NodeId(7)) && !t.runs_coordinators(NodeId(7)));
        assert_eq!(t.compute_node(0), NodeId(3));
        assert_eq!(t.home_of(NodeId(6)), NodeId(0));
        let co = Topology::shared_data(2, 2, TsPlacement::Memory);
        assert_eq!((co.nodes_total(), co.ts_node()), (4, NodeId(0)));
    }

    #[test]
    fn topology_log_backups_are_distinct_memory_nodes_and_no_two_coordinators_share_a_slot() {
        for t in [
            Topology::partitioned(5),
            Topology::shared_data(3, 7, TsPlacement::Memory),
            Topology::shared_data(4, 2, TsPlacement::Own),
            Topology::shared_data(1, 3, TsPlacement::Memory),
            Topology::shared_data(3, 3, TsPlacement::Memory).colocated(),
            Topology::shared_data(3, 5, TsPlacement::Own).colocated(),
        ] {
            let replicas = t.log_replicas_max();
            let pairs = t.machine_pairs();
            let mut used = HashSet::new();
            for i in 0..t.compute_nodes() {
                let n = t.compute_node(i);
                let mut backups = HashSet::new();
                for b in 0..replicas {
                    let (backup, slot) = t.log_backup(n, b);
                    assert!(t.holds_records(backup), "{t:?}: backup {backup:?}");
                    assert_ne!(backup, n, "{t:?}: a node backs itself up");
                    assert_ne!(
                        atoll_fabric::ids::machine_peer(&pairs, n),
                        Some(backup),
                        "{t:?}: {n:?} backs up on its own machine"
                    );
                    assert!(slot < t.log_slots(replicas), "{t:?}: slot {slot}");
                    assert!(backups.insert(backup), "{t:?}: backup {backup:?} twice");
                    assert!(
                        used.insert((backup, slot)),
                        "{t:?}: {backup:?} slot {slot} shared"
                    );
                }
            }
        }
    }
}
