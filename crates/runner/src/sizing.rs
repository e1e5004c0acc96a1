//! What a configuration needs before anything is allocated: each coordinator's log ring
//! (from the workload's largest write set), the words of every region and the bytes of every
//! node. A run whose needs exceed a limit is refused with the figures, before it allocates.

use crate::config::{ConfigError, RunConfig};
use atoll_storage::layout::REGION_WORDS_MAX;
use atoll_storage::ordered;
use atoll_storage::{TableLayout, TableSpec};
use atoll_txn::knobs::FamilyHeap;
use atoll_txn::stages::log_record_words;
use atoll_workloads::{Workload, WorkloadVisitor};

pub use atoll_txn::log_ring::LOG_RING_RECORDS;

/// Bytes of a memory word.
const WORD_BYTES: u64 = 8;
/// Bytes of a kibibyte, /proc/meminfo's unit.
const KIB_BYTES: u64 = 1024;
/// Share of physical memory, in percent, a run's regions and indexes may take: the rest is
/// for the operating system, the process's other heaps (caches, histories in flight) and
/// other programs.
pub const MEMORY_PERCENT_MAX: u64 = 75;
/// The cap when physical memory cannot be read (16 GiB: a common workstation's memory).
pub const MEMORY_BYTES_FALLBACK: u64 = 16 << 30;

/// Busy worker threads a cluster may run per core of this machine. Every node process's
/// `--threads` workers poll their UCX worker without sleeping (an idle one yields its core
/// every `IDLE_TURNS_BEFORE_YIELD` turns, no more), so each gets about cores / threads of a
/// core. At 8 per core a worker still runs every few scheduler slices (tens of ms), far
/// inside the heartbeat's 2 s and the ops' 5 s timeout, and the bootstrap's start-up
/// stays in seconds (16 processes on 2 cores ran and passed over shm and tcp, see
/// docs/cluster.md); beyond
/// it, timeouts would fire from starvation rather than failure, and the figures would
/// measure the scheduler.
pub const OVERSUBSCRIPTION_MAX: u64 = 8;
/// Memory a node process needs beside its regions and indexes: the binary, the UCX
/// context and workers (their bounce buffers and shared-memory segments), the allocator's
/// arenas, thread stacks, the summary in flight. A node with 0.4 MiB of regions peaked at
/// 26 MiB resident over tcp and 54 MiB over shm (its segments are resident too;
/// docs/cluster.md): 64 MiB covers both.
pub const NODE_PROCESS_BYTES: u64 = 64 << 20;

/// What this machine offers a cluster's processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    /// Cores this process may use (`available_parallelism`).
    pub cores: u64,
    /// `MemAvailable` of `/proc/meminfo`, in bytes; `None` where it cannot be read.
    pub mem_available_bytes: Option<u64>,
}

impl Machine {
    /// This machine, now.
    pub fn this() -> Machine {
        Machine {
            cores: crate::env::cores() as u64,
            mem_available_bytes: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|m| meminfo_bytes(&m, "MemAvailable:")),
        }
    }
}

/// Refuses `processes` node processes on `machine` (each running `threads` busy-polling
/// workers and holding one node's share of `sizing`) that it cannot run: more busy threads
/// than [`OVERSUBSCRIPTION_MAX`] per core, or more memory than is available. `what` names
/// where the process count came from (`--nodes 1024`).
pub fn cluster_fits(
    processes: u16,
    threads: u16,
    what: &str,
    sizing: &Sizing,
    machine: &Machine,
) -> Result<(), ConfigError> {
    if processes == 0 {
        return Ok(());
    }
    let busy = processes as u64 * threads as u64;
    let busy_max = OVERSUBSCRIPTION_MAX * machine.cores.max(1);
    if busy > busy_max {
        return Err(ConfigError(format!(
            "{what} × --threads {threads} is {busy} busy-polling worker threads on this machine's {} core{}, over the bound of {busy_max} ({OVERSUBSCRIPTION_MAX} per core: each worker polls without sleeping, and beyond that heartbeats and op timeouts fire from starvation, not failure): expected at most {busy_max} node processes × threads here, or nodes on other machines (--hosts)",
            machine.cores,
            if machine.cores == 1 { "" } else { "s" },
        )));
    }
    if let Some(avail) = machine.mem_available_bytes {
        let per_node = sizing.total_bytes() / sizing.nodes.max(1) as u64 + NODE_PROCESS_BYTES;
        let need = per_node * processes as u64;
        if need > avail {
            return Err(ConfigError(format!(
                "{what} needs {} of memory on this machine ({} per node process: its regions and indexes {} + {} for the process), over the {} available (/proc/meminfo MemAvailable): expected at most {} node processes here, fewer records, or nodes on other machines (--hosts)",
                human_bytes(need),
                human_bytes(per_node),
                human_bytes(per_node - NODE_PROCESS_BYTES),
                human_bytes(NODE_PROCESS_BYTES),
                human_bytes(avail),
                avail / per_node
            )));
        }
    }
    Ok(())
}

