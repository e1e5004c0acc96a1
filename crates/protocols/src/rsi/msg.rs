//! RSI's messages for the plans that send its stages as requests to the records' and the
//! timestamp service's CPUs (the paper's Figure 6 baselines: traditional SI, and the
//! shared-memory design over two-sided verbs): each request does on the serving node's CPU
//! what the one-sided stage does with verbs.

use atoll_fabric::Words;
use atoll_storage::TableId;
use atoll_txn::msg::{DecodeError, FamilyId, Item, Reply, WordReader, WordWriter};
use atoll_txn::wire_tags;

/// RSI's family id on the wire.
pub const FAMILY: FamilyId = FamilyId(4);

wire_tags! {
    /// The first word of an RSI request's body.
    pub enum RsiTag ("rsi request") {
        Read = 1,
        Lock = 2,
        Install = 3,
        SetLock = 4,
        Snapshot = 5,
        CommitTs = 6,
        Outcome = 7,
        Delete = 8,
    }
}

/// One record's install: its slot, the version it gets, and (records keeping older
/// versions) the old-slot image `[commit id, version, payload]` of the version it replaces,
/// for old slot `evict`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallItem {
    pub table: TableId,
    pub loc: u32,
    pub version: u64,
    pub evict: u32,
    pub old_slot: Words,
    pub payload: Words,
}

/// A record's `LOCK` word change: from `from` to `to`, only if it holds `from`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockChange {
    pub table: TableId,
    pub loc: u32,
    pub from: u64,
    pub to: u64,
}

/// One record's deletion: its slot and key (the node's indexes change, so its CPU does it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeleteItem {
    pub table: TableId,
    pub loc: u32,
    pub key: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RsiRequest {
    /// Each item's whole record block as it is (the reader chooses the version its
    /// snapshot sees, as after a READ). Reply: [`RsiReply::Blocks`].
    Read { items: Vec<Item> },
    /// Per record, a compare-and-swap of `LOCK` (`from` the commit id read, `to` it
    /// locked). Reply: [`RsiReply::Words`], the words seen.
    Lock { items: Vec<LockChange> },
    /// Installs records this node holds locked at `cts`: the old slot, the payload, the
    /// version, then `LOCK` = `cts` (which unlocks). Reply: `Ok`.
    Install { cts: u64, items: Vec<InstallItem> },
    /// Per record, `LOCK` from `from` to `to` (a release, or an insert's unlock). Reply:
    /// `Ok`.
    SetLock { items: Vec<LockChange> },
    /// The timestamp service's `RTS` word. Reply: [`RsiReply::Words`] of one.
    Snapshot,
    /// A commit timestamp: the counter's FETCH_ADD, then `RTS`. Reply: [`RsiReply::Words`]
    /// `[counter before, RTS]`.
    CommitTs,
    /// `cts` finished: written into its ring slot. Reply: `Ok`.
    Outcome { cts: u64 },
    /// Deletes records this node holds locked, committing at commit id `cid`: each is
    /// marked absent at its next version (its slot queued for reuse), then `LOCK` = `cid`,
    /// which unlocks. Reply: [`RsiReply::Words`], each deletion's version word.
    Delete { cid: u64, items: Vec<DeleteItem> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RsiReply {
    /// Per item read: its slot and block, or `None` if the key does not exist.
    Blocks(Vec<Option<(u32, Vec<u64>)>>),
    Words(Vec<u64>),
}

wire_tags! {
    /// The first word of an RSI reply's body.
    pub enum RsiReplyTag ("rsi reply") {
        Blocks = 1,
        Words = 2,
    }
}

fn put_change(e: &mut WordWriter<'_>, c: &LockChange) {
    e.w(c.table.0 as u64);
    e.w(c.loc as u64);
    e.w(c.from);
    e.w(c.to);
}

fn get_change(d: &mut WordReader<'_>) -> Result<LockChange, DecodeError> {
    Ok(LockChange {
        table: d.table()?,
        loc: d.u32()?,
        from: d.w()?,
        to: d.w()?,
    })
}

impl RsiRequest {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            RsiRequest::Read { items } => {
                e.tag(RsiTag::Read);
                e.items(items);
            }
            RsiRequest::Lock { items } | RsiRequest::SetLock { items } => {
                e.tag(match self {
                    RsiRequest::Lock { .. } => RsiTag::Lock,
                    _ => RsiTag::SetLock,
                });
                e.w(items.len() as u64);
                items.iter().for_each(|c| put_change(e, c));
            }
            RsiRequest::Install { cts, items } => {
                e.tag(RsiTag::Install);
                e.w(*cts);
                e.w(items.len() as u64);
                for it in items {
                    e.w(it.table.0 as u64);
                    e.w(it.loc as u64);
                    e.w(it.version);
                    e.w(it.evict as u64);
                    e.words(&it.old_slot);
                    e.words(&it.payload);
                }
            }
            RsiRequest::Snapshot => e.tag(RsiTag::Snapshot),
            RsiRequest::CommitTs => e.tag(RsiTag::CommitTs),
            RsiRequest::Outcome { cts } => {
                e.tag(RsiTag::Outcome);
                e.w(*cts);
            }
            RsiRequest::Delete { cid, items } => {
                e.tag(RsiTag::Delete);
                e.w(*cid);
                e.w(items.len() as u64);
                for it in items {
                    e.w(it.table.0 as u64);
                    e.w(it.loc as u64);
                    e.w(it.key);
                }
            }
        }
    }

    /// The bytes of this request, ready to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| self.encode(e))
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "rsi request");
        let r = match RsiTag::try_from(d.w()?)? {
            RsiTag::Read => RsiRequest::Read { items: d.items()? },
            RsiTag::Lock => RsiRequest::Lock {
                items: d.list(get_change)?,
            },
            RsiTag::SetLock => RsiRequest::SetLock {
                items: d.list(get_change)?,
            },
            RsiTag::Install => RsiRequest::Install {
                cts: d.w()?,
                items: d.list(|d| {
                    Ok(InstallItem {
                        table: d.table()?,
                        loc: d.u32()?,
                        version: d.w()?,
                        evict: d.u32()?,
                        old_slot: d.words()?,
                        payload: d.words()?,
                    })
                })?,
            },
            RsiTag::Snapshot => RsiRequest::Snapshot,
            RsiTag::CommitTs => RsiRequest::CommitTs,
            RsiTag::Outcome => RsiRequest::Outcome { cts: d.w()? },
            RsiTag::Delete => RsiRequest::Delete {
                cid: d.w()?,
                items: d.list(|d| {
                    Ok(DeleteItem {
                        table: d.table()?,
                        loc: d.u32()?,
                        key: d.w()?,
                    })
                })?,
            },
        };
        d.done()?;
        Ok(r)
    }
}

