//! TPC-C's five transactions (spec 2.4–2.8): inputs, their generation and word encoding,
//! the logic against the [`Txn`] API, and the ledger of committed effects the checks use.

use super::keys::*;
use super::load::*;
use super::{Tpcc, TYPES};
use crate::{InputDecodeError, TxnInput, Words};
use atoll_fabric::rng::Rng;
use atoll_fabric::NodeId;
use atoll_txn::{Abort, Protocol, Txn};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Percent of NewOrders that name an unused item and roll back (2.4.1.4).
const ROLLBACK_PERCENT: u64 = 1;
/// Percent of order lines supplied by another warehouse (2.4.1.5).
const REMOTE_LINE_PERCENT: u64 = 1;
/// Percent of Payments to a customer of another warehouse (2.5.1.2), and of Payments and
/// OrderStatus that select the customer by last name (2.5.1.2, 2.6.1.2).
const REMOTE_CUSTOMER_PERCENT: u64 = 15;
const BY_NAME_PERCENT: u64 = 60;
/// OL_QUANTITY 1..=10; H_AMOUNT 1.00..=5000.00; StockLevel threshold 10..=20.
const QUANTITY_MAX: u64 = 10;
const PAYMENT_MIN: u64 = CENTS;
const PAYMENT_MAX: u64 = 5000 * CENTS;
const THRESHOLD_MIN: u64 = 10;
const THRESHOLD_MAX: u64 = 20;
/// StockLevel examines the district's last 20 orders (2.8.2.2).
const STOCK_LEVEL_ORDERS: u64 = 20;
/// S_QUANTITY below this plus the ordered quantity is restocked by 91 (2.4.2.2).
const RESTOCK_MARGIN: u64 = 10;
const RESTOCK: u64 = 91;
/// C_DATA's stand-in: a rolling hash of the payments appended to it (2.5.2.2).
const C_DATA_MULTIPLIER: u64 = 0x9e37_79b9_7f4a_7c15;

/// How Payment and OrderStatus name their customer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CustomerSel {
    Id(u64),
    /// Last name number: the customer at position ⌈n/2⌉ of those with it, by first name.
    Last(u64),
}

/// One order line of a NewOrder: item, supplying warehouse, quantity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line {
    pub i: u64,
    pub supply_w: u64,
    pub qty: u64,
}

/// One transaction's input; warehouses and districts are 0-based.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    NewOrder {
        w: u64,
        d: u64,
        c: u64,
        lines: Vec<Line>,
    },
    Payment {
        w: u64,
        d: u64,
        c_w: u64,
        c_d: u64,
        customer: CustomerSel,
        amount: u64,
    },
    OrderStatus {
        w: u64,
        d: u64,
        customer: CustomerSel,
    },
    /// Delivers districts `d_lo .. d_lo + d_count` of `w`.
    Delivery {
        w: u64,
        carrier: u64,
        d_lo: u64,
        d_count: u64,
    },
    StockLevel {
        w: u64,
        d: u64,
        threshold: u64,
    },
}

const SEL_ID: u64 = 0;
const SEL_LAST: u64 = 1;

fn encode_sel(s: CustomerSel, out: &mut Vec<u64>) {
    match s {
        CustomerSel::Id(c) => out.extend([SEL_ID, c]),
        CustomerSel::Last(l) => out.extend([SEL_LAST, l]),
    }
}

fn decode_sel(w: &mut Words) -> Result<CustomerSel, InputDecodeError> {
    let (kind, v) = (w.next()?, w.next()?);
    match kind {
        SEL_ID => Ok(CustomerSel::Id(v)),
        SEL_LAST => Ok(CustomerSel::Last(v)),
        k => Err(w.error(format!(
            "unknown customer selector {k}: expected {SEL_ID} (id) or {SEL_LAST} (last name)"
        ))),
    }
}

