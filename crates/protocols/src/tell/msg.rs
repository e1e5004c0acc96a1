//! Tell's messages: to a commit manager (Tell §4.2) `start`, `set_committed`,
//! `set_aborted`, and its replies (a tid with its snapshot, a refusal naming the limit it
//! met); to a storage node (Tell §4.1) `get` (every version of a record: its slot) and
//! `put_if` (a whole new slot, iff its sequence number is still the one read); and the
//! management role's, for the recovery of a crashed processing node (Tell §4.4): a fence at
//! each storage node (it refuses the dead node's puts from then
//! on), and at the commit manager the dead node's active tids and, later, its base; and,
//! between several commit managers, a block of tids from the store's counter and each
//! manager's summary at every sync. Decoding refuses anything malformed with a typed error.

use super::cm::{CmError, Pn, Summary};
use super::descriptor::{Descriptor, Tid};
use atoll_fabric::NodeId;
use atoll_storage::TableId;
use atoll_txn::msg::{DecodeError, FamilyId, Reply, WordReader, WordWriter};
use atoll_txn::wire_tags;

/// Tell's family id on the wire.
pub const FAMILY: FamilyId = FamilyId(6);

wire_tags! {
    /// The first word of a Tell request's body.
    pub enum TellTag ("tell request") {
        Start = 1,
        SetCommitted = 2,
        SetAborted = 3,
        Get = 4,
        PutIf = 5,
        Insert = 6,
        Fence = 7,
        Recover = 8,
        State = 9,
        Sync = 10,
        TakeTids = 11,
        Stamps = 12,
    }
}

wire_tags! {
    /// The first word of a Tell reply's body.
    pub enum TellReplyTag ("tell reply") {
        Started = 1,
        Done = 2,
        InFlight = 3,
        NotActive = 4,
        Records = 5,
        Puts = 6,
        Busy = 7,
        Committed = 8,
        Inserted = 9,
        Fenced = 10,
        Active = 11,
        State = 12,
        NoTids = 13,
        Tids = 14,
        Stamps = 15,
    }
}

/// One record's conditional put: slot `loc` of `table` becomes `words` iff its sequence
/// number is still `seq` and no put holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PutItem {
    pub table: TableId,
    pub loc: u32,
    pub seq: u64,
    /// The whole slot (its `LOCK` word is the node's to set).
    pub words: Vec<u64>,
}

/// One record a transaction inserts (Tell's `put_if_absent`): `key` of `table` with its
/// whole stored payload, its one version written by the inserting tid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InsertItem {
    pub table: TableId,
    pub key: u64,
    pub payload: Vec<u64>,
}

