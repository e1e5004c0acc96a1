//! Machines of sockets of cores, the deployment granularity, and the placement derived from
//! both: which node (an instance: its own partition, log and threads) runs on which machine,
//! and which core each of its threads is bound to (hardware islands, Porobic et al.,
//! DaMoN'16 §3-§6).
//!
//! Cores of a machine are numbered socket-major (socket `s`, core `c` is core
//! `s * cores_per_socket + c`), and a machine's instances take consecutive equal runs of
//! them: an instance never straddles machines, and at core or socket granularity never
//! straddles sockets. Nodes are numbered machine-major, so node `n` runs on machine
//! `n / instances_per_machine`.

use std::fmt;

use crate::ids::NodeId;

/// Most machines, sockets per machine and cores per socket a model accepts: beyond the
/// papers' clusters by far, and small enough that every derived count fits its type.
pub const MACHINES_MAX: u16 = 1024;
pub const SOCKETS_PER_MACHINE_MAX: u16 = 64;
pub const CORES_PER_SOCKET_MAX: u16 = 256;

/// How the sockets of a machine are linked, which sets how many hops apart two are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SocketLinks {
    /// Every pair of sockets one hop apart (two sockets on QPI, or a full mesh).
    Full,
    /// The twisted cube of eight sockets [H§3]: sockets whose numbers differ in one bit
    /// (neighbours in the 3-cube) are one hop apart, every other pair two (the twist
    /// brings the cube's antipodes from three hops to two: "at most 2 hops").
    TwistedCube,
}

/// The machines a deployment runs on, all alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machines {
    pub machines: u16,
    pub sockets_per_machine: u16,
    pub cores_per_socket: u16,
    pub links: SocketLinks,
}

/// A named machine model from the paper.
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub machines: Machines,
}

/// The paper's two platforms [H§3]: its cluster and its 80-core multisocket server.
pub const PRESETS: [Preset; 2] = [
    Preset {
        name: "x5660-cluster",
        about: "8 machines of 2 Xeon X5660 sockets of 6 cores, 10 GbE between them (hardware islands §3)",
        machines: Machines {
            machines: 8,
            sockets_per_machine: 2,
            cores_per_socket: 6,
            links: SocketLinks::Full,
        },
    },
    Preset {
        name: "e7-80core",
        about: "1 machine of 8 Xeon E7-L8867 sockets of 10 cores in a twisted cube, at most 2 hops apart (hardware islands §3)",
        machines: Machines {
            machines: 1,
            sockets_per_machine: 8,
            cores_per_socket: 10,
            links: SocketLinks::TwistedCube,
        },
    },
];

/// The preset named `name`, or the accepted names.
pub fn preset(name: &str) -> Result<Machines, PlacementError> {
    PRESETS
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.machines)
        .ok_or_else(|| PlacementError::UnknownPreset(name.to_string()))
}

/// How large an instance is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// An instance per core (the paper's scale-out, "fine-grained shared-nothing").
    Core,
    /// An instance per socket (its hybrid, "island" deployment).
    Socket,
    /// An instance per machine (its scale-up, shared-everything within a machine).
    Machine,
    /// This many instances per machine, each on an equal run of its cores.
    PerMachine(u16),
}