/// Encoded as the type's index in [`TYPES`], then the fields in declaration order; a
/// NewOrder's lines as their count, then item, supplying warehouse and quantity of each;
/// a customer selector as 0 and the id, or 1 and the last name.
impl TxnInput for Input {
    fn encode(&self, out: &mut Vec<u64>) {
        match self {
            Input::NewOrder { w, d, c, lines } => {
                out.extend([0, *w, *d, *c, lines.len() as u64]);
                for l in lines {
                    out.extend([l.i, l.supply_w, l.qty]);
                }
            }
            Input::Payment {
                w,
                d,
                c_w,
                c_d,
                customer,
                amount,
            } => {
                out.extend([1, *w, *d, *c_w, *c_d]);
                encode_sel(*customer, out);
                out.push(*amount);
            }
            Input::OrderStatus { w, d, customer } => {
                out.extend([2, *w, *d]);
                encode_sel(*customer, out);
            }
            Input::Delivery {
                w,
                carrier,
                d_lo,
                d_count,
            } => out.extend([3, *w, *carrier, *d_lo, *d_count]),
            Input::StockLevel { w, d, threshold } => out.extend([4, *w, *d, *threshold]),
        }
    }

    fn decode(words: &[u64]) -> Result<Self, InputDecodeError> {
        let mut r = Words::new(Tpcc::NAME_STR, words);
        let kind = r.next()?;
        let w = r.next()?;
        let district = |r: &mut Words| -> Result<u64, InputDecodeError> {
            let d = r.next()?;
            if d < DISTRICTS {
                Ok(d)
            } else {
                Err(r.error(format!("district {d}: expected 0..{DISTRICTS}")))
            }
        };
        let input = match kind {
            0 => {
                let d = district(&mut r)?;
                let c = r.next()?;
                let n = r.next()?;
                if !(ORDER_LINES_MIN..=ORDER_LINES_MAX).contains(&n) {
                    return Err(r.error(format!(
                        "{n} order lines: expected {ORDER_LINES_MIN}..={ORDER_LINES_MAX}"
                    )));
                }
                let mut lines = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    lines.push(Line {
                        i: r.next()?,
                        supply_w: r.next()?,
                        qty: r.next()?,
                    });
                }
                Input::NewOrder { w, d, c, lines }
            }
            1 => Input::Payment {
                w,
                d: district(&mut r)?,
                c_w: r.next()?,
                c_d: district(&mut r)?,
                customer: decode_sel(&mut r)?,
                amount: r.next()?,
            },
            2 => Input::OrderStatus {
                w,
                d: district(&mut r)?,
                customer: decode_sel(&mut r)?,
            },
            3 => {
                let carrier = r.next()?;
                let d_lo = district(&mut r)?;
                let d_count = r.next()?;
                if d_count == 0 || d_lo + d_count > DISTRICTS {
                    return Err(r.error(format!(
                        "districts {d_lo} + {d_count}: expected 1..={DISTRICTS} districts below {DISTRICTS}"
                    )));
                }
                Input::Delivery {
                    w,
                    carrier,
                    d_lo,
                    d_count,
                }
            }
            4 => Input::StockLevel {
                w,
                d: district(&mut r)?,
                threshold: r.next()?,
            },
            k => {
                return Err(r.error(format!(
                    "unknown transaction type {k}: expected 0..{}",
                    TYPES.len()
                )))
            }
        };
        r.end()?;
        Ok(input)
    }
}

/// What a committed transaction changed that the checks count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effect {
    /// NewOrder: its district (`w * DISTRICTS + d`) and its lines `(supplying warehouse,
    /// quantity, remote)`.
    pub new_order: Option<u64>,
    pub lines: Vec<(u64, u64, bool)>,
    /// Payment: its (paying) district and amount.
    pub payment: Option<(u64, u64)>,
    /// Delivery: the districts it delivered an order of.
    pub delivered: Vec<u64>,
}

/// Per district (`w * DISTRICTS + d`): what committed transactions added.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DistrictLedger {
    pub new_orders: u64,
    pub delivered: u64,
    /// Cents paid through this district.
    pub paid: u64,
}

