//! WAITDIE's participant: serves its lock requests, holding an older requester on a waiting
//! list that every event-loop turn of the node's workers re-examines (it never busy-waits).

use super::msg::{WaitDieRequest, FAMILY};
use atoll_fabric::{Region, ReplyTo};
use atoll_storage::layout::{H_AUX, H_LOCK};
use atoll_txn::handler::{Local, Participant};
use atoll_txn::msg::{FamilyId, Item, Reply};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Event-loop turns a held request may wait before it dies anyway (a bound, not a policy:
/// wait-die cannot deadlock, but a holder can be slow).
const WAIT_POLLS_MAX: u32 = 1_000_000;

/// WAITDIE's participant side of one node.
#[derive(Default)]
pub struct WaitDieParticipant {
    /// Requests held until their locks free up, shared by the node's workers.
    waiters: parking_lot::Mutex<Vec<Waiter>>,
    /// `waiters.len()`, read without the lock on every event-loop turn.
    waiting: AtomicUsize,
}

/// A lock request held until the younger holders release.
struct Waiter {
    from: ReplyTo,
    ts: u64,
    want_data: bool,
    /// What it raises a record's counter by (its node's field), 0 without the fix.
    counter_unit: u64,
    items: Vec<Item>,
    locs: Vec<u32>,
    /// Items `[0, next)` are locked by this request.
    next: usize,
    /// The item whose AUX counter this waiter raised, if any.
    raised: Option<usize>,
    polls: u32,
}

fn at<'l>(local: &'l Local, it: &Item, loc: u32) -> (&'l Region, usize) {
    local.record(it.table, loc)
}

/// Unlocks what a request holds and lowers the counter it raised.
fn undo_waiter(local: &Local, w: &mut Waiter) {
    unlock_waiter(local, w);
    if let Some(j) = w.raised.take() {
        let (r, off) = at(local, &w.items[j], w.locs[j]);
        r.fetch_add(off + H_AUX as usize, w.counter_unit.wrapping_neg());
    }
}

/// Unlocks what a request holds, leaving the counter it raised (a dead node's raises are
/// taken back by its recovery, its whole field at once).
fn unlock_waiter(local: &Local, w: &mut Waiter) {
    for j in 0..w.next {
        let (r, off) = at(local, &w.items[j], w.locs[j]);
        r.cas(off + H_LOCK as usize, w.ts, 0);
    }
    w.next = 0;
}

/// Locks as many items as possible: `Some(reply)` when done or dead, `None` to wait.
fn advance(local: &Local, w: &mut Waiter) -> Option<Reply> {
    while w.next < w.items.len() {
        let i = w.next;
        let it = w.items[i];
        if w.locs.len() <= i {
            match local.loc_of(&it) {
                Some(loc) => w.locs.push(loc),
                None => {
                    undo_waiter(local, w);
                    return Some(Reply::NotFound { index: i as u32 });
                }
            }
        }
        let (r, off) = at(local, &it, w.locs[i]);
        let someone_old_waits =
            w.counter_unit != 0 && w.raised != Some(i) && r.load(off + H_AUX as usize) > 0;
        let holder = if someone_old_waits {
            u64::MAX
        } else {
            r.cas(off + H_LOCK as usize, 0, w.ts)
        };
        if holder == 0 && !local.store().live_key_at(it.table, w.locs[i], it.key) {
            // Deleted, or its slot went to another key, while this request waited.
            Local::unlock(r, off, w.ts);
            undo_waiter(local, w);
            return Some(Reply::NotFound { index: i as u32 });
        }
        if holder == 0 {
            if w.raised == Some(i) {
                r.fetch_add(off + H_AUX as usize, w.counter_unit.wrapping_neg());
                w.raised = None;
            }
            w.next += 1;
            continue;
        }
        if w.ts < holder && !someone_old_waits {
            // Older than the holder: wait.
            if w.counter_unit != 0 && w.raised.is_none() {
                r.fetch_add(off + H_AUX as usize, w.counter_unit);
                w.raised = Some(i);
            }
            return None;
        }
        undo_waiter(local, w);
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
                local.consistent_read(it.table, loc)
            } else {
                local.header_tuple(it.table, loc, w.ts)
            })
        })
        .collect();
    Some(Reply::Tuples(tuples))
}

impl Participant for WaitDieParticipant {
    fn family(&self) -> FamilyId {
        FAMILY
    }

    fn serve(&self, local: &Local, from: ReplyTo, body: &[u8]) -> Option<Reply> {
        let Ok(WaitDieRequest::Lock {
            ts,
            want_data,
            counter_unit,
            items,
        }) = WaitDieRequest::decode(body)
        else {
            return Some(Reply::BadRequest);
        };
        // A unit is one bit, its node's field's lowest: any other would add to two fields.
        if ts == 0
            || counter_unit.count_ones() > 1
            || items.iter().any(|i| !local.valid_table(i.table))
        {
            return Some(Reply::BadRequest);
        }
        let mut w = Waiter {
            from,
            ts,
            want_data,
            counter_unit,
            locs: Vec::with_capacity(items.len()),
            items,
            next: 0,
            raised: None,
            polls: 0,
        };
        let r = advance(local, &mut w);
        if r.is_none() {
            let mut ws = self.waiters.lock();
            ws.push(w);
            self.waiting.store(ws.len(), Ordering::Release);
        }
        r
    }

    fn poll_deferred(&self, local: &Local, out: &mut Vec<(ReplyTo, Reply)>) -> bool {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return false;
        }
        let mut ws = self.waiters.lock();
        let mut i = 0;
        // Bounded by the held requests; each is advanced once per turn.
        while i < ws.len() {
            if local.owner_dead(ws[i].ts) {
                // Its coordinator's node died: what it took goes back, unanswered (the
                // recovery released the locks it held before; this one is not granted),
                // but not its raise, which the recovery takes back with its node's others.
                let mut w = ws.swap_remove(i);
                unlock_waiter(local, &mut w);
                continue;
            }
            ws[i].polls += 1;
            let outcome = if ws[i].polls > WAIT_POLLS_MAX {
                let w = &mut ws[i];
                undo_waiter(local, w);
                Some(Reply::LockFailed {
                    index: w.next as u32,
                    holder: 0,
                })
            } else {
                advance(local, &mut ws[i])
            };
            match outcome {
                Some(r) => {
                    let w = ws.swap_remove(i);
                    out.push((w.from, r));
                }
                None => i += 1,
            }
        }
        self.waiting.store(ws.len(), Ordering::Release);
        !ws.is_empty()
    }
}
