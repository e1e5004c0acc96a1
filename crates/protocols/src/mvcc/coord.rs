//! MVCC's coordinator side: each record's state as the attempt knows it, the snapshot read,
//! the writer's lock with Cond W1, and the install that keeps the old version.

use super::msg::{MvccReply, MvccRequest};
use super::version::{choose, install_steps};
use atoll_fabric::Words;
use atoll_storage::layout::{
    TableLayout, HEADER_WORDS, H_LOCK, H_RTS, H_VERSION, H_WTS, RTS_FROZEN,
};
use atoll_txn::msg::{Reply, ReplyView};
use atoll_txn::stages::{self, apply_tuple, check_tuple, locate};
use atoll_txn::stages::{Installer, LockOpts};
use atoll_txn::{Abort, Entry, EntryState, Idxs, Primitive, Stage, Timestamp, TxnCore};

/// What an attempt knows of a record: the write and read timestamps of the version it read
/// or locked (`rts` without `RTS_FROZEN`), and the whole record (all kept versions) as read
/// when it was locked one-sided, which the one-sided install copies from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub wts: u64,
    pub rts: u64,
    pub before: Vec<u64>,
}

impl EntryState for Versions {
    fn saw(&mut self, wts: u64, rts: u64, record: Option<&[u64]>) {
        self.wts = wts;
        self.rts = rts;
        if let Some(r) = record {
            self.before.clear();
            self.before.extend_from_slice(r);
        }
    }

    fn froze(&mut self, rts: u64) {
        self.rts = rts;
    }

    fn installed(&mut self, ts: u64) {
        self.wts = ts;
        self.rts = ts;
    }

    fn reset(&mut self) {
        let mut before = std::mem::take(&mut self.before);
        before.clear();
        *self = Versions {
            before,
            ..Versions::default()
        };
    }
}

/// Snapshot reads before an MVCC reader gives up with `Conflict` (each retry means the
/// record changed under its two READs or its `RTS` CAS).
const READ_ATTEMPTS_MAX: u32 = 16;
/// Pause before an MVCC reader reads a record again (a writer holds it, or it changed).
const RETRY_NS: u64 = 1_000;
/// RTS CAS rounds of one snapshot before a reader takes a new snapshot (each lost to
/// another reader raising the same record).
const RAISE_ROUNDS_MAX: u32 = 4;

