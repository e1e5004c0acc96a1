//! What a database holds: its tables, the records it starts with, and its transaction types.

use atoll_storage::{Partition, Store, TableId, TableSpec};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Most words of one record a table may declare: a record travels in one verb.
pub const RECORD_WORDS_MAX: u32 = 4096;
/// Most tables one schema may declare (a table id is 16 bits; the catalog is laid out once).
pub const TABLES_MAX: usize = 256;
/// Most transaction types one schema may declare (each has its own counters in a report).
pub const TXN_TYPES_MAX: usize = 64;

/// One table: records of `record_words` 64-bit words under 64-bit keys.
#[derive(Clone)]
pub struct Table {
    pub(crate) name: String,
    pub(crate) record_words: u32,
    pub(crate) ordered: bool,
    pub(crate) group: Option<Arc<dyn Fn(u64) -> u64 + Send + Sync>>,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("name", &self.name)
            .field("record_words", &self.record_words)
            .field("ordered", &self.ordered)
            .field("grouped", &self.group.is_some())
            .finish()
    }
}

impl Table {
    /// A table of records of `record_words` words, spread over the nodes by key.
    pub fn new(name: &str, record_words: u32) -> Table {
        Table {
            name: name.to_string(),
            record_words,
            ordered: false,
            group: None,
        }
    }

    /// Keeps an ordered index, so [`crate::Tx::scan`] can list its keys in a range.
    pub fn ordered(mut self) -> Table {
        self.ordered = true;
        self
    }

    /// Places keys of one group on one node (`group(key)` modulo the nodes), so that
    /// records read together, or a range scanned, live together: a scan sees the keys of
    /// the node holding its low key only.
    pub fn grouped_by(mut self, group: impl Fn(u64) -> u64 + Send + Sync + 'static) -> Table {
        self.group = Some(Arc::new(group));
        self
    }
}

/// A transaction type, for the per-type counters of a report ([`Schema::txn_type`]); the
/// default is the first, `txn`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxnType(pub(crate) usize);

