//! The participant side: serves [`Request`]s against a node's [`Store`] on that node's CPU.
//! Invoked by the fabric for RPCs from other nodes and, inline, for the node's own.

use crate::msg::{Item, Reply, Request, Tuple, NO_LOC};
use atoll_fabric::{Bytes, Handled, NodeId, ReplyTo, RpcHandler, Words};
use atoll_storage::layout::{
    HEADER_WORDS, H_AUX, H_KEY, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN, VERSION_ABSENT,
};
use atoll_storage::{Store, StoreError, TableId};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// CAS attempts on `RTS` (freezing, renewing) before giving up: each failure means another
/// renewal raced, and renewals are finite.
const FREEZE_ATTEMPTS_MAX: usize = 1024;
/// Attempts at a consistent local read before reporting the record as locked.
const CONSISTENT_READ_ATTEMPTS_MAX: usize = 64;
/// Lock word reported for a record that kept changing under every read attempt: no
/// transaction has this timestamp, so coordinators treat it as held by a writer.
pub const LOCK_UNSTABLE: u64 = u64::MAX;

/// Serves one node's requests.
pub struct StoreHandler {
    store: Arc<Store>,
    log_region: atoll_fabric::RegionId,
    /// WAITDIE requests held until their locks free up, shared by the node's workers.
    waiters: parking_lot::Mutex<Vec<Waiter>>,
    /// `waiters.len()`, read without the lock on every event-loop turn.
    waiting: AtomicUsize,
}

impl StoreHandler {
    pub fn new(store: Arc<Store>, log_region: atoll_fabric::RegionId) -> Self {
        StoreHandler {
            store,
            log_region,
            waiters: parking_lot::Mutex::new(Vec::new()),
            waiting: AtomicUsize::new(0),
        }
    }

    fn loc_of(&self, it: &Item) -> Option<u32> {
        let layout = self.store.catalog.layout(it.table);
        if it.loc != NO_LOC {
            if it.loc >= layout.capacity {
                return None;
            }
            // A cached location must still hold this key and be live (its slot may have
            // gone to another key).
            if self.store.live_key_at(it.table, it.loc, it.key) {
                return Some(it.loc);
            }
        }
        self.store.lookup(it.table, it.key)
    }

    /// A consistent read of `it`'s record at `loc` (from [`Self::loc_of`]), if the slot
    /// still holds `it.key` live: a reclaim changes the version word before the key word,
    /// so the same version word before the key check and in the read means the key's tuple.
    fn read_item(&self, it: &Item, loc: u32) -> Option<Tuple> {
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

    fn valid_table(&self, t: TableId) -> bool {
        (t.0 as usize) < self.store.catalog.table_count()
    }

    fn valid_loc(&self, t: TableId, loc: u32) -> bool {
        self.valid_table(t) && loc < self.store.catalog.layout(t).capacity
    }

    /// Reads a tuple so that the payload matches the version: retried while a writer is
    /// between its payload and version writes. Returns the lock word seen after the payload.
    fn consistent_read(&self, t: TableId, loc: u32) -> Tuple {
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
                    loc,
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
            loc,
            lock: LOCK_UNSTABLE,
            version,
            wts,
            rts,
            data,
        }
    }

    /// Freezes `RTS` of a record this node's caller holds locked: no renewal or read can
    /// raise it afterwards. Returns the frozen value without the flag.
    fn freeze(r: &atoll_fabric::Region, off: usize) -> u64 {
        // Bounded: only lease renewals race with it, and each CAS that fails saw one.
        for _ in 0..FREEZE_ATTEMPTS_MAX {
            let cur = r.load(off + H_RTS as usize);
            if cur & RTS_FROZEN != 0 || r.cas(off + H_RTS as usize, cur, cur | RTS_FROZEN) == cur {
                return cur & !RTS_FROZEN;
            }
        }
        panic!("could not freeze RTS in {FREEZE_ATTEMPTS_MAX} attempts: renewals never stop");
    }

