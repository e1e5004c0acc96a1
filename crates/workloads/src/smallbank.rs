//! SmallBank (Alomari et al., ICDE 2008; the H-Store / DrTM / FaSST variant RCC uses).
//!
//! Tables: `savings` and `checking`, keyed by account id, one word each: the balance in
//! cents as a two's-complement `i64`. Accounts `[n * accounts, (n + 1) * accounts)` live on
//! node `n`. (The ACCOUNTS name→id table is left out: every variant looks ids up first and
//! the lookup never conflicts.)
//!
//! Exact semantics implemented (amounts in cents):
//! - **Amalgamate(a, b)** (15%): moves all of `a`'s savings and checking into `b`'s
//!   checking; both of `a`'s balances become 0. Net effect 0.
//! - **Balance(a)** (15%): reads `a`'s savings and checking. Read-only.
//! - **DepositChecking(a, v)** (15%): checking[a] += v, v = 130. Net +v.
//! - **SendPayment(a, b, v)** (25%): if checking[a] < v the transaction aborts (user abort);
//!   else checking[a] -= v and checking[b] += v, v = 500. Net 0.
//! - **TransactSavings(a, v)** (15%): savings[a] += v, v = 2020; aborts (user abort) if the
//!   result would be negative. Net +v.
//! - **WriteCheck(a, v)** (15%): reads savings[a] + checking[a]; if that total is below v,
//!   checking[a] -= v + 100 (an overdraft penalty of 1.00), else checking[a] -= v; v = 500.
//!   Net −(v or v + 100).
//!
//! Accounts: a node is drawn uniformly, then with probability `hot_prob` one of its
//! `hot_accounts` hot accounts, else any of its `accounts`. Defaults follow FaSST (OSDI'16)
//! and DrTM+H: 100,000 accounts per node, 90% of accesses to the 4% hot accounts
//! (`hot_accounts` defaults to 4% of `accounts`).
//! Invariants, from the final state: every account's balance equals its initial balance
//! plus the changes committed transactions made to it, each change being the value the
//! transaction wrote minus the value it read (so a lost update, a swapped or misapplied
//! balance is caught, not only a changed total); and the sum of all balances is conserved
//! up to those changes.

use crate::params::{Knobs, ParamError, Params};
use crate::{AccessMode, AccessSet, CheckResult, InputDecodeError, TxnInput, Workload};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::ENGINE_PAYLOAD_WORDS;
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const SAVINGS: TableId = TableId(0);
pub const CHECKING: TableId = TableId(1);

/// Initial balance of every savings and checking account, in cents.
pub const INITIAL_BALANCE: i64 = 1_000_000;
const DEPOSIT_CHECKING_CENTS: i64 = 130;
const SEND_PAYMENT_CENTS: i64 = 500;
const TRANSACT_SAVINGS_CENTS: i64 = 2020;
const WRITE_CHECK_CENTS: i64 = 500;
const OVERDRAFT_PENALTY_CENTS: i64 = 100;

/// Transaction mix in percent, in `TYPES` order (H-Store's SmallBank defaults).
const MIX_PERCENT: [u64; 6] = [15, 15, 15, 25, 15, 15];
const TYPES: [&str; 6] = [
    "amalgamate",
    "balance",
    "deposit_checking",
    "send_payment",
    "transact_savings",
    "write_check",
];

#[derive(Clone, Debug)]
pub struct SmallBank {
    pub accounts: u64,
    pub hot_accounts: u64,
    pub hot_prob: f64,
}

/// One SmallBank transaction's inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    Amalgamate { a: u64, b: u64 },
    Balance { a: u64 },
    DepositChecking { a: u64 },
    SendPayment { a: u64, b: u64 },
    TransactSavings { a: u64 },
    WriteCheck { a: u64 },
}

/// Encoded as the transaction type's index in `TYPES`, then its accounts.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        match *self {
            Input::Amalgamate { a, b } => out.extend([0, a, b]),
            Input::Balance { a } => out.extend([1, a]),
            Input::DepositChecking { a } => out.extend([2, a]),
            Input::SendPayment { a, b } => out.extend([3, a, b]),
            Input::TransactSavings { a } => out.extend([4, a]),
            Input::WriteCheck { a } => out.extend([5, a]),
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut w = crate::Words::new(SmallBank::NAME, words);
        let input = match w.next()? {
            0 => Input::Amalgamate {
                a: w.next()?,
                b: w.next()?,
            },
            1 => Input::Balance { a: w.next()? },
            2 => Input::DepositChecking { a: w.next()? },
            3 => Input::SendPayment {
                a: w.next()?,
                b: w.next()?,
            },
            4 => Input::TransactSavings { a: w.next()? },
            5 => Input::WriteCheck { a: w.next()? },
            kind => return Err(w.error(format!("unknown transaction type {kind}"))),
        };
        w.end()?;
        Ok(input)
    }
}

