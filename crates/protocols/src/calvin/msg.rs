//! CALVIN's messages: a lane's batch of an epoch (dispatch), the values a participant
//! forwards to the active ones (forward), and a node's EPOCH_DONE (barrier). Each is
//! answered with the shared `Ok`.

use atoll_storage::TableId;
use atoll_txn::msg::{DecodeError, FamilyId, WordReader, WordWriter};
use atoll_txn::wire_tags;

/// CALVIN's family id on the wire.
pub const FAMILY: FamilyId = FamilyId(5);

wire_tags! {
    /// The first word of a CALVIN request's body.
    pub enum CalvinTag ("calvin request") {
        Batch = 1,
        Forward = 2,
        EpochDone = 3,
    }
}

/// One sequenced request as it travels: its order key, identity and declared records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Its index in its lane's batch (the order within the batch).
    pub seq: u32,
    pub ty: u16,
    pub tag: u64,
    pub ts: u64,
    pub arrival_ns: u64,
    /// The request's attempt (sequenced again when its records changed).
    pub attempt: u32,
    pub input: Vec<u64>,
    /// `(table, key, write)`.
    pub accesses: Vec<(TableId, u64, bool)>,
}

/// A value a participant read under its locks, forwarded to the active participants.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Value {
    pub table: TableId,
    pub key: u64,
    /// The record's version word when it was read.
    pub version: u64,
    /// Its payload (engine words included), as stored.
    pub data: Vec<u64>,
}

/// Lane `lane` (of `lanes` per node) of node `from`: its requests of `epoch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub epoch: u64,
    pub from: u16,
    pub lane: u32,
    pub lanes: u32,
    /// The sender's lane stops after this epoch (the run's end).
    pub last: bool,
    /// This node is one of the sender's backups (`--replicas` less one): it keeps the batch after
    /// the epoch, for recovery to replay (RCC's asynchronous CRB lists).
    pub keep: bool,
    pub requests: Vec<Request>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CalvinRequest {
    Batch(Batch),
    /// The values node `from` holds of transaction `id` (its place in the epoch's order).
    Forward {
        epoch: u64,
        id: u64,
        from: u16,
        values: Vec<Value>,
    },
    /// Node `from` executed its share of `epoch`.
    EpochDone {
        epoch: u64,
        from: u16,
    },
}

impl CalvinRequest {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        match self {
            CalvinRequest::Batch(b) => {
                e.tag(CalvinTag::Batch);
                e.w(b.epoch);
                e.w(b.from as u64);
                e.w(b.lane as u64);
                e.w(b.lanes as u64);
                e.w(b.last as u64);
                e.w(b.keep as u64);
                e.w(b.requests.len() as u64);
                for r in &b.requests {
                    e.w(r.seq as u64);
                    e.w(r.ty as u64);
                    e.w(r.tag);
                    e.w(r.ts);
                    e.w(r.arrival_ns);
                    e.w(r.attempt as u64);
                    e.words(&r.input);
                    e.w(r.accesses.len() as u64);
                    for (t, k, write) in &r.accesses {
                        e.w(t.0 as u64);
                        e.w(*k);
                        e.w(*write as u64);
                    }
                }
            }
            CalvinRequest::Forward {
                epoch,
                id,
                from,
                values,
            } => {
                e.tag(CalvinTag::Forward);
                e.w(*epoch);
                e.w(*id);
                e.w(*from as u64);
                e.w(values.len() as u64);
                for v in values {
                    e.w(v.table.0 as u64);
                    e.w(v.key);
                    e.w(v.version);
                    e.words(&v.data);
                }
            }
            CalvinRequest::EpochDone { epoch, from } => {
                e.tag(CalvinTag::EpochDone);
                e.w(*epoch);
                e.w(*from as u64);
            }
        }
    }

    /// The bytes of this request, ready to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        atoll_txn::msg::family_request(FAMILY, |e| self.encode(e))
    }

    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(body, "calvin request");
        let node = |d: &mut WordReader<'_>| -> Result<u16, DecodeError> {
            let v = d.w()?;
            u16::try_from(v).map_err(|_| d.error(format!("node {v} out of range")))
        };
        let r = match CalvinTag::try_from(d.w()?)? {
            CalvinTag::Batch => CalvinRequest::Batch(Batch {
                epoch: d.w()?,
                from: node(&mut d)?,
                lane: d.u32()?,
                lanes: d.u32()?,
                last: d.bool()?,
                keep: d.bool()?,
                requests: d.list(|d| {
                    let seq = d.u32()?;
                    let ty = d.w()?;
                    let ty = u16::try_from(ty)
                        .map_err(|_| d.error(format!("transaction type {ty} out of range")))?;
                    Ok(Request {
                        seq,
                        ty,
                        tag: d.w()?,
                        ts: d.w()?,
                        arrival_ns: d.w()?,
                        attempt: d.u32()?,
                        input: d.word_vec()?,
                        accesses: d.list(|d| Ok((d.table()?, d.w()?, d.bool()?)))?,
                    })
                })?,
            }),
            CalvinTag::Forward => CalvinRequest::Forward {
                epoch: d.w()?,
                id: d.w()?,
                from: node(&mut d)?,
                values: d.list(|d| {
                    Ok(Value {
                        table: d.table()?,
                        key: d.w()?,
                        version: d.w()?,
                        data: d.word_vec()?,
                    })
                })?,
            },
            CalvinTag::EpochDone => CalvinRequest::EpochDone {
                epoch: d.w()?,
                from: node(&mut d)?,
            },
        };
        d.done()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calvin_messages_round_trip_and_a_truncated_one_is_a_typed_error() {
        let msgs = [
            CalvinRequest::Batch(Batch {
                epoch: 7,
                from: 1,
                lane: 3,
                lanes: 8,
                last: true,
                keep: true,
                requests: vec![Request {
                    seq: 0,
                    ty: 2,
                    tag: 99,
                    ts: 1234,
                    arrival_ns: 55,
                    attempt: 2,
                    input: vec![1, 2, 3],
                    accesses: vec![(TableId(0), 5, true), (TableId(1), 6, false)],
                }],
            }),
            CalvinRequest::Forward {
                epoch: 7,
                id: 42,
                from: 0,
                values: vec![Value {
                    table: TableId(1),
                    key: 6,
                    version: 3,
                    data: vec![9; 5],
                }],
            },
            CalvinRequest::EpochDone { epoch: 7, from: 1 },
        ];
        for m in msgs {
            let mut b = Vec::new();
            m.encode(&mut WordWriter(&mut b));
            assert_eq!(CalvinRequest::decode(&b).unwrap(), m);
            let cut = &b[..b.len() - 8];
            assert!(CalvinRequest::decode(cut).is_err(), "{m:?} cut short");
        }
    }
}
