//! Cycle: a workload whose every transaction preserves invariants that every read can verify
//! on the spot (in the spirit of FoundationDB's Cycle test), built to catch torn reads,
//! lost and misplaced writes, and phantoms, and to drive every path of the [`Txn`] API.
//!
//! Tables:
//! - `pairs`: `pairs` pairs per node. Pair `p` is records `2p` and `2p + 1`, placed by key
//!   modulo the node count, so with two or more nodes a pair always spans two nodes. Each
//!   record holds `record_words` words. Invariant: all words of both records are one value.
//! - `dyn`: per node `ranges` ranges of `range_keys` keys (ordered index, scanned); at load,
//!   every other key of a range is present. By default its slots grow with the keys present
//!   (at most one per key); with a cap (`dyn_slots`, at least the keys loaded) it has that
//!   many slots per node, inserts reuse the slots of deleted keys, and an insert into a full
//!   table aborts (`TableFull`), on purpose.
//! - `guards`: one record per range holding the number of live keys in it. Every
//!   transaction that scans a range, inserts into it or deletes from it first reads the
//!   guard for update (the enclosing row that orders every change to the range, as TPC-C's
//!   district row): that, not the scan itself, is what keeps scans free of phantoms under
//!   every protocol. Invariant: a scan returns exactly the guard's count of keys.
//!
//! Transactions (weights in percent): `pair_update` 20 (read both for update, write a new
//! value), `pair_read` 20 (read-only), `pair_blind` 10 (blind writes, nothing read),
//! `pair_upgrade` 10 (plain reads, then writes: read-to-write upgrades), `pairs_read` 10
//! (two pairs, read-only), `range_scan` 10, `range_insert` 10, `range_delete` 10.
//!
//! A transaction that sees a broken invariant still tries to commit (a protocol may show an
//! attempt inconsistent data as long as it then aborts it); if it commits, that is a failed
//! check, printed with the keys and values it saw.

use crate::params::{Knobs, ParamError, Params};
use crate::{AccessMode, AccessSet, CheckResult, InputDecodeError, TxnInput, Workload};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::ENGINE_PAYLOAD_WORDS;
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

pub const PAIRS: TableId = TableId(0);
pub const DYN: TableId = TableId(1);
pub const GUARDS: TableId = TableId(2);

/// Value of every pair record at load.
const LOADED_VALUE: u64 = 1;
/// Transaction mix in percent, in `TYPES` order.
const MIX_PERCENT: [u64; 8] = [20, 20, 10, 10, 10, 10, 10, 10];
const TYPES: [&str; 8] = [
    "pair_update",
    "pair_read",
    "pair_blind",
    "pair_upgrade",
    "pairs_read",
    "range_scan",
    "range_insert",
    "range_delete",
];

#[derive(Clone, Debug)]
pub struct Cycle {
    pub pairs: u64,
    pub record_words: u64,
    pub ranges: u64,
    pub range_keys: u64,
    /// Record slots of `dyn` per node.
    /// Slots of `dyn` per node, a cap inserts fill on purpose; `None`: it grows.
    pub dyn_slots: Option<u64>,
    nodes: u16,
}

/// One transaction's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    PairUpdate { p: u64, value: u64 },
    PairRead { p: u64 },
    PairBlind { p: u64, value: u64 },
    PairUpgrade { p: u64, value: u64 },
    PairsRead { p: u64, q: u64 },
    RangeScan { r: u64 },
    RangeInsert { r: u64, pick: u64 },
    RangeDelete { r: u64, pick: u64 },
}