    /// MVCC's read at `ctts` on the participant's CPU, with the same steps as a one-sided
    /// reader: a consistent snapshot of the record, Cond R2 (no writer ordered before the
    /// reader holds it), Cond R1 (a kept version older than `ctts`), then `RTS` raised to
    /// `ctts` by CAS unless a later writer froze it. `Err(true)` is a slot overflow,
    /// `Err(false)` a conflict (also when the slot no longer holds `key` live).
    fn mvcc_read(&self, t: TableId, loc: u32, key: u64, ctts: u64) -> Result<Tuple, bool> {
        let layout = self.store.catalog.layout(t);
        let r = self.store.region(t);
        let off = layout.record_offset(loc) as usize;
        let n = layout.record_words as usize;
        let (mut a, mut b) = (vec![0u64; n], vec![0u64; n]);
        for _ in 0..CONSISTENT_READ_ATTEMPTS_MAX {
            r.read_into(off, &mut a);
            r.read_into(off, &mut b);
            if a.iter()
                .zip(&b)
                .enumerate()
                .any(|(k, (x, y))| k != H_RTS as usize && x != y)
            {
                continue;
            }
            if a[H_KEY as usize] != key || a[H_VERSION as usize] & VERSION_ABSENT != 0 {
                // Deleted, or its slot went to another key, since it was located.
                return Err(false);
            }
            let lock = a[H_LOCK as usize];
            if lock != 0 && lock < ctts {
                return Err(false);
            }
            let Some(c) = crate::mvcc::choose(layout, &a, ctts) else {
                return Err(true);
            };
            let rts = r.load(off + H_RTS as usize);
            let ok = if rts & !RTS_FROZEN >= ctts {
                true
            } else if rts & RTS_FROZEN != 0 {
                // A writer holds it: one ordered before us is a conflict; for one after
                // us, read again once it is done (a frozen RTS cannot be raised safely:
                // the same frozen value can come back under another writer).
                let holder = r.load(off + H_LOCK as usize);
                if holder != 0 && holder < ctts {
                    return Err(false);
                }
                false
            } else {
                // A write-back may have put back the RTS seen (ABA): the raise counts only
                // if no version was installed since the snapshot.
                r.cas(off + H_RTS as usize, rts, ctts) == rts
                    && r.load(off + H_VERSION as usize) == a[H_VERSION as usize]
                    && r.load(off + H_WTS as usize) == a[H_WTS as usize]
            };
            if ok {
                let data = Words::from_slice(
                    &a[c.payload_at..c.payload_at + layout.payload_words as usize],
                );
                return Ok(Tuple {
                    loc,
                    lock,
                    version: c.version,
                    wts: c.wts,
                    rts: ctts.max(rts & !RTS_FROZEN),
                    data,
                });
            }
        }
        Err(false)
    }

    /// SUNDIAL's lease renewal, atomic by CAS on `RTS`: fails if `WTS` moved on (a later
    /// write committed) or a writer froze `RTS`; succeeds if the lease already reaches.
    fn renew(r: &atoll_fabric::Region, off: usize, wts: u64, commit_ts: u64) -> bool {
        for _ in 0..FREEZE_ATTEMPTS_MAX {
            if r.load(off + H_WTS as usize) != wts {
                return false;
            }
            let cur = r.load(off + H_RTS as usize);
            if cur & RTS_FROZEN != 0 {
                return false;
            }
            if cur >= commit_ts
                || (r.cas(off + H_RTS as usize, cur, commit_ts) == cur
                    && r.load(off + H_WTS as usize) == wts)
            {
                return true;
            }
        }
        false
    }

