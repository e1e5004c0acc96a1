//! TPC-C's initial population (spec 4.3.3.1), per node for its warehouses, and the random
//! functions the spec defines (NURand, 2.1.6).

use super::keys::*;
use super::Tpcc;
use atoll_fabric::rng::Rng;
use atoll_storage::{Store, StoreError};

/// NURand's `A` for last names, customer ids and item ids (2.1.6).
pub const A_LAST: u64 = 255;
pub const A_C_ID: u64 = 1023;
pub const A_OL_I_ID: u64 = 8191;
/// NURand's `C` for last names at load and in the run: their difference is in 65..=119 and
/// neither 96 nor 112 (2.1.6.1).
pub const C_LAST_LOAD: u64 = 157;
pub const C_LAST_RUN: u64 = 223;
pub const C_C_ID: u64 = 259;
pub const C_OL_I_ID: u64 = 7911;
const _: () = assert!(C_LAST_RUN - C_LAST_LOAD >= 65 && C_LAST_RUN - C_LAST_LOAD <= 119);

/// Seeds of the load's random streams: the same population on every run and every node
/// (ITEM is replicated, so every node must load the same rows).
const LOAD_SEED: u64 = 0x7bcc_0001;
const ITEM_SEED: u64 = 0x7bcc_0002;

/// A date the load writes (O_ENTRY_D, H_DATE, OL_DELIVERY_D): not 0, which means null.
pub const LOAD_DATE: u64 = 1;
/// Money in cents.
pub const CENTS: u64 = 100;
/// Initial C_BALANCE: −10.00; C_YTD_PAYMENT and H_AMOUNT: 10.00; C_CREDIT_LIM 50,000.00.
pub const LOAD_BALANCE: i64 = -10 * CENTS as i64;
pub const LOAD_PAYMENT: u64 = 10 * CENTS;
const CREDIT_LIM: u64 = 50_000 * CENTS;
/// Taxes and discounts in basis points: W_TAX, D_TAX 0.0000..=0.2000, C_DISCOUNT ..=0.5000.
const TAX_MAX_BP: u64 = 2000;
const DISCOUNT_MAX_BP: u64 = 5000;
/// Percent of customers with bad credit, and of items and stock with "ORIGINAL" data.
const BAD_CREDIT_PERCENT: u64 = 10;
const ORIGINAL_PERCENT: u64 = 10;
/// I_IM_ID 1..=10000, I_PRICE 1.00..=100.00, S_QUANTITY 10..=100, OL_QUANTITY 5,
/// OL_AMOUNT 0.01..=9999.99 for undelivered orders, O_CARRIER_ID 1..=10.
const IM_ID_MAX: u64 = 10_000;
const PRICE_MIN: u64 = CENTS;
const PRICE_MAX: u64 = 100 * CENTS;
pub const STOCK_QUANTITY_MIN: u64 = 10;
pub const STOCK_QUANTITY_MAX: u64 = 100;
const LOAD_OL_QUANTITY: u64 = 5;
const OL_AMOUNT_MAX: u64 = 999_999;
pub const CARRIERS: u64 = 10;

/// NURand(A, x, y) with constant `c` (2.1.6).
pub fn nurand(rng: &mut Rng, a: u64, c: u64, x: u64, y: u64) -> u64 {
    (((rng.range_inclusive(0, a) | rng.range_inclusive(x, y)) + c) % (y - x + 1)) + x
}

/// Whether a percent-`p` event happens.
pub fn percent(rng: &mut Rng, p: u64) -> bool {
    rng.below(100) < p
}

impl Tpcc {
    /// The highest last-name number that some customer of every district has: the first
    /// 1000 customers take names 0..=999 in order (4.3.3.1), so with fewer customers the
    /// run draws among the names they have.
    pub fn last_name_max(&self) -> u64 {
        self.customers_per_district.min(LAST_NAMES) - 1
    }

    /// The loaded last name of customer `c` (1-based).
    fn loaded_last_name(&self, rng: &mut Rng, c: u64) -> u64 {
        if c <= LAST_NAMES {
            c - 1
        } else {
            nurand(rng, A_LAST, C_LAST_LOAD, 0, LAST_NAMES - 1)
        }
    }

    /// Loads ITEM (all of it) and the warehouses of `store.node`.
    pub fn load_node(&self, store: &Store) -> Result<(), StoreError> {
        let mut rng = Rng::new(ITEM_SEED);
        for i in 1..=self.items {
            let row = [
                rng.range_inclusive(1, IM_ID_MAX),
                rng.range_inclusive(PRICE_MIN, PRICE_MAX),
                percent(&mut rng, ORIGINAL_PERCENT) as u64,
            ];
            store.insert(ITEM, item(i), &row)?;
        }
        for w in self.warehouses_of(store.node.0) {
            self.load_warehouse(store, w)?;
        }
        Ok(())
    }

