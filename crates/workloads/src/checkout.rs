//! Checkout: TPC-W's buy-confirm transaction as "The End of Slow Networks" (Binnig et al.,
//! VLDB 2016, §4.3) ran it to measure RSI: "Every transaction reads 3 products, creates 1
//! order and 3 orderline records, and updates the stock of the products. 1 million
//! products (every record is roughly 1KB)".
//!
//! Tables:
//! - `product`: `products` records in all (1,000,000 by default), placed by key modulo the
//!   node count, each `product_bytes` bytes (1 KiB by default, the engine's two words
//!   included): the stock, the quantity ever ordered, the restocks, then padding words
//!   that are a function of the key (load writes them; every update writes them back).
//! - `order`: one per committed checkout, on its coordinator's node; key `node << 40 |
//!   n`, `n` the node's `n`-th drawn checkout (a per-node counter the generator advances,
//!   so every order key is unique and known before the transaction runs: its declared
//!   access set, and a retry that inserts the same key). Words: its lines and quantity.
//! - `order_line`: three per order, with it; key `order << 2 | line`. Words: product and
//!   quantity.
//!
//! `order` and `order_line` grow as the run's memory budget allows; `orders_max` caps them
//! at that many orders per node (a checkout beyond it aborts `TableFull`, as TPC-C's
//! NewOrder beyond `new_orders_max`), `none` by default.
//!
//! A checkout draws 3 distinct products uniformly and a quantity in `1..=quantity_max` for
//! each; it reads the products for update, takes each quantity off its stock (restocking
//! by [`RESTOCK_UNITS`] first when the stock is short, as TPC-C's stock rule does, so stock
//! never goes negative), and inserts the order and its three lines.
//!
//! Checks, from the final state and a ledger of committed checkouts' effects (the
//! quantities they wrote into their lines, whether the stock they wrote exceeds the stock
//! they read):
//! - every product: its stock decrease since the load equals the quantity committed lines
//!   ordered of it less its restocks, its ordered and restock counters equal the ledger's,
//!   its stock is not negative and its padding is intact;
//! - every order has exactly three lines and every line an order, and the order's quantity
//!   is its lines';
//! - the orders on each node are the checkouts its coordinators committed;
//! - the quantities in the lines, per product, are the products' ordered quantities
//!   (compared as sums and as a per-product fingerprint, since a product's lines live on
//!   the nodes of the orders that bought it).

use crate::params::{Knobs, ParamError, Params};
use crate::{
    push_example, AccessMode, AccessSet, Binds, CheckResult, InputDecodeError, KeyMap, TxnInput,
    Workload,
};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_storage::layout::{
    hash_key, ENGINE_PAYLOAD_WORDS, HEADER_WORDS, H_KEY, H_VERSION, VERSION_ABSENT,
};
use atoll_storage::{Partition, Store, TableId, TableSpec};
use atoll_txn::{Abort, Protocol, Txn};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub const PRODUCT: TableId = TableId(0);
pub const ORDER: TableId = TableId(1);
pub const ORDER_LINE: TableId = TableId(2);
pub const TYPES: [&str; 1] = ["checkout"];
const CHECKOUT_TYPE: usize = 0;

/// Products, orders and lines of one checkout (the paper's 3).
pub const LINES: usize = 3;
/// The paper's table: 1 million products.
const PRODUCTS_DEFAULT: u64 = 1_000_000;
/// Most products: the sizing refuses what does not fit in memory well before.
const PRODUCTS_MAX: u64 = 1 << 32;
const WORD_BYTES: u64 = 8;
/// "every record is roughly 1KB".
const PRODUCT_BYTES_DEFAULT: u64 = 1024;
/// The engine's two words and the product's three.
const PRODUCT_BYTES_MIN: u64 = WORD_BYTES * (ENGINE_PAYLOAD_WORDS as u64 + PRODUCT_WORDS);
const PRODUCT_BYTES_MAX: u64 = 64 * 1024;
/// TPC-C's OL_QUANTITY range (1..=10).
const QUANTITY_MAX_DEFAULT: u64 = 10;
/// The largest `quantity_max`: a restock covers any one line.
const QUANTITY_MAX_LIMIT: u64 = RESTOCK_UNITS;
/// Orders a run may add per node by default: room for the default 10 s run at 200,000
/// checkouts a second over two nodes (2 in-process nodes on a busy 2-core machine ran
/// 91,000: docs/workloads.md), in about 450 MiB of order and line tables per node.
/// Orders per node the tables are first laid out for when they grow (their index starts
/// at this size and splits from there).
const ORDERS_START: u64 = 1024;
/// Most orders per node: every order's lines fit a table's 32-bit slot count.
const ORDERS_MAX_LIMIT: u64 = u32::MAX as u64 / LINES as u64;