/// What one run needs, computed from its configuration alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    pub nodes: u16,
    /// Nodes holding records (the first `memory_nodes`): the others register their tables'
    /// regions empty.
    pub memory_nodes: u16,
    /// The largest log record one transaction of the workload can write.
    pub log_record_words_max: u64,
    /// Each coordinator's log ring on each of its backups.
    pub log_ring_words: u32,
    /// Words of the log region each node registers.
    pub log_region_words: u64,
    /// Words of each of the protocol family's regions each node registers, by name, in
    /// the catalog's order ([`atoll_txn::FamilyConfig::regions`]).
    pub family_regions: Vec<(&'static str, u64)>,
    /// Words of each of the family's regions its tables size, on each node holding records
    /// only, after `family_regions` ([`atoll_txn::FamilyConfig::table_regions`]): room
    /// reserved for the tables' growth, of which only what is used becomes memory.
    pub table_family_regions: Vec<(&'static str, u64)>,
    /// Bytes of those in use at start on each node holding records.
    pub table_family_start_bytes: u64,
    /// Words of each table's region on each node, by table name: the address space it
    /// reserves (a table that grows reserves room for what the budget allows), of which
    /// only what it holds becomes memory.
    pub table_region_words: Vec<(String, u64)>,
    /// Bytes of memory each node's tables take at start (their loaded records, index and
    /// overflow area): what the budget is asked for before growth.
    pub table_start_bytes: u64,
    /// Bytes a table without a cap may reserve room for on one node, by table (in the
    /// workload's order; ignored for a table with a cap).
    pub growth_bytes_per_node: Vec<u64>,
    /// The run's budget ([`memory_limit`]) and where the figure comes from.
    pub memory_max_bytes: u64,
    pub memory_max_source: String,
    /// The co-routines' own heaps (stacks and state), every node's.
    pub coroutine_bytes: u64,
    /// Heap bytes, at most, of each node's ordered indexes (full tables, and a mark per
    /// deleted key they keep) and of its deleted keys' versions (`gone_keys_max_per_node`
    /// of each table).
    pub ordered_index_bytes: u64,
    /// The protocol family's heap over the whole cluster ([`atoll_txn::knobs::FamilyHeap`];
    /// NAM-DB's snapshot vectors grow with the square of the coordinators).
    pub family_cluster_bytes: u64,
    /// The protocol family's heap on each node holding records (NAM-DB's mover notes).
    pub family_node_bytes: u64,
    /// Every coordinator's location cache, full (each capped at its share of
    /// `config::LOC_CACHES_BYTES_MAX`).
    pub loc_cache_bytes: u64,
    /// Replicas of other partitions each node holding records keeps beside its own (its
    /// backups' share: [`RunConfig::replicates_partitions`]), each as large as a partition.
    pub replica_copies: u16,
}

impl Sizing {
    /// Words of every region of one node, which holds records or not.
    pub fn node_region_words(&self, holds_records: bool) -> Vec<u64> {
        self.table_region_words
            .iter()
            .map(|(_, w)| if holds_records { *w } else { 0 })
            .chain(std::iter::once(self.log_region_words))
            .chain(self.family_regions.iter().map(|(_, w)| *w))
            .chain(
                self.table_family_regions
                    .iter()
                    .map(|(_, w)| if holds_records { *w } else { 0 }),
            )
            // The replicas' tables, in registered memory like the node's own
            // (`Catalog::with_replica_regions`).
            .chain(
                (0..self.replica_copies)
                    .flat_map(|_| self.table_region_words.iter())
                    .map(|(_, w)| if holds_records { *w } else { 0 }),
            )
            .collect()
    }

    /// Bytes of every region of every node.
    pub fn region_bytes(&self) -> u64 {
        let words = |holds| self.node_region_words(holds).iter().sum::<u64>();
        (words(true) * self.memory_nodes as u64
            + words(false) * (self.nodes - self.memory_nodes) as u64)
            * WORD_BYTES
    }

    /// Bytes of every node's regions other than its tables' (logs, a family's own), and
    /// what those the family sizes by the tables take at start on the nodes holding them.
    pub fn fixed_region_bytes(&self) -> u64 {
        (self.log_region_words + self.family_regions.iter().map(|(_, w)| *w).sum::<u64>())
            * self.nodes as u64
            * WORD_BYTES
            + self.table_family_start_bytes * self.memory_nodes as u64
    }

    /// Bytes a run takes at start: its tables as loaded, every other region, index and
    /// heap, every node's: what the budget is asked for before anything grows.
    pub fn total_bytes(&self) -> u64 {
        let copies = 1 + self.replica_copies as u64;
        self.start_bytes_beside_tables()
            + self.table_start_bytes * self.memory_nodes as u64 * copies
    }

    /// [`Sizing::total_bytes`] without the tables (which their stores take themselves).
    pub fn start_bytes_beside_tables(&self) -> u64 {
        self.fixed_region_bytes()
            + self.coroutine_bytes
            + self.ordered_index_bytes * self.memory_nodes as u64 * (1 + self.replica_copies as u64)
            + self.family_cluster_bytes
            + self.family_node_bytes * self.memory_nodes as u64
            + self.loc_cache_bytes
    }

    /// The one line a run prints at start-up.
    pub fn line(&self) -> String {
        let indexes = if self.ordered_index_bytes > 0 {
            format!(
                " and up to {} of ordered indexes and deleted keys",
                human_bytes(self.ordered_index_bytes * self.memory_nodes as u64)
            )
        } else {
            String::new()
        };
        format!(
            "memory: {} at start{indexes} across {} node{} (per {}node: log {}, tables {}), budget {} ({})",
            human_bytes(self.total_bytes()),
            self.nodes,
            if self.nodes == 1 { "" } else { "s" },
            if self.memory_nodes < self.nodes {
                "memory "
            } else {
                ""
            },
            human_bytes(self.log_region_words * WORD_BYTES),
            human_bytes(self.table_start_bytes),
            human_bytes(self.memory_max_bytes),
            self.memory_max_source,
        )
    }
}

/// `bytes` in the largest binary unit that keeps it at least 1.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// What `cfg` needs, for the workload and protocol it names.
pub fn sizing(cfg: &RunConfig) -> Result<Sizing, ConfigError> {
    struct Size<'a>(&'a RunConfig);
    impl WorkloadVisitor for Size<'_> {
        type Out = Result<Sizing, ConfigError>;
        fn visit<W: Workload>(self, w: W) -> Self::Out {
            size(self.0, &w, self.0.family_config().version_slots())
        }
    }
    cfg.workload
        .dispatch(&cfg.params, &cfg.workload_shape(), Size(cfg))
        .map_err(|e| ConfigError(e.0))?
}