/// What became of one [`InsertItem`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Inserted {
    /// A new slot `loc` holds the record, its version word `version`, at sequence number
    /// `seq`.
    Placed { loc: u32, version: u64, seq: u64 },
    /// The key's slot holds a live version: the insert fails (R3).
    Live,
    /// The key's slot `loc` holds a deletion as its newest version: these are its words,
    /// and the insert is a conditional put of a new version over them.
    Deleted { loc: u32, words: Vec<u64> },
    /// The table on this node has no slot left (a limit, never retried).
    Full,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TellRequest {
    /// A new transaction of processing node `pn`: its tid and snapshot.
    Start { pn: Pn, read_only: bool },
    /// `tid` committed: every version it wrote is in the store.
    SetCommitted { tid: Tid },
    /// `tid` aborted: every version it wrote is gone from the store.
    SetAborted { tid: Tid },
    /// Every version of each record, by key: its slot's words.
    Get { items: Vec<(TableId, u64)> },
    /// Conditional puts, each on its own, sent by node `origin`.
    PutIf { origin: NodeId, items: Vec<PutItem> },
    /// New records of transaction `tid`, each on its own, sent by node `origin`.
    Insert {
        origin: NodeId,
        tid: Tid,
        items: Vec<InsertItem>,
    },
    /// Refuse every put and insert `node` sent from now on (it crashed; a storage node).
    Fence { node: NodeId },
    /// Processing node `pn` crashed: the commit manager refuses its starts from now on and
    /// answers with its active tids.
    Recover { pn: Pn },
    /// The commit manager's base and `lav`.
    State,
    /// Commit manager `from`'s summary, for another to merge.
    Sync { from: u16, summary: Summary },
    /// The next `count` tids of the store's counter (on the first storage node).
    TakeTids { count: u64 },
    /// SBVS: the stamps at these words of the node's stamp region, each bumped first
    /// (after an update's puts) or only read (before a fetch).
    Stamps { bump: bool, words: Vec<u32> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TellReply {
    Started {
        tid: Tid,
        snapshot: Descriptor,
        /// Per commit manager, its commits the snapshot sees ([`super::cm::Started::seen`]).
        seen: Vec<u64>,
    },
    /// `set_committed` recorded the commit, numbered `at`.
    Committed { at: u64 },
    /// The completion is recorded.
    Done,
    /// `start` refused: tid `next` would lie more than `max` above the base.
    InFlight { next: u64, base: u64, max: u64 },
    /// A completion of a tid that is not active at this commit manager.
    NotActive { tid: Tid },
    /// Per key of a `Get`: its slot and the slot's words, or `None` if the key has none.
    Records(Vec<Option<(u32, Vec<u64>)>>),
    /// Per item of a `PutIf`: whether it was put.
    Puts(Vec<bool>),
    /// A record stayed held by puts while the node read it: ask again.
    Busy,
    /// Per item of an `Insert`: what became of it.
    Inserted(Vec<Inserted>),
    /// The sender is fenced: it was declared crashed, its puts are refused.
    Fenced,
    /// The active tids of a recovered processing node.
    Active(Vec<Tid>),
    /// The commit manager's base and `lav`.
    State { base: u64, lav: u64 },
    /// `start` refused: the manager's blocks of tids are used up until its next one.
    NoTids,
    /// The first of the tids taken from the store's counter.
    Tids { first: u64 },
    /// [`TellRequest::Stamps`]: each stamp after the request.
    Stamps(Vec<u64>),
}

impl TellRequest {
    /// Whether a commit manager serves it (else a storage node).
    pub fn for_commit_manager(&self) -> bool {
        matches!(
            self,
            TellRequest::Start { .. }
                | TellRequest::SetCommitted { .. }
                | TellRequest::SetAborted { .. }
                | TellRequest::Recover { .. }
                | TellRequest::State
                | TellRequest::Sync { .. }
        )
    }

    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            TellRequest::Start { pn, read_only } => {
                e.tag(TellTag::Start);
                e.w(pn.0 as u64);
                e.w(*read_only as u64);
            }
            TellRequest::SetCommitted { tid } => {
                e.tag(TellTag::SetCommitted);
                e.w(tid.0);
            }
            TellRequest::SetAborted { tid } => {
                e.tag(TellTag::SetAborted);
                e.w(tid.0);
            }
            TellRequest::Get { items } => {
                e.tag(TellTag::Get);
                e.w(items.len() as u64);
                for (t, k) in items {
                    e.w(t.0 as u64);
                    e.w(*k);
                }
            }
            TellRequest::PutIf { origin, items } => {
                e.tag(TellTag::PutIf);
                e.w(origin.0 as u64);
                e.w(items.len() as u64);
                for it in items {
                    e.w(it.table.0 as u64);
                    e.w(it.loc as u64);
                    e.w(it.seq);
                    e.words(&it.words);
                }
            }
            TellRequest::Insert { origin, tid, items } => {
                e.tag(TellTag::Insert);
                e.w(origin.0 as u64);
                e.w(tid.0);
                e.w(items.len() as u64);
                for it in items {
                    e.w(it.table.0 as u64);
                    e.w(it.key);
                    e.words(&it.payload);
                }
            }
            TellRequest::Fence { node } => {
                e.tag(TellTag::Fence);
                e.w(node.0 as u64);
            }
            TellRequest::Recover { pn } => {
                e.tag(TellTag::Recover);
                e.w(pn.0 as u64);
            }
            TellRequest::State => e.tag(TellTag::State),
            TellRequest::Sync { from, summary } => {
                e.tag(TellTag::Sync);
                e.w(*from as u64);
                e.w(summary.lav);
                e.words(&summary.seen);
                e.words(&summary.completed.to_words());
            }
            TellRequest::TakeTids { count } => {
                e.tag(TellTag::TakeTids);
                e.w(*count);
            }
            TellRequest::Stamps { bump, words } => {
                e.tag(TellTag::Stamps);
                e.w(*bump as u64);
                e.w(words.len() as u64);
                for &w in words {
                    e.w(w as u64);
                }
            }
        }
    }

    /// The bytes of this request, ready to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| self.encode(e))
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "tell request");
        let node = |d: &mut WordReader<'_>| {
            let n = d.w()?;
            u16::try_from(n).map_err(|_| d.error(format!("node {n} out of range")))
        };
        let r = match TellTag::try_from(d.w()?)? {
            TellTag::Start => TellRequest::Start {
                pn: Pn(node(&mut d)?),
                read_only: d.bool()?,
            },
            TellTag::SetCommitted => TellRequest::SetCommitted { tid: Tid(d.w()?) },
            TellTag::SetAborted => TellRequest::SetAborted { tid: Tid(d.w()?) },
            TellTag::Get => TellRequest::Get {
                items: d.list(|d| Ok((d.table()?, d.w()?)))?,
            },
            TellTag::PutIf => TellRequest::PutIf {
                origin: NodeId(node(&mut d)?),
                items: d.list(|d| {
                    Ok(PutItem {
                        table: d.table()?,
                        loc: d.u32()?,
                        seq: d.w()?,
                        words: d.word_vec()?,
                    })
                })?,
            },
            TellTag::Insert => TellRequest::Insert {
                origin: NodeId(node(&mut d)?),
                tid: Tid(d.w()?),
                items: d.list(|d| {
                    Ok(InsertItem {
                        table: d.table()?,
                        key: d.w()?,
                        payload: d.word_vec()?,
                    })
                })?,
            },
            TellTag::Fence => TellRequest::Fence {
                node: NodeId(node(&mut d)?),
            },
            TellTag::Recover => TellRequest::Recover {
                pn: Pn(node(&mut d)?),
            },
            TellTag::State => TellRequest::State,
            TellTag::Sync => TellRequest::Sync {
                from: node(&mut d)?,
                summary: Summary {
                    lav: d.w()?,
                    seen: d.word_vec()?,
                    completed: Descriptor::from_words(&d.word_vec()?)?,
                },
            },
            TellTag::TakeTids => TellRequest::TakeTids { count: d.w()? },
            TellTag::Stamps => TellRequest::Stamps {
                bump: d.bool()?,
                words: d.list(|d| d.u32())?,
            },
        };
        d.done()?;
        Ok(r)
    }
}

