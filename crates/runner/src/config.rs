//! The resolved configuration of one run, validated before anything starts.

use atoll_fabric::VerbKind;
pub use atoll_fabric_sim::faults::FaultConfig;
use atoll_protocols::ProtocolKind;
use atoll_storage::{Placement, RoleSpec, Topology};
use atoll_txn::{FamilyConfig, Knobs, Plan};
use atoll_workloads::{Params, Workload, WorkloadKind, WorkloadShape};
use serde::Serialize;
use std::sync::Arc;

/// Location-cache entries per coordinator before it is cleared, at most.
pub const LOC_CACHE_ENTRIES_MAX: usize = 1 << 16;

/// Bytes all coordinators' location caches may hold together. A cache keeps every remote key
/// its coordinator met until it is cleared, ~3 MB at `LOC_CACHE_ENTRIES_MAX`: with that cap
/// per co-routine, a long run of many co-routines could outgrow the machine's memory (4,096
/// co-routines, all full: ~13 GB). Each coordinator's cap is its share of this bound, so the
/// caches' memory is bounded whatever the co-routine count (and counted by the sizing).
pub const LOC_CACHES_BYTES_MAX: u64 = 512 << 20;

/// Heap bytes per cached location, at most: the key (table, node, key), the location and the
/// hash table's slack (it keeps at least an eighth of its slots free, and doubles).
pub const LOC_CACHE_BYTES_PER_ENTRY: u64 = 64;

/// Each coordinator's location-cache cap when `coordinators` share `LOC_CACHES_BYTES_MAX`.
pub fn loc_cache_entries_max(coordinators: u32) -> usize {
    let share = LOC_CACHES_BYTES_MAX / (coordinators.max(1) as u64 * LOC_CACHE_BYTES_PER_ENTRY);
    (share.min(LOC_CACHE_ENTRIES_MAX as u64) as usize).max(1)
}

/// Largest cluster shape accepted per dimension; the product is bounded further by the
/// co-routine ids a timestamp holds ([`atoll_txn::ts::COROUTINES_MAX`]).
pub const NODES_MAX: u16 = 1024;
pub const THREADS_MAX: u16 = 128;
pub const COROUTINES_MAX: u16 = 256;
/// Most copies of each partition (`--replicas`: its primary and up to 2 backups): the
/// issue's range (issue 41); FaRM and Tell run up to 3 copies.
pub const REPLICAS_MAX: u16 = 3;
/// Longest warm-up accepted, in seconds.
pub const WARMUP_S_MAX: f64 = 3_600.0;
/// Seconds a run's clock may pass its end: the last transactions finish, retries back off
/// and clocks adjusted to later timestamps run ahead, all far less than this.
pub const CLOCK_MARGIN_S: f64 = 600.0;
/// Nanoseconds per second.
const NS_PER_S: f64 = 1e9;

/// Most transactions per second one coordinator may be offered (`--rate`): one a
/// microsecond, far above what one co-routine completes.
pub const RATE_PER_COORDINATOR_PER_S_MAX: f64 = 1e6;

/// Longest warm-up plus measured seconds: a timestamp's clock part holds
/// `64 - TS_ID_BITS` bits of nanoseconds (about 4.9 hours), less [`CLOCK_MARGIN_S`].
pub fn run_s_max() -> f64 {
    (1u64 << (64 - atoll_txn::ts::TS_ID_BITS)) as f64 / NS_PER_S - CLOCK_MARGIN_S
}

/// Which fabric carries the run.
#[derive(Clone, Debug, PartialEq)]
pub enum Fabric {
    /// Real threads in this process (the default).
    InProc,
    /// The deterministic simulator: network profile by name, and faults.
    Sim { net: String, faults: FaultConfig },
}

impl Fabric {
    pub fn name(&self) -> &'static str {
        match self {
            Fabric::InProc => "inproc",
            Fabric::Sim { .. } => "sim",
        }
    }
}

/// What the run's nodes do ([`atoll_storage::Architecture`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Roles {
    /// Every node holds a partition and runs coordinators.
    Partitioned,
    /// The first `memory_nodes` nodes hold the records; the family's service roles placed
    /// on nodes of their own come last ([`RunConfig::placements`]); the other nodes are
    /// compute nodes.
    SharedData { memory_nodes: u16 },
}

/// Whether `protocol` runs `workload`'s transactions: a protocol that cannot delete refuses
/// a workload that does; a sequenced one (CALVIN) needs every transaction's records before
/// it runs, from its input or a reconnaissance read. The refusal names what would run.
pub fn runs_workload(protocol: ProtocolKind, workload: WorkloadKind) -> Result<(), String> {
    if protocol.sequenced() && !workload.declares_keys() {
        let fit: Vec<&str> = WorkloadKind::ALL
            .into_iter()
            .filter(|w| w.declares_keys())
            .map(|w| w.name())
            .collect();
        return Err(format!(
            "--protocol {} runs transactions whose records are known up front: workload {} does not declare every transaction's records before it runs, which it needs; expected one of {}",
            protocol.name(),
            workload.name(),
            fit.join(", ")
        ));
    }
    if workload.deletes() && !protocol.deletes() && !protocol.sequenced() {
        let without: Vec<&str> = WorkloadKind::ALL
            .into_iter()
            .filter(|w| !w.deletes())
            .map(|w| w.name())
            .collect();
        return Err(format!(
            "--protocol {} does not delete records yet, and workload {} does: expected a workload without deletes ({})",
            protocol.name(),
            workload.name(),
            without.join(", ")
        ));
    }
    Ok(())
}

