//! What a database holds: its tables, the records it starts with, and its transaction types.

use atoll_storage::{Partition, Store, TableId, TableSpec};
use std::sync::Arc;

/// Most words of one record a table may declare: a record travels in one verb.
pub const RECORD_WORDS_MAX: u32 = 4096;
/// Most tables one schema may declare (a table id is 16 bits; the catalog is laid out once).
pub const TABLES_MAX: usize = 256;
/// Most transaction types one schema may declare (each has its own counters in a report).
pub const TXN_TYPES_MAX: usize = 64;

/// Most bytes of one byte key ([`Table::byte_keys`]).
pub const KEY_BYTES_MAX: u32 = 1024;

/// How a byte key becomes the engine's 64-bit key ([`Table::byte_keys_hashed_by`]).
pub type KeyHash = fn(&[u8]) -> u64;

/// One table: records of `record_words` 64-bit words (or typed values, [`Table::typed`])
/// under 64-bit keys (or byte keys, [`Table::byte_keys`]).
#[derive(Clone)]
pub struct Table {
    pub(crate) name: String,
    /// The words a caller reads and writes (a typed table's: its encoding's).
    pub(crate) record_words: u32,
    /// A typed table's most encoded bytes.
    pub(crate) typed_bytes_max: Option<u32>,
    /// A byte-keyed table's most key bytes, and how its keys are hashed.
    pub(crate) byte_keys: Option<(u32, KeyHash)>,
    pub(crate) ordered: bool,
    pub(crate) group: Option<Arc<dyn Fn(u64) -> u64 + Send + Sync>>,
}

/// What a transaction knows of one table.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TableMeta {
    /// Words of a record's value, as its caller sees them.
    pub(crate) value_words: u32,
    /// Words at a record's head holding its byte key (0: a 64-bit key).
    pub(crate) key_words: u32,
    pub(crate) key_hash: Option<KeyHash>,
    pub(crate) typed_bytes_max: Option<u32>,
    pub(crate) ordered: bool,
}

impl TableMeta {
    /// Words the engine stores per record.
    pub(crate) fn record_words(&self) -> u32 {
        // Saturating: a schema asking for more is refused by its bound, not wrapped into it.
        self.key_words.saturating_add(self.value_words)
    }
}

/// Words that hold `bytes` bytes behind a length word.
pub(crate) fn words_for_bytes(bytes: u32) -> u32 {
    1 + bytes.div_ceil(8)
}