/// Encoded as the transaction type's index in `TYPES`, then its fields in order.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        match *self {
            Input::PairUpdate { p, value } => out.extend([0, p, value]),
            Input::PairRead { p } => out.extend([1, p]),
            Input::PairBlind { p, value } => out.extend([2, p, value]),
            Input::PairUpgrade { p, value } => out.extend([3, p, value]),
            Input::PairsRead { p, q } => out.extend([4, p, q]),
            Input::RangeScan { r } => out.extend([5, r]),
            Input::RangeInsert { r, pick } => out.extend([6, r, pick]),
            Input::RangeDelete { r, pick } => out.extend([7, r, pick]),
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut w = crate::Words::new(Cycle::NAME, words);
        let kind = w.next()?;
        let a = w.next()?;
        let input = match kind {
            0 => Input::PairUpdate {
                p: a,
                value: w.next()?,
            },
            1 => Input::PairRead { p: a },
            2 => Input::PairBlind {
                p: a,
                value: w.next()?,
            },
            3 => Input::PairUpgrade {
                p: a,
                value: w.next()?,
            },
            4 => Input::PairsRead { p: a, q: w.next()? },
            5 => Input::RangeScan { r: a },
            6 => Input::RangeInsert {
                r: a,
                pick: w.next()?,
            },
            7 => Input::RangeDelete {
                r: a,
                pick: w.next()?,
            },
            kind => return Err(w.error(format!("unknown transaction type {kind}"))),
        };
        w.end()?;
        Ok(input)
    }
}

/// What a committed transaction saw.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// The invariant it saw broken, with the keys and values, if any.
    pub broken_invariant: Option<String>,
}

/// Committed transactions that saw a broken invariant.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub broken: u64,
    pub examples: Vec<String>,
}

/// What a node found in one record of a pair: its first word, and whether every word
/// equals it (`None`: the record is missing).
pub type PairWord = Option<(u64, bool)>;

/// One node's part of the checks: the pair records it holds (pairs span nodes, so the
/// driver compares them), and its ranges against their guards.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCheck {
    /// `(key, what it holds)` for every pair key on this node, in key order.
    pub pair_words: Vec<(u64, PairWord)>,
    pub ranges: u64,
    pub bad_ranges: u64,
    pub range_examples: Vec<String>,
}

impl Cycle {
    pub const KNOBS: &'static [&'static str] =
        &["pairs", "record_words", "ranges", "range_keys", "dyn_slots"];

    pub fn from_params(p: &Params, nodes: u16) -> Result<Self, ParamError> {
        let k = Knobs::new("cycle", p, Self::KNOBS)?;
        let pairs = k.u64("pairs", 32, 1, 10_000_000)?;
        let record_words = k.u64("record_words", 4, 1, 512)?;
        let ranges = k.u64("ranges", 4, 1, 1_000_000)?;
        let range_keys = k.u64("range_keys", 16, 2, 4096)?;
        let keys = ranges * range_keys;
        // At least the keys loaded (every other key of each range), at most one per key.
        let dyn_slots = k.cap("dyn_slots", ranges * range_keys.div_ceil(2), keys)?;
        Ok(Cycle {
            pairs,
            record_words,
            ranges,
            range_keys,
            dyn_slots,
            nodes,
        })
    }

    fn pairs_total(&self) -> u64 {
        self.pairs * self.nodes as u64
    }

    fn keys_per_node(&self) -> u64 {
        self.ranges * self.range_keys
    }

    /// Keys of `dyn` present at load on each node: every other key of each range.
    fn loaded_per_node(&self) -> u64 {
        self.ranges * self.range_keys.div_ceil(2)
    }

    /// The keys of global range `r`: `[lo, hi]`.
    fn range_keys_of(&self, r: u64) -> (u64, u64) {
        let lo = r * self.range_keys;
        (lo, lo + self.range_keys - 1)
    }

    fn pair_keys(p: u64) -> [u64; 2] {
        [2 * p, 2 * p + 1]
    }

    /// Reads both records of pair `p` (fetched before) and says what breaks the invariant.
    fn verify_pair<P: Protocol>(&self, tx: &Txn<'_, P>, p: u64) -> Option<String> {
        let [x, y] = Self::pair_keys(p);
        let (a, b) = (tx.get(PAIRS, x)?, tx.get(PAIRS, y)?);
        let uniform = |w: &[u64]| w.iter().all(|v| *v == w[0]);
        (!uniform(a) || !uniform(b) || a[0] != b[0])
            .then(|| format!("pair {p}: record {x} holds {a:?}, record {y} holds {b:?}"))
    }

    async fn pair_fetch<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        ps: &[u64],
        for_update: bool,
    ) -> Result<Option<String>, Abort> {
        let accesses: smallvec::SmallVec<[(TableId, u64, bool); 4]> = ps
            .iter()
            .flat_map(|&p| Self::pair_keys(p).map(|k| (PAIRS, k, for_update)))
            .collect();
        tx.fetch(&accesses).await?;
        Ok(ps.iter().find_map(|&p| self.verify_pair(tx, p)))
    }

    fn write_pair<P: Protocol>(&self, tx: &mut Txn<'_, P>, p: u64, value: u64) {
        let words = vec![value; self.record_words as usize];
        for k in Self::pair_keys(p) {
            tx.write(PAIRS, k, &words);
        }
    }

    /// Locks range `r`'s guard (read for update), scans the range, and checks the count.
    /// Returns the guard's count, the keys seen, and what broke, if anything.
    async fn range_open<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        r: u64,
    ) -> Result<(u64, Vec<u64>, Option<String>), Abort> {
        let count = tx.read_for_update(GUARDS, r).await?[0];
        let (lo, hi) = self.range_keys_of(r);
        let keys = tx.scan(DYN, lo, hi, self.range_keys as u32, false).await?;
        let broken = (keys.len() as u64 != count).then(|| {
            format!(
                "range {r} [{lo}, {hi}]: the guard counts {count} keys, the scan returned {} ({keys:?})",
                keys.len()
            )
        });
        Ok((count, keys, broken))
    }
}

