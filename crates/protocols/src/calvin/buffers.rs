//! CALVIN's one-sided buffers (RCC §4.6's CRB, and the `epoch_status` word): one region on
//! every node that the other nodes WRITE into and the node's own lanes poll with local
//! READs. Registered only when the plan runs `dispatch` or `barrier` one-sided.
//!
//! | words                         | what                                                     |
//! |-------------------------------|----------------------------------------------------------|
//! | `nodes`                       | per node: the last epoch it finished, plus one (barrier) |
//! | `nodes x lanes`               | per (node, lane): its batch's header (epoch + 1, length) |
//! | `nodes x lanes x slot_words`  | per (node, lane): its batch, encoded (dispatch)          |
//! | `nodes x fwd_entries`         | per sender: the k-th transaction's values it forwards    |
//! |                               | here this epoch: where they lie in its log (forward)     |
//! | `nodes x fwd_log_words`       | per sender: the values, encoded, one after the other     |
//!
//! Forward (RCC's CFB, "two doorbell-batched RDMA WRITEs to forward value and notify"): both
//! ends count, in the epoch's order, the transactions one forwards to the other, so the
//! k-th has entry k. The sender WRITEs the values into its log here, then entry k; the
//! receiver reads entry k, then the values, and zeroes the entry before its EPOCH_DONE (no
//! sender forwards the next epoch's before then). Values that do not fit what is left of
//! the log go as an RPC instead.
//!
//! A sender WRITEs a batch's body, waits for it to complete, then WRITEs its header: a
//! reader that sees the header sees the whole body. A node takes every batch of an epoch
//! before it says EPOCH_DONE, and no node dispatches the next epoch before every node said
//! it, so a slot is never overwritten while its batch is still to be read.

use super::msg::{Batch, CalvinRequest, Value};
use atoll_fabric::{NodeId, RegionId, RemotePtr};
use atoll_storage::Catalog;
use atoll_txn::msg::{DecodeError, WordWriter};
use atoll_txn::Plan;

/// The region's name in the catalog.
pub const REGION: &str = "calvin_buffers";

/// Words a batch's slot holds per request it may carry (a SmallBank or YCSB request takes
/// 15 to 40), and at least [`SLOT_WORDS_MIN`] in all.
pub const SLOT_WORDS_PER_REQUEST: u64 = 160;
pub const SLOT_WORDS_MIN: u64 = 4096;

/// Words of a batch's encoding beside its requests' (its tag, fields and count).
pub const BATCH_FIXED_WORDS: u64 = 8;

/// Bits of a header word that hold the batch's length in words (the rest: epoch + 1).
const LEN_BITS: u32 = 24;

/// Words of a sender's forward log per entry (a SmallBank or YCSB transaction's values take
/// 20 to 60; TPC-C's more, and those over what is left go as an RPC).
pub const FWD_LOG_WORDS_PER_ENTRY: u64 = 48;

/// A forward entry's bit that says it is written; below it the values' offset in the log
/// (above [`LEN_BITS`]) and their length in words.
const FWD_WRITTEN: u64 = 1 << 63;

/// Entries per sender of the forward area: one per transaction an epoch may order (every
/// node's lanes' batches); 0 when forward is RPC.
pub fn fwd_entries(plan: &Plan, nodes: u32, lanes: u32, batch_max: u32) -> u64 {
    if plan.get(super::FORWARD) != atoll_txn::Primitive::OneSided {
        return 0;
    }
    nodes as u64 * lanes as u64 * batch_max as u64
}

/// Words of one batch's slot, for lanes of `batch_max` requests; 0 when dispatch is RPC.
pub fn slot_words(plan: &Plan, batch_max: u32) -> u64 {
    if plan.get(super::DISPATCH) != atoll_txn::Primitive::OneSided {
        return 0;
    }
    (batch_max as u64 * SLOT_WORDS_PER_REQUEST)
        .max(SLOT_WORDS_MIN)
        .min((1 << LEN_BITS) - 1)
}

/// The region's words for `nodes` nodes of `lanes` lanes; 0: the plan needs none.
pub fn region_words(plan: &Plan, nodes: u32, lanes: u32, batch_max: u32) -> u64 {
    let one_sided = [super::DISPATCH, super::FORWARD, super::BARRIER]
        .iter()
        .any(|&s| plan.get(s) == atoll_txn::Primitive::OneSided);
    if !one_sided {
        return 0;
    }
    let slots = nodes as u64 * lanes as u64;
    let fwd = fwd_entries(plan, nodes, lanes, batch_max);
    nodes as u64
        + slots
        + slots * slot_words(plan, batch_max)
        + nodes as u64 * fwd * (1 + FWD_LOG_WORDS_PER_ENTRY)
}