/// The room each table without a cap reserves on a node: the budget's share of one node
/// each, or with regions allocated whole, that share split among them by their start.
fn growth_room(
    cfg: &RunConfig,
    specs: &[TableSpec],
    version_slots: u32,
    overflow_versions: u32,
    limit: u64,
) -> Vec<u64> {
    // A node's replicas of other partitions grow as its own partition does.
    let copies = 1 + cfg.replicates_partitions() as u64 * cfg.log_replicas as u64;
    let per_node = limit / cfg.memory_nodes().max(1) as u64 / copies;
    let start = |s: &TableSpec| {
        s.capacity_per_node as u64
            * (TableLayout::slot_words(s, version_slots)
                + TableLayout::overflow_words_per_record(s, overflow_versions))
            * WORD_BYTES
    };
    let growing: u64 = specs
        .iter()
        .filter(|s| s.capacity_max_per_node.is_none())
        .map(start)
        .sum();
    let tables_growing = specs
        .iter()
        .filter(|s| s.capacity_max_per_node.is_none())
        .count()
        .max(1) as u128;
    // Half the room by start size, half evenly: a table that starts small but grows as
    // fast as the others (TPC-C's NEW-ORDER beside ORDER-LINE) still has room.
    specs
        .iter()
        .map(|s| match cfg.regions_whole {
            false => per_node,
            true if growing == 0 => 0,
            true => {
                let by_start = per_node as u128 * start(s) as u128 / growing as u128;
                let even = per_node as u128 / tables_growing;
                ((by_start + even) / 2) as u64
            }
        })
        .collect()
}

