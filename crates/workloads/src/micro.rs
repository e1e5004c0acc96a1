//! The hardware-islands microbenchmark (Porobic et al., DaMoN'16 §3, §4.2, §6).
//!
//! One table of rows range-partitioned over the sites, here the nodes: node `n` holds rows
//! `[n * rows_per_node, (n + 1) * rows_per_node)`. A transaction reads (`kind=read`) or
//! updates (`kind=update`: read-modify-write of a counter) `rows` distinct rows, and is one
//! of two types:
//!
//! - **local**: all `rows` rows drawn uniformly from its home node's range;
//! - **multisite** (a share `multisite_fraction` of transactions): one row drawn from the
//!   home node's range and the other `rows − 1` uniformly from the whole table, so it is
//!   distributed only if one of them happens to live elsewhere (the paper's definition).
//!
//! The sensitivity variant (`variant=sensitivity`, the paper's §6 "modified
//! microbenchmark", Fig 8) has two rows: a local transaction takes both from its home
//! node; a multisite one reads one row of another node (drawn uniformly from the other
//! nodes' rows) and takes the other from its home node. Under `kind=update` the home row is
//! updated and the other only read (the remote fragment is read-only), under `kind=read`
//! both are read.
//!
//! Rows hold 104 bytes (the seed notes' 100-byte row, rounded up to whole words), written as
//! YCSB's records are ([`crate::ycsb::counted_payload`]): word 0 counts the committed
//! updates of the row and the other words are a function of key and count. The checks are
//! YCSB's, from the final state: every row's count equals its committed updates and its
//! words are that update's. Which transactions committed as local or multisite, and how
//! many of them touched another node, the report measures from what they accessed.

use crate::params::{Knobs, ParamError, Params};
use crate::ycsb::{self, Effect, Ledger, NodeCheck};
use crate::{AccessMode, AccessSet, CheckResult, InputDecodeError, TxnInput, Workload};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::ENGINE_PAYLOAD_WORDS;
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use std::collections::BTreeMap;

pub const ROWS: TableId = TableId(0);
/// Transaction types, as `generate` returns them.
pub const TYPES: [&str; 2] = ["local", "multisite"];
pub const LOCAL_TYPE: usize = 0;
pub const MULTISITE_TYPE: usize = 1;

/// Rows per transaction: the paper's Fig 3 spans 2 to 100.
pub const ROWS_MIN: u64 = 2;
pub const ROWS_MAX: u64 = 100;
/// The paper's smallest transaction, which §5.2, §6 and the sensitivity analysis use.
const ROWS_DEFAULT: u64 = 2;
/// The sensitivity variant's transaction: one row read, one read or updated.
const SENSITIVITY_ROWS: u64 = 2;
/// "10 000 rows per core" (§4.1): one site per node here.
const ROWS_PER_NODE_DEFAULT: u64 = 10_000;
/// Most rows per node (as YCSB's records).
const ROWS_PER_NODE_MAX: u64 = 100_000_000;
/// The paper's multisite mixes (§5.2, §6's read-only runs) hold 20% multisite transactions.
const MULTISITE_FRACTION_DEFAULT: f64 = 0.2;
/// Bytes per row, engine words included: the seed notes' 100 B rounded up to whole words.
const ROW_BYTES: u64 = 104;
const WORD_BYTES: u64 = 8;
/// Draws per row before a transaction's remaining rows are taken in order from a random one
/// on: plenty when the range holds several times the rows, short when it holds barely as
/// many.
const DRAWS_PER_ROW_MAX: u64 = 64;

const KINDS: [&str; 2] = ["read", "update"];
const VARIANTS: [&str; 2] = ["standard", "sensitivity"];

#[derive(Clone, Debug)]
pub struct Micro {
    pub rows: u64,
    pub rows_per_node: u64,
    /// Update transactions (read-modify-write), else read-only.
    pub update: bool,
    pub multisite_fraction: f64,
    pub sensitivity: bool,
    nodes: u16,
}

/// One transaction: rows with a flag each, set for an update.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Input {
    pub ops: Vec<(u64, bool)>,
}

