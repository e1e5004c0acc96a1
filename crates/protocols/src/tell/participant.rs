//! Tell's participant: a storage node's `get` and `put_if` on its record slots, and the
//! commit manager's requests on the node that runs the role [`CM_ROLE`].
//!
//! A request is checked whole before it touches memory: every record it names must be a
//! slot of this node, and a put's words must be a Tell record of the slot's layout that
//! keeps the slot's key. A put takes the slot's `LOCK` from `[0 | seq]` to `[1 | seq]` by
//! CAS (so it fails on any put since the read, even of the same value), writes the slot,
//! then stores `[0 | seq + 1]`; a `get` takes words only between two equal unlocked `LOCK`
//! reads. A storage node refuses the puts and inserts of a processing node a recovery
//! fenced. The first storage node serves the tid counter several commit managers take
//! blocks from. Under SBVS a storage node reads and bumps its cache units' stamps
//! ([`super::sbvs`]).

use super::config::TellConfig;
use super::descriptor::Tid;
use super::msg::{InsertItem, Inserted, PutItem, TellReply, TellRequest, FAMILY};
use super::node::{TellNode, CM_ROLE};
use super::record;
use atoll_fabric::ReplyTo;
use atoll_storage::layout::{CID_LOCKED, H_KEY, H_LOCK, H_VERSION, H_WTS, VERSION_ABSENT};
use atoll_storage::StoreError;
use atoll_txn::handler::{Local, Participant};
use atoll_txn::msg::{FamilyId, Reply};
use std::sync::Arc;

/// Reads of a record a `get` tries while puts hold it, before it answers `Busy` (a put
/// on this node's CPU holds a slot for one copy of its words).
pub const GET_ATTEMPTS_MAX: u32 = 64;

/// Tell's participant side of one node, over the node's Tell state and the run's Tell
/// configuration (its defaults in a run of another family, which sends no Tell request).
pub struct TellParticipant {
    pub node: Arc<TellNode>,
    pub cfg: TellConfig,
}

/// Whether this node holds records (a compute or commit-manager node registers its
/// tables' regions empty).
fn holds_records(local: &Local) -> bool {
    let store = local.store();
    store.catalog.topology().holds_records(store.memory().node)
}

/// Whether `it` may be put here: a slot of this node whose layout holds Tell records,
/// an unlocked sequence number, and words that are a record of the slot's own key.
fn valid_put(local: &Local, it: &PutItem) -> bool {
    if !holds_records(local) || !local.valid_loc(it.table, it.loc) || it.seq & CID_LOCKED != 0 {
        return false;
    }
    let layout = local.store().catalog.layout(it.table);
    let (r, off) = local.record(it.table, it.loc);
    record::decode(layout, &it.words).is_ok()
        && it.words[H_KEY as usize] == r.load(off + H_KEY as usize)
}

/// Whether `it` may be inserted here: a table of this node that holds Tell records, a key
/// this node holds, a whole stored payload.
fn valid_insert(local: &Local, it: &InsertItem) -> bool {
    let store = local.store();
    holds_records(local)
        && local.valid_table(it.table)
        && record::fits(store.catalog.layout(it.table))
        && store.catalog.holds(it.table, it.key, store.memory().node)
        && it.payload.len() == store.catalog.layout(it.table).payload_words as usize
}

/// Sequence number of a slot's first put: the insert holds the slot at `[1 | 0]` while it
/// writes it, and frees it at 1.
pub const INSERTED_SEQ: u64 = 1;

/// Inserts one record of `tid` (Tell's `put_if_absent`): into a new slot, written whole
/// while `LOCK` holds it, its one version the tid's; a key whose slot is there answers with
/// its newest version (live: refused; a deletion: its words, for a conditional put over
/// them).
fn insert(local: &Local, node: &TellNode, cfg: &TellConfig, tid: Tid, it: &InsertItem) -> Inserted {
    let store = local.store();
    let existing = |loc: u32| match read_slot(local, it.table, loc) {
        Some(words) if words[H_VERSION as usize] & VERSION_ABSENT != 0 => {
            Inserted::Deleted { loc, words }
        }
        // Live, or held by puts all along (a writer of it is under way: the insert would
        // meet its version).
        _ => Inserted::Live,
    };
    if let Some(loc) = store.find_slot(it.table, it.key) {
        return existing(loc);
    }
    // A new key's share of its tree's growth, from the run's memory budget.
    let tree = match cfg.index {
        super::config::Index::Hash => false,
        super::config::Index::BTree { fanout } => {
            if !node.cover_tree_key(store, fanout) {
                return Inserted::Full;
            }
            true
        }
    };
    match store.insert_new_locked(it.table, it.key, &it.payload, CID_LOCKED) {
        Ok((loc, version)) => {
            if tree {
                node.tree_key_inserted();
            }
            let (r, off) = local.record(it.table, loc);
            r.store(off + H_WTS as usize, tid.0);
            r.store(off + H_LOCK as usize, INSERTED_SEQ);
            Inserted::Placed {
                loc,
                version,
                seq: INSERTED_SEQ,
            }
        }
        // Another insert of the key got in first.
        Err(StoreError::Duplicate { .. }) => match store.find_slot(it.table, it.key) {
            Some(loc) => existing(loc),
            None => Inserted::Live,
        },
        Err(e) if e.is_capacity() => Inserted::Full,
        Err(e) => unreachable!("tell: an insert checked whole was refused: {e}"),
    }
}