/// Each table's region words on a node (its reservation, room to grow included) and the
/// bytes every table takes at start, refusing a region whose word offsets would not fit.
fn table_sizes<W: Workload>(
    w: &W,
    specs: &[TableSpec],
    version_slots: u32,
    overflow_versions: u32,
    growth_bytes_per_node: &[u64],
) -> Result<(Vec<(String, u64)>, u64, Vec<atoll_storage::TableSlots>), ConfigError> {
    let mut table_region_words = Vec::with_capacity(specs.len());
    let mut table_records = Vec::with_capacity(specs.len());
    let mut table_start_bytes = 0;
    for (spec, &growth_bytes_per_node) in specs.iter().zip(growth_bytes_per_node) {
        let records = TableLayout::capacity_reserved(
            spec,
            TableLayout::growth_records(
                spec,
                version_slots,
                growth_bytes_per_node,
                overflow_versions,
            ),
        );
        let per_record = TableLayout::slot_words(spec, version_slots)
            + TableLayout::overflow_words_per_record(spec, overflow_versions);
        table_start_bytes += (TableLayout::index_words_initial(spec)
            + spec.capacity_per_node as u64 * per_record)
            * WORD_BYTES;
        let words = TableLayout::region_words_for(spec, version_slots, records)
            + records as u64 * TableLayout::overflow_words_per_record(spec, overflow_versions);
        if words > REGION_WORDS_MAX {
            return Err(ConfigError(format!(
                "{} table {} needs {words} words per node ({} records of {} payload words{}), over the {REGION_WORDS_MAX}-word limit of a region's 32-bit word offsets: expected fewer or smaller records ({})",
                W::NAME,
                spec.name,
                spec.capacity_per_node,
                spec.payload_words,
                match (version_slots, overflow_versions) {
                    (1, _) => String::new(),
                    (v, 0) => format!(", {v} versions each"),
                    (v, o) => format!(", {v} versions each and {o} overflow entries"),
                },
                knobs(w)
            )));
        }
        table_region_words.push((spec.name.clone(), words));
        table_records.push(atoll_storage::TableSlots {
            start: spec.capacity_per_node as u64,
            reserved: records as u64,
        });
    }
    Ok((table_region_words, table_start_bytes, table_records))
}

/// Refuses a `--memory-max` beyond the machine's memory.
fn budget_fits_machine(cfg: &RunConfig) -> Result<(), ConfigError> {
    // A budget beyond the machine's memory protects nothing: growth would end in the
    // kernel's OOM kill, not in the budget's named stop.
    if let (Some(asked), Some(total)) = (cfg.memory_max_bytes, mem_total_bytes()) {
        if asked > total {
            return Err(ConfigError(format!(
                "--memory-max {} is more than this machine's {} of physical memory: expected at most that",
                human_bytes(asked),
                human_bytes(total)
            )));
        }
    }
    Ok(())
}

/// The family's heap per node holding records: its bytes per record slot, and its copies
/// of the tables (as many bytes as the tables take at start, in percent).
fn family_node_bytes(heap: &FamilyHeap, specs: &[TableSpec], table_start_bytes: u64) -> u64 {
    let slots: u64 = specs.iter().map(|s| s.capacity_per_node as u64).sum();
    slots * heap.per_record_bytes + table_start_bytes * heap.table_copies_percent / 100
}

/// Bytes of the ordered indexes and deleted keys a node's tables take at start (a table
/// that grows counts its keys as it goes: its store asks the budget).
fn ordered_index_bytes(specs: &[TableSpec]) -> u64 {
    specs
        .iter()
        .map(|s| {
            // A table that grows counts its keys as it goes (its store asks the budget).
            let gone = match s.capacity_max_per_node {
                Some(_) => s.gone_keys_max_per_node as u64,
                None => 0,
            };
            let ordered_keys = if s.ordered && s.capacity_max_per_node.is_some() {
                s.capacity_per_node as u64 + gone
            } else {
                0
            };
            ordered_keys * ordered::BYTES_PER_KEY_MAX + gone * atoll_storage::GONE_BYTES_PER_KEY_MAX
        })
        .sum()
}

