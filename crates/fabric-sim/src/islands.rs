//! The simulator's model of hardware islands: instances placed on machines of sockets of
//! cores ([`atoll_fabric::machine::Placement`]), what a core pays to reach memory by how
//! many socket hops away it lies, cache lines moving between cores that write the same
//! records, the channel between instances of one machine, and the migrations of threads
//! the OS places.
//!
//! Memory: an instance's memory is spread over the sockets of its cores page by page (the
//! paper allocates "in the local memory node when possible": one socket for an instance on
//! one socket, every socket of the machine for a machine-sized one). A core's own-node
//! access pays the CPU profile's local access, plus `remote_ns_per_hop` per hop to the
//! page's socket, plus a cache-line transfer when another core wrote the line last (from
//! the same socket, or per hop from another). Accesses a request handler makes on its
//! node's memory are priced by the CPU profile's handler cost alone (the simulator cannot
//! see their addresses).
//!
//! Unbound threads (`pinned` false) are moved by the OS: every `migration.interval_ns` on
//! average (an exponential draw from the run's seed) a thread lands on a core of its
//! machine drawn at random, pays `migration.cost_ns` to refill its caches, and from there
//! reaches its instance's memory by that core's socket.

use atoll_fabric::machine::Placement;
use atoll_fabric::rng::Rng;
use atoll_fabric::{NodeId, RemotePtr};

use crate::net::NetProfile;

/// The islands a simulated run models.
#[derive(Clone, Debug)]
pub struct Islands {
    pub placement: Placement,
    /// The channel between two instances on one machine; instances on different machines
    /// talk over the run's network profile.
    pub channel: NetProfile,
    pub memory: MemoryCosts,
    /// Threads bound to their cores; unbound ones migrate.
    pub pinned: bool,
    pub migration: Migration,
}

/// What a core pays for memory beyond the CPU profile's local access.
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryCosts {
    pub name: &'static str,
    pub source: &'static str,
    /// Per socket hop to the page's memory.
    pub remote_ns_per_hop: u64,
    /// A line another core of the same socket wrote last.
    pub line_same_socket_ns: u64,
    /// A line a core of another socket wrote last, per hop.
    pub line_ns_per_hop: u64,
    /// The unit an instance's memory is spread over its sockets in.
    pub page_bytes: u64,
}

/// The OS moving unbound threads.
#[derive(Clone, Debug, PartialEq)]
pub struct Migration {
    pub source: &'static str,
    /// Mean virtual time between two moves of one thread.
    pub interval_ns: u64,
    /// A move's cost to the moved thread: its caches refilled on the new core.
    pub cost_ns: u64,
}

impl Islands {
    /// The model in a line, for the run's report.
    pub fn describe(&self) -> String {
        let m = &self.memory;
        let threads = if self.pinned {
            "threads bound to their cores".to_string()
        } else {
            format!(
                "threads unbound: moved every {} us on average at {} us each ({})",
                self.migration.interval_ns / 1000,
                self.migration.cost_ns / 1000,
                self.migration.source
            )
        };
        format!(
            "memory {}: +{} ns a socket hop, a line another core wrote {} ns within a socket and {} ns a hop across ({}); channel within a machine {}; {threads}",
            m.name, m.remote_ns_per_hop, m.line_same_socket_ns, m.line_ns_per_hop, m.source, self.channel.name
        )
    }
}

/// Bytes of a cache line.
const LINE_BYTES: u64 = 64;
/// Lines whose last writer the model remembers (direct-mapped: a line evicted by another
/// is taken as cold, as a real cache forgets it too).
const LINES_TRACKED: usize = 1 << 16;
/// The stream of the run's seed the migrations draw from.
const MIGRATION_STREAM: u64 = 0x15_1a_d5;
/// A line no core wrote yet.
const NO_WRITER: u32 = u32::MAX;

/// The memory costs of the paper's machines: Westmere-EP (X5660) and Westmere-EX
/// (E7-L8867), the Nehalem generation Molka et al. measured (PACT'09, "Memory Performance
/// and Cache Coherency Effects on an Intel Nehalem Multiprocessor System": local DRAM ~65 ns,
/// remote ~106 ns over one QPI hop; a modified line from another core of the socket ~40 ns,
/// from the other socket ~100 ns). Ranges taken for sensitivity: remote +25..+70 ns per
/// hop, same-socket line 25..60 ns, per-hop line 60..150 ns.
pub fn westmere() -> MemoryCosts {
    MemoryCosts {
        name: "westmere",
        source: "Molka et al. PACT'09 (Nehalem-EP, the X5660's predecessor): remote DRAM +41 ns a QPI hop, modified line ~40 ns within a socket, ~100 ns across",
        remote_ns_per_hop: 41,
        line_same_socket_ns: 40,
        line_ns_per_hop: 100,
        page_bytes: 4096,
    }
}