/// Everything a run needs.
#[derive(Clone, Debug)]
pub struct RunConfig {
    pub fabric: Fabric,
    pub workload: WorkloadKind,
    pub params: Params,
    pub protocol: ProtocolKind,
    pub plan: Plan,
    /// Every node of the run, whatever its role.
    pub nodes: u16,
    pub roles: Roles,
    /// Shared-data only: compute node `i` on memory node `i`'s machine, reaching its
    /// records without the network (NAM-DB's locality).
    pub colocate: bool,
    /// Shared-data only: where a transaction's local keys are (its compute node's home
    /// memory node, or any memory node drawn per transaction).
    pub homes: atoll_storage::Homes,
    pub threads: u16,
    pub coroutines: u16,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
    /// Injected round-trip latency per verb class, indexed by `VerbKind`.
    pub net_latency_us: [f64; VerbKind::COUNT],
    pub pin_threads: bool,
    /// OS threads for the in-process fabric; `None` means one per core, at most one per worker.
    pub os_threads: Option<usize>,
    pub log_replicas: u16,
    /// Attempts of one transaction before the driver gives up on it.
    pub attempts_max: u32,
    /// Open loop: transactions offered per second in all, spread evenly over the
    /// coordinators, latency measured from each one's scheduled start; `None`: closed loop
    /// (each co-routine starts its next transaction when the last ends).
    pub rate_per_s: Option<f64>,
    /// `atoll cluster`: coalesce each worker's UCX messages to a peer worker within an
    /// event-loop turn into one.
    pub coalesce: bool,
    /// The protocol family's knobs the run sets, by name, as given (`--NAME`, TOML keys):
    /// the family declares them ([`atoll_txn::Protocol::KNOBS`]) and makes its
    /// configuration of them ([`RunConfig::family`]); the others keep their defaults.
    pub knobs: std::collections::BTreeMap<String, String>,
    /// Where the protocol family's node roles run, by role name, as given (`--NAME-node
    /// memory|own`): the family declares them ([`atoll_txn::Protocol::ROLES`]); a role not
    /// given runs on node 0. Shared-data only.
    pub placements: std::collections::BTreeMap<String, String>,
    /// Record every attempt's reads and writes for the history checker.
    pub record_history: bool,
    /// With `record_history`: stream the history to this file as the run goes (memory stays
    /// bounded whatever the duration) instead of returning it in the report.
    pub history_file: Option<std::path::PathBuf>,
    /// Print a progress line per interval of this many measured seconds (virtual ones under
    /// the simulator).
    pub progress_interval_s: f64,
    /// The simulator's CPU profile by name (`atoll_fabric_sim::net::CPU_PROFILES`), and the
    /// factor every cost of it is multiplied by.
    pub cpu_profile: String,
    pub cpu_scale: f64,
    /// Bytes the run may take in all (`--memory-max`); `None`: a share of physical memory
    /// ([`crate::sizing::memory_limit_bytes`]).
    pub memory_max_bytes: Option<u64>,
    /// Where `memory_max_bytes` comes from when not from `--memory-max` (`atoll cluster`'s
    /// own default), for the sizing line to say.
    pub memory_max_from: Option<String>,
    /// The fabric allocates every region whole at start (`atoll cluster`: UCX maps them so
    /// peers on the machine can map them too): a table that grows then reserves room in
    /// proportion to its start among the tables that grow, not the whole budget each.
    pub regions_whole: bool,
    /// A sequenced protocol's lanes record their batches into this log, or replay them
    /// from it instead of drawing (the determinism check); `None`: neither.
    pub epoch_log: Option<atoll_txn::EpochLogMode>,
    /// The nodes as instances on machines of sockets of cores (hardware islands): the
    /// placement gives the nodes and their threads; the simulator models it.
    pub islands: Option<IslandsConfig>,
    /// Each node keeps its own commit log ([`atoll_txn::own_log`]): modelled in the
    /// simulator, a ring file per node elsewhere.
    pub instance_log: Option<InstanceLogConfig>,
}

/// A node's own commit log (`--instance-log`).
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceLogConfig {
    /// Real fabrics: the directory of the nodes' log files (default
    /// [`INSTANCE_LOG_DIR_DEFAULT`], else the system's temporary directory).
    pub dir: Option<std::path::PathBuf>,
    /// Simulator: a write's wait for its device after the write itself, in µs (0: a file in
    /// memory, the paper's memory-mapped log; about 75 for fdatasync to this machine's disk).
    pub sync_us: f64,
}

/// Where real nodes write their own logs when the run names no directory: memory, as the
/// paper's memory-mapped log files.
pub const INSTANCE_LOG_DIR_DEFAULT: &str = "/dev/shm";

/// Largest device wait a simulated instance log accepts (`--instance-log-sync-us`): a
/// second per write is beyond any device.
pub const INSTANCE_LOG_SYNC_US_MAX: f64 = 1e6;

/// A deployment on machines (`--machines`, `--granularity`, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct IslandsConfig {
    pub placement: atoll_fabric::machine::Placement,
    /// Simulator only: the channel between instances of one machine
    /// (`atoll_fabric_sim::net::channels`); `None` on real fabrics.
    pub channel: Option<String>,
    /// Simulator only: constants of the islands model set by the run, by name
    /// (`atoll_fabric_sim::islands::CONSTANTS`), for sensitivity runs; the rest keep their
    /// sources' figures.
    pub constants: Vec<(String, u64)>,
}

