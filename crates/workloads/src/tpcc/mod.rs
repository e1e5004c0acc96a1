//! TPC-C (specification revision 5.11): the nine tables partitioned by warehouse (ITEM
//! replicated on every node and read locally), the spec's population, the five
//! transactions with their mixes, and the consistency conditions of clause 3.3.2 checked
//! from the final state and a ledger of committed effects.
//!
//! - [`keys`]: tables, record words, and the composite keys (bit layouts documented there).
//! - [`load`]: the population (NURand, last names from syllables, 10% "ORIGINAL", 30% of
//!   orders undelivered).
//! - [`txns`]: inputs, their generation and their word encoding, and the transaction logic.
//! - [`check`]: consistency conditions 1–12 and the stock invariants.
//!
//! Scans and phantoms: every scan whose range a concurrent transaction can insert into or
//! delete from is ordered by a record that every such change writes, which the scanning
//! transaction reads for update first (as Cycle's guards): the DISTRICT row orders
//! NEW-ORDER (NewOrder inserts, Delivery deletes) and ORDER_BY_CUSTOMER (NewOrder inserts).
//! CUSTOMER_BY_NAME never changes after the load. StockLevel's "last 20 orders" and every
//! order's lines are addressed by computed keys (order ids below `D_NEXT_O_ID` all exist),
//! so they need no scan.
//!
//! Scale knobs (defaults are the spec's sizes): `warehouses` (per node),
//! `customers_per_district` (3000; orders loaded per district equal it, 30% of them
//! undelivered), `items` (100000), `new_orders_max` (a cap on the orders a run may
//! add per district, `none` by default: ORDER, ORDER-LINE, NEW-ORDER, HISTORY and
//! ORDER_BY_CUSTOMER grow as the run's memory budget allows; with a cap they are sized for
//! the load plus it, and a NewOrder beyond it aborts `TableFull`), `mix`, `weights` (five percentages in
//! [`TYPES`] order summing to 100, replacing the mix's), `delivery` (`batch`: one
//! transaction delivers all ten districts, spec 2.7; `per_district`: one each),
//! `payment_remote` (`customer`: a remote Payment pays its home warehouse for a customer of
//! another warehouse, spec 2.5.1.2; `warehouse`: the DrTM/RCC variant, where it pays another
//! warehouse and district for a customer of its home warehouse).

pub mod check;
pub mod keys;
pub mod load;
pub mod txns;

use crate::params::{Knobs, ParamError, Params};
use crate::{AccessSet, CheckResult, Workload};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use keys::*;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use check::NodeCheck;
pub use txns::{CustomerSel, Effect, Input, Ledger, Line};

/// Transaction types, in the order of every mix's weights.
pub const TYPES: [&str; 5] = [
    "new_order",
    "payment",
    "order_status",
    "delivery",
    "stock_level",
];
pub const NEW_ORDER_TYPE: usize = 0;

/// Mixes by name: weights in percent in [`TYPES`] order, and whether remote accesses are
/// replaced by home-warehouse ones (Tell's shardable mix).
const MIXES: [(&str, [u64; 5], bool); 5] = [
    ("standard", [45, 43, 4, 4, 4], false),
    ("neworder-payment", [50, 50, 0, 0, 0], false),
    ("neworder", [100, 0, 0, 0, 0], false),
    ("read-intensive", [9, 0, 84, 0, 7], false),
    ("shardable", [45, 43, 4, 4, 4], true),
];
const MIX_NAMES: [&str; 5] = [MIXES[0].0, MIXES[1].0, MIXES[2].0, MIXES[3].0, MIXES[4].0];
/// Mix weights are percentages.
const PERCENT: u64 = 100;
const DELIVERY_MODES: [&str; 2] = ["batch", "per_district"];
/// What a remote Payment makes remote: the spec's customer, or DrTM/RCC's warehouse.
const PAYMENT_REMOTE: [&str; 2] = ["customer", "warehouse"];