impl Granularity {
    /// The names `parse` accepts besides a whole number of instances per machine.
    pub const NAMES: [&'static str; 3] = ["core", "socket", "machine"];

    pub fn parse(s: &str) -> Option<Granularity> {
        match s {
            "core" => Some(Granularity::Core),
            "socket" => Some(Granularity::Socket),
            "machine" => Some(Granularity::Machine),
            n => n.parse().ok().map(Granularity::PerMachine),
        }
    }

    pub fn name(self) -> String {
        match self {
            Granularity::Core => "core".into(),
            Granularity::Socket => "socket".into(),
            Granularity::Machine => "machine".into(),
            Granularity::PerMachine(n) => format!("{n} per machine"),
        }
    }
}

/// A model or a granularity that derives no deployment, naming the value and what is
/// accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("machine preset '{0}' is unknown: accepted are {accepted}", accepted = PRESETS.map(|p| p.name).join(", "))]
    UnknownPreset(String),
    #[error("{what}={value} is out of range: expected 1..={max}")]
    Range {
        what: &'static str,
        value: u32,
        max: u32,
    },
    #[error("a twisted cube links 8 sockets, not {0}")]
    Cube(u16),
    #[error("{per_machine} instances per machine do not split a machine's {cores} cores evenly: expected a divisor of {cores} (1 per machine .. 1 per core)")]
    Uneven { per_machine: u16, cores: u32 },
    #[error("{nodes} instances ({machines} machines x {per_machine}) are more than the {max} nodes a run accepts")]
    TooManyNodes {
        nodes: u32,
        machines: u16,
        per_machine: u16,
        max: u16,
    },
}

/// A core of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Core {
    pub machine: u16,
    pub socket: u16,
    /// The core's number within its socket.
    pub core: u16,
}

/// The instances a granularity makes of a set of machines, their threads and cores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub machines: Machines,
    pub granularity: Granularity,
    pub instances_per_machine: u16,
    /// Threads of every instance: one per core it owns (threads per instance = cores, the
    /// seed notes' choice).
    pub threads_per_node: u16,
}

impl Machines {
    /// The model, or why not: each count within its bounds, a twisted cube of 8 sockets.
    pub fn validated(self) -> Result<Machines, PlacementError> {
        let check = |what, value: u16, max: u16| {
            if (1..=max).contains(&value) {
                Ok(())
            } else {
                Err(PlacementError::Range {
                    what,
                    value: value as u32,
                    max: max as u32,
                })
            }
        };
        check("machines", self.machines, MACHINES_MAX)?;
        check(
            "sockets-per-machine",
            self.sockets_per_machine,
            SOCKETS_PER_MACHINE_MAX,
        )?;
        check(
            "cores-per-socket",
            self.cores_per_socket,
            CORES_PER_SOCKET_MAX,
        )?;
        if self.links == SocketLinks::TwistedCube && self.sockets_per_machine != 8 {
            return Err(PlacementError::Cube(self.sockets_per_machine));
        }
        Ok(self)
    }

    pub fn cores_per_machine(&self) -> u32 {
        self.sockets_per_machine as u32 * self.cores_per_socket as u32
    }

    /// Hops between two sockets of one machine: 0 for the same socket.
    pub fn socket_hops(&self, a: u16, b: u16) -> u32 {
        if a == b {
            return 0;
        }
        match self.links {
            SocketLinks::Full => 1,
            SocketLinks::TwistedCube => ((a ^ b).count_ones()).min(2),
        }
    }
}

impl Placement {
    /// The deployment of `granularity` on `machines`, or why it does not exist; `nodes_max`
    /// bounds the instances (the run's node limit).
    pub fn derive(
        machines: Machines,
        granularity: Granularity,
        nodes_max: u16,
    ) -> Result<Placement, PlacementError> {
        let machines = machines.validated()?;
        let cores = machines.cores_per_machine();
        let per_machine = match granularity {
            Granularity::Core => cores,
            Granularity::Socket => machines.sockets_per_machine as u32,
            Granularity::Machine => 1,
            Granularity::PerMachine(n) => n as u32,
        };
        if per_machine == 0 || cores % per_machine != 0 {
            return Err(PlacementError::Uneven {
                per_machine: per_machine as u16,
                cores,
            });
        }
        let nodes = per_machine * machines.machines as u32;
        if nodes > nodes_max as u32 {
            return Err(PlacementError::TooManyNodes {
                nodes,
                machines: machines.machines,
                per_machine: per_machine as u16,
                max: nodes_max,
            });
        }
        Ok(Placement {
            machines,
            granularity,
            instances_per_machine: per_machine as u16,
            threads_per_node: (cores / per_machine) as u16,
        })
    }

