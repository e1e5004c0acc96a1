//! Tell's knobs: the versions a record slot keeps, and the commit managers (how many, how
//! often they sync, the tids each takes from the store's counter at a time, the tids each
//! keeps in flight), the buffering strategy and the index.

use atoll_txn::knobs::{
    ClusterShape, FamilyConfig, FamilyHeap, KnobError, KnobKind, KnobSpec, Knobs,
};
use std::any::Any;
use std::sync::Arc;

/// Versions a slot holds at least: the newest may be a writer's in flight, and a reader
/// needs the one before it ([`super::record::fits`]).
pub const VERSIONS_MIN: u64 = 2;

/// `--tell-versions`.
pub const VERSIONS: KnobSpec = KnobSpec {
    name: "tell_versions",
    kind: KnobKind::Number {
        default: 4,
        min: VERSIONS_MIN,
        max: crate::mvcc::config::VERSIONS_MAX,
    },
    help: "versions a Tell record's slot holds (Tell §5.1 serializes every version of a \
           record; an update that finds no room after garbage collection by lav aborts)",
};

/// Commit managers at most: the paper deploys 1 to 3; each is a node.
pub const COMMIT_MANAGERS_MAX: u64 = 8;

/// `--commit-managers`.
pub const COMMIT_MANAGERS: KnobSpec = KnobSpec {
    name: "commit_managers",
    kind: KnobKind::Number {
        default: 1,
        min: 1,
        max: COMMIT_MANAGERS_MAX,
    },
    help: "Tell's commit managers (Tell §4.2): manager i on memory node i, or each on a node \
           of its own with --cm-node own; processing node p starts its transactions at \
           manager p mod N; several take tid blocks from the store's counter and merge \
           their state every --cm-sync-us",
};

/// `--cm-sync-us`: the paper's 1 ms by default.
pub const CM_SYNC_US: KnobSpec = KnobSpec {
    name: "cm_sync_us",
    kind: KnobKind::Number {
        default: 1_000,
        min: 1,
        max: 1_000_000,
    },
    help: "with several commit managers: how often each sends the others its completed tids \
           and lav (Tell §4.2: 1 ms \"did not noticeably affect the overall abort rate\")",
};

/// `--tid-block`: the paper's example range.
pub const TID_BLOCK: KnobSpec = KnobSpec {
    name: "tid_block",
    kind: KnobKind::Number {
        default: 256,
        min: 1,
        max: 1 << 20,
    },
    help: "with several commit managers: tids a manager takes from the store's counter at a \
           time (Tell §4.2's \"e.g., 256\"); a tid of another manager's block not yet handed \
           out holds every base below it",
};

/// Tids in flight at most: a bit each, so at most 8 MiB of bitset per manager.
pub const CM_INFLIGHT_MAX_MAX: u64 = 1 << 26;

/// `--cm-inflight-max`.
pub const CM_INFLIGHT_MAX: KnobSpec = KnobSpec {
    name: "cm_inflight_max",
    kind: KnobKind::Number {
        default: super::cm::INFLIGHT_MAX_DEFAULT,
        min: 1,
        max: CM_INFLIGHT_MAX_MAX,
    },
    help: "tids a commit manager keeps above its base, a bit each (the 64 KiB ring of Tell's \
           code by default); a start past it aborts, naming the limit",
};

/// `--buffering`: Tell §5.5's strategies built so far.
pub const BUFFERING: KnobSpec = KnobSpec {
    name: "buffering",
    kind: KnobKind::Choice {
        default: "tb",
        accepted: &["tb", "sb", "sbvs"],
    },
    help: "Tell's record buffering (Tell §5.5): tb (each transaction fetches what it reads), \
           sb (a buffer per processing node, an entry used by a transaction whose snapshot \
           its version set covers; LRU, --buffer-percent of the records) or sbvs (sb, and a \
           miss first reads its cache unit's stamp in the store, which every update bumps: \
           an entry fetched under the same stamp is still valid)",
};

/// `--sbvs-unit`: consecutive keys of a table sharing one stamp (the paper tests 10 and
/// 1000).
pub const SBVS_UNIT: KnobSpec = KnobSpec {
    name: "sbvs_unit",
    kind: KnobKind::Number {
        default: 10,
        min: 1,
        max: 1 << 20,
    },
    help: "with --buffering sbvs: consecutive keys of a table in one cache unit, sharing the \
           stamp an update bumps (Tell §5.5.3's record grouping; the paper tests 10 and 1000)",
};

