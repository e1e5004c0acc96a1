//! MVCC's messages: the snapshot read and the install that keeps the old version, and the
//! read's refusal (its other replies are the shared `Tuples`, `NotFound`, `Ok`).

use atoll_txn::msg::{DecodeError, FamilyId, Item, Reply, WordReader, WordWriter, WriteBack};
use atoll_txn::wire_tags;

/// MVCC's family id on the wire.
pub const FAMILY: FamilyId = FamilyId(3);

wire_tags! {
    /// The first word of an MVCC request's body.
    pub enum MvccTag ("mvcc request") {
        Read = 1,
        Install = 2,
    }
}

wire_tags! {
    /// The first word of an MVCC reply's body.
    pub enum MvccReplyTag ("mvcc reply") {
        Refused = 1,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MvccRequest {
    /// Reads at timestamp `ctts`: each item's newest version older than `ctts`, with the
    /// record's `RTS` raised to `ctts` (Conds R1, R2).
    Read { ctts: u64, items: Vec<Item> },
    /// A write-back that first moves each record's current version into its oldest slot.
    Install(WriteBack),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MvccReply {
    /// The read of item `index` refused: no kept version is old enough (`overflow`), or a
    /// writer ordered before the reader holds the record.
    Refused { index: u32, overflow: bool },
}

impl MvccRequest {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            MvccRequest::Read { ctts, items } => Self::encode_read(e, *ctts, items),
            MvccRequest::Install(wb) => {
                e.tag(MvccTag::Install);
                wb.encode(e);
            }
        }
    }

    /// The bytes of this request, ready to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| self.encode(e))
    }

    fn encode_read(e: &mut WordWriter<'_>, ctts: u64, items: &[Item]) {
        e.tag(MvccTag::Read);
        e.w(ctts);
        e.items(items);
    }

    /// The bytes of [`MvccRequest::Read`] from borrowed items (no vector per request).
    pub fn read_bytes(ctts: u64, items: &[Item]) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| Self::encode_read(e, ctts, items))
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "mvcc request");
        let r = match MvccTag::try_from(d.w()?)? {
            MvccTag::Read => MvccRequest::Read {
                ctts: d.w()?,
                items: d.items()?,
            },
            MvccTag::Install => MvccRequest::Install(WriteBack::decode(&mut d)?),
        };
        d.done()?;
        Ok(r)
    }
}

/// The bytes of [`MvccRequest::Install`] of `wb`, without copying its payloads.
pub fn install_request(wb: &WriteBack) -> Vec<u8> {
    atoll_txn::msg::family_request(FAMILY, |e| {
        e.tag(MvccTag::Install);
        wb.encode(e);
    })
}

impl MvccReply {
    /// As a shared reply.
    pub fn into_reply(self) -> Reply {
        atoll_txn::msg::family_reply(FAMILY, |e| match self {
            MvccReply::Refused { index, overflow } => {
                e.tag(MvccReplyTag::Refused);
                e.w(index as u64);
                e.w(overflow as u64);
            }
        })
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "mvcc reply");
        let r = match MvccReplyTag::try_from(d.w()?)? {
            MvccReplyTag::Refused => MvccReply::Refused {
                index: d.u32()?,
                overflow: d.bool()?,
            },
        };
        d.done()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::Words;
    use atoll_storage::TableId;

    #[test]
    fn messages_round_trip_and_truncations_are_rejected() {
        let it = Item {
            table: TableId(3),
            key: 42,
            loc: Some(atoll_txn::msg::Loc(7)),
        };
        for r in [
            MvccRequest::Read {
                ctts: 12,
                items: vec![it, it],
            },
            MvccRequest::Install(WriteBack {
                ts: 1,
                release: true,
                set_ts: 12,
                items: vec![(TableId(0), 1, Words::from_slice(&[9, 8]))],
            }),
        ] {
            let b = r.to_bytes();
            let Ok(Some((FAMILY, body))) = atoll_txn::msg::split_family(&b) else {
                panic!("not an mvcc request")
            };
            assert_eq!(MvccRequest::decode(body), Ok(r.clone()));
            for cut in 0..body.len() {
                assert!(MvccRequest::decode(&body[..cut]).is_err(), "prefix {cut}");
            }
        }
        let reply = MvccReply::Refused {
            index: 3,
            overflow: true,
        };
        let mut b = Vec::new();
        reply.clone().into_reply().encode(&mut b);
        let Ok(Reply::Family {
            family: FAMILY,
            body,
        }) = Reply::decode(&b)
        else {
            panic!("not an mvcc reply")
        };
        assert_eq!(MvccReply::decode(&body), Ok(reply));
    }
}
