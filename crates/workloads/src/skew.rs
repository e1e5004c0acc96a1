//! Skew: a write-skew probe (Berenson et al., "A Critique of ANSI SQL Isolation Levels",
//! SIGMOD 1995, anomaly A5B; Fekete et al., "Making Snapshot Isolation Serializable", TODS
//! 2005: two doctors on call, each may go off call if the other is still on).
//!
//! One table, `oncall`, of pairs: pair `p` is records `x_p` (key `2p`) and `y_p` (key
//! `2p + 1`), each a count as a two's-complement `i64`, all `initial` at load. Records are
//! placed by key modulo the node count, so with two or more nodes every pair spans two
//! nodes and the probe crosses them. `pairs` pairs per node (64 by default: few, so two
//! transactions often meet on one pair). The constraint each transaction keeps on its own:
//! `x_p + y_p >= 0`.
//!
//! Transactions (a share `withdraw_fraction` of them withdraw):
//! - **withdraw(p, side)**: reads `x_p` and `y_p`; if `x_p + y_p >= 1`, takes 1 from the
//!   side's record, else writes that record back unchanged (declined). Under
//!   serializability the constraint holds; under snapshot isolation two withdraws of one
//!   pair can each read the other's record before either commits, take 1 from different
//!   records (first-committer-wins sees no common write) and leave the pair at −1: write
//!   skew. The declined case still writes, so the records a withdraw touches follow from its
//!   input alone (the declared access set); rewriting its own record does not hide skew,
//!   which needs two withdraws writing different records.
//! - **deposit(p, side)**: read-modify-write of one record, `+deposit`, so pairs keep
//!   coming back above zero and the run goes on. With `deposit × (1 − withdraw_fraction)`
//!   below `withdraw_fraction` (the defaults: 0.4 against 0.6), sums drift down to the
//!   small values where a withdraw meets another at sum 1, the only sum two withdraws can
//!   take below zero.
//!
//! Checks, from the final state and a ledger of committed transactions' effects (each
//! effect the value written minus the value read, and the pair a withdraw read):
//! - every record equals `initial` plus its committed changes: snapshot isolation keeps
//!   this too (first-committer-wins forbids lost updates), so it binds every run;
//! - every pair's `x + y >= 0` in the final state, and no committed withdraw read a pair
//!   below zero (a later deposit may have repaired the state since): these bind only a
//!   serializable protocol's run ([`Binds::Serializable`]); under snapshot isolation what
//!   they find is reported as write skew observed, which that level allows.

use crate::params::{Knobs, ParamError, Params};
use crate::{
    AccessMode, AccessSet, Binds, CheckResult, InputDecodeError, KeyMap, TxnInput, Workload,
};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::ENGINE_PAYLOAD_WORDS;
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const ONCALL: TableId = TableId(0);
/// Transaction types, as `generate` returns them.
pub const TYPES: [&str; 2] = ["withdraw", "deposit"];
pub const WITHDRAW_TYPE: usize = 0;
pub const DEPOSIT_TYPE: usize = 1;

/// Few pairs per node, so concurrent withdraws often meet on one pair.
const PAIRS_PER_NODE_DEFAULT: u64 = 64;
/// Most pairs per node: every record's value travels to the driver for the pair check (a
/// pair's records live on two nodes), so the probe stays a probe.
const PAIRS_PER_NODE_MAX: u64 = 1_000_000;
/// Both doctors on call at load: one withdraw per pair goes through, then two concurrent
/// ones at sum 1 are the skew.
const INITIAL_DEFAULT: u64 = 1;
const INITIAL_MAX: u64 = 1_000_000_000;
/// Withdraws outnumber deposits, so sums stay near zero (see the module docs).
const WITHDRAW_FRACTION_DEFAULT: f64 = 0.6;
const DEPOSIT_DEFAULT: u64 = 1;
const DEPOSIT_MAX: u64 = 1_000_000;
/// What a withdraw takes, and the pair's sum it needs to see first.
const WITHDRAW_UNITS: i64 = 1;
/// Records per pair, and the side numbers of an input (0: `x`, 1: `y`).
const SIDES: u64 = 2;
/// The records a transaction writes at most (one).
const WRITES_MAX: usize = 1;

#[derive(Clone, Debug)]
pub struct Skew {
    /// Pairs per node.
    pub pairs: u64,
    pub initial: u64,
    pub withdraw_fraction: f64,
    pub deposit: u64,
    nodes: u16,
}

