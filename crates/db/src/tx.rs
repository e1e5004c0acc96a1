//! A transaction as the library's callers see it: [`Tx`] over the engine's `Txn` of any
//! protocol, and the errors a transaction ends with.

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
    /// A node did not answer before the transaction's log was written: nothing was
    /// installed, and the node stays down (no recovery yet).
    #[error("a node failed before the transaction logged: nothing was installed")]
    NodeFailed,
    /// The coordinator or a node failed after the transaction was logged, or its co-routine
    /// died with it: it may or may not have committed. Make such transactions idempotent
    /// (a request id written with the change) and read back to learn which.
    #[error("outcome unknown: a failure after the transaction logged")]
    Unknown,
    /// The database was closed before the transaction ran.
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
    /// Words per record, by table id.
    words: &'a [u32],
    ordered: &'a [bool],
    /// Records this attempt writes, against [`crate::Schema::write_set_max`]: a few, so a
    /// list searched in order beats a hash set (measured on SmallBank through the library).
    written: Vec<(u16, u64)>,
    write_set_max: u32,
    /// Changes in the order first made, one per record.
    pending: Vec<((u16, u64), Pending)>,
}

impl<'a> Tx<'a> {
    pub(crate) fn new(
        ops: &'a mut dyn Ops,
        words: &'a [u32],
        ordered: &'a [bool],
        write_set_max: u32,
    ) -> Self {
        Tx {
            ops,
            words,
            ordered,
            written: Vec::new(),
            write_set_max,
            pending: Vec::new(),
        }
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

    fn table(&self, t: TableId) -> Result<u32, OpError> {
        self.words.get(t.0 as usize).copied().ok_or_else(|| {
            OpError::Misuse(format!(
                "table id {} names no table: expected 0..{}",
                t.0,
                self.words.len()
            ))
        })
    }

    fn check_words(&self, t: TableId, key: u64, words: &[u64]) -> Result<(), OpError> {
        let expected = self.table(t)?;
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
        if let Some(own) = self.own(t, key) {
            return own;
        }
        self.ops.read(t, key, false).await.map_err(OpError::Abort)
    }

    /// The record `key` of `t`, read to be written: locked (or marked for validation) now,
    /// so a conflict shows before the work that depends on it.
    pub async fn get_for_update(&mut self, t: TableId, key: u64) -> Result<Words, OpError> {
        self.table(t)?;
        self.will_write(t, key)?;
        if let Some(own) = self.own(t, key) {
            return own;
        }
        self.ops.read(t, key, true).await.map_err(OpError::Abort)
    }

    /// Reads several records in one batch, each stage's verbs to every node posted together
    /// (RCC's doorbell batching): `(table, key, for_update)`. Their words are then read with
    /// [`Tx::get`] / [`Tx::get_for_update`] without another round trip.
    pub async fn fetch(&mut self, accesses: &[(TableId, u64, bool)]) -> Result<(), OpError> {
        for &(t, key, update) in accesses {
            self.table(t)?;
            if update {
                self.will_write(t, key)?;
            }
        }
        self.ops.fetch(accesses).await.map_err(OpError::Abort)
    }

    /// Sets record `key` of `t` (existing) to `words`, at commit.
    pub fn put(&mut self, t: TableId, key: u64, words: &[u64]) -> Result<(), OpError> {
        self.check_words(t, key, words)?;
        self.will_write(t, key)?;
        match self.pending(t, key) {
            None => self
                .pending
                .push(((t.0, key), Pending::Put(words.to_vec()))),
            Some(i) => {
                let p = &mut self.pending[i].1;
                *p = match p {
                    Pending::Put(_) => Pending::Put(words.to_vec()),
                    Pending::Insert(_) => Pending::Insert(words.to_vec()),
                    Pending::Delete => return Err(OpError::Abort(Abort::NotFound)),
                };
            }
        }
        Ok(())
    }

    /// Inserts record `key` of `t` at commit; a key already there aborts (`duplicate`).
    pub fn insert(&mut self, t: TableId, key: u64, words: &[u64]) -> Result<(), OpError> {
        self.check_words(t, key, words)?;
        self.will_write(t, key)?;
        match self.pending(t, key) {
            None => self
                .pending
                .push(((t.0, key), Pending::Insert(words.to_vec()))),
            // Deleted and inserted again in one transaction: the record stays, changed.
            Some(i) if self.pending[i].1 == Pending::Delete => {
                self.pending[i].1 = Pending::Put(words.to_vec())
            }
            Some(_) => return Err(OpError::Abort(Abort::Duplicate)),
        }
        Ok(())
    }

    /// Deletes record `key` of `t` at commit; it must exist (`not_found` otherwise). It is
    /// read for update now.
    pub async fn delete(&mut self, t: TableId, key: u64) -> Result<(), OpError> {
        self.table(t)?;
        self.will_write(t, key)?;
        match self.pending(t, key) {
            None => {
                self.ops.read(t, key, true).await.map_err(OpError::Abort)?;
                self.pending.push(((t.0, key), Pending::Delete));
            }
            Some(i) => match self.pending[i].1 {
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
        if !self.ordered[t.0 as usize] {
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