/// The channel between instances of one machine when a simulated run names none: shared
/// memory, the paper's fastest ("the best RDMA scenario").
pub const CHANNEL_DEFAULT: &str = "shm";

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            fabric: Fabric::InProc,
            workload: WorkloadKind::SmallBank,
            params: Params::new(),
            protocol: ProtocolKind::Occ,
            plan: Plan::uniform(atoll_txn::Primitive::OneSided),
            nodes: 2,
            roles: Roles::Partitioned,
            colocate: false,
            homes: atoll_storage::Homes::Near,
            threads: 1,
            coroutines: 8,
            duration_s: 10.0,
            warmup_s: 1.0,
            seed: 1,
            net_latency_us: [0.0; VerbKind::COUNT],
            pin_threads: false,
            os_threads: None,
            log_replicas: 1,
            attempts_max: 10_000,
            rate_per_s: None,
            progress_interval_s: 1.0,
            record_history: false,
            history_file: None,
            knobs: std::collections::BTreeMap::new(),
            placements: std::collections::BTreeMap::new(),
            coalesce: true,
            cpu_profile: atoll_fabric_sim::net::CPU_PROFILES[0].into(),
            cpu_scale: 1.0,
            memory_max_bytes: None,
            memory_max_from: None,
            regions_whole: false,
            epoch_log: None,
            islands: None,
            instance_log: None,
        }
    }
}

/// Units `--memory-max` accepts, with their bytes.
const BYTE_UNITS: [(&str, u64); 7] = [
    ("TiB", 1 << 40),
    ("GiB", 1 << 30),
    ("MiB", 1 << 20),
    ("KiB", 1 << 10),
    ("GB", 1_000_000_000),
    ("MB", 1_000_000),
    ("B", 1),
];

/// A byte count as `flag` takes it: a whole number of bytes or a number with a unit
/// (`512MiB`, `1.5GiB`).
pub fn parse_bytes(flag: &str, s: &str) -> Result<u64, ConfigError> {
    let t = s.trim();
    let (num, unit) = BYTE_UNITS
        .iter()
        .find_map(|&(u, b)| t.strip_suffix(u).map(|n| (n.trim(), b)))
        .unwrap_or((t, 1));
    let bad = || {
        ConfigError(format!(
            "{flag} '{}' is not a size: expected bytes or a positive number with a unit ({}), e.g. 512MiB",
            s.chars().take(40).collect::<String>(),
            BYTE_UNITS.map(|u| u.0).join(", ")
        ))
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    if !v.is_finite() || v <= 0.0 || v * unit as f64 >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok((v * unit as f64) as u64)
}

/// A configuration value outside what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

fn range<T: PartialOrd + std::fmt::Display>(
    name: &str,
    v: T,
    lo: T,
    hi: T,
) -> Result<(), ConfigError> {
    if v < lo || v > hi {
        return Err(ConfigError(format!(
            "{name}={v} is out of range: expected {lo}..={hi}"
        )));
    }
    Ok(())
}

/// Knob values as JSON values: a whole number, a number or a boolean as one, anything else
/// (a name, a list, `none`) as its text.
pub fn typed_knobs<S: serde::Serializer>(
    knobs: &std::collections::BTreeMap<String, String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(knobs.len()))?;
    for (k, v) in knobs {
        let typed = if let Ok(n) = v.parse::<u64>() {
            serde_json::Value::from(n)
        } else if let Some(x) = v.parse::<f64>().ok().filter(|x| x.is_finite()) {
            serde_json::Value::from(x)
        } else if let Ok(b) = v.parse::<bool>() {
            serde_json::Value::from(b)
        } else {
            serde_json::Value::from(v.as_str())
        };
        m.serialize_entry(k, &typed)?;
    }
    m.end()
}

/// The shortest progress interval: a worker closes intervals on its own clock, and one
/// shorter than a millisecond would be mostly noise of when it looked.
pub const PROGRESS_INTERVAL_S_MIN: f64 = 0.001;
pub const PROGRESS_INTERVAL_S_MAX: f64 = 3600.0;
/// Intervals a run may have: each keeps a line (and its latency histogram, a few KiB) until
/// the report.
pub const PROGRESS_INTERVALS_MAX: f64 = 100_000.0;

