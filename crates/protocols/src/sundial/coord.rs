//! SUNDIAL's coordinator side: each record's lease as the attempt knows it, the atomic read
//! of records it will not write, the commit timestamp, and lease renewal.

use super::msg::SundialRequest;
use atoll_storage::layout::{HEADER_WORDS, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN};
use atoll_txn::stages::{check_by_rpc, check_tuple, locate, read};
use atoll_txn::{Abort, Access, EntryState, Idxs, Primitive, Timestamp, TxnCore};

/// A record's lease `[wts, rts]` as this attempt last saw or set it (`rts` without
/// `RTS_FROZEN`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lease {
    pub wts: u64,
    pub rts: u64,
}

impl EntryState for Lease {
    fn saw(&mut self, wts: u64, rts: u64, _record: Option<&[u64]>) {
        self.wts = wts;
        self.rts = rts;
    }

    fn froze(&mut self, rts: u64) {
        self.rts = rts;
    }

    fn installed(&mut self, ts: u64) {
        self.wts = ts;
        self.rts = ts;
    }
}

/// SUNDIAL's atomic read of records it will not write (RCC §4.5): one-sided, two READs of
/// each tuple in one doorbell, which must agree on everything but `RTS`; RPC, the
/// participant's consistent read. A record a writer holds (locked, `RTS` frozen) aborts
/// with `Conflict`: its payload may be half written.
pub async fn read_atomic(
    tx: &mut TxnCore<'_, Lease>,
    idxs: &[usize],
    prim: Primitive,
) -> Result<(), Abort> {
    if idxs.is_empty() {
        return Ok(());
    }
    if prim == Primitive::Rpc {
        // The participant's read is consistent, and a frozen RTS implies a held lock,
        // which `read` turns into `Conflict`.
        return read(tx, idxs, prim).await;
    }
    let ts = tx.ts;
    locate(tx, idxs).await?;
    let mut d = tx.c.ep.doorbell();
    for &i in idxs {
        let e = &tx.entries[i];
        let words = tx.c.catalog.layout(e.table).tuple_words;
        let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
        d.read(ptr, words);
        d.read(ptr, words);
    }
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    for (j, &i) in idxs.iter().enumerate() {
        let (a, b) = (res.read(2 * j), res.read(2 * j + 1));
        check_tuple(tx, i, a)?;
        let same = a
            .iter()
            .zip(b.iter())
            .enumerate()
            .all(|(k, (x, y))| k == H_RTS as usize || x == y);
        let lock = a[H_LOCK as usize];
        let frozen_by_other = b[H_RTS as usize] & RTS_FROZEN != 0 && lock != ts.word();
        if !same || ts.held_by_other(lock) || frozen_by_other {
            return Err(Abort::Conflict);
        }
        let e = &mut tx.entries[i];
        e.version = b[H_VERSION as usize];
        e.state = Lease {
            wts: b[H_WTS as usize],
            rts: b[H_RTS as usize] & !RTS_FROZEN,
        };
        e.fill(e.version, &b[HEADER_WORDS as usize..]);
    }
    Ok(())
}

/// The commit timestamp: after every version read (`WTS`) and every lease of a record
/// written (`RTS` + 1).
pub fn commit_ts(tx: &TxnCore<'_, Lease>) -> Timestamp {
    let w = tx
        .entries
        .iter()
        .filter(|e| e.access != Access::Insert)
        .map(|e| {
            if e.is_write() {
                e.state.rts + 1
            } else {
                e.state.wts
            }
        })
        .max()
        .unwrap_or(0)
        .max(1);
    Timestamp::from_word(w).expect("at least 1")
}

/// Rounds of a one-sided lease renewal before it gives up (each failed CAS saw another
/// renewal raise `RTS`).
const RENEW_ROUNDS_MAX: u32 = 64;

/// SUNDIAL's lease renewal (RCC §4.5): make each record's lease reach `commit_ts`. One-sided:
/// CAS(`RTS` read → `commit_ts`); if it fails, READ the header: abort if `WTS` moved on or
/// a writer froze `RTS`, else retry with the new value. RPC: the participant does the same
/// with local atomics. Fails with `ValidationFailed`.
pub async fn renew(
    tx: &mut TxnCore<'_, Lease>,
    idxs: &[usize],
    prim: Primitive,
    commit_ts: Timestamp,
) -> Result<(), Abort> {
    // Leases are header words: compare and store the timestamp's word.
    let commit_ts = commit_ts.word();
    let todo: Idxs = idxs
        .iter()
        .copied()
        .filter(|&i| tx.entries[i].state.rts < commit_ts)
        .collect();
    if todo.is_empty() {
        return Ok(());
    }
    if prim == Primitive::Rpc {
        let build = |items| SundialRequest::Renew { commit_ts, items }.to_bytes();
        check_by_rpc(tx, &todo, |e| (e.table, e.slot(), e.state.wts), build).await?;
        for &i in &todo {
            tx.entries[i].state.rts = commit_ts;
        }
        return Ok(());
    }
    let ep = tx.c.ep.clone();
    let mut pending: smallvec::SmallVec<[(usize, u64); 8]> =
        todo.iter().map(|&i| (i, tx.entries[i].state.rts)).collect();
    for _ in 0..RENEW_ROUNDS_MAX {
        let mut d = ep.doorbell();
        for &(i, seen) in &pending {
            let e = &tx.entries[i];
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            d.cas(ptr.add(H_RTS), seen, commit_ts);
            d.read(ptr, HEADER_WORDS);
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        let mut again = smallvec::SmallVec::new();
        for (j, &(i, seen)) in pending.iter().enumerate() {
            let found = res.cas(2 * j);
            // The READ ran after the CAS: it shows why the CAS failed, and whether a write
            // that set `RTS` back to the value seen came in between (ABA).
            let h = res.read(2 * j + 1);
            let lease = &mut tx.entries[i].state;
            if found == seen && h[H_WTS as usize] == lease.wts {
                lease.rts = commit_ts;
                continue;
            }
            if h[H_WTS as usize] != lease.wts || found & RTS_FROZEN != 0 {
                return Err(Abort::ValidationFailed);
            }
            if found >= commit_ts {
                lease.rts = found;
            } else {
                again.push((i, found));
            }
        }
        if again.is_empty() {
            return Ok(());
        }
        pending = again;
    }
    Err(Abort::ValidationFailed)
}