/// Thread migration of an unbound thread: Linux's load balancer moves threads every few
/// milliseconds (its balancing interval, 1-8 ms on an idle SMP domain; our estimate 4 ms),
/// and a move costs the thread its cache contents: Li, Ding and Shen (ExpCS'07, "Quantifying
/// the cost of context switch") measure 3 us to over 1 ms of indirect cost by working set;
/// our estimate is 50 us for an OLTP thread's hot set (a few MB at ~10 GB/s). Ranges for
/// sensitivity: interval 1..16 ms, cost 10..200 us.
pub fn migration() -> Migration {
    Migration {
        source: "Linux load balancing every 1-8 ms (estimate 4 ms); cache refill 3 us..1 ms by working set, Li et al. ExpCS'07 (estimate 50 us)",
        interval_ns: 4_000_000,
        cost_ns: 50_000,
    }
}

/// A constant of the model a run may set (`--remote-ns-per-hop 70`, ...), for sensitivity
/// runs: its default (the source's figure) and the range its sources support
/// (`docs/simulator.md`'s table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Constant {
    /// The name, as the flag spells it with `_` for `-`.
    pub name: &'static str,
    pub default: u64,
    pub low: u64,
    pub high: u64,
}

/// Every constant a run may set, in the order of the docs' table.
pub const CONSTANTS: [Constant; 5] = [
    Constant {
        name: "remote_ns_per_hop",
        default: 41,
        low: 25,
        high: 70,
    },
    Constant {
        name: "line_same_socket_ns",
        default: 40,
        low: 25,
        high: 60,
    },
    Constant {
        name: "line_ns_per_hop",
        default: 100,
        low: 60,
        high: 150,
    },
    Constant {
        name: "migration_interval_us",
        default: 4_000,
        low: 1_000,
        high: 16_000,
    },
    Constant {
        name: "migration_cost_us",
        default: 50,
        low: 10,
        high: 200,
    },
];

/// How far past its cited range's top a constant may be set: further, the model is outside
/// anything its sources describe.
pub const CONSTANT_BEYOND_RANGE_MAX: u64 = 10;

impl Islands {
    /// Sets constant `name` ([`CONSTANTS`]) to `value`, refused (naming what is accepted)
    /// when unknown or beyond [`CONSTANT_BEYOND_RANGE_MAX`] times its range's top, or a
    /// migration interval of 0.
    pub fn set_constant(&mut self, name: &str, value: u64) -> Result<(), String> {
        let Some(c) = CONSTANTS.iter().find(|c| c.name == name) else {
            let names: Vec<&str> = CONSTANTS.iter().map(|c| c.name).collect();
            return Err(format!(
                "'{name}' is not a constant of the islands model: expected one of {}",
                names.join(", ")
            ));
        };
        let max = c.high * CONSTANT_BEYOND_RANGE_MAX;
        let min = u64::from(name == "migration_interval_us");
        if !(min..=max).contains(&value) {
            return Err(format!(
                "{name} {value} is out of range: expected {min}..={max} (its sources give {}..{}, default {})",
                c.low, c.high, c.default
            ));
        }
        match name {
            "remote_ns_per_hop" => self.memory.remote_ns_per_hop = value,
            "line_same_socket_ns" => self.memory.line_same_socket_ns = value,
            "line_ns_per_hop" => self.memory.line_ns_per_hop = value,
            "migration_interval_us" => self.migration.interval_ns = value * 1_000,
            "migration_cost_us" => self.migration.cost_ns = value * 1_000,
            other => unreachable!("{other} is in CONSTANTS and set above"),
        }
        Ok(())
    }

    /// Constant `name`'s value in this model.
    pub fn constant(&self, name: &str) -> Option<u64> {
        Some(match name {
            "remote_ns_per_hop" => self.memory.remote_ns_per_hop,
            "line_same_socket_ns" => self.memory.line_same_socket_ns,
            "line_ns_per_hop" => self.memory.line_ns_per_hop,
            "migration_interval_us" => self.migration.interval_ns / 1_000,
            "migration_cost_us" => self.migration.cost_ns / 1_000,
            _ => return None,
        })
    }
}