impl RsiReply {
    /// As a shared reply.
    pub fn into_reply(self) -> Reply {
        atoll_txn::msg::family_reply(FAMILY, |e| match &self {
            RsiReply::Blocks(blocks) => {
                e.tag(RsiReplyTag::Blocks);
                e.w(blocks.len() as u64);
                for b in blocks {
                    match b {
                        None => e.w(0),
                        Some((loc, words)) => {
                            e.w(1);
                            e.w(*loc as u64);
                            e.words(words);
                        }
                    }
                }
            }
            RsiReply::Words(words) => {
                e.tag(RsiReplyTag::Words);
                e.words(words);
            }
        })
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "rsi reply");
        let r = match RsiReplyTag::try_from(d.w()?)? {
            RsiReplyTag::Blocks => RsiReply::Blocks(d.list(|d| {
                Ok(if d.bool()? {
                    Some((d.u32()?, d.word_vec()?))
                } else {
                    None
                })
            })?),
            RsiReplyTag::Words => RsiReply::Words(d.word_vec()?),
        };
        d.done()?;
        Ok(r)
    }

    /// The RSI reply in a shared reply's bytes; anything else is a bug on our side (the
    /// participant answers every RSI request with one, or `BadRequest` for a malformed one,
    /// which this coordinator never sends).
    pub fn of(b: &[u8]) -> RsiReply {
        match Reply::decode(b) {
            Ok(Reply::Family {
                family: FAMILY,
                body,
            }) => {
                RsiReply::decode(&body).unwrap_or_else(|e| panic!("rsi: an undecodable reply: {e}"))
            }
            other => panic!("rsi: expected an rsi reply, got {other:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_txn::msg::Loc;

    #[test]
    fn rsi_messages_round_trip_and_every_truncation_is_rejected() {
        let change = LockChange {
            table: TableId(1),
            loc: 3,
            from: 40,
            to: 40 | (1 << 63),
        };
        let requests = [
            RsiRequest::Read {
                items: vec![Item {
                    table: TableId(2),
                    key: 9,
                    loc: Some(Loc(4)),
                }],
            },
            RsiRequest::Lock {
                items: vec![change, change],
            },
            RsiRequest::SetLock {
                items: vec![change],
            },
            RsiRequest::Install {
                cts: 77,
                items: vec![InstallItem {
                    table: TableId(0),
                    loc: 5,
                    version: 3,
                    evict: 1,
                    old_slot: Words::from_slice(&[40, 2, 8]),
                    payload: Words::from_slice(&[9]),
                }],
            },
            RsiRequest::Snapshot,
            RsiRequest::CommitTs,
            RsiRequest::Outcome { cts: 12 },
            RsiRequest::Delete {
                cid: 81,
                items: vec![DeleteItem {
                    table: TableId(3),
                    loc: 6,
                    key: 1234,
                }],
            },
        ];
        for r in requests {
            let b = r.to_bytes();
            let Ok(Some((FAMILY, body))) = atoll_txn::msg::split_family(&b) else {
                panic!("not an rsi request")
            };
            assert_eq!(RsiRequest::decode(body), Ok(r.clone()));
            for cut in (0..body.len()).step_by(8) {
                assert!(
                    RsiRequest::decode(&body[..cut]).is_err(),
                    "{r:?} cut at {cut}"
                );
            }
        }
        for reply in [
            RsiReply::Blocks(vec![None, Some((3, vec![1, 2, 3]))]),
            RsiReply::Words(vec![5, 6]),
        ] {
            let mut b = Vec::new();
            reply.clone().into_reply().encode(&mut b);
            assert_eq!(RsiReply::of(&b), reply);
        }
    }
}