/// Words of the stamp region on each storage node: a unit's stamp is the word its table and
/// unit hash to, so units sharing a word invalidate each other's entries (a needless
/// refetch, never a stale read). 8 MiB a node.
pub const SBVS_STAMPS: usize = 1 << 20;

/// The stamp region's name.
pub const SBVS_REGION: &str = "tell_sbvs_stamps";

/// `--buffer-percent`: the spec's choice of 10% of the database (seed-mechanisms §1.11).
pub const BUFFER_PERCENT: KnobSpec = KnobSpec {
    name: "buffer_percent",
    kind: KnobKind::Number {
        default: 10,
        min: 1,
        max: 100,
    },
    help: "with --buffering sb or sbvs: the records a processing node's buffer holds, as a percent of \
           the records the tables hold",
};

/// `--tell-index`.
pub const INDEX: KnobSpec = KnobSpec {
    name: "tell_index",
    kind: KnobKind::Choice {
        default: "hash",
        accepted: &["hash", "btree"],
    },
    help: "how Tell's transactions find a record's slot by its key: hash (the engine's \
           one-sided hash index, as RSI and NAM-DB) or btree (Tell §5.3's latch-free B+tree, \
           a tree per table on each storage node, its nodes in the store and changed by \
           LL/SC only; processing nodes cache the inner nodes and fetch leaves, the storage \
           node walks it for a get by request; inserts add their keys at the commit's index \
           step; scans still use the engine's ordered index)",
};

/// `--btree-fanout`.
pub const BTREE_FANOUT: KnobSpec = KnobSpec {
    name: "btree_fanout",
    kind: KnobKind::Number {
        default: 32,
        min: super::btree::FANOUT_MIN as u64,
        max: 1024,
    },
    help: "with --tell-index btree: keys a tree node holds at most (a leaf of 32 is 72 words, \
           one READ)",
};

/// How Tell's transactions find records ([`INDEX`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Index {
    /// The engine's hash index.
    Hash,
    /// A B+tree per table on each storage node ([`super::tree_store`]).
    BTree { fanout: u32 },
}

/// Tell's record buffering ([`BUFFERING`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Buffering {
    /// The transaction's own entries: every read fetches.
    Transaction,
    /// A buffer per processing node ([`super::buffer::SharedBuffer`]).
    Shared,
    /// The same, misses revalidated by their cache unit's stamp in the store.
    Versioned,
}

impl Buffering {
    /// Whether a processing node keeps a shared buffer.
    pub fn shared(self) -> bool {
        self != Buffering::Transaction
    }
}

/// Tell's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TellConfig {
    /// Versions per record slot ([`VERSIONS`]).
    pub versions: u32,
    /// Commit managers ([`COMMIT_MANAGERS`]).
    pub commit_managers: u16,
    pub cm_sync_ns: u64,
    pub tid_block: u64,
    pub cm_inflight_max: u64,
    pub buffering: Buffering,
    pub buffer_percent: u64,
    /// Keys per cache unit ([`SBVS_UNIT`]).
    pub sbvs_unit: u64,
    pub index: Index,
}

impl TellConfig {
    /// The B+tree region's layout for `tables` (a tree each, with room for its reserved
    /// slots; `None`: the hash index, no region).
    pub fn tree_layout(
        &self,
        tables: &[atoll_storage::TableSlots],
    ) -> Option<super::tree_store::TreeLayout> {
        let reserved: Vec<u64> = tables.iter().map(|t| t.reserved).collect();
        match self.index {
            Index::Hash => None,
            Index::BTree { fanout } => {
                Some(super::tree_store::TreeLayout::for_tables(&reserved, fanout))
            }
        }
    }
}

impl Default for TellConfig {
    /// The knobs' defaults (what a node serves before a run says otherwise).
    fn default() -> Self {
        let number = |k: KnobSpec| match k.kind {
            KnobKind::Number { default, .. } => default,
            other => unreachable!("{} is a number, not {other:?}", k.name),
        };
        TellConfig {
            versions: number(VERSIONS) as u32,
            commit_managers: number(COMMIT_MANAGERS) as u16,
            cm_sync_ns: number(CM_SYNC_US) * 1_000,
            tid_block: number(TID_BLOCK),
            cm_inflight_max: number(CM_INFLIGHT_MAX),
            buffering: Buffering::Transaction,
            buffer_percent: number(BUFFER_PERCENT),
            sbvs_unit: number(SBVS_UNIT),
            index: Index::Hash,
        }
    }
}

/// Bits of the completed-tid bitset per byte.
const BITS_PER_BYTE: u64 = 8;

