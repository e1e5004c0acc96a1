//! What a configuration needs before anything is allocated: each coordinator's log ring
//! (from the workload's largest write set), the words of every region and the bytes of every
//! node. A run whose needs exceed a limit is refused with the figures, before it allocates.

use crate::config::{ConfigError, RunConfig};
use atoll_protocols::ProtocolKind;
use atoll_storage::layout::REGION_WORDS_MAX;
use atoll_storage::{TableLayout, TableSpec};
use atoll_txn::stages::log_record_words;
use atoll_workloads::cycle::Cycle;
use atoll_workloads::smallbank::SmallBank;
use atoll_workloads::ycsb::Ycsb;
use atoll_workloads::{Workload, WorkloadKind};

/// Largest log records a coordinator's ring holds before it wraps: a few, so the ring is
/// not the record's size exactly and consecutive commits land at different offsets.
pub const LOG_RING_RECORDS: u64 = 8;

/// Bytes of a memory word.
const WORD_BYTES: u64 = 8;

/// What one run needs, computed from its configuration alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Sizing {
    pub nodes: u16,
    /// The largest log record one transaction of the workload can write.
    pub log_record_words_max: u64,
    /// Each coordinator's log ring on each of its backups.
    pub log_ring_words: u32,
    /// Words of the log region each node registers.
    pub log_region_words: u64,
    /// Words of each table's region on each node, by table name.
    pub table_region_words: Vec<(String, u64)>,
}

impl Sizing {
    /// Words of every region of one node.
    pub fn node_region_words(&self) -> Vec<u64> {
        self.table_region_words
            .iter()
            .map(|(_, w)| *w)
            .chain(std::iter::once(self.log_region_words))
            .collect()
    }

    /// Bytes of every region of every node.
    pub fn region_bytes(&self) -> u64 {
        self.node_region_words().iter().sum::<u64>() * WORD_BYTES * self.nodes as u64
    }

    /// The one line a run prints at start-up.
    pub fn line(&self) -> String {
        format!(
            "memory: {} of regions across {} node{} ({} per node, of which log {})",
            human_bytes(self.region_bytes()),
            self.nodes,
            if self.nodes == 1 { "" } else { "s" },
            human_bytes(self.region_bytes() / self.nodes as u64),
            human_bytes(self.log_region_words * WORD_BYTES),
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
    let perr = |e: atoll_workloads::ParamError| ConfigError(e.0);
    let version_slots = if cfg.protocol == ProtocolKind::Mvcc {
        cfg.mvcc_slots
    } else {
        1
    };
    match cfg.workload {
        WorkloadKind::SmallBank => size(
            cfg,
            &SmallBank::from_params(&cfg.params).map_err(perr)?,
            version_slots,
        ),
        WorkloadKind::Ycsb => size(
            cfg,
            &Ycsb::from_params(&cfg.params, cfg.nodes).map_err(perr)?,
            version_slots,
        ),
        WorkloadKind::Cycle => size(
            cfg,
            &Cycle::from_params(&cfg.params, cfg.nodes).map_err(perr)?,
            version_slots,
        ),
    }
}

/// What `cfg` needs with workload `w` and `version_slots` versions per record; refuses a
/// region whose word offsets would not fit.
pub fn size<W: Workload>(
    cfg: &RunConfig,
    w: &W,
    version_slots: u32,
) -> Result<Sizing, ConfigError> {
    let specs: Vec<TableSpec> = w.tables(cfg.nodes);
    let mut table_region_words = Vec::with_capacity(specs.len());
    for spec in &specs {
        let words = TableLayout::region_words_needed(spec, version_slots);
        if words > REGION_WORDS_MAX {
            return Err(ConfigError(format!(
                "{} table {} needs {words} words per node ({} records of {} payload words{}), over the {REGION_WORDS_MAX}-word limit of a region's 32-bit word offsets: expected fewer or smaller records ({})",
                W::NAME,
                spec.name,
                spec.capacity_per_node,
                spec.payload_words,
                if version_slots > 1 {
                    format!(", {version_slots} versions each")
                } else {
                    String::new()
                },
                knobs(w)
            )));
        }
        table_region_words.push((spec.name.clone(), words));
    }
    let payload_words = |t: atoll_storage::TableId| {
        specs[t.0 as usize].payload_words as u64
            + atoll_storage::layout::ENGINE_PAYLOAD_WORDS as u64
    };
    let write_set = w.largest_write_set();
    let log_record_words_max = log_record_words(write_set.iter().map(|&t| payload_words(t)));
    let ring = LOG_RING_RECORDS * log_record_words_max;
    let coordinators = cfg.coordinators_total() as u64;
    let log_region_words = ring * coordinators;
    if log_region_words > REGION_WORDS_MAX {
        return Err(ConfigError(format!(
            "the log region needs {log_region_words} words per node ({coordinators} coordinators (nodes × threads × coroutines) × {ring}-word rings of {LOG_RING_RECORDS} records of up to {log_record_words_max} words: {} writes a {}-record write set), over the {REGION_WORDS_MAX}-word limit of a region's 32-bit word offsets: expected fewer coordinators or a smaller write set ({})",
            W::NAME,
            write_set.len(),
            knobs(w)
        )));
    }
    Ok(Sizing {
        nodes: cfg.nodes,
        log_record_words_max,
        log_ring_words: ring as u32,
        log_region_words,
        table_region_words,
    })
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
        // Two entries of 512 stored words each, plus their heads, the record's head and tail.
        assert_eq!(s.log_record_words_max, 3 + 2 * (4 + 512) + 1);
        assert_eq!(s.log_ring_words as u64, LOG_RING_RECORDS * 1036);
        let smallbank = sizing(&RunConfig::default()).unwrap();
        // Amalgamate's three one-word balances (three stored words each).
        assert_eq!(smallbank.log_record_words_max, 3 + 3 * (4 + 3) + 1);
    }

    #[test]
    fn sizing_human_bytes_picks_the_largest_unit() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
    }
}
