//! A transaction as the library's callers see it: [`Tx`] over the engine's `Txn` of any
//! protocol, and the errors a transaction ends with.

use crate::record::{self, Key};
use crate::schema::TableMeta;
use atoll_fabric::Words;
use atoll_storage::TableId;
use atoll_txn::{Abort, Protocol, Txn};
use std::future::Future;
use std::pin::Pin;

/// A future the engine's co-routine polls in place.
pub type LocalFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// The future a transaction's closure returns: `Box::pin(async move { ... })`.
pub type TxFuture<'t, T, E> = LocalFuture<'t, Result<T, TxError<E>>>;

/// Most keys one [`Tx::scan`] returns.
pub const SCAN_LIMIT_MAX: u32 = 1 << 20;

/// Why an op of a transaction failed: the engine aborted the attempt (it re-runs if the
/// reason is one a retry can cure), or the caller asked for something the schema refuses.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OpError {
    #[error("aborted: {0}")]
    Abort(Abort),
    #[error("{0}")]
    Misuse(String),
    /// A byte key's record holds another key of the same hash ([`crate::Table::byte_keys`]).
    #[error("{0}")]
    KeyCollision(String),
}

/// How a transaction ended without committing.
#[derive(Debug, thiserror::Error)]
pub enum TxError<E> {
    /// The closure returned its own error: nothing it wrote was installed.
    #[error("the transaction aborted itself")]
    User(E),
    /// The engine aborted its last attempt: a conflict the retry policy
    /// ([`crate::Options::attempts_max`]) could not outlast, or a reason no retry cures
    /// (`not_found`: a read of a key that does not exist; `duplicate`: an insert of one that
    /// does; `table_full`: the memory budget). Nothing was installed.
    #[error("aborted ({reason}) after {attempts} attempts")]
    Aborted { reason: Abort, attempts: u32 },
    /// A request the schema refuses (an unknown table, a record of the wrong size, a write
    /// set over [`crate::Schema::write_set_max`]). Nothing was installed.
    #[error("misuse: {0}")]
    Misuse(String),
    /// A byte key hashes to a record another key holds: the two cannot both be stored
    /// ([`crate::Table::byte_keys`] states the rule). Nothing was installed.
    #[error("key collision: {0}")]
    KeyCollision(String),
    /// A node did not answer before the transaction's log was written: nothing was
    /// installed, and the node stays down (no recovery yet).
    #[error("a node failed before the transaction logged: nothing was installed")]
    NodeFailed,
    /// The coordinator or a node failed after the transaction was logged, or its co-routine
    /// died with it: it may or may not have committed. Make such transactions idempotent
    /// (a request id written with the change) and read back to learn which.
    #[error("outcome unknown: a failure after the transaction logged")]
    Unknown,
    /// The database was closed, or its engine stopped (`Db::close` returns the report that
    /// says why), before the transaction ran.
    #[error("the database is closed")]
    Closed,
}

impl<E> From<OpError> for TxError<E> {
    fn from(e: OpError) -> Self {
        match e {
            OpError::Abort(reason) => TxError::Aborted {
                reason,
                attempts: 0,
            },
            OpError::Misuse(m) => TxError::Misuse(m),
            OpError::KeyCollision(m) => TxError::KeyCollision(m),
        }
    }
}

/// What [`Tx`] needs of the engine's transaction, whatever its protocol.
pub(crate) trait Ops {
    fn read<'a>(
        &'a mut self,
        t: TableId,
        key: u64,
        update: bool,
    ) -> LocalFuture<'a, Result<Words, Abort>>;
    fn fetch<'a>(
        &'a mut self,
        accesses: &'a [(TableId, u64, bool)],
    ) -> LocalFuture<'a, Result<(), Abort>>;
    fn write(&mut self, t: TableId, key: u64, words: &[u64]);
    fn insert(&mut self, t: TableId, key: u64, words: &[u64]);
    fn delete<'a>(&'a mut self, t: TableId, key: u64) -> LocalFuture<'a, Result<(), Abort>>;
    fn scan<'a>(
        &'a mut self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
        reverse: bool,
    ) -> LocalFuture<'a, Result<Vec<u64>, Abort>>;
}