/// Spec sizes (1.2.1, 4.3.3.1).
const CUSTOMERS_PER_DISTRICT_SPEC: u64 = 3000;
/// Fewest customers per district: enough for 30% undelivered orders and NURand's range.
const CUSTOMERS_PER_DISTRICT_MIN: u64 = 10;
const ITEMS_MIN: u64 = 20;
const WAREHOUSES_PER_NODE_MAX: u64 = 1024;

#[derive(Clone, Debug)]
pub struct Tpcc {
    /// Warehouses per node.
    pub warehouses: u64,
    pub customers_per_district: u64,
    pub items: u64,
    /// A cap on the orders a run may add per district (`None`: the tables grow).
    pub new_orders_max: Option<u64>,
    pub mix: &'static str,
    weights: [u64; 5],
    /// Remote customers and supplying warehouses replaced by the home warehouse.
    shardable: bool,
    pub delivery_per_district: bool,
    /// A remote Payment pays another warehouse and district for a home customer (DrTM/RCC),
    /// instead of paying home for another warehouse's customer (the spec).
    pub payment_remote_warehouse: bool,
    nodes: u16,
}

impl Tpcc {
    pub const KNOBS: &'static [&'static str] = &[
        "warehouses",
        "customers_per_district",
        "items",
        "new_orders_max",
        "mix",
        "weights",
        "delivery",
        "payment_remote",
    ];

    pub fn from_params(p: &Params, nodes: u16) -> Result<Self, ParamError> {
        let k = Knobs::new("tpcc", p, Self::KNOBS)?;
        let warehouses_max = (WAREHOUSES_MAX / nodes.max(1) as u64).min(WAREHOUSES_PER_NODE_MAX);
        let warehouses = k.u64("warehouses", 1, 1, warehouses_max)?;
        let customers_per_district = k.u64(
            "customers_per_district",
            CUSTOMERS_PER_DISTRICT_SPEC,
            CUSTOMERS_PER_DISTRICT_MIN,
            CUSTOMERS_MAX,
        )?;
        let items = k.u64("items", ITEMS_MAX, ITEMS_MIN, ITEMS_MAX)?;
        let new_orders_max = k.cap("new_orders_max", 1, ORDER_ID_MAX - customers_per_district)?;
        let mix = k.choice("mix", MIX_NAMES[0], &MIX_NAMES)?;
        let (_, mut weights, shardable) = *MIXES.iter().find(|m| m.0 == mix).expect("a listed mix");
        if let Some(w) = k.u64_list("weights", TYPES.len(), 0, PERCENT)? {
            if w.iter().sum::<u64>() != PERCENT {
                return Err(ParamError(format!(
                    "tpcc weights={} sum to {}: expected percentages of {} summing to {PERCENT}",
                    w.iter()
                        .map(|x| x.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                    w.iter().sum::<u64>(),
                    TYPES.join(", ")
                )));
            }
            weights.copy_from_slice(&w);
        }
        let delivery = k.choice("delivery", DELIVERY_MODES[0], &DELIVERY_MODES)?;
        let payment_remote = k.choice("payment_remote", PAYMENT_REMOTE[0], &PAYMENT_REMOTE)?;
        Ok(Tpcc {
            warehouses,
            customers_per_district,
            items,
            new_orders_max,
            mix,
            weights,
            shardable,
            delivery_per_district: delivery == DELIVERY_MODES[1],
            payment_remote_warehouse: payment_remote == PAYMENT_REMOTE[1],
            nodes,
        })
    }

    /// Warehouses in the cluster.
    pub fn warehouses_total(&self) -> u64 {
        self.warehouses * self.nodes as u64
    }

    /// The warehouses (0-based) on node `n`.
    pub fn warehouses_of(&self, n: u16) -> std::ops::Range<u64> {
        n as u64 * self.warehouses..(n as u64 + 1) * self.warehouses
    }

    /// Orders loaded per district that are not delivered (spec 4.3.3.1: 900 of 3000).
    pub fn undelivered_loaded(&self) -> u64 {
        self.customers_per_district * UNDELIVERED_PERCENT / 100
    }

    /// Per district and table: the records loaded, and the most the run may reach (`None`:
    /// no cap).
    fn growing(&self, loaded: u64, per_order: u64) -> (u64, Option<u64>) {
        (loaded, self.new_orders_max.map(|m| loaded + m * per_order))
    }

    fn partition(&self) -> Partition {
        let per_node = self.warehouses;
        Partition::Custom(Arc::new(move |key| (warehouse_of(key) / per_node) as u16))
    }

    pub fn knobs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("warehouses".into(), self.warehouses.to_string()),
            (
                "customers_per_district".into(),
                self.customers_per_district.to_string(),
            ),
            ("items".into(), self.items.to_string()),
            (
                "new_orders_max".into(),
                self.new_orders_max
                    .map_or_else(|| "none".to_string(), |m| m.to_string()),
            ),
            ("mix".into(), self.mix.to_string()),
            (
                "weights".into(),
                self.weights
                    .iter()
                    .map(|x| x.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            ),
            (
                "delivery".into(),
                DELIVERY_MODES[self.delivery_per_district as usize].to_string(),
            ),
            (
                "payment_remote".into(),
                PAYMENT_REMOTE[self.payment_remote_warehouse as usize].to_string(),
            ),
        ])
    }

    pub fn tables(&self) -> Vec<TableSpec> {
        let w = self.warehouses;
        let districts = w * DISTRICTS;
        let customers = districts * self.customers_per_district;
        let capacity = |n: u64| -> u32 {
            // The sizing refuses what does not fit memory; a count over u32 cannot be a
            // table at all, so it saturates and the sizing names it.
            u32::try_from(n).unwrap_or(u32::MAX)
        };
        let spec = |name: &str, words: u32, n: u64, ordered: bool| TableSpec {
            name: name.into(),
            payload_words: words,
            capacity_per_node: capacity(n),
            capacity_max_per_node: Some(capacity(n)),
            partition: self.partition(),
            ordered,
            gone_keys_max_per_node: 0,
        };
        // A table the run adds to: its loaded rows per district, and what one order (or
        // payment, as many as orders) adds.
        let grows = |name: &str, words: u32, loaded: u64, per_order: u64, ordered: bool| {
            let (start, max) = self.growing(loaded, per_order);
            TableSpec {
                capacity_max_per_node: max.map(|m| capacity(districts * m)),
                ..spec(name, words, districts * start, ordered)
            }
        };
        let cpd = self.customers_per_district;
        let new_order = grows(
            "new_order",
            NEW_ORDER_WORDS,
            self.undelivered_loaded(),
            1,
            true,
        );
        let tables = vec![
            spec("warehouse", WAREHOUSE_WORDS, w, false),
            spec("district", DISTRICT_WORDS, districts, false),
            spec("customer", CUSTOMER_WORDS, customers, false),
            // One loaded row per customer, and one per payment the run may add (as many
            // as orders: Payment runs about as often as NewOrder in every mix with it).
            grows("history", HISTORY_WORDS, cpd, 1, false),
            TableSpec {
                // Delivery deletes NEW-ORDER rows and their keys (order ids) never come
                // back: under a cap, at most every order the table ever held (without
                // one, the run's budget counts them as they come).
                gone_keys_max_per_node: new_order.capacity_max_per_node.unwrap_or(0),
                ..new_order
            },
            grows("order", ORDER_WORDS, cpd, 1, false),
            grows(
                "order_line",
                ORDER_LINE_WORDS,
                cpd * ORDER_LINES_MAX,
                ORDER_LINES_MAX,
                false,
            ),
            TableSpec {
                name: "item".into(),
                payload_words: ITEM_WORDS,
                capacity_per_node: capacity(self.items),
                capacity_max_per_node: Some(capacity(self.items)),
                partition: Partition::Replicated,
                ordered: false,
                gone_keys_max_per_node: 0,
            },
            spec("stock", STOCK_WORDS, w * self.items, false),
            grows("order_by_customer", INDEX_WORDS, cpd, 1, true),
            spec("customer_by_name", INDEX_WORDS, customers, true),
        ];
        debug_assert_eq!(tables.len(), CUSTOMER_BY_NAME.0 as usize + 1);
        tables
    }
}

