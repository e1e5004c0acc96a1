//! NAM-DB's knobs (versions, overflow area, version mover, garbage collector, timestamp
//! vector) and regions (the vector, the snapshot floors).

use super::mover::{MOVER_INTERVAL_NS, NOTE_BYTES_PER_ENTRY};
use atoll_storage::ExtraRegion;
use atoll_txn::knobs::{
    ClusterShape, FamilyConfig, FamilyHeap, KnobError, KnobKind, KnobSpec, Knobs,
};
use atoll_txn::tsvc::{SnapshotFloors, TsVector, VectorSlots, TS_FLOORS_REGION, TS_VECTOR_REGION};
use std::any::Any;
use std::sync::Arc;

/// Nanoseconds per microsecond (the knobs are in µs, the engine's clocks in ns).
const NS_PER_US: u64 = 1_000;

/// Copies of the timestamp vector a coordinator holds at once: its snapshot, and the
/// previous copy it compares a new one with (the fetcher's shared copy is one per node).
pub const SNAPSHOT_COPIES_PER_COORDINATOR: u64 = 2;

/// Bytes of a vector slot.
const SLOT_BYTES: u64 = 8;

pub const OVERFLOW_VERSIONS: KnobSpec = KnobSpec {
    name: "overflow_versions",
    kind: KnobKind::Number {
        default: 0,
        min: 0,
        max: crate::mvcc::config::VERSIONS_MAX,
    },
    help: "with --rsi-versions 2 or more: overflow entries per record slot, where each memory \
           node's version mover copies the old versions records keep, so older snapshots \
           still find theirs (0: none, no mover)",
};

pub const MOVER_INTERVAL_US: KnobSpec = KnobSpec {
    name: "mover_interval_us",
    kind: KnobKind::Number {
        default: MOVER_INTERVAL_NS / NS_PER_US,
        min: 1,
        // A slower mover is none in runs of seconds.
        max: 1_000_000,
    },
    help: "with --overflow-versions: microseconds between the version mover's passes over a \
           memory node's records (the paper's 1 ms)",
};

pub const OVERFLOW_KEEP_US: KnobSpec = KnobSpec {
    name: "overflow_keep_us",
    kind: KnobKind::Number {
        default: 0,
        min: 0,
        // A minute: longer than any run's ring could hold.
        max: 60_000_000,
    },
    help: "with --overflow-versions: the least microseconds an overflow entry is kept when no \
           live snapshot needs it any more (the slides keep 1 s, 1000000)",
};

pub const VECTOR_SLOTS: KnobSpec = KnobSpec {
    name: "vector_slots",
    kind: KnobKind::Choice {
        default: "coordinator",
        accepted: &["coordinator", "node"],
    },
    help: "what owns a slot of the timestamp vector: coordinator (the paper's one per thread) \
           or node (compression: one per compute node, its coordinators sharing a local \
           counter)",
};

pub const VECTOR_FETCHER: KnobSpec = KnobSpec {
    name: "vector_fetcher",
    kind: KnobKind::Flag,
    help: "a detached fetcher on each compute node keeps a copy of the timestamp vector, which \
           snapshots take instead of reading the vector",
};

/// NAM-DB's knobs, in the order its help lists them.
pub const KNOBS: [KnobSpec; 6] = [
    crate::rsi::config::VERSIONS,
    OVERFLOW_VERSIONS,
    MOVER_INTERVAL_US,
    OVERFLOW_KEEP_US,
    VECTOR_SLOTS,
    VECTOR_FETCHER,
];

/// NAM-DB's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamDbConfig {
    /// Versions in a record block.
    pub versions: u32,
    /// Overflow entries per record slot (0: no overflow area, no mover).
    pub overflow_versions: u32,
    /// What owns a slot of the timestamp vector.
    pub vector_slots: VectorSlots,
    /// Snapshots take a compute node's cached copy of the vector.
    pub vector_fetcher: bool,
    /// The pause between the version mover's passes over a memory node's records.
    pub mover_interval_ns: u64,
    /// With an overflow area the garbage collector runs: compute nodes publish their
    /// oldest live snapshot ([`SnapshotFloors`]) and the version mover reuses an overflow
    /// entry only once every one sees the version that replaced the entry's (and the entry
    /// is `overflow_keep_ns` old); without it the ring's wrap frees entries, needed or not.
    pub overflow_gc: bool,
    /// The least time an overflow entry is kept, even when no snapshot needs it (the
    /// slides delete "when older than every cached T_R, or after 1 s, whichever is later").
    pub overflow_keep_ns: u64,
}

