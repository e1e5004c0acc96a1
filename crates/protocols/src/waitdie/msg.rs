//! WAITDIE's messages: its lock request (the replies are the shared ones: `Tuples`,
//! `LockFailed`, `NotFound`).

use atoll_txn::msg::{DecodeError, FamilyId, Item, WordReader, WordWriter};
use atoll_txn::wire_tags;

/// WAITDIE's family id on the wire.
pub const FAMILY: FamilyId = FamilyId(1);

wire_tags! {
    /// The first word of a WAITDIE request's body.
    pub enum WaitDieTag ("waitdie request") {
        Lock = 1,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WaitDieRequest {
    /// Lock every item for `ts`: an older requester waits (the reply is held) for a younger
    /// holder; a younger one dies. With a `counter_unit` (not 0), a waiter raises the record's
    /// AUX word by it and requesters that see the word raised die (the starvation fix); the
    /// unit is the requester's node's field of the word
    /// ([`super::config::CounterFields::unit`]), a single bit.
    Lock {
        ts: u64,
        want_data: bool,
        counter_unit: u64,
        items: Vec<Item>,
    },
}

impl WaitDieRequest {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            WaitDieRequest::Lock {
                ts,
                want_data,
                counter_unit,
                items,
            } => Self::encode_lock(e, *ts, *want_data, *counter_unit, items),
        }
    }

    /// The bytes of this request, ready to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| self.encode(e))
    }

    fn encode_lock(
        e: &mut WordWriter<'_>,
        ts: u64,
        want_data: bool,
        counter_unit: u64,
        items: &[Item],
    ) {
        e.tag(WaitDieTag::Lock);
        e.w(ts);
        e.w(want_data as u64);
        e.w(counter_unit);
        e.items(items);
    }

    /// The bytes of [`WaitDieRequest::Lock`] from borrowed items (no vector per request).
    pub fn lock_bytes(ts: u64, want_data: bool, counter_unit: u64, items: &[Item]) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| {
            Self::encode_lock(e, ts, want_data, counter_unit, items)
        })
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "waitdie request");
        let r = match WaitDieTag::try_from(d.w()?)? {
            WaitDieTag::Lock => WaitDieRequest::Lock {
                ts: d.w()?,
                want_data: d.bool()?,
                counter_unit: d.w()?,
                items: d.items()?,
            },
        };
        d.done()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_storage::TableId;

    #[test]
    fn lock_round_trips_and_its_truncations_are_rejected() {
        let r = WaitDieRequest::Lock {
            ts: 9,
            want_data: false,
            counter_unit: 1 << 21,
            items: vec![Item {
                table: TableId(3),
                key: 42,
                loc: Some(atoll_txn::msg::Loc(7)),
            }],
        };
        let b = r.to_bytes();
        let Ok(Some((FAMILY, body))) = atoll_txn::msg::split_family(&b) else {
            panic!("not a waitdie request")
        };
        assert_eq!(WaitDieRequest::decode(body), Ok(r.clone()));
        for cut in 0..body.len() {
            assert!(
                WaitDieRequest::decode(&body[..cut]).is_err(),
                "prefix {cut}"
            );
        }
        let e = WaitDieRequest::decode(&5u64.to_le_bytes()).unwrap_err();
        assert!(
            e.0.contains("unknown waitdie request tag 5 (accepted: 1 Lock)"),
            "{e}"
        );
    }
}
