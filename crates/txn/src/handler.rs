//! The participant side: serves [`Request`]s against a node's [`Store`] on that node's CPU.
//! Invoked by the fabric for RPCs from other nodes and, inline, for the node's own.

use crate::msg::{Item, Reply, Request, Tuple, NO_LOC};
use atoll_fabric::{Bytes, NodeId, RpcHandler, Words};
use atoll_storage::layout::{HEADER_WORDS, H_KEY, H_LOCK, H_VERSION, VERSION_ABSENT};
use atoll_storage::{Store, TableId};
use std::sync::Arc;

/// Attempts at a consistent local read before reporting the record as locked.
const CONSISTENT_READ_ATTEMPTS_MAX: usize = 64;
/// Lock word reported for a record that kept changing under every read attempt: no
/// transaction has this timestamp, so coordinators treat it as held by a writer.
pub const LOCK_UNSTABLE: u64 = u64::MAX;

/// Serves one node's requests.
pub struct StoreHandler {
    store: Arc<Store>,
    log_region: atoll_fabric::RegionId,
}

impl StoreHandler {
    pub fn new(store: Arc<Store>, log_region: atoll_fabric::RegionId) -> Self {
        StoreHandler { store, log_region }
    }

    fn loc_of(&self, it: &Item) -> Option<u32> {
        let layout = self.store.catalog.layout(it.table);
        if it.loc != NO_LOC {
            if it.loc >= layout.capacity {
                return None;
            }
            // A cached location must still hold this key and be live.
            let r = self.store.region(it.table);
            let off = layout.record_offset(it.loc) as usize;
            if r.load(off + H_KEY as usize) == it.key
                && r.load(off + H_VERSION as usize) & VERSION_ABSENT == 0
            {
                return Some(it.loc);
            }
        }
        self.store.lookup(it.table, it.key)
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
        let mut data = Words::from_elem(0, (layout.record_words - HEADER_WORDS) as usize);
        for _ in 0..CONSISTENT_READ_ATTEMPTS_MAX {
            let v1 = r.load(off + H_VERSION as usize);
            r.read_into(off + HEADER_WORDS as usize, &mut data);
            // A writer locks before touching the payload, so a free lock read after the
            // payload, with the version unchanged, means the payload is that version's.
            let lock = r.load(off + H_LOCK as usize);
            if v1 == r.load(off + H_VERSION as usize) {
                return Tuple {
                    loc,
                    lock,
                    version: v1,
                    data,
                };
            }
        }
        let version = r.load(off + H_VERSION as usize);
        Tuple {
            loc,
            lock: LOCK_UNSTABLE,
            version,
            data,
        }
    }

    fn serve(&self, req: Request) -> Reply {
        let store = &self.store;
        match req {
            Request::Read { items } => {
                if items.iter().any(|i| !self.valid_table(i.table)) {
                    return Reply::BadRequest;
                }
                Reply::Tuples(
                    items
                        .iter()
                        .map(|it| {
                            self.loc_of(it)
                                .map(|loc| self.consistent_read(it.table, loc))
                        })
                        .collect(),
                )
            }
            Request::Lock {
                ts,
                want_data,
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
                            store.region(items[j].table).store(off + H_LOCK as usize, 0);
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
                    let t = if want_data {
                        self.consistent_read(it.table, loc)
                    } else {
                        Tuple {
                            loc,
                            lock: ts,
                            version: r.load(off + H_VERSION as usize),
                            data: Words::new(),
                        }
                    };
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
            Request::WriteBack { ts, release, items } => {
                for (t, loc, payload) in &items {
                    if !self.valid_loc(*t, *loc)
                        || payload.len() + HEADER_WORDS as usize
                            != store.catalog.layout(*t).record_words as usize
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
                    r.write_from(off + HEADER_WORDS as usize, payload);
                    let v = r.load(off + H_VERSION as usize);
                    r.store(off + H_VERSION as usize, v + 1);
                    if release {
                        r.store(off + H_LOCK as usize, 0);
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
                    // Failing means it was not held by `ts`, which is then correctly left alone.
                    store.region(*t).cas(off + H_LOCK as usize, ts, 0);
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
                    || payload.len() != store.catalog.spec(table).payload_words as usize
                {
                    return Reply::BadRequest;
                }
                match store.insert_locked(table, key, &payload, ts) {
                    Ok(loc) => Reply::Inserted { loc },
                    Err(atoll_storage::StoreError::Duplicate { .. }) => Reply::Duplicate,
                    Err(_) => Reply::BadRequest,
                }
            }
            Request::Delete { table, key } => {
                if !self.valid_table(table) {
                    return Reply::BadRequest;
                }
                match store.delete(table, key) {
                    Some(_) => Reply::Ok,
                    None => Reply::NotFound { index: 0 },
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
                store.scan(table, lo, hi, limit as usize, reverse, &mut out);
                Reply::Keys(out)
            }
        }
    }
}

impl RpcHandler for StoreHandler {
    fn handle(&self, node: NodeId, req: &[u8], reply: &mut Bytes) {
        let r = if node != self.store.node {
            Reply::BadRequest
        } else {
            match Request::decode(req) {
                Ok(req) => self.serve(req),
                Err(_) => Reply::BadRequest,
            }
        };
        r.encode(reply);
    }
}