/// The model's state in a run: where each worker is, and each tracked line's last writer.
pub(crate) struct IslandsState {
    pub(crate) model: Islands,
    /// Per worker (node-major), the socket it runs on now.
    socket: Vec<u16>,
    /// Per worker, when the OS moves it next (unbound threads only).
    next_move_ns: Vec<u64>,
    lines: Vec<(u64, u32)>,
    rng: Rng,
}

impl IslandsState {
    pub(crate) fn new(model: Islands, seed: u64) -> Self {
        let p = &model.placement;
        let mut rng = Rng::derive(seed, MIGRATION_STREAM);
        let mut socket = Vec::new();
        let mut next_move_ns = Vec::new();
        for n in 0..p.nodes() {
            for t in 0..p.threads_per_node {
                socket.push(p.core_of(NodeId(n), t).socket);
                next_move_ns.push(if model.pinned {
                    u64::MAX
                } else {
                    draw_interval(&mut rng, model.migration.interval_ns)
                });
            }
        }
        IslandsState {
            model,
            socket,
            next_move_ns,
            lines: vec![(0, NO_WRITER); LINES_TRACKED],
            rng,
        }
    }

    /// Whether `a` and `b` are instances on one machine (their link is the channel).
    pub(crate) fn same_machine(&self, a: NodeId, b: NodeId) -> bool {
        self.model.placement.same_machine(a, b)
    }

    /// CPU time worker `w` (of `node`) pays at `now_ns` for the OS moving it since it last
    /// ran: each move draws a core of its machine and costs a cache refill.
    pub(crate) fn migrations_ns(&mut self, w: u32, now_ns: u64) -> u64 {
        let mut ns = 0;
        let p = self.model.placement;
        while self.next_move_ns[w as usize] <= now_ns {
            let core = self.rng.below(p.machines.cores_per_machine() as u64) as u16;
            self.socket[w as usize] = core / p.machines.cores_per_socket;
            ns += self.model.migration.cost_ns;
            let gap = draw_interval(&mut self.rng, self.model.migration.interval_ns);
            self.next_move_ns[w as usize] = self.next_move_ns[w as usize].saturating_add(gap);
        }
        ns
    }

    /// What worker `w` of `node` pays beyond a local access to reach `ptr` (on its own
    /// node): the hops to the page's socket, and the line's transfer when another core
    /// wrote it last; a write makes `w` the line's last writer.
    pub(crate) fn access_ns(&mut self, w: u32, node: NodeId, ptr: RemotePtr, write: bool) -> u64 {
        let p = self.model.placement;
        let sockets = p.sockets_of(node);
        let spread = (sockets.end() - sockets.start() + 1) as u64;
        let byte = ptr.offset_words as u64 * 8;
        let page = byte / self.model.memory.page_bytes;
        // Pages of a region go round the instance's sockets; regions start at different
        // sockets so that small regions do not all sit on the first.
        let home = sockets.start() + ((page + ptr.region.0 as u64) % spread) as u16;
        let here = self.socket[w as usize];
        let m = &p.machines;
        let mem = &self.model.memory;
        let mut ns = m.socket_hops(here, home) as u64 * mem.remote_ns_per_hop;
        let line = (node.0 as u64) << 48 | (ptr.region.0 as u64) << 40 | byte / LINE_BYTES;
        let slot = &mut self.lines[(atoll_fabric::rng::mix64(line) as usize) % LINES_TRACKED];
        if slot.0 == line && slot.1 != NO_WRITER && slot.1 != w {
            let hops = m.socket_hops(here, self.socket[slot.1 as usize]) as u64;
            ns += if hops == 0 {
                mem.line_same_socket_ns
            } else {
                hops * mem.line_ns_per_hop
            };
        }
        if write {
            *slot = (line, w);
        } else if slot.0 != line {
            // Another line held the slot: this one is now the one remembered, unwritten.
            *slot = (line, NO_WRITER);
        }
        ns
    }
}

