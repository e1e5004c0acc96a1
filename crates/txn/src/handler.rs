//! The participant side: serves [`Request`]s against a node's [`Store`] on that node's CPU.
//! Invoked by the fabric for RPCs from other nodes and, inline, for the node's own.
//!
//! [`StoreHandler`] serves the shared requests itself and hands each family request
//! ([`Request::Family`]) to the [`Participant`] registered for that family. [`Local`] holds
//! the building blocks both use: locating records, consistent reads, freezing and unlocking.

use crate::msg::{self, FamilyId, Item, Reply, Request, Tuple, WriteBack};
use atoll_fabric::{Bytes, Handled, NodeId, Region, ReplyTo, RpcHandler, Words};
use atoll_storage::layout::{
    HEADER_WORDS, H_KEY, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN, VERSION_ABSENT,
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
}

impl Local {
    pub fn store(&self) -> &Store {
        &self.store
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
        let off = self.store.catalog.layout(it.table).record_offset(loc) as usize;
        let r = self.store.region(it.table);
        let mut t = None;
        for _ in 0..CONSISTENT_READ_ATTEMPTS_MAX {
            let v0 = r.load(off + H_VERSION as usize);
            if v0 & VERSION_ABSENT != 0 || r.load(off + H_KEY as usize) != it.key {
                return None;
            }
            let read = self.consistent_read(it.table, loc);
            if read.version == v0 {
                return Some(read);
            }
            t = Some(read);
        }
        // Kept changing: reported held by a writer, so the data is not used.
        t.map(|t| Tuple {
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
        let layout = self.store.catalog.layout(t);
        let r = self.store.region(t);
        let off = layout.record_offset(loc) as usize;
        let mut data = Words::from_elem(0, layout.payload_words as usize);
        for _ in 0..CONSISTENT_READ_ATTEMPTS_MAX {
            let v1 = r.load(off + H_VERSION as usize);
            r.read_into(off + HEADER_WORDS as usize, &mut data);
            // A writer locks before touching the payload, so a free lock read after the
            // payload, with the version unchanged, means the payload is that version's.
            let lock = r.load(off + H_LOCK as usize);
            let wts = r.load(off + H_WTS as usize);
            let rts = r.load(off + H_RTS as usize);
            if v1 == r.load(off + H_VERSION as usize) {
                return Tuple {
                    loc: msg::Loc(loc),
                    lock,
                    version: v1,
                    wts,
                    rts,
                    data,
                };
            }
        }
        let version = r.load(off + H_VERSION as usize);
        let (wts, rts) = (r.load(off + H_WTS as usize), r.load(off + H_RTS as usize));
        Tuple {
            loc: msg::Loc(loc),
            lock: LOCK_UNSTABLE,
            version,
            wts,
            rts,
            data,
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
        let (r, off) = self.record(t, loc);
        Tuple {
            loc: msg::Loc(loc),
            lock: ts,
            version: r.load(off + H_VERSION as usize),
            wts: r.load(off + H_WTS as usize),
            rts: r.load(off + H_RTS as usize),
            data: Words::new(),
        }
    }

    /// Whether every item of a write-back names a valid record of the right payload size,
    /// locked by `ts` (writing a record one does not hold would corrupt it).
    pub fn write_back_valid(&self, wb: &WriteBack) -> bool {
        wb.items.iter().all(|(t, loc, payload)| {
            self.valid_loc(*t, *loc)
                && payload.len() + HEADER_WORDS as usize
                    == self.store.catalog.layout(*t).tuple_words as usize
                && {
                    let (r, off) = self.record(*t, *loc);
                    r.load(off + H_LOCK as usize) == wb.ts
                }
        })
    }

    /// Installs one item of a checked write-back: payload, then `WTS`/`RTS` (if `set_ts`),
    /// then the version, then (with `release`) the unlock.
    pub fn write_back_one(&self, wb: &WriteBack, t: TableId, loc: u32, payload: &[u64]) {
        let (r, off) = self.record(t, loc);
        r.write_from(off + HEADER_WORDS as usize, payload);
        if wb.set_ts != 0 {
            r.store(off + H_WTS as usize, wb.set_ts);
            r.store(off + H_RTS as usize, wb.set_ts);
        }
        let v = r.load(off + H_VERSION as usize);
        r.store(off + H_VERSION as usize, v + 1);
        if wb.release {
            Self::unlock(r, off, wb.ts);
        }
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

    /// Serves a shared request (a family's goes to its participant before this).
    fn serve(&self, req: Request) -> Reply {
        let store = &self.store;
        match req {
            // Dispatched by `StoreHandler::handle` before decoding.
            Request::Family { .. } => Reply::BadRequest,
            Request::Read { items } => {
                if items.iter().any(|i| !self.valid_table(i.table)) {
                    return Reply::BadRequest;
                }
                Reply::Tuples(
                    items
                        .iter()
                        .map(|it| self.loc_of(it).and_then(|loc| self.read_item(it, loc)))
                        .collect(),
                )
            }
            Request::Lock {
                ts,
                want_data,
                freeze,
                items,
            } => {
                if ts == 0 || items.iter().any(|i| !self.valid_table(i.table)) {
                    return Reply::BadRequest;
                }
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    let undo = |out: &Vec<Option<Tuple>>| {
                        for (j, t) in out.iter().enumerate() {
                            let t = t.as_ref().expect("locked tuples are Some");
                            let off = store.catalog.layout(items[j].table).record_offset(t.loc.0)
                                as usize;
                            Self::unlock(store.region(items[j].table), off, ts);
                        }
                    };
                    let Some(loc) = self.loc_of(it) else {
                        undo(&out);
                        return Reply::NotFound { index: i as u32 };
                    };
                    let off = store.catalog.layout(it.table).record_offset(loc) as usize;
                    let r = store.region(it.table);
                    let holder = r.cas(off + H_LOCK as usize, 0, ts);
                    if holder != 0 {
                        undo(&out);
                        return Reply::LockFailed {
                            index: i as u32,
                            holder,
                        };
                    }
                    // Held now, so it stays what it is: check it is still the key's, live.
                    if !store.live_key_at(it.table, loc, it.key) {
                        Self::unlock(r, off, ts);
                        undo(&out);
                        return Reply::NotFound { index: i as u32 };
                    }
                    let frozen_rts = freeze.then(|| Self::freeze(r, off));
                    let mut t = if want_data {
                        self.consistent_read(it.table, loc)
                    } else {
                        self.header_tuple(it.table, loc, ts)
                    };
                    if let Some(rts) = frozen_rts {
                        t.rts = rts;
                    }
                    out.push(Some(t));
                }
                Reply::Tuples(out)
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
            Request::Log { offset, words } => {
                let r = store.memory().region(self.log_region);
                if offset as usize + words.len() > r.len_words() {
                    return Reply::BadRequest;
                }
                r.write_from(offset as usize, &words);
                Reply::Ok
            }
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
                    Err(StoreError::Full { .. } | StoreError::IndexFull { .. }) => Reply::Full,
                    Err(
                        StoreError::NotHere { .. }
                        | StoreError::PayloadWords { .. }
                        | StoreError::NotFound { .. }
                        | StoreError::NoOrderedIndex { .. },
                    ) => Reply::BadRequest,
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
        StoreHandler {
            local: Local { store, log_region },
            families,
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
                Ok(None) => match Request::decode(req) {
                    Ok(req) => self.local.serve(req),
                    Err(_) => Reply::BadRequest,
                },
                Err(_) => Reply::BadRequest,
            }
        };
        r.encode(reply);
        Handled::Replied
    }

    fn poll_deferred(&self, node: NodeId, out: &mut Vec<(ReplyTo, Bytes)>) -> bool {
        if node != self.local.store.node {
            return false;
        }
        let mut held = false;
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