/// The words of slot `loc` of `t` between two equal unlocked `LOCK` reads; `None` if puts
/// held it every time.
fn read_slot(local: &Local, t: atoll_storage::TableId, loc: u32) -> Option<Vec<u64>> {
    let layout = local.store().catalog.layout(t);
    let (r, off) = local.record(t, loc);
    let mut words = vec![0; layout.record_words as usize];
    for _ in 0..GET_ATTEMPTS_MAX {
        let before = r.load(off + H_LOCK as usize);
        if before & CID_LOCKED != 0 {
            std::hint::spin_loop();
            continue;
        }
        r.read_into(off, &mut words);
        if r.load(off + H_LOCK as usize) == before {
            return Some(words);
        }
    }
    None
}

/// `get` by request: each key's whole slot, found by the run's index (`None`: no such
/// key), or `Busy` when puts held a slot or a tree node through every read.
fn get(
    local: &Local,
    node: &TellNode,
    cfg: &TellConfig,
    items: Vec<(atoll_storage::TableId, u64)>,
) -> Reply {
    if !holds_records(local) || !items.iter().all(|&(t, _)| local.valid_table(t)) {
        return Reply::BadRequest;
    }
    let mut records = Vec::with_capacity(items.len());
    let tree = match cfg.index {
        super::config::Index::Hash => None,
        super::config::Index::BTree { fanout } => {
            Some(node.tree_layout(|| super::index::tree_layout(&local.store().catalog, fanout)))
        }
    };
    for (t, key) in items {
        // A deleted key keeps its slot (older snapshots read its versions).
        let found = match tree {
            None => local.store().find_slot(t, key),
            Some(layout) => match super::index::find_local(local.store(), layout, t, key) {
                Ok(found) => found,
                Err(_) => return TellReply::Busy.into_reply(),
            },
        };
        let Some(loc) = found else {
            records.push(None);
            continue;
        };
        let Some(words) = read_slot(local, t, loc) else {
            return TellReply::Busy.into_reply();
        };
        let ours = words[H_KEY as usize] == key;
        records.push(ours.then_some((loc, words)));
    }
    TellReply::Records(records).into_reply()
}

fn serve_store(local: &Local, node: &TellNode, cfg: &TellConfig, req: TellRequest) -> Reply {
    match req {
        TellRequest::Get { items } => get(local, node, cfg, items),
        TellRequest::PutIf { origin, items } => {
            if !items.iter().all(|it| valid_put(local, it)) {
                return Reply::BadRequest;
            }
            if node.is_fenced(origin) {
                // Sent before its node crashed, arriving after its recovery began.
                return TellReply::Fenced.into_reply();
            }
            let puts = items
                .iter()
                .map(|it| {
                    let (r, off) = local.record(it.table, it.loc);
                    let lock = off + H_LOCK as usize;
                    if r.cas(lock, it.seq, it.seq | CID_LOCKED) != it.seq {
                        return false;
                    }
                    r.write_from(lock + 1, &it.words[H_LOCK as usize + 1..]);
                    r.store(lock, it.seq + 1);
                    true
                })
                .collect();
            TellReply::Puts(puts).into_reply()
        }
        TellRequest::Insert { origin, tid, items } => {
            if tid.0 == 0 || !items.iter().all(|it| valid_insert(local, it)) {
                return Reply::BadRequest;
            }
            if node.is_fenced(origin) {
                return TellReply::Fenced.into_reply();
            }
            let done = items
                .iter()
                .map(|it| insert(local, node, cfg, tid, it))
                .collect();
            TellReply::Inserted(done).into_reply()
        }
        TellRequest::Fence { node: dead } => {
            if !holds_records(local) || !local.store().catalog.topology().runs_coordinators(dead) {
                return Reply::BadRequest;
            }
            node.fence(dead);
            TellReply::Done.into_reply()
        }
        TellRequest::TakeTids { count } => {
            // The counter lives on the first storage node.
            let here = local.store().memory().node;
            if here != atoll_fabric::NodeId(0) || !holds_records(local) || count != cfg.tid_block {
                return Reply::BadRequest;
            }
            TellReply::Tids {
                first: node.take_tids(count, cfg),
            }
            .into_reply()
        }
        TellRequest::Stamps { bump, words } => {
            let store = local.store();
            let Some(i) = store.catalog.extra_region_named(super::config::SBVS_REGION) else {
                return Reply::BadRequest;
            };
            let size = store.catalog.extra_region_words(i);
            if !holds_records(local) || words.iter().any(|&w| w as usize >= size) {
                return Reply::BadRequest;
            }
            let region = store.memory().region(store.catalog.extra_region(i));
            let stamps = words
                .iter()
                .map(|&w| {
                    if bump {
                        region.fetch_add(w as usize, 1) + 1
                    } else {
                        region.load(w as usize)
                    }
                })
                .collect();
            TellReply::Stamps(stamps).into_reply()
        }
        _ => Reply::BadRequest,
    }
}

impl Participant for TellParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &Local, _from: ReplyTo, body: &[u8]) -> Option<Reply> {
        let Ok(req) = TellRequest::decode(body) else {
            return Some(Reply::BadRequest);
        };
        let store = local.store();
        if !req.for_commit_manager() {
            return Some(serve_store(local, &self.node, &self.cfg, req));
        }
        let node = store.memory().node;
        let Some(index) = cm_index(store.catalog.topology(), node) else {
            return Some(Reply::BadRequest);
        };
        let reply = self.node.serve_cm(req, index, &self.cfg);
        Some(reply.map_or(Reply::BadRequest, TellReply::into_reply))
    }
}

/// Which of the run's commit managers `node` runs, if any.
pub fn cm_index(topology: &atoll_storage::Topology, node: atoll_fabric::NodeId) -> Option<u16> {
    topology
        .service_nodes(CM_ROLE.name)
        .position(|n| n == node)
        .map(|i| i as u16)
}
