//! Which nodes hold records, which run coordinators, where coordinators log and where a
//! protocol family's services (RSI's timestamp service) live: the partitioned architecture
//! (every node both) or the shared-data one (memory nodes hold every record and run no
//! transaction; compute nodes run transactions and hold no record), as NAM-DB and RSI
//! describe it.
//!
//! Node ids are laid out the same way on every fabric: memory nodes first (`0..M`, so the
//! key-to-node maps of the workloads stay the same in both architectures), then compute
//! nodes (`M..M+C`), then the services that have a node of their own, in the order the
//! family declares them (`M+C..`).

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

/// A node role a protocol family declares beyond memory and compute (RSI's timestamp
/// service): where it runs is a setting of the run (`--NAME-node`), the rest is the
/// family's code, which finds the role's node with [`Topology::service_node`] (or, for a
/// role that runs on several nodes, [`Topology::service_nodes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleSpec {
    /// Short and lower case (`ts`): the setting is `--NAME-node`, the report's `NAME_node`.
    pub name: &'static str,
    /// What runs there, for the run's header and help (`timestamp service`).
    pub what: &'static str,
    /// The family knob that says on how many nodes it runs (Tell's commit managers), if it
    /// may run on several; else one.
    pub count_knob: Option<&'static str>,
}

impl RoleSpec {
    /// The flag placing the role: `--ts-node`.
    pub fn flag(&self) -> String {
        format!("--{}-node", self.name.replace('_', "-"))
    }

    /// The setting's key in a config file and the report: `ts_node`.
    pub fn key(&self) -> String {
        format!("{}_node", self.name)
    }
}

/// Where a family's service role runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A role of node 0 (a memory node under shared-data).
    Memory,
    /// A node of its own that holds no record and runs no coordinator (RSI's Figure 6).
    Own,
}

impl Placement {
    pub const ALL: [Placement; 2] = [Placement::Memory, Placement::Own];

    pub fn name(self) -> &'static str {
        match self {
            Placement::Memory => "memory",
            Placement::Own => "own",
        }
    }

    pub fn parse(s: &str) -> Option<Placement> {
        Self::ALL.into_iter().find(|p| p.name() == s)
    }

    /// `memory, own`, for an error naming what is accepted.
    pub fn accepted() -> String {
        Self::ALL.map(|p| p.name()).join(", ")
    }
}

/// The most service roles one run places: a family declares at most this many (RSI one,
/// Tell's commit manager one more); a bound so the topology stays a small `Copy` value.
pub const SERVICES_MAX: usize = 2;

/// The roles of a run's nodes; immutable after start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Topology {
    architecture: Architecture,
    /// Nodes `0..memory_nodes` hold records.
    memory_nodes: u16,
    /// Nodes running coordinators: the same nodes when partitioned, else the next ones.
    compute_nodes: u16,
    /// The family's service roles, where each runs and on how many nodes, in declaration
    /// order.
    services: [Option<(RoleSpec, Placement, u16)>; SERVICES_MAX],
    /// Compute node `i` shares a machine with memory node `i` (for `i` below both counts):
    /// NAM-DB's locality, where a compute server next to a memory server reaches its records
    /// with the CPU's own loads, stores and atomics.
    colocated: bool,
    /// Where a coordinator's "local" keys are: its home memory node ([`Topology::home_of`]),
    /// or (shared-data only) a memory node drawn anew for every transaction.
    homes: Homes,
}

/// Where the keys a workload calls local live, for a transaction of a compute node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Homes {
    /// The compute node's own home memory node (NAM-DB's locality).
    Near,
    /// Any memory node, drawn uniformly for each transaction: no locality, every compute
    /// node working on every memory node's warehouses (Tell's processing nodes).
    Any,
}

impl Homes {
    pub const ALL: [Homes; 2] = [Homes::Near, Homes::Any];

    pub fn name(self) -> &'static str {
        match self {
            Homes::Near => "near",
            Homes::Any => "any",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|h| h.name() == s)
    }

    /// `near, any`, for an error naming what is accepted.
    pub fn accepted() -> String {
        Self::ALL.map(|h| h.name()).join(", ")
    }
}