/// Encoded as the row count, then per row its key and 1 for an update, 0 for a read.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        out.push(self.ops.len() as u64);
        for &(k, u) in &self.ops {
            out.extend([k, u as u64]);
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut w = crate::Words::new(Micro::NAME, words);
        let n = w.next()?;
        if n > ROWS_MAX {
            return Err(w.error(format!("{n} rows, at most {ROWS_MAX} allowed")));
        }
        let mut ops = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let key = w.next()?;
            let update = match w.next()? {
                0 => false,
                1 => true,
                f => return Err(w.error(format!("update flag {f} of row {key}, expected 0 or 1"))),
            };
            ops.push((key, update));
        }
        w.end()?;
        Ok(Input { ops })
    }
}

impl Micro {
    pub const KNOBS: &'static [&'static str] = &[
        "rows",
        "rows_per_node",
        "kind",
        "multisite_fraction",
        "variant",
    ];

    pub fn from_params(p: &Params, nodes: u16) -> Result<Self, ParamError> {
        let k = Knobs::new(Micro::NAME, p, Self::KNOBS)?;
        let sensitivity = k.choice("variant", VARIANTS[0], &VARIANTS)? == VARIANTS[1];
        let rows = k.u64("rows", ROWS_DEFAULT, ROWS_MIN, ROWS_MAX)?;
        if sensitivity && rows != SENSITIVITY_ROWS {
            return Err(ParamError(format!(
                "micro rows={rows} is not accepted with variant=sensitivity: expected rows={SENSITIVITY_ROWS} (it reads one row and reads or updates one more)"
            )));
        }
        let rows_per_node = k.u64("rows_per_node", ROWS_PER_NODE_DEFAULT, 1, ROWS_PER_NODE_MAX)?;
        // A local transaction's rows are distinct rows of one node.
        if rows_per_node < rows {
            return Err(ParamError(format!(
                "micro rows_per_node={rows_per_node} is out of range with rows={rows}: expected rows_per_node in {rows}..={ROWS_PER_NODE_MAX} (a local transaction takes {rows} distinct rows of its node)"
            )));
        }
        let update = k.choice("kind", KINDS[0], &KINDS)? == KINDS[1];
        let multisite_fraction =
            k.f64("multisite_fraction", MULTISITE_FRACTION_DEFAULT, 0.0, 1.0)?;
        if sensitivity && multisite_fraction > 0.0 && nodes < 2 {
            return Err(ParamError(format!(
                "micro variant=sensitivity with multisite_fraction={multisite_fraction} needs another node to read from, but the cluster has {nodes}: expected at least 2 nodes, or multisite_fraction=0"
            )));
        }
        Ok(Micro {
            rows,
            rows_per_node,
            update,
            multisite_fraction,
            sensitivity,
            nodes,
        })
    }

    /// The workload's words of a row: its bytes less the engine's tag and check word.
    fn payload_words(&self) -> usize {
        (ROW_BYTES / WORD_BYTES) as usize - ENGINE_PAYLOAD_WORDS as usize
    }

    /// Rows of node `n`.
    fn range_of(&self, n: u16) -> std::ops::Range<u64> {
        n as u64 * self.rows_per_node..(n as u64 + 1) * self.rows_per_node
    }

    /// Adds `want` rows of `range` (`lo..lo + len`, wrapping over `len`) that `keys` does
    /// not hold yet, drawn uniformly.
    fn draw_distinct(rng: &mut Rng, keys: &mut Vec<u64>, lo: u64, len: u64, want: usize) {
        let target = keys.len() + want;
        let mut attempts = 0;
        while keys.len() < target && attempts < want as u64 * DRAWS_PER_ROW_MAX {
            attempts += 1;
            let k = lo + rng.below(len);
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        // Rarely (a range barely larger than the rows): the next free rows from a random one
        // on; `from_params` made every range hold enough.
        let mut off = rng.below(len);
        while keys.len() < target {
            let k = lo + off;
            if !keys.contains(&k) {
                keys.push(k);
            }
            off = (off + 1) % len;
        }
    }

    /// The transaction's rows: home rows first.
    fn draw(&self, rng: &mut Rng, nodes: u16, home: NodeId, multisite: bool) -> Vec<u64> {
        let mut keys = Vec::with_capacity(self.rows as usize);
        let home_lo = self.range_of(home.0).start;
        let rest = self.rows as usize - 1;
        Self::draw_distinct(rng, &mut keys, home_lo, self.rows_per_node, 1);
        if !multisite {
            Self::draw_distinct(rng, &mut keys, home_lo, self.rows_per_node, rest);
        } else if self.sensitivity {
            // A row of another node: the nodes after home, wrapping, hold the rows after
            // its range.
            let others = self.rows_per_node * (nodes as u64 - 1);
            let k = (self.range_of(home.0).end + rng.below(others))
                % (self.rows_per_node * nodes as u64);
            keys.push(k);
        } else {
            Self::draw_distinct(rng, &mut keys, 0, self.rows_per_node * nodes as u64, rest);
        }
        keys
    }
}