/// Per supplying warehouse: what committed order lines added to its stock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLedger {
    /// Σ OL_QUANTITY: what Σ S_YTD grew by.
    pub quantity: u64,
    /// Order lines: what Σ S_ORDER_CNT grew by.
    pub lines: u64,
    /// Lines ordered from another warehouse: what Σ S_REMOTE_CNT grew by.
    pub remote: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ledger {
    pub districts: BTreeMap<u64, DistrictLedger>,
    pub stock: BTreeMap<u64, StockLedger>,
}

impl Ledger {
    pub fn record(&mut self, e: Effect) {
        if let Some(k) = e.new_order {
            self.districts.entry(k).or_default().new_orders += 1;
        }
        for (w, qty, remote) in e.lines {
            let s = self.stock.entry(w).or_default();
            s.quantity += qty;
            s.lines += 1;
            s.remote += remote as u64;
        }
        if let Some((k, amount)) = e.payment {
            self.districts.entry(k).or_default().paid += amount;
        }
        for k in e.delivered {
            self.districts.entry(k).or_default().delivered += 1;
        }
    }

    pub fn merge(&mut self, from: Ledger) {
        for (k, v) in from.districts {
            let d = self.districts.entry(k).or_default();
            d.new_orders += v.new_orders;
            d.delivered += v.delivered;
            d.paid += v.paid;
        }
        for (k, v) in from.stock {
            let s = self.stock.entry(k).or_default();
            s.quantity += v.quantity;
            s.lines += v.lines;
            s.remote += v.remote;
        }
    }
}

/// The ledger's key of district `d` of warehouse `w`.
pub fn district_index(w: u64, d: u64) -> u64 {
    w * DISTRICTS + d
}

impl Tpcc {
    pub const NAME_STR: &'static str = "tpcc";

    /// Another warehouse than `w`, uniformly, or `w` when it is the only one.
    fn other_warehouse(&self, rng: &mut Rng, w: u64) -> u64 {
        let total = self.warehouses_total();
        if total == 1 {
            w
        } else {
            (w + 1 + rng.below(total - 1)) % total
        }
    }

    fn customer_id(&self, rng: &mut Rng) -> u64 {
        nurand(rng, A_C_ID, C_C_ID, 1, self.customers_per_district)
    }

    fn customer_sel(&self, rng: &mut Rng) -> CustomerSel {
        if percent(rng, BY_NAME_PERCENT) {
            CustomerSel::Last(nurand(rng, A_LAST, C_LAST_RUN, 0, self.last_name_max()))
        } else {
            CustomerSel::Id(self.customer_id(rng))
        }
    }