impl RunConfig {
    /// Checks every value; the first bad one is reported with what is accepted.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_shape()?;
        self.validate_time_and_limits()?;
        self.family()?;
        self.validate_fabric_and_plan()
    }

    /// Nodes, roles, threads and co-routines, and the co-routine ids a timestamp can name.
    fn validate_shape(&self) -> Result<(), ConfigError> {
        range("nodes", self.nodes, 1, NODES_MAX)?;
        self.validate_islands()?;
        self.validate_instance_log()?;
        let placed = self.placed_roles()?;
        match self.roles {
            Roles::Partitioned => {
                if let Some(role) = self.placements.keys().next() {
                    return Err(ConfigError(format!(
                        "--{}-node needs --architecture shared-data (a partitioned cluster runs the family's services on node 0)",
                        role.replace('_', "-")
                    )));
                }
            }
            Roles::SharedData { memory_nodes } => {
                let own_nodes: Vec<&str> = placed
                    .iter()
                    .filter(|(_, p)| *p == Placement::Own)
                    .map(|(r, _)| r.what)
                    .collect();
                let own = own_nodes.len() as u16;
                if memory_nodes == 0 || memory_nodes + own >= self.nodes {
                    return Err(ConfigError(format!(
                        "shared-data needs at least one memory node and one compute node: {} nodes with {memory_nodes} memory node{}{} leave {} compute nodes (expected --memory-nodes >= 1 and --compute-nodes >= 1)",
                        self.nodes,
                        if memory_nodes == 1 { "" } else { "s" },
                        own_nodes
                            .iter()
                            .map(|w| format!(" and a {w} node"))
                            .collect::<String>(),
                        self.nodes.saturating_sub(memory_nodes + own),
                    )));
                }
            }
        }
        if self.colocate && self.roles == Roles::Partitioned {
            return Err(ConfigError(
                "--colocate needs --architecture shared-data (a partitioned node already holds the records it runs transactions on)".into(),
            ));
        }
        if self.homes != atoll_storage::Homes::Near && self.roles == Roles::Partitioned {
            return Err(ConfigError(format!(
                "--homes {} needs --architecture shared-data (a partitioned node's local keys are its own partition): expected --homes near",
                self.homes.name()
            )));
        }
        range("threads", self.threads, 1, THREADS_MAX)?;
        range("coroutines", self.coroutines, 1, COROUTINES_MAX)?;
        let ids = self.coordinators_total() as u64;
        if ids >= atoll_txn::ts::COROUTINES_MAX {
            return Err(ConfigError(format!(
                "nodes × threads × coroutines = {} × {} × {} = {ids} co-routines is out of range: a timestamp's {} id bits name fewer than {} (expected fewer nodes, threads or coroutines)",
                self.nodes,
                self.threads,
                self.coroutines,
                atoll_txn::ts::TS_ID_BITS,
                atoll_txn::ts::COROUTINES_MAX
            )));
        }
        Ok(())
    }

    /// A deployment on machines: partitioned, its shape the placement's, its channel known
    /// and only where the simulator models it.
    fn validate_islands(&self) -> Result<(), ConfigError> {
        let Some(i) = &self.islands else {
            return Ok(());
        };
        let p = &i.placement;
        if self.roles != Roles::Partitioned {
            return Err(ConfigError(
                "--machines/--granularity need the partitioned architecture: an instance holds its own partition".into(),
            ));
        }
        if (self.nodes, self.threads) != (p.nodes(), p.threads_per_node) {
            return Err(ConfigError(format!(
                "--nodes {} --threads {} differ from the placement's {} instances of {} threads ({p}): give the machines and granularity only",
                self.nodes, self.threads, p.nodes(), p.threads_per_node
            )));
        }
        match (&self.fabric, &i.channel) {
            (Fabric::Sim { .. }, Some(c)) => {
                atoll_fabric_sim::net::channel(c).map_err(|e| ConfigError(format!("--channel: {e}")))?;
            }
            (Fabric::Sim { .. }, None) => {}
            (_, Some(c)) => {
                return Err(ConfigError(format!(
                    "--channel {c} needs --fabric sim (real instances talk over the fabric that carries them)"
                )))
            }
            (_, None) => {}
        }
        if let Some((name, _)) = i.constants.first() {
            if !matches!(self.fabric, Fabric::Sim { .. }) {
                return Err(ConfigError(format!(
                    "--{} needs --fabric sim (it is a constant of the simulator's islands model)",
                    name.replace('_', "-")
                )));
            }
            let mut model = crate::run::sim_islands_model(self, i);
            for (name, v) in &i.constants {
                model
                    .set_constant(name, *v)
                    .map_err(|e| ConfigError(format!("--{}: {e}", name.replace('_', "-"))))?;
            }
            let m = &model.migration;
            if !self.pin_threads && m.interval_ns <= m.cost_ns {
                // Each move would cost more than the time to the next: the threads do
                // nothing but move (the simulation finds them hung).
                return Err(ConfigError(format!(
                    "--migration-interval-us {} is not above --migration-cost-us {}: an unbound thread would do nothing but move (expected an interval above the cost)",
                    m.interval_ns / 1_000,
                    m.cost_ns / 1_000
                )));
            }
        }
        Ok(())
    }

    /// The CPU each of `node`'s worker threads is bound to under `--pin` (empty without it):
    /// the core the deployment's placement gives the thread (its index within its machine),
    /// else the node's threads in node order, each modulo the `cpus` this machine has. CPU
    /// ids are Linux's numbering, which on a multi-socket machine may interleave sockets.
    pub fn pin_cpus(&self, node: atoll_fabric::NodeId, cpus: usize) -> Vec<usize> {
        if !self.pin_threads || cpus == 0 {
            return Vec::new();
        }
        (0..self.threads)
            .map(|t| {
                let core = match &self.islands {
                    Some(i) => i.placement.machine_core_index(i.placement.core_of(node, t)),
                    None => node.0 as usize * self.threads as usize + t as usize,
                };
                core % cpus
            })
            .collect()
    }

    /// A node's own log: on partitioned families that log commit records, its device's
    /// wait in the simulator, its directory elsewhere.
    fn validate_instance_log(&self) -> Result<(), ConfigError> {
        let Some(l) = &self.instance_log else {
            return Ok(());
        };
        // The families whose commit goes through the log stage (`stages::log`).
        use atoll_protocols::ProtocolKind as P;
        let logs_records = [P::NoWait, P::WaitDie, P::Occ, P::Mvcc, P::Sundial];
        if self.roles != Roles::Partitioned || !logs_records.contains(&self.protocol) {
            return Err(ConfigError(format!(
                "--instance-log needs the partitioned architecture and a protocol that logs commit records (nowait, waitdie, occ, mvcc, sundial): {} on {} logs otherwise",
                self.protocol.name(),
                if self.roles == Roles::Partitioned { "partitioned" } else { "shared-data" }
            )));
        }
        if !l.sync_us.is_finite() || !(0.0..=INSTANCE_LOG_SYNC_US_MAX).contains(&l.sync_us) {
            return Err(ConfigError(format!(
                "--instance-log-sync-us {} is out of range: expected µs in 0..={INSTANCE_LOG_SYNC_US_MAX}",
                l.sync_us
            )));
        }
        match (&self.fabric, &l.dir) {
            (Fabric::Sim { .. }, Some(d)) => Err(ConfigError(format!(
                "--instance-log-dir {} needs a real fabric (the simulator models the log's writes)",
                d.display()
            ))),
            (Fabric::Sim { .. }, None) => Ok(()),
            (_, _) if l.sync_us > 0.0 => Err(ConfigError(format!(
                "--instance-log-sync-us {} needs --fabric sim (a real log's writes take what its device takes)",
                l.sync_us
            ))),
            (_, Some(d)) if !d.is_dir() => Err(ConfigError(format!(
                "--instance-log-dir {}: not a directory (expected one to write the nodes' log files into)",
                d.display()
            ))),
            (_, Some(d)) => {
                // Refused now rather than when a node's load fails: a probe file made and
                // removed at once.
                let probe = d.join(format!(".atoll-probe-{}", std::process::id()));
                let made = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&probe);
                let _ = std::fs::remove_file(&probe);
                made.map(|_| ()).map_err(|e| {
                    ConfigError(format!(
                        "--instance-log-dir {}: cannot write a file there ({e}): expected a writable directory",
                        d.display()
                    ))
                })
            }
            _ => Ok(()),
        }
    }

    /// Warm-up, duration, injected latency, replicas, attempts and OS threads.
    fn validate_time_and_limits(&self) -> Result<(), ConfigError> {
        if !self.warmup_s.is_finite() || !(0.0..=WARMUP_S_MAX).contains(&self.warmup_s) {
            return Err(ConfigError(format!(
                "warmup={} is out of range: expected seconds in 0..={WARMUP_S_MAX}",
                self.warmup_s
            )));
        }
        let run_max = run_s_max();
        if !self.duration_s.is_finite()
            || self.duration_s <= 0.0
            || self.duration_s + self.warmup_s > run_max
        {
            return Err(ConfigError(format!(
                "duration={} is out of range: expected seconds in (0, {:.0}] with warmup={} (warm-up plus duration at most {run_max:.0} s: a timestamp's clock holds {:.0} s of nanoseconds, less {CLOCK_MARGIN_S} s for the last transactions)",
                self.duration_s,
                run_max - self.warmup_s,
                self.warmup_s,
                run_max + CLOCK_MARGIN_S
            )));
        }
        let intervals = (self.warmup_s + self.duration_s) / self.progress_interval_s;
        if !(PROGRESS_INTERVAL_S_MIN..=PROGRESS_INTERVAL_S_MAX).contains(&self.progress_interval_s)
            || intervals > PROGRESS_INTERVALS_MAX
        {
            return Err(ConfigError(format!(
                "progress-interval={:?} is out of range: expected seconds in {PROGRESS_INTERVAL_S_MIN}..={PROGRESS_INTERVAL_S_MAX}, and at most {PROGRESS_INTERVALS_MAX} intervals in warm-up plus duration ({intervals:.0} asked for)",
                // Debug keeps an extreme value short (1e308, not 309 digits).
                self.progress_interval_s
            )));
        }
        for (k, us) in VerbKind::ALL.iter().zip(self.net_latency_us) {
            if !us.is_finite() || !(0.0..=1_000_000.0).contains(&us) {
                return Err(ConfigError(format!(
                    "net-latency-us {}={us} is out of range: expected microseconds in 0..=1000000",
                    k.name()
                )));
            }
        }
        // `--replicas R`: the primary and `log_replicas` backups.
        let shape_max = self.topology().log_replicas_max() + 1;
        let max = REPLICAS_MAX.min(shape_max);
        if self.log_replicas >= max {
            return Err(ConfigError(format!(
                "replicas={} is out of range: expected 1..={max} ({})",
                self.log_replicas as u32 + 1,
                match self.roles {
                    _ if shape_max > REPLICAS_MAX => format!(
                        "at most {REPLICAS_MAX} copies: a primary and {} backups",
                        REPLICAS_MAX - 1
                    ),
                    Roles::Partitioned => {
                        "each copy on a node of its own: the primary's and each backup's".into()
                    }
                    Roles::SharedData { .. } if self.colocate => {
                        "a primary and at most one backup per memory node on another machine than the coordinator's".into()
                    }
                    Roles::SharedData { .. } => {
                        "a primary and at most one backup per memory node".into()
                    }
                }
            )));
        }
        range("attempts_max", self.attempts_max, 1, 1_000_000)?;
        if let Some(r) = self.rate_per_s {
            // Each coordinator's period is whole nanoseconds: at most one start per ns each.
            let coordinators = self.coordinators_total() as f64;
            let max = RATE_PER_COORDINATOR_PER_S_MAX * coordinators;
            // Every coordinator starts at least one transaction within the run.
            let min = coordinators / (self.warmup_s + self.duration_s);
            if !r.is_finite() || r < min || r > max {
                // An extreme value is echoed short (1e-300, not 300 digits).
                let shown = if r == 0.0 || (1e-3..1e12).contains(&r.abs()) {
                    format!("{r}")
                } else {
                    format!("{r:e}")
                };
                return Err(ConfigError(format!(
                    "rate={shown} is out of range: expected transactions per second in [{min}, {max:.0}] ({coordinators} coordinators, each at least one start in the run's {} s and at most {RATE_PER_COORDINATOR_PER_S_MAX:.0} a second)",
                    self.warmup_s + self.duration_s
                )));
            }
        }
        if let Some(t) = self.os_threads {
            range("os_threads", t, 1, 1024)?;
        }
        Ok(())
    }

    /// The family's knobs resolved and its configuration, or why they are refused (a knob
    /// of another family, a value out of range, knobs that do not go together).
    pub fn family(&self) -> Result<(Knobs, Arc<dyn FamilyConfig>), ConfigError> {
        self.protocol
            .configure(self.knobs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| ConfigError(e.0))
    }

    /// The family's configuration of a validated run.
    pub fn family_config(&self) -> Arc<dyn FamilyConfig> {
        self.family()
            .unwrap_or_else(|e| panic!("the run's knobs were validated at start-up: {e}"))
            .1
    }

    /// The family's node roles and where each runs ([`RunConfig::placements`]).
    pub fn placed_roles(&self) -> Result<Vec<(RoleSpec, Placement)>, ConfigError> {
        let placed = self
            .protocol
            .place_roles(
                self.placements
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str())),
            )
            .map_err(|e| ConfigError(e.0))?;
        self.protocol
            .role_instances(
                placed,
                self.knobs.iter().map(|(k, v)| (k.as_str(), v.as_str())),
                self.memory_nodes(),
            )
            .map_err(|e| ConfigError(e.0))
    }

    /// Places the family's node role `role` at `placement`, as `--ROLE-node` does.
    pub fn set_placement(&mut self, role: &str, placement: Placement) {
        self.placements
            .insert(role.to_string(), placement.name().to_string());
    }

    /// Sets family knob `name` (its TOML key) to `value`, as `--NAME VALUE` does.
    pub fn set_knob(&mut self, name: &str, value: impl ToString) {
        self.knobs.insert(name.to_string(), value.to_string());
    }

    /// The cluster a family sizes its regions and memory for.
    pub fn cluster_shape(&self) -> atoll_txn::knobs::ClusterShape {
        atoll_txn::knobs::ClusterShape {
            coordinators_total: self.coordinators_total(),
            coordinators_per_node: self.coordinators_per_node(),
            compute_nodes: self.topology().compute_nodes() as u32,
            plan: self.plan,
        }
    }

    /// The simulator's profiles and faults (refused on every fabric), the plan, and a
    /// workload that deletes under a protocol that cannot.
    fn validate_fabric_and_plan(&self) -> Result<(), ConfigError> {
        // Refused on every fabric, so a bad value never waits for `--fabric sim` to show.
        self.sim_cpu()?;
        if let Fabric::Sim { net, faults } = &self.fabric {
            atoll_fabric_sim::net::profile(net).map_err(|e| ConfigError(e.to_string()))?;
            if let Some((node, _)) = faults.crash {
                if node.0 >= self.nodes {
                    return Err(ConfigError(format!(
                        "faults crash_node={} names no node: expected 0..{}",
                        node.0, self.nodes
                    )));
                }
                self.recovery_refusal(node)?;
            }
        }
        self.protocol
            .check_plan(&self.plan)
            .map_err(|e| ConfigError(format!("plan {}: {e}", self.plan)))?;
        runs_workload(self.protocol, self.workload).map_err(ConfigError)?;
        self.family_regions_fit()?;
        if self.protocol.sequenced() {
            self.sequenced_settings()?;
            self.sequenced_refusal()?;
        } else if self.epoch_log.is_some() {
            return Err(ConfigError(format!(
                "an epoch log records or replays a sequenced protocol's batches: --protocol {} has none (calvin has)",
                self.protocol.name()
            )));
        }
        Ok(())
    }

    /// A crash of `node` that a protocol recovering compute nodes cannot recover from,
    /// refused naming why: it recovers a compute node only (a storage or service node's
    /// fail-over comes with replication), and only with what its recovery needs.
    fn recovery_refusal(&self, node: atoll_fabric::NodeId) -> Result<(), ConfigError> {
        if let Some(why) = self.family_config().crash_refusal(&self.cluster_shape()) {
            return Err(ConfigError(format!("faults crash_node={}: {why}", node.0)));
        }
        let Some(can) = self.protocol.recovery(&self.plan, self.log_replicas) else {
            return Ok(());
        };
        let p = self.protocol.name();
        let topo = self.topology();
        if !topo.runs_coordinators(node) || topo.holds_records(node) || topo.is_colocated() {
            return Err(ConfigError(format!(
                "faults crash_node={}: --protocol {p} recovers a crashed compute node of the shared-data architecture, not co-located (expected one of nodes {}..{}); a storage or service node's fail-over comes with replication (issue 41)",
                node.0,
                topo.memory_nodes(),
                topo.memory_nodes() + topo.compute_nodes()
            )));
        }
        can.map_err(|why| ConfigError(format!("faults crash_node={}: {why}", node.0)))
    }

    /// A workload configuration a sequenced protocol cannot run deterministically, refused
    /// naming why.
    fn sequenced_refusal(&self) -> Result<(), ConfigError> {
        struct Refusal;
        impl atoll_workloads::WorkloadVisitor for Refusal {
            type Out = Option<String>;
            fn visit<W: Workload>(self, w: W) -> Option<String> {
                w.sequenced_refusal()
            }
        }
        let refusal = self
            .workload
            .dispatch(&self.params, &self.workload_shape(), Refusal)
            .map_err(|e| ConfigError(e.0))?;
        match refusal {
            Some(why) => Err(ConfigError(format!(
                "--protocol {}: {why}",
                self.protocol.name()
            ))),
            None => Ok(()),
        }
    }

    /// Every region a family registers (CALVIN's buffers) addressable by a verb's word
    /// offset, refused naming it otherwise.
    fn family_regions_fit(&self) -> Result<(), ConfigError> {
        let max = atoll_storage::layout::REGION_WORDS_MAX;
        for r in self.family_config().regions(&self.cluster_shape()) {
            if r.words as u64 > max {
                return Err(ConfigError(format!(
                    "--protocol {}: its region {} would take {} words on a node, over a region's {max}: expected fewer nodes, co-routines or a smaller batch (e.g. --calvin-batch-max)",
                    self.protocol.name(),
                    r.name,
                    r.words
                )));
            }
        }
        Ok(())
    }

    /// What a sequenced protocol (CALVIN) does not run yet, refused by name.
    fn sequenced_settings(&self) -> Result<(), ConfigError> {
        let p = self.protocol.name();
        let refuse = |what: &str| Err(ConfigError(format!("--protocol {p} does not run {what}")));
        if !matches!(self.roles, Roles::Partitioned) {
            return refuse("on the shared-data architecture (--memory-nodes): it is partitioned");
        }
        if matches!(&self.fabric, Fabric::Sim { faults, .. } if faults.crash.is_some()) {
            return refuse(
                "with a crashed node (faults crash_node) yet: a dead node's epochs replay from the replicated inputs once recovery is built (issue 41)",
            );
        }
        if let Some(atoll_txn::EpochLogMode::Replay(log)) = &self.epoch_log {
            let (batches, requests, overflowed) = log.size();
            if overflowed || batches == 0 {
                return Err(ConfigError(format!(
                    "an epoch log of {batches} batches and {requests} requests{} cannot be replayed: record a shorter run",
                    if overflowed { ", which stopped recording at its bound," } else { "" }
                )));
            }
        }
        // An epoch that cannot end within the measured window measures nothing.
        let epoch_ns = self.family_config().epoch_ns().unwrap_or(0);
        if epoch_ns as f64 > self.duration_s * 1e9 {
            return Err(ConfigError(format!(
                "--epoch-us {} is longer than the measured --duration {} s: no epoch would end in the window (give an epoch of at most the duration)",
                epoch_ns / 1_000,
                self.duration_s
            )));
        }
        Ok(())
    }

    /// The simulator's CPU profile this configuration names, scaled.
    pub fn sim_cpu(&self) -> Result<atoll_fabric_sim::net::CpuProfile, ConfigError> {
        atoll_fabric_sim::net::cpu_profile(&self.cpu_profile, self.cpu_scale)
            .map_err(|e| ConfigError(e.to_string()))
    }

    /// Backups a commit logs to unless told otherwise (`--replicas 2`): one, or none on a
    /// single node (which has no other node to hold a backup: `--replicas 1`).
    pub fn default_log_replicas(nodes: u16) -> u16 {
        1.min(nodes.saturating_sub(1))
    }

    /// The roles of the run's nodes (for a configuration [`RunConfig::validate`] accepted).
    pub fn topology(&self) -> Topology {
        let placed = self
            .placed_roles()
            .unwrap_or_else(|e| panic!("the run's roles were validated at start-up: {e}"));
        let t = match self.roles {
            Roles::Partitioned => Topology::partitioned(self.nodes),
            Roles::SharedData { memory_nodes } => {
                let own = placed.iter().filter(|(_, p)| *p == Placement::Own).count() as u16;
                let t = Topology::shared_data(
                    memory_nodes,
                    self.nodes.saturating_sub(memory_nodes + own).max(1),
                );
                let t = t.with_homes(self.homes);
                if self.colocate {
                    t.colocated()
                } else {
                    t
                }
            }
        };
        placed
            .into_iter()
            .fold(t, |t, (role, placement)| t.with_service(role, placement))
    }

    /// Nodes holding records: what a workload spreads its tables over.
    pub fn memory_nodes(&self) -> u16 {
        match self.roles {
            Roles::Partitioned => self.nodes,
            Roles::SharedData { memory_nodes, .. } => memory_nodes,
        }
    }

    /// The engine's configuration for this run, with each coordinator's log ring of
    /// `log_ring_words` (from the sizing).
    pub fn txn_config(&self, log_ring_words: u32) -> atoll_txn::TxnConfig {
        atoll_txn::TxnConfig {
            plan: self.plan,
            log_replicas: self.log_replicas,
            log_ring_words,
            log_applied: self.replicates_partitions(),
            instance_log: self.instance_log.is_some(),
            coordinators_total: self.coordinators_total(),
            coordinators_per_node: self.coordinators_per_node(),
            log_slots: self.topology().log_slots(self.log_replicas),
            loc_cache_entries_max: loc_cache_entries_max(self.coordinators_total()),
            family: self.family_config(),
        }
    }

    /// Whether each partition's backups keep a replica of it, applying the coordinators'
    /// logs ([`atoll_txn::TxnConfig::log_applied`]): partitioned, with backups, and a protocol
    /// whose log is what it installs (a sequenced one replicates its inputs instead; the
    /// snapshot-isolation family's replicas come with the shared-data fail-over, issue 41).
    pub fn replicates_partitions(&self) -> bool {
        matches!(self.roles, Roles::Partitioned)
            && self.log_replicas > 0
            && self.protocol.logs_its_installs()
    }

    /// Co-routines running transactions, on every compute node.
    pub fn coordinators_total(&self) -> u32 {
        self.topology().compute_nodes() as u32 * self.threads as u32 * self.coroutines as u32
    }

    /// The cluster the workload's knobs are read against, as one process draws every
    /// transaction.
    pub fn workload_shape(&self) -> WorkloadShape {
        WorkloadShape::new(self.memory_nodes(), self.threads)
    }

    pub fn coordinators_per_node(&self) -> u32 {
        self.threads as u32 * self.coroutines as u32
    }
}