impl Workload for Micro {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = "micro";
    const DECLARES_KEYS: bool = true;
    const ABOUT: &'static str = "the hardware-islands local/multisite microbenchmark";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] =
        &[("rows_per_node", "20"), ("multisite_fraction", "0.5")];

    fn configure(p: &Params, shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        Micro::from_params(p, shape.nodes)
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TYPES
    }

    fn tables(&self, _nodes: u16) -> Vec<TableSpec> {
        vec![TableSpec {
            // Rows are only read and updated.
            gone_keys_max_per_node: 0,
            name: "rows".into(),
            payload_words: self.payload_words() as u32,
            capacity_per_node: self.rows_per_node as u32,
            capacity_max_per_node: Some(self.rows_per_node as u32),
            partition: Partition::Range {
                keys_per_node: self.rows_per_node,
            },
            ordered: false,
        }]
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        let mut payload = vec![0u64; self.payload_words()];
        for k in self.range_of(store.node.0) {
            ycsb::counted_payload(k, 0, &mut payload);
            store.insert(ROWS, k, &payload)?;
        }
        Ok(())
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        let writes = match (self.update, self.sensitivity) {
            (false, _) => 0,
            (true, false) => self.rows,
            // Only the home row is updated.
            (true, true) => 1,
        };
        vec![ROWS; writes as usize]
    }