/// One transaction: its pair and the side (0: `x`, 1: `y`) whose record it changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Withdraw { p: u64, side: u64 },
    Deposit { p: u64, side: u64 },
}

/// Encoded as the type's index in [`TYPES`], the pair, the side.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        match *self {
            Input::Withdraw { p, side } => out.extend([WITHDRAW_TYPE as u64, p, side]),
            Input::Deposit { p, side } => out.extend([DEPOSIT_TYPE as u64, p, side]),
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut w = crate::Words::new(Skew::NAME, words);
        let kind = w.next()?;
        let p = w.next()?;
        let side = w.next()?;
        if side >= SIDES {
            return Err(w.error(format!("side {side} of pair {p}: expected 0 (x) or 1 (y)")));
        }
        let input = match kind as usize {
            WITHDRAW_TYPE => Input::Withdraw { p, side },
            DEPOSIT_TYPE => Input::Deposit { p, side },
            _ => {
                return Err(w.error(format!(
                    "unknown transaction type {kind}: expected 0..{}",
                    TYPES.len()
                )))
            }
        };
        w.end()?;
        Ok(input)
    }
}

/// The key of pair `p`'s record on `side` (0: `x`, 1: `y`).
pub fn key(p: u64, side: u64) -> u64 {
    SIDES * p + side
}

/// The pair a record belongs to.
pub fn pair_of(key: u64) -> u64 {
    key / SIDES
}

fn value(words: &[u64]) -> i64 {
    words[0] as i64
}

/// What one committed transaction did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effect {
    /// The record it wrote, and the value written minus the value read.
    pub key: u64,
    pub delta: i64,
    /// A withdraw: what it read of its pair, `(x, y)`.
    pub read_pair: Option<(i64, i64)>,
}

/// Committed changes per record, and what committed withdraws read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub deltas: KeyMap<u64, i64>,
    /// Committed withdraws that took a unit, and those that declined (sum below 1).
    pub withdrawn: u64,
    pub declined: u64,
    /// Committed withdraws that read their pair below zero, the first few named.
    pub read_below_zero: u64,
    pub read_below_zero_examples: Vec<String>,
}

/// One node's part: its records against the ledger, and their values for the pair check.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCheck {
    pub records: u64,
    pub missing: u64,
    pub wrong: u64,
    pub examples: Vec<String>,
    /// The node's records' values in key order (node `n` holds keys `n, n + N, n + 2N, ...`
    /// of `N` nodes); `None` for a missing record.
    pub values: Vec<Option<i64>>,
}

impl Skew {
    pub const KNOBS: &'static [&'static str] =
        &["pairs", "initial", "withdraw_fraction", "deposit"];

    pub fn from_params(p: &Params, nodes: u16) -> Result<Self, ParamError> {
        let k = Knobs::new(Skew::NAME, p, Self::KNOBS)?;
        Ok(Skew {
            pairs: k.u64("pairs", PAIRS_PER_NODE_DEFAULT, 1, PAIRS_PER_NODE_MAX)?,
            initial: k.u64("initial", INITIAL_DEFAULT, 0, INITIAL_MAX)?,
            withdraw_fraction: k.f64("withdraw_fraction", WITHDRAW_FRACTION_DEFAULT, 0.0, 1.0)?,
            deposit: k.u64("deposit", DEPOSIT_DEFAULT, 1, DEPOSIT_MAX)?,
            nodes,
        })
    }

    /// Pairs in the cluster.
    pub fn pairs_total(&self) -> u64 {
        self.pairs * self.nodes as u64
    }

    /// The keys node `n` holds, in key order.
    fn keys_of(&self, n: u16) -> impl Iterator<Item = u64> {
        (n as u64..SIDES * self.pairs_total()).step_by(self.nodes as usize)
    }
}