    /// Releases a lock held by `ts`, first thawing a frozen `RTS`. Not held by `ts`: no-op.
    fn unlock(r: &atoll_fabric::Region, off: usize, ts: u64) {
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

    fn serve(&self, req: Request) -> Reply {
        let store = &self.store;
        match req {
            // Needs the requester's address to be held: served by `lock_wait_die`.
            Request::LockWaitDie { .. } => Reply::BadRequest,
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
                            let off =
                                store.catalog.layout(items[j].table).record_offset(t.loc) as usize;
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
                        Tuple {
                            loc,
                            lock: ts,
                            version: r.load(off + H_VERSION as usize),
                            wts: r.load(off + H_WTS as usize),
                            rts: r.load(off + H_RTS as usize),
                            data: Words::new(),
                        }
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
            Request::MvccRead { ctts, items } => {
                if ctts == 0 || items.iter().any(|i| !self.valid_table(i.table)) {
                    return Reply::BadRequest;
                }
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    let Some(loc) = self.loc_of(it) else {
                        return Reply::NotFound { index: i as u32 };
                    };
                    match self.mvcc_read(it.table, loc, it.key, ctts) {
                        Ok(t) => out.push(Some(t)),
                        Err(overflow) => {
                            return Reply::MvccRefused {
                                index: i as u32,
                                overflow,
                            }
                        }
                    }
                }
                Reply::Tuples(out)
            }
            Request::Renew { commit_ts, items } => {
                for (i, (t, loc, wts)) in items.iter().enumerate() {
                    if !self.valid_loc(*t, *loc) {
                        return Reply::BadRequest;
                    }
                    let off = store.catalog.layout(*t).record_offset(*loc) as usize;
                    if !Self::renew(store.region(*t), off, *wts, commit_ts) {
                        return Reply::Invalid { index: i as u32 };
                    }
                }
                Reply::Ok
            }
            Request::WriteBack {
                ts,
                release,
                set_ts,
                keep_old,
                items,
            } => {
                for (t, loc, payload) in &items {
                    if !self.valid_loc(*t, *loc)
                        || payload.len() + HEADER_WORDS as usize
                            != store.catalog.layout(*t).tuple_words as usize
                    {
                        return Reply::BadRequest;
                    }
                    let off = store.catalog.layout(*t).record_offset(*loc) as usize;
                    if store.region(*t).load(off + H_LOCK as usize) != ts {
                        // Writing a record one does not hold would corrupt it: refuse.
                        return Reply::BadRequest;
                    }
                }
                for (t, loc, payload) in &items {
                    let off = store.catalog.layout(*t).record_offset(*loc) as usize;
                    let r = store.region(*t);
                    let layout = store.catalog.layout(*t);
                    if keep_old && layout.version_slots > 1 {
                        // Copy the current version into the oldest slot, then mark the
                        // current one as being written (we hold the lock, so the record is
                        // stable): the same steps, in the same order, as the one-sided
                        // write-back (`stages::mvcc_install_steps`).
                        let mut rec = vec![0u64; layout.record_words as usize];
                        r.read_into(off, &mut rec);
                        for (at, words) in crate::mvcc::install_steps(layout, &rec) {
                            r.write_from(off + at as usize, &words);
                        }
                    }
                    r.write_from(off + HEADER_WORDS as usize, payload);
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
                    Ok((loc, version)) => Reply::Inserted { loc, version },
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

impl RpcHandler for StoreHandler {
    fn handle(&self, node: NodeId, from: ReplyTo, req: &[u8], reply: &mut Bytes) -> Handled {
        let r = if node != self.store.node {
            Reply::BadRequest
        } else {
            match Request::decode(req) {
                Ok(Request::LockWaitDie {
                    ts,
                    want_data,
                    counter,
                    items,
                }) => match self.lock_wait_die(from, ts, want_data, counter, items) {
                    Some(r) => r,
                    None => return Handled::Deferred,
                },
                Ok(req) => self.serve(req),
                Err(_) => Reply::BadRequest,
            }
        };
        r.encode(reply);
        Handled::Replied
    }

    fn poll_deferred(&self, node: NodeId, out: &mut Vec<(ReplyTo, Bytes)>) -> bool {
        if node != self.store.node || self.waiting.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut ws = self.waiters.lock();
        let mut i = 0;
        // Bounded by the held requests; each is advanced once per turn.
        while i < ws.len() {
            ws[i].polls += 1;
            let outcome = if ws[i].polls > WAIT_POLLS_MAX {
                let w = &mut ws[i];
                self.undo_waiter(w);
                Some(Reply::LockFailed {
                    index: w.next as u32,
                    holder: 0,
                })
            } else {
                self.advance(&mut ws[i])
            };
            match outcome {
                Some(r) => {
                    let w = ws.swap_remove(i);
                    let mut b = Vec::new();
                    r.encode(&mut b);
                    out.push((w.from, b));
                }
                None => i += 1,
            }
        }
        self.waiting.store(ws.len(), Ordering::Release);
        !ws.is_empty()
    }
}

/// A WAITDIE lock request held until the younger holders release.
struct Waiter {
    from: ReplyTo,
    ts: u64,
    want_data: bool,
    counter: bool,
    items: Vec<Item>,
    locs: Vec<u32>,
    /// Items `[0, next)` are locked by this request.
    next: usize,
    /// The item whose AUX counter this waiter raised, if any.
    raised: Option<usize>,
    polls: u32,
}

/// Event-loop turns a held request may wait before it dies anyway (a bound, not a policy:
/// wait-die cannot deadlock, but a holder can be slow).
const WAIT_POLLS_MAX: u32 = 1_000_000;

impl StoreHandler {
    fn aux(&self, it: &Item, loc: u32) -> (&atoll_fabric::Region, usize) {
        let off = self.store.catalog.layout(it.table).record_offset(loc) as usize;
        (self.store.region(it.table), off)
    }

    /// Unlocks what a request holds and lowers the counter it raised.
    fn undo_waiter(&self, w: &mut Waiter) {
        for j in 0..w.next {
            let (r, off) = self.aux(&w.items[j], w.locs[j]);
            r.cas(off + H_LOCK as usize, w.ts, 0);
        }
        w.next = 0;
        if let Some(j) = w.raised.take() {
            let (r, off) = self.aux(&w.items[j], w.locs[j]);
            r.fetch_add(off + H_AUX as usize, u64::MAX);
        }
    }

    /// Locks as many items as possible: `Some(reply)` when done or dead, `None` to wait.
    fn advance(&self, w: &mut Waiter) -> Option<Reply> {
        while w.next < w.items.len() {
            let i = w.next;
            let it = w.items[i];
            if w.locs.len() <= i {
                match self.loc_of(&it) {
                    Some(loc) => w.locs.push(loc),
                    None => {
                        self.undo_waiter(w);
                        return Some(Reply::NotFound { index: i as u32 });
                    }
                }
            }
            let (r, off) = self.aux(&it, w.locs[i]);
            let someone_old_waits =
                w.counter && w.raised != Some(i) && r.load(off + H_AUX as usize) > 0;
            let holder = if someone_old_waits {
                u64::MAX
            } else {
                r.cas(off + H_LOCK as usize, 0, w.ts)
            };
            if holder == 0 && !self.store.live_key_at(it.table, w.locs[i], it.key) {
                // Deleted, or its slot went to another key, while this request waited.
                Self::unlock(r, off, w.ts);
                self.undo_waiter(w);
                return Some(Reply::NotFound { index: i as u32 });
            }
            if holder == 0 {
                if w.raised == Some(i) {
                    r.fetch_add(off + H_AUX as usize, u64::MAX);
                    w.raised = None;
                }
                w.next += 1;
                continue;
            }
            if w.ts < holder && !someone_old_waits {
                // Older than the holder: wait.
                if w.counter && w.raised.is_none() {
                    r.fetch_add(off + H_AUX as usize, 1);
                    w.raised = Some(i);
                }
                return None;
            }
            self.undo_waiter(w);
            return Some(Reply::LockFailed {
                index: i as u32,
                holder,
            });
        }
        let tuples = w
            .items
            .iter()
            .zip(&w.locs)
            .map(|(it, &loc)| {
                Some(if w.want_data {
                    self.consistent_read(it.table, loc)
                } else {
                    let (r, off) = self.aux(it, loc);
                    Tuple {
                        loc,
                        lock: w.ts,
                        version: r.load(off + H_VERSION as usize),
                        wts: r.load(off + H_WTS as usize),
                        rts: r.load(off + H_RTS as usize),
                        data: Words::new(),
                    }
                })
            })
            .collect();
        Some(Reply::Tuples(tuples))
    }

    fn lock_wait_die(
        &self,
        from: ReplyTo,
        ts: u64,
        want_data: bool,
        counter: bool,
        items: Vec<Item>,
    ) -> Option<Reply> {
        if ts == 0 || items.iter().any(|i| !self.valid_table(i.table)) {
            return Some(Reply::BadRequest);
        }
        let mut w = Waiter {
            from,
            ts,
            want_data,
            counter,
            locs: Vec::with_capacity(items.len()),
            items,
            next: 0,
            raised: None,
            polls: 0,
        };
        let r = self.advance(&mut w);
        if r.is_none() {
            let mut ws = self.waiters.lock();
            ws.push(w);
            self.waiting.store(ws.len(), Ordering::Release);
        }
        r
    }
}