impl<P: Protocol> Ops for Txn<'_, P> {
    fn read<'a>(
        &'a mut self,
        t: TableId,
        key: u64,
        update: bool,
    ) -> LocalFuture<'a, Result<Words, Abort>> {
        if update {
            Box::pin(self.read_for_update(t, key))
        } else {
            Box::pin(Txn::read(self, t, key))
        }
    }
    fn fetch<'a>(
        &'a mut self,
        accesses: &'a [(TableId, u64, bool)],
    ) -> LocalFuture<'a, Result<(), Abort>> {
        Box::pin(Txn::fetch(self, accesses))
    }
    fn write(&mut self, t: TableId, key: u64, words: &[u64]) {
        Txn::write(self, t, key, words)
    }
    fn insert(&mut self, t: TableId, key: u64, words: &[u64]) {
        Txn::insert(self, t, key, words)
    }
    fn delete<'a>(&'a mut self, t: TableId, key: u64) -> LocalFuture<'a, Result<(), Abort>> {
        Box::pin(Txn::delete(self, t, key))
    }
    fn scan<'a>(
        &'a mut self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
        reverse: bool,
    ) -> LocalFuture<'a, Result<Vec<u64>, Abort>> {
        Box::pin(Txn::scan(self, t, lo, hi, limit, reverse))
    }
}

/// A change this attempt will make at commit, kept by [`Tx`] until its closure succeeds.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Pending {
    Put(Vec<u64>),
    Insert(Vec<u64>),
    /// The record was read for update (it exists, and is locked or validated).
    Delete,
}

/// One attempt of a transaction. Reads wait on the network; writes, inserts and deletes
/// take effect at commit, all or nothing. The closure holding it may run more than once (a
/// conflict re-runs it): it should only read and write through it.
///
/// Its changes are handed to the engine only when the closure returns `Ok`: a closure that
/// returns its own error has its reads committed alone, so the error stands only if what it
/// read was consistent (an optimistic protocol may show an attempt a state that never was;
/// such an attempt fails its validation and re-runs, rather than end on a wrong decision).
pub struct Tx<'a> {
    ops: &'a mut dyn Ops,
    /// What each table holds, by table id.
    tables: &'a [TableMeta],
    /// Records this attempt writes, against [`crate::Schema::write_set_max`]: a few, so a
    /// list searched in order beats a hash set (measured on SmallBank through the library).
    written: Vec<(u16, u64)>,
    write_set_max: u32,
    /// Changes in the order first made, one per record.
    pending: Vec<((u16, u64), Pending)>,
    /// The keys the transaction declared, if it did: `(table, key, written)`.
    declared: Option<Vec<(u16, u64, bool)>>,
}

impl<'a> Tx<'a> {
    pub(crate) fn new(ops: &'a mut dyn Ops, tables: &'a [TableMeta], write_set_max: u32) -> Self {
        Tx {
            ops,
            tables,
            written: Vec::new(),
            write_set_max,
            pending: Vec::new(),
            declared: None,
        }
    }

    /// Holds the attempt to the keys declared (`(table, key, written)`).
    pub(crate) fn declare(&mut self, keys: Vec<(u16, u64, bool)>) {
        self.declared = Some(keys);
    }

    /// Refuses an access the transaction did not declare (if it declared its keys).
    fn declared_access(&self, t: TableId, key: u64, write: bool) -> Result<(), OpError> {
        let Some(d) = &self.declared else {
            return Ok(());
        };
        if d.iter()
            .any(|&(dt, dk, w)| dt == t.0 && dk == key && (w || !write))
        {
            return Ok(());
        }
        Err(OpError::Misuse(format!(
            "table {} key {key}: {} it did not declare (Declared::{})",
            t.0,
            if write { "a write" } else { "a read" },
            if write { "write" } else { "read or write" }
        )))
    }

    fn pending(&self, t: TableId, key: u64) -> Option<usize> {
        self.pending.iter().position(|(k, _)| *k == (t.0, key))
    }

    /// Hands this attempt's changes to the engine's transaction (the closure succeeded).
    pub(crate) async fn apply(&mut self) -> Result<(), Abort> {
        for ((t, key), p) in std::mem::take(&mut self.pending) {
            let t = TableId(t);
            match p {
                Pending::Put(words) => self.ops.write(t, key, &words),
                Pending::Insert(words) => self.ops.insert(t, key, &words),
                Pending::Delete => self.ops.delete(t, key).await?,
            }
        }
        Ok(())
    }