impl Workload for Skew {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = "skew";
    const DECLARES_KEYS: bool = true;
    const ABOUT: &'static str =
        "a write-skew probe: pairs x + y >= 0, required only of serializable protocols";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] = &[("pairs", "4")];

    fn configure(p: &Params, shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        Skew::from_params(p, shape.nodes)
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TYPES
    }

    fn tables(&self, _nodes: u16) -> Vec<TableSpec> {
        vec![TableSpec {
            // Records are only read and updated.
            gone_keys_max_per_node: 0,
            name: "oncall".into(),
            payload_words: 1,
            // Key modulo N: 2 × pairs × N keys, 2 × pairs on each node.
            capacity_per_node: (SIDES * self.pairs) as u32,
            capacity_max_per_node: Some((SIDES * self.pairs) as u32),
            partition: Partition::Modulo,
            ordered: false,
        }]
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        for k in self.keys_of(store.node.0) {
            store.insert(ONCALL, k, &[self.initial])?;
        }
        Ok(())
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        vec![ONCALL; WRITES_MAX]
    }

    fn generate(&self, rng: &mut Rng, _nodes: u16, _home: NodeId) -> (usize, Input) {
        let p = rng.below(self.pairs_total());
        let side = rng.below(SIDES);
        if rng.chance(self.withdraw_fraction) {
            (WITHDRAW_TYPE, Input::Withdraw { p, side })
        } else {
            (DEPOSIT_TYPE, Input::Deposit { p, side })
        }
    }

    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        use AccessMode::{Read, Write};
        Some(AccessSet::new(match *input {
            Input::Withdraw { p, side } => {
                vec![
                    (ONCALL, key(p, side), Write),
                    (ONCALL, key(p, 1 - side), Read),
                ]
            }
            Input::Deposit { p, side } => vec![(ONCALL, key(p, side), Write)],
        }))
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        match *input {
            Input::Withdraw { p, side } => {
                let (mine, other) = (key(p, side), key(p, 1 - side));
                // Both records in one batch: the one it may write for update, the other read.
                tx.fetch(&[(ONCALL, mine, true), (ONCALL, other, false)])
                    .await?;
                let a = value(&tx.read(ONCALL, mine).await?);
                let b = value(&tx.read(ONCALL, other).await?);
                let new = if a + b >= WITHDRAW_UNITS {
                    a - WITHDRAW_UNITS
                } else {
                    a
                };
                tx.write(ONCALL, mine, &[new as u64]);
                let (x, y) = if side == 0 { (a, b) } else { (b, a) };
                Ok(Effect {
                    key: mine,
                    delta: new - a,
                    read_pair: Some((x, y)),
                })
            }
            Input::Deposit { p, side } => {
                let k = key(p, side);
                let a = value(&tx.read_for_update(ONCALL, k).await?);
                let new = a + self.deposit as i64;
                tx.write(ONCALL, k, &[new as u64]);
                Ok(Effect {
                    key: k,
                    delta: new - a,
                    read_pair: None,
                })
            }
        }
    }

    fn record(&self, ledger: &mut Ledger, e: Effect) {
        *ledger.deltas.entry(e.key).or_insert(0) += e.delta;
        if let Some((x, y)) = e.read_pair {
            if e.delta == 0 {
                ledger.declined += 1;
            } else {
                ledger.withdrawn += 1;
            }
            if x + y < 0 {
                ledger.read_below_zero += 1;
                crate::push_example(&mut ledger.read_below_zero_examples, || {
                    format!("pair {} read as x = {x}, y = {y}", pair_of(e.key))
                });
            }
        }
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        for (k, d) in from.deltas {
            *into.deltas.entry(k).or_insert(0) += d;
        }
        into.withdrawn += from.withdrawn;
        into.declined += from.declined;
        into.read_below_zero += from.read_below_zero;
        for e in from.read_below_zero_examples {
            crate::push_example(&mut into.read_below_zero_examples, || e);
        }
    }

    fn check_node(&self, s: &Store, ledger: &Ledger) -> NodeCheck {
        let mut c = NodeCheck::default();
        let mut payload = Vec::new();
        for k in self.keys_of(s.node.0) {
            c.records += 1;
            let Some(idx) = s.lookup(ONCALL, k) else {
                c.missing += 1;
                c.values.push(None);
                continue;
            };
            s.read_payload(ONCALL, idx, &mut payload);
            let v = value(&payload[ENGINE_PAYLOAD_WORDS as usize..]);
            c.values.push(Some(v));
            let expected = self.initial as i64 + ledger.deltas.get(&k).copied().unwrap_or(0);
            if v != expected {
                c.wrong += 1;
                crate::push_example(&mut c.examples, || {
                    format!(
                        "record {k} (pair {}) = {v}, expected {expected} (off by {})",
                        pair_of(k),
                        v - expected
                    )
                });
            }
        }
        c
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, ledger: &Ledger) -> Vec<CheckResult> {
        let nodes = self.nodes as u64;
        let value_of = |k: u64| -> Option<i64> {
            let part = parts.get((k % nodes) as usize)?;
            part.values.get((k / nodes) as usize).copied().flatten()
        };
        let (mut below, mut unread, mut examples) = (0u64, 0u64, Vec::new());
        for p in 0..self.pairs_total() {
            let (kx, ky) = (key(p, 0), key(p, 1));
            let (Some(x), Some(y)) = (value_of(kx), value_of(ky)) else {
                unread += 1;
                continue;
            };
            if x + y < 0 {
                below += 1;
                crate::push_example(&mut examples, || {
                    format!(
                        "pair {p}: x = {x} on node {}, y = {y} on node {}",
                        kx % nodes,
                        ky % nodes
                    )
                });
            }
        }
        let (mut records, mut missing, mut wrong, mut wrong_examples) = (0, 0, 0, Vec::new());
        for part in &parts {
            records += part.records;
            missing += part.missing;
            wrong += part.wrong;
            for e in &part.examples {
                crate::push_example(&mut wrong_examples, || e.clone());
            }
        }
        let pairs = self.pairs_total();
        let changes_ok = wrong == 0 && missing == 0;
        vec![
            CheckResult {
                name: "skew.records_match_committed_changes".into(),
                passed: changes_ok,
                detail: if changes_ok {
                    format!(
                        "all {records} records equal their initial {} plus the committed changes ({} records changed)",
                        self.initial,
                        ledger.deltas.len()
                    )
                } else {
                    format!(
                        "{wrong} of {records} records differ from their initial {} plus the committed changes, {missing} missing: {}",
                        self.initial,
                        wrong_examples.join("; ")
                    )
                },
                binds: Binds::Always,
            },
            CheckResult {
                name: "skew.pairs_at_or_above_zero".into(),
                // A missing record fails the check above; its pair cannot be judged here.
                passed: below == 0,
                detail: if below == 0 {
                    format!(
                        "all {} of {pairs} pairs have x + y >= 0 in the final state",
                        pairs - unread
                    )
                } else {
                    format!(
                        "write skew observed: {below} of {pairs} pairs below zero in the final state: {}",
                        examples.join("; ")
                    )
                },
                binds: Binds::Serializable,
            },
            CheckResult {
                name: "skew.no_committed_withdraw_read_below_zero".into(),
                passed: ledger.read_below_zero == 0,
                detail: if ledger.read_below_zero == 0 {
                    format!(
                        "no committed withdraw read its pair below zero ({} took a unit, {} declined)",
                        ledger.withdrawn, ledger.declined
                    )
                } else {
                    format!(
                        "write skew observed: {} of {} committed withdraws read their pair below zero: {}",
                        ledger.read_below_zero,
                        ledger.withdrawn + ledger.declined,
                        ledger.read_below_zero_examples.join("; ")
                    )
                },
                binds: Binds::Serializable,
            },
        ]
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("pairs".into(), self.pairs.to_string()),
            ("table_pairs".into(), self.pairs_total().to_string()),
            ("initial".into(), self.initial.to_string()),
            (
                "withdraw_fraction".into(),
                self.withdraw_fraction.to_string(),
            ),
            ("deposit".into(), self.deposit.to_string()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::NodeMemory;
    use atoll_storage::layout::HEADER_WORDS;
    use atoll_storage::Catalog;
    use atoll_txn::Isolation;
    use std::sync::Arc;

    fn params(kv: &[(&str, &str)]) -> Params {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn skew(kv: &[(&str, &str)], nodes: u16) -> Skew {
        Skew::from_params(&params(kv), nodes).unwrap()
    }

    fn loaded(w: &Skew, nodes: u16) -> Vec<Arc<Store>> {
        let catalog = Arc::new(Catalog::new(nodes, w.tables(nodes), vec![]));
        (0..nodes)
            .map(|n| {
                let mem = Arc::new(NodeMemory::new(NodeId(n), &catalog.region_words()));
                let s = Store::new(catalog.clone(), mem);
                w.load(&s).unwrap();
                Arc::new(s)
            })
            .collect()
    }

    /// Overwrites record `k`'s value in place, as a run's committed writes would leave it.
    fn set(stores: &[Arc<Store>], k: u64, v: i64) {
        let s = &stores[(k % stores.len() as u64) as usize];
        let idx = s.lookup(ONCALL, k).unwrap();
        let off = s.catalog.layout(ONCALL).record_offset(idx) + HEADER_WORDS + ENGINE_PAYLOAD_WORDS;
        s.region(ONCALL).store(off as usize, v as u64);
    }

    fn withdrew(w: &Skew, ledger: &mut Ledger, p: u64, side: u64, x: i64, y: i64) {
        w.record(
            ledger,
            Effect {
                key: key(p, side),
                delta: -WITHDRAW_UNITS,
                read_pair: Some((x, y)),
            },
        );
    }

    #[test]
    fn skew_a_pairs_two_records_live_on_two_nodes_whenever_there_are_several() {
        for nodes in [2, 3, 5] {
            let w = skew(&[("pairs", "7")], nodes);
            let catalog = Catalog::new(nodes, w.tables(nodes), vec![]);
            for p in 0..w.pairs_total() {
                assert_ne!(
                    catalog.home(ONCALL, key(p, 0), NodeId(0)),
                    catalog.home(ONCALL, key(p, 1), NodeId(0)),
                    "pair {p} of {nodes} nodes"
                );
            }
            let stores = loaded(&w, nodes);
            let held: u64 = stores.iter().map(|s| s.used_slots(ONCALL) as u64).sum();
            assert_eq!(held, 2 * w.pairs_total(), "every record loaded once");
        }
    }

    #[test]
    fn skew_withdraw_fraction_is_the_share_of_withdraws_and_pairs_are_drawn_over_the_cluster() {
        let w = skew(&[("pairs", "10"), ("withdraw_fraction", "0.25")], 3);
        let mut rng = Rng::new(1);
        const DRAWS: u64 = 20_000;
        let mut withdraws = 0;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..DRAWS {
            let (ty, input) = w.generate(&mut rng, 3, NodeId(0));
            let (Input::Withdraw { p, side } | Input::Deposit { p, side }) = input;
            assert!(p < 30 && side < 2, "{input:?}");
            assert_eq!(ty == WITHDRAW_TYPE, matches!(input, Input::Withdraw { .. }));
            withdraws += (ty == WITHDRAW_TYPE) as u64;
            seen.insert(p);
        }
        let share = withdraws as f64 / DRAWS as f64;
        assert!((share - 0.25).abs() < 0.02, "{share}");
        assert_eq!(seen.len(), 30, "every pair of every node is drawn");
    }

    #[test]
    fn skew_refuses_bad_knobs_naming_the_value_and_what_is_accepted() {
        let err = |kv: &[(&str, &str)]| Skew::from_params(&params(kv), 2).unwrap_err().0;
        let e = err(&[("pairs", "0")]);
        assert!(
            e.contains("skew pairs=0 is out of range") && e.contains("1..=1000000"),
            "{e}"
        );
        let e = err(&[("withdraw_fraction", "1.5")]);
        assert!(
            e.contains("withdraw_fraction=1.5") && e.contains("0..=1"),
            "{e}"
        );
        let e = err(&[("deposit", "-1")]);
        assert!(e.contains("deposit=-1 is not a whole number"), "{e}");
        let e = err(&[("initial", "lots")]);
        assert!(
            e.contains("initial=lots") && e.contains("0..=1000000000"),
            "{e}"
        );
        let e = err(&[("pair", "3")]);
        assert!(
            e.contains("unknown skew knob 'pair'") && e.contains("pairs, initial"),
            "{e}"
        );
    }

    #[test]
    fn skew_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let w = skew(&[], 2);
        let mut rng = Rng::new(2);
        let mut words = Vec::new();
        for _ in 0..1000 {
            let (_, input) = w.generate(&mut rng, 2, NodeId(1));
            words.clear();
            input.encode(&mut words);
            assert_eq!(Input::decode(&words), Ok(input));
        }
        let e = Input::decode(&[0, 5, 2]).unwrap_err();
        assert!(e.reason.contains("side 2 of pair 5"), "{e}");
        let e = Input::decode(&[2, 5, 0]).unwrap_err();
        assert!(e.reason.contains("unknown transaction type 2"), "{e}");
        assert!(Input::decode(&[0, 5]).is_err(), "no side");
        assert!(Input::decode(&[1, 5, 1, 0]).is_err(), "a word left over");
    }

    #[test]
    fn skew_a_state_with_a_pair_below_zero_fails_the_serializable_check_and_is_reported_not_failed_under_snapshot_isolation(
    ) {
        let w = skew(&[("pairs", "3")], 2);
        let stores = loaded(&w, 2);
        let mut ledger = Ledger::default();
        let all = |ledger: &Ledger, isolation| -> Vec<CheckResult> {
            w.check(&stores, ledger)
                .into_iter()
                .map(|c| c.under(isolation))
                .collect()
        };
        assert!(all(&ledger, Isolation::Serializable)
            .iter()
            .all(|c| c.passed));
        // Pair 4 at x = y = 1: one withdraw commits (sum 2 -> 1), then two more each read
        // sum 1 in their snapshots and take from different records: x = -1, y = 0.
        withdrew(&w, &mut ledger, 4, 0, 1, 1);
        withdrew(&w, &mut ledger, 4, 0, 0, 1);
        withdrew(&w, &mut ledger, 4, 1, 0, 1);
        set(&stores, key(4, 0), -1);
        set(&stores, key(4, 1), 0);
        let serializable = all(&ledger, Isolation::Serializable);
        let by =
            |cs: &[CheckResult], name: &str| cs.iter().find(|c| c.name == name).unwrap().clone();
        let records = by(&serializable, "skew.records_match_committed_changes");
        assert!(records.passed, "no lost update: {}", records.detail);
        let pairs = by(&serializable, "skew.pairs_at_or_above_zero");
        assert!(!pairs.passed);
        assert!(
            pairs
                .detail
                .starts_with("write skew observed: 1 of 6 pairs below zero")
                && pairs
                    .detail
                    .contains("pair 4: x = -1 on node 0, y = 0 on node 1")
                && pairs
                    .detail
                    .ends_with("(a serializable protocol allows none)"),
            "{}",
            pairs.detail
        );
        let snapshot = all(&ledger, Isolation::Snapshot);
        assert!(snapshot.iter().all(|c| c.passed), "{snapshot:?}");
        let pairs = by(&snapshot, "skew.pairs_at_or_above_zero");
        assert!(
            pairs
                .detail
                .starts_with("write skew observed: 1 of 6 pairs below zero")
                && pairs.detail.ends_with("(allowed under snapshot isolation)"),
            "{}",
            pairs.detail
        );
        // A later withdraw read the pair below zero (and declined): skew seen by a reader
        // even once deposits repaired the state.
        w.record(
            &mut ledger,
            Effect {
                key: key(4, 1),
                delta: 0,
                read_pair: Some((-1, 0)),
            },
        );
        set(&stores, key(4, 0), 0);
        w.record(
            &mut ledger,
            Effect {
                key: key(4, 0),
                delta: 1,
                read_pair: None,
            },
        );
        let serializable = all(&ledger, Isolation::Serializable);
        assert!(by(&serializable, "skew.pairs_at_or_above_zero").passed);
        let read = by(&serializable, "skew.no_committed_withdraw_read_below_zero");
        assert!(
            !read.passed
                && read.detail.starts_with(
                    "write skew observed: 1 of 4 committed withdraws read their pair below zero"
                )
                && read.detail.contains("pair 4 read as x = -1, y = 0"),
            "{}",
            read.detail
        );
        let snapshot = all(&ledger, Isolation::Snapshot);
        assert!(snapshot.iter().all(|c| c.passed), "{snapshot:?}");
    }

    #[test]
    fn skew_a_lost_update_fails_under_either_isolation() {
        let w = skew(&[("pairs", "2")], 2);
        let stores = loaded(&w, 2);
        // Two committed deposits of 1 into record 3, of which the state kept one.
        let mut ledger = Ledger::default();
        for _ in 0..2 {
            w.record(
                &mut ledger,
                Effect {
                    key: 3,
                    delta: 1,
                    read_pair: None,
                },
            );
        }
        set(&stores, 3, w.initial as i64 + 1);
        for isolation in Isolation::ALL {
            let checks: Vec<_> = w
                .check(&stores, &ledger)
                .into_iter()
                .map(|c| c.under(isolation))
                .collect();
            assert!(!checks[0].passed, "{isolation:?}: {checks:?}");
            assert!(
                checks[0]
                    .detail
                    .contains("record 3 (pair 1) = 2, expected 3 (off by -1)"),
                "{}",
                checks[0].detail
            );
            assert!(checks[1].passed && checks[2].passed);
        }
    }
}