impl Workload for Cycle {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = "cycle";
    const DELETES: bool = true;
    const INSERTS: bool = true;
    /// The pair transactions' from their input, the range ones' by a trial run.
    const DECLARES_KEYS: bool = true;
    fn full_table_expected(&self) -> bool {
        self.dyn_slots.is_some()
    }
    const ABOUT: &'static str = "pairs whose invariant every read checks";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] =
        &[("pairs", "6"), ("ranges", "2"), ("range_keys", "8")];

    fn configure(p: &Params, shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        Cycle::from_params(p, shape.nodes)
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        // A pair's two records (`record_words` >= 1 each) outweigh a range's guard and key
        // (one word each); no transaction writes more records than two.
        vec![PAIRS, PAIRS]
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TYPES
    }

    fn tables(&self, nodes: u16) -> Vec<TableSpec> {
        let _ = nodes;
        vec![
            TableSpec {
                name: "pairs".into(),
                payload_words: self.record_words as u32,
                capacity_per_node: (2 * self.pairs) as u32,
                capacity_max_per_node: Some((2 * self.pairs) as u32),
                partition: Partition::Modulo,
                ordered: false,
                gone_keys_max_per_node: 0,
            },
            TableSpec {
                name: "dyn".into(),
                payload_words: 1,
                capacity_per_node: self.dyn_slots.unwrap_or(self.loaded_per_node()) as u32,
                capacity_max_per_node: self.dyn_slots.map(|s| s as u32),
                partition: Partition::Range {
                    keys_per_node: self.keys_per_node(),
                },
                ordered: true,
                // At most every key of the node's ranges (each one once).
                gone_keys_max_per_node: self.keys_per_node() as u32,
            },
            TableSpec {
                name: "guards".into(),
                payload_words: 1,
                capacity_per_node: self.ranges as u32,
                capacity_max_per_node: Some(self.ranges as u32),
                partition: Partition::Range {
                    keys_per_node: self.ranges,
                },
                ordered: false,
                gone_keys_max_per_node: 0,
            },
        ]
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        let node = store.node.0 as u64;
        let words = vec![LOADED_VALUE; self.record_words as usize];
        for k in 0..2 * self.pairs_total() {
            if k % self.nodes as u64 == node {
                store.insert(PAIRS, k, &words)?;
            }
        }
        for r in node * self.ranges..(node + 1) * self.ranges {
            let (lo, hi) = self.range_keys_of(r);
            let mut live = 0;
            for k in (lo..=hi).step_by(2) {
                store.insert(DYN, k, &[k])?;
                live += 1;
            }
            store.insert(GUARDS, r, &[live])?;
        }
        Ok(())
    }