impl Topology {
    /// `nodes` nodes, each holding a partition and running coordinators.
    pub fn partitioned(nodes: u16) -> Self {
        assert!(nodes > 0, "a cluster needs at least one node");
        Topology {
            architecture: Architecture::Partitioned,
            memory_nodes: nodes,
            compute_nodes: nodes,
            services: [None; SERVICES_MAX],
            colocated: false,
            homes: Homes::Near,
        }
    }

    /// `memory` memory nodes and `compute` compute nodes.
    pub fn shared_data(memory: u16, compute: u16) -> Self {
        assert!(
            memory > 0 && compute > 0,
            "shared-data needs a memory and a compute node, not {memory} and {compute}"
        );
        Topology {
            architecture: Architecture::SharedData,
            memory_nodes: memory,
            compute_nodes: compute,
            services: [None; SERVICES_MAX],
            colocated: false,
            homes: Homes::Near,
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

    /// The same roles and one more instance of `role` placed at `placement`: the `i`th on
    /// memory node `i`, or (shared-data only) on a node of its own numbered after the
    /// compute nodes and the services placed before. Every instance of a role has one
    /// placement.
    pub fn with_service(mut self, role: RoleSpec, placement: Placement) -> Self {
        assert!(
            placement == Placement::Memory || self.architecture == Architecture::SharedData,
            "a partitioned cluster has no node of its own for the {} ({})",
            role.what,
            role.name
        );
        if let Some((_, p, count)) = self
            .services
            .iter_mut()
            .flatten()
            .find(|(r, _, _)| r.name == role.name)
        {
            assert_eq!(*p, placement, "role {} placed two ways", role.name);
            assert!(
                role.count_knob.is_some(),
                "role {} runs on one node only",
                role.name
            );
            *count += 1;
        } else {
            let free = self
                .services
                .iter_mut()
                .find(|s| s.is_none())
                .unwrap_or_else(|| panic!("more than {SERVICES_MAX} service roles"));
            *free = Some((role, placement, 1));
        }
        assert!(
            placement == Placement::Own || self.instances(role.name) <= self.memory_nodes,
            "{} {}s on {} memory nodes",
            self.instances(role.name),
            role.what,
            self.memory_nodes
        );
        self
    }

    /// How many nodes run role `name`.
    fn instances(&self, name: &str) -> u16 {
        self.services
            .iter()
            .flatten()
            .find(|(r, _, _)| r.name == name)
            .map_or(0, |&(_, _, n)| n)
    }

    /// Each node serving a role, with the role and its placement, in declaration order.
    pub fn services(&self) -> impl Iterator<Item = (RoleSpec, Placement, NodeId)> + '_ {
        let mut own_next = self.memory_nodes + self.compute_nodes;
        self.services
            .iter()
            .flatten()
            .flat_map(|&(role, placement, count)| (0..count).map(move |i| (role, placement, i)))
            .map(move |(role, placement, i)| {
                let node = match placement {
                    Placement::Memory => NodeId(i),
                    Placement::Own => {
                        own_next += 1;
                        NodeId(own_next - 1)
                    }
                };
                (role, placement, node)
            })
    }

    /// The (first) node serving role `name`, if the run places it.
    pub fn service_node(&self, name: &str) -> Option<NodeId> {
        self.service_nodes(name).next()
    }

    /// Every node serving role `name`, in order (none if the run does not place it).
    pub fn service_nodes<'a>(&'a self, name: &'a str) -> impl Iterator<Item = NodeId> + 'a {
        self.services()
            .filter(move |(r, _, _)| r.name == name)
            .map(|(_, _, n)| n)
    }

    /// Nodes that serve a role and nothing else.
    fn own_service_nodes(&self) -> u16 {
        self.services
            .iter()
            .flatten()
            .filter(|(_, p, _)| *p == Placement::Own)
            .map(|&(_, _, n)| n)
            .sum()
    }

    /// The same roles with every transaction's home drawn among the memory nodes
    /// (shared-data only).
    pub fn with_homes(mut self, homes: Homes) -> Self {
        assert!(
            homes == Homes::Near || self.architecture == Architecture::SharedData,
            "only shared-data separates a compute node from the records it works on"
        );
        self.homes = homes;
        self
    }

    pub fn homes(&self) -> Homes {
        self.homes
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

    /// Every node of the run, whatever its role.
    pub fn nodes_total(&self) -> u16 {
        match self.architecture {
            Architecture::Partitioned => self.memory_nodes,
            Architecture::SharedData => {
                self.memory_nodes + self.compute_nodes + self.own_service_nodes()
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

    /// The home of one transaction of compute node `n`: [`Topology::home_of`], or with
    /// [`Homes::Any`] the memory node `pick(memory nodes)` names (`pick(m)` is below `m`).
    pub fn home_for(&self, n: NodeId, pick: impl FnOnce(u16) -> u16) -> NodeId {
        match self.homes {
            Homes::Near => self.home_of(n),
            Homes::Any => {
                let m = pick(self.memory_nodes);
                assert!(
                    m < self.memory_nodes,
                    "home {m} of {} memory nodes",
                    self.memory_nodes
                );
                NodeId(m)
            }
        }
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
    /// `replicas` backups per coordinator. Partitioned, a coordinator logs to the backups of
    /// the partitions it writes, so every node holds a slot of every node's coordinators.
    pub fn log_slots(&self, replicas: u16) -> u32 {
        match self.architecture {
            Architecture::Partitioned if replicas == 0 => 0,
            Architecture::Partitioned => self.memory_nodes as u32,
            Architecture::SharedData => {
                replicas as u32 * self.compute_nodes.div_ceil(self.memory_nodes) as u32
            }
        }
    }

    /// Backup `b` (0-based) of partition `p` (the records node `p` holds as their primary):
    /// the `b+1`-th next node. Partitioned only; `b` below [`Topology::log_replicas_max`].
    pub fn partition_backup(&self, p: NodeId, b: u16) -> NodeId {
        assert!(
            self.architecture == Architecture::Partitioned && p.0 < self.memory_nodes,
            "partition {} of {self:?}",
            p.0
        );
        debug_assert!(
            b + 1 < self.memory_nodes,
            "backup {b} of {} nodes",
            self.memory_nodes
        );
        NodeId(((p.0 as u32 + 1 + b as u32) % self.memory_nodes as u32) as u16)
    }

    /// The partitions node `n` holds a replica of when every partition has `backups`
    /// backups ([`Topology::partition_backup`]): the `backups` nodes before it.
    pub fn replicated_by(&self, n: NodeId, backups: u16) -> Vec<NodeId> {
        if self.architecture != Architecture::Partitioned || !self.holds_records(n) {
            return Vec::new();
        }
        let m = self.memory_nodes as u32;
        (1..=backups as u32)
            .map(|b| NodeId(((n.0 as u32 + m - b % m) % m) as u16))
            .collect()
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

    /// `partitioned: 4 nodes` or `shared-data: 3 memory + 4 compute nodes + a timestamp
    /// service node`.
    pub fn describe(&self) -> String {
        let services: String = self
            .services
            .iter()
            .flatten()
            .map(|&(role, placement, count)| match (placement, count) {
                (Placement::Memory, 1) if self.architecture == Architecture::Partitioned => {
                    format!(" ({} on node 0)", role.what)
                }
                (Placement::Memory, 1) => format!(" ({} on memory node 0)", role.what),
                (Placement::Memory, n) => format!(
                    " ({n} {}s on {} nodes 0..{})",
                    role.what,
                    if self.architecture == Architecture::Partitioned {
                        "the"
                    } else {
                        "memory"
                    },
                    n - 1
                ),
                (Placement::Own, 1) => format!(" + a {} node", role.what),
                (Placement::Own, n) => format!(" + {n} {} nodes", role.what),
            })
            .collect();
        match self.architecture {
            Architecture::Partitioned => {
                format!("partitioned: {} nodes{services}", self.memory_nodes)
            }
            Architecture::SharedData => format!(
                "shared-data: {} memory + {} compute nodes{services}{}",
                self.memory_nodes,
                self.compute_nodes,
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

    const TS: RoleSpec = RoleSpec {
        name: "ts",
        what: "timestamp service",
        count_knob: None,
    };
    const CM: RoleSpec = RoleSpec {
        name: "cm",
        what: "commit manager",
        count_knob: Some("commit_managers"),
    };

    #[test]
    fn topology_colocation_pairs_compute_node_i_with_memory_node_i_and_only_under_shared_data() {
        let t = Topology::shared_data(2, 3).with_service(TS, Placement::Own);
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
    fn topology_shared_data_lays_out_memory_then_compute_then_the_service_nodes_in_order() {
        let t = Topology::shared_data(3, 4).with_service(TS, Placement::Own);
        assert_eq!(t.nodes_total(), 8);
        assert!((0..3).all(|n| t.holds_records(NodeId(n)) && !t.runs_coordinators(NodeId(n))));
        assert!((3..7).all(|n| !t.holds_records(NodeId(n)) && t.runs_coordinators(NodeId(n))));
        assert_eq!(t.service_node("ts"), Some(NodeId(7)));
        assert!(!t.holds_records(NodeId(7)) && !t.runs_coordinators(NodeId(7)));
        assert_eq!(t.compute_node(0), NodeId(3));
        assert_eq!(t.home_of(NodeId(6)), NodeId(0));
        assert_eq!(t.home_for(NodeId(6), |_| unreachable!()), NodeId(0));
        let any = t.with_homes(Homes::Any);
        assert_eq!(any.home_for(NodeId(6), |m| m - 1), NodeId(2));
        assert_eq!(t.service_node("cm"), None);
        assert!(t
            .describe()
            .ends_with("4 compute nodes + a timestamp service node"));
        let co = Topology::shared_data(2, 2).with_service(TS, Placement::Memory);
        assert_eq!(
            (co.nodes_total(), co.service_node("ts")),
            (4, Some(NodeId(0)))
        );
        // Two roles: those of their own numbered in declaration order after compute nodes.
        let two = Topology::shared_data(1, 2)
            .with_service(CM, Placement::Own)
            .with_service(TS, Placement::Own);
        assert_eq!(two.nodes_total(), 5);
        assert_eq!(
            (two.service_node("cm"), two.service_node("ts")),
            (Some(NodeId(3)), Some(NodeId(4)))
        );
        let mixed = Topology::shared_data(1, 2)
            .with_service(CM, Placement::Memory)
            .with_service(TS, Placement::Own);
        assert_eq!(
            (
                mixed.nodes_total(),
                mixed.service_node("cm"),
                mixed.service_node("ts")
            ),
            (4, Some(NodeId(0)), Some(NodeId(3)))
        );
        // A role on several nodes: the `i`th on memory node `i`, or each on one of its own.
        let cms = |placement| {
            (0..3).fold(Topology::shared_data(3, 2), |t, _| {
                t.with_service(CM, placement)
            })
        };
        let on_memory = cms(Placement::Memory);
        assert_eq!(on_memory.nodes_total(), 5);
        let nodes: Vec<NodeId> = on_memory.service_nodes("cm").collect();
        assert_eq!(nodes, vec![NodeId(0), NodeId(1), NodeId(2)]);
        assert!(on_memory
            .describe()
            .ends_with("(3 commit managers on memory nodes 0..2)"));
        let own = cms(Placement::Own).with_service(TS, Placement::Own);
        assert_eq!(own.nodes_total(), 9);
        let nodes: Vec<NodeId> = own.service_nodes("cm").collect();
        assert_eq!(nodes, vec![NodeId(5), NodeId(6), NodeId(7)]);
        assert_eq!(own.service_node("ts"), Some(NodeId(8)));
        assert!(own.describe().contains("+ 3 commit manager nodes"));
        let p = Topology::partitioned(3).with_service(TS, Placement::Memory);
        assert_eq!(
            (p.nodes_total(), p.service_node("ts")),
            (3, Some(NodeId(0)))
        );
        assert_eq!(
            p.describe(),
            "partitioned: 3 nodes (timestamp service on node 0)"
        );
    }

    #[test]
    fn topology_log_backups_are_distinct_memory_nodes_and_no_two_coordinators_share_a_slot() {
        for t in [
            Topology::partitioned(5),
            Topology::shared_data(3, 7),
            Topology::shared_data(4, 2).with_service(TS, Placement::Own),
            Topology::shared_data(1, 3).with_service(TS, Placement::Memory),
            Topology::shared_data(3, 3).colocated(),
            Topology::shared_data(3, 5)
                .with_service(TS, Placement::Own)
                .colocated(),
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