impl SmallBank {
    pub const KNOBS: &'static [&'static str] = &["accounts", "hot_accounts", "hot_prob"];

    pub fn from_params(p: &Params) -> Result<Self, ParamError> {
        let k = Knobs::new("smallbank", p, Self::KNOBS)?;
        let accounts = k.u64("accounts", 100_000, 2, 100_000_000)?;
        // Default: 4% of the accounts are hot (FaSST's SmallBank).
        let hot_accounts = k.u64("hot_accounts", (accounts * 4 / 100).max(1), 1, 100_000_000)?;
        if hot_accounts > accounts {
            return Err(ParamError(format!(
                "smallbank hot_accounts={hot_accounts} is out of range: expected 1..={accounts} (at most accounts)"
            )));
        }
        let hot_prob = k.f64("hot_prob", 0.9, 0.0, 1.0)?;
        Ok(SmallBank {
            accounts,
            hot_accounts,
            hot_prob,
        })
    }

    fn account(&self, rng: &mut Rng, nodes: u16) -> u64 {
        let node = rng.below(nodes as u64);
        let idx = if rng.chance(self.hot_prob) {
            rng.below(self.hot_accounts)
        } else {
            rng.below(self.accounts)
        };
        node * self.accounts + idx
    }

    fn two_accounts(&self, rng: &mut Rng, nodes: u16) -> (u64, u64) {
        let a = self.account(rng, nodes);
        // Bounded redraw for a distinct second account; accounts >= 2 makes the fallback valid.
        for _ in 0..16 {
            let b = self.account(rng, nodes);
            if b != a {
                return (a, b);
            }
        }
        (
            a,
            if a.is_multiple_of(self.accounts) {
                a + 1
            } else {
                a - 1
            },
        )
    }
}

fn bal(w: &[u64]) -> i64 {
    w[0] as i64
}

/// One balance a committed transaction changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BalanceChange {
    pub table: TableId,
    pub account: u64,
    /// The balance written minus the balance read.
    pub delta_cents: i64,
}

/// Balance changes of one committed transaction.
pub type Effect = smallvec::SmallVec<[BalanceChange; 3]>;

/// Committed balance changes per account.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    #[serde(with = "deltas_as_entries")]
    pub deltas: crate::KeyMap<(TableId, u64), i64>,
}

/// The deltas as a list of `(table, account, cents)` sorted by table and account: a map
/// keyed by a pair has no JSON form, and a sorted list serializes the same every time.
mod deltas_as_entries {
    use super::TableId;
    use crate::KeyMap;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(
        d: &KeyMap<(TableId, u64), i64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let mut entries: Vec<(u16, u64, i64)> = d.iter().map(|(&(t, a), &c)| (t.0, a, c)).collect();
        entries.sort_unstable();
        entries.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<KeyMap<(TableId, u64), i64>, D::Error> {
        let entries: Vec<(u16, u64, i64)> = Vec::deserialize(d)?;
        Ok(entries
            .into_iter()
            .map(|(t, a, c)| ((TableId(t), a), c))
            .collect())
    }
}

/// One node's part of the balance checks: its accounts against the ledger, and its sum.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCheck {
    /// Balances checked (two per account).
    pub balances: u64,
    pub missing: u64,
    pub wrong: u64,
    pub examples: Vec<String>,
    /// The sum of this node's balances, in cents.
    pub total_cents: i128,
}