    fn generate(&self, rng: &mut Rng, nodes: u16, _home: NodeId) -> (usize, Input) {
        let mut roll = rng.below(100);
        let mut ty = 0;
        while roll >= MIX_PERCENT[ty] {
            roll -= MIX_PERCENT[ty];
            ty += 1;
        }
        let pairs = self.pairs_total();
        let ranges = self.ranges * nodes as u64;
        // Values never repeat the loaded one, so a read of a loaded record is told apart.
        let value = rng.next_u64() | 2;
        let p = rng.below(pairs);
        let input = match ty {
            0 => Input::PairUpdate { p, value },
            1 => Input::PairRead { p },
            2 => Input::PairBlind { p, value },
            3 => Input::PairUpgrade { p, value },
            4 => {
                let q = if pairs > 1 {
                    (p + 1 + rng.below(pairs - 1)) % pairs
                } else {
                    p
                };
                Input::PairsRead { p, q }
            }
            5 => Input::RangeScan {
                r: rng.below(ranges),
            },
            6 => Input::RangeInsert {
                r: rng.below(ranges),
                pick: rng.next_u64(),
            },
            _ => Input::RangeDelete {
                r: rng.below(ranges),
                pick: rng.next_u64(),
            },
        };
        (ty, input)
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        let broken_invariant = match *input {
            Input::PairUpdate { p, value } => {
                let broken = self.pair_fetch(tx, &[p], true).await?;
                self.write_pair(tx, p, value);
                broken
            }
            Input::PairRead { p } => self.pair_fetch(tx, &[p], false).await?,
            Input::PairBlind { p, value } => {
                self.write_pair(tx, p, value);
                None
            }
            Input::PairUpgrade { p, value } => {
                let [x, y] = Self::pair_keys(p);
                tx.read(PAIRS, x).await?;
                tx.read(PAIRS, y).await?;
                let broken = self.verify_pair(tx, p);
                self.write_pair(tx, p, value);
                broken
            }
            Input::PairsRead { p, q } => self.pair_fetch(tx, &[p, q], false).await?,
            Input::RangeScan { r } => {
                let (count, _, broken) = self.range_open(tx, r).await?;
                // Written back unchanged: the guard was read for update to order the scan.
                tx.write(GUARDS, r, &[count]);
                broken
            }
            Input::RangeInsert { r, pick } => {
                let (count, keys, broken) = self.range_open(tx, r).await?;
                let (lo, hi) = self.range_keys_of(r);
                let free: Vec<u64> = (lo..=hi).filter(|k| !keys.contains(k)).collect();
                if free.is_empty() {
                    tx.write(GUARDS, r, &[count]);
                } else {
                    let k = free[(pick % free.len() as u64) as usize];
                    tx.insert(DYN, k, &[k]);
                    tx.write(GUARDS, r, &[count + 1]);
                }
                broken
            }
            Input::RangeDelete { r, pick } => {
                let (count, keys, broken) = self.range_open(tx, r).await?;
                if keys.is_empty() {
                    tx.write(GUARDS, r, &[count]);
                } else {
                    let k = keys[(pick % keys.len() as u64) as usize];
                    tx.delete(DYN, k).await?;
                    tx.write(GUARDS, r, &[count.saturating_sub(1)]);
                }
                broken
            }
        };
        Ok(Effect { broken_invariant })
    }

    fn sequenced_refusal(&self) -> Option<String> {
        self.dyn_slots
            .map(|n| crate::capped_table_refusal("cycle", "dyn_slots", n, "table dyn"))
    }

