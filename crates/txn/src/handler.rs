//! The participant side: serves [`Request`]s against a node's [`Store`] on that node's CPU.
//! Invoked by the fabric for RPCs from other nodes and, inline, for the node's own.
//!
//! [`StoreHandler`] serves the shared requests itself and hands each family request
//! ([`Request::Family`]) to the [`Participant`] registered for that family. [`Local`] holds
//! the building blocks both use: locating records, consistent reads, freezing and unlocking.

use crate::msg::{
    self, DecodeError, FamilyId, Item, Reply, Request, RequestTag, Tuple, TupleHead, TuplesWriter,
    WordReader, WriteBack,
};
use atoll_fabric::{Bytes, Handled, NodeId, Region, ReplyTo, RpcHandler, Words};
use atoll_storage::layout::{
    LockWord, HEADER_WORDS, H_KEY, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN, VERSION_ABSENT,
};
use atoll_storage::{Store, StoreError, TableId};
use std::sync::Arc;

/// CAS attempts on `RTS` (freezing, renewing) before giving up: each failure means another
/// renewal raced, and renewals are finite.
pub const FREEZE_ATTEMPTS_MAX: usize = 1024;
/// Attempts at a consistent local read before reporting the record as locked.
pub const CONSISTENT_READ_ATTEMPTS_MAX: usize = 64;
/// Lock word reported for a record that kept changing under every read attempt: no
/// transaction has this timestamp, so coordinators treat it as held by a writer.
pub const LOCK_UNSTABLE: u64 = u64::MAX;

/// A protocol family's participant side: serves the family's own requests on the owning
/// node's CPU. Registered with [`StoreHandler::new`]; one instance serves one node.
pub trait Participant: Send + Sync {
    /// The family whose requests it serves.
    fn family(&self) -> FamilyId;

    /// Serves one request of the family (`body`, the family's own encoding). `None` keeps
    /// `from` to answer later from [`Participant::poll_deferred`].
    fn serve(&self, local: &Local, from: ReplyTo, body: &[u8]) -> Option<Reply>;

    /// Called on every event-loop turn of the node's workers: pushes the replies of held
    /// requests that can now be answered; returns whether requests are still held.
    fn poll_deferred(&self, _local: &Local, _out: &mut Vec<(ReplyTo, Reply)>) -> bool {
        false
    }
}

/// A node's store as the participant side sees it: the operations shared by the runtime's
/// requests and the families'.
pub struct Local {
    store: Arc<Store>,
    log_region: atoll_fabric::RegionId,
    /// The timestamp service this node runs (snapshot-isolation runs, on its node).
    ts_service: Option<crate::tsvc::TsService>,
    /// The node's view of the configuration, in a run that recovers crashed nodes.
    membership: Option<Arc<crate::recovery::Membership>>,
}