    pub fn nodes(&self) -> u16 {
        self.instances_per_machine * self.machines.machines
    }

    pub fn machine_of(&self, node: NodeId) -> u16 {
        node.0 / self.instances_per_machine
    }

    pub fn same_machine(&self, a: NodeId, b: NodeId) -> bool {
        self.machine_of(a) == self.machine_of(b)
    }

    /// The core thread `thread` of `node` is bound to.
    pub fn core_of(&self, node: NodeId, thread: u16) -> Core {
        assert!(
            thread < self.threads_per_node && node.0 < self.nodes(),
            "thread {thread} of node {} outside the placement of {} nodes x {} threads",
            node.0,
            self.nodes(),
            self.threads_per_node
        );
        let first = (node.0 % self.instances_per_machine) as u32 * self.threads_per_node as u32;
        let n = first + thread as u32;
        let per_socket = self.machines.cores_per_socket as u32;
        Core {
            machine: self.machine_of(node),
            socket: (n / per_socket) as u16,
            core: (n % per_socket) as u16,
        }
    }

    /// The core's number on its machine (socket-major): the CPU a thread is pinned to.
    pub fn machine_core_index(&self, c: Core) -> usize {
        c.socket as usize * self.machines.cores_per_socket as usize + c.core as usize
    }

    /// The sockets `node`'s cores are on, in order: its memory is spread over them.
    pub fn sockets_of(&self, node: NodeId) -> std::ops::RangeInclusive<u16> {
        let first = self.core_of(node, 0).socket;
        let last = self.core_of(node, self.threads_per_node - 1).socket;
        first..=last
    }
}

