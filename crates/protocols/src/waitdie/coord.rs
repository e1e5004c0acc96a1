//! WAITDIE's coordinator stage: the wait-or-die lock, one-sided or by the participant's
//! waiting list.

use super::msg::WaitDieRequest;
use atoll_fabric::Words;
use atoll_storage::layout::{HEADER_WORDS, H_AUX, H_LOCK, H_VERSION};
use atoll_txn::stages::{check_tuple, locate, lock_by_rpc};
use atoll_txn::{Abort, Idxs, Primitive, Timestamp, TxnCore};

/// Attempts of a one-sided WAITDIE lock before the waiting transaction dies anyway.
const WAIT_RETRIES_MAX: u32 = 100_000;
/// Pause between one-sided lock attempts of a waiting transaction.
const WAIT_BACKOFF_NS: u64 = 1_000;

/// How [`lock_wait_die`] locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WaitDieOpts {
    pub primitive: Primitive,
    /// Also fetch each record's payload.
    pub with_data: bool,
    /// The starvation fix: a waiter raises the record's AUX counter by this, its node's
    /// unit ([`super::config::CounterFields::unit`]); 0 without the fix.
    pub counter_unit: u64,
}

/// WAITDIE locking (RCC §4.3): a transaction older than a lock's holder waits, a younger one
/// dies (`LockBusy`). One-sided: CAS + READ in one doorbell, the failed CAS returns the
/// holder's timestamp, and a waiter retries after a pause. RPC: the participant holds the
/// request on its waiting list. With `counter` (the starvation fix RCC sketches), a waiter
/// raises the record's AUX word by FETCH_ADD of its node's unit; lockers that see it raised
/// die, and the waiter lowers it once it holds the lock (or dies).
pub async fn lock_wait_die(
    tx: &mut TxnCore<'_>,
    idxs: &[usize],
    opts: WaitDieOpts,
) -> Result<(), Abort> {
    if idxs.is_empty() {
        return Ok(());
    }
    let WaitDieOpts {
        primitive: prim,
        with_data: want_data,
        counter_unit,
    } = opts;
    let counter = counter_unit != 0;
    let ts = tx.ts;
    if prim == Primitive::Rpc {
        let build = |items: &[atoll_txn::msg::Item]| {
            WaitDieRequest::lock_bytes(ts.word(), want_data, counter_unit, items)
        };
        return lock_by_rpc(tx, idxs, build, false).await;
    }
    locate(tx, idxs).await?;
    let ep = tx.c.ep.clone();
    let mut pending: Idxs = idxs.iter().copied().collect();
    // Entries whose AUX counter this transaction raised while waiting.
    let mut raised: Idxs = Idxs::new();
    let mut outcome = Ok(());
    for attempt in 0..WAIT_RETRIES_MAX {
        let res = match lock_round(tx, &pending, ts.word(), want_data).await {
            Ok(res) => res,
            Err((a, res)) => {
                outcome = Err(a);
                res
            }
        };
        let mut still: Idxs = Idxs::new();
        let mut fixes = ep.doorbell();
        // This round's raises: (op of `fixes`, entry).
        let mut raises: smallvec::SmallVec<[(usize, usize); 16]> = smallvec::SmallVec::new();
        for (j, &i) in pending.iter().enumerate() {
            if res.failed(2 * j) || res.failed(2 * j + 1) {
                continue;
            }
            let holder = res.cas(2 * j);
            let w = res.read(2 * j + 1);
            let ptr = {
                let e = &tx.entries[i];
                tx.c.catalog.record_ptr(e.table, e.node, e.slot())
            };
            let mine = raised.contains(&i);
            if holder == 0 {
                if let Err(a) = check_tuple(tx, i, w) {
                    fixes.write(ptr.add(H_LOCK), Words::from_slice(&[0]));
                    outcome = outcome.and(Err(a));
                    continue;
                }
                if counter && !mine && w[H_AUX as usize] > 0 {
                    // An older transaction waits for this record: younger ones give way.
                    fixes.write(ptr.add(H_LOCK), Words::from_slice(&[0]));
                    outcome = outcome.and(Err(Abort::LockBusy));
                    continue;
                }
                if mine {
                    fixes.fetch_add(ptr.add(H_AUX), counter_unit.wrapping_neg());
                    raised.retain(|x| *x != i);
                }
                let e = &mut tx.entries[i];
                e.locked = true;
                e.version = w[H_VERSION as usize];
                if want_data {
                    e.fill(e.version, &w[HEADER_WORDS as usize..]);
                }
            } else if Timestamp::from_word(holder).is_some_and(|h| ts < h)
                && attempt + 1 < WAIT_RETRIES_MAX
            {
                if counter && !mine {
                    raises.push((fixes.len(), i));
                    fixes.fetch_add(ptr.add(H_AUX), counter_unit);
                    raised.push(i);
                }
                still.push(i);
            } else {
                outcome = outcome.and(Err(Abort::LockBusy));
            }
        }
        if outcome.is_err() {
            // Dying: lower every counter still raised.
            lower_raised(tx, &mut fixes, &raised, counter_unit);
            // Dying anyway: a failed node took its counters with it.
            let _ = fixes.submit().await;
            return outcome;
        }
        if let Err((e, done)) = fixes.submit_partial().await {
            raised.retain(|i| !raises.iter().any(|&(op, j)| j == *i && done.failed(op)));
            return Err(die_lowering(tx, &raised, counter_unit, e).await);
        }
        if still.is_empty() {
            return Ok(());
        }
        pending = still;
        ep.sleep(WAIT_BACKOFF_NS).await;
    }
    unreachable!("the last attempt dies instead of waiting")
}