    fn generate(&self, rng: &mut Rng, nodes: u16, home: NodeId) -> (usize, Input) {
        let multisite = rng.chance(self.multisite_fraction);
        let keys = self.draw(rng, nodes, home, multisite);
        let ops = keys
            .iter()
            .enumerate()
            .map(|(i, &k)| {
                // The sensitivity variant updates only its home row (drawn first).
                let update = self.update && (!self.sensitivity || i == 0);
                (k, update)
            })
            .collect();
        let ty = if multisite {
            MULTISITE_TYPE
        } else {
            LOCAL_TYPE
        };
        (ty, Input { ops })
    }

    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        Some(AccessSet::new(input.ops.iter().map(|&(k, u)| {
            let mode = if u {
                AccessMode::Write
            } else {
                AccessMode::Read
            };
            (ROWS, k, mode)
        })))
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        // One shot, as the paper's transactions: every row in one batch, then the updates.
        let accesses: Vec<_> = input.ops.iter().map(|&(k, u)| (ROWS, k, u)).collect();
        tx.fetch(&accesses).await?;
        let mut effect = Effect::default();
        for &(k, u) in &input.ops {
            if !u {
                continue;
            }
            let mut p = tx.read_for_update(ROWS, k).await?.to_vec();
            let count = p[0] + 1;
            ycsb::counted_payload(k, count, &mut p);
            tx.write(ROWS, k, &p);
            effect.written_keys.push(k);
        }
        Ok(effect)
    }

    fn record(&self, ledger: &mut Ledger, effect: Effect) {
        for k in effect.written_keys {
            *ledger.writes.entry(k).or_insert(0) += 1;
        }
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        for (k, n) in from.writes {
            *into.writes.entry(k).or_insert(0) += n;
        }
    }

    fn check_node(&self, s: &Store, ledger: &Ledger) -> NodeCheck {
        ycsb::check_counted_records(s, ROWS, self.range_of(s.node.0), ledger)
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, ledger: &Ledger) -> Vec<CheckResult> {
        ycsb::counted_records_verdict("micro.rows_match_committed_updates", parts, ledger)
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("rows".into(), self.rows.to_string()),
            ("rows_per_node".into(), self.rows_per_node.to_string()),
            (
                "table_rows".into(),
                (self.rows_per_node * self.nodes as u64).to_string(),
            ),
            ("row_bytes".into(), ROW_BYTES.to_string()),
            ("kind".into(), KINDS[self.update as usize].into()),
            (
                "multisite_fraction".into(),
                self.multisite_fraction.to_string(),
            ),
            ("variant".into(), VARIANTS[self.sensitivity as usize].into()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micro(kv: &[(&str, &str)], nodes: u16) -> Micro {
        Micro::from_params(&params(kv), nodes).unwrap()
    }

    fn params(kv: &[(&str, &str)]) -> Params {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn node_of(m: &Micro, k: u64) -> u16 {
        (k / m.rows_per_node) as u16
    }

    const DRAWN: usize = 5_000;

    #[test]
    fn micro_a_local_transaction_touches_only_its_home_nodes_rows() {
        let m = micro(
            &[
                ("rows", "20"),
                ("rows_per_node", "50"),
                ("multisite_fraction", "0"),
            ],
            4,
        );
        let mut rng = Rng::new(1);
        for i in 0..DRAWN {
            let home = NodeId((i % 4) as u16);
            let (ty, input) = m.generate(&mut rng, 4, home);
            assert_eq!(ty, LOCAL_TYPE);
            assert_eq!(input.ops.len(), 20);
            assert!(
                input.ops.iter().all(|&(k, _)| node_of(&m, k) == home.0),
                "{input:?} from node {}",
                home.0
            );
        }
    }

    #[test]
    fn micro_a_multisite_transaction_takes_one_home_row_and_the_others_uniformly_from_the_whole_table(
    ) {
        let m = micro(
            &[
                ("rows", "10"),
                ("rows_per_node", "1000"),
                ("multisite_fraction", "1"),
            ],
            4,
        );
        let mut rng = Rng::new(2);
        let mut per_node = [0u64; 4];
        let mut distributed = 0;
        for _ in 0..DRAWN {
            let (ty, input) = m.generate(&mut rng, 4, NodeId(1));
            assert_eq!(ty, MULTISITE_TYPE);
            assert_eq!(node_of(&m, input.ops[0].0), 1, "the first row is home's");
            for &(k, _) in &input.ops[1..] {
                per_node[node_of(&m, k) as usize] += 1;
            }
            distributed += input.ops.iter().any(|&(k, _)| node_of(&m, k) != 1) as u64;
        }
        // The other 9 rows land on each of the 4 nodes a quarter of the time.
        let all: u64 = per_node.iter().sum();
        for n in per_node {
            let share = n as f64 / all as f64;
            assert!((share - 0.25).abs() < 0.02, "{per_node:?}");
        }
        // A multisite transaction is local only if all 9 land home: 0.25^9.
        assert!(distributed as usize >= DRAWN - 1, "{distributed}");
    }

    #[test]
    fn micro_every_transaction_has_distinct_rows_even_when_a_node_holds_barely_enough() {
        for kv in [
            vec![
                ("rows", "100"),
                ("rows_per_node", "100"),
                ("multisite_fraction", "0"),
            ],
            vec![
                ("rows", "100"),
                ("rows_per_node", "100"),
                ("multisite_fraction", "1"),
            ],
            vec![
                ("rows", "2"),
                ("rows_per_node", "2"),
                ("multisite_fraction", "0.5"),
            ],
        ] {
            let m = micro(&kv, 2);
            let mut rng = Rng::new(3);
            for _ in 0..200 {
                let mut ks: Vec<u64> = m
                    .generate(&mut rng, 2, NodeId(0))
                    .1
                    .ops
                    .iter()
                    .map(|o| o.0)
                    .collect();
                ks.sort_unstable();
                ks.dedup();
                assert_eq!(ks.len(), m.rows as usize, "{kv:?}");
                assert!(ks.iter().all(|&k| k < 2 * m.rows_per_node));
            }
        }
    }

    #[test]
    fn micro_multisite_fraction_is_the_share_of_multisite_transactions_and_kind_sets_updates() {
        let m = micro(
            &[
                ("rows", "4"),
                ("multisite_fraction", "0.25"),
                ("kind", "update"),
            ],
            2,
        );
        let mut rng = Rng::new(4);
        let mut multisite = 0;
        for _ in 0..DRAWN * 4 {
            let (ty, input) = m.generate(&mut rng, 2, NodeId(0));
            multisite += (ty == MULTISITE_TYPE) as u64;
            assert!(input.ops.iter().all(|o| o.1), "every row updated");
        }
        let share = multisite as f64 / (DRAWN * 4) as f64;
        assert!((share - 0.25).abs() < 0.01, "{share}");
        let r = micro(&[("rows", "4"), ("kind", "read")], 2);
        let input = r.generate(&mut rng, 2, NodeId(0)).1;
        assert!(input.ops.iter().all(|o| !o.1), "read-only: {input:?}");
        assert!(r.largest_write_set().is_empty());
        assert_eq!(m.largest_write_set().len(), 4);
    }

    #[test]
    fn micro_sensitivity_reads_one_row_of_another_node_and_updates_one_home_row() {
        let m = micro(
            &[
                ("variant", "sensitivity"),
                ("kind", "update"),
                ("multisite_fraction", "0.5"),
            ],
            3,
        );
        assert_eq!(m.rows, 2);
        assert_eq!(m.largest_write_set().len(), 1);
        let mut rng = Rng::new(5);
        let mut remote_nodes = [0u64; 3];
        for _ in 0..DRAWN {
            let (ty, input) = m.generate(&mut rng, 3, NodeId(2));
            let [(home_row, home_update), (other, other_update)] = input.ops[..] else {
                panic!("two rows: {input:?}");
            };
            assert_eq!(node_of(&m, home_row), 2);
            assert!(home_update && !other_update, "{input:?}");
            assert_ne!(home_row, other);
            let n = node_of(&m, other);
            if ty == MULTISITE_TYPE {
                assert_ne!(n, 2, "a multisite transaction reads another node's row");
                remote_nodes[n as usize] += 1;
            } else {
                assert_eq!(n, 2, "a local one reads a home row");
            }
        }
        // The remote row comes from either other node alike.
        let (a, b) = (remote_nodes[0] as f64, remote_nodes[1] as f64);
        assert!((a / (a + b) - 0.5).abs() < 0.04, "{remote_nodes:?}");
        let ro = micro(
            &[("variant", "sensitivity"), ("multisite_fraction", "1")],
            2,
        );
        let input = ro.generate(&mut rng, 2, NodeId(0)).1;
        assert!(
            input.ops.iter().all(|o| !o.1),
            "kind=read reads both: {input:?}"
        );
    }

    #[test]
    fn micro_refuses_bad_knobs_naming_the_value_and_what_is_accepted() {
        let err =
            |kv: &[(&str, &str)], nodes| Micro::from_params(&params(kv), nodes).unwrap_err().0;
        let e = err(&[("rows", "1")], 2);
        assert!(e.contains("rows=1") && e.contains("2..=100"), "{e}");
        let e = err(&[("rows", "101")], 2);
        assert!(e.contains("rows=101") && e.contains("2..=100"), "{e}");
        let e = err(&[("rows", "ten")], 2);
        assert!(e.contains("rows=ten") && e.contains("2..=100"), "{e}");
        let e = err(&[("kind", "scan")], 2);
        assert!(e.contains("kind=scan") && e.contains("read, update"), "{e}");
        let e = err(&[("multisite_fraction", "1.5")], 2);
        assert!(
            e.contains("multisite_fraction=1.5") && e.contains("0..=1"),
            "{e}"
        );
        let e = err(&[("variant", "tpcc")], 2);
        assert!(
            e.contains("variant=tpcc") && e.contains("standard, sensitivity"),
            "{e}"
        );
        let e = err(&[("rows", "20"), ("rows_per_node", "10")], 2);
        assert!(e.contains("rows_per_node=10") && e.contains("20..="), "{e}");
        let e = err(&[("variant", "sensitivity"), ("rows", "5")], 2);
        assert!(e.contains("rows=5") && e.contains("rows=2"), "{e}");
        let e = err(&[("variant", "sensitivity")], 1);
        assert!(e.contains("at least 2 nodes"), "{e}");
        assert!(Micro::from_params(
            &params(&[("variant", "sensitivity"), ("multisite_fraction", "0")]),
            1
        )
        .is_ok());
        let e = err(&[("row", "2")], 2);
        assert!(
            e.contains("unknown micro knob 'row'") && e.contains("rows_per_node"),
            "{e}"
        );
    }

    #[test]
    fn micro_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let m = micro(
            &[
                ("rows", "30"),
                ("kind", "update"),
                ("multisite_fraction", "0.5"),
            ],
            3,
        );
        let mut rng = Rng::new(6);
        let mut words = Vec::new();
        for _ in 0..500 {
            let (_, input) = m.generate(&mut rng, 3, NodeId(1));
            words.clear();
            input.encode(&mut words);
            assert_eq!(Input::decode(&words), Ok(input));
        }
        assert!(Input::decode(&[1, 5]).is_err(), "a row without its flag");
        assert!(Input::decode(&[1, 5, 2]).is_err(), "flag 2");
        assert!(Input::decode(&[ROWS_MAX + 1]).is_err());
        assert!(Input::decode(&[1, 5, 1, 0]).is_err(), "a word left over");
    }
}
