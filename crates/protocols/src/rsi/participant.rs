//! RSI's participant: its stages as requests served by the records' and the timestamp
//! service's CPUs, each doing with loads, stores and atomics on the node's memory what the
//! one-sided stage does with verbs (the plans of the paper's Figure 6 baselines).
//!
//! A request is checked whole before it touches memory: every record it names must be a
//! slot of this node, each `LOCK` change must lock an unlocked word or unlock a locked one,
//! an install must find its records locked and carry payloads of the table's size, and a
//! deletion must find its record live, of its key, and locked.

use super::msg::{DeleteItem, InstallItem, LockChange, RsiReply, RsiRequest, FAMILY};
use atoll_fabric::ReplyTo;
use atoll_storage::layout::{
    CID_LOCKED, HEADER_WORDS, H_KEY, H_LOCK, H_VERSION, OLD_SLOT_HEADER_WORDS, VERSION_ABSENT,
};
use atoll_txn::handler::{Local, Participant};
use atoll_txn::msg::{FamilyId, Reply};
use atoll_txn::tsvc::TsService;

/// RSI's participant side of one node (stateless).
#[derive(Default)]
pub struct RsiParticipant;

/// Whether this node holds records (a compute or timestamp node registers its tables'
/// regions empty).
fn holds_records(local: &Local) -> bool {
    let store = local.store();
    store.catalog.topology().holds_records(store.memory().node)
}

/// Whether this node holds records and `t`, `loc` is one of its slots.
fn valid_record(local: &Local, t: atoll_storage::TableId, loc: u32) -> bool {
    holds_records(local) && local.valid_loc(t, loc)
}

/// Whether a `LOCK` change locks the commit id it expects, or (`unlock`) takes a locked word
/// back to an unlocked one: nothing else may be written into a lock word.
fn valid_change(local: &Local, c: &LockChange, unlock: bool) -> bool {
    valid_record(local, c.table, c.loc)
        && if unlock {
            c.from & CID_LOCKED != 0 && c.to & CID_LOCKED == 0
        } else {
            c.from & CID_LOCKED == 0 && c.to == c.from | CID_LOCKED
        }
}

fn valid_install(local: &Local, it: &InstallItem) -> bool {
    if !valid_record(local, it.table, it.loc) {
        return false;
    }
    let layout = local.store().catalog.layout(it.table);
    let old_ok = if layout.version_slots > 1 {
        it.evict < layout.version_slots - 1
            && it.old_slot.len() == (OLD_SLOT_HEADER_WORDS + layout.payload_words) as usize
    } else {
        it.old_slot.is_empty()
    };
    let (r, off) = local.record(it.table, it.loc);
    old_ok
        && it.payload.len() == layout.payload_words as usize
        && r.load(off + H_LOCK as usize) & CID_LOCKED != 0
}

/// Whether `it` names a live record of this node, of its key, that a committer holds
/// locked: only the lock's holder deletes.
fn valid_delete(local: &Local, it: &DeleteItem) -> bool {
    if !valid_record(local, it.table, it.loc) {
        return false;
    }
    let (r, off) = local.record(it.table, it.loc);
    r.load(off + H_KEY as usize) == it.key
        && r.load(off + H_VERSION as usize) & VERSION_ABSENT == 0
        && r.load(off + H_LOCK as usize) & CID_LOCKED != 0
}

/// Whether `cts` is a commit timestamp the service handed out whose outcome it awaits and
/// whose ring slot is free.
fn handed_out(svc: &TsService, r: &atoll_fabric::Region, cts: u64) -> bool {
    let counter = r.load(svc.counter().offset_words as usize);
    let rts_word = r.load(svc.rts().offset_words as usize);
    counter > 0
        && cts <= TsService::cts_of(counter - 1)
        && cts > TsService::snapshot_of(rts_word)
        && svc.fits_ring(cts, rts_word)
}