impl NamDbConfig {
    /// Slots of the vector: one per coordinator, or one per compute node.
    pub fn vector_slots_total(&self, shape: &ClusterShape) -> u32 {
        self.vector_slots
            .count(shape.coordinators_total, shape.compute_nodes)
    }

    /// The slot coordinator `id` commits in.
    pub fn vector_slot_of(&self, shape: &ClusterShape, id: u32) -> u32 {
        match self.vector_slots {
            VectorSlots::Coordinator => id,
            // Coordinator ids are dense per compute node, in node order.
            VectorSlots::Node => id / shape.coordinators_per_node.max(1),
        }
    }
}

impl Default for NamDbConfig {
    fn default() -> Self {
        configure_typed(&Knobs::defaults(&KNOBS)).expect("the defaults go together")
    }
}

impl FamilyConfig for NamDbConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn version_slots(&self) -> u32 {
        self.versions
    }

    fn overflow_per_record(&self) -> u32 {
        self.overflow_versions
    }

    /// The timestamp service's region as RSI's (its sequencer polls on the timestamp node,
    /// though NAM-DB takes no timestamp from it), the vector and the snapshot floors.
    fn regions(&self, shape: &ClusterShape) -> Vec<ExtraRegion> {
        let slots = self.vector_slots_total(shape);
        vec![
            crate::rsi::config::ts_service_region(shape),
            ExtraRegion {
                name: TS_VECTOR_REGION,
                words: TsVector::region_words_for(slots),
            },
            ExtraRegion {
                name: TS_FLOORS_REGION,
                words: SnapshotFloors::region_words_for(
                    self.overflow_gc,
                    shape.compute_nodes,
                    slots,
                ),
            },
        ]
    }

    fn heap(&self, shape: &ClusterShape) -> FamilyHeap {
        // With the collector, each coordinator's snapshot is registered with its node.
        let copies = SNAPSHOT_COPIES_PER_COORDINATOR + u64::from(self.overflow_gc);
        FamilyHeap {
            cluster_bytes: copies
                * shape.coordinators_total as u64
                * self.vector_slots_total(shape) as u64
                * SLOT_BYTES,
            cluster_what: "NAM-DB's snapshot vectors",
            cluster_hint: ", or --vector-slots node",
            per_record_bytes: self.overflow_versions as u64 * NOTE_BYTES_PER_ENTRY,
            table_copies_percent: 0,
        }
    }
}

/// NAM-DB's configuration from its knobs; refuses an overflow area without versions to move,
/// and the mover's and collector's knobs without an overflow area.
pub fn configure_typed(knobs: &Knobs) -> Result<NamDbConfig, KnobError> {
    let versions = knobs.number(crate::rsi::config::VERSIONS.name) as u32;
    let overflow_versions = knobs.number(OVERFLOW_VERSIONS.name) as u32;
    if overflow_versions > 0 && versions < 2 {
        return Err(KnobError(format!(
            "overflow-versions={overflow_versions} is NAM-DB's overflow area for the old \
             versions its mover takes from a record's buffer: it needs --rsi-versions 2 or \
             more (not {versions})"
        )));
    }
    let needs_overflow = |spec: &KnobSpec, what: &str| {
        if overflow_versions == 0 && knobs.given(spec.name) {
            Err(KnobError(format!(
                "{}={} {what}, which exists only with an overflow area: it needs \
                 --overflow-versions 1 or more",
                spec.flag(),
                knobs.number(spec.name)
            )))
        } else {
            Ok(())
        }
    };
    needs_overflow(&MOVER_INTERVAL_US, "paces NAM-DB's version mover")?;
    needs_overflow(
        &OVERFLOW_KEEP_US,
        "is how long NAM-DB's garbage collector keeps an overflow entry",
    )?;
    Ok(NamDbConfig {
        versions,
        overflow_versions,
        vector_slots: VectorSlots::parse(knobs.choice(VECTOR_SLOTS.name))
            .map_err(|e| KnobError(e.to_string()))?,
        vector_fetcher: knobs.flag(VECTOR_FETCHER.name),
        mover_interval_ns: knobs.number(MOVER_INTERVAL_US.name) * NS_PER_US,
        // The overflow area comes with its collector.
        overflow_gc: overflow_versions > 0,
        overflow_keep_ns: knobs.number(OVERFLOW_KEEP_US.name) * NS_PER_US,
    })
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    Ok(Arc::new(configure_typed(knobs)?))
}