impl Workload for SmallBank {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = "smallbank";
    const DECLARES_KEYS: bool = true;
    const ABOUT: &'static str =
        "six banking transactions over checking and savings accounts, hot accounts";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] =
        &[("accounts", "40"), ("hot_accounts", "4")];

    // Accounts are keyed over the nodes as the run places them: no knob depends on the shape.
    fn configure(p: &Params, _shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        SmallBank::from_params(p)
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        // Amalgamate: a's savings and checking, b's checking (both tables hold one word).
        vec![SAVINGS, CHECKING, CHECKING]
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TYPES
    }

    fn tables(&self, nodes: u16) -> Vec<TableSpec> {
        let _ = nodes;
        let spec = |name: &str| TableSpec {
            // Accounts are never deleted.
            gone_keys_max_per_node: 0,
            name: name.into(),
            payload_words: 1,
            capacity_per_node: self.accounts as u32,
            capacity_max_per_node: Some(self.accounts as u32),
            partition: Partition::Range {
                keys_per_node: self.accounts,
            },
            ordered: false,
        };
        vec![spec("savings"), spec("checking")]
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        let base = store.node.0 as u64 * self.accounts;
        for k in base..base + self.accounts {
            for t in [SAVINGS, CHECKING] {
                store.insert(t, k, &[INITIAL_BALANCE as u64])?;
            }
        }
        Ok(())
    }

    fn generate(&self, rng: &mut Rng, nodes: u16, _home: NodeId) -> (usize, Input) {
        let mut r = rng.below(100);
        let mut ty = 0;
        while r >= MIX_PERCENT[ty] {
            r -= MIX_PERCENT[ty];
            ty += 1;
        }
        let input = match ty {
            0 => {
                let (a, b) = self.two_accounts(rng, nodes);
                Input::Amalgamate { a, b }
            }
            1 => Input::Balance {
                a: self.account(rng, nodes),
            },
            2 => Input::DepositChecking {
                a: self.account(rng, nodes),
            },
            3 => {
                let (a, b) = self.two_accounts(rng, nodes);
                Input::SendPayment { a, b }
            }
            4 => Input::TransactSavings {
                a: self.account(rng, nodes),
            },
            _ => Input::WriteCheck {
                a: self.account(rng, nodes),
            },
        };
        (ty, input)
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        let mut effect = Effect::new();
        // Writes `new` over `old` and notes the change.
        let mut put = |tx: &mut Txn<'_, P>, t: TableId, k: u64, old: i64, new: i64| {
            tx.write(t, k, &[new as u64]);
            effect.push(BalanceChange {
                table: t,
                account: k,
                delta_cents: new - old,
            });
        };
        match *input {
            Input::Amalgamate { a, b } => {
                tx.fetch(&[(SAVINGS, a, true), (CHECKING, a, true), (CHECKING, b, true)])
                    .await?;
                let sa = bal(&tx.read(SAVINGS, a).await?);
                let ca = bal(&tx.read(CHECKING, a).await?);
                let cb = bal(&tx.read(CHECKING, b).await?);
                put(tx, SAVINGS, a, sa, 0);
                put(tx, CHECKING, a, ca, 0);
                put(tx, CHECKING, b, cb, cb + sa + ca);
            }
            Input::Balance { a } => {
                tx.fetch(&[(SAVINGS, a, false), (CHECKING, a, false)])
                    .await?;
                let _total = bal(&tx.read(SAVINGS, a).await?) + bal(&tx.read(CHECKING, a).await?);
            }
            Input::DepositChecking { a } => {
                let c = bal(&tx.read_for_update(CHECKING, a).await?);
                put(tx, CHECKING, a, c, c + DEPOSIT_CHECKING_CENTS);
            }
            Input::SendPayment { a, b } => {
                tx.fetch(&[(CHECKING, a, true), (CHECKING, b, true)])
                    .await?;
                let ca = bal(&tx.read(CHECKING, a).await?);
                let cb = bal(&tx.read(CHECKING, b).await?);
                if ca < SEND_PAYMENT_CENTS {
                    return Err(Abort::UserAbort);
                }
                put(tx, CHECKING, a, ca, ca - SEND_PAYMENT_CENTS);
                put(tx, CHECKING, b, cb, cb + SEND_PAYMENT_CENTS);
            }
            Input::TransactSavings { a } => {
                let s = bal(&tx.read_for_update(SAVINGS, a).await?);
                if s + TRANSACT_SAVINGS_CENTS < 0 {
                    return Err(Abort::UserAbort);
                }
                put(tx, SAVINGS, a, s, s + TRANSACT_SAVINGS_CENTS);
            }
            Input::WriteCheck { a } => {
                tx.fetch(&[(SAVINGS, a, false), (CHECKING, a, true)])
                    .await?;
                let s = bal(&tx.read(SAVINGS, a).await?);
                let c = bal(&tx.read(CHECKING, a).await?);
                let debit = if s + c < WRITE_CHECK_CENTS {
                    WRITE_CHECK_CENTS + OVERDRAFT_PENALTY_CENTS
                } else {
                    WRITE_CHECK_CENTS
                };
                put(tx, CHECKING, a, c, c - debit);
            }
        }
        Ok(effect)
    }

    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        use AccessMode::{Read, Write};
        Some(AccessSet::new(match *input {
            Input::Amalgamate { a, b } => {
                vec![
                    (SAVINGS, a, Write),
                    (CHECKING, a, Write),
                    (CHECKING, b, Write),
                ]
            }
            Input::Balance { a } => vec![(SAVINGS, a, Read), (CHECKING, a, Read)],
            Input::DepositChecking { a } => vec![(CHECKING, a, Write)],
            Input::SendPayment { a, b } => vec![(CHECKING, a, Write), (CHECKING, b, Write)],
            Input::TransactSavings { a } => vec![(SAVINGS, a, Write)],
            Input::WriteCheck { a } => vec![(SAVINGS, a, Read), (CHECKING, a, Write)],
        }))
    }

    fn record(&self, ledger: &mut Ledger, effect: Effect) {
        for c in effect {
            *ledger.deltas.entry((c.table, c.account)).or_insert(0) += c.delta_cents;
        }
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        for (k, d) in from.deltas {
            *into.deltas.entry(k).or_insert(0) += d;
        }
    }

    fn check_node(&self, s: &Store, ledger: &Ledger) -> NodeCheck {
        let mut c = NodeCheck::default();
        let mut payload = Vec::new();
        for t in [SAVINGS, CHECKING] {
            let base = s.node.0 as u64 * self.accounts;
            for k in base..base + self.accounts {
                c.balances += 1;
                let Some(idx) = s.lookup(t, k) else {
                    c.missing += 1;
                    continue;
                };
                s.read_payload(t, idx, &mut payload);
                let b = payload[ENGINE_PAYLOAD_WORDS as usize] as i64;
                c.total_cents += b as i128;
                let expected = INITIAL_BALANCE + ledger.deltas.get(&(t, k)).copied().unwrap_or(0);
                if b != expected {
                    c.wrong += 1;
                    crate::push_example(&mut c.examples, || {
                        format!(
                            "{}[{k}] = {b}, expected {expected} (off by {})",
                            s.catalog.spec(t).name,
                            b - expected
                        )
                    });
                }
            }
        }
        c
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, ledger: &Ledger) -> Vec<CheckResult> {
        let mut all = NodeCheck::default();
        for p in parts {
            all.balances += p.balances;
            all.missing += p.missing;
            all.wrong += p.wrong;
            all.total_cents += p.total_cents;
            for e in p.examples {
                crate::push_example(&mut all.examples, || e);
            }
        }
        let (total, wrong, missing) = (all.total_cents, all.wrong, all.missing);
        let net: i128 = ledger.deltas.values().map(|&d| d as i128).sum();
        let expected = all.balances as i128 * INITIAL_BALANCE as i128 + net;
        vec![
            CheckResult {
                name: "smallbank.balances_match_committed_changes".into(),
                binds: crate::Binds::Always,
                passed: wrong == 0 && missing == 0,
                detail: if wrong == 0 && missing == 0 {
                    format!(
                        "all {} balances equal their initial balance plus the committed changes ({} accounts changed)",
                        all.balances,
                        ledger.deltas.len()
                    )
                } else {
                    format!(
                        "{wrong} balances differ from their initial balance plus the committed changes, {missing} accounts missing: {}",
                        all.examples.join("; ")
                    )
                },
            },
            CheckResult {
                name: "smallbank.money_conserved".into(),
                binds: crate::Binds::Always,
                passed: total == expected,
                detail: format!(
                    "sum of balances {total} cents, expected {expected} (initial plus committed net {net}); off by {}",
                    total - expected
                ),
            },
        ]
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("accounts".into(), self.accounts.to_string()),
            ("hot_accounts".into(), self.hot_accounts.to_string()),
            ("hot_prob".into(), self.hot_prob.to_string()),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::NodeMemory;
    use atoll_storage::layout::HEADER_WORDS;
    use atoll_storage::Catalog;
    use std::sync::Arc;

    fn change(table: TableId, account: u64, delta_cents: i64) -> BalanceChange {
        BalanceChange {
            table,
            account,
            delta_cents,
        }
    }

    #[test]
    fn smallbank_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let sb = SmallBank::from_params(&Params::new()).unwrap();
        let mut rng = Rng::new(5);
        let mut words = Vec::new();
        for _ in 0..10_000 {
            let (_, input) = sb.generate(&mut rng, 4, NodeId(1));
            words.clear();
            input.encode(&mut words);
            assert_eq!(Input::decode(&words), Ok(input));
        }
        assert!(Input::decode(&[]).is_err());
        assert!(Input::decode(&[6, 1]).is_err(), "unknown type");
        assert!(
            Input::decode(&[0, 1]).is_err(),
            "amalgamate needs two accounts"
        );
        let e = Input::decode(&[1, 1, 2]).unwrap_err();
        assert_eq!(e.to_string(), "smallbank input: 1 words left over");
    }

    fn loaded(sb: &SmallBank, nodes: u16) -> Vec<Arc<Store>> {
        let catalog = Arc::new(Catalog::new(nodes, sb.tables(nodes), vec![]));
        (0..nodes)
            .map(|n| {
                let mem = Arc::new(NodeMemory::new(NodeId(n), &catalog.region_words()));
                let s = Store::new(catalog.clone(), mem);
                sb.load(&s).unwrap();
                Arc::new(s)
            })
            .collect()
    }

    #[test]
    fn smallbank_check_passes_on_fresh_data_and_names_the_difference_when_money_appears() {
        let sb = SmallBank::from_params(&Params::from([("accounts".into(), "50".into())])).unwrap();
        let stores = loaded(&sb, 2);
        let mut ledger = Ledger::default();
        assert!(sb.check(&stores, &ledger).iter().all(|c| c.passed));
        // Committed deposits of 7 cents explain 7 more cents, not 12.
        let idx = stores[1].lookup(CHECKING, 60).unwrap();
        let off = stores[1].catalog.layout(CHECKING).record_offset(idx)
            + HEADER_WORDS
            + ENGINE_PAYLOAD_WORDS;
        stores[1]
            .region(CHECKING)
            .store(off as usize, (INITIAL_BALANCE + 12) as u64);
        sb.record(&mut ledger, smallvec::smallvec![change(CHECKING, 60, 7)]);
        let checks = sb.check(&stores, &ledger);
        assert!(checks.iter().all(|c| !c.passed));
        assert!(
            checks[1].detail.contains("off by 5"),
            "{}",
            checks[1].detail
        );
        assert!(
            checks[0].detail.contains("checking[60]"),
            "{}",
            checks[0].detail
        );
        // Money moved to the wrong account keeps the total but not the balances: a
        // committed transfer of 5 from 61 to 62 whose 5 landed in 60 (the 5 extra above).
        let idx = stores[1].lookup(CHECKING, 61).unwrap();
        let off = stores[1].catalog.layout(CHECKING).record_offset(idx)
            + HEADER_WORDS
            + ENGINE_PAYLOAD_WORDS;
        stores[1]
            .region(CHECKING)
            .store(off as usize, (INITIAL_BALANCE - 5) as u64);
        sb.record(
            &mut ledger,
            smallvec::smallvec![change(CHECKING, 61, -5), change(CHECKING, 62, 5)],
        );
        let checks = sb.check(&stores, &ledger);
        assert!(checks[1].passed && !checks[0].passed, "{checks:?}");
        assert!(
            checks[0].detail.contains("checking[60]") && checks[0].detail.contains("checking[62]"),
            "{}",
            checks[0].detail
        );
    }

    #[test]
    fn smallbank_generator_follows_the_mix_and_keeps_accounts_distinct() {
        let sb = SmallBank::from_params(&Params::new()).unwrap();
        let mut rng = Rng::new(3);
        let mut counts = [0u64; 6];
        const DRAWS: u64 = 100_000;
        for _ in 0..DRAWS {
            let (ty, input) = sb.generate(&mut rng, 4, NodeId(0));
            counts[ty] += 1;
            if let Input::Amalgamate { a, b } | Input::SendPayment { a, b } = input {
                assert_ne!(a, b);
                assert!(a < 4 * sb.accounts && b < 4 * sb.accounts);
            }
        }
        for (ty, pct) in MIX_PERCENT.iter().enumerate() {
            let got = counts[ty] as f64 * 100.0 / DRAWS as f64;
            assert!(
                (got - *pct as f64).abs() < 1.0,
                "{}: {got:.2}% drawn, mix says {pct}%",
                TYPES[ty]
            );
        }
    }
}