fn serve(local: &Local, req: RsiRequest) -> Reply {
    match req {
        RsiRequest::Read { items } => {
            if !holds_records(local) || !items.iter().all(|it| local.valid_table(it.table)) {
                return Reply::BadRequest;
            }
            let blocks = items
                .iter()
                .map(|it| {
                    // A deleted key keeps its slot until reclaimed: its block tells the
                    // reader whether its snapshot includes the deletion.
                    let loc = local
                        .loc_of(it)
                        .or_else(|| local.store().find_slot(it.table, it.key))?;
                    let layout = local.store().catalog.layout(it.table);
                    let (r, off) = local.record(it.table, loc);
                    let mut block = vec![0; super::block_words(layout) as usize];
                    r.read_into(off, &mut block);
                    Some((loc, block))
                })
                .collect();
            RsiReply::Blocks(blocks).into_reply()
        }
        RsiRequest::Lock { items } => {
            if !items.iter().all(|c| valid_change(local, c, false)) {
                return Reply::BadRequest;
            }
            let seen = items
                .iter()
                .map(|c| {
                    let (r, off) = local.record(c.table, c.loc);
                    r.cas(off + H_LOCK as usize, c.from, c.to)
                })
                .collect();
            RsiReply::Words(seen).into_reply()
        }
        RsiRequest::SetLock { items } => {
            if !items.iter().all(|c| valid_change(local, c, true)) {
                return Reply::BadRequest;
            }
            for c in &items {
                let (r, off) = local.record(c.table, c.loc);
                r.cas(off + H_LOCK as usize, c.from, c.to);
            }
            Reply::Ok
        }
        RsiRequest::Install { cts, items } => {
            if cts & CID_LOCKED != 0 || !items.iter().all(|it| valid_install(local, it)) {
                return Reply::BadRequest;
            }
            // The one-sided install's order: old slot, payload, version, then the unlock.
            for it in &items {
                let layout = local.store().catalog.layout(it.table);
                let (r, off) = local.record(it.table, it.loc);
                if !it.old_slot.is_empty() {
                    for (at, words) in super::old_slot_writes(layout, it.evict, &it.old_slot) {
                        r.write_from(off + at as usize, words);
                    }
                }
                r.write_from(off + HEADER_WORDS as usize, &it.payload);
                r.store(off + H_VERSION as usize, it.version);
                r.store(off + H_LOCK as usize, cts);
            }
            Reply::Ok
        }
        RsiRequest::Delete { cid, items } => {
            if cid & CID_LOCKED != 0 || !items.iter().all(|it| valid_delete(local, it)) {
                return Reply::BadRequest;
            }
            let mut versions = Vec::with_capacity(items.len());
            for it in &items {
                // Absent at the next version while still locked, then unlocked at the
                // deletion's commit id: a reader seeing the record absent and unlocked
                // knows whether its snapshot includes the deletion.
                let Ok((_, version)) = local.store().delete(it.table, it.key) else {
                    // Checked live and of this key above, and its holder is the caller.
                    return Reply::BadRequest;
                };
                let (r, off) = local.record(it.table, it.loc);
                r.store(off + H_LOCK as usize, cid);
                versions.push(version);
            }
            RsiReply::Words(versions).into_reply()
        }
        RsiRequest::Snapshot => match local.ts_service() {
            Some((svc, r)) => {
                RsiReply::Words(vec![r.load(svc.rts().offset_words as usize)]).into_reply()
            }
            None => Reply::BadRequest,
        },
        RsiRequest::CommitTs => match local.ts_service() {
            Some((svc, r)) => {
                let old = r.fetch_add(svc.counter().offset_words as usize, 1);
                let rts = r.load(svc.rts().offset_words as usize);
                RsiReply::Words(vec![old, rts]).into_reply()
            }
            None => Reply::BadRequest,
        },
        RsiRequest::Outcome { cts } => match local.ts_service() {
            // Only a commit timestamp handed out, above `RTS` and within the ring: any
            // other would move `RTS` past transactions still running.
            Some((svc, r)) if handed_out(svc, r, cts) => {
                r.store(svc.slot(cts).offset_words as usize, cts);
                Reply::Ok
            }
            _ => Reply::BadRequest,
        },
    }
}

impl Participant for RsiParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &Local, _from: ReplyTo, body: &[u8]) -> Option<Reply> {
        Some(match RsiRequest::decode(body) {
            Ok(req) => serve(local, req),
            Err(_) => Reply::BadRequest,
        })
    }
}
