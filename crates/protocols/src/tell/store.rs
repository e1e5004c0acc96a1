//! A processing node's side of Tell's storage interface on one record slot: `get` and
//! `put_if` over one-sided verbs (Atoll's option beside Tell's RPC store, whose requests
//! the storage node serves in [`super::participant`] with the same words in the same
//! order).
//!
//! - `put_if`: a CAS of `LOCK` from `[0 | seq]` to `[1 | seq]`, then, in one doorbell, a
//!   WRITE of the slot's other words and a WRITE of `[0 | seq + 1]` (ops to one node run in
//!   order, so the unlock lands after the words): two round trips, and a put since the
//!   read fails the CAS even with the same words.
//! - `get`: a READ of the whole slot and a READ of `LOCK` after it, in one doorbell: the
//!   words are a whole put's iff `LOCK` was unlocked and the same in both (a put in
//!   between changes it, and sequence numbers never repeat); otherwise it reads again, at
//!   most [`super::participant::GET_ATTEMPTS_MAX`] times.

use super::participant::GET_ATTEMPTS_MAX;
use atoll_fabric::{Endpoint, OpError, RemotePtr, Words};
use atoll_storage::layout::{CID_LOCKED, H_LOCK};

/// The slot's words at `slot` (`len` words), or `None` if puts held it at every attempt.
pub async fn get(ep: &Endpoint, slot: RemotePtr, len: u32) -> Result<Option<Vec<u64>>, OpError> {
    let lock = slot.add(H_LOCK);
    for _ in 0..GET_ATTEMPTS_MAX {
        let mut d = ep.doorbell_for(2);
        let whole = d.read(slot, len);
        let again = d.read(lock, 1);
        let res = d.submit().await?;
        let words = res.read(whole);
        let before = words[H_LOCK as usize];
        if before & CID_LOCKED == 0 && res.read(again)[0] == before {
            return Ok(Some(words.to_vec()));
        }
    }
    Ok(None)
}

/// Puts `words` (the whole slot; its `LOCK` word is ignored) at `slot` iff its sequence
/// number is still `seq`; whether it did.
pub async fn put_if(
    ep: &Endpoint,
    slot: RemotePtr,
    seq: u64,
    words: &[u64],
) -> Result<bool, OpError> {
    assert!(
        seq & CID_LOCKED == 0 && words.len() > 1,
        "tell: a put of {} words at sequence number {seq:#x}",
        words.len()
    );
    let lock = slot.add(H_LOCK);
    let mut d = ep.doorbell_for(1);
    let cas = d.cas(lock, seq, seq | CID_LOCKED);
    if d.submit().await?.cas(cas) != seq {
        return Ok(false);
    }
    let mut d = ep.doorbell_for(2);
    d.write(
        lock.add(1),
        Words::from_slice(&words[H_LOCK as usize + 1..]),
    );
    d.write(lock, Words::from_slice(&[seq + 1]));
    d.submit().await?;
    Ok(true)
}