/// MVCC reads at the transaction's timestamp (RCC §4.4): for each record, the newest kept
/// version older than the timestamp, after raising the record's `RTS` to it. One-sided:
/// two READs of the whole record in one doorbell (the double read; they must agree but for
/// `RTS`), Cond R2 and R1 checked locally, then CAS on `RTS` (retried from the value found
/// while only other readers race, from the READs if a version was installed or a writer
/// froze it: issue #9, where re-reading after every lost race cost MVCC one-sided at
/// hot_prob 0.9 half its throughput). RPC: the participant does the same. Aborts with `SlotOverflow` when the version
/// needed was overwritten, `Conflict` when a writer ordered before the reader holds it.
pub async fn read(
    tx: &mut TxnCore<'_, Versions>,
    idxs: &[usize],
    prim: Primitive,
) -> Result<(), Abort> {
    if idxs.is_empty() {
        return Ok(());
    }
    let ts = tx.ts;
    // Compared with header words (versions' `WTS`, `RTS`) and sent as a word.
    let ctts = ts.word();
    if prim == Primitive::Rpc {
        return read_rpc(tx, idxs, ctts).await;
    }
    locate(tx, idxs).await?;
    let ep = tx.c.ep.clone();
    let mut pending: Idxs = idxs.iter().copied().collect();
    for _ in 0..READ_ATTEMPTS_MAX {
        let mut d = ep.doorbell();
        for &i in &pending {
            let e = &tx.entries[i];
            let words = tx.c.catalog.layout(e.table).record_words;
            let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
            d.read(ptr, words);
            d.read(ptr, words);
        }
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        let mut retry: Idxs = Idxs::new();
        // Entries whose RTS must be raised: (entry, RTS seen, READ index, payload offset).
        let mut raise: smallvec::SmallVec<[(usize, u64, usize, usize); 8]> =
            smallvec::SmallVec::new();
        for (j, &i) in pending.iter().enumerate() {
            let (a, b) = (res.read(2 * j), res.read(2 * j + 1));
            check_tuple(tx, i, a)?;
            if a.iter()
                .zip(b.iter())
                .enumerate()
                .any(|(k, (x, y))| k != H_RTS as usize && x != y)
            {
                retry.push(i);
                continue;
            }
            // Cond R2: a writer ordered before the reader holds the record.
            let lock = a[H_LOCK as usize];
            if Timestamp::from_word(lock).is_some_and(|l| l < ts) {
                return Err(Abort::Conflict);
            }
            let layout = *tx.c.catalog.layout(tx.entries[i].table);
            let c = choose(&layout, a, ctts).ok_or(Abort::SlotOverflow)?;
            let rts = b[H_RTS as usize];
            tx.c.observe_ts(c.wts.max(rts));
            let payload = &a[c.payload_at..c.payload_at + layout.payload_words as usize];
            let e = &mut tx.entries[i];
            e.version = c.version;
            e.state.wts = c.wts;
            e.state.rts = rts & !RTS_FROZEN;
            if rts & !RTS_FROZEN >= ctts {
                e.fill(c.version, payload);
            } else if rts & RTS_FROZEN != 0 {
                // A writer holds the record (ordered after us, or R2 would have failed, or
                // the snapshot predates its lock). A frozen RTS cannot be raised safely:
                // the same frozen value can come back under another writer (ABA), so
                // wait for this one to finish and read again.
                retry.push(i);
            } else {
                raise.push((i, rts, 2 * j, c.payload_at));
            }
        }
        // CAS on RTS, then a READ of the header that runs after it at the target: a
        // successful CAS only counts if no version was installed since the snapshot (a
        // writer's install can put back the very RTS the snapshot saw: ABA). A CAS that
        // lost to another reader needs no new snapshot while no version was installed and
        // no writer froze `RTS`: at or above `ctts` already it serves as this reader's
        // raise, below it the CAS is tried again from the value found.
        for _ in 0..RAISE_ROUNDS_MAX {
            if raise.is_empty() {
                break;
            }
            let mut d = ep.doorbell();
            for &(i, rts, _, _) in &raise {
                let e = &tx.entries[i];
                let ptr = tx.c.catalog.record_ptr(e.table, e.node, e.slot());
                d.cas(ptr.add(H_RTS), rts, ctts);
                d.read(ptr, HEADER_WORDS);
            }
            let raised = d.submit().await.map_err(|e| tx.op_failed(e))?;
            let mut again: smallvec::SmallVec<[(usize, u64, usize, usize); 8]> =
                smallvec::SmallVec::new();
            for (j, &(i, rts, read, at)) in raise.iter().enumerate() {
                let (before, after) = (res.read(read), raised.read(2 * j + 1));
                let unchanged = before[H_VERSION as usize] == after[H_VERSION as usize]
                    && before[H_WTS as usize] == after[H_WTS as usize];
                let found = raised.cas(2 * j);
                let raised_to = if found == rts {
                    Some(ctts)
                } else if found & RTS_FROZEN == 0 && found >= ctts {
                    Some(found)
                } else {
                    None
                };
                match raised_to {
                    Some(r) if unchanged => {
                        let words = tx.c.catalog.layout(tx.entries[i].table).payload_words as usize;
                        let e = &mut tx.entries[i];
                        e.fill(e.version, &res.read(read)[at..at + words]);
                        e.state.rts = r;
                    }
                    None if unchanged && found & RTS_FROZEN == 0 => {
                        again.push((i, found, read, at));
                    }
                    // RTS moved (another reader, or a writer came and went), or a version
                    // was installed: read again. A raise that did land only keeps writers
                    // below this reader out, which is safe.
                    _ => retry.push(i),
                }
            }
            raise = again;
        }
        retry.extend(raise.iter().map(|&(i, ..)| i));
        if retry.is_empty() {
            return Ok(());
        }
        pending = retry;
        ep.sleep(RETRY_NS).await;
    }
    Err(Abort::Conflict)
}