/// A product's stock at load, and what a restock adds (TPC-C: S_QUANTITY at most 100, +91
/// when short).
pub const INITIAL_STOCK_UNITS: u64 = 100;
pub const RESTOCK_UNITS: u64 = 100;

/// Product words (after the engine's).
const P_STOCK: usize = 0;
/// Σ quantity ordered (TPC-C's S_YTD).
const P_ORDERED: usize = 1;
const P_RESTOCKS: usize = 2;
/// The first padding word.
const P_PADDING: usize = 3;
const PRODUCT_WORDS: u64 = P_PADDING as u64;

/// Order words.
const O_LINES: usize = 0;
const O_QUANTITY: usize = 1;
const ORDER_WORDS: u32 = 2;
/// Order-line words.
const OL_PRODUCT: usize = 0;
const OL_QUANTITY: usize = 1;
const ORDER_LINE_WORDS: u32 = 2;

/// Order keys: the node above [`ORDER_SEQ_BITS`] bits of its sequence number.
const ORDER_SEQ_BITS: u32 = 40;
/// Line keys: the order above [`LINE_BITS`] bits of the line number (0..3).
const LINE_BITS: u32 = 2;
const _: () = assert!(LINES as u64 <= 1 << LINE_BITS);
const _: () = assert!(ORDERS_MAX_LIMIT < 1 << ORDER_SEQ_BITS);
/// Draws before a checkout's remaining products are taken in order: plenty for any table
/// with several times three products, short for a table of barely three.
const DRAWS_PER_PRODUCT_MAX: u64 = 64;

/// The key of node `n`'s `seq`-th order (from 1).
pub fn order_key(n: u16, seq: u64) -> u64 {
    (n as u64) << ORDER_SEQ_BITS | seq
}

/// The node an order (and its lines) lives on.
pub fn order_node(order: u64) -> u16 {
    (order >> ORDER_SEQ_BITS) as u16
}

/// The key of line `line` (0..3) of `order`.
pub fn line_key(order: u64, line: usize) -> u64 {
    order << LINE_BITS | line as u64
}

/// The order a line belongs to.
pub fn line_order(line: u64) -> u64 {
    line >> LINE_BITS
}

/// Padding word `i` of product `key`: a function of both, so a product's words written to
/// another product are seen.
fn padding(key: u64, i: usize) -> u64 {
    hash_key(key ^ (i as u64).rotate_left(32))
}

/// A product's weight in the per-product fingerprint of ordered quantities.
fn weight(product: u64) -> u64 {
    hash_key(product) | 1
}

#[derive(Debug)]
pub struct Checkout {
    pub products: u64,
    pub product_bytes: u64,
    pub quantity_max: u64,
    /// Orders per node the tables hold.
    /// A cap on the orders per node (`None`: the tables grow).
    pub orders_max: Option<u64>,
    nodes: u16,
    /// Per node: the checkouts its coordinators drew (each draw takes the next order key).
    drawn: Vec<AtomicU64>,
    /// `(index, count)`: this process draws every `count`-th order sequence number from
    /// `index + 1`, so processes whose coordinators order on the same node (shared-data's
    /// compute nodes) never draw the same key. `(0, 1)` in one process.
    stripe: (u64, u64),
}

/// One checkout: the order it inserts and its lines, `(product, quantity)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Input {
    pub order: u64,
    pub lines: [(u64, u64); LINES],
}

/// Encoded as the order key, then product and quantity of each line.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        out.push(self.order);
        for (p, q) in self.lines {
            out.extend([p, q]);
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut w = crate::Words::new(Checkout::NAME, words);
        let order = w.next()?;
        let mut lines = [(0, 0); LINES];
        for i in 0..LINES {
            let (p, q) = (w.next()?, w.next()?);
            if q == 0 {
                return Err(w.error(format!("line {i} orders quantity 0: expected 1 or more")));
            }
            if lines[..i].iter().any(|o| o.0 == p) {
                return Err(w.error(format!(
                    "product {p} is on two lines: expected {LINES} distinct products"
                )));
            }
            lines[i] = (p, q);
        }
        w.end()?;
        Ok(Input { order, lines })
    }
}

/// One line of a committed checkout, from the values it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineEffect {
    pub product: u64,
    /// The quantity written into the line.
    pub quantity: u64,
    /// The stock written is not the stock read less the quantity: a restock.
    pub restocked: bool,
}

/// What a committed checkout did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Effect {
    pub order: u64,
    pub lines: [LineEffect; LINES],
}

/// Per product: what committed lines did to it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProductLedger {
    pub ordered: u64,
    pub restocks: u64,
}

/// Committed checkouts' effects.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub products: KeyMap<u64, ProductLedger>,
    /// Committed checkouts by the node whose coordinator ran them (where their orders are).
    pub orders_by_node: BTreeMap<u16, u64>,
    /// Σ quantity of every committed line.
    pub quantity: u64,
}