    pub fn generate_input(&self, rng: &mut Rng, home: NodeId) -> (usize, Input) {
        let mut roll = rng.below(100);
        let mut ty = 0;
        while roll >= self.weights[ty] {
            roll -= self.weights[ty];
            ty += 1;
        }
        let w = home.0 as u64 * self.warehouses + rng.below(self.warehouses);
        let d = rng.below(DISTRICTS);
        let remote = |rng: &mut Rng, p: u64| !self.shardable && percent(rng, p);
        let input = match ty {
            0 => {
                let n = rng.range_inclusive(ORDER_LINES_MIN, ORDER_LINES_MAX);
                let rollback = percent(rng, ROLLBACK_PERCENT);
                let lines = (0..n)
                    .map(|k| Line {
                        i: if rollback && k == n - 1 {
                            self.items + 1
                        } else {
                            nurand(rng, A_OL_I_ID, C_OL_I_ID, 1, self.items)
                        },
                        supply_w: if remote(rng, REMOTE_LINE_PERCENT) {
                            self.other_warehouse(rng, w)
                        } else {
                            w
                        },
                        qty: rng.range_inclusive(1, QUANTITY_MAX),
                    })
                    .collect();
                Input::NewOrder {
                    w,
                    d,
                    c: self.customer_id(rng),
                    lines,
                }
            }
            1 => {
                let (home_w, home_d) = (w, d);
                let (w, d, c_w, c_d) = if !remote(rng, REMOTE_CUSTOMER_PERCENT) {
                    (w, d, w, d)
                } else {
                    let (other_w, other_d) = (self.other_warehouse(rng, w), rng.below(DISTRICTS));
                    if self.payment_remote_warehouse {
                        // DrTM/RCC: the warehouse and district paid are another's; the
                        // customer is of the home warehouse.
                        (other_w, other_d, home_w, home_d)
                    } else {
                        (w, d, other_w, other_d)
                    }
                };
                Input::Payment {
                    w,
                    d,
                    c_w,
                    c_d,
                    customer: self.customer_sel(rng),
                    amount: rng.range_inclusive(PAYMENT_MIN, PAYMENT_MAX),
                }
            }
            2 => Input::OrderStatus {
                w,
                d,
                customer: self.customer_sel(rng),
            },
            3 => {
                let carrier = rng.range_inclusive(1, CARRIERS);
                if self.delivery_per_district {
                    Input::Delivery {
                        w,
                        carrier,
                        d_lo: d,
                        d_count: 1,
                    }
                } else {
                    Input::Delivery {
                        w,
                        carrier,
                        d_lo: 0,
                        d_count: DISTRICTS,
                    }
                }
            }
            _ => Input::StockLevel {
                w,
                d,
                threshold: rng.range_inclusive(THRESHOLD_MIN, THRESHOLD_MAX),
            },
        };
        (ty, input)
    }

