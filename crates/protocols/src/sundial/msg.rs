//! SUNDIAL's messages: its lease renewal request (the replies are the shared `Ok` and
//! `Invalid`).

use atoll_storage::TableId;
use atoll_txn::msg::{DecodeError, FamilyId, WordReader, WordWriter};
use atoll_txn::wire_tags;

/// SUNDIAL's family id on the wire.
pub const FAMILY: FamilyId = FamilyId(2);

wire_tags! {
    /// The first word of a SUNDIAL request's body.
    pub enum SundialTag ("sundial request") {
        Renew = 1,
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SundialRequest {
    /// Raise each record's `RTS` to `commit_ts` unless its `WTS` is no longer the one read
    /// (`(table, slot, wts)`) or a writer froze it.
    Renew {
        commit_ts: u64,
        items: Vec<(TableId, u32, u64)>,
    },
}

impl SundialRequest {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            SundialRequest::Renew { commit_ts, items } => {
                e.tag(SundialTag::Renew);
                e.w(*commit_ts);
                e.w(items.len() as u64);
                for (t, loc, wts) in items {
                    e.w(t.0 as u64);
                    e.w(*loc as u64);
                    e.w(*wts);
                }
            }
        }
    }

    /// The bytes of this request, ready to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| self.encode(e))
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "sundial request");
        let r = match SundialTag::try_from(d.w()?)? {
            SundialTag::Renew => {
                let commit_ts = d.w()?;
                let items = d.list(|d| Ok((d.table()?, d.u32()?, d.w()?)))?;
                SundialRequest::Renew { commit_ts, items }
            }
        };
        d.done()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renew_round_trips_and_its_truncations_are_rejected() {
        let r = SundialRequest::Renew {
            commit_ts: 77,
            items: vec![(TableId(1), 2, 3)],
        };
        let b = r.to_bytes();
        let Ok(Some((FAMILY, body))) = atoll_txn::msg::split_family(&b) else {
            panic!("not a sundial request")
        };
        assert_eq!(SundialRequest::decode(body), Ok(r.clone()));
        for cut in 0..body.len() {
            assert!(
                SundialRequest::decode(&body[..cut]).is_err(),
                "prefix {cut}"
            );
        }
    }
}