/// Adds to `bell` the lowering of every counter of `raised` (entries whose AUX word this
/// transaction raised by `counter_unit`).
fn lower_raised(
    tx: &TxnCore<'_>,
    bell: &mut atoll_fabric::Doorbell<'_>,
    raised: &[usize],
    counter_unit: u64,
) {
    for &i in raised {
        let e = &tx.entries[i];
        bell.fetch_add(
            tx.c.catalog
                .record_ptr(e.table, e.node, e.slot())
                .add(H_AUX),
            counter_unit.wrapping_neg(),
        );
    }
}

/// A node failed under a doorbell of the lock: the attempt dies, and what it raised that
/// landed (`raised`, at live nodes) goes back down; left raised, every other locker of
/// those records would die for good.
async fn die_lowering(
    tx: &mut TxnCore<'_>,
    raised: &[usize],
    counter_unit: u64,
    e: atoll_fabric::OpError,
) -> Abort {
    let ep = tx.c.ep.clone();
    let mut lower = ep.doorbell();
    lower_raised(tx, &mut lower, raised, counter_unit);
    // A node failing now took its counters with it.
    let _ = lower.submit().await;
    tx.op_failed(e)
}

/// One round of a one-sided wait-die lock: a CAS and a READ of each of `pending`'s records
/// in one doorbell. A node that failed dooms the attempt, but what the others granted is in
/// the completions (the caller marks it taken, for its release, and lowers what it raised).
async fn lock_round(
    tx: &mut TxnCore<'_>,
    pending: &[usize],
    ts: u64,
    want_data: bool,
) -> Result<atoll_fabric::Completions, (Abort, atoll_fabric::Completions)> {
    let mut d = tx.c.ep.doorbell();
    for &i in pending {
        let e = &tx.entries[i];
        let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
        d.cas(ptr.add(H_LOCK), 0, ts);
        let words = if want_data {
            tx.c.catalog.layout(e.table).tuple_words
        } else {
            HEADER_WORDS
        };
        d.read(ptr, words);
    }
    match d.submit_partial().await {
        Ok(res) => Ok(res),
        Err((e, res)) => Err((tx.op_failed(e), res)),
    }
}