/// The resolved configuration as reports show it.
#[derive(Clone, Debug, Serialize)]
pub struct ConfigReport {
    pub fabric: &'static str,
    /// The simulator's network profile and where its numbers come from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub net_profile: Option<NetReport>,
    /// The simulator's CPU profile (costs in ns of the simulated core).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_profile: Option<CpuReport>,
    /// The simulator's faults, as the keys `--faults` takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<std::collections::BTreeMap<&'static str, u64>>,
    pub workload: &'static str,
    /// The workload's knobs, each in the form it is given; in JSON a number or a boolean
    /// where it is one ([`typed_knobs`]).
    #[serde(serialize_with = "typed_knobs")]
    pub workload_knobs: std::collections::BTreeMap<String, String>,
    pub protocol: &'static str,
    /// The isolation level the protocol guarantees (`serializable`, `snapshot`): which
    /// workload checks bind the run ([`atoll_workloads::Binds`]) and how its history is
    /// checked.
    pub isolation: &'static str,
    pub plan: String,
    pub nodes: u16,
    /// `partitioned`, or `shared-data` with the roles' node counts.
    pub architecture: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_nodes: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_nodes: Option<u16>,
    /// Shared-data: the node each of the family's roles runs on, as `NAME_node`
    /// ([`atoll_storage::Topology::services`]).
    #[serde(flatten)]
    pub service_nodes: std::collections::BTreeMap<String, u16>,
    /// Shared-data: compute node `i` beside memory node `i` on one machine.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub colocated: Option<bool>,
    /// Shared-data: where a transaction's local keys are (`near`, `any`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub homes: Option<&'static str>,
    pub threads: u16,
    pub coroutines: u16,
    pub duration_s: f64,
    pub warmup_s: f64,
    pub seed: u64,
    pub net_latency_us: std::collections::BTreeMap<String, f64>,
    pub pin_threads: bool,
    pub os_threads: usize,
    /// Copies of each partition (`--replicas`): its primary and the backups each commit
    /// logs to (`RunConfig::log_replicas` + 1).
    pub replicas: u16,
    pub attempts_max: u32,
    /// Open loop: transactions offered per second (`--rate`), if not closed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate_per_s: Option<f64>,
    /// The protocol family's knobs, each at its value (given or default), in the family's
    /// order, then the fields it derives from them: shown among the configuration's own.
    #[serde(flatten)]
    pub family: FamilyReport,
    /// Words of each coordinator's log ring (from the workload's largest write set).
    pub log_ring_words: u32,
    /// Bytes of every node's regions and ordered indexes, as computed before allocating.
    pub memory_bytes: u64,
    /// A deployment on machines: the placement of its instances and threads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
    /// The simulator's channel between instances of one machine, with its source.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub channel: Option<NetReport>,
    /// The simulator's memory and migration model of the machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_model: Option<String>,
    /// Each node's own commit log (`--instance-log`): how it is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_log: Option<String>,
}