/// Loads the records a database starts with ([`Schema::load`]).
pub trait LoadFn: Fn(&mut Loader<'_>) + Send + Sync + 'static {}
impl<F: Fn(&mut Loader<'_>) + Send + Sync + 'static> LoadFn for F {}

/// The tables, the initial records and the transaction types of a database.
#[derive(Clone)]
pub struct Schema {
    pub(crate) tables: Vec<Table>,
    pub(crate) load: Option<Arc<dyn LoadFn>>,
    pub(crate) txn_types: Vec<String>,
    pub(crate) write_set_max: u32,
}

impl Default for Schema {
    fn default() -> Self {
        Schema {
            tables: Vec::new(),
            load: None,
            txn_types: vec!["txn".to_string()],
            write_set_max: WRITE_SET_MAX_DEFAULT,
        }
    }
}

/// Records one transaction may write by default ([`Schema::write_set_max`]).
pub const WRITE_SET_MAX_DEFAULT: u32 = 64;
/// The most [`Schema::write_set_max`] accepts: every coordinator keeps a log ring of
/// records of this size.
pub const WRITE_SET_MAX_LIMIT: u32 = 4096;

impl Schema {
    pub fn new() -> Schema {
        Schema::default()
    }

    /// Adds a table; the id names it in transactions.
    pub fn table(&mut self, t: Table) -> TableId {
        self.tables.push(t);
        TableId((self.tables.len() - 1) as u16)
    }

    /// Adds a transaction type (the first, `txn`, is there from the start).
    pub fn txn_type(&mut self, name: &str) -> TxnType {
        self.txn_types.push(name.to_string());
        TxnType(self.txn_types.len() - 1)
    }

    /// The records the database starts with: `load` puts them with [`Loader::put`]. It runs
    /// once to count and check them, then once per node, which keeps the records it holds,
    /// so it must put the same records each time.
    pub fn load(&mut self, load: impl LoadFn) {
        self.load = Some(Arc::new(load));
    }

    /// Records (written, inserted, deleted or read for update) one transaction may write: each
    /// coordinator's log ring is sized for it, and a transaction writing more stops with
    /// [`crate::TxError::Misuse`].
    pub fn write_set_max(&mut self, records: u32) {
        self.write_set_max = records;
    }

    /// Refuses what cannot run, naming the value and what is accepted.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.tables.is_empty() {
            return Err("the schema has no table: expected at least one Schema::table".into());
        }
        if self.tables.len() > TABLES_MAX {
            return Err(format!(
                "the schema has {} tables: expected at most {TABLES_MAX}",
                self.tables.len()
            ));
        }
        if self.txn_types.len() > TXN_TYPES_MAX {
            return Err(format!(
                "the schema has {} transaction types: expected at most {TXN_TYPES_MAX}",
                self.txn_types.len()
            ));
        }
        for t in &self.tables {
            if t.record_words == 0 || t.record_words > RECORD_WORDS_MAX {
                return Err(format!(
                    "table {}: record_words={} is out of range: expected 1..={RECORD_WORDS_MAX}",
                    t.name, t.record_words
                ));
            }
        }
        if !(1..=WRITE_SET_MAX_LIMIT).contains(&self.write_set_max) {
            return Err(format!(
                "write_set_max={} is out of range: expected 1..={WRITE_SET_MAX_LIMIT}",
                self.write_set_max
            ));
        }
        Ok(())
    }

    /// Runs the loader once, checking every record it puts, and counts them per table and
    /// node of a cluster of `nodes`.
    pub(crate) fn count_load(&self, nodes: u16) -> Result<Vec<Vec<u64>>, String> {
        let mut counts = vec![vec![0u64; nodes as usize]; self.tables.len()];
        if let Some(load) = &self.load {
            let mut l = Loader {
                schema: self,
                nodes,
                target: Target::Count(&mut counts),
                error: None,
            };
            load(&mut l);
            if let Some(e) = l.error {
                return Err(e);
            }
        }
        Ok(counts)
    }

    /// The table specs of a cluster of `nodes`, sized from `counts` (records loaded per table
    /// and node); every table grows beyond them within the memory budget.
    pub(crate) fn specs(&self, nodes: u16, counts: &[Vec<u64>]) -> Vec<TableSpec> {
        self.tables
            .iter()
            .zip(counts)
            .map(|(t, c)| {
                let start = c.iter().copied().max().unwrap_or(0).max(1);
                let start = u32::try_from(start).unwrap_or(u32::MAX);
                TableSpec {
                    name: t.name.clone(),
                    payload_words: t.record_words,
                    capacity_per_node: start,
                    capacity_max_per_node: None,
                    partition: partition(t, nodes),
                    ordered: t.ordered,
                    gone_keys_max_per_node: start,
                }
            })
            .collect()
    }

    /// Puts this node's share of the initial records into `store`.
    pub(crate) fn load_node(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        let Some(load) = &self.load else {
            return Ok(());
        };
        let mut l = Loader {
            schema: self,
            nodes: store.catalog.nodes,
            target: Target::Store(store, None),
            error: None,
        };
        load(&mut l);
        match l.target {
            Target::Store(_, Some(e)) => Err(e),
            _ => Ok(()),
        }
    }

    pub(crate) fn table_words(&self) -> BTreeMap<u16, u32> {
        self.tables
            .iter()
            .enumerate()
            .map(|(i, t)| (i as u16, t.record_words))
            .collect()
    }
}

/// Where a table's key lives on a cluster of `nodes`.
fn partition(t: &Table, nodes: u16) -> Partition {
    match &t.group {
        None => Partition::Modulo,
        Some(g) => {
            let g = g.clone();
            Partition::Custom(Arc::new(move |k| (g(k) % nodes as u64) as u16))
        }
    }
}

enum Target<'a> {
    Count(&'a mut Vec<Vec<u64>>),
    Store(&'a Store, Option<atoll_storage::StoreError>),
}

/// What [`Schema::load`]'s function puts the initial records with.
pub struct Loader<'a> {
    schema: &'a Schema,
    nodes: u16,
    target: Target<'a>,
    error: Option<String>,
}

impl Loader<'_> {
    /// Puts record `key` of table `t` with `words` (as many as the table declares).
    pub fn put(&mut self, t: TableId, key: u64, words: &[u64]) {
        if self.error.is_some() {
            return;
        }
        let Some(table) = self.schema.tables.get(t.0 as usize) else {
            self.error = Some(format!(
                "load: table id {} names no table: expected 0..{}",
                t.0,
                self.schema.tables.len()
            ));
            return;
        };
        if words.len() != table.record_words as usize {
            self.error = Some(format!(
                "load: table {} key {key}: {} words, expected {}",
                table.name,
                words.len(),
                table.record_words
            ));
            return;
        }
        match &mut self.target {
            Target::Count(counts) => {
                let node = home(table, key, self.nodes);
                counts[t.0 as usize][node as usize] += 1;
            }
            Target::Store(store, err) => {
                if err.is_some() || home(table, key, self.nodes) != store.node.0 {
                    return;
                }
                if let Err(e) = store.insert(t, key, words) {
                    *err = Some(e);
                }
            }
        }
    }
}

fn home(t: &Table, key: u64, nodes: u16) -> u16 {
    match &t.group {
        None => (key % nodes as u64) as u16,
        Some(g) => (g(key) % nodes as u64) as u16,
    }
}
