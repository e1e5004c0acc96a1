//! SBVS's cache-unit stamps (Tell §5.5.3) in the store: a region of
//! [`SBVS_STAMPS`](super::config::SBVS_STAMPS) words on every storage node, a unit's stamp
//! the word its table and unit (`key / --sbvs-unit`) hash to. Tell keeps a version set per
//! unit; a reader only ever compares it with the one it buffered under, so a counter every
//! update bumps carries the same answer in one word (and a READ or FETCH_ADD reaches it).
//!
//! The order that makes a buffered record valid ([`super::buffer`]): a writer bumps its
//! units' stamps after its record puts (or its undo) and before it tells the commit
//! manager; a reader reads the stamp after taking `V_max` and before fetching the record.
//! Both go by their stage's primitive: reads by the read stage's (READ, or a request per
//! storage node), bumps by the commit stage's (FETCH_ADD, or a request).

use super::config::{SBVS_REGION, SBVS_STAMPS};
use super::msg::{TellReply, TellRequest};
use atoll_fabric::{NodeId, RegionId, RemotePtr};
use atoll_storage::{Catalog, TableId};
use atoll_txn::{Abort, EntryState, Primitive, Stage, TxnCore};

/// Multiplier of the stamp hash (the 64-bit golden ratio), spreading consecutive units of
/// one table and the same unit of different tables over the region.
const HASH_MUL: u64 = 0x9E37_79B9_7F4A_7C15;

/// The word of the stamp region holding the stamp of `key`'s unit in table `t`.
pub fn stamp_word(t: TableId, key: u64, unit: u64) -> u32 {
    let u = (key / unit) ^ ((t.0 as u64) << 48);
    let h = u.wrapping_mul(HASH_MUL);
    // The high bits are the best mixed; the region's size is a power of two.
    (h >> (u64::BITS - SBVS_STAMPS.trailing_zeros())) as u32
}

/// The stamp region's id (found by name once per request, not per stamp).
fn region(catalog: &Catalog) -> RegionId {
    let i = catalog
        .extra_region_named(SBVS_REGION)
        .expect("tell: --buffering sbvs registers the stamp region");
    catalog.extra_region(i)
}

/// The stamps at `(node, word)` each, bumped first if `bump`: one doorbell of READs or
/// FETCH_ADDs, or a request per node, by `stage`'s primitive.
pub async fn stamps<S: EntryState>(
    tx: &mut TxnCore<'_, S>,
    stage: Stage,
    bump: bool,
    at: &[(NodeId, u32)],
) -> Result<Vec<u64>, Abort> {
    let mut d = tx.c.ep.doorbell_for(at.len());
    if tx.c.plan().get(stage) != Primitive::Rpc {
        let r = region(&tx.c.catalog);
        let ops: Vec<usize> = at
            .iter()
            .map(|&(n, w)| {
                let p = RemotePtr::new(n, r, w);
                if bump {
                    d.fetch_add(p, 1)
                } else {
                    d.read(p, 1)
                }
            })
            .collect();
        let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
        return Ok(ops
            .into_iter()
            .map(|j| {
                if bump {
                    res.fetch_add(j) + 1
                } else {
                    res.read(j)[0]
                }
            })
            .collect());
    }
    let mut nodes: Vec<NodeId> = at.iter().map(|&(n, _)| n).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let asked: Vec<(NodeId, usize)> = nodes
        .iter()
        .map(|&n| {
            let words = at.iter().filter(|a| a.0 == n).map(|a| a.1).collect();
            (n, d.rpc(n, TellRequest::Stamps { bump, words }.to_bytes()))
        })
        .collect();
    let res = d.submit().await.map_err(|e| tx.op_failed(e))?;
    let mut out = vec![0; at.len()];
    for (n, j) in asked {
        let TellReply::Stamps(got) = TellReply::of(res.rpc(j)) else {
            panic!("tell: node {} answered a stamps request otherwise", n.0);
        };
        let mine = at.iter().enumerate().filter(|(_, a)| a.0 == n);
        assert_eq!(
            got.len(),
            mine.clone().count(),
            "tell: node {} answered {} stamps",
            n.0,
            got.len()
        );
        for ((k, _), s) in mine.zip(got) {
            out[k] = s;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tell_sbvs_a_units_keys_share_a_stamp_and_units_spread_over_the_region() {
        assert_eq!(
            stamp_word(TableId(1), 20, 10),
            stamp_word(TableId(1), 29, 10)
        );
        let words: std::collections::HashSet<u32> = (0..1_000u64)
            .map(|u| stamp_word(TableId(0), u * 10, 10))
            .collect();
        assert!(
            words.len() > 990,
            "{} distinct words of 1000 units",
            words.len()
        );
        assert!(words.iter().all(|&w| (w as usize) < SBVS_STAMPS));
        assert_ne!(stamp_word(TableId(0), 0, 10), stamp_word(TableId(1), 0, 10));
    }
}