/// A family's knobs and derived fields as a report shows them, in declaration order.
#[derive(Clone, Debug, Default)]
pub struct FamilyReport(pub Vec<(&'static str, atoll_txn::KnobValue)>);

impl Serialize for FamilyReport {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use atoll_txn::KnobValue;
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (name, v) in &self.0 {
            match v {
                KnobValue::Flag(b) => m.serialize_entry(name, b)?,
                KnobValue::Number(n) => m.serialize_entry(name, n)?,
                KnobValue::Choice(c) => m.serialize_entry(name, c)?,
            }
        }
        m.end()
    }
}

/// Parses `--net-latency-us`: one number for every verb class, or per class
/// `read=1.5,write=1,cas=2,fetch_add=2,rpc=3` (classes not named get 0).
pub fn parse_latency_us(s: &str) -> Result<[f64; VerbKind::COUNT], ConfigError> {
    let num = |v: &str, what: &str| -> Result<f64, ConfigError> {
        v.trim().parse::<f64>().map_err(|_| {
            ConfigError(format!(
                "net-latency-us {what}'{v}' is not a number of microseconds"
            ))
        })
    };
    if !s.contains('=') {
        return Ok([num(s, "")?; VerbKind::COUNT]);
    }
    let mut out = [0.0; VerbKind::COUNT];
    let mut seen = [false; VerbKind::COUNT];
    for part in s.split(',') {
        let (k, v) = part.split_once('=').ok_or_else(|| {
            ConfigError(format!(
                "net-latency-us entry '{part}' is not CLASS=MICROSECONDS"
            ))
        })?;
        let kind = VerbKind::parse(k.trim()).ok_or_else(|| {
            ConfigError(format!(
                "net-latency-us: unknown verb class '{}': accepted are read, write, cas, fetch_add, rpc",
                k.trim()
            ))
        })?;
        if seen[kind as usize] {
            return Err(ConfigError(format!(
                "net-latency-us: class '{}' is given twice: expected each class once",
                kind.name()
            )));
        }
        seen[kind as usize] = true;
        out[kind as usize] = num(v, &format!("{}=", kind.name()))?;
    }
    Ok(out)
}

/// The network profile a simulated run used.
#[derive(Clone, Debug, Serialize)]
pub struct NetReport {
    pub name: &'static str,
    pub source: &'static str,
    pub rtt_ns: std::collections::BTreeMap<String, u64>,
    pub bandwidth_bytes_per_s: f64,
    pub nic_msgs_per_s: f64,
    pub qp_cache_peers: u32,
    pub qp_miss_ns: u64,
    pub one_sided_in_nic: bool,
    pub atomic_word_ns: u64,
}

impl NetReport {
    pub fn of(p: &atoll_fabric_sim::net::NetProfile) -> Self {
        NetReport {
            name: p.name,
            source: p.source,
            rtt_ns: VerbKind::ALL
                .iter()
                .map(|k| (k.name().to_string(), p.rtt_ns[*k as usize]))
                .collect(),
            bandwidth_bytes_per_s: p.bandwidth_bytes_per_s,
            nic_msgs_per_s: p.nic_msgs_per_s,
            qp_cache_peers: p.qp_cache_peers,
            qp_miss_ns: p.qp_miss_ns,
            one_sided_in_nic: p.one_sided_in_nic,
            atomic_word_ns: p.atomic_word_ns,
        }
    }
}

/// The CPU profile a simulated run used.
#[derive(Clone, Debug, Serialize)]
pub struct CpuReport {
    pub name: String,
    pub switch_ns: u64,
    pub post_ns: u64,
    pub local_op_ns: u64,
    pub rpc_handler_ns: u64,
    pub rpc_handler_ns_per_byte: f64,
    pub txn_ns: u64,
    pub txn_ns_per_access: u64,
}

impl CpuReport {
    pub fn of(p: &atoll_fabric_sim::net::CpuProfile) -> Self {
        CpuReport {
            name: p.name.clone(),
            switch_ns: p.switch_ns,
            post_ns: p.post_ns,
            local_op_ns: p.local_op_ns,
            rpc_handler_ns: p.rpc_handler_ns,
            rpc_handler_ns_per_byte: p.rpc_handler_ns_per_byte,
            txn_ns: p.txn_ns,
            txn_ns_per_access: p.txn_ns_per_access,
        }
    }
}
