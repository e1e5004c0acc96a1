//! MVCC's participant: snapshot reads and installs on the owner's CPU, with the same steps
//! as the one-sided forms.

use super::msg::{MvccReply, MvccRequest, FAMILY};
use super::version::{choose, install_steps};
use atoll_fabric::{ReplyTo, Words};
use atoll_storage::layout::{H_KEY, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN, VERSION_ABSENT};
use atoll_storage::TableId;
use atoll_txn::handler::{Local, Participant, CONSISTENT_READ_ATTEMPTS_MAX};
use atoll_txn::msg::{FamilyId, Reply, Tuple, WriteBack};

/// MVCC's participant side of one node (stateless).
#[derive(Default)]
pub struct MvccParticipant;

/// The read at `ctts` on the participant's CPU, with the same steps as a one-sided reader:
/// a consistent snapshot of the record, Cond R2 (no writer ordered before the reader holds
/// it), Cond R1 (a kept version older than `ctts`), then `RTS` raised to `ctts` by CAS
/// unless a later writer froze it. `Err(true)` is a slot overflow, `Err(false)` a conflict
/// (also when the slot no longer holds `key` live).
fn read(local: &Local, t: TableId, loc: u32, key: u64, ctts: u64) -> Result<Tuple, bool> {
    let layout = local.store().catalog.layout(t);
    let (r, off) = local.record(t, loc);
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
        let Some(c) = choose(layout, &a, ctts) else {
            return Err(true);
        };
        let rts = r.load(off + H_RTS as usize);
        let ok = if rts & !RTS_FROZEN >= ctts {
            true
        } else if rts & RTS_FROZEN != 0 {
            // A writer holds it: one ordered before us is a conflict; for one after us,
            // read again once it is done (a frozen RTS cannot be raised safely: the same
            // frozen value can come back under another writer).
            let holder = r.load(off + H_LOCK as usize);
            if holder != 0 && holder < ctts {
                return Err(false);
            }
            false
        } else {
            // A write-back may have put back the RTS seen (ABA): the raise counts only if
            // no version was installed since the snapshot.
            r.cas(off + H_RTS as usize, rts, ctts) == rts
                && r.load(off + H_VERSION as usize) == a[H_VERSION as usize]
                && r.load(off + H_WTS as usize) == a[H_WTS as usize]
        };
        if ok {
            let data =
                Words::from_slice(&a[c.payload_at..c.payload_at + layout.payload_words as usize]);
            return Ok(Tuple {
                loc: atoll_txn::msg::Loc(loc),
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

/// A write-back that first copies each record's current version into its oldest slot and
/// marks the current one being written (the record is locked by `wb.ts`, so stable): the
/// same steps, in the same order, as the one-sided install (`version::install_steps`).
fn install(local: &Local, wb: &WriteBack) -> Reply {
    if !local.write_back_valid(wb) {
        return Reply::BadRequest;
    }
    for (t, loc, payload) in &wb.items {
        let layout = local.store().catalog.layout(*t);
        if layout.version_slots > 1 {
            let (r, off) = local.record(*t, *loc);
            let mut rec = vec![0u64; layout.record_words as usize];
            r.read_into(off, &mut rec);
            for (at, words) in install_steps(layout, &rec) {
                r.write_from(off + at as usize, &words);
            }
        }
        local.write_back_one(wb, *t, *loc, payload);
    }
    Reply::Ok
}

impl Participant for MvccParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &Local, _from: ReplyTo, body: &[u8]) -> Option<Reply> {
        Some(match MvccRequest::decode(body) {
            Ok(MvccRequest::Read { ctts, items }) => {
                if ctts == 0 || items.iter().any(|i| !local.valid_table(i.table)) {
                    return Some(Reply::BadRequest);
                }
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    let Some(loc) = local.loc_of(it) else {
                        return Some(Reply::NotFound { index: i as u32 });
                    };
                    match read(local, it.table, loc, it.key, ctts) {
                        Ok(t) => out.push(Some(t)),
                        Err(overflow) => {
                            let refused = MvccReply::Refused {
                                index: i as u32,
                                overflow,
                            };
                            return Some(refused.into_reply());
                        }
                    }
                }
                Reply::Tuples(out)
            }
            Ok(MvccRequest::Install(wb)) => install(local, &wb),
            Err(_) => Reply::BadRequest,
        })
    }
}