    /// A range transaction's records: what a trial run touches now (Calvin's OLLP). Its
    /// guard, read for update, orders every change to the range, so the execution scans
    /// what its order makes of it; if that is not what the trial found, it touches an
    /// undeclared record and is sequenced again.
    async fn reconnoiter<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Option<AccessSet>, Abort> {
        let trial = self.execute(tx, input).await;
        crate::touched(tx, trial)
    }

    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        use AccessMode::{Read, Write};
        let pair = |p: u64, mode| Self::pair_keys(p).map(|k| (PAIRS, k, mode));
        Some(AccessSet::new(match *input {
            Input::PairUpdate { p, .. }
            | Input::PairBlind { p, .. }
            | Input::PairUpgrade { p, .. } => pair(p, Write).to_vec(),
            Input::PairRead { p } => pair(p, Read).to_vec(),
            Input::PairsRead { p, q } => [pair(p, Read), pair(q, Read)].concat(),
            // A range's keys come from its scan.
            Input::RangeScan { .. } | Input::RangeInsert { .. } | Input::RangeDelete { .. } => {
                return None
            }
        }))
    }

    fn record(&self, ledger: &mut Ledger, effect: Effect) {
        if let Some(b) = effect.broken_invariant {
            ledger.broken += 1;
            if ledger.examples.len() < crate::EXAMPLES_MAX {
                ledger.examples.push(b);
            }
        }
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        into.broken += from.broken;
        for e in from.examples {
            if into.examples.len() < crate::EXAMPLES_MAX {
                into.examples.push(e);
            }
        }
    }

    fn check_node(&self, s: &Store, _ledger: &Ledger) -> NodeCheck {
        let mut c = NodeCheck::default();
        let mut payload = Vec::new();
        let mut read = |k: u64, t: TableId| -> Option<Vec<u64>> {
            let idx = s.lookup(t, k)?;
            s.read_payload(t, idx, &mut payload);
            Some(payload[ENGINE_PAYLOAD_WORDS as usize..].to_vec())
        };
        for k in (0..2 * self.pairs_total()).filter(|&k| s.catalog.holds(PAIRS, k, s.node)) {
            let word = read(k, PAIRS).map(|w| (w[0], w.iter().all(|v| *v == w[0])));
            c.pair_words.push((k, word));
        }
        for r in s.node.0 as u64 * self.ranges..(s.node.0 as u64 + 1) * self.ranges {
            c.ranges += 1;
            let (lo, hi) = self.range_keys_of(r);
            let mut live = Vec::new();
            if let Err(e) = s.scan(DYN, lo, hi, usize::MAX, false, &mut live) {
                c.bad_ranges += 1;
                crate::push_example(&mut c.range_examples, || format!("range {r}: {e}"));
                continue;
            }
            let by_lookup = (lo..=hi).filter(|&k| s.lookup(DYN, k).is_some()).count();
            let guard = read(r, GUARDS).map(|g| g[0]);
            if guard != Some(live.len() as u64) || by_lookup != live.len() {
                c.bad_ranges += 1;
                crate::push_example(&mut c.range_examples, || {
                    format!(
                        "range {r}: guard {guard:?}, ordered index {} keys, hash index {by_lookup}",
                        live.len()
                    )
                });
            }
        }
        c
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, ledger: &Ledger) -> Vec<CheckResult> {
        let (mut ranges, mut bad_ranges, mut range_examples) = (0u64, 0u64, Vec::new());
        let mut words: HashMap<u64, PairWord> = HashMap::new();
        for p in parts {
            ranges += p.ranges;
            bad_ranges += p.bad_ranges;
            for e in p.range_examples {
                crate::push_example(&mut range_examples, || e);
            }
            words.extend(p.pair_words);
        }
        let (mut bad_pairs, mut examples) = (0u64, Vec::new());
        for p in 0..self.pairs_total() {
            let [x, y] = Self::pair_keys(p);
            let (a, b) = (
                words.get(&x).copied().flatten(),
                words.get(&y).copied().flatten(),
            );
            let ok = matches!((a, b), (Some((va, true)), Some((vb, true))) if va == vb);
            if !ok {
                bad_pairs += 1;
                crate::push_example(&mut examples, || {
                    format!("pair {p}: {x} = {a:?}, {y} = {b:?} (first word, all words equal)")
                });
            }
        }
        vec![
            CheckResult {
                name: "cycle.no_committed_broken_invariant".into(),
                binds: crate::Binds::Always,
                passed: ledger.broken == 0,
                detail: if ledger.broken == 0 {
                    "no committed transaction saw a broken pair or a scan that disagreed with its guard".into()
                } else {
                    format!(
                        "{} committed transactions saw a broken invariant: {}",
                        ledger.broken,
                        ledger.examples.join("; ")
                    )
                },
            },
            CheckResult {
                name: "cycle.pairs_consistent".into(),
                binds: crate::Binds::Always,
                passed: bad_pairs == 0,
                detail: if bad_pairs == 0 {
                    format!(
                        "all {} pairs hold one value in every word",
                        self.pairs_total()
                    )
                } else {
                    format!("{bad_pairs} pairs differ: {}", examples.join("; "))
                },
            },
            CheckResult {
                name: "cycle.guards_count_live_keys".into(),
                binds: crate::Binds::Always,
                passed: bad_ranges == 0,
                detail: if bad_ranges == 0 {
                    format!("every range's guard equals its live keys in both indexes ({ranges} ranges)")
                } else {
                    format!(
                        "{bad_ranges} ranges disagree: {}",
                        range_examples.join("; ")
                    )
                },
            },
        ]
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("pairs".into(), self.pairs.to_string()),
            ("record_words".into(), self.record_words.to_string()),
            ("ranges".into(), self.ranges.to_string()),
            ("range_keys".into(), self.range_keys.to_string()),
            (
                "dyn_slots".into(),
                self.dyn_slots.map_or("none".into(), |s| s.to_string()),
            ),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycle_dyn_grows_by_default_and_a_dyn_slots_cap_fixes_it_and_is_expected_to_fill() {
        let grows = Cycle::from_params(&Params::new(), 2).unwrap();
        let spec = &grows.tables(2)[DYN.0 as usize];
        assert_eq!(spec.capacity_max_per_node, None);
        assert_eq!(spec.capacity_per_node as u64, grows.loaded_per_node());
        assert!(!grows.full_table_expected());
        let mut p = Params::new();
        p.insert("dyn_slots".into(), "40".into());
        let capped = Cycle::from_params(&p, 2).unwrap();
        let spec = &capped.tables(2)[DYN.0 as usize];
        assert_eq!(spec.capacity_max_per_node, Some(40));
        assert!(capped.full_table_expected());
        p.insert("dyn_slots".into(), "10".into());
        let e = Cycle::from_params(&p, 2).unwrap_err().to_string();
        assert!(e.contains("dyn_slots"), "{e}");
    }

    #[test]
    fn cycle_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let c = Cycle::from_params(&Params::new(), 3).unwrap();
        let mut rng = Rng::new(4);
        let mut words = Vec::new();
        let mut kinds = std::collections::BTreeSet::new();
        for _ in 0..5_000 {
            let (ty, input) = c.generate(&mut rng, 3, NodeId(0));
            kinds.insert(ty);
            words.clear();
            input.encode(&mut words);
            assert_eq!(words[0], ty as u64, "the type's index leads");
            assert_eq!(Input::decode(&words), Ok(input));
        }
        assert_eq!(kinds.len(), TYPES.len(), "every type drawn");
        assert!(Input::decode(&[8, 1]).is_err(), "unknown type");
        assert!(
            Input::decode(&[0, 1]).is_err(),
            "pair_update without its value"
        );
        assert!(Input::decode(&[5, 1, 1]).is_err(), "a word left over");
    }
}