/// The default hash of a byte key: FNV-1a over its bytes, then splitmix64's finalizer so
/// that keys differing in their last byte land far apart.
pub fn key_hash_default(key: &[u8]) -> u64 {
    const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const FNV_PRIME: u64 = 0x0100_0000_01b3;
    let fnv = key
        .iter()
        .fold(FNV_OFFSET, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME));
    atoll_fabric::rng::mix64(fnv)
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
            typed_bytes_max: None,
            byte_keys: None,
            ordered: false,
            group: None,
        }
    }

    /// A table of typed values (any `serde` type, encoded as CBOR) of at most `bytes_max`
    /// encoded bytes, read and written with [`crate::Tx::get_as`] and [`crate::Tx::put_as`].
    pub fn typed(name: &str, bytes_max: u32) -> Table {
        Table {
            typed_bytes_max: Some(bytes_max),
            ..Table::new(name, words_for_bytes(bytes_max))
        }
    }

    /// Keys of up to `key_bytes_max` bytes (`&str`, `&[u8]`) instead of `u64`s, used with the
    /// `_by` and `_as` methods of [`crate::Tx`]. The rule for collisions: a byte key is
    /// stored under the 64-bit key [`key_hash_default`] makes of it, with its bytes at the
    /// record's head. An access that finds another key's bytes there fails with
    /// [`crate::TxError::KeyCollision`], and an insert whose hash another key holds aborts
    /// `duplicate`: two keys of one hash cannot both be stored. With a 64-bit hash that is
    /// about n²/2⁶⁵ for n keys (3·10⁻⁸ for a million). A byte-keyed table is not ordered
    /// (its keys are placed by hash) and not grouped.
    pub fn byte_keys(self, key_bytes_max: u32) -> Table {
        self.byte_keys_hashed_by(key_bytes_max, key_hash_default)
    }

    /// [`Table::byte_keys`] with the caller's hash: the same bytes must always give the same
    /// 64-bit key (a weak hash makes collisions likely; tests use one to make them).
    pub fn byte_keys_hashed_by(mut self, key_bytes_max: u32, hash: KeyHash) -> Table {
        self.byte_keys = Some((key_bytes_max, hash));
        self
    }

    pub(crate) fn meta(&self) -> TableMeta {
        TableMeta {
            value_words: self.record_words,
            key_words: self.byte_keys.map_or(0, |(b, _)| words_for_bytes(b)),
            key_hash: self.byte_keys.map(|(_, h)| h),
            typed_bytes_max: self.typed_bytes_max,
            ordered: self.ordered,
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
            let words = t.meta().record_words();
            if t.record_words == 0 || words > RECORD_WORDS_MAX {
                return Err(format!(
                    "table {}: {words} words per record (record_words={}{}) is out of range: expected 1..={RECORD_WORDS_MAX}",
                    t.name,
                    t.record_words,
                    t.byte_keys.map_or(String::new(), |(b, _)| format!(", byte keys of {b} bytes"))
                ));
            }
            if let Some((b, _)) = t.byte_keys {
                if b == 0 || b > KEY_BYTES_MAX {
                    return Err(format!(
                        "table {}: byte keys of {b} bytes: expected 1..={KEY_BYTES_MAX}",
                        t.name
                    ));
                }
                if t.ordered || t.group.is_some() {
                    return Err(format!(
                        "table {}: byte keys are placed by their hash, so the table cannot be ordered or grouped_by",
                        t.name
                    ));
                }
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
                    payload_words: t.meta().record_words(),
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

    /// What transactions know of each table, by table id.
    pub(crate) fn metas(&self) -> Vec<TableMeta> {
        self.tables.iter().map(Table::meta).collect()
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
        self.put_by(t, key, words)
    }

    /// [`Loader::put`] by a byte key (or a `u64`).
    pub fn put_by<'k>(&mut self, t: TableId, key: impl Into<crate::Key<'k>>, words: &[u64]) {
        let key = key.into();
        let located = self.table(t).and_then(|table| {
            if words.len() != table.record_words as usize {
                return Err(format!(
                    "table {} key {key}: {} words, expected {}",
                    table.name,
                    words.len(),
                    table.record_words
                ));
            }
            crate::record::locate(t.0, &table.meta(), key)
        });
        match located {
            Ok((k, mut head)) => {
                head.extend_from_slice(words);
                self.put_record(t, k, &head)
            }
            Err(e) => self.fail(e),
        }
    }

    /// Puts `key` of a [`Table::typed`] table with a typed value.
    pub fn put_as<'k, T: serde::Serialize + ?Sized>(
        &mut self,
        t: TableId,
        key: impl Into<crate::Key<'k>>,
        value: &T,
    ) {
        match self
            .table(t)
            .and_then(|table| crate::record::encode(t.0, &table.meta(), value))
        {
            Ok(words) => self.put_by(t, key, &words),
            Err(e) => self.fail(e),
        }
    }

    fn table(&self, t: TableId) -> Result<&Table, String> {
        self.schema.tables.get(t.0 as usize).ok_or_else(|| {
            format!(
                "table id {} names no table: expected 0..{}",
                t.0,
                self.schema.tables.len()
            )
        })
    }

    /// The first error stops the load, which reports it.
    fn fail(&mut self, e: String) {
        self.error.get_or_insert(format!("load: {e}"));
    }

    /// Puts the whole record (a byte key's words first) under the engine's key.
    fn put_record(&mut self, t: TableId, key: u64, words: &[u64]) {
        if self.error.is_some() {
            return;
        }
        let table = &self.schema.tables[t.0 as usize];
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