/// An exponential draw of mean `mean_ns`, at least 1 ns.
fn draw_interval(rng: &mut Rng, mean_ns: u64) -> u64 {
    const UNIT: u64 = 1 << 24;
    // u in (0, 1]: never ln(0).
    let u = (rng.below(UNIT) + 1) as f64 / UNIT as f64;
    ((-u.ln() * mean_ns as f64) as u64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::machine::{Granularity, Machines, SocketLinks};
    use atoll_fabric::RegionId;

    fn state(
        sockets: u16,
        links: SocketLinks,
        granularity: Granularity,
        pinned: bool,
    ) -> IslandsState {
        let machines = Machines {
            machines: 1,
            sockets_per_machine: sockets,
            cores_per_socket: 1,
            links,
        };
        let placement = Placement::derive(machines, granularity, 64).unwrap();
        let model = Islands {
            placement,
            channel: crate::net::channel("shm").unwrap(),
            memory: westmere(),
            pinned,
            migration: migration(),
        };
        IslandsState::new(model, 7)
    }

    /// Word offset of the first word of page `page`.
    fn page(page: u32) -> u32 {
        page * (westmere().page_bytes / 8) as u32
    }

    #[test]
    fn islands_constants_default_to_their_sources_and_refuse_values_past_their_range() {
        let placement = Placement::derive(
            atoll_fabric::machine::preset("x5660-cluster").unwrap(),
            atoll_fabric::machine::Granularity::Socket,
            1024,
        )
        .unwrap();
        let mut m = Islands {
            placement,
            channel: crate::net::channel("shm").unwrap(),
            memory: westmere(),
            pinned: false,
            migration: migration(),
        };
        for c in CONSTANTS {
            assert_eq!(m.constant(c.name), Some(c.default), "{}", c.name);
            assert!(c.low <= c.default && c.default <= c.high, "{c:?}");
            m.set_constant(c.name, c.high).unwrap();
            assert_eq!(m.constant(c.name), Some(c.high), "{}", c.name);
            let e = m.set_constant(c.name, c.high * 10 + 1).unwrap_err();
            assert!(e.contains("out of range"), "{e}");
        }
        assert!(m.set_constant("migration_interval_us", 0).is_err());
        let e = m.set_constant("qpi_ns", 1).unwrap_err();
        assert!(e.contains("remote_ns_per_hop"), "{e}");
    }

    #[test]
    fn islands_a_socket_remote_access_costs_a_hop_more_than_a_local_one() {
        let mut s = state(2, SocketLinks::Full, Granularity::Machine, true);
        let at = |p| RemotePtr::new(NodeId(0), RegionId(0), page(p));
        // Pages alternate between the instance's sockets; thread 0 is on socket 0.
        assert_eq!(s.access_ns(0, NodeId(0), at(0), false), 0);
        assert_eq!(
            s.access_ns(0, NodeId(0), at(1), false),
            westmere().remote_ns_per_hop
        );
        // On the twisted cube, socket 7 is two hops from socket 0.
        let mut cube = state(8, SocketLinks::TwistedCube, Granularity::Machine, true);
        let far = RemotePtr::new(NodeId(0), RegionId(0), page(7));
        assert_eq!(
            cube.access_ns(0, NodeId(0), far, false),
            2 * westmere().remote_ns_per_hop
        );
        // An instance on one socket keeps its memory there.
        let mut one = state(2, SocketLinks::Full, Granularity::Core, true);
        assert_eq!(
            one.access_ns(
                1,
                NodeId(1),
                RemotePtr::new(NodeId(1), RegionId(0), page(1)),
                false
            ),
            0
        );
    }

    #[test]
    fn islands_a_line_another_core_wrote_costs_its_transfer() {
        let mut s = state(2, SocketLinks::Full, Granularity::Machine, true);
        let ptr = RemotePtr::new(NodeId(0), RegionId(0), 0);
        assert_eq!(
            s.access_ns(1, NodeId(0), ptr, true),
            westmere().remote_ns_per_hop
        );
        // Thread 0 (socket 0, the page's) reads the line thread 1 (socket 1) wrote.
        assert_eq!(
            s.access_ns(0, NodeId(0), ptr, false),
            westmere().line_ns_per_hop
        );
        // Its own write moves it; then its reads are free of transfers.
        s.access_ns(0, NodeId(0), ptr, true);
        assert_eq!(s.access_ns(0, NodeId(0), ptr, false), 0);
    }

    #[test]
    fn islands_unbound_threads_migrate_at_a_cost_and_bound_ones_never() {
        let mut bound = state(2, SocketLinks::Full, Granularity::Core, true);
        assert_eq!(bound.migrations_ns(0, 1_000_000_000), 0);
        let mut free = state(2, SocketLinks::Full, Granularity::Core, false);
        let ns = free.migrations_ns(0, 1_000_000_000);
        let moves = ns / migration().cost_ns;
        // About one a 4 ms over a second: 250 expected.
        assert!((150..350).contains(&moves), "{moves} moves");
        assert_eq!(free.migrations_ns(0, 1_000_000_000), 0, "charged once");
    }
}