impl Local {
    /// Whether the transaction holding (or asking for) a lock with timestamp `ts` ran on a
    /// node the configuration holds dead: a request of it held here is dropped.
    pub fn owner_dead(&self, ts: u64) -> bool {
        self.membership.as_ref().is_some_and(|m| m.issuer_dead(ts))
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The timestamp service, if this node runs it (with its region in this node's memory).
    pub fn ts_service(&self) -> Option<(&crate::tsvc::TsService, &Region)> {
        self.ts_service
            .as_ref()
            .map(|s| (s, self.store.memory().region(s.region)))
    }

    /// The region and word offset of record `loc` of table `t`.
    pub fn record(&self, t: TableId, loc: u32) -> (&Region, usize) {
        let off = self.store.catalog.layout(t).record_offset(loc) as usize;
        (self.store.region(t), off)
    }

    /// The slot of `it`: its cached location if that still holds the key live, else an
    /// index lookup; `None` if the key does not exist.
    pub fn loc_of(&self, it: &Item) -> Option<u32> {
        let layout = self.store.catalog.layout(it.table);
        if let Some(crate::msg::Loc(loc)) = it.loc {
            if loc >= layout.capacity {
                return None;
            }
            // A cached location must still hold this key and be live (its slot may have
            // gone to another key).
            if self.store.live_key_at(it.table, loc, it.key) {
                return Some(loc);
            }
        }
        self.store.lookup(it.table, it.key)
    }

    /// A consistent read of `it`'s record at `loc` (from [`Self::loc_of`]), if the slot
    /// still holds `it.key` live: a reclaim changes the version word before the key word,
    /// so the same version word before the key check and in the read means the key's tuple.
    pub fn read_item(&self, it: &Item, loc: u32) -> Option<Tuple> {
        let mut data = Words::new();
        self.read_item_into(it, loc, &mut data)
            .map(|h| Tuple::from_parts(h, data))
    }

    /// As [`Self::read_item`], the payload into `data` (replaced).
    pub fn read_item_into(&self, it: &Item, loc: u32, data: &mut Words) -> Option<TupleHead> {
        let n = self.store.catalog.layout(it.table).payload_words as usize;
        data.clear();
        data.resize(n, 0);
        self.read_item_with(it, loc, |r, off| r.read_into(off, data))
    }

    /// As [`Self::read_item_into`], the payload read by `payload(region, word offset)`
    /// wherever it copies it (each attempt reads it whole again).
    pub fn read_item_with(
        &self,
        it: &Item,
        loc: u32,
        mut payload: impl FnMut(&Region, usize),
    ) -> Option<TupleHead> {
        let off = self.store.catalog.layout(it.table).record_offset(loc) as usize;
        let r = self.store.region(it.table);
        let mut t = None;
        for _ in 0..CONSISTENT_READ_ATTEMPTS_MAX {
            let v0 = r.load(off + H_VERSION as usize);
            if v0 & VERSION_ABSENT != 0 || r.load(off + H_KEY as usize) != it.key {
                return None;
            }
            let read = self.consistent_read_with(it.table, loc, &mut payload);
            if read.version == v0 {
                return Some(read);
            }
            t = Some(read);
        }
        // Kept changing: reported held by a writer, so the data is not used.
        t.map(|t| TupleHead {
            lock: LOCK_UNSTABLE,
            ..t
        })
    }

    pub fn valid_table(&self, t: TableId) -> bool {
        (t.0 as usize) < self.store.catalog.table_count()
    }

    pub fn valid_loc(&self, t: TableId, loc: u32) -> bool {
        self.valid_table(t) && loc < self.store.catalog.layout(t).capacity
    }

    /// Reads a tuple so that the payload matches the version: retried while a writer is
    /// between its payload and version writes. Returns the lock word seen after the payload.
    pub fn consistent_read(&self, t: TableId, loc: u32) -> Tuple {
        let mut data = Words::new();
        let h = self.consistent_read_into(t, loc, &mut data);
        Tuple::from_parts(h, data)
    }

    /// As [`Self::consistent_read`], the payload into `data` (replaced).
    pub fn consistent_read_into(&self, t: TableId, loc: u32, data: &mut Words) -> TupleHead {
        let n = self.store.catalog.layout(t).payload_words as usize;
        data.clear();
        data.resize(n, 0);
        self.consistent_read_with(t, loc, |r, off| r.read_into(off, data))
    }

    /// As [`Self::consistent_read_into`], the payload read by `payload(region, word
    /// offset)` wherever it copies it (a reply's bytes: `TuplesWriter::tuple_in_place`).
    pub fn consistent_read_with(
        &self,
        t: TableId,
        loc: u32,
        mut payload: impl FnMut(&Region, usize),
    ) -> TupleHead {
        let layout = self.store.catalog.layout(t);
        let r = self.store.region(t);
        let off = layout.record_offset(loc) as usize;
        for _ in 0..CONSISTENT_READ_ATTEMPTS_MAX {
            let v1 = r.load(off + H_VERSION as usize);
            payload(r, off + HEADER_WORDS as usize);
            // A writer locks before touching the payload, so a free lock read after the
            // payload, with the version unchanged, means the payload is that version's.
            let lock = r.load(off + H_LOCK as usize);
            let wts = r.load(off + H_WTS as usize);
            let rts = r.load(off + H_RTS as usize);
            if v1 == r.load(off + H_VERSION as usize) {
                return TupleHead {
                    loc: msg::Loc(loc),
                    lock,
                    version: v1,
                    wts,
                    rts,
                };
            }
        }
        let version = r.load(off + H_VERSION as usize);
        let (wts, rts) = (r.load(off + H_WTS as usize), r.load(off + H_RTS as usize));
        TupleHead {
            loc: msg::Loc(loc),
            lock: LOCK_UNSTABLE,
            version,
            wts,
            rts,
        }
    }

    /// Freezes `RTS` of a record this node's caller holds locked: no renewal or read can
    /// raise it afterwards. Returns the frozen value without the flag.
    pub fn freeze(r: &Region, off: usize) -> u64 {
        // Bounded: only lease renewals race with it, and each CAS that fails saw one.
        for _ in 0..FREEZE_ATTEMPTS_MAX {
            let cur = r.load(off + H_RTS as usize);
            if cur & RTS_FROZEN != 0 || r.cas(off + H_RTS as usize, cur, cur | RTS_FROZEN) == cur {
                return cur & !RTS_FROZEN;
            }
        }
        panic!("could not freeze RTS in {FREEZE_ATTEMPTS_MAX} attempts: renewals never stop");
    }

    /// The header of a record locked by `ts`, without its payload.
    pub fn header_tuple(&self, t: TableId, loc: u32, ts: u64) -> Tuple {
        Tuple::from_parts(self.header_of(t, loc, ts), Words::new())
    }

    /// As [`Self::header_tuple`], the fields alone.
    pub fn header_of(&self, t: TableId, loc: u32, ts: u64) -> TupleHead {
        let (r, off) = self.record(t, loc);
        TupleHead {
            loc: msg::Loc(loc),
            lock: ts,
            version: r.load(off + H_VERSION as usize),
            wts: r.load(off + H_WTS as usize),
            rts: r.load(off + H_RTS as usize),
        }
    }

    /// Whether every item of a write-back names a valid record of the right payload size,
    /// locked by `ts` (writing a record one does not hold would corrupt it).
    pub fn write_back_valid(&self, wb: &WriteBack) -> bool {
        wb.items
            .iter()
            .all(|(t, loc, payload)| self.installable(wb.ts, *t, *loc, payload.len()))
    }

    /// Whether a write-back by `ts` may install `payload_words` words at `(t, loc)`: a slot
    /// of this store, a whole payload, locked by `ts`.
    fn installable(&self, ts: u64, t: TableId, loc: u32, payload_words: usize) -> bool {
        self.valid_loc(t, loc)
            && payload_words + HEADER_WORDS as usize
                == self.store.catalog.layout(t).tuple_words as usize
            && {
                let (r, off) = self.record(t, loc);
                r.load(off + H_LOCK as usize) == ts
            }
    }

    /// Installs one item of a checked write-back: payload, then `WTS`/`RTS` (if `set_ts`),
    /// then the version, then (with `release`) the unlock.
    pub fn write_back_one(&self, wb: &WriteBack, t: TableId, loc: u32, payload: &[u64]) {
        self.install(wb.ts, wb.release, wb.set_ts, t, loc, |r, off| {
            r.write_from(off, payload)
        });
    }

    /// As [`Self::write_back_one`], the payload written by `payload(region, word offset)`.
    fn install(
        &self,
        ts: u64,
        release: bool,
        set_ts: u64,
        t: TableId,
        loc: u32,
        payload: impl FnOnce(&Region, usize),
    ) {
        let (r, off) = self.record(t, loc);
        payload(r, off + HEADER_WORDS as usize);
        if set_ts != 0 {
            r.store(off + H_WTS as usize, set_ts);
            r.store(off + H_RTS as usize, set_ts);
        }
        let v = r.load(off + H_VERSION as usize);
        r.store(off + H_VERSION as usize, v + 1);
        if release {
            Self::unlock(r, off, ts);
        }
    }

    /// `WriteBack { ts, release, set_ts, items }` from its bytes: checked whole first, as
    /// [`Self::write_back_valid`] checks a decoded one (every item decodes, is a slot of
    /// this store, has a whole payload and is locked by `ts`; else `BadRequest` and nothing
    /// written), then each payload installed from the request's bytes (no `Words` per item).
    fn serve_write_back(
        &self,
        mut d: WordReader<'_>,
        out: &mut Vec<u8>,
    ) -> Result<(), DecodeError> {
        let ts = d.w()?;
        let release = d.bool()?;
        let set_ts = d.w()?;
        let n = d.len()?;
        let items = d.clone();
        let mut valid = true;
        for _ in 0..n {
            let (t, loc, payload) = (d.table()?, d.u32()?, d.word_bytes()?);
            valid = valid && self.installable(ts, t, loc, payload.len() / 8);
        }
        d.done()?;
        if !valid {
            Reply::BadRequest.encode(out);
            return Ok(());
        }
        let mut d = items;
        for _ in 0..n {
            let (t, loc, payload) = (d.table()?, d.u32()?, d.word_bytes()?);
            self.install(ts, release, set_ts, t, loc, |r, off| {
                r.write_from_le_bytes(off, payload)
            });
        }
        Reply::Ok.encode(out);
        Ok(())
    }

    /// Releases a lock held by `ts`, first thawing a frozen `RTS`. Not held by `ts`: no-op.
    pub fn unlock(r: &Region, off: usize, ts: u64) {
        if r.load(off + H_LOCK as usize) != ts {
            return;
        }
        // Only the holder clears the flag; adding it carries out of the word, keeping any
        // raise an earlier-ordered MVCC reader made meanwhile.
        if r.load(off + H_RTS as usize) & RTS_FROZEN != 0 {
            r.fetch_add(off + H_RTS as usize, RTS_FROZEN);
        }
        r.cas(off + H_LOCK as usize, ts, 0);
    }

    /// Serves a read, a lock or a write-back request straight from its bytes into `out`
    /// (no decoded request, no [`Tuple`] or payload buffer per record: issue #9), or `None`
    /// for any other request. Each is checked whole (every item decodes and names a table) before it touches a
    /// record, as a decoded request would be.
    fn serve_bytes(&self, req: &[u8], out: &mut Vec<u8>) -> Option<Result<(), DecodeError>> {
        let mut d = WordReader::new(req, "request");
        let tag = RequestTag::try_from(d.w().ok()?).ok()?;
        match tag {
            RequestTag::Read => Some(self.serve_read(d, out)),
            RequestTag::Lock => Some(self.serve_lock(d, out)),
            RequestTag::WriteBack => Some(self.serve_write_back(d, out)),
            _ => None,
        }
    }

    /// Checks the rest of a read or lock request: `n` items that decode and name tables
    /// of this store, and nothing after them. Returns the bytes of the `Tuples` reply if
    /// every item has its tuple (with payloads if `with_data`), to reserve them at once.
    fn check_items(
        &self,
        mut d: WordReader<'_>,
        n: usize,
        with_data: bool,
    ) -> Result<usize, DecodeError> {
        let mut words = msg::TUPLES_HEAD_WORDS;
        for _ in 0..n {
            let it = d.item()?;
            if !self.valid_table(it.table) {
                return Err(d.error(format!(
                    "table {} of {}",
                    it.table.0,
                    self.store.catalog.table_count()
                )));
            }
            words += msg::TUPLE_HEAD_WORDS;
            if with_data {
                words += self.store.catalog.layout(it.table).payload_words as usize;
            }
        }
        d.done()?;
        Ok(words * 8)
    }

    /// `Read { items }`: each record's consistent tuple, or none where the key is absent.
    fn serve_read(&self, mut d: WordReader<'_>, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        let n = d.len()?;
        out.reserve(self.check_items(d.clone(), n, true)?);
        let mut w = TuplesWriter::begin(out, n);
        for _ in 0..n {
            let it = d.item()?;
            match self.loc_of(&it) {
                Some(loc) => {
                    let words = self.store.catalog.layout(it.table).payload_words as usize;
                    w.tuple_in_place(words, |out| {
                        self.read_item_with(&it, loc, |r, off| r.read_into_le_bytes(off, out))
                    })
                }
                None => w.none(),
            }
        }
        w.finish();
        Ok(())
    }

    /// `Lock { ts, want_data, freeze, items }`: every record locked for `ts` (and its `RTS`
    /// frozen with `freeze`) with its tuple, or none: the first refusal gives back every
    /// lock taken and the reply names the item.
    fn serve_lock(&self, mut d: WordReader<'_>, out: &mut Vec<u8>) -> Result<(), DecodeError> {
        let store = &self.store;
        let ts = d.w()?;
        let want_data = d.bool()?;
        let freeze = d.bool()?;
        let n = d.len()?;
        let bytes = self.check_items(d.clone(), n, want_data)?;
        if ts == 0 {
            return Err(d.error("lock for timestamp 0"));
        }
        out.reserve(bytes);
        let start = out.len();
        let mut w = TuplesWriter::begin(out, n);
        let mut held = smallvec::SmallVec::<[(&Region, usize); 16]>::new();
        let mut refused = None;
        for i in 0..n {
            let it = d.item()?;
            let Some(loc) = self.loc_of(&it) else {
                refused = Some(Reply::NotFound { index: i as u32 });
                break;
            };
            let off = store.catalog.layout(it.table).record_offset(loc) as usize;
            let r = store.region(it.table);
            let holder = r.cas(off + H_LOCK as usize, 0, ts);
            if holder != 0 {
                refused = Some(Reply::LockFailed {
                    index: i as u32,
                    holder,
                });
                break;
            }
            held.push((r, off));
            // Held now, so it stays what it is: check it is still the key's, live.
            if !store.live_key_at(it.table, loc, it.key) {
                refused = Some(Reply::NotFound { index: i as u32 });
                break;
            }
            let frozen_rts = freeze.then(|| Self::freeze(r, off));
            let with_rts = |mut h: TupleHead| {
                if let Some(rts) = frozen_rts {
                    h.rts = rts;
                }
                h
            };
            if want_data {
                let words = store.catalog.layout(it.table).payload_words as usize;
                w.tuple_in_place(words, |out| {
                    let h = self.consistent_read_with(it.table, loc, |r, off| {
                        r.read_into_le_bytes(off, out)
                    });
                    Some(with_rts(h))
                });
            } else {
                w.tuple(&with_rts(self.header_of(it.table, loc, ts)), &[]);
            }
        }
        match refused {
            None => w.finish(),
            Some(r) => {
                for (reg, off) in held {
                    Self::unlock(reg, off, ts);
                }
                out.truncate(start);
                r.encode(out);
            }
        }
        Ok(())
    }

    /// A coordinator's log record copied into its ring ([`Request::Log`]).
    fn log_write(&self, offset: u32, words: &[u64]) -> Reply {
        let r = self.store.memory().region(self.log_region);
        if offset as usize + words.len() > r.len_words() {
            return Reply::BadRequest;
        }
        r.write_from(offset as usize, words);
        Reply::Ok
    }

    /// A ring's head word: the records of it this node applied ([`Request::LogHead`]).
    fn log_head(&self, offset: u32) -> Reply {
        let r = self.store.memory().region(self.log_region);
        if offset as usize >= r.len_words() {
            return Reply::BadRequest;
        }
        Reply::Word {
            value: r.load(offset as usize),
        }
    }

    /// Serves a shared request (a family's goes to its participant before this).
    fn serve(&self, req: Request) -> Reply {
        let store = &self.store;
        match req {
            // Dispatched by `StoreHandler::handle` before decoding (a family's to its
            // participant, reads and locks served from their bytes: `serve_bytes`).
            Request::Family { .. } | Request::Read { .. } | Request::Lock { .. } => {
                Reply::BadRequest
            }
            Request::Validate { ts, items } => {
                for (i, (t, loc, version)) in items.iter().enumerate() {
                    if !self.valid_loc(*t, *loc) {
                        return Reply::BadRequest;
                    }
                    let off = store.catalog.layout(*t).record_offset(*loc) as usize;
                    let r = store.region(*t);
                    let lock = r.load(off + H_LOCK as usize);
                    if r.load(off + H_VERSION as usize) != *version || (lock != 0 && lock != ts) {
                        return Reply::Invalid { index: i as u32 };
                    }
                }
                Reply::Ok
            }
            Request::Log { offset, words } => self.log_write(offset, &words),
            Request::LogHead { offset } => self.log_head(offset),
            Request::WriteBack(wb) => {
                if !self.write_back_valid(&wb) {
                    return Reply::BadRequest;
                }
                for (t, loc, payload) in &wb.items {
                    self.write_back_one(&wb, *t, *loc, payload);
                }
                Reply::Ok
            }
            Request::Release { ts, items } => {
                for (t, loc) in &items {
                    if !self.valid_loc(*t, *loc) {
                        return Reply::BadRequest;
                    }
                    let off = store.catalog.layout(*t).record_offset(*loc) as usize;
                    // Not held by `ts`: correctly left alone.
                    Self::unlock(store.region(*t), off, ts);
                }
                Reply::Ok
            }
            Request::Insert {
                ts,
                table,
                key,
                payload,
            } => {
                if ts == 0
                    || !self.valid_table(table)
                    || payload.len() != store.catalog.layout(table).payload_words as usize
                {
                    return Reply::BadRequest;
                }
                match store.insert_locked(table, key, &payload, ts) {
                    Ok((loc, version)) => Reply::Inserted {
                        loc: msg::Loc(loc),
                        version,
                    },
                    Err(StoreError::Duplicate { .. }) => Reply::Duplicate,
                    Err(StoreError::Busy { .. }) => Reply::LockFailed {
                        index: 0,
                        holder: LOCK_UNSTABLE,
                    },
                    Err(e) if e.is_capacity() => Reply::Full,
                    // Not here, a payload of the wrong size: the request's fault.
                    Err(_) => Reply::BadRequest,
                }
            }
            Request::Delete { table, key } => {
                if !self.valid_table(table) {
                    return Reply::BadRequest;
                }
                match store.delete(table, key) {
                    Ok((_, version)) => Reply::Deleted { version },
                    Err(StoreError::NotFound { .. }) => Reply::NotFound { index: 0 },
                    Err(_) => Reply::BadRequest,
                }
            }
            Request::UndoInsert { ts, table, key } => {
                if !self.valid_table(table) {
                    return Reply::BadRequest;
                }
                match store.undo_insert(table, key, ts) {
                    Ok(()) => Reply::Ok,
                    Err(StoreError::NotFound { .. }) => Reply::NotFound { index: 0 },
                    Err(_) => Reply::BadRequest,
                }
            }
            Request::Scan {
                table,
                lo,
                hi,
                limit,
                reverse,
            } => {
                if !self.valid_table(table) || !store.catalog.spec(table).ordered {
                    return Reply::BadRequest;
                }
                let mut out = Vec::new();
                match store.scan_versions(table, lo, hi, limit as usize, reverse, &mut out) {
                    Ok(()) => Reply::Keys(out),
                    Err(_) => Reply::BadRequest,
                }
            }
        }
    }
}

/// Serves one node's requests: the shared ones itself, each family's by its participant.
pub struct StoreHandler {
    local: Local,
    /// Registered families, sorted by id.
    families: Vec<Arc<dyn Participant>>,
}

impl StoreHandler {
    /// A handler for `store`'s node serving `families`' requests besides the shared ones.
    /// Panics if two families share an id (a registration error, caught at start-up).
    pub fn new(
        store: Arc<Store>,
        log_region: atoll_fabric::RegionId,
        mut families: Vec<Arc<dyn Participant>>,
    ) -> Self {
        families.sort_by_key(|f| f.family());
        for w in families.windows(2) {
            assert!(
                w[0].family() != w[1].family(),
                "two protocol families registered with id {}",
                w[0].family().0
            );
        }
        // Only a run whose records hold commit ids (the snapshot-isolation family) reports
        // outcomes to the timestamp service; only its node sequences them.
        let ts_service = crate::tsvc::TsService::of(&store.catalog)
            .filter(|s| s.node == store.node && store.catalog.lock_word() == LockWord::CommitId);
        StoreHandler {
            local: Local {
                store,
                log_region,
                ts_service,
                membership: None,
            },
            families,
        }
    }

    /// The handler of a node that holds `membership`: held requests of dead nodes'
    /// transactions are dropped ([`Local::owner_dead`]).
    pub fn with_membership(mut self, membership: Arc<crate::recovery::Membership>) -> Self {
        self.local.membership = Some(membership);
        self
    }

    /// Serves a request to this node now, as its own node's request is: the reply, or
    /// `None` if it is held for later (tools and tests that ask one handler directly).
    pub fn answer(&self, req: &[u8]) -> Option<Reply> {
        let from = ReplyTo {
            worker: 0,
            slot: atoll_fabric::core::SlotId(0),
            index: 0,
            posted_ns: 0,
        };
        let mut out = Vec::new();
        match self.handle(self.local.store.node, from, req, &mut out) {
            Handled::Replied => Some(Reply::decode(&out).expect("the handler's own reply decodes")),
            Handled::Deferred => None,
        }
    }

    fn family(&self, id: FamilyId) -> Option<&Arc<dyn Participant>> {
        self.families
            .binary_search_by_key(&id, |f| f.family())
            .ok()
            .map(|i| &self.families[i])
    }
}

impl RpcHandler for StoreHandler {
    fn handle(&self, node: NodeId, from: ReplyTo, req: &[u8], reply: &mut Bytes) -> Handled {
        let r = if node != self.local.store.node {
            Reply::BadRequest
        } else {
            match msg::split_family(req) {
                Ok(Some((id, body))) => match self.family(id) {
                    Some(f) => match f.serve(&self.local, from, body) {
                        Some(r) => r,
                        None => return Handled::Deferred,
                    },
                    None => Reply::BadRequest,
                },
                Ok(None) => {
                    let start = reply.len();
                    match self.local.serve_bytes(req, reply) {
                        Some(Ok(())) => return Handled::Replied,
                        Some(Err(_)) => {
                            reply.truncate(start);
                            Reply::BadRequest
                        }
                        None => match Request::decode(req) {
                            Ok(req) => self.local.serve(req),
                            Err(_) => Reply::BadRequest,
                        },
                    }
                }
                Err(_) => Reply::BadRequest,
            }
        };
        r.encode(reply);
        Handled::Replied
    }

    fn refuses(&self, from: NodeId) -> bool {
        self.local
            .membership
            .as_ref()
            .is_some_and(|m| m.fences(from))
    }

    fn poll_deferred(&self, node: NodeId, out: &mut Vec<(ReplyTo, Bytes)>) -> bool {
        if node != self.local.store.node {
            return false;
        }
        let mut held = false;
        if let Some((svc, region)) = self.local.ts_service() {
            svc.advance(region);
            // The sequencer is a polling loop: outcomes arrive as one-sided WRITEs, which
            // wake no CPU, and a commit timestamp may be taken at any time, so the service's
            // workers keep polling as if a request were held (the simulator schedules such a
            // worker periodically, whether or not it runs co-routines).
            held = true;
        }
        let mut replies = Vec::new();
        for f in &self.families {
            held |= f.poll_deferred(&self.local, &mut replies);
        }
        for (to, r) in replies {
            let mut b = Vec::new();
            r.encode(&mut b);
            out.push((to, b));
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::Loc;
    use atoll_fabric::NodeMemory;
    use atoll_storage::layout::{Catalog, Partition, TableSpec};

    const KEYS: u64 = 8;
    const LOG_WORDS: usize = 64;

    fn node() -> (StoreHandler, Arc<Store>) {
        let spec = TableSpec {
            name: "t".into(),
            payload_words: 3,
            capacity_per_node: 16,
            capacity_max_per_node: Some(16),
            partition: Partition::Modulo,
            ordered: false,
            gone_keys_max_per_node: 0,
        };
        let catalog = Arc::new(Catalog::new(
            1,
            vec![spec],
            vec![atoll_storage::ExtraRegion {
                name: crate::regions::LOG_REGION,
                words: LOG_WORDS,
            }],
        ));
        let memory = Arc::new(NodeMemory::new(NodeId(0), &catalog.region_words()));
        let store = Arc::new(Store::new(catalog.clone(), memory));
        for k in 0..KEYS {
            store.insert(TableId(0), k, &[k, k + 1, k + 2]).unwrap();
        }
        let log = catalog.extra_region(0);
        (StoreHandler::new(store.clone(), log, Vec::new()), store)
    }

    fn ask(h: &StoreHandler, req: &[u8]) -> Reply {
        h.answer(req).expect("the request is answered at once")
    }

    fn item(key: u64) -> Item {
        Item {
            table: TableId(0),
            key,
            loc: None,
        }
    }

    fn locked(store: &Store, key: u64) -> u64 {
        let loc = store.lookup(TableId(0), key).unwrap();
        let off = store.catalog.layout(TableId(0)).record_offset(loc) as usize;
        store.region(TableId(0)).load(off + H_LOCK as usize)
    }

    #[test]
    fn handler_a_read_returns_each_records_tuple_and_none_for_an_absent_key() {
        let (h, store) = node();
        let Reply::Tuples(ts) = ask(&h, &Request::read_bytes(&[item(2), item(KEYS + 5)])) else {
            panic!("a read answers with tuples")
        };
        assert_eq!(ts.len(), 2);
        let t = ts[0].as_ref().expect("key 2 exists");
        assert_eq!(t.loc, Loc(store.lookup(TableId(0), 2).unwrap()));
        assert_eq!((t.lock, t.version), (0, layout_initial_version()));
        assert_eq!(&t.data[ENGINE_WORDS..], &[2, 3, 4]);
        assert_eq!(ts[1], None);
    }

    fn layout_initial_version() -> u64 {
        atoll_storage::layout::INITIAL_VERSION
    }

    const ENGINE_WORDS: usize = atoll_storage::layout::ENGINE_PAYLOAD_WORDS as usize;

    #[test]
    fn handler_a_lock_refused_part_way_holds_none_of_its_records() {
        let (h, store) = node();
        assert!(matches!(
            ask(&h, &Request::lock_bytes(7, false, false, &[item(3)])),
            Reply::Tuples(_)
        ));
        let r = ask(&h, &Request::lock_bytes(9, true, true, &[item(1), item(3)]));
        assert_eq!(
            r,
            Reply::LockFailed {
                index: 1,
                holder: 7
            }
        );
        assert_eq!(
            locked(&store, 1),
            0,
            "the lock taken before the refusal was given back"
        );
        let r = ask(
            &h,
            &Request::lock_bytes(9, true, false, &[item(4), item(KEYS + 1)]),
        );
        assert_eq!(r, Reply::NotFound { index: 1 });
        assert_eq!(locked(&store, 4), 0);
        assert_eq!(locked(&store, 3), 7, "the holder keeps its lock");
    }

    #[test]
    fn handler_a_write_back_installs_every_payload_and_unlocks_or_writes_none_if_one_is_not_held() {
        let (h, store) = node();
        let loc = |k| store.lookup(TableId(0), k).unwrap();
        let payload = |k: u64| Words::from_slice(&[90 + k, 91, 92, 93, 94 + k]);
        let wb = |ts, keys: &[u64]| {
            Request::WriteBack(WriteBack {
                ts,
                release: true,
                set_ts: 0,
                items: keys
                    .iter()
                    .map(|&k| (TableId(0), loc(k), payload(k)))
                    .collect(),
            })
            .to_bytes()
        };
        let read = |k| {
            let Reply::Tuples(ts) = ask(&h, &Request::read_bytes(&[item(k)])) else {
                panic!("a read answers with tuples")
            };
            ts[0].clone().expect("the key exists")
        };
        ask(
            &h,
            &Request::lock_bytes(4, false, false, &[item(1), item(2)]),
        );
        // Key 5 is not locked by 4: the whole write-back is refused, key 1 untouched.
        assert_eq!(ask(&h, &wb(4, &[1, 5])), Reply::BadRequest);
        assert_eq!(
            (read(1).version, locked(&store, 1)),
            (layout_initial_version(), 4)
        );
        assert_eq!(&read(1).data[ENGINE_WORDS..], &[1, 2, 3]);
        assert_eq!(ask(&h, &wb(4, &[1, 2])), Reply::Ok);
        for k in [1, 2] {
            let t = read(k);
            assert_eq!(t.data, payload(k), "key {k}'s payload installed");
            assert_eq!((t.version, t.lock), (layout_initial_version() + 1, 0));
        }
        let mut cut = wb(4, &[3]);
        cut.truncate(cut.len() - 8);
        assert_eq!(ask(&h, &cut), Reply::BadRequest, "a truncated payload");
    }

    #[test]
    fn handler_a_granted_lock_returns_every_tuple_held() {
        let (h, store) = node();
        let Reply::Tuples(ts) = ask(
            &h,
            &Request::lock_bytes(5, true, false, &[item(0), item(6)]),
        ) else {
            panic!("a granted lock answers with tuples")
        };
        assert_eq!(ts.len(), 2);
        assert_eq!(&ts[1].as_ref().unwrap().data[ENGINE_WORDS..], &[6, 7, 8]);
        assert_eq!((locked(&store, 0), locked(&store, 6)), (5, 5));
        let Reply::Tuples(ts) = ask(&h, &Request::lock_bytes(8, false, false, &[item(2)])) else {
            panic!("a granted lock answers with tuples")
        };
        assert!(
            ts[0].as_ref().unwrap().data.is_empty(),
            "no payload asked for"
        );
    }

    #[test]
    fn handler_malformed_reads_and_locks_are_refused_whole_and_lock_nothing() {
        let (h, store) = node();
        let bad_table = Item {
            table: TableId(9),
            ..item(1)
        };
        for req in [
            Request::lock_bytes(4, true, false, &[item(1), bad_table]),
            Request::read_bytes(&[item(1), bad_table]),
            Request::lock_bytes(0, true, false, &[item(1)]),
        ] {
            assert_eq!(ask(&h, &req), Reply::BadRequest);
        }
        let full = Request::lock_bytes(4, true, true, &[item(1), item(2)]);
        for cut in 0..full.len() {
            assert_eq!(ask(&h, &full[..cut]), Reply::BadRequest, "prefix {cut}");
        }
        let mut long = full.clone();
        long.extend_from_slice(&[0; 8]);
        assert_eq!(ask(&h, &long), Reply::BadRequest, "a trailing word");
        assert_eq!((locked(&store, 1), locked(&store, 2)), (0, 0));
    }
}