/// Tags of [`Inserted`] on the wire.
const PLACED: u64 = 0;
const LIVE: u64 = 1;
const DELETED: u64 = 2;
const FULL: u64 = 3;

impl TellReply {
    /// The Tell reply in a shared reply's bytes; anything else is a bug on our side (the
    /// participant answers every Tell request with one, or `BadRequest` for a malformed
    /// one, which a coordinator never sends).
    pub fn of(b: &[u8]) -> TellReply {
        match Reply::decode(b) {
            Ok(Reply::Family {
                family: FAMILY,
                body,
            }) => TellReply::decode(&body)
                .unwrap_or_else(|e| panic!("tell: an undecodable reply: {e}")),
            other => panic!("tell: expected a tell reply, got {other:?}"),
        }
    }

    /// A commit manager's answer to a refused request.
    pub fn of_error(e: CmError) -> Self {
        match e {
            CmError::InFlight { next, base, max } => TellReply::InFlight { next, base, max },
            CmError::NotActive(tid) => TellReply::NotActive { tid },
            CmError::Fenced(_) => TellReply::Fenced,
            CmError::NoTids => TellReply::NoTids,
        }
    }

    /// As a shared reply.
    pub fn into_reply(self) -> Reply {
        atoll_txn::msg::family_reply(FAMILY, |e| match &self {
            TellReply::Started {
                tid,
                snapshot,
                seen,
            } => {
                e.tag(TellReplyTag::Started);
                e.w(tid.0);
                e.words(&snapshot.to_words());
                e.words(seen);
            }
            TellReply::Committed { at } => {
                e.tag(TellReplyTag::Committed);
                e.w(*at);
            }
            TellReply::Inserted(items) => {
                e.tag(TellReplyTag::Inserted);
                e.w(items.len() as u64);
                for it in items {
                    match it {
                        Inserted::Placed { loc, version, seq } => {
                            e.w(PLACED);
                            e.w(*loc as u64);
                            e.w(*version);
                            e.w(*seq);
                        }
                        Inserted::Live => e.w(LIVE),
                        Inserted::Deleted { loc, words } => {
                            e.w(DELETED);
                            e.w(*loc as u64);
                            e.words(words);
                        }
                        Inserted::Full => e.w(FULL),
                    }
                }
            }
            TellReply::Done => e.tag(TellReplyTag::Done),
            TellReply::InFlight { next, base, max } => {
                e.tag(TellReplyTag::InFlight);
                e.w(*next);
                e.w(*base);
                e.w(*max);
            }
            TellReply::NotActive { tid } => {
                e.tag(TellReplyTag::NotActive);
                e.w(tid.0);
            }
            TellReply::Records(records) => {
                e.tag(TellReplyTag::Records);
                e.w(records.len() as u64);
                for r in records {
                    match r {
                        None => e.w(0),
                        Some((loc, words)) => {
                            e.w(1);
                            e.w(*loc as u64);
                            e.words(words);
                        }
                    }
                }
            }
            TellReply::Puts(puts) => {
                e.tag(TellReplyTag::Puts);
                e.w(puts.len() as u64);
                for &p in puts {
                    e.w(p as u64);
                }
            }
            TellReply::Busy => e.tag(TellReplyTag::Busy),
            TellReply::Fenced => e.tag(TellReplyTag::Fenced),
            TellReply::Active(tids) => {
                e.tag(TellReplyTag::Active);
                e.w(tids.len() as u64);
                for t in tids {
                    e.w(t.0);
                }
            }
            TellReply::State { base, lav } => {
                e.tag(TellReplyTag::State);
                e.w(*base);
                e.w(*lav);
            }
            TellReply::NoTids => e.tag(TellReplyTag::NoTids),
            TellReply::Tids { first } => {
                e.tag(TellReplyTag::Tids);
                e.w(*first);
            }
            TellReply::Stamps(stamps) => {
                e.tag(TellReplyTag::Stamps);
                e.words(stamps);
            }
        })
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "tell reply");
        let r = match TellReplyTag::try_from(d.w()?)? {
            TellReplyTag::Started => TellReply::Started {
                tid: Tid(d.w()?),
                snapshot: Descriptor::from_words(&d.word_vec()?)?,
                seen: d.word_vec()?,
            },
            TellReplyTag::Committed => TellReply::Committed { at: d.w()? },
            TellReplyTag::Inserted => TellReply::Inserted(d.list(|d| {
                Ok(match d.w()? {
                    PLACED => Inserted::Placed {
                        loc: d.u32()?,
                        version: d.w()?,
                        seq: d.w()?,
                    },
                    LIVE => Inserted::Live,
                    DELETED => Inserted::Deleted {
                        loc: d.u32()?,
                        words: d.word_vec()?,
                    },
                    FULL => Inserted::Full,
                    other => return Err(d.error(format!("insert outcome {other}"))),
                })
            })?),
            TellReplyTag::Done => TellReply::Done,
            TellReplyTag::InFlight => TellReply::InFlight {
                next: d.w()?,
                base: d.w()?,
                max: d.w()?,
            },
            TellReplyTag::NotActive => TellReply::NotActive { tid: Tid(d.w()?) },
            TellReplyTag::Records => TellReply::Records(d.list(|d| {
                Ok(if d.bool()? {
                    Some((d.u32()?, d.word_vec()?))
                } else {
                    None
                })
            })?),
            TellReplyTag::Puts => TellReply::Puts(d.list(|d| d.bool())?),
            TellReplyTag::Busy => TellReply::Busy,
            TellReplyTag::Fenced => TellReply::Fenced,
            TellReplyTag::Active => TellReply::Active(d.list(|d| Ok(Tid(d.w()?)))?),
            TellReplyTag::State => TellReply::State {
                base: d.w()?,
                lav: d.w()?,
            },
            TellReplyTag::NoTids => TellReply::NoTids,
            TellReplyTag::Tids => TellReply::Tids { first: d.w()? },
            TellReplyTag::Stamps => TellReply::Stamps(d.word_vec()?),
        };
        d.done()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tell_messages_round_trip_and_every_truncation_is_a_typed_error() {
        let requests = [
            TellRequest::Start {
                pn: Pn(3),
                read_only: true,
            },
            TellRequest::SetCommitted { tid: Tid(41) },
            TellRequest::SetAborted { tid: Tid(42) },
            TellRequest::Get {
                items: vec![(TableId(1), 7), (TableId(0), 9)],
            },
            TellRequest::PutIf {
                origin: NodeId(3),
                items: vec![PutItem {
                    table: TableId(2),
                    loc: 3,
                    seq: 11,
                    words: vec![1, 2, 3],
                }],
            },
            TellRequest::Insert {
                origin: NodeId(2),
                tid: Tid(12),
                items: vec![InsertItem {
                    table: TableId(1),
                    key: 5,
                    payload: vec![4, 5],
                }],
            },
            TellRequest::Fence { node: NodeId(4) },
            TellRequest::Recover { pn: Pn(1) },
            TellRequest::State,
            TellRequest::Sync {
                from: 2,
                summary: Summary {
                    completed: Descriptor::new(3, 3, 9, [5, 9]),
                    lav: 3,
                    seen: vec![4, 0, 7],
                },
            },
            TellRequest::TakeTids { count: 256 },
            TellRequest::Stamps {
                bump: true,
                words: vec![3, 1 << 19],
            },
        ];
        for r in requests {
            let mut b = Vec::new();
            r.encode(&mut WordWriter(&mut b));
            assert_eq!(TellRequest::decode(&b), Ok(r.clone()));
            for cut in (0..b.len()).step_by(8) {
                assert!(
                    TellRequest::decode(&b[..cut]).is_err(),
                    "{r:?} cut at {cut}"
                );
            }
        }
        let replies = [
            TellReply::Started {
                tid: Tid(9),
                snapshot: Descriptor::new(2, 4, 8, [6, 8]),
                seen: vec![3, 1],
            },
            TellReply::Committed { at: 4 },
            TellReply::Inserted(vec![
                Inserted::Placed {
                    loc: 1,
                    version: 2,
                    seq: 3,
                },
                Inserted::Live,
                Inserted::Deleted {
                    loc: 4,
                    words: vec![5, 6],
                },
                Inserted::Full,
            ]),
            TellReply::Done,
            TellReply::InFlight {
                next: 600_000,
                base: 3,
                max: 524_288,
            },
            TellReply::NotActive { tid: Tid(5) },
            TellReply::Records(vec![None, Some((4, vec![8, 9]))]),
            TellReply::Puts(vec![true, false]),
            TellReply::Busy,
            TellReply::Fenced,
            TellReply::Active(vec![Tid(3), Tid(9)]),
            TellReply::State { base: 5, lav: 2 },
            TellReply::NoTids,
            TellReply::Tids { first: 257 },
            TellReply::Stamps(vec![0, u64::MAX]),
        ];
        for r in replies {
            let Reply::Family { family, body } = r.clone().into_reply() else {
                panic!("{r:?} is not a family reply");
            };
            assert_eq!(family, FAMILY);
            assert_eq!(TellReply::decode(&body), Ok(r.clone()));
            for cut in (0..body.len()).step_by(8) {
                assert!(
                    TellReply::decode(&body[..cut]).is_err(),
                    "{r:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn tell_a_reply_carrying_a_malformed_snapshot_is_refused() {
        let Reply::Family { body, .. } = TellReply::Started {
            tid: Tid(9),
            snapshot: Descriptor::new(0, 4, 8, []),
            seen: vec![0],
        }
        .into_reply() else {
            unreachable!("a family reply");
        };
        let mut bad = body.clone();
        // The descriptor's lav (third word: tag, tid, length, lav) above its base.
        bad[24..32].copy_from_slice(&7u64.to_le_bytes());
        let e = TellReply::decode(&bad).unwrap_err();
        assert!(e.0.contains("out of order"), "{e:?}");
    }
}