/// Payment's records: the warehouse and district paid, the customer paying (the HISTORY
/// row it inserts is keyed by the customer's `C_PAYMENT_CNT`, read under its lock).
fn payment_access_set(w: u64, d: u64, c_w: u64, c_d: u64, c: u64) -> AccessSet {
    use crate::AccessMode::Write;
    AccessSet::new([
        (WAREHOUSE, warehouse(w), Write),
        (DISTRICT, district(w, d), Write),
        (CUSTOMER, customer(c_w, c_d, c), Write),
    ])
}

impl Workload for Tpcc {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = Tpcc::NAME_STR;
    const DELETES: bool = true;
    const INSERTS: bool = true;
    /// NewOrder's and a Payment by id's from the input; the others' by a reconnaissance.
    const DECLARES_KEYS: bool = true;
    /// ~130 KB measured per co-routine (docs/performance.md), rounded up.
    const COROUTINE_HEAP_BYTES: u64 = 160 << 10;
    const ABOUT: &'static str = "the five TPC-C transactions over nine tables";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] = &[
        ("customers_per_district", "30"),
        ("items", "100"),
        ("new_orders_max", "50"),
    ];

    fn configure(p: &Params, shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        Tpcc::from_params(p, shape.nodes)
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TYPES
    }

    fn tables(&self, _nodes: u16) -> Vec<TableSpec> {
        Tpcc::tables(self)
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        self.load_node(store)
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        // Delivery writes, per district, DISTRICT, NEW-ORDER (deleted), ORDER, up to 15
        // lines and CUSTOMER: in a batch of ten, more than NewOrder's DISTRICT, 15 STOCK,
        // 15 ORDER-LINE, ORDER, NEW-ORDER and ORDER_BY_CUSTOMER.
        let per_district = [DISTRICT, NEW_ORDER, ORDER, CUSTOMER]
            .into_iter()
            .chain(std::iter::repeat(ORDER_LINE).take(ORDER_LINES_MAX as usize));
        let delivery: Vec<TableId> = if self.delivery_per_district {
            per_district.collect()
        } else {
            per_district.collect::<Vec<_>>().repeat(DISTRICTS as usize)
        };
        let new_order: Vec<TableId> = [DISTRICT, ORDER, NEW_ORDER, ORDER_BY_CUSTOMER]
            .into_iter()
            .chain(std::iter::repeat(STOCK).take(ORDER_LINES_MAX as usize))
            .chain(std::iter::repeat(ORDER_LINE).take(ORDER_LINES_MAX as usize))
            .collect();
        let words = |ts: &[TableId]| -> u64 {
            let specs = Tpcc::tables(self);
            ts.iter()
                .map(|t| specs[t.0 as usize].payload_words as u64)
                .sum()
        };
        if words(&delivery) >= words(&new_order) {
            delivery
        } else {
            new_order
        }
    }

    fn generate(&self, rng: &mut Rng, _nodes: u16, home: NodeId) -> (usize, Input) {
        self.generate_input(rng, home)
    }

    /// NewOrder's and Payment's records (by customer id): the keys they insert follow from
    /// `D_NEXT_O_ID` and `C_PAYMENT_CNT`, read under the district's and the customer's
    /// locks, so the rows they cover are declared instead. A Payment by last name finds its
    /// customer by a reconnaissance scan ([`Workload::reconnoiter`]); OrderStatus, Delivery
    /// and StockLevel take their keys from scans of tables others write (`None`).
    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        use crate::AccessMode::{Read, Write};
        match input {
            Input::NewOrder { w, d, c, lines } => {
                let mut a = vec![
                    (WAREHOUSE, warehouse(*w), Read),
                    (DISTRICT, district(*w, *d), Write),
                    (CUSTOMER, customer(*w, *d, *c), Read),
                ];
                for l in lines {
                    a.push((ITEM, item(l.i), Read));
                    a.push((STOCK, stock(l.supply_w, l.i), Write));
                }
                Some(AccessSet::new(a))
            }
            Input::Payment {
                w,
                d,
                c_w,
                c_d,
                customer: txns::CustomerSel::Id(c),
                ..
            } => Some(payment_access_set(*w, *d, *c_w, *c_d, *c)),
            _ => None,
        }
    }

    /// A Payment by last name: the customer the name's scan picks now (CUSTOMER_BY_NAME is
    /// loaded once and never written, so the execution's own scan picks the same one).
    /// OrderStatus, Delivery and StockLevel: a trial run of the transaction on the records as
    /// they are now, every record it touched declared (Calvin's OLLP). Their scans run under
    /// the district's lock, which each declares (every insert and delete into the ranges
    /// they scan holds it), so the execution scans what its order makes of them; if that is
    /// not what the trial found, it touches an undeclared record and is sequenced again.
    async fn reconnoiter<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Option<AccessSet>, Abort> {
        match input {
            Input::Payment {
                w,
                d,
                c_w,
                c_d,
                customer: sel,
                ..
            } => {
                let c = self.resolve(tx, *c_w, *c_d, *sel).await?;
                Ok(Some(payment_access_set(*w, *d, *c_w, *c_d, c)))
            }
            Input::NewOrder { .. } => Ok(None),
            _ => {
                let trial = self.run(tx, input).await;
                crate::touched(tx, trial)
            }
        }
    }

    fn sequenced_refusal(&self) -> Option<String> {
        self.new_orders_max.map(|n| {
            crate::capped_table_refusal(
                "tpcc",
                "new_orders_max",
                n,
                "the tables NewOrder and Payment insert into",
            )
        })
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        self.run(tx, input).await
    }

    fn record(&self, ledger: &mut Ledger, effect: Effect) {
        ledger.record(effect)
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        into.merge(from)
    }

    fn check_node(&self, store: &Store, ledger: &Ledger) -> NodeCheck {
        self.check_node_state(store, ledger)
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, _ledger: &Ledger) -> Vec<CheckResult> {
        self.check_cluster_parts(parts)
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        Tpcc::knobs(self)
    }
}