/// Where a run's buffers lie on every node.
#[derive(Clone, Copy, Debug)]
pub struct Buffers {
    region: RegionId,
    nodes: u16,
    lanes: u32,
    pub slot_words: u64,
    /// Forward entries per sender, and its log's words.
    pub fwd_entries: u64,
    pub fwd_log_words: u64,
}

impl Buffers {
    /// The run's buffers; `None` when the catalog registers none (every stage over RPC).
    pub fn of(catalog: &Catalog, plan: &Plan, lanes: u32, batch_max: u32) -> Option<Self> {
        let i = catalog.extra_region_named(REGION)?;
        let b = Buffers {
            region: catalog.extra_region(i),
            nodes: catalog.nodes,
            lanes,
            slot_words: slot_words(plan, batch_max),
            fwd_entries: fwd_entries(plan, catalog.nodes as u32, lanes, batch_max),
            fwd_log_words: fwd_entries(plan, catalog.nodes as u32, lanes, batch_max)
                * FWD_LOG_WORDS_PER_ENTRY,
        };
        let words = region_words(plan, b.nodes as u32, lanes, batch_max);
        assert_eq!(
            catalog.extra_region_words(i) as u64,
            words,
            "calvin: buffers registered for another shape"
        );
        Some(b)
    }

    /// Node `at`'s barrier word of node `from`.
    pub fn barrier(&self, at: NodeId, from: u16) -> RemotePtr {
        RemotePtr::new(at, self.region, from as u32)
    }

    /// Node `at`'s barrier words, every node's.
    pub fn barriers(&self, at: NodeId) -> (RemotePtr, u32) {
        (RemotePtr::new(at, self.region, 0), self.nodes as u32)
    }

    fn slot(&self, from: u16, lane: u32) -> u64 {
        assert!(
            from < self.nodes && lane < self.lanes,
            "calvin: slot of node {from} lane {lane} of {} x {}",
            self.nodes,
            self.lanes
        );
        from as u64 * self.lanes as u64 + lane as u64
    }

    /// Node `at`'s header words, every (node, lane)'s, in slot order.
    pub fn headers(&self, at: NodeId) -> (RemotePtr, u32) {
        let n = self.nodes as u32;
        (RemotePtr::new(at, self.region, n), n * self.lanes)
    }

    pub fn header(&self, at: NodeId, from: u16, lane: u32) -> RemotePtr {
        let off = self.nodes as u64 + self.slot(from, lane);
        RemotePtr::new(at, self.region, off as u32)
    }

    pub fn body(&self, at: NodeId, from: u16, lane: u32) -> RemotePtr {
        let slots = self.nodes as u64 * self.lanes as u64;
        let off = self.nodes as u64 + slots + self.slot(from, lane) * self.slot_words;
        RemotePtr::new(
            at,
            self.region,
            u32::try_from(off).expect("the region's words fit"),
        )
    }

    /// Where sender `from`'s forward area starts on a node.
    fn fwd_base(&self, from: u16) -> u64 {
        assert!(from < self.nodes, "calvin: forward area of node {from}");
        let slots = self.nodes as u64 * self.lanes as u64;
        self.nodes as u64
            + slots
            + slots * self.slot_words
            + from as u64 * (self.fwd_entries + self.fwd_log_words)
    }

    /// Node `at`'s forward entry `k` of sender `from`.
    pub fn fwd_entry(&self, at: NodeId, from: u16, k: u32) -> RemotePtr {
        assert!(
            (k as u64) < self.fwd_entries,
            "calvin: forward entry {k} of {}",
            self.fwd_entries
        );
        let off = self.fwd_base(from) + k as u64;
        RemotePtr::new(
            at,
            self.region,
            u32::try_from(off).expect("the region's words fit"),
        )
    }

    /// Node `at`'s forward log of sender `from`, from word `off`.
    pub fn fwd_log(&self, at: NodeId, from: u16, off: u64) -> RemotePtr {
        let off = self.fwd_base(from) + self.fwd_entries + off;
        RemotePtr::new(
            at,
            self.region,
            u32::try_from(off).expect("the region's words fit"),
        )
    }

    /// The (node, lane) of slot `i` of [`Buffers::headers`].
    pub fn slot_of(&self, i: usize) -> (u16, u32) {
        (
            (i as u64 / self.lanes as u64) as u16,
            (i as u64 % self.lanes as u64) as u32,
        )
    }
}

/// A header word: `epoch + 1` and the body's length in words (0 is "nothing yet").
pub fn header_word(epoch: u64, len_words: u64) -> u64 {
    assert!(
        len_words < 1 << LEN_BITS,
        "calvin: a body of {len_words} words"
    );
    (epoch + 1) << LEN_BITS | len_words
}