    pub async fn run<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        input: &Input,
    ) -> Result<Effect, Abort> {
        match input {
            Input::NewOrder { w, d, c, lines } => self.new_order(tx, *w, *d, *c, lines).await,
            Input::Payment {
                w,
                d,
                c_w,
                c_d,
                customer,
                amount,
            } => {
                self.payment(tx, *w, *d, *c_w, *c_d, *customer, *amount)
                    .await
            }
            Input::OrderStatus { w, d, customer } => {
                self.order_status(tx, *w, *d, *customer).await?;
                Ok(Effect::default())
            }
            Input::Delivery {
                w,
                carrier,
                d_lo,
                d_count,
            } => {
                self.delivery(tx, *w, *carrier, *d_lo..*d_lo + *d_count)
                    .await
            }
            Input::StockLevel { w, d, threshold } => {
                self.stock_level(tx, *w, *d, *threshold).await?;
                Ok(Effect::default())
            }
        }
    }

    /// NewOrder (2.4.2): takes the district's next order id, updates every line's stock,
    /// inserts ORDER, NEW-ORDER, its ORDER_BY_CUSTOMER entry and the lines. An unused item
    /// rolls it all back (`UserAbort`).
    async fn new_order<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        w: u64,
        d: u64,
        c: u64,
        lines: &[Line],
    ) -> Result<Effect, Abort> {
        let (wk, dk, ck) = (warehouse(w), district(w, d), customer(w, d, c));
        tx.fetch(&[
            (WAREHOUSE, wk, false),
            (DISTRICT, dk, true),
            (CUSTOMER, ck, false),
        ])
        .await?;
        let mut dist = tx.get(DISTRICT, dk).ok_or(Abort::NotFound)?.to_vec();
        let o = dist[D_NEXT_O_ID];
        if o > ORDER_ID_MAX {
            return Err(Abort::TableFull);
        }
        dist[D_NEXT_O_ID] += 1;
        tx.write(DISTRICT, dk, &dist);
        let mut batch = Vec::with_capacity(2 * lines.len());
        for l in lines {
            batch.push((ITEM, item(l.i), false));
            batch.push((STOCK, stock(l.supply_w, l.i), true));
        }
        match tx.fetch(&batch).await {
            // The spec's rollback: an item id that no item has (2.4.2.3).
            Err(Abort::NotFound) if lines.iter().any(|l| l.i > self.items) => {
                return Err(Abort::UserAbort)
            }
            r => r?,
        }
        let date = tx.now_ns().max(LOAD_DATE);
        let all_local = lines.iter().all(|l| l.supply_w == w);
        let mut effect = Effect {
            new_order: Some(district_index(w, d)),
            ..Effect::default()
        };
        for (k, l) in lines.iter().enumerate() {
            let price = tx.get(ITEM, item(l.i)).ok_or(Abort::NotFound)?[I_PRICE];
            let sk = stock(l.supply_w, l.i);
            let mut s = tx.get(STOCK, sk).ok_or(Abort::NotFound)?.to_vec();
            s[S_QUANTITY] = if s[S_QUANTITY] >= l.qty + RESTOCK_MARGIN {
                s[S_QUANTITY] - l.qty
            } else {
                s[S_QUANTITY] + RESTOCK - l.qty
            };
            s[S_YTD] += l.qty;
            s[S_ORDER_CNT] += 1;
            let remote = l.supply_w != w;
            s[S_REMOTE_CNT] += remote as u64;
            tx.write(STOCK, sk, &s);
            let mut ol = [0; ORDER_LINE_WORDS as usize];
            ol[OL_I_ID] = l.i;
            ol[OL_SUPPLY_W_ID] = l.supply_w;
            ol[OL_QUANTITY] = l.qty;
            ol[OL_AMOUNT] = l.qty * price;
            tx.insert(ORDER_LINE, order_line(w, d, o, k as u64 + 1), &ol);
            effect.lines.push((l.supply_w, l.qty, remote));
        }
        let mut row = [0; ORDER_WORDS as usize];
        row[O_C_ID] = c;
        row[O_ENTRY_D] = date;
        row[O_OL_CNT] = lines.len() as u64;
        row[O_ALL_LOCAL] = all_local as u64;
        tx.insert(ORDER, order(w, d, o), &row);
        tx.insert(NEW_ORDER, order(w, d, o), &[o]);
        tx.insert(ORDER_BY_CUSTOMER, order_by_customer(w, d, c, o), &[o]);
        Ok(effect)
    }

    /// The customer `sel` names in district `d` of `w` (by last name: the one at position
    /// ⌈n/2⌉ by first name, 2.5.2.2; CUSTOMER_BY_NAME never changes, so its scan needs no
    /// guard).
    pub(crate) async fn resolve<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        w: u64,
        d: u64,
        sel: CustomerSel,
    ) -> Result<u64, Abort> {
        match sel {
            CustomerSel::Id(c) => Ok(c),
            CustomerSel::Last(last) => {
                let (lo, hi) = customer_by_name_range(w, d, last);
                let keys = tx
                    .scan(CUSTOMER_BY_NAME, lo, hi, CUSTOMERS_MAX as u32, false)
                    .await?;
                if keys.is_empty() {
                    return Err(Abort::NotFound);
                }
                Ok(customer_by_name_customer(keys[(keys.len() - 1) / 2]))
            }
        }
    }

    /// Payment (2.5.2): adds the amount to W_YTD and D_YTD, takes it off the customer's
    /// balance, and inserts a HISTORY row (kept with the customer).
    #[allow(clippy::too_many_arguments)]
    async fn payment<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        w: u64,
        d: u64,
        c_w: u64,
        c_d: u64,
        sel: CustomerSel,
        amount: u64,
    ) -> Result<Effect, Abort> {
        let (wk, dk) = (warehouse(w), district(w, d));
        tx.fetch(&[(WAREHOUSE, wk, true), (DISTRICT, dk, true)])
            .await?;
        let mut wr = tx.get(WAREHOUSE, wk).ok_or(Abort::NotFound)?.to_vec();
        wr[W_YTD] += amount;
        tx.write(WAREHOUSE, wk, &wr);
        let mut dr = tx.get(DISTRICT, dk).ok_or(Abort::NotFound)?.to_vec();
        dr[D_YTD] += amount;
        tx.write(DISTRICT, dk, &dr);
        let c = self.resolve(tx, c_w, c_d, sel).await?;
        let ck = customer(c_w, c_d, c);
        let mut cr = tx.read_for_update(CUSTOMER, ck).await?.to_vec();
        cr[C_BALANCE] = (cr[C_BALANCE] as i64 - amount as i64) as u64;
        cr[C_YTD_PAYMENT] += amount;
        cr[C_PAYMENT_CNT] += 1;
        if cr[C_PAYMENT_CNT] > PAYMENTS_MAX {
            return Err(Abort::TableFull);
        }
        if cr[C_CREDIT] == 1 {
            // C_DATA gets C_ID, C_D_ID, C_W_ID, D_ID, W_ID and H_AMOUNT prepended.
            cr[C_DATA] = [c, c_d, c_w, d, w, amount]
                .iter()
                .fold(cr[C_DATA], |h, v| (h ^ v).wrapping_mul(C_DATA_MULTIPLIER));
        }
        tx.write(CUSTOMER, ck, &cr);
        let mut h = [0; HISTORY_WORDS as usize];
        (h[H_C_ID], h[H_C_D_ID], h[H_C_W_ID]) = (c, c_d, c_w);
        (h[H_D_ID], h[H_W_ID]) = (d, w);
        (h[H_DATE], h[H_AMOUNT]) = (tx.now_ns().max(LOAD_DATE), amount);
        tx.insert(HISTORY, history(c_w, c_d, c, cr[C_PAYMENT_CNT]), &h);
        Ok(Effect {
            payment: Some((district_index(w, d), amount)),
            ..Effect::default()
        })
    }

    /// OrderStatus (2.6.2): the customer, their newest order and its lines. The district
    /// row orders the ORDER_BY_CUSTOMER scan against NewOrder's inserts, so it is read for
    /// update and written back unchanged.
    async fn order_status<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        w: u64,
        d: u64,
        sel: CustomerSel,
    ) -> Result<(), Abort> {
        let c = self.resolve(tx, w, d, sel).await?;
        let dk = district(w, d);
        tx.fetch(&[(CUSTOMER, customer(w, d, c), false), (DISTRICT, dk, true)])
            .await?;
        let dr = tx.get(DISTRICT, dk).ok_or(Abort::NotFound)?.to_vec();
        tx.write(DISTRICT, dk, &dr);
        let newest = tx
            .scan(
                ORDER_BY_CUSTOMER,
                order_by_customer(w, d, c, 0),
                order_by_customer(w, d, c, ORDER_ID_MAX),
                1,
                true,
            )
            .await?;
        // Every customer has an order from the load.
        let o = order_by_customer_order(*newest.first().ok_or(Abort::NotFound)?);
        let n = tx.read(ORDER, order(w, d, o)).await?[O_OL_CNT];
        let batch: Vec<_> = (1..=n)
            .map(|ol| (ORDER_LINE, order_line(w, d, o, ol), false))
            .collect();
        tx.fetch(&batch).await
    }

    /// Delivery (2.7.4): in each district, the oldest undelivered order: its NEW-ORDER row
    /// deleted, carrier set, lines dated, their amounts added to the customer's balance.
    async fn delivery<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        w: u64,
        carrier: u64,
        districts: std::ops::Range<u64>,
    ) -> Result<Effect, Abort> {
        let mut effect = Effect::default();
        let date = tx.now_ns().max(LOAD_DATE);
        for d in districts {
            let dk = district(w, d);
            let mut dr = tx.read_for_update(DISTRICT, dk).await?.to_vec();
            let oldest = tx
                .scan(
                    NEW_ORDER,
                    order(w, d, dr[D_NEXT_DELIVERY_O_ID]),
                    order(w, d, ORDER_ID_MAX),
                    1,
                    false,
                )
                .await?;
            let Some(&nk) = oldest.first() else {
                // Nothing to deliver in this district (2.7.4.2): skipped.
                tx.write(DISTRICT, dk, &dr);
                continue;
            };
            let o = rest_of(nk);
            tx.delete(NEW_ORDER, nk).await?;
            let ok = order(w, d, o);
            let mut or = tx.read_for_update(ORDER, ok).await?.to_vec();
            or[O_CARRIER_ID] = carrier;
            tx.write(ORDER, ok, &or);
            let batch: Vec<_> = (1..=or[O_OL_CNT])
                .map(|ol| (ORDER_LINE, order_line(w, d, o, ol), true))
                .collect();
            tx.fetch(&batch).await?;
            let mut total = 0;
            for &(_, lk, _) in &batch {
                let mut l = tx.get(ORDER_LINE, lk).ok_or(Abort::NotFound)?.to_vec();
                l[OL_DELIVERY_D] = date;
                total += l[OL_AMOUNT];
                tx.write(ORDER_LINE, lk, &l);
            }
            let ck = customer(w, d, or[O_C_ID]);
            let mut cr = tx.read_for_update(CUSTOMER, ck).await?.to_vec();
            cr[C_BALANCE] = (cr[C_BALANCE] as i64 + total as i64) as u64;
            cr[C_DELIVERY_CNT] += 1;
            tx.write(CUSTOMER, ck, &cr);
            dr[D_NEXT_DELIVERY_O_ID] = o + 1;
            tx.write(DISTRICT, dk, &dr);
            effect.delivered.push(district_index(w, d));
        }
        Ok(effect)
    }

    /// StockLevel (2.8.2): distinct items of the district's last 20 orders whose stock is
    /// below `threshold`. Order ids below D_NEXT_O_ID all exist, so the orders and their
    /// lines are read by key, not scanned.
    async fn stock_level<P: Protocol>(
        &self,
        tx: &mut Txn<'_, P>,
        w: u64,
        d: u64,
        threshold: u64,
    ) -> Result<u64, Abort> {
        let next = tx.read(DISTRICT, district(w, d)).await?[D_NEXT_O_ID];
        let first = next.saturating_sub(STOCK_LEVEL_ORDERS).max(1);
        let orders: Vec<_> = (first..next)
            .map(|o| (ORDER, order(w, d, o), false))
            .collect();
        tx.fetch(&orders).await?;
        let mut lines = Vec::new();
        for &(_, ok, _) in &orders {
            let n = tx.get(ORDER, ok).ok_or(Abort::NotFound)?[O_OL_CNT];
            let o = rest_of(ok);
            lines.extend((1..=n).map(|ol| (ORDER_LINE, order_line(w, d, o, ol), false)));
        }
        tx.fetch(&lines).await?;
        let mut items = lines
            .iter()
            .map(|&(_, lk, _)| tx.get(ORDER_LINE, lk).map(|l| l[OL_I_ID]))
            .collect::<Option<Vec<u64>>>()
            .ok_or(Abort::NotFound)?;
        items.sort_unstable();
        items.dedup();
        let stocks: Vec<_> = items.iter().map(|&i| (STOCK, stock(w, i), false)).collect();
        tx.fetch(&stocks).await?;
        Ok(stocks
            .iter()
            .filter(|&&(_, sk, _)| tx.get(STOCK, sk).is_some_and(|s| s[S_QUANTITY] < threshold))
            .count() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Params;

    #[test]
    fn tpcc_inputs_encode_and_decode_back_and_bad_words_are_refused() {
        let t = Tpcc::from_params(&Params::new(), 3).unwrap();
        let mut rng = Rng::new(4);
        let mut words = Vec::new();
        let mut kinds = std::collections::BTreeSet::new();
        for _ in 0..5_000 {
            let (ty, input) = t.generate_input(&mut rng, NodeId(2));
            kinds.insert(ty);
            words.clear();
            input.encode(&mut words);
            assert_eq!(words[0], ty as u64, "the type's index leads");
            assert_eq!(Input::decode(&words), Ok(input));
        }
        assert_eq!(kinds.len(), TYPES.len(), "every type drawn");
        assert!(Input::decode(&[5, 0, 0]).is_err(), "unknown type");
        assert!(Input::decode(&[4, 0, 10, 15]).is_err(), "district 10");
        assert!(Input::decode(&[0, 0, 1, 1, 4]).is_err(), "4 order lines");
        assert!(
            Input::decode(&[3, 0, 1, 5, 6]).is_err(),
            "districts past the tenth"
        );
        assert!(Input::decode(&[2, 0, 1, 2, 3]).is_err(), "unknown selector");
        assert!(
            Input::decode(&[4, 0, 1, 15, 0]).is_err(),
            "a word left over"
        );
    }

    #[test]
    fn tpcc_standard_mix_draws_the_spec_shares_and_remote_accesses() {
        let t = Tpcc::from_params(&Params::new(), 2).unwrap();
        let mut rng = Rng::new(9);
        let draws = 100_000;
        let (mut types, mut lines, mut remote_lines, mut rollbacks) = ([0u64; 5], 0, 0, 0);
        let (mut payments, mut remote_payments, mut by_name) = (0, 0, 0);
        for _ in 0..draws {
            let (ty, input) = t.generate_input(&mut rng, NodeId(1));
            types[ty] += 1;
            match input {
                Input::NewOrder { w, lines: ls, .. } => {
                    assert_eq!(w, 1, "home warehouse of node 1");
                    lines += ls.len() as u64;
                    remote_lines += ls.iter().filter(|l| l.supply_w != w).count() as u64;
                    rollbacks += ls.iter().any(|l| l.i > t.items) as u64;
                }
                Input::Payment {
                    w, c_w, customer, ..
                } => {
                    payments += 1;
                    remote_payments += (c_w != w) as u64;
                    by_name += matches!(customer, CustomerSel::Last(_)) as u64;
                }
                _ => {}
            }
        }
        let share = |n: u64, of: u64| n as f64 * 100.0 / of as f64;
        let near = |got: f64, want: f64, tol: f64| (got - want).abs() <= tol;
        for (ty, want) in [45.0, 43.0, 4.0, 4.0, 4.0].into_iter().enumerate() {
            assert!(
                near(share(types[ty], draws), want, 0.6),
                "{}: {types:?}",
                TYPES[ty]
            );
        }
        assert!(
            near(share(remote_lines, lines), 1.0, 0.2),
            "{remote_lines} of {lines}"
        );
        assert!(near(share(rollbacks, types[0]), 1.0, 0.3), "{rollbacks}");
        assert!(near(share(remote_payments, payments), 15.0, 0.6));
        assert!(near(share(by_name, payments), 60.0, 0.8));
    }

    #[test]
    fn tpcc_payment_remote_warehouse_makes_the_paid_warehouse_remote_and_keeps_the_customer_home() {
        let p: Params = [("payment_remote", "warehouse"), ("warehouses", "2")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let t = Tpcc::from_params(&p, 3).unwrap();
        let mut rng = Rng::new(10);
        let (mut payments, mut remote) = (0, 0);
        for _ in 0..50_000 {
            if let (_, Input::Payment { w, d, c_w, c_d, .. }) =
                t.generate_input(&mut rng, NodeId(1))
            {
                payments += 1;
                assert!((2..4).contains(&c_w), "the customer is node 1's: {c_w}");
                // Another warehouse (of any node, this one's other included) is paid.
                if w != c_w {
                    remote += 1;
                } else {
                    assert_eq!(d, c_d);
                }
            }
        }
        let share = remote as f64 * 100.0 / payments as f64;
        assert!((share - 15.0).abs() < 0.8, "{share}");
        let e = Tpcc::from_params(
            &[("payment_remote".to_string(), "district".to_string())].into(),
            1,
        )
        .unwrap_err();
        assert!(
            e.0.contains("payment_remote=district") && e.0.contains("customer, warehouse"),
            "{e}"
        );
    }
}