/// Share of each district's loaded orders left undelivered (spec 4.3.3.1).
const UNDELIVERED_PERCENT: u64 = 30;

#[cfg(test)]
mod tests {
    use super::*;

    fn params(kv: &[(&str, &str)]) -> Params {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn tpcc_defaults_are_the_spec_sizes_and_bad_knobs_are_refused_by_name() {
        let t = Tpcc::from_params(&Params::new(), 2).unwrap();
        assert_eq!(
            (t.warehouses, t.customers_per_district, t.items),
            (1, 3000, 100_000)
        );
        assert_eq!(t.undelivered_loaded(), 900);
        assert_eq!(t.mix, "standard");
        let t = Tpcc::from_params(
            &params(&[("mix", "shardable"), ("weights", "0,0,50,0,50")]),
            1,
        )
        .unwrap();
        assert_eq!((t.weights, t.shardable), ([0, 0, 50, 0, 50], true));
        for (k, v, says) in [
            ("mix", "olap", "expected one of standard"),
            ("customers_per_district", "5000", "expected 10..=4095"),
            ("items", "100001", "expected 20..=100000"),
            ("delivery", "lazy", "batch, per_district"),
            ("warehouse", "1", "unknown tpcc knob 'warehouse'"),
            (
                "weights",
                "50,50",
                "expected 5 comma-separated whole numbers",
            ),
            ("weights", "50,50,1,0,0", "sum to 101"),
        ] {
            let e = Tpcc::from_params(&params(&[(k, v)]), 2).unwrap_err();
            assert!(e.0.contains(says), "{k}={v}: {}", e.0);
        }
    }
}