/// The epoch and length a header word says, if it says any.
pub fn read_header(word: u64) -> Option<(u64, u64)> {
    let epoch1 = word >> LEN_BITS;
    (epoch1 > 0).then(|| (epoch1 - 1, word & ((1 << LEN_BITS) - 1)))
}

/// A forward entry: the values lie at `off` in the sender's log, `len` words.
pub fn fwd_word(off: u64, len: u64) -> u64 {
    assert!(
        len < 1 << LEN_BITS && off < 1 << (63 - LEN_BITS),
        "calvin: forward of {len} words at {off}"
    );
    FWD_WRITTEN | off << LEN_BITS | len
}

/// Where a forward entry says the values lie, if it is written.
pub fn read_fwd_word(word: u64) -> Option<(u64, u64)> {
    (word & FWD_WRITTEN != 0).then(|| {
        (
            (word & !FWD_WRITTEN) >> LEN_BITS,
            word & ((1 << LEN_BITS) - 1),
        )
    })
}

/// A message as the words a buffer holds (a batch's slot, a forward log).
pub fn to_words(msg: &CalvinRequest) -> Vec<u64> {
    let mut bytes = Vec::new();
    msg.encode(&mut WordWriter(&mut bytes));
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

/// A buffer's words as the message they hold: a malformed one is a typed error.
fn from_words(words: &[u64]) -> Result<CalvinRequest, DecodeError> {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    CalvinRequest::decode(&bytes)
}

/// A log's words as the forwarded values they hold: `(id, from, values)`.
pub fn decode_values(words: &[u64]) -> Result<(u64, u16, Vec<Value>), DecodeError> {
    match from_words(words)? {
        CalvinRequest::Forward {
            id, from, values, ..
        } => Ok((id, from, values)),
        other => Err(DecodeError(format!(
            "calvin buffer: a forward log holds {other:?}"
        ))),
    }
}

/// A slot's words as the batch they hold: a malformed one is a typed error.
pub fn decode(words: &[u64]) -> Result<Batch, DecodeError> {
    match from_words(words)? {
        CalvinRequest::Batch(b) => Ok(b),
        other => Err(DecodeError(format!(
            "calvin buffer: a batch's slot holds {other:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calvin_a_header_word_says_its_epoch_and_length_and_zero_says_nothing() {
        assert_eq!(read_header(0), None);
        assert_eq!(read_header(header_word(0, 17)), Some((0, 17)));
        assert_eq!(read_header(header_word(9_999, 0)), Some((9_999, 0)));
        assert_eq!(read_fwd_word(0), None);
        assert_eq!(read_fwd_word(fwd_word(0, 0)), Some((0, 0)));
        assert_eq!(
            read_fwd_word(fwd_word(1 << 30, 1234)),
            Some((1 << 30, 1234))
        );
    }

    #[test]
    fn calvin_forwarded_values_round_trip_through_a_log_and_a_batch_is_not_taken_for_them() {
        let v = Value {
            table: atoll_storage::TableId(2),
            key: 9,
            version: 4,
            data: vec![1, 2, 3],
        };
        let words = to_words(&CalvinRequest::Forward {
            epoch: 3,
            id: 77,
            from: 1,
            values: vec![v.clone()],
        });
        assert_eq!(decode_values(&words), Ok((77, 1, vec![v])));
        let batch = Batch {
            epoch: 0,
            from: 0,
            lane: 0,
            lanes: 1,
            last: false,
            keep: false,
            requests: vec![],
        };
        assert!(decode_values(&to_words(&CalvinRequest::Batch(batch))).is_err());
    }

    #[test]
    fn calvin_buffers_are_registered_only_for_a_one_sided_stage() {
        use atoll_txn::Protocol;
        let plan = |s: &str| Plan::parse_for(s, super::super::Calvin::FAMILY_STAGES).unwrap();
        let rpc = plan("rpc");
        assert_eq!(region_words(&rpc, 4, 8, 256), 0);
        let barrier = plan("dispatch=rpc,forward=rpc,barrier=one-sided");
        assert_eq!(region_words(&barrier, 4, 8, 256), 4 + 32);
        let dispatch = plan("dispatch=one-sided,forward=rpc,barrier=rpc");
        assert_eq!(
            region_words(&dispatch, 4, 8, 256),
            4 + 32 + 32 * 256 * SLOT_WORDS_PER_REQUEST
        );
        // Per sender: an entry per transaction an epoch may order, and its log.
        let forward = plan("dispatch=rpc,forward=one-sided,barrier=rpc");
        assert_eq!(
            region_words(&forward, 4, 8, 256),
            4 + 32 + 4 * (4 * 8 * 256) * (1 + FWD_LOG_WORDS_PER_ENTRY)
        );
    }
}