    fn load_warehouse(&self, store: &Store, w: u64) -> Result<(), StoreError> {
        let mut rng = Rng::derive(LOAD_SEED, w);
        let cpd = self.customers_per_district;
        let district_ytd = cpd * LOAD_PAYMENT;
        store.insert(
            WAREHOUSE,
            warehouse(w),
            &[rng.below(TAX_MAX_BP + 1), DISTRICTS * district_ytd],
        )?;
        for i in 1..=self.items {
            let mut row = [0; STOCK_WORDS as usize];
            row[S_QUANTITY] = rng.range_inclusive(STOCK_QUANTITY_MIN, STOCK_QUANTITY_MAX);
            row[S_ORIGINAL] = percent(&mut rng, ORIGINAL_PERCENT) as u64;
            store.insert(STOCK, stock(w, i), &row)?;
        }
        let first_delivery = cpd - self.undelivered_loaded() + 1;
        for d in 0..DISTRICTS {
            let mut row = [0; DISTRICT_WORDS as usize];
            row[D_TAX] = rng.below(TAX_MAX_BP + 1);
            row[D_YTD] = district_ytd;
            row[D_NEXT_O_ID] = cpd + 1;
            row[D_NEXT_DELIVERY_O_ID] = first_delivery;
            store.insert(DISTRICT, district(w, d), &row)?;
            for c in 1..=cpd {
                let mut row = [0; CUSTOMER_WORDS as usize];
                row[C_LAST] = self.loaded_last_name(&mut rng, c);
                row[C_FIRST] = rng.below(FIRST_NAMES);
                row[C_CREDIT] = percent(&mut rng, BAD_CREDIT_PERCENT) as u64;
                row[C_CREDIT_LIM] = CREDIT_LIM;
                row[C_DISCOUNT] = rng.below(DISCOUNT_MAX_BP + 1);
                row[C_BALANCE] = LOAD_BALANCE as u64;
                row[C_YTD_PAYMENT] = LOAD_PAYMENT;
                row[C_PAYMENT_CNT] = 1;
                store.insert(CUSTOMER, customer(w, d, c), &row)?;
                let name = customer_by_name(w, d, row[C_LAST], row[C_FIRST], c);
                store.insert(CUSTOMER_BY_NAME, name, &[c])?;
                let mut h = [0; HISTORY_WORDS as usize];
                (h[H_C_ID], h[H_C_D_ID], h[H_C_W_ID]) = (c, d, w);
                (h[H_D_ID], h[H_W_ID]) = (d, w);
                (h[H_DATE], h[H_AMOUNT]) = (LOAD_DATE, LOAD_PAYMENT);
                store.insert(HISTORY, history(w, d, c, 1), &h)?;
            }
            // O_C_ID is a random permutation of the customers.
            let mut perm: Vec<u64> = (1..=cpd).collect();
            for k in (1..perm.len()).rev() {
                perm.swap(k, rng.below(k as u64 + 1) as usize);
            }
            for o in 1..=cpd {
                let c = perm[o as usize - 1];
                let delivered = o < first_delivery;
                let mut row = [0; ORDER_WORDS as usize];
                row[O_C_ID] = c;
                row[O_ENTRY_D] = LOAD_DATE;
                row[O_CARRIER_ID] = if delivered {
                    rng.range_inclusive(1, CARRIERS)
                } else {
                    0
                };
                row[O_OL_CNT] = rng.range_inclusive(ORDER_LINES_MIN, ORDER_LINES_MAX);
                row[O_ALL_LOCAL] = 1;
                store.insert(ORDER, order(w, d, o), &row)?;
                store.insert(ORDER_BY_CUSTOMER, order_by_customer(w, d, c, o), &[o])?;
                for ol in 1..=row[O_OL_CNT] {
                    let mut line = [0; ORDER_LINE_WORDS as usize];
                    line[OL_I_ID] = rng.range_inclusive(1, self.items);
                    line[OL_SUPPLY_W_ID] = w;
                    line[OL_DELIVERY_D] = if delivered { LOAD_DATE } else { 0 };
                    line[OL_QUANTITY] = LOAD_OL_QUANTITY;
                    line[OL_AMOUNT] = if delivered {
                        0
                    } else {
                        rng.range_inclusive(1, OL_AMOUNT_MAX)
                    };
                    store.insert(ORDER_LINE, order_line(w, d, o, ol), &line)?;
                }
                if !delivered {
                    store.insert(NEW_ORDER, order(w, d, o), &[o])?;
                }
            }
        }
        Ok(())
    }
}