/// The family's regions sized by the tables' record slots (`tables`), by name and words;
/// refuses one past a region's word limit.
fn family_table_regions<W: Workload>(
    cfg: &RunConfig,
    w: &W,
    table_records: &[atoll_storage::TableSlots],
) -> Result<(Vec<(&'static str, u64)>, u64), ConfigError> {
    let family = cfg.family_config();
    let regions: Vec<(&'static str, u64)> = family
        .table_regions(table_records)
        .into_iter()
        .map(|r| (r.name, r.words as u64))
        .collect();
    if let Some((name, words)) = regions.iter().find(|(_, w)| *w > REGION_WORDS_MAX) {
        return Err(ConfigError(format!(
            "--protocol {}: its region {name}, sized by the tables' {} record slots per node (room to grow included), would take {words} words on a node, over a region's {REGION_WORDS_MAX}: expected fewer records per node ({}) or a smaller --memory-max (the room a table reserves to grow)",
            cfg.protocol.name(),
            table_records.iter().map(|t| t.reserved).sum::<u64>(),
            knobs(w)
        )));
    }
    Ok((regions, family.table_regions_start_bytes(table_records)))
}

/// What `cfg` needs with workload `w` and `version_slots` versions per record; refuses a
/// region whose word offsets would not fit.
pub fn size<W: Workload>(
    cfg: &RunConfig,
    w: &W,
    version_slots: u32,
) -> Result<Sizing, ConfigError> {
    let family = cfg.family_config();
    let overflow_versions = family.overflow_per_record();
    let specs: Vec<TableSpec> = w.tables(cfg.memory_nodes());
    let (limit, source) = budget_fits_machine(cfg).map(|()| memory_limit(cfg))?;
    let growth_bytes_per_node = growth_room(cfg, &specs, version_slots, overflow_versions, limit);
    let (table_region_words, table_start_bytes, table_records) = table_sizes(
        w,
        &specs,
        version_slots,
        overflow_versions,
        &growth_bytes_per_node,
    )?;
    let payload_words = |t: atoll_storage::TableId| {
        specs[t.0 as usize].payload_words as u64
            + atoll_storage::layout::ENGINE_PAYLOAD_WORDS as u64
    };
    let write_set = w.largest_write_set();
    let log_record_words_max = log_record_words(write_set.iter().map(|&t| payload_words(t)));
    let (ring, rings, log_region_words) = log_rings(cfg, log_record_words_max);
    if log_region_words > REGION_WORDS_MAX {
        return Err(ConfigError(format!(
            "the log region needs {log_region_words} words per node ({rings} rings (log slots × threads × coroutines = {} × {} × {}) of {ring} words: {LOG_RING_RECORDS} records of up to {log_record_words_max} words, as {} writes up to {} records), over the {REGION_WORDS_MAX}-word limit of a region's 32-bit word offsets: expected fewer threads, coroutines or replicas, or a smaller write set ({})",
            cfg.topology().log_slots(cfg.log_replicas),
            cfg.threads,
            cfg.coroutines,
            W::NAME,
            write_set.len(),
            knobs(w)
        )));
    }
    let ordered_index_bytes = ordered_index_bytes(&specs);
    let shape = cfg.cluster_shape();
    let heap = family.heap(&shape);
    let (table_family_regions, table_family_start_bytes) =
        family_table_regions(cfg, w, &table_records)?;
    let sizing = Sizing {
        nodes: cfg.nodes,
        memory_nodes: cfg.memory_nodes(),
        log_record_words_max,
        log_ring_words: ring as u32,
        log_region_words,
        family_regions: family
            .regions(&shape)
            .into_iter()
            .map(|r| (r.name, r.words as u64))
            .collect(),
        table_family_regions,
        table_family_start_bytes,
        table_region_words,
        table_start_bytes,
        growth_bytes_per_node,
        memory_max_bytes: limit,
        memory_max_source: source.clone(),
        coroutine_bytes: cfg.coordinators_total() as u64 * W::COROUTINE_HEAP_BYTES,
        ordered_index_bytes,
        family_cluster_bytes: heap.cluster_bytes,
        family_node_bytes: family_node_bytes(&heap, &specs, table_start_bytes),
        loc_cache_bytes: cfg.coordinators_total() as u64
            * crate::config::loc_cache_entries_max(cfg.coordinators_total()) as u64
            * crate::config::LOC_CACHE_BYTES_PER_ENTRY,
        replica_copies: replica_copies(cfg),
    };
    let need = sizing.total_bytes();
    if need > limit {
        // Tables live on the nodes holding records; every node has its log and the rest.
        let holders = match cfg.roles {
            crate::config::Roles::Partitioned => format!("× {} nodes", cfg.nodes),
            crate::config::Roles::SharedData { memory_nodes, .. } => {
                format!("× {memory_nodes} memory nodes of {}", cfg.nodes)
            }
        };
        let (vectors, vector_hint) = if sizing.family_cluster_bytes > 0 {
            (
                format!(
                    " and {} {}",
                    heap.cluster_what,
                    human_bytes(sizing.family_cluster_bytes)
                ),
                heap.cluster_hint,
            )
        } else {
            (String::new(), "")
        };
        return Err(ConfigError(format!(
            "the configuration needs {} of memory at start (per node holding records: tables {}, log {}, ordered indexes {}; {holders}){vectors}, over the limit of {} ({source}), the co-routines' location caches {} and heaps {} of it: expected fewer nodes, records or co-routines{vector_hint}, or a larger --memory-max ({})",
            human_bytes(need),
            human_bytes(sizing.table_start_bytes),
            human_bytes(sizing.log_region_words * WORD_BYTES),
            human_bytes(sizing.ordered_index_bytes),
            human_bytes(limit),
            human_bytes(sizing.loc_cache_bytes),
            human_bytes(sizing.coroutine_bytes),
            knobs(w)
        )));
    }
    Ok(sizing)
}

/// Each coordinator ring's record words, the rings every node holds, and the words of its
/// log region (each ring a head word and its slots), for records of up to `record_words`.
fn log_rings(cfg: &RunConfig, record_words: u64) -> (u64, u64, u64) {
    let ring = LOG_RING_RECORDS as u64 * record_words;
    let rings =
        cfg.topology().log_slots(cfg.log_replicas) as u64 * cfg.coordinators_per_node() as u64;
    let region = (atoll_txn::log_ring::LOG_RING_HEAD_WORDS as u64 + ring) * rings;
    (ring, rings, region)
}

/// Replicas of other partitions each node holding records keeps ([`Sizing::replica_copies`]).
fn replica_copies(cfg: &RunConfig) -> u16 {
    if cfg.replicates_partitions() {
        cfg.log_replicas
    } else {
        0
    }
}

/// The memory `cfg` may use: `--memory-max`, or else [`memory_limit_bytes`]; with where
/// the figure comes from.
pub fn memory_limit(cfg: &RunConfig) -> (u64, String) {
    match cfg.memory_max_bytes {
        Some(b) => (
            b,
            cfg.memory_max_from
                .clone()
                .unwrap_or_else(|| "--memory-max".to_string()),
        ),
        None => memory_limit_bytes(),
    }
}

/// The memory a run may use: a share of this machine's physical memory, or a fixed cap
/// where that cannot be read; with where the figure comes from.
pub fn memory_limit_bytes() -> (u64, String) {
    match mem_total_bytes() {
        Some(total) => (
            total / 100 * MEMORY_PERCENT_MAX,
            format!(
                "{MEMORY_PERCENT_MAX}% of this machine's {} of physical memory",
                human_bytes(total)
            ),
        ),
        None => (
            MEMORY_BYTES_FALLBACK,
            "a fixed cap: /proc/meminfo MemTotal could not be read".to_string(),
        ),
    }
}

/// `MemTotal` of `/proc/meminfo`, in bytes.
fn mem_total_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_mem_total(&text)
}

fn parse_mem_total(meminfo: &str) -> Option<u64> {
    meminfo_bytes(meminfo, "MemTotal:")
}

/// The field `key` (with its colon) of `/proc/meminfo`'s text, in bytes (it says kB).
fn meminfo_bytes(meminfo: &str, key: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with(key))?;
    let mut parts = line[key.len()..].split_whitespace();
    let kib: u64 = parts.next()?.parse().ok()?;
    (parts.next() == Some("kB")).then_some(kib.checked_mul(KIB_BYTES)?)
}