    fn meta(&self, t: TableId) -> Result<&'a TableMeta, OpError> {
        let tables = self.tables;
        tables.get(t.0 as usize).ok_or_else(|| {
            OpError::Misuse(format!(
                "table id {} names no table: expected 0..{}",
                t.0,
                tables.len()
            ))
        })
    }

    /// A table of 64-bit keys, the word methods' (a byte-keyed one is refused).
    fn table(&self, t: TableId) -> Result<u32, OpError> {
        let m = self.meta(t)?;
        if m.key_hash.is_some() {
            return Err(OpError::Misuse(format!(
                "table {} has byte keys: use the _by or _as methods with a &str or &[u8] key",
                t.0
            )));
        }
        Ok(m.value_words)
    }

    /// Where `key` of `t` lives: the engine's key, and its bytes' words at the record's head.
    fn locate(&self, t: TableId, key: Key<'_>) -> Result<(u64, Vec<u64>), OpError> {
        record::locate(t.0, self.meta(t)?, key).map_err(OpError::Misuse)
    }

    /// A record's value: `words` past its `head`, which must name the key looked for.
    fn strip(
        &self,
        t: TableId,
        key: Key<'_>,
        head: &[u64],
        words: Words,
    ) -> Result<Words, OpError> {
        if head.is_empty() {
            return Ok(words);
        }
        if words.get(..head.len()) != Some(head) {
            let held = record::unpack(&words[..head.len().min(words.len())]).unwrap_or_default();
            return Err(OpError::KeyCollision(format!(
                "table {}: key {key} hashes to the record of key {}",
                t.0,
                Key::Bytes(&held)
            )));
        }
        Ok(Words::from_slice(&words[head.len()..]))
    }

    fn check_words(&self, t: TableId, key: u64, words: &[u64]) -> Result<(), OpError> {
        let expected = self.meta(t)?.value_words;
        if words.len() != expected as usize {
            return Err(OpError::Misuse(format!(
                "table {} key {key}: {} words, expected {expected}",
                t.0,
                words.len()
            )));
        }
        Ok(())
    }

    /// Counts `(t, key)` into the write set, refusing one record over its bound.
    fn will_write(&mut self, t: TableId, key: u64) -> Result<(), OpError> {
        if self.written.contains(&(t.0, key)) {
            return Ok(());
        }
        self.written.push((t.0, key));
        if self.written.len() > self.write_set_max as usize {
            return Err(OpError::Misuse(format!(
                "the transaction writes more than write_set_max={} records: declare more with Schema::write_set_max",
                self.write_set_max
            )));
        }
        Ok(())
    }

    /// This attempt's own change of `(t, key)`, if it made one: what a read sees first.
    fn own(&self, t: TableId, key: u64) -> Option<Result<Words, OpError>> {
        let i = self.pending(t, key)?;
        Some(match &self.pending[i].1 {
            Pending::Put(w) | Pending::Insert(w) => Ok(Words::from_slice(w)),
            Pending::Delete => Err(OpError::Abort(Abort::NotFound)),
        })
    }

    /// The record `key` of table `t` (as this attempt changed it, if it did). A key that
    /// does not exist aborts the attempt (`not_found`, not retried): read keys known to
    /// exist, or listed by a scan.
    pub async fn get(&mut self, t: TableId, key: u64) -> Result<Words, OpError> {
        self.table(t)?;
        self.read_raw(t, key, false).await
    }

    /// A record as stored (its key's words first, in a byte-keyed table).
    async fn read_raw(&mut self, t: TableId, key: u64, update: bool) -> Result<Words, OpError> {
        self.declared_access(t, key, update)?;
        if update {
            self.will_write(t, key)?;
        }
        if let Some(own) = self.own(t, key) {
            return own;
        }
        self.ops.read(t, key, update).await.map_err(OpError::Abort)
    }

    /// The record `key` of `t`, read to be written: locked (or marked for validation) now,
    /// so a conflict shows before the work that depends on it.
    pub async fn get_for_update(&mut self, t: TableId, key: u64) -> Result<Words, OpError> {
        self.table(t)?;
        self.read_raw(t, key, true).await
    }

    /// Reads several records in one batch, each stage's verbs to every node posted together
    /// (RCC's doorbell batching): `(table, key, for_update)`. Their words are then read with
    /// [`Tx::get`] / [`Tx::get_for_update`] without another round trip.
    pub async fn fetch(&mut self, accesses: &[(TableId, u64, bool)]) -> Result<(), OpError> {
        for &(t, key, update) in accesses {
            self.table(t)?;
            self.declared_access(t, key, update)?;
            if update {
                self.will_write(t, key)?;
            }
        }
        self.ops.fetch(accesses).await.map_err(OpError::Abort)
    }

    /// Sets record `key` of `t` (existing) to `words`, at commit.
    pub fn put(&mut self, t: TableId, key: u64, words: &[u64]) -> Result<(), OpError> {
        self.table(t)?;
        self.check_words(t, key, words)?;
        self.put_raw(t, key, words.to_vec())
    }

    /// Sets the record `key` of `t` to `record` (its key's words first, if byte-keyed).
    fn put_raw(&mut self, t: TableId, key: u64, record: Vec<u64>) -> Result<(), OpError> {
        self.declared_access(t, key, true)?;
        self.will_write(t, key)?;
        match self.pending(t, key) {
            None => self.pending.push(((t.0, key), Pending::Put(record))),
            Some(i) => {
                let p = &mut self.pending[i].1;
                *p = match p {
                    Pending::Put(_) => Pending::Put(record),
                    Pending::Insert(_) => Pending::Insert(record),
                    Pending::Delete => return Err(OpError::Abort(Abort::NotFound)),
                };
            }
        }
        Ok(())
    }

    /// Inserts record `key` of `t` at commit; a key already there aborts (`duplicate`).
    pub fn insert(&mut self, t: TableId, key: u64, words: &[u64]) -> Result<(), OpError> {
        self.table(t)?;
        self.check_words(t, key, words)?;
        self.insert_raw(t, key, words.to_vec())
    }

    fn insert_raw(&mut self, t: TableId, key: u64, record: Vec<u64>) -> Result<(), OpError> {
        self.declared_access(t, key, true)?;
        self.will_write(t, key)?;
        match self.pending(t, key) {
            None => self.pending.push(((t.0, key), Pending::Insert(record))),
            // Deleted and inserted again in one transaction: the record stays, changed.
            Some(i) if self.pending[i].1 == Pending::Delete => {
                self.pending[i].1 = Pending::Put(record)
            }
            Some(_) => return Err(OpError::Abort(Abort::Duplicate)),
        }
        Ok(())
    }

    /// Deletes record `key` of `t` at commit; it must exist (`not_found` otherwise). It is
    /// read for update now.
    pub async fn delete(&mut self, t: TableId, key: u64) -> Result<(), OpError> {
        self.table(t)?;
        self.delete_raw(t, Key::Int(key), key, &[]).await
    }

    /// Deletes the record `key` of `t` whose head is `head` (a byte key's words).
    async fn delete_raw(
        &mut self,
        t: TableId,
        shown: Key<'_>,
        key: u64,
        head: &[u64],
    ) -> Result<(), OpError> {
        self.declared_access(t, key, true)?;
        self.will_write(t, key)?;
        match self.pending(t, key) {
            None => {
                let words = self.ops.read(t, key, true).await.map_err(OpError::Abort)?;
                self.strip(t, shown, head, words)?;
                self.pending.push(((t.0, key), Pending::Delete));
            }
            Some(i) => match &self.pending[i].1 {
                Pending::Put(w) | Pending::Insert(w) if !w.starts_with(head) => {
                    let w = Words::from_slice(w);
                    return self.strip(t, shown, head, w).map(drop);
                }
                // Inserted by this attempt: it never was.
                Pending::Insert(_) => {
                    self.pending.remove(i);
                }
                Pending::Put(_) => self.pending[i].1 = Pending::Delete,
                Pending::Delete => return Err(OpError::Abort(Abort::NotFound)),
            },
        }
        Ok(())
    }

    /// [`Tx::get`] by a byte key (or a `u64` on a table of `u64` keys): the record's value.
    pub async fn get_by<'k>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
    ) -> Result<Words, OpError> {
        self.read_by(t, key.into(), false).await
    }

    /// [`Tx::get_for_update`] by a byte key (or a `u64`).
    pub async fn get_for_update_by<'k>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
    ) -> Result<Words, OpError> {
        self.read_by(t, key.into(), true).await
    }

    /// The value of `key` in `t`, checked to be that key's (not another of its hash).
    async fn read_by(&mut self, t: TableId, key: Key<'_>, update: bool) -> Result<Words, OpError> {
        let (k, head) = self.locate(t, key)?;
        let words = self.read_raw(t, k, update).await?;
        self.strip(t, key, &head, words)
    }

    /// [`Tx::put`] by a byte key (or a `u64`): the record must exist. A byte-keyed one is
    /// read for update first, so a write never lands on another key of the same hash.
    pub async fn put_by<'k>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
        words: &[u64],
    ) -> Result<(), OpError> {
        let key = key.into();
        let (k, mut head) = self.locate(t, key)?;
        self.check_words(t, k, words)?;
        if !head.is_empty() {
            let held = self.read_raw(t, k, true).await?;
            self.strip(t, key, &head, held)?;
        }
        head.extend_from_slice(words);
        self.put_raw(t, k, head)
    }

    /// [`Tx::insert`] by a byte key (or a `u64`).
    pub fn insert_by<'k>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
        words: &[u64],
    ) -> Result<(), OpError> {
        let (k, mut head) = self.locate(t, key.into())?;
        self.check_words(t, k, words)?;
        head.extend_from_slice(words);
        self.insert_raw(t, k, head)
    }

    /// [`Tx::delete`] by a byte key (or a `u64`).
    pub async fn delete_by<'k>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
    ) -> Result<(), OpError> {
        let key = key.into();
        let (k, head) = self.locate(t, key)?;
        self.delete_raw(t, key, k, &head).await
    }

    /// The typed value of `key` in a [`crate::Table::typed`] table.
    pub async fn get_as<'k, T: serde::de::DeserializeOwned>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
    ) -> Result<T, OpError> {
        self.read_as(t, key.into(), false).await
    }

    /// [`Tx::get_as`], read to be written ([`Tx::get_for_update`]).
    pub async fn get_for_update_as<'k, T: serde::de::DeserializeOwned>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
    ) -> Result<T, OpError> {
        self.read_as(t, key.into(), true).await
    }

    async fn read_as<T: serde::de::DeserializeOwned>(
        &mut self,
        t: TableId,
        key: Key<'_>,
        update: bool,
    ) -> Result<T, OpError> {
        let words = self.read_by(t, key, update).await?;
        record::decode(t.0, self.meta(t)?, &words).map_err(OpError::Misuse)
    }

    /// Sets the typed value of `key` (existing) at commit.
    pub async fn put_as<'k, T: serde::Serialize + ?Sized>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
        value: &T,
    ) -> Result<(), OpError> {
        let words = record::encode(t.0, self.meta(t)?, value).map_err(OpError::Misuse)?;
        self.put_by(t, key, &words).await
    }

    /// Inserts `key` with a typed value at commit.
    pub fn insert_as<'k, T: serde::Serialize + ?Sized>(
        &mut self,
        t: TableId,
        key: impl Into<Key<'k>>,
        value: &T,
    ) -> Result<(), OpError> {
        let words = record::encode(t.0, self.meta(t)?, value).map_err(OpError::Misuse)?;
        self.insert_by(t, key, &words)
    }

    /// Up to `limit` keys of `t` in `[lo, hi]`, ascending, on the node holding `lo` (keep a
    /// range on one node with [`crate::Table::grouped_by`]). As in the engine, a scan is not
    /// protected from phantoms by itself: read for update a record that every insert and
    /// delete into the range also writes (a count, as TPC-C's district row), and the scan is
    /// serializable. The history checker checks scans too.
    pub async fn scan(
        &mut self,
        t: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
    ) -> Result<Vec<u64>, OpError> {
        self.table(t)?;
        if self.declared.is_some() {
            return Err(OpError::Misuse(format!(
                "table {}: a transaction that declared its keys cannot scan (a scan's keys are not known before it runs)",
                t.0
            )));
        }
        if !self.meta(t)?.ordered {
            return Err(OpError::Misuse(format!(
                "table {} keeps no ordered index to scan: declare it with Table::ordered",
                t.0
            )));
        }
        if lo > hi || limit == 0 || limit > SCAN_LIMIT_MAX {
            return Err(OpError::Misuse(format!(
                "scan [{lo}, {hi}] limit {limit}: expected lo <= hi and a limit in 1..={SCAN_LIMIT_MAX}"
            )));
        }
        self.ops
            .scan(t, lo, hi, limit, false)
            .await
            .map_err(OpError::Abort)
    }
}