/// [`read`] served by the records' nodes: each raises `RTS` and returns the version the
/// reader sees, or refuses (the version was overwritten, or an earlier writer holds it).
async fn read_rpc(tx: &mut TxnCore<'_, Versions>, idxs: &[usize], ctts: u64) -> Result<(), Abort> {
    let (nodes, res) =
        stages::rpc_per_node(tx, idxs, |items| MvccRequest::read_bytes(ctts, items)).await?;
    for (j, &n) in nodes.iter().enumerate() {
        match stages::view(res.rpc(j)) {
            ReplyView::Tuples(tuples) => {
                let mine = stages::on_node(tx, idxs, n);
                for (i, t) in stages::tuples_for(tuples, &mine, n) {
                    let t = t.expect("an MVCC read returns every tuple");
                    tx.c.observe_ts(t.head.wts.max(t.head.rts));
                    apply_tuple(tx, i, &t);
                }
            }
            ReplyView::Other(Reply::Family { body, .. }) => match MvccReply::decode(&body) {
                Ok(MvccReply::Refused { overflow: true, .. }) => return Err(Abort::SlotOverflow),
                Ok(MvccReply::Refused {
                    overflow: false, ..
                }) => return Err(Abort::Conflict),
                Err(e) => panic!("mvcc read: undecodable reply from node {}: {e}", n.0),
            },
            ReplyView::Other(Reply::NotFound { .. }) => return Err(Abort::NotFound),
            ReplyView::Other(r) => {
                panic!("mvcc read: unexpected reply {r:?} from node {}", n.0)
            }
        }
    }
    Ok(())
}

/// Locks `idxs` with their whole records and checks Cond W1 against the frozen `RTS`.
pub async fn lock_for_write(tx: &mut TxnCore<'_, Versions>, idxs: &[usize]) -> Result<(), Abort> {
    let opts = LockOpts {
        primitive: tx.c.plan().get(Stage::Lock),
        with_data: true,
        freeze_rts: true,
        peek_on_retry: false,
    };
    let t0 = tx.now_ns();
    let mut r = stages::lock(tx, idxs, opts).await;
    let ctts = tx.ts.word();
    for &i in idxs {
        let e = &tx.entries[i];
        if e.locked {
            let seen = e.state.wts.max(e.state.rts);
            tx.c.observe_ts(seen);
            // `RTS == ctts` is this transaction's own read (timestamps are unique): a
            // read-then-write of one record may go on.
            let v = &tx.entries[i].state;
            if r.is_ok() && !(ctts > v.wts && ctts >= v.rts) {
                r = Err(Abort::ValidationFailed);
            }
        }
    }
    tx.charge(Stage::Lock, t0);
    r
}

/// One-sided install steps of entry `e`: keep its current version (as read at lock time)
/// in the oldest slot first.
fn steps(e: &Entry<Versions>, layout: &TableLayout, out: &mut Vec<(u32, Words)>) {
    if layout.version_slots > 1 {
        assert!(
            !e.state.before.is_empty(),
            "one-sided MVCC write-back without the record read at lock time"
        );
        out.extend(install_steps(layout, &e.state.before));
    }
}

/// MVCC's write-back: the new version goes in place, the current one into the oldest slot.
pub const INSTALLER: Installer<Versions> = Installer {
    steps,
    request: super::msg::install_request,
};