/// One check's part on one node: comparisons made, failed, the first few failures.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tally {
    pub checked: u64,
    pub failed: u64,
    pub examples: Vec<String>,
}

impl Tally {
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        self.checked += 1;
        if !ok {
            self.failed += 1;
            push_example(&mut self.examples, what);
        }
    }

    fn add(&mut self, from: &Tally) {
        self.checked += from.checked;
        self.failed += from.failed;
        for e in &from.examples {
            push_example(&mut self.examples, || e.clone());
        }
    }
}

/// One node's part of the checks.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCheck {
    /// Its products against the ledger and their own words.
    pub products: Tally,
    /// Its orders and lines: three lines each, each line an order's, quantities agreeing.
    pub orders: Tally,
    /// Live ORDER rows.
    pub order_count: u64,
    /// Σ P_ORDERED of its products, and Σ weight(product) × P_ORDERED (wrapping).
    pub product_ordered: u64,
    /// Σ P_RESTOCKS of its products.
    pub restocks: u64,
    pub product_fingerprint: u64,
    /// Σ quantity of its lines, and Σ weight(product) × quantity (wrapping).
    pub line_quantity: u64,
    pub line_fingerprint: u64,
}

impl Checkout {
    pub const KNOBS: &'static [&'static str] =
        &["products", "product_bytes", "quantity_max", "orders_max"];

    pub fn from_params(p: &Params, nodes: u16) -> Result<Self, ParamError> {
        let k = Knobs::new(Checkout::NAME, p, Self::KNOBS)?;
        // Three distinct products per checkout.
        let products = k.u64("products", PRODUCTS_DEFAULT, LINES as u64, PRODUCTS_MAX)?;
        let product_bytes = k.u64(
            "product_bytes",
            PRODUCT_BYTES_DEFAULT,
            PRODUCT_BYTES_MIN,
            PRODUCT_BYTES_MAX,
        )?;
        if product_bytes % WORD_BYTES != 0 {
            return Err(ParamError(format!(
                "checkout product_bytes={product_bytes} is not accepted: expected a multiple of {WORD_BYTES} in {PRODUCT_BYTES_MIN}..={PRODUCT_BYTES_MAX}"
            )));
        }
        let quantity_max = k.u64("quantity_max", QUANTITY_MAX_DEFAULT, 1, QUANTITY_MAX_LIMIT)?;
        let orders_max = k.cap("orders_max", 1, ORDERS_MAX_LIMIT)?;
        Ok(Checkout {
            products,
            product_bytes,
            quantity_max,
            orders_max,
            nodes,
            drawn: (0..nodes).map(|_| AtomicU64::new(0)).collect(),
            stripe: (0, 1),
        })
    }

    /// The workload as process `index` of `count` processes drawing orders for the same
    /// nodes sees it (see `stripe`).
    pub fn striped(mut self, index: u16, count: u16) -> Self {
        assert!(index < count, "stripe {index} of {count}");
        self.stripe = (index as u64, count as u64);
        self
    }

    /// The workload's words of a product (the engine's two not counted).
    fn product_words(&self) -> usize {
        (self.product_bytes / WORD_BYTES) as usize - ENGINE_PAYLOAD_WORDS as usize
    }

    /// Products on each node (key modulo the node count): the most any node holds.
    /// Orders per node the order tables are laid out for at start: their cap, or
    /// [`ORDERS_START`] when they grow.
    fn orders_start(&self) -> u64 {
        self.orders_max.unwrap_or(ORDERS_START)
    }

    fn products_per_node(&self) -> u64 {
        self.products.div_ceil(self.nodes as u64)
    }

    /// The products node `n` holds.
    fn products_of(&self, n: u16) -> impl Iterator<Item = u64> {
        (n as u64..self.products).step_by(self.nodes as usize)
    }

    /// Three distinct products, uniformly.
    fn draw_products(&self, rng: &mut Rng) -> [u64; LINES] {
        let mut ps = [0u64; LINES];
        let mut have = 0;
        let mut draws = 0;
        while have < LINES && draws < LINES as u64 * DRAWS_PER_PRODUCT_MAX {
            draws += 1;
            let p = rng.below(self.products);
            if !ps[..have].contains(&p) {
                ps[have] = p;
                have += 1;
            }
        }
        // Rarely (a table of barely three): the next free products from a random one on.
        let mut p = rng.below(self.products);
        while have < LINES {
            if !ps[..have].contains(&p) {
                ps[have] = p;
                have += 1;
            }
            p = (p + 1) % self.products;
        }
        ps
    }

    fn partition_by(shift: u32) -> Partition {
        Partition::Custom(Arc::new(move |key| (key >> shift) as u16))
    }
}