/// The workload's knobs as a report shows them.
fn knobs<W: Workload>(w: &W) -> String {
    w.knobs()
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_workloads::WorkloadKind;

    #[test]
    fn sizing_counts_every_co_routines_heap_and_refuses_a_cluster_of_them_over_the_budget() {
        let cfg = |coroutines: u16, memory_max_bytes: Option<u64>| RunConfig {
            fabric: crate::config::Fabric::Sim {
                net: "edr-ib".into(),
                faults: Default::default(),
            },
            nodes: 256,
            threads: 4,
            coroutines,
            memory_max_bytes,
            // One copy: with backups every node holds a ring of each of the 65,536
            // coordinators (26 GiB here), which is not what this test measures.
            log_replicas: 0,
            ..RunConfig::default()
        };
        let few = sizing(&cfg(1, None)).unwrap();
        let many = sizing(&cfg(64, None)).unwrap();
        assert_eq!(
            many.coroutine_bytes - few.coroutine_bytes,
            256 * 4 * 63 * <atoll_workloads::smallbank::SmallBank as atoll_workloads::Workload>::COROUTINE_HEAP_BYTES,
            "each co-routine's heap"
        );
        assert!(many.coroutine_bytes >= 256 * 4 * 64 * 40 << 10);
        // 256 × 4 × 64 co-routines take 2.5 GiB of heap: a 2 GiB budget refuses them.
        let e = sizing(&cfg(64, Some(2 << 30))).unwrap_err();
        assert!(
            e.0.contains("over the limit of 2.0 GiB (--memory-max)"),
            "{e}"
        );
        assert!(e.0.contains("heaps 2.5 GiB"), "{e}");
    }

    #[test]
    fn sizing_rings_hold_a_few_of_the_workloads_largest_log_records() {
        let ycsb = RunConfig {
            workload: WorkloadKind::Ycsb,
            params: [("record_bytes", "4096"), ("ops_per_txn", "2")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..RunConfig::default()
        };
        let s = sizing(&ycsb).unwrap();
        // Two entries of 512 stored words each, plus their heads (4 words), the record's
        // head (6 words: to the 4 of a plain log, the attempt's tag and the timestamp its
        // write-back sets, which recovery needs) and tail.
        assert_eq!(s.log_record_words_max, 6 + 2 * (4 + 512) + 1);
        assert_eq!(s.log_ring_words as u64, LOG_RING_RECORDS as u64 * 1039);
        let smallbank = sizing(&RunConfig::default()).unwrap();
        // Amalgamate's three one-word balances (three stored words each).
        assert_eq!(smallbank.log_record_words_max, 6 + 3 * (4 + 3) + 1);
    }

    #[test]
    fn sizing_reads_mem_total_in_kib_and_refuses_other_units() {
        let meminfo = "MemTotal:        8000000 kB\nMemFree:  100 kB\n";
        assert_eq!(parse_mem_total(meminfo), Some(8_000_000 * 1024));
        assert_eq!(parse_mem_total("MemTotal: 8 MB\n"), None);
        assert_eq!(parse_mem_total("MemFree: 8 kB\n"), None);
        let (limit, source) = memory_limit_bytes();
        assert!(limit > 0 && !source.is_empty());
    }

    #[test]
    fn sizing_log_regions_hold_a_ring_of_every_coordinator_that_may_write_a_partition_backed_up_there(
    ) {
        let cfg = RunConfig {
            nodes: 8,
            threads: 2,
            coroutines: 4,
            log_replicas: 2,
            ..RunConfig::default()
        };
        let s = sizing(&cfg).unwrap();
        assert_eq!(
            s.log_region_words,
            8 * 2 * 4 * (1 + s.log_ring_words as u64),
            "nodes × threads × coroutines rings (any coordinator may write a partition this node backs up), each a head word and its slots"
        );
        let none = sizing(&RunConfig {
            log_replicas: 0,
            ..cfg
        })
        .unwrap();
        assert_eq!(none.log_region_words, 0, "no backups, no rings");
    }

    fn small_sizing(nodes: u16) -> Sizing {
        Sizing {
            nodes,
            memory_nodes: nodes,
            log_record_words_max: 8,
            log_ring_words: 64,
            log_region_words: 1 << 10,
            family_regions: vec![
                ("ts_service", 1 << 6),
                ("ts_vector", 1 << 3),
                ("ts_floors", 1),
            ],
            table_family_regions: Vec::new(),
            table_family_start_bytes: 0,
            table_region_words: vec![("t".into(), (1 << 20) - (1 << 10) - (1 << 6) - (1 << 3) - 1)],
            table_start_bytes: ((1 << 20) - (1 << 10) - (1 << 6) - (1 << 3) - 1) * WORD_BYTES,
            growth_bytes_per_node: vec![0],
            memory_max_bytes: u64::MAX,
            memory_max_source: "a test".into(),
            coroutine_bytes: 0,
            ordered_index_bytes: 0,
            family_cluster_bytes: 0,
            family_node_bytes: 0,
            loc_cache_bytes: 0,
            replica_copies: 0,
        }
    }

    #[test]
    fn sizing_location_caches_share_one_bound_whatever_the_co_routine_count() {
        use crate::config::{loc_cache_entries_max, LOC_CACHES_BYTES_MAX, LOC_CACHE_ENTRIES_MAX};
        // Few coordinators keep the full cap; many share the bound, down to one entry.
        assert_eq!(loc_cache_entries_max(16), LOC_CACHE_ENTRIES_MAX);
        assert_eq!(loc_cache_entries_max(0), LOC_CACHE_ENTRIES_MAX);
        assert_eq!(loc_cache_entries_max(4096), 2048);
        assert_eq!(loc_cache_entries_max(u32::MAX), 1);
        for (nodes, threads, coroutines) in [(2, 1, 8), (4, 10, 10), (64, 16, 255)] {
            let cfg = RunConfig {
                nodes,
                threads,
                coroutines,
                ..RunConfig::default()
            };
            let Ok(s) = sizing(&cfg) else { continue };
            assert!(
                s.loc_cache_bytes > 0 && s.loc_cache_bytes <= LOC_CACHES_BYTES_MAX,
                "{nodes} x {threads} x {coroutines}: {}",
                s.loc_cache_bytes
            );
        }
    }

    #[test]
    fn sizing_a_cluster_over_8_busy_threads_per_core_is_refused_naming_the_value_and_the_bound() {
        let m = Machine {
            cores: 2,
            mem_available_bytes: Some(64 << 30),
        };
        assert!(cluster_fits(16, 1, "--nodes 16", &small_sizing(16), &m).is_ok());
        assert!(cluster_fits(8, 2, "--nodes 8", &small_sizing(8), &m).is_ok());
        let e = cluster_fits(17, 1, "--nodes 17", &small_sizing(17), &m)
            .unwrap_err()
            .0;
        assert!(e.contains("--nodes 17") && e.contains("bound of 16"), "{e}");
        assert!(e.contains("2 cores") && e.contains("8 per core"), "{e}");
        let e = cluster_fits(9, 2, "--nodes 9", &small_sizing(9), &m)
            .unwrap_err()
            .0;
        assert!(e.contains("18 busy-polling"), "{e}");
        let e = cluster_fits(1024, 1, "--nodes 1024", &small_sizing(1024), &m)
            .unwrap_err()
            .0;
        assert!(e.contains("--nodes 1024"), "{e}");
        assert_eq!(e.lines().count(), 1);
    }

    #[test]
    fn sizing_a_cluster_needing_more_than_the_available_memory_is_refused_with_the_figures() {
        // 8 MiB of regions per node + 64 MiB per process = 72 MiB per node.
        let m = Machine {
            cores: 64,
            mem_available_bytes: Some(500 << 20),
        };
        assert!(cluster_fits(6, 1, "--nodes 6", &small_sizing(6), &m).is_ok());
        let e = cluster_fits(7, 1, "--nodes 7", &small_sizing(7), &m)
            .unwrap_err()
            .0;
        assert!(e.contains("--nodes 7 needs 504.0 MiB"), "{e}");
        assert!(e.contains("72.0 MiB per node process"), "{e}");
        assert!(
            e.contains("MemAvailable") && e.contains("at most 6 node"),
            "{e}"
        );
        // Unknown memory: only the cores bound applies; no process on this machine: none.
        let unknown = Machine {
            cores: 64,
            mem_available_bytes: None,
        };
        assert!(cluster_fits(7, 1, "--nodes 7", &small_sizing(7), &unknown).is_ok());
        assert!(cluster_fits(0, 1, "--hosts", &small_sizing(7), &m).is_ok());
    }

    #[test]
    fn sizing_reads_mem_available_in_kib() {
        let meminfo = "MemTotal:  8000000 kB\nMemAvailable:    123 kB\n";
        assert_eq!(meminfo_bytes(meminfo, "MemAvailable:"), Some(123 * 1024));
        assert_eq!(
            meminfo_bytes("MemAvailable: 99999999999999999999 kB", "MemAvailable:"),
            None
        );
    }

    #[test]
    fn sizing_human_bytes_picks_the_largest_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