impl fmt::Display for Placement {
    /// "8 machines x 2 sockets x 6 cores, granularity socket: 16 instances of 6 threads;
    /// node 0: machine 0 socket 0 cores 0-5, ...", the first few and the last.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.machines;
        write!(
            f,
            "{} machines x {} sockets x {} cores{}, granularity {}: {} instances of {} threads",
            m.machines,
            m.sockets_per_machine,
            m.cores_per_socket,
            if m.links == SocketLinks::TwistedCube {
                " (twisted cube)"
            } else {
                ""
            },
            self.granularity.name(),
            self.nodes(),
            self.threads_per_node
        )?;
        // The first instances and the last say the pattern; every node is derivable.
        const SHOWN: u16 = 3;
        let nodes = self.nodes();
        for n in (0..nodes.min(SHOWN)).chain((nodes > SHOWN).then_some(nodes - 1)) {
            let (a, b) = (
                self.core_of(NodeId(n), 0),
                self.core_of(NodeId(n), self.threads_per_node - 1),
            );
            let sep = if n == nodes - 1 && nodes > SHOWN + 1 {
                "; ...; node"
            } else {
                "; node"
            };
            write!(
                f,
                "{sep} {n}: machine {} cores {}-{} (socket {}",
                a.machine,
                self.machine_core_index(a),
                self.machine_core_index(b),
                a.socket
            )?;
            if b.socket != a.socket {
                write!(f, "-{}", b.socket)?;
            }
            write!(f, ")")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES_MAX: u16 = 1024;

    fn cluster() -> Machines {
        preset("x5660-cluster").unwrap()
    }

    #[test]
    fn placement_of_each_granularity_on_the_x5660_cluster() {
        let m = cluster();
        let core = Placement::derive(m, Granularity::Core, NODES_MAX).unwrap();
        assert_eq!((core.nodes(), core.threads_per_node), (96, 1));
        // Node 13 is machine 1's second core: socket 0, core 1.
        let c = core.core_of(NodeId(13), 0);
        assert_eq!((c.machine, c.socket, c.core), (1, 0, 1));
        let c = core.core_of(NodeId(18), 0);
        assert_eq!((c.machine, c.socket, c.core), (1, 1, 0));
        let socket = Placement::derive(m, Granularity::Socket, NODES_MAX).unwrap();
        assert_eq!((socket.nodes(), socket.threads_per_node), (16, 6));
        assert_eq!(socket.sockets_of(NodeId(3)), 1..=1);
        assert_eq!(socket.machine_of(NodeId(3)), 1);
        let c = socket.core_of(NodeId(3), 5);
        assert_eq!((c.machine, c.socket, c.core), (1, 1, 5));
        let machine = Placement::derive(m, Granularity::Machine, NODES_MAX).unwrap();
        assert_eq!((machine.nodes(), machine.threads_per_node), (8, 12));
        assert_eq!(machine.sockets_of(NodeId(7)), 0..=1);
        assert!(machine.same_machine(NodeId(2), NodeId(2)));
        assert!(!machine.same_machine(NodeId(2), NodeId(3)));
        assert!(socket.same_machine(NodeId(2), NodeId(3)));
        let text = socket.to_string();
        assert!(
            text.starts_with(
                "8 machines x 2 sockets x 6 cores, granularity socket: 16 instances of 6 threads; node 0: machine 0 cores 0-5 (socket 0); node 1: machine 0 cores 6-11 (socket 1)"
            ) && text.ends_with("; ...; node 15: machine 7 cores 6-11 (socket 1)"),
            "{text}"
        );
    }

    #[test]
    fn placement_of_the_80_core_server_and_its_hops() {
        let m = preset("e7-80core").unwrap();
        let socket = Placement::derive(m, Granularity::Socket, NODES_MAX).unwrap();
        assert_eq!((socket.nodes(), socket.threads_per_node), (8, 10));
        let core = Placement::derive(m, Granularity::Core, NODES_MAX).unwrap();
        assert_eq!((core.nodes(), core.threads_per_node), (80, 1));
        assert!((0..80).all(|n| core.same_machine(NodeId(0), NodeId(n))));
        assert_eq!(core.core_of(NodeId(79), 0).socket, 7);
        // Neighbours in the cube one hop, everything else two, never three.
        assert_eq!(m.socket_hops(0, 0), 0);
        assert_eq!(m.socket_hops(0, 4), 1);
        assert_eq!(m.socket_hops(0, 7), 2);
        let hops: Vec<u32> = (0..8).map(|b| m.socket_hops(3, b)).collect();
        assert_eq!(hops, [2, 1, 1, 0, 2, 2, 2, 1]);
        assert_eq!(cluster().socket_hops(0, 1), 1);
    }

    #[test]
    fn placement_refuses_uneven_splits_bad_counts_and_too_many_nodes() {
        let m = cluster();
        let e = Placement::derive(m, Granularity::PerMachine(5), NODES_MAX).unwrap_err();
        assert!(e.to_string().contains("5 instances per machine"), "{e}");
        assert!(Placement::derive(m, Granularity::PerMachine(0), NODES_MAX).is_err());
        let four = Placement::derive(m, Granularity::PerMachine(4), NODES_MAX).unwrap();
        assert_eq!((four.nodes(), four.threads_per_node), (32, 3));
        assert!(Placement::derive(m, Granularity::Core, 95).is_err());
        let bad = Machines { machines: 0, ..m };
        let e = Placement::derive(bad, Granularity::Core, NODES_MAX).unwrap_err();
        assert_eq!(
            e.to_string(),
            "machines=0 is out of range: expected 1..=1024"
        );
        let cube = Machines {
            links: SocketLinks::TwistedCube,
            ..m
        };
        assert!(cube.validated().is_err());
        assert!(preset("pentium")
            .unwrap_err()
            .to_string()
            .contains("x5660-cluster, e7-80core"));
        assert_eq!(Granularity::parse("socket"), Some(Granularity::Socket));
        assert_eq!(Granularity::parse("3"), Some(Granularity::PerMachine(3)));
        assert_eq!(Granularity::parse("cores"), None);
    }
}