impl Workload for Checkout {
    type Input = Input;
    type Effect = Effect;
    type Ledger = Ledger;
    type NodeCheck = NodeCheck;
    const NAME: &'static str = "checkout";
    const INSERTS: bool = true;
    const DECLARES_KEYS: bool = true;
    const CONFLICTS_ON_LOCKS: bool = true;
    const ABOUT: &'static str = "TPC-W's, as RSI's paper ran it: 3 products read and restocked, an order and 3 lines inserted";
    const SMALL_PARAMS: &'static [(&'static str, &'static str)] = &[
        ("products", "30"),
        ("product_bytes", "128"),
        ("orders_max", "2000"),
    ];

    fn configure(p: &Params, shape: &crate::WorkloadShape) -> Result<Self, ParamError> {
        Checkout::from_params(p, shape.nodes).map(|w| w.striped(shape.stripe.0, shape.stripe.1))
    }

    fn txn_types(&self) -> &'static [&'static str] {
        &TYPES
    }

    fn tables(&self, _nodes: u16) -> Vec<TableSpec> {
        // Counts over u32 cannot be a table: they saturate, and the sizing names them.
        let capacity = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        vec![
            TableSpec {
                // Products, orders and lines are never deleted.
                gone_keys_max_per_node: 0,
                name: "product".into(),
                payload_words: self.product_words() as u32,
                capacity_per_node: capacity(self.products_per_node()),
                capacity_max_per_node: Some(capacity(self.products_per_node())),
                partition: Partition::Modulo,
                ordered: false,
            },
            TableSpec {
                gone_keys_max_per_node: 0,
                name: "order".into(),
                payload_words: ORDER_WORDS,
                capacity_per_node: capacity(self.orders_start()),
                capacity_max_per_node: self.orders_max.map(capacity),
                partition: Self::partition_by(ORDER_SEQ_BITS),
                ordered: false,
            },
            TableSpec {
                gone_keys_max_per_node: 0,
                name: "order_line".into(),
                payload_words: ORDER_LINE_WORDS,
                capacity_per_node: capacity(self.orders_start() * LINES as u64),
                capacity_max_per_node: self.orders_max.map(|m| capacity(m * LINES as u64)),
                partition: Self::partition_by(ORDER_SEQ_BITS + LINE_BITS),
                ordered: false,
            },
        ]
    }

    fn load(&self, store: &Store) -> Result<(), atoll_storage::StoreError> {
        let mut words = vec![0u64; self.product_words()];
        for k in self.products_of(store.node.0) {
            words[P_STOCK] = INITIAL_STOCK_UNITS;
            for (i, w) in words.iter_mut().enumerate().skip(P_PADDING) {
                *w = padding(k, i);
            }
            store.insert(PRODUCT, k, &words)?;
        }
        Ok(())
    }

    fn largest_write_set(&self) -> Vec<TableId> {
        [PRODUCT; LINES]
            .into_iter()
            .chain([ORDER])
            .chain([ORDER_LINE; LINES])
            .collect()
    }

    fn generate(&self, rng: &mut Rng, _nodes: u16, home: NodeId) -> (usize, Input) {
        let (index, count) = self.stripe;
        let seq = self.drawn[home.0 as usize].fetch_add(1, Ordering::Relaxed) * count + index + 1;
        let products = self.draw_products(rng);
        let lines = products.map(|p| (p, rng.range_inclusive(1, self.quantity_max)));
        (
            CHECKOUT_TYPE,
            Input {
                order: order_key(home.0, seq),
                lines,
            },
        )
    }

    fn access_set(&self, input: &Input) -> Option<AccessSet> {
        let w = AccessMode::Write;
        Some(AccessSet::new(
            input
                .lines
                .iter()
                .map(|&(p, _)| (PRODUCT, p, w))
                .chain([(ORDER, input.order, w)])
                .chain((0..LINES).map(|i| (ORDER_LINE, line_key(input.order, i), w))),
        ))
    }

    fn sequenced_refusal(&self) -> Option<String> {
        self.orders_max.map(|n| {
            crate::capped_table_refusal("checkout", "orders_max", n, "tables order and order_line")
        })
    }

    async fn execute<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        let fetch = input.lines.map(|(p, _)| (PRODUCT, p, true));
        tx.fetch(&fetch).await?;
        let mut lines = [LineEffect {
            product: 0,
            quantity: 0,
            restocked: false,
        }; LINES];
        let mut total = 0;
        for (i, &(p, q)) in input.lines.iter().enumerate() {
            let mut words = tx.read_for_update(PRODUCT, p).await?.to_vec();
            let stock = words[P_STOCK];
            let restock = stock < q;
            words[P_STOCK] = if restock {
                stock + RESTOCK_UNITS - q
            } else {
                stock - q
            };
            words[P_ORDERED] += q;
            words[P_RESTOCKS] += restock as u64;
            tx.write(PRODUCT, p, &words);
            let mut ol = [0u64; ORDER_LINE_WORDS as usize];
            ol[OL_PRODUCT] = p;
            ol[OL_QUANTITY] = q;
            tx.insert(ORDER_LINE, line_key(input.order, i), &ol);
            lines[i] = LineEffect {
                product: p,
                quantity: ol[OL_QUANTITY],
                // Read and written values: a line alone takes its quantity off.
                restocked: words[P_STOCK] + ol[OL_QUANTITY] != stock,
            };
            total += q;
        }
        let mut o = [0u64; ORDER_WORDS as usize];
        o[O_LINES] = LINES as u64;
        o[O_QUANTITY] = total;
        tx.insert(ORDER, input.order, &o);
        Ok(Effect {
            order: input.order,
            lines,
        })
    }

    fn record(&self, ledger: &mut Ledger, e: Effect) {
        *ledger
            .orders_by_node
            .entry(order_node(e.order))
            .or_insert(0) += 1;
        for l in e.lines {
            let p = ledger.products.entry(l.product).or_default();
            p.ordered += l.quantity;
            p.restocks += l.restocked as u64;
            ledger.quantity += l.quantity;
        }
    }

    fn merge(&self, into: &mut Ledger, from: Ledger) {
        for (k, v) in from.products {
            let p = into.products.entry(k).or_default();
            p.ordered += v.ordered;
            p.restocks += v.restocks;
        }
        for (n, c) in from.orders_by_node {
            *into.orders_by_node.entry(n).or_insert(0) += c;
        }
        into.quantity += from.quantity;
    }

    fn check_node(&self, s: &Store, ledger: &Ledger) -> NodeCheck {
        let mut c = NodeCheck::default();
        let mut payload = Vec::new();
        let first = ENGINE_PAYLOAD_WORDS as usize;
        for k in self.products_of(s.node.0) {
            let Some(idx) = s.lookup(PRODUCT, k) else {
                c.products.expect(false, || {
                    format!("product {k} missing on node {}", s.node.0)
                });
                continue;
            };
            s.read_payload(PRODUCT, idx, &mut payload);
            let w = &payload[first..];
            let l = ledger.products.get(&k).copied().unwrap_or_default();
            let (stock, ordered, restocks) = (w[P_STOCK], w[P_ORDERED], w[P_RESTOCKS]);
            // Stock decrease = quantity ordered − restocks, in the ledger's figures.
            let decrease = INITIAL_STOCK_UNITS as i128 - stock as i128;
            let expected = l.ordered as i128 - (RESTOCK_UNITS * l.restocks) as i128;
            c.products.expect(decrease == expected, || {
                format!(
                    "product {k}: stock {stock}, decreased by {decrease}; committed lines ordered {} with {} restocks of {RESTOCK_UNITS}: expected a decrease of {expected}",
                    l.ordered, l.restocks
                )
            });
            c.products.expect(
                ordered == l.ordered && restocks == l.restocks,
                || {
                    format!(
                        "product {k}: ordered {ordered} and restocked {restocks} times, committed lines say {} and {}",
                        l.ordered, l.restocks
                    )
                },
            );
            c.products.expect((stock as i64) >= 0, || {
                format!("product {k}: stock {} is negative", stock as i64)
            });
            let padded = (P_PADDING..w.len()).all(|i| w[i] == padding(k, i));
            c.products.expect(padded, || {
                format!("product {k}: padding words are not its own")
            });
            c.product_ordered += ordered;
            c.restocks += restocks;
            c.product_fingerprint = c
                .product_fingerprint
                .wrapping_add(weight(k).wrapping_mul(ordered));
        }
        // Orders and lines live together on the ordering coordinator's node.
        let mut orders: HashMap<u64, (u64, u64)> = HashMap::new();
        live(s, ORDER, |k, w| {
            orders.insert(k, (w[O_LINES], w[O_QUANTITY]));
        });
        c.order_count = orders.len() as u64;
        // Per order: its lines (a bit each) and their quantity.
        let mut lines: HashMap<u64, (u64, u64)> = HashMap::new();
        live(s, ORDER_LINE, |k, w| {
            let e = lines.entry(line_order(k)).or_default();
            e.0 |= 1 << (k & ((1 << LINE_BITS) - 1));
            e.1 += w[OL_QUANTITY];
            c.line_quantity += w[OL_QUANTITY];
            c.line_fingerprint = c
                .line_fingerprint
                .wrapping_add(weight(w[OL_PRODUCT]).wrapping_mul(w[OL_QUANTITY]));
        });
        let all_lines = (1u64 << LINES) - 1;
        let mut keys: Vec<_> = orders.keys().copied().collect();
        keys.sort_unstable();
        for o in keys {
            let (count, quantity) = orders[&o];
            let (mask, line_quantity) = lines.get(&o).copied().unwrap_or_default();
            c.orders.expect(
                count == LINES as u64 && mask == all_lines && quantity == line_quantity,
                || {
                    format!(
                        "order {o:#x}: says {count} lines of quantity {quantity}; has lines {:?} of quantity {line_quantity}",
                        (0..LINES).filter(|i| mask & 1 << i != 0).collect::<Vec<_>>()
                    )
                },
            );
        }
        let mut orphans: Vec<_> = lines
            .keys()
            .filter(|o| !orders.contains_key(o))
            .copied()
            .collect();
        orphans.sort_unstable();
        for o in orphans {
            c.orders.expect(false, || {
                format!("lines of order {o:#x}, which does not exist")
            });
        }
        c
    }

    fn check_cluster(&self, parts: Vec<NodeCheck>, ledger: &Ledger) -> Vec<CheckResult> {
        let (mut products, mut orders) = (Tally::default(), Tally::default());
        let mut counts = Tally::default();
        let (mut p_ordered, mut p_print, mut l_quantity, mut l_print) = (0u64, 0u64, 0u64, 0u64);
        let mut restocks = 0;
        let mut order_total = 0;
        for (n, part) in parts.iter().enumerate() {
            products.add(&part.products);
            orders.add(&part.orders);
            let committed = ledger.orders_by_node.get(&(n as u16)).copied().unwrap_or(0);
            counts.expect(part.order_count == committed, || {
                format!(
                    "node {n} holds {} orders, its coordinators committed {committed} checkouts",
                    part.order_count
                )
            });
            order_total += part.order_count;
            p_ordered += part.product_ordered;
            restocks += part.restocks;
            p_print = p_print.wrapping_add(part.product_fingerprint);
            l_quantity += part.line_quantity;
            l_print = l_print.wrapping_add(part.line_fingerprint);
        }
        let verdict = |name: &str, what: &str, t: &Tally, totals: String| {
            // Nothing to compare passes: a run that committed no checkout holds no orders.
            let passed = t.failed == 0;
            CheckResult {
                name: name.into(),
                passed,
                detail: if t.checked == 0 {
                    format!("{what}: nothing to compare")
                } else if passed {
                    format!("{what}: all {} comparisons hold{totals}", t.checked)
                } else {
                    format!(
                        "{what}: {} of {} comparisons fail{totals}: {}",
                        t.failed,
                        t.checked,
                        t.examples.join("; ")
                    )
                },
                binds: Binds::Always,
            }
        };
        let lines_ok =
            l_quantity == p_ordered && l_print == p_print && l_quantity == ledger.quantity;
        vec![
            verdict(
                "checkout.stock_decrease_equals_quantity_ordered",
                "per product: stock decrease = committed quantity ordered − restocks, ordered and restock counters = the ledger's, stock not negative, padding intact",
                &products,
                format!(" (quantity {p_ordered} ordered, {restocks} restocks)"),
            ),
            verdict(
                "checkout.orders_have_three_lines",
                "every order has exactly 3 lines whose quantities sum to its own, and every line an order",
                &orders,
                String::new(),
            ),
            verdict(
                "checkout.orders_match_committed_checkouts",
                &format!("orders per node = checkouts its coordinators committed ({order_total} orders)"),
                &counts,
                String::new(),
            ),
            CheckResult {
                name: "checkout.order_lines_match_products".into(),
                passed: lines_ok,
                detail: if lines_ok {
                    format!(
                        "the lines' quantities, per product, are the products' ordered quantities (Σ {l_quantity}, the committed lines' too)"
                    )
                } else {
                    format!(
                        "lines hold Σ quantity {l_quantity} (fingerprint {l_print:#x}), products' ordered counters Σ {p_ordered} (fingerprint {p_print:#x}), committed lines Σ {}",
                        ledger.quantity
                    )
                },
                binds: Binds::Always,
            },
        ]
    }

    fn knobs(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            ("products".into(), self.products.to_string()),
            ("product_bytes".into(), self.product_bytes.to_string()),
            ("quantity_max".into(), self.quantity_max.to_string()),
            (
                "orders_max".into(),
                self.orders_max
                    .map_or_else(|| "none".to_string(), |m| m.to_string()),
            ),
        ])
    }
}