impl FamilyConfig for TellConfig {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn version_slots(&self) -> u32 {
        self.versions
    }

    fn heap(&self, shape: &ClusterShape) -> FamilyHeap {
        FamilyHeap {
            // Each manager's bitset of completed tids, at its fullest.
            cluster_bytes: self.commit_managers as u64
                * self.cm_inflight_max.div_ceil(BITS_PER_BYTE),
            cluster_what: "Tell's commit managers' completed-tid bitsets",
            cluster_hint: ", or a smaller --cm-inflight-max or --buffer-percent",
            per_record_bytes: 0,
            // Each processing node's shared buffer, full.
            table_copies_percent: match self.buffering {
                Buffering::Transaction => 0,
                Buffering::Shared | Buffering::Versioned => {
                    shape.compute_nodes as u64 * self.buffer_percent
                }
            },
        }
    }

    /// The B+tree index's node slots: a tree per table, sized by its reserved record
    /// slots.
    fn table_regions(
        &self,
        tables: &[atoll_storage::TableSlots],
    ) -> Vec<atoll_storage::ExtraRegion> {
        match self.tree_layout(tables) {
            Some(t) => vec![atoll_storage::ExtraRegion {
                name: super::tree_store::TREE_REGION,
                // Beyond a usize only where the sizing refuses it first.
                words: usize::try_from(t.region_words()).unwrap_or(usize::MAX),
            }],
            None => Vec::new(),
        }
    }

    /// The nodes a tree of the loaded keys takes; an insert takes its key's share as it
    /// comes ([`super::tree_store::TreeLayout::bytes_per_key`]).
    fn table_regions_start_bytes(&self, tables: &[atoll_storage::TableSlots]) -> u64 {
        match self.index {
            Index::Hash => 0,
            Index::BTree { fanout } => {
                let start: Vec<u64> = tables.iter().map(|t| t.start).collect();
                super::tree_store::TreeLayout::for_tables(&start, fanout).region_bytes()
            }
        }
    }

    fn crash_refusal(&self, _shape: &ClusterShape) -> Option<String> {
        (self.index != Index::Hash).then(|| {
            "--tell-index btree puts the tree's nodes by one-sided verbs: a crash between a \
             node's lock and its words leaves it held and part written, with nothing to \
             restore it from (expected --tell-index hash with a crash)"
                .into()
        })
    }

    fn check_node(&self, store: &atoll_storage::Store) -> Vec<atoll_txn::knobs::StateCheck> {
        super::index::check_trees(self, store)
    }

    fn after_load(&self, store: &atoll_storage::Store) -> Result<(), String> {
        super::index::build_trees(self, store)
    }

    /// SBVS's unit stamps.
    fn regions(&self, _shape: &ClusterShape) -> Vec<atoll_storage::ExtraRegion> {
        let mut out = Vec::new();
        if self.buffering == Buffering::Versioned {
            out.push(atoll_storage::ExtraRegion {
                name: SBVS_REGION,
                words: SBVS_STAMPS,
            });
        }
        out
    }
}

pub fn configure(knobs: &Knobs) -> Result<Arc<dyn FamilyConfig>, KnobError> {
    if knobs.given(BTREE_FANOUT.name) && knobs.choice(INDEX.name) != "btree" {
        return Err(KnobError(format!(
            "--{}={} sizes the B+tree index's nodes: it needs --tell-index btree (not {})",
            BTREE_FANOUT.flag(),
            knobs.number(BTREE_FANOUT.name),
            knobs.choice(INDEX.name)
        )));
    }
    Ok(Arc::new(TellConfig {
        versions: knobs.number(VERSIONS.name) as u32,
        commit_managers: knobs.number(COMMIT_MANAGERS.name) as u16,
        cm_sync_ns: knobs.number(CM_SYNC_US.name) * 1_000,
        tid_block: knobs.number(TID_BLOCK.name),
        cm_inflight_max: knobs.number(CM_INFLIGHT_MAX.name),
        buffering: match knobs.choice(BUFFERING.name) {
            "sb" => Buffering::Shared,
            "sbvs" => Buffering::Versioned,
            _ => Buffering::Transaction,
        },
        buffer_percent: knobs.number(BUFFER_PERCENT.name),
        sbvs_unit: knobs.number(SBVS_UNIT.name),
        index: match knobs.choice(INDEX.name) {
            "btree" => Index::BTree {
                fanout: knobs.number(BTREE_FANOUT.name) as u32,
            },
            _ => Index::Hash,
        },
    }))
}
