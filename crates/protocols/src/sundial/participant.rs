//! SUNDIAL's participant: renews leases with local atomics, the same steps as a one-sided
//! renewal.

use super::msg::{SundialRequest, FAMILY};
use atoll_fabric::{Region, ReplyTo};
use atoll_storage::layout::{H_RTS, H_WTS, RTS_FROZEN};
use atoll_txn::handler::{Local, Participant, FREEZE_ATTEMPTS_MAX};
use atoll_txn::msg::{FamilyId, Reply};

/// SUNDIAL's participant side of one node (stateless).
#[derive(Default)]
pub struct SundialParticipant;

/// Lease renewal, atomic by CAS on `RTS`: fails if `WTS` moved on (a later write committed)
/// or a writer froze `RTS`; succeeds if the lease already reaches.
fn renew(r: &Region, off: usize, wts: u64, commit_ts: u64) -> bool {
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

impl Participant for SundialParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &Local, _from: ReplyTo, body: &[u8]) -> Option<Reply> {
        let Ok(SundialRequest::Renew { commit_ts, items }) = SundialRequest::decode(body) else {
            return Some(Reply::BadRequest);
        };
        for (i, (t, loc, wts)) in items.iter().enumerate() {
            if !local.valid_loc(*t, *loc) {
                return Some(Reply::BadRequest);
            }
            let (r, off) = local.record(*t, *loc);
            if !renew(r, off, *wts, commit_ts) {
                return Some(Reply::Invalid { index: i as u32 });
            }
        }
        Some(Reply::Ok)
    }
}