/// Calls `f` with the key and workload words of every live record of `t` on `s`.
fn live(s: &Store, t: TableId, mut f: impl FnMut(u64, &[u64])) {
    let layout = *s.catalog.layout(t);
    let first = (HEADER_WORDS + ENGINE_PAYLOAD_WORDS) as usize;
    let mut tuple = vec![0; layout.tuple_words as usize];
    for idx in 0..s.used_slots(t) {
        s.read_tuple(t, idx, &mut tuple);
        if tuple[H_VERSION as usize] & VERSION_ABSENT == 0 {
            f(tuple[H_KEY as usize], &tuple[first..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::NodeMemory;
    use atoll_storage::Catalog;
    use std::collections::HashSet;

    fn params(kv: &[(&str, &str)]) -> Params {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn checkout(kv: &[(&str, &str)], nodes: u16) -> Checkout {
        Checkout::from_params(&params(kv), nodes).unwrap()
    }

    fn loaded(w: &Checkout, nodes: u16) -> Vec<Arc<Store>> {
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

    /// Leaves in the tables what `input` committed would, with the effect it would report:
    /// the products updated in place, the order and its lines inserted.
    fn apply(w: &Checkout, stores: &[Arc<Store>], input: &Input) -> Effect {
        let nodes = stores.len() as u64;
        let mut lines = [LineEffect {
            product: 0,
            quantity: 0,
            restocked: false,
        }; LINES];
        let mut total = 0;
        for (i, &(p, q)) in input.lines.iter().enumerate() {
            let s = &stores[(p % nodes) as usize];
            let idx = s.lookup(PRODUCT, p).unwrap();
            let off = (s.catalog.layout(PRODUCT).record_offset(idx)
                + HEADER_WORDS
                + ENGINE_PAYLOAD_WORDS) as usize;
            let r = s.region(PRODUCT);
            let stock = r.load(off + P_STOCK);
            let restocked = stock < q;
            let new = if restocked {
                stock + RESTOCK_UNITS - q
            } else {
                stock - q
            };
            r.store(off + P_STOCK, new);
            r.store(off + P_ORDERED, r.load(off + P_ORDERED) + q);
            r.store(
                off + P_RESTOCKS,
                r.load(off + P_RESTOCKS) + restocked as u64,
            );
            let home = &stores[order_node(input.order) as usize];
            home.insert(ORDER_LINE, line_key(input.order, i), &[p, q])
                .unwrap();
            lines[i] = LineEffect {
                product: p,
                quantity: q,
                restocked,
            };
            total += q;
        }
        stores[order_node(input.order) as usize]
            .insert(ORDER, input.order, &[LINES as u64, total])
            .unwrap();
        let _ = w;
        Effect {
            order: input.order,
            lines,
        }
    }

    fn failed(checks: &[CheckResult]) -> Vec<&str> {
        checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn checkout_defaults_are_the_papers_million_1kib_products_and_bad_knobs_are_refused_by_name() {
        let w = checkout(&[], 2);
        assert_eq!((w.products, w.product_bytes), (1_000_000, 1024));
        assert_eq!(w.product_words(), 1024 / 8 - 2);
        let err = |kv: &[(&str, &str)]| Checkout::from_params(&params(kv), 2).unwrap_err().0;
        for (kv, says) in [
            (
                ("products", "2"),
                "checkout products=2 is out of range: expected 3..=",
            ),
            (
                ("product_bytes", "1020"),
                "product_bytes=1020 is not accepted: expected a multiple of 8 in 40..=65536",
            ),
            (
                ("product_bytes", "32"),
                "product_bytes=32 is out of range: expected 40..=65536",
            ),
            (
                ("quantity_max", "0"),
                "quantity_max=0 is out of range: expected 1..=100",
            ),
            (
                ("quantity_max", "101"),
                "quantity_max=101 is out of range: expected 1..=100",
            ),
            (
                ("orders_max", "many"),
                "orders_max=many is not a whole number",
            ),
            (
                ("product", "5"),
                "unknown checkout knob 'product': accepted knobs are products, product_bytes",
            ),
        ] {
            let e = err(&[kv]);
            assert!(e.contains(says), "{kv:?}: {e}");
        }
    }

    #[test]
    fn checkout_draws_three_distinct_products_uniformly_and_an_order_key_no_other_checkout_has() {
        let w = checkout(&[("products", "40"), ("quantity_max", "4")], 3);
        let mut rng = Rng::new(7);
        let mut orders = HashSet::new();
        let mut per_product = [0u64; 40];
        const DRAWS: u64 = 30_000;
        for i in 0..DRAWS {
            let home = NodeId((i % 3) as u16);
            let (ty, input) = w.generate(&mut rng, 3, home);
            assert_eq!(ty, CHECKOUT_TYPE);
            assert!(
                orders.insert(input.order),
                "order {:#x} drawn twice",
                input.order
            );
            assert_eq!(
                order_node(input.order),
                home.0,
                "the order lives with its coordinator"
            );
            let ps: HashSet<u64> = input.lines.iter().map(|l| l.0).collect();
            assert_eq!(ps.len(), LINES, "{input:?}");
            for (p, q) in input.lines {
                assert!((1..=4).contains(&q), "{input:?}");
                per_product[p as usize] += 1;
            }
        }
        let mean = (DRAWS * LINES as u64) as f64 / 40.0;
        for n in per_product {
            assert!((n as f64 - mean).abs() < mean * 0.1, "{per_product:?}");
        }
        // A table of barely three products: every checkout buys all three.
        let tiny = checkout(&[("products", "3")], 2);
        for _ in 0..100 {
            let mut ps: Vec<u64> = tiny
                .generate(&mut rng, 2, NodeId(1))
                .1
                .lines
                .map(|l| l.0)
                .to_vec();
            ps.sort_unstable();
            assert_eq!(ps, [0, 1, 2]);
        }
    }

    #[test]
    fn checkout_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let w = checkout(&[("products", "100")], 2);
        let mut rng = Rng::new(8);
        let mut words = Vec::new();
        for _ in 0..1000 {
            let (_, input) = w.generate(&mut rng, 2, NodeId(1));
            words.clear();
            input.encode(&mut words);
            assert_eq!(Input::decode(&words), Ok(input));
        }
        let e = Input::decode(&[9, 1, 2, 3, 0, 4, 1]).unwrap_err();
        assert!(e.reason.contains("line 1 orders quantity 0"), "{e}");
        let e = Input::decode(&[9, 1, 2, 3, 1, 1, 1]).unwrap_err();
        assert!(e.reason.contains("product 1 is on two lines"), "{e}");
        assert!(Input::decode(&[9, 1, 2, 3, 1]).is_err(), "a line short");
        assert!(
            Input::decode(&[9, 1, 2, 3, 1, 4, 1, 0]).is_err(),
            "a word left over"
        );
    }

    #[test]
    fn checkout_checks_pass_on_committed_orders_with_restocks_and_name_a_lost_stock_update_a_missing_line_and_a_lost_order(
    ) {
        let w = checkout(&[("products", "6"), ("orders_max", "50")], 2);
        let stores = loaded(&w, 2);
        let mut ledger = Ledger::default();
        assert!(failed(&w.check(&stores, &ledger)).is_empty());
        // 40 orders of 10 of products 0, 1, 3 (on both nodes): 400 each, 4 restocks.
        for seq in 1..=40 {
            let home = (seq % 2) as u16;
            let input = Input {
                order: order_key(home, seq),
                lines: [(0, 10), (1, 10), (3, 10)],
            };
            let e = apply(&w, &stores, &input);
            w.record(&mut ledger, e);
        }
        assert_eq!(
            ledger.products[&0].restocks, 3,
            "100 → 0 by 10, restocked below 10"
        );
        let checks = w.check(&stores, &ledger);
        assert!(failed(&checks).is_empty(), "{checks:?}");
        // A committed order whose stock update was lost: product 3 kept its stock.
        let extra = Input {
            order: order_key(0, 41),
            lines: [(0, 5), (1, 5), (3, 5)],
        };
        let mut e = apply(&w, &stores, &extra);
        w.record(&mut ledger, e);
        let s = &stores[1];
        let idx = s.lookup(PRODUCT, 3).unwrap();
        let off = (s.catalog.layout(PRODUCT).record_offset(idx)
            + HEADER_WORDS
            + ENGINE_PAYLOAD_WORDS) as usize;
        s.region(PRODUCT)
            .store(off + P_STOCK, s.region(PRODUCT).load(off + P_STOCK) + 5);
        let checks = w.check(&stores, &ledger);
        assert_eq!(
            failed(&checks),
            ["checkout.stock_decrease_equals_quantity_ordered"]
        );
        assert!(
            checks[0].detail.contains("product 3: stock"),
            "{}",
            checks[0].detail
        );
        s.region(PRODUCT)
            .store(off + P_STOCK, s.region(PRODUCT).load(off + P_STOCK) - 5);
        // An order that lost a line (and the line's quantity is gone from the lines' sums).
        stores[0]
            .delete(ORDER_LINE, line_key(extra.order, 2))
            .unwrap();
        let checks = w.check(&stores, &ledger);
        assert_eq!(
            failed(&checks),
            [
                "checkout.orders_have_three_lines",
                "checkout.order_lines_match_products"
            ]
        );
        assert!(
            checks[1].detail.contains(&format!(
                "order {:#x}: says 3 lines of quantity 15; has lines [0, 1] of quantity 10",
                extra.order
            )),
            "{}",
            checks[1].detail
        );
        stores[0]
            .insert(ORDER_LINE, line_key(extra.order, 2), &[3, 5])
            .unwrap();
        assert!(failed(&w.check(&stores, &ledger)).is_empty());
        // A committed checkout whose order is not there, and a line without its order.
        e.order = order_key(1, 42);
        w.record(&mut ledger, e);
        stores[1]
            .insert(ORDER_LINE, line_key(order_key(1, 43), 0), &[0, 0])
            .unwrap();
        let checks = w.check(&stores, &ledger);
        let f = failed(&checks);
        assert!(
            f.contains(&"checkout.orders_match_committed_checkouts")
                && f.contains(&"checkout.orders_have_three_lines"),
            "{checks:?}"
        );
        assert!(
            checks[2]
                .detail
                .contains("node 1 holds 20 orders, its coordinators committed 21 checkouts"),
            "{}",
            checks[2].detail
        );
        assert!(
            checks[1].detail.contains("which does not exist"),
            "{}",
            checks[1].detail
        );
    }
}
